//! A cache zone (APISIX's `apisix.proxy_cache.zones`, here `plugin_attr.proxy-cache.zones`):
//! entries by cache key, each key with the variants its `Vary` makes (at most 64, the oldest
//! dropped first, as APISIX's memory handler bounds them), bounded in bytes and keys and
//! evicting the least recently used key. A memory zone holds bodies in memory; a disk zone
//! holds them in files under `disk_path` (`cache_levels` directories, as NGINX lays them out)
//! and only their index in memory, and reads its directory back when it opens, so that it
//! survives a restart.
//!
//! One zone is shared by every worker behind one mutex, held for a hash lookup and a list
//! move (NGINX's cache zones are one shared-memory lock too); a disk zone's files are read and
//! written outside it. The workers that miss on a key being fetched wait for that fetch
//! ([`Zone::join`]) instead of each asking the node.

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use sha2::Digest as _;
use tokio::sync::Notify;

/// At most this many variants of one key (APISIX's `MAX_VARIANTS`).
const MAX_VARIANTS: usize = 64;

/// NGINX's keys zone holds about 8000 keys per megabyte: a disk zone's `memory_size` bounds
/// its index at one key per 128 bytes.
const INDEX_BYTES_PER_KEY: u64 = 128;

/// What every entry costs besides its bytes (the index's own).
const ENTRY_OVERHEAD: u64 = 128;

/// The first bytes of a disk entry: its format. Files without them are not ours and are
/// left alone.
const MAGIC: &[u8; 8] = b"SLCACHE1";

/// A zone's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Spec {
    pub(super) name: String,
    /// Bytes of bodies and heads (memory) or of the index (disk).
    pub(super) memory_size: u64,
    pub(super) disk: Option<DiskSpec>,
}

/// A disk zone's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DiskSpec {
    pub(super) path: PathBuf,
    /// Bytes of files.
    pub(super) size: u64,
    /// Characters of the name's hash in each directory level (`1:2`: `c/29/...`).
    pub(super) levels: Vec<usize>,
}

/// A cached response.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) status: u16,
    /// The node's fields, without those of one connection or one message's framing.
    pub(super) headers: Vec<(String, Vec<u8>)>,
    pub(super) body: Bytes,
    /// When it was stored (Unix milliseconds).
    pub(super) stored: u64,
    /// When it stops being fresh (Unix milliseconds).
    pub(super) expires: u64,
    /// The `Age` it arrived with.
    pub(super) age: u64,
}

impl Entry {
    fn size(&self, key: &[u8], sig: &[u8]) -> u64 {
        let heads: usize = self.headers.iter().map(|(n, v)| n.len() + v.len() + 8).sum();
        (key.len() + sig.len() + heads + self.body.len()) as u64 + ENTRY_OVERHEAD
    }
}

/// What a lookup found.
pub(super) enum Found {
    Miss,
    /// An entry past its freshness (a new fetch replaces it).
    Expired,
    Fresh(Arc<Entry>),
}

struct Variant {
    sig: Vec<u8>,
    expires: u64,
    size: u64,
    /// The entry, in a memory zone; a disk zone's is in its file.
    mem: Option<Arc<Entry>>,
}

struct Slot {
    /// The header names the variants differ by (sorted, lowercase).
    vary: Vec<String>,
    /// Oldest first.
    variants: Vec<Variant>,
}

impl Slot {
    fn size(&self) -> u64 {
        self.variants.iter().map(|v| v.size).sum()
    }
}

struct Index {
    keys: lru::LruCache<Vec<u8>, Slot>,
    bytes: u64,
}

/// A zone (see the module's documentation).
pub(super) struct Zone {
    spec: Spec,
    /// Bytes held at most (bodies in memory, or files on disk).
    max_bytes: u64,
    max_keys: usize,
    index: Mutex<Index>,
    /// Keys being fetched, and how their waiters are woken.
    inflight: Mutex<HashMap<Vec<u8>, Arc<Notify>>>,
}

