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
//!   sets `bit(f)` in the primary (a Release store, skipped if the bit is set), then puts.
//! - **\[overflow.W3\]** A hop of `f` from `s` to `d` clears its slot in `s` and sets `bit(f)`
//!   in `s` in one store: the mover does not know whose primary `s` is, and a bit set in the
//!   source is always safe.
//! - **\[overflow.W4\]** A remove takes from the key's primary when the primary holds `f`, and
//!   from the alternate otherwise. When the copy protocol makes it take from the alternate
//!   although the primary holds `f` (\[copy.C3\]), that take also sets `bit(f)` in the
//!   alternate, in the same store.
//! - **\[overflow.W5\]** Bits are never cleared, except by `clear` (which zeroes every word) and
//!   by building a table: a new table starts with none (growth, rebuilds), and a snapshot's
//!   table takes the bits its words hold, with both buckets of each extra's pair marked.
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
//! - **\[overflow.I1\]** For every fingerprint `f`, bucket `x` of a table and the keys whose
//!   copies that table holds (a remove can hand a key over to another copy of its fingerprint
//!   and pair, `growth`): if `bit(f)` is clear in `x`, then `x` holds at least as many copies
//!   of `f` as there are such keys with fingerprint `f` and primary `x`.
//!
//! Write `c_x`, `c_y` for the copies of `f` in the pair `{x, y}`, and `n_x`, `n_y` for the keys
//! with fingerprint `f` and primary `x` or `y`; `c_x + c_y >= n_x + n_y` (every key has a copy).
//! A put into the primary raises `c_x` with `n_x` (W1). A put into the alternate raises
//! `n_x` only after `bit(f)` is set in `x` (W2). A hop lowers `c_s` only with `bit(f)` set in
//! `s` (W3). A remove that takes from `x`, its key's primary, lowers `c_x` with `n_x`. One that
//! takes from `y` because `x` holds no `f` finds `c_x = 0`, so `c_y >= n_x + n_y >= 1 + n_y`
//! and `c_y - 1 >= n_y` still holds; one that takes from `y` although `x` holds `f` sets
//! `bit(f)` in `y` (W4). A remove of a key held by an older table that takes a copy here hands
//! one of this table's keys to the older table, whichever keeps the counts here (one with
//! primary `x` after a take from `x`, one with primary `y` after a take from `y`, or none
//! if a copy was spare).
//!
//! That hand-over is also why only the newest table answers from one line: the key handed to
//! the older table may have its primary at the other end of the pair there, where neither a
//! copy nor a bit stands for it. (A key `K` with its copy in its primary `y` of table `g`; a
//! key `R` with primary `x` there; table `g + 1` is added; a key `X` of the same fingerprint,
//! with primary at the `y` end, goes into it; removing `R` takes `X`'s copy there, so `X` now
//! stands on `R`'s copy in `x`; removing `X` finds no copy in table `g + 1` and takes the copy
//! in its primary `y` of table `g`: `K`'s. `K` is now held at `x` alone, with no bit in `y`.)
//! Every take that breaks \[overflow.I1\] in table `g` this way removes a key inserted into a
//! newer table, so it follows the Release store that published table `g + 1` \[growth.G1\];
//! a one-line load of `y` that reads the take, or any later store to `y` (made by a later
//! holder of `y`'s stripe, whose lock acquired the take's unlock), is Acquire and so makes
//! the reload of \[overflow.R2\] see the new table.
//!
//! # Why a one-line "absent" misses no key
//!
//! Take a key `K` of the newest table `g`, with primary `x`, inserted before the lookup and
//! not removed, and a lookup whose reload \[overflow.R2\] still finds `g`. `K`'s put (or the
//! bit its W2 set first) happened before the lookup, so the one-line load reads that store or
//! a later one (coherence). Every store to `x` from then on keeps \[overflow.I1\] with `K`
//! counted in `n_x`: `bit(f)` is set in the word read (so the lookup reads two lines), or `x`
//! holds `f` in it. The two-line read is the stripe protocol's, and the older tables' reads
//! keep growth's argument \[growth.G4\]: a one-line answer whose load read a take
//! synchronizes with the take's Release fence \[stripe.W3\] as a validated read would.
//!
//! The models in `table::overflow::loom_tests` check each step beside a broken variant that
//! loom must catch.

use super::geometry::Geometry;
use super::stripe::StripeLock;
use super::{Probe, RawTable};
use crate::fingerprint::{word_has_match, Layout};
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

/// Buckets read to estimate the share of overflow bits set.
const SHARE_SAMPLE: usize = 16_384;

impl<L: Layout, G: Geometry> RawTable<L, G> {
    /// A lookup in the filter's newest table: one line when the primary answers
    /// \[overflow.R1\], else the two-line read.
    #[inline(always)]
    pub(crate) fn contains_newest(&self, p: Probe) -> Lookup {
        match self.one_line(p) {
            Some(answer) => answer,
            None if self.contains(p) => Lookup::Present,
            None => Lookup::Absent,
        }
    }

    /// The one-line read of \[overflow.R1\]: `Present`, `AbsentOneLine`, or `None` if the
    /// primary's overflow bit sends the lookup to both lines (always, for a layout without
    /// overflow bits).
    #[inline(always)]
    pub(crate) fn one_line(&self, p: Probe) -> Option<Lookup> {
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
        let word = L::load(&self.buckets[p.primary], order);
        if word_has_match::<L>(word, p.fp) {
            Some(Lookup::Present)
        } else if word & L::overflow_bit(p.fp) == 0 {
            Some(Lookup::AbsentOneLine)
        } else {
            None
        }
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
