//! Names resolved and kept fresh: node host names (and `discovery_type: dns` service names)
//! resolved to addresses, A and AAAA (or SRV), with hickory-resolver, and re-resolved when
//! their TTL (or `dns.valid`) runs out; and the queries of service registries ([`Lookup`]s,
//! from `discovery/`), fetched and kept the same way.
//!
//! A name is resolved once when a configuration that has it is first compiled (waiting at most
//! `dns.timeout`, so that a name that resolves works from the first request), then by the
//! housekeeping thread (`check.rs`) in the background. A name that does not resolve never
//! fails a start, a validation or a reload: its node stays out of rotation (weight 0, health
//! `unhealthy` with cause `dns`) with a warning, and is tried again every second. When the
//! addresses of a name change, the upstreams that use it are compiled again and put in service
//! alone (routes untouched); nodes kept keep their health and pools.
//!
//! Answers are kept in one process-wide cache, by resolver settings and query.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfigGroup, ResolveHosts, ResolverConfig,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use parking_lot::Mutex;
use sluice_config::DnsConfig;

pub(crate) use super::answer::{Answer, GONE, Target};

/// A service registry's query (`discovery_type: eureka` and the like): fetches the instances
/// of one service.
pub(crate) trait Lookup: Send + Sync + std::fmt::Debug {
    /// What identifies it (its cache key): the registry, its settings and the service.
    fn key(&self) -> &str;
    /// How the log and the health view name it: `eureka USER-SERVICE`.
    fn label(&self) -> String;
    /// Longest wait for an answer.
    fn timeout(&self) -> Duration;
    /// How long an answer is kept before it is fetched again.
    fn valid(&self) -> Duration;
    /// Fetches the instances. An answer that the service has none starts with [`GONE`].
    fn fetch(&self) -> std::pin::Pin<Box<dyn Future<Output = Answer> + Send + '_>>;
}

/// A name to resolve, or a registry to ask.
#[derive(Debug, Clone)]
pub(crate) enum Query {
    /// A and AAAA records of a host name.
    Host(String),
    /// SRV records (`_service._proto.domain`), their targets resolved in turn.
    Srv(String),
    /// A service in a registry.
    Registry(Arc<dyn Lookup>),
}

impl Query {
    /// Longest wait for an answer.
    fn timeout(&self, s: &DnsConfig) -> Duration {
        match self {
            Query::Registry(l) => l.timeout(),
            _ => s.timeout.0,
        }
    }
}

impl PartialEq for Query {
    fn eq(&self, other: &Query) -> bool {
        match (self, other) {
            (Query::Host(a), Query::Host(b)) | (Query::Srv(a), Query::Srv(b)) => a == b,
            (Query::Registry(a), Query::Registry(b)) => a.key() == b.key(),
            _ => false,
        }
    }
}

impl Eq for Query {}

impl std::hash::Hash for Query {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        match self {
            Query::Host(s) | Query::Srv(s) => s.hash(h),
            Query::Registry(l) => l.key().hash(h),
        }
    }
}

impl std::fmt::Display for Query {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Query::Host(h) => f.write_str(h),
            Query::Srv(s) => write!(f, "SRV {s}"),
            Query::Registry(l) => f.write_str(&l.label()),
        }
    }
}

struct Entry {
    answer: Answer,
    refresh_at: Instant,
    resolving: bool,
}

/// Longest wait before a name that did not resolve is tried again.
const RETRY_UNRESOLVED: Duration = Duration::from_secs(1);
/// How long after its expiry an answer no upstream uses any more is kept.
const FORGET_AFTER: Duration = Duration::from_secs(300);
/// Shortest time an answer is kept (a TTL of 0 would mean a query per tick).
const MIN_VALID: Duration = Duration::from_secs(1);

/// Answers by the resolver settings that produced them (two configurations may name
/// different servers) and the query.
type Key = (Vec<String>, Query);

static CACHE: LazyLock<Mutex<HashMap<Key, Entry>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn key(q: &Query, s: &DnsConfig) -> Key {
    (s.resolvers.clone(), q.clone())
}

/// A resolver for `s` (its name servers, or the system's with /etc/hosts).
fn resolver(s: &DnsConfig) -> TokioResolver {
    let provider = TokioConnectionProvider::default();
    let mut builder = if s.resolvers.is_empty() {
        TokioResolver::builder_tokio().unwrap_or_else(|_| {
            TokioResolver::builder_with_config(ResolverConfig::default(), provider.clone())
        })
    } else {
        let mut group = NameServerConfigGroup::new();
        for r in &s.resolvers {
            let addr = r
                .parse::<SocketAddr>()
                .or_else(|_| r.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)));
            if let Ok(a) = addr {
                group.merge(NameServerConfigGroup::from_ips_clear(
                    &[a.ip()],
                    a.port(),
                    true,
                ));
            }
        }
        TokioResolver::builder_with_config(
            ResolverConfig::from_parts(None, vec![], group),
            provider,
        )
    };
    let o = builder.options_mut();
    o.timeout = s.timeout.0;
    o.attempts = 1;
    o.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    // The gateway keeps its own cache (and re-resolves when it expires).
    o.cache_size = 0;
    if !s.resolvers.is_empty() {
        o.use_hosts_file = ResolveHosts::Never;
    }
    builder.build()
}

