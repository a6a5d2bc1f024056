//! Coalesced store reads against the real stores: a storm of concurrent lookups of one key
//! the filter admits but the store does not hold (a row deleted behind the guard's back)
//! makes one store query, counted at the store's door, instead of one per lookup; an error
//! reaches every waiter; a leader whose future is dropped does not strand its followers.
//!
//! PostgreSQL makes the leader's read wait for real: a second connection holds an `ACCESS
//! EXCLUSIVE` lock on the table until every lookup has begun. Without `DATABASE_URL` (or a
//! server at the default address) the PostgreSQL tests print that they were skipped.
#![cfg(all(feature = "postgres", feature = "sqlite", feature = "tokio"))]

use crate::common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::counted::Counted;
use common::until;
use cuckoo_guard::guard::{AsyncCacheGuard, AsyncStore, CacheGuard, GuardError, Store};
use cuckoo_guard::stores::{PostgresStore, SqliteStore};
use cuckoo_guard::CuckooFilter;

const ROWS: i64 = 100;
/// The row deleted behind the guard's back: the filter still admits it.
const GONE: i64 = 42;

fn filter() -> CuckooFilter {
    CuckooFilter::with_capacity(1_000)
}

type PgGuard = AsyncCacheGuard<Arc<Counted<PostgresStore<i64, String>>>>;

/// A warm guard over a fresh table of `ROWS` rows, whose row `GONE` was then deleted behind
/// the guard's back; and the test's own connection.
async fn postgres_guard(
    url: &str,
    table: &str,
    memo: usize,
    timeout: Option<Duration>,
) -> (
    PgGuard,
    Arc<Counted<PostgresStore<i64, String>>>,
    tokio_postgres::Client,
) {
    let admin = common::pg_client(url).await;
    admin
        .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
        .await
        .unwrap();
    let store = PostgresStore::builder(url)
        .table(table)
        .create_table_if_missing(true)
        .statement_timeout(timeout)
        .connect()
        .await
        .unwrap();
    for k in 0..ROWS {
        store.put(&k, &format!("row {k}")).await.unwrap();
    }
    let store = Counted::new(store);
    let guard = AsyncCacheGuard::new(filter(), Arc::clone(&store))
        .with_memo(memo)
        .unwrap();
    guard.warm_up(1_000, |_| {}).await.unwrap();
    admin
        .execute(&format!("DELETE FROM {table} WHERE key = $1"), &[&GONE])
        .await
        .unwrap();
    assert!(guard.may_contain(&GONE));
    (guard, store, admin)
}

/// Runs `lookups` concurrent lookups of `GONE` while `admin` holds the table locked, and
/// releases the lock once every lookup has begun; returns their answers.
async fn storm(
    guard: &PgGuard,
    admin: &mut tokio_postgres::Client,
    table: &str,
    lookups: u64,
) -> Vec<Result<Option<String>, GuardError<cuckoo_guard::stores::PostgresStoreError>>> {
    let lock = admin.transaction().await.unwrap();
    lock.batch_execute(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
        .await
        .unwrap();
    let before = guard.stats().lookups;
    let tasks: Vec<_> = (0..lookups)
        .map(|_| {
            let guard = guard.clone();
            tokio::spawn(async move { guard.get(&GONE).await })
        })
        .collect();
    until("every lookup to begin", || {
        guard.stats().lookups == before + lookups
    })
    .await;
    // Each lookup asks the memo in the same poll as the filter.
    tokio::time::sleep(Duration::from_millis(100)).await;
    lock.rollback().await.unwrap();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn postgres_a_storm_of_one_absent_admitted_key_makes_one_store_query() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    runtime().block_on(async {
        let table = "cg_coalesced_storm";
        let (guard, store, mut admin) = postgres_guard(&url, table, 1024, None).await;
        let answers = storm(&guard, &mut admin, table, 1_000).await;
        assert!(answers.iter().all(|a| matches!(a, Ok(None))), "{answers:?}");
        assert_eq!(store.gets(), 1, "one store query for 1,000 lookups");
        let stats = guard.stats();
        assert_eq!((stats.coalesced, stats.false_positives), (999, 1));
        // The memo then answers replays without the store.
        assert_eq!(guard.get(&GONE).await.unwrap(), None);
        assert_eq!(store.gets(), 1);
        // A row is shared as well, and found by a lookup after its create.
        guard.put(&GONE, &"back".to_owned()).await.unwrap();
        assert_eq!(guard.get(&GONE).await.unwrap().as_deref(), Some("back"));
    });
}

/// The control: without memo slots reads are not coalesced, and each lookup queries.
#[test]
fn postgres_without_memo_slots_every_lookup_of_the_storm_queries() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    runtime().block_on(async {
        let table = "cg_coalesced_control";
        let (guard, store, mut admin) = postgres_guard(&url, table, 0, None).await;
        let answers = storm(&guard, &mut admin, table, 50).await;
        assert!(answers.iter().all(|a| matches!(a, Ok(None))));
        assert_eq!(store.gets(), 50);
        assert_eq!(guard.stats().coalesced, 0);
    });
}

