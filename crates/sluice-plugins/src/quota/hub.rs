//! The thread that talks to Redis ("sluice-redis"): it owns the connections (one server, a
//! cluster, or the master sentinels name), runs the lease and limit-conn scripts, and answers
//! each job through its callback. Workers hand it jobs and never block.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::warn;

use super::target::RedisTarget;

/// A Redis call for the background thread, and what to do with its answer.
pub(super) struct Job {
    pub(super) target: RedisTarget,
    pub(super) key: String,
    pub(super) op: Op,
    pub(super) reply: Box<dyn FnOnce(Result<i64, String>) + Send>,
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
    /// ai-rate-limiting: adds `delta` (negative: gives back) to the key's count, which expires
    /// after `ttl` seconds from its creation; answers the count after it.
    Add { delta: i64, ttl: u64 },
}

pub(super) fn send(job: Job) {
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
                Op::Add { delta, ttl } => {
                    let mut inv = lease.key(&job.key);
                    inv.arg(*delta).arg(*ttl);
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
