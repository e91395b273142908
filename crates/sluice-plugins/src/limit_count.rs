//! `limit-count`: at most `count` requests per `time_window` seconds per key, counted for the
//! whole node (every worker shares the counters). Fixed windows, each key's starting at its
//! first request (as APISIX: a key's counter lives `time_window` seconds from its creation).
//!
//! `{count, time_window, key_type: var, key: remote_addr, rejected_code: 503, rejected_msg,
//! show_limit_quota_header: true, group, policy: local}`. Answers carry `X-RateLimit-Limit`,
//! `X-RateLimit-Remaining` and `X-RateLimit-Reset` (seconds until the window ends). `count` is
//! from 1 to 1,000,000,000,000, `time_window` from 1 to 31,536,000 seconds (one year, the bound
//! of every duration in Sluice).
//!
//! Counters outlive configuration reloads: they are keyed by the route (or `group`) and the
//! plugin's settings, so an unrelated change keeps them and changing `count` starts afresh.
//! They outlive a binary upgrade too (`kill -USR2`): the new process takes the old one's
//! counts, and the requests the old one answers while it drains are added once it is done.
//!
//! `policy: redis` (with APISIX's `redis_host`, `redis_port`, `redis_password`,
//! `redis_database`, `redis_timeout` in ms, and `allow_degradation`) counts across every node
//! that shares the Redis server, through quota leases: see [`crate::quota`] for how, and for
//! the error bound.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin};

use crate::limit::{Common, Limiter};
use crate::util::{Num, whole};

crate::quota::with_redis_fields! {
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    count: Num,
    time_window: Num,
    #[serde(default = "Common::default_key_type")]
    key_type: String,
    #[serde(default = "Common::default_key")]
    key: String,
    #[serde(default = "Common::default_rejected_code")]
    rejected_code: Num,
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
    /// `fixed` (the default) or `sliding` (APISIX's: the previous window's count weighs in
    /// by how much of it the sliding window still covers). `sliding` with `policy: local`.
    #[serde(default)]
    window_type: Option<String>,
    /// APISIX's delayed sync of `policy: redis` (seconds, at least 0.1 and less than
    /// `time_window`): checked and accepted; Sluice's redis policy always counts locally and
    /// settles with Redis in leases (see [`crate::quota`]).
    #[serde(default)]
    sync_interval: Option<Num>,
}
}

fn yes() -> bool {
    true
}

fn local() -> String {
    "local".into()
}

/// Largest `count`: far beyond any real quota, and exact in Redis' Lua numbers (doubles).
const MAX_COUNT: u64 = 1_000_000_000_000;
/// Longest `time_window`: one year, as every duration in Sluice.
const MAX_WINDOW: u64 = 31_536_000;

/// Fixed windows, per key: (second its window ends, requests in it).
type Fixed = crate::limit::KeyMap<(u64, u64)>;

/// Sliding windows, per key: (the clock-aligned window the count is of, its count, the
/// previous window's count).
type Sliding = crate::limit::KeyMap<(u64, u64, u64)>;

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The entries of a carried key map: `[[key, a, b, ...], ...]` (windows are on the wall
/// clock, which both processes share).
fn carried_rows(v: &Value) -> impl Iterator<Item = Vec<u64>> + '_ {
    v.as_array().into_iter().flatten().filter_map(|row| {
        row.as_array()?
            .iter()
            .map(Value::as_u64)
            .collect::<Option<Vec<u64>>>()
    })
}

/// What was counted between two exports of windows (rows `[key, window, count, ...]`): per
/// key, `[key, window, added]` for the window of `now` (all its count when `before` had
/// another window).
fn window_changes(now: &Value, before: &Value) -> Option<Value> {
    let before: std::collections::HashMap<u64, (u64, u64)> = carried_rows(before)
        .filter_map(|r| Some((*r.first()?, (*r.get(1)?, *r.get(2)?))))
        .collect();
    let rows: Vec<Value> = carried_rows(now)
        .filter_map(|r| {
            let (key, window, count) = (*r.first()?, *r.get(1)?, *r.get(2)?);
            let had = match before.get(&key) {
                Some(&(w, c)) if w == window => c,
                _ => 0,
            };
            (count > had).then(|| serde_json::json!([key, window, count - had]))
        })
        .collect();
    (!rows.is_empty()).then_some(Value::Array(rows))
}

