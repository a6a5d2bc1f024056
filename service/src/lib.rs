//! An axum users service with the stack people run in front of a database: the guard's tower
//! layer first (keys the filter reports absent are answered 404 from memory), a moka
//! read-through cache for existing rows, then SQLite (by default) or PostgreSQL.
//!
//! Public routes ([`build`]): `GET /users/{id}`, `POST /users` (`{"id": 1, "name": "ada"}`),
//! `PUT /users/{id}` (`{"name": "ada"}`), `DELETE /users/{id}`. Admin routes
//! ([`App::admin_router`], served on a separate listener that must stay private): `GET /stats`
//! (JSON) and `GET /metrics` (Prometheus text). Every database call goes through a counting
//! store wrapper, so they show the queries the guard saved; their false-positive counters
//! would help an attacker find keys the filter wrongly admits, so they are not public.
//!
//! A name longer than [`Config::max_name_bytes`] is refused with 422 (a body too large to hold
//! one, with 413); the cache is bounded in bytes ([`Config::cache_bytes`]). A failed database
//! call answers 503 with a fixed body; its detail goes to the log (stderr).
//!
//! The cache is read-through with a 60 s time to live, and a write invalidates its key after
//! the database write (in a task a disconnecting client cannot cancel). A lookup that read
//! the old row just before a concurrent write can still put it back in the cache after the
//! invalidation, so a row may be served stale (or after its delete) for up to the time to
//! live; it never hides a row, since the cache holds only rows it found.
//!
//! Why the guard with a cache: a cache only holds what it has seen, and a key that does not
//! exist has no row to cache. Penetration traffic asks for such keys, each one new, so every
//! request misses the cache and reaches the database; the filter knows every key that does
//! exist, so it answers the others from memory.

use std::error::Error as StdError;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use cuckoo_guard::guard::{
    Admission, AsyncCacheGuard, AsyncStore, CacheGuard, GuardError, GuardStats, ScanPage, Store,
    Written,
};
use cuckoo_guard::stores::{PostgresStore, SqliteStore};
use cuckoo_guard::tower::{key, Admit, GuardLayer};
use cuckoo_guard::CuckooFilter;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use serde::{Deserialize, Serialize};

/// Any error of the service's set-up.
///
/// # Examples
///
/// ```
/// let error: users_service::BoxError = "no database".into();
/// assert_eq!(error.to_string(), "no database");
/// ```
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// Where the users live. Its `Debug` and every error about it leave out the URL's user info
/// (where a password would be).
///
/// # Examples
///
/// ```
/// use users_service::Database;
///
/// assert_eq!("sqlite:users.db".parse(), Ok(Database::Sqlite("users.db".into())));
/// let postgres: Database = "postgres://app:pw@127.0.0.1/test".parse().unwrap();
/// assert!(matches!(postgres, Database::Postgres(_)));
/// assert!(!format!("{postgres:?}").contains("pw"));
/// assert!("mysql://localhost".parse::<Database>().is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub enum Database {
    /// An SQLite file (`sqlite:PATH`, or a bare path).
    Sqlite(PathBuf),
    /// A PostgreSQL URL (`postgres://...` or `postgresql://...`).
    Postgres(String),
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            Database::Postgres(url) => f
                .debug_tuple("Postgres")
                .field(&without_userinfo(url))
                .finish(),
        }
    }
}

/// `url` for printing: its scheme and host, without user info or parameters (where a
/// password would be). A password may hold `?`, `#`, `/` or `@`, so when an `@` follows the
/// first `?` or `#` nothing tells where the user info ends, and nothing past the scheme is
/// printed.
fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "***".to_owned();
    };
    let scheme = if scheme
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        scheme
    } else {
        "***"
    };
    let cut = rest.find(['?', '#']).unwrap_or(rest.len());
    let (head, tail) = rest.split_at(cut);
    if tail.contains('@') {
        return format!("{scheme}://***");
    }
    match head.rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &head[at + 1..]),
        None => format!("{scheme}://{head}"),
    }
}

