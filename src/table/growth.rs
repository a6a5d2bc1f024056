//! [`Tables`]: a filter's base table and the tables added as it grows.
//!
//! # Protocol
//!
//! The base table is held inline. Up to `max_steps` grown tables live in slots that are filled
//! once, in order, and never emptied or replaced while the filter is shared; `grown` counts the
//! filled slots. A key's copies live in any of the tables; each table keeps its own protocol
//! (`stripe`: puts, takes, displacements within the table). This layer adds:
//!
//! - \[G1\] Publish. A grower holds the growth lock, checks that `grown` is still the count at
//!   which it found the newest table full, fills the next slot, then stores `grown + 1`
//!   (Release).
//! - \[G2\] Insert. Load `grown` (Acquire) and insert into the newest table. `Full` there: grow
//!   \[G1\] (or find that another thread did) and insert into the new newest table.
//! - \[G3\] Remove. Take from the base table if it holds a copy; else load `grown` (Acquire) and
//!   scan the grown tables in order, taking the first copy found. After a miss, load `grown`
//!   again and scan the tables added since, until it stops changing.
//! - \[G4\] Lookup. As \[G3\], with validated reads in place of takes. The base table is read
//!   before `grown` is loaded, so a filter that never grew pays one load and one predicted
//!   branch on a negative lookup and nothing on a positive one.
//! - \[G5\] Unique insert. Count the key's copies in every table but the newest under the
//!   locks of its buckets there; then, under the locks of its buckets in the newest, check
//!   the newest has no copy and that `grown` has not changed, and only then put.
//!
//! # Invariants
//!
//! - (a) A copy stays in the table it was put in (a displacement moves it within its table).
//! - (b) A take is never in a later table than a copy of the same fingerprint and buckets that
//!   was put before the remove began: the remove scans in table order and takes the first
//!   copy it finds. So when a writer puts one copy and then removes a copy of a colliding key
//!   (a net move), the copy moves to a later table or within one, never to an earlier one.
//!
//! # Why a lookup sees every key inserted before it and not removed
//!
//! Let the key's copy be in table `a`. If the lookup reads `a` before any take of that copy, it
//! finds it. Otherwise the copy was taken by the remove of a colliding key, whose own copy the
//! remover (or a writer before it) put in a table `b >= a` (b). The lookup's validated read of
//! `a` acquired the take's unlock \[R1\], so everything before the take is visible to what the
//! lookup does next: `b`'s publication \[G1\] (the next load of `grown` counts `b`, which is why
//! every miss reloads it) and the put into `b` (which the lookup reads later in table order,
//! or, if `b = a`, in the same validated read, by the table's own net-move protocol \[I4\]).
//! Repeat with that copy: the chain of takes is finite, so a copy is found. A remove reasons
//! the same way under locks, so a remove of a key that holds a copy finds one.
//!
//! Tables are never freed while the filter is shared, so neither lookups nor writers pin
//! anything: a grown slot, once loaded, stays valid for the borrow of the filter.

use std::sync::{OnceLock, PoisonError};

use super::{InsertFailure, Inserted, Table};
use crate::stats::Stats;
use crate::sharded::bump;
use crate::sync::{AtomicU64, AtomicUsize, Mutex, Ordering};

/// The most buckets one table may have (the bucket index is 32 bits).
const MAX_BUCKETS: usize = 1 << 32;

/// Why a growth step added no table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GrowFailure {
    /// Growth is disabled, or the filter already added its maximum number of tables, or the
    /// newest table already has the most buckets a table can have.
    Limit,
    /// The new table's buckets could not be allocated.
    Allocation { bytes: usize },
}

/// Why an insert stored nothing, with growth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GrowingInsertFailure {
    /// The newest table had no room and no table could be added.
    Full(GrowFailure),
    /// Other writers kept invalidating the cuckoo paths found.
    Contended,
}

/// The tables of one filter: the base table and the grown tables.
#[derive(Debug)]
pub(crate) struct Tables {
    base: Table,
    /// Filled slots of `slots` \[G1\].
    grown: AtomicUsize,
    slots: Box<[OnceLock<Table>]>,
    /// Each grown table has this many times the buckets of the table before it.
    factor: usize,
    /// Held by a grower while it checks `grown` and fills the next slot \[G1\].
    grow_lock: Mutex<()>,
    /// Inserts that found a table full and went on to a newer one: counted as failures by
    /// that table's counters, but not failures of the filter.
    full_then_grown: AtomicU64,
}

