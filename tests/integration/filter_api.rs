//! The public contract of `CuckooFilter` and its builder, one behaviour per test.

use std::hash::BuildHasherDefault;

use cuckoo_guard::{BuildError, CuckooFilter, Displacement, Growth, InsertError};

#[test]
fn filter_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CuckooFilter>();
    assert_send_sync::<CuckooFilter<BuildHasherDefault<std::collections::hash_map::DefaultHasher>>>(
    );
}

#[test]
fn inserted_keys_are_found_and_removed_keys_are_not() {
    let filter = CuckooFilter::builder()
        .capacity(10_000)
        .seed(1)
        .build()
        .unwrap();
    for k in 0..10_000u32 {
        filter.insert(&k).unwrap();
    }
    assert_eq!(filter.len(), 10_000);
    assert!((0..10_000u32).all(|k| filter.contains(&k)));
    for k in 0..5_000u32 {
        assert!(filter.remove(&k));
    }
    assert_eq!(filter.len(), 5_000);
    assert!((5_000..10_000u32).all(|k| filter.contains(&k)));
    let still_reported = (0..5_000u32).filter(|k| filter.contains(k)).count();
    assert!(
        still_reported < 10,
        "removed keys reported present: {still_reported}"
    );
}

#[test]
fn unsized_keys_hash_like_their_owned_forms() {
    let filter = CuckooFilter::with_capacity(100);
    filter.insert("abc").unwrap();
    assert!(filter.contains(&String::from("abc")));
    filter.insert(&[1u8, 2][..]).unwrap();
    assert!(filter.contains(&vec![1u8, 2]));
}

#[test]
fn duplicates_are_counted_and_removed_one_at_a_time() {
    // Random seeds: for some keys the two candidate buckets coincide (the alternate index maps
    // the bucket to itself), and then only 4 copies fit instead of 8. Both shapes are checked
    // across many keys.
    let mut shapes = [0usize; 2];
    for k in 0..200u32 {
        let filter = CuckooFilter::builder()
            .capacity(100)
            .growth(Growth::Fixed)
            .build()
            .unwrap();
        let mut copies = 0;
        while filter.insert(&k).is_ok() {
            copies += 1;
            assert_eq!(filter.count(&k), copies);
            assert!(copies <= 8, "a key's two buckets hold at most 8 copies");
        }
        assert!(
            copies == 8 || copies == 4,
            "key {k}: {copies} copies fit; expected 8 (two buckets) or 4 (one)"
        );
        shapes[usize::from(copies == 8)] += 1;
        // The refused copy left the filter as it was.
        assert_eq!(filter.count(&k), copies);
        assert_eq!(filter.len(), copies);
        for n in (0..copies).rev() {
            assert!(filter.remove(&k));
            assert_eq!(filter.count(&k), n);
        }
        assert!(!filter.remove(&k));
        assert!(!filter.contains(&k));
    }
    assert!(
        shapes[1] > 150,
        "most keys have two distinct buckets: {shapes:?}"
    );
}

#[test]
fn insert_unique_adds_only_the_first_time() {
    let filter = CuckooFilter::with_capacity(100);
    assert_eq!(filter.insert_unique(&5u8), Ok(true));
    assert_eq!(filter.insert_unique(&5u8), Ok(false));
    filter.insert(&5u8).unwrap();
    assert_eq!(filter.insert_unique(&5u8), Ok(false));
    assert_eq!(filter.count(&5u8), 2);
}

#[test]
fn contains_many_agrees_with_contains() {
    for bits in [8, 16] {
        let filter = CuckooFilter::builder()
            .capacity(50_000)
            .fingerprint_bits(bits)
            .seed(2)
            .build()
            .unwrap();
        for k in 0..40_000u64 {
            filter.insert(&k).unwrap();
        }
        // Lengths around the batch size, hits and misses mixed.
        for len in [0, 1, 15, 16, 17, 33, 1000] {
            let keys: Vec<u64> = (0..len as u64).map(|i| i * 7 + 39_000).collect();
            let mut batched = vec![false; len];
            filter.contains_many(&keys, &mut batched);
            let single: Vec<bool> = keys.iter().map(|k| filter.contains(k)).collect();
            assert_eq!(batched, single, "bits {bits}, len {len}");
            for (k, found) in keys.iter().zip(&batched) {
                if *k < 40_000 {
                    assert!(found, "false negative in contains_many for {k}");
                }
            }
        }
    }
}