#[test]
fn postgres_the_shared_reads_error_reaches_every_waiter() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    runtime().block_on(async {
        let table = "cg_coalesced_error";
        // The lock outlasts the statement timeout: the one read fails.
        let (guard, store, mut admin) =
            postgres_guard(&url, table, 1024, Some(Duration::from_millis(300))).await;
        let lock = admin.transaction().await.unwrap();
        lock.batch_execute(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
            .await
            .unwrap();
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let guard = guard.clone();
                tokio::spawn(async move { guard.get(&GONE).await })
            })
            .collect();
        let mut shared = 0;
        for task in tasks {
            let failed = task.await.unwrap().expect_err("the read timed out");
            assert!(failed.store_error().is_some(), "{failed}");
            shared += u64::from(matches!(failed, GuardError::SharedStore(_)));
        }
        lock.rollback().await.unwrap();
        // Every lookup that began while the read ran took its error.
        assert!(shared >= 1, "no lookup shared the failed read");
        assert_eq!(store.gets() + guard.stats().coalesced, 100);
        assert_eq!(
            guard.get(&GONE).await.unwrap(),
            None,
            "the next read succeeds"
        );
    });
}

#[test]
fn postgres_a_dropped_leader_does_not_strand_its_followers() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    runtime().block_on(async {
        let table = "cg_coalesced_dropped";
        let (guard, store, mut admin) = postgres_guard(&url, table, 1024, None).await;
        let lock = admin.transaction().await.unwrap();
        lock.batch_execute(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
            .await
            .unwrap();
        let leader = {
            let guard = guard.clone();
            tokio::spawn(async move { guard.get(&GONE).await })
        };
        until("the leader's read", || store.gets() == 1).await;
        let followers: Vec<_> = (0..100)
            .map(|_| {
                let guard = guard.clone();
                tokio::spawn(async move { guard.get(&GONE).await })
            })
            .collect();
        until("every follower to begin", || guard.stats().lookups == 101).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        leader.abort();
        assert!(leader.await.unwrap_err().is_cancelled());
        lock.rollback().await.unwrap();
        for follower in followers {
            assert_eq!(follower.await.unwrap().unwrap(), None);
        }
        // The followers looked again: one of them read, the rest joined it (or hit the memo).
        assert_eq!(store.gets(), 2);
    });
}

#[test]
fn sqlite_a_storm_of_one_absent_admitted_key_makes_one_store_query() {
    let dir = tempfile::tempdir().unwrap();
    let rows = SqliteStore::<i64, String>::builder(dir.path().join("rows.db"))
        .create_table_if_missing(true)
        .open()
        .unwrap();
    for k in 0..ROWS {
        Store::put(&rows, &k, &format!("row {k}")).unwrap();
    }
    let store = Counted::with(rows, Duration::from_millis(300), false);
    let guard = CacheGuard::new(filter(), Arc::clone(&store));
    guard.warm_up(1_000, |_| {}).unwrap();
    Store::delete(&store.inner, &GONE).unwrap();
    assert!(guard.may_contain(&GONE));
    const THREADS: usize = 64;
    let start = Barrier::new(THREADS);
    let answers: Vec<_> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    guard.get(&GONE)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert!(answers.iter().all(|a| matches!(a, Ok(None))));
    // The 64 threads start within the first read's 300 ms: they join it or, after it, hit
    // the memo.
    assert_eq!(store.gets(), 1);
    let stats = guard.stats();
    assert_eq!(stats.coalesced + stats.memo_hits, THREADS as u64 - 1);
}
