//! `file-logger`: appends log entries to a file, one JSON line each, as APISIX's
//! `file-logger`.
//!
//! `{path, match}` and the loggers' common fields (`logger/mod.rs`); `path` may come from the
//! plugin's metadata instead. Entries go through the batch processor like every logger's
//! (defaults here: 1000 entries, or one second without a new one), and each batch is one
//! `write` to the file, opened with `O_APPEND` by each worker, so lines of different workers
//! never interleave. SIGUSR1 (logrotate's `postrotate`) reopens the file by its path, as it
//! does the access log. A file that cannot be opened or written fails the batch, counted and
//! reported like a log server's failure.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::plugin::{LocalFuture, parse_config};

use crate::logger::{Failed, Kind, Sink};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    path: Option<String>,
}

const KIND: Kind = Kind {
    batch: (1000, 1),
    metadata: &["path"],
    check_metadata: Some(check_path),
    ..Kind::named("file-logger", 399, "file logger")
};

crate::logger::factory!(KIND, Config, own);

/// Its own fields, checked, as its sink.
fn own(own: &Value, given: &crate::logger::Given<'_>, v: &mut Validator) -> Option<(Arc<dyn Sink>, Option<usize>)> {
    let c: Config = parse_config(own, v)?;
    let from_metadata = given.metadata.own.get("path").and_then(Value::as_str);
    let Some(path) = c.path.or_else(|| from_metadata.map(str::to_owned)) else {
        v.error_at(
            "path",
            "is required, here or in the plugin's plugin_metadata",
        );
        return None;
    };
    if path.is_empty() || path.contains('\0') {
        v.error_at("path", "must be a file's path");
        return None;
    }
    Some((Arc::new(FileSink { path }) as Arc<dyn Sink>, None))
}


/// The metadata's `path`: a file's path.
fn check_path(own: &serde_json::Map<String, Value>, v: &mut Validator) -> bool {
    match own.get("path") {
        None => true,
        Some(Value::String(p)) if !p.is_empty() && !p.contains('\0') => true,
        Some(_) => {
            v.error_at("path", "must be a file's path");
            false
        }
    }
}

struct FileSink {
    path: String,
}

thread_local! {
    /// This worker's open files, by path, with the `REOPEN_LOGS` generation they were opened at.
    static FILES: RefCell<FxHashMap<String, (File, u64)>> = RefCell::new(FxHashMap::default());
}

impl Sink for FileSink {
    /// A line of the file.
    fn envelope(&self, e: crate::logger::Logged<'_>) -> Vec<u8> {
        let mut line = e.json();
        line.push(b'\n');
        line
    }

    fn send<'a>(&'a self, batch: &'a [Bytes]) -> LocalFuture<'a, Result<(), Failed>> {
        let generation = sluice_core::REOPEN_LOGS.load(Ordering::Relaxed);
        let written = FILES.with_borrow_mut(|files| {
            if files.get(&self.path).is_none_or(|(_, g)| *g != generation) {
                let f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)
                    .map_err(|e| format!("open {}: {e}", self.path))?;
                files.insert(self.path.clone(), (f, generation));
            }
            let (f, _) = files.get_mut(&self.path).expect("opened above");
            f.write_all(&batch.concat()).map_err(|e| {
                // Opened again at the next batch: the file may have been replaced.
                let why = format!("write {}: {e}", self.path);
                files.remove(&self.path);
                why
            })
        });
        Box::pin(std::future::ready(written.map_err(Failed::all)))
    }
}
