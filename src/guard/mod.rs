//! The cache guard: a [`CuckooFilter`](crate::CuckooFilter) in front of a backing store, kept
//! exactly in sync with it, so lookups of keys that do not exist are answered without touching
//! the store.
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
//! Each rule is tested in `tests/integration/guard.rs`.
//!
//! # False-positive memo
//!
//! A key the filter wrongly admits costs a store read each time it is looked up, and stays
//! admitted until a rebuild. The guard remembers a bounded number of keys the store answered
//! absent after the filter admitted them, and answers a replay of one without the store
//! ([`GuardStats::memo_hits`], [`CacheGuard::with_memo`]). Every put of a key clears its entry
//! before its store write, as rule 1 inserts before it, and a lookup installs its "absent"
//! only if no put of a key of its slot began since it looked. Every rebuild clears the memo
//! when it starts, so rows written behind the guard's back are found again. The memo is
//! bounded in entries (each a clone of a key), not bytes (the protocol and its argument are
//! in the `memo` module's source).
//!
//! # Warm-up
//!
//! A new guard is *warming*: its filter holds only keys created through it, so every lookup
//! goes to the store ([`GuardStats::passed_while_warming`]) rather than block keys not yet
//! loaded. [`CacheGuard::warm_up`] scans the store's keys in pages into the filter, then
//! switches the guard to filtering. Writes may run during the warm-up. If the warm-up stops
//! (a store error, a filter too small, a panic in the progress callback, or an
//! [`AsyncCacheGuard`] warm-up's future dropped), the guard keeps passing lookups through,
//! and calling `warm_up` again resumes after the last page loaded in full. One warm-up runs
//! at a time: a call while another runs gets [`GuardError::WarmUpRunning`].
//!
//! # Growth and online rebuild
//!
//! A filter built with the default [`Growth`](crate::Growth) adds a table when an insert finds
//! no room, so creates are not refused for lack of room; each table adds its own false
//! positives. The guard then rebuilds: it scans the store's keys into a new filter sized for
//! them (with headroom), while lookups and writes go on, and swaps it in, which brings back one
//! table, the design false-positive rate, and drops stale copies. Rebuilds start on their own
//! by the [`RebuildPolicy`] (the filter grew, its load passed 90%, stale copies passed 10% of
//! its fingerprints), one at a time, on a background thread ([`CacheGuard`]), or for an
//! [`AsyncCacheGuard`] in its [`RebuildDriver`] on any executor or else a tokio task (the
//! `tokio` feature); [`CacheGuard::rebuild`] runs one on demand.
//! A guard therefore needs no final size: it starts from the filter it is given, grows while
//! the warm-up loads the store, and is rebuilt to fit.
//!
//! During a rebuild the consistency rules extend to two filters (the protocol and its
//! argument are in the `core` module's source): a create inserts into both before its store
//! write, the scan waits for every create that began before the new filter was published (the
//! *writer gate*), a delete removes only from the filter that was complete when it began, and a
//! write whose outcome is unknown is remembered ([`GuardStats::orphaned_writes`]) and inserted
//! into every later rebuild, since it may still land after some scan, until a rebuild begins
//! after it can no longer land: for a store whose put ends with its call
//! ([`Store::PUT_ENDS_WITH_CALL`], [`AsyncStore::PUT_ENDS_WITH_FUTURE`]), the next rebuild
//! forgets it, and its scan finds the key if the write landed. A rebuild that fails
//! (a store error, say) leaves the current filter in place ([`GuardStats::rebuilds_failed`],
//! [`GuardStats::last_rebuild_error`]); an automatic one is retried after a pause.
//!
//! Each rebuild's filter hashes with fresh random keys when the builder made the hasher
//! ([`Builder::seed`](crate::Builder::seed) included), so keys that collide in one filter, or
//! a leaked snapshot's keys, are of no use against the next; a hasher given to
//! [`Builder::hasher`](crate::Builder::hasher) is kept. That is why [`CacheGuard::put`] needs
//! a `Clone` key: a write whose outcome is unknown keeps its key, not a hash, to insert it
//! under each later filter's keys.
//!
//! A filter that may not grow (or has added every table it may) refuses a create that finds
//! no room with [`GuardError::FilterFull`] before the store is touched: storing it would create
//! a key the filter cannot report.
//! A create whose filter insert gives up because concurrent writers kept changing its cuckoo
//! paths is refused the same way, with [`GuardError::FilterContended`]: rare, and worth a
//! retry rather than a bigger filter.
//!
//! A filter at its memory ceiling ([`Builder::max_memory`](crate::Builder::max_memory)) is
//! different: the guard takes the create without a copy, and from then on passes every lookup
//! that filter misses to the store ([`Admission::FailOpen`], counted in
//! [`GuardStats::passed_at_ceiling`], reported once on standard error), so no row is hidden
//! and no create refused. The first write that finds the filter so, or one in 64 of the
//! lookups it passes to the store, starts an automatic rebuild
//! ([`RebuildReason::MemoryLimit`]) sized for its keys and the creates it lacks, under the
//! ceiling; the rebuild's filter answers "absent" again. While the store holds more keys
//! than fit under the ceiling, no rebuild fits (each failure waits longer before the next),
//! and lookups go on passing to the store. A seal refuses such a filter
//! ([`GuardError::AtCeiling`]).
//!
//! # Restart from a sealed snapshot
//!
//! A guard that restarts would scan its store again. [`CacheGuard::seal`] (and
//! [`AsyncCacheGuard::seal`]) writes its filter's snapshot and a *seal* naming it into the
//! store ([`Store::SEALS`], [`AsyncStore::SEALS`]: the SQLite, PostgreSQL, Redis and in-memory
//! stores keep one), which every later `put` or `delete` through a guard clears in the same
//! atomic step as its write. The seal is a secret ([`SealSecret`]); the file carries its
//! public id and a MAC keyed by it. [`CacheGuard::restore`] ([`AsyncCacheGuard::restore`])
//! trusts the file only if the store still holds the seal it was written under (its MAC
//! checks out): nothing was written since, so the filter is exact and the guard filters at
//! once. Any other case (no file, a damaged or planted one, one that other users may have
//! written, no seal, another seal, a store without seals) gives a warming guard over a fresh
//! filter and the reason, as a
//! [`Restart`] and in [`GuardStats::restart`]. Seal at shutdown, or periodically
//! ([`CacheGuard::seal_periodically`], [`AsyncCacheGuard::seal_periodically`]): a crash after
//! a seal that no write has cleared also restarts fast. A snapshot whose seal was cleared is
//! never served, not even after loading it: the store offers no "changes since" to reconcile
//! it with, so it would need the same full scan as a warm-up before it could answer, and a
//! fresh filter from that scan holds no stale copies. The protocol and why it is safe while
//! writes run are in the `restart` module's source.
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
mod batch;
#[cfg(feature = "tokio")]
mod blocking;
pub(crate) mod core;
mod driver;
pub(crate) mod fleet_link;
mod memo;
mod memory;
mod periodic;
mod rebuild;
mod restart;
pub(crate) mod shadow;
mod store;
mod sync_guard;

