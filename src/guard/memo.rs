//! The false-positive memo: keys the store answered absent after the filter admitted them, so
//! that a replayed false positive is answered without another store read.
//!
//! A key the filter wrongly admits stays admitted until a rebuild; an attacker who finds one
//! can replay it, one store read per request. The memo remembers such keys (the whole key,
//! compared with `Eq`: a hash would let a crafted collision answer "absent" for a present
//! key) in a fixed number of slots, and a lookup the filter admitted asks the memo before the
//! store. An entry answers "absent" without a store read, so an entry must never outlive the
//! absence it records.
//!
//! # Protocol
//!
//! Each slot, picked by hashing the key with the memo's own random hasher (fixed for the
//! memo's life, unlike a filter's, so a key's slot never moves), holds under one mutex: a
//! `version`, a count of puts in flight (`writing`), a `disabled` mark and at most one entry.
//!
//! - **[memo.M1] A put** of a key, before its store write: bumps its slot's `version`, counts
//!   itself in `writing`, and removes the slot's entry if it is this key (the same rule as the
//!   filter's insert: nothing may answer "absent" once the write can become visible). Every
//!   put does so, creates and updates alike, since its outcome is known only afterwards.
//! - **[memo.M2] A put ends** after its store write returned: a write that landed (created or
//!   updated) or definitely failed uncounts itself. A write whose outcome is unknown, or that
//!   never returned (a dropped future, a panic), may land at any later time: it uncounts
//!   itself and **disables** the slot, which then never takes an entry again.
//! - **[memo.M3] A lookup** the filter admitted, before its store read: if the slot's entry is the
//!   key, answers "absent" (a memo hit, no store read). Otherwise it notes the slot's
//!   `version`, but only if no put is in flight there and the slot is enabled (else it will
//!   install nothing).
//! - **[memo.M4] The lookup installs** after the store answered "absent": only if it noted a
//!   version and the slot's `version` still equals it. The entry replaces whatever the slot
//!   held (one entry per slot: the newest absent key wins; an evicted entry costs a store read,
//!   never a wrong answer). A lookup that read a value, failed, or was dropped installs
//!   nothing.
//! - **[memo.M5] A rebuild starts** (either guard's rebuild, automatic or requested, before its
//!   scan): every slot drops its entry and bumps its `version`. Rows written behind the
//!   guard's back (not through a put, so no [memo.M1]) are picked up by the rebuild's scan; the
//!   clear makes the memo pick them up too. It takes each slot's lock in turn and does no I/O.
//!   Disabled slots stay disabled: a write of unknown outcome may land after the rebuild.
//!
//! A delete takes the same steps as a put, [memo.M1] before its store write and [memo.M2] after,
//! except that it leaves an entry for its key in place (a deleted key is absent, so the entry
//! is true) and a delete of unknown outcome does not disable the slot (a late delete makes no
//! "absent" false). It takes them for the flights below.
//!
//! # Coalesced store reads
//!
//! The slot also holds at most one *flight*: a store read in progress, which lookups of the
//! same key wait on instead of reading again ([`flight`]). A storm of lookups of one admitted
//! key (a false positive, a row the cache does not hold yet) then costs one store read. A
//! waiter's answer is a read that began before its own lookup: it must not miss a write that
//! returned before the waiter began.
//!
//! - **[memo.C1] A lookup leads** when its [memo.M3] noted a version and the slot holds no
//!   flight: it places a flight for its key in the slot, under the same lock, before its store
//!   read.
//! - **[memo.C2] A lookup joins** when its [memo.M3] would note a version and the slot's flight
//!   is for its key: it waits for the flight to land instead of reading.
//! - **[memo.C3] A write's [memo.M1]** (a put's or a delete's) and a rebuild's [memo.M5] remove
//!   the slot's flight, whatever its key. The flight's reader goes on; its followers keep it.
//! - **[memo.C4] The leader lands** after its store read: removes its flight from the slot if it
//!   is still there, then hands its answer to every follower (a value cloned for each, an error
//!   shared). A leader dropped or panicking before its answer was handed over (a panic in the
//!   value's clone included) lands the flight *abandoned*: each follower starts its lookup
//!   over, and after its second abandoned flight reads the store alone, so a run of dropped
//!   leaders (clients that hang up) cannot keep it waiting.
//!
//! **Why a follower never misses a write.** Take a write of `k` whose store write returned
//! before a follower of `k` began, and the flight the follower joined, placed by a leader at
//! [memo.C1]. If the write's [memo.M1] came before the placing, the write was no longer in
//! flight at it ([memo.C1] needs a noted version, so `writing` was 0): it ended before the
//! placing, so before the leader's store read began, and that read saw it (the store
//! contract). If the [memo.M1] came after the placing, it removed the flight ([memo.C3]) before
//! the write returned, so before the follower began: the follower could not find it at
//! [memo.C2], both steps being under the slot's lock. Only the leader puts its flight in a slot, so
//! no flight comes back. Rows written behind the guard's back are picked up by the next
//! rebuild's [memo.M5] as for entries.
//!
//! The argument needs every write of the store to go through this guard's [memo.M1]. A fleet
//! member's store is written by the other members too, so the async guard of a fleet neither
//! asks the memo nor coalesces.
//!
//! # Why an entry never hides a row
//!
//! An entry for key `k` exists only if a lookup installed it ([memo.M4]) and no put of `k` began
//! since ([memo.M1] removes it, under the slot's lock, so the removal and the install are ordered).
//! Take a lookup that installs `k`, having noted version `v` ([memo.M3]) and read "absent":
//!
//! - A put of `k` that began after the note: its [memo.M1] and the install take the slot's lock one
//!   after the other. [memo.M1] first: the version moved, the install is refused. The install
//!   first: [memo.M1] removes the entry, before the put's store write.
//! - A put of `k` in flight at the note (between its [memo.M1] and its [memo.M2]) made the lookup note
//!   nothing, so it installs nothing.
//! - A put of `k` that ended before the note ([memo.M2] for a write that landed) had its store
//!   write return before the lookup's store read began, so that read saw the row (the store
//!   contract: a read sees every write that returned before it began): it did not answer
//!   "absent". One whose outcome was unknown disabled the slot for good, so its write landing
//!   late cannot meet an entry. One whose key comparison panicked in [memo.M1] is never uncounted,
//!   so the slot notes no version again.
//!
//! So every entry is a key that was absent at a store read after the last put of it ended, with
//! no put of it begun since: it is absent now. A lookup that begins after a create returned
//! finds no entry for that key (the create's [memo.M1] removed it, and no later install survives
//! the checks above). Entries record the store, not a filter, and every put goes through [memo.M1]
//! whatever filters are published.
//!
//! A row written behind the guard's back, whose write returned before a rebuild started, is
//! found by every lookup that begins after the rebuild started ([memo.M5]): an entry installed
//! before the clear is gone; a lookup that noted its version before the clear is refused at
//! [memo.M4] (the version moved), whenever it read the store; a lookup that notes after the clear
//! reads the store after the write returned, so it sees the row. Only the version bump covers
//! the lookup that noted before the clear, read the store before the write and installs after
//! the clear.
//!
//! `with_memo` replaces the memo of a guard it holds alone (no lookup or put in flight). The
//! new memo cannot know which of its slots the keys of earlier puts of unknown outcome map to,
//! and their writes may still land: if the old memo saw any such put (`unknown_put`, recorded
//! by [memo.M2] even by a memo of 0 slots), every slot of the new one starts disabled. A memo of 0
//! slots is off: lookups go to the store as without it.
//!
//! All of it holds under each slot's mutex; the one atomic, `unknown_put`, is read only by a
//! holder of the whole guard.

