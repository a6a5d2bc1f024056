//! The service's set-up: where the users live ([`Database`], parsed from `--db`) and how the
//! service runs ([`Config`]).

use std::error::Error as StdError;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Membership of a fleet of replicas over the same table: the guard joins it instead of
    /// warming up alone, so a row created through any replica is never answered absent by
    /// another. `None`: a lone guard, which assumes every write goes through it.
    pub fleet: Option<FleetSettings>,
    /// The request header naming the client (its first comma-separated value, so
    /// `X-Forwarded-For` names the original client): with it, the guard's layer answers
    /// `429 Too Many Requests` to a client whose requests the filter keeps blocking
    /// ([`Throttle`](cuckoo_guard::tower::throttle::Throttle)'s defaults, with the window,
    /// cool-down and hold below). Set it only behind a proxy that sets the header; a client
    /// could otherwise name itself anything.
    pub throttle_by: Option<String>,
    /// The window the throttle counts a client's blocked requests over
    /// ([`ThrottleBuilder::window`](cuckoo_guard::tower::throttle::ThrottleBuilder::window)),
    /// with [`throttle_by`](Self::throttle_by): a client is throttled once 20 of its requests
    /// within one window were blocked. Default 1 second; longer than zero.
    pub throttle_window: Duration,
    /// How long a throttled client is answered `429`
    /// ([`ThrottleBuilder::cool_down`](cuckoo_guard::tower::throttle::ThrottleBuilder::cool_down)),
    /// with [`throttle_by`](Self::throttle_by). Default 10 seconds; longer than zero.
    pub throttle_cool_down: Duration,
    /// How long the throttle holds each `429` before sending it
    /// ([`ThrottleBuilder::hold`](cuckoo_guard::tower::throttle::ThrottleBuilder::hold)),
    /// with [`throttle_by`](Self::throttle_by); zero (the default) sends it at once. Shorter
    /// than [`throttle_cool_down`](Self::throttle_cool_down).
    pub throttle_hold: Duration,
}

/// The fleet a replica joins ([`Config::fleet`]): its coordinator (Redis) and its name.
/// Every replica over the same table must join the same fleet. Its `Debug` leaves out the
/// URL's user info (where a password would be).
///
/// # Examples
///
/// ```
/// use users_service::FleetSettings;
///
/// let fleet = FleetSettings::new("redis://:secret@127.0.0.1:6379", "users");
/// assert_eq!(fleet.name, "users");
/// assert!(!format!("{fleet:?}").contains("secret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct FleetSettings {
    /// The coordinator's Redis URL (`redis://[:password@]host:port[/db]`).
    pub redis_url: String,
    /// The fleet's name: its keys in Redis start with `cuckoo-guard:{name}`.
    pub name: String,
}

impl FleetSettings {
    /// The fleet `name` coordinated by the Redis server at `redis_url`.
    ///
    /// # Examples
    ///
    /// ```
    /// let fleet = users_service::FleetSettings::new("redis://127.0.0.1:6379", "users");
    /// assert_eq!(fleet.redis_url, "redis://127.0.0.1:6379");
    /// ```
    pub fn new(redis_url: impl Into<String>, name: impl Into<String>) -> Self {
        FleetSettings {
            redis_url: redis_url.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Debug for FleetSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetSettings")
            .field("redis_url", &without_userinfo(&self.redis_url))
            .field("name", &self.name)
            .finish()
    }
}

/// What a cached row weighs beyond its name's bytes: its key, the string's header and the
/// cache's own bookkeeping, roughly.
pub const CACHE_ENTRY_OVERHEAD: usize = 64;

impl Config {
    /// The defaults for `database`: table `users`, no seed, guarded, 8 connections, a 64 MiB
    /// cache, names up to 1 KiB, no fleet.
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
            fleet: None,
            throttle_by: None,
            throttle_window: Duration::from_secs(1),
            throttle_cool_down: Duration::from_secs(10),
            throttle_hold: Duration::ZERO,
        }
    }
}

/// Refuses a table name that is not a plain lowercase SQL identifier (it is spliced into the
/// seeding statements).
pub(crate) fn check_table_name(table: &str) -> Result<(), BoxError> {
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
