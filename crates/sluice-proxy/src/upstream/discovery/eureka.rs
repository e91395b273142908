//! Eureka discovery (`discovery_type: eureka`, APISIX's `discovery.eureka`): an application's
//! instances, fetched from the first Eureka server that answers (`GET <host><prefix>apps/<NAME>`,
//! JSON), every `fetch_interval` seconds, by the same cache and housekeeping as DNS names
//! ([`super::discover`]): an upstream is compiled again only when the instances change.
//!
//! As APISIX: instances whose status (or overridden status) is `UP`; the secure port when
//! it is enabled, else the port; the weight from the instance's metadata `weight`, else
//! `discovery.eureka.weight`. An application Eureka does not know, or with no instance up,
//! leaves the upstream without a node (503); a server that cannot be reached keeps the
//! instances last fetched.

use std::net::IpAddr;
use std::time::Duration;

use std::sync::Arc;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;

use super::{Discovery, NodeOf};
use crate::upstream::discover::{Answer, GONE, Lookup, Query, Target};

pub(super) static KIND: Eureka = Eureka;

/// `discovery_type: eureka`.
pub(super) struct Eureka;

impl Discovery for Eureka {
    fn name(&self) -> &'static str {
        "eureka"
    }

    fn service_is(&self) -> &'static str {
        " (the application's name)"
    }

    fn nodes_are(&self) -> &'static str {
        "the application's instances"
    }

    fn check_settings(&self, value: &Value, v: &mut Validator) {
        if let Some(e) = sluice_config::parse_value::<EurekaConfig>(v, value.clone()) {
            check(&e, v);
        }
    }

    fn query(
        &self,
        service: &str,
        settings: Option<&Value>,
        v: &mut Validator,
    ) -> Option<(Query, Option<u16>)> {
        if service.is_empty()
            || !service
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(&c))
        {
            v.error_at(
                "service_name",
                format!("invalid application name \"{service}\": letters, digits, -, _ and ."),
            );
            return None;
        }
        // Settings with errors are reported at `discovery.eureka`, not here.
        let config = settings.and_then(|s| serde_json::from_value::<EurekaConfig>(s.clone()).ok());
        let Some(config) = config else {
            if settings.is_none() {
                v.error_at(
                    "discovery_type",
                    "eureka needs the node's discovery.eureka settings (host: [http://127.0.0.1:8761])",
                );
            }
            return None;
        };
        let key = format!("eureka {service} {config:?}");
        let q = EurekaQuery {
            app: service.to_owned(),
            config,
            key,
        };
        Some((Query::Registry(Arc::new(q)), None))
    }

    /// Named by its address; health per application and address.
    fn node_of(&self, service: &str, _query: &Query, t: &Target, port: u16) -> NodeOf {
        let authority = std::net::SocketAddr::new(t.ip, port).to_string();
        NodeOf {
            host: t.ip.to_string(),
            health_key: format!("{service}@{authority}"),
            authority,
        }
    }
}

/// An application, and the servers to ask.
#[derive(Debug)]
pub(crate) struct EurekaQuery {
    pub(crate) app: String,
    pub(crate) config: EurekaConfig,
    key: String,
}

impl Lookup for EurekaQuery {
    fn key(&self) -> &str {
        &self.key
    }

    fn label(&self) -> String {
        format!("eureka {}", self.app)
    }

    fn timeout(&self) -> Duration {
        EurekaQuery::timeout(self)
    }

    fn valid(&self) -> Duration {
        EurekaQuery::valid(self)
    }

    fn fetch(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = Answer> + Send + '_>> {
        Box::pin(fetch(self))
    }
}

impl EurekaQuery {
    /// How long a fetch may take in all: every server in turn, each within its own timeouts
    /// (a server that accepts and then hangs leaves the others their time).
    pub(crate) fn timeout(&self) -> Duration {
        let t = &self.config.timeout;
        Duration::from_millis((t.connect + t.send + t.read) * self.config.host.len().max(1) as u64)
    }

    /// How long a fetched answer is kept.
    pub(crate) fn valid(&self) -> Duration {
        Duration::from_secs(self.config.fetch_interval)
    }
}

/// The instances of the application, from the first server that answers.
pub(crate) async fn fetch(q: &EurekaQuery) -> Answer {
    let mut failures = Vec::new();
    for host in &q.config.host {
        match fetch_from(host, q).await {
            Ok(answer) => return answer,
            Err(e) => failures.push(format!("{host}: {e}")),
        }
    }
    Err(format!("eureka: {}", failures.join("; ")))
}

