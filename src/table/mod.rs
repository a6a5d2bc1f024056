//! The raw table: bucket words, stripe words, and the filter operations on precomputed probes.
//!
//! The synchronization protocol (tags \[stripe.W1\]..\[stripe.W4\], \[stripe.R1\]..\[stripe.R3\], \[stripe.I1\]..\[stripe.I4\]) is
//! documented in [`stripe`], which implements its lock and version steps; this module and
//! [`path`] apply it. Readers take no lock and store nothing on the lookup path. Every bucket
//! store happens under the lock of the bucket's stripe.

mod copy;
mod counters;
mod geometry;
mod growth;
mod overflow;
mod path;
mod stripe;
mod width;

use std::marker::PhantomData;

use crate::fingerprint::{
    empty_lanes, fingerprint, first_lane, matching_lanes, pair_has_match, with_lane, Layout,
};
use crate::sync::{advise_huge_pages, fence, prefetch, spin_loop, AtomicU64, Ordering};

use self::copy::CopyState;
use self::geometry::{Flat, Geometry, Nested};
use self::stripe::{PairLock, StripeLock};

pub(crate) use self::copy::Extra;
pub(crate) use self::counters::Counters;
pub(crate) use self::growth::{GrowFailure, GrowingInsertFailure, Tables};
pub(crate) use self::overflow::Lookup;
#[cfg(all(test, not(cuckoo_loom)))]
pub(crate) use self::path::Hop;
pub(crate) use self::path::MAX_PATH_LEN;
pub(crate) use self::width::Table;
pub(crate) use crate::fingerprint::Width;

/// The most stripes a table has: 4096 words, 32 KiB, small enough to stay in L1/L2 for
/// readers, many enough that two writers rarely share one.
pub(crate) const MAX_STRIPES: usize = 4096;

/// The longest random walk that places a snapshot's extra copy when the table's own path
/// search finds no room ([`RawTable::place_extra`]).
const EXTRA_WALK_KICKS: usize = 10_000;

/// Attempts a lookup makes before it answers "present" rather than wait for a writer that
/// keeps displacing in its bucket pair: a false positive costs one store read, a reader that
/// waits on writers can starve.
#[cfg(not(cuckoo_loom))]
const READ_ATTEMPTS: usize = 64;
#[cfg(cuckoo_loom)]
const READ_ATTEMPTS: usize = 4;

/// Path searches an insert makes when other writers keep invalidating its path, so that an
/// insert under heavy contention fails with `Contended` rather than retry forever.
#[cfg(not(cuckoo_loom))]
const INSERT_ATTEMPTS: usize = 32;
#[cfg(cuckoo_loom)]
const INSERT_ATTEMPTS: usize = 3;

/// Where one key's fingerprint may live: the key's primary and alternate buckets and its
/// fingerprint. Computed once per key from its hash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Probe {
    pub(crate) primary: usize,
    pub(crate) alternate: usize,
    pub(crate) fp: u64,
}

/// What a successful insert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inserted {
    /// A copy of the fingerprint was stored.
    Added,
    /// `insert_unique` found the fingerprint already present and stored nothing.
    AlreadyPresent,
}

/// Why an insert stored nothing. The table is unchanged (hops already made only moved other
/// fingerprints within their own bucket pairs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InsertFailure {
    /// No cuckoo path within the length bound ends at a free slot.
    Full,
    /// Other writers invalidated every path found, `INSERT_ATTEMPTS` times.
    Contended,
    /// A unique insert found, under the locks of its buckets, that its table is no longer
    /// the filter's newest (growth \[growth.G5\]); nothing was stored.
    Outgrown,
}

/// A cuckoo filter table of one fingerprint layout.
#[derive(Debug)]
pub(crate) struct RawTable<L: Layout, G: Geometry = Flat> {
    buckets: Box<[L::Word]>,
    stripes: Box<[AtomicU64]>,
    geometry: G,
    stripe_mask: usize,
    max_path_len: usize,
    /// 0: breadth-first path search; otherwise the kicks a random-walk search may take.
    random_walk_kicks: usize,
    counters: Counters,
    /// The state of a running copy (a snapshot), checked by every take (`copy`).
    copy: CopyState,
    /// Steps of the stripe protocol broken on purpose, for the loom controls.
    #[cfg(cuckoo_loom)]
    broken: stripe::Broken,
    /// One-line reads a set overflow bit sent to two lines (for the loom census).
    #[cfg(all(test, cuckoo_loom))]
    bit_sends: AtomicU64,
    _layout: PhantomData<L>,
}

/// The stripes of a new table of `buckets` buckets: as many as buckets rounded up to a power of
/// two, at most [`MAX_STRIPES`].
fn stripes_for(buckets: usize) -> usize {
    buckets.next_power_of_two().min(MAX_STRIPES)
}

impl<L: Layout> RawTable<L> {
    /// The heap bytes of a new table of `buckets` buckets ([`heap_bytes`](Self::heap_bytes)),
    /// computed without allocating it.
    pub(crate) fn heap_bytes_for(buckets: usize) -> usize {
        buckets
            .saturating_mul(std::mem::size_of::<L::Word>())
            .saturating_add(stripes_for(buckets) * std::mem::size_of::<AtomicU64>())
            .saturating_add(Counters::HEAP_BYTES)
    }

