//! `jwt-auth`: identifies a consumer by a JSON Web Token (RFC 7519) signed with the consumer's
//! secret (HS256, HS384, HS512) or private key (RS256/384/512, PS256/384/512, ES256/384/512,
//! EdDSA): APISIX's thirteen algorithms.
//!
//! Route: `{header: authorization, query: jwt, cookie: jwt, hide_credentials: false,
//! key_claim_name: key}`: the token is looked for in that order (`Bearer ` is optional in the
//! header). Consumer: `{key, secret, public_key, algorithm: HS256, base64_secret: false,
//! lifetime_grace_period: 0}`. The token's `key` claim names the consumer; its signature is
//! then checked with that consumer's key and algorithm only (a token whose `alg` differs is
//! refused), and `exp` and `nbf` are enforced
//! (with `lifetime_grace_period` seconds of leeway, at most 31,536,000: one year). `aud` is not
//! checked. APISIX's consumer
//! fields for signing tokens (`private_key`, `exp`) are accepted and unused: Sluice only
//! verifies.

use std::any::Any;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey};
use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Credential, Phases, PluginFactory, index_as, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::{Num, check_header_name, credential_index, whole};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct Config {
    header: String,
    query: String,
    cookie: String,
    hide_credentials: bool,
    key_claim_name: String,
    /// A consumer whose identity requests without a valid token take (APISIX 3).
    anonymous_consumer: Option<String>,
    /// APISIX's `realm`, in the `WWW-Authenticate` of a 401.
    realm: Option<String>,
    /// APISIX's `claims_to_verify`: absent or empty, `exp` and `nbf` are checked when a
    /// token has them; a list makes its claims required and checked, and the others unchecked.
    claims_to_verify: Option<Vec<String>>,
    /// APISIX's `store_in_ctx`: the verified payload is kept for later phases and the access
    /// log, which read its claims as `jwt_claim_<name>` variables.
    store_in_ctx: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            header: "authorization".into(),
            query: "jwt".into(),
            cookie: "jwt".into(),
            hide_credentials: false,
            key_claim_name: "key".into(),
            anonymous_consumer: None,
            realm: None,
            claims_to_verify: None,
            store_in_ctx: false,
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Cred {
    key: String,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    public_key: Option<String>,
    #[serde(default)]
    private_key: Option<String>,
    #[serde(default = "hs256")]
    algorithm: String,
    #[serde(default)]
    exp: Option<u64>,
    #[serde(default)]
    base64_secret: bool,
    #[serde(default = "no_grace")]
    lifetime_grace_period: Num,
}

fn hs256() -> String {
    "HS256".into()
}

fn no_grace() -> Num {
    Num::Whole(0)
}

/// Longest `lifetime_grace_period`: one year, as every duration in Sluice. The leeway is added
/// to and taken from the current time in seconds: a larger one would overflow.
const MAX_GRACE: u64 = 31_536_000;

/// How a consumer's tokens are signed: its algorithm's name (the token's `alg` must be it, as
/// APISIX) and the key that checks the signature.
enum Key {
    /// What jsonwebtoken verifies.
    Jwt(Algorithm, DecodingKey),
    /// ES512 (ECDSA on P-521 with SHA-512), which jsonwebtoken lacks: RustCrypto's `p521`.
    Es512(Box<p521::ecdsa::VerifyingKey>),
}

/// A consumer's verification settings.
struct Verifier {
    alg: &'static str,
    key: Key,
    /// `lifetime_grace_period`, seconds.
    leeway: u64,
    consumer: u32,
}

impl Verifier {
    /// Whether `signature` (base64url) signs `message` (`header.payload`).
    fn signs(&self, message: &str, signature: &str) -> bool {
        match &self.key {
            Key::Jwt(alg, key) => {
                jsonwebtoken::crypto::verify(signature, message.as_bytes(), key, *alg)
                    .unwrap_or(false)
            }
            Key::Es512(key) => {
                use p521::ecdsa::signature::Verifier as _;
                let Ok(raw) = URL_SAFE_NO_PAD.decode(signature) else {
                    return false;
                };
                p521::ecdsa::Signature::from_slice(&raw)
                    .is_ok_and(|sig| key.verify(message.as_bytes(), &sig).is_ok())
            }
        }
    }
}

/// The time claims a route checks (APISIX's `claims_to_verify`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Claims {
    /// Not given (or empty): `exp` and `nbf` checked when present.
    Present,
    /// Given: these required and checked, the others not.
    Listed { exp: bool, nbf: bool },
}

