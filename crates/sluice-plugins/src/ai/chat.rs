//! OpenAI's chat completions, which clients speak: reading a request's messages and writing a
//! usage as OpenAI writes it, for every provider's translation.

use serde_json::{Map, Value, json};
use sluice_core::llm::Usage;

/// A chat request's messages: each, its role (`user` when it has none) and its content.
pub(crate) fn messages(req: &Map<String, Value>) -> impl Iterator<Item = (&Value, &str, &Value)> {
    req.get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|m| {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
            (m, role, m.get("content").unwrap_or(&Value::Null))
        })
}

/// An embeddings request's texts: its `input`, a string or an array of them (arrays of token
/// ids have no text). The user's text, which the prompt guard reads and the prompt estimate
/// counts, as a chat request's messages are.
pub(crate) fn input_texts(req: &Map<String, Value>) -> impl Iterator<Item = &str> {
    let (one, many) = match req.get("input") {
        Some(Value::String(s)) => (Some(s.as_str()), None),
        Some(Value::Array(a)) => (None, Some(a.iter().filter_map(Value::as_str))),
        _ => (None, None),
    };
    one.into_iter().chain(many.into_iter().flatten())
}

/// The text of an OpenAI message's `content`: a string, or the text of its parts.
pub(crate) fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// A usage in OpenAI's shape.
pub(crate) fn openai_usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt,
        "completion_tokens": u.completion,
        "total_tokens": u.total(),
        "prompt_tokens_details": {"cached_tokens": u.cached},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning},
    })
}
