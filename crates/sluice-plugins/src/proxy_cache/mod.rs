//! `proxy-cache`: caches the node's answers, as APISIX's `proxy-cache` (priority 1085):
//! `{cache_strategy: disk|memory, cache_zone, cache_key: ["$host", "$request_uri"],
//! cache_bypass, cache_method: [GET, HEAD], cache_http_status: [200, 301, 404],
//! hide_cache_headers, cache_control, no_cache, cache_ttl: 300, consumer_isolation: true,
//! cache_set_cookie, max_resp_body_size: 64 MiB}`, and its `Apisix-Cache-Status` field
//! (`MISS`, `HIT`, `EXPIRED`, `BYPASS`, `STALE`). `PURGE` on a cached path removes it.
//!
//! What it adds to APISIX's:
//! - The key always holds the scheme and host the request came with (Pingora's
//!   CVE-2026-2836 came from a key without them), each part length-prefixed so that no two
//!   requests make one key, and POST answers apart from GET's.
//! - Concurrent misses of one key make one fetch: the others wait for it (up to 5 s, APISIX's
//!   `proxy_cache_lock_timeout`) and are served what it stored.
//! - A hit is the gateway's own answer: a request body not read yet is drained or the
//!   connection is closed after it (the engine's rule for every own answer), never left to
//!   be read as the next request (Pingora's CVE-2025-4366).
//! - A HEAD request is answered from a GET's entry but never fills one (its answer has no
//!   body).
//!
//! The strategies keep APISIX's differences: `disk` (NGINX's `proxy_cache` in APISIX) takes
//! its lifetime from the answer's `Cache-Control`/`Expires`, else the node-wide
//! `plugin_attr.proxy-cache.cache_ttl` (10 s), never stores `Set-Cookie`, and calls a method
//! it does not cache `BYPASS`; `memory` takes `cache_ttl` unless `cache_control`, which also
//! reads the request's `Cache-Control` (`no-cache`, `no-store`, `max-age`, `min-fresh`,
//! `only-if-cached`). Both refuse answers marked `private`, `no-store`, `no-cache` or
//! `Vary: *`, and keep one variant per value of the headers a `Vary` names.

mod fresh;
mod zone;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{
    BuildCx, Flow, LocalFuture, Phases, PluginFactory, ResponseView, parse_config,
};
use sluice_core::vars::Var;
use sluice_core::{Ctx, Plugin, Response};
use sluice_router::Method;

use crate::util::{Num, whole_field};
use fresh::Directives;
use zone::{Entry, Found, Join, Lead, Zone};

const NAME: &str = "proxy-cache";

/// How long a miss waits for another request's fetch of the same key.
const LOCK_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    cache_strategy: Option<String>,
    #[serde(default)]
    cache_zone: Option<String>,
    #[serde(default)]
    cache_key: Option<Vec<String>>,
    #[serde(default)]
    cache_bypass: Option<Vec<String>>,
    #[serde(default)]
    cache_method: Option<Vec<String>>,
    #[serde(default)]
    cache_http_status: Option<Vec<Num>>,
    #[serde(default)]
    hide_cache_headers: Option<bool>,
    #[serde(default)]
    cache_control: Option<bool>,
    #[serde(default)]
    no_cache: Option<Vec<String>>,
    #[serde(default)]
    cache_ttl: Option<Num>,
    #[serde(default)]
    consumer_isolation: Option<bool>,
    #[serde(default)]
    cache_set_cookie: Option<bool>,
    #[serde(default)]
    max_resp_body_size: Option<Num>,
}

/// `plugin_attr.proxy-cache`: APISIX's `apisix.proxy_cache`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Attr {
    #[serde(default)]
    cache_ttl: Option<sluice_config::Dur>,
    #[serde(default)]
    zones: Option<Vec<ZoneAttr>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ZoneAttr {
    name: String,
    memory_size: sluice_config::Size,
    #[serde(default)]
    disk_size: Option<sluice_config::Size>,
    #[serde(default)]
    disk_path: Option<String>,
    #[serde(default)]
    cache_levels: Option<String>,
}

