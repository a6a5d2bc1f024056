//! White-box stress of net moves: puts and takes of colliding keys that relocate a copy
//! between the two buckets of a pair, racing lookups of the key whose copy moves.
//!
//! 8-bit fingerprints and a table of 4 stripes where each pair's two buckets share a stripe
//! (`x ≡ y mod 4`), so a put's count change and a take's cancel in the one word a reader
//! validates against: only the take's window can tell the reader. Keys are real keys, hashed
//! with a fixed seed, and colliding keys (same fingerprint, same pair) are found by brute force.
//!
//! Each group owns one pair `{x, y}` and a fingerprint `f`. The victim `v` (primary `y`) has its
//! copy in `x`; `x` holds three fillers besides, `y` three fillers and one free slot. Its writer
//! loops over four steps, each pair of which moves the victim's copy:
//! 1. insert `c` (primary `x`, full): the copy goes to `y`, which is now full;
//! 2. remove `c`: it scans `x` first and takes the copy there (net move `x -> y`);
//! 3. insert `d` (primary `y`, full): the copy goes to `x`;
//! 4. remove `d`: it scans `y` first and takes the copy there (net move `y -> x`).
//!
//! Readers look the victims up all the while: every answer must be "present". Runs
//! `STRESS_SECS / 5` seconds (default 6); see its report with
//! `cargo test --lib net_move -- --nocapture`.
//!
//! On x86 a reader's two bucket loads are a few nanoseconds apart, and the race is hit mostly
//! when the scheduler preempts a reader between them; a negative control runs the same
//! workload with a remove that opens no window and must see false negatives, so the test is
//! known to be able to fail where it runs.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::*;
use crate::fingerprint::{Fp8, SLOTS};
use crate::sync::AtomicU32;

const BUCKETS: usize = 256;
const STRIPES: usize = 4;
const GROUPS: usize = 16;
const WRITERS: usize = 2;
const READERS: usize = 2;

/// One pair and the keys that move a copy around it.
#[derive(Debug, Clone, Copy)]
struct Group {
    victim: Probe,
    /// Same fingerprint, primary `x`.
    c: Probe,
    /// Same fingerprint, primary `y` (like the victim).
    d: Probe,
}

/// Finds `GROUPS` groups on disjoint pairs whose buckets share a stripe, by hashing keys
/// until every `(primary, fingerprint)` needed has enough keys.
fn find_groups(t: &RawTable<Fp8>, hasher: &ahash::RandomState) -> Vec<Group> {
    let mut by_slot: HashMap<(usize, u64), Vec<Probe>> = HashMap::new();
    for key in 0u64..4_000_000 {
        let p = t.probe(hasher.hash_one(key));
        let keys = by_slot.entry((p.primary, p.fp)).or_default();
        if keys.len() < 2 {
            keys.push(p);
        }
    }
    let mut used = vec![false; BUCKETS];
    let mut groups = Vec::new();
    let mut candidates: Vec<_> = by_slot.keys().copied().collect();
    candidates.sort_unstable();
    for (x, f) in candidates {
        let y = t.probe_at(x, f).alternate;
        if x == y || t.stripe_of(x) != t.stripe_of(y) || used[x] || used[y] {
            continue;
        }
        let (Some(at_x), Some(at_y)) = (by_slot.get(&(x, f)), by_slot.get(&(y, f))) else {
            continue;
        };
        if at_y.len() < 2 {
            continue;
        }
        used[x] = true;
        used[y] = true;
        groups.push(Group {
            victim: at_y[0],
            c: at_x[0],
            d: at_y[1],
        });
        if groups.len() == GROUPS {
            break;
        }
    }
    assert_eq!(
        groups.len(),
        GROUPS,
        "brute force found too few colliding keys"
    );
    groups
}

/// Lays out a group: the victim's copy and three fillers in `x`, three fillers in `y`.
fn lay_out(t: &RawTable<Fp8>, g: &Group) {
    let (x, y, f) = (g.victim.alternate, g.victim.primary, g.victim.fp);
    let filler = if f == 1 { 2 } else { 1 };
    t.set_slot(x, 0, f);
    for slot in 1..SLOTS {
        t.set_slot(x, slot, filler);
        t.set_slot(y, slot, filler);
    }
}

/// What one run counted.
struct Report {
    moves: u64,
    lookups: u64,
    false_negatives: u64,
    read_fallbacks: u64,
}