    /// A table of `num_buckets` empty buckets (`1..=2^32`), with as many stripes as buckets
    /// rounded up to a power of two, at most [`MAX_STRIPES`].
    ///
    /// Returns `None` if the bucket array cannot be allocated.
    pub(crate) fn new(num_buckets: usize, max_path_len: usize) -> Option<Self> {
        Self::with_geometry(
            Flat {
                buckets: num_buckets as u64,
            },
            max_path_len,
        )
    }

    /// A table with an explicit (power-of-two) stripe count, for tests of stripe sharing.
    #[cfg(test)]
    pub(crate) fn with_stripes(
        num_buckets: usize,
        stripes: usize,
        max_path_len: usize,
    ) -> Option<Self> {
        let geometry = Flat {
            buckets: num_buckets as u64,
        };
        Self::with_geometry_and_stripes(geometry, stripes, max_path_len)
    }
}

impl<L: Layout> RawTable<L, Nested> {
    /// A nested table of `base << shift` empty buckets over a base table of `base` buckets.
    pub(crate) fn nested(base: usize, shift: u32, max_path_len: usize) -> Option<Self> {
        let geometry = Nested {
            base: base as u64,
            shift,
        };
        Self::with_geometry(geometry, max_path_len)
    }
}

impl<L: Layout, G: Geometry> RawTable<L, G> {
    /// A table of `geometry.buckets()` empty buckets (`1..=2^32`), with as many stripes as
    /// buckets rounded up to a power of two, at most [`MAX_STRIPES`].
    fn with_geometry(geometry: G, max_path_len: usize) -> Option<Self> {
        let stripes = stripes_for(geometry.buckets() as usize);
        Self::with_geometry_and_stripes(geometry, stripes, max_path_len)
    }

    fn with_geometry_and_stripes(geometry: G, stripes: usize, max_path_len: usize) -> Option<Self> {
        let num_buckets = geometry.buckets() as usize;
        let mut buckets = Vec::new();
        buckets.try_reserve_exact(num_buckets).ok()?;
        advise_huge_pages(&buckets);
        buckets.extend((0..num_buckets).map(|_| L::new_word()));
        let counts = vec![0; stripes];
        Some(Self::from_buckets(geometry, buckets, counts, max_path_len))
    }

    /// A table over `buckets` (as many as `geometry` has) whose stripe `i` holds `counts[i]`
    /// fingerprints \[stripe.I3\].
    fn from_buckets(
        geometry: G,
        buckets: Vec<L::Word>,
        counts: Vec<u64>,
        max_path_len: usize,
    ) -> Self {
        let stripes = counts.len();
        let num_buckets = geometry.buckets() as usize;
        assert_eq!(buckets.len(), num_buckets);
        assert!(num_buckets >= 1 && num_buckets as u64 <= 1u64 << 32);
        assert!(stripes.is_power_of_two());
        assert!(
            num_buckets.div_ceil(stripes) * L::SLOTS <= stripe::MAX_STRIPE_SLOTS,
            "a stripe's count field cannot hold all of its slots"
        );
        assert!((1..=MAX_PATH_LEN).contains(&max_path_len));
        RawTable {
            buckets: buckets.into_boxed_slice(),
            stripes: counts
                .into_iter()
                .map(|n| AtomicU64::new(stripe::with_count(n)))
                .collect(),
            geometry,
            stripe_mask: stripes - 1,
            max_path_len,
            random_walk_kicks: 0,
            counters: Counters::new(),
            copy: CopyState::new(),
            #[cfg(cuckoo_loom)]
            broken: stripe::Broken::default(),
            #[cfg(all(test, cuckoo_loom))]
            bit_sends: AtomicU64::new(0),
            _layout: PhantomData,
        }
    }

    /// A table of `geometry`'s buckets whose words `fill` supplies, in bucket order, a chunk
    /// at a time (it fills the slice it is given): the loading half of a snapshot. Allocates
    /// as the words arrive, so a source that ends early never has the whole table touched.
    ///
    /// # Errors
    ///
    /// `fill`'s error, or `no_memory(bytes)` if the buckets cannot be allocated.
    pub(crate) fn load<E>(
        geometry: G,
        max_path_len: usize,
        mut fill: impl FnMut(&mut [u64]) -> Result<(), E>,
        no_memory: impl FnOnce(usize) -> E,
    ) -> Result<Self, E> {
        const CHUNK: usize = 8192;
        let num_buckets = geometry.buckets() as usize;
        let mut buckets = Vec::new();
        if buckets.try_reserve_exact(num_buckets).is_err() {
            return Err(no_memory(
                num_buckets.saturating_mul(std::mem::size_of::<L::Word>()),
            ));
        }
        advise_huge_pages(&buckets);
        let stripes = num_buckets.next_power_of_two().min(MAX_STRIPES);
        let mut counts = vec![0u64; stripes];
        let mut values = vec![0u64; CHUNK.min(num_buckets)];
        while buckets.len() < num_buckets {
            let n = (num_buckets - buckets.len()).min(CHUNK);
            fill(&mut values[..n])?;
            for &value in &values[..n] {
                let occupied = L::SLOTS as u64 - u64::from(empty_lanes::<L>(value).count_ones());
                counts[buckets.len() & (stripes - 1)] += occupied;
                buckets.push(L::word(value));
            }
        }
        Ok(Self::from_buckets(geometry, buckets, counts, max_path_len))
    }

