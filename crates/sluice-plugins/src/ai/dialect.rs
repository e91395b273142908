//! The APIs the AI plugins speak to providers, and their translation from and to OpenAI's
//! chat completions, which clients speak: requests, whole answers and streamed answers
//! (server-sent events), with the tokens each reports brought to one [`Usage`].
//!
//! - OpenAI's chat completions (`openai`, `deepseek`, `azure-openai`, `openrouter`,
//!   `openai-compatible`, `aimlapi`, `vertex-ai`'s OpenAI endpoint): passed through; a stream's
//!   usage is asked for (`stream_options.include_usage`) and its chunk kept from a client that
//!   did not ask for it.
//! - Anthropic's messages (`anthropic`): <https://docs.anthropic.com/en/api/messages> and its
//!   streaming events (`message_start`, `content_block_delta`, `message_delta`, `message_stop`).
//! - Google's Gemini (`gemini`): `generateContent` and `streamGenerateContent?alt=sse`
//!   (<https://ai.google.dev/api/generate-content>).

use std::sync::LazyLock;

use memchr::memmem::Finder;
use serde_json::{Map, Value, json};
use sluice_core::llm::Usage;

use super::chat::{content_text, messages, openai_usage_json};
use super::sse;

/// An API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// OpenAI's chat completions.
    OpenAi,
    /// Anthropic's messages.
    Anthropic,
    /// Google's Gemini.
    Gemini,
    /// Amazon Bedrock's Converse.
    Bedrock,
}

fn n(v: Option<&Value>) -> u64 {
    v.and_then(Value::as_u64).unwrap_or(0)
}

/// OpenAI's `usage` object (DeepSeek's `prompt_cache_hit_tokens` read as cached tokens).
pub(crate) fn openai_usage(u: &Value) -> Option<Usage> {
    let o = u.as_object()?;
    Some(Usage {
        prompt: n(o.get("prompt_tokens")),
        completion: n(o.get("completion_tokens")),
        cached: n(u.pointer("/prompt_tokens_details/cached_tokens"))
            .max(n(o.get("prompt_cache_hit_tokens"))),
        reasoning: n(u.pointer("/completion_tokens_details/reasoning_tokens")),
        cache_written: 0,
    })
}

/// A streamed OpenAI chunk with a `usage`: the usage, and whether `choices` is an empty list
/// (the chunk that only reports usage). Read into types that borrow and skip the rest, which
/// takes a fraction of the instructions of a whole [`Value`]; a chunk of another shape (a count
/// that is not a whole number, a repeated key) is read the general way.
fn usage_chunk(data: &[u8]) -> Option<(Usage, bool)> {
    use serde::Deserialize;
    use serde::de::IgnoredAny;
    #[derive(Deserialize)]
    struct Details {
        cached_tokens: Option<u64>,
        reasoning_tokens: Option<u64>,
    }
    #[derive(Deserialize)]
    struct Counts {
        prompt_tokens: Option<u64>,
        completion_tokens: Option<u64>,
        prompt_cache_hit_tokens: Option<u64>,
        prompt_tokens_details: Option<Details>,
        completion_tokens_details: Option<Details>,
    }
    #[derive(Deserialize)]
    struct Chunk {
        usage: Option<Counts>,
        choices: Option<Vec<IgnoredAny>>,
    }
    match serde_json::from_slice::<Chunk>(data) {
        Ok(c) => {
            let u = c.usage?;
            let cached = u.prompt_tokens_details.and_then(|d| d.cached_tokens);
            let reasoning = u.completion_tokens_details.and_then(|d| d.reasoning_tokens);
            Some((
                Usage {
                    prompt: u.prompt_tokens.unwrap_or(0),
                    completion: u.completion_tokens.unwrap_or(0),
                    cached: cached
                        .unwrap_or(0)
                        .max(u.prompt_cache_hit_tokens.unwrap_or(0)),
                    reasoning: reasoning.unwrap_or(0),
                    cache_written: 0,
                },
                c.choices.is_some_and(|c| c.is_empty()),
            ))
        }
        Err(_) => {
            let v = serde_json::from_slice::<Value>(data).ok()?;
            let u = v.get("usage").and_then(openai_usage)?;
            let no_choices = v
                .get("choices")
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty);
            Some((u, no_choices))
        }
    }
}

