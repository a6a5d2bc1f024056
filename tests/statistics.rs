//! Seeded statistical tests: the false-positive rate at 95% load, and the load the default
//! configuration reaches before its first failed insert. Each prints what it measured
//! (`cargo test --test statistics -- --nocapture`).

use cuckoo_guard::{CuckooFilter, Displacement, Growth};

/// Fills a filter to exactly 95% of its slots and measures the false-positive rate over
/// keys never inserted, against the paper's `2 x slots x 0.95 / 2^f` and the filter's
/// estimate, and against `at_most`, the rate the class promises at 95% load.
fn false_positive_rate_at_95_percent(bits: u32, queries: u64, at_most: f64) {
    let filter = CuckooFilter::builder()
        .growth(Growth::Fixed)
        .capacity(1_000_000)
        .fingerprint_bits(bits)
        .seed(0xF00D + u64::from(bits))
        .build()
        .unwrap();
    let target = (filter.capacity() as f64 * 0.95).round() as u64;
    for k in 0..target {
        filter
            .insert(&k)
            .expect("95% load is below the first failure");
    }
    assert!((filter.load_factor() - 0.95).abs() < 1e-5);
    let absent = (1u64 << 40)..(1u64 << 40) + queries;
    let mut hits = vec![false; 4096];
    let mut false_positives = 0u64;
    let keys: Vec<u64> = absent.collect();
    for chunk in keys.chunks(4096) {
        let hits = &mut hits[..chunk.len()];
        filter.contains_many(chunk, hits);
        false_positives += hits.iter().filter(|&&h| h).count() as u64;
    }
    let measured = false_positives as f64 / queries as f64;
    // Fingerprint bits and slots per bucket of each class.
    let (fp_bits, slots) = match bits {
        8 => (8, 4.0),
        12 => (12, 5.0),
        _ => (15, 4.0),
    };
    let paper = 2.0 * slots * 0.95 / (1u64 << fp_bits) as f64;
    // The count of false positives is binomial over the queries, each a false positive with
    // probability `rate`: `within(rate)` is the count's range of four standard deviations.
    let within = |rate: f64| {
        let mean = rate * queries as f64;
        let sigma = (mean * (1.0 - rate)).sqrt();
        (mean - 4.0 * sigma, mean + 4.0 * sigma)
    };
    // The filter's estimate compares both buckets' fingerprints. With overflow bits a negative
    // whose bit is clear compares only its primary's, so the rate lies between the primary's
    // half of the estimate and the whole of it; without them it is the estimate.
    let expected = filter.expected_false_positive_rate();
    let primary_only = 1.0 - (1.0 - expected).sqrt();
    let share = filter.overflow_share();
    println!(
        "{bits}-bit class at 95% load: {false_positives} false positives in {queries} lookups = \
         {:.4}%; 2 x {slots} x 0.95 / 2^{fp_bits} = {:.4}% (ratio {:.3}); the filter's estimate \
         {:.4}% (primary bucket alone {:.4}%); overflow share {share:.3}",
        measured * 100.0,
        paper * 100.0,
        measured / paper,
        expected * 100.0,
        primary_only * 100.0,
    );
    let count = false_positives as f64;
    let (low, high) = if share > 0.0 {
        (within(primary_only).0, within(expected).1)
    } else {
        within(expected)
    };
    assert!(
        (low..=high).contains(&count),
        "{bits}-bit: {false_positives} false positives, outside [{low:.0}, {high:.0}]"
    );
    assert!(
        measured <= at_most,
        "{bits}-bit: {:.4}% false positives at 95% load, above the {:.4}% the class promises",
        measured * 100.0,
        at_most * 100.0
    );
}

#[test]
fn false_positive_rate_16_bit() {
    false_positive_rate_at_95_percent(16, 4_000_000, 0.0003);
}

#[test]
fn false_positive_rate_12_bit() {
    false_positive_rate_at_95_percent(12, 2_000_000, 0.003);
}

#[test]
fn false_positive_rate_8_bit() {
    false_positive_rate_at_95_percent(8, 1_000_000, 0.031);
}

/// Inserts distinct keys into a default filter until the first `InsertError`.
fn first_failure(bits: u32, capacity: usize, seed: u64) -> (f64, f64, usize) {
    fill_until_failure(
        CuckooFilter::builder()
            .growth(Growth::Fixed)
            .capacity(capacity)
            .fingerprint_bits(bits)
            .seed(seed)
            .build()
            .unwrap(),
    )
}

/// Inserts distinct keys into `filter` until the first `InsertError`; returns the load then,
/// the mean displacements per insert and the longest path used.
fn fill_until_failure(filter: CuckooFilter) -> (f64, f64, usize) {
    let mut k = 0u64;
    while filter.insert(&k).is_ok() {
        k += 1;
    }
    let stats = filter.stats();
    let mean_displacements = stats.displacements as f64 / stats.inserts as f64;
    let longest = stats
        .path_length_histogram
        .iter()
        .rposition(|&n| n > 0)
        .unwrap_or(0);
    (filter.load_factor(), mean_displacements, longest)
}

#[test]
fn default_configuration_reaches_95_percent_before_the_first_failure() {
    for bits in [16, 12, 8] {
        for (capacity, seeds) in [(10_000usize, 0..20u64), (1_000_000, 0..2)] {
            for seed in seeds {
                let (load, mean, longest) = first_failure(bits, capacity, seed);
                println!(
                    "{bits}-bit, capacity {capacity}, seed {seed}: first failure at {:.2}% \
                     load; {mean:.3} displacements per insert on average, at most {longest}",
                    load * 100.0
                );
                assert!(load >= 0.95, "first failure at {load} < 95%");
            }
        }
    }
}

