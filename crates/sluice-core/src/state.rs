//! State that outlives one configuration version: rate-limit counters and the like. Plugins
//! fetch it by a key that names the resource and its configuration, so reloading an unrelated
//! route keeps a limiter's counts, and changing the limiter's own settings starts afresh.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

/// A registry of shared state, used at configuration compile time only (never per request).
#[derive(Debug, Default)]
pub struct StateRegistry {
    map: Mutex<HashMap<String, Weak<dyn Any + Send + Sync>>>,
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
}
