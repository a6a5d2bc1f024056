//! Fingerprints, bucket words and the alternate-bucket function.
//!
//! A bucket is its fingerprint slots packed into one aligned atomic word: 4 x 15 bits and four
//! overflow bits in an `AtomicU64` ([`Fp15`], the 16-bit class), 5 x 12 bits and four overflow
//! bits in an `AtomicU64` ([`Fp12`], the 12-bit class), 4 x 16 bits in an `AtomicU64`
//! ([`Fp16`], the plain layout of format-2 snapshots) or 4 x 8 bits in an `AtomicU32`
//! ([`Fp8`]). A fingerprint is never 0; 0 marks an empty slot. The overflow bits are the
//! one-line negatives' (`table::overflow`). No loop runs per slot: a lookup compares both of its buckets at once
//! in one SSE2 register on x86_64 ([`pair_has_match`]); elsewhere, and for the writers' slot
//! searches, matching is SWAR (SIMD within a register): one XOR with the fingerprint repeated
//! in every lane, then a zero-lane test.
//!
//! From one 64-bit keyed hash, the low 32 bits give the fingerprint and the high 32 bits give
//! the primary bucket, so the two are independent. The alternate bucket is
//! `(h(fp) - i) mod m`, an involution for any bucket count `m`: applying it twice returns `i`,
//! so the table needs no power-of-two rounding and a fingerprint can be moved between its two
//! buckets without knowing its key.

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Slots per bucket of every layout but [`Fp12`]: 4 slots reach about 95% load with short
/// cuckoo paths.
pub(crate) const SLOTS: usize = 4;

/// The packing of four fingerprints into one atomic bucket word.
///
/// Words are handled as `u64` whatever their atomic width, so the table code is written once.
/// A *lane* is one slot's `STRIDE` bits; its fingerprint is the low `BITS` of them.
pub(crate) trait Layout: Send + Sync + 'static {
    /// The atomic type of one bucket.
    type Word: Send + Sync;
    /// Bits per fingerprint.
    const BITS: u32;
    /// Bits from one lane to the next: `BITS`, or `BITS + 1` where each lane's top bit is one
    /// of the bucket's overflow bits.
    const STRIDE: u32;
    /// The lowest bit of every lane (`0x0001_0001_0001_0001` for 16-bit lanes).
    const LO: u64;
    /// The highest bit of every lane (`0x8000_8000_8000_8000` for 16-bit lanes).
    const HI: u64;
    /// All bits of every lane but the highest.
    const LOW_BITS: u64;
    /// The fingerprint mask of one lane.
    const LANE: u64;
    /// The bucket's overflow bits; 0 for a layout without them.
    const OVERFLOW: u64;
    /// Every fingerprint bit of a word.
    const FP_MASK: u64 = Self::LO * Self::LANE;
    /// Bits per slot, overflow bits included (rounded down): the width class the filter
    /// reports.
    const CLASS: u32 = Self::STRIDE;
    /// Fingerprint slots per bucket.
    const SLOTS: usize = SLOTS;

    /// The overflow bit of fingerprint `fp` (0 for a layout without overflow bits).
    #[inline(always)]
    fn overflow_bit(fp: u64) -> u64 {
        let _ = fp;
        0
    }

    fn new_word() -> Self::Word;
    /// A word holding `value` (whose high bits beyond the word's width are 0).
    fn word(value: u64) -> Self::Word;
    fn load(word: &Self::Word, order: Ordering) -> u64;
    fn store(word: &Self::Word, value: u64, order: Ordering);
}

/// The word methods of a layout whose bucket is one `AtomicU64`.
macro_rules! u64_word {
    () => {
        #[inline]
        fn new_word() -> AtomicU64 {
            AtomicU64::new(0)
        }
        #[inline]
        fn word(value: u64) -> AtomicU64 {
            AtomicU64::new(value)
        }
        #[inline(always)]
        fn load(word: &AtomicU64, order: Ordering) -> u64 {
            word.load(order)
        }
        #[inline(always)]
        fn store(word: &AtomicU64, value: u64, order: Ordering) {
            word.store(value, order);
        }
    };
}

/// Four 16-bit fingerprints in an `AtomicU64`: about 0.012% false positives at 95% load. The
/// layout of the 16-bit class in format-2 snapshots, which hold no overflow bits; new filters
/// use [`Fp15`].
#[derive(Debug)]
pub(crate) enum Fp16 {}

