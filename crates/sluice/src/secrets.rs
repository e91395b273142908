//! Reading `$secret://` references from the secret managers APISIX supports, when a
//! configuration loads (see `sluice_config::secrets`):
//!
//! - `vault/<id>`: HashiCorp Vault's KV engine, as APISIX reads it: `GET
//!   <uri>/v1/<prefix>/<name>` with `X-Vault-Token` (and `X-Vault-Namespace`), the value is
//!   `data.<key>`.
//! - `aws/<id>`: AWS Secrets Manager's `GetSecretValue` (signed with Signature Version 4), the
//!   secret's JSON `SecretString`, field `<key>`. A name may hold slashes: the longest name
//!   that exists wins, as in APISIX.
//! - `gcp/<id>`: GCP Secret Manager: a token from the service account (an RS256 JWT exchanged
//!   at `token_uri`), then `<entries_uri>/projects/<project>/secrets/<name>/versions/latest:access`,
//!   the payload's JSON, field `<key>`.
//!
//! Each read runs on a thread of its own with its own runtime; the loader (never a proxy
//! worker: the admin API's and etcd's blocking tasks, the file watcher, the start) waits for
//! the answer (at most [`TIMEOUT`] per manager call). Values are reused for
//! [`KEEP`], so a burst of admin writes does not ask again for every secret each time; when a
//! manager cannot be read, the value read before stands in (with a warning) for up to
//! [`STALE`], so an outage of the manager does not stop configurations from loading.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;
use sluice_config::SecretConfig;

/// Longest wait for one call to a secret manager.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// Deadlines of one call to a secret manager.
const DEADLINES: sluice_proxy::fetch::Deadlines = sluice_proxy::fetch::Deadlines {
    connect: TIMEOUT,
    total: TIMEOUT,
};

/// How long a value read is reused.
pub const KEEP: Duration = Duration::from_secs(60);

/// Makes configurations read `$secret://` references from their managers.
pub fn install() {
    sluice_config::secrets::set_fetcher(Box::new(fetch));
}

type CacheKey = (String, String);

/// Values read, by manager (its whole settings: a changed token asks again at once) and
/// path. A value is reused for [`KEEP`]; an older one only when the manager cannot be read
/// (so an outage does not stop every later configuration from loading), until [`STALE`].
#[derive(Default)]
struct Cache(HashMap<CacheKey, (String, Instant)>);

/// How long a value may stand in for one that cannot be read.
pub const STALE: Duration = Duration::from_secs(24 * 3600);

impl Cache {
    fn fresh(&self, key: &CacheKey, now: Instant) -> Option<String> {
        let (v, at) = self.0.get(key)?;
        (now.duration_since(*at) < KEEP).then(|| v.clone())
    }

    fn stale(&self, key: &CacheKey, now: Instant) -> Option<String> {
        let (v, at) = self.0.get(key)?;
        (now.duration_since(*at) < STALE).then(|| v.clone())
    }

    /// Keeps a value read, dropping those too old to stand in (values of managers no
    /// longer configured go with them).
    fn insert(&mut self, key: CacheKey, value: String, now: Instant) {
        self.0.retain(|_, (_, at)| now.duration_since(*at) < STALE);
        self.0.insert(key, (value, now));
    }
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

fn fetch(id: &str, config: &SecretConfig, path: &str) -> Result<String, String> {
    let key = (format!("{id} {config:?}"), path.to_owned());
    if let Some(v) = cache().lock().fresh(&key, Instant::now()) {
        return Ok(v);
    }
    match ask(config, path) {
        Ok(value) => {
            cache().lock().insert(key, value.clone(), Instant::now());
            Ok(value)
        }
        Err(e) => match cache().lock().stale(&key, Instant::now()) {
            Some(v) => {
                tracing::warn!(manager = %id, secret = %path, error = %e, "secret manager unavailable: using the value read before");
                Ok(v)
            }
            None => Err(e),
        },
    }
}

/// Reads a secret on a thread of its own with its own runtime (the loader may be inside a
/// runtime: the admin API's blocking tasks), and waits for it.
fn ask(config: &SecretConfig, path: &str) -> Result<String, String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start a runtime: {e}"))?;
            // AWS may try a few names, GCP takes a token first: a few calls' worth.
            rt.block_on(async { tokio::time::timeout(TIMEOUT * 4, read(config, path)).await })
                .map_err(|_| format!("no answer within {} s", (TIMEOUT * 4).as_secs()))?
        })
        .join()
        .unwrap_or_else(|_| Err("the secret read panicked".into()))
    })
}