impl std::fmt::Debug for Zone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Zone").field("spec", &self.spec).finish()
    }
}

/// A fetch this request leads: while it is held, others missing on the key wait for it.
pub(super) struct Lead {
    zone: Arc<Zone>,
    key: Vec<u8>,
}

impl Drop for Lead {
    fn drop(&mut self) {
        if let Some(n) = self.zone.inflight.lock().remove(&self.key) {
            n.notify_waiters();
        }
    }
}

/// What joining a key's fetch gives.
pub(super) enum Join {
    /// This request fetches; the others wait until the value is dropped.
    Lead(Lead),
    /// Another request fetches: wait for it.
    Wait(Arc<Notify>),
}

impl Zone {
    /// Opens a zone; a disk zone reads back what its directory holds (`disk_path` must exist).
    pub(super) fn open(spec: Spec) -> Zone {
        let (max_bytes, max_keys) = match &spec.disk {
            Some(d) => (
                d.size,
                (spec.memory_size / INDEX_BYTES_PER_KEY).max(1) as usize,
            ),
            None => (spec.memory_size, usize::MAX),
        };
        let zone = Zone {
            spec,
            max_bytes,
            max_keys,
            index: Mutex::new(Index {
                keys: lru::LruCache::unbounded(),
                bytes: 0,
            }),
            inflight: Mutex::new(HashMap::new()),
        };
        if let Some(d) = &zone.spec.disk {
            zone.load(&d.path.clone());
        }
        zone
    }

    /// The entry for `key` that a request with `sig(vary)` may get.
    pub(super) fn lookup(&self, key: &[u8], now: u64, sig: impl Fn(&[String]) -> Vec<u8>) -> Found {
        let file = {
            let mut index = self.index.lock();
            let Some(slot) = index.keys.get(key) else {
                return Found::Miss;
            };
            let s = sig(&slot.vary);
            let Some(v) = slot.variants.iter().find(|v| v.sig == s) else {
                return Found::Miss;
            };
            if v.expires <= now {
                return Found::Expired;
            }
            match &v.mem {
                Some(e) => return Found::Fresh(e.clone()),
                None => (s, v.size - ENTRY_OVERHEAD),
            }
        };
        let (file, size) = file;
        let Some(d) = &self.spec.disk else {
            return Found::Miss;
        };
        // A hit reads its file on the worker: a cached file is in the page cache, and its read
        // is one system call, cheaper than any hand-off to a thread.
        match read_entry(&file_path(d, key, &file), size) {
            Some((k, s, _, e, _)) if k == key && s == file => Found::Fresh(Arc::new(e)),
            _ => {
                // Gone or damaged: forget it.
                self.remove_variant(key, &file);
                Found::Miss
            }
        }
    }

