//! Error types.

use std::fmt;

/// Why [`CuckooFilter::insert`](crate::CuckooFilter::insert) or
/// [`insert_unique`](crate::CuckooFilter::insert_unique) stored nothing.
///
/// After either error the filter holds the same fingerprints as before the call: none was
/// stored, none was lost or duplicated, no victim slot was used, and every key inserted
/// earlier is still found. (With [`Contended`](InsertError::Contended), hops that completed
/// before another writer invalidated the path stay done; each only moved a fingerprint to
/// the other bucket of its own pair, where lookups find it.)
///
/// # Examples
///
/// ```
/// use cuckoo_guard::{CuckooFilter, Growth, InsertError};
///
/// let filter = CuckooFilter::builder()
///     .capacity(8)
///     .growth(Growth::Fixed)
///     .seed(1)
///     .build()
///     .unwrap();
/// let mut inserted = 0;
/// let error = loop {
///     match filter.insert(&inserted) {
///         Ok(()) => inserted += 1,
///         Err(e) => break e,
///     }
/// };
/// assert!(matches!(error, InsertError::Full { .. }));
/// assert_eq!(filter.len(), inserted);
/// assert!((0..inserted).all(|k| filter.contains(&k)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InsertError {
    /// No cuckoo path within the maximum path length leads to a free slot, and the filter may
    /// not add a table ([`Growth::Fixed`](crate::Growth::Fixed), or every table allowed was
    /// added): the filter is, for this key, full. Without growth it usually happens near 95%
    /// load; it also happens when one key is inserted more than 8 times per table (its two
    /// buckets hold 8 copies at most).
    Full {
        /// Fingerprints stored when the insert gave up.
        len: usize,
        /// Fingerprint slots in the filter.
        capacity: usize,
    },
    /// Other writers changed every cuckoo path this insert found before it could use it, 32
    /// times in a row. The filter is not necessarily full; retrying may succeed.
    Contended,
    /// The filter was full and tried to add a table, but its buckets could not be allocated.
    GrowthAllocationFailed {
        /// Bytes asked of the allocator.
        bytes: usize,
    },
}

impl fmt::Display for InsertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InsertError::Full { len, capacity } => write!(
                f,
                "cuckoo filter is full: no free slot within the path length bound \
                 ({len} of {capacity} slots used) and no table may be added; build a larger \
                 filter or allow more growth"
            ),
            InsertError::GrowthAllocationFailed { bytes } => write!(
                f,
                "cuckoo filter is full and could not allocate {bytes} bytes for another table"
            ),
            InsertError::Contended => write!(
                f,
                "cuckoo filter insert gave up: concurrent writers kept changing its cuckoo \
                 path; the insert may be retried"
            ),
        }
    }
}

impl std::error::Error for InsertError {}

/// Why [`Builder::build`](crate::Builder::build) refused a configuration.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::{BuildError, CuckooFilter};
///
/// let error = CuckooFilter::builder().capacity(0).build().unwrap_err();
/// assert_eq!(error, BuildError::ZeroCapacity);
/// println!("{error}"); // "capacity must be at least 1 key"
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum BuildError {
    /// [`Builder::capacity`](crate::Builder::capacity) was never called.
    CapacityNotSet,
    /// The capacity was 0.
    ZeroCapacity,
    /// The capacity needs more than 2^32 buckets (about 16 billion keys).
    CapacityTooLarge {
        /// The capacity asked for.
        requested: usize,
        /// The largest capacity supported.
        max: usize,
    },
    /// The bucket array could not be allocated.
    AllocationFailed {
        /// Bytes asked of the allocator.
        bytes: usize,
    },
    /// The false-positive rate was not a number strictly between 0 and 1.
    InvalidFalsePositiveRate {
        /// The rate asked for.
        rate: f64,
    },
    /// No supported fingerprint width reaches the false-positive rate asked for.
    UnachievableFalsePositiveRate {
        /// The rate asked for.
        rate: f64,
        /// The lowest rate any supported width reaches at 95% load.
        best: f64,
    },
    /// The fingerprint width is not one of the supported widths (8 or 16 bits).
    UnsupportedFingerprintBits {
        /// The width asked for.
        bits: u32,
    },
    /// Both a width and a rate were given, and the width does not reach the rate.
    FingerprintBitsTooFewForRate {
        /// The width asked for.
        bits: u32,
        /// The rate asked for.
        rate: f64,
        /// The rate that width gives at 95% load.
        achieved: f64,
    },
    /// The maximum cuckoo path length was outside `1..=8` buckets.
    InvalidMaxPathLen {
        /// The length asked for.
        len: usize,
    },
    /// [`Displacement::RandomWalk`](crate::Displacement::RandomWalk) was given a kick limit
    /// outside `1..=100_000`.
    InvalidMaxKicks {
        /// The limit asked for.
        max_kicks: usize,
    },
    /// [`Growth::Expand`](crate::Growth::Expand) was given a factor that is not a power of two
    /// up to 16, a step limit outside `1..=32`, or both with `factor^max_steps > 2^16`.
    InvalidGrowth {
        /// The factor asked for.
        factor: usize,
        /// The step limit asked for.
        max_steps: usize,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::CapacityNotSet => write!(f, "no capacity set: call `.capacity(n)`"),
            BuildError::ZeroCapacity => write!(f, "capacity must be at least 1 key"),
            BuildError::CapacityTooLarge { requested, max } => write!(
                f,
                "capacity {requested} is too large: at most {max} keys are supported"
            ),
            BuildError::AllocationFailed { bytes } => {
                write!(
                    f,
                    "could not allocate {bytes} bytes for the filter's buckets"
                )
            }
            BuildError::InvalidFalsePositiveRate { rate } => write!(
                f,
                "false-positive rate {rate} is invalid: it must be strictly between 0 and 1"
            ),
            BuildError::UnachievableFalsePositiveRate { rate, best } => write!(
                f,
                "false-positive rate {rate:e} is below what any supported fingerprint width \
                 reaches (best: {best:.3e} with 16-bit fingerprints)"
            ),
            BuildError::UnsupportedFingerprintBits { bits } => {
                write!(f, "{bits}-bit fingerprints are not supported: use 8 or 16")
            }
            BuildError::FingerprintBitsTooFewForRate {
                bits,
                rate,
                achieved,
            } => write!(
                f,
                "{bits}-bit fingerprints give a false-positive rate of {achieved:.3e} at 95% \
                 load, above the {rate} asked for"
            ),
            BuildError::InvalidMaxPathLen { len } => write!(
                f,
                "maximum path length {len} is invalid: it must be between 1 and 8 buckets"
            ),
            BuildError::InvalidMaxKicks { max_kicks } => write!(
                f,
                "random-walk kick limit {max_kicks} is invalid: it must be between 1 and 100000"
            ),
            BuildError::InvalidGrowth { factor, max_steps } => write!(
                f,
                "growth by {factor}x up to {max_steps} times is invalid: the factor must be \
                 1, 2, 4, 8 or 16, the step limit between 1 and 32, and factor^steps at most 2^16"
            ),
        }
    }
}

impl std::error::Error for BuildError {}
