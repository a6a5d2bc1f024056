//! A sealed snapshot is trusted for its freshness and its authenticity: a file planted at the
//! snapshot path by someone who can read an old sealed file (and so knows its seal id, its
//! hash keys and every checksum's seed) but not the store's seal secret is refused; so is a
//! file that others than its owner may write or that another user owns, and a seal row an
//! older build wrote (an integer). Each refusal leaves a warming guard that finds the rows.
#![cfg(unix)]

use crate::common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use cuckoo_guard::guard::{AsyncCacheGuard, CacheGuard, Exposure, MemoryStore, Restart};
use cuckoo_guard::{CuckooFilter, SnapshotError};
use xxhash_rust::xxh64::xxh64;

fn fallback() -> CuckooFilter {
    CuckooFilter::with_capacity(1_000)
}

/// Refused because its MAC does not check out under the store's seal secret.
fn refused_as_planted(restart: &Restart) -> bool {
    matches!(restart, Restart::Unreadable(SnapshotError::NotAuthentic))
}

/// Refused because others than the process's user may have written it.
fn refused_as_exposed(restart: &Restart) -> bool {
    matches!(restart, Restart::Exposed(_))
}

/// What an attacker who can read a sealed snapshot, but not the store's seal, makes of it: its
/// header as it is (seal id, hash keys, header checksum) over an emptied body, every count and
/// checksum fixed up (the body's are XXH64 seeded with the header's checksum, which the header
/// holds).
fn planted(sealed: &[u8]) -> Vec<u8> {
    let version = u16::from_le_bytes([sealed[8], sealed[9]]);
    let header_len = if version == 1 { 96 } else { 128 };
    assert_eq!(sealed[14], 1, "a filter of one table");
    let word = if sealed[10] == 8 { 4 } else { 8 };
    let buckets = u64::from_le_bytes(sealed[24..32].try_into().unwrap()) as usize;
    let seed = u64::from_le_bytes(sealed[88..96].try_into().unwrap());
    let mut body = vec![0u8; buckets * word];
    body.extend_from_slice(&0u64.to_le_bytes()); // no extras
    let checkpoint = xxh64(&body, seed);
    body.extend_from_slice(&checkpoint.to_le_bytes());
    body.extend_from_slice(&0u64.to_le_bytes()); // no fingerprints
    let checksum = xxh64(&body, seed);
    body.extend_from_slice(&checksum.to_le_bytes());
    let mut file = sealed[..header_len].to_vec();
    file.extend_from_slice(&body);
    // Every check but the MAC passes: it is a well-formed, empty snapshot.
    let empty = CuckooFilter::read_snapshot(&file[..]).expect("a well-formed snapshot");
    assert_eq!(empty.len(), 0);
    file
}

/// Replaces the file at `path` with `bytes`, readable and writable by its owner only.
fn replace(path: &Path, bytes: &[u8]) {
    fs::remove_file(path).unwrap();
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    file.write_all(bytes).unwrap();
}

const ROWS: u64 = 100;

/// A store of `0..ROWS`, and a guard over it sealed to `path`; the guard is dropped.
fn sealed_store(path: &Path) -> Arc<MemoryStore<u64, u64>> {
    let store = Arc::new(MemoryStore::from_rows((0..ROWS).map(|k| (k, k))));
    let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), Arc::clone(&store));
    guard.warm_up(1_000, |_| {}).unwrap();
    let sealed = guard.seal(path).unwrap();
    assert_eq!(sealed.written.items, ROWS);
    store
}

#[test]
fn a_planted_sealed_file_is_refused_and_the_guard_finds_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("guard.cgsnap");
    let store = sealed_store(&path);
    let real = fs::read(&path).unwrap();
    replace(&path, &planted(&real));

    let (guard, restart) = CacheGuard::restore(&path, Arc::clone(&store), fallback);
    assert!(
        !restart.is_trusted(),
        "a planted file was trusted: {restart}"
    );
    assert!(refused_as_planted(&restart), "{restart}");
    assert!(guard.is_warming());
    guard.warm_up(1_000, |_| {}).unwrap();
    assert!((0..ROWS).all(|k| guard.get(&k).unwrap() == Some(k)));
    drop(guard);

    // The real file at the same path, under the same seal, is trusted.
    replace(&path, &real);
    let (guard, restart) = CacheGuard::restore(&path, Arc::clone(&store), fallback);
    assert!(restart.is_trusted(), "{restart}");
    assert_eq!(guard.get(&7).unwrap(), Some(7));
}