use std::fmt;
use std::hash::Hash;
use std::ops::DerefMut;
use std::sync::PoisonError;

use ahash::RandomState;

use std::sync::Arc;

use super::core::Admission;
use super::GuardError;
use crate::sync::{AtomicBool, Mutex, Ordering};

pub(crate) mod flight;

use flight::FlightCell;

/// What a flight hands its followers: the leader's store answer, its error shared.
pub(super) type Shared<V, E> = Result<Option<V>, Arc<E>>;

/// The number of memo slots a guard has unless told otherwise.
pub(super) const DEFAULT_MEMO_ENTRIES: usize = 1024;

/// [`CacheGuard::with_memo`](super::CacheGuard::with_memo) (or the async guard's) could not
/// resize the memo.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, MemoError, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
/// let clone = guard.clone();
/// assert!(matches!(guard.with_memo(16), Err(MemoError::Shared)));
/// assert_eq!(clone.stats().memo_entries, 1024);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoError {
    /// The guard has clones (or a background task holds it): its memo may be in use, and a
    /// memo replaced under a lookup could keep an entry a put never cleared.
    Shared,
}

impl fmt::Display for MemoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoError::Shared => f.write_str(
                "the memo can be resized only on a guard that has not been cloned or shared yet",
            ),
        }
    }
}

