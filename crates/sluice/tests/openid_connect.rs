//! APISIX's `openid-connect` through a live gateway, against a real OpenID provider: panva's
//! oidc-provider (OpenID Certified) on Node.js, started by the test (test.sh installs it
//! into tests/oidc/node_modules). Bearer tokens are checked by the provider's keys (JWKS) and
//! by introspection; browsers sign in through the authorization-code flow in Debian's
//! Chromium, and sign out.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use base64::Engine as _;
use hyper::Method;
use sluice_testkit::{Gateway, TestOrigin};

const SECRET: &str = "sluice-client-secret";

/// The provider, stopped when dropped.
struct Provider {
    child: Child,
    port: u16,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn oidc_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oidc")
}

impl Provider {
    fn start(port: u16, redirect_uri: &str, post_logout: &str) -> Provider {
        let dir = oidc_dir();
        assert!(
            dir.join("node_modules/oidc-provider").exists(),
            "oidc-provider is not installed: run ./test.sh (it runs npm ci in {})",
            dir.display()
        );
        let child = Command::new("node")
            .arg(dir.join("provider.mjs"))
            .args([&port.to_string(), redirect_uri, post_logout])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs (test.sh installs nodejs)");
        common::wait_for_port(port, "the OpenID provider");
        Provider { child, port }
    }

    fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An access token by the client-credentials grant, for `resource` (`jwt` or `opaque`).
    async fn token(&self, resource: &str, scope: &str) -> String {
        let client = reqwest_like_post(
            &format!("{}/token", self.issuer()),
            &format!("grant_type=client_credentials&scope={scope}&resource=urn:sluice:{resource}"),
        )
        .await;
        client["access_token"].as_str().unwrap().to_owned()
    }
}

