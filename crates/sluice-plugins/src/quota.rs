//! Cluster-wide quotas through Redis (`policy: redis`), without a Redis round trip per request.
//!
//! Each node leases quota: for a key and a window it asks Redis for `lease` units at once
//! (`INCRBY` on the window's counter, which every node shares) and then admits requests from
//! what it leased, locally. When its lease runs low it asks for the next one in the background,
//! so requests rarely wait. Redis only ever hands out what is left of `count`, so the cluster
//! never admits more than `count` per window. What a node leased and did not use by the end of
//! the window is lost: the cluster admits at least `count - nodes × 1.5 × lease` (the half is
//! the lease fetched ahead). The lease is `count / 50`, between 1 and 1,000: at most 3% below
//! the limit per node, one Redis call per 1,000 requests at high rates.
//!
//! Redis calls run on one background thread ("sluice-redis") that owns the connections;
//! workers hand it jobs and never block. When Redis cannot be reached, requests are let through
//! (`allow_degradation: true`) or answered 503 (the default), and the change is logged once;
//! Redis is tried again at most once a second.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use tokio::sync::{Notify, mpsc};
use tracing::{info, warn};

use crate::util::{Num, whole};

/// Where Redis is (APISIX's `redis_host`, `redis_port`, `redis_password`, `redis_database`,
/// `redis_timeout` in milliseconds), or its cluster, or its sentinels; and whether over TLS.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RedisTarget {
    /// APISIX's `redis-cluster` policy: the cluster's seed nodes (`host:port`); empty for one
    /// server (`host`, `port`).
    pub(crate) cluster: Vec<String>,
    /// APISIX's `redis-sentinel` policy: the sentinels and the master's name.
    pub(crate) sentinel: Option<Sentinel>,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) database: u32,
    pub(crate) timeout: Duration,
    /// Over TLS (`redis_ssl`, `redis_cluster_ssl`): Some(verify the server's certificate).
    pub(crate) tls: Option<bool>,
}

/// The sentinels that name the master (`redis_sentinels`, `redis_master_name`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Sentinel {
    pub(crate) nodes: Vec<(String, u16)>,
    pub(crate) master: String,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

impl RedisTarget {
    /// Where it is, for logs.
    fn place(&self) -> String {
        match (&self.sentinel, self.cluster.is_empty()) {
            (Some(s), _) => format!("sentinel master {}", s.master),
            (None, false) => self.cluster.join(","),
            (None, true) => format!("{}:{}", self.host, self.port),
        }
    }
}

/// A sentinel, as APISIX writes one.
#[derive(Debug, Clone, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SentinelNode {
    host: String,
    port: Num,
}

