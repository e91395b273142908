//! `ai-prompt-decorator`: messages added before (`prepend`) and after (`append`) the client's
//! in an OpenAI chat completions request (`{role: system|user|assistant, content}`), before
//! `ai-proxy` sends it. A body that is not a JSON object with `messages` is answered 400.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin};

/// A message of a decorator or a template.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Prompt {
    pub(crate) role: String,
    pub(crate) content: String,
}

/// Checks messages' roles and contents (`v` points at the list).
pub(crate) fn check_prompts(list: &[Prompt], v: &mut Validator) -> bool {
    let mut ok = true;
    for (i, p) in list.iter().enumerate() {
        v.index(i, |v| {
            if !["system", "user", "assistant"].contains(&p.role.as_str()) {
                v.error_at(
                    "role",
                    format!(
                        "unknown role \"{}\", expected system, user or assistant",
                        p.role
                    ),
                );
                ok = false;
            }
            if p.content.is_empty() {
                v.error_at("content", "must not be empty");
                ok = false;
            }
        });
    }
    ok
}

/// The request's body as a JSON object with a `messages` array, or the 400 to answer.
pub(crate) fn chat_body(
    cx: &Ctx<'_>,
) -> Result<serde_json::Map<String, Value>, sluice_core::Response> {
    crate::ai::client_request(cx)
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    prepend: Vec<Prompt>,
    #[serde(default)]
    append: Vec<Prompt>,
    #[serde(default)]
    max_req_body_size: Option<crate::util::Num>,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("ai-prompt-decorator", 1070, Config);

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
        if c.prepend.is_empty() && c.append.is_empty() {
            v.error("needs prepend or append");
            return None;
        }
        let ok = v.field("prepend", |v| check_prompts(&c.prepend, v))
            & v.field("append", |v| check_prompts(&c.append, v));
        ok.then(|| {
            let as_json = |l: &[Prompt]| -> Vec<Value> {
                l.iter()
                    .map(|p| json!({"role": p.role, "content": p.content}))
                    .collect()
            };
            Arc::new(Decorator {
                prepend: as_json(&c.prepend),
                append: as_json(&c.append),
                max_body,
            }) as Arc<dyn Plugin>
        })
    }
}

struct Decorator {
    prepend: Vec<Value>,
    append: Vec<Value>,
    max_body: Option<u64>,
}

/// Refuses a body over `max` bytes (`max_req_body_size`).
pub(crate) fn over_size(cx: &Ctx<'_>, max: Option<u64>) -> Option<Flow> {
    let max = max?;
    let len = cx.body().and_then(|b| b.raw()).map_or(0, <[u8]>::len) as u64;
    (len > max).then(|| {
        Flow::Respond(sluice_core::Response::message(
            413,
            "the request body is too large (max_req_body_size)",
        ))
    })
}

impl Plugin for Decorator {
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
        let mut body = match chat_body(cx) {
            Ok(b) => b,
            Err(r) => return Flow::Respond(r),
        };
        if let Some(Value::Array(messages)) = body.get_mut("messages") {
            let mut all = self.prepend.clone();
            all.append(messages);
            all.extend(self.append.iter().cloned());
            *messages = all;
        }
        cx.set_request_body(serde_json::to_vec(&body).unwrap_or_default().into());
        Flow::Continue
    }
}