impl Tables {
    /// `base` with room for `max_steps` grown tables, each `factor` times the size of the one
    /// before (`max_steps == 0`: the filter never grows).
    pub(crate) fn new(base: Table, factor: usize, max_steps: usize) -> Self {
        Tables {
            base,
            grown: AtomicUsize::new(0),
            slots: (0..max_steps).map(|_| OnceLock::new()).collect(),
            factor,
            grow_lock: Mutex::new(()),
            full_then_grown: AtomicU64::new(0),
        }
    }

    /// The base table.
    pub(crate) fn base(&self) -> &Table {
        &self.base
    }

    /// Grown table `i` (from 1), which a load of `grown` returning at least `i` published.
    fn grown_table(&self, i: usize) -> &Table {
        match self.slots[i - 1].get() {
            Some(table) => table,
            // [G1] fills a slot before it counts it.
            None => unreachable!("grown table {i} counted before it was filled"),
        }
    }

    /// Table `i`: the base table for 0, else grown table `i`.
    fn table(&self, i: usize) -> &Table {
        if i == 0 {
            &self.base
        } else {
            self.grown_table(i)
        }
    }

    /// The number of tables added so far.
    pub(crate) fn growth_steps(&self) -> usize {
        // ORDERING: Acquire; [G4] pairs with the Release of [G1], so every table counted
        // is filled and visible.
        self.grown.load(Ordering::Acquire)
    }

