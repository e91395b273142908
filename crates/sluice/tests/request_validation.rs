//! APISIX's `request-validation` through a live gateway: header and body schemas (JSON and
//! forms), its refusals, the bodies two parsers could read differently, a hostile pattern.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use hyper::Method;
use sluice_testkit::{Gateway, TestOrigin};

#[tokio::test]
async fn request_validation_refuses_what_its_schemas_do_not_admit() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let gw = Gateway::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /body
    upstream_id: o
    plugins:
      request-validation:
        body_schema:
          type: object
          required: [required_payload]
          properties:
            required_payload: {{type: string}}
            boolean_payload: {{type: boolean}}
            array_payload: {{type: array, minItems: 1, items: {{type: integer, minimum: 200, maximum: 599}}, uniqueItems: true}}
        rejected_msg: required field missing
  - uri: /headers
    upstream_id: o
    plugins:
      request-validation:
        header_schema:
          type: object
          required: [x-api-version]
          properties:
            x-api-version: {{type: string, pattern: "^v[0-9]+$"}}
        rejected_code: 422
  - uri: /draft2020
    upstream_id: o
    plugins:
      request-validation:
        body_schema: {{$schema: "https://json-schema.org/draft/2020-12/schema", prefixItems: [{{type: integer}}]}}
  - uri: /plain
    upstream_id: o
    plugins:
      request-validation:
        body_schema: {{type: object, required: [name], properties: {{name: {{type: string, pattern: "^(a+)+$"}}}}}}
"#,
        o = origin.node()
    ));
    let cl = gw.client();
    let post = |path: &'static str, ct: &'static str, body: String| {
        let cl = cl.clone();
        async move {
            cl.send(Method::POST, path, &[("content-type", ct)], body)
                .await
        }
    };
    let json = "application/json";

    let r = post(
        "/body",
        json,
        r#"{"required_payload": "a", "array_payload": [200, 302]}"#.into(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        &origin.last().body[..],
        br#"{"required_payload": "a", "array_payload": [200, 302]}"#,
        "forwarded as sent"
    );
    for bad in [
        r#"{"boolean_payload": true}"#,
        r#"{"required_payload": "a", "array_payload": [200, 200]}"#,
        r#"{"required_payload": 1}"#,
        "not json",
        "",
        // Read differently by parsers that keep the first key and those that keep the last.
        r#"{"required_payload": 1, "required_payload": "a"}"#,
    ] {
        let r = post("/body", json, bad.into()).await;
        assert_eq!(r.status, 400, "{bad}");
        assert_eq!(r.text(), "required field missing\n", "{bad}");
    }
    // A form body is validated as an object of its arguments.
    let form = "application/x-www-form-urlencoded";
    assert_eq!(
        post("/body", form, "required_payload=x%20y&b=1".into())
            .await
            .status,
        200
    );
    assert_eq!(post("/body", form, "other=1".into()).await.status, 400);
    // A repeated Content-Type is refused.
    let r = cl
        .send(
            Method::POST,
            "/body",
            &[("content-type", json), ("content-type", form)],
            r#"{"required_payload": "a"}"#,
        )
        .await;
    assert_eq!(r.status, 400);

    let get = |version: Option<&'static str>| {
        let cl = cl.clone();
        async move {
            let h: Vec<(&str, &str)> = version.map(|v| ("x-api-version", v)).into_iter().collect();
            cl.send(Method::GET, "/headers", &h, "").await
        }
    };
    assert_eq!(get(Some("v2")).await.status, 200);
    let r = get(Some("2")).await;
    assert_eq!(r.status, 422);
    assert!(
        r.text().contains("v[0-9]+"),
        "the validator's message: {}",
        r.text()
    );
    let r = get(None).await;
    assert_eq!(r.status, 422);
    assert!(r.text().contains("x-api-version"), "{}", r.text());

    // A schema naming its draft is read in that draft (prefixItems is 2020-12's).
    assert_eq!(
        post("/draft2020", json, "[1, \"x\"]".into()).await.status,
        200
    );
    assert_eq!(post("/draft2020", json, "[\"x\"]".into()).await.status, 400);

    // A pattern that backtracks exponentially in other engines is matched in linear time: the
    // answer comes, and the gateway serves others meanwhile.
    let hostile = format!(r#"{{"name": "{}!"}}"#, "a".repeat(100_000));
    let r = tokio::time::timeout(Duration::from_secs(20), post("/plain", json, hostile))
        .await
        .expect("answered");
    assert_eq!(r.status, 400);
    assert_eq!(
        post("/plain", json, r#"{"name": "aaa"}"#.into())
            .await
            .status,
        200
    );
}

#[test]
fn bad_request_validation_settings_are_refused_with_their_place() {
    let plugins = sluice_plugins::shared();
    let refused = |conf: &str| {
        let yaml = format!(
            "routes:\n  - {{uri: /a, upstream: {{nodes: {{\"127.0.0.1:1\": 1}}}}, plugins: {{request-validation: {conf}}}}}\n"
        );
        match sluice_config::load_str_with(&yaml, &*plugins) {
            Ok(_) => panic!("accepted: {yaml}"),
            Err(e) => e.to_string(),
        }
    };
    let at = "routes[0].plugins.request-validation";
    let e = refused("{}");
    assert!(
        e.contains(&format!("{at}: give header_schema, body_schema or both")),
        "{e}"
    );
    let e = refused("{body_schema: {type: 12}}");
    assert!(
        e.contains(&format!("{at}.body_schema: invalid JSON Schema")),
        "{e}"
    );
    let e = refused("{header_schema: {type: object, properties: {a: {pattern: \"(\"}}}}");
    assert!(
        e.contains(&format!("{at}.header_schema: invalid JSON Schema")),
        "{e}"
    );
    let e = refused("{body_schema: {properties: {a: {pattern: \"(?=a)b\"}}}}");
    assert!(
        e.contains(&format!("{at}.body_schema: invalid JSON Schema")),
        "look-around: {e}"
    );
    let e = refused("{body_schema: {type: object}, rejected_code: 600}");
    assert!(e.contains(&format!("{at}.rejected_code")), "{e}");
    let e = refused("{body_schema: {type: object}, rejected_msg: \"\"}");
    assert!(
        e.contains(&format!("{at}.rejected_msg: must be 1 to 256 characters")),
        "{e}"
    );
    let e = refused("{body_schema: {$ref: \"http://example.com/schema.json\"}}");
    assert!(
        e.contains(&format!("{at}.body_schema: invalid JSON Schema")),
        "no remote references: {e}"
    );
}
