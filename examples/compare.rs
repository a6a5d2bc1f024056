//! The comparison report: every contender measured in turn, in the same run, and written to
//! `BENCHMARKS.md` (with SVG plots under `docs/`).
//!
//! ```sh
//! cargo run --release --example compare                 # 1M and 16M keys, 5 rounds
//! CG_BENCH_SIZES=1M cargo run --release --example compare -- 3   # one size, 3 rounds
//! ```
//!
//! Each round measures every contender once (A B C ... A B C ...), each measurement running
//! its workload for about a quarter of a second; the report gives the median over rounds.
//! Workloads, contenders and key generation are those of the criterion suite
//! (`benches/contenders.rs`). Heap bytes are counted by a counting global allocator: the
//! bytes a contender holds after being built and filled, divided by its keys.

#[path = "../benches/contenders.rs"]
mod contenders;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use contenders::*;

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

/// Runs every job once per round, in turn, for `rounds` rounds; each run repeats its job for
/// about `TARGET`. Returns the median rate (operations per second) of each job.
fn rounds(jobs: &mut [(String, Job<'_>)], rounds: usize) -> BTreeMap<String, f64> {
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
        .map(|((name, _), r)| (name.clone(), median(r)))
        .collect()
}

fn lookup_job<'a, C: Contender>(set: &'a C, queries: &'a [u64], threads: usize) -> Job<'a> {
    Box::new(move |iters| {
        let t = timed_split(iters, threads, queries, |qs| {
            black_box(qs.iter().filter(|&&k| set.contains(k)).count());
        });
        (iters * queries.len() as u64, t)
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

/// Everything measured at one size.
struct SizeReport {
    size: &'static str,
    n: usize,
    lookups: BTreeMap<String, f64>,
    mixed: BTreeMap<String, f64>,
    fills: BTreeMap<String, f64>,
    /// name -> (bits per key, measured false-positive rate or None for exact sets)
    memory: Vec<(String, f64, Option<f64>)>,
    /// (load after the step, inserts per second in the step) for this crate's filter.
    insert_curve: Vec<(f64, f64)>,
}

fn measure_size(size: &'static str, n: usize, round_count: usize) -> SizeReport {
    eprintln!("{size}: building the contenders");
    let w = Workload::new(n);
    let mut memory = Vec::new();
    let keys = n as f64;
    let probes = 1_000_000u64;

    let (filter, bytes) = measured(|| filled(ours(n), &w.members));
    memory.push((
        "cuckoo-guard (16-bit)".to_string(),
        bytes as f64 * 8.0 / keys,
        Some(fpr(|k| filter.contains(&k), probes)),
    ));
    let probe = Probe::new(filter.memory_usage());
    let (dash, bytes) = measured(|| {
        filled(
            dashmap::DashSet::with_capacity_and_hasher(n, AHashBuilder::new()),
            &w.members,
        )
    });
    memory.push(("DashSet<u64>".into(), bytes as f64 * 8.0 / keys, None));
    let dash_sip = filled(dashmap::DashSet::<u64>::with_capacity(n), &w.members);
    let (scc_set, bytes) = measured(|| {
        filled(
            scc::HashSet::with_capacity_and_hasher(n, AHashBuilder::new()),
            &w.members,
        )
    });
    memory.push(("scc::HashSet<u64>".into(), bytes as f64 * 8.0 / keys, None));
    let (rw, bytes) = measured(|| {
        filled(
            RwLock::new(HashSet::with_capacity_and_hasher(n, AHashBuilder::new())),
            &w.members,
        )
    });
    memory.push((
        "RwLock<HashSet<u64>>".into(),
        bytes as f64 * 8.0 / keys,
        None,
    ));
    let (cf, bytes) = measured(|| Alone(cuckoofilter_filled::<ahash::AHasher>(n, &w.members)));
    memory.push((
        "cuckoofilter (8-bit)".into(),
        bytes as f64 * 8.0 / keys,
        Some(fpr(|k| cf.0.contains(&k), probes)),
    ));
    let cf_sip = Alone(cuckoofilter_filled::<
        std::collections::hash_map::DefaultHasher,
    >(n, &w.members));
    let cf_locked = Mutex::new(cuckoofilter_filled::<ahash::AHasher>(n, &w.members));
    let (acf, bytes) = measured(|| filled(acf_ahash(n), &w.members));
    memory.push((
        "atomic-cuckoo-filter (16-bit)".into(),
        bytes as f64 * 8.0 / keys,
        Some(fpr(|k| Contender::contains(&acf, k), probes)),
    ));
    let acf_default = filled(
        atomic_cuckoo_filter::CuckooFilter::with_capacity(n),
        &w.members,
    );
    let (bloom, bytes) = measured(|| {
        filled(
            fastbloom::AtomicBloomFilter::with_false_pos(filter.expected_false_positive_rate())
                .hasher(AHashBuilder::new())
                .expected_items(n),
            &w.members,
        )
    });
    memory.push((
        "fastbloom AtomicBloomFilter".into(),
        bytes as f64 * 8.0 / keys,
        Some(fpr(|k| Contender::contains(&bloom, k), probes)),
    ));
    let (fuse, bytes) =
        measured(|| xorf::BinaryFuse16::try_from(&w.members).expect("distinct keys"));
    memory.push((
        "BinaryFuse16 (static)".into(),
        bytes as f64 * 8.0 / keys,
        Some(fpr(|k| Contender::contains(&fuse, k), probes)),
    ));

    eprintln!("{size}: lookups");
    let mut jobs: Vec<(String, Job<'_>)> = Vec::new();
    for (kind, queries) in [("miss", &w.misses), ("hit", &w.hits)] {
        for t in [1, 2] {
            let tag = |name: &str| format!("{kind}/{name}/{t}t");
            jobs.push((tag("cuckoo-guard"), lookup_job(&filter, queries, t)));
            jobs.push((tag("probe"), lookup_job(&probe, queries, t)));
            jobs.push((tag("DashSet ahash"), lookup_job(&dash, queries, t)));
            jobs.push((tag("DashSet default"), lookup_job(&dash_sip, queries, t)));
            jobs.push((tag("scc::HashSet ahash"), lookup_job(&scc_set, queries, t)));
            jobs.push((tag("RwLock<HashSet> ahash"), lookup_job(&rw, queries, t)));
            jobs.push((
                tag("Mutex<cuckoofilter> ahash"),
                lookup_job(&cf_locked, queries, t),
            ));
            jobs.push((
                tag("atomic-cuckoo-filter ahash"),
                lookup_job(&acf, queries, t),
            ));
            jobs.push((
                tag("atomic-cuckoo-filter default"),
                lookup_job(&acf_default, queries, t),
            ));
            jobs.push((tag("fastbloom ahash"), lookup_job(&bloom, queries, t)));
            jobs.push((tag("BinaryFuse16"), lookup_job(&fuse, queries, t)));
        }
        jobs.push((
            format!("{kind}/cuckoofilter ahash/1t"),
            lookup_job(&cf, queries, 1),
        ));
        jobs.push((
            format!("{kind}/cuckoofilter default/1t"),
            lookup_job(&cf_sip, queries, 1),
        ));
    }
    for t in [1, 2] {
        let misses = &w.misses;
        let filter = &filter;
        let probe = &probe;
        jobs.push((
            format!("batch/cuckoo-guard contains_many/{t}t"),
            Box::new(move |iters| {
                let d = timed_split(iters, t, misses, |qs| {
                    let mut found = vec![false; qs.len()];
                    filter.contains_many(qs, &mut found);
                    black_box(found);
                });
                (iters * misses.len() as u64, d)
            }),
        ));
        jobs.push((
            format!("batch/probe batched/{t}t"),
            Box::new(move |iters| {
                let d = timed_split(iters, t, misses, |qs| {
                    let mut found = vec![false; qs.len()];
                    probe.contains_many(qs, &mut found);
                    black_box(found);
                });
                (iters * misses.len() as u64, d)
            }),
        ));
    }
    let lookups = rounds(&mut jobs, round_count);
    drop(jobs);
    drop((dash_sip, cf_sip, acf_default, bloom, fuse, probe, cf));

    eprintln!("{size}: mixed workloads");
    // The mixed workloads run on fresh sets holding 90% of the members (room for writes).
    drop((filter, dash, scc_set, rw, cf_locked, acf));
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
    let streams: Vec<(&str, Vec<Vec<Op>>)> = [("95_5", 50u64), ("50_50", 500)]
        .into_iter()
        .map(|(label, permille)| {
            (
                label,
                (1..=2u64).map(|s| mixed_ops(&w, permille, s)).collect(),
            )
        })
        .collect();
    let mut jobs: Vec<(String, Job<'_>)> = Vec::new();
    for (label, streams) in &streams {
        for t in [1, 2] {
            let tag = |name: &str| format!("{label}/{name}/{t}t");
            jobs.push((tag("cuckoo-guard"), mixed_job(&filter, streams, t)));
            jobs.push((tag("DashSet ahash"), mixed_job(&dash, streams, t)));
            jobs.push((tag("DashSet default"), mixed_job(&dash_sip, streams, t)));
            jobs.push((tag("scc::HashSet ahash"), mixed_job(&scc_set, streams, t)));
            jobs.push((
                tag("Mutex<cuckoofilter> ahash"),
                mixed_job(&cf_locked, streams, t),
            ));
            jobs.push((
                tag("atomic-cuckoo-filter ahash"),
                mixed_job(&acf, streams, t),
            ));
            jobs.push((
                tag("atomic-cuckoo-filter default"),
                mixed_job(&acf_default, streams, t),
            ));
        }
    }
    let mixed = rounds(&mut jobs, round_count);
    drop(jobs);
    drop((filter, dash, dash_sip, scc_set, cf_locked, acf, acf_default));

    eprintln!("{size}: fills");
    let slots = ours(n).capacity();
    let fill_keys: Vec<u64> = (0..(slots as f64 * 0.95) as u64).map(member).collect();
    let fill_rounds = round_count.min(3);
    let mut fills = BTreeMap::new();
    for t in [1, 2] {
        let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for _ in 0..fill_rounds {
            let mut fill = |name: &'static str, keys: &[u64], insert: &(dyn Fn(u64) + Sync)| {
                let d = timed_split(1, t, keys, |ks| ks.iter().for_each(|&k| insert(k)));
                rates
                    .entry(name)
                    .or_default()
                    .push(keys.len() as f64 / d.as_secs_f64());
            };
            let f = ours(n);
            fill("cuckoo-guard", &fill_keys, &|k| {
                let _ = f.insert(&k);
            });
            drop(f);
            let d =
                dashmap::DashSet::with_capacity_and_hasher(fill_keys.len(), AHashBuilder::new());
            fill("DashSet ahash", &fill_keys, &|k| {
                d.insert(k);
            });
            drop(d);
            let cf_keys =
                &fill_keys[..((cuckoofilter_slots(n) as f64 * 0.95) as usize).min(fill_keys.len())];
            let c = Mutex::new(cuckoofilter::CuckooFilter::<ahash::AHasher>::with_capacity(
                n,
            ));
            fill("Mutex<cuckoofilter> ahash", cf_keys, &|k| {
                let _ = c.lock().unwrap().add(&k);
            });
            drop(c);
            let a = acf_ahash(n);
            let a_keys = &fill_keys[..((a.capacity() as f64 * 0.95) as usize).min(fill_keys.len())];
            fill("atomic-cuckoo-filter ahash", a_keys, &|k| {
                let _ = a.insert(&k);
            });
        }
        for (name, r) in rates {
            fills.insert(format!("{name}/{t}t"), median(r));
        }
    }

    // Insert throughput against load: this crate's filter, in steps of 5% load.
    let f = ours(n);
    let mut insert_curve = Vec::new();
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
        insert_curve.push((next as f64 / slots as f64, rate));
    }

    SizeReport {
        size,
        n,
        lookups,
        mixed,
        fills,
        memory,
        insert_curve,
    }
}

fn mps(rate: f64) -> String {
    format!("{:.1}", rate / 1e6)
}

/// A horizontal bar chart of `bars` (label, value), as SVG.
fn bar_chart(title: &str, unit: &str, bars: &[(String, f64)]) -> String {
    let width = 760.0;
    let left = 290.0;
    let row = 22.0;
    let height = 50.0 + row * bars.len() as f64;
    let max = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <text x=\"10\" y=\"20\" font-size=\"14\">{title}</text>\n"
    );
    for (i, (label, value)) in bars.iter().enumerate() {
        let y = 35.0 + row * i as f64;
        let w = (width - left - 90.0) * value / max;
        let colour = if label.starts_with("cuckoo-guard") {
            "#d9480f"
        } else if label.starts_with("probe") {
            "#868e96"
        } else {
            "#1c7ed6"
        };
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{left}\" y=\"{}\" width=\"{w:.1}\" height=\"{}\" fill=\"{colour}\"/>\
             <text x=\"{:.1}\" y=\"{}\">{:.1} {unit}</text>",
            left - 6.0,
            y + 13.0,
            label.replace('<', "&lt;").replace('>', "&gt;"),
            y + 2.0,
            row - 6.0,
            left + w + 4.0,
            y + 13.0,
            value
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// A line chart of `points` (x in 0..1 load, y rate), as SVG.
fn line_chart(title: &str, series: &[(String, Vec<(f64, f64)>)]) -> String {
    let (width, height, left, bottom) = (760.0, 360.0, 70.0, 40.0);
    let plot_w = width - left - 20.0;
    let plot_h = height - bottom - 40.0;
    let max_y = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-9);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <text x=\"10\" y=\"20\" font-size=\"14\">{title}</text>\n\
         <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"40\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\n",
        40.0 + plot_h,
        left + plot_w,
        40.0 + plot_h,
        40.0 + plot_h
    );
    for tick in 0..=10 {
        let x = left + plot_w * tick as f64 / 10.0;
        let _ = writeln!(
            svg,
            "<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}%</text>",
            55.0 + plot_h,
            tick * 10
        );
    }
    for tick in 0..=4 {
        let y = 40.0 + plot_h * (1.0 - tick as f64 / 4.0);
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{y:.1}\" text-anchor=\"end\">{:.0} M/s</text>",
            left - 4.0,
            max_y * tick as f64 / 4.0 / 1e6
        );
    }
    let colours = ["#d9480f", "#1c7ed6", "#2f9e44", "#862e9c"];
    for (i, (name, points)) in series.iter().enumerate() {
        let colour = colours[i % colours.len()];
        let path: Vec<String> = points
            .iter()
            .map(|(x, y)| {
                format!(
                    "{:.1},{:.1}",
                    left + plot_w * x,
                    40.0 + plot_h * (1.0 - y / max_y)
                )
            })
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>\
             <text x=\"{}\" y=\"{}\" fill=\"{colour}\">{name}</text>",
            path.join(" "),
            left + 10.0,
            60.0 + 16.0 * i as f64
        );
    }
    svg.push_str("</svg>\n");
    svg
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

/// One target: a ratio measured against a threshold.
fn target(out: &mut String, what: &str, ratio: f64, threshold: f64) -> bool {
    let met = ratio >= threshold;
    let _ = writeln!(
        out,
        "| {what} | {ratio:.2}x | {threshold:.2}x | {} |",
        if met { "met" } else { "**missed**" }
    );
    met
}

fn main() {
    let round_count: usize = std::env::args()
        .nth(1)
        .map_or(Ok(5), |a| a.parse())
        .expect("rounds: a number");
    let started = Instant::now();
    let reports: Vec<SizeReport> = sizes()
        .into_iter()
        .map(|(size, n)| measure_size(size, n, round_count))
        .collect();

    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let caches = cache_sizes();
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(
        md,
        "Generated by `cargo run --release --example compare` ({} rounds per measurement, \
         medians; each contender measured in turn within every round). Machine: {cpu}, {cores} \
         cores, {caches}; the run took {:.0} s. A 2-core VM is noisy: compare figures within this file, \
         not across runs. Throughput is in millions of operations per second of wall time; \
         `1t`/`2t` are thread counts, and both do the same total work.\n",
        round_count,
        started.elapsed().as_secs_f64()
    );
    let _ = writeln!(
        md,
        "Contenders use ahash where they take a hasher (`default` rows use their own default \
         hasher). `probe` is the physical limit: an array of this crate's filter's byte size, \
         two independent random cache-line reads per lookup. Plots: `docs/*.svg`.\n"
    );
    for r in &reports {
        let _ = writeln!(md, "## {} keys ({})\n", r.n, r.size);
        let probe1 = r.lookups[&"miss/probe/1t".to_string()];
        let _ = writeln!(md, "### Lookups (M/s)\n");
        let _ = writeln!(
            md,
            "| contender | miss 1t | miss 2t | hit 1t | hit 2t | miss 1t / probe |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|");
        let mut names: Vec<String> = r
            .lookups
            .keys()
            .filter_map(|k| k.strip_prefix("miss/"))
            .filter_map(|k| k.rsplit_once('/').map(|(name, _)| name.to_string()))
            .collect();
        names.dedup();
        for name in &names {
            let get = |kind: &str, t: usize| r.lookups.get(&format!("{kind}/{name}/{t}t")).copied();
            let cell = |v: Option<f64>| v.map_or("-".into(), mps);
            let _ = writeln!(
                md,
                "| {name} | {} | {} | {} | {} | {} |",
                cell(get("miss", 1)),
                cell(get("miss", 2)),
                cell(get("hit", 1)),
                cell(get("hit", 2)),
                get("miss", 1).map_or("-".into(), |v| format!("{:.2}", v / probe1))
            );
        }
        let _ = writeln!(md, "\n### Batched lookups of absent keys (M/s)\n");
        let _ = writeln!(md, "| contender | 1t | 2t |\n|---|---|---|");
        for name in ["cuckoo-guard contains_many", "probe batched"] {
            let _ = writeln!(
                md,
                "| {name} | {} | {} |",
                mps(r.lookups[&format!("batch/{name}/1t")]),
                mps(r.lookups[&format!("batch/{name}/2t")])
            );
        }
        let _ = writeln!(
            md,
            "\n### Mixed workloads (M ops/s; reads half Zipf(0.99) members, half absent keys)\n"
        );
        let _ = writeln!(
            md,
            "| contender | 95/5 1t | 95/5 2t | 50/50 1t | 50/50 2t |\n|---|---|---|---|---|"
        );
        let mut names: Vec<String> = r
            .mixed
            .keys()
            .filter_map(|k| k.strip_prefix("95_5/"))
            .filter_map(|k| k.rsplit_once('/').map(|(n, _)| n.to_string()))
            .collect();
        names.dedup();
        for name in &names {
            let get = |l: &str, t: usize| mps(r.mixed[&format!("{l}/{name}/{t}t")]);
            let _ = writeln!(
                md,
                "| {name} | {} | {} | {} | {} |",
                get("95_5", 1),
                get("95_5", 2),
                get("50_50", 1),
                get("50_50", 2)
            );
        }
        let _ = writeln!(
            md,
            "\n### Filling an empty structure to 95% (M inserts/s; filters to 95% of their own slots)\n"
        );
        let _ = writeln!(md, "| contender | 1t | 2t |\n|---|---|---|");
        let mut names: Vec<String> = r
            .fills
            .keys()
            .filter_map(|k| k.rsplit_once('/').map(|(n, _)| n.to_string()))
            .collect();
        names.dedup();
        for name in &names {
            let _ = writeln!(
                md,
                "| {name} | {} | {} |",
                mps(r.fills[&format!("{name}/1t")]),
                mps(r.fills[&format!("{name}/2t")])
            );
        }
        let _ = writeln!(
            md,
            "\n### Memory and false positives after the fill (heap bytes counted by the allocator)\n"
        );
        let _ = writeln!(
            md,
            "| contender | bits per key | false-positive rate (1M absent keys) |\n|---|---|---|"
        );
        for (name, bits, rate) in &r.memory {
            let _ = writeln!(
                md,
                "| {name} | {bits:.1} | {} |",
                rate.map_or("exact".into(), |p| format!("{:.4}%", p * 100.0))
            );
        }

        // Plots.
        let bars: Vec<(String, f64)> = names_for_plot(&r.lookups)
            .into_iter()
            .map(|(label, v)| (label, v / 1e6))
            .collect();
        let _ = std::fs::create_dir_all("docs");
        let _ = std::fs::write(
            format!("docs/lookups_{}.svg", r.size),
            bar_chart(
                &format!("Lookups of absent keys by thread count, {} keys", r.size),
                "M/s",
                &bars,
            ),
        );
        let _ = std::fs::write(
            format!("docs/insert_vs_load_{}.svg", r.size),
            line_chart(
                &format!(
                    "cuckoo-guard insert rate against load, {} keys, 1 thread",
                    r.size
                ),
                &[("cuckoo-guard".to_string(), r.insert_curve.clone())],
            ),
        );
        let _ = writeln!(
            md,
            "\n![lookups](docs/lookups_{0}.svg)\n\n![inserts against load](docs/insert_vs_load_{0}.svg)\n",
            r.size
        );
    }

    // Targets (issue 4), where both sizes were measured.
    let _ = writeln!(md, "## Targets\n");
    let _ = writeln!(md, "| target | measured | required | |\n|---|---|---|---|");
    let mut missed = 0;
    for r in &reports {
        let l = |k: &str| r.lookups[&k.to_string()];
        let m = |k: &str| r.mixed[&k.to_string()];
        let best = |a: f64, b: f64| a.max(b);
        let ours1 = l("miss/cuckoo-guard/1t");
        let s = r.size;
        let mut check = |what: String, ratio: f64, threshold: f64| {
            if !target(&mut md, &what, ratio, threshold) {
                missed += 1;
            }
        };
        if s == "16M" {
            check(
                "16M misses, 1t: vs cuckoofilter (faster hasher)".into(),
                ours1
                    / best(
                        l("miss/cuckoofilter ahash/1t"),
                        l("miss/cuckoofilter default/1t"),
                    ),
                1.1,
            );
            check(
                "16M misses, 1t: vs DashSet (faster hasher)".into(),
                ours1 / best(l("miss/DashSet ahash/1t"), l("miss/DashSet default/1t")),
                1.5,
            );
            check(
                "16M misses, 1t: vs scalar probe".into(),
                ours1 / l("miss/probe/1t"),
                0.8,
            );
            check(
                "16M contains_many vs batched probe".into(),
                l("batch/cuckoo-guard contains_many/1t") / l("batch/probe batched/1t"),
                0.85,
            );
            check(
                "16M contains_many vs contains".into(),
                l("batch/cuckoo-guard contains_many/1t") / ours1,
                1.4,
            );

            check(
                "16M mixed 95/5, 2t: vs DashSet (faster hasher)".into(),
                m("95_5/cuckoo-guard/2t")
                    / best(m("95_5/DashSet ahash/2t"), m("95_5/DashSet default/2t")),
                2.0,
            );
            check(
                "16M mixed 95/5, 2t: vs Mutex<cuckoofilter> ahash".into(),
                m("95_5/cuckoo-guard/2t") / m("95_5/Mutex<cuckoofilter> ahash/2t"),
                4.0,
            );
            check(
                "16M mixed 95/5, 2t: vs atomic-cuckoo-filter (faster hasher)".into(),
                m("95_5/cuckoo-guard/2t")
                    / best(
                        m("95_5/atomic-cuckoo-filter ahash/2t"),
                        m("95_5/atomic-cuckoo-filter default/2t"),
                    ),
                1.5,
            );
        }
        if s == "1M" {
            check(
                "1M misses, 1t: vs cuckoofilter (faster hasher)".into(),
                ours1
                    / best(
                        l("miss/cuckoofilter ahash/1t"),
                        l("miss/cuckoofilter default/1t"),
                    ),
                1.3,
            );
        }
        check(
            format!("{s} lookups, 2t vs 1t (misses)"),
            l("miss/cuckoo-guard/2t") / ours1,
            1.8,
        );
        let bits = r.memory[0].1;
        let _ = writeln!(
            md,
            "| {s} memory, bits per key (this crate's filter at ~94% load) | {bits:.2} | at most 17.5 | {} |",
            if bits <= 17.5 { "met" } else { "**missed**" }
        );
        if bits > 17.5 {
            missed += 1;
        }
        let _ = writeln!(
            md,
            "| (reference, not a target) {s} probe: 2t vs 1t (misses) | {:.2}x | - | - |",
            l("miss/probe/2t") / l("miss/probe/1t")
        );
        if s == "16M" {
            let _ = writeln!(
                md,
                "| (reference, not a target) 16M probe: batched vs scalar | {:.2}x | - | - |",
                l("batch/probe batched/1t") / l("miss/probe/1t")
            );
        }
    }
    let _ = writeln!(
        md,
        "\n{missed} target(s) missed in this run. Why, and what is being done about it: see \
         the notes below.\n"
    );
    md.push_str(NOTES);
    // Hand-written sections after the marker are measured by other commands (they name
    // theirs) and are kept as they are.
    if let Ok(old) = std::fs::read_to_string("BENCHMARKS.md") {
        if let Some(at) = old.find(HAND_WRITTEN_MARKER) {
            md.push('\n');
            md.push_str(&old[at..]);
        }
    }
    std::fs::write("BENCHMARKS.md", &md).expect("write BENCHMARKS.md");
    print!("{md}");
}

/// The line after which `BENCHMARKS.md` holds hand-written sections this report keeps.
const HAND_WRITTEN_MARKER: &str =
    "<!-- Hand-written sections follow; examples/compare.rs keeps them. -->";

/// `miss` rates at 1 and 2 threads per contender, for the bar chart.
fn names_for_plot(lookups: &BTreeMap<String, f64>) -> Vec<(String, f64)> {
    lookups
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("miss/").map(|rest| (rest.to_string(), *v)))
        .collect()
}

/// Analysis that stays true from run to run (the figures above are regenerated).
const NOTES: &str = "## Notes\n\n\
- **What makes `contains` fast.** A lookup pins no epoch: a crossbeam-epoch pin is a locked \
  instruction, a full barrier on x86 that keeps consecutive lookups from overlapping their \
  cache misses (it cost about 30% when every `contains` pinned). Its first attempt is inline \
  and branch-light (the retry loop is a cold function), both bucket words are compared with \
  the fingerprint in one SSE2 register, the alternate bucket costs two multiplications and \
  no division, and a negative is validated by comparing the whole stripe word: under 60 \
  instructions per negative lookup on x86_64, ahash included.\n\
- **16M misses against the scalar probe (0.8x wanted).** The probe does two cache-line reads \
  and almost nothing else; on this machine even the 16M table (about 34 MB) sits in the \
  260 MB L3, so lookups are bound by instructions per lookup as much as by memory. The rest \
  of the gap is the price of the guarantee and of safe code: validating a negative (load the \
  pair's stripe word before the buckets, reload it after, compare) is about a fifth of a \
  negative lookup's work (an experiment without it, which is unsound, ran about 20% faster), \
  and the three bounds checks stay (unchecked indexing measured 5 to 8% faster, not taken: \
  its soundness would rest on every probe coming from the table it indexes).\n\
- **`contains_many` against `contains` (1.4x wanted).** Batching pays only where the \
  out-of-order core cannot keep enough cache misses in flight by itself. This machine's core \
  can: the probe itself loses by batching (the reference row: batched vs scalar), at 16M keys \
  (L3-resident here) and also at 200M keys, a 405 MB table in DRAM, where \
  `cargo run --release --example lookups` measured the probe at 0.83x batched vs scalar and \
  `contains_many` at 0.88x `contains` (39.0 M/s for `contains`, 0.95x the scalar probe). \
  `contains_many` keeps up with the batched probe, which is the part of the target this \
  machine can show.\n\
- **2-thread lookups (1.8x wanted).** The two vCPUs share a host and the 2-thread figures \
  swing from run to run (four runs of `cargo run --release --example fill` gave 84 to 139 \
  M/s for 2-thread absent lookups); the reference rows give the probe's own scaling in the \
  same run. At 1M keys this crate scales about as the probe does when they run alone \
  (`cargo run --release --example lookups -- 1000000`: 1.82x against 1.84x). At 16M keys \
  scalar `contains` scales less (`-- 16000000`: 1.61x against 1.87x, and lower inside the \
  full report), while `contains_many` scales like the probe (see the batched table). \
  Experiments locate the cost in the negative's validation: without the stripe-word loads \
  (unsound, an experiment only) 2-thread `contains` reached 1.8x; with 512 stripes instead \
  of 4096, 1.69x. Our reading, not proven (this VM exposes no performance counters): the \
  scalar loop is limited by how many lookups fit in the out-of-order window, and when two \
  cores share the L3 its latency rises, which costs a loop of about 57 instructions per \
  lookup (counted in the disassembly) more than the probe's, which has about half; prefetches retire at once, so `contains_many` keeps its \
  misses in flight. For two or more threads on a large filter, use `contains_many`.\n\
- `cuckoofilter` uses 8-bit fingerprints and a power-of-two table: half the bytes of this \
  crate's 16-bit default (and a 3% false-positive rate), and a mask instead of \
  multiplications for the index. Its writes need `&mut`, hence the `Mutex` in the \
  concurrent groups.\n\
- **Inserts.** Most inserts take one stripe lock (a free slot in the primary bucket), not two, \
  and statistics counters are sharded by thread. Two writers on a table that fits in the \
  caches still scale poorly: each insert writes a random bucket line and a random stripe line \
  that the other core wrote last about half the time, so lines move between cores on most \
  inserts (`DashSet` shows the same). On the 16M table the writers overlap their misses \
  and scale.\n";
