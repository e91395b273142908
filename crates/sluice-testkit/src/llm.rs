//! A fixture language-model server: answers as OpenAI's chat completions, Anthropic's messages
//! and Google's Gemini do, whole (JSON) or streamed (server-sent events), with the shapes of
//! their public API references:
//!
//! - OpenAI: <https://platform.openai.com/docs/api-reference/chat/create> (`chat.completion`,
//!   `chat.completion.chunk`, the usage chunk with empty `choices` when
//!   `stream_options.include_usage` is asked, `data: [DONE]`);
//! - Anthropic: <https://docs.anthropic.com/en/api/messages> and
//!   <https://docs.anthropic.com/en/api/messages-streaming> (`message_start` ...
//!   `message_stop`, usage split between `message_start` and `message_delta`);
//! - Gemini: <https://ai.google.dev/api/generate-content> (`candidates`, `usageMetadata`,
//!   `streamGenerateContent?alt=sse`);
//! - Bedrock's Converse: <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html>
//!   and `ConverseStream`, in the AWS event stream's binary framing (prelude, CRC-32s, typed
//!   headers), its requests' SigV4 signatures checked with [`BEDROCK_SECRET`] as AWS checks them
//!   (a stand-in: Bedrock cannot run here).
//!
//! The API is chosen by the path (`/v1/chat/completions` or any path ending in
//! `chat/completions`, `/v1/messages`, `...:generateContent`, `...:streamGenerateContent`).
//! Requests are checked as the providers check them (Anthropic's `max_tokens`,
//! `anthropic-version` and `x-api-key`; Gemini's `contents`; a key when one is configured):
//! a request the gateway translated wrongly is answered 400 as a provider would.
//!
//! The header `X-AI-Fixture` picks a behaviour (APISIX's tests pick fixture files with it):
//! `429`, `500` (the provider's error body), `cut` (a stream, or a body, cut off midway),
//! `stall:<ms>` (nothing before the head for that long), `drip:<ms>` (that long between
//! events). Every answer has the same text and the same usage, streamed or not:
//! [`PROMPT_TOKENS`], [`COMPLETION_TOKENS`], [`CACHED_TOKENS`], [`REASONING_TOKENS`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Prompt tokens of every answer (cached ones included, as OpenAI counts).
pub const PROMPT_TOKENS: u64 = 21;
/// Completion tokens of every answer (reasoning ones included).
pub const COMPLETION_TOKENS: u64 = 9;
/// Prompt tokens read from the cache.
pub const CACHED_TOKENS: u64 = 4;
/// Completion tokens spent reasoning (OpenAI and Gemini report them; Anthropic does not).
pub const REASONING_TOKENS: u64 = 2;
/// Anthropic's cache writes (counted in its prompt beside input and cache reads).
pub const CACHE_WRITE_TOKENS: u64 = 3;
/// The secret access key the Bedrock stand-in checks signatures with (access key
/// [`BEDROCK_KEY_ID`], region `us-east-1`).
pub const BEDROCK_SECRET: &str = "fixture/secret/KEY";
/// The access key id of [`BEDROCK_SECRET`].
pub const BEDROCK_KEY_ID: &str = "AKIDFIXTURE";

/// Prompt tokens of an embeddings answer, per input (OpenAI's `/v1/embeddings`).
pub const EMBEDDING_TOKENS: u64 = 7;

/// The answer's text, in the pieces a stream sends.
pub const PIECES: [&str; 5] = ["Hello", " from", " the", " fixture", "."];