fn stress_seconds() -> u64 {
    std::env::var("STRESS_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(30)
}

/// How long a run lasts.
#[derive(Clone, Copy, PartialEq)]
enum Until {
    /// The full time.
    Elapsed,
    /// The first false negative, or the time, whichever comes first.
    FirstMiss,
}

/// Runs the workload for at most `seconds` with `remove` as the writers' remove.
fn run(
    label: &str,
    remove: fn(&RawTable<Fp8>, Probe) -> bool,
    seconds: u64,
    until: Until,
) -> Report {
    let t = RawTable::<Fp8>::with_stripes(BUCKETS, STRIPES, 5).unwrap();
    let hasher = ahash::RandomState::with_seeds(1, 2, 3, 4);
    let groups = find_groups(&t, &hasher);
    for g in &groups {
        assert_eq!(
            (g.c.primary, g.c.alternate),
            (g.victim.alternate, g.victim.primary)
        );
        assert_eq!(
            (g.d.primary, g.c.fp, g.d.fp),
            (g.victim.primary, g.victim.fp, g.victim.fp)
        );
        lay_out(&t, g);
    }
    let len = t.len();
    let stop = AtomicU32::new(0);
    let started = Instant::now();
    let net_moves = AtomicU64::new(0);
    let lookups = AtomicU64::new(0);
    let false_negatives = AtomicU64::new(0);
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (t, groups, stop, net_moves) = (&t, &groups, &stop, &net_moves);
            s.spawn(move || {
                let mine: Vec<Group> = groups.iter().skip(w).step_by(WRITERS).copied().collect();
                let mut moves = 0;
                // ORDERING: Relaxed; a harness flag or tally, joined by the scope.
                while stop.load(Ordering::Relaxed) == 0 {
                    for g in &mine {
                        for key in [g.c, g.d] {
                            assert_eq!(t.insert(key, false), Ok(Inserted::Added));
                            assert!(remove(t, key), "the collider's insert left a copy");
                            moves += 1;
                        }
                    }
                }
                // ORDERING: Relaxed; a harness flag or tally, joined by the scope.
                net_moves.fetch_add(moves, Ordering::Relaxed);
            });
        }
        for r in 0..READERS {
            let (t, groups, stop) = (&t, &groups, &stop);
            let (lookups, false_negatives) = (&lookups, &false_negatives);
            s.spawn(move || {
                let (mut n, mut missed) = (0u64, 0u64);
                // ORDERING: Relaxed; a harness flag or tally, joined by the scope.
                while stop.load(Ordering::Relaxed) == 0 {
                    for g in groups.iter().skip(r) {
                        n += 1;
                        if !t.contains(g.victim) {
                            missed += 1;
                            if until == Until::FirstMiss {
                                // ORDERING: Relaxed; a harness flag or tally, joined by the scope.
                                stop.store(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                // ORDERING: Relaxed; a harness flag or tally, joined by the scope.
                lookups.fetch_add(n, Ordering::Relaxed);
                // ORDERING: Relaxed; a harness flag or tally, joined by the scope.
                false_negatives.fetch_add(missed, Ordering::Relaxed);
            });
        }
        let deadline = started + Duration::from_secs(seconds.max(1));
        // ORDERING: Relaxed; a harness flag or tally, joined by the scope.
        while Instant::now() < deadline && stop.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        // ORDERING: Relaxed; a harness flag or tally, joined by the scope.
        stop.store(1, Ordering::Relaxed);
    });
    let stats = t
        .counters()
        .snapshot(t.len(), t.capacity(), t.max_path_len());
    // ORDERING: Relaxed; a harness flag or tally, joined by the scope.
    let (moves, lookups, missed) = (
        net_moves.load(Ordering::Relaxed),
        lookups.load(Ordering::Relaxed),
        false_negatives.load(Ordering::Relaxed),
    );
    eprintln!(
        "net moves ({label}): {:.1} s, {GROUPS} pairs, {moves} colliding insert+remove pairs (each \
         moved a victim's copy) against {lookups} victim lookups; {} read retries, {} \
         fallbacks (answered present unvalidated), {missed} false negatives",
        started.elapsed().as_secs_f64(),
        stats.read_retries,
        stats.read_fallbacks
    );
    assert!(
        moves > 1_000 && lookups > 1_000,
        "the run did too little to prove anything"
    );
    assert_eq!(t.len(), len, "every insert was matched by a remove");
    for g in &groups {
        assert_eq!(
            t.count(g.victim),
            1,
            "the victim's copy is still there, once"
        );
    }
    Report {
        moves,
        lookups,
        false_negatives: missed,
        read_fallbacks: stats.read_fallbacks,
    }
}

#[test]
fn colliding_puts_and_takes_never_hide_a_copy() {
    let report = run(
        "versioned remove",
        RawTable::remove,
        stress_seconds() / 5,
        Until::Elapsed,
    );
    assert_eq!(
        report.false_negatives, 0,
        "false negatives: a net move hid a victim's copy"
    );
    assert!(
        report.read_fallbacks * 10 < report.lookups,
        "most lookups must be validated reads, not fallbacks"
    );
    assert!(report.moves > 0);
}

/// The same workload with removes that open no window must produce a false negative: if it
/// ever stops doing so, the test above no longer reaches the race and proves nothing. It
/// stops at the first one (usually well within a second here), or after 60 seconds.
#[test]
fn negative_control_unversioned_removes_hide_copies() {
    let report = run(
        "negative control, unversioned remove, until the first false negative",
        RawTable::remove_unversioned,
        60,
        Until::FirstMiss,
    );
    assert!(
        report.false_negatives > 0,
        "the unversioned remove produced no false negative in {} lookups: the stress no \
         longer reaches the race",
        report.lookups
    );
}
