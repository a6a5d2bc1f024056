//! Builds a filter of 10 million keys on all cores and reports its load, memory per key,
//! measured false-positive rate and lookups per second.
//!
//! ```text
//! cargo run --release --example fill [-- KEYS]
//! ```

use std::time::Instant;

use cuckoo_guard::{CuckooFilter, Growth};

/// Absent keys live far above the inserted ones.
const ABSENT_BASE: u64 = 1 << 40;

fn split(n: u64, threads: u64, t: u64) -> std::ops::Range<u64> {
    (n * t / threads)..(n * (t + 1) / threads)
}

/// Runs `work` on every thread over its share of `0..n`; returns the summed results and the
/// wall time in seconds.
fn parallel<F: Fn(std::ops::Range<u64>) -> u64 + Sync>(
    n: u64,
    threads: u64,
    work: F,
) -> (u64, f64) {
    let start = Instant::now();
    let total = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let work = &work;
                s.spawn(move || work(split(n, threads, t)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    (total, start.elapsed().as_secs_f64())
}

fn main() {
    let keys: u64 = match std::env::args().nth(1).map(|a| a.replace('_', "").parse()) {
        None => 10_000_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: fill [KEYS]  (KEYS a positive integer, default 10000000)");
            std::process::exit(2);
        }
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let filter = CuckooFilter::builder()
        .capacity(keys as usize)
        .growth(Growth::Fixed)
        .build()
        .expect("valid configuration");

    let (failed, insert_secs) = parallel(keys, threads, |range| {
        range.filter(|k| filter.insert(k).is_err()).count() as u64
    });
    assert_eq!(
        failed, 0,
        "a filter built for {keys} keys refused an insert"
    );
    let stats = filter.stats();

    let (missing, _) = parallel(keys, threads, |range| {
        range.filter(|k| !filter.contains(k)).count() as u64
    });
    assert_eq!(missing, 0, "false negatives");

    let (false_positives, miss_secs) = parallel(keys, threads, |range| {
        range
            .filter(|k| filter.contains(&(ABSENT_BASE + k)))
            .count() as u64
    });
    let (_, hit_secs) = parallel(keys, threads, |range| {
        range.filter(|k| filter.contains(k)).count() as u64
    });
    let (batched_false_positives, batch_secs) = parallel(keys, threads, |range| {
        let mut found = [false; 1024];
        let mut batch = [0u64; 1024];
        let mut hits = 0;
        let mut next = range.start;
        while next < range.end {
            let len = (range.end - next).min(1024) as usize;
            for (i, k) in batch[..len].iter_mut().enumerate() {
                *k = ABSENT_BASE + next + i as u64;
            }
            filter.contains_many(&batch[..len], &mut found[..len]);
            hits += found[..len].iter().filter(|&&f| f).count() as u64;
            next += len as u64;
        }
        hits
    });
    assert_eq!(false_positives, batched_false_positives);

    let rate = |secs: f64| keys as f64 / secs / 1e6;
    let fpr = false_positives as f64 / keys as f64;
    let paper = 2.0 * 4.0 * filter.load_factor() / 65536.0;
    println!("cuckoo-guard: {keys} keys, {threads} threads, 16-bit fingerprints");
    println!(
        "  load                 {:.2}% of {} slots",
        filter.load_factor() * 100.0,
        filter.capacity()
    );
    println!(
        "  memory               {:.1} MiB, {:.2} bits per key",
        filter.memory_usage() as f64 / (1 << 20) as f64,
        filter.memory_usage() as f64 * 8.0 / keys as f64
    );
    println!(
        "  false positives      {false_positives} of {keys} absent keys = {:.4}% (expected ~{:.4}% = 8 x load / 2^16)",
        fpr * 100.0,
        paper * 100.0
    );
    println!("  false negatives      0 of {keys} inserted keys");
    println!(
        "  inserts              {:.1} M/s ({:.3} displacements per insert)",
        rate(insert_secs),
        stats.displacements as f64 / stats.inserts as f64
    );
    println!(
        "  lookups, absent      {:.1} M/s (contains)",
        rate(miss_secs)
    );
    println!(
        "  lookups, present     {:.1} M/s (contains)",
        rate(hit_secs)
    );
    println!(
        "  lookups, absent      {:.1} M/s (contains_many, batches of 1024)",
        rate(batch_secs)
    );
}
