//! Wire level: raw bytes in, raw bytes out. Every framing case of RELIABILITY.md §1 and every
//! limit, with the connection's fate (closed or kept) checked too.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use sluice_testkit::{Gateway, RawClient, TestOrigin};

async fn gateway(extra: &str) -> (Gateway, TestOrigin) {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        "{extra}\nroutes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n",
        origin.node()
    ));
    (gw, origin)
}

/// Sends `raw`, expects `status`, then the connection closed; the origin saw nothing.
async fn rejected(gw: &Gateway, origin: &TestOrigin, raw: &[u8], status: u16) {
    let before = origin.requests().len();
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(raw).await;
    let r = c.response().await;
    assert_eq!(
        r.status,
        status,
        "for {:?}: {}",
        String::from_utf8_lossy(raw),
        r.text()
    );
    assert_eq!(
        r.header("connection"),
        Some("close"),
        "for {:?}",
        String::from_utf8_lossy(raw)
    );
    assert!(
        r.header("content-type")
            .is_some_and(|t| t == "application/json")
    );
    assert!(
        c.closed_within(Duration::from_secs(5)).await,
        "not closed after {:?}",
        String::from_utf8_lossy(raw)
    );
    assert_eq!(
        origin.requests().len(),
        before,
        "the origin saw {:?}",
        String::from_utf8_lossy(raw)
    );
}

#[tokio::test]
async fn ambiguous_framing_is_rejected_with_400_and_a_close() {
    let (gw, origin) = gateway("").await;
    let cases: &[&[u8]] = &[
        // CL.TE and TE.CL
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nX",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n0\r\n\r\nX",
        // differing duplicate Content-Length, lists, signs, hex
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\nhello!",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\nhello",
        // Transfer-Encoding other than exactly chunked, repeated (CVE-2026-2835), or in HTTP/1.0
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        // obsolete line folding, whitespace before the colon, bare CR, NUL
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Folded: one\r\n two\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Space : one\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX-CR: one\rtwo\r\n\r\n",
        b"GET / HTTP/1.1\rHost: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Nul: a\x00b\r\n\r\n",
        // Host missing or repeated; bad version; bad target
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET / HTTP/1.2\r\nHost: a\r\n\r\n",
        b"GET / HTTP/0.9\r\n\r\n",
        b"GET relative HTTP/1.1\r\nHost: a\r\n\r\n",
        // a `%` that is not an escape: `%%44e` would decode to a new escape `%De` (NGINX: 400)
        b"GET /%%44e HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /a%2 HTTP/1.1\r\nHost: a\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    ];
    for raw in cases {
        rejected(&gw, &origin, raw, 400).await;
    }
}

#[tokio::test]
async fn invalid_chunked_bodies_are_rejected_and_not_forwarded_as_valid() {
    let (gw, origin) = gateway("").await;
    let cases: &[&[u8]] = &[
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5 5\r\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    ];
    for raw in cases {
        let before = origin.requests().len();
        let mut c = RawClient::connect(gw.addr()).await;
        c.send(raw).await;
        let r = c.response().await;
        assert_eq!(r.status, 400, "{:?}", String::from_utf8_lossy(raw));
        assert!(c.closed_within(Duration::from_secs(5)).await);
        // The upstream request (if one was started) never completed: the origin records only
        // requests whose body ended cleanly.
        assert_eq!(
            origin.requests().len(),
            before,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[tokio::test]
async fn smuggled_second_requests_never_reach_the_origin() {
    let (gw, origin) = gateway("").await;
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response().await.status, 400);
    assert!(c.closed_within(Duration::from_secs(5)).await);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        origin
            .requests()
            .iter()
            .all(|r| !r.uri.contains("smuggled"))
    );
}

#[tokio::test]
async fn unsupported_codings_and_expectations_and_connect() {
    let (gw, origin) = gateway("").await;
    rejected(
        &gw,
        &origin,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        501,
    )
    .await;
    rejected(
        &gw,
        &origin,
        b"GET / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n",
        417,
    )
    .await;
    // A coding list that does not end in chunked has no length: RFC 9112 §6.3 says 400 (the
    // MUST there wins over §6.1's SHOULD of 501 for a coding not understood).
    rejected(
        &gw,
        &origin,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
        400,
    )
    .await;
    rejected(
        &gw,
        &origin,
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
        405,
    )
    .await;
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
        .await;
    let r = c.response().await;
    assert_eq!(
        r.header("allow"),
        Some("GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH"),
        "a 405 says what is allowed"
    );
}

#[tokio::test]
async fn trace_is_refused_with_405_unless_a_route_lists_it() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{0}\": 1}}}}\n  - uri: /debug\n    methods: [GET, TRACE]\n    upstream: {{nodes: {{\"{0}\": 1}}}}\n",
        origin.node()
    ));
    // TRACE reflects the request, cookies included: not forwarded where nobody asked for it.
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"TRACE /any HTTP/1.1\r\nHost: a\r\nCookie: session=secret\r\n\r\n")
        .await;
    let r = c.response().await;
    assert_eq!(r.status, 405, "{}", r.text());
    assert_eq!(
        r.header("allow"),
        Some("GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH")
    );
    assert!(origin.requests().is_empty(), "TRACE reached the origin");
    // Other methods on the same connection still work.
    c.send(b"GET /any HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response().await.status, 200);
    // A route that lists TRACE serves it.
    c.send(b"TRACE /debug HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response().await.status, 200);
    assert_eq!(origin.requests().len(), 2);
}

#[tokio::test]
async fn size_limits_give_414_431_and_413() {
    let (gw, origin) = gateway(
        "limits: {max_request_line: 1k, max_header_size: 4k, max_headers: 20, max_body_size: 1k}",
    )
    .await;
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(2000));
    rejected(&gw, &origin, long_uri.as_bytes(), 414).await;
    let big_header = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "b".repeat(5000)
    );
    rejected(&gw, &origin, big_header.as_bytes(), 431).await;
    let many = format!(
        "GET / HTTP/1.1\r\nHost: a\r\n{}\r\n",
        (0..25).map(|i| format!("X-{i}: v\r\n")).collect::<String>()
    );
    rejected(&gw, &origin, many.as_bytes(), 431).await;
    let big_body = format!(
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000\r\n\r\n{}",
        "c".repeat(2000)
    );
    rejected(&gw, &origin, big_body.as_bytes(), 413).await;

    // A chunked body over the limit: 413 too, and the origin never gets a complete request.
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await;
    for _ in 0..3 {
        let _ = c
            .try_send(format!("200\r\n{}\r\n", "d".repeat(512)).as_bytes())
            .await;
    }
    let r = c.response().await;
    assert_eq!(r.status, 413);
    assert!(origin.requests().is_empty());

    // Right at the limits everything passes.
    let mut c = RawClient::connect(gw.addr()).await;
    let ok = format!(
        "POST /{} HTTP/1.1\r\nHost: a\r\nContent-Length: 1024\r\n\r\n{}",
        "a".repeat(900),
        "e".repeat(1024)
    );
    c.send(ok.as_bytes()).await;
    assert_eq!(c.response().await.status, 200);
    assert_eq!(origin.last().body.len(), 1024);
}

