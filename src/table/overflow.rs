//! Overflow bits: negatives answered from one bucket word.
//!
//! # Protocol
//!
//! A layout with overflow bits ([`Fp15`](crate::fingerprint::Fp15)) keeps four of them in each
//! bucket word; fingerprint `f` owns one, `bit(f)`. A key's *primary* is the bucket its hash
//! names first (`Probe::primary`), its *alternate* the other bucket of its pair. The steps
//! below extend the stripe protocol (`stripe`); every store is still made under the lock of
//! its bucket's stripe \[stripe.W2\].
//!
//! - **\[overflow.W1\]** A put into the key's primary is a plain put \[stripe.W2\].
//! - **\[overflow.W2\]** A put into the key's alternate (made under both buckets' locks) first
//!   sets `bit(f)` in the primary (a Release store, skipped if the bit is set), then puts. A
//!   unique insert that finds `f` in its pair but not in its primary sets the primary's bit
//!   before it answers "already present": the copy it found stands for its key too.
//! - **\[overflow.W3\]** A hop of `f` from `s` to `d` clears its slot in `s` and sets `bit(f)`
//!   in `s` in one store: the mover does not know whose primary `s` is, and a bit set in the
//!   source is always safe.
//! - **\[overflow.W4\]** A remove takes from the key's primary when the primary holds `f`, and
//!   from the alternate otherwise. When the copy protocol makes it take from the alternate
//!   although the primary holds `f` (\[copy.C3\]), that take also sets `bit(f)` in the
//!   alternate, in the same store.
//! - **\[overflow.W5\]** Bits are never cleared, except by `clear` (which zeroes every word) and
//!   by building a table: a new table starts with none (growth, rebuilds), and a snapshot's
//!   table takes the bits its words hold, with both buckets of each extra's pair marked. A put
//!   into the alternate while a copy runs logs an extra if the copier may have read the
//!   primary before its bit (\[copy.C5\]).
//! - **\[overflow.W6\]** A remove that takes its copy from a table other than the newest (as
//!   its own load of the table count showed) sets `bit(f)` in the bucket it takes from, in the
//!   same store.
//! - **\[overflow.R1\]** A lookup in the filter's newest table loads its primary word (Acquire).
//!   A lane holding `f` answers "present". No lane holding `f` and `bit(f)` clear answer
//!   "absent" from that table, with no other load of it. A set bit sends the lookup to the
//!   table's two-line read \[stripe.R1\]..\[stripe.R3\]. Older tables are always read with two
//!   lines.
//! - **\[overflow.R2\]** Before a lookup that took a one-line answer reports "absent", it
//!   reloads the filter's table count \[growth.G4\] (Relaxed, after the Acquire load of
//!   \[overflow.R1\]); if a table was added since its first load, it reads every table again,
//!   with two lines each.
//!
//! # Invariant
//!
//! A table's *natives* are the keys whose claim (growth's invariant (b): the copy standing
//! for a key) is in that table and that were inserted into it or an older one. Keys inserted
//! into a newer table can be handed down to this one by a remove (growth (b)); they are not
//! natives, and every lookup of one reads this table with two lines (its insert, and so the
//! lookup, saw the newer table).
//!
//! - **\[overflow.I1\]** For every fingerprint `f` and bucket `x` of a table: if `bit(f)` is
//!   clear in `x`, then `x` holds at least as many copies of `f` as the table has natives
//!   with fingerprint `f` and primary `x`.
//!
//! Write `c_x`, `c_y` for the copies of `f` in the pair `{x, y}` and `n_x`, `n_y` for the
//! natives with fingerprint `f` and primary `x` or `y`; `c_x + c_y >= n_x + n_y`. Every event
//! that changes `c_x`, `n_x` or `bit(f)` in `x` holds `x`'s stripe lock, except a hand-over
//! by a take in another table (below), so each value of `x`'s word is one point of a
//! sequence at which \[overflow.I1\] holds:
//!
//! - A put into the primary raises `c_x` with `n_x` (W1). A put into the alternate, or a
//!   unique insert standing on a copy in the alternate, raises `n_x` only with `bit(f)` set
//!   in `x` (W2). A hop lowers `c_s` only with `bit(f)` set in `s` (W3).
//! - A remove of a native takes from its primary `x` when `x` holds `f`, lowering `c_x` with
//!   `n_x`. One that takes from `y` because `x` holds no `f` finds `c_x = 0`, so
//!   `c_y >= n_x + n_y >= 1 + n_y` and `c_y - 1 >= n_y`. One that takes from `y` although `x`
//!   holds `f` sets `bit(f)` in `y` (W4).
//! - A remove of a key whose claim is in an older table, taking a copy here, hands one native
//!   down (growth (b)): one with primary `x` after a take from `x`, one with primary `y`
//!   after a take from `y`, or none if the pair held a spare copy; the counts above hold as
//!   for a native's remove.
//! - A remove of a key inserted into a newer table takes here only as a table other than the
//!   newest, so it sets the bit where it takes (W6). These are the only takes that can leave
//!   a native's primary short: a key handed down stands on a copy at either end of its pair
//!   here, not necessarily its primary's.
//!
//! # Why a one-line "absent" misses no key
//!
//! Take a native `K` of the newest table `g`, with primary `x`, inserted before the lookup and
//! not removed. `K`'s put (or the bit its W2 set first) happened before the lookup, so the
//! one-line load reads that store or a later one (coherence), and by \[overflow.I1\] the word
//! read holds `f` or `bit(f)`. If `K` was handed down to an older table meanwhile, the take
//! that did it was at `x` (a take at `y` hands down a native with primary `x` only when `x`
//! holds no `f`, and then its bit is set) and the one-line load read it or a later store to
//! `x`: the load is Acquire, so it synchronizes with that take's Release fence \[stripe.W3\]
//! (or the release sequence of the later holder of `x`'s stripe), and the older tables' reads
//! see the stand-in's put as growth's argument \[growth.G4\] requires. A key inserted into an
//! older table is a native of table `g` only through such a hand-over chain, and one whose
//! claim is still in an older table is found there by the two-line reads.
//!
//! \[overflow.R2\] is a second, independent guard for live lookups: a reader that loaded the
//! count before table `g + 1` was added treats table `g` as the newest. Every take in table
//! `g` by a remove of a key of table `g + 1` or later follows that key's insert, which
//! followed the Release store publishing table `g + 1` \[growth.G1\]; an Acquire one-line load
//! that reads such a take, or a later store to the same bucket, makes the reload see the new
//! table. W6 is what keeps a snapshot's copy of table `g` true to \[overflow.I1\] when the
//! filter grows during the copy; with it the reload only costs a load of a line the lookup
//! has already read.
//!
//! The models in `table::overflow::loom_tests` check each step beside a broken variant that
//! loom must catch.

