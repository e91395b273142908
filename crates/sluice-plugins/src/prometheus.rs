//! `prometheus`: APISIX's metrics plugin, accepted so that APISIX files load unchanged. Sluice
//! counts every request in its own metrics (`metrics:` in the configuration, served on the
//! status listener); this plugin only chooses which routes get their own `route` label:
//!
//! - with `metrics.routes: all` (the default) every route does; `prometheus: {_meta: {disable:
//!   true}}` on a route opts it out (its requests are counted under `route="other"`);
//! - with `metrics.routes: plugin` only routes that have the plugin (on the route, its service
//!   or a global rule) do, as APISIX counts only those; the rest are counted under `other`.
//!
//! `prefer_name: true` (APISIX's field) labels the route by its `name` instead of its id. The
//! data plane reads this configuration when it compiles routes; the plugin runs in no phase,
//! and a route whose only plugin it is keeps the engine's plugin-free path.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::Plugin;
use sluice_core::plugin::{
    BuildCx, MetricsLabel, Phases, PluginFactory, Preread, StreamPlugin, parse_config,
};

/// The plugin's name.
pub(crate) const NAME: &str = "prometheus";

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct Config {
    prefer_name: bool,
}

/// `prometheus`'s `plugin_metadata` (APISIX's).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct Metadata {
    disabled_labels: std::collections::BTreeMap<String, Vec<String>>,
}

/// The labels of every APISIX metric `disabled_labels` may name (its exporter's
/// `metric_label_map`, without the labels that make a series what it is: `code`, `type`).
const COMMON_LABELS: &[&str] = &[
    "route",
    "service",
    "consumer",
    "node",
    "request_type",
    "request_llm_model",
    "llm_model",
];

/// APISIX's metrics `disabled_labels` may name, with the labels each has beyond
/// [`COMMON_LABELS`].
const APISIX_METRICS: &[(&str, &[&str])] = &[
    (
        "http_status",
        &["matched_uri", "matched_host", "response_source"],
    ),
    ("http_latency", &[]),
    ("bandwidth", &[]),
];

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!(NAME, 500, Config);

    /// APISIX's `disabled_labels` (per APISIX metric, labels to leave empty), checked against
    /// APISIX's names. Sluice's metrics have their own names and only a `route` label among
    /// APISIX's (`sluice_http_requests_total{route,method,status}`,
    /// `sluice_http_request_duration_seconds{route}`): the other labels are not there to drop,
    /// and dropping `route` is refused with how Sluice does it.
    fn check_metadata(&self, fields: &serde_json::Map<String, Value>, v: &mut Validator) {
        let Some(m) = parse_config::<Metadata>(&Value::Object(fields.clone()), v) else {
            return;
        };
        v.field("disabled_labels", |v| {
            for (metric, labels) in &m.disabled_labels {
                v.field(metric, |v| {
                    let Some((_, own)) = APISIX_METRICS.iter().find(|(n, _)| n == metric) else {
                        let names: Vec<&str> = APISIX_METRICS.iter().map(|(n, _)| *n).collect();
                        v.error(format!(
                            "unknown metric, expected one of {}",
                            names.join(", ")
                        ));
                        return;
                    };
                    let known: Vec<&str> = COMMON_LABELS.iter().chain(own.iter()).copied().collect();
                    for (i, label) in labels.iter().enumerate() {
                        v.index(i, |v| {
                            if !known.contains(&label.as_str()) {
                                v.error(format!(
                                    "unknown label \"{label}\", expected one of {}",
                                    known.join(", ")
                                ));
                            } else if label == "route" {
                                v.error(
                                    "Sluice cannot leave the route label empty: set metrics.routes: plugin, or prometheus: {_meta: {disable: true}} on a route, to count routes under route=\"other\"",
                                );
                            }
                        });
                    }
                });
            }
        });
    }

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        Some(Arc::new(Prometheus {
            label: if c.prefer_name {
                MetricsLabel::Name
            } else {
                MetricsLabel::Id
            },
        }))
    }

    fn labels_metrics(&self) -> bool {
        true
    }

    /// APISIX's stream `prometheus`: accepted; every stream route's sessions and bytes are
    /// counted by route with the plugin or without.
    fn on_stream(&self) -> bool {
        true
    }

    fn build_stream(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn StreamPlugin>> {
        let _: Config = parse_config(config, v)?;
        Some(Arc::new(Counted))
    }
}

struct Prometheus {
    label: MetricsLabel,
}

impl Plugin for Prometheus {
    fn phases(&self) -> Phases {
        Phases::default()
    }

    fn metrics_label(&self) -> Option<MetricsLabel> {
        Some(self.label)
    }
}

/// On a stream route: nothing to do per connection.
struct Counted;

impl StreamPlugin for Counted {
    fn preread(&self, _client: std::net::IpAddr) -> Preread {
        Preread::Continue
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::metadata_errors;

    #[test]
    fn disabled_labels_are_checked_against_apisix_s_names() {
        // APISIX's docs' body loads (labels Sluice's metrics do not have: nothing to drop).
        assert_eq!(
            metadata_errors(
                "{id: prometheus, disabled_labels: {http_status: [node, consumer], http_latency: [node]}}"
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            metadata_errors(
                "{id: prometheus, disabled_labels: {http_status: [code, route], upstream_status: [node]}}"
            ),
            vec![
                "plugin_metadata[0].disabled_labels.http_status[0]: unknown label \"code\", expected one of route, service, consumer, node, request_type, request_llm_model, llm_model, matched_uri, matched_host, response_source",
                "plugin_metadata[0].disabled_labels.http_status[1]: Sluice cannot leave the route label empty: set metrics.routes: plugin, or prometheus: {_meta: {disable: true}} on a route, to count routes under route=\"other\"",
                "plugin_metadata[0].disabled_labels.upstream_status: unknown metric, expected one of http_status, http_latency, bandwidth"
            ]
        );
    }
}
