//! `limit-req`: a leaky bucket per key (NGINX's `limit_req` algorithm): `rate` requests per
//! second, `burst` more may queue. Within the burst a request is delayed to the bucket's pace
//! (or passed at once with `nodelay`); beyond it, rejected. Shared by every worker of the node.
//!
//! `{rate, burst: 0, key_type: var, key: remote_addr, rejected_code: 503, rejected_msg,
//! nodelay: false, policy: local}`. `rate` is from 0.001 to 1,000,000,000 requests per second
//! (the bucket counts thousandths of a request), `burst` from 0 to 1,000,000,000.
//!
//! `policy: redis` (APISIX's `redis_*` fields, `allow_degradation`) adds a cluster-wide cap:
//! at most `ceil(rate + burst)` requests per whole second across every node that shares the
//! Redis server, counted with quota leases ([`crate::quota`]), on top of each node's bucket.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin};

use crate::limit::{Common, Limiter};
use crate::util::{Num, real};

crate::quota::with_redis_fields! {
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    rate: Num,
    #[serde(default = "zero")]
    burst: Num,
    #[serde(default)]
    nodelay: bool,
    #[serde(default = "Common::default_key_type")]
    key_type: String,
    #[serde(default = "Common::default_key")]
    key: String,
    #[serde(default = "Common::default_rejected_code")]
    rejected_code: Num,
    #[serde(default)]
    rejected_msg: Option<String>,
    #[serde(default = "local")]
    policy: String,
    /// Let requests through when Redis cannot be reached (`fail_open` is accepted too).
    #[serde(default, alias = "fail_open")]
    allow_degradation: bool,
}
}

fn local() -> String {
    "local".into()
}

fn zero() -> Num {
    Num::Whole(0)
}

/// Slowest rate: the bucket counts thousandths of a request, and a slower rate would drain
/// nothing (and be divided by).
const MIN_RATE: f64 = 0.001;
/// Fastest rate, and largest burst: far beyond what a node serves, and small enough that every
/// product in thousandths of a request fits.
const MAX_RATE: f64 = 1e9;

/// `x` in thousandths.
fn thousandths(x: f64) -> u64 {
    (x * 1000.0).round() as u64
}

/// Per key: the excess over the rate (in thousandths of a request) and when it was computed.
#[derive(Debug)]
struct Buckets {
    epoch: Instant,
    /// The rate the excess drains at, in thousandths of a request per second (part of the
    /// state's key: one rate per map).
    rate: u64,
    map: DashMap<u64, (u64, u64)>,
    sweep_at: AtomicUsize,
}

impl Buckets {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

/// Carried by a binary upgrade: each key's excess as it is at the export (the old process's
/// clock is not the new one's). What the old process counts while it drains is not added:
/// a bucket drains within `burst / rate` seconds, and those requests are at most one per
/// connection it still serves.
impl sluice_core::state::Carry for Buckets {
    fn export(&self) -> Value {
        let now = self.now_ms();
        self.map
            .iter()
            .filter_map(|e| {
                let (excess, last) = *e.value();
                let drained = self.rate.saturating_mul(now.saturating_sub(last)) / 1000;
                let left = excess.saturating_sub(drained);
                (left > 0).then(|| serde_json::json!([*e.key(), left]))
            })
            .collect()
    }

    fn import(&self, v: &Value) {
        let now = self.now_ms();
        for row in v.as_array().into_iter().flatten() {
            if let Some([key, excess]) = row.as_array().map(Vec::as_slice)
                && let (Some(key), Some(excess)) = (key.as_u64(), excess.as_u64())
            {
                self.map.insert(key, (excess, now));
            }
        }
    }
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    fn name(&self) -> &'static str {
        "limit-req"
    }

    fn priority(&self) -> i32 {
        1001
    }