    /// Every table now published, base first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Table> + '_ {
        (0..=self.growth_steps()).map(move |i| self.table(i))
    }

    /// Whether `visit` returns true for some grown table after the first `checked`, visiting
    /// them in order and reloading `grown` after the last until it stops changing \[G3\]
    /// \[G4\]. Called after the base table and the first `checked` grown tables were visited.
    fn any_grown_after(&self, mut checked: usize, mut visit: impl FnMut(&Table) -> bool) -> bool {
        loop {
            // ORDERING: Acquire; [G4] pairs with the Release of [G1]. A table visited before
            // this load whose validated read (or lock) ordered it after a take also orders
            // it after the publication of every table the taker had seen, so this load
            // counts the table that holds the copy a net move put.
            let now = self.grown.load(Ordering::Acquire);
            if now == checked {
                return false;
            }
            if (checked + 1..=now).any(|i| visit(self.grown_table(i))) {
                return true;
            }
            checked = now;
        }
    }

    /// Whether the key of `hash` may be present \[G4\].
    #[inline]
    pub(crate) fn contains(&self, hash: u64) -> bool {
        if self.base.contains(hash) {
            return true;
        }
        // ORDERING: Acquire; [G4] as in `any_grown_after`: loaded after the base table's
        // validated read, never before it.
        let grown = self.grown.load(Ordering::Acquire);
        grown != 0 && self.find_grown(hash, grown).is_some()
    }

    /// The grown table that answers "present" (its index from 1), after a miss in the base
    /// table and a load of `grown`.
    #[cold]
    #[inline(never)]
    fn find_grown(&self, hash: u64, grown: usize) -> Option<usize> {
        let mut found = (1..=grown).find(|&i| self.grown_table(i).contains(hash));
        if found.is_none() {
            let mut i = grown;
            self.any_grown_after(grown, |t| {
                i += 1;
                let hit = t.contains(hash);
                found = hit.then_some(i);
                hit
            });
        }
        found
    }

    /// After `results[i] = base.contains(hashes of keys[i])` for a batch, completes the
    /// negatives from the grown tables \[G4\].
    pub(crate) fn complete_many(&self, hash: impl Fn(usize) -> u64, results: &mut [bool]) {
        // ORDERING: Acquire; [G4], loaded after every base read of the batch.
        if self.grown.load(Ordering::Acquire) == 0 {
            return;
        }
        for (i, result) in results.iter_mut().enumerate() {
            if !*result {
                let h = hash(i);
                *result = self.any_grown_after(0, |t| t.contains(h));
            }
        }
    }

    /// The number of copies of the key of `hash` in all tables \[G4\].
    pub(crate) fn count(&self, hash: u64) -> usize {
        let mut n = self.base.count(hash);
        self.any_grown_after(0, |t| {
            n += t.count(hash);
            false
        });
        n
    }

    /// Removes one copy of the key of `hash`, the first in table order \[G3\].
    #[inline]
    pub(crate) fn remove(&self, hash: u64) -> bool {
        self.base.remove(hash) || self.any_grown_after(0, |t| t.remove(hash))
    }

    /// Adds one copy (or, if `unique`, one if none is present) to the newest table, growing
    /// when it is full \[G2\] \[G5\].
    pub(crate) fn insert(&self, hash: u64, unique: bool) -> Result<Inserted, GrowingInsertFailure> {
        self.insert_growing(hash, unique, Self::grow)
    }

    /// `insert` with the growth step `grow` (the real \[G1\], or a broken variant in tests).
    #[inline]
    fn insert_growing(
        &self,
        hash: u64,
        unique: bool,
        grow: impl Fn(&Self, usize) -> Result<(), GrowFailure>,
    ) -> Result<Inserted, GrowingInsertFailure> {
        loop {
            // ORDERING: Acquire; [G2] pairs with the Release of [G1]: the newest table is
            // filled and visible.
            let grown = self.grown.load(Ordering::Acquire);
            let result = if unique {
                self.insert_unique_at(hash, grown)
            } else {
                self.table(grown).insert(hash, false)
            };
            match result {
                Ok(inserted) => return Ok(inserted),
                Err(InsertFailure::Contended) => return Err(GrowingInsertFailure::Contended),
                Err(InsertFailure::Outgrown) => continue,
                Err(InsertFailure::Full) => {
                    grow(self, grown).map_err(GrowingInsertFailure::Full)?;
                    bump(&self.full_then_grown);
                }
            }
        }
    }

    /// One attempt of \[G5\] with `grown` grown tables.
    fn insert_unique_at(&self, hash: u64, grown: usize) -> Result<Inserted, InsertFailure> {
        if (0..grown).any(|i| self.table(i).count_locked(hash) > 0) {
            return Ok(Inserted::AlreadyPresent);
        }
        self.table(grown).insert_while(hash, true, || {
            // ORDERING: Acquire; [G5] read under the newest table's locks. A unique insert
            // that saw a later table counted this table under the same locks after it loaded
            // `grown`, so either its count saw this put or this load sees its `grown`.
            self.grown.load(Ordering::Acquire) == grown
        })
    }

    /// Adds a table if `seen` is still the number of grown tables \[G1\]; `Ok` also when
    /// another thread already added one.
    pub(crate) fn grow(&self, seen: usize) -> Result<(), GrowFailure> {
        let _lock = self.grow_lock.lock().unwrap_or_else(PoisonError::into_inner);
        // ORDERING: Relaxed; under the growth lock, whose Acquire orders this load after
        // every publication [G1], all of which store under the lock.
        let grown = self.grown.load(Ordering::Relaxed);
        if grown != seen {
            return Ok(());
        }
        if grown == self.slots.len() {
            return Err(GrowFailure::Limit);
        }
        let last = self.table(grown).num_buckets();
        let buckets = last.saturating_mul(self.factor).min(MAX_BUCKETS);
        if buckets <= last && self.factor > 1 {
            return Err(GrowFailure::Limit);
        }
        let word_bytes = if self.base.fingerprint_bits() == 8 { 4 } else { 8 };
        let table = self
            .base
            .new_like(buckets)
            .ok_or(GrowFailure::Allocation {
                bytes: buckets.saturating_mul(word_bytes),
            })?;
        // The slot is empty: only a holder of the growth lock fills it, and one that did
        // also counted it, so `grown != seen` above would have returned.
        let _ = self.slots[grown].set(table);
        // ORDERING: Release; [G1] publishes the filled slot and the new table's initialized
        // words to every Acquire load of `grown`.
        self.grown.store(grown + 1, Ordering::Release);
        Ok(())
    }

    /// Empties every table.
    pub(crate) fn clear(&self) {
        for table in self.iter() {
            table.clear();
        }
    }

    /// The most tables this filter may add.
    pub(crate) fn max_growth_steps(&self) -> usize {
        self.slots.len()
    }

    /// Each grown table's size over the one before it.
    pub(crate) fn growth_factor(&self) -> usize {
        self.factor
    }

    pub(crate) fn len(&self) -> usize {
        self.iter().map(Table::len).sum()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.iter().map(Table::capacity).sum()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.iter().map(Table::heap_bytes).sum::<usize>()
            + std::mem::size_of_val(&*self.slots)
    }

    /// The sum of every table's expected false-positive rate at its own load: a lookup
    /// probes them all, and each can answer a false "present" on its own.
    pub(crate) fn expected_false_positive_rate(&self) -> f64 {
        self.iter()
            .map(|t| {
                crate::sizing::false_positive_rate(
                    t.fingerprint_bits(),
                    t.len() as f64 / t.capacity() as f64,
                )
            })
            .sum()
    }

    pub(crate) fn stats(&self) -> Stats {
        let mut stats = self.base.stats();
        for i in 1..=self.growth_steps() {
            stats.absorb(&self.grown_table(i).stats());
            stats.growth_steps = i;
        }
        // ORDERING: Relaxed; a statistic.
        let absorbed = self.full_then_grown.load(Ordering::Relaxed);
        stats.failed_inserts = stats.failed_inserts.saturating_sub(absorbed);
        stats
    }

    /// `remove` searching the newest table first: a broken variant of \[G3\] that can move a
    /// copy to an earlier table, which the loom models must catch.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn remove_newest_first(&self, hash: u64) -> bool {
        let grown = self.growth_steps();
        (0..=grown).rev().any(|i| self.table(i).remove(hash))
    }

    /// `contains` that loads `grown` once, before reading the base table: a broken variant of
    /// \[G4\] that the loom models must catch.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn contains_loading_once(&self, hash: u64) -> bool {
        let grown = self.growth_steps();
        (0..=grown).any(|i| self.table(i).contains(hash))
    }

    /// `contains` that loads `grown` after the base table but never again: a broken variant of
    /// \[G4\] that the loom models must catch.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn contains_without_reload(&self, hash: u64) -> bool {
        self.base.contains(hash) || {
            let grown = self.growth_steps();
            (1..=grown).any(|i| self.grown_table(i).contains(hash))
        }
    }

    /// `remove` that loads `grown` once, before scanning the base table: a broken variant of
    /// \[G3\] that the loom models must catch.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn remove_loading_once(&self, hash: u64) -> bool {
        let grown = self.growth_steps();
        (0..=grown).any(|i| self.table(i).remove(hash))
    }

    /// `insert` whose growth step is one of the broken variants below.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn insert_with_broken_growth(
        &self,
        hash: u64,
        grow: fn(&Self, usize) -> Result<(), GrowFailure>,
    ) -> Result<Inserted, GrowingInsertFailure> {
        self.insert_growing(hash, false, grow)
    }

    /// \[G1\] without the check that no other thread grew meanwhile: a broken variant that
    /// adds a table per racing insert.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn grow_unchecked(&self, _seen: usize) -> Result<(), GrowFailure> {
        let _lock = self.grow_lock.lock().unwrap_or_else(PoisonError::into_inner);
        let grown = self.grown.load(Ordering::Relaxed);
        let table = self.base.new_like(self.table(grown).num_buckets() * self.factor);
        let _ = self.slots[grown].set(table.expect("a tiny table"));
        self.grown.store(grown + 1, Ordering::Release);
        Ok(())
    }

    /// \[G1\] that counts the slot before filling it (a reservation by `fetch_add`): a
    /// broken variant under which another thread can reach an unfilled slot.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn grow_reserving_first(&self, seen: usize) -> Result<(), GrowFailure> {
        let _lock = self.grow_lock.lock().unwrap_or_else(PoisonError::into_inner);
        if self.grown.load(Ordering::Relaxed) != seen {
            return Ok(());
        }
        let grown = self.grown.fetch_add(1, Ordering::AcqRel);
        // Loom switches threads only at its own operations, and neither creating a table's
        // atomics nor filling a `OnceLock` is one: a yield marks where the allocation would
        // let another thread run.
        crate::sync::yield_now();
        let table = self.base.new_like(self.table(grown).num_buckets() * self.factor);
        let _ = self.slots[grown].set(table.expect("a tiny table"));
        Ok(())
    }

    /// Which table answers a lookup (`Some(i)`, 0 for the base) or `None`: `contains` with a
    /// trace, for the loom census.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn find(&self, hash: u64) -> Option<usize> {
        if self.base.contains(hash) {
            return Some(0);
        }
        let grown = self.growth_steps();
        if grown == 0 {
            return None;
        }
        self.find_grown(hash, grown)
    }
}

#[cfg(all(test, cuckoo_loom))]
mod loom_tests;
