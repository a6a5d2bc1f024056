//! Single-threaded tests of the table operations (the loom models are in `loom_tests`).

use proptest::prelude::*;

use super::*;
use crate::fingerprint::{Fp16, Fp8, SLOTS};

fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn basic_operations<L: Layout>() {
    let t = RawTable::<L>::new(1000, 5).unwrap();
    let probes: Vec<Probe> = (0..2000).map(|k| t.probe(mix(k))).collect();
    for p in &probes {
        assert_eq!(t.insert(*p, false), Ok(Inserted::Added));
    }
    assert_eq!(t.len(), 2000);
    for p in &probes {
        assert!(t.contains(*p));
        assert!(t.count(*p) >= 1);
    }
    for p in &probes[..1000] {
        assert!(t.remove(*p));
    }
    assert_eq!(t.len(), 1000);
    for p in &probes[1000..] {
        assert!(t.contains(*p), "a remaining key must stay present");
    }
    t.clear();
    assert_eq!(t.len(), 0);
    assert!(t.words().is_empty());
}

#[test]
fn basic_operations_16() {
    basic_operations::<Fp16>();
}

#[test]
fn basic_operations_8() {
    basic_operations::<Fp8>();
}

#[test]
fn one_key_fits_at_most_eight_times() {
    let t = RawTable::<Fp16>::new(64, 5).unwrap();
    let p = (0..)
        .map(|k| t.probe(mix(k)))
        .find(|p| p.primary != p.alternate)
        .unwrap();
    for _ in 0..2 * SLOTS {
        assert_eq!(t.insert(p, false), Ok(Inserted::Added));
    }
    let before = t.words();
    assert_eq!(t.insert(p, false), Err(InsertFailure::Full));
    assert_eq!(
        t.words(),
        before,
        "a failed insert must leave the table as it was"
    );
    assert_eq!(t.count(p), 2 * SLOTS);
}

#[test]
fn a_self_paired_fingerprint_uses_one_bucket() {
    // Find a fingerprint whose alternate of bucket 3 is bucket 3 itself.
    let m = 10;
    let t = RawTable::<Fp16>::new(m, 5).unwrap();
    let fp = (1..=0xFFFFu64)
        .find(|&fp| crate::fingerprint::alternate_index(3, fp, m as u64) == 3)
        .unwrap();
    let p = t.probe_at(3, fp);
    assert_eq!(p.primary, p.alternate);
    for _ in 0..SLOTS {
        assert_eq!(t.insert(p, false), Ok(Inserted::Added));
    }
    assert_eq!(t.count(p), SLOTS, "one bucket, counted once");
    assert_eq!(t.insert(p, false), Err(InsertFailure::Full));
    assert!(t.remove(p));
    assert_eq!(t.count(p), SLOTS - 1);
}

#[test]
fn insert_unique_adds_once() {
    let t = RawTable::<Fp8>::new(16, 5).unwrap();
    let p = t.probe(mix(99));
    assert_eq!(t.insert(p, true), Ok(Inserted::Added));
    assert_eq!(t.insert(p, true), Ok(Inserted::AlreadyPresent));
    assert_eq!(t.count(p), 1);
    assert_eq!(t.len(), 1);
}

#[test]
fn filling_until_full_loses_nothing() {
    for max_path_len in [1, 2, 5] {
        let t = RawTable::<Fp16>::new(50, max_path_len).unwrap();
        let mut inserted = Vec::new();
        for k in 0.. {
            let p = t.probe(mix(k));
            let before = t.words();
            match t.insert(p, false) {
                Ok(_) => inserted.push(p),
                Err(e) => {
                    assert_eq!(e, InsertFailure::Full);
                    assert_eq!(t.words(), before, "failed insert changed the table");
                    break;
                }
            }
        }
        assert_eq!(t.len(), inserted.len());
        for p in &inserted {
            assert!(t.contains(*p));
        }
        let load = inserted.len() as f64 / t.capacity() as f64;
        eprintln!("path len {max_path_len}: full at {load:.3}");
        let floor = [0.0, 0.2, 0.6, 0.0, 0.0, 0.85][max_path_len];
        assert!(load > floor, "path len {max_path_len}: full at {load}");
    }
}

#[test]
fn stripe_counts_track_moves_between_stripes() {
    // 2 stripes: hops between odd and even buckets move counts between stripes.
    let t = RawTable::<Fp16>::with_stripes(40, 2, 5).unwrap();
    let mut n = 0;
    for k in 0.. {
        if t.insert(t.probe(mix(k)), false).is_err() {
            break;
        }
        n += 1;
    }
    assert_eq!(t.len(), n);
    assert_eq!(
        t.len(),
        t.words()
            .iter()
            .map(|&(_, w)| {
                (0..SLOTS)
                    .filter(|&s| crate::fingerprint::lane::<Fp16>(w, s) != 0)
                    .count()
            })
            .sum::<usize>()
    );
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u8),
    InsertUnique(u8),
    Remove(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u8>().prop_map(Op::Insert),
        1 => any::<u8>().prop_map(Op::InsertUnique),
        2 => any::<u8>().prop_map(Op::Remove),
    ]
}

