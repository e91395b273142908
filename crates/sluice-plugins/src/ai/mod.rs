//! What the AI plugins share: the providers, a compiled instance (where and how a request is
//! sent), the translation of a client's OpenAI chat completions request for it, and the filter
//! that reads (and for providers that speak otherwise, translates) the answer as it streams,
//! counting its tokens.
//!
//! An instance is an upstream of its own, built from the provider's endpoint (or
//! `override.endpoint`) when the configuration is compiled: requests go through the engine's
//! pooled keep-alive connections, TLS and health checks, like any other, and the answer streams
//! back through the body filter, each piece forwarded as it arrives (an event of a stream is
//! held only until its blank line).

pub(crate) mod bedrock;
pub(crate) mod chat;
pub(crate) mod dialect;
pub(crate) mod sigv4;
pub(crate) mod sse;

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::llm::{LlmRecord, RequestType, Usage};
use sluice_core::plugin::{BuildCx, ResponseView};
use sluice_core::{Ctx, Response, UpstreamRef};

use dialect::{Dialect, Stream};

/// The per-request slot the AI plugins share.
pub(crate) const SLOT: &str = "ai";

/// APISIX's providers.
pub(crate) const PROVIDERS: &[&str] = &[
    "openai",
    "deepseek",
    "aimlapi",
    "anthropic",
    "openai-compatible",
    "azure-openai",
    "openrouter",
    "gemini",
    "vertex-ai",
    "bedrock",
];

/// Where a provider is, what it speaks, and the path of its chat endpoint.
struct Provider {
    host: Option<&'static str>,
    path: &'static str,
    dialect: Dialect,
    /// Azure's deployments name the model in the endpoint: the body's is removed.
    remove_model: bool,
}

fn provider(name: &str) -> Option<Provider> {
    let p = |host, path, dialect| Provider {
        host,
        path,
        dialect,
        remove_model: false,
    };
    Some(match name {
        "openai" => p(
            Some("api.openai.com"),
            "/v1/chat/completions",
            Dialect::OpenAi,
        ),
        "deepseek" => p(
            Some("api.deepseek.com"),
            "/chat/completions",
            Dialect::OpenAi,
        ),
        "aimlapi" => p(
            Some("api.aimlapi.com"),
            "/chat/completions",
            Dialect::OpenAi,
        ),
        "openrouter" => p(
            Some("openrouter.ai"),
            "/api/v1/chat/completions",
            Dialect::OpenAi,
        ),
        "openai-compatible" => p(None, "/v1/chat/completions", Dialect::OpenAi),
        "azure-openai" => Provider {
            remove_model: true,
            ..p(None, "/completions", Dialect::OpenAi)
        },
        "anthropic" => p(
            Some("api.anthropic.com"),
            "/v1/messages",
            Dialect::Anthropic,
        ),
        "gemini" => p(
            Some("generativelanguage.googleapis.com"),
            "/v1beta/models",
            Dialect::Gemini,
        ),
        "vertex-ai" => p(None, "", Dialect::OpenAi),
        "bedrock" => Provider {
            remove_model: true,
            ..p(None, "", Dialect::Bedrock)
        },
        _ => return None,
    })
}

/// `auth.aws`: the credentials Bedrock's requests are signed with (SigV4).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AwsConfig {
    access_key_id: String,
    secret_access_key: String,
    #[serde(default)]
    session_token: Option<String>,
}

/// `auth`: header fields and query arguments sent to the provider.
#[derive(Debug, Default, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuthConfig {
    #[serde(default)]
    header: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    query: std::collections::BTreeMap<String, String>,
    /// A GCP service account (vertex-ai): refused, see [`Target::build`].
    #[serde(default)]
    gcp: Option<Value>,
    /// AWS credentials (bedrock).
    #[serde(default)]
    aws: Option<AwsConfig>,
}

impl AuthConfig {
    /// Whether it gives any (header, query argument or AWS key).
    pub(crate) fn has_credentials(&self) -> bool {
        !self.header.is_empty() || !self.query.is_empty() || self.aws.is_some()
    }
}

/// `override.llm_options`.
#[derive(Debug, Default, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LlmOptions {
    #[serde(default)]
    max_tokens: Option<crate::util::Num>,
}

/// `override`.
#[derive(Debug, Default, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OverrideConfig {
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default)]
    llm_options: Option<LlmOptions>,
    /// Per target protocol (`openai-chat`, `anthropic-messages`, ...), merged into the body
    /// sent.
    #[serde(default)]
    request_body: Option<Map<String, Value>>,
    #[serde(default)]
    request_body_force_override: bool,
}

/// `provider_conf`.
#[derive(Debug, Default, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderConf {
    #[serde(default)]
    project_id: Option<String>,
    #[serde(default)]
    region: Option<String>,
}

/// What an instance is configured with (ai-proxy's fields; ai-proxy-multi's instances add
/// theirs).
pub(crate) struct InstanceFields<'a> {
    pub(crate) provider: &'a str,
    pub(crate) auth: &'a AuthConfig,
    pub(crate) options: &'a Map<String, Value>,
    pub(crate) over: Option<&'a OverrideConfig>,
    pub(crate) provider_conf: Option<&'a ProviderConf>,
    /// `checks` (ai-proxy-multi), given to the instance's upstream.
    pub(crate) checks: Option<&'a Value>,
    /// Called from a plugin ([`Target::outgoing`], ai-request-rewrite), not proxied to: no
    /// upstream is made for it.
    pub(crate) call_only: bool,
}