/// Declares a limit plugin's configuration with APISIX's Redis fields appended (the same in
/// limit-count, limit-req and limit-conn; serde cannot flatten them into a struct that refuses
/// unknown fields), and `redis_fields()` to hand them to [`redis_target`].
macro_rules! with_redis_fields {
    ($(#[$m:meta])* struct $name:ident { $($body:tt)* }) => {
        $(#[$m])*
        struct $name {
            $($body)*
            /// `policy: redis`: the server.
            #[serde(default)]
            redis_host: Option<String>,
            #[serde(default)]
            redis_port: Option<Num>,
            #[serde(default)]
            redis_username: Option<String>,
            #[serde(default)]
            redis_password: Option<String>,
            #[serde(default)]
            redis_database: Option<u32>,
            /// Milliseconds.
            #[serde(default)]
            redis_timeout: Option<Num>,
            #[serde(default)]
            redis_ssl: bool,
            #[serde(default)]
            redis_ssl_verify: bool,
            /// Accepted: Sluice keeps one multiplexed connection per Redis.
            #[serde(default)]
            redis_keepalive_timeout: Option<Num>,
            /// Accepted: Sluice keeps one multiplexed connection per Redis.
            #[serde(default)]
            redis_keepalive_pool: Option<Num>,
            /// `policy: redis-cluster`: the cluster's nodes (`host:port`) and its name.
            #[serde(default)]
            redis_cluster_nodes: Option<Vec<String>>,
            #[serde(default)]
            redis_cluster_name: Option<String>,
            #[serde(default)]
            redis_cluster_ssl: bool,
            #[serde(default)]
            redis_cluster_ssl_verify: bool,
            /// `policy: redis-sentinel`: the sentinels and the master's name.
            #[serde(default)]
            redis_sentinels: Option<Vec<crate::quota::SentinelNode>>,
            #[serde(default)]
            redis_master_name: Option<String>,
            #[serde(default)]
            redis_role: Option<String>,
            #[serde(default)]
            redis_connect_timeout: Option<Num>,
            #[serde(default)]
            redis_read_timeout: Option<Num>,
            #[serde(default)]
            sentinel_username: Option<String>,
            #[serde(default)]
            sentinel_password: Option<String>,
        }

        impl $name {
            fn redis_fields(&self) -> crate::quota::RedisFields<'_> {
                let _ = (self.redis_keepalive_timeout, self.redis_keepalive_pool);
                crate::quota::RedisFields {
                    host: &self.redis_host,
                    port: self.redis_port,
                    username: &self.redis_username,
                    password: &self.redis_password,
                    database: self.redis_database,
                    timeout: self.redis_timeout,
                    ssl: self.redis_ssl,
                    ssl_verify: self.redis_ssl_verify,
                    cluster_nodes: &self.redis_cluster_nodes,
                    cluster_name: &self.redis_cluster_name,
                    cluster_ssl: self.redis_cluster_ssl,
                    cluster_ssl_verify: self.redis_cluster_ssl_verify,
                    sentinels: &self.redis_sentinels,
                    master_name: &self.redis_master_name,
                    role: &self.redis_role,
                    connect_timeout: self.redis_connect_timeout,
                    read_timeout: self.redis_read_timeout,
                    sentinel_username: &self.sentinel_username,
                    sentinel_password: &self.sentinel_password,
                }
            }
        }
    };
}
pub(crate) use with_redis_fields;

/// The Redis settings of a limit plugin, as configured.
pub(crate) struct RedisFields<'a> {
    pub(crate) host: &'a Option<String>,
    pub(crate) port: Option<Num>,
    pub(crate) username: &'a Option<String>,
    pub(crate) password: &'a Option<String>,
    pub(crate) database: Option<u32>,
    /// Milliseconds.
    pub(crate) timeout: Option<Num>,
    pub(crate) ssl: bool,
    pub(crate) ssl_verify: bool,
    pub(crate) cluster_nodes: &'a Option<Vec<String>>,
    pub(crate) cluster_name: &'a Option<String>,
    pub(crate) cluster_ssl: bool,
    pub(crate) cluster_ssl_verify: bool,
    pub(crate) sentinels: &'a Option<Vec<SentinelNode>>,
    pub(crate) master_name: &'a Option<String>,
    pub(crate) role: &'a Option<String>,
    pub(crate) connect_timeout: Option<Num>,
    pub(crate) read_timeout: Option<Num>,
    pub(crate) sentinel_username: &'a Option<String>,
    pub(crate) sentinel_password: &'a Option<String>,
}

/// `redis_timeout` in milliseconds: 1,000 by default.
fn timeout_of(t: Option<Num>, v: &mut sluice_config::Validator) -> Option<u64> {
    match t {
        None => Some(1000),
        Some(t) => v.field("redis_timeout", |v| {
            whole(t, 1, MAX_TIMEOUT_MS, " milliseconds (one minute)", v)
        }),
    }
}

/// Longest `redis_timeout`: one minute. A request may wait twice this for a lease, and the
/// Redis thread this long on a server that does not answer (other quotas' leases wait behind
/// it), so it stays in the range of the other waits plugins allow (60 seconds at most).
const MAX_TIMEOUT_MS: u64 = 60_000;

