//! `fault-injection`: delays, or aborts with a status, a share of requests, for resilience
//! testing.
//!
//! `{abort: {http_status, body, percentage, vars}, delay: {duration, percentage, vars}}`: at
//! least one of them. `percentage` (0-100, default 100) picks requests at random; `vars`
//! restricts the fault to requests matching conditions. A request picked for both is delayed,
//! then aborted.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::expr::Conds;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::{Num, check_status, real};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    abort: Option<AbortConfig>,
    #[serde(default)]
    delay: Option<Delay>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct AbortConfig {
    http_status: Num,
    #[serde(default)]
    body: String,
    /// Header fields of the answer (APISIX's `abort.headers`); values may name variables
    /// (`$remote_addr`).
    #[serde(default)]
    headers: serde_json::Map<String, Value>,
    #[serde(default = "all")]
    percentage: Num,
    #[serde(default)]
    vars: Option<Value>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Delay {
    duration: Num,
    #[serde(default = "all")]
    percentage: Num,
    #[serde(default)]
    vars: Option<Value>,
}

fn all() -> Num {
    Num::Whole(100)
}

pub(crate) struct Factory;

fn percentage(p: Num, v: &mut Validator) -> Option<f64> {
    v.field("percentage", |v| {
        real(p, |p| (0.0..=100.0).contains(&p), "from 0 to 100", v)
    })
}

fn conds(vars: &Option<Value>, v: &mut Validator) -> Option<Conds> {
    match vars {
        Some(vars) => v.field("vars", |v| Conds::parse(vars, v)),
        None => Some(Conds::default()),
    }
}

impl PluginFactory for Factory {
    crate::util::describe!("fault-injection", 11000, Config);

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        if c.abort.is_none() && c.delay.is_none() {
            v.error("one of abort or delay is required");
            return None;
        }
        let abort = c.abort.as_ref().and_then(|a| {
            v.field("abort", |v| {
                let status = v.field("http_status", |v| check_status(a.http_status, 200, v));
                let share = percentage(a.percentage, v);
                let when = conds(&a.vars, v)?;
                let headers = v.field("headers", |v| {
                    crate::proxy_rewrite::header_map(&a.headers, false, &|n| cx.uri_param(n), v)
                })?;
                Some(Abort {
                    answer: Response::new(status?).body(a.body.clone().into_bytes()),
                    headers,
                    share: share?,
                    when,
                })
            })
        });
        let delay = c.delay.as_ref().and_then(|d| {
            v.field("delay", |v| {
                let duration = v.field("duration", |v| {
                    real(
                        d.duration,
                        |d| d > 0.0 && d <= 60.0,
                        "more than 0 and at most 60 seconds",
                        v,
                    )
                });
                let share = percentage(d.percentage, v);
                let when = conds(&d.vars, v)?;
                Some((Duration::from_secs_f64(duration?), share?, when))
            })
        });
        if (c.abort.is_some() && abort.is_none()) || (c.delay.is_some() && delay.is_none()) {
            return None;
        }
        Some(Arc::new(FaultInjection { abort, delay }))
    }
}

struct FaultInjection {
    abort: Option<Abort>,
    delay: Option<(Duration, f64, Conds)>,
}

/// `abort`, compiled.
struct Abort {
    answer: Response,
    headers: Vec<(String, Vec<crate::proxy_rewrite::Piece>)>,
    share: f64,
    when: Conds,
}

fn picked(percentage: f64) -> bool {
    percentage >= 100.0 || fastrand::f64() * 100.0 < percentage
}

impl Plugin for FaultInjection {
    fn needs_body(&self) -> bool {
        self.abort.as_ref().is_some_and(|a| {
            a.when.needs_body()
                || a.headers
                    .iter()
                    .any(|(_, t)| crate::proxy_rewrite::reads_body(t))
        }) || self.delay.as_ref().is_some_and(|d| d.2.needs_body())
    }