/// Anthropic's counts, as its events report them (each field when present replaces the last):
/// its input tokens do not include cache reads and writes, which OpenAI's prompt tokens do.
#[derive(Debug, Default, Clone, Copy)]
struct AnthropicCounts {
    input: u64,
    cache_read: u64,
    cache_write: u64,
    output: u64,
}

impl AnthropicCounts {
    fn update(&mut self, u: &Value) -> bool {
        let mut any = false;
        for (field, slot) in [
            ("input_tokens", &mut self.input),
            ("cache_read_input_tokens", &mut self.cache_read),
            ("cache_creation_input_tokens", &mut self.cache_write),
            ("output_tokens", &mut self.output),
        ] {
            if let Some(x) = u.get(field).and_then(Value::as_u64) {
                *slot = x;
                any = true;
            }
        }
        any
    }

    fn usage(&self) -> Usage {
        Usage {
            prompt: self
                .input
                .saturating_add(self.cache_read)
                .saturating_add(self.cache_write),
            completion: self.output,
            cached: self.cache_read,
            reasoning: 0,
            cache_written: self.cache_write,
        }
    }
}

/// Gemini's `usageMetadata`: its candidates' tokens do not include the thoughts', which
/// OpenAI's completion tokens do.
fn gemini_usage(u: &Value) -> Option<Usage> {
    let o = u.as_object()?;
    let thoughts = n(o.get("thoughtsTokenCount"));
    Some(Usage {
        prompt: n(o.get("promptTokenCount")),
        completion: n(o.get("candidatesTokenCount")).saturating_add(thoughts),
        cached: n(o.get("cachedContentTokenCount")),
        reasoning: thoughts,
        cache_written: 0,
    })
}

/// `data:` URLs split into their media type and base64 data.
fn data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media = meta.strip_suffix(";base64")?;
    Some((media, data))
}

fn stop_list(v: Option<&Value>) -> Option<Value> {
    match v? {
        Value::String(s) => Some(json!([s])),
        Value::Array(a) => Some(Value::Array(a.clone())),
        _ => None,
    }
}

/// The largest number of tokens to generate the client asked for.
fn max_tokens(req: &Map<String, Value>) -> Option<u64> {
    req.get("max_completion_tokens")
        .or_else(|| req.get("max_tokens"))
        .and_then(Value::as_u64)
}

/// Anthropic requires `max_tokens`; this is sent when the client gave none.
const ANTHROPIC_DEFAULT_MAX_TOKENS: u64 = 4096;

/// An OpenAI chat completions request as an Anthropic messages request.
pub(crate) fn to_anthropic(req: &Map<String, Value>) -> Value {
    let mut system = Vec::new();
    let mut turns: Vec<Value> = Vec::new();
    for (m, role, content) in messages(req) {
        match role {
            "system" | "developer" => system.push(content_text(content)),
            "tool" => turns.push(json!({
                "role": "user",
                "content": [{
                    "type": "tool_result",
                    "tool_use_id": m.get("tool_call_id").cloned().unwrap_or(Value::Null),
                    "content": content_text(content),
                }],
            })),
            _ => {
                let role = if role == "assistant" {
                    "assistant"
                } else {
                    "user"
                };
                let mut blocks = anthropic_blocks(content);
                for call in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let args = call
                        .pointer("/function/arguments")
                        .and_then(Value::as_str)
                        .and_then(|a| serde_json::from_str::<Value>(a).ok())
                        .unwrap_or_else(|| json!({}));
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.get("id").cloned().unwrap_or(Value::Null),
                        "name": call.pointer("/function/name").cloned().unwrap_or(Value::Null),
                        "input": args,
                    }));
                }
                turns.push(json!({"role": role, "content": blocks}));
            }
        }
    }
    let mut out = Map::new();
    if let Some(model) = req.get("model") {
        out.insert("model".into(), model.clone());
    }
    out.insert("messages".into(), Value::Array(turns));
    if !system.is_empty() {
        out.insert("system".into(), Value::String(system.join("\n\n")));
    }
    out.insert(
        "max_tokens".into(),
        max_tokens(req)
            .unwrap_or(ANTHROPIC_DEFAULT_MAX_TOKENS)
            .into(),
    );
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("stream", "stream"),
        ("top_k", "top_k"),
    ] {
        if let Some(v) = req.get(from) {
            out.insert(to.into(), v.clone());
        }
    }
    if let Some(s) = stop_list(req.get("stop")) {
        out.insert("stop_sequences".into(), s);
    }
    if let Some(u) = req.get("user") {
        out.insert("metadata".into(), json!({"user_id": u}));
    }
    if let Some(tools) = req.get("tools").and_then(Value::as_array) {
        let tools: Vec<Value> = tools
            .iter()
            .filter_map(|t| {
                let f = t.get("function")?;
                Some(json!({
                    "name": f.get("name")?,
                    "description": f.get("description").cloned().unwrap_or(Value::Null),
                    "input_schema": f.get("parameters").cloned()
                        .unwrap_or_else(|| json!({"type": "object"})),
                }))
            })
            .collect();
        out.insert("tools".into(), Value::Array(tools));
    }
    match req.get("tool_choice") {
        Some(Value::String(s)) if s == "auto" => {
            out.insert("tool_choice".into(), json!({"type": "auto"}));
        }
        Some(Value::String(s)) if s == "required" => {
            out.insert("tool_choice".into(), json!({"type": "any"}));
        }
        Some(Value::String(s)) if s == "none" => {
            out.insert("tool_choice".into(), json!({"type": "none"}));
        }
        Some(Value::Object(o)) => {
            if let Some(name) = o.get("function").and_then(|f| f.get("name")) {
                out.insert("tool_choice".into(), json!({"type": "tool", "name": name}));
            }
        }
        _ => {}
    }
    Value::Object(out)
}

