//! [`Tables`]: a filter's base table and the tables added as it grows.
//!
//! # Protocol
//!
//! The base table is held inline. Up to `max_steps` grown tables live in slots that are filled
//! once, in order, and never emptied or replaced while the filter is shared; `grown` counts the
//! filled slots. Grown table `j` is nested over the base table with `2^(j * step_shift)`
//! sub-buckets per base bucket (`geometry`). A key's copies live in any of the tables; each
//! table keeps its own protocol (`stripe`: puts, takes, displacements within the table). This
//! layer adds:
//!
//! - \[growth.G1\] Publish. A grower holds the growth lock, checks that `grown` is still the count at
//!   which it found the newest table full, fills the next slot, then stores `grown + 1`
//!   (Release).
//! - \[growth.G2\] Insert. Load `grown` (Acquire) and insert into the newest table. `Full` there: grow
//!   \[growth.G1\] (or find that another thread did) and insert into the new newest table.
//! - \[growth.G3\] Remove. Load `grown` (Acquire), then scan the tables newest first and take the
//!   first copy found.
//! - \[growth.G4\] Lookup. Load `grown` (Acquire), then read the tables newest first, each with the
//!   table's validated read. A filter that never grew pays the load and one predicted branch.
//! - \[growth.G5\] Unique insert. Count the key's copies in every table but the newest under the
//!   locks of its buckets there; then, under the locks of its buckets in the newest, check
//!   that the newest has no copy and that `grown` has not changed, and only then put.
//!
//! # Invariants
//!
//! - (a) A copy stays in the table it was put in (a displacement moves it within its table).
//! - (b) Two keys that share a fingerprint and bucket pair in one table share them in every
//!   older table (the nested geometry). So the copy a remove of `k` takes, found in the newest
//!   table that holds a match, belongs to `k` or to a key `x` that shares `k`'s fingerprint and
//!   buckets there and in every older table, including the one holding `k`'s own copy (no
//!   newer than the match, since it is a match too). `k`'s copy then stands in for `x`'s.
//!
//! # Why a lookup sees every key inserted before it and not removed
//!
//! Each present key has a copy standing for it: its own, or one it took over by (b). Such a
//! copy is in a table the lookup counts (the key's insert happened before the lookup's load of
//! `grown`), and a take hands a key over to a copy in the same or an older table, one put
//! before the take. The lookup reads newest first. If it reads the key's table before the
//! take, it finds the copy. If after, its validated read acquired the take's unlock \[stripe.R1\],
//! so the put of the stand-in is visible to its later reads: in an older table, read later;
//! in the same table, covered by the table's own net-move protocol \[stripe.I4\]. Repeat with the
//! stand-in: the chain of takes is finite. A remove reasons the same way under locks.
//! (Oldest first would be wrong twice over: the copy found there can belong to a key that
//! shares the remover's buckets only in that table, and a lookup reading oldest first can
//! read the stand-in's table before its put and the taken copy's table after the take.)
//!
//! Tables are never freed while the filter is shared, so neither lookups nor writers pin
//! anything: a grown slot, once loaded, stays valid for the borrow of the filter.

use std::sync::{OnceLock, PoisonError};

use std::hash::{BuildHasher, Hash};

use super::{InsertFailure, Inserted, Lookup, Table};
use crate::sharded::bump;
use crate::stats::Stats;
use crate::sync::{AtomicU64, AtomicUsize, Mutex, Ordering};

/// The most buckets one table may have (the bucket index is 32 bits).
const MAX_BUCKETS: u64 = 1 << 32;

/// The most sub-buckets per base bucket: a nested table's sub-bucket comes from 16 hash bits.
const MAX_SHIFT: u32 = crate::fingerprint::SUB_BUCKET_BITS;

