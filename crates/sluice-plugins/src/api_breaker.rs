//! `api-breaker`: a circuit breaker per route (APISIX's plugin, same fields and defaults).
//!
//! Responses with an `unhealthy.http_statuses` status (default 500) are counted; at
//! `unhealthy.failures` (default 3) the breaker opens and requests are answered
//! `break_response_code` (with `break_response_body` and `break_response_headers`) without
//! reaching the upstream: for 2 seconds the first time, then 4, 8, ... doubling each time it
//! opens again, up to `max_breaker_sec` (default 300). Once the time is over, requests pass
//! again; `healthy.successes` (default 3) responses in a row with a `healthy.http_statuses`
//! status (default 200) close it for good (the next opening is 2 seconds again).
//!
//! The state is shared by every worker (atomics in the plugin state registry, kept across
//! reloads that keep the route's breaker configuration). The gateway's own answers (a 502
//! when the upstream cannot be reached) count like the upstream's, as in APISIX; the
//! breaker's own answers do not.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, ResponseView, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::{Num, check_header_name, check_header_value, check_status, whole};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    break_response_code: Num,
    #[serde(default)]
    break_response_body: Option<String>,
    #[serde(default)]
    break_response_headers: Vec<HeaderKv>,
    #[serde(default = "default_max")]
    max_breaker_sec: Num,
    #[serde(default)]
    unhealthy: Unhealthy,
    #[serde(default)]
    healthy: Healthy,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct HeaderKv {
    key: String,
    value: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct Unhealthy {
    http_statuses: Vec<Num>,
    failures: Num,
}

impl Default for Unhealthy {
    fn default() -> Self {
        Unhealthy {
            http_statuses: vec![Num::Whole(500)],
            failures: Num::Whole(3),
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct Healthy {
    http_statuses: Vec<Num>,
    successes: Num,
}

impl Default for Healthy {
    fn default() -> Self {
        Healthy {
            http_statuses: vec![Num::Whole(200)],
            successes: Num::Whole(3),
        }
    }
}

fn default_max() -> Num {
    Num::Whole(300)
}

pub(crate) struct Factory;

fn statuses(list: &[Num], v: &mut Validator) -> Option<Vec<u16>> {
    v.field("http_statuses", |v| {
        if list.is_empty() {
            v.error("must not be empty");
            return None;
        }
        // Every bad status is reported, not only the first.
        let out: Vec<Option<u16>> = list
            .iter()
            .enumerate()
            .map(|(i, s)| v.index(i, |v| check_status(*s, 200, v)))
            .collect();
        out.into_iter().collect()
    })
}

impl PluginFactory for Factory {
    crate::util::describe!("api-breaker", 1005, Config);

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let code = v.field("break_response_code", |v| {
            check_status(c.break_response_code, 200, v)
        });
        let max = v.field("max_breaker_sec", |v| {
            whole(c.max_breaker_sec, 3, 86_400, " seconds", v)
        });
        let mut headers_ok = true;
        v.field("break_response_headers", |v| {
            for (i, h) in c.break_response_headers.iter().enumerate() {
                v.index(i, |v| {
                    headers_ok &= v.field("key", |v| check_header_name(&h.key, v));
                    headers_ok &= v.field("value", |v| check_header_value(&h.value, v));
                });
            }
        });
        let unhealthy = v.field("unhealthy", |v| {
            let s = statuses(&c.unhealthy.http_statuses, v);
            let f = v.field("failures", |v| {
                whole(c.unhealthy.failures, 1, 1_000_000, "", v)
            });
            Some((s?, f? as u32))
        });
        let healthy = v.field("healthy", |v| {
            let s = statuses(&c.healthy.http_statuses, v);
            let n = v.field("successes", |v| {
                whole(c.healthy.successes, 1, 1_000_000, "", v)
            });
            Some((s?, n? as u32))
        });
        let (code, max, (unhealthy, failures), (healthy, successes)) =
            (code?, max?, unhealthy?, healthy?);
        if !headers_ok {
            return None;
        }
        let mut answer = Response::new(code);
        for h in &c.break_response_headers {
            answer = answer.header(&h.key, h.value.as_bytes());
        }
        if let Some(b) = &c.break_response_body {
            answer = answer.body(b.clone().into_bytes());
        }
        let key = format!("api-breaker/{}/{config}", cx.owner);
        let state = cx.state.get_or_insert_carried(&key, State::default);
        Some(Arc::new(Breaker {
            owner: cx.owner.into(),
            answer,
            max: Duration::from_secs(max),
            unhealthy,
            failures,
            healthy,
            successes,
            state,
        }))
    }
}

/// A breaker's shared state.
#[derive(Debug, Default)]
struct State {
    /// Unhealthy answers in a row.
    failures: AtomicU32,
    /// Healthy answers in a row since the breaker last opened.
    successes: AtomicU32,
    /// Times it opened since it last closed for good.
    opened: AtomicU32,
    /// Until when (see [`now_ms`]) it is open.
    open_until: AtomicU64,
}

/// Carried by a binary upgrade: an open breaker stays open for the time it had left, and its
/// counts go on.
impl sluice_core::state::Carry for State {
    fn export(&self) -> serde_json::Value {
        let until = self.open_until.load(Relaxed);
        serde_json::json!({
            "failures": self.failures.load(Relaxed),
            "successes": self.successes.load(Relaxed),
            "opened": self.opened.load(Relaxed),
            "open_ms": until.saturating_sub(now_ms()),
        })
    }

    fn import(&self, v: &serde_json::Value) {
        let n = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        let small = |k: &str| u32::try_from(n(k)).unwrap_or(u32::MAX);
        self.failures.store(small("failures"), Relaxed);
        self.successes.store(small("successes"), Relaxed);
        self.opened.store(small("opened"), Relaxed);
        let open = n("open_ms");
        if open > 0 {
            self.open_until.store(now_ms().saturating_add(open), Relaxed);
        }
    }
}

fn now_ms() -> u64 {
    static EPOCH: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);
    EPOCH.elapsed().as_millis() as u64 + 1
}

struct Breaker {
    /// Where it is configured (`route:<id>`), for the log.
    owner: Box<str>,
    answer: Response,
    max: Duration,
    unhealthy: Vec<u16>,
    failures: u32,
    healthy: Vec<u16>,
    successes: u32,
    state: Arc<State>,
}

impl Breaker {
    fn is_open(&self) -> bool {
        // The clock is read only once the breaker has opened.
        self.state.opened.load(Relaxed) > 0 && now_ms() < self.state.open_until.load(Relaxed)
    }
}

impl Plugin for Breaker {
    fn phases(&self) -> Phases {
        Phases::ACCESS.with(Phases::HEADER_FILTER)
    }

    fn access(&self, _req: &mut RequestHead, _cx: &mut Ctx<'_>) -> Flow {
        if self.is_open() {
            return Flow::Respond(self.answer.clone());
        }
        Flow::Continue
    }

    fn header_filter(&self, _req: &RequestHead, resp: ResponseView<'_>, _cx: &mut Ctx<'_>) {
        let s = &*self.state;
        if matches!(resp, ResponseView::Own(_)) && self.is_open() {
            return; // the breaker's own answer
        }
        let status = resp.status();
        if self.unhealthy.contains(&status) {
            s.successes.store(0, Relaxed);
            let n = s.failures.fetch_add(1, Relaxed) + 1;
            if n >= self.failures {
                s.failures.store(0, Relaxed);
                let opened = s.opened.fetch_add(1, Relaxed).saturating_add(1);
                // 2, 4, 8, ... seconds, up to max_breaker_sec.
                let secs = 1u64
                    .checked_shl(opened.min(40))
                    .unwrap_or(u64::MAX)
                    .min(self.max.as_secs());
                s.open_until.store(now_ms() + secs * 1000, Relaxed);
                tracing::warn!(owner = %self.owner, seconds = secs, "api-breaker: open");
            }
        } else if self.healthy.contains(&status) {
            if s.failures.load(Relaxed) != 0 {
                s.failures.store(0, Relaxed);
            }
            if s.opened.load(Relaxed) > 0 {
                let n = s.successes.fetch_add(1, Relaxed) + 1;
                if n >= self.successes {
                    s.successes.store(0, Relaxed);
                    s.opened.store(0, Relaxed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;

    /// A binary upgrade's hand-over: counts go on, and an open breaker stays open for the
    /// time it had left.
    #[test]
    fn a_breaker_is_carried_open_with_its_counts() {
        use sluice_core::state::Carry;
        use std::sync::atomic::Ordering::Relaxed;
        let old = super::State::default();
        old.failures.store(2, Relaxed);
        old.opened.store(1, Relaxed);
        old.open_until.store(super::now_ms() + 4_000, Relaxed);
        let new = super::State::default();
        new.import(&old.export());
        assert_eq!((new.failures.load(Relaxed), new.opened.load(Relaxed)), (2, 1));
        let left = new.open_until.load(Relaxed).saturating_sub(super::now_ms());
        assert!((3_000..=4_000).contains(&left), "{left} ms left");
        // A closed one stays closed.
        let closed = super::State::default();
        closed.import(&super::State::default().export());
        assert_eq!(closed.open_until.load(Relaxed), 0);
    }

    #[test]
    fn bad_settings_are_errors_with_their_paths() {
        for (cfg, want) in [
            ("{}", "break_response_code"),
            (
                "{break_response_code: 99}",
                "plugins.api-breaker.break_response_code: must be a status code from 200 to 599, got 99",
            ),
            (
                "{break_response_code: 502, max_breaker_sec: 1}",
                "plugins.api-breaker.max_breaker_sec: must be a whole number from 3 to 86400 seconds, got 1",
            ),
            (
                "{break_response_code: 502, unhealthy: {failures: 0}}",
                "plugins.api-breaker.unhealthy.failures",
            ),
            (
                "{break_response_code: 502, healthy: {http_statuses: [700]}}",
                "plugins.api-breaker.healthy.http_statuses[0]",
            ),
        ] {
            let errs = check("api-breaker", cfg, PluginScope::Route).join("\n");
            assert!(errs.contains(want), "{cfg}: {errs}");
        }
        let ok = check(
            "api-breaker",
            "{break_response_code: 502, break_response_body: down, break_response_headers: [{key: x-breaker, value: open}], unhealthy: {http_statuses: [500, 503], failures: 2}, healthy: {http_statuses: [200], successes: 1}}",
            PluginScope::Route,
        );
        assert!(ok.is_empty(), "{ok:?}");
    }
}
