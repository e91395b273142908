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
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};

/// The plugin's name.
pub const NAME: &str = "prometheus";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Config {
    #[allow(dead_code)]
    prefer_name: bool,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    fn name(&self) -> &'static str {
        NAME
    }

    fn priority(&self) -> i32 {
        500
    }

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let _: Config = parse_config(config, v)?;
        Some(Arc::new(Prometheus))
    }
}

struct Prometheus;

impl Plugin for Prometheus {
    fn phases(&self) -> Phases {
        Phases::default()
    }
}
