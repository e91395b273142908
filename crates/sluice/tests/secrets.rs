//! APISIX's secret managers: `$secret://` references in plugin settings, read when the
//! configuration loads.
//!
//! - AWS Secrets Manager: moto's server (PyPI's `moto[server]`, installed by test.sh), an AWS
//!   emulator that speaks the real API; Sluice signs its calls with Signature Version 4.
//! - Vault and GCP Secret Manager cannot run here (no package; Vault's module cannot be built
//!   from the Go proxy; GCP has no emulator): each is a small server in this file answering
//!   the two or three calls APISIX's managers make, as their documentation describes them.
//!   They check what the real ones check (the token; the signed JWT of the service account).

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::TestNode;
use hyper::Method;
use serde_json::json;
use sluice_testkit::TestOrigin;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// moto's server: from test.sh's virtualenv, or on the PATH.
fn moto_server() -> PathBuf {
    let venv =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/moto/bin/moto_server");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("moto_server")
}

struct Moto {
    child: std::process::Child,
    url: String,
}

impl Moto {
    fn start() -> Moto {
        let port = common::free_port();
        let child = std::process::Command::new(moto_server())
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run moto_server ({e}): ./test.sh installs it (pip install 'moto[server]' into target/tools/moto)")
            });
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "moto did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Moto { child, url }
    }

    /// Creates a secret (AWS's CreateSecret, as the AWS CLI sends it).
    fn create(&self, name: &str, value: &serde_json::Value) {
        let body = json!({"Name": name, "SecretString": value.to_string()}).to_string();
        // moto's port may take connections a moment before it answers them (Python starting
        // under a loaded machine): asked again for up to 15 s.
        let mut last = String::new();
        for _ in 0..50 {
            let out = std::process::Command::new("curl")
                .args(["-sS", "--max-time", "5", "-X", "POST", &self.url])
                .args(["-H", "X-Amz-Target: secretsmanager.CreateSecret"])
                .args(["-H", "Content-Type: application/x-amz-json-1.1"])
                .args(["-H", "Authorization: AWS4-HMAC-SHA256 Credential=access/20240101/us-east-1/secretsmanager/aws4_request, SignedHeaders=host, Signature=0"])
                .args(["--data", &body])
                .output()
                .unwrap();
            let answer = String::from_utf8_lossy(&out.stdout);
            // (A try whose answer was lost may have created it already.)
            if answer.contains("\"ARN\"") || answer.contains("ResourceExistsException") {
                return;
            }
            last = format!("{answer}{}", String::from_utf8_lossy(&out.stderr));
            std::thread::sleep(Duration::from_millis(300));
        }
        panic!("CreateSecret answered {last}");
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn routes(origin: &TestOrigin) -> String {
    format!(
        "routes:\n  - {{id: r1, uri: /anything, plugins: {{key-auth: {{}}}}, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        origin.node()
    )
}

async fn status_with_key(node: &TestNode, key: &str) -> u16 {
    node.proxy()
        .send(Method::GET, "/anything", &[("apikey", key)], "")
        .await
        .status
        .as_u16()
}

/// APISIX's secret.md, AWS: a consumer's key-auth key read from AWS Secrets Manager (moto),
/// by the file and through the admin API; a name with slashes read as APISIX reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_auth_keys_come_from_aws_secrets_manager() {
    let moto = Moto::start();
    moto.create("jack", &json!({"auth-key": "value"}));
    moto.create("john/secret", &json!({"john-key-auth": "john-value"}));
    let origin = TestOrigin::http1().run().await;
    let secrets = format!(
        "secrets:\n  - {{id: aws/1, endpoint_url: \"{}\", region: us-east-1, access_key_id: access, secret_access_key: secret, session_token: token}}\n",
        moto.url
    );
    let node = TestNode::start(&format!(
        "{secrets}{}consumers:\n  - {{username: jack, plugins: {{key-auth: {{key: \"$secret://aws/1/jack/auth-key\"}}}}}}\n  - {{username: john, plugins: {{key-auth: {{key: \"$secret://aws/1/john/secret/john-key-auth\"}}}}}}\n",
        routes(&origin)
    ));
    assert_eq!(status_with_key(&node, "value").await, 200);
    assert_eq!(status_with_key(&node, "john-value").await, 200);
    assert_eq!(
        status_with_key(&node, "$secret://aws/1/jack/auth-key").await,
        401
    );
    assert_eq!(status_with_key(&node, "wrong").await, 401);

    // Through APISIX's admin API: the manager, then a consumer that reads from it.
    moto.create("rose", &json!({"auth-key": "rose-value"}));
    let (status, answer) = node
        .admin(
            Method::PUT,
            "/apisix/admin/secrets/aws/2",
            Some(json!({"endpoint_url": moto.url, "access_key_id": "access", "secret_access_key": "secret"})),
        )
        .await;
    assert_eq!(status.as_u16(), 201, "{answer}");
    assert_eq!(answer["key"], "/apisix/secrets/aws/2");
    assert_eq!(answer["value"]["id"], "aws/2");
    let (status, answer) = node
        .admin(
            Method::PUT,
            "/apisix/admin/consumers",
            Some(json!({"username": "rose", "plugins": {"key-auth": {"key": "$secret://aws/2/rose/auth-key"}}})),
        )
        .await;
    assert!(status.is_success(), "{answer}");
    // The consumer keeps the reference, not the secret.
    let (_, shown) = node
        .admin(Method::GET, "/apisix/admin/consumers/rose", None)
        .await;
    assert_eq!(
        shown["value"]["plugins"]["key-auth"]["key"],
        "$secret://aws/2/rose/auth-key"
    );
    let (status, got) = node
        .admin(Method::GET, "/apisix/admin/secrets/aws/2", None)
        .await;
    assert_eq!(status.as_u16(), 200);
    assert_eq!(got["value"]["endpoint_url"], moto.url);
    assert_eq!(status_with_key(&node, "rose-value").await, 200);

    // A secret that does not exist: refused with where and why, nothing applied.
    let (status, answer) = node
        .admin(
            Method::PUT,
            "/apisix/admin/consumers",
            Some(json!({"username": "nobody", "plugins": {"key-auth": {"key": "$secret://aws/2/nobody/auth-key"}}})),
        )
        .await;
    assert_eq!(status.as_u16(), 400, "{answer}");
    let text = answer.to_string();
    assert!(
        text.contains("cannot read \\\"$secret://aws/2/nobody/auth-key\\\" from aws/2: aws has no secret for nobody/auth-key"),
        "{text}"
    );
    // A manager in use is not deleted from under its consumers.
    let (status, _) = node
        .admin(Method::DELETE, "/apisix/admin/secrets/aws/2", None)
        .await;
    assert_eq!(status.as_u16(), 400);
    assert_eq!(status_with_key(&node, "rose-value").await, 200);
}