/// One server's answer: `Err` when it gave none (tried the next).
async fn fetch_from(base: &str, q: &EurekaQuery) -> Result<Answer, String> {
    let rest = base
        .strip_prefix("http://")
        .ok_or("not an http:// address")?;
    let (authority, base_path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let prefix = q.config.prefix.trim_end_matches('/');
    let url = format!("http://{hostport}{base_path}{prefix}/apps/{}", q.app);
    let basic = userinfo.map(|u| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(u)
        )
    });
    let mut headers = vec![("Accept", "application/json")];
    if let Some(b) = &basic {
        headers.push(("Authorization", b.as_str()));
    }
    let t = &q.config.timeout;
    let deadlines = crate::fetch::Deadlines {
        connect: Duration::from_millis(t.connect),
        total: Duration::from_millis(t.connect + t.send + t.read),
    };
    let (status, body) =
        crate::fetch::request("GET", &url, &headers, Vec::new(), false, deadlines).await?;
    let status = http::StatusCode::from_u16(status).map_err(|e| e.to_string())?;
    if status == http::StatusCode::NOT_FOUND {
        return Ok(Err(format!("{GONE}eureka has no application {}", q.app)));
    }
    if !status.is_success() {
        return Err(format!("answered {status}"));
    }
    let doc: Value = serde_json::from_slice(&body).map_err(|e| format!("not JSON: {e}"))?;
    Ok(instances(&doc, q))
}

/// The `UP` instances of an application document (`{"application": {"instance": [...]}}`;
/// one instance may come as an object rather than a list).
fn instances(doc: &Value, q: &EurekaQuery) -> Answer {
    let list = match &doc["application"]["instance"] {
        Value::Array(a) => a.clone(),
        Value::Object(_) => vec![doc["application"]["instance"].clone()],
        _ => Vec::new(),
    };
    let enabled =
        |v: &Value| matches!(&v["@enabled"], Value::Bool(true)) || v["@enabled"] == "true";
    let number = |v: &Value| {
        v.as_u64()
            .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
    };
    let mut out = Vec::new();
    for i in &list {
        let overridden = i["overriddenstatus"]
            .as_str()
            .or_else(|| i["overriddenStatus"].as_str())
            .filter(|s| *s != "UNKNOWN");
        if overridden.or_else(|| i["status"].as_str()) != Some("UP") {
            continue;
        }
        let Some(ip) = i["ipAddr"].as_str().and_then(|a| a.parse::<IpAddr>().ok()) else {
            tracing::warn!(app = %q.app, instance = %i["instanceId"], "eureka: instance without an IP address in ipAddr; skipped");
            continue;
        };
        let mut port = None;
        if enabled(&i["port"]) {
            port = number(&i["port"]["$"]);
        }
        if enabled(&i["securePort"]) {
            port = number(&i["securePort"]["$"]).or(port);
        }
        let Some(port) = port.and_then(|p| u16::try_from(p).ok()).filter(|p| *p > 0) else {
            continue;
        };
        let weight = number(&i["metadata"]["weight"])
            .and_then(|w| u32::try_from(w).ok())
            .unwrap_or(q.config.weight);
        out.push(Target {
            ip,
            port: Some(port),
            weight: Some(weight),
            priority: 0,
            name: None,
        });
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        return Err(format!("{GONE}no instance of {} is UP in eureka", q.app));
    }
    Ok(out)
}

/// Eureka servers, as APISIX's `discovery.eureka`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EurekaConfig {
    /// The servers, `http://host:port` (`http://user:password@host:port` for basic auth),
    /// tried in order until one answers.
    pub(crate) host: Vec<String>,
    /// Path of the REST API on the servers. Default `/eureka/`.
    #[serde(default = "EurekaConfig::default_prefix")]
    pub(crate) prefix: String,
    /// Seconds between two fetches of an application's instances (1 to 3,600). Default 30.
    #[serde(default = "EurekaConfig::default_fetch_interval")]
    pub(crate) fetch_interval: u64,
    /// Weight of an instance whose metadata has no `weight` (0 to 65,535). Default 100.
    #[serde(default = "EurekaConfig::default_weight")]
    pub(crate) weight: u32,
    /// Milliseconds: connecting, sending, reading the answer (1 to 60,000 each).
    #[serde(default)]
    pub(crate) timeout: EurekaTimeout,
}

impl EurekaConfig {
    fn default_prefix() -> String {
        "/eureka/".into()
    }

    fn default_fetch_interval() -> u64 {
        30
    }

    fn default_weight() -> u32 {
        100
    }
}

