//! The users table behind one async guard: SQLite (its sync calls on tokio's blocking
//! threads, through the library's [`Blocking`]) or PostgreSQL, each call counted.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cuckoo_guard::guard::{
    AsyncCacheGuard, AsyncStore, Blocking, BlockingError, ScanPage, SealSecret, Written,
};
use cuckoo_guard::stores::{PostgresStore, PostgresStoreError, SqliteStore, SqliteStoreError};
use cuckoo_guard::CuckooFilter;

use crate::config::{check_table_name, BoxError, Config, Database};

/// The guard over the users table.
pub(crate) type Users = AsyncCacheGuard<Counted<UsersStore>>;

/// Database calls by kind, counted at the store.
///
/// # Examples
///
/// ```
/// let queries = users_service::Queries::default();
/// assert_eq!(queries.snapshot(), [0, 0, 0, 0]);
/// assert_eq!(queries.gets(), 0);
/// ```
#[derive(Debug, Default)]
pub struct Queries {
    get: AtomicU64,
    get_many: AtomicU64,
    put: AtomicU64,
    delete: AtomicU64,
    scan: AtomicU64,
}

impl Queries {
    /// `[get, put, delete, scan]` so far.
    ///
    /// # Examples
    ///
    /// ```
    /// let [gets, ..] = users_service::Queries::default().snapshot();
    /// assert_eq!(gets, 0);
    /// ```
    pub fn snapshot(&self) -> [u64; 4] {
        [&self.get, &self.put, &self.delete, &self.scan].map(|n| n.load(Ordering::Relaxed))
    }

    /// Lookups that reached the database.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(users_service::Queries::default().gets(), 0);
    /// ```
    pub fn gets(&self) -> u64 {
        self.get.load(Ordering::Relaxed)
    }

    /// Batch lookups that reached the database, one query each (`GET /users?ids=`).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(users_service::Queries::default().batches(), 0);
    /// ```
    pub fn batches(&self) -> u64 {
        self.get_many.load(Ordering::Relaxed)
    }

    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A store that counts its calls.
#[derive(Debug)]
pub(crate) struct Counted<S> {
    inner: S,
    queries: Arc<Queries>,
}

impl<S: AsyncStore> AsyncStore for Counted<S>
where
    S::Value: Sync,
{
    type Key = S::Key;
    type Value = S::Value;
    type Cursor = S::Cursor;
    type Error = S::Error;

    async fn get(&self, key: &S::Key) -> Result<Option<S::Value>, S::Error> {
        Queries::bump(&self.queries.get);
        self.inner.get(key).await
    }

    async fn get_many(&self, keys: &[S::Key]) -> Result<Vec<Option<S::Value>>, S::Error> {
        Queries::bump(&self.queries.get_many);
        self.inner.get_many(keys).await
    }

    async fn put(&self, key: &S::Key, value: &S::Value) -> Result<Written, S::Error> {
        Queries::bump(&self.queries.put);
        self.inner.put(key, value).await
    }

    async fn delete(&self, key: &S::Key) -> Result<bool, S::Error> {
        Queries::bump(&self.queries.delete);
        self.inner.delete(key).await
    }

    async fn scan_keys(
        &self,
        cursor: Option<&S::Cursor>,
        limit: usize,
    ) -> Result<ScanPage<S::Key, S::Cursor>, S::Error> {
        Queries::bump(&self.queries.scan);
        self.inner.scan_keys(cursor, limit).await
    }

    fn write_outcome_unknown(error: &S::Error) -> bool {
        S::write_outcome_unknown(error)
    }

    const SEALS: bool = S::SEALS;

    async fn read_seal(&self) -> Result<Option<SealSecret>, S::Error> {
        self.inner.read_seal().await
    }

    async fn write_seal(&self, secret: &SealSecret) -> Result<(), S::Error> {
        self.inner.write_seal(secret).await
    }
}

/// The users table in either database, as one async store.
#[derive(Debug)]
pub(crate) enum UsersStore {
    /// An SQLite file; each call runs on tokio's blocking threads.
    Sqlite(Blocking<SqliteStore<i64, String>>),
    /// A PostgreSQL database (boxed: its pool is much larger than the SQLite arm).
    Postgres(Box<PostgresStore<i64, String>>),
}

/// A failed call of a [`UsersStore`].
#[derive(Debug)]
pub(crate) enum UsersStoreError {
    /// Of SQLite (or of the blocking task that ran it).
    Sqlite(BlockingError<SqliteStoreError>),
    /// Of PostgreSQL.
    Postgres(PostgresStoreError),
}

impl fmt::Display for UsersStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UsersStoreError::Sqlite(error) => error.fmt(f),
            UsersStoreError::Postgres(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for UsersStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            UsersStoreError::Sqlite(error) => Some(error),
            UsersStoreError::Postgres(error) => Some(error),
        }
    }
}