#[test]
fn a_planted_sealed_file_is_refused_by_an_async_guard() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("guard.cgsnap");
    let store = sealed_store(&path);
    let real = fs::read(&path).unwrap();
    replace(&path, &planted(&real));
    common::runtime().block_on(async {
        let (guard, restart) = AsyncCacheGuard::restore(&path, Arc::clone(&store), fallback).await;
        assert!(
            !restart.is_trusted(),
            "a planted file was trusted: {restart}"
        );
        assert!(refused_as_planted(&restart), "{restart}");
        guard.warm_up(1_000, |_| {}).await.unwrap();
        assert_eq!(guard.get(&7).await.unwrap(), Some(7));
        drop(guard);

        replace(&path, &real);
        let (guard, restart) = AsyncCacheGuard::restore(&path, Arc::clone(&store), fallback).await;
        assert!(restart.is_trusted(), "{restart}");
        assert_eq!(guard.get(&7).await.unwrap(), Some(7));
    });
}

#[cfg(feature = "sqlite")]
#[test]
fn a_planted_sealed_file_is_refused_over_sqlite() {
    use cuckoo_guard::stores::SqliteStore;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rows.sqlite");
    let path = dir.path().join("guard.cgsnap");
    let open = || {
        SqliteStore::<i64, String>::builder(&db)
            .create_table_if_missing(true)
            .open()
            .unwrap()
    };
    let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), open());
    guard.warm_up(100, |_| {}).unwrap();
    guard.put(&5, &"five".to_string()).unwrap();
    guard.seal(&path).unwrap();
    drop(guard);
    let real = fs::read(&path).unwrap();
    replace(&path, &planted(&real));
    let (guard, restart) = CacheGuard::restore(&path, open(), fallback);
    assert!(
        !restart.is_trusted(),
        "a planted file was trusted: {restart}"
    );
    assert!(refused_as_planted(&restart), "{restart}");
    guard.warm_up(100, |_| {}).unwrap();
    assert_eq!(guard.get(&5).unwrap().as_deref(), Some("five"));
}

#[test]
fn a_sealed_file_others_may_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("guard.cgsnap");
    let store = sealed_store(&path);
    for mode in [0o620, 0o602, 0o666] {
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        let (guard, restart) = CacheGuard::restore(&path, Arc::clone(&store), fallback);
        assert!(!restart.is_trusted(), "mode {mode:o} trusted: {restart}");
        assert!(refused_as_exposed(&restart), "{restart}");
        assert!(
            matches!(restart, Restart::Exposed(Exposure::Writable { mode: m }) if m == mode),
            "{restart}"
        );
        guard.warm_up(1_000, |_| {}).unwrap();
        assert_eq!(guard.get(&7).unwrap(), Some(7));
    }
    // Readable by others is no reason to refuse it (keeping it private is the hash keys'
    // concern); only writing is.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let (_, restart) = CacheGuard::restore(&path, Arc::clone(&store), fallback);
    assert!(restart.is_trusted(), "{restart}");
}

#[test]
fn a_sealed_file_another_user_owns_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("guard.cgsnap");
    let store = sealed_store(&path);
    // The seal created the file, so its owner is this process's effective user.
    let user = fs::metadata(&path).unwrap().uid();
    let other = user.wrapping_add(4_242);
    match std::os::unix::fs::chown(&path, Some(other), None) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            // Giving a file away needs root (CI runs as root).
            println!("skipped: cannot chown a file to another user here: {e}");
            return;
        }
        Err(e) => panic!("chown: {e}"),
    }
    let (guard, restart) = CacheGuard::restore(&path, Arc::clone(&store), fallback);
    assert!(
        !restart.is_trusted(),
        "another user's file trusted: {restart}"
    );
    assert!(refused_as_exposed(&restart), "{restart}");
    assert!(
        matches!(restart, Restart::Exposed(Exposure::Owner { owner, user: u }) if owner == other && u == user),
        "{restart}"
    );
    guard.warm_up(1_000, |_| {}).unwrap();
    assert_eq!(guard.get(&7).unwrap(), Some(7));
    drop(guard);
    std::os::unix::fs::chown(&path, Some(user), None).unwrap();
    let (_, restart) = CacheGuard::restore(&path, Arc::clone(&store), fallback);
    assert!(restart.is_trusted(), "{restart}");
}

/// An older build's seal: the integer id, as it would sit in the store. Not trusted.
#[cfg(feature = "sqlite")]
#[test]
fn an_old_format_sqlite_seal_is_not_trusted() {
    use cuckoo_guard::guard::Store;
    use cuckoo_guard::stores::SqliteStore;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rows.sqlite");
    let path = dir.path().join("guard.cgsnap");
    let open = || {
        SqliteStore::<i64, String>::builder(&db)
            .create_table_if_missing(true)
            .open()
            .unwrap()
    };
    let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), open());
    guard.warm_up(100, |_| {}).unwrap();
    guard.put(&5, &"five".to_string()).unwrap();
    let sealed = guard.seal(&path).unwrap();
    drop(guard);
    let (_, restart) = CacheGuard::restore(&path, open(), fallback);
    assert!(restart.is_trusted(), "{restart}");

    let conn = rusqlite::Connection::open(&db).unwrap();
    let changed = conn
        .execute(
            "UPDATE cuckoo_guard_seals SET seal = ?1",
            [sealed.seal as i64],
        )
        .unwrap();
    assert_eq!(changed, 1);
    assert!(open().read_seal().unwrap().is_none());
    let (guard, restart) = CacheGuard::restore(&path, open(), fallback);
    assert!(
        !restart.is_trusted(),
        "an integer seal was trusted: {restart}"
    );
    assert!(matches!(restart, Restart::NoSeal), "{restart}");
    guard.warm_up(100, |_| {}).unwrap();
    assert_eq!(guard.get(&5).unwrap().as_deref(), Some("five"));
}

