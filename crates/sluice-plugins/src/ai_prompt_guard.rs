//! `ai-prompt-guard`: the prompt checked against patterns before it is sent to a model. The
//! last message's content (every message's with `match_all_conversation_history`; only the
//! user's unless `match_all_roles`) must match one of `allow_patterns` when there are any, and
//! none of `deny_patterns`; otherwise 400, as APISIX answers. Patterns are regular expressions
//! (Rust's `regex`: no look-around or back-references, which PCRE has), checked when the
//! configuration loads.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::ai::chat::content_text;
use crate::ai_prompt_decorator::over_size;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    match_all_roles: bool,
    #[serde(default)]
    match_all_conversation_history: bool,
    #[serde(default)]
    allow_patterns: Vec<String>,
    #[serde(default)]
    deny_patterns: Vec<String>,
    #[serde(default)]
    max_req_body_size: Option<crate::util::Num>,
    /// What to do with a body that is not a chat request: `skip` (let it through, the default)
    /// or `deny` (400).
    #[serde(default)]
    fail_mode: Option<String>,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("ai-prompt-guard", 1072, Config);

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
        let mut ok = true;
        let mut compile = |field: &str, list: &[String], v: &mut Validator| -> Vec<regex::Regex> {
            let mut out = Vec::new();
            v.field(field, |v| {
                for (i, p) in list.iter().enumerate() {
                    match regex::Regex::new(p) {
                        Ok(r) => out.push(r),
                        Err(e) => {
                            v.index(i, |v| v.error(format!("invalid pattern: {e}")));
                            ok = false;
                        }
                    }
                }
            });
            out
        };
        let allow = compile("allow_patterns", &c.allow_patterns, v);
        let deny = compile("deny_patterns", &c.deny_patterns, v);
        let deny_other = match c.fail_mode.as_deref() {
            None | Some("skip") => false,
            Some("deny") => true,
            Some(other) => {
                v.error_at(
                    "fail_mode",
                    format!("unknown mode \"{other}\", expected skip or deny"),
                );
                ok = false;
                false
            }
        };
        ok.then(|| {
            Arc::new(Guard {
                allow,
                deny,
                all_roles: c.match_all_roles,
                history: c.match_all_conversation_history,
                max_body,
                deny_other,
            }) as Arc<dyn Plugin>
        })
    }
}

struct Guard {
    allow: Vec<regex::Regex>,
    deny: Vec<regex::Regex>,
    all_roles: bool,
    history: bool,
    max_body: Option<u64>,
    deny_other: bool,
}

impl Plugin for Guard {
    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn needs_body(&self) -> bool {
        true
    }

    fn access(&self, _req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        if let Some(f) = over_size(cx, self.max_body) {
            return f;
        }
        let (api, body) = match crate::ai::client_body(cx) {
            Ok(b) => b,
            Err(r) if self.deny_other => return Flow::Respond(r),
            Err(_) => return Flow::Continue,
        };
        let text = if api == crate::ai::ClientApi::Embeddings {
            // An embeddings request's `input` is the user's text (APISIX's reading): checked
            // whole, or it would pass the guard unread.
            crate::ai::chat::input_texts(&body)
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            let messages: Vec<&Value> = body
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|m| self.all_roles || m.get("role").and_then(Value::as_str) == Some("user"))
                .collect();
            let checked: &[&Value] = if self.history {
                &messages
            } else {
                messages.last().map_or(&[], std::slice::from_ref)
            };
            checked
                .iter()
                .map(|m| content_text(m.get("content").unwrap_or(&Value::Null)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        if !self.allow.is_empty() && !self.allow.iter().any(|r| r.is_match(&text)) {
            return Flow::Respond(Response::message(
                400,
                "Request doesn't match allow patterns",
            ));
        }
        if self.deny.iter().any(|r| r.is_match(&text)) {
            return Flow::Respond(Response::message(
                400,
                "Request contains prohibited content",
            ));
        }
        Flow::Continue
    }
}