/// What the fixture received: one request.
#[derive(Debug, Clone)]
pub struct LlmRequest {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl LlmRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The fixture server on `127.0.0.1:0`.
#[derive(Clone)]
pub struct LlmFixture {
    pub addr: SocketAddr,
    /// The key requests must carry (`Authorization: Bearer`, `x-api-key` or `x-goog-api-key`).
    key: Option<String>,
    received: Arc<Mutex<Vec<LlmRequest>>>,
    open: Arc<AtomicUsize>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for LlmFixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmFixture")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for LlmFixture {
    fn drop(&mut self) {
        if Arc::strong_count(&self.task) == 1 {
            self.task.abort();
        }
    }
}

impl LlmFixture {
    /// Starts a fixture that wants `key` (None: any request).
    pub async fn start(key: Option<&str>) -> LlmFixture {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the llm fixture");
        let addr = listener.local_addr().expect("its address");
        let received = Arc::new(Mutex::new(Vec::new()));
        let open = Arc::new(AtomicUsize::new(0));
        let key = key.map(str::to_owned);
        let (r, k, o) = (received.clone(), key.clone(), open.clone());
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let (r, k, o) = (r.clone(), k.clone(), o.clone());
                tokio::spawn(async move {
                    o.fetch_add(1, Ordering::SeqCst);
                    let _ = serve(sock, &r, k.as_deref()).await;
                    o.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        LlmFixture {
            addr,
            key,
            received,
            open,
            task: Arc::new(task),
        }
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<LlmRequest> {
        self.received.lock().clone()
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// The key it wants.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }
}

/// One connection: requests served in turn while it is kept alive.
async fn serve(
    mut sock: TcpStream,
    received: &Mutex<Vec<LlmRequest>>,
    key: Option<&str>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    loop {
        let (head_len, path, headers) = loop {
            if let Some(h) = parse_head(&buf) {
                break h;
            }
            let mut more = [0u8; 8192];
            let n = sock.read(&mut more).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&more[..n]);
        };
        let len: usize = header(&headers, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < head_len + len {
            let mut more = [0u8; 8192];
            let n = sock.read(&mut more).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&more[..n]);
        }
        let raw: Vec<u8> = buf[head_len..head_len + len].to_vec();
        let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        buf.drain(..head_len + len);
        received.lock().push(LlmRequest {
            path: path.clone(),
            headers: headers.clone(),
            body: body.clone(),
        });
        if !answer(&mut sock, &path, &headers, (&body, &raw), key).await? {
            return Ok(());
        }
    }
}

type Head = (usize, String, Vec<(String, String)>);

fn parse_head(buf: &[u8]) -> Option<Head> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = std::str::from_utf8(&buf[..end]).ok()?;
    let mut lines = text.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Some((end, path, headers))
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Api {
    OpenAi,
    Anthropic,
    Gemini,
    Bedrock,
}

/// Writes one answer; false when the connection must close.
async fn answer(
    sock: &mut TcpStream,
    path: &str,
    headers: &[(String, String)],
    (body, raw_body): (&Value, &[u8]),
    key: Option<&str>,
) -> std::io::Result<bool> {
    let only_path = path.split('?').next().unwrap_or("");
    let api = if only_path.starts_with("/model/")
        && (only_path.ends_with("/converse") || only_path.ends_with("/converse-stream"))
    {
        Api::Bedrock
    } else if only_path.ends_with("/messages") {
        Api::Anthropic
    } else if only_path.contains(":generateContent") || only_path.contains(":streamGenerateContent")
    {
        Api::Gemini
    } else {
        Api::OpenAi
    };
    let stream = match api {
        Api::Gemini => only_path.contains(":streamGenerateContent"),
        Api::Bedrock => only_path.ends_with("/converse-stream"),
        _ => body.get("stream").and_then(Value::as_bool) == Some(true),
    };
    let fixture = header(headers, "x-ai-fixture").unwrap_or("");
    let mut drip = Duration::ZERO;
    for part in fixture.split(',') {
        if let Some(ms) = part.strip_prefix("stall:").and_then(|m| m.parse().ok()) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if let Some(ms) = part.strip_prefix("drip:").and_then(|m| m.parse().ok()) {
            drip = Duration::from_millis(ms);
        }
    }
    let cut = fixture.split(',').any(|p| p == "cut");
    if only_path.ends_with("/embeddings") {
        return embeddings(sock, headers, body, key, fixture).await;
    }
    if api == Api::Bedrock
        && let Err(why) = check_sigv4(path, headers, raw_body)
    {
        return write_json(sock, "403 Forbidden", &json!({"message": why})).await;
    }
    if let Some(problem) = check(api, headers, body, key) {
        let status = if problem.0 == 401 {
            "401 Unauthorized"
        } else {
            "400 Bad Request"
        };
        return write_json(sock, status, &error_body(api, problem.1)).await;
    }
    if fixture.split(',').any(|p| p == "429") {
        return write_json(
            sock,
            "429 Too Many Requests",
            &error_body(api, "rate limit reached"),
        )
        .await;
    }
    if fixture.split(',').any(|p| p == "500") {
        return write_json(
            sock,
            "500 Internal Server Error",
            &error_body(api, "the server had an error"),
        )
        .await;
    }
    let model = match api {
        Api::Gemini => only_path
            .rsplit('/')
            .next()
            .and_then(|m| m.split(':').next())
            .unwrap_or("gemini")
            .to_owned(),
        Api::Bedrock => percent_decode(
            only_path
                .trim_start_matches("/model/")
                .rsplit_once('/')
                .map_or("", |(m, _)| m),
        ),
        _ => body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("fixture-model")
            .to_owned(),
    };
    if !stream {
        let doc = whole(api, &model);
        if cut {
            let text = doc.to_string();
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                text.len()
            );
            sock.write_all(head.as_bytes()).await?;
            sock.write_all(&text.as_bytes()[..text.len() / 2]).await?;
            return Ok(false);
        }
        return write_json(sock, "200 OK", &doc).await;
    }
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    let events = events(api, &model, include_usage);
    let ctype = if api == Api::Bedrock {
        "application/vnd.amazon.eventstream"
    } else {
        "text/event-stream"
    };
    sock.write_all(
        format!("HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n").as_bytes(),
    )
    .await?;
    let half = events.len() / 2;
    for (i, e) in events.iter().enumerate() {
        if cut && i == half {
            // Cut off: no last chunk, the connection closed.
            return Ok(false);
        }
        if !drip.is_zero() && i > 0 {
            tokio::time::sleep(drip).await;
        }
        let mut chunk = format!("{:x}\r\n", e.len()).into_bytes();
        chunk.extend_from_slice(e);
        chunk.extend_from_slice(b"\r\n");
        sock.write_all(&chunk).await?;
    }
    sock.write_all(b"0\r\n\r\n").await?;
    Ok(true)
}

/// What a provider refuses in a request: (status, message).
fn check(
    api: Api,
    headers: &[(String, String)],
    body: &Value,
    key: Option<&str>,
) -> Option<(u16, &'static str)> {
    let given = match api {
        Api::OpenAi => header(headers, "authorization").and_then(|v| v.strip_prefix("Bearer ")),
        Api::Anthropic => header(headers, "x-api-key"),
        Api::Gemini => header(headers, "x-goog-api-key"),
        // Signed instead (`check_sigv4`).
        Api::Bedrock => key,
    };
    if let Some(k) = key
        && given != Some(k)
    {
        return Some((401, "invalid api key"));
    }
    match api {
        Api::OpenAi => {
            if !body.get("messages").is_some_and(Value::is_array) {
                return Some((400, "messages is required"));
            }
        }
        Api::Anthropic => {
            if header(headers, "anthropic-version").is_none() {
                return Some((400, "anthropic-version header is required"));
            }
            if body.get("max_tokens").and_then(Value::as_u64).is_none() {
                return Some((400, "max_tokens: Field required"));
            }
            let ok_roles = body
                .get("messages")
                .and_then(Value::as_array)
                .is_some_and(|m| {
                    m.iter().all(|m| {
                        matches!(
                            m.get("role").and_then(Value::as_str),
                            Some("user" | "assistant")
                        )
                    })
                });
            if !ok_roles {
                return Some((400, "messages: roles must be user or assistant"));
            }
        }
        Api::Gemini => {
            if !body.get("contents").is_some_and(Value::is_array) {
                return Some((400, "contents is required"));
            }
        }
        Api::Bedrock => {
            // Converse: user first, then user and assistant in turn, content as blocks.
            let roles: Vec<&str> = body
                .get("messages")
                .and_then(Value::as_array)
                .map(|m| {
                    m.iter()
                        .map(|m| m.get("role").and_then(Value::as_str).unwrap_or(""))
                        .collect()
                })
                .unwrap_or_default();
            let alternate = roles
                .iter()
                .enumerate()
                .all(|(i, r)| *r == if i % 2 == 0 { "user" } else { "assistant" });
            if roles.is_empty() || !alternate {
                return Some((
                    400,
                    "messages must alternate user and assistant, user first",
                ));
            }
            if body.get("model").is_some() {
                return Some((400, "extraneous key [model] is not permitted"));
            }
        }
    }
    None
}

/// `%XX` decoded.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Checks a request's AWS SigV4 signature as AWS does, with [`BEDROCK_SECRET`]: this
/// stand-in's own reading of the documented algorithm (not the gateway's code).
fn check_sigv4(path: &str, headers: &[(String, String)], body: &[u8]) -> Result<(), String> {
    use hmac::{Hmac, Mac};
    use sha2::{Digest, Sha256};
    let hexs = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mac = |k: &[u8], d: &str| {
        let mut m = Hmac::<Sha256>::new_from_slice(k).unwrap();
        m.update(d.as_bytes());
        m.finalize().into_bytes().to_vec()
    };
    let auth = header(headers, "authorization").ok_or("no authorization")?;
    let rest = auth
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or("not AWS4-HMAC-SHA256")?;
    let field = |name: &str| {
        rest.split(", ")
            .find_map(|p| p.strip_prefix(name))
            .map(str::to_owned)
            .ok_or(format!("no {name}"))
    };
    let credential = field("Credential=")?;
    let signed = field("SignedHeaders=")?;
    let signature = field("Signature=")?;
    let parts: Vec<&str> = credential.split('/').collect();
    if parts.len() != 5
        || parts[0] != BEDROCK_KEY_ID
        || parts[2] != "us-east-1"
        || parts[3] != "bedrock"
    {
        return Err(format!("bad credential scope {credential}"));
    }
    let date = header(headers, "x-amz-date").ok_or("no x-amz-date")?;
    if !date.starts_with(parts[1]) {
        return Err("x-amz-date is not the credential's day".into());
    }
    for required in ["host", "x-amz-date"] {
        if !signed.split(';').any(|h| h == required) {
            return Err(format!("{required} is not signed"));
        }
    }
    let (only_path, query) = path.split_once('?').unwrap_or((path, ""));
    let enc = |s: &str| {
        s.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect::<String>()
    };
    let uri = only_path.split('/').map(enc).collect::<Vec<_>>().join("/");
    let mut q: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    q.sort_unstable();
    let canonical_headers: String = signed
        .split(';')
        .map(|h| format!("{h}:{}\n", header(headers, h).unwrap_or("").trim()))
        .collect();
    let canonical = format!(
        "POST\n{uri}\n{}\n{canonical_headers}\n{signed}\n{}",
        q.join("&"),
        hexs(&Sha256::digest(body))
    );
    let scope = parts[1..].join("/");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hexs(&Sha256::digest(canonical.as_bytes()))
    );
    let mut k = mac(format!("AWS4{BEDROCK_SECRET}").as_bytes(), parts[1]);
    for p in &parts[2..] {
        k = mac(&k, p);
    }
    if hexs(&mac(&k, &to_sign)) != signature {
        return Err(
            "The request signature we calculated does not match the signature you provided".into(),
        );
    }
    Ok(())
}

fn error_body(api: Api, message: &str) -> Value {
    match api {
        Api::OpenAi => {
            json!({"error": {"message": message, "type": "invalid_request_error", "code": null}})
        }
        Api::Anthropic => {
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
        }
        Api::Gemini => {
            json!({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}})
        }
        Api::Bedrock => json!({"message": message}),
    }
}

/// OpenAI's embeddings API (`POST /v1/embeddings`, its reference's shapes): `input` a string
/// or an array of them, `model` required; a vector of 4 per input, [`EMBEDDING_TOKENS`] prompt
/// tokens per input.
async fn embeddings(
    sock: &mut TcpStream,
    headers: &[(String, String)],
    body: &Value,
    key: Option<&str>,
    fixture: &str,
) -> std::io::Result<bool> {
    let given = header(headers, "authorization").and_then(|v| v.strip_prefix("Bearer "));
    if let Some(k) = key
        && given != Some(k)
    {
        return write_json(
            sock,
            "401 Unauthorized",
            &error_body(Api::OpenAi, "invalid api key"),
        )
        .await;
    }
    if fixture.split(',').any(|p| p == "429") {
        return write_json(
            sock,
            "429 Too Many Requests",
            &error_body(Api::OpenAi, "rate limit reached"),
        )
        .await;
    }
    let inputs = match body.get("input") {
        Some(Value::String(_)) => 1,
        Some(Value::Array(a)) if !a.is_empty() => a.len(),
        _ => {
            return write_json(
                sock,
                "400 Bad Request",
                &error_body(Api::OpenAi, "input is required"),
            )
            .await;
        }
    };
    let Some(model) = body.get("model").and_then(Value::as_str) else {
        return write_json(
            sock,
            "400 Bad Request",
            &error_body(Api::OpenAi, "model is required"),
        )
        .await;
    };
    if body.get("messages").is_some() || body.get("stream").is_some() {
        return write_json(
            sock,
            "400 Bad Request",
            &error_body(Api::OpenAi, "unknown parameter"),
        )
        .await;
    }
    let data: Vec<Value> = (0..inputs)
        .map(|i| json!({"object": "embedding", "index": i, "embedding": [0.0023, -0.0093, 0.0154, -0.0028]}))
        .collect();
    let tokens = EMBEDDING_TOKENS * inputs as u64;
    write_json(
        sock,
        "200 OK",
        &json!({
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }),
    )
    .await
}

async fn write_json(sock: &mut TcpStream, status: &str, v: &Value) -> std::io::Result<bool> {
    let text = v.to_string();
    let out = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
        text.len()
    );
    sock.write_all(out.as_bytes()).await?;
    Ok(true)
}

