//! A sequential randomized model of growth with forced fingerprint collisions across
//! tables (non-power-of-two bases, factor 1/2/4, 8- and 16-bit fingerprints, stale inserts
//! into older tables, removes of colliding keys, clear). Checks after every step that every
//! key inserted and not removed is found (`contains`, `count`) and that its remove succeeds.

use std::collections::BTreeMap;

use super::Tables;
use crate::table::{Inserted, Table, Width};
use crate::test_rng::Rng;

fn run(seed: u64, oldest_first: bool) -> Result<usize, String> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let base = [1usize, 2, 3, 5, 7, 12][rng.below(6) as usize];
    let step_shift = rng.below(3) as u32;
    let max_steps = 1 + rng.below(5) as usize;
    let width = [Width::Fp8, Width::Fp15, Width::Fp16][rng.below(3) as usize];
    let path = [1usize, 2, 5][rng.below(3) as usize];
    let t = Tables::new(
        Table::new(width, base, path, 0).unwrap(),
        step_shift,
        max_steps,
    );
    // Keys: two fingerprints, three high words, four sub-bucket words: many collisions in
    // the base table, fewer in grown ones.
    let his: Vec<u64> = (0..3).map(|_| rng.next() >> 32).collect();
    let subs: Vec<u64> = (0..4).map(|_| rng.next() & 0xFFFF).collect();
    let fps = [0x0103u64, 0x0205];
    let keys: Vec<u64> = (0..14)
        .map(|_| {
            his[rng.below(3) as usize] << 32
                | subs[rng.below(4) as usize] << 16
                | fps[rng.below(2) as usize]
        })
        .collect();
    let mut oracle: BTreeMap<usize, usize> = BTreeMap::new();
    let mut trace = Vec::new();
    let cfg = format!(
        "seed {seed}: base {base} shift {step_shift} steps {max_steps} width {width:?} path {path}"
    );
    for _ in 0..400 {
        let k = rng.below(keys.len() as u64) as usize;
        let h = keys[k];
        match rng.below(100) {
            0..=29 => {
                if t.insert(h, false).is_ok() {
                    *oracle.entry(k).or_default() += 1;
                    trace.push(format!("insert {k} -> grown {}", t.growth_steps()));
                }
            }
            30..=49 => {
                // A stale inserter: puts into an older table if it has room.
                let g = t.growth_steps();
                let i = rng.below(g as u64 + 1) as usize;
                if t.table(i).insert(h, false).is_ok() {
                    *oracle.entry(k).or_default() += 1;
                    trace.push(format!("stale insert {k} into table {i} of {g}"));
                }
            }
            50..=54 => {
                if t.insert(h, true) == Ok(Inserted::Added) {
                    *oracle.entry(k).or_default() += 1;
                    trace.push(format!("unique insert {k}"));
                }
            }
            55..=89 => {
                if let Some(n) = oracle.get_mut(&k) {
                    trace.push(format!("remove {k}"));
                    let removed = if oldest_first {
                        (0..=t.growth_steps()).any(|i| t.table(i).remove(h))
                    } else {
                        t.remove(h)
                    };
                    if !removed {
                        return Err(format!("{cfg}: remove of present {k} failed\n{trace:#?}"));
                    }
                    *n -= 1;
                    if *n == 0 {
                        oracle.remove(&k);
                    }
                }
            }
            90 => {
                t.clear();
                oracle.clear();
                trace.push("clear".into());
            }
            _ => {
                let _ = t.grow(t.growth_steps());
                trace.push(format!("grow -> {}", t.growth_steps()));
            }
        }
        for (&k, &n) in &oracle {
            if !t.contains(keys[k]) || t.count(keys[k]) < n {
                return Err(format!(
                    "{cfg}: false negative for key {k} ({:#x}, {n} copies)\n{trace:#?}",
                    keys[k]
                ));
            }
        }
    }
    Ok(t.growth_steps())
}

#[test]
fn random_growth_sequences_have_no_false_negatives() {
    let mut grown = [0usize; 8];
    for seed in 1..4_000u64 {
        match run(seed, false) {
            Ok(g) => grown[g.min(7)] += 1,
            Err(e) => panic!("{e}"),
        }
    }
    println!("runs by final growth steps: {grown:?}");
    assert!(
        grown[2..].iter().sum::<usize>() > 1_000,
        "too little growth: {grown:?}"
    );
}

/// Negative control: removing the oldest match first must be caught.
#[test]
fn random_growth_sequences_control_oldest_first() {
    let failures = (1..4_000u64).filter(|&s| run(s, true).is_err()).count();
    println!("oldest-first remove: {failures} failing seeds of 3999");
    assert!(
        failures > 0,
        "the model cannot tell oldest-first removes apart"
    );
}

/// Duplicates of one key cost growth (not a false negative). Each 8 copies of one
/// fingerprint fill the key's bucket pair in the newest table, so the 9th, 17th, ... insert
/// of the same key adds a whole table, twice the size of the last.
#[test]
fn each_eight_copies_of_one_key_add_a_table() {
    let t = Tables::new(Table::new(Width::Fp15, 1_000, 5, 0).unwrap(), 1, 16);
    let h = 0x1234_5678_9abc_def0u64;
    for i in 1..=8 * 5 + 1 {
        t.insert(h, false).unwrap();
        let expected = (i - 1) / 8;
        assert_eq!(t.growth_steps(), expected, "after {i} copies");
    }
    println!(
        "41 copies of one key: {} growth steps, capacity {} slots for a base of {}",
        t.growth_steps(),
        t.capacity(),
        t.base().capacity()
    );
}

/// The memory ceiling's estimate of a table to add is what the table then takes, for bases
/// below and above the stripe cap, every factor and width.
#[test]
fn a_grown_table_takes_what_the_ceiling_estimated() {
    for width in [Width::Fp8, Width::Fp12, Width::Fp15, Width::Fp16] {
        for base in [1usize, 3, 100, 5_000] {
            for step_shift in 0..3 {
                let t = Tables::new(Table::new(width, base, 5, 0).unwrap(), step_shift, 3);
                for step in 1..=3usize {
                    let before = t.heap_bytes();
                    let estimate = t.table_bytes(step_shift * step as u32);
                    t.grow(step - 1).unwrap();
                    assert_eq!(
                        t.heap_bytes() - before,
                        estimate,
                        "{width:?} base {base} shift {step_shift} step {step}"
                    );
                }
            }
        }
    }
}
