//! Files a configuration names (certificates, keys, CA bundles), as they were when it was
//! compiled: a [`FileStamp`] per file read, so that a reload can tell which ones were replaced
//! since (certbot and cert-manager renew certificates in place, then signal a reload).

use std::hash::Hasher;
use std::os::unix::fs::MetadataExt;

/// A file's size, modification time (seconds, nanoseconds) and inode; None when it cannot be
/// read. Cheap to take (one `stat`), and different after any write or replacement that is not
/// within the same nanosecond and size.
pub type FileSig = Option<(u64, i64, i64, u64)>;

/// The signature of the file at `path` (its target, for a symbolic link: a Kubernetes secret
/// volume swaps a link).
pub fn file_signature(path: &std::path::Path) -> FileSig {
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
}

/// One file as a compilation read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStamp {
    /// The path, as the configuration gives it.
    pub path: String,
    /// Its signature, taken before it was read: a write during the read shows as a change.
    pub sig: FileSig,
    /// A hash of what was read: a file rewritten with the same bytes (`touch`, a renewal that
    /// kept the certificate) is not a change.
    pub hash: u64,
}

impl FileStamp {
    /// Reads the file at `path`, with its stamp.
    pub fn read(path: &str) -> std::io::Result<(Vec<u8>, FileStamp)> {
        let sig = file_signature(std::path::Path::new(path));
        let bytes = std::fs::read(path)?;
        let stamp = FileStamp {
            path: path.to_owned(),
            sig,
            hash: content_hash(&bytes),
        };
        Ok((bytes, stamp))
    }

    /// Whether the file now holds something else than what was read: None when it does not;
    /// otherwise its signature now (None inside when it cannot be read any more). One `stat`
    /// when nothing changed; a read when the signature did.
    pub fn changed(&self) -> Option<FileSig> {
        let now = file_signature(std::path::Path::new(&self.path));
        if now == self.sig {
            return None;
        }
        match std::fs::read(&self.path) {
            Ok(bytes) if content_hash(&bytes) == self.hash => None,
            _ => Some(now),
        }
    }
}

fn content_hash(bytes: &[u8]) -> u64 {
    // SipHash with fixed keys: the same bytes give the same hash in every process.
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    h.write(bytes);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_rewritten_with_other_bytes_is_a_change_the_same_bytes_are_not() {
        let dir = std::env::temp_dir().join(format!("sluice-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.pem");
        let p = path.to_str().unwrap();
        std::fs::write(&path, "one").unwrap();
        let (bytes, stamp) = FileStamp::read(p).unwrap();
        assert_eq!(bytes, b"one");
        assert_eq!(stamp.changed(), None);
        // Same bytes, new inode and time: not a change.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "one").unwrap();
        assert_eq!(stamp.changed(), None);
        std::fs::write(&path, "two").unwrap();
        assert_eq!(stamp.changed(), Some(file_signature(&path)));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(stamp.changed(), Some(None));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
