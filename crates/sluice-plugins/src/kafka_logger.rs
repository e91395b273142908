//! `kafka-logger`: sends log entries to an Apache Kafka topic, as APISIX's `kafka-logger`
//! (priority 403): `{brokers: [{host, port, sasl_config: {mechanism, user, password}}],
//! kafka_topic, key, producer_type: async, required_acks: 1, timeout: 3, meta_format:
//! default, cluster_name: 1, tls: {verify}}`, the deprecated `broker_list` (`{host: port}`),
//! lua-resty-kafka's producer settings, and the loggers' common fields (`logger/mod.rs`).
//!
//! A batch is one Kafka message, as APISIX sends it: the entry when `batch_max_size` is 1,
//! else a JSON array of the entries; `meta_format: origin` sends the request as it came (its
//! head, then its body when `include_req_body`) instead of the entry. The message's key is
//! `key`; it picks the partition (a hash of the key, as lua-resty-kafka's default
//! partitioner), and without a key batches take the partitions in turn.
//!
//! Through `rskafka` (InfluxData's pure-Rust Kafka client), one client per worker, made when
//! the worker sends its first batch. What differs from lua-resty-kafka:
//! - `required_acks`: rskafka always waits for every in-sync replica (`-1`), so `1` is as
//!   safe as `-1`, and as slow.
//! - `producer_type` (`sync`, `async`), `producer_batch_num`, `producer_batch_size`,
//!   `producer_max_buffering`, `producer_time_linger`, `meta_refresh_interval` and
//!   `api_version` are lua-resty-kafka's own buffering and protocol settings: accepted and
//!   checked as APISIX checks them. Here the batch processor is the buffer and every batch
//!   is sent when it is ready, with message timestamps.
//! - One SASL setting for the cluster: the first broker's `sasl_config`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use rskafka::client::partition::{Compression, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder, Credentials, SaslConfig};
use rskafka::record::Record;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::plugin::{LocalFuture, parse_config};

use crate::logger::net::json_batch;
use crate::logger::{Failed, Kind, Logged, Sink};
use crate::util::{Num, whole, whole_field};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    brokers: Option<Vec<Broker>>,
    #[serde(default)]
    broker_list: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    kafka_topic: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    producer_type: Option<String>,
    #[serde(default)]
    required_acks: Option<Num>,
    #[serde(default)]
    timeout: Option<Num>,
    #[serde(default)]
    meta_format: Option<String>,
    #[serde(default)]
    cluster_name: Option<Num>,
    #[serde(default)]
    tls: Option<Tls>,
    #[serde(default)]
    producer_batch_num: Option<Num>,
    #[serde(default)]
    producer_batch_size: Option<Num>,
    #[serde(default)]
    producer_max_buffering: Option<Num>,
    #[serde(default)]
    producer_time_linger: Option<Num>,
    #[serde(default)]
    meta_refresh_interval: Option<Num>,
    #[serde(default)]
    api_version: Option<Num>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
