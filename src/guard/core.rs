//! The consistency rules, the warm-up and the rebuild, written once for the sync and async
//! guards.
//!
//! Each guard operation is "a decision here, a store call there, a decision here again"; this
//! module holds the decisions and the counters, the guards hold the store calls. The warm-up's
//! state machine is in [`warm_up`], the rebuild's in [`rebuild`], the seal's in [`seal`], the
//! writer gate between creates and a rebuild's scan (or a seal's snapshot) in [`gate`].
//!
//! # Filters and generations
//!
//! The guard's filters are published together in one [`Published`] cell: the *current*
//! filter, which lookups ask, and while a rebuild is pending the *next* one, which the rebuild
//! fills from the store. Each filter is a [`Generation`] with an id that grows with each
//! rebuild, so a write that spans a store call knows afterwards which of the filters it finds
//! are the ones it touched before. Every guard call pins for the filter loads of one step and
//! never across a store call.
//!
//! - **[guard.R1] A create** copies its key (the copy an orphan keeps, below) before it enters the
//!   gate, so no caller code (the key's `Clone`) runs while it counts there; a seat in the gate
//!   leaves it on every path, a panic in the key's `Hash` included. It enters the gate, then loads the filters (`SeqCst`, in the gate's total
//!   order) and inserts the key into the current filter and, if there is one, the next, before
//!   its store write, each hashed by that filter's own hasher. After the write it removes the
//!   copies it added (an update, a definite failure) only from those of its generations still
//!   published, each by the hash it inserted there; then it leaves the gate. A write whose
//!   outcome is unknown, or that never returned (a dropped future, a panic), keeps its copies
//!   and records the key itself as an *orphan*: the write may land at any later time, after
//!   some rebuild's scan passed its key, so a rebuild inserts the orphans into its next
//!   filter, hashed by that filter's hasher. An orphan notes whether its write had *ended*
//!   when it was recorded: could no longer change the store, because the store declares that
//!   a put ends with its call ([`Store::PUT_ENDS_WITH_CALL`](super::Store::PUT_ENDS_WITH_CALL),
//!   [`AsyncStore::PUT_ENDS_WITH_FUTURE`](super::AsyncStore::PUT_ENDS_WITH_FUTURE)) and the
//!   call had returned or unwound (or its future completed or was dropped). Whether a write
//!   ends with its call is the store's to say: a store that says nothing keeps its orphans.
//! - **[guard.R2] A delete** notes the current generation before its store delete. After the store
//!   confirmed, it removes a copy only from that generation and only if it is still current:
//!   a filter whose scan had not finished when the delete began may never have received the
//!   key, and removing "its" copy could take another key's (P10). Every other filter keeps a
//!   stale copy, counted.
//! - **[guard.R3] A rebuild** builds the next filter with fresh random hash keys when the builder
//!   made the current one's hasher (a caller's hasher is kept), so a file or a leak of one
//!   generation's keys says nothing about the next. It publishes the next filter (`SeqCst`),
//!   flips the gate and waits until
//!   every create that loaded the filters without the next one has left; then it takes the
//!   orphans, *prunes* those whose write had ended and inserts the others, scans the store
//!   into the next filter and publishes it as the current one (`SeqCst`), alone. A rebuild
//!   that stops before (a store error, a full filter, a dropped future) publishes the current
//!   filter alone again.
//!
//!   Pruning: an orphan this rebuild takes was recorded before it took the list (one lock),
//!   so an ended write ended before this scan and every later one begins; each of them finds
//!   the key if the write left it in the store. Every filter published as current after the
//!   orphan's create began either holds the key's copy (the create's own, or a rebuild's
//!   insert of the still-listed orphan) or was filled by a scan that began after the write
//!   ended; a stopped rebuild republishes a filter of the first kind or of the second. An
//!   orphan whose write had not ended stays listed for good: its write may land after any
//!   scan.
//!
//! - **[guard.R4] A create at the memory ceiling.** A filter insert that fails with
//!   [`InsertError::MemoryLimit`] does not refuse the create: the create *marks* that
//!   generation (`SeqCst`, a count that never decreases) after its inserts and before its store
//!   write, holds no copy there, and writes. A lookup whose filter read misses loads the mark of
//!   the generation it read (`Acquire`) and, if set, passes the key to the store
//!   ([`Admission::FailOpen`], counted as [`GuardStats::passed_at_ceiling`]). Nothing clears a
//!   mark: a marked generation leaves only by a rebuild's swap, and the next filter is marked
//!   by every create that could not insert into it. A seal refuses a marked filter. An
//!   automatic rebuild starts on the first write that finds the current filter marked, or on
//!   one in 64 lookups that fail open
//!   ([`RebuildReason::MemoryLimit`](super::RebuildReason::MemoryLimit)), sized for the keys
//!   the filter holds and the creates it lacks, and no larger than the ceiling allows.
//!
//!   Why a marked generation loses no key: a mark precedes the create's return, so a lookup
//!   that began after the create returned and read that generation reads the mark. A copy a
//!   delete removes from a marked generation may be another key's ([guard.R2] removes by
//!   fingerprint, and the marked create inserted none); that generation answers no
//!   "absent" again, so no key hides behind the missing copy, and no filter is ever made from
//!   its contents (a rebuild scans the store; a seal refuses it).
//!
//! A key whose create returned before a lookup began is in the filter the lookup asks, or
//! that filter is marked ([guard.R4]): the create inserted into (or marked) the current
//! filter it loaded, and the next if there was one. If the lookup loads a later current
//! filter, that is a next filter the create saw (it has the copy or the mark) or one whose
//! scan started after the create's store write (the gate), so the scan inserted the key.
//! Removals take only copies their own key put there ([guard.R1], [guard.R2]). No step
//! carries a hash from one filter to another: every insert, remove and lookup hashes the key
//! with the filter it touches, so filters of different keys hold each key where their own
//! lookups look.

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use super::shadow::ShadowLog;
use super::{GuardError, GuardStats, RebuildPolicy, Written};
use crate::sharded::{bump, Sharded};
use crate::sync::{pin, AtomicU32, AtomicU64, Ordering, Published};
use crate::{CuckooFilter, InsertError};

mod filter_ref;
pub(crate) mod fleet;
mod gate;
pub(crate) mod rebuild;
mod seal;
mod warm_up;

pub use self::filter_ref::FilterRef;
use self::fleet::FleetState;
pub use self::fleet::{FleetError, Position, PositionError};
use self::gate::Gate;
use self::rebuild::RebuildLog;
pub(super) use self::rebuild::{RebuildClaim, Triggered};
pub(super) use self::seal::{seal_async, seal_blocking};
pub(super) use self::warm_up::{Step, WarmUp};

const WARMING: u32 = 0;
const READY: u32 = 1;