/// Four 15-bit fingerprints and four overflow bits in an `AtomicU64`: about 0.023% false
/// positives at 95% load. Each 16-bit lane holds a fingerprint in its low 15 bits; the lanes'
/// top bits are the bucket's overflow bits, bit `fp >> 13` for fingerprint `fp`.
#[derive(Debug)]
pub(crate) enum Fp15 {}

/// Five 12-bit fingerprints and four overflow bits in an `AtomicU64` (the 12-bit class):
/// about 0.23% false positives at 95% load, 13.5 bits per key. Slot `j` is bits `12 j` to
/// `12 j + 11`; bits 60 to 63 are the overflow bits, bit `60 + (fp >> 10)` for fingerprint
/// `fp`.
#[derive(Debug)]
pub(crate) enum Fp12 {}

impl Layout for Fp12 {
    type Word = AtomicU64;
    const BITS: u32 = 12;
    const STRIDE: u32 = 12;
    const LO: u64 = 0x0000_0010_0100_1001 | (1 << 48);
    const HI: u64 = Self::LO << 11;
    const LOW_BITS: u64 = Self::LO * 0x7FF;
    const LANE: u64 = 0xFFF;
    const OVERFLOW: u64 = 0xF000_0000_0000_0000;
    const SLOTS: usize = 5;

    #[inline(always)]
    fn overflow_bit(fp: u64) -> u64 {
        1 << (60 + (fp >> 10))
    }
    u64_word!();
}

impl Layout for Fp15 {
    type Word = AtomicU64;
    const BITS: u32 = 15;
    const STRIDE: u32 = 16;
    const LO: u64 = 0x0001_0001_0001_0001;
    const HI: u64 = 0x8000_8000_8000_8000;
    const LOW_BITS: u64 = 0x7FFF_7FFF_7FFF_7FFF;
    const LANE: u64 = 0x7FFF;
    const OVERFLOW: u64 = 0x8000_8000_8000_8000;

    #[inline(always)]
    fn overflow_bit(fp: u64) -> u64 {
        0x8000 << ((fp >> 13) << 4)
    }
    u64_word!();
}

/// Four 8-bit fingerprints in an `AtomicU32`: about 3% false positives at 95% load.
#[derive(Debug)]
pub(crate) enum Fp8 {}

impl Layout for Fp16 {
    type Word = AtomicU64;
    const BITS: u32 = 16;
    const STRIDE: u32 = 16;
    const OVERFLOW: u64 = 0;
    const LO: u64 = 0x0001_0001_0001_0001;
    const HI: u64 = 0x8000_8000_8000_8000;
    const LOW_BITS: u64 = 0x7FFF_7FFF_7FFF_7FFF;
    const LANE: u64 = 0xFFFF;

    u64_word!();
}

impl Layout for Fp8 {
    type Word = AtomicU32;
    const BITS: u32 = 8;
    const STRIDE: u32 = 8;
    const OVERFLOW: u64 = 0;
    const LO: u64 = 0x0101_0101;
    const HI: u64 = 0x8080_8080;
    const LOW_BITS: u64 = 0x7F7F_7F7F;
    const LANE: u64 = 0xFF;

    #[inline]
    fn new_word() -> AtomicU32 {
        AtomicU32::new(0)
    }
    #[inline]
    fn word(value: u64) -> AtomicU32 {
        debug_assert!(value <= u64::from(u32::MAX));
        AtomicU32::new(value as u32)
    }
    #[inline(always)]
    fn load(word: &AtomicU32, order: Ordering) -> u64 {
        u64::from(word.load(order))
    }
    #[inline(always)]
    fn store(word: &AtomicU32, value: u64, order: Ordering) {
        debug_assert!(value <= u64::from(u32::MAX));
        word.store(value as u32, order);
    }
}

/// The fingerprint of a hash: its low `BITS` bits, with 0 (the empty slot) mapped to 1.
///
/// Mapping 0 to 1 gives the value 1 twice the probability of the others, which raises the
/// false-positive rate by a factor of `1 + 2^-BITS` (0.4% at 8 bits): cheaper than a modulo
/// on the lookup path and far below what any test can see.
#[inline(always)]
pub(crate) fn fingerprint<L: Layout>(hash: u64) -> u64 {
    let fp = hash & L::LANE;
    fp + u64::from(fp == 0)
}

