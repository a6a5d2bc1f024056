//! Where does a filter first refuse an insert?
//!
//! ```sh
//! cargo run --release --example first_failure -- 16 4000000 3   # bits, capacity, seeds
//! cargo run --release --example first_failure -- small 2000      # capacities 1..=60, seeds each
//! ```
//!
//! The first form fills filters of the given width and capacity with distinct keys until the
//! first `InsertError`, and prints the load reached and the displacements per insert. The
//! second checks the sizing rule for tiny filters: `with_capacity(n)` must take `n` distinct
//! keys for every `n` from 1 to 60 and every seed, and prints any that failed.

use cuckoo_guard::{CuckooFilter, Growth};

fn fill_until_failure(bits: u32, capacity: usize, seed: u64) -> (f64, f64, usize) {
    let filter = CuckooFilter::builder()
        .growth(Growth::Fixed)
        .capacity(capacity)
        .fingerprint_bits(bits)
        .seed(seed)
        .build()
        .expect("valid configuration");
    let mut k = 0u64;
    while filter.insert(&k).is_ok() {
        k += 1;
    }
    let stats = filter.stats();
    let longest = stats
        .path_length_histogram
        .iter()
        .rposition(|&n| n > 0)
        .unwrap_or(0);
    (
        filter.load_factor(),
        stats.displacements as f64 / stats.inserts.max(1) as f64,
        longest,
    )
}

fn small(seeds: u64) {
    let mut runs = 0u64;
    let mut failures = 0u64;
    for capacity in 1..=60usize {
        for seed in 0..seeds {
            let filter = CuckooFilter::builder()
                .growth(Growth::Fixed)
                .capacity(capacity)
                .seed(seed)
                .build()
                .expect("valid configuration");
            runs += 1;
            if let Some(k) = (0..capacity as u64).find(|k| filter.insert(k).is_err()) {
                failures += 1;
                println!("capacity {capacity}, seed {seed}: insert {k} failed");
            }
        }
    }
    println!("{failures} of {runs} runs failed to hold their capacity");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    if arg(0, "16") == "small" {
        small(arg(1, "2000").parse().expect("seeds: a number"));
        return;
    }
    let bits: u32 = arg(0, "16").parse().expect("bits: 8 or 16");
    let capacity: usize = arg(1, "4000000").parse().expect("capacity: a number");
    let seeds: u64 = arg(2, "3").parse().expect("seeds: a number");
    for seed in 0..seeds {
        let (load, mean, longest) = fill_until_failure(bits, capacity, seed);
        println!(
            "{bits}-bit, capacity {capacity}, seed {seed}: first failure at {:.2}% load, \
             {mean:.3} displacements per insert, longest path {longest} hops",
            load * 100.0
        );
    }
}
