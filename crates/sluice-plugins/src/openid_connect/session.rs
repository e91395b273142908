//! The authorization-code flow for browsers (OpenID Connect Core 3.1), as lua-resty-openidc
//! runs it for APISIX: a browser without a session is sent to the provider's authorization
//! endpoint (with `state`, and `nonce` and PKCE when asked); the provider sends it back to
//! `redirect_uri` with a code, which the gateway exchanges at the token endpoint; the ID token
//! is verified (signature by the provider's keys, issuer, audience, expiry, nonce), the user
//! fetched from the userinfo endpoint, and all of it kept in a session cookie encrypted and
//! authenticated with AES-256-GCM under a key derived from `session.secret`, so the browser can
//! neither read nor change it. `logout_path` ends the session (and, when the provider has one,
//! sends the browser to its end-session endpoint).

use std::time::{SystemTime, UNIX_EPOCH};

use aes_gcm::aead::{Aead, KeyInit};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest as _;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::{Ctx, Flow, Response};

use super::OpenidConnect;
use crate::util::Num;

/// `session` as APISIX (lua-resty-session 4) names its fields.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionConfig {
    secret: String,
    #[serde(default)]
    cookie_name: Option<String>,
    #[serde(default)]
    cookie_path: Option<String>,
    #[serde(default)]
    cookie_domain: Option<String>,
    #[serde(default)]
    cookie_secure: Option<bool>,
    #[serde(default)]
    cookie_http_only: Option<bool>,
    #[serde(default)]
    cookie_same_site: Option<String>,
    #[serde(default)]
    idling_timeout: Option<Num>,
    #[serde(default)]
    rolling_timeout: Option<Num>,
    #[serde(default)]
    absolute_timeout: Option<Num>,
    #[serde(default)]
    cookie: Option<OldCookie>,
    #[serde(default)]
    storage: Option<String>,
    #[serde(default)]
    redis: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OldCookie {
    #[serde(default)]
    lifetime: Option<Num>,
}

/// The browser flow's settings.
pub(super) struct Browser {
    key: aes_gcm::Aes256Gcm,
    cookie: String,
    /// `; Path=/; HttpOnly; SameSite=Lax` and the rest, after the value.
    attributes: String,
    /// `Secure` even over plain HTTP (else only over TLS).
    secure: bool,
    /// Seconds a session lasts.
    absolute: u64,
    /// Seconds a session lasts without a request.
    idling: u64,
    pub(super) redirect_uri: Option<String>,
    pub(super) logout_path: String,
    post_logout_redirect_uri: Option<String>,
    scope: String,
    pkce: bool,
    nonce: bool,
    params: Vec<(String, String)>,
    token_basic: bool,
    pub(super) set_id_token: bool,
    pub(super) set_raw_id_token: bool,
    pub(super) set_refresh_token: bool,
}

/// What the flow's settings are made from.
pub(super) struct BrowserParts<'a> {
    pub(super) session: &'a Value,
    pub(super) redirect_uri: Option<String>,
    pub(super) logout_path: Option<String>,
    pub(super) post_logout_redirect_uri: Option<String>,
    pub(super) scope: String,
    pub(super) pkce: bool,
    pub(super) nonce: bool,
    pub(super) params: Option<serde_json::Map<String, Value>>,
    pub(super) token_basic: bool,
    pub(super) set_id_token: bool,
    pub(super) set_raw_id_token: bool,
    pub(super) set_refresh_token: bool,
}

