//! `policy: redis` (and `redis-cluster`, `redis-sentinel`): requests in flight counted in Redis.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sluice_core::http::RequestHead;
use sluice_core::{Ctx, Flow, Plugin};
use sluice_core::plugin::Phases;

use super::admit::Admit;
use crate::limit::Limiter;
use crate::quota::Op;

/// `policy: redis` (or `redis-cluster`, `redis-sentinel`): the requests in flight are counted
/// in Redis, across every node, as APISIX counts them (a sorted set per key, one round trip
/// when a request enters and one, not waited for, when it leaves).
pub(super) struct LimitConnRedis {
    pub(super) admit: Admit,
    pub(super) limiter: Limiter,
    pub(super) target: crate::quota::RedisTarget,
    /// The Redis key's prefix: this plugin instance's.
    pub(super) prefix: String,
    pub(super) ttl: u64,
    pub(super) fail_open: bool,
    pub(super) down: AtomicBool,
}

/// A request counted in Redis: released when the request's context is dropped.
pub(super) struct Leaving {
    pub(super) target: crate::quota::RedisTarget,
    pub(super) key: String,
    pub(super) id: String,
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
pub(super) fn request_id() -> String {
    static PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let process = *PROCESS.get_or_init(|| fastrand::u64(..));
    format!("{process:x}-{:x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

impl LimitConnRedis {
    pub(super) fn unavailable(&self, why: &str) -> Flow {
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