struct Broker {
    host: String,
    port: Num,
    #[serde(default)]
    sasl_config: Option<Sasl>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
struct Sasl {
    #[serde(default)]
    mechanism: Option<String>,
    user: String,
    password: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Tls {
    #[serde(default)]
    verify: bool,
}

const KIND: Kind = Kind {
    encrypted: &["brokers.sasl_config.password"],
    ..Kind::named("kafka-logger", 403, "kafka logger")
};

crate::logger::factory!(KIND, Config, own);

/// Its own fields, checked, as its sink.
fn own(
    own: &Value,
    given: &crate::logger::Given<'_>,
    v: &mut Validator,
) -> Option<(Arc<dyn Sink>, Option<usize>)> {
    let c: Config = parse_config(own, v)?;
    let mut ok = true;
    let mut brokers = Vec::new();
    let mut sasl = None;
    match (&c.brokers, &c.broker_list) {
        (None, None) => {
            v.error("give brokers (or the deprecated broker_list)");
            ok = false;
        }
        (Some(list), _) if list.is_empty() => {
            v.error_at("brokers", "must list at least one broker");
            ok = false;
        }
        _ => {}
    }
    if let Some(list) = &c.brokers {
        v.field("brokers", |v| {
            for (i, b) in list.iter().enumerate() {
                v.index(i, |v| {
                    if list[..i].contains(b) {
                        v.error("is listed twice");
                        ok = false;
                    }
                    match broker_addr(&b.host, b.port, v) {
                        Some(a) => brokers.push(a),
                        None => ok = false,
                    }
                    if let Some(s) = &b.sasl_config {
                        let made = v.field("sasl_config", |v| sasl_of(s, v));
                        match made {
                            Some(m) if sasl.is_none() => sasl = Some(m),
                            Some(_) => {}
                            None => ok = false,
                        }
                    }
                });
            }
        });
    }
    if let Some(map) = &c.broker_list {
        if map.is_empty() {
            v.error_at("broker_list", "must name at least one broker");
            ok = false;
        }
        v.field("broker_list", |v| {
            for (host, port) in map {
                v.key(host, |v| {
                    let port = serde_json::from_value::<Num>(port.clone()).ok();
                    match port {
                        Some(p) => match broker_addr(host, p, v) {
                            Some(a) => brokers.push(a),
                            None => ok = false,
                        },
                        None => {
                            v.error("must be a port number from 1 to 65535");
                            ok = false;
                        }
                    }
                });
            }
        });
    }
    let topic = match c.kafka_topic.as_deref() {
        Some(t) if !t.is_empty() => Some(t.to_owned()),
        Some(_) => {
            v.error_at("kafka_topic", "must not be empty");
            None
        }
        None => {
            v.error_at("kafka_topic", "is required");
            None
        }
    };
    let one_of = |field: &str, value: Option<&str>, allowed: &[&str], v: &mut Validator| {
        if let Some(x) = value
            && !allowed.contains(&x)
        {
            v.error_at(field, format!("must be {}, got \"{x}\"", allowed.join(" or ")));
            return false;
        }
        true
    };
    ok &= one_of("producer_type", c.producer_type.as_deref(), &["async", "sync"], v);
    ok &= one_of("meta_format", c.meta_format.as_deref(), &["default", "origin"], v);
    if let Some(a) = c.required_acks
        && !matches!(a.whole(), Some(1 | -1))
    {
        v.error_at("required_acks", "must be 1 or -1");
        ok = false;
    }
    if let Some(a) = c.api_version
        && !matches!(a.whole(), Some(0..=2))
    {
        v.error_at("api_version", "must be 0, 1 or 2");
        ok = false;
    }
    let timeout = whole_field("timeout", c.timeout, 3, (1, 3600), " seconds", v);
    let positive = [
        ("cluster_name", c.cluster_name),
        ("producer_batch_num", c.producer_batch_num),
        ("producer_max_buffering", c.producer_max_buffering),
        ("producer_time_linger", c.producer_time_linger),
        ("meta_refresh_interval", c.meta_refresh_interval),
    ];
    for (field, n) in positive {
        ok &= whole_field(field, n, 1, (1, 1 << 40), "", v).is_some();
    }
    ok &= whole_field("producer_batch_size", c.producer_batch_size, 0, (0, 1 << 40), " bytes", v)
        .is_some();
    let tls = match &c.tls {
        None => None,
        Some(t) => match sluice_core::tls_client::config(t.verify) {
            Some(cfg) => Some(Arc::new(cfg)),
            None => {
                v.error_at("tls.verify", "no trusted root certificates on this machine");
                return None;
            }
        },
    };
    let (topic, timeout) = (topic?, timeout?);
    if !ok {
        return None;
    }
    let sink = Kafka {
        brokers,
        sasl,
        tls,
        topic,
        key: c.key.map(String::into_bytes),
        timeout: Duration::from_secs(timeout),
        single: given.batch_max_size == 1,
        origin: c.meta_format.as_deref() == Some("origin"),
        clients: Mutex::new(HashMap::new()),
        turn: std::sync::atomic::AtomicUsize::new(0),
    };
    Some((Arc::new(sink) as Arc<dyn Sink>, None))
}

fn broker_addr(host: &str, port: Num, v: &mut Validator) -> Option<String> {
    let port = v.field("port", |v| whole(port, 1, 65_535, "", v));
    if host.is_empty() || host.bytes().any(|b| b.is_ascii_whitespace() || b == b'/') {
        v.error_at("host", "must be a host name or an IP address");
        return None;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    Some(if bare.contains(':') {
        format!("[{bare}]:{}", port?)
    } else {
        format!("{bare}:{}", port?)
    })
}

fn sasl_of(s: &Sasl, v: &mut Validator) -> Option<SaslConfig> {
    let creds = Credentials::new(s.user.clone(), s.password.clone());
    match s.mechanism.as_deref().unwrap_or("PLAIN") {
        "PLAIN" => Some(SaslConfig::Plain(creds)),
        "SCRAM-SHA-256" => Some(SaslConfig::ScramSha256(creds)),
        "SCRAM-SHA-512" => Some(SaslConfig::ScramSha512(creds)),
        other => {
            v.error_at(
                "mechanism",
                format!("must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got \"{other}\""),
            );
            None
        }
    }
}

/// A worker's producer: its client and a client per partition of the topic.
struct Producer {
    partitions: Vec<PartitionClient>,
    /// Kept for as long as the partition clients (their connections are its).
    _client: Client,
}

struct Kafka {
    brokers: Vec<String>,
    sasl: Option<SaslConfig>,
    tls: Option<Arc<rustls::ClientConfig>>,
    topic: String,
    key: Option<Vec<u8>>,
    timeout: Duration,
    single: bool,
    origin: bool,
    /// Each worker's producer (a client's connections belong to the worker that made them).
    clients: Mutex<HashMap<std::thread::ThreadId, Arc<Producer>>>,
    /// The next partition for a batch without a key.
    turn: std::sync::atomic::AtomicUsize,
}

impl Kafka {
    /// This worker's producer, made on first use.
    async fn producer(&self) -> Result<Arc<Producer>, String> {
        let me = std::thread::current().id();
        if let Some(p) = self.clients.lock().get(&me) {
            return Ok(p.clone());
        }
        let mut b = ClientBuilder::new(self.brokers.clone())
            .client_id("sluice")
            .backoff_config(rskafka::BackoffConfig {
                deadline: Some(self.timeout),
                ..Default::default()
            });
        if let Some(s) = &self.sasl {
            b = b.sasl_config(s.clone());
        }
        if let Some(t) = &self.tls {
            b = b.tls_config(t.clone());
        }
        let client = b.build().await.map_err(|e| format!("brokers {:?}: {e}", self.brokers))?;
        // Asked for by name, the topic is created where the brokers create topics on demand.
        let first = client
            .partition_client(self.topic.clone(), 0, UnknownTopicHandling::Retry)
            .await
            .map_err(|e| format!("topic {}: {e}", self.topic))?;
        let count = client
            .list_topics()
            .await
            .ok()
            .and_then(|ts| ts.into_iter().find(|t| t.name == self.topic))
            .map_or(1, |t| t.partitions.len().max(1));
        let mut partitions = vec![first];
        for p in 1..count {
            partitions.push(
                client
                    .partition_client(self.topic.clone(), p as i32, UnknownTopicHandling::Retry)
                    .await
                    .map_err(|e| format!("topic {} partition {p}: {e}", self.topic))?,
            );
        }
        let made = Arc::new(Producer {
            partitions,
            _client: client,
        });
        self.clients.lock().insert(me, made.clone());
        Ok(made)
    }

    fn forget(&self) {
        self.clients.lock().remove(&std::thread::current().id());
    }

    /// The partition of a batch: by the key's hash (CRC-32, as lua-resty-kafka), else in turn.
    fn partition(&self, count: usize) -> usize {
        match &self.key {
            Some(k) => crc32(k) as usize % count,
            None => {
                self.turn
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    % count
            }
        }
    }
}

/// CRC-32 (IEEE), zlib's.
fn crc32(data: &[u8]) -> u32 {
    let mut c = flate2::Crc::new();
    c.update(data);
    c.sum()
}

impl Sink for Kafka {
    /// `meta_format: origin`: the request as it came (head, then the body kept).
    fn envelope(&self, e: Logged<'_>) -> Vec<u8> {
        if !self.origin {
            return e.json();
        }
        let mut out = e.req.raw().to_vec();
        if let Some(body) = e
            .entry
            .get("request")
            .and_then(|r| r.get("body"))
            .and_then(Value::as_str)
        {
            out.extend_from_slice(body.as_bytes());
        }
        out
    }

    fn send<'a>(&'a self, batch: &'a [Bytes]) -> LocalFuture<'a, Result<(), Failed>> {
        Box::pin(async move {
            let value = if self.origin && self.single {
                batch.first().map(|b| b.to_vec()).unwrap_or_default()
            } else if self.origin {
                // As APISIX: a batch of raw requests is a JSON array of their texts.
                let texts: Vec<String> = batch
                    .iter()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .collect();
                serde_json::to_vec(&texts).unwrap_or_default()
            } else {
                json_batch(batch, self.single)
            };
            // Connecting counts in the timeout too.
            let producer = tokio::time::timeout(self.timeout, self.producer())
                .await
                .map_err(|_| {
                    Failed::all(format!(
                        "brokers {:?}: no answer within {:?}",
                        self.brokers, self.timeout
                    ))
                })?
                .map_err(Failed::all)?;
            let at = self.partition(producer.partitions.len());
            let record = Record {
                key: self.key.clone(),
                value: Some(value),
                headers: Default::default(),
                timestamp: rskafka::chrono::DateTime::from_timestamp_millis(
                    sluice_core::clock::now().as_millis() as i64,
                )
                .unwrap_or_default(),
            };
            let sent = tokio::time::timeout(
                self.timeout,
                producer.partitions[at].produce(vec![record], Compression::NoCompression),
            )
            .await;
            match sent {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => {
                    // A broker that failed may have moved: the next batch starts afresh.
                    self.forget();
                    Err(Failed::all(format!("topic {}: {e}", self.topic)))
                }
                Err(_) => {
                    self.forget();
                    Err(Failed::all(format!(
                        "topic {}: no acknowledgement within {:?}",
                        self.topic, self.timeout
                    )))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::crc32;

    #[test]
    fn crc32_is_ieee_s() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }
}
