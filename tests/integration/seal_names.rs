//! Every spelling and every path that reaches a store's table reaches its one seal: a write
//! through any of them clears the seal a restart reads, so a stale snapshot is never
//! trusted.
//!
//! SQLite matches table names without regard to ASCII case; PostgreSQL resolves unqualified
//! names through each session's `search_path`.

#![cfg(any(feature = "sqlite", feature = "postgres"))]

use crate::common;

use cuckoo_guard::guard::Restart;
use cuckoo_guard::CuckooFilter;

fn fallback() -> CuckooFilter {
    CuckooFilter::with_capacity(1_000)
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use std::path::Path;

    use cuckoo_guard::guard::{CacheGuard, Store};
    use cuckoo_guard::stores::SqliteStore;

    /// Seals a warm guard over `store` holding key 1 into `path`.
    fn seal_one(store: SqliteStore<i64, String>, path: &Path) {
        let guard = CacheGuard::new(fallback(), store);
        guard.put(&1, &"alice".to_string()).unwrap();
        guard.warm_up(100, |_| {}).unwrap();
        guard.seal(path).unwrap();
    }

    fn open(db: &Path, table: &str) -> SqliteStore<i64, String> {
        SqliteStore::builder(db)
            .table(table)
            .create_table_if_missing(true)
            .open()
            .unwrap()
    }

    /// The restart must not trust the seal, and must find the row written behind it.
    fn assert_restart_finds_key_2(db: &Path, path: &Path) {
        let (guard, restart) = CacheGuard::restore(path, open(db, "users"), fallback);
        assert!(!restart.is_trusted(), "{restart}");
        assert!(matches!(restart, Restart::NoSeal), "{restart}");
        assert_eq!(guard.get(&2).unwrap().as_deref(), Some("bob"));
        guard.warm_up(100, |_| {}).unwrap();
        assert!(guard.may_contain(&1) && guard.may_contain(&2));
    }

    #[test]
    fn a_write_through_another_case_of_the_table_name_clears_the_seal() {
        let dir = tempfile::tempdir().unwrap();
        let (db, path) = (dir.path().join("db.sqlite"), dir.path().join("g.cgsnap"));
        seal_one(open(&db, "users"), &path);
        let (_, restart) = CacheGuard::restore(&path, open(&db, "users"), fallback);
        assert!(restart.is_trusted(), "{restart}");

        let writer = open(&db, "USERS");
        writer.put(&2, &"bob".to_string()).unwrap();
        assert_eq!(writer.get(&2).unwrap().as_deref(), Some("bob"));
        drop(writer);
        assert_restart_finds_key_2(&db, &path);

        // One seal row for the table, under the name it was created with.
        seal_one(open(&db, "USERS"), &path);
        let conn = rusqlite::Connection::open(&db).unwrap();
        let names: Vec<String> = conn
            .prepare("SELECT store FROM cuckoo_guard_seals")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(names, ["users"]);
        let (_, restart) = CacheGuard::restore(&path, open(&db, "Users"), fallback);
        assert!(restart.is_trusted(), "{restart}");
    }

    /// A writer opened before the table was renamed to another case keeps the old spelling;
    /// its writes still clear the seal a guard keyed by the new one wrote.
    #[test]
    fn a_write_clears_the_seal_under_every_case_of_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let (db, path) = (dir.path().join("db.sqlite"), dir.path().join("g.cgsnap"));
        let writer = open(&db, "USERS");
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        conn.execute_batch(
            "ALTER TABLE USERS RENAME TO users_renaming; ALTER TABLE users_renaming RENAME TO users",
        )
        .unwrap();
        seal_one(open(&db, "users"), &path);

        writer.put(&2, &"bob".to_string()).unwrap();
        drop(writer);
        assert_restart_finds_key_2(&db, &path);
    }

    /// The table option is one identifier: a dotted name is a table of that name, never a
    /// schema-qualified one.
    #[test]
    fn a_dotted_table_name_is_not_a_qualified_name() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db.sqlite");
        drop(open(&db, "users"));
        let error = SqliteStore::<i64, String>::builder(&db)
            .table("main.users")
            .open()
            .unwrap_err();
        assert!(
            matches!(
                error,
                cuckoo_guard::stores::SqliteStoreError::MissingTable { .. }
            ),
            "{error}"
        );
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use cuckoo_guard::guard::{AsyncCacheGuard, AsyncStore};
    use cuckoo_guard::stores::PostgresStore;

    async fn open(url: &str, table: &str) -> PostgresStore<i64, String> {
        PostgresStore::builder(url)
            .table(table)
            .create_table_if_missing(true)
            .connect()
            .await
            .unwrap()
    }

    /// `url` with the session's `search_path` set to `path`.
    fn with_search_path(url: &str, path: &str) -> String {
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}options=-c%20search_path%3D{path}")
    }

    async fn admin(url: &str) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    }

    /// Two stores reach the table `schema.t` through different search paths (one also
    /// finds a `cuckoo_guard_seals` table in `public`): a write through either clears the
    /// seal the other's guard wrote.
    #[test]
    fn stores_on_one_table_through_different_search_paths_share_the_seal() {
        let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.cgsnap");
        let schema = common::unique_name("cg_path");
        let table = "t";
        common::runtime().block_on(async {
            let admin = admin(&url).await;
            admin
                .batch_execute(&format!("CREATE SCHEMA \"{schema}\""))
                .await
                .unwrap();
            // A store in `public` makes sure `public.cuckoo_guard_seals` exists.
            let other = common::unique_name("cg_path_public");
            drop(open(&url, &other).await);
            admin
                .batch_execute(&format!("DROP TABLE \"{other}\""))
                .await
                .unwrap();

            let through_both = with_search_path(&url, &format!("{schema},public"));
            let only_schema = with_search_path(&url, &schema);
            // The writer connects first: it creates `schema.t`.
            let writer = open(&through_both, table).await;
            let store = open(&only_schema, table).await;
            let guard = AsyncCacheGuard::new(fallback(), store);
            guard.put(&1, &"alice".to_string()).await.unwrap();
            guard.warm_up(100, |_| {}).await.unwrap();
            guard.seal(&path).await.unwrap();
            drop(guard);
            let (_, restart) =
                AsyncCacheGuard::restore(&path, open(&only_schema, table).await, fallback).await;
            assert!(restart.is_trusted(), "{restart}");

            writer.put(&2, &"bob".to_string()).await.unwrap();
            let (guard, restart) =
                AsyncCacheGuard::restore(&path, open(&only_schema, table).await, fallback).await;
            assert!(matches!(restart, Restart::NoSeal), "{restart}");
            assert_eq!(guard.get(&2).await.unwrap().as_deref(), Some("bob"));
            drop(guard);

            // And the other way round: the writer's guard seals, the other store writes.
            let guard = AsyncCacheGuard::new(fallback(), writer);
            guard.warm_up(100, |_| {}).await.unwrap();
            guard.seal(&path).await.unwrap();
            drop(guard);
            open(&only_schema, table)
                .await
                .put(&3, &"carol".to_string())
                .await
                .unwrap();
            let (guard, restart) =
                AsyncCacheGuard::restore(&path, open(&through_both, table).await, fallback).await;
            assert!(matches!(restart, Restart::NoSeal), "{restart}");
            assert_eq!(guard.get(&3).await.unwrap().as_deref(), Some("carol"));
            drop(guard);

            // The seals table sits beside the data table, keyed by the table's name.
            let seals: i64 = admin
                .query_one(
                    &format!("SELECT count(*) FROM \"{schema}\".cuckoo_guard_seals"),
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(seals, 0, "the last write cleared the seal");
            admin
                .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
                .await
                .unwrap();
        });
    }
}
