//! `ai-proxy-multi`: a route in front of several language model instances (providers, models,
//! keys), chosen by priority and weight (`roundrobin`) or by a key (`chash`), with fallbacks:
//! when an instance answers 429 or 5xx, cannot be reached, times out before answering, or is
//! over its `ai-rate-limiting` limit, the request goes to the next instance, before any byte
//! of the failed answer reaches the client (never after: a stream that started is the answer).
//!
//! APISIX's fields: `instances` (`name`, `provider`, `priority`, `weight`, `auth`, `options`,
//! `override`, `provider_conf`, `checks`), `balancer` (`algorithm`, `hash_on`, `key`),
//! `fallback_strategy` (`instance_health_and_rate_limiting`, `http_429`, `http_5xx`, or a list
//! of `rate_limiting`, `http_429`, `http_5xx`), `fallback_http_statuses`, `max_retries`,
//! `retry_on_failure_within_ms`, and ai-proxy's `timeout`, `logging`, `keepalive`... Each
//! instance is an upstream of its own: its `checks.active` probes it, and an instance whose
//! node is down fails at once and falls back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use serde_json::{Map, Value};
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Fallback, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin};

use crate::ai::{
    self, AuthConfig, Exchange, InstanceFields, Logging, OverrideConfig, ProviderConf, Repick,
    Target,
};
use crate::ai_proxy::{Limits, shared_fields};
use crate::limit::{Common, Limiter};
use crate::util::Num;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct InstanceConfig {
    name: String,
    provider: String,
    #[serde(default)]
    priority: Option<Num>,
    weight: Num,
    auth: AuthConfig,
    #[serde(default)]
    options: Map<String, Value>,
    #[serde(default, rename = "override")]
    over: Option<OverrideConfig>,
    #[serde(default)]
    provider_conf: Option<ProviderConf>,
    #[serde(default)]
    checks: Option<Value>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct BalancerConfig {
    #[serde(default = "roundrobin")]
    algorithm: String,
    #[serde(default = "vars")]
    hash_on: String,
    #[serde(default)]
    key: Option<String>,
}

fn roundrobin() -> String {
    "roundrobin".into()
}

fn vars() -> String {
    "vars".into()
}

/// `fallback_strategy`: one name, or a list.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
enum Strategy {
    One(String),
    Many(Vec<String>),
}

shared_fields! {
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    instances: Vec<InstanceConfig>,
    #[serde(default)]
    balancer: Option<BalancerConfig>,
    #[serde(default)]
    fallback_strategy: Option<Strategy>,
    #[serde(default)]
    fallback_http_statuses: Vec<Num>,
    #[serde(default)]
    max_retries: Option<Num>,
    #[serde(default)]
    retry_on_failure_within_ms: Option<Num>,
}
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("ai-proxy-multi", 1041, Config);

    fn encrypted_fields(&self) -> &'static [&'static str] {
        &["instances.auth.header", "instances.auth.query"]
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let (shared, limits) = c.shared(v)?;
        if c.instances.is_empty() {
            v.error_at("instances", "must have at least one instance");
            return None;
        }
        let mut targets = Vec::new();
        let mut ok = true;
        v.field("instances", |v| {
            for (i, inst) in c.instances.iter().enumerate() {
                v.index(i, |v| {
                    if inst.name.is_empty() || inst.name.len() > 100 {
                        v.error_at("name", "must be 1 to 100 characters");
                        ok = false;
                    } else if c.instances[..i].iter().any(|o| o.name == inst.name) {
                        v.error_at("name", format!("\"{}\" names two instances", inst.name));
                        ok = false;
                    }
                    let weight = v.field("weight", |v| {
                        crate::util::whole(inst.weight, 0, sluice_config::MAX_WEIGHT, "", v)
                    });
                    let priority = match inst.priority {
                        None => Some(0),
                        Some(n) => v.field("priority", |v| {
                            let p = n.whole().filter(|p| (-1_000_000..=1_000_000).contains(p));
                            if p.is_none() {
                                v.error(format!(
                                    "must be a whole number from -1000000 to 1000000, got {n}"
                                ));
                            }
                            p.map(|p| p as i64)
                        }),
                    };
                    let fields = InstanceFields {
                        provider: &inst.provider,
                        auth: &inst.auth,
                        options: &inst.options,
                        over: inst.over.as_ref(),
                        provider_conf: inst.provider_conf.as_ref(),
                        checks: inst.checks.as_ref(),
                        call_only: false,
                    };
                    match (
                        Target::build(Arc::from(inst.name.as_str()), &fields, &shared, cx, v),
                        weight,
                        priority,
                    ) {
                        (Some(t), Some(w), Some(p)) => targets.push((t, p, w)),
                        _ => ok = false,
                    }
                });
            }
        });
        let mut on = On::default();
        match &c.fallback_strategy {
            None => {}
            Some(Strategy::One(s)) => match s.as_str() {
                "instance_health_and_rate_limiting" => {
                    on.failure = true;
                    on.rate_limit = true;
                }
                "http_429" => on.http_429 = true,
                "http_5xx" => on.http_5xx = true,
                other => {
                    v.error_at("fallback_strategy", format!("unknown strategy \"{other}\", expected instance_health_and_rate_limiting, http_429 or http_5xx"));
                    ok = false;
                }
            },
            Some(Strategy::Many(list)) => {
                for (i, s) in list.iter().enumerate() {
                    match s.as_str() {
                        "rate_limiting" => on.rate_limit = true,
                        "http_429" => on.http_429 = true,
                        "http_5xx" => on.http_5xx = true,
                        other => {
                            v.field("fallback_strategy", |v| v.index(i, |v| v.error(format!("unknown strategy \"{other}\", expected rate_limiting, http_429 or http_5xx"))));
                            ok = false;
                        }
                    }
                }
            }
        }
        v.field("fallback_http_statuses", |v| {
            for (i, s) in c.fallback_http_statuses.iter().enumerate() {
                match v.index(i, |v| crate::util::whole(*s, 400, 599, "", v)) {
                    Some(s) => on.statuses.push(s as u16),
                    None => ok = false,
                }
            }
        });
        let max_retries = match c.max_retries {
            None => Some(None),
            Some(n) => v
                .field("max_retries", |v| crate::util::whole(n, 0, 1000, "", v))
                .map(Some),
        };
        let within_ms = match c.retry_on_failure_within_ms {
            None => Some(None),
            Some(n) => v
                .field("retry_on_failure_within_ms", |v| {
                    crate::util::whole(n, 1, crate::ai_proxy::YEAR_MS, " (milliseconds)", v)
                })
                .map(Some),
        };
        let (Some(max_retries), Some(within_ms)) = (max_retries, within_ms) else {
            return None;
        };
        let balancer = c.balancer.unwrap_or(BalancerConfig {
            algorithm: roundrobin(),
            hash_on: vars(),
            key: None,
        });
        let hash = match balancer.algorithm.as_str() {
            "roundrobin" => None,
            "chash" => {
                let key = balancer.key.clone().unwrap_or_else(|| "remote_addr".into());
                let (key_type, key) = match balancer.hash_on.as_str() {
                    "vars" => ("var", key),
                    "header" => (
                        "var",
                        format!("http_{}", key.replace('-', "_").to_ascii_lowercase()),
                    ),
                    "cookie" => ("var", format!("cookie_{key}")),
                    "consumer" => ("var", "consumer_name".to_owned()),
                    "vars_combinations" => ("var_combination", key),
                    other => {
                        v.error_at("balancer.hash_on", format!("unknown hash_on \"{other}\", expected vars, header, cookie, consumer or vars_combinations"));
                        return None;
                    }
                };
                let common = Common {
                    key_type: key_type.into(),
                    key,
                    rejected_code: Num::Whole(503),
                    rejected_msg: None,
                };
                Some(v.field("balancer", |v| Limiter::new(&common, v))?)
            }
            "semantic" => {
                v.error_at(
                    "balancer.algorithm",
                    "semantic is not supported yet (it needs an embeddings provider)",
                );
                return None;
            }
            other => {
                v.error_at(
                    "balancer.algorithm",
                    format!("unknown algorithm \"{other}\", expected roundrobin or chash"),
                );
                return None;
            }
        };
        if !ok {
            return None;
        }
        // Highest priority first; the order of the configuration within a priority.
        targets.sort_by_key(|t| std::cmp::Reverse(t.1));
        let inner = Arc::new(Multi {
            targets,
            on,
            max_retries,
            within_ms,
            hash,
            turn: AtomicU64::new(0),
            limits,
            logging: c.logging,
        });
        Some(Arc::new(AiProxyMulti(inner)))
    }
}

