//! Single-threaded tests of the overflow bits: \[overflow.I1\] over long random runs, and each
//! writer step's bit.

use std::collections::HashMap;

use super::super::path::Hop;
use super::super::{Extra, Inserted, Probe, RawTable};
use super::Lookup;
use crate::fingerprint::{alternate_index, matching_lanes, Fp12, Fp15, Layout};
use crate::sync::Ordering;
use crate::test_rng::Rng;

type Raw = RawTable<Fp15>;

fn word<L: Layout>(t: &RawTable<L>, bucket: usize) -> u64 {
    // ORDERING: Relaxed; single-threaded tests.
    L::load(&t.buckets[bucket], Ordering::Relaxed)
}

fn displacements<L: Layout>(t: &RawTable<L>) -> u64 {
    t.counters().snapshot(0, 0, 1).displacements
}

fn copies<L: Layout>(t: &RawTable<L>, bucket: usize, fp: u64) -> usize {
    matching_lanes::<L>(word(t, bucket), fp).count_ones() as usize
}

fn bit_set<L: Layout>(t: &RawTable<L>, bucket: usize, fp: u64) -> bool {
    word(t, bucket) & L::overflow_bit(fp) != 0
}

/// The fingerprints whose overflow bit is the bucket's `group`th (of four): the top two of
/// their `BITS`.
fn group<L: Layout>(group: u64) -> std::ops::Range<u64> {
    let shift = L::BITS - 2;
    (group << shift).max(1)..(group + 1) << shift
}

/// A fingerprint whose alternate of `from` is `to` in a table of `m` buckets, with overflow
/// bit `group`.
fn fp_linking<L: Layout>(from: usize, to: usize, m: usize, group_: u64) -> u64 {
    group::<L>(group_)
        .find(|&fp| alternate_index(from as u64, fp, m as u64) == to as u64)
        .expect("some fingerprint links the two buckets")
}

/// Fills the free slots of `bucket` with fingerprints of overflow group `group_` that lead
/// out of it to buckets other than `avoid`.
fn fill<L: Layout>(t: &RawTable<L>, bucket: usize, group_: u64, avoid: &[usize]) {
    let m = t.num_buckets();
    let mut fps = group::<L>(group_).filter(|&fp| {
        let to = alternate_index(bucket as u64, fp, m as u64) as usize;
        to != bucket && !avoid.contains(&to)
    });
    for slot in 0..L::SLOTS {
        if crate::fingerprint::lane::<L>(word(t, bucket), slot) == 0 {
            t.set_slot(bucket, slot, fps.next().unwrap());
        }
    }
}

/// \[overflow.I1\] for the keys `live` (with repeats: one entry per insert), and every key
/// found: in each bucket `x`, for each fingerprint `f`, `bit(f)` is set or `x` holds at least
/// as many copies of `f` as there are live keys with fingerprint `f` and primary `x`; each
/// pair holds at least as many copies as keys of either primary.
fn check_invariant<L: Layout>(t: &RawTable<L>, live: &[Probe]) {
    let mut keys: HashMap<(usize, u64), usize> = HashMap::new();
    for p in live {
        *keys.entry((p.primary, p.fp)).or_default() += 1;
    }
    for (&(x, fp), &n) in &keys {
        assert!(
            copies(t, x, fp) >= n || bit_set(t, x, fp),
            "[overflow.I1] broken: bucket {x} holds {} copies of {fp:#x} for {n} keys, bit clear \
             (word {:#018x})",
            copies(t, x, fp),
            word(t, x)
        );
        let y = alternate_index(x as u64, fp, t.num_buckets() as u64) as usize;
        if y != x {
            let n_y = keys.get(&(y, fp)).copied().unwrap_or(0);
            assert!(copies(t, x, fp) + copies(t, y, fp) >= n + n_y);
        }
    }
    for p in live {
        assert_eq!(t.contains_newest(*p), Lookup::Present, "{p:?} missed");
    }
    assert_eq!(t.len(), live.len());
}