/// Growth broken on purpose, one step per field: the loom models' negative controls
/// (`loom_growth_control_<field>`). The real steps consult it at the step each field breaks.
#[cfg(cuckoo_loom)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Broken {
    /// \[growth.G4\] a lookup reads the oldest table first.
    pub(crate) lookup_oldest_first: bool,
    /// \[growth.G3\] a remove scans the oldest table first.
    pub(crate) remove_oldest_first: bool,
    /// \[growth.G1\] a grower adds a table without checking that no other thread grew meanwhile.
    pub(crate) grow_unchecked: bool,
    /// \[growth.G1\] a grower counts the next slot (a `fetch_add`) before filling it.
    pub(crate) grow_reserving_first: bool,
    /// \[growth.G5\] a unique insert puts without checking that its table is still the newest.
    pub(crate) unique_outgrown_unchecked: bool,
    /// \[overflow.R2\] a one-line "absent" is final without reloading the table count.
    pub(crate) one_line_unrechecked: bool,
}

/// Why a growth step added no table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GrowFailure {
    /// Growth is disabled, the filter already added its maximum number of tables, or the next
    /// table would exceed the largest table or sub-bucket count.
    Limit,
    /// The new table's buckets could not be allocated.
    Allocation { bytes: usize },
    /// The new table would take the tables past `limit` bytes (`needed` with it).
    MemoryLimit { limit: usize, needed: usize },
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
    /// Filled slots of `slots` \[growth.G1\].
    grown: AtomicUsize,
    slots: Box<[OnceLock<Table>]>,
    /// Each grown table has `2^step_shift` times the buckets of the table before it.
    step_shift: u32,
    /// Held by a grower while it checks `grown` and fills the next slot \[growth.G1\].
    grow_lock: Mutex<()>,
    /// Inserts that found a table full and went on to a newer one: counted as failures by
    /// that table's counters, but not failures of the filter.
    full_then_grown: AtomicU64,
    /// The most bytes growth may take the tables to ([`heap_bytes`](Self::heap_bytes)).
    max_bytes: usize,
    /// Unique inserts whose put was refused because a table was added after they loaded
    /// `grown` \[growth.G5\] (for the loom census).
    #[cfg(all(test, cuckoo_loom))]
    outgrown: AtomicU64,
    /// One-line answers whose reload found a newer table \[overflow.R2\] (for the loom census).
    #[cfg(all(test, cuckoo_loom))]
    stale_one_line: AtomicU64,
    #[cfg(cuckoo_loom)]
    broken: Broken,
}

impl Tables {
    /// `base` with room for `max_steps` grown tables, each `2^step_shift` times the size of
    /// the one before (`max_steps == 0`: the filter never grows).
    pub(crate) fn new(base: Table, step_shift: u32, max_steps: usize) -> Self {
        Tables {
            base,
            grown: AtomicUsize::new(0),
            slots: (0..max_steps).map(|_| OnceLock::new()).collect(),
            step_shift,
            grow_lock: Mutex::new(()),
            full_then_grown: AtomicU64::new(0),
            max_bytes: usize::MAX,
            #[cfg(all(test, cuckoo_loom))]
            outgrown: AtomicU64::new(0),
            #[cfg(all(test, cuckoo_loom))]
            stale_one_line: AtomicU64::new(0),
            #[cfg(cuckoo_loom)]
            broken: Broken::default(),
        }
    }

    /// Tables as a snapshot restores them: `base` and the `grown` tables after it, oldest
    /// first; `None` if there are more grown tables than `max_steps`.
    pub(crate) fn from_tables(
        base: Table,
        grown: Vec<Table>,
        step_shift: u32,
        max_steps: usize,
    ) -> Option<Self> {
        if grown.len() > max_steps {
            return None;
        }
        let tables = Tables::new(base, step_shift, max_steps);
        let count = grown.len();
        for (slot, table) in tables.slots.iter().zip(grown) {
            let _ = slot.set(table);
        }
        // ORDERING: Relaxed; the tables are not shared yet.
        tables.grown.store(count, Ordering::Relaxed);
        Some(tables)
    }

    /// The growth shift of each step (`log2` of the factor).
    pub(crate) fn step_shift(&self) -> u32 {
        self.step_shift
    }

