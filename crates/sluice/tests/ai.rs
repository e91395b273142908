//! The AI gateway end to end: `ai-proxy`, `ai-proxy-multi`, `ai-rate-limiting` and the prompt
//! plugins in front of the fixture language-model server of the test kit, which answers as
//! OpenAI, Anthropic and Gemini do (their documented JSON and event-stream shapes) and checks
//! the requests it gets as they do. Token limits across two gateways share a real Redis.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::{Value, json};
use sluice_testkit::{
    CACHED_TOKENS, COMPLETION_TOKENS, Client, EMBEDDING_TOKENS, Gateway, LlmFixture, PIECES,
    PROMPT_TOKENS, REASONING_TOKENS,
};

/// A node (the tests' usual settings) writing its access log in [`LOG`]'s format.
struct Node {
    t: common::TestNode,
    log: PathBuf,
}

impl Node {
    fn start(routes: &str) -> Node {
        let log = std::env::temp_dir().join(format!(
            "sluice-ai-{}-{:x}.log",
            std::process::id(),
            common::fastrand_u64()
        ));
        let t = common::TestNode::start_with(
            &format!(
                "log:\n  access: {{path: {}, format: '{LOG}'}}\n",
                log.display()
            ),
            &format!("routes:\n{routes}"),
        );
        Node { t, log }
    }

    fn proxy(&self) -> Client {
        self.t.proxy()
    }