/// One filter of a guard, numbered: the first is 0, each rebuild's next one more.
#[derive(Debug)]
pub(crate) struct Generation<H> {
    pub(crate) id: u64,
    pub(crate) filter: CuckooFilter<H>,
    /// In a fleet: the log's top read after this generation's scan ended ([fleet.F5]).
    pub(crate) scanned_at: Mutex<Option<Position>>,
    /// Creates this filter holds no copy of because it reached its memory ceiling
    /// ([guard.R4]); never decreases. While not 0 no lookup of this generation answers "absent".
    uncovered: AtomicU64,
}

impl<H> Generation<H> {
    pub(crate) fn new(id: u64, filter: CuckooFilter<H>) -> Self {
        Generation {
            id,
            filter,
            scanned_at: Mutex::new(None),
            uncovered: AtomicU64::new(0),
        }
    }

    /// Whether a create's key may be missing from this filter ([guard.R4]).
    #[inline]
    pub(crate) fn lacks_keys(&self) -> bool {
        // ORDERING: Acquire; [guard.R4] a lookup loads the mark after its filter read missed;
        // a create that marked before its store write and returned before the lookup began
        // happens before this load, so it reads the mark (or a later count).
        self.uncovered.load(Ordering::Acquire) != 0
    }

    /// The number of creates this filter holds no copy of ([guard.R4]).
    pub(crate) fn uncovered(&self) -> u64 {
        // ORDERING: Relaxed; a count for sizing a rebuild and for the stats.
        self.uncovered.load(Ordering::Relaxed)
    }

    /// [guard.R4] Marks this filter as lacking one more create's key.
    pub(crate) fn mark_uncovered(&self) {
        // ORDERING: SeqCst; [guard.R4] the mark, before the create's store write (program
        // order), or before the member acknowledges a remote create ([fleet.F4]), so every
        // lookup that begins after the create returned reads it.
        self.uncovered.fetch_add(1, Ordering::SeqCst);
    }
}

/// The filters a guard call finds: the current one, and a rebuild's next one while pending.
#[derive(Debug)]
pub(crate) struct Filters<H> {
    current: Arc<Generation<H>>,
    next: Option<Arc<Generation<H>>>,
}

impl<H> Filters<H> {
    fn both(&self) -> impl Iterator<Item = &Generation<H>> {
        std::iter::once(&*self.current).chain(self.next.as_deref())
    }
}

/// The current filter's answer for one key ([`GuardCore::filter_lookup`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The filter may hold the key.
    Found,
    /// The filter rules the key out.
    Missed,
    /// The filter missed, but it lacks keys created at its memory ceiling ([guard.R4]).
    Uncovered,
}

/// What a guard's filter decided for one lookup, counted in its [`GuardStats`].
///
/// [`CacheGuard::get`](super::CacheGuard::get) is [`admit`](super::CacheGuard::admit) then
/// [`get_admitted`](super::CacheGuard::get_admitted); splitting them lets a middleware decide
/// before the handler runs (the `tower` feature's `GuardLayer`) and the handler finish the
/// lookup without counting it twice.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{Admission, CacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::from_rows([(1u8, 'a')]));
/// assert_eq!(guard.admit(&2), Admission::Warming);
/// guard.warm_up(10, |_| {})?;
/// assert_eq!(guard.admit(&2), Admission::Blocked);
/// assert_eq!(guard.admit(&1), Admission::Pass);
/// assert_eq!(guard.get_admitted(&1, Admission::Pass)?, Some('a'));
/// assert_eq!(guard.stats().lookups, 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Admission {
    /// Definitely absent: answer "no such key" without the store.
    Blocked,
    /// Maybe present: ask the store.
    Pass,
    /// Warming up: the filter is incomplete, ask the store.
    Warming,
    /// The guard cannot vouch for its filter's "absent" now: ask the store. A fleet member
    /// whose lease lapsed, that is catching up or rebuilding, or whose coordinator is
    /// unreachable; or a filter at its memory ceiling that holds no copy of some created keys
    /// ([`GuardStats::passed_at_ceiling`](super::GuardStats::passed_at_ceiling)).
    FailOpen,
    /// Definitely absent, but the lookup runs in shadow mode
    /// ([`CacheGuard::shadow_get`](super::CacheGuard::shadow_get), the `tower` feature's
    /// `ShadowLayer`): ask the store anyway, and count a value it finds as a would-be false
    /// negative ([`GuardStats::shadow_false_negatives`]).
    Shadow,
}

impl Admission {
    /// Whether the filter answered "definitely absent".
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::Admission;
    ///
    /// assert!(Admission::Blocked.is_blocked());
    /// assert!(!Admission::Warming.is_blocked());
    /// ```
    pub fn is_blocked(self) -> bool {
        self == Self::Blocked
    }
}

/// A key as an orphan keeps it: hashable by any filter's hasher, copied out of a create's
/// borrow before the create enters the writer gate ([guard.R1]).
trait OrphanKey: Send + Sync {
    /// Feeds the key to `state` as its own `Hash` does.
    fn hash_into(&self, state: &mut dyn Hasher);
    /// An owned copy of the key.
    fn to_orphan(&self) -> Orphan;
}

impl<K: Hash + Clone + Send + Sync + 'static> OrphanKey for K {
    fn hash_into(&self, mut state: &mut dyn Hasher) {
        self.hash(&mut state);
    }

    fn to_orphan(&self) -> Orphan {
        Orphan(Arc::new(self.clone()))
    }
}

/// A key whose write's outcome is unknown ([guard.R1]). Hashes exactly as the key does (`&mut dyn
/// Hasher` forwards every write to the filter's hasher), so a filter of any keys finds it.
#[derive(Clone)]
pub(super) struct Orphan(Arc<dyn OrphanKey>);

impl Hash for Orphan {
    fn hash<S: Hasher>(&self, state: &mut S) {
        self.0.hash_into(state);
    }
}

impl fmt::Debug for Orphan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Orphan { .. }")
    }
}

/// An orphan as the guard lists it ([guard.R1]): the key, and whether its write had ended (could
/// no longer change the store) when it was recorded, which makes it prunable ([guard.R3]).
#[derive(Debug, Clone)]
pub(super) struct Recorded {
    pub(super) orphan: Orphan,
    pub(super) write_ended: bool,
}

/// Taken before a store delete: whether the warm-up had finished when the delete began, and
/// the generation then current ([guard.R2]).
#[derive(Debug, Clone, Copy)]
pub(super) struct DeleteTicket {
    ready_before: bool,
    generation: u64,
}

/// A create's place in the writer gate: dropped, it leaves the gate, whatever panicked.
struct GateSeat<'c> {
    gate: &'c Gate,
    phase: usize,
    /// Left already, by the loom control `orphan_after_leave`.
    #[cfg(cuckoo_loom)]
    left: bool,
}

impl Drop for GateSeat<'_> {
    fn drop(&mut self) {
        #[cfg(cuckoo_loom)]
        if self.left {
            return;
        }
        self.gate.leave(self.phase);
    }
}