use std::fmt;

pub use self::async_guard::AsyncCacheGuard;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use self::blocking::{Blocking, BlockingError};
pub use self::core::{Admission, FilterRef, FleetError, Position, PositionError};
pub use self::driver::RebuildDriver;
pub use self::memo::MemoError;
pub use self::memory::MemoryStore;
pub use self::periodic::{PeriodicSeal, SealReport};
pub use self::rebuild::{PolicyError, RebuildPolicy, RebuildReason, RebuildReport};
pub use self::restart::{Exposure, Restart, Sealed};
#[cfg(feature = "redis")]
pub(crate) use self::store::sample_by_scan_async;
#[cfg(feature = "sqlite")]
pub(crate) use self::store::{sample_by_scan, SampleRng};
pub use self::store::{AsyncStore, ScanPage, Store, Written};
pub use self::sync_guard::CacheGuard;
pub use crate::secret::{SealSecret, SEAL_SECRET_LEN};

use crate::{BuildError, InsertError, SnapshotError};

/// Why a guard operation failed.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, GuardError, MemoryStore};
/// use cuckoo_guard::{CuckooFilter, Growth};
///
/// let filter = CuckooFilter::builder().capacity(1).growth(Growth::Fixed).build()?;
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
    /// The store failed on a read this lookup shared with concurrent lookups of the same key
    /// (coalesced reads, see [`GuardStats::coalesced`]): each of them gets this error.
    /// [`store_error`](Self::store_error) gives the store's error from either variant.
    SharedStore(std::sync::Arc<E>),
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
    /// `warm_up` was called with a page size of 0.
    InvalidPageSize,
    /// `rebuild` was called before the warm-up finished: the rebuild would scan the store a
    /// second time while the first scan runs. Warm up first.
    Warming,
    /// `rebuild` was called while another rebuild of the same guard was running.
    RebuildRunning,
    /// The rebuild could not build its new filter (the capacity is too large, or the memory
    /// could not be allocated); the guard keeps its current filter.
    RebuildFilter(BuildError),
    /// [`CacheGuard::seal`] could not write its snapshot; the seal it wrote names no file, so
    /// no restart trusts it.
    Snapshot(SnapshotError),
    /// [`CacheGuard::seal`] was called on a guard whose store keeps no seal
    /// ([`Store::SEALS`]).
    SealUnsupported,
    /// [`CacheGuard::seal`] found the filter at its memory ceiling, holding no copy of some
    /// created keys ([`GuardStats::at_ceiling`]): a file of it would miss them, so none was
    /// written (the seal it wrote names no file). A rebuild that fits ends this.
    AtCeiling,
    /// The guard's fleet refused the operation (feature `fleet`): a create the coordinator
    /// could not announce, or whose acknowledgements did not arrive in time, was refused
    /// before the store was touched; a rebuild that could not read the coordinator stopped.
    Fleet(FleetError),
}