#[test]
#[should_panic(expected = "contains_many: 2 keys but 1 result slots")]
fn contains_many_rejects_mismatched_lengths() {
    let filter = CuckooFilter::with_capacity(10);
    filter.contains_many(&[1, 2], &mut [false]);
}

#[test]
fn a_full_filter_reports_full_and_keeps_every_key() {
    let filter = CuckooFilter::builder()
        .capacity(1_000)
        .growth(Growth::Fixed)
        .seed(3)
        .build()
        .unwrap();
    let mut n = 0u64;
    let error = loop {
        match filter.insert(&n) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
    };
    let InsertError::Full { len, capacity } = error else {
        panic!("single-threaded inserts can only fail as Full, got {error:?}");
    };
    assert_eq!(len, n as usize);
    assert_eq!(capacity, filter.capacity());
    assert_eq!(filter.len(), n as usize);
    assert!(
        (0..n).all(|k| filter.contains(&k)),
        "a failed insert lost a key"
    );
    assert_eq!(filter.stats().failed_inserts, 1);
    assert!(error.to_string().contains("full"));
}

#[test]
fn with_capacity_holds_its_capacity() {
    for capacity in [1, 2, 7, 100, 12_345, 200_000] {
        let filter = CuckooFilter::with_capacity(capacity);
        assert!(filter.capacity() >= capacity);
        for k in 0..capacity {
            filter
                .insert(&k)
                .unwrap_or_else(|e| panic!("capacity {capacity}: key {k}: {e}"));
        }
    }
    // 0 is rounded up rather than refused.
    assert!(CuckooFilter::with_capacity(0).capacity() >= 1);
}

#[test]
fn with_capacity_does_not_round_to_a_power_of_two() {
    let filter = CuckooFilter::with_capacity(3_000_000);
    let ideal_bits = 3_000_000.0 * 16.0 / 0.95;
    let bucket_bits = filter.capacity() as f64 * 16.0;
    assert!(
        bucket_bits <= ideal_bits * 1.05,
        "{bucket_bits} > 1.05 x {ideal_bits}"
    );
    // Stripes (32 KiB) and counters are the only other heap bytes.
    let overhead = filter.memory_usage() - filter.capacity() * 2;
    assert!(overhead <= 64 * 1024, "non-bucket memory {overhead} bytes");
}

#[test]
fn memory_usage_counts_the_bucket_array() {
    let f16 = CuckooFilter::builder()
        .capacity(100_000)
        .fingerprint_bits(16)
        .build()
        .unwrap();
    let f8 = CuckooFilter::builder()
        .capacity(100_000)
        .fingerprint_bits(8)
        .build()
        .unwrap();
    assert_eq!(f16.capacity(), f8.capacity());
    assert!(f16.memory_usage() >= f16.capacity() * 2);
    assert!(f8.memory_usage() >= f8.capacity());
    assert_eq!(
        f16.memory_usage() - f8.memory_usage(),
        f16.capacity(),
        "16-bit slots take one byte more than 8-bit slots"
    );
}

#[test]
fn clear_empties_the_filter_and_it_can_be_refilled() {
    let filter = CuckooFilter::with_capacity(1_000);
    for k in 0..1_000 {
        filter.insert(&k).unwrap();
    }
    filter.clear();
    assert!(filter.is_empty());
    assert_eq!(filter.len(), 0);
    assert!((0..1_000).filter(|k| filter.contains(k)).count() == 0);
    for k in 0..1_000 {
        filter.insert(&k).unwrap();
    }
    assert_eq!(filter.len(), 1_000);
}

