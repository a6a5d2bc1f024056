//! Criterion suite: this crate's filter against what users would pick instead (`cargo bench`).
//!
//! Groups (each with `Throughput::Elements`, ids `contender/threads`):
//! - `lookup/hit/<size>`, `lookup/miss/<size>`: lookups of members / of keys never inserted.
//! - `lookup/batch/<size>`: this crate's `contains_many` against the batched probe.
//! - `insert/fill_to_95pct/<size>`: filling an empty structure; each filter to 95% of its own
//!   slots, each exact set with as many keys as this crate's filter takes.
//! - `remove/from_95pct/<size>`: removing every key of a structure filled as in the insert
//!   group (the fill is untimed).
//! - `mixed/95_5/<size>`, `mixed/50_50/<size>`: YCSB-shaped operation streams. Reads are half
//!   Zipf(0.99) over the members and half an attack of keys that do not exist; writes
//!   alternate inserting a new key and removing one inserted earlier, so the size stays put.
//!
//! Sizes: 1 million keys (cache-resident filter) and 16 million (memory-resident); set
//! `CG_BENCH_SIZES=1M` (or `16M`) to run one. Every key, query and operation is generated
//! before the timed section. Multi-threaded runs split the same work over scoped threads and
//! time the whole (`iter_custom`), so the figure is total operations per wall-clock second.
//!
//! Contenders: this crate (`cuckoo-guard`, ahash keyed per instance); `dashmap::DashSet`,
//! `RwLock<HashSet>` and `scc::HashSet` (exact sets), each with its default hasher and with
//! ahash; the `cuckoofilter` crate behind a `Mutex`, and alone in single-thread lookups, with
//! its default SipHash and with ahash; `atomic-cuckoo-filter` with its default hasher and
//! with ahash; `fastbloom`'s `AtomicBloomFilter` at this crate's 16-bit false-positive rate
//! (it cannot remove, so it sits out the mixed groups); `xorf`'s `BinaryFuse16` (static) in
//! the lookup groups. The "probe" is the physical limit: an array of the filter's byte size
//! where one lookup makes two independent random cache-line reads derived from the key.

mod contenders;

use std::collections::HashSet;
use std::hint::black_box;
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use contenders::*;
use criterion::{
    criterion_group, criterion_main, measurement::WallTime, BenchmarkGroup, BenchmarkId, Criterion,
    Throughput,
};

fn bench_lookups<C: Contender>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    set: &C,
    queries: &[u64],
    threads: &[usize],
) {
    for &t in threads {
        group.bench_function(BenchmarkId::new(name, format!("{t}t")), |b| {
            b.iter_custom(|iters| {
                timed_split(iters, t, queries, |qs| {
                    black_box(qs.iter().filter(|&&k| set.contains(k)).count());
                })
            })
        });
    }
}