impl std::error::Error for MemoError {}

/// One slot ([memo.M1]-[memo.M4], [memo.C1]-[memo.C4]).
#[derive(Debug)]
struct Slot<K, T> {
    /// Bumped by every put of a key of this slot, before its store write.
    version: u64,
    /// Puts of keys of this slot between [memo.M1] and [memo.M2].
    writing: u64,
    /// Set by a put whose outcome is unknown: the slot never takes an entry again.
    disabled: bool,
    /// A key the store answered absent, with no put of it begun since.
    entry: Option<K>,
    /// A store read of this key that lookups of it may join, placed with no write in flight
    /// and no write begun since ([memo.C1], [memo.C3]).
    flight: Option<(K, Arc<FlightCell<T>>)>,
}

/// A memo broken on purpose, one step each: the loom models' negative controls.
#[cfg(cuckoo_loom)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Broken {
    /// [memo.M4]: installs without comparing the version.
    pub(crate) install_unchecked: bool,
    /// [memo.M1]: a put leaves the slot's entry in place.
    pub(crate) clear_skipped: bool,
    /// [memo.M3]: notes the version even while a put is in flight.
    pub(crate) writing_ignored: bool,
    /// [memo.M2]: a put of unknown outcome uncounts itself without disabling the slot.
    pub(crate) unknown_forgotten: bool,
    /// [memo.M1]/[memo.M2]: `writing` is a flag, cleared by the first put that ends.
    pub(crate) writing_as_flag: bool,
    /// [memo.M5]: a rebuild's clear drops the entries but keeps the versions.
    pub(crate) rebuild_version_kept: bool,
    /// `with_memo`: the new memo forgets that a put of unknown outcome was seen.
    pub(crate) resize_forgets: bool,
    /// [memo.C3]: a write's [memo.M1] leaves the slot's flight in place.
    pub(crate) flight_kept: bool,
    /// [memo.C4]: a leader dropped before its answer leaves its flight pending.
    pub(crate) abandon_silent: bool,
    /// [memo.C3]: a rebuild's clear leaves the slots' flights in place.
    pub(crate) rebuild_flight_kept: bool,
}

/// The memo of a guard: a fixed number of slots, each holding at most one key and one flight
/// (whose followers get a `T`).
pub(super) struct Memo<K, T = ()> {
    slots: Box<[Mutex<Slot<K, T>>]>,
    hasher: RandomState,
    /// Set by [memo.M2] for a put of unknown outcome, with or without slots.
    unknown_put: AtomicBool,
    #[cfg(cuckoo_loom)]
    pub(crate) broken: Broken,
}

impl<K, T> fmt::Debug for Memo<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Memo")
            .field("entries", &self.slots.len())
            .finish_non_exhaustive()
    }
}

/// What a lookup found in the memo before its store read ([memo.M3], [memo.C1], [memo.C2]).
#[derive(Debug)]
#[must_use]
pub(super) enum Probe<'m, K, T> {
    /// The memo answers "absent": no store read.
    Hit,
    /// Ask the store; then [`Memo::settle`] may install the key if the version still matches.
    /// `lead` is the flight this lookup placed ([memo.C1]), if it did: take it with
    /// [`Probe::take_lead`] before the store read and land it after.
    Miss {
        slot: usize,
        version: u64,
        lead: Option<Lead<'m, K, T>>,
    },
    /// Wait for this flight instead of reading ([memo.C2]).
    Join(Arc<FlightCell<T>>),
    /// Ask the store; install nothing (not admitted by the filter, a put in flight, a disabled
    /// slot, or no memo).
    Skip,
}

