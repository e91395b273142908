//! Every plugin against extreme numbers. Each number in a valid base configuration of each
//! plugin (its consumers' credentials too) is replaced, alone and in pairs, by values at and
//! past the edges: 0, 1e-300, 0.0005, negatives, 1e300, 18446744073709551615, i64::MIN, text
//! such as "NaN". Each configuration must either be refused, with errors in the user's words,
//! or build and serve a few requests through every phase the plugin declares, without a panic
//! and in bounded time.
//!
//! A deterministic table rather than random search: the interesting values are known, and
//! every run tries all of them.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::panic::AssertUnwindSafe;
use std::sync::{OnceLock, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_config::{CheckEnv, PluginCatalog, PluginScope, Validator};
use sluice_core::plugin::{Phases, Plugins, Scope};

use super::{CLIENT, ctx, head, try_build, yaml_value};
use crate::builtin;
use crate::harness::answer_and_filter;

/// A plugin's base case: a configuration that builds, its consumers, and a request it accepts.
struct Case {
    plugin: &'static str,
    config: &'static str,
    /// `(username, {plugin: credentials})`.
    consumers: &'static [(&'static str, &'static str)],
    request: fn() -> String,
}

fn get() -> String {
    "GET /a/b/c?x=1 HTTP/1.1\r\nHost: a\r\nOrigin: https://a.test\r\n\r\n".into()
}

fn gzip_get() -> String {
    "GET /a HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n".into()
}

fn br_get() -> String {
    "GET /a HTTP/1.1\r\nHost: a\r\nAccept-Encoding: br\r\n\r\n".into()
}

fn preflight() -> String {
    "OPTIONS /a HTTP/1.1\r\nHost: a\r\nOrigin: https://a.test\r\nAccess-Control-Request-Method: GET\r\n\r\n".into()
}

fn with_key() -> String {
    "GET / HTTP/1.1\r\nHost: a\r\napikey: k1\r\n\r\n".into()
}

fn with_basic() -> String {
    // alice:pw
    "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Basic YWxpY2U6cHc=\r\n\r\n".into()
}

fn with_jwt() -> String {
    let now = jsonwebtoken::get_current_timestamp();
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"key": "k1", "exp": now + 60, "nbf": now - 10}),
        &jsonwebtoken::EncodingKey::from_secret(b"s3cret"),
    )
    .expect("a token");
    format!("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {token}\r\n\r\n")
}