/// POSTs a form with the client's Basic credentials (curl, as an operator would).
async fn reqwest_like_post(url: &str, form: &str) -> serde_json::Value {
    let (url, form) = (url.to_owned(), form.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "10",
                "-u",
                &format!("sluice:{SECRET}"),
                "-d",
                &form,
                &url,
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn bearer_config(origin: &TestOrigin, provider_port: u16) -> String {
    let discovery = format!("http://127.0.0.1:{provider_port}/.well-known/openid-configuration");
    format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /jwks/*
    upstream_id: o
    plugins:
      openid-connect: {{client_id: sluice, discovery: "{discovery}", bearer_only: true, use_jwks: true}}
  - uri: /scoped/*
    upstream_id: o
    plugins:
      openid-connect: {{client_id: sluice, discovery: "{discovery}", bearer_only: true, use_jwks: true, required_scopes: [write], claim_validator: {{audience: {{match_with_client_id: false, required: true}}}}}}
  - uri: /introspect/*
    upstream_id: o
    plugins:
      openid-connect: {{client_id: sluice, client_secret: {SECRET}, discovery: "{discovery}", bearer_only: true, realm: shop, access_token_in_authorization_header: true}}
"#,
        o = origin.node()
    )
}

#[tokio::test]
async fn bearer_tokens_are_checked_by_the_provider_s_keys_and_by_introspection() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let port = common::free_port();
    let gw = Gateway::start(&bearer_config(&origin, port));
    let op = Provider::start(port, "http://127.0.0.1:1/cb", "http://127.0.0.1:1/bye");
    let cl = gw.client();
    let send =
        |path: &'static str, auth: Option<String>, extra: Option<(&'static str, &'static str)>| {
            let cl = cl.clone();
            async move {
                let mut h: Vec<(&str, String)> = Vec::new();
                if let Some(a) = auth {
                    h.push(("authorization", a));
                }
                if let Some((n, v)) = extra {
                    h.push((n, v.to_owned()));
                }
                let h: Vec<(&str, &str)> = h.iter().map(|(n, v)| (*n, v.as_str())).collect();
                cl.send(Method::GET, path, &h, "").await
            }
        };

    // A JWT access token, checked by the provider's keys (fetched through its discovery).
    let jwt = op.token("jwt", "read").await;
    let r = send(
        "/jwks/a",
        Some(format!("Bearer {jwt}")),
        Some(("x-userinfo", "forged")),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = origin.last();
    assert_eq!(seen.header("x-access-token"), Some(jwt.as_str()));
    let info: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(seen.header("x-userinfo").unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(info["client_id"], "sluice", "the token's claims: {info}");
    assert_eq!(info["iss"], op.issuer());
    // No token, a tampered one, one for another issuer's key.
    let r = send("/jwks/a", None, None).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"apisix\"")
    );
    let mut tampered = jwt.clone();
    tampered.insert(jwt.len() - 5, 'A');
    tampered.truncate(jwt.len());
    let r = send("/jwks/a", Some(format!("Bearer {tampered}")), None).await;
    assert_eq!(r.status, 401);
    let challenge = r.header("www-authenticate").unwrap();
    assert!(
        challenge
            .starts_with("Bearer realm=\"apisix\", error=\"invalid_token\", error_description=\""),
        "{challenge}"
    );
    let r = send("/jwks/a", Some("Bearer".into()), None).await;
    assert_eq!(r.status, 400, "a malformed Authorization");
    // Scopes: a read token where write is required.
    let r = send("/scoped/a", Some(format!("Bearer {jwt}")), None).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json(),
        serde_json::json!({"error": "required scopes write not present"})
    );
    let writer = op.token("jwt", "read write").await;
    assert_eq!(
        send("/scoped/a", Some(format!("Bearer {writer}")), None)
            .await
            .status,
        200
    );

    // An opaque token, checked by introspection (the client authenticated with its secret).
    let opaque = op.token("opaque", "read").await;
    assert!(!opaque.contains('.'), "opaque: {opaque}");
    let r = send("/introspect/a", Some(format!("Bearer {opaque}")), None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        origin.last().header("authorization"),
        Some(&*format!("Bearer {opaque}"))
    );
    let r = send("/introspect/a", Some("Bearer not-a-token".into()), None).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"shop\", error=\"invalid_token\", error_description=\"invalid token\"")
    );
    // The client's own X-Access-Token is a bearer token too, as in APISIX.
    let r = send("/introspect/a", None, Some(("x-access-token", "nope"))).await;
    assert_eq!(r.status, 401);
    drop(op);
    // The provider gone: introspection cannot answer, the request is refused (the client is
    // not told the provider's address); the keys already fetched still check tokens.
    let r = send("/introspect/a", Some(format!("Bearer {opaque}")), None).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some(
            "Bearer realm=\"shop\", error=\"invalid_token\", error_description=\"token introspection unavailable\""
        )
    );
    let r = send("/jwks/a", Some(format!("Bearer {jwt}")), None).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

/// A person signs in through the provider's login page in Chromium, uses the app on the
/// session alone, and signs out; the node sees who they are and never the session cookie's
/// contents in clear.
#[tokio::test]
async fn a_browser_signs_in_and_out_through_the_authorization_code_flow() {
    let origin = TestOrigin::http1().route("/", "the app").run().await;
    let port = common::free_port();
    let discovery = format!("http://127.0.0.1:{port}/.well-known/openid-configuration");
    let config = |gw_port: u16| {
        format!(
            r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /app/*
    upstream_id: o
    plugins:
      openid-connect:
        client_id: sluice
        client_secret: {SECRET}
        discovery: "{discovery}"
        scope: openid email profile
        redirect_uri: /app/callback
        logout_path: /app/logout
        post_logout_redirect_uri: "http://127.0.0.1:{gw_port}/bye"
        use_pkce: true
        use_nonce: true
        session: {{secret: "a-secret-of-32-characters-long!!"}}
  - uri: /bye
    upstream_id: o
"#,
            o = origin.node()
        )
    };
    let gw = Gateway::start(&config(0));
    // The route's post_logout_redirect_uri names the gateway's port, known only now.
    let gw_port = gw.addr().port();
    gw.reload(&config(gw_port)).unwrap();
    let base = format!("http://127.0.0.1:{gw_port}");
    let _op = Provider::start(
        port,
        &format!("{base}/app/callback"),
        &format!("{base}/bye"),
    );

    // Without a browser: a script's request is refused, a page's is sent to the provider.
    let cl = gw.client();
    let r = cl
        .send(
            Method::GET,
            "/app/page",
            &[("x-requested-with", "XMLHttpRequest")],
            "",
        )
        .await;
    assert_eq!(r.status, 401);
    let r = cl.send(Method::GET, "/app/page", &[], "").await;
    assert_eq!(r.status, 302);
    let to = r.header("location").unwrap();
    assert!(to.starts_with(&format!("http://127.0.0.1:{port}/auth?response_type=code&client_id=sluice&redirect_uri=http%3A%2F%2F127.0.0.1%3A{gw_port}%2Fapp%2Fcallback")), "{to}");
    assert!(
        to.contains("code_challenge_method=S256") && to.contains("&nonce="),
        "{to}"
    );
    let cookie = r.header("set-cookie").unwrap();
    assert!(
        cookie.starts_with("session=")
            && cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    // A callback whose state is not the session's is refused.
    let r = cl
        .send(
            Method::GET,
            "/app/callback?code=x&state=forged",
            &[("cookie", cookie.split(';').next().unwrap())],
            "",
        )
        .await;
    assert_eq!(r.status, 500);

    let dir = oidc_dir();
    let app = format!("{base}/app/page");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(dir.join("browser.mjs"))
            .args([&app, &format!("{base}/app/logout"), "alice"])
            .output()
            .expect("node runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "SIGNED-IN the app");
    assert_eq!(lines[1], "AGAIN the app");
    assert_eq!(
        lines[2],
        format!("SIGNED-OUT http://127.0.0.1:{gw_port}/bye")
    );
    assert_eq!(lines[3], "LOGIN-AGAIN");

    // What the node saw of the signed-in person.
    let seen: Vec<_> = origin
        .requests()
        .into_iter()
        .filter(|r| r.uri == "/app/page")
        .collect();
    assert_eq!(seen.len(), 2, "the page, twice");
    let decode = |h: &str| -> serde_json::Value {
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(h).unwrap())
            .unwrap()
    };
    let user = decode(seen[0].header("x-userinfo").unwrap());
    assert_eq!(user["sub"], "alice");
    assert_eq!(user["email"], "alice@example.com");
    let id = decode(seen[0].header("x-id-token").unwrap());
    assert_eq!(id["sub"], "alice");
    assert_eq!(id["aud"], "sluice");
    assert!(seen[0].header("x-access-token").is_some());
    let cookies = seen[0].header("cookie").unwrap_or_default();
    assert!(
        !cookies.contains("alice"),
        "the session is encrypted: {cookies}"
    );
}

/// Python's `cryptography` makes an RSA key and RS256 tokens (not the code under test): the
/// public key's PEM, then tokens one per line.
const KEY_AND_TOKENS: &str = r#"
import base64, json, time
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
def token(claims, alg="RS256"):
    head = b64(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = key.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{head}.{body}.{b64(sig)}"
now = int(time.time())
print(json.dumps(pem.decode()))
print(token({"iss": "https://issuer.test", "sub": "svc", "scope": "read", "exp": now + 60}))
print(token({"iss": "https://other.test", "sub": "svc", "exp": now + 60}))
print(token({"sub": "svc", "exp": now + 60}))
print(token({"iss": "https://issuer.test", "sub": "svc", "exp": now - 3600}))
"#;

/// `public_key`: tokens are checked by the key alone (no provider is asked): a good one goes
/// on; another issuer's, one without `iss` and an expired one are refused.
#[tokio::test]
async fn bearer_tokens_are_checked_by_a_public_key() {
    let out = std::process::Command::new("python3")
        .args(["-c", KEY_AND_TOKENS])
        .output()
        .expect("python3 runs (test.sh installs python3-cryptography)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let pem: String = serde_json::from_str(lines.next().unwrap()).unwrap();
    let tokens: Vec<&str> = lines.collect();
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /k/*
    upstream_id: o
    plugins:
      openid-connect:
        client_id: svc
        discovery: http://127.0.0.1:1/.well-known/openid-configuration
        bearer_only: true
        public_key: {pem}
        token_signing_alg_values_expected: RS256
        claim_validator: {{issuer: {{valid_issuers: ["https://issuer.test"]}}}}
"#,
        o = origin.node(),
        pem = serde_json::to_string(&pem).unwrap()
    ));
    let cl = gw.client();
    let call = |t: &str| {
        let (cl, auth) = (cl.clone(), format!("Bearer {t}"));
        async move {
            cl.send(Method::GET, "/k/a", &[("authorization", &auth)], "")
                .await
        }
    };
    let r = call(tokens[0]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(origin.last().header("x-access-token"), Some(tokens[0]));
    for (t, why) in [
        (tokens[1], "ssuer"),
        (tokens[2], "Missing required claim: iss"),
        (tokens[3], "xpired"),
    ] {
        let r = call(t).await;
        assert_eq!(r.status, 401, "{why}");
        let challenge = r.header("www-authenticate").unwrap();
        assert!(challenge.contains(why), "{challenge}");
    }
}
