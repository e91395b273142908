//! The configuration as a document, and every change to it: admin writes, file reloads. A
//! change is validated by the same code as a file, checked against the rest of the
//! configuration, compiled, persisted, and only then put in service; any failure leaves the
//! running configuration untouched.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::etcd::{Etcd, EtcdError, Event, Kv, Written};
use indexmap::IndexMap;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use sluice_config::{Config, ConfigError, ConfigErrors, PluginCatalog, RouteChange, RouteContext};
use tracing::{debug, info, warn};

use crate::store::Store;

/// What the control plane drives: the data plane, seen through compile and install.
pub trait Target: Send + Sync {
    /// Compiles `cfg` without putting it in service.
    fn prepare(&self, cfg: &Config) -> Result<Box<dyn Prepared>, ConfigErrors>;
    /// Compiles changes to validated routes against the configuration in service.
    fn prepare_routes(&self, changes: Vec<RouteChange>) -> Result<Box<dyn Prepared>, ConfigErrors>;
}

/// A compiled configuration, ready to go. It may hold the data plane's change lock: install or
/// drop it promptly.
pub trait Prepared {
    /// Puts it in service (one atomic swap); returns its version.
    fn install(self: Box<Self>) -> u64;
}

/// A resource kind of the admin API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `routes`
    Routes,
    /// `upstreams`
    Upstreams,
    /// `services`
    Services,
    /// `consumers` (identified by `username`)
    Consumers,
    /// `global_rules`
    GlobalRules,
    /// `ssls` (certificates)
    Ssls,
    /// `stream_routes` (L4)
    StreamRoutes,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 7] = [
        Kind::Routes,
        Kind::Upstreams,
        Kind::Services,
        Kind::Consumers,
        Kind::GlobalRules,
        Kind::Ssls,
        Kind::StreamRoutes,
    ];

    /// The kind named in a URL or a document.
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The list's key in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Routes => "routes",
            Kind::Upstreams => "upstreams",
            Kind::Services => "services",
            Kind::Consumers => "consumers",
            Kind::GlobalRules => "global_rules",
            Kind::Ssls => "ssls",
            Kind::StreamRoutes => "stream_routes",
        }
    }

    /// The field that identifies an item.
    pub fn id_field(self) -> &'static str {
        if self == Kind::Consumers {
            "username"
        } else {
            "id"
        }
    }
}

/// Why an admin change was refused.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// No such resource.
    #[error("{0} not found")]
    NotFound(String),
    /// The change does not validate; paths relative to the resource where they are in it.
    #[error("invalid configuration")]
    Invalid(ConfigErrors),
    /// The change conflicts with the rest of the configuration (a deletion of something in use).
    #[error("{0}")]
    Conflict(String),
    /// The request itself is wrong (not an object, an id that disagrees with the URL).
    #[error("{0}")]
    BadRequest(String),
    /// The store could not be written; nothing changed.
    #[error("{0}")]
    Store(String),
    /// The store (etcd) cannot be reached; nothing changed.
    #[error("{0}")]
    Unavailable(String),
}

/// Reload statistics, for the status endpoint and metrics.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    version: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
    last_applied: AtomicU64,
}

/// A snapshot of [`Stats`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct StatsView {
    /// Version of the configuration in service.
    pub version: u64,
    /// Changes applied (admin writes and reloads).
    pub applied: u64,
    /// Changes refused.
    pub rejected: u64,
    /// The last refusal, if any.
    pub last_error: Option<String>,
    /// When the configuration in service was applied (Unix seconds).
    pub applied_at: u64,
    /// Cluster mode: the link to etcd.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd: Option<EtcdView>,
}

/// The state of the link to etcd.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EtcdView {
    /// Whether the last call to etcd succeeded (the watch is up).
    pub connected: bool,
    /// The etcd revision the configuration in service reflects.
    pub revision: i64,
    /// The last failure to reach etcd, if any.
    pub last_error: Option<String>,
}

/// Cluster mode: where admin writes go.
#[derive(Debug)]
pub struct EtcdLink {
    /// The client.
    pub client: Etcd,
    /// Key prefix (`/sluice`).
    pub prefix: String,
    /// The runtime etcd calls run on (the cluster thread's).
    pub handle: tokio::runtime::Handle,
    /// Timeout of one call.
    pub timeout: std::time::Duration,
}

impl EtcdLink {
    fn guard(&self) -> String {
        format!("{}/_guard", self.prefix)
    }

    fn key(&self, kind: Kind, id: &str) -> String {
        format!("{}/{}/{id}", self.prefix, kind.name())
    }

    /// Runs a guarded write on the cluster thread's runtime and waits for it.
    fn write(
        &self,
        guard_rev: i64,
        key: String,
        value: Option<Vec<u8>>,
    ) -> Result<Written, EtcdError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let client = self.client.clone();
        let guard = self.guard();
        self.handle.spawn(async move {
            let _ = tx.send(
                client
                    .write_guarded(&guard, guard_rev, &key, value.as_deref())
                    .await,
            );
        });
        rx.recv_timeout(self.timeout * 2)
            .unwrap_or_else(|_| Err(EtcdError::Unreachable("the write timed out".into())))
    }
}

#[derive(Debug, Default)]
struct ClusterStats {
    connected: std::sync::atomic::AtomicBool,
    revision: AtomicI64,
    last_error: Mutex<Option<String>>,
    /// The configuration changed since the cache file was written.
    cache_dirty: std::sync::atomic::AtomicBool,
}

/// The configuration's owner.
pub struct Control {
    state: Mutex<State>,
    catalog: Arc<dyn PluginCatalog + Send + Sync>,
    target: Arc<dyn Target>,
    store: Arc<dyn Store>,
    stats: Stats,
    etcd: Option<EtcdLink>,
    cluster: ClusterStats,
    /// The signature of the file as the last admin change wrote it, so that the watcher does
    /// not read back what it knows.
    saved: Mutex<crate::watch::Signature>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("store", &self.store)
            .finish()
    }
}

struct State {
    doc: Doc,
    /// What a route refers to in the configuration in service, to check one route alone.
    routes_cx: RouteContext,
    /// Hash of the store text last seen, to skip reloads that change nothing.
    text_hash: u64,
    /// Cluster mode: the revision of the guard key every write goes through, as last seen.
    guard_rev: i64,
}

/// A resource list by id, in order. Fx-hashed: ids are not attacker-chosen keys here (only
/// the operator writes them), and SipHash was a third of a 100,000-route file reload.
type Items = IndexMap<String, Item, rustc_hash::FxBuildHasher>;

/// One resource, with its line in the file (rendered once, when it changes).
#[derive(Debug, Clone)]
struct Item {
    value: Arc<Value>,
    line: Arc<str>,
    /// Cluster mode: the etcd revision of this value (0 otherwise). An older event for the
    /// same key is not applied over it.
    rev: i64,
}

