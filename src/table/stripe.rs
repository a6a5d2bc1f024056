//! Stripe words: one atomic word per stripe holding a writer lock, a version and a
//! fingerprint count.
//!
//! # Synchronization protocol
//!
//! Bucket `b` belongs to stripe `b & mask`. A fingerprint `f` in bucket `b` has the bucket
//! *pair* `{b, alt(b, f)}` (`alt` is an involution, so both buckets name the same pair), and
//! the pair's *version stripe* is the stripe of the smaller bucket index. That stripe need not
//! be the lower of the pair's two stripe indices (with 4 stripes, buckets 3 and 4 have stripes
//! 3 and 0, and the version stripe is 3).
//!
//! Stripe word layout: bit 0 = `LOCKED`; bits 1..=40 = version (odd while a take is in
//! flight); bits 41..=63 = number of fingerprints stored in the stripe's buckets.
//!
//! Writers store to bucket words in two kinds of step. A *put* stores a fingerprint into a
//! free slot (`insert`, `insert_unique`). A *take* stores a word with a fingerprint cleared: a
//! hop's clear, a `remove`, `clear`. Puts only add copies, so only takes can make a copy
//! vanish from under a reader, and every take is versioned.
//!
//! - **\[stripe.W1\]** A writer locks a stripe with a compare-exchange that sets `LOCKED` (Acquire),
//!   after spinning on plain loads (test-and-test-and-set with backoff). Two stripes are
//!   taken in ascending index order; a stripe shared by both buckets is taken once.
//! - **\[stripe.W2\]** Every store to a bucket word happens while holding the lock of that bucket's
//!   stripe. A put's store is Release (\[stripe.I4\]); a take's stores are Relaxed, ordered by the
//!   fence of \[stripe.W3\].
//! - **\[stripe.W3\]** Every take of `f` from a bucket of pair `{x, y}` runs inside a *window* on the
//!   pair's version stripe, whose lock it holds: it makes the version odd (Relaxed store, then
//!   `fence(Release)`), makes its bucket stores, and makes the version even again in the unlock
//!   store. A hop of `f` from `s` to `d` holds the stripes of both and, inside its window,
//!   stores `f` into `d` first and clears it from `s` second. A remove holds the stripes of its
//!   key's two buckets and clears one copy. `clear` holds every stripe, makes every version
//!   odd, issues one fence, and zeroes every bucket.
//! - **\[stripe.W4\]** Unlock is one Release store of the whole word (lock bit clear, new version,
//!   new count), written by the lock holder, the only writer of a locked word.
//! - **\[stripe.R1\]** A reader of fingerprint `f` with buckets `{p, a}` loads its version stripe's
//!   word with Acquire.
//! - **\[stripe.R2\]** It loads both bucket words (Relaxed). A match answers "present" at once: a
//!   fingerprint seen in a bucket word really was stored there at that instant.
//! - **\[stripe.R3\]** On no match it issues `fence(Acquire)` and reloads the stripe word (Relaxed).
//!   The same word with an even version means no take of `f`'s pair overlapped the bucket
//!   loads (below), so "absent" is the truth. The whole word is compared, not only the
//!   version: stricter, so never less safe, and cheaper; a put or a lock in the stripe during
//!   the read costs a retry. Otherwise it retries; after a bounded number of attempts it
//!   answers "present" (a false positive is allowed, a hang is not).
//!
//! Invariants:
//! - **\[stripe.I1\]** No false negatives: a key whose insert happened before a lookup began, and
//!   which was not removed (by its own remove or by a `clear`), is reported present (argued
//!   below).
//! - **\[stripe.I2\]** Pair coverage: a take of `f` from bucket `b` opens its window on the version
//!   stripe of `b`'s pair for `f`, which is the pair every lookup of a key with fingerprint `f`
//!   and bucket `b` validates against. (A hop's two buckets, a remove's two buckets and a
//!   lookup's two buckets are each one pair.)
//! - **\[stripe.I3\]** A word's count is the number of fingerprints in its stripe's buckets whenever
//!   the word is unlocked; `len` is the sum of the counts.
//! - **\[stripe.I4\]** A put's store is Release: a reader's bucket load may read a put made *after* a
//!   take in the same bucket, by a writer that locked only that bucket's stripe. The Release
//!   store carries the take's odd version (through that writer's Acquire lock) to the reader's
//!   Acquire fence; a Relaxed one lets the reader validate against the old version and miss
//!   the take (`loom_stripe_control_put_relaxed`).
//!
//! # Why a validated "absent" misses no key (\[stripe.I1\])
//!
//! Premises. Each bucket word's modification order is the order in which its stripe's lock
//! holders stored to it (\[stripe.W2\]); every store rewrites the current word, changing one lane (a
//! put fills an empty lane, a take clears a lane holding its fingerprint), except `clear`,
//! which zeroes it. And the filter's contract for removes: a key is removed only after its
//! insert returned, only as often as it was inserted, and not after a `clear` that followed
//! its insert (`clear` removes every key).
//!
//! A lookup of `f` in pair `{p, a}` that answers "absent" read stripe-word stores `σ1` (\[stripe.R1\])
//! and then `σ2` (\[stripe.R3\]) with equal values and an even version. Consider any take window `W`
//! on that version stripe.
//!
//! 1. `W` did not open between `σ1` and `σ2`: opening bumps the version, versions only grow
//!    (modulo 2^40, see below), so `σ2` would differ from `σ1`. Nor is `σ1` inside `W`: its
//!    version is even, so it is not a `begin_take` store. So `W` closed at or before `σ1`,
//!    or opened after `σ2`.
//! 2. Closed at or before `σ1`: `σ1` is an unlock (Release) or a lock's compare-exchange (a
//!    read-modify-write, which continues the release sequence of the unlock it read). Each is
//!    made by `W`'s holder or a later one, and lock holders are chained by their unlocks and
//!    Acquire locks, so `W` happens before the unlock whose release sequence `σ1` is in, and
//!    the Acquire load \[stripe.R1\] makes `W` happen before the bucket loads: they see `W`'s stores
//!    or later ones (coherence).
//! 3. Opened after `σ2`: suppose a bucket load read a store of `W`, or a store that follows
//!    one of `W`'s in that bucket's order. `W` holds that bucket's stripe (\[stripe.W2\]); its odd
//!    version store is sequenced before its Release fence and before its unlock of that
//!    stripe, and every later store to the bucket is made by a later holder of the stripe,
//!    after its Acquire lock, as a Release store (a put) or after a Release fence (a take,
//!    whatever pair it versions). \[stripe.R3\]'s Acquire fence synchronizes with that store or fence,
//!    so `W`'s odd version store happens before the reload, which then reads it or a later
//!    value, not `σ2`: a contradiction. So the bucket loads see none of `W`'s stores.
//!
//! So the reader's *view* (for each of its two buckets, the stores up to the one its load
//! read) holds each take of the pair whole or not at all, and by the premises the copies of
//! `f` in the view are the net of the stores in it that change an `f` lane: a hop in the view
//! moved a copy within the pair (net zero), each remove in the view took one, each put in the
//! view added one, and a `clear` in the view erased everything before it. A key `K` inserted
//! before the lookup, and not removed, has its put in the view (coherence) after every `clear`
//! in the view (a later `clear` would have removed `K`). Each remove in the view happened
//! before the lookup, and so did the insert of the key it removed, after the last `clear` in
//! the view (the contract), so that put is in the view too and counts. The view therefore
//! holds at least one copy more than the removes took: the lookup finds `f`. The same view
//! makes a validated `count` at least the number of times the key was inserted and not
//! removed.
//!
//! **Net moves.** Every writer path is a sequence of puts and takes: `insert` (one put, into
//! the primary under its stripe alone, or into either bucket under both), `insert_unique` (a
//! put or nothing, decided under both locks), a path execution (hops), a failed insert (the
//! hops it completed), `remove` (one take), `clear` (a take of everything), and the guard's
//! create-then-update path (a put, then a remove). Any combination that relocates an existing
//! copy (a put in one bucket of the pair, then a take from the other, by one writer or two)
//! contains a take of the pair, and the argument above covers it: a reader that overlaps the
//! take retries, whatever else happened to the stripe word in between.
//!
//! **Version wrap.** The version has 40 bits, and each window advances it by two: `σ1` and
//! `σ2` show equal versions across windows only if 2^39 windows of one stripe ran while the
//! reader sat between two loads a few nanoseconds apart, and the count field also came back
//! to its value. Each window is a lock hand-off on one cache line: a thread removing in one
//! stripe as fast as it can opens some 10^7 to 10^8 windows a second, so a wrap takes hours
//! (and nine minutes even at an unreachable 10^9 a second). Only a reader thread suspended
//! for that long between those two loads (a debugger, `SIGSTOP`) could be fooled; that is
//! accepted rather than spending a second word per stripe.
//!
//! The models in `table::loom_tests` check these steps, each beside a broken variant that
//! loom must catch.

