//! `sluice import gateway-api DIR`: Kubernetes Gateway API resources (Gateway, HTTPRoute,
//! GRPCRoute, TLSRoute, ReferenceGrant, Namespace, and the Secrets of HTTPS listeners) as
//! Sluice's configuration for one Gateway: HTTPS listeners as TLS listens with their Secrets'
//! certificates as ssls, TLSRoutes on Passthrough listeners as stream routes chosen by the TLS
//! server name. The part of a controller that needs no cluster (docs/kubernetes.md has the
//! rest of the design).
//!
//! Services are not resolved here (a controller watches their EndpointSlices): a map from
//! `namespace/name:port` to the addresses that serve it is given (`--backends`).
//!
//! The translation follows the Gateway API specification (v1): which routes a listener
//! accepts (`allowedRoutes`, `sectionName`, `port`, hostnames that intersect), how matches
//! combine (the matches of a rule are ORed, the conditions of a match ANDed), which match
//! wins (an exact path, then the longest prefix, then a method, then the most header
//! matches, then the most query matches, then the oldest route, then rule order), the core
//! filters, and the answers for what cannot be served (500 for a rule whose backends are all
//! invalid or absent). The gateway's own logic, written by hand.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// The translated configuration and what could not be translated.
#[derive(Debug)]
pub struct Translation {
    pub config: Value,
    /// One line per thing left out, each naming its resource.
    pub notes: Vec<String>,
}

const GROUP: &str = "gateway.networking.k8s.io";

fn s<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn arr<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn ns_of(v: &Value) -> String {
    s(&v["metadata"], "namespace")
        .unwrap_or("default")
        .to_owned()
}

fn name_of(v: &Value) -> String {
    s(&v["metadata"], "name").unwrap_or("").to_owned()
}

