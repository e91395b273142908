//! `limit-conn`: at most `conn` requests in flight per key (plus `burst` more, delayed), across
//! every worker of the node. A slot is held until the response has been sent, however the
//! request ends: it is released when the request's context is dropped.
//!
//! `{conn, burst: 0, default_conn_delay, only_use_default_delay: false, key_type: var,
//! key: remote_addr, rejected_code: 503, rejected_msg}`. A request over `conn` but within
//! `conn + burst` waits `default_conn_delay` seconds times how far over it is (or just
//! `default_conn_delay` with `only_use_default_delay`); beyond, it is rejected. `conn` is from 1
//! to 1,000,000,000, `burst` from 0 to 1,000,000,000, `default_conn_delay` more than 0 and at
//! most 60 seconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, StreamPlugin, parse_config};
use sluice_core::{Ctx, Flow, Lease, Plugin};

use crate::limit::{Common, Limiter};

mod stream;
use crate::quota::Op;
use crate::util::{Num, real, whole};

crate::quota::with_redis_fields! {
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    /// A number, or text with variables (`"${http_x_conn ?? 5}"`) read per request.
    #[serde(default)]
    conn: Option<Amount>,
    #[serde(default)]
    burst: Option<Amount>,
    default_conn_delay: Num,
    /// APISIX 3's rules: each counts requests in flight by its own key, with its own `conn`
    /// and `burst`; instead of `conn`, `burst` and `key`.
    #[serde(default)]
    rules: Option<Vec<RuleConfig>>,
    #[serde(default)]
    only_use_default_delay: bool,
    #[serde(default = "Common::default_key_type")]
    key_type: String,
    #[serde(default = "Common::default_key")]
    key: String,
    #[serde(default = "Common::default_rejected_code")]
    rejected_code: Num,
    #[serde(default)]
    rejected_msg: Option<String>,
    #[serde(default)]
    allow_degradation: bool,
    /// `local` (APISIX's default): counted on this node. APISIX's `redis` and `redis-cluster`
    /// are refused with why (see [`check_policy`]).
    #[serde(default)]
    policy: Option<String>,
    /// Redis policies: seconds after which a request that never left (its node died) stops
    /// counting. Default 3,600.
    #[serde(default)]
    key_ttl: Option<Num>,
}
}

/// A rule of APISIX's `rules`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RuleConfig {
    conn: Amount,
    burst: Amount,
    /// Text with variables (`"${http_x_user}"`, `"$remote_addr $http_x_app"`); a request for
    /// which none has a value is not counted by this rule.
    key: String,
}

/// `conn` or `burst`: a number, or text with variables read per request.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
enum Amount {
    Number(Num),
    Text(String),
}

/// A compiled `conn` or `burst`.
enum Count {
    Fixed(i64),
    /// Read per request; a request whose text is not a whole number in range is not counted
    /// by the rule (APISIX's way).
    Read(Template),
}

impl Count {
    fn compile(a: &Amount, lo: u64, v: &mut Validator) -> Option<Count> {
        match a {
            Amount::Number(n) => whole(*n, lo, MAX_CONN, "", v).map(|n| Count::Fixed(n as i64)),
            Amount::Text(t) => match t.trim().parse::<i64>() {
                Ok(n) => whole(Num::Whole(i128::from(n)), lo, MAX_CONN, "", v)
                    .map(|n| Count::Fixed(n as i64)),
                Err(_) => match Template::parse(t) {
                    Ok(t) if t.0.iter().any(|p| matches!(p, Part::Var(..))) => Some(Count::Read(t)),
                    Ok(_) => {
                        v.error(format!(
                            "must be a whole number, or text with $variables (\"${{http_x_conn ?? 5}}\"), got \"{t}\""
                        ));
                        None
                    }
                    Err(e) => {
                        v.error(e);
                        None
                    }
                },
            },
        }
    }

    fn value(&self, req: &RequestHead, cx: &Ctx<'_>, lo: i64) -> Option<i64> {
        match self {
            Count::Fixed(n) => Some(*n),
            Count::Read(t) => t
                .render(req, cx)
                .0
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| (lo..=MAX_CONN as i64).contains(n)),
        }
    }
}

