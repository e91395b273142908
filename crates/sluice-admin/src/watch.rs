//! Watching the configuration file: its size, modification time and inode are polled every
//! 10 ms (one `stat`). A file replaced by a rename (what tools and most editors do) is applied
//! at once; one written in place, once it has held still for one more poll (an editor that
//! writes in several steps is not caught half-way). An edit is in service within 10 to 20 ms
//! plus the time to apply it. Polling needs no platform notification API, sees atomic
//! renames as well as edits, and works on every file system (inotify does not on NFS).

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::control::Control;
pub(crate) use crate::store::POLL;
pub use crate::store::{FILES_POLL, Signature, signature};

const RECHECK: Duration = Duration::from_secs(1);

/// Starts a thread that reloads `control` when `path` changes, until `stop` turns true.
pub fn spawn(
    path: PathBuf,
    control: Arc<Control>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    // Taken before the thread starts, so an edit made right after this returns is seen.
    let mut seen = signature(&path);
    std::thread::Builder::new()
        .name("sluice-watch".into())
        .spawn(move || {
            let mut pending: Option<Signature> = None;
            // Two writes within one timestamp tick, of the same size, to a reused inode, look
            // alike: a second look a second after any change catches what the first missed
            // (reloading unchanged text is a no-op). The first look also covers an edit made
            // between the configuration's loading and this watcher's start.
            let mut recheck = Some(Instant::now() + RECHECK);
            while !*stop.borrow() {
                std::thread::sleep(POLL);
                let now = signature(&path);
                if now != seen && now.is_some() && now == control.saved_signature() {
                    // The control plane wrote this itself (an admin change): nothing to read.
                    seen = now;
                    pending = None;
                    continue;
                }
                // A file renamed into place (a new inode) is complete: no need to wait for it
                // to hold still.
                let replaced = now.zip(seen).is_some_and(|(n, s)| n.3 != s.3);
                match pending {
                    _ if replaced || pending == Some(now) => {
                        pending = None;
                        seen = now;
                        recheck = Some(Instant::now() + RECHECK);
                        // Errors are logged by the control plane; the previous configuration stays.
                        let _ = control.reload();
                    }
                    _ if now != seen => pending = Some(now),
                    _ => pending = None,
                }
                if recheck.is_some_and(|t| Instant::now() >= t) {
                    recheck = None;
                    let _ = control.reload();
                }
            }
        })
}

/// Starts a thread that applies changes of the files the configuration in service names
/// (see [`Control::reload_files`]) every [`Control::files_poll`]: a renewed certificate is in
/// service one to two seconds after it was written, without a signal.
pub fn spawn_files(
    control: Arc<Control>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("sluice-watch-files".into())
        .spawn(move || {
            let mut last = Instant::now();
            while !*stop.borrow() {
                // Short sleeps: a stop is seen within a tenth of a second.
                std::thread::sleep(Duration::from_millis(100));
                if last.elapsed() < control.files_poll() {
                    continue;
                }
                last = Instant::now();
                // Refusals are logged by the control plane; what is in service stays.
                let _ = control.reload_files();
            }
        })
}
