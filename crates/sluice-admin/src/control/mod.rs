//! The configuration as a document, and every change to it: admin writes, file reloads. A
//! change is validated by the same code as a file, checked against the rest of the
//! configuration, compiled, persisted, and only then put in service; any failure leaves the
//! running configuration untouched.
//!
//! Owns: the [`Control`] type and its reload orchestration (compile, install, statistics),
//! the [`Target`] it drives, resource [`Kind`]s and [`AdminError`]. Split by concern: `doc`
//! (the document model), `layout` (reading the file layout Sluice writes), `crud` (admin
//! calls), `refs` (reference checks), `etcd_sync` (cluster mode), `files` (the certificate and
//! key files a configuration names), `reload` (Control's reloads), `report` (its records of
//! applied and refused changes, status and metrics); `kind` (resource kinds), `link` (the link
//! to etcd) and `stats` (what is counted) are leaves below them all.

mod crud;
mod doc;
pub(crate) mod etcd_sync;
mod files;
mod kind;
mod layout;
mod link;
mod refs;
mod reload;
mod report;
mod stats;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::etcd::EtcdError;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use sluice_config::{Config, ConfigError, ConfigErrors, PluginCatalog, RouteChange, RouteContext};

use crate::store::{Signature, Store};

pub use doc::render;
use doc::{Doc, hash};
pub use kind::Kind;
pub use layout::parse_doc;
pub use link::{EtcdLink, RESOURCES_IN_ETCD};
pub use stats::{Change, EtcdView, StatsView};
use stats::{ClusterStats, Stats};

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
    /// `etcd.stale_unready_after`.
    stale_unready_after: Option<std::time::Duration>,
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
            stale_unready_after: cfg
                .etcd
                .as_ref()
                .and_then(|e| e.stale_unready_after)
                .map(|d| d.0),
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

    /// The signature of the file as the control plane last wrote it.
    pub fn saved_signature(&self) -> Signature {
        *self.saved.lock()
    }

    /// Cluster mode: whether etcd is configured.
    pub fn is_clustered(&self) -> bool {
        self.etcd.is_some()
    }
}
