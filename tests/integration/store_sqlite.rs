//! The SQLite adapter against a real SQLite database file: the conformance suite, schema and
//! error handling, and the guard under concurrent writers and readers.
#![cfg(feature = "sqlite")]

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::Make;
#[cfg(feature = "tokio")]
use cuckoo_guard::guard::Blocking;
use cuckoo_guard::guard::{CacheGuard, GuardError, Store};
use cuckoo_guard::stores::{SqliteStore, SqliteStoreError};
use cuckoo_guard::CuckooFilter;

fn test_db(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("test.db")
}

fn open(dir: &tempfile::TempDir) -> SqliteStore<i64, String> {
    SqliteStore::builder(test_db(dir))
        .create_table_if_missing(true)
        .open()
        .unwrap()
}

/// The test's own connection to a store's file, beside the store's pool.
fn connect(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn
}

const INTEGER_KEYS: Make<i64, String> = Make {
    key: |k| k as i64,
    value: |v| format!("value {v}"),
};

#[test]
#[cfg(feature = "tokio")]
fn conformance_with_integer_keys() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(Blocking::new(open(&dir)));
    common::runtime().block_on(common::conformance(store, INTEGER_KEYS));
}

#[test]
#[cfg(feature = "tokio")]
fn conformance_with_text_keys_blob_values_and_awkward_names() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::<String, Vec<u8>>::builder(dir.path().join("names.db"))
        .table("user \"records\"; --")
        .key_column("e-mail")
        .value_column("select")
        .create_table_if_missing(true)
        .open()
        .unwrap();
    let make = Make {
        key: |k| format!("user{k:08}@example.com"),
        value: |v| v.to_le_bytes().to_vec(),
    };
    common::runtime().block_on(common::conformance(
        std::sync::Arc::new(Blocking::new(store)),
        make,
    ));
}

#[test]
#[cfg(feature = "tokio")]
fn sampling_through_the_blocking_bridge() {
    let dir = tempfile::tempdir().unwrap();
    let store = Blocking::new(open(&dir));
    assert!(cuckoo_guard::guard::AsyncStore::fast_sampling(&store));
    common::runtime().block_on(common::sampling(&store, INTEGER_KEYS));
}

/// Random rowids over a table with holes: every row is still drawn, and the sample keeps
/// to rows that exist.
#[test]
fn sampling_a_table_with_gaps_reaches_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    for k in 0..2_000 {
        store.put(&k, &format!("value {k}")).unwrap();
    }
    // Keep 40 rows (the key is the rowid): key 0, then each behind 1 to 77 missing rowids.
    let kept: Vec<i64> = (0..40i64).map(|i| i * (i + 1)).collect();
    for k in 0..2_000 {
        if !kept.contains(&k) {
            assert!(store.delete(&k).unwrap());
        }
    }
    assert!(store.fast_sampling());
    let rows: BTreeSet<i64> = kept.iter().copied().collect();
    let mut seen = BTreeSet::new();
    // The row behind the narrowest gap (key 0, 1 rowid of 1,561) is drawn with probability
    // about 3 * 1/1561 per sample of 3; it is missed by 20,000 samples with probability
    // about (1 - 3/1561)^20000, below 1e-16.
    for round in 1.. {
        let sample = store.sample_keys(3).unwrap();
        common::check_sample(&sample, 3, &rows);
        assert_eq!(sample.len(), 3);
        seen.extend(sample);
        if seen.len() == rows.len() {
            break;
        }
        assert!(
            round < 20_000,
            "never drew {:?}",
            rows.difference(&seen).collect::<Vec<_>>()
        );
    }
    assert_eq!(
        store.sample_keys(100).unwrap().len(),
        40,
        "every row when n exceeds them"
    );
}