impl Item {
    /// Same resource: the same line, or the same value written differently.
    fn same(&self, other: &Item) -> bool {
        Arc::ptr_eq(&self.value, &other.value)
            || self.line == other.line
            || self.value == other.value
    }

    fn new(value: Value) -> Item {
        let line = serde_json::to_string(&value).unwrap_or_default();
        Item {
            value: Arc::new(value),
            line: line.into(),
            rev: 0,
        }
    }
}

/// The configuration as a document: node settings, then each resource list keyed by id, in
/// document order. Ids are unique (a document is adopted only once it validated).
#[derive(Debug, Clone, Default)]
struct Doc {
    settings: Map<String, Value>,
    lists: Vec<(Kind, Items)>,
    /// Some route has no `id` (its id is its position): route changes then go through a full
    /// compilation, since positions shift.
    positional: bool,
}

impl Doc {
    fn from_map(map: Map<String, Value>) -> Doc {
        let mut doc = Doc::default();
        for (k, v) in map {
            let Some(kind) = Kind::from_name(&k) else {
                doc.settings.insert(k, v);
                continue;
            };
            let mut items = Items::default();
            let list = match v {
                Value::Array(a) => a,
                _ => Vec::new(),
            };
            for (i, item) in list.into_iter().enumerate() {
                let id = match id_of(kind, &item) {
                    Some(id) => id,
                    None => {
                        doc.positional = true;
                        format!("{}[{i}]", kind.name())
                    }
                };
                items.insert(id, Item::new(item));
            }
            doc.lists.push((kind, items));
        }
        doc
    }

    fn to_map(&self) -> Map<String, Value> {
        let mut map = self.settings.clone();
        for (kind, items) in &self.lists {
            map.insert(
                kind.name().into(),
                Value::Array(items.values().map(|i| (*i.value).clone()).collect()),
            );
        }
        map
    }

    fn list(&self, kind: Kind) -> Option<&Items> {
        self.lists.iter().find(|(k, _)| *k == kind).map(|(_, l)| l)
    }

    fn list_mut(&mut self, kind: Kind) -> &mut Items {
        let i = match self.lists.iter().position(|(k, _)| *k == kind) {
            Some(i) => i,
            None => {
                self.lists.push((kind, Items::default()));
                self.lists.len() - 1
            }
        };
        &mut self.lists[i].1
    }

    /// The YAML file: node settings in block style, then each resource list with one resource
    /// per line (a JSON object, which is YAML too). One line per resource keeps a change a
    /// one-line diff, and writing 100,000 routes a copy of lines already rendered.
    fn render(&self) -> Result<String, String> {
        let mut out = String::from(
            "# Managed by Sluice: admin API changes are written here; edits are applied live.\n",
        );
        if !self.settings.is_empty() {
            out.push_str(&yaml_serde::to_string(&self.settings).map_err(|e| e.to_string())?);
        }
        for (kind, items) in &self.lists {
            out.push_str(kind.name());
            if items.is_empty() {
                out.push_str(": []\n");
                continue;
            }
            out.push_str(":\n");
            for item in items.values() {
                out.push_str("  - ");
                out.push_str(&item.line);
                out.push('\n');
            }
        }
        Ok(out)
    }
}

/// The document a map renders to (for tests and tools): see [`Doc::render`].
pub fn render(doc: &Map<String, Value>) -> Result<String, String> {
    Doc::from_map(doc.clone()).render()
}

/// The route changes that turn `old` into `new`, when that is all that differs and the routes
/// the two share keep their relative order (new routes only at the end): then changing the
/// routes alone gives the same routing as compiling `new` whole. None otherwise.
fn route_diff(old: &Doc, new: &Doc) -> Option<Vec<(usize, String, Option<Value>)>> {
    if old.positional || new.positional || old.settings != new.settings {
        return None;
    }
    let empty = Items::default();
    for kind in Kind::ALL.into_iter().filter(|k| *k != Kind::Routes) {
        let a = old.list(kind).unwrap_or(&empty);
        let b = new.list(kind).unwrap_or(&empty);
        if a.len() != b.len()
            || a.iter()
                .zip(b)
                .any(|((ia, va), (ib, vb))| ia != ib || !va.same(vb))
        {
            return None;
        }
    }
    let a = old.list(Kind::Routes).unwrap_or(&empty);
    let b = new.list(Kind::Routes).unwrap_or(&empty);
    // The common case, an edit that keeps every route where it was: compared in place.
    if a.len() == b.len() && a.keys().zip(b.keys()).all(|(x, y)| x == y) {
        return Some(
            a.values()
                .zip(b.iter())
                .enumerate()
                .filter(|(_, (old, (_, item)))| !old.same(item))
                .map(|(i, (_, (id, item)))| (i, id.clone(), Some((*item.value).clone())))
                .collect(),
        );
    }
    let kept_a = a.keys().filter(|id| b.contains_key(*id));
    let kept_b = b.keys().filter(|id| a.contains_key(*id));
    if !kept_a.eq(kept_b) {
        return None;
    }
    // New routes only after the last kept one.
    let last_kept = b.keys().rposition(|id| a.contains_key(id));
    if b.keys()
        .enumerate()
        .any(|(i, id)| !a.contains_key(id) && last_kept.is_some_and(|l| i < l))
    {
        return None;
    }
    let mut changes = Vec::new();
    for id in a.keys() {
        if !b.contains_key(id) {
            changes.push((0, id.clone(), None));
        }
    }
    for (i, (id, item)) in b.iter().enumerate() {
        if a.get(id).is_none_or(|old| !old.same(item)) {
            changes.push((i, id.clone(), Some((*item.value).clone())));
        }
    }
    Some(changes)
}

fn hash(text: &str) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    text.hash(&mut h);
    h.finish()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Parses YAML (or JSON, which is YAML) into a document.
pub fn parse_doc(text: &str) -> Result<Map<String, Value>, ConfigErrors> {
    if let Some(doc) = scan(text, None) {
        return Ok(doc.to_map());
    }
    parse_yaml(text)
}

fn parse_yaml(text: &str) -> Result<Map<String, Value>, ConfigErrors> {
    match yaml_serde::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err(ConfigError::new(
            "",
            "the document must be a mapping of settings and resources",
        )
        .into()),
        Err(e) => Err(ConfigError::new("", format!("invalid YAML: {e}")).into()),
    }
}

impl Doc {
    /// Parses a file: the layout Sluice writes is read line by line (see [`scan`]), anything
    /// else by the YAML parser.
    fn parse(text: &str, previous: Option<&Doc>) -> Result<Doc, ConfigErrors> {
        match scan(text, previous) {
            Some(doc) => Ok(doc),
            None => parse_yaml(text).map(Doc::from_map),
        }
    }
}

