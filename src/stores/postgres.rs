//! [`PostgresStore`]: a PostgreSQL table (feature `postgres`).
//!
//! Built on tokio-postgres rather than sqlx: the adapter needs a handful of prepared
//! statements and no query macros, pools or compile-time checks, and tokio-postgres brings 60
//! crates where sqlx (postgres and tokio only, no default features) brings 115.

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;

use tokio_postgres::types::{FromSqlOwned, ToSql};
use tokio_postgres::{Client, NoTls, Statement};

use super::{quote_identifier, ColumnType};
use crate::guard::{AsyncStore, ScanPage, Written};
use crate::sync::{AtomicU64, Ordering};

/// Why a [`PostgresStore`] operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum PostgresStoreError {
    /// The server could not be reached or refused the connection.
    Connect {
        /// The driver's error.
        source: tokio_postgres::Error,
    },
    /// The configured table does not exist in the current schema (and creating it was not
    /// asked for).
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
    /// The key column has no unique constraint, so creates and updates cannot be told apart.
    KeyNotUnique {
        /// The table name.
        table: String,
        /// The key column.
        column: String,
    },
    /// A statement failed. If the server reported the error, the statement was not applied;
    /// if the connection failed, a write may or may not have been.
    Query {
        /// What the store was doing.
        operation: &'static str,
        /// The driver's error.
        source: tokio_postgres::Error,
    },
}

impl fmt::Display for PostgresStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostgresStoreError::Connect { source } => {
                write!(f, "cannot connect to PostgreSQL: {source}")
            }
            PostgresStoreError::MissingTable { table } => {
                write!(f, "PostgreSQL table {table:?} does not exist")
            }
            PostgresStoreError::MissingColumn { table, column } => {
                write!(f, "PostgreSQL table {table:?} has no column {column:?}")
            }
            PostgresStoreError::KeyNotUnique { table, column } => write!(
                f,
                "column {column:?} of PostgreSQL table {table:?} has no unique constraint"
            ),
            PostgresStoreError::Query { operation, source } => {
                write!(f, "PostgreSQL {operation} failed: {source}")
            }
        }
    }
}

impl std::error::Error for PostgresStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PostgresStoreError::Connect { source } | PostgresStoreError::Query { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }
}

fn query(operation: &'static str) -> impl FnOnce(tokio_postgres::Error) -> PostgresStoreError {
    move |source| PostgresStoreError::Query { operation, source }
}

/// One connection and its prepared statements.
struct Connection {
    client: Client,
    get: Statement,
    put: Statement,
    delete: Statement,
    scan_first: Statement,
    scan_after: Statement,
}

/// Configures and connects a [`PostgresStore`].
///
/// # Examples
///
/// ```no_run
/// use cuckoo_guard::stores::PostgresStore;
///
/// # async fn connect() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::<i64, String>::builder("postgres://postgres@127.0.0.1/test")
///     .table("users")
///     .key_column("id")
///     .value_column("name")
///     .connections(8)
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `.connect()` is called"]
pub struct PostgresStoreBuilder<K, V> {
    url: String,
    table: String,
    key_column: String,
    value_column: String,
    create: bool,
    connections: usize,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> PostgresStoreBuilder<K, V>
where
    K: ToSql + FromSqlOwned + ColumnType + Sync,
    V: ToSql + FromSqlOwned + ColumnType + Sync,
{
    /// The table (default `rows`), in the connection's current schema.
    pub fn table(mut self, name: impl Into<String>) -> Self {
        self.table = name.into();
        self
    }

    /// The key column (default `key`); it must have a unique constraint.
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

    /// Connections to open (default 4). Each also pipelines concurrent requests.
    pub fn connections(mut self, n: usize) -> Self {
        self.connections = n.max(1);
        self
    }

    async fn open_client(&self) -> Result<Client, PostgresStoreError> {
        let (client, connection) = tokio_postgres::connect(&self.url, NoTls)
            .await
            .map_err(|source| PostgresStoreError::Connect { source })?;
        // The connection task ends when the client (and so the store) is dropped.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    async fn check_schema(&self, client: &Client) -> Result<(), PostgresStoreError> {
        let columns: Vec<String> = client
            .query(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = $1",
                &[&self.table],
            )
            .await
            .map_err(query("schema check"))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        if columns.is_empty() {
            return Err(PostgresStoreError::MissingTable {
                table: self.table.clone(),
            });
        }
        for column in [&self.key_column, &self.value_column] {
            if !columns.contains(column) {
                return Err(PostgresStoreError::MissingColumn {
                    table: self.table.clone(),
                    column: column.clone(),
                });
            }
        }
        // `ON CONFLICT (key)` needs a unique index on exactly the key column, without a
        // predicate or expression. PostgreSQL only checks that when it plans the statement,
        // so check it here to fail at start-up rather than on the first write.
        let unique: bool = client
            .query_one(
                "SELECT EXISTS (
                     SELECT 1 FROM pg_index i
                     JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                     WHERE i.indrelid = to_regclass(format('%I', $1::text))
                       AND i.indisunique AND i.indnkeyatts = 1
                       AND i.indpred IS NULL AND i.indexprs IS NULL
                       AND a.attname = $2::text)",
                &[&self.table, &self.key_column],
            )
            .await
            .map_err(query("schema check"))?
            .get(0);
        if !unique {
            return Err(PostgresStoreError::KeyNotUnique {
                table: self.table.clone(),
                column: self.key_column.clone(),
            });
        }
        Ok(())
    }