/// The settings every instance of a plugin shares.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    /// Milliseconds, 1 to 600,000: the connect, send and read timeouts of the provider.
    pub(crate) timeout: u64,
    pub(crate) keepalive: bool,
    /// Milliseconds.
    pub(crate) keepalive_timeout: u64,
    pub(crate) keepalive_pool: u64,
    pub(crate) ssl_verify: bool,
}

/// How the path of a request to an instance is made.
#[derive(Debug)]
enum PathRule {
    /// Always this (with its query).
    Fixed(String),
    /// Gemini's: `<base>/<model>:generateContent`, or `:streamGenerateContent?alt=sse`.
    Gemini(String),
    /// Bedrock's: `<base>/model/<model>/converse`, or `/converse-stream`.
    Bedrock(String),
}

/// One compiled instance: where requests go and how they are written.
#[derive(Debug)]
pub(crate) struct Target {
    /// Its name (ai-proxy-multi's `name`; ai-proxy's `ai-proxy-<provider>`).
    pub(crate) name: Arc<str>,
    pub(crate) provider: &'static str,
    pub(crate) dialect: Dialect,
    /// None: [`InstanceFields::call_only`].
    upstream: Option<UpstreamRef>,
    /// Where OpenAI's embeddings API is (path, without the query): the endpoint's own path
    /// when `override.endpoint` gives one, else the provider's chat path with `embeddings`
    /// for `chat/completions`. None: the provider has none here.
    embeddings_path: Option<String>,
    /// `scheme://host:port`, for a plugin's own calls.
    pub(crate) origin: String,
    path: PathRule,
    /// Query arguments (the endpoint's and `auth.query`), encoded, without `?`.
    query: String,
    headers: Vec<(String, Vec<u8>)>,
    options: Map<String, Value>,
    remove_model: bool,
    max_tokens: Option<u64>,
    body_override: Option<Map<String, Value>>,
    force_override: bool,
    /// Bedrock's credentials and region: requests are signed.
    aws: Option<Arc<(sigv4::Credentials, String)>>,
    /// The `Host` requests are sent with (what a signature covers).
    pub(crate) host: String,
    /// Path and query of a request whose body goes as the client sent it ([`Target::as_sent`]);
    /// None when the instance changes bodies (decided when the configuration is built).
    sent_as_is: Option<String>,
}

/// A request for an instance, written: what [`Target::prepare`] puts in the client's request,
/// or a plugin sends itself.
pub(crate) struct Outgoing {
    /// Path and query.
    pub(crate) target: String,
    /// The credentials (and for Bedrock, the signature and `Accept`).
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    pub(crate) body: Bytes,
    stream: bool,
    client_usage: bool,
    model: Option<Rc<str>>,
    request_model: Option<Rc<str>>,
}

/// The name APISIX gives a provider in [`PROVIDERS`].
fn provider_name(p: &str) -> &'static str {
    PROVIDERS
        .iter()
        .find(|n| **n == p)
        .copied()
        .unwrap_or("openai")
}