    /// Stores `entry` as the variant `sig` of `key`, its variants differing by `vary`.
    /// Nothing is stored when the entry is larger than the zone.
    pub(super) fn store(&self, key: &[u8], vary: Vec<String>, sig: Vec<u8>, entry: Entry) {
        let mut size = entry.size(key, &sig);
        if size > self.max_bytes {
            return;
        }
        let expires = entry.expires;
        let mem = match &self.spec.disk {
            None => Some(Arc::new(entry)),
            Some(d) => {
                match write_entry(d, key, &sig, &vary, &entry) {
                    // A disk entry counts its file's bytes, which lookups read back whole.
                    Ok(written) => size = written + ENTRY_OVERHEAD,
                    Err(e) => {
                        tracing::warn!(zone = %self.spec.name, error = %e, "proxy-cache: an entry could not be written");
                        return;
                    }
                }
                None
            }
        };
        let mut unlink = Vec::new();
        {
            let mut index = self.index.lock();
            let Index { keys, bytes } = &mut *index;
            let slot = keys.get_or_insert_mut(key.to_vec(), || Slot {
                vary: vary.clone(),
                variants: Vec::new(),
            });
            let before = slot.size();
            if slot.vary != vary {
                // Variants made by another list of headers cannot be matched any more.
                for v in slot.variants.drain(..) {
                    unlink.push(v.sig);
                }
                slot.vary = vary;
            }
            if let Some(at) = slot.variants.iter().position(|v| v.sig == sig) {
                slot.variants.remove(at);
            }
            while slot.variants.len() >= MAX_VARIANTS {
                unlink.push(slot.variants.remove(0).sig);
            }
            slot.variants.push(Variant {
                sig: sig.clone(),
                expires,
                size,
                mem,
            });
            // Over the budget, this key's older variants go first: one key with many
            // variants (a Vary on User-Agent) must not push every other key out.
            while *bytes - before + slot.size() > self.max_bytes && slot.variants.len() > 1 {
                unlink.push(slot.variants.remove(0).sig);
            }
            // The file just written is never one to remove (another vary list may have
            // made the same signature).
            unlink.retain(|s| *s != sig);
            *bytes = *bytes - before + slot.size();
            let mut evicted = Vec::new();
            while (*bytes > self.max_bytes || keys.len() > self.max_keys) && keys.len() > 1 {
                let Some((k, s)) = keys.pop_lru() else { break };
                *bytes -= s.size();
                evicted.push((k, s));
            }
            drop(index);
            if let Some(d) = &self.spec.disk {
                for s in unlink {
                    let _ = std::fs::remove_file(file_path(d, key, &s));
                }
                for (k, s) in evicted {
                    for v in s.variants {
                        let _ = std::fs::remove_file(file_path(d, &k, &v.sig));
                    }
                }
            }
        }
    }

    /// Removes `key` with every variant; false when it had none.
    pub(super) fn purge(&self, key: &[u8]) -> bool {
        let slot = {
            let mut index = self.index.lock();
            let slot = index.keys.pop(key);
            if let Some(s) = &slot {
                index.bytes -= s.size();
            }
            slot
        };
        let Some(slot) = slot else {
            return false;
        };
        if let Some(d) = &self.spec.disk {
            for v in slot.variants {
                let _ = std::fs::remove_file(file_path(d, key, &v.sig));
            }
        }
        true
    }

    /// Joins the fetch of `key`: leads it when none is under way.
    pub(super) fn join(self: &Arc<Self>, key: &[u8]) -> Join {
        let mut inflight = self.inflight.lock();
        if let Some(n) = inflight.get(key) {
            return Join::Wait(n.clone());
        }
        inflight.insert(key.to_vec(), Arc::new(Notify::new()));
        Join::Lead(Lead {
            zone: self.clone(),
            key: key.to_vec(),
        })
    }

    /// Whether the fetch of `key` that `n` wakes for is still under way (a waiter checks
    /// after it registered, so that a fetch ended in between is not waited for).
    pub(super) fn fetching(&self, key: &[u8], n: &Arc<Notify>) -> bool {
        self.inflight
            .lock()
            .get(key)
            .is_some_and(|m| Arc::ptr_eq(m, n))
    }

    /// Bytes and keys held.
    #[cfg(test)]
    pub(super) fn held(&self) -> (u64, usize) {
        let index = self.index.lock();
        (index.bytes, index.keys.len())
    }

    fn remove_variant(&self, key: &[u8], sig: &[u8]) {
        let mut index = self.index.lock();
        let Index { keys, bytes } = &mut *index;
        if let Some(slot) = keys.peek_mut(key) {
            let before = slot.size();
            slot.variants.retain(|v| v.sig != sig);
            *bytes = *bytes - before + slot.size();
            if slot.variants.is_empty() {
                keys.pop(key);
            }
        }
    }

