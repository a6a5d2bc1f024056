//! A guard's sealed snapshot and its restart: trusted only when the store's seal names it and
//! the file's MAC checks out under the seal's secret (a damaged file fails it).
//!
//! Run against `MemoryStore` (shared through an `Arc`), `SqliteStore` (the same file
//! reopened, as a restarted process would), and through `AsyncCacheGuard` against
//! `PostgresStore` and `RedisStore` on the servers at `DATABASE_URL` and `REDIS_URL`.

use crate::common;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use cuckoo_guard::guard::{
    AsyncCacheGuard, AsyncStore, CacheGuard, GuardError, MemoryStore, Restart, Store,
};
use cuckoo_guard::{CuckooFilter, SnapshotError};

fn fallback() -> CuckooFilter {
    CuckooFilter::with_capacity(10_000)
}

/// Writes `bytes` to a new file at `path` that only its owner may read and write (a file
/// others may write is refused before its MAC is checked).
fn write_owner_only(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path).unwrap().write_all(bytes).unwrap();
}

/// Seals a warm guard over `store` holding keys `0..n`, then checks each way a restart can go.
fn restart_cases<St>(open: impl Fn() -> St, n: i64, dir: &Path)
where
    St: Store<Key = i64, Value = String> + Send + Sync + 'static,
    St::Cursor: Send,
{
    let path = dir.join("guard.cgsnap");
    let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), open());
    for k in 0..n {
        guard.put(&k, &format!("row {k}")).unwrap();
    }
    guard.warm_up(500, |_| {}).unwrap();
    let sealed = guard.seal(&path).unwrap();
    assert_eq!(sealed.written.items, n as u64);
    drop(guard);

    // Sealed and matching: ready at once, every key present, absent keys blocked.
    let (guard, restart) = CacheGuard::restore(&path, open(), fallback);
    assert!(
        matches!(restart, Restart::Trusted { seal, .. } if seal == sealed.seal),
        "{restart}"
    );
    assert!(guard
        .stats()
        .restart
        .unwrap()
        .starts_with("started from the sealed snapshot"));
    let len = guard.filter().len();
    assert_eq!(
        guard.warm_up(500, |_| {}).unwrap().keys_loaded,
        0,
        "nothing to load twice"
    );
    assert_eq!(guard.filter().len(), len);
    assert!((0..n).all(|k| guard.may_contain(&k)));
    assert_eq!(guard.get(&(n + 5)).unwrap(), None);
    assert_eq!(
        guard.stats().blocked,
        1,
        "the restored guard filters without a warm-up"
    );
    drop(guard);

    // Restarting again before any write trusts the same file.
    let (guard, restart) = CacheGuard::restore(&path, open(), fallback);
    assert!(restart.is_trusted(), "{restart}");
    // The first write clears the seal...
    guard.put(&n, &"new".to_string()).unwrap();
    drop(guard);
    // ... so the next restart scans, and finds the new row.
    let (guard, restart) = CacheGuard::restore(&path, open(), fallback);
    assert!(matches!(restart, Restart::NoSeal), "{restart}");
    assert!(guard.stats().restart.unwrap().starts_with("warming up"));
    assert_eq!(
        guard.get(&n).unwrap().as_deref(),
        Some("new"),
        "passes through while warming"
    );
    guard.warm_up(500, |_| {}).unwrap();
    assert!((0..=n).all(|k| guard.may_contain(&k)));

    // A delete clears the seal too.
    let sealed = guard.seal(&path).unwrap();
    assert!(guard.delete(&0).unwrap());
    drop(guard);
    let (_, restart) = CacheGuard::restore(&path, open(), fallback);
    assert!(matches!(restart, Restart::NoSeal), "{restart}");
    let _ = sealed;

    // Another snapshot's seal: a file from an earlier seal is not trusted.
    let (guard, _) = CacheGuard::restore(&path, open(), fallback);
    guard.warm_up(500, |_| {}).unwrap();
    let old = dir.join("old.cgsnap");
    std::fs::copy(&path, &old).unwrap();
    guard.seal(&path).unwrap();
    drop(guard);
    let (_, restart) = CacheGuard::restore(&old, open(), fallback);
    assert!(
        matches!(restart, Restart::OtherSeal { .. } | Restart::NoSeal),
        "{restart}"
    );

    // A damaged file and a missing one.
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 30;
    bytes[last] ^= 1;
    let damaged = dir.join("damaged.cgsnap");
    write_owner_only(&damaged, &bytes);
    let (guard, restart) = CacheGuard::restore(&damaged, open(), fallback);
    assert!(
        matches!(restart, Restart::Unreadable(SnapshotError::NotAuthentic)),
        "{restart}"
    );
    assert!(!guard.may_contain(&-1) || guard.get(&1).unwrap().is_some());
    let (_, restart) = CacheGuard::restore(dir.join("missing.cgsnap"), open(), fallback);
    assert!(matches!(restart, Restart::NoSnapshot), "{restart}");
}

