//! `limit-req`: a leaky bucket per key (NGINX's `limit_req` algorithm): `rate` requests per
//! second, `burst` more may queue. Within the burst a request is delayed to the bucket's pace
//! (or passed at once with `nodelay`); beyond it, rejected. Shared by every worker of the node.
//!
//! `{rate, burst: 0, key_type: var, key: remote_addr, rejected_code: 503, rejected_msg,
//! nodelay: false, policy: local}`.
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    rate: f64,
    #[serde(default)]
    burst: f64,
    #[serde(default)]
    nodelay: bool,
    #[serde(default = "Common::default_key_type")]
    key_type: String,
    #[serde(default = "Common::default_key")]
    key: String,
    #[serde(default = "Common::default_rejected_code")]
    rejected_code: u16,
    #[serde(default)]
    rejected_msg: Option<String>,
    #[serde(default = "local")]
    policy: String,
    /// Let requests through when Redis cannot be reached (`fail_open` is accepted too).
    #[serde(default, alias = "fail_open")]
    allow_degradation: bool,
    #[serde(default)]
    redis_host: Option<String>,
    #[serde(default)]
    redis_port: Option<u16>,
    #[serde(default)]
    redis_password: Option<String>,
    #[serde(default)]
    redis_database: Option<u32>,
    #[serde(default)]
    redis_timeout: Option<u64>,
}

fn local() -> String {
    "local".into()
}

/// Per key: the excess over the rate (in thousandths of a request) and when it was computed.
#[derive(Debug)]
struct Buckets {
    epoch: Instant,
    map: DashMap<u64, (u64, u64)>,
    sweep_at: AtomicUsize,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    fn name(&self) -> &'static str {
        "limit-req"
    }

    fn priority(&self) -> i32 {
        1001
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        if !(c.rate > 0.0 && c.rate <= 1e9) {
            v.error_at("rate", "must be > 0");
            ok = false;
        }
        if !(c.burst >= 0.0 && c.burst <= 1e9) {
            v.error_at("burst", "must be >= 0");
            ok = false;
        }
        let redis = crate::quota::redis_target(
            &c.policy,
            crate::quota::RedisFields {
                host: &c.redis_host,
                port: c.redis_port,
                password: &c.redis_password,
                database: c.redis_database,
                timeout: c.redis_timeout,
            },
            v,
        );
        ok &= redis.is_some();
        let common = Common {
            key_type: c.key_type.clone(),
            key: c.key.clone(),
            rejected_code: c.rejected_code,
            rejected_msg: c.rejected_msg.clone(),
        };
        let limiter = Limiter::new(&common, v)?;
        if !ok {
            return None;
        }
        let key = format!(
            "limit-req/{}/{}/{}/{}/{}",
            cx.owner, c.rate, c.burst, c.key_type, c.key
        );
        let buckets = cx.state.get_or_insert(&key, || Buckets {
            epoch: Instant::now(),
            map: DashMap::new(),
            sweep_at: 1024.into(),
        });
        let local = LimitReq {
            rate: (c.rate * 1000.0) as u64,
            burst: (c.burst * 1000.0) as u64,
            nodelay: c.nodelay,
            limiter,
            buckets,
        };
        if let Some(Some(target)) = redis {
            let per_second = (c.rate + c.burst).ceil() as u64;
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
    /// Requests per second, in thousandths.
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
                let next = (excess + 1000).saturating_sub(drained);
                if next > self.burst {
                    None
                } else {
                    slot.insert((next, now_ms));
                    Some(Duration::from_millis(next * 1000 / self.rate))
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
    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let now = self.buckets.epoch.elapsed().as_millis() as u64;
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
            let now = self.local.buckets.epoch.elapsed().as_millis() as u64;
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

    fn limiter(yaml: &str) -> Arc<dyn Plugin> {
        build("limit-req", yaml, &[]).plugin
    }

    #[test]
    fn the_bucket_leaks_at_the_rate_and_holds_the_burst() {
        // rate 10/s, burst 2, driven with explicit times.
        let lr = LimitReq {
            rate: 10_000,
            burst: 2_000,
            nodelay: false,
            limiter: Limiter::new(
                &Common {
                    key_type: "var".into(),
                    key: "remote_addr".into(),
                    rejected_code: 503,
                    rejected_msg: None,
                },
                &mut Validator::new(),
            )
            .unwrap(),
            buckets: Arc::new(Buckets {
                epoch: Instant::now(),
                map: DashMap::new(),
                sweep_at: 1024.into(),
            }),
        };
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
                "plugins.limit-req.rate: must be > 0",
                "plugins.limit-req.burst: must be >= 0"
            ]
        );
    }
}
