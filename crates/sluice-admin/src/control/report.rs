//! What the control plane records about the changes it applied or refused, and how it reports
//! them (status and metrics).

use std::sync::atomic::Ordering;

use sluice_config::ConfigErrors;
use tracing::warn;

use super::stats::{Change, EtcdView, RECENT, StatsView};
use super::*;

impl Control {
    pub(super) fn remember(&self, c: Change) {
        let mut r = self.stats.recent.lock();
        if r.len() == RECENT {
            r.pop_front();
        }
        r.push_back(c);
    }

    /// Records and logs a configuration from `source` that was not applied. With the whole
    /// text at hand (file mode), the record says every error of it, of every stage, in the
    /// file's order (the compilation that failed stopped at its first failing stage).
    pub(super) fn refused(&self, source: &Origin<'_>, errors: ConfigErrors) -> ConfigErrors {
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

    pub(super) fn rejected(&self, errors: &ConfigErrors) {
        self.stats.failed.fetch_add(1, Ordering::Relaxed);
        *self.stats.last_error.lock() = Some(errors.to_string());
        self.remember(Change {
            at: now(),
            result: "rejected",
            version: self.stats.version.load(Ordering::Relaxed),
            error: Some(errors.to_string()),
        });
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
            w.family(
                "sluice_config_stale_seconds",
                "gauge",
                "Seconds the configuration in service has gone unchecked against etcd (etcd unreachable); 0 when in step.",
            );
            w.sample(
                "sluice_config_stale_seconds",
                &[],
                e.stale_for_s.unwrap_or(0),
            );
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
                stale_for_s: self.stale().map(|(d, _)| d.as_secs()),
            }),
        }
    }
}
