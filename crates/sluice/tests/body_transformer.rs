//! APISIX's `body-transformer` through a live gateway: a JSON request forwarded as the SOAP
//! body a node wants (length, chunked and pipelined), the node's XML answer returned as JSON,
//! and a template that never ends costing its own request only.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use hyper::Method;
use sluice_testkit::{Gateway, RawClient, Reply, TestOrigin};

const SOAP_ANSWER: &str = r#"<?xml version="1.0"?><SOAP-ENV:Envelope xmlns:SOAP-ENV="http://schemas.xmlsoap.org/soap/envelope/"><SOAP-ENV:Body><ns2:getCountryResponse xmlns:ns2="http://spring.io/guides/gs-producing-web-service"><ns2:country><ns2:name>Spain</ns2:name><ns2:population>46704314</ns2:population><ns2:capital>Madrid</ns2:capital><ns2:currency>EUR</ns2:currency></ns2:country></ns2:getCountryResponse></SOAP-ENV:Body></SOAP-ENV:Envelope>"#;

fn config(origin: &TestOrigin) -> String {
    format!(
        r#"listen: [{{addr: "127.0.0.1:0", http2: true}}]
upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - id: soap
    uri: /ws
    upstream_id: o
    plugins:
      body-transformer:
        request:
          input_format: json
          template: '<?xml version="1.0"?><soap-env:Envelope xmlns:soap-env="http://schemas.xmlsoap.org/soap/envelope/"><soap-env:Body><ns0:getCountryRequest xmlns:ns0="http://spring.io/guides/gs-producing-web-service"><ns0:name>{{{{_escape_xml(name)}}}}</ns0:name></ns0:getCountryRequest></soap-env:Body></soap-env:Envelope>'
        response:
          input_format: xml
          template: '{{"status":"{{{{_ctx.var.status}}}}","currency":"{{{{Envelope.Body.getCountryResponse.country.currency}}}}","population":{{{{Envelope.Body.getCountryResponse.country.population}}}},"capital":"{{{{Envelope.Body.getCountryResponse.country.capital}}}}","name":"{{{{Envelope.Body.getCountryResponse.country.name}}}}"}}'
      proxy-rewrite:
        headers: {{set: {{Content-Type: text/xml}}}}
  - uri: /resp/*
    upstream_id: o
    plugins:
      body-transformer: {{response: {{template: "made {{{{_ctx.var.status}}}}"}}}}
  - uri: /loop
    upstream_id: o
    plugins:
      body-transformer: {{request: {{template: "{{% while true do end %}}"}}}}
  - uri: /plain
    upstream_id: o
"#,
        o = origin.node()
    )
}

#[tokio::test]
async fn a_json_client_talks_to_a_soap_node() {
    let origin = TestOrigin::http1()
        .handler("/ws", |_| {
            Reply::ok(SOAP_ANSWER).header("Content-Type", "text/xml;charset=utf-8")
        })
        .handler("/resp/empty", |_| Reply::status(204))
        .route("/", "plain")
        .run()
        .await;
    let gw = Gateway::start(&config(&origin));
    // Answers without a body stay so on a kept-alive connection: a HEAD, a 204, then a GET.
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(b"HEAD /resp/x HTTP/1.1\r\nHost: gw\r\n\r\nGET /resp/empty HTTP/1.1\r\nHost: gw\r\n\r\nGET /plain HTTP/1.1\r\nHost: gw\r\n\r\n").await;
    assert_eq!(c.response_to(true).await.status, 200);
    assert_eq!(c.response_to(false).await.status, 204);
    let plain = c.response_to(false).await;
    assert_eq!((plain.status, plain.text()), (200, "plain".to_owned()));
    let r = gw
        .client()
        .send(
            Method::POST,
            "/ws",
            &[("content-type", "application/json")],
            r#"{"name": "Spain"}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({"status": "200", "currency": "EUR", "population": 46704314,
            "capital": "Madrid", "name": "Spain"})
    );
    let seen = origin.last();
    let want = r#"<?xml version="1.0"?><soap-env:Envelope xmlns:soap-env="http://schemas.xmlsoap.org/soap/envelope/"><soap-env:Body><ns0:getCountryRequest xmlns:ns0="http://spring.io/guides/gs-producing-web-service"><ns0:name>Spain</ns0:name></ns0:getCountryRequest></soap-env:Body></soap-env:Envelope>"#;
    assert_eq!(std::str::from_utf8(&seen.body).unwrap(), want);
    assert_eq!(
        seen.header("content-length"),
        Some(&*want.len().to_string())
    );
    assert_eq!(seen.header("content-type"), Some("text/xml"));

    // A chunked body, with the next request pipelined behind it on the same connection: the
    // new body takes exactly the old one's place.
    let mut c = RawClient::connect(gw.addr()).await;
    c.send(
        b"POST /ws HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n7\r\n{\"name\"\r\na\r\n: \"A & B\"}\r\n0\r\n\r\nGET /plain HTTP/1.1\r\nHost: gw\r\n\r\n",
    )
    .await;
    let first = c.response_to(false).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let second = c.response_to(false).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.text(), "plain");
    let bodies: Vec<String> = origin
        .requests()
        .iter()
        .map(|r| String::from_utf8(r.body.to_vec()).unwrap())
        .collect();
    let n = bodies.len();
    assert!(
        bodies[n - 2].contains("<ns0:name>A &amp;amp; B</ns0:name>"),
        "{}",
        bodies[n - 2]
    );
    assert_eq!(bodies[n - 1], "", "the pipelined request has no body");
    assert_eq!(origin.requests()[n - 2].header("transfer-encoding"), None);

    // Over HTTP/2 (curl, prior knowledge): the same exchange.
    let addr = gw.addr();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-sS", "--http2-prior-knowledge", "--max-time", "10"])
            .args([
                "-H",
                "content-type: application/json",
                "-d",
                r#"{"name": "Spain"}"#,
            ])
            .arg(format!("http://{addr}/ws"))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["capital"], "Madrid", "{json}");
    assert_eq!(std::str::from_utf8(&origin.last().body).unwrap(), want);
}

#[tokio::test]
async fn a_template_that_never_ends_costs_its_request_only() {
    let origin = TestOrigin::http1().route("/", "plain").run().await;
    let gw = Gateway::start(&config(&origin));
    let slow = {
        let c = gw.client();
        tokio::spawn(async move {
            let t = Instant::now();
            let r = c.send(Method::POST, "/loop", &[], "{}").await;
            (r.status, r.text(), t.elapsed())
        })
    };
    let (status, text, took) = slow.await.unwrap();
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("ran too long"), "{text}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let r = gw.client().send(Method::GET, "/plain", &[], "").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        origin.requests().len(),
        1,
        "the looping request never went upstream"
    );
}