impl<E> GuardError<E> {
    /// The store's error, whether this lookup read alone ([`GuardError::Store`]) or shared
    /// the read ([`GuardError::SharedStore`]); `None` for the guard's own errors.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::GuardError;
    ///
    /// let alone = GuardError::Store("connection reset");
    /// let shared = GuardError::SharedStore(std::sync::Arc::new("connection reset"));
    /// assert_eq!(alone.store_error(), shared.store_error());
    /// assert_eq!(GuardError::<&str>::Warming.store_error(), None);
    /// ```
    pub fn store_error(&self) -> Option<&E> {
        match self {
            GuardError::Store(e) => Some(e),
            GuardError::SharedStore(e) => Some(e),
            _ => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for GuardError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuardError::Store(e) => write!(f, "store error: {e}"),
            GuardError::SharedStore(e) => write!(f, "store error (on a shared read): {e}"),
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
            GuardError::InvalidPageSize => {
                write!(f, "the warm-up's page size must be at least 1 key")
            }
            GuardError::Warming => write!(
                f,
                "the guard has not finished its warm-up; a rebuild or a seal needs a warm guard"
            ),
            GuardError::RebuildRunning => write!(f, "a rebuild of this guard is already running"),
            GuardError::RebuildFilter(e) => write!(
                f,
                "the rebuild could not build its filter ({e}); the guard keeps its current one"
            ),
            GuardError::Snapshot(e) => write!(f, "the guard's snapshot failed: {e}"),
            GuardError::SealUnsupported => {
                write!(
                    f,
                    "the guard's store keeps no seal, so its snapshots cannot be sealed"
                )
            }
            GuardError::AtCeiling => write!(
                f,
                "the guard's filter is at its memory ceiling and holds no copy of some keys; \
                 no snapshot was written"
            ),
            GuardError::Fleet(e) => write!(f, "{e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for GuardError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GuardError::Store(e) => Some(e),
            GuardError::SharedStore(e) => Some(&**e),
            GuardError::FilterFull(e) => Some(e),
            GuardError::RebuildFilter(e) => Some(e),
            GuardError::Snapshot(e) => Some(e),
            GuardError::Fleet(e) => Some(e),
            GuardError::FilterContended
            | GuardError::SealUnsupported
            | GuardError::AtCeiling
            | GuardError::WarmUpRunning
            | GuardError::InvalidPageSize
            | GuardError::Warming
            | GuardError::RebuildRunning => None,
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
    /// Lookups made through the guard (shadow lookups included).
    pub lookups: u64,
    /// Lookups the filter answered "absent" without the store.
    pub blocked: u64,
    /// Lookups the filter passed (it said "maybe", or the guard was warming): each went to
    /// the store, or was a [`memo_hits`](Self::memo_hits).
    pub passed: u64,
    /// Of `passed`, those sent to the store because the warm-up had not finished.
    pub passed_while_warming: u64,
    /// Of `passed`, those sent to the store because the guard is a fleet member that could
    /// not vouch for its filter ([`Admission::FailOpen`]): its lease lapsed, it was catching
    /// up or rebuilding, or the coordinator was unreachable.
    pub passed_failing_open: u64,
    /// Of `passed`, lookups the filter ruled out but sent to the store ([`Admission::FailOpen`])
    /// because the filter reached its memory ceiling
    /// ([`Builder::max_memory`](crate::Builder::max_memory)) and holds no copy of some keys
    /// created since ([`creates_at_ceiling`](Self::creates_at_ceiling)). They end with a
    /// rebuild that fits.
    pub passed_at_ceiling: u64,
    /// Creates the guard took at the memory ceiling with no copy in its filter (or in a
    /// rebuild's next filter): each makes that filter pass every lookup it misses to the store.
    pub creates_at_ceiling: u64,
    /// Whether the current filter holds no copy of some created keys (it reached its memory
    /// ceiling): lookups it misses pass to the store until a rebuild fits.
    pub at_ceiling: bool,
    /// Creates other members of the guard's fleet announced, applied to its filters.
    pub fleet_creates_applied: u64,
    /// Deletes other members of the guard's fleet announced, applied (a copy removed, or
    /// left stale when the guard could not be sure the copy was the key's).
    pub fleet_deletes_applied: u64,
    /// Lookups the store answered with a value.
    pub store_hits: u64,
    /// Lookups the filter passed and the store then answered "no such key".
    pub false_positives: u64,
    /// Lookups the filter passed that the false-positive memo answered "absent" without the
    /// store: replays of a key the store had just answered absent (see
    /// [`CacheGuard::with_memo`]).
    pub memo_hits: u64,
    /// Lookups the filter passed that waited for a concurrent lookup's store read of the
    /// same key and took its answer, instead of reading the store themselves (coalesced
    /// reads: at most one read per key in flight, see [`CacheGuard::with_memo`]).
    pub coalesced: u64,
    /// Shadow lookups ([`CacheGuard::shadow_get`], or a handler's
    /// [`get_admitted`](CacheGuard::get_admitted) with [`Admission::Shadow`]) the filter
    /// answered "absent": a blocking guard would have answered them without the store. They
    /// went to the store, and are not counted in [`blocked`](Self::blocked).
    pub shadow_would_block: u64,
    /// Of [`shadow_would_block`](Self::shadow_would_block), those the store answered with a
    /// value: lookups a blocking guard would have answered "absent" wrongly (rows written
    /// around the guard). Turn blocking on only while this stays 0.
    pub shadow_false_negatives: u64,
    /// Slots of the false-positive memo (0: no memo).
    pub memo_entries: usize,
    /// Memo slots a write of unknown outcome disabled for good (its key may appear at any
    /// later time, so its slot no longer remembers absent keys).
    pub memo_slots_disabled: usize,
    /// `(false_positives + memo_hits) / (false_positives + memo_hits + blocked + absent
    /// shadow lookups)`, with the coalesced lookups answered "absent" counted as false
    /// positives: the share of absent keys the filter failed to rule out (a shadow
    /// lookup the filter ruled out and the store answered absent counts as ruled out).
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
    /// unknown, a delete during warm-up), and in a fleet, second copies of keys another
    /// member wrote again (an update there): each costs a false positive or a slot, never a
    /// false negative; the rebuild policy's stale share counts them.
    pub stale_copies: u64,
    /// Removals that found no copy to remove: a sign that something wrote to the store, or
    /// removed from the filter, without going through the guard.
    pub missing_copies: u64,
    /// Writes whose outcome is unknown (a store error that may have been applied, a dropped
    /// future, a panic): such a write may land at any later time, so every rebuild inserts
    /// their keys (8 bytes each) into its new filter. For a store whose put ends with its
    /// call ([`Store::PUT_ENDS_WITH_CALL`], [`AsyncStore::PUT_ENDS_WITH_FUTURE`]) the next
    /// rebuild drops them instead; other stores keep them for the guard's life.
    pub orphaned_writes: usize,
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
    /// Tables the current filter added because a create found no room (see
    /// [`Growth`](crate::Growth)); each adds about one configured false-positive rate until
    /// a rebuild.
    pub filter_growth_steps: usize,
    /// Tables added over the guard's life, by every filter it has had.
    pub growth_steps: u64,
    /// Rebuilds that swapped in a new filter ([`CacheGuard::rebuild`], or automatic by the
    /// [`RebuildPolicy`]).
    pub rebuilds: u64,
    /// Rebuilds that stopped before the swap (a store error, say); the guard kept its filter.
    pub rebuilds_failed: u64,
    /// Automatic rebuilds the policy asked for that had nowhere to run: an
    /// [`AsyncCacheGuard`] with no [`RebuildDriver`] written to outside a tokio runtime (or
    /// without the `tokio` feature), or a rebuild thread the system refused. The first is also
    /// reported on standard error; after each the trigger waits a second before it asks again.
    pub rebuilds_skipped: u64,
    /// Whether a rebuild is running.
    pub rebuilding: bool,
    /// The last finished rebuild.
    pub last_rebuild: Option<RebuildReport>,
    /// Why the last failed rebuild stopped.
    pub last_rebuild_error: Option<String>,
    /// How the guard started when [`CacheGuard::restore`] made it: from a trusted snapshot,
    /// or why it scans the store instead (`None` for a guard made by `new`).
    pub restart: Option<String>,
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