fn openai_usage() -> Value {
    json!({
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
        "prompt_tokens_details": {"cached_tokens": CACHED_TOKENS, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": REASONING_TOKENS, "audio_tokens": 0,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    })
}

/// Anthropic's input tokens exclude cache reads and writes.
const ANTHROPIC_INPUT: u64 = PROMPT_TOKENS - CACHED_TOKENS - CACHE_WRITE_TOKENS;

fn whole(api: Api, model: &str) -> Value {
    let text: String = PIECES.concat();
    match api {
        Api::OpenAi => json!({
            "id": "chatcmpl-fixture",
            "object": "chat.completion",
            "created": 1_764_000_000,
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text,
                "refusal": null}, "logprobs": null, "finish_reason": "stop"}],
            "usage": openai_usage(),
            "system_fingerprint": "fp_fixture",
        }),
        Api::Anthropic => json!({
            "id": "msg_fixture",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": null,
            "usage": {"input_tokens": ANTHROPIC_INPUT, "cache_creation_input_tokens": CACHE_WRITE_TOKENS,
                "cache_read_input_tokens": CACHED_TOKENS, "output_tokens": COMPLETION_TOKENS},
        }),
        Api::Bedrock => json!({
            "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": "end_turn",
            "usage": bedrock_usage(),
            "metrics": {"latencyMs": 12},
        }),
        Api::Gemini => json!({
            "candidates": [{"content": {"parts": [{"text": text}], "role": "model"},
                "finishReason": "STOP", "index": 0}],
            "usageMetadata": gemini_usage(),
            "modelVersion": model,
            "responseId": "gemini-fixture",
        }),
    }
}