/// A put or a delete between [memo.M1] and [memo.M2]. A put dropped without [`end`](Self::end)
/// (a dropped future, a panic) disables its slot: the write may still land.
#[derive(Debug)]
#[must_use]
pub(super) struct MemoWrite<'m, K, T> {
    memo: &'m Memo<K, T>,
    /// The key's slot; `None` in a memo of 0 slots, which still records an unknown outcome.
    slot: Option<usize>,
    /// A put, whose unknown outcome disables the slot; a delete's does not.
    put: bool,
    /// Until [memo.M2] ran.
    open: bool,
}

/// A flight this lookup placed ([memo.C1]), until it lands ([memo.C4]). Dropped without
/// landing (a dropped future, a panic in the store read), it lands abandoned.
#[must_use]
pub(super) struct Lead<'m, K, T> {
    memo: &'m Memo<K, T>,
    slot: usize,
    cell: Arc<FlightCell<T>>,
    open: bool,
}

impl<K, T> fmt::Debug for Lead<'_, K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lead")
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl<'m, K, T> Probe<'m, K, T> {
    /// The flight this lookup leads, if it placed one ([memo.C1]).
    pub(super) fn take_lead(&mut self) -> Option<Lead<'m, K, T>> {
        match self {
            Probe::Miss { lead, .. } => lead.take(),
            _ => None,
        }
    }
}

impl<K, T> Memo<K, T> {
    /// A memo of `entries` slots (0: none, the memo is off).
    pub(super) fn new(entries: usize) -> Self {
        Memo {
            slots: (0..entries)
                .map(|_| {
                    Mutex::new(Slot {
                        version: 0,
                        writing: 0,
                        disabled: false,
                        entry: None,
                        flight: None,
                    })
                })
                .collect(),
            hasher: RandomState::new(),
            unknown_put: AtomicBool::new(false),
            #[cfg(cuckoo_loom)]
            broken: Broken::default(),
        }
    }

    /// The number of slots.
    pub(super) fn entries(&self) -> usize {
        self.slots.len()
    }

    /// Slots a put of unknown outcome disabled.
    pub(super) fn disabled(&self) -> usize {
        self.slots.iter().filter(|slot| lock(slot).disabled).count()
    }

    /// A memo of `entries` slots to replace this one (`with_memo`, on a guard held alone):
    /// every slot disabled if this memo saw a put of unknown outcome, whose write may land.
    pub(super) fn resized(&self, entries: usize) -> Self {
        #[cfg_attr(not(cuckoo_loom), allow(unused_mut))]
        let mut memo = Memo::new(entries);
        #[cfg(cuckoo_loom)]
        {
            memo.broken = self.broken;
            if self.broken.resize_forgets {
                return memo;
            }
        }
        // ORDERING: unknown put -> `with_memo`: the caller holds the guard's only reference
        // (`Arc::get_mut`), whose acquire of the reference count orders every [memo.M2] of another
        // holder (done before it dropped its reference) before this load.
        if self.unknown_put.load(Ordering::Relaxed) {
            for slot in memo.slots.iter() {
                lock(slot).disabled = true;
            }
            // ORDERING: as the load above; the next `with_memo` reads it the same way.
            memo.unknown_put.store(true, Ordering::Relaxed);
        }
        memo
    }

    /// [memo.M5]: a rebuild starts. Every slot drops its entry and bumps its version, so a lookup
    /// that noted a version before cannot install after.
    pub(super) fn forget_all(&self) {
        for slot in self.slots.iter() {
            let mut slot = lock(slot);
            #[cfg(cuckoo_loom)]
            let bump = !self.broken.rebuild_version_kept;
            #[cfg(not(cuckoo_loom))]
            let bump = true;
            if bump {
                slot.version += 1;
            }
            slot.entry = None;
            // [memo.C3]: lookups that begin now read the store again.
            #[cfg(cuckoo_loom)]
            let keep = self.broken.rebuild_flight_kept;
            #[cfg(not(cuckoo_loom))]
            let keep = false;
            if !keep {
                slot.flight = None;
            }
        }
    }

