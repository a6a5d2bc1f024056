//! Criterion suite for snapshots (`cargo bench --bench snapshot`).
//!
//! Groups (`Throughput::Bytes`, the snapshot's size; ids `<keys>`):
//! - `snapshot/write/memory`: `write_snapshot` into a `Vec` with room for it: the copy,
//!   encoding and checksum, no I/O.
//! - `snapshot/write/file`: `write_snapshot_file` into a temporary directory: the same plus
//!   the file's writes, its `fsync` and the rename.
//! - `snapshot/read/memory`: `read_snapshot` from a byte slice: decoding, checksums, table
//!   allocation and the stripe counts.
//! - `snapshot/read/file`: `read_snapshot_file` of the file written above (in the page cache).
//!
//! Filters are 16-bit, built for the key count and filled to it (about 2.1 bytes per key).
//! `CG_SNAPSHOT_KEYS` (a comma-separated list) replaces the default sizes of 1 and 10
//! million; `CG_SNAPSHOT_KEYS=100000000` measures a 100-million-key filter (about 210 MB).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use cuckoo_guard::CuckooFilter;

fn sizes() -> Vec<u64> {
    std::env::var("CG_SNAPSHOT_KEYS")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000_000, 10_000_000])
}

/// A seeded filter of `keys` keys, filled by two threads.
fn filled(keys: u64) -> CuckooFilter {
    let filter = CuckooFilter::builder()
        .capacity(keys as usize)
        .seed(1)
        .build()
        .unwrap();
    std::thread::scope(|s| {
        for t in 0..2 {
            let filter = &filter;
            s.spawn(move || {
                for k in (t..keys).step_by(2) {
                    filter.insert(&k).unwrap();
                }
            });
        }
    });
    filter
}

fn label(keys: u64) -> String {
    if keys % 1_000_000 == 0 {
        format!("{}M", keys / 1_000_000)
    } else {
        keys.to_string()
    }
}

fn snapshots(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    for keys in sizes() {
        let filter = filled(keys);
        let mut bytes = Vec::new();
        filter.write_snapshot(&mut bytes).unwrap();
        let path = dir.path().join(format!("{keys}.cgsnap"));
        let id = label(keys);

        let mut group = c.benchmark_group("snapshot/write");
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(10));
        let mut out = Vec::with_capacity(bytes.len());
        group.bench_function(BenchmarkId::new("memory", &id), |b| {
            b.iter(|| {
                out.clear();
                black_box(filter.write_snapshot(&mut out).unwrap());
            })
        });
        group.bench_function(BenchmarkId::new("file", &id), |b| {
            b.iter(|| black_box(filter.write_snapshot_file(&path).unwrap()))
        });
        group.finish();

        let mut group = c.benchmark_group("snapshot/read");
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(10));
        group.bench_function(BenchmarkId::new("memory", &id), |b| {
            b.iter(|| black_box(CuckooFilter::read_snapshot(&bytes[..]).unwrap()))
        });
        group.bench_function(BenchmarkId::new("file", &id), |b| {
            b.iter(|| black_box(CuckooFilter::read_snapshot_file(&path).unwrap()))
        });
        group.finish();
    }
}

criterion_group!(benches, snapshots);
criterion_main!(benches);
