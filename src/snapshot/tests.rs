//! The format's own tests: round trips of every configuration, every refusal, and the
//! extras a straddling writer leaves (forced from inside the copier's sink).

use proptest::prelude::*;

use super::*;
use crate::error::SnapshotError;
use crate::filter::CuckooFilter;
use crate::table::{Extra, Hop};

fn snapshot_of<S: BuildHasher>(filter: &CuckooFilter<S>) -> Vec<u8> {
    let mut bytes = Vec::new();
    let written = filter.write_snapshot(&mut bytes).unwrap();
    assert_eq!(written.bytes, bytes.len() as u64);
    bytes
}

/// A seeded filter of `keys` keys, built by `configure`.
fn filled(
    keys: u64,
    configure: impl FnOnce(crate::Builder<RandomState>) -> crate::Builder<RandomState>,
) -> CuckooFilter {
    let filter = configure(CuckooFilter::builder().seed(11)).build().unwrap();
    for k in 0..keys {
        filter.insert(&k).unwrap();
    }
    filter
}

fn assert_same(a: &CuckooFilter, b: &CuckooFilter, keys: u64) {
    assert_eq!(a.len(), b.len());
    assert_eq!(a.capacity(), b.capacity());
    assert_eq!(a.fingerprint_bits(), b.fingerprint_bits());
    assert_eq!(a.growth(), b.growth());
    assert_eq!(a.growth_steps(), b.growth_steps());
    assert_eq!(a.displacement(), b.displacement());
    assert_eq!(a.max_path_len(), b.max_path_len());
    assert_eq!(a.built_for(), b.built_for());
    assert_eq!(a.hash_keys(), b.hash_keys());
    assert!((0..keys).all(|k| b.contains(&k)), "a key went missing");
    // Same words, keys and configuration: the restored filter writes the same bytes.
    assert_eq!(snapshot_of(a), snapshot_of(b));
}

#[test]
fn every_configuration_round_trips() {
    type Configure = fn(crate::Builder<RandomState>) -> crate::Builder<RandomState>;
    let configs: [(&str, u64, Configure); 6] = [
        ("16-bit", 5_000, |b| b.capacity(10_000)),
        ("8-bit", 5_000, |b| b.capacity(10_000).fingerprint_bits(8)),
        ("fixed, nearly full", 9_400, |b| {
            b.capacity(10_000).growth(Growth::Fixed)
        }),
        ("random walk, path 3", 3_000, |b| {
            b.capacity(4_000)
                .displacement(Displacement::RandomWalk { max_kicks: 300 })
                .max_path_len(3)
        }),
        ("grown 3 times", 20_000, |b| b.capacity(2_000)),
        ("grown by 4x, 8-bit", 9_000, |b| {
            b.capacity(1_000)
                .fingerprint_bits(8)
                .growth(Growth::Expand {
                    factor: 4,
                    max_steps: 3,
                })
        }),
    ];
    for (name, keys, configure) in configs {
        let filter = filled(keys, configure);
        let bytes = snapshot_of(&filter);
        let restored =
            CuckooFilter::read_snapshot(&bytes[..]).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_same(&filter, &restored, keys);
        let info = inspect(&bytes[..]).unwrap();
        assert_eq!(info.tables, filter.growth_steps() + 1, "{name}");
        assert_eq!(info.capacity(), filter.capacity() as u64, "{name}");
        let body = info.body.unwrap();
        assert_eq!(body.items, filter.len() as u64, "{name}");
        assert_eq!(body.bytes, bytes.len() as u64, "{name}");
    }
}

#[test]
fn the_restored_filter_keeps_working() {
    let filter = filled(1_000, |b| b.capacity(1_000));
    let restored = CuckooFilter::read_snapshot(&snapshot_of(&filter)[..]).unwrap();
    for k in 1_000..3_000u64 {
        restored.insert(&k).unwrap();
    }
    assert!(restored.growth_steps() > 0);
    for k in 0..500u64 {
        assert!(restored.remove(&k));
    }
    assert!((500..3_000u64).all(|k| restored.contains(&k)));
    assert_eq!(restored.len(), 2_500);
}

#[test]
fn a_default_filter_records_random_keys_and_reads_back() {
    let filter = CuckooFilter::with_capacity(100);
    filter.insert("k").unwrap();
    let keys = filter.hash_keys().expect("the builder made the hasher");
    assert_ne!(keys, CuckooFilter::with_capacity(100).hash_keys().unwrap());
    let restored = CuckooFilter::read_snapshot(&snapshot_of(&filter)[..]).unwrap();
    assert_eq!(
        restored.hasher().hash_one("k"),
        filter.hasher().hash_one("k")
    );
}

