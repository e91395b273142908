//! `jwt-auth`: identifies a consumer by a JSON Web Token (RFC 7519) signed with the consumer's
//! secret (HS256, HS512) or private key (RS256, ES256).
//!
//! Route: `{header: authorization, query: jwt, cookie: jwt, hide_credentials: false,
//! key_claim_name: key}`: the token is looked for in that order (`Bearer ` is optional in the
//! header). Consumer: `{key, secret, public_key, algorithm: HS256, base64_secret: false,
//! lifetime_grace_period: 0}`. The token's `key` claim names the consumer; its signature is
//! then checked with that consumer's key and algorithm only, and `exp` and `nbf` are enforced
//! (with `lifetime_grace_period` seconds of leeway, at most 31,536,000: one year). `aud` is not
//! checked. APISIX's consumer
//! fields for signing tokens (`private_key`, `exp`) are accepted and unused: Sluice only
//! verifies.

use std::any::Any;
use std::sync::Arc;

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
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
    /// APISIX's `store_in_ctx` (the payload kept for other plugins): accepted; no Sluice
    /// plugin reads a token's payload.
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

/// A consumer's verification settings.
struct Verifier {
    key: DecodingKey,
    /// By the time claims a route asks for ([`Claims::index`]).
    validation: [Validation; 4],
    consumer: u32,
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
    /// The index in [`Verifier::validation`]: 0 when present, then exp only, nbf only, both.
    fn index(self) -> usize {
        match self {
            Claims::Present => 0,
            Claims::Listed {
                exp: true,
                nbf: false,
            } => 1,
            Claims::Listed {
                exp: false,
                nbf: true,
            } => 2,
            Claims::Listed { .. } => 3,
        }
    }
}

#[derive(Default)]
struct Keys(FxHashMap<String, Verifier>);

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
    let (alg, key) = match c.algorithm.as_str() {
        "HS256" | "HS512" => {
            let Some(secret) = c.secret.as_deref().filter(|s| !s.is_empty()) else {
                v.error_at(
                    "secret",
                    format!("is required with algorithm {}", c.algorithm),
                );
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
            (
                if c.algorithm == "HS256" {
                    Algorithm::HS256
                } else {
                    Algorithm::HS512
                },
                key,
            )
        }
        "RS256" | "ES256" => {
            let Some(pem) = c.public_key.as_deref() else {
                v.error_at(
                    "public_key",
                    format!("is required with algorithm {}", c.algorithm),
                );
                return None;
            };
            let parsed = if c.algorithm == "RS256" {
                DecodingKey::from_rsa_pem(pem.as_bytes()).map(|k| (Algorithm::RS256, k))
            } else {
                DecodingKey::from_ec_pem(pem.as_bytes()).map(|k| (Algorithm::ES256, k))
            };
            match parsed {
                Ok((alg, k)) => (alg, k),
                Err(e) => {
                    v.error_at("public_key", format!("invalid PEM public key: {e}"));
                    return None;
                }
            }
        }
        other => {
            v.error_at(
                "algorithm",
                format!("unsupported algorithm \"{other}\", expected HS256, HS512, RS256 or ES256"),
            );
            return None;
        }
    };
    let mut validation = Validation::new(alg);
    validation.required_spec_claims.clear();
    validation.validate_exp = true;
    validation.validate_nbf = true;
    // Sluice's consumers declare no audience: a token's `aud` is not checked (jsonwebtoken
    // would otherwise refuse every token that carries one).
    validation.validate_aud = false;
    validation.leeway = leeway?;
    // Listed claims are required (APISIX: "claim exp is missing") and the others unchecked.
    let listed = |exp: bool, nbf: bool| {
        let mut v = validation.clone();
        v.validate_exp = exp;
        v.validate_nbf = nbf;
        v.set_required_spec_claims(
            &[("exp", exp), ("nbf", nbf)]
                .iter()
                .filter(|(_, on)| *on)
                .map(|(c, _)| *c)
                .collect::<Vec<_>>(),
        );
        v
    };
    Some(Verifier {
        key,
        validation: [
            validation.clone(),
            listed(true, false),
            listed(false, true),
            listed(true, true),
        ],
        consumer,
    })
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    fn name(&self) -> &'static str {
        "jwt-auth"
    }

    fn priority(&self) -> i32 {
        2510
    }

    /// APISIX's `encrypt_fields`.
    fn encrypted_fields(&self) -> &'static [&'static str] {
        &["secret"]
    }

    fn schema(&self) -> Option<Value> {
        Some(crate::util::schema_of::<Config>())
    }

    fn consumer_schema(&self) -> Option<Value> {
        Some(crate::util::schema_of::<Cred>())
    }

    fn is_auth(&self) -> bool {
        true
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
        let _ = c.store_in_ctx;
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
        if jsonwebtoken::decode_header(&token).is_err() {
            return unauthorized("JWT token invalid");
        }
        let Ok(claims) = jsonwebtoken::dangerous::insecure_decode_claims::<Value>(&token) else {
            return unauthorized("JWT token invalid");
        };
        let Some(key) = claims.get(&self.cfg.key_claim_name).and_then(Value::as_str) else {
            return unauthorized("missing user key in JWT token");
        };
        let Some(ver) = self.keys.0.get(key) else {
            return unauthorized("Invalid user key in JWT token");
        };
        if jsonwebtoken::decode::<Value>(&token, &ver.key, &ver.validation[self.claims.index()])
            .is_err()
        {
            return unauthorized("failed to verify jwt");
        }
        crate::util::attach_consumer(req, cx, ver.consumer);
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
                "plugins.jwt-auth.algorithm: unsupported algorithm \"none\", expected HS256, HS512, RS256 or ES256"
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
