//! The exporter: a bounded queue of finished spans and the thread that sends them to the OTLP
//! collector in batches, off the request path (a full queue drops a span and counts it).

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::Value;
use tracing::{debug, warn};

use super::attr::OtelAttrConfig;

/// Spans sent to the collector, dropped because the queue was full, and lost because an
/// export failed (process-wide, for `/metrics`).
pub static EXPORTED: AtomicU64 = AtomicU64::new(0);
/// See [`EXPORTED`].
pub static DROPPED: AtomicU64 = AtomicU64::new(0);
/// See [`EXPORTED`].
pub static FAILED: AtomicU64 = AtomicU64::new(0);

pub(super) fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// The queue of spans to one collector, and its exporter thread (started with the first span).
pub(super) struct Exporter {
    cfg: OtelAttrConfig,
    queue: OnceLock<Option<SyncSender<Span>>>,
}

impl Exporter {
    pub(super) fn new(cfg: OtelAttrConfig) -> Exporter {
        Exporter {
            cfg,
            queue: OnceLock::new(),
        }
    }

    pub(super) fn send(&self, span: Span) {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::sync_channel(
                self.cfg.batch_span_processor.max_queue_size as usize,
            );
            let cfg = self.cfg.clone();
            match std::thread::Builder::new()
                .name("sluice-otel".into())
                .spawn(move || export_loop(rx, cfg))
            {
                Ok(_) => Some(tx),
                Err(e) => {
                    warn!(error = %e, "opentelemetry: cannot start the exporter thread; spans are dropped");
                    None
                }
            }
        });
        let sent = match queue {
            Some(q) => match q.try_send(span) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        };
        if !sent {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Batches spans and posts them until every sender is gone (the configuration that used this
/// collector was replaced).
pub(super) fn export_loop(rx: Receiver<Span>, cfg: OtelAttrConfig) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return warn!(error = %e, "opentelemetry exporter cannot start"),
    };
    let b = &cfg.batch_span_processor;
    let max = b.max_export_batch_size as usize;
    let wait = Duration::from_secs_f64(b.batch_timeout);
    let mut resource: BTreeMap<String, Value> = cfg.resource.clone();
    resource
        .entry("service.name".into())
        .or_insert_with(|| Value::String("Sluice".into()));
    let resource = Resource {
        attributes: resource
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    Value::String(s) => any_value::Value::StringValue(s.clone()),
                    Value::Bool(b) => any_value::Value::BoolValue(*b),
                    Value::Number(n) if n.is_i64() => {
                        any_value::Value::IntValue(n.as_i64().unwrap_or_default())
                    }
                    Value::Number(n) => {
                        any_value::Value::DoubleValue(n.as_f64().unwrap_or_default())
                    }
                    other => any_value::Value::StringValue(other.to_string()),
                };
                kv(k, value)
            })
            .collect(),
        ..Default::default()
    };
    let mut batch = Vec::with_capacity(max);
    let mut open = true;
    while open {
        let deadline = Instant::now() + wait;
        while batch.len() < max {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(s) => batch.push(s),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        if batch.is_empty() {
            continue;
        }
        let n = batch.len() as u64;
        let body = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "sluice".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    spans: std::mem::take(&mut batch),
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
        .encode_to_vec();
        let timeout = Duration::from_secs_f64(cfg.collector.request_timeout);
        match rt.block_on(async { tokio::time::timeout(timeout, post(&cfg, body)).await }) {
            Ok(Ok(())) => {
                EXPORTED.fetch_add(n, Ordering::Relaxed);
            }
            Ok(Err(e)) => {
                FAILED.fetch_add(n, Ordering::Relaxed);
                debug!(collector = %cfg.collector.address, error = %e, "opentelemetry export failed");
            }
            Err(_) => {
                FAILED.fetch_add(n, Ordering::Relaxed);
                debug!(collector = %cfg.collector.address, "opentelemetry export timed out");
            }
        }
    }
}

/// One OTLP/HTTP export: `POST /v1/traces`, protobuf.
pub(super) async fn post(cfg: &OtelAttrConfig, body: Vec<u8>) -> Result<(), String> {
    use http_body_util::Full;
    let addr = &cfg.collector.address;
    let io = tokio::net::TcpStream::connect(addr.as_str())
        .await
        .map_err(|e| e.to_string())?;
    let (mut send, conn) = hyper::client::conn::http1::handshake::<_, Full<bytes::Bytes>>(
        hyper_util::rt::TokioIo::new(io),
    )
    .await
    .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut req = hyper::Request::post("/v1/traces")
        .header("host", addr.as_str())
        .header("content-type", "application/x-protobuf");
    for (k, v) in &cfg.collector.request_headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(Full::new(bytes::Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    if resp.status().is_success() {
        Ok(())
    } else {
        Err(format!("collector answered {}", resp.status()))
    }
}
