//! The cache guard: a [`CuckooFilter`] in front of a backing store, kept exactly in sync
//! with it, so lookups of keys that do not exist are answered without touching the store.
//!
//! A [`CacheGuard`] (or [`AsyncCacheGuard`] for an [`AsyncStore`]) owns a filter and a store.
//! Every lookup asks the filter first: "absent" is answered `Ok(None)` at once and counted as
//! *blocked*; "maybe" goes to the store, and a store miss after a filter pass is counted as a
//! *false positive*, which gives a live false-positive rate ([`GuardStats`]).
//!
//! # Consistency rules
//!
//! The filter must never report absent a key the store holds. With every write going through
//! the guard, these rules keep that true under any interleaving of concurrent calls:
//!
//! 1. **A create inserts into the filter before the store write can become visible.** If the
//!    store reports that the write only *updated* an existing key, or fails definitely, the
//!    guard removes that one copy again. (Inserting after the write would leave a window where
//!    a lookup finds the row in the store but not in the filter.)
//! 2. **A delete removes from the filter only after the store confirms a key was deleted**, and
//!    only if the warm-up had finished before the delete began (otherwise the key may not be
//!    in the filter yet, and its "copy" could be another key's identical fingerprint).
//! 3. **A filter insert is never skipped because `contains` said yes**: that "yes" may be a
//!    false positive owed to another key, whose later removal would take the shared
//!    fingerprint with it.
//! 4. **An error path never leaves a key in the store that the filter reports absent.** When a
//!    failed write may still have been applied ([`Store::write_outcome_unknown`]), the guard
//!    keeps its copy; a failed delete removes nothing. Either leaves at most a stale copy: a
//!    false positive, counted in [`GuardStats::stale_copies`].
//!
//! Each rule is tested in `tests/guard.rs`.
//!
//! # Warm-up
//!
//! A new guard is *warming*: its filter holds only keys created through it, so every lookup
//! goes to the store ([`GuardStats::passed_while_warming`]) rather than block keys not yet
//! loaded. [`CacheGuard::warm_up`] scans the store's keys in pages into the filter, then
//! switches the guard to filtering. Writes may run during the warm-up. If the warm-up fails
//! (a store error, or a filter too small), the guard keeps passing lookups through, and
//! calling `warm_up` again resumes after the last page loaded.
//!
//! # When the filter is full
//!
//! A create that finds no room in the filter is refused with [`GuardError::FilterFull`]
//! before the store is touched: storing it would create a key the filter cannot report.
//! Size the filter for the rows you expect (`CuckooFilter::with_capacity`).
//! A create whose filter insert gives up because concurrent writers kept changing its cuckoo
//! paths is refused the same way, with [`GuardError::FilterContended`]: rare, and worth a
//! retry rather than a bigger filter.
//!
//! # Examples
//!
//! ```
//! use cuckoo_guard::guard::{CacheGuard, MemoryStore, Written};
//! use cuckoo_guard::CuckooFilter;
//!
//! let store = MemoryStore::from_rows((0..1_000u64).map(|id| (id, format!("row {id}"))));
//! let guard = CacheGuard::new(CuckooFilter::with_capacity(10_000), store);
//! guard.warm_up(256, |progress| println!("{} keys loaded", progress.keys_loaded))?;
//!
//! assert_eq!(guard.get(&7)?.as_deref(), Some("row 7"));
//! assert_eq!(guard.get(&123_456)?, None); // blocked: the store was not asked
//! assert_eq!(guard.put(&5_000, &"new".into())?, Written::Created);
//! assert!(guard.delete(&7)?);
//!
//! let stats = guard.stats();
//! assert_eq!((stats.lookups, stats.blocked, stats.store_hits), (2, 1, 1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod async_guard;
mod core;
mod memory;
mod store;

use std::fmt;
use std::hash::BuildHasher;
use std::sync::Mutex;

use ahash::RandomState;

pub use self::async_guard::AsyncCacheGuard;
pub use self::memory::MemoryStore;
pub use self::store::{AsyncStore, ScanPage, Store, Written};

use self::core::{Admission, GuardCore};
use crate::{CuckooFilter, InsertError};

/// Why a guard operation failed.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, GuardError, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// let filter = CuckooFilter::builder().capacity(1).seed(1).build()?;
/// let guard = CacheGuard::new(filter, MemoryStore::<u32, ()>::new());
/// guard.warm_up(10, |_| {})?;
/// let refused = (0..100u32).find_map(|k| guard.put(&k, &()).err()).unwrap();
/// assert!(matches!(refused, GuardError::FilterFull(_)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum GuardError<E> {
    /// The store failed.
    Store(E),
    /// The filter has no room for a new key: the write was refused before the store was
    /// touched (or the warm-up stopped, leaving the guard in pass-through mode). Carries
    /// [`InsertError::Full`].
    FilterFull(InsertError),
    /// The filter's insert gave up because concurrent writers kept changing the cuckoo paths
    /// it found ([`InsertError::Contended`]): the write was refused before the store was
    /// touched (or the warm-up stopped, leaving the guard in pass-through mode). The filter is
    /// not necessarily full; retrying the call may succeed.
    FilterContended,
    /// `warm_up` was called while another warm-up of the same guard was running.
    WarmUpRunning,
}

