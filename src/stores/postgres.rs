//! [`PostgresStore`]: a PostgreSQL table (feature `postgres`).
//!
//! Built on tokio-postgres rather than sqlx: the adapter needs a handful of prepared
//! statements and no query macros or compile-time checks, and tokio-postgres brings 60
//! crates where sqlx (postgres and tokio only, no default features) brings 115.
//!
//! How the store reconnects after faults: [`PostgresStore`'s docs](PostgresStore#connections-and-faults).

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod};
use tokio_postgres::types::{FromSqlOwned, ToSql};
use tokio_postgres::{Client, NoTls};

use super::{quote_identifier, ColumnType};
use crate::guard::{AsyncStore, ScanPage, SealSecret, Written};

/// Why a [`PostgresStore`] operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum PostgresStoreError {
    /// The server could not be reached or refused the connection.
    Connect {
        /// The driver's error.
        source: tokio_postgres::Error,
    },
    /// No table of the configured name is found through the connection's `search_path` (and
    /// creating it was not asked for).
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
    /// The server could not be reached a moment ago, and the store waits before trying again
    /// (see [`PostgresStore`](PostgresStore#connections-and-faults)); nothing was sent.
    Unavailable {
        /// How long until the next connection attempt.
        retry_in: Duration,
    },
    /// No connection could be opened or taken from the pool in time; nothing was sent.
    ConnectTimeout,
    /// The call had no answer within its time (the statement timeout plus the connect
    /// timeout, see [`PostgresStoreBuilder::statement_timeout`]): the server stopped
    /// answering without closing the connection. A write may or may not have been applied,
    /// and may still be, if the server resumes.
    Timeout {
        /// What the store was doing.
        operation: &'static str,
        /// How long the call waited.
        after: Duration,
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
                write!(f, "cannot connect to PostgreSQL: {}", Detail(source))
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
            PostgresStoreError::Unavailable { retry_in } => write!(
                f,
                "PostgreSQL is unreachable; the next connection attempt is in {} ms",
                retry_in.as_millis()
            ),
            PostgresStoreError::ConnectTimeout => {
                write!(f, "cannot connect to PostgreSQL: timed out")
            }
            PostgresStoreError::Timeout { operation, after } => write!(
                f,
                "PostgreSQL {operation} timed out: no answer from the server within {} ms",
                after.as_millis()
            ),
            PostgresStoreError::Query { operation, source } => {
                write!(f, "PostgreSQL {operation} failed: {}", Detail(source))
            }
        }
    }
}

/// A driver error with what its own `Display` leaves out: the server's message and SQL state
/// ("db error" alone says nothing), or the cause of a connection failure.
struct Detail<'a>(&'a tokio_postgres::Error);

impl fmt::Display for Detail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(db) = self.0.as_db_error() {
            return write!(
                f,
                "{}: {} (SQL state {})",
                db.severity(),
                db.message(),
                db.code().code()
            );
        }
        write!(f, "{}", self.0)?;
        if let Some(cause) = std::error::Error::source(self.0) {
            write!(f, ": {cause}")?;
        }
        Ok(())
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

/// The store's statements, prepared on each pooled connection when first used. They name
/// the data table and the seals table by schema, so they reach the same tables whatever a
/// session's `search_path`.
#[derive(Debug, Default)]
struct Sql {
    get: String,
    /// The rows of an array of keys, each with its key's position (1-based).
    get_many: String,
    /// A statement whose `$1` the server types as an array of what `get`'s `$1` is: the type
    /// `get_many` is prepared with.
    get_many_type: String,
    put: String,
    delete: String,
    scan_first: String,
    scan_after: String,
    read_seal: String,
    write_seal: String,
    /// The table's statistics and size now, for [`sample_plan`].
    sample_stats: String,
    /// `n` rows of a `TABLESAMPLE SYSTEM` sample, in random order.
    sample_system: String,
    /// `n` rows of the whole table, in random order.
    sample_sort: String,
}

/// How `sample_keys` reads the table.
#[derive(Debug, Clone, Copy, PartialEq)]
enum SamplePlan {
    /// Every row in random order, the first `n` kept (`ORDER BY random() LIMIT n`): uniform,
    /// O(rows).
    Sort,
    /// The rows of a random share of the table's blocks (`TABLESAMPLE SYSTEM (percent)`) in
    /// random order, the first `n` kept.
    System {
        /// The share of blocks, in percent.
        percent: f32,
    },
}

/// Rows a block sample aims for, per row asked for: block samples vary, and statistics age.
const SAMPLE_OVERDRAW: f64 = 2.0;
/// The fewest blocks a block sample aims for, so `n` rows come from more than a handful.
const SAMPLE_MIN_BLOCKS: f64 = 32.0;
/// The share of blocks above which a sort of the whole table is about as cheap.
const SAMPLE_SORT_ABOVE: f64 = 0.5;