    /// Adds the copy an [`Extra`] of a snapshot names, into its pair: by the table's own path
    /// search, then, if that finds no free slot, by random walks of up to
    /// [`EXTRA_WALK_KICKS`] kicks (an extra may duplicate a copy the snapshot holds, so a
    /// table saved at its fullest can need a longer path than its inserts searched). False if
    /// neither finds room. For a table not yet shared.
    ///
    /// Both buckets of the pair get the fingerprint's overflow bit \[overflow.W5\]: either may
    /// be the primary of the key the extra stands for.
    pub(crate) fn place_extra(&mut self, extra: Extra) -> bool {
        let p = self.probe_at(extra.bucket, extra.fp);
        let placed = self.insert(p, false).is_ok() || {
            let kicks = self.random_walk_kicks;
            self.random_walk_kicks = EXTRA_WALK_KICKS;
            let placed = self.insert(p, false).is_ok();
            self.random_walk_kicks = kicks;
            placed
        };
        if placed {
            let mut locks = self.lock_pair(p.primary, p.alternate);
            self.mark_overflow(locks.get(self.stripe_of(p.primary)), p.primary, p.fp);
            self.mark_overflow(locks.get(self.stripe_of(p.alternate)), p.alternate, p.fp);
        }
        placed
    }

    /// Searches cuckoo paths by random walks of at most `kicks` steps instead of breadth-first
    /// (0: breadth-first again).
    pub(crate) fn with_random_walk(mut self, kicks: usize) -> Self {
        self.set_random_walk(kicks);
        self
    }

    /// Sets the random-walk bound (0: breadth-first search).
    pub(crate) fn set_random_walk(&mut self, kicks: usize) {
        self.random_walk_kicks = kicks;
    }

    /// The random-walk bound, or 0 for breadth-first search.
    pub(crate) fn random_walk_kicks(&self) -> usize {
        self.random_walk_kicks
    }

    /// The probe of a key from its 64-bit hash.
    #[inline(always)]
    pub(crate) fn probe(&self, hash: u64) -> Probe {
        let fp = fingerprint::<L>(hash);
        let primary = self.geometry.primary(hash);
        self.probe_at(primary as usize, fp)
    }

    /// The probe of fingerprint `fp` whose primary bucket is `primary`.
    #[inline(always)]
    pub(crate) fn probe_at(&self, primary: usize, fp: u64) -> Probe {
        let alternate = self.geometry.alternate(primary as u64, fp) as usize;
        Probe {
            primary,
            alternate,
            fp,
        }
    }

    #[inline(always)]
    fn stripe_of(&self, bucket: usize) -> usize {
        bucket & self.stripe_mask
    }

    /// The version stripe of a probe's bucket pair \[stripe.I2\].
    #[inline(always)]
    fn version_stripe(&self, p: Probe) -> usize {
        self.stripe_of(p.primary.min(p.alternate))
    }

