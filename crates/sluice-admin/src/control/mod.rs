//! The configuration as a document, and every change to it: admin writes, file reloads. A
//! change is validated by the same code as a file, checked against the rest of the
//! configuration, compiled, persisted, and only then put in service; any failure leaves the
//! running configuration untouched.
//!
//! Owns: the [`Control`] type and its reload orchestration (compile, install, statistics),
//! the [`Target`] it drives, resource [`Kind`]s and [`AdminError`]. Split by concern: `doc`
//! (the document model), `layout` (reading the file layout Sluice writes), `crud` (admin
//! calls), `refs` (reference checks), `etcd_sync` (cluster mode), `files` (the certificate and
//! key files a configuration names); `kind` (resource kinds) and `link` (the link to etcd)
//! are leaves below them all.

mod crud;
mod doc;
pub(crate) mod etcd_sync;
mod files;
mod kind;
mod layout;
mod link;
mod refs;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::etcd::EtcdError;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use sluice_config::{Config, ConfigError, ConfigErrors, PluginCatalog, RouteChange, RouteContext};
use tracing::{debug, info, warn};

use crate::store::{Signature, Store};

pub use doc::render;
use doc::{Doc, Item, hash, route_diff};
pub use kind::Kind;
pub use layout::parse_doc;
pub use link::{EtcdLink, RESOURCES_IN_ETCD};

/// What the control plane drives: the data plane, seen through compile and install.
pub trait Target: Send + Sync {
    /// Compiles `cfg` without putting it in service.
    fn prepare(&self, cfg: &Config) -> Result<Box<dyn Prepared>, ConfigErrors>;
    /// Compiles changes to validated routes against the configuration in service.
    fn prepare_routes(&self, changes: Vec<RouteChange>) -> Result<Box<dyn Prepared>, ConfigErrors>;
    /// The health of upstream `id`'s nodes, as the data plane sees them. None: no such
    /// upstream in service.
    fn upstream_health(&self, _id: &str) -> Option<serde_json::Value> {
        None
    }
    /// Writes the data plane's metric families.
    fn render_metrics(&self, _w: &mut sluice_core::exposition::Writer<'_>) {}
    /// The files the configuration in service was compiled from (certificates, keys, CA
    /// bundles) that hold something else now, each with its signature now.
    fn changed_files(&self) -> Vec<(String, sluice_config::FileSig)> {
        Vec::new()
    }
}

/// A compiled configuration, ready to go. It may hold the data plane's change lock: install or
/// drop it promptly.
pub trait Prepared {
    /// Puts it in service (one atomic swap); returns its version.
    fn install(self: Box<Self>) -> u64;
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
    /// Admin API writes refused (4xx answers; the configuration in service did not change).
    admin_refused: AtomicU64,
    last_admin_refusal: Mutex<Option<String>>,
    last_applied: AtomicU64,
    /// Why the file is not what is in service, while it is not.
    held: Mutex<Option<String>>,
    /// The last configuration changes, newest last (at most `RECENT`).
    recent: Mutex<std::collections::VecDeque<Change>>,
}

/// Changes kept for `GET /admin/status` and the dashboard.
const RECENT: usize = 20;

/// One configuration change: applied, or refused with why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Change {
    /// When (Unix seconds).
    pub at: u64,
    /// `applied`, `rejected`, or `accepted` (a refused file put back as it was, or fixed to
    /// what is in service: nothing to apply, nothing refused any more).
    pub result: &'static str,
    /// The version in service after it.
    pub version: u64,
    /// Why it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A snapshot of [`Stats`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct StatsView {
    /// Version of the configuration in service.
    pub version: u64,
    /// Changes applied (admin writes and reloads).
    pub applied: u64,
    /// Reloads refused: a file, etcd or certificate change that does not load (not admin
    /// writes, which are `admin_refused`).
    pub rejected: u64,
    /// The last refused reload, while no reload was applied since.
    pub last_error: Option<String>,
    /// Admin API writes refused with a 4xx: the caller was told why, and the configuration in
    /// service did not change.
    pub admin_refused: u64,
    /// The last admin write refused, with the paths of the body that was sent.
    pub last_admin_refusal: Option<String>,
    /// File mode: why the file's text is not the configuration in service, while it is not
    /// (refused, still being written without its `#END`, truncated); admin writes get 409 then.
    pub file_held: Option<String>,
    /// The last configuration changes (at most 20), newest last.
    pub recent: Vec<Change>,
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
    saved: Mutex<Signature>,
    /// Settings that replace the file's for this run (see [`Control::with_overrides`]).
    overrides: Map<String, Value>,
    /// How often the watcher looks at the files the configuration names, in milliseconds.
    files_poll_ms: AtomicU64,
}