    /// Reads back the entries a disk zone's directory holds, least recently written first
    /// (the order eviction starts from). Leftover temporary files of an interrupted write go.
    fn load(&self, root: &Path) {
        let mut found = Vec::new();
        let mut dirs = vec![root.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            let Ok(list) = std::fs::read_dir(&dir) else {
                continue;
            };
            for item in list.flatten() {
                let path = item.path();
                let Ok(meta) = item.metadata() else { continue };
                if meta.is_dir() {
                    dirs.push(path);
                } else if item.file_name().to_string_lossy().starts_with(".tmp-") {
                    let _ = std::fs::remove_file(&path);
                } else if let Some((key, sig, vary, e, _)) = read_meta(&path, meta.len()) {
                    if path != file_path(self.spec.disk.as_ref().expect("a disk zone"), &key, &sig) {
                        // Laid out by other levels: lookups would never find it.
                        let _ = std::fs::remove_file(&path);
                        continue;
                    }
                    let mtime = meta.modified().ok();
                    let size = meta.len() + ENTRY_OVERHEAD;
                    found.push((mtime, key, sig, vary, e.expires, size));
                }
            }
        }
        found.sort_by_key(|f| f.0);
        let mut index = self.index.lock();
        let Index { keys, bytes } = &mut *index;
        for (_, key, sig, vary, expires, size) in found {
            let slot = keys.get_or_insert_mut(key, || Slot {
                vary: vary.clone(),
                variants: Vec::new(),
            });
            if slot.vary != vary || slot.variants.len() >= MAX_VARIANTS {
                continue;
            }
            slot.variants.push(Variant {
                sig,
                expires,
                size,
                mem: None,
            });
            *bytes += size;
        }
        let d = self.spec.disk.as_ref().expect("a disk zone");
        while (*bytes > self.max_bytes || keys.len() > self.max_keys) && !keys.is_empty() {
            let Some((k, s)) = keys.pop_lru() else { break };
            *bytes -= s.size();
            for v in s.variants {
                let _ = std::fs::remove_file(file_path(d, &k, &v.sig));
            }
        }
        if !keys.is_empty() {
            tracing::info!(zone = %self.spec.name, keys = keys.len(), bytes = *bytes, "proxy-cache: disk zone read back");
        }
    }
}

/// Where a variant's file is: the SHA-256 of the key and signature (each length-prefixed,
/// so that no two pairs name one file), in `levels` directories named by the hash's last
/// characters, as NGINX's `levels=1:2` does.
fn file_path(d: &DiskSpec, key: &[u8], sig: &[u8]) -> PathBuf {
    let mut h = sha2::Sha256::new();
    h.update((key.len() as u64).to_be_bytes());
    h.update(key);
    h.update((sig.len() as u64).to_be_bytes());
    h.update(sig);
    let hex: String = h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut path = d.path.clone();
    let mut end = hex.len();
    for &l in &d.levels {
        path.push(&hex[end - l..end]);
        end -= l;
    }
    path.push(hex);
    path
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

/// A file: `MAGIC`, the head's length (u32), the head (times, status, key, signature, vary
/// list, fields; lengths before bytes), then the body.
fn write_entry(
    d: &DiskSpec,
    key: &[u8],
    sig: &[u8],
    vary: &[String],
    e: &Entry,
) -> std::io::Result<u64> {
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(&e.stored.to_be_bytes());
    head.extend_from_slice(&e.expires.to_be_bytes());
    head.extend_from_slice(&e.age.to_be_bytes());
    head.extend_from_slice(&e.status.to_be_bytes());
    head.extend_from_slice(&(e.body.len() as u64).to_be_bytes());
    put_bytes(&mut head, key);
    put_bytes(&mut head, sig);
    head.extend_from_slice(&(vary.len() as u32).to_be_bytes());
    for v in vary {
        put_bytes(&mut head, v.as_bytes());
    }
    head.extend_from_slice(&(e.headers.len() as u32).to_be_bytes());
    for (n, v) in &e.headers {
        put_bytes(&mut head, n.as_bytes());
        put_bytes(&mut head, v);
    }
    let path = file_path(d, key, sig);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Written aside, then renamed over: a reader sees the old file or the new, never half.
    let tmp = d.path.join(format!(".tmp-{:016x}", fastrand::u64(..)));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        let mut out = Vec::with_capacity(12 + head.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(head.len() as u32).to_be_bytes());
        out.extend_from_slice(&head);
        f.write_all(&out)?;
        f.write_all(&e.body)?;
        std::fs::rename(&tmp, &path)?;
        Ok((out.len() + e.body.len()) as u64)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Reads a head's fields in order.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

/// Key, signature, vary list, the entry (its body empty when read from the head only), and
/// the body's length.
type Head = (Vec<u8>, Vec<u8>, Vec<String>, Entry, u64);

/// Parses a head (the body left empty).
fn parse_head(head: &[u8]) -> Option<Head> {
    let mut c = Cursor(head);
    let (stored, expires, age, status) = (c.u64()?, c.u64()?, c.u64()?, c.u16()?);
    let body_len = c.u64()?;
    let key = c.bytes()?.to_vec();
    let sig = c.bytes()?.to_vec();
    let n = c.u32()? as usize;
    let mut vary = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        vary.push(String::from_utf8(c.bytes()?.to_vec()).ok()?);
    }
    let n = c.u32()? as usize;
    let mut headers = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let name = String::from_utf8(c.bytes()?.to_vec()).ok()?;
        headers.push((name, c.bytes()?.to_vec()));
    }
    let e = Entry {
        status,
        headers,
        body: Bytes::new(),
        stored,
        expires,
        age,
    };
    Some((key, sig, vary, e, body_len))
}

