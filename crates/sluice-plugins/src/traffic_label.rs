//! `traffic-label`: labels requests with headers, by condition and by weight, as APISIX's
//! `traffic-label` (for the routing, canaries and logs that read them downstream).
//!
//! `{rules: [{match: [["uri", "==", "/api"]], actions: [{set_headers: {X-Server-Id: 100},
//! weight: 3}, {set_headers: {X-Server-Id: 200}, weight: 2}, {weight: 5}]}]}`. The first rule
//! whose `match` holds (a rule without one holds for every request) picks one of its actions
//! in turn by weight (3, 2 and 5 of every 10 requests above, in a fixed rotation rather than
//! by chance), and sets its headers on the request (values with variables, as
//! proxy-rewrite's); an action with only a weight sets nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::expr::Expr;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin};

use crate::proxy_rewrite::{Piece, render};
use crate::util::Num;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    rules: Vec<RuleConfig>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RuleConfig {
    #[serde(default, rename = "match")]
    #[schemars(with = "Option<Vec<Value>>")]
    matches: Option<Value>,
    actions: Vec<ActionConfig>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct ActionConfig {
    #[serde(default)]
    set_headers: Option<serde_json::Map<String, Value>>,
    #[serde(default = "one")]
    weight: Num,
}

fn one() -> Num {
    Num::Whole(1)
}

/// Largest weight, as a node's.
const MAX_WEIGHT: u64 = sluice_config::MAX_WEIGHT;

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("traffic-label", 967, Config);

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        if c.rules.is_empty() {
            v.error_at("rules", "must hold at least one rule");
            return None;
        }
        let mut ok = true;
        let mut rules = Vec::with_capacity(c.rules.len());
        v.field("rules", |v| {
            for (i, r) in c.rules.iter().enumerate() {
                v.index(i, |v| {
                    let matches = crate::util::rule_condition(&r.matches, "match", v);
                    if r.actions.is_empty() {
                        v.error_at("actions", "must hold at least one action");
                        ok = false;
                        return;
                    }
                    let mut actions = Vec::with_capacity(r.actions.len());
                    let mut total = 0u64;
                    v.field("actions", |v| {
                        for (j, a) in r.actions.iter().enumerate() {
                            v.index(j, |v| {
                                let weight = v.field("weight", |v| {
                                    crate::util::whole(a.weight, 1, MAX_WEIGHT, "", v)
                                });
                                let headers = match &a.set_headers {
                                    None => Some(Vec::new()),
                                    Some(h) if h.is_empty() => {
                                        v.error_at("set_headers", "must set at least one header");
                                        None
                                    }
                                    Some(h) => v.field("set_headers", |v| {
                                        crate::proxy_rewrite::header_map(
                                            h,
                                            false,
                                            &|n| cx.uri_param(n),
                                            v,
                                        )
                                    }),
                                };
                                match (weight, headers) {
                                    (Some(w), Some(h)) => {
                                        total = total.saturating_add(w);
                                        actions.push((total, h));
                                    }
                                    _ => ok = false,
                                }
                            });
                        }
                    });
                    match matches {
                        Some(matches) => rules.push(Rule {
                            matches,
                            actions,
                            total,
                            turn: AtomicU64::new(0),
                        }),
                        None => ok = false,
                    }
                });
            }
        });
        ok.then(|| Arc::new(TrafficLabel { rules }) as Arc<dyn Plugin>)
    }
}

/// Header names and their value templates.
type Headers = Vec<(String, Vec<Piece>)>;

struct Rule {
    /// None: every request.
    matches: Option<Expr>,
    /// Cumulative weights and the headers set.
    actions: Vec<(u64, Headers)>,
    total: u64,
    turn: AtomicU64,
}

struct TrafficLabel {
    rules: Vec<Rule>,
}

impl Plugin for TrafficLabel {
    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn needs_body(&self) -> bool {
        self.rules.iter().any(|r| {
            r.matches.as_ref().is_some_and(Expr::needs_body)
                || r.actions
                    .iter()
                    .flat_map(|(_, h)| h)
                    .any(|(_, t)| crate::proxy_rewrite::reads_body(t))
        })
    }

    fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let Some(r) = self
            .rules
            .iter()
            .find(|r| r.matches.as_ref().is_none_or(|m| m.matches(req, cx)))
        else {
            return Flow::Continue;
        };
        // `total` is at least 1 (every weight is); `max` keeps a division by zero out.
        let n = r.turn.fetch_add(1, Ordering::Relaxed) % r.total.max(1);
        if let Some((_, headers)) = r.actions.iter().find(|(cum, _)| n < *cum) {
            for (name, t) in headers {
                let value = render(t, req, cx);
                req.set_header(name, &value);
            }
        }
        Flow::Continue
    }
}