/// Checks `policy` and the Redis settings: `Some(None)` for `local`, `Some(Some(target))` for
/// `redis`, `redis-cluster` and `redis-sentinel`, None (errors recorded) otherwise.
pub(crate) fn redis_target(
    policy: &str,
    f: RedisFields<'_>,
    v: &mut sluice_config::Validator,
) -> Option<Option<RedisTarget>> {
    let nonempty = |s: &Option<String>| s.clone().filter(|p| !p.is_empty());
    let base = |timeout: u64, tls: Option<bool>| RedisTarget {
        cluster: Vec::new(),
        sentinel: None,
        host: String::new(),
        port: 0,
        username: nonempty(f.username),
        password: nonempty(f.password),
        database: f.database.unwrap_or(0),
        timeout: Duration::from_millis(timeout),
        tls,
    };
    match policy {
        "local" => Some(None),
        "redis" => {
            let host = f.host.as_ref().filter(|h| !h.is_empty());
            if host.is_none() {
                v.error_at("redis_host", "is required with policy redis");
            }
            let port = match f.port {
                None => Some(6379),
                Some(p) => v.field("redis_port", |v| whole(p, 1, 65535, "", v)),
            };
            let timeout = timeout_of(f.timeout, v);
            Some(Some(RedisTarget {
                host: host?.clone(),
                port: port? as u16,
                ..base(timeout?, f.ssl.then_some(f.ssl_verify))
            }))
        }
        "redis-cluster" => {
            let nodes = f.cluster_nodes.as_deref().unwrap_or_default();
            if nodes.is_empty() {
                v.error_at(
                    "redis_cluster_nodes",
                    "is required with policy redis-cluster: the cluster's nodes, host:port",
                );
            }
            let mut ok = !nodes.is_empty();
            v.field("redis_cluster_nodes", |v| {
                for (i, n) in nodes.iter().enumerate() {
                    let good = n.rsplit_once(':').is_some_and(|(h, p)| {
                        !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0)
                    });
                    if !good {
                        v.index(i, |v| {
                            v.error(format!("invalid node \"{n}\": expected host:port"))
                        });
                        ok = false;
                    }
                }
            });
            if f.cluster_name.as_deref().is_none_or(str::is_empty) {
                v.error_at(
                    "redis_cluster_name",
                    "is required with policy redis-cluster",
                );
                ok = false;
            }
            let timeout = timeout_of(f.timeout, v);
            ok.then_some(())?;
            Some(Some(RedisTarget {
                cluster: nodes.to_vec(),
                // A cluster has no databases.
                database: 0,
                ..base(timeout?, f.cluster_ssl.then_some(f.cluster_ssl_verify))
            }))
        }
        "redis-sentinel" => {
            let sentinels = f.sentinels.as_deref().unwrap_or_default();
            let mut ok = true;
            if sentinels.is_empty() {
                v.error_at(
                    "redis_sentinels",
                    "is required with policy redis-sentinel: [{host, port}, ...]",
                );
                ok = false;
            }
            let mut nodes = Vec::with_capacity(sentinels.len());
            v.field("redis_sentinels", |v| {
                for (i, n) in sentinels.iter().enumerate() {
                    v.index(i, |v| {
                        let port = v.field("port", |v| whole(n.port, 1, 65535, "", v));
                        if n.host.is_empty() {
                            v.error_at("host", "must not be empty");
                        }
                        match port {
                            Some(p) if !n.host.is_empty() => nodes.push((n.host.clone(), p as u16)),
                            _ => ok = false,
                        }
                    });
                }
            });
            let master = nonempty(f.master_name);
            if master.is_none() {
                v.error_at(
                    "redis_master_name",
                    "is required with policy redis-sentinel",
                );
                ok = false;
            }
            if let Some(role) = f.role.as_deref().filter(|r| *r != "master") {
                v.error_at(
                    "redis_role",
                    format!(
                        "\"{role}\" is not supported: counters are written, so they are kept on the master"
                    ),
                );
                ok = false;
            }
            // APISIX's sentinel policy has a connect and a read timeout; Sluice one for both.
            let timeout = match (f.connect_timeout, f.read_timeout) {
                (None, None) => timeout_of(f.timeout, v),
                (c, r) => {
                    let c = c.map_or(Some(0), |t| timeout_of(Some(t), v));
                    let r = r.map_or(Some(0), |t| timeout_of(Some(t), v));
                    c.zip(r).map(|(c, r)| c.max(r))
                }
            };
            ok.then_some(())?;
            Some(Some(RedisTarget {
                sentinel: Some(Sentinel {
                    nodes,
                    master: master?,
                    username: nonempty(f.sentinel_username),
                    password: nonempty(f.sentinel_password),
                }),
                // `redis_ssl`: TLS to the master (the sentinels are asked in plain text).
                ..base(timeout?, f.ssl.then_some(f.ssl_verify))
            }))
        }
        other => {
            v.error_at(
                "policy",
                format!(
                    "unknown policy \"{other}\", expected local, redis, redis-cluster or redis-sentinel"
                ),
            );
            None
        }
    }
}