/// What a filter's hasher makes of one value: equal for equal hash keys.
fn probe<H: std::hash::BuildHasher>(filter: &CuckooFilter<H>) -> u64 {
    filter.hasher().hash_one(0x6b65_7973_u64)
}

#[test]
fn a_restored_guard_rebuilds_under_new_keys_and_its_next_seal_records_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("guard.cgsnap");
    let store = Arc::new(MemoryStore::<i64, String>::new());
    let n = 1_500;
    let guard = CacheGuard::new(CuckooFilter::with_capacity(2_000), Arc::clone(&store));
    for k in 0..n {
        guard.put(&k, &format!("row {k}")).unwrap();
    }
    guard.warm_up(500, |_| {}).unwrap();
    guard.seal(&path).unwrap();
    let sealed_keys = probe(&guard.filter());
    drop(guard);

    let (guard, restart) = CacheGuard::restore(&path, Arc::clone(&store), fallback);
    assert!(restart.is_trusted(), "{restart}");
    assert_eq!(
        probe(&guard.filter()),
        sealed_keys,
        "the restored filter hashes with the file's keys"
    );
    guard.rebuild().unwrap();
    let rebuilt_keys = probe(&guard.filter());
    assert_ne!(
        rebuilt_keys, sealed_keys,
        "a rebuild of a restored filter kept the file's keys"
    );
    assert!(
        (0..n).all(|k| guard.may_contain(&k)),
        "a rebuild lost a key"
    );
    let resealed = guard.seal(&path).unwrap();
    drop(guard);

    let info = cuckoo_guard::snapshot::inspect(std::fs::File::open(&path).unwrap()).unwrap();
    assert!(info.hash_keys && info.readable_by_this_build(), "{info:?}");
    assert_eq!(info.body.as_ref().unwrap().items, n as u64);
    let (guard, restart) = CacheGuard::restore(&path, Arc::clone(&store), fallback);
    assert!(
        matches!(restart, Restart::Trusted { seal, .. } if seal == resealed.seal),
        "{restart}"
    );
    assert_eq!(
        probe(&guard.filter()),
        rebuilt_keys,
        "the second file records the rebuild's keys"
    );
    assert!(
        (0..n).all(|k| guard.may_contain(&k)),
        "the second restore lost a key"
    );
    assert_eq!(guard.get(&7).unwrap().as_deref(), Some("row 7"));
    assert_eq!(guard.get(&(n + 1)).unwrap(), None);
    assert_eq!(
        guard.stats().blocked,
        1,
        "the restored guard filters at once"
    );
}

#[test]
fn memory_store_restarts_from_its_sealed_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::<i64, String>::new());
    restart_cases(|| Arc::clone(&store), 2_000, dir.path());
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite_store_restarts_from_its_sealed_snapshot() {
    use cuckoo_guard::stores::SqliteStore;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rows.sqlite");
    let open = || {
        SqliteStore::<i64, String>::builder(&db)
            .create_table_if_missing(true)
            .open()
            .unwrap()
    };
    restart_cases(open, 2_000, dir.path());
    // A write around the guard that deletes the seal, as the store documents, is seen.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let seals: i64 = conn
        .query_row("SELECT count(*) FROM cuckoo_guard_seals", [], |r| r.get(0))
        .unwrap();
    assert_eq!(seals, 1, "the last case left its seal");
}

#[test]
fn a_seal_needs_a_warm_guard_and_a_store_that_seals() {
    let dir = tempfile::tempdir().unwrap();
    let guard = CacheGuard::new(fallback(), MemoryStore::<i64, String>::new());
    assert!(matches!(
        guard.seal(dir.path().join("s")),
        Err(GuardError::Warming)
    ));
    guard.warm_up(10, |_| {}).unwrap();
    assert!(matches!(
        guard.seal(dir.path().join("no/such/dir/s")),
        Err(GuardError::Snapshot(_))
    ));
}