/// A whole file of `size` bytes (the index knows it: one read, no `stat`): key, signature,
/// vary list and entry. None when it is not whole (a write cut short by a crash).
fn read_entry(path: &Path, size: u64) -> Option<Head> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut data = vec![0u8; usize::try_from(size).ok()?];
    f.read_exact(&mut data).ok()?;
    if data.len() < 12 || &data[..8] != MAGIC {
        return None;
    }
    let n = u32::from_be_bytes(data[8..12].try_into().ok()?) as usize;
    let head = data.get(12..12 + n)?;
    let (k, s, v, mut e, body_len) = parse_head(head)?;
    if (data.len() - 12 - n) as u64 != body_len {
        return None;
    }
    e.body = Bytes::from(data).slice(12 + n..);
    Some((k, s, v, e, body_len))
}

/// A file's key, signature, vary list and entry without its body, read from its head only;
/// None when the file is not whole.
fn read_meta(path: &Path, len: u64) -> Option<Head> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut start = [0u8; 12];
    f.read_exact(&mut start).ok()?;
    if &start[..8] != MAGIC {
        return None;
    }
    let n = u32::from_be_bytes(start[8..12].try_into().ok()?) as usize;
    let mut head = vec![0u8; n.min(1 << 20)];
    f.read_exact(&mut head).ok()?;
    let h = parse_head(&head)?;
    (12 + n as u64 + h.4 == len).then_some(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &str, expires: u64) -> Entry {
        Entry {
            status: 200,
            headers: vec![("content-type".into(), b"text/plain".to_vec())],
            body: Bytes::from(body.to_owned()),
            stored: 1,
            expires,
            age: 0,
        }
    }

    fn fresh(z: &Zone, key: &str) -> Option<String> {
        match z.lookup(key.as_bytes(), 10, |_| Vec::new()) {
            Found::Fresh(e) => Some(String::from_utf8(e.body.to_vec()).unwrap()),
            _ => None,
        }
    }

    #[test]
    fn a_memory_zone_evicts_the_least_recently_used_key() {
        let z = Zone::open(Spec {
            name: "m".into(),
            memory_size: 3 * (ENTRY_OVERHEAD + 100),
            disk: None,
        });
        let body = "x".repeat(60);
        for k in ["a", "b", "c"] {
            z.store(k.as_bytes(), vec![], vec![], entry(&body, 100));
        }
        assert!(fresh(&z, "a").is_some(), "a is used: b is now the oldest");
        z.store(b"d", vec![], vec![], entry(&body, 100));
        assert!(fresh(&z, "b").is_none());
        assert!(fresh(&z, "a").is_some() && fresh(&z, "c").is_some() && fresh(&z, "d").is_some());
        assert!(z.held().0 <= 3 * (ENTRY_OVERHEAD + 100));
        z.store(b"big", vec![], vec![], entry(&"y".repeat(1000), 100));
        assert!(fresh(&z, "big").is_none(), "larger than the zone: not stored");
        assert!(matches!(z.lookup(b"a", 200, |_| Vec::new()), Found::Expired));
        assert!(z.purge(b"a") && !z.purge(b"a"));
    }

    #[test]
    fn a_key_s_variants_never_push_the_other_keys_out() {
        let z = Zone::open(Spec {
            name: "m".into(),
            memory_size: 4 * (ENTRY_OVERHEAD + 100),
            disk: None,
        });
        let body = "x".repeat(60);
        z.store(b"a", vec![], vec![], entry(&body, 100));
        z.store(b"b", vec![], vec![], entry(&body, 100));
        for i in 0..10u8 {
            z.store(b"k", vec!["user-agent".into()], vec![i], entry(&body, 100));
        }
        assert!(fresh(&z, "a").is_some() && fresh(&z, "b").is_some());
        assert!(matches!(z.lookup(b"k", 10, |_| vec![9]), Found::Fresh(_)));
        assert!(matches!(z.lookup(b"k", 10, |_| vec![0]), Found::Miss));
        assert!(z.held().0 <= 4 * (ENTRY_OVERHEAD + 100));
    }

    #[test]
    fn variants_are_bounded_and_a_new_vary_list_drops_the_old_ones() {
        let z = Zone::open(Spec {
            name: "m".into(),
            memory_size: 1 << 20,
            disk: None,
        });
        let vary = vec!["accept".to_owned()];
        for i in 0..70u8 {
            z.store(b"k", vary.clone(), vec![i], entry("v", 100));
        }
        let has = |i: u8| matches!(z.lookup(b"k", 10, |_| vec![i]), Found::Fresh(_));
        assert!(!has(5) && has(6) && has(69), "the 64 newest are kept");
        z.store(b"k", vec![], vec![], entry("plain", 100));
        assert!(!has(69));
        assert_eq!(fresh(&z, "k").as_deref(), Some("plain"));
    }

    #[test]
    fn a_disk_zone_is_read_back_when_it_opens_again() {
        let dir = std::env::temp_dir().join(format!("sluice-zone-{}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("not-ours"), b"hello").unwrap();
        std::fs::write(dir.join(".tmp-0001"), b"half").unwrap();
        let spec = Spec {
            name: "d".into(),
            memory_size: 1 << 20,
            disk: Some(DiskSpec {
                path: dir.clone(),
                size: 1 << 20,
                levels: vec![1, 2],
            }),
        };
        {
            let z = Zone::open(spec.clone());
            z.store(b"k1", vec![], vec![], entry("one", 100));
            z.store(b"k2", vec!["accept".into()], b"sig".to_vec(), entry("two", 100));
            assert_eq!(fresh(&z, "k1").as_deref(), Some("one"));
        }
        let z = Zone::open(spec);
        assert_eq!(fresh(&z, "k1").as_deref(), Some("one"));
        assert!(matches!(z.lookup(b"k2", 10, |v| { assert_eq!(v, ["accept"]); b"sig".to_vec() }), Found::Fresh(_)));
        assert!(dir.join("not-ours").exists() && !dir.join(".tmp-0001").exists());
        assert!(z.purge(b"k1"));
        let z = Zone::open(z.spec.clone());
        assert!(fresh(&z, "k1").is_none(), "a purged entry's file is gone");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