impl Browser {
    /// Checks `session` and the flow's fields; errors at their paths.
    pub(super) fn build(p: BrowserParts<'_>, v: &mut Validator) -> Option<Browser> {
        let s: SessionConfig = v.field("session", |v| {
            serde_json::from_value(p.session.clone())
                .map_err(|e| v.error(e.to_string()))
                .ok()
        })?;
        let mut ok = true;
        if s.secret.chars().count() < 16 {
            v.error_at("session.secret", "must be 16 characters or more");
            ok = false;
        }
        if s.storage.as_deref().is_some_and(|st| st != "cookie") || s.redis.is_some() {
            v.error_at(
                "session.storage",
                "only \"cookie\" is supported by Sluice (the session travels encrypted in the browser's cookie)",
            );
            ok = false;
        }
        let same_site = match s.cookie_same_site.as_deref() {
            None | Some("Lax") => Some("Lax"),
            Some("Strict") => Some("Strict"),
            Some("None") => Some("None"),
            Some("Default") => None,
            Some(other) => {
                v.error_at(
                    "session.cookie_same_site",
                    format!("unknown value \"{other}\", expected Strict, Lax, None or Default"),
                );
                ok = false;
                None
            }
        };
        let cookie = s.cookie_name.unwrap_or_else(|| "session".into());
        let token = |t: &str| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        };
        if !token(&cookie) {
            v.error_at("session.cookie_name", format!("\"{cookie}\" is not a cookie name"));
            ok = false;
        }
        let attr_ok = |a: &str| a.bytes().all(|b| (0x21..0x7f).contains(&b) && b != b';');
        let path = s.cookie_path.unwrap_or_else(|| "/".into());
        if !attr_ok(&path) {
            v.error_at("session.cookie_path", "must be printable, without spaces or `;`");
            ok = false;
        }
        let mut attributes = format!("; Path={path}");
        if let Some(d) = &s.cookie_domain {
            if !attr_ok(d) || d.is_empty() {
                v.error_at("session.cookie_domain", "must be a host name");
                ok = false;
            }
            attributes.push_str(&format!("; Domain={d}"));
        }
        if s.cookie_http_only.unwrap_or(true) {
            attributes.push_str("; HttpOnly");
        }
        if let Some(ss) = same_site {
            attributes.push_str(&format!("; SameSite={ss}"));
        }
        let secs = |field: &str, n: Option<Num>, default: u64, v: &mut Validator| match n {
            None => Some(default),
            Some(n) => v.field(field, |v| crate::util::whole(n, 1, 31_536_000, " s", v)),
        };
        let lifetime = s.cookie.and_then(|c| c.lifetime);
        let absolute = secs(
            "session.absolute_timeout",
            s.absolute_timeout.or(lifetime),
            86_400,
            v,
        );
        let idling = secs("session.idling_timeout", s.idling_timeout, 900, v);
        secs("session.rolling_timeout", s.rolling_timeout, 3600, v)?;
        let logout_path = p.logout_path.unwrap_or_else(|| "/logout".into());
        if !logout_path.starts_with('/') {
            v.error_at("logout_path", "must be a path starting with /");
            ok = false;
        }
        if let Some(r) = &p.redirect_uri
            && !(r.starts_with('/') || r.starts_with("http://") || r.starts_with("https://"))
        {
            v.error_at("redirect_uri", "must be a path or an http(s) URL");
            ok = false;
        }
        let params = p
            .params
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| {
                let text = match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                (k, text)
            })
            .collect();
        let (absolute, idling) = (absolute?, idling?);
        // The key: SHA-256 of the secret, under a label of Sluice's (the secret is the
        // operator's; the cookie format is ours).
        let digest = sha2::Sha256::new()
            .chain_update(b"sluice openid-connect session v1\0")
            .chain_update(s.secret.as_bytes())
            .finalize();
        let key = aes_gcm::Aes256Gcm::new_from_slice(&digest).ok()?;
        ok.then_some(Browser {
            key,
            cookie,
            attributes,
            secure: s.cookie_secure.unwrap_or(false),
            absolute,
            idling,
            redirect_uri: p.redirect_uri,
            logout_path,
            post_logout_redirect_uri: p.post_logout_redirect_uri,
            scope: p.scope,
            pkce: p.pkce,
            nonce: p.nonce,
            params,
            token_basic: p.token_basic,
            set_id_token: p.set_id_token,
            set_raw_id_token: p.set_raw_id_token,
            set_refresh_token: p.set_refresh_token,
        })
    }
}

/// What the cookie carries: an authorization under way, or a signed-in user.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Session {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nonce: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    verifier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    original_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    access_token: Option<String>,
    /// The ID token as the provider signed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refresh_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user: Option<Value>,
    /// When the access token expires (Unix seconds).
    #[serde(default)]
    expires: u64,
    /// When the session began, and when it was last used (Unix seconds).
    #[serde(default)]
    created: u64,
    #[serde(default)]
    seen: u64,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// 32 random bytes from the operating system, base64url (state, nonce, PKCE verifier).
