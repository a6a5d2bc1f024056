//! What a guard's online rebuild is told ([`RebuildPolicy`]) and what it reports
//! ([`RebuildReport`]).

use std::fmt;
use std::time::Duration;

/// When a guard rebuilds its filter from the store on its own, and how.
///
/// A rebuild scans the store's keys into a new filter sized for them (with headroom) while
/// lookups and writes go on, then swaps it in: the false-positive rate returns to the design
/// point, grown tables and stale copies are gone. See
/// [`CacheGuard::rebuild`](super::CacheGuard::rebuild).
///
/// Automatic rebuilds start when the filter's load passes `load_threshold`, when it has grown
/// (an insert found no room and a table was added), or when stale copies pass `stale_share` of
/// its fingerprints; never two at once, and after a failed one the next waits (1 second,
/// doubling to a minute). A [`CacheGuard`](super::CacheGuard) runs them on a thread of their
/// own; an [`AsyncCacheGuard`](super::AsyncCacheGuard) as a tokio task, with the `tokio`
/// feature and inside a runtime (otherwise call its `rebuild` yourself).
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, MemoryStore, RebuildPolicy};
/// use cuckoo_guard::CuckooFilter;
///
/// let policy = RebuildPolicy::default().load_threshold(0.8)?.page_size(5_000)?;
/// let guard = CacheGuard::with_policy(
///     CuckooFilter::with_capacity(1_000),
///     MemoryStore::<u64, ()>::new(),
///     policy,
/// );
/// assert_eq!(guard.policy().load_threshold_value(), 0.8);
/// # Ok::<(), cuckoo_guard::guard::PolicyError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RebuildPolicy {
    automatic: bool,
    load_threshold: f64,
    stale_share: f64,
    max_tables: usize,
    overflow_share: f64,
    headroom: f64,
    page_size: usize,
}

impl Default for RebuildPolicy {
    /// Automatic, at 90% load, on growth, at 10% stale copies, at half the overflow bits set;
    /// sized for 1.5 times the keys found; scanned 1,000 keys per page.
    fn default() -> Self {
        RebuildPolicy {
            automatic: true,
            load_threshold: 0.9,
            stale_share: 0.1,
            max_tables: 1,
            overflow_share: 0.5,
            headroom: 1.5,
            page_size: 1_000,
        }
    }
}

/// A [`RebuildPolicy`] setting out of range.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{PolicyError, RebuildPolicy};
///
/// let error = RebuildPolicy::default().load_threshold(f64::NAN).unwrap_err();
/// assert!(matches!(error, PolicyError::LoadThreshold(_)));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PolicyError {
    /// The load threshold is not in (0, 1].
    LoadThreshold(f64),
    /// The stale share is not in (0, 1].
    StaleShare(f64),
    /// The headroom is not in [1, 16].
    Headroom(f64),
    /// The page size is 0.
    PageSize,
    /// The overflow share is not in (0, 1].
    OverflowShare(f64),
    /// The table bound is 0.
    MaxTables,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::LoadThreshold(v) => {
                write!(f, "rebuild load threshold {v} is not in (0, 1]")
            }
            PolicyError::StaleShare(v) => write!(f, "rebuild stale share {v} is not in (0, 1]"),
            PolicyError::Headroom(v) => write!(f, "rebuild headroom {v} is not in [1, 16]"),
            PolicyError::PageSize => write!(f, "rebuild page size must be at least 1"),
            PolicyError::OverflowShare(v) => {
                write!(f, "rebuild overflow share {v} is not in (0, 1]")
            }
            PolicyError::MaxTables => {
                write!(
                    f,
                    "a negative lookup must be allowed to read at least 1 table"
                )
            }
        }
    }
}

impl std::error::Error for PolicyError {}

impl RebuildPolicy {
    /// No automatic rebuilds: only [`CacheGuard::rebuild`](super::CacheGuard::rebuild) calls.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::RebuildPolicy;
    ///
    /// assert!(!RebuildPolicy::manual().is_automatic());
    /// ```
    pub fn manual() -> Self {
        RebuildPolicy {
            automatic: false,
            ..RebuildPolicy::default()
        }
    }

    /// Whether rebuilds start on their own.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::RebuildPolicy;
    ///
    /// assert!(RebuildPolicy::default().is_automatic());
    /// ```
    pub fn is_automatic(&self) -> bool {
        self.automatic
    }

