//! What the plugin asks the OpenID provider, and keeps: its discovery document and its keys
//! (JWKS), cached per worker thread (no lock shared between workers), and token introspection
//! (RFC 7662). Every call goes through the plugin callout pool (`callout.rs`), bounded by the
//! plugin's `timeout`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use serde::Deserialize;
use serde_json::Value;

use crate::callout::{KeepAlive, Target};

/// The fields of a discovery document (OpenID Connect Discovery 1.0) the plugin uses.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Discovery {
    #[serde(default)]
    pub(super) issuer: Option<String>,
    #[serde(default)]
    pub(super) jwks_uri: Option<String>,
    #[serde(default)]
    pub(super) introspection_endpoint: Option<String>,
    #[serde(default)]
    pub(super) authorization_endpoint: Option<String>,
    #[serde(default)]
    pub(super) token_endpoint: Option<String>,
    #[serde(default)]
    pub(super) userinfo_endpoint: Option<String>,
    #[serde(default)]
    pub(super) end_session_endpoint: Option<String>,
}

/// How the plugin reaches its provider: settings from the configuration.
pub(super) struct Reach {
    /// Its key in each worker's cache.
    pub(super) id: u64,
    pub(super) discovery: Target,
    pub(super) verify: bool,
    pub(super) timeout: Duration,
    pub(super) keepalive: Option<KeepAlive>,
    /// How long keys are kept (`jwk_expires_in`).
    pub(super) jwks_ttl: Duration,
}

/// A worker's copy of what it learnt from one plugin's provider.
#[derive(Default)]
struct Known {
    discovery: Option<(Instant, Rc<Discovery>)>,
    jwks: Option<(Instant, Rc<jsonwebtoken::jwk::JwkSet>)>,
    /// When the keys were last fetched because a token named one they lacked.
    refetched: Option<Instant>,
    /// When fetching the discovery document last failed.
    discovery_failed: Option<Instant>,
    /// Targets of the endpoints the discovery named, parsed once.
    targets: HashMap<String, Target>,
}

/// How long a discovery document is kept (lua-resty-openidc keeps it a day too).
const DISCOVERY_TTL: Duration = Duration::from_secs(86_400);
/// A token naming a key the set lacks fetches the set again at most this often.
const REFETCH_EVERY: Duration = Duration::from_secs(10);
/// A failed discovery is not tried again sooner.
const RETRY_AFTER: Duration = Duration::from_secs(5);

thread_local! {
    static KNOWN: RefCell<HashMap<u64, Known>> = RefCell::new(HashMap::new());
}

fn with_known<R>(id: u64, f: impl FnOnce(&mut Known) -> R) -> R {
    KNOWN.with_borrow_mut(|k| {
        if k.len() > 4096 {
            // Plugins of configurations gone; what is still used is fetched again.
            k.clear();
        }
        f(k.entry(id).or_default())
    })
}

impl Reach {
    /// The target of `uri` (an endpoint of the provider's), parsed once per worker.
    fn target(&self, uri: &str) -> Result<Target, String> {
        if let Some(t) = with_known(self.id, |k| k.targets.get(uri).cloned()) {
            return Ok(t);
        }
        let t = Target::parse(uri, self.verify).map_err(|e| format!("{uri}: {e}"))?;
        with_known(self.id, |k| k.targets.insert(uri.to_owned(), t.clone()));
        Ok(t)
    }

    /// A JSON answer of `target` to `req`, within the timeout. Err: why not.
    async fn json(&self, target: &Target, req: http::Request<Full<Bytes>>) -> Result<Value, String> {
        let answered = tokio::time::timeout(
            self.timeout,
            crate::callout::call(target, req, self.keepalive),
        )
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {:?}", self.timeout)))?;
        let (head, body) = answered;
        if !head.status.is_success() {
            return Err(format!(
                "{}{} answered {}",
                target.authority, target.path, head.status
            ));
        }
        serde_json::from_slice(&body)
            .map_err(|e| format!("{}{}: not JSON: {e}", target.authority, target.path))
    }

    async fn get(&self, target: &Target) -> Result<Value, String> {
        let req = http::Request::get(target.path.as_str())
            .header("host", target.authority.as_str())
            .header("accept", "application/json")
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        self.json(target, req).await
    }

    /// Sends `builder` (method and headers; its URI is replaced) with `body` to `endpoint`, an
    /// endpoint of the provider's; its JSON answer.
    pub(super) async fn send(
        &self,
        endpoint: &str,
        builder: http::request::Builder,
        body: Bytes,
    ) -> Result<Value, String> {
        let target = self.target(endpoint)?;
        let req = builder
            .uri(target.path.as_str())
            .header("host", target.authority.as_str())
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        self.json(&target, req).await
    }

