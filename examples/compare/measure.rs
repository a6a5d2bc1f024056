//! The measurements: every contender built, filled and timed at one size, and the results as
//! plain data ([`Report`]) for the plots and the tables.
//!
//! Each round measures every contender once (A B C ... A B C ...), each measurement running
//! its workload for about a quarter of a second; a result is the median over rounds. Heap
//! bytes are counted by a counting global allocator: the bytes a contender holds after being
//! built and filled, divided by its keys.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use cuckoo_guard::CuckooFilter;

use crate::contenders::*;

/// Everything one run measured.
pub(crate) struct Report {
    /// Rounds per measurement (fills take at most 3).
    pub(crate) rounds: usize,
    /// Wall time of the whole run.
    pub(crate) seconds: f64,
    pub(crate) machine: Machine,
    /// One entry per measured size, in the order of `contenders::SIZES`.
    pub(crate) sizes: Vec<SizeReport>,
}

/// The machine the run measured on.
pub(crate) struct Machine {
    pub(crate) cpu: String,
    pub(crate) cores: usize,
    /// E.g. "caches per core or shared: L1d 48K, L2 2048K, L3 266240K".
    pub(crate) caches: String,
}

/// One contender's median rates in operations per second; `threads[0]` at 1 thread,
/// `threads[1]` at 2 (both doing the same total work). `None`: not run at that count.
pub(crate) struct Rates {
    pub(crate) name: &'static str,
    pub(crate) threads: [Option<f64>; 2],
}

/// A contender's heap use after the fill, and its false-positive rate.
pub(crate) struct Memory {
    pub(crate) name: &'static str,
    pub(crate) bits_per_key: f64,
    /// Measured over 1M absent keys; `None` for exact sets.
    pub(crate) false_positive_rate: Option<f64>,
}

/// One step of this crate's filter filling up, 1 thread.
pub(crate) struct LoadPoint {
    /// Load after the step, 0 to 1.
    pub(crate) load: f64,
    /// Inserts per second within the step.
    pub(crate) inserts_per_second: f64,
}

/// Everything measured at one size.
pub(crate) struct SizeReport {
    /// The size's label, e.g. "1M".
    pub(crate) size: &'static str,
    pub(crate) misses: Vec<Rates>,
    pub(crate) hits: Vec<Rates>,
    /// Batched lookups of absent keys.
    pub(crate) batched: Vec<Rates>,
    pub(crate) mixed_95_5: Vec<Rates>,
    pub(crate) mixed_50_50: Vec<Rates>,
    /// Filling an empty structure to 95% (filters to 95% of their own slots).
    pub(crate) fills: Vec<Rates>,
    /// This crate's filter first.
    pub(crate) memory: Vec<Memory>,
    /// This crate's filter, in steps of 5% load.
    pub(crate) insert_curve: Vec<LoadPoint>,
}

/// The rate of contender `name` at `threads` threads in `rows`, if measured.
pub(crate) fn rate(rows: &[Rates], name: &str, threads: usize) -> Option<f64> {
    rows.iter()
        .find(|r| r.name == name)
        .and_then(|r| r.threads[threads - 1])
}

/// Contender names the tables and targets refer to.
pub(crate) mod names {
    pub(crate) const OURS: &str = "cuckoo-guard";
    pub(crate) const PROBE: &str = "probe";
    pub(crate) const DASH: &str = "DashSet ahash";
    pub(crate) const DASH_DEFAULT: &str = "DashSet default";
    pub(crate) const SCC: &str = "scc::HashSet ahash";
    pub(crate) const RWLOCK: &str = "RwLock<HashSet> ahash";
    pub(crate) const CF: &str = "cuckoofilter ahash";
    pub(crate) const CF_DEFAULT: &str = "cuckoofilter default";
    pub(crate) const CF_MUTEX: &str = "Mutex<cuckoofilter> ahash";
    pub(crate) const ACF: &str = "atomic-cuckoo-filter ahash";
    pub(crate) const ACF_DEFAULT: &str = "atomic-cuckoo-filter default";
    pub(crate) const BLOOM: &str = "fastbloom ahash";
    pub(crate) const FUSE: &str = "BinaryFuse16";
    pub(crate) const OURS_BATCHED: &str = "cuckoo-guard contains_many";
    pub(crate) const PROBE_BATCHED: &str = "probe batched";
}
use names::*;

