//! `gzip` and `brotli` through a live gateway: what is compressed and what is not (NGINX's
//! rules), the head's edits, chunked and fixed-length answers, HTTP/2, other plugins' bodies
//! compressed after them, and curl (a real client) decoding what it gets.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read as _;

use hyper::Method;
use sluice_testkit::{Reply, TestOrigin};

/// A JSON document of about 64 KiB.
fn json_body() -> String {
    let mut s = String::from("[");
    let mut i = 0;
    while s.len() < 64 * 1024 {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            r#"{{"id":{i},"name":"item {i}","tags":["a","b","c"],"price":{}.5}}"#,
            i * 3
        ));
        i += 1;
    }
    s.push(']');
    s
}

fn gunzip(b: &[u8]) -> String {
    let mut out = String::new();
    flate2::read::GzDecoder::new(b)
        .read_to_string(&mut out)
        .unwrap();
    out
}

fn unbrotli(b: &[u8]) -> String {
    let mut out = String::new();
    brotli::Decompressor::new(b, 4096)
        .read_to_string(&mut out)
        .unwrap();
    out
}

#[tokio::test]
async fn gzip_and_brotli_compress_what_nginx_would_and_nothing_else() {
    let body: &'static str = Box::leak(json_body().into_boxed_str());
    let origin = TestOrigin::http1()
        .handler("/json", move |_| {
            Reply::ok(body)
                .header("content-type", "application/json; charset=utf-8")
                .header("etag", "\"v1\"")
        })
        .handler("/chunked", |_| {
            Reply::ok("")
                .header("content-type", "application/json")
                .chunked(&[
                    "[1,2,3,",
                    "4,5,6,",
                    "7,8,9,10,11,12,13,14,15,16,17,18,19,20]",
                ])
        })
        .handler("/small", |_| {
            Reply::ok("[1]").header("content-type", "application/json")
        })
        .handler("/html", |_| {
            Reply::ok("<p>not listed, not compressed</p>").header("content-type", "text/html")
        })
        .handler("/encoded", move |_| {
            Reply::ok(body)
                .header("content-type", "application/json")
                .header("content-encoding", "identity-ish")
        })
        .handler("/notransform", move |_| {
            Reply::ok(body)
                .header("content-type", "application/json")
                .header("cache-control", "public, no-transform")
        })
        .handler("/partial", move |_| {
            Reply::status(206)
                .header("content-type", "application/json")
                .header("content-range", "bytes 0-99/1000")
                .body(&body[..100])
        })
        .handler("/created", move |_| {
            Reply::status(201)
                .header("content-type", "application/json")
                .body(body)
        })
        .run()
        .await;
    let node = common::TestNode::start_text(&format!(
        r#"listen: [{{addr: "127.0.0.1:0", http2: true}}]
workers: 1
upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /*
    upstream_id: o
    plugins:
      gzip: {{types: [application/json], comp_level: 6, vary: true}}
  - uri: /br/*
    upstream_id: o
    plugins:
      proxy-rewrite: {{regex_uri: ["^/br/(.*)", "/$1"]}}
      gzip: {{types: "*"}}
      brotli: {{types: [application/json]}}
"#,
        o = origin.node(),
    ));
    let cl = node.proxy();
    let get = |path: &'static str, accept: &'static str| {
        let cl = cl.clone();
        async move {
            let headers: Vec<(&str, &str)> = if accept.is_empty() {
                vec![]
            } else {
                vec![("accept-encoding", accept)]
            };
            cl.send(Method::GET, path, &headers, "").await
        }
    };

    // Compressed: the head says so, the body decodes to the origin's.
    let r = get("/json", "gzip, deflate").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(
        r.header("etag"),
        Some("W/\"v1\""),
        "a strong ETag becomes weak"
    );
    assert!(r.header("content-length").is_none());
    assert!(r.body.len() < body.len() / 4, "{} bytes", r.body.len());
    assert_eq!(gunzip(&r.body), body);

    // A chunked answer, compressed as it streams.
    let r = get("/chunked", "gzip").await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(
        gunzip(&r.body),
        "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]"
    );

    // Not compressed: not accepted, refused with q=0, under min_length, a type not listed,
    // already encoded, no-transform, a range, a status NGINX does not compress, HEAD.
    for (path, accept) in [
        ("/json", ""),
        ("/json", "br"),
        ("/json", "gzip;q=0, identity"),
        ("/json", "*;q=0"),
        ("/small", "gzip"),
        ("/html", "gzip"),
        ("/encoded", "gzip"),
        ("/notransform", "gzip"),
        ("/partial", "gzip"),
        ("/created", "gzip"),
    ] {
        let r = get(path, accept).await;
        assert_ne!(
            r.header("content-encoding"),
            Some("gzip"),
            "{path} with Accept-Encoding {accept:?}"
        );
    }
    // Not compressed, the node's framing is kept: its Content-Length, not chunks.
    let r = get("/json", "").await;
    assert_eq!(
        r.header("content-length"),
        Some(body.len().to_string().as_str())
    );
    assert!(r.header("transfer-encoding").is_none());
    assert_eq!(r.body.len(), body.len());
    let r = get("/json", "*").await;
    assert_eq!(r.header("content-encoding"), Some("gzip"), "* accepts gzip");
    let r = get("/json", "GZIP;q=0.5").await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let r = cl
        .send(Method::HEAD, "/json", &[("accept-encoding", "gzip")], "")
        .await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-encoding").is_none(), "HEAD");

    // Both on a route: Brotli for a client that takes it, gzip for one that takes only gzip
    // (with types "*"), never both.
    let r = get("/br/json", "gzip, br").await;
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(unbrotli(&r.body), body);
    let r = get("/br/json", "gzip").await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(gunzip(&r.body), body);
    let r = get("/br/html", "br").await;
    assert!(
        r.header("content-encoding").is_none(),
        "text/html is not in brotli's types"
    );

    // curl decodes both.
    for (path, want) in [("/json", "gzip"), ("/br/json", "br")] {
        let out = tokio::process::Command::new("curl")
            .args(["-sS", "--compressed", "-D", "-", "--max-time", "10"])
            .arg(format!(
                "http://{}{path}",
                node.node().server().local_addrs()[0]
            ))
            .output()
            .await
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let (head, got) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.to_ascii_lowercase()
                .contains(&format!("content-encoding: {want}")),
            "{head}"
        );
        assert_eq!(got, body, "curl decoded {path}");
    }

    // HTTP/2 (curl, prior knowledge): compressed the same.
    let out = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--http2-prior-knowledge",
            "--compressed",
            "-D",
            "-",
            "--max-time",
            "10",
        ])
        .arg(format!(
            "http://{}/json",
            node.node().server().local_addrs()[0]
        ))
        .output()
        .await
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let (head, got) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("{text} {}", String::from_utf8_lossy(&out.stderr)));
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert!(head.contains("content-encoding: gzip"), "{head}");
    assert_eq!(got, body);
}

#[tokio::test]
async fn compression_runs_after_the_plugins_that_rewrite_the_body() {
    let origin = TestOrigin::http1()
        .handler("/", |_| {
            Reply::ok("hello world, hello world, hello world, hello world")
                .header("content-type", "text/plain")
        })
        .run()
        .await;
    let node = common::TestNode::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /filtered
    upstream_id: o
    plugins:
      gzip: {{types: [text/plain]}}
      response-rewrite: {{filters: [{{regex: world, replace: there, scope: global}}], headers: {{set: {{X-Rewritten: "1"}}}}}}
  - uri: /replaced
    upstream_id: o
    plugins:
      gzip: {{types: [text/plain]}}
      response-rewrite: {{body: "a whole new body, long enough to be compressed"}}
"#,
        o = origin.node(),
    ));
    let cl = node.proxy();
    let r = cl
        .send(Method::GET, "/filtered", &[("accept-encoding", "gzip")], "")
        .await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("x-rewritten"), Some("1"));
    assert_eq!(
        gunzip(&r.body),
        "hello there, hello there, hello there, hello there"
    );
    // A body a plugin replaced whole goes out as it is, with its own length.
    let r = cl
        .send(Method::GET, "/replaced", &[("accept-encoding", "gzip")], "")
        .await;
    assert!(r.header("content-encoding").is_none());
    assert_eq!(r.text(), "a whole new body, long enough to be compressed");
}

#[test]
fn bad_compression_settings_are_refused_with_their_paths() {
    let cases = [
        (
            "gzip",
            "{comp_level: 10}",
            "plugins.gzip.comp_level: must be a whole number from 1 to 9, got 10",
        ),
        (
            "gzip",
            "{types: []}",
            "plugins.gzip.types: must be a non-empty list of media types (text/html, application/json), or \"*\"",
        ),
        (
            "gzip",
            "{http_version: 2}",
            "plugins.gzip.http_version: must be 1.1 or 1.0",
        ),
        (
            "gzip",
            "{min_length: 0}",
            "plugins.gzip.min_length: must be a whole number from 1 to 1099511627776 bytes, got 0",
        ),
        (
            "brotli",
            "{lgwin: 9}",
            "plugins.brotli.lgwin: must be a whole number from 10 to 24, got 9",
        ),
        (
            "brotli",
            "{mode: 3}",
            "plugins.brotli.mode: must be a whole number from 0 to 2, got 3",
        ),
        (
            "brotli",
            "{comp_level: 12}",
            "plugins.brotli.comp_level: must be a whole number from 0 to 11, got 12",
        ),
    ];
    for (plugin, conf, want) in cases {
        let errors = common::plugin_refusal(plugin, conf);
        assert!(
            errors.contains(&want.replace("plugins.", "routes[0].plugins.")),
            "{plugin} {conf}: {errors}"
        );
    }
}

#[tokio::test]
async fn what_the_review_found_stays_fixed() {
    // An origin that answers /stream in two pieces 800 ms apart, and /broken with a head
    // whose chunked body is malformed (the 502 comes after the node's head was read).
    let raw = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let raw_addr = raw.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut c, _)) = raw.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = c.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
                if req.starts_with("GET /broken") {
                    let _ = c
                        .write_all(format!("{head}zz\r\nnot a chunk\r\n").as_bytes())
                        .await;
                    return;
                }
                let _ = c
                    .write_all(format!("{head}5\r\nfirst\r\n").as_bytes())
                    .await;
                tokio::time::sleep(std::time::Duration::from_millis(800)).await;
                let _ = c.write_all(b"6\r\nsecond\r\n0\r\n\r\n").await;
            });
        }
    });
    let origin = TestOrigin::http1()
        .handler("/", |_| {
            Reply::ok("a body long enough to be compressed, twice over")
                .header("content-type", "text/plain")
        })
        .run()
        .await;
    let node = common::TestNode::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
  - {{id: raw, nodes: {{"{raw}": 1}}}}
global_rules:
  - id: g
    plugins:
      gzip: {{types: "*"}}
routes:
  - {{uri: /twice, upstream_id: o, plugins: {{gzip: {{types: "*"}}}}}}
  - {{uri: /mock, plugins: {{gzip: {{types: "*"}}, mocking: {{response_example: "{{\"a\": \"a mocked body long enough to compress\"}}"}}}}}}
  - {{uri: /stream, upstream_id: raw, plugins: {{http-logger: {{uri: "http://127.0.0.1:9/logs", include_resp_body: true}}}}}}
  - {{uri: /broken, upstream_id: raw, plugins: {{gzip: {{types: "*"}}}}}}
"#,
        o = origin.node(),
        raw = raw_addr,
    ));
    let cl = node.proxy();
    let gz = [("accept-encoding", "gzip")];

    // A global rule's gzip and the route's: compressed once.
    let r = cl.send(Method::GET, "/twice", &gz, "").await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(
        gunzip(&r.body),
        "a body long enough to be compressed, twice over"
    );

    // The gateway's own answer (a mock) is sent as it is, and says so.
    let r = cl.send(Method::GET, "/mock", &gz, "").await;
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-encoding").is_none(),
        "{:?}",
        r.header("content-encoding")
    );
    assert!(r.text().contains("a mocked body"), "{}", r.text());

    // A malformed body after the node's head: the 502 is the gateway's, without the
    // Content-Encoding set for the node's answer.
    let r = cl.send(Method::GET, "/broken", &gz, "").await;
    assert_eq!(r.status, 502);
    assert!(r.header("content-encoding").is_none());
    assert!(r.text().contains("error_msg"), "{}", r.text());

    // Through a body filter (a logger keeping the body), the first piece reaches the client
    // before the node's second.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(node.node().server().local_addrs()[0])
        .await
        .unwrap();
    s.write_all(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("first") {
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        started.elapsed() < std::time::Duration::from_millis(600),
        "the first piece waited for the second: {:?}",
        started.elapsed()
    );
}