async fn read(c: &SecretConfig, path: &str) -> Result<String, String> {
    let manager =
        c.id.as_deref()
            .and_then(|i| i.split_once('/'))
            .map(|(m, _)| m);
    match manager {
        Some("vault") => vault(c, path).await,
        Some("aws") => aws(c, path).await,
        Some("gcp") => gcp(c, path).await,
        _ => Err("unknown secret manager".into()),
    }
}

/// The text of a JSON value: strings as they are, anything else as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn json(body: &[u8], what: &str) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|e| format!("{what} is not JSON: {e}"))
}

async fn vault(c: &SecretConfig, path: &str) -> Result<String, String> {
    let (name, key) = path.rsplit_once('/').ok_or("no key after the name")?;
    let base = c.uri.as_deref().unwrap_or_default().trim_end_matches('/');
    let prefix = c.prefix.as_deref().unwrap_or_default().trim_matches('/');
    let url = format!("{base}/v1/{prefix}/{}", name.trim_start_matches('/'));
    let token = c.token.as_deref().unwrap_or_default();
    let mut headers = vec![("X-Vault-Token", token)];
    if let Some(ns) = &c.namespace {
        headers.push(("X-Vault-Namespace", ns.as_str()));
    }
    let (status, body) =
        sluice_proxy::fetch::request("GET", &url, &headers, Vec::new(), true, DEADLINES).await?;
    if status != 200 {
        return Err(format!(
            "vault answered {status} for {url}: {}",
            String::from_utf8_lossy(&body)
        ));
    }
    let doc = json(&body, "vault's answer")?;
    doc["data"]
        .get(key)
        .map(text)
        .ok_or_else(|| format!("vault's secret {name} has no field \"{key}\""))
}

async fn aws(c: &SecretConfig, path: &str) -> Result<String, String> {
    let region = c.region.as_deref().unwrap_or("us-east-1");
    let endpoint = c
        .endpoint_url
        .clone()
        .unwrap_or_else(|| format!("https://secretsmanager.{region}.amazonaws.com"));
    // The longest name first: `a/b/c` is the secret `a/b/c` (whole value), then `a/b` with
    // key `c`, then `a` with key `b/c`.
    let parts: Vec<&str> = path.split('/').collect();
    for cut in (1..parts.len()).rev() {
        let (name, key) = (parts[..cut].join("/"), parts[cut..].join("/"));
        match aws_get(c, &endpoint, region, &name).await? {
            None => continue,
            Some(secret) => {
                let doc: Value = serde_json::from_str(&secret)
                    .map_err(|_| format!("aws's secret {name} is not a JSON object"))?;
                return doc
                    .get(&key)
                    .map(text)
                    .ok_or_else(|| format!("aws's secret {name} has no field \"{key}\""));
            }
        }
    }
    Err(format!("aws has no secret for {path}"))
}

/// `GetSecretValue`: the secret's string, None when there is no such secret.
async fn aws_get(
    c: &SecretConfig,
    endpoint: &str,
    region: &str,
    name: &str,
) -> Result<Option<String>, String> {
    let body = serde_json::json!({ "SecretId": name })
        .to_string()
        .into_bytes();
    let uri: http::Uri = endpoint.parse().map_err(|e| format!("endpoint_url: {e}"))?;
    let host = uri.authority().map(|a| a.as_str()).unwrap_or_default();
    let now = time_now();
    let signed = sigv4(&SigV4 {
        method: "POST",
        access_key: c.access_key_id.as_deref().unwrap_or_default(),
        secret_key: c.secret_access_key.as_deref().unwrap_or_default(),
        session_token: c.session_token.as_deref(),
        region,
        service: "secretsmanager",
        host,
        path: uri.path(),
        query: uri.query().unwrap_or_default(),
        target: Some("secretsmanager.GetSecretValue"),
        content_type: "application/x-amz-json-1.1",
        body: &body,
        amz_date: &now,
    });
    let headers: Vec<(&str, &str)> = signed.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let url = format!("{}{}", endpoint.trim_end_matches('/'), "/");
    let (status, answer) =
        sluice_proxy::fetch::request("POST", &url, &headers, body, true, DEADLINES).await?;
    let doc: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
    if status == 200 {
        return doc["SecretString"]
            .as_str()
            .map(|s| Some(s.to_owned()))
            .ok_or_else(|| format!("aws's secret {name} has no SecretString"));
    }
    let kind = doc["__type"].as_str().unwrap_or_default();
    if kind.ends_with("ResourceNotFoundException") {
        return Ok(None);
    }
    Err(format!(
        "aws answered {status}: {}",
        String::from_utf8_lossy(&answer)
    ))
}