pub(crate) fn stable_hash(s: &str) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    h.write(s.as_bytes());
    h.finish()
}

impl Take {
    /// What the plugin does: go on (None), answer with its own rejection, or 503 when Redis
    /// cannot be reached and degradation is not allowed.
    pub(crate) fn refusal(
        &self,
        reject: impl FnOnce() -> sluice_core::Response,
    ) -> Option<sluice_core::Flow> {
        match self {
            Take::Granted { .. } => None,
            Take::Exhausted => Some(sluice_core::Flow::Respond(reject())),
            Take::Unavailable => Some(sluice_core::Flow::Respond(unavailable())),
        }
    }
}

/// How a request fared.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Take {
    /// Admitted; about `left` more may be admitted in the window cluster-wide.
    Granted { left: u64 },
    /// The window's count is used up.
    Exhausted,
    /// Redis cannot be reached and degradation is not allowed.
    Unavailable,
}

/// A quota shared by the workers of a node (one per plugin instance and settings).
#[derive(Debug)]
pub(crate) struct Quota {
    /// Prefix of the Redis keys: the same on every node with the same configuration.
    name: String,
    count: u64,
    window: u64,
    lease: u64,
    target: RedisTarget,
    fail_open: bool,
    /// For logs: which plugin of which resource.
    what: String,
    entries: DashMap<u64, Entry>,
    /// Unix milliseconds until which Redis is not tried again.
    down_until: AtomicU64,
    down: AtomicBool,
}

#[derive(Debug)]
struct Entry {
    window: u64,
    /// Units leased and not used yet.
    local: u64,
    /// The window's count left cluster-wide after the last lease (an estimate, for headers).
    global_left: u64,
    exhausted: bool,
    refilling: bool,
    notify: Arc<Notify>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

impl Quota {
    pub(crate) fn new(
        name: String,
        count: u64,
        window: u64,
        target: RedisTarget,
        fail_open: bool,
        what: String,
    ) -> Quota {
        Quota {
            name,
            count,
            // Validation bounds both; the runtime never divides by zero whatever it is given.
            window: window.max(1),
            lease: (count / 50).clamp(1, 1000),
            target,
            fail_open,
            what,
            entries: DashMap::new(),
            down_until: AtomicU64::new(0),
            down: AtomicBool::new(false),
        }
    }

    /// Seconds until the current window ends.
    pub(crate) fn reset(&self) -> u64 {
        let now = now_ms() / 1000;
        (now / self.window + 1)
            .saturating_mul(self.window)
            .saturating_sub(now)
    }

    fn when_down(&self) -> Take {
        if self.fail_open {
            Take::Granted { left: 0 }
        } else {
            Take::Unavailable
        }
    }