fn anthropic_blocks(content: &Value) -> Vec<Value> {
    match content {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text") => Some(json!({"type": "text", "text": p.get("text")?})),
                Some("image_url") => {
                    let url = p.pointer("/image_url/url").and_then(Value::as_str)?;
                    Some(match data_url(url) {
                        Some((media, data)) => json!({"type": "image", "source": {
                            "type": "base64", "media_type": media, "data": data}}),
                        None => json!({"type": "image", "source": {"type": "url", "url": url}}),
                    })
                }
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// An OpenAI chat completions request as a Gemini `generateContent` request.
pub(crate) fn to_gemini(req: &Map<String, Value>) -> Value {
    let mut system = Vec::new();
    let mut contents = Vec::new();
    for (_, role, content) in messages(req) {
        if role == "system" || role == "developer" {
            system.push(json!({"text": content_text(content)}));
            continue;
        }
        let parts: Vec<Value> = match content {
            Value::String(s) => vec![json!({"text": s})],
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| match p.get("type").and_then(Value::as_str) {
                    Some("text") => Some(json!({"text": p.get("text")?})),
                    Some("image_url") => {
                        let url = p.pointer("/image_url/url").and_then(Value::as_str)?;
                        Some(match data_url(url) {
                            Some((media, data)) => {
                                json!({"inlineData": {"mimeType": media, "data": data}})
                            }
                            None => json!({"fileData": {"fileUri": url}}),
                        })
                    }
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        let role = if role == "assistant" { "model" } else { "user" };
        contents.push(json!({"role": role, "parts": parts}));
    }
    let mut out = Map::new();
    out.insert("contents".into(), Value::Array(contents));
    if !system.is_empty() {
        out.insert("systemInstruction".into(), json!({"parts": system}));
    }
    let mut config = Map::new();
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("top_k", "topK"),
        ("n", "candidateCount"),
        ("seed", "seed"),
    ] {
        if let Some(v) = req.get(from) {
            config.insert(to.into(), v.clone());
        }
    }
    if let Some(m) = max_tokens(req) {
        config.insert("maxOutputTokens".into(), m.into());
    }
    if let Some(s) = stop_list(req.get("stop")) {
        config.insert("stopSequences".into(), s);
    }
    if !config.is_empty() {
        out.insert("generationConfig".into(), Value::Object(config));
    }
    Value::Object(out)
}

/// Anthropic's `stop_reason` as OpenAI's `finish_reason`.
fn anthropic_finish(r: &str) -> &'static str {
    match r {
        "max_tokens" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
}

/// Gemini's `finishReason` as OpenAI's `finish_reason`.
fn gemini_finish(r: &str) -> &'static str {
    match r {
        "STOP" => "stop",
        "MAX_TOKENS" => "length",
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" => "content_filter",
        _ => "stop",
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A whole (not streamed) answer in the provider's API, as OpenAI's, and its usage. None: not
/// an answer of that API (passed on unchanged).
pub(crate) fn whole_answer(
    dialect: Dialect,
    body: &[u8],
) -> Option<(Option<Vec<u8>>, Usage, Option<String>)> {
    let v: Value = serde_json::from_slice(body).ok()?;
    match dialect {
        Dialect::OpenAi => {
            let usage = openai_usage(v.get("usage")?)?;
            let model = v.get("model").and_then(Value::as_str).map(str::to_owned);
            Some((None, usage, model))
        }
        Dialect::Anthropic => {
            let mut counts = AnthropicCounts::default();
            counts.update(v.get("usage")?);
            let usage = counts.usage();
            let mut text = String::new();
            let mut calls = Vec::new();
            for b in v
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        text.push_str(b.get("text").and_then(Value::as_str).unwrap_or(""))
                    }
                    Some("tool_use") => calls.push(json!({
                        "id": b.get("id"),
                        "type": "function",
                        "function": {
                            "name": b.get("name"),
                            "arguments": b.get("input").map_or("{}".into(), Value::to_string),
                        },
                    })),
                    _ => {}
                }
            }
            let mut message = json!({"role": "assistant", "content": text});
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(calls);
            }
            let model = v.get("model").and_then(Value::as_str).map(str::to_owned);
            let finish =
                anthropic_finish(v.get("stop_reason").and_then(Value::as_str).unwrap_or(""));
            let out = json!({
                "id": v.get("id"),
                "object": "chat.completion",
                "created": unix_now(),
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": openai_usage_json(&usage),
            });
            Some((Some(out.to_string().into_bytes()), usage, model))
        }
        Dialect::Gemini => {
            let usage = gemini_usage(v.get("usageMetadata")?)?;
            let model = v
                .get("modelVersion")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let choices: Vec<Value> = v
                .get("candidates")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(i, c)| {
                    let (text, _) = gemini_text(c);
                    let finish = c
                        .get("finishReason")
                        .and_then(Value::as_str)
                        .map(gemini_finish);
                    json!({
                        "index": c.get("index").and_then(Value::as_u64).unwrap_or(i as u64),
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": finish.unwrap_or("stop"),
                    })
                })
                .collect();
            let out = json!({
                "id": v.get("responseId").cloned().unwrap_or_else(|| json!("gemini")),
                "object": "chat.completion",
                "created": unix_now(),
                "model": model,
                "choices": choices,
                "usage": openai_usage_json(&usage),
            });
            Some((Some(out.to_string().into_bytes()), usage, model))
        }
        Dialect::Bedrock => {
            let (out, usage) = super::bedrock::whole(&v, None, unix_now())?;
            Some((Some(out), usage, None))
        }
    }
}