/// Counts live heap bytes, so each contender's memory is measured the same way.
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counter is only
// arithmetic on the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `dealloc` is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `realloc` is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Builds a contender with `build` and returns it with the heap bytes it holds.
fn measured<T>(build: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    let value = build();
    (value, LIVE.load(Ordering::Relaxed).saturating_sub(before))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// A measurement: runs `iters` repetitions and returns (operations done, wall time).
type Job<'a> = Box<dyn FnMut(u64) -> (u64, Duration) + 'a>;

/// The workloads whose jobs run together in [`rounds`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    Miss,
    Hit,
    Batch,
    Mixed95,
    Mixed50,
}

/// What a job measures.
#[derive(Clone, Copy)]
struct Key {
    group: Group,
    name: &'static str,
    threads: usize,
}

/// Runs every job once per round, in turn, for `rounds` rounds; each run repeats its job for
/// about `TARGET`. Returns the median rate (operations per second) of each job, in job order.
fn rounds(jobs: &mut [(Key, Job<'_>)], rounds: usize) -> Vec<(Key, f64)> {
    const TARGET: Duration = Duration::from_millis(250);
    // Calibrate: how many repetitions fill TARGET (a warm-up run, too).
    let reps: Vec<u64> = jobs
        .iter_mut()
        .map(|(_, job)| {
            let (_, t) = job(1);
            (TARGET.as_secs_f64() / t.as_secs_f64().max(1e-9)).clamp(1.0, 1e6) as u64
        })
        .collect();
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); jobs.len()];
    for _ in 0..rounds {
        for ((_, job), (reps, rates)) in jobs.iter_mut().zip(reps.iter().zip(rates.iter_mut())) {
            let (ops, t) = job(*reps);
            rates.push(ops as f64 / t.as_secs_f64());
        }
    }
    jobs.iter()
        .zip(rates)
        .map(|((key, _), r)| (*key, median(r)))
        .collect()
}

/// The results of `group` as one row per contender, in the order the jobs first name them.
fn table(results: &[(Key, f64)], group: Group) -> Vec<Rates> {
    let mut rows: Vec<Rates> = Vec::new();
    for (key, rate) in results.iter().filter(|(key, _)| key.group == group) {
        let at = match rows.iter().position(|r| r.name == key.name) {
            Some(at) => at,
            None => {
                rows.push(Rates {
                    name: key.name,
                    threads: [None; 2],
                });
                rows.len() - 1
            }
        };
        rows[at].threads[key.threads - 1] = Some(*rate);
    }
    rows
}

fn lookup_job<'a, C: Contender>(set: &'a C, queries: &'a [u64], threads: usize) -> Job<'a> {
    Box::new(move |iters| {
        let t = timed_split(iters, threads, queries, |qs| {
            black_box(qs.iter().filter(|&&k| set.contains(k)).count());
        });
        (iters * queries.len() as u64, t)
    })
}

/// Batched lookups of `queries` through `contains_many`.
fn batch_job<'a>(
    contains_many: impl Fn(&[u64], &mut [bool]) + Sync + 'a,
    queries: &'a [u64],
    threads: usize,
) -> Job<'a> {
    Box::new(move |iters| {
        let d = timed_split(iters, threads, queries, |qs| {
            let mut found = vec![false; qs.len()];
            contains_many(qs, &mut found);
            black_box(found);
        });
        (iters * queries.len() as u64, d)
    })
}

fn mixed_job<'a, C: Contender>(set: &'a C, streams: &'a [Vec<Op>], threads: usize) -> Job<'a> {
    Box::new(move |iters| (iters * OPS as u64, run_mixed(set, streams, threads, iters)))
}

