//! [`SqliteStore`]: a table in an SQLite database file (feature `sqlite`).

use std::collections::HashSet;
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::types::{FromSql, ToSql};
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use super::{quote_identifier, thread_slot, ColumnType};
use crate::guard::{sample_by_scan, SampleRng, ScanPage, SealSecret, Store, Written};

/// Why a [`SqliteStore`] operation failed.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::stores::{SqliteStore, SqliteStoreError};
///
/// let dir = tempfile::tempdir()?;
/// let error = SqliteStore::<i64, String>::builder(dir.path().join("db.sqlite"))
///     .table("missing")
///     .open()
///     .unwrap_err();
/// assert!(matches!(error, SqliteStoreError::MissingTable { .. }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum SqliteStoreError {
    /// The database file could not be opened or configured.
    Open {
        /// The database file.
        path: PathBuf,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// The configured table does not exist (and creating it was not asked for).
    MissingTable {
        /// The table name.
        table: String,
    },
    /// The table has no column of the configured name.
    MissingColumn {
        /// The table name.
        table: String,
        /// The column name.
        column: String,
    },
    /// The key column is neither the primary key nor covered by a unique index, so creates
    /// and updates cannot be told apart.
    KeyNotUnique {
        /// The table name.
        table: String,
        /// The key column.
        column: String,
    },
    /// A statement failed; a write it belonged to was rolled back.
    Statement {
        /// What the store was doing.
        operation: &'static str,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// Committing a write failed; SQLite may or may not have applied it.
    Commit {
        /// The SQLite error.
        source: rusqlite::Error,
    },
}

impl fmt::Display for SqliteStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqliteStoreError::Open { path, source } => {
                write!(
                    f,
                    "cannot open SQLite database {}: {source}",
                    path.display()
                )
            }
            SqliteStoreError::MissingTable { table } => {
                write!(f, "SQLite table {table:?} does not exist")
            }
            SqliteStoreError::MissingColumn { table, column } => {
                write!(f, "SQLite table {table:?} has no column {column:?}")
            }
            SqliteStoreError::KeyNotUnique { table, column } => write!(
                f,
                "column {column:?} of SQLite table {table:?} is not a primary key or unique"
            ),
            SqliteStoreError::Statement { operation, source } => {
                write!(f, "SQLite {operation} failed: {source}")
            }
            SqliteStoreError::Commit { source } => {
                write!(
                    f,
                    "SQLite commit failed (the write may or may not be applied): {source}"
                )
            }
        }
    }
}

impl std::error::Error for SqliteStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SqliteStoreError::Open { source, .. }
            | SqliteStoreError::Statement { source, .. }
            | SqliteStoreError::Commit { source } => Some(source),
            _ => None,
        }
    }
}

fn statement(operation: &'static str) -> impl FnOnce(rusqlite::Error) -> SqliteStoreError {
    move |source| SqliteStoreError::Statement { operation, source }
}

/// The SQL of one store, built once from its quoted names.
#[derive(Debug)]
struct Queries {
    /// The seal's key: the table's name as stored in the schema.
    table: String,
    get: String,
    /// [`get_many`](Store::get_many)'s statement for `GET_MANY_CHUNKS[i]` keys, at `i`.
    get_many: Vec<String>,
    insert: String,
    update: String,
    delete: String,
    scan_first: String,
    scan_after: String,
    /// Random rowids' rows, if the table has rowids the store can name.
    sample: Option<SampleQueries>,
}

/// The sampler's SQL: the lowest and highest rowid, and the first row at or after one.
#[derive(Debug)]
struct SampleQueries {
    bounds: String,
    pick: String,
}