#[test]
fn a_sibling_keeps_the_hash_keys() {
    let filter = filled(10, |b| b.capacity(100));
    assert_eq!(
        filter.sibling(1_000).unwrap().hash_keys(),
        filter.hash_keys()
    );
}

#[test]
fn debug_output_holds_no_hash_key() {
    let seeded = CuckooFilter::builder().capacity(100).seed(5);
    let random = CuckooFilter::builder().capacity(100);
    for builder in [seeded, random] {
        let filter = builder.clone().build().unwrap();
        let keys = filter.hash_keys().unwrap();
        let header = Header::of(&filter, 1, 0);
        let texts = [
            format!("{builder:?}"),
            format!("{builder:#?}"),
            format!("{filter:?}"),
            format!("{header:?}"),
            format!("{header:#?}"),
            format!("{:?}", inspect(&snapshot_of(&filter)[..]).unwrap()),
        ];
        for text in texts {
            assert!(
                text.contains("capacity") || text.contains("built_for"),
                "{text}"
            );
            for key in keys {
                for shown in [
                    key.to_string(),
                    format!("{key:x}"),
                    format!("{key:X}"),
                    (key as i64).to_string(),
                ] {
                    assert!(!text.contains(&shown), "{text} shows a key");
                }
            }
        }
    }
}

/// Rewrites the header's checksum after a test changed a field.
fn reseal_header(bytes: &mut [u8]) {
    let checksum = xxh64(&bytes[..88], 0);
    bytes[88..96].copy_from_slice(&checksum.to_le_bytes());
}

/// Rewrites the body's checkpoint and the trailer's checksum (both seeded with the header's
/// checksum) after a test changed the body.
fn reseal_body(bytes: &mut [u8], buckets: usize) {
    let seed = u64::from_le_bytes(bytes[88..96].try_into().unwrap());
    let at = extras_offset(buckets) + 8;
    let checkpoint = xxh64(&bytes[HEADER_LEN..at], seed);
    bytes[at..at + 8].copy_from_slice(&checkpoint.to_le_bytes());
    let end = bytes.len() - 8;
    let checksum = xxh64(&bytes[HEADER_LEN..end], seed);
    bytes[end..].copy_from_slice(&checksum.to_le_bytes());
}

fn read(bytes: &[u8]) -> Result<CuckooFilter, SnapshotError> {
    CuckooFilter::read_snapshot(bytes)
}

#[test]
fn other_hashing_is_refused() {
    let filter = filled(100, |b| b.capacity(100));
    let bytes = snapshot_of(&filter);

    // Another key: the probe no longer matches.
    let mut other_key = bytes.clone();
    other_key[40] ^= 1;
    reseal_header(&mut other_key);
    assert!(matches!(
        read(&other_key),
        Err(SnapshotError::HasherMismatch)
    ));

    // A build whose ahash hashes differently writes another probe for the same keys.
    let mut other_build = bytes.clone();
    other_build[72] ^= 1;
    reseal_header(&mut other_build);
    assert!(matches!(
        read(&other_build),
        Err(SnapshotError::HasherMismatch)
    ));
    assert_eq!(
        inspect(&other_build[..]).unwrap().probe_matches,
        Some(false)
    );

    // The caller's hasher must hash as the writer's did.
    let wrong = RandomState::with_seeds(1, 2, 3, 4);
    assert!(matches!(
        CuckooFilter::read_snapshot_with_hasher(&bytes[..], wrong),
        Err(SnapshotError::HasherMismatch)
    ));
    let right = filter.hasher().clone();
    let restored = CuckooFilter::read_snapshot_with_hasher(&bytes[..], right).unwrap();
    assert!((0..100u64).all(|k| restored.contains(&k)));
}

#[test]
fn foreign_and_future_input_is_refused() {
    let bytes = snapshot_of(&filled(10, |b| b.capacity(100)));
    assert!(matches!(read(b""), Err(SnapshotError::Truncated)));
    assert!(matches!(
        read(b"PK\x03\x04 not a snapshot at all, whose first bytes are not the magic"),
        Err(SnapshotError::BadMagic)
    ));

    let mut future = bytes.clone();
    future[8..10].copy_from_slice(&4u16.to_le_bytes());
    reseal_header(&mut future);
    assert!(matches!(
        read(&future),
        Err(SnapshotError::UnsupportedVersion {
            found: 4,
            supported: 3
        })
    ));
    let mut version_1 = bytes.clone();
    version_1[8..10].copy_from_slice(&1u16.to_le_bytes());
    reseal_header(&mut version_1);
    assert!(matches!(
        read(&version_1),
        Err(SnapshotError::UnsupportedVersion {
            found: 1,
            supported: 3
        })
    ));
    assert!(matches!(
        inspect(&future[..]),
        Err(SnapshotError::UnsupportedVersion { .. })
    ));
}