/// Fixed windows carried: each key's window end and count; after the export, the requests
/// counted in the same window (or in a window begun since).
impl sluice_core::state::Carry for Fixed {
    fn export(&self) -> Value {
        let now = unix_secs();
        self.map
            .iter()
            .filter(|e| e.0 > now)
            .map(|e| serde_json::json!([*e.key(), e.0, e.1]))
            .collect()
    }

    fn import(&self, v: &Value) {
        for row in carried_rows(v) {
            if let [key, ends, count] = row[..] {
                self.map.insert(key, (ends, count));
            }
        }
    }

    fn changes(&self, now: &Value, before: &Value) -> Option<Value> {
        window_changes(now, before)
    }

    fn merge(&self, changes: &Value) {
        let now = unix_secs();
        for row in carried_rows(changes) {
            let [key, ends, added] = row[..] else {
                continue;
            };
            let mut e = self.map.entry(key).or_insert((ends, 0));
            if e.0 == ends {
                e.1 = e.1.saturating_add(added);
            } else if e.0 <= now {
                // This process's window for the key is over: the old one's is the current.
                *e = (ends, added);
            } else if ends > now {
                // Both windows are current: each process began one of its own after the
                // carried window ended. The old one's requests count in this one's.
                e.1 = e.1.saturating_add(added);
            }
        }
    }
}

/// Sliding windows carried: each key's window (clock-aligned), its count and the previous
/// window's; after the export, the requests counted in the current window.
impl sluice_core::state::Carry for Sliding {
    fn export(&self) -> Value {
        self.map
            .iter()
            .map(|e| serde_json::json!([*e.key(), e.0, e.1, e.2]))
            .collect()
    }

    fn import(&self, v: &Value) {
        for row in carried_rows(v) {
            if let [key, id, count, last] = row[..] {
                self.map.insert(key, (id, count, last));
            }
        }
    }

    fn changes(&self, now: &Value, before: &Value) -> Option<Value> {
        window_changes(now, before)
    }

    fn merge(&self, changes: &Value) {
        for row in carried_rows(changes) {
            let [key, id, added] = row[..] else {
                continue;
            };
            let mut e = self.map.entry(key).or_insert((id, 0, 0));
            if e.0 == id {
                e.1 = e.1.saturating_add(added);
            } else if e.0.checked_add(1) == Some(id) {
                *e = (id, added, e.1);
            } else if e.0 < id {
                *e = (id, added, 0);
            } else if id.checked_add(1) == Some(e.0) {
                // Late news of the window before this process's: it is the previous count.
                e.2 = e.2.saturating_add(added);
            }
        }
    }
}

