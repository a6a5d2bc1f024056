//! Stripe words: one atomic word per stripe holding a writer lock, a displacement version and
//! a fingerprint count.
//!
//! # Synchronization protocol
//!
//! Bucket `b` belongs to stripe `b & mask`. A fingerprint `f` in bucket `b` has the bucket
//! *pair* `{b, alt(b, f)}`, and the pair's *version stripe* is the stripe of the smaller index.
//!
//! Stripe word layout: bit 0 = `LOCKED`; bits 1..=32 = version (odd while a displacement is
//! in flight); bits 33..=63 = number of fingerprints stored in the stripe's buckets.
//!
//! - **\[W1\]** A writer locks a stripe with a compare-exchange that sets `LOCKED` (Acquire),
//!   after spinning on plain loads (test-and-test-and-set with backoff). Two stripes are
//!   taken in ascending index order; a stripe shared by both buckets is taken once.
//! - **\[W2\]** Every store to a bucket word happens while holding the lock of that bucket's
//!   stripe. A hop's stores are Relaxed (the Release fence of \[W3\] orders them); every other
//!   bucket store (insert, remove, clear) is Release, for \[I4\].
//! - **\[W3\]** A displacement (hop) of `f` from bucket `s` to bucket `d` holds the stripes of
//!   `s` and `d`, which include the version stripe `min(s, d)` of `f`'s pair. It makes that
//!   version odd (Relaxed store, then `fence(Release)`), stores `f` into `d`, *then* clears it
//!   from `s`, and makes the version even again in the unlock store.
//! - **\[W4\]** Unlock is one Release store of the whole word (lock bit clear, new version,
//!   new count), written by the lock holder, the only writer of a locked word.
//! - **\[R1\]** A reader of fingerprint `f` with buckets `{p, a}` loads the version of stripe
//!   `min(p, a)` with Acquire.
//! - **\[R2\]** It loads both bucket words (Relaxed). A match answers "present" at once: a
//!   fingerprint seen in a bucket word really was stored there at that instant.
//! - **\[R3\]** On no match it issues `fence(Acquire)` and reloads the stripe word (Relaxed).
//!   An unchanged word with an even version means no hop of `f`'s pair overlapped the bucket
//!   loads, so "absent" is the truth at some instant during the call. (The whole word is
//!   compared, not only the version: stricter, so never less safe, and cheaper; a plain
//!   insert or remove in the stripe during the read only costs a retry.) Otherwise it
//!   retries; after a bounded number of attempts it answers "present" (a false positive is
//!   allowed, a hang is not).
//!
//! Invariants:
//! - **\[I1\]** No false negatives: a fingerprint stored before a lookup begins and not removed
//!   is seen by it. The only way to miss it is to load one bucket before a hop's store to it
//!   and the other after the hop's store to it (copy first, clear second, so that a reader
//!   which sees the intermediate state finds the fingerprint twice rather than not at all, but
//!   the version is what guarantees \[I1\]). A reader whose bucket load read a hop's store, or
//!   any later store to that bucket, synchronizes through its own Acquire fence \[R3\] with the
//!   hop's Release fence \[W3\], so its version reload sees the hop's odd version or a later one.
//! - **\[I2\]** Pair coverage: all hops of `f` stay within its pair (`alt` is an involution), so
//!   the version stripe of the reader's pair is exactly the version every relevant hop bumps.
//! - **\[I3\]** A word's count is the number of fingerprints in its stripe's buckets whenever the
//!   word is unlocked; `len` is the sum of the counts.
//! - **\[I4\]** Plain inserts and removes do not bump versions: each is one atomic bucket store,
//!   which is its own linearization point, and neither can hide another key's fingerprint. But
//!   their stores must be Release: a reader's bucket load may read an insert or remove made
//!   *after* a hop in the same bucket (by a writer that locked only that bucket's stripe, after
//!   the hop's unlock). Only a Release store carries the hop's odd version (through the
//!   writer's Acquire lock) to the reader's Acquire fence; a Relaxed one lets the reader
//!   validate against the old version and miss the hop (a write-read-causality race, which
//!   `loom_i4_negative_control_relaxed_plain_store_hides_a_hop` shows).
//!
//! The models in `table::loom_tests` check these steps, each beside a broken variant that
//! loom must catch.

use crate::sync::{fence, AtomicU64, Backoff, Ordering};

/// The writer lock bit.
const LOCKED: u64 = 1;
/// One step of the version field.
const VERSION_ONE: u64 = 1 << 1;
/// The version field (32 bits).
const VERSION_MASK: u64 = 0xFFFF_FFFF << 1;
/// One step of the count field.
const COUNT_ONE: u64 = 1 << 33;

/// Whether a displacement is in flight in this stripe (the version is odd).
#[inline(always)]
pub(crate) fn is_moving(word: u64) -> bool {
    word & VERSION_ONE != 0
}

