//! APISIX's documented behaviour, as fixtures: each file of `tests/apisix-fixtures/` is an
//! APISIX configuration (written from APISIX's documentation and tests: the file names its
//! source), the admin calls made after start, and the requests sent through a live node with
//! what each must get (status, answer fields and body, and what the upstream received).
//!
//! ```yaml
//! source: docs/en/latest/plugins/key-auth.md
//! config: {routes: [...], consumers: [...]}          # APISIX's resources, as a file has them
//! admin:                                            # optional: /apisix/admin calls, in order
//!   - {method: PUT, path: /apisix/admin/routes/1, body: {...}, status: 201}
//! requests:
//!   - path: /anything                               # method GET unless given
//!     headers: {apikey: jack-key}
//!     status: 200
//!     response_headers: {X-RateLimit-Limit: "2", X-Gone: null, X-Request-Id: "*"}
//!     body_contains: "..."
//!     upstream: {origin: origin1, path: /anything, headers: {X-Consumer-Username: jack}}
//!     repeat: 1                                     # the same request again, same checks
//! refused: ["routes[0].filter_func: ..."]           # instead of requests: what validate says
//! ```
//!
//! Upstream nodes are `$ORIGIN` and `$ORIGIN2` (two test origins answering their name,
//! `origin1` and `origin2`). Every failure of every fixture is reported, not only the first.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use hyper::Method;
use serde_json::Value;
use sluice_testkit::TestOrigin;

fn substitute(v: &mut Value, o1: &str, o2: &str) {
    match v {
        Value::String(s) if s.contains("$ORIGIN") => {
            *s = s.replace("$ORIGIN2", o2).replace("$ORIGIN", o1);
        }
        Value::Array(a) => a.iter_mut().for_each(|x| substitute(x, o1, o2)),
        Value::Object(m) => {
            // Node maps have origins as keys.
            let keys: Vec<String> = m
                .keys()
                .filter(|k| k.contains("$ORIGIN"))
                .cloned()
                .collect();
            for k in keys {
                let x = m.remove(&k).unwrap();
                m.insert(k.replace("$ORIGIN2", o2).replace("$ORIGIN", o1), x);
            }
            m.values_mut().for_each(|x| substitute(x, o1, o2));
        }
        _ => {}
    }
}

fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// Whether a field's value is what a fixture wants: `null` absent, `"*"` present, else equal.
fn same(got: Option<&str>, want: &Value) -> bool {
    match (got, want) {
        (None, Value::Null) => true,
        (Some(_), Value::String(w)) if w == "*" => true,
        (got, want) => got.map(str::to_owned) == text_of(want),
    }
}

