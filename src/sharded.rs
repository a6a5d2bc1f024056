//! [`Sharded`]: blocks of statistics counters split over per-thread cache lines.
//!
//! A counter that every thread bumps on a hot path would move its cache line between cores on
//! each bump. A [`Sharded`] block keeps [`SHARDS`] cache-padded copies; each thread bumps the
//! copy its [`thread_index`] picks, so the first `SHARDS` threads of a process each write a
//! line no other thread writes, and a reader sums over the copies. Every counter is a
//! statistic: Relaxed, publishing nothing, so a sum taken while threads run is accurate per
//! counter but not taken at one instant.

use crossbeam_utils::CachePadded;

use crate::sync::{thread_index, AtomicU64, Ordering};

/// Copies per block: a power of two, so picking a copy is a mask.
const SHARDS: usize = 8;

/// [`SHARDS`] cache-padded copies of a block of counters `T`, one per thread.
#[derive(Debug)]
pub(crate) struct Sharded<T> {
    shards: Box<[CachePadded<T>; SHARDS]>,
}

impl<T> Sharded<T> {
    /// Copies made by `make`, which should build a block of zeroed counters.
    pub(crate) fn new(mut make: impl FnMut() -> T) -> Self {
        Sharded {
            shards: Box::new(std::array::from_fn(|_| CachePadded::new(make()))),
        }
    }

    /// The calling thread's copy.
    #[inline]
    pub(crate) fn local(&self) -> &T {
        &self.shards[thread_index() % SHARDS]
    }

    /// Every copy, to read a counter across threads.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.shards.iter().map(|shard| &**shard)
    }

    /// The sum of one counter over every copy.
    pub(crate) fn sum(&self, field: impl Fn(&T) -> &AtomicU64) -> u64 {
        // ORDERING: Relaxed; a statistic.
        self.iter().map(|s| field(s).load(Ordering::Relaxed)).sum()
    }

    /// Heap bytes of the copies, the same for every `Sharded<T>`.
    pub(crate) const HEAP_BYTES: usize = std::mem::size_of::<[CachePadded<T>; SHARDS]>();

    /// Heap bytes of the copies ([`HEAP_BYTES`](Self::HEAP_BYTES)).
    pub(crate) fn heap_bytes(&self) -> usize {
        Self::HEAP_BYTES
    }
}

/// Adds one to a statistics counter.
#[inline]
pub(crate) fn bump(counter: &AtomicU64) {
    add(counter, 1);
}

/// Bumps a statistics counter and returns its new value (this shard's copy).
#[inline]
pub(crate) fn bump_and_get(counter: &AtomicU64) -> u64 {
    // ORDERING: Relaxed; a statistic, publishes nothing.
    counter.fetch_add(1, Ordering::Relaxed) + 1
}

/// Adds `by` to a statistics counter.
#[inline]
pub(crate) fn add(counter: &AtomicU64, by: u64) {
    // ORDERING: Relaxed; a statistic, publishes nothing.
    counter.fetch_add(by, Ordering::Relaxed);
}

#[cfg(all(test, not(cuckoo_loom)))]
mod tests {
    use super::*;

    #[test]
    fn threads_bump_their_own_copies_and_sums_see_every_bump() {
        let block = Sharded::new(|| AtomicU64::new(0));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1_000 {
                        bump(block.local());
                    }
                });
            }
        });
        assert_eq!(block.sum(|c| c), 4_000);
        // A thread's number is fixed, and no two threads share one.
        let here = thread_index();
        assert_eq!(thread_index(), here);
        assert_ne!(std::thread::spawn(thread_index).join().unwrap(), here);
    }
}