/// `20150830T123600Z`, now.
fn time_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    amz_date(secs)
}

/// A Unix time as AWS's `YYYYMMDD'T'HHMMSS'Z'`.
fn amz_date(secs: u64) -> String {
    let rem = secs % 86_400;
    let (y, m, d) = crate::civil::civil((secs / 86_400) as i64);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// What a Signature Version 4 request signs.
struct SigV4<'a> {
    method: &'a str,
    access_key: &'a str,
    secret_key: &'a str,
    session_token: Option<&'a str>,
    region: &'a str,
    service: &'a str,
    host: &'a str,
    path: &'a str,
    /// Already in canonical order and encoding.
    query: &'a str,
    target: Option<&'a str>,
    content_type: &'a str,
    body: &'a [u8],
    amz_date: &'a str,
}

/// The headers of a request signed with AWS Signature Version 4 (written here: the algorithm
/// is a page of AWS's documentation, and the SDK's signer would bring in the whole SDK). Checked
/// against AWS's published example in the tests.
fn sigv4(r: &SigV4<'_>) -> Vec<(&'static str, String)> {
    use sha2::{Digest, Sha256};
    let mut headers: Vec<(&'static str, String)> = vec![
        ("content-type", r.content_type.to_owned()),
        ("host", r.host.to_owned()),
        ("x-amz-date", r.amz_date.to_owned()),
    ];
    if let Some(t) = r.session_token {
        headers.push(("x-amz-security-token", t.to_owned()));
    }
    if let Some(t) = r.target {
        headers.push(("x-amz-target", t.to_owned()));
    }
    let signed_names = headers
        .iter()
        .map(|(k, _)| *k)
        .collect::<Vec<_>>()
        .join(";");
    let canonical_headers: String = headers
        .iter()
        .map(|(k, v)| format!("{k}:{}\n", v.trim()))
        .collect();
    let payload = hex(&Sha256::digest(r.body));
    let canonical = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed_names}\n{payload}",
        r.method,
        if r.path.is_empty() { "/" } else { r.path },
        r.query
    );
    sign_canonical(r, &canonical, &signed_names, headers)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn mac(key: &[u8], data: &[u8]) -> Vec<u8> {
    use hmac::{Hmac, Mac};
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// Signs a canonical request: the `authorization` header added to `headers` (`host` is left
/// to the HTTP client).
fn sign_canonical(
    r: &SigV4<'_>,
    canonical: &str,
    signed_names: &str,
    mut headers: Vec<(&'static str, String)>,
) -> Vec<(&'static str, String)> {
    use sha2::{Digest, Sha256};
    let date = &r.amz_date[..8];
    let scope = format!("{date}/{}/{}/aws4_request", r.region, r.service);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
        r.amz_date,
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let k_date = mac(format!("AWS4{}", r.secret_key).as_bytes(), date.as_bytes());
    let k_region = mac(&k_date, r.region.as_bytes());
    let k_service = mac(&k_region, r.service.as_bytes());
    let k_signing = mac(&k_service, b"aws4_request");
    let signature = hex(&mac(&k_signing, to_sign.as_bytes()));
    headers.retain(|(k, _)| *k != "host");
    headers.push((
        "authorization",
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_names}, Signature={signature}",
            r.access_key
        ),
    ));
    headers
}