#[cfg(feature = "postgres")]
#[test]
fn an_old_format_postgres_seal_is_not_trusted() {
    use cuckoo_guard::guard::AsyncStore;
    use cuckoo_guard::stores::PostgresStore;
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("guard.cgsnap");
    let table = common::unique_name("cg_old_seal");
    let open = || async {
        PostgresStore::<i64, String>::builder(url.as_str())
            .table(table.as_str())
            .create_table_if_missing(true)
            .connect()
            .await
            .unwrap()
    };
    common::runtime().block_on(async {
        let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000), open().await);
        guard.warm_up(100, |_| {}).await.unwrap();
        guard.put(&5, &"five".to_string()).await.unwrap();
        let sealed = guard.seal(&path).await.unwrap();
        drop(guard);
        let (_, restart) = AsyncCacheGuard::restore(&path, open().await, fallback).await;
        assert!(restart.is_trusted(), "{restart}");

        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        // The row as an older build leaves it: its id in `seal`, no secret.
        client
            .batch_execute("ALTER TABLE cuckoo_guard_seals ADD COLUMN IF NOT EXISTS secret BYTEA")
            .await
            .unwrap();
        let changed = client
            .execute(
                "UPDATE cuckoo_guard_seals SET seal = $1, secret = NULL WHERE store = $2",
                &[&(sealed.seal as i64), &table],
            )
            .await
            .unwrap();
        assert_eq!(changed, 1);
        assert!(open().await.read_seal().await.unwrap().is_none());
        let (guard, restart) = AsyncCacheGuard::restore(&path, open().await, fallback).await;
        assert!(
            !restart.is_trusted(),
            "an integer seal was trusted: {restart}"
        );
        assert!(matches!(restart, Restart::NoSeal), "{restart}");
        guard.warm_up(100, |_| {}).await.unwrap();
        assert_eq!(guard.get(&5).await.unwrap().as_deref(), Some("five"));
        drop(guard);

        client
            .batch_execute(&format!("DROP TABLE \"{table}\""))
            .await
            .unwrap();
        client
            .execute("DELETE FROM cuckoo_guard_seals WHERE store = $1", &[&table])
            .await
            .unwrap();
    });
}

#[cfg(feature = "redis")]
#[test]
fn an_old_format_redis_seal_is_not_trusted() {
    use cuckoo_guard::guard::AsyncStore;
    use cuckoo_guard::stores::RedisStore;
    let Some(url) = common::servers::server_url(&common::servers::REDIS) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("guard.cgsnap");
    let namespace = common::unique_name("cg_old_seal");
    let open = || async {
        RedisStore::<i64, String>::connect(&url, &namespace)
            .await
            .unwrap()
    };
    common::runtime().block_on(async {
        let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000), open().await);
        guard.warm_up(100, |_| {}).await.unwrap();
        guard.put(&5, &"five".to_string()).await.unwrap();
        let sealed = guard.seal(&path).await.unwrap();
        drop(guard);
        let (_, restart) = AsyncCacheGuard::restore(&path, open().await, fallback).await;
        assert!(restart.is_trusted(), "{restart}");

        let store = open().await;
        let (seal_key, rows, keys) = (
            store.seal_key().to_owned(),
            store.rows_key().to_owned(),
            store.index_key().to_owned(),
        );
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        // The key as an older build leaves it: its id in decimal.
        let _: () = redis::cmd("SET")
            .arg(&seal_key)
            .arg(sealed.seal)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(store.read_seal().await.unwrap().is_none());
        let (guard, restart) = AsyncCacheGuard::restore(&path, store, fallback).await;
        assert!(
            !restart.is_trusted(),
            "an integer seal was trusted: {restart}"
        );
        assert!(matches!(restart, Restart::NoSeal), "{restart}");
        guard.warm_up(100, |_| {}).await.unwrap();
        assert_eq!(guard.get(&5).await.unwrap().as_deref(), Some("five"));
        drop(guard);

        let _: i64 = redis::cmd("DEL")
            .arg(&rows)
            .arg(&keys)
            .arg(&seal_key)
            .query_async(&mut conn)
            .await
            .unwrap();
    });
}
