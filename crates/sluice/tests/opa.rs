//! APISIX's `opa` through a live gateway and a real Open Policy Agent server (`opa run
//! --server`, built from its Go module by ./test.sh): decisions that allow and deny with
//! their status, headers and reason, the input document the policy sees (APISIX's shape, with
//! the route, service and consumer when asked), and an agent that is missing, stalled or
//! answers without a decision.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::Value;
use sluice_testkit::{Gateway, TestOrigin};

/// The `opa` binary: from test.sh's `go install` (target/tools/opa), or on the PATH.
fn opa_binary() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/opa/opa");
    if built.exists() {
        return built;
    }
    PathBuf::from("opa")
}

const POLICY: &str = r#"
package example

import rego.v1

default allow := false

allow if {
    input.request.headers["x-user"] == "alice"
    input.request.method == "GET"
}

headers := {"x-user-id": "42"} if allow

headers := {
    "x-reason": "not alice",
    "x-trace": ["a", "b"],
    "content-length": "999",
    "transfer-encoding": "chunked",
    "connection": "close",
} if not allow

status_code := 401 if not allow

reason := "only alice may read" if not allow
"#;

/// Denies every request, giving back the input document it was asked about as the reason.
const ECHO: &str = r#"
package echo

import rego.v1

allow := false

reason := input
"#;

/// Denies with no reason, status or headers.
const BARE: &str = r#"
package bare

import rego.v1

allow := false
"#;

struct Agent {
    child: std::process::Child,
    url: String,
    dir: PathBuf,
}

