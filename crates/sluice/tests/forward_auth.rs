//! APISIX's `forward-auth` through a live gateway, with a real authorization service (an HTTP
//! server of the test's): what the service is told, its answers passed on, its failures,
//! kept-alive connections, and a stalled service that holds only its own route.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::pki::Pki;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use hyper::Method;
use sluice_testkit::{Gateway, Reply, TestOrigin};

#[tokio::test]
async fn forward_auth_asks_the_service_and_follows_its_answer() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let auth = TestOrigin::http1()
        .handler("/auth", |r| match r.header("authorization") {
            Some("allow") => Reply::ok("")
                .header("x-user-id", "42")
                .header("x-other", "no"),
            Some("body") if &r.body[..] == b"signed=yes" => Reply::ok(""),
            _ => Reply::status(403)
                .header("x-reason", "nope")
                .body("denied by the service"),
        })
        .run()
        .await;
    // Accepts, never answers; and a port that refuses.
    let (stalled_addr, held) = common::stalled_service().await;
    let closed = common::closed_port().await;
    let gw = Gateway::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /get
    upstream_id: o
    plugins:
      forward-auth:
        uri: http://{a}/auth
        request_headers: [Authorization]
        upstream_headers: [X-User-ID, X-Absent]
        client_headers: [X-Reason]
        extra_headers: {{X-Route-Uri: "$uri", X-Fixed: "1", X-Forwarded-Method: "OVERRIDDEN"}}
  - uri: /post
    upstream_id: o
    plugins:
      forward-auth: {{uri: "http://{a}/auth", request_method: POST, request_headers: [Authorization]}}
  - {{uri: /down, upstream_id: o, plugins: {{forward-auth: {{uri: "http://{closed}/auth", status_on_error: 503}}}}}}
  - {{uri: /degrade, upstream_id: o, plugins: {{forward-auth: {{uri: "http://{closed}/auth", allow_degradation: true}}}}}}
  - {{uri: /slow, upstream_id: o, plugins: {{forward-auth: {{uri: "http://{stalled_addr}/auth", timeout: 1500}}}}}}
  - {{uri: /other, upstream_id: o}}
