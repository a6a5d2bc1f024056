//! The insertion study: breadth-first path search against the paper's random walk.
//!
//! ```sh
//! cargo run --release --example insertion_study                # 4 million keys, 3 seeds
//! cargo run --release --example insertion_study -- 1000000 2   # capacity, seeds
//! ```
//!
//! For each search (breadth-first with the default 5-bucket paths and with 6-bucket paths;
//! random walk with up to 500 kicks, as in the cuckoo filter paper) and each width (8 and 16 bits), with 4-slot buckets, it fills filters with
//! distinct keys until the first failed insert and prints, as a Markdown table: the load at
//! that failure, mean and largest displacements per insert, single-thread insert throughput
//! in the windows just below 50%, 90% and 95% load, and how a fill to 90% speeds up on 2
//! threads. Medians over the seeds; every number comes from the run that prints it.

use std::time::Instant;

use cuckoo_guard::{CuckooFilter, Displacement, Growth};

/// A search: breadth-first with a path bound, or a random walk.
type Mode = (usize, Displacement);

fn build(
    bits: u32,
    capacity: usize,
    seed: u64,
    (max_path_len, displacement): Mode,
) -> CuckooFilter {
    CuckooFilter::builder()
        .growth(Growth::Fixed)
        .capacity(capacity)
        .fingerprint_bits(bits)
        .max_path_len(max_path_len)
        .displacement(displacement)
        .seed(seed)
        .build()
        .expect("valid configuration")
}

/// One filled-until-failure run.
struct Fill {
    load_at_failure: f64,
    mean_displacements: f64,
    max_displacements: u64,
    /// Inserts per second in the windows `[x - 5%, x)` of load, for x = 50%, 90%, 95%.
    window_rates: [f64; 3],
}

fn fill_until_failure(bits: u32, capacity: usize, seed: u64, mode: Mode) -> Fill {
    let filter = build(bits, capacity, seed, mode);
    let slots = filter.capacity() as f64;
    let marks = [0.50, 0.90, 0.95];
    let mut window_rates = [f64::NAN; 3];
    let mut key = 0u64;
    let mut failed = false;
    let insert_to = |target: f64, key: &mut u64| -> Option<(u64, f64)> {
        // Every key is distinct and every insert so far succeeded: `key` is the length.
        let target_len = (target * slots) as u64;
        let start_key = *key;
        let start = Instant::now();
        while *key < target_len {
            if filter.insert(key).is_err() {
                return None;
            }
            *key += 1;
        }
        Some((*key - start_key, start.elapsed().as_secs_f64()))
    };
    for (i, mark) in marks.iter().enumerate() {
        if insert_to(mark - 0.05, &mut key).is_none() {
            failed = true;
            break;
        }
        match insert_to(*mark, &mut key) {
            Some((n, secs)) => window_rates[i] = n as f64 / secs,
            None => {
                failed = true;
                break;
            }
        }
    }
    if !failed {
        while filter.insert(&key).is_ok() {
            key += 1;
        }
    }
    let stats = filter.stats();
    Fill {
        load_at_failure: filter.load_factor(),
        mean_displacements: stats.displacements as f64 / stats.inserts.max(1) as f64,
        max_displacements: stats.max_displacements,
        window_rates,
    }
}

/// Seconds to fill a filter to 90% load with `threads` threads (keys split evenly).
fn fill_time(bits: u32, capacity: usize, seed: u64, mode: Mode, threads: u64) -> f64 {
    let filter = build(bits, capacity, seed, mode);
    let keys = (filter.capacity() as f64 * 0.90) as u64;
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let filter = &filter;
            s.spawn(move || {
                for k in (t..keys).step_by(threads as usize) {
                    filter.insert(&k).expect("90% load fits");
                }
            });
        }
    });
    start.elapsed().as_secs_f64()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let capacity: usize = args
        .first()
        .map_or(Ok(4_000_000), |a| a.parse())
        .expect("capacity: a number");
    let seeds: u64 = args
        .get(1)
        .map_or(Ok(3), |a| a.parse())
        .expect("seeds: a number");
    let modes: [(&str, Mode); 3] = [
        (
            "breadth-first, 5-bucket paths (default)",
            (5, Displacement::BreadthFirst),
        ),
        (
            "breadth-first, 6-bucket paths",
            (6, Displacement::BreadthFirst),
        ),
        (
            "random walk, 500 kicks",
            (5, Displacement::RandomWalk { max_kicks: 500 }),
        ),
    ];
    println!(
        "Capacity {capacity} keys, 4-slot buckets, {seeds} seeds (medians; the largest \
         displacement count is the maximum over seeds); {} threads available.\n",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "| search | bits | load at first failure | displacements per insert (mean / max) \
         | inserts/s at 45-50% | at 85-90% | at 90-95% | fill to 90%: 2 threads vs 1 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for bits in [8, 16] {
        for (name, mode) in modes {
            let fills: Vec<Fill> = (0..seeds)
                .map(|seed| fill_until_failure(bits, capacity, seed, mode))
                .collect();
            let scaling: Vec<f64> = (0..seeds)
                .map(|seed| {
                    let one = fill_time(bits, capacity, seed, mode, 1);
                    let two = fill_time(bits, capacity, seed, mode, 2);
                    one / two
                })
                .collect();
            let rate = |i: usize| {
                let r = median(fills.iter().map(|f| f.window_rates[i]).collect());
                if r.is_nan() {
                    "failed before".to_string()
                } else {
                    format!("{:.2} M", r / 1e6)
                }
            };
            println!(
                "| {name} | {bits} | {:.2}% | {:.3} / {} | {} | {} | {} | {:.2}x |",
                median(fills.iter().map(|f| f.load_at_failure * 100.0).collect()),
                median(fills.iter().map(|f| f.mean_displacements).collect()),
                fills.iter().map(|f| f.max_displacements).max().unwrap_or(0),
                rate(0),
                rate(1),
                rate(2),
                median(scaling),
            );
        }
    }
}
