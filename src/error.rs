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
    /// buckets hold 8 copies at most; 10 in the 12-bit class, whose buckets have five slots).
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
    /// The filter was full, and the table it would add would take its memory past the ceiling
    /// set with [`Builder::max_memory`](crate::Builder::max_memory).
    MemoryLimit {
        /// The ceiling, in bytes.
        limit: usize,
        /// What the filter would use with the added table, in bytes.
        needed: usize,
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
            InsertError::MemoryLimit { limit, needed } => write!(
                f,
                "cuckoo filter is full, and another table would take it to {needed} bytes, past \
                 its memory ceiling of {limit} bytes"
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
    /// The fingerprint width is not one of the supported classes (8, 12 or 16 bits per slot).
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
    /// The first table alone would take more memory than the ceiling set with
    /// [`Builder::max_memory`](crate::Builder::max_memory).
    MemoryLimit {
        /// The ceiling, in bytes.
        limit: usize,
        /// What the first table takes, in bytes.
        needed: usize,
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
                 reaches (best: {best:.3e} with the 16-bit class)"
            ),
            BuildError::UnsupportedFingerprintBits { bits } => {
                write!(
                    f,
                    "{bits}-bit fingerprints are not supported: use 8, 12 or 16"
                )
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
            BuildError::MemoryLimit { limit, needed } => write!(
                f,
                "the filter's first table takes {needed} bytes, past its memory ceiling of \
                 {limit} bytes: ask for a smaller capacity or a higher ceiling"
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// Why a snapshot could not be written or read ([`CuckooFilter::write_snapshot`],
/// [`CuckooFilter::read_snapshot`] and their `_file` and `_with_hasher` forms, and
/// [`snapshot::inspect`](crate::snapshot::inspect)).
///
/// A read that fails returns no filter at all: a snapshot is loaded whole and checked, or
/// refused, never loaded in part.
///
/// [`CuckooFilter::write_snapshot`]: crate::CuckooFilter::write_snapshot
/// [`CuckooFilter::read_snapshot`]: crate::CuckooFilter::read_snapshot
///
/// # Examples
///
/// ```
/// use cuckoo_guard::{CuckooFilter, SnapshotError};
///
/// let filter = CuckooFilter::builder().capacity(1_000).seed(1).build()?;
/// let mut bytes = Vec::new();
/// filter.write_snapshot(&mut bytes)?;
/// bytes.truncate(bytes.len() - 1);
/// let error = CuckooFilter::read_snapshot(&bytes[..]).unwrap_err();
/// assert!(matches!(error, SnapshotError::Truncated));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Reading or writing failed.
    Io(std::io::Error),
    /// The input ended before the snapshot did.
    Truncated,
    /// The input does not start with a snapshot's magic bytes: not a snapshot.
    BadMagic,
    /// The snapshot's format version is not one this build reads (a newer one, say).
    UnsupportedVersion {
        /// The version the input names.
        found: u16,
        /// The version this build writes (it also reads the one before).
        supported: u16,
    },
    /// The header's checksum does not match its bytes: the header is damaged.
    HeaderChecksum,
    /// The checksum over the tables does not match them: the body is damaged.
    BodyChecksum,
    /// The header checks out but holds a value no writer produces.
    InvalidHeader {
        /// The field, as the format documentation names it.
        field: &'static str,
    },
    /// The header's capacity does not match its base table: a filter built for `built_for`
    /// keys has another number of base buckets than the `base_buckets` the header names. No
    /// writer produces such a file; the capacity would size the guard's rebuilds.
    CapacityMismatch {
        /// The capacity, in keys, the header claims the filter was built for.
        built_for: u64,
        /// The base table's buckets the header names.
        base_buckets: u64,
    },
    /// The body checks out but is inconsistent with itself.
    InvalidBody {
        /// What is wrong.
        what: &'static str,
    },
    /// The snapshot was written by a filter whose hashing differs from this build's or from
    /// the hasher given: its fingerprints would be looked up in the wrong buckets.
    HasherMismatch,
    /// The snapshot's filter used a caller's hasher, whose keys the file does not hold: read
    /// it with [`read_snapshot_with_hasher`](crate::CuckooFilter::read_snapshot_with_hasher).
    HashKeysMissing,
    /// The tables could not be allocated.
    AllocationFailed {
        /// Bytes asked of the allocator.
        bytes: usize,
    },
    /// A copy the snapshot carries beside its tables (one a concurrent writer moved while
    /// the snapshot was taken) found no free slot in its table: the snapshot cannot be loaded
    /// without losing a key. Take it again.
    Overfull,
    /// The input holds more bytes after the snapshot (only the `_file` readers check).
    TrailingData,
    /// A sealed snapshot's MAC does not check out under the store's seal secret: the file
    /// was not written under that seal (planted, altered, or not sealed at all).
    NotAuthentic,
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Io(e) => write!(f, "snapshot I/O failed: {e}"),
            SnapshotError::Truncated => write!(f, "the snapshot is truncated"),
            SnapshotError::BadMagic => write!(f, "not a cuckoo-guard snapshot (bad magic bytes)"),
            SnapshotError::UnsupportedVersion { found, supported } => write!(
                f,
                "snapshot format version {found} is not supported (this build reads versions 2 to \
                 {supported})"
            ),
            SnapshotError::HeaderChecksum => {
                write!(f, "the snapshot's header is corrupt (checksum mismatch)")
            }
            SnapshotError::BodyChecksum => {
                write!(f, "the snapshot's tables are corrupt (checksum mismatch)")
            }
            SnapshotError::InvalidHeader { field } => {
                write!(f, "the snapshot's header holds an invalid {field}")
            }
            SnapshotError::CapacityMismatch {
                built_for,
                base_buckets,
            } => write!(
                f,
                "the snapshot's header claims a filter built for {built_for} keys, whose base \
                 table would not have the {base_buckets} buckets it names"
            ),
            SnapshotError::InvalidBody { what } => write!(f, "the snapshot is invalid: {what}"),
            SnapshotError::HasherMismatch => write!(
                f,
                "the snapshot was written with different hashing (another hasher, or a build \
                 whose ahash hashes differently); its fingerprints cannot be used"
            ),
            SnapshotError::HashKeysMissing => write!(
                f,
                "the snapshot's filter used its own hasher, whose keys the file does not hold: \
                 read it with read_snapshot_with_hasher"
            ),
            SnapshotError::AllocationFailed { bytes } => {
                write!(
                    f,
                    "could not allocate {bytes} bytes for the snapshot's tables"
                )
            }
            SnapshotError::Overfull => write!(
                f,
                "the snapshot's tables have no room for a copy moved while it was taken; take \
                 the snapshot again"
            ),
            SnapshotError::TrailingData => {
                write!(f, "the snapshot file holds more bytes after the snapshot")
            }
            SnapshotError::NotAuthentic => write!(
                f,
                "the snapshot's MAC does not check out under the store's seal (not written \
                 under that seal)"
            ),
        }
    }
}

impl std::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SnapshotError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for SnapshotError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            SnapshotError::Truncated
        } else {
            SnapshotError::Io(e)
        }
    }
}