fn lookup(c: &mut Criterion) {
    for (size, n) in sizes() {
        let w = Workload::new(n);
        let filter = filled(ours(n), &w.members);
        let probe = Probe::new(filter.memory_usage());
        let dash_sip = filled(dashmap::DashSet::<u64>::with_capacity(n), &w.members);
        let dash_ahash = filled(
            dashmap::DashSet::with_capacity_and_hasher(n, AHashBuilder::new()),
            &w.members,
        );
        let rw_sip = filled(RwLock::new(HashSet::<u64>::with_capacity(n)), &w.members);
        let rw_ahash = filled(
            RwLock::new(HashSet::with_capacity_and_hasher(n, AHashBuilder::new())),
            &w.members,
        );
        let scc_sip = filled(scc::HashSet::<u64>::with_capacity(n), &w.members);
        let scc_ahash = filled(
            scc::HashSet::with_capacity_and_hasher(n, AHashBuilder::new()),
            &w.members,
        );
        type Sip = std::collections::hash_map::DefaultHasher;
        let cf_sip = Alone(cuckoofilter_filled::<Sip>(n, &w.members));
        let cf_ahash = Alone(cuckoofilter_filled::<ahash::AHasher>(n, &w.members));
        let cf_sip_locked = Mutex::new(cuckoofilter_filled::<Sip>(n, &w.members));
        let cf_ahash_locked = Mutex::new(cuckoofilter_filled::<ahash::AHasher>(n, &w.members));
        let acf = filled(
            atomic_cuckoo_filter::CuckooFilter::with_capacity(n),
            &w.members,
        );
        let acf_ahash = filled(acf_ahash(n), &w.members);
        let bloom = filled(
            fastbloom::AtomicBloomFilter::with_false_pos(filter.expected_false_positive_rate())
                .expected_items(n),
            &w.members,
        );
        let bloom_ahash = filled(
            fastbloom::AtomicBloomFilter::with_false_pos(filter.expected_false_positive_rate())
                .hasher(AHashBuilder::new())
                .expected_items(n),
            &w.members,
        );
        let fuse = xorf::BinaryFuse16::try_from(&w.members).expect("distinct keys");

        for (kind, queries) in [("hit", &w.hits), ("miss", &w.misses)] {
            let mut group = c.benchmark_group(format!("lookup/{kind}/{size}"));
            group.throughput(Throughput::Elements(queries.len() as u64));
            group.sample_size(20);
            group.measurement_time(Duration::from_secs(3));
            group.warm_up_time(Duration::from_secs(1));
            bench_lookups(&mut group, "cuckoo-guard", &filter, queries, &THREADS);
            bench_lookups(&mut group, "probe", &probe, queries, &THREADS);
            bench_lookups(&mut group, "DashSet sip", &dash_sip, queries, &THREADS);
            bench_lookups(&mut group, "DashSet ahash", &dash_ahash, queries, &THREADS);
            bench_lookups(
                &mut group,
                "RwLock<HashSet> sip",
                &rw_sip,
                queries,
                &THREADS,
            );
            bench_lookups(
                &mut group,
                "RwLock<HashSet> ahash",
                &rw_ahash,
                queries,
                &THREADS,
            );
            bench_lookups(&mut group, "scc::HashSet sip", &scc_sip, queries, &THREADS);
            bench_lookups(
                &mut group,
                "scc::HashSet ahash",
                &scc_ahash,
                queries,
                &THREADS,
            );
            bench_lookups(&mut group, "cuckoofilter sip", &cf_sip, queries, &[1]);
            bench_lookups(&mut group, "cuckoofilter ahash", &cf_ahash, queries, &[1]);
            bench_lookups(
                &mut group,
                "Mutex<cuckoofilter> sip",
                &cf_sip_locked,
                queries,
                &THREADS,
            );
            bench_lookups(
                &mut group,
                "Mutex<cuckoofilter> ahash",
                &cf_ahash_locked,
                queries,
                &THREADS,
            );
            bench_lookups(&mut group, "atomic-cuckoo-filter", &acf, queries, &THREADS);
            bench_lookups(
                &mut group,
                "atomic-cuckoo-filter ahash",
                &acf_ahash,
                queries,
                &THREADS,
            );
            bench_lookups(&mut group, "fastbloom", &bloom, queries, &THREADS);
            bench_lookups(
                &mut group,
                "fastbloom ahash",
                &bloom_ahash,
                queries,
                &THREADS,
            );
            bench_lookups(&mut group, "BinaryFuse16", &fuse, queries, &THREADS);
            group.finish();
        }

        let mut group = c.benchmark_group(format!("lookup/batch/{size}"));
        group.throughput(Throughput::Elements(w.misses.len() as u64));
        group.sample_size(20);
        group.measurement_time(Duration::from_secs(3));
        group.warm_up_time(Duration::from_secs(1));
        for &t in &THREADS {
            group.bench_function(
                BenchmarkId::new("cuckoo-guard contains_many", format!("{t}t")),
                |b| {
                    b.iter_custom(|iters| {
                        timed_split(iters, t, &w.misses, |qs| {
                            let mut found = vec![false; qs.len()];
                            filter.contains_many(qs, &mut found);
                            black_box(found.iter().filter(|&&f| f).count());
                        })
                    })
                },
            );
            group.bench_function(BenchmarkId::new("probe batched", format!("{t}t")), |b| {
                b.iter_custom(|iters| {
                    timed_split(iters, t, &w.misses, |qs| {
                        let mut found = vec![false; qs.len()];
                        probe.contains_many(qs, &mut found);
                        black_box(found.iter().filter(|&&f| f).count());
                    })
                })
            });
        }
        group.finish();
    }
}

/// Times `op` over `keys` at each thread count, once per iteration, each time on a fresh
/// structure from `make` (built untimed).
fn bench_fresh<C: Contender>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    make: impl Fn() -> C,
    keys: &[u64],
    op: impl Fn(&C, u64) + Sync,
) {
    for &t in &THREADS {
        group.bench_function(BenchmarkId::new(name, format!("{t}t")), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let set = make();
                    total += timed_split(1, t, keys, |ks| {
                        for &k in ks {
                            op(&set, k);
                        }
                    });
                    drop(set);
                }
                total
            })
        });
    }
}

/// What a fresh-structure group times.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    /// Inserting every key into an empty structure.
    Fill,
    /// Removing every key from a structure filled with them (the fill is untimed).
    Drain,
}

/// One contender of a fresh-structure group.
fn bench_phase<C: Contender>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    phase: Phase,
    name: &str,
    make: impl Fn() -> C,
    keys: &[u64],
) {
    match phase {
        Phase::Fill => bench_fresh(group, name, make, keys, |set, k| {
            black_box(set.insert(k));
        }),
        Phase::Drain => bench_fresh(
            group,
            name,
            || filled(make(), keys),
            keys,
            |set, k| {
                black_box(set.remove(k));
            },
        ),
    }
}

fn insert(c: &mut Criterion) {
    fresh_structure_groups(c, "insert/fill_to_95pct", Phase::Fill);
}