/// APISIX's `core.utils.resolve_var` templates (`sluice_core::template`): `$name`, `${name}`,
/// `${name ?? default}`.
struct Template(Vec<Part>);

enum Part {
    Text(String),
    Var(sluice_core::expr::Var, Option<String>),
}

impl Template {
    fn parse(src: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        for seg in sluice_core::template::split(src) {
            parts.push(match seg {
                sluice_core::template::Segment::Text(t) => Part::Text(t),
                sluice_core::template::Segment::Ref { name, default } => Part::Var(
                    sluice_core::expr::Var::parse(name)?,
                    default.map(str::to_owned),
                ),
            });
        }
        Ok(Template(parts))
    }

    /// The text, and how many variables had a value (or a default).
    fn render(&self, req: &RequestHead, cx: &Ctx<'_>) -> (String, usize) {
        let mut out = String::new();
        let mut resolved = 0;
        for p in &self.0 {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Var(var, default) => match (var.value(req, cx), default) {
                    (Some(v), _) => {
                        out.push_str(&String::from_utf8_lossy(&v));
                        resolved += 1;
                    }
                    (None, Some(d)) => {
                        out.push_str(d);
                        resolved += 1;
                    }
                    (None, None) => {}
                },
            }
        }
        (out, resolved)
    }

    fn needs_body(&self) -> bool {
        self.0
            .iter()
            .any(|p| matches!(p, Part::Var(v, _) if v.needs_body()))
    }
}

/// A compiled rule.
struct Rule {
    conn: Count,
    burst: Count,
    key: Template,
}

/// Most requests `conn` and `burst` may each allow: their sum fits every counter (the stream
/// proxy counts in 32 bits).
const MAX_CONN: u64 = 1_000_000_000;
/// Longest `key_ttl`: a week.
const MAX_TTL: u64 = 7 * 24 * 3600;