    async fn prepare(&self, client: Client) -> Result<Connection, PostgresStoreError> {
        let (t, k, v) = (
            quote_identifier(&self.table),
            quote_identifier(&self.key_column),
            quote_identifier(&self.value_column),
        );
        let prepare = |sql: String| {
            let client = &client;
            async move { client.prepare(&sql).await.map_err(query("prepare")) }
        };
        Ok(Connection {
            put: prepare(format!(
                "INSERT INTO {t} ({k}, {v}) VALUES ($1, $2) \
                 ON CONFLICT ({k}) DO UPDATE SET {v} = EXCLUDED.{v} \
                 RETURNING (xmax = 0) AS created"
            ))
            .await?,
            get: prepare(format!("SELECT {v} FROM {t} WHERE {k} = $1")).await?,
            delete: prepare(format!("DELETE FROM {t} WHERE {k} = $1")).await?,
            scan_first: prepare(format!("SELECT {k} FROM {t} ORDER BY {k} LIMIT $1")).await?,
            scan_after: prepare(format!(
                "SELECT {k} FROM {t} WHERE {k} > $1 ORDER BY {k} LIMIT $2"
            ))
            .await?,
            client,
        })
    }

    /// Connects, checks or creates the table, and prepares the statements on every
    /// connection. Must run inside a tokio runtime, which then drives the connections.
    ///
    /// # Errors
    ///
    /// [`PostgresStoreError::Connect`] if the server cannot be reached; `MissingTable`,
    /// `MissingColumn` or `KeyNotUnique` if the table does not fit.
    pub async fn connect(self) -> Result<PostgresStore<K, V>, PostgresStoreError> {
        let first = self.open_client().await?;
        if self.create {
            first
                .batch_execute(&format!(
                    "CREATE TABLE IF NOT EXISTS {} ({} {} PRIMARY KEY, {} {} NOT NULL)",
                    quote_identifier(&self.table),
                    quote_identifier(&self.key_column),
                    K::POSTGRES,
                    quote_identifier(&self.value_column),
                    V::POSTGRES,
                ))
                .await
                .map_err(query("create table"))?;
        }
        self.check_schema(&first).await?;
        let mut connections = vec![self.prepare(first).await?];
        for _ in 1..self.connections {
            let client = self.open_client().await?;
            connections.push(self.prepare(client).await?);
        }
        Ok(PostgresStore {
            connections,
            next: AtomicU64::new(0),
            table: self.table,
            _types: PhantomData,
        })
    }
}