    /// APISIX's `encrypt_fields`.
    fn encrypted_fields(&self) -> &'static [&'static str] {
        &["redis_password"]
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
        let rate = v.field("rate", |v| {
            real(
                c.rate,
                |r| (MIN_RATE..=MAX_RATE).contains(&r),
                "from 0.001 to 1000000000 requests per second",
                v,
            )
        });
        let burst = v.field("burst", |v| {
            real(
                c.burst,
                |b| (0.0..=MAX_RATE).contains(&b),
                "from 0 to 1000000000 requests",
                v,
            )
        });
        let redis = crate::quota::redis_target(&c.policy, c.redis_fields(), v);
        let common = Common {
            key_type: c.key_type.clone(),
            key: c.key.clone(),
            rejected_code: c.rejected_code,
            rejected_msg: c.rejected_msg.clone(),
        };
        let limiter = Limiter::new(&common, v)?;
        let (Some(rate), Some(burst), Some(redis)) = (rate, burst, redis) else {
            return None;
        };
        let key = format!(
            "limit-req/{}/{rate}/{burst}/{}/{}",
            cx.owner, c.key_type, c.key
        );
        let buckets = cx.state.get_or_insert_carried(&key, || Buckets {
            epoch: Instant::now(),
            rate: thousandths(rate).max(1),
            map: DashMap::new(),
            sweep_at: 1024.into(),
        });
        let local = LimitReq {
            rate: thousandths(rate).max(1),
            burst: thousandths(burst),
            nodelay: c.nodelay,
            limiter,
            buckets,
        };
        if let Some(target) = redis {
            let per_second = (rate + burst).ceil() as u64;
            let fail_open = c.allow_degradation;
            let quota =
                cx.state
                    .get_or_insert(&format!("{key}/redis/{target:?}/{fail_open}"), || {
                        crate::quota::Quota::new(
                            format!("sluice:limit-req:{:x}", crate::quota::stable_hash(&key)),
                            per_second.max(1),
                            1,
                            target,
                            fail_open,
                            format!("limit-req of {}", cx.owner),
                        )
                    });
            return Some(Arc::new(LimitReqRedis { local, quota }));
        }
        Some(Arc::new(local))
    }
}

struct LimitReq {
    /// Requests per second, in thousandths: at least 1.
    rate: u64,
    /// In thousandths of a request.
    burst: u64,
    nodelay: bool,
    limiter: Limiter,
    buckets: Arc<Buckets>,
}

impl LimitReq {
    /// NGINX's `ngx_http_limit_req_lookup`: the excess grows by one request and drains at
    /// `rate`; over `burst` the request is rejected (`None`, state untouched), otherwise it
    /// waits until the excess would have drained.
    fn take(&self, key: u64, now_ms: u64) -> Option<Duration> {
        let fresh = !self.buckets.map.contains_key(&key);
        let result = match self.buckets.map.entry(key) {
            Entry::Vacant(slot) => {
                slot.insert((0, now_ms));
                Some(Duration::ZERO)
            }
            Entry::Occupied(mut slot) => {
                let (excess, last) = *slot.get();
                let drained = self.rate.saturating_mul(now_ms.saturating_sub(last)) / 1000;
                let next = excess.saturating_add(1000).saturating_sub(drained);
                if next > self.burst {
                    None
                } else {
                    slot.insert((next, now_ms));
                    // `rate` is at least 1 (validation); `max` keeps a division by zero out
                    // whatever the instance is given.
                    Some(Duration::from_millis(
                        next.saturating_mul(1000) / self.rate.max(1),
                    ))
                }
            }
        };
        if fresh {
            self.sweep(now_ms);
        }
        result
    }

    /// Forgets keys whose bucket has drained, amortized: only when the map doubled since.
    fn sweep(&self, now_ms: u64) {
        let b = &self.buckets;
        if b.map.len() >= b.sweep_at.load(Ordering::Relaxed) {
            let rate = self.rate;
            b.map.retain(|_, (excess, last)| {
                rate.saturating_mul(now_ms.saturating_sub(*last)) / 1000 < *excess
            });
            b.sweep_at
                .store((b.map.len() * 2).max(1024), Ordering::Relaxed);
        }
    }
}

impl Plugin for LimitReq {
    fn needs_body(&self) -> bool {
        self.limiter.needs_body()
    }

    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let now = self.buckets.now_ms();
        match self.take(self.limiter.key(req, cx), now) {
            None => Flow::Respond(self.limiter.reject()),
            Some(d) if d.is_zero() || self.nodelay => Flow::Continue,
            Some(d) => Flow::Sleep(d),
        }
    }
}