#[test]
fn invalid_header_fields_are_refused_even_with_a_valid_checksum() {
    let bytes = snapshot_of(&filled(10, |b| b.capacity(100)));
    let cases: [(usize, &[u8], &str); 9] = [
        (10, &[13], "fingerprint width"),
        (11, &[0], "maximum path length"),
        (11, &[9], "maximum path length"),
        (12, &[5], "growth"),
        (14, &[0], "table count"),
        (14, &[18], "table count"),
        (15, &[2], "hasher"),
        (20, &[1], "reserved bytes"),
        (24, &[0, 0, 0, 0, 0, 0, 0, 0], "bucket count"),
    ];
    for (at, value, field) in cases {
        let mut bad = bytes.clone();
        bad[at..at + value.len()].copy_from_slice(value);
        reseal_header(&mut bad);
        match read(&bad) {
            Err(SnapshotError::InvalidHeader { field: f }) => assert_eq!(f, field),
            other => panic!("byte {at} = {value:?}: {other:?}"),
        }
    }
    // 2^32 + 1 buckets.
    let mut huge = bytes.clone();
    huge[24..32].copy_from_slice(&((1u64 << 32) + 1).to_le_bytes());
    reseal_header(&mut huge);
    assert!(matches!(
        read(&huge),
        Err(SnapshotError::InvalidHeader {
            field: "bucket count"
        })
    ));
}

#[test]
fn a_header_claiming_the_largest_table_fails_fast_as_truncated() {
    // A valid header for 2^32 buckets (32 GiB of words) over a short body: the reader
    // allocates as the words arrive, so it stops at the end of the input.
    let mut bytes = snapshot_of(&filled(10, |b| b.capacity(100).growth(Growth::Fixed)));
    let capacity = crate::sizing::max_capacity(4);
    let buckets = crate::sizing::buckets_for(capacity, 4).unwrap() as u64;
    assert!(buckets > (1 << 32) - 4);
    bytes[24..32].copy_from_slice(&buckets.to_le_bytes());
    bytes[32..40].copy_from_slice(&(capacity as u64).to_le_bytes());
    reseal_header(&mut bytes);
    assert!(matches!(
        read(&bytes),
        Err(SnapshotError::Truncated | SnapshotError::AllocationFailed { .. })
    ));
}

#[test]
fn every_file_a_writer_produces_has_the_base_table_its_capacity_sizes() {
    let mut capacities: Vec<usize> = (1..=300).collect();
    capacities.extend([997, 1_000, 4_096, 12_345, 100_000, 1_000_003]);
    for capacity in capacities {
        for bits in [8, 16] {
            let filter = CuckooFilter::builder()
                .capacity(capacity)
                .fingerprint_bits(bits)
                .seed(capacity as u64)
                .build()
                .unwrap();
            let bytes = snapshot_of(&filter);
            let info = inspect(&bytes[..]).unwrap_or_else(|e| panic!("{capacity}/{bits}: {e}"));
            assert_eq!(info.built_for, capacity as u64);
            let restored = read(&bytes).unwrap_or_else(|e| panic!("{capacity}/{bits}: {e}"));
            // A rebuild's filter has the restored one's settings under fresh keys.
            let (hasher, keys) = crate::filter::fresh_ahash().expect("the builder's hasher");
            let rebuilt = restored
                .sibling_hashed_by(capacity * 3 + 1, hasher, Some(keys))
                .unwrap();
            read(&snapshot_of(&rebuilt)).unwrap_or_else(|e| panic!("{capacity}/{bits}: {e}"));
        }
    }
    // Grown filters: the grown tables nest over the base table the capacity sized.
    for (capacity, factor) in [(1, 2), (7, 2), (100, 4), (1_000, 16)] {
        let filter = CuckooFilter::builder()
            .capacity(capacity)
            .growth(Growth::Expand {
                factor,
                max_steps: 4,
            })
            .seed(3)
            .build()
            .unwrap();
        let mut k = 0u64;
        while filter.growth_steps() < 2 {
            filter.insert(&k).unwrap();
            k += 1;
        }
        let restored = read(&snapshot_of(&filter)).unwrap();
        assert_eq!(restored.growth_steps(), filter.growth_steps());
        assert_eq!(restored.built_for(), capacity);
    }
}

