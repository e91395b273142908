//! TLS termination and the L4 stream proxy, end to end: curl and rustls clients over real
//! sockets, certificates from a test CA, TCP and UDP echo servers, TLS servers behind SNI
//! passthrough.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use sluice_testkit::{Gateway, Reply, TestOrigin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

mod common;
use common::free_port;
use common::pki::{Pki, curl, tls_connect};

/// A TCP server that echoes what it reads.
async fn tcp_echo() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// A TLS server that answers every connection with `tag` and then echoes.
async fn tls_tagged(pki: &Pki, name: &str, tag: &'static str) -> SocketAddr {
    let acceptor = tokio_rustls::TlsAcceptor::from(pki.server_config(&[name]));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let _ = tls.write_all(tag.as_bytes()).await;
                let mut buf = [0u8; 1024];
                while let Ok(n) = tls.read(&mut buf).await {
                    if n == 0 || tls.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

async fn echo_round_trip<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    msg: &[u8],
) -> Vec<u8> {
    s.write_all(msg).await.unwrap();
    s.flush().await.unwrap();
    let mut got = vec![0u8; msg.len()];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
        .await
        .expect("echo within 5 s")
        .unwrap();
    got
}

fn ssl_yaml(id: &str, snis: &str, cert: &Path, key: &Path) -> String {
    format!(
        "  - {{id: {id}, snis: {snis}, cert: \"{}\", key: \"{}\"}}\n",
        cert.display(),
        key.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_is_served_with_the_certificate_for_the_name_asked() {
    let pki = Pki::new("https");
    let (ac, ak) = pki.issue_files("a", &["a.test"]);
    let (wc, wk) = pki.issue_files("w", &["*.b.test"]);
    let origin = TestOrigin::http1().route("/", "hello over tls").run().await;
    let gw = Gateway::start(&format!(
        "listen: [127.0.0.1:0, {{addr: 127.0.0.1:0, tls: true}}]\nworkers: 1\nssls:\n{}{}routes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        ssl_yaml("a", "[a.test]", &ac, &ak),
        ssl_yaml("w", "[\"*.b.test\"]", &wc, &wk),
        origin.node()
    ));
    let port = gw.server().local_addrs()[1].port();
    let ca = pki.ca_file();

    let (code, out) = curl("a.test", port, "/x", &ca, &[]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("hello over tls\n1.1 200"), "{out}");
    let got = origin.last();
    assert_eq!(got.header("x-forwarded-proto"), Some("https"));
    assert_eq!(got.header("host"), Some(&*format!("a.test:{port}")));

    // A wildcard name covers one label.
    let (code, out) = curl("api.b.test", port, "/", &ca, &[]).await;
    assert_eq!(code, 0, "{out}");
    // No certificate for this name, and no default: the handshake is refused.
    let (code, out) = curl("c.test", port, "/", &ca, &[]).await;
    assert_ne!(code, 0, "{out}");
    // TLS 1.2 is served; TLS 1.1 and older are not.
    let (code, out) = curl("a.test", port, "/", &ca, &["--tls-max", "1.2"]).await;
    assert_eq!(code, 0, "{out}");
    let (code, out) = curl("a.test", port, "/", &ca, &["--tls-max", "1.1"]).await;
    assert_ne!(code, 0, "{out}");
    // The plain listener is still plain.
    let r = gw.client().get("/plain").await;
    assert_eq!(r.text(), "hello over tls");
    assert_eq!(origin.last().header("x-forwarded-proto"), Some("http"));
}

/// Reads to the end of a TLS stream: `Ok` only when the server ended the session with a
/// close_notify alert (rustls reports an end without one as an error).
async fn read_to_clean_end<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> std::io::Result<String> {
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut all))
        .await
        .expect("the server closes within 5 s")?;
    Ok(String::from_utf8_lossy(&all).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sessions_end_with_close_notify_whoever_closes() {
    let pki = Pki::new("close");
    let (c, k) = pki.issue_files("a", &["a.test"]);
    let origin = TestOrigin::http1().route("/", "hi").run().await;
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, tls: true}}]\nworkers: 1\ntimeouts: {{keepalive: 300ms}}\nssls:\n{}routes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        ssl_yaml("a", "[a.test]", &c, &k),
        origin.node()
    ));
    let addr = gw.addr();
    // `Connection: close`, an idle keep-alive connection, and a refused request: each ends
    // with close_notify, whoever decided to close.
    for request in [
        &b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: x\r\n\r\n",
    ] {
        let mut s = tls_connect(&pki, addr, "a.test").await.unwrap();
        s.write_all(request).await.unwrap();
        let text = read_to_clean_end(&mut s)
            .await
            .unwrap_or_else(|e| panic!("{e} after {:?}", String::from_utf8_lossy(request)));
        assert!(text.starts_with("HTTP/1.1 "), "{text}");
    }
}

/// Requests pipelined in one TLS record are all answered, and a connection that waited idle
/// serves the next ones. An idle connection waits for its socket to be readable holding no
/// buffer (issue 12): plaintext rustls decrypted and the gateway did not read yet must end that
/// wait by itself. Twelve requests of exactly 1 KiB in one record: a 4 KiB read ends on a
/// request boundary with 8 KiB still inside rustls, and the socket has nothing more to say.
/// (Without that, not even the first request was answered: the client's first record arrives
/// with its handshake, and the handshake's read decrypts it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_in_one_tls_record_are_all_answered() {
    let pki = Pki::new("pipe");
    let (c, k) = pki.issue_files("a", &["a.test"]);
    let origin = TestOrigin::http1().route("/", "hi").run().await;
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, tls: true}}]\nworkers: 1\nssls:\n{}routes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        ssl_yaml("a", "[a.test]", &c, &k),
        origin.node()
    ));
    let request = |i: usize| {
        let head = format!("GET /{i:02} HTTP/1.1\r\nHost: a.test\r\nX-Pad: ");
        let pad = "p".repeat(1024 - head.len() - 4);
        format!("{head}{pad}\r\n\r\n")
    };
    assert_eq!(request(1).len(), 1024);
    let mut s = tls_connect(&pki, gw.addr(), "a.test").await.unwrap();
    for round in 0..3 {
        let all: String = (0..12).map(request).collect();
        s.write_all(all.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while String::from_utf8_lossy(&got)
            .matches("HTTP/1.1 200")
            .count()
            < 12
        {
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "round {round}: {} of 12 pipelined requests answered",
                        String::from_utf8_lossy(&got)
                            .matches("HTTP/1.1 200")
                            .count()
                    )
                })
                .unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        // Idle between rounds: the next round finds the connection waiting.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_certificate_serves_new_handshakes_and_open_connections_go_on() {
    let old = Pki::new("old");
    let new = Pki::new("new");
    let (oc, ok) = old.issue_files("a", &["a.test"]);
    let (nc, nk) = new.issue_files("a", &["a.test"]);
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let yaml = |c: &Path, k: &Path| {
        format!(
            "listen: [{{addr: 127.0.0.1:0, tls: true}}]\nworkers: 1\nssls:\n{}routes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
            ssl_yaml("a", "[a.test]", c, k),
            origin.node()
        )
    };
    let gw = Gateway::start(&yaml(&oc, &ok));
    let addr = gw.addr();
    // A keep-alive connection made with the old certificate.
    let mut conn = tls_connect(&old, addr, "a.test").await.unwrap();
    let req = b"GET /1 HTTP/1.1\r\nHost: a.test\r\n\r\n";
    conn.write_all(req).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = conn.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));

    gw.reload(&yaml(&nc, &nk)).unwrap();
    // New handshakes get the new certificate; the old CA no longer verifies it.
    assert!(tls_connect(&new, addr, "a.test").await.is_ok());
    assert!(tls_connect(&old, addr, "a.test").await.is_err());
    let (code, out) = curl("a.test", addr.port(), "/", &new.ca_file(), &[]).await;
    assert_eq!(code, 0, "{out}");
    // The connection opened before the change still serves requests.
    conn.write_all(b"GET /2 HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let n = conn.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    assert_eq!(origin.last().uri, "/2");
}

