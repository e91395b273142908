//! APISIX's `multi-auth` through a live gateway: any one of its auth plugins lets a request in
//! (each with its own consumers' credentials), none answers APISIX's 401, and its list is
//! checked as each plugin would be on the route. (With ldap-auth, whose bind waits on a real
//! directory, in tests/ldap_auth.rs.)

#![allow(clippy::unwrap_used)]

mod common;

use base64::Engine as _;
use hyper::Method;
use sluice_testkit::{Gateway, TestOrigin};

/// An HS256 token for `key`, signed by Python's `hmac`.
fn python_token(key: &str, secret: &str) -> String {
    let script = r#"
import base64, hashlib, hmac, json, sys, time
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
h = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
p = b64(json.dumps({"key": sys.argv[1], "exp": int(time.time()) + 600}).encode())
s = b64(hmac.new(sys.argv[2].encode(), (h + "." + p).encode(), hashlib.sha256).digest())
print(h + "." + p + "." + s)
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, key, secret])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn any_one_of_the_listed_plugins_lets_a_request_in() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /a
    upstream_id: o
    plugins:
      multi-auth:
        auth_plugins:
          - key-auth: {{}}
          - basic-auth: {{hide_credentials: true}}
          - jwt-auth: {{realm: api}}
consumers:
  - {{username: alice, plugins: {{key-auth: {{key: alice-key}}}}}}
  - {{username: bob, plugins: {{basic-auth: {{username: bob, password: bob-pw}}}}}}
  - {{username: carol, plugins: {{jwt-auth: {{key: carol-key, secret: carol-secret}}}}}}
"#,
        o = origin.node()
    ));
    let cl = gw.client();
    let basic = |u: &str, p: &str| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
        )
    };
    let bearer = format!("Bearer {}", python_token("carol-key", "carol-secret"));
    for (header, value, who) in [
        ("apikey", "alice-key".to_owned(), "alice"),
        ("authorization", basic("bob", "bob-pw"), "bob"),
        ("authorization", bearer.clone(), "carol"),
    ] {
        let r = cl.send(Method::GET, "/a", &[(header, &value)], "").await;
        assert_eq!(r.status, 200, "{who}: {}", r.text());
        assert_eq!(origin.last().header("x-consumer-username"), Some(who));
    }
    // basic-auth's own hide_credentials applies when it is the one that succeeded.
    cl.send(
        Method::GET,
        "/a",
        &[("authorization", &basic("bob", "bob-pw"))],
        "",
    )
    .await;
    assert!(!origin.last().has_header("authorization"));
    // The first that succeeds wins: a valid key with a wrong password is alice's.
    let r = cl
        .send(
            Method::GET,
            "/a",
            &[
                ("apikey", "alice-key"),
                ("authorization", &basic("bob", "x")),
            ],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(origin.last().header("x-consumer-username"), Some("alice"));

    // None: APISIX's 401, with the last plugin's challenge.
    for headers in [
        vec![],
        vec![("apikey", "wrong".to_owned())],
        vec![("authorization", basic("bob", "wrong"))],
        vec![("authorization", format!("{bearer}x"))],
    ] {
        let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let r = cl.send(Method::GET, "/a", &h, "").await;
        assert_eq!(r.status, 401, "{headers:?}");
        assert_eq!(r.text().trim_end(), r#"{"message":"Authorization Failed"}"#);
        assert_eq!(r.header("www-authenticate"), Some(r#"Bearer realm="api""#));
    }
    gw.shutdown();
}

#[test]
fn the_listed_plugins_are_checked_where_they_stand() {
    let at = "routes[0].plugins.multi-auth";
    common::assert_refusals(
        "multi-auth",
        &[
            (
                "{auth_plugins: [{key-auth: {}}]}",
                format!("{at}.auth_plugins: must list at least two auth plugins"),
            ),
            (
                "{auth_plugins: [{key-auth: {}}, {cors: {}}]}",
                format!("{at}.auth_plugins[1].cors: is not an auth plugin"),
            ),
            (
                "{auth_plugins: [{key-auth: {}}, {nope: {}}]}",
                format!("{at}.auth_plugins[1].nope: unknown plugin"),
            ),
            (
                "{auth_plugins: [{key-auth: {}}, {multi-auth: {auth_plugins: []}}]}",
                format!("{at}.auth_plugins[1].multi-auth: is not an auth plugin"),
            ),
            (
                "{auth_plugins: [{key-auth: {header: \"a b\"}}, {basic-auth: {}}]}",
                format!("{at}.auth_plugins[0].key-auth.header: "),
            ),
            (
                "{auth_plugins: [{key-auth: {}, basic-auth: {}}, {jwt-auth: {}}]}",
                format!("{at}.auth_plugins[0]: must name exactly one plugin"),
            ),
        ],
    );
    let on_consumer = "consumers:\n  - {username: a, plugins: {multi-auth: {auth_plugins: [{key-auth: {}}, {basic-auth: {}}]}}}\n";
    let e = sluice_config::load_str_with(on_consumer, &*sluice_plugins::shared())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("consumers[0].plugins.multi-auth: multi-auth has no credentials of its own"),
        "{e}"
    );
}