/// Reads the layout Sluice writes (node settings, then resource lists with one flow mapping
/// per line) without the YAML parser: settings go to the YAML parser, each resource line to
/// the JSON parser (or, when it is YAML but not JSON, to the YAML parser on its own). A
/// general YAML parser needs about 8 µs per resource line; this needs about 1, and a line
/// identical to the one at the same place in `previous` (the document in service) is not
/// parsed again at all. None when the text is laid out otherwise (block-style resources,
/// anchors, a key twice): the caller then parses it whole.
///
/// Hand-written because file edits with 100,000 routes must apply in well under a second.
fn scan(text: &str, previous: Option<&Doc>) -> Option<Doc> {
    let (split, settings) = settings_part(text)?;
    let mut doc = Doc {
        settings,
        ..Doc::default()
    };
    let mut current: Option<usize> = None;
    for raw in text[split..].lines() {
        let line = raw.trim_end();
        if line.is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if let Some((kind, empty)) = list_header(line) {
            if doc.lists.iter().any(|(k, _)| *k == kind) {
                return None;
            }
            let size = previous.and_then(|p| p.list(kind)).map_or(0, IndexMap::len);
            doc.lists.push((
                kind,
                Items::with_capacity_and_hasher(size, Default::default()),
            ));
            current = (!empty).then_some(doc.lists.len() - 1);
            continue;
        }
        let item = line.strip_prefix("  - ")?.trim();
        if !item.starts_with('{') || !item.ends_with('}') {
            return None;
        }
        let i = current?;
        let (kind, items) = &mut doc.lists[i];
        let unchanged = previous
            .and_then(|p| p.list(*kind))
            .and_then(|l| l.get_index(items.len()))
            .filter(|(_, old)| *old.line == *item);
        if let Some((id, old)) = unchanged {
            if id_of(*kind, &old.value).is_none() {
                doc.positional = true;
            }
            if items.insert(id.clone(), old.clone()).is_some() {
                return None;
            }
            continue;
        }
        let value = parse_line(item)?;
        let id = match id_of(*kind, &value) {
            Some(id) => id,
            None => {
                doc.positional = true;
                format!("{}[{}]", kind.name(), items.len())
            }
        };
        let item = Item {
            value: Arc::new(value),
            line: item.into(),
            rev: 0,
        };
        if items.insert(id, item).is_some() {
            // A duplicate id: the full parser and validation report it properly.
            return None;
        }
    }
    Some(doc)
}

/// Where the resource lists of Sluice's layout start (the first line that is a resource key at
/// column 0), and the node settings before it.
fn settings_part(text: &str) -> Option<(usize, Map<String, Value>)> {
    let mut split = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if list_header(line).is_some() {
            split = Some(offset);
            break;
        }
        offset += line.len();
    }
    let split = split?;
    let settings = parse_yaml(&text[..split]).ok()?;
    if settings.keys().any(|k| Kind::from_name(k).is_some()) {
        return None;
    }
    Some((split, settings))
}

/// A resource line (`{...}`, JSON or YAML flow) as a value.
fn parse_line(item: &str) -> Option<Value> {
    match serde_json::from_str(item) {
        Ok(v @ Value::Object(_)) => Some(v),
        Ok(_) => None,
        Err(_) => match yaml_serde::from_str::<Value>(item) {
            Ok(v @ Value::Object(_)) => Some(v),
            _ => None,
        },
    }
}

impl Doc {
    /// The lines of `text` (Sluice's layout) that differ from this document, when that is all
    /// that differs: the same settings, the same lists, the same number of resources in each,
    /// every resource with the id it had at its place. `(kind, position, new item)`; None
    /// otherwise. Lets an edit of a few lines in a file of 100,000 routes be applied without
    /// building a second document.
    fn line_patch(&self, text: &str) -> Option<Vec<(Kind, usize, Item)>> {
        if self.positional {
            return None;
        }
        let (split, settings) = settings_part(text)?;
        if settings != self.settings {
            return None;
        }
        let mut patch = Vec::new();
        let mut lists = self.lists.iter();
        let mut current: Option<(Kind, &Items, usize)> = None;
        let done =
            |c: &Option<(Kind, &Items, usize)>| c.is_none_or(|(_, items, n)| n == items.len());
        for raw in text[split..].lines() {
            let line = raw.trim_end();
            if line.is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            if let Some((kind, empty)) = list_header(line) {
                if !done(&current) {
                    return None;
                }
                let (k, items) = lists.next()?;
                if *k != kind || empty != items.is_empty() {
                    return None;
                }
                current = Some((kind, items, 0));
                continue;
            }
            let item = line.strip_prefix("  - ")?.trim();
            let (kind, items, n) = current.as_mut()?;
            let (id, old) = items.get_index(*n)?;
            *n += 1;
            if *old.line == *item {
                continue;
            }
            if !item.starts_with('{') || !item.ends_with('}') {
                return None;
            }
            let value = parse_line(item)?;
            if id_of(*kind, &value).as_deref() != Some(id.as_str()) {
                return None;
            }
            patch.push((
                *kind,
                *n - 1,
                Item {
                    value: Arc::new(value),
                    line: item.into(),
                    rev: 0,
                },
            ));
        }
        // Every list seen, each to its end.
        (done(&current) && lists.next().is_none()).then_some(patch)
    }
}

/// `routes:` (a list follows) or `routes: []` (empty) at column 0, for each resource kind.
fn list_header(line: &str) -> Option<(Kind, bool)> {
    let line = line.trim_end();
    let (key, rest) = line.split_once(':')?;
    let kind = Kind::from_name(key)?;
    match rest.trim() {
        "" => Some((kind, false)),
        "[]" => Some((kind, true)),
        _ => None,
    }
}

/// What an admin write does to an item.
enum Edit {
    /// Create or replace it.
    Set(Value),
    /// Create it; a conflict if it exists.
    Create(Value),
    /// Merge into it (PATCH).
    Merge(Value),
    /// Remove it.
    Delete,
}

/// Node settings a reload cannot change (they are taken at start).
const STARTUP_ONLY: &[&str] = &["listen", "workers", "admin", "origin"];

/// A change ready to go: compiled, not yet in service.
enum Ready {
    /// A whole configuration, with its document.
    Full {
        prepared: Box<dyn Prepared>,
        doc: Doc,
        cx: RouteContext,
    },
    /// Route changes; with the document they give, unless it is already in place.
    Routes {
        prepared: Box<dyn Prepared>,
        doc: Option<Doc>,
    },
}

impl Control {
    /// A control plane over `store`, whose current text `text` (which loaded as `cfg`) is
    /// already in service as `version`.
    pub fn new(
        store: Arc<dyn Store>,
        catalog: Arc<dyn PluginCatalog + Send + Sync>,
        target: Arc<dyn Target>,
        text: &str,
        cfg: &Config,
        version: u64,
        etcd: Option<EtcdLink>,
    ) -> Result<Control, ConfigErrors> {
        let doc = Doc::parse(text, None)?;
        let stats = Stats::default();
        stats.version.store(version, Ordering::Relaxed);
        stats.last_applied.store(now(), Ordering::Relaxed);
        let state = State {
            doc,
            routes_cx: RouteContext::of(cfg),
            text_hash: hash(text),
            guard_rev: 0,
        };
        Ok(Control {
            state: Mutex::new(state),
            catalog,
            target,
            store,
            stats,
            etcd,
            cluster: ClusterStats::default(),
            saved: Mutex::new(None),
        })
    }