fn random_token() -> String {
    let mut b = [0u8; 32];
    // The OS generator does not fail on Linux once booted; a failure refuses the login.
    if getrandom::fill(&mut b).is_err() {
        return String::new();
    }
    URL_SAFE_NO_PAD.encode(b)
}

/// The largest cookie value written in one piece; longer sessions are split across
/// `name`, `name_2`, ... (browsers keep about 4 KiB per cookie).
const PIECE: usize = 3800;
/// Pieces a session may take.
const MAX_PIECES: usize = 8;

impl Browser {
    fn seal(&self, s: &Session) -> Option<String> {
        let plain = serde_json::to_vec(s).ok()?;
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce).ok()?;
        let sealed = self
            .key
            .encrypt(&nonce.into(), plain.as_slice())
            .ok()?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Some(URL_SAFE_NO_PAD.encode(out))
    }

    fn open(&self, text: &str) -> Option<Session> {
        let raw = URL_SAFE_NO_PAD.decode(text).ok()?;
        if raw.len() < 12 {
            return None;
        }
        let (nonce, sealed) = raw.split_at(12);
        let nonce: [u8; 12] = nonce.try_into().ok()?;
        let plain = self.key.decrypt(&nonce.into(), sealed).ok()?;
        serde_json::from_slice(&plain).ok()
    }

    /// The session in the request's cookies, if one opens with this route's key.
    fn read(&self, req: &RequestHead) -> Option<Session> {
        let mut text = String::from_utf8(req.cookie(&self.cookie)?.to_vec()).ok()?;
        for i in 2..=MAX_PIECES {
            match req.cookie(&format!("{}_{i}", self.cookie)) {
                Some(p) => text.push_str(std::str::from_utf8(p).ok()?),
                None => break,
            }
        }
        self.open(&text)
    }

    /// `Set-Cookie` values that store `s` (None: remove the session).
    fn cookies(&self, s: Option<&Session>, https: bool) -> Vec<String> {
        let secure = if self.secure || https { "; Secure" } else { "" };
        let sealed = s.and_then(|s| self.seal(s)).unwrap_or_default();
        let pieces: Vec<&str> = if sealed.is_empty() {
            Vec::new()
        } else {
            sealed
                .as_bytes()
                .chunks(PIECE)
                .map(|c| std::str::from_utf8(c).unwrap_or_default())
                .collect()
        };
        let mut out = Vec::new();
        for i in 0..MAX_PIECES {
            let name = match i {
                0 => self.cookie.clone(),
                n => format!("{}_{}", self.cookie, n + 1),
            };
            match pieces.get(i) {
                Some(p) => out.push(format!("{name}={p}{}{secure}", self.attributes)),
                // Pieces a longer session left are removed, so they cannot be joined on.
                None if i < pieces.len() + 2 || pieces.is_empty() && i == 0 => out.push(format!(
                    "{name}=; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Max-Age=0{}{secure}",
                    self.attributes
                )),
                None => {}
            }
        }
        out
    }
}

/// A response with the session's cookies set.
fn with_cookies(mut r: Response, cookies: Vec<String>) -> Response {
    for c in cookies {
        r = r.header("Set-Cookie", c.as_bytes());
    }
    r
}

fn redirect(location: &str, cookies: Vec<String>) -> Flow {
    Flow::Respond(with_cookies(
        Response::new(302).header("Location", location.as_bytes()),
        cookies,
    ))
}

