//! What the AI plugins (`ai-proxy`, `ai-proxy-multi`) record of an exchange with a language
//! model: the models asked for and answered, the tokens used by kind, the time to the first
//! token. Kept in the request's context ([`crate::Ctx::llm`]) and carried to the access log,
//! which reads it through the `llm_*` variables (APISIX's names).

use std::rc::Rc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

/// Streamed answers being forwarded now, by every worker (`sluice_llm_active_streams`). One
/// process-wide atomic, touched twice per stream (never per request of other routes).
pub static ACTIVE_STREAMS: AtomicI64 = AtomicI64::new(0);

/// Counts a stream in [`ACTIVE_STREAMS`] while it is held: dropped with the request, however
/// the stream ended.
#[derive(Debug)]
pub struct ActiveStream(());

impl ActiveStream {
    /// A stream begins.
    pub fn begin() -> ActiveStream {
        ACTIVE_STREAMS.fetch_add(1, Ordering::Relaxed);
        ActiveStream(())
    }
}

impl Drop for ActiveStream {
    fn drop(&mut self) {
        ACTIVE_STREAMS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Tokens used by one exchange, by kind. `prompt` includes `cached`, and `completion`
/// includes `reasoning`, as OpenAI counts them; providers that count otherwise (Anthropic's
/// cache reads beside its input tokens) are brought to this shape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt (input) tokens, cached ones included.
    pub prompt: u64,
    /// Completion (output) tokens, reasoning ones included.
    pub completion: u64,
    /// Prompt tokens read from the provider's cache.
    pub cached: u64,
    /// Completion tokens spent reasoning.
    pub reasoning: u64,
    /// Prompt tokens written to the provider's cache (Anthropic's `cache_creation_input_tokens`).
    pub cache_written: u64,
}

impl Usage {
    /// Prompt and completion tokens.
    pub fn total(&self) -> u64 {
        self.prompt.saturating_add(self.completion)
    }
}

/// Whether the request asked for a streamed answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RequestType {
    /// One JSON answer (APISIX's `ai_chat`).
    #[default]
    Chat,
    /// Server-sent events (`ai_stream`).
    Stream,
}

/// One exchange with a model.
#[derive(Debug, Clone)]
pub struct LlmRecord {
    /// The provider's name (`openai`, `anthropic`, ...).
    pub provider: &'static str,
    /// The `ai-proxy-multi` instance that answered (its `name`), or the plugin's name.
    pub instance: Rc<str>,
    /// The model the client asked for (`request_llm_model`).
    pub request_model: Option<Rc<str>>,
    /// The model the request was sent for (`llm_model`), the configured one when set.
    pub model: Option<Rc<str>>,
    /// Streamed or not.
    pub request_type: RequestType,
    /// The GenAI conventions' `gen_ai.operation.name`: `chat` or `embeddings`.
    pub operation: &'static str,
    /// When the request was sent to the model.
    pub started: Instant,
    /// Milliseconds from sending to the first piece of the answer.
    pub first_token_ms: Option<u64>,
    /// Milliseconds from sending to the end of the answer.
    pub latency_ms: Option<u64>,
    /// Tokens used.
    pub usage: Usage,
    /// True when the provider reported the usage; false when it is an estimate (an answer cut
    /// off before its usage arrived: its text counted at four bytes a token).
    pub reported: bool,
    /// The answer's status.
    pub status: u16,
}

impl LlmRecord {
    /// A record of a request being sent now.
    pub fn new(provider: &'static str, instance: Rc<str>) -> LlmRecord {
        LlmRecord {
            provider,
            instance,
            request_model: None,
            model: None,
            request_type: RequestType::Chat,
            operation: "chat",
            started: Instant::now(),
            first_token_ms: None,
            latency_ms: None,
            usage: Usage::default(),
            reported: false,
            status: 0,
        }
    }
}

/// The access log's names for what a record holds (APISIX's variables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlmVar {
    /// `request_type`: `ai_chat` or `ai_stream`.
    RequestType,
    /// `request_llm_model`: the model the client asked for.
    RequestModel,
    /// `llm_model`: the model the request was sent for.
    Model,
    /// `llm_time_to_first_token`, in milliseconds.
    TimeToFirstToken,
    /// `llm_latency`, in milliseconds.
    Latency,
    /// `llm_prompt_tokens`.
    PromptTokens,
    /// `llm_completion_tokens`.
    CompletionTokens,
    /// `llm_total_tokens`.
    TotalTokens,
    /// `llm_reasoning_tokens`.
    ReasoningTokens,
    /// `llm_cache_read_input_tokens`.
    CacheReadTokens,
    /// `llm_cache_creation_input_tokens`.
    CacheWriteTokens,
    /// `llm_provider`.
    Provider,
    /// `llm_instance`: the `ai-proxy-multi` instance's name.
    Instance,
}

impl LlmVar {
    /// Every variable, with its name.
    pub const ALL: [(&'static str, LlmVar); 13] = [
        ("request_type", LlmVar::RequestType),
        ("request_llm_model", LlmVar::RequestModel),
        ("llm_model", LlmVar::Model),
        ("llm_time_to_first_token", LlmVar::TimeToFirstToken),
        ("llm_latency", LlmVar::Latency),
        ("llm_prompt_tokens", LlmVar::PromptTokens),
        ("llm_completion_tokens", LlmVar::CompletionTokens),
        ("llm_total_tokens", LlmVar::TotalTokens),
        ("llm_reasoning_tokens", LlmVar::ReasoningTokens),
        ("llm_cache_read_input_tokens", LlmVar::CacheReadTokens),
        ("llm_cache_creation_input_tokens", LlmVar::CacheWriteTokens),
        ("llm_provider", LlmVar::Provider),
        ("llm_instance", LlmVar::Instance),
    ];

    /// The variable of this name.
    pub fn parse(name: &str) -> Option<LlmVar> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, v)| *v == self)
            .map_or("", |(n, _)| n)
    }

    /// Whether its value is a number.
    pub fn is_number(self) -> bool {
        !matches!(
            self,
            LlmVar::RequestType
                | LlmVar::RequestModel
                | LlmVar::Model
                | LlmVar::Provider
                | LlmVar::Instance
        )
    }

    /// Its value in `r`; None where the record has none (no first token yet).
    pub fn value(self, r: &LlmRecord) -> Option<String> {
        let u = &r.usage;
        Some(match self {
            LlmVar::RequestType => match r.request_type {
                RequestType::Chat => "ai_chat".to_owned(),
                RequestType::Stream => "ai_stream".to_owned(),
            },
            LlmVar::RequestModel => r.request_model.as_deref()?.to_owned(),
            LlmVar::Model => r.model.as_deref()?.to_owned(),
            LlmVar::TimeToFirstToken => r.first_token_ms?.to_string(),
            LlmVar::Latency => r.latency_ms?.to_string(),
            LlmVar::PromptTokens => u.prompt.to_string(),
            LlmVar::CompletionTokens => u.completion.to_string(),
            LlmVar::TotalTokens => u.total().to_string(),
            LlmVar::ReasoningTokens => u.reasoning.to_string(),
            LlmVar::CacheReadTokens => u.cached.to_string(),
            LlmVar::CacheWriteTokens => u.cache_written.to_string(),
            LlmVar::Provider => r.provider.to_owned(),
            LlmVar::Instance => r.instance.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_variable() {
        for (name, v) in LlmVar::ALL {
            assert_eq!(LlmVar::parse(name), Some(v));
            assert_eq!(v.name(), name);
        }
        assert_eq!(LlmVar::parse("llm_nothing"), None);
    }
}