proptest! {
    /// Against an exact multiset of probes: a failed insert leaves the bucket words
    /// bit-for-bit unchanged, and no stored key is ever missed.
    #[test]
    fn failed_inserts_leave_the_table_unchanged(
        buckets in 1usize..12,
        max_path_len in 1usize..=5,
        ops in prop::collection::vec(op(), 1..300),
    ) {
        let t = RawTable::<Fp8>::new(buckets, max_path_len).unwrap();
        let mut oracle = std::collections::HashMap::<u8, usize>::new();
        for op in ops {
            match op {
                Op::Insert(k) | Op::InsertUnique(k) => {
                    let unique = matches!(op, Op::InsertUnique(_));
                    let p = t.probe(mix(u64::from(k)));
                    let before = t.words();
                    match t.insert(p, unique) {
                        Ok(Inserted::Added) => *oracle.entry(k).or_default() += 1,
                        Ok(Inserted::AlreadyPresent) => prop_assert!(unique),
                        Err(_) => prop_assert_eq!(t.words(), before),
                    }
                }
                Op::Remove(k) => {
                    if let Some(n) = oracle.get_mut(&k).filter(|n| **n > 0) {
                        prop_assert!(t.remove(t.probe(mix(u64::from(k)))));
                        *n -= 1;
                    }
                }
            }
            for (&k, &n) in &oracle {
                let p = t.probe(mix(u64::from(k)));
                prop_assert!(t.count(p) >= n);
                if n > 0 {
                    prop_assert!(t.contains(p), "false negative for key {}", k);
                }
            }
            prop_assert_eq!(t.len(), oracle.values().sum::<usize>());
        }
    }
}

#[test]
fn a_read_validates_only_against_an_unchanged_even_stripe_word() {
    let words = Box::new([AtomicU64::new(0)]);
    let word = &words[0];
    // ORDERING: Relaxed; a single-threaded test.
    let load = || word.load(Ordering::Relaxed);
    let idle = load();
    assert!(stripe::unchanged(idle, idle));
    {
        let mut lock = stripe::StripeLock::acquire(word);
        // Taking the lock changes the word: a read that overlapped it retries.
        assert!(!stripe::unchanged(idle, load()));
        lock.begin_take();
        let taking = load();
        assert!(stripe::is_taking(taking));
        // A read that began during a take never validates, even if nothing else changed.
        assert!(!stripe::unchanged(taking, taking));
        lock.end_take();
        lock.add_fingerprint();
    }
    let after_hop = load();
    assert!(stripe::unchanged(after_hop, after_hop));
    assert!(
        !stripe::unchanged(idle, after_hop),
        "the hop moved the version"
    );
    {
        let mut lock = stripe::StripeLock::acquire(word);
        lock.add_fingerprint();
    }
    // A plain insert changes only the count, which the stricter whole-word check also sees.
    assert!(!stripe::unchanged(after_hop, load()));
}

#[test]
fn the_version_wraps_within_its_field() {
    let words = Box::new([AtomicU64::new(0)]);
    let word = &words[0];
    // ORDERING: Relaxed; a single-threaded test.
    let load = || word.load(Ordering::Relaxed);
    {
        let mut lock = stripe::StripeLock::acquire(word);
        lock.add_fingerprint();
    }
    let start = load();
    // 2^39 takes bring the 40-bit version back to where it was; fewer never do.
    let mut lock = stripe::StripeLock::acquire(word);
    lock.begin_take();
    lock.end_take();
    drop(lock);
    let one_take = load();
    assert!(!stripe::unchanged(start, one_take));
    assert_eq!(stripe::count(one_take), 1, "the count is untouched");
    assert_eq!(
        stripe::version_distance(start, one_take),
        2,
        "a take advances the version by two"
    );
    assert_eq!(
        stripe::version_distance(start, stripe::advance_version(start, 1 << 40)),
        0,
        "the version field is 40 bits wide"
    );
    let wrapped = stripe::advance_version(start, (1 << 40) - 2);
    assert_eq!(stripe::count(wrapped), 1, "wrapping leaves the count alone");
    assert!(!stripe::unchanged(start, wrapped));
}

