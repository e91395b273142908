//! Where Redis is: APISIX's `redis_*` fields of the three limit plugins (one server, a
//! cluster, sentinels; TLS), declared once (`with_redis_fields!`) and checked once
//! (`redis_target`).

use std::time::Duration;

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
    pub(super) fn place(&self) -> String {
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
            redis_sentinels: Option<Vec<crate::quota::target::SentinelNode>>,
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
            fn redis_fields(&self) -> crate::quota::target::RedisFields<'_> {
                let _ = (self.redis_keepalive_timeout, self.redis_keepalive_pool);
                crate::quota::target::RedisFields {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The sentinel settings of a limit plugin: `sentinels` as (host, port), a master name,
    /// a role, the two sentinel timeouts.
    fn sentinel_target(
        sentinels: &[(&str, i128)],
        master: Option<&str>,
        role: Option<&str>,
        timeouts: (Option<i128>, Option<i128>),
    ) -> (Option<Option<RedisTarget>>, Vec<String>) {
        let sentinels = Some(
            sentinels
                .iter()
                .map(|(h, p)| SentinelNode {
                    host: (*h).into(),
                    port: Num::Whole(*p),
                })
                .collect(),
        );
        let master = master.map(str::to_owned);
        let role = role.map(str::to_owned);
        let none: Option<String> = None;
        let no_nodes: Option<Vec<String>> = None;
        let f = RedisFields {
            host: &none,
            port: None,
            username: &none,
            password: &Some("secret".into()),
            database: Some(2),
            timeout: None,
            ssl: false,
            ssl_verify: false,
            cluster_nodes: &no_nodes,
            cluster_name: &none,
            cluster_ssl: false,
            cluster_ssl_verify: false,
            sentinels: &sentinels,
            master_name: &master,
            role: &role,
            connect_timeout: timeouts.0.map(Num::Whole),
            read_timeout: timeouts.1.map(Num::Whole),
            sentinel_username: &none,
            sentinel_password: &Some("s-secret".into()),
        };
        let mut v = sluice_config::Validator::new();
        let t = redis_target("redis-sentinel", f, &mut v);
        (t, v.into_errors().iter().map(ToString::to_string).collect())
    }

    #[test]
    fn sentinels_name_the_master_with_their_own_credentials() {
        let (t, errors) = sentinel_target(
            &[("10.0.0.1", 26379), ("10.0.0.2", 26380)],
            Some("mymaster"),
            Some("master"),
            (Some(500), Some(1500)),
        );
        assert_eq!(errors, Vec::<String>::new());
        let t = t.unwrap().unwrap();
        let s = t.sentinel.as_ref().unwrap();
        assert_eq!(
            s.nodes,
            [
                ("10.0.0.1".to_owned(), 26379),
                ("10.0.0.2".to_owned(), 26380)
            ]
        );
        assert_eq!(s.master, "mymaster");
        assert_eq!(s.password.as_deref(), Some("s-secret"));
        // The master's own password and database; the longer of the two timeouts.
        assert_eq!(t.password.as_deref(), Some("secret"));
        assert_eq!(t.database, 2);
        assert_eq!(t.timeout, Duration::from_millis(1500));
        assert_eq!(t.place(), "sentinel master mymaster");
    }

    #[test]
    fn sentinel_settings_that_cannot_work_are_refused_each_at_its_path() {
        let (t, errors) = sentinel_target(&[("", 0)], None, Some("slave"), (None, Some(0)));
        assert!(t.is_none());
        assert_eq!(
            errors,
            [
                "redis_sentinels[0].port: must be a whole number from 1 to 65535, got 0",
                "redis_sentinels[0].host: must not be empty",
                "redis_master_name: is required with policy redis-sentinel",
                "redis_role: \"slave\" is not supported: counters are written, so they are kept on the master",
                "redis_timeout: must be a whole number from 1 to 60000 milliseconds (one minute), got 0",
            ]
        );
        let (_, errors) = sentinel_target(&[], Some("m"), None, (None, None));
        assert_eq!(
            errors,
            ["redis_sentinels: is required with policy redis-sentinel: [{host, port}, ...]"]
        );
    }
}
