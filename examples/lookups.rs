//! This crate's lookups beside the physical-limit probe alone in one process, at one size
//! (default 200 million keys: a table of about 400 MB, larger than most L3 caches): does
//! batching pay on this machine, and do two threads scale like the probe?
//!
//! ```sh
//! cargo run --release --example lookups                # 200M keys
//! cargo run --release --example lookups -- 16000000    # any size
//! ```
//!
//! Prints the medians of 7 rounds of absent-key lookups: `contains` and `contains_many` on one
//! thread, `contains` on two, and the same for the probe (`benches/contenders.rs`). Batching
//! (hash and prefetch 16 keys, then probe them) can only help where the out-of-order core
//! cannot keep enough cache misses in flight on its own; the probe's own batched-to-scalar
//! ratio shows how much room the machine leaves.

#[path = "../benches/contenders.rs"]
mod contenders;

use std::hint::black_box;
use std::time::Instant;

use contenders::{member, non_member, ours, timed_split, Contender, Probe, QUERIES};

/// Median over 7 rounds of the rate (M lookups/s) at which `work` gets through `keys` split
/// over `threads`; each thread repeats its share 200 times per round, so thread start-up is
/// noise.
fn rate(keys: &[u64], threads: usize, work: impl Fn(&[u64]) + Sync) -> f64 {
    const REPS: u64 = 200;
    let mut rates: Vec<f64> = (0..7)
        .map(|_| {
            let took = timed_split(REPS, threads, keys, &work);
            (REPS as usize * keys.len()) as f64 / took.as_secs_f64() / 1e6
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// `rate` of one-key-at-a-time lookups in `set`.
fn scalar<C: Contender + Sync>(set: &C, keys: &[u64], threads: usize) -> f64 {
    rate(keys, threads, |part| {
        black_box(part.iter().filter(|&&k| set.contains(k)).count());
    })
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(Ok(200_000_000), |a| a.parse())
        .expect("keys: a number");
    let filter = ours(n);
    let start = Instant::now();
    let refused = (0..n as u64)
        .filter(|&i| filter.insert(&member(i)).is_err())
        .count();
    println!(
        "{n} keys inserted in {:.1} s ({refused} refused), filter {} MB",
        start.elapsed().as_secs_f64(),
        filter.memory_usage() >> 20
    );
    let probe = Probe::new(filter.memory_usage());
    let misses: Vec<u64> = (0..QUERIES as u64).map(non_member).collect();
    let contains = scalar(&filter, &misses, 1);
    let many = rate(&misses, 1, |part| {
        let mut found = vec![false; part.len()];
        filter.contains_many(part, &mut found);
        black_box(found);
    });
    let scalar1 = scalar(&probe, &misses, 1);
    let batched = rate(&misses, 1, |part| {
        let mut found = vec![false; part.len()];
        probe.contains_many(part, &mut found);
        black_box(found);
    });
    let contains2 = scalar(&filter, &misses, 2);
    let scalar2 = scalar(&probe, &misses, 2);
    println!("absent-key lookups, M/s (medians of 7 rounds):");
    println!(
        "  cuckoo-guard  1t contains {contains:.1}  contains_many {many:.1} ({:.2}x)  2t contains {contains2:.1} ({:.2}x 1t)",
        many / contains,
        contains2 / contains
    );
    println!(
        "  probe         1t scalar   {scalar1:.1}  batched       {batched:.1} ({:.2}x)  2t scalar   {scalar2:.1} ({:.2}x 1t)",
        batched / scalar1,
        scalar2 / scalar1
    );
}
