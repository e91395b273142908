//! The plugin engine end to end: the seeds' APISIX configurations (scenarios 2 and 3),
//! phases, consumers, services, global rules, `_meta`, and plugin configuration errors.

#![allow(clippy::unwrap_used)]

use hyper::Method;
use sluice_testkit::{Gateway, TestOrigin};

fn scenario3(origin: &TestOrigin, count: u64) -> String {
    // seeds/003 scenario 3, as published (key-auth with an empty config, then limit-count).
    format!(
        r#"
routes:
  - uri: /hello
    upstream:
      nodes:
        "{}": 1
      type: roundrobin
    plugins:
      key-auth:
      limit-count:
        count: {count}
        time_window: 60
        rejected_code: 503
        key: remote_addr
consumers:
  - username: jack
    plugins:
      key-auth:
        key: user-key
#END
"#,
        origin.node()
    )
}

#[tokio::test]
async fn the_seed_scenario_3_config_authenticates_and_limits() {
    let origin = TestOrigin::http1()
        .route("/hello", "hello world")
        .run()
        .await;
    let gw = Gateway::start(&scenario3(&origin, 3));
    let cl = gw.client();
    let r = cl
        .send(Method::GET, "/hello", &[("apikey", "user-key")], "")
        .await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "hello world"));
    assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("2"));
    assert!(
        r.header("x-ratelimit-reset")
            .is_some_and(|s| s.parse::<u64>().unwrap() <= 60)
    );

    let missing = cl.get("/hello").await;
    assert_eq!(missing.status, 401);
    assert_eq!(missing.json()["message"], "Missing API key in request");
    let wrong = cl
        .send(Method::GET, "/hello", &[("apikey", "nope")], "")
        .await;
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.json()["message"], "Invalid API key in request");
    // Denied requests are not counted: key-auth runs first (priority 2500 > 1002).
    for left in ["1", "0"] {
        let r = cl
            .send(Method::GET, "/hello", &[("apikey", "user-key")], "")
            .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-ratelimit-remaining"), Some(left));
    }
    let over = cl
        .send(Method::GET, "/hello", &[("apikey", "user-key")], "")
        .await;
    assert_eq!(over.status, 503, "{}", over.text());
    assert_eq!(over.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(origin.requests().len(), 3);
}

#[tokio::test]
async fn the_seed_scenario_2_config_loads_and_counts_per_node_across_workers() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        r#"
workers: 2
routes:
  - uri: /hello
    upstream:
      nodes:
        "{}": 1
      type: roundrobin
    plugins:
      limit-count:
        count: 10
        time_window: 60
        rejected_code: 503
        key: remote_addr
#END
"#,
        origin.node()
    ));
    // Many connections, spread by the kernel over both workers: one limit for the node.
    let mut ok = 0;
    let mut limited = 0;
    for _ in 0..30 {
        match gw.client().get("/hello").await.status.as_u16() {
            200 => ok += 1,
            503 => limited += 1,
            s => panic!("unexpected {s}"),
        }
    }
    assert_eq!((ok, limited), (10, 20));
}