/// A label map (`metadata.labels`, `matchLabels`): its string values.
fn labels(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// A listener of the Gateway.
struct Listener {
    name: String,
    port: u16,
    protocol: String,
    hostname: Option<String>,
    /// `Same`, `All`, or `Selector` with its labels.
    from: String,
    selector: BTreeMap<String, String>,
    kinds: Vec<String>,
}

/// Reads every YAML document of `docs` and translates the resources for the Gateway
/// `gateway` (`namespace/name`; None: the only one). `backends`: `namespace/name:port` to
/// `host:port` addresses.
pub fn translate(
    docs: &[Value],
    gateway: Option<&str>,
    backends: &BTreeMap<String, Vec<String>>,
) -> Result<Translation, String> {
    let of_kind = |kind: &str| -> Vec<&Value> {
        docs.iter().filter(|d| s(d, "kind") == Some(kind)).collect()
    };
    let gateways = of_kind("Gateway");
    let gw = match gateway {
        Some(want) => gateways
            .iter()
            .find(|g| format!("{}/{}", ns_of(g), name_of(g)) == want)
            .ok_or_else(|| format!("no Gateway {want} among the resources"))?,
        None => match gateways.as_slice() {
            [one] => one,
            [] => return Err("no Gateway among the resources".into()),
            _ => {
                return Err(format!(
                    "{} Gateways: name the one to translate with --gateway NAMESPACE/NAME",
                    gateways.len()
                ));
            }
        },
    };
    let mut t = Translator {
        gw_ns: ns_of(gw),
        gw_name: name_of(gw),
        listeners: Vec::new(),
        namespaces: of_kind("Namespace")
            .iter()
            .map(|n| (name_of(n), labels(&n["metadata"]["labels"])))
            .collect(),
        grants: of_kind("ReferenceGrant").into_iter().cloned().collect(),
        backends,
        routes: Vec::new(),
        stream_routes: Vec::new(),
        ssls: Vec::new(),
        ssl_secrets: Vec::new(),
        notes: Vec::new(),
    };
    let secrets = of_kind("Secret");
    let gpath = format!("Gateway {}/{}", t.gw_ns, t.gw_name);
    for (i, l) in arr(&gw["spec"], "listeners").iter().enumerate() {
        let protocol = s(l, "protocol").unwrap_or("HTTP").to_owned();
        let name = s(l, "name").map_or_else(|| format!("listeners[{i}]"), str::to_owned);
        let passthrough = protocol == "TLS" && s(&l["tls"], "mode") == Some("Passthrough");
        if protocol != "HTTP" && protocol != "HTTPS" && !passthrough {
            t.notes.push(format!(
                "{gpath} listener {name}: protocol {protocol} is not translated (HTTP and HTTPS listeners, and TLS listeners in Passthrough mode)"
            ));
            continue;
        }
        let port = l.get("port").and_then(Value::as_u64).unwrap_or(80) as u16;
        let hostname = s(l, "hostname").map(str::to_owned);
        let lpath = format!("{gpath} listener {name}");
        if protocol == "HTTPS" {
            // Plain HTTP and TLS cannot share a port (the Gateway API calls it a conflict).
            if t.listeners
                .iter()
                .any(|o| o.port == port && o.protocol != "HTTPS")
            {
                t.notes.push(format!(
                    "{lpath}: port {port} is also a plain listener's: not translated"
                ));
                continue;
            }
            // A listener whose certificate cannot be had serves nothing (ResolvedRefs false).
            if let Err(e) = t.certificate(l, hostname.as_deref(), &secrets, &lpath) {
                t.notes.push(format!("{lpath}: {e}: not translated"));
                continue;
            }
        } else if t
            .listeners
            .iter()
            .any(|o| o.port == port && o.protocol == "HTTPS")
        {
            t.notes.push(format!(
                "{lpath}: port {port} is also an HTTPS listener's: not translated"
            ));
            continue;
        }
        let allowed = &l["allowedRoutes"];
        let from = s(&allowed["namespaces"], "from")
            .unwrap_or("Same")
            .to_owned();
        let selector = labels(&allowed["namespaces"]["selector"]["matchLabels"]);
        let kinds: Vec<String> = arr(allowed, "kinds")
            .iter()
            .filter_map(|k| s(k, "kind").map(str::to_owned))
            .collect();
        t.listeners.push(Listener {
            name,
            port,
            protocol,
            hostname,
            from,
            selector,
            kinds,
        });
    }
    // Oldest first, then by namespace/name: the Gateway API's order between routes.
    let mut routes: Vec<&Value> = of_kind("HTTPRoute");
    routes.extend(of_kind("GRPCRoute"));
    routes.sort_by_key(|r| {
        (
            s(&r["metadata"], "creationTimestamp")
                .unwrap_or("")
                .to_owned(),
            ns_of(r),
            name_of(r),
        )
    });
    for r in routes {
        t.route(r);
    }
    let mut tls_routes = of_kind("TLSRoute");
    tls_routes.sort_by_key(|r| (ns_of(r), name_of(r)));
    for r in tls_routes {
        t.tls_route(r);
    }
    for kind in ["TCPRoute", "UDPRoute"] {
        for r in of_kind(kind) {
            t.notes.push(format!(
                "{kind} {}/{}: not translated (stream routes by hand)",
                ns_of(r),
                name_of(r)
            ));
        }
    }
    let mut ports: Vec<(u16, bool)> = t
        .listeners
        .iter()
        .filter(|l| l.is_http())
        .map(|l| (l.port, l.protocol == "HTTPS"))
        .collect();
    ports.sort_unstable();
    ports.dedup();
    // HTTPS offers HTTP/2 by ALPN (a GRPCRoute's calls need it), as other implementations.
    let listen: Vec<Value> = ports
        .iter()
        .map(|&(p, tls)| match tls {
            false => json!(format!("0.0.0.0:{p}")),
            true => json!({"addr": format!("0.0.0.0:{p}"), "tls": true, "http2": true}),
        })
        .collect();
    let mut config = Map::new();
    if listen.is_empty() {
        // Sluice always has an HTTP listener: its default one stays, with no route.
        t.notes.push(format!(
            "{gpath}: no HTTP listener: the configuration keeps Sluice's default listen ({}), which answers 404",
            sluice_config::DEFAULT_LISTEN
        ));
    } else {
        config.insert("listen".into(), Value::Array(listen));
    }
    config.insert("routes".into(), Value::Array(t.routes));
    if !t.stream_routes.is_empty() {
        config.insert("stream_routes".into(), Value::Array(t.stream_routes));
    }
    if !t.ssls.is_empty() {
        for ssl in &mut t.ssls {
            // Only a default certificate has no names.
            if arr(ssl, "snis").is_empty()
                && let Some(m) = ssl.as_object_mut()
            {
                m.remove("snis");
            }
        }
        config.insert("ssls".into(), Value::Array(t.ssls));
    }
    Ok(Translation {
        config: Value::Object(config),
        notes: t.notes,
    })
}

struct Translator<'a> {
    gw_ns: String,
    gw_name: String,
    listeners: Vec<Listener>,
    namespaces: Vec<(String, BTreeMap<String, String>)>,
    grants: Vec<Value>,
    backends: &'a BTreeMap<String, Vec<String>>,
    routes: Vec<Value>,
    /// TLSRoutes: passthrough stream routes chosen by the TLS server name.
    stream_routes: Vec<Value>,
    /// The certificates of HTTPS listeners, one ssl per Secret: the listeners' hostnames as
    /// its names, `default` for one without a hostname.
    ssls: Vec<Value>,
    /// The Secret (`namespace/name`) of each of `ssls`.
    ssl_secrets: Vec<String>,
    notes: Vec<String>,
}

impl Listener {
    /// Whether HTTPRoutes and GRPCRoutes attach to it.
    fn is_http(&self) -> bool {
        self.protocol == "HTTP" || self.protocol == "HTTPS"
    }
}

/// The hostnames a listener and a route both accept. None: any host. Some(empty): none, the
/// route is not attached through that listener.
fn intersect(listener: Option<&str>, route: &[String]) -> Option<Vec<String>> {
    let matches = |wild: &str, host: &str| {
        wild.strip_prefix('*')
            .is_some_and(|suffix| host.ends_with(suffix) && host.len() > suffix.len())
    };
    match (listener, route.is_empty()) {
        (None, true) => None,
        (Some(l), true) => Some(vec![l.to_owned()]),
        (None, false) => Some(route.to_vec()),
        (Some(l), false) => Some(
            route
                .iter()
                .filter_map(|h| {
                    if h == l || matches(l, h) {
                        Some(h.clone())
                    } else if matches(h, l) {
                        Some(l.to_owned())
                    } else {
                        None
                    }
                })
                .collect(),
        ),
    }
}