impl Target {
    /// Checks an instance's fields (`v` points at them) and builds its upstream.
    pub(crate) fn build(
        name: Arc<str>,
        f: &InstanceFields<'_>,
        shared: &Shared,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Target> {
        let Some(p) = provider(f.provider) else {
            v.error_at(
                "provider",
                format!(
                    "unknown provider \"{}\", expected one of {}",
                    f.provider,
                    PROVIDERS.join(", ")
                ),
            );
            return None;
        };
        if f.auth.gcp.is_some() {
            v.error_at(
                "auth.gcp",
                "service-account token exchange is not supported yet: give an access token in \
                 auth.header (Authorization: Bearer ...)",
            );
            return None;
        }
        let region = f.provider_conf.and_then(|c| c.region.clone());
        let aws = match (&f.auth.aws, f.provider) {
            (Some(a), "bedrock") => {
                if a.access_key_id.is_empty() || a.secret_access_key.is_empty() {
                    v.error_at(
                        "auth.aws",
                        "access_key_id and secret_access_key must not be empty",
                    );
                    return None;
                }
                let Some(region) = region.clone().filter(|r| !r.is_empty()) else {
                    v.error_at("provider_conf.region", "bedrock needs its AWS region");
                    return None;
                };
                Some(Arc::new((
                    sigv4::Credentials {
                        access_key_id: a.access_key_id.clone(),
                        secret_access_key: a.secret_access_key.clone(),
                        session_token: a.session_token.clone(),
                    },
                    region,
                )))
            }
            (None, "bedrock") => {
                v.error_at(
                    "auth.aws",
                    "bedrock needs AWS credentials (access_key_id, secret_access_key)",
                );
                return None;
            }
            (Some(_), _) => {
                v.error_at(
                    "auth.aws",
                    "only bedrock signs its requests with AWS credentials",
                );
                return None;
            }
            (None, _) => None,
        };
        let mut dialect = p.dialect;
        let endpoint = f.over.and_then(|o| o.endpoint.as_deref());
        let (scheme, host, port, mut path, mut query) = match endpoint {
            Some(e) => v.field("override", |v| {
                v.field("endpoint", |v| {
                    let u = split_url(e);
                    if u.is_none() {
                        v.error(format!(
                            "\"{e}\" is not an http:// or https:// URL with a host"
                        ));
                    }
                    u
                })
            })?,
            None => {
                let host = match (p.host, f.provider) {
                    (Some(h), _) => h.to_owned(),
                    (None, "vertex-ai") => {
                        match f.provider_conf.and_then(|c| c.region.as_deref()) {
                            Some(r) => format!("{r}-aiplatform.googleapis.com"),
                            None => {
                                v.error("vertex-ai needs provider_conf (project_id and region) or override.endpoint");
                                return None;
                            }
                        }
                    }
                    (None, "bedrock") => format!(
                        "bedrock-runtime.{}.amazonaws.com",
                        region.as_deref().unwrap_or_default()
                    ),
                    (None, other) => {
                        v.error_at(
                            "override.endpoint",
                            format!("{other} has no public endpoint: give override.endpoint"),
                        );
                        return None;
                    }
                };
                ("https".to_owned(), host, 443, String::new(), String::new())
            }
        };
        // The endpoint names the API itself (its path is used as it is).
        let endpoint_path = !(path.is_empty() || path == "/");
        if !endpoint_path {
            path = match f.provider {
                "vertex-ai" => {
                    let c = f.provider_conf.cloned().unwrap_or_default();
                    let (Some(project), Some(region)) = (c.project_id, c.region) else {
                        v.error("vertex-ai needs provider_conf (project_id and region) or an override.endpoint with its path");
                        return None;
                    };
                    format!(
                        "/v1beta1/projects/{project}/locations/{region}/endpoints/openapi/chat/completions"
                    )
                }
                _ => p.path.to_owned(),
            };
        } else if dialect == Dialect::Gemini && path.contains("/openai/") {
            // Gemini's OpenAI-compatible endpoint (APISIX's): spoken as OpenAI.
            dialect = Dialect::OpenAi;
        }
        let embeddings_path = match (dialect, endpoint_path) {
            (Dialect::OpenAi, true) => Some(path.clone()),
            (Dialect::OpenAi, false) => path
                .strip_suffix("chat/completions")
                .map(|base| format!("{base}embeddings")),
            _ => None,
        };
        let path = if dialect == Dialect::Bedrock {
            PathRule::Bedrock(path.trim_end_matches('/').to_owned())
        } else if dialect == Dialect::Gemini {
            // `.../models/<model>:generateContent` given whole: its base is kept.
            let base = match path.rfind("/models/") {
                Some(i) if path[i..].contains(':') => path[..i + "/models".len()].to_owned(),
                _ => path.trim_end_matches('/').to_owned(),
            };
            PathRule::Gemini(base)
        } else {
            PathRule::Fixed(path)
        };
        for (k, val) in &f.auth.query {
            if !query.is_empty() {
                query.push('&');
            }
            query.push_str(
                &form_urlencoded::Serializer::new(String::new())
                    .append_pair(k, val)
                    .finish(),
            );
        }
        let mut headers = Vec::new();
        v.field("auth", |v| {
            v.field("header", |v| {
                for (k, val) in &f.auth.header {
                    v.field(k, |v| {
                        if crate::util::check_header_name(k, v)
                            && crate::util::check_header_value(val, v)
                        {
                            headers.push((k.clone(), val.as_bytes().to_vec()));
                        }
                    });
                }
            })
        });
        if dialect == Dialect::Anthropic
            && !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("anthropic-version"))
        {
            headers.push(("anthropic-version".into(), b"2023-06-01".to_vec()));
        }
        let secs = shared.timeout as f64 / 1000.0;
        let mut up = json!({
            "type": "roundrobin",
            "scheme": scheme,
            "nodes": {format!("{}:{port}", bracket(&host)): 1},
            "pass_host": "node",
            "timeout": {"connect": secs, "send": secs, "read": secs},
            "tls": {"verify": shared.ssl_verify},
            "keepalive_pool": {
                "size": if shared.keepalive { shared.keepalive_pool } else { 0 },
                "idle_timeout": shared.keepalive_timeout as f64 / 1000.0,
            },
        });
        if let Some(c) = f.checks {
            up["checks"] = c.clone();
        }
        let over = f.over.cloned().unwrap_or_default();
        let max_tokens = match over.llm_options.as_ref().and_then(|o| o.max_tokens) {
            None => None,
            Some(n) => Some(v.field("override", |v| {
                v.field("llm_options", |v| {
                    v.field("max_tokens", |v| {
                        crate::util::whole(n, 1, 100_000_000, "", v)
                    })
                })
            })?),
        };
        let upstream = if f.call_only {
            None
        } else {
            Some((cx.upstreams)(&up, v)?)
        };
        let mut t = Target {
            name,
            provider: provider_name(f.provider),
            dialect,
            upstream,
            embeddings_path,
            path,
            query,
            headers,
            options: f.options.clone(),
            remove_model: p.remove_model,
            max_tokens,
            body_override: over.request_body,
            force_override: over.request_body_force_override,
            aws,
            origin: format!("{scheme}://{}:{port}", bracket(&host)),
            host: if (scheme == "https" && port == 443) || (scheme == "http" && port == 80) {
                bracket(&host)
            } else {
                format!("{}:{port}", bracket(&host))
            },
            sent_as_is: None,
        };
        t.sent_as_is = t.sends_as_is();
        Some(t)
    }