/// A seal taken while writers run: every key whose create returned before the seal began is
/// in the snapshot, and any write after the seal clears it.
#[test]
fn a_seal_under_concurrent_writes_is_trusted_only_if_it_holds_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.cgsnap");
    let store = Arc::new(MemoryStore::<i64, String>::new());
    let guard = CacheGuard::new(CuckooFilter::with_capacity(100_000), Arc::clone(&store));
    guard.warm_up(100, |_| {}).unwrap();
    let mut trusted = 0;
    // 20 rounds, and then more (up to 40) until a seal under writes was trusted: each extra
    // round seals later, so the seal comes after the last write began.
    let mut rounds = 0i64;
    while rounds < 20 || (trusted == 0 && rounds < 40) {
        let round = rounds;
        rounds += 1;
        let delay = std::time::Duration::from_micros(200 << (round - 19).clamp(0, 10));
        std::thread::scope(|s| {
            let g = &guard;
            s.spawn(move || {
                for k in 0..500 {
                    g.put(&(round * 1_000 + k), &String::new()).unwrap();
                }
            });
            // Sealed somewhere in the middle of the writes.
            std::thread::sleep(delay);
            g.seal(&path).unwrap();
        });
        let (restored, restart) = CacheGuard::restore(&path, Arc::clone(&store), fallback);
        if restart.is_trusted() {
            trusted += 1;
            // Trusted: the store has not changed since, so every row must be in the filter.
            let rows = Store::scan_keys(&*store, None, usize::MAX).unwrap().keys;
            assert!(
                rows.iter().all(|k| restored.may_contain(k)),
                "round {round}"
            );
        }
        // Keep the seal state honest for the next round: a write clears it.
        guard.put(&-1, &String::new()).unwrap();
    }
    // Sealed with no write in flight: always trusted, and checked.
    guard.seal(&path).unwrap();
    let (restored, restart) = CacheGuard::restore(&path, Arc::clone(&store), fallback);
    assert!(restart.is_trusted(), "{restart}");
    let rows = Store::scan_keys(&*store, None, usize::MAX).unwrap().keys;
    assert_eq!(rows.len(), rounds as usize * 500 + 1);
    assert!(rows.iter().all(|k| restored.may_contain(k)));
    println!(
        "{trusted} of {rounds} seals under writes were trusted (each checked), the last one too"
    );
    assert!(
        trusted >= 1,
        "no seal under writes was trusted in {rounds} rounds"
    );
}

/// [`restart_cases`] through an [`AsyncCacheGuard`]: `open` connects anew, as a restarted
/// process would.
async fn async_restart_cases<St, F>(open: impl Fn() -> F, n: i64, dir: &Path)
where
    St: AsyncStore<Key = i64, Value = String> + 'static,
    F: Future<Output = St>,
{
    let path = dir.join("guard.cgsnap");
    let store = open().await;
    for k in 0..n {
        store.put(&k, &format!("row {k}")).await.unwrap();
    }
    let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000), store);
    guard.warm_up(500, |_| {}).await.unwrap();
    let sealed = guard.seal(&path).await.unwrap();
    assert_eq!(sealed.written.items, n as u64);
    drop(guard);

    // Sealed and matching: ready at once, every key present, absent keys blocked.
    let (guard, restart) = AsyncCacheGuard::restore(&path, open().await, fallback).await;
    assert!(
        matches!(restart, Restart::Trusted { seal, .. } if seal == sealed.seal),
        "{restart}"
    );
    assert!(!guard.is_warming());
    assert!((0..n).all(|k| guard.may_contain(&k)));
    assert_eq!(guard.get(&(n + 5)).await.unwrap(), None);
    assert_eq!(guard.stats().blocked, 1, "filters without a warm-up");
    drop(guard);

    // Again before any write: the same file is trusted. Then a create clears the seal.
    let (guard, restart) = AsyncCacheGuard::restore(&path, open().await, fallback).await;
    assert!(restart.is_trusted(), "{restart}");
    guard.put(&n, &"new".to_string()).await.unwrap();
    drop(guard);
    let (guard, restart) = AsyncCacheGuard::restore(&path, open().await, fallback).await;
    assert!(matches!(restart, Restart::NoSeal), "{restart}");
    assert!(guard.is_warming());
    assert_eq!(guard.get(&n).await.unwrap().as_deref(), Some("new"));
    guard.warm_up(500, |_| {}).await.unwrap();
    assert!((0..=n).all(|k| guard.may_contain(&k)));

    // A delete clears it too, and a file an earlier seal named is not trusted.
    let old = dir.join("old.cgsnap");
    guard.seal(&path).await.unwrap();
    std::fs::copy(&path, &old).unwrap();
    assert!(guard.delete(&0).await.unwrap());
    let (_, restart) = AsyncCacheGuard::restore(&path, open().await, fallback).await;
    assert!(matches!(restart, Restart::NoSeal), "{restart}");
    guard.seal(&path).await.unwrap();
    let (_, restart) = AsyncCacheGuard::restore(&old, open().await, fallback).await;
    assert!(matches!(restart, Restart::OtherSeal { .. }), "{restart}");
    drop(guard);

    // A damaged file: refused, and the guard warms up as usual.
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 30;
    bytes[last] ^= 1;
    let damaged = dir.join("damaged.cgsnap");
    write_owner_only(&damaged, &bytes);
    let (guard, restart) = AsyncCacheGuard::restore(&damaged, open().await, fallback).await;
    assert!(
        matches!(restart, Restart::Unreadable(SnapshotError::NotAuthentic)),
        "{restart}"
    );
    guard.warm_up(500, |_| {}).await.unwrap();
    assert!((1..=n).all(|k| guard.may_contain(&k)));
}