impl Translator<'_> {
    fn note(&mut self, what: String) {
        self.notes.push(what);
    }

    /// Whether a route of `kind` in `ns` may attach to the listener.
    fn allows(&self, l: &Listener, kind: &str, ns: &str) -> bool {
        if !l.kinds.is_empty() && !l.kinds.iter().any(|k| k == kind) {
            return false;
        }
        // The kinds a listener takes by default: its protocol's.
        let default_kind = match l.protocol.as_str() {
            "TLS" => kind == "TLSRoute",
            _ => kind == "HTTPRoute" || kind == "GRPCRoute",
        };
        if l.kinds.is_empty() && !default_kind {
            return false;
        }
        match l.from.as_str() {
            "All" => true,
            "Selector" => self.namespaces.iter().any(|(n, labels)| {
                n == ns
                    && l.selector
                        .iter()
                        .all(|(k, v)| labels.get(k).is_some_and(|x| x == v))
            }),
            _ => ns == self.gw_ns,
        }
    }

    /// Whether a ReferenceGrant in `to_ns` lets a `from_kind` in `from_ns` refer to the
    /// `to_kind` (of the core group: Service, Secret) `name`.
    fn granted(
        &self,
        from_kind: &str,
        from_ns: &str,
        (to_kind, to_ns, name): (&str, &str, &str),
    ) -> bool {
        self.grants.iter().any(|g| {
            ns_of(g) == to_ns
                && arr(&g["spec"], "from").iter().any(|f| {
                    s(f, "group") == Some(GROUP)
                        && s(f, "kind") == Some(from_kind)
                        && s(f, "namespace") == Some(from_ns)
                })
                && arr(&g["spec"], "to").iter().any(|t| {
                    s(t, "group").unwrap_or("").is_empty()
                        && s(t, "kind") == Some(to_kind)
                        && s(t, "name").is_none_or(|n| n == name)
                })
        })
    }

    /// The listeners (of the protocol the route's kind takes: TLS for TLSRoute, HTTP for the
    /// others) a route in `rns` attaches to through its `parentRefs`, by port, and the hosts
    /// through each (None: any).
    fn attached(&self, r: &Value, kind: &str, rns: &str) -> Vec<(u16, Option<Vec<String>>)> {
        let tls = kind == "TLSRoute";
        let hostnames: Vec<String> = arr(&r["spec"], "hostnames")
            .iter()
            .filter_map(|h| h.as_str().map(str::to_owned))
            .collect();
        let mut attached = Vec::new();
        for p in arr(&r["spec"], "parentRefs") {
            if s(p, "group").unwrap_or(GROUP) != GROUP
                || s(p, "kind").unwrap_or("Gateway") != "Gateway"
                || s(p, "name") != Some(self.gw_name.as_str())
                || s(p, "namespace").unwrap_or(rns) != self.gw_ns
            {
                continue;
            }
            let section = s(p, "sectionName");
            let port = p.get("port").and_then(Value::as_u64).map(|p| p as u16);
            for l in &self.listeners {
                if section.is_some_and(|sn| sn != l.name)
                    || port.is_some_and(|pt| pt != l.port)
                    || (if tls {
                        l.protocol != "TLS"
                    } else {
                        !l.is_http()
                    })
                    || !self.allows(l, kind, rns)
                {
                    continue;
                }
                match intersect(l.hostname.as_deref(), &hostnames) {
                    Some(h) if h.is_empty() => {}
                    hosts => attached.push((l.port, hosts)),
                }
            }
        }
        attached
    }

    fn route(&mut self, r: &Value) {
        let kind = s(r, "kind").unwrap_or("HTTPRoute").to_owned();
        let (rns, rname) = (ns_of(r), name_of(r));
        let rpath = format!("{kind} {rns}/{rname}");
        let attached = self.attached(r, &kind, &rns);
        if attached.is_empty() {
            self.note(format!(
                "{rpath}: not accepted by Gateway {}/{} (no listener allows it, or no hostname in common)",
                self.gw_ns, self.gw_name
            ));
            return;
        }
        // One Sluice route per listener port's hosts, rule and match. When every listener
        // gives the same hosts, the port is not a condition.
        let all_ports = self
            .listeners
            .iter()
            .filter(|l| l.is_http())
            .map(|l| l.port)
            .collect::<std::collections::BTreeSet<_>>();
        let same = attached.windows(2).all(|w| w[0].1 == w[1].1);
        let covers_all = attached
            .iter()
            .map(|a| a.0)
            .collect::<std::collections::BTreeSet<_>>()
            == all_ports;
        let groups: Vec<(Option<u16>, Option<Vec<String>>)> = if same && covers_all {
            vec![(None, attached[0].1.clone())]
        } else {
            // The port is a condition only where the Gateway has more than one.
            let one_port = all_ports.len() == 1;
            attached
                .into_iter()
                .map(|(p, h)| ((!one_port).then_some(p), h))
                .collect()
        };
        for (ri, rule) in arr(&r["spec"], "rules").iter().enumerate() {
            let rule_path = format!("{rpath} rules[{ri}]");
            let Some(RuleActions {
                plugins,
                upstream,
                prefix_replaced,
            }) = self.rule_actions(rule, &kind, &rns, &rule_path)
            else {
                continue;
            };
            let default_match = [json!({})];
            let matches = match arr(rule, "matches") {
                [] => &default_match[..],
                m => m,
            };
            for (mi, m) in matches.iter().enumerate() {
                let Some((uris, methods, vars, priority)) = (if kind == "GRPCRoute" {
                    self.grpc_match(m, &format!("{rule_path} matches[{mi}]"))
                } else {
                    self.http_match(m, &format!("{rule_path} matches[{mi}]"))
                }) else {
                    continue;
                };
                for (gi, (port, hosts)) in groups.iter().enumerate() {
                    let mut vars = vars.clone();
                    if let Some(p) = port {
                        vars.push(json!(["server_port", "==", p.to_string()]));
                    }
                    // Unique, within APISIX's 64 characters; the name says whose.
                    let id: String = format!("{}.{ri}.{mi}.{gi}.{rname}", self.routes.len())
                        .chars()
                        .take(64)
                        .collect();
                    let mut out = json!({
                        "id": id,
                        "name": format!("{rns}/{rname}"),
                        "uris": uris,
                        "priority": priority,
                    });
                    if let Some(h) = hosts {
                        out["hosts"] = json!(h);
                    }
                    if !methods.is_empty() {
                        out["methods"] = json!(methods);
                    }
                    if !vars.is_empty() {
                        out["vars"] = Value::Array(vars);
                    }
                    let mut plugins = plugins.clone();
                    // A prefix rewrite (proxy-rewrite's or redirect's) needs the match's
                    // prefix.
                    let prefix = m["path"]["value"]
                        .as_str()
                        .unwrap_or("/")
                        .trim_end_matches('/');
                    for (name, rep) in &prefix_replaced {
                        plugins.entry(*name).or_insert_with(|| json!({}))["regex_uri"] =
                            super::prefix_rewrite(prefix, rep);
                    }
                    if !plugins.is_empty() {
                        out["plugins"] = Value::Object(plugins);
                    }
                    if let Some(u) = &upstream {
                        out["upstream"] = u.clone();
                    }
                    self.routes.push(out);
                }
            }
        }
    }

    /// A match of an HTTPRoute: uris, methods, vars and the priority that ranks it.
    #[allow(clippy::type_complexity)]
    fn http_match(
        &mut self,
        m: &Value,
        path: &str,
    ) -> Option<(Vec<String>, Vec<String>, Vec<Value>, i64)> {
        let mut vars = Vec::new();
        let p = &m["path"];
        let kind = s(p, "type").unwrap_or("PathPrefix");
        let value = s(p, "value").unwrap_or("/");
        // exact 2, prefix 1, regex 0; then the prefix's length.
        let (uris, rank, len) = match kind {
            "Exact" => (vec![value.to_owned()], 2, value.len()),
            "PathPrefix" => {
                let v = value.trim_end_matches('/');
                if v.is_empty() {
                    (vec!["/*".to_owned()], 1, 1)
                } else {
                    (vec![v.to_owned(), format!("{v}/*")], 1, v.len())
                }
            }
            "RegularExpression" => {
                vars.push(json!(["uri", "~~", format!("^(?:{value})$")]));
                (vec!["/*".to_owned()], 0, 0)
            }
            other => {
                self.note(format!("{path}: path type {other} is not known: left out"));
                return None;
            }
        };
        let mut headers = 0;
        for h in arr(m, "headers") {
            let (Some(name), Some(v)) = (s(h, "name"), s(h, "value")) else {
                continue;
            };
            let var = format!("http_{}", name.to_ascii_lowercase().replace('-', "_"));
            match s(h, "type").unwrap_or("Exact") {
                "RegularExpression" => vars.push(json!([var, "~~", format!("^(?:{v})$")])),
                _ => vars.push(json!([var, "==", v])),
            }
            headers += 1;
        }
        let mut queries = 0;
        for q in arr(m, "queryParams") {
            let (Some(name), Some(v)) = (s(q, "name"), s(q, "value")) else {
                continue;
            };
            let var = format!("arg_{name}");
            match s(q, "type").unwrap_or("Exact") {
                "RegularExpression" => vars.push(json!([var, "~~", format!("^(?:{v})$")])),
                _ => vars.push(json!([var, "==", v])),
            }
            queries += 1;
        }
        let methods: Vec<String> = s(m, "method")
            .map(|x| vec![x.to_owned()])
            .unwrap_or_default();
        // The Gateway API's precedence, as one number: Sluice's highest priority wins.
        let priority = rank * 100_000_000
            + (len.min(9_999) as i64) * 10_000
            + if methods.is_empty() { 0 } else { 1_000 }
            + (headers.min(99) as i64) * 10
            + queries.min(9) as i64;
        Some((uris, methods, vars, priority))
    }

    /// A match of a GRPCRoute: `/service/method`, its headers.
    #[allow(clippy::type_complexity)]
    fn grpc_match(
        &mut self,
        m: &Value,
        path: &str,
    ) -> Option<(Vec<String>, Vec<String>, Vec<Value>, i64)> {
        let method = &m["method"];
        if s(method, "type").unwrap_or("Exact") != "Exact" {
            self.note(format!(
                "{path}: a RegularExpression gRPC method is not translated"
            ));
            return None;
        }
        let (uri, rank) = match (s(method, "service"), s(method, "method")) {
            (Some(sv), Some(me)) => (format!("/{sv}/{me}"), 3),
            (Some(sv), None) => (format!("/{sv}/*"), 2),
            (None, Some(me)) => {
                let mut vars = vec![json!([
                    "uri",
                    "~~",
                    format!("^/[^/]+/{}$", regex::escape(me))
                ])];
                vars.extend(self.header_vars(m));
                return Some((vec!["/*".into()], vec!["POST".into()], vars, 100_000_000));
            }
            (None, None) => ("/*".to_owned(), 0),
        };
        let vars = self.header_vars(m);
        let priority = rank * 100_000_000 + (vars.len().min(99) as i64) * 10;
        Some((vec![uri], vec!["POST".into()], vars, priority))
    }

    fn header_vars(&self, m: &Value) -> Vec<Value> {
        arr(m, "headers")
            .iter()
            .filter_map(|h| {
                let var = format!(
                    "http_{}",
                    s(h, "name")?.to_ascii_lowercase().replace('-', "_")
                );
                let v = s(h, "value")?;
                Some(match s(h, "type").unwrap_or("Exact") {
                    "RegularExpression" => json!([var, "~~", format!("^(?:{v})$")]),
                    _ => json!([var, "==", v]),
                })
            })
            .collect()
    }

    /// What a rule does (see `RuleActions`). None: the rule is left out.
    fn rule_actions(
        &mut self,
        rule: &Value,
        kind: &str,
        rns: &str,
        path: &str,
    ) -> Option<RuleActions> {
        let mut plugins = Map::new();
        let mut prefix_replaced = Vec::new();
        let mut redirect = false;
        for (fi, f) in arr(rule, "filters").iter().enumerate() {
            let fpath = format!("{path} filters[{fi}]");
            match s(f, "type").unwrap_or("") {
                "RequestHeaderModifier" => {
                    let h = header_ops(&f["requestHeaderModifier"]);
                    plugins.entry("proxy-rewrite").or_insert_with(|| json!({}))["headers"] = h;
                }
                "ResponseHeaderModifier" => {
                    let h = header_ops(&f["responseHeaderModifier"]);
                    plugins.insert("response-rewrite".into(), json!({"headers": h}));
                }
                "URLRewrite" => {
                    let u = &f["urlRewrite"];
                    let pr = plugins.entry("proxy-rewrite").or_insert_with(|| json!({}));
                    if let Some(h) = s(u, "hostname") {
                        pr["host"] = json!(h);
                    }
                    match s(&u["path"], "type") {
                        Some("ReplaceFullPath") => {
                            pr["uri"] = json!(s(&u["path"], "replaceFullPath").unwrap_or("/"));
                        }
                        Some("ReplacePrefixMatch") => {
                            let rep = s(&u["path"], "replacePrefixMatch").unwrap_or("/");
                            prefix_replaced.push(("proxy-rewrite", rep.to_owned()));
                        }
                        _ => {}
                    }
                }
                "RequestRedirect" => {
                    redirect = true;
                    let rd = &f["requestRedirect"];
                    let code = rd.get("statusCode").and_then(Value::as_u64).unwrap_or(302);
                    let scheme = s(rd, "scheme");
                    let port = rd.get("port").and_then(Value::as_u64);
                    let host = s(rd, "hostname").map_or_else(|| "$host".to_owned(), str::to_owned);
                    // The port: the one given; else the scheme's well-known one when the
                    // scheme changes; else the listener's. 80 with http and 443 with https
                    // are not written.
                    let well_known = |p: u64| {
                        (scheme == Some("http") && p == 80) || (scheme == Some("https") && p == 443)
                    };
                    let port_part = match (port, scheme) {
                        (Some(p), _) if well_known(p) => String::new(),
                        (Some(p), _) => format!(":{p}"),
                        (None, Some(_)) => String::new(),
                        (None, None) if self.listeners.iter().all(|l| l.port == 80) => {
                            String::new()
                        }
                        (None, None) => ":$server_port".to_owned(),
                    };
                    let scheme = scheme.map_or_else(|| "$scheme".to_owned(), str::to_owned);
                    let mut conf = json!({"ret_code": code});
                    match s(&rd["path"], "type") {
                        Some("ReplaceFullPath") => {
                            let p = s(&rd["path"], "replaceFullPath").unwrap_or("/");
                            conf["uri"] = json!(format!("{scheme}://{host}{port_part}{p}"));
                        }
                        Some("ReplacePrefixMatch") => {
                            let rep = s(&rd["path"], "replacePrefixMatch").unwrap_or("/");
                            // regex_uri's replacement takes no variables: with a new scheme,
                            // host or port, the whole origin must be known here.
                            let origin = if s(rd, "hostname").is_none()
                                && s(rd, "scheme").is_none()
                                && port.is_none()
                            {
                                String::new()
                            } else {
                                // The scheme of the HTTP listeners, when they share one.
                                let mut http = self.listeners.iter().filter(|l| l.is_http());
                                let listener_scheme = http.next().and_then(|first| {
                                    http.all(|l| l.protocol == first.protocol).then_some(
                                        if first.protocol == "HTTPS" {
                                            "https"
                                        } else {
                                            "http"
                                        },
                                    )
                                });
                                match (s(rd, "scheme").or(listener_scheme), s(rd, "hostname")) {
                                    (Some(sch), Some(h)) if !port_part.contains('$') => {
                                        format!("{sch}://{h}{port_part}")
                                    }
                                    _ => {
                                        self.note(format!("{fpath}: a prefix redirect that changes the scheme, host or port is translated only when the whole origin is known (a hostname; a scheme and port given, or the same on every listener): not translated"));
                                        return None;
                                    }
                                }
                            };
                            prefix_replaced.push(("redirect", format!("{origin}{rep}")));
                        }
                        _ => {
                            conf["uri"] =
                                json!(format!("{scheme}://{host}{port_part}$request_uri"));
                        }
                    }
                    plugins.insert("redirect".into(), conf);
                }
                "RequestMirror" => {
                    let b = &f["requestMirror"]["backendRef"];
                    match self
                        .backend(b, kind, rns, &fpath)
                        .and_then(|a| a.into_iter().next())
                    {
                        Some(addr) => {
                            plugins.insert(
                                "proxy-mirror".into(),
                                json!({"host": format!("http://{addr}")}),
                            );
                        }
                        None => self.note(format!(
                            "{fpath}: the mirror's backend is not resolved: left out"
                        )),
                    }
                }
                other => self.note(format!("{fpath}: filter {other} is not translated")),
            }
        }
        let mut actions = RuleActions {
            plugins,
            upstream: None,
            prefix_replaced,
        };
        if redirect {
            return Some(actions);
        }
        let mut nodes = Map::new();
        let mut total = 0u64;
        let mut invalid = 0u64;
        for (bi, b) in arr(rule, "backendRefs").iter().enumerate() {
            let weight = b.get("weight").and_then(Value::as_u64).unwrap_or(1);
            total += weight;
            match self.backend(b, kind, rns, &format!("{path} backendRefs[{bi}]")) {
                Some(addrs) if weight > 0 => {
                    for a in addrs {
                        let w = nodes.get(&a).and_then(Value::as_u64).unwrap_or(0) + weight;
                        nodes.insert(a, json!(w));
                    }
                }
                Some(_) => {}
                None => invalid += weight,
            }
            if !arr(b, "filters").is_empty() {
                self.note(format!(
                    "{path} backendRefs[{bi}]: filters on a backend are not translated"
                ));
            }
        }
        if nodes.is_empty() {
            // No backend to send to (none given, all invalid or weighted 0): 500, as the
            // Gateway API asks.
            actions.plugins.insert(
                "fault-injection".into(),
                json!({"abort": {"http_status": 500, "body": "no valid backend for this route\n"}}),
            );
            return Some(actions);
        }
        if invalid > 0 {
            // The share of the weight that names invalid backends gets 500s, as the Gateway
            // API asks; the rest is balanced over the valid ones.
            let percentage = invalid as f64 * 100.0 / total as f64;
            self.note(format!(
                "{path}: {invalid} of {total} weight go to backends that are not valid: {percentage:.1}% of the requests get 500"
            ));
            actions.plugins.insert(
                "fault-injection".into(),
                json!({"abort": {"http_status": 500, "percentage": percentage, "body": "no valid backend for this request\n"}}),
            );
        }
        let scheme = if kind == "GRPCRoute" { "grpc" } else { "http" };
        actions.upstream = Some(
            json!({"type": "roundrobin", "scheme": scheme, "pass_host": "pass", "nodes": nodes}),
        );
        Some(actions)
    }

    /// A TLSRoute: for each TLS listener (Passthrough) it attaches to and each hostname both
    /// accept, a stream route on the listener's port that takes connections by their TLS
    /// server name (SNI) to the route's backends, without terminating TLS. A route whose
    /// backends are all invalid is left out (its connections are closed: a TCP connection has
    /// no 500).
    fn tls_route(&mut self, r: &Value) {
        let (rns, rname) = (ns_of(r), name_of(r));
        let rpath = format!("TLSRoute {rns}/{rname}");
        let attached = self.attached(r, "TLSRoute", &rns);
        if attached.is_empty() {
            self.note(format!(
                "{rpath}: not accepted by Gateway {}/{} (no TLS listener in Passthrough mode allows it, or no hostname in common)",
                self.gw_ns, self.gw_name
            ));
            return;
        }
        let rules = arr(&r["spec"], "rules");
        if rules.len() > 1 {
            self.note(format!(
                "{rpath}: only its first rule is translated (a TLSRoute is matched by its hostnames alone)"
            ));
        }
        let mut nodes = Map::new();
        for (bi, b) in rules
            .first()
            .map_or(&[][..], |r| arr(r, "backendRefs"))
            .iter()
            .enumerate()
        {
            let weight = b.get("weight").and_then(Value::as_u64).unwrap_or(1);
            let bpath = format!("{rpath} rules[0] backendRefs[{bi}]");
            if let Some(addrs) = self.backend(b, "TLSRoute", &rns, &bpath)
                && weight > 0
            {
                for a in addrs {
                    let w = nodes.get(&a).and_then(Value::as_u64).unwrap_or(0) + weight;
                    nodes.insert(a, json!(w));
                }
            }
        }
        if nodes.is_empty() {
            self.note(format!(
                "{rpath}: no valid backend: left out (its connections are closed)"
            ));
            return;
        }
        for (port, hosts) in attached {
            let names: Vec<Option<String>> = match hosts {
                Some(h) => h.into_iter().map(Some).collect(),
                None => vec![None],
            };
            for sni in names {
                let id: String = format!("{}.{rname}", self.stream_routes.len())
                    .chars()
                    .take(64)
                    .collect();
                let mut out = json!({
                    "id": id,
                    "desc": format!("{rns}/{rname}"),
                    "listen": format!("0.0.0.0:{port}"),
                    "upstream": {"type": "roundrobin", "nodes": nodes.clone()},
                });
                if let Some(h) = sni {
                    out["sni"] = json!(h);
                }
                self.stream_routes.push(out);
            }
        }
    }

    /// The certificate of an HTTPS listener (its first `certificateRefs`: a Secret of type
    /// `kubernetes.io/tls` among the resources, checked as Sluice checks an ssl) served for
    /// the listener's hostname, or as the default certificate when it has none. One ssl per
    /// Secret, whichever listeners share it. Err: why the listener cannot serve.
    fn certificate(
        &mut self,
        l: &Value,
        hostname: Option<&str>,
        secrets: &[&Value],
        lpath: &str,
    ) -> Result<(), String> {
        use base64::Engine as _;
        if s(&l["tls"], "mode").unwrap_or("Terminate") != "Terminate" {
            return Err(
                "an HTTPS listener terminates TLS (Passthrough is a TLS listener's mode)".into(),
            );
        }
        let refs = arr(&l["tls"], "certificateRefs");
        let Some(r) = refs.first() else {
            return Err("no tls.certificateRefs".into());
        };
        if refs.len() > 1 {
            self.note(format!(
                "{lpath}: only its first certificateRef is served (one certificate per name)"
            ));
        }
        let (group, kind) = (
            s(r, "group").unwrap_or(""),
            s(r, "kind").unwrap_or("Secret"),
        );
        if !group.is_empty() || kind != "Secret" {
            return Err(format!(
                "a certificate of kind {group}/{kind} is not supported (a core Secret is)"
            ));
        }
        let name = s(r, "name").unwrap_or("");
        let ns = s(r, "namespace").unwrap_or(&self.gw_ns).to_owned();
        if ns != self.gw_ns && !self.granted("Gateway", &self.gw_ns, ("Secret", &ns, name)) {
            return Err(format!(
                "Secret {ns}/{name} is in another namespace and no ReferenceGrant allows it"
            ));
        }
        let secret = secrets
            .iter()
            .find(|x| ns_of(x) == ns && name_of(x) == name)
            .ok_or_else(|| format!("no Secret {ns}/{name} among the resources"))?;
        let field = |k: &str| -> Result<String, String> {
            let text = match (s(&secret["stringData"], k), s(&secret["data"], k)) {
                (Some(t), _) => t.to_owned(),
                (None, Some(b64)) => {
                    let b64: String = b64.split_whitespace().collect();
                    base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .ok()
                        .and_then(|b| String::from_utf8(b).ok())
                        .ok_or_else(|| format!("Secret {ns}/{name}: {k} is not base64 of text"))?
                }
                (None, None) => return Err(format!("Secret {ns}/{name} has no {k}")),
            };
            // Inline PEM only: a Secret's text is never taken for a file to read.
            if !text.trim_start().starts_with("-----BEGIN ") {
                return Err(format!("Secret {ns}/{name}: {k} is not PEM"));
            }
            Ok(text)
        };
        let (cert, key) = (field("tls.crt")?, field("tls.key")?);
        let key_of = format!("{ns}/{name}");
        let at = match self.ssl_secrets.iter().position(|k| *k == key_of) {
            Some(i) => i,
            None => {
                // Checked as the configuration will be: the certificate parses, the key goes
                // with it.
                let check =
                    json!({"ssls": [{"id": "check", "default": true, "cert": cert, "key": key}]});
                let plugins = sluice_plugins::builtin();
                let state = sluice_core::state::StateRegistry::default();
                sluice_config::load_value_with(check, &plugins)
                    .and_then(|cfg| sluice_proxy::compile(&cfg, &plugins, &state).map(|_| ()))
                    .map_err(|errors| {
                        let why: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
                        format!("Secret {ns}/{name}: {}", why.join("; "))
                    })?;
                let id: String = format!("{}.{name}", self.ssls.len())
                    .chars()
                    .take(64)
                    .collect();
                self.ssls
                    .push(json!({"id": id, "snis": [], "cert": cert, "key": key}));
                self.ssl_secrets.push(key_of.clone());
                self.ssls.len() - 1
            }
        };
        match hostname {
            Some(h) => {
                if let Some(other) = self
                    .ssls
                    .iter()
                    .position(|x| arr(x, "snis").iter().any(|n| n == h))
                    .filter(|&o| o != at)
                {
                    self.note(format!(
                        "{lpath}: {h} is served with Secret {} (an earlier listener's), not {key_of}",
                        self.ssl_secrets[other]
                    ));
                } else if let Some(snis) = self.ssls[at]["snis"].as_array_mut()
                    && !snis.iter().any(|n| n == h)
                {
                    snis.push(json!(h));
                }
            }
            None => match self.ssls.iter().position(|x| x["default"] == true) {
                Some(other) if other != at => self.note(format!(
                    "{lpath}: names no listener has are served with Secret {} (an earlier listener's), not {key_of}",
                    self.ssl_secrets[other]
                )),
                _ => self.ssls[at]["default"] = json!(true),
            },
        }
        Ok(())
    }

    /// A backendRef's addresses. None: invalid (not a Service, not allowed across
    /// namespaces, not known), noted.
    fn backend(&mut self, b: &Value, kind: &str, rns: &str, path: &str) -> Option<Vec<String>> {
        let group = s(b, "group").unwrap_or("");
        let bkind = s(b, "kind").unwrap_or("Service");
        if !group.is_empty() || bkind != "Service" {
            self.note(format!(
                "{path}: a backend of kind {group}/{bkind} is not supported: 500"
            ));
            return None;
        }
        let name = s(b, "name")?;
        let ns = s(b, "namespace").unwrap_or(rns);
        if ns != rns && !self.granted(kind, rns, ("Service", ns, name)) {
            self.note(format!("{path}: Service {ns}/{name} is in another namespace and no ReferenceGrant allows it: 500"));
            return None;
        }
        let port = b.get("port").and_then(Value::as_u64).unwrap_or(0);
        let key = format!("{ns}/{name}:{port}");
        match self.backends.get(&key) {
            Some(addrs) if !addrs.is_empty() => Some(addrs.clone()),
            _ => {
                self.note(format!(
                    "{path}: Service {key} has no address in the backends map: 500"
                ));
                None
            }
        }
    }
}

