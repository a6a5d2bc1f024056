//! [`AsyncCacheGuard`]: the guard for an [`AsyncStore`].

use std::fmt;
use std::hash::BuildHasher;

use ahash::RandomState;

use super::core::{Admission, GuardCore, Step, WarmUp};
use super::store::{AsyncStore, Written};
use super::{GuardError, GuardStats, WarmUpProgress};
use crate::CuckooFilter;

/// A [`CuckooFilter`] in front of an [`AsyncStore`], kept in sync by the same
/// [consistency rules](super#consistency-rules) as [`CacheGuard`](super::CacheGuard).
///
/// The filter is consulted synchronously (it never blocks or parks), so lookups that the
/// filter blocks complete without awaiting anything. The futures are `Send` when the store's
/// are; nothing is held across an `.await` but the store call itself.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// async fn handler(guard: &AsyncCacheGuard<MemoryStore<u64, String>>, id: u64) -> Option<String> {
///     guard.get(&id).await.ok().flatten()
/// }
/// # let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::new());
/// # let _ = handler(&guard, 1);
/// ```
pub struct AsyncCacheGuard<St: AsyncStore, H = RandomState> {
    core: GuardCore<H>,
    store: St,
    warm_up: WarmUp<St::Cursor>,
}

impl<St: AsyncStore, H: BuildHasher + Sync> AsyncCacheGuard<St, H> {
    /// A guard over `store` with `filter`, warming; see [`CacheGuard::new`](super::CacheGuard::new).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.is_warming());
    /// ```
    pub fn new(filter: CuckooFilter<H>, store: St) -> Self {
        AsyncCacheGuard {
            core: GuardCore::new(filter),
            store,
            warm_up: WarmUp::new(),
        }
    }

    /// As [`CacheGuard::get`](super::CacheGuard::get).
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if the store fails.
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// # use cuckoo_guard::CuckooFilter;
    /// async fn lookup(guard: &AsyncCacheGuard<MemoryStore<u8, u8>>) -> Option<u8> {
    ///     guard.get(&1).await.unwrap()
    /// }
    /// ```
    pub async fn get(&self, key: &St::Key) -> Result<Option<St::Value>, GuardError<St::Error>> {
        let admission = self.core.admit(key);
        if admission == Admission::Blocked {
            return Ok(None);
        }
        let result = self.store.get(key).await;
        self.core.observe_get(admission, &result);
        result.map_err(GuardError::Store)
    }

    /// As [`CacheGuard::may_contain`](super::CacheGuard::may_contain).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.may_contain(&1)); // warming
    /// ```
    pub fn may_contain(&self, key: &St::Key) -> bool {
        !self.core.is_ready() || self.core.filter.contains(key)
    }

    /// As [`CacheGuard::put`](super::CacheGuard::put).
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
    /// # use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore, Written};
    /// async fn create(guard: &AsyncCacheGuard<MemoryStore<u8, u8>>) {
    ///     assert_eq!(guard.put(&1, &10).await.unwrap(), Written::Created);
    /// }
    /// ```
    pub async fn put(
        &self,
        key: &St::Key,
        value: &St::Value,
    ) -> Result<Written, GuardError<St::Error>> {
        self.core.begin_put(key)?;
        // If this future is dropped while the store call runs, the copy stays: the write may
        // or may not happen, and a stale copy is the safe side (rule 4).
        let result = self.store.put(key, value).await;
        self.core.end_put(key, &result, St::write_outcome_unknown);
        result.map_err(GuardError::Store)
    }

    /// As [`CacheGuard::delete`](super::CacheGuard::delete).
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if the store fails (the filter is left as it was).
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// async fn remove(guard: &AsyncCacheGuard<MemoryStore<u8, u8>>) -> bool {
    ///     guard.delete(&1).await.unwrap()
    /// }
    /// ```
    pub async fn delete(&self, key: &St::Key) -> Result<bool, GuardError<St::Error>> {
        let ticket = self.core.begin_delete();
        // If this future is dropped while the store call runs, nothing is removed from the
        // filter: at worst a stale copy (rule 2 and 4).
        let result = self.store.delete(key).await;
        self.core.end_delete(key, ticket, &result);
        result.map_err(GuardError::Store)
    }

    /// As [`CacheGuard::warm_up`](super::CacheGuard::warm_up). Cancelling the future (dropping
    /// it) stops the warm-up; a later call resumes after the last page loaded.
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if a scan fails; [`GuardError::FilterFull`] if the store holds
    /// more keys than the filter has room for; [`GuardError::FilterContended`] if an insert
    /// gave up under contention from concurrent writers (calling again resumes);
    /// [`GuardError::WarmUpRunning`] if another warm-up of this guard is running.
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// async fn start(guard: &AsyncCacheGuard<MemoryStore<u8, u8>>) {
    ///     let done = guard.warm_up(1_000, |p| println!("{} keys", p.keys_loaded)).await.unwrap();
    ///     assert!(!guard.is_warming());
    ///     println!("{} keys loaded", done.keys_loaded);
    /// }
    /// ```
    pub async fn warm_up(
        &self,
        page_size: usize,
        mut progress: impl FnMut(WarmUpProgress) + Send,
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
                .await
                .map_err(GuardError::Store)?;
            progress(turn.load(page)?);
        }
    }

    /// Whether the guard is still warming up.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.is_warming());
    /// ```
    pub fn is_warming(&self) -> bool {
        !self.core.is_ready()
    }

    /// As [`CacheGuard::stats`](super::CacheGuard::stats).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert_eq!(guard.stats().lookups, 0);
    /// ```
    pub fn stats(&self) -> GuardStats {
        self.core.stats()
    }

    /// As [`CacheGuard::filter`](super::CacheGuard::filter).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.filter().is_empty());
    /// ```
    pub fn filter(&self) -> &CuckooFilter<H> {
        &self.core.filter
    }

    /// As [`CacheGuard::store`](super::CacheGuard::store).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.store().is_empty());
    /// ```
    pub fn store(&self) -> &St {
        &self.store
    }
}

impl<St: AsyncStore, H> fmt::Debug for AsyncCacheGuard<St, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCacheGuard")
            .field("filter", &self.core.filter)
            .finish_non_exhaustive()
    }
}
