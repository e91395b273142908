//! `mocking`: the gateway answers itself with a configured status, headers and body, after an
//! optional delay: static responses at the edge, stubs for APIs not built yet. The upstream
//! is never contacted.
//!
//! `{response_status: 200, content_type: "application/json;charset=utf8", response_example,
//! response_schema, response_headers: {name: value}, delay: 0, with_mock_header: true}`.
//! Without `response_example`, a JSON body is generated from `response_schema` for each request
//! (APISIX's way: examples where the schema gives them, random values elsewhere).

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
    response_example: Option<String>,
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
    crate::util::describe!("mocking", 10900, Config);

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
        // APISIX's response_schema: a JSON body generated from the schema for each request,
        // unless response_example is given (it wins, as in APISIX).
        let schema = match (&c.response_schema, c.response_example.is_none()) {
            (Some(schema), true) => {
                let json = c.content_type.split(';').next().unwrap_or("").trim();
                if !schema.is_object() {
                    v.error_at("response_schema", "must be a JSON schema object");
                    ok = false;
                } else if !matches!(json, "application/json" | "text/plain") {
                    v.error_at(
                        "content_type",
                        "a body generated from response_schema is JSON: use application/json or text/plain (XML is not generated)",
                    );
                    ok = false;
                }
                Some(schema.clone())
            }
            _ => None,
        };
        ok &= v.field("content_type", |v| check_header_value(&c.content_type, v));
        let mut resp = Response::new(status.unwrap_or(200))
            .header("Content-Type", c.content_type.as_bytes())
            .body(c.response_example.clone().unwrap_or_default().into_bytes());
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
                schema,
                delay: Duration::from_secs_f64(delay.unwrap_or(0.0)),
            }) as Arc<dyn Plugin>
        })
    }
}

struct Mocking {
    resp: Response,
    /// `response_schema`: the body is generated from it for each request.
    schema: Option<Value>,
    delay: Duration,
}

/// Deepest nesting of a schema followed when generating (deeper parts come out `null`).
const MAX_SCHEMA_DEPTH: u32 = 32;
/// Most values generated for one body (nested arrays multiply: 15 levels of 3 items would be
/// 14 million); beyond, `null`.
const MAX_GENERATED: usize = 10_000;

/// An example of `schema` as APISIX's mocking makes one: an object's properties, 1 to 3 items
/// of an array, and for a string, number, integer or boolean its `example` when it has one,
/// else a random value (1 to 10 lowercase letters, 0 to 10,000).
fn generate(schema: &Value, depth: u32, budget: &mut usize) -> Value {
    if depth > MAX_SCHEMA_DEPTH || *budget == 0 {
        return Value::Null;
    }
    *budget -= 1;
    let example = schema.get("example");
    let kind = schema
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_ascii_lowercase);
    match kind.as_deref() {
        Some("object") => object(schema, depth, budget),
        Some("array") => match schema.get("items") {
            Some(items) => Value::Array(
                (0..fastrand::usize(1..=3))
                    .map(|_| generate(items, depth + 1, budget))
                    .collect(),
            ),
            None => Value::Null,
        },
        Some("string") => match example {
            Some(Value::String(e)) => Value::String(e.clone()),
            _ => Value::String(
                (0..fastrand::usize(1..=10))
                    .map(|_| fastrand::lowercase())
                    .collect(),
            ),
        },
        Some("number") => match example.and_then(Value::as_f64) {
            Some(e) => serde_json::json!(e),
            None => serde_json::json!(fastrand::f64() * 10000.0),
        },
        Some("integer") => match example.and_then(Value::as_f64) {
            Some(e) => serde_json::json!(e.floor() as i64),
            None => serde_json::json!(fastrand::i64(1..=10000)),
        },
        Some("boolean") => match example.and_then(Value::as_bool) {
            Some(e) => Value::Bool(e),
            None => Value::Bool(fastrand::bool()),
        },
        _ => Value::Null,
    }
}

/// The properties of an object schema, generated (the schema's root is taken as an object).
fn object(schema: &Value, depth: u32, budget: &mut usize) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            out.insert(k.clone(), generate(p, depth + 1, budget));
        }
    }
    Value::Object(out)
}

impl Mocking {
    fn response(&self) -> Response {
        let mut r = self.resp.clone();
        if let Some(schema) = &self.schema {
            r.body = serde_json::to_vec(&object(schema, 0, &mut MAX_GENERATED.clone()))
                .unwrap_or_default()
                .into();
        }
        r
    }
}

impl Plugin for Mocking {
    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn access(&self, _req: &mut RequestHead, _cx: &mut Ctx<'_>) -> Flow {
        if self.delay.is_zero() {
            Flow::Respond(self.response())
        } else {
            Flow::Delayed(self.delay, Box::new(self.response()))
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;
    use sluice_core::Flow;

    #[test]
    fn bodies_are_generated_from_a_response_schema_as_apisix_does() {
        // APISIX's docs' schema: examples where given, values of the right type elsewhere.
        let b = build(
            "mocking",
            r#"{response_schema: {type: object, properties: {
                id: {type: string, example: abcd},
                ip: {type: number, example: 192.168},
                random_str_arr: {type: array, items: {type: string}},
                nested_obj: {type: object, properties: {
                    random_str: {type: string},
                    child_nested_obj: {type: object, properties: {
                        random_bool: {type: boolean, example: true},
                        random_int_arr: {type: array, items: {type: integer, example: 155}}}}}}}}}"#,
            &[],
        );
        let mut seen = std::collections::HashSet::new();
        for _ in 0..20 {
            let r = run(
                &*b.plugin,
                &mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
                &mut ctx(&b.consumers, CLIENT),
            )
            .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(v["id"], "abcd");
            assert_eq!(v["ip"], 192.168);
            let arr = v["random_str_arr"].as_array().unwrap();
            assert!(
                (1..=3).contains(&arr.len()) && arr.iter().all(|x| x.is_string()),
                "{v}"
            );
            let s = v["nested_obj"]["random_str"].as_str().unwrap();
            assert!((1..=10).contains(&s.len()) && s.bytes().all(|c| c.is_ascii_lowercase()));
            let child = &v["nested_obj"]["child_nested_obj"];
            assert_eq!(child["random_bool"], true);
            assert!(
                child["random_int_arr"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|x| x == 155)
            );
            seen.insert(s.to_owned());
        }
        assert!(seen.len() > 1, "generated for each request");
        // Nested arrays cannot make a body of millions of values.
        let mut deep = serde_json::json!({"type": "integer"});
        for _ in 0..20 {
            deep = serde_json::json!({"type": "array", "items": deep});
        }
        let schema = serde_json::json!({"type": "object", "properties": {"a": deep}});
        let body = serde_json::to_vec(&super::object(
            &schema,
            0,
            &mut super::MAX_GENERATED.clone(),
        ))
        .unwrap();
        assert!(body.len() < 200_000, "{} bytes", body.len());
        // An empty response_example is the body (APISIX), not a generated one.
        let b = build(
            "mocking",
            "{response_example: \"\", response_schema: {type: object, properties: {a: {type: string}}}}",
            &[],
        );
        let r = run(
            &*b.plugin,
            &mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            &mut ctx(&b.consumers, CLIENT),
        )
        .unwrap();
        assert!(r.body.is_empty());
        assert_eq!(
            check(
                "mocking",
                "{response_schema: {type: object}, content_type: application/xml}",
                PluginScope::Route
            ),
            vec![
                "plugins.mocking.content_type: a body generated from response_schema is JSON: use application/json or text/plain (XML is not generated)"
            ]
        );
    }

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
