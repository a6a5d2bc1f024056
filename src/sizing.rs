//! Sizing and false-positive maths: how many buckets a capacity needs, which fingerprint width
//! a false-positive rate needs, and the rate a width gives at a load.
//!
//! A key is reported present by mistake when one of the `2 x slots` slots of its two buckets
//! holds its fingerprint by chance. With `bits`-bit fingerprints (zero marks an empty slot, so
//! `2^bits - 1` values) and a fraction `load` of slots occupied, that happens with probability
//! `1 - (1 - 1/(2^bits - 1))^(2 x slots x load)`, about `8 x load / 2^bits` for four slots per
//! bucket (the cuckoo filter paper's bound). Rates are quoted at the design load, the load a default filter reliably
//! reaches before its first failed insert.

use crate::error::BuildError;
use crate::fingerprint::Width;

/// The load factor the false-positive rates are quoted at, and the load a default filter
/// reliably reaches before its first failed insert.
const DESIGN_LOAD: f64 = 0.95;

/// The load a filter built for `capacity` keys reaches when it holds them: a little below the
/// design load, so that `capacity` inserts succeed with room to spare.
const SIZING_LOAD_PERCENT: u128 = 94;

/// The supported width classes (bits per slot, rounded down), fewest bits per key first. The
/// 12-bit class holds five 12-bit fingerprints and four overflow bits per 64-bit bucket, the
/// 16-bit class four 15-bit fingerprints and four overflow bits.
const SUPPORTED_BITS: [u32; 3] = [8, 12, 16];

/// The width used when neither a width nor a rate is configured.
const DEFAULT_BITS: u32 = 16;

/// The most buckets a table may have.
const MAX_BUCKETS: u128 = 1 << 32;

/// The false-positive rate a table of layout `width` is configured for: the rate at the
/// design load.
pub(crate) fn design_false_positive_rate(width: Width) -> f64 {
    false_positive_rate(width, DESIGN_LOAD)
}

/// The design rate of the layout a new filter of the `class`-bit class gets.
fn class_rate(class: u32) -> f64 {
    design_false_positive_rate(Width::for_class(class))
}

/// The false-positive rate of layout `width` at `load`.
pub(crate) fn false_positive_rate(width: Width, load: f64) -> f64 {
    let per_slot = 1.0 / ((1u64 << width.fingerprint_bits()) - 1) as f64;
    1.0 - (1.0 - per_slot).powf(2.0 * width.slots() as f64 * load)
}

/// The fingerprint width for a configured width and false-positive rate, either optional: the
/// narrowest supported width whose design rate meets `rate`, or `bits` checked against it.
pub(crate) fn fingerprint_bits_for(
    bits: Option<u32>,
    rate: Option<f64>,
) -> Result<u32, BuildError> {
    let rate = match rate {
        None => None,
        Some(rate) if rate.is_finite() && rate > 0.0 && rate < 1.0 => Some(rate),
        Some(rate) => return Err(BuildError::InvalidFalsePositiveRate { rate }),
    };
    match (bits, rate) {
        (Some(bits), _) if !SUPPORTED_BITS.contains(&bits) => {
            Err(BuildError::UnsupportedFingerprintBits { bits })
        }
        (Some(bits), Some(rate)) if class_rate(bits) > rate => {
            Err(BuildError::FingerprintBitsTooFewForRate {
                bits,
                rate,
                achieved: class_rate(bits),
            })
        }
        (Some(bits), _) => Ok(bits),
        (None, Some(rate)) => SUPPORTED_BITS
            .into_iter()
            .find(|&bits| class_rate(bits) <= rate)
            .ok_or(BuildError::UnachievableFalsePositiveRate {
                rate,
                best: class_rate(SUPPORTED_BITS[SUPPORTED_BITS.len() - 1]),
            }),
        (None, None) => Ok(DEFAULT_BITS),
    }
}