    /// Takes one unit of `key`'s quota in the current window, waiting for a lease if none is
    /// left locally.
    pub(crate) async fn take(self: &Arc<Self>, key: u64) -> Take {
        loop {
            let now = now_ms();
            let window = now / 1000 / self.window;
            let outage = self.down.load(Ordering::Relaxed);
            let notified = {
                let mut e = self.entries.entry(key).or_insert_with(|| Entry {
                    window,
                    local: 0,
                    global_left: self.count,
                    exhausted: false,
                    refilling: false,
                    notify: Arc::new(Notify::new()),
                });
                if e.window != window {
                    e.window = window;
                    e.local = 0;
                    e.global_left = self.count;
                    e.exhausted = false;
                    e.refilling = false;
                }
                if e.local > 0 {
                    e.local -= 1;
                    // Fetch the next lease before this one runs out.
                    if self.lease >= 4
                        && e.local < self.lease / 2
                        && !e.refilling
                        && !e.exhausted
                        && !outage
                    {
                        e.refilling = true;
                        self.refill(key, window);
                    }
                    return Take::Granted {
                        left: e.global_left.saturating_add(e.local),
                    };
                }
                if e.exhausted {
                    return Take::Exhausted;
                }
                if outage {
                    // One request at a time probes Redis, at most once a second; the others
                    // are decided at once.
                    if !e.refilling && now >= self.down_until.load(Ordering::Relaxed) {
                        e.refilling = true;
                        self.down_until.store(now + 1000, Ordering::Relaxed);
                        self.refill(key, window);
                    }
                    return self.when_down();
                }
                if !e.refilling {
                    e.refilling = true;
                    self.refill(key, window);
                }
                let mut n = Box::pin(e.notify.clone().notified_owned());
                // Registered before the entry is released, so the wake-up cannot be missed.
                n.as_mut().enable();
                n
            };
            if tokio::time::timeout(self.target.timeout.saturating_mul(2), notified)
                .await
                .is_err()
            {
                self.failed("no answer in time");
                return self.when_down();
            }
        }
    }

    fn refill(self: &Arc<Self>, key: u64, window: u64) {
        let quota = self.clone();
        let job = Job {
            target: self.target.clone(),
            key: format!("{}:{key:x}:{window}", self.name),
            op: Op::Lease {
                units: self.lease,
                ttl: self.window.saturating_add(1),
            },
            reply: Box::new(move |r| quota.refilled(key, window, r.map(|n| n.max(0) as u64))),
        };
        send(job);
    }

    fn refilled(&self, key: u64, window: u64, result: Result<u64, String>) {
        let notify = match result {
            Ok(used) => {
                if self.down.swap(false, Ordering::Relaxed) {
                    info!(plugin = %self.what, "redis reachable again: counting cluster-wide");
                }
                let before = used.saturating_sub(self.lease);
                let granted = if used <= self.count {
                    self.lease
                } else {
                    self.count.saturating_sub(before)
                };
                let Some(mut e) = self.entries.get_mut(&key) else {
                    return;
                };
                if e.window != window {
                    return;
                }
                e.local = e.local.saturating_add(granted);
                e.global_left = self.count.saturating_sub(used);
                if used >= self.count {
                    // Nothing more to lease in this window; what is held locally still goes.
                    e.exhausted = true;
                }
                e.refilling = false;
                e.notify.clone()
            }
            Err(msg) => {
                self.failed(&msg);
                let Some(mut e) = self.entries.get_mut(&key) else {
                    return;
                };
                e.refilling = false;
                e.notify.clone()
            }
        };
        notify.notify_waiters();
    }

