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

use crate::logger::net::{address, json_batch};
use crate::logger::{Failed, Kind, Logged, Sink};
use crate::util::{Num, whole_field};

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

/// Other fields are let be, as APISIX's schema lets them be.
#[derive(Debug, Deserialize, schemars::JsonSchema, PartialEq)]
struct Broker {
    host: String,
    port: Num,
    #[serde(default)]
    sasl_config: Option<Sasl>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema, PartialEq)]
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
        (Some(_), Some(_)) => {
            v.error("give brokers or broker_list, not both (APISIX's oneOf)");
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
                    match address(&b.host, b.port, v) {
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
                        Some(p) => match address(host, p, v) {
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
    let timeout = whole_field("timeout", c.timeout, 3, (1, 1 << 31), " seconds", v);
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
        origin_body: given.req_body,
        clients: Mutex::new(HashMap::new()),
        turn: std::sync::atomic::AtomicUsize::new(0),
    };
    Some((Arc::new(sink) as Arc<dyn Sink>, None))
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

/// A worker's producer: its client, and a client per partition of the topic, made when a
/// batch first goes to that partition.
struct Producer {
    client: Client,
    partitions: Vec<tokio::sync::OnceCell<PartitionClient>>,
}

/// A worker's producer, made once however many batches ask for it at the same time.
type Slot = tokio::sync::OnceCell<Arc<Producer>>;

struct Kafka {
    brokers: Vec<String>,
    sasl: Option<SaslConfig>,
    tls: Option<Arc<rustls::ClientConfig>>,
    topic: String,
    key: Option<Vec<u8>>,
    timeout: Duration,
    single: bool,
    origin: bool,
    /// With `origin`: the body's bytes sent (`include_req_body`, `max_req_body_bytes`).
    origin_body: Option<usize>,
    /// Each worker's producer (a client's connections belong to the worker that made them).
    clients: Mutex<HashMap<std::thread::ThreadId, Arc<Slot>>>,
    /// The next partition for a batch without a key.
    turn: std::sync::atomic::AtomicUsize,
}

impl Kafka {
    /// This worker's producer, made on first use.
    async fn producer(&self) -> Result<Arc<Producer>, String> {
        let slot = self
            .clients
            .lock()
            .entry(std::thread::current().id())
            .or_default()
            .clone();
        slot.get_or_try_init(|| self.connect()).await.cloned()
    }

    async fn connect(&self) -> Result<Arc<Producer>, String> {
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
        let client = b
            .build()
            .await
            .map_err(|e| format!("brokers {:?}: {e}", self.brokers))?;
        let mut count = self.partitions(&client).await?;
        if count.is_none() {
            // Asked for by name, a topic is created where brokers create topics on demand.
            client
                .partition_client(self.topic.clone(), 0, UnknownTopicHandling::Retry)
                .await
                .map_err(|e| format!("topic {} does not exist: {e}", self.topic))?;
            count = self.partitions(&client).await?;
        }
        let count = count.ok_or_else(|| format!("topic {} does not exist", self.topic))?;
        Ok(Arc::new(Producer {
            client,
            partitions: (0..count).map(|_| tokio::sync::OnceCell::new()).collect(),
        }))
    }

    /// The topic's partitions, when the cluster has it.
    async fn partitions(&self, client: &Client) -> Result<Option<usize>, String> {
        let topics = client
            .list_topics()
            .await
            .map_err(|e| format!("brokers {:?}: {e}", self.brokers))?;
        Ok(topics
            .into_iter()
            .find(|t| t.name == self.topic)
            .map(|t| t.partitions.len())
            .filter(|n| *n > 0))
    }

    /// Forgets this worker's producer when it is `failed` (not one made since).
    fn forget(&self, failed: &Arc<Producer>) {
        let mut clients = self.clients.lock();
        let me = std::thread::current().id();
        if clients
            .get(&me)
            .and_then(|s| s.get())
            .is_some_and(|p| Arc::ptr_eq(p, failed))
        {
            clients.remove(&me);
        }
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

    /// Sends one message to the partition its key (or its turn) picks.
    async fn produce(&self, producer: &Producer, value: Vec<u8>) -> Result<(), String> {
        let at = self.partition(producer.partitions.len());
        let partition = producer.partitions[at]
            .get_or_try_init(|| {
                producer.client.partition_client(
                    self.topic.clone(),
                    at as i32,
                    UnknownTopicHandling::Error,
                )
            })
            .await
            .map_err(|e| format!("topic {} partition {at}: {e}", self.topic))?;
        let record = Record {
            key: self.key.clone(),
            value: Some(value),
            headers: Default::default(),
            timestamp: rskafka::chrono::DateTime::from_timestamp_millis(
                sluice_core::clock::now().as_millis() as i64,
            )
            .unwrap_or_default(),
        };
        partition
            .produce(vec![record], Compression::NoCompression)
            .await
            .map(|_| ())
            .map_err(|e| format!("topic {} partition {at}: {e}", self.topic))
    }
}

/// CRC-32 (IEEE), zlib's.
fn crc32(data: &[u8]) -> u32 {
    let mut c = flate2::Crc::new();
    c.update(data);
    c.sum()
}

impl Sink for Kafka {
    /// `meta_format: origin`: the request as it came (APISIX's `get_req_original`): its head,
    /// then, with `include_req_body`, its body.
    fn envelope(&self, e: Logged<'_>) -> Vec<u8> {
        if !self.origin {
            return e.json();
        }
        let mut out = if e.req.version() < 2 {
            e.req.raw().to_vec()
        } else {
            // An HTTP/2 head came typed: written as HTTP/1.1 would have sent it.
            let mut out = Vec::new();
            sluice_core::vars::Var::Request.write(
                &sluice_core::env::Request {
                    head: e.req,
                    env: e.env.env,
                },
                &mut out,
            );
            out.extend_from_slice(b"\r\n");
            for h in e.req.fields() {
                out.extend_from_slice(h.name(e.req.raw()));
                out.extend_from_slice(b": ");
                out.extend_from_slice(h.value(e.req.raw()));
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"\r\n");
            out
        };
        if let Some(max) = self.origin_body
            && let Some(body) = e.env.env.body().and_then(|b| b.raw())
        {
            out.extend_from_slice(&body[..body.len().min(max)]);
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
            // Connecting (the first batch of a worker) and the acknowledgement each within
            // `timeout`.
            let late = |what: &str| format!("{what} {:?}: no answer within {:?}", self.brokers, self.timeout);
            let producer = tokio::time::timeout(self.timeout, self.producer())
                .await
                .map_err(|_| Failed::all(late("brokers")))?
                .map_err(Failed::all)?;
            let sent = tokio::time::timeout(self.timeout, self.produce(&producer, value)).await;
            let failure = match sent {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => e,
                Err(_) => late(&format!("topic {} at", self.topic)),
            };
            // A broker that failed may have moved: the next batch starts afresh.
            self.forget(&producer);
            Err(Failed::all(failure))
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
