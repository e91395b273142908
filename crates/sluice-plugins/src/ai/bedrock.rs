//! Amazon Bedrock's Converse API (`provider: bedrock`): an OpenAI chat completions request as a
//! Converse request (<https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html>),
//! its answer back as OpenAI's, and its streamed answer (`converse-stream`), which comes in the
//! AWS event stream's binary framing (<https://docs.aws.amazon.com/transcribe/latest/dg/streaming-setting-up.html#streaming-event-stream>:
//! a prelude with the total and header lengths and its CRC-32, typed headers such as
//! `:event-type`, a JSON payload, the message's CRC-32), not server-sent events.

use serde_json::{Map, Value, json};
use sluice_core::llm::Usage;

use super::chat::{content_text, messages};

/// Bedrock's `usage`: its input tokens do not include cache reads and writes, which OpenAI's
/// prompt tokens do.
pub(crate) fn usage(u: &Value) -> Option<Usage> {
    let o = u.as_object()?;
    let n = |k: &str| o.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (read, write) = (n("cacheReadInputTokens"), n("cacheWriteInputTokens"));
    Some(Usage {
        prompt: n("inputTokens").saturating_add(read).saturating_add(write),
        completion: n("outputTokens"),
        cached: read,
        reasoning: 0,
        cache_written: write,
    })
}

/// Bedrock's `stopReason` as OpenAI's `finish_reason`.
pub(crate) fn finish(r: &str) -> &'static str {
    match r {
        "max_tokens" => "length",
        "tool_use" => "tool_calls",
        "guardrail_intervened" | "content_filtered" => "content_filter",
        _ => "stop",
    }
}

/// An OpenAI chat completions request as a Converse request (the model is in the path).
pub(crate) fn to_bedrock(req: &Map<String, Value>) -> Value {
    let mut system = Vec::new();
    let mut turns: Vec<Value> = Vec::new();
    for (_, role, content) in messages(req) {
        match role {
            "system" | "developer" => system.push(json!({"text": content_text(content)})),
            _ => {
                let role = if role == "assistant" {
                    "assistant"
                } else {
                    "user"
                };
                let blocks: Vec<Value> = match content {
                    Value::String(s) => vec![json!({"text": s})],
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| match p.get("type").and_then(Value::as_str) {
                            Some("text") => Some(json!({"text": p.get("text")?})),
                            Some("image_url") => {
                                let url = p.pointer("/image_url/url").and_then(Value::as_str)?;
                                let (media, data) =
                                    url.strip_prefix("data:")?.split_once(";base64,")?;
                                let format = media.strip_prefix("image/")?;
                                Some(
                                    json!({"image": {"format": format, "source": {"bytes": data}}}),
                                )
                            }
                            _ => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                // Converse wants user and assistant turns to alternate: consecutive turns of
                // one role are joined.
                match turns.last_mut() {
                    Some(last) if last["role"] == role => {
                        if let Some(Value::Array(c)) = last.get_mut("content") {
                            c.extend(blocks);
                        }
                    }
                    _ => turns.push(json!({"role": role, "content": blocks})),
                }
            }
        }
    }
    let mut out = Map::new();
    out.insert("messages".into(), Value::Array(turns));
    if !system.is_empty() {
        out.insert("system".into(), Value::Array(system));
    }
    let mut config = Map::new();
    if let Some(m) = req
        .get("max_completion_tokens")
        .or_else(|| req.get("max_tokens"))
        .and_then(Value::as_u64)
    {
        config.insert("maxTokens".into(), m.into());
    }
    for (from, to) in [("temperature", "temperature"), ("top_p", "topP")] {
        if let Some(v) = req.get(from) {
            config.insert(to.into(), v.clone());
        }
    }
    match req.get("stop") {
        Some(Value::String(s)) => {
            config.insert("stopSequences".into(), json!([s]));
        }
        Some(Value::Array(a)) => {
            config.insert("stopSequences".into(), Value::Array(a.clone()));
        }
        _ => {}
    }
    if !config.is_empty() {
        out.insert("inferenceConfig".into(), Value::Object(config));
    }
    Value::Object(out)
}

/// A Converse answer as OpenAI's `chat.completion`, its usage.
pub(crate) fn whole(v: &Value, model: Option<&str>, created: u64) -> Option<(Vec<u8>, Usage)> {
    let u = usage(v.get("usage")?)?;
    let mut text = String::new();
    for b in v
        .pointer("/output/message/content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(t) = b.get("text").and_then(Value::as_str) {
            text.push_str(t);
        }
    }
    let finish = finish(v.get("stopReason").and_then(Value::as_str).unwrap_or(""));
    let out = json!({
        "id": "bedrock",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": super::chat::openai_usage_json(&u),
    });
    Some((out.to_string().into_bytes(), u))
}

/// One message of an AWS event stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Message {
    /// `:event-type` (`contentBlockDelta`, `metadata`, ...), or `:exception-type`.
    pub(crate) kind: String,
    /// `:message-type`: `event`, `exception` or `error`.
    pub(crate) message_type: String,
    pub(crate) payload: Vec<u8>,
}

/// The largest message taken (Bedrock's are a few KiB): a larger length is a broken stream.
const MAX_MESSAGE: usize = 16 << 20;

fn crc32(data: &[u8]) -> u32 {
    let mut c = flate2::Crc::new();
    c.update(data);
    c.sum()
}

/// Splits an AWS event stream into messages as its bytes arrive, checking both CRCs.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    pending: Vec<u8>,
    /// Set once the stream is found broken: nothing more is read.
    broken: bool,
}