/// `policy: redis`: the node's bucket, then the cluster-wide cap per second.
struct LimitReqRedis {
    local: LimitReq,
    quota: Arc<crate::quota::Quota>,
}

impl Plugin for LimitReqRedis {
    fn needs_body(&self) -> bool {
        self.local.limiter.needs_body()
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
            let key = self.local.limiter.key(req, cx);
            let now = self.local.buckets.now_ms();
            let Some(delay) = self.local.take(key, now) else {
                return Flow::Respond(self.local.limiter.reject());
            };
            if let Some(refused) = self
                .quota
                .take(key)
                .await
                .refusal(|| self.local.limiter.reject())
            {
                return refused;
            }
            if delay.is_zero() || self.local.nodelay {
                Flow::Continue
            } else {
                Flow::Sleep(delay)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::*;
    use sluice_config::PluginScope;

    /// A binary upgrade's hand-over: each bucket's excess as it stands at the export.
    #[test]
    fn buckets_are_carried_with_their_excess_drained_to_the_export() {
        use sluice_core::state::Carry;
        let make = || Buckets {
            epoch: Instant::now(),
            rate: 1_000, // one request per second
            map: DashMap::new(),
            sweep_at: 1024.into(),
        };
        let old = make();
        // 5 requests of excess, computed 2 s ago: 3 left now.
        old.map.insert(9, (5_000, 0));
        let old = Buckets {
            epoch: Instant::now() - Duration::from_secs(2),
            ..old
        };
        let new = make();
        new.import(&old.export());
        let (excess, _) = *new.map.get(&9).unwrap();
        assert!((2_990..=3_000).contains(&excess), "{excess}");
    }

    /// A bucket driven directly: `rate` and `burst` in thousandths of a request.
    fn bucket(rate: u64, burst: u64) -> LimitReq {
        LimitReq {
            rate,
            burst,
            nodelay: false,
            limiter: Limiter::new(
                &Common {
                    key_type: "var".into(),
                    key: "remote_addr".into(),
                    rejected_code: Num::Whole(503),
                    rejected_msg: None,
                },
                &mut Validator::new(),
            )
            .unwrap(),
            buckets: Arc::new(Buckets {
                epoch: Instant::now(),
                rate,
                map: DashMap::new(),
                sweep_at: 1024.into(),
            }),
        }
    }

    fn limiter(yaml: &str) -> Arc<dyn Plugin> {
        build("limit-req", yaml, &[]).plugin
    }

    #[test]
    fn the_bucket_leaks_at_the_rate_and_holds_the_burst() {
        // rate 10/s, burst 2, driven with explicit times.
        let lr = bucket(10_000, 2_000);
        assert_eq!(lr.take(1, 0), Some(Duration::ZERO));
        assert_eq!(lr.take(1, 0), Some(Duration::from_millis(100)));
        assert_eq!(lr.take(1, 0), Some(Duration::from_millis(200)));
        assert_eq!(lr.take(1, 0), None, "over the burst");
        // 100 ms later one request has drained.
        assert_eq!(lr.take(1, 100), Some(Duration::from_millis(200)));
        // Another key has its own bucket.
        assert_eq!(lr.take(2, 100), Some(Duration::ZERO));
    }

    #[test]
    fn requests_within_the_burst_wait_unless_nodelay() {
        let p = limiter("{rate: 1, burst: 1, rejected_code: 429}");
        let mut cx = ctx(&[], CLIENT);
        let req = || head("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(matches!(p.access(&mut req(), &mut cx), Flow::Continue));
        assert!(matches!(p.access(&mut req(), &mut cx), Flow::Sleep(d) if d.as_millis() == 1000));
        assert!(matches!(p.access(&mut req(), &mut cx), Flow::Respond(r) if r.status == 429));
        let p = limiter("{rate: 1, burst: 1, nodelay: true}");
        assert!(matches!(p.access(&mut req(), &mut cx), Flow::Continue));
        assert!(matches!(p.access(&mut req(), &mut cx), Flow::Continue));
        assert!(matches!(p.access(&mut req(), &mut cx), Flow::Respond(r) if r.status == 503));
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert_eq!(
            check("limit-req", "{rate: 0, burst: -1}", PluginScope::Route),
            vec![
                "plugins.limit-req.rate: must be from 0.001 to 1000000000 requests per second, got 0",
                "plugins.limit-req.burst: must be from 0 to 1000000000 requests, got -1"
            ]
        );
    }

    #[test]
    fn rates_and_bursts_are_bounded_so_the_bucket_arithmetic_holds() {
        let errors = |yaml: &str| check("limit-req", yaml, PluginScope::Route);
        // A rate under a thousandth of a request per second was 0 in the bucket's units, and
        // divided by: the panic.
        assert_eq!(
            errors("{rate: 0.0005, burst: 1}"),
            vec![
                "plugins.limit-req.rate: must be from 0.001 to 1000000000 requests per second, got 0.0005"
            ]
        );
        assert_eq!(
            errors("{rate: 1e-300}"),
            vec![
                "plugins.limit-req.rate: must be from 0.001 to 1000000000 requests per second, got 1e-300"
            ]
        );
        assert_eq!(
            errors("{rate: 1e300, burst: 18446744073709551615}"),
            vec![
                "plugins.limit-req.rate: must be from 0.001 to 1000000000 requests per second, got 1e300",
                "plugins.limit-req.burst: must be from 0 to 1000000000 requests, got 18446744073709551615"
            ]
        );
        assert_eq!(
            errors("{rate: -1}"),
            vec![
                "plugins.limit-req.rate: must be from 0.001 to 1000000000 requests per second, got -1"
            ]
        );
        assert_eq!(
            errors("{rate: 1, burst: NaN}"),
            vec!["plugins.limit-req.burst: must be a number, got \"NaN\""]
        );
        for ok in [
            "{rate: 0.001}",
            "{rate: 1000000000, burst: 1000000000}",
            "{rate: 1.5, burst: 0.5}",
        ] {
            assert_eq!(errors(ok), Vec::<String>::new(), "{ok}");
        }
    }

    #[test]
    fn the_slowest_rate_delays_and_rejects_without_panicking() {
        // One request every 1,000 seconds, one more may wait.
        let p = limiter("{rate: 0.001, burst: 1}");
        let mut cx = ctx(&[], CLIENT);
        let req = || head("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(matches!(p.access(&mut req(), &mut cx), Flow::Continue));
        assert!(
            matches!(p.access(&mut req(), &mut cx), Flow::Sleep(d) if d.as_secs() == 1000),
            "the second request waits for the bucket to drain"
        );
        assert!(matches!(p.access(&mut req(), &mut cx), Flow::Respond(r) if r.status == 503));
        // The instance itself never divides by zero, whatever it is given.
        let lr = bucket(0, u64::MAX);
        for _ in 0..3 {
            assert!(lr.take(1, u64::MAX).is_some());
        }
    }

    #[test]
    fn redis_settings_are_bounded() {
        assert_eq!(
            check(
                "limit-req",
                "{rate: 1, policy: redis, redis_host: h, redis_port: 0, redis_timeout: 0}",
                PluginScope::Route
            ),
            vec![
                "plugins.limit-req.redis_port: must be a whole number from 1 to 65535, got 0",
                "plugins.limit-req.redis_timeout: must be a whole number from 1 to 60000 milliseconds (one minute), got 0"
            ]
        );
        assert_eq!(
            check(
                "limit-req",
                "{rate: 1, policy: redis, redis_port: 70000, redis_timeout: 18446744073709551615}",
                PluginScope::Route
            ),
            vec![
                "plugins.limit-req.redis_host: is required with policy redis",
                "plugins.limit-req.redis_port: must be a whole number from 1 to 65535, got 70000",
                "plugins.limit-req.redis_timeout: must be a whole number from 1 to 60000 milliseconds (one minute), got 18446744073709551615"
            ]
        );
        // Unused with the local policy, as in APISIX.
        assert_eq!(
            check(
                "limit-req",
                "{rate: 1, redis_timeout: 0}",
                PluginScope::Route
            ),
            Vec::<String>::new()
        );
    }
}