    /// The base table.
    pub(crate) fn base(&self) -> &Table {
        &self.base
    }

    /// Grown table `i` (from 1), which a load of `grown` returning at least `i` published.
    fn grown_table(&self, i: usize) -> &Table {
        match self.slots[i - 1].get() {
            Some(table) => table,
            // [growth.G1] fills a slot before it counts it.
            None => unreachable!("grown table {i} counted before it was filled"),
        }
    }

    /// Table `i`: the base table for 0, else grown table `i` (counted by a load of
    /// [`growth_steps`](Self::growth_steps) returning at least `i`).
    pub(crate) fn table(&self, i: usize) -> &Table {
        if i == 0 {
            &self.base
        } else {
            self.grown_table(i)
        }
    }

    /// The number of tables added so far.
    #[inline(always)]
    pub(crate) fn growth_steps(&self) -> usize {
        // ORDERING: Acquire; [growth.G2] [growth.G3] [growth.G4] pair with the Release of [growth.G1], so every table
        // counted is filled and its words initialized, and a key inserted before this load
        // is in a table it counts.
        self.grown.load(Ordering::Acquire)
    }

    /// Tables `0..=grown`, newest first.
    fn newest_first(&self, grown: usize) -> impl Iterator<Item = &Table> + '_ {
        (0..=grown).rev().map(move |i| self.table(i))
    }

    /// Every table now published, base first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Table> + '_ {
        (0..=self.growth_steps()).map(move |i| self.table(i))
    }

    /// Whether the key of `hash` may be present \[growth.G4\] \[overflow.R1\].
    #[inline]
    pub(crate) fn contains(&self, hash: u64) -> bool {
        match self.growth_steps() {
            0 => match self.base.contains_newest(hash) {
                Lookup::Present => true,
                Lookup::Absent => false,
                Lookup::AbsentOneLine => !self.still_grown(0) && self.find_again(hash),
            },
            grown => self.find_grown(hash, grown).is_some(),
        }
    }

    /// Whether no table was added since a lookup loaded `grown` \[overflow.R2\]: a one-line
    /// "absent" from table `grown` is final only then.
    #[inline(always)]
    fn still_grown(&self, grown: usize) -> bool {
        #[cfg(cuckoo_loom)]
        if self.broken.one_line_unrechecked {
            return true;
        }
        // ORDERING: Relaxed; [overflow.R2] after the one-line read's Acquire load in program
        // order: a store of a larger count that happened before a take that load read is
        // visible here.
        self.grown.load(Ordering::Relaxed) == grown
    }

    /// A lookup after a one-line "absent" from a table that is no longer the newest.
    #[cold]
    #[inline(never)]
    fn find_again(&self, hash: u64) -> bool {
        #[cfg(all(test, cuckoo_loom))]
        bump(&self.stale_one_line);
        self.find(hash).is_some()
    }

    /// The table that answers "present" (0 for the base) or `None`, reading newest first
    /// (the newest from one line where it can answer) \[growth.G4\] \[overflow.R2\].
    #[cold]
    #[inline(never)]
    pub(crate) fn find(&self, hash: u64) -> Option<usize> {
        self.find_grown(hash, self.growth_steps())
    }

    /// [`find`](Self::find) with `grown` already loaded.
    fn find_grown(&self, hash: u64, grown: usize) -> Option<usize> {
        #[cfg(cuckoo_loom)]
        if self.broken.lookup_oldest_first {
            return (0..=grown).find(|&i| self.table(i).contains(hash));
        }
        let one_line = match self.table(grown).contains_newest(hash) {
            Lookup::Present => return Some(grown),
            Lookup::Absent => false,
            Lookup::AbsentOneLine => true,
        };
        if let Some(i) = (0..grown).rev().find(|&i| self.table(i).contains(hash)) {
            return Some(i);
        }
        if one_line && !self.still_grown(grown) {
            #[cfg(all(test, cuckoo_loom))]
            bump(&self.stale_one_line);
            // A table was added meanwhile: every table again, two lines each.
            return (0..=self.growth_steps())
                .rev()
                .find(|&i| self.table(i).contains(hash));
        }
        None
    }

    /// Writes `results[i] = contains(hash of keys[i])`, batching the loads of a filter that
    /// never grew.
    ///
    /// # Panics
    ///
    /// If `keys` and `results` differ in length.
    pub(crate) fn contains_many<K: Hash, S: BuildHasher>(
        &self,
        hasher: &S,
        keys: &[K],
        results: &mut [bool],
    ) {
        assert_eq!(
            keys.len(),
            results.len(),
            "contains_many: {} keys but {} result slots",
            keys.len(),
            results.len()
        );
        let batched = self.growth_steps() == 0
            && (!self.base.contains_many(hasher, keys, results) || self.still_grown(0));
        if !batched {
            for (key, result) in keys.iter().zip(results.iter_mut()) {
                *result = self.contains(hasher.hash_one(key));
            }
        }
    }

    /// The number of copies of the key of `hash` in all tables.
    pub(crate) fn count(&self, hash: u64) -> usize {
        self.newest_first(self.growth_steps())
            .map(|t| t.count(hash))
            .sum()
    }

    /// Removes one copy of the key of `hash`, the first found newest first \[growth.G3\].
    #[inline]
    pub(crate) fn remove(&self, hash: u64) -> bool {
        match self.growth_steps() {
            0 => self.base.remove(hash),
            grown => self.remove_grown(hash, grown).is_some(),
        }
    }

    /// The table a remove took its copy from (0 for the base), scanning newest first.
    #[inline]
    fn remove_grown(&self, hash: u64, grown: usize) -> Option<usize> {
        #[cfg(cuckoo_loom)]
        if self.broken.remove_oldest_first {
            return self.remove_oldest_first(hash, grown);
        }
        (0..=grown).rev().find(|&i| {
            if i == grown {
                self.table(i).remove(hash)
            } else {
                self.table(i).remove_in_older(hash)
            }
        })
    }

    /// Adds one copy (or, if `unique`, one if none is present) to the newest table, growing
    /// when it is full \[growth.G2\] \[growth.G5\].
    pub(crate) fn insert(&self, hash: u64, unique: bool) -> Result<Inserted, GrowingInsertFailure> {
        loop {
            let grown = self.growth_steps();
            let result = if unique {
                self.insert_unique_at(hash, grown)
            } else {
                self.table(grown).insert(hash, false)
            };
            match result {
                Ok(inserted) => return Ok(inserted),
                Err(InsertFailure::Contended) => return Err(GrowingInsertFailure::Contended),
                Err(InsertFailure::Outgrown) => {
                    #[cfg(all(test, cuckoo_loom))]
                    bump(&self.outgrown);
                    continue;
                }
                Err(InsertFailure::Full) => {
                    self.grow(grown).map_err(GrowingInsertFailure::Full)?;
                    bump(&self.full_then_grown);
                }
            }
        }
    }

    /// One attempt of \[growth.G5\] with `grown` grown tables.
    fn insert_unique_at(&self, hash: u64, grown: usize) -> Result<Inserted, InsertFailure> {
        if (0..grown).any(|i| self.table(i).count_locked(hash) > 0) {
            return Ok(Inserted::AlreadyPresent);
        }
        self.table(grown).insert_while(hash, true, || {
            #[cfg(cuckoo_loom)]
            if self.broken.unique_outgrown_unchecked {
                return true;
            }
            // ORDERING: Acquire; [growth.G5] read under the newest table's locks. A unique insert
            // that saw a later table counted this table under the same locks after it loaded
            // `grown`, so either its count saw this put or this load sees its `grown`.
            self.grown.load(Ordering::Acquire) == grown
        })
    }

    /// The sub-bucket shift of grown table `i`, if it may be added.
    fn shift_of(&self, i: usize) -> Option<u32> {
        let shift = u32::try_from(i).ok()?.checked_mul(self.step_shift)?;
        let buckets = (self.base.num_buckets() as u64).checked_shl(shift)?;
        (i <= self.slots.len() && shift <= MAX_SHIFT && buckets <= MAX_BUCKETS).then_some(shift)
    }

    /// Adds a table if `seen` is still the number of grown tables \[growth.G1\]; `Ok` also when
    /// another thread already added one.
    pub(crate) fn grow(&self, seen: usize) -> Result<(), GrowFailure> {
        #[cfg(cuckoo_loom)]
        if self.broken.grow_unchecked {
            return self.grow_unchecked();
        }
        #[cfg(cuckoo_loom)]
        if self.broken.grow_reserving_first {
            return self.grow_reserving_first(seen);
        }
        let _lock = self
            .grow_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // ORDERING: Relaxed; under the growth lock, whose Acquire orders this load after
        // every publication [growth.G1], all of which store under the lock.
        let grown = self.grown.load(Ordering::Relaxed);
        if grown != seen {
            return Ok(());
        }
        let shift = self.shift_of(grown + 1).ok_or(GrowFailure::Limit)?;
        let needed = self.heap_bytes().saturating_add(self.table_bytes(shift));
        if needed > self.max_bytes {
            return Err(GrowFailure::MemoryLimit {
                limit: self.max_bytes,
                needed,
            });
        }
        let table = self.new_table(shift)?;
        // The slot is empty: only a holder of the growth lock fills it, and one that did
        // also counted it, so `grown != seen` above would have returned.
        let _ = self.slots[grown].set(table);
        // ORDERING: Release; [growth.G1] publishes the filled slot and the new table's initialized
        // words to every Acquire load of `grown`.
        self.grown.store(grown + 1, Ordering::Release);
        Ok(())
    }

    /// These tables with growth bounded to `bytes` in all.
    pub(crate) fn with_max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// The bound of [`with_max_bytes`](Self::with_max_bytes) (`usize::MAX`: none).
    pub(crate) fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// What a table of `2^shift` sub-buckets per base bucket takes, as its
    /// [`heap_bytes`](Table::heap_bytes) will count it: its buckets, a stripe word per bucket
    /// up to [`MAX_STRIPES`](super::MAX_STRIPES), and counters of the base's size.
    fn table_bytes(&self, shift: u32) -> usize {
        let word = self.base.width().word_bytes();
        let stripes = |buckets: usize| {
            buckets.next_power_of_two().min(super::MAX_STRIPES) * std::mem::size_of::<AtomicU64>()
        };
        let base = self.base.num_buckets();
        let counters = self
            .base
            .heap_bytes()
            .saturating_sub(base.saturating_mul(word) + stripes(base));
        let buckets = base << shift;
        buckets
            .saturating_mul(word)
            .saturating_add(stripes(buckets))
            .saturating_add(counters)
    }

    fn new_table(&self, shift: u32) -> Result<Table, GrowFailure> {
        self.base
            .nested(shift)
            .ok_or_else(|| GrowFailure::Allocation {
                bytes: (self.base.num_buckets() << shift)
                    .saturating_mul(self.base.width().word_bytes()),
            })
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
        1 << self.step_shift
    }

    pub(crate) fn len(&self) -> usize {
        self.iter().map(Table::len).sum()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.iter().map(Table::capacity).sum()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.iter().map(Table::heap_bytes).sum::<usize>() + std::mem::size_of_val(&*self.slots)
    }

    /// The heap bytes of new tables over a base of `base_bytes` heap bytes with room for
    /// `max_steps` growth steps ([`heap_bytes`](Self::heap_bytes) before any growth),
    /// computed without allocating them.
    pub(crate) fn heap_bytes_for(base_bytes: usize, max_steps: usize) -> usize {
        base_bytes.saturating_add(max_steps * std::mem::size_of::<OnceLock<Table>>())
    }

    /// The sum of every table's expected false-positive rate at its own load: a lookup
    /// probes them all, and each can answer a false "present" on its own.
    pub(crate) fn expected_false_positive_rate(&self) -> f64 {
        self.iter()
            .map(|t| {
                crate::sizing::false_positive_rate(t.width(), t.len() as f64 / t.capacity() as f64)
            })
            .sum()
    }

    /// The share of the newest table's overflow bits set (sampled).
    pub(crate) fn overflow_share(&self) -> f64 {
        self.table(self.growth_steps()).overflow_share()
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

    /// `remove_grown` scanning the oldest table first ([`Broken::remove_oldest_first`]).
    #[cfg(cuckoo_loom)]
    fn remove_oldest_first(&self, hash: u64, grown: usize) -> Option<usize> {
        (0..=grown).find(|&i| self.table(i).remove(hash))
    }

    /// `grow` with [`Broken::grow_unchecked`]: adds a table per racing insert.
    #[cfg(cuckoo_loom)]
    fn grow_unchecked(&self) -> Result<(), GrowFailure> {
        let _lock = self
            .grow_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // ORDERING: Relaxed; under the growth lock, as in `grow`.
        let grown = self.grown.load(Ordering::Relaxed);
        let table = self.new_table(self.shift_of(grown + 1).expect("room to grow"))?;
        let _ = self.slots[grown].set(table);
        // ORDERING: Release; [growth.G1] as in `grow`.
        self.grown.store(grown + 1, Ordering::Release);
        Ok(())
    }

    /// `grow` with [`Broken::grow_reserving_first`]: another thread can reach an unfilled slot.
    #[cfg(cuckoo_loom)]
    fn grow_reserving_first(&self, seen: usize) -> Result<(), GrowFailure> {
        let _lock = self
            .grow_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // ORDERING: Relaxed; under the growth lock, as in `grow`.
        if self.grown.load(Ordering::Relaxed) != seen {
            return Ok(());
        }
        // ORDERING: AcqRel; counts the slot before it is filled: deliberately broken.
        let grown = self.grown.fetch_add(1, Ordering::AcqRel);
        // Loom switches threads only at its own operations, and neither creating a table's
        // atomics nor filling a `OnceLock` is one: a yield marks where the allocation would
        // let another thread run.
        crate::sync::yield_now();
        let table = self.new_table(self.shift_of(grown + 1).expect("room to grow"))?;
        let _ = self.slots[grown].set(table);
        Ok(())
    }

    /// Which table a remove took its copy from (`Some(i)`, 0 for the base) or `None`:
    /// `remove` with a trace, for the loom census, and with `broken` for this call only (for a
    /// model whose other actors remove correctly).
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn remove_traced(&self, hash: u64, broken: Broken) -> Option<usize> {
        match self.growth_steps() {
            0 => self.base.remove(hash).then_some(0),
            grown if broken.remove_oldest_first => self.remove_oldest_first(hash, grown),
            grown => self.remove_grown(hash, grown),
        }
    }

    /// Sets the broken steps of the growth protocol.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn set_broken(&mut self, broken: Broken) {
        self.broken = broken;
    }

    /// One-line answers whose reload found a newer table \[overflow.R2\].
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn stale_one_line_answers(&self) -> u64 {
        // ORDERING: Relaxed; a statistic read after the model's threads are joined.
        self.stale_one_line.load(Ordering::Relaxed)
    }

    /// Unique inserts that retried because a table was added after they loaded `grown`.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn outgrown_retries(&self) -> u64 {
        // ORDERING: Relaxed; a statistic read after the model's threads are joined.
        self.outgrown.load(Ordering::Relaxed)
    }

    /// Inserts that found a table full and called the growth step.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn full_then_grown(&self) -> u64 {
        // ORDERING: Relaxed; a statistic read after the model's threads are joined.
        self.full_then_grown.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, cuckoo_loom))]
mod loom_tests;

#[cfg(all(test, not(cuckoo_loom)))]
mod sequence_tests;