use crate::sync::{fence, AtomicU64, Backoff, Ordering};

/// The writer lock bit.
const LOCKED: u64 = 1;
/// One step of the version field.
const VERSION_ONE: u64 = 1 << 1;
/// The version field: 40 bits, bits 1..=40.
const VERSION_MASK: u64 = ((1 << 40) - 1) << 1;
/// One step of the count field, bits 41..=63.
const COUNT_SHIFT: u32 = 41;
const COUNT_ONE: u64 = 1 << COUNT_SHIFT;
/// The most fingerprints one stripe's count can hold (23 bits): a table may give a stripe at
/// most this many slots.
pub(crate) const MAX_STRIPE_SLOTS: usize = (1 << (64 - COUNT_SHIFT)) - 1;

/// The stripe protocol broken on purpose, one step per field: the loom models' negative
/// controls (`loom_stripe_control_<field>`). The table's operations consult it at the step
/// each field breaks.
#[cfg(cuckoo_loom)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Broken {
    /// \[stripe.R3\] skipped: a lookup answers "absent" without checking the version.
    pub(crate) lookup_unvalidated: bool,
    /// \[stripe.R3\] without its Acquire fence: the version reload may pass the bucket loads.
    pub(crate) lookup_unfenced: bool,
    /// \[stripe.R1\] with a Relaxed load: a version does not carry a hop's bucket stores.
    pub(crate) version_load_relaxed: bool,
    /// \[stripe.R3\] accepts an unchanged word without checking that its version is even.
    pub(crate) odd_version_ignored: bool,
    /// \[stripe.I2\] a lookup validates against its primary bucket's stripe, not the pair's.
    pub(crate) lookup_primary_stripe: bool,
    /// \[stripe.W3\] a hop opens its window with no Release fence.
    pub(crate) hop_unfenced: bool,
    /// \[stripe.I2\] a hop bumps the version of the lower of its two stripe locks, not the
    /// pair's version stripe.
    pub(crate) hop_versions_lower_lock: bool,
    /// \[stripe.W2\] a remove clears a copy with no stripe lock.
    pub(crate) remove_unlocked: bool,
    /// \[stripe.W2\] an insert stores into a free slot with no stripe lock.
    pub(crate) insert_unlocked: bool,
    /// `insert_unique` checks with a `count` outside the locks of its insert.
    pub(crate) unique_check_then_act: bool,
    /// \[stripe.I4\] a plain put stores Relaxed.
    pub(crate) put_relaxed: bool,
    /// \[stripe.W3\] a remove opens no window and stores Relaxed.
    pub(crate) take_relaxed: bool,
    /// \[stripe.W3\] a remove opens its window with no Release fence.
    pub(crate) take_unfenced: bool,
    /// \[stripe.W3\] a remove opens no window (a Release store, no version change).
    pub(crate) remove_unversioned: bool,
    /// \[stripe.W3\] `clear` zeroes every bucket with no window.
    pub(crate) clear_unversioned: bool,
    /// \[stripe.R3\] skipped: `count` answers from one unvalidated read.
    pub(crate) count_unvalidated: bool,
    /// `count`'s fallback counts without the pair's locks.
    pub(crate) count_fallback_unlocked: bool,
    /// Lookups read two lines, never one (for the models of the two-line protocol).
    pub(crate) two_lines_only: bool,
    /// \[overflow.R1\] the one-line load is Relaxed.
    pub(crate) one_line_relaxed: bool,
    /// \[overflow.W2\] a put into the alternate sets no bit in the primary.
    pub(crate) alternate_put_unmarked: bool,
    /// \[overflow.W2\] a put into the alternate sets the primary's bit after the put.
    pub(crate) alternate_put_before_bit: bool,
    /// \[overflow.W3\] a hop clears its source slot, then sets the bit in a second store.
    pub(crate) hop_bit_separate: bool,
    /// \[overflow.W4\] a remove takes from the alternate first, setting no bit.
    pub(crate) remove_alternate_first_unmarked: bool,
    /// \[overflow.W2\] a unique insert that finds a copy outside its primary sets no bit.
    pub(crate) unique_uncovered: bool,
    /// \[overflow.W6\] a remove in an older table sets no bit.
    pub(crate) older_remove_unmarked: bool,
}

