//! This crate's lookups beside the physical-limit probe and `DashSet`, in one process, at one
//! size (default 200 million keys: a table of about 400 MB, larger than most L3 caches): how
//! close does each width class come to two bare random loads, does batching pay on this
//! machine, and do two threads scale like the probe?
//!
//! ```sh
//! cargo run --release --example lookups                          # 200M keys, the 16-bit class
//! cargo run --release --example lookups -- 16000000 --classes 16,12,8 --dashset
//! cargo run --release --example lookups -- 16000000 --queries 65536   # a warm working set
//! ```
//!
//! For each width class asked for, it fills a filter built for the keys (about 94% load),
//! reports the time that took, then prints the medians of 7 rounds of lookups: absent keys
//! with `contains` on one and two threads and with `contains_many`, present keys with
//! `contains` on one thread. Each round times the same lookups in the probe
//! (`benches/contenders.rs`: two random 64-byte lines per key over as much memory as the
//! filter, and a compare) back to back with ours, and the ratios printed are the medians of
//! the rounds' ratios, so that a change in the host's load between rounds does not move
//! them. With `--dashset`, a `DashSet` of the same keys is measured the same way. Batching
//! (hash and prefetch 16 keys, then probe them) can only help where the out-of-order core
//! cannot keep enough cache misses in flight on its own; the probe's own batched-to-scalar
//! ratio shows how much room the machine leaves.
//!
//! Each measure looks up `--queries` distinct keys (default 4,194,304); a timed pass goes
//! through them as many times as makes at least 13.1 million lookups (4 times with the
//! default). The default set touches more bucket lines than a 16M table has, so lines come
//! from the caches only as often as random traffic would find them there. A small set, such
//! as 65,536 queries, touches the same 4 to 8 MB on every time through, much of which can
//! stay in the L3 whatever the table's size; that favours whichever contender touches fewer
//! lines.

#[path = "../benches/contenders.rs"]
mod contenders;

use std::hint::black_box;
use std::time::Instant;

use contenders::{
    built_class, insert_members, member, non_member, paired, scalar, Contender, Paired, Probe,
};

/// Distinct keys looked up per measure, unless `--queries` says otherwise.
const QUERIES: usize = 1 << 22;

/// Batched lookups of `keys` with `many`.
fn batched(many: impl Fn(&[u64], &mut [bool]) + Sync) -> impl Fn(&[u64]) + Sync {
    move |part| {
        let mut found = vec![false; part.len()];
        many(part, &mut found);
        black_box(found);
    }
}

/// Absent keys on 1 and 2 threads, batched absent keys, present keys, each beside the probe.
struct Rates {
    miss1: Paired,
    miss2: Paired,
    many: Paired,
    hit1: Paired,
}

fn measure<C: Contender + Sync>(
    set: &C,
    probe: &Probe,
    misses: &[u64],
    hits: &[u64],
    many: impl Fn(&[u64], &mut [bool]) + Sync,
) -> Rates {
    Rates {
        miss1: paired(misses, 1, scalar(set), scalar(probe)),
        miss2: paired(misses, 2, scalar(set), scalar(probe)),
        many: paired(
            misses,
            1,
            batched(many),
            batched(|k, out| probe.contains_many(k, out)),
        ),
        hit1: paired(hits, 1, scalar(set), scalar(probe)),
    }
}

fn print(name: &str, r: &Rates) {
    println!(
        "  {name:<14} absent 1t {:6.1} ({:.2}x probe)  2t {:6.1} ({:.2}x)  batched {:6.1} ({:.2}x)  present 1t {:6.1} ({:.2}x)",
        r.miss1.rate,
        r.miss1.ratio,
        r.miss2.rate,
        r.miss2.ratio,
        r.many.rate,
        r.many.ratio,
        r.hit1.rate,
        r.hit1.ratio,
    );
}

fn print_probe(r: &Rates) {
    println!(
        "  {:<14} absent 1t {:6.1}                2t {:6.1}          batched {:6.1}          present 1t {:6.1}",
        "probe", r.miss1.probe, r.miss2.probe, r.many.probe, r.hit1.probe,
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut n, mut classes, mut dashset, mut huge_probe, mut queries) =
        (200_000_000usize, vec![16u32], false, false, QUERIES);
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
            "--huge-probe" => huge_probe = true,
            "--queries" => {
                queries = args
                    .next()
                    .and_then(|q| q.parse().ok())
                    .filter(|&q| q > 0)
                    .expect("--queries N, N at least 1");
            }
            keys => n = keys.parse().expect("keys: a number"),
        }
    }
    let misses: Vec<u64> = (0..queries as u64).map(non_member).collect();
    let hits: Vec<u64> = (0..queries as u64)
        .map(|i| member(contenders::splitmix(i) % n as u64))
        .collect();
    println!("{n} keys, {queries} distinct queries; lookups in M/s, medians of 7 rounds");
    for class in classes {
        let filter = built_class(n, class);
        let start = Instant::now();
        let refused = insert_members(&filter, n);
        let filled = start.elapsed().as_secs_f64();
        let probe = if huge_probe {
            Probe::on_huge_pages(filter.memory_usage())
        } else {
            Probe::new(filter.memory_usage())
        };
        let ours = measure(&filter, &probe, &misses, &hits, |k, out| {
            filter.contains_many(k, out)
        });
        println!(
            "{class}-bit class: inserted in {filled:.2} s ({:.1} M/s, {refused} refused), load {:.1}%, {:.2} bits per key",
            n as f64 / filled / 1e6,
            filter.load_factor() * 100.0,
            filter.memory_usage() as f64 * 8.0 / n as f64,
        );
        print("cuckoo-guard", &ours);
        print_probe(&ours);
        if dashset {
            let set = dashmap::DashSet::with_capacity_and_hasher(n, ahash::RandomState::new());
            for i in 0..n as u64 {
                set.insert(member(i));
            }
            let dash = measure(&set, &probe, &misses, &hits, |k, out| {
                for (key, o) in k.iter().zip(out) {
                    *o = set.contains(key);
                }
            });
            print("DashSet", &dash);
            println!(
                "  cuckoo-guard absent 1t {:.2}x DashSet, 2t {:.2}x (ratios of the two rows' probe ratios)",
                ours.miss1.ratio / dash.miss1.ratio,
                ours.miss2.ratio / dash.miss2.ratio
            );
        }
    }
}
