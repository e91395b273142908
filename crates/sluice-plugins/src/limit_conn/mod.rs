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
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, StreamPlugin, parse_config};
use sluice_core::{Ctx, Flow, Lease, Plugin};

use crate::limit::{Common, Limiter};

mod admit;
mod redis;
mod rules;
mod stream;

use admit::Admit;
use redis::LimitConnRedis;
use rules::{Amount, Count, MAX_CONN, Rule, Template};
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








/// Longest `key_ttl`: a week.
const MAX_TTL: u64 = 7 * 24 * 3600;

#[derive(Debug, Default)]
struct Counts {
    map: DashMap<u64, Arc<AtomicI64>>,
    sweep_at: AtomicUsize,
    /// After a binary upgrade: what of each key's count is the old process's requests (as
    /// it reported them), taken back when it is gone.
    carried: parking_lot::Mutex<std::collections::HashMap<u64, i64>>,
}

/// Carried by a binary upgrade: the requests each key has in flight in the old process. The
/// new process counts them as its own until the old one says they ended (its changes while
/// it drains are negative), so a key never gets `conn` more because two processes serve it;
/// and when the old process is gone, what it had not yet said ended is taken back (it was
/// killed, or could not send its last changes), so no count stays raised for ever.
impl sluice_core::state::Carry for Counts {
    fn export(&self) -> Value {
        self.map
            .iter()
            .filter_map(|e| {
                let n = e.value().load(Ordering::Acquire);
                (n > 0).then(|| serde_json::json!([*e.key(), n]))
            })
            .collect()
    }

    fn import(&self, v: &Value) {
        self.merge(v);
    }

