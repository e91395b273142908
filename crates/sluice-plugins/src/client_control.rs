//! `client-control`: the largest request body a route accepts, as APISIX's `client-control`
//! (NGINX's `client_max_body_size`, per route).
//!
//! `{max_body_size}`: bytes, 0 for no limit. It replaces the node's `limits.max_body_size`
//! for the route's requests, up or down: a declared `Content-Length` over it is answered 413
//! in the rewrite phase, before the plugins after it, and a chunked body is cut with 413 when
//! it passes it.

use std::sync::Arc;

use serde::Deserialize;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin};

use crate::util::Num;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    max_body_size: Option<Num>,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("client-control", 22000, Config);

    fn build(
        &self,
        config: &serde_json::Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let max = match c.max_body_size {
            None => None,
            Some(n) => Some(v.field("max_body_size", |v| {
                crate::util::whole(n, 0, i64::MAX as u64, " bytes (0: no limit)", v)
            })?),
        };
        // Decided here: 0 is no limit.
        let max = max.map(|m| if m == 0 { u64::MAX } else { m });
        Some(Arc::new(ClientControl { max }))
    }
}

struct ClientControl {
    max: Option<u64>,
}

impl Plugin for ClientControl {
    fn phases(&self) -> Phases {
        Phases::REWRITE
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let Some(m) = self.max else {
            return Flow::Continue;
        };
        // As APISIX: a declared length over the limit is answered here, before the plugins
        // after it (an authorizer is not asked about a request that cannot be served).
        if let sluice_core::http::Framing::Length(n) = req.framing()
            && n > m
        {
            return Flow::Respond(sluice_core::Response::error(413, "request body too large"));
        }
        cx.max_body = Some(m);
        Flow::Continue
    }
}
