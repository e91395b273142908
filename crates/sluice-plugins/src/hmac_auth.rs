//! `hmac-auth`: identifies a consumer by an HMAC signature of the request, as APISIX 3.x's
//! `hmac-auth` (the HTTP Signatures draft's `Authorization: Signature` form).
//!
//! Route: `{allowed_algorithms: [hmac-sha1, hmac-sha256, hmac-sha512], clock_skew: 300,
//! signed_headers: [date], validate_request_body: false, max_req_body_size: 67108864,
//! hide_credentials: false, realm: hmac, anonymous_consumer}`. Consumer (or credential):
//! `{key_id, secret_key}` (`secret_key` is encrypted at rest as APISIX's).
//!
//! The client sends `Authorization: Signature keyId="...",algorithm="hmac-sha256",
//! headers="@request-target date",signature="<base64>"` and a `Date`. The signed string is the
//! key id, then for each listed header `name: value` (`@request-target` is `METHOD
//! /path?query`; a header the request lacks is left out), each followed by `\n`. With
//! `validate_request_body`, `Digest: SHA-256=<base64 of the body's SHA-256>` must match the
//! body. A refusal is 401 `{"message":"client request can't be validated"}` with
//! `WWW-Authenticate: hmac realm="hmac"`; a body over the limit is 413.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde_json::Value;
use sha2::Digest as _;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Credential, Phases, PluginFactory, index_as, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::{Num, credential_index};

const NAME: &str = "hmac-auth";
const ALGORITHMS: [&str; 3] = ["hmac-sha1", "hmac-sha256", "hmac-sha512"];
/// Signatures in standard base64, padded or not (`ngx.decode_base64` takes both).
const SIGNATURE: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);
/// APISIX's refusal, whatever the reason (the reason is logged at debug level).
const REFUSED: &str = "client request can't be validated";

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    allowed_algorithms: Option<Vec<String>>,
    #[serde(default)]
    clock_skew: Option<Num>,
    #[serde(default)]
    signed_headers: Option<Vec<String>>,
    #[serde(default)]
    validate_request_body: bool,
    #[serde(default)]
    max_req_body_size: Option<Num>,
    #[serde(default)]
    hide_credentials: bool,
    #[serde(default)]
    realm: Option<String>,
    #[serde(default)]
    anonymous_consumer: Option<String>,
}

/// Consumer credentials.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Cred {
    key_id: String,
    secret_key: String,
}

/// Key id → (the secret's keyed HMAC states, consumer index), built once per configuration
/// version: a request clones the state instead of hashing the padded key again (two of an
/// HMAC's four or five compressions).
#[derive(Default)]
struct Keys(FxHashMap<String, (Keyed, u32)>);

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// A secret, keyed into each algorithm's HMAC.
#[derive(Clone)]
struct Keyed {
    sha1: Hmac<sha1::Sha1>,
    sha256: Hmac<sha2::Sha256>,
    sha512: Hmac<sha2::Sha512>,
}

impl Keyed {
    fn new(secret: &[u8]) -> Option<Keyed> {
        Some(Keyed {
            sha1: Hmac::new_from_slice(secret).ok()?,
            sha256: Hmac::new_from_slice(secret).ok()?,
            sha512: Hmac::new_from_slice(secret).ok()?,
        })
    }

    /// Whether `signature` is the HMAC of `message` (compared in constant time).
    fn verify(&self, algorithm: usize, message: &[u8], signature: &[u8]) -> bool {
        fn check<M: Mac + Clone>(m: &M, message: &[u8], signature: &[u8]) -> bool {
            let mut m = m.clone();
            m.update(message);
            m.verify_slice(signature).is_ok()
        }
        match algorithm {
            0 => check(&self.sha1, message, signature),
            1 => check(&self.sha256, message, signature),
            _ => check(&self.sha512, message, signature),
        }
    }
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!(NAME, 2530, Config, credentials: Cred);