/// Every number a plugin reads is written out in its base, so that each one is varied.
const CASES: &[Case] = &[
    Case {
        plugin: "datadog",
        config: "{batch_max_size: 1, inactive_timeout: 1, include_path: true, constant_tags: [\"a:b\"], _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "loki-logger",
        config: "{endpoint_addrs: [\"http://127.0.0.1:1\"], timeout: 100, keepalive_timeout: 1000, keepalive_pool: 1, batch_max_size: 1, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "elasticsearch-logger",
        config: "{endpoint_addrs: [\"http://127.0.0.1:1\"], field: {index: i}, timeout: 1, batch_max_size: 1, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "splunk-hec-logging",
        config: "{endpoint: {uri: \"http://127.0.0.1:1/c\", token: t, timeout: 1, keepalive_timeout: 1000}, batch_max_size: 1, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "gzip",
        config: "{types: \"*\", min_length: 1, comp_level: 9, http_version: 1.0, buffers: {number: 4, size: 1024}, _meta: {priority: 1}}",
        consumers: &[],
        request: gzip_get,
    },
    Case {
        plugin: "brotli",
        config: "{types: \"*\", min_length: 1, comp_level: 11, mode: 1, lgwin: 24, lgblock: 24, _meta: {priority: 1}}",
        consumers: &[],
        request: br_get,
    },
    Case {
        plugin: "proxy-cache",
        config: "{cache_strategy: memory, cache_zone: memory_cache, cache_ttl: 1, max_resp_body_size: 1, cache_http_status: [200, 599], cache_method: [GET, POST], _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "kafka-logger",
        config: "{brokers: [{host: 127.0.0.1, port: 1}], kafka_topic: t, timeout: 1, batch_max_size: 1, cluster_name: 1, producer_batch_num: 1, producer_batch_size: 0, producer_max_buffering: 1, producer_time_linger: 1, meta_refresh_interval: 1, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "tcp-logger",
        config: "{host: 127.0.0.1, port: 1, timeout: 100, batch_max_size: 1, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "udp-logger",
        config: "{host: 127.0.0.1, port: 1, timeout: 1, batch_max_size: 3, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "syslog",
        config: "{host: 127.0.0.1, port: 1, timeout: 100, flush_limit: 10, drop_limit: 100, pool_size: 5, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "file-logger",
        config: "{path: /dev/null, batch_max_size: 2, inactive_timeout: 1, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "http-logger",
        config: "{uri: \"http://127.0.0.1:1/logs\", timeout: 1, batch_max_size: 2, inactive_timeout: 1, buffer_duration: 2, max_retry_count: 1, retry_delay: 0, max_req_body_bytes: 10, max_resp_body_bytes: 10, include_req_body: true, include_resp_body: true, log_format: {n: 5, s: \"$status\"}, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "openid-connect",
        config: "{client_id: c, client_secret: s, discovery: \"http://127.0.0.1:1/.well-known/openid-configuration\", bearer_only: true, timeout: 1, jwk_expires_in: 60, iat_slack: 5, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "body-transformer",
        config: "{request: {template: \"{{_ctx.var.arg_x + 1}}\"}, response: {template: \"{*_body*}\"}, max_req_body_size: 1024, max_resp_body_size: 2048, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "acl",
        config: "{allow_labels: {team: [a]}, rejected_code: 403, _meta: {priority: 1}}",
        consumers: &[("alice", "{key-auth: {key: k1}}")],
        request: get,
    },
    Case {
        plugin: "workflow",
        config: "{rules: [{case: [[\"arg_name\", \"==\", \"json\"]], actions: [[\"return\", {code: 403}]]}, {actions: [[\"limit-count\", {count: 2, time_window: 60, rejected_code: 429}]]}], _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "traffic-label",
        config: "{rules: [{actions: [{set_headers: {X-A: \"1\"}, weight: 3}, {weight: 2}]}], _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "multi-auth",
        config: "{auth_plugins: [{basic-auth: {}}, {key-auth: {}}], _meta: {priority: 1}}",
        consumers: &[("alice", "{key-auth: {key: k1}}")],
        request: with_key,
    },
    Case {
        plugin: "ldap-auth",
        config: "{base_dn: \"ou=users,dc=example,dc=org\", ldap_uri: \"127.0.0.1:1\", timeout: 10000, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "opa",
        config: "{host: \"http://127.0.0.1:1\", policy: p, timeout: 3000, keepalive_timeout: 60000, keepalive_pool: 5, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "forward-auth",
        config: "{uri: \"http://127.0.0.1:1/auth\", timeout: 3000, keepalive_timeout: 60000, keepalive_pool: 5, status_on_error: 403, max_req_body_size: 1024, allow_degradation: true, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "csrf",
        config: "{key: k, expires: 7200, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "client-control",
        config: "{max_body_size: 1024, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "uri-blocker",
        config: "{block_rules: [\"^/never\"], rejected_code: 403, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "ua-restriction",
        config: "{denylist: [\"never\"], bypass_missing: true, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "referer-restriction",
        config: "{blacklist: [\"never.test\"], bypass_missing: true, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "request-validation",
        config: "{header_schema: {type: object, properties: {host: {type: string, maxLength: 100}}}, max_req_body_size: 1024, rejected_code: 400, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "hmac-auth",
        config: "{clock_skew: 300, max_req_body_size: 1024, validate_request_body: true, _meta: {priority: 1}}",
        consumers: &[("jack", "{hmac-auth: {key_id: k1, secret_key: s3cret}}")],
        request: get,
    },
    Case {
        plugin: "real-ip",
        config: "{source: http_x_forwarded_for, trusted_addresses: [\"127.0.0.1\"], recursive: true, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "redirect",
        config: "{uri: \"/to$uri\", ret_code: 301, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "cors",
        config: "{max_age: 5, allow_origins: \"https://a.test\", _meta: {priority: 1}}",
        consumers: &[],
        request: preflight,
    },
    Case {
        plugin: "request-id",
        config: "{_meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "ip-restriction",
        config: "{whitelist: [192.0.2.0/24], response_code: 403, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "mocking",
        config: "{response_status: 200, delay: 0.5, response_headers: {X-N: 5}, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "opentelemetry",
        config: "{sampler: {name: trace_id_ratio, options: {fraction: 0.5}}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "prometheus",
        config: "{prefer_name: true}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "api-breaker",
        config: "{break_response_code: 502, max_breaker_sec: 300, unhealthy: {http_statuses: [500], failures: 3}, healthy: {http_statuses: [200], successes: 3}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "fault-injection",
        config: "{abort: {http_status: 503, percentage: 50}, delay: {duration: 0.1, percentage: 50}, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "key-auth",
        config: "{_meta: {priority: 1}}",
        consumers: &[("alice", "{key-auth: {key: k1}}")],
        request: with_key,
    },
    Case {
        plugin: "basic-auth",
        config: "{_meta: {priority: 1}}",
        consumers: &[("alice", "{basic-auth: {username: alice, password: pw}}")],
        request: with_basic,
    },
    Case {
        plugin: "jwt-auth",
        config: "{_meta: {priority: 1}}",
        consumers: &[(
            "alice",
            "{jwt-auth: {key: k1, secret: s3cret, exp: 86400, lifetime_grace_period: 0}}",
        )],
        request: with_jwt,
    },
    Case {
        plugin: "consumer-restriction",
        config: "{whitelist: [alice], rejected_code: 403, _meta: {priority: 1}}",
        consumers: &[("alice", "{}")],
        request: get,
    },
    Case {
        plugin: "proxy-rewrite",
        config: "{strip_segments: 2, headers: {set: {X-N: 5}}, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "limit-conn",
        config: "{conn: 1, burst: 1, default_conn_delay: 0.1, rejected_code: 503, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "limit-count",
        config: "{count: 2, time_window: 60, rejected_code: 503, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        // Leases from a stand-in for Redis (see `fake_redis`); a changed port finds nobody,
        // and the quota degrades.
        plugin: "limit-count",
        config: "{count: 2, time_window: 60, policy: redis, redis_host: 127.0.0.1, redis_port: REDIS_PORT, redis_database: 0, redis_timeout: 5, allow_degradation: true}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "ai-proxy",
        config: "{provider: openai-compatible, auth: {header: {Authorization: 'Bearer k'}, query: {k: v}}, options: {model: m, temperature: 1}, override: {endpoint: \"http://127.0.0.1:1/v1/chat/completions\", llm_options: {max_tokens: 10}}, timeout: 100, keepalive_timeout: 1000, keepalive_pool: 1, max_stream_duration_ms: 10, max_response_bytes: 10, max_req_body_size: 100, streaming_flush_interval_ms: 0, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "ai-proxy-multi",
        config: "{instances: [{name: a, provider: openai-compatible, priority: 1, weight: 1, auth: {}, override: {endpoint: \"http://127.0.0.1:1\"}}, {name: b, provider: anthropic, priority: -1, weight: 2, auth: {}, override: {endpoint: \"http://127.0.0.1:1\"}}], fallback_strategy: http_5xx, fallback_http_statuses: [429], max_retries: 1, retry_on_failure_within_ms: 10, timeout: 100, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "ai-rate-limiting",
        config: "{limit: 10, time_window: 60, instances: [{name: a, limit: 5, time_window: 10}], rejected_code: 429, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "ai-rate-limiting",
        config: "{rules: [{key: '$remote_addr', count: 1, time_window: 1, header_prefix: p}, {key: '${http_x ?? d}', count: '${http_y ?? 1}', time_window: '${http_z ?? 31536000}'}], rejected_code: 200, allow_degradation: true, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "ai-request-rewrite",
        config: "{provider: openai-compatible, prompt: p, auth: {header: {Authorization: k}}, override: {endpoint: \"http://127.0.0.1:1/v1/chat/completions\"}, timeout: 1, keepalive: false, keepalive_timeout: 1000, keepalive_pool: 1, max_req_body_size: 1, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "ai-prompt-decorator",
        config: "{prepend: [{role: system, content: x}], max_req_body_size: 10, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "ai-prompt-template",
        config: "{templates: [{name: t, template: {model: m, messages: [{role: user, content: x}]}}], max_req_body_size: 10, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "ai-prompt-guard",
        config: "{deny_patterns: [x], max_req_body_size: 10, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "limit-req",
        config: "{rate: 1, burst: 1, rejected_code: 503, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "limit-req",
        config: "{rate: 1, burst: 1, nodelay: true, policy: redis, redis_host: 127.0.0.1, redis_port: REDIS_PORT, redis_database: 0, redis_timeout: 5, allow_degradation: true}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "traffic-split",
        config: "{rules: [{weighted_upstreams: [{upstream_id: u1, weight: 1}, {weight: 3}]}], _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "proxy-mirror",
        config: "{host: \"http://127.0.0.1:9797\", sample_ratio: 0.5, _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
    Case {
        plugin: "response-rewrite",
        config: "{status_code: 200, headers: {set: {X-N: 5}}, filters: [{regex: a, replace: b}], _meta: {priority: 1}}",
        consumers: &[],
        request: get,
    },
];

/// Values at and past the edges of what any field accepts.
fn extremes() -> Vec<Value> {
    vec![
        json!(0),
        json!(-0.0),
        json!(1),
        json!(-1),
        json!(0.5),
        json!(0.0005),
        json!(0.001),
        json!(0.00001),
        json!(0.000009),
        json!(1e-300),
        json!(-1e-300),
        json!(5e-324),
        json!(59.999),
        json!(60.000001),
        json!(100),
        json!(100.5),
        json!(199),
        json!(599),
        json!(600),
        json!(1000),
        json!(1001),
        json!(65535),
        json!(65536),
        json!(1_000_000),
        json!(1_000_001),
        json!(1_000_000_000u64),
        json!(1_000_000_001u64),
        json!(1e9 + 1.0),
        json!(31_536_000),
        json!(31_536_001),
        json!(31_536_000_000u64),
        json!(31_536_000_001u64),
        json!(1_000_000_000_000u64),
        json!(1_000_000_000_001u64),
        json!(u32::MAX),
        json!(u64::from(u32::MAX) + 1),
        json!(i64::MAX),
        json!(i64::MIN),
        json!(u64::MAX),
        json!(1.8446744073709552e19),
        json!(1e300),
        json!(-1e300),
        json!(f64::MAX),
        json!(f64::MIN),
        json!("NaN"),
        json!(".nan"),
        json!("inf"),
        json!("-inf"),
        json!("1e309"),
        json!("18446744073709551616"),
        Value::Null,
    ]
}

/// The values tried in pairs (every pair of fields, every pair of values).
fn pair_extremes() -> Vec<Value> {
    vec![
        json!(0),
        json!(-1),
        json!(1),
        json!(1e-300),
        json!(0.0005),
        json!(1_000_000_000u64),
        json!(1e300),
        json!(u64::MAX),
        json!(i64::MIN),
    ]
}

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// Paths of every number in `v`.
fn numbers(v: &Value, path: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    match v {
        Value::Number(_) => out.push(path.clone()),
        Value::Object(m) => {
            for (k, x) in m {
                path.push(Seg::Key(k.clone()));
                numbers(x, path, out);
                path.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                path.push(Seg::Index(i));
                numbers(x, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[Seg]) -> &'a mut Value {
    path.iter().fold(v, |v, s| match s {
        Seg::Key(k) => &mut v[k.as_str()],
        Seg::Index(i) => &mut v[*i],
    })
}

fn show(path: &[Seg]) -> String {
    path.iter()
        .map(|s| match s {
            Seg::Key(k) => format!(".{k}"),
            Seg::Index(i) => format!("[{i}]"),
        })
        .collect()
}

/// One case as a document: `{config, consumers: {username: {plugin: credentials}}}`.
fn document(c: &Case) -> Value {
    let consumers: serde_json::Map<String, Value> = c
        .consumers
        .iter()
        .map(|(u, p)| (u.to_string(), yaml_value(p)))
        .collect();
    let config = c.config.replace("REDIS_PORT", &fake_redis().to_string());
    json!({"config": yaml_value(&config), "consumers": consumers})
}

/// The port of a stand-in for Redis on the loopback address, enough for the quota's lease
/// script: `EVALSHA` adds its units to the key's count and answers the total, as the script's
/// `INCRBY` does on a real server; any other command (`SELECT`, `CLIENT SETINFO`) gets `OK`.
/// Keeps the Redis cases fast (a refused connection costs the client's retry delay).
fn fake_redis() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(|| {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
        let port = listener.local_addr().expect("its address").port();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let _ = serve_redis(conn);
                });
            }
        });
        port
    })
}