impl Control {
    /// The health of upstream `id`'s nodes (`GET /admin/upstreams/<id>/health`).
    pub fn upstream_health(&self, id: &str) -> Option<serde_json::Value> {
        self.target.upstream_health(id)
    }
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
    /// Why the store text last seen was not applied (refused, or a file still being written),
    /// while it stays as it is: an admin write must not replace it.
    held: Option<Held>,
    /// The text last seen ended with APISIX's `#END` marker: a file that does is applied only
    /// once the marker is back (a file written in place is not applied half-written).
    end_marker: bool,
    /// File mode: the file's signature when the text in service was read or written, to see
    /// without reading it whether the file holds something else.
    in_service_sig: Signature,
    /// Cluster mode: the revision of the guard key every write goes through, as last seen.
    guard_rev: i64,
    /// Files named by the configuration that the watcher saw changed, as it saw them: applied
    /// when the next look finds them the same (a file being written is not applied).
    files_pending: Vec<(String, sluice_config::FileSig)>,
    /// Changed files whose compilation was refused, as they were: not tried again by the
    /// watcher until they change again (a signal or `POST /admin/reload` tries again).
    files_refused: Vec<(String, sluice_config::FileSig)>,
}

/// Why the text of the store is not the one in service.
#[derive(Debug, Clone)]
enum Held {
    /// It was refused, with these errors.
    Rejected(ConfigErrors),
    /// It is being written: it no longer ends with `#END`.
    Unfinished,
    /// It holds no setting and no resource while routes are in service (a truncated file).
    Empty,
}

impl Held {
    fn describe(&self) -> String {
        match self {
            Held::Rejected(e) => format!(
                "was refused ({}; GET /admin/status shows them)",
                e.count_text()
            ),
            Held::Unfinished => "is being written: it does not end with #END yet".into(),
            Held::Empty => "has no resource list while routes are in service (truncated?)".into(),
        }
    }
}

/// Where a change comes from: its name in the logs, and its whole text when it is one (file
/// mode), to report every error of a refused one.
pub(crate) struct Origin<'a> {
    pub(crate) name: &'a str,
    pub(crate) text: Option<&'a str>,
}

impl std::fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Every error of configuration `text` with the command line's `overrides`, of every stage
/// that can run, in its order (see [`sluice_config::all_errors`]), `compile` being the data
/// plane's compilation; `found` (what a load that stopped at its first failing stage said)
/// when that finds none. The control plane and a node's start report refusals with it.
pub fn every_error(
    text: &str,
    overrides: &Map<String, Value>,
    catalog: &dyn PluginCatalog,
    found: ConfigErrors,
    compile: &mut dyn FnMut(&Config) -> Result<(), ConfigErrors>,
) -> ConfigErrors {
    let all = sluice_config::all_errors(
        text,
        &|doc| apply_overrides(doc, overrides),
        catalog,
        compile,
    );
    if all.is_empty() { found } else { all }
}

