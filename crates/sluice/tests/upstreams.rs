//! Upstreams that fail, move and overload: balancers, priorities, passive and active health
//! checks, the health view, and bad input. Real sockets on 127.0.0.1: nodes are small HTTP
//! servers these tests start, stop and restart on the same port.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice_testkit::Gateway;

mod common;
use common::free_port;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A node: answers every request with `status` after `delay`, names itself in `x-node`, and
/// counts what it served.
struct Node {
    addr: SocketAddr,
    served: Arc<AtomicU64>,
    status: Arc<AtomicU16>,
    delay: Duration,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Node {
    async fn start(delay: Duration) -> Node {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut n = Node {
            addr: listener.local_addr().unwrap(),
            served: Arc::default(),
            status: Arc::new(AtomicU16::new(200)),
            delay,
            task: None,
        };
        n.serve(listener);
        n
    }

    fn serve(&mut self, listener: TcpListener) {
        let (served, status, delay, name) = (
            self.served.clone(),
            self.status.clone(),
            self.delay,
            self.addr.to_string(),
        );
        self.task = Some(tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let (served, status, name) = (served.clone(), status.clone(), name.clone());
                conns.spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let mut chunk = [0u8; 4096];
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&chunk[..k]),
                        }
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            buf.drain(..end + 4);
                            tokio::time::sleep(delay).await;
                            served.fetch_add(1, Ordering::Relaxed);
                            let st = status.load(Ordering::Relaxed);
                            let resp = format!(
                                "HTTP/1.1 {st} X\r\nx-node: {name}\r\ncontent-length: 2\r\n\r\nok"
                            );
                            if s.write_all(resp.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        }));
    }

    /// Closes the listener and every connection (as a killed process would).
    fn kill(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }

    /// Listens again on the same port.
    async fn restart(&mut self) {
        let l = TcpListener::bind(self.addr).await.unwrap();
        self.serve(l);
    }

    fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// GET `path` on a new connection; (status, x-node).
async fn get(gw: &Gateway, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let node = text
        .lines()
        .find_map(|l| l.strip_prefix("x-node: "))
        .unwrap_or("-")
        .to_owned();
    (status, node)
}

fn health(gw: &Gateway, id: &str) -> serde_json::Value {
    serde_json::to_value(gw.server().snapshot().upstream_health(id).unwrap()).unwrap()
}

fn state_of(gw: &Gateway, id: &str, node: SocketAddr) -> String {
    health(gw, id)
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == node.to_string())
        .map(|n| n["state"].as_str().unwrap().to_owned())
        .unwrap()
}