/// Measured false-positive rate of `contains` over `probes` keys never inserted.
fn fpr(contains: impl Fn(u64) -> bool, probes: u64) -> f64 {
    let hits = (0..probes)
        .filter(|&i| contains(non_member(i | 1 << 61)))
        .count();
    hits as f64 / probes as f64
}

/// Measures every contender at one size.
pub(crate) fn measure_size(size: &'static str, n: usize, round_count: usize) -> SizeReport {
    eprintln!("{size}: building the contenders");
    let w = Workload::new(n);
    let (set, memory) = LookupSet::build(&w);

    eprintln!("{size}: lookups");
    let results = rounds(&mut set.jobs(&w), round_count);
    drop(set);

    eprintln!("{size}: mixed workloads");
    let mixed = mixed_rates(&w, round_count);

    eprintln!("{size}: fills");
    let slots = ours(n).capacity();
    let fills = fill_rates(n, slots, round_count.min(3));
    SizeReport {
        size,
        misses: table(&results, Group::Miss),
        hits: table(&results, Group::Hit),
        batched: table(&results, Group::Batch),
        mixed_95_5: table(&mixed, Group::Mixed95),
        mixed_50_50: table(&mixed, Group::Mixed50),
        fills,
        memory,
        insert_curve: insert_curve(n, slots),
    }
}

/// The contenders of the lookup workloads, each holding all of a workload's members.
struct LookupSet {
    filter: CuckooFilter,
    probe: Probe,
    dash: dashmap::DashSet<u64, AHashBuilder>,
    dash_sip: dashmap::DashSet<u64>,
    scc_set: scc::HashSet<u64, AHashBuilder>,
    rw: RwLock<HashSet<u64, AHashBuilder>>,
    cf: Alone<ahash::AHasher>,
    cf_sip: Alone<DefaultHasher>,
    cf_locked: Mutex<cuckoofilter::CuckooFilter<ahash::AHasher>>,
    acf: atomic_cuckoo_filter::CuckooFilter<ahash::AHasher>,
    acf_default: atomic_cuckoo_filter::CuckooFilter,
    bloom: fastbloom::AtomicBloomFilter<AHashBuilder>,
    fuse: xorf::BinaryFuse16,
}