/// How to sample `n` rows of a relation of kind `relkind` (`pg_class.relkind`) that takes
/// `pages` blocks now and had `reltuples` rows in `relpages` blocks when last analyzed
/// (`reltuples` < 0: never). Without statistics a block is taken to hold one row, which
/// overdraws rather than falls short. Only tables and materialized views can be sampled by
/// block; anything else (a view, a partitioned table) is sorted.
fn sample_plan(n: usize, reltuples: f64, relpages: i64, relkind: &str, pages: i64) -> SamplePlan {
    if !matches!(relkind, "r" | "m") || pages < 1 {
        return SamplePlan::Sort;
    }
    let density = if reltuples > 0.0 && relpages > 0 {
        reltuples / relpages as f64
    } else {
        1.0
    };
    let pages = pages as f64;
    let share = (SAMPLE_OVERDRAW * n as f64 / (pages * density)).max(SAMPLE_MIN_BLOCKS / pages);
    plan_for_share(share)
}

/// A block sample of `share` of the blocks, or a sort if that is most of them.
fn plan_for_share(share: f64) -> SamplePlan {
    if share.is_nan() || share >= SAMPLE_SORT_ABOVE {
        SamplePlan::Sort
    } else {
        SamplePlan::System {
            percent: (share * 100.0) as f32,
        }
    }
}

/// The table of seals (one row per store table, named by it), created by `connect` if
/// missing in the data table's schema; `{seals}` stands for its schema-qualified name.
/// `secret` holds the seal secret's 32 bytes; `seal` is 0 in every row this build writes (an
/// older build, which reads `seal` as its id, never trusts a file with 0), and a row without
/// a secret (an older build's) reads as no seal.
const SEALS_TABLE: &str = "CREATE TABLE IF NOT EXISTS {seals} \
     (store TEXT PRIMARY KEY, seal BIGINT NOT NULL, secret BYTEA)";
/// Adds the secret's column to a seals table an older build created.
const SEALS_SECRET_COLUMN: &str = "ALTER TABLE {seals} ADD COLUMN IF NOT EXISTS secret BYTEA";
const READ_SEAL: &str = "SELECT secret FROM {seals} WHERE store = $1";
const WRITE_SEAL: &str = "INSERT INTO {seals} (store, seal, secret) VALUES ($1, 0, $2) \
     ON CONFLICT (store) DO UPDATE SET seal = EXCLUDED.seal, secret = EXCLUDED.secret";

/// The seals table's name, unqualified.
const SEALS: &str = "cuckoo_guard_seals";

/// The head of a write that clears the store's seal in the same statement, the table's name
/// being parameter `$n`: a data-modifying `WITH` runs whether or not the statement reads it,
/// and commits or rolls back with the write.
fn clear_seal(seals: &str, n: u8) -> String {
    format!("WITH unseal AS (DELETE FROM {seals} WHERE store = ${n}::text) ")
}

/// A table, as resolved at connect: its schema and its name, as the catalog holds them.
#[derive(Debug, Clone)]
struct Resolved {
    schema: String,
    name: String,
}

impl Resolved {
    /// `"schema"."name"`.
    fn qualified(&self) -> String {
        format!(
            "{}.{}",
            quote_identifier(&self.schema),
            quote_identifier(&self.name)
        )
    }

    /// The seals table beside this one, `"schema"."cuckoo_guard_seals"`.
    fn seals(&self) -> String {
        format!(
            "{}.{}",
            quote_identifier(&self.schema),
            quote_identifier(SEALS)
        )
    }
}

/// The wait between connection attempts while the server cannot be reached.
#[derive(Debug, Default)]
struct Backoff {
    state: Mutex<BackoffState>,
}

#[derive(Debug, Default)]
struct BackoffState {
    /// No attempt before this instant.
    until: Option<Instant>,
    /// The wait after the next failure.
    delay: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(1);

    fn state(&self) -> std::sync::MutexGuard<'_, BackoffState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long callers must still wait, if at all.
    fn remaining(&self) -> Option<Duration> {
        let until = self.state().until?;
        until.checked_duration_since(Instant::now())
    }

    fn failed(&self) {
        let mut state = self.state();
        let delay = state.delay.clamp(Self::FIRST, Self::MAX);
        state.until = Some(Instant::now() + delay);
        state.delay = (delay * 2).min(Self::MAX);
    }

    fn succeeded(&self) {
        let mut state = self.state();
        if state.until.is_some() {
            *state = BackoffState::default();
        }
    }
}