    /// Where the configuration is.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Checks a whole document without applying it.
    pub fn check(&self, doc: Map<String, Value>) -> Result<Config, ConfigErrors> {
        let cfg = sluice_config::load_value_with(Value::Object(doc), &*self.catalog)?;
        // Compiling catches what validation cannot (names that do not resolve).
        drop(self.target.prepare(&cfg)?);
        Ok(cfg)
    }

    /// Compiles `doc` whole.
    fn prepare_full(&self, doc: Doc) -> Result<Ready, ConfigErrors> {
        let cfg = sluice_config::load_value_with(Value::Object(doc.to_map()), &*self.catalog)?;
        let prepared = self.target.prepare(&cfg)?;
        Ok(Ready::Full {
            prepared,
            doc,
            cx: RouteContext::of(&cfg),
        })
    }

    /// Puts `next` in service in place of the document in service: its route changes alone
    /// when that is all that differs, whole otherwise, nothing when nothing differs (the
    /// document is still adopted, for what only it holds: revisions). Logs the outcome.
    fn adopt(
        &self,
        state: &mut State,
        next: Doc,
        source: &str,
    ) -> Result<Option<u64>, ConfigErrors> {
        let started = Instant::now();
        let result = match route_diff(&state.doc, &next) {
            Some(changes) if changes.is_empty() => {
                state.doc = next;
                return Ok(None);
            }
            Some(changes) => self.prepare_routes(&state.routes_cx, changes, Some(next)),
            None => self.prepare_full(next),
        };
        match result {
            Ok(ready) => {
                let version = self.install(state, ready);
                info!(version, %source, elapsed = ?started.elapsed(), "configuration reloaded");
                Ok(Some(version))
            }
            Err(errors) => Err(self.refused(source, errors)),
        }
    }

    /// Compiles route changes alone (`(position, id, new value or None to delete)`), giving
    /// `doc` once they are applied.
    fn prepare_routes(
        &self,
        cx: &RouteContext,
        changes: Vec<(usize, String, Option<Value>)>,
        doc: Option<Doc>,
    ) -> Result<Ready, ConfigErrors> {
        let mut errors = ConfigErrors(Vec::new());
        let mut list = Vec::with_capacity(changes.len());
        for (index, id, value) in changes {
            match value {
                None => list.push(RouteChange::Delete(id)),
                Some(v) => match sluice_config::load_route_with(v, index, cx, &*self.catalog) {
                    Ok(route) => list.push(RouteChange::Put {
                        index,
                        route: Box::new(route),
                    }),
                    Err(e) => errors.0.extend(e.0),
                },
            }
        }
        if !errors.0.is_empty() {
            return Err(errors);
        }
        let prepared = self.target.prepare_routes(list)?;
        Ok(Ready::Routes { prepared, doc })
    }

    /// Puts a ready change in service and records it.
    fn install(&self, state: &mut State, ready: Ready) -> u64 {
        let version = match ready {
            Ready::Full { prepared, doc, cx } => {
                let frozen: Vec<&str> = STARTUP_ONLY
                    .iter()
                    .copied()
                    .filter(|k| doc.settings.get(*k) != state.doc.settings.get(*k))
                    .collect();
                if !frozen.is_empty() {
                    warn!(settings = %frozen.join(", "), "these settings changed in {} but take effect only after a restart", self.store.describe());
                }
                state.doc = doc;
                state.routes_cx = cx;
                prepared.install()
            }
            Ready::Routes { prepared, doc } => {
                if let Some(doc) = doc {
                    state.doc = doc;
                }
                prepared.install()
            }
        };
        self.applied(version);
        version
    }

    /// Re-reads the store and applies it if it changed. `Ok(None)`: nothing changed.
    pub fn reload(&self) -> Result<Option<u64>, ConfigErrors> {
        // Read under the lock admin writes hold while they save: text read before an admin
        // write and applied after it would undo that write.
        let mut state = self.state.lock();
        let text = match self.store.load() {
            Ok(t) => t,
            Err(e) => {
                warn!("{e}; the previous configuration keeps serving");
                return Err(ConfigError::new("", e).into());
            }
        };
        let h = hash(&text);
        if h == state.text_hash {
            debug!(source = %self.store.describe(), "configuration unchanged");
            return Ok(None);
        }
        state.text_hash = h;
        let source = self.store.describe();
        if let Some(link) = &self.etcd {
            // Cluster mode: the file holds node settings; resources are read again from etcd.
            let next = Doc::parse(&text, None).and_then(|file| {
                if let Some((kind, _)) = file.lists.iter().find(|(_, l)| !l.is_empty()) {
                    return Err(ConfigError::new(kind.name(), RESOURCES_IN_ETCD).into());
                }
                let (tx, rx) = std::sync::mpsc::channel();
                let (client, prefix) = (link.client.clone(), link.prefix.clone());
                link.handle.spawn(async move {
                    let _ = tx.send(client.range_prefix(&format!("{prefix}/")).await);
                });
                let (revision, kvs) = rx
                    .recv_timeout(link.timeout * 2)
                    .unwrap_or_else(|_| Err(EtcdError::Unreachable("timed out".into())))
                    .map_err(|e| ConfigError::new("etcd", e.to_string()))?;
                let (mut next, guard) = Doc::from_kvs(&link.prefix, kvs);
                next.settings = file.settings;
                state.guard_rev = guard;
                self.cluster.revision.store(revision, Ordering::Relaxed);
                Ok(next)
            });
            return match next {
                Ok(next) => self.adopt(&mut state, next, &source),
                Err(errors) => Err(self.refused(&source, errors)),
            };
        }
        if let Some(patch) = state.doc.line_patch(&text) {
            return self.apply_patch(&mut state, patch, &source);
        }
        match Doc::parse(&text, Some(&state.doc)) {
            Ok(next) => self.adopt(&mut state, next, &source),
            Err(errors) => Err(self.refused(&source, errors)),
        }
    }

