//! Criterion suite: this crate's filter against what users would pick instead (`cargo bench`).
//!
//! Groups (each with `Throughput::Elements`, ids `contender/threads`):
//! - `lookup/hit/<size>`, `lookup/miss/<size>`: lookups of members / of keys never inserted.
//! - `lookup/batch/<size>`: this crate's `contains_many` against the batched probe.
//! - `insert/fill_to_95pct/<size>`: filling an empty structure; each filter to 95% of its own
//!   slots, each exact set with as many keys as this crate's filter takes.
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

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::hint::black_box;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use criterion::{
    criterion_group, criterion_main, measurement::WallTime, BenchmarkGroup, BenchmarkId, Criterion,
    Throughput,
};
use cuckoo_guard::CuckooFilter;

type AHashBuilder = ahash::RandomState;

/// Lookups per timed iteration.
const QUERIES: usize = 1 << 16;
/// Operations per timed iteration of a mixed workload.
const OPS: usize = 1 << 16;
const THREADS: [usize; 2] = [1, 2];

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `i`-th member key, and keys that are never members.
fn member(i: u64) -> u64 {
    splitmix(i)
}
fn non_member(i: u64) -> u64 {
    splitmix(i | 1 << 62)
}

/// A cheap seeded generator for building workloads (outside the timed sections).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        splitmix(self.0)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf(s) ranks over `1..=n` by inverting the (approximate) CDF of the continuous
/// distribution; exact enough for a popularity skew, and cheap to precompute.
struct Zipf {
    n: f64,
    s: f64,
}
impl Zipf {
    fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let one_minus_s = 1.0 - self.s;
        let h_n = (self.n.powf(one_minus_s) - 1.0) / one_minus_s;
        let x = (u * h_n * one_minus_s + 1.0).powf(1.0 / one_minus_s);
        (x as u64).clamp(1, self.n as u64)
    }
}

/// What a contender must do. Lookups take `&self`; so do writes for shareable contenders.
trait Contender: Sync {
    fn contains(&self, key: u64) -> bool;
    fn insert(&self, key: u64) -> bool;
    /// `None`: the contender cannot remove.
    fn remove(&self, key: u64) -> Option<bool>;
}

impl<S: BuildHasher + Sync> Contender for CuckooFilter<S> {
    #[inline]
    fn contains(&self, key: u64) -> bool {
        CuckooFilter::contains(self, &key)
    }
    fn insert(&self, key: u64) -> bool {
        CuckooFilter::insert(self, &key).is_ok()
    }
    fn remove(&self, key: u64) -> Option<bool> {
        Some(CuckooFilter::remove(self, &key))
    }
}

impl<S: BuildHasher + Clone + Send + Sync> Contender for dashmap::DashSet<u64, S> {
    #[inline]
    fn contains(&self, key: u64) -> bool {
        dashmap::DashSet::contains(self, &key)
    }
    fn insert(&self, key: u64) -> bool {
        dashmap::DashSet::insert(self, key)
    }
    fn remove(&self, key: u64) -> Option<bool> {
        Some(dashmap::DashSet::remove(self, &key).is_some())
    }
}

impl<S: BuildHasher + Send + Sync> Contender for RwLock<HashSet<u64, S>> {
    #[inline]
    fn contains(&self, key: u64) -> bool {
        self.read().unwrap().contains(&key)
    }
    fn insert(&self, key: u64) -> bool {
        self.write().unwrap().insert(key)
    }
    fn remove(&self, key: u64) -> Option<bool> {
        Some(self.write().unwrap().remove(&key))
    }
}

impl<S: BuildHasher + Send + Sync> Contender for scc::HashSet<u64, S> {
    #[inline]
    fn contains(&self, key: u64) -> bool {
        scc::HashSet::contains(self, &key)
    }
    fn insert(&self, key: u64) -> bool {
        scc::HashSet::insert(self, key).is_ok()
    }
    fn remove(&self, key: u64) -> Option<bool> {
        Some(scc::HashSet::remove(self, &key).is_some())
    }
}

impl<H: std::hash::Hasher + Default + Send> Contender for Mutex<cuckoofilter::CuckooFilter<H>> {
    #[inline]
    fn contains(&self, key: u64) -> bool {
        self.lock().unwrap().contains(&key)
    }
    fn insert(&self, key: u64) -> bool {
        self.lock().unwrap().add(&key).is_ok()
    }
    fn remove(&self, key: u64) -> Option<bool> {
        Some(self.lock().unwrap().delete(&key))
    }
}