/// The counts of one limit: fixed windows starting at a key's first request (APISIX's
/// default), or `window_type: sliding`.
enum Windows {
    Fixed(Arc<Fixed>),
    Sliding(Arc<Sliding>),
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    fn name(&self) -> &'static str {
        "limit-count"
    }

    fn priority(&self) -> i32 {
        1002
    }

    /// APISIX's `encrypt_fields`.
    fn encrypted_fields(&self) -> &'static [&'static str] {
        &["redis_password", "sentinel_password"]
    }

    fn schema(&self) -> Option<Value> {
        Some(crate::util::schema_of::<Config>())
    }

    fn check_metadata(&self, fields: &serde_json::Map<String, Value>, v: &mut Validator) {
        check_metadata(fields, v);
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let count = v.field("count", |v| whole(c.count, 1, MAX_COUNT, "", v));
        let window = v.field("time_window", |v| {
            whole(c.time_window, 1, MAX_WINDOW, " seconds (one year)", v)
        });
        let redis = crate::quota::redis_target(&c.policy, c.redis_fields(), v);
        let common = Common {
            key_type: c.key_type.clone(),
            key: c.key.clone(),
            rejected_code: c.rejected_code,
            rejected_msg: c.rejected_msg.clone(),
        };
        let limiter = Limiter::new(&common, v)?;
        let sliding = match c.window_type.as_deref() {
            None | Some("fixed") => Some(false),
            Some("sliding") if c.policy == "local" => Some(true),
            Some("sliding") => {
                v.error_at(
                    "window_type",
                    "sliding works with policy local (policy redis counts fixed windows)",
                );
                None
            }
            Some(other) => {
                v.error_at(
                    "window_type",
                    format!("unknown window type \"{other}\", expected fixed or sliding"),
                );
                None
            }
        };
        let synced = match c.sync_interval {
            None => Some(()),
            Some(n) => v.field("sync_interval", |v| {
                crate::util::real(
                    n,
                    |x| x >= 0.1 && window.is_none_or(|w| x < w as f64),
                    "at least 0.1 and less than time_window (seconds)",
                    v,
                )
                .map(|_| ())
            }),
        };
        let (Some(count), Some(window), Some(redis), Some(sliding), Some(())) =
            (count, window, redis, sliding, synced)
        else {
            return None;
        };
        let owner = match &c.group {
            Some(g) => format!("group:{g}"),
            None => cx.owner.to_owned(),
        };
        let key = format!(
            "limit-count/{owner}/{count}/{window}/{}/{}",
            c.key_type, c.key
        );
        if let Some(target) = redis {
            let fail_open = c.allow_degradation;
            let quota =
                cx.state
                    .get_or_insert(&format!("{key}/redis/{target:?}/{fail_open}"), || {
                        crate::quota::Quota::new(
                            format!("sluice:limit-count:{:x}", crate::quota::stable_hash(&key)),
                            count,
                            window,
                            target,
                            fail_open,
                            format!("limit-count of {owner}"),
                        )
                    });
            return Some(Arc::new(LimitCountRedis {
                count,
                headers: c.show_limit_quota_header.then(|| QuotaHeaders::of(cx)),
                limiter,
                quota,
            }));
        }
        let windows = if sliding {
            Windows::Sliding(
                cx.state
                    .get_or_insert_carried(&format!("{key}/sliding"), Sliding::default),
            )
        } else {
            Windows::Fixed(cx.state.get_or_insert_carried(&key, Fixed::default))
        };
        Some(Arc::new(LimitCount {
            count,
            window,
            headers: c.show_limit_quota_header.then(|| QuotaHeaders::of(cx)),
            limiter,
            windows,
        }))
    }
}

/// The names of the quota fields in answers: `X-RateLimit-Limit`, `-Remaining`, `-Reset`, or
/// those of the plugin's `plugin_metadata` (`limit_header`, `remaining_header`,
/// `reset_header`), as APISIX.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct QuotaHeaders {
    limit_header: String,
    remaining_header: String,
    reset_header: String,
}

impl Default for QuotaHeaders {
    fn default() -> Self {
        QuotaHeaders {
            limit_header: "X-RateLimit-Limit".into(),
            remaining_header: "X-RateLimit-Remaining".into(),
            reset_header: "X-RateLimit-Reset".into(),
        }
    }
}

impl QuotaHeaders {
    /// The names in force: the metadata's (checked when the configuration loaded), else the
    /// defaults.
    fn of(cx: &BuildCx<'_>) -> Box<QuotaHeaders> {
        let names = cx
            .metadata("limit-count")
            .and_then(|m| serde_json::from_value(Value::Object(m.clone())).ok())
            .unwrap_or_default();
        Box::new(names)
    }

    fn add(&self, cx: &mut Ctx<'_>, count: u64, left: u64, reset: u64) {
        cx.response.add_header_num(&self.limit_header, count);
        cx.response.add_header_num(&self.remaining_header, left);
        cx.response.add_header_num(&self.reset_header, reset);
    }
}

/// Checks `limit-count`'s `plugin_metadata` (`v` points at the item).
pub(crate) fn check_metadata(fields: &serde_json::Map<String, Value>, v: &mut Validator) {
    let mut fields = fields.clone();
    fields.remove("id");
    let Some(names) = parse_config::<QuotaHeaders>(&Value::Object(fields), v) else {
        return;
    };
    for (field, name) in [
        ("limit_header", &names.limit_header),
        ("remaining_header", &names.remaining_header),
        ("reset_header", &names.reset_header),
    ] {
        v.field(field, |v| crate::util::check_header_name(name, v));
    }
}

