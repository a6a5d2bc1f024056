//! Key sampling without a database: the default `sample_keys` (a reservoir sample over a
//! full scan) through a store that does not override it, and the memory store's own.

use crate::common;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;

use cuckoo_guard::guard::{AsyncStore, MemoryStore, ScanPage, Store, Written};

/// A memory store that only forwards the four required calls, so sampling takes the traits'
/// defaults. Its scans page by `page` keys at most, whatever they are asked for.
struct ScanOnly {
    rows: MemoryStore<u64, u64>,
    page: usize,
}

impl ScanOnly {
    fn with_rows(rows: u64, page: usize) -> Self {
        ScanOnly {
            rows: MemoryStore::from_rows((0..rows).map(|k| (k, k))),
            page,
        }
    }
}

impl Store for ScanOnly {
    type Key = u64;
    type Value = u64;
    type Cursor = u64;
    type Error = Infallible;

    fn get(&self, key: &u64) -> Result<Option<u64>, Infallible> {
        Store::get(&self.rows, key)
    }

    fn put(&self, key: &u64, value: &u64) -> Result<Written, Infallible> {
        Store::put(&self.rows, key, value)
    }

    fn delete(&self, key: &u64) -> Result<bool, Infallible> {
        Store::delete(&self.rows, key)
    }

    fn scan_keys(
        &self,
        cursor: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, Infallible> {
        Store::scan_keys(&self.rows, cursor, limit.min(self.page))
    }
}

impl AsyncStore for ScanOnly {
    type Key = u64;
    type Value = u64;
    type Cursor = u64;
    type Error = Infallible;

    async fn get(&self, key: &u64) -> Result<Option<u64>, Infallible> {
        Store::get(self, key)
    }

    async fn put(&self, key: &u64, value: &u64) -> Result<Written, Infallible> {
        Store::put(self, key, value)
    }

    async fn delete(&self, key: &u64) -> Result<bool, Infallible> {
        Store::delete(self, key)
    }

    async fn scan_keys(
        &self,
        cursor: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, Infallible> {
        Store::scan_keys(self, cursor, limit)
    }
}

/// Counts how often each of `rows` keys is drawn by `rounds` samples of `n`, and checks each
/// sample. Every key's count is binomial (`rounds`, `n / rows`) under a uniform sampler.
fn tally(rows: u64, n: usize, rounds: usize, sample: impl Fn(usize) -> Vec<u64>) -> Vec<u32> {
    let all: BTreeSet<u64> = (0..rows).collect();
    let mut counts = vec![0u32; rows as usize];
    for _ in 0..rounds {
        let keys = sample(n);
        common::check_sample(&keys, n, &all);
        assert_eq!(keys.len(), n.min(rows as usize));
        for k in keys {
            counts[k as usize] += 1;
        }
    }
    counts
}

/// Each count within `slack` of its mean.
fn assert_uniform(counts: &[u32], mean: u32, slack: u32) {
    for (k, count) in counts.iter().enumerate() {
        assert!(
            count.abs_diff(mean) <= slack,
            "key {k} drawn {count} times, expected about {mean}: {counts:?}"
        );
    }
}

#[test]
fn the_default_sample_is_uniform_within_one_page() {
    let store = ScanOnly::with_rows(20, 1_000);
    assert!(!Store::fast_sampling(&store));
    // 4,000 samples of 5 from 20: each key about 1,000 times, a spread of about 27.
    let counts = tally(20, 5, 4_000, |n| Store::sample_keys(&store, n).unwrap());
    assert_uniform(&counts, 1_000, 150);
}

/// Across pages: the reservoir replaces kept keys with later pages' keys at the right rate.
/// 2,000 samples of 50 from 500 keys in pages of 64: each key about 200 times, a spread of
/// about 13.
#[test]
fn the_default_sample_is_uniform_across_pages() {
    let store = ScanOnly::with_rows(500, 64);
    let counts = tally(500, 50, 2_000, |n| Store::sample_keys(&store, n).unwrap());
    assert_uniform(&counts, 200, 80);
}

#[test]
fn the_default_sample_of_an_empty_or_small_store() {
    let empty = ScanOnly::with_rows(0, 10);
    assert_eq!(Store::sample_keys(&empty, 10).unwrap(), Vec::<u64>::new());
    let small = ScanOnly::with_rows(25, 10);
    assert_eq!(Store::sample_keys(&small, 0).unwrap(), Vec::<u64>::new());
    for n in [25, 26, usize::MAX] {
        let mut all = Store::sample_keys(&small, n).unwrap();
        all.sort_unstable();
        assert_eq!(all, (0..25).collect::<Vec<_>>(), "n = {n}");
    }
}

/// The async default, and an `Arc` forwarding to it.
#[test]
fn the_async_default_sample_is_uniform() {
    let store = Arc::new(ScanOnly::with_rows(20, 7));
    assert!(!AsyncStore::fast_sampling(&store));
    let runtime = common::runtime();
    let counts = tally(20, 5, 4_000, |n| {
        runtime
            .block_on(AsyncStore::sample_keys(&store, n))
            .unwrap()
    });
    assert_uniform(&counts, 1_000, 150);
    runtime.block_on(common::sampling(
        &ScanOnly::with_rows(0, 100),
        common::Make {
            key: |k| k,
            value: |v| v,
        },
    ));
}

#[test]
fn the_memory_store_samples_uniformly() {
    let store = MemoryStore::from_rows((0..20u64).map(|k| (k, k)));
    let counts = tally(20, 5, 4_000, |n| Store::sample_keys(&store, n).unwrap());
    assert_uniform(&counts, 1_000, 150);
    let runtime = common::runtime();
    let counts = tally(20, 5, 4_000, |n| {
        runtime
            .block_on(AsyncStore::sample_keys(&store, n))
            .unwrap()
    });
    assert_uniform(&counts, 1_000, 150);
    let arc = Arc::new(store);
    assert_eq!(Store::sample_keys(&arc, usize::MAX).unwrap().len(), 20);
    runtime.block_on(common::sampling(
        &MemoryStore::<u64, u64>::new(),
        common::Make {
            key: |k| k,
            value: |v| v,
        },
    ));
}