impl std::str::FromStr for Database {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            Ok(Database::Postgres(s.to_owned()))
        } else if s.contains("://") && !s.starts_with("sqlite://") {
            Err(format!(
                "unsupported database {}: give an SQLite path (sqlite:PATH) or a postgres:// URL",
                without_userinfo(s)
            ))
        } else {
            let path = s
                .strip_prefix("sqlite://")
                .or_else(|| s.strip_prefix("sqlite:"))
                .unwrap_or(s);
            if path.is_empty() {
                return Err("empty SQLite path".to_owned());
            }
            Ok(Database::Sqlite(PathBuf::from(path)))
        }
    }
}

/// How the service is set up.
///
/// # Examples
///
/// ```
/// use users_service::{Config, Database};
///
/// let mut config = Config::new(Database::Sqlite("users.db".into()));
/// config.seed = 1_000;
/// assert!(config.guard);
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    /// The database.
    pub database: Database,
    /// The users table (created if missing): `id BIGINT` key, `name TEXT` value.
    pub table: String,
    /// Users `1..=seed` to insert (those missing) before the warm-up.
    pub seed: u64,
    /// Whether `GET /users/{id}` goes through the guard's layer; without it, lookups go from
    /// the cache straight to the database (writes still keep the guard in sync).
    pub guard: bool,
    /// Database connections.
    pub connections: usize,
    /// Bytes the moka cache may hold: each row weighs its name's length plus
    /// [`CACHE_ENTRY_OVERHEAD`].
    pub cache_bytes: u64,
    /// The longest name accepted, in bytes (UTF-8); a longer one is refused with 422.
    pub max_name_bytes: usize,
}

/// What a cached row weighs beyond its name's bytes: its key, the string's header and the
/// cache's own bookkeeping, roughly.
pub const CACHE_ENTRY_OVERHEAD: usize = 64;

impl Config {
    /// The defaults for `database`: table `users`, no seed, guarded, 8 connections, a 64 MiB
    /// cache, names up to 1 KiB.
    ///
    /// # Examples
    ///
    /// ```
    /// let config = users_service::Config::new("users.db".parse().unwrap());
    /// assert_eq!(config.table, "users");
    /// ```
    pub fn new(database: Database) -> Self {
        Config {
            database,
            table: "users".to_owned(),
            seed: 0,
            guard: true,
            connections: 8,
            cache_bytes: 64 << 20,
            max_name_bytes: 1024,
        }
    }
}

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

    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A store that counts its calls.
#[derive(Debug)]
struct Counted<S> {
    inner: S,
    queries: Arc<Queries>,
}

impl<S: Store> Store for Counted<S> {
    type Key = S::Key;
    type Value = S::Value;
    type Cursor = S::Cursor;
    type Error = S::Error;

    fn get(&self, key: &S::Key) -> Result<Option<S::Value>, S::Error> {
        Queries::bump(&self.queries.get);
        self.inner.get(key)
    }

    fn put(&self, key: &S::Key, value: &S::Value) -> Result<Written, S::Error> {
        Queries::bump(&self.queries.put);
        self.inner.put(key, value)
    }

    fn delete(&self, key: &S::Key) -> Result<bool, S::Error> {
        Queries::bump(&self.queries.delete);
        self.inner.delete(key)
    }

    fn scan_keys(
        &self,
        cursor: Option<&S::Cursor>,
        limit: usize,
    ) -> Result<ScanPage<S::Key, S::Cursor>, S::Error> {
        Queries::bump(&self.queries.scan);
        self.inner.scan_keys(cursor, limit)
    }

    fn write_outcome_unknown(error: &S::Error) -> bool {
        S::write_outcome_unknown(error)
    }
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
}

