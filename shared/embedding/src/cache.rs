//! Vectors of recent queries, so a repeated query costs no forward pass: people repeat queries
//! (a retry, the next page, a popular search), and a forward pass costs milliseconds where a
//! lookup costs a microsecond. Bounded (least recently used first out); keyed by the exact text,
//! since the encoder's output depends on nothing else.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use lru::LruCache;

/// Queries kept by default: 4,096 MiniLM vectors (384 `f32`s, 1.5 KiB each) are about 6 MiB.
pub const QUERY_CACHE_ENTRIES_DEFAULT: usize = 4096;

/// The cached vectors; `None` when the cache is off (capacity 0).
type Entries = Option<LruCache<String, Arc<[f32]>>>;

/// A bounded cache of query vectors, shared by the threads that search.
#[derive(Debug)]
pub struct QueryCache {
    entries: Mutex<Entries>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// How the cache has served so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryCacheStats {
    pub entries: usize,
    pub capacity: usize,
    pub hits: u64,
    pub misses: u64,
}

impl QueryCache {
    /// A cache of at most `capacity` queries; 0 turns it off (every query is encoded).
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new(NonZeroUsize::new(capacity).map(LruCache::new)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Keeps at most `capacity` queries from now on (the least recently used go first); 0
    /// empties the cache and turns it off.
    pub fn set_capacity(&self, capacity: usize) {
        let mut entries = self.lock();
        match (NonZeroUsize::new(capacity), entries.as_mut()) {
            (Some(capacity), Some(cache)) => cache.resize(capacity),
            (capacity, _) => *entries = capacity.map(LruCache::new),
        }
    }

    /// The vector of `text`: the cached one, else what `encode` computes (then kept). Also says
    /// whether it came from the cache. The lock is not held while encoding, so two threads
    /// missing the same new query both encode it; both get the same vector.
    pub fn vector<E>(
        &self,
        text: &str,
        encode: impl FnOnce(&str) -> Result<Vec<f32>, E>,
    ) -> Result<(Arc<[f32]>, bool), E> {
        if let Some(vector) = self.lock().as_mut().and_then(|entries| entries.get(text).cloned()) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok((vector, true));
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let vector: Arc<[f32]> = encode(text)?.into();
        if let Some(entries) = self.lock().as_mut() {
            entries.put(text.to_owned(), vector.clone());
        }
        Ok((vector, false))
    }

    pub fn stats(&self) -> QueryCacheStats {
        let (entries, capacity) = self.lock().as_ref().map_or((0, 0), |entries| (entries.len(), entries.cap().get()));
        QueryCacheStats {
            entries,
            capacity,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // Each change is one put, one reordering or one resize: the cache is consistent whatever
        // panicked.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// A stand-in encoder that counts its forward passes.
    fn counting(passes: &Cell<usize>) -> impl Fn(&str) -> Result<Vec<f32>, String> + '_ {
        move |text| {
            passes.set(passes.get() + 1);
            Ok(vec![text.len() as f32, 1.0])
        }
    }

    #[test]
    fn a_repeated_query_is_encoded_once_and_answers_the_same_vector() {
        let cache = QueryCache::new(8);
        let passes = Cell::new(0);
        let (first, cached) = cache.vector("robots playing soccer", counting(&passes)).unwrap();
        assert!(!cached);
        let (again, cached) = cache.vector("robots playing soccer", counting(&passes)).unwrap();
        assert!(cached);
        assert_eq!((first, passes.get()), (again, 1));
        cache.vector("robots playing chess", counting(&passes)).unwrap();
        assert_eq!(passes.get(), 2, "another text is another query");
        assert_eq!(cache.stats(), QueryCacheStats { entries: 2, capacity: 8, hits: 1, misses: 2 });
    }

    #[test]
    fn the_cache_keeps_the_most_recently_used_queries_within_its_bound() {
        let cache = QueryCache::new(2);
        let passes = Cell::new(0);
        for text in ["a", "b", "a", "c"] {
            cache.vector(text, counting(&passes)).unwrap();
        }
        // "b" was the least recently used when "c" came: it went, "a" stayed.
        assert_eq!(cache.stats().entries, 2);
        cache.vector("a", counting(&passes)).unwrap();
        assert_eq!(passes.get(), 3, "a stayed");
        cache.vector("b", counting(&passes)).unwrap();
        assert_eq!(passes.get(), 4, "b was evicted");
    }

    #[test]
    fn a_failed_encoding_is_not_cached_and_a_zero_capacity_keeps_nothing() {
        let cache = QueryCache::new(4);
        assert_eq!(cache.vector("x", |_| Err::<Vec<f32>, _>("model gone")), Err("model gone"));
        assert_eq!(cache.stats().entries, 0);
        let off = QueryCache::new(0);
        let passes = Cell::new(0);
        off.vector("x", counting(&passes)).unwrap();
        off.vector("x", counting(&passes)).unwrap();
        assert_eq!((passes.get(), off.stats().capacity, off.stats().hits), (2, 0, 0));
    }

    #[test]
    fn the_capacity_changes_at_run_time() {
        let cache = QueryCache::new(4);
        let passes = Cell::new(0);
        for text in ["a", "b", "c"] {
            cache.vector(text, counting(&passes)).unwrap();
        }
        cache.set_capacity(1);
        assert_eq!(cache.stats().entries, 1, "shrinking drops the least recently used");
        cache.vector("c", counting(&passes)).unwrap();
        assert_eq!(passes.get(), 3, "the most recent one stayed");
        cache.set_capacity(0);
        assert_eq!((cache.stats().entries, cache.stats().capacity), (0, 0));
        cache.set_capacity(2);
        cache.vector("c", counting(&passes)).unwrap();
        cache.vector("c", counting(&passes)).unwrap();
        assert_eq!(passes.get(), 4, "on again, empty at first");
    }
}