#[derive(Debug, Default)]
struct Counts {
    map: DashMap<u64, Arc<AtomicI64>>,
    sweep_at: AtomicUsize,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    fn name(&self) -> &'static str {
        "limit-conn"
    }

    fn priority(&self) -> i32 {
        1003
    }

    /// APISIX's `encrypt_fields`.
    fn encrypted_fields(&self) -> &'static [&'static str] {
        &["redis_password"]
    }

    fn on_stream(&self) -> bool {
        true
    }

    /// Connections per client address (`key: remote_addr`, `conn`, `burst`,
    /// `default_conn_delay`); every other field is checked as on an HTTP route but not used.
    fn build_stream(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn StreamPlugin>> {
        self.build(config, cx, v)?;
        let c: Config = parse_config(config, v)?;
        if c.key != "remote_addr" {
            v.error_at("key", "stream routes count connections by remote_addr only");
            return None;
        }
        let fixed = |a: &Option<Amount>, field: &str, v: &mut Validator| match a {
            None => Some(0),
            Some(a) => match v.field(field, |v| Count::compile(a, 0, v))? {
                Count::Fixed(n) => Some(n as u32),
                Count::Read(_) => {
                    v.error_at(field, "must be a number on stream routes");
                    None
                }
            },
        };
        if c.rules.is_some() {
            v.error_at("rules", "stream routes take conn and burst, not rules");
            return None;
        }
        let (conn, burst) = (fixed(&c.conn, "conn", v)?, fixed(&c.burst, "burst", v)?);
        let delay = real(c.default_conn_delay, |d| d > 0.0 && d <= 60.0, "", v)?;
        // Counts survive reloads while the route and its limit are unchanged.
        let counts = cx.state.get_or_insert(
            &format!("stream-limit-conn/{}/{config}", cx.owner),
            stream::Counts::default,
        );
        Some(Arc::new(stream::ConnLimit {
            conn,
            burst,
            delay: Duration::from_secs_f64(delay),
            counts,
        }))
    }

    fn schema(&self) -> Option<Value> {
        Some(crate::util::schema_of::<Config>())
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        // APISIX's oneOf: conn (and key) or rules.
        let (conn, burst, rules) = match (&c.conn, &c.rules) {
            (Some(_), Some(_)) => {
                v.error("give conn and burst, or rules, not both");
                (None, None, None)
            }
            (None, None) => {
                v.error_at("conn", "is required (or rules)");
                (None, None, None)
            }
            (Some(conn), None) => {
                let burst = c.burst.clone().unwrap_or(Amount::Number(Num::Whole(0)));
                (
                    v.field("conn", |v| Count::compile(conn, 1, v)),
                    v.field("burst", |v| Count::compile(&burst, 0, v)),
                    Some(Vec::new()),
                )
            }
            (None, Some(list)) => {
                if list.is_empty() {
                    v.error_at("rules", "must have at least one rule");
                }
                let mut ok = !list.is_empty();
                let mut rules = Vec::with_capacity(list.len());
                v.field("rules", |v| {
                    for (i, r) in list.iter().enumerate() {
                        v.index(i, |v| {
                            let conn = v.field("conn", |v| Count::compile(&r.conn, 1, v));
                            let burst = v.field("burst", |v| Count::compile(&r.burst, 0, v));
                            let key = v.field("key", |v| {
                                Template::parse(&r.key).map_err(|e| v.error(e)).ok()
                            });
                            match (conn, burst, key) {
                                (Some(conn), Some(burst), Some(key)) => {
                                    rules.push(Rule { conn, burst, key })
                                }
                                _ => ok = false,
                            }
                        });
                    }
                });
                (
                    Some(Count::Fixed(0)),
                    Some(Count::Fixed(0)),
                    ok.then_some(rules),
                )
            }
        };
        let delay = v.field("default_conn_delay", |v| {
            real(
                c.default_conn_delay,
                |d| d > 0.0 && d <= 60.0,
                "more than 0 and at most 60 seconds",
                v,
            )
        });
        let redis =
            crate::quota::redis_target(c.policy.as_deref().unwrap_or("local"), c.redis_fields(), v);
        let ttl = match c.key_ttl {
            None => Some(3600),
            Some(t) => v.field("key_ttl", |v| whole(t, 1, MAX_TTL, " seconds (a week)", v)),
        };
        let common = Common {
            key_type: c.key_type.clone(),
            key: c.key.clone(),
            rejected_code: c.rejected_code,
            rejected_msg: c.rejected_msg.clone(),
        };
        let limiter = Limiter::new(&common, v)?;
        let (Some(conn), Some(burst), Some(rules), Some(delay), Some(redis), Some(ttl)) =
            (conn, burst, rules, delay, redis, ttl)
        else {
            return None;
        };
        let delay = Duration::from_secs_f64(delay);
        if redis.is_some()
            && (!rules.is_empty() || !matches!((&conn, &burst), (Count::Fixed(_), Count::Fixed(_))))
        {
            v.error_at(
                "policy",
                "rules, and conn or burst read from variables, are counted on this node only: use policy local with them",
            );
            return None;
        }
        let fixed = |c: &Count| match c {
            Count::Fixed(n) => *n,
            Count::Read(_) => 0,
        };
        let admit = Admit {
            conn: fixed(&conn),
            burst: fixed(&burst),
            delay,
            only_default: c.only_use_default_delay,
        };
        if let Some(target) = redis {
            return Some(Arc::new(LimitConnRedis {
                admit,
                limiter,
                target,
                prefix: format!(
                    "limit_conn:{:x}",
                    crate::quota::stable_hash(&format!("{}/{}/{}", cx.owner, c.key_type, c.key))
                ),
                ttl,
                fail_open: c.allow_degradation,
                down: AtomicBool::new(false),
            }));
        }
        let key = format!("limit-conn/{}/{}/{}", cx.owner, c.key_type, c.key);
        let counts = cx.state.get_or_insert(&key, || Counts {
            sweep_at: 1024.into(),
            ..Counts::default()
        });
        Some(Arc::new(LimitConn {
            admit,
            conn,
            burst,
            rules,
            fail_open: c.allow_degradation,
            limiter,
            counts,
        }))
    }
}