/// An unlocked stripe word at version 0 counting `n` fingerprints \[stripe.I3\].
#[inline]
pub(crate) fn with_count(n: u64) -> u64 {
    debug_assert!(n <= MAX_STRIPE_SLOTS as u64);
    n << COUNT_SHIFT
}

/// Whether a take is in flight in this stripe (the version is odd).
#[inline(always)]
pub(crate) fn is_taking(word: u64) -> bool {
    word & VERSION_ONE != 0
}

/// Whether a reader's two loads of a stripe word, `before` and `after` its bucket loads,
/// prove that no take overlapped them \[stripe.R3\]: `before` was not mid-take and the word did not
/// change at all.
///
/// Comparing whole words is stricter than comparing versions (a plain insert in the stripe,
/// or a writer taking its lock, also changes the word and costs the reader a retry), but it
/// is three instructions on the lookup path instead of six, and a writer touches a given
/// stripe during a given lookup's few nanoseconds rarely.
#[inline(always)]
pub(crate) fn unchanged(before: u64, after: u64) -> bool {
    (before ^ after) | (before & VERSION_ONE) == 0
}

/// Whether a writer holds the lock of this stripe word (for the loom census).
#[cfg(all(test, cuckoo_loom))]
pub(crate) fn is_locked(word: u64) -> bool {
    word & LOCKED != 0
}