/// The primary bucket of a hash: its high 32 bits scaled into `0..buckets` by a multiply-shift
/// (Lemire's fast range), with no division. Requires `buckets <= 2^32`.
#[inline(always)]
pub(crate) fn primary_index(hash: u64, buckets: u64) -> u64 {
    debug_assert!(buckets <= 1 << 32);
    ((hash >> 32) * buckets) >> 32
}

/// `h(fp) mod buckets`: the mixing half of the alternate-bucket function.
#[inline(always)]
fn fingerprint_offset(fp: u64, buckets: u64) -> u64 {
    // The mix must be nonlinear. With plain Fibonacci hashing (`fp * phi`), `h` is a Weyl
    // sequence and the two-step neighbours of bucket `i`, `i + h(w) - h(v)`, depend almost only
    // on `w - v`: with 8-bit fingerprints the cuckoo graph becomes a lattice with ~510 distinct
    // two-step offsets instead of ~65,000, and the load at the first failed insert dropped from
    // 96.3% to 94.4% at 4 million keys (`examples/first_failure.rs 8`). Folding the product's
    // high bits onto its low bits with XOR breaks the linearity at the cost of one shift and
    // one XOR; the 32-bit multiply-high then maps the result into `0..buckets` (`buckets` is at
    // most 2^32). Every instruction here is on the lookup path, so this is kept minimal.
    (fingerprint_mix(fp) * buckets) >> 32
}

/// The 32-bit nonlinear mix of a fingerprint behind [`fingerprint_offset`].
#[inline(always)]
fn fingerprint_mix(fp: u64) -> u64 {
    let x = fp.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    u64::from((x ^ (x >> 29)) as u32)
}

/// Hash bits a nested table's sub-bucket comes from (16 to 31: above every fingerprint,
/// below the primary index's bits).
pub(crate) const SUB_BUCKET_BITS: u32 = 16;

/// The primary bucket in a nested table of `base << shift` buckets: the base table's primary
/// bucket `b` and a sub-bucket `s` of `2^shift`, at `b << shift | s`. Requires
/// `shift <= SUB_BUCKET_BITS`.
#[inline(always)]
pub(crate) fn nested_primary_index(hash: u64, base: u64, shift: u32) -> u64 {
    debug_assert!(shift <= SUB_BUCKET_BITS);
    let mask = (1u64 << shift) - 1;
    (primary_index(hash, base) << shift) | ((hash >> 16) & mask)
}

/// The other bucket in a nested table: the base table's alternate of `b` and the sub-bucket
/// `(mix(fp) - s) mod 2^shift`. An involution (both parts are).
///
/// Keys that share a fingerprint and a bucket pair here share them in every smaller nested
/// table of the same base and in the base table itself (reduce the sub-bucket modulo the
/// smaller power of two, or drop it): the property that lets a remove take the copy it finds
/// in the newest table.
#[inline(always)]
pub(crate) fn nested_alternate_index(index: u64, fp: u64, base: u64, shift: u32) -> u64 {
    let mask = (1u64 << shift) - 1;
    let b = alternate_index(index >> shift, fp, base);
    let s = fingerprint_mix(fp).wrapping_sub(index & mask) & mask;
    (b << shift) | s
}

/// The other bucket of a fingerprint stored in `index`: `(h(fp) - index) mod buckets`.
///
/// An involution for every `buckets >= 1`: `alternate_index(alternate_index(i, f), f) == i`.
/// It may return `index` itself (when `2 * index == h(fp) mod buckets`); the table treats such
/// a fingerprint as having a single bucket.
#[inline(always)]
pub(crate) fn alternate_index(index: u64, fp: u64, buckets: u64) -> u64 {
    debug_assert!(index < buckets);
    // Both operands are below `buckets`, so the difference is in `(-buckets, buckets)`: one
    // subtraction and, on a borrow, one addition fold it into range.
    let (difference, borrow) = fingerprint_offset(fp, buckets).overflowing_sub(index);
    difference.wrapping_add(if borrow { buckets } else { 0 })
}

/// The fingerprint repeated in every lane, to XOR against a bucket word.
#[inline(always)]
pub(crate) fn splat<L: Layout>(fp: u64) -> u64 {
    fp * L::LO
}