/// Whether `error` says the connection broke rather than the statement failed on the server:
/// the client saw it close, or the server is shutting the session down (SQL state class 57,
/// operator intervention, or 08, connection exception). A statement the server cancelled
/// (57014: its `statement_timeout`, a cancel request) leaves the connection as it was.
fn connection_broke(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    match error.code() {
        Some(code) => {
            let code = code.code();
            (code.starts_with("57") && code != "57014") || code.starts_with("08")
        }
        None => error.as_db_error().is_none(),
    }
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
#[derive(Clone)]
#[must_use = "a builder does nothing until `.connect()` is called"]
pub struct PostgresStoreBuilder<K, V> {
    url: String,
    table: String,
    key_column: String,
    value_column: String,
    create: bool,
    connections: usize,
    statement_timeout: Option<Duration>,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> PostgresStoreBuilder<K, V>
where
    K: ToSql + FromSqlOwned + ColumnType + Sync,
    V: ToSql + FromSqlOwned + ColumnType + Sync,
{
    /// The table (default `rows`): one identifier, matched exactly (quoted), found through
    /// the connection's `search_path` once at connect; the store then names it by its
    /// schema. A missing table is created in the current schema (the first existing one on
    /// the `search_path`).
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

    /// The most connections to hold (default 8); each serves one call at a time, and they
    /// are opened as calls need them.
    pub fn connections(mut self, n: usize) -> Self {
        self.connections = n.max(1);
        self
    }

    /// How long one statement may run (default 10 s; `None`: no limit). Each connection
    /// sets the server's `statement_timeout` to it, so the server cancels a statement that
    /// runs longer (a definite failure: the statement is rolled back). A server that stops
    /// answering altogether (stopped, or cut off without the connection closing) enforces
    /// nothing, so each call also gives up on its own after the statement timeout plus the
    /// connect timeout (2 s), with [`PostgresStoreError::Timeout`]; a write that timed out
    /// this way may or may not have been applied
    /// ([`write_outcome_unknown`](AsyncStore::write_outcome_unknown) says so). The
    /// client-side limit needs the tokio runtime's timer (`enable_time`, or `enable_all`).
    /// Whole milliseconds count; a limit below 1 ms is taken as 1 ms. The server's setting
    /// travels as a startup option (`-c statement_timeout=...`, after the URL's own
    /// `options`); a pooler that refuses startup options (PgBouncer without
    /// `ignore_startup_parameters = options`) refuses the connection, and then only `None`
    /// connects.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cuckoo_guard::stores::PostgresStore;
    ///
    /// let builder = PostgresStore::<i64, String>::builder("postgres://postgres@127.0.0.1/test")
    ///     .statement_timeout(Some(Duration::from_secs(2)));
    /// ```
    pub fn statement_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.statement_timeout = timeout.map(|t| t.max(Duration::from_millis(1)));
        self
    }

    /// The table the configured name reaches through the `search_path`, with its schema.
    async fn resolve(&self, client: &Client) -> Result<Resolved, PostgresStoreError> {
        let row = client
            .query_opt(
                "SELECT n.nspname::text, c.relname::text FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE c.oid = to_regclass(format('%I', $1::text))",
                &[&self.table],
            )
            .await
            .map_err(query("schema check"))?;
        match row {
            Some(row) => Ok(Resolved {
                schema: row.get(0),
                name: row.get(1),
            }),
            None => Err(PostgresStoreError::MissingTable {
                table: self.table.clone(),
            }),
        }
    }

    async fn check_schema(
        &self,
        client: &Client,
        table: &Resolved,
    ) -> Result<(), PostgresStoreError> {
        let columns: Vec<String> = client
            .query(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = $1 AND table_name = $2",
                &[&table.schema, &table.name],
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
                     WHERE i.indrelid = to_regclass(format('%I.%I', $1::text, $2::text))
                       AND i.indisunique AND i.indnkeyatts = 1
                       AND i.indpred IS NULL AND i.indexprs IS NULL
                       AND a.attname = $3::text)",
                &[&table.schema, &table.name, &self.key_column],
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

    fn sql(&self, table: &Resolved) -> Sql {
        let (t, k, v) = (
            table.qualified(),
            quote_identifier(&self.key_column),
            quote_identifier(&self.value_column),
        );
        let seals = table.seals();
        Sql {
            put: format!(
                "{}INSERT INTO {t} ({k}, {v}) VALUES ($1, $2) \
                 ON CONFLICT ({k}) DO UPDATE SET {v} = EXCLUDED.{v} \
                 RETURNING (xmax = 0) AS created",
                clear_seal(&seals, 3)
            ),
            get: format!("SELECT {v} FROM {t} WHERE {k} = $1"),
            // `$1` is prepared with the type `= ANY($1)` gives it (for a domain over a type,
            // an array of that type, as `= $1` in `get` takes the type itself); the join
            // matches each key by the same `=` as `get`.
            get_many: format!(
                "SELECT w.i, r.{v} FROM unnest($1) WITH ORDINALITY AS w(k, i) \
                 JOIN {t} AS r ON r.{k} = w.k"
            ),
            get_many_type: format!("SELECT 1 FROM {t} WHERE {k} = ANY($1) LIMIT 0"),
            delete: format!("{}DELETE FROM {t} WHERE {k} = $1", clear_seal(&seals, 2)),
            scan_first: format!("SELECT {k} FROM {t} ORDER BY {k} LIMIT $1"),
            scan_after: format!("SELECT {k} FROM {t} WHERE {k} > $1 ORDER BY {k} LIMIT $2"),
            read_seal: READ_SEAL.replace("{seals}", &seals),
            write_seal: WRITE_SEAL.replace("{seals}", &seals),
            sample_stats: "SELECT c.reltuples::float8, c.relpages::int8, c.relkind::text, \
                 (pg_relation_size(c.oid) / current_setting('block_size')::int8)::int8 \
                 FROM pg_class c WHERE c.oid = to_regclass(format('%I.%I', $1::text, $2::text))"
                .to_owned(),
            sample_system: format!(
                "SELECT {k} FROM {t} TABLESAMPLE SYSTEM ($1) ORDER BY random() LIMIT $2"
            ),
            sample_sort: format!("SELECT {k} FROM {t} ORDER BY random() LIMIT $1"),
        }
    }

    /// Connects, checks or creates the table, and prepares the statements. Must run inside
    /// a tokio runtime, which then drives the connections.
    ///
    /// # Errors
    ///
    /// [`PostgresStoreError::Connect`] if the URL is invalid or the server cannot be reached;
    /// `MissingTable`, `MissingColumn` or `KeyNotUnique` if the table does not fit.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cuckoo_guard::stores::PostgresStore;
    ///
    /// # async fn connect() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PostgresStore::<i64, String>::builder("postgres://postgres@127.0.0.1/test")
    ///     .create_table_if_missing(true)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(self) -> Result<PostgresStore<K, V>, PostgresStoreError> {
        let mut config: tokio_postgres::Config = self
            .url
            .parse()
            .map_err(|source| PostgresStoreError::Connect { source })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if let Some(timeout) = self.statement_timeout {
            // Appended to the URL's own options: a later `-c` of one setting wins.
            let options = format!(
                "{} -c statement_timeout={}",
                config.get_options().unwrap_or_default(),
                timeout.as_millis()
            );
            config.options(options.trim_start());
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(self.connections)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|_| PostgresStoreError::ConnectTimeout)?;
        let mut store = PostgresStore {
            pool,
            // Set once the table is resolved below.
            sql: Sql::default(),
            backoff: Backoff::default(),
            schema: String::new(),
            table: self.table.clone(),
            connections: self.connections,
            call_limit: self.statement_timeout.map(|t| t + CONNECT_TIMEOUT),
            _types: PhantomData,
        };
        let first = store.client().await?;
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
        let table = self.resolve(&first).await?;
        self.check_schema(&first, &table).await?;
        create_seals_table(&first, &table).await?;
        store.sql = self.sql(&table);
        store.schema = table.schema;
        store.table = table.name;
        for sql in [&store.sql.get, &store.sql.put, &store.sql.delete] {
            first.prepare_cached(sql).await.map_err(query("prepare"))?;
        }
        drop(first);
        Ok(store)
    }
}

/// Creates the seals table if it is missing, and its `secret` column if an older build
/// created the table. Two stores connecting at once may both try; the one whose statement
/// fails finds the table (or the column) there.
async fn create_seals_table(client: &Client, table: &Resolved) -> Result<(), PostgresStoreError> {
    if !seals_table_exists(client, table).await? {
        match client
            .batch_execute(&SEALS_TABLE.replace("{seals}", &table.seals()))
            .await
        {
            Ok(()) => {}
            Err(_) if seals_table_exists(client, table).await? => {}
            Err(source) => return Err(query("create the seals table")(source)),
        }
    }
    if seals_secret_column_exists(client, table).await? {
        return Ok(());
    }
    match client
        .batch_execute(&SEALS_SECRET_COLUMN.replace("{seals}", &table.seals()))
        .await
    {
        Ok(()) => Ok(()),
        Err(_) if seals_secret_column_exists(client, table).await? => Ok(()),
        Err(source) => Err(query("add the seals table's secret column")(source)),
    }
}

/// Whether the seals table in `table`'s schema has the `secret` column.
async fn seals_secret_column_exists(
    client: &Client,
    table: &Resolved,
) -> Result<bool, PostgresStoreError> {
    client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_attribute \
             WHERE attrelid = to_regclass(format('%I.%I', $1::text, $2::text)) \
             AND attname = 'secret' AND NOT attisdropped)",
            &[&table.schema, &SEALS],
        )
        .await
        .map(|row| row.get::<_, bool>(0))
        .map_err(query("add the seals table's secret column"))
}