/// `conn`, `burst` and the delay: what to do with the `n`th request in flight.
#[derive(Clone, Copy)]
struct Admit {
    conn: i64,
    burst: i64,
    delay: Duration,
    only_default: bool,
}

impl Admit {
    /// None: refused; otherwise how long it waits first.
    fn wait(&self, n: i64) -> Option<Duration> {
        if n > self.conn.saturating_add(self.burst) {
            return None;
        }
        if n <= self.conn {
            return Some(Duration::ZERO);
        }
        let times = if self.only_default {
            1
        } else {
            u32::try_from(n - self.conn).unwrap_or(u32::MAX)
        };
        Some(self.delay.saturating_mul(times))
    }

    fn flow(wait: Duration) -> Flow {
        if wait.is_zero() {
            Flow::Continue
        } else {
            Flow::Sleep(wait)
        }
    }
}

struct LimitConn {
    /// With fixed `conn` and `burst`.
    admit: Admit,
    conn: Count,
    burst: Count,
    /// APISIX 3's `rules` (empty: `conn`, `burst` and the key).
    rules: Vec<Rule>,
    fail_open: bool,
    limiter: Limiter,
    counts: Arc<Counts>,
}

impl LimitConn {
    /// APISIX 3's rules: each rule whose key has a value counts the request by that key;
    /// any refusal refuses it, and the waits add up.
    fn by_rules(&self, req: &RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let mut wait = Duration::ZERO;
        let mut counted = false;
        for r in &self.rules {
            let (Some(conn), Some(burst)) = (r.conn.value(req, cx, 1), r.burst.value(req, cx, 0))
            else {
                continue;
            };
            let (key, resolved) = r.key.render(req, cx);
            if resolved == 0 {
                continue;
            }
            counted = true;
            let (lease, n) = Lease::take(self.counter(crate::quota::stable_hash(&key)));
            let admit = Admit {
                conn,
                burst,
                ..self.admit
            };
            match admit.wait(n) {
                Some(w) => {
                    cx.hold(lease);
                    wait = wait.saturating_add(w);
                }
                None => {
                    drop(lease);
                    return Flow::Respond(self.limiter.reject());
                }
            }
        }
        if !counted {
            return self.no_rule();
        }
        Admit::flow(wait)
    }

    /// No rule applies to the request (no key has a value, or a count is not a number): let
    /// it through with `allow_degradation`, else 500, as APISIX.
    fn no_rule(&self) -> Flow {
        if self.fail_open {
            Flow::Continue
        } else {
            Flow::Respond(sluice_core::Response::error(
                500,
                "failed to get limit conn rules",
            ))
        }
    }

    fn counter(&self, key: u64) -> Arc<AtomicI64> {
        if let Some(c) = self.counts.map.get(&key) {
            return c.clone();
        }
        let c = self.counts.map.entry(key).or_default().clone();
        let counts = &self.counts;
        if counts.map.len() >= counts.sweep_at.load(Ordering::Relaxed) {
            // Counters nobody holds and at zero are forgotten.
            counts
                .map
                .retain(|_, c| Arc::strong_count(c) > 1 || c.load(Ordering::Acquire) > 0);
            counts
                .sweep_at
                .store((counts.map.len() * 2).max(1024), Ordering::Relaxed);
        }
        c
    }
}

impl Plugin for LimitConn {
    fn needs_body(&self) -> bool {
        let count = |c: &Count| matches!(c, Count::Read(t) if t.needs_body());
        self.limiter.needs_body()
            || count(&self.conn)
            || count(&self.burst)
            || self
                .rules
                .iter()
                .any(|r| r.key.needs_body() || count(&r.conn) || count(&r.burst))
    }

    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        if !self.rules.is_empty() {
            return self.by_rules(req, cx);
        }
        let admit = match (&self.conn, &self.burst) {
            (Count::Fixed(_), Count::Fixed(_)) => None,
            (conn, burst) => match (conn.value(req, cx, 1), burst.value(req, cx, 0)) {
                (Some(conn), Some(burst)) => Some(Admit {
                    conn,
                    burst,
                    ..self.admit
                }),
                _ => return self.no_rule(),
            },
        };
        let (lease, n) = Lease::take(self.counter(self.limiter.key(req, cx)));
        let Some(wait) = admit.as_ref().unwrap_or(&self.admit).wait(n) else {
            drop(lease);
            return Flow::Respond(self.limiter.reject());
        };
        cx.hold(lease);
        Admit::flow(wait)
    }
}