    /// The protocol name APISIX keys `override.request_body` with.
    fn protocol(&self) -> &'static str {
        match self.dialect {
            Dialect::OpenAi => "openai-chat",
            Dialect::Anthropic => "anthropic-messages",
            Dialect::Gemini => "gemini",
            Dialect::Bedrock => "bedrock-converse",
        }
    }

    /// Writes the client's request for this instance: the body translated, the path, the
    /// provider's credentials. `Err`: the client's request is not one (400).
    /// `raw`, when given, is the body `client` was read from.
    pub(crate) fn outgoing(
        &self,
        client: &Map<String, Value>,
        raw: Option<&Bytes>,
        api: ClientApi,
    ) -> Result<Outgoing, Response> {
        if api == ClientApi::Embeddings {
            return self.embeddings(client);
        }
        if let Some(out) = raw.and_then(|raw| self.as_sent(client, raw)) {
            return Ok(out);
        }
        let mut b = client.clone();
        let request_model = b.get("model").and_then(Value::as_str).map(Rc::from);
        for (k, val) in &self.options {
            b.insert(k.clone(), val.clone());
        }
        if let Some(m) = self.max_tokens {
            b.remove("max_tokens");
            b.insert("max_completion_tokens".into(), m.into());
            if self.dialect != Dialect::OpenAi || self.provider != "openai" {
                b.remove("max_completion_tokens");
                b.insert("max_tokens".into(), m.into());
            }
        }
        let stream = b.get("stream").and_then(Value::as_bool) == Some(true);
        let client_usage = b
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            == Some(true);
        let model = b.get("model").and_then(Value::as_str).map(Rc::from);
        let mut out = match self.dialect {
            Dialect::OpenAi => {
                if stream && !client_usage {
                    // Usage comes only when asked for: asked, and its chunk kept from the client.
                    let o = b.entry("stream_options").or_insert_with(|| json!({}));
                    if let Value::Object(o) = o {
                        o.insert("include_usage".into(), Value::Bool(true));
                    }
                }
                if self.remove_model {
                    b.remove("model");
                }
                Value::Object(b)
            }
            Dialect::Anthropic => dialect::to_anthropic(&b),
            Dialect::Gemini => dialect::to_gemini(&b),
            Dialect::Bedrock => bedrock::to_bedrock(&b),
        };
        if let (Some(o), Value::Object(body)) = (
            self.body_override
                .as_ref()
                .and_then(|m| m.get(self.protocol())),
            &mut out,
        ) {
            merge(body, o, self.force_override);
        }
        let mut target = match &self.path {
            PathRule::Fixed(p) => p.clone(),
            PathRule::Gemini(base) => {
                let Some(m) = model.as_deref() else {
                    return Err(Response::message(
                        400,
                        "the request names no model (gemini needs one, or options.model)",
                    ));
                };
                if stream {
                    format!("{base}/{m}:streamGenerateContent")
                } else {
                    format!("{base}/{m}:generateContent")
                }
            }
            PathRule::Bedrock(base) => {
                let Some(m) = model.as_deref() else {
                    return Err(Response::message(
                        400,
                        "the request names no model (bedrock needs one, or options.model)",
                    ));
                };
                let verb = if stream {
                    "converse-stream"
                } else {
                    "converse"
                };
                format!("{base}/model/{}/{verb}", sigv4::uri_encode(m))
            }
        };
        let mut query = self.query.clone();
        if stream && matches!(self.path, PathRule::Gemini(_)) {
            if !query.is_empty() {
                query.push('&');
            }
            query.push_str("alt=sse");
        }
        if !query.is_empty() {
            target.push('?');
            target.push_str(&query);
        }
        let mut headers = self.headers.clone();
        let body = serde_json::to_vec(&out).unwrap_or_default();
        if let Some(aws) = &self.aws {
            // Signed over what is sent: this `Host`, the path and query, the body.
            let accept = if stream {
                "application/vnd.amazon.eventstream"
            } else {
                "application/json"
            };
            headers.push(("Accept".into(), accept.as_bytes().to_vec()));
            let (path, query) = target.split_once('?').unwrap_or((&target, ""));
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let signed = sigv4::sign(
                &aws.0,
                &aws.1,
                "bedrock",
                "POST",
                path,
                query,
                &[("content-type", "application/json"), ("host", &self.host)],
                &body,
                &sigv4::amz_date(now),
            );
            for (k, val) in signed {
                headers.push((k, val.into_bytes()));
            }
        }
        Ok(Outgoing {
            target,
            headers,
            body: body.into(),
            stream,
            client_usage,
            model,
            request_model,
        })
    }

    /// The common case written without a copy of the parsed body: OpenAI's API, nothing in
    /// the body to change but the usage to ask for. The client's bytes are sent as they are,
    /// or with `"stream_options":{"include_usage":true},` put after the `{` when the stream's
    /// usage must be asked for. Cloning the parsed body and writing it again were a third of
    /// the instructions of a streamed request through ai-proxy (callgrind, docs/benchmarks.md).
    /// None: the general way ([`Target::outgoing`]).
    fn as_sent(&self, client: &Map<String, Value>, raw: &Bytes) -> Option<Outgoing> {
        let target = self.sent_as_is.as_ref()?;
        let stream = client.get("stream").and_then(Value::as_bool) == Some(true);
        let client_usage = client
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            == Some(true);
        let body = if !stream || client_usage {
            raw.clone()
        } else if client.contains_key("stream_options") {
            // Its other options kept: the general way.
            return None;
        } else {
            // A chat request has `messages`: the object is not empty, a comma follows.
            let at = raw.iter().position(|b| !b.is_ascii_whitespace())?;
            if raw[at] != b'{' {
                return None;
            }
            const ASK: &[u8] = br#""stream_options":{"include_usage":true},"#;
            let mut b = Vec::with_capacity(raw.len() + ASK.len());
            b.extend_from_slice(&raw[..=at]);
            b.extend_from_slice(ASK);
            b.extend_from_slice(&raw[at + 1..]);
            Bytes::from(b)
        };
        let model = client.get("model").and_then(Value::as_str).map(Rc::from);
        Some(Outgoing {
            target: target.clone(),
            headers: self.headers.clone(),
            body,
            stream,
            client_usage,
            request_model: model.clone(),
            model,
        })
    }

    /// Whether this instance sends a client's body as it came (OpenAI's API, no `options`,
    /// `max_tokens`, model removal, signature or body override): the path and query then.
    fn sends_as_is(&self) -> Option<String> {
        let PathRule::Fixed(path) = &self.path else {
            return None;
        };
        if self.dialect != Dialect::OpenAi
            || !self.options.is_empty()
            || self.max_tokens.is_some()
            || self.remove_model
            || self.aws.is_some()
            || self
                .body_override
                .as_ref()
                .is_some_and(|m| m.contains_key(self.protocol()))
        {
            return None;
        }
        Some(match self.query.as_str() {
            "" => path.clone(),
            q => format!("{path}?{q}"),
        })
    }

    /// An embeddings request, sent as it is (with `options`) to the provider's embeddings
    /// API: only those that speak OpenAI's have one here.
    fn embeddings(&self, client: &Map<String, Value>) -> Result<Outgoing, Response> {
        let Some(path) = self.embeddings_path.as_deref() else {
            return Err(Response::message(
                400,
                &format!(
                    "{} has no embeddings API here (embeddings go to providers that speak OpenAI's API, or to an override.endpoint with its path)",
                    self.provider
                ),
            ));
        };
        let mut b = client.clone();
        let request_model = b.get("model").and_then(Value::as_str).map(Rc::from);
        for (k, val) in &self.options {
            b.insert(k.clone(), val.clone());
        }
        let model = b.get("model").and_then(Value::as_str).map(Rc::from);
        if self.remove_model {
            b.remove("model");
        }
        let mut target = path.to_owned();
        if !self.query.is_empty() {
            target.push('?');
            target.push_str(&self.query);
        }
        Ok(Outgoing {
            target,
            headers: self.headers.clone(),
            body: serde_json::to_vec(&b).unwrap_or_default().into(),
            stream: false,
            client_usage: false,
            model,
            request_model,
        })
    }

    /// Writes the client's request for this instance ([`Target::outgoing`]) and chooses its
    /// upstream. `Err`: the client's request is not one (400).
    pub(crate) fn prepare(
        &self,
        client: &Map<String, Value>,
        req: &mut RequestHead,
        cx: &mut Ctx<'_>,
        ex: &mut Exchange,
    ) -> Result<(), Response> {
        let out = self.outgoing(client, ex.client_raw.as_ref(), ex.api)?;
        // A fallback's request must not carry the previous instance's credentials.
        for name in ex.headers_set.drain(..) {
            req.remove_header(&name);
        }
        req.set_target(out.target.into_bytes());
        req.set_method("POST");
        req.set_header("Content-Type", b"application/json");
        // The answer is read (usage, translation): never compressed.
        req.remove_header("Accept-Encoding");
        if self.aws.is_some() {
            req.set_upstream_host(self.host.as_bytes());
        }
        for (k, val) in &out.headers {
            req.set_header(k, val);
            ex.headers_set.push(k.clone());
        }
        cx.set_request_body(out.body);
        if let Some(u) = self.upstream {
            cx.upstream = Some(u);
        }
        let mut record = LlmRecord::new(self.provider, Rc::from(&*self.name));
        record.request_model = out.request_model;
        record.model = out.model;
        record.request_type = if out.stream {
            RequestType::Stream
        } else {
            RequestType::Chat
        };
        record.usage.prompt = ex.prompt_estimate;
        if ex.api == ClientApi::Embeddings {
            record.operation = "embeddings";
        }
        cx.llm = Some(Box::new(record));
        ex.instance = Some(self.name.clone());
        ex.dialect = Some(self.dialect);
        ex.stream = out.stream;
        ex.client_usage = out.client_usage;
        ex.mode = Mode::Pass;
        ex.model_recorded = false;
        ex.started = Some(Instant::now());
        Ok(())
    }
}