    fn changes(&self, now: &Value, before: &Value) -> Option<Value> {
        let rows = |v: &Value| -> std::collections::HashMap<u64, i64> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| match r.as_array()?.as_slice() {
                    [k, n] => Some((k.as_u64()?, n.as_i64()?)),
                    _ => None,
                })
                .collect()
        };
        let (now, before) = (rows(now), rows(before));
        let mut out: Vec<Value> = Vec::new();
        for (k, n) in &now {
            let d = n - before.get(k).copied().unwrap_or(0);
            if d != 0 {
                out.push(serde_json::json!([k, d]));
            }
        }
        for (k, n) in &before {
            if !now.contains_key(k) {
                out.push(serde_json::json!([k, -n]));
            }
        }
        (!out.is_empty()).then_some(Value::Array(out))
    }

    fn merge(&self, changes: &Value) {
        let mut carried = self.carried.lock();
        for row in changes.as_array().into_iter().flatten() {
            if let Some([k, n]) = row.as_array().map(Vec::as_slice)
                && let (Some(k), Some(n)) = (k.as_u64(), n.as_i64())
            {
                self.map.entry(k).or_default().fetch_add(n, Ordering::AcqRel);
                let c = carried.entry(k).or_default();
                *c = c.saturating_add(n);
            }
        }
        carried.retain(|_, n| *n != 0);
    }

    fn gone(&self) {
        for (k, n) in self.carried.lock().drain() {
            self.map.entry(k).or_default().fetch_sub(n, Ordering::AcqRel);
        }
    }
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
            Some(a) => match v.field(field, |v| Count::compile(a, 0, MAX_CONN, "", v))? {
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
                    v.field("conn", |v| Count::compile(conn, 1, MAX_CONN, "", v)),
                    v.field("burst", |v| Count::compile(&burst, 0, MAX_CONN, "", v)),
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
                            let conn = v.field("conn", |v| Count::compile(&r.conn, 1, MAX_CONN, "", v));
                            let burst = v.field("burst", |v| Count::compile(&r.burst, 0, MAX_CONN, "", v));
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
            Count::Fixed(n) => *n as i64,
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
        let counts = cx.state.get_or_insert_carried(&key, || Counts {
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
            let (Some(conn), Some(burst)) = (r.conn.value(req, cx, 1, MAX_CONN), r.burst.value(req, cx, 0, MAX_CONN))
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
                conn: conn as i64,
                burst: burst as i64,
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
        let count = Count::needs_body;
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
            (conn, burst) => match (conn.value(req, cx, 1, MAX_CONN), burst.value(req, cx, 0, MAX_CONN)) {
                (Some(conn), Some(burst)) => Some(Admit {
                    conn: conn as i64,
                    burst: burst as i64,
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







#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;
    use sluice_core::Flow;

    /// A binary upgrade's hand-over: the requests in flight in the old process count in the
    /// new one until the old one says they ended.
    #[test]
    fn requests_in_flight_in_the_old_process_count_until_they_end() {
        use sluice_core::state::Carry;
        use std::sync::atomic::Ordering;
        let (old, new) = (super::Counts::default(), super::Counts::default());
        old.map.entry(1).or_default().store(3, Ordering::Relaxed);
        old.map.entry(2).or_default().store(1, Ordering::Relaxed);
        let exported = old.export();
        new.import(&exported);
        // The new process takes one request of key 1 itself.
        new.map.get(&1).unwrap().fetch_add(1, Ordering::Relaxed);
        let n = |c: &super::Counts, k: u64| c.map.get(&k).map_or(0, |v| v.load(Ordering::Relaxed));
        assert_eq!((n(&new, 1), n(&new, 2)), (4, 1));
        // Two of key 1's end in the old process, and key 2's leaves its map.
        old.map.get(&1).unwrap().store(1, Ordering::Relaxed);
        old.map.remove(&2);
        let now = old.export();
        new.merge(&old.changes(&now, &exported).unwrap());
        assert_eq!((n(&new, 1), n(&new, 2)), (2, 0));
        // The old process drained: only the new process's own request is left.
        new.merge(&old.changes(&serde_json::json!([]), &now).unwrap());
        assert_eq!((n(&new, 1), n(&new, 2)), (1, 0));
        // It said so: its going takes nothing more back.
        new.gone();
        assert_eq!((n(&new, 1), n(&new, 2)), (1, 0));
    }

    /// An old process that goes without saying its requests ended (killed while it drained,
    /// or its last changes not sent): they are taken back when the link closes, and the
    /// key's count is the new process's own (it stayed raised for ever).
    #[test]
    fn requests_of_an_old_process_gone_unannounced_are_taken_back() {
        use sluice_core::state::Carry;
        use std::sync::atomic::Ordering;
        let (old, new) = (super::Counts::default(), super::Counts::default());
        old.map.entry(1).or_default().store(3, Ordering::Relaxed);
        old.map.entry(2).or_default().store(2, Ordering::Relaxed);
        let exported = old.export();
        new.import(&exported);
        new.map.get(&2).unwrap().fetch_add(1, Ordering::Relaxed);
        // One of key 1's ends and is announced; then the old process is killed.
        old.map.get(&1).unwrap().store(2, Ordering::Relaxed);
        new.merge(&old.changes(&old.export(), &exported).unwrap());
        let n = |c: &super::Counts, k: u64| c.map.get(&k).map_or(0, |v| v.load(Ordering::Relaxed));
        assert_eq!((n(&new, 1), n(&new, 2)), (2, 3));
        new.gone();
        assert_eq!((n(&new, 1), n(&new, 2)), (0, 1));
        new.gone();
        assert_eq!((n(&new, 1), n(&new, 2)), (0, 1));
    }

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
                "plugins.limit-conn.rules[0].conn: must be a whole number, or text with $variables (\"${http_x_count ?? 5}\"), got \"many\"",
                "plugins.limit-conn.rules[0].burst: must be a whole number from 0 to 1000000000, got -1",
                "plugins.limit-conn.rules[0].key: unknown variable \"nope_x\", expected remote_addr, server_addr, consumer_name, uri, host, http_<header>, arg_<name>, cookie_<name>, jwt_claim_<name>, sent_http_<header> or another request variable",
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