type SqliteGuard = CacheGuard<Counted<SqliteStore<i64, String>>>;
type PostgresGuard = AsyncCacheGuard<Counted<PostgresStore<i64, String>>>;

/// The guard over the users table: sync over SQLite (its store calls run on tokio's blocking
/// pool), async over PostgreSQL.
#[derive(Debug, Clone)]
enum Users {
    /// Over SQLite.
    Sqlite(SqliteGuard),
    /// Over PostgreSQL.
    Postgres(PostgresGuard),
}

impl Admit<i64> for Users {
    fn admit(&self, id: &i64) -> Admission {
        match self {
            Users::Sqlite(guard) => guard.admit(id),
            Users::Postgres(guard) => guard.admit(id),
        }
    }
}

/// A failed database call, as the handlers report it: 503 with a fixed body; the detail
/// (the database's error text) goes to the log only.
#[derive(Debug)]
struct DbError(String);

/// The body of every 503: nothing of the database's error reaches the client.
pub const UNAVAILABLE_BODY: &str = "database unavailable";

impl<E: StdError> From<GuardError<E>> for DbError {
    fn from(error: GuardError<E>) -> Self {
        DbError(error.to_string())
    }
}

impl IntoResponse for DbError {
    fn into_response(self) -> Response {
        eprintln!("users-service: 503: {}", self.0);
        (StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE_BODY).into_response()
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DbError> + Send + 'static,
) -> Result<T, DbError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| DbError(format!("database task failed: {e}")))?
}

impl Users {
    /// Finishes a lookup the layer admitted.
    async fn get_admitted(&self, id: i64, admission: Admission) -> Result<Option<String>, DbError> {
        match self {
            Users::Sqlite(guard) => {
                let guard = guard.clone();
                blocking(move || Ok(guard.get_admitted(&id, admission)?)).await
            }
            Users::Postgres(guard) => Ok(guard.get_admitted(&id, admission).await?),
        }
    }

    /// A lookup straight from the database, without the guard.
    async fn get_unguarded(&self, id: i64) -> Result<Option<String>, DbError> {
        let failed = |e: &dyn StdError| DbError(format!("database get failed: {e}"));
        match self {
            Users::Sqlite(guard) => {
                let guard = guard.clone();
                blocking(move || guard.store().get(&id).map_err(|e| failed(&e))).await
            }
            Users::Postgres(guard) => guard.store().get(&id).await.map_err(|e| failed(&e)),
        }
    }

    /// Creates or updates a user through the guard.
    async fn put(&self, id: i64, name: String) -> Result<Written, DbError> {
        match self {
            Users::Sqlite(guard) => {
                let guard = guard.clone();
                blocking(move || Ok(guard.put(&id, &name)?)).await
            }
            Users::Postgres(guard) => Ok(guard.put(&id, &name).await?),
        }
    }

    /// Deletes a user through the guard.
    async fn delete(&self, id: i64) -> Result<bool, DbError> {
        match self {
            Users::Sqlite(guard) => {
                let guard = guard.clone();
                blocking(move || Ok(guard.delete(&id)?)).await
            }
            Users::Postgres(guard) => Ok(guard.delete(&id).await?),
        }
    }

    /// The guard's stats.
    fn stats(&self) -> GuardStats {
        match self {
            Users::Sqlite(guard) => guard.stats(),
            Users::Postgres(guard) => guard.stats(),
        }
    }

    async fn warm_up(&self) -> Result<(), DbError> {
        const PAGE: usize = 10_000;
        match self {
            Users::Sqlite(guard) => {
                let guard = guard.clone();
                blocking(move || Ok(guard.warm_up(PAGE, |_| {}).map(drop)?)).await
            }
            Users::Postgres(guard) => Ok(guard.warm_up(PAGE, |_| {}).await.map(drop)?),
        }
    }
}