/// Deep merge (objects merged, the rest replaced): `over` fills what `body` lacks, or replaces
/// it when `force`.
fn merge(body: &mut Map<String, Value>, over: &Value, force: bool) {
    let Value::Object(over) = over else {
        return;
    };
    for (k, val) in over {
        match (body.get_mut(k), val) {
            (Some(Value::Object(b)), Value::Object(_)) => merge(b, val, force),
            (Some(_), _) if !force => {}
            _ => {
                body.insert(k.clone(), val.clone());
            }
        }
    }
}

fn bracket(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// `scheme://host[:port][/path][?query]` into its parts (the port by the scheme when absent).
fn split_url(url: &str) -> Option<(String, String, u16, String, String)> {
    let u: http::Uri = url.parse().ok()?;
    let scheme = u.scheme_str()?.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let host = u
        .host()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    if host.is_empty() {
        return None;
    }
    let port = u
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    let path = u.path().to_owned();
    let query = u.query().unwrap_or("").to_owned();
    Some((scheme, host, port, path, query))
}

/// Which of OpenAI's APIs a client's request is of.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientApi {
    /// Chat completions: `messages`.
    #[default]
    Chat,
    /// Embeddings: `input`, and no `messages`.
    Embeddings,
}

/// The client's request body as a JSON object, and the API it is of (a `messages` array:
/// chat completions; else an `input`: embeddings). Err: 400.
pub(crate) fn client_body(cx: &Ctx<'_>) -> Result<(ClientApi, Map<String, Value>), Response> {
    let raw = cx.body().and_then(|b| b.raw()).unwrap_or(b"");
    if raw.is_empty() {
        return Err(Response::message(400, "the request has no body"));
    }
    match serde_json::from_slice::<Value>(raw) {
        Ok(Value::Object(m)) => {
            if m.get("messages").is_some_and(Value::is_array) {
                Ok((ClientApi::Chat, m))
            } else if m.contains_key("input") && !m.contains_key("messages") {
                Ok((ClientApi::Embeddings, m))
            } else {
                Err(Response::message(
                    400,
                    "the request body has no messages array (OpenAI's chat completions)",
                ))
            }
        }
        Ok(_) => Err(Response::message(
            400,
            "the request body is not a JSON object",
        )),
        Err(e) => Err(Response::message(
            400,
            &format!("the request body is not JSON: {e}"),
        )),
    }
}