/// An [`AsyncStore`] over one PostgreSQL table.
///
/// `put` is one `INSERT ... ON CONFLICT (key) DO UPDATE ... RETURNING (xmax = 0)`, which
/// reports exactly whether the row was created. Scans page through the key column in order.
/// Requests are spread round-robin over a few connections, each of which also pipelines.
///
/// # Examples
///
/// ```no_run
/// use cuckoo_guard::guard::AsyncCacheGuard;
/// use cuckoo_guard::stores::PostgresStore;
/// use cuckoo_guard::CuckooFilter;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::<i64, String>::builder("postgres://postgres@127.0.0.1/test")
///     .create_table_if_missing(true)
///     .connect()
///     .await?;
/// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000_000), store);
/// guard.warm_up(10_000, |_| {}).await?;
/// let row = guard.get(&42).await?;
/// # Ok(()) }
/// ```
pub struct PostgresStore<K = i64, V = String> {
    connections: Vec<Connection>,
    /// Round-robin position: async tasks share a few worker threads, so requests are spread
    /// per call rather than per thread.
    next: AtomicU64,
    table: String,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> PostgresStore<K, V>
where
    K: ToSql + FromSqlOwned + ColumnType + Sync,
    V: ToSql + FromSqlOwned + ColumnType + Sync,
{
    /// A builder for a store reached at `url` (`postgres://user@host:port/database`).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::stores::PostgresStore;
    ///
    /// let builder = PostgresStore::<i64, String>::builder("postgres://postgres@127.0.0.1/test")
    ///     .table("accounts");
    /// ```
    pub fn builder(url: impl Into<String>) -> PostgresStoreBuilder<K, V> {
        PostgresStoreBuilder {
            url: url.into(),
            table: "rows".into(),
            key_column: "key".into(),
            value_column: "value".into(),
            create: false,
            connections: 4,
            _types: PhantomData,
        }
    }
}

impl<K, V> PostgresStore<K, V> {
    fn connection(&self) -> &Connection {
        // ORDERING: Relaxed; only spreads load, publishes nothing.
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        &self.connections[(turn % self.connections.len() as u64) as usize]
    }
}

impl<K, V> AsyncStore for PostgresStore<K, V>
where
    K: ToSql + FromSqlOwned + Hash + Clone + Send + Sync,
    V: ToSql + FromSqlOwned + Send + Sync,
{
    type Key = K;
    type Value = V;
    type Cursor = K;
    type Error = PostgresStoreError;

    async fn get(&self, key: &K) -> Result<Option<V>, PostgresStoreError> {
        let c = self.connection();
        let row = c
            .client
            .query_opt(&c.get, &[key])
            .await
            .map_err(query("get"))?;
        row.map(|row| row.try_get(0))
            .transpose()
            .map_err(query("get"))
    }

    async fn put(&self, key: &K, value: &V) -> Result<Written, PostgresStoreError> {
        let c = self.connection();
        let row = c
            .client
            .query_one(&c.put, &[key, value])
            .await
            .map_err(query("put"))?;
        let created: bool = row.try_get(0).map_err(query("put"))?;
        Ok(if created {
            Written::Created
        } else {
            Written::Updated
        })
    }

    async fn delete(&self, key: &K) -> Result<bool, PostgresStoreError> {
        let c = self.connection();
        let deleted = c
            .client
            .execute(&c.delete, &[key])
            .await
            .map_err(query("delete"))?;
        Ok(deleted > 0)
    }

    async fn scan_keys(
        &self,
        cursor: Option<&K>,
        limit: usize,
    ) -> Result<ScanPage<K, K>, PostgresStoreError> {
        let c = self.connection();
        let limit = limit.clamp(1, i64::MAX as usize) as i64;
        let rows = match cursor {
            None => c.client.query(&c.scan_first, &[&limit]).await,
            Some(after) => c.client.query(&c.scan_after, &[after, &limit]).await,
        }
        .map_err(query("scan"))?;
        let keys = rows
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<Vec<K>, _>>()
            .map_err(query("scan"))?;
        let next = if keys.len() as i64 == limit {
            keys.last().cloned()
        } else {
            None
        };
        Ok(ScanPage { keys, next })
    }

    fn write_outcome_unknown(error: &PostgresStoreError) -> bool {
        // Each write is one autocommit statement: if the server answered with an error, the
        // statement was rolled back. A broken connection leaves the outcome unknown.
        match error {
            PostgresStoreError::Query { source, .. } => source.as_db_error().is_none(),
            _ => true,
        }
    }
}

impl<K, V> fmt::Debug for PostgresStore<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.table)
            .field("connections", &self.connections.len())
            .finish_non_exhaustive()
    }
}