/// `policy: redis` (or `redis-cluster`, `redis-sentinel`): the requests in flight are counted
/// in Redis, across every node, as APISIX counts them (a sorted set per key, one round trip
/// when a request enters and one, not waited for, when it leaves).
struct LimitConnRedis {
    admit: Admit,
    limiter: Limiter,
    target: crate::quota::RedisTarget,
    /// The Redis key's prefix: this plugin instance's.
    prefix: String,
    ttl: u64,
    fail_open: bool,
    down: AtomicBool,
}

/// A request counted in Redis: released when the request's context is dropped.
struct Leaving {
    target: crate::quota::RedisTarget,
    key: String,
    id: String,
}

impl Drop for Leaving {
    fn drop(&mut self) {
        let id = std::mem::take(&mut self.id);
        crate::quota::tell(
            &self.target,
            std::mem::take(&mut self.key),
            Op::Leave { id },
        );
    }
}

/// A request's id in Redis: unique across nodes (a random prefix per process).
fn request_id() -> String {
    static PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let process = *PROCESS.get_or_init(|| fastrand::u64(..));
    format!("{process:x}-{:x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

impl LimitConnRedis {
    fn unavailable(&self, why: &str) -> Flow {
        if !self.down.swap(true, Ordering::Relaxed) {
            crate::quota::log_outage("limit-conn", &self.target, self.fail_open, why);
        }
        if self.fail_open {
            Flow::Continue
        } else {
            Flow::Respond(crate::quota::unavailable())
        }
    }
}

impl Plugin for LimitConnRedis {
    fn needs_body(&self) -> bool {
        self.limiter.needs_body()
    }

    fn phases(&self) -> Phases {
        Phases::ACCESS_ASYNC
    }

    fn access_async<'a>(
        &'a self,
        req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> sluice_core::plugin::LocalFuture<'a, Flow> {
        Box::pin(async move {
            let key = format!("{}:{:x}", self.prefix, self.limiter.key(req, cx));
            let id = request_id();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let limit = self.admit.conn.saturating_add(self.admit.burst) as u64;
            let op = Op::Enter {
                limit,
                ttl: self.ttl,
                now,
                id: id.clone(),
            };
            let answer = crate::quota::call(&self.target, key.clone(), op);
            // Released however this ends: an answer that comes after the wait gave up (or
            // after the client left) still added the request in Redis.
            cx.slot::<Vec<Leaving>>("limit-conn-redis").push(Leaving {
                target: self.target.clone(),
                key,
                id,
            });
            let n = match tokio::time::timeout(self.target.timeout.saturating_mul(2), answer).await
            {
                Ok(Ok(Ok(n))) => n,
                Ok(Ok(Err(e))) => return self.unavailable(&e),
                Ok(Err(_)) => return self.unavailable("the redis thread is gone"),
                Err(_) => return self.unavailable("no answer in time"),
            };
            if self.down.swap(false, Ordering::Relaxed) {
                tracing::info!(
                    plugin = "limit-conn",
                    "redis reachable again: counting cluster-wide"
                );
            }
            if n <= 0 {
                return Flow::Respond(self.limiter.reject());
            }
            match self.admit.wait(n) {
                Some(wait) => Admit::flow(wait),
                None => Flow::Respond(self.limiter.reject()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;
    use sluice_core::Flow;

    /// APISIX 3's rules (its limit-conn.md): each rule counts by its own key with its own
    /// limits, read from the request where written as variables; a rule whose key has no
    /// value does not count; none applying is a 500 (or a pass with allow_degradation).
    #[test]
    fn rules_count_by_their_own_keys() {
        let b = build(
            "limit-conn",
            r#"{rejected_code: 429, default_conn_delay: 0.1, policy: local, rules: [
                {key: "${http_x_subscription_id}", conn: "${http_x_custom_conn ?? 2}", burst: 0},
                {key: "${http_x_trial_id}", conn: 1, burst: 0}]}"#,
            &[],
        );
        let req = |h: &str| {
            head(&format!(
                "GET / HTTP/1.1
Host: a
{h}
"
            ))
        };
        let take = |h: &str| {
            let mut cx = ctx(&b.consumers, CLIENT);
            let flow = b.plugin.access(&mut req(h), &mut cx);
            (flow, cx)
        };
        let status = |f: &Flow| match f {
            Flow::Continue => 200,
            Flow::Respond(r) => r.status,
            _ => 0,
        };
        // Subscription s1: two at once (the default of the variable), the third refused.
        let (f1, _c1) = take(
            "X-Subscription-Id: s1
",
        );
        let (f2, _c2) = take(
            "X-Subscription-Id: s1
",
        );
        let (f3, _) = take(
            "X-Subscription-Id: s1
",
        );
        assert_eq!((status(&f1), status(&f2), status(&f3)), (200, 200, 429));
        // The header raises the limit for this request.
        let (f4, _c4) = take(
            "X-Subscription-Id: s1
X-Custom-Conn: 5
",
        );
        assert_eq!(status(&f4), 200);
        // Another key counts apart; the trial rule allows one.
        let (f5, _c5) = take(
            "X-Subscription-Id: s2
X-Trial-Id: t1
",
        );
        let (f6, _) = take(
            "X-Trial-Id: t1
",
        );
        assert_eq!((status(&f5), status(&f6)), (200, 429));
        // No rule applies: 500, as APISIX.
        let (f7, _) = take("");
        assert_eq!(status(&f7), 500);
        // A count that is not a number does not count the rule.
        let (f8, _) = take(
            "X-Subscription-Id: s9
X-Custom-Conn: many
",
        );
        assert_eq!(status(&f8), 500);
    }

    #[test]
    fn slots_are_held_until_the_request_ends() {
        let b = build(
            "limit-conn",
            "{conn: 1, burst: 1, default_conn_delay: 0.1, rejected_code: 429}",
            &[],
        );
        let req = || head("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        let mut first = ctx(&b.consumers, CLIENT);
        assert!(matches!(
            b.plugin.access(&mut req(), &mut first),
            Flow::Continue
        ));
        let mut second = ctx(&b.consumers, CLIENT);
        assert!(
            matches!(b.plugin.access(&mut req(), &mut second), Flow::Sleep(d) if d.as_millis() == 100)
        );
        let mut third = ctx(&b.consumers, CLIENT);
        assert!(
            matches!(b.plugin.access(&mut req(), &mut third), Flow::Respond(r) if r.status == 429)
        );
        drop(first);
        drop(second);
        let mut again = ctx(&b.consumers, CLIENT);
        assert!(matches!(
            b.plugin.access(&mut req(), &mut again),
            Flow::Continue
        ));
        // Another client is counted apart.
        let mut other = ctx(&b.consumers, "192.0.2.99:1");
        assert!(matches!(
            b.plugin.access(&mut req(), &mut other),
            Flow::Continue
        ));
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert_eq!(
            check(
                "limit-conn",
                "{conn: 0, burst: -1, default_conn_delay: 0}",
                PluginScope::Route
            ),
            vec![
                "plugins.limit-conn.conn: must be a whole number from 1 to 1000000000, got 0",
                "plugins.limit-conn.burst: must be a whole number from 0 to 1000000000, got -1",
                "plugins.limit-conn.default_conn_delay: must be more than 0 and at most 60 seconds, got 0"
            ]
        );
    }

    #[test]
    fn counts_and_delays_are_bounded() {
        let errors = |yaml: &str| check("limit-conn", yaml, PluginScope::Route);
        // conn + burst overflowed a 64-bit counter.
        assert_eq!(
            errors(
                "{conn: 9223372036854775807, burst: 18446744073709551615, default_conn_delay: 1e300}"
            ),
            vec![
                "plugins.limit-conn.conn: must be a whole number from 1 to 1000000000, got 9223372036854775807",
                "plugins.limit-conn.burst: must be a whole number from 0 to 1000000000, got 18446744073709551615",
                "plugins.limit-conn.default_conn_delay: must be more than 0 and at most 60 seconds, got 1e300"
            ]
        );
        assert_eq!(
            errors("{conn: 1.5, burst: 1e-300, default_conn_delay: -0.5}"),
            vec![
                "plugins.limit-conn.conn: must be a whole number from 1 to 1000000000, got 1.5",
                "plugins.limit-conn.burst: must be a whole number from 0 to 1000000000, got 1e-300",
                "plugins.limit-conn.default_conn_delay: must be more than 0 and at most 60 seconds, got -0.5"
            ]
        );
        assert_eq!(
            errors("{conn: 1, default_conn_delay: 1, rejected_code: -1}"),
            vec!["plugins.limit-conn.rejected_code: must be a status code from 200 to 599, got -1"]
        );
        // The Redis policies need where Redis is; key_ttl is bounded.
        assert_eq!(
            errors("{conn: 1, default_conn_delay: 1, policy: redis, key_ttl: 0}"),
            vec![
                "plugins.limit-conn.redis_host: is required with policy redis",
                "plugins.limit-conn.key_ttl: must be a whole number from 1 to 604800 seconds (a week), got 0"
            ]
        );
        assert_eq!(
            errors("{default_conn_delay: 1, conn: 1, rules: [{key: a, conn: 1, burst: 0}]}"),
            vec!["plugins.limit-conn: give conn and burst, or rules, not both"]
        );
        assert_eq!(
            errors("{default_conn_delay: 1, rules: [{key: \"${nope_x}\", conn: many, burst: -1}]}"),
            vec![
                "plugins.limit-conn.rules[0].conn: must be a whole number, or text with $variables (\"${http_x_conn ?? 5}\"), got \"many\"",
                "plugins.limit-conn.rules[0].burst: must be a whole number from 0 to 1000000000, got -1",
                "plugins.limit-conn.rules[0].key: unknown variable \"nope_x\", expected remote_addr, server_addr, consumer_name, uri, host, http_<header>, arg_<name>, cookie_<name> or another request variable",
            ]
        );
        assert_eq!(
            errors(
                "{default_conn_delay: 1, policy: redis, redis_host: h, rules: [{key: a, conn: 1, burst: 0}]}"
            ),
            vec![
                "plugins.limit-conn.policy: rules, and conn or burst read from variables, are counted on this node only: use policy local with them"
            ]
        );
        assert_eq!(
            errors("{conn: 1, default_conn_delay: 1, policy: nearby}"),
            vec![
                "plugins.limit-conn.policy: unknown policy \"nearby\", expected local, redis, redis-cluster or redis-sentinel"
            ]
        );
        for ok in [
            "{conn: 1000000000, burst: 1000000000, default_conn_delay: 60}",
            "{conn: 1, default_conn_delay: 0.0005}",
            "{conn: 1, default_conn_delay: 0.1, policy: local}",
            "{conn: 1, default_conn_delay: 0.1, policy: redis, redis_host: 127.0.0.1, redis_ssl: true}",
            "{conn: 1, default_conn_delay: 0.1, policy: redis-cluster, redis_cluster_nodes: ['a:1'], redis_cluster_name: c}",
        ] {
            assert_eq!(errors(ok), Vec::<String>::new(), "{ok}");
        }
    }

    #[test]
    fn the_largest_burst_delays_without_overflowing() {
        let b = build(
            "limit-conn",
            "{conn: 1, burst: 1000000000, default_conn_delay: 60}",
            &[],
        );
        let req = || head("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        let mut held = Vec::new();
        for expected in [0, 60, 120] {
            let mut cx = ctx(&b.consumers, CLIENT);
            match b.plugin.access(&mut req(), &mut cx) {
                Flow::Continue => assert_eq!(expected, 0),
                Flow::Sleep(d) => assert_eq!(d.as_secs(), expected),
                other => panic!("{other:?}"),
            }
            held.push(cx);
        }
    }
}