#[test]
fn stats_count_inserts_failures_and_displacements() {
    let filter = CuckooFilter::builder()
        .capacity(5_000)
        .growth(Growth::Fixed)
        .seed(9)
        .build()
        .unwrap();
    let mut n = 0u64;
    while filter.insert(&n).is_ok() {
        n += 1;
    }
    let stats = filter.stats();
    assert_eq!(stats.inserts, n);
    assert_eq!(stats.failed_inserts, 1);
    assert_eq!(stats.failed_inserts_contended, 0);
    assert_eq!(stats.len, n as usize);
    assert_eq!(stats.capacity, filter.capacity());
    assert!((stats.load_factor - filter.load_factor()).abs() < 1e-12);
    assert_eq!(stats.path_length_histogram.len(), 5);
    assert_eq!(stats.path_length_histogram.iter().sum::<u64>(), n);
    let weighted: u64 = stats
        .path_length_histogram
        .iter()
        .enumerate()
        .map(|(d, &c)| d as u64 * c)
        .sum();
    assert_eq!(
        weighted, stats.displacements,
        "single-threaded: no path is redone"
    );
    assert!(
        stats.displacements > 0,
        "a filled table must have displaced something"
    );
    assert_eq!(stats.read_retries, 0);
    assert_eq!(stats.read_fallbacks, 0);
}

#[test]
fn seeded_filters_agree_and_random_ones_differ() {
    let build = |seed| {
        let f = CuckooFilter::builder()
            .capacity(1_000)
            .seed(seed)
            .build()
            .unwrap();
        for k in 0..900u32 {
            f.insert(&k).unwrap();
        }
        (1_000_000..1_100_000u32)
            .filter(|k| f.contains(k))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        build(5),
        build(5),
        "the same seed must give the same false positives"
    );
    assert_ne!(build(5), build(6));
}

#[test]
fn builder_picks_the_narrowest_width_for_the_rate() {
    let width = |rate| {
        CuckooFilter::builder()
            .capacity(10)
            .false_positive_rate(rate)
            .build()
            .map(|f| f.fingerprint_bits())
    };
    assert_eq!(width(0.5), Ok(8));
    assert_eq!(width(0.03), Ok(8));
    assert_eq!(width(0.02), Ok(12));
    assert_eq!(width(0.01), Ok(12));
    assert_eq!(width(0.003), Ok(12));
    assert_eq!(width(0.002), Ok(16));
    assert_eq!(width(0.0003), Ok(16));
    assert!(matches!(
        width(0.0002),
        Err(BuildError::UnachievableFalsePositiveRate { .. })
    ));
    assert_eq!(CuckooFilter::with_capacity(10).fingerprint_bits(), 16);
}

#[test]
fn builder_rejects_bad_configurations_with_clear_errors() {
    let b = || CuckooFilter::builder().capacity(100);
    let cases: Vec<(Result<CuckooFilter, BuildError>, &str)> = vec![
        (CuckooFilter::builder().build(), "capacity"),
        (b().capacity(0).build(), "at least 1"),
        (b().capacity(usize::MAX).build(), "too large"),
        (
            b().false_positive_rate(0.0).build(),
            "strictly between 0 and 1",
        ),
        (
            b().false_positive_rate(1.0).build(),
            "strictly between 0 and 1",
        ),
        (
            b().false_positive_rate(-0.1).build(),
            "strictly between 0 and 1",
        ),
        (
            b().false_positive_rate(f64::NAN).build(),
            "strictly between 0 and 1",
        ),
        (
            b().false_positive_rate(1e-9).build(),
            "below what any supported",
        ),
        (b().fingerprint_bits(10).build(), "use 8, 12 or 16"),
        (
            b().displacement(Displacement::RandomWalk { max_kicks: 0 })
                .build(),
            "kick limit 0 is invalid",
        ),
        (
            b().displacement(Displacement::RandomWalk { max_kicks: 100_001 })
                .build(),
            "kick limit 100001 is invalid",
        ),
        (b().fingerprint_bits(0).build(), "use 8, 12 or 16"),
        (
            b().fingerprint_bits(8).false_positive_rate(0.001).build(),
            "8-bit fingerprints give",
        ),
        (b().max_path_len(0).build(), "between 1 and 8"),
        (b().max_path_len(9).build(), "between 1 and 8"),
    ];
    for (result, message) in cases {
        let error = result.expect_err(message);
        assert!(
            error.to_string().contains(message),
            "{error:?} displays as {error}, expected to mention {message:?}"
        );
        let _: &dyn std::error::Error = &error;
    }
    assert!(b()
        .fingerprint_bits(16)
        .false_positive_rate(0.001)
        .build()
        .is_ok());
    assert!(b()
        .fingerprint_bits(12)
        .false_positive_rate(0.01)
        .build()
        .is_ok());
    assert!(b().max_path_len(1).build().is_ok());
    assert!(b().max_path_len(8).build().is_ok());
}