/// The sequence of the false negative this protocol closes: an insert of a colliding key puts
/// a copy into one bucket of a pair, its remove takes the other bucket's copy. With one stripe
/// for both buckets the count goes back to where it was, so only the version can tell.
#[test]
fn a_put_then_a_colliding_take_moves_the_version() {
    let t = RawTable::<Fp16>::with_stripes(2, 1, 2).unwrap();
    let f = (1..=0xFFFFu64)
        .find(|&fp| crate::fingerprint::alternate_index(0, fp, 2) == 1)
        .unwrap();
    let filler = (1..=0xFFFFu64)
        .find(|&fp| fp != f && crate::fingerprint::alternate_index(0, fp, 2) == 1)
        .unwrap();
    t.set_slot(0, 0, f);
    for slot in 1..SLOTS {
        t.set_slot(0, slot, filler);
    }
    let victim = t.probe_at(1, f);
    let collider = t.probe_at(0, f);
    // ORDERING: Relaxed; a single-threaded test.
    let before = t.stripes[0].load(Ordering::Relaxed);
    assert_eq!(t.insert(collider, false), Ok(Inserted::Added));
    assert!(t.remove(collider));
    // ORDERING: Relaxed; as above.
    let after = t.stripes[0].load(Ordering::Relaxed);
    assert_eq!(stripe::count(before), stripe::count(after));
    let words = t.words();
    let lanes = |w: u64| (0..SLOTS).map(move |s| crate::fingerprint::lane::<Fp16>(w, s));
    assert_eq!(words.len(), 2);
    assert!(
        !lanes(words[0].1).any(|x| x == f) && lanes(words[1].1).filter(|&x| x == f).count() == 1,
        "the copy moved from bucket 0 to bucket 1: {words:x?}"
    );
    assert_eq!(stripe::version_distance(before, after), 2);
    assert!(!stripe::unchanged(before, after));
    assert!(t.contains(victim));
}

/// A copy whose sink panics leaves no extras for the next copy: a hop across the copier logs
/// one, the sink then panics, and the next copy (with nothing moving) returns none.
#[test]
fn a_copy_after_a_panicked_one_returns_only_its_own_extras() {
    let t = RawTable::<Fp16>::with_stripes(2, 2, 2).unwrap();
    let fp = (1..=0xFFFFu64)
        .find(|&fp| t.probe_at(1, fp).alternate == 0)
        .unwrap();
    t.set_slot(1, 0, fp);
    let hop = path::Hop {
        from: 1,
        slot: 0,
        fp,
        to: 0,
    };
    let mut displaced = false;
    let mut logged = 0;
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        t.copy_out(1, |_| -> Result<(), ()> {
            // Bucket 0 is read, bucket 1 not: the hop straddles the copier and logs an extra.
            displaced = t.displace(hop);
            logged = t.copy.logged_extras();
            panic!("the sink fails");
        })
    }));
    assert!(panicked.is_err());
    assert!(displaced, "the hop was refused");
    assert_eq!(logged, 1, "the hop across the copier logged no extra");
    let extras = t.copy_out(1, |_| Ok::<(), ()>(())).unwrap();
    assert!(extras.is_empty(), "stale extras: {extras:?}");
}

/// The `VmFlags` of the mapping of this process that holds `address` (`/proc/self/smaps`).
#[cfg(target_os = "linux")]
fn vm_flags_at(address: usize) -> Option<Vec<String>> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let range = line
            .split_once(' ')
            .and_then(|(range, _)| range.split_once('-'));
        if let Some((lo, hi)) = range {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&address);
                continue;
            }
        }
        if let Some(flags) = line.strip_prefix("VmFlags:").filter(|_| inside) {
            return Some(flags.split_whitespace().map(str::to_owned).collect());
        }
    }
    None
}

/// A table of 64 MiB, built empty and loaded from words, has its bucket array advised to
/// transparent huge pages: the mapping around the middle of the array carries `hg`
/// (`MADV_HUGEPAGE`), whatever the system's default for other mappings.
#[test]
#[cfg(target_os = "linux")]
fn a_large_tables_buckets_are_advised_to_huge_pages() {
    if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
        eprintln!("skipped: this kernel has no transparent huge pages");
        return;
    }
    const BUCKETS: usize = 8 << 20;
    let built = RawTable::<Fp16>::new(BUCKETS, 5).unwrap();
    let loaded = RawTable::<Fp16>::load(
        Flat {
            buckets: BUCKETS as u64,
        },
        5,
        |words: &mut [u64]| {
            words.fill(0);
            Ok::<(), ()>(())
        },
        |_| (),
    )
    .unwrap();
    for (name, table) in [("built", &built), ("loaded", &loaded)] {
        let middle = table.buckets.as_ptr() as usize + BUCKETS * 8 / 2;
        let flags = vm_flags_at(middle).expect("the mapping that holds the buckets");
        assert!(
            flags.iter().any(|flag| flag == "hg"),
            "the {name} table's buckets are not advised to huge pages: VmFlags {flags:?}"
        );
    }
}