/// A rowid table samples uniformly: 5,000 samples of 10 keys from 100 rows draw each key
/// 500 times on average (a binomial spread of about 21); each stays within 150 of that.
#[test]
fn sampling_a_dense_table_is_uniform() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    for k in 0..100 {
        store.put(&k, &format!("value {k}")).unwrap();
    }
    let mut counts = [0u32; 100];
    for _ in 0..5_000 {
        for k in store.sample_keys(10).unwrap() {
            counts[k as usize] += 1;
        }
    }
    for (k, count) in counts.iter().enumerate() {
        assert!(
            (350..=650).contains(count),
            "key {k} drawn {count} times, expected about 500: {counts:?}"
        );
    }
}

/// Tables without rowids the store can name are sampled by a full scan: a `WITHOUT ROWID`
/// table, and a table whose columns take all three rowid names. A table whose key column is
/// named `rowid` samples through `_rowid_`.
#[test]
fn tables_without_usable_rowids_sample_by_scan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shapes.db");
    connect(&path)
        .execute_batch(
            "CREATE TABLE plain (key INTEGER PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE nowid (key INTEGER PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
             CREATE TABLE named (rowid TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE taken (rowid TEXT UNIQUE NOT NULL, _rowid_ TEXT, oid TEXT,
                                 value TEXT NOT NULL);",
        )
        .unwrap();
    let numbered = |table: &str| {
        SqliteStore::<i64, String>::builder(&path)
            .table(table)
            .open()
            .unwrap()
    };
    let texts = |table: &str| {
        SqliteStore::<String, String>::builder(&path)
            .table(table)
            .key_column("rowid")
            .open()
            .unwrap()
    };
    let (plain, nowid) = (numbered("plain"), numbered("nowid"));
    let (named, taken) = (texts("named"), texts("taken"));
    assert!(plain.fast_sampling());
    assert!(!nowid.fast_sampling());
    assert!(named.fast_sampling());
    assert!(!taken.fast_sampling());
    assert_eq!(nowid.sample_keys(5).unwrap(), Vec::<i64>::new());
    assert_eq!(taken.sample_keys(5).unwrap(), Vec::<String>::new());
    for k in 0..300i64 {
        plain.put(&k, &"v".into()).unwrap();
        nowid.put(&k, &"v".into()).unwrap();
        named.put(&format!("k{k}"), &"v".into()).unwrap();
        taken.put(&format!("k{k}"), &"v".into()).unwrap();
    }
    let numbers: BTreeSet<i64> = (0..300).collect();
    let names: BTreeSet<String> = (0..300).map(|k| format!("k{k}")).collect();
    for _ in 0..20 {
        for sample in [
            plain.sample_keys(30).unwrap(),
            nowid.sample_keys(30).unwrap(),
        ] {
            common::check_sample(&sample, 30, &numbers);
            assert_eq!(sample.len(), 30);
        }
        for sample in [
            named.sample_keys(30).unwrap(),
            taken.sample_keys(30).unwrap(),
        ] {
            common::check_sample(&sample, 30, &names);
            assert_eq!(sample.len(), 30);
        }
    }
}

#[test]
#[cfg(feature = "tokio")]
fn errors_surface_when_the_table_disappears() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    connect(&test_db(&dir))
        .execute_batch("DROP TABLE rows")
        .unwrap();
    common::runtime().block_on(common::errors_surface(&Blocking::new(store), 1, "x".into()));
}