impl Queries {
    /// The queries on `table` (as configured), whose seal is keyed by `canonical`; `rowid`
    /// is the name that reaches the table's rowids, if any does.
    fn new(table: &str, canonical: String, key: &str, value: &str, rowid: Option<&str>) -> Self {
        let (t, k, v) = (
            quote_identifier(table),
            quote_identifier(key),
            quote_identifier(value),
        );
        let sample = rowid.map(|r| SampleQueries {
            // One subquery each: SQLite answers a lone min() or max() from the b-tree's end.
            bounds: format!("SELECT (SELECT min({r}) FROM {t}), (SELECT max({r}) FROM {t})"),
            pick: format!("SELECT {r}, {k} FROM {t} WHERE {r} >= ?1 ORDER BY {r} LIMIT 1"),
        });
        Queries {
            sample,
            table: canonical,
            get: format!("SELECT {v} FROM {t} WHERE {k} = ?1"),
            get_many: GET_MANY_CHUNKS
                .iter()
                .map(|&n| get_many_sql(&t, &k, &v, n))
                .collect(),
            // Only a conflict on the key is absorbed; NOT NULL or CHECK failures still fail.
            insert: format!(
                "INSERT INTO {t} ({k}, {v}) VALUES (?1, ?2) ON CONFLICT ({k}) DO NOTHING"
            ),
            update: format!("UPDATE {t} SET {v} = ?2 WHERE {k} = ?1"),
            delete: format!("DELETE FROM {t} WHERE {k} = ?1"),
            scan_first: format!("SELECT {k} FROM {t} ORDER BY {k} LIMIT ?1"),
            scan_after: format!("SELECT {k} FROM {t} WHERE {k} > ?1 ORDER BY {k} LIMIT ?2"),
        }
    }
}

/// The key counts [`get_many`](Store::get_many) has a statement for: powers of two, a
/// shorter chunk padded to the next one, so a few statements serve every batch. The largest
/// binds far fewer parameters than SQLite's limit (32,766).
const GET_MANY_CHUNKS: [usize; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];

/// Statements a connection keeps prepared: the store's own (eleven, and one per entry of
/// `GET_MANY_CHUNKS`) with room to spare.
const STATEMENT_CACHE: usize = 32;

/// The values of `n` keys `?1`..`?n`, each with its position (0-based), for the keys that
/// exist: the table joined to the list of keys, so each key is matched by the same `=`
/// (the key column's affinity and collation) as in `get`, and a repeated key is answered
/// at each of its positions.
fn get_many_sql(t: &str, k: &str, v: &str, n: usize) -> String {
    let keys: Vec<String> = (0..n).map(|i| format!("({i}, ?{})", i + 1)).collect();
    format!(
        "SELECT w.column1, r.{v} FROM (VALUES {}) AS w JOIN {t} AS r ON r.{k} = w.column2",
        keys.join(", ")
    )
}

/// Configures and opens a [`SqliteStore`].
///
/// # Examples
///
/// ```
/// use cuckoo_guard::stores::SqliteStore;
///
/// let dir = tempfile::tempdir()?;
/// let store = SqliteStore::<String, Vec<u8>>::builder(dir.path().join("users.db"))
///     .table("users")
///     .key_column("email")
///     .value_column("profile")
///     .create_table_if_missing(true)
///     .connections(4)
///     .open()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `.open()` is called"]
pub struct SqliteStoreBuilder<K, V> {
    path: PathBuf,
    table: String,
    key_column: String,
    value_column: String,
    create: bool,
    connections: usize,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> SqliteStoreBuilder<K, V>
where
    K: ToSql + FromSql + ColumnType,
    V: ToSql + FromSql + ColumnType,
{
    /// The table (default `rows`).
    pub fn table(mut self, name: impl Into<String>) -> Self {
        self.table = name.into();
        self
    }

    /// The key column (default `key`); it must be the primary key or have a unique index.
    pub fn key_column(mut self, name: impl Into<String>) -> Self {
        self.key_column = name.into();
        self
    }

    /// The value column (default `value`).
    pub fn value_column(mut self, name: impl Into<String>) -> Self {
        self.value_column = name.into();
        self
    }

    /// Create the table (key as primary key, value `NOT NULL`) if it does not exist; default
    /// `false`, which makes a missing table an error.
    pub fn create_table_if_missing(mut self, create: bool) -> Self {
        self.create = create;
        self
    }

    /// Connections in the pool (default 4). SQLite in WAL mode serves reads from all of them
    /// in parallel; writes are serialized by SQLite itself.
    pub fn connections(mut self, n: usize) -> Self {
        self.connections = n.max(1);
        self
    }

    fn connect(&self) -> Result<Connection, SqliteStoreError> {
        let open = |source| SqliteStoreError::Open {
            path: self.path.clone(),
            source,
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(&self.path, flags).map_err(open)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(open)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(open)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open)?;
        Ok(conn)
    }

    /// Checks that the table has both columns and a unique key.
    fn check_schema(&self, conn: &Connection) -> Result<(), SqliteStoreError> {
        let mut columns = conn
            .prepare("SELECT name, pk FROM pragma_table_info(?1)")
            .map_err(statement("schema check"))?;
        let columns: Vec<(String, i64)> = columns
            .query_map([&self.table], |row| Ok((row.get(0)?, row.get(1)?)))
            .and_then(|rows| rows.collect())
            .map_err(statement("schema check"))?;
        if columns.is_empty() {
            return Err(SqliteStoreError::MissingTable {
                table: self.table.clone(),
            });
        }
        for column in [&self.key_column, &self.value_column] {
            if !columns.iter().any(|(name, _)| name == column) {
                return Err(SqliteStoreError::MissingColumn {
                    table: self.table.clone(),
                    column: column.clone(),
                });
            }
        }
        let sole_primary_key = columns.iter().filter(|(_, pk)| *pk > 0).count() == 1
            && columns
                .iter()
                .any(|(name, pk)| *pk > 0 && *name == self.key_column);
        let unique_index: bool = conn
            .query_row(
                "SELECT EXISTS (
                     SELECT 1 FROM pragma_index_list(?1) AS il
                     WHERE il.\"unique\" = 1
                       AND (SELECT count(*) FROM pragma_index_info(il.name)) = 1
                       AND (SELECT name FROM pragma_index_info(il.name)) = ?2)",
                [&self.table, &self.key_column],
                |row| row.get(0),
            )
            .map_err(statement("schema check"))?;
        if !sole_primary_key && !unique_index {
            return Err(SqliteStoreError::KeyNotUnique {
                table: self.table.clone(),
                column: self.key_column.clone(),
            });
        }
        Ok(())
    }