/// Runs one fixture; its failures as lines.
async fn run(path: &Path) -> Vec<String> {
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let text = std::fs::read_to_string(path).unwrap();
    let mut doc =
        sluice_config::parse_text(&text).unwrap_or_else(|e| panic!("{name}: not YAML: {e}"));
    let o1 = TestOrigin::http1().name("origin1").run().await;
    let o2 = TestOrigin::http1().name("origin2").run().await;
    substitute(&mut doc, &o1.node(), &o2.node());
    let mut failures = Vec::new();
    let mut fail = |what: String| failures.push(format!("{name}: {what}"));
    let config = doc["config"].as_object().cloned().unwrap_or_default();
    let resources: String = config.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
    // What `sluice validate` says first: a refusal is reported with its reasons, and the
    // fixture's requests are not sent.
    let (accepted, said) =
        common::sluice_validate(&format!("{}{resources}", common::settings()), &[]);
    // `refused: [...]`: what Sluice does not do must be refused, each at its path with why.
    if let Some(wanted) = doc["refused"].as_array() {
        if accepted {
            fail("sluice validate accepted it; it must be refused".into());
        }
        for w in wanted.iter().filter_map(Value::as_str) {
            if !said.contains(w) {
                fail(format!("the refusal does not say {w:?}:\n{said}"));
            }
        }
        return failures;
    }
    if !accepted {
        fail(format!("sluice validate refused it:\n{said}"));
        return failures;
    }
    let node = common::TestNode::start(&resources);
    for (i, call) in doc["admin"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let method =
            Method::from_bytes(call["method"].as_str().unwrap_or("PUT").as_bytes()).unwrap();
        let path = call["path"].as_str().unwrap();
        let body = (!call["body"].is_null()).then(|| call["body"].clone());
        let (status, answer) = node.admin(method, path, body).await;
        if let Some(want) = call["status"].as_u64()
            && u64::from(status.as_u16()) != want
        {
            fail(format!(
                "admin[{i}] {path}: status {status}, want {want}: {answer}"
            ));
        }
    }
    let proxy = node.proxy();
    for (i, r) in doc["requests"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let method = Method::from_bytes(r["method"].as_str().unwrap_or("GET").as_bytes()).unwrap();
        let path = r["path"].as_str().unwrap_or("/");
        let headers: Vec<(String, String)> = r["headers"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), text_of(v).unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        let hs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let body = r["body"].as_str().unwrap_or("").to_owned();
        for round in 0..r["repeat"].as_u64().unwrap_or(1) {
            let at = format!("requests[{i}] {method} {path} (#{round})");
            let (before1, before2) = (o1.requests().len(), o2.requests().len());
            let resp = proxy.send(method.clone(), path, &hs, body.clone()).await;
            if let Some(want) = r["status"].as_u64()
                && u64::from(resp.status.as_u16()) != want
            {
                fail(format!(
                    "{at}: status {}, want {want}; body {:?}",
                    resp.status,
                    String::from_utf8_lossy(&resp.body)
                ));
            }
            for (h, want) in r["response_headers"]
                .as_object()
                .cloned()
                .unwrap_or_default()
            {
                let got = resp.header(&h).map(str::to_owned);
                if !same(got.as_deref(), &want) {
                    fail(format!("{at}: answer field {h}: {got:?}, want {want}"));
                }
            }
            if let Some(want) = r["body_contains"].as_str() {
                let got = String::from_utf8_lossy(&resp.body);
                if !got.contains(want) {
                    fail(format!("{at}: body {got:?} lacks {want:?}"));
                }
            }
            let up = &r["upstream"];
            let reached = if o2.requests().len() > before2 {
                Some(("origin2", o2.last()))
            } else if o1.requests().len() > before1 {
                Some(("origin1", o1.last()))
            } else {
                None
            };
            if up.is_null() {
                continue;
            }
            if up == &Value::Bool(false) {
                if reached.is_some() {
                    fail(format!("{at}: reached an upstream, want none"));
                }
                continue;
            }
            let Some((origin, seen)) = reached else {
                fail(format!("{at}: no upstream was reached"));
                continue;
            };
            if let Some(want) = up["origin"].as_str()
                && want != origin
            {
                fail(format!("{at}: reached {origin}, want {want}"));
            }
            if let Some(want) = up["path"].as_str()
                && seen.uri != want
            {
                fail(format!("{at}: upstream got {}, want {want}", seen.uri));
            }
            if let Some(want) = up["method"].as_str()
                && seen.method != want
            {
                fail(format!(
                    "{at}: upstream method {}, want {want}",
                    seen.method
                ));
            }
            if let Some(want) = up["body"].as_str()
                && seen.body != want.as_bytes()
            {
                fail(format!(
                    "{at}: upstream body {:?}, want {want:?}",
                    String::from_utf8_lossy(&seen.body)
                ));
            }
            for (h, want) in up["headers"].as_object().cloned().unwrap_or_default() {
                let got: Vec<&str> = seen.header_all(&h.to_ascii_lowercase());
                let got = (!got.is_empty()).then(|| got.join(", "));
                if !same(got.as_deref(), &want) {
                    fail(format!("{at}: upstream field {h}: {got:?}, want {want}"));
                }
            }
        }
    }
    failures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apisix_fixtures_behave_as_apisix_documents() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apisix-fixtures");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 44, "fixtures: {}", files.len());
    let mut failures = Vec::new();
    for f in &files {
        failures.extend(run(f).await);
    }
    assert!(
        failures.is_empty(),
        "{} of {} fixtures failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}