/// The fingerprint count of a stripe word.
#[inline(always)]
pub(crate) fn count(word: u64) -> u64 {
    word >> COUNT_SHIFT
}

/// `word` with its version advanced by one step, wrapping within the version field.
#[inline(always)]
fn bump_version(word: u64) -> u64 {
    advance_version(word, 1)
}

/// `word` with its version advanced by `steps`, wrapping within the version field.
#[inline(always)]
pub(crate) fn advance_version(word: u64, steps: u64) -> u64 {
    (word & !VERSION_MASK) | (word.wrapping_add(steps.wrapping_mul(VERSION_ONE)) & VERSION_MASK)
}

/// How many version steps lead from `from` to `to`, modulo the field's width.
#[cfg(all(test, not(cuckoo_loom)))]
pub(crate) fn version_distance(from: u64, to: u64) -> u64 {
    ((to & VERSION_MASK).wrapping_sub(from & VERSION_MASK) & VERSION_MASK) >> 1
}

/// A held stripe lock. Unlocks (one Release store, \[stripe.W4\]) on drop.
#[derive(Debug)]
pub(crate) struct StripeLock<'a> {
    word: &'a AtomicU64,
    /// The word as this holder will publish it; `LOCKED` is set while held.
    value: u64,
}

impl<'a> StripeLock<'a> {
    /// Takes the lock \[stripe.W1\].
    #[inline]
    pub(crate) fn acquire(word: &'a AtomicU64) -> Self {
        let mut backoff = Backoff::default();
        loop {
            // ORDERING: Relaxed; the test half of test-and-test-and-set, ordering comes from
            // the compare-exchange below.
            let current = word.load(Ordering::Relaxed);
            if current & LOCKED == 0 {
                // ORDERING: Acquire on success; [stripe.W1] pairs with the Release unlock [stripe.W4] of the
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

    /// Makes the version odd before a take's bucket stores \[stripe.W3\].
    #[inline]
    pub(crate) fn begin_take(&mut self) {
        debug_assert!(!is_taking(self.value));
        self.value = bump_version(self.value);
        // ORDERING: Relaxed store, ordered before the take's bucket stores by the Release
        // fence that follows; [stripe.W3] pairs with the reader's Acquire fence [stripe.R3].
        self.word.store(self.value, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Makes the version odd with no fence: for `clear`, which opens every stripe's window
    /// and then issues one fence for all of them \[stripe.W3\].
    #[inline]
    pub(crate) fn begin_take_unfenced(&mut self) {
        debug_assert!(!is_taking(self.value));
        self.value = bump_version(self.value);
        // ORDERING: Relaxed; the caller issues the Release fence of [stripe.W3] before its first
        // bucket store. Without that fence this is the broken variant a loom negative control
        // uses.
        self.word.store(self.value, Ordering::Relaxed);
    }

    /// Makes the version even again; published by the unlock store \[stripe.W4\].
    #[inline]
    pub(crate) fn end_take(&mut self) {
        debug_assert!(is_taking(self.value));
        self.value = bump_version(self.value);
    }

    /// Counts one fingerprint more in this stripe's buckets \[stripe.I3\].
    #[inline]
    pub(crate) fn add_fingerprint(&mut self) {
        self.value += COUNT_ONE;
    }

    /// Counts one fingerprint fewer in this stripe's buckets \[stripe.I3\].
    #[inline]
    pub(crate) fn remove_fingerprint(&mut self) {
        debug_assert!(count(self.value) > 0);
        self.value -= COUNT_ONE;
    }

    /// Sets the count to zero (`clear`) \[stripe.I3\].
    #[inline]
    pub(crate) fn reset_count(&mut self) {
        self.value &= COUNT_ONE - 1;
    }
}

impl Drop for StripeLock<'_> {
    #[inline]
    fn drop(&mut self) {
        debug_assert!(!is_taking(self.value), "unlocking in the middle of a take");
        // ORDERING: Release; [stripe.W4] publishes this holder's bucket stores (and the even version
        // of a finished take) to the next locker [stripe.W1] and to readers [stripe.R1].
        self.word.store(self.value & !LOCKED, Ordering::Release);
    }
}

/// The locks of the stripes of one or two buckets, taken in ascending order \[stripe.W1\].
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

    /// Runs `clear` (a take's store of one fingerprint out of a bucket of stripe `owner`)
    /// inside a window on stripe `version` \[stripe.W3\], and counts the fingerprint out of `owner`.
    /// Both stripes must be held.
    ///
    /// One call resolves both locks, so the pair stays in registers on the remove path.
    #[inline]
    pub(crate) fn take_one(&mut self, version: usize, owner: usize, clear: impl FnOnce()) {
        let (low_index, low) = &mut self.low;
        let (version_lock, other) = match &mut self.high {
            Some((_, high)) if *low_index != version => (high, Some(low)),
            Some((_, high)) => (low, Some(high)),
            None => (low, None),
        };
        version_lock.begin_take();
        clear();
        version_lock.end_take();
        match other {
            Some(other) if owner != version => other.remove_fingerprint(),
            _ => version_lock.remove_fingerprint(),
        }
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