#[tokio::test]
async fn tcp_and_udp_stream_routes_carry_bytes_both_ways() {
    let tcp = tcp_echo().await;
    let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let udp_addr = udp.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = udp.recv_from(&mut buf).await {
            let mut reply = b"echo:".to_vec();
            reply.extend_from_slice(&buf[..n]);
            let _ = udp.send_to(&reply, from).await;
        }
    });
    let (tp, sp, up) = (free_port(), free_port(), free_port());
    let gw = Gateway::start(&format!(
        "stream_routes:\n  - {{id: tcp-echo, listen: 127.0.0.1:{tp}, protocol: tcp, upstream: {{scheme: tcp, nodes: {{\"{tcp}\": 1}}}}}}\n  - {{id: spliced, listen: 127.0.0.1:{sp}, splice: true, upstream: {{nodes: {{\"{tcp}\": 1}}}}}}\n  - {{id: udp-echo, listen: 127.0.0.1:{up}, protocol: udp, upstream: {{scheme: udp, nodes: {{\"{udp_addr}\": 1}}}}}}\n"
    ));
    // Copied through Sluice, and moved by splice(2).
    for port in [tp, sp] {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        assert_eq!(echo_round_trip(&mut s, b"hello l4").await, b"hello l4");
        let big: Vec<u8> = (0..1_000_000u32).map(|i| i as u8).collect();
        let (mut r, mut w) = s.into_split();
        let sent = big.clone();
        let writer = tokio::spawn(async move {
            w.write_all(&sent).await.unwrap();
            // A half-close reaches the node, whose close comes back after the echo.
            w.shutdown().await.unwrap();
        });
        let mut got = vec![0u8; big.len()];
        r.read_exact(&mut got).await.unwrap();
        writer.await.unwrap();
        assert!(got == big, "1 MB came back unchanged on port {port}");
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), r.read_to_end(&mut rest))
            .await
            .expect("closed after the half-close")
            .unwrap();
        assert!(rest.is_empty());
    }

    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(("127.0.0.1", up)).await.unwrap();
    for i in 0..3 {
        let msg = format!("ping {i}");
        client.send(msg.as_bytes()).await.unwrap();
        let mut buf = [0u8; 2048];
        let n = tokio::time::timeout(Duration::from_secs(5), client.recv(&mut buf))
            .await
            .expect("udp reply within 5 s")
            .unwrap();
        assert_eq!(&buf[..n], format!("echo:{msg}").as_bytes());
    }
    drop(gw);
}