/// The client's chat completions request (the prompt plugins'). Err: 400.
pub(crate) fn client_request(cx: &Ctx<'_>) -> Result<Map<String, Value>, Response> {
    match client_body(cx)? {
        (ClientApi::Chat, m) => Ok(m),
        (ClientApi::Embeddings, _) => Err(Response::message(
            400,
            "the request body has no messages array (OpenAI's chat completions)",
        )),
    }
}

/// Tokens a prompt is estimated to take before its answer says: a token per four bytes of its
/// messages' text, or of an embeddings request's `input` (OpenAI's rule of thumb for English).
pub(crate) fn estimate_prompt(req: &Map<String, Value>) -> u64 {
    let input: usize = chat::input_texts(req).map(str::len).sum();
    let bytes: usize = chat::messages(req)
        .map(|(_, _, c)| chat::content_text(c).len())
        .sum();
    ((bytes + input) as u64).div_ceil(4)
}

/// How the answer is read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Not read (an error answer, or not the API's).
    #[default]
    Pass,
    /// A stream of events.
    Stream,
    /// One JSON document, kept whole to be read (and translated) at its end.
    Whole,
}

/// The largest whole answer kept to be read: past it the answer passes on unread (its usage
/// estimated).
const MAX_WHOLE: usize = 16 << 20;

/// A request's exchange with a model, shared by the AI plugins through [`SLOT`].
#[derive(Debug, Default)]
pub(crate) struct Exchange {
    /// The client's request, kept for a fallback to translate again.
    pub(crate) client: Option<Rc<Map<String, Value>>>,
    /// The bytes `client` was read from.
    pub(crate) client_raw: Option<Bytes>,
    /// The API it is of.
    pub(crate) api: ClientApi,
    /// The instance the request went to.
    pub(crate) instance: Option<Arc<str>>,
    pub(crate) dialect: Option<Dialect>,
    pub(crate) stream: bool,
    pub(crate) client_usage: bool,
    pub(crate) prompt_estimate: u64,
    pub(crate) mode: Mode,
    pub(crate) started: Option<Instant>,
    events: sse::Splitter,
    /// Bedrock's binary event stream.
    frames: bedrock::Frames,
    reader: Option<Stream>,
    whole: Vec<u8>,
    received: u64,
    /// Limits of the answer (`max_stream_duration_ms`, `max_response_bytes`).
    pub(crate) max_duration_ms: Option<u64>,
    pub(crate) max_bytes: Option<u64>,
    /// The model the answer names is in the record already.
    model_recorded: bool,
    /// Counted in `sluice_llm_active_streams` while the request lasts, once its answer streams.
    active: Option<sluice_core::llm::ActiveStream>,
    /// Instances tried (ai-proxy-multi), by index.
    pub(crate) tried: Vec<usize>,
    /// The header fields the instance tried last set (its credentials), removed before the
    /// request goes to another.
    headers_set: Vec<String>,
    /// ai-proxy-multi's choice again, for ai-rate-limiting to use when an instance is over
    /// its limit.
    pub(crate) repick: Option<Arc<dyn Repick>>,
}

