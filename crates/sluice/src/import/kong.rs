//! `sluice import kong FILE`: a Kong decK file (`_format_version: "3.0"`) as Sluice's
//! configuration: services, routes, upstreams and their targets, consumers and their
//! credentials, and the plugins that have an equivalent here. What has none is reported, one
//! line each with its path in the decK file (`services[0].routes[1].plugins[2]: ...`), and left
//! out. docs/migrating.md has the whole mapping.
//!
//! The gateway's own logic (what each Kong field means in APISIX's terms), written by hand.

use serde_json::{Map, Value, json};

/// The translated configuration and what could not be translated.
#[derive(Debug)]
pub struct Translation {
    /// A sluice.yaml's resources: `upstreams`, `services`, `routes`, `consumers`,
    /// `global_rules`.
    pub config: Value,
    /// One line per thing left out or changed in meaning, each with its path.
    pub notes: Vec<String>,
}

/// Kong's defaults for a service's timeouts (ms) and retries.
const KONG_TIMEOUT_MS: u64 = 60_000;
const KONG_RETRIES: u64 = 5;

/// The label a consumer's Kong ACL groups become, for the `acl` plugin.
pub const ACL_LABEL: &str = "kong-acl";

/// Translates the decK file's text (YAML or JSON). Err: it is not a decK file.
pub fn translate(text: &str) -> Result<Translation, String> {
    let doc: Value = yaml_serde::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let Value::Object(doc) = doc else {
        return Err("not a decK file: the document is not a mapping".into());
    };
    match doc.get("_format_version").and_then(Value::as_str) {
        Some("3.0") => {}
        Some(v) => {
            return Err(format!(
                "_format_version: \"{v}\": only decK's 3.0 format is read (deck file convert --from kong-gateway-2.x --to kong-gateway-3.x converts older files)"
            ));
        }
        None => {
            return Err(
                "_format_version: missing (a decK file has _format_version: \"3.0\")".into(),
            );
        }
    }
    let mut t = Translator::default();
    t.run(&doc);
    let mut config = Map::new();
    for (key, list) in [
        ("upstreams", t.upstreams),
        ("services", t.services),
        ("routes", t.routes),
        ("consumers", t.consumers),
        ("global_rules", t.global_rules),
    ] {
        if !list.is_empty() {
            config.insert(key.into(), Value::Array(list));
        }
    }
    Ok(Translation {
        config: Value::Object(config),
        notes: t.notes,
    })
}

#[derive(Default)]
struct Translator {
    upstreams: Vec<Value>,
    services: Vec<Value>,
    routes: Vec<Value>,
    consumers: Vec<Value>,
    global_rules: Vec<Value>,
    notes: Vec<String>,
    /// Kong upstream names (the hosts services name) and their Sluice ids.
    upstream_ids: Vec<(String, String)>,
    /// Kong service names and ids, and their Sluice ids.
    service_ids: Vec<(String, String)>,
    /// Sluice service ids and their Kong paths (without the trailing `/`), for the routes
    /// that strip theirs.
    service_paths: Vec<(String, String)>,
    route_ids: Vec<(String, String)>,
    consumer_ids: Vec<(String, String)>,
    /// Ids given, to keep them unique.
    taken: Vec<String>,
}

