//! Cluster mode's background thread: keeps a node's configuration in step with etcd.
//!
//! It reads everything under the prefix, then watches it from the revision read. Each batch of
//! changes is applied as it arrives (route changes alone, anything else whole). When etcd
//! cannot be reached the node keeps serving what it has, says so (log, `/admin/status`,
//! `sluice_etcd_connected`), and retries with backoff; once etcd answers again it reads
//! everything again, so changes made meanwhile are picked up. The configuration in service is
//! written to a local cache file (at most once a second) so that a node can start while etcd
//! is down.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::warn;

use crate::control::Control;
use crate::etcd::{Etcd, EtcdError, Event};
use crate::store::{FileStore, Store};

/// What the cluster thread needs.
#[derive(Debug)]
pub struct Cluster {
    /// The client.
    pub client: Etcd,
    /// Key prefix (`/sluice`).
    pub prefix: String,
    /// Where to keep the local cache, if anywhere.
    pub cache: Option<PathBuf>,
}

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// How often a node asks etcd whether it is still there while its watch is quiet.
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// Runs the cluster loop on `rt` in a thread of its own until `stop` turns true.
pub fn spawn(
    cluster: Cluster,
    control: Arc<Control>,
    rt: tokio::runtime::Runtime,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("sluice-etcd".into())
        .spawn(move || {
            rt.block_on(async move {
                let cache_task = cluster
                    .cache
                    .clone()
                    .map(|path| tokio::spawn(write_cache(path, control.clone())));
                tokio::select! {
                    () = run(&cluster, control.clone()) => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
                if let Some(t) = cache_task {
                    t.abort();
                }
                // What changed in the last second is not lost to the cache.
                if let (Some(path), Some(text)) = (&cluster.cache, control.cache_text())
                    && let Err(e) = FileStore::new(path).save(&text)
                {
                    warn!(error = %e, "cannot write the etcd cache");
                }
            });
        })
}

async fn run(cluster: &Cluster, control: Arc<Control>) {
    // Batches go to one applier task, in order; applying runs on the blocking pool so that this
    // runtime stays free for the admin API's writes while a batch compiles.
    let (tx, mut rx) = mpsc::unbounded_channel::<(i64, Vec<Event>)>();
    let applier = control.clone();
    tokio::spawn(async move {
        while let Some((revision, events)) = rx.recv().await {
            let c = applier.clone();
            let _ = tokio::task::spawn_blocking(move || c.apply_events(revision, events)).await;
        }
    });
    let prefix = format!("{}/", cluster.prefix);
    let mut backoff = BACKOFF_MIN;
    loop {
        let (revision, kvs) = match cluster.client.range_prefix(&prefix).await {
            Ok(r) => r,
            Err(e) => {
                control.etcd_reachable(Err(e.to_string()));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        let c = control.clone();
        let _ = tokio::task::spawn_blocking(move || c.resync(revision, kvs)).await;
        control.etcd_reachable(Ok(()));
        backoff = BACKOFF_MIN;
        let tx = tx.clone();
        let watch = cluster
            .client
            .watch(&prefix, revision + 1, move |rev, events| {
                let _ = tx.send((rev, events));
            });
        let err = tokio::select! {
            e = watch => e,
            e = probe(&cluster.client, &cluster.prefix) => e,
        };
        match err {
            EtcdError::Compacted(r) => warn!(
                revision = r,
                "etcd compacted the history being watched; reading everything again"
            ),
            e => control.etcd_reachable(Err(e.to_string())),
        }
        tokio::time::sleep(backoff).await;
    }
}

/// Asks etcd every [`PROBE_EVERY`] for one key (a linearizable read: the member must have a
/// quorum behind it) until it fails. A watch says nothing when etcd is gone without the
/// connection closing (a partition drops the packets; a stopped process keeps its sockets
/// open; a member cut off from the others has nothing to send): the probe's failure ends the
/// watch, and the node says it is stale within `PROBE_EVERY` and the call's timeout.
async fn probe(client: &Etcd, key: &str) -> EtcdError {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        if let Err(e) = client.probe(key).await {
            return e;
        }
    }
}

/// Writes the configuration in service to `path` when it changed, at most once a second.
async fn write_cache(path: PathBuf, control: Arc<Control>) {
    let store = FileStore::new(path);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let c = control.clone();
        let s = store.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(text) = c.cache_text()
                && let Err(e) = s.save(&text)
            {
                warn!(error = %e, "cannot write the etcd cache");
            }
        })
        .await;
    }
}