#[tokio::test]
async fn consumer_plugins_run_once_the_consumer_is_known() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        r#"
routes:
  - uri: /*
    upstream: {{nodes: {{"{}": 1}}}}
    plugins:
      key-auth: {{}}
      limit-count: {{count: 100, time_window: 60}}
consumers:
  - username: gold
    plugins:
      key-auth: {{key: gold-key}}
  - username: trial
    plugins:
      key-auth: {{key: trial-key}}
      limit-count: {{count: 1, time_window: 60, rejected_code: 429}}
"#,
        origin.node()
    ));
    let cl = gw.client();
    let get = |key: &'static str| {
        let cl = cl.clone();
        async move { cl.send(Method::GET, "/x", &[("apikey", key)], "").await }
    };
    assert_eq!(get("trial-key").await.status, 200);
    let second = get("trial-key").await;
    assert_eq!(
        second.status, 429,
        "the consumer's limit replaces the route's"
    );
    assert_eq!(second.header("x-ratelimit-limit"), Some("1"));
    for _ in 0..3 {
        let r = get("gold-key").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-ratelimit-limit"), Some("100"));
    }
}

#[tokio::test]
async fn services_share_upstream_and_plugins_and_routes_override_them() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        r#"
services:
  - id: api
    upstream: {{nodes: {{"{}": 1}}}}
    plugins:
      limit-count: {{count: 1, time_window: 60, rejected_code: 429}}
routes:
  - uri: /shared
    service_id: api
  - uri: /own
    service_id: api
    plugins:
      limit-count: {{count: 5, time_window: 60, rejected_code: 429}}
"#,
        origin.node()
    ));
    let cl = gw.client();
    assert_eq!(cl.get("/shared").await.status, 200);
    assert_eq!(cl.get("/shared").await.status, 429);
    for _ in 0..5 {
        assert_eq!(cl.get("/own").await.status, 200);
    }
    assert_eq!(cl.get("/own").await.status, 429);
}

#[tokio::test]
async fn global_rules_run_on_every_request_even_unmatched_ones() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        r#"
global_rules:
  - id: everyone
    plugins:
      limit-count: {{count: 2, time_window: 60, rejected_code: 429, key_type: constant, key: all}}
routes:
  - uri: /in
    upstream: {{nodes: {{"{}": 1}}}}
"#,
        origin.node()
    ));
    let cl = gw.client();
    assert_eq!(cl.get("/in").await.status, 200);
    let unmatched = cl.get("/out").await;
    assert_eq!(unmatched.status, 404);
    assert_eq!(unmatched.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(cl.get("/in").await.status, 429);
    assert_eq!(cl.get("/out").await.status, 429);
}

#[tokio::test]
async fn meta_disable_turns_a_plugin_off() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins:\n      key-auth: {{_meta: {{disable: true}}}}\n",
        origin.node()
    ));
    assert_eq!(gw.client().get("/x").await.status, 200);
}

#[test]
fn plugin_errors_are_reported_with_every_other_error() {
    let errors = sluice_config::load_str_with(
        r#"
routes:
  - uri: /a
    upstream: {nodes: {"127.0.0.1:1": 1}}
    plugins:
      limit-count: {count: 0, time_window: 60}
      no-such: {}
  - uri: /b
    service_id: missing
consumers:
  - username: a
    plugins: {key-auth: {key: same}}
  - username: b
    plugins: {key-auth: {key: same}}
  - username: "bad name"
"#,
        &sluice_plugins::builtin(),
    )
    .unwrap_err();
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines[0],
        "routes[0].plugins.limit-count.count: must be a whole number from 1 to 1000000000000, got 0"
    );
    assert!(
        lines[1].starts_with(
            "routes[0].plugins.no-such: unknown plugin, expected one of acl, ai-prompt-decorator, ai-prompt-guard, "
        ),
        "{}",
        lines[1]
    );
    assert_eq!(
        lines[2],
        "routes[1].service_id: service \"missing\" not found"
    );
    // In the file's order, though consumers' keys are checked together after the rest.
    assert_eq!(
        lines[3],
        "consumers[1].plugins.key-auth.key: key already used by consumers[0]"
    );
    assert_eq!(
        lines[4],
        "consumers[2].username: invalid username \"bad name\": use 1 to 256 letters, digits, \"-\" and \"_\""
    );
    assert_eq!(lines.len(), 5, "{lines:#?}");
}

/// A third-party plugin, registered through the public API: it awaits a timer in
/// `access_async` (as a plugin waiting on Redis would) and records statuses in `log`.
mod probe {
    use std::sync::Arc;
    use std::time::Duration;

    use parking_lot::Mutex;
    use serde_json::Value;
    use sluice_config::Validator;
    use sluice_core::http::RequestHead;
    use sluice_core::plugin::{BuildCx, LocalFuture, PluginFactory};
    use sluice_core::{Ctx, Flow, Phases, Plugin};

    pub(crate) struct Factory(pub(crate) Arc<Mutex<Vec<u16>>>);

    impl PluginFactory for Factory {
        fn name(&self) -> &'static str {
            "probe"
        }
        fn priority(&self) -> i32 {
            1
        }
        fn build(
            &self,
            _: &Value,
            _: &mut BuildCx<'_>,
            _: &mut Validator,
        ) -> Option<Arc<dyn Plugin>> {
            Some(Arc::new(Probe(self.0.clone())))
        }
    }

    struct Probe(Arc<Mutex<Vec<u16>>>);

    impl Plugin for Probe {
        fn phases(&self) -> Phases {
            Phases::ACCESS_ASYNC.with(Phases::LOG)
        }
        fn access_async<'a>(
            &'a self,
            req: &'a mut RequestHead,
            _cx: &'a mut Ctx<'_>,
        ) -> LocalFuture<'a, Flow> {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                req.set_header("X-Probe", b"awaited");
                Flow::Continue
            })
        }
        fn log(&self, _req: &RequestHead, done: &sluice_core::plugin::Done, _cx: &Ctx<'_>) {
            self.0.lock().push(done.status);
        }
    }
}

#[tokio::test]
async fn a_third_party_plugin_can_await_io_and_see_the_log_phase() {
    let origin = TestOrigin::http1().run().await;
    let statuses = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let registry = sluice_plugins::Registry::new().with(probe::Factory(statuses.clone()));
    let yaml = format!(
        "listen: 127.0.0.1:0\nworkers: 1\nroutes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins: {{probe: {{}}}}\n",
        origin.node()
    );
    let cfg = sluice_config::load_str_with(&yaml, &registry).unwrap();
    let server = sluice_proxy::Server::start(&cfg, std::sync::Arc::new(registry)).unwrap();
    let client = sluice_testkit::Client::new(server.local_addrs()[0]);
    assert_eq!(client.get("/x").await.status, 200);
    assert_eq!(origin.last().header("x-probe"), Some("awaited"));
    // The log phase runs once the response is out, so possibly just after the client read it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while statuses.lock().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(*statuses.lock(), vec![200]);
    std::thread::spawn(move || server.shutdown());
}

#[tokio::test]
async fn consumers_with_the_same_limit_settings_have_their_own_counters() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        r#"
routes:
  - uri: /*
    upstream: {{nodes: {{"{}": 1}}}}
    plugins: {{key-auth: {{}}}}
consumers:
  - username: a
    plugins: {{key-auth: {{key: ka}}, limit-count: {{count: 1, time_window: 60, rejected_code: 429}}}}
  - username: b
    plugins: {{key-auth: {{key: kb}}, limit-count: {{count: 1, time_window: 60, rejected_code: 429}}}}
"#,
        origin.node()
    ));
    let cl = gw.client();
    let get = |key: &'static str| {
        let cl = cl.clone();
        async move {
            cl.send(Method::GET, "/", &[("apikey", key)], "")
                .await
                .status
                .as_u16()
        }
    };
    assert_eq!(get("ka").await, 200);
    assert_eq!(
        get("kb").await,
        200,
        "b has its own counter, whatever a did"
    );
    assert_eq!(get("ka").await, 429);
    assert_eq!(get("kb").await, 429);
}

#[tokio::test]
async fn a_disabled_credential_identifies_nobody() {
    let origin = TestOrigin::http1().run().await;
    let gw = Gateway::start(&format!(
        "routes:\n  - uri: /*\n    upstream: {{nodes: {{\"{}\": 1}}}}\n    plugins: {{key-auth: {{}}}}\nconsumers:\n  - username: old\n    plugins: {{key-auth: {{key: revoked, _meta: {{disable: true}}}}}}\n",
        origin.node()
    ));
    assert_eq!(
        gw.client()
            .send(Method::GET, "/", &[("apikey", "revoked")], "")
            .await
            .status,
        401
    );
}
