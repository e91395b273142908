//! `ai-proxy`: a route in front of one language model provider. Clients speak OpenAI's chat
//! completions; the request is sent to the provider (`openai`, `deepseek`, `azure-openai`,
//! `anthropic`, `gemini`, `openrouter`, `vertex-ai`, `aimlapi`, `openai-compatible`) with the
//! configured credentials and model options, translated for those that speak otherwise, and
//! the answer comes back as OpenAI's, streamed as it arrives. Tokens are counted by kind
//! (prompt, completion, cached, reasoning) for the access log's `llm_*` variables and for
//! `ai-rate-limiting`, streamed answers included (their usage is asked for when the client did
//! not, and kept from it).
//!
//! APISIX's fields: `provider`, `auth` (`header`, `query`), `options`, `override` (`endpoint`,
//! `llm_options.max_tokens`, `request_body`), `timeout` (ms), `logging`, `keepalive`,
//! `keepalive_timeout`, `keepalive_pool`, `ssl_verify`, `max_stream_duration_ms`,
//! `max_response_bytes`, `max_req_body_size`, `provider_conf`.

use std::rc::Rc;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin};

use crate::ai::{
    self, AuthConfig, Exchange, InstanceFields, Logging, OverrideConfig, ProviderConf, Target,
};

/// The settings `ai-proxy` and `ai-proxy-multi` share, with APISIX's defaults.
macro_rules! shared_fields {
    ($(#[$m:meta])* struct $name:ident { $($body:tt)* }) => {
        $(#[$m])*
        struct $name {
            $($body)*
            #[serde(default)]
            timeout: Option<crate::util::Num>,
            #[serde(default = "crate::util::yes")]
            keepalive: bool,
            #[serde(default)]
            keepalive_timeout: Option<crate::util::Num>,
            #[serde(default)]
            keepalive_pool: Option<crate::util::Num>,
            #[serde(default = "crate::util::yes")]
            ssl_verify: bool,
            #[serde(default)]
            logging: crate::ai::Logging,
            #[serde(default)]
            max_stream_duration_ms: Option<crate::util::Num>,
            #[serde(default)]
            max_response_bytes: Option<crate::util::Num>,
            #[serde(default)]
            max_req_body_size: Option<crate::util::Num>,
            /// APISIX flushes a buffer on a timer; Sluice forwards each event as it
            /// completes, so this is checked and has nothing to do.
            #[serde(default)]
            streaming_flush_interval_ms: Option<crate::util::Num>,
        }

        impl $name {
            /// The checked settings and limits (errors at their fields).
            fn shared(
                &self,
                v: &mut Validator,
            ) -> Option<(crate::ai::Shared, crate::ai_proxy::Limits)> {
                use crate::util::whole_field;
                let timeout = whole_field("timeout", self.timeout, 30_000, (1, 600_000), " (milliseconds)", v);
                let idle = whole_field("keepalive_timeout", self.keepalive_timeout, 60_000, (1000, crate::ai_proxy::YEAR_MS), " (milliseconds)", v);
                let pool = whole_field("keepalive_pool", self.keepalive_pool, 30, (1, 100_000), "", v);
                let optional = |field: &str, n: Option<crate::util::Num>, hi: u64, v: &mut Validator| match n {
                    None => Some(None),
                    Some(n) => v.field(field, |v| crate::util::whole(n, 1, hi, "", v)).map(Some),
                };
                let duration = optional("max_stream_duration_ms", self.max_stream_duration_ms, crate::ai_proxy::YEAR_MS, v);
                let bytes = optional("max_response_bytes", self.max_response_bytes, 1 << 40, v);
                let body = optional("max_req_body_size", self.max_req_body_size, 1 << 40, v);
                let flush = whole_field("streaming_flush_interval_ms", self.streaming_flush_interval_ms, 10, (0, 60_000), " (milliseconds)", v);
                let (Some(timeout), Some(keepalive_timeout), Some(keepalive_pool), Some(duration_ms), Some(bytes), Some(body), Some(_)) =
                    (timeout, idle, pool, duration, bytes, body, flush)
                else {
                    return None;
                };
                Some((
                    crate::ai::Shared {
                        timeout,
                        keepalive: self.keepalive,
                        keepalive_timeout,
                        keepalive_pool,
                        ssl_verify: self.ssl_verify,
                    },
                    crate::ai_proxy::Limits { duration_ms, bytes, body },
                ))
            }
        }
    };
}
pub(crate) use shared_fields;

/// A year in milliseconds: the bound of every duration in Sluice.
pub(crate) const YEAR_MS: u64 = 31_536_000_000;

shared_fields! {
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    provider: String,
    auth: AuthConfig,
    #[serde(default)]
    options: Map<String, Value>,
    #[serde(default, rename = "override")]
    over: Option<OverrideConfig>,
    #[serde(default)]
    provider_conf: Option<ProviderConf>,
}
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("ai-proxy", 1040, Config);

    fn encrypted_fields(&self) -> &'static [&'static str] {
        &["auth.header", "auth.query"]
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let (shared, limits) = c.shared(v)?;
        let name: Arc<str> = Arc::from(format!("ai-proxy-{}", c.provider));
        let fields = InstanceFields {
            provider: &c.provider,
            auth: &c.auth,
            options: &c.options,
            over: c.over.as_ref(),
            provider_conf: c.provider_conf.as_ref(),
            checks: None,
            call_only: false,
        };
        let target = Target::build(name, &fields, &shared, cx, v)?;
        Some(Arc::new(AiProxy {
            target,
            limits,
            logging: c.logging,
        }))
    }
}