    /// The table's name as stored in the schema (as created): SQLite matches table names
    /// without regard to ASCII case, so `users` and `USERS` name one table, and the seal is
    /// keyed by this one spelling.
    fn canonical_table(&self, conn: &Connection) -> Result<String, SqliteStoreError> {
        conn.query_row(
            "SELECT name FROM sqlite_schema \
             WHERE type IN ('table', 'view') AND name = ?1 COLLATE NOCASE",
            [&self.table],
            |row| row.get(0),
        )
        .optional()
        .map_err(statement("schema check"))?
        .ok_or_else(|| SqliteStoreError::MissingTable {
            table: self.table.clone(),
        })
    }

    /// The name that reaches the table's rowids (`rowid`, `_rowid_` or `oid`, the first that
    /// no column takes), or `None` if the table has none: a `WITHOUT ROWID` table, a view, a
    /// virtual table, a name found in more than one attached schema, or every alias taken.
    fn rowid_alias(&self, conn: &Connection) -> Result<Option<&'static str>, SqliteStoreError> {
        let ordinary: bool = conn
            .query_row(
                "SELECT count(*) = 1 AND coalesce(max(type = 'table' AND wr = 0), 0) \
                 FROM pragma_table_list(?1)",
                [&self.table],
                |row| row.get(0),
            )
            .map_err(statement("schema check"))?;
        if !ordinary {
            return Ok(None);
        }
        let columns: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info(?1)")
            .and_then(|mut stmt| stmt.query_map([&self.table], |row| row.get(0))?.collect())
            .map_err(statement("schema check"))?;
        Ok(["rowid", "_rowid_", "oid"]
            .into_iter()
            .find(|alias| !columns.iter().any(|c| c.eq_ignore_ascii_case(alias))))
    }

    /// Opens the database (creating the file if needed), checks or creates the table, and
    /// fills the connection pool.
    ///
    /// # Errors
    ///
    /// [`SqliteStoreError::Open`] if the file cannot be opened; `MissingTable`,
    /// `MissingColumn` or `KeyNotUnique` if the table does not fit.
    pub fn open(self) -> Result<SqliteStore<K, V>, SqliteStoreError> {
        let first = self.connect()?;
        if self.create {
            first
                .execute_batch(&format!(
                    "CREATE TABLE IF NOT EXISTS {} ({} {} PRIMARY KEY NOT NULL, {} {} NOT NULL)",
                    quote_identifier(&self.table),
                    quote_identifier(&self.key_column),
                    K::SQLITE,
                    quote_identifier(&self.value_column),
                    V::SQLITE,
                ))
                .map_err(statement("create table"))?;
        }
        first
            .execute_batch(SEALS_TABLE)
            .map_err(statement("create the seals table"))?;
        self.check_schema(&first)?;
        let canonical = self.canonical_table(&first)?;
        let rowid = self.rowid_alias(&first)?;
        let mut pool = vec![Mutex::new(first)];
        for _ in 1..self.connections {
            pool.push(Mutex::new(self.connect()?));
        }
        Ok(SqliteStore {
            pool,
            queries: Queries::new(
                &self.table,
                canonical,
                &self.key_column,
                &self.value_column,
                rowid,
            ),
            path: self.path,
            _types: PhantomData,
        })
    }
}