fn remove(c: &mut Criterion) {
    fresh_structure_groups(c, "remove/from_95pct", Phase::Drain);
}

fn fresh_structure_groups(c: &mut Criterion, label: &str, phase: Phase) {
    for (size, n) in sizes() {
        // This crate's filter at 95% of its slots; every contender gets the same keys, except
        // the filters with power-of-two tables, which get 95% of their own slots.
        let slots = ours(n).capacity();
        let keys: Vec<u64> = (0..(slots as f64 * 0.95) as u64).map(member).collect();
        let mut group = c.benchmark_group(format!("{label}/{size}"));
        group.sample_size(10);
        group.throughput(Throughput::Elements(keys.len() as u64));
        bench_phase(&mut group, phase, "cuckoo-guard", || ours(n), &keys);
        bench_phase(
            &mut group,
            phase,
            "DashSet ahash",
            || dashmap::DashSet::with_capacity_and_hasher(keys.len(), AHashBuilder::new()),
            &keys,
        );
        bench_phase(
            &mut group,
            phase,
            "scc::HashSet ahash",
            || scc::HashSet::with_capacity_and_hasher(keys.len(), AHashBuilder::new()),
            &keys,
        );
        bench_phase(
            &mut group,
            phase,
            "RwLock<HashSet> ahash",
            || {
                RwLock::new(HashSet::with_capacity_and_hasher(
                    keys.len(),
                    AHashBuilder::new(),
                ))
            },
            &keys,
        );
        let cf_slots = cuckoofilter_slots(n);
        let cf_keys = &keys[..((cf_slots as f64 * 0.95) as usize).min(keys.len())];
        group.throughput(Throughput::Elements(cf_keys.len() as u64));
        bench_phase(
            &mut group,
            phase,
            "Mutex<cuckoofilter> ahash",
            || {
                Mutex::new(cuckoofilter::CuckooFilter::<ahash::AHasher>::with_capacity(
                    n,
                ))
            },
            cf_keys,
        );
        let acf_slots = atomic_cuckoo_filter::CuckooFilter::with_capacity(n).capacity();
        let acf_keys = &keys[..((acf_slots as f64 * 0.95) as usize).min(keys.len())];
        group.throughput(Throughput::Elements(acf_keys.len() as u64));
        bench_phase(
            &mut group,
            phase,
            "atomic-cuckoo-filter ahash",
            || acf_ahash(n),
            acf_keys,
        );
        group.finish();
    }
}

fn bench_mixed<C: Contender>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    set: &C,
    streams: &[Vec<Op>],
) {
    for &t in &THREADS {
        group.bench_function(BenchmarkId::new(name, format!("{t}t")), |b| {
            b.iter_custom(|iters| run_mixed(set, streams, t, iters))
        });
    }
}

fn mixed(c: &mut Criterion) {
    for (size, n) in sizes() {
        let w = Workload::new(n);
        // Members fill 90% of the filter, leaving room for the write share.
        let members = &w.members[..n * 9 / 10];
        for (label, write_permille) in [("95_5", 50u64), ("50_50", 500)] {
            let streams: Vec<Vec<Op>> = (0..2u64)
                .map(|t| mixed_ops(&w, write_permille, t + 1))
                .collect();
            let ops_per_iter = OPS as u64; // both streams, at every thread count
            let mut group = c.benchmark_group(format!("mixed/{label}/{size}"));
            group.sample_size(10);
            group.measurement_time(Duration::from_secs(3));
            group.warm_up_time(Duration::from_secs(1));
            group.throughput(Throughput::Elements(ops_per_iter));
            let filter = filled(ours(n), members);
            bench_mixed(&mut group, "cuckoo-guard", &filter, &streams);
            drop(filter);
            let dash = filled(
                dashmap::DashSet::with_capacity_and_hasher(n, AHashBuilder::new()),
                members,
            );
            bench_mixed(&mut group, "DashSet ahash", &dash, &streams);
            drop(dash);
            let scc_set = filled(
                scc::HashSet::with_capacity_and_hasher(n, AHashBuilder::new()),
                members,
            );
            bench_mixed(&mut group, "scc::HashSet ahash", &scc_set, &streams);
            drop(scc_set);
            let rw = filled(
                RwLock::new(HashSet::with_capacity_and_hasher(n, AHashBuilder::new())),
                members,
            );
            bench_mixed(&mut group, "RwLock<HashSet> ahash", &rw, &streams);
            drop(rw);
            let cf = filled(
                Mutex::new(cuckoofilter::CuckooFilter::<ahash::AHasher>::with_capacity(
                    n,
                )),
                members,
            );
            bench_mixed(&mut group, "Mutex<cuckoofilter> ahash", &cf, &streams);
            drop(cf);
            let acf = filled(acf_ahash(n), members);
            bench_mixed(&mut group, "atomic-cuckoo-filter ahash", &acf, &streams);
            group.finish();
        }
    }
}

criterion_group!(benches, lookup, insert, remove, mixed);
criterion_main!(benches);