    /// The discovery document: this worker's copy, or fetched.
    pub(super) async fn discovery(&self) -> Result<Rc<Discovery>, String> {
        let now = Instant::now();
        if let Some(d) = with_known(self.id, |k| {
            k.discovery
                .as_ref()
                .filter(|(at, _)| now.duration_since(*at) < DISCOVERY_TTL)
                .map(|(_, d)| d.clone())
        }) {
            return Ok(d);
        }
        // A provider that just failed is not asked again for a few seconds; a document it gave
        // before is used meanwhile.
        let (stale, failed) = with_known(self.id, |k| {
            (k.discovery.as_ref().map(|(_, d)| d.clone()), k.discovery_failed)
        });
        if failed.is_some_and(|at| now.duration_since(at) < RETRY_AFTER) {
            return stale.ok_or_else(|| "the discovery document failed a moment ago".to_owned());
        }
        let fetched = async {
            let doc = self.get(&self.discovery).await?;
            serde_json::from_value::<Discovery>(doc).map_err(|e| format!("the discovery document: {e}"))
        }
        .await;
        match fetched {
            Ok(d) => {
                let d = Rc::new(d);
                with_known(self.id, |k| {
                    k.discovery = Some((now, d.clone()));
                    k.discovery_failed = None;
                });
                Ok(d)
            }
            Err(e) => {
                with_known(self.id, |k| k.discovery_failed = Some(now));
                stale.ok_or(e)
            }
        }
    }

    /// The key set, fetched again when `kid` is not in it (the provider rolled its keys), at
    /// most every [`REFETCH_EVERY`].
    pub(super) async fn jwks(&self, kid: Option<&str>) -> Result<Rc<jsonwebtoken::jwk::JwkSet>, String> {
        let now = Instant::now();
        let cached = with_known(self.id, |k| {
            let fresh = k
                .jwks
                .as_ref()
                .filter(|(at, _)| now.duration_since(*at) < self.jwks_ttl)
                .map(|(_, s)| s.clone());
            let may_refetch = k
                .refetched
                .is_none_or(|at| now.duration_since(at) >= REFETCH_EVERY);
            let any = k.jwks.as_ref().map(|(_, s)| s.clone());
            (fresh, may_refetch, any)
        });
        match cached {
            (Some(set), _, _) if kid.is_none_or(|id| set.find(id).is_some()) => return Ok(set),
            // Asked a moment ago: what there is, fresh or not.
            (_, false, Some(set)) => return Ok(set),
            _ => {}
        }
        // Counted before fetching: a failing endpoint is not asked more often either.
        let stale = with_known(self.id, |k| {
            k.refetched = Some(now);
            k.jwks.as_ref().map(|(_, s)| s.clone())
        });
        let fetched = async {
            let d = self.discovery().await?;
            let uri = d
                .jwks_uri
                .as_deref()
                .ok_or("the discovery document has no jwks_uri")?;
            let target = self.target(uri)?;
            serde_json::from_value::<jsonwebtoken::jwk::JwkSet>(self.get(&target).await?)
                .map_err(|e| format!("the key set at {uri}: {e}"))
        }
        .await;
        match fetched {
            Ok(set) => {
                let set = Rc::new(set);
                with_known(self.id, |k| k.jwks = Some((now, set.clone())));
                Ok(set)
            }
            // The keys it had are better than none while the provider is away.
            Err(e) => stale.ok_or(e),
        }
    }

    /// RFC 7662 introspection of `token` at `endpoint`, authenticated as the client. Ok: the
    /// answer of an active token. Err: why the token is not accepted.
    pub(super) async fn introspect(
        &self,
        endpoint: &str,
        token: &str,
        client: &Client,
        extra: &[(String, Vec<u8>)],
    ) -> Result<serde_json::Map<String, Value>, Refused> {
        let target = self.target(endpoint).map_err(Refused::Provider)?;
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("token", token)
            .append_pair("token_type_hint", "access_token");
        let mut req = http::Request::post(target.path.as_str())
            .header("host", target.authority.as_str())
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json");
        for (name, value) in extra {
            req = req.header(name.as_str(), value.as_slice());
        }
        let req = client.authenticate(req, &mut form, client.introspection_basic);
        let req = req
            .body(Full::new(Bytes::from(form.finish())))
            .map_err(|e| Refused::Provider(e.to_string()))?;
        match self.json(&target, req).await.map_err(Refused::Provider)? {
            Value::Object(o) if o.get("active") == Some(&Value::Bool(true)) => Ok(o),
            Value::Object(_) => Err(Refused::Token("invalid token".into())),
            _ => Err(Refused::Provider(
                "the introspection answer is not a JSON object".into(),
            )),
        }
    }
}

/// Why introspection did not accept a token.
pub(super) enum Refused {
    /// The provider says the token is not active.
    Token(String),
    /// The provider could not be asked (logged; the client is told less).
    Provider(String),
}

/// The client's credentials and how it presents them.
pub(super) struct Client {
    pub(super) id: String,
    pub(super) secret: String,
    /// `client_secret_basic` (else `client_secret_post`) at the introspection endpoint.
    pub(super) introspection_basic: bool,
}

impl Client {
    /// Adds the client's credentials: HTTP Basic (RFC 6749 2.3.1: each part form-encoded
    /// first), or in the form.
    pub(super) fn authenticate(
        &self,
        req: http::request::Builder,
        form: &mut form_urlencoded::Serializer<'_, String>,
        basic: bool,
    ) -> http::request::Builder {
        use base64::Engine as _;
        if basic {
            let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let pair = format!("{}:{}", enc(&self.id), enc(&self.secret));
            let b64 = base64::engine::general_purpose::STANDARD.encode(pair);
            req.header("authorization", format!("Basic {b64}"))
        } else {
            form.append_pair("client_id", &self.id)
                .append_pair("client_secret", &self.secret);
            req
        }
    }
}
