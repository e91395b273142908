//! APISIX's admin API (`/apisix/admin/...`) on a real node: the calls ADC makes for a sync
//! and a dump (api7/adc, libs/backend-apisix: `operator.ts`, `fetcher.ts`), in its order and
//! with its bodies, then requests through the proxy, then the dump compared with what was
//! written; and the answer shapes of APISIX's own admin tests (t/admin/*.t).

#![allow(clippy::unwrap_used)]

mod common;

use common::{KEY, TestNode};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use sluice_testkit::TestOrigin;

async fn call(
    n: &TestNode,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    n.admin(method, path, body).await
}

#[tokio::test]
async fn an_adc_sync_then_dump_gives_back_what_was_written_and_serves_it() {
    let origin = TestOrigin::http1().run().await;
    let n = TestNode::start("");
    let admin = n.admin_client();

    // ADC's version check: the Server header of GET /apisix/admin/routes.
    let r = admin
        .send(
            Method::GET,
            "/apisix/admin/routes",
            &[("X-API-KEY", KEY)],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("server"), Some("APISIX/3.11.0"));
    assert_eq!(r.json(), json!({"total": 0, "list": []}));
    // Every answer says so, a refusal without the key too (it did not).
    let r = admin
        .send(Method::GET, "/apisix/admin/routes", &[], "")
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.header("server"), Some("APISIX/3.11.0"));

    // The sync, as operator.ts sends it: a service's upstream first (same id), then the
    // service without its inline upstream, its routes, consumers, their credentials.
    let upstream = json!({
        "id": "svc-httpbin", "name": "httpbin",
        "type": "roundrobin", "scheme": "http", "pass_host": "pass",
        "nodes": [{"host": "127.0.0.1", "port": origin.addr.port(), "weight": 100}],
        "timeout": {"connect": 5, "send": 5, "read": 5}
    });
    let service = json!({
        "id": "svc-httpbin", "name": "httpbin", "desc": "from ADC",
        "labels": {"team": "core"},
        "upstream_id": "svc-httpbin", "hosts": ["httpbin.example.com"],
        "plugins": {"key-auth": {}}
    });
    let route = json!({
        "id": "route-get", "name": "get", "uris": ["/get", "/anything/*"],
        "methods": ["GET", "POST"], "service_id": "svc-httpbin", "priority": 0,
        "status": 1, "labels": {"team": "core"}
    });
    let consumer = json!({"username": "jack", "desc": "a consumer", "plugins": {}});
    let credential = json!({"id": "cred-jack", "name": "jack-key", "plugins": {"key-auth": {"key": "jack-key"}}});
    for (path, body, created) in [
        ("/apisix/admin/upstreams/svc-httpbin", &upstream, true),
        ("/apisix/admin/services/svc-httpbin", &service, true),
        ("/apisix/admin/routes/route-get", &route, true),
        ("/apisix/admin/consumers/jack", &consumer, true),
        (
            "/apisix/admin/consumers/jack/credentials/cred-jack",
            &credential,
            true,
        ),
        // ADC writes again what did not change; the answer says replaced.
        ("/apisix/admin/routes/route-get", &route, false),
    ] {
        let (status, v) = call(&n, Method::PUT, path, Some(body.clone())).await;
        let want = if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        assert_eq!(status, want, "{path}: {v}");
        let key = path.trim_start_matches("/apisix/admin");
        assert_eq!(v["key"], format!("/apisix{key}"), "{path}");
        assert_eq!(&v["value"], body, "{path}");
    }

    // Served: by the service's host, through the service's key-auth, as jack.
    let proxy = n.proxy();
    let get = |host: &'static str, key: Option<&'static str>| {
        let proxy = proxy.clone();
        async move {
            let mut h = vec![("Host", host)];
            if let Some(k) = key {
                h.push(("apikey", k));
            }
            proxy.send(Method::GET, "/get", &h, "").await.status
        }
    };
    assert_eq!(get("httpbin.example.com", None).await, 401);
    assert_eq!(get("httpbin.example.com", Some("jack-key")).await, 200);
    assert_eq!(origin.last().header("x-consumer-username"), Some("jack"));
    assert_eq!(get("other.example.com", Some("jack-key")).await, 404);

    // The dump, as fetcher.ts reads it: every list, consumers' credentials on their own.
    let list = |kind: &'static str| {
        let n = &n;
        async move {
            let (s, v) = call(n, Method::GET, &format!("/apisix/admin/{kind}"), None).await;
            assert_eq!(s, 200, "{kind}");
            v
        }
    };
    for (kind, written) in [
        ("upstreams", &upstream),
        ("services", &service),
        ("routes", &route),
        ("consumers", &consumer),
    ] {
        let v = list(kind).await;
        assert_eq!(v["total"], 1, "{kind}: {v}");
        assert_eq!(&v["list"][0]["value"], written, "{kind}");
    }
    let v = list("consumers/jack/credentials").await;
    assert_eq!(
        v["list"][0]["key"],
        "/apisix/consumers/jack/credentials/cred-jack"
    );
    assert_eq!(v["list"][0]["value"], credential);
    for kind in [
        "ssls",
        "plugin_configs",
        "global_rules",
        "plugin_metadata",
        "stream_routes",
    ] {
        assert_eq!(list(kind).await["total"], 0, "{kind}");
    }

    // A consumer written again without credentials keeps them (their own keys in APISIX).
    let (s, _) = call(
        &n,
        Method::PUT,
        "/apisix/admin/consumers/jack",
        Some(consumer.clone()),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(get("httpbin.example.com", Some("jack-key")).await, 200);

    // Deletions, in ADC's order: routes, services, then upstreams.
    let (s, v) = call(
        &n,
        Method::DELETE,
        "/apisix/admin/consumers/jack/credentials/cred-jack",
        None,
    )
    .await;
    assert_eq!(
        (s, v),
        (
            StatusCode::OK,
            json!({"deleted": "1", "key": "/apisix/consumers/jack/credentials/cred-jack"})
        )
    );
    assert_eq!(get("httpbin.example.com", Some("jack-key")).await, 401);
    for path in [
        "/apisix/admin/routes/route-get",
        "/apisix/admin/services/svc-httpbin",
        "/apisix/admin/upstreams/svc-httpbin",
    ] {
        let (s, v) = call(&n, Method::DELETE, path, None).await;
        assert_eq!(s, 200, "{path}: {v}");
        assert_eq!(v["deleted"], "1");
    }
    assert_eq!(list("routes").await, json!({"total": 0, "list": []}));
}