#[test]
fn a_capacity_its_base_table_does_not_bear_out_is_refused() {
    let bytes = snapshot_of(&filled(10, |b| b.capacity(100)));
    let base = u64::from_le_bytes(bytes[24..32].try_into().unwrap());
    // A tiny file claiming 100 million keys, one claiming the largest capacity, and the
    // nearest capacities whose base tables differ from this one's.
    let lies = [
        100_000_000u64,
        crate::sizing::max_capacity(4) as u64,
        60,
        200,
    ];
    for built_for in lies {
        let mut lying = bytes.clone();
        lying[32..40].copy_from_slice(&built_for.to_le_bytes());
        reseal_header(&mut lying);
        match read(&lying) {
            Err(SnapshotError::CapacityMismatch {
                built_for: b,
                base_buckets,
            }) => assert_eq!((b, base_buckets), (built_for, base)),
            other => panic!("built for {built_for}: {other:?}"),
        }
        assert!(matches!(
            inspect(&lying[..]),
            Err(SnapshotError::CapacityMismatch { .. })
        ));
    }
    // A capacity of the same base table is what the builder may have been given.
    let other = (50..200u64)
        .find(|&c| c != 100 && crate::sizing::buckets_for(c as usize, 4) == Some(base as usize))
        .expect("capacities near 100 share its base table");
    let mut same = bytes.clone();
    same[32..40].copy_from_slice(&other.to_le_bytes());
    reseal_header(&mut same);
    reseal_body(&mut same, base as usize);
    assert_eq!(read(&same).unwrap().built_for(), other as usize);
}

#[test]
fn every_truncation_is_refused() {
    let bytes = snapshot_of(&filled(40, |b| b.capacity(30)));
    assert!(read(&bytes).is_ok());
    for len in 0..bytes.len() {
        match read(&bytes[..len]) {
            Err(SnapshotError::Truncated) => {}
            other => panic!("truncated to {len} of {} bytes: {other:?}", bytes.len()),
        }
    }
}

#[test]
fn every_single_bit_flip_is_refused() {
    let bytes = snapshot_of(&filled(40, |b| b.capacity(30)));
    for bit in 0..bytes.len() * 8 {
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        let result = read(&flipped);
        let expected = match bit / 8 {
            0..=7 => matches!(result, Err(SnapshotError::BadMagic)),
            // Version 3 with bit 0 flipped is version 2, which this build also reads.
            8 | 9 => matches!(
                result,
                Err(SnapshotError::UnsupportedVersion { .. } | SnapshotError::HeaderChecksum)
            ),
            10..=95 => matches!(result, Err(SnapshotError::HeaderChecksum)),
            // An unsealed snapshot's MAC is all zeros.
            96..=127 => matches!(result, Err(SnapshotError::InvalidHeader { field: "MAC" })),
            _ => matches!(result, Err(SnapshotError::BodyChecksum)),
        };
        assert!(expected, "bit {bit}: {:?}", result.map(|f| f.len()));
    }
}

#[test]
fn a_file_with_trailing_bytes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.cgsnap");
    let filter = filled(10, |b| b.capacity(100));
    filter.write_snapshot_file(&path).unwrap();
    assert!(CuckooFilter::read_snapshot_file(&path).is_ok());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.push(0);
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        CuckooFilter::read_snapshot_file(&path),
        Err(SnapshotError::TrailingData)
    ));
}

#[cfg(unix)]
#[test]
fn a_snapshot_file_is_private_even_over_a_public_one() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.cgsnap");
    std::fs::write(&path, b"old").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    filled(10, |b| b.capacity(100))
        .write_snapshot_file(&path)
        .unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "the temporary file is gone");
}

#[test]
fn a_failed_file_write_leaves_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing_dir = dir.path().join("no/such/dir/f.cgsnap");
    let filter = filled(10, |b| b.capacity(100));
    assert!(matches!(
        filter.write_snapshot_file(&missing_dir),
        Err(SnapshotError::Io(_))
    ));
    assert!(matches!(
        filter.write_snapshot_file(dir.path().join("..")),
        Err(SnapshotError::Io(_))
    ));
}

/// The body offsets of a one-table snapshot of `buckets` 8-byte words: where its extras
/// count is.
fn extras_offset(buckets: usize) -> usize {
    HEADER_LEN + buckets * 8
}