/// Whether the seals table exists in `table`'s schema.
async fn seals_table_exists(client: &Client, table: &Resolved) -> Result<bool, PostgresStoreError> {
    client
        .query_one(
            "SELECT to_regclass(format('%I.%I', $1::text, $2::text)) IS NOT NULL",
            &[&table.schema, &SEALS],
        )
        .await
        .map(|row| row.get::<_, bool>(0))
        .map_err(query("create the seals table"))
}

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long one statement may run unless the builder says otherwise.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// An [`AsyncStore`] over one PostgreSQL table.
///
/// `put` is one `INSERT ... ON CONFLICT (key) DO UPDATE ... RETURNING (xmax = 0)`, which
/// reports exactly whether the row was created. Scans page through the key column in order.
/// Calls take connections from a pool, which replaces the ones the server closed.
///
/// The store keeps a guard's seal ([`AsyncStore::SEALS`]) in a table `cuckoo_guard_seals` in
/// the data table's schema (one row per store table, `store` = the table's name as the
/// catalog holds it), which `connect` creates if missing. `connect` finds the table through
/// the session's `search_path` once, and every statement then names both tables by their
/// schema, so stores that reach one table through different `search_path` settings share
/// one seal. `put` and `delete` each clear the table's row in the same statement as their
/// write (a data-modifying `WITH`). A program that writes the table around the guard must
/// delete that row too
/// (`DELETE FROM app.cuckoo_guard_seals WHERE store = 'users'` for a table `app.users`),
/// or a guard restarted from a sealed snapshot would not know about its rows.
///
/// The seal is a secret (the [`SealSecret`]'s 32 bytes): whoever can read it can forge a
/// snapshot file a restart trusts, so let only those read it who may write the rows.
///
/// # Sampling
///
/// [`sample_keys`](AsyncStore::sample_keys) reads the table's statistics (`pg_class`'s
/// `reltuples` and `relpages`, as of its last `ANALYZE`) and its size now, and takes a
/// share of its blocks with `TABLESAMPLE SYSTEM`, sized for about twice `n` rows and at
/// least 32 blocks, then keeps `n` of those rows in random order. Each row is about equally
/// likely to be taken, but rows come in clusters: rows of one block are taken together, so
/// a sample holds neighbours in the table's physical order, and a table whose statistics
/// overstate its rows (many deleted since the last `ANALYZE`) may give fewer than `n` keys;
/// a sample that falls short is taken once more with four times the share, and the larger
/// of the two is returned. The cost is the blocks read, O(`n`) rows. A table never analyzed counts as one row per block (the
/// sample reads more blocks than it needs, not fewer). When the blocks to read would be half
/// the table or more (a small table), or the relation cannot be sampled by block (a view, a
/// partitioned table), the store sorts the whole table instead (`ORDER BY random()
/// LIMIT n`): uniform, O(rows). Each statement runs within the
/// [statement timeout](PostgresStoreBuilder::statement_timeout) like every other call.
///
/// # Connections and faults
///
/// Calls take a connection from a [deadpool-postgres](https://docs.rs/deadpool-postgres) pool
/// (up to [`connections`](PostgresStoreBuilder::connections) of them, opened on demand, each
/// with its statements prepared once). A connection the server closed (a restart, a
/// failover, `pg_terminate_backend`, a proxy dropping it) is found closed when it comes back
/// to the pool and replaced by a new one, so a guard over the store recovers on its own.
///
/// - A read (`get`, a scan page) that fails because its connection broke is retried once, on
///   a new connection (the pool's idle connections are dropped too: one broken connection
///   usually means the server dropped them all).
/// - A write is not retried. If the server answered with an error, the statement was rolled
///   back; if the connection broke while it ran, it may have committed, and
///   [`write_outcome_unknown`](AsyncStore::write_outcome_unknown) says so (a guard keeps its
///   filter copy: a false positive, never a false negative).
/// - While the server cannot be reached, calls fail at once with
///   [`PostgresStoreError::Unavailable`] instead of each trying to connect: after a failed
///   connection attempt the store waits 50 ms before the next, doubling up to 1 s, and one
///   connection that succeeds ends the wait. Each attempt gives up after 2 s.
/// - A server that stops answering without closing its connections (a stopped process, a
///   network cut off) would hold a call until TCP gives up, minutes later. The
///   [statement timeout](PostgresStoreBuilder::statement_timeout) bounds every call: the
///   server cancels a statement that runs too long, and the call gives up on its own a
///   little later with [`PostgresStoreError::Timeout`] (the pool's idle connections are
///   dropped, so the next calls open new ones). A write that timed out may or may not have
///   been applied.
///
/// A write whose outcome is unknown (a broken connection, a timeout, a dropped future) stays
/// among a guard's orphaned writes for good
/// ([`PUT_ENDS_WITH_FUTURE`](AsyncStore::PUT_ENDS_WITH_FUTURE) stays `false`): a statement
/// the client sent runs whenever the server gets to it, after the caller's future was
/// dropped or the call timed out, and the client learns of no point after which it no
/// longer can. The server's `statement_timeout` bounds how long the statement runs once it
/// has started, not when it starts: bytes still in the network, or a stopped server's
/// backlog, start it later; and the server notices a closed connection only when it next
/// reads or answers, so it may commit a statement it had read before the close.
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
    pool: Pool,
    sql: Sql,
    backoff: Backoff,
    /// The table's schema and name, as resolved at connect.
    schema: String,
    table: String,
    connections: usize,
    /// How long a call waits for the server (the statement timeout plus the connect
    /// timeout), if at all.
    call_limit: Option<Duration>,
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
            connections: 8,
            statement_timeout: Some(STATEMENT_TIMEOUT),
            _types: PhantomData,
        }
    }
}