/// A create between its filter inserts and its store write's end ([guard.R1]): its seat in the
/// gate, the generations it inserted into with the key's hash under each one's hasher, and
/// the key's orphan copy, made before the create entered the gate. Dropped without
/// [`GuardCore::end_put`] (a dropped future, a panic in the store), it records the orphan;
/// no caller code runs in its drop before it leaves the gate.
pub(super) struct PutTicket<'c, H> {
    core: &'c GuardCore<H>,
    /// Declared before `orphan`: the gate is left before the orphan's last copy (and with
    /// it the caller's key) may drop.
    seat: GateSeat<'c>,
    /// The current generation's id and the key's hash there.
    current: (u64, u64),
    /// Whether the create inserted a copy into the current generation (not at its memory
    /// ceiling, [guard.R4]).
    owns_current: bool,
    /// The next generation's id and the key's hash there, if the create inserted into one.
    next: Option<(u64, u64)>,
    orphan: Orphan,
    ended: bool,
    /// The store's word that its put can no longer write once the call has returned or
    /// unwound ([guard.R1]).
    write_ends_with_call: bool,
}

impl<H> PutTicket<'_, H> {
    /// Notes whether the store's put can no longer write once its call has ended
    /// ([`Store::PUT_ENDS_WITH_CALL`](super::Store::PUT_ENDS_WITH_CALL), or
    /// [`AsyncStore::PUT_ENDS_WITH_FUTURE`](super::AsyncStore::PUT_ENDS_WITH_FUTURE) for a
    /// put future that completed or was dropped): an orphan it records is then prunable.
    pub(super) fn write_ends_with_call(mut self, ends: bool) -> Self {
        self.write_ends_with_call = ends;
        self
    }

    /// The key's hash in generation `id`, if the create inserted into it.
    fn hash_in(&self, id: u64) -> Option<u64> {
        [self.owns_current.then_some(self.current), self.next]
            .into_iter()
            .flatten()
            .find_map(|(generation, hash)| (generation == id).then_some(hash))
    }
}

impl<H> fmt::Debug for PutTicket<'_, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PutTicket")
            .field("phase", &self.seat.phase)
            .field("current", &self.current.0)
            .field("next", &self.next.map(|(id, _)| id))
            .finish_non_exhaustive()
    }
}

impl<H> Drop for PutTicket<'_, H> {
    fn drop(&mut self) {
        #[cfg(cuckoo_loom)]
        if self.core.broken.orphan_after_leave && !self.ended {
            self.core.gate.leave(self.seat.phase);
            self.seat.left = true;
        }
        #[cfg(cuckoo_loom)]
        if self.core.broken.dropped_put_not_orphaned {
            self.ended = true;
        }
        if !self.ended {
            self.core.stale_copy();
            // A put that never returned: with a store whose put ends with its call, the call
            // has unwound or its future was dropped before this ticket (a local declared
            // before the call), so its write has ended.
            self.core
                .record_orphan(self.orphan.clone(), self.write_ends_with_call);
        }
        // The fields drop next: `seat` leaves the gate, after the orphan is recorded.
    }
}

#[derive(Debug, Default)]
struct Shard {
    blocked: AtomicU64,
    passed: AtomicU64,
    warming: AtomicU64,
    store_hits: AtomicU64,
    false_positives: AtomicU64,
    memo_hits: AtomicU64,
    coalesced: AtomicU64,
    /// Of `coalesced`, those whose shared read answered "no such key".
    coalesced_absent: AtomicU64,
    shadow_would_block: AtomicU64,
    shadow_false_negatives: AtomicU64,
    /// Shadow lookups the store answered absent: the filter was right.
    shadow_absent: AtomicU64,
    store_errors: AtomicU64,
    creates: AtomicU64,
    updates: AtomicU64,
    deletes: AtomicU64,
    refused: AtomicU64,
    contended: AtomicU64,
    stale_copies: AtomicU64,
    missing_copies: AtomicU64,
    writes: AtomicU64,
    /// Lookups that failed open and could start a rebuild at the ceiling ([guard.R4]).
    failing_open: AtomicU64,
    fail_open: AtomicU64,
    /// Lookups the filter missed but passed because it lacks keys ([guard.R4]).
    passed_at_ceiling: AtomicU64,
    /// Creates taken without a copy in some filter, at its memory ceiling ([guard.R4]).
    creates_at_ceiling: AtomicU64,
    applied_creates: AtomicU64,
    applied_deletes: AtomicU64,
}

/// The copies a create's inserts left ([`GuardCore::insert_copies`]).
pub(crate) struct Copies {
    /// Whether the current filter took a copy (it was not at its memory ceiling).
    pub(crate) current: bool,
    /// The next generation's id and the key's hash there, if it took a copy.
    pub(crate) next: Option<(u64, u64)>,
}

/// [guard.R4] An insert's outcome as a create at the memory ceiling sees it: `Ok(false)` it
/// inserted, `Ok(true)` the ceiling refused it (its generation is to be marked), `Err` any other
/// failure.
fn at_ceiling(inserted: Result<(), InsertError>) -> Result<bool, InsertError> {
    match inserted {
        Ok(()) => Ok(false),
        Err(InsertError::MemoryLimit { .. }) => Ok(true),
        Err(error) => Err(error),
    }
}

/// The guard error for a filter insert that stored nothing: no room and contention are
/// different conditions with different advice (a bigger filter, or a retry).
fn insert_failure<E>(error: InsertError) -> GuardError<E> {
    match error {
        InsertError::Contended => GuardError::FilterContended,
        full => GuardError::FilterFull(full),
    }
}

/// The filters, the warm-up state, the gate, the rebuild's bookkeeping and the counters of a
/// guard.
#[derive(Debug)]
pub(crate) struct GuardCore<H> {
    filters: Published<Filters<H>>,
    gate: Gate,
    state: AtomicU32,
    shards: Sharded<Shard>,
    orphans: Mutex<Vec<Recorded>>,
    rebuilds: RebuildLog,
    /// How a restored guard started ([`GuardStats::restart`]).
    restart: Mutex<Option<String>>,
    /// In a fleet: whether lookups may answer "absent" ([fleet.F1]).
    fleet: FleetState,
    /// Would-be false negatives of shadow lookups reported so far.
    shadow_log: ShadowLog,
    /// The loom models' negative controls: one protocol step each, broken on purpose.
    #[cfg(cuckoo_loom)]
    broken: Broken,
    /// The loom models' hashers carry no ahash keys: this gives each rebuild's next filter a
    /// hasher other than the current one's.
    #[cfg(cuckoo_loom)]
    rekey: Option<fn(&H) -> H>,
}

