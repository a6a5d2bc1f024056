//! Soak: a guard over SQLite, started at 1,000 keys of capacity, under mixed traffic on every
//! core (writers creating and deleting keys of a fixed key space, so the key count settles;
//! readers checking every key whose create returned) while it grows and rebuilds on its own.
//! Zero false negatives; resident memory must not grow once the key count is stable.
//!
//! 30 seconds by default (CI); the 10-minute run:
//! `CG_SOAK_SECS=600 cargo test --release --all-features --test soak -- --nocapture`.
#![cfg(feature = "sqlite")]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use cuckoo_guard::guard::{CacheGuard, Written};
use cuckoo_guard::stores::SqliteStore;
use cuckoo_guard::CuckooFilter;

/// Keys each writer toggles between present and absent.
const KEYS_PER_WRITER: u64 = 50_000;

/// Resident memory in bytes, from `/proc/self/statm` (0 where there is none).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// A key's state: the low two bits are 0 absent, 1 creating, 2 present, 3 deleting; the rest
/// counts changes, so a reader sees whether the state moved during its lookup.
fn set(state: &AtomicU64, phase: u64) {
    let old = state.load(SeqCst);
    state.store(((old >> 2) + 1) << 2 | phase, SeqCst);
}

#[test]
fn soak() {
    let seconds: u64 = std::env::var("CG_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let writers = cores.max(2) as u64;
    let readers = cores.max(2);

    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::<i64, i64>::builder(dir.path().join("soak.db"))
        .create_table_if_missing(true)
        .connections(writers as usize + readers)
        .open()
        .unwrap();
    let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), store);
    guard.warm_up(1_000, |_| {}).unwrap();

    let states: Vec<AtomicU64> = (0..writers * KEYS_PER_WRITER)
        .map(|_| AtomicU64::new(0))
        .collect();
    let stop = AtomicBool::new(false);
    let (writes, checked, false_negatives) =
        (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let mut memory = Vec::new();

    std::thread::scope(|scope| {
        for writer in 0..writers {
            let (guard, states, stop, writes) = (&guard, &states, &stop, &writes);
            scope.spawn(move || {
                let mut x = writer * 7 + 1;
                while !stop.load(SeqCst) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = writer * KEYS_PER_WRITER + x % KEYS_PER_WRITER;
                    let state = &states[k as usize];
                    let key = k as i64;
                    if state.load(SeqCst) & 3 == 0 {
                        set(state, 1);
                        assert_eq!(guard.put(&key, &key).unwrap(), Written::Created);
                        set(state, 2);
                    } else {
                        set(state, 3);
                        assert!(guard.delete(&key).unwrap());
                        set(state, 0);
                    }
                    writes.fetch_add(1, SeqCst);
                }
            });
        }
        for reader in 0..readers {
            let (guard, states, stop, checked, false_negatives) =
                (&guard, &states, &stop, &checked, &false_negatives);
            scope.spawn(move || {
                let mut x = reader as u64 * 13 + 5;
                while !stop.load(SeqCst) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = x % states.len() as u64;
                    let before = states[k as usize].load(SeqCst);
                    let found = guard.get(&(k as i64)).unwrap();
                    if before & 3 == 2 && states[k as usize].load(SeqCst) == before {
                        checked.fetch_add(1, SeqCst);
                        if found != Some(k as i64) {
                            false_negatives.fetch_add(1, SeqCst);
                        }
                    }
                }
            });
        }
        // The sampler: resident memory every tenth of the run.
        while Instant::now() < deadline {
            std::thread::sleep(
                Duration::from_secs(seconds.max(10) / 10).min(deadline - Instant::now()),
            );
            memory.push((
                start.elapsed().as_secs(),
                resident_bytes(),
                guard.stats().filter_len,
            ));
        }
        stop.store(true, SeqCst);
    });

    let stats = guard.stats();
    let filter = guard.filter().stats();
    let present = states.iter().filter(|s| s.load(SeqCst) & 3 == 2).count();
    println!(
        "soak: {seconds} s, {writers} writers and {readers} readers; {} writes, {} checked reads, \
         {} false negatives; {present} keys present at the end, filter {} fingerprints \
         ({} stale copies counted); {} growth steps, {} rebuilds ({} failed); \
         read retries {}, read fallbacks {}, path lengths {:?}",
        writes.load(SeqCst),
        checked.load(SeqCst),
        false_negatives.load(SeqCst),
        stats.filter_len,
        stats.stale_copies,
        stats.growth_steps,
        stats.rebuilds,
        stats.rebuilds_failed,
        filter.read_retries,
        filter.read_fallbacks,
        filter.path_length_histogram,
    );
    for (at, bytes, len) in &memory {
        println!(
            "  at {at:>4} s: resident {:.1} MiB, {len} fingerprints",
            *bytes as f64 / 1048576.0
        );
    }
    assert_eq!(false_negatives.load(SeqCst), 0);
    assert!(checked.load(SeqCst) > 10_000, "too few checked reads");
    assert!(stats.rebuilds > 0, "no rebuild ran");
    // Every key present at the end passes the filter.
    let filter = guard.filter();
    assert!(states
        .iter()
        .enumerate()
        .filter(|(_, s)| s.load(SeqCst) & 3 == 2)
        .all(|(k, _)| filter.contains(&(k as i64))));
    // Once the key count settled (the second half of the run), resident memory stays flat:
    // within 16 MiB of its level at the half.
    let half = &memory[memory.len() / 2];
    let last = memory.last().unwrap();
    if half.1 > 0 {
        assert!(
            last.1 <= half.1 + 16 * 1048576,
            "resident memory grew from {} to {} bytes",
            half.1,
            last.1
        );
    }
}