impl<K, V> PostgresStore<K, V> {
    /// Runs one call of the store within its time limit, if it has one. A call past it
    /// ends with [`PostgresStoreError::Timeout`], and the pool's idle connections (the timed
    /// out call's among them, back in the pool once its future dropped) are dropped: a
    /// server that stopped answering on one usually answers on none.
    async fn bounded<T>(
        &self,
        operation: &'static str,
        call: impl std::future::Future<Output = Result<T, PostgresStoreError>>,
    ) -> Result<T, PostgresStoreError> {
        let Some(limit) = self.call_limit else {
            return call.await;
        };
        // A statement of its own: the call's future (and the connection it holds) drops at
        // its end, back into the pool before the pool is cleared below.
        let outcome = tokio::time::timeout(limit, call).await;
        match outcome {
            Ok(result) => result,
            Err(_) => {
                self.pool.retain(|_, _| false);
                Err(PostgresStoreError::Timeout {
                    operation,
                    after: limit,
                })
            }
        }
    }

    /// A pooled connection, unless the server was unreachable a moment ago.
    async fn client(&self) -> Result<Object, PostgresStoreError> {
        if let Some(retry_in) = self.backoff.remaining() {
            return Err(PostgresStoreError::Unavailable { retry_in });
        }
        match self.pool.get().await {
            Ok(client) => {
                self.backoff.succeeded();
                Ok(client)
            }
            Err(error) => {
                self.backoff.failed();
                Err(match error {
                    PoolError::Backend(source) => PostgresStoreError::Connect { source },
                    _ => PostgresStoreError::ConnectTimeout,
                })
            }
        }
    }

