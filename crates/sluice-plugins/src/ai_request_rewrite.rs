//! `ai-request-rewrite`: the client's request body is sent to a language model with the
//! configured `prompt` (as the system message; the body is the user message), and the
//! model's answer replaces the body before the request goes upstream: redaction, enrichment,
//! reformatting done by a model.
//!
//! APISIX's fields: `prompt`, `provider`, `auth` (`header`, `query`), `options`, `override`
//! (`endpoint`), `timeout` (ms, 1 to 60,000, default 30,000: the whole call), `keepalive`,
//! `keepalive_timeout`, `keepalive_pool`, `ssl_verify`, `max_req_body_size`; and
//! `provider_conf` for vertex-ai and bedrock. The providers are ai-proxy's, and the request and
//! the answer are translated the same way (one code: [`crate::ai::Target::outgoing`]).
//!
//! As APISIX: a request without a body is answered 400; the model failing (no connection,
//! the timeout, an answer other than 200, an answer without text) is answered 500 and
//! logged. Nothing of the client's request but its body goes to the model: not its headers,
//! not its credentials. The call is the plugin's own (a pool of kept connections per worker and
//! model, as forward-auth's), so the route's upstream is not touched.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, LocalFuture, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::ai::dialect::{self, Dialect};
use crate::ai::{AuthConfig, InstanceFields, OverrideConfig, ProviderConf, Shared, Target};
use crate::callout::KeepAlive;
use crate::util::{Num, whole_field};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    prompt: String,
    provider: String,
    auth: AuthConfig,
    #[serde(default)]
    options: Map<String, Value>,
    #[serde(default, rename = "override")]
    over: Option<OverrideConfig>,
    #[serde(default)]
    provider_conf: Option<ProviderConf>,
    #[serde(default)]
    timeout: Option<Num>,
    #[serde(default = "crate::util::yes")]
    keepalive: bool,
    #[serde(default)]
    keepalive_timeout: Option<Num>,
    #[serde(default)]
    keepalive_pool: Option<Num>,
    #[serde(default = "crate::util::yes")]
    ssl_verify: bool,
    #[serde(default)]
    max_req_body_size: Option<Num>,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    // No encrypted fields: APISIX's schema has none for this plugin, and a node sharing etcd
    // with APISIX must store it as APISIX reads it.
    crate::util::describe!("ai-request-rewrite", 1073, Config);

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        if c.prompt.trim().is_empty() {
            v.error_at("prompt", "must not be empty");
            ok = false;
        }
        if !c.auth.has_credentials() {
            v.error_at("auth", "needs header or query (the model's credentials)");
            ok = false;
        }
        // APISIX's ranges.
        let timeout = whole_field(
            "timeout",
            c.timeout,
            30_000,
            (1, 60_000),
            " (milliseconds)",
            v,
        );
        let idle = whole_field(
            "keepalive_timeout",
            c.keepalive_timeout,
            60_000,
            (1000, crate::ai_proxy::YEAR_MS),
            " (milliseconds)",
            v,
        );
        let pool = whole_field("keepalive_pool", c.keepalive_pool, 30, (1, 100_000), "", v);
        let max_body = crate::util::body_size_field("max_req_body_size", c.max_req_body_size, v);
        let (Some(timeout), Some(idle), Some(pool), Some(max_body)) =
            (timeout, idle, pool, max_body)
        else {
            return None;
        };
        let shared = Shared {
            timeout,
            keepalive: c.keepalive,
            keepalive_timeout: idle,
            keepalive_pool: pool,
            ssl_verify: c.ssl_verify,
        };
        let fields = InstanceFields {
            provider: &c.provider,
            auth: &c.auth,
            options: &c.options,
            over: c.over.as_ref(),
            provider_conf: c.provider_conf.as_ref(),
            checks: None,
            call_only: true,
        };
        let target = Target::build(
            Arc::from(format!("ai-request-rewrite-{}", c.provider)),
            &fields,
            &shared,
            cx,
            v,
        )?;
        let call = match crate::callout::Target::parse(&format!("{}/", target.origin), c.ssl_verify)
        {
            Ok(t) => t,
            Err(e) => {
                v.error_at("override.endpoint", e);
                return None;
            }
        };
        if !ok {
            return None;
        }
        Some(Arc::new(RequestRewrite {
            prompt: c.prompt,
            target,
            call,
            keepalive: c.keepalive.then_some(KeepAlive {
                pool: pool as usize,
                idle: Duration::from_millis(idle),
            }),
            timeout: Duration::from_millis(timeout),
            max_body,
        }))
    }
}