impl Claims {
    /// Whether the payload's time claims hold at `now` (seconds since the epoch), with
    /// `leeway` seconds either way (RFC 7519 4.1.4: valid before `exp`; 4.1.5: from `nbf`). A
    /// checked claim that is not a number fails.
    fn hold(self, payload: &Value, now: u64, leeway: u64) -> bool {
        let (exp, nbf, required) = match self {
            Claims::Present => (true, true, false),
            Claims::Listed { exp, nbf } => (exp, nbf, true),
        };
        let now = now as f64;
        let leeway = leeway as f64;
        let check = |name: &str, on: bool, ok: &dyn Fn(f64) -> bool| {
            !on || match payload.get(name) {
                None => !required,
                Some(v) => v.as_f64().is_some_and(ok),
            }
        };
        check("exp", exp, &|t| now < t + leeway) && check("nbf", nbf, &|t| now + leeway >= t)
    }
}

#[derive(Default)]
struct Keys(FxHashMap<String, Verifier>);

/// The algorithms APISIX's consumers may name; `HS*` take `secret`, the others `public_key`.
const ALGORITHMS: [(&str, Option<Algorithm>); 13] = [
    ("HS256", Some(Algorithm::HS256)),
    ("HS384", Some(Algorithm::HS384)),
    ("HS512", Some(Algorithm::HS512)),
    ("RS256", Some(Algorithm::RS256)),
    ("RS384", Some(Algorithm::RS384)),
    ("RS512", Some(Algorithm::RS512)),
    ("ES256", Some(Algorithm::ES256)),
    ("ES384", Some(Algorithm::ES384)),
    ("ES512", None),
    ("PS256", Some(Algorithm::PS256)),
    ("PS384", Some(Algorithm::PS384)),
    ("PS512", Some(Algorithm::PS512)),
    ("EdDSA", Some(Algorithm::EdDSA)),
];

/// Builds the verifier of one consumer's credentials; errors go to `v` (pointing at them).
fn verifier(c: &Cred, consumer: u32, v: &mut Validator) -> Option<Verifier> {
    let _ = (c.exp, &c.private_key);
    let leeway = v.field("lifetime_grace_period", |v| {
        whole(
            c.lifetime_grace_period,
            0,
            MAX_GRACE,
            " seconds (one year)",
            v,
        )
    });
    if c.key.is_empty() {
        v.error_at("key", "must not be empty");
        return None;
    }
    let Some(&(name, alg)) = ALGORITHMS.iter().find(|(n, _)| *n == c.algorithm) else {
        let names: Vec<&str> = ALGORITHMS.iter().map(|(n, _)| *n).collect();
        v.error_at(
            "algorithm",
            format!(
                "unsupported algorithm \"{}\", expected one of {}",
                c.algorithm,
                names.join(", ")
            ),
        );
        return None;
    };
    let key = match alg {
        Some(alg @ (Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)) => {
            let Some(secret) = c.secret.as_deref().filter(|s| !s.is_empty()) else {
                v.error_at("secret", format!("is required with algorithm {name}"));
                return None;
            };
            let key = if c.base64_secret {
                match DecodingKey::from_base64_secret(secret) {
                    Ok(k) => k,
                    Err(e) => {
                        v.error_at("secret", format!("invalid base64: {e}"));
                        return None;
                    }
                }
            } else {
                DecodingKey::from_secret(secret.as_bytes())
            };
            Key::Jwt(alg, key)
        }
        alg => {
            let Some(pem) = c.public_key.as_deref() else {
                v.error_at("public_key", format!("is required with algorithm {name}"));
                return None;
            };
            match public_key(alg, pem) {
                Ok(k) => k,
                Err(e) => {
                    v.error_at("public_key", format!("invalid PEM public key for {name}: {e}"));
                    return None;
                }
            }
        }
    };
    Some(Verifier {
        alg: name,
        key,
        leeway: leeway?,
        consumer,
    })
}