/// Seals taken while tasks create rows: a restart trusts one only if it holds every row.
async fn async_seal_under_writes<St>(store: Arc<St>, dir: &Path)
where
    St: AsyncStore<Key = i64, Value = String> + 'static,
{
    let path = dir.join("writes.cgsnap");
    let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(100_000), Arc::clone(&store));
    guard.warm_up(100, |_| {}).await.unwrap();
    let before = all_keys(&*store).await.len();
    let mut trusted = 0;
    // 10 rounds, and then more (up to 30) until a seal under writes was trusted: each extra
    // round seals later, so the seal comes after the last write began.
    let mut rounds = 0i64;
    while rounds < 10 || (trusted == 0 && rounds < 30) {
        let round = rounds;
        rounds += 1;
        let delay = round as u64 * (1 << (round - 9).clamp(0, 4));
        let writer = {
            let guard = guard.clone();
            tokio::spawn(async move {
                for k in 0..30 {
                    let key = 1_000_000 + round * 1_000 + k;
                    guard.put(&key, &String::new()).await.unwrap();
                }
            })
        };
        // From the first writes to after the last: some seals are cleared, some trusted.
        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        guard.seal(&path).await.unwrap();
        writer.await.unwrap();
        let (restored, restart) =
            AsyncCacheGuard::restore(&path, Arc::clone(&store), fallback).await;
        if restart.is_trusted() {
            trusted += 1;
            let rows = all_keys(&*store).await;
            assert!(
                rows.iter().all(|k| restored.may_contain(k)),
                "round {round}"
            );
        }
        guard.put(&-1, &String::new()).await.unwrap();
    }
    guard.seal(&path).await.unwrap();
    let (restored, restart) = AsyncCacheGuard::restore(&path, Arc::clone(&store), fallback).await;
    assert!(restart.is_trusted(), "{restart}");
    let rows = all_keys(&*store).await;
    assert_eq!(rows.len(), before + rounds as usize * 30 + 1);
    assert!(rows.iter().all(|k| restored.may_contain(k)));
    println!(
        "{trusted} of {rounds} seals under writes were trusted (each checked), the last one too"
    );
    assert!(
        trusted >= 1,
        "no seal under writes was trusted in {rounds} rounds"
    );
}

async fn all_keys<St: AsyncStore<Key = i64>>(store: &St) -> Vec<i64> {
    let mut keys = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.scan_keys(cursor.as_ref(), 1_000).await.unwrap();
        keys.extend(page.keys);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return keys,
        }
    }
}

#[test]
fn memory_store_restarts_an_async_guard_from_its_sealed_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::<i64, String>::new());
    common::runtime().block_on(async {
        async_restart_cases(|| std::future::ready(Arc::clone(&store)), 500, dir.path()).await;
        async_seal_under_writes(store, dir.path()).await;
    });
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_store_restarts_from_its_sealed_snapshot() {
    use cuckoo_guard::stores::PostgresStore;
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let table = common::unique_name("cg_restart");
    let open = || async {
        PostgresStore::<i64, String>::builder(url.as_str())
            .table(table.as_str())
            .create_table_if_missing(true)
            .connect()
            .await
            .unwrap()
    };
    common::runtime().block_on(async {
        async_restart_cases(open, 500, dir.path()).await;
        async_seal_under_writes(Arc::new(open().await), dir.path()).await;
        // The seal is a row of `cuckoo_guard_seals` named by the table, as documented.
        assert_eq!(
            drop_postgres_table(&url, &table).await,
            1,
            "the last seal is in place"
        );
    });
}

/// Drops the test's table and its seal row; the number of seal rows it had.
#[cfg(feature = "postgres")]
async fn drop_postgres_table(url: &str, table: &str) -> u64 {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP TABLE \"{table}\""))
        .await
        .unwrap();
    client
        .execute("DELETE FROM cuckoo_guard_seals WHERE store = $1", &[&table])
        .await
        .unwrap()
}