struct LimitCount {
    count: u64,
    /// Seconds, at least 1.
    window: u64,
    headers: Option<Box<QuotaHeaders>>,
    limiter: Limiter,
    windows: Windows,
}

impl LimitCount {
    /// Counts one request at `now` (seconds since the epoch): the requests left in the window
    /// (None: over the limit) and the seconds until it ends.
    fn take(&self, key: u64, now: f64) -> (Option<u64>, u64) {
        match &self.windows {
            Windows::Fixed(f) => self.take_fixed(f, key, now as u64),
            Windows::Sliding(s) => self.take_sliding(s, key, now),
        }
    }

    /// A key's window starts at its first request (APISIX's local counter lives
    /// `time_window` seconds from its creation).
    fn take_fixed(&self, map: &Fixed, key: u64, now: u64) -> (Option<u64>, u64) {
        // `window` is from 1 to a year (validation); saturation keeps an overflow out
        // whatever the instance is given.
        let mut fresh = false;
        let (used, ends) = {
            let mut e = map.map.entry(key).or_insert_with(|| {
                fresh = true;
                (0, 0)
            });
            if now >= e.0 {
                *e = (now.saturating_add(self.window.max(1)), 0);
            }
            let used = if e.1 < self.count {
                e.1 += 1;
                Some(e.1)
            } else {
                None
            };
            (used, e.0)
        };
        if fresh {
            // Keys whose window has ended.
            map.sweep(|e| e.0 > now);
        }
        (
            used.map(|u| self.count.saturating_sub(u)),
            ends.saturating_sub(now),
        )
    }

    /// `window_type: sliding` (APISIX's sliding-window.lua): windows aligned on the clock; a
    /// request is admitted while the current window's count, plus the previous window's count
    /// weighted by the share of it the sliding window still covers, is under `count`.
    fn take_sliding(&self, map: &Sliding, key: u64, now: f64) -> (Option<u64>, u64) {
        let window = self.window as f64;
        let id = (now / window).floor() as u64;
        let remaining_time = window - now % window;
        let mut fresh = false;
        let (admitted, cur, last) = {
            let mut e = map.map.entry(key).or_insert_with(|| {
                fresh = true;
                (id, 0, 0)
            });
            if e.0 != id {
                // The window moved on: the count becomes the previous window's if it was the
                // one just before, else nothing.
                let last = if e.0.checked_add(1) == Some(id) { e.1 } else { 0 };
                *e = (id, 0, last);
            }
            let last = e.2.min(self.count);
            let estimated = last as f64 / window * remaining_time + e.1 as f64;
            let admitted = e.1 < self.count && estimated < self.count as f64;
            if admitted {
                e.1 += 1;
            }
            (admitted, e.1, last)
        };
        if fresh {
            // Keys idle for two windows.
            map.sweep(|e| e.0.saturating_add(1) >= id);
        }
        let left = (self.count as f64 - cur as f64 - last as f64 / window * remaining_time)
            .floor()
            .max(0.0) as u64;
        (admitted.then_some(left), remaining_time.ceil() as u64)
    }
}

