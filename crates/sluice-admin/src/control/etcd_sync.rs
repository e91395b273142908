//! Cluster mode: resources live in etcd. Owns: the link admin writes go through (guarded
//! writes), applying what the etcd watch sees, resyncing after the link was lost, the link's
//! state, the local cache file, and reading resources from etcd keys and values.

use std::sync::atomic::Ordering;

use serde_json::{Map, Value};
use sluice_config::ConfigErrors;
use tracing::{debug, info, warn};

use super::doc::{Doc, Item, id_text};
use super::{Control, Kind};
use crate::etcd::{Event, Kv};

impl Control {
    /// Cluster mode: changes seen by the etcd watch, up to `revision`. A change to a key this
    /// node already holds at that revision or later (its own write) is skipped. Returns the
    /// version put in service, if any.
    pub fn apply_events(&self, revision: i64, events: Vec<Event>) -> Option<u64> {
        let link = self.etcd.as_ref()?;
        let mut state = self.state.lock();
        let guard = link.guard();
        let mut next = state.doc.clone();
        let mut changed = false;
        for event in events {
            let (kv, put) = match event {
                Event::Put(kv) => (kv, true),
                Event::Delete(kv) => (kv, false),
            };
            if kv.key == guard {
                state.guard_rev = state.guard_rev.max(kv.mod_revision);
                continue;
            }
            if let Some((username, id)) = split_credential_key(&link.prefix, &kv.key) {
                let consumers = next.list_mut(Kind::Consumers);
                let Some(item) = consumers.get_mut(username) else {
                    warn!(consumer = %username, credential = %id, "ignored: a credential of a consumer that does not exist");
                    continue;
                };
                // The consumer was written after this credential: already held. (Written in
                // the same transaction, the credential applies: the consumer's value in etcd
                // has no credentials.)
                if item.rev > kv.mod_revision {
                    continue;
                }
                let credential = if put {
                    match credential_from_etcd(id, &kv) {
                        Some(c) => Some(c),
                        None => continue,
                    }
                } else {
                    None
                };
                let mut v = item.value();
                set_credential(&mut v, id, credential);
                let rev = item.rev;
                *item = Item::new(&v);
                item.rev = rev;
                changed = true;
                continue;
            }
            let Some((kind, id)) = split_key(&link.prefix, &kv.key) else {
                note_unserved(&link.prefix, &kv.key);
                debug!(key = %kv.key, "ignored: not a resource key");
                continue;
            };
            let list = next.list_mut(kind);
            if list
                .get(&id)
                .is_some_and(|item| item.rev >= kv.mod_revision)
            {
                continue;
            }
            if put {
                let Some(mut item) = item_from_etcd(kind, &id, &kv) else {
                    continue;
                };
                // A consumer written without `credentials` (APISIX keeps them under their own
                // keys) keeps those it has.
                if kind == Kind::Consumers
                    && let Some(old) = list.get(&id)
                {
                    let mut v = item.value();
                    if v.get("credentials").is_none()
                        && let Some(creds) = old.value().get("credentials").cloned()
                        && let Some(o) = v.as_object_mut()
                    {
                        o.insert("credentials".into(), creds);
                        let rev = item.rev;
                        item = Item::new(&v);
                        item.rev = rev;
                    }
                }
                match list.get_index_of(&id) {
                    Some(i) => list[i] = item,
                    None => {
                        list.insert(id, item);
                    }
                }
                changed = true;
            } else if list.shift_remove(&id).is_some() {
                changed = true;
            }
        }
        self.cluster.revision.fetch_max(revision, Ordering::Relaxed);
        if !changed {
            return None;
        }
        let applied = self
            .adopt(
                &mut state,
                next,
                &super::Origin {
                    name: "etcd",
                    text: None,
                },
            )
            .ok()
            .flatten();
        self.cluster.cache_dirty.store(true, Ordering::Relaxed);
        applied
    }

    /// Cluster mode: everything under the prefix as read at `revision` replaces what this
    /// node holds (at start, and after the link to etcd was lost).
    pub fn resync(&self, revision: i64, kvs: Vec<Kv>) -> Result<Option<u64>, ConfigErrors> {
        let Some(link) = &self.etcd else {
            return Ok(None);
        };
        let mut state = self.state.lock();
        let (mut next, guard) = Doc::from_kvs(&link.prefix, kvs);
        next.settings = state.doc.settings.clone();
        state.guard_rev = guard;
        self.cluster.revision.store(revision, Ordering::Relaxed);
        self.cluster.cache_dirty.store(true, Ordering::Relaxed);
        self.adopt(
            &mut state,
            next,
            &super::Origin {
                name: "etcd",
                text: None,
            },
        )
    }