fn serve_redis(conn: TcpStream) -> std::io::Result<()> {
    static COUNTS: parking_lot::Mutex<Option<HashMap<Vec<u8>, i64>>> =
        parking_lot::Mutex::new(None);
    let mut out = conn.try_clone()?;
    let mut r = BufReader::new(conn);
    let line = |r: &mut BufReader<TcpStream>| -> std::io::Result<String> {
        let mut l = String::new();
        if r.read_line(&mut l)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(l.trim_end().to_owned())
    };
    loop {
        let head = line(&mut r)?;
        let n: usize = head
            .strip_prefix('*')
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let mut args = Vec::with_capacity(n);
        for _ in 0..n {
            let len: usize = line(&mut r)?
                .strip_prefix('$')
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let mut arg = vec![0; len + 2];
            r.read_exact(&mut arg)?;
            arg.truncate(len);
            args.push(arg);
        }
        let command = args.first().map(|c| c.to_ascii_uppercase());
        let reply = match (command.as_deref(), args.get(3), args.get(4)) {
            (Some(b"EVALSHA" | b"EVAL"), Some(key), Some(units)) => {
                let units: i64 = String::from_utf8_lossy(units).parse().unwrap_or(0);
                let mut counts = COUNTS.lock();
                let used = counts
                    .get_or_insert_default()
                    .entry(key.clone())
                    .or_default();
                *used = used.saturating_add(units);
                format!(":{used}\r\n")
            }
            _ => "+OK\r\n".to_owned(),
        };
        out.write_all(reply.as_bytes())?;
    }
}