impl Plugin for LimitCount {
    fn needs_body(&self) -> bool {
        self.limiter.needs_body()
    }

    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let (left, reset) = self.take(self.limiter.key(req, cx), now);
        if let Some(h) = &self.headers {
            h.add(cx, self.count, left.unwrap_or(0), reset);
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
    headers: Option<Box<QuotaHeaders>>,
    limiter: Limiter,
    quota: Arc<crate::quota::Quota>,
}

impl Plugin for LimitCountRedis {
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
            let key = self.limiter.key(req, cx);
            let took = self.quota.take(key).await;
            if let Some(h) = &self.headers
                && took != crate::quota::Take::Unavailable
            {
                let left = match took {
                    crate::quota::Take::Granted { left } => left,
                    _ => 0,
                };
                h.add(cx, self.count, left, self.quota.reset());
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
    fn sliding_windows_weigh_the_previous_window_as_apisix() {
        let common = crate::limit::Common {
            key_type: "var".into(),
            key: "remote_addr".into(),
            rejected_code: crate::util::Num::Whole(429),
            rejected_msg: None,
        };
        let s = super::LimitCount {
            count: 10,
            window: 60,
            headers: None,
            limiter: crate::limit::Limiter::new(&common, &mut sluice_config::Validator::new())
                .unwrap(),
            windows: super::Windows::Sliding(std::sync::Arc::default()),
        };
        let admitted =
            |now: f64, tries: usize| (0..tries).filter(|_| s.take(7, now).0.is_some()).count();
        // Window 100 (6000 s to 6060 s): ten, then refused.
        assert_eq!(admitted(6000.5, 12), 10);
        // Halfway through the next: the previous ten weigh five, so five more.
        assert_eq!(admitted(6090.0, 12), 5);
        assert_eq!(s.take(7, 6090.0), (None, 30));
        // One second before its end they weigh 0.17: five more (ten in this window).
        assert_eq!(admitted(6119.0, 12), 5);
        // A window later with none in between: ten again.
        assert_eq!(admitted(6200.0, 12), 10);
        // Left: count minus this window's minus the weighted previous one.
        assert_eq!(s.take(8, 6240.0), (Some(9), 60));
        let errors = |yaml: &str| check("limit-count", yaml, PluginScope::Route);
        assert_eq!(
            errors(
                "{count: 1, time_window: 60, window_type: sliding, policy: redis, redis_host: h}"
            ),
            vec![
                "plugins.limit-count.window_type: sliding works with policy local (policy redis counts fixed windows)"
            ]
        );
        assert_eq!(
            errors("{count: 1, time_window: 60, window_type: hopping}"),
            vec![
                "plugins.limit-count.window_type: unknown window type \"hopping\", expected fixed or sliding"
            ]
        );
        assert_eq!(
            errors("{count: 1, time_window: 60, policy: redis, redis_host: h, sync_interval: 60}"),
            vec![
                "plugins.limit-count.sync_interval: must be at least 0.1 and less than time_window (seconds), got 60"
            ]
        );
        assert_eq!(
            errors("{count: 1, time_window: 60, policy: redis, redis_host: h, sync_interval: 1}"),
            Vec::<String>::new()
        );
    }

    /// A binary upgrade's hand-over, fixed and sliding windows: the new process goes on from
    /// the old one's counts, and adds what the old one counted after its export.
    #[test]
    fn counts_are_carried_to_a_new_process_and_what_came_after_is_added() {
        use sluice_core::state::Carry;
        let common = crate::limit::Common {
            key_type: "var".into(),
            key: "remote_addr".into(),
            rejected_code: crate::util::Num::Whole(429),
            rejected_msg: None,
        };
        let limit = |windows| super::LimitCount {
            count: 20,
            window: 600,
            headers: None,
            limiter: crate::limit::Limiter::new(&common, &mut sluice_config::Validator::new())
                .unwrap(),
            windows,
        };
        let now = super::unix_secs();
        let admitted = |l: &super::LimitCount, tries: usize| {
            (0..tries)
                .filter(|_| l.take(7, now as f64 + 0.5).0.is_some())
                .count()
        };
        for sliding in [false, true] {
            let (old_map, new_map): (super::Windows, super::Windows) = if sliding {
                (
                    super::Windows::Sliding(Default::default()),
                    super::Windows::Sliding(Default::default()),
                )
            } else {
                (
                    super::Windows::Fixed(Default::default()),
                    super::Windows::Fixed(Default::default()),
                )
            };
            let carry = |w: &super::Windows| -> std::sync::Arc<dyn Carry> {
                match w {
                    super::Windows::Fixed(f) => f.clone(),
                    super::Windows::Sliding(s) => s.clone(),
                }
            };
            let (old, new) = (limit(old_map), limit(new_map));
            assert_eq!(admitted(&old, 12), 12);
            let exported = carry(&old.windows).export();
            carry(&new.windows).import(&exported);
            // The old process answers 3 more while it drains; the new one 4.
            assert_eq!(admitted(&old, 3), 3);
            assert_eq!(admitted(&new, 4), 4, "sliding: {sliding}");
            let changes = carry(&old.windows)
                .changes(&carry(&old.windows).export(), &exported)
                .unwrap();
            carry(&new.windows).merge(&changes);
            // 12 + 3 + 4 counted: one left of 20.
            assert_eq!(admitted(&new, 5), 1, "sliding: {sliding}");
            // Nothing new since: no changes.
            let again = carry(&old.windows).export();
            assert!(carry(&old.windows).changes(&again, &again).is_none());
        }
    }

    /// Changes from an old process whose window differs from the new one's current window:
    /// both current (each began its own after the carried one ended), and, sliding, news of
    /// the window before the new process's. Both were dropped, and the requests the old
    /// process answered while it drained went uncounted.
    #[test]
    fn changes_for_another_current_window_still_count() {
        use sluice_core::state::Carry;
        let now = super::unix_secs();
        let fixed = super::Fixed::default();
        fixed.map.insert(7, (now + 50, 4));
        fixed.merge(&serde_json::json!([[7, now + 30, 3], [7, now - 5, 9]]));
        assert_eq!(*fixed.map.get(&7).unwrap(), (now + 50, 7));
        let sliding = super::Sliding::default();
        sliding.map.insert(7, (100, 2, 5));
        sliding.merge(&serde_json::json!([[7, 99, 3], [7, 98, 9]]));
        assert_eq!(*sliding.map.get(&7).unwrap(), (100, 2, 8));
    }

    #[test]
    fn header_names_come_from_the_plugin_metadata() {
        let b = build_with_metadata(
            "limit-count",
            "{count: 2, time_window: 60}",
            "[{id: limit-count, limit_header: X-Custom-RateLimit-Limit, remaining_header: X-Custom-RateLimit-Remaining, reset_header: X-Custom-RateLimit-Reset}]",
        );
        let added = passes(&b);
        assert!(added.starts_with("X-Custom-RateLimit-Limit: 2\r\nX-Custom-RateLimit-Remaining: 1\r\nX-Custom-RateLimit-Reset: "), "{added}");
        // Only some names: the others keep theirs.
        let b = build_with_metadata(
            "limit-count",
            "{count: 2, time_window: 60}",
            "[{id: limit-count, reset_header: X-Until}]",
        );
        let added = passes(&b);
        assert!(
            added.starts_with("X-RateLimit-Limit: 2\r\nX-RateLimit-Remaining: 1\r\nX-Until: "),
            "{added}"
        );
        assert_eq!(
            metadata_errors("{id: limit-count, limit_header: \"Bad Name\", retry_header: X}"),
            vec![
                "plugin_metadata[0].retry_header: unknown field, expected one of limit_header, remaining_header, reset_header"
            ]
        );
        assert_eq!(
            metadata_errors("{id: limit-count, limit_header: \"Bad Name\"}"),
            vec!["plugin_metadata[0].limit_header: invalid header name \"Bad Name\""]
        );
    }

    /// Runs one request that must pass; returns the header lines the plugin added.
    fn passes(b: &Built) -> String {
        let mut cx = ctx(&b.consumers, CLIENT);
        let req = &mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(run(&*b.plugin, req, &mut cx).is_none(), "refused");
        String::from_utf8(cx.response.added_bytes().to_vec()).unwrap()
    }

    #[test]
    fn requests_over_the_count_are_rejected_with_quota_headers() {
        let b = build(
            "limit-count",
            "{count: 2, time_window: 60, rejected_code: 429, rejected_msg: slow down}",
            &[],
        );
        for left in [1, 0] {
            let added = passes(&b);
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
    fn a_keys_window_starts_at_its_first_request_as_apisix() {
        // Aligned on the clock, the first request of a 1,000,000 s window was told the
        // window ends in `1000000 - now % 1000000` seconds, and a count could be used up on
        // either side of a boundary in a moment.
        let b = build("limit-count", "{count: 5, time_window: 1000000}", &[]);
        let first = passes(&b);
        assert!(first.contains("X-RateLimit-Reset: 1000000\r\n"), "{first}");
        // 2 s: the refusal just after the first request falls inside its window however late
        // in its second the first came.
        let b = build("limit-count", "{count: 1, time_window: 2}", &[]);
        passes(&b);
        let mut cx = ctx(&b.consumers, CLIENT);
        let req = &mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(run(&*b.plugin, req, &mut cx).is_some(), "over the count");
        std::thread::sleep(std::time::Duration::from_millis(2050));
        let again = passes(&b);
        assert!(again.contains("X-RateLimit-Reset: 2\r\n"), "{again}");
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
                "plugins.limit-count.count: must be a whole number from 1 to 1000000000000, got 0",
                "plugins.limit-count.time_window: must be a whole number from 1 to 31536000 seconds (one year), got 0"
            ]
        );
        assert_eq!(
            check(
                "limit-count",
                "{count: 1, time_window: 1, key: nope, rejected_code: 99}",
                PluginScope::Route
            ),
            vec![
                "plugins.limit-count.key: unknown variable \"nope\", expected remote_addr, server_addr, consumer_name, uri, host, http_<header>, arg_<name>, cookie_<name>, jwt_claim_<name>, sent_http_<header> or another request variable",
                "plugins.limit-count.rejected_code: must be a status code from 200 to 599, got 99"
            ]
        );
        assert_eq!(
            check("limit-count", "{count: 1}", PluginScope::Route),
            vec!["plugins.limit-count.time_window: is required"]
        );
    }

    #[test]
    fn counts_and_windows_are_bounded() {
        let errors = |yaml: &str| check("limit-count", yaml, PluginScope::Route);
        // The window: accepted, it answered `X-RateLimit-Reset: 18446744071914073253`.
        assert_eq!(
            errors("{count: 1, time_window: 18446744073709551615}"),
            vec![
                "plugins.limit-count.time_window: must be a whole number from 1 to 31536000 seconds (one year), got 18446744073709551615"
            ]
        );
        assert_eq!(
            errors("{count: -1, time_window: 31536001, rejected_code: 70000}"),
            vec![
                "plugins.limit-count.count: must be a whole number from 1 to 1000000000000, got -1",
                "plugins.limit-count.time_window: must be a whole number from 1 to 31536000 seconds (one year), got 31536001",
                "plugins.limit-count.rejected_code: must be a status code from 200 to 599, got 70000"
            ]
        );
        assert_eq!(
            errors("{count: 1.5, time_window: 1e300}"),
            vec![
                "plugins.limit-count.count: must be a whole number from 1 to 1000000000000, got 1.5",
                "plugins.limit-count.time_window: must be a whole number from 1 to 31536000 seconds (one year), got 1e300"
            ]
        );
        assert_eq!(
            errors("{count: 1000000000001, time_window: 60}"),
            vec![
                "plugins.limit-count.count: must be a whole number from 1 to 1000000000000, got 1000000000001"
            ]
        );
        assert_eq!(
            errors("{count: 1, time_window: 60, policy: redis, redis_host: h, redis_timeout: -5}"),
            vec![
                "plugins.limit-count.redis_timeout: must be a whole number from 1 to 60000 milliseconds (one minute), got -5"
            ]
        );
        for ok in [
            "{count: 1000000000000, time_window: 31536000}",
            "{count: 1, time_window: 1}",
            "{count: 5.0, time_window: 60.0}",
        ] {
            assert_eq!(errors(ok), Vec::<String>::new(), "{ok}");
        }
    }

    #[test]
    fn the_longest_window_resets_within_itself() {
        let b = build(
            "limit-count",
            "{count: 1000000000000, time_window: 31536000}",
            &[],
        );
        let added = passes(&b);
        let reset: u64 = added
            .split("X-RateLimit-Reset: ")
            .nth(1)
            .and_then(|r| r.split("\r\n").next())
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no reset in {added}"));
        assert!((1..=31_536_000).contains(&reset), "{reset}");
        assert!(
            added.contains("X-RateLimit-Remaining: 999999999999\r\n"),
            "{added}"
        );
    }
}
