//! The SQLite adapter against a real SQLite database file: the conformance suite, schema and
//! error handling, and the guard under concurrent writers and readers.
#![cfg(feature = "sqlite")]

mod common;

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