/// A [`Store`] over one table of an SQLite database file.
///
/// Keys and values are any types rusqlite converts (`i64`, `String`, `Vec<u8>`, ...). The
/// store keeps a small pool of connections in WAL mode, so lookups from several threads run
/// in parallel. `put` runs `INSERT ... ON CONFLICT DO NOTHING` and, if the key existed,
/// `UPDATE`, in one immediate transaction, so it reports creates and updates exactly. Scans
/// page through the key column in order (`WHERE key > ? ORDER BY key LIMIT ?`).
///
/// Other connections may use the file alongside the store's (bulk loads, reports), given a
/// busy timeout so that they wait for the store's writes; rows they write bypass any guard in
/// front of the store.
///
/// The store keeps a guard's seal ([`Store::SEALS`]) in a table `cuckoo_guard_seals` (one row
/// per store table), which `open` creates if missing. The row is keyed (`store`) by the
/// table's name as stored in `sqlite_schema`, the spelling it was created with: SQLite
/// matches table names without regard to ASCII case, so stores opened with `table("users")`
/// and `table("USERS")` share one seal. Every `put` and `delete` clears, in its own
/// transaction, every row whose `store` equals the table's name ignoring ASCII case, so no
/// spelling's row survives a write. A program that writes the table around the guard must
/// delete that row too
/// (`DELETE FROM cuckoo_guard_seals WHERE store = 'users' COLLATE NOCASE`), or a guard
/// restarted from a sealed snapshot would not know about its rows.
///
/// The seal is a secret (the [`SealSecret`]'s 32 bytes): whoever can read it can forge a
/// snapshot file a restart trusts, so let only those read it who may write the rows.
///
/// # Sampling
///
/// [`sample_keys`](Store::sample_keys) draws random rowids between the table's lowest and
/// highest and takes the first row at or after each (`WHERE rowid >= ? ORDER BY rowid
/// LIMIT 1`, a b-tree seek), drawing again for a row already taken: O(`n` log rows). A row
/// is drawn with probability proportional to the gap of unused rowids before it plus one,
/// so rows just after deleted ranges are favoured; a table whose rowids are dense (never
/// deleted from, or an `INTEGER PRIMARY KEY` filled without holes) is sampled uniformly.
/// When the draws keep finding rows already taken (a table not much larger than `n`, or
/// very uneven gaps), the store samples by a full scan instead (the default of
/// [`Store::sample_keys`]: uniform, O(rows)), so it returns `min(n, rows)` keys. A table
/// without rowids (`WITHOUT ROWID`, a view, a virtual table, or one whose columns take the
/// names `rowid`, `_rowid_` and `oid`) is always sampled by a full scan, and
/// [`fast_sampling`](Store::fast_sampling) is `false` for it.
///
/// A `put` ends with its call ([`Store::PUT_ENDS_WITH_CALL`]): it runs its transaction on
/// the calling thread, on a connection it holds for the call, and before the call returns
/// or unwinds the transaction is committed or rolled back (a failed commit, the one error
/// whose outcome is unknown, is rolled back when the transaction drops); the store never
/// commits a transaction another call began. So a guard over the store forgets a write it
/// orphaned at its next rebuild. That holds for the call itself: a wrapper that runs it on
/// another thread for an async guard keeps running it after the caller's future is
/// dropped, and must not claim the same of its future.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, Written};
/// use cuckoo_guard::stores::SqliteStore;
/// use cuckoo_guard::CuckooFilter;
///
/// let dir = tempfile::tempdir()?;
/// let store = SqliteStore::<i64, String>::builder(dir.path().join("app.db"))
///     .create_table_if_missing(true)
///     .open()?;
/// let guard = CacheGuard::new(CuckooFilter::with_capacity(10_000), store);
/// guard.warm_up(1_000, |_| {})?;
/// assert_eq!(guard.put(&1, &"one".to_string())?, Written::Created);
/// assert_eq!(guard.get(&1)?.as_deref(), Some("one"));
/// assert_eq!(guard.get(&2)?, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SqliteStore<K = i64, V = String> {
    pool: Vec<Mutex<Connection>>,
    queries: Queries,
    path: PathBuf,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> SqliteStore<K, V>
