//! The `opentelemetry` plugin's node-wide settings: the collector and batching, in
//! `plugin_attr.opentelemetry` or (APISIX 3.x) the plugin's `plugin_metadata`.

use std::collections::BTreeMap;

use serde::Deserialize;
use sluice_config::Validator;

/// The `opentelemetry` plugin's collector and batching (APISIX's `plugin_attr.opentelemetry`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct OtelAttrConfig {
    /// `random` (the default) or `x-request-id` (a request's `X-Request-Id`, when it is 32 hex
    /// digits or a UUID, becomes its trace id).
    pub(crate) trace_id_source: String,
    /// Resource attributes; `service.name` defaults to `Sluice`.
    pub(crate) resource: BTreeMap<String, serde_json::Value>,
    /// The OTLP/HTTP collector.
    pub(crate) collector: OtelCollectorConfig,
    /// Batching of spans: a bounded queue, exported off the request path.
    pub(crate) batch_span_processor: OtelBatchConfig,
    /// APISIX's `set_ngx_var` (trace ids as NGINX variables): accepted; Sluice's access log
    /// has `$trace_id` whatever it says.
    pub(crate) set_ngx_var: bool,
}

impl Default for OtelAttrConfig {
    fn default() -> Self {
        OtelAttrConfig {
            trace_id_source: "random".into(),
            resource: BTreeMap::new(),
            collector: OtelCollectorConfig::default(),
            batch_span_processor: OtelBatchConfig::default(),
            set_ngx_var: false,
        }
    }
}

/// An OTLP/HTTP (protobuf) collector.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct OtelCollectorConfig {
    /// `host:port` of the collector's OTLP/HTTP receiver (spans go to `/v1/traces`). Default
    /// 127.0.0.1:4318.
    pub(crate) address: String,
    /// Seconds an export may take. Default 3.
    pub(crate) request_timeout: f64,
    /// Fields sent with every export (an API key the collector asks for).
    pub(crate) request_headers: BTreeMap<String, String>,
}

impl Default for OtelCollectorConfig {
    fn default() -> Self {
        OtelCollectorConfig {
            address: "127.0.0.1:4318".into(),
            request_timeout: 3.0,
            request_headers: BTreeMap::new(),
        }
    }
}

/// The batch span processor.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct OtelBatchConfig {
    /// Spans waiting for export at most; beyond, new spans are dropped and counted. 1024.
    pub(crate) max_queue_size: u32,
    /// Spans per export at most. Default 16 (APISIX's).
    pub(crate) max_export_batch_size: u32,
    /// Seconds a partial batch waits before it is sent. Default 2.
    pub(crate) batch_timeout: f64,
    /// APISIX's field: accepted; a full queue always drops (requests never wait for it).
    pub(crate) drop_on_queue_full: bool,
    /// APISIX's field: accepted; `batch_timeout` decides when a partial batch goes.
    pub(crate) inactive_timeout: f64,
}

impl Default for OtelBatchConfig {
    fn default() -> Self {
        OtelBatchConfig {
            max_queue_size: 1024,
            max_export_batch_size: 16,
            batch_timeout: 2.0,
            drop_on_queue_full: true,
            inactive_timeout: 1.0,
        }
    }
}

fn range(v: &mut Validator, field: &str, n: u64, lo: u64, hi: u64, lo_s: &str, hi_s: &str) {
    if n < lo || n > hi {
        v.error_at(field, format!("must be from {lo_s} to {hi_s}"));
    }
}

/// Checks OpenTelemetry's node settings (`plugin_attr.opentelemetry`, or the plugin's
/// `plugin_metadata`); `v` points at them.
pub(crate) fn check(o: &OtelAttrConfig, v: &mut Validator) {
    if !matches!(o.trace_id_source.as_str(), "random" | "x-request-id") {
        v.error_at(
            "trace_id_source",
            format!(
                "unknown source \"{}\", expected random or x-request-id",
                o.trace_id_source
            ),
        );
    }
    v.field("collector", |v| {
        let c = &o.collector;
        let ok = c
            .address
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok {
            v.error_at(
                "address",
                format!(
                    "invalid address \"{}\": expected host:port of the OTLP/HTTP receiver, like 127.0.0.1:4318",
                    c.address
                ),
            );
        }
        if !(c.request_timeout > 0.0 && c.request_timeout <= 60.0) {
            v.error_at("request_timeout", "must be > 0 and at most 60 (seconds)");
        }
        for (name, value) in &c.request_headers {
            let bad_name = !crate::util::is_token(name);
            if bad_name || value.bytes().any(|b| b == b'\r' || b == b'\n') {
                v.error_at("request_headers", format!("invalid field {name:?}"));
            }
        }
    });
    v.field("batch_span_processor", |v| {
        let b = &o.batch_span_processor;
        range(
            v,
            "max_queue_size",
            u64::from(b.max_queue_size),
            1,
            1_000_000,
            "1",
            "1000000",
        );
        range(
            v,
            "max_export_batch_size",
            u64::from(b.max_export_batch_size),
            1,
            u64::from(b.max_queue_size.max(1)),
            "1",
            "max_queue_size",
        );
        if !(b.batch_timeout > 0.0 && b.batch_timeout <= 60.0) {
            v.error_at("batch_timeout", "must be > 0 and at most 60 (seconds)");
        }
        if !(b.inactive_timeout >= 0.0 && b.inactive_timeout <= 60.0) {
            v.error_at("inactive_timeout", "must be from 0 to 60 (seconds)");
        }
    });
}