#[tokio::test]
async fn a_slow_request_head_gets_408_and_a_close() {
    let (gw, origin) = gateway("timeouts: {client_header: 300ms}").await;
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"GET / HTTP/1.1\r\nHost: a\r\n").await;
    let started = std::time::Instant::now();
    // Trickle bytes: each arrives before a per-read timeout would fire, but the head as a
    // whole is late.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(120)).await;
        if c.try_send(b"X-Slow: 1\r\n").await.is_err() {
            break;
        }
    }
    let r = c.response().await;
    assert_eq!(r.status, 408);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(c.closed_within(Duration::from_secs(5)).await);
    assert!(origin.requests().is_empty());
}

#[tokio::test]
async fn idle_keep_alive_connections_are_closed_silently() {
    let (gw, _origin) = gateway("timeouts: {keepalive: 200ms}").await;
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response().await.status, 200);
    let started = std::time::Instant::now();
    assert!(c.closed_within(Duration::from_secs(5)).await);
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert!(c.leftover().is_empty(), "an idle close sends nothing");
}

#[tokio::test]
async fn a_connection_serves_at_most_keepalive_requests() {
    let (gw, _origin) = gateway("limits: {keepalive_requests: 3}").await;
    let mut c = RawClient::connect(gw.addr()).await;
    for i in 1..=3 {
        c.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
        let r = c.response().await;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("connection"),
            if i == 3 { Some("close") } else { None }
        );
    }
    assert!(c.closed_within(Duration::from_secs(5)).await);
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let origin = TestOrigin::http1()
        .handler("/", |r| sluice_testkit::Reply::ok(r.uri.clone()))
        .run()
        .await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n",
        origin.node()
    ));
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\nPOST /3 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET /4 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    for want in ["/1", "/2", "/3", "/4"] {
        assert_eq!(c.response().await.text(), want);
    }
}

