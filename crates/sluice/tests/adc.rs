//! APISIX's ADC CLI (third_party/adc, built by test.sh) against Sluice's `/apisix/admin`: a
//! configuration of services with routes and upstreams, consumers with credentials, global
//! rules and plugin metadata is synced; the dump equals it (but for the defaults APISIX
//! stores too); `adc diff` finds nothing; the gateway serves it; a second sync that changes,
//! adds and removes is applied as ADC planned it.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::{Value, json};
use sluice_testkit::{Client, TestOrigin};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
const KEY: &str = "adc-test-key-0123456789";

fn adc_cli() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../third_party/adc/dist/adc.cjs");
    assert!(
        p.exists(),
        "{} is missing: ./test.sh builds ADC (npm ci and node build.mjs in third_party/adc)",
        p.display()
    );
    p
}

struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `adc ARGS --backend apisix --server ... --token ...` in `dir`; its output, or a panic with
/// it.
fn adc(dir: &Path, admin: u16, args: &[&str]) -> String {
    let out = Command::new("node")
        .arg(adc_cli())
        .args(args)
        .args([
            "--backend",
            "apisix",
            "--server",
            &format!("http://127.0.0.1:{admin}"),
            "--token",
            KEY,
        ])
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "adc {args:?} failed:\n{text}");
    text
}

