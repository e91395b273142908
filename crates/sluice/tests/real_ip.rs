//! The client's real address: APISIX's `real-ip` plugin (its real-ip.t cases, through a live
//! gateway) and the node-wide `real_ip` (NGINX's realip module), seen by every later phase, the
//! node's forwarded fields and the access log. Real sockets on 127.0.0.1.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hyper::Method;
use sluice_testkit::{Gateway, TestOrigin};

/// An access log file of this test's own, removed when dropped.
struct LogFile(PathBuf);

impl LogFile {
    fn new(name: &str) -> LogFile {
        LogFile(
            PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("real-ip-{name}-{}.log", std::process::id())),
        )
    }

    async fn lines(&self, n: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let text = std::fs::read_to_string(&self.0).unwrap_or_default();
            let lines: Vec<String> = text.lines().map(str::to_owned).collect();
            if lines.len() >= n {
                return lines;
            }
            assert!(Instant::now() < deadline, "{} of {n} lines", lines.len());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for LogFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test]
async fn the_real_ip_plugin_gives_every_later_phase_the_real_address() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let log = LogFile::new("plugin");
    let gw = Gateway::start(&format!(
        "log:
  access: {{path: {log}, format: '$uri $remote_addr $remote_port $realip_remote_addr $status', flush: 50ms}}
upstreams:
  - {{id: o, nodes: {{\"{o}\": 1}}}}
routes:
  - uri: /hello
    upstream_id: o
    plugins:
      real-ip: {{source: http_xff}}
      ip-restriction: {{whitelist: [1.1.1.1]}}
  - uri: /untrusted
    upstream_id: o
    plugins:
      real-ip: {{source: http_x_forwarded_for, trusted_addresses: [192.128.0.0/16]}}
      ip-restriction: {{whitelist: [1.1.1.1]}}
  - uri: /last
    upstream_id: o
    plugins:
      real-ip: {{source: http_x_forwarded_for, trusted_addresses: [192.128.0.0/16, 127.0.0.0/24]}}
      ip-restriction: {{whitelist: [1.1.1.1]}}
  - uri: /recursive
    upstream_id: o
    plugins:
      real-ip: {{source: http_x_forwarded_for, trusted_addresses: [192.128.0.0/16, 127.0.0.0/24], recursive: true}}
      ip-restriction: {{whitelist: [1.1.1.1]}}
  - uri: /port
    upstream_id: o
    plugins:
      real-ip: {{source: arg_realip}}
      response-rewrite: {{headers: {{remote_addr: $remote_addr, remote_port: $remote_port, peer: $realip_remote_addr}}}}
  - uri: /limited
    upstream_id: o
    plugins:
      real-ip: {{source: http_x_real_ip}}
      limit-count: {{count: 1, time_window: 60, key: remote_addr, rejected_code: 429}}
",
        log = log.0.display(),
        o = origin.node()
    ));
    let cl = gw.client();
    let status = |path: &'static str, headers: Vec<(&'static str, &'static str)>| {
        let cl = cl.clone();
        async move {
            cl.send(Method::GET, path, &headers, "")
                .await
                .status
                .as_u16()
        }
    };
    // APISIX's real-ip.t: hit, with a port, a missing and a bad address, a bad port.
    assert_eq!(status("/hello", vec![("xff", "1.1.1.1")]).await, 200);
    assert_eq!(status("/hello", vec![("xff", "1.1.1.1:80")]).await, 200);
    assert_eq!(
        status("/hello", vec![]).await,
        403,
        "no address: the peer's"
    );
    assert_eq!(status("/hello", vec![("xff", "1.1.1.1.1")]).await, 403);
    assert_eq!(status("/hello", vec![("xff", "1.1.1.1:65536")]).await, 403);
    // The node is told the real address.
    let seen = origin.last();
    assert_eq!(seen.header("x-real-ip"), Some("1.1.1.1"));
    assert_eq!(seen.header("x-forwarded-for"), Some("1.1.1.1"));

    let xff = |v: &'static str| vec![("x-forwarded-for", v)];
    assert_eq!(
        status("/untrusted", xff("1.1.1.1")).await,
        403,
        "a peer outside trusted_addresses is not believed"
    );
    let chain = "1.1.1.1, 192.128.1.1, 127.0.0.1";
    assert_eq!(status("/last", xff(chain)).await, 403, "the last address");
    assert_eq!(
        status("/recursive", xff(chain)).await,
        200,
        "the last untrusted address"
    );
    let seen = origin.last();
    assert_eq!(
        seen.header("x-forwarded-for"),
        Some("1.1.1.1, 192.128.1.1, 127.0.0.1, 1.1.1.1")
    );

    let r = cl.get("/port?realip=1.1.1.1:7090").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("remote_addr"), Some("1.1.1.1"));
    assert_eq!(r.header("remote_port"), Some("7090"));
    assert_eq!(r.header("peer"), Some("127.0.0.1"));

    // The limit's key is the real address: each has its own count.
    let real = |v: &'static str| vec![("x-real-ip", v)];
    assert_eq!(status("/limited", real("1.1.1.1")).await, 200);
    assert_eq!(status("/limited", real("1.1.1.1")).await, 429);
    assert_eq!(status("/limited", real("2.2.2.2")).await, 200);

    let lines = log.lines(11).await;
    assert!(
        lines.contains(&"/port 1.1.1.1 7090 127.0.0.1 200".to_owned()),
        "{lines:#?}"
    );
    assert!(
        lines.contains(&"/hello 1.1.1.1 - 127.0.0.1 200".to_owned()),
        "an address without a port has no remote_port: {lines:#?}"
    );
    // Requests on the same connection after one with a real address are the peer's again.
    let peer_line = lines
        .iter()
        .find(|l| l.starts_with("/hello 127.0.0.1 "))
        .unwrap();
    assert!(peer_line.ends_with(" 127.0.0.1 403"), "{peer_line}");
}

#[tokio::test]
async fn the_node_wide_real_ip_applies_before_routing() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let config = |from: &str| {
        format!(
            "real_ip: {{header: X-Forwarded-For, from: [{from}], recursive: true}}
routes:
  - uri: /only
    remote_addrs: [1.1.1.1]
    upstream: {{nodes: {{\"{o}\": 1}}}}
  - uri: /peer
    vars: [[realip_remote_addr, \"==\", \"127.0.0.1\"]]
    upstream: {{nodes: {{\"{o}\": 1}}}}
  - uri: /key
    upstream: {{type: chash, hash_on: vars, key: remote_addr, nodes: {{\"{o}\": 1}}}}
    plugins:
      response-rewrite: {{headers: {{seen: $remote_addr, peer: $realip_remote_addr}}}}
",
            o = origin.node()
        )
    };
    let gw = Gateway::start(&config("127.0.0.0/8, 10.0.0.0/8"));
    let cl = gw.client();
    let r = cl
        .send(
            Method::GET,
            "/only",
            &[("x-forwarded-for", "1.1.1.1, 10.1.2.3, 127.0.0.1")],
            "",
        )
        .await;
    assert_eq!(r.status, 200, "route remote_addrs sees the real address");
    assert_eq!(origin.last().header("x-real-ip"), Some("1.1.1.1"));
    assert_eq!(cl.get("/only").await.status, 404);
    // Route vars read the TCP peer as realip_remote_addr.
    let r = cl
        .send(Method::GET, "/peer", &[("x-forwarded-for", "9.9.9.9")], "")
        .await;
    assert_eq!(r.status, 200);
    let r = cl
        .send(Method::GET, "/key", &[("x-forwarded-for", "9.9.9.9")], "")
        .await;
    assert_eq!(r.header("seen"), Some("9.9.9.9"));
    assert_eq!(r.header("peer"), Some("127.0.0.1"));

    // A peer outside `from` is not believed.
    let strict = Gateway::start(&config("10.0.0.0/8"));
    let r = strict
        .client()
        .send(Method::GET, "/only", &[("x-forwarded-for", "1.1.1.1")], "")
        .await;
    assert_eq!(r.status, 404);
}

#[test]
fn bad_real_ip_settings_are_refused_with_their_place() {
    let plugins = sluice_plugins::shared();
    let refused = |yaml: &str| match sluice_config::load_str_with(yaml, &*plugins) {
        Ok(_) => panic!("accepted: {yaml}"),
        Err(e) => e.to_string(),
    };
    let route = |plugin: &str| {
        format!(
            "routes:\n  - {{uri: /a, upstream: {{nodes: {{\"127.0.0.1:1\": 1}}}}, plugins: {{real-ip: {plugin}}}}}\n"
        )
    };
    let e = refused(&route("{}"));
    assert!(
        e.contains("routes[0].plugins.real-ip") && e.contains("source"),
        "{e}"
    );
    let e = refused(&route(
        "{source: http_x_real_ip, trusted_addresses: [\"::1/129\"]}",
    ));
    assert!(
        e.contains("routes[0].plugins.real-ip.trusted_addresses[0]: invalid IP address or CIDR range \"::1/129\""),
        "{e}"
    );
    let e = refused(&route("{source: no_such_variable}"));
    assert!(
        e.contains("routes[0].plugins.real-ip.source: unknown variable"),
        "{e}"
    );
    let e = refused(&route("{source: http_x_real_ip, trusted_addresses: []}"));
    assert!(
        e.contains("routes[0].plugins.real-ip.trusted_addresses: must list"),
        "{e}"
    );
    let e = refused("real_ip: {from: []}\n");
    assert!(e.contains("real_ip.from: must list"), "{e}");
    let e = refused("real_ip: {header: 'bad header', from: [10.0.0.1/40]}\n");
    assert!(
        e.contains("real_ip.header: invalid header field name"),
        "{e}"
    );
    assert!(
        e.contains("real_ip.from[0]: invalid IP address or CIDR range"),
        "{e}"
    );
}

/// Listeners with `proxy_protocol: true`: the header's source is the client for every request
/// of the connection (v1 from curl and as bytes, v2 as bytes); a connection without one is
/// closed unanswered.
#[tokio::test]
async fn proxy_protocol_listeners_take_the_client_from_the_header() {
    use sluice_testkit::RawClient;
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, proxy_protocol: true}}]
routes:
  - uri: /*
    upstream: {{nodes: {{\"{o}\": 1}}}}
    plugins:
      response-rewrite: {{headers: {{seen: '$remote_addr:$remote_port', to: '$server_addr:$server_port', peer: $realip_remote_addr}}}}
",
        o = origin.node()
    ));
    let get = b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n";
    let mut v1 = RawClient::connect(gw.addr()).await;
    let mut bytes = b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 443\r\n".to_vec();
    bytes.extend_from_slice(get);
    v1.send(&bytes).await;
    let r = v1.response().await;
    assert_eq!(r.header("seen"), Some("203.0.113.7:51000"), "{}", r.text());
    assert_eq!(r.header("to"), Some("10.0.0.1:443"));
    assert_eq!(origin.last().header("x-real-ip"), Some("203.0.113.7"));
    // The next request of the connection is the same client's.
    v1.send(get).await;
    assert_eq!(
        v1.response().await.header("seen"),
        Some("203.0.113.7:51000")
    );

    let mut v2 = RawClient::connect(gw.addr()).await;
    let mut bytes = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    bytes.extend([
        0x21, 0x11, 0, 12, 198, 51, 100, 9, 10, 0, 0, 1, 0x1f, 0x90, 0x01, 0xbb,
    ]);
    bytes.extend_from_slice(get);
    v2.send(&bytes).await;
    assert_eq!(
        v2.response().await.header("seen"),
        Some("198.51.100.9:8080")
    );

    // curl's --haproxy-protocol (v1, its own address).
    let out = tokio::process::Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", "--haproxy-protocol"])
        .arg(gw.url("/a"))
        .output()
        .await
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("seen: 127.0.0.1:"), "{head}");

    // No header: closed without an answer.
    let mut bare = RawClient::connect(gw.addr()).await;
    bare.send(get).await;
    assert!(bare.read_to_close().await.is_empty());
}

#[test]
fn proxy_protocol_is_a_listener_setting() {
    let cfg = sluice_config::load_str(
        "listen: [{addr: 127.0.0.1:9080, proxy_protocol: true}, {addr: 127.0.0.1:9443, proxy_protocol: true, tls: true}]\nssls: []\n",
    );
    // The TLS listener needs a certificate; the error names it, not proxy_protocol.
    let e = cfg.unwrap_err().to_string();
    assert!(e.contains("listen[1].tls"), "{e}");
    assert!(!e.contains("proxy_protocol"), "{e}");
}