#[test]
#[should_panic(expected = "too large")]
fn with_capacity_panics_only_beyond_the_supported_size() {
    let _ = CuckooFilter::with_capacity(usize::MAX);
}

#[test]
fn a_custom_hasher_is_used() {
    let filter = CuckooFilter::builder()
        .capacity(1_000)
        .hasher(BuildHasherDefault::<
            std::collections::hash_map::DefaultHasher,
        >::default())
        .build()
        .unwrap();
    for k in 0..1_000 {
        filter.insert(&k).unwrap();
    }
    assert!((0..1_000).all(|k| filter.contains(&k)));
}

#[test]
fn debug_output_names_the_shape() {
    let filter = CuckooFilter::with_capacity(10);
    filter.insert("x").unwrap();
    let text = format!("{filter:?}");
    assert!(text.contains("len: 1"), "{text}");
    assert!(text.contains("fingerprint_bits: 16"), "{text}");
}

#[test]
fn random_walk_inserts_fill_the_filter_and_lose_nothing() {
    for bits in [8, 16] {
        let filter = CuckooFilter::builder()
            .capacity(20_000)
            .growth(Growth::Fixed)
            .fingerprint_bits(bits)
            .displacement(Displacement::RandomWalk { max_kicks: 500 })
            .seed(5)
            .build()
            .unwrap();
        assert_eq!(
            filter.displacement(),
            Displacement::RandomWalk { max_kicks: 500 }
        );
        let mut inserted = 0u64;
        while filter.insert(&inserted).is_ok() {
            inserted += 1;
        }
        // The failed insert moved nothing: every earlier key is still there.
        assert_eq!(filter.len() as u64, inserted);
        assert!((0..inserted).all(|k| filter.contains(&k)));
        assert!(
            filter.load_factor() > 0.94,
            "{bits}-bit: {}",
            filter.load_factor()
        );
        let stats = filter.stats();
        assert!(stats.displacements > 0 && stats.max_displacements > 4);
        assert!(stats.max_displacements <= 500);
        for k in 0..inserted {
            assert!(filter.remove(&k));
        }
        assert!(filter.is_empty());
    }
    assert_eq!(
        CuckooFilter::with_capacity(10).displacement(),
        Displacement::BreadthFirst
    );
}

#[test]
fn a_memory_ceiling_bounds_growth_and_refuses_with_its_own_error() {
    let limit = 256 * 1024;
    let filter = CuckooFilter::builder()
        .capacity(1_000)
        .max_memory(limit)
        .seed(2)
        .build()
        .unwrap();
    assert_eq!(filter.max_memory(), Some(limit));
    let mut inserted = Vec::new();
    let refused = loop {
        let k = inserted.len() as u64;
        match filter.insert(&k) {
            Ok(()) => inserted.push(k),
            Err(e) => break e,
        }
        assert!(k < 10_000_000, "never refused");
    };
    match refused {
        InsertError::MemoryLimit { limit: l, needed } => {
            assert_eq!(l, limit);
            assert!(needed > limit, "{needed}");
        }
        other => panic!("refused with {other:?}"),
    }
    assert!(filter.stats().growth_steps > 0, "it grew up to the ceiling");
    assert!(filter.memory_usage() <= limit, "{}", filter.memory_usage());
    // Nothing inserted was lost on the way.
    assert!(inserted.iter().all(|k| filter.contains(k)));
    assert!(refused.to_string().contains("memory ceiling"));
}

#[test]
fn a_first_table_over_the_ceiling_is_a_build_error() {
    let error = CuckooFilter::builder()
        .capacity(1_000_000)
        .max_memory(1024)
        .build()
        .unwrap_err();
    match error {
        BuildError::MemoryLimit { limit, needed } => {
            assert_eq!(limit, 1024);
            assert!(needed > 2_000_000, "{needed}");
        }
        other => panic!("{other:?}"),
    }
}