use super::geometry::Geometry;
use super::stripe::StripeLock;
use super::{Probe, RawTable};
use crate::fingerprint::{fingerprint, word_has_match, Layout};
use crate::sync::Ordering;

/// What a lookup learned from one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    Present,
    /// Absent, by a validated two-line read.
    Absent,
    /// Absent by the one-line read of \[overflow.R1\]: final only if the table is still the
    /// newest \[overflow.R2\].
    AbsentOneLine,
}

/// Buckets read to estimate the share of overflow bits set: 4,096 bits, a standard error under
/// 1%, and at most about a thousand cache misses for a guard's rebuild check every 64 writes.
const SHARE_SAMPLE: usize = 1_024;

impl<L: Layout, G: Geometry> RawTable<L, G> {
    /// A lookup in the filter's newest table: one line when the primary answers
    /// \[overflow.R1\], else the two-line read.
    #[cfg(test)]
    pub(crate) fn contains_newest(&self, p: Probe) -> Lookup {
        match self.one_line(p) {
            Some(answer) => answer,
            None if self.contains(p) => Lookup::Present,
            None => Lookup::Absent,
        }
    }

    /// [`contains_newest`](Self::contains_newest) of the key of `hash`. The alternate bucket is
    /// computed only when the lookup reads it.
    #[inline(always)]
    pub(crate) fn contains_newest_hash(&self, hash: u64) -> Lookup {
        let fp = fingerprint::<L>(hash);
        let primary = self.geometry.primary(hash) as usize;
        match self.one_line_at(primary, fp) {
            Some(answer) => answer,
            None if self.contains(self.probe_at(primary, fp)) => Lookup::Present,
            None => Lookup::Absent,
        }
    }