#[cfg(feature = "redis")]
#[test]
fn redis_store_restarts_from_its_sealed_snapshot() {
    use cuckoo_guard::stores::RedisStore;
    let Some(url) = common::servers::server_url(&common::servers::REDIS) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let namespace = common::unique_name("cg_restart");
    let open = || async {
        RedisStore::<i64, String>::connect(&url, &namespace)
            .await
            .unwrap()
    };
    common::runtime().block_on(async {
        async_restart_cases(open, 500, dir.path()).await;
        let store = open().await;
        let seal_key = store.seal_key().to_owned();
        let (rows, keys) = (store.rows_key().to_owned(), store.index_key().to_owned());
        async_seal_under_writes(Arc::new(store), dir.path()).await;
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let exists: i64 = redis::cmd("EXISTS")
            .arg(&seal_key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(exists, 1, "the last seal is in place at {seal_key}");
        let _: i64 = redis::cmd("DEL")
            .arg(&rows)
            .arg(&keys)
            .arg(&seal_key)
            .query_async(&mut conn)
            .await
            .unwrap();
    });
}

/// A periodic seal reseals after writes and writes nothing while the store is unchanged; a
/// restart after the task stops (a crash) trusts the last seal only if nothing was written
/// after it.
#[test]
fn a_periodic_seal_follows_the_writes() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("periodic.cgsnap");
    let store = Arc::new(MemoryStore::<i64, String>::new());
    let guard = CacheGuard::new(CuckooFilter::with_capacity(10_000), Arc::clone(&store));
    let task = guard.seal_periodically(&path, Duration::from_millis(5));
    // Warming: no turn seals.
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(task.report().sealed, 0);
    guard.warm_up(100, |_| {}).unwrap();
    let wait_for = |sealed: u64| {
        let start = Instant::now();
        while task.report().sealed < sealed {
            assert!(start.elapsed() < Duration::from_secs(10), "no seal came");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    // The first turn after the warm-up seals.
    wait_for(1);
    for round in 1..=5 {
        guard.put(&round, &String::new()).unwrap();
        // The write cleared the seal: a turn seals again, and the file then holds the key.
        wait_for(round as u64 + 1);
        let (restored, restart) = CacheGuard::restore(&path, Arc::clone(&store), fallback);
        assert!(restart.is_trusted(), "round {round}: {restart}");
        assert!((1..=round).all(|k| restored.may_contain(&k)));
    }
    // Turns over an unchanged store write nothing.
    let start = Instant::now();
    while task.report().unchanged < 3 {
        assert!(start.elapsed() < Duration::from_secs(10), "no turn came");
        std::thread::sleep(Duration::from_millis(1));
    }
    let report = task.stop();
    assert_eq!(report.sealed, 6, "an unchanged store is not sealed again");
    assert_eq!(report.failed, 0, "{:?}", report.last_error);
    // A write after the last turn, then a crash: not trusted, the restart warms up.
    guard.put(&99, &String::new()).unwrap();
    drop(guard);
    let (restored, restart) = CacheGuard::restore(&path, Arc::clone(&store), fallback);
    assert!(matches!(restart, Restart::NoSeal), "{restart}");
    restored.warm_up(100, |_| {}).unwrap();
    assert!(restored.may_contain(&99));
}

#[cfg(feature = "postgres")]
#[test]
fn a_periodic_seal_of_an_async_guard_over_postgres() {
    use cuckoo_guard::stores::PostgresStore;
    use std::time::Duration;
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("periodic.cgsnap");
    let table = common::unique_name("cg_periodic");
    common::runtime().block_on(async {
        let store = Arc::new(
            PostgresStore::<i64, String>::builder(url.as_str())
                .table(table.as_str())
                .create_table_if_missing(true)
                .connect()
                .await
                .unwrap(),
        );
        let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10_000), Arc::clone(&store));
        guard.warm_up(100, |_| {}).await.unwrap();
        let task = guard.seal_periodically(&path, Duration::from_millis(10));
        for k in 0..200 {
            guard.put(&k, &String::new()).await.unwrap();
        }
        // Writes stopped: within a few turns a seal names a file holding every row.
        let start = std::time::Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let (restored, restart) =
                AsyncCacheGuard::restore(&path, Arc::clone(&store), fallback).await;
            if restart.is_trusted() {
                assert!((0..200).all(|k| restored.may_contain(&k)));
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "{restart}");
        }
        let report = task.stop();
        assert!(report.sealed >= 1 && report.failed == 0, "{report:?}");
        drop_postgres_table(&url, &table).await;
    });
}