impl Frames {
    /// Adds `data`; calls `f` with each complete message. Err: the stream is broken (a CRC or
    /// a length is wrong); the messages before it were given.
    pub(crate) fn feed(
        &mut self,
        data: &[u8],
        mut f: impl FnMut(Message),
    ) -> Result<(), &'static str> {
        if self.broken {
            return Err("the event stream is broken");
        }
        self.pending.extend_from_slice(data);
        let mut at = 0;
        loop {
            let rest = &self.pending[at..];
            if rest.len() < 12 {
                break;
            }
            let total = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let headers_len = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
            let prelude_crc = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
            if crc32(&rest[..8]) != prelude_crc || total < 16 + headers_len || total > MAX_MESSAGE {
                self.broken = true;
                return Err("an event stream prelude is invalid");
            }
            if rest.len() < total {
                break;
            }
            let msg = &rest[..total];
            let crc = u32::from_be_bytes([
                msg[total - 4],
                msg[total - 3],
                msg[total - 2],
                msg[total - 1],
            ]);
            if crc32(&msg[..total - 4]) != crc {
                self.broken = true;
                return Err("an event stream message fails its CRC");
            }
            let Some(m) = parse(
                &msg[12..12 + headers_len],
                &msg[12 + headers_len..total - 4],
            ) else {
                self.broken = true;
                return Err("an event stream message has invalid headers");
            };
            f(m);
            at += total;
        }
        self.pending.drain(..at);
        Ok(())
    }
}

/// A message's headers (each: name length, name, type, value) and payload.
fn parse(mut h: &[u8], payload: &[u8]) -> Option<Message> {
    let mut m = Message {
        kind: String::new(),
        message_type: String::new(),
        payload: payload.to_vec(),
    };
    while !h.is_empty() {
        let n = *h.first()? as usize;
        let name = std::str::from_utf8(h.get(1..1 + n)?).ok()?;
        let kind = *h.get(1 + n)?;
        h = &h[2 + n..];
        // Value lengths by type (the event stream's: 0/1 booleans, 2 byte, 3 short, 4 int,
        // 5 long, 6 bytes, 7 string, 8 timestamp, 9 uuid).
        let (value, used): (&[u8], usize) = match kind {
            0 | 1 => (&[], 0),
            2 => (h.get(..1)?, 1),
            3 => (h.get(..2)?, 2),
            4 => (h.get(..4)?, 4),
            5 | 8 => (h.get(..8)?, 8),
            9 => (h.get(..16)?, 16),
            6 | 7 => {
                let len = u16::from_be_bytes([*h.first()?, *h.get(1)?]) as usize;
                (h.get(2..2 + len)?, 2 + len)
            }
            _ => return None,
        };
        if kind == 7 {
            let v = std::str::from_utf8(value).ok()?;
            match name {
                ":event-type" | ":exception-type" => m.kind = v.to_owned(),
                ":message-type" => m.message_type = v.to_owned(),
                _ => {}
            }
        }
        h = &h[used..];
    }
    Some(m)
}

/// Encodes one message (string headers only): what Bedrock sends, for the tests.
#[cfg(test)]
pub(crate) fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for (n, v) in headers {
        h.push(n.len() as u8);
        h.extend_from_slice(n.as_bytes());
        h.push(7);
        h.extend_from_slice(&(v.len() as u16).to_be_bytes());
        h.extend_from_slice(v.as_bytes());
    }
    let total = 16 + h.len() + payload.len();
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(h.len() as u32).to_be_bytes());
    let c = crc32(&out);
    out.extend_from_slice(&c.to_be_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    let c = crc32(&out);
    out.extend_from_slice(&c.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, payload: &str) -> Vec<u8> {
        encode(
            &[
                (":event-type", kind),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
            payload.as_bytes(),
        )
    }

    #[test]
    fn messages_are_split_however_the_bytes_arrive_and_their_crcs_checked() {
        let mut all = event("messageStart", r#"{"role":"assistant"}"#);
        all.extend(event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#,
        ));
        for cut in 0..all.len() {
            let mut f = Frames::default();
            let mut got = Vec::new();
            f.feed(&all[..cut], |m| got.push(m)).unwrap();
            f.feed(&all[cut..], |m| got.push(m)).unwrap();
            assert_eq!(got.len(), 2, "cut at {cut}");
            assert_eq!(got[1].kind, "contentBlockDelta");
            assert_eq!(got[1].message_type, "event");
            assert_eq!(
                got[1].payload,
                br#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#
            );
        }
        let mut bad = event("messageStop", r#"{"stopReason":"end_turn"}"#);
        let last = bad.len() - 6;
        bad[last] ^= 1;
        assert!(Frames::default().feed(&bad, |_| {}).is_err());
        let mut huge = event("x", "{}");
        huge[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(Frames::default().feed(&huge, |_| {}).is_err());
    }

    #[test]
    fn requests_become_converse_requests() {
        let req: Map<String, Value> = serde_json::from_str(
            r#"{"model":"m","max_tokens":50,"temperature":0.5,"stop":"END","messages":[
                {"role":"system","content":"Be terse."},
                {"role":"user","content":"Hi"},
                {"role":"user","content":[{"type":"text","text":"again"}]},
                {"role":"assistant","content":"Hello"}]}"#,
        )
        .unwrap();
        assert_eq!(
            to_bedrock(&req),
            json!({
                "messages": [
                    {"role": "user", "content": [{"text": "Hi"}, {"text": "again"}]},
                    {"role": "assistant", "content": [{"text": "Hello"}]},
                ],
                "system": [{"text": "Be terse."}],
                "inferenceConfig": {"maxTokens": 50, "temperature": 0.5, "stopSequences": ["END"]},
            })
        );
    }
}