    /// The one-line read of \[overflow.R1\]: `Present`, `AbsentOneLine`, or `None` if the
    /// primary's overflow bit sends the lookup to both lines (always, for a layout without
    /// overflow bits).
    #[inline(always)]
    pub(crate) fn one_line(&self, p: Probe) -> Option<Lookup> {
        self.one_line_at(p.primary, p.fp)
    }

    /// [`one_line`](Self::one_line) of fingerprint `fp` with primary bucket `primary`.
    #[inline(always)]
    fn one_line_at(&self, primary: usize, fp: u64) -> Option<Lookup> {
        if L::OVERFLOW == 0 || !self.one_line_enabled() {
            return None;
        }
        #[cfg(not(cuckoo_loom))]
        let order = Ordering::Acquire;
        #[cfg(cuckoo_loom)]
        let order = if self.broken.one_line_relaxed {
            Ordering::Relaxed
        } else {
            Ordering::Acquire
        };
        // ORDERING: Acquire; [overflow.R1] a load that reads a take synchronizes with the
        // take's Release fence [stripe.W3], so the reload of [overflow.R2] and the older
        // tables' reads see what happened before it.
        let word = L::load(&self.buckets[primary], order);
        if word_has_match::<L>(word, fp) {
            Some(Lookup::Present)
        } else if word & L::overflow_bit(fp) == 0 {
            Some(Lookup::AbsentOneLine)
        } else {
            #[cfg(all(test, cuckoo_loom))]
            crate::sharded::bump(&self.bit_sends);
            None
        }
    }

    /// One-line reads a set bit sent to two lines so far.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn bit_sends(&self) -> u64 {
        // ORDERING: Relaxed; a statistic read after the model's threads are joined.
        self.bit_sends.load(Ordering::Relaxed)
    }

    /// Whether lookups may answer from one line (loom models of the two-line protocol turn it
    /// off, so that their readers keep reading both buckets).
    #[inline(always)]
    fn one_line_enabled(&self) -> bool {
        #[cfg(cuckoo_loom)]
        return !self.broken.two_lines_only;
        #[cfg(not(cuckoo_loom))]
        true
    }

    /// Sets `fp`'s overflow bit in `bucket`, whose stripe `lock` holds \[overflow.W2\].
    #[inline]
    pub(super) fn mark_overflow(&self, lock: &mut StripeLock<'_>, bucket: usize, fp: u64) {
        if L::OVERFLOW == 0 {
            return;
        }
        let _ = lock;
        let word = &self.buckets[bucket];
        // ORDERING: Relaxed; under the bucket's stripe lock [stripe.W1].
        let current = L::load(word, Ordering::Relaxed);
        let bit = L::overflow_bit(fp);
        if current & bit == 0 {
            // ORDERING: Release; [overflow.W2] like a put [stripe.I4]: a reader whose load reads
            // it sees the takes before it in this bucket.
            L::store(word, current | bit, Ordering::Release);
        }
    }

    /// The share of overflow bits set, estimated from up to `SHARE_SAMPLE` buckets spread over
    /// the table; 0 for a layout without them.
    pub(crate) fn overflow_share(&self) -> f64 {
        if L::OVERFLOW == 0 || self.buckets.is_empty() {
            return 0.0;
        }
        let step = self.buckets.len().div_ceil(SHARE_SAMPLE).max(1);
        let (mut words, mut set) = (0u64, 0u64);
        for word in self.buckets.iter().step_by(step) {
            // ORDERING: Relaxed; a statistic.
            set += u64::from((L::load(word, Ordering::Relaxed) & L::OVERFLOW).count_ones());
            words += 1;
        }
        set as f64 / (words * u64::from(L::OVERFLOW.count_ones())) as f64
    }
}

#[cfg(all(test, cuckoo_loom))]
mod loom_tests;

#[cfg(all(test, not(cuckoo_loom)))]
mod tests;
