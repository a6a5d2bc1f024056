//! This crate's lookups beside the physical-limit probe and `DashSet`, in one process, at one
//! size (default 200 million keys: a table of about 400 MB, larger than most L3 caches): how
//! close does each width class come to two bare random loads, does batching pay on this
//! machine, and do two threads scale like the probe?
//!
//! ```sh
//! cargo run --release --example lookups                          # 200M keys, the 16-bit class
//! cargo run --release --example lookups -- 16000000 --classes 16,12,8 --dashset
//! ```
//!
//! For each width class asked for, it fills a filter built for the keys (about 94% load),
//! reports the time that took, then prints the medians of 7 rounds of lookups: absent keys
//! with `contains` on one and two threads and with `contains_many`, present keys with
//! `contains` on one thread, and the same for the probe (`benches/contenders.rs`: two random
//! 64-byte lines per key over as much memory as the filter, and a compare) and, with
//! `--dashset`, for a `DashSet` of the same keys. Batching (hash and prefetch 16 keys, then
//! probe them) can only help where the out-of-order core cannot keep enough cache misses in
//! flight on its own; the probe's own batched-to-scalar ratio shows how much room the machine
//! leaves.

#[path = "../benches/contenders.rs"]
mod contenders;

use std::hint::black_box;
use std::time::Instant;

use contenders::{member, non_member, timed_split, Contender, Probe, QUERIES};
use cuckoo_guard::{CuckooFilter, Growth};

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

/// Absent keys on 1 and 2 threads, batched absent keys, present keys: M/s.
struct Rates {
    miss1: f64,
    miss2: f64,
    many: f64,
    hit1: f64,
}

fn measure<C: Contender + Sync>(
    set: &C,
    misses: &[u64],
    hits: &[u64],
    many: impl Fn(&[u64], &mut [bool]) + Sync,
) -> Rates {
    Rates {
        miss1: scalar(set, misses, 1),
        miss2: scalar(set, misses, 2),
        many: rate(misses, 1, |part| {
            let mut found = vec![false; part.len()];
            many(part, &mut found);
            black_box(found);
        }),
        hit1: scalar(set, hits, 1),
    }
}

fn print(name: &str, r: &Rates, probe: &Rates) {
    println!(
        "  {name:<14} absent 1t {:6.1} ({:.2}x probe)  2t {:6.1} ({:.2}x)  batched {:6.1} ({:.2}x)  present 1t {:6.1}",
        r.miss1,
        r.miss1 / probe.miss1,
        r.miss2,
        r.miss2 / probe.miss2,
        r.many,
        r.many / probe.many,
        r.hit1
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut n, mut classes, mut dashset) = (200_000_000usize, vec![16u32], false);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--classes" => {
                classes = args
                    .next()
                    .expect("--classes 16,12,8")
                    .split(',')
                    .map(|c| c.parse().expect("a width class: 8, 12 or 16"))
                    .collect();
            }
            "--dashset" => dashset = true,
            keys => n = keys.parse().expect("keys: a number"),
        }
    }
    let misses: Vec<u64> = (0..QUERIES as u64).map(non_member).collect();
    let hits: Vec<u64> = (0..QUERIES as u64)
        .map(|i| member(contenders::splitmix(i) % n as u64))
        .collect();
    println!("{n} keys; lookups in M/s, medians of 7 rounds");
    for class in classes {
        let filter = CuckooFilter::builder()
            .growth(Growth::Fixed)
            .capacity(n)
            .fingerprint_bits(class)
            .seed(1)
            .build()
            .expect("a filter");
        let start = Instant::now();
        let refused = (0..n as u64)
            .filter(|&i| filter.insert(&member(i)).is_err())
            .count();
        let filled = start.elapsed().as_secs_f64();
        let probe = Probe::new(filter.memory_usage());
        let ours = measure(&filter, &misses, &hits, |k, out| {
            filter.contains_many(k, out)
        });
        let bare = measure(&probe, &misses, &hits, |k, out| probe.contains_many(k, out));
        println!(
            "{class}-bit class: inserted in {filled:.2} s ({:.1} M/s, {refused} refused), load {:.1}%, {:.2} bits per key",
            n as f64 / filled / 1e6,
            filter.load_factor() * 100.0,
            filter.memory_usage() as f64 * 8.0 / n as f64,
        );
        print("cuckoo-guard", &ours, &bare);
        print("probe", &bare, &bare);
        if dashset {
            let set = dashmap::DashSet::with_capacity_and_hasher(n, ahash::RandomState::new());
            for i in 0..n as u64 {
                set.insert(member(i));
            }
            let dash = measure(&set, &misses, &hits, |k, out| {
                for (key, o) in k.iter().zip(out) {
                    *o = set.contains(key);
                }
            });
            print("DashSet", &dash, &bare);
            println!(
                "  cuckoo-guard absent 1t {:.2}x DashSet, 2t {:.2}x",
                ours.miss1 / dash.miss1,
                ours.miss2 / dash.miss2
            );
        }
    }
}