    /// Applies resource lines changed in place (see [`Doc::line_patch`]): routes alone when
    /// only routes changed, the document patched in place once they are in service; anything
    /// else through a whole compilation.
    fn apply_patch(
        &self,
        state: &mut State,
        patch: Vec<(Kind, usize, Item)>,
        source: &str,
    ) -> Result<Option<u64>, ConfigErrors> {
        // Lines rewritten without a change of value need no compiling.
        let patch: Vec<_> = patch
            .into_iter()
            .filter_map(|(kind, i, item)| {
                let list = state.doc.list_mut(kind);
                let (_, old) = list.get_index_mut(i)?;
                if old.value == item.value {
                    *old = item;
                    None
                } else {
                    Some((kind, i, item))
                }
            })
            .collect();
        if patch.is_empty() {
            return Ok(None);
        }
        if patch.iter().any(|(kind, _, _)| *kind != Kind::Routes) {
            let mut next = state.doc.clone();
            for (kind, i, item) in patch {
                if let Some((_, slot)) = next.list_mut(kind).get_index_mut(i) {
                    *slot = item;
                }
            }
            return self.adopt(state, next, source);
        }
        let started = Instant::now();
        let changes = patch
            .iter()
            .filter_map(|(kind, i, item)| {
                let (id, _) = state.doc.list(*kind)?.get_index(*i)?;
                Some((*i, id.clone(), Some((*item.value).clone())))
            })
            .collect();
        match self.prepare_routes(&state.routes_cx, changes, None) {
            Ok(ready) => {
                let routes = state.doc.list_mut(Kind::Routes);
                for (_, i, item) in patch {
                    if let Some((_, slot)) = routes.get_index_mut(i) {
                        *slot = item;
                    }
                }
                let version = self.install(state, ready);
                info!(version, %source, elapsed = ?started.elapsed(), "configuration reloaded");
                Ok(Some(version))
            }
            Err(errors) => Err(self.refused(source, errors)),
        }
    }

    /// Cluster mode: changes seen by the etcd watch, up to `revision`. A change to a key this
    /// node already holds at that revision or later (its own write) is skipped. Returns the
    /// version put in service, if any.
    pub fn apply_events(&self, revision: i64, events: Vec<Event>) -> Option<u64> {
        let link = self.etcd.as_ref()?;
        let mut state = self.state.lock();
        let guard = link.guard();
        let mut next = state.doc.clone();
        let mut changed = false;
        for event in events {
            let (kv, put) = match event {
                Event::Put(kv) => (kv, true),
                Event::Delete(kv) => (kv, false),
            };
            if kv.key == guard {
                state.guard_rev = state.guard_rev.max(kv.mod_revision);
                continue;
            }
            let Some((kind, id)) = split_key(&link.prefix, &kv.key) else {
                debug!(key = %kv.key, "ignored: not a resource key");
                continue;
            };
            let list = next.list_mut(kind);
            if list
                .get(&id)
                .is_some_and(|item| item.rev >= kv.mod_revision)
            {
                continue;
            }
            if put {
                let Some(item) = item_from_etcd(kind, &id, &kv) else {
                    continue;
                };
                match list.get_index_of(&id) {
                    Some(i) => list[i] = item,
                    None => {
                        list.insert(id, item);
                    }
                }
                changed = true;
            } else if list.shift_remove(&id).is_some() {
                changed = true;
            }
        }
        self.cluster.revision.fetch_max(revision, Ordering::Relaxed);
        if !changed {
            return None;
        }
        let applied = self.adopt(&mut state, next, "etcd").ok().flatten();
        self.cluster.cache_dirty.store(true, Ordering::Relaxed);
        applied
    }

    /// Cluster mode: everything under the prefix as read at `revision` replaces what this
    /// node holds (at start, and after the link to etcd was lost).
    pub fn resync(&self, revision: i64, kvs: Vec<Kv>) -> Result<Option<u64>, ConfigErrors> {
        let Some(link) = &self.etcd else {
            return Ok(None);
        };
        let mut state = self.state.lock();
        let (mut next, guard) = Doc::from_kvs(&link.prefix, kvs);
        next.settings = state.doc.settings.clone();
        state.guard_rev = guard;
        self.cluster.revision.store(revision, Ordering::Relaxed);
        self.cluster.cache_dirty.store(true, Ordering::Relaxed);
        self.adopt(&mut state, next, "etcd")
    }

    /// Cluster mode: records whether etcd can be reached, logging changes of state.
    pub fn etcd_reachable(&self, result: Result<(), String>) {
        let was = self
            .cluster
            .connected
            .swap(result.is_ok(), Ordering::Relaxed);
        match result {
            Ok(()) if !was => info!(
                revision = self.cluster.revision.load(Ordering::Relaxed),
                "etcd reachable; configuration in sync"
            ),
            Ok(()) => {}
            Err(e) => {
                if was || self.cluster.last_error.lock().is_none() {
                    warn!(error = %e, "etcd unreachable: serving the last configuration received; retrying");
                }
                *self.cluster.last_error.lock() = Some(e);
            }
        }
    }

    /// Cluster mode: the resources in service as a file (for the local cache), when they
    /// changed since the last call.
    pub fn cache_text(&self) -> Option<String> {
        if !self.cluster.cache_dirty.swap(false, Ordering::Relaxed) {
            return None;
        }
        let state = self.state.lock();
        let mut doc = state.doc.clone();
        doc.settings = Map::new();
        let revision = self.cluster.revision.load(Ordering::Relaxed);
        doc.render().ok().map(|t| {
            t.replacen(
                "# Managed by Sluice",
                &format!("# etcd revision {revision}; managed by Sluice"),
                1,
            )
        })
    }

    /// Every item of a kind.
    pub fn list(&self, kind: Kind) -> Vec<Value> {
        let state = self.state.lock();
        state
            .doc
            .list(kind)
            .map(|l| l.values().map(|i| (*i.value).clone()).collect())
            .unwrap_or_default()
    }

    /// One item.
    pub fn get(&self, kind: Kind, id: &str) -> Option<Value> {
        let state = self.state.lock();
        state.doc.list(kind)?.get(id).map(|i| (*i.value).clone())
    }

    /// Creates or replaces an item. Returns the item and whether it was created.
    pub fn put(&self, kind: Kind, id: &str, mut value: Value) -> Result<(Value, bool), AdminError> {
        let obj = value
            .as_object_mut()
            .ok_or_else(|| AdminError::BadRequest("the body must be a JSON object".into()))?;
        match obj.get(kind.id_field()) {
            Some(v) if id_text(v).as_deref() != Some(id) => {
                return Err(AdminError::BadRequest(format!(
                    "{} in the body ({v}) differs from the one in the URL ({id})",
                    kind.id_field()
                )));
            }
            _ => {
                obj.insert(kind.id_field().into(), Value::String(id.into()));
            }
        }
        self.change(kind, id, Edit::Set(value))
            .map(|(created, value)| (value.unwrap_or_default(), created))
    }

    /// Creates an item with a generated id.
    pub fn create(&self, kind: Kind, mut value: Value) -> Result<Value, AdminError> {
        let obj = value
            .as_object_mut()
            .ok_or_else(|| AdminError::BadRequest("the body must be a JSON object".into()))?;
        let id = match obj.get(kind.id_field()).and_then(id_text) {
            Some(id) if kind == Kind::Consumers => id,
            Some(_) => {
                return Err(AdminError::BadRequest(
                    "POST generates the id; use PUT to choose one".into(),
                ));
            }
            None if kind == Kind::Consumers => {
                return Err(AdminError::BadRequest("username is required".into()));
            }
            None => format!("{:016x}", fastrand::u64(..)),
        };
        if let Some(obj) = value.as_object_mut() {
            obj.insert(kind.id_field().into(), Value::String(id.clone()));
        }
        // Checked under the write's lock: two creations of the same id cannot both succeed.
        self.change(kind, &id, Edit::Create(value))
            .map(|(_, v)| v.unwrap_or_default())
    }