/// Eureka's timeouts, in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct EurekaTimeout {
    /// Default 2,000.
    pub(crate) connect: u64,
    /// Default 2,000.
    pub(crate) send: u64,
    /// Default 5,000.
    pub(crate) read: u64,
}

impl Default for EurekaTimeout {
    fn default() -> Self {
        EurekaTimeout {
            connect: 2000,
            send: 2000,
            read: 5000,
        }
    }
}

/// Checks `discovery.eureka` (`v` points at it).
fn check(e: &EurekaConfig, v: &mut Validator) {
    if e.host.is_empty() {
        v.error_at(
            "host",
            "must name at least one server, like http://127.0.0.1:8761",
        );
    }
    v.field("host", |v| {
        for (i, h) in e.host.iter().enumerate() {
            v.index(i, |v| {
                // http://[user:password@]host[:port][/path]
                let ok = h
                    .strip_prefix("http://")
                    .and_then(|rest| rest.split('/').next())
                    .and_then(|authority| authority.rsplit('@').next())
                    .is_some_and(|hp| {
                        !hp.is_empty()
                            && !hp.starts_with(':')
                            && !hp.bytes().any(|b| b.is_ascii_control() || b == b' ')
                    });
                if !ok {
                    v.error(format!(
                        "invalid server \"{h}\": expected http://host:port (https is not supported)"
                    ));
                }
            });
        }
    });
    if !e.prefix.starts_with('/') || e.prefix.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        v.error_at(
            "prefix",
            format!("must be a path like /eureka/, got \"{}\"", e.prefix),
        );
    }
    let range = |v: &mut Validator, field: &str, n: u64, lo: u64, hi: u64, lo_s: &str, hi_s: &str| {
        if n < lo || n > hi {
            v.error_at(field, format!("must be from {lo_s} to {hi_s}"));
        }
    };
    range(
        v,
        "fetch_interval",
        e.fetch_interval,
        1,
        3600,
        "1",
        "3600 (seconds)",
    );
    range(v, "weight", u64::from(e.weight), 0, 65_535, "0", "65535");
    v.field("timeout", |v| {
        for (field, ms) in [
            ("connect", e.timeout.connect),
            ("send", e.timeout.send),
            ("read", e.timeout.read),
        ] {
            range(v, field, ms, 1, 60_000, "1", "60000 (milliseconds)");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query() -> EurekaQuery {
        EurekaQuery {
            app: "USER-SERVICE".into(),
            config: serde_json::from_value(serde_json::json!({"host": ["http://127.0.0.1:1"]}))
                .unwrap(),
            key: String::new(),
        }
    }

    #[test]
    fn up_instances_with_their_port_and_weight_as_apisix_reads_them() {
        let doc = serde_json::json!({"application": {"name": "USER-SERVICE", "instance": [
            {"instanceId": "a", "ipAddr": "10.0.0.1", "status": "UP",
             "port": {"$": 8081, "@enabled": "true"}, "securePort": {"$": 443, "@enabled": "false"},
             "metadata": {"weight": "5"}},
            {"instanceId": "b", "ipAddr": "10.0.0.2", "status": "UP",
             "port": {"$": 8081, "@enabled": "true"}, "securePort": {"$": 8443, "@enabled": "true"}},
            {"instanceId": "c", "ipAddr": "10.0.0.3", "status": "DOWN",
             "port": {"$": 8081, "@enabled": "true"}},
            {"instanceId": "d", "ipAddr": "10.0.0.4", "status": "UP", "overriddenstatus": "OUT_OF_SERVICE",
             "port": {"$": 8081, "@enabled": "true"}},
            {"instanceId": "e", "ipAddr": "host.example", "status": "UP",
             "port": {"$": 8081, "@enabled": "true"}}
        ]}});
        let got = instances(&doc, &query()).unwrap();
        let seen: Vec<(String, u16, u32)> = got
            .iter()
            .map(|t| (t.ip.to_string(), t.port.unwrap(), t.weight.unwrap()))
            .collect();
        assert_eq!(
            seen,
            vec![("10.0.0.1".into(), 8081, 5), ("10.0.0.2".into(), 8443, 100)]
        );
        // One instance may be an object; none up is "gone".
        let one = serde_json::json!({"application": {"instance":
            {"ipAddr": "10.0.0.9", "status": "UP", "port": {"$": "9000", "@enabled": true}}}});
        assert_eq!(instances(&one, &query()).unwrap()[0].port, Some(9000));
        let none = serde_json::json!({"application": {"instance": []}});
        assert!(instances(&none, &query()).unwrap_err().starts_with(GONE));
    }
}