    /// [memo.M2] for the put (or delete, `!put`) whose slot is `slot`.
    fn end_write(&self, slot: Option<usize>, put: bool, landed_or_failed: bool) {
        let landed_or_failed = landed_or_failed || !put;
        if !landed_or_failed {
            // ORDERING: unknown put -> `with_memo` (see `resized`).
            self.unknown_put.store(true, Ordering::Relaxed);
        }
        let Some(slot) = slot else {
            return;
        };
        let mut slot = lock(&self.slots[slot]);
        #[cfg(cuckoo_loom)]
        if self.broken.writing_as_flag {
            slot.writing = 0;
            return;
        }
        slot.writing -= 1;
        #[cfg(cuckoo_loom)]
        if self.broken.unknown_forgotten {
            return;
        }
        if !landed_or_failed {
            slot.disabled = true;
            slot.entry = None;
        }
    }
}

impl<K: Hash + Eq + Clone, T> Memo<K, T> {
    fn slot_of(&self, key: &K) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        Some((self.hasher.hash_one(key) % self.slots.len() as u64) as usize)
    }

    /// [`probe_with`](Self::probe_with), coalescing.
    #[cfg(test)]
    pub(super) fn probe(&self, key: &K, admission: Admission) -> Probe<'_, K, T> {
        self.probe_with(key, admission, true)
    }

    /// [memo.M3], [memo.C1], [memo.C2]: before the store read of a lookup the filter decided as
    /// `admission`. With `coalesce` false the lookup neither joins nor leads a flight (a
    /// lookup that waited on two abandoned flights reads alone).
    pub(super) fn probe_with(
        &self,
        key: &K,
        admission: Admission,
        coalesce: bool,
    ) -> Probe<'_, K, T> {
        if admission != Admission::Pass {
            return Probe::Skip;
        }
        let Some(index) = self.slot_of(key) else {
            return Probe::Skip;
        };
        let mut slot = lock(&self.slots[index]);
        if slot.entry.as_ref() == Some(key) {
            return Probe::Hit;
        }
        #[cfg(cuckoo_loom)]
        let writing = slot.writing > 0 && !self.broken.writing_ignored;
        #[cfg(not(cuckoo_loom))]
        let writing = slot.writing > 0;
        if writing || slot.disabled {
            return Probe::Skip;
        }
        let lead = match &slot.flight {
            _ if !coalesce => None,
            // [memo.C2]
            Some((flying, cell)) if flying == key => return Probe::Join(Arc::clone(cell)),
            Some(_) => None,
            // [memo.C1]; the clone runs before the slot changes.
            None => {
                let cell = Arc::new(FlightCell::new());
                slot.flight = Some((key.clone(), Arc::clone(&cell)));
                Some(Lead {
                    memo: self,
                    slot: index,
                    cell,
                    open: true,
                })
            }
        };
        Probe::Miss {
            slot: index,
            version: slot.version,
            lead,
        }
    }

    /// [memo.M4]: after the store read; installs `key` if the store answered absent and no put of
    /// a key of its slot began since the probe. Returns whether it installed.
    pub(super) fn settle<V, E>(
        &self,
        key: &K,
        probe: Probe<'_, K, T>,
        result: &Result<Option<V>, E>,
    ) -> bool {
        let Probe::Miss { slot, version, .. } = probe else {
            return false;
        };
        if !matches!(result, Ok(None)) {
            return false;
        }
        let mut slot = lock(&self.slots[slot]);
        #[cfg(cuckoo_loom)]
        let current = slot.version == version || self.broken.install_unchecked;
        #[cfg(not(cuckoo_loom))]
        let current = slot.version == version;
        if !current || slot.disabled {
            return false;
        }
        // The clone runs before the assignment: if it panics, the slot is as it was.
        let entry = key.clone();
        slot.entry = Some(entry);
        true
    }

    /// [memo.M1]: before the store write of a put of `key`.
    pub(super) fn begin_write(&self, key: &K) -> MemoWrite<'_, K, T> {
        self.begin(key, true)
    }

    /// [memo.M1] for a delete of `key`: before its store write.
    pub(super) fn begin_delete(&self, key: &K) -> MemoWrite<'_, K, T> {
        self.begin(key, false)
    }

    fn begin(&self, key: &K, put: bool) -> MemoWrite<'_, K, T> {
        let Some(index) = self.slot_of(key) else {
            return MemoWrite {
                memo: self,
                slot: None,
                put,
                open: true,
            };
        };
        let mut slot = lock(&self.slots[index]);
        slot.version += 1;
        slot.writing += 1;
        // [memo.C3]
        #[cfg(cuckoo_loom)]
        let keep = self.broken.flight_kept;
        #[cfg(not(cuckoo_loom))]
        let keep = false;
        if !keep {
            slot.flight = None;
        }
        // Counted before the comparison, and the `MemoWrite` made after it: if `eq` panics,
        // nothing uncounts the put, and the slot refuses installs for good, the safe side.
        #[cfg(cuckoo_loom)]
        let clear = !self.broken.clear_skipped;
        #[cfg(not(cuckoo_loom))]
        let clear = true;
        if put && clear && slot.entry.as_ref() == Some(key) {
            slot.entry = None;
        }
        drop(slot);
        MemoWrite {
            memo: self,
            slot: Some(index),
            put,
            open: true,
        }
    }
}

