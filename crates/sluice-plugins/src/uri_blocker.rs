//! `uri-blocker`: refuses requests whose URI matches a rule, as APISIX's `uri-blocker`.
//!
//! `{block_rules: [regex, ...], rejected_code: 403, rejected_msg, case_insensitive: false}`.
//! The rules are matched (anywhere, as `ngx.re.find`) against the path and query as the client
//! sent them (`$request_uri`), in one compiled set. A match is `rejected_code`, with
//! `{"error_msg": rejected_msg}` when a message is given, else NGINX's page for the status.
//! Rules are Rust `regex` syntax, which matches in linear time: PCRE's look-around and
//! back-references are refused when the configuration loads.

use std::sync::Arc;

use regex::bytes::RegexSet;
use serde::Deserialize;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::{Num, check_status};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    block_rules: Vec<String>,
    #[serde(default = "default_code")]
    rejected_code: Num,
    #[serde(default)]
    rejected_msg: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
}

fn default_code() -> Num {
    Num::Whole(403)
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("uri-blocker", 2900, Config);

    fn build(
        &self,
        config: &serde_json::Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let rules = v.field("block_rules", |v| {
            crate::util::rule_set(&c.block_rules, 4096, c.case_insensitive, v)
        });
        let code = v.field("rejected_code", |v| check_status(c.rejected_code, 200, v));
        if c.rejected_msg.as_deref() == Some("") {
            v.error_at("rejected_msg", "must not be empty");
            return None;
        }
        let code = code?;
        let reject = match &c.rejected_msg {
            Some(m) => Response::error(code, m),
            None => sluice_core::http::write::page(code),
        };
        Some(Arc::new(UriBlocker {
            rules: rules?,
            reject,
        }))
    }
}

struct UriBlocker {
    rules: RegexSet,
    reject: Response,
}

impl Plugin for UriBlocker {
    fn phases(&self) -> Phases {
        Phases::REWRITE
    }

    fn rewrite(&self, req: &mut RequestHead, _cx: &mut Ctx<'_>) -> Flow {
        if self.rules.is_match(req.original_target()) {
            Flow::Respond(self.reject.clone())
        } else {
            Flow::Continue
        }
    }
}
