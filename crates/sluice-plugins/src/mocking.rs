//! `mocking`: the gateway answers itself with a configured status, headers and body, after an
//! optional delay: static responses at the edge, stubs for APIs not built yet. The upstream
//! is never contacted.
//!
//! `{response_status: 200, content_type: "application/json;charset=utf8", response_example,
//! response_headers: {name: value}, delay: 0, with_mock_header: true}`.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::{Num, check_header_name, check_header_value, check_status, real};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "ok")]
    response_status: Num,
    #[serde(default = "json")]
    content_type: String,
    #[serde(default)]
    response_example: String,
    #[serde(default)]
    response_schema: Option<Value>,
    #[serde(default)]
    response_headers: serde_json::Map<String, Value>,
    #[serde(default = "no_delay")]
    delay: Num,
    #[serde(default = "yes")]
    with_mock_header: bool,
}

fn ok() -> Num {
    Num::Whole(200)
}

fn no_delay() -> Num {
    Num::Whole(0)
}

fn json() -> String {
    "application/json;charset=utf8".into()
}

fn yes() -> bool {
    true
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    fn name(&self) -> &'static str {
        "mocking"
    }

    fn priority(&self) -> i32 {
        10900
    }

    fn schema(&self) -> Option<Value> {
        Some(crate::util::schema_of::<Config>())
    }

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let status = v.field("response_status", |v| {
            check_status(c.response_status, 100, v)
        });
        let delay = v.field("delay", |v| {
            real(
                c.delay,
                |d| (0.0..=60.0).contains(&d),
                "from 0 to 60 seconds",
                v,
            )
        });
        let mut ok = status.is_some() && delay.is_some();
        if c.response_schema.is_some() {
            v.error_at(
                "response_schema",
                "generating examples from a schema is not available; use response_example",
            );
            ok = false;
        }
        ok &= v.field("content_type", |v| check_header_value(&c.content_type, v));
        let mut resp = Response::new(status.unwrap_or(200))
            .header("Content-Type", c.content_type.as_bytes())
            .body(c.response_example.clone().into_bytes());
        v.field("response_headers", |v| {
            for (name, value) in &c.response_headers {
                v.field(name, |v| {
                    let text = value
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| value.to_string());
                    if check_header_name(name, v) && check_header_value(&text, v) {
                        resp.headers.push((name.clone(), text.into_bytes()));
                    } else {
                        ok = false;
                    }
                });
            }
        });
        if c.with_mock_header {
            resp.headers.push(("X-Mock-By".into(), b"Sluice".to_vec()));
        }
        ok.then(|| {
            Arc::new(Mocking {
                resp,
                delay: Duration::from_secs_f64(delay.unwrap_or(0.0)),
            }) as Arc<dyn Plugin>
        })
    }
}

struct Mocking {
    resp: Response,
    delay: Duration,
}

impl Plugin for Mocking {
    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn access(&self, _req: &mut RequestHead, _cx: &mut Ctx<'_>) -> Flow {
        if self.delay.is_zero() {
            Flow::Respond(self.resp.clone())
        } else {
            Flow::Delayed(self.delay, Box::new(self.resp.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;
    use sluice_core::Flow;

    #[test]
    fn the_configured_response_comes_back() {
        let b = build(
            "mocking",
            "{response_status: 201, response_example: \"{\\\"id\\\":1}\", response_headers: {X-Stub: yes}}",
            &[],
        );
        let r = run(
            &*b.plugin,
            &mut head("POST /users HTTP/1.1\r\nHost: a\r\n\r\n"),
            &mut ctx(&b.consumers, CLIENT),
        )
        .unwrap();
        assert_eq!((r.status, body(&r).as_str()), (201, "{\"id\":1}"));
        let names: Vec<&str> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, vec!["Content-Type", "X-Stub", "X-Mock-By"]);
        let b = build("mocking", "{delay: 0.5}", &[]);
        match b.plugin.access(
            &mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            &mut ctx(&b.consumers, CLIENT),
        ) {
            Flow::Delayed(d, r) => assert_eq!((d.as_millis(), r.status), (500, 200)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert_eq!(
            check(
                "mocking",
                "{response_status: 42, delay: 100}",
                PluginScope::Route
            ),
            vec![
                "plugins.mocking.response_status: must be a status code from 100 to 599, got 42",
                "plugins.mocking.delay: must be from 0 to 60 seconds, got 100"
            ]
        );
        // Values past what the fields' numbers hold say the same.
        assert_eq!(
            check(
                "mocking",
                "{response_status: -1, delay: 1e300}",
                PluginScope::Route
            ),
            vec![
                "plugins.mocking.response_status: must be a status code from 100 to 599, got -1",
                "plugins.mocking.delay: must be from 0 to 60 seconds, got 1e300"
            ]
        );
        assert_eq!(
            check("mocking", "{delay: -1e-300}", PluginScope::Route),
            vec!["plugins.mocking.delay: must be from 0 to 60 seconds, got -1e-300"]
        );
    }
}