/// The public key of an asymmetric algorithm (None: ES512), checked for the algorithm's curve
/// or type now rather than failing every token later.
fn public_key(alg: Option<Algorithm>, pem: &str) -> Result<Key, String> {
    use p256::pkcs8::DecodePublicKey as _;
    let Some(alg) = alg else {
        let key = p521::PublicKey::from_public_key_pem(pem)
            .map_err(|e| format!("not a P-521 key ({e})"))?;
        return p521::ecdsa::VerifyingKey::from_affine(*key.as_affine())
            .map(|k| Key::Es512(Box::new(k)))
            .map_err(|e| format!("not a P-521 key ({e})"));
    };
    let key = match alg {
        Algorithm::ES256 => {
            p256::PublicKey::from_public_key_pem(pem).map_err(|e| format!("not a P-256 key ({e})"))?;
            DecodingKey::from_ec_pem(pem.as_bytes())
        }
        Algorithm::ES384 => {
            p384::PublicKey::from_public_key_pem(pem).map_err(|e| format!("not a P-384 key ({e})"))?;
            DecodingKey::from_ec_pem(pem.as_bytes())
        }
        Algorithm::EdDSA => {
            // Parsed whole here: jsonwebtoken would slice a short key per token and panic.
            ed25519_dalek::VerifyingKey::from_public_key_pem(pem)
                .map_err(|e| format!("not an Ed25519 key ({e})"))?;
            DecodingKey::from_ed_pem(pem.as_bytes())
        }
        _ => {
            // SPKI or PKCS#1; at most 4,096 bits (larger keys would fail every token).
            use rsa::pkcs1::DecodeRsaPublicKey as _;
            rsa::RsaPublicKey::from_public_key_pem(pem)
                .or_else(|_| rsa::RsaPublicKey::from_pkcs1_pem(pem))
                .map_err(|e| format!("not an RSA key of at most 4096 bits ({e})"))?;
            DecodingKey::from_rsa_pem(pem.as_bytes())
        }
    };
    key.map(|k| Key::Jwt(alg, k)).map_err(|e| e.to_string())
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("jwt-auth", 2510, Config, credentials: Cred);

    /// APISIX's `encrypt_fields`.
    fn encrypted_fields(&self) -> &'static [&'static str] {
        &["secret"]
    }

    fn check_credential(&self, config: &Value, v: &mut Validator) {
        if let Some(c) = parse_config::<Cred>(config, v) {
            verifier(&c, 0, v);
        }
    }

    fn consumer_index(
        &self,
        creds: &[Credential<'_>],
        v: &mut Validator,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let keys = credential_index(creds, "jwt-auth", "key", v, |c: Cred, consumer| {
            let ver = verifier(&c, consumer, &mut Validator::new())?;
            Some((c.key, ver))
        });
        Some(Arc::new(Keys(keys)))
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let ok = v.field("header", |v| check_header_name(&c.header, v));
        let keys = index_as::<Keys>((cx.indexes)("jwt-auth")).unwrap_or_default();
        let challenge = crate::util::realm_challenge("Bearer", c.realm.as_deref(), "jwt", v)?;
        let anonymous = crate::util::anonymous_consumer(c.anonymous_consumer.as_deref(), cx, v)?;
        let mut claims_ok = true;
        let list = c.claims_to_verify.as_deref().unwrap_or_default();
        v.field("claims_to_verify", |v| {
            for (i, claim) in list.iter().enumerate() {
                if claim != "exp" && claim != "nbf" {
                    v.index(i, |v| {
                        v.error(format!("unknown claim \"{claim}\", expected exp or nbf"))
                    });
                    claims_ok = false;
                } else if list[..i].contains(claim) {
                    v.index(i, |v| v.error(format!("\"{claim}\" is listed twice")));
                    claims_ok = false;
                }
            }
        });
        let claims = if list.is_empty() {
            Claims::Present
        } else {
            Claims::Listed {
                exp: list.iter().any(|x| x == "exp"),
                nbf: list.iter().any(|x| x == "nbf"),
            }
        };
        (ok && claims_ok).then(|| {
            Arc::new(JwtAuth {
                claims,
                cfg: c,
                keys,
                anonymous,
                challenge,
            }) as Arc<dyn Plugin>
        })
    }
}