    fn encrypted_fields(&self) -> &'static [&'static str] {
        &["secret_key"]
    }

    fn check_credential(&self, config: &Value, v: &mut Validator) {
        if let Some(c) = parse_config::<Cred>(config, v) {
            for (field, value) in [("key_id", &c.key_id), ("secret_key", &c.secret_key)] {
                if value.is_empty() || value.len() > 256 {
                    v.error_at(field, "must be 1 to 256 characters");
                }
            }
        }
    }

    fn consumer_index(
        &self,
        creds: &[Credential<'_>],
        v: &mut Validator,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let keys = credential_index(creds, NAME, "key_id", v, |c: Cred, consumer| {
            Some((c.key_id, (Keyed::new(c.secret_key.as_bytes())?, consumer)))
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
        let mut ok = true;
        let mut allowed = [false; 3];
        match &c.allowed_algorithms {
            None => allowed = [true; 3],
            Some(list) => v.field("allowed_algorithms", |v| {
                if list.is_empty() {
                    v.error("must list at least one algorithm");
                    ok = false;
                }
                for (i, a) in list.iter().enumerate() {
                    match ALGORITHMS.iter().position(|k| k == a) {
                        Some(p) => allowed[p] = true,
                        None => {
                            v.index(i, |v| {
                                v.error(format!("unknown algorithm \"{a}\", expected one of {}", ALGORITHMS.join(", ")))
                            });
                            ok = false;
                        }
                    }
                }
            }),
        }
        let clock_skew = match c.clock_skew {
            None => Some(300),
            Some(n) => v.field("clock_skew", |v| crate::util::whole(n, 1, u32::MAX as u64, "", v)),
        };
        let body_max = crate::util::body_size_field("max_req_body_size", c.max_req_body_size, v);
        let signed = c.signed_headers.unwrap_or_else(|| vec!["date".into()]);
        v.field("signed_headers", |v| {
            for (i, h) in signed.iter().enumerate() {
                if h.is_empty() || h.len() > 50 {
                    v.index(i, |v| v.error("must be 1 to 50 characters"));
                    ok = false;
                }
            }
        });
        let keys = index_as::<Keys>((cx.indexes)(NAME)).unwrap_or_default();
        let challenge = crate::util::realm_challenge("hmac", c.realm.as_deref(), "hmac", v)?;
        let anonymous = crate::util::anonymous_consumer(c.anonymous_consumer.as_deref(), cx, v)?;
        let (clock_skew, body_max) = (clock_skew?, body_max?);
        ok.then(|| {
            Arc::new(HmacAuth {
                allowed,
                clock_skew: Duration::from_secs(clock_skew),
                signed: signed.into_iter().map(|h| h.to_ascii_lowercase()).collect(),
                validate_body: c.validate_request_body,
                body_max,
                hide: c.hide_credentials,
                keys,
                anonymous,
                challenge,
            }) as Arc<dyn Plugin>
        })
    }
}

struct HmacAuth {
    /// hmac-sha1, hmac-sha256, hmac-sha512.
    allowed: [bool; 3],
    clock_skew: Duration,
    /// Lowercased.
    signed: Vec<String>,
    validate_body: bool,
    body_max: u64,
    hide: bool,
    keys: Arc<Keys>,
    anonymous: Option<u32>,
    challenge: Box<[u8]>,
}

/// The fields of `Authorization: Signature ...`.
#[derive(Debug, Default)]
struct Params<'a> {
    key_id: Option<&'a str>,
    algorithm: Option<&'a str>,
    signature: Option<&'a str>,
    headers: Vec<&'a str>,
}

/// Parses the `Signature` fields as APISIX does: comma-separated `name="value"` pairs (a
/// name of letters and digits; anything else is skipped). By bytes: `str`'s char searches
/// cost ~2,000 instructions per request here.
fn params(auth: &str) -> Result<Params<'_>, &'static str> {
    let Some(rest) = auth.strip_prefix("Signature") else {
        return Err("Authorization header does not start with 'Signature'");
    };
    let mut p = Params::default();
    let mut start = 0;
    while start <= rest.len() {
        // `,` is ASCII: its byte positions are character boundaries.
        let end = memchr::memchr(b',', &rest.as_bytes()[start..]).map_or(rest.len(), |i| start + i);
        let field = rest[start..end].trim_start();
        start = end + 1;
        let b = field.as_bytes();
        let Some(eq) = memchr::memchr(b'=', b) else {
            continue;
        };
        let key = &field[..eq];
        if key.is_empty() || !key.bytes().all(|c| c.is_ascii_alphanumeric()) {
            continue;
        }
        if b.get(eq + 1) != Some(&b'"') {
            continue;
        }
        let inner = &field[eq + 2..];
        let value = match memchr::memchr(b'"', inner.as_bytes()) {
            Some(end) => &inner[..end],
            None => inner,
        };
        match key {
            "keyId" => p.key_id = Some(value),
            "algorithm" => p.algorithm = Some(value),
            "signature" => p.signature = Some(value),
            "headers" => p.headers = value.split(' ').filter(|h| !h.is_empty()).collect(),
            _ => {}
        }
    }
    Ok(p)
}

/// `keyId\nname: value\n...`: the string the client signed.
fn signing_string(key_id: &str, headers: &[&str], req: &RequestHead) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(key_id.as_bytes());
    out.push(b'\n');
    for h in headers {
        if let Some(value) = req.header(h) {
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.push(b'\n');
        } else if *h == "@request-target" {
            out.extend_from_slice(req.method_bytes());
            out.push(b' ');
            let target = req.original_target();
            out.extend_from_slice(if target.is_empty() { b"/" } else { target });
            out.push(b'\n');
        }
    }
    out
}

impl Plugin for HmacAuth {
    fn phases(&self) -> Phases {
        Phases::REWRITE
    }