#[tokio::test]
async fn tls_passthrough_routes_by_sni_without_terminating() {
    let pki = Pki::new("sni");
    let a = tls_tagged(&pki, "db.example.com", "A").await;
    let b = tls_tagged(&pki, "cache.example.com", "B").await;
    let other = tls_tagged(&pki, "other.test", "C").await;
    let port = free_port();
    let _gw = Gateway::start(&format!(
        "stream_routes:
  - {{id: db, listen: 127.0.0.1:{port}, sni: db.example.com, upstream: {{nodes: {{\"{a}\": 1}}}}}}
  - {{id: cache, listen: 127.0.0.1:{port}, sni: cache.example.com, splice: true, upstream: {{nodes: {{\"{b}\": 1}}}}}}
  - {{id: rest, listen: 127.0.0.1:{port}, upstream: {{nodes: {{\"{other}\": 1}}}}}}
"
    ));
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    for (name, tag) in [
        ("db.example.com", b"A"),
        ("cache.example.com", b"B"),
        ("other.test", b"C"),
    ] {
        // The client verifies the upstream's own certificate: Sluice did not terminate TLS.
        let mut s = tls_connect(&pki, addr, name).await.unwrap();
        let mut first = [0u8; 1];
        s.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, tag, "{name}");
        assert_eq!(echo_round_trip(&mut s, b"through").await, b"through");
    }
}

#[tokio::test]
async fn a_stream_route_can_terminate_tls_and_forward_plaintext() {
    let pki = Pki::new("term");
    let (c, k) = pki.issue_files("db", &["db.test"]);
    let echo = tcp_echo().await;
    let port = free_port();
    let _gw = Gateway::start(&format!(
        "ssls:\n{}stream_routes:\n  - {{id: t, listen: 127.0.0.1:{port}, tls: true, upstream: {{nodes: {{\"{echo}\": 1}}}}}}\n",
        ssl_yaml("db", "[db.test]", &c, &k)
    ));
    let mut s = tls_connect(&pki, ([127, 0, 0, 1], port).into(), "db.test")
        .await
        .unwrap();
    assert_eq!(
        echo_round_trip(&mut s, b"plain inside").await,
        b"plain inside"
    );
}

#[tokio::test]
async fn idle_stream_connections_are_closed_copied_or_spliced() {
    let echo = tcp_echo().await;
    let (a, b) = (free_port(), free_port());
    let _gw = Gateway::start(&format!(
        "stream_routes:\n  - {{id: a, listen: 127.0.0.1:{a}, idle_timeout: 200ms, upstream: {{nodes: {{\"{echo}\": 1}}}}}}\n  - {{id: b, listen: 127.0.0.1:{b}, idle_timeout: 200ms, splice: true, upstream: {{nodes: {{\"{echo}\": 1}}}}}}\n"
    ));
    for port in [a, b] {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        assert_eq!(echo_round_trip(&mut s, b"x").await, b"x");
        let quiet = std::time::Instant::now();
        assert!(closed_at_once(&mut s).await, "port {port}");
        let after = quiet.elapsed();
        assert!(
            after >= Duration::from_millis(200) && after < Duration::from_secs(2),
            "closed after {after:?} on port {port}"
        );
    }
}

/// Whether the connection is closed by the other side without a byte for us.
async fn closed_at_once(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test]
async fn ip_restriction_and_limit_conn_work_on_stream_routes() {
    let echo = tcp_echo().await;
    let (denied, limited) = (free_port(), free_port());
    let _gw = Gateway::start(&format!(
        "stream_routes:
  - {{id: d, listen: 127.0.0.1:{denied}, upstream: {{nodes: {{\"{echo}\": 1}}}}, plugins: {{ip-restriction: {{blacklist: [127.0.0.0/8]}}}}}}
  - {{id: l, listen: 127.0.0.1:{limited}, upstream: {{nodes: {{\"{echo}\": 1}}}}, plugins: {{limit-conn: {{conn: 1, burst: 0, default_conn_delay: 0.1}}}}}}
"
    ));
    let mut s = TcpStream::connect(("127.0.0.1", denied)).await.unwrap();
    let _ = s.write_all(b"x").await;
    assert!(
        closed_at_once(&mut s).await,
        "a blacklisted client is closed"
    );

    let mut first = TcpStream::connect(("127.0.0.1", limited)).await.unwrap();
    assert_eq!(echo_round_trip(&mut first, b"one").await, b"one");
    let mut second = TcpStream::connect(("127.0.0.1", limited)).await.unwrap();
    assert!(
        closed_at_once(&mut second).await,
        "over conn + burst: closed"
    );
    drop(first);
    // The slot is free again once the first connection is gone.
    let mut ok = false;
    for _ in 0..50 {
        let mut third = TcpStream::connect(("127.0.0.1", limited)).await.unwrap();
        third.write_all(b"three").await.unwrap();
        let mut got = [0u8; 5];
        if let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_millis(500), third.read_exact(&mut got)).await
        {
            ok = &got == b"three";
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok, "a connection is admitted after the first closed");
}

/// On UDP routes the plugins' stream phase runs when a client's session starts: limit-conn
/// counts sessions per client address (over the limit the datagram is dropped) and frees the
/// slot when the session ends; ip-restriction refuses a session.
#[tokio::test]
async fn plugins_act_on_udp_sessions_when_they_start() {
    let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let node = udp.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = udp.recv_from(&mut buf).await {
            let _ = udp.send_to(&buf[..n], from).await;
        }
    });
    let (limited, denied) = (free_port(), free_port());
    let _gw = Gateway::start(&format!(
        "stream_routes:
  - {{id: l, listen: 127.0.0.1:{limited}, protocol: udp, idle_timeout: 1s, upstream: {{nodes: {{\"{node}\": 1}}}}, plugins: {{limit-conn: {{conn: 1, burst: 0, default_conn_delay: 0.1}}}}}}
  - {{id: d, listen: 127.0.0.1:{denied}, protocol: udp, upstream: {{nodes: {{\"{node}\": 1}}}}, plugins: {{ip-restriction: {{blacklist: [127.0.0.0/8]}}}}}}
"
    ));
    async fn answered(port: u16, sock: &UdpSocket) -> bool {
        sock.send_to(b"ping", ("127.0.0.1", port)).await.unwrap();
        let mut buf = [0u8; 64];
        tokio::time::timeout(Duration::from_millis(500), sock.recv(&mut buf))
            .await
            .is_ok()
    }
    let first = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    assert!(
        answered(limited, &first).await,
        "the first session is served"
    );
    let second = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    assert!(
        !answered(limited, &second).await,
        "a second session from the same address is over conn + burst"
    );
    assert!(answered(limited, &first).await, "the first session goes on");
    // Once the first session has been idle for its timeout, its slot is free.
    let mut ok = false;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if answered(limited, &second).await {
            ok = true;
            break;
        }
    }
    assert!(ok, "a session is admitted after the first one ended");
    let third = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    assert!(
        !answered(denied, &third).await,
        "a blacklisted client gets no session"
    );
}

#[test]
fn tls_and_stream_configuration_errors_name_their_paths() {
    let plugins = sluice_plugins::builtin();
    let err = |yaml: &str| {
        sluice_config::load_str_with(yaml, &plugins)
            .unwrap_err()
            .to_string()
    };
    // APISIX's stream schemes: tcp, tls and udp for stream routes of that protocol, not for
    // HTTP routes.
    let e = err("upstreams:
  - {id: t, scheme: tcp, nodes: {\"127.0.0.1:1\": 1}}
routes:
  - {uri: /a, upstream_id: t}
  - {uri: /b, upstream: {scheme: udp, nodes: {\"127.0.0.1:1\": 1}}}
  - {uri: /c, service_id: s}
services:
  - {id: s, upstream_id: t}
stream_routes:
  - {listen: 127.0.0.1:9100, protocol: udp, upstream_id: t}
  - {listen: 127.0.0.1:9101, protocol: udp, upstream: {scheme: tls, nodes: {\"127.0.0.1:1\": 1}}}
  - {listen: 127.0.0.1:9102, protocol: udp, service_id: s}
");
    for want in [
        "routes[0].upstream_id: upstream \"t\": scheme tcp is for stream routes",
        "routes[1].upstream.scheme: scheme udp is for stream routes",
        "stream_routes[0].upstream_id: upstream \"t\": scheme tcp does not match the stream route's protocol udp",
        "stream_routes[1].upstream.scheme: scheme tls does not match the stream route's protocol udp",
        "routes[2].service_id: the service's upstream: scheme tcp is for stream routes",
        "stream_routes[2].service_id: the service's upstream: scheme tcp does not match the stream route's protocol udp",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
    let e = err("listen: [{addr: 127.0.0.1:9443, tls: true}]\n");
    assert!(
        e.contains("listen[0].tls: a TLS listener needs at least one certificate in ssls"),
        "{e}"
    );
    let e = err("listen: 127.0.0.1:9080
stream_routes:
  - {listen: 127.0.0.1:9080, upstream: {nodes: {\"127.0.0.1:1\": 1}}}
  - {listen: 127.0.0.1:9100, protocol: udp, sni: a.test, upstream: {nodes: {\"127.0.0.1:1\": 1}}}
  - {listen: 127.0.0.1:9101, upstream: {nodes: {\"127.0.0.1:1\": 1}}, plugins: {cors: {}}}
  - {listen: 127.0.0.1:9102, upstream: {nodes: {\"127.0.0.1:1\": 1}}}
  - {listen: 127.0.0.1:9102, upstream: {nodes: {\"127.0.0.1:1\": 1}}}
  - {listen: 127.0.0.1:9103, tls: true, upstream: {nodes: {\"127.0.0.1:1\": 1}}}
  - {listen: 127.0.0.1:9104, upstream: {http2: true, nodes: {\"127.0.0.1:1\": 1}}}
  - {listen: 127.0.0.1:9105, protocol: udp, splice: true, upstream: {nodes: {\"127.0.0.1:1\": 1}}}
  - {listen: 127.0.0.1:9106, tls: true, splice: true, upstream: {nodes: {\"127.0.0.1:1\": 1}}}
");
    for want in [
        "stream_routes[0].listen: 127.0.0.1:9080 is an HTTP listen address (listen)",
        "stream_routes[1].sni: works with protocol tcp only",
        "stream_routes[2].plugins.cors: does not work on stream routes (these do: ip-restriction, limit-conn, prometheus)",
        "stream_routes[4].listen: stream_routes[3] already takes every connection on 127.0.0.1:9102; give one of them an sni",
        "stream_routes[5].tls: needs at least one certificate in ssls",
        "stream_routes[6].upstream.http2: is for HTTP routes: a stream route forwards bytes as they are",
        "stream_routes[7].splice: works with protocol tcp only",
        "stream_routes[8].splice: does not work with tls: true (Sluice must decrypt the bytes)",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
    let e = err("ssls:
  - {id: a, snis: [a.test], cert: x, key: y}
  - {id: b, snis: [a.test, \"bad name\"], cert: x, key: y}
  - {id: c, cert: x, key: y}
");
    for want in [
        "ssls[1].snis[0]: \"a.test\" is already served by ssls[0]",
        "ssls[1].snis[1]: invalid host \"bad name\"",
        "ssls[2].snis: must not be empty (or set default: true)",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
}

#[test]
fn unreadable_certificates_are_refused_at_start_with_their_path() {
    let cfg = sluice_config::load_str_with(
        "listen: [{addr: 127.0.0.1:0, tls: true}]\nworkers: 1\nssls:\n  - {id: a, snis: [a.test], cert: /nonexistent/a.pem, key: /nonexistent/a.key}\n",
        &sluice_plugins::builtin(),
    )
    .unwrap();
    let e = sluice_proxy::Server::start(&cfg, sluice_plugins::shared()).unwrap_err();
    assert!(
        e.to_string()
            .contains("ssls[0].cert: cannot read /nonexistent/a.pem"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hello_reply_comes_back_over_tls_with_an_origin_reply() {
    // A response body streamed in chunks arrives whole over TLS (writes are flushed).
    let pki = Pki::new("chunks");
    let (c, k) = pki.issue_files("a", &["a.test"]);
    let origin = TestOrigin::http1()
        .handler("/", |_| Reply::ok("").chunked(&["one ", "two ", "three"]))
        .run()
        .await;
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, tls: true}}]\nworkers: 1\nssls:\n{}routes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        ssl_yaml("a", "[a.test]", &c, &k),
        origin.node()
    ));
    let (code, out) = curl("a.test", gw.addr().port(), "/", &pki.ca_file(), &[]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("one two three"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_requires_a_client_certificate_and_plugins_see_its_subject() {
    let server = Pki::new("mtls-server");
    let clients = Pki::new("mtls-clients");
    let strangers = Pki::new("mtls-strangers");
    let (sc, sk) = server.issue_files("site", &["a.test"]);
    let (cc, ck) = clients.issue_client("alice", "alice");
    let (xc, xk) = strangers.issue_client("mallory", "mallory");
    let origin = TestOrigin::http1().route("/", "secret").run().await;
    let access = server.dir.join("access.log");
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, tls: true}}]\nworkers: 1\nlog: {{access: {{path: \"{}\"}}}}\nssls:\n  - {{id: a, snis: [a.test], cert: \"{}\", key: \"{}\", client: {{ca: \"{}\"}}}}\nroutes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins: {{proxy-rewrite: {{headers: {{set: {{X-Client-DN: $ssl_client_s_dn, X-Scheme: $scheme}}}}}}}}\n",
        access.display(),
        sc.display(),
        sk.display(),
        clients.ca_file().display(),
        origin.node()
    ));
    let port = gw.addr().port();
    let ca = server.ca_file();
    let (code, out) = curl("a.test", port, "/", &ca, &[]).await;
    assert_ne!(code, 0, "no client certificate: refused; {out}");
    let (code, out) = curl(
        "a.test",
        port,
        "/",
        &ca,
        &[
            "--cert",
            &xc.display().to_string(),
            "--key",
            &xk.display().to_string(),
        ],
    )
    .await;
    assert_ne!(code, 0, "a certificate from another CA: refused; {out}");
    let (code, out) = curl(
        "a.test",
        port,
        "/",
        &ca,
        &[
            "--cert",
            &cc.display().to_string(),
            "--key",
            &ck.display().to_string(),
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("secret\n1.1 200"), "{out}");
    let got = origin.last();
    assert_eq!(got.header("x-client-dn"), Some("CN=alice"));
    assert_eq!(got.header("x-scheme"), Some("https"));
    // The access log names the verified subject.
    gw.shutdown();
    let log = std::fs::read_to_string(&access).unwrap();
    assert!(log.lines().any(|l| l.ends_with(" CN=alice")), "{log}");
}

/// APISIX's `client.depth` and `ssl_protocols`: a client certificate issued through an
/// intermediate CA is refused at depth 1 (APISIX's default) and let in at depth 2, whatever else
/// the client sends; `ssl_protocols: [TLSv1.3]` refuses a TLS 1.2 client and `[TLSv1.2]` a
/// TLS 1.3-only one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_depth_and_ssl_protocols_as_apisix() {
    let server = Pki::new("depth-server");
    let clients = Pki::new("depth-clients");
    let (sc, sk) = server.issue_files("site", &["a.test", "b.test", "c.test", "d.test"]);
    let (direct, direct_key) = clients.issue_client("direct", "direct");
    let (chained, chained_key) = clients.issue_client_via_intermediate("chained", "chained");
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let ssl = |id: &str, extra: &str| {
        format!(
            "  - {{id: {id}, snis: [{id}.test], cert: \"{}\", key: \"{}\"{extra}}}\n",
            sc.display(),
            sk.display()
        )
    };
    let ca = clients.ca_file().display().to_string();
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, tls: true}}]\nworkers: 1\nssls:\n{}{}{}{}routes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        ssl("a", &format!(", client: {{ca: \"{ca}\", depth: 1}}")),
        ssl("b", &format!(", client: {{ca: \"{ca}\", depth: 2}}")),
        ssl("c", ", ssl_protocols: [TLSv1.3]"),
        ssl("d", ", ssl_protocols: [TLSv1.2]"),
        origin.node()
    ));
    let port = gw.addr().port();
    let tls_ca = server.ca_file();
    let with = |c: &std::path::Path, k: &std::path::Path| {
        vec![
            "--cert".to_string(),
            c.display().to_string(),
            "--key".to_string(),
            k.display().to_string(),
        ]
    };
    let run = |name: &'static str, args: Vec<String>| {
        let tls_ca = tls_ca.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            curl(name, port, "/", &tls_ca, &args).await
        }
    };
    let (code, out) = run("a.test", with(&direct, &direct_key)).await;
    assert_eq!(code, 0, "depth 1, signed by the CA itself: {out}");
    assert!(out.ends_with("ok\n1.1 200"), "{out}");
    let (code, out) = run("a.test", with(&chained, &chained_key)).await;
    assert_ne!(code, 0, "depth 1, through an intermediate: refused; {out}");
    let (code, out) = run("b.test", with(&chained, &chained_key)).await;
    assert_eq!(code, 0, "depth 2 allows one intermediate: {out}");
    let (code, out) = run("b.test", with(&direct, &direct_key)).await;
    assert_eq!(code, 0, "{out}");
    let (code, out) = run("b.test", vec![]).await;
    assert_ne!(code, 0, "no certificate: refused; {out}");
    // ssl_protocols.
    let v12 = || {
        vec![
            "--tlsv1.2".to_string(),
            "--tls-max".to_string(),
            "1.2".to_string(),
        ]
    };
    let v13 = || vec!["--tlsv1.3".to_string()];
    let (code, out) = run("c.test", v12()).await;
    assert_ne!(code, 0, "TLSv1.3 only: a TLS 1.2 client is refused; {out}");
    let (code, out) = run("c.test", v13()).await;
    assert_eq!(code, 0, "{out}");
    let (code, out) = run("d.test", v13()).await;
    assert_ne!(
        code, 0,
        "TLSv1.2 only: a TLS 1.3-only client is refused; {out}"
    );
    let (code, out) = run("d.test", v12()).await;
    assert_eq!(code, 0, "{out}");
    // What is refused at load, with why.
    for (extra, want) in [
        (
            ", ssl_protocols: [TLSv1.1]",
            "ssls[0].ssl_protocols[0]: TLSv1.1 is not supported: Sluice speaks TLS 1.2 and 1.3",
        ),
        (
            ", ssl_protocols: []",
            "ssls[0].ssl_protocols: must name at least one of TLSv1.2, TLSv1.3",
        ),
        (
            ", ssl_protocols: [SSLv3]",
            "ssls[0].ssl_protocols[0]: unknown protocol \"SSLv3\"",
        ),
        (
            &format!(", client: {{ca: \"{ca}\", depth: 0}}"),
            "ssls[0].client.depth: must be from 1",
        ),
        (
            &format!(", client: {{ca: \"{ca}\", skip_mtls_uri_regex: []}}"),
            "ssls[0].client.skip_mtls_uri_regex: must list at least one regex",
        ),
        (
            &format!(", client: {{ca: \"{ca}\", skip_mtls_uri_regex: [\"/x(\"]}}"),
            "ssls[0].client.skip_mtls_uri_regex: invalid regex",
        ),
    ] {
        let out = common::validate(&format!(
            "listen: [{{addr: 127.0.0.1:0, tls: true}}]\nssls:\n{}",
            ssl("a", extra)
        ));
        assert!(out.contains(want), "{extra}: {out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssls_and_stream_routes_are_admin_resources() {
    use hyper::{Method, StatusCode};
    use serde_json::json;
    let pki = Pki::new("admin");
    let (cert, key) = pki.issue(&["a.test"]);
    let echo = tcp_echo().await;
    let port = free_port();
    let node = common::TestNode::start(&format!(
        "upstreams:\n  - {{id: echo, nodes: {{\"{echo}\": 1}}}}\nstream_routes:\n  - {{id: s, listen: 127.0.0.1:{port}, upstream_id: echo}}\n"
    ));
    let (status, body) = node
        .admin(
            Method::PUT,
            "/admin/ssls/a",
            Some(json!({"snis": ["a.test"], "cert": cert, "key": key})),
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
    let (status, body) = node
        .admin(
            Method::PUT,
            "/admin/ssls/b",
            Some(json!({"snis": ["b.test"], "cert": cert, "key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("\"key\""), "{body}");
    // The stream route works, and can be changed live on its address.
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    assert_eq!(echo_round_trip(&mut s, b"hi").await, b"hi");
    let (status, body) = node
        .admin(
            Method::PUT,
            "/admin/stream_routes/s",
            Some(json!({"listen": format!("127.0.0.1:{port}"), "upstream_id": "echo", "plugins": {"ip-restriction": {"blacklist": ["127.0.0.1"]}}})),
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
    let mut refused = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let _ = refused.write_all(b"x").await;
    assert!(closed_at_once(&mut refused).await);
    // The connection opened before the change goes on.
    assert_eq!(echo_round_trip(&mut s, b"still").await, b"still");
    // A new listen address needs a restart; an upstream in use by a stream route stays.
    let (status, body) = node
        .admin(
            Method::PUT,
            "/admin/stream_routes/t",
            Some(json!({"listen": format!("127.0.0.1:{}", free_port()), "upstream_id": "echo"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("was not open at start"), "{body}");
    let (status, body) = node
        .admin(Method::DELETE, "/admin/upstreams/echo", None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body.to_string().contains("stream_routes \\\"s\\\""),
        "{body}"
    );
}

/// An HTTP/1.1 origin over TLS that answers every request with `hello tls`, counting its
/// connections and noting the SNI and whether the client showed a certificate.
struct TlsOrigin {
    addr: SocketAddr,
    conns: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    sni: std::sync::Arc<parking_lot::Mutex<Option<String>>>,
    client_cert: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

async fn tls_origin(pki: &Pki, name: &str, client_ca: Option<&Pki>) -> TlsOrigin {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let config = pki.server_config_verifying(&[name], client_ca);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = TlsOrigin {
        addr: l.local_addr().unwrap(),
        conns: Arc::new(AtomicUsize::new(0)),
        sni: Arc::default(),
        client_cert: Arc::new(AtomicBool::new(false)),
    };
    let (conns, sni, cert) = (
        origin.conns.clone(),
        origin.sni.clone(),
        origin.client_cert.clone(),
    );
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let (acceptor, conns, sni, cert) =
                (acceptor.clone(), conns.clone(), sni.clone(), cert.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                conns.fetch_add(1, Ordering::SeqCst);
                *sni.lock() = tls.get_ref().1.server_name().map(str::to_owned);
                if tls.get_ref().1.peer_certificates().is_some() {
                    cert.store(true, Ordering::SeqCst);
                }
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nhello tls";
                        if tls.write_all(resp).await.is_err() || tls.flush().await.is_err() {
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
    origin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstreams_are_verified_pooled_and_can_use_client_certificates() {
    use std::sync::atomic::Ordering;
    let pki = Pki::new("upstream");
    let clients = Pki::new("upstream-clients");
    let origin = tls_origin(&pki, "origin.test", None).await;
    let route = |tls: &str, node: SocketAddr| {
        format!(
            "  - {{uri: /*, upstream: {{scheme: https, nodes: {{\"{node}\": 1}}, tls: {tls}}}}}\n"
        )
    };
    let ca = pki.ca_file().display().to_string();
    // Verified against the given CA, with the configured SNI; the connection is pooled.
    let gw = Gateway::start(&format!(
        "routes:\n{}",
        route(&format!("{{ca: \"{ca}\", sni: origin.test}}"), origin.addr)
    ));
    for _ in 0..3 {
        let r = gw.client().get("/").await;
        assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "hello tls"));
    }
    assert_eq!(
        origin.conns.load(Ordering::SeqCst),
        1,
        "one pooled TLS connection"
    );
    assert_eq!(origin.sni.lock().as_deref(), Some("origin.test"));
    // The wrong name, or the system's CAs (which do not know the test CA): 502.
    let gw = Gateway::start(&format!(
        "routes:\n{}",
        route(&format!("{{ca: \"{ca}\", sni: other.test}}"), origin.addr)
    ));
    // The answer names the setting: APISIX does not verify by default, so a migrated upstream
    // lands here (it said only "cannot connect to upstream").
    let named = "upstream TLS certificate not trusted: give its CA in the upstream's tls.ca, or set tls.verify: false";
    let r = gw.client().get("/").await;
    assert_eq!(r.status, 502);
    assert!(r.text().contains(named), "{}", r.text());
    let gw = Gateway::start(&format!(
        "routes:\n{}",
        route("{sni: origin.test}", origin.addr)
    ));
    let r = gw.client().get("/").await;
    assert_eq!(r.status, 502);
    assert!(r.text().contains(named), "{}", r.text());
    // verify: false accepts it.
    let gw = Gateway::start(&format!(
        "routes:\n{}",
        route("{verify: false}", origin.addr)
    ));
    assert_eq!(gw.client().get("/").await.status, 200);

    // A node that requires a client certificate.
    let strict = tls_origin(&pki, "origin.test", Some(&clients)).await;
    let gw = Gateway::start(&format!(
        "routes:\n{}",
        route(&format!("{{ca: \"{ca}\", sni: origin.test}}"), strict.addr)
    ));
    let r = gw.client().get("/").await;
    assert_eq!(r.status, 502, "no client certificate");
    assert!(!r.text().contains("tls.verify"), "{}", r.text());
    let (cc, ck) = clients.issue_client("gateway", "sluice-gateway");
    let gw = Gateway::start(&format!(
        "routes:\n{}",
        route(
            &format!(
                "{{ca: \"{ca}\", sni: origin.test, cert: \"{}\", key: \"{}\"}}",
                cc.display(),
                ck.display()
            ),
            strict.addr
        )
    ));
    let r = gw.client().get("/").await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "hello tls"));
    assert!(strict.client_cert.load(Ordering::SeqCst));

    // TLS settings on a plain upstream are a configuration error.
    let e = sluice_config::load_str_with(
        "routes:\n  - {uri: /, upstream: {nodes: {\"127.0.0.1:1\": 1}, tls: {verify: false}}}\n",
        &sluice_plugins::builtin(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("routes[0].upstream.tls: is used with scheme https or grpcs"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_handshakes_are_counted_by_result() {
    let pki = Pki::new("counted");
    let (ac, ak) = pki.issue_files("a", &["a.test"]);
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, tls: true}}]\nworkers: 1\nssls:\n{}routes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        ssl_yaml("a", "[a.test]", &ac, &ak),
        origin.node()
    ));
    let port = gw.server().local_addrs()[0].port();
    let ca = pki.ca_file();
    assert_eq!(curl("a.test", port, "/", &ca, &[]).await.0, 0);
    assert_ne!(curl("nobody.test", port, "/", &ca, &[]).await.0, 0);
    let metrics = || {
        let mut text = String::new();
        let mut w = sluice_proxy::metrics::Writer::new(
            &mut text,
            sluice_proxy::metrics::Format::Prometheus,
        );
        gw.server().reloader().render_metrics(&mut w);
        text
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let text = metrics();
        if text.contains("sluice_tls_handshakes_total{result=\"ok\"} 1\n")
            && text.contains("sluice_tls_handshakes_total{result=\"failed\"} 1\n")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A TCP server that answers every connection with `tag` and closes.
async fn tagged(tag: &'static str) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let _ = s.write_all(tag.as_bytes()).await;
        }
    });
    addr
}

#[tokio::test]
async fn stream_routes_written_as_apisix_does_listen_on_server_port_and_match_the_client() {
    // APISIX: `{server_addr, server_port, remote_addr, upstream}`; routes on one port differ
    // by the client's address, the one without remote_addr takes the rest.
    let (near, far) = (tagged("near").await, tagged("far").await);
    let port = free_port();
    let gw = Gateway::start(&format!(
        "services:
  - {{id: far, upstream: {{nodes: {{\"{far}\": 1}}}}}}
stream_routes:
  - {{id: \"1\", server_addr: 127.0.0.1, server_port: {port}, service_id: far}}
  - {{id: \"2\", server_addr: 127.0.0.1, server_port: {port}, remote_addr: 127.0.0.2, upstream: {{nodes: {{\"{near}\": 1}}}}}}
"
    ));
    let from = |port: u16, src: &'static str| async move {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(format!("{src}:0").parse().unwrap()).unwrap();
        let mut c = s
            .connect(format!("127.0.0.1:{port}").parse().unwrap())
            .await
            .unwrap();
        let mut got = String::new();
        tokio::time::timeout(Duration::from_secs(5), c.read_to_string(&mut got))
            .await
            .unwrap()
            .unwrap();
        got
    };
    assert_eq!(from(port, "127.0.0.2").await, "near");
    assert_eq!(from(port, "127.0.0.1").await, "far");
    drop(gw);

    // The node's stream_proxy ports (APISIX's config.yaml): routes without an address take
    // them, a route with server_port takes the address with that port.
    let (p1, p2) = (free_port(), free_port());
    let gw = Gateway::start(&format!(
        "stream_proxy: {{tcp: [\"127.0.0.1:{p1}\", {{addr: \"127.0.0.1:{p2}\"}}]}}
stream_routes:
  - {{id: near, remote_addr: 127.0.0.2/32, upstream: {{nodes: {{\"{near}\": 1}}}}}}
  - {{id: far, server_port: {p2}, upstream: {{nodes: {{\"{far}\": 1}}}}}}
"
    ));
    assert_eq!(from(p1, "127.0.0.2").await, "near");
    assert_eq!(from(p2, "127.0.0.2").await, "near");
    assert_eq!(from(p2, "127.0.0.1").await, "far");
    // No route on p1 for this client: the connection is closed.
    assert_eq!(from(p1, "127.0.0.1").await, "");
    drop(gw);

    let e = sluice_config::load_str_with(
        &format!(
            "stream_routes:
  - {{upstream: {{nodes: {{\"{far}\": 1}}}}}}
  - {{listen: 127.0.0.1:{port}, server_port: {port}, upstream: {{nodes: {{\"{far}\": 1}}}}}}
  - {{server_port: {port}, server_addr: nowhere, upstream: {{nodes: {{\"{far}\": 1}}}}}}
  - {{server_port: {port}, remote_addr: 10.0.0.0/33, upstream: {{nodes: {{\"{far}\": 1}}}}}}
  - {{server_port: {port}, upstream: {{nodes: {{\"{far}\": 1}}}}}}
  - {{server_port: {port}, upstream: {{nodes: {{\"{far}\": 1}}}}}}
"
        ),
        &sluice_plugins::builtin(),
    )
    .unwrap_err()
    .to_string();
    for want in [
        "stream_routes[0]: one of listen or server_port is required (or the node's stream_proxy addresses)",
        "stream_routes[1]: use either listen or server_addr/server_port, not both",
        "stream_routes[2].server_addr: invalid IP address \"nowhere\"",
        "stream_routes[3].remote_addr: invalid IP address or CIDR range \"10.0.0.0/33\"",
        "stream_routes[5].server_port: stream_routes[3] already takes every connection on 0.0.0.0:",
    ] {
        assert!(e.contains(want), "{want}\n{e}");
    }
}

/// APISIX's `client.skip_mtls_uri_regex` (its client-to-apisix-mtls tutorial): the paths that
/// match need no client certificate; any other path of a connection without one gets 400,
/// over HTTP/1.1 and HTTP/2. A client with a certificate reaches every path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_mtls_uri_regex_lets_some_paths_in_without_a_certificate() {
    let server = Pki::new("skip-server");
    let clients = Pki::new("skip-clients");
    let (sc, sk) = server.issue_files("site", &["a.test"]);
    let (cc, ck) = clients.issue_client("alice", "alice");
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let (echo, sp) = (tcp_echo().await, free_port());
    let yaml = |skip: &str| {
        format!(
            "listen: [{{addr: 127.0.0.1:0, tls: true, http2: true}}]\nworkers: 1\nssls:\n  - {{id: a, snis: [a.test], cert: \"{}\", key: \"{}\", client: {{ca: \"{}\", depth: 10{skip}}}}}\nroutes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\nstream_routes:\n  - {{id: s, listen: 127.0.0.1:{sp}, tls: true, upstream: {{nodes: {{\"{echo}\": 1}}}}}}\n",
            sc.display(),
            sk.display(),
            clients.ca_file().display(),
            origin.node()
        )
    };
    let gw = Gateway::start(&yaml(", skip_mtls_uri_regex: [\"/anything.*\"]"));
    let port = gw.addr().port();
    let ca = server.ca_file();
    let cert = [
        "--cert".to_string(),
        cc.display().to_string(),
        "--key".to_string(),
        ck.display().to_string(),
    ];
    let cert: Vec<&str> = cert.iter().map(String::as_str).collect();
    for version in ["--http1.1", "--http2"] {
        let (code, out) = curl("a.test", port, "/anything/x", &ca, &[version]).await;
        assert_eq!(code, 0, "{out}");
        assert!(out.ends_with(" 200"), "{version}, skipped path: {out}");
        let (code, out) = curl("a.test", port, "/uuid", &ca, &[version]).await;
        assert_eq!(code, 0, "{out}");
        assert!(out.ends_with(" 400"), "{version}, other path: {out}");
        assert!(
            out.contains("No required SSL certificate was sent"),
            "{out}"
        );
        // The path as routing reads it: `/anything/../uuid` is `/uuid`.
        let (_, out) = curl(
            "a.test",
            port,
            "/anything/../uuid",
            &ca,
            &[version, "--path-as-is"],
        )
        .await;
        assert!(out.ends_with(" 400"), "{version}, dot segments: {out}");
        let mut with_cert = cert.clone();
        with_cert.push(version);
        let (code, out) = curl("a.test", port, "/uuid", &ca, &with_cert).await;
        assert_eq!(code, 0, "{out}");
        assert!(
            out.ends_with(" 200"),
            "{version}, with a certificate: {out}"
        );
    }
    // A stream route on the same certificate has no paths: it still requires a certificate.
    let refused = match tls_connect(&server, ([127, 0, 0, 1], sp).into(), "a.test").await {
        Err(_) => true,
        Ok(mut t) => {
            let _ = t.write_all(b"x").await;
            let mut b = [0u8; 1];
            matches!(
                tokio::time::timeout(Duration::from_secs(5), t.read(&mut b)).await,
                Ok(Ok(0)) | Ok(Err(_))
            )
        }
    };
    assert!(
        refused,
        "a stream connection without a certificate got through"
    );
    // A connection without a certificate, open while the skip list is removed, then gets 400
    // on every path.
    let mut t = tls_connect(&server, gw.addr(), "a.test").await.unwrap();
    assert_eq!(tls_get(&mut t, "/anything/1").await, 200);
    gw.reload(&yaml("")).unwrap();
    assert_eq!(tls_get(&mut t, "/anything/1").await, 400);
}

/// One HTTP/1.1 GET on an open TLS connection; the status.
async fn tls_get(t: &mut tokio_rustls::client::TlsStream<TcpStream>, path: &str) -> u16 {
    t.write_all(format!("GET {path} HTTP/1.1\r\nHost: a.test\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), t.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len: usize = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                return text[9..12].parse().unwrap();
            }
        }
    }
}

/// APISIX's stream upstream `scheme: tls` (its stream-proxy.md): the client speaks plain TCP
/// to Sluice, which speaks TLS to the node, named and verified as HTTPS nodes are (`tls.ca`,
/// `tls.sni`); `splice: true` is set aside for such a route (TLS cannot be spliced). A node
/// whose certificate does not verify gets no bytes. `scheme: tls` is refused on HTTP routes
/// and UDP stream routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_routes_reach_their_nodes_over_tls() {
    let pki = Pki::new("stream-up");
    let node = tls_tagged(&pki, "node.test", "node:").await;
    let (a, b, c) = (free_port(), free_port(), free_port());
    let ca = pki.ca_file().display().to_string();
    let gw = Gateway::start(&format!(
        "stream_routes:
  - {{id: a, listen: 127.0.0.1:{a}, upstream: {{scheme: tls, nodes: {{\"{node}\": 1}}, tls: {{ca: \"{ca}\", sni: node.test}}}}}}
  - {{id: b, listen: 127.0.0.1:{b}, splice: true, upstream: {{scheme: tls, nodes: {{\"{node}\": 1}}, tls: {{ca: \"{ca}\", sni: node.test}}}}}}
  - {{id: c, listen: 127.0.0.1:{c}, upstream: {{scheme: tls, nodes: {{\"{node}\": 1}}, tls: {{sni: node.test}}}}}}
"
    ));
    for port in [a, b] {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        // The node's tag comes first, then the echo.
        let got = echo_round_trip(&mut s, b"plain in, tls out").await;
        let mut rest = vec![0u8; b"node:".len()];
        s.read_exact(&mut rest).await.unwrap();
        assert_eq!(
            [got, rest].concat(),
            b"node:plain in, tls out",
            "port {port}"
        );
    }
    // The node's CA is not trusted by route c (system CAs only): closed, nothing relayed.
    let mut s = TcpStream::connect(("127.0.0.1", c)).await.unwrap();
    let _ = s.write_all(b"hello").await;
    let mut buf = [0u8; 16];
    let got = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    assert!(matches!(got, Ok(Ok(0)) | Ok(Err(_))), "{got:?}");
    drop(gw);
    let out = common::validate(&format!(
        "routes:\n  - {{uri: /, upstream: {{scheme: tls, nodes: {{\"{node}\": 1}}}}}}\nstream_routes:\n  - {{id: u, listen: 127.0.0.1:{a}, protocol: udp, upstream: {{scheme: tls, nodes: {{\"{node}\": 1}}}}}}\n"
    ));
    assert!(
        out.contains("routes[0].upstream.scheme: scheme tls is for stream routes"),
        "{out}"
    );
    assert!(out.contains("stream_routes[0].upstream.scheme: scheme tls does not match the stream route's protocol udp"), "{out}");
}

/// The leaf certificate a handshake for `name` gets.
async fn served_leaf(pki: &Pki, addr: SocketAddr, name: &str) -> Vec<u8> {
    let conn = tls_connect(pki, addr, name).await.unwrap();
    conn.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// The DER of the first certificate of a PEM text.
fn leaf_of(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

/// certbot and cert-manager renew a certificate by replacing its files in place, then (certbot)
/// signalling a reload. Both files are applied together or not at all, on a signal at once,
/// and by the watcher once they hold still.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_renewed_in_place_are_applied_all_or_nothing() {
    use common::TestNode;
    use hyper::Method;
    use sluice_admin::Reloaded;
    let pki = Pki::new("renew");
    let (cert, key) = (pki.dir.join("site.pem"), pki.dir.join("site.key"));
    let renew = |c: &str, k: Option<&str>| {
        std::fs::write(&cert, c).unwrap();
        if let Some(k) = k {
            std::fs::write(&key, k).unwrap();
        }
    };
    let (c1, k1) = pki.issue(&["a.test"]);
    renew(&c1, Some(&k1));
    let t = TestNode::start_text(&format!(
        "listen: [{{addr: 127.0.0.1:0, tls: true}}]\nworkers: 1\nadmin: {{listen: \"127.0.0.1:0\", key: {}}}\nssls:\n{}routes:\n  - {{uri: /*, upstream: {{nodes: {{\"127.0.0.1:1\": 1}}}}}}\n",
        common::KEY,
        ssl_yaml("a", "[a.test]", &cert, &key),
    ));
    let control = t.node().control().clone();
    // This test looks at the files itself, to show the watcher's rule step by step.
    control.set_files_poll(Duration::from_secs(3600));
    let addr = t.node().server().local_addrs()[0];
    assert_eq!(served_leaf(&pki, addr, "a.test").await, leaf_of(&c1));

    // Renewed, then SIGHUP: the new pair serves at once.
    let (c2, k2) = pki.issue(&["a.test"]);
    renew(&c2, Some(&k2));
    let before = t.version();
    t.node().reload();
    assert!(t.version() > before, "{:?}", control.stats());
    assert_eq!(served_leaf(&pki, addr, "a.test").await, leaf_of(&c2));

    // A certificate without its key: refused, the pair in service keeps serving, and the
    // reason is in the answer and in the status.
    let (c3, k3) = pki.issue(&["a.test"]);
    renew(&c3, None);
    let (status, body) = t.admin(Method::POST, "/admin/reload", None).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["errors"][0]["path"], "ssls[0].key", "{body}");
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("does not go with the certificate"),
        "{body}"
    );
    assert_eq!(served_leaf(&pki, addr, "a.test").await, leaf_of(&c2));
    let (_, st) = t.admin(Method::GET, "/admin/status", None).await;
    assert!(
        st["last_error"]
            .as_str()
            .unwrap()
            .contains("ssls[0].key: does not go with the certificate"),
        "{st}"
    );

    // Without a signal: the watcher applies files once a second look finds them as the first.
    renew(&c3, Some(&k3));
    assert_eq!(control.reload_files().unwrap(), Reloaded::Waiting);
    assert_eq!(served_leaf(&pki, addr, "a.test").await, leaf_of(&c2));
    assert!(matches!(
        control.reload_files().unwrap(),
        Reloaded::Applied(_)
    ));
    assert_eq!(served_leaf(&pki, addr, "a.test").await, leaf_of(&c3));
    assert_eq!(control.stats().last_error, None);

    // A file still being written between two looks is not applied (here each state is a
    // valid pair: only the last one may serve).
    let (c4, k4) = pki.issue(&["a.test"]);
    let (c5, k5) = pki.issue(&["a.test"]);
    renew(&c4, Some(&k4));
    assert_eq!(control.reload_files().unwrap(), Reloaded::Waiting);
    renew(&c5, Some(&k5));
    assert_eq!(control.reload_files().unwrap(), Reloaded::Waiting);
    assert_eq!(served_leaf(&pki, addr, "a.test").await, leaf_of(&c3));
    assert!(matches!(
        control.reload_files().unwrap(),
        Reloaded::Applied(_)
    ));
    assert_eq!(served_leaf(&pki, addr, "a.test").await, leaf_of(&c5));

    // A refused change is refused once, not every second, until the files change again.
    let (c6, k6) = pki.issue(&["a.test"]);
    renew(&c6, None);
    assert_eq!(control.reload_files().unwrap(), Reloaded::Waiting);
    assert!(control.reload_files().is_err());
    let refused = control.stats().rejected;
    assert_eq!(control.reload_files().unwrap(), Reloaded::Unchanged);
    assert_eq!(control.stats().rejected, refused);
    assert_eq!(served_leaf(&pki, addr, "a.test").await, leaf_of(&c5));

    // The watcher itself, every 100 ms: the matching key arrives, the pair serves.
    control.set_files_poll(Duration::from_millis(100));
    renew(&c6, Some(&k6));
    let started = std::time::Instant::now();
    while served_leaf(&pki, addr, "a.test").await != leaf_of(&c6) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "not applied within 5 s: {:?}",
            control.stats()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn proxy_mirror_copies_requests_to_an_https_shadow() {
    use std::sync::atomic::Ordering;
    let pki = Pki::new("mirror");
    let shadow = tls_origin(&pki, "shadow.test", None).await;
    let main = TestOrigin::http1().name("main").run().await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins:\n      proxy-mirror: {{host: \"https://{}\"}}\n",
        main.node(),
        shadow.addr
    ));
    let r = gw.client().get("/orders").await;
    assert_eq!(r.header("x-origin"), Some("main"));
    // The copy went over TLS to the shadow (its certificate from a CA the gateway does not
    // know: not checked, as APISIX).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while shadow.conns.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(shadow.conns.load(Ordering::SeqCst), 1);
}