/// A protocol step a loom negative control breaks.
#[cfg(cuckoo_loom)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Broken {
    /// [guard.R3]: the scan starts without waiting at the gate.
    pub(crate) gate_skipped: bool,
    /// [guard.R2]: a delete removes from every filter, the unscanned next one included.
    pub(crate) delete_from_every_filter: bool,
    /// [guard.R3]: a rebuild flips the gate without first draining the phase a stopped rebuild
    /// left undrained.
    pub(crate) leftover_ignored: bool,
    /// [guard.R1]: a create inserts into the current filter only, never the next.
    pub(crate) next_skipped: bool,
    /// [guard.R1]: a create inserts into the next filter the hash the current filter's hasher gave.
    pub(crate) next_hashed_by_current: bool,
    /// [guard.R1]: a put dropped before its end leaves the gate before it records its orphan.
    pub(crate) orphan_after_leave: bool,
    /// [guard.R3]: a rebuild does not insert the orphans into its next filter.
    pub(crate) orphans_skipped: bool,
    /// [guard.R3]: a rebuild prunes every orphan, those whose write may still land included.
    pub(crate) unsettled_orphans_pruned: bool,
    /// [guard.R3]: a rebuild inserts each orphan into its next filter by the hash the current
    /// filter's hasher gives it (an orphan kept as a hash).
    pub(crate) orphans_hashed_by_current: bool,
    /// [guard.R1]: an update removes its copy from every generation by the hash the current
    /// filter's hasher gave it (a ticket carrying one hash).
    pub(crate) own_copies_hashed_by_current: bool,
    /// [gate.W3]: no fence between the flip and the rebuild's counter reads.
    pub(crate) flip_unfenced: bool,
    /// [guard.R1]: an update removes a copy from every published generation, also those it never
    /// inserted into.
    pub(crate) update_removes_unowned_copies: bool,
    /// [guard.R1]: a create inserts into a filter only if the filter does not already report the
    /// key.
    pub(crate) insert_skipped_when_present: bool,
    /// [guard.R1]: a create loads the filters before it enters the gate.
    pub(crate) filters_loaded_before_entering: bool,
    /// [guard.R1]: a put whose outcome is unknown removes its copies (it still records its orphan).
    pub(crate) unknown_outcome_removes_copies: bool,
    /// [guard.R1]: a put whose outcome is unknown keeps its copies but records no orphan.
    pub(crate) unknown_outcome_not_orphaned: bool,
    /// [guard.R1]: a put whose outcome is unknown leaves the gate before it records its orphan.
    pub(crate) unknown_orphan_after_leave: bool,
    /// [guard.R1]: a put dropped before its end records no orphan.
    pub(crate) dropped_put_not_orphaned: bool,
    /// [guard.R2]: a delete notes the next generation, when one is pending, instead of the current.
    pub(crate) delete_notes_the_next_generation: bool,
    /// [guard.R2]: a delete notes the current generation after its store delete, not before.
    pub(crate) delete_generation_noted_late: bool,
    /// [guard.R2]: a delete the store did not confirm (no row deleted) removes a copy too.
    pub(crate) delete_unconfirmed_removes: bool,
    /// [guard.R3]: a rebuild takes the orphans out of the list, so only the next rebuild inserts them.
    pub(crate) orphans_taken: bool,
    /// [guard.R3]: a rebuild reads the orphan list when it begins, before its wait at the gate.
    pub(crate) orphans_read_before_the_gate: bool,
    /// [guard.R3]: a stopped rebuild's generation id is given to the next rebuild's filter.
    pub(crate) stopped_ids_reused: bool,
    /// [guard.R3]: a stopped rebuild publishes its unfinished next filter as the current one.
    pub(crate) stopped_publishes_next: bool,
    /// [seal.S4] before [seal.S2]: the snapshot file is written before the seal.
    pub(crate) seal_after_snapshot: bool,
    /// [seal.I3]: a drain dropped before it is done does not record its phase as undrained.
    pub(crate) seal_drain_forgets: bool,
    /// [seal.S3]: the snapshot follows the seal write without waiting for in-flight creates.
    pub(crate) seal_skips_wait: bool,
    /// [seal.I4], in the async driver: the seal write is reported as returned once started,
    /// and awaited only after the file write (its round trip overlapping the drain and the
    /// file).
    pub(crate) seal_async_overlaps_the_seal_write: bool,
    /// [fleet.F1]: a lookup that missed does not check the lease deadline.
    pub(crate) no_deadline_check: bool,
    /// [fleet.F1]: a lookup that missed does not load the word a second time.
    pub(crate) word_not_rechecked: bool,
    /// [fleet.F4]: an announced create is applied to the current filter only, never the next.
    pub(crate) apply_skips_next: bool,
    /// [fleet.F5]: an announced delete removes a copy whenever it began.
    pub(crate) delete_ignores_scan: bool,
    /// [fleet.F7]: a create checks the sealed flag before it enters the gate.
    pub(crate) sealed_checked_before_gate: bool,
    /// [guard.R4]: a create at the memory ceiling, local or applied ([fleet.F4]), marks no filter.
    pub(crate) ceiling_unmarked: bool,
    /// [guard.R4]: a create at the memory ceiling marks the current filter only, never a next one
    /// it could not insert into.
    pub(crate) ceiling_next_unmarked: bool,
    /// [guard.R4]: a seal writes its file from a marked filter.
    pub(crate) ceiling_sealed: bool,
}

impl<H> GuardCore<H> {
    /// The current filter, kept alive by the handle.
    pub(super) fn filter(&self) -> FilterRef<H> {
        let pin = pin();
        // ORDERING: Acquire; pairs with the publication [guard.R3], so the filter's contents as
        // published are visible.
        let filters = self.filters.load(Ordering::Acquire, &pin);
        FilterRef {
            generation: Arc::clone(&filters.current),
        }
    }

    fn shard(&self) -> &Shard {
        self.shards.local()
    }

    /// Counts a copy left in a filter though its key may be gone.
    fn stale_copy(&self) {
        bump(&self.shard().stale_copies);
        self.rebuilds.add_stale(1);
    }

    fn record_orphan(&self, orphan: Orphan, write_ended: bool) {
        self.orphans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Recorded {
                orphan,
                write_ended,
            });
    }
}

impl<H: BuildHasher> GuardCore<H> {
    pub(super) fn new(filter: CuckooFilter<H>, policy: RebuildPolicy) -> Self {
        let min_capacity = filter.built_for();
        GuardCore {
            filters: Published::new(Filters {
                current: Arc::new(Generation::new(0, filter)),
                next: None,
            }),
            gate: Gate::new(),
            state: AtomicU32::new(WARMING),
            shards: Sharded::new(Shard::default),
            orphans: Mutex::new(Vec::new()),
            rebuilds: RebuildLog::new(policy, min_capacity),
            restart: Mutex::new(None),
            fleet: FleetState::new(),
            shadow_log: ShadowLog::default(),
            #[cfg(cuckoo_loom)]
            broken: Broken::default(),
            #[cfg(cuckoo_loom)]
            rekey: None,
        }
    }