/// `cuckoofilter` without a lock: single-thread lookups only (its writes need `&mut`).
struct Alone<H>(cuckoofilter::CuckooFilter<H>);

impl<H: std::hash::Hasher + Default + Sync> Contender for Alone<H> {
    #[inline]
    fn contains(&self, key: u64) -> bool {
        self.0.contains(&key)
    }
    fn insert(&self, _: u64) -> bool {
        unreachable!("lookup-only contender")
    }
    fn remove(&self, _: u64) -> Option<bool> {
        None
    }
}

impl<H: std::hash::Hasher + Default + Send + Sync> Contender
    for atomic_cuckoo_filter::CuckooFilter<H>
{
    #[inline]
    fn contains(&self, key: u64) -> bool {
        atomic_cuckoo_filter::CuckooFilter::contains(self, &key)
    }
    fn insert(&self, key: u64) -> bool {
        atomic_cuckoo_filter::CuckooFilter::insert(self, &key).is_ok()
    }
    fn remove(&self, key: u64) -> Option<bool> {
        Some(atomic_cuckoo_filter::CuckooFilter::remove(self, &key))
    }
}

impl<S: BuildHasher + Sync> Contender for fastbloom::AtomicBloomFilter<S> {
    #[inline]
    fn contains(&self, key: u64) -> bool {
        fastbloom::AtomicBloomFilter::contains(self, &key)
    }
    fn insert(&self, key: u64) -> bool {
        fastbloom::AtomicBloomFilter::insert(self, &key);
        true
    }
    fn remove(&self, _: u64) -> Option<bool> {
        None
    }
}

impl Contender for xorf::BinaryFuse16 {
    #[inline]
    fn contains(&self, key: u64) -> bool {
        xorf::Filter::contains(self, &key)
    }
    fn insert(&self, _: u64) -> bool {
        unreachable!("static contender")
    }
    fn remove(&self, _: u64) -> Option<bool> {
        None
    }
}

/// The physical limit of a two-bucket lookup: `bytes` of memory, and per key two independent
/// random 64-byte-line reads derived from its hash.
struct Probe {
    lines: Box<[[u64; 8]]>,
}

impl Probe {
    fn new(bytes: usize) -> Probe {
        let lines = (bytes / 64).max(1);
        Probe {
            lines: (0..lines as u64).map(|i| [splitmix(i); 8]).collect(),
        }
    }
    #[inline]
    fn indexes(&self, key: u64) -> (usize, usize) {
        let h = splitmix(key);
        let n = self.lines.len() as u64;
        let a = ((h >> 32) * n) >> 32;
        let b = ((h & 0xFFFF_FFFF) * n) >> 32;
        (a as usize, b as usize)
    }
    /// Batched: hash everything, prefetch both lines of each key, then read.
    fn contains_many(&self, keys: &[u64], out: &mut [bool]) {
        const BATCH: usize = 16;
        for (keys, out) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let mut idx = [(0usize, 0usize); BATCH];
            for (slot, &k) in idx.iter_mut().zip(keys) {
                *slot = self.indexes(k);
                prefetch(&self.lines[slot.0]);
                prefetch(&self.lines[slot.1]);
            }
            for ((o, &k), &(a, b)) in out.iter_mut().zip(keys).zip(&idx) {
                *o = self.lines[a][(k & 7) as usize] == k || self.lines[b][(k & 7) as usize] == k;
            }
        }
    }
}

impl Contender for Probe {
    #[inline]
    fn contains(&self, key: u64) -> bool {
        let (a, b) = self.indexes(key);
        self.lines[a][(key & 7) as usize] == key || self.lines[b][(key & 7) as usize] == key
    }
    fn insert(&self, _: u64) -> bool {
        unreachable!("static contender")
    }
    fn remove(&self, _: u64) -> Option<bool> {
        None
    }
}