struct JwtAuth {
    cfg: Config,
    /// The time claims checked.
    claims: Claims,
    keys: Arc<Keys>,
    /// `anonymous_consumer`, when compiled.
    anonymous: Option<u32>,
    /// The `WWW-Authenticate` value of its 401s.
    challenge: Box<[u8]>,
}

enum Source {
    Header,
    Query,
    Cookie,
}

fn unauthorized(message: &str) -> Flow {
    Flow::Respond(Response::message(401, message))
}

impl JwtAuth {
    fn token(&self, req: &RequestHead) -> Option<(String, Source)> {
        if let Some(h) = req.header(&self.cfg.header) {
            let t = match h.split_at_checked(7) {
                Some((scheme, rest)) if scheme.eq_ignore_ascii_case(b"bearer ") => rest,
                _ => h,
            };
            return Some((
                String::from_utf8_lossy(t.trim_ascii()).into_owned(),
                Source::Header,
            ));
        }
        if let Some(q) = req.query_arg(&self.cfg.query) {
            return Some((String::from_utf8_lossy(&q).into_owned(), Source::Query));
        }
        req.cookie(&self.cfg.cookie)
            .map(|c| (String::from_utf8_lossy(c).into_owned(), Source::Cookie))
    }
}

impl Plugin for JwtAuth {
    fn phases(&self) -> Phases {
        Phases::REWRITE
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let flow = self.authenticate(req, cx);
        crate::util::or_anonymous(flow, self.anonymous, &self.challenge, req, cx)
    }
}