    pub(super) fn policy(&self) -> &RebuildPolicy {
        self.rebuilds.policy()
    }

    pub(crate) fn is_ready(&self) -> bool {
        // ORDERING: Acquire; pairs with the Release in `finish_warm_up`, so a lookup that sees
        // "ready" also sees every key the warm-up inserted.
        self.state.load(Ordering::Acquire) == READY
    }

    /// Whether the current filter may hold `key` (a pin, one load, one lookup), for the loom
    /// models' asserts; lookups ask [`filter_lookup`](Self::filter_lookup), which also reads
    /// the mark.
    #[cfg(cuckoo_loom)]
    pub(crate) fn filter_contains<K: Hash + ?Sized>(&self, key: &K) -> bool {
        let pin = pin();
        // ORDERING: Acquire; as in `filter`.
        self.filters
            .load(Ordering::Acquire, &pin)
            .current
            .filter
            .contains(key)
    }

    /// Whether the current filter may hold each key of `keys`, into `found`, by the filter's
    /// batched lookup; then, if a key missed, whether that filter lacks keys created
    /// at its memory ceiling ([guard.R4], loaded after the reads).
    pub(crate) fn filter_contains_many<K: Hash>(&self, keys: &[K], found: &mut [bool]) -> bool {
        let pin = pin();
        // ORDERING: Acquire; as in `filter`.
        let current = &self.filters.load(Ordering::Acquire, &pin).current;
        current.filter.contains_many(keys, found);
        found.contains(&false) && current.lacks_keys()
    }

    /// [guard.R4] The current filter's answer for `key`: found, missed, or missed in a filter
    /// that lacks keys created at its memory ceiling (the mark loaded after the read).
    #[inline]
    pub(crate) fn filter_lookup<K: Hash + ?Sized>(&self, key: &K) -> Lookup {
        let pin = pin();
        // ORDERING: Acquire; as in `filter`.
        let current = &self.filters.load(Ordering::Acquire, &pin).current;
        if current.filter.contains(key) {
            Lookup::Found
        } else if current.lacks_keys() {
            Lookup::Uncovered
        } else {
            Lookup::Missed
        }
    }

    /// Lookup step 1 for a batch: [`admit`](Self::admit) of each key, with one filter pass.
    pub(super) fn admit_many<K: Hash>(&self, keys: &[K]) -> Vec<Admission> {
        if !self.is_ready() {
            crate::sharded::add(&self.shard().warming, keys.len() as u64);
            vec![Admission::Warming; keys.len()]
        } else {
            self.admit_warm_many(keys)
        }
    }

    /// Whether a lookup would pass `key` to the store (not counted).
    pub(super) fn may_contain<K: Hash + ?Sized>(&self, key: &K) -> bool {
        !self.is_ready() || self.decide_warm(key) != Admission::Blocked
    }

    /// Lookup step 1: ask the filter, unless it is still warming up.
    pub(super) fn admit<K: Hash + ?Sized>(&self, key: &K) -> Admission {
        if !self.is_ready() {
            bump(&self.shard().warming);
            Admission::Warming
        } else {
            self.admit_warm(key)
        }
    }

    /// Lookup step 1 in shadow mode: as [`admit`](Self::admit), except that "absent" is
    /// counted as a would-be block and answered [`Admission::Shadow`], which goes to the store.
    pub(super) fn admit_shadow<K: Hash + ?Sized>(&self, key: &K) -> Admission {
        if !self.is_ready() {
            bump(&self.shard().warming);
            Admission::Warming
        } else {
            match self.filter_lookup(key) {
                Lookup::Found => {
                    bump(&self.shard().passed);
                    Admission::Pass
                }
                Lookup::Uncovered => {
                    bump(&self.shard().passed_at_ceiling);
                    Admission::FailOpen
                }
                Lookup::Missed => {
                    bump(&self.shard().shadow_would_block);
                    Admission::Shadow
                }
            }
        }
    }

    /// Lookup step 2: count what the store answered.
    pub(super) fn observe_get<V, E>(&self, admission: Admission, result: &Result<Option<V>, E>) {
        let shard = self.shard();
        match result {
            Ok(Some(_)) => {
                bump(&shard.store_hits);
                if admission == Admission::Shadow {
                    bump(&shard.shadow_false_negatives);
                }
            }
            // Only a filter that said "maybe" can have produced a false positive.
            Ok(None) if admission == Admission::Pass => bump(&shard.false_positives),
            Ok(None) if admission == Admission::Shadow => bump(&shard.shadow_absent),
            Ok(None) => {}
            Err(_) => bump(&shard.store_errors),
        }
    }

    /// Reports a shadow lookup's would-be false negative on standard error, once per key
    /// within the log's budget.
    pub(super) fn report_shadow_miss(&self, key: &dyn fmt::Debug) {
        self.shadow_log.report(key, "the store found it");
    }

    /// Lookup step 2 when the false-positive memo answered "absent" (module `memo`): a false
    /// positive of the filter that cost no store read.
    pub(super) fn observe_memo_hit(&self) {
        bump(&self.shard().memo_hits);
    }

    /// A lookup answered by another lookup's store read ([memo.C2]): an "absent" counts as
    /// a false positive, an error as neither.
    pub(super) fn observe_coalesced<V, E>(&self, answer: &Result<Option<V>, E>) {
        let shard = self.shard();
        bump(&shard.coalesced);
        if let Ok(None) = answer {
            bump(&shard.coalesced_absent);
        }
    }