#[inline]
fn prefetch<T>(line: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` only hints the cache; the pointer comes from a reference.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (line as *const T).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = line;
}

/// Runs `work(thread, chunk)` on `threads` scoped threads over `items` split evenly, `iters`
/// times, and returns the wall time.
fn timed_split<T: Sync>(
    iters: u64,
    threads: usize,
    items: &[T],
    work: impl Fn(&[T]) + Sync,
) -> Duration {
    let chunk = items.len().div_ceil(threads);
    let start = Instant::now();
    if threads == 1 {
        for _ in 0..iters {
            work(items);
        }
    } else {
        std::thread::scope(|s| {
            for part in items.chunks(chunk) {
                let work = &work;
                s.spawn(move || {
                    for _ in 0..iters {
                        work(part);
                    }
                });
            }
        });
    }
    start.elapsed()
}

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

/// A sized workload: the keys a filter of `n` holds and the queries against it.
struct Workload {
    n: usize,
    members: Vec<u64>,
    hits: Vec<u64>,
    misses: Vec<u64>,
}

impl Workload {
    fn new(n: usize) -> Workload {
        let members: Vec<u64> = (0..n as u64).map(member).collect();
        let mut rng = Rng(7);
        let hits = (0..QUERIES)
            .map(|_| members[(rng.next() % n as u64) as usize])
            .collect();
        let misses = (0..QUERIES as u64).map(non_member).collect();
        Workload {
            n,
            members,
            hits,
            misses,
        }
    }
}

/// `atomic-cuckoo-filter` for `n` keys, hashing with ahash.
fn acf_ahash(n: usize) -> atomic_cuckoo_filter::CuckooFilter<ahash::AHasher> {
    atomic_cuckoo_filter::CuckooFilterBuilder::<ahash::AHasher>::default()
        .capacity(n)
        .build()
        .expect("valid configuration")
}

/// The `cuckoofilter` crate for `n` keys, filled with `keys`.
fn cuckoofilter_filled<H: std::hash::Hasher + Default>(
    n: usize,
    keys: &[u64],
) -> cuckoofilter::CuckooFilter<H> {
    let mut filter = cuckoofilter::CuckooFilter::<H>::with_capacity(n);
    let refused = keys.iter().filter(|k| filter.add(*k).is_err()).count();
    if refused > 0 {
        eprintln!(
            "note: cuckoofilter refused {refused} of {} keys",
            keys.len()
        );
    }
    filter
}

/// Slots of `cuckoofilter::CuckooFilter::with_capacity(n)`: 4-slot buckets, a power-of-two
/// slot count.
fn cuckoofilter_slots(n: usize) -> usize {
    n.next_power_of_two().max(4)
}

fn ours(n: usize) -> CuckooFilter {
    CuckooFilter::builder().capacity(n).seed(1).build().unwrap()
}

/// `set` with `keys` inserted. Filters sized by power-of-two rounding may refuse a few keys
/// near full; that is reported, not fatal (it only makes their hit lookups cheaper misses).
fn filled<C: Contender>(set: C, keys: &[u64]) -> C {
    let refused = keys.iter().filter(|&&k| !set.insert(k)).count();
    if refused > 0 {
        eprintln!("note: {refused} of {} keys refused", keys.len());
    }
    set
}

fn sizes() -> Vec<(&'static str, usize)> {
    let wanted = std::env::var("CG_BENCH_SIZES").unwrap_or_else(|_| "1M,16M".into());
    [("1M", 1_000_000), ("16M", 16_000_000)]
        .into_iter()
        .filter(|(name, _)| wanted.split(',').any(|w| w.trim() == *name))
        .collect()
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
            group.bench_function(BenchmarkId::new("cuckoo-guard reader", "1t"), |b| {
                b.iter(|| {
                    let reader = filter.reader();
                    black_box(queries.iter().filter(|&&k| reader.contains(&k)).count())
                })
            });
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

/// Fills a fresh structure from `make` with `keys`, on `threads` threads.
fn bench_fill<C: Contender>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    make: impl Fn() -> C,
    keys: &[u64],
    threads: &[usize],
) {
    for &t in threads {
        group.bench_function(BenchmarkId::new(name, format!("{t}t")), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let set = make();
                    total += timed_split(1, t, keys, |ks| {
                        for &k in ks {
                            black_box(set.insert(k));
                        }
                    });
                    drop(set);
                }
                total
            })
        });
    }
}

fn insert(c: &mut Criterion) {
    for (size, n) in sizes() {
        // This crate's filter at 95% of its slots; every contender gets the same keys, except
        // the filters with power-of-two tables, which get 95% of their own slots.
        let slots = ours(n).capacity();
        let keys: Vec<u64> = (0..(slots as f64 * 0.95) as u64).map(member).collect();
        let mut group = c.benchmark_group(format!("insert/fill_to_95pct/{size}"));
        group.sample_size(10);
        group.throughput(Throughput::Elements(keys.len() as u64));
        bench_fill(&mut group, "cuckoo-guard", || ours(n), &keys, &THREADS);
        bench_fill(
            &mut group,
            "DashSet ahash",
            || dashmap::DashSet::with_capacity_and_hasher(keys.len(), AHashBuilder::new()),
            &keys,
            &THREADS,
        );
        bench_fill(
            &mut group,
            "scc::HashSet ahash",
            || scc::HashSet::with_capacity_and_hasher(keys.len(), AHashBuilder::new()),
            &keys,
            &THREADS,
        );
        bench_fill(
            &mut group,
            "RwLock<HashSet> ahash",
            || {
                RwLock::new(HashSet::with_capacity_and_hasher(
                    keys.len(),
                    AHashBuilder::new(),
                ))
            },
            &keys,
            &THREADS,
        );
        let cf_slots = cuckoofilter_slots(n);
        let cf_keys = &keys[..((cf_slots as f64 * 0.95) as usize).min(keys.len())];
        group.throughput(Throughput::Elements(cf_keys.len() as u64));
        bench_fill(
            &mut group,
            "Mutex<cuckoofilter> ahash",
            || {
                Mutex::new(cuckoofilter::CuckooFilter::<ahash::AHasher>::with_capacity(
                    n,
                ))
            },
            cf_keys,
            &THREADS,
        );
        let acf_slots = atomic_cuckoo_filter::CuckooFilter::with_capacity(n).capacity();
        let acf_keys = &keys[..((acf_slots as f64 * 0.95) as usize).min(keys.len())];
        group.throughput(Throughput::Elements(acf_keys.len() as u64));
        bench_fill(
            &mut group,
            "atomic-cuckoo-filter ahash",
            || acf_ahash(n),
            acf_keys,
            &THREADS,
        );
        group.finish();
    }
}

#[derive(Clone, Copy)]
enum Op {
    Read(u64),
    Insert(u64),
    Remove(u64),
}

/// `ops` operations with `write_permille` writes; reads are half Zipf(0.99) members, half
/// absent keys; writes alternate inserting a fresh key and removing the oldest fresh one.
fn mixed_ops(w: &Workload, write_permille: u64, seed: u64) -> Vec<Op> {
    let mut rng = Rng(seed);
    let zipf = Zipf {
        n: w.n as f64,
        s: 0.99,
    };
    let mut fresh = (seed << 40) | 1 << 61;
    let mut oldest = fresh;
    let mut insert_next = true;
    (0..OPS)
        .map(|_| {
            if rng.next() % 1000 < write_permille {
                let op = if insert_next || oldest == fresh {
                    fresh += 1;
                    Op::Insert(non_member(fresh))
                } else {
                    oldest += 1;
                    Op::Remove(non_member(oldest))
                };
                insert_next = !insert_next;
                op
            } else if rng.next() & 1 == 0 {
                Op::Read(w.members[(zipf.sample(&mut rng) - 1) as usize])
            } else {
                Op::Read(non_member(rng.next() | 1 << 63))
            }
        })
        .collect()
}

fn bench_mixed<C: Contender>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    set: &C,
    streams: &[Vec<Op>],
) {
    for &t in &THREADS {
        group.bench_function(BenchmarkId::new(name, format!("{t}t")), |b| {
            b.iter_custom(|iters| {
                // Each thread runs its own stream (its own fresh keys), so removes only take
                // keys the same thread inserted; the pair of streams keeps the size steady.
                let start = Instant::now();
                std::thread::scope(|s| {
                    for ops in &streams[..t] {
                        s.spawn(move || {
                            for _ in 0..iters {
                                for op in ops {
                                    match *op {
                                        Op::Read(k) => {
                                            black_box(set.contains(k));
                                        }
                                        Op::Insert(k) => {
                                            black_box(set.insert(k));
                                        }
                                        Op::Remove(k) => {
                                            black_box(set.remove(k));
                                        }
                                    }
                                }
                                // Undo this pass's net inserts so passes stay alike.
                                for op in ops {
                                    if let Op::Insert(k) = *op {
                                        set.remove(k);
                                    }
                                    if let Op::Remove(k) = *op {
                                        set.insert(k);
                                    }
                                }
                            }
                        });
                    }
                });
                start.elapsed()
            })
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
            let ops_per_iter = OPS as u64;
            let mut group = c.benchmark_group(format!("mixed/{label}/{size}"));
            group.sample_size(10);
            group.measurement_time(Duration::from_secs(3));
            group.warm_up_time(Duration::from_secs(1));
            // Throughput is per thread-stream; 2 threads run two streams.
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

criterion_group!(benches, lookup, insert, mixed);
criterion_main!(benches);