#[test]
fn schema_problems_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("schema.db");
    let builder = || SqliteStore::<i64, String>::builder(&path);
    let missing = builder().table("nope").open().unwrap_err();
    assert!(
        matches!(missing, SqliteStoreError::MissingTable { .. }),
        "{missing}"
    );
    assert_eq!(missing.to_string(), "SQLite table \"nope\" does not exist");

    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE loose (key INTEGER, value TEXT);
         CREATE TABLE keyed (id INTEGER PRIMARY KEY, value TEXT);
         CREATE TABLE indexed (key INTEGER NOT NULL, value TEXT NOT NULL);
         CREATE UNIQUE INDEX indexed_key ON indexed (key);",
    )
    .unwrap();
    let no_column = builder().table("keyed").open().unwrap_err();
    assert!(
        matches!(no_column, SqliteStoreError::MissingColumn { .. }),
        "{no_column}"
    );
    let not_unique = builder().table("loose").open().unwrap_err();
    assert!(
        matches!(not_unique, SqliteStoreError::KeyNotUnique { .. }),
        "{not_unique}"
    );
    assert!(builder().table("keyed").key_column("id").open().is_ok());
    assert!(
        builder().table("indexed").open().is_ok(),
        "a unique index is enough"
    );

    let unopenable = SqliteStore::<i64, String>::builder(dir.path().join("no/such/dir/db"))
        .open()
        .unwrap_err();
    assert!(
        matches!(unopenable, SqliteStoreError::Open { .. }),
        "{unopenable}"
    );
}

#[test]
fn a_rejected_write_is_definite_and_the_guard_drops_its_copy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("check.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE rows (key INTEGER PRIMARY KEY, value TEXT NOT NULL CHECK (length(value) < 5))",
        )
        .unwrap();
    let store = SqliteStore::<i64, String>::builder(&path).open().unwrap();
    let error = store.put(&1, &"far too long".into()).unwrap_err();
    assert!(
        matches!(error, SqliteStoreError::Statement { .. }),
        "{error}"
    );
    assert!(!SqliteStore::<i64, String>::write_outcome_unknown(&error));

    let guard = CacheGuard::new(CuckooFilter::with_capacity(100), store);
    guard.warm_up(10, |_| {}).unwrap();
    assert!(matches!(
        guard.put(&2, &"far too long".into()),
        Err(GuardError::Store(_))
    ));
    assert_eq!(
        guard.filter().len(),
        0,
        "a rejected create left its copy in the filter"
    );
    guard.put(&2, &"ok".into()).unwrap();
    // An update rejected by the CHECK: the key stays, and so does its one copy.
    assert!(guard.put(&2, &"far too long".into()).is_err());
    assert_eq!(guard.get(&2).unwrap().as_deref(), Some("ok"));
    assert_eq!(guard.filter().count(&2), 1);
}

#[test]
fn warm_up_loads_existing_rows_and_then_blocks_misses() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut conn = connect(&test_db(&dir));
    let tx = conn.transaction().unwrap();
    for k in 0..20_500i64 {
        tx.execute(
            "INSERT INTO rows (key, value) VALUES (?1, ?2)",
            (k, format!("v{k}")),
        )
        .unwrap();
    }
    tx.commit().unwrap();
    let guard = CacheGuard::new(CuckooFilter::with_capacity(20_500), store);
    let mut pages = 0;
    let done = guard.warm_up(1_000, |_| pages += 1).unwrap();
    // 20 full pages, then a partial last one.
    assert_eq!((done.keys_loaded, pages), (20_500, 21));
    assert!((0..20_500i64).all(|k| guard.may_contain(&k)));
    for k in 100_000..110_000i64 {
        assert_eq!(guard.get(&k).unwrap(), None);
    }
    let stats = guard.stats();
    assert!(
        stats.false_positives < 20,
        "{} of 10,000 misses reached SQLite",
        stats.false_positives
    );
}

#[test]
fn the_guard_stays_exact_under_concurrent_writers_and_readers() {
    let dir = tempfile::tempdir().unwrap();
    let guard = CacheGuard::new(CuckooFilter::with_capacity(5_000), open(&dir));
    let (checked, present) = common::guard_concurrency_sync(&guard, INTEGER_KEYS, 5_000, 5_000);
    let rows: i64 = connect(guard.store().path())
        .query_row("SELECT count(*) FROM rows", [], |r| r.get(0))
        .unwrap();
    println!("sqlite: {checked} lookups of present keys checked; {rows} rows at the end");
    assert!(checked > 100, "too few lookups checked: {checked}");
    assert_eq!(rows as usize, present);
    assert_eq!(
        guard.filter().len(),
        present,
        "filter length differs from the row count"
    );
}
