//! `multi-auth`: lets a request in when any one of several auth plugins identifies it, as
//! APISIX's `multi-auth`.
//!
//! `{auth_plugins: [{key-auth: {}}, {basic-auth: {hide_credentials: true}}, ...]}`, at least
//! two, each an auth plugin with its own configuration (checked as it would be on the route).
//! They are tried in order; the first that identifies the request's consumer wins, and the
//! others are not asked. When none does, 401 `{"message":"Authorization Failed"}` with the
//! `WWW-Authenticate` of the last one that gave one (as APISIX, whose plugins each set the
//! field on their way out). The consumers' credentials are those of the listed plugins.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, LocalFuture, Phases, PluginFactory, Plugins, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    auth_plugins: Vec<serde_json::Map<String, Value>>,
}

pub(crate) struct Factory;

const NAME: &str = "multi-auth";

impl PluginFactory for Factory {
    crate::util::describe!(NAME, 2600, Config);

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        if cx.scope == sluice_core::plugin::Scope::Consumer {
            v.error("multi-auth has no credentials of its own: give each consumer the credentials of the plugins it lists");
            return None;
        }
        let c: Config = parse_config(config, v)?;
        if c.auth_plugins.len() < 2 {
            v.error_at("auth_plugins", "must list at least two auth plugins");
            return None;
        }
        let registry = crate::builtin();
        let mut ok = true;
        let mut plugins = Vec::with_capacity(c.auth_plugins.len());
        v.field("auth_plugins", |v| {
            for (i, entry) in c.auth_plugins.iter().enumerate() {
                v.index(i, |v| {
                    if entry.len() != 1 {
                        v.error("must name exactly one plugin: {<plugin>: {<its configuration>}}");
                        ok = false;
                        return;
                    }
                    let Some((name, conf)) = entry.iter().next() else {
                        return;
                    };
                    v.field(name, |v| {
                        let Some(f) = registry.get(name).filter(|f| f.is_auth() && f.name() != NAME)
                        else {
                            v.error(if registry.get(name).is_some() {
                                "is not an auth plugin (multi-auth takes key-auth, basic-auth, jwt-auth, hmac-auth, ldap-auth)"
                            } else {
                                "unknown plugin"
                            });
                            ok = false;
                            return;
                        };
                        match f.build(conf, cx, v) {
                            Some(p) => plugins.push((f.name(), p)),
                            None => ok = false,
                        }
                    });
                });
            }
        });
        let waits = plugins
            .iter()
            .any(|(_, p)| p.phases().contains(Phases::REWRITE_ASYNC));
        ok.then(|| Arc::new(MultiAuth { plugins, waits }) as Arc<dyn Plugin>)
    }
}

struct MultiAuth {
    plugins: Vec<(&'static str, Arc<dyn Plugin>)>,
    /// One of them asks a service (ldap-auth): the whole runs in the async rewrite phase.
    waits: bool,
}

/// Notes one plugin's answer: `Some` when it decided (identified the consumer, or went on as
/// its anonymous consumer), None when it refused (its challenge kept for the final 401).
fn decided(name: &str, flow: Flow, challenge: &mut Option<Vec<u8>>) -> Option<Flow> {
    match flow {
        Flow::Respond(r) => {
            tracing::debug!(plugin = name, status = r.status, "multi-auth: not authenticated");
            if let Some((_, h)) = r
                .headers
                .iter()
                .rev()
                .find(|(n, _)| n.eq_ignore_ascii_case("www-authenticate"))
            {
                *challenge = Some(h.clone());
            }
            None
        }
        other => Some(other),
    }
}

/// None of them identified the request.
fn refused(challenge: Option<Vec<u8>>) -> Flow {
    let r = Response::message(401, "Authorization Failed");
    Flow::Respond(match challenge {
        Some(h) => r.header("WWW-Authenticate", &h),
        None => r,
    })
}

impl Plugin for MultiAuth {
    /// A listed plugin that reads the body (hmac-auth's `validate_request_body`) has it read
    /// first, as on its own.
    fn needs_body(&self) -> bool {
        self.plugins.iter().any(|(_, p)| p.needs_body())
    }

    fn phases(&self) -> Phases {
        if self.waits {
            Phases::REWRITE_ASYNC
        } else {
            Phases::REWRITE
        }
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let mut challenge = None;
        for (name, p) in &self.plugins {
            if let Some(flow) = decided(name, p.rewrite(req, cx), &mut challenge) {
                return flow;
            }
        }
        refused(challenge)
    }

    fn rewrite_async<'a>(
        &'a self,
        req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> LocalFuture<'a, Flow> {
        Box::pin(async move {
            let mut challenge = None;
            for (name, p) in &self.plugins {
                let flow = sluice_core::plugin::run_rewrite(&**p, req, cx).await;
                if let Some(flow) = decided(name, flow, &mut challenge) {
                    return flow;
                }
            }
            refused(challenge)
        })
    }
}