/// `sluice validate` reads the references as `run` would; `--config-only` only checks them.
#[test]
fn validate_reads_secrets_unless_config_only() {
    let yaml = "secrets:\n  - {id: aws/1, endpoint_url: \"http://127.0.0.1:9\", access_key_id: a, secret_access_key: s}\nconsumers:\n  - {username: jack, plugins: {key-auth: {key: \"$secret://aws/1/jack/auth-key\"}}}\n";
    let (ok, out) = common::sluice_validate(yaml, &["--config-only"]);
    assert!(ok, "{out}");
    let (ok, out) = common::sluice_validate(yaml, &[]);
    assert!(!ok);
    assert!(
        out.contains("consumers[0].plugins.key-auth.key: cannot read \"$secret://aws/1/jack/auth-key\" from aws/1: cannot connect to 127.0.0.1:9"),
        "{out}"
    );
}

/// A stand-in for one HTTP service: answers each request with `answer(method, path, headers,
/// body)`.
async fn stand_in(
    answer: impl Fn(&str, &str, &str, &str) -> (u16, String) + Send + Sync + 'static,
) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head, body) = loop {
                    let n = s.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        let len = head
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        while buf.len() < end + 4 + len {
                            let n = s.read(&mut chunk).await.unwrap_or(0);
                            if n == 0 {
                                return;
                            }
                            buf.extend_from_slice(&chunk[..n]);
                        }
                        break (
                            head,
                            String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned(),
                        );
                    }
                };
                let mut line = head.lines().next().unwrap_or_default().split(' ');
                let (method, path) = (
                    line.next().unwrap_or_default(),
                    line.next().unwrap_or_default(),
                );
                let (status, text) = answer(method, path, &head, &body);
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                            text.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    format!("http://{addr}")
}

