//! A guard's sealed snapshot and its restart: trusted only when the store's seal names it.
//!
//! Run against `MemoryStore` (shared through an `Arc`) and `SqliteStore` (the same file
//! reopened, as a restarted process would).

use std::path::Path;
use std::sync::Arc;

use cuckoo_guard::guard::{CacheGuard, GuardError, MemoryStore, Restart, Store};
use cuckoo_guard::CuckooFilter;

fn fallback() -> CuckooFilter {
    CuckooFilter::with_capacity(10_000)
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
    std::fs::write(&damaged, &bytes).unwrap();
    let (guard, restart) = CacheGuard::restore(&damaged, open(), fallback);
    assert!(matches!(restart, Restart::Unreadable(_)), "{restart}");
    assert!(!guard.may_contain(&-1) || guard.get(&1).unwrap().is_some());
    let (_, restart) = CacheGuard::restore(dir.join("missing.cgsnap"), open(), fallback);
    assert!(matches!(restart, Restart::NoSnapshot), "{restart}");
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
    for round in 0..20i64 {
        std::thread::scope(|s| {
            let g = &guard;
            s.spawn(move || {
                for k in 0..500 {
                    g.put(&(round * 1_000 + k), &String::new()).unwrap();
                }
            });
            // Sealed somewhere in the middle of the writes.
            std::thread::sleep(std::time::Duration::from_micros(200));
            g.seal(&path).unwrap();
        });
        let (restored, restart) = CacheGuard::restore(&path, Arc::clone(&store), fallback);
        if restart.is_trusted() {
            trusted += 1;
            // Trusted: the store has not changed since, so every row must be in the filter.
            let rows = store.scan_keys(None, usize::MAX).unwrap().keys;
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
    let rows = store.scan_keys(None, usize::MAX).unwrap().keys;
    assert_eq!(rows.len(), 20 * 500 + 1);
    assert!(rows.iter().all(|k| restored.may_contain(k)));
    println!("{trusted} of 20 seals under writes were trusted (each checked), the last one too");
}
