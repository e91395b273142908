//! `real-ip`: the client's address as a proxy in front of the gateway sent it, as APISIX's
//! `real-ip` plugin (NGINX's realip module, per route).
//!
//! `{source, trusted_addresses, recursive: false}`: `source` is a variable
//! (`http_x_forwarded_for`, `http_x_real_ip`, any `http_*`, `arg_*`, ...) holding the address,
//! with an optional port; `trusted_addresses` the peers believed (every peer without it);
//! `recursive` takes the last `X-Forwarded-For` address that is not trusted, rather than the
//! last one. The rules are `sluice_core::realip`'s, shared with the node-wide `real_ip`.
//!
//! Runs first (priority 23000, rewrite): every later phase sees the real address
//! (`remote_addr`, ip-restriction, the limit plugins' keys, a `chash` on `remote_addr`), and so
//! do the node's `X-Real-IP` and `X-Forwarded-For`, the access log and `realip_remote_addr`
//! (the TCP peer). Route matching (`remote_addrs`) came before it: the node-wide `real_ip`
//! applies before routing.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::realip::{From, RealIp};
use sluice_core::{Ctx, Flow, Plugin};

use crate::ip_restriction::parse_nets;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    source: String,
    #[serde(default)]
    trusted_addresses: Option<Vec<String>>,
    #[serde(default)]
    recursive: bool,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("real-ip", 23000, Config);

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let from = v.field("source", |v| {
            if c.source.is_empty() {
                v.error("must not be empty");
                return None;
            }
            From::parse(&c.source).map_err(|e| v.error(e)).ok()
        });
        let trusted = match &c.trusted_addresses {
            Some(list) => v.field("trusted_addresses", |v| {
                if list.is_empty() {
                    v.error("must list at least one address or range");
                    return None;
                }
                parse_nets(list, v).map(Some)
            }),
            None => Some(None),
        };
        Some(Arc::new(RealIpPlugin(RealIp {
            from: from?,
            trusted: trusted?,
            recursive: c.recursive,
        })))
    }
}

struct RealIpPlugin(RealIp);

impl Plugin for RealIpPlugin {
    fn phases(&self) -> Phases {
        Phases::REWRITE
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let src = sluice_core::env::Request {
            head: req,
            env: &*cx,
        };
        // Trust is judged on the current client address, as APISIX's `$remote_addr`: the
        // node-wide `real_ip` may have replaced the TCP peer's already.
        if let Some(real) = self.0.find(cx.client().ip(), &src) {
            cx.set_client(real);
        }
        Flow::Continue
    }
}