/// The answer's and the request's limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) duration_ms: Option<u64>,
    pub(crate) bytes: Option<u64>,
    pub(crate) body: Option<u64>,
}

impl Limits {
    /// Reads the client's request and starts the exchange. Err: the answer to send (400,
    /// 413).
    pub(crate) fn start(
        &self,
        cx: &mut Ctx<'_>,
    ) -> Result<Rc<Map<String, Value>>, sluice_core::Response> {
        if let Some(max) = self.body
            && cx
                .body()
                .and_then(|b| b.raw())
                .is_some_and(|b| b.len() as u64 > max)
        {
            return Err(sluice_core::Response::message(
                413,
                "the request body is too large (max_req_body_size)",
            ));
        }
        let (api, client) = ai::client_body(cx)?;
        let client = Rc::new(client);
        let raw = cx.body().and_then(|b| b.bytes()).cloned();
        let ex = cx.slot::<Exchange>(ai::SLOT);
        ex.api = api;
        ex.prompt_estimate = ai::estimate_prompt(&client);
        ex.client = Some(client.clone());
        ex.client_raw = raw;
        ex.max_duration_ms = self.duration_ms;
        ex.max_bytes = self.bytes;
        Ok(client)
    }
}

struct AiProxy {
    target: Target,
    limits: Limits,
    logging: Logging,
}

impl Plugin for AiProxy {
    fn phases(&self) -> Phases {
        Phases::ACCESS
            .with(Phases::HEADER_FILTER)
            .with(Phases::BODY_FILTER)
            .with(Phases::LOG)
    }

    fn needs_body(&self) -> bool {
        true
    }

    fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let client = match self.limits.start(cx) {
            Ok(c) => c,
            Err(r) => return Flow::Respond(r),
        };
        let mut ex = std::mem::take(cx.slot::<Exchange>(ai::SLOT));
        let done = self.target.prepare(&client, req, cx, &mut ex);
        *cx.slot::<Exchange>(ai::SLOT) = ex;
        match done {
            Ok(()) => Flow::Continue,
            Err(r) => Flow::Respond(r),
        }
    }

    crate::ai::answer_phases!(logging);
}
