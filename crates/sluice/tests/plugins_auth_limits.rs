//! Auth and limit plugins through the real gateway: what the client gets on the wire and what
//! the origin receives.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use hyper::Method;
use sluice_testkit::{Gateway, RawClient, TestOrigin};

fn route(origin: &TestOrigin, plugins: &str, consumers: &str) -> String {
    format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins:\n{plugins}\n{consumers}\n",
        origin.node()
    )
}

#[tokio::test]
async fn key_auth_can_hide_the_key_from_the_origin() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&route(
        &origin,
        "      key-auth: {hide_credentials: true}",
        "consumers:\n  - username: jack\n    plugins: {key-auth: {key: k1}}",
    ));
    let r = gw
        .client()
        .send(Method::GET, "/a?apikey=k1&x=1", &[], "")
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(origin.last().uri, "/a?x=1");
    let r = gw
        .client()
        .send(Method::GET, "/b", &[("apikey", "k1")], "")
        .await;
    assert_eq!(r.status, 200);
    assert!(!origin.last().has_header("apikey"));
}

#[tokio::test]
async fn basic_auth_challenges_and_accepts() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&route(
        &origin,
        "      basic-auth: {}",
        "consumers:\n  - username: alice\n    plugins: {basic-auth: {username: alice, password: s3cret}}",
    ));
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response().await;
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"basic\""));
    c.send(b"GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Basic YWxpY2U6czNjcmV0\r\n\r\n")
        .await;
    assert_eq!(
        c.response().await.status,
        200,
        "the same connection goes on after a 401"
    );
    assert_eq!(
        origin.last().header("authorization"),
        Some("Basic YWxpY2U6czNjcmV0")
    );
}

#[tokio::test]
async fn jwt_auth_and_consumer_restriction_work_together() {
    use jsonwebtoken::{EncodingKey, Header, encode};
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&route(
        &origin,
        "      jwt-auth: {}\n      consumer-restriction: {whitelist: [admin]}",
        "consumers:\n  - username: admin\n    plugins: {jwt-auth: {key: admin-key, secret: s1}}\n  - username: guest\n    plugins: {jwt-auth: {key: guest-key, secret: s2}}",
    ));
    let exp = jsonwebtoken::get_current_timestamp() + 60;
    let token = |key: &str, secret: &[u8]| {
        encode(
            &Header::default(),
            &serde_json::json!({"key": key, "exp": exp}),
            &EncodingKey::from_secret(secret),
        )
        .unwrap()
    };
    let admin = format!("Bearer {}", token("admin-key", b"s1"));
    let guest = format!("Bearer {}", token("guest-key", b"s2"));
    let forged = format!("Bearer {}", token("admin-key", b"s2"));
    let cl = gw.client();
    assert_eq!(
        cl.send(Method::GET, "/", &[("authorization", &admin)], "")
            .await
            .status,
        200
    );
    let r = cl
        .send(Method::GET, "/", &[("authorization", &guest)], "")
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["message"], "The consumer_name is forbidden.");
    assert_eq!(
        cl.send(Method::GET, "/", &[("authorization", &forged)], "")
            .await
            .status,
        401
    );
    assert_eq!(origin.requests().len(), 1);
}

#[tokio::test]
async fn limit_req_rejects_over_the_burst_and_delays_within_it() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&route(
        &origin,
        "      limit-req: {rate: 5, burst: 1, rejected_code: 429}",
        "",
    ));
    let cl = gw.client();
    assert_eq!(cl.get("/").await.status, 200);
    // Two more at once: one fits the burst and waits about 1/rate, the other is over it.
    let started = Instant::now();
    let both: Vec<_> = (0..2)
        .map(|_| {
            let cl = cl.clone();
            tokio::spawn(async move { (cl.get("/").await.status.as_u16(), started.elapsed()) })
        })
        .collect();
    let mut results = Vec::new();
    for r in both {
        results.push(r.await.unwrap());
    }
    results.sort();
    assert_eq!((results[0].0, results[1].0), (200, 429), "{results:?}");
    assert!(
        results[0].1 >= Duration::from_millis(150),
        "the burst request waited: {results:?}"
    );
}

#[tokio::test]
async fn limit_conn_holds_a_slot_per_request_in_flight() {
    let origin = sluice_proxy::origin::Origin::start("127.0.0.1:0".parse().unwrap(), 1).unwrap();
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins:\n      limit-conn: {{conn: 2, burst: 0, default_conn_delay: 0.1, rejected_code: 429}}\n",
        origin.addr()
    ));
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let cl = gw.client();
            tokio::spawn(async move { cl.get("/delay/400").await.status.as_u16() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        gw.client().get("/hello").await.status,
        429,
        "a third request in flight is refused"
    );
    for s in slow {
        assert_eq!(s.await.unwrap(), 200);
    }
    assert_eq!(
        gw.client().get("/hello").await.status,
        200,
        "the slots were released"
    );
    origin.stop();
}

#[tokio::test]
async fn ip_restriction_allows_listed_clients_and_trusts_forwarded_for_from_proxies() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&route(
        &origin,
        "      ip-restriction: {whitelist: [127.0.0.1]}",
        "",
    ));
    assert_eq!(gw.client().get("/").await.status, 200);
    let gw = Gateway::start(&route(
        &origin,
        "      ip-restriction: {blacklist: [127.0.0.0/8], message: no}",
        "",
    ));
    let r = gw.client().get("/").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["message"], "no");
    let gw = Gateway::start(&route(
        &origin,
        "      ip-restriction: {whitelist: [203.0.113.0/24], trusted_addresses: [127.0.0.1]}",
        "",
    ));
    let cl = gw.client();
    assert_eq!(
        cl.send(Method::GET, "/", &[("x-forwarded-for", "203.0.113.9")], "")
            .await
            .status,
        200
    );
    assert_eq!(
        cl.send(Method::GET, "/", &[("x-forwarded-for", "198.51.100.9")], "")
            .await
            .status,
        403
    );
}