/// APISIX's secret.md, Vault: `GET <uri>/v1/<prefix>/<name>` with the token; `data.<key>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_auth_keys_come_from_vault() {
    let vault = stand_in(|method, path, head, _| {
        let token_ok = head
            .lines()
            .any(|l| l.eq_ignore_ascii_case("x-vault-token: root"));
        match (method, path, token_ok) {
            (_, _, false) => (403, r#"{"errors":["permission denied"]}"#.into()),
            ("GET", "/v1/kv/apisix/jack", true) => {
                (200, r#"{"data":{"auth-key":"vault-value"}}"#.into())
            }
            _ => (404, r#"{"errors":[]}"#.into()),
        }
    })
    .await;
    let origin = TestOrigin::http1().run().await;
    let node = TestNode::start(&format!(
        "secrets:\n  - {{id: vault/1, uri: \"{vault}\", prefix: kv/apisix, token: root}}\n{}consumers:\n  - {{username: jack, plugins: {{key-auth: {{key: \"$secret://vault/1/jack/auth-key\"}}}}}}\n",
        routes(&origin)
    ));
    assert_eq!(status_with_key(&node, "vault-value").await, 200);
    assert_eq!(status_with_key(&node, "other").await, 401);
    // A wrong token: refused, with Vault's answer.
    let (status, answer) = node
        .admin(
            Method::PUT,
            "/apisix/admin/secrets/vault/2",
            Some(json!({"uri": vault, "prefix": "kv/apisix", "token": "nope"})),
        )
        .await;
    assert_eq!(status.as_u16(), 201, "{answer}");
    let (status, answer) = node
        .admin(
            Method::PUT,
            "/apisix/admin/consumers",
            Some(json!({"username": "rose", "plugins": {"key-auth": {"key": "$secret://vault/2/jack/auth-key"}}})),
        )
        .await;
    assert_eq!(status.as_u16(), 400);
    assert!(
        answer.to_string().contains("vault answered 403"),
        "{answer}"
    );
}

/// APISIX's secret.md, GCP: a token for the service account (an RS256 JWT it signs, checked
/// here with its public key), then the secret's latest version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_auth_keys_come_from_gcp_secret_manager() {
    // A service account's key, as GCP issues them: RSA, PKCS#8 PEM.
    let openssl = |args: &[&str], input: &[u8]| {
        use std::io::Write;
        let mut child = std::process::Command::new("openssl")
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
    };
    let private_pem = openssl(
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ],
        b"",
    );
    let public_pem = openssl(&["pkey", "-pubout"], private_pem.as_bytes());
    assert!(private_pem.contains("BEGIN PRIVATE KEY") && public_pem.contains("BEGIN PUBLIC KEY"));
    let gcp = stand_in(move |method, path, head, body| {
        if method == "POST" && path == "/token" {
            let assertion = body.split("assertion=").nth(1).unwrap_or_default();
            let decoding = jsonwebtoken::DecodingKey::from_rsa_pem(public_pem.as_bytes()).unwrap();
            let mut check = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
            check.set_audience(&[format!("http://{}/token", host_of(head))]);
            return match jsonwebtoken::decode::<serde_json::Value>(assertion, &decoding, &check) {
                Ok(t) if t.claims["iss"] == "sa@apisix.iam.gserviceaccount.com" => (
                    200,
                    r#"{"access_token":"tok","expires_in":3600,"token_type":"Bearer"}"#.into(),
                ),
                other => (400, format!("{{\"error\":\"invalid_grant: {other:?}\"}}")),
            };
        }
        let authorized = head
            .lines()
            .any(|l| l.eq_ignore_ascii_case("authorization: bearer tok"));
        match (method, path, authorized) {
            ("GET", "/v1/projects/apisix-project/secrets/jack/versions/latest:access", true) => {
                use base64::Engine;
                let data =
                    base64::engine::general_purpose::STANDARD.encode(r#"{"auth-key":"gcp-value"}"#);
                (200, format!("{{\"payload\":{{\"data\":\"{data}\"}}}}"))
            }
            (_, _, false) => (401, "{}".into()),
            _ => (404, "{}".into()),
        }
    })
    .await;
    let origin = TestOrigin::http1().run().await;
    let pem = private_pem.replace('\n', "\\n");
    let node = TestNode::start(&format!(
        "secrets:\n  - id: gcp/1\n    auth_config: {{client_email: sa@apisix.iam.gserviceaccount.com, private_key: \"{pem}\", project_id: apisix-project, token_uri: \"{gcp}/token\", entries_uri: \"{gcp}/v1\"}}\n{}consumers:\n  - {{username: jack, plugins: {{key-auth: {{key: \"$secret://gcp/1/jack/auth-key\"}}}}}}\n",
        routes(&origin)
    ));
    assert_eq!(status_with_key(&node, "gcp-value").await, 200);
    assert_eq!(status_with_key(&node, "other").await, 401);
}

fn host_of(head: &str) -> String {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("host").then(|| v.trim().to_owned())
        })
        .unwrap_or_default()
}