/// The zones and disk lifetime every node has unless `plugin_attr` says otherwise
/// (APISIX's defaults).
fn default_zones() -> Vec<zone::Spec> {
    vec![
        zone::Spec {
            name: "disk_cache_one".into(),
            memory_size: 50 << 20,
            disk: Some(zone::DiskSpec {
                path: "/tmp/disk_cache_one".into(),
                size: 1 << 30,
                levels: vec![1, 2],
            }),
        },
        zone::Spec {
            name: "memory_cache".into(),
            memory_size: 50 << 20,
            disk: None,
        },
    ]
}

const DEFAULT_DISK_TTL: u64 = 10;

/// Reads `plugin_attr.proxy-cache`; errors at its fields.
fn read_attr(value: Option<&Value>, v: &mut Validator) -> Option<(Vec<zone::Spec>, u64)> {
    let Some(value) = value else {
        return Some((default_zones(), DEFAULT_DISK_TTL));
    };
    let a: Attr = parse_config(value, v)?;
    let ttl = match a.cache_ttl {
        None => DEFAULT_DISK_TTL,
        Some(d) if d.0.as_secs() == 0 => {
            v.error_at("cache_ttl", "must be at least 1s");
            return None;
        }
        Some(d) => d.0.as_secs(),
    };
    let Some(zones) = a.zones else {
        return Some((default_zones(), ttl));
    };
    if zones.is_empty() {
        v.error_at("zones", "must list at least one zone");
        return None;
    }
    let mut specs = Vec::new();
    let mut ok = true;
    v.field("zones", |v| {
        for (i, z) in zones.iter().enumerate() {
            v.index(i, |v| {
                if z.name.is_empty() || z.name.len() > 100 {
                    v.error_at("name", "must be 1 to 100 characters");
                    ok = false;
                }
                if zones[..i].iter().any(|o| o.name == z.name) {
                    v.error_at("name", format!("zone \"{}\" is defined twice", z.name));
                    ok = false;
                }
                if z.memory_size.0 < 1024 {
                    v.error_at("memory_size", "must be at least 1k");
                    ok = false;
                }
                let disk = match (&z.disk_path, &z.disk_size, &z.cache_levels) {
                    (None, None, None) => None,
                    (Some(path), Some(size), levels) => {
                        let levels = parse_levels(levels.as_deref().unwrap_or("1:2"));
                        if levels.is_none() {
                            v.error_at("cache_levels", "must be one to three levels of 1 or 2 characters, as \"1:2\"");
                            ok = false;
                        }
                        if path.is_empty() {
                            v.error_at("disk_path", "must not be empty");
                            ok = false;
                        }
                        if size.0 < 1024 {
                            v.error_at("disk_size", "must be at least 1k");
                            ok = false;
                        }
                        Some(zone::DiskSpec {
                            path: path.into(),
                            size: size.0,
                            levels: levels.unwrap_or_default(),
                        })
                    }
                    _ => {
                        v.error("a disk zone needs both disk_path and disk_size (a memory zone: neither, nor cache_levels)");
                        ok = false;
                        None
                    }
                };
                specs.push(zone::Spec {
                    name: z.name.clone(),
                    memory_size: z.memory_size.0,
                    disk,
                });
            });
        }
    });
    ok.then_some((specs, ttl))
}

/// NGINX's `levels`: `1`, `1:2`, `2:2:2`.
fn parse_levels(s: &str) -> Option<Vec<usize>> {
    let levels: Option<Vec<usize>> = s
        .split(':')
        .map(|l| match l {
            "1" => Some(1),
            "2" => Some(2),
            _ => None,
        })
        .collect();
    levels.filter(|l| (1..=3).contains(&l.len()))
}

