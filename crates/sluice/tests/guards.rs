//! APISIX's guard plugins through a live gateway: `uri-blocker`, `ua-restriction` and
//! `referer-restriction` (the cases of their APISIX test files), `acl` by consumer labels, and
//! their refusals at load.

#![allow(clippy::unwrap_used)]

mod common;

use hyper::Method;
use sluice_testkit::{Gateway, TestOrigin};

#[tokio::test]
async fn guards_refuse_by_uri_user_agent_and_referer() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - {{uri: /u/*, upstream_id: o, plugins: {{uri-blocker: {{block_rules: ["root.exe", "\\.git/", "select.+from"], case_insensitive: true}}}}}}
  - {{uri: /m/*, upstream_id: o, plugins: {{uri-blocker: {{block_rules: ["secret"], rejected_code: 410, rejected_msg: "access is not allowed"}}}}}}
  - {{uri: /allow, upstream_id: o, plugins: {{ua-restriction: {{allowlist: ["^my-bot/[0-9]+", "curl"]}}}}}}
  - {{uri: /deny, upstream_id: o, plugins: {{ua-restriction: {{denylist: ["(?i)badbot", "scanner"], bypass_missing: true, message: "Do you want coffee?"}}}}}}
  - {{uri: /ref, upstream_id: o, plugins: {{referer-restriction: {{whitelist: ["example.com", "*.shop.test"]}}}}}}
  - {{uri: /noref, upstream_id: o, plugins: {{referer-restriction: {{blacklist: ["evil.test"], bypass_missing: true}}}}}}
"#,
        o = origin.node()
    ));
    let cl = gw.client();
    let get = |path: &'static str, headers: Vec<(&'static str, &'static str)>| {
        let cl = cl.clone();
        async move { cl.send(Method::GET, path, &headers, "").await }
    };

    // uri-blocker: anywhere in the path and query as sent, case-insensitive when asked.
    assert_eq!(get("/u/ok", vec![]).await.status, 200);
    for blocked in [
        "/u/ROOT.EXE",
        "/u/a/.git/config",
        "/u/q?x=SELECT%20*%20FROM",
    ] {
        let r = get(blocked, vec![]).await;
        assert_eq!(r.status, 403, "{blocked}");
        assert!(
            r.text().contains("<title>403 Forbidden</title>"),
            "NGINX's page: {}",
            r.text()
        );
    }
    let r = get("/m/a?k=secret", vec![]).await;
    assert_eq!(r.status, 410);
    assert_eq!(r.text(), "{\"error_msg\":\"access is not allowed\"}\n");
    assert_eq!(
        get("/m/a?k=SECRET", vec![]).await.status,
        200,
        "case-sensitive by default"
    );

    // ua-restriction.
    let ua = |v: &'static str| vec![("user-agent", v)];
    assert_eq!(get("/allow", ua("my-bot/12")).await.status, 200);
    assert_eq!(get("/allow", ua("  curl/8.0  ")).await.status, 200);
    let r = get("/allow", ua("Mozilla/5.0")).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.text(), "{\"message\":\"Not allowed\"}\n");
    assert_eq!(
        get("/allow", vec![]).await.status,
        403,
        "missing, no bypass"
    );
    assert_eq!(get("/deny", ua("Mozilla/5.0")).await.status, 200);
    let r = get("/deny", ua("A BadBot 1.0")).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.text(), "{\"message\":\"Do you want coffee?\"}\n");
    assert_eq!(get("/deny", vec![]).await.status, 200, "bypass_missing");
    // Several User-Agent fields: any one denied refuses; any one allowed passes.
    let two = vec![("user-agent", "Mozilla/5.0"), ("user-agent", "scanner")];
    assert_eq!(get("/deny", two.clone()).await.status, 403);
    assert_eq!(
        get(
            "/allow",
            vec![("user-agent", "Mozilla/5.0"), ("user-agent", "curl/8")]
        )
        .await
        .status,
        200
    );

    // referer-restriction.
    let referer = |v: &'static str| vec![("referer", v)];
    assert_eq!(
        get("/ref", referer("http://example.com/page")).await.status,
        200
    );
    assert_eq!(
        get("/ref", referer("https://www.shop.test:8443/x"))
            .await
            .status,
        200
    );
    let r = get("/ref", referer("http://www.example.com/")).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.text(),
        "{\"message\":\"Your referer host is not allowed\"}\n"
    );
    assert_eq!(
        get("/ref", referer("not a url")).await.status,
        403,
        "malformed"
    );
    assert_eq!(get("/ref", vec![]).await.status, 403, "missing");
    assert_eq!(get("/noref", vec![]).await.status, 200);
    assert_eq!(
        get("/noref", referer("http://EVIL.test/")).await.status,
        403
    );
    assert_eq!(
        get("/noref", referer("http://good.test/")).await.status,
        200
    );
}

/// client-control's `max_body_size` replaces the node's limit for its route, up or down, for
/// declared and chunked bodies.
#[tokio::test]
async fn client_control_sets_a_routes_body_limit() {
    use sluice_testkit::RawClient;
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        r#"limits: {{max_body_size: 4096}}
upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - {{uri: /small, upstream_id: o, plugins: {{client-control: {{max_body_size: 1024}}}}}}
  - {{uri: /any, upstream_id: o, plugins: {{client-control: {{max_body_size: 0}}}}}}
  - {{uri: /node, upstream_id: o}}
  - {{uri: /first, upstream_id: o, plugins: {{client-control: {{max_body_size: 10}}, forward-auth: {{uri: "http://127.0.0.1:1/auth", status_on_error: 503}}}}}}
"#,
        o = origin.node()
    ));
    let cl = gw.client();
    let post = |path: &'static str, n: usize| {
        let cl = cl.clone();
        async move {
            cl.send(Method::POST, path, &[], "x".repeat(n))
                .await
                .status
                .as_u16()
        }
    };
    assert_eq!(post("/small", 1000).await, 200);
    assert_eq!(post("/small", 2000).await, 413);
    assert_eq!(
        post("/any", 8000).await,
        200,
        "0: no limit, over the node's"
    );
    assert_eq!(post("/node", 2000).await, 200);
    assert_eq!(post("/node", 8000).await, 413);
    // A declared length over the limit is answered before the plugins after client-control
    // (the authorizer, unreachable here, would answer 503).
    assert_eq!(post("/first", 100).await, 413);
    // Chunked: cut when it passes the limit.
    let mut raw = RawClient::connect(gw.addr()).await;
    let chunk = "x".repeat(600);
    raw.send(
        format!("POST /small HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n{chunk}\r\n258\r\n{chunk}\r\n0\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(raw.response().await.status, 413);
}

/// csrf: the cookie set on every answer, sent back in the header, checked for unsafe methods;
/// a token made the way APISIX makes it (by Python, with Lua's number format) is accepted.
#[tokio::test]
async fn csrf_checks_the_double_submitted_token() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        r#"routes:
  - {{uri: /form, upstream: {{nodes: {{"{o}": 1}}}}, plugins: {{csrf: {{key: userkey, expires: 1000000}}}}}}
  - {{uri: /session, upstream: {{nodes: {{"{o}": 1}}}}, plugins: {{csrf: {{key: userkey, expires: 0}}}}}}
"#,
        o = origin.node()
    ));
    let cl = gw.client();
    let r = cl.get("/form").await;
    assert_eq!(r.status, 200);
    let set = r.header("set-cookie").unwrap().to_owned();
    assert!(set.contains(";path=/;SameSite=Lax;Expires="), "{set}");
    let token = set
        .strip_prefix("apisix-csrf-token=")
        .and_then(|s| s.split(';').next())
        .unwrap()
        .to_owned();
    let post = |headers: Vec<(&'static str, String)>| {
        let cl = cl.clone();
        async move {
            let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let r = cl.send(Method::POST, "/form", &h, "x=1").await;
            (r.status.as_u16(), r.text())
        }
    };
    let cookie = |t: &str| ("cookie", format!("apisix-csrf-token={t}"));
    let header = |t: &str| ("apisix-csrf-token", t.to_owned());
    assert_eq!(post(vec![cookie(&token), header(&token)]).await.0, 200);
    let refused = |m: &str| (401, format!("{{\"error_msg\":\"{m}\"}}\n"));
    assert_eq!(post(vec![]).await, refused("no csrf token in headers"));
    assert_eq!(post(vec![header(&token)]).await, refused("no csrf cookie"));
    assert_eq!(
        post(vec![cookie(&token), header("other")]).await,
        refused("csrf token mismatch")
    );
    let forged = "eyJyYW5kb20iOjAuNSwiZXhwaXJlcyI6MSwic2lnbiI6IngifQ==";
    assert_eq!(
        post(vec![cookie(forged), header(forged)]).await,
        refused("Failed to verify the csrf token signature")
    );
    // A token as APISIX makes it: Lua writes the numbers of the signed string with %.14g.
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            r#"import base64, hashlib, json, random, time
r = float("%.14g" % random.random()); t = int(time.time())
sign = hashlib.sha256(("{expires:%d,random:%s,key:%s}" % (t, "%.14g" % r, "userkey")).encode()).hexdigest()
print(base64.b64encode(json.dumps({"random": r, "expires": t, "sign": sign}).encode()).decode())"#,
        ])
        .output()
        .unwrap();
    let apisix = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert_eq!(
        post(vec![cookie(&apisix), header(&apisix)]).await.0,
        200,
        "{apisix}"
    );
    // expires: 0: a session cookie (an Expires of now would drop it at once).
    let r = cl.get("/session").await;
    let set = r.header("set-cookie").unwrap();
    assert!(!set.contains("Expires="), "{set}");
    // Safe methods pass without a token.
    assert_eq!(cl.send(Method::OPTIONS, "/form", &[], "").await.status, 200);
}

#[test]
fn bad_guard_settings_are_refused_with_their_place() {
    let plugins = sluice_plugins::shared();
    let refused = |plugin: &str, conf: &str| {
        let yaml = format!(
            "routes:\n  - {{uri: /a, upstream: {{nodes: {{\"127.0.0.1:1\": 1}}}}, plugins: {{{plugin}: {conf}}}}}\n"
        );
        match sluice_config::load_str_with(&yaml, &*plugins) {
            Ok(_) => panic!("accepted: {yaml}"),
            Err(e) => e.to_string(),
        }
    };
    let e = refused("uri-blocker", "{block_rules: [\"(\"]}");
    assert!(
        e.contains("routes[0].plugins.uri-blocker.block_rules[0]: invalid regex"),
        "{e}"
    );
    let e = refused("uri-blocker", "{block_rules: [\"(?<=a)b\"]}");
    assert!(
        e.contains("block_rules[0]: invalid regex"),
        "look-behind: {e}"
    );
    let e = refused("uri-blocker", "{block_rules: [a, a]}");
    assert!(e.contains("block_rules[1]: repeats an earlier rule"), "{e}");
    let e = refused("uri-blocker", "{block_rules: [a], rejected_code: 99}");
    assert!(e.contains("uri-blocker.rejected_code"), "{e}");
    let e = refused("ua-restriction", "{allowlist: [a], denylist: [b]}");
    assert!(
        e.contains("routes[0].plugins.ua-restriction: give exactly one of allowlist and denylist"),
        "{e}"
    );
    let e = refused("ua-restriction", "{denylist: []}");
    assert!(
        e.contains("ua-restriction.denylist: must list at least one entry"),
        "{e}"
    );
    let e = refused("ua-restriction", "{denylist: [a], message: \"\"}");
    assert!(
        e.contains("ua-restriction.message: must be 1 to 1024 characters"),
        "{e}"
    );
    let e = refused("referer-restriction", "{whitelist: [\"bad host/\"]}");
    assert!(
        e.contains("referer-restriction.whitelist[0]: invalid host \"bad host/\""),
        "{e}"
    );
    let e = refused("client-control", "{max_body_size: -1}");
    assert!(
        e.contains("routes[0].plugins.client-control.max_body_size: must be a whole number from 0"),
        "{e}"
    );
    let e = refused("csrf", "{}");
    assert!(
        e.contains("routes[0].plugins.csrf") && e.contains("key"),
        "{e}"
    );
    let e = refused("csrf", "{key: k, expires: -5}");
    assert!(
        e.contains("routes[0].plugins.csrf.expires: must be a whole number from 0"),
        "{e}"
    );
    let e = refused("referer-restriction", "{}");
    assert!(
        e.contains("give exactly one of whitelist and blacklist"),
        "{e}"
    );
}

#[tokio::test]
async fn acl_allows_and_denies_consumers_by_their_labels() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - {{uri: /allow, upstream_id: o, plugins: {{key-auth: {{}}, acl: {{allow_labels: {{team: [platform]}}}}}}}}
  - {{uri: /deny, upstream_id: o, plugins: {{key-auth: {{}}, acl: {{deny_labels: {{status: [suspended]}}, rejected_code: 401, rejected_msg: "Access denied"}}}}}}
  - {{uri: /both, upstream_id: o, plugins: {{key-auth: {{anonymous_consumer: guest}}, acl: {{allow_labels: {{team: [platform, sales]}}, deny_labels: {{status: [suspended]}}}}}}}}
  - {{uri: /nobody, upstream_id: o, plugins: {{acl: {{allow_labels: {{team: [platform]}}}}}}}}
consumers:
  - {{username: alice, labels: {{team: platform}}, plugins: {{key-auth: {{key: alice-key}}}}}}
  - {{username: bob, labels: {{team: sales}}, plugins: {{key-auth: {{key: bob-key}}}}}}
  - {{username: carol, labels: {{team: "ops,platform", status: suspended}}, plugins: {{key-auth: {{key: carol-key}}}}}}
  - {{username: dave, labels: {{team: '["sales","ops"]'}}, plugins: {{key-auth: {{key: dave-key}}}}}}
  - {{username: guest}}
"#,
        o = origin.node()
    ));
    let cl = gw.client();
    let status = |path: &'static str, key: Option<&'static str>| {
        let cl = cl.clone();
        async move {
            let h: Vec<(&str, &str)> = key.iter().map(|k| ("apikey", *k)).collect();
            let r = cl.send(Method::GET, path, &h, "").await;
            (r.status.as_u16(), r.text().trim_end().to_owned())
        }
    };
    let forbidden = (
        403,
        r#"{"message":"The consumer is forbidden."}"#.to_owned(),
    );
    assert_eq!(status("/allow", Some("alice-key")).await.0, 200);
    assert_eq!(status("/allow", Some("bob-key")).await, forbidden);
    // A label of several values, with commas or as a JSON array.
    assert_eq!(status("/allow", Some("carol-key")).await.0, 200);
    assert_eq!(status("/allow", Some("dave-key")).await, forbidden);
    assert_eq!(
        status("/both", Some("dave-key")).await.0,
        200,
        "sales is allowed there"
    );
    // Denial first, with the route's code and message.
    assert_eq!(
        status("/deny", Some("carol-key")).await,
        (401, r#"{"message":"Access denied"}"#.to_owned())
    );
    assert_eq!(status("/deny", Some("bob-key")).await.0, 200);
    assert_eq!(status("/both", Some("carol-key")).await, forbidden);
    // The anonymous consumer has no labels: not allowed.
    assert_eq!(status("/both", None).await, forbidden);
    // No auth plugin, no consumer.
    assert_eq!(
        status("/nobody", None).await,
        (401, r#"{"message":"Missing authentication."}"#.to_owned())
    );
    gw.shutdown();
}

#[test]
fn bad_acl_settings_are_refused_with_their_place() {
    let at = "routes[0].plugins.acl";
    common::assert_refusals(
        "acl",
        &[
            (
                "{}",
                format!("{at}: give allow_labels, deny_labels or both"),
            ),
            (
                "{allow_labels: {}}",
                format!("{at}.allow_labels: must name at least one label"),
            ),
            (
                "{allow_labels: {team: []}}",
                format!("{at}.allow_labels.team: must be a non-empty list of strings"),
            ),
            (
                "{deny_labels: {team: [1]}}",
                format!("{at}.deny_labels.team: must be a non-empty list of strings"),
            ),
            (
                "{allow_labels: {a: [b]}, rejected_code: 100}",
                format!("{at}.rejected_code: "),
            ),
            (
                "{allow_labels: {a: [b]}, external_user_label_field_parser: segmented_text}",
                format!("{at}.external_user_label_field_separator: is required"),
            ),
            (
                "{allow_labels: {a: [b]}, external_user_label_field_parser: csv}",
                format!("{at}.external_user_label_field_parser: unknown parser \"csv\""),
            ),
        ],
    );
}
