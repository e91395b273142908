//! State that outlives one configuration version: rate-limit counters and the like. Plugins
//! fetch it by a key that names the resource and its configuration, so reloading an unrelated
//! route keeps a limiter's counts, and changing the limiter's own settings starts afresh.
//!
//! State that must survive a binary upgrade too (`kill -USR2`: local limit counters, circuit
//! breakers) is fetched with [`StateRegistry::get_or_insert_carried`] and implements
//! [`Carry`]: the old process exports it when the new one is about to serve, the new one
//! imports it under the same keys, and once the old one has drained it sends what changed
//! since its export (the requests it answered meanwhile), which the new one adds.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use serde_json::{Map, Value};

/// State that a binary upgrade hands from the old process to the new one. Everything is
/// written relative to the moment of the export (durations left, not instants: the new
/// process's monotonic clock is not the old one's).
pub trait Carry: Send + Sync {
    /// This state, for the process that replaces this one.
    fn export(&self) -> Value;
    /// Takes state an old process exported, into state this process has not used yet.
    fn import(&self, v: &Value);
    /// What was added between two exports of this state (`before`, then `now`; `Null` for
    /// one that had nothing), for the new process to add to its own with [`Carry::merge`]:
    /// the requests the old process answered while it drained. None when that is nothing, or
    /// when this kind carries no later changes.
    fn changes(&self, _now: &Value, _before: &Value) -> Option<Value> {
        None
    }
    /// Adds an old process's [`Carry::changes`] to this state.
    fn merge(&self, _changes: &Value) {}
    /// The link to the old process closed: it has exited, or will send nothing more. What of
    /// the carried state was only true while it served (its requests in flight) is taken
    /// back, whether or not its last changes came.
    fn gone(&self) {}
}

/// Carried state by key, as exported (a JSON object).
pub type Exported = Map<String, Value>;

/// A registry of shared state, used at configuration compile time only (never per request).
#[derive(Debug, Default)]
pub struct StateRegistry {
    map: Mutex<HashMap<String, Weak<dyn Any + Send + Sync>>>,
    carried: Mutex<HashMap<String, Weak<dyn Carry>>>,
}

impl StateRegistry {
    /// The state stored under `key`, or `make()`'s. Kept while any configuration version uses it.
    pub fn get_or_insert<T: Any + Send + Sync>(
        &self,
        key: &str,
        make: impl FnOnce() -> T,
    ) -> Arc<T> {
        let mut map = self.map.lock();
        if let Some(existing) = map.get(key).and_then(Weak::upgrade)
            && let Ok(t) = existing.downcast::<T>()
        {
            return t;
        }
        let fresh = Arc::new(make());
        let weak: Weak<dyn Any + Send + Sync> =
            Arc::downgrade(&(fresh.clone() as Arc<dyn Any + Send + Sync>));
        map.insert(key.to_owned(), weak);
        // Forget entries whose state nobody uses any more.
        map.retain(|_, w| w.strong_count() > 0);
        fresh
    }

    /// Like [`StateRegistry::get_or_insert`], for state a binary upgrade carries to the next
    /// process ([`Carry`]).
    pub fn get_or_insert_carried<T: Any + Carry>(
        &self,
        key: &str,
        make: impl FnOnce() -> T,
    ) -> Arc<T> {
        let t = self.get_or_insert(key, make);
        let mut carried = self.carried.lock();
        let same = carried
            .get(key)
            .and_then(Weak::upgrade)
            .is_some_and(|c| std::ptr::addr_eq(Arc::as_ptr(&c), Arc::as_ptr(&t)));
        if !same {
            let weak: Weak<dyn Carry> = Arc::downgrade(&(t.clone() as Arc<dyn Carry>));
            carried.insert(key.to_owned(), weak);
            carried.retain(|_, w| w.strong_count() > 0);
        }
        t
    }

    fn live_carried(&self) -> Vec<(String, Arc<dyn Carry>)> {
        self.carried
            .lock()
            .iter()
            .filter_map(|(k, w)| Some((k.clone(), w.upgrade()?)))
            .collect()
    }

    /// Every carried state in use, by key.
    pub fn export(&self) -> Exported {
        self.live_carried()
            .into_iter()
            .map(|(k, c)| (k, c.export()))
            .collect()
    }