    fn failed(&self, msg: &str) {
        self.down_until.store(now_ms() + 1000, Ordering::Relaxed);
        if !self.down.swap(true, Ordering::Relaxed) {
            log_outage(&self.what, &self.target, self.fail_open, msg);
        }
    }
}

/// Logs that Redis became unavailable, and what the plugin does meanwhile (once per outage).
pub(crate) fn log_outage(plugin: &str, target: &RedisTarget, fail_open: bool, msg: &str) {
    let choice = if fail_open {
        "letting requests through uncounted (allow_degradation: true)"
    } else {
        "answering 503 (allow_degradation: false)"
    };
    warn!(plugin = %plugin, redis = %target.place(), error = %msg, "redis unavailable: {choice}");
}

/// The answer while Redis is unavailable and `allow_degradation` is false.
pub(crate) fn unavailable() -> sluice_core::Response {
    sluice_core::Response::error(503, "rate limiting is unavailable")
}

/// A Redis call for the background thread, and what to do with its answer.
struct Job {
    target: RedisTarget,
    key: String,
    op: Op,
    reply: Box<dyn FnOnce(Result<i64, String>) + Send>,
}

/// What a [`Job`] asks of Redis.
pub(crate) enum Op {
    /// Lease `units` on the key (expiring after `ttl` seconds); answers the window's count
    /// after the lease.
    Lease { units: u64, ttl: u64 },
    /// limit-conn: admit request `id` if fewer than `limit` are in flight (entries older than
    /// `ttl` seconds are dropped: a node that died without releasing); answers how many are in
    /// flight with it, or minus how many are when it is refused.
    Enter {
        limit: u64,
        ttl: u64,
        now: u64,
        id: String,
    },
    /// limit-conn: request `id` is done.
    Leave { id: String },
}

fn send(job: Job) {
    if let Err(e) = hub().send(job) {
        (e.0.reply)(Err("the redis thread is gone".into()));
    }
}

/// Runs `op` on `key` and answers through a channel (limit-conn, which waits for it).
pub(crate) fn call(
    target: &RedisTarget,
    key: String,
    op: Op,
) -> tokio::sync::oneshot::Receiver<Result<i64, String>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    send(Job {
        target: target.clone(),
        key,
        op,
        reply: Box::new(move |r| {
            let _ = tx.send(r);
        }),
    });
    rx
}

/// Runs `op` on `key`, whatever the answer (limit-conn's release).
pub(crate) fn tell(target: &RedisTarget, key: String, op: Op) {
    send(Job {
        target: target.clone(),
        key,
        op,
        reply: Box::new(|_| {}),
    });
}

/// APISIX's limit-conn script: a sorted set of the requests in flight, scored by when they
/// expire, so that those of a node that died leave after `ttl`.
const ENTER: &str = "redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, ARGV[3])\n\
    local count = redis.call('ZCARD', KEYS[1])\n\
    if count >= tonumber(ARGV[1]) then return -count end\n\
    redis.call('ZADD', KEYS[1], ARGV[3] + ARGV[2], ARGV[4])\n\
    redis.call('EXPIRE', KEYS[1], ARGV[2])\n\
    return count + 1";

/// INCRBY, and the expiry set by the call that created the key: one round trip, atomic.
const LEASE: &str = "local used = redis.call('INCRBY', KEYS[1], ARGV[1])\n\
    if used == tonumber(ARGV[1]) then redis.call('EXPIRE', KEYS[1], ARGV[2]) end\n\
    return used";