    /// Rebuild once the filter's load (fingerprints per slot) reaches `threshold`, in (0, 1].
    ///
    /// # Errors
    ///
    /// [`PolicyError::LoadThreshold`] outside (0, 1] or NaN.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::RebuildPolicy;
    ///
    /// assert!(RebuildPolicy::default().load_threshold(0.85).is_ok());
    /// assert!(RebuildPolicy::default().load_threshold(0.0).is_err());
    /// ```
    pub fn load_threshold(mut self, threshold: f64) -> Result<Self, PolicyError> {
        if !(threshold > 0.0 && threshold <= 1.0) {
            return Err(PolicyError::LoadThreshold(threshold));
        }
        self.load_threshold = threshold;
        Ok(self)
    }

    /// The load at which automatic rebuilds start.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::RebuildPolicy;
    ///
    /// assert_eq!(RebuildPolicy::default().load_threshold_value(), 0.9);
    /// ```
    pub fn load_threshold_value(&self) -> f64 {
        self.load_threshold
    }

    /// Rebuild once the stale copies counted since the last rebuild reach `share` of the
    /// filter's fingerprints, in (0, 1].
    ///
    /// # Errors
    ///
    /// [`PolicyError::StaleShare`] outside (0, 1] or NaN.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::RebuildPolicy;
    ///
    /// assert!(RebuildPolicy::default().stale_share(0.05).is_ok());
    /// assert!(RebuildPolicy::default().stale_share(2.0).is_err());
    /// ```
    pub fn stale_share(mut self, share: f64) -> Result<Self, PolicyError> {
        if !(share > 0.0 && share <= 1.0) {
            return Err(PolicyError::StaleShare(share));
        }
        self.stale_share = share;
        Ok(self)
    }

    /// Whether a filter that added a table (see [`Growth`](crate::Growth)) is rebuilt into one
    /// right-sized table.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::RebuildPolicy;
    ///
    /// let policy = RebuildPolicy::default().on_growth(false);
    /// assert_eq!(policy, RebuildPolicy::default().on_growth(false));
    /// ```
    pub fn on_growth(mut self, rebuild: bool) -> Self {
        self.max_tables = if rebuild { 1 } else { usize::MAX };
        self
    }

    /// Rebuild once a negative lookup reads more than `tables` tables: a filter that grew
    /// (see [`Growth`](crate::Growth)) answers "absent" only after reading every table it
    /// added, so each growth step makes every blocked request slower (BENCHMARKS.md: a miss
    /// on 2 tables runs at about half the speed of one right-sized table, on 4 at a quarter).
    /// The default, 1, rebuilds at the first growth step, as [`on_growth(true)`]; a service
    /// that would rather rebuild less often bounds the cost with a larger number. A bound
    /// above the tables the filter's [`Growth`](crate::Growth) allows never triggers.
    ///
    /// [`on_growth(true)`]: Self::on_growth
    ///
    /// # Errors
    ///
    /// [`PolicyError::MaxTables`] for 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::RebuildPolicy;
    ///
    /// let policy = RebuildPolicy::default().max_tables(3)?;
    /// assert_eq!(policy.max_tables_value(), 3);
    /// assert_eq!(RebuildPolicy::default().on_growth(false).max_tables_value(), usize::MAX);
    /// assert!(RebuildPolicy::default().max_tables(0).is_err());
    /// # Ok::<(), cuckoo_guard::guard::PolicyError>(())
    /// ```
    pub fn max_tables(mut self, tables: usize) -> Result<Self, PolicyError> {
        if tables == 0 {
            return Err(PolicyError::MaxTables);
        }
        self.max_tables = tables;
        Ok(self)
    }

    /// The most tables a negative lookup may read before a rebuild ([`max_tables`]).
    ///
    /// [`max_tables`]: Self::max_tables
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(cuckoo_guard::guard::RebuildPolicy::default().max_tables_value(), 1);
    /// ```
    pub fn max_tables_value(&self) -> usize {
        self.max_tables
    }

    /// Rebuild once `share` of the filter's overflow bits are set, in (0, 1] (1: never for this
    /// reason).
    ///
    /// A negative lookup in the 16-bit class reads one cache line when its fingerprint's
    /// overflow bit is clear in its primary bucket, two when it is set. Displacements and
    /// inserts into alternate buckets set bits and nothing but a rebuild clears them, so in a
    /// long-lived filter with churn the share creeps up and negatives slow down; a rebuilt
    /// filter starts with the bits its keys need (see [`Stats::overflow_share`]).
    ///
    /// [`Stats::overflow_share`]: crate::Stats::overflow_share
    ///
    /// # Errors
    ///
    /// [`PolicyError::OverflowShare`] outside (0, 1] or NaN.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::RebuildPolicy;
    ///
    /// assert!(RebuildPolicy::default().max_overflow_share(0.4).is_ok());
    /// assert!(RebuildPolicy::default().max_overflow_share(0.0).is_err());
    /// ```
    pub fn max_overflow_share(mut self, share: f64) -> Result<Self, PolicyError> {
        if !(share > 0.0 && share <= 1.0) {
            return Err(PolicyError::OverflowShare(share));
        }
        self.overflow_share = share;
        Ok(self)
    }