    /// Takes an old process's export into the states of the same keys; returns how many
    /// were found here (a key the new configuration no longer has is dropped).
    pub fn import(&self, exported: &Exported) -> usize {
        self.each_given(exported, |c, v| c.import(v))
    }

    /// Calls `f` with each carried state in use that `given` has a value for; returns how many.
    fn each_given(&self, given: &Exported, f: impl Fn(&dyn Carry, &Value)) -> usize {
        let mut n = 0;
        for (k, c) in self.live_carried() {
            if let Some(v) = given.get(&k) {
                f(&*c, v);
                n += 1;
            }
        }
        n
    }

    /// What was added between two of this registry's exports, `before` and `now`, by key.
    pub fn changes(&self, now: &Exported, before: &Exported) -> Exported {
        self.live_carried()
            .into_iter()
            .filter_map(|(k, c)| {
                let changes = c.changes(
                    now.get(&k).unwrap_or(&Value::Null),
                    before.get(&k).unwrap_or(&Value::Null),
                )?;
                Some((k, changes))
            })
            .collect()
    }

    /// Adds an old process's [`StateRegistry::changes`]; returns how many keys matched.
    pub fn merge(&self, changes: &Exported) -> usize {
        self.each_given(changes, |c, v| c.merge(v))
    }

    /// The old process is gone ([`Carry::gone`], for every carried state in use).
    pub fn gone(&self) {
        for (_, c) in self.live_carried() {
            c.gone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn state_is_shared_while_in_use_and_fresh_after() {
        let r = StateRegistry::default();
        let a = r.get_or_insert("k", || AtomicU64::new(1));
        a.store(5, Ordering::Relaxed);
        let b = r.get_or_insert("k", || AtomicU64::new(1));
        assert_eq!(b.load(Ordering::Relaxed), 5);
        drop((a, b));
        let c = r.get_or_insert("k", || AtomicU64::new(1));
        assert_eq!(c.load(Ordering::Relaxed), 1);
    }

    /// A count carried as the limit plugins carry theirs: the whole count, then what was
    /// added after the export.
    #[derive(Default)]
    struct Count(AtomicU64);

    impl Carry for Count {
        fn export(&self) -> Value {
            self.0.load(Ordering::Relaxed).into()
        }
        fn import(&self, v: &Value) {
            self.0.store(v.as_u64().unwrap_or(0), Ordering::Relaxed);
        }
        fn changes(&self, now: &Value, before: &Value) -> Option<Value> {
            Some((now.as_u64().unwrap_or(0) - before.as_u64().unwrap_or(0)).into())
        }
        fn merge(&self, v: &Value) {
            self.0.fetch_add(v.as_u64().unwrap_or(0), Ordering::Relaxed);
        }
    }

    #[test]
    fn carried_state_goes_to_the_same_keys_with_what_came_after() {
        let old = StateRegistry::default();
        let a = old.get_or_insert_carried("a", Count::default);
        let gone = old.get_or_insert_carried("gone", Count::default);
        a.0.store(7, Ordering::Relaxed);
        drop(gone);
        let _plain = old.get_or_insert("plain", || AtomicU64::new(3));
        let exported = old.export();
        assert_eq!(exported.len(), 1, "only carried state in use: {exported:?}");
        let new = StateRegistry::default();
        let b = new.get_or_insert_carried("a", Count::default);
        let _other = new.get_or_insert_carried("other", Count::default);
        assert_eq!(new.import(&exported), 1);
        assert_eq!(b.0.load(Ordering::Relaxed), 7);
        // The old process answered 3 more while it drained; the new one 2.
        a.0.fetch_add(3, Ordering::Relaxed);
        b.0.fetch_add(2, Ordering::Relaxed);
        assert_eq!(new.merge(&old.changes(&old.export(), &exported)), 1);
        assert_eq!(b.0.load(Ordering::Relaxed), 12);
        // The same state fetched again is carried once.
        let again = new.get_or_insert_carried("a", Count::default);
        assert!(Arc::ptr_eq(&again, &b));
        assert_eq!(new.export().len(), 2);
    }
}
