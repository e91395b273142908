//! Where the configuration lives. File mode: the YAML file is the source of truth; admin
//! writes replace it atomically (a temporary file in the same directory, synced, then renamed
//! over it), so a crash never leaves a half-written configuration. Also owns a file's
//! [`Signature`], by which the watcher and the control plane recognise a file they have seen.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// How often the watcher looks at the configuration file (one `stat`).
pub(crate) const POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// How often the files a configuration names (certificates, keys, CA bundles) are looked at
/// by default: one `stat` each.
pub const FILES_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// A file's size, modification time and inode; None when it cannot be read.
pub type Signature = Option<(u64, i64, i64, u64)>;

/// The signature of the file at `path`.
pub fn signature(path: &Path) -> Signature {
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
}

/// A configuration source that can be read and written whole.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// The configuration text.
    fn load(&self) -> Result<String, String>;
    /// Replaces the configuration text, atomically.
    fn save(&self, text: &str) -> Result<(), String>;
    /// For logs: where the configuration is.
    fn describe(&self) -> String;
    /// The file to watch for changes, if any.
    fn watch_path(&self) -> Option<&Path> {
        None
    }
}

/// A YAML file.
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
}

impl FileStore {
    /// The file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> FileStore {
        FileStore { path: path.into() }
    }
}

impl Store for FileStore {
    fn load(&self) -> Result<String, String> {
        std::fs::read_to_string(&self.path)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))
    }

    fn save(&self, text: &str) -> Result<(), String> {
        // A symbolic link (a Kubernetes ConfigMap, a file kept under version control
        // elsewhere) is written through: the file it points to is replaced, the link stays.
        let target = match std::fs::symlink_metadata(&self.path) {
            Ok(m) if m.file_type().is_symlink() => {
                std::fs::canonicalize(&self.path).map_err(|e| {
                    format!(
                        "cannot write {}: the link does not resolve: {e}",
                        self.path.display()
                    )
                })?
            }
            _ => self.path.clone(),
        };
        let dir = target
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            if let Ok(meta) = std::fs::metadata(&target) {
                let _ = f.set_permissions(meta.permissions());
            }
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &target)?;
            // The rename itself is durable once the directory is synced.
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(())
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            if target == self.path {
                format!("cannot write {}: {e}", self.path.display())
            } else {
                format!(
                    "cannot write {} (the target of the link {}): {e}",
                    target.display(),
                    self.path.display()
                )
            }
        })
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn watch_path(&self) -> Option<&Path> {
        Some(&self.path)
    }
}

/// A configuration held in memory only (the built-in default, tests): writes are kept in
/// memory and lost at exit.
#[derive(Debug, Default)]
pub struct MemoryStore {
    text: parking_lot::Mutex<String>,
}

impl MemoryStore {
    /// A store holding `text`.
    pub fn new(text: &str) -> MemoryStore {
        MemoryStore {
            text: parking_lot::Mutex::new(text.to_owned()),
        }
    }
}

impl Store for MemoryStore {
    fn load(&self) -> Result<String, String> {
        Ok(self.text.lock().clone())
    }

    fn save(&self, text: &str) -> Result<(), String> {
        *self.text.lock() = text.to_owned();
        Ok(())
    }

    fn describe(&self) -> String {
        "built-in configuration (in memory)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlinked_file_is_written_through_to_its_target() {
        let dir = std::env::temp_dir().join(format!("sluice-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let real = dir.join("data/real.yaml");
        std::fs::write(&real, "routes: []\n").unwrap();
        let link = dir.join("link.yaml");
        std::os::unix::fs::symlink("data/real.yaml", &link).unwrap();
        let store = FileStore::new(&link);
        store.save("workers: 1\n").unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "the link stays a link"
        );
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "workers: 1\n");
        assert_eq!(store.load().unwrap(), "workers: 1\n");
        let leftovers: Vec<_> = std::fs::read_dir(dir.join("data")).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
