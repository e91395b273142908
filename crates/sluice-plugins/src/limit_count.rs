//! `limit-count`: at most `count` requests per `time_window` seconds per key, counted for the
//! whole node (every worker shares the counters). Fixed windows aligned on the clock, as
//! APISIX's local policy.
//!
//! `{count, time_window, key_type: var, key: remote_addr, rejected_code: 503, rejected_msg,
//! show_limit_quota_header: true, group, policy: local}`. Answers carry `X-RateLimit-Limit`,
//! `X-RateLimit-Remaining` and `X-RateLimit-Reset` (seconds until the window ends).
//!
//! Counters outlive configuration reloads: they are keyed by the route (or `group`) and the
//! plugin's settings, so an unrelated change keeps them and changing `count` starts afresh.
//!
//! `policy: redis` (with APISIX's `redis_host`, `redis_port`, `redis_password`,
//! `redis_database`, `redis_timeout` in ms, and `allow_degradation`) counts across every node
//! that shares the Redis server, through quota leases: see [`crate::quota`] for how, and for
//! the error bound.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
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
    count: u64,
    time_window: u64,
    #[serde(default = "Common::default_key_type")]
    key_type: String,
    #[serde(default = "Common::default_key")]
    key: String,
    #[serde(default = "Common::default_rejected_code")]
    rejected_code: u16,
    #[serde(default)]
    rejected_msg: Option<String>,
    #[serde(default = "yes")]
    show_limit_quota_header: bool,
    #[serde(default)]
    group: Option<String>,
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

fn yes() -> bool {
    true
}

fn local() -> String {
    "local".into()
}

/// Counts per key: (window number, requests in it). Shared by every worker.
#[derive(Debug, Default)]
struct Counters {
    map: DashMap<u64, (u64, u64)>,
    /// Size at which stale keys are swept next.
    sweep_at: std::sync::atomic::AtomicUsize,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    fn name(&self) -> &'static str {
        "limit-count"
    }

    fn priority(&self) -> i32 {
        1002
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        if c.count == 0 {
            v.error_at("count", "must be > 0");
            ok = false;
        }
        if c.time_window == 0 {
            v.error_at("time_window", "must be >= 1");
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
        let owner = match &c.group {
            Some(g) => format!("group:{g}"),
            None => cx.owner.to_owned(),
        };
        let key = format!(
            "limit-count/{owner}/{}/{}/{}/{}",
            c.count, c.time_window, c.key_type, c.key
        );
        if let Some(Some(target)) = redis {
            let fail_open = c.allow_degradation;
            let quota =
                cx.state
                    .get_or_insert(&format!("{key}/redis/{target:?}/{fail_open}"), || {
                        crate::quota::Quota::new(
                            format!("sluice:limit-count:{:x}", crate::quota::stable_hash(&key)),
                            c.count,
                            c.time_window,
                            target,
                            fail_open,
                            format!("limit-count of {owner}"),
                        )
                    });
            return Some(Arc::new(LimitCountRedis {
                count: c.count,
                headers: c.show_limit_quota_header,
                limiter,
                quota,
            }));
        }
        let counters = cx.state.get_or_insert(&key, || Counters {
            sweep_at: 1024.into(),
            ..Counters::default()
        });
        Some(Arc::new(LimitCount {
            count: c.count,
            window: c.time_window,
            headers: c.show_limit_quota_header,
            limiter,
            counters,
        }))
    }
}

struct LimitCount {
    count: u64,
    window: u64,
    headers: bool,
    limiter: Limiter,
    counters: Arc<Counters>,
}

impl LimitCount {
    /// Counts one request; returns the requests left in the window (None: over the limit)
    /// and the seconds until the window ends.
    fn take(&self, key: u64) -> (Option<u64>, u64) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let window = now / self.window;
        let reset = (window + 1) * self.window - now;
        let mut fresh = false;
        let used = {
            let mut e = self.counters.map.entry(key).or_insert_with(|| {
                fresh = true;
                (window, 0)
            });
            if e.0 != window {
                *e = (window, 0);
            }
            if e.1 < self.count {
                e.1 += 1;
                Some(e.1)
            } else {
                None
            }
        };
        if fresh {
            self.sweep(window);
        }
        (used.map(|u| self.count - u), reset)
    }

    /// Forgets keys of past windows, amortized: only when the map has doubled since the last
    /// sweep.
    fn sweep(&self, window: u64) {
        use std::sync::atomic::Ordering;
        let c = &self.counters;
        let at = c.sweep_at.load(Ordering::Relaxed);
        if c.map.len() >= at {
            c.map.retain(|_, e| e.0 == window);
            c.sweep_at
                .store((c.map.len() * 2).max(1024), Ordering::Relaxed);
        }
    }
}