/// Whether any lane of `word` equals the fingerprint whose splat is `pattern`.
///
/// The classic "has a zero lane" test: borrows can flag extra lanes above a zero lane, but the
/// yes/no answer for the whole word is exact.
///
/// The two-line lookup uses [`pair_has_match`], which is SSE2 on x86_64 and this test
/// elsewhere; the one-line read uses this test ([`word_has_match`]).
#[inline(always)]
pub(crate) fn has_match<L: Layout>(word: u64, pattern: u64) -> bool {
    let x = (word ^ pattern) & L::FP_MASK;
    (x.wrapping_sub(L::LO) & !x & L::HI) != 0
}

/// Whether either of two bucket words holds fingerprint `fp`: the lookup's one comparison.
///
/// On x86_64, for lanes of 8 or 16 bits, the two words go into one SSE2 register and are compared lane by lane with the
/// fingerprint broadcast into every lane (`pcmpeqw`/`pcmpeqb`, then one mask test): about
/// ten instructions for both buckets, where the SWAR test takes sixteen with its constants.
/// SSE2 is part of the x86_64 baseline, so no feature detection is needed; elsewhere the
/// SWAR test runs. Empty lanes are 0 and `fp` never is, so the zero padding of 8-bit words
/// never matches.
#[inline(always)]
pub(crate) fn pair_has_match<L: Layout>(a: u64, b: u64, fp: u64) -> bool {
    debug_assert!(
        fp != 0 && fp <= L::LANE,
        "fingerprint {fp:#x} out of its lane"
    );
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if L::STRIDE == 8 || L::STRIDE == 16 {
        use core::arch::x86_64::{
            _mm_cmpeq_epi16, _mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set1_epi16, _mm_set1_epi8,
            _mm_set_epi64x,
        };
        // SAFETY: these intrinsics only require SSE2, which the cfg above proves is enabled
        // for the whole build; they take no pointers and operate on register values only.
        return unsafe {
            let words = _mm_set_epi64x((b & L::FP_MASK) as i64, (a & L::FP_MASK) as i64);
            let equal = if L::STRIDE == 16 {
                _mm_cmpeq_epi16(words, _mm_set1_epi16(fp as u16 as i16))
            } else {
                _mm_cmpeq_epi8(words, _mm_set1_epi8(fp as u8 as i8))
            };
            _mm_movemask_epi8(equal) != 0
        };
    }
    let pattern = splat::<L>(fp);
    has_match::<L>(a, pattern) | has_match::<L>(b, pattern)
}

/// The exact set of zero lanes of `x`, as the high bit of each zero lane.
///
/// No carry crosses a lane: `(x & LOW_BITS) + LOW_BITS` stays below the lane's high bit plus
/// its low bits, so each lane's high bit says "some low bit was set"; OR-ing `x` adds "the
/// high bit was set"; the complement leaves the high bit only in lanes that were all zero.
#[inline(always)]
pub(crate) fn zero_lanes<L: Layout>(x: u64) -> u64 {
    !(((x & L::LOW_BITS) + L::LOW_BITS) | x) & L::HI
}

/// The lanes of `word` that hold `fp` (as lane high bits).
#[inline(always)]
pub(crate) fn matching_lanes<L: Layout>(word: u64, fp: u64) -> u64 {
    zero_lanes::<L>((word ^ splat::<L>(fp)) & L::FP_MASK)
}

/// The empty lanes of `word` (as lane high bits).
#[inline(always)]
pub(crate) fn empty_lanes<L: Layout>(word: u64) -> u64 {
    zero_lanes::<L>(word & L::FP_MASK)
}

/// Whether `word` holds fingerprint `fp`: the one-line read's comparison. SSE2 on x86_64 for
/// 16-bit lanes of 15-bit fingerprints (one `pcmpeqw` against the fingerprint broadcast,
/// after a lane shift that drops the overflow bits), SWAR otherwise.
#[inline(always)]
pub(crate) fn word_has_match<L: Layout>(word: u64, fp: u64) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if L::STRIDE == 16 && L::FP_MASK == 0x7FFF_7FFF_7FFF_7FFF {
        use core::arch::x86_64::{
            _mm_cmpeq_epi16, _mm_cvtsi64_si128, _mm_movemask_epi8, _mm_set1_epi16, _mm_slli_epi16,
        };
        // SAFETY: these intrinsics only require SSE2, which the cfg above proves is enabled
        // for the whole build; they take no pointers and operate on register values only.
        return unsafe {
            // Each lane shifted left by one drops its overflow bit: the lanes are compared
            // with the fingerprint shifted alike, and no mask is needed.
            let lanes = _mm_slli_epi16::<1>(_mm_cvtsi64_si128(word as i64));
            let equal = _mm_cmpeq_epi16(lanes, _mm_set1_epi16((fp << 1) as u16 as i16));
            // The upper 64 bits are zero lanes, which never equal a fingerprint.
            _mm_movemask_epi8(equal) != 0
        };
    }
    has_match::<L>(word, splat::<L>(fp))
}