/// A part of a key, a bypass or a no-cache condition: text or a variable.
#[derive(Debug)]
enum Part {
    Text(Vec<u8>),
    Var(Var),
    /// `$remote_user`: the user of a Basic `Authorization`.
    RemoteUser,
}

/// APISIX's item pattern (`^[^$].+$` or `^\$[0-9a-zA-Z_]+$`), the variable known here.
fn parts(items: &[String], v: &mut Validator) -> Option<Vec<Part>> {
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        v.index(i, |v| match item.strip_prefix('$') {
            Some("remote_user") => out.push(Part::RemoteUser),
            Some(name)
                if !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
            {
                match Var::parse(name) {
                    Ok(var) if var.needs_body() => {
                        v.error(format!("${name} reads the request body, which a cache key cannot"));
                        ok = false;
                    }
                    Ok(var) => out.push(Part::Var(var)),
                    Err(e) => {
                        v.error(e);
                        ok = false;
                    }
                }
            }
            Some(_) => {
                v.error("a variable is $ and letters, digits or _");
                ok = false;
            }
            None if item.chars().count() < 2 => {
                v.error("a text part must be at least 2 characters (APISIX's pattern)");
                ok = false;
            }
            None => out.push(Part::Text(item.as_bytes().to_vec())),
        });
    }
    ok.then_some(out)
}

/// The user name of a Basic `Authorization` field (NGINX's `$remote_user`).
fn remote_user(req: &RequestHead) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let v = req.header("authorization")?.trim_ascii();
    let b64 = v.get(6..).filter(|_| v[..6].eq_ignore_ascii_case(b"basic "))?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim_ascii())
        .ok()?;
    let end = raw.iter().position(|&b| b == b':').unwrap_or(raw.len());
    Some(raw[..end].to_vec())
}

fn render(parts: &[Part], req: &RequestHead, cx: &Ctx<'_>, out: &mut Vec<u8>) {
    for p in parts {
        match p {
            Part::Text(t) => out.extend_from_slice(t),
            Part::Var(v) => {
                if let Some(val) = v.value(req, cx) {
                    out.extend_from_slice(&val);
                }
            }
            Part::RemoteUser => {
                if let Some(u) = remote_user(req) {
                    out.extend_from_slice(&u);
                }
            }
        }
    }
}

/// APISIX's rule for `cache_bypass` and `no_cache`: set when the value is neither empty nor
/// `0`.
fn truthy(parts: &[Part], req: &RequestHead, cx: &Ctx<'_>) -> bool {
    let mut out = Vec::new();
    render(parts, req, cx, &mut out);
    !out.is_empty() && out != b"0"
}

fn put(out: &mut Vec<u8>, part: &[u8]) {
    out.extend_from_slice(&(part.len() as u32).to_be_bytes());
    out.extend_from_slice(part);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    Memory,
    Disk,
}

struct ProxyCache {
    strategy: Strategy,
    zone: Arc<Zone>,
    key: Vec<Part>,
    /// Whether to put the consumer (or `$remote_user`) in front of the key.
    isolate: bool,
    bypass: Option<Vec<Part>>,
    no_cache: Option<Vec<Part>>,
    methods: Vec<Method>,
    statuses: Vec<u16>,
    hide_cache_headers: bool,
    cache_control: bool,
    /// Seconds an entry lives: the plugin's `cache_ttl` (memory) or the node's (disk), when the
    /// answer gives no lifetime of its own.
    ttl: u64,
    set_cookie: bool,
    max_body: u64,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!(NAME, 1085, Config);

