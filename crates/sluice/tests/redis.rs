//! Cluster-wide limits through a real Redis (Debian's redis-server) started by the tests: two
//! gateways share one limit, Redis is not called per request, and a Redis outage is handled as
//! configured.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::RedisServer;
use sluice_testkit::{Gateway, TestOrigin};

fn config(origin: &TestOrigin, redis: &RedisServer, routes: &[(&str, &str)]) -> String {
    let mut y = String::from("routes:\n");
    for (uri, plugin) in routes {
        y.push_str(&format!(
            "  - uri: {uri}\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins:\n      {}\n",
            origin.node(),
            plugin.replace(
                "REDIS",
                &format!(
                    "policy: redis, redis_host: 127.0.0.1, redis_port: {}, redis_timeout: 200",
                    redis.port
                )
            )
        ));
    }
    y
}

/// Calls of the lease script Redis has served (`INFO commandstats`).
fn redis_script_calls(port: u16) -> u64 {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(b"INFO commandstats\r\nQUIT\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines()
        .filter(|l| l.starts_with("cmdstat_eval"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Waits, if needed, so that a window of `secs` seconds does not end in the next `margin`.
async fn away_from_window_end(secs: u64, margin: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let left = secs - now % secs;
    if left < margin {
        tokio::time::sleep(Duration::from_secs(left + 1)).await;
    }
}

/// Two gateways (two nodes: each its own counters) with one route, `path`, limited by `plugin`
/// through one Redis.
async fn two_nodes(path: &str, plugin: &str) -> (RedisServer, TestOrigin, Gateway, Gateway) {
    let redis = RedisServer::start();
    let origin = TestOrigin::http1().run().await;
    let yaml = config(&origin, &redis, &[(path, plugin)]);
    away_from_window_end(3600, 30).await;
    let (a, b) = (Gateway::start(&yaml), Gateway::start(&yaml));
    (redis, origin, a, b)
}

/// Sends `n` requests for `path` to `gw`, one after another, on a task; counts the 200s.
fn admitted(gw: &Gateway, path: &'static str, n: usize) -> tokio::task::JoinHandle<usize> {
    let c = gw.client();
    tokio::spawn(async move {
        let mut ok = 0;
        for _ in 0..n {
            match c.get(path).await.status.as_u16() {
                200 => ok += 1,
                429 => {}
                other => panic!("unexpected {other}"),
            }
        }
        ok
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_one_limit() {
    let (_redis, _origin, a, b) = two_nodes(
        "/limited",
        "limit-count: {count: 100, time_window: 3600, rejected_code: 429, REDIS}",
    )
    .await;
    // 150 requests to each node, at the same time.
    let (oka, okb) = tokio::join!(admitted(&a, "/limited", 150), admitted(&b, "/limited", 150));
    let (oka, okb) = (oka.unwrap(), okb.unwrap());
    let accepted = oka + okb;
    eprintln!("node A accepted {oka}, node B {okb}: {accepted} of 300 with a limit of 100");
    // Never more than the limit; below it by at most each node's unused lease (2 - 1 here).
    assert!(accepted <= 100, "{accepted} accepted");
    assert!(accepted >= 98, "{accepted} accepted");
    assert!(oka > 0 && okb > 0, "both nodes admitted some");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_is_not_called_per_request() {
    let (redis, _origin, a, b) = two_nodes(
        "/busy",
        "limit-count: {count: 1000000, time_window: 3600, REDIS}",
    )
    .await;
    let before = redis_script_calls(redis.port);
    let mut remaining = Vec::new();
    for gw in [&a, &b] {
        let mut conn = gw.client().connection().await;
        for i in 0..2000 {
            if i % 500 == 0 {
                // Under limits.keepalive_requests (1,000), after which the gateway closes.
                conn = gw.client().connection().await;
            }
            let r = conn.get("/busy").await.unwrap();
            assert_eq!(r.status, 200);
            remaining.push(
                r.header("x-ratelimit-remaining")
                    .unwrap()
                    .parse::<u64>()
                    .unwrap(),
            );
        }
    }
    let calls = redis_script_calls(redis.port) - before;
    eprintln!("4000 requests, {calls} Redis calls");
    // A lease of 1,000 per call (count / 50, at most 1,000): a handful of calls, not 4,000.
    assert!(calls <= 10, "{calls} Redis calls for 4000 requests");
    assert!(calls >= 4, "{calls}: each node leased at least twice");
    // The remaining count is an estimate, but it goes down.
    assert!(remaining.last().unwrap() < remaining.first().unwrap());
    assert!(*remaining.last().unwrap() <= 1_000_000 - 4000 + 2 * 1500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_fails_open_or_closed_as_configured() {
    let mut redis = RedisServer::start();
    let origin = TestOrigin::http1().run().await;
    let yaml = config(
        &origin,
        &redis,
        &[
            (
                "/open",
                "limit-count: {count: 100000, time_window: 3600, allow_degradation: true, REDIS}",
            ),
            (
                "/closed",
                "limit-count: {count: 100000, time_window: 3600, REDIS}",
            ),
            ("/req", "limit-req: {rate: 1000, burst: 100, REDIS}"),
        ],
    );
    let gw = Gateway::start(&yaml);
    let c = gw.client();
    for path in ["/open", "/closed", "/req"] {
        assert_eq!(c.get(path).await.status, 200, "{path}");
    }
    redis.kill();
    // Leases already held keep serving; once they are used up the choice applies.
    let started = Instant::now();
    loop {
        let closed = c.get("/closed").await.status.as_u16();
        if closed == 503 {
            break;
        }
        assert_eq!(closed, 200);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "/closed never noticed the outage"
        );
    }
    let r = c.get("/closed").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error_msg"], "rate limiting is unavailable");
    for _ in 0..3000 {
        assert_eq!(c.get("/open").await.status, 200);
    }
    redis.restart();
    let started = Instant::now();
    while c.get("/closed").await.status != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "/closed did not recover"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(c.get("/req").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_req_caps_the_cluster_per_second() {
    // Each node's bucket lets 31 through at once (burst 30, nodelay); the cluster takes
    // ceil(rate + burst) = 40 per second.
    let (_redis, _origin, a, b) = two_nodes(
        "/r",
        "limit-req: {rate: 10, burst: 30, nodelay: true, rejected_code: 429, REDIS}",
    )
    .await;
    // Start right after a second begins, and send 60 requests to each node within it.
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_millis();
    tokio::time::sleep(Duration::from_millis(u64::from(1000 - ms) + 20)).await;
    let started = Instant::now();
    let (ra, rb) = tokio::join!(admitted(&a, "/r", 60), admitted(&b, "/r", 60));
    let elapsed = started.elapsed();
    let accepted = ra.unwrap() + rb.unwrap();
    eprintln!("{accepted} of 120 accepted in {elapsed:?}, 40 per second cluster-wide");
    if elapsed < Duration::from_millis(900) {
        assert!(accepted <= 40, "{accepted} accepted in one second");
    }
    assert!(accepted >= 35, "{accepted}");
}

#[test]
fn redis_settings_are_checked() {
    let errors = |plugin: &str| {
        sluice_config::load_str_with(
            &format!("routes:\n  - uri: /\n    upstream: {{nodes: {{\"127.0.0.1:1\": 1}}}}\n    plugins: {{{plugin}}}\n"),
            &sluice_plugins::builtin(),
        )
        .unwrap_err()
        .to_string()
    };
    assert_eq!(
        errors("limit-count: {count: 1, time_window: 1, policy: redis}").trim(),
        "routes[0].plugins.limit-count.redis_host: is required with policy redis"
    );
    assert_eq!(
        errors("limit-count: {count: 1, time_window: 1, policy: redis-cluster}").trim(),
        "routes[0].plugins.limit-count.redis_cluster_nodes: is required with policy redis-cluster: the cluster's nodes, host:port\nroutes[0].plugins.limit-count.redis_cluster_name: is required with policy redis-cluster"
    );
    assert_eq!(
        errors("limit-req: {rate: 1, policy: redis-cluster, redis_cluster_nodes: [\"10.0.0.1\", \"10.0.0.2:6379\"], redis_cluster_name: c, redis_cluster_ssl: true}").trim(),
        "routes[0].plugins.limit-req.redis_cluster_nodes[0]: invalid node \"10.0.0.1\": expected host:port"
    );
    assert_eq!(
        errors("limit-count: {count: 1, time_window: 1, policy: sentinel}").trim(),
        "routes[0].plugins.limit-count.policy: unknown policy \"sentinel\", expected local, redis, redis-cluster or redis-sentinel"
    );
    assert_eq!(
        errors("limit-count: {count: 1, time_window: 1, policy: redis-sentinel, redis_sentinels: [{host: a, port: 0}], redis_role: slave}").trim(),
        "routes[0].plugins.limit-count.redis_sentinels[0].port: must be a whole number from 1 to 65535, got 0\nroutes[0].plugins.limit-count.redis_role: \"slave\" is not supported: counters are written, so they are kept on the master\nroutes[0].plugins.limit-count.redis_master_name: is required with policy redis-sentinel"
    );
    assert_eq!(
        errors("limit-req: {rate: 1, policy: redis, redis_host: h, redis_timeout: 0}").trim(),
        "routes[0].plugins.limit-req.redis_timeout: must be a whole number from 1 to 60000 milliseconds (one minute), got 0"
    );
}

/// A real Redis Cluster: three redis-server nodes in cluster mode, joined by `redis-cli
/// --cluster create`, each on a free port of 127.0.0.1.
struct RedisCluster {
    nodes: Vec<std::process::Child>,
    ports: Vec<u16>,
    dir: std::path::PathBuf,
}

impl RedisCluster {
    fn start() -> RedisCluster {
        let dir = std::env::temp_dir().join(format!(
            "sluice-redis-cluster-{}-{}",
            std::process::id(),
            common::free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ports: Vec<u16> = (0..3).map(|_| common::free_port()).collect();
        let mut nodes = Vec::new();
        for p in &ports {
            let node_dir = dir.join(p.to_string());
            std::fs::create_dir_all(&node_dir).unwrap();
            nodes.push(
                std::process::Command::new("redis-server")
                    .args([
                        "--port",
                        &p.to_string(),
                        "--bind",
                        "127.0.0.1",
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                    ])
                    .current_dir(&node_dir)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .expect("redis-server runs"),
            );
        }
        let c = RedisCluster { nodes, ports, dir };
        let started = Instant::now();
        while !c
            .ports
            .iter()
            .all(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_ok())
        {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "redis did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(c.ports.iter().map(|p| format!("127.0.0.1:{p}")));
        args.extend([
            "--cluster-replicas".into(),
            "0".into(),
            "--cluster-yes".into(),
        ]);
        let out = std::process::Command::new("redis-cli")
            .args(&args)
            .output()
            .expect("redis-cli (redis-tools) creates the cluster");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        // Every node must see the cluster up before it serves keys.
        let started = Instant::now();
        loop {
            let up = c.ports.iter().all(|p| {
                std::process::Command::new("redis-cli")
                    .args(["-p", &p.to_string(), "cluster", "info"])
                    .output()
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("cluster_state:ok"))
            });
            if up {
                return c;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the cluster did not come up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            let _ = n.kill();
            let _ = n.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// APISIX's `policy: redis-cluster`: two gateways count one limit in a real Redis Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_one_limit_in_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let origin = TestOrigin::http1().run().await;
    let nodes: Vec<String> = cluster
        .ports
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    let yaml = format!(
        "routes:\n  - uri: /limited\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins:\n      limit-count: {{count: 50, time_window: 3600, rejected_code: 429, policy: redis-cluster, redis_cluster_nodes: [{}], redis_cluster_name: redis-cluster, redis_timeout: 500}}\n",
        origin.node(),
        nodes.join(", ")
    );
    away_from_window_end(3600, 30).await;
    let (a, b) = (Gateway::start(&yaml), Gateway::start(&yaml));
    let (oka, okb) = tokio::join!(admitted(&a, "/limited", 60), admitted(&b, "/limited", 60));
    let (oka, okb) = (oka.unwrap(), okb.unwrap());
    let accepted = oka + okb;
    eprintln!(
        "through the cluster: node A accepted {oka}, node B {okb}: {accepted} of 120 with a limit of 50"
    );
    assert!((48..=50).contains(&accepted), "{accepted} accepted");
    assert!(oka > 0 && okb > 0, "both nodes admitted some");
    // The count is in the cluster: some node holds the window's key.
    let keys: usize = cluster
        .ports
        .iter()
        .map(|p| {
            let o = std::process::Command::new("redis-cli")
                .args([
                    "-p",
                    &p.to_string(),
                    "--scan",
                    "--pattern",
                    "sluice:limit-count:*",
                ])
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).lines().count()
        })
        .sum();
    assert!(keys >= 1, "no counter key in the cluster");
}

/// An origin that answers after `delay`: requests stay in flight that long.
async fn slow_origin(delay: Duration) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut have = Vec::new();
                loop {
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    have.extend_from_slice(&buf[..n]);
                    while let Some(end) = have.windows(4).position(|w| w == b"\r\n\r\n") {
                        have.drain(..end + 4);
                        tokio::time::sleep(delay).await;
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                            .await;
                    }
                }
            });
        }
    });
    addr
}

/// APISIX's limit-conn with `policy: redis`: requests in flight are counted across nodes, and
/// a slot is given back when its request ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_conn_counts_requests_in_flight_across_nodes() {
    let redis = RedisServer::start();
    let origin = slow_origin(Duration::from_millis(600)).await;
    let yaml = format!(
        "routes:\n  - uri: /slow\n    upstream: {{nodes: {{\"{origin}\": 1}}}}\n    plugins:\n      limit-conn: {{conn: 2, burst: 0, default_conn_delay: 0.1, rejected_code: 429, policy: redis, redis_host: 127.0.0.1, redis_port: {}, redis_timeout: 500}}\n",
        redis.port
    );
    let (a, b) = (Gateway::start(&yaml), Gateway::start(&yaml));
    let round = || async {
        let mut all = Vec::new();
        for gw in [&a, &b, &a, &b, &a, &b] {
            let c = gw.client();
            all.push(tokio::spawn(
                async move { c.get("/slow").await.status.as_u16() },
            ));
        }
        let mut statuses = Vec::new();
        for t in all {
            statuses.push(t.await.unwrap());
        }
        statuses.sort_unstable();
        statuses
    };
    // Six at once, three to each node: two in flight cluster-wide, the rest refused.
    assert_eq!(round().await, vec![200, 200, 429, 429, 429, 429]);
    // Their slots were given back (ZREM, not waited for): two more get through.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(round().await, vec![200, 200, 429, 429, 429, 429]);
    // An answer that comes after the wait gave up (Redis paused longer than twice
    // redis_timeout) still counted the request: its slot is given back all the same.
    let pause = std::process::Command::new("redis-cli")
        .args([
            "-p",
            &redis.port.to_string(),
            "client",
            "pause",
            "1500",
            "write",
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&pause.stdout).contains("OK"));
    assert_eq!(a.client().get("/slow").await.status.as_u16(), 503);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(round().await, vec![200, 200, 429, 429, 429, 429]);
    // Redis gone, allow_degradation false: 503, not an unlimited pass.
    let mut redis = redis;
    redis.kill();
    assert_eq!(a.client().get("/slow").await.status.as_u16(), 503);
}

/// A Redis server reached over TLS (redis-server's `--tls-port`, Debian's build has it).
struct TlsRedis {
    child: std::process::Child,
    port: u16,
    _pki: common::pki::Pki,
}

impl TlsRedis {
    fn start() -> TlsRedis {
        let pki = common::pki::Pki::new("redis");
        let (cert, key) = pki.issue_files("redis", &["localhost", "127.0.0.1"]);
        let port = common::free_port();
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .args([
                "--tls-cert-file",
                cert.to_str().unwrap(),
                "--tls-key-file",
                key.to_str().unwrap(),
            ])
            .args([
                "--tls-ca-cert-file",
                pki.ca_file().to_str().unwrap(),
                "--tls-auth-clients",
                "no",
            ])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-server");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "redis (TLS) did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        TlsRedis {
            child,
            port,
            _pki: pki,
        }
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `redis_ssl`: counting through a Redis that speaks only TLS; with `redis_ssl_verify`, a
/// certificate from an unknown CA is refused (and the limit answers 503, as for any outage).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_count_reaches_redis_over_tls() {
    let redis = TlsRedis::start();
    let origin = TestOrigin::http1().run().await;
    let plugin = |path: &str, verify: bool| {
        format!(
            "  - uri: {path}\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins:\n      limit-count: {{count: 3, time_window: 3600, rejected_code: 429, policy: redis, redis_host: 127.0.0.1, redis_port: {}, redis_ssl: true, redis_ssl_verify: {verify}, redis_timeout: 1000}}\n",
            origin.node(),
            redis.port
        )
    };
    away_from_window_end(3600, 30).await;
    let gw = Gateway::start(&format!(
        "routes:\n{}{}",
        plugin("/tls", false),
        plugin("/verified", true)
    ));
    let c = gw.client();
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(c.get("/tls").await.status.as_u16());
    }
    assert_eq!(got, vec![200, 200, 200, 429]);
    assert_eq!(c.get("/verified").await.status.as_u16(), 503);
}

/// A master and a sentinel watching it (redis-server in sentinel mode).
struct Sentinel {
    master: RedisServer,
    sentinel: std::process::Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl Sentinel {
    fn start() -> Sentinel {
        let master = RedisServer::start();
        let port = common::free_port();
        let dir =
            std::env::temp_dir().join(format!("sluice-sentinel-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 {} 1\n",
                master.port
            ),
        )
        .unwrap();
        let sentinel = std::process::Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-server --sentinel");
        // Up once it names the master.
        let started = Instant::now();
        loop {
            let o = std::process::Command::new("redis-cli")
                .args([
                    "-p",
                    &port.to_string(),
                    "sentinel",
                    "get-master-addr-by-name",
                    "mymaster",
                ])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&o.stdout).contains(&master.port.to_string()) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the sentinel did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Sentinel {
            master,
            sentinel,
            port,
            dir,
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.sentinel.kill();
        let _ = self.sentinel.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// APISIX's `policy: redis-sentinel`: the gateway asks the sentinel for the master and counts
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_count_finds_the_master_through_a_sentinel() {
    let s = Sentinel::start();
    let origin = TestOrigin::http1().run().await;
    away_from_window_end(3600, 30).await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /s\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins:\n      limit-count: {{count: 2, time_window: 3600, rejected_code: 429, policy: redis-sentinel, redis_sentinels: [{{host: 127.0.0.1, port: {}}}], redis_master_name: mymaster, redis_database: 1}}\n",
        origin.node(),
        s.port
    ));
    let c = gw.client();
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(c.get("/s").await.status.as_u16());
    }
    assert_eq!(got, vec![200, 200, 429]);
    // The count is on the master, in database 1.
    let o = std::process::Command::new("redis-cli")
        .args([
            "-p",
            &s.master.port.to_string(),
            "-n",
            "1",
            "--scan",
            "--pattern",
            "sluice:limit-count:*",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1);
}

/// A Redis that does not answer holds up only its own limits: the Redis thread connects on a
/// task per server, so another route's Redis keeps counting meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_redis_does_not_hold_up_another() {
    let redis = RedisServer::start();
    // Accepts connections and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let _keep = std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().flatten() {
            held.push(s);
        }
    });
    let origin = TestOrigin::http1().run().await;
    let route = |uri: &str, port: u16, timeout: u32| {
        format!(
            "  - uri: {uri}\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins:\n      limit-count: {{count: 1000, time_window: 3600, policy: redis, redis_host: 127.0.0.1, redis_port: {port}, redis_timeout: {timeout}}}\n",
            origin.node()
        )
    };
    away_from_window_end(3600, 30).await;
    let gw = Gateway::start(&format!(
        "routes:\n{}{}",
        route("/silent", silent_port, 1500),
        route("/counted", redis.port, 300)
    ));
    let c = gw.client();
    let stuck = tokio::spawn(async move { c.get("/silent").await.status.as_u16() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // While the silent one is being connected to (up to 3 s), the other counts: 200s.
    for _ in 0..3 {
        assert_eq!(gw.client().get("/counted").await.status.as_u16(), 200);
    }
    assert_eq!(stuck.await.unwrap(), 503);
}
