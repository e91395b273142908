//! `openid-connect`: authenticates requests with an OpenID provider (Keycloak, Auth0, Entra ID,
//! Okta, ...), as APISIX's `openid-connect`.
//!
//! Bearer tokens (`bearer_only`, or with `introspection_endpoint`, `public_key` or `use_jwks`)
//! are checked by signature (`public_key`, or the provider's JWKS with `use_jwks`: signature,
//! issuer, expiry) or by introspection (RFC 7662, the client authenticated by
//! `client_secret_basic` or `client_secret_post`); then `required_scopes`, the
//! `claim_validator`'s audience and `claim_schema`. The access token and what is known of the
//! user go upstream in `X-Access-Token` (or `Authorization`) and `X-Userinfo` (base64 JSON);
//! headers of those names from the client are removed first. Browsers without a token take the
//! authorization-code flow (`session.rs`), or are refused (`unauth_action: deny`) or let
//! through (`pass`).
//!
//! The provider's discovery document and keys are fetched when first needed and kept per
//! worker thread (keys for `jwk_expires_in`, fetched again when a token names a key they lack,
//! at most every 10 seconds); every call is bounded by `timeout` and waits on the worker's
//! runtime without blocking it.

mod flow;
mod provider;
mod session;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, LocalFuture, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::Num;
use provider::{Client, Reach};
use session::{Browser, BrowserParts};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    client_id: String,
    #[serde(default)]
    client_secret: Option<String>,
    discovery: String,
    #[serde(default = "openid")]
    scope: String,
    #[serde(default)]
    required_scopes: Option<Vec<String>>,
    #[serde(default)]
    realm: Option<String>,
    #[serde(default)]
    bearer_only: bool,
    #[serde(default)]
    logout_path: Option<String>,
    #[serde(default)]
    post_logout_redirect_uri: Option<String>,
    #[serde(default)]
    redirect_uri: Option<String>,
    #[serde(default)]
    timeout: Option<Num>,
    #[serde(default = "yes")]
    ssl_verify: bool,
    #[serde(default)]
    introspection_endpoint: Option<String>,
    #[serde(default)]
    introspection_endpoint_auth_method: Option<String>,
    #[serde(default)]
    token_endpoint_auth_method: Option<String>,
    #[serde(default)]
    public_key: Option<String>,
    #[serde(default)]
    use_jwks: bool,
    #[serde(default)]
    use_pkce: bool,
    #[serde(default)]
    token_signing_alg_values_expected: Option<String>,
    #[serde(default = "yes")]
    set_access_token_header: bool,
    #[serde(default)]
    access_token_in_authorization_header: bool,
    #[serde(default = "yes")]
    set_id_token_header: bool,
    #[serde(default)]
    set_raw_id_token_header: bool,
    #[serde(default = "yes")]
    set_userinfo_header: bool,
    #[serde(default)]
    set_refresh_token_header: bool,
    #[serde(default)]
    session: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    session_contents: Option<Value>,
    #[serde(default)]
    unauth_action: Option<String>,
    #[serde(default)]
    claim_validator: Option<ClaimValidator>,
    #[serde(default)]
    claim_schema: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    introspection_addon_headers: Option<Vec<String>>,
    #[serde(default)]
    authorization_params: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    jwk_expires_in: Option<Num>,
    #[serde(default)]
    iat_slack: Option<Num>,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    access_token_expires_leeway: Option<Num>,
    #[serde(default)]
    use_nonce: bool,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    force_reauthorize: bool,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    revoke_tokens_on_logout: bool,
    /// APISIX's fields for what Sluice does not offer: refused when they ask for it.
    #[serde(default)]
    par: Option<Value>,
    #[serde(default)]
    dpop: Option<Value>,
    #[serde(default)]
    proxy_opts: Option<Value>,
    #[serde(default)]
    client_rsa_private_key: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    client_rsa_private_key_id: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    client_jwt_assertion_expires_in: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    client_jwt_assertion_alg: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    client_jwt_assertion_audience: Option<Value>,
    #[serde(default)]
    accept_none_alg: bool,
    /// Tuning of lua-resty-openidc's caches and renewals: accepted, no effect (see the page).
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    renew_access_token_on_expiry: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    access_token_expires_in: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    refresh_session_interval: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    accept_unsupported_alg: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    jwt_verification_cache_ignore: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    cache_segment: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    introspection_interval: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)] // accepted from APISIX configurations; no effect (see the page)
    introspection_expiry_claim: Option<Value>,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct ClaimValidator {
    #[serde(default)]
    issuer: Option<IssuerValidator>,
    #[serde(default)]
    audience: Option<AudienceValidator>,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct IssuerValidator {
    #[serde(default)]
    valid_issuers: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct AudienceValidator {
    #[serde(default)]
    claim: Option<String>,
    #[serde(default)]
    required: bool,
    #[serde(default)]
    match_with_client_id: bool,
}

fn openid() -> String {
    "openid".into()
}

fn yes() -> bool {
    true
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("openid-connect", 2599, Config);

    fn encrypted_fields(&self) -> &'static [&'static str] {
        &[
            "client_secret",
            "client_rsa_private_key",
            "dpop.private_key",
            "session.secret",
            "session.redis.password",
        ]
    }

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        let mut refuse = |field: &str, why: &str, v: &mut Validator| {
            v.error_at(field, why);
            ok = false;
        };
        let wants = |x: &Option<Value>| {
            x.as_ref()
                .is_some_and(|x| x.get("enabled") == Some(&Value::Bool(true)))
        };
        if wants(&c.par) {
            refuse("par.enabled", "pushed authorization requests are not supported by Sluice", v);
        }
        if wants(&c.dpop) {
            refuse("dpop.enabled", "DPoP is not supported by Sluice", v);
        }
        if c.proxy_opts.is_some() {
            refuse("proxy_opts", "calls to the provider through a forward proxy are not supported by Sluice", v);
        }
        if c.client_rsa_private_key.is_some() {
            refuse("client_rsa_private_key", "private_key_jwt client authentication is not supported by Sluice: use client_secret_basic or client_secret_post", v);
        }
        if c.accept_none_alg {
            refuse("accept_none_alg", "unsigned tokens are never accepted by Sluice", v);
        }
        let basic = |field: &str, m: &Option<String>, v: &mut Validator| match m.as_deref() {
            None | Some("client_secret_basic") => Some(true),
            Some("client_secret_post") => Some(false),
            Some(other) => {
                v.error_at(
                    field,
                    format!("\"{other}\" is not supported by Sluice, expected client_secret_basic or client_secret_post"),
                );
                None
            }
        };
        let introspection_basic = basic(
            "introspection_endpoint_auth_method",
            &c.introspection_endpoint_auth_method,
            v,
        );
        let token_basic = basic("token_endpoint_auth_method", &c.token_endpoint_auth_method, v);
        let discovery = v.field("discovery", |v| {
            provider_target(&c.discovery, c.ssl_verify, v)
        });
        if let Some(e) = &c.introspection_endpoint {
            v.field("introspection_endpoint", |v| provider_target(e, c.ssl_verify, v));
        }
        let (timeout, keepalive) = {
            // APISIX's `timeout` is in seconds (default 3).
            let t = crate::util::whole_field("timeout", c.timeout, 3, (1, 600), " s", v);
            (t.map(Duration::from_secs), Some(crate::callout::KeepAlive {
                pool: 5,
                idle: Duration::from_secs(60),
            }))
        };
        let year = 31_536_000;
        let jwks_ttl = crate::util::whole_field("jwk_expires_in", c.jwk_expires_in, 86_400, (1, year), " s", v);
        let leeway = crate::util::whole_field("iat_slack", c.iat_slack, 120, (0, year), " s", v);
        let public_key = match &c.public_key {
            None => Some(None),
            Some(pem) => v.field("public_key", |v| public_key(pem, v).map(Some)),
        };
        let alg = match &c.token_signing_alg_values_expected {
            None => Some(None),
            Some(a) => match a.parse::<jsonwebtoken::Algorithm>() {
                Ok(alg) if family(alg).is_none() => {
                    v.error_at(
                        "token_signing_alg_values_expected",
                        format!("\"{a}\" is a shared-secret algorithm: tokens are checked with the provider's public keys"),
                    );
                    None
                }
                Ok(a) => Some(Some(a)),
                Err(_) => {
                    v.error_at(
                        "token_signing_alg_values_expected",
                        format!("unknown algorithm \"{a}\", expected RS256, ES256, PS256, EdDSA or another JWS algorithm"),
                    );
                    None
                }
            },
        };
        let realm = crate::util::realm_challenge("Bearer", c.realm.as_deref(), "apisix", v);
        let unauth = match c.unauth_action.as_deref() {
            None | Some("auth") => Some(Unauth::Auth),
            Some("deny") => Some(Unauth::Deny),
            Some("pass") => Some(Unauth::Pass),
            Some(other) => {
                v.error_at(
                    "unauth_action",
                    format!("unknown action \"{other}\", expected auth, deny or pass"),
                );
                None
            }
        };
        let claim_schema = match c.claim_schema.clone() {
            None => Some(None),
            Some(s) => v.field("claim_schema", |v| {
                jsonschema::options()
                    .with_pattern_options(jsonschema::PatternOptions::regex())
                    .with_draft(jsonschema::Draft::Draft7)
                    .build(&Value::Object(s))
                    .map(Some)
                    .map_err(|e| v.error(format!("invalid JSON Schema: {e}")))
                    .ok()
            }),
        };
        let mut addon = Vec::new();
        v.field("introspection_addon_headers", |v| {
            for (i, h) in c.introspection_addon_headers.iter().flatten().enumerate() {
                let framing = ["authorization", "host", "content-length", "content-type", "transfer-encoding", "connection"];
                if framing.iter().any(|f| f.eq_ignore_ascii_case(h)) {
                    v.index(i, |v| v.error(format!("\"{h}\" is set by the gateway on the introspection call")));
                } else if v.index(i, |v| crate::util::check_header_name(h, v)) {
                    addon.push(h.to_ascii_lowercase());
                }
            }
        });
        // As APISIX: a bearer-only route checking signatures itself, or a browser route with
        // PKCE (a public client), needs no secret.
        let needs_secret = !((c.bearer_only && (c.public_key.is_some() || c.use_jwks))
            || (!c.bearer_only && c.use_pkce));
        if needs_secret && c.client_secret.as_deref().is_none_or(str::is_empty) {
            refuse(
                "client_secret",
                "required: the provider's introspection and token endpoints authenticate the client with it",
                v,
            );
        }
        let audience = c
            .claim_validator
            .as_ref()
            .and_then(|cv| cv.audience.as_ref())
            .map(|a| Audience {
                claim: a.claim.clone().unwrap_or_else(|| "aud".into()),
                required: a.required || a.match_with_client_id,
                match_client_id: a.match_with_client_id,
            });
        if c.claim_validator
            .as_ref()
            .and_then(|cv| cv.issuer.as_ref())
            .and_then(|i| i.valid_issuers.as_ref())
            .is_some_and(Vec::is_empty)
        {
            refuse(
                "claim_validator.issuer.valid_issuers",
                "must name at least one issuer (leave it out to trust the discovery's)",
                v,
            );
        }
        let issuers = c
            .claim_validator
            .as_ref()
            .and_then(|cv| cv.issuer.as_ref())
            .and_then(|i| i.valid_issuers.clone());
        let bearer = c.bearer_only
            || c.introspection_endpoint.is_some()
            || c.public_key.is_some()
            || c.use_jwks;
        let browser = match (&c.session, c.bearer_only) {
            (_, true) => Some(None),
            (None, false) => {
                v.error_at(
                    "session.secret",
                    "required unless bearer_only: the browser's session cookie is encrypted with it (16 characters or more)",
                );
                None
            }
            (Some(session), false) => Browser::build(
                BrowserParts {
                    session,
                    bind: format!("{}\0{}", c.client_id, c.discovery),
                    redirect_uri: c.redirect_uri.clone(),
                    logout_path: c.logout_path.clone(),
                    post_logout_redirect_uri: c.post_logout_redirect_uri.clone(),
                    scope: c.scope.clone(),
                    pkce: c.use_pkce,
                    nonce: c.use_nonce,
                    params: c.authorization_params.clone(),
                    token_basic: token_basic.unwrap_or(true),
                    set_id_token: c.set_id_token_header,
                    set_raw_id_token: c.set_raw_id_token_header,
                    set_refresh_token: c.set_refresh_token_header,
                },
                v,
            )
            .map(Some),
        };
        let (
            Some(discovery),
            Some(introspection_basic),
            Some(_token_basic),
            Some(timeout),
            Some(jwks_ttl),
            Some(leeway),
            Some(public_key),
            Some(alg),
            Some(realm),
            Some(unauth),
            Some(claim_schema),
            Some(browser),
            true,
        ) = (
            discovery,
            introspection_basic,
            token_basic,
            timeout,
            jwks_ttl,
            leeway,
            public_key,
            alg,
            realm,
            unauth,
            claim_schema,
            browser,
            ok,
        )
        else {
            return None;
        };
        Some(Arc::new(OpenidConnect {
            reach: Reach {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                discovery,
                verify: c.ssl_verify,
                timeout,
                keepalive,
                jwks_ttl: Duration::from_secs(jwks_ttl),
            },
            client: Client {
                id: c.client_id.clone(),
                secret: c.client_secret.clone().unwrap_or_default(),
                introspection_basic,
            },
            bearer,
            bearer_only: c.bearer_only,
            public_key,
            use_jwks: c.use_jwks,
            alg,
            leeway,
            issuers,
            audience,
            claim_schema,
            required_scopes: c.required_scopes.clone(),
            introspection_endpoint: c.introspection_endpoint.clone(),
            addon,
            realm,
            unauth,
            browser,
            set_access_token: c.set_access_token_header,
            token_in_authorization: c.access_token_in_authorization_header,
            set_userinfo: c.set_userinfo_header,
        }))
    }
}