/// `bytes` (a one-table, 16-bit snapshot) with `extras` appended to its table and its
/// item count and checksum rewritten.
fn with_extras(bytes: &[u8], buckets: usize, extras: &[(u64, u64)]) -> Vec<u8> {
    let at = extras_offset(buckets);
    let old = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    assert_eq!(old, 0);
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(&(extras.len() as u64).to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    for &(bucket, fp) in extras {
        out.extend_from_slice(&(bucket | fp << 32).to_le_bytes());
    }
    let items = u64::from_le_bytes(bytes[at + 16..at + 24].try_into().unwrap());
    out.extend_from_slice(&(items + extras.len() as u64).to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    reseal_body(&mut out, buckets);
    out
}

#[test]
fn extras_are_put_back_and_checked() {
    let filter = filled(0, |b| b.capacity(100).growth(Growth::Fixed));
    let buckets = filter.tables().base().num_buckets();
    let bytes = snapshot_of(&filter);
    // A key's copy carried as an extra in its primary bucket is found after loading.
    let hash = filter.hasher().hash_one(77u64);
    let fp = crate::fingerprint::fingerprint::<crate::fingerprint::Fp15>(hash);
    let primary = crate::fingerprint::primary_index(hash, buckets as u64);
    let loaded = read(&with_extras(&bytes, buckets, &[(primary, fp)])).unwrap();
    assert!(loaded.contains(&77u64));
    assert_eq!(loaded.len(), 1);

    for (extra, what) in [
        ((buckets as u64, 1), "an extra names no bucket"),
        ((0, 0), "an extra names no bucket"),
        ((0, 1 << 16), "an extra names no bucket"),
        ((0, 1 << 15), "an extra names no bucket"),
    ] {
        match read(&with_extras(&bytes, buckets, &[extra])) {
            Err(SnapshotError::InvalidBody { what: w }) => assert!(w.starts_with(what), "{w}"),
            other => panic!("{extra:?}: {:?}", other.map(|f| f.len())),
        }
    }
}

#[test]
fn extras_that_find_no_room_refuse_the_snapshot() {
    // Fill a fixed filter, then carry nine more copies of one fingerprint into one pair:
    // its two buckets hold eight, and no path helps a ninth.
    let filter = filled(0, |b| b.capacity(8).growth(Growth::Fixed).max_path_len(1));
    let buckets = filter.tables().base().num_buckets();
    let extras = vec![(0, 5); 9];
    assert!(matches!(
        read(&with_extras(&snapshot_of(&filter), buckets, &extras)),
        Err(SnapshotError::Overfull)
    ));
    let eight = read(&with_extras(&snapshot_of(&filter), buckets, &extras[..8])).unwrap();
    assert_eq!(eight.len(), 8);
}

/// The words of `filter`'s base table.
fn base_words(filter: &CuckooFilter) -> Vec<u64> {
    let mut words = Vec::new();
    filter
        .tables()
        .base()
        .copy_out(1024, |chunk| {
            words.extend_from_slice(chunk);
            Ok::<(), ()>(())
        })
        .unwrap();
    words
}

/// A fixed filter of the plain 16-bit layout (as format 2 wrote the 16-bit class) holding
/// keys `0..keys`, hashed as `filled`'s filters are.
fn plain_16_bit(capacity: usize, keys: u64) -> CuckooFilter {
    let template = filled(0, |b| b.capacity(capacity).growth(Growth::Fixed));
    let buckets = template.tables().base().num_buckets();
    let base = Table::new(Width::Fp16, buckets, template.max_path_len(), 0).unwrap();
    let filter = CuckooFilter::from_parts(
        template.hasher().clone(),
        template.hash_keys(),
        template.built_for(),
        Tables::new(base, 0, 0),
    );
    for k in 0..keys {
        filter.insert(&k).unwrap();
    }
    filter
}

/// `bytes` (a one-table snapshot of `buckets` 8-byte words) rewritten as format `version`.
fn as_version(bytes: &[u8], buckets: usize, version: u16) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[8..10].copy_from_slice(&version.to_le_bytes());
    reseal_header(&mut out);
    reseal_body(&mut out, buckets);
    out
}

#[test]
fn a_format_2_file_of_plain_16_bit_fingerprints_loads_as_plain_16_bit() {
    let keys = 9_000;
    let filter = plain_16_bit(10_000, keys);
    let buckets = filter.tables().base().num_buckets();
    let words = base_words(&filter);
    assert!(
        words.iter().any(|w| w & 0x8000_8000_8000_8000 != 0),
        "no fingerprint uses its 16th bit"
    );
    let v3 = snapshot_of(&filter);
    assert_eq!(v3[8..10], 3u16.to_le_bytes());
    assert_eq!(v3[10], 16);
    let v2 = as_version(&v3, buckets, 2);
    let info = inspect(&v2[..]).unwrap();
    assert_eq!(info.format_version, 2);
    assert_eq!(info.fingerprint_bits, 16);
    assert!(!info.overflow_bits);
    assert!(info.body.is_ok());
    let loaded = read(&v2).unwrap();
    assert_eq!(loaded.tables().base().width(), Width::Fp16);
    assert_eq!(base_words(&loaded), words);
    assert_eq!(loaded.len(), filter.len());
    assert!((0..keys).all(|k| loaded.contains(&k)), "a key went missing");
    assert_eq!(loaded.overflow_share(), 0.0);
    // It keeps working, in its own layout, and writes format 3 again.
    for k in keys..keys + 400 {
        loaded.insert(&k).unwrap();
    }
    assert!((0..keys + 400).all(|k| loaded.contains(&k)));
    let again = snapshot_of(&loaded);
    assert_eq!(
        (again[8..10].to_vec(), again[10]),
        (3u16.to_le_bytes().to_vec(), 16)
    );
}

#[test]
fn a_format_2_file_of_8_bit_fingerprints_still_loads() {
    let filter = filled(3_000, |b| {
        b.capacity(4_000).fingerprint_bits(8).growth(Growth::Fixed)
    });
    let buckets = filter.tables().base().num_buckets();
    let v3 = snapshot_of(&filter);
    assert_eq!(v3[10], 8);
    // 4-byte words: the extras count follows the words at half the 16-bit offset.
    let mut v2 = v3.clone();
    v2[8..10].copy_from_slice(&2u16.to_le_bytes());
    reseal_header(&mut v2);
    let seed = u64::from_le_bytes(v2[88..96].try_into().unwrap());
    let at = HEADER_LEN + buckets * 4 + 8;
    let checkpoint = xxh64(&v2[HEADER_LEN..at], seed);
    v2[at..at + 8].copy_from_slice(&checkpoint.to_le_bytes());
    let end = v2.len() - 8;
    let checksum = xxh64(&v2[HEADER_LEN..end], seed);
    v2[end..].copy_from_slice(&checksum.to_le_bytes());
    assert!(!inspect(&v2[..]).unwrap().overflow_bits);
    let loaded = read(&v2).unwrap();
    assert_eq!(loaded.tables().base().width(), Width::Fp8);
    assert_eq!(base_words(&loaded), base_words(&filter));
    assert!((0..3_000u64).all(|k| loaded.contains(&k)));
}

#[test]
fn a_default_file_is_format_3_with_15_bit_fingerprints_and_overflow_bits() {
    let filter = filled(5_000, |b| b.capacity(10_000).growth(Growth::Fixed));
    assert_eq!(filter.tables().base().width(), Width::Fp15);
    let buckets = filter.tables().base().num_buckets();
    let bytes = snapshot_of(&filter);
    assert_eq!(bytes[8..10], 3u16.to_le_bytes());
    assert_eq!(bytes[10], 15);
    let info = inspect(&bytes[..]).unwrap();
    assert_eq!(info.format_version, 3);
    // The class, as the filter reports it; byte 10 holds the fingerprint's bits.
    assert_eq!(info.fingerprint_bits, 16);
    assert!(info.overflow_bits);
    // Format 2 had no 15-bit layout.
    match read(&as_version(&bytes, buckets, 2)) {
        Err(SnapshotError::InvalidHeader { field }) => assert_eq!(field, "fingerprint width"),
        other => panic!("{:?}", other.map(|f| f.len())),
    }
    assert!(matches!(
        inspect(&as_version(&bytes, buckets, 2)[..]),
        Err(SnapshotError::InvalidHeader {
            field: "fingerprint width"
        })
    ));
}

#[test]
fn a_filled_15_bit_table_keeps_its_overflow_bits() {
    let keys = 9_400;
    let filter = filled(keys, |b| b.capacity(10_000).growth(Growth::Fixed));
    // Removes after the fill: bits that stand for no copy now, which the file keeps too.
    for k in (0..keys).step_by(3) {
        assert!(filter.remove(&k));
    }
    let words = base_words(&filter);
    let overflow = 0x8000_8000_8000_8000u64;
    let marked = words.iter().filter(|&&w| w & overflow != 0).count();
    assert!(
        marked > words.len() / 10,
        "{marked} of {} words marked",
        words.len()
    );
    let loaded = read(&snapshot_of(&filter)).unwrap();
    assert_eq!(loaded.tables().base().width(), Width::Fp15);
    assert_eq!(base_words(&loaded), words);
    assert_eq!(loaded.overflow_share(), filter.overflow_share());
    assert!((0..keys)
        .filter(|k| k % 3 != 0)
        .all(|k| loaded.contains(&k)));
    assert_eq!(loaded.len(), filter.len());
}

// ---------------------------------------------------------------------------------------
// Straddling writers, forced from the copier's own sink between chunks: the copier has read
// the chunks before, and nothing after.
// ---------------------------------------------------------------------------------------

/// A fingerprint whose alternate of `from` is `to` in a flat table of `buckets` buckets.
fn fp_linking(from: usize, to: usize, buckets: usize) -> u64 {
    (1..=0xFFFFu64)
        .find(|&fp| {
            crate::fingerprint::alternate_index(from as u64, fp, buckets as u64) == to as u64
        })
        .expect("some fingerprint links the two buckets")
}

type Raw = crate::table::RawTable<crate::fingerprint::Fp16>;

/// Copies `t` in chunks of 8 buckets, running `between` once after the first chunk, and
/// returns the words read with the extras.
fn copy_with(t: &Raw, between: impl FnOnce(&Raw)) -> (Vec<u64>, Vec<Extra>) {
    let mut words = Vec::new();
    let mut between = Some(between);
    let extras = t
        .copy_out(8, |chunk| {
            words.extend_from_slice(chunk);
            if let Some(f) = between.take() {
                f(t);
            }
            Ok::<(), ()>(())
        })
        .unwrap();
    (words, extras)
}

fn copies_in(words: &[u64], extras: &[Extra], bucket: usize, other: usize, fp: u64) -> usize {
    let in_word = |w: u64| (0..4).filter(|&j| (w >> (16 * j)) & 0xFFFF == fp).count();
    let in_extras = extras
        .iter()
        .filter(|e| e.fp == fp && (e.bucket == bucket || e.bucket == other))
        .count();
    in_word(words[bucket]) + in_word(words[other]) + in_extras
}

#[test]
fn a_hop_across_the_copy_leaves_an_extra() {
    let t = Raw::new(64, 5).unwrap();
    let fp = fp_linking(40, 3, 64);
    t.set_slot(40, 0, fp);
    let (words, extras) = copy_with(&t, |t| {
        assert!(t.displace(Hop {
            from: 40,
            slot: 0,
            fp,
            to: 3
        }));
    });
    assert_eq!(extras, vec![Extra { bucket: 3, fp }]);
    assert_eq!(copies_in(&words, &extras, 3, 40, fp), 1);
}

#[test]
fn a_hop_the_copy_has_not_reached_or_has_passed_leaves_none() {
    // Both buckets ahead of the copy.
    let t = Raw::new(64, 5).unwrap();
    let fp = fp_linking(40, 30, 64);
    t.set_slot(40, 0, fp);
    let (words, extras) = copy_with(&t, |t| {
        assert!(t.displace(Hop {
            from: 40,
            slot: 0,
            fp,
            to: 30
        }))
    });
    assert!(extras.is_empty());
    assert_eq!(copies_in(&words, &extras, 30, 40, fp), 1);
    // Both behind it.
    let t = Raw::new(64, 5).unwrap();
    let fp = fp_linking(2, 5, 64);
    t.set_slot(2, 0, fp);
    let (words, extras) = copy_with(&t, |t| {
        assert!(t.displace(Hop {
            from: 2,
            slot: 0,
            fp,
            to: 5
        }))
    });
    assert!(extras.is_empty());
    assert_eq!(copies_in(&words, &extras, 2, 5, fp), 1);
}

#[test]
fn a_colliding_insert_then_remove_across_the_copy_takes_the_read_copy() {
    // Key k's copy sits in bucket 40 (not yet read); a colliding key x puts its copy into
    // bucket 3 (read). x's remove finds copies in both and takes the one in bucket 3, which
    // the copier has read: k's copy stays in 40, read later, and nothing is logged.
    let t = Raw::new(64, 5).unwrap();
    let fp = fp_linking(40, 3, 64);
    let k = t.probe_at(40, fp);
    t.insert(k, false).unwrap();
    for slot in 1..4 {
        // Fill 40 so that x's plain insert goes to bucket 3.
        t.set_slot(40, slot, fp_linking(40, 50 + slot, 64));
    }
    let (words, extras) = copy_with(&t, |t| {
        t.insert(k, false).unwrap();
        assert!(t.remove(k));
    });
    assert!(extras.is_empty());
    assert_eq!(
        copies_in(&words, &extras, 3, 40, fp),
        1,
        "k is in the snapshot once"
    );
    assert_eq!(t.count(k), 1);
}

#[test]
fn a_remove_with_no_copy_left_in_the_read_bucket_leaves_none() {
    let t = Raw::new(64, 5).unwrap();
    let fp = fp_linking(40, 3, 64);
    let k = t.probe_at(40, fp);
    t.insert(k, false).unwrap();
    let (words, extras) = copy_with(&t, |t| assert!(t.remove(k)));
    assert!(extras.is_empty());
    assert_eq!(copies_in(&words, &extras, 3, 40, fp), 0);
}

#[test]
fn no_copy_running_means_no_extras_are_kept() {
    let t = Raw::new(64, 5).unwrap();
    let fp = fp_linking(40, 3, 64);
    t.set_slot(40, 0, fp);
    assert!(t.displace(Hop {
        from: 40,
        slot: 0,
        fp,
        to: 3
    }));
    let (_, extras) = copy_with(&t, |_| {});
    assert!(extras.is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn random_bytes_are_refused_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        prop_assert!(read(&bytes).is_err());
        let _ = inspect(&bytes[..]);
    }

    #[test]
    fn a_valid_header_over_random_bytes_is_refused(
        tail in proptest::collection::vec(any::<u8>(), 0..2_000),
    ) {
        let bytes = snapshot_of(&filled(20, |b| b.capacity(30)));
        let mut forged = bytes[..HEADER_LEN].to_vec();
        forged.extend_from_slice(&tail);
        prop_assert!(read(&forged).is_err());
        let _ = inspect(&forged[..]);
    }

    #[test]
    fn scattered_damage_is_refused(
        damage in proptest::collection::vec((any::<prop::sample::Index>(), 1..=255u8), 1..8),
    ) {
        let bytes = snapshot_of(&filled(30, |b| b.capacity(20)));
        let mut damaged = bytes.clone();
        for (at, x) in &damage {
            damaged[at.index(bytes.len())] ^= x;
        }
        prop_assume!(damaged != bytes);
        prop_assert!(read(&damaged).is_err());
    }
}

/// `filter` sealed with `secret` into a file in `dir`; its bytes.
fn sealed_bytes(dir: &Path, filter: &CuckooFilter, secret: &SealSecret) -> Vec<u8> {
    let path = dir.join("sealed.cgsnap");
    write_file(filter, &path, Some(secret)).unwrap();
    fs::read(&path).unwrap()
}

/// Loads the snapshot `bytes` as a restart does, under `secret`.
fn load_sealed(
    dir: &Path,
    bytes: &[u8],
    secret: &SealSecret,
) -> Result<CuckooFilter, SnapshotError> {
    let path = dir.join("load.cgsnap");
    fs::write(&path, bytes).unwrap();
    SealedFile::new(File::open(&path).unwrap())?.load(secret)
}

#[test]
fn a_sealed_file_loads_only_under_its_secret() {
    let dir = tempfile::tempdir().unwrap();
    let filter = filled(100, |b| b.capacity(1_000));
    let secret = SealSecret::from_bytes([3; 32]);
    let bytes = sealed_bytes(dir.path(), &filter, &secret);
    assert_eq!(&bytes[80..88], &secret.id().to_le_bytes());
    assert_ne!(&bytes[MAC_AT..HEADER_LEN], &[0; MAC_LEN]);
    let loaded = load_sealed(dir.path(), &bytes, &secret).unwrap();
    assert_same(&filter, &loaded, 100);
    // The unkeyed reader reads it too (it checks no MAC), and inspect shows the seal id.
    assert_same(
        &filter,
        &CuckooFilter::read_snapshot(&bytes[..]).unwrap(),
        100,
    );
    assert_eq!(inspect(&bytes[..]).unwrap().tag, secret.id());

    let other = SealSecret::from_bytes([4; 32]);
    assert!(matches!(
        load_sealed(dir.path(), &bytes, &other),
        Err(SnapshotError::NotAuthentic)
    ));
    // An unsealed file (id and MAC 0) is never authentic.
    assert!(matches!(
        load_sealed(dir.path(), &snapshot_of(&filter), &secret),
        Err(SnapshotError::NotAuthentic)
    ));
    // The MAC covers the bytes after the snapshot too; the parse refuses them anyway.
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        load_sealed(dir.path(), &longer, &secret),
        Err(SnapshotError::NotAuthentic)
    ));
}

#[test]
fn a_sealed_file_is_checked_by_its_mac_before_its_body() {
    let dir = tempfile::tempdir().unwrap();
    let secret = SealSecret::from_bytes([5; 32]);
    let bytes = sealed_bytes(dir.path(), &filled(40, |b| b.capacity(30)), &secret);
    for bit in 0..bytes.len() * 8 {
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        let result = load_sealed(dir.path(), &flipped, &secret);
        let expected = match bit / 8 {
            0..=7 => matches!(result, Err(SnapshotError::BadMagic)),
            // Version 3 with bit 0 flipped is version 2, which this build also reads.
            8 | 9 => matches!(
                result,
                Err(SnapshotError::UnsupportedVersion { .. } | SnapshotError::HeaderChecksum)
            ),
            10..=95 => matches!(result, Err(SnapshotError::HeaderChecksum)),
            // The MAC itself and every byte of the body: refused by the MAC, before the body's
            // checksums are looked at.
            _ => matches!(result, Err(SnapshotError::NotAuthentic)),
        };
        assert!(expected, "bit {bit}: {:?}", result.map(|f| f.len()));
    }
}
