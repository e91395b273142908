//! Cluster mode end to end: real etcd servers (Debian's etcd-server) started by the tests, two
//! Sluice nodes sharing them, and what happens when etcd goes away and comes back.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{EtcdServer, TestNode};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use sluice_testkit::TestOrigin;

fn etcd_settings(etcd: &EtcdServer, prefix: &str) -> String {
    format!(
        "etcd: {{endpoints: [\"{}\"], prefix: {prefix}, timeout: 1s}}\n",
        etcd.endpoint()
    )
}

/// Waits until `path` on `node` answers `status`; returns how long that took.
async fn wait_for(node: &TestNode, path: &str, status: u16) -> Duration {
    let started = Instant::now();
    loop {
        if node.proxy().get(path).await.status.as_u16() == status {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{path} did not answer {status} within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn route(origin: &TestOrigin, uri: &str) -> Value {
    json!({"uri": uri, "upstream": {"nodes": {origin.node(): 1}}})
}

/// Waits up to 10 s for `done` to hold.
async fn eventually(what: &str, done: impl AsyncFn() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not within 10 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn status(node: &TestNode) -> Value {
    node.admin(Method::GET, "/admin/status", None).await.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_through_one_node_is_served_by_the_other_within_a_second() {
    let etcd = EtcdServer::start();
    let origin = TestOrigin::http1().name("o").run().await;
    let a = TestNode::start_with(&etcd_settings(&etcd, "/t1"), "");
    let b = TestNode::start_with(&etcd_settings(&etcd, "/t1"), "");

    let (s, v) = a
        .admin(
            Method::PUT,
            "/admin/routes/r1",
            Some(route(&origin, "/one")),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    // Served by the node written through as soon as the call returns...
    assert_eq!(a.proxy().get("/one").await.status, 200);
    // ...and by the other within a second.
    let took = wait_for(&b, "/one", 200).await;
    assert!(took < Duration::from_secs(1), "node B took {took:?}");

    // Through B: a change, an upstream, a route using it; then a deletion through A.
    let (s, _) = b
        .admin(
            Method::PATCH,
            "/admin/routes/r1",
            Some(json!({"uri": "/uno"})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    wait_for(&a, "/uno", 200).await;
    wait_for(&a, "/one", 404).await;
    let (s, v) = b
        .admin(
            Method::PUT,
            "/admin/upstreams/o",
            Some(json!({"nodes": {origin.node(): 1}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = b
        .admin(
            Method::PUT,
            "/admin/routes/r2",
            Some(json!({"uri": "/two", "upstream_id": "o"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    wait_for(&a, "/two", 200).await;
    // A knows the upstream is in use, as B does.
    let (s, _) = a.admin(Method::DELETE, "/admin/upstreams/o", None).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, _) = a.admin(Method::DELETE, "/admin/routes/r2", None).await;
    assert_eq!(s, StatusCode::OK);
    wait_for(&b, "/two", 404).await;
    // Both nodes list the same resources.
    for n in [&a, &b] {
        let (_, routes) = n.admin(Method::GET, "/admin/routes", None).await;
        assert_eq!(routes["total"], 1, "{routes}");
        assert_eq!(routes["list"][0]["uri"], "/uno");
        let st = status(n).await;
        assert_eq!(st["etcd"]["connected"], true, "{st}");
    }
    // In cluster mode the file is not written: it holds node settings only.
    let file = std::fs::read_to_string(&a.file).unwrap();
    assert!(!file.contains("routes"), "{file}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_never_lose_each_others_update() {
    let etcd = EtcdServer::start();
    let origin = TestOrigin::http1().run().await;
    let a = TestNode::start_with(&etcd_settings(&etcd, "/t2"), "");
    let b = TestNode::start_with(&etcd_settings(&etcd, "/t2"), "");
    let (s, _) = a
        .admin(Method::PUT, "/admin/routes/r", Some(route(&origin, "/r")))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    wait_for(&b, "/r", 200).await;

    // Both nodes merge a label into the same route at the same time, many times over. Each
    // write is checked against the whole configuration's revision: a writer whose view is
    // stale gets 409 and changes nothing. No write that succeeded may be lost.
    let mut kept = Vec::new();
    let mut conflicts = 0;
    for round in 0..30 {
        let pa = a.admin(
            Method::PATCH,
            "/admin/routes/r",
            Some(json!({"labels": {format!("a{round}"): "x"}})),
        );
        let pb = b.admin(
            Method::PATCH,
            "/admin/routes/r",
            Some(json!({"labels": {format!("b{round}"): "x"}})),
        );
        let ((sa, va), (sb, vb)) = tokio::join!(pa, pb);
        for (s, v, label) in [(sa, va, format!("a{round}")), (sb, vb, format!("b{round}"))] {
            match s {
                StatusCode::OK => kept.push(label),
                StatusCode::CONFLICT => conflicts += 1,
                other => panic!("{other}: {v}"),
            }
        }
    }
    // What etcd holds, read through a node once both agree.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, va) = a.admin(Method::GET, "/admin/routes/r", None).await;
    let (_, vb) = b.admin(Method::GET, "/admin/routes/r", None).await;
    assert_eq!(va, vb, "both nodes hold the same route");
    let labels = va["value"]["labels"].as_object().unwrap();
    for label in &kept {
        assert!(
            labels.contains_key(label),
            "the successful write of {label} was lost: {labels:?}"
        );
    }
    assert_eq!(labels.len(), kept.len(), "only successful writes are there");
    eprintln!("{} writes kept, {conflicts} refused with 409", kept.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_keep_serving_without_etcd_and_catch_up_when_it_returns() {
    let mut etcd = EtcdServer::start();
    let origin = TestOrigin::http1().run().await;
    let a = TestNode::start_with(&etcd_settings(&etcd, "/t3"), "");
    let b = TestNode::start_with(&etcd_settings(&etcd, "/t3"), "");
    let (s, _) = a
        .admin(
            Method::PUT,
            "/admin/routes/r1",
            Some(route(&origin, "/one")),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    wait_for(&b, "/one", 200).await;

    etcd.kill();
    // Both keep serving; they say etcd is gone; writes are refused, not half-done.
    for n in [&a, &b] {
        eventually("the outage is noticed", async || {
            status(n).await["etcd"]["connected"] == false
        })
        .await;
        for _ in 0..20 {
            assert_eq!(n.proxy().get("/one").await.status, 200);
        }
        let st = status(n).await;
        assert!(
            st["etcd"]["last_error"]
                .as_str()
                .unwrap()
                .contains("unreachable"),
            "{st}"
        );
    }
    let (s, v) = a
        .admin(
            Method::PUT,
            "/admin/routes/r2",
            Some(route(&origin, "/two")),
        )
        .await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(a.proxy().get("/two").await.status, 404);
    let r = a
        .admin_client()
        .send(
            Method::GET,
            "/admin/metrics",
            &[("x-api-key", common::KEY)],
            "",
        )
        .await;
    assert!(r.text().contains("sluice_etcd_connected 0"), "{}", r.text());

    // etcd comes back; a change is made before the nodes notice (straight into etcd, as
    // another writer would): they pick it up when they read everything again.
    etcd.restart();
    let client = sluice_admin::etcd::Etcd::new(&[etcd.endpoint()], Duration::from_secs(2)).unwrap();
    let value = serde_json::to_vec(&route(&origin, "/meanwhile")).unwrap();
    let written = write_guarded_now(&client, "/t3", "/t3/routes/m", &value).await;
    assert!(
        matches!(written, sluice_admin::etcd::Written::At(_)),
        "{written:?}"
    );
    let (rev, kvs) = client.range_prefix("/t3/routes/").await.unwrap();
    assert!(
        kvs.iter().any(|kv| kv.key == "/t3/routes/m"),
        "revision {rev}: the write landed"
    );
    for n in [&a, &b] {
        wait_for(n, "/meanwhile", 200).await;
        assert_eq!(n.proxy().get("/one").await.status, 200);
    }
    eventually("node A reconnects", async || {
        status(&a).await["etcd"]["connected"] == true
    })
    .await;
    let (s, v) = a
        .admin(
            Method::PUT,
            "/admin/routes/r2",
            Some(route(&origin, "/two")),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    wait_for(&b, "/two", 200).await;
}

/// etcd silent, its connections open (a partition, a hung process): the watch alone would wait
/// forever. The node finds out (its probe), keeps serving, says it is stale in /readyz, the
/// metrics and /admin/status, leaves readiness after `stale_unready_after`, and catches up
/// when etcd answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_etcd_says_it_is_stale_and_catches_up() {
    let etcd = EtcdServer::start();
    let origin = TestOrigin::http1().run().await;
    let a = TestNode::start_with(
        &format!(
            "status: {{listen: 127.0.0.1:0}}\netcd: {{endpoints: [\"{}\"], prefix: /t5, timeout: 1s, stale_unready_after: 3s}}\n",
            etcd.endpoint()
        ),
        "",
    );
    let port = a.node().status_addr().unwrap().port();
    let st = sluice_testkit::Client::new(format!("127.0.0.1:{port}").parse().unwrap());
    let (s, _) = a
        .admin(
            Method::PUT,
            "/admin/routes/r1",
            Some(route(&origin, "/one")),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    wait_for(&a, "/one", 200).await;
    assert_eq!(st.get("/readyz").await.text(), "ready\n");

    etcd.pause();
    let cut = Instant::now();
    eventually("the silence is noticed", async || {
        status(&a).await["etcd"]["connected"] == false
    })
    .await;
    let noticed = cut.elapsed();
    // The probe runs every 2 s and its call times out after 1 s.
    assert!(
        noticed < Duration::from_secs(5),
        "noticed after {noticed:?}"
    );
    let r = st.get("/readyz").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.text().starts_with("ready, stale: etcd unreachable for "),
        "{}",
        r.text()
    );
    assert_eq!(a.proxy().get("/one").await.status, 200);
    eventually("readiness is left after stale_unready_after", async || {
        st.get("/readyz").await.status == 503
    })
    .await;
    let r = st.get("/readyz").await;
    assert!(
        r.text().starts_with("stale: etcd unreachable for "),
        "{}",
        r.text()
    );
    assert_eq!(a.proxy().get("/one").await.status, 200, "still serving");
    let m = a
        .admin_client()
        .send(
            Method::GET,
            "/admin/metrics",
            &[("x-api-key", common::KEY)],
            "",
        )
        .await
        .text();
    let stale: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("sluice_config_stale_seconds "))
        .unwrap_or_else(|| panic!("no sluice_config_stale_seconds in:\n{m}"))
        .parse()
        .unwrap();
    assert!(stale >= 3, "{stale}");
    assert!(status(&a).await["etcd"]["stale_for_s"].as_u64().unwrap() >= 3);

    // A change made while the node was cut off is served once etcd answers.
    etcd.resume();
    let client = sluice_admin::etcd::Etcd::new(&[etcd.endpoint()], Duration::from_secs(2)).unwrap();
    let value = serde_json::to_vec(&route(&origin, "/meanwhile")).unwrap();
    write_guarded_now(&client, "/t5", "/t5/routes/m", &value).await;
    wait_for(&a, "/meanwhile", 200).await;
    eventually("in step again", async || {
        st.get("/readyz").await.text() == "ready\n"
    })
    .await;
    assert_eq!(status(&a).await["etcd"]["stale_for_s"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_starts_from_its_cache_while_etcd_is_down() {
    let mut etcd = EtcdServer::start();
    let origin = TestOrigin::http1().run().await;
    let settings = etcd_settings(&etcd, "/t4");
    let a = TestNode::start_with(&settings, "");
    let (s, _) = a
        .admin(
            Method::PUT,
            "/admin/routes/r1",
            Some(route(&origin, "/cached")),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let cache = format!("{}.etcd-cache", a.file.display());
    eventually("the cache is written", async || {
        std::fs::read_to_string(&cache).is_ok_and(|t| t.contains("/cached"))
    })
    .await;
    // The same files, in a directory of their own (the node's goes with it once it stopped).
    let dir = std::path::PathBuf::from(format!("{}-again", a.dir.display()));
    let cached = std::fs::read(&cache).unwrap();
    drop(a);
    etcd.kill();

    // A node restarted with the same files while etcd is down serves the cached routes.
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("sluice.yaml"),
        format!("{}{settings}", common::settings()),
    )
    .unwrap();
    std::fs::write(dir.join("sluice.yaml.etcd-cache"), cached).unwrap();
    let node = sluice::Node::start(sluice::Source::File(dir.join("sluice.yaml")), |_| {}).unwrap();
    let proxy = sluice_testkit::Client::new(node.server().local_addrs()[0]);
    assert_eq!(proxy.get("/cached").await.status, 200);
    assert!(!node.control().stats().etcd.unwrap().connected);
    etcd.restart();
    eventually("the node reconnects", async || {
        node.control().stats().etcd.unwrap().connected
    })
    .await;
    assert_eq!(proxy.get("/cached").await.status, 200);
    std::thread::spawn(move || node.shutdown()).join().unwrap();

    // Without etcd and without a cache, a node refuses to start, and says why.
    etcd.kill();
    std::fs::remove_file(dir.join("sluice.yaml.etcd-cache")).unwrap();
    let err =
        sluice::Node::start(sluice::Source::File(dir.join("sluice.yaml")), |_| {}).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("etcd unreachable") && msg.contains("cannot be read"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_value_written_straight_to_etcd_is_rejected_and_the_rest_applies() {
    let etcd = EtcdServer::start();
    let origin = TestOrigin::http1().run().await;
    let a = TestNode::start_with(&etcd_settings(&etcd, "/t5"), "");
    let client = sluice_admin::etcd::Etcd::new(&[etcd.endpoint()], Duration::from_secs(2)).unwrap();
    let bad =
        serde_json::to_vec(&json!({"uri": "no-slash", "upstream": {"nodes": {origin.node(): 1}}}))
            .unwrap();
    client
        .write_guarded("/t5/_guard", 0, "/t5/routes/bad", Some(&bad))
        .await
        .unwrap();
    eventually("the bad route is seen", async || {
        status(&a).await["rejected"] != 0
    })
    .await;
    let st = status(&a).await;
    assert!(st["last_error"].as_str().unwrap().contains("uri"), "{st}");
    // A good route written next still applies.
    let good = serde_json::to_vec(&route(&origin, "/good")).unwrap();
    let guard = guard_revision(&client, "/t5").await;
    client
        .write_guarded("/t5/_guard", guard, "/t5/routes/good", Some(&good))
        .await
        .unwrap();
    wait_for(&a, "/good", 200).await;
    // Writes with a stale guard revision do not land.
    let stale = client
        .write_guarded("/t5/_guard", guard, "/t5/routes/late", Some(&good))
        .await
        .unwrap();
    assert_eq!(stale, sluice_admin::etcd::Written::Conflict);
    // Resources in the file are refused in cluster mode.
    let dir = a.dir.join("other");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("s.yaml"),
        format!(
            "{}{}routes:\n  - {{uri: /x, upstream_id: u}}\n",
            common::settings(),
            etcd_settings(&etcd, "/t5")
        ),
    )
    .unwrap();
    let err = sluice::Node::start(sluice::Source::File(dir.join("s.yaml")), |_| {}).unwrap_err();
    let rejected = err
        .downcast_ref::<sluice::ConfigRejected>()
        .expect("a configuration error");
    assert_eq!(
        rejected.errors.to_string().trim(),
        format!("routes: {}", sluice_admin::RESOURCES_IN_ETCD)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_one_etcd_one_redis_share_routes_and_one_limit() {
    let etcd = EtcdServer::start();
    let redis = common::RedisServer::start();
    let origin = TestOrigin::http1().run().await;
    let a = TestNode::start_with(&etcd_settings(&etcd, "/t6"), "");
    let b = TestNode::start_with(&etcd_settings(&etcd, "/t6"), "");
    // The window must not end during the test.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    if 3600 - now % 3600 < 30 {
        tokio::time::sleep(Duration::from_secs(3600 - now % 3600 + 1)).await;
    }
    let mut r = route(&origin, "/limited");
    r["plugins"] = json!({"limit-count": {
        "count": 100, "time_window": 3600, "rejected_code": 429,
        "policy": "redis", "redis_host": "127.0.0.1", "redis_port": redis.port
    }});
    let (s, v) = a.admin(Method::PUT, "/admin/routes/limited", Some(r)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let took = wait_for(&b, "/limited", 200).await;
    assert!(took < Duration::from_secs(1), "node B took {took:?}");
    let hammer = |n: &TestNode| {
        let c = n.proxy();
        tokio::spawn(async move {
            let mut ok = 0;
            for _ in 0..150 {
                if c.get("/limited").await.status == 200 {
                    ok += 1;
                }
            }
            ok
        })
    };
    let (oka, okb) = tokio::join!(hammer(&a), hammer(&b));
    // wait_for above took one unit on node B.
    let accepted = oka.unwrap() + okb.unwrap() + 1;
    assert!(
        (98..=100).contains(&accepted),
        "{accepted} admitted with a cluster-wide limit of 100"
    );
}

/// Puts `value` at `key` as any etcd client does (no guard key: what APISIX writes).
async fn etcd_put(etcd: &EtcdServer, key: &str, value: Option<&str>) {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let addr: std::net::SocketAddr = etcd
        .endpoint()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let (path, body) = match value {
        Some(v) => ("/v3/kv/put", json!({"key": b64(key), "value": b64(v)})),
        None => ("/v3/kv/deleterange", json!({"key": b64(key)})),
    };
    let r = sluice_testkit::Client::new(addr)
        .send(Method::POST, path, &[], body.to_string())
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_serves_from_the_etcd_an_apisix_control_plane_writes() {
    // The keys and values of APISIX 3 (its admin API writes them so: init_dir placeholders,
    // create/update times, credentials under their consumer, key-auth keys encrypted with
    // the data_encryption keyring; values taken from apache/apisix t/node/data_encrypt.t).
    let etcd = EtcdServer::start();
    let origin = TestOrigin::http1().run().await;
    for dir in [
        "routes",
        "upstreams",
        "services",
        "consumers",
        "ssls",
        "global_rules",
        "plugin_metadata",
    ] {
        etcd_put(&etcd, &format!("/apisix/{dir}"), Some("init_dir")).await;
    }
    etcd_put(&etcd, "/apisix/upstreams/1", Some(&json!({"id": "1", "type": "roundrobin", "nodes": {origin.node(): 1}, "create_time": 1700000000, "update_time": 1700000000}).to_string())).await;
    etcd_put(&etcd, "/apisix/routes/1", Some(r#"{"id":"1","uri":"/hello","upstream_id":"1","plugins":{"key-auth":{},"limit-count":{"count":100,"time_window":60}},"status":1,"priority":0,"create_time":1700000000,"update_time":1700000000}"#)).await;
    etcd_put(
        &etcd,
        "/apisix/plugin_metadata/limit-count",
        Some(r#"{"id":"limit-count","limit_header":"X-Custom-Limit"}"#),
    )
    .await;
    etcd_put(
        &etcd,
        "/apisix/consumers/foo2",
        Some(r#"{"username":"foo2","create_time":1700000000,"update_time":1700000000}"#),
    )
    .await;
    etcd_put(&etcd, "/apisix/consumers/foo2/credentials/cred-1", Some(r#"{"id":"cred-1","plugins":{"key-auth":{"key":"vU/ZHVJw7b0XscDJ1Fhtig=="}},"create_time":1700000000,"update_time":1700000000}"#)).await;
    etcd_put(
        &etcd,
        "/apisix/plugin_metadata/http-logger",
        Some(r#"{"id":"http-logger","log_format":{}}"#),
    )
    .await;
    etcd_put(
        &etcd,
        "/apisix/data_plane/server_info/node-1",
        Some(r#"{"id":"node-1"}"#),
    )
    .await;

    let n = TestNode::start_with(
        &format!(
            "etcd: {{endpoints: [\"{}\"], prefix: /apisix, timeout: 1s, data_encryption: {{keyring: [edd1c9f0985e76a2]}}}}\n",
            etcd.endpoint()
        ),
        "",
    );
    let get = |key: &'static str| {
        let p = n.proxy();
        async move {
            p.send(Method::GET, "/hello", &[("apikey", key)], "")
                .await
                .status
                .as_u16()
        }
    };
    // The encrypted key opens; what is stored is not a key.
    assert_eq!(get("auth-two").await, 200);
    // limit-count's metadata applies; http-logger's (an empty log_format) is served back.
    let r = n
        .proxy()
        .send(Method::GET, "/hello", &[("apikey", "auth-two")], "")
        .await;
    assert_eq!(r.header("x-custom-limit"), Some("100"));
    let (s, v) = n
        .admin(
            Method::GET,
            "/apisix/admin/plugin_metadata/http-logger",
            None,
        )
        .await;
    assert_eq!((s.as_u16(), &v["value"]["log_format"]), (200, &json!({})));
    assert_eq!(origin.last().header("x-consumer-username"), Some("foo2"));
    assert_eq!(get("vU/ZHVJw7b0XscDJ1Fhtig==").await, 401);

    // Credentials change under the consumer, as APISIX writes them, and apply live.
    let second = sluice_config::encryption::encrypt("auth-three", b"edd1c9f0985e76a2");
    etcd_put(
        &etcd,
        "/apisix/consumers/foo2/credentials/cred-2",
        Some(&json!({"id": "cred-2", "plugins": {"key-auth": {"key": second}}}).to_string()),
    )
    .await;
    eventually("the second credential", async || {
        get("auth-three").await == 200
    })
    .await;
    etcd_put(&etcd, "/apisix/consumers/foo2/credentials/cred-1", None).await;
    eventually("the first credential removed", async || {
        get("auth-two").await == 401
    })
    .await;
    assert_eq!(get("auth-three").await, 200);
    // A route APISIX writes later applies too; its admin API shows the credentials apart.
    etcd_put(
        &etcd,
        "/apisix/routes/2",
        Some(r#"{"id":"2","uri":"/open","upstream_id":"1","create_time":1700000002}"#),
    )
    .await;
    wait_for(&n, "/open", 200).await;
    let (s, v) = n
        .admin(
            Method::GET,
            "/apisix/admin/consumers/foo2/credentials",
            None,
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        v["list"][0]["key"],
        "/apisix/consumers/foo2/credentials/cred-2"
    );

    // APISIX rewrites the consumer (without credentials: they are its own keys): they stay.
    etcd_put(
        &etcd,
        "/apisix/consumers/foo2",
        Some(r#"{"username":"foo2","desc":"renamed"}"#),
    )
    .await;
    eventually("the consumer's new value", async || {
        n.admin(Method::GET, "/apisix/admin/consumers/foo2", None)
            .await
            .1["value"]["desc"]
            == "renamed"
    })
    .await;
    assert_eq!(get("auth-three").await, 200);
    // A credential deleted through Sluice is deleted from etcd too: not back at a resync.
    let (s, _) = n
        .admin(
            Method::DELETE,
            "/apisix/admin/consumers/foo2/credentials/cred-2",
            None,
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(get("auth-three").await, 401);
    let client = sluice_admin::etcd::Etcd::new(&[etcd.endpoint()], Duration::from_secs(2)).unwrap();
    let (_, kvs) = client
        .range_prefix("/apisix/consumers/foo2/")
        .await
        .unwrap();
    assert!(
        kvs.is_empty(),
        "{:?}",
        kvs.iter().map(|k| &k.key).collect::<Vec<_>>()
    );
    drop(n);
    let n = TestNode::start_with(
        &format!(
            "etcd: {{endpoints: [\"{}\"], prefix: /apisix, timeout: 1s, data_encryption: {{keyring: [edd1c9f0985e76a2]}}}}\n",
            etcd.endpoint()
        ),
        "",
    );
    let r = n
        .proxy()
        .send(Method::GET, "/hello", &[("apikey", "auth-three")], "")
        .await;
    assert_eq!(r.status, 401, "the deleted credential came back");

    // A credential added through Sluice is written as APISIX 3 writes it: under its own key,
    // the consumer's value without credentials, so an APISIX node reading this etcd sees it.
    // Written by a node that has just started: its first write is guarded from its first
    // read of etcd, not refused with "retry" until its first resync.
    let (s, v) = n
        .admin(
            Method::PUT,
            "/apisix/admin/consumers/foo2/credentials/cred-4",
            Some(json!({"plugins": {"key-auth": {"key": "auth-four"}}})),
        )
        .await;
    assert!(s.is_success(), "{v}");
    let (_, kvs) = client.range_prefix("/apisix/consumers/foo2").await.unwrap();
    let keys: Vec<&str> = kvs.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "/apisix/consumers/foo2",
            "/apisix/consumers/foo2/credentials/cred-4"
        ]
    );
    let consumer: serde_json::Value = serde_json::from_slice(&kvs[0].value).unwrap();
    assert!(consumer.get("credentials").is_none(), "{consumer}");
    let credential: serde_json::Value = serde_json::from_slice(&kvs[1].value).unwrap();
    assert_eq!(credential["plugins"]["key-auth"]["key"], "auth-four");
    // A second node, watching, applies it (the credential's key comes in the same
    // transaction as the consumer's).
    let other = TestNode::start_with(
        &format!(
            "etcd: {{endpoints: [\"{}\"], prefix: /apisix, timeout: 1s, data_encryption: {{keyring: [edd1c9f0985e76a2]}}}}\n",
            etcd.endpoint()
        ),
        "",
    );
    let status = |node: &TestNode, key: &'static str| {
        let c = node.proxy();
        async move {
            c.send(Method::GET, "/hello", &[("apikey", key)], "")
                .await
                .status
                .as_u16()
        }
    };
    assert_eq!(status(&other, "auth-four").await, 200);
    let (s, v) = n
        .admin(
            Method::PUT,
            "/apisix/admin/consumers/foo2/credentials/cred-5",
            Some(json!({"plugins": {"key-auth": {"key": "auth-five"}}})),
        )
        .await;
    assert!(s.is_success(), "{v}");
    let (s, _) = n
        .admin(
            Method::DELETE,
            "/apisix/admin/consumers/foo2/credentials/cred-4",
            None,
        )
        .await;
    assert_eq!(s, 200);
    eventually("the other node follows", async || {
        status(&other, "auth-five").await == 200 && status(&other, "auth-four").await == 401
    })
    .await;
    let (_, kvs) = client
        .range_prefix("/apisix/consumers/foo2/")
        .await
        .unwrap();
    let keys: Vec<&str> = kvs.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(keys, ["/apisix/consumers/foo2/credentials/cred-5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_with_user_and_password_is_served_and_written_with_a_token() {
    let etcd = EtcdServer::start();
    let origin = TestOrigin::http1().run().await;
    etcd_put(
        &etcd,
        "/auth-t/routes/r",
        Some(&route(&origin, "/before").to_string()),
    )
    .await;
    // Authentication on, as an operator does it (etcdctl user add, role, auth enable).
    let addr: std::net::SocketAddr = etcd
        .endpoint()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let c = sluice_testkit::Client::new(addr);
    for (path, body) in [
        ("/v3/auth/role/add", json!({"name": "root"})),
        (
            "/v3/auth/user/add",
            json!({"name": "root", "password": "root-pw"}),
        ),
        (
            "/v3/auth/user/grant",
            json!({"user": "root", "role": "root"}),
        ),
        ("/v3/auth/enable", json!({})),
    ] {
        let r = c.send(Method::POST, path, &[], body.to_string()).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    let settings = |pw: &str| {
        format!(
            "etcd: {{endpoints: [\"{}\"], prefix: /auth-t, timeout: 1s, user: root, password: {pw}}}\n",
            etcd.endpoint()
        )
    };
    let n = TestNode::start_with(&settings("root-pw"), "");
    wait_for(&n, "/before", 200).await;
    // Writes go through with the token too, and come back through the watch.
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/after",
            Some(route(&origin, "/after")),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    wait_for(&n, "/after", 200).await;
    // A wrong password: the start fails and says why.
    let dir = n.dir.join("wrong");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("s.yaml"),
        format!("{}{}", common::settings(), settings("nope")),
    )
    .unwrap();
    let err = sluice::Node::start(sluice::Source::File(dir.join("s.yaml")), |_| {})
        .map(|_| ())
        .unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("authentication as etcd.user \"root\" failed"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_over_tls_with_a_client_certificate() {
    let pki = common::pki::Pki::new("etcd");
    let (cert, key) = pki.issue_files("etcd-server", &["127.0.0.1", "localhost"]);
    let (ccert, ckey) = pki.issue_client("etcd-client", "sluice");
    let etcd = EtcdServer::start_tls(vec![
        format!("--cert-file={}", cert.display()),
        format!("--key-file={}", key.display()),
        format!("--trusted-ca-file={}", pki.ca_file().display()),
        "--client-cert-auth".into(),
    ]);
    let origin = TestOrigin::http1().run().await;
    let tls = format!(
        "{{ca: \"{}\", cert: \"{}\", key: \"{}\"}}",
        pki.ca_file().display(),
        ccert.display(),
        ckey.display()
    );
    let n = TestNode::start_with(
        &format!(
            "etcd: {{endpoints: [\"{}\"], prefix: /tls-t, timeout: 2s, tls: {tls}}}\n",
            etcd.endpoint()
        ),
        "",
    );
    let (s, v) = n
        .admin(
            Method::PUT,
            "/admin/routes/r",
            Some(route(&origin, "/over-tls")),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    wait_for(&n, "/over-tls", 200).await;
    // Without the client certificate etcd refuses the connection: the start says so.
    let dir = n.dir.join("nocert");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("s.yaml"),
        format!(
            "{}etcd: {{endpoints: [\"{}\"], prefix: /tls-t, timeout: 1s, tls: {{ca: \"{}\"}}}}\n",
            common::settings(),
            etcd.endpoint(),
            pki.ca_file().display()
        ),
    )
    .unwrap();
    let err = sluice::Node::start(sluice::Source::File(dir.join("s.yaml")), |_| {})
        .map(|_| ())
        .unwrap_err();
    assert!(format!("{err:#}").contains("etcd"), "{err:#}");
}

/// The revision of a prefix's guard key (0: none yet), which a write to the prefix must name.
async fn guard_revision(client: &sluice_admin::etcd::Etcd, prefix: &str) -> i64 {
    let (_, kvs) = client
        .range_prefix(&format!("{prefix}/_guard"))
        .await
        .unwrap();
    kvs.first().map_or(0, |kv| kv.mod_revision)
}

/// Writes `key` under a prefix as another writer would (an admin API of another node): under
/// the prefix's guard at its current revision.
async fn write_guarded_now(
    client: &sluice_admin::etcd::Etcd,
    prefix: &str,
    key: &str,
    value: &[u8],
) -> sluice_admin::etcd::Written {
    let guard = guard_revision(client, prefix).await;
    client
        .write_guarded(&format!("{prefix}/_guard"), guard, key, Some(value))
        .await
        .unwrap()
}
