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
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest as _;
use sluice_config::Validator;
use sluice_core::http::RequestHead;

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
    pub(super) key: aes_gcm::Aes256Gcm,
    pub(super) cookie: String,
    /// `; Path=/; HttpOnly; SameSite=Lax` and the rest, after the value.
    pub(super) attributes: String,
    /// `Secure` even over plain HTTP (else only over TLS).
    pub(super) secure: bool,
    /// Seconds a session lasts.
    pub(super) absolute: u64,
    /// Seconds a session lasts without a request.
    pub(super) idling: u64,
    pub(super) redirect_uri: Option<String>,
    /// `redirect_uri`'s path, found once.
    pub(super) redirect_path: Option<String>,
    pub(super) logout_path: String,
    pub(super) post_logout_redirect_uri: Option<String>,
    pub(super) scope: String,
    pub(super) pkce: bool,
    pub(super) nonce: bool,
    pub(super) params: Vec<(String, String)>,
    pub(super) token_basic: bool,
    pub(super) set_id_token: bool,
    pub(super) set_raw_id_token: bool,
    pub(super) set_refresh_token: bool,
}

/// What the flow's settings are made from.
pub(super) struct BrowserParts<'a> {
    pub(super) session: &'a Value,
    /// What the key is bound to besides the secret (the client and its provider): a session of
    /// another route with the same secret does not open here.
    pub(super) bind: String,
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
        if !crate::util::is_token(&cookie) {
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
        let secs = |field: &str, n: Option<Num>, default: u64, v: &mut Validator| {
            crate::util::whole_field(field, n, default, (1, 31_536_000), " s", v)
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
            .chain_update(p.bind.as_bytes())
            .chain_update(b"\0")
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
            redirect_path: p.redirect_uri.as_deref().map(|r| {
                if r.starts_with('/') {
                    r.to_owned()
                } else {
                    r.parse::<http::Uri>()
                        .map_or_else(|_| "/".to_owned(), |u| u.path().to_owned())
                }
            }),
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
pub(super) struct Session {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) nonce: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) verifier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) original_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) access_token: Option<String>,
    /// The ID token as the provider signed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) id_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) refresh_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) user: Option<Value>,
    /// When the access token expires (Unix seconds).
    #[serde(default)]
    pub(super) expires: u64,
    /// When the session began, and when it was last used (Unix seconds).
    #[serde(default)]
    pub(super) created: u64,
    #[serde(default)]
    pub(super) seen: u64,
}

pub(super) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The largest cookie value written in one piece; longer sessions are split across
/// `name`, `name_2`, ... (browsers keep about 4 KiB per cookie).
const PIECE: usize = 3800;
/// Pieces a session may take.
const MAX_PIECES: usize = 4;

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
    pub(super) fn read(&self, req: &RequestHead) -> Option<Session> {
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
    /// Whether `s` fits the cookies a session may take.
    pub(super) fn fits(&self, s: &Session) -> bool {
        self.seal(s).is_some_and(|t| t.len() <= PIECE * MAX_PIECES)
    }

    pub(super) fn cookies(&self, s: Option<&Session>, https: bool) -> Vec<String> {
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
