//! A state-machine test: random operation sequences on small filters, checked after every
//! step against an exact multiset of the keys inserted and not removed.
//!
//! Properties: no false negatives; `len` exact; `count` never below the true count;
//! `insert_unique` adds only a key the filter did not report, and a key it skips is reported
//! afterwards (a copy in the key's alternate that another key put there counts for it, though
//! a one-line lookup of the key's primary did not see it); a failed insert changes
//! nothing (every earlier key still found, `len` and every count unchanged). Small filters
//! and a small key space make failed inserts, duplicates and displacements common.
//! `PROPTEST_CASES` scales the number of sequences.

use std::collections::BTreeMap;

use cuckoo_guard::{CuckooFilter, Displacement};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Insert(u16),
    InsertUnique(u16),
    /// Removes the key if the oracle holds it (only inserted keys may be removed).
    Remove(u16),
    Contains(u16),
    Count(u16),
    Clear,
}

fn op(keys: u16) -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..keys).prop_map(Op::Insert),
        2 => (0..keys).prop_map(Op::InsertUnique),
        4 => (0..keys).prop_map(Op::Remove),
        2 => (0..keys).prop_map(Op::Contains),
        1 => (0..keys).prop_map(Op::Count),
        1 => Just(Op::Clear),
    ]
}

struct Model {
    filter: CuckooFilter,
    oracle: BTreeMap<u16, usize>,
}

impl Model {
    fn check_all(&self) -> Result<(), TestCaseError> {
        for (&k, &n) in &self.oracle {
            prop_assert!(self.filter.contains(&k), "false negative for key {}", k);
            prop_assert!(self.filter.count(&k) >= n, "count({}) below {}", k, n);
        }
        prop_assert_eq!(self.filter.len(), self.oracle.values().sum::<usize>());
        let keys: Vec<u16> = self.oracle.keys().copied().collect();
        let mut found = vec![false; keys.len()];
        self.filter.contains_many(&keys, &mut found);
        prop_assert!(found.iter().all(|&f| f), "false negative in contains_many");
        Ok(())
    }

    fn counts(&self) -> Vec<usize> {
        self.oracle.keys().map(|k| self.filter.count(k)).collect()
    }

    fn apply(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Insert(k) => {
                let before = self.counts();
                let len = self.filter.len();
                match self.filter.insert(&k) {
                    Ok(()) => *self.oracle.entry(k).or_default() += 1,
                    Err(_) => {
                        prop_assert_eq!(self.filter.len(), len, "failed insert changed len");
                        prop_assert_eq!(self.counts(), before, "failed insert changed counts");
                    }
                }
            }
            Op::InsertUnique(k) => {
                let reported = self.filter.contains(&k);
                let len = self.filter.len();
                match self.filter.insert_unique(&k) {
                    Ok(true) => {
                        prop_assert!(!reported, "insert_unique added a key already reported");
                        *self.oracle.entry(k).or_default() += 1;
                    }
                    Ok(false) => prop_assert!(
                        self.filter.contains(&k),
                        "insert_unique skipped a key the filter does not report"
                    ),
                    Err(_) => prop_assert_eq!(self.filter.len(), len),
                }
            }
            Op::Remove(k) => {
                if let Some(n) = self.oracle.get_mut(&k) {
                    prop_assert!(self.filter.remove(&k), "remove of an inserted key failed");
                    *n -= 1;
                    if *n == 0 {
                        self.oracle.remove(&k);
                    }
                }
            }
            Op::Contains(k) => {
                if self.oracle.contains_key(&k) {
                    prop_assert!(self.filter.contains(&k));
                }
            }
            Op::Count(k) => {
                let n = self.oracle.get(&k).copied().unwrap_or(0);
                prop_assert!(self.filter.count(&k) >= n);
            }
            Op::Clear => {
                self.filter.clear();
                self.oracle.clear();
                prop_assert!(self.filter.is_empty());
            }
        }
        self.check_all()
    }
}

fn run(
    capacity: usize,
    bits: u32,
    max_path_len: usize,
    random_walk: Option<usize>,
    seed: u64,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let displacement = match random_walk {
        None => Displacement::BreadthFirst,
        Some(max_kicks) => Displacement::RandomWalk { max_kicks },
    };
    let filter = CuckooFilter::builder()
        .capacity(capacity)
        .fingerprint_bits(bits)
        .max_path_len(max_path_len)
        .displacement(displacement)
        .seed(seed)
        .build()
        .unwrap();
    let mut model = Model {
        filter,
        oracle: BTreeMap::new(),
    };
    for op in ops {
        model.apply(op)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn matches_a_multiset_16_bit(
        capacity in 1usize..80,
        max_path_len in 1usize..=6,
        random_walk in prop::option::of(1usize..=60),
        seed in any::<u64>(),
        ops in prop::collection::vec(op(120), 1..400),
    ) {
        run(capacity, 16, max_path_len, random_walk, seed, ops)?;
    }

    /// The 12-bit class: five slots per bucket and overflow bits of its own layout.
    #[test]
    fn matches_a_multiset_12_bit(
        capacity in 1usize..80,
        max_path_len in 1usize..=6,
        random_walk in prop::option::of(1usize..=60),
        seed in any::<u64>(),
        ops in prop::collection::vec(op(120), 1..400),
    ) {
        run(capacity, 12, max_path_len, random_walk, seed, ops)?;
    }

    #[test]
    fn matches_a_multiset_8_bit(
        capacity in 1usize..80,
        max_path_len in 1usize..=6,
        random_walk in prop::option::of(1usize..=60),
        seed in any::<u64>(),
        ops in prop::collection::vec(op(120), 1..400),
    ) {
        run(capacity, 8, max_path_len, random_walk, seed, ops)?;
    }
}
