//! The dashboard in a real browser: Debian's Chromium driven by Playwright (`playwright-core`
//! from npm, installed by test.sh into tests/dashboard/node_modules). The page loads from the
//! status listener, shows the configured routes and the upstream's node, takes the admin key
//! through its form, and shows the node going unhealthy within seconds of it stopping.
//! With `SLUICE_SCREENSHOT=<path>` the test also takes the screenshot shown in the docs.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::KEY;
use sluice_testkit::TestOrigin;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_routes_and_a_node_going_unhealthy_in_chromium() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dashboard");
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "playwright-core is missing: ./test.sh installs it (npm ci in {})",
        dir.display()
    );
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let n = common::TestNode::start_with(
        "status: {listen: 127.0.0.1:0}\n",
        &format!(
            r#"upstreams:
  - id: web
    nodes: {{"{o}": 1}}
    checks:
      active: {{type: tcp, healthy: {{interval: 1, successes: 1}}, unhealthy: {{interval: 1, tcp_failures: 1}}}}
routes:
  - {{id: shop, uri: /shop/*, upstream_id: web}}
  - {{id: api, uri: /api/*, upstream_id: web}}
"#,
            o = origin.node()
        ),
    );
    for _ in 0..3 {
        assert_eq!(n.proxy().get("/shop/a").await.status, 200);
    }
    assert_eq!(n.proxy().get("/nowhere").await.status, 404);
    // Through the status listener, only the admin reads the dashboard makes, with the admin key.
    let st = sluice_testkit::Client::new(n.node().status_addr().unwrap());
    assert_eq!(st.get("/admin/routes").await.status, 401);
    let with_key = [("x-api-key", KEY)];
    let routes = st
        .send(hyper::Method::GET, "/admin/routes", &with_key, "")
        .await;
    assert_eq!(routes.status, 200);
    for other in ["/admin/consumers", "/admin/ssls", "/admin/upstreams"] {
        let r = st.send(hyper::Method::GET, other, &with_key, "").await;
        assert_eq!(r.status, 404, "{other} is the admin listener's only");
    }
    let status = format!("http://{}", n.node().status_addr().unwrap());
    let shot = std::env::var("SLUICE_SCREENSHOT").unwrap_or_default();
    let mut node = Command::new("node")
        .arg(dir.join("dashboard.mjs"))
        .args([&status, KEY, &shot])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node runs (test.sh installs nodejs)");
    let mut out = BufReader::new(node.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    if line.trim() != "READY" {
        let mut err = String::new();
        std::io::Read::read_to_string(node.stderr.as_mut().unwrap(), &mut err).unwrap();
        let _ = node.kill();
        panic!("the page did not get ready: {line}{err}");
    }
    // A file that is refused shows as such until it is put back; then the newest change says
    // the file is accepted again.
    let original = std::fs::read_to_string(&n.file).unwrap();
    let write = |text: &str| {
        let tmp = n.dir.join("edit.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &n.file).unwrap();
    };
    let mut ask = |command: &str| {
        node.stdin
            .as_mut()
            .unwrap()
            .write_all(format!("{command}\n").as_bytes())
            .unwrap();
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), command, "the page did not show {command}");
    };
    write(&format!(
        "{original}  - {{id: bad, uri: /bad/*, upstream_id: nope}}\n"
    ));
    ask("HELD");
    write(&original);
    ask("CLEARED");
    // Traffic while the page watches (live rates and latencies, then the node's failures).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let (p, stop) = (n.proxy(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = p.get("/shop/b").await;
                let _ = p.get("/api/c").await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // The node goes away: the active check takes it out, the page shows it.
    origin.stop();
    node.stdin.as_mut().unwrap().write_all(b"GO\n").unwrap();
    // Read off the runtime: the origin and the traffic run on it meanwhile.
    let (line, done) = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        (line, node.wait_with_output().unwrap())
    })
    .await
    .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    traffic.await.unwrap();
    assert!(
        done.status.success() && line.starts_with("UNHEALTHY"),
        "{line}{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let secs: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(secs < Duration::from_secs(10).as_secs_f64(), "{secs} s");
}
