//! Chosen keys: an attacker who knows a filter's hash seed can search for keys that share one
//! key's fingerprint and buckets, and flood them in. Under another seed the same keys collide
//! no more than any keys do (each filter built without `seed` draws its own random keys), and
//! against the known seed the flood shows (failed inserts or growth steps), never a false
//! negative.

use cuckoo_guard::{CuckooFilter, Growth, InsertError};

const KNOWN_SEED: u64 = 0xDEAD_BEEF;

/// Keys that, under `seed`, a filter of `capacity` holding only `victim` reports present:
/// they share the victim's fingerprint and so its two buckets.
fn collisions(seed: u64, victim: u64, wanted: usize, capacity: usize) -> Vec<u64> {
    let probe = CuckooFilter::builder()
        .capacity(capacity)
        .fingerprint_bits(16)
        .seed(seed)
        .build()
        .unwrap();
    probe.insert(&victim).unwrap();
    (0u64..)
        .map(|n| n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x1234)
        .filter(|&key| key != victim && probe.contains(&key))
        .take(wanted)
        .collect()
}

#[test]
fn keys_that_collide_under_one_seed_do_not_under_another() {
    let victim = 42u64;
    let chosen = collisions(KNOWN_SEED, victim, 64, 4);
    let same_seed = CuckooFilter::builder()
        .capacity(4)
        .fingerprint_bits(16)
        .seed(KNOWN_SEED)
        .build()
        .unwrap();
    same_seed.insert(&victim).unwrap();
    assert!(chosen.iter().all(|key| same_seed.contains(key)));

    // The same keys against filters with other seeds, and with the default random keys.
    let mut reported = 0;
    let mut asked = 0;
    for seed in 1..=50u64 {
        let other = CuckooFilter::builder()
            .capacity(4)
            .fingerprint_bits(16)
            .seed(seed)
            .build()
            .unwrap();
        other.insert(&victim).unwrap();
        reported += chosen.iter().filter(|key| other.contains(*key)).count();
        asked += chosen.len();
    }
    let random = CuckooFilter::builder()
        .capacity(4)
        .fingerprint_bits(16)
        .build()
        .unwrap();
    random.insert(&victim).unwrap();
    reported += chosen.iter().filter(|key| random.contains(*key)).count();
    asked += chosen.len();
    let rate = reported as f64 / asked as f64;
    println!(
        "{} keys chosen to collide under seed {KNOWN_SEED:#x}: under 51 other seeds {reported} of \
         {asked} lookups reported present ({rate:.5}; a 4-slot filter of 15-bit fingerprints has \
         a rate of about 8/32768 = 0.00024)",
        chosen.len()
    );
    // At most a few chance collisions: 64 * 51 lookups at ~0.00024 expect 0.8.
    assert!(reported <= 4, "{reported} of {asked}");
}

#[test]
fn a_flood_of_chosen_keys_is_visible_and_loses_nothing() {
    let victim = 7u64;
    let chosen = collisions(KNOWN_SEED, victim, 40, 10_000);

    // A filter that may not grow: the ninth copy for one bucket pair has no room.
    let fixed = CuckooFilter::builder()
        .capacity(10_000)
        .fingerprint_bits(16)
        .seed(KNOWN_SEED)
        .growth(Growth::Fixed)
        .build()
        .unwrap();
    fixed.insert(&victim).unwrap();
    let mut inserted = vec![victim];
    let mut refused = 0;
    for &key in &chosen {
        match fixed.insert(&key) {
            Ok(()) => inserted.push(key),
            Err(InsertError::Full { .. }) => refused += 1,
            Err(other) => panic!("{other}"),
        }
    }
    let stats = fixed.stats();
    println!(
        "Growth::Fixed: {} of {} chosen keys inserted, {refused} refused (InsertError::Full, \
         failed_inserts {})",
        inserted.len() - 1,
        chosen.len(),
        stats.failed_inserts
    );
    assert!(refused > 0, "the flood was not refused anywhere");
    assert_eq!(stats.failed_inserts, refused as u64);
    assert!(
        inserted.iter().all(|key| fixed.contains(key)),
        "a false negative"
    );

    // A growing filter takes them, adding tables: the growth is the signal.
    let growing = CuckooFilter::builder()
        .capacity(10_000)
        .fingerprint_bits(16)
        .seed(KNOWN_SEED)
        .build()
        .unwrap();
    growing.insert(&victim).unwrap();
    for &key in &chosen {
        growing.insert(&key).unwrap();
    }
    let steps = growing.stats().growth_steps;
    println!(
        "Growth::Expand: all {} taken with {steps} growth steps",
        chosen.len()
    );
    assert!(steps > 0, "the flood grew nothing");
    assert!(chosen
        .iter()
        .chain([&victim])
        .all(|key| growing.contains(key)));
}