/// What a rule does, whichever of its matches selects it.
struct RuleActions {
    /// Its filters as plugins.
    plugins: Map<String, Value>,
    /// Its backends; None when a plugin answers (a redirect, a 500).
    upstream: Option<Value>,
    /// The plugins (proxy-rewrite, redirect) that replace the matched path prefix, and with
    /// what: each match gives its own prefix.
    prefix_replaced: Vec<(&'static str, String)>,
}

/// HTTPHeaderFilter as proxy-rewrite's or response-rewrite's `headers`.
fn header_ops(f: &Value) -> Value {
    let pairs = |k: &str| -> Map<String, Value> {
        arr(f, k)
            .iter()
            .filter_map(|h| Some((s(h, "name")?.to_owned(), json!(s(h, "value")?))))
            .collect()
    };
    let mut out = Map::new();
    let set = pairs("set");
    if !set.is_empty() {
        out.insert("set".into(), Value::Object(set));
    }
    let add = pairs("add");
    if !add.is_empty() {
        out.insert("add".into(), Value::Object(add));
    }
    let remove: Vec<Value> = arr(f, "remove").to_vec();
    if !remove.is_empty() {
        out.insert("remove".into(), Value::Array(remove));
    }
    Value::Object(out)
}

/// Every document of the YAML files (`.yaml`, `.yml`) in `dir`, in file-name order; empty
/// documents skipped. Err: a file that cannot be read or parsed, named.
pub fn read_dir(dir: &std::path::Path) -> Result<Vec<Value>, String> {
    use serde::Deserialize as _;
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        for (i, d) in yaml_serde::Deserializer::from_str(&text).enumerate() {
            let v = Value::deserialize(d)
                .map_err(|e| format!("{} (document {}): {e}", f.display(), i + 1))?;
            if !v.is_null() {
                docs.push(v);
            }
        }
    }
    Ok(docs)
}

/// The backends map's file: `namespace/name:port` to an address, or a list of them.
pub fn read_backends(path: &std::path::Path) -> Result<BTreeMap<String, Vec<String>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value = yaml_serde::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let Value::Object(m) = v else {
        return Err(format!(
            "{}: a mapping of namespace/name:port to addresses is expected",
            path.display()
        ));
    };
    m.into_iter()
        .map(|(k, v)| {
            let addrs = match v {
                Value::String(a) => vec![a],
                Value::Array(a) => a
                    .into_iter()
                    .map(|x| {
                        x.as_str().map(str::to_owned).ok_or_else(|| {
                            format!("{}: {k}: addresses are strings", path.display())
                        })
                    })
                    .collect::<Result<_, _>>()?,
                _ => {
                    return Err(format!(
                        "{}: {k}: an address or a list of them",
                        path.display()
                    ));
                }
            };
            Ok((k, addrs))
        })
        .collect()
}