    /// Cluster mode: records whether etcd can be reached, logging changes of state.
    pub fn etcd_reachable(&self, result: Result<(), String>) {
        let was = self
            .cluster
            .connected
            .swap(result.is_ok(), Ordering::Relaxed);
        if result.is_ok() {
            self.cluster.stale_since_ms.store(0, Ordering::Relaxed);
        } else {
            let now = unix_ms().max(1);
            let _ = self.cluster.stale_since_ms.compare_exchange(
                0,
                now,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        match result {
            Ok(()) if !was => info!(
                revision = self.cluster.revision.load(Ordering::Relaxed),
                "etcd reachable; configuration in sync"
            ),
            Ok(()) => {}
            Err(e) => {
                if was || self.cluster.last_error.lock().is_none() {
                    warn!(error = %e, "etcd unreachable: serving the last configuration received; retrying");
                }
                *self.cluster.last_error.lock() = Some(e);
            }
        }
    }

    /// Cluster mode: how long the configuration in service has gone unchecked against etcd
    /// (etcd unreachable), and whether that is past `etcd.stale_unready_after`. None: in
    /// step, or not in cluster mode.
    pub fn stale(&self) -> Option<(std::time::Duration, bool)> {
        self.etcd.as_ref()?;
        let since = self.cluster.stale_since_ms.load(Ordering::Relaxed);
        if since == 0 {
            return None;
        }
        let d = std::time::Duration::from_millis(unix_ms().saturating_sub(since));
        Some((d, self.stale_unready_after.is_some_and(|after| d >= after)))
    }

    /// Cluster mode: the resources in service as a file (for the local cache), when they
    /// changed since the last call.
    pub fn cache_text(&self) -> Option<String> {
        if !self.cluster.cache_dirty.swap(false, Ordering::Relaxed) {
            return None;
        }
        let state = self.state.lock();
        let mut doc = state.doc.clone();
        doc.settings = Map::new();
        let revision = self.cluster.revision.load(Ordering::Relaxed);
        doc.render().ok().map(|t| {
            t.replacen(
                "# Managed by Sluice",
                &format!("# etcd revision {revision}; managed by Sluice"),
                1,
            )
        })
    }
}

/// `<prefix>/<kind>/<id>` → (kind, id).
fn split_key(prefix: &str, key: &str) -> Option<(Kind, String)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('/')?;
    let (kind, id) = rest.split_once('/')?;
    let kind = Kind::from_name(kind)?;
    // A secret manager's id is `<manager>/<id>` (APISIX's `/apisix/secrets/vault/1`).
    let parts = if kind == Kind::Secrets { 2 } else { 1 };
    if id.split('/').count() != parts || id.split('/').any(str::is_empty) {
        return None;
    }
    Some((kind, id.to_owned()))
}

/// APISIX 3's `<prefix>/consumers/<username>/credentials/<id>` → (username, id).
fn split_credential_key<'k>(prefix: &str, key: &'k str) -> Option<(&'k str, &'k str)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix("/consumers/")?;
    let (username, rest) = rest.split_once('/')?;
    let id = rest.strip_prefix("credentials/")?;
    (!username.is_empty() && !id.is_empty() && !id.contains('/')).then_some((username, id))
}

/// Kinds an APISIX control plane writes that Sluice does not serve: said once, not skipped
/// in silence. (APISIX's own bookkeeping keys, `/plugins`, `/data_plane/...`, and the
/// `init_dir` placeholders, are not resources and pass quietly.)
const NOT_SERVED: &[&str] = &["protos", "secrets", "upstreams_health"];

fn note_unserved(prefix: &str, key: &str) {
    let Some(rest) = key.strip_prefix(prefix).and_then(|r| r.strip_prefix('/')) else {
        return;
    };
    if let Some((kind, id)) = rest.split_once('/')
        && !id.is_empty()
        && NOT_SERVED.contains(&kind)
    {
        warn!(key = %key, "ignored: Sluice does not serve {kind} (see docs/apisix.md)");
    }
}