async fn gcp(c: &SecretConfig, path: &str) -> Result<String, String> {
    let (name, key) = path.split_once('/').ok_or("no key after the name")?;
    let verify = c.ssl_verify.unwrap_or(true);
    let account: sluice_config::GcpAuthConfig = match (&c.auth_config, &c.auth_file) {
        (Some(a), _) => a.clone(),
        (None, Some(file)) => {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read auth_file {file}: {e}"))?;
            let v = json(text.as_bytes(), "auth_file")?;
            sluice_config::GcpAuthConfig {
                client_email: v["client_email"].as_str().unwrap_or_default().to_owned(),
                private_key: v["private_key"].as_str().unwrap_or_default().to_owned(),
                project_id: v["project_id"].as_str().unwrap_or_default().to_owned(),
                token_uri: v["token_uri"].as_str().map(str::to_owned),
                entries_uri: None,
                scope: None,
            }
        }
        (None, None) => return Err("no auth_config or auth_file".into()),
    };
    let token_uri = account
        .token_uri
        .as_deref()
        .unwrap_or("https://oauth2.googleapis.com/token");
    let scope = account.scope.as_ref().map_or_else(
        || "https://www.googleapis.com/auth/cloud-platform".to_owned(),
        |s| s.join(" "),
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let claims = serde_json::json!({
        "iss": account.client_email,
        "scope": scope,
        "aud": token_uri,
        "iat": now,
        "exp": now + 3600,
    });
    let signer = jsonwebtoken::EncodingKey::from_rsa_pem(account.private_key.as_bytes())
        .map_err(|e| format!("auth_config.private_key is not an RSA private key (PEM): {e}"))?;
    let assertion = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        &claims,
        &signer,
    )
    .map_err(|e| format!("cannot sign the token request: {e}"))?;
    let form = format!(
        "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={assertion}"
    );
    let (status, body) = sluice_proxy::fetch::request(
        "POST",
        token_uri,
        &[("Content-Type", "application/x-www-form-urlencoded")],
        form.into_bytes(),
        verify,
        DEADLINES,
    )
    .await?;
    let doc = json(&body, "the token answer")?;
    let token = match doc["access_token"].as_str() {
        Some(t) if status == 200 => t.to_owned(),
        _ => {
            return Err(format!(
                "{token_uri} answered {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
    };
    let entries = account
        .entries_uri
        .as_deref()
        .unwrap_or("https://secretmanager.googleapis.com/v1")
        .trim_end_matches('/');
    let url = format!(
        "{entries}/projects/{}/secrets/{name}/versions/latest:access",
        account.project_id
    );
    let bearer = format!("Bearer {token}");
    let (status, body) = sluice_proxy::fetch::request(
        "GET",
        &url,
        &[("Authorization", &bearer)],
        Vec::new(),
        verify,
        DEADLINES,
    )
    .await?;
    if status != 200 {
        return Err(format!(
            "{url} answered {status}: {}",
            String::from_utf8_lossy(&body)
        ));
    }
    let doc = json(&body, "gcp's answer")?;
    let data = doc["payload"]["data"]
        .as_str()
        .ok_or("gcp's answer has no payload.data")?;
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| format!("gcp's payload is not base64: {e}"))?;
    let secret = json(&raw, "gcp's secret")?;
    secret
        .get(key)
        .map(text)
        .ok_or_else(|| format!("gcp's secret {name} has no field \"{key}\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's published example (IAM ListUsers, "Create a signed AWS API request"): the
    /// canonical request's hash, the signature and the header.
    #[test]
    fn signature_v4_matches_aws_example() {
        let headers = sigv4(&SigV4 {
            method: "GET",
            access_key: "AKIDEXAMPLE",
            secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            session_token: None,
            region: "us-east-1",
            service: "iam",
            host: "iam.amazonaws.com",
            path: "/",
            query: "Action=ListUsers&Version=2010-05-08",
            target: None,
            content_type: "application/x-www-form-urlencoded; charset=utf-8",
            body: b"",
            amz_date: "20150830T123600Z",
        });
        let auth = &headers
            .iter()
            .find(|(k, _)| *k == "authorization")
            .unwrap()
            .1;
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
        assert!(headers.iter().all(|(k, _)| *k != "host"));
    }

    #[test]
    fn values_are_reused_then_stand_in_then_dropped() {
        let mut c = Cache::default();
        let t0 = Instant::now();
        let key = ("vault/1".to_owned(), "jack/key".to_owned());
        c.insert(key.clone(), "v".into(), t0);
        assert_eq!(c.fresh(&key, t0 + KEEP / 2).as_deref(), Some("v"));
        assert_eq!(c.fresh(&key, t0 + KEEP), None);
        assert_eq!(c.stale(&key, t0 + KEEP).as_deref(), Some("v"));
        assert_eq!(c.stale(&key, t0 + STALE), None);
        // Inserting drops what is too old to stand in.
        let other = ("aws/1".to_owned(), "x/y".to_owned());
        c.insert(other.clone(), "w".into(), t0 + STALE);
        assert_eq!(c.0.len(), 1);
        assert_eq!(c.fresh(&other, t0 + STALE).as_deref(), Some("w"));
    }

    #[test]
    fn amz_dates() {
        assert_eq!(amz_date(1_440_938_160), "20150830T123600Z");
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(951_782_400), "20000229T000000Z");
    }
}
