//! `request-validation`: refuses requests whose headers or body do not match a JSON Schema, as
//! APISIX's `request-validation`.
//!
//! `{header_schema, body_schema, max_req_body_size: 67108864, rejected_code: 400,
//! rejected_msg}`, at least one of the two schemas. Schemas are compiled once, when the
//! configuration loads (the `jsonschema` crate: draft 7 unless `$schema` names 4 to 2020-12, `pattern` with the
//! linear-time `regex` crate, no remote `$ref`). The headers are an object of lowercased
//! names to their value (an array when a field repeats); the body is JSON, or, with
//! `Content-Type: application/x-www-form-urlencoded`, an object of its arguments. A refusal is
//! `rejected_code` with `rejected_msg`, or the validator's message.
//!
//! APISIX re-encodes a valid JSON body before proxying it, so that the gateway and the node
//! cannot read it differently; Sluice forwards the body as sent and refuses instead what two
//! parsers can read differently: duplicate object keys and a repeated `Content-Type`.

use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::{Num, check_status, headers_object, insert};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    header_schema: Option<Map<String, Value>>,
    #[serde(default)]
    body_schema: Option<Map<String, Value>>,
    #[serde(default)]
    max_req_body_size: Option<Num>,
    #[serde(default = "default_code")]
    rejected_code: Num,
    #[serde(default)]
    rejected_msg: Option<String>,
}

fn default_code() -> Num {
    Num::Whole(400)
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("request-validation", 2800, Config);

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        if c.header_schema.is_none() && c.body_schema.is_none() {
            v.error("give header_schema, body_schema or both");
            return None;
        }
        let compile = |field: &str, schema: Option<Map<String, Value>>, v: &mut Validator| {
            let Some(schema) = schema else {
                return Some(None);
            };
            v.field(field, |v| {
                let mut o =
                    jsonschema::options().with_pattern_options(jsonschema::PatternOptions::regex());
                // Draft 7 unless `$schema` names another: APISIX's validator implements drafts
                // 4 to 7, and the crate's first build costs 5 MiB for them against 10 MiB with
                // its default (2020-12, measured), once per process.
                if !schema.contains_key("$schema") {
                    o = o.with_draft(jsonschema::Draft::Draft7);
                }
                o
                    .build(&Value::Object(schema))
                    .map(Some)
                    .map_err(|e| v.error(format!("invalid JSON Schema: {e}")))
                    .ok()
            })
        };
        let header = compile("header_schema", c.header_schema, v);
        let body = compile("body_schema", c.body_schema, v);
        let max = crate::util::body_size_field("max_req_body_size", c.max_req_body_size, v);
        let code = v.field("rejected_code", |v| check_status(c.rejected_code, 200, v));
        if let Some(m) = &c.rejected_msg
            && (m.is_empty() || m.len() > 256)
        {
            v.error_at("rejected_msg", "must be 1 to 256 characters");
            return None;
        }
        Some(Arc::new(RequestValidation {
            header: header?,
            body: body?,
            max: max?,
            code: code?,
            msg: c.rejected_msg,
        }))
    }
}

struct RequestValidation {
    header: Option<jsonschema::Validator>,
    body: Option<jsonschema::Validator>,
    max: u64,
    code: u16,
    msg: Option<String>,
}

impl Plugin for RequestValidation {
    fn phases(&self) -> Phases {
        Phases::REWRITE
    }

    fn needs_body(&self) -> bool {
        self.body.is_some()
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        match self.check(req, cx) {
            Ok(()) => Flow::Continue,
            Err(why) => {
                tracing::debug!(route = cx.route_id(), cause = %why, "request-validation refused a request");
                let text = self.msg.clone().unwrap_or(why);
                Flow::Respond(
                    Response::new(self.code)
                        .header("Content-Type", b"text/plain")
                        .body(format!("{text}\n")),
                )
            }
        }
    }
}

impl RequestValidation {
    fn check(&self, req: &RequestHead, cx: &Ctx<'_>) -> Result<(), String> {
        if let Some(schema) = &self.header {
            let headers = headers_object(req);
            schema.validate(&headers).map_err(|e| e.to_string())?;
        }
        let Some(schema) = &self.body else {
            return Ok(());
        };
        // Read before the phases, up to the node's `max_body_vars_size`.
        let body = match cx.body().and_then(|b| b.raw()) {
            Some(b) if (b.len() as u64) <= self.max => b,
            Some(_) | None => return Err("request body too large".into()),
        };
        if body.is_empty() {
            return Err("request body is empty".into());
        }
        let mut types = req.header_values("content-type");
        let content_type = types.next();
        if types.next().is_some() {
            return Err("duplicated Content-Type header".into());
        }
        let form = content_type.is_some_and(|t| {
            t.len() >= 33 && t[..33].eq_ignore_ascii_case(b"application/x-www-form-urlencoded")
        });
        let value = if form {
            form_object(body)
        } else {
            strict_json(body).map_err(|e| format!("invalid JSON body: {e}"))?
        };
        schema.validate(&value).map_err(|e| e.to_string())
    }
}

/// A form body's arguments (percent-decoded, `+` a space).
fn form_object(body: &[u8]) -> Value {
    let mut out = Map::new();
    for (k, v) in form_urlencoded::parse(body) {
        insert(&mut out, k.into_owned(), v.into_owned());
    }
    Value::Object(out)
}

/// JSON with no object that repeats a key: where parsers differ (the first or the last
/// wins), the gateway and the node could read two different documents.
fn strict_json(body: &[u8]) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let v = de.deserialize_any_strict()?;
    de.end()?;
    Ok(v)
}

trait Strict {
    fn deserialize_any_strict(&mut self) -> Result<Value, serde_json::Error>;
}

impl<'de, R: serde_json::de::Read<'de>> Strict for serde_json::Deserializer<R> {
    fn deserialize_any_strict(&mut self) -> Result<Value, serde_json::Error> {
        de::Deserializer::deserialize_any(self, NoDuplicates)
    }
}

/// Builds a `Value`, refusing an object that repeats a key.
struct NoDuplicates;

impl<'de> de::DeserializeSeed<'de> for NoDuplicates {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(NoDuplicates)
    }
}

impl<'de> Visitor<'de> for NoDuplicates {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(n.into())
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(n.into())
    }
    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(NoDuplicates)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate key \"{key}\"")));
            }
            let value = map.next_value_seed(NoDuplicates)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_with_a_repeated_key_is_refused_at_any_depth() {
        assert!(strict_json(br#"{"a": 1, "b": [1, {"c": true}]}"#).is_ok());
        let e = strict_json(br#"{"a": 1, "a": 2}"#).unwrap_err();
        assert!(e.to_string().contains("duplicate key \"a\""), "{e}");
        assert!(strict_json(br#"[{"x": {"y": 1, "y": 1}}]"#).is_err());
        assert!(strict_json(b"{\"a\": 1} trailing").is_err());
        assert!(strict_json(b"not json").is_err());
    }

    #[test]
    fn forms_and_headers_repeat_as_arrays() {
        assert_eq!(
            form_object(b"a=1&b=x+y&a=2"),
            serde_json::json!({"a": ["1", "2"], "b": "x y"})
        );
        let req = crate::tests::head("GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a: 2\r\n\r\n");
        assert_eq!(
            headers_object(&req),
            serde_json::json!({"host": "h", "x-a": ["1", "2"]})
        );
    }
}