impl Exchange {
    /// Set: the dialect chosen.
    fn dialect(&self) -> Dialect {
        self.dialect.unwrap_or(Dialect::OpenAi)
    }
}

/// Chooses another instance for a request (ai-proxy-multi, asked by ai-rate-limiting).
pub(crate) trait Repick: Send + Sync + std::fmt::Debug {
    /// Sends the request to another instance than those tried. False: none is left.
    fn repick(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> bool;
    /// Whether the plugin falls back from an instance over its rate limit.
    fn on_rate_limit(&self) -> bool;
}

/// The phases of the answer, the same for `ai-proxy` and `ai-proxy-multi`: the header and
/// body filters read (and translate) it, the log phase writes `logging`'s lines. The argument
/// is where the plugin keeps its [`Logging`] (`logging`, `0.logging`).
macro_rules! answer_phases {
    ($($logging:tt).+) => {
        fn header_filter(
            &self,
            _req: &sluice_core::http::RequestHead,
            resp: sluice_core::plugin::ResponseView<'_>,
            cx: &mut sluice_core::Ctx<'_>,
        ) {
            crate::ai::header_filter(resp, cx);
        }

        fn filters_body(&self, cx: &sluice_core::Ctx<'_>) -> bool {
            crate::ai::filters_body(cx)
        }

        fn body_filter(&self, chunk: &mut bytes::Bytes, eos: bool, cx: &mut sluice_core::Ctx<'_>) {
            crate::ai::body_filter(chunk, eos, cx);
        }

        fn log(
            &self,
            _req: &sluice_core::http::RequestHead,
            _done: &sluice_core::plugin::Done,
            cx: &sluice_core::Ctx<'_>,
        ) {
            crate::ai::log(self.$($logging).+, cx.route_id(), cx);
        }
    };
}
pub(crate) use answer_phases;

/// The response head of an exchange: decides how its body is read, and for a provider that
/// speaks otherwise, gives the client OpenAI's content type.
pub(crate) fn header_filter(resp: ResponseView<'_>, cx: &mut Ctx<'_>) {
    let status = resp.status();
    let ctype = resp.header("content-type").unwrap_or(b"");
    let Some(ex) = exchange(cx) else {
        return;
    };
    let events = ctype.starts_with(b"text/event-stream")
        || ctype.starts_with(b"application/vnd.amazon.eventstream");
    ex.mode = match status {
        200..=299 if events => Mode::Stream,
        200..=299 if ex.stream && ex.dialect() == Dialect::Gemini => Mode::Stream,
        200..=299 => Mode::Whole,
        _ => Mode::Pass,
    };
    if ex.mode == Mode::Stream {
        ex.reader = Some(Stream::new(ex.dialect(), ex.client_usage));
        ex.active
            .get_or_insert_with(sluice_core::llm::ActiveStream::begin);
    }
    let translated = ex.dialect() != Dialect::OpenAi;
    let mode = ex.mode;
    if let Some(r) = cx.llm.as_mut() {
        r.status = status;
    }
    if translated {
        match mode {
            Mode::Stream => cx.response.set_header("Content-Type", b"text/event-stream"),
            Mode::Whole => cx.response.set_header("Content-Type", b"application/json"),
            Mode::Pass => {}
        }
    }
}

fn exchange<'a>(cx: &'a mut Ctx<'_>) -> Option<&'a mut Exchange> {
    let ex = cx.slot::<Exchange>(SLOT);
    ex.instance.is_some().then_some(ex)
}

/// Whether the body filter has work: an exchange was prepared.
pub(crate) fn filters_body(cx: &Ctx<'_>) -> bool {
    cx.slot_ref::<Exchange>(SLOT)
        .is_some_and(|e| e.instance.is_some() && e.mode != Mode::Pass)
}

/// One piece of the answer: read (and translated) as it passes; the record of the exchange
/// brought up to date, so that an answer cut off is counted as far as it went.
pub(crate) fn body_filter(chunk: &mut Bytes, eos: bool, cx: &mut Ctx<'_>) {
    let mut record_usage: Option<(Usage, bool, Option<String>)> = None;
    let mut cut = None;
    let now = Instant::now();
    let started;
    {
        let Some(ex) = exchange(cx) else {
            return;
        };
        started = ex.started.unwrap_or(now);
        ex.received += chunk.len() as u64;
        if ex.max_bytes.is_some_and(|m| ex.received > m) {
            cut = Some("max_response_bytes");
        }
        if ex
            .max_duration_ms
            .is_some_and(|m| now.duration_since(started).as_millis() as u64 > m)
        {
            cut = Some("max_stream_duration_ms");
        }
        match ex.mode {
            Mode::Pass => {}
            Mode::Stream
                if ex.dialect() == Dialect::OpenAi
                    && !eos
                    && ex.events.is_idle()
                    && chunk.ends_with(b"\n\n")
                    && !dialect::has_usage(chunk) =>
            {
                // OpenAI's stream, whole events without usage (nearly every piece): read where
                // it lies and passed on as it came, nothing split or copied.
                if let Some(reader) = ex.reader.as_mut() {
                    reader.read_openai(chunk);
                    let mut usage = if reader.reported {
                        reader.usage
                    } else {
                        Usage::default()
                    };
                    usage.prompt = usage.prompt.max(ex.prompt_estimate);
                    usage.completion = usage.completion.max(reader.text_bytes.div_ceil(4));
                    let model = (!ex.model_recorded)
                        .then(|| reader.model().map(str::to_owned))
                        .flatten();
                    ex.model_recorded |= model.is_some();
                    record_usage = Some((usage, reader.reported, model));
                }
            }
            Mode::Stream => {
                let mut out = Vec::with_capacity(chunk.len() + 64);
                if let Some(reader) = ex.reader.as_mut() {
                    if ex.dialect == Some(Dialect::Bedrock) {
                        let fed = ex
                            .frames
                            .feed(chunk, |m| reader.bedrock_message(&m, &mut out));
                        if fed.is_err() {
                            cut = Some("a broken event stream");
                        }
                    } else {
                        ex.events.feed(chunk, |e| reader.event(e, &mut out));
                    }
                    if eos {
                        let mut rest = ex.events.take_rest();
                        if !rest.is_empty() {
                            rest.extend_from_slice(b"\n\n");
                            reader.event(&rest, &mut out);
                        }
                        reader.end(&mut out);
                    }
                    let mut usage = if reader.reported {
                        reader.usage
                    } else {
                        Usage::default()
                    };
                    if !eos {
                        // Until the end, what a cut-off answer would count: at least the
                        // estimates (some providers report the usage so far on the way).
                        usage.prompt = usage.prompt.max(ex.prompt_estimate);
                        usage.completion = usage.completion.max(reader.text_bytes.div_ceil(4));
                    }
                    let model = (!ex.model_recorded)
                        .then(|| reader.model().map(str::to_owned))
                        .flatten();
                    ex.model_recorded |= model.is_some();
                    record_usage = Some((usage, reader.reported, model));
                }
                // OpenAI's own stream, nothing held or dropped: the piece as it came.
                if out.len() != chunk.len() || ex.dialect() != Dialect::OpenAi {
                    *chunk = Bytes::from(out);
                }
            }
            Mode::Whole => {
                let translated = ex.dialect() != Dialect::OpenAi;
                if ex.whole.len() + chunk.len() <= MAX_WHOLE {
                    ex.whole.extend_from_slice(chunk);
                    if translated {
                        chunk.clear();
                    }
                } else if translated && !ex.whole.is_empty() {
                    // Too large to translate: what was held goes on as it came.
                    let mut all = std::mem::take(&mut ex.whole);
                    all.extend_from_slice(chunk);
                    *chunk = Bytes::from(all);
                    ex.mode = Mode::Pass;
                }
                if eos && ex.mode == Mode::Whole {
                    match dialect::whole_answer(ex.dialect(), &ex.whole) {
                        Some((out, usage, model)) => {
                            if let Some(out) = out {
                                *chunk = Bytes::from(out);
                            } else if translated {
                                *chunk = Bytes::from(std::mem::take(&mut ex.whole));
                            }
                            record_usage = Some((usage, true, model));
                        }
                        None if translated => *chunk = Bytes::from(std::mem::take(&mut ex.whole)),
                        None => {}
                    }
                }
            }
        }
    }
    if let Some(why) = cut {
        cx.cut_response(why);
    }
    if let Some(r) = cx.llm.as_mut() {
        let ms = now.duration_since(started).as_millis() as u64;
        if r.first_token_ms.is_none() && !chunk.is_empty() {
            r.first_token_ms = Some(ms);
        }
        r.latency_ms = Some(ms);
        if let Some((usage, reported, model)) = record_usage {
            r.usage = usage;
            r.reported = reported;
            if let Some(m) = model {
                r.model = Some(Rc::from(m));
            }
        }
    }
}

/// `logging`: a summary (model, time, tokens) and the payloads, logged at info.
#[derive(Debug, Default, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Logging {
    #[serde(default)]
    pub(crate) summaries: bool,
    #[serde(default)]
    pub(crate) payloads: bool,
}

/// The log phase of an exchange: `logging`'s lines.
pub(crate) fn log(logging: Logging, route: &str, cx: &Ctx<'_>) {
    let Some(r) = cx.llm.as_deref() else {
        return;
    };
    if logging.summaries {
        tracing::info!(
            target: "sluice::ai",
            route,
            instance = %r.instance,
            provider = r.provider,
            model = r.model.as_deref().unwrap_or("-"),
            status = r.status,
            latency_ms = r.latency_ms.unwrap_or(0),
            first_token_ms = r.first_token_ms.unwrap_or(0),
            prompt_tokens = r.usage.prompt,
            completion_tokens = r.usage.completion,
            reported = r.reported,
            "llm exchange"
        );
    }
    if logging.payloads {
        let body = cx
            .body()
            .and_then(|b| b.raw())
            .map(|b| String::from_utf8_lossy(&b[..b.len().min(64 * 1024)]).into_owned());
        tracing::info!(target: "sluice::ai", route, request = body.as_deref().unwrap_or(""), "llm request payload");
    }
}