    fn check_attr(&self, value: &Value, v: &mut Validator) {
        let _ = read_attr(Some(value), v);
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        let strategy = match c.cache_strategy.as_deref() {
            None | Some("disk") => Strategy::Disk,
            Some("memory") => Strategy::Memory,
            Some(other) => {
                v.error_at(
                    "cache_strategy",
                    format!("must be disk or memory, got \"{other}\""),
                );
                ok = false;
                Strategy::Disk
            }
        };
        let zone_name = c.cache_zone.as_deref().unwrap_or("disk_cache_one");
        if zone_name.is_empty() || zone_name.len() > 100 {
            v.error_at("cache_zone", "must be 1 to 100 characters");
            return None;
        }
        let key_items = c
            .cache_key
            .unwrap_or_else(|| vec!["$host".into(), "$request_uri".into()]);
        if key_items.is_empty() {
            v.error_at("cache_key", "must list at least one part");
            return None;
        }
        if key_items.iter().any(|k| k == "$request_method") {
            v.error_at("cache_key", "cache_key variable $request_method unsupported");
            return None;
        }
        let key = v.field("cache_key", |v| parts(&key_items, v));
        let isolate = c.consumer_isolation.unwrap_or(true)
            && !key_items.iter().any(|k| {
                matches!(
                    k.as_str(),
                    "$consumer_name" | "$consumer_group_id" | "$remote_user" | "$http_authorization"
                )
            });
        let conditions = |field: &str, items: Option<Vec<String>>, v: &mut Validator| match items {
            None => Some(None),
            Some(i) if i.is_empty() => {
                v.error_at(field, "must list at least one part");
                None
            }
            Some(i) => v.field(field, |v| parts(&i, v)).map(Some),
        };
        let bypass = conditions("cache_bypass", c.cache_bypass, v);
        let no_cache = conditions("no_cache", c.no_cache, v);
        let methods = match c.cache_method {
            None => Some(vec![Method::Get, Method::Head]),
            Some(m) if m.is_empty() => {
                v.error_at("cache_method", "must list at least one method");
                None
            }
            Some(m) => v.field("cache_method", |v| {
                let mut out = Vec::new();
                for (i, name) in m.iter().enumerate() {
                    let method = match name.as_str() {
                        "GET" => Method::Get,
                        "HEAD" => Method::Head,
                        "POST" => Method::Post,
                        _ => {
                            v.index(i, |v| v.error(format!("must be GET, POST or HEAD, got \"{name}\"")));
                            return None;
                        }
                    };
                    if out.contains(&method) {
                        v.index(i, |v| v.error(format!("{name} is listed twice")));
                        return None;
                    }
                    out.push(method);
                }
                Some(out)
            }),
        };
        let statuses = match c.cache_http_status {
            None => Some(vec![200, 301, 404]),
            Some(s) if s.is_empty() => {
                v.error_at("cache_http_status", "must list at least one status");
                None
            }
            Some(s) => v.field("cache_http_status", |v| {
                let mut out = Vec::new();
                for (i, n) in s.iter().enumerate() {
                    let code = v.index(i, |v| crate::util::check_status(*n, 200, v))?;
                    if out.contains(&code) {
                        v.index(i, |v| v.error(format!("{code} is listed twice")));
                        return None;
                    }
                    out.push(code);
                }
                Some(out)
            }),
        };
        let cache_ttl = whole_field("cache_ttl", c.cache_ttl, 300, (1, 1 << 40), " seconds", v);
        let max_body = whole_field(
            "max_resp_body_size",
            c.max_resp_body_size,
            64 << 20,
            (1, 1 << 40),
            " bytes",
            v,
        );
        // The dry build of validation does not know the node's `plugin_attr`: the zone is
        // resolved by the real build, which compiles every configuration before it serves.
        let check_only = cx.owner == "check";
        let attr = if check_only {
            Some((
                vec![zone::Spec {
                    name: zone_name.to_owned(),
                    memory_size: 1 << 20,
                    disk: None,
                }],
                DEFAULT_DISK_TTL,
            ))
        } else {
            let mut scratch = Validator::new();
            read_attr(cx.attr(NAME), &mut scratch)
        };
        let Some((zones, disk_ttl)) = attr else {
            v.error("plugin_attr.proxy-cache is not valid");
            return None;
        };
        let spec = match zones.into_iter().find(|z| z.name == zone_name) {
            None => {
                v.error_at("cache_zone", format!("cache_zone {zone_name} not found"));
                None
            }
            Some(z) if !check_only && (strategy == Strategy::Disk) != z.disk.is_some() => {
                v.error_at(
                    "cache_zone",
                    format!(
                        "invalid or empty cache_zone for cache_strategy: {}",
                        if strategy == Strategy::Disk { "disk" } else { "memory" }
                    ),
                );
                None
            }
            Some(z) => Some(z),
        };
        let (Some(key), Some(bypass), Some(no_cache), Some(methods), Some(statuses)) =
            (key, bypass, no_cache, methods, statuses)
        else {
            return None;
        };
        let (spec, cache_ttl, max_body) = (spec?, cache_ttl?, max_body?);
        if !ok {
            return None;
        }
        let plugin = |zone| ProxyCache {
            strategy,
            zone,
            key,
            isolate,
            bypass,
            no_cache,
            methods,
            statuses,
            hide_cache_headers: c.hide_cache_headers.unwrap_or(false),
            cache_control: c.cache_control.unwrap_or(false),
            ttl: match strategy {
                Strategy::Memory => cache_ttl,
                Strategy::Disk => disk_ttl,
            },
            set_cookie: c.cache_set_cookie.unwrap_or(false) && strategy == Strategy::Memory,
            max_body,
        };
        if check_only {
            // A zone of its own, never shared, never on disk.
            return Some(Arc::new(plugin(Arc::new(Zone::open(spec)))));
        }
        if let Some(d) = &spec.disk
            && let Err(e) = std::fs::create_dir_all(&d.path)
        {
            v.error_at(
                "cache_zone",
                format!(
                    "zone {}'s disk_path {}: {}",
                    spec.name,
                    d.path.display(),
                    sluice_config::io_reason(&e)
                ),
            );
            return None;
        }
        let state_key = format!("proxy-cache zone {spec:?}");
        let zone = cx.state.get_or_insert(&state_key, || Zone::open(spec));
        Some(Arc::new(plugin(zone)))
    }
}

