//! The admin API and file mode end to end: a node started from a file, real HTTP calls to its
//! admin port, requests through its proxy port, and the file on disk.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{KEY, TestNode};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use sluice_testkit::TestOrigin;

async fn origins() -> (TestOrigin, TestOrigin) {
    (
        TestOrigin::http1().name("a").run().await,
        TestOrigin::http1().name("b").run().await,
    )
}

fn upstreams(a: &TestOrigin, b: &TestOrigin) -> String {
    format!(
        "upstreams:\n  - {{id: a, nodes: {{\"{}\": 1}}}}\n  - {{id: b, nodes: {{\"{}\": 1}}}}\n",
        a.node(),
        b.node()
    )
}

/// What the proxy answers on `path`: status and body.
async fn fetch(n: &TestNode, path: &str) -> (u16, String) {
    let r = n.proxy().get(path).await;
    (r.status.as_u16(), r.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_call_needs_the_key_and_the_proxy_port_has_no_admin_api() {
    let (a, b) = origins().await;
    let n = TestNode::start(&upstreams(&a, &b));
    let admin = n.admin_client();
    for headers in [
        vec![],
        vec![("x-api-key", "wrong")],
        vec![("x-api-key", "test-admin-key-0123456780")],
    ] {
        for (method, path) in [
            (Method::GET, "/admin/routes"),
            (Method::PUT, "/admin/routes/x"),
            (Method::GET, "/admin/status"),
        ] {
            let r = admin.send(method.clone(), path, &headers, "{}").await;
            assert_eq!(r.status, 401, "{method} {path} with {headers:?}");
            assert_eq!(r.json()["error_msg"], "missing or invalid X-API-KEY");
        }
    }
    let r = admin
        .send(Method::GET, "/admin/routes", &[("x-api-key", KEY)], "")
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"total": 0, "list": []}));
    // The proxy port knows nothing of /admin.
    let (status, body) = fetch(&n, "/admin/routes").await;
    assert_eq!(status, 404);
    assert!(body.contains("Route Not Found"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_are_created_changed_and_deleted_live_and_saved_to_the_file() {
    let (a, b) = origins().await;
    let n = TestNode::start(&upstreams(&a, &b));
    assert_eq!(fetch(&n, "/x").await.0, 404);

    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/r1",
            Some(json!({"uri": "/x", "upstream_id": "a"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(
        v["value"],
        json!({"uri": "/x", "upstream_id": "a", "id": "r1"})
    );
    assert_eq!(fetch(&n, "/x").await, (200, "a".into()));

    // Replaced: the old path is gone at once, the new one served.
    let (s, _) = n
        .admin(
            Method::PUT,
            "/admin/routes/r1",
            Some(json!({"uri": "/y", "upstream_id": "b"})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(fetch(&n, "/x").await.0, 404);
    assert_eq!(fetch(&n, "/y").await, (200, "b".into()));

    // Merge patch: only the fields given change; null removes.
    let (s, v) = n
        .admin(
            Method::PATCH,
            "/admin/routes/r1",
            Some(json!({"uri": "/z", "methods": ["GET"], "priority": null})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["value"],
        json!({"uri": "/z", "upstream_id": "b", "id": "r1", "methods": ["GET"]})
    );
    assert_eq!(fetch(&n, "/z").await, (200, "b".into()));
    assert_eq!(
        n.proxy().send(Method::POST, "/z", &[], "").await.status,
        404
    );

    // POST generates the id.
    let (s, v) = n
        .admin(
            Method::POST,
            "/admin/routes",
            Some(json!({"uri": "/p", "upstream_id": "a"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let generated = v["value"]["id"].as_str().unwrap().to_owned();
    assert_eq!(generated.len(), 16);
    assert_eq!(fetch(&n, "/p").await, (200, "a".into()));

    let (s, v) = n.admin(Method::GET, "/admin/routes", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["total"], 2);
    let (s, v) = n.admin(Method::GET, "/admin/routes/r1", None).await;
    assert_eq!(
        (s, v["value"]["uri"].clone()),
        (StatusCode::OK, json!("/z"))
    );

    // The file holds exactly what is in service: a fresh load of it serves the same routes.
    let saved = sluice_config::load_file_with(&n.file, &sluice_plugins::builtin()).unwrap();
    let mut ids: Vec<&str> = saved.routes.iter().map(|r| r.id()).collect();
    ids.sort();
    let mut expected = vec!["r1", generated.as_str()];
    expected.sort();
    assert_eq!(ids, expected);
    assert_eq!(
        saved
            .routes
            .iter()
            .find(|r| r.id() == "r1")
            .unwrap()
            .uri
            .as_deref(),
        Some("/z")
    );
    assert_eq!(saved.upstreams.len(), 2, "the rest of the file is kept");

    let (s, v) = n.admin(Method::DELETE, "/admin/routes/r1", None).await;
    assert_eq!((s, v), (StatusCode::OK, json!({"deleted": "r1"})));
    assert_eq!(fetch(&n, "/z").await.0, 404);
    let (s, v) = n.admin(Method::DELETE, "/admin/routes/r1", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, _) = n.admin(Method::GET, "/admin/routes/r1", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let saved = sluice_config::load_file_with(&n.file, &sluice_plugins::builtin()).unwrap();
    assert_eq!(saved.routes.len(), 1);

    // The watcher sees the file the admin API wrote, and does not apply it a second time.
    let version = n.version();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(n.version(), version);
    assert_eq!(n.node().control().stats().rejected, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_write_is_refused_with_every_error_and_changes_nothing() {
    let (a, b) = origins().await;
    let n = TestNode::start(&format!(
        "{}routes:\n  - {{id: keep, uri: /keep, upstream_id: a}}\n",
        upstreams(&a, &b)
    ));
    let file_before = std::fs::read(&n.file).unwrap();
    let version = n.version();

    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/bad",
            Some(json!({
                "uri": "no-slash",
                "upstream_id": "nope",
                "plugins": {"limit-count": {"count": 0, "time_window": 60}, "no-such-plugin": {}}
            })),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["error_msg"], "invalid configuration");
    let errors: Vec<(String, String)> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_owned(),
                e["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let paths: Vec<&str> = errors.iter().map(|(p, _)| p.as_str()).collect();
    assert!(paths.contains(&"uri"), "{errors:?}");
    assert!(paths.contains(&"upstream_id"), "{errors:?}");
    assert!(paths.contains(&"plugins.limit-count.count"), "{errors:?}");
    assert!(paths.contains(&"plugins.no-such-plugin"), "{errors:?}");
    assert!(
        errors.contains(&("upstream_id".into(), "upstream \"nope\" not found".into())),
        "{errors:?}"
    );

    // An unknown field, a body that is not JSON, an id that disagrees with the URL.
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/bad",
            Some(json!({"uri": "/b", "upstream_id": "a", "urii": 1})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["errors"][0]["path"], "urii", "{v}");
    let r = n
        .admin_client()
        .send(
            Method::PUT,
            "/admin/routes/bad",
            &[("x-api-key", KEY)],
            "{not json",
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error_msg"]
            .as_str()
            .unwrap()
            .contains("the body is invalid JSON")
    );
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/bad",
            Some(json!({"id": "other", "uri": "/b", "upstream_id": "a"})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    // A whole-configuration change (an upstream) that does not validate.
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/upstreams/a",
            Some(json!({"nodes": {}})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["errors"][0]["path"], "nodes", "{v}");
    // Unknown kinds and ids.
    let (s, _) = n.admin(Method::GET, "/admin/nothing", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = n
        .admin(
            Method::PATCH,
            "/admin/routes/missing",
            Some(json!({"uri": "/m"})),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    assert_eq!(n.version(), version, "nothing was applied");
    assert_eq!(
        std::fs::read(&n.file).unwrap(),
        file_before,
        "nothing was written"
    );
    assert_eq!(fetch(&n, "/keep").await, (200, "a".into()));
    assert_eq!(fetch(&n, "/b").await.0, 404);
    // Refused admin writes are the caller's answers, not refused reloads: counted apart, and
    // the last one said with the paths of the body that was sent.
    let (_, status) = n.admin(Method::GET, "/admin/status", None).await;
    assert_eq!(status["admin_refused"], 3, "{status}");
    assert_eq!(status["rejected"], 0, "{status}");
    assert_eq!(status["last_error"], Value::Null, "{status}");
    assert_eq!(
        status["last_admin_refusal"], "upstreams a: nodes: must not be empty",
        "{status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_what_is_in_use_is_a_conflict_and_upstream_changes_apply() {
    let (a, b) = origins().await;
    let n = TestNode::start(&format!(
        "{}services:\n  - {{id: s, upstream_id: b}}\nroutes:\n  - {{id: r1, uri: /one, upstream_id: a}}\n  - {{id: r2, uri: /two, service_id: s}}\n  - {{id: r3, uri: /three, upstream: {{nodes: {{\"{}\": 1}}}}, plugins: {{traffic-split: {{rules: [{{weighted_upstreams: [{{upstream_id: b, weight: 1}}]}}]}}}}}}\n",
        upstreams(&a, &b),
        a.node()
    ));
    let (s, v) = n.admin(Method::DELETE, "/admin/upstreams/a", None).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["error_msg"], "upstreams \"a\" is in use by routes \"r1\"");
    let (s, v) = n.admin(Method::DELETE, "/admin/upstreams/b", None).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(
        v["error_msg"],
        "upstreams \"b\" is in use by routes \"r3\", services \"s\""
    );
    let (s, v) = n.admin(Method::DELETE, "/admin/services/s", None).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["error_msg"], "services \"s\" is in use by routes \"r2\"");

    // An upstream changed in place: its routes follow at once.
    assert_eq!(fetch(&n, "/one").await, (200, "a".into()));
    let (s, _) = n
        .admin(
            Method::PUT,
            "/admin/upstreams/a",
            Some(json!({"nodes": {b.node(): 1}})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(fetch(&n, "/one").await, (200, "b".into()));

    // A route pointing at a missing service is refused; once nothing uses it, a service goes.
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/r4",
            Some(json!({"uri": "/four", "service_id": "nope"})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        v["errors"][0],
        json!({"path": "service_id", "message": "service \"nope\" not found"})
    );
    assert_eq!(
        n.admin(Method::DELETE, "/admin/routes/r2", None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        n.admin(Method::DELETE, "/admin/services/s", None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        n.admin(Method::DELETE, "/admin/routes/r1", None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        n.admin(Method::DELETE, "/admin/upstreams/a", None).await.0,
        StatusCode::OK
    );
    let saved = sluice_config::load_file_with(&n.file, &sluice_plugins::builtin()).unwrap();
    assert_eq!(
        (
            saved.upstreams.len(),
            saved.services.len(),
            saved.routes.len()
        ),
        (1, 0, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_and_global_rules_change_through_the_admin_api() {
    let (a, b) = origins().await;
    let n = TestNode::start(&format!(
        "{}routes:\n  - {{id: r, uri: /private, upstream_id: a, plugins: {{key-auth: {{}}}}}}\n",
        upstreams(&a, &b)
    ));
    let get = |key: &'static str| {
        let c = n.proxy();
        async move {
            c.send(Method::GET, "/private", &[("apikey", key)], "")
                .await
                .status
                .as_u16()
        }
    };
    assert_eq!(get("k1").await, 401);
    let (s, v) = n
        .admin(
            Method::POST,
            "/admin/consumers",
            Some(json!({"username": "jack", "plugins": {"key-auth": {"key": "k1"}}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(get("k1").await, 200);
    let (s, _) = n
        .admin(
            Method::POST,
            "/admin/consumers",
            Some(json!({"username": "jack", "plugins": {"key-auth": {"key": "k2"}}})),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    // Two consumers with one key is a validation error, reported on the one written.
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/consumers/jill",
            Some(json!({"plugins": {"key-auth": {"key": "k1"}}})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["errors"][0]["path"]
            .as_str()
            .unwrap()
            .starts_with("plugins.key-auth"),
        "{v}"
    );

    // A global rule applies to every route, matched or not.
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/global_rules/g",
            Some(json!({"plugins": {"response-rewrite": {"headers": {"set": {"x-global": "1"}}}}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let r = n
        .proxy()
        .send(Method::GET, "/private", &[("apikey", "k1")], "")
        .await;
    assert_eq!(r.header("x-global"), Some("1"));
    assert_eq!(
        n.admin(Method::DELETE, "/admin/global_rules/g", None)
            .await
            .0,
        StatusCode::OK
    );
    let r = n
        .proxy()
        .send(Method::GET, "/private", &[("apikey", "k1")], "")
        .await;
    assert_eq!(r.header("x-global"), None);
    assert_eq!(
        n.admin(Method::DELETE, "/admin/consumers/jack", None)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(get("k1").await, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_checks_a_whole_configuration_without_applying_it() {
    let (a, b) = origins().await;
    let n = TestNode::start(&upstreams(&a, &b));
    let version = n.version();
    let good = format!(
        "routes:\n  - {{uri: /v, upstream: {{nodes: {{\"{}\": 1}}}}}}\n",
        a.node()
    );
    let r = n
        .admin_client()
        .send(Method::POST, "/admin/validate", &[("x-api-key", KEY)], good)
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["ok"], true);
    assert_eq!(r.json()["routes"], 1);
    let bad = "routes:\n  - {uri: /v, upstream_id: none}\n  - {uri: /w, upstream: {nodes: {}}}\nworkers: 0\n";
    let r = n
        .admin_client()
        .send(Method::POST, "/admin/validate", &[("x-api-key", KEY)], bad)
        .await;
    assert_eq!(r.status, 400);
    let paths: Vec<String> = r.json()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_owned())
        .collect();
    // In the order of the text sent.
    assert_eq!(
        paths,
        [
            "routes[0].upstream_id",
            "routes[1].upstream.nodes",
            "workers"
        ]
    );
    assert_eq!(n.version(), version);
    assert_eq!(fetch(&n, "/v").await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_comes_from_the_configuration_types() {
    let (a, b) = origins().await;
    let n = TestNode::start(&upstreams(&a, &b));
    let (s, doc) = n.admin(Method::GET, "/admin/openapi.json", None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/admin/routes",
        "/admin/routes/{id}",
        "/admin/upstreams/{id}",
        "/admin/consumers/{id}",
        "/admin/validate",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing");
    }
    let route = &doc["components"]["schemas"]["RouteConfig"];
    for field in [
        "uri",
        "uris",
        "hosts",
        "methods",
        "priority",
        "upstream_id",
        "plugins",
    ] {
        assert!(
            route["properties"].get(field).is_some(),
            "RouteConfig.{field} missing: {route}"
        );
    }
    assert!(route["properties"].get("matcher").is_none());
    assert!(doc["components"]["schemas"].get("UpstreamConfig").is_some());
    // GET /admin/ and the OpenAPI document list the same calls (the health of an upstream was
    // missing from both).
    let (_, index) = n.admin(Method::GET, "/admin/", None).await;
    let listed: Vec<(String, String)> = index["endpoints"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| {
            let (m, p) = k.split_once(' ').unwrap();
            let p = p.replace("{resource}", "routes");
            (m.to_ascii_lowercase(), p)
        })
        .collect();
    assert!(
        listed.contains(&("get".into(), "/admin/upstreams/{id}/health".into())),
        "{index}"
    );
    for (method, path) in &listed {
        assert!(
            doc["paths"][path].get(method).is_some(),
            "GET /admin/ lists {method} {path}, the OpenAPI document does not"
        );
    }
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops
            .as_object()
            .unwrap()
            .keys()
            .filter(|m| *m != "parameters")
        {
            let generic = path
                .strip_prefix("/admin/")
                .and_then(|rest| rest.split_once('/').map(|(_, tail)| tail))
                .map_or_else(
                    || "/admin/routes".to_owned(),
                    |tail| format!("/admin/routes/{tail}"),
                );
            assert!(
                listed.contains(&(method.clone(), path.clone()))
                    || listed.contains(&(method.clone(), generic.clone())),
                "the OpenAPI document has {method} {path}, GET /admin/ does not"
            );
        }
    }
    let (s, health) = n
        .admin(Method::GET, "/admin/upstreams/a/health", None)
        .await;
    assert_eq!(s, StatusCode::OK, "{health}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_edits_apply_and_a_bad_file_is_rejected_whole() {
    let (a, b) = origins().await;
    let ups = upstreams(&a, &b);
    let n = TestNode::start(&format!(
        "{ups}routes:\n  - {{id: r1, uri: /one, upstream_id: a}}\n"
    ));
    let v0 = n.version();
    // Block style, as people write it.
    n.write_file(&format!("{ups}routes:\n  - id: r1\n    uri: /one\n    upstream_id: b\n  - id: r2\n    uri: /two\n    upstream_id: a\n"));
    let v1 = n.wait_for_version_after(v0).await;
    assert_eq!(fetch(&n, "/one").await, (200, "b".into()));
    assert_eq!(fetch(&n, "/two").await, (200, "a".into()));

    // Every error of a bad file is recorded; nothing of it applies, not even its good parts.
    n.write_file(&format!(
        "{ups}routes:\n  - {{id: r1, uri: /one, upstream_id: a}}\n  - {{id: r2, uri: /two, upstream_id: missing}}\n  - {{id: r3, uri: three, upstream_id: a}}\n"
    ));
    let started = std::time::Instant::now();
    while n.node().control().stats().rejected == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the bad file was not seen"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stats = n.node().control().stats();
    assert_eq!(stats.version, v1);
    let last = stats.last_error.unwrap();
    assert!(
        last.contains("routes[1].upstream_id: upstream \"missing\" not found"),
        "{last}"
    );
    assert!(last.contains("routes[2].uri"), "{last}");
    assert_eq!(
        fetch(&n, "/one").await,
        (200, "b".into()),
        "the last good configuration serves"
    );

    // A file that is not even YAML, then a good one again.
    std::fs::write(&n.file, "routes: [ {").unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(n.version(), v1);
    n.write_file(&format!(
        "{ups}routes:\n  - {{id: r3, uri: /three, upstream_id: a}}\n"
    ));
    n.wait_for_version_after(v1).await;
    assert_eq!(fetch(&n, "/three").await, (200, "a".into()));
    assert_eq!(fetch(&n, "/one").await.0, 404);
    assert_eq!(n.node().control().stats().rejected, 2);

    // One line changed in place (the route alone is compiled), then a bad one: refused, and
    // the route keeps its last good value.
    let v2 = n.version();
    n.write_file(&format!(
        "{ups}routes:\n  - {{id: r3, uri: /tres, upstream_id: b}}\n"
    ));
    n.wait_for_version_after(v2).await;
    assert_eq!(fetch(&n, "/tres").await, (200, "b".into()));
    assert_eq!(fetch(&n, "/three").await.0, 404);
    n.write_file(&format!(
        "{ups}routes:\n  - {{id: r3, uri: tres, upstream_id: b}}\n"
    ));
    let started = std::time::Instant::now();
    while n.node().control().stats().rejected == 2 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the bad line was not seen"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let last = n.node().control().stats().last_error.unwrap();
    assert!(
        last.starts_with("routes[0].uri: must start with \"/\""),
        "{last}"
    );
    assert_eq!(fetch(&n, "/tres").await, (200, "b".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_report_the_version_and_reload_counts() {
    let (a, b) = origins().await;
    let n = TestNode::start(&upstreams(&a, &b));
    let (_, s0) = n.admin(Method::GET, "/admin/status", None).await;
    assert_eq!(s0["applied"], 0);
    n.admin(
        Method::PUT,
        "/admin/routes/r",
        Some(json!({"uri": "/r", "upstream_id": "a"})),
    )
    .await;
    n.admin(
        Method::PUT,
        "/admin/routes/r",
        Some(json!({"uri": "/r", "upstream_id": "zzz"})),
    )
    .await;
    // A name the caller got wrong: refused to it with the body's paths, not a refused reload.
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/caf%C3%A9",
            Some(json!({"uri": "/c", "upstream_id": "a"})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["errors"][0]["path"], "id", "{v}");
    let (_, s1) = n.admin(Method::GET, "/admin/status", None).await;
    assert_eq!(
        (
            s1["applied"].clone(),
            s1["rejected"].clone(),
            s1["admin_refused"].clone()
        ),
        (json!(1), json!(0), json!(2)),
        "{s1}"
    );
    assert!(
        s1["last_admin_refusal"]
            .as_str()
            .unwrap()
            .starts_with("routes café: id: invalid id"),
        "{s1}"
    );
    assert_eq!(s1["last_error"], Value::Null, "{s1}");
    assert!(
        s1["recent"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["result"] == "applied"),
        "{s1}"
    );
    assert!(s1["version"].as_u64().unwrap() > s0["version"].as_u64().unwrap());
    let r = n
        .admin_client()
        .send(Method::GET, "/admin/metrics", &[("x-api-key", KEY)], "")
        .await;
    let text = r.text();
    assert!(
        text.contains(&format!("sluice_config_version {}", s1["version"])),
        "{text}"
    );
    assert!(
        text.contains("sluice_config_reload_total{result=\"applied\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("sluice_config_reload_total{result=\"rejected\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("sluice_admin_writes_refused_total 2"),
        "{text}"
    );
    // A refused file is a refused reload.
    n.write_file(&format!(
        "{}routes:\n  - {{id: x, uri: /x, upstream_id: zzz}}\n",
        upstreams(&a, &b)
    ));
    wait_for_rejections(&n, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_an_admin_key_generates_one() {
    let dir = std::env::temp_dir().join(format!("sluice-genkey-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.yaml");
    std::fs::write(
        &file,
        "listen: 127.0.0.1:0\nworkers: 1\nadmin: {listen: \"127.0.0.1:0\"}\n",
    )
    .unwrap();
    let node = sluice::Node::start(sluice::Source::File(file), |_| {}).unwrap();
    let (addr, key) = node.admin().unwrap();
    assert_eq!(key.len(), 32);
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
    let c = sluice_testkit::Client::new(addr);
    assert_eq!(
        c.send(Method::GET, "/admin/status", &[("x-api-key", key)], "")
            .await
            .status,
        200
    );
    assert_eq!(c.get("/admin/status").await.status, 401);
    let key = key.to_owned();
    std::thread::spawn(move || node.shutdown()).join().unwrap();
    // A second node gets another key.
    let file = dir.join("s.yaml");
    let node = sluice::Node::start(sluice::Source::File(file), |_| {}).unwrap();
    assert_ne!(node.admin().unwrap().1, key);
    std::thread::spawn(move || node.shutdown()).join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_can_be_disabled() {
    let dir = std::env::temp_dir().join(format!("sluice-noadmin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.yaml");
    std::fs::write(
        &file,
        "listen: 127.0.0.1:0\nworkers: 1\nadmin: {enabled: false}\n",
    )
    .unwrap();
    let node = sluice::Node::start(sluice::Source::File(file), |_| {}).unwrap();
    assert!(node.admin().is_none());
    std::thread::spawn(move || node.shutdown()).join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rereading_the_file_during_admin_writes_loses_none_of_them() {
    let (a, b) = origins().await;
    let n = std::sync::Arc::new(TestNode::start(&upstreams(&a, &b)));
    // SIGHUP (a re-read of the file) as fast as it goes, while the admin API writes.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rereads = {
        let (n, stop) = (n.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut count = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n.node().reload();
                count += 1;
            }
            count
        })
    };
    for i in 0..60 {
        let (s, _) = n
            .admin(
                Method::PUT,
                &format!("/admin/upstreams/u{i}"),
                Some(json!({"nodes": {a.node(): 1}})),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "u{i}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(rereads.join().unwrap() > 0);
    let (_, list) = n.admin(Method::GET, "/admin/upstreams", None).await;
    assert_eq!(list["total"], 62, "{list}");
    let saved = sluice_config::load_file_with(&n.file, &sluice_plugins::builtin()).unwrap();
    assert_eq!(saved.upstreams.len(), 62);
}

/// Waits until the control plane has refused `count` changes in all.
async fn wait_for_rejections(n: &TestNode, count: u64) {
    let started = std::time::Instant::now();
    while n.node().control().stats().rejected < count {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no rejection seen: {:?}",
            n.node().control().stats()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_write_never_overwrites_a_hand_edit_of_the_file() {
    let (a, b) = origins().await;
    let ups = upstreams(&a, &b);
    let n = TestNode::start(&format!(
        "{ups}routes:\n  - {{id: r1, uri: /one, upstream_id: a}}\n"
    ));
    // A hand edit with an error: refused, as it should be.
    let bad = format!(
        "{ups}routes:\n  - {{id: r1, uri: /one, upstream_id: a}}\n  - {{id: r2, uri: two, upstream_id: b}}\n"
    );
    n.write_file(&bad);
    wait_for_rejections(&n, 1).await;
    let on_disk = std::fs::read_to_string(&n.file).unwrap();

    // Without the fix the write rewrote the file from memory: the user's edit was gone.
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/x2",
            Some(json!({"uri": "/x2", "upstream_id": "a"})),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    let msg = v["error_msg"].as_str().unwrap();
    assert!(
        msg.contains("has an edit that was refused (1 error") && msg.contains("fix or revert"),
        "{msg}"
    );
    assert_eq!(std::fs::read_to_string(&n.file).unwrap(), on_disk);
    assert_eq!(fetch(&n, "/x2").await.0, 404);

    // The user fixes the file; an admin write right after it (before the watcher's next look)
    // applies the fix first and goes on top of it: both survive.
    n.write_file(&format!(
        "{ups}routes:\n  - {{id: r1, uri: /one, upstream_id: a}}\n  - {{id: r2, uri: /two, upstream_id: b}}\n"
    ));
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/x2",
            Some(json!({"uri": "/x2", "upstream_id": "a"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(fetch(&n, "/two").await, (200, "b".into()));
    assert_eq!(fetch(&n, "/x2").await, (200, "a".into()));
    let text = std::fs::read_to_string(&n.file).unwrap();
    assert!(text.contains("/two") && text.contains("/x2"), "{text}");
    let (_, status) = n.admin(Method::GET, "/admin/status", None).await;
    assert_eq!(status["last_error"], Value::Null, "cleared once applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_ended_with_end_is_applied_only_with_it_and_an_empty_file_is_refused() {
    let (a, b) = origins().await;
    let ups = upstreams(&a, &b);
    let n = TestNode::start(&format!(
        "{ups}routes:\n  - {{id: hello, uri: /hello, upstream_id: a}}\n#END\n"
    ));
    let v0 = n.version();
    // Written in place in two steps, with a pause: the first half must not be applied.
    let first = format!(
        "{}{ups}routes:\n  - {{id: r0, uri: /zero, upstream_id: b}}\n",
        common::settings()
    );
    std::fs::write(&n.file, &first).unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(n.version(), v0, "half a file was applied");
    assert_eq!(fetch(&n, "/hello").await, (200, "a".into()));
    // An admin write meanwhile would overwrite the half-written file.
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/x",
            Some(json!({"uri": "/x", "upstream_id": "a"})),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(v["error_msg"].as_str().unwrap().contains("#END"), "{v}");
    let (s, v) = n.admin(Method::POST, "/admin/reload", None).await;
    assert_eq!(
        (s, v["waiting"].clone()),
        (StatusCode::OK, json!(true)),
        "{v}"
    );
    // The rest arrives.
    std::fs::write(
        &n.file,
        format!("{first}  - {{id: hello, uri: /hello, upstream_id: b}}\n#END\n"),
    )
    .unwrap();
    n.wait_for_version_after(v0).await;
    assert_eq!(fetch(&n, "/hello").await, (200, "b".into()));
    assert_eq!(fetch(&n, "/zero").await, (200, "b".into()));
    // A complete, valid file without the marker waits too: the marker, once seen, is required.
    let v1 = n.version();
    std::fs::write(
        &n.file,
        format!("{first}  - {{id: hello, uri: /hello, upstream_id: a}}\n"),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(n.version(), v1);
    assert_eq!(fetch(&n, "/hello").await, (200, "b".into()));
    let (_, status) = n.admin(Method::GET, "/admin/status", None).await;
    assert!(
        status["file_held"].as_str().unwrap().contains("#END"),
        "{status}"
    );

    // A file without the marker, emptied while routes serve: refused (a truncated file), the
    // routes keep serving.
    let n = TestNode::start(&format!(
        "{ups}routes:\n  - {{id: hello, uri: /hello, upstream_id: b}}\n"
    ));
    let v1 = n.version();
    std::fs::write(&n.file, "").unwrap();
    wait_for_rejections(&n, 1).await;
    assert_eq!(n.version(), v1);
    assert_eq!(fetch(&n, "/hello").await, (200, "b".into()));
    let last = n.node().control().stats().last_error.unwrap();
    assert!(last.contains("no resource list at all"), "{last}");
    // An explicit empty list is a wish, not an accident.
    n.write_file(&format!("{ups}routes: []\n"));
    n.wait_for_version_after(v1).await;
    assert_eq!(fetch(&n, "/hello").await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_percent_decoded_and_follow_one_rule_and_the_index_lists_the_api() {
    let (a, b) = origins().await;
    let n = TestNode::start(&upstreams(&a, &b));
    let (s, v) = n.admin(Method::GET, "/admin/", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let names: Vec<&str> = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"routes") && names.contains(&"consumers"),
        "{v}"
    );
    assert_eq!(v["openapi"], "/admin/openapi.json");
    // A 405 says what is allowed.
    let r = n
        .admin_client()
        .send(Method::DELETE, "/admin/routes", &[("x-api-key", KEY)], "")
        .await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, POST"));

    // APISIX's rule, in the URL as in a file: letters, digits, -, _ and ., 1 to 64.
    for bad in ["caf%C3%A9", "a%20b", &"x".repeat(65)] {
        let (s, v) = n
            .admin(
                Method::PUT,
                &format!("/admin/routes/{bad}"),
                Some(json!({"uri": "/c", "upstream_id": "a"})),
            )
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}: {v}");
        assert_eq!(v["errors"][0]["path"], "id", "{v}");
        assert!(
            v["errors"][0]["message"]
                .as_str()
                .unwrap()
                .starts_with("invalid id"),
            "{v}"
        );
    }
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/v1.users-api_2",
            Some(json!({"uri": "/c", "upstream_id": "a"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    // Percent-encoded in the URL, it is the same id.
    let (s, v) = n
        .admin(Method::GET, "/admin/routes/v1%2Eusers%2Dapi_2", None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _) = n
        .admin(Method::DELETE, "/admin/routes/v1%2eusers-api_2", None)
        .await;
    assert_eq!(s, StatusCode::OK);
    // APISIX's usernames allow "-".
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/consumers/mobile-app",
            Some(json!({"username": "mobile-app", "plugins": {"key-auth": {"key": "k-mobile"}}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    // A duplicate key in a body is an error with its path, not a silent last-wins.
    let r = n
        .admin_client()
        .send(
            Method::PUT,
            "/admin/routes/dup",
            &[("x-api-key", KEY)],
            r#"{"uri": "/d", "uri": "/e", "upstream_id": "a"}"#,
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["errors"][0]["path"], "uri");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlinked_file_is_written_through_and_stays_a_link() {
    let (a, b) = origins().await;
    let dir = std::env::temp_dir().join(format!("sluice-link-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("..data")).unwrap();
    let real = dir.join("..data/sluice.yaml");
    std::fs::write(
        &real,
        format!("{}{}", common::settings(), upstreams(&a, &b)),
    )
    .unwrap();
    let link = dir.join("sluice.yaml");
    std::os::unix::fs::symlink("..data/sluice.yaml", &link).unwrap();
    let node = sluice::Node::start(sluice::Source::File(link.clone()), |_| {}).unwrap();
    let n = TestNode {
        node: Some(node),
        dir: dir.clone(),
        file: link.clone(),
    };
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/r",
            Some(json!({"uri": "/r", "upstream_id": "b"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(std::fs::read_to_string(&real).unwrap().contains("/r"));
    assert_eq!(fetch(&n, "/r").await, (200, "b".into()));
    // An edit of the target is seen through the link.
    let v0 = n.version();
    let text = std::fs::read_to_string(&real)
        .unwrap()
        .replace("\"upstream_id\":\"b\"", "\"upstream_id\":\"a\"");
    assert!(text.contains("\"upstream_id\":\"a\""), "{text}");
    std::fs::write(&real, text).unwrap();
    n.wait_for_version_after(v0).await;
    assert_eq!(fetch(&n, "/r").await, (200, "a".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_file_is_checked_again_when_asked_even_unchanged() {
    let (a, b) = origins().await;
    let ups = upstreams(&a, &b);
    let n = TestNode::start(&format!(
        "{ups}routes:\n  - {{id: r1, uri: /one, upstream_id: a}}\n"
    ));
    // A certificate named before it is copied into place: refused, rightly.
    let cert = n.dir.join("site.pem");
    let key = n.dir.join("site.key");
    n.write_file(&format!(
        "{ups}routes:\n  - {{id: r1, uri: /one, upstream_id: b}}\nssls:\n  - {{id: site, snis: [example.com], cert: {}, key: {}}}\n",
        cert.display(),
        key.display()
    ));
    wait_for_rejections(&n, 1).await;
    let (s, v) = n.admin(Method::POST, "/admin/reload", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (_, status) = n.admin(Method::GET, "/admin/status", None).await;
    assert!(
        status["file_held"]
            .as_str()
            .unwrap()
            .contains("was refused"),
        "{status}"
    );
    // The files arrive; the YAML is the same. Without the fix the refusal was remembered by
    // the text's hash and only an edit of the text could clear it.
    let pki = common::pki::Pki::new("held");
    let (c, k) = pki.issue_files("site", &["example.com"]);
    std::fs::copy(c, &cert).unwrap();
    std::fs::copy(k, &key).unwrap();
    let (s, v) = n.admin(Method::POST, "/admin/reload", None).await;
    assert_eq!(
        (s, v["changed"].clone()),
        (StatusCode::OK, json!(true)),
        "{v}"
    );
    assert_eq!(fetch(&n, "/one").await, (200, "b".into()));
    let (_, status) = n.admin(Method::GET, "/admin/status", None).await;
    assert_eq!(status["file_held"], Value::Null, "{status}");
    assert_eq!(status["last_error"], Value::Null, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_health_lists_each_node_with_its_state() {
    let (a, _b) = origins().await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let n = TestNode::start(&format!(
        "upstreams:\n  - id: h\n    nodes: {{\"{}\": 1, \"{dead_addr}\": 1}}\n    max_inflight: 50\nroutes:\n  - uri: /*\n    upstream_id: h\n",
        a.node(),
    ));
    // Traffic meets the dead node once (a refused connect takes it out, the request moves on).
    for _ in 0..4 {
        assert_eq!(fetch(&n, "/x").await.0, 200);
    }
    let (status, v) = n
        .admin(Method::GET, "/admin/upstreams/h/health", None)
        .await;
    assert_eq!(status, 200, "{v}");
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    let find = |addr: &str| nodes.iter().find(|x| x["node"] == addr).unwrap().clone();
    let live = find(&a.node());
    assert_eq!(live["state"], "healthy");
    let down = find(&dead_addr.to_string());
    assert_eq!(down["state"], "unhealthy", "{v}");
    assert_eq!(down["cause"], "passive");
    assert!(
        down["last_failure"][1]
            .as_str()
            .unwrap()
            .contains("connect"),
        "{down}"
    );
    assert!(down["since"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(
        (v["max_inflight"].clone(), v["shed"].clone()),
        (json!(50), json!(0))
    );
    let (status, v) = n
        .admin(Method::GET, "/admin/upstreams/nope/health", None)
        .await;
    assert_eq!(status, 404, "{v}");
}

/// A refused file that is put back as it was changes nothing in service, but it is no longer
/// refused: the status and the dashboard's history say so (the refusal stayed the last word).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_file_put_back_is_accepted_again() {
    let (a, b) = origins().await;
    let good = format!(
        "{}routes:\n  - {{id: r1, uri: /one, upstream_id: a}}\n",
        upstreams(&a, &b)
    );
    let n = TestNode::start(&good);
    n.write_file(&format!(
        "{good}  - {{id: r2, uri: /two, upstream_id: missing-up}}\n"
    ));
    wait_for_rejections(&n, 1).await;
    let (_, status) = n.admin(Method::GET, "/admin/status", None).await;
    assert!(status["file_held"].is_string(), "{status}");
    assert_eq!(status["recent"][0]["result"], "rejected", "{status}");
    let version = n.version();
    n.write_file(&good);
    let started = std::time::Instant::now();
    while n.node().control().stats().file_held.is_some() {
        assert!(started.elapsed() < Duration::from_secs(5), "still held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (_, status) = n.admin(Method::GET, "/admin/status", None).await;
    assert_eq!(status["last_error"], Value::Null, "{status}");
    let recent = status["recent"].as_array().unwrap();
    assert_eq!(recent.last().unwrap()["result"], "accepted", "{status}");
    assert_eq!(recent.last().unwrap()["version"], version, "{status}");
    assert_eq!(n.version(), version, "nothing new was applied");
}

/// A reload of a file with one error of each stage reports every one, in the file's order, as
/// `sluice validate` does (tests/validate-fixtures; cli.rs checks validate and run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reload_reports_every_error_of_every_stage() {
    let (a, b) = origins().await;
    let n = TestNode::start(&upstreams(&a, &b));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/validate-fixtures");
    let text = std::fs::read_to_string(dir.join("every_stage.yaml")).unwrap();
    let expected = std::fs::read_to_string(dir.join("every_stage.err")).unwrap();
    let tmp = n.dir.join("edit.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &n.file).unwrap();
    wait_for_rejections(&n, 1).await;
    let (_, status) = n.admin(Method::GET, "/admin/status", None).await;
    assert_eq!(
        format!("{}\n", status["last_error"].as_str().unwrap()),
        expected,
        "{status}"
    );
}

/// An admin write of a route with a wrong type and a bad reference gets both errors, in the
/// order of the body it sent (the wrong type hid the rest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_write_gets_every_error_in_the_order_of_its_body() {
    let (a, b) = origins().await;
    let n = TestNode::start(&upstreams(&a, &b));
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/r",
            Some(json!({
                "uri": "/r",
                "priority": "high",
                "plugins": {"limit-count": {"count": 0, "time_window": 60}},
                "upstream_id": "nope",
                "vars": [["arg_x", "~~", "(["]],
            })),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let paths: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "priority",
            "plugins.limit-count.count",
            "upstream_id",
            "vars[0]"
        ],
        "{v}"
    );
}