/// What became of one configuration.
enum Outcome {
    Refused(Vec<String>),
    Served,
}

/// Checks `doc` as the gateway does; when accepted, builds it and serves requests through
/// every phase the plugin declares. Panics propagate.
fn exercise(name: &'static str, doc: &Value, raw: &str) -> Result<Outcome, String> {
    let registry = builtin();
    let ids: std::collections::HashSet<String> = ["u1".to_owned()].into();
    let env = CheckEnv { upstream_ids: &ids };
    let mut v = Validator::new();
    v.field("plugins", |v| {
        v.field(name, |v| {
            registry.check_plugin(name, &doc["config"], PluginScope::Route, &env, v)
        })
    });
    let consumers: Vec<(String, Value)> = doc["consumers"]
        .as_object()
        .map(|m| m.iter().map(|(u, p)| (u.clone(), p.clone())).collect())
        .unwrap_or_default();
    for (username, plugins) in &consumers {
        v.field("consumers", |v| {
            v.field(username, |v| {
                v.field("plugins", |v| {
                    for (p, cred) in plugins.as_object().into_iter().flatten() {
                        v.field(p, |v| {
                            registry.check_plugin(p, cred, PluginScope::Consumer, &env, v)
                        });
                    }
                })
            })
        });
    }
    let errors: Vec<String> = v.into_errors().iter().map(ToString::to_string).collect();
    if !errors.is_empty() {
        return Ok(Outcome::Refused(errors));
    }
    let built = try_build(name, &doc["config"], &consumers, Scope::Route)
        .map_err(|e| format!("passed the check but did not build: {e:?}"))?;
    let p = &*built.plugin;
    let phases = p.phases();
    let auth = registry.get(name).is_some_and(|f| f.is_auth());
    let rt = if phases.contains(Phases::ACCESS_ASYNC)
        || phases.contains(Phases::REWRITE_ASYNC)
        || phases.contains(Phases::LOG)
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        Some(rt)
    } else {
        None
    };
    // Contexts stay alive until the end, as requests in flight (limit-conn holds slots).
    let mut held = Vec::new();
    for client in [CLIENT, CLIENT, CLIENT, "192.0.2.11:1", CLIENT] {
        let mut req = head(raw);
        let mut cx = ctx(&built.consumers, client);
        if !auth && !built.consumers.is_empty() {
            cx.set_consumer(0);
        }
        let mut flows = Vec::new();
        if phases.contains(Phases::REWRITE) {
            flows.push(p.rewrite(&mut req, &mut cx));
        }
        if let Some(rt) = rt
            .as_ref()
            .filter(|_| phases.contains(Phases::REWRITE_ASYNC))
        {
            let flow = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(15), p.rewrite_async(&mut req, &mut cx))
                    .await
            });
            flows.push(flow.map_err(|_| "rewrite_async took more than 15 seconds".to_owned())?);
        }
        if phases.contains(Phases::ACCESS) {
            flows.push(p.access(&mut req, &mut cx));
        }
        if let Some(rt) = rt
            .as_ref()
            .filter(|_| phases.contains(Phases::ACCESS_ASYNC))
        {
            let flow = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), p.access_async(&mut req, &mut cx))
                    .await
            });
            flows.push(flow.map_err(|_| "access_async took more than 5 seconds".to_owned())?);
        }
        if phases.contains(Phases::BEFORE_PROXY) {
            flows.push(p.before_proxy(&mut req, &mut cx));
        }
        let resp = answer_and_filter(p, &req, &mut cx, flows);
        if let Some(rt) = rt.as_ref().filter(|_| phases.contains(Phases::LOG)) {
            // On a worker's event loop, as the engine runs it (loggers queue there).
            let done = sluice_core::plugin::Done {
                status: resp.status,
                ..Default::default()
            };
            rt.block_on(tokio::task::LocalSet::new().run_until(async { p.log(&req, &done, &cx) }));
        }
        held.push(cx);
    }
    Ok(Outcome::Served)
}

