//! `opentelemetry`: W3C trace context and OTLP spans, with APISIX's fields.
//!
//! Route (or service, global rule) configuration: `{sampler: {name, options}, additional_attributes:
//! [...], additional_header_prefix_attributes: [...]}`. Samplers: `always_on`, `always_off`
//! (APISIX's default), `trace_id_ratio` (`options.fraction`), `parent_base` (follow the
//! client's `traceparent` sampled flag; without one, `options.root`, by default `always_off`).
//!
//! Each request continues the client's trace (a valid `traceparent`) or starts one; the
//! upstream gets `traceparent` naming this request's span as parent (and `tracestate` as it
//! came), sampled or not, as W3C Trace Context asks of an intermediary. A sampled request's
//! span (kind SERVER, from its first byte to its log phase) goes to a bounded queue; an
//! exporter thread sends them in batches over OTLP/HTTP (protobuf) to
//! `plugin_attr.opentelemetry.collector`. A full queue drops the span and counts it: a slow or
//! absent collector never holds a request.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::{Span, Status, span, status};
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin};

use attr::OtelAttrConfig;

mod attr;
mod export;

use export::{Exporter, kv};

/// The plugin's name.
pub const NAME: &str = "opentelemetry";

pub use export::{DROPPED, EXPORTED, FAILED};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct Config {
    sampler: SamplerConfig,
    additional_attributes: Vec<String>,
    additional_header_prefix_attributes: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sampler: SamplerConfig {
                name: "always_off".into(),
                options: SamplerOptions::default(),
            },
            additional_attributes: Vec::new(),
            additional_header_prefix_attributes: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct SamplerConfig {
    name: String,
    #[serde(default)]
    options: SamplerOptions,
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct SamplerOptions {
    fraction: Option<f64>,
    root: Option<Box<SamplerConfig>>,
}

/// A compiled sampler.
#[derive(Debug, Clone, Copy)]
enum Sampler {
    On,
    Off,
    /// Sampled when the trace id's last 8 bytes, as a number, fall under the bound.
    Ratio(u64),
    ParentBased(Root),
}

#[derive(Debug, Clone, Copy)]
enum Root {
    On,
    Off,
    Ratio(u64),
}

fn ratio_bound(fraction: f64) -> u64 {
    if fraction >= 1.0 {
        u64::MAX
    } else {
        (fraction.max(0.0) * u64::MAX as f64) as u64
    }
}

fn compile_sampler(c: &SamplerConfig, v: &mut Validator, nested: bool) -> Option<Sampler> {
    let fraction = |v: &mut Validator| match c.options.fraction {
        Some(f) if (0.0..=1.0).contains(&f) => Some(ratio_bound(f)),
        Some(_) => {
            v.error_at("options.fraction", "must be from 0 to 1");
            None
        }
        None => {
            v.error_at("options.fraction", "is required by trace_id_ratio");
            None
        }
    };
    Some(match c.name.as_str() {
        "always_on" => Sampler::On,
        "always_off" => Sampler::Off,
        "trace_id_ratio" => Sampler::Ratio(fraction(v)?),
        "parent_base" if !nested => {
            let root = match &c.options.root {
                None => Root::Off,
                Some(r) => match v.field("options", |v| {
                    v.field("root", |v| compile_sampler(r, v, true))
                })? {
                    Sampler::On => Root::On,
                    Sampler::Off => Root::Off,
                    Sampler::Ratio(b) => Root::Ratio(b),
                    Sampler::ParentBased(_) => return None,
                },
            };
            Sampler::ParentBased(root)
        }
        other => {
            let expected = if nested {
                "always_on, always_off or trace_id_ratio"
            } else {
                "always_on, always_off, trace_id_ratio or parent_base"
            };
            v.error_at(
                "name",
                format!("unknown sampler \"{other}\", expected {expected}"),
            );
            return None;
        }
    })
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!(NAME, 12009, Config);

    /// The collector and batching, as in `plugin_attr.opentelemetry` (APISIX 3.x keeps them in
    /// the plugin's metadata); the metadata wins when both are given.
    fn check_metadata(&self, fields: &serde_json::Map<String, Value>, v: &mut Validator) {
        if let Some(attr) = parse_config::<OtelAttrConfig>(&Value::Object(fields.clone()), v) {
            attr::check(&attr, v);
        }
    }

    /// `plugin_attr.opentelemetry`: the same settings as the metadata.
    fn check_attr(&self, value: &Value, v: &mut Validator) {
        if let Some(attr) = parse_config::<OtelAttrConfig>(value, v) {
            attr::check(&attr, v);
        }
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let sampler = v.field("sampler", |v| compile_sampler(&c.sampler, v, false))?;
        let attributes = v.field("additional_attributes", |v| {
            let mut out = Vec::with_capacity(c.additional_attributes.len());
            let mut ok = true;
            for (i, a) in c.additional_attributes.iter().enumerate() {
                match Attr::parse(a) {
                    Some(attr) => out.push((a.trim_start_matches('$').to_owned(), attr)),
                    None => {
                        ok = false;
                        v.index(i, |v| {
                            v.error(format!(
                                "unknown variable \"{a}\": expected http_<header>, arg_<name>, remote_addr, host, uri, request_method or route_id"
                            ))
                        });
                    }
                }
            }
            ok.then_some(out)
        })?;
        // The plugin's metadata (APISIX 3.x keeps these settings there), else plugin_attr.
        let attr = cx
            .metadata(NAME)
            .and_then(|m| serde_json::from_value::<OtelAttrConfig>(Value::Object(m.clone())).ok())
            .or_else(|| {
                cx.attr(NAME)
                    .and_then(|a| serde_json::from_value::<OtelAttrConfig>(a.clone()).ok())
            })
            .unwrap_or_default();
        // One exporter per collector configuration, shared by every route using it and kept
        // across reloads that do not change it. Its thread starts with the first span.
        let key = format!("opentelemetry exporter {attr:?}");
        let exporter = cx.state.get_or_insert(&key, || Exporter::new(attr.clone()));
        Some(Arc::new(OpenTelemetry {
            sampler,
            attributes,
            header_prefixes: c
                .additional_header_prefix_attributes
                .iter()
                .map(|p| p.to_ascii_lowercase())
                .collect(),
            from_request_id: attr.trace_id_source == "x-request-id",
            exporter,
        }))
    }
}

/// A request value an attribute is made of, decided when the configuration compiles.
#[derive(Debug, Clone)]
enum Attr {
    /// A request header, by its name (`http_x_user` is `x-user`).
    Header(String),
    /// A query argument.
    Arg(String),
    RemoteAddr,
    Host,
    Uri,
    Method,
    RouteId,
}

impl Attr {
    fn parse(name: &str) -> Option<Attr> {
        let name = name.trim_start_matches('$');
        if let Some(h) = name.strip_prefix("http_").filter(|h| !h.is_empty()) {
            return Some(Attr::Header(h.replace('_', "-")));
        }
        if let Some(a) = name.strip_prefix("arg_").filter(|a| !a.is_empty()) {
            return Some(Attr::Arg(a.to_owned()));
        }
        Some(match name {
            "remote_addr" => Attr::RemoteAddr,
            "host" => Attr::Host,
            "uri" => Attr::Uri,
            "request_method" => Attr::Method,
            "route_id" => Attr::RouteId,
            _ => return None,
        })
    }
}

struct OpenTelemetry {
    sampler: Sampler,
    /// (attribute key, value).
    attributes: Vec<(String, Attr)>,
    header_prefixes: Vec<String>,
    from_request_id: bool,
    exporter: Arc<Exporter>,
}

/// What a request carries between its phases.
#[derive(Debug, Default)]
struct Trace {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    sampled: bool,
    start_unix_ns: u64,
    started: Option<Instant>,
}

/// A W3C `traceparent` (version 00): trace id, parent span id, sampled.
fn parse_traceparent(v: &[u8]) -> Option<([u8; 16], [u8; 8], bool)> {
    let s = std::str::from_utf8(v).ok()?.trim();
    let mut parts = s.split('-');
    let version = parts.next()?;
    let (trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?);
    // Version ff is invalid; 00 has exactly four parts; later versions may add more.
    let hex_version: Option<[u8; 1]> = hex_bytes(version);
    if hex_version.is_none() || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let trace_id: [u8; 16] = hex_bytes(trace)?;
    let parent_id: [u8; 8] = hex_bytes(parent)?;
    let flags: [u8; 1] = hex_bytes(flags)?;
    if trace_id == [0; 16] || parent_id == [0; 8] {
        return None;
    }
    Some((trace_id, parent_id, flags[0] & 1 == 1))
}

fn hex_bytes<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    loop {
        for chunk in out.chunks_mut(8) {
            let r = fastrand::u64(..).to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
        if out != [0; N] {
            return out;
        }
    }
}

/// A trace id from an `X-Request-Id` of 32 hex digits or a UUID.
fn from_request_id(v: &[u8]) -> Option<[u8; 16]> {
    let s: String = std::str::from_utf8(v)
        .ok()?
        .chars()
        .filter(|c| *c != '-')
        .collect();
    hex_bytes(&s.to_ascii_lowercase()).filter(|t| *t != [0; 16])
}

fn string(b: &[u8]) -> any_value::Value {
    any_value::Value::StringValue(String::from_utf8_lossy(b).into_owned())
}

impl Plugin for OpenTelemetry {
    fn phases(&self) -> Phases {
        Phases::REWRITE.with(Phases::LOG)
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let parent = req.header("traceparent").and_then(parse_traceparent);
        if parent.is_none() {
            // W3C Trace Context: a tracestate without a valid traceparent is discarded.
            req.remove_header("tracestate");
        }
        let trace_id = match parent {
            Some((t, _, _)) => t,
            None => self
                .from_request_id
                .then(|| req.header("x-request-id").and_then(from_request_id))
                .flatten()
                .unwrap_or_else(random_bytes),
        };
        let by_ratio = |bound: u64| {
            let low = u64::from_be_bytes(trace_id[8..].try_into().unwrap_or_default());
            low <= bound
        };
        let sampled = match self.sampler {
            Sampler::On => true,
            Sampler::Off => false,
            Sampler::Ratio(b) => by_ratio(b),
            Sampler::ParentBased(root) => match (parent, root) {
                (Some((_, _, flag)), _) => flag,
                (None, Root::On) => true,
                (None, Root::Off) => false,
                (None, Root::Ratio(b)) => by_ratio(b),
            },
        };
        let span_id: [u8; 8] = random_bytes();
        // The upstream continues the trace under this request's span.
        let mut header = [0u8; 55];
        header[..3].copy_from_slice(b"00-");
        sluice_core::hex::encode_into(&mut header[3..35], &trace_id);
        header[35] = b'-';
        sluice_core::hex::encode_into(&mut header[36..52], &span_id);
        header[52..].copy_from_slice(if sampled { b"-01" } else { b"-00" });
        req.set_header("traceparent", &header);
        cx.trace_id = Some(trace_id);
        if sampled {
            *cx.slot::<Trace>(NAME) = Trace {
                trace_id,
                span_id,
                parent: parent.map(|(_, p, _)| p),
                sampled,
                start_unix_ns: unix_ns(),
                started: Some(Instant::now()),
            };
        }
        Flow::Continue
    }

    fn log(&self, req: &RequestHead, done: &sluice_core::plugin::Done, cx: &Ctx<'_>) {
        let status = done.status;
        let Some(t) = cx.slot_ref::<Trace>(NAME) else {
            return;
        };
        if !t.sampled {
            return;
        }
        let took = t.started.map_or(0, |s| s.elapsed().as_nanos() as u64);
        let mut attributes = Vec::with_capacity(8 + self.attributes.len());
        attributes.extend([
            kv("http.method", string(req.method_bytes())),
            kv("http.target", string(req.original_target())),
            kv("http.host", string(req.host())),
            kv(
                "http.scheme",
                string(if cx.is_https() { b"https" } else { b"http" }),
            ),
            kv(
                "net.peer.ip",
                any_value::Value::StringValue(cx.client().ip().to_string()),
            ),
            kv(
                "sluice.route_id",
                any_value::Value::StringValue(cx.route_id().to_owned()),
            ),
            kv(
                "http.status_code",
                any_value::Value::IntValue(i64::from(status)),
            ),
        ]);
        if let Some(ua) = req.header("user-agent") {
            attributes.push(kv("http.user_agent", string(ua)));
        }
        if let Some(l) = cx.llm.as_deref() {
            gen_ai_attributes(l, &mut attributes);
        }
        for (key, a) in &self.attributes {
            let value = match a {
                Attr::Header(h) => req.header(h).map(string),
                Attr::Arg(name) => req.query_arg(name).map(|v| string(&v)),
                Attr::RemoteAddr => {
                    Some(any_value::Value::StringValue(cx.client().ip().to_string()))
                }
                Attr::Host => Some(string(req.host())),
                Attr::Uri => Some(string(req.path())),
                Attr::Method => Some(string(req.method_bytes())),
                Attr::RouteId => Some(any_value::Value::StringValue(cx.route_id().to_owned())),
            };
            if let Some(v) = value {
                attributes.push(kv(key, v));
            }
        }
        if !self.header_prefixes.is_empty() {
            let raw = req.raw();
            for f in req.fields() {
                let (name, value) = (f.name(raw), f.value(raw));
                let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
                if self.header_prefixes.iter().any(|p| lower.starts_with(p)) {
                    attributes.push(kv(&lower, string(value)));
                }
            }
        }
        let name = format!(
            "{} {}",
            String::from_utf8_lossy(req.method_bytes()),
            if cx.route_id().is_empty() {
                "unmatched"
            } else {
                cx.route_id()
            }
        );
        let span = Span {
            trace_id: t.trace_id.to_vec(),
            span_id: t.span_id.to_vec(),
            parent_span_id: t.parent.map(|p| p.to_vec()).unwrap_or_default(),
            name,
            kind: span::SpanKind::Server as i32,
            start_time_unix_nano: t.start_unix_ns,
            end_time_unix_nano: t.start_unix_ns + took,
            attributes,
            status: Some(Status {
                code: if status >= 500 {
                    status::StatusCode::Error as i32
                } else {
                    status::StatusCode::Unset as i32
                },
                message: String::new(),
            }),
            ..Default::default()
        };
        self.exporter.send(span);
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// OpenTelemetry's GenAI semantic conventions for a request an AI plugin sent to a model
/// (<https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/>).
fn gen_ai_attributes(
    l: &sluice_core::llm::LlmRecord,
    out: &mut Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
) {
    let s = |v: &str| any_value::Value::StringValue(v.to_owned());
    let n = |v: u64| any_value::Value::IntValue(i64::try_from(v).unwrap_or(i64::MAX));
    // The conventions' names for the providers (`gen_ai.provider.name`, formerly `gen_ai.system`).
    let provider = match l.provider {
        "gemini" => "gcp.gemini",
        "vertex-ai" => "gcp.vertex_ai",
        "bedrock" => "aws.bedrock",
        "azure-openai" => "azure.ai.openai",
        other => other,
    };
    out.extend([
        kv("gen_ai.operation.name", s(l.operation)),
        kv("gen_ai.provider.name", s(provider)),
        kv("gen_ai.system", s(provider)),
        kv("gen_ai.usage.input_tokens", n(l.usage.prompt)),
        kv("gen_ai.usage.output_tokens", n(l.usage.completion)),
        kv("sluice.llm.instance", s(&l.instance)),
    ]);
    if let Some(m) = l.request_model.as_deref() {
        out.push(kv("gen_ai.request.model", s(m)));
    }
    if let Some(m) = l.model.as_deref() {
        out.push(kv("gen_ai.response.model", s(m)));
    }
    if let Some(ms) = l.first_token_ms {
        out.push(kv(
            "gen_ai.server.time_to_first_token",
            any_value::Value::DoubleValue(ms as f64 / 1000.0),
        ));
    }
}

#[cfg(test)]
mod tests {
    /// `plugin_attr.opentelemetry` is the plugin's to check (it moved here from the
    /// configuration crate's fixtures with the settings' model); a plugin without node settings
    /// refuses them.
    #[test]
    fn plugin_attr_is_checked_by_the_plugin_with_paths() {
        let errors = sluice_config::load_str_with(
            "plugin_attr:
  opentelemetry:
    collector: {address: \"localhost\", request_timeout: 0}
    batch_span_processor: {max_queue_size: 10, max_export_batch_size: 20}
    trace_id_source: header
  cors: {}
  nope: {}
",
            &crate::builtin(),
        )
        .unwrap_err();
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(lines.len(), 6, "{lines:?}");
        assert_eq!(
            lines[..5],
            [
                "plugin_attr.opentelemetry.collector.address: invalid address \"localhost\": expected host:port of the OTLP/HTTP receiver, like 127.0.0.1:4318",
                "plugin_attr.opentelemetry.collector.request_timeout: must be > 0 and at most 60 (seconds)",
                "plugin_attr.opentelemetry.batch_span_processor.max_export_batch_size: must be from 1 to max_queue_size",
                "plugin_attr.opentelemetry.trace_id_source: unknown source \"header\", expected random or x-request-id",
                "plugin_attr.cors: cors has no settings in plugin_attr",
            ],
            "{lines:?}"
        );
        assert!(lines[5].starts_with("plugin_attr.nope: unknown plugin, expected one of "));
    }

    use super::*;

    #[test]
    fn the_collector_can_be_given_as_apisix_s_plugin_metadata() {
        // APISIX's docs' body, as it is.
        let apisix = r#"{"id": "opentelemetry", "trace_id_source": "x-request-id", "resource": {"service.name": "APISIX"}, "collector": {"address": "127.0.0.1:4318", "request_timeout": 3, "request_headers": {"Authorization": "token"}}, "batch_span_processor": {"drop_on_queue_full": false, "max_queue_size": 1024, "batch_timeout": 2, "inactive_timeout": 1, "max_export_batch_size": 16}, "set_ngx_var": false}"#;
        assert_eq!(crate::tests::metadata_errors(apisix), Vec::<String>::new());
        assert_eq!(
            crate::tests::metadata_errors(
                "{id: opentelemetry, collector: {address: nowhere}, sampler: {}}"
            ),
            vec![
                "plugin_metadata[0].sampler: unknown field, expected one of trace_id_source, resource, collector, batch_span_processor, set_ngx_var"
            ]
        );
        assert_eq!(
            crate::tests::metadata_errors("{id: opentelemetry, collector: {address: nowhere}}"),
            vec![
                "plugin_metadata[0].collector.address: invalid address \"nowhere\": expected host:port of the OTLP/HTTP receiver, like 127.0.0.1:4318"
            ]
        );
    }

    #[test]
    fn traceparent_is_parsed_as_w3c_says() {
        let (t, p, s) =
            parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(
            sluice_core::hex::encode(&t),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sluice_core::hex::encode(&p), "00f067aa0ba902b7");
        assert!(s);
        for bad in [
            &b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"[..],
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            b"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            b"garbage",
            b"zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(
                parse_traceparent(bad).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // A later version may carry more parts.
        assert!(
            parse_traceparent(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-x")
                .is_some()
        );
    }

    #[test]
    fn bad_settings_are_refused_with_their_path() {
        use sluice_config::PluginScope;
        let errs = crate::tests::check(
            NAME,
            "{sampler: {name: always_on}, additional_attributes: [http_x_user, bogus]}",
            PluginScope::Route,
        );
        assert_eq!(
            errs,
            [
                "plugins.opentelemetry.additional_attributes[1]: unknown variable \"bogus\": expected http_<header>, arg_<name>, remote_addr, host, uri, request_method or route_id"
            ]
        );
        let errs = crate::tests::check(
            NAME,
            "{sampler: {name: trace_id_ratio, options: {fraction: 2}}}",
            PluginScope::Route,
        );
        assert_eq!(
            errs,
            ["plugins.opentelemetry.sampler.options.fraction: must be from 0 to 1"]
        );
        let errs = crate::tests::check(
            NAME,
            "{sampler: {name: parent_base, options: {root: {name: parent_base}}}}",
            PluginScope::Route,
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("plugins.opentelemetry.sampler.options.root.name: unknown sampler"),
            "{errs:?}"
        );
    }

    #[test]
    fn ratio_bounds_sample_the_expected_share() {
        assert_eq!(ratio_bound(1.0), u64::MAX);
        assert_eq!(ratio_bound(0.0), 0);
        let bound = ratio_bound(0.25);
        let sampled = (0..20_000)
            .filter(|_| {
                let t: [u8; 16] = random_bytes();
                u64::from_be_bytes(t[8..].try_into().unwrap()) <= bound
            })
            .count();
        assert!((4_000..6_000).contains(&sampled), "{sampled}");
    }

    #[test]
    fn request_ids_become_trace_ids() {
        assert_eq!(
            from_request_id(b"4bf92f35-77b3-4da6-a3ce-929d0e0e4736")
                .map(|t| sluice_core::hex::encode(&t)),
            Some("4bf92f3577b34da6a3ce929d0e0e4736".to_owned())
        );
        assert!(from_request_id(b"not-an-id").is_none());
    }
}