fn hub() -> &'static mpsc::UnboundedSender<Job> {
    static HUB: OnceLock<mpsc::UnboundedSender<Job>> = OnceLock::new();
    HUB.get_or_init(|| {
        let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
        let started = std::thread::Builder::new()
            .name("sluice-redis".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => return warn!(error = %e, "the redis thread cannot start"),
                };
                rt.block_on(async move {
                    let lease = Arc::new(redis::Script::new(LEASE));
                    let enter = Arc::new(redis::Script::new(ENTER));
                    // Connections are made on tasks of their own: a Redis that does not
                    // answer holds up only its own jobs, and after a failure its jobs fail at
                    // once for a second (then a new connection is tried).
                    let mut conns: HashMap<RedisTarget, Slot> = HashMap::new();
                    let (done_tx, mut done_rx) =
                        mpsc::unbounded_channel::<(RedisTarget, Result<Conn, String>)>();
                    loop {
                        let job = tokio::select! {
                            Some(job) = rx.recv() => job,
                            Some((target, result)) = done_rx.recv() => {
                                let waiting = match conns.remove(&target) {
                                    Some(Slot::Connecting(jobs)) => jobs,
                                    _ => Vec::new(),
                                };
                                match result {
                                    Ok(conn) => {
                                        for job in waiting {
                                            run(job, conn.clone(), &lease, &enter);
                                        }
                                        conns.insert(target, Slot::Ready(conn));
                                    }
                                    Err(e) => {
                                        for job in waiting {
                                            (job.reply)(Err(e.clone()));
                                        }
                                        let until = std::time::Instant::now() + Duration::from_secs(1);
                                        conns.insert(target, Slot::Failed(until, e));
                                    }
                                }
                                continue;
                            }
                            else => break,
                        };
                        match conns.get_mut(&job.target) {
                            Some(Slot::Ready(c)) => {
                                let c = c.clone();
                                run(job, c, &lease, &enter);
                            }
                            Some(Slot::Connecting(jobs)) => jobs.push(job),
                            Some(Slot::Failed(until, e)) if std::time::Instant::now() < *until => {
                                let e = e.clone();
                                (job.reply)(Err(e));
                            }
                            _ => {
                                let target = job.target.clone();
                                conns.insert(target.clone(), Slot::Connecting(vec![job]));
                                let done = done_tx.clone();
                                tokio::spawn(async move {
                                    let r = connect(&target).await;
                                    let _ = done.send((target, r));
                                });
                            }
                        }
                    }
                });
            });
        if let Err(e) = started {
            warn!(error = %e, "the redis thread cannot start");
        }
        tx
    })
}

/// A Redis target's connection on the Redis thread.
enum Slot {
    Ready(Conn),
    /// Being made; the jobs wait for it.
    Connecting(Vec<Job>),
    /// Failed: jobs fail at once until then.
    Failed(std::time::Instant, String),
}

/// Runs a job on its connection, on a task of its own.
fn run(job: Job, conn: Conn, lease: &Arc<redis::Script>, enter: &Arc<redis::Script>) {
    let (lease, enter) = (lease.clone(), enter.clone());
    tokio::spawn(async move {
        let mut conn = conn;
        let call = async {
            match &job.op {
                Op::Lease { units, ttl } => {
                    let mut inv = lease.key(&job.key);
                    inv.arg(*units).arg(*ttl);
                    inv.invoke_async::<i64>(&mut conn).await
                }
                Op::Enter {
                    limit,
                    ttl,
                    now,
                    id,
                } => {
                    let mut inv = enter.key(&job.key);
                    inv.arg(*limit).arg(*ttl).arg(*now).arg(id);
                    inv.invoke_async::<i64>(&mut conn).await
                }
                Op::Leave { id } => {
                    redis::cmd("ZREM")
                        .arg(&job.key)
                        .arg(id)
                        .query_async::<i64>(&mut conn)
                        .await
                }
            }
        };
        let result = match tokio::time::timeout(job.target.timeout, call).await {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("timed out".into()),
        };
        (job.reply)(result);
    });
}

/// A connection to one Redis server, to a cluster (commands go to the node that holds the
/// key's slot), or to the master the sentinels name.
#[derive(Clone)]
enum Conn {
    One(redis::aio::ConnectionManager),
    Cluster(redis::cluster_async::ClusterConnection),
    Sentinel(Arc<SentinelConn>),
}

/// The master the sentinels name: asked again after a command fails (a failover).
struct SentinelConn {
    client: tokio::sync::Mutex<redis::sentinel::SentinelClient>,
    conn: parking_lot::Mutex<Option<redis::aio::MultiplexedConnection>>,
    db: i64,
}

impl SentinelConn {
    async fn connection(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        if let Some(c) = self.conn.lock().clone() {
            return Ok(c);
        }
        let c = self.client.lock().await.get_async_connection().await?;
        *self.conn.lock() = Some(c.clone());
        Ok(c)
    }

