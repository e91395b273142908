//! Watching the configuration file: its size, modification time and inode are looked at (one
//! `stat`) when the kernel reports a change in its directory (inotify), and every 100 ms
//! besides; without inotify, every 10 ms. A file replaced by a rename (what tools and most
//! editors do) is applied at once; one written in place, once it has held still for one more
//! look 10 ms later (an editor that writes in several steps is not caught half-way). An edit
//! is in service within 10 to 20 ms plus the time to apply it; on a file system that reports
//! nothing (NFS), within 100 to 200 ms. The `stat` decides, never the event: notifications
//! only say when to look, so atomic renames, edits and a Kubernetes ConfigMap's symlink swap
//! are all seen, and the thread wakes 10 times a second rather than 100 (each wake is taken
//! from the CPU the workers share).

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::control::Control;
pub(crate) use crate::store::POLL;
pub use crate::store::{FILES_POLL, Signature, signature};

const RECHECK: Duration = Duration::from_secs(1);

/// The longest wait between two looks when the kernel reports changes: it bounds how late a
/// change on a file system without notifications is seen, and how late a stop is.
const NOTIFIED_POLL: Duration = Duration::from_millis(100);

/// Changes in the directory of the configuration file, as the kernel reports them. The
/// directory rather than the file: a file replaced by a rename, or a ConfigMap's `..data`
/// symlink swapped, changes the directory's entries, not the file first watched.
struct DirEvents(rustix::fd::OwnedFd);

impl DirEvents {
    /// None: no inotify here (or the directory cannot be watched): the watcher polls.
    fn new(file: &std::path::Path) -> Option<DirEvents> {
        use rustix::fs::inotify::{CreateFlags, WatchFlags, add_watch, init};
        let dir = match file.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        let fd = init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
        add_watch(
            &fd,
            dir,
            WatchFlags::CLOSE_WRITE
                | WatchFlags::MODIFY
                | WatchFlags::ATTRIB
                | WatchFlags::CREATE
                | WatchFlags::DELETE
                | WatchFlags::MOVED_FROM
                | WatchFlags::MOVED_TO,
        )
        .ok()?;
        Some(DirEvents(fd))
    }

    /// Waits until something changed in the directory or `timeout` passed; reads the events
    /// away (which ones does not matter: the caller looks at the file).
    fn wait(&self, timeout: Duration) {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let t = Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let mut fds = [PollFd::new(&self.0, PollFlags::IN)];
        if poll(&mut fds, Some(&t)).is_ok_and(|n| n > 0) {
            let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
            let mut events = rustix::fs::inotify::Reader::new(&self.0, &mut buf);
            while events.next().is_ok() {}
        }
    }
}

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
            let events = DirEvents::new(&path);
            while !*stop.borrow() {
                match (&events, pending) {
                    // A change seen is looked at again 10 ms later, whatever is reported.
                    (Some(e), None) => e.wait(NOTIFIED_POLL),
                    _ => std::thread::sleep(POLL),
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The wait ends when the directory changes (an edit, a rename into place), not at its
    /// timeout; and lasts its timeout when nothing happens.
    #[test]
    fn a_change_in_the_directory_ends_the_wait() {
        let dir = std::env::temp_dir().join(format!("sluice-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("sluice.yaml");
        std::fs::write(&file, "listen: 127.0.0.1:9080\n").unwrap();
        let events = DirEvents::new(&file).expect("inotify on a local directory");
        let quiet = Instant::now();
        events.wait(Duration::from_millis(200));
        assert!(
            quiet.elapsed() >= Duration::from_millis(150),
            "woke without a change"
        );
        for change in ["edit", "rename"] {
            let f = file.clone();
            let writer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                if change == "edit" {
                    std::fs::write(&f, "listen: 127.0.0.1:9081\n").unwrap();
                } else {
                    let tmp = f.with_extension("tmp");
                    std::fs::write(&tmp, "listen: 127.0.0.1:9082\n").unwrap();
                    std::fs::rename(&tmp, &f).unwrap();
                }
            });
            let t = Instant::now();
            events.wait(Duration::from_secs(30));
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{change}: not reported"
            );
            writer.join().unwrap();
            // What the change left queued is read away by the next wait.
            events.wait(Duration::from_millis(20));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
