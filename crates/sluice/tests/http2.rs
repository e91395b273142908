//! HTTP/2 downstream, end to end: curl over TLS (ALPN) and cleartext (prior knowledge), h2load,
//! and raw frames for each protection (malformed fields, stream limit, PING, SETTINGS,
//! RST_STREAM, server-side reset and CONTINUATION floods).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use sluice_testkit::{Gateway, Reply, TestOrigin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;
use common::pki::{Pki, curl};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// An access log file for one test, removed when the test ends (passed or not).
struct AccessLog(std::path::PathBuf);

impl AccessLog {
    fn new(tag: &str) -> AccessLog {
        AccessLog(std::env::temp_dir().join(format!(
            "sluice-{tag}-{}-{:x}.log",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        )))
    }

    /// Its lines, once there are `n` of them (or after 5 s, what there is).
    async fn lines(&self, n: usize) -> Vec<String> {
        let mut lines = Vec::new();
        for _ in 0..100 {
            let text = std::fs::read_to_string(&self.0).unwrap_or_default();
            lines = text.lines().map(str::to_owned).collect::<Vec<_>>();
            if lines.len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        lines
    }
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A gateway with an HTTP/2 cleartext listener (also HTTP/1.1) and a TLS one (ALPN h2), in
/// front of `origin`.
fn gateway(pki: &Pki, origin: &TestOrigin) -> Gateway {
    let (c, k) = pki.issue_files("site", &["a.test"]);
    Gateway::start(&format!(
        "listen:\n  - {{addr: 127.0.0.1:0, http2: true}}\n  - {{addr: 127.0.0.1:0, tls: true, http2: true}}\nworkers: 1\nssls:\n  - {{id: a, snis: [a.test], default: true, cert: \"{}\", key: \"{}\"}}\nroutes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        c.display(),
        k.display(),
        origin.node()
    ))
}

async fn run(cmd: &str, args: Vec<String>) -> (i32, String) {
    let cmd = cmd.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(cmd)
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Runs h2load: `n` requests over `c` connections, `m` streams at a time each; asserts that
/// every request succeeded.
async fn h2load(url: &str, n: u32, c: u32, m: u32) {
    let args = [
        "-n",
        &n.to_string(),
        "-c",
        &c.to_string(),
        "-m",
        &m.to_string(),
        url,
    ]
    .map(str::to_owned)
    .to_vec();
    let (code, out) = run("h2load", args).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("{n} succeeded, 0 failed, 0 errored")),
        "{url}: {out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_over_tls_and_cleartext_reaches_http1_upstreams() {
    let pki = Pki::new("h2");
    let origin = TestOrigin::http1()
        .handler("/echo", |r| Reply::ok(r.body.clone()))
        .handler("/big", |_| Reply::ok(vec![b'x'; 1 << 20]))
        .handler("/chunks", |_| Reply::ok("").chunked(&["a", "b", "c"]))
        .route("/", "hello h2")
        .run()
        .await;
    let gw = gateway(&pki, &origin);
    let (plain, tls) = (
        gw.server().local_addrs()[0].port(),
        gw.server().local_addrs()[1].port(),
    );
    // TLS, ALPN h2.
    let (code, out) = curl("a.test", tls, "/x", &pki.ca_file(), &["--http2"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("hello h2\n2 200"), "{out}");
    let got = origin.last();
    assert_eq!(got.version, hyper::Version::HTTP_11);
    assert_eq!(got.header("x-forwarded-proto"), Some("https"));
    assert_eq!(got.header("host"), Some(&*format!("a.test:{tls}")));
    // Cleartext with prior knowledge, and HTTP/1.1 on the same port.
    let base = format!("http://127.0.0.1:{plain}");
    let w = "\n%{http_version} %{http_code}".to_owned();
    let (_, out) = run(
        "curl",
        vec![
            "-sS".into(),
            "--http2-prior-knowledge".into(),
            "-w".into(),
            w.clone(),
            format!("{base}/p"),
        ],
    )
    .await;
    assert!(out.ends_with("hello h2\n2 200"), "{out}");
    assert_eq!(origin.last().header("x-forwarded-proto"), Some("http"));
    let (_, out) = run(
        "curl",
        vec!["-sS".into(), "-w".into(), w.clone(), format!("{base}/p")],
    )
    .await;
    assert!(out.ends_with("hello h2\n1.1 200"), "{out}");
    // Bodies both ways, large and chunked.
    let upload = std::env::temp_dir().join(format!("sluice-h2-upload-{}", std::process::id()));
    let data: Vec<u8> = (0..(1 << 20)).map(|i: u32| b'a' + (i % 26) as u8).collect();
    std::fs::write(&upload, &data).unwrap();
    let (code, out) = run(
        "curl",
        vec![
            "-sS".into(),
            "--http2-prior-knowledge".into(),
            "--data-binary".into(),
            format!("@{}", upload.display()),
            "-o".into(),
            "/dev/null".into(),
            "-w".into(),
            "%{size_download} %{http_code}".into(),
            format!("{base}/echo"),
        ],
    )
    .await;
    let _ = std::fs::remove_file(&upload);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out, format!("{} 200", data.len()));
    assert!(origin.last().body == data, "the upload arrived whole");
    let (_, out) = run(
        "curl",
        vec![
            "-sS".into(),
            "--http2-prior-knowledge".into(),
            "-o".into(),
            "/dev/null".into(),
            "-w".into(),
            "%{size_download}".into(),
            format!("{base}/big"),
        ],
    )
    .await;
    assert_eq!(out, (1 << 20).to_string());
    let (_, out) = run(
        "curl",
        vec![
            "-sS".into(),
            "--http2-prior-knowledge".into(),
            format!("{base}/chunks"),
        ],
    )
    .await;
    assert_eq!(out, "abc");
    // Gateway answers (no route, here none is missing: a 404 from a path the origin lacks is
    // the origin's) keep their status over HTTP/2.
    let (_, out) = run(
        "curl",
        vec![
            "-sS".into(),
            "--http2-prior-knowledge".into(),
            "-I".into(),
            format!("{base}/p"),
        ],
    )
    .await;
    assert!(out.starts_with("HTTP/2 200"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2load_requests_all_succeed() {
    let pki = Pki::new("h2load");
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = gateway(&pki, &origin);
    let plain = gw.server().local_addrs()[0].port();
    let tls = gw.server().local_addrs()[1].port();
    for url in [
        format!("http://127.0.0.1:{plain}/hello"),
        format!("https://127.0.0.1:{tls}/hello"),
    ] {
        h2load(&url, 2000, 4, 20).await;
    }
}

/// A client speaking raw HTTP/2 frames.
struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    async fn connect(port: u16) -> Raw {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        s.write_all(PREFACE).await.unwrap();
        let mut r = Raw { s, buf: Vec::new() };
        r.frame(SETTINGS, 0, 0, &[]).await;
        r
    }

    async fn frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let _ = self
            .s
            .write_all(&encode(kind, flags, stream, payload))
            .await;
    }

    /// The next frame, or None when the connection closed (or nothing came for 5 s).
    async fn next(&mut self) -> Option<(u8, u8, u32, Vec<u8>)> {
        loop {
            if self.buf.len() >= 9 {
                let len = (usize::from(self.buf[0]) << 16)
                    | (usize::from(self.buf[1]) << 8)
                    | usize::from(self.buf[2]);
                if self.buf.len() >= 9 + len {
                    let f: Vec<u8> = self.buf.drain(..9 + len).collect();
                    let stream = u32::from_be_bytes([f[5], f[6], f[7], f[8]]) & 0x7fff_ffff;
                    return Some((f[3], f[4], stream, f[9..].to_vec()));
                }
            }
            let mut chunk = [0u8; 16384];
            match tokio::time::timeout(Duration::from_secs(5), self.s.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Reads frames until a GOAWAY (its error code) or the end of the connection (None).
    async fn goaway(&mut self) -> Option<u32> {
        while let Some((kind, _, _, payload)) = self.next().await {
            if kind == GOAWAY {
                return Some(u32::from_be_bytes([
                    payload[4], payload[5], payload[6], payload[7],
                ]));
            }
        }
        None
    }

    /// Reads frames until an RST_STREAM for `stream` (its error code).
    async fn reset_of(&mut self, stream: u32) -> Option<u32> {
        while let Some((kind, _, id, payload)) = self.next().await {
            if kind == RST_STREAM && id == stream {
                return Some(u32::from_be_bytes([
                    payload[0], payload[1], payload[2], payload[3],
                ]));
            }
        }
        None
    }
}

fn encode(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK block of literal fields without indexing or Huffman (names and values < 127).
fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in fields {
        out.push(0x00);
        out.push(n.len() as u8);
        out.extend_from_slice(n.as_bytes());
        out.push(v.len() as u8);
        out.extend_from_slice(v.as_bytes());
    }
    out
}

fn get(path: &str) -> Vec<(&'static str, String)> {
    vec![
        (":method", "GET".to_owned()),
        (":scheme", "http".to_owned()),
        (":path", path.to_owned()),
        (":authority", "a.test".to_owned()),
    ]
}

fn block_of(fields: &[(&'static str, String)]) -> Vec<u8> {
    let f: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
    block(&f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_reset_and_the_stream_limit_holds() {
    let pki = Pki::new("h2-malformed");
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = gateway(&pki, &origin);
    let port = gw.server().local_addrs()[0].port();

    let mut raw = Raw::connect(port).await;
    // The server's SETTINGS announce the stream limit.
    let (kind, _, _, payload) = raw.next().await.unwrap();
    assert_eq!(kind, SETTINGS);
    let limit = payload
        .chunks(6)
        .find(|s| s[..2] == [0, 3])
        .map(|s| u32::from_be_bytes([s[2], s[3], s[4], s[5]]));
    assert_eq!(limit, Some(128));

    for (i, (name, value)) in [
        ("connection", "keep-alive"),
        ("transfer-encoding", "chunked"),
        ("te", "gzip"),
        ("x-padded", " leading space"),
    ]
    .into_iter()
    .enumerate()
    {
        let stream = 1 + 2 * i as u32;
        let mut fields = get("/");
        fields.push((name, value.to_owned()));
        raw.frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            stream,
            &block_of(&fields),
        )
        .await;
        assert_eq!(
            raw.reset_of(stream).await,
            Some(1),
            "{name}: PROTOCOL_ERROR"
        );
    }
    // A well-formed request on the same connection still works.
    raw.frame(HEADERS, END_HEADERS | END_STREAM, 21, &block_of(&get("/")))
        .await;
    let mut answered = false;
    while let Some((kind, flags, id, payload)) = raw.next().await {
        if kind == 0x0 && id == 21 {
            assert_eq!(payload, b"ok");
            answered = flags & END_STREAM != 0 || answered;
            if answered {
                break;
            }
        }
    }
    assert!(answered);

    // More than 128 streams at once (each still sending its body, so none ends): the
    // extra ones are refused (REFUSED_STREAM).
    let mut raw = Raw::connect(port).await;
    let mut post = get("/");
    post[0].1 = "POST".to_owned();
    for k in 0..130u32 {
        raw.frame(HEADERS, END_HEADERS, 1 + 2 * k, &block_of(&post))
            .await;
    }
    let mut refused = false;
    while let Some((kind, _, _, payload)) = raw.next().await {
        if kind == RST_STREAM && payload[..4] == [0, 0, 0, 7] {
            refused = true;
            break;
        }
    }
    assert!(refused, "a stream over the limit is refused");
}

/// The request smuggling checks of http2smugl and Frameshifter, as a table: HTTP/2 fields
/// that would read differently once written as HTTP/1.1 text (CR, LF, NUL, whitespace at the
/// ends of a value, upper case or non-token names, Unicode look-alikes of framing fields,
/// connection-specific fields, bad pseudo-headers) are malformed (RFC 9113 §8.2, §8.3). Each
/// stream is reset or answered 400, none reaches the HTTP/1.1 node, and the connection goes on
/// serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_fields_that_would_smuggle_into_http1_never_reach_the_node() {
    let pki = Pki::new("h2-smuggle");
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = gateway(&pki, &origin);
    let port = gw.server().local_addrs()[0].port();

    let extra = |name: &'static str, value: &str| {
        let mut f = get("/");
        f.push((name, value.to_owned()));
        f
    };
    let pseudo = |name: &'static str, value: &str| {
        let mut f = get("/");
        for (n, v) in f.iter_mut() {
            if *n == name {
                *v = value.to_owned();
            }
        }
        f
    };
    let cases: Vec<Vec<(&'static str, String)>> = vec![
        // CR, LF, NUL in values and names
        extra("x-inject", "a\r\nTransfer-Encoding: chunked"),
        extra("x-lf", "a\nb"),
        extra("x-cr", "a\rb"),
        extra("x-nul", "a\0b"),
        extra("x\r\ninjected", "1"),
        extra("host", "a.test\r\nx: y"),
        // whitespace at either end of a value
        extra("x-trailing", "value "),
        extra("x-leading-tab", "\tvalue"),
        extra("x-trailing-tab", "value\t"),
        // names: upper case, not tokens, empty
        extra("X-Upper", "1"),
        extra("Transfer-Encoding", "chunked"),
        extra("Content-Length", "0"),
        extra("x y", "1"),
        extra("x:y", "1"),
        extra("", "1"),
        // Unicode look-alikes (dotless i, h with stroke, Kelvin sign)
        extra("transfer-encod\u{131}ng", "chunked"),
        extra("content-lengt\u{127}", "5"),
        extra("\u{212a}eep-alive", "5"),
        // connection-specific fields (RFC 9113 §8.2.2)
        extra("upgrade", "h2c"),
        extra("keep-alive", "timeout=5"),
        extra("proxy-connection", "keep-alive"),
        extra("content-length", "abc"),
        // pseudo-headers: line breaks or spaces, empty, not a path, userinfo
        pseudo(":path", "/ HTTP/1.1\r\nX: y"),
        pseudo(":path", "/a b"),
        pseudo(":path", ""),
        pseudo(":path", "noslash"),
        pseudo(":method", "GET / HTTP/1.1"),
        pseudo(":method", "G\0T"),
        pseudo(":authority", "a.test\r\nx: y"),
        pseudo(":authority", "a b"),
        // RFC 3986 allows sub-delimiters in a host, Sluice's HTTP/1.1 parser does not: the
        // fast path (no plugins) forwarded it (found by the h2_frames fuzz target).
        pseudo(":authority", "!.test"),
        pseudo(":authority", "a;b.test"),
        // unknown, response-only, repeated and late pseudo-headers
        extra(":foo", "1"),
        extra(":status", "200"),
        extra(":path", "/again"),
        {
            let mut f = vec![("x-first", "1".to_owned())];
            f.extend(get("/"));
            f
        },
    ];

    let mut raw = Raw::connect(port).await;
    let mut stream = 1;
    let mut ended = 0;
    for fields in &cases {
        raw.frame(HEADERS, END_HEADERS | END_STREAM, stream, &block_of(fields))
            .await;
        // The stream reset (PROTOCOL_ERROR), or answered with a head whose first field is
        // HPACK's static `:status: 400` (index 12), or the connection ended with GOAWAY
        // (PROTOCOL_ERROR: `h2` refuses fields that are not valid `http` values there).
        let mut refused = None;
        while let Some((kind, _, id, payload)) = raw.next().await {
            refused = match (kind, id) {
                (GOAWAY, 0) => Some(("goaway", payload[4..8] == [0, 0, 0, 1])),
                (RST_STREAM, i) if i == stream => Some(("reset", payload[..4] == [0, 0, 0, 1])),
                (HEADERS, i) if i == stream => Some(("400", payload.first() == Some(&(0x80 | 12)))),
                _ => continue,
            };
            break;
        }
        assert!(
            refused.is_some_and(|(_, ok)| ok),
            "{fields:?} was not refused: {refused:?}"
        );
        if refused.is_some_and(|(how, _)| how == "goaway") {
            ended += 1;
            raw = Raw::connect(port).await;
            stream = 1;
        } else {
            stream += 2;
        }
    }
    eprintln!("{ended} of {} cases ended their connection", cases.len());
    assert!(
        origin.requests().is_empty(),
        "the node saw {:?}",
        origin.requests()
    );
    raw.frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        stream,
        &block_of(&get("/")),
    )
    .await;
    let mut body = Vec::new();
    while let Some((kind, flags, id, payload)) = raw.next().await {
        if kind == 0x0 && id == stream {
            body.extend_from_slice(&payload);
            if flags & END_STREAM != 0 {
                break;
            }
        }
    }
    assert_eq!(body, b"ok", "the connection serves on");
}

/// `n` streams opened with a GET head, each followed at once by a frame of `kind` on it.
fn streams_then(n: u32, kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut burst = Vec::new();
    for k in 0..n {
        let id = 1 + 2 * k;
        burst.extend(encode(HEADERS, END_HEADERS, id, &block_of(&get("/"))));
        burst.extend(encode(kind, 0, id, payload));
    }
    burst
}

/// Sends `frames` on a new connection at once; the GOAWAY error code that ends it, if any.
async fn flood(port: u16, frames: &[u8]) -> Option<u32> {
    let mut raw = Raw::connect(port).await;
    let _ = raw.s.write_all(frames).await;
    raw.goaway().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_end_the_connection_with_goaway() {
    let pki = Pki::new("h2-floods");
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = gateway(&pki, &origin);
    let port = gw.server().local_addrs()[0].port();
    const ENHANCE_YOUR_CALM: u32 = 11;
    const PROTOCOL_ERROR: u32 = 1;

    // PING flood.
    let mut burst = Vec::new();
    for i in 0..200u64 {
        burst.extend(encode(PING, 0, 0, &i.to_be_bytes()));
    }
    assert_eq!(
        flood(port, &burst).await,
        Some(ENHANCE_YOUR_CALM),
        "PING flood"
    );

    // SETTINGS flood.
    let mut burst = Vec::new();
    for _ in 0..100 {
        burst.extend(encode(SETTINGS, 0, 0, &[]));
    }
    assert_eq!(
        flood(port, &burst).await,
        Some(ENHANCE_YOUR_CALM),
        "SETTINGS flood"
    );

    // Rapid reset (CVE-2023-44487): open a stream, cancel it, again and again.
    let burst = streams_then(1000, RST_STREAM, &8u32.to_be_bytes());
    assert_eq!(
        flood(port, &burst).await,
        Some(ENHANCE_YOUR_CALM),
        "rapid reset"
    );

    // MadeYouReset (CVE-2025-8671): frames that make the server reset streams itself. A
    // WINDOW_UPDATE with a zero increment already ends the connection (h2 treats it as a
    // connection error); one that overflows a stream's window (RFC 9113 §6.9.1) is a stream
    // error, so a flood of them runs into the budget of resets the server sends.
    let mut raw = Raw::connect(port).await;
    raw.frame(HEADERS, END_HEADERS, 1, &block_of(&get("/")))
        .await;
    raw.frame(WINDOW_UPDATE, 0, 1, &0u32.to_be_bytes()).await;
    assert_eq!(raw.goaway().await, Some(PROTOCOL_ERROR), "zero increment");
    let burst = streams_then(1000, WINDOW_UPDATE, &0x7fff_ffffu32.to_be_bytes());
    assert_eq!(
        flood(port, &burst).await,
        Some(ENHANCE_YOUR_CALM),
        "server-side resets"
    );

    // CONTINUATION flood: a header block that never ends.
    let mut raw = Raw::connect(port).await;
    let mut fields = get("/");
    fields.push(("x-a", "b".to_owned()));
    let first = block_of(&fields);
    raw.frame(HEADERS, 0, 1, &first).await;
    let mut burst = Vec::new();
    for _ in 0..20_000 {
        burst.extend(encode(CONTINUATION, 0, 1, &block(&[("x-b", "c")])));
    }
    let _ = raw.s.write_all(&burst).await;
    let code = raw.goaway().await;
    assert!(
        matches!(code, Some(c) if c != 0),
        "CONTINUATION flood: GOAWAY with an error, got {code:?}"
    );

    // The listener still serves well-behaved clients.
    let (_, out) = run(
        "curl",
        vec![
            "-sS".into(),
            "--http2-prior-knowledge".into(),
            format!("http://127.0.0.1:{port}/"),
        ],
    )
    .await;
    assert_eq!(out, "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_keep_alive_over_http2_match_http1() {
    let origin = TestOrigin::http1().route("/", "pooled").run().await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, http2: true}}]\nworkers: 1\nroutes:\n  - {{uri: /dead, upstream: {{nodes: {{\"{dead}\": 1}}}}}}\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        origin.node()
    ));
    let base = format!("http://{}", gw.addr());
    let (_, out) = run(
        "curl",
        vec![
            "-sS".into(),
            "--http2-prior-knowledge".into(),
            "-w".into(),
            " %{http_code}".into(),
            format!("{base}/dead"),
        ],
    )
    .await;
    assert_eq!(out, "{\"error_msg\":\"cannot connect to upstream\"}\n 502");
    // Many requests on one HTTP/2 connection reuse pooled upstream connections (h2load: curl
    // 7.88 cannot send a second request on a prior-knowledge connection).
    h2load(&format!("{base}/r"), 200, 1, 1).await;
    assert!(
        origin.connections() <= 2,
        "{} upstream connections",
        origin.connections()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_budgets_are_configurable() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, http2: true}}]\nworkers: 1\nlimits: {{http2_pings_per_second: 5, http2_max_streams: 4}}\nroutes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        origin.node()
    ));
    let port = gw.addr().port();
    let mut raw = Raw::connect(port).await;
    let (_, _, _, settings) = raw.next().await.unwrap();
    let limit = settings
        .chunks(6)
        .find(|s| s[..2] == [0, 3])
        .map(|s| u32::from_be_bytes([s[2], s[3], s[4], s[5]]));
    assert_eq!(limit, Some(4));
    // Within the budget: answered, the connection stays.
    for i in 0..4u64 {
        raw.frame(PING, 0, 0, &i.to_be_bytes()).await;
    }
    raw.frame(HEADERS, END_HEADERS | END_STREAM, 1, &block_of(&get("/")))
        .await;
    let mut answered = false;
    while let Some((kind, _, id, _)) = raw.next().await {
        if kind == 0x0 && id == 1 {
            answered = true;
            break;
        }
        assert_ne!(kind, GOAWAY, "4 pings are within a budget of 5");
    }
    assert!(answered);
    // Over it.
    let mut burst = Vec::new();
    for i in 0..10u64 {
        burst.extend(encode(PING, 0, 0, &i.to_be_bytes()));
    }
    assert_eq!(flood(port, &burst).await, Some(11));
    let e = sluice_config::load_str("limits: {http2_max_streams: 0}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("limits.http2_max_streams: must be >= 1"), "{e}");
}

/// An origin answering every request with server-sent events: `data: 1`, then 400 ms later
/// `data: 2`, then the end of the response.
async fn sse_origin() -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n")
                    .await;
                tokio::time::sleep(Duration::from_millis(400)).await;
                let _ = s.write_all(b"9\r\ndata: 2\n\n\r\n0\r\n\r\n").await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_sent_events_are_streamed_as_they_come_over_both_protocols() {
    let origin = sse_origin().await;
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, http2: true}}]\nworkers: 1\nroutes:\n  - {{uri: /*, upstream: {{nodes: {{\"{origin}\": 1}}}}}}\n"
    ));
    // HTTP/1.1: the first event arrives while the second is still 400 ms away.
    let mut s = TcpStream::connect(gw.addr()).await.unwrap();
    let started = std::time::Instant::now();
    s.write_all(b"GET /events HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("data: 1") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    let first = started.elapsed();
    while !String::from_utf8_lossy(&got).contains("data: 2") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    let second = started.elapsed();
    assert!(
        first < Duration::from_millis(300),
        "HTTP/1.1 first event after {first:?}"
    );
    assert!(second >= Duration::from_millis(400), "{second:?}");

    // HTTP/2: the same, in DATA frames.
    let mut raw = Raw::connect(gw.addr().port()).await;
    let started = std::time::Instant::now();
    raw.frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &block_of(&get("/events")),
    )
    .await;
    let mut events = Vec::new();
    while let Some((kind, flags, id, payload)) = raw.next().await {
        if kind == 0x0 && id == 1 {
            if !payload.is_empty() {
                events.push((
                    started.elapsed(),
                    String::from_utf8_lossy(&payload).to_string(),
                ));
            }
            if flags & END_STREAM != 0 {
                break;
            }
        }
    }
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].1, "data: 1\n\n");
    assert!(
        events[0].0 < Duration::from_millis(300),
        "HTTP/2 first event after {:?}",
        events[0].0
    );
    assert!(events[1].0 >= Duration::from_millis(400));
}

/// An HTTP/2-only origin over TLS (ALPN h2 required), counting its connections.
async fn h2_tls_origin(
    pki: &Pki,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut config = (*pki.server_config_verifying(&["origin.test"], None)).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = conns.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let (acceptor, counted) = (acceptor.clone(), counted.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
                counted.fetch_add(1, Ordering::SeqCst);
                let svc = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        let text = format!("{:?} {}", req.version(), req.uri().path());
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from(text)),
                        ))
                    },
                );
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                        .await;
            });
        }
    });
    (addr, conns)
}

/// An HTTP/2 node's answer head is held to the limits of a parsed one (its size as HTTP/1.1,
/// `limits.max_response_header_size`): the engine takes it typed, never parsed.
#[tokio::test]
async fn http2_upstream_answer_heads_keep_the_response_head_limit() {
    let origin = TestOrigin::http2()
        .handler("/huge", |_| {
            Reply::ok("x").header("x-big", &"b".repeat(3000))
        })
        .handler("/small", |_| Reply::ok("fine").header("x-small", "s"))
        .run()
        .await;
    let gw = Gateway::start(&format!(
        "workers: 1\nlimits: {{max_response_header_size: 2KiB}}\nroutes:\n  - {{uri: /*, upstream: {{http2: true, nodes: {{\"{}\": 1}}}}}}\n",
        origin.node()
    ));
    let client = gw.client();
    assert_eq!(client.get("/huge").await.status, 502);
    let r = client.get("/small").await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "fine"));
    assert_eq!(r.header("x-small"), Some("s"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_upstreams_carry_every_client_over_one_multiplexed_connection() {
    use sluice_testkit::RawClient;
    let origin = TestOrigin::http2()
        .handler("/echo", |r| Reply::ok(r.body.clone()))
        .handler("/chunks", |_| Reply::ok("").chunked(&["a", "b", "c"]))
        .handler("/big", |_| Reply::ok(vec![b'x'; 1 << 20]))
        .handler("/empty", |_| Reply::status(204))
        .run()
        .await;
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, http2: true}}]\nworkers: 1\nroutes:\n  - {{uri: /*, upstream: {{http2: true, nodes: {{\"{}\": 1}}}}, plugins: {{response-rewrite: {{headers: {{set: {{x-edited: yes}}}}}}}}}}\n",
        origin.node()
    ));
    // Requests arriving together before any connection exists wait for one, rather than
    // each opening its own.
    let calls = (0..20).map(|i| {
        let client = gw.client();
        async move { client.get(&format!("/first?{i}")).await.status }
    });
    let statuses = futures_util::future::join_all(calls).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(origin.connections(), 1);
    let client = gw.client();
    // HTTP/1.1 clients: plain, with a body, chunked both ways, large, HEAD and 204.
    let r = client.get("/hello").await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "origin"));
    assert_eq!(r.header("x-edited"), Some("yes"), "plugins run");
    assert_eq!(origin.last().version, http::Version::HTTP_2);
    let upload = vec![b'u'; 300 * 1024];
    let r = client
        .send(http::Method::POST, "/echo", &[], upload.clone())
        .await;
    assert_eq!((r.status.as_u16(), r.body.len()), (200, upload.len()));
    assert_eq!(origin.last().body.len(), upload.len());
    assert_eq!(client.get("/chunks").await.text(), "abc");
    assert_eq!(client.get("/big").await.body.len(), 1 << 20);
    assert_eq!(client.get("/empty").await.status, 204);
    let mut raw = RawClient::connect(gw.addr()).await;
    raw.send(b"POST /echo HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        .await;
    let r = raw.response_to(false).await;
    assert_eq!((r.status, r.text().as_str()), (200, "hello world"));
    raw.send(b"HEAD /big HTTP/1.1\r\nhost: a\r\n\r\n").await;
    let r = raw.response_to(true).await;
    assert_eq!((r.status, r.text().as_str()), (200, ""));
    raw.send(b"GET /hello HTTP/1.1\r\nhost: a\r\n\r\n").await;
    assert_eq!(raw.response_to(false).await.text(), "origin", "keep-alive");
    // The fields an HTTP/1.1 upstream would get, typed for the stream: hop-by-hop ones
    // (and those `Connection` names) dropped, the forwarded ones set, earlier
    // X-Forwarded-For values kept first, the body's length declared.
    raw.send(b"POST /echo HTTP/1.1\r\nhost: a.test\r\nconnection: keep-alive, x-hop\r\nx-hop: 1\r\nkeep-alive: timeout=5\r\nx-forwarded-for: 10.0.0.1\r\nx-forwarded-for: 10.0.0.2\r\nx-kept: yes\r\ncontent-length: 2\r\n\r\nhi")
        .await;
    assert_eq!(raw.response_to(false).await.text(), "hi");
    let seen = origin.last();
    assert_eq!(seen.version, http::Version::HTTP_2);
    assert_eq!(seen.header("x-kept"), Some("yes"));
    assert_eq!(seen.header("x-hop"), None);
    assert_eq!(seen.header("keep-alive"), None);
    assert_eq!(seen.header("connection"), None);
    assert_eq!(
        seen.header("x-forwarded-for"),
        Some("10.0.0.1, 10.0.0.2, 127.0.0.1")
    );
    assert_eq!(seen.header("x-real-ip"), Some("127.0.0.1"));
    assert_eq!(seen.header("x-forwarded-proto"), Some("http"));
    assert_eq!(seen.header("x-forwarded-host"), Some("a.test"));
    assert_eq!(seen.header("content-length"), Some("2"));

    // Many at once: streams on the same connection.
    let calls = (0..40).map(|i| {
        let client = gw.client();
        async move { client.get(&format!("/echo?{i}")).await.status }
    });
    let statuses = futures_util::future::join_all(calls).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");

    // HTTP/2 clients, with and without a body.
    let url = format!("http://127.0.0.1:{}/echo", gw.addr().port());
    let (code, out) = run(
        "curl",
        vec![
            "-sS".into(),
            "--http2-prior-knowledge".into(),
            "-d".into(),
            "over h2".into(),
            url,
        ],
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "over h2"));
    h2load(&gw.url("/hello"), 200, 4, 10).await;

    assert_eq!(
        origin.connections(),
        1,
        "one multiplexed connection for everything"
    );
    assert!(
        origin
            .requests()
            .iter()
            .all(|r| r.version == http::Version::HTTP_2)
    );

    // A node that is not there: 502, as for HTTP/1.1 upstreams.
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let gw = Gateway::start(&format!(
        "routes:\n  - {{uri: /*, upstream: {{http2: true, nodes: {{\"{gone}\": 1}}}}}}\n"
    ));
    assert_eq!(gw.client().get("/").await.status, 502);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_over_tls_to_upstreams_negotiates_h2() {
    use std::sync::atomic::Ordering;
    let pki = Pki::new("h2-upstream");
    let (addr, conns) = h2_tls_origin(&pki).await;
    let gw = Gateway::start(&format!(
        "routes:\n  - {{uri: /*, upstream: {{scheme: https, http2: true, nodes: {{\"{addr}\": 1}}, tls: {{ca: \"{}\", sni: origin.test}}}}}}\n",
        pki.ca_file().display()
    ));
    for path in ["/a", "/b", "/c"] {
        let r = gw.client().get(path).await;
        assert_eq!(
            (r.status.as_u16(), r.text()),
            (200, format!("HTTP/2.0 {path}"))
        );
    }
    assert_eq!(conns.load(Ordering::SeqCst), 1);
}

/// Decrements its counter when dropped (a handler cancelled by a stream reset).
struct InFlight(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// An HTTP/2-only origin for the awkward cases: `/slow` answers after 2 s, `/events` sends its
/// head at once and its body 400 ms later, `/bye` answers and then ends its connection with
/// GOAWAY, `/stall` never reads its body nor answers (counted in flight until its stream is
/// reset). Counts requests per path and connections.
#[allow(clippy::type_complexity)]
async fn awkward_h2_origin() -> (
    std::net::SocketAddr,
    std::sync::Arc<parking_lot::Mutex<Vec<String>>>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::Frame;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let paths = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let conns = Arc::new(AtomicUsize::new(0));
    let stalled = Arc::new(AtomicUsize::new(0));
    let (p, c, st) = (paths.clone(), conns.clone(), stalled.clone());
    tokio::spawn(async move {
        while let Ok((io, _)) = l.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let (p, st) = (p.clone(), st.clone());
            let bye = Arc::new(tokio::sync::Notify::new());
            let said_bye = bye.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (p, said_bye, st) = (p.clone(), said_bye.clone(), st.clone());
                        async move {
                            let path = req.uri().path().to_owned();
                            p.lock().push(path.clone());
                            if path == "/stall" {
                                st.fetch_add(1, Ordering::SeqCst);
                                let _held = InFlight(st);
                                let _body = req;
                                tokio::time::sleep(Duration::from_secs(30)).await;
                                let body = http_body_util::Full::new(bytes::Bytes::new())
                                    .map_err(|never| match never {});
                                return Ok(hyper::Response::new(body.boxed()));
                            }
                            if path == "/early" {
                                // Answers at once, its body unread (then resets the stream).
                                let body = http_body_util::Full::new(bytes::Bytes::from("no"))
                                    .map_err(|never| match never {});
                                let mut resp = hyper::Response::new(body.boxed());
                                *resp.status_mut() = hyper::StatusCode::PAYLOAD_TOO_LARGE;
                                return Ok(resp);
                            }
                            let _ = req.into_body().collect().await;
                            let (tx, rx) = tokio::sync::mpsc::channel::<
                                Result<Frame<bytes::Bytes>, std::convert::Infallible>,
                            >(1);
                            match path.as_str() {
                                "/slow" => tokio::time::sleep(Duration::from_secs(2)).await,
                                "/events" => {
                                    tokio::spawn(async move {
                                        tokio::time::sleep(Duration::from_millis(400)).await;
                                        let _ = tx
                                            .send(Ok(Frame::data(bytes::Bytes::from_static(
                                                b"data: 1\n\n",
                                            ))))
                                            .await;
                                    });
                                    let body = StreamBody::new(
                                        tokio_stream::wrappers::ReceiverStream::new(rx),
                                    );
                                    return Ok::<_, std::convert::Infallible>(
                                        hyper::Response::new(body.boxed()),
                                    );
                                }
                                "/bye" => said_bye.notify_one(),
                                _ => {}
                            }
                            drop(tx);
                            let body = http_body_util::Full::new(bytes::Bytes::from(path))
                                .map_err(|never| match never {});
                            Ok(hyper::Response::new(body.boxed()))
                        }
                    },
                );
                let conn =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(io), svc);
                tokio::pin!(conn);
                tokio::select! {
                    _ = conn.as_mut() => return,
                    () = bye.notified() => {}
                }
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            });
        }
    });
    (addr, paths, conns, stalled)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_upstreams_time_out_stream_and_survive_the_nodes_goaway() {
    let (addr, paths, conns, stalled) = awkward_h2_origin().await;
    let gw = Gateway::start(&format!(
        "workers: 1\nroutes:\n  - {{uri: /*, timeout: {{send: 300ms, read: 300ms}}, upstream: {{http2: true, nodes: {{\"{addr}\": 1}}}}}}\n"
    ));
    let client = gw.client();
    // The route's read timeout: 504, and the request went up once.
    let started = std::time::Instant::now();
    assert_eq!(client.get("/slow").await.status, 504);
    assert!(started.elapsed() < Duration::from_millis(1500));
    let r = client.get("/slow").await;
    assert_eq!(r.status, 504, "again, on a pooled pipe");
    assert_eq!(
        paths.lock().iter().filter(|p| *p == "/slow").count(),
        2,
        "no resends"
    );
    // A head comes through before its body does.
    let mut s = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let started = std::time::Instant::now();
    s.write_all(b"GET /events HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "head after {:?}",
        started.elapsed()
    );
    // A node that answers before it read the body (a 413): the answer reaches the client,
    // whatever happens to the rest of the upload; and the next request goes through.
    let big = vec![b'x'; 4 << 20];
    let r = client.send(http::Method::POST, "/early", &[], big).await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (413, "no"));
    assert_eq!(client.get("/next").await.text(), "/next");
    // The node ends its connection (GOAWAY after /bye): a POST on a pooled pipe still goes
    // through, on a new connection, instead of failing as a non-retryable 502.
    assert_eq!(client.get("/bye").await.text(), "/bye");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = client.send(http::Method::POST, "/after", &[], "x").await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "/after"));
    assert_eq!(conns.load(std::sync::atomic::Ordering::SeqCst), 2);
    // A node that takes no body and never answers: the gateway gives up (504), and its
    // stream is reset rather than left holding one of the node's stream slots.
    let big = vec![b'x'; 4 << 20];
    let r = client.send(http::Method::POST, "/stall", &[], big).await;
    assert_eq!(r.status, 504);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        stalled.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "stream reset"
    );
}

/// An HTTP/2 connection with no stream open ends with a GOAWAY once idle for
/// `timeouts.keepalive` (counted from the end of its last stream), and at once when the gateway
/// shuts down. It sleeps until then: nothing wakes it in between (it used to check twice a
/// second), so both ends must come from its own deadline and the worker's drain signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connections_end_at_their_keepalive_and_at_shutdown() {
    const NO_ERROR: u32 = 0;
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let config = |keepalive: &str| {
        format!(
            "listen:\n  - {{addr: 127.0.0.1:0, http2: true}}\nworkers: 1\ntimeouts: {{keepalive: {keepalive}}}\nroutes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
            origin.node()
        )
    };

    let gw = Gateway::start(&config("600ms"));
    let port = gw.server().local_addrs()[0].port();
    let mut raw = Raw::connect(port).await;
    // One request, then silence: the deadline counts from the end of the stream.
    let block = [0x82, 0x86, 0x84, 0x01, 0x01, b'x'];
    raw.frame(HEADERS, 0x5, 1, &block).await;
    let started = std::time::Instant::now();
    assert_eq!(
        raw.goaway().await,
        Some(NO_ERROR),
        "an idle connection ends with GOAWAY"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500),
        "GOAWAY came {waited:?} after the stream, before the 600 ms keep-alive"
    );

    let gw = Gateway::start(&config("300s"));
    let port = gw.server().local_addrs()[0].port();
    let mut raw = Raw::connect(port).await;
    raw.frame(HEADERS, 0x5, 1, &block).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stopping = gw.shutdown_in_background();
    assert_eq!(
        raw.goaway().await,
        Some(NO_ERROR),
        "an idle connection gets GOAWAY when the gateway drains"
    );
    drop(raw);
    tokio::task::spawn_blocking(move || stopping.join().unwrap())
        .await
        .unwrap();
}

/// Reads a stream's answer whole, giving the window back only as it reads (the client's
/// window is small: the gateway must send as it opens, never more).
async fn read_all(resp: h2::client::ResponseFuture) -> (u16, http::HeaderMap, Vec<u8>) {
    let resp = resp.await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    (status, headers, got)
}

/// Streams the HTTP/1.1 engine carries (a body, or a plugin on the route: `h2_down.rs`, read
/// and written in place by the engine), from a client with a 16 KiB window: an upload with no
/// `content-length` (chunked to the node), a 1 MiB answer sent only as the window opens, a
/// chunked answer, HEAD, the gateway's own 413 sent while the client is still uploading, and a
/// stream the client resets mid-upload; the connection serves on after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_through_the_engine_keep_bodies_and_flow_control() {
    let origin = TestOrigin::http1()
        .handler("/echo", |r| Reply::ok(r.body.clone()))
        .handler("/big", |_| Reply::ok(vec![b'x'; 1 << 20]))
        .handler("/chunks", |_| Reply::ok("").chunked(&["a", "b", "c"]))
        .handler("/edited", |_| {
            Reply::ok("edited")
                .header("x-origin", "1")
                .header("x-kept", "k")
        })
        .route("/", "ok")
        .run()
        .await;
    // A node whose chunked body is malformed from its first bytes (sent with the head).
    let bad = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bad_chunks = bad.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = bad.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf).await;
                let _ = c
                    .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nxx\r\n")
                    .await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            });
        }
    });
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, http2: true}}]\nworkers: 1\nlimits: {{max_body_size: 256KiB}}\nroutes:\n  - uri: /*\n    plugins: {{response-rewrite: {{headers: {{set: {{X-Plugged: yes}}}}}}}}\n    upstream: {{nodes: {{\"{0}\": 1}}}}\n  - uri: /edited\n    plugins: {{response-rewrite: {{status_code: 203, headers: {{set: {{X-One: \"a  b \", X-Two: \"2\"}}, add: {{X-Three: \"3\"}}, remove: [x-origin]}}}}}}\n    upstream: {{nodes: {{\"{0}\": 1}}}}\n  - uri: /nobody\n    plugins: {{response-rewrite: {{status_code: 204}}}}\n    upstream: {{nodes: {{\"{0}\": 1}}}}\n  - uri: /badchunk\n    plugins: {{response-rewrite: {{headers: {{set: {{X-Plugged: yes}}}}}}}}\n    upstream: {{nodes: {{\"{1}\": 1}}}}\n",
        origin.node(),
        bad_chunks
    ));
    let tcp = TcpStream::connect(gw.addr()).await.unwrap();
    let (client, conn) = h2::client::Builder::new()
        .initial_window_size(16 * 1024)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .unwrap();
    tokio::spawn(conn);
    let url = |p: &str| format!("http://{}{p}", gw.addr());
    let req = |method: &str, p: &str| {
        http::Request::builder()
            .method(method)
            .uri(url(p))
            .body(())
            .unwrap()
    };
    let mut client = client.ready().await.unwrap();

    // An upload in three DATA frames, no content-length: the node gets it whole (chunked).
    let (resp, mut up) = client.send_request(req("POST", "/echo"), false).unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    for part in data.chunks(40_000) {
        up.reserve_capacity(part.len());
        let mut left = bytes::Bytes::copy_from_slice(part);
        while !left.is_empty() {
            let n = std::future::poll_fn(|cx| up.poll_capacity(cx))
                .await
                .unwrap()
                .unwrap();
            up.send_data(left.split_to(n.min(left.len())), false)
                .unwrap();
        }
    }
    up.send_data(bytes::Bytes::new(), true).unwrap();
    let (status, headers, body) = read_all(resp).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-plugged"], "yes", "the route's plugin ran");
    assert!(
        body == data,
        "echoed whole: {} of {} bytes",
        body.len(),
        data.len()
    );
    let got = origin.last();
    assert!(got.body == data, "the upload arrived whole");
    assert_eq!(got.header("transfer-encoding"), Some("chunked"));

    // A large answer, under the client's 16 KiB window.
    let mut client = client.ready().await.unwrap();
    let (resp, _) = client.send_request(req("GET", "/big"), true).unwrap();
    let (status, _, body) = read_all(resp).await;
    assert_eq!((status, body.len()), (200, 1 << 20));
    // A chunked answer, and HEAD.
    let mut client = client.ready().await.unwrap();
    let (resp, _) = client.send_request(req("GET", "/chunks"), true).unwrap();
    assert_eq!(read_all(resp).await.2, b"abc");
    let mut client = client.ready().await.unwrap();
    let (resp, _) = client.send_request(req("HEAD", "/big"), true).unwrap();
    let (status, headers, body) = read_all(resp).await;
    assert_eq!((status, body.len()), (200, 0));
    assert_eq!(headers["content-length"], (1 << 20).to_string());

    // The route's edits of the answer (status, set, add, remove), as an HTTP/1.1 client
    // gets them.
    let mut client = client.ready().await.unwrap();
    let (resp, _) = client.send_request(req("GET", "/edited"), true).unwrap();
    let (status, headers, body) = read_all(resp).await;
    assert_eq!((status, &body[..]), (203, &b"edited"[..]));
    assert_eq!(
        headers["x-one"], "a  b",
        "inner spaces kept, the trailing one not"
    );
    assert_eq!(headers["x-two"], "2");
    assert_eq!(headers["x-three"], "3");
    assert_eq!(headers["x-kept"], "k");
    assert!(!headers.contains_key("x-origin"), "{headers:?}");
    assert!(!headers.contains_key("connection"), "{headers:?}");
    // A status a plugin set that has no body: none follows, whatever the node sent.
    let mut client = client.ready().await.unwrap();
    let (resp, _) = client.send_request(req("GET", "/nobody"), true).unwrap();
    let (status, headers, body) = read_all(resp).await;
    assert_eq!((status, body.len()), (204, 0));
    assert!(!headers.contains_key("content-length"), "{headers:?}");
    // A node's body malformed from its first bytes: a clean 502, as over HTTP/1.1 (the head
    // is not sent before the body's first bytes were read well).
    let mut client = client.ready().await.unwrap();
    let (resp, _) = client.send_request(req("GET", "/badchunk"), true).unwrap();
    let (status, _, body) = read_all(resp).await;
    assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));

    // Past max_body_size: the 413 comes while the client still has bytes to send.
    let mut client = client.ready().await.unwrap();
    let (resp, mut up) = client.send_request(req("POST", "/echo"), false).unwrap();
    let chunk = bytes::Bytes::from(vec![b'y'; 16 * 1024]);
    let sender = tokio::spawn(async move {
        for _ in 0..64 {
            up.reserve_capacity(chunk.len());
            match std::future::poll_fn(|cx| up.poll_capacity(cx)).await {
                Some(Ok(n)) if n > 0 => {
                    if up
                        .send_data(chunk.slice(..n.min(chunk.len())), false)
                        .is_err()
                    {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                _ => return,
            }
        }
    });
    let (status, _, body) = tokio::time::timeout(Duration::from_secs(5), read_all(resp))
        .await
        .expect("answered while the upload went on");
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&body));
    sender.abort();

    // A stream the client resets mid-upload: the node's request is cut too (never completed
    // with what arrived), and the connection goes on.
    let mut client = client.ready().await.unwrap();
    let (resp, mut up) = client.send_request(req("POST", "/echo"), false).unwrap();
    up.send_data(bytes::Bytes::from_static(b"partial"), false)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    up.send_reset(h2::Reason::CANCEL);
    assert!(resp.await.is_err());
    // The node sees the cut request when the gateway closes its connection: waited for, so
    // that it is not raced by the request below (which takes another connection).
    for _ in 0..100 {
        if origin
            .requests()
            .iter()
            .filter(|r| r.method == "POST")
            .count()
            >= 3
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut client = client.ready().await.unwrap();
    let (resp, _) = client.send_request(req("GET", "/after"), true).unwrap();
    let (status, _, body) = read_all(resp).await;
    assert_eq!((status, &body[..]), (200, &b"ok"[..]));
    let requests = origin.requests();
    assert_eq!(requests.last().unwrap().uri, "/after");
    let cut: Vec<_> = requests
        .iter()
        .filter(|r| r.method == "POST")
        .skip(1)
        .map(|r| r.body.len())
        .collect();
    assert_eq!(
        cut,
        [0, 0],
        "the 413's and the reset stream's uploads were cut, not ended"
    );
}

/// A stream the engine carries (plugins on its route) is given to the engine as its head's
/// fields, not as HTTP/1.1 text: the node still gets what an HTTP/1.1 client's request would
/// carry (`host` from `:authority`, the `cookie` fields joined, no `te`, the body with its
/// length), the engine's head limits still apply to the head's size as HTTP/1.1 (414, 431),
/// and the connection serves on after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carried_streams_heads_reach_the_node_as_an_http1_clients_would() {
    let origin = TestOrigin::http1()
        .handler("/echo", |r| Reply::ok(r.body.clone()))
        .route("/", "ok")
        .run()
        .await;
    let log = AccessLog::new("h2-heads");
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, http2: true}}]\nworkers: 1\nlog: {{access: {{path: {}, format: '$status $request'}}}}\nlimits: {{max_request_line: 256, max_header_size: 1KiB, max_headers: 8}}\nroutes:\n  - uri: /*\n    plugins: {{proxy-rewrite: {{headers: {{set: {{X-Plugged: yes}}}}}}}}\n    upstream: {{nodes: {{\"{}\": 1}}}}\n",
        log.0.display(),
        origin.node(),
    ));
    let tcp = TcpStream::connect(gw.addr()).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();

    let req = http::Request::builder()
        .method("POST")
        .uri("http://example.test/echo?q=1")
        .header("cookie", "a=1")
        .header("x-custom", "v")
        .header("cookie", "b=2")
        .header("te", "trailers")
        .header("content-length", "5")
        .body(())
        .unwrap();
    let (resp, mut up) = client.send_request(req, false).unwrap();
    up.send_data(bytes::Bytes::from_static(b"hello"), true)
        .unwrap();
    let (status, _, body) = read_all(resp).await;
    assert_eq!((status, &body[..]), (200, &b"hello"[..]));
    let got = origin.last();
    assert_eq!(
        (got.method.as_str(), got.uri.as_str()),
        ("POST", "/echo?q=1")
    );
    assert_eq!(got.header("host"), Some("example.test"));
    assert_eq!(got.header_all("cookie"), ["a=1; b=2"]);
    assert_eq!(got.header("x-custom"), Some("v"));
    assert_eq!(
        got.header("x-plugged"),
        Some("yes"),
        "the route's plugin ran"
    );
    assert_eq!(got.header("content-length"), Some("5"));
    assert!(!got.has_header("te"), "{:?}", got.headers);
    assert!(!got.has_header("transfer-encoding"), "{:?}", got.headers);

    // One cookie field passes as it is.
    let mut client = client.ready().await.unwrap();
    let req = http::Request::builder()
        .uri("http://example.test/one")
        .header("cookie", "c=3")
        .body(())
        .unwrap();
    let (resp, _) = client.send_request(req, true).unwrap();
    assert_eq!(read_all(resp).await.0, 200);
    assert_eq!(origin.last().header_all("cookie"), ["c=3"]);

    // The head limits, on the head's size as HTTP/1.1: a :path past the request line's limit
    // (414), a field past the head's (431), more fields than allowed (431).
    let long_path = format!("http://example.test/{}", "p".repeat(256));
    let big_field = "v".repeat(1024);
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], u16);
    let cases: [Case<'_>; 3] = [
        (&long_path, &[], 414),
        ("http://example.test/", &[("x-big", &big_field)], 431),
        (
            "http://example.test/",
            &[
                ("x-1", "1"),
                ("x-2", "2"),
                ("x-3", "3"),
                ("x-4", "4"),
                ("x-5", "5"),
                ("x-6", "6"),
                ("x-7", "7"),
                ("x-8", "8"),
            ],
            431,
        ),
    ];
    for (uri, fields, want) in cases {
        let mut b = http::Request::builder().uri(uri);
        for (n, v) in fields {
            b = b.header(*n, *v);
        }
        let mut ready = client.clone().ready().await.unwrap();
        let (resp, _) = ready.send_request(b.body(()).unwrap(), true).unwrap();
        assert_eq!(read_all(resp).await.0, want, "{uri} {fields:?}");
    }
    // And the connection serves on.
    let mut client = client.ready().await.unwrap();
    let req = http::Request::builder()
        .uri("http://example.test/after")
        .body(())
        .unwrap();
    let (resp, _) = client.send_request(req, true).unwrap();
    assert_eq!(read_all(resp).await.0, 200);
    // The refused heads are logged with their request line, as over HTTP/1.1.
    let lines = log.lines(5).await;
    // (The 1 KiB field never reaches the engine: the HTTP/2 layer answers 431 itself, past the
    // header list size it announced from `max_header_size`.)
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert_eq!(lines[2], format!("414 GET /{} HTTP/1.1", "p".repeat(256)));
    assert_eq!(lines[3], "431 GET / HTTP/1.1");
}

/// A node's 103 Early Hints reaches an HTTP/2 client as an informational HEADERS frame (RFC
/// 9113 §8.1) before the final answer, as an HTTP/1.1 client gets it: on the fast path and on a
/// stream the engine carries (before, both dropped every 1xx, and the fast path then waited
/// for an answer it had already read); and a stream's `expect: 100-continue` gets the
/// gateway's 100 before it sends its body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_hints_reach_http2_clients_before_the_answer() {
    let node = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = node.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = node.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                loop {
                    let Ok(n) = c.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    while let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        got.drain(..end + 4);
                        // A `content-length` on the 103 (RFC 9110 §8.6 forbids it): not passed
                        // on, or the client would hold the chunked answer to it.
                        let answer = b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\ncontent-length: 7\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
                        if c.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    let echo = TestOrigin::http1()
        .handler("/echo", |r| Reply::ok(r.body.clone()))
        .run()
        .await;
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, http2: true}}]\nworkers: 1\nroutes:\n  - uri: /fast\n    upstream: {{nodes: {{\"{addr}\": 1}}}}\n  - uri: /plugged\n    plugins: {{response-rewrite: {{headers: {{set: {{X-Plugged: yes}}}}}}}}\n    upstream: {{nodes: {{\"{addr}\": 1}}}}\n  - uri: /echo\n    upstream: {{nodes: {{\"{}\": 1}}}}\n",
        echo.node(),
    ));
    let tcp = TcpStream::connect(gw.addr()).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    for path in ["/fast", "/plugged"] {
        let mut ready = client.clone().ready().await.unwrap();
        let req = http::Request::builder()
            .uri(format!("http://{}{path}", gw.addr()))
            .body(())
            .unwrap();
        let (mut resp, _) = ready.send_request(req, true).unwrap();
        let mut interim = Vec::new();
        while let Some(r) = std::future::poll_fn(|cx| resp.poll_informational(cx)).await {
            let r = r.unwrap();
            interim.push((r.status().as_u16(), r.headers().get("link").cloned()));
        }
        let (status, headers, body) = read_all(resp).await;
        assert_eq!(
            interim,
            [(
                103,
                Some(http::HeaderValue::from_static("</style.css>; rel=preload"))
            )],
            "{path}"
        );
        assert_eq!((status, &body[..]), (200, &b"ok"[..]), "{path}");
        assert!(
            !headers.contains_key("content-length"),
            "{path}: {headers:?}"
        );
        if path == "/plugged" {
            assert_eq!(headers["x-plugged"], "yes");
        }
    }

    // An upload that waits for the gateway's 100 Continue before its body.
    let mut ready = client.clone().ready().await.unwrap();
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{}/echo", gw.addr()))
        .header("expect", "100-continue")
        .header("content-length", "5")
        .body(())
        .unwrap();
    let (mut resp, mut up) = ready.send_request(req, false).unwrap();
    let first = tokio::time::timeout(
        Duration::from_secs(5),
        std::future::poll_fn(|cx| resp.poll_informational(cx)),
    )
    .await
    .expect("a 100 Continue before the body")
    .expect("an informational answer")
    .unwrap();
    assert_eq!(first.status(), 100);
    up.send_data(bytes::Bytes::from_static(b"hello"), true)
        .unwrap();
    let (status, _, body) = read_all(resp).await;
    assert_eq!((status, &body[..]), (200, &b"hello"[..]));
}

/// A stream the client resets while the node has not answered lets go of the node at once,
/// on the fast path, on a stream the engine carries and on a gRPC call: the node's
/// connection is closed (a gRPC node's stream is reset)
/// (before, it was held, with the stream's task, until the node answered or the read timeout
/// passed, 60 s here, while the client could open more streams in the reset ones' place: the
/// shape of rapid reset), and the request is logged with 499, NGINX's "client closed
/// request". The connection serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_the_client_resets_lets_go_of_its_node_and_is_logged_499() {
    // A node that reads a request and never answers; it reports each request it got, and when
    // the gateway closed the connection it came on.
    let node = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node_addr = node.local_addr().unwrap();
    let (got_tx, mut got_rx) = tokio::sync::mpsc::unbounded_channel::<&'static str>();
    let grpc_got = got_tx.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = node.accept().await {
            let got = got_tx.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut seen = Vec::new();
                loop {
                    match c.read(&mut buf).await {
                        Ok(0) | Err(_) => {
                            let _ = got.send("closed");
                            return;
                        }
                        Ok(n) => {
                            seen.extend_from_slice(&buf[..n]);
                            if seen.windows(4).any(|w| w == b"\r\n\r\n") {
                                seen.clear();
                                let _ = got.send("request");
                            }
                        }
                    }
                }
            });
        }
    });
    // A gRPC node (HTTP/2) that takes a call and never answers; it reports the call, and its
    // reset by the gateway.
    let grpc_node = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let grpc_addr = grpc_node.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((c, _)) = grpc_node.accept().await {
            let got = grpc_got.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(c).await else {
                    return;
                };
                while let Some(Ok((_req, mut respond))) = conn.accept().await {
                    let _ = got.send("request");
                    let got = got.clone();
                    tokio::spawn(async move {
                        let _ = std::future::poll_fn(|cx| respond.poll_reset(cx)).await;
                        let _ = got.send("closed");
                    });
                }
            });
        }
    });
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let log = AccessLog::new("h2-reset");
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, http2: true}}]\nworkers: 1\nlog: {{access: {{path: {}, format: '$status $request_uri $upstream_addr'}}}}\nroutes:\n  - uri: /fast\n    upstream: {{nodes: {{\"{node_addr}\": 1}}, timeout: {{read: 60}}}}\n  - uri: /carried\n    plugins: {{proxy-rewrite: {{headers: {{set: {{X-Plugged: yes}}}}}}}}\n    upstream: {{nodes: {{\"{node_addr}\": 1}}, timeout: {{read: 60}}}}\n  - uri: /after\n    upstream: {{nodes: {{\"{}\": 1}}}}\n  - uri: /svc.Echo/*\n    upstream: {{scheme: grpc, nodes: {{\"{grpc_addr}\": 1}}, timeout: {{read: 60}}}}\n",
        log.0.display(),
        origin.node(),
    ));
    let tcp = TcpStream::connect(gw.addr()).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    // A gRPC call still sending its messages when cancelled, several times: its answer and its
    // upload both see the reset, and it must read as the client's cancel whichever is first.
    let streaming = ["/svc.Echo/Stream"; 8];
    for path in ["/fast", "/carried", "/svc.Echo/Call"]
        .into_iter()
        .chain(streaming)
    {
        let mut ready = client.clone().ready().await.unwrap();
        let mut req = http::Request::builder().uri(format!("http://example.test{path}"));
        if path.starts_with("/svc") {
            req = req
                .method("POST")
                .header("content-type", "application/grpc")
                .header("te", "trailers");
        }
        let req = req.body(()).unwrap();
        let open = path.ends_with("/Stream");
        let (resp, mut stream) = ready.send_request(req, !open).unwrap();
        if open {
            stream
                .send_data(bytes::Bytes::from_static(b"\0\0\0\0\x01x"), false)
                .unwrap();
        }
        let got = tokio::time::timeout(Duration::from_secs(5), got_rx.recv()).await;
        assert_eq!(got.unwrap(), Some("request"), "{path}: the node got it");
        stream.send_reset(h2::Reason::CANCEL);
        let closed = tokio::time::timeout(Duration::from_secs(5), got_rx.recv()).await;
        assert_eq!(
            closed.ok().flatten(),
            Some("closed"),
            "{path}: the node's connection closed once the client reset the stream"
        );
        assert!(resp.await.is_err(), "{path}: the stream was reset");
    }
    let mut ready = client.ready().await.unwrap();
    let req = http::Request::builder()
        .uri("http://example.test/after")
        .body(())
        .unwrap();
    let (resp, _) = ready.send_request(req, true).unwrap();
    assert_eq!(read_all(resp).await.0, 200, "the connection serves on");
    let lines = log.lines(12).await;
    let mut want = vec![
        format!("499 /fast {node_addr}"),
        format!("499 /carried {node_addr}"),
        format!("499 /svc.Echo/Call {grpc_addr}"),
    ];
    want.extend(vec![format!("499 /svc.Echo/Stream {grpc_addr}"); 8]);
    want.push(format!("200 /after {}", origin.node()));
    assert_eq!(lines, want);
}