impl JwtAuth {
    fn authenticate(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let Some((token, source)) = self.token(req) else {
            return unauthorized("Missing JWT token in request");
        };
        // header.payload.signature, exactly three parts; the header a JSON object (its `alg`
        // compared below).
        let Some((message, signature)) = token.rsplit_once('.') else {
            return unauthorized("JWT token invalid");
        };
        if message.bytes().filter(|&b| b == b'.').count() != 1 {
            return unauthorized("JWT token invalid");
        }
        let Some(alg) = message
            .split_once('.')
            .and_then(|(h, _)| URL_SAFE_NO_PAD.decode(h).ok())
            .and_then(|h| serde_json::from_slice::<Value>(&h).ok())
            .and_then(|h| h.as_object().map(|h| h.get("alg").cloned()))
        else {
            return unauthorized("JWT token invalid");
        };
        let Ok(claims) = jsonwebtoken::dangerous::insecure_decode_claims::<Value>(&token) else {
            return unauthorized("JWT token invalid");
        };
        let Some(key) = claims.get(&self.cfg.key_claim_name).and_then(Value::as_str) else {
            return unauthorized("missing user key in JWT token");
        };
        let Some(ver) = self.keys.0.get(key) else {
            return unauthorized("Invalid user key in JWT token");
        };
        // The consumer's algorithm only (APISIX: "algorithm mismatch"): a token cannot choose
        // how it is checked.
        if alg.as_ref().and_then(Value::as_str) != Some(ver.alg)
            || !ver.signs(message, signature)
            || !self.claims.hold(&claims, jsonwebtoken::get_current_timestamp(), ver.leeway)
        {
            return unauthorized("failed to verify jwt");
        }
        crate::util::attach_consumer(req, cx, ver.consumer);
        if self.cfg.store_in_ctx
            && let Value::Object(payload) = claims
        {
            cx.set_jwt_payload(std::rc::Rc::new(payload));
        }
        if self.cfg.hide_credentials {
            match source {
                Source::Header => req.remove_header(&self.cfg.header),
                Source::Query => crate::util::remove_query_arg(req, &self.cfg.query),
                // A cookie header carries other cookies too; it is left as it is.
                Source::Cookie => {}
            }
        }
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    use sluice_config::PluginScope;

    const RSA_KEY: &str = include_str!("../tests/keys/rsa.key");
    const RSA_PUB: &str = include_str!("../tests/keys/rsa.pub");
    const EC_KEY: &str = include_str!("../tests/keys/ec.key");
    const EC_PUB: &str = include_str!("../tests/keys/ec.pub");

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    fn token(alg: Algorithm, key: &EncodingKey, claims: serde_json::Value) -> String {
        encode(&Header::new(alg), &claims, key).unwrap()
    }

    fn consumers() -> Vec<(&'static str, String)> {
        vec![
            (
                "hs",
                "{jwt-auth: {key: hs-key, secret: my-secret}}".to_owned(),
            ),
            (
                "hs5",
                "{jwt-auth: {key: hs5-key, secret: other, algorithm: HS512}}".to_owned(),
            ),
            (
                "rs",
                format!("{{jwt-auth: {{key: rs-key, algorithm: RS256, public_key: {RSA_PUB:?}}}}}"),
            ),
            (
                "es",
                format!("{{jwt-auth: {{key: es-key, algorithm: ES256, public_key: {EC_PUB:?}}}}}"),
            ),
        ]
    }

    fn verdict(raw: &str) -> (u16, Option<String>, Option<String>) {
        let cs = consumers();
        let cs: Vec<(&str, &str)> = cs.iter().map(|(u, c)| (*u, c.as_str())).collect();
        let b = build("jwt-auth", "{hide_credentials: true}", &cs);
        let mut req = head(raw);
        let mut cx = ctx(&b.consumers, CLIENT);
        let r = run(&*b.plugin, &mut req, &mut cx);
        let message = r.as_ref().map(|r| {
            serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["message"]
                .as_str()
                .unwrap()
                .to_owned()
        });
        (
            r.map_or(200, |r| r.status),
            cx.consumer_name().map(str::to_owned),
            message,
        )
    }

    fn bearer(t: &str) -> String {
        format!("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {t}\r\n\r\n")
    }

    #[test]
    fn tokens_signed_by_the_consumer_pass_with_every_algorithm() {
        let exp = now() + 60;
        let hs = token(
            Algorithm::HS256,
            &EncodingKey::from_secret(b"my-secret"),
            serde_json::json!({"key": "hs-key", "exp": exp}),
        );
        assert_eq!(verdict(&bearer(&hs)).0, 200);
        assert_eq!(verdict(&bearer(&hs)).1.as_deref(), Some("hs"));
        let with_aud = token(
            Algorithm::HS256,
            &EncodingKey::from_secret(b"my-secret"),
            serde_json::json!({"key": "hs-key", "aud": "some-api"}),
        );
        assert_eq!(verdict(&bearer(&with_aud)).0, 200);
        let hs5 = token(
            Algorithm::HS512,
            &EncodingKey::from_secret(b"other"),
            serde_json::json!({"key": "hs5-key"}),
        );
        assert_eq!(verdict(&bearer(&hs5)).1.as_deref(), Some("hs5"));
        let rs = token(
            Algorithm::RS256,
            &EncodingKey::from_rsa_pem(RSA_KEY.as_bytes()).unwrap(),
            serde_json::json!({"key": "rs-key", "exp": exp}),
        );
        assert_eq!(verdict(&bearer(&rs)).1.as_deref(), Some("rs"));
        let es = token(
            Algorithm::ES256,
            &EncodingKey::from_ec_pem(EC_KEY.as_bytes()).unwrap(),
            serde_json::json!({"key": "es-key"}),
        );
        assert_eq!(verdict(&bearer(&es)).1.as_deref(), Some("es"));
        // From the query and a cookie too.
        assert_eq!(
            verdict(&format!("GET /?jwt={hs} HTTP/1.1\r\nHost: a\r\n\r\n")).0,
            200
        );
        assert_eq!(
            verdict(&format!(
                "GET / HTTP/1.1\r\nHost: a\r\nCookie: a=b; jwt={hs}\r\n\r\n"
            ))
            .0,
            200
        );
    }

    #[test]
    fn forged_expired_and_unknown_tokens_are_refused() {
        let forged = token(
            Algorithm::HS256,
            &EncodingKey::from_secret(b"guess"),
            serde_json::json!({"key": "hs-key"}),
        );
        assert_eq!(
            verdict(&bearer(&forged)),
            (401, None, Some("failed to verify jwt".into()))
        );
        let expired = token(
            Algorithm::HS256,
            &EncodingKey::from_secret(b"my-secret"),
            serde_json::json!({"key": "hs-key", "exp": now() - 120}),
        );
        assert_eq!(
            verdict(&bearer(&expired)).2.as_deref(),
            Some("failed to verify jwt")
        );
        let early = token(
            Algorithm::HS256,
            &EncodingKey::from_secret(b"my-secret"),
            serde_json::json!({"key": "hs-key", "nbf": now() + 120}),
        );
        assert_eq!(
            verdict(&bearer(&early)).2.as_deref(),
            Some("failed to verify jwt")
        );
        // An HS256 token presented for an RS256 consumer, signed with its public key as the
        // secret (the classic algorithm confusion): refused.
        let confused = token(
            Algorithm::HS256,
            &EncodingKey::from_secret(RSA_PUB.as_bytes()),
            serde_json::json!({"key": "rs-key"}),
        );
        assert_eq!(
            verdict(&bearer(&confused)).2.as_deref(),
            Some("failed to verify jwt")
        );
        let stranger = token(
            Algorithm::HS256,
            &EncodingKey::from_secret(b"x"),
            serde_json::json!({"key": "who"}),
        );
        assert_eq!(
            verdict(&bearer(&stranger)).2.as_deref(),
            Some("Invalid user key in JWT token")
        );
        let keyless = token(
            Algorithm::HS256,
            &EncodingKey::from_secret(b"x"),
            serde_json::json!({"sub": "x"}),
        );
        assert_eq!(
            verdict(&bearer(&keyless)).2.as_deref(),
            Some("missing user key in JWT token")
        );
        assert_eq!(
            verdict(&bearer("not.a.jwt")).2.as_deref(),
            Some("JWT token invalid")
        );
        assert_eq!(
            verdict("GET / HTTP/1.1\r\nHost: a\r\n\r\n").2.as_deref(),
            Some("Missing JWT token in request")
        );
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert!(
            check(
                "jwt-auth",
                "{key: k, algorithm: RS256, public_key: nope}",
                PluginScope::Consumer
            )[0]
            .starts_with("plugins.jwt-auth.public_key: invalid PEM public key")
        );
        assert_eq!(
            check("jwt-auth", "{key: k}", PluginScope::Consumer),
            vec!["plugins.jwt-auth.secret: is required with algorithm HS256"]
        );
        assert_eq!(
            check(
                "jwt-auth",
                "{key: k, secret: s, algorithm: none}",
                PluginScope::Consumer
            ),
            vec![
                "plugins.jwt-auth.algorithm: unsupported algorithm \"none\", expected one of HS256, HS384, HS512, RS256, RS384, RS512, ES256, ES384, ES512, PS256, PS384, PS512, EdDSA"
            ]
        );
    }

    #[test]
    fn the_grace_period_is_a_year_at_most() {
        // A leeway past the current time overflowed when tokens were checked.
        for (grace, shown) in [
            ("31536001", "31536001"),
            ("18446744073709551615", "18446744073709551615"),
            ("-1", "-1"),
            ("0.5", "0.5"),
        ] {
            assert_eq!(
                check(
                    "jwt-auth",
                    &format!("{{key: k, secret: s, lifetime_grace_period: {grace}}}"),
                    PluginScope::Consumer
                ),
                vec![format!(
                    "plugins.jwt-auth.lifetime_grace_period: must be a whole number from 0 to 31536000 seconds (one year), got {shown}"
                )]
            );
        }
        // The longest grace lets a token that expired a day ago through.
        let b = build(
            "jwt-auth",
            "{}",
            &[(
                "hs",
                "{jwt-auth: {key: hs-key, secret: my-secret, lifetime_grace_period: 31536000}}",
            )],
        );
        let old = token(
            Algorithm::HS256,
            &EncodingKey::from_secret(b"my-secret"),
            serde_json::json!({"key": "hs-key", "exp": now() - 86400, "nbf": now() + 86400}),
        );
        let mut cx = ctx(&b.consumers, CLIENT);
        assert!(run(&*b.plugin, &mut head(&bearer(&old)), &mut cx).is_none());
        assert_eq!(cx.consumer_name(), Some("hs"));
    }
}