fn yaml(path: &Path) -> Value {
    yaml_serde::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// What APISIX stores beyond what was sent, and Sluice with it: a node's `priority: 0`, an
/// upstream's `pass_host: pass` and `scheme: http`, a plugin metadata's `id`; and what ADC's
/// dump writes for nothing (no ssls, no global rules, a consumer without credentials). Applied to both sides.
fn without_defaults(mut v: Value) -> Value {
    if let Some(services) = v["services"].as_array_mut() {
        for s in services {
            let up = &mut s["upstream"];
            for (k, default) in [("pass_host", "pass"), ("scheme", "http")] {
                if up[k] == default {
                    up.as_object_mut().unwrap().remove(k);
                }
            }
            for n in up["nodes"].as_array_mut().into_iter().flatten() {
                if n["priority"] == 0 {
                    n.as_object_mut().unwrap().remove("priority");
                }
            }
        }
    }
    if let Some(meta) = v["plugin_metadata"].as_object_mut() {
        for (name, m) in meta.iter_mut() {
            if m["id"] == name.as_str() {
                m.as_object_mut().unwrap().remove("id");
            }
        }
    }
    for (k, empty) in [("ssls", json!([])), ("global_rules", json!({}))] {
        if v[k] == empty {
            v.as_object_mut().unwrap().remove(k);
        }
    }
    for c in v["consumers"].as_array_mut().into_iter().flatten() {
        if c["credentials"] == json!([]) {
            c.as_object_mut().unwrap().remove("credentials");
        }
    }
    v
}

const FIRST: &str = r#"services:
  - name: users
    description: the users API
    upstream:
      type: roundrobin
      scheme: http
      nodes:
        - {host: 127.0.0.1, port: ORIGIN_PORT, weight: 100}
    plugins:
      key-auth: {}
    routes:
      - name: users-api
        uris: [/api/users/*]
        methods: [GET, POST]
        plugins:
          limit-count: {count: 100, time_window: 60, rejected_code: 429}
      - name: users-health
        uris: [/health]
  - name: orders
    upstream:
      type: chash
      hash_on: header
      key: x-user
      nodes:
        - {host: 127.0.0.1, port: ORIGIN_PORT, weight: 1}
    routes:
      - name: orders-api
        uris: [/api/orders/*]
        hosts: [shop.example.com]
consumers:
  - username: alice
    labels: {team: payments}
    plugins:
      key-auth: {key: alice-key}
    credentials:
      - name: second
        type: key-auth
        config: {key: alice-second-key}
  - username: bob
    plugins:
      key-auth: {key: bob-key}
global_rules:
  prometheus: {}
plugin_metadata:
  http-logger:
    log_format: {host: "$host", client_ip: "$remote_addr"}
"#;

/// The second sync: a route changed, one added, one removed; a consumer and a credential
/// removed; a global rule removed; plugin metadata changed.
const SECOND: &str = r#"services:
  - name: users
    description: the users API
    upstream:
      type: roundrobin
      scheme: http
      nodes:
        - {host: 127.0.0.1, port: ORIGIN_PORT, weight: 100}
    plugins:
      key-auth: {}
    routes:
      - name: users-api
        uris: [/api/users/*]
        methods: [GET, POST]
        plugins:
          limit-count: {count: 2, time_window: 60, rejected_code: 429}
      - name: users-search
        uris: [/api/search]
  - name: orders
    upstream:
      type: chash
      hash_on: header
      key: x-user
      nodes:
        - {host: 127.0.0.1, port: ORIGIN_PORT, weight: 1}
    routes:
      - name: orders-api
        uris: [/api/orders/*]
        hosts: [shop.example.com]
consumers:
  - username: alice
    labels: {team: payments}
    plugins:
      key-auth: {key: alice-key}
plugin_metadata:
  http-logger:
    log_format: {host: "$host"}
"#;

#[tokio::test]
async fn adc_syncs_dumps_and_diffs_against_the_admin_api() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let port = origin.addr.port().to_string();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("adc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (proxy, admin) = (common::free_port(), common::free_port());
    let status = common::free_port();
    std::fs::write(
        dir.join("sluice.yaml"),
        format!(
            "listen: 127.0.0.1:{proxy}\nadmin: {{listen: \"127.0.0.1:{admin}\", key: \"{KEY}\"}}\nstatus: {{listen: \"127.0.0.1:{status}\"}}\nroutes: []\n"
        ),
    )
    .unwrap();
    let _node = Node(
        Command::new(BIN)
            .args(["run", "-c"])
            .arg(dir.join("sluice.yaml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    common::wait_for_port(admin, "the admin API");
    assert!(adc(&dir, admin, &["ping"]).contains("successfully"));

    for (round, text) in [FIRST, SECOND].iter().enumerate() {
        let file = dir.join(format!("adc-{round}.yaml"));
        std::fs::write(&file, text.replace("ORIGIN_PORT", &port)).unwrap();
        let said = adc(&dir, admin, &["sync", "-f", file.to_str().unwrap()]);
        assert!(!said.contains("failed"), "{said}");
        let dump = dir.join(format!("dump-{round}.yaml"));
        adc(&dir, admin, &["dump", "-o", dump.to_str().unwrap()]);
        let (want, got) = (without_defaults(yaml(&file)), without_defaults(yaml(&dump)));
        assert_eq!(
            canonical(&got),
            canonical(&want),
            "round {round}: the dump is not what was synced:\n{}",
            std::fs::read_to_string(&dump).unwrap()
        );
        adc(&dir, admin, &["diff", "-f", file.to_str().unwrap()]);
        let diff = std::fs::read_to_string(dir.join("diff.yaml")).unwrap();
        assert_eq!(
            diff.trim(),
            "[]",
            "round {round}: adc diff after sync: {diff}"
        );
    }

    // The gateway serves what ADC put: alice's key, the changed limit (2), the removed
    // credential and consumer refused, the added route, the removed one gone.
    let cl = Client::new(format!("127.0.0.1:{proxy}").parse().unwrap());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = cl
            .send(Method::GET, "/api/users/1", &[("apikey", "alice-key")], "")
            .await;
        if r.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the synced route never served: {}",
            r.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = cl
        .send(Method::GET, "/api/users/1", &[("apikey", "alice-key")], "")
        .await;
    assert_eq!(r.status, 200);
    let r = cl
        .send(Method::GET, "/api/users/1", &[("apikey", "alice-key")], "")
        .await;
    assert_eq!(r.status, 429, "limit-count's new count");
    for key in ["alice-second-key", "bob-key"] {
        let r = cl
            .send(Method::GET, "/api/search", &[("apikey", key)], "")
            .await;
        assert_eq!(r.status, 401, "{key} was removed");
    }
    let r = cl
        .send(Method::GET, "/api/search", &[("apikey", "alice-key")], "")
        .await;
    assert_eq!(r.status, 200, "the added route");
    assert_eq!(cl.get("/health").await.status, 404, "the removed route");
}

/// Lists of named things sorted by name, so that order does not count.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), canonical(v))).collect())
        }
        Value::Array(a) => {
            let mut items: Vec<Value> = a.iter().map(canonical).collect();
            if items
                .iter()
                .all(|i| i.get("name").is_some() || i.get("username").is_some())
            {
                items.sort_by_key(|i| {
                    i.get("name")
                        .or_else(|| i.get("username"))
                        .map(Value::to_string)
                        .unwrap_or_default()
                });
            }
            Value::Array(items)
        }
        other => other.clone(),
    }
}