/// The insertion study's claim, at a size the test suite can afford. The breadth-first search
/// with 6-bucket paths reaches a clearly higher load before its first failure than the paper's
/// random walk with 500 kicks (about 97.3% against 96%), and with the default 5-bucket paths
/// it reaches about the same load (within noise, which is large at 8 bits); both need many
/// fewer displacements per insert (about 0.2 against 1.3).
#[test]
fn breadth_first_search_beats_the_random_walk() {
    const SEEDS: u64 = 4;
    let modes = [
        (5, Displacement::BreadthFirst),
        (6, Displacement::BreadthFirst),
        (5, Displacement::RandomWalk { max_kicks: 500 }),
    ];
    for bits in [8, 16] {
        let mut loads = [0.0f64; 3];
        let mut displacements = [0.0f64; 3];
        for (i, (max_path_len, mode)) in modes.into_iter().enumerate() {
            for seed in 0..SEEDS {
                let (load, mean, _) = fill_until_failure(
                    CuckooFilter::builder()
                        .growth(Growth::Fixed)
                        .capacity(500_000)
                        .fingerprint_bits(bits)
                        .max_path_len(max_path_len)
                        .displacement(mode)
                        .seed(seed)
                        .build()
                        .unwrap(),
                );
                loads[i] += load / SEEDS as f64;
                displacements[i] += mean / SEEDS as f64;
            }
        }
        println!(
            "{bits}-bit: first failure at {:.2}% / {:.2}% (breadth-first, 5 / 6 buckets) vs \
             {:.2}% (random walk, 500 kicks); {:.3} / {:.3} vs {:.3} displacements per insert",
            loads[0] * 100.0,
            loads[1] * 100.0,
            loads[2] * 100.0,
            displacements[0],
            displacements[1],
            displacements[2]
        );
        assert!(loads[1] > loads[2] + 0.005, "{bits}-bit: {loads:?}");
        assert!(loads[0] > loads[2] - 0.005, "{bits}-bit: {loads:?}");
        assert!(
            displacements[0] * 3.0 < displacements[2] && displacements[1] * 3.0 < displacements[2],
            "{bits}-bit: {displacements:?}"
        );
    }
}

/// The false-positive rate of a growing filter over `queries` keys never inserted.
fn measured_false_positive_rate(filter: &CuckooFilter, queries: u64) -> f64 {
    let keys: Vec<u64> = ((1u64 << 40)..(1u64 << 40) + queries).collect();
    let mut hits = vec![false; keys.len()];
    filter.contains_many(&keys, &mut hits);
    hits.iter().filter(|&&h| h).count() as f64 / queries as f64
}

/// Fills a doubling filter of `bits`-bit fingerprints and measures the false-positive rate
/// just after growth steps 1, 2, 4 and 8 (every older table full, the newest empty) and
/// again once the newest is full too (just before the step after it). Each must be within four
/// standard deviations of the filter's own estimate (the sum of its tables' rates) and below
/// `steps + 1` times the configured rate, the bound `Growth` documents.
fn false_positive_rate_over_growth(bits: u32, queries: u64) {
    let filter = CuckooFilter::builder()
        .capacity(2_000)
        .fingerprint_bits(bits)
        .seed(0xFEED + u64::from(bits))
        .build()
        .unwrap();
    let configured = filter.configured_false_positive_rate();
    let mut key = 0u64;
    for steps in [1, 2, 4, 8] {
        let check = |when: &str, steps_allowed: usize| {
            let measured = measured_false_positive_rate(&filter, queries);
            let expected = filter.expected_false_positive_rate();
            let bound = (steps_allowed + 1) as f64 * configured;
            println!(
                "{bits}-bit, {steps} growth steps, {when}: {} tables, load {:.3}, measured \
                 {measured:.6}, estimate {expected:.6}, bound (steps + 1) x {configured:.6} \
                 = {bound:.6}, measured / configured = {:.2}",
                filter.stats().growth_steps + 1,
                filter.load_factor(),
                measured / configured
            );
            // The estimate sums the tables' rates: a query is a false positive when any table
            // matches, `1 - prod(1 - r_i)`, which lies between `S - S^2 / 2` and `S` for the
            // sum `S`. The count over the queries is binomial: it must lie in that range
            // widened by four standard deviations (taken at the larger rate, `S`).
            let n = queries as f64;
            let sigma = (n * expected * (1.0 - expected)).sqrt();
            let (low, high) = (
                n * (expected - expected * expected / 2.0) - 4.0 * sigma,
                n * expected + 4.0 * sigma,
            );
            let count = measured * n;
            assert!(
                (low..=high).contains(&count),
                "{bits}-bit, {when} step {steps}: {count} false positives, outside \
                 [{low:.0}, {high:.0}] (estimate {expected})"
            );
            assert!(
                measured <= bound * 1.1,
                "{bits}-bit, {when} step {steps}: measured {measured} above {bound}"
            );
        };
        while filter.stats().growth_steps < steps {
            filter.insert(&key).unwrap();
            key += 1;
        }
        check("newest table empty", steps);
        // Fill the newest table until the insert that would add the next one.
        let capacity = filter.capacity();
        loop {
            filter.insert(&key).unwrap();
            key += 1;
            if filter.capacity() != capacity {
                break;
            }
        }
        assert!(filter.remove(&(key - 1)), "the key that grew the filter");
        key -= 1;
        check("then filled", steps + 1);
        assert!(
            (0..key).all(|k| filter.contains(&k)),
            "a grown filter lost a key"
        );
    }
}

#[test]
fn false_positive_rate_over_growth_8_bit() {
    false_positive_rate_over_growth(8, 400_000);
}

#[test]
fn false_positive_rate_over_growth_16_bit() {
    false_positive_rate_over_growth(16, 4_000_000);
}