/// Resolves `q`: its addresses (sorted, so that an unchanged answer compares equal) and how
/// long they are valid.
async fn resolve(r: &TokioResolver, q: &Query) -> (Answer, Duration) {
    let now = Instant::now();
    match q {
        Query::Host(h) => match r.lookup_ip(h.as_str()).await {
            Ok(l) => {
                let mut t: Vec<Target> = l
                    .iter()
                    .map(|ip| Target {
                        ip,
                        port: None,
                        weight: None,
                        priority: 0,
                        name: None,
                    })
                    .collect();
                t.sort();
                t.dedup();
                (Ok(t), l.valid_until().saturating_duration_since(now))
            }
            Err(e) => (Err(failure(&e)), RETRY_UNRESOLVED),
        },
        Query::Srv(name) => match r.srv_lookup(name.as_str()).await {
            Ok(l) => {
                let mut t = Vec::new();
                let mut valid = l.as_lookup().valid_until().saturating_duration_since(now);
                for rec in l.iter() {
                    let target = rec.target().to_utf8();
                    let target = target.trim_end_matches('.').to_owned();
                    match r.lookup_ip(target.as_str()).await {
                        Ok(ips) => {
                            valid = valid.min(ips.valid_until().saturating_duration_since(now));
                            for ip in ips.iter() {
                                t.push(Target {
                                    ip,
                                    port: Some(rec.port()),
                                    // RFC 2782: weight 0 means no weighting, not "no traffic".
                                    weight: Some(u32::from(rec.weight()).max(1)),
                                    priority: -i32::from(rec.priority()),
                                    name: Some(target.clone()),
                                });
                            }
                        }
                        Err(e) => {
                            tracing::warn!(srv = %name, target = %target, cause = %e, "DNS: SRV target does not resolve");
                        }
                    }
                }
                t.sort();
                t.dedup();
                if t.is_empty() {
                    return (
                        Err(format!("no address for the targets of SRV {name}")),
                        RETRY_UNRESOLVED,
                    );
                }
                (Ok(t), valid)
            }
            Err(e) => (Err(failure(&e)), RETRY_UNRESOLVED),
        },
        Query::Registry(l) => match l.fetch().await {
            Ok(t) => (Ok(t), l.valid()),
            Err(why) => (Err(why), RETRY_UNRESOLVED),
        },
    }
}

fn failure(e: &hickory_resolver::ResolveError) -> String {
    if e.is_nx_domain() || e.is_no_records_found() {
        format!("{GONE}{e}")
    } else {
        e.to_string()
    }
}

/// A failure as the health view and the log show it.
pub(crate) fn plain(e: &str) -> &str {
    e.strip_prefix(GONE).unwrap_or(e)
}

/// Whether a failed answer says the name has no address (rather than that no answer came).
fn says_gone(answer: &Answer) -> bool {
    matches!(answer, Err(e) if e.starts_with(GONE))
}

fn store(q: &Query, answer: Answer, valid: Duration, s: &DnsConfig) {
    let k = key(q, s);
    let valid = match (&answer, s.valid) {
        // dns.valid is about DNS records; a registry's answers live as long as it says.
        (Ok(_), _) if matches!(q, Query::Registry(_)) => valid,
        (Ok(_), Some(v)) => v.0,
        (Ok(_), None) => valid.max(MIN_VALID),
        (Err(_), _) => RETRY_UNRESOLVED,
    };
    CACHE.lock().insert(
        k,
        Entry {
            answer,
            refresh_at: Instant::now() + valid,
            resolving: false,
        },
    );
}

/// What `q` resolves to, for a compilation: the cached answer, or one resolved now (waiting
/// at most `dns.timeout`). Never on a request.
pub(crate) fn lookup(q: &Query, s: &DnsConfig) -> Answer {
    if let Some(e) = CACHE.lock().get(&key(q, s)) {
        return e.answer.clone();
    }
    prefetch(std::iter::once(q.clone()), s);
    cached(q, s).unwrap_or_else(|| Err("not resolved".into()))
}