where
    K: ToSql + FromSql + ColumnType,
    V: ToSql + FromSql + ColumnType,
{
    /// A builder for a store in the database file `path` (created if missing).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::stores::SqliteStore;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = SqliteStore::<i64, String>::builder(dir.path().join("db"))
    ///     .create_table_if_missing(true)
    ///     .open()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(path: impl AsRef<Path>) -> SqliteStoreBuilder<K, V> {
        SqliteStoreBuilder {
            path: path.as_ref().to_path_buf(),
            table: "rows".into(),
            key_column: "key".into(),
            value_column: "value".into(),
            create: false,
            connections: 4,
            _types: PhantomData,
        }
    }
}

impl<K, V> SqliteStore<K, V> {
    /// A connection for this thread: its own pool slot if free, else any free one, else wait
    /// for its own.
    fn connection(&self) -> MutexGuard<'_, Connection> {
        let start = thread_slot(self.pool.len());
        for i in 0..self.pool.len() {
            let slot = &self.pool[(start + i) % self.pool.len()];
            match slot.try_lock() {
                Ok(conn) => return conn,
                // A panic in another thread mid-call leaves the connection usable: SQLite
                // rolls back an unfinished transaction when the next one begins.
                Err(std::sync::TryLockError::Poisoned(e)) => return e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
        }
        self.pool[start].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The database file.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::stores::SqliteStore;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("db");
    /// let store = SqliteStore::<i64, String>::builder(&path).create_table_if_missing(true).open()?;
    /// assert_eq!(store.path(), path);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl<K, V> Store for SqliteStore<K, V>
where
    K: ToSql + FromSql + Hash + Eq + Clone + Send,
    V: ToSql + FromSql,
{
    type Key = K;
    type Value = V;
    type Cursor = K;
    type Error = SqliteStoreError;

    fn get(&self, key: &K) -> Result<Option<V>, SqliteStoreError> {
        let conn = self.connection();
        let mut stmt = conn
            .prepare_cached(&self.queries.get)
            .map_err(statement("get"))?;
        stmt.query_row([key as &dyn ToSql], |row| row.get(0))
            .optional()
            .map_err(statement("get"))
    }

    /// The keys as a `VALUES` list of (position, key) joined to the table on the key column,
    /// 512 keys a statement; a batch's statements run on one connection in one read
    /// transaction (one snapshot of the table).
    fn get_many(&self, keys: &[K]) -> Result<Vec<Option<V>>, SqliteStoreError> {
        let mut values: Vec<Option<V>> = std::iter::repeat_with(|| None).take(keys.len()).collect();
        let Some(last) = keys.last() else {
            return Ok(values);
        };
        let largest = GET_MANY_CHUNKS[GET_MANY_CHUNKS.len() - 1];
        let conn = self.connection();
        // Dropping the transaction ends it (a rollback: it wrote nothing).
        let _read = if keys.len() > largest {
            Some(
                conn.unchecked_transaction()
                    .map_err(statement("get_many (begin)"))?,
            )
        } else {
            None
        };
        for (chunk, start) in keys.chunks(largest).zip((0..).step_by(largest)) {
            let size = GET_MANY_CHUNKS.partition_point(|&n| n < chunk.len());
            let padded = GET_MANY_CHUNKS[size];
            let params = chunk
                .iter()
                .chain(std::iter::repeat(last).take(padded - chunk.len()));
            let mut stmt = conn
                .prepare_cached(&self.queries.get_many[size])
                .map_err(statement("get_many"))?;
            let mut rows = stmt
                .query(rusqlite::params_from_iter(params))
                .map_err(statement("get_many"))?;
            while let Some(row) = rows.next().map_err(statement("get_many"))? {
                let position: i64 = row.get(0).map_err(statement("get_many"))?;
                // A padding key's row lies past the chunk.
                if let Some(slot) = usize::try_from(position)
                    .ok()
                    .filter(|&p| p < chunk.len())
                    .and_then(|p| values.get_mut(start + p))
                {
                    *slot = Some(row.get(1).map_err(statement("get_many"))?);
                }
            }
        }
        Ok(values)
    }

    fn put(&self, key: &K, value: &V) -> Result<Written, SqliteStoreError> {
        let mut conn = self.connection();
        // Immediate: take the write lock up front, so the insert-or-update pair (and the
        // seal's clearing) is atomic.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(statement("put (begin)"))?;
        tx.prepare_cached(CLEAR_SEAL)
            .and_then(|mut stmt| stmt.execute([&self.queries.table]))
            .map_err(statement("put (clear the seal)"))?;
        let params: [&dyn ToSql; 2] = [key, value];
        let inserted = tx
            .prepare_cached(&self.queries.insert)
            .and_then(|mut stmt| stmt.execute(params))
            .map_err(statement("put (insert)"))?;
        let written = if inserted == 1 {
            Written::Created
        } else {
            tx.prepare_cached(&self.queries.update)
                .and_then(|mut stmt| stmt.execute(params))
                .map_err(statement("put (update)"))?;
            Written::Updated
        };
        // Dropping `tx` on an error above rolls the transaction back.
        tx.commit()
            .map_err(|source| SqliteStoreError::Commit { source })?;
        Ok(written)
    }

    fn delete(&self, key: &K) -> Result<bool, SqliteStoreError> {
        let mut conn = self.connection();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(statement("delete (begin)"))?;
        tx.prepare_cached(CLEAR_SEAL)
            .and_then(|mut stmt| stmt.execute([&self.queries.table]))
            .map_err(statement("delete (clear the seal)"))?;
        let deleted = tx
            .prepare_cached(&self.queries.delete)
            .and_then(|mut stmt| stmt.execute([key as &dyn ToSql]))
            .map_err(statement("delete"))?;
        tx.commit()
            .map_err(|source| SqliteStoreError::Commit { source })?;
        Ok(deleted > 0)
    }

    fn scan_keys(
        &self,
        cursor: Option<&K>,
        limit: usize,
    ) -> Result<ScanPage<K, K>, SqliteStoreError> {
        let limit = limit.clamp(1, i64::MAX as usize);
        let conn = self.connection();
        let keys: Vec<K> = match cursor {
            None => conn
                .prepare_cached(&self.queries.scan_first)
                .and_then(|mut stmt| stmt.query_map([limit as i64], |row| row.get(0))?.collect()),
            Some(after) => conn
                .prepare_cached(&self.queries.scan_after)
                .and_then(|mut stmt| {
                    let params: [&dyn ToSql; 2] = [after, &(limit as i64)];
                    stmt.query_map(params, |row| row.get(0))?.collect()
                }),
        }
        .map_err(statement("scan"))?;
        // A full page may be followed by more: the next page starts after its last key.
        let next = if keys.len() == limit {
            keys.last().cloned()
        } else {
            None
        };
        Ok(ScanPage { keys, next })
    }

    fn write_outcome_unknown(error: &SqliteStoreError) -> bool {
        // A failed statement rolls its transaction back; only a failed commit is in doubt.
        matches!(error, SqliteStoreError::Commit { .. })
    }

    /// The transaction is committed or rolled back within the call, on the calling thread
    /// (the store's docs).
    const PUT_ENDS_WITH_CALL: bool = true;

    const SEALS: bool = true;

    fn read_seal(&self) -> Result<Option<SealSecret>, SqliteStoreError> {
        let conn = self.connection();
        conn.prepare_cached("SELECT seal FROM cuckoo_guard_seals WHERE store = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([&self.queries.table], |row| {
                    row.get::<_, rusqlite::types::Value>(0)
                })
                .optional()
            })
            // An older build's integer seal (or anything but 32 bytes) is no seal.
            .map(|seal| match seal {
                Some(rusqlite::types::Value::Blob(bytes)) => SealSecret::from_slice(&bytes),
                _ => None,
            })
            .map_err(statement("read the seal"))
    }

    fn write_seal(&self, secret: &SealSecret) -> Result<(), SqliteStoreError> {
        let conn = self.connection();
        conn.prepare_cached(
            "INSERT INTO cuckoo_guard_seals (store, seal) VALUES (?1, ?2) \
             ON CONFLICT (store) DO UPDATE SET seal = excluded.seal",
        )
        .and_then(|mut stmt| stmt.execute((&self.queries.table, &secret.as_bytes()[..])))
        .map_err(statement("write the seal"))?;
        Ok(())
    }

    /// Random rowids (see [the store's docs](SqliteStore#sampling)): the row at or after each,
    /// duplicates drawn again, and a full scan's reservoir sample if the draws fall short of
    /// `n` or the table has no rowids.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::Store;
    /// use cuckoo_guard::stores::SqliteStore;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = SqliteStore::<i64, String>::builder(dir.path().join("db"))
    ///     .create_table_if_missing(true)
    ///     .open()?;
    /// for k in 0..100 {
    ///     store.put(&k, &format!("row {k}"))?;
    /// }
    /// assert!(store.fast_sampling());
    /// let sample = store.sample_keys(10)?;
    /// assert_eq!(sample.len(), 10);
    /// assert!(sample.iter().all(|k| (0..100).contains(k)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn sample_keys(&self, n: usize) -> Result<Vec<K>, SqliteStoreError> {
        let Some(sample) = &self.queries.sample else {
            return sample_by_scan(self, n);
        };
        if n == 0 {
            return Ok(Vec::new());
        }
        let drawn = {
            let conn = self.connection();
            let bounds: (Option<i64>, Option<i64>) = conn
                .prepare_cached(&sample.bounds)
                .and_then(|mut stmt| stmt.query_row([], |row| Ok((row.get(0)?, row.get(1)?))))
                .map_err(statement("sample (rowid bounds)"))?;
            let (Some(low), Some(high)) = bounds else {
                return Ok(Vec::new());
            };
            let span = (i128::from(high) - i128::from(low)).max(0) as u128;
            let mut pick = conn
                .prepare_cached(&sample.pick)
                .map_err(statement("sample"))?;
            let mut rng = SampleRng::new();
            let mut rowids = HashSet::new();
            let mut keys = Vec::with_capacity(n.min(1_024));
            // A draw that repeats a row (or finds none past a rowid deleted meanwhile) is
            // wasted; once half the draws are, the table is too small or too gappy for `n`.
            let mut wasted = 0usize;
            while keys.len() < n && wasted <= keys.len() + 16 {
                let offset = if span >= u128::from(u64::MAX) {
                    rng.next_u64()
                } else {
                    rng.below(span as u64 + 1)
                };
                let target = (i128::from(low) + i128::from(offset)) as i64;
                let row: Option<(i64, K)> = pick
                    .query_row([target], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()
                    .map_err(statement("sample"))?;
                match row {
                    Some((rowid, key)) if rowids.insert(rowid) => keys.push(key),
                    _ => wasted += 1,
                }
            }
            keys
        };
        if drawn.len() == n {
            Ok(drawn)
        } else {
            sample_by_scan(self, n)
        }
    }

    /// `true` unless the table has no rowids the store can name (see
    /// [the store's docs](SqliteStore#sampling)).
    fn fast_sampling(&self) -> bool {
        self.queries.sample.is_some()
    }
}

/// The table of seals (one row per store table, named by it), created by `open` if missing.
/// The `seal` column holds the seal secret's 32 bytes as a BLOB (its INTEGER affinity keeps
/// a BLOB as it is); an older build's integer there reads as no seal.
const SEALS_TABLE: &str = "CREATE TABLE IF NOT EXISTS cuckoo_guard_seals \
     (store TEXT PRIMARY KEY NOT NULL, seal INTEGER NOT NULL)";

/// Clears a table's seal: the first statement of every write's transaction. It ignores ASCII
/// case as SQLite's table names do, so a row keyed by any spelling of the table goes.
const CLEAR_SEAL: &str = "DELETE FROM cuckoo_guard_seals WHERE store = ?1 COLLATE NOCASE";

impl<K, V> fmt::Debug for SqliteStore<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("connections", &self.pool.len())
            .finish_non_exhaustive()
    }
}