fn state<'c>(cx: &'c mut Ctx<'_>) -> &'c mut State {
    cx.slot::<State>(NAME)
}

/// A request's state.
#[derive(Default)]
struct State {
    /// `Apisix-Cache-Status` for an answer that is not a hit.
    status: Option<&'static str>,
    /// The key, when the answer may be stored.
    fill: Option<Vec<u8>>,
    /// The fetch this request leads.
    lead: Option<Lead>,
    /// The answer being stored.
    pending: Option<Pending>,
}

struct Pending {
    key: Vec<u8>,
    vary: Vec<String>,
    sig: Vec<u8>,
    entry: Entry,
    body: Vec<u8>,
}

/// Fields the cache never keeps: those of one connection or one message's framing, its own
/// status, the server's name (the gateway sends its own with a hit) and rate-limit counts
/// (APISIX's list).
fn kept(name: &[u8]) -> bool {
    const DROPPED: &[&str] = &[
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "apisix-cache-status",
        "server",
        "age",
    ];
    !DROPPED.iter().any(|d| name.eq_ignore_ascii_case(d.as_bytes()))
        && !name
            .windows(19)
            .any(|w| w.eq_ignore_ascii_case(b"ratelimit-remaining"))
}

fn cache_header(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"cache-control") || name.eq_ignore_ascii_case(b"expires")
}

impl ProxyCache {
    /// The key: scheme, host, POST apart, identity, then `cache_key`; each length-prefixed.
    fn key(&self, req: &RequestHead, cx: &Ctx<'_>, method: Method) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        put(&mut out, if cx.is_https() { b"https" } else { b"http" });
        put(&mut out, req.host());
        put(&mut out, if method == Method::Post { b"POST" } else { b"GET" });
        // Tagged by where it came from: a consumer a plugin verified is not the Basic user
        // a request only claims.
        let identity = if !self.isolate {
            Vec::new()
        } else if let Some(c) = cx.consumer_name() {
            [b"c:", c.as_bytes()].concat()
        } else if let Some(u) = remote_user(req) {
            [b"u:".as_slice(), &u].concat()
        } else {
            Vec::new()
        };
        put(&mut out, &identity);
        let mut user = Vec::new();
        render(&self.key, req, cx, &mut user);
        put(&mut out, &user);
        out
    }

