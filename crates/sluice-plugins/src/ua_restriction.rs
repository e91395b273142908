//! `ua-restriction`: allows or denies clients by their `User-Agent`, as APISIX's
//! `ua-restriction`.
//!
//! `{allowlist | denylist: [regex, ...], bypass_missing: false, message: "Not allowed"}`,
//! exactly one list. The rules are matched anywhere in the `User-Agent` (spaces around it
//! trimmed; each field when it repeats): with `allowlist`, a client passes when one of its
//! values matches a rule; with `denylist`, it is refused when one does. A request without
//! `User-Agent` passes with `bypass_missing`, else is refused. A refusal is 403
//! `{"message": message}`. Rules are Rust `regex` syntax (linear time; no look-around or
//! back-references).

use std::sync::Arc;

use regex::bytes::RegexSet;
use serde::Deserialize;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    allowlist: Option<Vec<String>>,
    #[serde(default)]
    denylist: Option<Vec<String>>,
    #[serde(default)]
    bypass_missing: bool,
    #[serde(default = "default_message")]
    message: String,
}

fn default_message() -> String {
    "Not allowed".into()
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("ua-restriction", 2999, Config);

    fn build(
        &self,
        config: &serde_json::Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let (field, list, guard) = crate::util::ListGuard::new(
            ("allowlist", &c.allowlist),
            ("denylist", &c.denylist),
            c.bypass_missing,
            &c.message,
            v,
        )?;
        let rules = v.field(field, |v| crate::util::rule_set(list, usize::MAX, false, v))?;
        Some(Arc::new(UaRestriction { rules, guard }))
    }
}

struct UaRestriction {
    rules: RegexSet,
    guard: crate::util::ListGuard,
}

impl Plugin for UaRestriction {
    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn access(&self, req: &mut RequestHead, _cx: &mut Ctx<'_>) -> Flow {
        let mut agents = req.header_values("user-agent").peekable();
        let matched = agents.peek().is_some().then(|| {
            let mut agents = agents;
            agents.any(|ua| self.rules.is_match(ua.trim_ascii()))
        });
        self.guard.judge(matched)
    }
}