impl<E: fmt::Display> fmt::Display for GuardError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuardError::Store(e) => write!(f, "store error: {e}"),
            GuardError::FilterFull(e) => write!(
                f,
                "the guard's filter has no room for another key ({e}); the store was not changed"
            ),
            GuardError::FilterContended => write!(
                f,
                "the guard's filter insert gave up under contention from concurrent writers; \
                 the store was not changed and the call may be retried"
            ),
            GuardError::WarmUpRunning => {
                write!(f, "a warm-up of this guard is already running")
            }
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for GuardError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GuardError::Store(e) => Some(e),
            GuardError::FilterFull(e) => Some(e),
            GuardError::FilterContended | GuardError::WarmUpRunning => None,
        }
    }
}

/// Counters and filter figures of a guard, from [`CacheGuard::stats`].
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// let guard = CacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u8, u8>::new());
/// assert!(guard.stats().warming);
/// guard.warm_up(10, |_| {})?;
/// guard.get(&1)?;
/// let stats = guard.stats();
/// assert!(!stats.warming);
/// assert_eq!(stats.blocked, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct GuardStats {
    /// Lookups made through the guard.
    pub lookups: u64,
    /// Lookups the filter answered "absent" without the store.
    pub blocked: u64,
    /// Lookups that went to the store (filter said "maybe", or the guard was warming).
    pub passed: u64,
    /// Of `passed`, those sent to the store because the warm-up had not finished.
    pub passed_while_warming: u64,
    /// Lookups the store answered with a value.
    pub store_hits: u64,
    /// Lookups the filter passed and the store then answered "no such key".
    pub false_positives: u64,
    /// `false_positives / (false_positives + blocked)`: the share of absent keys the filter
    /// failed to block.
    pub observed_false_positive_rate: f64,
    /// The rate the filter's width gives at its current load.
    pub expected_false_positive_rate: f64,
    /// The rate the filter's width is configured for (at 95% load).
    pub configured_false_positive_rate: f64,
    /// Store calls that returned an error.
    pub store_errors: u64,
    /// Writes that created a key.
    pub creates: u64,
    /// Writes that updated an existing key.
    pub updates: u64,
    /// Deletes the store confirmed.
    pub deletes: u64,
    /// Writes refused because the filter had no room ([`GuardError::FilterFull`]).
    pub writes_refused: u64,
    /// Writes refused because the filter's insert gave up under contention
    /// ([`GuardError::FilterContended`]).
    pub writes_contended: u64,
    /// Filter copies left in place though their key may be gone (a write whose outcome is
    /// unknown, a delete during warm-up): each costs a false positive, never a false negative.
    pub stale_copies: u64,
    /// Removals that found no copy to remove: a sign that something wrote to the store, or
    /// removed from the filter, without going through the guard.
    pub missing_copies: u64,
    /// Whether the guard is still warming up (passing every lookup to the store).
    pub warming: bool,
    /// Fingerprints in the filter.
    pub filter_len: usize,
    /// Fingerprint slots in the filter.
    pub filter_capacity: usize,
    /// `filter_len / filter_capacity`.
    pub filter_load_factor: f64,
    /// Heap bytes of the filter.
    pub filter_memory_bytes: usize,
}

/// Progress of a warm-up, passed to its callback after each page.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// let store = MemoryStore::from_rows((0..10u8).map(|k| (k, ())));
/// let guard = CacheGuard::new(CuckooFilter::with_capacity(100), store);
/// let mut seen = Vec::new();
/// guard.warm_up(4, |p| seen.push(p.keys_loaded))?;
/// assert_eq!(seen, [4, 8, 10]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WarmUpProgress {
    /// Keys loaded into the filter so far.
    pub keys_loaded: u64,
    /// Pages scanned so far.
    pub pages: u64,
}

/// Where an interrupted warm-up resumes.
#[derive(Debug)]
struct WarmUpState<C> {
    cursor: Option<C>,
    progress: WarmUpProgress,
}

impl<C> Default for WarmUpState<C> {
    fn default() -> Self {
        WarmUpState {
            cursor: None,
            progress: WarmUpProgress {
                keys_loaded: 0,
                pages: 0,
            },
        }
    }
}

/// A [`CuckooFilter`] in front of a synchronous [`Store`], kept in sync by the
/// [consistency rules](self#consistency-rules).
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
    warm_up: Mutex<WarmUpState<St::Cursor>>,
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
            warm_up: Mutex::new(WarmUpState::default()),
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
        let mut state = match self.warm_up.try_lock() {
            Ok(state) => state,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Err(GuardError::WarmUpRunning),
        };
        if self.core.is_ready() {
            return Ok(state.progress);
        }
        loop {
            let page = self
                .store
                .scan_keys(state.cursor.as_ref(), page_size.max(1))
                .map_err(GuardError::Store)?;
            // The cursor advances only once the whole page is in the filter, so a retry after
            // a failure re-adds at most one page (extra copies: false positives, no more).
            state.progress.keys_loaded += self.core.warm_page(&page.keys)?;
            state.progress.pages += 1;
            progress(state.progress);
            match page.next {
                Some(next) => state.cursor = Some(next),
                None => break,
            }
        }
        self.core.finish_warm_up();
        Ok(state.progress)
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