/// A Gemini candidate's answer text and its thought text.
fn gemini_text(c: &Value) -> (String, String) {
    let mut text = String::new();
    let mut thought = String::new();
    for p in c
        .pointer("/content/parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(t) = p.get("text").and_then(Value::as_str) {
            if p.get("thought").and_then(Value::as_bool) == Some(true) {
                thought.push_str(t);
            } else {
                text.push_str(t);
            }
        }
    }
    (text, thought)
}

/// A streamed answer on its way: each event of the provider's stream in, OpenAI's chunks out,
/// the usage read as it goes.
#[derive(Debug)]
pub(crate) struct Stream {
    dialect: Dialect,
    /// The client asked for the usage chunk (`stream_options.include_usage`).
    pub(crate) client_usage: bool,
    id: String,
    model: Option<String>,
    created: u64,
    counts: AnthropicCounts,
    /// The usage read so far.
    pub(crate) usage: Usage,
    /// Whether the provider reported usage.
    pub(crate) reported: bool,
    /// Bytes of answer text seen (for an estimate when no usage arrives).
    pub(crate) text_bytes: u64,
    role_sent: bool,
    /// The end (`[DONE]`) went out.
    ended: bool,
}

impl Stream {
    pub(crate) fn new(dialect: Dialect, client_usage: bool) -> Stream {
        Stream {
            dialect,
            client_usage,
            id: String::new(),
            model: None,
            created: unix_now(),
            counts: AnthropicCounts::default(),
            usage: Usage::default(),
            reported: false,
            text_bytes: 0,
            role_sent: false,
            ended: false,
        }
    }