/// The service's shared state.
///
/// # Examples
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
/// let dir = tempfile::tempdir()?;
/// let config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
/// let (_router, app) = users_service::build(&config).await?;
/// app.ready().await?;
/// assert!(!app.stats().warming);
/// assert_eq!(app.queries().gets(), 0);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct App {
    users: Users,
    cache: moka::future::Cache<i64, String>,
    queries: Arc<Queries>,
    guarded: bool,
    max_name_bytes: usize,
    prometheus: Arc<PrometheusRecorder>,
    metrics: PrometheusHandle,
    warm_up: tokio::sync::watch::Receiver<WarmUp>,
}

/// Where the guard's warm-up is.
#[derive(Debug, Clone)]
enum WarmUp {
    Running,
    Done,
    Failed(String),
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("users", &self.users)
            .field("guarded", &self.guarded)
            .finish_non_exhaustive()
    }
}

impl App {
    /// The guard's stats.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
    /// # let dir = tempfile::tempdir()?;
    /// # let config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
    /// let (_router, app) = users_service::build(&config).await?;
    /// app.ready().await?;
    /// assert_eq!(app.stats().lookups, 0);
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> GuardStats {
        self.users.stats()
    }

    /// The admin routes, `GET /stats` (JSON) and `GET /metrics` (Prometheus text), to serve
    /// on a listener of their own that only operators reach (never on the public one).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
    /// # let dir = tempfile::tempdir()?;
    /// # let config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
    /// let (_public, app) = users_service::build(&config).await?;
    /// let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// tokio::spawn(async move { axum::serve(admin, app.admin_router()).await });
    /// # Ok(()) }
    /// ```
    pub fn admin_router(&self) -> Router {
        Router::new()
            .route("/stats", get(stats))
            .route("/metrics", get(metrics))
            .with_state(self.clone())
    }

    /// The bytes of the names the cache holds now (after its pending evictions).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
    /// # let dir = tempfile::tempdir()?;
    /// # let config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
    /// let (_router, app) = users_service::build(&config).await?;
    /// assert_eq!(app.cached_name_bytes().await, 0);
    /// # Ok(()) }
    /// ```
    pub async fn cached_name_bytes(&self) -> u64 {
        self.cache.run_pending_tasks().await;
        self.cache.iter().map(|(_, name)| name.len() as u64).sum()
    }

    /// The database calls so far.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
    /// # let dir = tempfile::tempdir()?;
    /// # let config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
    /// let (_router, app) = users_service::build(&config).await?;
    /// app.ready().await?;
    /// assert!(app.queries().snapshot()[3] >= 1); // the warm-up's scan
    /// # Ok(()) }
    /// ```
    pub fn queries(&self) -> &Queries {
        &self.queries
    }

    /// Waits until the guard's warm-up has finished.
    ///
    /// # Errors
    ///
    /// The warm-up failed (the guard keeps passing every lookup to the database).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
    /// # let dir = tempfile::tempdir()?;
    /// # let config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
    /// let (_router, app) = users_service::build(&config).await?;
    /// app.ready().await?;
    /// assert!(!app.stats().warming);
    /// # Ok(()) }
    /// ```
    pub async fn ready(&self) -> Result<(), BoxError> {
        let mut state = self.warm_up.clone();
        let state = state
            .wait_for(|state| !matches!(state, WarmUp::Running))
            .await
            .map_err(|_| "the warm-up task stopped")?;
        match &*state {
            WarmUp::Failed(error) => Err(format!("warm-up failed: {error}").into()),
            _ => Ok(()),
        }
    }
}