    /// The answer for a fresh entry.
    /// `now`: Unix milliseconds.
    fn hit(&self, e: &Entry, now: u64) -> Response {
        let mut headers = Vec::with_capacity(e.headers.len() + 2);
        for (n, v) in &e.headers {
            if !(self.hide_cache_headers && cache_header(n.as_bytes())) {
                headers.push((n.clone(), v.clone()));
            }
        }
        let age = e.age.saturating_add(now.saturating_sub(e.stored) / 1000);
        headers.push(("Age".to_owned(), age.to_string().into_bytes()));
        headers.push(("Apisix-Cache-Status".to_owned(), b"HIT".to_vec()));
        Response {
            status: e.status,
            headers,
            body: e.body.clone(),
        }
    }

    /// Whether the request's own `Cache-Control` refuses this fresh entry (`cache_control`).
    fn refused(&self, cc: &Directives, e: &Entry, now: u64) -> bool {
        let age = e.age.saturating_add(now.saturating_sub(e.stored) / 1000);
        let left = e.expires.saturating_sub(now) / 1000;
        cc.max_age.is_some_and(|m| age > m) || cc.min_fresh.is_some_and(|m| left < m)
    }

    async fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let method = req.method();
        // Milliseconds: a one-second lifetime is one second, whenever in a second it began.
        let now = sluice_core::clock::now().as_millis() as u64;
        if method == Method::Purge {
            let get = self.zone.purge(&self.key(req, cx, Method::Get));
            let post = self.zone.purge(&self.key(req, cx, Method::Post));
            return Flow::Respond(Response::new(if get || post { 200 } else { 404 }));
        }
        if !self.methods.contains(&method) {
            state(cx).status = Some(match self.strategy {
                Strategy::Memory => "MISS",
                Strategy::Disk => "BYPASS",
            });
            return Flow::Continue;
        }
        // An upgrade (WebSocket) is a tunnel, not an answer to keep or to give from the cache.
        if req.is_websocket() || req.header("upgrade").is_some() {
            state(cx).status = Some("BYPASS");
            return Flow::Continue;
        }
        let key = self.key(req, cx, method);
        if let Some(b) = &self.bypass
            && truthy(b, req, cx)
        {
            let s = state(cx);
            s.status = Some("BYPASS");
            // NGINX's proxy_cache_bypass still stores the answer; APISIX's memory one does not.
            if self.strategy == Strategy::Disk && method != Method::Head {
                s.fill = Some(key);
            }
            return Flow::Continue;
        }
        let cc = if self.cache_control && self.strategy == Strategy::Memory {
            let cc = Directives::parse(req.header_values("cache-control"));
            if cc.no_store || cc.no_cache {
                state(cx).status = Some("BYPASS");
                return Flow::Continue;
            }
            Some(cc)
        } else {
            None
        };
        let sig = |vary: &[String]| signature(vary, req);
        let mut found = self.zone.lookup(&key, now, sig);
        if matches!(found, Found::Miss | Found::Expired) && method != Method::Head {
            // A miss (or an expired entry) joins the fetch under way, or leads one.
            match self.zone.join(&key) {
                Join::Lead(lead) => state(cx).lead = Some(lead),
                Join::Wait(n) => {
                    let notified = n.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    if self.zone.fetching(&key, &n) {
                        let _ = tokio::time::timeout(LOCK_TIMEOUT, notified).await;
                    }
                    found = self.zone.lookup(&key, now, |vary| signature(vary, req));
                }
            }
        }
        let status = match found {
            Found::Fresh(e) => {
                if let Some(cc) = &cc
                    && self.refused(cc, &e, now)
                {
                    "STALE"
                } else {
                    // The fetch this request was to lead is not needed.
                    state(cx).lead = None;
                    return Flow::Respond(self.hit(&e, now));
                }
            }
            Found::Expired => "EXPIRED",
            Found::Miss => {
                if cc.as_ref().is_some_and(|c| c.only_if_cached) {
                    state(cx).lead = None;
                    return Flow::Respond(Response::new(504).header("Apisix-Cache-Status", b"MISS"));
                }
                "MISS"
            }
        };
        let s = state(cx);
        s.status = Some(status);
        if method != Method::Head {
            s.fill = Some(key);
            // The entry is the whole answer: the node is asked for all of it (as NGINX fills
            // its cache); the client gets the whole answer, which RFC 9110 §14.2 allows.
            req.remove_header("range");
            req.remove_header("if-range");
        }
        Flow::Continue
    }

    /// The entry to store for this answer, when it may be stored.
    fn pending(
        &self,
        req: &RequestHead,
        resp: &ResponseView<'_>,
        cx: &Ctx<'_>,
        key: Vec<u8>,
    ) -> Option<Pending> {
        let ResponseView::Upstream(_) = resp else {
            return None;
        };
        let status = resp.status();
        if !self.statuses.contains(&status) {
            return None;
        }
        if let Some(n) = &self.no_cache
            && truthy(n, req, cx)
        {
            return None;
        }
        let mut cc_values = Vec::new();
        let mut vary_values = Vec::new();
        let (mut expires, mut date, mut age, mut cookie) = (None, None, 0, false);
        let mut headers = Vec::new();
        resp.each_header(|n, v| {
            if n.eq_ignore_ascii_case(b"cache-control") {
                cc_values.push(v.to_vec());
            } else if n.eq_ignore_ascii_case(b"vary") {
                vary_values.push(v.to_vec());
            } else if n.eq_ignore_ascii_case(b"expires") {
                expires = Some(v.to_vec());
            } else if n.eq_ignore_ascii_case(b"date") {
                date = Some(v.to_vec());
            } else if n.eq_ignore_ascii_case(b"age") {
                age = fresh::delta_seconds(v).unwrap_or(0);
            } else if n.eq_ignore_ascii_case(b"set-cookie") {
                cookie = true;
            }
            if kept(n) {
                headers.push((String::from_utf8_lossy(n).into_owned(), v.to_vec()));
            }
        });
        // A Set-Cookie a plugin added counts too.
        cookie |= cx.response.header("set-cookie").is_some();
        if cookie && !self.set_cookie {
            return None;
        }
        let cc = Directives::parse(cc_values.iter().map(Vec::as_slice));
        if cc.private || cc.no_store || cc.no_cache {
            return None;
        }
        // RFC 9111 §3.5: an answer to a request with credentials no plugin verified is kept
        // only when the node says a shared cache may (its own check of them must not be
        // skipped by a hit).
        if cx.consumer_name().is_none()
            && req.header("authorization").is_some()
            && !(cc.public || cc.must_revalidate || cc.s_maxage.is_some())
        {
            return None;
        }
        let vary = fresh::vary_list(vary_values.iter().map(Vec::as_slice))?;
        let now_ms = sluice_core::clock::now().as_millis() as u64;
        let own = fresh::lifetime(&cc, expires.as_deref(), date.as_deref(), age, now_ms / 1000);
        let ttl = match (self.strategy, self.cache_control) {
            (Strategy::Memory, false) => self.ttl,
            // APISIX's: with cache_control, an answer without a lifetime of its own is not kept.
            (Strategy::Memory, true) => own.unwrap_or(0),
            (Strategy::Disk, _) => own.unwrap_or(self.ttl),
        };
        if ttl == 0 {
            return None;
        }
        let sig = signature(&vary, req);
        Some(Pending {
            key,
            vary,
            sig,
            entry: Entry {
                status,
                headers,
                body: Bytes::new(),
                stored: now_ms,
                expires: now_ms.saturating_add(ttl.saturating_mul(1000)),
                age,
            },
            body: Vec::new(),
        })
    }
}

