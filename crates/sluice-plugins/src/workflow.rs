//! `workflow`: runs an action on the requests a condition picks, as APISIX's `workflow`.
//!
//! `{rules: [{case: [["arg_name", "==", "json"]], actions: [["return", {code: 403}]]}, ...]}`.
//! The first rule whose `case` holds (a rule without one holds for every request) runs its
//! action, and no later rule is looked at. Actions: `return` (`{code}`, 100 to 599: the
//! answer is that status with `{"error_msg":"rejected by workflow"}`), `limit-count` and
//! `limit-conn` (their whole configuration but limit-count's `group`, each rule's counters its
//! own). A plugin run as an action is taken out of the rest of that request's access phase,
//! so that the same plugin configured on the route does not count it twice (APISIX's
//! `skip_plugin`).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::expr::Expr;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, LocalFuture, Phases, PluginFactory, Plugins, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    rules: Vec<RuleConfig>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RuleConfig {
    #[serde(default)]
    #[schemars(with = "Option<Vec<Value>>")]
    case: Option<Value>,
    actions: Vec<Vec<Value>>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Return {
    code: crate::util::Num,
}

pub(crate) struct Factory;

/// The plugins an action may name besides `return`.
const PLUGIN_ACTIONS: [&str; 2] = ["limit-count", "limit-conn"];

impl PluginFactory for Factory {
    crate::util::describe!("workflow", 1006, Config);

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let registry = crate::builtin();
        let mut ok = true;
        let mut rules = Vec::with_capacity(c.rules.len());
        v.field("rules", |v| {
            for (i, r) in c.rules.iter().enumerate() {
                v.index(i, |v| {
                    let case = crate::util::rule_condition(&r.case, "case", v);
                    let action = v.field("actions", |v| match r.actions.as_slice() {
                        [one] => v.index(0, |v| action(one, i, &registry, cx, v)),
                        [] => {
                            v.error("must hold one action");
                            None
                        }
                        _ => {
                            v.error("only one action per rule (APISIX runs the first alone): make one rule per action");
                            None
                        }
                    });
                    match (case, action) {
                        (Some(case), Some(action)) => rules.push(Rule { case, action }),
                        _ => ok = false,
                    }
                });
            }
        });
        let waits = rules.iter().any(|r| match &r.action {
            Action::Plugin(_, p) => p.phases().contains(Phases::ACCESS_ASYNC),
            Action::Return(_) => false,
        });
        ok.then(|| Arc::new(Workflow { rules, waits }) as Arc<dyn Plugin>)
    }
}

/// Builds one action, `[name, {configuration}]`, of rule `rule`.
fn action(
    a: &[Value],
    rule: usize,
    registry: &crate::Registry,
    cx: &mut BuildCx<'_>,
    v: &mut Validator,
) -> Option<Action> {
    let (Some(Value::String(name)), conf) = (a.first(), a.get(1)) else {
        v.error("must be [<action>, {<its configuration>}]: [\"return\", {code: 403}]");
        return None;
    };
    if a.len() > 2 {
        v.error("must be [<action>, {<its configuration>}]");
        return None;
    }
    let empty = Value::Object(Default::default());
    let conf = conf.unwrap_or(&empty);
    if name == "return" {
        return v.index(1, |v| {
            let r: Return = parse_config(conf, v)?;
            let code = v.field("code", |v| crate::util::whole(r.code, 100, 599, "", v))?;
            Some(Action::Return(Response::json(
                code as u16,
                &serde_json::json!({"error_msg": "rejected by workflow"}),
            )))
        });
    }
    let Some(f) = PLUGIN_ACTIONS
        .contains(&name.as_str())
        .then(|| registry.get(name))
        .flatten()
    else {
        v.index(0, |v| {
            v.error(format!(
                "unsupported action \"{name}\", expected return, limit-count or limit-conn"
            ))
        });
        return None;
    };
    if conf.get("group").is_some() {
        v.index(1, |v| v.error_at("group", "cannot be used in a workflow action (APISIX's rule)"));
        return None;
    }
    // Each rule's counters its own (APISIX's `_vid`), apart from the route's own plugin.
    let owner = format!("{}/workflow/{rule}", cx.owner);
    let mut scoped = BuildCx {
        scope: cx.scope,
        owner: &owner,
        indexes: cx.indexes,
        upstreams: &mut *cx.upstreams,
        state: cx.state,
        plugin_attr: cx.plugin_attr,
        plugin_metadata: cx.plugin_metadata,
        tls_ports: cx.tls_ports,
        route_paths: cx.route_paths,
    };
    let p = v.index(1, |v| f.build(conf, &mut scoped, v))?;
    Some(Action::Plugin(f.name(), p))
}

enum Action {
    /// `return`: this answer.
    Return(Response),
    /// A plugin's access phase.
    Plugin(&'static str, Arc<dyn Plugin>),
}

struct Rule {
    /// None: every request.
    case: Option<Expr>,
    action: Action,
}

struct Workflow {
    rules: Vec<Rule>,
    /// An action waits on a service (a limit on Redis): the access phase is async.
    waits: bool,
}

impl Workflow {
    /// The action of the first rule that holds, if any.
    fn chosen(&self, req: &RequestHead, cx: &Ctx<'_>) -> Option<&Action> {
        self.rules
            .iter()
            .find(|r| r.case.as_ref().is_none_or(|c| c.matches(req, cx)))
            .map(|r| &r.action)
    }
}

impl Plugin for Workflow {
    fn phases(&self) -> Phases {
        if self.waits {
            Phases::ACCESS_ASYNC
        } else {
            Phases::ACCESS
        }
    }

    fn needs_body(&self) -> bool {
        self.rules.iter().any(|r| {
            r.case.as_ref().is_some_and(Expr::needs_body)
                || matches!(&r.action, Action::Plugin(_, p) if p.needs_body())
        })
    }

    fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        match self.chosen(req, cx) {
            None => Flow::Continue,
            Some(Action::Return(r)) => Flow::Respond(r.clone()),
            Some(Action::Plugin(name, p)) => {
                cx.skip(name);
                p.access(req, cx)
            }
        }
    }

    fn access_async<'a>(
        &'a self,
        req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> LocalFuture<'a, Flow> {
        Box::pin(async move {
            match self.chosen(req, cx) {
                None => Flow::Continue,
                Some(Action::Return(r)) => Flow::Respond(r.clone()),
                Some(Action::Plugin(name, p)) => {
                    cx.skip(name);
                    sluice_core::plugin::run_access(&**p, req, cx).await
                }
            }
        })
    }
}