    /// The access log's lines, once there are `n` (it is flushed once a second).
    async fn log_lines(&self, n: usize) -> Vec<HashMap<String, String>> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            if lines.len() >= n {
                return lines
                    .iter()
                    .map(|l| {
                        l.split('|')
                            .filter_map(|kv| kv.split_once('='))
                            .map(|(k, v)| (k.to_owned(), v.to_owned()))
                            .collect()
                    })
                    .collect();
            }
            assert!(Instant::now() < deadline, "{} lines of {n}", lines.len());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

const LOG: &str = "uri=$uri|status=$status|type=$request_type|asked=$request_llm_model|model=$llm_model|prompt=$llm_prompt_tokens|completion=$llm_completion_tokens|total=$llm_total_tokens|cached=$llm_cache_read_input_tokens|reasoning=$llm_reasoning_tokens|ttft=$llm_time_to_first_token|instance=$llm_instance|provider=$llm_provider";

/// A chat request; `stream` as asked; its text about 84 bytes (21 tokens at four bytes a token,
/// as many as the fixture reports: the estimate a request reserves is then exact).
fn chat(stream: bool, usage: bool) -> Value {
    let mut b = json!({
        "model": "client-model",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say hello to the fixture, please, in a short sentence of words."},
        ],
    });
    if stream {
        b["stream"] = json!(true);
    }
    if usage {
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

async fn post(
    c: &Client,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> sluice_testkit::TestResponse {
    let mut h = vec![("content-type", "application/json")];
    h.extend_from_slice(headers);
    c.send(Method::POST, path, &h, body.to_string()).await
}

/// The events of a streamed answer: each `data:` payload.
fn data_events(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(str::to_owned)
        .collect()
}

/// The text of a streamed answer's deltas, and its usage chunk if it has one.
fn streamed(text: &str) -> (String, Option<Value>, bool) {
    let mut out = String::new();
    let mut usage = None;
    let mut done = false;
    for d in data_events(text) {
        if d == "[DONE]" {
            done = true;
            continue;
        }
        let v: Value = serde_json::from_str(&d).unwrap_or_else(|e| panic!("{e}: {d}"));
        assert_eq!(v["object"], "chat.completion.chunk", "{d}");
        if let Some(c) = v
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
        {
            out.push_str(c);
        }
        if v["choices"].as_array().is_some_and(Vec::is_empty) {
            usage = Some(v["usage"].clone());
        }
    }
    (out, usage, done)
}

fn ai_route(uri: &str, provider: &str, endpoint: &str, key: &str, extra: &str) -> String {
    let auth = match provider {
        "anthropic" => format!("{{header: {{x-api-key: {key}}}}}"),
        "gemini" => format!("{{header: {{x-goog-api-key: {key}}}}}"),
        "bedrock" => format!(
            "{{aws: {{access_key_id: {}, secret_access_key: '{}'}}}}",
            sluice_testkit::BEDROCK_KEY_ID,
            sluice_testkit::BEDROCK_SECRET
        ),
        _ => format!("{{header: {{Authorization: 'Bearer {key}'}}}}"),
    };
    format!(
        "  - uri: {uri}\n    plugins:\n      ai-proxy: {{provider: {provider}, auth: {auth}, options: {{model: {provider}-model}}, override: {{endpoint: '{endpoint}'}}{extra}}}\n"
    )
}

#[tokio::test]
async fn every_provider_answers_as_openai_and_counts_the_same_tokens_streamed_or_not() {
    let fx = LlmFixture::start(Some("sk-test")).await;
    let cases = [
        ("openai", format!("{}/v1/chat/completions", fx.url())),
        ("deepseek", fx.url()),
        (
            "openai-compatible",
            format!("{}/v1/chat/completions", fx.url()),
        ),
        (
            "azure-openai",
            format!(
                "{}/openai/deployments/d1/chat/completions?api-version=2024-10-21",
                fx.url()
            ),
        ),
        ("anthropic", fx.url()),
        ("gemini", fx.url()),
        ("bedrock", fx.url()),
    ];
    let mut routes = String::new();
    for (p, endpoint) in &cases {
        let extra = if *p == "bedrock" {
            ", provider_conf: {region: us-east-1}"
        } else {
            ""
        };
        routes.push_str(&ai_route(&format!("/{p}"), p, endpoint, "sk-test", extra));
    }
    let n = Node::start(&routes);
    let c = n.proxy();
    let text: String = PIECES.concat();
    let mut sent = 0;
    for (p, _) in &cases {
        let path = format!("/{p}");
        // Whole.
        let r = post(&c, &path, &chat(false, false), &[]).await;
        assert_eq!(r.status, 200, "{p}: {}", r.text());
        let v = r.json();
        assert_eq!(v["object"], "chat.completion", "{p}: {v}");
        assert_eq!(v["choices"][0]["message"]["content"], text, "{p}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{p}");
        assert_eq!(v["usage"]["prompt_tokens"], PROMPT_TOKENS, "{p}");
        assert_eq!(v["usage"]["completion_tokens"], COMPLETION_TOKENS, "{p}");
        assert_eq!(
            v["usage"]["total_tokens"],
            PROMPT_TOKENS + COMPLETION_TOKENS,
            "{p}"
        );
        // Streamed, the client asking no usage: none reaches it, though it was asked for.
        let r = post(&c, &path, &chat(true, false), &[]).await;
        assert_eq!(r.status, 200, "{p}: {}", r.text());
        assert!(
            r.header("content-type")
                .unwrap()
                .starts_with("text/event-stream"),
            "{p}"
        );
        let (got, usage, done) = streamed(&r.text());
        assert_eq!(got, text, "{p}: {}", r.text());
        assert!(
            usage.is_none(),
            "{p}: a usage chunk the client did not ask for: {}",
            r.text()
        );
        assert!(done, "{p}: no [DONE]: {}", r.text());
        // Streamed with usage asked for: it arrives, exactly the whole answer's.
        let r = post(&c, &path, &chat(true, true), &[]).await;
        let (got, usage, _) = streamed(&r.text());
        assert_eq!(got, text, "{p}");
        let u = usage.unwrap_or_else(|| panic!("{p}: no usage chunk: {}", r.text()));
        assert_eq!(u["prompt_tokens"], PROMPT_TOKENS, "{p}");
        assert_eq!(u["completion_tokens"], COMPLETION_TOKENS, "{p}");
        assert_eq!(
            u["prompt_tokens_details"]["cached_tokens"], CACHED_TOKENS,
            "{p}"
        );
        sent += 3;
    }
    // What the providers got: their own shapes, with their keys and paths.
    let reqs = fx.requests();
    assert_eq!(reqs.len(), sent);
    let anthropic = reqs.iter().find(|r| r.path == "/v1/messages").unwrap();
    assert_eq!(anthropic.header("x-api-key"), Some("sk-test"));
    assert_eq!(anthropic.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(anthropic.body["system"], "You are terse.");
    assert_eq!(anthropic.body["model"], "anthropic-model");
    assert_eq!(anthropic.body["max_tokens"], 4096);
    assert!(
        reqs.iter()
            .any(|r| r.path == "/v1beta/models/gemini-model:generateContent")
    );
    assert!(
        reqs.iter()
            .any(|r| r.path == "/v1beta/models/gemini-model:streamGenerateContent?alt=sse")
    );
    let gemini = reqs
        .iter()
        .find(|r| r.path.contains("gemini-model"))
        .unwrap();
    assert_eq!(
        gemini.body["systemInstruction"]["parts"][0]["text"],
        "You are terse."
    );
    assert_eq!(gemini.body["contents"][0]["role"], "user");
    assert!(
        reqs.iter().any(|r| r.path == "/chat/completions"),
        "deepseek's path"
    );
    let bedrock = reqs
        .iter()
        .find(|r| r.path == "/model/bedrock-model/converse")
        .unwrap();
    assert_eq!(bedrock.body["system"][0]["text"], "You are terse.");
    assert!(
        bedrock
            .header("authorization")
            .unwrap()
            .starts_with("AWS4-HMAC-SHA256 Credential=")
    );
    assert!(
        reqs.iter()
            .any(|r| r.path == "/model/bedrock-model/converse-stream")
    );
    let azure = reqs
        .iter()
        .find(|r| r.path.starts_with("/openai/deployments/d1"))
        .unwrap();
    assert_eq!(
        azure.path,
        "/openai/deployments/d1/chat/completions?api-version=2024-10-21"
    );
    assert!(
        azure.body.get("model").is_none(),
        "azure names the model in its path"
    );
    let openai_stream = reqs
        .iter()
        .find(|r| r.path == "/v1/chat/completions" && r.body["stream"] == true)
        .unwrap();
    assert_eq!(openai_stream.body["stream_options"]["include_usage"], true);
    assert_eq!(
        openai_stream.body["model"], "openai-model",
        "options.model wins"
    );

    // The access log: every exchange counted alike, streamed or not.
    let lines = n.log_lines(sent).await;
    for l in &lines {
        let p = &l["uri"][1..];
        assert_eq!(l["status"], "200", "{l:?}");
        assert_eq!(l["prompt"], PROMPT_TOKENS.to_string(), "{l:?}");
        assert_eq!(l["completion"], COMPLETION_TOKENS.to_string(), "{l:?}");
        assert_eq!(
            l["total"],
            (PROMPT_TOKENS + COMPLETION_TOKENS).to_string(),
            "{l:?}"
        );
        assert_eq!(l["cached"], CACHED_TOKENS.to_string(), "{l:?}");
        let reasoning = if p == "anthropic" || p == "bedrock" {
            0
        } else {
            REASONING_TOKENS
        };
        assert_eq!(l["reasoning"], reasoning.to_string(), "{l:?}");
        assert_eq!(l["asked"], "client-model", "{l:?}");
        assert_eq!(l["instance"], format!("ai-proxy-{p}"), "{l:?}");
        assert_eq!(l["provider"], p, "{l:?}");
        assert!(l["ttft"].parse::<u64>().is_ok(), "{l:?}");
        assert!(
            ["ai_chat", "ai_stream"].contains(&l["type"].as_str()),
            "{l:?}"
        );
    }
    assert_eq!(
        lines.iter().filter(|l| l["type"] == "ai_stream").count(),
        sent * 2 / 3
    );
}

/// A route with nothing to change in the body (no `options`, OpenAI's API) forwards the
/// client's bytes as they are, with the stream's usage asked for where the client did not ask:
/// the request the provider gets is the client's, and the usage is counted and kept from it.
#[tokio::test]
async fn a_body_with_nothing_to_change_goes_as_sent_with_the_usage_asked_for() {
    let fx = LlmFixture::start(Some("sk-test")).await;
    let n = Node::start(&format!(
        "  - uri: /v1/chat/completions\n    plugins:\n      ai-proxy: {{provider: openai, auth: {{header: {{Authorization: 'Bearer sk-test'}}}}, override: {{endpoint: '{}/v1/chat/completions'}}}}\n",
        fx.url()
    ));
    let c = n.proxy();
    let text: String = PIECES.concat();
    let path = "/v1/chat/completions";
    // Streamed without usage, the body with blanks before its `{`.
    let body = format!(" \n{}", chat(true, false));
    let r = c
        .send(
            Method::POST,
            path,
            &[("content-type", "application/json")],
            body.clone(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let (got, usage, done) = streamed(&r.text());
    assert_eq!(got, text, "{}", r.text());
    assert!(usage.is_none(), "not asked for: {}", r.text());
    assert!(done);
    // Streamed with usage, whole, and with stream_options of its own (the general way).
    let mut own = chat(true, false);
    own["stream_options"] = json!({"include_usage": false});
    let bodies = [chat(true, true), chat(false, false), own.clone()];
    for b in &bodies {
        let r = post(&c, path, b, &[]).await;
        assert_eq!(r.status, 200, "{b}: {}", r.text());
    }
    let reqs = fx.requests();
    assert_eq!(reqs.len(), 4);
    let mut asked = chat(true, false);
    asked["stream_options"] = json!({"include_usage": true});
    assert_eq!(
        reqs[0].body, asked,
        "the client's, with the usage asked for"
    );
    assert_eq!(reqs[1].body, bodies[0]);
    assert_eq!(reqs[2].body, bodies[1]);
    assert_eq!(reqs[3].body, asked);
    for r in &reqs {
        assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    }
    // Every one counted with the provider's usage, and the stream asked for it.
    for l in n.log_lines(4).await {
        assert_eq!(l["prompt"], PROMPT_TOKENS.to_string(), "{l:?}");
        assert_eq!(l["completion"], COMPLETION_TOKENS.to_string(), "{l:?}");
        assert_eq!(l["asked"], "client-model", "{l:?}");
    }
}

#[tokio::test]
async fn a_wrong_key_is_the_providers_401_and_a_body_that_is_not_a_chat_request_a_400() {
    let fx = LlmFixture::start(Some("sk-right")).await;
    let routes = ai_route("/a", "openai", &fx.url(), "sk-wrong", "");
    let n = Node::start(&routes);
    let c = n.proxy();
    let r = post(&c, "/a", &chat(false, false), &[]).await;
    assert_eq!(r.status, 401, "{}", r.text());
    let r = c.send(Method::POST, "/a", &[], "not json").await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("not JSON"), "{}", r.text());
    let r = post(&c, "/a", &json!({"prompt": "hi"}), &[]).await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("messages"), "{}", r.text());
    assert_eq!(
        fx.requests().len(),
        1,
        "only the chat request reached the provider"
    );
}

#[tokio::test]
async fn a_stream_cut_midway_reaches_the_client_cut_and_is_counted_as_far_as_it_went() {
    let fx = LlmFixture::start(None).await;
    for provider in ["openai", "anthropic"] {
        let routes = ai_route("/a", provider, &fx.url(), "k", "");
        let n = Node::start(&routes);
        let addr = n.t.node().server().local_addrs()[0];
        // Raw: the client must see the answer end without its last chunk.
        let body = chat(true, false).to_string();
        let req = format!(
            "POST /a HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\nx-ai-fixture: cut\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(req.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got))
            .await
            .unwrap()
            .unwrap();
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 200"), "{provider}: {text}");
        assert!(
            !text.ends_with("0\r\n\r\n"),
            "{provider}: a cut stream ended cleanly: {text}"
        );
        assert!(
            text.contains("Hello"),
            "{provider}: the first events went on: {text}"
        );
        let l = n.log_lines(1).await.remove(0);
        let completion: u64 = l["completion"].parse().unwrap();
        let prompt: u64 = l["prompt"].parse().unwrap();
        assert!(completion >= 1, "{provider}: {l:?}");
        assert!(prompt >= 1, "{provider}: {l:?}");
    }
}

fn multi_route(uri: &str, a: &LlmFixture, a_fixture: &str, b: &LlmFixture, extra: &str) -> String {
    format!(
        r#"  - uri: {uri}
    plugins:
      ai-proxy-multi:
        timeout: 500
        {extra}
        instances:
          - {{name: first, provider: openai, priority: 1, weight: 1, options: {{model: first-model}}, override: {{endpoint: '{}'}}, auth: {{header: {{Authorization: 'Bearer k', X-AI-Fixture: '{a_fixture}'}}}}}}
          - {{name: second, provider: anthropic, priority: 0, weight: 1, options: {{model: second-model}}, override: {{endpoint: '{}'}}, auth: {{header: {{x-api-key: k}}}}}}
"#,
        a.url(),
        b.url()
    )
}

#[tokio::test]
async fn a_fallback_on_429_5xx_or_a_timeout_reaches_the_next_instance_before_any_byte_reaches_the_client()
 {
    let (a, b) = (LlmFixture::start(None).await, LlmFixture::start(None).await);
    let strategy = "fallback_strategy: [http_429, http_5xx]";
    let mut routes = String::new();
    routes.push_str(&multi_route("/r429", &a, "429", &b, strategy));
    routes.push_str(&multi_route("/r500", &a, "500", &b, strategy));
    routes.push_str(&multi_route("/stall", &a, "stall:3000", &b, strategy));
    routes.push_str(&multi_route("/none", &a, "429", &b, ""));
    routes.push_str(&multi_route("/cut", &a, "cut", &b, strategy));
    routes.push_str(&multi_route(
        "/retries",
        &a,
        "500",
        &b,
        "fallback_strategy: http_5xx\n        max_retries: 0",
    ));
    let n = Node::start(&routes);
    let c = n.proxy();
    for path in ["/r429", "/r500", "/stall"] {
        for stream in [false, true] {
            let before = (a.requests().len(), b.requests().len());
            let started = Instant::now();
            let r = post(&c, path, &chat(stream, false), &[]).await;
            assert_eq!(r.status, 200, "{path} stream={stream}: {}", r.text());
            let model = if stream {
                let first = data_events(&r.text()).into_iter().next().unwrap();
                serde_json::from_str::<Value>(&first).unwrap()["model"].clone()
            } else {
                r.json()["model"].clone()
            };
            assert_eq!(
                model, "second-model",
                "{path}: the second instance answered"
            );
            assert_eq!(
                a.requests().len(),
                before.0 + 1,
                "{path}: the first was tried once"
            );
            assert_eq!(b.requests().len(), before.1 + 1, "{path}");
            if path == "/stall" {
                assert!(
                    started.elapsed() < Duration::from_millis(2500),
                    "after the 500 ms timeout"
                );
            }
        }
    }
    // The first instance's credentials never went to the second.
    for r in b.requests() {
        assert_eq!(r.header("authorization"), None, "{r:?}");
        assert_eq!(r.header("x-ai-fixture"), None, "{r:?}");
    }
    // Without a strategy the first instance's answer is the answer.
    let r = post(&c, "/none", &chat(false, false), &[]).await;
    assert_eq!(r.status, 429);
    // max_retries: 0 never falls back.
    let r = post(&c, "/retries", &chat(false, false), &[]).await;
    assert_eq!(r.status, 500);
    // A stream that started is the answer: cut, never completed by another instance.
    let before = b.requests().len();
    let r = c
        .connection()
        .await
        .send(
            Method::POST,
            "/cut",
            &[("content-type", "application/json")],
            chat(true, false).to_string(),
        )
        .await;
    // The client sees the answer end without its last chunk (hyper's error on the body).
    assert!(
        r.is_err(),
        "the cut stream reached the client as if complete: {:?}",
        r.map(|r| (r.status, r.text()))
    );
    assert_eq!(
        b.requests().len(),
        before,
        "no fallback once bytes went out"
    );
    // Logged as the instance that answered.
    let lines = n.log_lines(6).await;
    assert!(
        lines[..6].iter().all(|l| l["instance"] == "second"),
        "{lines:?}"
    );
}

#[tokio::test]
async fn instances_share_requests_by_weight_and_chash_keeps_a_key_on_one_instance() {
    let (a, b) = (LlmFixture::start(None).await, LlmFixture::start(None).await);
    let inst = |name: &str, fx: &LlmFixture, w: u32| {
        format!(
            "          - {{name: {name}, provider: openai, weight: {w}, override: {{endpoint: '{}'}}, auth: {{header: {{Authorization: 'Bearer k'}}}}}}\n",
            fx.url()
        )
    };
    let routes = format!(
        "  - uri: /rr\n    plugins:\n      ai-proxy-multi:\n        instances:\n{}{}  - uri: /hash\n    plugins:\n      ai-proxy-multi:\n        balancer: {{algorithm: chash, hash_on: header, key: x-user}}\n        instances:\n{}{}",
        inst("a", &a, 3),
        inst("b", &b, 1),
        inst("a", &a, 1),
        inst("b", &b, 1)
    );
    let n = Node::start(&routes);
    let c = n.proxy();
    for _ in 0..40 {
        assert_eq!(post(&c, "/rr", &chat(false, false), &[]).await.status, 200);
    }
    assert_eq!((a.requests().len(), b.requests().len()), (30, 10));
    let mut seen = HashMap::new();
    for i in 0..40 {
        let user = format!("user-{}", i % 8);
        let before = a.requests().len();
        assert_eq!(
            post(&c, "/hash", &chat(false, false), &[("x-user", &user)])
                .await
                .status,
            200
        );
        let went_a = a.requests().len() > before;
        assert_eq!(*seen.entry(user).or_insert(went_a), went_a, "a key moved");
    }
    assert!(
        seen.values().any(|v| *v) && seen.values().any(|v| !*v),
        "both instances used: {seen:?}"
    );
}

#[tokio::test]
async fn token_limits_count_streamed_and_whole_answers_and_refuse_past_the_limit() {
    let fx = LlmFixture::start(None).await;
    let per = PROMPT_TOKENS + COMPLETION_TOKENS;
    let routes = ai_route("/a", "openai", &fx.url(), "k", "").replace(
        "\n    plugins:\n",
        &format!(
            "\n    plugins:\n      ai-rate-limiting: {{limit: {}, time_window: 3600}}\n",
            per * 3 + 1
        ),
    );
    let n = Node::start(&routes);
    let c = n.proxy();
    // Three answers (one streamed) use 3 × 30 = 90 of 91: the fourth is admitted (under the
    // limit when it starts), the fifth is not.
    for (i, stream) in [false, true, false, true].into_iter().enumerate() {
        let r = post(&c, "/a", &chat(stream, false), &[]).await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        let _ = r.text();
        assert_eq!(
            r.header("x-ai-ratelimit-limit-ai-proxy-openai"),
            Some(&*(per * 3 + 1).to_string())
        );
    }
    let r = post(&c, "/a", &chat(false, false), &[]).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(fx.requests().len(), 4);
}

#[tokio::test]
async fn an_instance_over_its_token_limit_is_left_for_the_next() {
    let (a, b) = (LlmFixture::start(None).await, LlmFixture::start(None).await);
    let routes = multi_route("/m", &a, "", &b, "fallback_strategy: instance_health_and_rate_limiting")
        .replace(
            "    plugins:\n",
            "    plugins:\n      ai-rate-limiting: {instances: [{name: first, limit: 40, time_window: 3600}]}\n",
        );
    let n = Node::start(&routes);
    let c = n.proxy();
    for _ in 0..4 {
        assert_eq!(post(&c, "/m", &chat(false, false), &[]).await.status, 200);
    }
    // The first instance took two (30, then 60 ≥ 40), the second the rest.
    assert_eq!((a.requests().len(), b.requests().len()), (2, 2));
}

#[tokio::test]
async fn a_token_limit_holds_across_two_gateways_sharing_redis_within_one_percent() {
    let redis = common::RedisServer::start();
    let fx = LlmFixture::start(None).await;
    let limit: u64 = 30_000;
    let routes = ai_route("/a", "openai", &fx.url(), "k", "").replace(
        "\n    plugins:\n",
        &format!(
            "\n    plugins:\n      ai-rate-limiting: {{limit: {limit}, time_window: 3600, policy: redis, redis_host: 127.0.0.1, redis_port: {}}}\n",
            redis.port
        ),
    );
    let yaml = format!("routes:\n{routes}");
    let (g1, g2) = (Gateway::start(&yaml), Gateway::start(&yaml));
    let mut tasks = Vec::new();
    for g in [&g1, &g2] {
        for _ in 0..4 {
            let c = g.client();
            tasks.push(tokio::spawn(async move {
                let mut tokens = 0u64;
                loop {
                    let r = post(&c, "/a", &chat(false, false), &[]).await;
                    match r.status.as_u16() {
                        200 => tokens += r.json()["usage"]["total_tokens"].as_u64().unwrap(),
                        503 => return tokens,
                        s => panic!("{s}: {}", r.text()),
                    }
                }
            }));
        }
    }
    let mut used = 0;
    for t in tasks {
        used += t.await.unwrap();
    }
    eprintln!("{used} tokens admitted by two gateways, limit {limit}");
    assert!(used >= limit, "{used} tokens admitted, limit {limit}");
    assert!(
        used as f64 <= limit as f64 * 1.01,
        "{used} tokens admitted, limit {limit}: over by more than 1%"
    );
}

#[tokio::test]
async fn token_limits_by_rules_count_per_key_with_limits_read_from_the_request() {
    let fx = LlmFixture::start(None).await;
    let per = PROMPT_TOKENS + COMPLETION_TOKENS;
    // What a request reserves when it starts: a token per four bytes of its messages' text.
    let reserved = chat(false, false)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().len() as u64)
        .sum::<u64>()
        .div_ceil(4);
    // APISIX's example: a limit per subscription (its count from a header, with a default)
    // and a stricter one per trial user.
    let routes = ai_route("/r", "openai", &fx.url(), "k", "").replace(
        "\n    plugins:\n",
        &format!(
            "\n    plugins:\n      ai-rate-limiting: {{rejected_code: 429, rules: [{{key: '${{http_x_subscription_id}}', count: '${{http_x_custom_count ?? {}}}', time_window: 60}}, {{key: '$http_x_trial_id', count: {}, time_window: 60, header_prefix: trial}}]}}\n",
            per * 2,
            per
        ),
    );
    let n = Node::start(&routes);
    let c = n.proxy();
    let ask = |h: &'static [(&'static str, &'static str)]| {
        let c = c.clone();
        async move { post(&c, "/r", &chat(false, false), h).await }
    };
    // Two answers of 30 tokens fill subscription a's 60; b counts apart.
    for _ in 0..2 {
        let r = ask(&[("x-subscription-id", "a")]).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(
            r.header("x-ai-1-ratelimit-limit"),
            Some(&*(per * 2).to_string())
        );
    }
    let r = ask(&[("x-subscription-id", "a")]).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("x-ai-1-ratelimit-remaining"), Some("0"));
    assert_eq!(ask(&[("x-subscription-id", "b")]).await.status, 200);
    // A count read from the request: subscription c may use 1,000.
    for _ in 0..3 {
        let r = ask(&[("x-subscription-id", "c"), ("x-custom-count", "1000")]).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-ai-1-ratelimit-limit"), Some("1000"));
    }
    // The trial rule (30 tokens) with its own header prefix; both rules apply to a request
    // with both keys, and a refusal by one takes back the reservation on the other.
    let r = ask(&[("x-trial-id", "t"), ("x-subscription-id", "d")]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("x-ai-trial-ratelimit-limit"),
        Some(&*per.to_string())
    );
    assert_eq!(
        r.header("x-ai-1-ratelimit-remaining"),
        Some(&*(per * 2 - reserved).to_string())
    );
    let r = ask(&[("x-trial-id", "t"), ("x-subscription-id", "d")]).await;
    assert_eq!(r.status, 429, "{}", r.text());
    let r = ask(&[("x-subscription-id", "d")]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("x-ai-1-ratelimit-remaining"),
        Some(&*(per * 2 - per - reserved).to_string()),
        "the refused request's reservation was taken back"
    );
    // No rule applies: 500 (a client must not switch its limit off by leaving a header
    // out), and a count that is not a number is the same.
    let r = ask(&[]).await;
    assert_eq!(r.status, 500, "{}", r.text());
    let r = ask(&[("x-subscription-id", "e"), ("x-custom-count", "lots")]).await;
    assert_eq!(r.status, 500, "{}", r.text());
    assert_eq!(fx.requests().len(), 8);
}

#[tokio::test]
async fn a_request_body_is_rewritten_by_a_model_before_it_goes_upstream() {
    let fx = LlmFixture::start(Some("sk-rw")).await;
    let origin = sluice_testkit::TestOrigin::http1().run().await;
    let prompt = "Mask card numbers. Keep the JSON as it is.";
    let route = |uri: &str, provider: &str, key: &str, extra: &str| {
        let auth = match provider {
            "anthropic" => format!("{{header: {{x-api-key: {key}}}}}"),
            _ => format!("{{header: {{Authorization: 'Bearer {key}'{extra}}}}}"),
        };
        format!(
            "  - uri: {uri}\n    upstream: {{nodes: {{'{}': 1}}}}\n    plugins:\n      ai-request-rewrite: {{provider: {provider}, prompt: '{prompt}', auth: {auth}, options: {{model: rw-model}}, override: {{endpoint: '{}'}}, timeout: 500}}\n",
            origin.node(),
            fx.url()
        )
    };
    let routes = [
        route("/openai", "openai", "sk-rw", ""),
        route("/anthropic", "anthropic", "sk-rw", ""),
        route("/wrong-key", "openai", "sk-nope", ""),
        route(
            "/stalled",
            "openai",
            "sk-rw",
            ", X-AI-Fixture: 'stall:3000'",
        ),
    ]
    .concat();
    let n = Node::start(&routes);
    let c = n.proxy();
    let original = r#"{"content": "John's card is 4111 1111 1111 1111."}"#;
    let send = |path: &'static str, body: &'static str| {
        let c = c.clone();
        async move {
            c.send(
                Method::POST,
                path,
                &[
                    ("content-type", "application/json"),
                    ("authorization", "Bearer client-secret"),
                ],
                body,
            )
            .await
        }
    };
    for (i, path) in ["/openai", "/anthropic"].into_iter().enumerate() {
        let r = send(path, original).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        // The upstream got the model's answer instead of the client's body.
        let up = origin.last();
        assert_eq!(&up.body[..], PIECES.concat().as_bytes(), "{path}");
        assert_eq!(up.uri, path);
        // The model got the prompt and the body, and nothing of the client's headers.
        let asked = &fx.requests()[i];
        assert_ne!(asked.header("authorization"), Some("Bearer client-secret"));
        let text = asked.body.to_string();
        assert!(text.contains("Mask card numbers"), "{path}: {text}");
        assert!(text.contains("4111 1111 1111 1111"), "{path}: {text}");
        assert_eq!(asked.body["model"], "rw-model");
    }
    assert_eq!(fx.requests()[0].path, "/v1/chat/completions");
    assert_eq!(
        fx.requests()[0].body["messages"][0],
        json!({"role": "system", "content": prompt})
    );
    assert_eq!(fx.requests()[1].path, "/v1/messages");
    let upstream_before = origin.requests().len();
    // The model refusing, stalling past the timeout, or no body: nothing goes upstream.
    let r = send("/wrong-key", original).await;
    assert_eq!(r.status, 500, "{}", r.text());
    let started = Instant::now();
    let r = send("/stalled", original).await;
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    let r = send("/openai", "").await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(origin.requests().len(), upstream_before);
}

#[tokio::test]
async fn embeddings_go_to_the_providers_embeddings_api_and_their_tokens_count() {
    let fx = LlmFixture::start(Some("sk-e")).await;
    let routes = [
        ai_route("/emb", "openai", &fx.url(), "sk-e", "").replace(
            "\n    plugins:\n",
            "\n    plugins:\n      ai-rate-limiting: {limit: 20, time_window: 3600}\n",
        ),
        ai_route(
            "/own-path",
            "openai-compatible",
            &format!("{}/custom/v1/embeddings", fx.url()),
            "sk-e",
            "",
        ),
        ai_route("/claude", "anthropic", &fx.url(), "sk-e", ""),
    ]
    .concat();
    let n = Node::start(&routes);
    let c = n.proxy();
    let two = json!({"model": "text-embedding-3-small", "input": ["first text", "second text"]});
    let r = post(&c, "/emb", &two, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(v["usage"]["prompt_tokens"], EMBEDDING_TOKENS * 2);
    let asked = &fx.requests()[0];
    assert_eq!(asked.path, "/v1/embeddings");
    assert_eq!(asked.header("authorization"), Some("Bearer sk-e"));
    assert_eq!(asked.body["model"], "openai-model");
    assert_eq!(asked.body["input"], two["input"]);
    assert!(asked.body.get("messages").is_none() && asked.body.get("stream").is_none());
    let r = post(
        &c,
        "/own-path",
        &json!({"model": "m", "input": "one text"}),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(fx.requests()[1].path, "/custom/v1/embeddings");
    // Counted as any answer: the access log's variables, and the token limit (14 of 20 used,
    // a second admitted under the limit, a third refused).
    let lines = n.log_lines(2).await;
    let l = lines.iter().find(|l| l["uri"] == "/emb").unwrap();
    assert_eq!(l["prompt"], (EMBEDDING_TOKENS * 2).to_string(), "{l:?}");
    assert_eq!(l["completion"], "0", "{l:?}");
    assert_eq!(l["total"], (EMBEDDING_TOKENS * 2).to_string(), "{l:?}");
    assert_eq!(l["asked"], "text-embedding-3-small", "{l:?}");
    assert_eq!(l["model"], "openai-model", "{l:?}");
    assert_eq!(post(&c, "/emb", &two, &[]).await.status, 200);
    assert_eq!(post(&c, "/emb", &two, &[]).await.status, 503);
    // A provider without an embeddings API here, and a body of neither API: 400, nothing sent.
    let sent = fx.requests().len();
    let r = post(&c, "/claude", &two, &[]).await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("no embeddings API"), "{}", r.text());
    let r = post(&c, "/emb", &json!({"model": "m", "prompt": "x"}), &[]).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(fx.requests().len(), sent);
}

#[tokio::test]
async fn prompts_are_decorated_templated_and_guarded() {
    let fx = LlmFixture::start(None).await;
    let base = ai_route("/x", "openai", &fx.url(), "k", "");
    let with = |uri: &str, plugin: &str| {
        base.replace("/x", uri).replace(
            "\n    plugins:\n",
            &format!("\n    plugins:\n      {plugin}\n"),
        )
    };
    let routes = [
        with("/decorated", "ai-prompt-decorator: {prepend: [{role: system, content: 'Be brief.'}], append: [{role: user, content: 'End with a full stop.'}]}"),
        with("/templated", "ai-prompt-template: {templates: [{name: explain, template: {model: some-model, messages: [{role: user, content: 'Explain {{topic}} in {{n}} lines.'}]}}]}"),
        with("/guarded", "ai-prompt-guard: {deny_patterns: ['(?i)password'], allow_patterns: ['hello|Hello']}"),
    ]
    .concat();
    let n = Node::start(&routes);
    let c = n.proxy();
    assert_eq!(
        post(&c, "/decorated", &chat(false, false), &[])
            .await
            .status,
        200
    );
    let m = &fx.requests()[0].body["messages"];
    assert_eq!(m[0], json!({"role": "system", "content": "Be brief."}));
    assert_eq!(m[1]["content"], "You are terse.");
    assert_eq!(
        m[3],
        json!({"role": "user", "content": "End with a full stop."})
    );
    let r = post(
        &c,
        "/templated",
        &json!({"template_name": "explain", "topic": "rust", "n": 3}),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        fx.requests()[1].body["messages"][0]["content"],
        "Explain rust in 3 lines."
    );
    let r = post(&c, "/templated", &json!({"template_name": "nope"}), &[]).await;
    assert_eq!(r.status, 400);
    assert!(
        r.text().contains("template: nope not configured"),
        "{}",
        r.text()
    );
    let ask = |text: &str| json!({"messages": [{"role": "user", "content": text}]});
    assert_eq!(
        post(&c, "/guarded", &ask("hello there"), &[]).await.status,
        200
    );
    let r = post(&c, "/guarded", &ask("hello, my PASSWORD is"), &[]).await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("prohibited"), "{}", r.text());
    let r = post(&c, "/guarded", &ask("good morning"), &[]).await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("allow patterns"), "{}", r.text());
    // An embeddings request's input is checked as a prompt is (it would otherwise reach the
    // model unread).
    let embed = |text: &str| json!({"model": "m", "input": ["hello", text]});
    let r = post(&c, "/guarded", &embed("my password is"), &[]).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("prohibited"), "{}", r.text());
    let r = post(&c, "/guarded", &embed("the weather"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(fx.requests().len(), 4);
    assert_eq!(fx.requests()[3].path, "/v1/embeddings");
}

#[test]
fn bad_ai_settings_are_refused_with_their_place() {
    let refused = |conf: &str, expect: &str| {
        let out = common::validate(&format!(
            "routes:\n  - uri: /a\n    plugins:\n      {conf}\n"
        ));
        assert!(out.contains(expect), "{conf}\n{out}");
    };
    refused(
        "ai-proxy: {provider: nope, auth: {}}",
        "routes[0].plugins.ai-proxy.provider: unknown provider \"nope\"",
    );
    refused("ai-proxy: {provider: openai}", "auth");
    refused(
        "ai-proxy: {provider: openai-compatible, auth: {}}",
        "override.endpoint",
    );
    refused(
        "ai-proxy: {provider: openai, auth: {}, timeout: 0}",
        "ai-proxy.timeout: must be a whole number from 1 to 600000 (milliseconds), got 0",
    );
    refused(
        "ai-proxy: {provider: openai, auth: {}, override: {endpoint: 'ftp://x'}}",
        "override.endpoint",
    );
    refused(
        "ai-proxy: {provider: bedrock, auth: {}}",
        "ai-proxy.auth.aws: bedrock needs AWS credentials",
    );
    refused(
        "ai-proxy: {provider: bedrock, auth: {aws: {access_key_id: a, secret_access_key: b}}}",
        "ai-proxy.provider_conf.region: bedrock needs its AWS region",
    );
    refused(
        "ai-proxy-multi: {instances: []}",
        "instances: must have at least one instance",
    );
    refused(
        "ai-proxy-multi: {instances: [{name: a, provider: openai, weight: 1, auth: {}}, {name: a, provider: openai, weight: 1, auth: {}}]}",
        "instances[1].name: \"a\" names two instances",
    );
    refused(
        "ai-proxy-multi: {fallback_strategy: sometimes, instances: [{name: a, provider: openai, weight: 1, auth: {}}]}",
        "fallback_strategy: unknown strategy",
    );
    refused(
        "ai-rate-limiting: {limit: 0, time_window: 60}",
        "ai-rate-limiting.limit",
    );
    refused(
        "ai-rate-limiting: {limit: 10}",
        "time_window: is required with limit",
    );
    refused(
        "ai-rate-limiting: {limit: 10, time_window: 60, limit_strategy: expression, cost_expr: 'a +'}",
        "cost_expr: invalid expression",
    );
    refused(
        "ai-rate-limiting: {limit: 10, time_window: 60, rules: [{key: $remote_addr, count: 1, time_window: 1}]}",
        "ai-rate-limiting: give limit and time_window (or instances), or rules, not both",
    );
    refused(
        "ai-rate-limiting: {rules: [{key: $http_a, count: 1, time_window: 1}, {key: $http_a, count: 2, time_window: 1}]}",
        "ai-rate-limiting.rules[1].key: duplicate key \"$http_a\" (rules[0] has it)",
    );
    refused(
        "ai-rate-limiting: {rules: [{key: $http_a, count: many, time_window: 0, header_prefix: 'a b'}]}",
        "ai-rate-limiting.rules[0].count: must be a whole number, or text with $variables",
    );
    refused(
        "ai-rate-limiting: {rules: [{key: $http_a, count: 1, time_window: 0}]}",
        "ai-rate-limiting.rules[0].time_window: must be a whole number from 1 to 31536000",
    );
    refused(
        "ai-rate-limiting: {rules: [{key: $http_a, count: 1, time_window: 1, header_prefix: 'a b'}]}",
        "ai-rate-limiting.rules[0].header_prefix: \"a b\" cannot be in a header name",
    );
    refused(
        "ai-rate-limiting: {rules: []}",
        "ai-rate-limiting.rules: must have at least one rule",
    );
    refused(
        "ai-rate-limiting: {rules: [{key: '${nope_x}', count: 1, time_window: 1}]}",
        "ai-rate-limiting.rules[0].key: unknown variable \"nope_x\"",
    );
    refused(
        "ai-request-rewrite: {provider: openai, auth: {header: {Authorization: k}}}",
        "prompt",
    );
    refused(
        "ai-request-rewrite: {provider: openai, prompt: ' ', auth: {}}",
        "ai-request-rewrite.prompt: must not be empty",
    );
    refused(
        "ai-request-rewrite: {provider: openai, prompt: p, auth: {}}",
        "ai-request-rewrite.auth: needs header or query",
    );
    refused(
        "ai-request-rewrite: {provider: openai, prompt: p, auth: {header: {A: b}}, timeout: 60001}",
        "ai-request-rewrite.timeout: must be a whole number from 1 to 60000 (milliseconds), got 60001",
    );
    refused(
        "ai-request-rewrite: {provider: openai-compatible, prompt: p, auth: {header: {A: b}}}",
        "ai-request-rewrite.override.endpoint",
    );
    refused(
        "ai-prompt-guard: {deny_patterns: ['(']}",
        "deny_patterns[0]: invalid pattern",
    );
    refused("ai-prompt-decorator: {}", "needs prepend or append");
    refused(
        "ai-prompt-template: {templates: [{name: t, template: {messages: [{role: robot, content: x}]}}]}",
        "role: unknown role \"robot\"",
    );
}