    /// The model the stream says answered.
    pub(crate) fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    fn chunk(&self, out: &mut Vec<u8>, delta: Value, finish: Option<&str>) {
        let c = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        sse::data_event(out, c.to_string().as_bytes());
    }

    fn role(&mut self, out: &mut Vec<u8>) {
        if !self.role_sent {
            self.role_sent = true;
            self.chunk(out, json!({"role": "assistant", "content": ""}), None);
        }
    }

    /// One complete event of the provider's stream; what the client gets goes to `out`.
    pub(crate) fn event(&mut self, raw: &[u8], out: &mut Vec<u8>) {
        match self.dialect {
            Dialect::OpenAi => self.openai_event(raw, out),
            Dialect::Anthropic => self.anthropic_event(raw, out),
            Dialect::Gemini => self.gemini_event(raw, out),
            // Bedrock's events are binary messages: `bedrock_message`.
            Dialect::Bedrock => {}
        }
    }

    /// The end of the provider's stream: what the client still needs (the usage chunk it asked
    /// for, `[DONE]`) goes to `out`.
    pub(crate) fn end(&mut self, out: &mut Vec<u8>) {
        if self.ended || self.dialect == Dialect::OpenAi {
            return;
        }
        self.finish(out);
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.ended = true;
        if self.client_usage {
            let c = json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": openai_usage_json(&self.usage),
            });
            sse::data_event(out, c.to_string().as_bytes());
        }
        sse::data_event(out, b"[DONE]");
    }

    /// OpenAI's own chunks pass as they are; only those with usage are parsed (a cheap look for
    /// `"usage"` first), and the usage chunk is kept from a client that did not ask for it.
    fn openai_event(&mut self, raw: &[u8], out: &mut Vec<u8>) {
        if !has_usage(raw) {
            // Most chunks: read for their text and model without parsing, passed as they are.
            self.read_openai(raw);
            out.extend_from_slice(raw);
            return;
        }
        let e = sse::parse(raw);
        if !e.has_data || &*e.data == b"[DONE]" {
            out.extend_from_slice(raw);
            return;
        }
        self.read_openai(&e.data);
        if has_usage(&e.data)
            && let Some((u, no_choices)) = usage_chunk(&e.data)
        {
            self.usage = u;
            self.reported = true;
            if no_choices && !self.client_usage {
                return;
            }
        }
        out.extend_from_slice(raw);
    }

    /// What OpenAI chunks tell without being parsed: their text's length, the model.
    pub(crate) fn read_openai(&mut self, raw: &[u8]) {
        self.text_bytes += content_bytes(raw);
        if self.model.is_none() {
            static MODEL: LazyLock<Finder<'static>> =
                LazyLock::new(|| Finder::new(b"\"model\":\""));
            self.model = string_field(raw, &MODEL);
        }
    }

    fn anthropic_event(&mut self, raw: &[u8], out: &mut Vec<u8>) {
        let e = sse::parse(raw);
        if !e.has_data {
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(&e.data) else {
            return;
        };
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "message_start" => {
                if let Some(m) = v.get("message") {
                    self.id = m.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
                    self.model = m.get("model").and_then(Value::as_str).map(str::to_owned);
                    if let Some(u) = m.get("usage")
                        && self.counts.update(u)
                    {
                        self.usage = self.counts.usage();
                        self.reported = true;
                    }
                }
                self.role(out);
            }
            "content_block_start" => {
                if let Some(b) = v.get("content_block")
                    && b.get("type").and_then(Value::as_str) == Some("tool_use")
                {
                    self.role(out);
                    let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                    self.chunk(
                        out,
                        json!({"tool_calls": [{"index": index, "id": b.get("id"),
                            "type": "function",
                            "function": {"name": b.get("name"), "arguments": ""}}]}),
                        None,
                    );
                }
            }
            "content_block_delta" => {
                self.role(out);
                let d = v.get("delta").unwrap_or(&Value::Null);
                match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let t = d.get("text").and_then(Value::as_str).unwrap_or("");
                        self.text_bytes += t.len() as u64;
                        self.chunk(out, json!({"content": t}), None);
                    }
                    Some("thinking_delta") => {
                        let t = d.get("thinking").and_then(Value::as_str).unwrap_or("");
                        self.text_bytes += t.len() as u64;
                        self.chunk(out, json!({"reasoning_content": t}), None);
                    }
                    Some("input_json_delta") => {
                        let t = d.get("partial_json").and_then(Value::as_str).unwrap_or("");
                        self.text_bytes += t.len() as u64;
                        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                        self.chunk(
                            out,
                            json!({"tool_calls": [{"index": index, "function": {"arguments": t}}]}),
                            None,
                        );
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(u) = v.get("usage")
                    && self.counts.update(u)
                {
                    self.usage = self.counts.usage();
                    self.reported = true;
                }
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.role(out);
                    self.chunk(out, json!({}), Some(anthropic_finish(r)));
                }
            }
            "message_stop" => self.finish(out),
            "error" => {
                let c = json!({"error": v.get("error")});
                sse::data_event(out, c.to_string().as_bytes());
            }
            _ => {}
        }
    }

    /// One message of Bedrock's event stream.
    pub(crate) fn bedrock_message(&mut self, m: &super::bedrock::Message, out: &mut Vec<u8>) {
        let Ok(v) = serde_json::from_slice::<Value>(&m.payload) else {
            return;
        };
        if m.message_type != "event" {
            // An exception (`throttlingException`, `modelStreamErrorException`...).
            let c = json!({"error": {"type": m.kind, "message": v.get("message")}});
            sse::data_event(out, c.to_string().as_bytes());
            return;
        }
        match m.kind.as_str() {
            "messageStart" => self.role(out),
            "contentBlockDelta" => {
                self.role(out);
                if let Some(t) = v.pointer("/delta/text").and_then(Value::as_str) {
                    self.text_bytes += t.len() as u64;
                    self.chunk(out, json!({"content": t}), None);
                } else if let Some(t) = v
                    .pointer("/delta/reasoningContent/text")
                    .and_then(Value::as_str)
                {
                    self.text_bytes += t.len() as u64;
                    self.chunk(out, json!({"reasoning_content": t}), None);
                }
            }
            "messageStop" => {
                let r = v.get("stopReason").and_then(Value::as_str).unwrap_or("");
                self.chunk(out, json!({}), Some(super::bedrock::finish(r)));
            }
            "metadata" => {
                if let Some(u) = v.get("usage").and_then(super::bedrock::usage) {
                    self.usage = u;
                    self.reported = true;
                }
            }
            _ => {}
        }
    }

    fn gemini_event(&mut self, raw: &[u8], out: &mut Vec<u8>) {
        let e = sse::parse(raw);
        if !e.has_data {
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(&e.data) else {
            return;
        };
        if let Some(err) = v.get("error") {
            let c = json!({"error": err});
            sse::data_event(out, c.to_string().as_bytes());
            return;
        }
        if self.id.is_empty()
            && let Some(id) = v.get("responseId").and_then(Value::as_str)
        {
            self.id = id.to_owned();
        }
        if self.model.is_none() {
            self.model = v
                .get("modelVersion")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if let Some(u) = v.get("usageMetadata").and_then(gemini_usage) {
            self.usage = u;
            self.reported = true;
        }
        self.role(out);
        let c = v.pointer("/candidates/0").unwrap_or(&Value::Null);
        let (text, thought) = gemini_text(c);
        self.text_bytes += (text.len() + thought.len()) as u64;
        if !thought.is_empty() {
            self.chunk(out, json!({"reasoning_content": thought}), None);
        }
        if !text.is_empty() {
            self.chunk(out, json!({"content": text}), None);
        }
        if let Some(r) = c.get("finishReason").and_then(Value::as_str) {
            self.chunk(out, json!({}), Some(gemini_finish(r)));
        }
    }
}

/// A JSON string field's value found by its opening (`"model":"`), without parsing the whole
/// document; escapes are not decoded (model names have none).
fn string_field(data: &[u8], opening: &Finder<'static>) -> Option<String> {
    let at = opening.find(data)? + opening.needle().len();
    let len = memchr::memchr(b'"', &data[at..])?;
    std::str::from_utf8(&data[at..at + len])
        .ok()
        .map(str::to_owned)
}

/// Whether a piece of an OpenAI stream has a `"usage"` key (then it is parsed).
pub(crate) fn has_usage(data: &[u8]) -> bool {
    // A searcher built once: `memmem::find` builds one per call, which cost more than the
    // search itself on every piece of every stream (callgrind: 8,300 instructions a stream).
    static USAGE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\""));
    USAGE.find(data).is_some()
}