impl LookupSet {
    /// Builds and fills every contender, recording the heap bytes and false-positive rate of
    /// one configuration of each.
    fn build(w: &Workload) -> (LookupSet, Vec<Memory>) {
        let n = w.n;
        let mut memory = Vec::new();
        let mut record = |name, bytes: usize, false_positive_rate| {
            memory.push(Memory {
                name,
                bits_per_key: bytes as f64 * 8.0 / n as f64,
                false_positive_rate,
            });
        };
        let probes = 1_000_000u64;
        let (filter, bytes) = measured(|| filled(ours(n), &w.members));
        record(
            "cuckoo-guard (16-bit)",
            bytes,
            Some(fpr(|k| filter.contains(&k), probes)),
        );
        let probe = Probe::new(filter.memory_usage());
        let (dash, bytes) = measured(|| {
            let set = dashmap::DashSet::with_capacity_and_hasher(n, AHashBuilder::new());
            filled(set, &w.members)
        });
        record("DashSet<u64>", bytes, None);
        let dash_sip = filled(dashmap::DashSet::<u64>::with_capacity(n), &w.members);
        let (scc_set, bytes) = measured(|| {
            filled(
                scc::HashSet::with_capacity_and_hasher(n, AHashBuilder::new()),
                &w.members,
            )
        });
        record("scc::HashSet<u64>", bytes, None);
        let (rw, bytes) = measured(|| {
            let set = HashSet::with_capacity_and_hasher(n, AHashBuilder::new());
            filled(RwLock::new(set), &w.members)
        });
        record("RwLock<HashSet<u64>>", bytes, None);
        let (cf, bytes) = measured(|| Alone(cuckoofilter_filled::<ahash::AHasher>(n, &w.members)));
        record(
            "cuckoofilter (8-bit)",
            bytes,
            Some(fpr(|k| cf.0.contains(&k), probes)),
        );
        let cf_sip = Alone(cuckoofilter_filled::<DefaultHasher>(n, &w.members));
        let cf_locked = Mutex::new(cuckoofilter_filled::<ahash::AHasher>(n, &w.members));
        let (acf, bytes) = measured(|| filled(acf_ahash(n), &w.members));
        let acf_fpr = fpr(|k| Contender::contains(&acf, k), probes);
        record("atomic-cuckoo-filter (16-bit)", bytes, Some(acf_fpr));
        let acf_default = atomic_cuckoo_filter::CuckooFilter::with_capacity(n);
        let acf_default = filled(acf_default, &w.members);
        let (bloom, bytes) = measured(|| {
            let rate = filter.expected_false_positive_rate();
            let bloom = fastbloom::AtomicBloomFilter::with_false_pos(rate)
                .hasher(AHashBuilder::new())
                .expected_items(n);
            filled(bloom, &w.members)
        });
        let bloom_fpr = fpr(|k| Contender::contains(&bloom, k), probes);
        record("fastbloom AtomicBloomFilter", bytes, Some(bloom_fpr));
        let (fuse, bytes) =
            measured(|| xorf::BinaryFuse16::try_from(&w.members).expect("distinct keys"));
        let fuse_fpr = fpr(|k| Contender::contains(&fuse, k), probes);
        record("BinaryFuse16 (static)", bytes, Some(fuse_fpr));
        let set = LookupSet {
            filter,
            probe,
            dash,
            dash_sip,
            scc_set,
            rw,
            cf,
            cf_sip,
            cf_locked,
            acf,
            acf_default,
            bloom,
            fuse,
        };
        (set, memory)
    }

    /// The lookup jobs: hits and misses at 1 and 2 threads (lock-free `cuckoofilter`, whose
    /// writes need `&mut`, at 1 thread only), then batched misses.
    fn jobs<'a>(&'a self, w: &'a Workload) -> Vec<(Key, Job<'a>)> {
        let mut jobs: Vec<(Key, Job<'_>)> = Vec::new();
        for (group, queries) in [(Group::Miss, &w.misses), (Group::Hit, &w.hits)] {
            for threads in [1, 2] {
                let mut push = |name, job| {
                    let key = Key {
                        group,
                        name,
                        threads,
                    };
                    jobs.push((key, job));
                };
                let t = threads;
                push(OURS, lookup_job(&self.filter, queries, t));
                push(PROBE, lookup_job(&self.probe, queries, t));
                push(DASH, lookup_job(&self.dash, queries, t));
                push(DASH_DEFAULT, lookup_job(&self.dash_sip, queries, t));
                push(SCC, lookup_job(&self.scc_set, queries, t));
                push(RWLOCK, lookup_job(&self.rw, queries, t));
                push(CF_MUTEX, lookup_job(&self.cf_locked, queries, t));
                push(ACF, lookup_job(&self.acf, queries, t));
                push(ACF_DEFAULT, lookup_job(&self.acf_default, queries, t));
                push(BLOOM, lookup_job(&self.bloom, queries, t));
                push(FUSE, lookup_job(&self.fuse, queries, t));
            }
            let alone = |name| Key {
                group,
                name,
                threads: 1,
            };
            jobs.push((alone(CF), lookup_job(&self.cf, queries, 1)));
            jobs.push((alone(CF_DEFAULT), lookup_job(&self.cf_sip, queries, 1)));
        }
        for threads in [1, 2] {
            let key = |name| Key {
                group: Group::Batch,
                name,
                threads,
            };
            let ours = |qs: &[u64], found: &mut [bool]| self.filter.contains_many(qs, found);
            let probe = |qs: &[u64], found: &mut [bool]| self.probe.contains_many(qs, found);
            jobs.push((key(OURS_BATCHED), batch_job(ours, &w.misses, threads)));
            jobs.push((key(PROBE_BATCHED), batch_job(probe, &w.misses, threads)));
        }
        jobs
    }
}