/// An endpoint of the provider's, checked at load.
fn provider_target(uri: &str, verify: bool, v: &mut Validator) -> Option<crate::callout::Target> {
    crate::callout::Target::parse(uri, verify)
        .map_err(|e| v.error(e))
        .ok()
}

/// A PEM public key (RSA, EC P-256/P-384 or Ed25519), with the algorithms it can check.
fn public_key(pem: &str, v: &mut Validator) -> Option<(jsonwebtoken::DecodingKey, Family)> {
    let pem = pem.trim().as_bytes();
    if let Ok(k) = jsonwebtoken::DecodingKey::from_rsa_pem(pem) {
        return Some((k, Family::Rsa));
    }
    if let Ok(k) = jsonwebtoken::DecodingKey::from_ec_pem(pem) {
        return Some((k, Family::Ec));
    }
    if let Ok(k) = jsonwebtoken::DecodingKey::from_ed_pem(pem) {
        return Some((k, Family::Ed));
    }
    v.error("not a PEM public key (RSA, EC or Ed25519: -----BEGIN PUBLIC KEY-----)");
    None
}

/// The kind of a public key, for the algorithms a token may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Rsa,
    Ec,
    Ed,
}

fn family(alg: jsonwebtoken::Algorithm) -> Option<Family> {
    use jsonwebtoken::Algorithm as A;
    match alg {
        A::RS256 | A::RS384 | A::RS512 | A::PS256 | A::PS384 | A::PS512 => Some(Family::Rsa),
        A::ES256 | A::ES384 => Some(Family::Ec),
        A::EdDSA => Some(Family::Ed),
        // Symmetric algorithms would make the public key a shared secret.
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unauth {
    Auth,
    Deny,
    Pass,
}

struct Audience {
    claim: String,
    required: bool,
    match_client_id: bool,
}

struct OpenidConnect {
    reach: Reach,
    client: Client,
    /// Bearer tokens are checked (APISIX: `bearer_only`, `introspection_endpoint`,
    /// `public_key` or `use_jwks`).
    bearer: bool,
    bearer_only: bool,
    public_key: Option<(jsonwebtoken::DecodingKey, Family)>,
    use_jwks: bool,
    alg: Option<jsonwebtoken::Algorithm>,
    /// Seconds of clock skew allowed on `exp`/`nbf` (`iat_slack`).
    leeway: u64,
    issuers: Option<Vec<String>>,
    audience: Option<Audience>,
    claim_schema: Option<jsonschema::Validator>,
    required_scopes: Option<Vec<String>>,
    introspection_endpoint: Option<String>,
    /// Request headers passed to the introspection endpoint, lowercased.
    addon: Vec<String>,
    /// `Bearer realm="..."`.
    realm: Box<[u8]>,
    unauth: Unauth,
    /// The authorization-code flow, unless `bearer_only`.
    browser: Option<Browser>,
    set_access_token: bool,
    token_in_authorization: bool,
    set_userinfo: bool,
}

/// The headers the plugin sets upstream; the client's are removed first.
const OUTPUTS: [&str; 5] = [
    "X-Access-Token",
    "X-Userinfo",
    "X-ID-Token",
    "X-Refresh-Token",
    "X-Raw-ID-Token",
];

/// Why a request is refused.
enum Refusal {
    /// 400: a malformed `Authorization`.
    BadHeader,
    /// 401 with a challenge; `Some`: the token's fault, described.
    Unauthorized(Option<String>),
    /// 403 with a JSON `{"error": ...}` body.
    Forbidden(String),
}

impl OpenidConnect {
    fn refuse(&self, r: Refusal) -> Flow {
        Flow::Respond(match r {
            Refusal::BadHeader => sluice_core::http::write::page(400),
            Refusal::Unauthorized(why) => {
                let mut challenge = self.realm.to_vec();
                if let Some(why) = why {
                    let why: String = why
                        .chars()
                        .map(|c| if c == '"' || c == '\\' || c.is_control() { '\'' } else { c })
                        .take(200)
                        .collect();
                    challenge.extend_from_slice(
                        format!(", error=\"invalid_token\", error_description=\"{why}\"").as_bytes(),
                    );
                }
                sluice_core::http::write::page(401).header("WWW-Authenticate", &challenge)
            }
            Refusal::Forbidden(error) => {
                Response::json(403, &serde_json::json!({ "error": error }))
            }
        })
    }

    /// The bearer token, from `Authorization: Bearer`, else the client's `X-Access-Token`.
    /// Err: a malformed `Authorization`.
    fn bearer_token(req: &RequestHead, x_access_token: Option<Vec<u8>>) -> Result<Option<String>, ()> {
        let Some(h) = req.header("authorization") else {
            return Ok(x_access_token.map(|t| String::from_utf8_lossy(&t).into_owned()));
        };
        let h = String::from_utf8_lossy(h);
        let Some((scheme, token)) = h.split_once(' ') else {
            return Err(());
        };
        Ok(scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.to_owned()))
    }

    /// Checks a bearer token; Ok: its claims (a JWT's payload, or the introspection answer).
    async fn check_token(
        &self,
        token: &str,
        req: &RequestHead,
    ) -> Result<serde_json::Map<String, Value>, Refusal> {
        let bad = |why: String| Refusal::Unauthorized(Some(why));
        if self.public_key.is_some() || self.use_jwks {
            if let Some(issuers) = &self.issuers {
                return self.verify_jwt(token, issuers, None).await.map_err(bad);
            }
            // The discovery's issuer is the only one trusted; without it, fail closed.
            let d = self.reach.discovery().await.map_err(|e| {
                tracing::error!(error = %e, "openid-connect: the discovery document could not be read");
                bad("issuer validation unavailable".into())
            })?;
            let issuer = d.issuer.as_slice();
            return self.verify_jwt(token, issuer, None).await.map_err(bad);
        }
        let endpoint = match &self.introspection_endpoint {
            Some(e) => e.clone(),
            None => {
                let d = self.reach.discovery().await.map_err(|e| {
                    tracing::error!(error = %e, "openid-connect: the discovery document could not be read");
                    bad("token introspection unavailable".into())
                })?;
                d.introspection_endpoint
                    .clone()
                    .ok_or_else(|| bad("the provider has no introspection endpoint".into()))?
            }
        };
        let extra: Vec<(String, Vec<u8>)> = self
            .addon
            .iter()
            .filter_map(|n| Some((n.clone(), req.header(n)?.to_vec())))
            .collect();
        self.reach
            .introspect(&endpoint, token, &self.client, &extra)
            .await
            .map_err(|e| match e {
                provider::Refused::Token(why) => bad(why),
                // The provider's trouble is logged, not told to the client.
                provider::Refused::Provider(why) => {
                    tracing::error!(error = %why, "openid-connect: token introspection failed");
                    bad("token introspection unavailable".into())
                }
            })
    }

    /// Verifies a JWT's signature (the public key, or the provider's key it names), its
    /// algorithm, issuer, expiry and not-before.
    /// `audience`: the client's id an ID token must be for.
    async fn verify_jwt(
        &self,
        token: &str,
        issuers: &[String],
        audience: Option<&str>,
    ) -> Result<serde_json::Map<String, Value>, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("invalid jwt: {e}"))?;
        if let Some(want) = self.alg
            && header.alg != want
        {
            return Err(format!("token signed with {:?}, expected {want:?}", header.alg));
        }
        let key = match &self.public_key {
            Some((key, fam)) => {
                if family(header.alg) != Some(*fam) {
                    return Err(format!("token signed with {:?}, which the public key cannot check", header.alg));
                }
                key.clone()
            }
            None => {
                let set = self.reach.jwks(header.kid.as_deref()).await.map_err(|e| {
                    tracing::error!(error = %e, "openid-connect: the provider's keys could not be read");
                    "the provider's keys are unavailable".to_owned()
                })?;
                let jwk = match header.kid.as_deref() {
                    Some(kid) => set.find(kid),
                    // Without a key id, a set of one key is unambiguous.
                    None if set.keys.len() == 1 => set.keys.first(),
                    None => None,
                }
                .ok_or("no key of the provider's matches the token")?;
                if family(header.alg).is_none() {
                    return Err(format!("token signed with {:?}, not a public-key algorithm", header.alg));
                }
                jsonwebtoken::DecodingKey::from_jwk(jwk).map_err(|e| format!("the provider's key: {e}"))?
            }
        };
        if issuers.is_empty() {
            return Err("no issuer to check the token against".into());
        }
        let mut validation = jsonwebtoken::Validation::new(header.alg);
        // Present, not only right when present: a token without `iss` (or an ID token without
        // `aud`) is refused.
        let mut required = vec!["exp", "iss"];
        if audience.is_some() {
            required.push("aud");
        }
        validation.set_required_spec_claims(&required);
        validation.leeway = self.leeway;
        validation.validate_nbf = true;
        match audience {
            Some(a) => validation.set_audience(&[a]),
            // A bearer token's audience is the claim_validator's to check, as in APISIX.
            None => validation.validate_aud = false,
        }
        validation.set_issuer(issuers);
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key, &validation)
            .map_err(|e| format!("invalid jwt: {e}"))?;
        Ok(data.claims)
    }

    /// The checks after a token was accepted: scopes, audience, schema.
    fn authorize(&self, claims: &serde_json::Map<String, Value>) -> Result<(), Refusal> {
        if let Some(required) = &self.required_scopes {
            let granted: Vec<&str> = claims
                .get("scope")
                .and_then(Value::as_str)
                .map(|s| s.split_whitespace().collect())
                .unwrap_or_default();
            if !required.iter().all(|r| granted.contains(&r.as_str())) {
                return Err(Refusal::Forbidden(format!(
                    "required scopes {} not present",
                    required.join(", ")
                )));
            }
        }
        if let Some(a) = &self.audience {
            let value = claims.get(&a.claim).filter(|v| !v.is_null());
            if a.required && value.is_none() {
                return Err(Refusal::Forbidden("required audience claim not present".into()));
            }
            if a.match_client_id {
                let id = self.client.id.as_str();
                let matched = match value {
                    Some(Value::Array(list)) => list.iter().any(|v| v.as_str() == Some(id)),
                    Some(v) => v.as_str() == Some(id),
                    None => false,
                };
                if !matched {
                    return Err(Refusal::Forbidden("mismatched audience".into()));
                }
            }
        }
        if let Some(schema) = &self.claim_schema
            && let Err(e) = schema.validate(&Value::Object(claims.clone()))
        {
            return Err(Refusal::Unauthorized(Some(e.to_string())));
        }
        Ok(())
    }

    /// Sets the upstream's headers for an accepted token.
    fn pass_on(&self, req: &mut RequestHead, token: &str, userinfo: &serde_json::Map<String, Value>) {
        if self.set_access_token {
            if self.token_in_authorization {
                req.set_header("Authorization", format!("Bearer {token}").as_bytes());
            } else {
                req.set_header("X-Access-Token", token.as_bytes());
            }
        }
        if self.set_userinfo {
            let json = serde_json::to_vec(userinfo).unwrap_or_default();
            let b64 = base64::engine::general_purpose::STANDARD.encode(json);
            req.set_header("X-Userinfo", b64.as_bytes());
        }
    }

    async fn authenticate(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let x_access_token = req.header("x-access-token").map(<[u8]>::to_vec);
        for h in OUTPUTS {
            req.remove_header(h);
        }
        if self.bearer {
            let token = match Self::bearer_token(req, x_access_token) {
                Ok(t) => t,
                Err(()) => return self.refuse(Refusal::BadHeader),
            };
            match token {
                Some(token) => {
                    let checked = match self.check_token(&token, req).await {
                        Ok(claims) => self.authorize(&claims).map(|()| claims),
                        Err(r) => Err(r),
                    };
                    return match checked {
                        Ok(claims) => {
                            self.pass_on(req, &token, &claims);
                            Flow::Continue
                        }
                        Err(r) => {
                            if let Refusal::Unauthorized(Some(why)) = &r {
                                tracing::info!(cause = %why, "openid-connect: token refused");
                            }
                            self.refuse(r)
                        }
                    };
                }
                None if self.bearer_only => return self.refuse(Refusal::Unauthorized(None)),
                None => {}
            }
        }
        match &self.browser {
            Some(b) => self.browser(b, req, cx).await,
            // Bearer only, and no token.
            None => self.refuse(Refusal::Unauthorized(None)),
        }
    }
}

impl Plugin for OpenidConnect {
    fn phases(&self) -> Phases {
        Phases::REWRITE_ASYNC
    }

    fn rewrite_async<'a>(
        &'a self,
        req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> LocalFuture<'a, Flow> {
        Box::pin(self.authenticate(req, cx))
    }
}

#[cfg(test)]
mod tests;