/// Random inserts (with hops), removes and re-inserts at about 95% load, with many keys
/// sharing a fingerprint and a pair from either end; \[overflow.I1\] checked along the way.
/// Bits are only ever set, so the table is cleared every `EPISODE` operations, before most of
/// them are, and refilled.
fn random_operations_at_high_load_keep_the_invariant<L: Layout>(seed: u64) {
    const BUCKETS: usize = 1_000;
    const OPERATIONS: usize = 2_000_000;
    const EPISODE: usize = 10_000;
    const CHECK_EVERY: usize = 500;
    let t = RawTable::<L>::new(BUCKETS, 5).unwrap();
    let capacity = t.capacity() as f64;
    let mut rng = Rng(seed);
    // Keys that share fingerprints and pairs: both ends of 150 (bucket, fingerprint) pairs.
    let pool: Vec<Probe> = (0..150)
        .flat_map(|_| {
            let p = t.probe(rng.next());
            [p, t.probe_at(p.alternate, p.fp)]
        })
        .collect();
    let mut live: Vec<Probe> = Vec::new();
    let mut removed: Vec<Probe> = Vec::new();
    let (mut hopped_inserts, mut failed, mut unique_found) = (0usize, 0usize, 0usize);
    let (mut checks, mut share_sum) = (0usize, 0.0);
    for op in 0..OPERATIONS {
        if op % EPISODE == 0 {
            t.clear();
            live.clear();
        }
        let load = t.len() as f64 / capacity;
        let r = rng.index(100);
        if load < 0.94 || (load < 0.965 && r < 50) {
            let p = match rng.index(10) {
                6 | 7 => pool[rng.index(pool.len())],
                8 if !removed.is_empty() => removed.swap_remove(rng.index(removed.len())),
                9 if !live.is_empty() => live[rng.index(live.len())],
                _ => t.probe(rng.next()),
            };
            let unique = rng.index(8) == 0;
            let before = displacements(&t);
            match t.insert(p, unique) {
                Ok(Inserted::Added) => live.push(p),
                Ok(Inserted::AlreadyPresent) => unique_found += 1,
                Err(e) => {
                    assert_eq!(e, super::super::InsertFailure::Full);
                    failed += 1;
                }
            }
            if displacements(&t) > before {
                hopped_inserts += 1;
            }
        } else {
            let p = live.swap_remove(rng.index(live.len()));
            assert!(t.remove(p), "{p:?} not removed");
            if removed.len() < 4_096 {
                removed.push(p);
            } else {
                let i = rng.index(removed.len());
                removed[i] = p;
            }
        }
        if op % CHECK_EVERY == CHECK_EVERY - 1 {
            check_invariant(&t, &live);
            checks += 1;
            share_sum += t.overflow_share();
        }
    }
    let share = share_sum / checks as f64;
    eprintln!(
        "{} bits, {OPERATIONS} operations: {hopped_inserts} inserts with hops, {failed} failed, \
         {unique_found} unique inserts found their key; {checks} checks at a mean overflow \
         share of {share:.3}",
        L::BITS
    );
    assert!(hopped_inserts > 100_000, "too few hops: {hopped_inserts}");
    assert!(unique_found > 1_000, "too few covered unique inserts");
    // Checks made while most bits were still clear, where a missing bit shows.
    assert!(share > 0.05 && share < 0.5, "mean overflow share {share}");
}

#[test]
fn random_operations_at_high_load_keep_the_invariant_15() {
    random_operations_at_high_load_keep_the_invariant::<Fp15>(0x0DDB_A11C_0FFE_E123);
}

#[test]
fn random_operations_at_high_load_keep_the_invariant_12() {
    random_operations_at_high_load_keep_the_invariant::<Fp12>(0x5EED_0012_C1A5_5E12);
}

/// \[overflow.W1\]/\[overflow.W2\]: a put into the primary sets no bit; one into the alternate
/// sets the primary's, and the one-line read then sends the lookup to both lines.
fn a_put_into_the_alternate_marks_the_primary<L: Layout>() {
    let m = 64;
    let t = RawTable::<L>::new(m, 5).unwrap();
    let fp = fp_linking::<L>(40, 3, m, 2);
    let p = t.probe_at(40, fp);
    assert_eq!(t.insert(p, false), Ok(Inserted::Added));
    assert_eq!(copies(&t, 40, fp), 1);
    assert_eq!(
        word(&t, 40) & L::OVERFLOW,
        0,
        "a put into the primary set a bit"
    );
    // A full primary (of other groups' fingerprints): the next copy goes to the alternate.
    fill(&t, 40, 1, &[]);
    assert_eq!(t.insert(p, false), Ok(Inserted::Added));
    assert_eq!(copies(&t, 3, fp), 1);
    assert_eq!(word(&t, 40) & L::OVERFLOW, L::overflow_bit(fp));
    assert_eq!(word(&t, 3) & L::OVERFLOW, 0);
    // A key of the same fingerprint at the other end stays answered from its own primary.
    assert_eq!(t.contains_newest(t.probe_at(3, fp)), Lookup::Present);
    // Another fingerprint of the same group with primary 40, never inserted: two lines.
    let other = fp_linking::<L>(40, 9, m, 2);
    assert_eq!(t.one_line(t.probe_at(40, other)), None);
    assert_eq!(t.contains_newest(t.probe_at(40, other)), Lookup::Absent);
    // One of another group: answered from one line.
    let another = fp_linking::<L>(40, 9, m, 3);
    assert_eq!(
        t.contains_newest(t.probe_at(40, another)),
        Lookup::AbsentOneLine
    );
}