impl OpenidConnect {
    /// A browser request that brought no bearer token: its session, the callback, logout, or
    /// the way to the provider.
    pub(super) async fn browser(&self, b: &Browser, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let https = cx.is_https();
        let session = b.read(req);
        let target = String::from_utf8_lossy(req.original_target()).into_owned();
        if target == b.logout_path {
            return self.logout(b, session, https).await;
        }
        let path = String::from_utf8_lossy(req.path()).into_owned();
        let callback = self.callback_path(b, &path);
        if path == callback {
            return self.callback(b, req, session, https).await;
        }
        let now = now();
        if let Some(s) = session.filter(|s| {
            s.access_token.is_some()
                && s.created + b.absolute > now
                && s.seen + b.idling > now
                && (s.expires == 0 || s.expires > now)
        }) {
            return self.signed_in(b, req, cx, s, https);
        }
        match self.unauth {
            super::Unauth::Pass => return Flow::Continue,
            super::Unauth::Deny => return self.refuse(super::Refusal::Unauthorized(None)),
            super::Unauth::Auth => {}
        }
        // A script's request cannot follow the provider's login page (lua-resty-openidc).
        if req
            .header("x-requested-with")
            .is_some_and(|h| h.eq_ignore_ascii_case(b"XMLHttpRequest"))
        {
            return self.refuse(super::Refusal::Unauthorized(None));
        }
        self.start(b, req, target, https).await
    }

    /// The path the provider sends the browser back to: `redirect_uri`'s, or the request's
    /// path with `/.apisix/redirect` (APISIX's default).
    fn callback_path(&self, b: &Browser, path: &str) -> String {
        match &b.redirect_uri {
            Some(r) if r.starts_with('/') => r.clone(),
            Some(r) => r
                .parse::<http::Uri>()
                .ok()
                .map_or_else(|| "/".into(), |u| u.path().to_owned()),
            None if path.ends_with("/.apisix/redirect") => path.to_owned(),
            None => format!("{}/.apisix/redirect", path.trim_end_matches('/')),
        }
    }

    /// `redirect_uri` as the provider must see it: absolute.
    fn callback_url(&self, b: &Browser, req: &RequestHead, path: &str, https: bool) -> String {
        match &b.redirect_uri {
            Some(r) if !r.starts_with('/') => r.clone(),
            _ => {
                let host = String::from_utf8_lossy(req.host()).into_owned();
                let scheme = if https { "https" } else { "http" };
                format!("{scheme}://{host}{}", self.callback_path(b, path))
            }
        }
    }