    fn phases(&self) -> Phases {
        Phases::REWRITE
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let delay = self
            .delay
            .as_ref()
            .filter(|(_, p, when)| picked(*p) && when.matches(req, cx))
            .map(|d| d.0);
        let abort = self
            .abort
            .as_ref()
            .filter(|a| picked(a.share) && a.when.matches(req, cx))
            .map(|a| {
                a.headers.iter().fold(a.answer.clone(), |r, (name, t)| {
                    r.header(name, &crate::proxy_rewrite::render(t, req, cx))
                })
            });
        match (delay, abort) {
            (Some(d), Some(r)) => Flow::Delayed(d, Box::new(r)),
            (None, Some(r)) => Flow::Respond(r),
            (Some(d), None) => Flow::Sleep(d),
            (None, None) => Flow::Continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;
    use sluice_core::Flow;

    #[test]
    fn an_abort_carries_its_headers_with_variables_as_apisix() {
        let b = build(
            "fault-injection",
            "{abort: {http_status: 403, body: no, headers: {X-Fault: injected, X-Client: $remote_addr}}}",
            &[],
        );
        let mut cx = ctx(&b.consumers, CLIENT);
        let r = run(
            &*b.plugin,
            &mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            &mut cx,
        )
        .unwrap();
        assert_eq!(r.status, 403);
        let h: Vec<(String, String)> = r
            .headers
            .iter()
            .map(|(n, v)| (n.clone(), String::from_utf8_lossy(v).into_owned()))
            .collect();
        assert!(h.contains(&("X-Fault".into(), "injected".into())), "{h:?}");
        assert!(
            h.contains(&("X-Client".into(), "192.0.2.10".into())),
            "{h:?}"
        );
    }

    #[test]
    fn aborts_hit_about_the_configured_share() {
        let b = build(
            "fault-injection",
            "{abort: {http_status: 503, body: down, percentage: 25}}",
            &[],
        );
        let mut cx = ctx(&b.consumers, CLIENT);
        let aborted = (0..4000)
            .filter(|_| {
                run(
                    &*b.plugin,
                    &mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
                    &mut cx,
                )
                .is_some_and(|r| r.status == 503)
            })
            .count();
        assert!(
            (800..1200).contains(&aborted),
            "{aborted} of 4000 aborted, expected about 1000"
        );
    }

    #[test]
    fn vars_and_delays_apply() {
        let b = build(
            "fault-injection",
            "{delay: {duration: 0.2}, abort: {http_status: 418, vars: [[\"http_x_chaos\", \"==\", \"on\"]]}}",
            &[],
        );
        let mut cx = ctx(&b.consumers, CLIENT);
        match b
            .plugin
            .rewrite(&mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), &mut cx)
        {
            Flow::Sleep(d) => assert_eq!(d.as_millis(), 200),
            other => panic!("{other:?}"),
        }
        match b.plugin.rewrite(
            &mut head("GET / HTTP/1.1\r\nHost: a\r\nX-Chaos: on\r\n\r\n"),
            &mut cx,
        ) {
            Flow::Delayed(d, r) => assert_eq!((d.as_millis(), r.status), (200, 418)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert_eq!(
            check("fault-injection", "{}", PluginScope::Route),
            vec!["plugins.fault-injection: one of abort or delay is required"]
        );
        assert_eq!(
            check(
                "fault-injection",
                "{abort: {http_status: 600, percentage: 101}, delay: {duration: 0}}",
                PluginScope::Route
            ),
            vec![
                "plugins.fault-injection.abort.http_status: must be a status code from 200 to 599, got 600",
                "plugins.fault-injection.abort.percentage: must be from 0 to 100, got 101",
                "plugins.fault-injection.delay.duration: must be more than 0 and at most 60 seconds, got 0"
            ]
        );
    }

    #[test]
    fn shares_statuses_and_durations_are_bounded() {
        assert_eq!(
            check(
                "fault-injection",
                "{abort: {http_status: 65536, percentage: -1e-300}, delay: {duration: 1e300, percentage: 1e300}}",
                PluginScope::Route
            ),
            vec![
                "plugins.fault-injection.abort.http_status: must be a status code from 200 to 599, got 65536",
                "plugins.fault-injection.abort.percentage: must be from 0 to 100, got -1e-300",
                "plugins.fault-injection.delay.duration: must be more than 0 and at most 60 seconds, got 1e300",
                "plugins.fault-injection.delay.percentage: must be from 0 to 100, got 1e300"
            ]
        );
        assert_eq!(
            check(
                "fault-injection",
                "{delay: {duration: -60}}",
                PluginScope::Route
            ),
            vec![
                "plugins.fault-injection.delay.duration: must be more than 0 and at most 60 seconds, got -60"
            ]
        );
        assert_eq!(
            check(
                "fault-injection",
                "{delay: {duration: 1, percentage: inf}}",
                PluginScope::Route
            ),
            vec!["plugins.fault-injection.delay.percentage: must be a number, got \"inf\""]
        );
        assert_eq!(
            check(
                "fault-injection",
                "{abort: {http_status: 200, percentage: 0}, delay: {duration: 1e-9, percentage: 100}}",
                PluginScope::Route
            ),
            Vec::<String>::new()
        );
    }
}
