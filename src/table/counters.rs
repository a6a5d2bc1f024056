//! A table's operation counters, read into a [`Stats`].
//!
//! Writers bump the counters once per insert; readers touch them only on the retry path (a
//! validation failed because a writer changed the stripe word during the lookup), never on a
//! plain lookup. They are [`Sharded`] by thread, so each thread bumps counters in its own
//! cache line.

use super::MAX_PATH_LEN;
use crate::sharded::{add, bump, Sharded};
use crate::stats::Stats;
use crate::sync::{AtomicU64, Ordering};

#[derive(Debug)]
struct Shard {
    /// Successful inserts by number of displacements (the last bucket also holds longer ones,
    /// which only repeated searches under contention produce).
    inserts_by_displacements: [AtomicU64; MAX_PATH_LEN],
    displacements: AtomicU64,
    /// The most displacements one successful insert made.
    max_displacements: AtomicU64,
    failed_full: AtomicU64,
    failed_contended: AtomicU64,
    path_retries: AtomicU64,
    read_retries: AtomicU64,
    read_fallbacks: AtomicU64,
}

impl Shard {
    fn new() -> Self {
        Shard {
            inserts_by_displacements: std::array::from_fn(|_| AtomicU64::new(0)),
            displacements: AtomicU64::new(0),
            max_displacements: AtomicU64::new(0),
            failed_full: AtomicU64::new(0),
            failed_contended: AtomicU64::new(0),
            path_retries: AtomicU64::new(0),
            read_retries: AtomicU64::new(0),
            read_fallbacks: AtomicU64::new(0),
        }
    }
}

/// Sharded operation counters of one table.
#[derive(Debug)]
pub(crate) struct Counters {
    shards: Sharded<Shard>,
}

impl Counters {
    pub(crate) fn new() -> Self {
        Counters {
            shards: Sharded::new(Shard::new),
        }
    }

    #[inline]
    fn shard(&self) -> &Shard {
        self.shards.local()
    }

    #[inline]
    pub(crate) fn inserted(&self, displacements: usize) {
        let shard = self.shard();
        bump(&shard.inserts_by_displacements[displacements.min(MAX_PATH_LEN - 1)]);
        // A plain load first: most inserts set no new maximum and need no read-modify-write.
        // ORDERING: Relaxed; a statistic, publishes nothing.
        if displacements as u64 > shard.max_displacements.load(Ordering::Relaxed) {
            // ORDERING: Relaxed; as above.
            shard
                .max_displacements
                .fetch_max(displacements as u64, Ordering::Relaxed);
        }
    }

    #[inline]
    pub(crate) fn displaced(&self, hops: usize) {
        if hops > 0 {
            add(&self.shard().displacements, hops as u64);
        }
    }

    #[inline]
    pub(crate) fn failed_full(&self) {
        bump(&self.shard().failed_full);
    }

    #[inline]
    pub(crate) fn failed_contended(&self) {
        bump(&self.shard().failed_contended);
    }

    #[inline]
    pub(crate) fn path_retry(&self) {
        bump(&self.shard().path_retries);
    }

    #[cold]
    pub(crate) fn read_retry(&self) {
        bump(&self.shard().read_retries);
    }

    #[cold]
    pub(crate) fn read_fallback(&self) {
        bump(&self.shard().read_fallbacks);
    }

    fn sum(&self, field: impl Fn(&Shard) -> &AtomicU64) -> u64 {
        self.shards.sum(field)
    }

    /// The number of read retries so far (loom models use it to prove a race was explored).
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn read_retries(&self) -> u64 {
        self.sum(|s| &s.read_retries)
    }

    /// The number of path searches repeated because a hop was refused (loom census).
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn path_retries(&self) -> u64 {
        self.sum(|s| &s.path_retries)
    }

    /// The number of reads that gave up optimism (loom models assert none did, or that one
    /// did where the fallback is the step under test).
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn read_fallbacks(&self) -> u64 {
        self.sum(|s| &s.read_fallbacks)
    }

    /// Heap bytes of any table's counters.
    pub(crate) const HEAP_BYTES: usize = Sharded::<Shard>::HEAP_BYTES;

    pub(crate) fn heap_bytes(&self) -> usize {
        self.shards.heap_bytes()
    }

    pub(crate) fn snapshot(&self, len: usize, capacity: usize, max_path_len: usize) -> Stats {
        let mut histogram = vec![0u64; max_path_len.max(1)];
        for shard in self.shards.iter() {
            for (d, counter) in shard.inserts_by_displacements.iter().enumerate() {
                // ORDERING: Relaxed; a statistic.
                let n = counter.load(Ordering::Relaxed);
                let last = histogram.len() - 1;
                histogram[d.min(last)] += n;
            }
        }
        Stats {
            len,
            capacity,
            load_factor: if capacity == 0 {
                0.0
            } else {
                len as f64 / capacity as f64
            },
            inserts: histogram.iter().sum(),
            failed_inserts: self.sum(|s| &s.failed_full) + self.sum(|s| &s.failed_contended),
            failed_inserts_contended: self.sum(|s| &s.failed_contended),
            displacements: self.sum(|s| &s.displacements),
            max_displacements: self
                .shards
                .iter()
                // ORDERING: Relaxed; a statistic.
                .map(|s| s.max_displacements.load(Ordering::Relaxed))
                .max()
                .unwrap_or(0),
            path_length_histogram: histogram,
            path_retries: self.sum(|s| &s.path_retries),
            read_retries: self.sum(|s| &s.read_retries),
            read_fallbacks: self.sum(|s| &s.read_fallbacks),
            growth_steps: 0,
            overflow_share: 0.0,
        }
    }
}
