//! Observability end to end: the status listener's metrics after a known mix of requests on
//! every protocol path (checked by `promtool` and scraped by a real Prometheus), the label cap,
//! the `prometheus` plugin, health and readiness, and the access log (every variable, JSON
//! escaping, requests refused while parsing). Real sockets on 127.0.0.1.

#![allow(clippy::unwrap_used)]

mod common;

use common::free_port;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hyper::Method;
use sluice_testkit::{Client, TestOrigin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A node started in-process from `yaml` (file mode); its directory.
struct Node {
    node: Option<sluice::Node>,
    dir: PathBuf,
}

impl Node {
    fn start(yaml: &str) -> Node {
        sluice_testkit::init_logging();
        let dir = std::env::temp_dir().join(format!("sluice-obs-{}-{:x}", std::process::id(), {
            use std::hash::{BuildHasher, RandomState};
            RandomState::new().hash_one(Instant::now())
        }));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("sluice.yaml");
        std::fs::write(&file, yaml.replace("$DIR", dir.to_str().unwrap())).unwrap();
        let node = sluice::Node::start(sluice::Source::File(file), |_| {})
            .unwrap_or_else(|e| panic!("node did not start: {e:#}"));
        Node {
            node: Some(node),
            dir,
        }
    }

    fn node(&self) -> &sluice::Node {
        self.node.as_ref().unwrap()
    }

    fn proxy(&self) -> Client {
        Client::new(self.node().server().local_addrs()[0])
    }

    fn status(&self) -> Client {
        Client::new(self.node().status_addr().unwrap())
    }

    /// The metrics as the control plane renders them (no status listener needed).
    fn metrics_text_without_status(&self) -> String {
        sluice_admin::status::exposition(self.node().control(), "")
            .expect("metrics")
            .0
    }

    async fn metrics(&self) -> Samples {
        let r = self.status().get("/metrics").await;
        assert_eq!(r.status, 200, "{}", r.text());
        Samples::parse(&r.text())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(n) = self.node.take() {
            n.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Samples of a Prometheus text exposition, by `name{labels}` as written.
struct Samples(HashMap<String, f64>, String);

impl Samples {
    fn parse(text: &str) -> Samples {
        let mut m = HashMap::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (k, v) = line.rsplit_once(' ').unwrap();
            m.insert(k.to_owned(), v.parse().unwrap());
        }
        Samples(m, text.to_owned())
    }

    /// The value of a sample (0 when absent: counters with no count are not written).
    fn get(&self, key: &str) -> f64 {
        self.0.get(key).copied().unwrap_or(0.0)
    }

    /// `sluice_http_requests_total` of `route`, GET, 2xx.
    fn gets_ok(&self, route: &str) -> f64 {
        self.get(&format!(
            r#"sluice_http_requests_total{{route="{route}",method="GET",status="2xx"}}"#
        ))
    }

    fn with_prefix(&self, prefix: &str) -> Vec<(&String, &f64)> {
        self.0
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .collect()
    }
}

/// curl with `args`; its stdout.
async fn curl(args: &[&str]) -> String {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .await
        .expect("curl runs (test.sh installs it)");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_every_protocol_path_exactly_across_two_workers() {
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let grpc = TestOrigin::http2().route("/", "grpc-reply").run().await;
    let stream_port = free_port();
    let n = Node::start(&format!(
        r#"listen: [{{addr: 127.0.0.1:0, http2: true}}]
workers: 2
admin: {{enabled: false}}
status: {{listen: 127.0.0.1:0}}
upstreams:
  - id: web
    nodes: {{"{o}": 1}}
routes:
  - {{id: ok, uri: /ok/*, upstream_id: web}}
  - {{id: lc, uri: /lc, upstream_id: web, plugins: {{key-auth: {{}}}}}}
  - id: limited
    uri: /limited
    upstream_id: web
    plugins: {{limit-count: {{count: 1, time_window: 60, rejected_code: 429}}}}
  - id: rpc
    uri: /test.Echo/*
    upstream: {{scheme: grpc, nodes: {{"{g}": 1}}}}
consumers:
  - {{username: app, plugins: {{key-auth: {{key: app-key}}}}}}
stream_routes:
  - {{id: tcp1, listen: "127.0.0.1:{stream_port}", upstream_id: web}}
"#,
        o = origin.node(),
        g = grpc.node()
    ));
    let p = n.proxy();
    let gw = n.node().server().local_addrs()[0];
    // HTTP/1.1, each on its own connection (the kernel spreads them over both workers).
    for _ in 0..3 {
        assert_eq!(p.get("/ok/a").await.status, 200);
    }
    for _ in 0..2 {
        assert_eq!(p.get("/nope").await.status, 404);
    }
    let unauth = p.get("/lc").await;
    assert_eq!(unauth.status, 401);
    assert_eq!(p.get("/limited").await.status, 200);
    assert_eq!(p.get("/limited").await.status, 429);
    // HTTP/2: a GET (the fast path) and a POST with a body (through the engine).
    let h2 = format!("http://{gw}/ok/h2");
    curl(&["--http2-prior-knowledge", &h2]).await;
    curl(&["--http2-prior-knowledge", "-d", "twelve bytes", &h2]).await;
    // gRPC: a call to a `scheme: grpc` route.
    let call = format!("http://{gw}/test.Echo/Unary");
    // An empty message: the 5-byte gRPC frame header.
    let frame = n.dir.join("frame.bin");
    std::fs::write(&frame, [0u8; 5]).unwrap();
    let data = format!("@{}", frame.display());
    curl(&[
        "--http2-prior-knowledge",
        "-H",
        "content-type: application/grpc",
        "-H",
        "te: trailers",
        "--data-binary",
        &data,
        &call,
    ])
    .await;
    // A request refused while parsing: 400, counted under no route.
    let bad = raw_exchange(gw, b"GET /x HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n").await;
    assert!(
        bad.starts_with(b"HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&bad)
    );
    // A stream route session.
    let stream: SocketAddr = format!("127.0.0.1:{stream_port}").parse().unwrap();
    let via_stream = raw_exchange(
        stream,
        b"GET /from-stream HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(via_stream.starts_with(b"HTTP/1.1 200"));

    // The stream session is counted when it ends, on the worker's side: wait for it.
    let deadline = Instant::now() + Duration::from_secs(5);
    let m = loop {
        let m = n.metrics().await;
        if m.get(r#"sluice_stream_sessions_total{route="tcp1",protocol="tcp"}"#) >= 1.0
            || Instant::now() > deadline
        {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let req = |route: &str, method: &str, status: &str| {
        m.get(&format!(
            r#"sluice_http_requests_total{{route="{route}",method="{method}",status="{status}"}}"#
        ))
    };
    assert_eq!(req("ok", "GET", "2xx"), 4.0, "{}", m.1);
    assert_eq!(req("ok", "POST", "2xx"), 1.0, "{}", m.1);
    assert_eq!(req("", "GET", "4xx"), 3.0, "404, 404 and the 400: {}", m.1);
    assert_eq!(req("lc", "GET", "4xx"), 1.0);
    assert_eq!(req("limited", "GET", "2xx"), 1.0);
    assert_eq!(req("limited", "GET", "4xx"), 1.0);
    assert_eq!(req("rpc", "POST", "2xx"), 1.0, "{}", m.1);
    let total: f64 = m
        .with_prefix("sluice_http_requests_total{")
        .iter()
        .map(|(_, v)| **v)
        .sum();
    assert_eq!(total, 12.0, "{}", m.1);
    let proto = |p: &str| {
        m.get(&format!(
            r#"sluice_http_requests_by_protocol_total{{protocol="{p}"}}"#
        ))
    };
    assert_eq!(
        (proto("http1"), proto("http2"), proto("grpc")),
        (9.0, 2.0, 1.0)
    );
    assert_eq!(
        m.get(r#"sluice_plugin_rejections_total{plugin="key-auth",status="401"}"#),
        1.0
    );
    assert_eq!(
        m.get(r#"sluice_plugin_rejections_total{plugin="limit-count",status="429"}"#),
        1.0
    );
    assert_eq!(
        m.get(r#"sluice_http_request_duration_seconds_count{route="ok"}"#),
        5.0
    );
    assert_eq!(
        m.get(r#"sluice_http_request_duration_seconds_bucket{route="ok",le="+Inf"}"#),
        5.0
    );
    // Bodies: the 401's own JSON answer and the POST's 12 bytes are counted.
    assert_eq!(
        m.get(r#"sluice_http_response_body_bytes_total{route="lc"}"#),
        unauth.body.len() as f64
    );
    assert_eq!(
        m.get(r#"sluice_http_request_body_bytes_total{route="ok"}"#),
        12.0
    );
    assert_eq!(
        m.get(r#"sluice_upstream_responses_total{upstream="web",status="2xx"}"#),
        6.0,
        "3 + 1 limited + 2 over HTTP/2: {}",
        m.1
    );
    // Plugins' own answers (401, 429) are not the upstream's: no "none" answers.
    assert_eq!(
        m.get(r#"sluice_upstream_responses_total{upstream="web",status="none"}"#),
        0.0
    );
    assert_eq!(m.get(r#"sluice_http_requests_inflight"#), 0.0);
    assert_eq!(
        m.get(&format!(
            r#"sluice_upstream_node_healthy{{upstream="web",node="{0}",address="{0}"}}"#,
            origin.node()
        )),
        1.0
    );
    assert_eq!(
        m.get(r#"sluice_stream_sessions_total{route="tcp1",protocol="tcp"}"#),
        1.0
    );
    assert_eq!(
        m.get(r#"sluice_stream_sessions_active{route="tcp1",protocol="tcp"}"#),
        0.0
    );
    assert!(
        m.get(r#"sluice_stream_bytes_total{route="tcp1",protocol="tcp",direction="in"}"#) >= 40.0
    );
    assert!(
        m.get(r#"sluice_stream_bytes_total{route="tcp1",protocol="tcp",direction="out"}"#) > 0.0
    );
    let build = m.with_prefix(r#"sluice_build_info{version="0.1.0",commit=""#);
    assert_eq!(build.len(), 1, "{}", m.1);
    assert!(build[0].0.contains(",built=\"20"), "{}", m.1);

    // promtool (Debian's prometheus package) accepts the exposition.
    let text = n.status().get("/metrics").await.text();
    let mut check = tokio::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool runs (test.sh installs Debian's prometheus package)");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .await
        .unwrap();
    let out = check.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_prometheus_server_scrapes_the_status_listener_and_answers_a_query() {
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let n = Node::start(&format!(
        "listen: 127.0.0.1:0\nworkers: 2\nadmin: {{enabled: false}}\nstatus: {{listen: 127.0.0.1:0}}\nroutes:\n  - {{id: api, uri: /api/*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        origin.node()
    ));
    for _ in 0..7 {
        assert_eq!(n.proxy().get("/api/x").await.status, 200);
    }
    let web = free_port();
    let cfg = n.dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: sluice\n    static_configs: [{{targets: ['{}']}}]\n",
            n.node().status_addr().unwrap()
        ),
    )
    .unwrap();
    let mut prom = tokio::process::Command::new("prometheus")
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            n.dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{web}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("prometheus runs (test.sh installs Debian's prometheus package)");
    let url = format!(
        "http://127.0.0.1:{web}/api/v1/query?query=sum(sluice_http_requests_total%7Broute%3D%22api%22%7D)"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        let out = tokio::process::Command::new("curl")
            .args(["-sS", "--max-time", "2", &url])
            .output()
            .await
            .unwrap();
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            && let Some(value) = v["data"]["result"][0]["value"][1].as_str()
        {
            break value.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "prometheus never answered the query"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(answer, "7");
    let _ = prom.kill().await;
}

#[tokio::test]
async fn label_values_beyond_the_cap_fold_into_other_and_are_counted() {
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let mut yaml = format!(
        "listen: 127.0.0.1:0\nworkers: 2\nadmin: {{enabled: false}}\nstatus: {{listen: 127.0.0.1:0}}\nmetrics: {{max_label_values: 100}}\nlimits: {{keepalive_requests: 100000}}\nupstreams:\n  - {{id: u, nodes: {{\"{}\": 1}}}}\nroutes:\n",
        origin.node()
    );
    for i in 0..10_000 {
        yaml.push_str(&format!("  - {{id: r{i}, uri: /r{i}, upstream_id: u}}\n"));
    }
    let n = Node::start(&yaml);
    // Over a few keep-alive connections, every route once.
    let mut tasks = Vec::new();
    for part in 0..4 {
        let p = n.proxy();
        tasks.push(tokio::spawn(async move {
            let mut c = p.connection().await;
            for i in (part..10_000).step_by(4) {
                assert_eq!(c.get(&format!("/r{i}")).await.unwrap().status, 200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let m = n.metrics().await;
    let series = m.with_prefix("sluice_http_requests_total{");
    assert!(series.len() <= 101, "{} series", series.len());
    let total: f64 = series.iter().map(|(_, v)| **v).sum();
    assert_eq!(total, 10_000.0);
    assert_eq!(
        m.get(r#"sluice_http_requests_total{route="other",method="GET",status="2xx"}"#),
        9_900.0
    );
    assert_eq!(
        m.get(r#"sluice_metrics_label_overflow_total{label="route"}"#),
        9_900.0
    );
}

/// A CORS preflight answered by the plugin is an answer, not a refusal: it was counted as a
/// plugin rejection with status 200.
#[tokio::test]
async fn a_plugin_answer_that_is_not_a_refusal_is_not_counted_as_one() {
    let n = Node::start(
        "listen: 127.0.0.1:0\nworkers: 1\nadmin: {enabled: false}\nstatus: {listen: 127.0.0.1:0}\nroutes:\n  - {id: c, uri: /c, upstream: {nodes: {\"127.0.0.1:1\": 1}}, plugins: {cors: {allow_origins: \"https://a.example\"}, key-auth: {}}}\nconsumers:\n  - {username: u, plugins: {key-auth: {key: k}}}\n",
    );
    let preflight = n
        .proxy()
        .send(
            hyper::Method::OPTIONS,
            "/c",
            &[
                ("origin", "https://a.example"),
                ("access-control-request-method", "GET"),
            ],
            "",
        )
        .await;
    assert_eq!(preflight.status, 200);
    assert_eq!(n.proxy().get("/c").await.status, 401);
    let m = n.metrics().await;
    assert_eq!(
        m.with_prefix("sluice_plugin_rejections_total{").len(),
        1,
        "{}",
        m.1
    );
    assert_eq!(
        m.get(r#"sluice_plugin_rejections_total{plugin="key-auth",status="401"}"#),
        1.0
    );
}

#[tokio::test]
async fn the_prometheus_plugin_chooses_which_routes_get_a_label() {
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let o = origin.node();
    // `metrics.routes: plugin`: as APISIX, only routes with the plugin (here through a
    // global rule for one and on the route for another) are labelled.
    let n = Node::start(&format!(
        r#"listen: 127.0.0.1:0
workers: 1
admin: {{enabled: false}}
status: {{listen: 127.0.0.1:0}}
metrics: {{routes: plugin}}
upstreams: [{{id: u, nodes: {{"{o}": 1}}}}]
routes:
  - {{id: "1", name: with-name, uri: /a, upstream_id: u, plugins: {{prometheus: {{prefer_name: true}}}}}}
  - {{id: "2", uri: /b, upstream_id: u}}
"#
    ));
    n.proxy().get("/a").await;
    n.proxy().get("/b").await;
    let m = n.metrics().await;
    assert_eq!(
        (m.gets_ok("with-name"), m.gets_ok("other"), m.gets_ok("2")),
        (1.0, 1.0, 0.0),
        "{}",
        m.1
    );
    drop(n);
    // The default (`all`): every route, unless it opts out with `_meta.disable`; a global
    // rule with the plugin loads (APISIX files have one) and changes nothing.
    let n = Node::start(&format!(
        r#"listen: 127.0.0.1:0
workers: 1
admin: {{enabled: false}}
status: {{listen: 127.0.0.1:0}}
global_rules: [{{id: g, plugins: {{prometheus: {{}}}}}}]
upstreams: [{{id: u, nodes: {{"{o}": 1}}}}]
routes:
  - {{id: a, uri: /a, upstream_id: u, plugins: {{prometheus: {{_meta: {{disable: true}}}}}}}}
  - {{id: b, uri: /b, upstream_id: u}}
"#
    ));
    n.proxy().get("/a").await;
    n.proxy().get("/b").await;
    let m = n.metrics().await;
    assert_eq!(
        (m.gets_ok("a"), m.gets_ok("other"), m.gets_ok("b")),
        (0.0, 1.0, 1.0),
        "{}",
        m.1
    );
}

#[tokio::test]
async fn open_and_idle_connections_are_gauged_per_listener_and_protocol() {
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let n = Node::start(&format!(
        "listen: [127.0.0.1:0, {{addr: 127.0.0.1:0, http2: true}}]\nworkers: 2\nadmin: {{enabled: false}}\nstatus: {{listen: 127.0.0.1:0}}\nroutes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        origin.node()
    ));
    let l0 = n.node().server().local_addrs()[0];
    let gauge = |m: &Samples, proto: &str, state: &str| {
        m.get(&format!(
            r#"sluice_connections{{listener="{l0}",protocol="{proto}",state="{state}"}}"#
        ))
    };
    let settled = |want: (f64, f64)| {
        let n = &n;
        async move {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let m = n.metrics().await;
                let got = (gauge(&m, "http1", "active"), gauge(&m, "http1", "idle"));
                if got == want {
                    return;
                }
                assert!(Instant::now() < deadline, "{got:?}, want {want:?}: {}", m.1);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    // Two keep-alive connections waiting for their next request: idle.
    let p = Client::new(l0);
    let (mut a, mut b) = (p.connection().await, p.connection().await);
    assert_eq!(a.get("/x").await.unwrap().status, 200);
    assert_eq!(b.get("/x").await.unwrap().status, 200);
    settled((0.0, 2.0)).await;
    // One of them in the middle of a request: active.
    let mut raw = tokio::net::TcpStream::connect(l0).await.unwrap();
    raw.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n")
        .await
        .unwrap();
    settled((1.0, 2.0)).await;
    drop((a, b, raw));
    settled((0.0, 0.0)).await;
}

#[tokio::test]
async fn openmetrics_is_served_when_asked() {
    let n = Node::start(
        "listen: 127.0.0.1:0\nworkers: 1\nadmin: {enabled: false}\nstatus: {listen: 127.0.0.1:0}\n",
    );
    n.proxy().get("/nothing").await;
    // A request is counted as it ends, once its answer is on its way: a scrape sent as soon as
    // the answer came can be first (CI, with other tests running). Scraped until it shows.
    let counted = "sluice_http_requests_total{route=\"\",method=\"GET\",status=\"4xx\"} 1\n";
    let deadline = Instant::now() + Duration::from_secs(5);
    let r = loop {
        let r = n
            .status()
            .send(
                Method::GET,
                "/metrics",
                &[("accept", "application/openmetrics-text; version=1.0.0")],
                "",
            )
            .await;
        if r.text().contains(counted) || Instant::now() >= deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let text = r.text();
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains("# TYPE sluice_http_requests counter\n"),
        "{text}"
    );
    assert!(text.contains(counted), "{text}");
    let plain = n.status().get("/metrics").await;
    assert!(
        plain
            .header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    assert!(!plain.text().contains("# EOF"));
}

#[tokio::test]
async fn off_loopback_the_status_listener_needs_its_key_and_probes_do_not() {
    // Refused without a key or an allow list.
    let dir = std::env::temp_dir().join(format!("sluice-obs-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.yaml");
    std::fs::write(
        &file,
        "listen: 127.0.0.1:0\nadmin: {enabled: false}\nstatus: {listen: 0.0.0.0:0}\n",
    )
    .unwrap();
    let e = sluice::Node::start(sluice::Source::File(file), |_| {}).unwrap_err();
    let text = e
        .downcast_ref::<sluice::ConfigRejected>()
        .unwrap()
        .errors
        .to_string();
    assert!(
        text.contains("status.listen: 0.0.0.0:0 is not a loopback address"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    let key = "status-key-0123456789";
    let n = Node::start(&format!(
        "listen: 127.0.0.1:0\nworkers: 1\nadmin: {{enabled: false}}\nstatus: {{listen: 0.0.0.0:0, key: {key}}}\n"
    ));
    let port = n.node().status_addr().unwrap().port();
    let s = Client::new(format!("127.0.0.1:{port}").parse().unwrap());
    assert_eq!(s.get("/metrics").await.status, 401);
    // The page is static and asks for the key itself; what it shows needs the key.
    assert_eq!(s.get("/dashboard/").await.status, 200);
    let bearer = format!("Bearer {key}");
    let ok = s
        .send(Method::GET, "/metrics", &[("authorization", &bearer)], "")
        .await;
    assert_eq!(ok.status, 200);
    assert!(ok.text().contains("sluice_build_info"));
    assert_eq!(
        s.send(Method::GET, "/metrics", &[("x-api-key", key)], "")
            .await
            .status,
        200
    );
    assert_eq!(s.get("/healthz").await.status, 200);
    assert_eq!(s.get("/readyz").await.status, 200);
    // Writes are not for this listener.
    let post = s
        .send(Method::POST, "/metrics", &[("authorization", &bearer)], "")
        .await;
    assert_eq!(post.status, 405);
    // An allow list lets its addresses in without the key.
    let n2 = Node::start(
        "listen: 127.0.0.1:0\nworkers: 1\nadmin: {enabled: false}\nstatus: {listen: 0.0.0.0:0, allow: [127.0.0.0/8]}\n",
    );
    let port = n2.node().status_addr().unwrap().port();
    let s2 = Client::new(format!("127.0.0.1:{port}").parse().unwrap());
    assert_eq!(s2.get("/metrics").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_says_draining_while_requests_in_flight_finish() {
    // The built-in origin's /delay/1500 answers after 1.5 s.
    let o = free_port();
    let mut n = Node::start(&format!(
        "listen: 127.0.0.1:0\nworkers: 1\nadmin: {{enabled: false}}\nstatus: {{listen: 127.0.0.1:0}}\norigin: {{listen: 127.0.0.1:{o}}}\nroutes:\n  - {{uri: /delay/*, upstream: {{nodes: {{\"127.0.0.1:{o}\": 1}}}}}}\n"
    ));
    let status = n.status();
    assert_eq!(status.get("/readyz").await.text(), "ready\n");
    let p = n.proxy();
    let slow = tokio::spawn(async move { p.get("/delay/1500").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let node = n.node.take().unwrap();
    let stopping = std::thread::spawn(move || node.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = status.get("/readyz").await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (503, "draining\n"));
    assert_eq!(status.get("/healthz").await.status, 200);
    let answered = slow.await.unwrap();
    assert_eq!(answered.status, 200);
    stopping.join().unwrap();
}

#[tokio::test]
async fn the_access_log_writes_every_variable() {
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let vars = sluice_config::log_format::VARIABLES
        .iter()
        .map(|v| format!("{v}=${v}"))
        .collect::<Vec<_>>()
        .join("|");
    let n = Node::start(&format!(
        r#"listen: 127.0.0.1:0
workers: 1
admin: {{enabled: false}}
log:
  access: {{path: $DIR/access.log, format: '{vars}|ua=$http_user_agent|x=$http_x_thing|rid2=$request_id'}}
services:
  - {{id: s1, name: shop, plugins: {{}}}}
routes:
  - {{id: r1, name: checkout, uri: /p, service_id: s1, upstream: {{nodes: {{"{}": 1}}}}, plugins: {{key-auth: {{}}}}}}
consumer_groups:
  - {{id: staff}}
consumers:
  - {{username: carol, group_id: staff, plugins: {{key-auth: {{key: carol-key}}}}}}
"#,
        origin.node()
    ));
    let r = n
        .proxy()
        .send(
            Method::GET,
            "/p?q=1",
            &[
                ("apikey", "carol-key"),
                ("user-agent", "tester/1"),
                ("x-thing", "a b"),
            ],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    let line = wait_for_lines(&n.dir.join("access.log"), 1).await.remove(0);
    let fields: HashMap<&str, &str> = line
        .split('|')
        .map(|kv| kv.split_once('=').unwrap())
        .collect();
    let gw = n.node().server().local_addrs()[0];
    assert_eq!(fields["remote_addr"], "127.0.0.1");
    assert!(fields["remote_port"].parse::<u16>().unwrap() > 0);
    assert_eq!(fields["server_addr"], "127.0.0.1");
    assert_eq!(fields["server_port"], gw.port().to_string());
    assert!(fields["time_local"].ends_with(" +0000"), "{line}");
    assert!(fields["time_iso8601"].ends_with('Z'));
    assert!(fields["msec"].contains('.'));
    assert_eq!(fields["request"], "GET /p?q=1 HTTP/1.1");
    assert_eq!(fields["request_method"], "GET");
    assert_eq!(fields["request_uri"], "/p?q=1");
    assert_eq!(fields["uri"], "/p");
    assert_eq!(fields["args"], "q=1");
    assert_eq!(fields["server_protocol"], "HTTP/1.1");
    assert_eq!(fields["scheme"], "http");
    assert_eq!(fields["status"], "200");
    assert_eq!(fields["body_bytes_sent"], "5");
    assert_eq!(fields["request_body_length"], "0");
    assert!(fields["request_time"].parse::<f64>().unwrap() >= 0.0);
    assert_eq!(fields["upstream_addr"], origin.node());
    assert_eq!(fields["upstream_status"], "200");
    assert!(fields["upstream_response_time"].parse::<f64>().unwrap() >= 0.0);
    assert_eq!(fields["host"], gw.to_string());
    assert_eq!(fields["route_id"], "r1");
    assert_eq!(fields["consumer_name"], "carol");
    assert_eq!(fields["service_id"], "s1");
    assert_eq!(fields["consumer_group_id"], "staff");
    assert_eq!(fields["route_name"], "checkout");
    assert_eq!(fields["service_name"], "shop");
    let rid = fields["request_id"];
    assert!(
        rid.len() == 32 && rid.bytes().all(|b| b.is_ascii_hexdigit()),
        "{line}"
    );
    assert_eq!(fields["rid2"], rid, "one request_id per request");
    assert_eq!(fields["trace_id"], "-");
    assert_eq!(fields["ssl_client_s_dn"], "-");
    assert_eq!(fields["ua"], "tester/1");
    assert_eq!(fields["x"], "a\\x20b", "spaces escaped as NGINX does");
}

/// `request_id` is one value per request wherever it is read (a header a plugin sets, the log
/// line), and a claim of the token jwt-auth kept (`store_in_ctx`) is `jwt_claim_<name>` in
/// later plugins and the log; without `store_in_ctx` there is no claim.
#[tokio::test]
async fn request_id_and_jwt_claims_are_variables_in_plugins_and_the_log() {
    use jsonwebtoken::{EncodingKey, Header, encode};
    let origin = TestOrigin::http1().run().await;
    let n = Node::start(&format!(
        r#"listen: 127.0.0.1:0
workers: 1
admin: {{enabled: false}}
log:
  access: {{path: $DIR/access.log, format: '$route_name $request_id $jwt_claim_sub $jwt_claim_roles'}}
routes:
  - id: kept
    name: kept-route
    uri: /kept
    upstream: {{nodes: {{"{o}": 1}}}}
    plugins:
      jwt-auth: {{store_in_ctx: true}}
      proxy-rewrite: {{headers: {{set: {{X-Rid: $request_id, X-Sub: $jwt_claim_sub, X-Route: $route_name}}}}}}
  - id: plain
    uri: /plain
    upstream: {{nodes: {{"{o}": 1}}}}
    plugins:
      jwt-auth: {{}}
      proxy-rewrite: {{headers: {{set: {{X-Sub: $jwt_claim_sub}}}}}}
consumers:
  - {{username: dana, plugins: {{jwt-auth: {{key: dana-key, secret: s3cret}}}}}}
"#,
        o = origin.node()
    ));
    let token = encode(
        &Header::default(),
        &serde_json::json!({"key": "dana-key", "sub": "dana@example.com", "roles": ["a", "b"],
            "exp": jsonwebtoken::get_current_timestamp() + 60}),
        &EncodingKey::from_secret(b"s3cret"),
    )
    .unwrap();
    let auth = format!("Bearer {token}");
    let r = n
        .proxy()
        .send(Method::GET, "/kept", &[("authorization", &auth)], "")
        .await;
    assert_eq!(r.status, 200);
    let seen = origin.last();
    let rid = seen.header("x-rid").unwrap().to_owned();
    assert!(
        rid.len() == 32 && rid.bytes().all(|b| b.is_ascii_hexdigit()),
        "{rid}"
    );
    assert_eq!(seen.header("x-sub"), Some("dana@example.com"));
    assert_eq!(seen.header("x-route"), Some("kept-route"));
    let r = n
        .proxy()
        .send(Method::GET, "/plain", &[("authorization", &auth)], "")
        .await;
    assert_eq!(r.status, 200);
    // Absent variables are empty in a template, as in APISIX.
    assert_eq!(
        origin.last().header("x-sub"),
        Some(""),
        "no store_in_ctx: no claims"
    );
    let lines = wait_for_lines(&n.dir.join("access.log"), 2).await;
    assert_eq!(
        lines[0],
        format!("kept-route {rid} dana@example.com [\\x22a\\x22,\\x22b\\x22]")
    );
    let plain: Vec<&str> = lines[1].split(' ').collect();
    assert_eq!(plain[0], "-", "a route without a name");
    assert!(plain[1].len() == 32 && plain[1] != rid, "{}", lines[1]);
    assert_eq!(&plain[2..], ["-", "-"]);
}

/// Waits for `n` lines in `path` (the log is flushed once a second).
async fn wait_for_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{} lines of {n} in {}",
            lines.len(),
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn json_lines_survive_hostile_values_and_refused_requests_are_logged() {
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let n = Node::start(&format!(
        r#"listen: 127.0.0.1:0
workers: 1
admin: {{enabled: false}}
log:
  access: {{path: $DIR/access.log, format: json, fields: [request, status, body_bytes_sent, http_x_evil, route_id, upstream_status]}}
routes:
  - {{id: r1, uri: /p, upstream: {{nodes: {{"{}": 1}}}}}}
  - {{id: locked, uri: /lc, upstream: {{nodes: {{"{}": 1}}}}, plugins: {{key-auth: {{}}}}}}
"#,
        origin.node(),
        origin.node()
    ));
    let gw = n.node().server().local_addrs()[0];
    // Quotes, a backslash, a tab, a control byte's neighbour and bytes that are not UTF-8.
    let evil: &[u8] = b"a\"b\\c\td\xff\xfe end \xc3\xa9";
    let mut req = b"GET /p HTTP/1.1\r\nHost: h\r\nConnection: close\r\nX-Evil: ".to_vec();
    req.extend_from_slice(evil);
    req.extend_from_slice(b"\r\n\r\n");
    let answer = raw_exchange(gw, &req).await;
    assert!(answer.starts_with(b"HTTP/1.1 200"));
    // The gateway's own answer: its body bytes, not 0.
    let locked = n.proxy().get("/lc").await;
    assert_eq!(locked.status, 401);
    // Refused while parsing: a 400 with its request line.
    let bad = raw_exchange(
        gw,
        b"GET /bad\"line HTTP/1.1\r\nHost: a\r\nNo colon here\r\n\r\n",
    )
    .await;
    assert!(bad.starts_with(b"HTTP/1.1 400"));
    let lines = wait_for_lines(&n.dir.join("access.log"), 3).await;
    let v: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(v[0]["request"], "GET /p HTTP/1.1");
    assert_eq!(v[0]["status"], 200);
    assert_eq!(v[0]["http_x_evil"], "a\"b\\c\td\u{fffd}\u{fffd} end é");
    assert_eq!(v[0]["upstream_status"], 200);
    assert_eq!(v[1]["status"], 401);
    assert_eq!(v[1]["body_bytes_sent"], locked.body.len());
    assert_eq!(v[1]["upstream_status"], serde_json::Value::Null);
    assert_eq!(v[2]["status"], 400);
    assert_eq!(v[2]["request"], "GET /bad\"line HTTP/1.1");
    assert_eq!(v[2]["route_id"], serde_json::Value::Null);
    assert!(v[2]["body_bytes_sent"].as_u64().unwrap() > 0);
}

/// A test OTLP/HTTP receiver: decodes each export with the official OpenTelemetry protobuf
/// types and keeps the spans.
async fn otlp_receiver() -> (
    SocketAddr,
    std::sync::Arc<parking_lot::Mutex<Vec<opentelemetry_proto::tonic::trace::v1::Span>>>,
) {
    use http_body_util::BodyExt;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    let spans = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let kept = spans.clone();
    tokio::spawn(async move {
        loop {
            let Ok((io, _)) = l.accept().await else {
                return;
            };
            let kept = kept.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let kept = kept.clone();
                        async move {
                            assert_eq!(req.uri().path(), "/v1/traces");
                            assert_eq!(req.headers()["content-type"], "application/x-protobuf");
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let export = ExportTraceServiceRequest::decode(body).unwrap();
                            for rs in export.resource_spans {
                                let service = rs
                                    .resource
                                    .unwrap()
                                    .attributes
                                    .into_iter()
                                    .find(|a| a.key == "service.name");
                                assert!(service.is_some());
                                for ss in rs.scope_spans {
                                    kept.lock().extend(ss.spans);
                                }
                            }
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                http_body_util::Full::new(bytes::Bytes::new()),
                            ))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(io), svc)
                    .await;
            });
        }
    });
    (addr, spans)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_otlp_receiver_with_the_trace_continued_and_forwarded() {
    let (collector, spans) = otlp_receiver().await;
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let n = Node::start(&format!(
        r#"listen: 127.0.0.1:0
workers: 2
admin: {{enabled: false}}
plugin_attr:
  opentelemetry:
    collector: {{address: "{collector}"}}
    batch_span_processor: {{batch_timeout: 0.2}}
log:
  access: {{path: $DIR/access.log, format: '$trace_id $status', flush: 50ms}}
routes:
  - id: traced
    uri: /t
    upstream: {{nodes: {{"{o}": 1}}}}
    plugins:
      opentelemetry: {{sampler: {{name: always_on}}, additional_attributes: [http_x_user, arg_q]}}
  - id: parent
    uri: /p
    upstream: {{nodes: {{"{o}": 1}}}}
    plugins:
      opentelemetry: {{sampler: {{name: parent_base}}}}
"#,
        o = origin.node()
    ));
    let p = n.proxy();
    // Continued from the client's traceparent.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let r = p
        .send(
            Method::GET,
            "/t?q=7",
            &[
                ("traceparent", &format!("00-{trace}-{parent}-01")),
                ("tracestate", "vendor=x"),
                ("x-user", "dana"),
            ],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    let seen = origin.last();
    let forwarded = seen.header("traceparent").unwrap().to_owned();
    assert!(
        forwarded.starts_with(&format!("00-{trace}-")),
        "{forwarded}"
    );
    assert!(forwarded.ends_with("-01"));
    assert_eq!(seen.header("tracestate"), Some("vendor=x"));
    let our_span = forwarded.split('-').nth(2).unwrap().to_owned();
    assert_ne!(our_span, parent);
    // Started here: no traceparent from the client.
    assert_eq!(p.get("/t").await.status, 200);
    let started = origin.last().header("traceparent").unwrap().to_owned();
    // parent_base without a parent: the root sampler (always_off) says no; the context is
    // still forwarded, unsampled.
    assert_eq!(p.get("/p").await.status, 200);
    let unsampled = origin.last().header("traceparent").unwrap().to_owned();
    assert!(unsampled.ends_with("-00"), "{unsampled}");
    // parent_base with a sampled parent: sampled.
    let r = p
        .send(
            Method::GET,
            "/p",
            &[("traceparent", &format!("00-{trace}-{parent}-01"))],
            "",
        )
        .await;
    assert_eq!(r.status, 200);

    let deadline = Instant::now() + Duration::from_secs(10);
    while spans.lock().len() < 3 {
        assert!(
            Instant::now() < deadline,
            "{} spans arrived",
            spans.lock().len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = spans.lock().clone();
    assert_eq!(got.len(), 3, "the unsampled request made no span");
    let continued = got.iter().find(|s| hex(&s.span_id) == our_span).unwrap();
    assert_eq!(hex(&continued.trace_id), trace);
    assert_eq!(hex(&continued.parent_span_id), parent);
    assert_eq!(continued.kind, 2, "SERVER");
    assert_eq!(continued.name, "GET traced");
    assert!(continued.end_time_unix_nano >= continued.start_time_unix_nano);
    let attr = |s: &opentelemetry_proto::tonic::trace::v1::Span, k: &str| {
        s.attributes
            .iter()
            .find(|a| a.key == k)
            .and_then(|a| a.value.clone())
            .and_then(|v| v.value)
            .map(|v| format!("{v:?}"))
            .unwrap_or_default()
    };
    assert!(attr(continued, "http.status_code").contains("200"));
    assert!(attr(continued, "http_x_user").contains("dana"));
    assert!(attr(continued, "arg_q").contains('7'));
    assert!(attr(continued, "http.method").contains("GET"));
    let fresh = got
        .iter()
        .find(|s| started.contains(&hex(&s.span_id)))
        .unwrap();
    assert!(fresh.parent_span_id.is_empty());
    assert!(started.contains(&hex(&fresh.trace_id)));
    // The access log has each request's trace id.
    // (Two workers: lines come in whole buffers, not in request order.)
    let lines = wait_for_lines(&n.dir.join("access.log"), 4).await;
    assert!(lines.contains(&format!("{trace} 200")), "{lines:?}");
    assert!(
        lines.contains(&format!("{} 200", hex(&fresh.trace_id))),
        "{lines:?}"
    );
    let m = n.metrics_text_without_status();
    assert!(
        m.contains("sluice_otel_spans_total{result=\"exported\"}"),
        "{m}"
    );
}

/// APISIX 3.x keeps OpenTelemetry's collector in the plugin's metadata: there it wins over
/// `plugin_attr` (which names an address nothing listens on here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collector_of_the_plugin_metadata_receives_the_spans() {
    let (collector, spans) = otlp_receiver().await;
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let n = Node::start(&format!(
        r#"listen: 127.0.0.1:0
workers: 1
admin: {{enabled: false}}
plugin_attr:
  opentelemetry:
    collector: {{address: "127.0.0.1:{dead}"}}
plugin_metadata:
  - id: opentelemetry
    resource: {{service.name: APISIX}}
    collector: {{address: "{collector}", request_timeout: 3}}
    batch_span_processor: {{batch_timeout: 0.2}}
routes:
  - {{id: traced, uri: /t, upstream: {{nodes: {{"{o}": 1}}}}, plugins: {{opentelemetry: {{sampler: {{name: always_on}}}}}}}}
"#,
        dead = free_port(),
        o = origin.node()
    ));
    assert_eq!(n.proxy().get("/t").await.status, 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    while spans.lock().is_empty() {
        assert!(
            Instant::now() < deadline,
            "no span reached the metadata's collector"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(spans.lock()[0].name, "GET traced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websockets_span_ends_when_its_tunnel_closes() {
    // APISIX runs the log phase of an upgraded request when its connection closes: the span
    // covers the tunnel's life, not only the upgrade. (The tunnel runs after the request's
    // future is given back; the plugins' context is kept for it.)
    use futures_util::{SinkExt, StreamExt};
    let (collector, spans) = otlp_receiver().await;
    let echo = common::ws_echo().await;
    let n = Node::start(&format!(
        r#"listen: 127.0.0.1:0
workers: 1
admin: {{enabled: false}}
plugin_attr:
  opentelemetry:
    collector: {{address: "{collector}", request_timeout: 3}}
    batch_span_processor: {{batch_timeout: 0.2}}
routes:
  - {{id: ws, uri: /ws, enable_websocket: true, upstream: {{nodes: {{"{echo}": 1}}}}, plugins: {{opentelemetry: {{sampler: {{name: always_on}}}}}}}}
"#
    ));
    let addr = n.node().server().local_addrs()[0];
    let io = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/ws"), io)
        .await
        .unwrap();
    let msg = tokio_tungstenite::tungstenite::Message::text("hi");
    ws.send(msg.clone()).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), msg);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(spans.lock().is_empty(), "a span before the tunnel closed");
    ws.close(None).await.unwrap();
    while ws.next().await.is_some() {}
    drop(ws);
    let deadline = Instant::now() + Duration::from_secs(10);
    while spans.lock().is_empty() {
        assert!(Instant::now() < deadline, "no span once the tunnel closed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let span = spans.lock()[0].clone();
    let took = Duration::from_nanos(span.end_time_unix_nano - span.start_time_unix_nano);
    assert!(took >= Duration::from_millis(600), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_collector_stalled_requests_are_unaffected_and_drops_are_counted() {
    use std::sync::atomic::Ordering::Relaxed;
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    // A collector that accepts connections and never answers.
    let stalled = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = stalled.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = stalled.accept().await {
            held.push(s);
        }
    });
    let n = Node::start(&format!(
        r#"listen: 127.0.0.1:0
workers: 1
admin: {{enabled: false}}
plugin_attr:
  opentelemetry:
    collector: {{address: "127.0.0.1:{dead}", request_timeout: 0.5}}
    batch_span_processor: {{max_queue_size: 4, max_export_batch_size: 2, batch_timeout: 0.1}}
routes:
  - {{uri: /t, upstream: {{nodes: {{"{}": 1}}}}, plugins: {{opentelemetry: {{sampler: {{name: always_on}}}}}}}}
"#,
        origin.node()
    ));
    let (dropped0, failed0) = (
        sluice_plugins::opentelemetry::DROPPED.load(Relaxed),
        sluice_plugins::opentelemetry::FAILED.load(Relaxed),
    );
    let mut c = n.proxy().connection().await;
    let started = Instant::now();
    for _ in 0..200 {
        assert_eq!(c.get("/t").await.unwrap().status, 200);
    }
    // 200 requests on one connection: no export stands in their way.
    assert!(started.elapsed() < Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let dropped = sluice_plugins::opentelemetry::DROPPED.load(Relaxed) - dropped0;
        let failed = sluice_plugins::opentelemetry::FAILED.load(Relaxed) - failed0;
        if dropped > 0 && failed > 0 && dropped + failed >= 190 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "dropped {dropped}, failed {failed} of 200"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_session_ended_by_its_idle_timeout_still_counts_its_bytes() {
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let port = free_port();
    let n = Node::start(&format!(
        "listen: 127.0.0.1:0\nworkers: 1\nadmin: {{enabled: false}}\nstatus: {{listen: 127.0.0.1:0}}\nstream_routes:\n  - {{id: idle, listen: \"127.0.0.1:{port}\", idle_timeout: 0.3, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        origin.node()
    ));
    // A keep-alive request through the tunnel, then silence until the idle timeout closes it.
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let req = b"GET /x HTTP/1.1\r\nHost: s\r\n\r\n";
    s.write_all(req).await.unwrap();
    let mut got = vec![0u8; 4096];
    let k = s.read(&mut got).await.unwrap();
    assert!(got[..k].starts_with(b"HTTP/1.1 200"));
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m = n.metrics().await;
        let bytes = |dir: &str| {
            m.get(&format!(
                r#"sluice_stream_bytes_total{{route="idle",protocol="tcp",direction="{dir}"}}"#
            ))
        };
        if bytes("in") > 0.0 {
            assert_eq!(bytes("in"), req.len() as f64);
            assert_eq!(bytes("out"), (k + rest.len()) as f64);
            break;
        }
        assert!(Instant::now() < deadline, "{}", m.1);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_reload_that_moves_the_access_log_keeps_what_was_buffered() {
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let yaml = |file: &str| {
        format!(
            "listen: 127.0.0.1:0\nworkers: 1\nadmin: {{enabled: false}}\nlog:\n  access: {{path: $DIR/{file}, format: '$request_uri', flush: 30s}}\nroutes:\n  - {{uri: /*, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
            origin.node()
        )
    };
    let n = Node::start(&yaml("a.log"));
    assert_eq!(n.proxy().get("/first").await.status, 200);
    // Buffered for 30 s; the reload moves the log to b.log meanwhile.
    std::fs::write(
        n.dir.join("sluice.yaml"),
        yaml("b.log").replace("$DIR", n.dir.to_str().unwrap()),
    )
    .unwrap();
    n.node().reload();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !n.dir.join("b.log").exists() {
        assert!(
            Instant::now() < deadline,
            "the new access log was not opened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        std::fs::read_to_string(n.dir.join("a.log")).unwrap(),
        "/first\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ai_exchange_is_counted_by_model_and_traced_with_the_genai_conventions() {
    let (collector, spans) = otlp_receiver().await;
    let fx = sluice_testkit::LlmFixture::start(None).await;
    let n = Node::start(&format!(
        r#"listen: 127.0.0.1:0
workers: 1
admin: {{enabled: false}}
plugin_attr:
  opentelemetry:
    collector: {{address: "{collector}"}}
    batch_span_processor: {{batch_timeout: 0.2}}
routes:
  - id: chat
    uri: /chat
    plugins:
      opentelemetry: {{sampler: {{name: always_on}}}}
      ai-proxy: {{provider: openai, auth: {{header: {{Authorization: "Bearer k"}}}}, options: {{model: gpt-test}}, override: {{endpoint: "{}"}}}}
"#,
        fx.url()
    ));
    let p = n.proxy();
    let chat = |stream: bool| {
        serde_json::json!({"model": "asked", "stream": stream,
            "messages": [{"role": "user", "content": "hello"}]})
        .to_string()
    };
    let r = p
        .send(
            Method::POST,
            "/chat",
            &[("content-type", "application/json")],
            chat(false),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // A stream dripping slowly is counted as active while it lasts.
    let slow = {
        let p = p.clone();
        let body = chat(true);
        tokio::spawn(async move {
            p.send(
                Method::POST,
                "/chat",
                &[
                    ("content-type", "application/json"),
                    ("x-ai-fixture", "drip:300"),
                ],
                body,
            )
            .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = n.metrics_text_without_status();
        if text.lines().any(|l| l == "sluice_llm_active_streams 1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no active stream counted:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(slow.await.unwrap().status, 200);
    // Counted once the answer is sent: the client may read it a moment before.
    let labels = r#"route="chat",model="gpt-test""#;
    let counted = format!("sluice_llm_requests_total{{{labels},status=\"2xx\"}} 2");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !n
        .metrics_text_without_status()
        .lines()
        .any(|l| l == counted)
    {
        assert!(
            Instant::now() < deadline,
            "{}",
            n.metrics_text_without_status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = n.metrics_text_without_status();
    let sample = |line: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(line))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| panic!("no {line} in\n{text}"))
    };
    assert_eq!(
        sample(&format!(
            "sluice_llm_requests_total{{{labels},status=\"2xx\"}}"
        )),
        "2"
    );
    let p2 = sluice_testkit::PROMPT_TOKENS * 2;
    assert_eq!(
        sample(&format!(
            "sluice_llm_tokens_total{{{labels},kind=\"prompt\"}}"
        )),
        p2.to_string()
    );
    let c2 = sluice_testkit::COMPLETION_TOKENS * 2;
    assert_eq!(
        sample(&format!(
            "sluice_llm_tokens_total{{{labels},kind=\"completion\"}}"
        )),
        c2.to_string()
    );
    assert_eq!(
        sample(&format!(
            "sluice_llm_time_to_first_token_seconds_count{{{labels}}}"
        )),
        "2"
    );
    assert_eq!(sample("sluice_llm_active_streams"), "0");
    // The spans carry GenAI's attributes.
    let deadline = Instant::now() + Duration::from_secs(5);
    while spans.lock().len() < 2 {
        assert!(Instant::now() < deadline, "spans did not arrive");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = spans.lock()[0].clone();
    let attr = |k: &str| {
        s.attributes
            .iter()
            .find(|a| a.key == k)
            .and_then(|a| a.value.clone())
            .and_then(|v| v.value)
            .unwrap_or_else(|| panic!("no {k} in {:?}", s.attributes))
    };
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    assert_eq!(attr("gen_ai.operation.name"), V::StringValue("chat".into()));
    assert_eq!(
        attr("gen_ai.provider.name"),
        V::StringValue("openai".into())
    );
    assert_eq!(attr("gen_ai.request.model"), V::StringValue("asked".into()));
    assert_eq!(
        attr("gen_ai.response.model"),
        V::StringValue("gpt-test".into())
    );
    assert_eq!(
        attr("gen_ai.usage.input_tokens"),
        V::IntValue(sluice_testkit::PROMPT_TOKENS as i64)
    );
    assert_eq!(
        attr("gen_ai.usage.output_tokens"),
        V::IntValue(sluice_testkit::COMPLETION_TOKENS as i64)
    );
}
