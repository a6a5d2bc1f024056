//! The contenders and workloads shared by the criterion suite (`benches/main.rs`), the
//! comparison report (`examples/compare/`) and the lookup examples (`examples/lookups.rs`,
//! `lookup_cost.rs`, `line_study.rs`): one definition, so all measure the same thing.
//! Each target uses a subset, hence the `dead_code` allowance.

#![allow(dead_code)]

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::hint::black_box;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use cuckoo_guard::{CuckooFilter, Growth};

pub(crate) type AHashBuilder = ahash::RandomState;

/// Lookups per timed iteration for a set of `n` keys, each key distinct: one per 16 members,
/// at least 65,536 and at most 4,194,304. For a 16M set an iteration touches most of the
/// filter's bucket lines, each about twice on average, so a lookup finds its line in the
/// caches only as often as random traffic would; a small fixed set, repeated, could partly
/// stay in the L3 from one iteration to the next however large the table.
pub(crate) fn queries(n: usize) -> usize {
    (n / 16).clamp(1 << 16, 1 << 22)
}

/// Operations per timed iteration of a mixed workload.
pub(crate) const OPS: usize = 1 << 16;
pub(crate) const THREADS: [usize; 2] = [1, 2];

pub(crate) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `i`-th member key, and keys that are never members.
pub(crate) fn member(i: u64) -> u64 {
    splitmix(i)
}
pub(crate) fn non_member(i: u64) -> u64 {
    splitmix(i | 1 << 62)
}

/// A cheap seeded generator for building workloads (outside the timed sections).
pub(crate) struct Rng(u64);
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        splitmix(self.0)
    }
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf(s) ranks over `1..=n` by inverting the (approximate) CDF of the continuous
/// distribution; exact enough for a popularity skew, and cheap to precompute.
pub(crate) struct Zipf {
    pub(crate) n: f64,
    pub(crate) s: f64,
}
impl Zipf {
    pub(crate) fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let one_minus_s = 1.0 - self.s;
        let h_n = (self.n.powf(one_minus_s) - 1.0) / one_minus_s;
        let x = (u * h_n * one_minus_s + 1.0).powf(1.0 / one_minus_s);
        (x as u64).clamp(1, self.n as u64)
    }
}

/// What a contender must do. Lookups take `&self`; so do writes for shareable contenders.
pub(crate) trait Contender: Sync {
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
pub(crate) struct Alone<H>(pub(crate) cuckoofilter::CuckooFilter<H>);

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
pub(crate) struct Probe {
    lines: Box<[[u64; 8]]>,
}

impl Probe {
    /// A probe over `bytes` on the allocator's pages (4 KiB unless the system backs every
    /// mapping with huge pages).
    pub(crate) fn new(bytes: usize) -> Probe {
        Probe::with_pages(bytes, false)
    }

    /// A probe over `bytes` that asks for transparent huge pages as this crate's tables do
    /// (Linux; elsewhere the same as [`Probe::new`]).
    #[allow(dead_code)]
    pub(crate) fn on_huge_pages(bytes: usize) -> Probe {
        Probe::with_pages(bytes, true)
    }