/// The mixed workloads, on fresh sets holding 90% of the members (room for writes).
fn mixed_rates(w: &Workload, round_count: usize) -> Vec<(Key, f64)> {
    let n = w.n;
    let members = &w.members[..n * 9 / 10];
    let filter = filled(ours(n), members);
    let dash = filled(
        dashmap::DashSet::with_capacity_and_hasher(n, AHashBuilder::new()),
        members,
    );
    let dash_sip = filled(dashmap::DashSet::<u64>::with_capacity(n), members);
    let scc_set = filled(
        scc::HashSet::with_capacity_and_hasher(n, AHashBuilder::new()),
        members,
    );
    let cf_locked = Mutex::new(cuckoofilter_filled::<ahash::AHasher>(n, members));
    let acf = filled(acf_ahash(n), members);
    let acf_default = filled(
        atomic_cuckoo_filter::CuckooFilter::with_capacity(n),
        members,
    );
    let streams: Vec<(Group, Vec<Vec<Op>>)> = [(Group::Mixed95, 50u64), (Group::Mixed50, 500)]
        .into_iter()
        .map(|(group, permille)| {
            (
                group,
                (1..=2u64).map(|s| mixed_ops(w, permille, s)).collect(),
            )
        })
        .collect();
    let mut jobs: Vec<(Key, Job<'_>)> = Vec::new();
    for (group, streams) in &streams {
        for threads in [1, 2] {
            let mut push = |name, job| {
                let key = Key {
                    group: *group,
                    name,
                    threads,
                };
                jobs.push((key, job));
            };
            let t = threads;
            push(OURS, mixed_job(&filter, streams, t));
            push(DASH, mixed_job(&dash, streams, t));
            push(DASH_DEFAULT, mixed_job(&dash_sip, streams, t));
            push(SCC, mixed_job(&scc_set, streams, t));
            push(CF_MUTEX, mixed_job(&cf_locked, streams, t));
            push(ACF, mixed_job(&acf, streams, t));
            push(ACF_DEFAULT, mixed_job(&acf_default, streams, t));
        }
    }
    rounds(&mut jobs, round_count)
}

/// Filling an empty structure to 95% of its slots (this crate's filter's slot count for the
/// exact set), `fill_rounds` times at each thread count; the median rate of each.
fn fill_rates(n: usize, slots: usize, fill_rounds: usize) -> Vec<Rates> {
    let fill_keys: Vec<u64> = (0..(slots as f64 * 0.95) as u64).map(member).collect();
    let mut rows: Vec<Rates> = Vec::new();
    for t in [1, 2] {
        let mut rates: Vec<(&'static str, Vec<f64>)> = Vec::new();
        for _ in 0..fill_rounds {
            let mut fill = |name: &'static str, keys: &[u64], insert: &(dyn Fn(u64) + Sync)| {
                let d = timed_split(1, t, keys, |ks| ks.iter().for_each(|&k| insert(k)));
                let rate = keys.len() as f64 / d.as_secs_f64();
                match rates.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, r)) => r.push(rate),
                    None => rates.push((name, vec![rate])),
                }
            };
            let f = ours(n);
            fill(OURS, &fill_keys, &|k| {
                let _ = f.insert(&k);
            });
            drop(f);
            let d =
                dashmap::DashSet::with_capacity_and_hasher(fill_keys.len(), AHashBuilder::new());
            fill(DASH, &fill_keys, &|k| {
                d.insert(k);
            });
            drop(d);
            let cf_keys =
                &fill_keys[..((cuckoofilter_slots(n) as f64 * 0.95) as usize).min(fill_keys.len())];
            let c = Mutex::new(cuckoofilter::CuckooFilter::<ahash::AHasher>::with_capacity(
                n,
            ));
            fill(CF_MUTEX, cf_keys, &|k| {
                let _ = c.lock().unwrap().add(&k);
            });
            drop(c);
            let a = acf_ahash(n);
            let a_keys = &fill_keys[..((a.capacity() as f64 * 0.95) as usize).min(fill_keys.len())];
            fill(ACF, a_keys, &|k| {
                let _ = a.insert(&k);
            });
        }
        for (name, r) in rates {
            match rows.iter_mut().find(|row| row.name == name) {
                Some(row) => row.threads[t - 1] = Some(median(r)),
                None => {
                    let mut threads = [None; 2];
                    threads[t - 1] = Some(median(r));
                    rows.push(Rates { name, threads });
                }
            }
        }
    }
    rows
}

