//! Where a negative lookup's instructions go: absent-key `contains` calls, the bare two-line
//! probe (`benches/contenders.rs`) and an empty loop, each in its own `#[inline(never)]`
//! function, so that `valgrind --tool=callgrind --toggle-collect` counts each alone
//! (BENCHMARKS.md, "Where the cycles go").
//!
//! ```sh
//! cargo run --release --example lookup_cost -- 16000000 1000000   # keys, lookups
//! valgrind --tool=callgrind --toggle-collect='*run_contains*' \
//!     target/release/examples/lookup_cost 16000000 1000000
//! ```
//!
//! Prints the filter's load and what each loop found, so the runs can be checked against
//! each other; the timings it prints are one pass each, not a benchmark.

#[path = "../benches/contenders.rs"]
mod contenders;

use std::time::Instant;

use contenders::{built_class, insert_members, non_member, Contender, Probe};
use cuckoo_guard::CuckooFilter;

/// Absent keys counted present by `filter` (its false positives).
#[inline(never)]
fn run_contains(filter: &CuckooFilter, keys: &[u64]) -> usize {
    let mut found = 0;
    for &k in keys {
        if filter.contains(&k) {
            found += 1;
        }
    }
    found
}

/// The same loop around the probe.
#[inline(never)]
fn run_probe(probe: &Probe, keys: &[u64]) -> usize {
    let mut found = 0;
    for &k in keys {
        if probe.contains(k) {
            found += 1;
        }
    }
    found
}

/// The same loop around a test the optimizer cannot drop or vectorize: the loop's own cost.
#[inline(never)]
fn run_empty(keys: &[u64]) -> usize {
    let mut found = 0;
    for &k in keys {
        if std::hint::black_box(k) == 0 {
            found += 1;
        }
    }
    found
}

/// One measured loop over the absent keys.
type Run<'a> = dyn Fn(&[u64]) -> usize + 'a;

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .map_or(Ok(default), |a| a.parse())
        .expect("arguments: keys lookups class (numbers)")
}

fn main() {
    let n = arg(1, 16_000_000);
    let m = arg(2, 1_000_000);
    let class = arg(3, 16) as u32;
    let filter = built_class(n, class);
    let refused = insert_members(&filter, n);
    let stats = filter.stats();
    println!(
        "{n} keys ({refused} refused), load {:.3}, filter {} MB",
        stats.load_factor,
        filter.memory_usage() >> 20
    );
    let probe = Probe::new(filter.memory_usage());
    let misses: Vec<u64> = (0..m as u64).map(non_member).collect();
    let runs: [(&str, &Run); 3] = [
        ("contains", &|k| run_contains(&filter, k)),
        ("probe", &|k| run_probe(&probe, k)),
        ("empty", &|k| run_empty(k)),
    ];
    for (name, run) in runs {
        let start = Instant::now();
        let found = run(&misses);
        println!(
            "{name}: {m} absent keys, {found} found, {:.1} ns each (one pass)",
            start.elapsed().as_secs_f64() * 1e9 / m as f64
        );
    }
}