    #[inline]
    fn lock_pair(&self, a: usize, b: usize) -> PairLock<'_> {
        PairLock::acquire(&self.stripes, self.stripe_of(a), self.stripe_of(b))
    }

    pub(crate) fn capacity(&self) -> usize {
        self.buckets.len() * L::SLOTS
    }

    pub(crate) fn num_buckets(&self) -> usize {
        self.buckets.len()
    }

    pub(crate) fn max_path_len(&self) -> usize {
        self.max_path_len
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Heap bytes: bucket words, stripe words and counters.
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.buckets)
            + std::mem::size_of_val(&*self.stripes)
            + self.counters.heap_bytes()
    }

    /// Fingerprints stored: the sum of the stripe counts \[stripe.I3\].
    pub(crate) fn len(&self) -> usize {
        self.stripes
            .iter()
            // ORDERING: Relaxed; a size statistic, publishes nothing. Exact when no writer
            // runs; under concurrency each stripe's count is exact at its own load.
            .map(|s| stripe::count(s.load(Ordering::Relaxed)) as usize)
            .sum()
    }

    /// Whether the key of probe `p` may be present: \[stripe.R1\] to \[stripe.R3\]. Takes no lock and stores
    /// nothing, except a statistics counter on the rare retry path.
    ///
    /// The first attempt is inline and short (no loop, no spill of the retry state), so that
    /// the CPU can keep the bucket loads of several consecutive lookups in flight at once;
    /// a failed validation continues in [`contains_contended`](Self::contains_contended).
    #[inline]
    pub(crate) fn contains(&self, p: Probe) -> bool {
        let stripe_index = self.version_stripe(p);
        #[cfg(cuckoo_loom)]
        let stripe_index = if self.broken.lookup_primary_stripe {
            self.stripe_of(p.primary)
        } else {
            stripe_index
        };
        match self.read_once(p, stripe_index) {
            Some(found) => found,
            None => self.contains_contended(p.primary, p.alternate, p.fp, stripe_index),
        }
    }

    /// One optimistic attempt: `Some(answer)`, or `None` if it cannot be validated (a take may
    /// have overlapped it, or another writer changed the stripe word meanwhile).
    #[inline(always)]
    fn read_once(&self, p: Probe, stripe_index: usize) -> Option<bool> {
        let stripe = &self.stripes[stripe_index];
        #[cfg(not(cuckoo_loom))]
        let r1 = Ordering::Acquire;
        #[cfg(cuckoo_loom)]
        let r1 = if self.broken.version_load_relaxed {
            Ordering::Relaxed
        } else {
            Ordering::Acquire
        };
        // ORDERING: Acquire; [stripe.R1] pairs with the Release unlock [stripe.W4] that ends a take, so a
        // version read after a take shows its bucket stores too.
        let before = stripe.load(r1);
        // ORDERING: Relaxed; [stripe.R2] validated by [stripe.R3] when they find nothing.
        let a = L::load(&self.buckets[p.primary], Ordering::Relaxed);
        // ORDERING: Relaxed; [stripe.R2] as above.
        let b = L::load(&self.buckets[p.alternate], Ordering::Relaxed);
        if pair_has_match::<L>(a, b, p.fp) {
            return Some(true);
        }
        #[cfg(cuckoo_loom)]
        if self.broken.lookup_unvalidated {
            return Some(false);
        }
        // ORDERING: Acquire fence; [stripe.R3] pairs with the Release fence of [stripe.W3]: if a bucket
        // load above saw a take's store, the reload below sees the take's odd version.
        #[cfg(not(cuckoo_loom))]
        fence(Ordering::Acquire);
        #[cfg(cuckoo_loom)]
        if !self.broken.lookup_unfenced {
            // ORDERING: Acquire fence; [stripe.R3] as above.
            fence(Ordering::Acquire);
        }
        // ORDERING: Relaxed; [stripe.R3] ordered after the bucket loads by the fence above.
        let after = stripe.load(Ordering::Relaxed);
        #[cfg(cuckoo_loom)]
        if self.broken.odd_version_ignored {
            return (before == after).then_some(false);
        }
        stripe::unchanged(before, after).then_some(false)
    }

    /// The retry loop of [`contains`](Self::contains), after its first attempt could not be
    /// validated: at most `READ_ATTEMPTS` attempts in all, then "present" (a bounded wait).
    #[cold]
    #[inline(never)]
    fn contains_contended(
        &self,
        primary: usize,
        alternate: usize,
        fp: u64,
        stripe_index: usize,
    ) -> bool {
        // Passed as scalars, not as a `Probe`: a struct argument would be spilled to the stack
        // on the hot path before every call that is never made.
        let p = Probe {
            primary,
            alternate,
            fp,
        };
        for _ in 1..READ_ATTEMPTS {
            self.retry_read();
            if let Some(found) = self.read_once(p, stripe_index) {
                return found;
            }
        }
        self.retry_read();
        self.counters.read_fallback();
        true
    }

    #[cold]
    fn retry_read(&self) {
        self.counters.read_retry();
        spin_loop();
    }

    /// Starts loading the bucket lines of `p`, ahead of a [`contains`](Self::contains).
    #[inline(always)]
    pub(crate) fn prefetch(&self, p: Probe) {
        prefetch(&self.buckets[p.primary]);
        prefetch(&self.buckets[p.alternate]);
    }

    /// Starts loading the lines a lookup in the newest table reads first: the primary's, and
    /// the alternate's too for a layout without overflow bits.
    #[inline(always)]
    pub(crate) fn prefetch_newest(&self, p: Probe) {
        prefetch(&self.buckets[p.primary]);
        if L::OVERFLOW == 0 {
            prefetch(&self.buckets[p.alternate]);
        }
    }

    /// The number of copies of `p`'s fingerprint in its two buckets.
    ///
    /// Optimistic like `contains`, but every answer is validated (a take could make a copy
    /// count twice or not at all); after `READ_ATTEMPTS` it counts under the pair's locks.
    pub(crate) fn count(&self, p: Probe) -> usize {
        self.count_with_attempts(p, READ_ATTEMPTS)
    }

    /// `count` with `attempts` optimistic reads before the locked fallback (loom models use 1
    /// to reach the fallback).
    fn count_with_attempts(&self, p: Probe, attempts: usize) -> usize {
        #[cfg(cuckoo_loom)]
        if self.broken.count_unvalidated {
            return self.count_unlocked(p);
        }
        let stripe = &self.stripes[self.version_stripe(p)];
        for _ in 0..attempts {
            // ORDERING: Acquire; [stripe.R1] as in `contains`.
            let before = stripe.load(Ordering::Acquire);
            let n = self.count_unlocked(p);
            // ORDERING: Acquire fence; [stripe.R3] as in `contains`.
            fence(Ordering::Acquire);
            // ORDERING: Relaxed; [stripe.R3] as in `contains`.
            let after = stripe.load(Ordering::Relaxed);
            // `unchanged` also rejects a `before` taken mid-take.
            if stripe::unchanged(before, after) {
                return n;
            }
            self.retry_read();
        }
        self.counters.read_fallback();
        #[cfg(cuckoo_loom)]
        if self.broken.count_fallback_unlocked {
            return self.count_unlocked(p);
        }
        // Both stripes held: no take of this pair is in flight and no put can land in either
        // bucket, so the two loads see one state.
        let _locks = self.lock_pair(p.primary, p.alternate);
        self.count_unlocked(p)
    }

    /// The number of copies of `p`'s fingerprint, counted under the locks of both buckets:
    /// no put or take of the pair can be in flight, and the count is ordered after every
    /// write that released either lock before \[stripe.W1\].
    pub(crate) fn count_locked(&self, p: Probe) -> usize {
        let _locks = self.lock_pair(p.primary, p.alternate);
        self.count_unlocked(p)
    }

    /// Copies of `p`'s fingerprint in its buckets, read without validation: exact only under
    /// the pair's locks or inside a validated read.
    #[inline]
    fn count_unlocked(&self, p: Probe) -> usize {
        // ORDERING: Relaxed; validated by the caller ([stripe.R3]) or under the pair's locks ([stripe.W1]).
        let a = L::load(&self.buckets[p.primary], Ordering::Relaxed);
        let mut n = matching_lanes::<L>(a, p.fp).count_ones() as usize;
        if p.alternate != p.primary {
            // ORDERING: Relaxed; as above.
            let b = L::load(&self.buckets[p.alternate], Ordering::Relaxed);
            n += matching_lanes::<L>(b, p.fp).count_ones() as usize;
        }
        n
    }

    /// Stores `fp` in a free slot of `bucket`, whose stripe `lock` holds \[stripe.W2\].
    #[inline]
    fn place_locked(&self, lock: &mut StripeLock<'_>, bucket: usize, fp: u64) -> bool {
        let word = &self.buckets[bucket];
        // ORDERING: Relaxed; under the bucket's stripe lock, whose Acquire [stripe.W1] made the last
        // holder's stores visible.
        let current = L::load(word, Ordering::Relaxed);
        let free = empty_lanes::<L>(current);
        if free == 0 {
            return false;
        }
        #[cfg(not(cuckoo_loom))]
        let put = Ordering::Release;
        #[cfg(cuckoo_loom)]
        let put = if self.broken.put_relaxed {
            Ordering::Relaxed
        } else {
            Ordering::Release
        };
        // ORDERING: Release; [stripe.W2] a reader whose bucket load reads this store must also see
        // any take that came before it in this bucket [stripe.I4]. A put needs no version bump.
        L::store(
            word,
            with_lane::<L>(current, first_lane::<L>(free), fp),
            put,
        );
        lock.add_fingerprint();
        true
    }

    /// After a unique insert found a copy of `p`'s fingerprint in its pair, which now stands
    /// for `p`'s key too: if the copy is not in the primary, the primary's overflow bit
    /// \[overflow.W2\] (under the primary's stripe lock `lock`).
    fn cover_primary(&self, lock: &mut StripeLock<'_>, p: Probe) {
        #[cfg(cuckoo_loom)]
        if self.broken.unique_uncovered {
            return;
        }
        // ORDERING: Relaxed; under the primary's stripe lock [stripe.W1].
        let primary = L::load(&self.buckets[p.primary], Ordering::Relaxed);
        if matching_lanes::<L>(primary, p.fp) == 0 {
            self.mark_overflow(lock, p.primary, p.fp);
        }
    }

    /// Stores `p`'s fingerprint in a free slot of its alternate bucket, under the locks of both
    /// of its buckets: the primary's overflow bit first \[overflow.W2\]. While a copy runs, a
    /// bit the copier may have missed is logged as an extra (`copy`).
    fn place_in_alternate(&self, locks: &mut PairLock<'_>, p: Probe) -> bool {
        let (primary_stripe, alternate_stripe) =
            (self.stripe_of(p.primary), self.stripe_of(p.alternate));
        // ORDERING: Relaxed; under the bucket's stripe lock [stripe.W1]. A full alternate
        // leaves the primary's bit alone.
        if empty_lanes::<L>(L::load(&self.buckets[p.alternate], Ordering::Relaxed)) == 0 {
            return false;
        }
        #[cfg(cuckoo_loom)]
        if self.broken.alternate_put_unmarked {
            return self.place_locked(locks.get(alternate_stripe), p.alternate, p.fp);
        }
        #[cfg(cuckoo_loom)]
        if self.broken.alternate_put_before_bit {
            let placed = self.place_locked(locks.get(alternate_stripe), p.alternate, p.fp);
            self.mark_overflow(locks.get(primary_stripe), p.primary, p.fp);
            return placed;
        }
        let watch = self.copy.watch();
        self.mark_overflow(locks.get(primary_stripe), p.primary, p.fp);
        let placed = self.place_locked(locks.get(alternate_stripe), p.alternate, p.fp);
        if let Some(watch) = watch {
            if L::OVERFLOW != 0 {
                self.copy.after_mark(watch, p.primary, p.fp);
            }
        }
        placed
    }

    /// Adds one copy of `p`'s fingerprint (or, if `unique`, only when none is present).
    ///
    /// A free slot in the primary bucket is tried first, under that bucket's stripe lock alone
    /// (a plain store needs no other lock \[stripe.W2\], and most inserts below high load end here with
    /// one compare-exchange instead of two). Then, under both buckets' locks, a free slot in
    /// either; otherwise a path search finds a cuckoo path, it is executed backwards, hop by
    /// hop, and placement is tried again. On failure nothing was stored.
    ///
    /// `insert_unique` skips the one-lock attempt: its check and its store must see both
    /// buckets at once.
    pub(crate) fn insert(&self, p: Probe, unique: bool) -> Result<Inserted, InsertFailure> {
        self.insert_while(p, unique, || true)
    }

    /// [`insert`](Self::insert), where a unique insert first checks `still_newest` under the
    /// locks of both buckets and stores nothing (`Outgrown`) if it returns false: the step
    /// that keeps unique inserts unique across growth \[growth.G5\].
    pub(crate) fn insert_while(
        &self,
        p: Probe,
        unique: bool,
        still_newest: impl Fn() -> bool,
    ) -> Result<Inserted, InsertFailure> {
        #[cfg(cuckoo_loom)]
        if let Some(inserted) = self.broken_insert(p, unique) {
            return inserted;
        }
        let primary_stripe = self.stripe_of(p.primary);
        if !unique {
            let mut lock = StripeLock::acquire(&self.stripes[primary_stripe]);
            if self.place_locked(&mut lock, p.primary, p.fp) {
                drop(lock);
                self.counters.inserted(0);
                return Ok(Inserted::Added);
            }
        }
        let mut displacements = 0;
        for attempt in 0..INSERT_ATTEMPTS {
            {
                let mut locks = self.lock_pair(p.primary, p.alternate);
                // Under both locks no hop of this pair is in flight, so the count is exact.
                if unique {
                    if self.count_unlocked(p) > 0 {
                        self.cover_primary(locks.get(primary_stripe), p);
                        return Ok(Inserted::AlreadyPresent);
                    }
                    if !still_newest() {
                        return Err(InsertFailure::Outgrown);
                    }
                }
                if self.place_locked(locks.get(primary_stripe), p.primary, p.fp)
                    || (p.alternate != p.primary && self.place_in_alternate(&mut locks, p))
                {
                    self.counters.inserted(displacements);
                    return Ok(Inserted::Added);
                }
            }
            let executed = if self.random_walk_kicks == 0 {
                self.search_path(p)
                    .map(|path| self.execute_path(path.hops()))
            } else {
                self.random_walk(p, attempt as u64)
                    .map(|path| self.execute_path(&path))
            };
            let Some((hops, complete)) = executed else {
                self.counters.failed_full();
                return Err(InsertFailure::Full);
            };
            displacements += hops;
            self.counters.displaced(hops);
            if !complete {
                self.counters.path_retry();
            }
        }
        self.counters.failed_contended();
        Err(InsertFailure::Contended)
    }

    /// Removes one copy of `p`'s fingerprint: a take \[stripe.W3\] under the locks of both buckets
    /// (so it cannot clear the transient second copy of a hop in flight), inside a window on
    /// the pair's version stripe.
    ///
    /// The window is what keeps a lookup of a colliding key safe: a copy put into one bucket
    /// and then a copy taken from the other moves a copy between the buckets, and without a
    /// version change a reader that loaded the first bucket before the put and the second
    /// after the take would miss both.
    pub(crate) fn remove(&self, p: Probe) -> bool {
        self.remove_marking(p, false)
    }

    /// [`remove`](Self::remove) in a table that is not the filter's newest (as the remover's
    /// load of the table count showed): the take also sets the fingerprint's overflow bit in
    /// the bucket it takes from \[overflow.W6\].
    pub(crate) fn remove_in_older(&self, p: Probe) -> bool {
        self.remove_marking(p, true)
    }

    fn remove_marking(&self, p: Probe, older: bool) -> bool {
        #[cfg(cuckoo_loom)]
        let older = older && !self.broken.older_remove_unmarked;
        #[cfg(cuckoo_loom)]
        if self.broken.remove_unlocked {
            return self.remove_unlocked(p);
        }
        let mut locks = self.lock_pair(p.primary, p.alternate);
        let buckets = if p.alternate == p.primary {
            &[p.primary][..]
        } else {
            &[p.primary, p.alternate][..]
        };
        let watch = self.copy.watch();
        // While a copy runs, a copy in a bucket the copier has read is taken first: the one
        // left in the other bucket is then read later (or was read already), and no extra is
        // logged for it.
        let reordered;
        let buckets = match watch {
            Some(watch)
                if buckets.len() == 2 && watch.has_read(p.alternate) && self.copy.reorders() =>
            {
                reordered = [p.alternate, p.primary];
                &reordered[..]
            }
            #[cfg(cuckoo_loom)]
            _ if buckets.len() == 2 && self.broken.remove_alternate_first_unmarked => {
                reordered = [p.alternate, p.primary];
                &reordered[..]
            }
            _ => buckets,
        };
        for &bucket in buckets {
            let word = &self.buckets[bucket];
            // ORDERING: Relaxed; under the stripe lock [stripe.W1].
            let current = L::load(word, Ordering::Relaxed);
            let matches = matching_lanes::<L>(current, p.fp);
            if matches != 0 {
                #[cfg(cuckoo_loom)]
                if self.broken_take(&mut locks, p, bucket, current, matches) {
                    return true;
                }
                let bit = if older {
                    L::overflow_bit(p.fp)
                } else {
                    self.alternate_take_bit(p, bucket)
                };
                let cleared = with_lane::<L>(current, first_lane::<L>(matches), 0) | bit;
                locks.take_one(self.version_stripe(p), self.stripe_of(bucket), || {
                    // ORDERING: Relaxed; [stripe.W3] ordered after the odd version by the Release
                    // fence of the window.
                    L::store(word, cleared, Ordering::Relaxed);
                });
                // A take from the second bucket tried found no copy in the first: the pair
                // holds no other copy outside this bucket that a copier could have missed.
                if let Some(watch) = watch {
                    if bucket == buckets[0] && buckets.len() == 2 {
                        let other = buckets[1];
                        // ORDERING: Relaxed; under the other bucket's stripe lock [stripe.W1].
                        let word = L::load(&self.buckets[other], Ordering::Relaxed);
                        if matching_lanes::<L>(word, p.fp) != 0 {
                            self.copy.after_take(watch, bucket, other, p.fp);
                        }
                    }
                }
                return true;
            }
        }
        false
    }

    /// The overflow bit a take of `p`'s fingerprint from `bucket` sets there \[overflow.W4\]:
    /// `bit(fp)` when `bucket` is the alternate and the primary holds the fingerprint too (the
    /// copy protocol reordered the take), else 0. Called under the locks of both buckets.
    #[inline]
    fn alternate_take_bit(&self, p: Probe, bucket: usize) -> u64 {
        if L::OVERFLOW == 0 || bucket == p.primary {
            return 0;
        }
        #[cfg(cuckoo_loom)]
        if self.broken.remove_alternate_first_unmarked {
            return 0;
        }
        // ORDERING: Relaxed; under the primary's stripe lock [stripe.W1].
        let primary = L::load(&self.buckets[p.primary], Ordering::Relaxed);
        if matching_lanes::<L>(primary, p.fp) != 0 {
            L::overflow_bit(p.fp)
        } else {
            0
        }
    }

    /// Reads every bucket word in order, `chunk` buckets at a time, handing each chunk's
    /// values to `sink`, while readers and writers run (`copy`); returns the extras the
    /// copy's snapshot must add, or the sink's error.
    ///
    /// A copy of the words plus the extras holds every key inserted before the call and not
    /// removed.
    pub(crate) fn copy_out<E>(
        &self,
        chunk: usize,
        mut sink: impl FnMut(&[u64]) -> Result<(), E>,
    ) -> Result<Vec<Extra>, E> {
        let chunk = chunk.max(1);
        let mut values = Vec::with_capacity(chunk.min(self.buckets.len()));
        let (result, extras) = self.copy.run(&self.stripes, |chunks| {
            for (index, words) in self.buckets.chunks(chunk).enumerate() {
                let end = index * chunk + words.len();
                chunks.read(end, || {
                    values.clear();
                    // ORDERING: Acquire; [copy.C2] with the chunk's announcement fenced before.
                    values.extend(words.iter().map(|w| L::load(w, Ordering::Acquire)));
                });
                sink(&values)?;
            }
            Ok(())
        });
        result.map(|()| extras)
    }

    /// The copy protocol's state, for loom models that break one of its steps.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn copy_state_mut(&mut self) -> &mut CopyState {
        &mut self.copy
    }

    /// Empties the table: a take \[stripe.W3\] of everything, under every stripe lock (taken in
    /// ascending order \[stripe.W1\]) with every stripe's version odd.
    pub(crate) fn clear(&self) {
        #[cfg(cuckoo_loom)]
        if self.broken.clear_unversioned {
            return self.clear_unversioned();
        }
        let mut locks: Vec<StripeLock<'_>> = self.stripes.iter().map(StripeLock::acquire).collect();
        for lock in &mut locks {
            lock.begin_take_unfenced();
        }
        // ORDERING: Release fence; [stripe.W3] orders every odd version above before the bucket
        // stores below, as `begin_take` does for one stripe.
        fence(Ordering::Release);
        for word in self.buckets.iter() {
            // ORDERING: Relaxed; [stripe.W3] ordered by the fence above; every stripe is held.
            L::store(word, 0, Ordering::Relaxed);
        }
        for lock in &mut locks {
            lock.end_take();
            lock.reset_count();
        }
    }

    /// Every stored fingerprint as `(bucket, word)` pairs of non-empty buckets; for tests that
    /// compare whole tables.
    #[cfg(all(test, not(cuckoo_loom)))]
    pub(crate) fn words(&self) -> Vec<(usize, u64)> {
        self.buckets
            .iter()
            .enumerate()
            // ORDERING: Relaxed; tests call this with no writer running.
            .map(|(i, w)| (i, L::load(w, Ordering::Relaxed)))
            .filter(|&(_, w)| w != 0)
            .collect()
    }

    /// `remove` without its window \[stripe.W3\]: locked, a Release store, no version change. The
    /// broken variant the net-move stress test must catch (the loom models use
    /// `Broken::remove_unversioned`): a put of `f` into one bucket and this take of an `f` from
    /// the other move a copy with the stripe word unchanged.
    #[cfg(all(test, not(cuckoo_loom)))]
    pub(crate) fn remove_unversioned(&self, p: Probe) -> bool {
        let mut locks = self.lock_pair(p.primary, p.alternate);
        for bucket in [p.primary, p.alternate] {
            let word = &self.buckets[bucket];
            // ORDERING: Relaxed; under the stripe lock.
            let current = L::load(word, Ordering::Relaxed);
            let matches = matching_lanes::<L>(current, p.fp);
            if matches != 0 {
                let cleared = with_lane::<L>(current, first_lane::<L>(matches), 0);
                // ORDERING: Release with no window: deliberately broken.
                L::store(word, cleared, Ordering::Release);
                locks.get(self.stripe_of(bucket)).remove_fingerprint();
                return true;
            }
        }
        false
    }

    /// `insert` with [`stripe::Broken::insert_unlocked`] or
    /// [`stripe::Broken::unique_check_then_act`] set; `None` if neither applies.
    #[cfg(cuckoo_loom)]
    fn broken_insert(&self, p: Probe, unique: bool) -> Option<Result<Inserted, InsertFailure>> {
        if self.broken.insert_unlocked && !unique {
            for bucket in [p.primary, p.alternate] {
                let word = &self.buckets[bucket];
                // ORDERING: Relaxed, with no lock: deliberately broken.
                let current = L::load(word, Ordering::Relaxed);
                let free = empty_lanes::<L>(current);
                if free != 0 {
                    let placed = with_lane::<L>(current, first_lane::<L>(free), p.fp);
                    // ORDERING: Relaxed, with no lock: deliberately broken.
                    L::store(word, placed, Ordering::Relaxed);
                    return Some(Ok(Inserted::Added));
                }
            }
            return Some(Err(InsertFailure::Full));
        }
        if self.broken.unique_check_then_act && unique {
            if self.count(p) > 0 {
                return Some(Ok(Inserted::AlreadyPresent));
            }
            return Some(self.insert(p, false));
        }
        None
    }

    /// `remove` with no stripe lock ([`stripe::Broken::remove_unlocked`]).
    #[cfg(cuckoo_loom)]
    fn remove_unlocked(&self, p: Probe) -> bool {
        for bucket in [p.primary, p.alternate] {
            let word = &self.buckets[bucket];
            // ORDERING: Relaxed, with no lock: deliberately broken.
            let current = L::load(word, Ordering::Relaxed);
            let matches = matching_lanes::<L>(current, p.fp);
            if matches != 0 {
                let cleared = with_lane::<L>(current, first_lane::<L>(matches), 0);
                // ORDERING: Relaxed, with no lock: deliberately broken.
                L::store(word, cleared, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// The take of `remove` with a broken window ([`stripe::Broken::take_relaxed`],
    /// [`stripe::Broken::take_unfenced`], [`stripe::Broken::remove_unversioned`]); false if
    /// none is set and the real take must run.
    #[cfg(cuckoo_loom)]
    fn broken_take(
        &self,
        locks: &mut PairLock<'_>,
        p: Probe,
        bucket: usize,
        current: u64,
        matches: u64,
    ) -> bool {
        let broken = self.broken;
        if !(broken.take_relaxed || broken.take_unfenced || broken.remove_unversioned) {
            return false;
        }
        let word = &self.buckets[bucket];
        let cleared = with_lane::<L>(current, first_lane::<L>(matches), 0);
        if broken.take_unfenced {
            let version = self.version_stripe(p);
            locks.get(version).begin_take_unfenced();
            // ORDERING: Relaxed, in a window with no Release fence: deliberately broken.
            L::store(word, cleared, Ordering::Relaxed);
            locks.get(version).end_take();
        } else {
            let order = if broken.take_relaxed {
                Ordering::Relaxed
            } else {
                Ordering::Release
            };
            // ORDERING: Relaxed or Release with no window: deliberately broken.
            L::store(word, cleared, order);
        }
        locks.get(self.stripe_of(bucket)).remove_fingerprint();
        true
    }

    /// `clear` with no windows ([`stripe::Broken::clear_unversioned`]).
    #[cfg(cuckoo_loom)]
    fn clear_unversioned(&self) {
        let mut locks: Vec<StripeLock<'_>> = self.stripes.iter().map(StripeLock::acquire).collect();
        for word in self.buckets.iter() {
            // ORDERING: Release with no window: deliberately broken.
            L::store(word, 0, Ordering::Release);
        }
        for lock in &mut locks {
            lock.reset_count();
        }
    }

    /// Stores `fp` in `slot` of `bucket` directly, counting it: setup for tests.
    #[cfg(test)]
    pub(crate) fn set_slot(&self, bucket: usize, slot: usize, fp: u64) {
        let mut locks = self.lock_pair(bucket, bucket);
        let word = &self.buckets[bucket];
        // ORDERING: Relaxed; under the stripe lock.
        let current = L::load(word, Ordering::Relaxed);
        let old = crate::fingerprint::lane::<L>(current, slot);
        L::store(word, with_lane::<L>(current, slot, fp), Ordering::Relaxed);
        let lock = locks.get(self.stripe_of(bucket));
        if old != 0 {
            lock.remove_fingerprint();
        }
        if fp != 0 {
            lock.add_fingerprint();
        }
    }
}

#[cfg(all(test, not(cuckoo_loom)))]
mod tests;

#[cfg(all(test, not(cuckoo_loom)))]
mod net_move_stress;

#[cfg(all(test, cuckoo_loom))]
pub(crate) mod loom_tests;
