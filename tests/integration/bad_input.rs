//! Bad input, enumerated: each case gets its own error (printed here), never a panic and
//! never a guard that misses a key. The drill's command-line values are in `cli/tests/cli.rs`
//! (`bad_input_gets_one_line_and_exit_code_2`).
#![cfg(all(feature = "sqlite", feature = "postgres", feature = "redis"))]

use crate::common;

use cuckoo_guard::guard::{CacheGuard, GuardError, MemoryStore, PolicyError, RebuildPolicy};
use cuckoo_guard::stores::{
    PostgresStore, PostgresStoreError, RedisStore, RedisStoreError, SqliteStore, SqliteStoreError,
};
use cuckoo_guard::{BuildError, CuckooFilter, Displacement};

fn case<T, E: std::fmt::Display>(name: &str, result: Result<T, E>) -> E {
    match result {
        Ok(_) => panic!("{name}: accepted"),
        Err(error) => {
            println!("{name:<48} -> {error}");
            error
        }
    }
}

/// A builder case: its name, what `build` returned, the error it must be.
type BuilderCase = (
    &'static str,
    Result<CuckooFilter, BuildError>,
    fn(&BuildError) -> bool,
);

#[test]
fn builder_parameters() {
    let b = CuckooFilter::builder;
    let cases: Vec<BuilderCase> = vec![
        ("no capacity", b().build(), |e| {
            matches!(e, BuildError::CapacityNotSet)
        }),
        ("capacity 0", b().capacity(0).build(), |e| {
            matches!(e, BuildError::ZeroCapacity)
        }),
        (
            "capacity usize::MAX",
            b().capacity(usize::MAX).build(),
            |e| matches!(e, BuildError::CapacityTooLarge { .. }),
        ),
        (
            "capacity 2^36 (over 2^32 buckets)",
            b().capacity(1 << 36).build(),
            |e| matches!(e, BuildError::CapacityTooLarge { .. }),
        ),
        (
            "false-positive rate NaN",
            b().capacity(10).false_positive_rate(f64::NAN).build(),
            |e| matches!(e, BuildError::InvalidFalsePositiveRate { .. }),
        ),
        (
            "false-positive rate 0",
            b().capacity(10).false_positive_rate(0.0).build(),
            |e| matches!(e, BuildError::InvalidFalsePositiveRate { .. }),
        ),
        (
            "false-positive rate 1",
            b().capacity(10).false_positive_rate(1.0).build(),
            |e| matches!(e, BuildError::InvalidFalsePositiveRate { .. }),
        ),
        (
            "false-positive rate -0.5",
            b().capacity(10).false_positive_rate(-0.5).build(),
            |e| matches!(e, BuildError::InvalidFalsePositiveRate { .. }),
        ),
        (
            "false-positive rate infinity",
            b().capacity(10).false_positive_rate(f64::INFINITY).build(),
            |e| matches!(e, BuildError::InvalidFalsePositiveRate { .. }),
        ),
        (
            "false-positive rate 1e-300",
            b().capacity(10).false_positive_rate(1e-300).build(),
            |e| matches!(e, BuildError::UnachievableFalsePositiveRate { .. }),
        ),
        (
            "fingerprint bits 0",
            b().capacity(10).fingerprint_bits(0).build(),
            |e| matches!(e, BuildError::UnsupportedFingerprintBits { .. }),
        ),
        (
            "fingerprint bits 64",
            b().capacity(10).fingerprint_bits(64).build(),
            |e| matches!(e, BuildError::UnsupportedFingerprintBits { .. }),
        ),
        (
            "8 bits for a 0.01% rate",
            b().capacity(10)
                .fingerprint_bits(8)
                .false_positive_rate(1e-4)
                .build(),
            |e| matches!(e, BuildError::FingerprintBitsTooFewForRate { .. }),
        ),
        (
            "max path 0",
            b().capacity(10).max_path_len(0).build(),
            |e| matches!(e, BuildError::InvalidMaxPathLen { .. }),
        ),
        (
            "max path usize::MAX",
            b().capacity(10).max_path_len(usize::MAX).build(),
            |e| matches!(e, BuildError::InvalidMaxPathLen { .. }),
        ),
        (
            "random walk with 0 kicks",
            b().capacity(10)
                .displacement(Displacement::RandomWalk { max_kicks: 0 })
                .build(),
            |e| matches!(e, BuildError::InvalidMaxKicks { .. }),
        ),
    ];
    for (name, result, expected) in cases {
        let error = case(name, result);
        assert!(expected(&error), "{name}: {error:?}");
    }
}

#[test]
fn rebuild_policy_parameters() {
    let p = RebuildPolicy::default;
    for (name, result) in [
        ("load threshold NaN", p().load_threshold(f64::NAN)),
        ("load threshold 0", p().load_threshold(0.0)),
        ("load threshold 1.5", p().load_threshold(1.5)),
        ("stale share -1", p().stale_share(-1.0)),
        ("stale share NaN", p().stale_share(f64::NAN)),
        ("headroom 0.5", p().headroom(0.5)),
        ("headroom infinity", p().headroom(f64::INFINITY)),
        ("page size 0", p().page_size(0)),
    ] {
        let error: PolicyError = case(name, result);
        assert!(!error.to_string().is_empty());
    }
}