/// What an instance is left for.
#[derive(Debug, Default)]
struct On {
    /// It could not be reached, or did not answer in time (or its node is down).
    failure: bool,
    /// `ai-rate-limiting` refuses it.
    rate_limit: bool,
    http_429: bool,
    http_5xx: bool,
    /// `fallback_http_statuses`.
    statuses: Vec<u16>,
}

impl On {
    fn any(&self) -> bool {
        self.failure
            || self.rate_limit
            || self.http_429
            || self.http_5xx
            || !self.statuses.is_empty()
    }

    fn falls_back(&self, why: Fallback) -> bool {
        match why {
            Fallback::Status(429) if self.http_429 => true,
            Fallback::Status(s) if (500..=599).contains(&s) && self.http_5xx => true,
            Fallback::Status(s) => self.statuses.contains(&s),
            Fallback::Failed(_) => self.failure || self.http_5xx,
        }
    }
}

#[derive(Debug)]
struct Multi {
    /// Instances by priority, highest first: (target, priority, weight).
    targets: Vec<(Target, i64, u64)>,
    on: On,
    max_retries: Option<u64>,
    within_ms: Option<u64>,
    /// `chash`'s key; None: weighted round robin.
    hash: Option<Limiter>,
    /// Round robin's turn, shared by every worker (one relaxed add per request).
    turn: AtomicU64,
    limits: Limits,
    logging: Logging,
}

