//! APISIX 3.x's `hmac-auth` through a live gateway, with every signature and digest computed
//! independently by Python's `hmac`, `hashlib` and `email.utils` (not by the code under test).

#![allow(clippy::unwrap_used)]

use hyper::Method;
use sluice_testkit::{Gateway, TestOrigin};

/// `Authorization` and `Date` for a request, signed by Python: the key id, the algorithm, the
/// headers signed (`@request-target` and names), the secret, the clock offset in seconds, and
/// extra headers (name, value) that are signed when listed.
fn python_sign(
    key_id: &str,
    algorithm: &str,
    headers: &str,
    secret: &str,
    offset: i64,
    target: &str,
    extra: &[(&str, &str)],
) -> (String, String) {
    let script = r#"
import base64, email.utils, hashlib, hmac, sys, time
key_id, algorithm, headers, secret, offset, target = sys.argv[1:7]
extra = dict(zip(sys.argv[7::2], sys.argv[8::2]))
date = email.utils.formatdate(time.time() + int(offset), usegmt=True)
values = dict(extra, date=date)
parts = [key_id]
for h in headers.split():
    if h == "@request-target":
        parts.append(target)
    elif h in values:
        parts.append(h + ": " + values[h])
message = "\n".join(parts) + "\n"
digest = {"hmac-sha1": hashlib.sha1, "hmac-sha256": hashlib.sha256, "hmac-sha512": hashlib.sha512}[algorithm]
signature = base64.b64encode(hmac.new(secret.encode(), message.encode(), digest).digest()).decode()
print('Signature keyId="%s",algorithm="%s",headers="%s",signature="%s"' % (key_id, algorithm, headers, signature))
print(date)
"#;
    let mut cmd = std::process::Command::new("python3");
    cmd.arg("-c").arg(script).args([
        key_id,
        algorithm,
        headers,
        secret,
        &offset.to_string(),
        target,
    ]);
    for (n, v) in extra {
        cmd.args([n, v]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    (
        lines.next().unwrap().to_owned(),
        lines.next().unwrap().to_owned(),
    )
}

/// `SHA-256=<base64>` of `body`, by Python.
fn python_digest(body: &str) -> String {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import base64,hashlib,sys; print('SHA-256=' + base64.b64encode(hashlib.sha256(sys.argv[1].encode()).digest()).decode())",
            body,
        ])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn hmac_auth_checks_signatures_the_clock_headers_and_bodies() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        "upstreams:
  - {{id: o, nodes: {{\"{o}\": 1}}}}
routes:
  - {{uri: /a, upstream_id: o, plugins: {{hmac-auth: {{}}}}}}
  - {{uri: /strict, upstream_id: o, plugins: {{hmac-auth: {{allowed_algorithms: [hmac-sha512], signed_headers: [date, x-custom], clock_skew: 60, hide_credentials: true}}}}}}
  - {{uri: /body, upstream_id: o, plugins: {{hmac-auth: {{validate_request_body: true, max_req_body_size: 16}}}}}}
  - {{uri: /multi-body, upstream_id: o, plugins: {{multi-auth: {{auth_plugins: [{{key-auth: {{}}}}, {{hmac-auth: {{validate_request_body: true}}}}]}}}}}}
  - {{uri: /open, upstream_id: o, plugins: {{hmac-auth: {{anonymous_consumer: guest, realm: api, hide_credentials: true}}}}}}
consumers:
  - username: alice
    credentials:
      - {{id: c1, plugins: {{hmac-auth: {{key_id: alice-key, secret_key: alice-secret}}}}}}
  - username: bob
    plugins: {{hmac-auth: {{key_id: bob-key, secret_key: bob-secret}}}}
  - username: guest
",
        o = origin.node()
    ));
    let cl = gw.client();
    let send = |method: Method,
                path: &'static str,
                headers: Vec<(&'static str, String)>,
                body: &'static str| {
        let cl = cl.clone();
        async move {
            let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            cl.send(method, path, &h, body).await
        }
    };
    let signed = |auth: String, date: String| vec![("authorization", auth), ("date", date)];

    // Each algorithm, from a consumer's credential and from its plugins.
    for (key, secret, algorithm, who) in [
        ("alice-key", "alice-secret", "hmac-sha256", "alice"),
        ("alice-key", "alice-secret", "hmac-sha1", "alice"),
        ("bob-key", "bob-secret", "hmac-sha512", "bob"),
    ] {
        let (auth, date) = python_sign(
            key,
            algorithm,
            "@request-target date",
            secret,
            0,
            "GET /a?q=1",
            &[],
        );
        let r = send(Method::GET, "/a?q=1", signed(auth.clone(), date), "").await;
        assert_eq!(r.status, 200, "{algorithm}: {}", r.text());
        let seen = origin.last();
        assert_eq!(seen.header("x-consumer-username"), Some(who));
        assert_eq!(
            seen.header("authorization"),
            Some(auth.as_str()),
            "not hidden"
        );
    }

    // An unpadded signature is read as APISIX's `ngx.decode_base64` reads it.
    let (auth, date) = python_sign(
        "alice-key",
        "hmac-sha256",
        "@request-target date",
        "alice-secret",
        0,
        "GET /a",
        &[],
    );
    let unpadded = match auth.strip_suffix("=\"") {
        Some(head) => format!("{head}\""),
        None => auth.clone(),
    };
    assert_ne!(
        unpadded, auth,
        "an HMAC-SHA256 signature in base64 ends with ="
    );
    let r = send(Method::GET, "/a", signed(unpadded, date), "").await;
    assert_eq!(r.status, 200, "{}", r.text());

    // Refusals: APISIX's answer and challenge.
    let refused = |r: &sluice_testkit::TestResponse| {
        assert_eq!(r.status, 401, "{}", r.text());
        assert_eq!(
            r.text(),
            "{\"message\":\"client request can't be validated\"}\n"
        );
    };
    let (auth, date) = python_sign(
        "alice-key",
        "hmac-sha256",
        "@request-target date",
        "wrong",
        0,
        "GET /a",
        &[],
    );
    let r = send(Method::GET, "/a", signed(auth, date), "").await;
    refused(&r);
    assert_eq!(r.header("www-authenticate"), Some("hmac realm=\"hmac\""));
    let alice = |headers: &str, offset: i64, target: &str| {
        let (auth, date) = python_sign(
            "alice-key",
            "hmac-sha256",
            headers,
            "alice-secret",
            offset,
            target,
            &[],
        );
        signed(auth, date)
    };
    // Signed for another path.
    refused(
        &send(
            Method::GET,
            "/a",
            alice("@request-target date", 0, "GET /other"),
            "",
        )
        .await,
    );
    // Ten minutes off, beyond the default 300 s.
    refused(
        &send(
            Method::GET,
            "/a",
            alice("@request-target date", -600, "GET /a"),
            "",
        )
        .await,
    );
    // `date` is a signed header by default: a signature without it is refused.
    refused(&send(Method::GET, "/a", alice("@request-target", 0, "GET /a"), "").await);
    // An unknown key id, a missing Date, garbage.
    let (auth, date) = python_sign("nobody", "hmac-sha256", "date", "x", 0, "GET /a", &[]);
    refused(&send(Method::GET, "/a", signed(auth.clone(), date), "").await);
    refused(&send(Method::GET, "/a", vec![("authorization", auth)], "").await);
    for garbage in [
        "Signature",
        "Signature keyId=\"alice-key\",algorithm=\"hmac-sha256\",headers=\"date\",signature=\"%%%\"",
        "Basic YTpi",
        "Signature ,,,=\"\"",
    ] {
        let r = send(
            Method::GET,
            "/a",
            vec![
                ("authorization", garbage.to_owned()),
                ("date", "nonsense".to_owned()),
            ],
            "",
        )
        .await;
        refused(&r);
    }
    refused(&send(Method::GET, "/a", vec![], "").await);

    // Route /strict: only hmac-sha512, x-custom must be signed, 60 s of skew, hidden.
    let strict = |algorithm: &str, offset: i64| {
        let extra = [("x-custom", "v1")];
        let (auth, date) = python_sign(
            "alice-key",
            algorithm,
            "date x-custom",
            "alice-secret",
            offset,
            "",
            &extra,
        );
        let mut h = signed(auth, date);
        h.push(("x-custom", "v1".into()));
        h
    };
    let mut h = strict("hmac-sha512", 0);
    let r = send(Method::GET, "/strict", h.clone(), "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        !origin.last().has_header("authorization"),
        "hide_credentials"
    );
    h[2].1 = "v2".into();
    refused(&send(Method::GET, "/strict", h, "").await);
    refused(&send(Method::GET, "/strict", strict("hmac-sha256", 0), "").await);
    refused(&send(Method::GET, "/strict", strict("hmac-sha512", 90), "").await);

    // Route /body: the Digest must be the body's SHA-256; a body over max_req_body_size is 413.
    let (auth, date) = python_sign("bob-key", "hmac-sha256", "date", "bob-secret", 0, "", &[]);
    let mut h = signed(auth, date);
    h.push(("digest", python_digest("hello")));
    let r = send(Method::POST, "/body", h.clone(), "hello").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(&origin.last().body[..], b"hello");
    // Inside multi-auth, hmac-auth's body is read for it as on its own.
    let r = send(Method::POST, "/multi-body", h.clone(), "hello").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(&origin.last().body[..], b"hello");
    let r = send(Method::POST, "/multi-body", h.clone(), "hellO").await;
    assert_eq!(r.status, 401);
    assert_eq!(r.text().trim_end(), r#"{"message":"Authorization Failed"}"#);
    refused(&send(Method::POST, "/body", h.clone(), "hellO").await);
    h[2].1 = python_digest("a body longer than 16");
    let r = send(Method::POST, "/body", h.clone(), "a body longer than 16").await;
    assert_eq!(r.status, 413, "{}", r.text());
    h.pop();
    refused(&send(Method::POST, "/body", h, "hello").await);

    // Route /open: a request without a valid signature is the anonymous consumer's.
    let r = send(
        Method::GET,
        "/open",
        vec![("authorization", "Signature keyId=\"x\"".to_owned())],
        "",
    )
    .await;
    assert_eq!(r.status, 200);
    let seen = origin.last();
    assert_eq!(seen.header("x-consumer-username"), Some("guest"));
    assert!(
        !seen.has_header("authorization"),
        "hidden for the anonymous consumer too"
    );
}

#[test]
fn bad_hmac_auth_settings_are_refused_with_their_place() {
    let plugins = sluice_plugins::shared();
    let refused = |yaml: &str| match sluice_config::load_str_with(yaml, &*plugins) {
        Ok(_) => panic!("accepted: {yaml}"),
        Err(e) => e.to_string(),
    };
    let route = |conf: &str| {
        format!(
            "routes:\n  - {{uri: /a, upstream: {{nodes: {{\"127.0.0.1:1\": 1}}}}, plugins: {{hmac-auth: {conf}}}}}\n"
        )
    };
    let e = refused(&route("{allowed_algorithms: [hmac-md5]}"));
    assert!(
        e.contains(
            "routes[0].plugins.hmac-auth.allowed_algorithms[0]: unknown algorithm \"hmac-md5\""
        ),
        "{e}"
    );
    let e = refused(&route("{allowed_algorithms: []}"));
    assert!(
        e.contains("routes[0].plugins.hmac-auth.allowed_algorithms: must list"),
        "{e}"
    );
    let e = refused(&route("{clock_skew: 0}"));
    assert!(
        e.contains("routes[0].plugins.hmac-auth.clock_skew: must be a whole number from 1"),
        "{e}"
    );
    let e = refused(&route("{signed_headers: [\"\"]}"));
    assert!(
        e.contains("routes[0].plugins.hmac-auth.signed_headers[0]: must be 1 to 50 characters"),
        "{e}"
    );
    let e = refused("consumers:\n  - {username: a, plugins: {hmac-auth: {key_id: k}}}\n");
    assert!(
        e.contains("consumers[0].plugins.hmac-auth") && e.contains("secret_key"),
        "{e}"
    );
    let e = refused(
        "consumers:\n  - {username: a, plugins: {hmac-auth: {key_id: k, secret_key: s}}}\n  - {username: b, plugins: {hmac-auth: {key_id: k, secret_key: t}}}\n",
    );
    assert!(e.contains("key_id"), "a key id used twice: {e}");
}