"#,
        o = origin.node(),
        a = auth.node(),
    ));
    let cl = gw.client();
    let send = |method: Method,
                path: &'static str,
                headers: Vec<(&'static str, &'static str)>,
                body: &'static str| {
        let cl = cl.clone();
        async move { cl.send(method, path, &headers, body).await }
    };

    // Allowed: the service is told about the request; the node gets the service's header,
    // and a listed header the service did not send is removed.
    let r = send(
        Method::GET,
        "/get?q=1",
        vec![
            ("authorization", "allow"),
            ("x-absent", "forged"),
            ("host", "shop.test"),
        ],
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let asked = auth.last();
    assert_eq!(asked.method, "GET");
    assert_eq!(asked.header("x-forwarded-proto"), Some("http"));
    assert_eq!(
        asked.header_all("x-forwarded-method"),
        vec!["OVERRIDDEN"],
        "extra_headers replace a field, as APISIX's table does"
    );
    assert_eq!(asked.header("x-forwarded-host"), Some("shop.test"));
    assert_eq!(asked.header("x-forwarded-uri"), Some("/get?q=1"));
    assert_eq!(asked.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(asked.header("x-route-uri"), Some("/get"));
    assert_eq!(asked.header("x-fixed"), Some("1"));
    assert_eq!(asked.header("authorization"), Some("allow"));
    let seen = origin.last();
    assert_eq!(seen.header("x-user-id"), Some("42"));
    assert!(
        !seen.has_header("x-absent"),
        "removed: the service did not send it"
    );
    assert!(
        !seen.has_header("x-other"),
        "not listed in upstream_headers"
    );

    // Denied: the service's status, body and listed headers go to the client.
    let r = send(Method::GET, "/get", vec![("authorization", "deny")], "").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.text(), "denied by the service");
    assert_eq!(r.header("x-reason"), Some("nope"));

    // POST: the client's body goes to the service.
    let r = send(
        Method::POST,
        "/post",
        vec![("authorization", "body")],
        "signed=yes",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(&auth.last().body[..], b"signed=yes");
    assert_eq!(
        send(
            Method::POST,
            "/post",
            vec![("authorization", "body")],
            "signed=no"
        )
        .await
        .status,
        403
    );

    // The service's connection is kept alive between calls.
    for _ in 0..5 {
        send(Method::GET, "/get", vec![("authorization", "allow")], "").await;
    }
    assert_eq!(
        auth.connections(),
        1,
        "one kept-alive connection to the service"
    );

    // Unreachable: status_on_error, or through with allow_degradation.
    assert_eq!(send(Method::GET, "/down", vec![], "").await.status, 503);
    assert_eq!(send(Method::GET, "/degrade", vec![], "").await.status, 200);

    // Stalled: the route waits its timeout and answers 403; meanwhile the worker serves the
    // other routes (a blocking wait would hold them until the timeouts passed).
    let started = Instant::now();
    let slow: Vec<_> = (0..10)
        .map(|_| tokio::spawn(send(Method::GET, "/slow", vec![], "")))
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..50 {
        assert_eq!(send(Method::GET, "/other", vec![], "").await.status, 200);
    }
    assert!(
        started.elapsed() < Duration::from_millis(1400),
        "the other route answered while the stalled calls waited"
    );
    for s in slow {
        assert_eq!(s.await.unwrap().status, 403);
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "each waited its timeout"
    );
    held.abort();
}

/// An authorization service over TLS: its certificate (from a CA the system does not trust)
/// is refused with `ssl_verify: true`, accepted without.
#[tokio::test]
async fn forward_auth_calls_a_service_over_tls() {
    let pki = Pki::new("forward-auth");
    let acceptor = tokio_rustls::TlsAcceptor::from(pki.server_config(&["127.0.0.1"]));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let service = l.local_addr().unwrap();
    let served = tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let resp =
                            b"HTTP/1.1 200 OK\r\nx-user-id: tls-user\r\ncontent-length: 0\r\n\r\n";
                        if tls.write_all(resp).await.is_err() {
                            return;
                        }
                    }
                    match tls.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        r#"routes:
  - {{uri: /unverified, upstream: {{nodes: {{"{o}": 1}}}}, plugins: {{forward-auth: {{uri: "https://{service}/auth", ssl_verify: false, upstream_headers: [X-User-ID]}}}}}}
  - {{uri: /verified, upstream: {{nodes: {{"{o}": 1}}}}, plugins: {{forward-auth: {{uri: "https://{service}/auth"}}}}}}
"#,
        o = origin.node()
    ));
    let cl = gw.client();
    assert_eq!(cl.get("/unverified").await.status, 200);
    assert_eq!(origin.last().header("x-user-id"), Some("tls-user"));
    assert_eq!(
        cl.get("/verified").await.status,
        403,
        "a CA the system does not trust"
    );
    served.abort();
}

#[test]
fn bad_forward_auth_settings_are_refused_with_their_place() {
    let plugins = sluice_plugins::shared();
    let refused = |conf: &str| {
        let yaml = format!(
            "routes:\n  - {{uri: /a, upstream: {{nodes: {{\"127.0.0.1:1\": 1}}}}, plugins: {{forward-auth: {conf}}}}}\n"
        );
        match sluice_config::load_str_with(&yaml, &*plugins) {
            Ok(_) => panic!("accepted: {yaml}"),
            Err(e) => e.to_string(),
        }
    };
    let at = "routes[0].plugins.forward-auth";
    let e = refused("{uri: ftp://x/}");
    assert!(
        e.contains(&format!("{at}.uri: must be an http:// or https:// URI")),
        "{e}"
    );
    let e = refused("{uri: http://a/, request_method: PUT}");
    assert!(
        e.contains(&format!("{at}.request_method: must be GET or POST")),
        "{e}"
    );
    let e = refused("{uri: http://a/, timeout: 0}");
    assert!(
        e.contains(&format!(
            "{at}.timeout: must be a whole number from 1 to 60000 ms"
        )),
        "{e}"
    );
    let e = refused("{uri: http://a/, timeout: 60001}");
    assert!(e.contains(&format!("{at}.timeout")), "{e}");
    let e = refused("{uri: http://a/, keepalive_timeout: 999}");
    assert!(e.contains(&format!("{at}.keepalive_timeout")), "{e}");
    let e = refused("{uri: http://a/, status_on_error: 600}");
    assert!(e.contains(&format!("{at}.status_on_error")), "{e}");
    let e = refused("{uri: http://a/, extra_headers: {X-A: \"$nope\"}}");
    assert!(e.contains(&format!("{at}.extra_headers.X-A")), "{e}");
    let e = refused("{uri: http://a/, upstream_headers: [\"bad header\"]}");
    assert!(e.contains(&format!("{at}.upstream_headers[0]")), "{e}");
}