    /// Merges `patch` into an item (RFC 7396 JSON merge patch).
    pub fn patch(&self, kind: Kind, id: &str, patch: Value) -> Result<Value, AdminError> {
        let Some(obj) = patch.as_object() else {
            return Err(AdminError::BadRequest(
                "the body must be a JSON object".into(),
            ));
        };
        if let Some(v) = obj.get(kind.id_field())
            && id_text(v).as_deref() != Some(id)
        {
            return Err(AdminError::BadRequest(format!(
                "{} in the body ({v}) differs from the one in the URL ({id})",
                kind.id_field()
            )));
        }
        // Merged under the same lock as the write: a change applied from etcd in between
        // cannot be lost (the merge base and the guard revision are read together).
        self.change(kind, id, Edit::Merge(patch))
            .map(|(_, value)| value.unwrap_or_default())
    }

    /// Deletes an item; refuses (409) when other resources refer to it.
    pub fn delete(&self, kind: Kind, id: &str) -> Result<(), AdminError> {
        self.change(kind, id, Edit::Delete).map(|_| ())
    }

    /// Sets (`Some`) or deletes (`None`) item `id` of `kind`, then validates, compiles,
    /// persists and installs the result, in that order; the running configuration changes only
    /// when every step succeeded. A route changes alone (its validation and compilation do not
    /// depend on how many routes there are); anything else recompiles the whole configuration.
    /// Returns whether the item was created, and the item as written.
    fn change(
        &self,
        kind: Kind,
        id: &str,
        edit: Edit,
    ) -> Result<(bool, Option<Value>), AdminError> {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let position = state.doc.list(kind).and_then(|l| l.get_index_of(id));
        let value = match edit {
            Edit::Create(_) if position.is_some() => {
                return Err(AdminError::Conflict(format!(
                    "{} \"{id}\" already exists",
                    kind.name()
                )));
            }
            Edit::Set(v) | Edit::Create(v) => Some(v),
            Edit::Delete => None,
            Edit::Merge(patch) => {
                let mut current = state
                    .doc
                    .list(kind)
                    .and_then(|l| l.get(id))
                    .map(|i| (*i.value).clone())
                    .ok_or_else(|| AdminError::NotFound(format!("{} \"{id}\"", kind.name())))?;
                merge(&mut current, patch);
                if let Some(obj) = current.as_object_mut() {
                    obj.insert(kind.id_field().into(), Value::String(id.into()));
                }
                Some(current)
            }
        };
        if value.is_none() {
            if position.is_none() {
                return Err(AdminError::NotFound(format!("{} \"{id}\"", kind.name())));
            }
            if let Some(users) = users_of(&state.doc, kind, id) {
                return Err(AdminError::Conflict(format!(
                    "{} \"{id}\" is in use by {users}",
                    kind.name()
                )));
            }
        }
        // The document is edited in place (copying 100,000 routes per change would cost more
        // than the change) and put back as it was if anything fails.
        let list = state.doc.list_mut(kind);
        let (index, old) = match (&value, position) {
            (Some(v), Some(i)) => (
                i,
                Some(std::mem::replace(&mut list[i], Item::new(v.clone()))),
            ),
            (Some(v), None) => {
                list.insert(id.to_owned(), Item::new(v.clone()));
                (list.len() - 1, None)
            }
            (None, Some(i)) => (i, list.shift_remove_index(i).map(|(_, item)| item)),
            (None, None) => unreachable!("checked above"),
        };
        let undo = |doc: &mut Doc| {
            let list = doc.list_mut(kind);
            match (old.clone(), value.is_some()) {
                (Some(item), true) => list[index] = item,
                (None, _) => {
                    list.shift_remove(id);
                }
                (Some(item), false) => {
                    list.shift_insert(index, id.to_owned(), item);
                }
            }
        };
        // Errors come back relative to the item written.
        let prefix = format!("{}[{index}]", kind.name());
        let relative = |errors: ConfigErrors| -> AdminError {
            AdminError::Invalid(ConfigErrors(
                errors
                    .0
                    .into_iter()
                    .map(|mut e| {
                        if value.is_some()
                            && let Some(rest) = e.path.strip_prefix(&prefix)
                            && (rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
                        {
                            e.path = rest.trim_start_matches('.').to_owned();
                        }
                        e
                    })
                    .collect(),
            ))
        };
        let ready = if kind == Kind::Routes && !state.doc.positional {
            self.prepare_routes(
                &state.routes_cx,
                vec![(index, id.to_owned(), value.clone())],
                None,
            )
        } else {
            self.prepare_full(state.doc.clone())
        };
        let ready = match ready {
            Ok(r) => r,
            Err(e) => {
                undo(&mut state.doc);
                self.rejected(&e);
                return Err(relative(e));
            }
        };
        let mut ready = ready;
        if let Some(link) = &self.etcd {
            // Cluster mode: the write goes to etcd, guarded; this node applies it at once,
            // and every other node when its watch sees it.
            let bytes = value
                .as_ref()
                .map(|v| serde_json::to_vec(v).unwrap_or_default());
            match link.write(state.guard_rev, link.key(kind, id), bytes) {
                Ok(Written::At(rev)) => {
                    state.guard_rev = rev;
                    self.cluster.revision.fetch_max(rev, Ordering::Relaxed);
                    self.cluster.cache_dirty.store(true, Ordering::Relaxed);
                    let doc = match &mut ready {
                        Ready::Full { doc, .. } => doc,
                        Ready::Routes { .. } => &mut state.doc,
                    };
                    if let Some(item) = doc.list_mut(kind).get_mut(id) {
                        item.rev = rev;
                    }
                }
                Ok(Written::Conflict) => {
                    undo(&mut state.doc);
                    return Err(AdminError::Conflict(
                        "the configuration was changed by another writer since this node last saw it; nothing changed, retry".into(),
                    ));
                }
                Err(e) => {
                    undo(&mut state.doc);
                    return Err(AdminError::Unavailable(format!("{e}; nothing changed")));
                }
            }
        } else {
            let doc = match &ready {
                Ready::Full { doc, .. } => doc,
                Ready::Routes { .. } => &state.doc,
            };
            let saved = doc
                .render()
                .map_err(|e| format!("cannot serialize: {e}"))
                .and_then(|text| self.store.save(&text).map(|()| hash(&text)));
            match saved {
                Ok(h) => {
                    state.text_hash = h;
                    if let Some(path) = self.store.watch_path() {
                        *self.saved.lock() = crate::watch::signature(path);
                    }
                }
                Err(e) => {
                    undo(&mut state.doc);
                    return Err(AdminError::Store(e));
                }
            }
        }
        self.install(state, ready);
        Ok((position.is_none(), value))
    }

    fn applied(&self, version: u64) {
        self.stats.version.store(version, Ordering::Relaxed);
        self.stats.ok.fetch_add(1, Ordering::Relaxed);
        self.stats.last_applied.store(now(), Ordering::Relaxed);
    }

    /// Records and logs a configuration from `source` that was not applied.
    fn refused(&self, source: &str, errors: ConfigErrors) -> ConfigErrors {
        self.rejected(&errors);
        warn!(
            %source,
            version = self.stats.version.load(Ordering::Relaxed),
            "configuration rejected ({} errors); the previous one keeps serving:\n{errors}",
            errors.len()
        );
        errors
    }

    fn rejected(&self, errors: &ConfigErrors) {
        self.stats.failed.fetch_add(1, Ordering::Relaxed);
        *self.stats.last_error.lock() = Some(errors.to_string());
    }

    /// The signature of the file as the control plane last wrote it.
    pub fn saved_signature(&self) -> crate::watch::Signature {
        *self.saved.lock()
    }

    /// Cluster mode: whether etcd is configured.
    pub fn is_clustered(&self) -> bool {
        self.etcd.is_some()
    }

    /// Reload statistics.
    pub fn stats(&self) -> StatsView {
        StatsView {
            version: self.stats.version.load(Ordering::Relaxed),
            applied: self.stats.ok.load(Ordering::Relaxed),
            rejected: self.stats.failed.load(Ordering::Relaxed),
            last_error: self.stats.last_error.lock().clone(),
            applied_at: self.stats.last_applied.load(Ordering::Relaxed),
            etcd: self.etcd.as_ref().map(|_| EtcdView {
                connected: self.cluster.connected.load(Ordering::Relaxed),
                revision: self.cluster.revision.load(Ordering::Relaxed),
                last_error: self.cluster.last_error.lock().clone(),
            }),
        }
    }
}

/// The error for resources in the file when etcd holds them.
pub const RESOURCES_IN_ETCD: &str = "not allowed in the file when etcd is configured: resources are stored in etcd (write them through the admin API)";

/// `<prefix>/<kind>/<id>` → (kind, id).
fn split_key(prefix: &str, key: &str) -> Option<(Kind, String)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('/')?;
    let (kind, id) = rest.split_once('/')?;
    if id.is_empty() || id.contains('/') {
        return None;
    }
    Some((Kind::from_name(kind)?, id.to_owned()))
}

