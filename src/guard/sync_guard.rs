//! [`CacheGuard`]: the guard for a synchronous [`Store`].

use std::fmt;
use std::hash::BuildHasher;

use ahash::RandomState;

use super::core::{Admission, GuardCore, Step, WarmUp};
use super::store::{Store, Written};
use super::{GuardError, GuardStats, WarmUpProgress};
use crate::CuckooFilter;

/// A [`CuckooFilter`] in front of a synchronous [`Store`], kept in sync by the
/// [consistency rules](super#consistency-rules).
///
/// `Send + Sync` when the store is: share it in an `Arc` and call it from any thread.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), MemoryStore::new());
/// guard.warm_up(100, |_| {})?;
/// guard.put(&1u64, &"one")?;
/// assert_eq!(guard.get(&1)?, Some("one"));
/// assert_eq!(guard.get(&2)?, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CacheGuard<St: Store, H = RandomState> {
    core: GuardCore<H>,
    store: St,
    warm_up: WarmUp<St::Cursor>,
}

impl<St: Store, H: BuildHasher> CacheGuard<St, H> {
    /// A guard over `store` with `filter`, warming: lookups go to the store until
    /// [`warm_up`](Self::warm_up) has loaded the store's keys.
    ///
    /// `filter` should be empty and sized for the rows the store will hold.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.is_warming());
    /// ```
    pub fn new(filter: CuckooFilter<H>, store: St) -> Self {
        CacheGuard {
            core: GuardCore::new(filter),
            store,
            warm_up: WarmUp::new(),
        }
    }

    /// The value of `key`: `Ok(None)` without asking the store if the filter rules the key
    /// out, else the store's answer.
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if the store fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let store = MemoryStore::from_rows([(1u8, "one")]);
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), store);
    /// assert_eq!(guard.get(&1)?, Some("one")); // warming: asks the store
    /// guard.warm_up(10, |_| {})?;
    /// assert_eq!(guard.get(&2)?, None);        // ready: blocked by the filter
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get(&self, key: &St::Key) -> Result<Option<St::Value>, GuardError<St::Error>> {
        let admission = self.core.admit(key);
        if admission == Admission::Blocked {
            return Ok(None);
        }
        let result = self.store.get(key);
        self.core.observe_get(admission, &result);
        result.map_err(GuardError::Store)
    }

    /// Whether `key` may exist, from the filter alone (always `true` while warming).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.may_contain(&3)); // warming
    /// guard.warm_up(10, |_| {})?;
    /// assert!(!guard.may_contain(&3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn may_contain(&self, key: &St::Key) -> bool {
        !self.core.is_ready() || self.core.filter.contains(key)
    }

    /// Creates or updates `key` in the store, keeping the filter in sync (rules 1, 3, 4).
    ///
    /// # Errors
    ///
    /// [`GuardError::FilterFull`] if the filter has no room, [`GuardError::FilterContended`]
    /// if its insert gave up under contention (either way the store was not touched);
    /// [`GuardError::Store`] if the store fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore, Written};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::new());
    /// assert_eq!(guard.put(&"k", &1)?, Written::Created);
    /// assert_eq!(guard.put(&"k", &2)?, Written::Updated);
    /// assert_eq!(guard.filter().count(&"k"), 1); // the update's extra copy was removed
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put(&self, key: &St::Key, value: &St::Value) -> Result<Written, GuardError<St::Error>> {
        self.core.begin_put(key)?;
        let result = self.store.put(key, value);
        self.core.end_put(key, &result, St::write_outcome_unknown);
        result.map_err(GuardError::Store)
    }

    /// Deletes `key` from the store; removes it from the filter once the store confirms it
    /// (rule 2). Returns whether the key existed.
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if the store fails (the filter is left as it was).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::new());
    /// guard.warm_up(10, |_| {})?;
    /// guard.put(&9u8, &())?;
    /// assert!(guard.delete(&9)?);
    /// assert!(!guard.may_contain(&9));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn delete(&self, key: &St::Key) -> Result<bool, GuardError<St::Error>> {
        let ticket = self.core.begin_delete();
        let result = self.store.delete(key);
        self.core.end_delete(key, ticket, &result);
        result.map_err(GuardError::Store)
    }

    /// Loads every key of the store into the filter, `page_size` keys per store call, calling
    /// `progress` after each page; then switches the guard from warming to filtering.
    ///
    /// Lookups and writes may run meanwhile. Returns at once if the guard is already warm.
    /// If it fails, the guard stays warming and a later call resumes after the last page.
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if a scan fails; [`GuardError::FilterFull`] if the store holds
    /// more keys than the filter has room for; [`GuardError::FilterContended`] if an insert
    /// gave up under contention from concurrent writers (calling again resumes);
    /// [`GuardError::WarmUpRunning`] if another thread is warming this guard up.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let store = MemoryStore::from_rows((0..1_000u32).map(|k| (k, ())));
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), store);
    /// let done = guard.warm_up(100, |_| {})?;
    /// assert_eq!(done.keys_loaded, 1_000);
    /// assert!(!guard.is_warming());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn warm_up(
        &self,
        page_size: usize,
        mut progress: impl FnMut(WarmUpProgress),
    ) -> Result<WarmUpProgress, GuardError<St::Error>> {
        let mut turn = self.warm_up.begin(&self.core)?;
        loop {
            let cursor = match turn.next() {
                Step::Scan(cursor) => cursor,
                Step::Done(done) => return Ok(done),
            };
            let page = self
                .store
                .scan_keys(cursor, page_size.max(1))
                .map_err(GuardError::Store)?;
            progress(turn.load(page)?);
        }
    }

    /// Whether the guard is still warming up (sending every lookup to the store).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.is_warming());
    /// ```
    pub fn is_warming(&self) -> bool {
        !self.core.is_ready()
    }

    /// Lookup, write and filter counters.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::new());
    /// guard.put(&1u8, &1u8)?;
    /// assert_eq!(guard.stats().creates, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> GuardStats {
        self.core.stats()
    }

    /// The guard's filter, for inspection. Writing to it directly breaks the consistency
    /// rules; go through the guard.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.filter().is_empty());
    /// ```
    pub fn filter(&self) -> &CuckooFilter<H> {
        &self.core.filter
    }

    /// The guard's store, for reads and for operations the guard does not cover. Writing to
    /// it directly breaks the consistency rules; go through the guard.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.store().is_empty());
    /// ```
    pub fn store(&self) -> &St {
        &self.store
    }
}

impl<St: Store, H> fmt::Debug for CacheGuard<St, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheGuard")
            .field("filter", &self.core.filter)
            .finish_non_exhaustive()
    }
}