/// Waits up to `within` for `f`; returns how long it took.
async fn until(within: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < within {
        if f() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

#[tokio::test]
async fn active_checks_take_a_dead_node_out_within_an_interval_and_bring_it_back() {
    let a = Node::start(Duration::ZERO).await;
    let mut b = Node::start(Duration::ZERO).await;
    let gw = Gateway::start(&format!(
        r#"
upstreams:
  - id: u
    nodes: {{"{}": 1, "{}": 1}}
    checks:
      active:
        http_path: /health
        timeout: 0.5
        healthy: {{interval: 0.2, successes: 2}}
        unhealthy: {{interval: 0.2, tcp_failures: 1}}
routes:
  - uri: /*
    upstream_id: u
"#,
        a.addr, b.addr
    ));
    // Probes reach both nodes.
    assert!(
        until(Duration::from_secs(3), || a.served() > 0 && b.served() > 0)
            .await
            .is_some()
    );
    b.kill();
    let took = until(Duration::from_secs(3), || {
        state_of(&gw, "u", b.addr) == "unhealthy"
    })
    .await
    .expect("the dead node stayed healthy");
    assert!(took < Duration::from_millis(1_000), "took {took:?}");
    let h = health(&gw, "u");
    let dead = h
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == b.addr.to_string())
        .unwrap();
    assert_eq!(dead["cause"], "active");
    assert!(
        dead["last_failure"][1]
            .as_str()
            .unwrap()
            .contains("health check"),
        "{dead}"
    );
    // Every request goes to the live node, none fails.
    for _ in 0..20 {
        let (status, node) = get(&gw, "/x", &[]).await;
        assert_eq!((status, node), (200, a.addr.to_string()));
    }
    // Back after `successes` probes.
    b.restart().await;
    until(Duration::from_secs(3), || {
        state_of(&gw, "u", b.addr) == "healthy"
    })
    .await
    .expect("the node did not come back");
    let mut seen_b = false;
    for _ in 0..10 {
        seen_b |= get(&gw, "/x", &[]).await.1 == b.addr.to_string();
    }
    assert!(seen_b, "the node came back but gets no traffic");
}

#[tokio::test]
async fn passive_checks_take_out_a_node_answering_500s_without_active_checks() {
    let a = Node::start(Duration::ZERO).await;
    let b = Node::start(Duration::ZERO).await;
    b.status.store(500, Ordering::Relaxed);
    let gw = Gateway::start(&format!(
        r#"
upstreams:
  - id: p
    nodes: {{"{}": 1, "{}": 1}}
    checks:
      passive:
        unhealthy: {{http_statuses: [500], http_failures: 2}}
routes:
  - uri: /*
    upstream_id: p
"#,
        a.addr, b.addr
    ));
    let mut fives = 0;
    for _ in 0..20 {
        if get(&gw, "/", &[]).await.0 == 500 {
            fives += 1;
        }
    }
    assert_eq!(fives, 2, "the node kept getting traffic after 2 failures");
    assert_eq!(state_of(&gw, "p", b.addr), "unhealthy");
    assert_eq!(state_of(&gw, "p", a.addr), "healthy");
}

#[tokio::test]
async fn a_reload_keeps_the_health_of_the_nodes_it_keeps_and_new_nodes_start_healthy() {
    let a = Node::start(Duration::ZERO).await;
    let b = Node::start(Duration::ZERO).await;
    b.status.store(500, Ordering::Relaxed);
    let cfg = |nodes: String| {
        format!(
            r#"
upstreams:
  - id: r
    nodes: {{{nodes}}}
    checks: {{passive: {{unhealthy: {{http_statuses: [500], http_failures: 1}}}}}}
routes:
  - uri: /*
    upstream_id: r
"#
        )
    };
    let gw = Gateway::start(&cfg(format!("\"{}\": 1, \"{}\": 1", a.addr, b.addr)));
    for _ in 0..4 {
        get(&gw, "/", &[]).await;
    }
    assert_eq!(state_of(&gw, "r", b.addr), "unhealthy");
    // A third node joins: the node list changes, b's state stays.
    let c = Node::start(Duration::ZERO).await;
    gw.reload(&cfg(format!(
        "\"{}\": 1, \"{}\": 1, \"{}\": 1",
        a.addr, b.addr, c.addr
    )))
    .unwrap();
    assert_eq!(state_of(&gw, "r", b.addr), "unhealthy");
    assert_eq!(state_of(&gw, "r", c.addr), "healthy");
    for _ in 0..10 {
        assert_eq!(get(&gw, "/", &[]).await.0, 200);
    }
    assert!(c.served() > 0, "the new node gets traffic at once");
}

#[tokio::test]
async fn chash_keeps_a_key_on_one_node_and_spreads_keys() {
    let nodes = [
        Node::start(Duration::ZERO).await,
        Node::start(Duration::ZERO).await,
        Node::start(Duration::ZERO).await,
    ];
    let list: Vec<String> = nodes.iter().map(|n| format!("\"{}\": 1", n.addr)).collect();
    let yaml = format!(
        r#"
workers: 2
routes:
  - uri: /*
    upstream: {{type: chash, hash_on: header, key: x-user, nodes: {{{}}}}}
"#,
        list.join(", ")
    );
    let gw = Gateway::start(&yaml);
    let mut owners = std::collections::HashMap::new();
    for user in 0..30 {
        let u = format!("user-{user}");
        let first = get(&gw, "/", &[("x-user", &u)]).await.1;
        for _ in 0..3 {
            assert_eq!(get(&gw, "/", &[("x-user", &u)]).await.1, first, "{u} moved");
        }
        owners.insert(u, first);
    }
    let distinct: std::collections::HashSet<_> = owners.values().collect();
    assert_eq!(distinct.len(), 3, "30 keys all on {distinct:?}");
    // The same keys land on the same nodes after a reload that changes nothing else, and in
    // another gateway (another process would do the same: the ring is a pure function).
    gw.reload(&yaml).unwrap();
    let other = Gateway::start(&yaml);
    for (u, node) in &owners {
        assert_eq!(&get(&gw, "/", &[("x-user", u)]).await.1, node);
        assert_eq!(&get(&other, "/", &[("x-user", u)]).await.1, node);
    }
}

#[tokio::test]
async fn backup_nodes_get_traffic_only_while_the_higher_priority_ones_are_down() {
    let mut main = Node::start(Duration::ZERO).await;
    let backup = Node::start(Duration::ZERO).await;
    let gw = Gateway::start(&format!(
        r#"
upstreams:
  - id: pr
    nodes:
      - {{host: 127.0.0.1, port: {}, weight: 1, priority: 1}}
      - {{host: 127.0.0.1, port: {}, weight: 100, priority: 0}}
    checks:
      active:
        type: tcp
        healthy: {{interval: 0.1, successes: 1}}
        unhealthy: {{interval: 0.1, tcp_failures: 1}}
routes:
  - uri: /*
    upstream_id: pr
"#,
        main.addr.port(),
        backup.addr.port()
    ));
    for _ in 0..10 {
        assert_eq!(get(&gw, "/", &[]).await.1, main.addr.to_string());
    }
    assert_eq!(backup.served(), 0);
    main.kill();
    // Falls back at once (the failed connect moves on), and stays there.
    for _ in 0..10 {
        let (status, node) = get(&gw, "/", &[]).await;
        assert_eq!((status, node), (200, backup.addr.to_string()));
    }
    main.restart().await;
    until(Duration::from_secs(3), || {
        state_of(&gw, "pr", main.addr) == "healthy"
    })
    .await
    .expect("main did not come back");
    for _ in 0..10 {
        assert_eq!(get(&gw, "/", &[]).await.1, main.addr.to_string());
    }
}

/// Sends `n` requests, `c` at a time; returns how many each node served.
async fn split(gw: &Gateway, slow: &Node, fast: &Node, n: usize, c: usize) -> (u64, u64) {
    let (s0, f0) = (slow.served(), fast.served());
    let addr = gw.addr();
    let mut set = tokio::task::JoinSet::new();
    for w in 0..c {
        set.spawn(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut buf = vec![0u8; 4096];
            for _ in (w..n).step_by(c) {
                s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
                    .await
                    .unwrap();
                let mut got = Vec::new();
                while !got.ends_with(b"ok") {
                    let k = s.read(&mut buf).await.unwrap();
                    assert!(k > 0);
                    got.extend_from_slice(&buf[..k]);
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    (slow.served() - s0, fast.served() - f0)
}

#[tokio::test]
async fn least_conn_and_ewma_send_less_to_a_slow_node_than_round_robin() {
    let slow = Node::start(Duration::from_millis(40)).await;
    let fast = Node::start(Duration::from_millis(2)).await;
    let mut shares = Vec::new();
    for balancer in ["roundrobin", "least_conn", "ewma"] {
        let gw = Gateway::start(&format!(
            "routes:\n  - uri: /*\n    upstream: {{type: {balancer}, nodes: {{\"{}\": 1, \"{}\": 1}}}}\n",
            slow.addr, fast.addr
        ));
        let (s, f) = split(&gw, &slow, &fast, 200, 8).await;
        shares.push((balancer, s as f64 / (s + f) as f64));
    }
    eprintln!("share of the slow node: {shares:?}");
    let rr = shares[0].1;
    assert!((0.4..=0.6).contains(&rr), "round-robin: {rr}");
    for (b, share) in &shares[1..] {
        assert!(
            *share < rr / 2.0,
            "{b}: {share} of requests to the slow node"
        );
    }
}

#[test]
fn bad_balancer_and_check_settings_are_errors_with_their_paths() {
    let cases = [
        (
            "upstreams: [{id: a, type: random, nodes: {\"127.0.0.1:1\": 1}}]",
            "upstreams[0].type: unsupported balancer \"random\", expected roundrobin, chash, least_conn or ewma",
        ),
        (
            "upstreams: [{id: a, type: chash, hash_on: header, nodes: {\"127.0.0.1:1\": 1}}]",
            "upstreams[0].key: is required with hash_on: header",
        ),
        (
            "upstreams: [{id: a, type: chash, key: nope, nodes: {\"127.0.0.1:1\": 1}}]",
            "upstreams[0].key: unknown variable \"nope\"",
        ),
        (
            "upstreams: [{id: a, key: uri, nodes: {\"127.0.0.1:1\": 1}}]",
            "upstreams[0].key: is only used with type: chash",
        ),
        (
            "upstreams: [{id: a, nodes: {\"127.0.0.1:1\": 1}, checks: {active: {healthy: {interval: 0}}}}]",
            "upstreams[0].checks.active.healthy.interval: must be > 0",
        ),
        (
            "upstreams: [{id: a, nodes: {\"127.0.0.1:1\": 1}, checks: {active: {unhealthy: {interval: -1}}}}]",
            "upstreams[0].checks.active.unhealthy.interval",
        ),
        (
            "upstreams: [{id: a, nodes: {\"127.0.0.1:1\": 1}, checks: {passive: {unhealthy: {http_statuses: [500, 700]}}}}]",
            "upstreams[0].checks.passive.unhealthy.http_statuses[1]: must be a status from 200 to 599, got 700",
        ),
        (
            "upstreams: [{id: a, nodes: {\"127.0.0.1:1\": 1}, checks: {active: {type: udp, unhealthy: {tcp_failures: 0}}}}]",
            "upstreams[0].checks.active.unhealthy.tcp_failures: must be from 1 to 254, got 0",
        ),
        (
            "upstreams: [{id: a, nodes: {\"127.0.0.1:1\": 1}, retry_budget: {ratio: 1.5}}]",
            "upstreams[0].retry_budget.ratio: must be from 0 to 1 (a share of requests), got 1.5",
        ),
        (
            "upstreams: [{id: a, nodes: {\"127.0.0.1:1\": 1}, retry_budget: {ratio: -0.1}}]",
            "upstreams[0].retry_budget.ratio: must be from 0 to 1",
        ),
        (
            "upstreams: [{id: a, nodes: {\"127.0.0.1:1\": 1}, max_inflight: 0}]",
            "upstreams[0].max_inflight: must be >= 1 (leave it out for no limit)",
        ),
        (
            "routes: [{uri: /, max_inflight: 0, upstream: {nodes: {\"127.0.0.1:1\": 1}}}]",
            "routes[0].max_inflight: must be >= 1",
        ),
        (
            "upstreams: [{id: a, discovery_type: consul, service_name: x}]",
            "upstreams[0].discovery_type: unsupported discovery_type \"consul\", expected dns",
        ),
        (
            "upstreams: [{id: a, discovery_type: dns}]",
            "upstreams[0].service_name: is required with discovery_type: dns",
        ),
        (
            "upstreams: [{id: a, discovery_type: dns, service_name: \"bad name\"}]",
            "upstreams[0].service_name: invalid name \"bad name\"",
        ),
        (
            "upstreams: [{id: a}]",
            "upstreams[0].nodes: must not be empty",
        ),
        (
            "dns: {resolvers: [\"nameserver\"]}",
            "dns.resolvers[0]: invalid name server \"nameserver\"",
        ),
    ];
    // What `sluice validate` runs: load, check, compile (a balancer checks its own fields
    // when its upstream is compiled).
    let validate = |yaml: &str| -> String {
        let plugins = sluice_plugins::builtin();
        let result = sluice_config::load_str_with(yaml, &plugins).and_then(|cfg| {
            let state = sluice_core::state::StateRegistry::default();
            sluice_proxy::compile(&cfg, &plugins, &state).map(|_| ())
        });
        result.expect_err(yaml).to_string()
    };
    for (yaml, want) in cases {
        let err = validate(yaml);
        assert!(err.contains(want), "{yaml}\n  wanted: {want}\n  got: {err}");
    }
    let err = validate(
        "upstreams: [{id: a, nodes: {\"127.0.0.1:1\": 1}, checks: {active: {type: udp}}}]",
    );
    assert!(
        err.contains("checks.active.type: unsupported check type \"udp\""),
        "{err}"
    );
}

/// APISIX's discovery settings and service names, each wrong in its own way, are checked by
/// their discovery type when the upstreams compile (`sluice validate` runs that): every error,
/// with its path (tests/validate-fixtures/discovery.*; they were the configuration crate's).
#[test]
fn discovery_settings_and_service_names_are_checked_by_their_type() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/validate-fixtures");
    let yaml = std::fs::read_to_string(dir.join("discovery.yaml")).unwrap();
    let expected = std::fs::read_to_string(dir.join("discovery.err")).unwrap();
    let plugins = sluice_plugins::builtin();
    let cfg = sluice_config::load_str_with(&yaml, &plugins).unwrap();
    let state = sluice_core::state::StateRegistry::default();
    let errors = sluice_proxy::compile(&cfg, &plugins, &state).unwrap_err();
    let got: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(format!("{}\n", got.join("\n")), expected);
}

/// A node that reads a request head and resets the connection without answering; counts them.
async fn resetting_node() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&chunk[..k]),
                    }
                }
                counter.fetch_add(1, Ordering::Relaxed);
                // SO_LINGER 0: the close is a reset.
                let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                drop(s);
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn an_idempotent_request_reset_before_any_answer_goes_to_the_next_node_a_post_does_not() {
    let good = Node::start(Duration::ZERO).await;
    let (bad, resets) = resetting_node().await;
    let yaml = format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{bad}\": 1, \"{}\": 1}}}}\n",
        good.addr
    );
    let gw = Gateway::start(&yaml);
    for method in ["GET", "PUT", "DELETE"] {
        let mut s = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
        let body = if method == "PUT" { "hello" } else { "" };
        let req = format!(
            "{method} / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{method}: {out}");
    }
    assert!(
        resets.load(Ordering::Relaxed) >= 1,
        "the resetting node was never tried"
    );

    // A POST may have had an effect: it is answered 502, never sent to another node.
    // (A fresh resetting node: the first one is out of rotation now.)
    let (bad, resets) = resetting_node().await;
    let good_before = good.served();
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{bad}\": 1, \"{}\": 1}}}}\n",
        good.addr
    ));
    let mut s = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    s.write_all(
        b"POST /post HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi",
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    // The first node of a fresh round-robin is the resetting one.
    assert!(out.starts_with("HTTP/1.1 502"), "{out}");
    assert_eq!(
        good.served(),
        good_before,
        "the POST was replayed on another node"
    );
    assert_eq!(resets.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn over_max_inflight_requests_get_503_at_once_and_those_in_flight_finish() {
    let slow = Node::start(Duration::from_millis(400)).await;
    for (level, yaml) in [
        (
            "upstream",
            format!(
                "routes:\n  - uri: /*\n    upstream: {{max_inflight: 2, nodes: {{\"{}\": 1}}}}\n",
                slow.addr
            ),
        ),
        (
            "route",
            format!(
                "routes:\n  - uri: /*\n    max_inflight: 2\n    upstream: {{nodes: {{\"{}\": 1}}}}\n",
                slow.addr
            ),
        ),
    ] {
        let gw = Arc::new(Gateway::start(&yaml));
        let busy: Vec<_> = (0..2)
            .map(|_| {
                let gw = gw.clone();
                tokio::spawn(async move { get(&gw, "/", &[]).await.0 })
            })
            .collect();
        // Wait until both are at the node.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let started = Instant::now();
        let mut s = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let took = started.elapsed();
        assert!(out.starts_with("HTTP/1.1 503"), "{level}: {out}");
        assert!(
            out.to_ascii_lowercase().contains("retry-after: 1"),
            "{level}: {out}"
        );
        assert!(
            took < Duration::from_millis(200),
            "{level}: shed after {took:?}"
        );
        for b in busy {
            assert_eq!(b.await.unwrap(), 200, "{level}: an admitted request failed");
        }
        // Once they are done, requests are admitted again.
        assert_eq!(get(&gw, "/", &[]).await.0, 200, "{level}");
    }
}

#[tokio::test]
async fn with_every_node_down_retries_stay_within_the_budget() {
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(resetting_node().await);
    }
    let attempts = || -> u64 { nodes.iter().map(|(_, c)| c.load(Ordering::Relaxed)).sum() };
    let list: Vec<String> = nodes.iter().map(|(a, _)| format!("\"{a}\": 1")).collect();
    let requests = 60u64;
    for (budget, max_attempts) in [
        // Without a budget each request tries all three nodes.
        ("", requests * 3),
        // 10% of requests, plus 2 a second (the test runs within 2 seconds: 4 at most).
        (
            ", retry_budget: {ratio: 0.1, min_per_second: 2}",
            requests + requests / 10 + 4,
        ),
    ] {
        let before = attempts();
        let gw = Gateway::start(&format!(
            "routes:\n  - uri: /*\n    upstream: {{retries: 2{budget}, nodes: {{{}}}}}\n",
            list.join(", ")
        ));
        let started = Instant::now();
        for _ in 0..requests {
            assert_eq!(get(&gw, "/", &[]).await.0, 502);
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        let made = attempts() - before;
        eprintln!("budget {budget:?}: {made} attempts for {requests} requests");
        if budget.is_empty() {
            assert_eq!(made, max_attempts);
        } else {
            assert!(
                made <= max_attempts,
                "{made} attempts, budget allows {max_attempts}"
            );
            assert!(made >= requests, "{made}");
        }
    }
}

#[tokio::test]
async fn api_breaker_opens_after_the_failures_answers_its_code_and_closes_again() {
    let node = Node::start(Duration::ZERO).await;
    node.status.store(500, Ordering::Relaxed);
    let gw = Gateway::start(&format!(
        r#"
routes:
  - uri: /*
    upstream: {{nodes: {{"{}": 1}}}}
    plugins:
      api-breaker:
        break_response_code: 502
        break_response_body: "breaker open"
        break_response_headers: [{{key: x-breaker, value: open}}]
        unhealthy: {{http_statuses: [500], failures: 2}}
        healthy: {{http_statuses: [200], successes: 2}}
"#,
        node.addr
    ));
    let raw = |gw: &Gateway| {
        let addr = gw.addr();
        async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        }
    };
    assert!(raw(&gw).await.starts_with("HTTP/1.1 500"));
    assert!(raw(&gw).await.starts_with("HTTP/1.1 500"));
    // Open: answered by the breaker, the node sees nothing.
    let served = node.served();
    for _ in 0..5 {
        let out = raw(&gw).await;
        assert!(out.starts_with("HTTP/1.1 502"), "{out}");
        assert!(
            out.contains("x-breaker: open") && out.ends_with("breaker open"),
            "{out}"
        );
    }
    assert_eq!(node.served(), served);
    // After 2 seconds requests pass again; two successes close it.
    node.status.store(200, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    for _ in 0..4 {
        assert!(raw(&gw).await.starts_with("HTTP/1.1 200"));
    }
    // Closed for good: the next opening is again after 2 failures, for 2 seconds.
    node.status.store(500, Ordering::Relaxed);
    assert!(raw(&gw).await.starts_with("HTTP/1.1 500"));
    assert!(raw(&gw).await.starts_with("HTTP/1.1 500"));
    assert!(raw(&gw).await.starts_with("HTTP/1.1 502"));
}

/// A real dnsmasq on a loopback port, serving the hosts files of a directory it watches
/// (rewritten by the test) with a TTL of 1 second, and static SRV records.
struct Dnsmasq {
    child: std::process::Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl Dnsmasq {
    fn start(srv: &[String]) -> Dnsmasq {
        let dir = std::env::temp_dir().join(format!(
            "sluice-dnsmasq-{}-{}",
            std::process::id(),
            fastrand_port()
        ));
        std::fs::create_dir_all(dir.join("hosts")).unwrap();
        std::fs::write(dir.join("hosts/names"), "").unwrap();
        // dnsmasq listens on UDP and TCP: a port free for both.
        let port = loop {
            let t = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let p = t.local_addr().unwrap().port();
            if std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok() {
                break p;
            }
        };
        let bin = ["dnsmasq", "/usr/sbin/dnsmasq"]
            .into_iter()
            .find(|b| {
                std::process::Command::new(b)
                    .arg("--version")
                    .output()
                    .is_ok()
            })
            .expect("dnsmasq is not installed (./test.sh installs dnsmasq-base)");
        let mut cmd = std::process::Command::new(bin);
        cmd.args([
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            "--local-ttl=1",
            "--pid-file=",
        ])
        .arg(format!("--port={port}"))
        .arg(format!("--hostsdir={}", dir.join("hosts").display()));
        // As root, dnsmasq would switch to `nobody`, who may not read the test's directory.
        let root = std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
        if root {
            cmd.arg("--user=root");
        }
        for s in srv {
            cmd.arg(format!("--srv-host={s}"));
        }
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        // Ready once it answers on the port.
        let deadline = Instant::now() + Duration::from_secs(5);
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        probe
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        // A query for "x." of type A, id 1.
        let query = b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x01x\x00\x00\x01\x00\x01";
        loop {
            assert!(
                Instant::now() < deadline,
                "dnsmasq did not start: {}",
                std::fs::read_to_string(dir.join("log")).unwrap_or_default()
            );
            let _ = probe.send_to(query, ("127.0.0.1", port));
            let mut b = [0u8; 512];
            if probe.recv_from(&mut b).is_ok() {
                break;
            }
        }
        Dnsmasq { child, port, dir }
    }

    /// Stops the server (queries go unanswered).
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Replaces the hosts file (dnsmasq notices through inotify).
    fn hosts(&self, text: &str) {
        let tmp = self.dir.join("names.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.dir.join("hosts/names")).unwrap();
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fastrand_port() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(0);
    h.finish() as u32
}

/// A node on 127.0.0.2 on the same port as `like`.
async fn node_on_127_0_0_2(port: u16) -> Node {
    let listener = TcpListener::bind(("127.0.0.2", port)).await.unwrap();
    let mut n = Node {
        addr: listener.local_addr().unwrap(),
        served: Arc::default(),
        status: Arc::new(AtomicU16::new(200)),
        delay: Duration::ZERO,
        task: None,
    };
    n.serve(listener);
    n
}

#[tokio::test]
async fn dns_names_that_do_not_resolve_start_unhealthy_then_traffic_follows_their_addresses() {
    let a = Node::start(Duration::ZERO).await;
    let b = node_on_127_0_0_2(a.addr.port()).await;
    let port = a.addr.port();
    let mut dns = Dnsmasq::start(&[format!("_http._tcp.svc.test,srv-a.test,{port},0,1")]);
    let gw = Gateway::start(&format!(
        r#"
dns: {{resolvers: ["127.0.0.1:{}"], timeout: 0.5}}
upstreams:
  - id: d
    nodes: {{"app.test:{port}": 1}}
  - id: srv
    discovery_type: dns
    service_name: _http._tcp.svc.test
routes:
  - uri: /srv
    upstream_id: srv
  - uri: /*
    upstream_id: d
"#,
        dns.port
    ));
    // Started although nothing resolves: no node yet.
    let (status, _) = get(&gw, "/", &[]).await;
    assert_eq!(status, 503);
    let h = health(&gw, "d");
    assert_eq!(h[0]["state"], "unhealthy", "{h}");
    assert_eq!(h[0]["cause"], "dns", "{h}");

    // The name appears: traffic follows within about a second.
    dns.hosts("127.0.0.1 app.test\n127.0.0.1 srv-a.test\n");
    let took = {
        let start = Instant::now();
        loop {
            if get(&gw, "/", &[]).await == (200, a.addr.to_string()) {
                break start.elapsed();
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the name never took effect"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    eprintln!("resolved after {took:?}");
    // SRV: the target and port of the record.
    let start = Instant::now();
    while get(&gw, "/srv", &[]).await != (200, a.addr.to_string()) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "SRV never took effect"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The name moves: traffic follows, without a reload.
    dns.hosts("127.0.0.2 app.test\n127.0.0.1 srv-a.test\n");
    let start = Instant::now();
    while get(&gw, "/", &[]).await != (200, b.addr.to_string()) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the new address never took effect"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..5 {
        assert_eq!(get(&gw, "/", &[]).await, (200, b.addr.to_string()));
    }
    // Two addresses: both get traffic.
    dns.hosts("127.0.0.1 app.test\n127.0.0.2 app.test\n");
    let start = Instant::now();
    let mut seen = std::collections::HashSet::new();
    while seen.len() < 2 {
        seen.insert(get(&gw, "/", &[]).await.1);
        assert!(start.elapsed() < Duration::from_secs(5), "only {seen:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The name server goes away: no answer is not "no address", the addresses stay.
    dns.stop();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for _ in 0..5 {
        assert_eq!(get(&gw, "/", &[]).await.0, 200);
    }
    assert_eq!(get(&gw, "/srv", &[]).await.0, 200);
}

/// A `sluice origin` process on `port` (a real process: SIGKILL is SIGKILL).
fn origin_process(port: u16) -> std::process::Child {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["origin", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "origin did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_killed_under_load_fails_no_get_and_comes_back_when_restarted() {
    let (pa, pb) = (free_port(), free_port());
    let mut a = origin_process(pa);
    let mut b = origin_process(pb);
    let gw = Arc::new(Gateway::start(&format!(
        r#"
workers: 2
upstreams:
  - id: k
    nodes: {{"127.0.0.1:{pa}": 1, "127.0.0.1:{pb}": 1}}
    checks:
      active:
        http_path: /hello
        healthy: {{interval: 0.2, successes: 1}}
        unhealthy: {{interval: 0.2, tcp_failures: 1}}
routes:
  - uri: /hello
    upstream_id: k
"#
    )));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (addr, stop, ok, failed) = (gw.addr(), stop.clone(), ok.clone(), failed.clone());
        clients.spawn(async move {
            let mut buf = vec![0u8; 4096];
            'conn: while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
                    failed.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                while !stop.load(Ordering::Relaxed) {
                    if s.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
                        .await
                        .is_err()
                    {
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue 'conn;
                    }
                    let mut got = Vec::new();
                    while !got.ends_with(b"hello world") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => {
                                if failed.fetch_add(1, Ordering::Relaxed) < 3 {
                                    eprintln!("closed after {:?}", String::from_utf8_lossy(&got));
                                }
                                continue 'conn;
                            }
                            Ok(k) => got.extend_from_slice(&buf[..k]),
                        }
                        if got.starts_with(b"HTTP/1.1 5")
                            && got.windows(4).any(|w| w == b"\r\n\r\n")
                        {
                            if failed.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("failed: {}", String::from_utf8_lossy(&got));
                            }
                            continue 'conn;
                        }
                    }
                    ok.fetch_add(1, Ordering::Relaxed);
                    // keepalive_requests reached: the gateway closes this connection.
                    if got
                        .to_ascii_lowercase()
                        .windows(19)
                        .any(|w| w == b"connection: close\r\n")
                    {
                        continue 'conn;
                    }
                }
            }
        });
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    a.kill().unwrap(); // SIGKILL
    a.wait().unwrap();
    let killed = Instant::now();
    let out = until(Duration::from_secs(3), || {
        state_of(&gw, "k", format!("127.0.0.1:{pa}").parse().unwrap()) == "unhealthy"
    })
    .await
    .expect("the killed node stayed healthy");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut a = origin_process(pa);
    let back = until(Duration::from_secs(3), || {
        state_of(&gw, "k", format!("127.0.0.1:{pa}").parse().unwrap()) == "healthy"
    })
    .await
    .expect("the restarted node did not come back");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    while clients.join_next().await.is_some() {}
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!(
        "{ok} GETs answered, {failed} failed; out of rotation {out:?} after the kill (measured from {:?}), back {back:?} after the restart",
        killed.elapsed()
    );
    assert_eq!(
        failed, 0,
        "GETs failed while a node was killed ({ok} answered)"
    );
    assert!(ok > 100, "only {ok} requests");
    for c in [&mut a, &mut b] {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[tokio::test]
async fn a_node_that_stalls_is_taken_out_by_passive_timeouts() {
    let stalls = Node::start(Duration::from_secs(3)).await;
    let fine = Node::start(Duration::ZERO).await;
    let gw = Gateway::start(&format!(
        r#"
upstreams:
  - id: s
    timeout: {{read: 0.2}}
    nodes: {{"{}": 1, "{}": 1}}
    checks: {{passive: {{unhealthy: {{timeouts: 2}}}}}}
routes:
  - uri: /*
    upstream_id: s
"#,
        stalls.addr, fine.addr
    ));
    let mut timeouts = 0;
    for _ in 0..12 {
        match get(&gw, "/", &[]).await.0 {
            504 => timeouts += 1,
            200 => {}
            other => panic!("status {other}"),
        }
    }
    assert_eq!(timeouts, 2, "the stalling node kept getting requests");
    assert_eq!(state_of(&gw, "s", stalls.addr), "unhealthy");
}

#[tokio::test]
async fn many_names_that_get_no_answer_cost_one_timeout_at_start_not_one_each() {
    // A name server that never answers.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let nodes: Vec<String> = (0..20)
        .map(|i| format!("\"name{i}.blackhole.test:80\": 1"))
        .collect();
    let started = Instant::now();
    let gw = Gateway::start(&format!(
        "dns: {{resolvers: [\"127.0.0.1:{port}\"], timeout: 0.5}}\nupstreams:\n  - id: b\n    nodes: {{{}}}\nroutes:\n  - uri: /*\n    upstream_id: b\n",
        nodes.join(", ")
    ));
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "start took {took:?} for 20 silent names (one 0.5 s timeout each would be 10 s)"
    );
    assert_eq!(get(&gw, "/", &[]).await.0, 503);
    let h = health(&gw, "b");
    assert_eq!(h.as_array().unwrap().len(), 20);
    assert!(
        h.as_array().unwrap().iter().all(|n| n["cause"] == "dns"),
        "{h}"
    );
    drop(silent);
}

/// A real Eureka server (Spring Cloud Netflix, crates/sluice/tests/eureka, built with Maven by
/// test.sh or here when its jar is missing) on a free port of 127.0.0.1.
struct Eureka {
    child: std::process::Child,
    port: u16,
}

impl Eureka {
    async fn start() -> Eureka {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/eureka");
        let jar = dir.join("target/eureka-server.jar");
        if !jar.exists() {
            let built = std::process::Command::new("mvn")
                .args(["-q", "-B", "package", "-DskipTests"])
                .current_dir(&dir)
                .status()
                .expect("mvn (Debian: maven) builds the test Eureka server");
            assert!(built.success(), "the test Eureka server did not build");
        }
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut child = std::process::Command::new("java")
            .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-jar"])
            .arg(&jar)
            .arg(format!("--server.port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("java (Debian: default-jdk-headless) runs the test Eureka server");
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the Eureka server exited: {status}");
            }
            if eureka_rest(port, "GET", "/eureka/apps", "").await.0 == 200 {
                return Eureka { child, port };
            }
            if start.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the Eureka server did not answer within two minutes");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn call(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        eureka_rest(self.port, method, path, body).await
    }

    /// Registers instance `id` of `app` at `addr`, as a Eureka client does.
    async fn register(&self, app: &str, id: &str, addr: SocketAddr, weight: Option<u32>) {
        let metadata = match weight {
            Some(w) => serde_json::json!({"weight": w.to_string()}),
            None => serde_json::json!({}),
        };
        let body = serde_json::json!({"instance": {
            "instanceId": id, "hostName": addr.ip().to_string(), "app": app,
            "ipAddr": addr.ip().to_string(), "status": "UP",
            "port": {"$": addr.port(), "@enabled": "true"},
            "securePort": {"$": 443, "@enabled": "false"},
            "dataCenterInfo": {"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"},
            "metadata": metadata
        }});
        let (status, text) = self
            .call("POST", &format!("/eureka/apps/{app}"), &body.to_string())
            .await;
        assert_eq!(status, 204, "{text}");
    }
}

/// One request to the REST API of the Eureka server on `port` (JSON); (status, answer).
async fn eureka_rest(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return (0, String::new());
    };
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(req.as_bytes()).await.is_err() {
        return (0, String::new());
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

impl Drop for Eureka {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// APISIX's Eureka discovery against a real Eureka server: an application's UP instances get
/// the traffic, with their metadata's weight; a new instance, a status override and a
/// deregistration are followed within a few fetch intervals, without a reload; an unknown
/// application is 503 until it registers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eureka_instances_get_the_traffic_and_changes_are_followed() {
    let eureka = Eureka::start().await;
    let a = Node::start(Duration::ZERO).await;
    let b = Node::start(Duration::ZERO).await;
    eureka.register("USER-SERVICE", "a", a.addr, Some(1)).await;
    let gw = Gateway::start(&format!(
        r#"
discovery:
  eureka:
    host: ["http://127.0.0.1:{}"]
    prefix: /eureka/
    fetch_interval: 1
    timeout: {{connect: 2000, send: 2000, read: 5000}}
routes:
  - uri: /user/*
    upstream: {{discovery_type: eureka, service_name: USER-SERVICE, type: roundrobin}}
  - uri: /order/*
    upstream: {{discovery_type: eureka, service_name: ORDER-SERVICE}}
"#,
        eureka.port
    ));
    // Fetched when the configuration compiled: the first request goes to the instance.
    assert_eq!(get(&gw, "/user/1", &[]).await, (200, a.addr.to_string()));
    // Not (yet) in Eureka: no node.
    assert_eq!(get(&gw, "/order/1", &[]).await.0, 503);
    let until = |what: &'static str, want: Vec<(u16, String)>| {
        let gw = &gw;
        async move {
            let start = Instant::now();
            loop {
                let mut seen = Vec::new();
                for _ in 0..8 {
                    let r = get(gw, "/user/1", &[]).await;
                    if !seen.contains(&r) {
                        seen.push(r);
                    }
                }
                seen.sort();
                if seen == want {
                    return start.elapsed();
                }
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "{what}: saw {seen:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // A second instance registers: both get traffic.
    eureka.register("USER-SERVICE", "b", b.addr, Some(1)).await;
    let mut both = vec![(200, a.addr.to_string()), (200, b.addr.to_string())];
    both.sort();
    let took = until("the new instance", both).await;
    eprintln!("a new instance got traffic after {took:?}");
    // An operator takes one out of service: only the other gets traffic.
    let (status, text) = eureka
        .call(
            "PUT",
            "/eureka/apps/USER-SERVICE/a/status?value=OUT_OF_SERVICE",
            "",
        )
        .await;
    assert_eq!(status, 200, "{text}");
    until("the status override", vec![(200, b.addr.to_string())]).await;
    // Another application registers: its route is served.
    eureka.register("ORDER-SERVICE", "o", a.addr, None).await;
    let start = Instant::now();
    while get(&gw, "/order/1", &[]).await != (200, a.addr.to_string()) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "ORDER-SERVICE never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every instance leaves: 503.
    for path in ["/eureka/apps/USER-SERVICE/a", "/eureka/apps/USER-SERVICE/b"] {
        assert_eq!(eureka.call("DELETE", path, "").await.0, 200);
    }
    until("every instance gone", vec![(503, "-".to_owned())]).await;
    // Eureka unreachable: the instances last fetched stay (ORDER-SERVICE keeps its node).
    drop(eureka);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(get(&gw, "/order/1", &[]).await, (200, a.addr.to_string()));
}

/// `discovery_type: eureka` on a node without `discovery.eureka` is refused with why.
#[test]
fn eureka_without_its_servers_is_refused() {
    let text = common::validate(
        "routes:\n  - {uri: /a, upstream: {discovery_type: eureka, service_name: USER-SERVICE}}\n",
    );
    assert!(
        text.contains(
            "routes[0].upstream.discovery_type: eureka needs the node's discovery.eureka settings"
        ),
        "{text}"
    );
}