    fn forget(&self) {
        *self.conn.lock() = None;
    }
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::One(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(s) => Box::pin(async move {
                let mut c = s.connection().await?;
                let r = c.req_packed_command(cmd).await;
                if r.is_err() {
                    s.forget();
                }
                r
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::One(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Sentinel(s) => Box::pin(async move {
                let mut c = s.connection().await?;
                let r = c.req_packed_commands(cmd, offset, count).await;
                if r.is_err() {
                    s.forget();
                }
                r
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::One(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(s) => s.db,
        }
    }
}

async fn connect(t: &RedisTarget) -> Result<Conn, String> {
    let tls_mode = |verify: bool| {
        if verify {
            redis::TlsMode::Secure
        } else {
            redis::TlsMode::Insecure
        }
    };
    if let Some(s) = &t.sentinel {
        let sentinels = s
            .nodes
            .iter()
            .map(|(h, p)| redis::ConnectionAddr::Tcp(h.clone(), *p));
        let mut b = redis::sentinel::SentinelClientBuilder::new(
            sentinels,
            s.master.clone(),
            redis::sentinel::SentinelServerType::Master,
        )
        .map_err(|e| e.to_string())?
        .set_client_to_redis_db(i64::from(t.database));
        if let Some(u) = &t.username {
            b = b.set_client_to_redis_username(u.clone());
        }
        if let Some(p) = &t.password {
            b = b.set_client_to_redis_password(p.clone());
        }
        if let Some(u) = &s.username {
            b = b.set_client_to_sentinel_username(u.clone());
        }
        if let Some(p) = &s.password {
            b = b.set_client_to_sentinel_password(p.clone());
        }
        if let Some(verify) = t.tls {
            b = b.set_client_to_redis_tls_mode(tls_mode(verify));
        }
        let conn = SentinelConn {
            client: tokio::sync::Mutex::new(b.build().map_err(|e| e.to_string())?),
            conn: parking_lot::Mutex::new(None),
            db: i64::from(t.database),
        };
        // Asked once now, so that a wrong master name or unreachable sentinels show at once.
        tokio::time::timeout(t.timeout.saturating_mul(2), conn.connection())
            .await
            .map_err(|_| "connection timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        return Ok(Conn::Sentinel(Arc::new(conn)));
    }
    if !t.cluster.is_empty() {
        let scheme = if t.tls.is_some() { "rediss" } else { "redis" };
        let nodes: Vec<String> = t
            .cluster
            .iter()
            .map(|n| format!("{scheme}://{n}"))
            .collect();
        let mut b = redis::cluster::ClusterClientBuilder::new(nodes)
            .connection_timeout(t.timeout)
            .response_timeout(t.timeout);
        if let Some(verify) = t.tls {
            b = b.tls(tls_mode(verify));
        }
        if let Some(u) = &t.username {
            b = b.username(u.clone());
        }
        if let Some(p) = &t.password {
            b = b.password(p.clone());
        }
        let client = b.build().map_err(|e| e.to_string())?;
        return tokio::time::timeout(t.timeout.saturating_mul(2), client.get_async_connection())
            .await
            .map_err(|_| "connection timed out".to_owned())?
            .map(Conn::Cluster)
            .map_err(|e| e.to_string());
    }
    let addr = match t.tls {
        None => redis::ConnectionAddr::Tcp(t.host.clone(), t.port),
        Some(verify) => redis::ConnectionAddr::TcpTls {
            host: t.host.clone(),
            port: t.port,
            insecure: !verify,
            tls_params: None,
        },
    };
    let info = redis::ConnectionInfo {
        addr,
        redis: redis::RedisConnectionInfo {
            db: i64::from(t.database),
            username: t.username.clone(),
            password: t.password.clone(),
            protocol: redis::ProtocolVersion::RESP2,
        },
    };
    let client = redis::Client::open(info).map_err(|e| e.to_string())?;
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(t.timeout)
        .set_response_timeout(t.timeout)
        .set_number_of_retries(1)
        .set_max_delay(1000);
    tokio::time::timeout(
        t.timeout.saturating_mul(2),
        client.get_connection_manager_with_config(config),
    )
    .await
    .map_err(|_| "connection timed out".to_owned())?
    .map(Conn::One)
    .map_err(|e| e.to_string())
}
