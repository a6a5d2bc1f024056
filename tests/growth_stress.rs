//! Concurrency stress of growth: a filter built for 1,000 keys (of the 16-bit class, of the
//! 8-bit one, and one adding tables of its base size, for many more steps) takes 400,000 from two writers, which also remove every
//! third key they inserted, while two readers look keys up.
//! Every lookup of a key known present (its insert returned before the lookup began and its
//! remove had not begun when the lookup ended) must find it; no insert may fail.
//! `cargo test --release --test growth_stress -- --nocapture` prints what it checked.

mod common;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use cuckoo_guard::{CuckooFilter, Growth};

const ABSENT: u32 = 0;
const PRESENT: u32 = 1;
const REMOVING: u32 = 2;

const WRITERS: u64 = 2;
const KEYS_PER_WRITER: u64 = 200_000;

/// The filter key of writer `w`'s `i`-th key.
fn key(w: u64, i: u64) -> u64 {
    (i * WRITERS + w).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[test]
fn growth_under_concurrent_inserts_removes_and_lookups() {
    stress(CuckooFilter::with_capacity(1_000), 6);
}

/// The 8-bit class, whose layout has no overflow bits.
#[test]
fn growth_under_concurrent_inserts_removes_and_lookups_8_bit() {
    let filter = CuckooFilter::builder()
        .capacity(1_000)
        .fingerprint_bits(8)
        .build()
        .unwrap();
    stress(filter, 6);
}

/// Tables of the base table's size: many more growth steps, each under the same traffic.
#[test]
fn many_growth_steps_of_equal_tables() {
    let filter = CuckooFilter::builder()
        .capacity(12_000)
        .growth(Growth::Expand {
            factor: 1,
            max_steps: 32,
        })
        .build()
        .unwrap();
    stress(filter, 12);
}

/// The stress on `filter`, which must take at least `min_steps` growth steps.
fn stress(filter: CuckooFilter, min_steps: usize) {
    let total = (WRITERS * KEYS_PER_WRITER) as usize;
    // Per key: `generation << 2 | phase`, written only by the key's writer.
    let states: Vec<AtomicU32> = (0..total).map(|_| AtomicU32::new(ABSENT)).collect();
    let stop = common::Stop::new("growth stress", Duration::from_secs(120));
    let checked = AtomicU64::new(0);
    let set = |index: usize, phase: u32| {
        let generation = (states[index].load(SeqCst) >> 2) + 1;
        states[index].store(generation << 2 | phase, SeqCst);
    };
    std::thread::scope(|s| {
        // However the writers end, the readers stop.
        let _stop_readers = stop.raise_on_drop();
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (filter, set, stop) = (&filter, &set, &stop);
                s.spawn(move || {
                    let _raise = stop.raise_on_panic();
                    for i in 0..KEYS_PER_WRITER {
                        if stop.stopped() {
                            return;
                        }
                        let index = (i * WRITERS + w) as usize;
                        filter
                            .insert(&key(w, i))
                            .expect("a growing filter refused an insert");
                        set(index, PRESENT);
                        if i % 3 == 2 {
                            let old = i - 2;
                            let old_index = (old * WRITERS + w) as usize;
                            set(old_index, REMOVING);
                            assert!(filter.remove(&key(w, old)), "remove missed an inserted key");
                            set(old_index, ABSENT);
                        }
                    }
                })
            })
            .collect();
        for r in 0..2u64 {
            let (filter, states, stop, checked) = (&filter, &states, &stop, &checked);
            s.spawn(move || {
                let _raise = stop.raise_on_panic();
                let mut x = 0x1234_5678_9ABC_DEF0u64 ^ r;
                let mut n = 0u64;
                while !stop.stopped() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let index = (x % total as u64) as usize;
                    let before = states[index].load(SeqCst);
                    let found =
                        filter.contains(&key(index as u64 % WRITERS, index as u64 / WRITERS));
                    let after = states[index].load(SeqCst);
                    if before & 3 == PRESENT && before == after {
                        assert!(found, "false negative for key index {index} during growth");
                        n += 1;
                    }
                }
                checked.fetch_add(n, SeqCst);
            });
        }
        for writer in writers {
            writer.join().unwrap();
        }
    });
    let stats = filter.stats();
    let present = states
        .iter()
        .filter(|s| s.load(SeqCst) & 3 == PRESENT)
        .count();
    println!(
        "growth stress: {} inserts, {} present at the end, {} growth steps, capacity {}, \
         {} checked lookups of present keys, read retries {}, failed inserts {}",
        total,
        present,
        stats.growth_steps,
        filter.capacity(),
        checked.load(SeqCst),
        stats.read_retries,
        stats.failed_inserts
    );
    assert_eq!(stats.failed_inserts, 0);
    assert_eq!(filter.len(), present);
    assert!(
        stats.growth_steps >= min_steps,
        "the filter grew {} steps, fewer than {min_steps}",
        stats.growth_steps
    );
    assert!(
        checked.load(SeqCst) > 10_000,
        "the readers checked too little"
    );
    let keys: Vec<u64> = (0..total as u64)
        .filter(|&i| states[i as usize].load(SeqCst) & 3 == PRESENT)
        .map(|i| key(i % WRITERS, i / WRITERS))
        .collect();
    let mut found = vec![false; keys.len()];
    filter.contains_many(&keys, &mut found);
    assert!(
        found.iter().all(|&f| f),
        "a key present at the end is missing"
    );
}