impl<K, T> MemoWrite<'_, K, T> {
    /// [memo.M2]: the store write returned; `known` if it landed or definitely failed, `false` if
    /// it may still land.
    pub(super) fn end(mut self, known: bool) {
        self.open = false;
        self.memo.end_write(self.slot, self.put, known);
    }
}

impl<K, T> Drop for MemoWrite<'_, K, T> {
    fn drop(&mut self) {
        if self.open {
            self.open = false;
            self.memo.end_write(self.slot, self.put, false);
        }
    }
}

impl<K, T> Lead<'_, K, T> {
    /// The first half of [memo.C4]: removes the flight from its slot if it is still there, and
    /// says whether any lookup joined it (none can join once it left its slot).
    fn withdraw_and_count(&self) -> bool {
        self.withdraw();
        // Followers took their clones under the slot's lock, before the withdrawal's.
        Arc::strong_count(&self.cell) > 1
    }

    fn withdraw(&self) {
        let mut slot = lock(&self.memo.slots[self.slot]);
        if slot
            .flight
            .as_ref()
            .is_some_and(|(_, cell)| Arc::ptr_eq(cell, &self.cell))
        {
            slot.flight = None;
        }
    }
}

impl<K, V: Clone, E> Lead<'_, K, Shared<V, E>> {
    /// [memo.C4] of the leader's store answer: hands it to the followers (a value cloned, an
    /// error shared) and returns the leader's own. A leader with followers reports an error as
    /// [`GuardError::SharedStore`], as they do.
    pub(super) fn land(mut self, result: Result<Option<V>, E>) -> Result<Option<V>, GuardError<E>> {
        let followers = self.withdraw_and_count();
        // Still open here: if the value's clone panics, the drop lands the flight abandoned.
        let (shared, own) = match result {
            Ok(value) => (followers.then(|| Ok(value.clone())), Ok(value)),
            Err(e) if followers => {
                let e = Arc::new(e);
                (Some(Err(Arc::clone(&e))), Err(GuardError::SharedStore(e)))
            }
            Err(e) => (None, Err(GuardError::Store(e))),
        };
        self.open = false;
        self.cell.land(shared);
        own
    }
}