#[tokio::test]
async fn answers_have_the_shapes_of_apisix_admin_tests() {
    let n = TestNode::start("");
    // t/admin/routes.t: PUT with the id in the body, GET it, 404 for a missing one.
    let (s, v) = call(
        &n,
        Method::PUT,
        "/apisix/admin/routes",
        Some(json!({"id": "1", "uri": "/index.html", "upstream": {"nodes": {"127.0.0.1:8080": 1}, "type": "roundrobin"}})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["key"], "/apisix/routes/1");
    let (s, v) = call(&n, Method::GET, "/apisix/admin/routes/1", None).await;
    assert_eq!(s, 200);
    assert_eq!(v["value"]["uri"], "/index.html");
    assert!(
        v["createdIndex"].is_number() && v["modifiedIndex"].is_number(),
        "{v}"
    );
    let (s, v) = call(&n, Method::GET, "/apisix/admin/routes/not_found", None).await;
    assert_eq!(
        (s, v),
        (StatusCode::NOT_FOUND, json!({"message": "Key not found"}))
    );
    // A body cut short says so, once ("invalid JSON: invalid JSON: EOF ..." before).
    for path in ["/apisix/admin/routes/cut", "/apisix/admin/routes"] {
        let r = n
            .admin_client()
            .send(Method::PUT, path, &[("x-api-key", KEY)], "{\"uri\":")
            .await;
        assert_eq!(r.status, 400);
        let text = r.text();
        assert_eq!(text.matches("invalid JSON").count(), 1, "{text}");
        assert!(text.contains("EOF while parsing"), "{text}");
    }
    let (s, v) = call(
        &n,
        Method::PUT,
        "/apisix/admin/routes",
        Some(json!({"uri": "/x"})),
    )
    .await;
    assert_eq!(
        (s, v["error_msg"].clone()),
        (StatusCode::BAD_REQUEST, json!("missing route id"))
    );

    // POST generates the id; PATCH merges, or replaces a field given as a sub-path.
    let (s, v) = call(
        &n,
        Method::POST,
        "/apisix/admin/routes",
        Some(json!({"uri": "/post", "methods": ["GET"], "upstream": {"nodes": {"127.0.0.1:8080": 1}}})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let key = v["key"].as_str().unwrap().to_owned();
    let id = key.rsplit('/').next().unwrap().to_owned();
    let (s, v) = call(
        &n,
        Method::PATCH,
        &format!("/apisix/admin/routes/{id}/methods"),
        Some(json!(["POST", "PUT"])),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["value"]["methods"], json!(["POST", "PUT"]));
    let (s, v) = call(
        &n,
        Method::PATCH,
        &format!("/apisix/admin/routes/{id}"),
        Some(json!({"desc": "patched"})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["value"]["desc"], "patched");
    assert_eq!(v["value"]["uri"], "/post");

    // A refused write names the path in error_msg, as a tool prints it.
    let (s, v) = call(
        &n,
        Method::PUT,
        "/apisix/admin/routes/2",
        Some(json!({"uri": "/a", "upstream_id": "missing"})),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        v["error_msg"]
            .as_str()
            .unwrap()
            .contains("upstream_id: upstream \"missing\" not found"),
        "{v}"
    );

    // Lists page and filter as APISIX's do.
    for i in 0..12 {
        let (s, _) = call(
            &n,
            Method::PUT,
            &format!("/apisix/admin/routes/p{i}"),
            Some(json!({"uri": format!("/page/{i}"), "name": format!("paged-{i}"), "labels": {"env": if i % 2 == 0 { "even" } else { "odd" }}, "upstream": {"nodes": {"127.0.0.1:8080": 1}}})),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED);
    }
    let (_, v) = call(
        &n,
        Method::GET,
        "/apisix/admin/routes?page=2&page_size=10",
        None,
    )
    .await;
    assert_eq!(v["total"], 14);
    assert_eq!(v["list"].as_array().unwrap().len(), 4);
    let (_, v) = call(
        &n,
        Method::GET,
        "/apisix/admin/routes?name=paged-1&label=env:odd",
        None,
    )
    .await;
    let names: Vec<&str> = v["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["value"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["paged-1", "paged-11"]);
    let (_, v) = call(&n, Method::GET, "/apisix/admin/routes?uri=/page/3", None).await;
    assert_eq!(v["total"], 1);

    // The key in the query; a wrong one refused.
    let admin = n.admin_client();
    let r = admin
        .send(
            Method::GET,
            &format!("/apisix/admin/routes/1?api_key={KEY}"),
            &[],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    let r = admin
        .send(Method::GET, "/apisix/admin/routes/1?api_key=wrong", &[], "")
        .await;
    assert_eq!(r.status, 401);

    // What Sluice does not have is said, not swallowed.
    let (s, v) = call(
        &n,
        Method::PUT,
        "/apisix/admin/protos/1",
        Some(json!({"content": "syntax = \"proto3\";"})),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        v["error_msg"].as_str().unwrap().contains("not supported"),
        "{v}"
    );
    let (s, v) = call(&n, Method::GET, "/apisix/admin/plugins/list", None).await;
    assert_eq!(s, 200);
    assert!(v.as_array().unwrap().iter().any(|p| p == "key-auth"), "{v}");
    let (s, v) = call(&n, Method::GET, "/apisix/admin/schema/routes", None).await;
    assert_eq!(s, 200);
    assert!(v["properties"]["uri"].is_object(), "{v}");
    // Plugin schemas, from the structures Sluice parses configurations with.
    let (s, v) = call(
        &n,
        Method::GET,
        "/apisix/admin/schema/plugins/limit-count",
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(v["properties"]["count"]["type"], "number", "{v}");
    assert_eq!(v["additionalProperties"], false, "{v}");
    assert!(
        v["required"]
            .as_array()
            .unwrap()
            .contains(&json!("time_window")),
        "{v}"
    );
    let (s, v) = call(&n, Method::GET, "/apisix/admin/plugins/key-auth", None).await;
    assert_eq!(s, 200);
    assert!(v["properties"]["header"].is_object(), "{v}");
    let (s, v) = call(
        &n,
        Method::GET,
        "/apisix/admin/schema/plugins/key-auth?schema_type=consumer",
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(v["required"], json!(["key"]), "{v}");
    let (s, v) = call(
        &n,
        Method::GET,
        "/apisix/admin/schema/plugins/serverless-pre-function",
        None,
    )
    .await;
    assert_eq!(
        (s, v),
        (
            StatusCode::NOT_FOUND,
            json!({"error_msg": "plugin not found in subsystem http"})
        )
    );
    let (s, v) = call(
        &n,
        Method::GET,
        "/apisix/admin/plugins/cors?schema_type=consumer",
        None,
    )
    .await;
    assert_eq!(
        (s, v),
        (
            StatusCode::BAD_REQUEST,
            json!({"error_msg": "not found schema"})
        )
    );
    let (s, v) = call(&n, Method::DELETE, "/apisix/admin/routes/1", None).await;
    assert_eq!(
        (s, v),
        (
            StatusCode::OK,
            json!({"deleted": "1", "key": "/apisix/routes/1"})
        )
    );
}

#[tokio::test]
async fn the_whole_configuration_at_once_as_apisix_standalone_admin_api() {
    // apisix/admin/standalone.lua, as ADC's standalone backend and the ingress controller
    // use it: PUT /apisix/admin/configs with X-Digest; credentials listed among consumers.
    let origin = TestOrigin::http1().run().await;
    let n = TestNode::start("");
    let admin = n.admin_client();
    let body = json!({
        "routes": [{"id": "r1", "uri": "/get", "upstream_id": "u1", "plugins": {"key-auth": {}}}],
        "upstreams": [{"id": "u1", "nodes": {origin.node(): 1}}],
        "consumers": [
            {"username": "jack"},
            {"id": "jack/credentials/k1", "plugins": {"key-auth": {"key": "jack-key"}}}
        ],
        "routes_conf_version": 3
    });
    let put = |digest: &'static str, body: Value| {
        let admin = admin.clone();
        async move {
            admin
                .send(
                    Method::PUT,
                    "/apisix/admin/configs",
                    &[
                        ("X-API-KEY", KEY),
                        ("X-Digest", digest),
                        ("content-type", "application/json"),
                    ],
                    body.to_string(),
                )
                .await
        }
    };
    let r = admin
        .send(
            Method::PUT,
            "/apisix/admin/configs",
            &[("X-API-KEY", KEY)],
            body.to_string(),
        )
        .await;
    assert_eq!(r.status, 400, "no digest");
    let r = put("d1", body.clone()).await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.header("x-digest"), Some("d1"));
    let ok = n
        .proxy()
        .send(Method::GET, "/get", &[("apikey", "jack-key")], "")
        .await;
    assert_eq!(ok.status, 200);
    // The same digest again: nothing done.
    assert_eq!(put("d1", json!({})).await.status, 204);
    // A lower version is refused; an invalid configuration changes nothing.
    let r = put("d2", json!({"routes": [], "routes_conf_version": 2})).await;
    assert_eq!(r.status, 400);
    assert!(
        r.text()
            .contains("routes_conf_version must be greater than or equal to (3)"),
        "{}",
        r.text()
    );
    let r = put("d3", json!({"routes": [{"id": "x", "uri": "no-slash", "upstream_id": "u1"}], "upstreams": body["upstreams"].clone(), "consumers": body["consumers"].clone()})).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("routes[0].uri"), "{}", r.text());
    assert_eq!(
        n.proxy()
            .send(Method::GET, "/get", &[("apikey", "jack-key")], "")
            .await
            .status,
        200
    );
    // GET gives it back with the versions.
    let (s, v) = call(&n, Method::GET, "/apisix/admin/configs", None).await;
    assert_eq!(s, 200);
    assert_eq!(v["routes_conf_version"], 3);
    assert_eq!(v["routes"][0]["id"], "r1");
    assert_eq!(v["consumers"][0]["credentials"][0]["id"], "k1");
    // A duplicate id, a list that is not one, a version that is not a number: refused.
    let r = put("d4", json!({"upstreams": [{"id": "u1", "nodes": {origin.node(): 1}}, {"id": "u1", "nodes": {origin.node(): 1}}]})).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("duplicate upstream id"), "{}", r.text());
    assert_eq!(put("d5", json!({"routes": {}})).await.status, 400);
    assert_eq!(
        put("d6", json!({"routes_conf_version": "4"})).await.status,
        400
    );
    assert_eq!(
        n.proxy()
            .send(Method::GET, "/get", &[("apikey", "jack-key")], "")
            .await
            .status,
        200
    );
    // A change made another way makes the digest stale: the same digest is applied again.
    let (s, _) = call(&n, Method::DELETE, "/apisix/admin/routes/r1", None).await;
    assert_eq!(s, 200);
    let mut again = body.clone();
    again["routes_conf_version"] = json!(4);
    let r = put("d1", again).await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(
        n.proxy()
            .send(Method::GET, "/get", &[("apikey", "jack-key")], "")
            .await
            .status,
        200
    );
    // Validation alone.
    let (s, v) = call(
        &n,
        Method::POST,
        "/apisix/admin/configs/validate",
        Some(json!({"routes": [{"uri": "/x"}]})),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
}

/// APISIX's `plugin_metadata`: in the file (cors origin lists by name, limit-count header
/// names), then changed live through `/apisix/admin/plugin_metadata/<plugin>` as APISIX's docs
/// do it, read back, refused when wrong, and deleted (the defaults come back).
#[tokio::test]
async fn plugin_metadata_in_the_file_and_through_the_admin_api() {
    let origin = TestOrigin::http1().run().await;
    let node = origin.addr.to_string();
    let n = TestNode::start(&format!(
        r#"plugin_metadata:
  - id: cors
    allow_origins: {{key_1: "https://domain.com", key_2: "https://sub.domain.com,https://sub2.domain.com"}}
routes:
  - id: cors-route
    uri: /anything
    plugins: {{cors: {{allow_origins_by_metadata: [key_1]}}}}
    upstream: {{nodes: {{"{node}": 1}}}}
  - id: limited
    uri: /get
    plugins: {{limit-count: {{count: 5, time_window: 60}}}}
    upstream: {{nodes: {{"{node}": 1}}}}
"#
    ));
    let proxy = n.proxy();
    let allow_origin = |path: &'static str, origin: &'static str| {
        let proxy = proxy.clone();
        async move {
            let r = proxy
                .send(Method::GET, path, &[("Origin", origin)], "")
                .await;
            assert_eq!(r.status, 200);
            r.header("access-control-allow-origin").map(str::to_owned)
        }
    };
    assert_eq!(
        allow_origin("/anything", "https://domain.com")
            .await
            .as_deref(),
        Some("https://domain.com")
    );
    assert_eq!(
        allow_origin("/anything", "https://sub.domain.com").await,
        None
    );
    let r = proxy.send(Method::GET, "/get", &[], "").await;
    assert_eq!(r.header("x-ratelimit-limit"), Some("5"));

    // Live: the metadata changes key_1 (APISIX's PUT); the route is rebuilt with it.
    let (status, body) = call(
        &n,
        Method::PUT,
        "/apisix/admin/plugin_metadata/cors",
        Some(json!({"allow_origins": {"key_1": "https://sub.domain.com"}})),
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    assert_eq!(body["key"], "/apisix/plugin_metadata/cors");
    assert_eq!(
        allow_origin("/anything", "https://sub.domain.com")
            .await
            .as_deref(),
        Some("https://sub.domain.com")
    );
    assert_eq!(allow_origin("/anything", "https://domain.com").await, None);
    let (status, body) = call(
        &n,
        Method::PUT,
        "/apisix/admin/plugin_metadata/limit-count",
        Some(json!({"limit_header": "X-Custom-RateLimit-Limit", "remaining_header": "X-Custom-RateLimit-Remaining", "reset_header": "X-Custom-RateLimit-Reset"})),
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    let r = proxy.send(Method::GET, "/get", &[], "").await;
    assert_eq!(r.header("x-custom-ratelimit-limit"), Some("5"));
    assert_eq!(r.header("x-ratelimit-limit"), None);
    // The counter went on through the change (4 left before this one, 3 now).
    assert_eq!(r.header("x-custom-ratelimit-remaining"), Some("3"));
    let (status, body) = call(
        &n,
        Method::GET,
        "/apisix/admin/plugin_metadata/limit-count",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["value"]["limit_header"], "X-Custom-RateLimit-Limit");
    // Refused with where and why; nothing changed.
    let (status, body) = call(
        &n,
        Method::PUT,
        "/apisix/admin/plugin_metadata/limit-count",
        Some(json!({"limit_header": "Bad Name"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("invalid header name"), "{body}");
    let (status, body) = call(
        &n,
        Method::PUT,
        "/apisix/admin/plugin_metadata/key-auth",
        Some(json!({"x": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.to_string().contains("key-auth has no plugin metadata"),
        "{body}"
    );
    let r = proxy.send(Method::GET, "/get", &[], "").await;
    assert_eq!(r.header("x-custom-ratelimit-limit"), Some("5"));
    // Deleted: the default names again.
    let (status, body) = call(
        &n,
        Method::DELETE,
        "/apisix/admin/plugin_metadata/limit-count",
        None,
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    let r = proxy.send(Method::GET, "/get", &[], "").await;
    assert_eq!(r.header("x-ratelimit-limit"), Some("5"));
}