/// Rust type names have no place in a message for users.
const TYPE_NAMES: &[&str] = &[
    "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize", "f32",
    "f64",
];

fn bad_message(line: &str) -> Option<&'static str> {
    let message = line.split_once(": ").map_or(line, |(_, m)| m);
    let words = message.split(|c: char| !c.is_ascii_alphanumeric());
    if message.trim().is_empty() {
        Some("is empty")
    } else if words.clone().any(|w| TYPE_NAMES.contains(&w)) {
        Some("names a Rust type")
    } else if message.ends_with('.') {
        Some("ends with a period")
    } else if message.starts_with(|c: char| c.is_ascii_uppercase()) {
        Some("starts with a capital")
    } else {
        None
    }
}

/// Configurations checked at once: most wait on nothing, a few on a Redis that is not there.
const PARALLEL: usize = 4;
/// Longer than any configuration takes: one still running is reported as hanging.
const LIMIT: Duration = Duration::from_secs(10);

/// One configuration to try: the plugin, what was changed, the document, the request.
struct Try {
    plugin: &'static str,
    what: String,
    doc: Value,
    request: fn() -> String,
}

/// Every configuration to try: each plugin's base, each number of it replaced by each extreme,
/// and each pair of its numbers by each pair of `pair_extremes`.
fn configurations() -> Vec<Try> {
    let mut out = Vec::new();
    for case in CASES {
        let base = document(case);
        let mut paths = Vec::new();
        numbers(&base, &mut Vec::new(), &mut paths);
        let mut add = |what: String, doc: Value| {
            out.push(Try {
                plugin: case.plugin,
                what,
                doc,
                request: case.request,
            })
        };
        add("base".into(), base.clone());
        for p in &paths {
            for x in extremes() {
                let mut d = base.clone();
                *at(&mut d, p) = x.clone();
                add(format!("{} = {x}", show(p)), d);
            }
        }
        for (i, p) in paths.iter().enumerate() {
            for q in &paths[i + 1..] {
                for x in pair_extremes() {
                    for y in pair_extremes() {
                        let mut d = base.clone();
                        *at(&mut d, p) = x.clone();
                        *at(&mut d, q) = y.clone();
                        add(format!("{} = {x}, {} = {y}", show(p), show(q)), d);
                    }
                }
            }
        }
    }
    out
}