/// Whether a reader's two loads of a stripe word, `before` and `after` its bucket loads,
/// prove that no hop overlapped them \[R3\]: `before` was not mid-hop and the word did not
/// change at all.
///
/// Comparing whole words is stricter than comparing versions (a plain insert or remove in
/// the stripe, or a writer taking its lock, also changes the word and costs the reader a
/// retry), but it is three instructions on the lookup path instead of six, and a writer
/// touches a given stripe during a given lookup's few nanoseconds rarely.
#[inline(always)]
pub(crate) fn unchanged(before: u64, after: u64) -> bool {
    (before ^ after) | (before & VERSION_ONE) == 0
}

/// The fingerprint count of a stripe word.
#[inline(always)]
pub(crate) fn count(word: u64) -> u64 {
    word >> 33
}

/// `word` with its version advanced by one step, wrapping within the version field.
#[inline(always)]
fn bump_version(word: u64) -> u64 {
    (word & !VERSION_MASK) | (word.wrapping_add(VERSION_ONE) & VERSION_MASK)
}

/// A held stripe lock. Unlocks (one Release store, \[W4\]) on drop.
#[derive(Debug)]
pub(crate) struct StripeLock<'a> {
    word: &'a AtomicU64,
    /// The word as this holder will publish it; `LOCKED` is set while held.
    value: u64,
}

impl<'a> StripeLock<'a> {
    /// Takes the lock \[W1\].
    #[inline]
    pub(crate) fn acquire(word: &'a AtomicU64) -> Self {
        let mut backoff = Backoff::default();
        loop {
            // ORDERING: Relaxed; the test half of test-and-test-and-set, ordering comes from
            // the compare-exchange below.
            let current = word.load(Ordering::Relaxed);
            if current & LOCKED == 0 {
                // ORDERING: Acquire on success; [W1] pairs with the Release unlock [W4] of the
                // previous holder, so its bucket stores are visible to us.
                if word
                    .compare_exchange_weak(
                        current,
                        current | LOCKED,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    return StripeLock {
                        word,
                        value: current | LOCKED,
                    };
                }
            }
            backoff.snooze();
        }
    }

    /// Makes the version odd before a hop's bucket stores \[W3\].
    #[inline]
    pub(crate) fn begin_move(&mut self) {
        debug_assert!(!is_moving(self.value));
        self.value = bump_version(self.value);
        // ORDERING: Relaxed store, ordered before the hop's bucket stores by the Release fence
        // that follows; [W3] pairs with the reader's Acquire fence [R3].
        self.word.store(self.value, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// `begin_move` without its Release fence: the broken variant of \[W3\] for a loom
    /// negative control.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn begin_move_unfenced(&mut self) {
        self.value = bump_version(self.value);
        // ORDERING: deliberately unfenced; loom must catch the reader that misses the hop.
        self.word.store(self.value, Ordering::Relaxed);
    }

    /// Makes the version even again; published by the unlock store \[W4\].
    #[inline]
    pub(crate) fn end_move(&mut self) {
        debug_assert!(is_moving(self.value));
        self.value = bump_version(self.value);
    }

    /// Counts one fingerprint more in this stripe's buckets \[I3\].
    #[inline]
    pub(crate) fn add_fingerprint(&mut self) {
        self.value += COUNT_ONE;
    }

    /// Counts one fingerprint fewer in this stripe's buckets \[I3\].
    #[inline]
    pub(crate) fn remove_fingerprint(&mut self) {
        debug_assert!(count(self.value) > 0);
        self.value -= COUNT_ONE;
    }

    /// Sets the count to zero (`clear`) \[I3\].
    #[inline]
    pub(crate) fn reset_count(&mut self) {
        self.value &= COUNT_ONE - 1;
    }
}

impl Drop for StripeLock<'_> {
    #[inline]
    fn drop(&mut self) {
        debug_assert!(!is_moving(self.value), "unlocking in the middle of a hop");
        // ORDERING: Release; [W4] publishes this holder's bucket stores (and the even version
        // of a finished hop) to the next locker [W1] and to readers [R1].
        self.word.store(self.value & !LOCKED, Ordering::Release);
    }
}

/// The locks of the stripes of one or two buckets, taken in ascending order \[W1\].
#[derive(Debug)]
pub(crate) struct PairLock<'a> {
    low: (usize, StripeLock<'a>),
    high: Option<(usize, StripeLock<'a>)>,
}

impl<'a> PairLock<'a> {
    /// Locks stripes `a` and `b` of `stripes`, lower index first, once if they are equal.
    #[inline]
    pub(crate) fn acquire(stripes: &'a [AtomicU64], a: usize, b: usize) -> Self {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let low = (lo, StripeLock::acquire(&stripes[lo]));
        let high = (hi != lo).then(|| (hi, StripeLock::acquire(&stripes[hi])));
        PairLock { low, high }
    }

    /// The held lock of stripe `index`, which must be one of the two.
    #[inline]
    pub(crate) fn get(&mut self, index: usize) -> &mut StripeLock<'a> {
        if self.low.0 == index {
            return &mut self.low.1;
        }
        match &mut self.high {
            Some((i, lock)) if *i == index => lock,
            _ => panic!("stripe {index} is not held by this pair lock"),
        }
    }
}
