//! `proxy-cache` through a live gateway and a counting origin: MISS, HIT, EXPIRED, BYPASS and
//! STALE as APISIX names them, what is never stored (RFC 9111's `private`, `no-store`,
//! `Vary: *`, `Set-Cookie`), variants by `Vary`, PURGE, one fetch for concurrent misses, the
//! host and scheme in every key, a bounded zone, the disk zone read back after a restart, and
//! a hit never leaving an unread request body to be taken for the next request.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hyper::Method;
use parking_lot::Mutex;
use sluice_testkit::RawClient;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// An HTTP/1.1 origin whose answers depend on the path, counting the requests per path.
/// `/slow*` answers after 300 ms. A path's answer: `/s<status>` sets the status,
/// `/h/<name>=<value>;...` adds fields (`%20` for a space), `/big` is 8 KiB.
#[derive(Clone)]
struct Origin {
    addr: std::net::SocketAddr,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl Origin {
    async fn start() -> Origin {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let h = hits.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let h = h.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            let mut chunk = [0u8; 4096];
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        let length: usize = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap())
                            })
                            .unwrap_or(0);
                        while buf.len() < end + 4 + length {
                            let mut chunk = [0u8; 4096];
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        buf.drain(..end + 4 + length);
                        let mut words = head.split(' ');
                        let method = words.next().unwrap().to_owned();
                        let path = words.next().unwrap().to_owned();
                        let n = {
                            let mut hits = h.lock();
                            let c = hits.entry(path.clone()).or_default();
                            *c += 1;
                            *c
                        };
                        if path.starts_with("/slow") {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                        }
                        let status = path
                            .strip_prefix("/s")
                            .and_then(|p| p.get(..3))
                            .and_then(|p| p.parse::<u16>().ok())
                            .unwrap_or(200);
                        let mut fields = String::new();
                        if let Some(rest) = path.split("/h/").nth(1) {
                            for f in rest.split(';').filter(|f| !f.is_empty()) {
                                let (n, v) = f.split_once('=').unwrap();
                                fields.push_str(&format!("{n}: {}\r\n", v.replace("%20", " ")));
                            }
                        }
                        let body = if path.starts_with("/big") {
                            "b".repeat(8192)
                        } else {
                            format!("{method} {path} #{n}")
                        };
                        let out = format!(
                            "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{fields}\r\n{}",
                            body.len(),
                            if method == "HEAD" { "" } else { &body }
                        );
                        if s.write_all(out.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Origin { addr, hits }
    }

    fn hits(&self, path: &str) -> usize {
        self.hits.lock().get(path).copied().unwrap_or(0)
    }
}