    /// Sends the browser to the provider's authorization endpoint.
    async fn start(&self, b: &Browser, req: &RequestHead, original: String, https: bool) -> Flow {
        let d = match self.reach.discovery().await {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "openid-connect: the discovery document could not be read");
                return Flow::Respond(sluice_core::http::write::page(500));
            }
        };
        let Some(endpoint) = d.authorization_endpoint.clone() else {
            tracing::error!("openid-connect: the provider has no authorization_endpoint");
            return Flow::Respond(sluice_core::http::write::page(500));
        };
        let path = String::from_utf8_lossy(req.path()).into_owned();
        let state = random_token();
        if state.is_empty() {
            return Flow::Respond(sluice_core::http::write::page(500));
        }
        let mut s = Session {
            state: Some(state.clone()),
            original_url: Some(original),
            created: now(),
            seen: now(),
            ..Session::default()
        };
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("response_type", "code")
            .append_pair("client_id", &self.client.id)
            .append_pair("redirect_uri", &self.callback_url(b, req, &path, https))
            .append_pair("scope", &b.scope)
            .append_pair("state", &state);
        if b.nonce {
            let n = random_token();
            q.append_pair("nonce", &n);
            s.nonce = Some(n);
        }
        if b.pkce {
            let verifier = random_token();
            let challenge = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
            q.append_pair("code_challenge", &challenge)
                .append_pair("code_challenge_method", "S256");
            s.verifier = Some(verifier);
        }
        for (k, v) in &b.params {
            q.append_pair(k, v);
        }
        let sep = if endpoint.contains('?') { '&' } else { '?' };
        let location = format!("{endpoint}{sep}{}", q.finish());
        redirect(&location, b.cookies(Some(&s), https))
    }

    /// The provider sent the browser back: the code is exchanged, the ID token verified, the
    /// user fetched, the session kept; the browser goes back to where it started.
    async fn callback(&self, b: &Browser, req: &RequestHead, session: Option<Session>, https: bool) -> Flow {
        let args = crate::util::args_object(req.query().unwrap_or_default());
        let arg = |n: &str| args.get(n).and_then(Value::as_str).map(str::to_owned);
        let fail = |why: &str| {
            tracing::error!(cause = why, "openid-connect: the authorization callback failed");
            Flow::Respond(with_cookies(
                sluice_core::http::write::page(500),
                b.cookies(None, https),
            ))
        };
        let Some(mut s) = session.filter(|s| s.state.is_some()) else {
            return fail("no authorization under way in this browser's session");
        };
        if arg("state") != s.state {
            return fail("state mismatch");
        }
        if let Some(e) = arg("error") {
            return fail(&format!("the provider answered {e}"));
        }
        let Some(code) = arg("code") else {
            return fail("no code");
        };
        let path = String::from_utf8_lossy(req.path()).into_owned();
        let tokens = match self.exchange(b, req, &code, &path, s.verifier.as_deref(), https).await {
            Ok(t) => t,
            Err(e) => return fail(&e),
        };
        let id_token = tokens.get("id_token").and_then(Value::as_str).map(str::to_owned);
        let Some(raw_id) = id_token else {
            return fail("the token endpoint gave no id_token");
        };
        let issuer = match self.reach.discovery().await {
            Ok(d) => d.issuer.clone().into_iter().collect::<Vec<_>>(),
            Err(e) => return fail(&e),
        };
        let claims = match self.verify_jwt(&raw_id, &issuer, Some(&self.client.id)).await {
            Ok(c) => c,
            Err(e) => return fail(&format!("the ID token: {e}")),
        };
        if s.nonce.is_some() && claims.get("nonce").and_then(Value::as_str) != s.nonce.as_deref() {
            return fail("the ID token's nonce is not this session's");
        }
        let access = tokens.get("access_token").and_then(Value::as_str).map(str::to_owned);
        let user = match &access {
            Some(a) => self.userinfo(a).await,
            None => None,
        };
        let now = now();
        let expires = tokens
            .get("expires_in")
            .and_then(Value::as_u64)
            .map_or(0, |e| now + e);
        let original = s.original_url.take().unwrap_or_else(|| "/".into());
        let signed = Session {
            access_token: access,
            id_token: Some(raw_id),
            refresh_token: tokens
                .get("refresh_token")
                .and_then(Value::as_str)
                .map(str::to_owned),
            user,
            expires,
            created: now,
            seen: now,
            ..Session::default()
        };
        redirect(&original, b.cookies(Some(&signed), https))
    }

    /// The code exchanged at the token endpoint (RFC 6749 4.1.3).
    async fn exchange(
        &self,
        b: &Browser,
        req: &RequestHead,
        code: &str,
        path: &str,
        verifier: Option<&str>,
        https: bool,
    ) -> Result<serde_json::Map<String, Value>, String> {
        let d = self.reach.discovery().await?;
        let endpoint = d
            .token_endpoint
            .clone()
            .ok_or("the provider has no token_endpoint")?;
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", &self.callback_url(b, req, path, https));
        if let Some(v) = verifier {
            form.append_pair("code_verifier", v);
        }
        let builder = http::Request::post("/")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json");
        let builder = if self.client.secret.is_empty() {
            form.append_pair("client_id", &self.client.id);
            builder
        } else {
            self.client.authenticate(builder, &mut form, b.token_basic)
        };
        match self.reach.send(&endpoint, builder, Bytes::from(form.finish())).await? {
            Value::Object(o) => Ok(o),
            _ => Err("the token endpoint's answer is not a JSON object".into()),
        }
    }

    /// The user, from the userinfo endpoint (none when the provider has none, or it fails).
    async fn userinfo(&self, access_token: &str) -> Option<Value> {
        let d = self.reach.discovery().await.ok()?;
        let endpoint = d.userinfo_endpoint.clone()?;
        let builder = http::Request::get("/")
            .header("authorization", format!("Bearer {access_token}"))
            .header("accept", "application/json");
        match self.reach.send(&endpoint, builder, Bytes::new()).await {
            Ok(v @ Value::Object(_)) => Some(v),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "openid-connect: the userinfo endpoint failed");
                None
            }
        }
    }

    /// A signed-in browser's request goes on with the session's tokens and user.
    fn signed_in(&self, b: &Browser, req: &mut RequestHead, cx: &mut Ctx<'_>, mut s: Session, https: bool) -> Flow {
        if let Some(required) = &self.required_scopes {
            // The granted scopes: the access token's `scope` claim (read, not verified: the
            // provider gave it to the gateway itself), else the ID token's.
            let scope = [s.access_token.as_deref(), s.id_token.as_deref()]
                .into_iter()
                .flatten()
                .find_map(|t| payload(t)?.get("scope")?.as_str().map(str::to_owned));
            let Some(scope) = scope else {
                return self.refuse(super::Refusal::Forbidden("required scopes not present".into()));
            };
            let granted: Vec<&str> = scope.split_whitespace().collect();
            if !required.iter().all(|r| granted.contains(&r.as_str())) {
                return self.refuse(super::Refusal::Forbidden(format!(
                    "required scopes {} not present",
                    required.join(", ")
                )));
            }
        }
        if let Some(a) = &s.access_token
            && self.set_access_token
        {
            if self.token_in_authorization {
                req.set_header("Authorization", format!("Bearer {a}").as_bytes());
            } else {
                req.set_header("X-Access-Token", a.as_bytes());
            }
        }
        let b64 = |v: &Value| {
            base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(v).unwrap_or_default())
        };
        if let Some(id) = &s.id_token {
            if b.set_id_token
                && let Some(claims) = payload(id)
            {
                req.set_header("X-ID-Token", b64(&Value::Object(claims)).as_bytes());
            }
            if b.set_raw_id_token {
                req.set_header("X-Raw-ID-Token", id.as_bytes());
            }
        }
        if let Some(u) = &s.user
            && self.set_userinfo
        {
            req.set_header("X-Userinfo", b64(u).as_bytes());
        }
        if let Some(r) = &s.refresh_token
            && b.set_refresh_token
        {
            req.set_header("X-Refresh-Token", r.as_bytes());
        }
        // The idle clock restarts, at most once a minute (a cookie per request otherwise).
        let now = now();
        if now >= s.seen + 60 {
            s.seen = now;
            for c in b.cookies(Some(&s), https) {
                cx.response.add_header("Set-Cookie", c.as_bytes());
            }
        }
        Flow::Continue
    }

    /// Ends the session; the browser goes to the provider's end-session endpoint, or to
    /// `post_logout_redirect_uri`, or gets a page saying it is signed out.
    async fn logout(&self, b: &Browser, session: Option<Session>, https: bool) -> Flow {
        let cookies = b.cookies(None, https);
        let d = match self.reach.discovery().await {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "openid-connect: the discovery document could not be read");
                return Flow::Respond(with_cookies(sluice_core::http::write::page(503), cookies));
            }
        };
        if let Some(end) = d.end_session_endpoint.clone() {
            let mut q = form_urlencoded::Serializer::new(String::new());
            if let Some(id) = session.as_ref().and_then(|s| s.id_token.as_deref()) {
                q.append_pair("id_token_hint", id);
            }
            if let Some(p) = &b.post_logout_redirect_uri {
                q.append_pair("post_logout_redirect_uri", p);
            }
            q.append_pair("client_id", &self.client.id);
            let sep = if end.contains('?') { '&' } else { '?' };
            return redirect(&format!("{end}{sep}{}", q.finish()), cookies);
        }
        if let Some(p) = &b.post_logout_redirect_uri {
            return redirect(p, cookies);
        }
        Flow::Respond(with_cookies(
            Response::new(200)
                .header("Content-Type", b"text/html")
                .body("<html><body><h2>Logged Out</h2></body></html>"),
            cookies,
        ))
    }
}

/// A JWT's payload, read without checking its signature.
fn payload(token: &str) -> Option<serde_json::Map<String, Value>> {
    let part = token.split('.').nth(1)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
}

#[cfg(test)]
pub(super) fn seal_for_test(b: &Browser, user: &str) -> String {
    let s = Session {
        access_token: Some("t".into()),
        user: Some(serde_json::json!({ "sub": user })),
        created: now(),
        seen: now(),
        ..Session::default()
    };
    b.seal(&s).unwrap_or_default()
}

#[cfg(test)]
pub(super) fn opens(b: &Browser, text: &str) -> bool {
    b.open(text).is_some()
}
