//! Batch lookups (`admit_many`, `get_many`) through both guards against the real stores: the
//! answers match key-by-key lookups in the batch's order, keys the filter rules out never
//! reach the store, the admitted rest go in one store call, a create that returned before the
//! batch began is found, the memo answers replayed false positives, and a store that answers
//! for the wrong number of keys is asked key by key.
#![cfg(all(feature = "postgres", feature = "sqlite", feature = "redis"))]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::counted::Counted;
use cuckoo_guard::guard::{Admission, AsyncCacheGuard, AsyncStore, CacheGuard, MemoryStore, Store};
use cuckoo_guard::stores::{PostgresStore, RedisStore, SqliteStore};
use cuckoo_guard::CuckooFilter;

/// Rows 0, 2, 4, ... below this.
const ROWS: i64 = 200;

fn value(k: i64) -> String {
    format!("row {k}")
}

/// The rows every test seeds: the even keys below `ROWS`.
fn seeded() -> impl Iterator<Item = (i64, String)> {
    (0..ROWS).step_by(2).map(|k| (k, value(k)))
}

/// A batch in a scrambled order, with repeats, present and absent keys.
fn batch() -> Vec<i64> {
    let mut keys: Vec<i64> = (0..ROWS).rev().collect();
    keys.extend([4, 4, 5, ROWS + 7]);
    keys
}

fn expected(keys: &[i64]) -> Vec<Option<String>> {
    keys.iter()
        .map(|&k| (k % 2 == 0 && (0..ROWS).contains(&k)).then(|| value(k)))
        .collect()
}

/// The checks shared by every store, after the guard's warm-up: `get_many` and its counts.
fn check(
    answers: Vec<Option<String>>,
    keys: &[i64],
    admissions: &[Admission],
    batches: u64,
    keys_asked: usize,
) {
    assert_eq!(answers, expected(keys));
    let admitted = admissions.iter().filter(|a| !a.is_blocked()).count();
    assert_eq!(batches, 1, "one store call for the batch");
    assert_eq!(
        keys_asked, admitted,
        "only the admitted keys go to the store"
    );
    assert!(
        admitted < keys.len() * 3 / 4,
        "the filter rules out most absent keys ({admitted} of {} admitted)",
        keys.len()
    );
}

#[test]
fn sqlite_get_many_asks_the_store_once_for_the_admitted_keys() {
    let dir = tempfile::tempdir().unwrap();
    let rows = SqliteStore::<i64, String>::builder(dir.path().join("rows.db"))
        .create_table_if_missing(true)
        .open()
        .unwrap();
    for (k, v) in seeded() {
        Store::put(&rows, &k, &v).unwrap();
    }
    let store = Counted::new(rows);
    let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), Arc::clone(&store));
    guard.warm_up(1_000, |_| {}).unwrap();
    let keys = batch();
    let admissions = guard.admit_many(&keys);
    let answers = guard.get_many(&keys).unwrap();
    check(
        answers,
        &keys,
        &admissions,
        store.batches(),
        store.keys_asked(),
    );
    assert_eq!(store.gets(), 0);
    // Counted as lookups, as `get` counts them: the admit_many above and the batch's own.
    assert_eq!(guard.stats().lookups, 2 * keys.len() as u64);
    // A create through the guard is found by the next batch.
    guard.put(&(ROWS + 7), &value(ROWS + 7)).unwrap();
    assert_eq!(
        guard.get_many(&[ROWS + 7, 1]).unwrap(),
        [Some(value(ROWS + 7)), None]
    );
}

#[test]
fn a_store_that_answers_for_the_wrong_number_of_keys_is_asked_key_by_key() {
    let rows = MemoryStore::from_rows(seeded());
    let store = Counted::with(rows, Duration::ZERO, true);
    let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), Arc::clone(&store));
    guard.warm_up(1_000, |_| {}).unwrap();
    let keys = batch();
    assert_eq!(guard.get_many(&keys).unwrap(), expected(&keys));
    assert!(store.gets() > 0);
}

#[test]
fn a_warming_guard_sends_the_whole_batch_and_a_replayed_false_positive_hits_the_memo() {
    let store = Counted::new(MemoryStore::from_rows(seeded()));
    // 8-bit fingerprints: false positives among a few thousand absent keys.
    let filter = CuckooFilter::builder()
        .capacity(1_000)
        .fingerprint_bits(8)
        .seed(3)
        .build()
        .unwrap();
    let guard = CacheGuard::new(filter, Arc::clone(&store));
    let keys = batch();
    assert_eq!(guard.get_many(&keys).unwrap(), expected(&keys));
    assert_eq!(store.keys_asked(), keys.len(), "warming: all asked");
    guard.warm_up(1_000, |_| {}).unwrap();
    let absent: Vec<i64> = (ROWS..ROWS + 5_000).filter(|k| k % 2 == 1).collect();
    let first = store.keys_asked();
    assert!(guard.get_many(&absent).unwrap().iter().all(Option::is_none));
    let false_positives = store.keys_asked() - first;
    assert!(
        false_positives > 0,
        "8-bit fingerprints admit some absent keys"
    );
    // The replay: every false positive is now in the memo (5,000 keys, 1,024 slots: most).
    let before = store.keys_asked();
    assert!(guard.get_many(&absent).unwrap().iter().all(Option::is_none));
    assert!(store.keys_asked() - before < false_positives);
    assert!(guard.stats().memo_hits > 0);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn check_async<S>(store: S)
where
    S: AsyncStore<Key = i64, Value = String> + 'static,
    S::Error: std::fmt::Debug,
{
    for (k, v) in seeded() {
        store.put(&k, &v).await.unwrap();
    }
    let store = Counted::new(store);
    let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000), Arc::clone(&store));
    guard.warm_up(1_000, |_| {}).await.unwrap();
    let keys = batch();
    let admissions = guard.admit_many(&keys);
    let answers = guard.get_many(&keys).await.unwrap();
    check(
        answers,
        &keys,
        &admissions,
        store.batches(),
        store.keys_asked(),
    );
    assert_eq!(store.gets(), 0);
    guard.put(&(ROWS + 7), &value(ROWS + 7)).await.unwrap();
    assert_eq!(
        guard.get_many(&[ROWS + 7, 1]).await.unwrap(),
        [Some(value(ROWS + 7)), None]
    );
}

#[test]
fn postgres_get_many_asks_the_store_once_for_the_admitted_keys() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    runtime().block_on(async {
        let table = common::unique_name("cg_batch");
        let store = PostgresStore::<i64, String>::builder(&url)
            .table(table)
            .create_table_if_missing(true)
            .connect()
            .await
            .unwrap();
        check_async(store).await;
    });
}

#[test]
fn redis_get_many_asks_the_store_once_for_the_admitted_keys() {
    let Some(url) = common::servers::server_url(&common::servers::REDIS) else {
        return;
    };
    runtime().block_on(async {
        let store = RedisStore::<i64, String>::connect(&url, &common::unique_name("cg_batch"))
            .await
            .unwrap();
        check_async(store).await;
    });
}
