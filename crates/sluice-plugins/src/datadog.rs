//! `datadog`: sends each request's metrics to a DogStatsD agent over UDP, through the batch
//! processor, as APISIX's `datadog`.
//!
//! `{prefer_name: true, include_path: false, include_method: false, constant_tags: []}` and the
//! batch processor's fields; its `plugin_metadata`: `{host: 127.0.0.1, port: 8125, namespace:
//! apisix, constant_tags: ["source:apisix"]}`. Per request, one datagram of DogStatsD lines
//! (`<namespace>.request.counter:1|c|#tags`, `request.latency` and `apisix.latency` in ms as
//! histograms, `upstream.latency` when a node answered, `ingress.size` and `egress.size`),
//! tagged as APISIX tags them: the metadata's and the route's constant tags, `route_name`
//! (the route's name with `prefer_name`, else its id), `service_name`, `consumer`,
//! `balancer_ip`, `response_status`, `response_status_class`, `scheme`, and with the options
//! `path` (the route's path pattern the request matched) and `method`. It reads the full
//! entry: `log_format` and `log_format_extra` are refused (APISIX's has none).

use std::fmt::Write as _;
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};
use sluice_config::Validator;
use sluice_core::plugin::{LocalFuture, parse_config};
use sluice_core::vars::Var;

use crate::logger::net::Peer;
use crate::logger::{Failed, Kind, Logged, Sink};
use crate::util::Num;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "crate::util::yes")]
    prefer_name: bool,
    #[serde(default)]
    include_path: bool,
    #[serde(default)]
    include_method: bool,
    #[serde(default)]
    constant_tags: Vec<String>,
}

/// The agent's receive buffer (DogStatsD's `dogstatsd_buffer_size`): a larger datagram is cut.
const MAX_DATAGRAM: usize = 8192;

const KIND: Kind = Kind {
    metadata: &["host", "port", "namespace", "constant_tags"],
    check_metadata: Some(check_metadata),
    formats: false,
    ..Kind::named("datadog", 495, "datadog")
};

crate::logger::factory!(KIND, Config, own);

/// A Datadog tag: a letter, then letters, digits and `_ - : . /`, not ending with `:`, 1 to
/// 200 characters (APISIX's pattern).
fn is_tag(t: &str) -> bool {
    let mut chars = t.chars();
    t.chars().count() <= 200
        && chars.next().is_some_and(char::is_alphabetic)
        && chars.all(|c| c.is_alphanumeric() || "_-:./".contains(c))
        && !t.ends_with(':')
}

/// Tags of a `constant_tags` field; errors at `field[i]`.
fn tags(field: &str, value: Option<&Value>, v: &mut Validator) -> Option<Vec<String>> {
    let Some(value) = value else {
        return Some(Vec::new());
    };
    let Some(list) = value.as_array() else {
        v.error_at(field, "must be a list of tags (source:apisix)");
        return None;
    };
    let mut out = Vec::with_capacity(list.len());
    let mut ok = true;
    v.field(field, |v| {
        for (i, t) in list.iter().enumerate() {
            match t.as_str().filter(|t| is_tag(t)) {
                Some(t) => out.push(t.to_owned()),
                None => {
                    v.index(i, |v| {
                        v.error("must be a Datadog tag: a letter, then letters, digits, _ - : . /, at most 200, not ending with :")
                    });
                    ok = false;
                }
            }
        }
    });
    ok.then_some(out)
}

/// Whether a route's path pattern (`/a`, `/a/*`, `/users/:id`) takes `path`.
fn pattern_matches(pattern: &str, path: &[u8]) -> bool {
    if let Some(prefix) = pattern.strip_suffix('*') {
        return path.starts_with(prefix.as_bytes());
    }
    let mut want = pattern.split('/');
    let mut got = path.split(|&b| b == b'/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some(w), Some(g)) if w.starts_with(':') && !g.is_empty() => {}
            (Some(w), Some(g)) if w.as_bytes() == g => {}
            _ => return false,
        }
    }
}

/// The agent and the namespace from the metadata.
struct Agent {
    host: String,
    port: Num,
    namespace: String,
    tags: Vec<String>,
}

fn agent(own: &Map<String, Value>, v: &mut Validator) -> Option<Agent> {
    let host = match own.get("host") {
        None => Some("127.0.0.1".to_owned()),
        Some(Value::String(h)) if !h.is_empty() => Some(h.clone()),
        Some(_) => {
            v.error_at("host", "must be the agent's host name or IP address");
            None
        }
    };
    let port = match own.get("port") {
        None => Some(Num::Whole(8125)),
        Some(p) => match serde_json::from_value::<Num>(p.clone()) {
            Ok(n) => Some(n),
            Err(_) => {
                v.error_at("port", "must be a port number");
                None
            }
        },
    };
    let namespace = match own.get("namespace") {
        None => Some("apisix".to_owned()),
        Some(Value::String(n)) => Some(n.clone()),
        Some(_) => {
            v.error_at("namespace", "must be a string");
            None
        }
    };
    let tags = match own.get("constant_tags") {
        None => Some(vec!["source:apisix".to_owned()]),
        t => tags("constant_tags", t, v),
    };
    Some(Agent {
        host: host?,
        port: port?,
        namespace: namespace?,
        tags: tags?,
    })
}

