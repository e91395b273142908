//! What the control plane counts about configuration changes, for `GET /admin/status`, the
//! dashboard and the metrics.

use std::sync::atomic::{AtomicI64, AtomicU64};

use parking_lot::Mutex;

/// Reload statistics, for the status endpoint and metrics.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(super) version: AtomicU64,
    pub(super) ok: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) last_error: Mutex<Option<String>>,
    /// Admin API writes refused (4xx answers; the configuration in service did not change).
    pub(super) admin_refused: AtomicU64,
    pub(super) last_admin_refusal: Mutex<Option<String>>,
    pub(super) last_applied: AtomicU64,
    /// Why the file is not what is in service, while it is not.
    pub(super) held: Mutex<Option<String>>,
    /// The last configuration changes, newest last (at most `RECENT`).
    pub(super) recent: Mutex<std::collections::VecDeque<Change>>,
}

/// Changes kept for `GET /admin/status` and the dashboard.
pub(super) const RECENT: usize = 20;

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
    /// Seconds since etcd was last reached, while it cannot be: the configuration in
    /// service may be stale. None when in step.
    pub stale_for_s: Option<u64>,
}

#[derive(Debug, Default)]
pub(super) struct ClusterStats {
    pub(super) connected: std::sync::atomic::AtomicBool,
    pub(super) revision: AtomicI64,
    pub(super) last_error: Mutex<Option<String>>,
    /// When etcd was found unreachable (Unix milliseconds), while it is; 0 when in step.
    pub(super) stale_since_ms: std::sync::atomic::AtomicU64,
    /// The configuration changed since the cache file was written.
    pub(super) cache_dirty: std::sync::atomic::AtomicBool,
}
