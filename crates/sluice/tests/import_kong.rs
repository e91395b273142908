//! `sluice import kong`: a decK file written from decK's documentation (tests/kong/kong.yaml)
//! translated by the binary, what it could not translate listed with its path, and the
//! translation served by a live gateway in front of a test origin: the routes match as Kong's
//! do, paths are stripped and prefixed as Kong's path handling does, credentials, ACL groups,
//! limits, CORS and header rewrites behave as the Kong plugins they came from.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use base64::Engine as _;
use hyper::Method;
use sluice_testkit::{Gateway, TestOrigin};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

fn import(deck: &str) -> (bool, String, String) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("kong-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let file = dir.join(format!("kong-{n}.yaml"));
    std::fs::write(&file, deck).unwrap();
    let out = Command::new(BIN)
        .args(["import", "kong"])
        .arg(&file)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[tokio::test]
async fn a_deck_file_is_translated_and_served_as_kong_serves_it() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let deck =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kong/kong.yaml"))
            .unwrap()
            .replace("ORIGIN", &origin.node());
    let (ok, yaml, notes) = import(&deck);
    assert!(ok, "{notes}");
    // Each thing left out, once, with its path in the decK file.
    let mut lines: Vec<&str> = notes.lines().collect();
    lines.sort_unstable();
    let expected = [
        "not translated: consumers[1].hmacauth_credentials: not translated (no equivalent credential here)",
        "not translated: plugins[2]: datadog has no equivalent in Sluice: left out",
        "not translated: services[0].routes[0].plugins[0].config.hour: one window per limit-count: only the shortest (minute) is translated",
        "not translated: services[0].routes[0].plugins[1].config.append.querystring: not translated",
        "not translated: services[1].routes[0].plugins[1].config.remove.json: not translated",
        "not translated: services[1].routes[0].strip_path: a regex path is not stripped: the upstream gets the whole path",
        "not translated: services[2]: protocol \"tcp\": a stream service, not translated (Sluice's stream_routes take TCP and UDP by hand)",
    ];
    assert_eq!(lines, expected, "the notes:\n{notes}");
    assert!(
        yaml.starts_with("# Translated from Kong's decK file"),
        "{yaml}"
    );
    assert!(yaml.contains("# Not translated: 7 item(s)"), "{yaml}");

    let gw = Gateway::start(&yaml);
    let cl = gw.client();

    // key-auth on the service (apikey, hidden from the upstream); the prefix stripped and the
    // service's path put in front; request-transformer's headers.
    let r = cl.get("/users/42").await;
    assert_eq!(r.status, 401, "no key");
    let r = cl
        .send(
            Method::GET,
            "/users/42?x=1",
            &[("apikey", "alice-key"), ("x-debug", "1")],
            "",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = origin.last();
    assert_eq!(seen.uri, "/v1/42?x=1", "strip_path and the service's path");
    assert_eq!(seen.header("x-from-kong"), Some("users"));
    assert!(!seen.has_header("x-debug"), "removed");
    assert!(!seen.has_header("apikey"), "hide_credentials");
    // Kong's prefix match: the path itself and anything below.
    let r = cl
        .send(Method::GET, "/users", &[("apikey", "alice-key")], "")
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(origin.last().uri, "/v1");
    // A consumer's second key (a credential of its own).
    let r = cl
        .send(
            Method::GET,
            "/users/1",
            &[("apikey", "alice-second-key")],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    // rate-limiting's minute window (3), per consumer: alice has used 3.
    let r = cl
        .send(Method::GET, "/users/1", &[("apikey", "alice-key")], "")
        .await;
    assert_eq!(r.status, 429, "the fourth request of the minute");
    let r = cl
        .send(Method::GET, "/users/1", &[("apikey", "bob-key")], "")
        .await;
    assert_eq!(r.status, 200, "another consumer's count");
    assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
    // methods: [GET, POST]
    let r = cl
        .send(Method::DELETE, "/users/1", &[("apikey", "bob-key")], "")
        .await;
    assert_ne!(r.status, 200);

    // acl's allow: [admins]: alice is in the group, bob is not; strip_path false.
    let r = cl
        .send(Method::GET, "/admin/x", &[("apikey", "alice-key")], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        origin.last().uri,
        "/v1/admin/x",
        "not stripped, the service's path in front"
    );
    let r = cl
        .send(Method::GET, "/admin/x", &[("apikey", "bob-key")], "")
        .await;
    assert_eq!(r.status, 403, "{}", r.text());

    // The regex route: its host, its header values, its upstream's targets.
    let shop = [("host", "shop.example.com"), ("x-version", "v2")];
    let r = cl.send(Method::GET, "/orders/17", &shop, "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(origin.last().uri, "/orders/17");
    assert_eq!(
        r.header("x-served-by"),
        Some("sluice"),
        "response-transformer"
    );
    let r = cl.send(Method::GET, "/orders/17/items", &shop, "").await;
    assert_eq!(r.status, 404, "the regex is anchored at its end");
    let r = cl
        .send(
            Method::GET,
            "/orders/17",
            &[("host", "shop.example.com"), ("x-version", "v3")],
            "",
        )
        .await;
    assert_eq!(r.status, 404, "a header value not listed");
    let r = cl
        .send(
            Method::GET,
            "/orders/17",
            &[("host", "other.example.com"), ("x-version", "v1")],
            "",
        )
        .await;
    assert_eq!(r.status, 404, "another host");
    // cors with credentials: the one origin, allowed with credentials.
    let r = cl
        .send(
            Method::OPTIONS,
            "/orders/17",
            &[
                ("host", "shop.example.com"),
                ("x-version", "v1"),
                ("origin", "https://shop.example.com"),
                ("access-control-request-method", "POST"),
            ],
            "",
        )
        .await;
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://shop.example.com"),
        "{:?}",
        r.headers
    );
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(r.header("access-control-max-age"), Some("600"));

    // The global correlation-id, echoed to the client.
    let r = cl
        .send(Method::GET, "/users/9", &[("apikey", "bob-key")], "")
        .await;
    assert!(
        r.header("x-request-id").is_some_and(|v| v.len() == 36),
        "{:?}",
        r.headers
    );
    assert!(origin.last().has_header("x-request-id"));
    gw.shutdown();
}

#[tokio::test]
async fn bob_signs_in_with_basic_auth_and_a_jwt_where_routes_ask_for_them() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let deck = format!(
        r#"_format_version: "3.0"
services:
  - name: s
    url: http://{o}
    routes:
      - {{name: basic, paths: [/basic], plugins: [{{name: basic-auth}}]}}
      - {{name: jwt, paths: [/jwt], plugins: [{{name: jwt}}]}}
consumers:
  - username: bob
    basicauth_credentials: [{{username: bob, password: bob-password}}]
    jwt_secrets: [{{key: bob-issuer, secret: bob-jwt-secret-that-is-long-enough}}]
"#,
        o = origin.node()
    );
    let (ok, yaml, notes) = import(&deck);
    assert!(ok, "{notes}");
    assert_eq!(notes, "", "everything translated");
    let gw = Gateway::start(&yaml);
    let cl = gw.client();
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("bob:bob-password")
    );
    let r = cl
        .send(Method::GET, "/basic/x", &[("authorization", &basic)], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(origin.last().uri, "/x");
    let r = cl
        .send(
            Method::GET,
            "/basic/x",
            &[("authorization", "Basic Ym9iOm5v")],
            "",
        )
        .await;
    assert_eq!(r.status, 401);
    // Kong's jwt finds the consumer by the `iss` claim.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &serde_json::json!({"iss": "bob-issuer", "exp": now + 600}),
        &jsonwebtoken::EncodingKey::from_secret(b"bob-jwt-secret-that-is-long-enough"),
    )
    .unwrap();
    let bearer = format!("Bearer {token}");
    let r = cl
        .send(Method::GET, "/jwt/y", &[("authorization", &bearer)], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = cl.get("/jwt/y").await;
    assert_eq!(r.status, 401);
    gw.shutdown();
}

#[test]
fn files_that_are_not_decks_are_refused_with_their_reason() {
    for (deck, says) in [
        ("services: []\n", "_format_version: missing"),
        (
            "_format_version: \"1.1\"\n",
            "only decK's 3.0 format is read",
        ),
        ("- a\n- b\n", "not a decK file"),
        (
            "_format_version: \"3.0\"\nservices: [{name: s, url: \"http://127.0.0.1:1\", routes: [{name: r, paths: [/r], plugins: [{name: ip-restriction, config: {allow: [not-an-address]}}]}]}]\n",
            "the translation is not a valid configuration",
        ),
    ] {
        let (ok, _, err) = import(deck);
        assert!(!ok, "{deck} was accepted");
        assert!(err.contains(says), "{deck}: {err}");
    }
}

#[test]
fn entries_of_the_wrong_shape_are_listed_not_a_crash() {
    let (ok, yaml, notes) = import(
        "_format_version: \"3.0\"\nupstreams: [just-a-name]\nservices: [42, {name: s, host: 127.0.0.1, routes: [oops]}]\nconsumers: [[1]]\nplugins: [{name: rate-limiting, service: missing, config: {minute: 1}}]\n",
    );
    assert!(ok, "{notes}");
    for line in [
        "upstreams[0]: an upstream without a name",
        "services[0]: no host and no url: the service is left out",
        "consumers[0]: a consumer without a username or custom_id",
        "plugins[0]: its service \"missing\" is not in the file",
    ] {
        assert!(notes.contains(line), "no {line:?} in:\n{notes}");
    }
    assert!(yaml.contains("id: s"), "{yaml}");
}
