//! The [`Stats`] snapshot of a filter's size and operation counters.

/// A snapshot of a filter's size and operation counters, from
/// [`CuckooFilter::stats`](crate::CuckooFilter::stats).
///
/// Counters are read one by one while other threads may be working, so under concurrency the
/// fields are each accurate but not taken at one instant.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::CuckooFilter;
///
/// let filter = CuckooFilter::with_capacity(1_000);
/// filter.insert("alice").unwrap();
/// let stats = filter.stats();
/// assert_eq!(stats.len, 1);
/// assert_eq!(stats.inserts, 1);
/// assert_eq!(stats.path_length_histogram[0], 1); // placed without displacing anything
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// Fingerprints stored (as [`CuckooFilter::len`](crate::CuckooFilter::len)).
    pub len: usize,
    /// Fingerprint slots (as [`CuckooFilter::capacity`](crate::CuckooFilter::capacity)).
    pub capacity: usize,
    /// `len / capacity`.
    pub load_factor: f64,
    /// Successful inserts (including `insert_unique` calls that added a copy).
    pub inserts: u64,
    /// Inserts that returned an [`InsertError`](crate::InsertError), for any reason.
    pub failed_inserts: u64,
    /// Of `failed_inserts`, those that gave up because other writers kept changing the cuckoo
    /// path ([`InsertError::Contended`](crate::InsertError::Contended)).
    pub failed_inserts_contended: u64,
    /// Fingerprints moved to their alternate bucket to make room, in total.
    pub displacements: u64,
    /// The most fingerprints one successful insert moved (with [`Displacement::RandomWalk`]
    /// this can exceed the histogram's range).
    ///
    /// [`Displacement::RandomWalk`]: crate::Displacement::RandomWalk
    pub max_displacements: u64,
    /// Successful inserts by the number of displacements each needed: entry `d` counts inserts
    /// that moved `d` fingerprints (the last entry also counts longer ones). Its length is the
    /// filter's maximum path length.
    pub path_length_histogram: Vec<u64>,
    /// Cuckoo paths that another writer changed between search and execution, so the insert
    /// searched again.
    pub path_retries: u64,
    /// Lookup attempts that re-read their buckets because a writer changed their lock stripe
    /// during the read (a displacement in the key's buckets, or any insert or remove in the
    /// same stripe).
    pub read_retries: u64,
    /// Lookups that kept failing validation and answered "present" rather than wait longer,
    /// and counts that kept failing it and counted under the locks instead.
    pub read_fallbacks: u64,
    /// Tables added because an insert found no room (see
    /// [`Builder::growth`](crate::Builder::growth)); the filter probes `1 + growth_steps`
    /// tables per lookup.
    pub growth_steps: usize,
    /// The share of the newest table's bucket overflow bits that are set (sampled from up to
    /// 1,024 buckets; 0 for the 8-bit class and for filters loaded from format-2 snapshots of
    /// the 16-bit class, which have none). A negative lookup whose bit is clear reads one
    /// cache line instead of two; bits are never cleared, so the share only grows with
    /// displacements and inserts into alternate buckets until a rebuild (see
    /// [`RebuildPolicy::max_overflow_share`](crate::guard::RebuildPolicy::max_overflow_share)).
    pub overflow_share: f64,
}

impl Stats {
    /// Adds the counters and sizes of another table of the same filter.
    pub(crate) fn absorb(&mut self, other: &Stats) {
        self.len += other.len;
        self.capacity += other.capacity;
        self.load_factor = if self.capacity == 0 {
            0.0
        } else {
            self.len as f64 / self.capacity as f64
        };
        self.inserts += other.inserts;
        self.failed_inserts += other.failed_inserts;
        self.failed_inserts_contended += other.failed_inserts_contended;
        self.displacements += other.displacements;
        self.max_displacements = self.max_displacements.max(other.max_displacements);
        for (mine, theirs) in self
            .path_length_histogram
            .iter_mut()
            .zip(&other.path_length_histogram)
        {
            *mine += theirs;
        }
        self.path_retries += other.path_retries;
        self.read_retries += other.read_retries;
        self.read_fallbacks += other.read_fallbacks;
        self.overflow_share = other.overflow_share;
    }
}