/// Puts (or, with `None`, removes) credential `id` in a consumer's value.
fn set_credential(consumer: &mut Value, id: &str, credential: Option<Value>) {
    let Some(obj) = consumer.as_object_mut() else {
        return;
    };
    let mut list = match obj.remove("credentials") {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    let at = list
        .iter()
        .position(|c| c.get("id").and_then(id_text).as_deref() == Some(id));
    match (at, credential) {
        (Some(i), Some(c)) => list[i] = c,
        (None, Some(c)) => list.push(c),
        (Some(i), None) => {
            list.remove(i);
        }
        (None, None) => {}
    }
    if !list.is_empty() {
        obj.insert("credentials".into(), Value::Array(list));
    }
}

/// A credential's value from etcd, its id the key's.
fn credential_from_etcd(id: &str, kv: &Kv) -> Option<Value> {
    match serde_json::from_slice::<Value>(&kv.value) {
        Ok(Value::Object(mut o)) => {
            o.insert("id".into(), Value::String(id.into()));
            Some(Value::Object(o))
        }
        _ => {
            warn!(key = %kv.key, "ignored: the value is not a JSON object");
            None
        }
    }
}

/// A resource read from etcd: a JSON object whose id is the key's (set when missing). None,
/// logged, when the value is not a JSON object or names another id.
fn item_from_etcd(kind: Kind, id: &str, kv: &Kv) -> Option<Item> {
    let mut value = match serde_json::from_slice::<Value>(&kv.value) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            warn!(key = %kv.key, "ignored: the value is not a JSON object");
            return None;
        }
    };
    let obj = value.as_object_mut()?;
    match obj.get(kind.id_field()).map(id_text) {
        Some(Some(given)) if given != id => {
            warn!(key = %kv.key, "ignored: its {} is \"{given}\", not the key's", kind.id_field());
            return None;
        }
        _ => {
            obj.insert(kind.id_field().into(), Value::String(id.into()));
        }
    }
    let mut item = Item::new(&value);
    item.rev = kv.mod_revision;
    Some(item)
}

impl Doc {
    /// The resources under `prefix`, each kind in order of creation, and the guard key's
    /// revision (0 when absent).
    pub(super) fn from_kvs(prefix: &str, mut kvs: Vec<Kv>) -> (Doc, i64) {
        kvs.sort_by_key(|kv| kv.create_revision);
        let guard = format!("{prefix}/_guard");
        let mut doc = Doc::default();
        let mut guard_rev = 0;
        let mut credentials = Vec::new();
        for kv in kvs {
            if kv.key == guard {
                guard_rev = kv.mod_revision;
                continue;
            }
            if let Some((username, id)) = split_credential_key(prefix, &kv.key) {
                if let Some(c) = credential_from_etcd(id, &kv) {
                    credentials.push((username.to_owned(), id.to_owned(), c));
                }
                continue;
            }
            let Some((kind, id)) = split_key(prefix, &kv.key) else {
                note_unserved(prefix, &kv.key);
                continue;
            };
            if let Some(item) = item_from_etcd(kind, &id, &kv) {
                doc.list_mut(kind).insert(id, item);
            }
        }
        // Credentials under their consumer (in creation order, as they were read).
        for (username, id, c) in credentials {
            let consumers = doc.list_mut(Kind::Consumers);
            match consumers.get_mut(&username) {
                Some(item) => {
                    let mut v = item.value();
                    set_credential(&mut v, &id, Some(c));
                    let rev = item.rev;
                    *item = Item::new(&v);
                    item.rev = rev;
                }
                None => {
                    warn!(consumer = %username, credential = %id, "ignored: a credential of a consumer that does not exist")
                }
            }
        }
        // Lists in the order of a file.
        doc.lists
            .sort_by_key(|(k, _)| Kind::ALL.iter().position(|x| x == k));
        (doc, guard_rev)
    }
}

/// The revision of the guard key among `kvs` (read under `prefix`), 0 when absent: where a
/// node that starts from this read may write from.
pub fn etcd_guard_revision(prefix: &str, kvs: &[Kv]) -> i64 {
    let guard = format!("{prefix}/_guard");
    kvs.iter()
        .find(|kv| kv.key == guard)
        .map_or(0, |kv| kv.mod_revision)
}

impl Control {
    /// A node started from an etcd read: its writes are guarded from that read's guard
    /// revision, rather than refused ("retry") until its first resync.
    pub fn seed_guard_revision(&self, rev: i64) {
        let mut state = self.state.lock();
        if state.guard_rev == 0 {
            state.guard_rev = rev;
        }
    }
}

/// The resources under `prefix` as a document map (for the first configuration of a node).
pub fn etcd_resources(prefix: &str, kvs: Vec<Kv>) -> Map<String, Value> {
    Doc::from_kvs(prefix, kvs).0.to_map()
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_a_kind_and_an_id() {
        assert_eq!(
            split_key("/apisix", "/apisix/routes/1"),
            Some((Kind::Routes, "1".into()))
        );
        // A secret manager's id has two parts, as APISIX writes it.
        assert_eq!(
            split_key("/apisix", "/apisix/secrets/vault/1"),
            Some((Kind::Secrets, "vault/1".into()))
        );
        for other in [
            "/apisix/secrets/vault",
            "/apisix/secrets/vault/1/x",
            "/apisix/routes/1/x",
            "/apisix/routes/",
            "/other/routes/1",
        ] {
            assert_eq!(split_key("/apisix", other), None, "{other}");
        }
    }
}
