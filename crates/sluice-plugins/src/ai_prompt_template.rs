//! `ai-prompt-template`: named request templates. The client sends
//! `{"template_name": "...", <field>: <value>, ...}`; the template's `model` and `messages`
//! become the request, each `{{field}}` in them replaced by the client's value (APISIX fills
//! them with its body-transformer's templates; here the same placeholders, escaped as JSON
//! strings). An unknown or missing template name is answered 400.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::ai_prompt_decorator::{Prompt, check_prompts, over_size};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Body {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    messages: Vec<Prompt>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Template {
    name: String,
    template: Body,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    templates: Vec<Template>,
    #[serde(default)]
    max_req_body_size: Option<crate::util::Num>,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("ai-prompt-template", 1071, Config);

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let max_body = Some(crate::util::body_size_field(
            "max_req_body_size",
            c.max_req_body_size,
            v,
        )?);
        if c.templates.is_empty() {
            v.error_at("templates", "must have at least one template");
            return None;
        }
        let mut ok = true;
        v.field("templates", |v| {
            for (i, t) in c.templates.iter().enumerate() {
                v.index(i, |v| {
                    if t.name.is_empty() {
                        v.error_at("name", "must not be empty");
                        ok = false;
                    } else if c.templates[..i].iter().any(|o| o.name == t.name) {
                        v.error_at("name", format!("\"{}\" names two templates", t.name));
                        ok = false;
                    }
                    ok &= v.field("template", |v| {
                        v.field("messages", |v| check_prompts(&t.template.messages, v))
                    });
                });
            }
        });
        ok.then(|| {
            Arc::new(Templates {
                templates: c
                    .templates
                    .into_iter()
                    .map(|t| (t.name, t.template))
                    .collect(),
                max_body,
            }) as Arc<dyn Plugin>
        })
    }
}

struct Templates {
    templates: Vec<(String, Body)>,
    max_body: Option<u64>,
}

/// `text` with each `{{name}}` replaced by the client's field `name` (its text; other JSON
/// written as JSON), unknown names by nothing.
fn fill(text: &str, fields: &Map<String, Value>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            out.push_str(&rest[open..]);
            return out;
        };
        match fields.get(after[..close].trim()) {
            Some(Value::String(s)) => out.push_str(s),
            Some(Value::Null) | None => {}
            Some(other) => out.push_str(&other.to_string()),
        }
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    out
}

impl Plugin for Templates {
    fn phases(&self) -> Phases {
        Phases::REWRITE
    }

    fn needs_body(&self) -> bool {
        true
    }

    fn rewrite(&self, _req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        if let Some(f) = over_size(cx, self.max_body) {
            return f;
        }
        let raw = cx.body().and_then(|b| b.raw()).unwrap_or(b"");
        let fields = match serde_json::from_slice::<Value>(raw) {
            Ok(Value::Object(m)) => m,
            _ => {
                return Flow::Respond(Response::message(
                    400,
                    "the request body is not a JSON object",
                ));
            }
        };
        let Some(name) = fields.get("template_name").and_then(Value::as_str) else {
            return Flow::Respond(Response::message(
                400,
                "template name is missing in request.",
            ));
        };
        let Some((_, t)) = self.templates.iter().find(|(n, _)| n == name) else {
            return Flow::Respond(Response::message(
                400,
                &format!("template: {name} not configured."),
            ));
        };
        let mut body = Map::new();
        if let Some(m) = &t.model {
            body.insert("model".into(), Value::String(fill(m, &fields)));
        }
        let messages: Vec<Value> = t
            .messages
            .iter()
            .map(|p| serde_json::json!({"role": p.role, "content": fill(&p.content, &fields)}))
            .collect();
        body.insert("messages".into(), Value::Array(messages));
        // What else the client sent (`stream`, `temperature`) goes along.
        for (k, v) in &fields {
            if k != "template_name"
                && !body.contains_key(k)
                && !t
                    .messages
                    .iter()
                    .any(|p| p.content.contains(&format!("{{{{{k}}}}}")))
            {
                body.insert(k.clone(), v.clone());
            }
        }
        cx.set_request_body(serde_json::to_vec(&body).unwrap_or_default().into());
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_take_the_clients_fields() {
        let f: Map<String, Value> =
            serde_json::from_str(r#"{"topic": "rust", "n": 3, "none": null}"#).unwrap();
        assert_eq!(
            fill("Explain {{topic}} in {{ n }} lines{{none}}{{missing}}.", &f),
            "Explain rust in 3 lines."
        );
        assert_eq!(fill("open {{topic", &f), "open {{topic");
    }
}