    /// Runs `attempt` on a pooled connection with the statement `sql` prepared; a read, so
    /// once more on another connection if the first broke.
    async fn read<T, F>(
        &self,
        operation: &'static str,
        sql: &str,
        attempt: impl Fn(Object, tokio_postgres::Statement) -> F,
    ) -> Result<T, PostgresStoreError>
    where
        F: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    {
        self.read_typed(operation, sql, None, attempt).await
    }

    /// [`read`](Self::read), with the parameters of `sql` typed as those of `types_of` when
    /// given (the server's types for a statement it cannot type by itself).
    async fn read_typed<T, F>(
        &self,
        operation: &'static str,
        sql: &str,
        types_of: Option<&str>,
        attempt: impl Fn(Object, tokio_postgres::Statement) -> F,
    ) -> Result<T, PostgresStoreError>
    where
        F: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let mut retried = false;
        loop {
            let prepared = match types_of {
                None => self.prepared(sql).await,
                Some(types_of) => self.prepared_typed(sql, types_of).await,
            };
            let result = match prepared {
                Ok((client, statement)) => {
                    attempt(client, statement).await.map_err(query(operation))
                }
                Err(error) => Err(error),
            };
            match result {
                Err(PostgresStoreError::Query { source, .. })
                    if !retried && connection_broke(&source) =>
                {
                    // One broken connection usually means the server dropped them all (a
                    // restart, a failover): drop the idle ones, so the retry opens a new one.
                    self.pool.retain(|_, _| false);
                    retried = true;
                }
                result => return result,
            }
        }
    }

    /// A pooled connection with `sql` prepared with the parameter types the server gives
    /// those of `types_of`.
    async fn prepared_typed(
        &self,
        sql: &str,
        types_of: &str,
    ) -> Result<(Object, tokio_postgres::Statement), PostgresStoreError> {
        let client = self.client().await?;
        let types = client
            .prepare_cached(types_of)
            .await
            .map_err(query("prepare"))?
            .params()
            .to_vec();
        let statement = client
            .prepare_typed_cached(sql, &types)
            .await
            .map_err(query("prepare"))?;
        Ok((client, statement))
    }

    /// A pooled connection with the statement `sql` prepared, for a write.
    async fn prepared(
        &self,
        sql: &str,
    ) -> Result<(Object, tokio_postgres::Statement), PostgresStoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(sql).await.map_err(query("prepare"))?;
        Ok((client, statement))
    }
}