fn check_table_name(table: &str) -> Result<(), BoxError> {
    let mut chars = table.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if valid && table.len() <= 63 {
        Ok(())
    } else {
        Err(format!("table name {table:?}: use lowercase letters, digits and '_'").into())
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

async fn open(config: &Config, queries: &Arc<Queries>) -> Result<Users, BoxError> {
    check_table_name(&config.table)?;
    let filter = CuckooFilter::with_capacity(config.seed.clamp(1_000, 1 << 30) as usize);
    let users = match &config.database {
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
            let store = Counted {
                inner: store,
                queries: Arc::clone(queries),
            };
            Users::Sqlite(CacheGuard::new(filter, store))
        }
        Database::Postgres(url) => {
            let store = PostgresStore::<i64, String>::builder(url.clone())
                .table(&config.table)
                .key_column("id")
                .value_column("name")
                .create_table_if_missing(true)
                .connections(config.connections)
                .connect()
                .await?;
            if config.seed > 0 {
                let (client, connection) =
                    tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
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
            let store = Counted {
                inner: store,
                queries: Arc::clone(queries),
            };
            Users::Postgres(AsyncCacheGuard::new(filter, store))
        }
    };
    Ok(users)
}

/// Opens the database (seeding it if asked), starts the guard's warm-up in the background
/// and returns the public router (the users routes; the admin routes are on
/// [`App::admin_router`]) with its state. Lookups pass through to the database until the
/// warm-up has finished ([`App::ready`]).
///
/// # Errors
///
/// The database cannot be opened, the table name is invalid, or seeding failed.
///
/// # Examples
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
/// let dir = tempfile::tempdir()?;
/// let mut config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
/// config.seed = 10;
/// let (router, app) = users_service::build(&config).await?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// tokio::spawn(async move { axum::serve(listener, router).await });
/// app.ready().await?;
/// # Ok(()) }
/// ```
pub async fn build(config: &Config) -> Result<(Router, App), BoxError> {
    let queries = Arc::new(Queries::default());
    let users = open(config, &queries).await?;
    let recorder = PrometheusBuilder::new().build_recorder();
    let (warm_up, warm_up_state) = tokio::sync::watch::channel(WarmUp::Running);
    let app = App {
        users: users.clone(),
        cache: moka::future::Cache::builder()
            .weigher(|_id: &i64, name: &String| {
                u32::try_from(name.len().saturating_add(CACHE_ENTRY_OVERHEAD)).unwrap_or(u32::MAX)
            })
            .max_capacity(config.cache_bytes)
            .time_to_live(Duration::from_secs(60))
            .build(),
        queries,
        guarded: config.guard,
        max_name_bytes: config.max_name_bytes,
        metrics: recorder.handle(),
        prometheus: Arc::new(recorder),
        warm_up: warm_up_state,
    };
    let warming = users.clone();
    tokio::spawn(async move {
        let state = match warming.warm_up().await {
            Ok(()) => WarmUp::Done,
            Err(error) => WarmUp::Failed(error.0),
        };
        let _ = warm_up.send(state);
    });

    let mut lookups = Router::new().route(
        "/users/{id}",
        get(get_user).put(put_user).delete(delete_user),
    );
    if config.guard {
        lookups = lookups.route_layer(GuardLayer::new(users, key::path_segment::<i64>(1)));
    }
    // Room for the longest name with every character JSON-escaped (`\uXXXX`), and the rest.
    let body_limit = config.max_name_bytes.saturating_mul(6).saturating_add(1024);
    let router = Router::new()
        .route("/users", axum::routing::post(create_user))
        .merge(lookups)
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .with_state(app.clone());
    Ok((router, app))
}

#[derive(Debug, Serialize, Deserialize)]
struct User {
    id: i64,
    name: String,
}

#[derive(Debug, Deserialize)]
struct Name {
    name: String,
}

async fn get_user(
    State(app): State<App>,
    Path(id): Path<i64>,
    admission: Option<Extension<Admission>>,
) -> Result<Response, DbError> {
    if let Some(name) = app.cache.get(&id).await {
        return Ok(Json(User { id, name }).into_response());
    }
    let found = if app.guarded {
        // The layer admitted this request (or it holds no key the layer could parse, which
        // `Path` rejected before this handler).
        let admission = admission.map_or_else(|| app.users.admit(&id), |Extension(a)| a);
        app.users.get_admitted(id, admission).await?
    } else {
        app.users.get_unguarded(id).await?
    };
    Ok(match found {
        Some(name) => {
            app.cache.insert(id, name.clone()).await;
            Json(User { id, name }).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    })
}

/// Runs a write and the cache invalidation after it in a task of their own, so a client that
/// disconnects cannot cancel them halfway; the cache entry goes whatever the outcome, since a
/// failed write may still have been applied.
async fn write_then_invalidate<T: Send + 'static>(
    app: &App,
    id: i64,
    write: impl Future<Output = Result<T, DbError>> + Send + 'static,
) -> Result<T, DbError> {
    let cache = app.cache.clone();
    tokio::spawn(async move {
        let result = write.await;
        cache.invalidate(&id).await;
        result
    })
    .await
    .map_err(|e| DbError(format!("write task failed: {e}")))?
}

async fn write(app: &App, id: i64, name: String) -> Result<Response, DbError> {
    if name.len() > app.max_name_bytes {
        let message = format!("name longer than {} bytes", app.max_name_bytes);
        return Ok((StatusCode::UNPROCESSABLE_ENTITY, message).into_response());
    }
    let users = app.users.clone();
    let value = name.clone();
    let written = write_then_invalidate(app, id, async move { users.put(id, value).await }).await?;
    let status = match written {
        Written::Created => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    Ok((status, Json(User { id, name })).into_response())
}

async fn create_user(State(app): State<App>, Json(user): Json<User>) -> Result<Response, DbError> {
    write(&app, user.id, user.name).await
}

async fn put_user(
    State(app): State<App>,
    Path(id): Path<i64>,
    Json(body): Json<Name>,
) -> Result<Response, DbError> {
    write(&app, id, body.name).await
}

async fn delete_user(State(app): State<App>, Path(id): Path<i64>) -> Result<StatusCode, DbError> {
    let users = app.users.clone();
    let existed = write_then_invalidate(&app, id, async move { users.delete(id).await }).await?;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    })
}

async fn stats(State(app): State<App>) -> Json<serde_json::Value> {
    let s = app.users.stats();
    let [get, put, delete, scan] = app.queries.snapshot();
    Json(serde_json::json!({
        "guarded": app.guarded,
        "warming": s.warming,
        "lookups": s.lookups,
        "blocked": s.blocked,
        "passed": s.passed,
        "store_hits": s.store_hits,
        "false_positives": s.false_positives,
        "memo_hits": s.memo_hits,
        "memo_entries": s.memo_entries,
        "memo_slots_disabled": s.memo_slots_disabled,
        "observed_false_positive_rate": s.observed_false_positive_rate,
        "creates": s.creates,
        "updates": s.updates,
        "deletes": s.deletes,
        "writes_refused": s.writes_refused,
        "stale_copies": s.stale_copies,
        "filter_len": s.filter_len,
        "filter_capacity": s.filter_capacity,
        "filter_load_factor": s.filter_load_factor,
        "growth_steps": s.growth_steps,
        "rebuilds": s.rebuilds,
        "db_queries": { "get": get, "put": put, "delete": delete, "scan": scan },
        "cache_entries": app.cache.entry_count(),
    }))
}

async fn metrics(State(app): State<App>) -> impl IntoResponse {
    let stats = app.users.stats();
    let [get, put, delete, scan] = app.queries.snapshot();
    metrics::with_local_recorder(&*app.prometheus, || {
        cuckoo_guard::metrics::describe();
        cuckoo_guard::metrics::record(&stats, "users");
        for (kind, value) in [
            ("get", get),
            ("put", put),
            ("delete", delete),
            ("scan", scan),
        ] {
            metrics::counter!("users_service_db_queries_total", "kind" => kind).absolute(value);
        }
        metrics::gauge!("users_service_cache_entries").set(app.cache.entry_count() as f64);
    });
    (
        [("content-type", "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
}
