//! Store adapters for real databases, each behind its own Cargo feature.
//!
//! | feature | type | store |
//! |---|---|---|
//! | `sqlite` | [`SqliteStore`] (sync [`Store`](crate::guard::Store)) | an embedded SQLite file (rusqlite, bundled SQLite) |
//! | `postgres` | [`PostgresStore`] ([`AsyncStore`](crate::guard::AsyncStore)) | a PostgreSQL table (tokio-postgres) |
//! | `redis` | [`RedisStore`] ([`AsyncStore`](crate::guard::AsyncStore)) | a Redis hash plus a sorted-set key index |
//!
//! The SQL adapters work on any table with a unique key column and a value column, whose
//! names are configurable; they can create the table if it is missing.
//!
//! Each adapter keeps a guard's seal ([`Store::SEALS`](crate::guard::Store::SEALS)) beside
//! its rows, keyed by the table as the database resolves it, so every store that reaches the
//! rows reaches the one seal and its writes clear it: SQLite by the table's name as created
//! (table names ignore ASCII case, and writes clear the seal under any case), PostgreSQL by
//! the table's name in a seals table in the table's own schema (both named by schema,
//! whatever a session's `search_path`), Redis by the namespace, exactly as the rows are.
//! Redis must not evict the store's keys: see
//! [`RedisStore`](RedisStore#what-redis-must-be-configured-with).

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use self::postgres::{PostgresStore, PostgresStoreBuilder, PostgresStoreError};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::{RedisStore, RedisStoreBuilder, RedisStoreError};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use self::sqlite::{SqliteStore, SqliteStoreBuilder, SqliteStoreError};

/// A Rust type the SQL adapters can map to a column, for the tables they create.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::stores::ColumnType;
///
/// assert_eq!(<i64 as ColumnType>::SQLITE, "INTEGER");
/// assert_eq!(<String as ColumnType>::POSTGRES, "TEXT");
/// ```
pub trait ColumnType {
    /// The declared SQLite type.
    const SQLITE: &'static str;
    /// The PostgreSQL type.
    const POSTGRES: &'static str;
}

impl ColumnType for i64 {
    const SQLITE: &'static str = "INTEGER";
    const POSTGRES: &'static str = "BIGINT";
}

impl ColumnType for i32 {
    const SQLITE: &'static str = "INTEGER";
    const POSTGRES: &'static str = "INTEGER";
}

impl ColumnType for String {
    const SQLITE: &'static str = "TEXT";
    const POSTGRES: &'static str = "TEXT";
}

impl ColumnType for Vec<u8> {
    const SQLITE: &'static str = "BLOB";
    const POSTGRES: &'static str = "BYTEA";
}

/// `name` as a double-quoted SQL identifier (SQLite and PostgreSQL both use `"..."`, with
/// embedded quotes doubled), so configured names can never inject SQL.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A connection index for the calling thread: the thread's [`thread_index`] spread over a pool
/// of `slots` connections, so the first threads each get their own.
///
/// [`thread_index`]: crate::sync::thread_index
#[cfg(feature = "sqlite")]
fn thread_slot(slots: usize) -> usize {
    crate::sync::thread_index() % slots.max(1)
}

#[cfg(all(test, any(feature = "sqlite", feature = "postgres")))]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_and_escaped() {
        assert_eq!(quote_identifier("rows"), "\"rows\"");
        assert_eq!(
            quote_identifier("a\"; DROP TABLE x; --"),
            "\"a\"\"; DROP TABLE x; --\""
        );
    }
}
