//! Snapshots taken while writers run, through the public API: every key inserted before a
//! snapshot began and not removed is in it, whatever the writers moved meanwhile.
//!
//! `CG_SNAPSHOT_ROUNDS` sets the snapshots per scenario (default 40).

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use cuckoo_guard::{snapshot, CuckooFilter, Growth};

fn rounds() -> usize {
    std::env::var("CG_SNAPSHOT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

/// What one scenario saw.
#[derive(Debug, Default)]
struct Seen {
    snapshots: usize,
    extras: u64,
    writer_ops: u64,
    churn_keys_checked: u64,
    /// Tables the filter added between the first snapshot's start and the last one's end.
    growth_steps: usize,
}

/// `stable` keys are inserted first and never removed; `writers` threads churn their own
/// keys (insert a new key, remove the oldest of theirs once `churn_per_writer / 2` are in)
/// at high load, which makes inserts displace
/// stable keys and removes of colliding keys take stable keys' copies. Meanwhile the main
/// thread takes snapshots and loads each: every stable key, and every churn key whose insert
/// returned before the snapshot began and whose remove had not begun when it ended, must be
/// in it.
///
/// Takes `CG_SNAPSHOT_ROUNDS` snapshots, then more (up to 5 times as many) until `enough`
/// holds for what was seen: the race a scenario is about may take a while under load. The
/// writers start only once the snapshots do, so all their growth overlaps the snapshots.
fn snapshots_under_churn(
    filter: CuckooFilter,
    stable: u64,
    churn_per_writer: u64,
    enough: fn(&Seen) -> bool,
) -> Seen {
    let filter = Arc::new(filter);
    for k in 0..stable {
        filter.insert(&k).unwrap();
    }
    let stop = common::Stop::new("snapshots under churn", Duration::from_secs(120));
    let writers = 2u64;
    // Per writer: the churn keys currently inserted (insert returned, remove not begun).
    let live: Vec<Arc<Mutex<Vec<u64>>>> = (0..writers).map(|_| Arc::default()).collect();
    let ops = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(writers as usize + 1));
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let (filter, stop, live, ops) = (
                Arc::clone(&filter),
                stop.clone(),
                Arc::clone(&live[w as usize]),
                Arc::clone(&ops),
            );
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                let _raise = stop.raise_on_panic();
                // Each churn key is inserted once and removed once, so a key live both
                // before and after a snapshot was live throughout it.
                let base = stable + (w << 40);
                let mut next = 0u64;
                let mut n = 0u64;
                while !stop.stopped() {
                    let key = base + next;
                    next += 1;
                    filter.insert(&key).unwrap();
                    live.lock().unwrap().push(key);
                    // Keep about half the window inserted: remove the oldest.
                    let oldest = {
                        let mut live = live.lock().unwrap();
                        if live.len() > churn_per_writer as usize / 2 {
                            Some(live.remove(0))
                        } else {
                            None
                        }
                    };
                    if let Some(oldest) = oldest {
                        assert!(filter.remove(&oldest));
                    }
                    n += 2;
                }
                ops.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    // However the snapshots end, the writers stop.
    let stop_writers = stop.raise_on_drop();
    let mut seen = Seen::default();
    let growth_steps_before = filter.stats().growth_steps;
    start.wait();
    for round in 0..rounds() * 5 {
        if stop.stopped() || (round >= rounds() && enough(&seen)) {
            break;
        }
        // Keys live before the snapshot began.
        let before: Vec<Vec<u64>> = live.iter().map(|l| l.lock().unwrap().clone()).collect();
        let mut bytes = Vec::new();
        let written = filter.write_snapshot(&mut bytes).unwrap();
        // Keys still live after it ended: their removes had not begun.
        let after: Vec<Vec<u64>> = live.iter().map(|l| l.lock().unwrap().clone()).collect();
        let restored = CuckooFilter::read_snapshot(&bytes[..]).unwrap();
        let missing = (0..stable).filter(|k| !restored.contains(k)).count();
        assert_eq!(missing, 0, "stable keys missing from a snapshot");
        for (before, after) in before.iter().zip(&after) {
            for key in before.iter().filter(|k| after.contains(k)) {
                assert!(
                    restored.contains(key),
                    "churn key {key} missing from a snapshot"
                );
                seen.churn_keys_checked += 1;
            }
        }
        let body = snapshot::inspect(&bytes[..]).unwrap().body.unwrap();
        assert_eq!(body.extras, written.extras);
        seen.extras += written.extras;
        seen.snapshots += 1;
        seen.growth_steps = filter.stats().growth_steps - growth_steps_before;
    }
    drop(stop_writers);
    for h in handles {
        h.join().unwrap();
    }
    seen.writer_ops = ops.load(Ordering::Relaxed);
    seen
}

#[test]
fn snapshots_under_displacement_keep_every_key() {
    // 16-bit, fixed size at about 93% load: most churn inserts displace something, and the
    // table spans many copy chunks.
    let filter = CuckooFilter::builder()
        .capacity(200_000)
        .growth(Growth::Fixed)
        .seed(3)
        .build()
        .unwrap();
    let slots = filter.capacity() as u64;
    let stable = slots * 84 / 100;
    let seen = snapshots_under_churn(filter, stable, slots * 10 / 100, |seen| seen.extras > 0);
    println!("16-bit, {stable} stable keys: {seen:?}");
    assert!(seen.writer_ops > 0 && seen.churn_keys_checked > 0);
    assert!(
        seen.extras > 0,
        "no writer straddled a copy: the race was not exercised"
    );
}

#[test]
fn snapshots_under_colliding_removes_keep_every_key() {
    // 8-bit fingerprints: keys sharing a fingerprint and bucket pair are common (hundreds
    // of such pairs between the stable and the churn keys here), so removes take other
    // keys' copies.
    let filter = CuckooFilter::builder()
        .capacity(200_000)
        .fingerprint_bits(8)
        .growth(Growth::Fixed)
        .seed(5)
        .build()
        .unwrap();
    let slots = filter.capacity() as u64;
    let stable = slots * 75 / 100;
    let seen = snapshots_under_churn(filter, stable, slots * 20 / 100, |seen| seen.extras > 0);
    println!("8-bit, {stable} stable keys: {seen:?}");
    assert!(seen.writer_ops > 0 && seen.churn_keys_checked > 0);
    assert!(
        seen.extras > 0,
        "no writer straddled a copy: the race was not exercised"
    );
}

#[test]
fn snapshots_of_a_growing_filter_keep_every_key() {
    // Growth during the churn: tables are added while snapshots run.
    let filter = CuckooFilter::builder()
        .capacity(2_000)
        .seed(9)
        .build()
        .unwrap();
    let seen = snapshots_under_churn(filter, 6_000, 20_000, |seen| seen.growth_steps > 0);
    println!("growing: {seen:?}");
    assert!(seen.churn_keys_checked > 0);
    assert!(
        seen.growth_steps > 0,
        "the filter did not grow while snapshots ran: {seen:?}"
    );
}