impl Multi {
    /// The next instance for a request, among those not tried: the highest priority that has
    /// one of weight above 0, then by the balancer.
    fn choose(&self, req: &RequestHead, cx: &Ctx<'_>, tried: &[usize]) -> Option<usize> {
        let open = |i: &usize| !tried.contains(i) && self.targets[*i].2 > 0;
        let top = (0..self.targets.len())
            .filter(open)
            .map(|i| self.targets[i].1)
            .max()?;
        let group: Vec<usize> = (0..self.targets.len())
            .filter(|i| open(i) && self.targets[*i].1 == top)
            .collect();
        let total: u64 = group.iter().map(|i| self.targets[*i].2).sum();
        match &self.hash {
            None => {
                let mut at = self.turn.fetch_add(1, Ordering::Relaxed) % total.max(1);
                for i in &group {
                    let w = self.targets[*i].2;
                    if at < w {
                        return Some(*i);
                    }
                    at -= w;
                }
                group.first().copied()
            }
            Some(key) => {
                // Weighted rendezvous hashing: the same key keeps its instance while the set
                // does not change, and a removed instance moves only its own keys.
                let k = key.key(req, cx);
                group.iter().copied().max_by(|a, b| {
                    let score = |i: usize| {
                        let h = mix(k ^ mix(i as u64 + 1));
                        let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                        self.targets[i].2 as f64 / -u.ln()
                    };
                    score(*a).total_cmp(&score(*b))
                })
            }
        }
    }

    /// Sends the request to the next instance not tried. False: none is left.
    fn send_next(
        &self,
        req: &mut RequestHead,
        cx: &mut Ctx<'_>,
    ) -> Result<bool, sluice_core::Response> {
        let mut ex = std::mem::take(cx.slot::<Exchange>(ai::SLOT));
        let Some(client) = ex.client.clone() else {
            *cx.slot::<Exchange>(ai::SLOT) = ex;
            return Ok(false);
        };
        let Some(i) = self.choose(req, cx, &ex.tried) else {
            *cx.slot::<Exchange>(ai::SLOT) = ex;
            return Ok(false);
        };
        ex.tried.push(i);
        let done = self.targets[i].0.prepare(&client, req, cx, &mut ex);
        *cx.slot::<Exchange>(ai::SLOT) = ex;
        done.map(|()| true)
    }
}

/// SplitMix64's finaliser.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Repick for Multi {
    fn repick(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> bool {
        matches!(self.send_next(req, cx), Ok(true))
    }

    fn on_rate_limit(&self) -> bool {
        self.on.rate_limit
    }
}

struct AiProxyMulti(Arc<Multi>);

impl Plugin for AiProxyMulti {
    fn phases(&self) -> Phases {
        Phases::ACCESS
            .with(Phases::HEADER_FILTER)
            .with(Phases::BODY_FILTER)
            .with(Phases::LOG)
    }

    fn needs_body(&self) -> bool {
        true
    }

    fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        if let Err(r) = self.0.limits.start(cx) {
            return Flow::Respond(r);
        }
        cx.slot::<Exchange>(ai::SLOT).repick = Some(self.0.clone());
        match self.0.send_next(req, cx) {
            Ok(true) => Flow::Continue,
            Ok(false) => Flow::Respond(sluice_core::Response::error(
                503,
                "no AI instance is available",
            )),
            Err(r) => Flow::Respond(r),
        }
    }

    fn falls_back(&self) -> bool {
        self.0.on.any()
    }

    fn fallback(&self, req: &mut RequestHead, why: Fallback, cx: &mut Ctx<'_>) -> bool {
        let m = &self.0;
        if !m.on.falls_back(why) {
            return false;
        }
        let ex = cx.slot::<Exchange>(ai::SLOT);
        let retries = ex.tried.len().saturating_sub(1) as u64;
        if m.max_retries.is_some_and(|max| retries >= max) {
            return false;
        }
        if let (Some(within), Some(started)) = (m.within_ms, ex.started)
            && started.elapsed().as_millis() as u64 > within
        {
            return false;
        }
        let from = ex.instance.clone();
        match m.send_next(req, cx) {
            Ok(true) => {
                tracing::debug!(
                    from = from.as_deref().unwrap_or("-"),
                    ?why,
                    "ai-proxy-multi falls back"
                );
                true
            }
            _ => false,
        }
    }

    crate::ai::answer_phases!(0.logging);
}