#[test]
fn a_put_into_the_alternate_marks_the_primary_15() {
    a_put_into_the_alternate_marks_the_primary::<Fp15>();
}

#[test]
fn a_put_into_the_alternate_marks_the_primary_12() {
    a_put_into_the_alternate_marks_the_primary::<Fp12>();
}

/// \[overflow.W3\]: a hop clears its slot and sets the fingerprint's bit in the source.
fn a_hop_marks_its_source<L: Layout>() {
    let m = 64;
    let t = RawTable::<L>::new(m, 5).unwrap();
    let fp = fp_linking::<L>(40, 3, m, 1);
    // The last slot: in `Fp12` it borders the overflow bits.
    let last = L::SLOTS - 1;
    t.set_slot(40, last, fp);
    assert_eq!(word(&t, 40) & L::OVERFLOW, 0);
    assert!(t.displace(Hop {
        from: 40,
        slot: last,
        fp,
        to: 3
    }));
    assert_eq!(copies(&t, 40, fp), 0);
    assert_eq!(copies(&t, 3, fp), 1);
    assert_eq!(word(&t, 40), L::overflow_bit(fp));
    assert_eq!(word(&t, 3) & L::OVERFLOW, 0);
    // The key whose copy moved out of its primary is still found.
    assert_eq!(t.contains_newest(t.probe_at(40, fp)), Lookup::Present);
}

#[test]
fn a_hop_marks_its_source_15() {
    a_hop_marks_its_source::<Fp15>();
}

#[test]
fn a_hop_marks_its_source_12() {
    a_hop_marks_its_source::<Fp12>();
}

/// A hop made by an insert's path: the key whose fingerprint moved out of its primary is found.
#[test]
fn a_key_moved_out_of_its_primary_by_a_path_is_found() {
    let m = 64;
    let t = Raw::new(m, 5).unwrap();
    // The new key's two buckets are full; one fingerprint in its primary leads to a free
    // bucket.
    let new_fp = fp_linking::<Fp15>(10, 20, m, 0);
    let moved = fp_linking::<Fp15>(10, 30, m, 3);
    let mover = t.probe_at(10, moved);
    assert_eq!(t.insert(mover, false), Ok(Inserted::Added));
    fill(&t, 10, 2, &[30]);
    fill(&t, 20, 2, &[30]);
    let before = displacements(&t);
    assert_eq!(t.insert(t.probe_at(10, new_fp), false), Ok(Inserted::Added));
    assert!(displacements(&t) > before);
    // The search expands the primary's slots in order: the mover, in slot 0, goes first.
    assert_eq!((copies(&t, 10, moved), copies(&t, 30, moved)), (0, 1));
    assert!(bit_set(&t, 10, moved));
    assert_eq!(t.contains_newest(mover), Lookup::Present);
}

/// \[overflow.W4\]: a remove that takes from the alternate while the primary holds the
/// fingerprint (the copy protocol's reordering) sets the bit in the alternate, for the key
/// whose primary that is.
#[test]
fn a_reordered_remove_marks_the_alternate() {
    let m = 64;
    let t = Raw::new(m, 5).unwrap();
    let fp = fp_linking::<Fp15>(40, 3, m, 1);
    let k = t.probe_at(40, fp);
    let y = t.probe_at(3, fp);
    assert_eq!(t.insert(k, false), Ok(Inserted::Added));
    assert_eq!(t.insert(y, false), Ok(Inserted::Added));
    assert_eq!((copies(&t, 40, fp), copies(&t, 3, fp)), (1, 1));
    let mut removed = false;
    t.copy_out(8, |_| {
        // After the first chunk (buckets 0..8) the copier has read bucket 3, not 40.
        if !removed {
            removed = t.remove(k);
        }
        Ok::<(), ()>(())
    })
    .unwrap();
    assert!(removed);
    assert_eq!(
        (copies(&t, 40, fp), copies(&t, 3, fp)),
        (1, 0),
        "not reordered"
    );
    assert!(bit_set(&t, 3, fp));
    assert!(!bit_set(&t, 40, fp));
    assert_eq!(t.contains_newest(y), Lookup::Present);
}