/// Replaces settings of `doc` with `overrides`; a mapping (`admin`) is merged key by key.
pub fn apply_overrides(doc: &mut Map<String, Value>, overrides: &Map<String, Value>) {
    for (key, value) in overrides {
        match (doc.get_mut(key), value) {
            (Some(Value::Object(current)), Value::Object(changes)) => {
                current.extend(changes.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            (_, value) => {
                doc.insert(key.clone(), value.clone());
            }
        }
    }
}

/// What a look at the store found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reloaded {
    /// Applied: the new version in service.
    Applied(u64),
    /// The same text as before, or a new text that changes nothing in service.
    Unchanged,
    /// Not applied yet: a file without its `#END` marker, or an empty file.
    Waiting,
}

/// Whether the text ends with APISIX's `#END` marker (its last line that is not blank).
fn ends_with_end_marker(text: &str) -> bool {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .is_some_and(|l| l == "#END")
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Node settings a reload cannot change (they are taken at start).
/// The message that refuses an empty file while routes are in service.
const EMPTY_FILE: &str = "the file has no resource list at all (empty, or only settings) while routes are in service: refused, as a truncated file would be; to serve no routes, write `routes: []`";

const STARTUP_ONLY: &[&str] = &["listen", "workers", "admin", "origin", "status", "metrics"];

/// A change ready to go: compiled, not yet in service.
enum Ready {
    /// A whole configuration, with its document.
    Full {
        prepared: Box<dyn Prepared>,
        doc: Doc,
        cx: Box<RouteContext>,
        /// What loads but is probably not meant (logged once it is in service).
        warnings: Vec<ConfigError>,
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
            held: None,
            end_marker: ends_with_end_marker(text),
            in_service_sig: store.watch_path().and_then(crate::store::signature),
            guard_rev: 0,
            files_pending: Vec::new(),
            files_refused: Vec::new(),
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
            overrides: Map::new(),
            files_poll_ms: AtomicU64::new(crate::store::FILES_POLL.as_millis() as u64),
        })
    }

    /// Where the configuration is.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Checks resource lists against the node settings in service (nothing applied).
    pub fn check_resources(&self, lists: Map<String, Value>) -> Result<(), ConfigErrors> {
        let mut doc = self.state.lock().doc.settings.clone();
        doc.extend(lists);
        self.check(doc).map(|_| ())
    }

    /// Checks a whole document without applying it.
    pub fn check(&self, doc: Map<String, Value>) -> Result<Config, ConfigErrors> {
        let cfg = sluice_config::load_value_with(Value::Object(doc), &*self.catalog)?;
        // Compiling catches what validation cannot (names that do not resolve).
        drop(self.target.prepare(&cfg)?);
        Ok(cfg)
    }

    /// Settings that replace the file's for this run (the command line's `--listen`,
    /// `--admin-listen`, `--no-admin`, `--origin-listen`): every whole configuration is checked
    /// with them, as the first one was; they are never written into the file.
    pub fn with_overrides(mut self, overrides: Map<String, Value>) -> Control {
        self.overrides = overrides;
        self
    }

    /// Compiles `doc` whole.
    fn prepare_full(&self, doc: Doc) -> Result<Ready, ConfigErrors> {
        let mut map = doc.to_map();
        apply_overrides(&mut map, &self.overrides);
        let cfg = sluice_config::load_value_with(Value::Object(map), &*self.catalog)?;
        let prepared = self.target.prepare(&cfg)?;
        Ok(Ready::Full {
            prepared,
            doc,
            cx: Box::new(RouteContext::of(&cfg)),
            warnings: sluice_config::warnings(&cfg, &*self.catalog),
        })
    }

    /// Puts `next` in service in place of the document in service: its route changes alone
    /// when that is all that differs, whole otherwise, nothing when nothing differs (the
    /// document is still adopted, for what only it holds: revisions). Logs the outcome.
    fn adopt(
        &self,
        state: &mut State,
        next: Doc,
        source: &Origin<'_>,
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
            Ok(mut ready) => {
                let warnings = match &mut ready {
                    Ready::Full { warnings, .. } => std::mem::take(warnings),
                    Ready::Routes { .. } => Vec::new(),
                };
                let version = self.install(state, ready);
                info!(version, %source, elapsed = ?started.elapsed(), "configuration reloaded");
                for w in warnings {
                    warn!(%source, "{w}");
                }
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
            Ready::Full {
                prepared, doc, cx, ..
            } => {
                let frozen: Vec<&str> = STARTUP_ONLY
                    .iter()
                    .copied()
                    .filter(|k| doc.settings.get(*k) != state.doc.settings.get(*k))
                    .collect();
                if !frozen.is_empty() {
                    warn!(settings = %frozen.join(", "), "these settings changed in {} but take effect only after a restart", self.store.describe());
                }
                state.doc = doc;
                state.routes_cx = *cx;
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
        self.reload_as(None).map(|r| match r {
            Reloaded::Applied(v) => Some(v),
            _ => None,
        })
    }

    /// Re-reads the store on an operator's request (`trigger`: "SIGHUP", "POST /admin/reload")
    /// and logs the outcome whatever it is: applied, unchanged, waiting, or refused again.
    pub fn reload_now(&self, trigger: &str) -> Result<Reloaded, ConfigErrors> {
        self.reload_as(Some(trigger))
    }

    fn reload_as(&self, trigger: Option<&str>) -> Result<Reloaded, ConfigErrors> {
        // Read under the lock admin writes hold while they save: text read before an admin
        // write and applied after it would undo that write.
        let mut state = self.state.lock();
        let outcome = self.reload_locked(&mut state, trigger, trigger.is_some());
        self.publish_held(&state);
        outcome
    }

    /// `force`: a refused text is checked again even when it has not changed (what it refers
    /// to may have: a certificate file copied since, etcd back).
    fn reload_locked(
        &self,
        state: &mut State,
        trigger: Option<&str>,
        force: bool,
    ) -> Result<Reloaded, ConfigErrors> {
        let source = self.store.describe();
        // Taken before the read: a write during the read shows as a change next time.
        let sig = self.store.watch_path().and_then(crate::store::signature);
        let text = match self.store.load() {
            Ok(t) => t,
            Err(e) => {
                warn!("{e}; the previous configuration keeps serving");
                return Err(ConfigError::new("", e).into());
            }
        };
        let version = self.stats.version.load(Ordering::Relaxed);
        let h = hash(&text);
        let recheck = force && matches!(state.held, Some(Held::Rejected(_) | Held::Empty));
        if h == state.text_hash && !recheck {
            return match &state.held {
                Some(Held::Rejected(errors)) => {
                    if let Some(t) = trigger {
                        warn!(%source, version, errors = errors.one_line(), "{t}: the file is unchanged and still refused ({}); the previous configuration keeps serving", errors.count_text());
                    }
                    Err(errors.clone())
                }
                Some(held) => {
                    if let Some(t) = trigger {
                        info!(%source, version, "{t}: not applied: the file {}", held.describe());
                    }
                    Ok(Reloaded::Waiting)
                }
                None => {
                    state.in_service_sig = sig;
                    let Some(t) = trigger else {
                        debug!(%source, "configuration unchanged");
                        return Ok(Reloaded::Unchanged);
                    };
                    let files = self.reload_files_locked(state, Some(t))?;
                    if files == Reloaded::Unchanged {
                        info!(%source, version, "{t}: configuration unchanged, and the files it names too");
                    }
                    Ok(files)
                }
            };
        }
        state.text_hash = h;
        let has_marker = ends_with_end_marker(&text);
        if state.end_marker && !has_marker && self.etcd.is_none() {
            // APISIX's rule: a file that ended with #END is complete only with it.
            info!(%source, version, "the file no longer ends with #END: waiting for the rest of it before applying it");
            state.held = Some(Held::Unfinished);
            return Ok(Reloaded::Waiting);
        }
        // The log lines of what follows name what asked for it.
        let source = match trigger {
            Some(t) => format!("{source} ({t})"),
            None => source,
        };
        let result = self.reload_text(state, &text, &source);
        match &result {
            Ok(r) => {
                let was = state.held.take();
                state.end_marker = has_marker;
                state.in_service_sig = sig;
                if let Some(Held::Rejected(_) | Held::Empty) = was {
                    // Fixed, or put back as it was: say so, or the last word in the log and on
                    // the dashboard would stay the refusal.
                    let version = self.stats.version.load(Ordering::Relaxed);
                    info!(%source, version, "the file is accepted again");
                    if *r == Reloaded::Unchanged {
                        self.remember(Change {
                            at: now(),
                            result: "accepted",
                            version,
                            error: None,
                        });
                    }
                } else if *r == Reloaded::Unchanged {
                    match trigger {
                        Some(t) => {
                            info!(%source, version, "{t}: the file changed, the configuration in service did not")
                        }
                        None => {
                            debug!(%source, "the file changed, the configuration in service did not")
                        }
                    }
                }
                self.stats.last_error.lock().take();
            }
            Err(errors) if errors.iter().any(|e| e.message == EMPTY_FILE) => {
                state.held = Some(Held::Empty);
            }
            Err(errors) => state.held = Some(Held::Rejected(errors.clone())),
        }
        // A change of routes alone did not read the certificate files again: an operator's
        // reload does.
        if let (Some(t), Ok(_)) = (trigger, &result)
            && let Reloaded::Applied(v) = self.reload_files_locked(state, Some(t))?
        {
            return Ok(Reloaded::Applied(v));
        }
        result
    }

    /// Applies a new text of the store (the lock held).
    fn reload_text(
        &self,
        state: &mut State,
        text: &str,
        source: &str,
    ) -> Result<Reloaded, ConfigErrors> {
        let applied = |r: Option<u64>| r.map_or(Reloaded::Unchanged, Reloaded::Applied);
        let source = &Origin {
            name: source,
            // The file is the whole configuration only without etcd.
            text: self.etcd.is_none().then_some(text),
        };
        if let Some(link) = &self.etcd {
            // Cluster mode: the file holds node settings; resources are read again from etcd.
            let next = Doc::parse(text, None).and_then(|file| {
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
                Ok(next) => self.adopt(state, next, source).map(applied),
                Err(errors) => Err(self.refused(source, errors)),
            };
        }
        if let Some(patch) = state.doc.line_patch(text) {
            return self.apply_patch(state, patch, source).map(applied);
        }
        match Doc::parse(text, Some(&state.doc)) {
            Ok(next)
                if next.lists.is_empty()
                    && [Kind::Routes, Kind::StreamRoutes]
                        .iter()
                        .any(|k| state.doc.list(*k).is_some_and(|l| !l.is_empty())) =>
            {
                // An empty file is more often a truncated one than a wish to serve nothing.
                Err(self.refused(source, ConfigError::new("", EMPTY_FILE).into()))
            }
            Ok(next) => self.adopt(state, next, source).map(applied),
            Err(errors) => Err(self.refused(source, errors)),
        }
    }

    /// File mode, before an admin write: the file must hold what is in service, or the write
    /// (which rewrites the file from the document in service) would throw away what it holds.
    /// A valid edit not applied yet (the watcher polls every 10 ms) is applied first, and the
    /// write goes on top of it; a refused or unfinished edit makes the write a conflict.
    fn catch_up_with_file(&self, state: &mut State) -> Result<(), AdminError> {
        let Some(path) = self.store.watch_path() else {
            return Ok(());
        };
        if self.etcd.is_some() {
            return Ok(());
        }
        let sig = crate::store::signature(path);
        if sig.is_some() && sig == state.in_service_sig && state.held.is_none() {
            return Ok(());
        }
        // A file written in place must hold still for a moment before it is read, as the
        // watcher requires: a copy in progress can be valid YAML with half the routes.
        let in_place = sig
            .zip(state.in_service_sig)
            .is_some_and(|(now, before)| now.3 == before.3);
        if in_place {
            std::thread::sleep(crate::store::POLL);
            if crate::store::signature(path) != sig {
                return Err(AdminError::Conflict(format!(
                    "the configuration file {} is being written; nothing changed, retry",
                    self.store.describe()
                )));
            }
        }
        let outcome = self.reload_locked(state, None, true);
        self.publish_held(state);
        match (&state.held, outcome) {
            (None, Ok(_)) => Ok(()),
            (held, _) => Err(AdminError::Conflict(format!(
                "the configuration file {} has an edit that {}; the admin API does not overwrite it: fix or revert the file first (nothing changed)",
                self.store.describe(),
                held.as_ref()
                    .map_or_else(|| "cannot be read".to_owned(), Held::describe)
            ))),
        }
    }

    /// Shows why the file is not the configuration in service in `GET /admin/status`.
    fn publish_held(&self, state: &State) {
        *self.stats.held.lock() = state.held.as_ref().map(|h| {
            format!(
                "the configuration file {} {}",
                self.store.describe(),
                h.describe()
            )
        });
    }

    /// The file's signature when the text given to [`Control::new`] was read (taken before the
    /// read): an edit made while the node started is then seen as one.
    pub fn set_loaded_signature(&self, sig: Signature) {
        self.state.lock().in_service_sig = sig;
    }

    /// Applies resource lines changed in place (see [`Doc::line_patch`]): routes alone when
    /// only routes changed, the document patched in place once they are in service; anything
    /// else through a whole compilation.
    fn apply_patch(
        &self,
        state: &mut State,
        patch: Vec<(Kind, usize, Item)>,
        source: &Origin<'_>,
    ) -> Result<Option<u64>, ConfigErrors> {
        // Lines rewritten without a change of value need no compiling.
        let patch: Vec<_> = patch
            .into_iter()
            .filter_map(|(kind, i, item)| {
                let list = state.doc.list_mut(kind);
                let (_, old) = list.get_index_mut(i)?;
                if old.same(&item) {
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
                Some((*i, id.clone(), Some(item.value())))
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

    fn applied(&self, version: u64) {
        self.stats.version.store(version, Ordering::Relaxed);
        self.stats.ok.fetch_add(1, Ordering::Relaxed);
        self.stats.last_applied.store(now(), Ordering::Relaxed);
        self.remember(Change {
            at: now(),
            result: "applied",
            version,
            error: None,
        });
    }

    fn remember(&self, c: Change) {
        let mut r = self.stats.recent.lock();
        if r.len() == RECENT {
            r.pop_front();
        }
        r.push_back(c);
    }

    /// Records and logs a configuration from `source` that was not applied. With the whole
    /// text at hand (file mode), the record says every error of it, of every stage, in the
    /// file's order (the compilation that failed stopped at its first failing stage).
    fn refused(&self, source: &Origin<'_>, errors: ConfigErrors) -> ConfigErrors {
        let errors = match source.text {
            Some(text) if !errors.iter().any(|e| e.message == EMPTY_FILE) => {
                self.every_error(text, errors)
            }
            _ => errors,
        };
        self.rejected(&errors);
        // One record, one line: the errors are one field, last (nothing is glued to them).
        warn!(
            version = self.stats.version.load(Ordering::Relaxed),
            errors = errors.one_line(),
            "{source}: configuration rejected ({}); the previous one keeps serving",
            errors.count_text()
        );
        errors
    }

    /// Records an admin write refused with `errors` (paths of the body that was sent): apart
    /// from refused reloads, as the caller was answered and nothing in service changed.
    pub(crate) fn admin_refused(&self, call: &str, errors: &ConfigErrors) {
        self.stats.admin_refused.fetch_add(1, Ordering::Relaxed);
        *self.stats.last_admin_refusal.lock() = Some(format!("{call}: {}", errors.one_line()));
    }

    /// Every error of configuration `text`, of every stage that can run, in its order (see
    /// [`sluice_config::all_errors`]), compiled with the data plane; `found` (what a load that
    /// stopped at its first failing stage said) when that finds none.
    pub fn every_error(&self, text: &str, found: ConfigErrors) -> ConfigErrors {
        every_error(text, &self.overrides, &*self.catalog, found, &mut |cfg| {
            self.target.prepare(cfg).map(drop)
        })
    }

    fn rejected(&self, errors: &ConfigErrors) {
        self.stats.failed.fetch_add(1, Ordering::Relaxed);
        *self.stats.last_error.lock() = Some(errors.to_string());
        self.remember(Change {
            at: now(),
            result: "rejected",
            version: self.stats.version.load(Ordering::Relaxed),
            error: Some(errors.to_string()),
        });
    }

    /// The signature of the file as the control plane last wrote it.
    pub fn saved_signature(&self) -> Signature {
        *self.saved.lock()
    }

    /// Cluster mode: whether etcd is configured.
    pub fn is_clustered(&self) -> bool {
        self.etcd.is_some()
    }

    /// Writes every metric family: the control plane's (configuration, reloads, etcd), then
    /// the data plane's.
    pub fn render_metrics(&self, w: &mut sluice_core::exposition::Writer<'_>) {
        let s = self.stats();
        w.family(
            "sluice_config_version",
            "gauge",
            "Version of the configuration in service.",
        );
        w.sample("sluice_config_version", &[], s.version);
        w.family(
            "sluice_config_reload_total",
            "counter",
            "Configuration changes: applied (reloads and admin writes), rejected (reloads of a file, etcd or certificate change that does not load; refused admin writes are sluice_admin_writes_refused_total).",
        );
        w.sample(
            "sluice_config_reload_total",
            &[("result", "applied")],
            s.applied,
        );
        w.sample(
            "sluice_config_reload_total",
            &[("result", "rejected")],
            s.rejected,
        );
        w.family(
            "sluice_admin_writes_refused_total",
            "counter",
            "Admin API writes refused with a 4xx (the configuration in service did not change).",
        );
        w.sample("sluice_admin_writes_refused_total", &[], s.admin_refused);
        w.family(
            "sluice_config_last_applied_timestamp_seconds",
            "gauge",
            "When the configuration in service was applied.",
        );
        w.sample(
            "sluice_config_last_applied_timestamp_seconds",
            &[],
            s.applied_at,
        );
        if let Some(e) = &s.etcd {
            w.family(
                "sluice_etcd_connected",
                "gauge",
                "Whether etcd can be reached (cluster mode).",
            );
            w.sample("sluice_etcd_connected", &[], u8::from(e.connected));
            w.family(
                "sluice_etcd_revision",
                "gauge",
                "The etcd revision the configuration in service reflects.",
            );
            w.sample("sluice_etcd_revision", &[], e.revision);
        }
        self.target.render_metrics(w);
    }

    /// The statistics of configuration changes.
    pub fn stats(&self) -> StatsView {
        StatsView {
            version: self.stats.version.load(Ordering::Relaxed),
            applied: self.stats.ok.load(Ordering::Relaxed),
            rejected: self.stats.failed.load(Ordering::Relaxed),
            last_error: self.stats.last_error.lock().clone(),
            admin_refused: self.stats.admin_refused.load(Ordering::Relaxed),
            last_admin_refusal: self.stats.last_admin_refusal.lock().clone(),
            file_held: self.stats.held.lock().clone(),
            recent: self.stats.recent.lock().iter().cloned().collect(),
            applied_at: self.stats.last_applied.load(Ordering::Relaxed),
            etcd: self.etcd.as_ref().map(|_| EtcdView {
                connected: self.cluster.connected.load(Ordering::Relaxed),
                revision: self.cluster.revision.load(Ordering::Relaxed),
                last_error: self.cluster.last_error.lock().clone(),
            }),
        }
    }
}