impl<K, V> AsyncStore for PostgresStore<K, V>
where
    K: ToSql + FromSqlOwned + Hash + Eq + Clone + Send + Sync,
    V: ToSql + FromSqlOwned + Send + Sync,
{
    type Key = K;
    type Value = V;
    type Cursor = K;
    type Error = PostgresStoreError;

    async fn get(&self, key: &K) -> Result<Option<V>, PostgresStoreError> {
        let row = self
            .bounded(
                "get",
                self.read("get", &self.sql.get, |client, statement| async move {
                    client.query_opt(&statement, &[key]).await
                }),
            )
            .await?;
        row.map(|row| row.try_get(0))
            .transpose()
            .map_err(query("get"))
    }

    /// One statement for the batch: the keys as one array parameter, unnested with their
    /// positions and joined to the table on the key column.
    async fn get_many(&self, keys: &[K]) -> Result<Vec<Option<V>>, PostgresStoreError> {
        let mut values: Vec<Option<V>> = std::iter::repeat_with(|| None).take(keys.len()).collect();
        if keys.is_empty() {
            return Ok(values);
        }
        let rows = self
            .bounded(
                "get_many",
                self.read_typed(
                    "get_many",
                    &self.sql.get_many,
                    Some(&self.sql.get_many_type),
                    |client, statement| async move { client.query(&statement, &[&keys]).await },
                ),
            )
            .await?;
        for row in rows {
            let position: i64 = row.try_get(0).map_err(query("get_many"))?;
            if let Some(slot) = usize::try_from(position)
                .ok()
                .and_then(|p| p.checked_sub(1))
                .and_then(|p| values.get_mut(p))
            {
                *slot = Some(row.try_get(1).map_err(query("get_many"))?);
            }
        }
        Ok(values)
    }

    async fn put(&self, key: &K, value: &V) -> Result<Written, PostgresStoreError> {
        let row = self
            .bounded("put", async {
                let (client, statement) = self.prepared(&self.sql.put).await?;
                client
                    .query_one(&statement, &[key, value, &self.table])
                    .await
                    .map_err(query("put"))
            })
            .await?;
        let created: bool = row.try_get(0).map_err(query("put"))?;
        Ok(if created {
            Written::Created
        } else {
            Written::Updated
        })
    }

    async fn delete(&self, key: &K) -> Result<bool, PostgresStoreError> {
        let deleted = self
            .bounded("delete", async {
                let (client, statement) = self.prepared(&self.sql.delete).await?;
                client
                    .execute(&statement, &[key, &self.table])
                    .await
                    .map_err(query("delete"))
            })
            .await?;
        Ok(deleted > 0)
    }

    async fn scan_keys(
        &self,
        cursor: Option<&K>,
        limit: usize,
    ) -> Result<ScanPage<K, K>, PostgresStoreError> {
        let limit = limit.clamp(1, i64::MAX as usize) as i64;
        let rows = self
            .bounded("scan", async {
                match cursor {
                    None => {
                        self.read("scan", &self.sql.scan_first, |client, statement| async move {
                            client.query(&statement, &[&limit]).await
                        })
                        .await
                    }
                    Some(after) => {
                        self.read("scan", &self.sql.scan_after, |client, statement| async move {
                            client.query(&statement, &[after, &limit]).await
                        })
                        .await
                    }
                }
            })
            .await?;
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
        // statement was rolled back. A broken connection leaves the outcome unknown. A write
        // that never got a connection, or whose statement could not be prepared, was not sent.
        match error {
            PostgresStoreError::Query {
                operation: "prepare",
                ..
            }
            | PostgresStoreError::Connect { .. }
            | PostgresStoreError::Unavailable { .. }
            | PostgresStoreError::ConnectTimeout => false,
            PostgresStoreError::Query { source, .. } => source.as_db_error().is_none(),
            // Sent or not, the statement may run when the server resumes.
            PostgresStoreError::Timeout { .. } => true,
            _ => true,
        }
    }

    const SEALS: bool = true;

    async fn read_seal(&self) -> Result<Option<SealSecret>, PostgresStoreError> {
        let row = self
            .bounded(
                "read the seal",
                self.read(
                    "read the seal",
                    &self.sql.read_seal,
                    |client, statement| async move {
                        client.query_opt(&statement, &[&self.table]).await
                    },
                ),
            )
            .await?;
        let secret = row
            .map(|row| row.try_get::<_, Option<Vec<u8>>>(0))
            .transpose()
            .map_err(query("read the seal"))?;
        // An older build's row (no secret) or anything but 32 bytes is no seal.
        Ok(secret
            .flatten()
            .and_then(|bytes| SealSecret::from_slice(&bytes)))
    }

    async fn write_seal(&self, secret: &SealSecret) -> Result<(), PostgresStoreError> {
        self.bounded("write the seal", async {
            let (client, statement) = self.prepared(&self.sql.write_seal).await?;
            client
                .execute(&statement, &[&self.table, &&secret.as_bytes()[..]])
                .await
                .map_err(query("write the seal"))
        })
        .await?;
        Ok(())
    }

    /// A block sample sized from the table's statistics, or a sort of a small table (see
    /// [the store's docs](PostgresStore#sampling)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cuckoo_guard::guard::AsyncStore;
    /// use cuckoo_guard::stores::PostgresStore;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PostgresStore::<i64, String>::builder("postgres://postgres@127.0.0.1/test")
    ///     .table("users")
    ///     .connect()
    ///     .await?;
    /// for key in store.sample_keys(100).await? {
    ///     println!("sampled {key}");
    /// }
    /// # Ok(()) }
    /// ```
    async fn sample_keys(&self, n: usize) -> Result<Vec<K>, PostgresStoreError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let stats = self
            .bounded(
                "sample",
                self.read(
                    "sample (statistics)",
                    &self.sql.sample_stats,
                    |client, statement| async move {
                        client
                            .query_opt(&statement, &[&self.schema, &self.table])
                            .await
                    },
                ),
            )
            .await?;
        // No row: the table is gone, and the sort reports it.
        let plan = match stats {
            Some(row) => {
                let get = |row: &tokio_postgres::Row| -> Result<_, tokio_postgres::Error> {
                    Ok(sample_plan(
                        n,
                        row.try_get(0)?,
                        row.try_get(1)?,
                        row.try_get::<_, String>(2)?.as_str(),
                        row.try_get(3)?,
                    ))
                };
                get(&row).map_err(query("sample (statistics)"))?
            }
            None => SamplePlan::Sort,
        };
        let keys = self.sample_by(plan, n).await?;
        match plan {
            // Fewer blocks came up than planned, or the statistics overstate the rows: once
            // more with four times the share.
            SamplePlan::System { percent } if keys.len() < n => {
                let wider = plan_for_share(f64::from(percent) / 100.0 * 4.0);
                let more = self.sample_by(wider, n).await?;
                Ok(if more.len() > keys.len() { more } else { keys })
            }
            _ => Ok(keys),
        }
    }

    /// `true`: a block sample reads O(`n`) rows once the table has statistics (see
    /// [the store's docs](PostgresStore#sampling) for when it sorts the table instead).
    fn fast_sampling(&self) -> bool {
        true
    }
}