    /// Create step 1 (rule 1, rule 3, [guard.R1]): add a copy of the key to the current filter, and
    /// to a pending rebuild's next filter, **before** the store write, even if a filter
    /// already reports it, each hashed by that filter's hasher. Refuses the write if a filter
    /// has no room or its insert gave up under contention. The ticket holds a copy of the key,
    /// made before the gate is entered (a `Clone` that panics leaves no trace), to record it
    /// as an orphan if the write's outcome is never known.
    pub(super) fn begin_put<K: Hash + Clone + Send + Sync + 'static, E>(
        &self,
        key: &K,
    ) -> Result<PutTicket<'_, H>, GuardError<E>> {
        let orphan = key.to_orphan();
        #[cfg(cuckoo_loom)]
        if self.broken.sealed_checked_before_gate && self.fleet_sealed() {
            return Err(GuardError::Fleet(FleetError::Sealed));
        }
        #[cfg(cuckoo_loom)]
        let early_pin = pin();
        #[cfg(cuckoo_loom)]
        let early = self
            .broken
            .filters_loaded_before_entering
            // ORDERING: SeqCst; the broken variant's load, before the gate.
            .then(|| self.filters.load(Ordering::SeqCst, &early_pin));
        let seat = GateSeat {
            gate: &self.gate,
            phase: self.gate.enter(),
            #[cfg(cuckoo_loom)]
            left: false,
        };
        let pin = pin();
        // ORDERING: SeqCst; [guard.R1] in the gate's total order: a create that finds no next
        // filter here is one a pending rebuild waits for (gate module).
        let filters = self.filters.load(Ordering::SeqCst, &pin);
        #[cfg(cuckoo_loom)]
        let filters = early.unwrap_or(filters);
        let hash = filters.current.filter.hash_key(key);
        #[cfg(cuckoo_loom)]
        let skipped = |filter: &CuckooFilter<H>, hash: u64| {
            self.broken.insert_skipped_when_present && filter.tables().count(hash) > 0
        };
        #[cfg(not(cuckoo_loom))]
        let skipped = |_: &CuckooFilter<H>, _: u64| false;
        let mut ticket = PutTicket {
            core: self,
            seat,
            current: (filters.current.id, hash),
            owns_current: true,
            next: None,
            orphan,
            ended: true,
            write_ends_with_call: false,
        };
        let insert = |filter: &CuckooFilter<H>, hash: u64| {
            if skipped(filter, hash) {
                return Ok(());
            }
            filter.insert_hash(hash)
        };
        let refuse = |error: InsertError| {
            let shard = self.shard();
            bump(match error {
                InsertError::Contended => &shard.contended,
                _ => &shard.refused,
            });
            // `ticket` drops as ended: it leaves the gate and records nothing.
            Err(insert_failure(error))
        };
        #[cfg(cuckoo_loom)]
        let next = filters
            .next
            .as_deref()
            .filter(|_| !self.broken.next_skipped);
        #[cfg(not(cuckoo_loom))]
        let next = filters.next.as_deref();
        let next = next.map(|next| {
            #[cfg(cuckoo_loom)]
            if self.broken.next_hashed_by_current {
                return (next, hash);
            }
            (next, next.filter.hash_key(key))
        });
        let copies = match self.insert_copies(&filters.current, hash, next, insert) {
            Ok(copies) => copies,
            Err(error) => return refuse(error),
        };
        ticket.owns_current = copies.current;
        ticket.next = copies.next;
        ticket.ended = false;
        #[cfg(cuckoo_loom)]
        let check = !self.broken.sealed_checked_before_gate;
        #[cfg(not(cuckoo_loom))]
        let check = true;
        // [fleet.F7]: after the inserts, inside the gate.
        if check && self.fleet_sealed() {
            self.cancel_put(ticket);
            return Err(GuardError::Fleet(FleetError::Sealed));
        }
        Ok(ticket)
    }

    /// [guard.R1], [guard.R4] and [fleet.F4]: a create's copies, for a local create and for a
    /// fleet member applying another's. Inserts `hash` into `current`, then a pending next
    /// filter's hash of the key into it, each by `insert`. A filter at its memory ceiling
    /// takes no copy and is marked after both inserts ([`mark_lacking`](Self::mark_lacking)).
    /// Any other failure takes back the copy the current filter took, marks nothing and is
    /// returned.
    pub(crate) fn insert_copies(
        &self,
        current: &Generation<H>,
        hash: u64,
        next: Option<(&Generation<H>, u64)>,
        insert: impl Fn(&CuckooFilter<H>, u64) -> Result<(), InsertError>,
    ) -> Result<Copies, InsertError> {
        let current_lacks = at_ceiling(insert(&current.filter, hash))?;
        let mut copies = Copies {
            current: !current_lacks,
            next: None,
        };
        let mut next_lacks = None;
        if let Some((next, next_hash)) = next {
            match at_ceiling(insert(&next.filter, next_hash)) {
                Ok(false) => copies.next = Some((next.id, next_hash)),
                Ok(true) => next_lacks = Some(next),
                Err(error) => {
                    if copies.current {
                        // The copy just added to the current filter is this create's own.
                        current.filter.remove_hash(hash);
                    }
                    return Err(error);
                }
            }
        }
        self.mark_lacking(current, current_lacks, next_lacks);
        Ok(copies)
    }

    /// [guard.R4] Marks the generations a create could not enter at their memory ceiling
    /// (`current` if `current_lacks`, and `next`), before the create's store write or the
    /// member's acknowledgement; counts the create, and reports the first on standard error.
    pub(crate) fn mark_lacking(
        &self,
        current: &Generation<H>,
        current_lacks: bool,
        next: Option<&Generation<H>>,
    ) {
        #[cfg(cuckoo_loom)]
        let (current_lacks, next) = if self.broken.ceiling_unmarked {
            (false, None)
        } else if self.broken.ceiling_next_unmarked {
            (current_lacks, None)
        } else {
            (current_lacks, next)
        };
        if current_lacks {
            current.mark_uncovered();
        }
        if let Some(next) = next {
            next.mark_uncovered();
        }
        if !current_lacks && next.is_none() {
            return;
        }
        bump(&self.shard().creates_at_ceiling);
        if self.rebuilds.first_at_ceiling() {
            eprintln!(
                "cuckoo-guard: the filter reached its memory ceiling ({} bytes): creates go on \
                 without a copy and lookups the filter misses pass to the store until a rebuild \
                 fits (counted in GuardStats::passed_at_ceiling)",
                current.filter.max_memory().unwrap_or(0)
            );
        }
    }

    /// Create step 2: keep the copies for a create; remove them again for an update or a
    /// definite failure; keep them (stale, a false positive at worst) and record an orphan
    /// when the failure may have been applied (rule 4, [guard.R1]). Returns whether an automatic
    /// rebuild should start (with its claim taken).
    pub(super) fn end_put<E>(
        &self,
        mut ticket: PutTicket<'_, H>,
        result: &Result<Written, E>,
        outcome_unknown: impl FnOnce(&E) -> bool,
    ) -> Option<Triggered> {
        let shard = self.shard();
        match result {
            Ok(Written::Created) => bump(&shard.creates),
            Ok(Written::Updated) => {
                bump(&shard.updates);
                self.remove_own_copies(&ticket);
            }
            Err(error) => {
                bump(&shard.store_errors);
                if outcome_unknown(error) {
                    #[cfg(cuckoo_loom)]
                    if self.broken.unknown_outcome_removes_copies {
                        self.remove_own_copies(&ticket);
                    }
                    #[cfg(cuckoo_loom)]
                    if self.broken.unknown_orphan_after_leave {
                        self.gate.leave(ticket.seat.phase);
                        ticket.seat.left = true;
                    }
                    self.stale_copy();
                    #[cfg(cuckoo_loom)]
                    let recorded = !self.broken.unknown_outcome_not_orphaned;
                    #[cfg(not(cuckoo_loom))]
                    let recorded = true;
                    if recorded {
                        // The call returned: with a store whose put ends with its call, the
                        // write has ended.
                        self.record_orphan(ticket.orphan.clone(), ticket.write_ends_with_call);
                    }
                } else {
                    self.remove_own_copies(&ticket);
                }
            }
        }
        ticket.ended = true;
        drop(ticket);
        self.after_write()
    }

    /// Create step 2 for a create refused before its store write (its fleet refused it):
    /// removes its copies, counts nothing.
    pub(super) fn cancel_put(&self, mut ticket: PutTicket<'_, H>) {
        self.remove_own_copies(&ticket);
        ticket.ended = true;
    }

    /// Removes the copies a create inserted, from those of its generations still published.
    fn remove_own_copies(&self, ticket: &PutTicket<'_, H>) {
        let pin = pin();
        // ORDERING: Acquire; the generations found are published ones (their contents
        // visible); which ones does not matter for safety, only ids matching the ticket's are
        // touched.
        let filters = self.filters.load(Ordering::Acquire, &pin);
        for generation in filters.both() {
            #[cfg(cuckoo_loom)]
            let owned = ticket.hash_in(generation.id).or_else(|| {
                self.broken
                    .update_removes_unowned_copies
                    .then(|| generation.filter.hash_key(&ticket.orphan))
            });
            #[cfg(not(cuckoo_loom))]
            let owned = ticket.hash_in(generation.id);
            let Some(hash) = owned else {
                continue;
            };
            #[cfg(cuckoo_loom)]
            let hash = if self.broken.own_copies_hashed_by_current {
                ticket.current.1
            } else {
                hash
            };
            if !generation.filter.remove_hash(hash) {
                // Only possible if someone removed from the filter behind the guard's back.
                bump(&self.shard().missing_copies);
            }
        }
    }

    /// A hasher with fresh random keys for a rebuild's next filter, and its ahash keys: only
    /// for a filter whose hasher the builder made (a caller's hasher cannot be remade).
    fn fresh_hasher(&self, filter: &CuckooFilter<H>) -> Option<(H, Option<[u64; 4]>)>
    where
        H: 'static,
    {
        #[cfg(cuckoo_loom)]
        if let Some(rekey) = self.rekey {
            return Some((rekey(filter.hasher()), None));
        }
        filter.hash_keys()?;
        crate::filter::fresh_ahash::<H>().map(|(hasher, keys)| (hasher, Some(keys)))
    }

    /// Delete step 1: note whether the warm-up had finished and which generation is current
    /// before the store delete begins ([guard.R2]).
    pub(super) fn begin_delete(&self) -> DeleteTicket {
        let ready_before = self.is_ready();
        let pin = pin();
        // ORDERING: Acquire; a generation found current here had its scan finished (its
        // publication [guard.R3] happens before this load).
        let filters = self.filters.load(Ordering::Acquire, &pin);
        #[cfg(cuckoo_loom)]
        let noted = match &filters.next {
            Some(next) if self.broken.delete_notes_the_next_generation => next,
            _ => &filters.current,
        };
        #[cfg(not(cuckoo_loom))]
        let noted = &filters.current;
        let generation = noted.id;
        DeleteTicket {
            ready_before,
            generation,
        }
    }

    /// Delete step 2 (rule 2, [guard.R2]): remove a copy only after the store confirmed a deletion,
    /// only if the warm-up had finished before the delete began, and only from the generation
    /// that was current then if it still is. Every other filter keeps a stale copy. Returns
    /// whether an automatic rebuild should start (with its claim taken).
    pub(super) fn end_delete<K: Hash + ?Sized, E>(
        &self,
        key: &K,
        ticket: DeleteTicket,
        result: &Result<bool, E>,
    ) -> Option<Triggered> {
        let shard = self.shard();
        #[cfg(cuckoo_loom)]
        let result = &match result {
            Ok(false) if self.broken.delete_unconfirmed_removes => Ok(true),
            Ok(deleted) => Ok(*deleted),
            Err(error) => Err(error),
        };
        match result {
            Ok(true) => {
                bump(&shard.deletes);
                let pin = pin();
                // ORDERING: Acquire; as in `remove_own_copies`.
                let filters = self.filters.load(Ordering::Acquire, &pin);
                #[cfg(cuckoo_loom)]
                let ticket = DeleteTicket {
                    generation: if self.broken.delete_generation_noted_late {
                        filters.current.id
                    } else {
                        ticket.generation
                    },
                    ..ticket
                };
                for generation in filters.both() {
                    #[cfg(cuckoo_loom)]
                    let generation_matches =
                        generation.id == ticket.generation || self.broken.delete_from_every_filter;
                    #[cfg(not(cuckoo_loom))]
                    let generation_matches = generation.id == ticket.generation;
                    if ticket.ready_before && generation_matches {
                        if !generation.filter.remove(key) {
                            // The store held a key the filter never saw: it was written
                            // around the guard. Counted, so the misuse shows in the stats.
                            bump(&shard.missing_copies);
                        }
                    } else {
                        self.stale_copy();
                    }
                }
                self.after_write()
            }
            Ok(false) => None,
            Err(_) => {
                bump(&shard.store_errors);
                None
            }
        }
    }

    /// Warm-up: adds one page of scanned keys.
    fn warm_page<'k, K: Hash + 'k, E>(
        &self,
        keys: impl IntoIterator<Item = &'k K>,
    ) -> Result<u64, GuardError<E>> {
        let pin = pin();
        // ORDERING: Acquire; no rebuild runs while warming, so this is generation 0.
        let filter = &self.filters.load(Ordering::Acquire, &pin).current.filter;
        let mut loaded = 0;
        for key in keys {
            filter.insert(key).map_err(insert_failure)?;
            loaded += 1;
        }
        Ok(loaded)
    }

    /// Records how a restored guard started.
    pub(crate) fn set_restart(&self, how: String) {
        *self.restart.lock().unwrap_or_else(PoisonError::into_inner) = Some(how);
    }

    /// Warm-up done: from now on lookups consult the filter.
    pub(super) fn finish_warm_up(&self) {
        // ORDERING: Release; publishes the warm-up's inserts to lookups that load "ready"
        // with Acquire (`is_ready`).
        self.state.store(READY, Ordering::Release);
    }

    pub(super) fn stats(&self) -> GuardStats {
        let sum = |field: fn(&Shard) -> &AtomicU64| self.shards.sum(field);
        let blocked = sum(|s| &s.blocked);
        let passed = sum(|s| &s.passed);
        let warming = sum(|s| &s.warming);
        let fail_open = sum(|s| &s.fail_open);
        let at_ceiling = sum(|s| &s.passed_at_ceiling);
        let false_positives = sum(|s| &s.false_positives);
        let passed_absent = sum(|s| &s.memo_hits) + sum(|s| &s.coalesced_absent);
        let shadow_would_block = sum(|s| &s.shadow_would_block);
        // Memo hits are false positives of the filter too, answered without the store; a
        // shadow lookup the store answered absent is a key the filter rightly ruled out.
        let negatives = blocked + false_positives + passed_absent + sum(|s| &s.shadow_absent);
        let filter = self.filter();
        let log = self.rebuilds.snapshot();
        let growth_steps = filter.growth_steps();
        GuardStats {
            lookups: blocked + passed + warming + fail_open + at_ceiling + shadow_would_block,
            blocked,
            passed: passed + warming + fail_open + at_ceiling,
            passed_failing_open: fail_open,
            passed_at_ceiling: at_ceiling,
            creates_at_ceiling: sum(|s| &s.creates_at_ceiling),
            at_ceiling: filter.generation.lacks_keys(),
            fleet_creates_applied: sum(|s| &s.applied_creates),
            fleet_deletes_applied: sum(|s| &s.applied_deletes),
            passed_while_warming: warming,
            store_hits: sum(|s| &s.store_hits),
            false_positives,
            observed_false_positive_rate: if negatives == 0 {
                0.0
            } else {
                (false_positives + passed_absent) as f64 / negatives as f64
            },
            memo_hits: sum(|s| &s.memo_hits),
            coalesced: sum(|s| &s.coalesced),
            shadow_would_block,
            shadow_false_negatives: sum(|s| &s.shadow_false_negatives),
            // Filled in by the guard, which owns the memo.
            memo_entries: 0,
            memo_slots_disabled: 0,
            expected_false_positive_rate: filter.expected_false_positive_rate(),
            configured_false_positive_rate: filter.configured_false_positive_rate(),
            store_errors: sum(|s| &s.store_errors),
            creates: sum(|s| &s.creates),
            updates: sum(|s| &s.updates),
            deletes: sum(|s| &s.deletes),
            writes_refused: sum(|s| &s.refused),
            writes_contended: sum(|s| &s.contended),
            stale_copies: sum(|s| &s.stale_copies),
            missing_copies: sum(|s| &s.missing_copies),
            orphaned_writes: self
                .orphans
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len(),
            warming: !self.is_ready(),
            filter_len: filter.len(),
            filter_capacity: filter.capacity(),
            filter_load_factor: filter.load_factor(),
            filter_memory_bytes: filter.memory_usage(),
            filter_growth_steps: growth_steps,
            growth_steps: log.retired_growth_steps + growth_steps as u64,
            rebuilds: log.rebuilds,
            rebuilds_failed: log.failed,
            rebuilds_skipped: log.skipped,
            rebuilding: log.running,
            last_rebuild: log.last,
            last_rebuild_error: log.last_error,
            restart: self
                .restart
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

#[cfg(all(test, cuckoo_loom))]
mod loom_tests;

#[cfg(all(test, cuckoo_loom))]
mod loom_orphan_tests;

#[cfg(all(test, cuckoo_loom))]
mod loom_fleet_tests;

#[cfg(all(test, cuckoo_loom))]
mod loom_rebuild_tests;

#[cfg(all(test, cuckoo_loom))]
mod loom_ceiling_tests;

#[cfg(all(test, not(cuckoo_loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_orphan_hashes_as_its_key() {
        fn check<K: Hash + Clone + Send + Sync + 'static>(filter: &CuckooFilter, key: K) {
            assert_eq!(filter.hash_key(&key.to_orphan()), filter.hash_key(&key));
        }
        let filter = CuckooFilter::with_capacity(10);
        check(&filter, String::from("user:42"));
        check(&filter, "user:42");
        check(&filter, 42u64);
        check(&filter, -3i8);
        check(&filter, (7u32, String::from("x"), [1u16, 2]));
        check(&filter, vec![1u8, 2, 3]);
    }

    /// A key whose `Clone` panics (a caller's type; the guard must not trust it not to).
    #[derive(Debug, PartialEq, Eq, Hash)]
    struct NoCopy(u64);

    impl Clone for NoCopy {
        fn clone(&self) -> Self {
            panic!("this key cannot be copied")
        }
    }

    /// A key whose `Hash` panics (a caller's type as well).
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct NoHash;

    impl Hash for NoHash {
        fn hash<S: Hasher>(&self, _: &mut S) {
            panic!("this key cannot be hashed")
        }
    }

    /// Polls a rebuild's gate until it passes; panics if it never does.
    fn rebuild_passes_the_gate<H: BuildHasher + Clone + Send + Sync + 'static>(
        core: &GuardCore<H>,
    ) -> bool {
        let claim = core.claim().expect("no rebuild runs");
        let mut turn = core
            .begin_rebuild::<()>(claim, crate::guard::RebuildReason::Requested)
            .expect("a warm core builds its next filter");
        for _ in 0..1_000 {
            match turn.poll_gate::<()>() {
                Ok(true) => return true,
                Ok(false) => {}
                Err(_) => return false,
            }
        }
        panic!("a rebuild waits forever for a put that panicked")
    }

    /// A put keeps its key as an orphan, which clones the key. If that clone panics, the put
    /// must still leave the writer gate (or never have entered it), and no rebuild may go on
    /// as if the key had been recorded: it must refuse, or the put must have left no copy and
    /// no write behind.
    #[test]
    fn a_put_whose_key_clone_panics_holds_no_rebuild_at_the_gate() {
        let core = GuardCore::new(CuckooFilter::with_capacity(100), RebuildPolicy::manual());
        core.finish_warm_up();
        let key = NoCopy(7);
        // The put begins; its future is dropped while the store call runs.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let ticket = core.begin_put::<_, ()>(&key);
            drop(ticket);
        }));
        let copies = core.filter().count(&key);
        if rebuild_passes_the_gate(&core) {
            assert_eq!(
                copies, 0,
                "a rebuild went on without the orphan of a put that left a copy behind"
            );
        }
    }

    /// A put whose key's `Hash` panics after it entered the writer gate leaves the gate.
    #[test]
    fn a_put_whose_key_hash_panics_holds_no_rebuild_at_the_gate() {
        let core = GuardCore::new(CuckooFilter::with_capacity(100), RebuildPolicy::manual());
        core.finish_warm_up();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = core.begin_put::<_, ()>(&NoHash);
        }));
        assert!(panicked.is_err(), "hashing the key panics");
        assert!(rebuild_passes_the_gate(&core));
    }

    #[test]
    fn no_room_and_contention_are_different_guard_errors() {
        let full = InsertError::Full {
            len: 95,
            capacity: 100,
        };
        let as_full = insert_failure::<std::io::Error>(full.clone());
        assert!(matches!(&as_full, GuardError::FilterFull(e) if *e == full));
        assert!(as_full.to_string().contains("no room"), "{as_full}");
        let as_contended = insert_failure::<std::io::Error>(InsertError::Contended);
        assert!(matches!(as_contended, GuardError::FilterContended));
        let message = as_contended.to_string();
        assert!(
            message.contains("contention") && message.contains("retried"),
            "{message}"
        );
        assert!(!message.contains("no room"), "{message}");
    }
}