/// The slot index of the lowest lane flagged in a non-zero lane mask.
#[inline(always)]
pub(crate) fn first_lane<L: Layout>(mask: u64) -> usize {
    debug_assert!(mask != 0);
    (mask.trailing_zeros() / L::STRIDE) as usize
}

/// The fingerprint in slot `slot` of `word` (0 if empty).
#[inline(always)]
pub(crate) fn lane<L: Layout>(word: u64, slot: usize) -> u64 {
    (word >> (slot as u32 * L::STRIDE)) & L::LANE
}

/// `word` with slot `slot` set to `fp` (0 clears it); the overflow bits are kept.
#[inline(always)]
pub(crate) fn with_lane<L: Layout>(word: u64, slot: usize, fp: u64) -> u64 {
    let shift = slot as u32 * L::STRIDE;
    (word & !(L::LANE << shift)) | (fp << shift)
}

/// A table's fingerprint layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Width {
    /// Four 8-bit fingerprints per bucket ([`Fp8`]).
    Fp8,
    /// The 12-bit class: five 12-bit fingerprints and four overflow bits ([`Fp12`]).
    Fp12,
    /// The 16-bit class: four 15-bit fingerprints and four overflow bits ([`Fp15`]).
    Fp15,
    /// Four plain 16-bit fingerprints ([`Fp16`]): format-2 snapshots only.
    Fp16,
}

/// Runs `$body` with the type `$L` naming the layout of width `$width`.
macro_rules! with_layout {
    ($width:expr, $L:ident => $body:expr) => {
        match $width {
            Width::Fp8 => {
                type $L = Fp8;
                $body
            }
            Width::Fp12 => {
                type $L = Fp12;
                $body
            }
            Width::Fp15 => {
                type $L = Fp15;
                $body
            }
            Width::Fp16 => {
                type $L = Fp16;
                $body
            }
        }
    };
}

impl Width {
    /// The layout a new filter of the `class`-bit class gets (8, 12 or 16).
    pub(crate) fn for_class(class: u32) -> Width {
        match class {
            8 => Width::Fp8,
            12 => Width::Fp12,
            _ => {
                debug_assert_eq!(class, Fp15::CLASS);
                Width::Fp15
            }
        }
    }

    /// The width class: bits per slot, overflow bits included (rounded down).
    pub(crate) fn class(self) -> u32 {
        with_layout!(self, L => L::CLASS)
    }

    /// Bits per fingerprint.
    pub(crate) fn fingerprint_bits(self) -> u32 {
        with_layout!(self, L => L::BITS)
    }

    /// Fingerprint slots per bucket.
    pub(crate) fn slots(self) -> usize {
        with_layout!(self, L => L::SLOTS)
    }

    /// Whether the layout has overflow bits (one-line negatives, `overflow`).
    pub(crate) fn has_overflow_bits(self) -> bool {
        with_layout!(self, L => L::OVERFLOW != 0)
    }

    /// Occupied slots in bucket words of this layout (overflow bits are not slots).
    pub(crate) fn occupied(self, words: &[u64]) -> u64 {
        with_layout!(self, L => words
            .iter()
            .map(|&w| (L::SLOTS as u32 - empty_lanes::<L>(w).count_ones()) as u64)
            .sum())
    }

    /// Bytes per bucket word.
    pub(crate) fn word_bytes(self) -> usize {
        if self == Width::Fp8 {
            4
        } else {
            8
        }
    }
}