/// The bit a take sets \[overflow.W4\], directly, and the one a take from an older table
/// sets in the bucket it takes from.
#[test]
fn takes_mark_what_they_must() {
    let m = 64;
    let t = Raw::new(m, 5).unwrap();
    let fp = fp_linking::<Fp15>(40, 3, m, 3);
    let p = t.probe_at(40, fp);
    let bit = Fp15::overflow_bit(fp);
    t.set_slot(3, 0, fp);
    assert_eq!(t.alternate_take_bit(p, 3), 0, "the primary holds no copy");
    t.set_slot(40, 0, fp);
    assert_eq!(t.alternate_take_bit(p, 3), bit);
    assert_eq!(t.alternate_take_bit(p, 40), 0, "a take from the primary");
    // A plain remove takes from the primary and sets no bit.
    assert!(t.remove(p));
    assert_eq!(word(&t, 40), 0);
    assert_eq!(word(&t, 3), fp);
    // In an older table, the take marks its bucket: here the alternate.
    assert!(t.remove_in_older(p));
    assert_eq!(word(&t, 3), bit);
    assert_eq!(word(&t, 40), 0);
    // And the primary, when it takes from there.
    t.set_slot(40, 1, fp);
    assert!(t.remove_in_older(p));
    assert_eq!(word(&t, 40), bit);
}

/// A unique insert that finds its fingerprint only in the alternate marks the primary: the
/// key it stands for is then found from its own primary.
fn a_unique_insert_found_in_the_alternate_marks_the_primary<L: Layout>() {
    let m = 64;
    let t = RawTable::<L>::new(m, 5).unwrap();
    let fp = fp_linking::<L>(40, 3, m, 2);
    let k = t.probe_at(3, fp);
    let k2 = t.probe_at(40, fp);
    assert_eq!(t.insert(k, true), Ok(Inserted::Added));
    assert_eq!(t.contains_newest(k2), Lookup::AbsentOneLine);
    assert_eq!(t.insert(k2, true), Ok(Inserted::AlreadyPresent));
    assert_eq!(t.len(), 1);
    assert!(bit_set(&t, 40, fp));
    assert_eq!(t.contains_newest(k2), Lookup::Present);
    // Found in its primary: nothing to mark.
    assert_eq!(t.insert(k, true), Ok(Inserted::AlreadyPresent));
    assert_eq!(word(&t, 3) & L::OVERFLOW, 0);
}

#[test]
fn a_unique_insert_found_in_the_alternate_marks_the_primary_15() {
    a_unique_insert_found_in_the_alternate_marks_the_primary::<Fp15>();
}

#[test]
fn a_unique_insert_found_in_the_alternate_marks_the_primary_12() {
    a_unique_insert_found_in_the_alternate_marks_the_primary::<Fp12>();
}

/// The same through the filter's tables, from hashes.
#[test]
fn a_unique_insert_through_the_tables_marks_the_primary() {
    use super::super::{Table, Tables, Width};
    let m = 1_000u64;
    let tables = Tables::new(Table::new(Width::Fp15, m as usize, 5, 0).unwrap(), 1, 4);
    // The hash of a key with primary `bucket` and fingerprint `fp`.
    let hash = |bucket: u64, fp: u64| ((bucket << 32).div_ceil(m) << 32) | fp;
    let fp = 0x5A5A;
    let y = 17;
    let x = alternate_index(y, fp, m);
    assert_ne!(x, y);
    let (k, k2) = (hash(y, fp), hash(x, fp));
    assert_eq!(tables.base().contains_newest(k2), Lookup::AbsentOneLine);
    assert_eq!(tables.insert(k, true), Ok(Inserted::Added));
    assert!(!tables.contains(k2));
    assert_eq!(tables.insert(k2, true), Ok(Inserted::AlreadyPresent));
    assert_eq!(tables.base().contains_newest(k2), Lookup::Present);
    assert!(tables.contains(k2));
    assert_eq!(tables.len(), 1);
}

/// \[overflow.W5\]: `clear` zeroes every word, bits included.
#[test]
fn clear_zeroes_the_bits() {
    let t = Raw::new(200, 5).unwrap();
    let mut rng = Rng(7);
    while t.insert(t.probe(rng.next()), false).is_ok() {}
    assert!(t.overflow_share() > 0.0);
    t.clear();
    assert!(t.words().is_empty(), "{} words left", t.words().len());
    assert_eq!(t.overflow_share(), 0.0);
    assert_eq!(t.len(), 0);
}

/// \[overflow.W5\]: a snapshot's extra copy marks both buckets of its pair.
#[test]
fn an_extra_marks_both_buckets() {
    let m = 64;
    let mut t = Raw::new(m, 5).unwrap();
    let fp = fp_linking::<Fp15>(40, 3, m, 0);
    assert!(t.place_extra(Extra { bucket: 40, fp }));
    assert_eq!(copies(&t, 40, fp) + copies(&t, 3, fp), 1);
    let bit = Fp15::overflow_bit(fp);
    assert_eq!(word(&t, 40) & Fp15::OVERFLOW, bit);
    assert_eq!(word(&t, 3) & Fp15::OVERFLOW, bit);
    assert_eq!(t.contains_newest(t.probe_at(40, fp)), Lookup::Present);
    assert_eq!(t.contains_newest(t.probe_at(3, fp)), Lookup::Present);
}