impl Plugin for LimitCount {
    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let (left, reset) = self.take(self.limiter.key(req, cx));
        if self.headers {
            cx.response.add_header_num("X-RateLimit-Limit", self.count);
            cx.response
                .add_header_num("X-RateLimit-Remaining", left.unwrap_or(0));
            cx.response.add_header_num("X-RateLimit-Reset", reset);
        }
        match left {
            Some(_) => Flow::Continue,
            None => Flow::Respond(self.limiter.reject()),
        }
    }
}

/// `policy: redis`: counted across the cluster (see [`crate::quota`]).
struct LimitCountRedis {
    count: u64,
    headers: bool,
    limiter: Limiter,
    quota: Arc<crate::quota::Quota>,
}

impl Plugin for LimitCountRedis {
    fn phases(&self) -> Phases {
        Phases::ACCESS_ASYNC
    }

    fn access_async<'a>(
        &'a self,
        req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> sluice_core::plugin::LocalFuture<'a, Flow> {
        Box::pin(async move {
            let key = self.limiter.key(req, cx);
            let took = self.quota.take(key).await;
            if self.headers && took != crate::quota::Take::Unavailable {
                let left = match took {
                    crate::quota::Take::Granted { left } => left,
                    _ => 0,
                };
                cx.response.add_header_num("X-RateLimit-Limit", self.count);
                cx.response.add_header_num("X-RateLimit-Remaining", left);
                cx.response
                    .add_header_num("X-RateLimit-Reset", self.quota.reset());
            }
            took.refusal(|| self.limiter.reject())
                .unwrap_or(Flow::Continue)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;

    #[test]
    fn requests_over_the_count_are_rejected_with_quota_headers() {
        let b = build(
            "limit-count",
            "{count: 2, time_window: 60, rejected_code: 429, rejected_msg: slow down}",
            &[],
        );
        for left in [1, 0] {
            let mut cx = ctx(&b.consumers, CLIENT);
            assert!(
                run(
                    &*b.plugin,
                    &mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
                    &mut cx
                )
                .is_none()
            );
            let added = String::from_utf8(cx.response.added_bytes().to_vec()).unwrap();
            assert!(
                added.contains(&format!("X-RateLimit-Remaining: {left}\r\n")),
                "{added}"
            );
            assert!(added.starts_with("X-RateLimit-Limit: 2\r\n"));
        }
        let mut cx = ctx(&b.consumers, CLIENT);
        let r = run(
            &*b.plugin,
            &mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            &mut cx,
        )
        .unwrap();
        assert_eq!(
            (r.status, body(&r).as_str()),
            (429, "{\"error_msg\":\"slow down\"}\n")
        );
        // Another client has its own count.
        let mut cx = ctx(&b.consumers, "192.0.2.11:1");
        assert!(
            run(
                &*b.plugin,
                &mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
                &mut cx
            )
            .is_none()
        );
    }

    #[test]
    fn keys_can_be_headers_or_combinations() {
        let b = build(
            "limit-count",
            "{count: 1, time_window: 60, key: http_x_user}",
            &[],
        );
        let req = |u: &str| head(&format!("GET / HTTP/1.1\r\nHost: a\r\nX-User: {u}\r\n\r\n"));
        let mut cx = ctx(&b.consumers, CLIENT);
        assert!(run(&*b.plugin, &mut req("a"), &mut cx).is_none());
        assert!(run(&*b.plugin, &mut req("b"), &mut cx).is_none());
        assert_eq!(run(&*b.plugin, &mut req("a"), &mut cx).unwrap().status, 503);
        let b = build(
            "limit-count",
            "{count: 1, time_window: 60, key_type: var_combination, key: \"$remote_addr $http_x_user\"}",
            &[],
        );
        assert!(run(&*b.plugin, &mut req("a"), &mut cx).is_none());
        assert!(run(&*b.plugin, &mut req("b"), &mut cx).is_none());
        assert_eq!(run(&*b.plugin, &mut req("a"), &mut cx).unwrap().status, 503);
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert_eq!(
            check(
                "limit-count",
                "{count: 0, time_window: 0}",
                PluginScope::Route
            ),
            vec![
                "plugins.limit-count.count: must be > 0",
                "plugins.limit-count.time_window: must be >= 1"
            ]
        );
        assert_eq!(
            check(
                "limit-count",
                "{count: 1, time_window: 1, key: nope, rejected_code: 99}",
                PluginScope::Route
            ),
            vec![
                "plugins.limit-count.key: unknown variable \"nope\", expected remote_addr, server_addr, consumer_name, uri, host, http_<header>, arg_<name>, cookie_<name> or another request variable",
                "plugins.limit-count.rejected_code: must be a status code from 200 to 599"
            ]
        );
        assert_eq!(
            check("limit-count", "{count: 1}", PluginScope::Route),
            vec!["plugins.limit-count.time_window: is required"]
        );
    }
}