#[tokio::test]
async fn bare_lf_heads_are_accepted_and_reserialized_with_crlf() {
    let (gw, origin) = gateway("").await;
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"GET /lf HTTP/1.1\nHost: a\nX-Lf: yes\n\n").await;
    assert_eq!(c.response().await.status, 200);
    assert_eq!(origin.last().header("x-lf"), Some("yes"));
}

#[tokio::test]
async fn a_404_with_a_buffered_body_keeps_the_connection() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /only\n    upstream: {{nodes: {{\"{}\": 1}}}}\n",
        origin.node()
    ));
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"POST /nope HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nbodyGET /only HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response().await.status, 404);
    assert_eq!(c.response().await.status, 200);
}

#[tokio::test]
async fn max_connections_per_worker_holds_new_connections_back() {
    let (gw, _origin) = gateway("limits: {max_connections: 2}").await;
    let mut a = RawClient::connect(gw.addr()).await;
    let mut b = RawClient::connect(gw.addr()).await;
    a.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    b.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(a.response().await.status, 200);
    assert_eq!(b.response().await.status, 200);
    // The third connection completes its TCP handshake in the kernel backlog but is not served.
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert!(!c.closed_within(Duration::from_millis(300)).await);
    assert!(c.leftover().is_empty(), "served beyond max_connections");
    drop(a);
    assert_eq!(c.response().await.status, 200, "served once a slot freed");
}

#[tokio::test]
async fn garbage_never_takes_a_worker_down() {
    let (gw, _origin) = gateway("").await;
    // A deterministic pseudo-random stream of inputs, mixing valid prefixes with noise.
    let mut seed: u64 = 0x5eed;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let prefixes: [&[u8]; 4] = [
        b"GET / HTTP/1.1\r\nHost: a\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nHost: a\r\n\r\n",
        b"",
        b"GET /",
    ];
    for _ in 0..200 {
        let mut input = prefixes[(next() % 4) as usize].to_vec();
        let n = next() % 300;
        for _ in 0..n {
            let r = next();
            input.push(if r % 5 == 0 {
                b"\r\n:; \t0123456789abcdef"[(r >> 8) as usize % 22]
            } else {
                (r >> 16) as u8
            });
        }
        let mut c = RawClient::connect(gw.addr()).await;
        let _ = c.try_send(&input).await;
        let _ = c.closed_within(Duration::from_millis(20)).await;
    }
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(
        c.response().await.status,
        200,
        "the worker must still serve"
    );
}

/// Routes on the body (`post_arg_*`): the body is read before the route is chosen, whatever
/// its framing (chunked, after `Expect: 100-continue`), and still reaches the upstream whole;
/// a pipelined request behind it is served next; a body over `max_body_vars_size` is proxied
/// without matching; a body that stops coming gets 408.
#[tokio::test]
async fn body_conditions_read_chunked_continued_and_pipelined_bodies() {
    let (o1, o2) = (
        TestOrigin::http1().run().await,
        TestOrigin::http1().run().await,
    );
    let gw = Gateway::start(&format!(
        "limits: {{max_body_vars_size: 64}}\ntimeouts: {{client_body: 1s}}\nroutes:
  - {{uri: /f, vars: [[post_arg_name, '==', json]], upstream: {{nodes: {{\"{}\": 1}}}}}}
  - {{uri: /*, priority: -1, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        o2.node(),
        o1.node()
    ));
    let form = "Content-Type: application/x-www-form-urlencoded";
    let last = |o: &TestOrigin| o.requests().last().map(|r| (r.uri.clone(), r.body.clone()));

    // Chunked, in two chunks.
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(format!("POST /f HTTP/1.1\r\nHost: a\r\n{form}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nname=\r\n4\r\njson\r\n0\r\n\r\n").as_bytes()).await;
    assert_eq!(c.response().await.status, 200);
    assert_eq!(last(&o2), Some(("/f".into(), "name=json".into())));

    // Two requests in one write: the second is read after the first's body.
    c.send(format!("POST /f HTTP/1.1\r\nHost: a\r\n{form}\r\nContent-Length: 9\r\n\r\nname=jsonGET /f HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes()).await;
    assert_eq!(c.response().await.status, 200);
    assert_eq!(o2.requests().len(), 2);
    assert_eq!(c.response().await.status, 200);
    assert_eq!(last(&o1), Some(("/f".into(), "".into())));

    // Expect: 100-continue: the gateway asks for the body it needs.
    c.send(format!("POST /f HTTP/1.1\r\nHost: a\r\n{form}\r\nContent-Length: 9\r\nExpect: 100-continue\r\n\r\n").as_bytes()).await;
    assert_eq!(c.response().await.status, 100);
    c.send(b"name=json").await;
    assert_eq!(c.response().await.status, 200);
    assert_eq!(o2.requests().len(), 3);

    // Over the limit: proxied whole, but the condition has nothing to read.
    let big = format!("name=json&pad={}", "x".repeat(100));
    c.send(
        format!(
            "POST /f HTTP/1.1\r\nHost: a\r\n{form}\r\nContent-Length: {}\r\n\r\n{big}",
            big.len()
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(c.response().await.status, 200);
    assert_eq!(last(&o1), Some(("/f".into(), big.clone().into())));
    assert_eq!(o2.requests().len(), 3);

    // Expect: 100-continue on a chunked body over the limit: one 100, not one from reading
    // and another from forwarding.
    let payload = "name=json&pad=".to_string() + &"x".repeat(100);
    c.send(format!("POST /f HTTP/1.1\r\nHost: a\r\n{form}\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n").as_bytes()).await;
    assert_eq!(c.response().await.status, 100);
    c.send(format!("{:x}\r\n{payload}\r\n", payload.len()).as_bytes())
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.send(b"0\r\n\r\n").await;
    assert_eq!(c.response().await.status, 200);
    assert_eq!(last(&o1), Some(("/f".into(), payload.clone().into())));

    // Chunks of one byte with long extensions: the framing kept while reading is bounded too
    // (64 bytes of payload in 65 KiB of chunks): the condition sees no body, which is then
    // forwarded whole.
    let payload = "name=json&p=".to_string() + &"x".repeat(52);
    let ext = "e".repeat(1020);
    let chunks: String = payload
        .chars()
        .map(|ch| format!("1;{ext}\r\n{ch}\r\n"))
        .collect();
    let mut framed = RawClient::connect(gw.addr()).await;
    framed.send(format!("POST /f HTTP/1.1\r\nHost: a\r\n{form}\r\nTransfer-Encoding: chunked\r\n\r\n{chunks}").as_bytes()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    framed.send(b"0\r\n\r\n").await;
    assert_eq!(framed.response().await.status, 200);
    assert_eq!(last(&o1), Some(("/f".into(), payload.clone().into())));

    // A body that stops coming: 408 and a close, nothing forwarded.
    let before = o1.requests().len() + o2.requests().len();
    let mut slow = RawClient::connect(gw.addr()).await;
    slow.send(
        format!("POST /f HTTP/1.1\r\nHost: a\r\n{form}\r\nContent-Length: 9\r\n\r\nname")
            .as_bytes(),
    )
    .await;
    let r = slow.response().await;
    assert_eq!(r.status, 408, "{}", r.text());
    assert!(slow.closed_within(Duration::from_secs(5)).await);
    assert_eq!(o1.requests().len() + o2.requests().len(), before);
}

/// A client that writes its whole body before it reads (hyper's client, Python's requests)
/// still gets the 413 of an upload refused on its `Content-Length`: the gateway drains what it
/// sends for the lingering close's time instead of closing on unread bytes, which fails the
/// client's write and, with it, the request. 8 MiB here, over loopback, 10 times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_upload_still_gets_its_413_while_it_keeps_sending() {
    let (gw, origin) = gateway("limits: {max_body_size: 1k}").await;
    for _ in 0..10 {
        let mut c = gw.client().connection().await;
        let r = c
            .send(http::Method::POST, "/upload", &[], vec![b'u'; 8 << 20])
            .await;
        assert_eq!(r.map(|r| r.status.as_u16()).ok(), Some(413));
    }
    assert!(origin.requests().is_empty());
}
