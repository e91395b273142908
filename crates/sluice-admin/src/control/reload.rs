//! Reloads: a whole document or route changes compiled, then installed; the file and etcd
//! caught up with; what is held while a file is refused or being written.

use std::sync::atomic::Ordering;

use serde_json::Value;
use sluice_config::{ConfigError, ConfigErrors, RouteChange, RouteContext};
use tracing::{debug, info, warn};

use super::doc::{Doc, Item, hash, route_diff};
use super::stats::Change;
use super::*;

impl Control {
    /// Compiles `doc` whole.
    pub(super) fn prepare_full(&self, doc: Doc) -> Result<Ready, ConfigErrors> {
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
    pub(super) fn adopt(
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
    pub(super) fn prepare_routes(
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
    pub(super) fn install(&self, state: &mut State, ready: Ready) -> u64 {
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

    pub(super) fn reload_as(&self, trigger: Option<&str>) -> Result<Reloaded, ConfigErrors> {
        // Read under the lock admin writes hold while they save: text read before an admin
        // write and applied after it would undo that write.
        let mut state = self.state.lock();
        let outcome = self.reload_locked(&mut state, trigger, trigger.is_some());
        self.publish_held(&state);
        outcome
    }

    /// `force`: a refused text is checked again even when it has not changed (what it refers
    /// to may have: a certificate file copied since, etcd back).
    pub(super) fn reload_locked(
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
    pub(super) fn reload_text(
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
    pub(super) fn catch_up_with_file(&self, state: &mut State) -> Result<(), AdminError> {
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
    pub(super) fn publish_held(&self, state: &State) {
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
    pub(super) fn apply_patch(
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

    pub(super) fn applied(&self, version: u64) {
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
}