/// The request's values of the headers `vary` names (absent and empty alike, as APISIX),
/// each length-prefixed.
fn signature(vary: &[String], req: &RequestHead) -> Vec<u8> {
    let mut out = Vec::new();
    for name in vary {
        let mut value = Vec::new();
        for (i, v) in req.header_values(name).enumerate() {
            if i > 0 {
                value.extend_from_slice(b", ");
            }
            value.extend_from_slice(v);
        }
        put(&mut out, &value);
    }
    out
}

impl Plugin for ProxyCache {
    fn phases(&self) -> Phases {
        Phases::ACCESS_ASYNC
            .with(Phases::HEADER_FILTER)
            .with(Phases::BODY_FILTER)
    }

    fn access_async<'a>(
        &'a self,
        req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> LocalFuture<'a, Flow> {
        Box::pin(self.access(req, cx))
    }

    fn header_filter(&self, req: &RequestHead, resp: ResponseView<'_>, cx: &mut Ctx<'_>) {
        let Some(s) = cx.slot_ref::<State>(NAME) else {
            return;
        };
        let Some(status) = s.status else {
            // A hit (its answer carries its own fields) or a purge.
            return;
        };
        cx.response
            .set_header("Apisix-Cache-Status", status.as_bytes());
        if self.hide_cache_headers {
            cx.response.remove_header("Cache-Control");
            cx.response.remove_header("Expires");
        }
        let fill = cx.slot::<State>(NAME).fill.take();
        let pending = fill.and_then(|key| self.pending(req, &resp, cx, key));
        let s = cx.slot::<State>(NAME);
        if pending.is_none() {
            // Nothing will be stored: the waiters go on their own.
            s.lead = None;
        }
        s.pending = pending;
    }

    fn body_filter(&self, chunk: &mut Bytes, eos: bool, cx: &mut Ctx<'_>) {
        // Another filter changes what the client gets (body-transformer, response-rewrite's
        // filters): what passes here is not that, and a hit would differ from this answer.
        let changed = cx.response.content_changed();
        let s = cx.slot::<State>(NAME);
        if changed {
            s.pending = None;
            s.lead = None;
            return;
        }
        let Some(p) = &mut s.pending else {
            return;
        };
        if (p.body.len() + chunk.len()) as u64 >= self.max_body {
            // As large as it may keep or larger (APISIX's rule): it goes through, not stored.
            s.pending = None;
            s.lead = None;
            return;
        }
        p.body.extend_from_slice(chunk);
        if eos && let Some(mut p) = s.pending.take() {
            p.entry.body = Bytes::from(p.body);
            self.zone.store(&p.key, p.vary, p.sig, p.entry);
            s.lead = None;
        }
    }

    fn filters_body(&self, cx: &Ctx<'_>) -> bool {
        cx.slot_ref::<State>(NAME)
            .is_some_and(|s| s.pending.is_some())
    }

    fn only_reads_body(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_nginx_s() {
        assert_eq!(parse_levels("1:2"), Some(vec![1, 2]));
        assert_eq!(parse_levels("2"), Some(vec![2]));
        assert_eq!(parse_levels("1:2:2:1"), None);
        assert_eq!(parse_levels("3"), None);
        assert_eq!(parse_levels(""), None);
    }

    #[test]
    fn what_the_cache_keeps_of_a_head() {
        assert!(kept(b"Content-Type") && kept(b"ETag") && kept(b"Set-Cookie"));
        assert!(!kept(b"Transfer-Encoding") && !kept(b"connection") && !kept(b"Content-Length"));
        assert!(!kept(b"X-RateLimit-Remaining") && !kept(b"Apisix-Cache-Status"));
    }
}