/// A resource read from etcd: a JSON object whose id is the key's (set when missing). None,
/// logged, when the value is not a JSON object or names another id.
fn item_from_etcd(kind: Kind, id: &str, kv: &Kv) -> Option<Item> {
    let mut value = match serde_json::from_slice::<Value>(&kv.value) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            warn!(key = %kv.key, "ignored: the value is not a JSON object");
            return None;
        }
    };
    let obj = value.as_object_mut()?;
    match obj.get(kind.id_field()).map(id_text) {
        Some(Some(given)) if given != id => {
            warn!(key = %kv.key, "ignored: its {} is \"{given}\", not the key's", kind.id_field());
            return None;
        }
        _ => {
            obj.insert(kind.id_field().into(), Value::String(id.into()));
        }
    }
    let mut item = Item::new(value);
    item.rev = kv.mod_revision;
    Some(item)
}

impl Doc {
    /// The resources under `prefix`, each kind in order of creation, and the guard key's
    /// revision (0 when absent).
    fn from_kvs(prefix: &str, mut kvs: Vec<Kv>) -> (Doc, i64) {
        kvs.sort_by_key(|kv| kv.create_revision);
        let guard = format!("{prefix}/_guard");
        let mut doc = Doc::default();
        let mut guard_rev = 0;
        for kv in kvs {
            if kv.key == guard {
                guard_rev = kv.mod_revision;
                continue;
            }
            let Some((kind, id)) = split_key(prefix, &kv.key) else {
                continue;
            };
            if let Some(item) = item_from_etcd(kind, &id, &kv) {
                doc.list_mut(kind).insert(id, item);
            }
        }
        // Lists in the order of a file.
        doc.lists
            .sort_by_key(|(k, _)| Kind::ALL.iter().position(|x| x == k));
        (doc, guard_rev)
    }
}

/// The resources under `prefix` as a document map (for the first configuration of a node).
pub fn etcd_resources(prefix: &str, kvs: Vec<Kv>) -> Map<String, Value> {
    Doc::from_kvs(prefix, kvs).0.to_map()
}

fn id_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn id_of(kind: Kind, item: &Value) -> Option<String> {
    item.get(kind.id_field()).and_then(id_text)
}

/// RFC 7396: objects merge recursively, `null` removes, anything else replaces.
fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(&k);
                } else {
                    merge(t.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p,
    }
}

/// What refers to resource `id` of `kind`, described for a 409, or None.
fn users_of(doc: &Doc, kind: Kind, id: &str) -> Option<String> {
    let mut users = Vec::new();
    let mut scan = |list: Kind, field: &str| {
        for (item_id, item) in doc.list(list).into_iter().flatten() {
            let item = &*item.value;
            let direct = item.get(field).and_then(id_text).as_deref() == Some(id);
            // traffic-split (and the like) name upstreams inside plugin settings.
            let in_plugins = field == "upstream_id"
                && item
                    .get("plugins")
                    .is_some_and(|p| mentions(p, "upstream_id", id));
            if direct || in_plugins {
                users.push(format!("{} \"{item_id}\"", list.name()));
            }
        }
    };
    match kind {
        Kind::Upstreams => {
            scan(Kind::Routes, "upstream_id");
            scan(Kind::Services, "upstream_id");
            scan(Kind::StreamRoutes, "upstream_id");
        }
        Kind::Services => scan(Kind::Routes, "service_id"),
        _ => {}
    }
    (!users.is_empty()).then(|| users.join(", "))
}

