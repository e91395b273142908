//! The files a configuration names (certificates, keys, CA bundles): applied when they are
//! replaced in place, on an operator's reload at once, and by the watcher once they hold
//! still. Owns: the watcher's rule (two looks alike) and what it remembers of a refusal.

use std::sync::atomic::Ordering;
use std::time::Instant;

use sluice_config::ConfigErrors;
use tracing::info;

use super::{Control, Origin, Reloaded, State};

impl Control {
    /// Applies the files the configuration in service names (certificates, keys, CA bundles)
    /// that changed since it was compiled: the configuration in service is compiled again
    /// with them, whole, and put in service only if it compiles (a key that does not go with
    /// its certificate is refused; the files in service keep serving).
    ///
    /// Called every second by the watcher (`trigger` None): a change is applied once a second
    /// look finds the files as the first did, so that a file being written is never applied;
    /// a refused change is not tried again until the files change again. An operator's
    /// reload (`trigger`: SIGHUP, `POST /admin/reload`) applies at once.
    pub fn reload_files(&self) -> Result<Reloaded, ConfigErrors> {
        let mut state = self.state.lock();
        self.reload_files_locked(&mut state, None)
    }

    /// How often the watcher looks at the files the configuration names (one second unless
    /// [`Control::set_files_poll`] said otherwise).
    pub fn files_poll(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.files_poll_ms.load(Ordering::Relaxed))
    }

    /// Changes how often the watcher looks at the files the configuration names (a test that
    /// drives [`Control::reload_files`] itself sets it out of the way).
    pub fn set_files_poll(&self, every: std::time::Duration) {
        let ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX);
        self.files_poll_ms.store(ms.max(1), Ordering::Relaxed);
    }

    pub(super) fn reload_files_locked(
        &self,
        state: &mut State,
        trigger: Option<&str>,
    ) -> Result<Reloaded, ConfigErrors> {
        let changed = self.target.changed_files();
        if changed.is_empty() {
            state.files_pending.clear();
            state.files_refused.clear();
            return Ok(Reloaded::Unchanged);
        }
        if trigger.is_none() {
            if changed == state.files_refused {
                return Ok(Reloaded::Unchanged);
            }
            if changed != state.files_pending {
                state.files_pending = changed;
                return Ok(Reloaded::Waiting);
            }
        }
        state.files_pending.clear();
        let names: Vec<&str> = changed.iter().map(|(p, _)| p.as_str()).collect();
        let source = format!(
            "{} ({}: {} changed)",
            self.store.describe(),
            trigger.unwrap_or("watch"),
            names.join(", ")
        );
        let started = Instant::now();
        let origin = Origin {
            name: &source,
            text: None,
        };
        match self.prepare_full(state.doc.clone()) {
            Ok(ready) => {
                let version = self.install(state, ready);
                state.files_refused.clear();
                self.stats.last_error.lock().take();
                info!(version, %source, elapsed = ?started.elapsed(), "files reloaded: the configuration in service now uses them");
                Ok(Reloaded::Applied(version))
            }
            Err(errors) => {
                state.files_refused = changed;
                Err(self.refused(&origin, errors))
            }
        }
    }
}