/// Resolves, all at once, the queries of `queries` that have no cached answer yet, waiting at
/// most `dns.timeout` in all (a configuration with many names that do not resolve compiles in
/// one timeout, not one per name). Never on a request.
pub(crate) fn prefetch(queries: impl IntoIterator<Item = Query>, s: &DnsConfig) {
    let missing: Vec<Query> = {
        let cache = CACHE.lock();
        let mut m: Vec<Query> = queries
            .into_iter()
            .filter(|q| !cache.contains_key(&key(q, s)))
            .collect();
        m.sort_unstable_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        m.dedup();
        m
    };
    if missing.is_empty() {
        return;
    }
    let timeout = missing
        .iter()
        .map(|q| q.timeout(s))
        .max()
        .unwrap_or(s.timeout.0);
    let (tx, rx) = std::sync::mpsc::channel();
    let settings = s.clone();
    let queries = missing.clone();
    // A thread of its own: the caller may be inside a runtime (the admin API) or not.
    let spawned = std::thread::Builder::new()
        .name("sluice-dns".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                let r = resolver(&settings);
                let mut all = tokio::task::JoinSet::new();
                for q in queries {
                    let r = r.clone();
                    let timeout = q.timeout(&settings);
                    all.spawn(async move {
                        let a = tokio::time::timeout(timeout, resolve(&r, &q)).await;
                        (q, a)
                    });
                }
                while let Some(Ok((q, a))) = all.join_next().await {
                    if let Ok((answer, valid)) = a {
                        let _ = tx.send((q, answer, valid));
                    }
                }
            });
        });
    let deadline = std::time::Instant::now() + timeout + Duration::from_millis(200);
    let mut answered = std::collections::HashSet::new();
    if spawned.is_ok() {
        while answered.len() < missing.len() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok((q, answer, valid)) => {
                    store(&q, answer, valid, s);
                    answered.insert(q);
                }
                Err(_) => break,
            }
        }
    }
    for q in missing.iter().filter(|q| !answered.contains(*q)) {
        store(
            q,
            Err(format!("no answer within {timeout:?}")),
            RETRY_UNRESOLVED,
            s,
        );
    }
}

/// The cached answer to `q`, if any (for comparing with what an upstream was built with).
pub(crate) fn cached(q: &Query, s: &DnsConfig) -> Option<Answer> {
    CACHE.lock().get(&key(q, s)).map(|e| e.answer.clone())
}

/// Re-resolves, in the background, every query whose answer is due (each with the resolver
/// settings of the upstream that has it). Returns at once; `changed` is called (on this
/// thread's runtime) when an answer differs from before.
pub(crate) fn refresh(
    queries: impl IntoIterator<Item = (Query, Arc<DnsConfig>)>,
    changed: std::rc::Rc<dyn Fn()>,
) {
    let now = Instant::now();
    let queries: Vec<(Query, Arc<DnsConfig>)> = queries.into_iter().collect();
    let due: Vec<(Query, Arc<DnsConfig>)> = {
        let mut cache = CACHE.lock();
        // Names no configuration in service has are forgotten a while after they expire.
        let used: std::collections::HashSet<Key> = queries.iter().map(|(q, s)| key(q, s)).collect();
        cache.retain(|k, e| used.contains(k) || e.refresh_at + FORGET_AFTER > now);
        queries
            .into_iter()
            .filter(|(q, s)| match cache.get_mut(&key(q, s)) {
                Some(e) if e.resolving || e.refresh_at > now => false,
                Some(e) => {
                    e.resolving = true;
                    true
                }
                None => true,
            })
            .collect()
    };
    for (q, s) in due {
        let changed = changed.clone();
        tokio::task::spawn_local(async move {
            let r = resolver(&s);
            let (answer, valid) = match tokio::time::timeout(q.timeout(&s), resolve(&r, &q)).await {
                Ok(a) => a,
                Err(_) => (
                    Err(format!("no answer within {:?}", q.timeout(&s))),
                    RETRY_UNRESOLVED,
                ),
            };
            let before = cached(&q, &s);
            // No answer at all (a lost packet, SERVFAIL, a timeout) keeps the addresses a
            // name had (NGINX does the same); only an answer that the name has none drops them.
            if let (Some(Ok(good)), Err(e)) = (&before, &answer)
                && !says_gone(&answer)
            {
                tracing::debug!(name = %q, cause = %e, "DNS: no answer; keeping the last addresses");
                store(&q, Ok(good.clone()), RETRY_UNRESOLVED, &s);
                return;
            }
            let differs = match (&before, &answer) {
                (Some(Err(_)), Err(_)) => false,
                (before, now) => before.as_ref() != Some(now),
            };
            if differs {
                match &answer {
                    Ok(t) => tracing::info!(name = %q, addresses = t.len(), "DNS: name resolved"),
                    Err(e) => {
                        tracing::warn!(name = %q, cause = %plain(e), "DNS: name does not resolve")
                    }
                }
            }
            store(&q, answer, valid, &s);
            if differs {
                changed();
            }
        });
    }
}