fn check_metadata(own: &Map<String, Value>, v: &mut Validator) -> bool {
    let Some(a) = agent(own, v) else {
        return false;
    };
    // The port's range is checked where the agent is made.
    Peer::new(&a.host, a.port, None, v).is_some()
}

/// Its own fields, checked, as its sink.
fn own(
    own: &Value,
    given: &crate::logger::Given<'_>,
    v: &mut Validator,
) -> Option<(Arc<dyn Sink>, Option<usize>)> {
    let c: Config = parse_config(own, v)?;
    let route_tags = tags(
        "constant_tags",
        Some(&Value::from(c.constant_tags.clone())),
        v,
    )?;
    let a = v.field("plugin_metadata", |v| agent(&given.metadata.own, v))?;
    let peer = v.field("plugin_metadata", |v| Peer::new(&a.host, a.port, None, v))?;
    let prefix = if a.namespace.is_empty() {
        String::new()
    } else {
        format!("{}.", a.namespace)
    };
    let mut constant = a.tags;
    constant.extend(route_tags);
    let sink = Datadog {
        peer,
        paths: given.route_paths.clone(),
        prefix,
        constant,
        prefer_name: c.prefer_name,
        include_path: c.include_path,
        include_method: c.include_method,
    };
    Some((Arc::new(sink) as Arc<dyn Sink>, None))
}

struct Datadog {
    peer: Peer,
    /// The route's path patterns, for the `path` tag.
    paths: Vec<String>,
    prefix: String,
    constant: Vec<String>,
    prefer_name: bool,
    include_path: bool,
    include_method: bool,
}

impl Sink for Datadog {
    /// The request's DogStatsD lines, one datagram's worth.
    fn envelope(&self, e: Logged<'_>) -> Vec<u8> {
        let entry = Value::Object(e.entry.clone());
        let num = |p: &str| entry.pointer(p).and_then(Value::as_f64);
        let text = |p: &str| entry.pointer(p).and_then(Value::as_str).unwrap_or("");
        let mut tags = self.constant.clone();
        let pick = |name: Option<String>, id: &str| match name.filter(|n| !n.is_empty()) {
            Some(n) if self.prefer_name => n,
            _ => id.to_owned(),
        };
        let route = pick(e.var(&Var::RouteName), text("/route_id"));
        let service = pick(e.var(&Var::ServiceName), text("/service_id"));
        let status = num("/response/status").unwrap_or(0.0) as u16;
        let mut variable = vec![("route_name", route)];
        if self.include_path {
            // The route's pattern the request matched (APISIX's `_path`), not the request's
            // own path: a tag's values stay as few as the routes' paths.
            let path = sluice_router::normalize_path(e.req.original_path());
            let matched = self.paths.iter().find(|p| pattern_matches(p, &path));
            variable.push(("path", matched.cloned().unwrap_or_default()));
        }
        if self.include_method {
            variable.push(("method", e.var(&Var::RequestMethod).unwrap_or_default()));
        }
        variable.extend([
            ("service_name", service),
            ("consumer", text("/consumer/username").to_owned()),
            ("balancer_ip", e.var(&Var::BalancerIp).unwrap_or_default()),
            ("response_status", status.to_string()),
            ("response_status_class", format!("{}xx", status / 100)),
            ("scheme", e.var(&Var::Scheme).unwrap_or_default()),
        ]);
        for (k, value) in variable {
            if !value.is_empty() {
                tags.push(format!("{k}:{value}"));
            }
        }
        let suffix = if tags.is_empty() {
            String::new()
        } else {
            format!("|#{}", tags.join(","))
        };
        let p = &self.prefix;
        let mut out = String::new();
        let mut line = |name: &str, value: f64, kind: &str| {
            if !out.is_empty() {
                out.push('\n');
            }
            let _ = write!(out, "{p}{name}:{value}|{kind}{suffix}");
        };
        line("request.counter", 1.0, "c");
        line("request.latency", num("/latency").unwrap_or(0.0), "h");
        if let Some(up) = num("/upstream_latency") {
            line("upstream.latency", up, "h");
        }
        line("apisix.latency", num("/apisix_latency").unwrap_or(0.0), "h");
        line("ingress.size", num("/request/size").unwrap_or(0.0), "ms");
        line("egress.size", num("/response/size").unwrap_or(0.0), "ms");
        out.into_bytes()
    }

    fn send<'a>(&'a self, batch: &'a [Bytes]) -> LocalFuture<'a, Result<(), Failed>> {
        Box::pin(async move {
            // An entry's lines in one datagram when they fit, else one per line.
            let mut datagrams: Vec<&[u8]> = Vec::with_capacity(batch.len());
            let mut firsts = Vec::with_capacity(batch.len());
            for entry in batch {
                firsts.push(datagrams.len());
                if entry.len() <= MAX_DATAGRAM {
                    datagrams.push(entry);
                } else {
                    datagrams.extend(entry.split(|&b| b == b'\n'));
                }
            }
            let total = datagrams.len();
            self.peer
                .send_udp(datagrams.into_iter())
                .await
                .map_err(|(sent, why)| {
                    // Entries whose every datagram went.
                    let ends = firsts.iter().skip(1).copied().chain([total]);
                    Failed {
                        delivered: ends.filter(|&end| end <= sent).count(),
                        why,
                    }
                })
        })
    }
}