fn node(origin: &Origin, attr: &str, plugins: &str) -> common::TestNode {
    common::TestNode::start_text(&format!(
        r#"listen: [{{addr: "127.0.0.1:0", http2: true}}]
workers: 2
admin: {{listen: "127.0.0.1:0", key: {key}}}
{attr}
upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /*
    methods: [GET, HEAD, POST, PURGE]
    upstream_id: o
    plugins:
{plugins}
"#,
        o = origin.addr,
        key = common::KEY,
    ))
}

/// What curl gets over HTTP/2 (prior knowledge): head and body.
async fn curl_h2(addr: std::net::SocketAddr, path: &str) -> String {
    let out = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--http2-prior-knowledge",
            "-D",
            "-",
            "--max-time",
            "10",
        ])
        .arg(format!("http://{addr}{path}"))
        .output()
        .await
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// An origin, a zone directory, and a gateway with the test zones and `plugins` on `/*`.
async fn cached(plugins: &str) -> (Origin, std::path::PathBuf, common::TestNode) {
    let origin = Origin::start().await;
    let dir = zone_dir();
    let n = node(&origin, &mem_attr(dir.to_str().unwrap()), plugins);
    (origin, dir, n)
}

fn zone_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("sluice-cache-{:x}", common::fastrand_u64()))
}

fn mem_attr(dir: &str) -> String {
    format!(
        r#"
plugin_attr:
  proxy-cache:
    cache_ttl: 2
    zones:
      - {{name: mem, memory_size: 64k}}
      - {{name: disk, memory_size: 1m, disk_size: 10m, disk_path: "{dir}", cache_levels: "1:2"}}
"#
    )
}

async fn get(
    cl: &sluice_testkit::Client,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    let r = cl.send(Method::GET, path, headers, "").await;
    (
        r.status.as_u16(),
        r.header("apisix-cache-status").unwrap_or("-").to_owned(),
        r.text(),
    )
}

#[tokio::test]
async fn the_memory_strategy_answers_as_apisix_s_and_as_rfc_9111_asks() {
    let (origin, dir, n) = cached(
        r#"      proxy-cache:
        cache_strategy: memory
        cache_zone: mem
        cache_ttl: 3
        cache_bypass: ["$arg_bypass"]
        no_cache: ["$arg_nocache"]"#,
    )
    .await;
    let cl = n.proxy();

    // A miss, then a hit with its age; the node is asked once; the miss keeps its length.
    let r = cl.send(Method::GET, "/a", &[], "").await;
    assert_eq!(r.header("apisix-cache-status"), Some("MISS"));
    assert_eq!(
        r.header("content-length"),
        Some("9"),
        "the node's length is kept"
    );
    assert_eq!(r.text(), "GET /a #1");
    let r = cl.send(Method::GET, "/a", &[], "").await;
    assert_eq!(r.header("apisix-cache-status"), Some("HIT"));
    assert_eq!(r.header("age"), Some("0"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.text(), "GET /a #1");
    assert_eq!(origin.hits("/a"), 1);
    // HEAD is answered from the GET's entry, without a body.
    let r = cl.send(Method::HEAD, "/a", &[], "").await;
    assert_eq!(
        (r.header("apisix-cache-status"), r.body.len()),
        (Some("HIT"), 0)
    );
    assert_eq!(r.header("content-length"), Some("9"));
    // Another host is another key (CVE-2026-2836's lesson).
    assert_eq!(get(&cl, "/a", &[("host", "other.example")]).await.1, "MISS");
    // Over HTTP/2 too (curl, prior knowledge); a miss keeps the node's length there too.
    let addr = n.node().server().local_addrs()[0];
    let text = curl_h2(addr, "/a").await;
    assert!(text.starts_with("HTTP/2 200"), "{text}");
    assert!(text.contains("apisix-cache-status: HIT"), "{text}");
    assert!(text.ends_with("\r\n\r\nGET /a #1"), "{text}");
    let text = curl_h2(addr, "/h2").await;
    assert!(text.contains("apisix-cache-status: MISS"), "{text}");
    assert!(text.contains("content-length: 10"), "{text}");
    assert!(text.ends_with("\r\n\r\nGET /h2 #1"), "{text}");

    // Expired after cache_ttl, then fetched again.
    tokio::time::sleep(Duration::from_millis(3100)).await;
    assert_eq!(
        get(&cl, "/a", &[]).await,
        (200, "EXPIRED".into(), "GET /a #3".into())
    );
    assert_eq!(get(&cl, "/a", &[]).await.1, "HIT");

    // POST is not in cache_method: not stored, MISS each time.
    for _ in 0..2 {
        let r = cl.send(Method::POST, "/p", &[], "x").await;
        assert_eq!(r.header("apisix-cache-status"), Some("MISS"));
    }
    assert_eq!(origin.hits("/p"), 2);

    // cache_bypass and no_cache.
    assert_eq!(get(&cl, "/b?bypass=1", &[]).await.1, "BYPASS");
    assert_eq!(get(&cl, "/b?bypass=1", &[]).await.1, "BYPASS");
    assert_eq!(
        get(&cl, "/b?bypass=0", &[]).await.1,
        "MISS",
        "0 does not bypass"
    );
    assert_eq!(get(&cl, "/c?nocache=yes", &[]).await.1, "MISS");
    assert_eq!(
        get(&cl, "/c?nocache=yes", &[]).await.1,
        "MISS",
        "not stored"
    );

    // What is never stored: a status not listed, private, no-store, Set-Cookie, Vary: *.
    for path in [
        "/s500",
        "/h/cache-control=private",
        "/h/cache-control=no-store",
        "/h/set-cookie=a=b",
        "/h/vary=*",
    ] {
        assert_eq!(get(&cl, path, &[]).await.1, "MISS", "{path}");
        assert_eq!(get(&cl, path, &[]).await.1, "MISS", "{path} was stored");
    }
    // Credentials no plugin verified: kept only when the node says a shared cache may.
    let basic = [("authorization", "Basic YWxpY2U6d3Jvbmc=")];
    assert_eq!(get(&cl, "/private-ish", &basic).await.1, "MISS");
    assert_eq!(get(&cl, "/private-ish", &basic).await.1, "MISS");
    let shared = "/h/cache-control=public";
    assert_eq!(get(&cl, shared, &basic).await.1, "MISS");
    assert_eq!(get(&cl, shared, &basic).await.1, "HIT");
    assert_eq!(
        get(&cl, shared, &[]).await.1,
        "MISS",
        "the Basic user is part of the key (consumer_isolation)"
    );
    // An Age past 2^31 counts as 2^31 (RFC 9111 §1.2.2), never overflows.
    let old = "/h/age=99999999999999999999";
    assert_eq!(get(&cl, old, &[]).await.1, "MISS");
    let r = cl.send(Method::GET, old, &[], "").await;
    assert_eq!(r.header("age"), Some("2147483648"));
    // An upgrade is never answered from the cache, nor stored.
    let ws = [
        ("connection", "Upgrade"),
        ("upgrade", "websocket"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("sec-websocket-version", "13"),
    ];
    assert_eq!(get(&cl, "/a", &ws).await.1, "BYPASS");
    // A Range on a fill asks the node for the whole answer; the client gets it whole.
    let r = cl
        .send(Method::GET, "/r", &[("range", "bytes=0-1")], "")
        .await;
    assert_eq!((r.status.as_u16(), r.text()), (200, "GET /r #1".to_owned()));
    assert_eq!(
        get(&cl, "/r", &[]).await,
        (200, "HIT".into(), "GET /r #1".into())
    );
    // 404 is (the default list: 200, 301, 404).
    assert_eq!(get(&cl, "/s404", &[]).await.0, 404);
    assert_eq!(get(&cl, "/s404", &[]).await.1, "HIT");

    // Vary: one variant per value of the header named.
    let p = "/h/vary=Accept-Language";
    let en = [("accept-language", "en")];
    let fr = [("accept-language", "fr")];
    assert_eq!(get(&cl, p, &en).await.1, "MISS");
    assert_eq!(get(&cl, p, &fr).await.1, "MISS");
    assert_eq!(
        get(&cl, p, &en).await,
        (200, "HIT".into(), format!("GET {p} #1"))
    );
    assert_eq!(
        get(&cl, p, &fr).await,
        (200, "HIT".into(), format!("GET {p} #2"))
    );

    // PURGE removes every variant; a second finds nothing.
    let r = cl
        .send(Method::from_bytes(b"PURGE").unwrap(), p, &[], "")
        .await;
    assert_eq!(r.status, 200);
    let r = cl
        .send(Method::from_bytes(b"PURGE").unwrap(), p, &[], "")
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(get(&cl, p, &en).await.1, "MISS");

    // The zone is 64 KiB: 20 answers of 8 KiB do not all stay; the newest do.
    for i in 0..20 {
        assert_eq!(get(&cl, &format!("/big{i}"), &[]).await.1, "MISS");
    }
    assert_eq!(get(&cl, "/big19", &[]).await.1, "HIT");
    assert_eq!(
        get(&cl, "/big0", &[]).await.1,
        "MISS",
        "the oldest was evicted"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn cache_control_and_hidden_headers() {
    let (origin, dir, n) = cached(
        r#"      proxy-cache:
        cache_strategy: memory
        cache_zone: mem
        cache_control: true
        hide_cache_headers: true"#,
    )
    .await;
    let cl = n.proxy();
    let p = "/h/cache-control=max-age=60;expires=Thu,%2001%20Jan%202099%2000:00:00%20GMT";
    let r = cl.send(Method::GET, p, &[], "").await;
    assert_eq!(r.header("apisix-cache-status"), Some("MISS"));
    assert!(r.header("cache-control").is_none() && r.header("expires").is_none());
    let r = cl.send(Method::GET, p, &[], "").await;
    assert_eq!(r.header("apisix-cache-status"), Some("HIT"));
    assert!(r.header("cache-control").is_none() && r.header("expires").is_none());
    // The request's own directives.
    assert_eq!(
        get(&cl, p, &[("cache-control", "no-cache")]).await.1,
        "BYPASS"
    );
    assert_eq!(
        get(&cl, p, &[("cache-control", "min-fresh=120")]).await.1,
        "STALE"
    );
    assert_eq!(
        get(&cl, p, &[("cache-control", "max-age=100")]).await.1,
        "HIT"
    );
    let r = cl
        .send(
            Method::GET,
            "/never",
            &[("cache-control", "only-if-cached")],
            "",
        )
        .await;
    assert_eq!(r.status, 504);
    assert_eq!(origin.hits("/never"), 0);
    // With cache_control, an answer without a lifetime of its own is not stored... it is:
    // it takes cache_ttl; one with max-age=0 is not.
    for z in ["/h/cache-control=max-age=0", "/no-lifetime"] {
        assert_eq!(get(&cl, z, &[]).await.1, "MISS");
        assert_eq!(
            get(&cl, z, &[]).await.1,
            "MISS",
            "{z}: APISIX keeps no answer without a lifetime here"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A body another plugin changes (response-rewrite's filters) is not kept: a hit would give
/// the node's body, not the one the miss gave. A compressor's change is of encoding only: the
/// answer is kept, and hits go out uncompressed.
#[tokio::test]
async fn an_answer_another_filter_changes_is_not_kept() {
    let origin = Origin::start().await;
    let n = common::TestNode::start_text(&format!(
        r#"listen: [{{addr: "127.0.0.1:0"}}]
workers: 1
admin: {{listen: "127.0.0.1:0", key: {key}}}
upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /f/*
    upstream_id: o
    plugins:
      proxy-cache: {{cache_strategy: memory, cache_zone: memory_cache}}
      response-rewrite: {{filters: [{{regex: GET, replace: got}}]}}
  - uri: /z/*
    upstream_id: o
    plugins:
      proxy-cache: {{cache_strategy: memory, cache_zone: memory_cache}}
      gzip: {{types: "*", min_length: 1}}
"#,
        o = origin.addr,
        key = common::KEY,
    ));
    let cl = n.proxy();
    assert_eq!(
        get(&cl, "/f/1", &[]).await,
        (200, "MISS".into(), "got /f/1 #1".into())
    );
    assert_eq!(
        get(&cl, "/f/1", &[]).await,
        (200, "MISS".into(), "got /f/1 #2".into())
    );
    let gz = [("accept-encoding", "gzip")];
    let r = cl.send(Method::GET, "/z/1", &gz, "").await;
    assert_eq!(
        (
            r.header("apisix-cache-status"),
            r.header("content-encoding")
        ),
        (Some("MISS"), Some("gzip"))
    );
    let r = cl.send(Method::GET, "/z/1", &gz, "").await;
    assert_eq!(
        (
            r.header("apisix-cache-status"),
            r.header("content-encoding")
        ),
        (Some("HIT"), None)
    );
    assert_eq!(r.text(), "GET /z/1 #1");
}

#[tokio::test]
async fn concurrent_misses_make_one_fetch() {
    let (origin, dir, n) =
        cached("      proxy-cache: {cache_strategy: memory, cache_zone: mem}").await;
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let cl = n.proxy();
        tasks.push(tokio::spawn(async move { get(&cl, "/slow", &[]).await }));
    }
    let mut statuses = HashMap::<String, usize>::new();
    for t in tasks {
        let (code, status, body) = t.await.unwrap();
        assert_eq!((code, body.as_str()), (200, "GET /slow #1"));
        *statuses.entry(status).or_default() += 1;
    }
    assert_eq!(origin.hits("/slow"), 1, "{statuses:?}");
    assert_eq!(statuses.get("MISS"), Some(&1), "{statuses:?}");
    assert_eq!(statuses.get("HIT"), Some(&19), "{statuses:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_disk_strategy_survives_a_restart() {
    let origin = Origin::start().await;
    let dir = zone_dir();
    let plugins = "      proxy-cache: {cache_zone: disk}";
    {
        let n = node(&origin, &mem_attr(dir.to_str().unwrap()), plugins);
        let cl = n.proxy();
        assert_eq!(get(&cl, "/d", H).await.1, "MISS");
        assert_eq!(
            get(&cl, "/d", H).await,
            (200, "HIT".into(), "GET /d #1".into())
        );
        // NGINX's rules: the answer's own lifetime, Set-Cookie never, a method not cached
        // is BYPASS.
        let long = "/h/cache-control=max-age=3600";
        assert_eq!(get(&cl, long, H).await.1, "MISS");
        assert_eq!(get(&cl, "/h/set-cookie=a=b", H).await.1, "MISS");
        assert_eq!(get(&cl, "/h/set-cookie=a=b", H).await.1, "MISS");
        let r = cl.send(Method::POST, "/d", H, "").await;
        assert_eq!(r.header("apisix-cache-status"), Some("BYPASS"));
    }
    // The files are laid out as NGINX's levels=1:2.
    let files: Vec<_> = walk(&dir);
    assert!(!files.is_empty());
    for f in &files {
        let rel = f.strip_prefix(&dir).unwrap();
        let parts: Vec<_> = rel.iter().map(|p| p.to_string_lossy().len()).collect();
        assert_eq!(parts, [1, 2, 32], "{rel:?}");
    }
    // A new gateway reads the zone back: the long-lived entry is a hit without the node.
    let n = node(&origin, &mem_attr(dir.to_str().unwrap()), plugins);
    let cl = n.proxy();
    let long = "/h/cache-control=max-age=3600";
    assert_eq!(
        get(&cl, long, H).await,
        (200, "HIT".into(), format!("GET {long} #1"))
    );
    assert_eq!(origin.hits(long), 1);
    // The default disk lifetime here is 2 s (plugin_attr's cache_ttl).
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(get(&cl, "/d", H).await.1, "EXPIRED");
    let r = cl
        .send(Method::from_bytes(b"PURGE").unwrap(), long, H, "")
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(get(&cl, long, H).await.1, "MISS");
    drop(n);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The host every request of the restart test names: a new gateway listens elsewhere.
const H: &[(&str, &str)] = &[("host", "cache.example")];

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

/// Pingora's CVE-2025-4366: a hit answered without reading the request's body left that
/// body to be parsed as the next request. Here the body is read (it is in the buffer) or
/// the connection closes; the smuggled request is never answered.
#[tokio::test]
async fn a_hit_never_leaves_the_request_body_to_be_read_as_a_request() {
    let (origin, dir, n) =
        cached("      proxy-cache: {cache_strategy: memory, cache_zone: mem}").await;
    let addr = n.node().server().local_addrs()[0];
    assert_eq!(
        get(&n.proxy(), "/v", &[("host", "localhost")]).await.1,
        "MISS"
    );
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    // The body arrives with the head.
    let mut c = RawClient::connect(addr).await;
    c.send(
        format!(
            "GET /v HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{smuggled}",
            smuggled.len()
        )
        .as_bytes(),
    )
    .await;
    let r = c.response().await;
    assert_eq!(r.header("apisix-cache-status"), Some("HIT"));
    // A next request on the connection gets its own answer, not the smuggled one's.
    c.send(b"GET /v HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    let r = c.response().await;
    assert_eq!(r.header("apisix-cache-status"), Some("HIT"));
    // The body arrives after the head: the connection closes after the hit.
    let mut c = RawClient::connect(addr).await;
    c.send(
        format!(
            "GET /v HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
            smuggled.len()
        )
        .as_bytes(),
    )
    .await;
    let r = c.response().await;
    assert_eq!(r.header("apisix-cache-status"), Some("HIT"));
    assert_eq!(r.header("connection"), Some("close"));
    let _ = c.try_send(smuggled.as_bytes()).await;
    assert!(c.closed_within(Duration::from_secs(5)).await);
    assert_eq!(origin.hits("/smuggled"), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_configurations_are_refused_with_their_paths() {
    // Zones are the node's: `sluice validate` compiles the file with its plugin_attr.
    let route = |conf: &str| {
        format!(
            "{}routes:\n  - {{uri: /a, upstream: {{nodes: {{\"127.0.0.1:1\": 1}}}}, plugins: {{proxy-cache: {conf}}}}}\n",
            mem_attr("/tmp/sluice-validate-zone")
        )
    };
    let e = common::validate(&route("{cache_zone: nope}"));
    assert!(
        e.contains("routes[0].plugins.proxy-cache.cache_zone: cache_zone nope not found"),
        "{e}"
    );
    let e = common::validate(&route("{cache_strategy: memory, cache_zone: disk}"));
    assert!(
        e.contains("invalid or empty cache_zone for cache_strategy: memory"),
        "{e}"
    );
    let e = common::validate(&route("{cache_zone: memory_cache}"));
    assert!(
        e.contains("cache_zone memory_cache not found"),
        "zones given replace the defaults: {e}"
    );
    let e = common::validate(
        "plugin_attr:\n  proxy-cache:\n    zones: [{name: a, memory_size: 1m, disk_path: /tmp/x}]\n",
    );
    assert!(
        e.contains(
            "plugin_attr.proxy-cache.zones[0]: a disk zone needs both disk_path and disk_size"
        ),
        "{e}"
    );
    let at = |field: &str, says: &str| format!("plugins.proxy-cache.{field}: {says}");
    common::assert_refusals(
        "proxy-cache",
        &[
            (
                "{cache_key: [\"$request_method\"]}",
                at(
                    "cache_key",
                    "cache_key variable $request_method unsupported",
                ),
            ),
            (
                "{cache_key: [\"$nope\"]}",
                at("cache_key[0]", "unknown variable"),
            ),
            (
                "{cache_key: [a]}",
                at("cache_key[0]", "a text part must be at least 2"),
            ),
            (
                "{cache_method: [GET, PUT]}",
                at("cache_method[1]", "must be GET, POST or HEAD"),
            ),
            (
                "{cache_http_status: [99]}",
                at("cache_http_status[0]", "must be"),
            ),
            ("{cache_ttl: 0}", at("cache_ttl", "must be")),
            (
                "{max_resp_body_size: 0}",
                at("max_resp_body_size", "must be"),
            ),
            (
                "{cache_strategy: ram}",
                at("cache_strategy", "must be disk or memory"),
            ),
            (
                "{no_cache: []}",
                at("no_cache", "must list at least one part"),
            ),
        ],
    );
}
