//! `kafka-logger` against a real Apache Kafka broker (4.1, KRaft mode, its jars from Maven
//! Central: test.sh fetches them), started by the test on loopback ports: entries delivered
//! to the topic as APISIX sends them (an entry per message, or a JSON array per batch; the
//! raw request with `meta_format: origin`), the key, SASL PLAIN, and a wrong password that
//! delivers nothing and fails no request. Read back from the broker's log.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rskafka::client::partition::UnknownTopicHandling;
use rskafka::client::{ClientBuilder, Credentials, SaslConfig};
use serde_json::Value;
use sluice_testkit::TestOrigin;

/// A single-node Kafka broker and controller (KRaft) in a directory of its own, stopped and
/// removed when dropped.
struct Broker {
    child: Option<Child>,
    dir: PathBuf,
    plain: u16,
    sasl: u16,
}

impl Broker {
    async fn start() -> Broker {
        let libs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/target/libs");
        assert!(
            libs.join("kafka_2.13-4.1.1.jar").exists(),
            "Kafka's jars are missing: run ./test.sh (it fetches them with Maven)"
        );
        let dir = std::env::temp_dir().join(format!("sluice-kafka-{:x}", common::fastrand_u64()));
        std::fs::create_dir_all(&dir).unwrap();
        let (plain, controller, sasl) = (
            common::free_port(),
            common::free_port(),
            common::free_port(),
        );
        let props = dir.join("server.properties");
        std::fs::write(
            &props,
            format!(
                "process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{plain},CONTROLLER://127.0.0.1:{controller},SASL_PLAINTEXT://127.0.0.1:{sasl}
advertised.listeners=PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_admin=\"admin-secret\";
log.dirs={data}
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
num.partitions=2
auto.create.topics.enable=true
group.initial.rebalance.delay.ms=0
",
                data = dir.join("data").display()
            ),
        )
        .unwrap();
        let cp = format!("{}/*", libs.display());
        let mut b = Broker {
            child: None,
            dir,
            plain,
            sasl,
        };
        let format = Command::new("java")
            .args([
                "-cp",
                &cp,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                "MkU3OEVBNTcwNTJENDM2Qk",
                "-c",
            ])
            .arg(&props)
            .output()
            .expect("java runs (test.sh installs it)");
        assert!(
            format.status.success(),
            "{}",
            String::from_utf8_lossy(&format.stderr)
        );
        let child = Command::new("java")
            .args(["-Xmx384m", "-XX:+UseSerialGC", "-cp", &cp, "kafka.Kafka"])
            .arg(&props)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        b.child = Some(child);
        // Ready when a client can read the cluster's metadata on both listeners.
        let until = Instant::now() + Duration::from_secs(60);
        for (port, sasl) in [(plain, false), (sasl, true)] {
            loop {
                let mut c = ClientBuilder::new(vec![format!("127.0.0.1:{port}")]);
                if sasl {
                    c = c.sasl_config(SaslConfig::Plain(Credentials::new(
                        "admin".into(),
                        "admin-secret".into(),
                    )));
                }
                let ready = tokio::time::timeout(Duration::from_secs(2), async {
                    c.build().await.ok()?.list_topics().await.ok()
                })
                .await;
                if matches!(ready, Ok(Some(_))) {
                    break;
                }
                assert!(Instant::now() < until, "the Kafka broker did not start");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        b
    }

    /// The messages of `topic` (both partitions): partition, key and value.
    async fn messages(&self, topic: &str, want: usize) -> Vec<(i32, Option<String>, String)> {
        let client = ClientBuilder::new(vec![format!("127.0.0.1:{}", self.plain)])
            .build()
            .await
            .unwrap();
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let mut got = Vec::new();
            for p in 0..2 {
                let Ok(pc) = client
                    .partition_client(topic, p, UnknownTopicHandling::Error)
                    .await
                else {
                    continue;
                };
                let (records, _) = pc.fetch_records(0, 1..10_000_000, 100).await.unwrap();
                for r in records {
                    got.push((
                        p,
                        r.record.key.map(|k| String::from_utf8(k).unwrap()),
                        String::from_utf8(r.record.value.unwrap()).unwrap(),
                    ));
                }
            }
            if got.len() >= want || Instant::now() > until {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A metric's value in the node's exposition (0 when absent).
fn metric(node: &common::TestNode, key: &str) -> f64 {
    let text = sluice_admin::status::exposition(node.node().control(), "")
        .expect("metrics")
        .0;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_logger_delivers_apisix_s_messages_to_a_real_broker() {
    let broker = Broker::start().await;
    let origin = TestOrigin::http1().route("/", "hello").run().await;
    let node = common::TestNode::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - uri: /one/*
    upstream_id: o
    plugins:
      kafka-logger: {{brokers: [{{host: 127.0.0.1, port: {p}}}], kafka_topic: one, key: k1, batch_max_size: 1, max_retry_count: 2}}
  - uri: /batch/*
    upstream_id: o
    plugins:
      kafka-logger:
        brokers: [{{host: 127.0.0.1, port: {s}, sasl_config: {{mechanism: PLAIN, user: admin, password: admin-secret}}}}]
        kafka_topic: batch
        batch_max_size: 2
        inactive_timeout: 1
        max_retry_count: 2
        producer_type: sync
        required_acks: -1
  - uri: /origin/*
    upstream_id: o
    plugins:
      kafka-logger: {{broker_list: {{"127.0.0.1": {p}}}, kafka_topic: origin, meta_format: origin, batch_max_size: 1, include_req_body: true, max_retry_count: 2}}
  - uri: /denied/*
    upstream_id: o
    plugins:
      kafka-logger:
        brokers: [{{host: 127.0.0.1, port: {s}, sasl_config: {{user: admin, password: wrong}}}}]
        kafka_topic: denied
        batch_max_size: 1
"#,
        o = origin.node(),
        p = broker.plain,
        s = broker.sasl,
    ));
    let cl = node.proxy();
    for path in [
        "/one/a",
        "/one/b",
        "/one/c",
        "/batch/a",
        "/batch/b",
        "/denied/a",
    ] {
        let r = cl.get(path).await;
        assert_eq!(r.status, 200, "{path}: a logger never fails a request");
    }
    let r = cl
        .send(
            hyper::Method::POST,
            "/origin/x?q=1",
            &[("x-test", "yes")],
            "the body",
        )
        .await;
    assert_eq!(r.status, 200);

    // One entry per message, keyed, in APISIX's full shape.
    let one = broker.messages("one", 3).await;
    assert_eq!(one.len(), 3, "{one:?}");
    assert!(
        one.iter().all(|m| m.0 == one[0].0),
        "one key, one partition: {one:?}"
    );
    let mut uris: Vec<String> = one
        .iter()
        .map(|(_, key, value)| {
            assert_eq!(key.as_deref(), Some("k1"));
            let v: Value = serde_json::from_str(value).unwrap();
            assert_eq!(v["response"]["status"], 200);
            v["request"]["uri"].as_str().unwrap().to_owned()
        })
        .collect();
    uris.sort();
    assert_eq!(uris, ["/one/a", "/one/b", "/one/c"]);

    // Over SASL PLAIN, a batch of two is one message: a JSON array.
    let batch = broker.messages("batch", 1).await;
    assert_eq!(batch.len(), 1, "{batch:?}");
    let v: Value = serde_json::from_str(&batch[0].2).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(batch[0].1, None, "no key");

    // meta_format origin: the request as it came, body included.
    let raw = broker.messages("origin", 1).await;
    assert_eq!(raw.len(), 1, "{raw:?}");
    let text = &raw[0].2;
    assert!(
        text.starts_with("POST /origin/x?q=1 HTTP/1.1\r\n"),
        "{text}"
    );
    assert!(
        text.to_ascii_lowercase().contains("\r\nx-test: yes\r\n"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\nthe body"), "{text}");

    // A wrong password: the batch fails (counted), nothing reaches the topic.
    let failed =
        r#"sluice_logger_entries_total{plugin="kafka-logger",name="kafka logger",result="failed"}"#;
    let until = Instant::now() + Duration::from_secs(20);
    while metric(&node, failed) < 1.0 {
        assert!(
            Instant::now() < until,
            "the denied batch was not counted as failed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(broker.messages("denied", 0).await.is_empty());
}

#[test]
fn bad_configurations_are_refused_with_their_paths() {
    let at = |field: &str, says: &str| format!("plugins.kafka-logger.{field}: {says}");
    let b = "brokers: [{host: 127.0.0.1, port: 9092}]";
    common::assert_refusals(
        "kafka-logger",
        &[
            (
                "{kafka_topic: t}",
                "plugins.kafka-logger: give brokers".to_owned(),
            ),
            (
                "{brokers: [{host: h, port: 1}], broker_list: {h: 1}, kafka_topic: t}",
                "plugins.kafka-logger: give brokers or broker_list, not both".to_owned(),
            ),
            (&format!("{{{b}}}"), at("kafka_topic", "is required")),
            (
                "{brokers: [], kafka_topic: t}",
                at("brokers", "must list at least one broker"),
            ),
            (
                "{brokers: [{host: 127.0.0.1, port: 0}], kafka_topic: t}",
                at("brokers[0].port", "must be"),
            ),
            (
                &format!("{{{b}, kafka_topic: t, required_acks: 0}}"),
                at("required_acks", "must be 1 or -1"),
            ),
            (
                &format!("{{{b}, kafka_topic: t, producer_type: fast}}"),
                at("producer_type", "must be async or sync"),
            ),
            (
                &format!("{{{b}, kafka_topic: t, meta_format: raw}}"),
                at("meta_format", "must be default or origin"),
            ),
            (
                "{brokers: [{host: h, port: 1, sasl_config: {mechanism: GSSAPI, user: u, password: p}}], kafka_topic: t}",
                at(
                    "brokers[0].sasl_config.mechanism",
                    "must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
                ),
            ),
            (
                &format!("{{{b}, kafka_topic: t, timeout: 0}}"),
                at("timeout", "must be"),
            ),
        ],
    );
}