    fn needs_body(&self) -> bool {
        self.validate_body
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let flow = match self.authenticate(req, cx) {
            Ok(consumer) => {
                crate::util::attach_consumer(req, cx, consumer);
                if self.hide {
                    req.remove_header("authorization");
                }
                return Flow::Continue;
            }
            Err(Refusal::TooLarge) => {
                return Flow::Respond(Response::message(413, "request body too large"));
            }
            Err(Refusal::Invalid(why)) => {
                tracing::debug!(route = cx.route_id(), cause = why, "hmac-auth refused a request");
                Flow::Respond(Response::message(401, REFUSED))
            }
        };
        let flow = crate::util::or_anonymous(flow, self.anonymous, &self.challenge, req, cx);
        // As APISIX: the anonymous consumer's requests lose the credentials too.
        if self.hide && matches!(flow, Flow::Continue) {
            req.remove_header("authorization");
        }
        flow
    }
}

enum Refusal {
    Invalid(&'static str),
    TooLarge,
}

impl HmacAuth {
    fn authenticate(&self, req: &RequestHead, cx: &Ctx<'_>) -> Result<u32, Refusal> {
        let invalid = |why| Err(Refusal::Invalid(why));
        let Some(auth) = req.header("authorization") else {
            return invalid("missing Authorization header");
        };
        let Ok(auth) = std::str::from_utf8(auth) else {
            return invalid("Authorization header is not text");
        };
        let p = params(auth).map_err(Refusal::Invalid)?;
        let (Some(key_id), Some(signature)) = (p.key_id, p.signature) else {
            return invalid("keyId or signature missing");
        };
        let Some(algorithm) = p.algorithm else {
            return invalid("algorithm missing");
        };
        let Some((keyed, consumer)) = self.keys.0.get(key_id) else {
            return invalid("Invalid key_id");
        };
        let Some(algo) = ALGORITHMS
            .iter()
            .position(|a| *a == algorithm)
            .filter(|i| self.allowed[*i])
        else {
            return invalid("Invalid algorithm");
        };
        let Some(date) = req.header("date") else {
            return invalid("Date header missing. failed to validate clock skew");
        };
        let Some(time) = std::str::from_utf8(date)
            .ok()
            .and_then(|d| httpdate::parse_http_date(d).ok())
        else {
            return invalid("Invalid GMT format time");
        };
        let now = SystemTime::now();
        let skew = now
            .duration_since(time)
            .or_else(|_| time.duration_since(now))
            .unwrap_or_default();
        if skew > self.clock_skew {
            return invalid("Clock skew exceeded");
        }
        if let Some(missing) = self
            .signed
            .iter()
            .find(|s| !p.headers.iter().any(|h| h.eq_ignore_ascii_case(s)))
        {
            tracing::debug!(header = %missing, "hmac-auth: expected header missing in signing");
            return invalid("expected header missing in signing");
        }
        let Ok(given) = SIGNATURE.decode(signature) else {
            return invalid("Invalid signature");
        };
        let message = signing_string(key_id, &p.headers, req);
        if !keyed.verify(algo, &message, &given) {
            return invalid("Invalid signature");
        }
        if self.validate_body {
            let Some(digest) = req.header("digest") else {
                return invalid("Invalid digest");
            };
            // The body was read before the phases, up to the node's `max_body_vars_size`.
            let Some(body) = cx.body().and_then(|b| b.raw()) else {
                return Err(Refusal::TooLarge);
            };
            if body.len() as u64 > self.body_max {
                return Err(Refusal::TooLarge);
            }
            let mut expected = b"SHA-256=".to_vec();
            expected.extend_from_slice(STANDARD.encode(sha2::Sha256::digest(body)).as_bytes());
            if digest != expected.as_slice() {
                return invalid("Invalid digest");
            }
        }
        Ok(*consumer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_fields_parse_as_apisix_reads_them() {
        let p = params(
            "Signature keyId=\"my-key\",algorithm=\"hmac-sha256\",headers=\"@request-target date\",signature=\"abc=\"",
        )
        .unwrap();
        assert_eq!(p.key_id, Some("my-key"));
        assert_eq!(p.algorithm, Some("hmac-sha256"));
        assert_eq!(p.signature, Some("abc="));
        assert_eq!(p.headers, vec!["@request-target", "date"]);
        assert!(params("Bearer x").is_err());
        let p = params("Signature keyId=unquoted, signature=\"s\"").unwrap();
        assert_eq!((p.key_id, p.signature), (None, Some("s")));
    }

    #[test]
    fn the_signing_string_lists_the_signed_headers_the_request_has() {
        let req = crate::tests::head(
            "GET /a/b?x=1 HTTP/1.1\r\nHost: h\r\nDate: Tue, 19 Jan 2038 03:14:07 GMT\r\nX-Custom: v\r\n\r\n",
        );
        let s = signing_string("k", &["@request-target", "date", "x-absent", "x-custom"], &req);
        assert_eq!(
            String::from_utf8(s).unwrap(),
            "k\nGET /a/b?x=1\ndate: Tue, 19 Jan 2038 03:14:07 GMT\nx-custom: v\n"
        );
    }
}