#[cfg(all(test, not(cuckoo_loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bucket_counts() -> Vec<u64> {
        let mut counts: Vec<u64> = (1..=300).collect();
        // Primes, powers of two and their neighbours, and sizes real filters use.
        counts.extend([
            509,
            521,
            1021,
            1024,
            1031,
            4093,
            4096,
            4099,
            65_521,
            65_536,
            65_537,
            789_474,
            1_000_003,
            2_631_579,
            16_777_213,
            16_777_216,
            4_294_967_291,
            1 << 32,
        ]);
        counts
    }

    #[test]
    fn alternate_index_is_an_involution_for_any_bucket_count() {
        let mut rng = 0x1234_5678_9abc_def0u64;
        for m in bucket_counts() {
            for _ in 0..2_000 {
                rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let i = primary_index(rng, m);
                assert!(i < m);
                let fp = fingerprint::<Fp16>(rng.rotate_left(17));
                let j = alternate_index(i, fp, m);
                assert!(j < m, "alternate {j} out of range for {m} buckets");
                assert_eq!(alternate_index(j, fp, m), i, "m={m} i={i} fp={fp}");
                let fp8 = fingerprint::<Fp8>(rng.rotate_left(29));
                let j8 = alternate_index(i, fp8, m);
                assert_eq!(alternate_index(j8, fp8, m), i, "m={m} i={i} fp8={fp8}");
            }
        }
    }

    #[test]
    fn alternate_index_covers_edges_of_the_range() {
        for m in bucket_counts() {
            for i in [0, m / 2, m - 1] {
                for fp in [1, 2, 255, 0x7FFF, 0xFFFF] {
                    let j = alternate_index(i, fp, m);
                    assert!(j < m);
                    assert_eq!(alternate_index(j, fp, m), i);
                }
            }
        }
    }

    #[test]
    fn primary_index_spreads_over_all_buckets() {
        let m = 1_000_003u64;
        let mut hits = vec![0u32; 16];
        let mut x = 7u64;
        for _ in 0..160_000 {
            x = x
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(0x632B_E59B_D9B4_E019);
            let i = primary_index(x, m);
            hits[(i * 16 / m) as usize] += 1;
        }
        for h in hits {
            assert!((9_000..11_000).contains(&h), "uneven spread: {h}");
        }
    }

    #[test]
    fn fingerprints_are_never_zero() {
        for low in 0..=0xFFFFu64 {
            for high in [0u64, 0xFFFF_0000, 0xDEAD_BEEF_0000_0000, u64::MAX << 16] {
                let h = high | low;
                let f16 = fingerprint::<Fp16>(h);
                assert!((1..=0xFFFF).contains(&f16));
                let f8 = fingerprint::<Fp8>(h);
                assert!((1..=0xFF).contains(&f8));
                let f15 = fingerprint::<Fp15>(h);
                assert!((1..=0x7FFF).contains(&f15));
                let f12 = fingerprint::<Fp12>(h);
                assert!((1..=0xFFF).contains(&f12));
            }
        }
    }

    #[test]
    fn each_overflow_bit_is_owned_by_a_quarter_of_the_fingerprints() {
        let mut owners = [0u32; SLOTS];
        for fp in 1..=Fp15::LANE {
            let bit = Fp15::overflow_bit(fp);
            assert_eq!(bit.count_ones(), 1, "fp {fp:#x}");
            assert_eq!(bit & Fp15::OVERFLOW, bit, "fp {fp:#x}: bit {bit:#x}");
            assert_eq!(bit & Fp15::FP_MASK, 0);
            let lane = (bit.trailing_zeros() / Fp15::STRIDE) as usize;
            assert_eq!(lane as u64, fp >> 13, "fp {fp:#x}");
            owners[lane] += 1;
        }
        assert_eq!(owners, [0x1FFF, 0x2000, 0x2000, 0x2000]);
        assert_eq!(Fp15::FP_MASK | Fp15::OVERFLOW, u64::MAX);
        assert_eq!(Fp15::FP_MASK & Fp15::OVERFLOW, 0);
        let mut owners12 = [0u32; 4];
        for fp in 1..=Fp12::LANE {
            let bit = Fp12::overflow_bit(fp);
            assert_eq!(bit.count_ones(), 1, "fp {fp:#x}");
            assert_eq!(bit & Fp12::OVERFLOW, bit, "fp {fp:#x}: bit {bit:#x}");
            assert_eq!(
                u64::from(bit.trailing_zeros()),
                60 + (fp >> 10),
                "fp {fp:#x}"
            );
            owners12[(fp >> 10) as usize] += 1;
        }
        assert_eq!(owners12, [0x3FF, 0x400, 0x400, 0x400]);
        assert_eq!(Fp12::FP_MASK | Fp12::OVERFLOW, u64::MAX);
        assert_eq!(Fp12::FP_MASK & Fp12::OVERFLOW, 0);
        for fp in [1u64, 0xFF, 0xFFFF] {
            assert_eq!(Fp16::overflow_bit(fp), 0);
            assert_eq!(Fp8::overflow_bit(fp & 0xFF), 0);
        }
    }

    fn plain_match<L: Layout>(word: u64, fp: u64) -> Vec<usize> {
        (0..L::SLOTS)
            .filter(|&s| lane::<L>(word, s) == fp)
            .collect()
    }

    fn mask_to_slots<L: Layout>(mask: u64) -> Vec<usize> {
        (0..L::SLOTS)
            .filter(|&s| mask & (1 << (s as u32 * L::STRIDE + L::STRIDE - 1)) != 0)
            .collect()
    }

    /// The SWAR and SSE2 tests against a plain loop, on a word of `lanes` whose overflow bits
    /// are `overflow & L::OVERFLOW`: the overflow bits change no answer.
    fn check_swar<L: Layout>(lanes: &[u64], fp: u64, overflow: u64) {
        assert_eq!(lanes.len(), L::SLOTS);
        let bits = overflow & L::OVERFLOW;
        let word = (0..L::SLOTS).fold(bits, |w, s| with_lane::<L>(w, s, lanes[s] & L::LANE));
        assert_eq!(word & L::OVERFLOW, bits, "with_lane dropped overflow bits");
        let bare = word & !L::OVERFLOW;
        let expected: Vec<usize> = (0..L::SLOTS)
            .filter(|&s| lanes[s] & L::LANE == fp)
            .collect();
        let matching = matching_lanes::<L>(word, fp);
        assert_eq!(matching, matching_lanes::<L>(bare, fp));
        assert_eq!(mask_to_slots::<L>(matching), expected);
        assert_eq!(
            matching & !L::HI,
            0,
            "a mask bit outside the lanes' high bits"
        );
        assert_eq!(has_match::<L>(word, splat::<L>(fp)), !expected.is_empty());
        assert_eq!(word_has_match::<L>(word, fp), !expected.is_empty());
        // The pair test, with the word in either position and beside an empty or a full word
        // (each with and without the overflow bits).
        for other in [0, L::LO * (L::LANE - fp.max(1) + 1).min(L::LANE), word] {
            for other in [other, other | bits, other | L::OVERFLOW] {
                let either = !expected.is_empty() || !plain_match::<L>(other, fp).is_empty();
                assert_eq!(pair_has_match::<L>(word, other, fp), either);
                assert_eq!(pair_has_match::<L>(other, word, fp), either);
            }
        }
        let empty: Vec<usize> = (0..L::SLOTS).filter(|&s| lanes[s] & L::LANE == 0).collect();
        assert_eq!(mask_to_slots::<L>(empty_lanes::<L>(word)), empty);
        assert_eq!(empty_lanes::<L>(word), empty_lanes::<L>(bare));
        if !expected.is_empty() {
            assert_eq!(first_lane::<L>(matching), expected[0]);
        }
        for (s, &l) in lanes.iter().enumerate() {
            assert_eq!(lane::<L>(word, s), l & L::LANE);
            let cleared = with_lane::<L>(word, s, 0);
            assert_eq!(
                cleared & L::OVERFLOW,
                bits,
                "clearing a lane dropped overflow bits"
            );
            assert_eq!(lane::<L>(cleared, s), 0);
            let put = with_lane::<L>(cleared, s, fp);
            assert_eq!(put & L::OVERFLOW, bits, "a put dropped overflow bits");
            assert_eq!(lane::<L>(put, s), fp);
            for t in (0..L::SLOTS).filter(|&t| t != s) {
                assert_eq!(lane::<L>(put, t), lanes[t] & L::LANE);
            }
        }
    }

    proptest! {
        #[test]
        fn swar_matching_agrees_with_a_plain_loop_16(lanes in prop::array::uniform4(0u64..0x1_0000), pick in 0usize..5, other in 1u64..0x1_0000) {
            // Pick the fingerprint from the bucket (a hit) or at random (mostly a miss).
            let fp = if pick < SLOTS && lanes[pick] != 0 { lanes[pick] } else { other };
            check_swar::<Fp16>(&lanes, fp, 0);
        }

        #[test]
        fn swar_matching_agrees_with_a_plain_loop_15(lanes in prop::array::uniform4(prop_oneof![Just(0u64), 1u64..0x8000]), pick in 0usize..5, other in 1u64..0x8000, overflow in any::<u64>()) {
            let fp = if pick < SLOTS && lanes[pick] != 0 { lanes[pick] } else { other };
            check_swar::<Fp15>(&lanes, fp, overflow);
        }

        #[test]
        fn swar_matching_agrees_with_a_plain_loop_12(lanes in prop::array::uniform5(prop_oneof![Just(0u64), 1u64..0x1000]), pick in 0usize..6, other in 1u64..0x1000, overflow in any::<u64>()) {
            let fp = if pick < Fp12::SLOTS && lanes[pick] != 0 { lanes[pick] } else { other };
            check_swar::<Fp12>(&lanes, fp, overflow);
        }

        #[test]
        fn swar_matching_agrees_with_a_plain_loop_8(lanes in prop::array::uniform4(0u64..0x100), pick in 0usize..5, other in 1u64..0x100) {
            let fp = if pick < SLOTS && lanes[pick] != 0 { lanes[pick] } else { other };
            check_swar::<Fp8>(&lanes, fp, 0);
        }
    }

    #[test]
    fn swar_matching_handles_borrow_patterns() {
        // Lanes next to a zero lane, and values one apart, are where borrow tricks go wrong.
        let tricky16 = [0u64, 1, 2, 0x100, 0x7FFF, 0x8000, 0x8001, 0xFFFE, 0xFFFF];
        for &a in &tricky16 {
            for &b in &tricky16 {
                for &fp in &[1u64, 2, 0x8000, 0xFFFF, 0x100] {
                    check_swar::<Fp16>(&[a, b, a, b], fp, 0);
                    check_swar::<Fp16>(&[0, a, 0, b], fp, 0);
                }
            }
        }
        let tricky15 = [
            0u64, 1, 2, 0x100, 0x1FFF, 0x2000, 0x3FFF, 0x4000, 0x4001, 0x7FFE, 0x7FFF,
        ];
        let overflow = [
            0,
            Fp15::OVERFLOW,
            0x8000,
            0x8000_0000_0000_0000,
            0x8000_0000_8000,
        ];
        for &a in &tricky15 {
            for &b in &tricky15 {
                for &fp in &[1u64, 2, 0x2000, 0x4000, 0x7FFF, 0x100] {
                    for &bits in &overflow {
                        check_swar::<Fp15>(&[a, b, a, b], fp, bits);
                        check_swar::<Fp15>(&[0, a, 0, b], fp, bits);
                        check_swar::<Fp15>(&[a, 0, b, 0], fp, bits);
                    }
                }
            }
        }
        let tricky12 = [
            0u64, 1, 2, 0x100, 0x3FF, 0x400, 0x7FF, 0x800, 0x801, 0xBFF, 0xC00, 0xFFE, 0xFFF,
        ];
        let overflow12 = [0, Fp12::OVERFLOW, 1 << 60, 1 << 63, 0x5 << 60];
        for &a in &tricky12 {
            for &b in &tricky12 {
                for &fp in &[1u64, 2, 0x400, 0x800, 0xC00, 0xFFF, 0x100] {
                    for &bits in &overflow12 {
                        check_swar::<Fp12>(&[a, b, a, b, a], fp, bits);
                        check_swar::<Fp12>(&[0, a, 0, b, 0], fp, bits);
                        check_swar::<Fp12>(&[a, 0, b, 0, a], fp, bits);
                        check_swar::<Fp12>(&[b, b, b, b, a], fp, bits);
                    }
                }
            }
        }
        let tricky8 = [0u64, 1, 2, 0x7F, 0x80, 0x81, 0xFE, 0xFF];
        for &a in &tricky8 {
            for &b in &tricky8 {
                for &fp in &[1u64, 2, 0x80, 0xFF] {
                    check_swar::<Fp8>(&[a, b, a, b], fp, 0);
                    check_swar::<Fp8>(&[0, a, 0, b], fp, 0);
                }
            }
        }
    }
}