fn list<'a>(v: &'a Map<String, Value>, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `list` of an entry that may not be a mapping at all (then: nothing).
fn items<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn number(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// A Sluice id from a Kong name: the characters APISIX allows in ids, others as `-`.
fn id_of(name: &str) -> String {
    let id: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    if id.is_empty() { "unnamed".into() } else { id }
}

/// `name:value` (Kong's header and query lists) as a pair.
fn pair(s: &str) -> Option<(String, String)> {
    let (k, v) = s.split_once(':')?;
    Some((k.trim().to_owned(), v.trim().to_owned()))
}

impl Translator {
    fn note(&mut self, path: &str, what: impl std::fmt::Display) {
        self.notes.push(format!("{path}: {what}"));
    }

    fn unique(&mut self, base: String) -> String {
        let mut id = base.clone();
        let mut n = 2;
        while self.taken.contains(&id) {
            id = format!("{base}-{n}");
            n += 1;
        }
        self.taken.push(id.clone());
        id
    }

    fn run(&mut self, doc: &Map<String, Value>) {
        for (key, _) in doc {
            if !matches!(
                key.as_str(),
                "_format_version"
                    | "_transform"
                    | "_info"
                    | "_workspace"
                    | "services"
                    | "routes"
                    | "upstreams"
                    | "consumers"
                    | "plugins"
            ) {
                self.note(key, "not translated (Sluice has no equivalent here)");
            }
        }
        for (i, u) in list(doc, "upstreams").iter().enumerate() {
            self.upstream(u, &format!("upstreams[{i}]"));
        }
        // Services first (their ids and routes), then the routes at the top level, which
        // name their service.
        for (i, s) in list(doc, "services").iter().enumerate() {
            self.service(s, &format!("services[{i}]"));
        }
        for (i, r) in list(doc, "routes").iter().enumerate() {
            let path = format!("routes[{i}]");
            let service = match r.get("service") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(o @ Value::Object(_)) => {
                    text(o, "name").or_else(|| text(o, "id")).map(str::to_owned)
                }
                _ => None,
            };
            let found = service.as_ref().and_then(|s| self.lookup_service(s));
            if let (Some(name), None) = (&service, &found) {
                self.note(&path, format!("its service {name:?} is not in the file"));
                continue;
            }
            let sp = found.as_ref().map(|(_, p)| p.clone()).unwrap_or_default();
            self.route(r, &path, found.map(|(id, _)| id), &sp);
        }
        for (i, c) in list(doc, "consumers").iter().enumerate() {
            self.consumer(c, &format!("consumers[{i}]"));
        }
        // Plugins at the top level: global, or scoped by their service, route or consumer.
        for (i, p) in list(doc, "plugins").iter().enumerate() {
            let path = format!("plugins[{i}]");
            let scope = ["service", "route", "consumer"]
                .into_iter()
                .find(|k| p.get(*k).is_some_and(|v| !v.is_null()));
            let Some((name, conf)) = self.plugin(p, &path) else {
                continue;
            };
            match scope {
                None => {
                    let id = self.unique(format!("kong-{name}"));
                    self.global_rules
                        .push(json!({"id": id, "plugins": {name: conf}}));
                }
                Some(kind) => {
                    let target = match &p[kind] {
                        Value::String(s) => s.clone(),
                        v => text(v, "name")
                            .or_else(|| text(v, "id"))
                            .unwrap_or("")
                            .to_owned(),
                    };
                    let list = match kind {
                        "service" => self.lookup_service(&target).map(|(id, _)| ("services", id)),
                        "route" => self
                            .lookup(&self.route_ids, &target)
                            .map(|id| ("routes", id)),
                        _ => self
                            .lookup(&self.consumer_ids, &target)
                            .map(|id| ("consumers", id)),
                    };
                    match list {
                        Some((kind, id)) => self.attach(kind, &id, &name, conf),
                        None => {
                            self.note(&path, format!("its {kind} {target:?} is not in the file"))
                        }
                    }
                }
            }
        }
    }

    fn lookup(&self, table: &[(String, String)], name: &str) -> Option<String> {
        table
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    /// A service's Sluice id and its path (for routes that strip theirs).
    fn lookup_service(&self, name: &str) -> Option<(String, String)> {
        let id = self.lookup(&self.service_ids, name)?;
        let path = self.lookup(&self.service_paths, &id).unwrap_or_default();
        Some((id, path))
    }

    fn attach(&mut self, kind: &str, id: &str, name: &str, conf: Value) {
        let list = match kind {
            "services" => &mut self.services,
            "routes" => &mut self.routes,
            _ => &mut self.consumers,
        };
        let key = if kind == "consumers" {
            "username"
        } else {
            "id"
        };
        if let Some(o) = list
            .iter_mut()
            .find(|o| o[key] == id)
            .and_then(Value::as_object_mut)
        {
            let plugins = o.entry("plugins").or_insert_with(|| json!({}));
            plugins[name] = conf;
        }
    }

    fn upstream(&mut self, u: &Value, path: &str) {
        let Some(name) = text(u, "name") else {
            self.note(
                path,
                "an upstream without a name (services name it by its name)",
            );
            return;
        };
        let id = self.unique(id_of(name));
        self.upstream_ids.push((name.to_owned(), id.clone()));
        let mut out = json!({"id": id, "name": name});
        let algorithm = text(u, "algorithm").unwrap_or("round-robin");
        out["type"] = match algorithm {
            "round-robin" => json!("roundrobin"),
            "least-connections" => json!("least_conn"),
            "latency" => json!("ewma"),
            "consistent-hashing" => json!("chash"),
            other => {
                self.note(
                    &format!("{path}.algorithm"),
                    format!("{other:?} is not known: roundrobin instead"),
                );
                json!("roundrobin")
            }
        };
        if algorithm == "consistent-hashing" {
            let on = text(u, "hash_on").unwrap_or("none");
            let (hash_on, key) = match on {
                "none" | "ip" => ("vars", "remote_addr".to_owned()),
                "consumer" | "credential" => ("consumer", String::new()),
                "header" => (
                    "header",
                    text(u, "hash_on_header").unwrap_or("").to_ascii_lowercase(),
                ),
                "cookie" => ("cookie", text(u, "hash_on_cookie").unwrap_or("").to_owned()),
                "path" => ("vars", "uri".to_owned()),
                "query_arg" => (
                    "vars",
                    format!("arg_{}", text(u, "hash_on_query_arg").unwrap_or("")),
                ),
                other => {
                    self.note(
                        &format!("{path}.hash_on"),
                        format!("{other:?} has no equivalent: the client's address instead"),
                    );
                    ("vars", "remote_addr".to_owned())
                }
            };
            out["hash_on"] = json!(hash_on);
            if !key.is_empty() {
                out["key"] = json!(key);
            }
            if text(u, "hash_fallback").is_some_and(|f| f != "none") {
                self.note(
                    &format!("{path}.hash_fallback"),
                    "not translated (Sluice hashes on the one key)",
                );
            }
        }
        let mut nodes = Map::new();
        for (j, t) in items(u, "targets").iter().enumerate() {
            let Some(target) = text(t, "target") else {
                self.note(&format!("{path}.targets[{j}]"), "no target");
                continue;
            };
            let target = if target
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            {
                target.to_owned()
            } else {
                // Kong's default target port.
                format!("{target}:8000")
            };
            let weight = number(t, "weight").unwrap_or(100.0) as u64;
            nodes.insert(target, json!(weight));
        }
        if nodes.is_empty() {
            self.note(
                path,
                "no targets: every request to it fails (502) until targets are added",
            );
        }
        out["nodes"] = Value::Object(nodes);
        if let Some(checks) = u.get("healthchecks") {
            self.health_checks(checks, &mut out, &format!("{path}.healthchecks"));
        }
        if let Some(h) = text(u, "host_header") {
            out["pass_host"] = json!("rewrite");
            out["upstream_host"] = json!(h);
        }
        self.upstreams.push(out);
    }

    fn health_checks(&mut self, checks: &Value, out: &mut Value, path: &str) {
        let mut result = Map::new();
        if let Some(a) = checks.get("active") {
            let healthy = a.get("healthy").cloned().unwrap_or(json!({}));
            let unhealthy = a.get("unhealthy").cloned().unwrap_or(json!({}));
            let hi = number(&healthy, "interval").unwrap_or(0.0);
            let ui = number(&unhealthy, "interval").unwrap_or(0.0);
            // Kong: an interval of 0 turns active checks off (its default).
            if hi > 0.0 || ui > 0.0 {
                let kind = text(a, "type").unwrap_or("http");
                let mut act = json!({
                    "type": kind,
                    "timeout": number(a, "timeout").unwrap_or(1.0),
                    "http_path": text(a, "http_path").unwrap_or("/"),
                    "healthy": {"interval": hi.max(1.0) as u64,
                                "successes": number(&healthy, "successes").unwrap_or(2.0).max(1.0) as u64},
                    "unhealthy": {"interval": ui.max(1.0) as u64,
                                  "http_failures": number(&unhealthy, "http_failures").unwrap_or(5.0).max(1.0) as u64,
                                  "tcp_failures": number(&unhealthy, "tcp_failures").unwrap_or(2.0).max(1.0) as u64,
                                  "timeouts": number(&unhealthy, "timeouts").unwrap_or(3.0).max(1.0) as u64},
                });
                if let Some(h) = text(a, "host") {
                    act["host"] = json!(h);
                }
                if let Some(s) = healthy.get("http_statuses") {
                    act["healthy"]["http_statuses"] = s.clone();
                }
                if let Some(s) = unhealthy.get("http_statuses") {
                    act["unhealthy"]["http_statuses"] = s.clone();
                }
                result.insert("active".into(), act);
            }
        }
        if let Some(p) = checks.get("passive") {
            let unhealthy = p.get("unhealthy").cloned().unwrap_or(json!({}));
            let failures = number(&unhealthy, "http_failures").unwrap_or(0.0)
                + number(&unhealthy, "tcp_failures").unwrap_or(0.0)
                + number(&unhealthy, "timeouts").unwrap_or(0.0);
            // Kong: counters of 0 turn passive checks off (its default).
            if failures > 0.0 {
                let mut pas = json!({
                    "unhealthy": {
                        "http_failures": number(&unhealthy, "http_failures").unwrap_or(0.0) as u64,
                        "tcp_failures": number(&unhealthy, "tcp_failures").unwrap_or(0.0) as u64,
                        "timeouts": number(&unhealthy, "timeouts").unwrap_or(0.0) as u64,
                    }
                });
                if let Some(s) = unhealthy.get("http_statuses") {
                    pas["unhealthy"]["http_statuses"] = s.clone();
                }
                if let Some(s) = p.get("healthy").and_then(|h| h.get("http_statuses")) {
                    pas["healthy"] = json!({"http_statuses": s});
                }
                if !result.contains_key("active") {
                    self.note(
                        path,
                        "passive checks without active ones: a node marked down comes back only with active checks in Sluice (as in APISIX); add healthchecks.active",
                    );
                }
                result.insert("passive".into(), pas);
            }
        }
        if !result.is_empty() {
            out["checks"] = Value::Object(result);
        }
    }

    fn service(&mut self, s: &Value, path: &str) {
        let name = text(s, "name").or_else(|| text(s, "id")).map(str::to_owned);
        let id = self.unique(id_of(name.as_deref().unwrap_or(path)));
        if let Some(n) = &name {
            self.service_ids.push((n.clone(), id.clone()));
        }
        if let Some(i) = text(s, "id") {
            self.service_ids.push((i.to_owned(), id.clone()));
        }
        // Where it sends: url, else protocol, host, port and path.
        let (mut protocol, mut host, mut port, mut spath) = (
            text(s, "protocol").unwrap_or("http").to_owned(),
            text(s, "host").unwrap_or("").to_owned(),
            number(s, "port").map(|p| p as u16),
            text(s, "path").unwrap_or("").to_owned(),
        );
        if let Some(url) = text(s, "url") {
            match url.split_once("://") {
                Some((scheme, rest)) => {
                    protocol = scheme.to_owned();
                    let (authority, p) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
                    spath = p.to_owned();
                    // host, host:port, [v6] or [v6]:port
                    let (h, p) = match authority.rsplit_once(':') {
                        Some((h, p)) if !p.ends_with(']') => (h, p.parse::<u16>().ok()),
                        _ => (authority, None),
                    };
                    host = h.trim_start_matches('[').trim_end_matches(']').to_owned();
                    port = p.or(port);
                }
                None => {
                    self.note(&format!("{path}.url"), "not a URL: the service is left out");
                    return;
                }
            }
        }
        let scheme = match protocol.as_str() {
            "http" | "https" | "grpc" | "grpcs" => protocol.clone(),
            "ws" => "http".into(),
            "wss" => "https".into(),
            other => {
                self.note(
                    path,
                    format!("protocol {other:?}: a stream service, not translated (Sluice's stream_routes take TCP and UDP by hand)"),
                );
                return;
            }
        };
        let port = port.unwrap_or(match scheme.as_str() {
            "https" | "grpcs" => 443,
            _ => 80,
        });
        let routes: Vec<Value> = items(s, "routes").to_vec();
        let preserving = routes
            .iter()
            .filter(|r| r.get("preserve_host").and_then(Value::as_bool) == Some(true))
            .count();
        let pass_host = if !routes.is_empty() && preserving == routes.len() {
            "pass"
        } else {
            for (j, r) in routes.iter().enumerate() {
                if r.get("preserve_host").and_then(Value::as_bool) == Some(true) {
                    self.note(
                        &format!("{path}.routes[{j}].preserve_host"),
                        "true on a service whose other routes do not preserve the host: its upstream sends the service's host for all of them",
                    );
                }
            }
            "rewrite"
        };
        let timeout = |k: &str| number(s, k).unwrap_or(KONG_TIMEOUT_MS as f64) / 1000.0;
        let (connect, send, read) = (
            timeout("connect_timeout"),
            timeout("write_timeout"),
            timeout("read_timeout"),
        );
        let retries = number(s, "retries").map_or(KONG_RETRIES, |r| r as u64);
        let mut out = json!({"id": id});
        if let Some(n) = &name {
            out["name"] = json!(n);
        }
        if let Some(up) = self.lookup(&self.upstream_ids, &host) {
            out["upstream_id"] = json!(up);
            let Some(shared) = self.upstreams.iter_mut().find(|u| u["id"] == up.as_str()) else {
                return;
            };
            // Kong keeps these on the service; APISIX on the upstream.
            let mut differ = Vec::new();
            for (k, v) in [
                ("scheme", json!(scheme)),
                ("retries", json!(retries)),
                (
                    "timeout",
                    json!({"connect": connect, "send": send, "read": read}),
                ),
            ] {
                match shared.get(k) {
                    Some(old) if *old != v => differ.push(k),
                    Some(_) => {}
                    None => shared[k] = v,
                }
            }
            if pass_host == "pass" {
                shared["pass_host"] = json!("pass");
            } else if shared.get("pass_host").is_none() {
                shared["pass_host"] = json!("rewrite");
                shared["upstream_host"] = json!(host);
            }
            for k in differ {
                self.note(
                    path,
                    format!("{k} differs from another service's on upstream {host:?}: the first one's is kept"),
                );
            }
        } else if host.is_empty() {
            self.note(path, "no host and no url: the service is left out");
            return;
        } else {
            let node = if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            };
            out["upstream"] = json!({
                "type": "roundrobin",
                "nodes": {node: 1},
                "scheme": scheme,
                "pass_host": if pass_host == "pass" { "pass" } else { "node" },
                "retries": retries,
                "timeout": {"connect": connect, "send": send, "read": read},
            });
        }
        if text(s, "client_certificate").is_some()
            || s.get("client_certificate").is_some_and(Value::is_object)
        {
            self.note(
                &format!("{path}.client_certificate"),
                "not translated (give the upstream's tls.client_cert by hand)",
            );
        }
        if s.get("tls_verify").and_then(Value::as_bool) == Some(true) {
            self.note(
                &format!("{path}.tls_verify"),
                "Sluice verifies upstream certificates by the upstream's tls settings: check them",
            );
        }
        self.service_paths
            .push((id.clone(), spath.trim_end_matches('/').to_owned()));
        let plugins = self.plugins(s, path);
        if !plugins.is_empty() {
            out["plugins"] = Value::Object(plugins);
        }
        self.services.push(out);
        let sp = spath.trim_end_matches('/').to_owned();
        for (j, r) in routes.iter().enumerate() {
            self.route(r, &format!("{path}.routes[{j}]"), Some(id.clone()), &sp);
        }
    }

    fn route(&mut self, r: &Value, path: &str, service: Option<String>, service_path: &str) {
        let name = text(r, "name").or_else(|| text(r, "id")).map(str::to_owned);
        let base = name.clone().unwrap_or_else(|| match &service {
            Some(s) => format!("{s}-route"),
            None => "route".into(),
        });
        let id = self.unique(id_of(&base));
        if let Some(n) = &name {
            self.route_ids.push((n.clone(), id.clone()));
        }
        if let Some(i) = text(r, "id") {
            self.route_ids.push((i.to_owned(), id.clone()));
        }
        let mut out = json!({"id": id});
        if let Some(n) = &name {
            out["name"] = json!(n);
        }
        if let Some(s) = &service {
            out["service_id"] = json!(s);
        } else {
            self.note(path, "a route without a service: it is answered by its plugins only (503 when they let a request through)");
        }
        let protocols = strings(r, "protocols");
        let mut vars: Vec<Value> = Vec::new();
        if !protocols.is_empty()
            && !protocols
                .iter()
                .any(|p| matches!(p.as_str(), "http" | "https" | "grpc" | "grpcs"))
        {
            self.note(
                path,
                format!("protocols {protocols:?}: a stream route, not translated"),
            );
            return;
        }
        if !protocols.is_empty() && !protocols.iter().any(|p| p == "http" || p == "grpc") {
            vars.push(json!(["scheme", "==", "https"]));
        }
        let paths = strings(r, "paths");
        let (regexes, prefixes): (Vec<String>, Vec<String>) =
            paths.into_iter().partition(|p| p.starts_with('~'));
        let mut uris: Vec<String> = prefixes.iter().map(|p| format!("{p}*")).collect();
        if !regexes.is_empty() {
            if !prefixes.is_empty() {
                self.note(
                    &format!("{path}.paths"),
                    "regex and prefix paths in one route: the prefix paths are translated, the regex ones are left out (make them a route of their own)",
                );
            } else {
                uris.push("/*".into());
                let conds: Vec<Value> = regexes
                    .iter()
                    .map(|re| json!(["uri", "~~", format!("^{}", &re[1..])]))
                    .collect();
                if conds.len() == 1 {
                    vars.push(conds[0].clone());
                } else {
                    let mut or = vec![json!("OR")];
                    or.extend(conds);
                    vars.push(Value::Array(or));
                }
                if r.get("strip_path").and_then(Value::as_bool) != Some(false) {
                    self.note(
                        &format!("{path}.strip_path"),
                        "a regex path is not stripped: the upstream gets the whole path",
                    );
                }
            }
        }
        if uris.is_empty() {
            uris.push("/*".into());
        }
        out["uris"] = json!(uris);
        let methods = strings(r, "methods");
        if !methods.is_empty() {
            out["methods"] = json!(methods);
        }
        let hosts = strings(r, "hosts");
        for h in &hosts {
            if h.ends_with(".*") {
                self.note(&format!("{path}.hosts"), format!("{h:?}: a suffix wildcard has no equivalent (Sluice's wildcards are leading: *.example.com)"));
            }
        }
        let hosts: Vec<String> = hosts.into_iter().filter(|h| !h.ends_with(".*")).collect();
        if !hosts.is_empty() {
            out["hosts"] = json!(hosts);
        }
        if let Some(Value::Object(headers)) = r.get("headers") {
            for (k, v) in headers {
                let var = format!("http_{}", k.to_ascii_lowercase().replace('-', "_"));
                let values: Vec<Value> = v.as_array().cloned().unwrap_or_else(|| vec![v.clone()]);
                vars.push(json!([var, "in", values]));
            }
        }
        for k in ["snis", "sources", "destinations"] {
            if r.get(k)
                .is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty()))
            {
                self.note(&format!("{path}.{k}"), "not translated");
            }
        }
        if !vars.is_empty() {
            out["vars"] = Value::Array(vars);
        }
        if let Some(p) = number(r, "regex_priority").filter(|p| *p != 0.0) {
            out["priority"] = json!(p as i64);
        }
        let mut plugins = self.plugins(r, path);
        // Kong's path handling ("v0"): the matched prefix stripped (strip_path, its
        // default), the service's path put in front.
        let strip = r.get("strip_path").and_then(Value::as_bool) != Some(false);
        if regexes.is_empty() && !prefixes.is_empty() && (strip || !service_path.is_empty()) {
            if prefixes.len() > 1 && strip {
                self.note(&format!("{path}.paths"), "several paths stripped: only the first one's prefix is removed; give each its own route");
            }
            let p = prefixes[0].trim_end_matches('/');
            let rewrite = if strip {
                super::prefix_rewrite(p, service_path)
            } else {
                json!(["^/(.*)$", format!("{service_path}/$1")])
            };
            let pr = plugins.entry("proxy-rewrite").or_insert_with(|| json!({}));
            if pr.get("uri").is_none() {
                pr["regex_uri"] = rewrite;
            }
        }
        if !plugins.is_empty() {
            out["plugins"] = Value::Object(plugins);
        }
        let https_redirect = r.get("https_redirect_status_code").and_then(Value::as_u64);
        if protocols == ["https"] && https_redirect.is_some_and(|c| c != 426) {
            self.note(
                &format!("{path}.https_redirect_status_code"),
                "not translated (the redirect plugin's http_to_https does it)",
            );
        }
        self.routes.push(out);
    }

    fn consumer(&mut self, c: &Value, path: &str) {
        let Some(username) = text(c, "username").or_else(|| text(c, "custom_id")) else {
            self.note(path, "a consumer without a username or custom_id");
            return;
        };
        let id = id_of(username).replace('.', "_");
        self.consumer_ids.push((username.to_owned(), id.clone()));
        if let Some(i) = text(c, "id") {
            self.consumer_ids.push((i.to_owned(), id.clone()));
        }
        let mut plugins = self.plugins(c, path);
        let mut credentials: Vec<Value> = Vec::new();
        let mut add = |plugins: &mut Map<String, Value>, kind: &str, conf: Value, n: usize| {
            if plugins.contains_key(kind) {
                credentials
                    .push(json!({"id": format!("{id}-{kind}-{n}"), "plugins": {kind: conf}}));
            } else {
                plugins.insert(kind.into(), conf);
            }
        };
        for (n, k) in items(c, "keyauth_credentials").iter().enumerate() {
            if let Some(key) = text(k, "key") {
                add(&mut plugins, "key-auth", json!({"key": key}), n);
            }
        }
        for (n, b) in items(c, "basicauth_credentials").iter().enumerate() {
            if let (Some(u), Some(p)) = (text(b, "username"), text(b, "password")) {
                add(
                    &mut plugins,
                    "basic-auth",
                    json!({"username": u, "password": p}),
                    n,
                );
            }
        }
        for (n, j) in items(c, "jwt_secrets").iter().enumerate() {
            let Some(key) = text(j, "key") else { continue };
            let algorithm = text(j, "algorithm").unwrap_or("HS256");
            let mut conf = json!({"key": key, "algorithm": algorithm});
            if algorithm.starts_with("HS") {
                match text(j, "secret") {
                    Some(s) => conf["secret"] = json!(s),
                    None => {
                        self.note(
                            &format!("{path}.jwt_secrets[{n}].secret"),
                            "missing: the credential is left out",
                        );
                        continue;
                    }
                }
            } else {
                match text(j, "rsa_public_key") {
                    Some(k) => conf["public_key"] = json!(k),
                    None => {
                        self.note(
                            &format!("{path}.jwt_secrets[{n}].rsa_public_key"),
                            "missing: the credential is left out",
                        );
                        continue;
                    }
                }
            }
            add(&mut plugins, "jwt-auth", conf, n);
        }
        for kind in [
            "hmacauth_credentials",
            "oauth2_credentials",
            "mtls_auth_credentials",
        ] {
            if !items(c, kind).is_empty() {
                self.note(
                    &format!("{path}.{kind}"),
                    "not translated (no equivalent credential here)",
                );
            }
        }
        let groups: Vec<String> = items(c, "acls")
            .iter()
            .filter_map(|a| text(a, "group").map(str::to_owned))
            .collect();
        let mut out = json!({"username": id});
        if !groups.is_empty() {
            out["labels"] = json!({ACL_LABEL: groups.join(",")});
        }
        if let Some(g) = c
            .get("groups")
            .and_then(Value::as_array)
            .filter(|g| !g.is_empty())
        {
            self.note(
                &format!("{path}.groups"),
                format!("consumer groups ({} of them) are not translated", g.len()),
            );
        }
        if !plugins.is_empty() {
            out["plugins"] = Value::Object(plugins);
        }
        if !credentials.is_empty() {
            out["credentials"] = Value::Array(credentials);
        }
        self.consumers.push(out);
    }

    /// The plugins nested in a service, route or consumer.
    fn plugins(&mut self, owner: &Value, path: &str) -> Map<String, Value> {
        let mut out = Map::new();
        let Some(list) = owner.get("plugins").and_then(Value::as_array) else {
            return out;
        };
        for (i, p) in list.iter().enumerate() {
            let ppath = format!("{path}.plugins[{i}]");
            if let Some((name, conf)) = self.plugin(p, &ppath) {
                if out.contains_key(&name) {
                    self.note(
                        &ppath,
                        format!("a second {name} here: the first one is kept"),
                    );
                    continue;
                }
                out.insert(name, conf);
            }
        }
        out
    }

    /// One Kong plugin as a Sluice plugin, or None (noted).
    fn plugin(&mut self, p: &Value, path: &str) -> Option<(String, Value)> {
        let name = text(p, "name").unwrap_or("");
        if p.get("enabled").and_then(Value::as_bool) == Some(false) {
            self.note(path, format!("{name} is disabled: left out"));
            return None;
        }
        let empty = json!({});
        let c = p.get("config").unwrap_or(&empty);
        let cpath = format!("{path}.config");
        let first = |k: &str, default: &str| -> String {
            strings(c, k)
                .into_iter()
                .next()
                .unwrap_or_else(|| default.to_owned())
        };
        let out = match name {
            "key-auth" => {
                let names = strings(c, "key_names");
                if names.len() > 1 {
                    self.note(
                        &format!("{cpath}.key_names"),
                        "only the first name is read (header and query)",
                    );
                }
                if c.get("key_in_body").and_then(Value::as_bool) == Some(true) {
                    self.note(
                        &format!("{cpath}.key_in_body"),
                        "not translated (a key is read from the header or the query)",
                    );
                }
                self.anonymous(c, &cpath);
                let key = first("key_names", "apikey");
                (
                    "key-auth",
                    json!({"header": key, "query": key,
                    "hide_credentials": c.get("hide_credentials").and_then(Value::as_bool).unwrap_or(false)}),
                )
            }
            "basic-auth" => {
                self.anonymous(c, &cpath);
                (
                    "basic-auth",
                    json!({"hide_credentials": c.get("hide_credentials").and_then(Value::as_bool).unwrap_or(false)}),
                )
            }
            "jwt" => {
                self.anonymous(c, &cpath);
                if number(c, "maximum_expiration").is_some_and(|m| m > 0.0) {
                    self.note(&format!("{cpath}.maximum_expiration"), "not translated");
                }
                if c.get("secret_is_base64").and_then(Value::as_bool) == Some(true) {
                    self.note(
                        &format!("{cpath}.secret_is_base64"),
                        "set base64_secret: true on the consumers' jwt-auth by hand",
                    );
                }
                (
                    "jwt-auth",
                    json!({
                        "header": first("header_names", "authorization"),
                        "query": first("uri_param_names", "jwt"),
                        "cookie": first("cookie_names", "jwt"),
                        "key_claim_name": text(c, "key_claim_name").unwrap_or("iss"),
                    }),
                )
            }
            "acl" => {
                let mut conf = json!({});
                let allow = strings(c, "allow");
                let deny = strings(c, "deny");
                if !allow.is_empty() {
                    conf["allow_labels"] = json!({ACL_LABEL: allow});
                }
                if !deny.is_empty() {
                    conf["deny_labels"] = json!({ACL_LABEL: deny});
                }
                ("acl", conf)
            }
            "rate-limiting" => return self.rate_limiting(c, &cpath),
            "cors" => {
                let origins = strings(c, "origins");
                let credentials = c
                    .get("credentials")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let any = origins.is_empty() || origins.iter().any(|o| o == "*");
                let allow_origins = if any && credentials {
                    "**".to_owned()
                } else if any {
                    "*".to_owned()
                } else {
                    origins.join(",")
                };
                let methods = strings(c, "methods");
                let allow_methods = if methods.is_empty() {
                    "GET,HEAD,PUT,PATCH,POST,DELETE,OPTIONS,TRACE,CONNECT".to_owned()
                } else {
                    methods.join(",")
                };
                let headers = strings(c, "headers");
                let allow_headers = if headers.is_empty() {
                    "**".to_owned()
                } else {
                    headers.join(",")
                };
                let mut conf = json!({
                    "allow_origins": allow_origins,
                    "allow_methods": allow_methods,
                    "allow_headers": allow_headers,
                    "allow_credential": credentials,
                });
                let exposed = strings(c, "exposed_headers");
                if !exposed.is_empty() {
                    conf["expose_headers"] = json!(exposed.join(","));
                }
                if let Some(m) = number(c, "max_age") {
                    conf["max_age"] = json!(m as i64);
                }
                if c.get("preflight_continue").and_then(Value::as_bool) == Some(true) {
                    self.note(
                        &format!("{cpath}.preflight_continue"),
                        "not translated (Sluice answers preflights itself)",
                    );
                }
                ("cors", conf)
            }
            "ip-restriction" => {
                let mut conf = json!({});
                let allow = strings(c, "allow");
                let deny = strings(c, "deny");
                if !allow.is_empty() {
                    conf["whitelist"] = json!(allow);
                }
                if !deny.is_empty() {
                    conf["blacklist"] = json!(deny);
                }
                if let Some(m) = text(c, "message") {
                    conf["message"] = json!(m);
                }
                if number(c, "status").is_some_and(|s| s != 403.0) {
                    self.note(
                        &format!("{cpath}.status"),
                        "not translated (refusals are 403)",
                    );
                }
                ("ip-restriction", conf)
            }
            "request-transformer" => {
                let mut headers = Map::new();
                self.header_ops(c, &cpath, &mut headers, &["querystring", "body", "uri"]);
                let mut conf = json!({});
                if !headers.is_empty() {
                    conf["headers"] = Value::Object(headers);
                }
                if let Some(m) = text(c, "http_method") {
                    conf["method"] = json!(m.to_ascii_uppercase());
                }
                if let Some(u) = c.get("replace").and_then(|r| text(r, "uri")) {
                    conf["uri"] = json!(u);
                }
                ("proxy-rewrite", conf)
            }
            "response-transformer" => {
                let mut headers = Map::new();
                self.header_ops(c, &cpath, &mut headers, &["json", "json_types"]);
                ("response-rewrite", json!({"headers": headers}))
            }
            "proxy-cache" => {
                let mut conf = json!({"cache_strategy": "memory", "cache_zone": "memory_cache"});
                if let Some(s) = c.get("response_code") {
                    conf["cache_http_status"] = s.clone();
                }
                if let Some(m) = c.get("request_method") {
                    conf["cache_method"] = m.clone();
                }
                if let Some(t) = number(c, "cache_ttl") {
                    conf["cache_ttl"] = json!(t as u64);
                }
                if c.get("cache_control").and_then(Value::as_bool) == Some(true) {
                    conf["cache_control"] = json!(true);
                }
                if c.get("content_type").is_some() {
                    self.note(
                        &format!("{cpath}.content_type"),
                        "not translated (every content type is cached)",
                    );
                }
                if text(c, "strategy").is_some_and(|s| s != "memory") {
                    self.note(&format!("{cpath}.strategy"), "memory is used");
                }
                ("proxy-cache", conf)
            }
            "prometheus" => ("prometheus", json!({})),
            "correlation-id" => {
                if let Some(g @ ("uuid#counter" | "tracker")) = text(c, "generator") {
                    self.note(
                        &format!("{cpath}.generator"),
                        format!("{g} has no equivalent: a uuid per request"),
                    );
                }
                (
                    "request-id",
                    json!({
                        "header_name": text(c, "header_name").unwrap_or("Kong-Request-ID"),
                        "include_in_response": c.get("echo_downstream").and_then(Value::as_bool).unwrap_or(false),
                        "algorithm": "uuid",
                    }),
                )
            }
            "request-size-limiting" => {
                let size = number(c, "allowed_payload_size").unwrap_or(128.0);
                let unit = match text(c, "size_unit").unwrap_or("megabytes") {
                    "bytes" => 1.0,
                    "kilobytes" => 1024.0,
                    _ => 1024.0 * 1024.0,
                };
                (
                    "client-control",
                    json!({"max_body_size": (size * unit) as u64}),
                )
            }
            "request-termination" => {
                let status = number(c, "status_code").unwrap_or(503.0) as u64;
                let body = match (text(c, "body"), text(c, "message")) {
                    (Some(b), _) => b.to_owned(),
                    (None, Some(m)) => json!({"message": m}).to_string(),
                    (None, None) => String::new(),
                };
                (
                    "fault-injection",
                    json!({"abort": {"http_status": status, "body": body}}),
                )
            }
            "file-log" => (
                "file-logger",
                json!({"path": text(c, "path").unwrap_or("/var/log/sluice/kong-file-log.log")}),
            ),
            "http-log" => match text(c, "http_endpoint") {
                Some(u) => ("http-logger", json!({"uri": u})),
                None => {
                    self.note(&cpath, "http-log without http_endpoint: left out");
                    return None;
                }
            },
            "tcp-log" | "udp-log" => match (text(c, "host"), number(c, "port")) {
                (Some(h), Some(port)) => (
                    if name == "tcp-log" {
                        "tcp-logger"
                    } else {
                        "udp-logger"
                    },
                    json!({"host": h, "port": port as u64}),
                ),
                _ => {
                    self.note(&cpath, format!("{name} without host and port: left out"));
                    return None;
                }
            },
            "bot-detection" => {
                self.note(path, "bot-detection: translated to ua-restriction with its allow and deny lists; Kong's built-in list of bots is not carried over");
                let mut conf = json!({});
                let allow = strings(c, "allow");
                let deny = strings(c, "deny");
                if !allow.is_empty() {
                    conf["allowlist"] = json!(allow);
                }
                if !deny.is_empty() {
                    conf["denylist"] = json!(deny);
                }
                ("ua-restriction", conf)
            }
            "" => {
                self.note(path, "a plugin without a name");
                return None;
            }
            other => {
                self.note(
                    path,
                    format!("{other} has no equivalent in Sluice: left out"),
                );
                return None;
            }
        };
        Some((out.0.to_owned(), out.1))
    }

    fn anonymous(&mut self, c: &Value, path: &str) {
        if text(c, "anonymous").is_some_and(|a| !a.is_empty()) {
            self.note(
                &format!("{path}.anonymous"),
                "not translated (a request without credentials gets 401)",
            );
        }
    }

    /// request- and response-transformer's header operations as proxy-rewrite's and
    /// response-rewrite's `headers` (`add` appends, `set` replaces, `remove`). Kong's `add`
    /// (only when absent) and `replace` (only when present) both become `set`.
    fn header_ops(
        &mut self,
        c: &Value,
        path: &str,
        headers: &mut Map<String, Value>,
        other: &[&str],
    ) {
        let mut set = Map::new();
        let mut add = Map::new();
        let mut remove: Vec<Value> = Vec::new();
        for op in ["remove", "rename", "replace", "add", "append"] {
            let Some(section) = c.get(op) else { continue };
            for h in strings(section, "headers") {
                match op {
                    "remove" => remove.push(json!(h)),
                    "rename" => self.note(
                        &format!("{path}.{op}.headers"),
                        format!("{h:?}: renaming a header is not translated"),
                    ),
                    _ => match pair(&h) {
                        Some((k, v)) if op == "append" => {
                            add.insert(k, json!(v));
                        }
                        Some((k, v)) => {
                            set.insert(k, json!(v));
                        }
                        None => self.note(
                            &format!("{path}.{op}.headers"),
                            format!("{h:?} is not name:value"),
                        ),
                    },
                }
            }
            for o in other {
                if section
                    .get(*o)
                    .is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty()) || v.is_string())
                {
                    if *o == "uri" && op == "replace" {
                        continue;
                    }
                    self.note(&format!("{path}.{op}.{o}"), "not translated");
                }
            }
        }
        if !set.is_empty() {
            headers.insert("set".into(), Value::Object(set));
        }
        if !add.is_empty() {
            headers.insert("add".into(), Value::Object(add));
        }
        if !remove.is_empty() {
            headers.insert("remove".into(), Value::Array(remove));
        }
    }

    fn rate_limiting(&mut self, c: &Value, path: &str) -> Option<(String, Value)> {
        let windows = [
            ("second", 1u64),
            ("minute", 60),
            ("hour", 3_600),
            ("day", 86_400),
            ("month", 2_592_000),
            ("year", 31_536_000),
        ];
        let given: Vec<(&str, u64, u64)> = windows
            .iter()
            .filter_map(|(k, secs)| number(c, k).map(|n| (*k, *secs, n as u64)))
            .collect();
        let Some(&(first, secs, count)) = given.first() else {
            self.note(path, "rate-limiting without a limit: left out");
            return None;
        };
        for (k, _, _) in &given[1..] {
            self.note(
                &format!("{path}.{k}"),
                format!("one window per limit-count: only the shortest ({first}) is translated"),
            );
        }
        let mut conf = json!({
            "count": count,
            "time_window": secs,
            "rejected_code": number(c, "error_code").unwrap_or(429.0) as u64,
            "show_limit_quota_header": c.get("hide_client_headers").and_then(Value::as_bool) != Some(true),
            "allow_degradation": c.get("fault_tolerant").and_then(Value::as_bool) != Some(false),
        });
        if let Some(m) = text(c, "error_message") {
            conf["rejected_msg"] = json!(m);
        }
        let (key_type, key) = match text(c, "limit_by").unwrap_or("consumer") {
            "ip" => ("var", "remote_addr".to_owned()),
            "consumer" | "credential" => ("var", "consumer_name".to_owned()),
            "header" => (
                "var",
                format!(
                    "http_{}",
                    text(c, "header_name")
                        .unwrap_or("")
                        .to_ascii_lowercase()
                        .replace('-', "_")
                ),
            ),
            "path" => ("var", "uri".to_owned()),
            "service" => {
                self.note(
                    &format!("{path}.limit_by"),
                    "service: counted per route here (one counter per route)",
                );
                ("constant", "service".to_owned())
            }
            other => {
                self.note(
                    &format!("{path}.limit_by"),
                    format!("{other:?}: the client's address instead"),
                );
                ("var", "remote_addr".to_owned())
            }
        };
        conf["key_type"] = json!(key_type);
        conf["key"] = json!(key);
        match text(c, "policy").unwrap_or("local") {
            "local" => conf["policy"] = json!("local"),
            "redis" => {
                // decK 3.x nests the Redis settings; older files have redis_* fields.
                let redis = c.get("redis").cloned().unwrap_or(json!({}));
                let field = |k: &str| {
                    redis
                        .get(k)
                        .cloned()
                        .or_else(|| c.get(format!("redis_{k}")).cloned())
                };
                conf["policy"] = json!("redis");
                conf["redis_host"] = field("host").unwrap_or(json!("127.0.0.1"));
                if let Some(p) = field("port") {
                    conf["redis_port"] = p;
                }
                if let Some(p) = field("password").filter(|p| !p.is_null()) {
                    conf["redis_password"] = p;
                }
                if let Some(d) = field("database") {
                    conf["redis_database"] = d;
                }
                if let Some(t) = field("timeout") {
                    conf["redis_timeout"] = t;
                }
                if field("ssl").and_then(|v| v.as_bool()) == Some(true) {
                    conf["redis_ssl"] = json!(true);
                }
            }
            other => {
                self.note(
                    &format!("{path}.policy"),
                    format!("{other:?}: counted in each node (local); policy redis shares a count between nodes"),
                );
                conf["policy"] = json!("local");
            }
        }
        Some(("limit-count".into(), conf))
    }
}