    fn with_pages(bytes: usize, huge: bool) -> Probe {
        let lines = (bytes / 64).max(1);
        let mut buffer: Vec<[u64; 8]> = Vec::with_capacity(lines);
        if huge {
            advise_huge_pages(&buffer);
        }
        buffer.extend((0..lines as u64).map(|i| [splitmix(i); 8]));
        Probe {
            lines: buffer.into_boxed_slice(),
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
    pub(crate) fn contains_many(&self, keys: &[u64], out: &mut [bool]) {
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
pub(crate) fn prefetch<T>(line: &T) {
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
pub(crate) fn timed_split<T: Sync>(
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

/// Rounds per paired measure; each round times a contender and the probe back to back.
pub(crate) const ROUNDS: usize = 7;

/// Lookups per timed pass of a paired measure, at least: enough that thread start-up is noise.
pub(crate) const LOOKUPS: usize = 200 << 16;

/// The rate (M lookups/s) at which `work` gets through `keys` split over `threads`; each
/// thread goes through its share as often as it takes to make `LOOKUPS` lookups in all.
pub(crate) fn rate(keys: &[u64], threads: usize, work: &(impl Fn(&[u64]) + Sync)) -> f64 {
    let reps = LOOKUPS.div_ceil(keys.len()) as u64;
    let took = timed_split(reps, threads, keys, work);
    (reps as usize * keys.len()) as f64 / took.as_secs_f64() / 1e6
}

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One measure of a contender beside the probe: medians over `ROUNDS` rounds of each rate
/// and of the ratio within each round. Each round runs both, in alternating order, so that
/// a change in the host's load between rounds moves both rates of a round alike.
#[derive(Clone, Copy)]
pub(crate) struct Paired {
    pub(crate) rate: f64,
    pub(crate) probe: f64,
    pub(crate) ratio: f64,
}

pub(crate) fn paired(
    keys: &[u64],
    threads: usize,
    ours: impl Fn(&[u64]) + Sync,
    probe: impl Fn(&[u64]) + Sync,
) -> Paired {
    let rounds: Vec<(f64, f64)> = (0..ROUNDS)
        .map(|round| {
            if round % 2 == 0 {
                let a = rate(keys, threads, &ours);
                (a, rate(keys, threads, &probe))
            } else {
                let b = rate(keys, threads, &probe);
                (rate(keys, threads, &ours), b)
            }
        })
        .collect();
    Paired {
        rate: median(rounds.iter().map(|r| r.0).collect()),
        probe: median(rounds.iter().map(|r| r.1).collect()),
        ratio: median(rounds.iter().map(|r| r.0 / r.1).collect()),
    }
}

/// One-key-at-a-time lookups of `keys` in `set`.
pub(crate) fn scalar<C: Contender + Sync>(set: &C) -> impl Fn(&[u64]) + Sync + '_ {
    move |part| {
        black_box(part.iter().filter(|&&k| set.contains(k)).count());
    }
}

/// Asks for transparent huge pages, as this crate's tables do, over the whole 2 MiB pages
/// inside `buffer`'s capacity; call it before the first write (Linux; elsewhere it does
/// nothing).
pub(crate) fn advise_huge_pages<T>(buffer: &Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        const HUGE_PAGE: usize = 2 << 20;
        let start = buffer.as_ptr() as usize;
        let first = start.next_multiple_of(HUGE_PAGE);
        let end = (start + buffer.capacity() * std::mem::size_of::<T>()) / HUGE_PAGE * HUGE_PAGE;
        if end > first {
            // SAFETY: the range is page-aligned and inside the buffer's allocation; the
            // advice changes no contents or mappings.
            unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buffer;
}

/// A sized workload: the keys a filter of `n` holds and the queries against it.
pub(crate) struct Workload {
    pub(crate) n: usize,
    pub(crate) members: Vec<u64>,
    pub(crate) hits: Vec<u64>,
    pub(crate) misses: Vec<u64>,
}

impl Workload {
    pub(crate) fn new(n: usize) -> Workload {
        let members: Vec<u64> = (0..n as u64).map(member).collect();
        let mut rng = Rng(7);
        let queries = queries(n);
        let hits = (0..queries)
            .map(|_| members[(rng.next() % n as u64) as usize])
            .collect();
        let misses = (0..queries as u64).map(non_member).collect();
        Workload {
            n,
            members,
            hits,
            misses,
        }
    }
}

/// `atomic-cuckoo-filter` for `n` keys, hashing with ahash.
pub(crate) fn acf_ahash(n: usize) -> atomic_cuckoo_filter::CuckooFilter<ahash::AHasher> {
    atomic_cuckoo_filter::CuckooFilterBuilder::<ahash::AHasher>::default()
        .capacity(n)
        .build()
        .expect("valid configuration")
}

/// The `cuckoofilter` crate for `n` keys, filled with `keys`.
pub(crate) fn cuckoofilter_filled<H: std::hash::Hasher + Default>(
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
pub(crate) fn cuckoofilter_slots(n: usize) -> usize {
    n.next_power_of_two().max(4)
}

pub(crate) fn ours(n: usize) -> CuckooFilter {
    CuckooFilter::builder()
        .growth(Growth::Fixed)
        .capacity(n)
        .seed(1)
        .build()
        .unwrap()
}

/// A filter of the width class `class` built for `n` keys (about 94% load when full).
pub(crate) fn built_class(n: usize, class: u32) -> CuckooFilter {
    CuckooFilter::builder()
        .growth(Growth::Fixed)
        .capacity(n)
        .fingerprint_bits(class)
        .seed(1)
        .build()
        .expect("a filter")
}

/// Inserts `member(0..n)` into `filter`; returns how many it refused.
pub(crate) fn insert_members(filter: &CuckooFilter, n: usize) -> usize {
    (0..n as u64)
        .filter(|&i| filter.insert(&member(i)).is_err())
        .count()
}

/// `set` with `keys` inserted. Filters sized by power-of-two rounding may refuse a few keys
/// near full; that is reported, not fatal (it only makes their hit lookups cheaper misses).
pub(crate) fn filled<C: Contender>(set: C, keys: &[u64]) -> C {
    let refused = keys.iter().filter(|&&k| !set.insert(k)).count();
    if refused > 0 {
        eprintln!("note: {refused} of {} keys refused", keys.len());
    }
    set
}

/// Every size measured, by label; `CG_BENCH_SIZES` (labels, comma-separated) picks some.
pub(crate) const SIZES: [(&str, usize); 2] = [("1M", 1_000_000), ("16M", 16_000_000)];

pub(crate) fn sizes() -> Vec<(&'static str, usize)> {
    let wanted = std::env::var("CG_BENCH_SIZES").unwrap_or_else(|_| "1M,16M".into());
    SIZES
        .into_iter()
        .filter(|(name, _)| wanted.split(',').any(|w| w.trim() == *name))
        .collect()
}

#[derive(Clone, Copy)]
pub(crate) enum Op {
    Read(u64),
    Insert(u64),
    Remove(u64),
}

/// One of the two operation streams (`OPS / 2` each) of a mixed workload, with
/// `write_permille` writes; reads are half Zipf(0.99) members, half
/// absent keys; writes alternate inserting a fresh key and removing the oldest fresh one.
pub(crate) fn mixed_ops(w: &Workload, write_permille: u64, seed: u64) -> Vec<Op> {
    let mut rng = Rng(seed);
    let zipf = Zipf {
        n: w.n as f64,
        s: 0.99,
    };
    let mut fresh = (seed << 40) | 1 << 61;
    let mut oldest = fresh;
    let mut insert_next = true;
    (0..OPS / 2)
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

/// Runs the two streams of a mixed workload `iters` times on `threads` threads (1 or 2;
/// thread `i` takes streams `i, i + threads, ...`), so every thread count does the same
/// `OPS` operations per iteration, and returns the wall time. Writes alternate inserting a
/// fresh key and removing it again, so the set keeps its size from pass to pass with no
/// untimed repair work.
pub(crate) fn run_mixed<C: Contender>(
    set: &C,
    streams: &[Vec<Op>],
    threads: usize,
    iters: u64,
) -> Duration {
    let apply = |ops: &[Op]| {
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
    };
    let start = Instant::now();
    std::thread::scope(|s| {
        for first in 0..threads {
            let apply = &apply;
            s.spawn(move || {
                for _ in 0..iters {
                    for ops in streams.iter().skip(first).step_by(threads) {
                        apply(ops);
                    }
                }
            });
        }
    });
    start.elapsed()
}