/// Bytes of `"content":"..."` text in a chunk (of each of its events), without parsing it (for
/// an estimate of the tokens of a stream cut off before its usage).
fn content_bytes(data: &[u8]) -> u64 {
    static OPENING: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"content\":\""));
    let mut total = 0;
    let mut rest = data;
    while let Some(at) = OPENING.find(rest) {
        let text = &rest[at + OPENING.needle().len()..];
        let mut i = 0;
        while i < text.len() {
            match text[i] {
                b'\\' => i += 2,
                b'"' => break,
                _ => i += 1,
            }
        }
        total += i.min(text.len()) as u64;
        rest = &text[i.min(text.len())..];
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed read of a usage chunk says what the general read of the same chunk says,
    /// for every shape: the typed one's and the fallback's.
    #[test]
    fn a_usage_chunk_reads_the_same_typed_or_whole() {
        let whole = |d: &[u8]| -> Option<(Usage, bool)> {
            let v = serde_json::from_slice::<Value>(d).ok()?;
            let u = v.get("usage").and_then(openai_usage)?;
            Some((u, v["choices"].as_array().is_some_and(Vec::is_empty)))
        };
        let cases: [&[u8]; 9] = [
            br#"{"id":"c","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":5}}}"#,
            br#"{"choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#,
            br#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"prompt_cache_hit_tokens":6,"prompt_cache_miss_tokens":1}}"#,
            br#"{"choices":[],"usage":null}"#,
            br#"{"choices":null,"usage":{"prompt_tokens":1,"prompt_tokens_details":null}}"#,
            // The fallback's shapes: a count that is not a whole number, a repeated key, a
            // usage that is not an object.
            br#"{"choices":[],"usage":{"prompt_tokens":2.0,"completion_tokens":3}}"#,
            br#"{"choices":[],"usage":{"prompt_tokens":1,"prompt_tokens":8}}"#,
            br#"{"choices":"none","usage":{"prompt_tokens":4}}"#,
            br#"{"choices":[],"usage":5}"#,
        ];
        for c in cases {
            let (typed, general) = (usage_chunk(c), whole(c));
            assert_eq!(
                typed.map(|(u, e)| (format!("{u:?}"), e)),
                general.map(|(u, e)| (format!("{u:?}"), e)),
                "{}",
                String::from_utf8_lossy(c)
            );
        }
        let (u, empty) = usage_chunk(cases[0]).unwrap();
        assert_eq!(
            (u.prompt, u.completion, u.cached, u.reasoning),
            (9, 12, 4, 5)
        );
        assert!(empty);
    }

    #[test]
    fn the_text_of_every_event_in_a_piece_is_counted() {
        let two = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\\\"lo\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"!\"}}]}\n\n";
        assert_eq!(content_bytes(two), 7 + 1);
        assert_eq!(content_bytes(b"data: {}\n\n"), 0);
    }

    /// Each provider's stream, cut anywhere into two pieces, gives the same chunks and usage.
    #[test]
    fn streams_read_alike_however_they_are_cut() {
        let anthropic = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"model\":\"c\",\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":2,\"output_tokens\":1}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let whole = {
            let mut s = Stream::new(Dialect::Anthropic, true);
            let mut out = Vec::new();
            let mut split = sse::Splitter::default();
            split.feed(anthropic.as_bytes(), |e| s.event(e, &mut out));
            s.end(&mut out);
            (out, s.usage)
        };
        assert_eq!(
            whole.1,
            Usage {
                prompt: 7,
                completion: 3,
                cached: 2,
                reasoning: 0,
                cache_written: 0
            }
        );
        let text = String::from_utf8(whole.0.clone()).unwrap();
        assert!(text.contains("\"content\":\"Hi\""), "{text}");
        assert!(text.contains("\"finish_reason\":\"stop\""), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        for cut in 0..anthropic.len() {
            let mut s = Stream::new(Dialect::Anthropic, true);
            let mut out = Vec::new();
            let mut split = sse::Splitter::default();
            split.feed(&anthropic.as_bytes()[..cut], |e| s.event(e, &mut out));
            split.feed(&anthropic.as_bytes()[cut..], |e| s.event(e, &mut out));
            s.end(&mut out);
            assert_eq!(s.usage, whole.1, "cut at {cut}");
            // The same chunks but for their `created` second.
            assert_eq!(out.len(), whole.0.len(), "cut at {cut}");
        }
    }
}