/// Runs one call on whichever store `$store` is, as `$s`, and wraps its error.
macro_rules! either {
    ($store:expr, $s:ident => $call:expr) => {
        match $store {
            UsersStore::Sqlite($s) => $call.await.map_err(UsersStoreError::Sqlite),
            UsersStore::Postgres($s) => $call.await.map_err(UsersStoreError::Postgres),
        }
    };
}

impl AsyncStore for UsersStore {
    type Key = i64;
    type Value = String;
    type Cursor = i64;
    type Error = UsersStoreError;

    async fn get(&self, key: &i64) -> Result<Option<String>, UsersStoreError> {
        either!(self, s => s.get(key))
    }

    async fn get_many(&self, keys: &[i64]) -> Result<Vec<Option<String>>, UsersStoreError> {
        either!(self, s => s.get_many(keys))
    }

    async fn put(&self, key: &i64, value: &String) -> Result<Written, UsersStoreError> {
        either!(self, s => s.put(key, value))
    }

    async fn delete(&self, key: &i64) -> Result<bool, UsersStoreError> {
        either!(self, s => s.delete(key))
    }

    async fn scan_keys(
        &self,
        cursor: Option<&i64>,
        limit: usize,
    ) -> Result<ScanPage<i64, i64>, UsersStoreError> {
        either!(self, s => s.scan_keys(cursor, limit))
    }

    fn write_outcome_unknown(error: &UsersStoreError) -> bool {
        match error {
            UsersStoreError::Sqlite(error) => {
                <Blocking<SqliteStore<i64, String>> as AsyncStore>::write_outcome_unknown(error)
            }
            UsersStoreError::Postgres(error) => {
                <PostgresStore<i64, String> as AsyncStore>::write_outcome_unknown(error)
            }
        }
    }

    const SEALS: bool = <Blocking<SqliteStore<i64, String>> as AsyncStore>::SEALS
        && <PostgresStore<i64, String> as AsyncStore>::SEALS;

    async fn read_seal(&self) -> Result<Option<SealSecret>, UsersStoreError> {
        either!(self, s => s.read_seal())
    }

    async fn write_seal(&self, secret: &SealSecret) -> Result<(), UsersStoreError> {
        either!(self, s => s.write_seal(secret))
    }
}

/// Opens (and seeds) the SQLite store; blocking, so it runs on tokio's blocking pool.
fn open_sqlite(
    path: &std::path::Path,
    table: &str,
    connections: usize,
    seed: u64,
) -> Result<SqliteStore<i64, String>, BoxError> {
    let store = SqliteStore::<i64, String>::builder(path)
        .table(table)
        .key_column("id")
        .value_column("name")
        .create_table_if_missing(true)
        .connections(connections)
        .open()?;
    if seed > 0 {
        let connection = rusqlite::Connection::open(path)?;
        connection.busy_timeout(Duration::from_secs(30))?;
        connection.execute(
            &format!(
                "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1) \
                 INSERT OR IGNORE INTO {table} (id, name) SELECT i, 'user ' || i FROM s"
            ),
            [i64::try_from(seed)?],
        )?;
    }
    Ok(store)
}

/// Opens (and seeds) the PostgreSQL store.
async fn open_postgres(url: &str, config: &Config) -> Result<PostgresStore<i64, String>, BoxError> {
    let store = PostgresStore::<i64, String>::builder(url.to_owned())
        .table(&config.table)
        .key_column("id")
        .value_column("name")
        .create_table_if_missing(true)
        .connections(config.connections)
        .connect()
        .await?;
    if config.seed > 0 {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        let driver = tokio::spawn(connection);
        client
            .execute(
                &format!(
                    "INSERT INTO {} (id, name) SELECT g, 'user ' || g \
                     FROM generate_series(1, $1::bigint) g ON CONFLICT DO NOTHING",
                    config.table
                ),
                &[&i64::try_from(config.seed)?],
            )
            .await?;
        drop(client);
        driver.await??;
    }
    Ok(store)
}

/// Opens (and seeds) the database `config` names, and puts a warming guard in front of it
/// whose store counts its calls in `queries`.
pub(crate) async fn open(config: &Config, queries: &Arc<Queries>) -> Result<Users, BoxError> {
    check_table_name(&config.table)?;
    let filter = CuckooFilter::with_capacity(config.seed.clamp(1_000, 1 << 30) as usize);
    let store = match &config.database {
        Database::Sqlite(path) => {
            let (path, table, connections, seed) = (
                path.clone(),
                config.table.clone(),
                config.connections,
                config.seed,
            );
            let store =
                tokio::task::spawn_blocking(move || open_sqlite(&path, &table, connections, seed))
                    .await??;
            UsersStore::Sqlite(Blocking::new(store))
        }
        Database::Postgres(url) => {
            UsersStore::Postgres(Box::new(open_postgres(url, config).await?))
        }
    };
    let store = Counted {
        inner: store,
        queries: Arc::clone(queries),
    };
    Ok(AsyncCacheGuard::new(filter, store))
}