struct RequestRewrite {
    prompt: String,
    target: Target,
    call: crate::callout::Target,
    keepalive: Option<KeepAlive>,
    timeout: Duration,
    max_body: u64,
}

/// The text of a model's whole answer in its provider's API (the first choice's message).
fn answer_text(d: Dialect, body: &[u8]) -> Option<String> {
    let openai: Value = match d {
        // OpenAI's shape needs no translation (and its usage may be absent).
        Dialect::OpenAi => serde_json::from_slice(body).ok()?,
        _ => serde_json::from_slice(&dialect::whole_answer(d, body)?.0?).ok()?,
    };
    let content = openai
        .get("choices")?
        .get(0)?
        .get("message")?
        .get("content")?;
    match content {
        Value::String(s) => Some(s.clone()),
        // Content given as parts: their text.
        Value::Array(_) => Some(crate::ai::chat::content_text(content)),
        _ => None,
    }
}

impl RequestRewrite {
    /// Asks the model; Err: why it failed (logged; the client gets 500).
    async fn rewrite(&self, body: &[u8]) -> Result<String, String> {
        let mut client = Map::new();
        client.insert(
            "messages".into(),
            json!([
                {"role": "system", "content": self.prompt},
                {"role": "user", "content": String::from_utf8_lossy(body)},
            ]),
        );
        client.insert("stream".into(), Value::Bool(false));
        let out = self
            .target
            .outgoing(&client, None, crate::ai::ClientApi::Chat)
            .map_err(|r| {
                format!(
                    "the request cannot be written for the model ({}): {}",
                    r.status,
                    String::from_utf8_lossy(&r.body).trim_end()
                )
            })?;
        let mut b = http::Request::builder()
            .method("POST")
            .uri(out.target.as_str())
            .header("host", self.target.host.as_str())
            .header("content-type", "application/json");
        for (k, val) in &out.headers {
            b = b.header(k.as_str(), val.as_slice());
        }
        let req = b
            .body(Full::new(out.body))
            .map_err(|e| format!("the request cannot be written for the model: {e}"))?;
        let (head, answer) = tokio::time::timeout(
            self.timeout,
            crate::callout::call(&self.call, req, self.keepalive),
        )
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {:?}", self.timeout)))?;
        if head.status != http::StatusCode::OK {
            return Err(format!("the model answered {}", head.status.as_u16()));
        }
        answer_text(self.target.dialect, &answer)
            .ok_or_else(|| "the model's answer has no text".to_owned())
    }
}

impl Plugin for RequestRewrite {
    fn phases(&self) -> Phases {
        Phases::ACCESS_ASYNC
    }

    fn needs_body(&self) -> bool {
        true
    }

    fn access_async<'a>(
        &'a self,
        _req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> LocalFuture<'a, Flow> {
        Box::pin(async move {
            let body = match cx.body().and_then(|b| b.raw()) {
                Some(b) if !b.is_empty() => b.to_vec(),
                _ => return Flow::Respond(Response::message(400, "the request has no body")),
            };
            if body.len() as u64 > self.max_body {
                return Flow::Respond(Response::message(
                    413,
                    "the request body is too large (max_req_body_size)",
                ));
            }
            match self.rewrite(&body).await {
                Ok(text) => {
                    cx.set_request_body(Bytes::from(text));
                    Flow::Continue
                }
                Err(e) => {
                    tracing::warn!(route = cx.route_id(), provider = self.target.provider, error = %e, "ai-request-rewrite: the model failed");
                    Flow::Respond(Response::error(500, "failed to rewrite the request"))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_text_is_read_in_every_dialect() {
        let openai = br#"{"choices":[{"message":{"role":"assistant","content":"{\"a\":1}"}}]}"#;
        assert_eq!(
            answer_text(Dialect::OpenAi, openai).as_deref(),
            Some("{\"a\":1}")
        );
        let anthropic = br#"{"id":"m","type":"message","role":"assistant","model":"c","content":[{"type":"text","text":"masked"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}"#;
        assert_eq!(
            answer_text(Dialect::Anthropic, anthropic).as_deref(),
            Some("masked")
        );
        let gemini = br#"{"candidates":[{"content":{"role":"model","parts":[{"text":"hi"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":2,"candidatesTokenCount":1,"totalTokenCount":3}}"#;
        assert_eq!(answer_text(Dialect::Gemini, gemini).as_deref(), Some("hi"));
        assert_eq!(answer_text(Dialect::OpenAi, b"{\"error\":{}}"), None);
        assert_eq!(answer_text(Dialect::OpenAi, b"not json"), None);
    }
}
