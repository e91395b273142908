//! The authorization-code flow's requests (OpenID Connect Core 3.1), as lua-resty-openidc
//! runs them for APISIX: a browser without a session is sent to the provider's authorization
//! endpoint; the provider sends it back to `redirect_uri` with a code, exchanged at the token
//! endpoint; the ID token is verified, the user fetched, and the session kept in the cookie
//! `session.rs` seals; `logout_path` ends it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use serde_json::Value;
use sha2::Digest as _;
use sluice_core::http::RequestHead;
use sluice_core::{Ctx, Flow, Response};

use super::OpenidConnect;
use super::session::{Browser, Session, now};

/// 32 random bytes from the operating system, base64url (state, nonce, PKCE verifier).
fn random_token() -> String {
    let mut b = [0u8; 32];
    // The OS generator does not fail on Linux once booted; a failure refuses the login.
    if getrandom::fill(&mut b).is_err() {
        return String::new();
    }
    URL_SAFE_NO_PAD.encode(b)
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
        // The path as sent, its query aside (lua-resty-openidc's).
        let sent_path = target.split('?').next().unwrap_or_default();
        if sent_path == b.logout_path {
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
    fn callback_path<'p>(&self, b: &'p Browser, path: &'p str) -> std::borrow::Cow<'p, str> {
        match &b.redirect_path {
            Some(r) => r.as_str().into(),
            None if path.ends_with("/.apisix/redirect") => path.into(),
            None => format!("{}/.apisix/redirect", path.trim_end_matches('/')).into(),
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
        // Back to a path of this gateway only: `//evil.example/x` is a path to the client but a
        // host to a browser following `Location`.
        let original = format!("/{}", original.trim_start_matches(['/', '\\']));
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
        // The userinfo must be about the ID token's subject (OpenID Connect Core 5.3.2).
        if let Some(u) = &user
            && u.get("sub") != claims.get("sub")
        {
            return fail("the userinfo's sub is not the ID token's");
        }
        let now = now();
        let expires = tokens
            .get("expires_in")
            .and_then(Value::as_u64)
            .map_or(0, |e| now.saturating_add(e));
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
        let mut signed = signed;
        if !b.fits(&signed) {
            // Too large for a browser's cookies: what can be fetched again goes first.
            signed.user = None;
            signed.refresh_token = None;
            if !b.fits(&signed) {
                return fail("the provider's tokens are too large for the session cookie");
            }
            tracing::warn!("openid-connect: the session leaves out the userinfo and refresh token, too large for its cookies");
        }
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
        if let Some(schema) = &self.claim_schema {
            // APISIX's shape for the session flow: {user, access_token, id_token}.
            let data = serde_json::json!({
                "user": s.user,
                "access_token": s.access_token,
                "id_token": s.id_token.as_deref().and_then(payload),
            });
            if let Err(e) = schema.validate(&data) {
                return self.refuse(super::Refusal::Unauthorized(Some(e.to_string())));
            }
        }
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

/// A JWT's payload, read without checking its signature (the provider gave the token to the
/// gateway itself).
fn payload(token: &str) -> Option<serde_json::Map<String, Value>> {
    jsonwebtoken::dangerous::insecure_decode_claims::<serde_json::Map<String, Value>>(token).ok()
}