fn bedrock_usage() -> Value {
    json!({
        "inputTokens": ANTHROPIC_INPUT,
        "outputTokens": COMPLETION_TOKENS,
        "totalTokens": PROMPT_TOKENS + COMPLETION_TOKENS,
        "cacheReadInputTokens": CACHED_TOKENS,
        "cacheWriteInputTokens": CACHE_WRITE_TOKENS,
    })
}

/// One message of an AWS event stream (string headers), with its CRCs.
fn aws_event(kind: &str, payload: &Value) -> Vec<u8> {
    let crc = |b: &[u8]| {
        let mut c = flate2::Crc::new();
        c.update(b);
        c.sum()
    };
    let mut h = Vec::new();
    for (n, v) in [
        (":event-type", kind),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ] {
        h.push(n.len() as u8);
        h.extend_from_slice(n.as_bytes());
        h.push(7);
        h.extend_from_slice(&(v.len() as u16).to_be_bytes());
        h.extend_from_slice(v.as_bytes());
    }
    let p = payload.to_string();
    let total = 16 + h.len() + p.len();
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(h.len() as u32).to_be_bytes());
    let c = crc(&out);
    out.extend_from_slice(&c.to_be_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(p.as_bytes());
    let c = crc(&out);
    out.extend_from_slice(&c.to_be_bytes());
    out
}

