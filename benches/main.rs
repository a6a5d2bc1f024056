//! Criterion benchmarks of the filter on its own (`cargo bench`).
//!
//! Groups: `lookup/hit`, `lookup/miss`, `lookup/batch` and `insert/fill_to_95pct`, on a
//! cache-resident filter of 1 million keys, one thread. Keys are generated outside the timed
//! section. The comparison against other crates and the multi-threaded groups come with the
//! benchmark suite.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use cuckoo_guard::CuckooFilter;

const KEYS: u64 = 1_000_000;
const QUERIES: usize = 100_000;

fn filled() -> CuckooFilter {
    let filter = CuckooFilter::builder()
        .capacity(KEYS as usize)
        .seed(1)
        .build()
        .unwrap();
    for k in 0..KEYS {
        filter.insert(&k).unwrap();
    }
    filter
}

/// `QUERIES` keys from `offset .. offset + KEYS`, in a fixed pseudo-random order.
fn queries(offset: u64) -> Vec<u64> {
    (0..QUERIES as u64)
        .map(|i| offset + i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % KEYS)
        .collect()
}

fn lookup(c: &mut Criterion) {
    let filter = filled();
    let hits = queries(0);
    let misses = queries(1 << 40);
    for (name, keys) in [("lookup/hit", &hits), ("lookup/miss", &misses)] {
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Elements(keys.len() as u64));
        group.bench_function("contains", |b| {
            b.iter(|| keys.iter().filter(|k| filter.contains(*k)).count())
        });
        group.bench_function("reader.contains", |b| {
            b.iter(|| {
                let reader = filter.reader();
                keys.iter().filter(|k| reader.contains(*k)).count()
            })
        });
        group.finish();
    }
    let mut group = c.benchmark_group("lookup/batch");
    group.throughput(Throughput::Elements(misses.len() as u64));
    let mut found = vec![false; misses.len()];
    group.bench_function("contains_many", |b| {
        b.iter(|| {
            filter.contains_many(black_box(&misses), &mut found);
            found.iter().filter(|&&f| f).count()
        })
    });
    group.finish();
}

fn insert(c: &mut Criterion) {
    let mut group = c.benchmark_group("insert/fill_to_95pct");
    group.sample_size(10);
    let capacity = CuckooFilter::with_capacity(KEYS as usize).capacity() as u64;
    let target = capacity * 95 / 100;
    group.throughput(Throughput::Elements(target));
    group.bench_function("insert", |b| {
        b.iter_batched(
            || {
                CuckooFilter::builder()
                    .capacity(KEYS as usize)
                    .seed(2)
                    .build()
                    .unwrap()
            },
            |filter| {
                for k in 0..target {
                    filter.insert(&k).unwrap();
                }
                filter
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, lookup, insert);
criterion_main!(benches);