impl Agent {
    fn start() -> Agent {
        let port = common::free_port();
        let dir = std::env::temp_dir().join(format!("sluice-opa-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in [
            ("example.rego", POLICY),
            ("echo.rego", ECHO),
            ("bare.rego", BARE),
        ] {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let child = std::process::Command::new(opa_binary())
            .args(["run", "--server", "--skip-version-check", "--log-level", "error"])
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run opa ({e}): ./test.sh builds it (go install github.com/open-policy-agent/opa into target/tools/opa)")
            });
        common::wait_for_port(port, "opa");
        Agent {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn opa_decides_with_apisixs_input_document() {
    let agent = Agent::start();
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    // Accepts, never answers; and a port that refuses.
    let (stalled_addr, held) = common::stalled_service().await;
    let closed = common::closed_port().await;
    let gw = Gateway::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
services:
  - {{id: svc, name: billing, upstream_id: o, labels: {{team: pay}}}}
routes:
  - {{id: main, uri: /main, upstream_id: o, plugins: {{opa: {{host: "{h}", policy: example, send_headers_upstream: [X-User-ID, x-absent]}}}}}}
  - id: echo
    name: echoed
    uri: /echo/*
    service_id: svc
    plugins:
      key-auth: {{}}
      proxy-rewrite: {{headers: {{set: {{X-Svc: $service_id, X-Group: $consumer_group_id}}}}}}
      opa: {{host: "{h}/", policy: echo, with_route: true, with_service: true, with_consumer: true}}
  - {{id: plain, uri: /plain/*, upstream_id: o, plugins: {{opa: {{host: "{h}", policy: echo}}}}}}
  - {{id: bare, uri: /bare, upstream_id: o, plugins: {{opa: {{host: "{h}", policy: bare}}}}}}
  - {{id: none, uri: /none, upstream_id: o, plugins: {{opa: {{host: "{h}", policy: no/such/package}}}}}}
  - {{id: down, uri: /down, upstream_id: o, plugins: {{opa: {{host: "http://{closed}", policy: example}}}}}}
  - {{id: slow, uri: /slow, upstream_id: o, plugins: {{opa: {{host: "http://{stalled_addr}", policy: example, timeout: 300}}}}}}
  - {{id: free, uri: /free, upstream_id: o}}
consumers:
  - {{username: jack, group_id: staff, labels: {{team: billing}}, plugins: {{key-auth: {{key: jack-key}}}}}}
consumer_groups:
  - {{id: staff}}
"#,
        o = origin.node(),
        h = agent.url,
    ));
    let cl = gw.client();

    // Allowed: the decision's headers set upstream, a listed one it lacks removed.
    let r = cl
        .send(
            Method::GET,
            "/main",
            &[
                ("x-user", "alice"),
                ("x-user-id", "forged"),
                ("x-absent", "forged"),
            ],
            "",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = origin.last();
    assert_eq!(seen.header_all("x-user-id"), vec!["42"]);
    assert!(!seen.has_header("x-absent"));

    // Denied: the decision's status, headers (an array as several fields) and reason.
    let r = cl
        .send(Method::GET, "/main", &[("x-user", "bob")], "")
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.text(), "only alice may read");
    assert_eq!(r.header("x-reason"), Some("not alice"));
    assert_eq!(r.headers.get_all("x-trace").iter().count(), 2);
    // Framing and hop-by-hop fields of a decision are not the answer's.
    assert_eq!(r.header("content-length"), Some("19"));
    assert!(r.header("transfer-encoding").is_none());
    assert!(r.header("connection").is_none());
    let r = cl
        .send(Method::POST, "/main", &[("x-user", "alice")], "x")
        .await;
    assert_eq!(r.status, 401, "the policy reads the method");

    // The input document, given back by the echo policy as its reason.
    let r = cl
        .send(
            Method::GET,
            "/echo/ab?x=1&x=2&flag&e=",
            &[("apikey", "jack-key"), ("x-twice", "1"), ("x-twice", "2")],
            "",
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text());
    let input: Value = serde_json::from_str(&r.text()).unwrap();
    assert_eq!(input["type"], "http");
    let req = &input["request"];
    assert_eq!(req["method"], "GET");
    assert_eq!(req["scheme"], "http");
    assert_eq!(req["host"], "127.0.0.1");
    assert_eq!(req["port"], gw.addr().port());
    assert_eq!(req["path"], "/echo/ab");
    assert_eq!(req["headers"]["x-twice"], serde_json::json!(["1", "2"]));
    assert_eq!(req["headers"]["apikey"], "jack-key");
    // proxy-rewrite (rewrite phase) ran before: the variables of the service and group.
    assert_eq!(req["headers"]["x-svc"], "svc");
    assert_eq!(req["headers"]["x-group"], "staff");
    assert_eq!(
        req["query"],
        serde_json::json!({"x": ["1", "2"], "flag": true, "e": ""})
    );
    let var = &input["var"];
    assert_eq!(var["remote_addr"], "127.0.0.1");
    assert_eq!(var["server_addr"], "127.0.0.1");
    assert_eq!(var["server_port"], gw.addr().port().to_string());
    assert!(var["remote_port"].as_str().unwrap().parse::<u16>().is_ok());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(var["timestamp"].as_u64().unwrap().abs_diff(now) < 60);
    assert_eq!(input["route"]["id"], "echo");
    assert_eq!(input["route"]["name"], "echoed");
    assert_eq!(input["route"]["uri"], "/echo/*");
    assert_eq!(input["route"]["service_id"], "svc");
    assert!(input["route"]["plugins"]["opa"].is_object());
    assert!(input["route"].get("upstream").is_none());
    assert_eq!(input["service"]["id"], "svc");
    assert_eq!(input["service"]["labels"]["team"], "pay");
    assert!(input["service"].get("upstream").is_none());
    assert_eq!(input["consumer"]["username"], "jack");
    assert_eq!(input["consumer"]["group_id"], "staff");
    assert_eq!(input["consumer"]["labels"]["team"], "billing");
    // The consumer's credentials are not sent.
    assert!(input["consumer"].get("plugins").is_none());

    // Without the `with_*` flags, none of them.
    let r = cl.send(Method::GET, "/plain/x", &[], "").await;
    let input: Value = serde_json::from_str(&r.text()).unwrap();
    for absent in ["route", "service", "consumer"] {
        assert!(input.get(absent).is_none(), "{absent} sent");
    }

    // A denial without reason: NGINX's page for the status.
    let r = cl.send(Method::GET, "/bare", &[], "").await;
    assert_eq!(r.status, 403);
    assert!(r.text().contains("403 Forbidden"), "{}", r.text());

    // No such policy: OPA answers `{}`, no decision: 503.
    let r = cl.send(Method::GET, "/none", &[], "").await;
    assert_eq!(r.status, 503);

    // No agent: denied. A stalled one: denied after its timeout, while other routes answer.
    let r = cl
        .send(Method::GET, "/down", &[("x-user", "alice")], "")
        .await;
    assert_eq!(r.status, 403);
    let slow = {
        let cl = cl.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            let r = cl
                .send(Method::GET, "/slow", &[("x-user", "alice")], "")
                .await;
            (r.status, t.elapsed())
        })
    };
    let t = Instant::now();
    for _ in 0..20 {
        assert_eq!(cl.send(Method::GET, "/free", &[], "").await.status, 200);
    }
    assert!(
        t.elapsed() < Duration::from_millis(1000),
        "{:?}",
        t.elapsed()
    );
    let (status, took) = slow.await.unwrap();
    assert_eq!(status, 403);
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    held.abort();
    gw.shutdown();
}

#[test]
fn bad_opa_settings_are_refused_with_their_place() {
    let at = "routes[0].plugins.opa";
    common::assert_refusals(
        "opa",
        &[
            ("{policy: p}", format!("{at}.host: is required")),
            (
                "{host: \"ftp://x\", policy: p}",
                format!("{at}.host: must be an http:// or https:// URI"),
            ),
            (
                "{host: \"http://x\", policy: \"a b\"}",
                format!("{at}.policy: must be a package path"),
            ),
            (
                "{host: \"http://x\", policy: p, timeout: 0}",
                format!("{at}.timeout: "),
            ),
            (
                "{host: \"http://x\", policy: p, send_headers_upstream: []}",
                format!("{at}.send_headers_upstream: must list at least one header"),
            ),
            (
                "{host: \"http://x\", policy: p, keepalive_timeout: 10}",
                format!("{at}.keepalive_timeout: "),
            ),
        ],
    );
}