impl<K, T> Drop for Lead<'_, K, T> {
    fn drop(&mut self) {
        if self.open {
            self.open = false;
            self.withdraw();
            #[cfg(cuckoo_loom)]
            if self.memo.broken.abandon_silent {
                return;
            }
            self.cell.land(None);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> impl DerefMut<Target = T> + '_ {
    // Every critical section leaves its slot valid before any call that may panic (`eq`,
    // `clone`, `hash` run on the key, not under a half-made change), so a poisoned slot is
    // used as it is.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(all(test, cuckoo_loom))]
mod loom_tests;

#[cfg(all(test, not(cuckoo_loom)))]
mod tests {
    use super::*;

    fn miss(memo: &Memo<u64>, key: u64) -> Probe<'_, u64, ()> {
        let probe = memo.probe(&key, Admission::Pass);
        assert!(matches!(probe, Probe::Miss { .. }), "{probe:?}");
        probe
    }

    #[test]
    fn an_installed_key_hits_until_a_put_of_it_begins() {
        let memo = Memo::new(4);
        let probe = miss(&memo, 7);
        assert!(memo.settle(&7, probe, &Ok::<Option<()>, ()>(None)));
        assert!(matches!(memo.probe(&7, Admission::Pass), Probe::Hit));
        let write = memo.begin_write(&7);
        assert!(!matches!(memo.probe(&7, Admission::Pass), Probe::Hit));
        write.end(true);
        assert!(!matches!(memo.probe(&7, Admission::Pass), Probe::Hit));
    }

    #[test]
    fn nothing_is_installed_for_a_value_an_error_or_a_blocked_lookup() {
        let memo = Memo::new(1);
        assert!(!memo.settle(&1, miss(&memo, 1), &Ok::<_, ()>(Some(()))));
        assert!(!memo.settle(&1, miss(&memo, 1), &Err::<Option<()>, _>(())));
        assert!(matches!(memo.probe(&1, Admission::Warming), Probe::Skip));
        assert!(matches!(memo.probe(&1, Admission::Blocked), Probe::Skip));
        assert!(!matches!(memo.probe(&1, Admission::Pass), Probe::Hit));
    }

    #[test]
    fn a_put_during_the_store_read_cancels_the_install() {
        let memo = Memo::new(1);
        let probe = miss(&memo, 3);
        memo.begin_write(&3).end(true);
        assert!(!memo.settle(&3, probe, &Ok::<Option<()>, ()>(None)));
        // A put in flight makes the lookup note nothing.
        let write = memo.begin_write(&3);
        assert!(matches!(memo.probe(&3, Admission::Pass), Probe::Skip));
        write.end(true);
        assert!(matches!(
            memo.probe(&3, Admission::Pass),
            Probe::Miss { .. }
        ));
    }

    #[test]
    fn an_unknown_outcome_disables_the_slot_for_good() {
        let memo = Memo::new(1);
        assert!(memo.settle(&5, miss(&memo, 5), &Ok::<Option<()>, ()>(None)));
        drop(memo.begin_write(&9)); // a dropped future: the write may land later
        assert_eq!(memo.disabled(), 1);
        assert!(!matches!(memo.probe(&5, Admission::Pass), Probe::Hit));
        assert!(matches!(memo.probe(&5, Admission::Pass), Probe::Skip));
        memo.begin_write(&9).end(false);
        assert_eq!(memo.disabled(), 1);
    }

    #[test]
    fn a_slot_holds_the_newest_key_and_compares_whole_keys() {
        let memo = Memo::new(1);
        assert!(memo.settle(&1, miss(&memo, 1), &Ok::<Option<()>, ()>(None)));
        assert!(memo.settle(&2, miss(&memo, 2), &Ok::<Option<()>, ()>(None)));
        assert!(matches!(memo.probe(&2, Admission::Pass), Probe::Hit));
        assert!(matches!(
            memo.probe(&1, Admission::Pass),
            Probe::Miss { .. }
        ));
    }

    /// A key whose `eq` panics when either side is marked: a user type with a faulty `Eq`.
    #[derive(Debug, Clone)]
    struct Touchy(u64, bool);

    impl Hash for Touchy {
        fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
            self.0.hash(state);
        }
    }

    impl PartialEq for Touchy {
        fn eq(&self, other: &Self) -> bool {
            assert!(!self.1 && !other.1, "a key comparison panicked");
            self.0 == other.0
        }
    }
    impl Eq for Touchy {}

    #[test]
    fn a_put_whose_key_comparison_panics_leaves_its_slot_refusing_installs() {
        let memo = Memo::<Touchy>::new(1);
        let probe = memo.probe(&Touchy(1, false), Admission::Pass);
        assert!(memo.settle(&Touchy(1, false), probe, &Ok::<Option<()>, ()>(None)));
        let put = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            memo.begin_write(&Touchy(1, true)).end(true);
        }));
        assert!(put.is_err());
        // The slot is usable (no deadlock, the poison ignored) and notes no version.
        assert!(matches!(
            memo.probe(&Touchy(2, false), Admission::Pass),
            Probe::Skip
        ));
    }

    /// [memo.M1]'s comparison panics while the slot is locked: the put must unwind (its caller
    /// sees the panic), and the slot must stay usable, refusing installs.
    #[test]
    fn memo_review_a_panicking_eq_in_a_put_leaves_the_slot_usable() {
        let memo = std::sync::Arc::new(Memo::<Touchy>::new(1));
        let installed = Touchy(1, false);
        let probe = memo.probe(&installed, Admission::Pass);
        assert!(memo.settle(&installed, probe, &Ok::<Option<()>, ()>(None)));
        let (done, finished) = std::sync::mpsc::channel();
        let shared = std::sync::Arc::clone(&memo);
        // Detached: if the put deadlocks, the test fails on the timeout below.
        std::thread::spawn(move || {
            let put = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                drop(shared.begin_write(&Touchy(2, true)));
            }));
            let after = shared.probe(&Touchy(3, false), Admission::Pass);
            let _ = done.send((put.is_err(), matches!(after, Probe::Skip)));
        });
        let (unwound, refusing) = finished
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the put deadlocked on its own slot's lock");
        assert!(unwound, "the panic reached the put's caller");
        assert!(refusing, "the slot refuses installs after the panic");
    }

    /// A value whose clone panics once `armed`: a user type with a faulty `Clone`.
    #[derive(Debug)]
    struct Brittle(std::sync::Arc<AtomicBool>);

    impl Clone for Brittle {
        fn clone(&self) -> Self {
            assert!(!self.0.load(Ordering::SeqCst), "a value's clone panicked");
            Brittle(std::sync::Arc::clone(&self.0))
        }
    }

    #[test]
    fn a_lead_that_panics_while_landing_abandons_its_flight() {
        let memo = Memo::<u64, Shared<Brittle, ()>>::new(1);
        let mut probe = memo.probe(&1, Admission::Pass);
        let lead = probe.take_lead().expect("the first lookup leads");
        let Probe::Join(flight) = memo.probe(&1, Admission::Pass) else {
            panic!("the second lookup joins");
        };
        let armed = std::sync::Arc::new(AtomicBool::new(true));
        let value = Brittle(std::sync::Arc::clone(&armed));
        let landing =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lead.land(Ok(Some(value)))));
        assert!(landing.is_err());
        // The follower is not stranded: the flight landed abandoned, and the slot is free.
        let (sent, waited) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sent.send(flight.wait().is_none());
        });
        let abandoned = waited
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the follower is stranded: the flight never landed");
        assert!(abandoned);
        let mut again = memo.probe(&1, Admission::Pass);
        assert!(again.take_lead().is_some());
    }

    #[test]
    fn a_flight_is_joined_until_a_write_of_its_slot_begins() {
        let memo = Memo::<u64, Shared<u64, ()>>::new(1);
        let mut probe = memo.probe(&1, Admission::Pass);
        let lead = probe.take_lead().expect("the first lookup leads");
        let Probe::Join(joined) = memo.probe(&1, Admission::Pass) else {
            panic!("a lookup of the same key joins");
        };
        // Another key of the slot reads alone while the flight is there.
        let mut other = memo.probe(&2, Admission::Pass);
        assert!(matches!(other, Probe::Miss { .. }) && other.take_lead().is_none());
        memo.begin_delete(&2).end(true);
        // The delete removed the flight: a lookup now leads a new one.
        let mut later = memo.probe(&1, Admission::Pass);
        let second = later.take_lead().expect("a new flight");
        assert_eq!(lead.land(Ok(Some(5))).unwrap(), Some(5));
        assert_eq!(joined.wait(), Some(Ok(Some(5))));
        assert!(matches!(second.land(Err(())), Err(GuardError::Store(()))));
        assert!(memo
            .probe_with(&1, Admission::Pass, false)
            .take_lead()
            .is_none());
    }

    #[test]
    fn a_memo_of_no_slots_is_off() {
        let memo = Memo::<u64>::new(0);
        assert!(matches!(memo.probe(&1, Admission::Pass), Probe::Skip));
        memo.begin_write(&1).end(false);
        assert_eq!((memo.entries(), memo.disabled()), (0, 0));
    }
}