/// Insert throughput against load: this crate's filter, in steps of 5% load, 1 thread.
fn insert_curve(n: usize, slots: usize) -> Vec<LoadPoint> {
    let f = ours(n);
    let mut curve = Vec::new();
    let mut next = 0u64;
    for step in 1..=19 {
        let target = (slots as f64 * step as f64 * 0.05) as u64;
        let start = Instant::now();
        let from = next;
        while next < target {
            if f.insert(&member(next)).is_err() {
                break;
            }
            next += 1;
        }
        let rate = (next - from) as f64 / start.elapsed().as_secs_f64();
        curve.push(LoadPoint {
            load: next as f64 / slots as f64,
            inserts_per_second: rate,
        });
    }
    curve
}

impl Machine {
    /// The CPU model, core count and cache sizes as Linux reports them.
    pub(crate) fn detect() -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|m| m.trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            caches: cache_sizes(),
        }
    }
}

/// The data cache sizes of CPU 0 as Linux reports them, e.g. "L1d 48K, L2 2048K, L3 266240K".
fn cache_sizes() -> String {
    let mut parts = Vec::new();
    for index in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{index}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        if kind.trim() == "Instruction" {
            continue;
        }
        let suffix = if kind.trim() == "Data" { "d" } else { "" };
        parts.push(format!("L{}{suffix} {}", level.trim(), size.trim()));
    }
    if parts.is_empty() {
        "cache sizes unknown".into()
    } else {
        format!("caches per core or shared: {}", parts.join(", "))
    }
}

/// A made-up one-size report (1M) with the contenders the targets name, for tests.
#[cfg(test)]
pub(crate) fn sample_report() -> Report {
    let rates = |rows: &[(&'static str, f64, Option<f64>)]| -> Vec<Rates> {
        rows.iter()
            .map(|&(name, one, two)| Rates {
                name,
                threads: [Some(one * 1e6), two.map(|v| v * 1e6)],
            })
            .collect()
    };
    let misses = rates(&[
        (OURS, 100.0, Some(180.0)),
        (PROBE, 50.0, Some(100.0)),
        (CF, 80.0, None),
        (CF_DEFAULT, 40.0, None),
    ]);
    let size = SizeReport {
        size: "1M",
        hits: rates(&[(OURS, 110.0, Some(200.0)), (PROBE, 60.0, Some(120.0))]),
        misses,
        batched: rates(&[(OURS_BATCHED, 150.0, Some(290.0))]),
        mixed_95_5: rates(&[(OURS, 50.0, Some(90.0))]),
        mixed_50_50: rates(&[(OURS, 30.0, Some(40.0))]),
        fills: rates(&[(OURS, 15.0, Some(17.0))]),
        memory: vec![Memory {
            name: "cuckoo-guard (16-bit)",
            bits_per_key: 17.36,
            false_positive_rate: Some(0.000122),
        }],
        insert_curve: (1..=19)
            .map(|step| LoadPoint {
                load: step as f64 * 0.05,
                inserts_per_second: (20 - step) as f64 * 1e6,
            })
            .collect(),
    };
    Report {
        rounds: 3,
        seconds: 60.0,
        machine: Machine {
            cpu: "Test CPU".into(),
            cores: 2,
            caches: "cache sizes unknown".into(),
        },
        sizes: vec![size],
    }
}
