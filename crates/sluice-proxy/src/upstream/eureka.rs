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

use base64::Engine as _;
use serde_json::Value;
use sluice_config::EurekaConfig;

use super::answer::{Answer, GONE, Target};

/// An application, and the servers to ask.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EurekaQuery {
    pub(crate) app: String,
    pub(crate) config: EurekaConfig,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn query() -> EurekaQuery {
        EurekaQuery {
            app: "USER-SERVICE".into(),
            config: serde_json::from_value(serde_json::json!({"host": ["http://127.0.0.1:1"]}))
                .unwrap(),
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
