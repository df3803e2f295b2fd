//! Metric handles kept per label set, for the hot paths that record on every request.
//!
//! `metrics::counter!(name, labels...)` registers its series on every use: it builds the key's
//! labels (an owned string each), hashes them, and looks the series up in the recorder behind two
//! locks. On the agent kit's request path that was several percent of a request's instructions
//! (`scripts/instructions-per-request.sh`); a [`HandleCache`] does it once per label set.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{PoisonError, RwLock};

use foldhash::fast::RandomState;

/// Handles of one metric by label values, at most `max` of them: past that, a handle is
/// registered on each use, as without the cache, so unbounded label values cannot grow it.
///
/// A handle is kept as registered: one taken before [`crate::install_metrics`] records nothing,
/// so a cache belongs to a server built once metrics are installed, as every mesh binary does.
#[derive(Debug)]
pub struct HandleCache<K, H> {
    /// Hashed with foldhash (seeded per map), as every map on the request path: std's SipHash
    /// took several times as long per lookup.
    handles: RwLock<HashMap<K, H, RandomState>>,
    max: usize,
}

impl<K: Hash + Eq, H: Clone> HandleCache<K, H> {
    pub fn new(max: usize) -> Self {
        Self { handles: RwLock::new(HashMap::default()), max }
    }

    /// The handle for `key`, registered with `register` the first time.
    pub fn get(&self, key: K, register: impl FnOnce(&K) -> H) -> H {
        if let Some(handle) = self.handles.read().unwrap_or_else(PoisonError::into_inner).get(&key) {
            return handle.clone();
        }
        let handle = register(&key);
        let mut handles = self.handles.write().unwrap_or_else(PoisonError::into_inner);
        if handles.len() < self.max {
            handles.entry(key).or_insert_with(|| handle.clone());
        }
        handle
    }

    /// How many label sets have a kept handle.
    pub fn len(&self) -> usize {
        self.handles.read().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn a_label_set_is_registered_once_and_the_cache_stops_growing_at_its_bound() {
        let registered = Cell::new(0);
        let register = |key: &u32| {
            registered.set(registered.get() + 1);
            *key * 10
        };
        let cache = HandleCache::new(2);
        assert_eq!(cache.get(1, register), 10);
        assert_eq!(cache.get(1, register), 10);
        assert_eq!(registered.get(), 1, "the second use finds the kept handle");
        assert_eq!(cache.get(2, register), 20);
        assert_eq!(cache.get(3, register), 30);
        assert_eq!(cache.get(3, register), 30);
        assert_eq!(registered.get(), 4, "past the bound, each use registers");
        assert_eq!(cache.len(), 2);
    }
}