type Ran = Result<Result<Outcome, String>, String>;

#[test]
fn extreme_numbers_are_refused_or_served_without_panicking() {
    let covered: std::collections::HashSet<&str> = CASES.iter().map(|c| c.plugin).collect();
    for name in builtin().names() {
        assert!(
            covered.contains(name),
            "{name} has no base case in extremes.rs"
        );
    }
    let started = Instant::now();
    let mut failures = Vec::new();
    let (mut refused, mut served) = (0, 0);
    let mut judge = |label: &str, base: bool, ran: Ran, failures: &mut Vec<String>| match ran {
        Err(panic) => failures.push(format!("{label}: panicked: {panic}")),
        Ok(Err(e)) => failures.push(format!("{label}: {e}")),
        Ok(Ok(Outcome::Served)) => served += 1,
        Ok(Ok(Outcome::Refused(errors))) => {
            refused += 1;
            if base {
                failures.push(format!("{label}: the base is refused: {errors:?}"));
            }
            for e in &errors {
                if let Some(why) = bad_message(e) {
                    failures.push(format!("{label}: message {why}: {e}"));
                }
            }
        }
    };
    let (tx, rx) = mpsc::channel::<(usize, Ran)>();
    // In flight: index → (label, is the base, started).
    let mut pending: HashMap<usize, (String, bool, Instant)> = HashMap::new();
    let mut collect = |pending: &mut HashMap<usize, (String, bool, Instant)>,
                       failures: &mut Vec<String>| {
        let Some(deadline) = pending.values().map(|(_, _, t)| *t + LIMIT).min() else {
            return;
        };
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((i, ran)) => {
                if let Some((label, base, _)) = pending.remove(&i) {
                    judge(&label, base, ran, failures);
                }
            }
            Err(_) => pending.retain(|_, (label, _, t)| {
                let hung = t.elapsed() >= LIMIT;
                if hung {
                    failures.push(format!("{label}: did not finish in {LIMIT:?}"));
                }
                !hung
            }),
        }
    };
    for (i, t) in configurations().into_iter().enumerate() {
        let Try {
            plugin: name,
            what,
            doc,
            request,
        } = t;
        while pending.len() >= PARALLEL {
            collect(&mut pending, &mut failures);
        }
        let label = format!("{name} with {what}");
        let tx = tx.clone();
        let raw = request();
        let spawned = std::thread::Builder::new().spawn(move || {
            let ran = std::panic::catch_unwind(AssertUnwindSafe(|| exercise(name, &doc, &raw)));
            let _ = tx.send((
                i,
                ran.map_err(|p| {
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                }),
            ));
        });
        match spawned {
            Ok(_) => {
                pending.insert(i, (label, what == "base", Instant::now()));
            }
            Err(e) => failures.push(format!("{label}: cannot start a thread: {e}")),
        }
    }
    while !pending.is_empty() {
        collect(&mut pending, &mut failures);
    }
    assert!(
        failures.is_empty(),
        "{} configurations failed ({refused} refused and {served} served as they should):\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "{refused} refused, {served} served, in {:?}",
        started.elapsed()
    );
}

/// Writes each base case as a seed of the `plugin_phases` fuzz target
/// (`fuzz/corpus/plugin_phases/`): `cargo test -p sluice-plugins write_plugin_phases_seeds --
/// --ignored` after cases change.
#[test]
#[ignore]
fn write_plugin_phases_seeds() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/plugin_phases");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, c) in CASES.iter().enumerate() {
        let consumers: serde_json::Map<String, Value> = c
            .consumers
            .iter()
            .map(|(u, p)| (u.to_string(), yaml_value(p)))
            .collect();
        let config = yaml_value(&c.config.replace("REDIS_PORT", "6379"));
        let mut out = c.plugin.as_bytes().to_vec();
        out.push(0xff);
        out.extend_from_slice(config.to_string().as_bytes());
        out.push(0xff);
        out.extend_from_slice((c.request)().as_bytes());
        if !consumers.is_empty() {
            out.push(0xff);
            out.extend_from_slice(Value::Object(consumers).to_string().as_bytes());
        }
        std::fs::write(dir.join(format!("{}-{i}", c.plugin)), out).unwrap();
    }
}
