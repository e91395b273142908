//! `traffic-split`: sends a share of a route's requests to other upstreams (canary, blue-green),
//! optionally only requests that match conditions.
//!
//! `{rules: [{match: [{vars: [...]}], weighted_upstreams: [{upstream_id | upstream, weight}]}]}`.
//! The first rule whose `match` holds (any of its entries; no `match` always holds) picks an
//! upstream by weight; an entry without `upstream_id` or `upstream` is the route's own upstream.
//! Weights are followed exactly, in a fixed rotation shared by all workers (1:3 sends exactly
//! one request in four), rather than by chance. A weight is from 0 to 1,000,000, as a node's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::expr::Expr;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin, UpstreamRef};

use crate::util::{Num, whole};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    rules: Vec<RuleConfig>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RuleConfig {
    #[serde(default, rename = "match")]
    matches: Vec<MatchConfig>,
    weighted_upstreams: Vec<Weighted>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct MatchConfig {
    vars: Value,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Weighted {
    #[serde(default)]
    upstream_id: Option<Value>,
    #[serde(default)]
    upstream: Option<Value>,
    #[serde(default = "one")]
    weight: Num,
}

fn one() -> Num {
    Num::Whole(1)
}

struct Rule {
    matches: Vec<Expr>,
    /// Cumulative weights and the upstream (None: the route's own).
    choices: Vec<(u64, Option<UpstreamRef>)>,
    total: u64,
    turn: AtomicU64,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("traffic-split", 966, Config);

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        let mut rules = Vec::new();
        if c.rules.is_empty() {
            v.error_at("rules", "must not be empty");
            return None;
        }
        v.field("rules", |v| {
            for (i, r) in c.rules.iter().enumerate() {
                v.index(i, |v| {
                    let mut matches = Vec::new();
                    v.field("match", |v| {
                        for (j, m) in r.matches.iter().enumerate() {
                            match v.index(j, |v| v.field("vars", |v| Expr::parse(&m.vars, v))) {
                                Some(conds) => matches.push(conds),
                                None => ok = false,
                            }
                        }
                    });
                    if r.weighted_upstreams.is_empty() {
                        v.error_at("weighted_upstreams", "must not be empty");
                        ok = false;
                        return;
                    }
                    let mut choices = Vec::new();
                    let mut total = 0u64;
                    v.field("weighted_upstreams", |v| {
                        for (j, w) in r.weighted_upstreams.iter().enumerate() {
                            v.index(j, |v| {
                                let target = match (&w.upstream_id, &w.upstream) {
                                    (Some(_), Some(_)) => {
                                        v.error("use either upstream_id or upstream, not both");
                                        ok = false;
                                        return;
                                    }
                                    (Some(id), None) => {
                                        v.field("upstream_id", |v| (cx.upstreams)(id, v)).map(Some)
                                    }
                                    (None, Some(u)) => {
                                        v.field("upstream", |v| (cx.upstreams)(u, v)).map(Some)
                                    }
                                    (None, None) => Some(None),
                                };
                                let weight = v.field("weight", |v| {
                                    whole(w.weight, 0, sluice_config::MAX_WEIGHT, "", v)
                                });
                                match (target, weight) {
                                    (Some(t), Some(weight)) => {
                                        total = total.saturating_add(weight);
                                        choices.push((total, t));
                                    }
                                    _ => ok = false,
                                }
                            });
                        }
                    });
                    if total == 0 && ok {
                        v.error_at("weighted_upstreams", "the weights must not all be 0");
                        ok = false;
                    }
                    rules.push(Rule {
                        matches,
                        choices,
                        total,
                        turn: AtomicU64::new(0),
                    });
                });
            }
        });
        ok.then(|| Arc::new(TrafficSplit { rules }) as Arc<dyn Plugin>)
    }
}

struct TrafficSplit {
    rules: Vec<Rule>,
}

impl Plugin for TrafficSplit {
    fn needs_body(&self) -> bool {
        self.rules
            .iter()
            .flat_map(|r| &r.matches)
            .any(Expr::needs_body)
    }

    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let rule = self
            .rules
            .iter()
            .find(|r| r.matches.is_empty() || r.matches.iter().any(|m| m.matches(req, cx)));
        if let Some(r) = rule {
            // `total` is at least 1 (validation); `max` keeps a division by zero out whatever
            // the instance is given.
            let n = r.turn.fetch_add(1, Ordering::Relaxed) % r.total.max(1);
            if let Some((_, Some(up))) = r.choices.iter().find(|(cum, _)| n < *cum) {
                cx.upstream = Some(*up);
            }
        }
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;

    #[test]
    fn weights_split_exactly_and_unmatched_requests_stay() {
        let b = build(
            "traffic-split",
            "{rules: [{match: [{vars: [[\"http_x_beta\", \"==\", \"1\"]]}], weighted_upstreams: [{upstream_id: u1}]}, {weighted_upstreams: [{upstream: {nodes: {\"127.0.0.1:1\": 1}}, weight: 1}, {weight: 3}]}]}",
            &[],
        );
        assert_eq!(b.upstreams.len(), 2);
        let mut counts = [0; 3];
        for _ in 0..400 {
            let mut cx = ctx(&b.consumers, CLIENT);
            run(
                &*b.plugin,
                &mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
                &mut cx,
            );
            counts[cx.upstream.map_or(0, |u| u.0 as usize)] += 1;
        }
        assert_eq!(counts, [300, 0, 100]);
        let mut cx = ctx(&b.consumers, CLIENT);
        run(
            &*b.plugin,
            &mut head("GET / HTTP/1.1\r\nHost: a\r\nX-Beta: 1\r\n\r\n"),
            &mut cx,
        );
        assert_eq!(cx.upstream.map(|u| u.0), Some(1));
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert_eq!(
            check(
                "traffic-split",
                "{rules: [{weighted_upstreams: [{upstream_id: nope}, {upstream: {nodes: {}}}]}]}",
                PluginScope::Route
            ),
            vec![
                "plugins.traffic-split.rules[0].weighted_upstreams[0].upstream_id: upstream \"nope\" not found",
                "plugins.traffic-split.rules[0].weighted_upstreams[1].upstream.nodes: must not be empty"
            ]
        );
        assert_eq!(
            check(
                "traffic-split",
                "{rules: [{weighted_upstreams: [{weight: 0}]}]}",
                PluginScope::Route
            ),
            vec![
                "plugins.traffic-split.rules[0].weighted_upstreams: the weights must not all be 0"
            ]
        );
        // As a node's weight.
        assert_eq!(
            check(
                "traffic-split",
                "{rules: [{weighted_upstreams: [{weight: 1000001}, {weight: -1}, {weight: 0.5}, {weight: 1000000}]}]}",
                PluginScope::Route
            ),
            vec![
                "plugins.traffic-split.rules[0].weighted_upstreams[0].weight: must be a whole number from 0 to 1000000, got 1000001",
                "plugins.traffic-split.rules[0].weighted_upstreams[1].weight: must be a whole number from 0 to 1000000, got -1",
                "plugins.traffic-split.rules[0].weighted_upstreams[2].weight: must be a whole number from 0 to 1000000, got 0.5"
            ]
        );
    }
}