/// Buckets of `slots` slots for `capacity` keys at the sizing load, or `None` beyond 2^32
/// buckets.
///
/// Small tables vary more in the load they reach, so `sqrt(capacity) + 2` buckets are added:
/// with them, inserting `capacity` distinct keys never failed in 120,000 seeded runs of every
/// capacity from 1 to 60 (`examples/first_failure.rs`); at a million keys they add 0.1%.
pub(crate) fn buckets_for(capacity: usize, slots: usize) -> Option<usize> {
    let per_bucket = slots as u128 * SIZING_LOAD_PERCENT;
    let slack = (capacity as f64).sqrt().ceil() as u128 + 2;
    let buckets = (capacity as u128 * 100).div_ceil(per_bucket) + slack;
    if buckets > MAX_BUCKETS {
        return None;
    }
    usize::try_from(buckets).ok()
}

/// The largest capacity [`buckets_for`] sizes for buckets of `slots` slots.
pub(crate) fn max_capacity(slots: usize) -> usize {
    // `buckets_for` grows with its argument, so binary-search its last `Some`.
    let (mut lo, mut hi) = (1usize, usize::MAX);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if buckets_for(mid, slots).is_some() {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

#[cfg(all(test, not(cuckoo_loom)))]
mod tests {
    use super::*;

    #[test]
    fn expected_rates_match_the_paper_formula() {
        // 2 x slots x 0.95 / 2^f, to within the (1 - x)^n vs n x approximation.
        for width in [Width::Fp8, Width::Fp12, Width::Fp15, Width::Fp16] {
            let bits = width.fingerprint_bits();
            let approx = 2.0 * width.slots() as f64 * 0.95 / (1u64 << bits) as f64;
            let exact = design_false_positive_rate(width);
            assert!(
                (exact / approx - 1.0).abs() < 0.02,
                "{bits}: {exact} vs {approx}"
            );
        }
    }

    #[test]
    fn the_narrowest_width_that_meets_the_rate_is_chosen() {
        assert_eq!(fingerprint_bits_for(None, None), Ok(16));
        assert_eq!(fingerprint_bits_for(None, Some(0.05)), Ok(8));
        assert_eq!(fingerprint_bits_for(None, Some(0.01)), Ok(12));
        assert_eq!(fingerprint_bits_for(None, Some(0.003)), Ok(12));
        assert_eq!(fingerprint_bits_for(None, Some(0.002)), Ok(16));
        assert_eq!(fingerprint_bits_for(Some(12), None), Ok(12));
        assert_eq!(fingerprint_bits_for(Some(16), Some(0.05)), Ok(16));
        assert!(matches!(
            fingerprint_bits_for(Some(8), Some(0.01)),
            Err(BuildError::FingerprintBitsTooFewForRate { bits: 8, .. })
        ));
        assert!(matches!(
            fingerprint_bits_for(None, Some(1e-9)),
            Err(BuildError::UnachievableFalsePositiveRate { .. })
        ));
        assert!(matches!(
            fingerprint_bits_for(Some(10), None),
            Err(BuildError::UnsupportedFingerprintBits { bits: 10 })
        ));
        for rate in [0.0, 1.0, -0.5, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                fingerprint_bits_for(None, Some(rate)),
                Err(BuildError::InvalidFalsePositiveRate { .. })
            ));
        }
    }

    #[test]
    fn sizing_does_not_round_to_powers_of_two() {
        // 3,000,000 keys at 16 bits: buckets within 5% of 3e6 x 16 / 0.95 bits.
        let buckets = buckets_for(3_000_000, 4).unwrap();
        let bits = buckets as f64 * 64.0;
        let ideal = 3_000_000.0 * 16.0 / 0.95;
        assert!(bits <= ideal * 1.05, "{bits} bits vs {ideal}");
        assert!(buckets * 4 >= 3_000_000);
        assert_eq!(buckets_for(1, 4), Some(4));
        assert!(buckets_for(max_capacity(4), 4).is_some());
        assert!(buckets_for(max_capacity(4) + 1, 4).is_none());
        assert!(max_capacity(4) > 16_000_000_000);
        // Five slots: 64-bit buckets for 12.8 bits per slot, 13.5 per key at 95% load.
        let buckets = buckets_for(3_000_000, 5).unwrap();
        let bits = buckets as f64 * 64.0;
        let ideal = 3_000_000.0 * 12.8 / 0.95;
        assert!(bits <= ideal * 1.05, "{bits} bits vs {ideal}");
        assert!(buckets * 5 >= 3_000_000);
        assert!(max_capacity(5) > max_capacity(4));
    }
}