fn mentions(v: &Value, field: &str, id: &str) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, v)| {
            (k == field && id_text(v).as_deref() == Some(id)) || mentions(v, field, id)
        }),
        Value::Array(a) => a.iter().any(|v| mentions(v, field, id)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7396() {
        let mut t = serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1]});
        merge(
            &mut t,
            serde_json::json!({"a": null, "b": {"c": 9}, "e": [2], "f": "x"}),
        );
        assert_eq!(
            t,
            serde_json::json!({"b": {"c": 9, "d": 3}, "e": [2], "f": "x"})
        );
    }

    #[test]
    fn users_are_found_directly_and_inside_plugins() {
        let doc: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "routes": [
                {"id": "r1", "upstream_id": "u1"},
                {"id": "r2", "plugins": {"traffic-split": {"rules": [{"weighted_upstreams": [{"upstream_id": "u2"}]}]}}},
                {"id": "r3", "service_id": "s1"}
            ],
            "services": [{"id": "s1", "upstream_id": "u1"}]
        }))
        .unwrap();
        let doc = Doc::from_map(doc);
        assert_eq!(
            users_of(&doc, Kind::Upstreams, "u1").unwrap(),
            "routes \"r1\", services \"s1\""
        );
        assert_eq!(
            users_of(&doc, Kind::Upstreams, "u2").unwrap(),
            "routes \"r2\""
        );
        assert_eq!(
            users_of(&doc, Kind::Services, "s1").unwrap(),
            "routes \"r3\""
        );
        assert!(users_of(&doc, Kind::Upstreams, "u3").is_none());
    }

    fn doc(text: &str) -> Doc {
        Doc::parse(text, None).unwrap()
    }

    #[test]
    fn the_written_layout_reads_back_as_yaml_reads_it() {
        let map: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "listen": "127.0.0.1:9080",
            "log": {"level": "info"},
            "upstreams": [{"id": "u1", "nodes": {"127.0.0.1:1980": 1}}],
            "routes": [
                {"id": "r1", "uri": "/a", "upstream_id": "u1"},
                {"id": "r\"2", "uri": "/b\\d+", "upstream_id": "u1",
                 "plugins": {"response-rewrite": {"body": "é \u{1F600} \t tab: # not a comment"}}}
            ],
            "consumers": []
        }))
        .unwrap();
        let text = render(&map).unwrap();
        let scanned = scan(&text, None).expect("the written layout is scanned");
        assert_eq!(scanned.to_map(), map);
        assert_eq!(
            parse_yaml(&text).unwrap(),
            map,
            "and YAML reads it the same"
        );
    }

    #[test]
    fn other_layouts_go_to_the_yaml_parser() {
        // Block-style resources, a setting after the lists, a duplicate id.
        for text in [
            "routes:\n  - id: r1\n    uri: /a\n",
            "routes:\n  - {id: r1, uri: /a}\nworkers: 2\n",
            "routes:\n  - {id: r1, uri: /a}\n  - {id: r1, uri: /b}\n",
            "routes:\n  - {id: r1, uri: /a} # trailing comment\n",
        ] {
            assert!(scan(text, None).is_none(), "{text}");
        }
        // YAML flow mappings (not JSON) on their own lines are read line by line.
        let d = doc(
            "workers: 1\nroutes:\n  - {id: r1, uri: /a}\n\n  # a comment\n  - {\"id\": \"r2\", \"uri\": \"/b\"}\n",
        );
        assert_eq!(d.list(Kind::Routes).unwrap().len(), 2);
        assert_eq!(d.settings.get("workers"), Some(&serde_json::json!(1)));
    }

    #[test]
    fn only_route_edits_that_keep_the_order_are_applied_alone() {
        let base = "upstreams:\n  - {id: u, nodes: {\"127.0.0.1:1\": 1}}\nroutes:\n  - {id: a, uri: /a, upstream_id: u}\n  - {id: b, uri: /b, upstream_id: u}\n  - {id: c, uri: /c, upstream_id: u}\n";
        let old = doc(base);
        let diff = |text: &str| {
            route_diff(&old, &Doc::parse(text, Some(&old)).unwrap()).map(|c| {
                c.into_iter()
                    .map(|(i, id, v)| (i, id, v.is_some()))
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(diff(base), Some(vec![]));
        // b changed, c deleted, d added at the end.
        assert_eq!(
            diff(
                "upstreams:\n  - {id: u, nodes: {\"127.0.0.1:1\": 1}}\nroutes:\n  - {id: a, uri: /a, upstream_id: u}\n  - {id: b, uri: /bb, upstream_id: u}\n  - {id: d, uri: /d, upstream_id: u}\n"
            ),
            Some(vec![
                (0, "c".into(), false),
                (1, "b".into(), true),
                (2, "d".into(), true)
            ])
        );
        // Reordered, a route added in the middle, an upstream changed, a setting changed.
        assert_eq!(
            diff(
                "upstreams:\n  - {id: u, nodes: {\"127.0.0.1:1\": 1}}\nroutes:\n  - {id: b, uri: /b, upstream_id: u}\n  - {id: a, uri: /a, upstream_id: u}\n  - {id: c, uri: /c, upstream_id: u}\n"
            ),
            None
        );
        assert_eq!(
            diff(
                "upstreams:\n  - {id: u, nodes: {\"127.0.0.1:1\": 1}}\nroutes:\n  - {id: a, uri: /a, upstream_id: u}\n  - {id: n, uri: /n, upstream_id: u}\n  - {id: b, uri: /b, upstream_id: u}\n  - {id: c, uri: /c, upstream_id: u}\n"
            ),
            None
        );
        assert_eq!(diff(&base.replace("127.0.0.1:1", "127.0.0.1:2")), None);
        assert_eq!(diff(&format!("workers: 2\n{base}")), None);
        // The same route written differently is no change.
        assert_eq!(
            diff(&base.replace(
                "{id: a, uri: /a, upstream_id: u}",
                "{\"id\": \"a\", \"uri\": \"/a\", \"upstream_id\": \"u\"}"
            )),
            Some(vec![])
        );
        // Routes without ids are identified by position: always compiled whole.
        let anon = doc("routes:\n  - {uri: /a, upstream_id: u}\n");
        assert!(anon.positional);
        assert!(route_diff(&anon, &anon.clone()).is_none());
    }

    #[test]
    fn edits_in_place_are_read_as_line_patches() {
        let base = "workers: 1\nupstreams:\n  - {id: u, nodes: {\"127.0.0.1:1\": 1}}\nroutes:\n  - {id: a, uri: /a, upstream_id: u}\n  - {id: b, uri: /b, upstream_id: u}\n";
        let d = doc(base);
        let patch = |text: &str| {
            d.line_patch(text).map(|p| {
                p.into_iter()
                    .map(|(k, i, item)| (k, i, item.line.to_string()))
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(patch(base), Some(vec![]));
        assert_eq!(
            patch(&base.replace("uri: /b", "uri: /bb")),
            Some(vec![(
                Kind::Routes,
                1,
                "{id: b, uri: /bb, upstream_id: u}".into()
            )])
        );
        assert_eq!(
            patch(&base.replace("127.0.0.1:1", "127.0.0.1:2")).unwrap()[0].0,
            Kind::Upstreams
        );
        // Not a patch: an id changed in place, a line added or removed, settings changed, a
        // list added.
        assert_eq!(patch(&base.replace("{id: b,", "{id: c,")), None);
        assert_eq!(
            patch(&format!("{base}  - {{id: c, uri: /c, upstream_id: u}}\n")),
            None
        );
        assert_eq!(
            patch(&base.replace("  - {id: b, uri: /b, upstream_id: u}\n", "")),
            None
        );
        assert_eq!(patch(&base.replace("workers: 1", "workers: 2")), None);
        assert_eq!(patch(&format!("{base}consumers: []\n")), None);
    }
}