    /// The rebuilt filter's capacity as a multiple of the fingerprints the old one holds when
    /// the rebuild starts (the new keys' room before the next rebuild), in [1, 16].
    ///
    /// A rebuilt filter is never smaller than the guard's first filter was built for, unless
    /// that capacity passes 8 times the capacity the headroom asks for plus 65,536 keys: then
    /// it is built for that much, so that what a rebuild allocates stays proportional to the
    /// keys it holds.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Headroom`] outside [1, 16] or NaN.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::RebuildPolicy;
    ///
    /// assert!(RebuildPolicy::default().headroom(2.0).is_ok());
    /// assert!(RebuildPolicy::default().headroom(0.5).is_err());
    /// ```
    pub fn headroom(mut self, headroom: f64) -> Result<Self, PolicyError> {
        if !(1.0..=16.0).contains(&headroom) {
            return Err(PolicyError::Headroom(headroom));
        }
        self.headroom = headroom;
        Ok(self)
    }

    /// Keys per store scan call during a rebuild.
    ///
    /// # Errors
    ///
    /// [`PolicyError::PageSize`] for 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::RebuildPolicy;
    ///
    /// assert!(RebuildPolicy::default().page_size(0).is_err());
    /// ```
    pub fn page_size(mut self, keys: usize) -> Result<Self, PolicyError> {
        if keys == 0 {
            return Err(PolicyError::PageSize);
        }
        self.page_size = keys;
        Ok(self)
    }

    pub(crate) fn page_size_value(&self) -> usize {
        self.page_size
    }

    pub(crate) fn headroom_value(&self) -> f64 {
        self.headroom
    }

    pub(crate) fn stale_share_value(&self) -> f64 {
        self.stale_share
    }

    pub(crate) fn overflow_share_value(&self) -> f64 {
        self.overflow_share
    }
}

/// Why a rebuild ran.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::RebuildReason;
///
/// assert_eq!(RebuildReason::Growth.to_string(), "the filter grew");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RebuildReason {
    /// A `rebuild` call.
    Requested,
    /// The load passed the policy's threshold.
    Load,
    /// The filter added more tables than the policy's bound
    /// ([`RebuildPolicy::max_tables`]).
    Growth,
    /// Stale copies passed the policy's share.
    StaleCopies,
    /// Overflow bits passed the policy's share.
    OverflowBits,
    /// The filter reached its memory ceiling
    /// ([`Builder::max_memory`](crate::Builder::max_memory)) and holds no copy of some
    /// created keys: until a rebuild fits, lookups it misses pass to the store.
    MemoryLimit,
}

impl fmt::Display for RebuildReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RebuildReason::Requested => "requested",
            RebuildReason::Load => "the load passed the threshold",
            RebuildReason::Growth => "the filter grew",
            RebuildReason::StaleCopies => "stale copies passed the share",
            RebuildReason::OverflowBits => "overflow bits passed the share",
            RebuildReason::MemoryLimit => "the filter reached its memory ceiling",
        })
    }
}

/// What a finished rebuild did.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, MemoryStore, RebuildPolicy};
/// use cuckoo_guard::CuckooFilter;
///
/// let store = MemoryStore::from_rows((0..500u32).map(|k| (k, ())));
/// let filter = CuckooFilter::with_capacity(100);
/// let guard = CacheGuard::with_policy(filter, store, RebuildPolicy::manual());
/// guard.warm_up(100, |_| {})?;
/// assert!(guard.stats().filter_growth_steps > 0);
/// let report = guard.rebuild()?;
/// assert_eq!(report.keys_scanned, 500);
/// assert_eq!(guard.stats().filter_growth_steps, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RebuildReport {
    /// Why it ran.
    pub reason: RebuildReason,
    /// Keys the store's scan returned.
    pub keys_scanned: u64,
    /// Scan pages.
    pub pages: u64,
    /// From the start to the swap.
    pub duration: Duration,
    /// Fingerprints in the old filter when the rebuild started (keys plus stale copies).
    pub len_before: usize,
    /// Tables the old filter had added.
    pub growth_steps_before: usize,
    /// Fingerprints in the new filter when it was swapped in.
    pub len_after: usize,
    /// The new filter's capacity.
    pub capacity_after: usize,
}