/// Keys from 0 bytes to 4 MiB, through the filter and a guard over SQLite: each is found
/// after its create, and absent after its delete (or a false positive, never a miss).
#[test]
fn keys_from_empty_to_four_mebibytes() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::<String, i64>::builder(dir.path().join("keys.db"))
        .create_table_if_missing(true)
        .open()
        .unwrap();
    let guard = CacheGuard::new(CuckooFilter::with_capacity(100), store);
    guard.warm_up(10, |_| {}).unwrap();
    let keys: Vec<String> = [0usize, 1, 64, 4096, 1 << 20, 4 << 20]
        .iter()
        .map(|&len| "k".repeat(len))
        .collect();
    for key in &keys {
        guard.put(key, &(key.len() as i64)).unwrap();
    }
    for key in &keys {
        assert_eq!(
            guard.get(key).unwrap(),
            Some(key.len() as i64),
            "{}",
            key.len()
        );
    }
    for key in &keys {
        assert!(guard.delete(key).unwrap());
        assert_eq!(guard.get(key).unwrap(), None);
    }
    let filter = CuckooFilter::with_capacity(10);
    filter.insert(&[0u8; 0][..]).unwrap();
    assert!(filter.contains(&[0u8; 0][..]));
}

/// Warm-up page sizes of 0 and `usize::MAX`: a specific error for 0, a warm-up for the other.
#[test]
fn warm_up_page_sizes() {
    let store = MemoryStore::from_rows((0..100u32).map(|k| (k, ())));
    let guard = CacheGuard::new(CuckooFilter::with_capacity(100), store);
    let error = case("warm-up page size 0", guard.warm_up(0, |_| {}));
    assert!(matches!(error, GuardError::InvalidPageSize), "{error:?}");
    let done = guard.warm_up(usize::MAX, |_| {}).unwrap();
    assert_eq!(done.keys_loaded, 100);
    assert!((0..100).all(|k| guard.may_contain(&k)));
}

#[test]
fn store_tables_and_urls() {
    // SQLite: a key column of another type than the store's key.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typed.db");
    let connection = rusqlite::Connection::open(&path).unwrap();
    connection
        .execute_batch(
            "CREATE TABLE rows (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
             INSERT INTO rows VALUES ('not a number', 'x');",
        )
        .unwrap();
    drop(connection);
    let store = SqliteStore::<i64, String>::builder(&path).open().unwrap();
    let guard = CacheGuard::new(CuckooFilter::with_capacity(10), store);
    let error = case(
        "SQLite text keys read as integers",
        guard.warm_up(10, |_| {}),
    );
    assert!(
        matches!(error, GuardError::Store(SqliteStoreError::Statement { .. })),
        "{error:?}"
    );
    assert!(guard.is_warming(), "a failed warm-up keeps passing lookups");
    let error = case(
        "SQLite file in a missing directory",
        SqliteStore::<i64, String>::builder(dir.path().join("no/such/dir/x.db")).open(),
    );
    assert!(matches!(error, SqliteStoreError::Open { .. }), "{error:?}");

    let runtime = common::runtime();
    runtime.block_on(async {
        for (name, url) in [
            (
                "PostgreSQL port 99999",
                "postgres://postgres@127.0.0.1:99999/test",
            ),
            (
                "PostgreSQL port 1 (closed)",
                "postgres://postgres@127.0.0.1:1/test",
            ),
            ("PostgreSQL not a URL", "postgres://[::1"),
            (
                "PostgreSQL unknown user",
                "postgres://no_such_user_cg@127.0.0.1:5432/test",
            ),
            (
                "PostgreSQL unknown database",
                "postgres://postgres@127.0.0.1:5432/no_such_db_cg",
            ),
        ] {
            let error = case(
                name,
                PostgresStore::<i64, String>::builder(url).connect().await,
            );
            assert!(
                matches!(error, PostgresStoreError::Connect { .. }),
                "{name}: {error:?}"
            );
        }
        for (name, url) in [
            ("Redis port 99999", "redis://127.0.0.1:99999"),
            ("Redis port 1 (closed)", "redis://127.0.0.1:1"),
            ("Redis not a URL", "redis//127.0.0.1"),
            (
                "Redis wrong password",
                "redis://:wrong_password@127.0.0.1:6379",
            ),
        ] {
            let error = case(name, RedisStore::<String, String>::connect(url, "cg").await);
            assert!(
                matches!(error, RedisStoreError::Connect { .. }),
                "{name}: {error:?}"
            );
        }
    });
}

/// A store builder's `Debug` never shows its URL, which may hold a password.
#[test]
fn store_builders_debug_without_their_urls() {
    let secret = "S3cr?t#pw";
    let postgres = format!(
        "{:?}",
        PostgresStore::<i64, String>::builder(format!("postgres://app:{secret}@127.0.0.1/db"))
            .table("users")
    );
    let redis = format!(
        "{:?}",
        RedisStore::<String, String>::builder(format!("redis://:{secret}@127.0.0.1:6379"), "ns")
    );
    for shown in [&postgres, &redis] {
        assert!(!shown.contains("S3cr"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }
    assert!(postgres.contains("users"), "{postgres}");
    assert!(redis.contains("ns"), "{redis}");
}