impl<K, V> PostgresStore<K, V>
where
    K: FromSqlOwned + Send + Sync,
{
    /// Up to `n` keys read by `plan`.
    async fn sample_by(&self, plan: SamplePlan, n: usize) -> Result<Vec<K>, PostgresStoreError> {
        let limit = n.min(i64::MAX as usize) as i64;
        let rows = self
            .bounded("sample", async {
                match plan {
                    SamplePlan::Sort => {
                        self.read("sample", &self.sql.sample_sort, |client, statement| async move {
                            client.query(&statement, &[&limit]).await
                        })
                        .await
                    }
                    SamplePlan::System { percent } => {
                        self.read(
                            "sample",
                            &self.sql.sample_system,
                            |client, statement| async move {
                                client.query(&statement, &[&percent, &limit]).await
                            },
                        )
                        .await
                    }
                }
            })
            .await?;
        rows.iter()
            .map(|row| row.try_get(0))
            .collect::<Result<Vec<K>, _>>()
            .map_err(query("sample"))
    }
}

/// Leaves out the URL, which may hold a password.
impl<K, V> fmt::Debug for PostgresStoreBuilder<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStoreBuilder")
            .field("url", &"<redacted>")
            .field("table", &self.table)
            .field("key_column", &self.key_column)
            .field("value_column", &self.value_column)
            .field("create", &self.create)
            .field("connections", &self.connections)
            .field("statement_timeout", &self.statement_timeout)
            .finish()
    }
}

impl<K, V> fmt::Debug for PostgresStore<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.table)
            .field("connections", &self.connections)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn percent(plan: SamplePlan) -> f32 {
        match plan {
            SamplePlan::System { percent } => percent,
            SamplePlan::Sort => panic!("a sort where a block sample was due"),
        }
    }

    #[test]
    fn sample_plans_follow_the_statistics() {
        // 1,000,000 rows in 10,000 blocks: 200 rows are 0.02% of them, fewer than 32 blocks;
        // 32 blocks are 0.32%.
        assert!((percent(sample_plan(100, 1e6, 10_000, "r", 10_000)) - 0.32).abs() < 1e-3);
        // 10,000 asked for: 20,000 rows, 2% of the table.
        assert!((percent(sample_plan(10_000, 1e6, 10_000, "r", 10_000)) - 2.0).abs() < 1e-3);
        // The statistics' density applies to the size now: twice the blocks, half the share.
        assert!((percent(sample_plan(10_000, 1e6, 10_000, "m", 20_000)) - 1.0).abs() < 1e-3);
        // Never analyzed: one row per block, so 200 of 100,000 blocks.
        assert!((percent(sample_plan(100, -1.0, 0, "r", 100_000)) - 0.2).abs() < 1e-3);
        // Small tables, empty ones, views and partitioned tables are sorted.
        assert_eq!(sample_plan(100, 10_000.0, 60, "r", 60), SamplePlan::Sort);
        assert_eq!(sample_plan(100, 0.0, 0, "r", 0), SamplePlan::Sort);
        assert_eq!(sample_plan(100, 1e6, 10_000, "v", 0), SamplePlan::Sort);
        assert_eq!(sample_plan(100, -1.0, 0, "p", 0), SamplePlan::Sort);
        // Four times a quarter of the table is past half of it.
        assert_eq!(plan_for_share(0.15 * 4.0), SamplePlan::Sort);
        assert!((percent(plan_for_share(0.1 * 4.0)) - 40.0).abs() < 1e-3);
    }
}