fn gemini_usage() -> Value {
    json!({
        "promptTokenCount": PROMPT_TOKENS,
        "candidatesTokenCount": COMPLETION_TOKENS - REASONING_TOKENS,
        "thoughtsTokenCount": REASONING_TOKENS,
        "cachedContentTokenCount": CACHED_TOKENS,
        "totalTokenCount": PROMPT_TOKENS + COMPLETION_TOKENS,
    })
}

/// A stream's events, each with its blank line.
fn events(api: Api, model: &str, include_usage: bool) -> Vec<Vec<u8>> {
    if api == Api::Bedrock {
        let p = "p".repeat(7);
        let mut out = vec![aws_event(
            "messageStart",
            &json!({"role": "assistant", "p": p}),
        )];
        for piece in PIECES {
            out.push(aws_event(
                "contentBlockDelta",
                &json!({"contentBlockIndex": 0, "delta": {"text": piece}, "p": p}),
            ));
        }
        out.push(aws_event(
            "contentBlockStop",
            &json!({"contentBlockIndex": 0, "p": p}),
        ));
        out.push(aws_event(
            "messageStop",
            &json!({"stopReason": "end_turn", "p": p}),
        ));
        out.push(aws_event(
            "metadata",
            &json!({"usage": bedrock_usage(), "metrics": {"latencyMs": 12}, "p": p}),
        ));
        return out;
    }
    let data = |v: Value| format!("data: {v}\n\n");
    let named = |name: &str, v: Value| format!("event: {name}\ndata: {v}\n\n");
    let mut out = Vec::new();
    match api {
        Api::OpenAi => {
            let chunk = |delta: Value, finish: Value| {
                let mut c = json!({"id": "chatcmpl-fixture", "object": "chat.completion.chunk",
                    "created": 1_764_000_000, "model": model, "system_fingerprint": "fp_fixture",
                    "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
                if include_usage {
                    c["usage"] = Value::Null;
                }
                c
            };
            out.push(data(chunk(
                json!({"role": "assistant", "content": "", "refusal": null}),
                Value::Null,
            )));
            for p in PIECES {
                out.push(data(chunk(json!({"content": p}), Value::Null)));
            }
            out.push(data(chunk(json!({}), json!("stop"))));
            if include_usage {
                out.push(data(
                    json!({"id": "chatcmpl-fixture", "object": "chat.completion.chunk",
                    "created": 1_764_000_000, "model": model, "system_fingerprint": "fp_fixture",
                    "choices": [], "usage": openai_usage()}),
                ));
            }
            out.push("data: [DONE]\n\n".into());
        }
        Api::Anthropic => {
            out.push(named("message_start", json!({"type": "message_start", "message": {
                "id": "msg_fixture", "type": "message", "role": "assistant", "content": [],
                "model": model, "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": ANTHROPIC_INPUT, "cache_creation_input_tokens": CACHE_WRITE_TOKENS,
                    "cache_read_input_tokens": CACHED_TOKENS, "output_tokens": 1}}})));
            out.push(named(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            ));
            out.push(named("ping", json!({"type": "ping"})));
            for p in PIECES {
                out.push(named(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": p}}),
                ));
            }
            out.push(named(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ));
            out.push(named(
                "message_delta",
                json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                "usage": {"output_tokens": COMPLETION_TOKENS}}),
            ));
            out.push(named("message_stop", json!({"type": "message_stop"})));
        }
        Api::Gemini => {
            let n = PIECES.len();
            for (i, p) in PIECES.iter().enumerate() {
                let mut c = json!({"candidates": [{"content": {"parts": [{"text": p}], "role": "model"}, "index": 0}],
                    "modelVersion": model, "responseId": "gemini-fixture"});
                if i + 1 == n {
                    c["candidates"][0]["finishReason"] = json!("STOP");
                    c["usageMetadata"] = gemini_usage();
                } else {
                    c["usageMetadata"] = json!({"promptTokenCount": PROMPT_TOKENS, "totalTokenCount": PROMPT_TOKENS});
                }
                out.push(data(c));
            }
        }
        // Written above, in its binary framing.
        Api::Bedrock => {}
    }
    out.into_iter().map(String::into_bytes).collect()
}
