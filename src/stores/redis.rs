//! [`RedisStore`]: rows in a Redis hash, with a sorted-set index of the keys (feature `redis`).
//!
//! Layout, for a namespace `ns`: the hash `{ns}:rows` maps each key to its value, and the
//! sorted set `{ns}:keys` holds every key with score 0, so `ZRANGE ... BYLEX` pages through
//! the keys in order and returns each exactly once (`SCAN`/`HSCAN` may repeat keys). Both
//! names carry the hash tag `{ns}`, so they live in one cluster slot; [`RedisStore::rows_key`]
//! and [`RedisStore::index_key`] return them. Writes are Lua scripts, atomic on the server: a
//! put is `ZADD` (a no-op for an indexed key, so a key whose index entry was lost is indexed
//! again by its next write) plus `HSET` (whose reply says whether the field was new); a
//! delete is `HDEL` plus `ZREM`. Both delete the string `{ns}:seal`, the seal a guard writes
//! beside a snapshot of its filter ([`RedisStore::seal_key`]).
//!
//! The seal is keyed by the namespace exactly as given, like the rows: Redis keys are
//! byte strings compared exactly, and the three keys live in the database the URL selects,
//! all reached over the one connection. Any store that reaches the rows `{ns}:rows` reaches
//! the seal `{ns}:seal` beside them, so no spelling of a namespace (nor a database index)
//! can write the rows and miss the seal.
//!
//! What the server must be configured with: [`RedisStore`'s docs](RedisStore#what-redis-must-be-configured-with).

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, Script, ToSingleRedisArg};

use crate::guard::{sample_by_scan_async, AsyncStore, ScanPage, SealSecret, Written};
use crate::sync::{AtomicBool, Ordering};

/// Checks both keys' types before writing anything, so a type error is reported before any
/// change (and the guard knows the write was not applied).
const CHECK_TYPES: &str = r"
local rows_type = redis.call('TYPE', KEYS[1]).ok
local keys_type = redis.call('TYPE', KEYS[2]).ok
if (rows_type ~= 'hash' and rows_type ~= 'none') or (keys_type ~= 'zset' and keys_type ~= 'none') then
  return redis.error_reply('CGTYPE the store keys ' .. KEYS[1] .. ' and ' .. KEYS[2] .. ' must be a hash and a sorted set')
end
";

/// Clears the seal (`KEYS[3]`) in the write's script, after the type check.
const CLEAR_SEAL: &str = r"
redis.call('DEL', KEYS[3])
";

/// Indexes the key on every put, before writing the row: a failure in between leaves an
/// index entry without a row (a false positive), never a row without one.
const PUT: &str = r"
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
";

/// Removes the index entry on every delete, so none outlives its row.
const DELETE: &str = r"
local deleted = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return deleted
";

/// The error code of the scripts' own type check, raised before any write.
const TYPE_CHECK_CODE: &str = "CGTYPE";

/// Why a [`RedisStore`] operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// The URL is invalid or the server cannot be reached.
    Connect {
        /// The driver's error.
        source: redis::RedisError,
    },
    /// A command failed.
    Command {
        /// What the store was doing.
        operation: &'static str,
        /// The driver's error.
        source: redis::RedisError,
    },
    /// The server's `maxmemory-policy` may evict the store's keys (an `allkeys-*` policy),
    /// and [`RedisStoreBuilder::allow_eviction`] did not opt in: an evicted index entry would
    /// hide its row from the guard's warm-up and rebuilds.
    EvictionPolicy {
        /// The server's policy.
        policy: String,
    },
}

impl fmt::Display for RedisStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisStoreError::Connect { source } => write!(f, "cannot connect to Redis: {source}"),
            RedisStoreError::Command { operation, source } => {
                write!(f, "Redis {operation} failed: {source}")
            }
            RedisStoreError::EvictionPolicy { policy } => write!(
                f,
                "the Redis server's maxmemory-policy {policy:?} may evict the store's keys, \
                 which would hide rows from the guard; configure `noeviction` (or opt in \
                 with `allow_eviction(true)`)"
            ),
        }
    }
}

impl std::error::Error for RedisStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RedisStoreError::Connect { source } | RedisStoreError::Command { source, .. } => {
                Some(source)
            }
            RedisStoreError::EvictionPolicy { .. } => None,
        }
    }
}

fn command(operation: &'static str) -> impl FnOnce(redis::RedisError) -> RedisStoreError {
    move |source| RedisStoreError::Command { operation, source }
}

/// The one Redis argument a key or value serializes to.
fn arg<T: ToSingleRedisArg>(value: &T) -> Vec<u8> {
    value.to_redis_args().pop().unwrap_or_default()
}

/// An [`AsyncStore`] of rows in a Redis hash, indexed by a sorted set (see the module docs
/// for the layout).
///
/// Keys and values are any types the `redis` crate converts to and from one argument
/// (`String`, integers, `Vec<u8>`, ...).
///
/// # What Redis must be configured with
///
/// A row whose index entry is gone is missed by every scan, so a guard's warm-up and rebuilds
/// leave it out of the filter and it reads absent until its next write. The store's keys
/// must therefore never be evicted: the server's `maxmemory-policy` must be `noeviction`
/// (the default) or a `volatile-*` policy (which only evicts keys with a time to live; the
/// store sets none, and none may be set on its keys). [`RedisStore::connect`] reads the policy
/// (`CONFIG GET maxmemory-policy`) and refuses any other one, such as `allkeys-lru`, with
/// [`RedisStoreError::EvictionPolicy`] unless [`RedisStoreBuilder::allow_eviction`] opts in.
/// A server that does not answer `CONFIG GET` (the command renamed or disabled, as on some
/// hosted services) cannot be checked: the store connects, and
/// [`RedisStore::eviction_policy`] returns `None` so the application can warn. The policy
/// is read once, at connect.
///
/// # Sampling
///
/// [`sample_keys`](AsyncStore::sample_keys) asks the server for `n` distinct fields of the
/// rows' hash (`HRANDFIELD {ns}:rows n`, Redis 6.2 or later): O(`n`), one round trip. It
/// samples the rows themselves rather than the index, so a row written into the hash over
/// another connection without its index entry (which warm-ups and rebuilds miss) can be
/// drawn too. Redis picks each field with its own random choice over its hash table,
/// close to uniform but not exactly (fields in sparse buckets are favoured a little; a
/// small hash stored as a listpack is sampled exactly). A server that refuses the command
/// (older than 6.2, renamed away, or not permitted to the user: `ERR unknown command` or
/// `NOPERM`) is sampled by a full scan of the index instead, the default of
/// [`AsyncStore::sample_keys`] (uniform, O(rows)), from then on, and
/// [`fast_sampling`](AsyncStore::fast_sampling) turns `false`.
///
/// # Connections and faults
///
/// The store talks to the server over a [`ConnectionManager`]: one multiplexed connection,
/// replaced when it breaks (the server killed it, restarted, or a proxy dropped it), with up
/// to 6 connection attempts at jittered, doubling delays from 50 ms to 1 s; while the server
/// stays down each call fails with the connection error after those attempts, and the next
/// call starts over. A read (`get`, a scan page) that fails because the connection broke is
/// retried once, on the new connection. A write is not retried: one whose connection broke
/// may have been applied, and [`write_outcome_unknown`](AsyncStore::write_outcome_unknown)
/// says so, so a guard keeps its filter copy.
///
/// Such a write keeps its key among a guard's orphaned writes for good
/// ([`AsyncStore::PUT_ENDS_WITH_FUTURE`] stays `false`): a command queued or sent on the
/// multiplexed connection runs whenever the server reads it, after the caller's future was
/// dropped or its call failed, and the client learns of no point after which it no longer
/// can.
///
/// # Examples
///
/// ```no_run
/// use cuckoo_guard::guard::AsyncCacheGuard;
/// use cuckoo_guard::stores::RedisStore;
/// use cuckoo_guard::CuckooFilter;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::<String, String>::connect("redis://127.0.0.1:6379", "users").await?;
/// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000_000), store);
/// guard.warm_up(10_000, |_| {}).await?;
/// let user = guard.get(&"alice".to_string()).await?;
/// # Ok(()) }
/// ```
pub struct RedisStore<K = String, V = String> {
    connection: ConnectionManager,
    eviction_policy: Option<String>,
    rows: String,
    keys: String,
    seal: String,
    put: Script,
    delete: Script,
    /// Set once the server refused `HRANDFIELD`: samples scan the index from then on.
    sampling_refused: AtomicBool,
    _types: PhantomData<fn() -> (K, V)>,
}

/// Configures and connects a [`RedisStore`].
///
/// # Examples
///
/// ```no_run
/// use cuckoo_guard::stores::RedisStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::<String, String>::builder("redis://127.0.0.1:6379", "users")
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until `.connect()` is called"]
pub struct RedisStoreBuilder<K, V> {
    url: String,
    namespace: String,
    allow_eviction: bool,
    _types: PhantomData<fn() -> (K, V)>,
}

/// Leaves out the URL, which may hold a password.
impl<K, V> fmt::Debug for RedisStoreBuilder<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("url", &"<redacted>")
            .field("namespace", &self.namespace)
            .field("allow_eviction", &self.allow_eviction)
            .finish()
    }
}

impl<K, V> RedisStoreBuilder<K, V> {
    /// Connect even if the server's `maxmemory-policy` may evict the store's keys (an
    /// `allkeys-*` policy); default `false`, which refuses such a server with
    /// [`RedisStoreError::EvictionPolicy`]. Opting in accepts that an evicted row is lost
    /// and an evicted index entry hides its row from warm-ups and rebuilds until the row's
    /// next write through the store (see [`RedisStore`](RedisStore#what-redis-must-be-configured-with)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cuckoo_guard::stores::RedisStore;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::<String, String>::builder("redis://127.0.0.1:6379", "sessions")
    ///     .allow_eviction(true)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// Connects to the server and checks its `maxmemory-policy` (see
    /// [`RedisStore`](RedisStore#what-redis-must-be-configured-with)).
    ///
    /// # Errors
    ///
    /// [`RedisStoreError::Connect`] if the URL is invalid or the server cannot be reached;
    /// [`RedisStoreError::EvictionPolicy`] if the server may evict the store's keys and
    /// [`allow_eviction`](Self::allow_eviction) did not opt in.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cuckoo_guard::stores::{RedisStore, RedisStoreError};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// match RedisStore::<String, String>::builder("redis://127.0.0.1:6379", "users").connect().await {
    ///     Ok(store) => println!("connected, policy {:?}", store.eviction_policy()),
    ///     Err(RedisStoreError::EvictionPolicy { policy }) => eprintln!("set noeviction, not {policy}"),
    ///     Err(other) => return Err(other.into()),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn connect(self) -> Result<RedisStore<K, V>, RedisStoreError> {
        let connect = |source| RedisStoreError::Connect { source };
        let client = redis::Client::open(self.url.as_str()).map_err(connect)?;
        let mut connection = ConnectionManager::new_with_config(client, reconnect_config())
            .await
            .map_err(connect)?;
        let eviction_policy = eviction_policy(&mut connection)
            .await
            .map_err(|source| RedisStoreError::Connect { source })?;
        if let Some(policy) = &eviction_policy {
            if !self.allow_eviction && may_evict(policy) {
                return Err(RedisStoreError::EvictionPolicy {
                    policy: policy.clone(),
                });
            }
        }
        let namespace = &self.namespace;
        Ok(RedisStore {
            connection,
            eviction_policy,
            rows: format!("{{{namespace}}}:rows"),
            keys: format!("{{{namespace}}}:keys"),
            seal: format!("{{{namespace}}}:seal"),
            put: Script::new(&format!("{CHECK_TYPES}{CLEAR_SEAL}{PUT}")),
            delete: Script::new(&format!("{CHECK_TYPES}{CLEAR_SEAL}{DELETE}")),
            sampling_refused: AtomicBool::new(false),
            _types: PhantomData,
        })
    }
}

/// The server's `maxmemory-policy`, or `None` if it does not answer `CONFIG GET` (the command
/// renamed, disabled or not permitted).
pub(crate) async fn eviction_policy(
    connection: &mut ConnectionManager,
) -> redis::RedisResult<Option<String>> {
    let reply: redis::RedisResult<std::collections::HashMap<String, String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(connection)
        .await;
    match reply {
        Ok(mut config) => Ok(config.remove("maxmemory-policy")),
        Err(source) if connection_failed(&source) => Err(source),
        Err(_) => Ok(None),
    }
}

/// Whether `policy` may evict keys without a time to live: anything but `noeviction` and
/// the `volatile-*` policies (an unknown policy counts as evicting).
fn may_evict(policy: &str) -> bool {
    !(policy.eq_ignore_ascii_case("noeviction")
        || policy.to_ascii_lowercase().starts_with("volatile-"))
}

impl<K, V> RedisStore<K, V> {
    /// A builder for a store at `url` (`redis://host:port/db`) using the keys
    /// `{namespace}:rows`, `{namespace}:keys` and `{namespace}:seal`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cuckoo_guard::stores::RedisStore;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::<String, String>::builder("redis://127.0.0.1:6379", "users")
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder(
        url: impl Into<String>,
        namespace: impl Into<String>,
    ) -> RedisStoreBuilder<K, V> {
        RedisStoreBuilder {
            url: url.into(),
            namespace: namespace.into(),
            allow_eviction: false,
            _types: PhantomData,
        }
    }

    /// Connects to the server at `url` (`redis://host:port/db`) and uses the keys
    /// `{namespace}:rows` and `{namespace}:keys`: [`RedisStore::builder`] with its defaults,
    /// so a server whose `maxmemory-policy` may evict the store's keys is refused (see
    /// [below](RedisStore#what-redis-must-be-configured-with)).
    ///
    /// # Errors
    ///
    /// [`RedisStoreError::Connect`] if the URL is invalid or the server cannot be reached;
    /// [`RedisStoreError::EvictionPolicy`] if the server may evict the store's keys.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cuckoo_guard::stores::RedisStore;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::<String, Vec<u8>>::connect("redis://127.0.0.1:6379", "sessions").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str, namespace: &str) -> Result<Self, RedisStoreError> {
        Self::builder(url, namespace).connect().await
    }

    /// The server's `maxmemory-policy` as read at connect, or `None` if the server did not
    /// answer `CONFIG GET` (renamed, disabled or not permitted), so the store could not check
    /// that its keys are never evicted; an application may warn then.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = cuckoo_guard::stores::RedisStore::<String, String>::connect("redis://127.0.0.1", "ns").await?;
    /// if store.eviction_policy().is_none() {
    ///     eprintln!("warning: cannot check Redis's maxmemory-policy; it must be noeviction");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn eviction_policy(&self) -> Option<&str> {
        self.eviction_policy.as_deref()
    }

    /// The Redis key of the hash holding the rows, `{namespace}:rows` (see the module docs
    /// for the layout). Part of the store's data layout, for code that reads or loads the rows
    /// over its own connection; writing keys that way bypasses any guard in front of the store.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = cuckoo_guard::stores::RedisStore::<String, String>::connect("redis://127.0.0.1", "ns").await?;
    /// assert_eq!(store.rows_key(), "{ns}:rows");
    /// # Ok(()) }
    /// ```
    pub fn rows_key(&self) -> &str {
        &self.rows
    }

    /// The Redis key of the sorted set indexing the keys, `{namespace}:keys` (see the module
    /// docs for the layout). A row written over another connection must be added here too
    /// (`ZADD` with score 0), or scans and so the guard's warm-up miss it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = cuckoo_guard::stores::RedisStore::<String, String>::connect("redis://127.0.0.1", "ns").await?;
    /// assert_eq!(store.index_key(), "{ns}:keys");
    /// # Ok(()) }
    /// ```
    pub fn index_key(&self) -> &str {
        &self.keys
    }

    /// The Redis key of the seal a guard writes beside its snapshot ([`AsyncStore::SEALS`]),
    /// `{namespace}:seal`: the seal secret's 32 bytes, deleted by every put and delete
    /// through the store. A program that writes the rows over another connection must
    /// delete it too (`DEL {namespace}:seal`), or a guard restarted from a sealed snapshot
    /// would not know about its rows. Whoever can read the key can forge a snapshot file a
    /// restart trusts: keep it as private as the rows.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = cuckoo_guard::stores::RedisStore::<String, String>::connect("redis://127.0.0.1", "ns").await?;
    /// assert_eq!(store.seal_key(), "{ns}:seal");
    /// # Ok(()) }
    /// ```
    pub fn seal_key(&self) -> &str {
        &self.seal
    }

    /// A handle on the store's connection (cheap: every handle shares the one connection,
    /// and the manager behind it replaces it when it breaks).
    fn connection(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// Runs a read, and once more if it failed because the connection broke: the first
    /// failure made the manager start a new connection, which the second attempt waits for.
    async fn read<T, F: std::future::Future<Output = redis::RedisResult<T>>>(
        &self,
        operation: &'static str,
        attempt: impl Fn(ConnectionManager) -> F,
    ) -> Result<T, RedisStoreError> {
        match attempt(self.connection()).await {
            Err(error) if connection_failed(&error) => attempt(self.connection()).await,
            result => result,
        }
        .map_err(command(operation))
    }
}

/// How the store's connection manager replaces a broken connection: up to 6 attempts, 1 s
/// each, with exponential delays from 50 ms up to 1 s between them, each lengthened by a
/// random jitter of up to as much again (about 5 s in all), after which the call fails with
/// the connection error and the next call starts again. Replies time out after 5 s.
fn reconnect_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_number_of_retries(6)
        .set_min_delay(Duration::from_millis(50))
        .set_exponent_base(2.0)
        .set_max_delay(Duration::from_secs(1))
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(5)))
}

/// Whether the server refused a command as unknown (older than its version, renamed away)
/// or not permitted to this user (an ACL).
fn command_refused(error: &redis::RedisError) -> bool {
    match error.code() {
        Some("NOPERM") => true,
        Some("ERR") => error
            .detail()
            .is_some_and(|detail| detail.starts_with("unknown command")),
        _ => false,
    }
}

/// Whether `error` says the connection broke (rather than the server refusing the command).
fn connection_failed(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.is_unrecoverable_error()
}

impl<K, V> AsyncStore for RedisStore<K, V>
where
    K: ToSingleRedisArg + FromRedisValue + Hash + Eq + Clone + Send + Sync,
    V: ToSingleRedisArg + FromRedisValue + Send + Sync,
{
    type Key = K;
    type Value = V;
    /// The raw bytes of the last key of the previous page.
    type Cursor = Vec<u8>;
    type Error = RedisStoreError;

    async fn get(&self, key: &K) -> Result<Option<V>, RedisStoreError> {
        let mut get = redis::cmd("HGET");
        get.arg(&self.rows).arg(arg(key));
        self.read("get", |mut connection| {
            let get = &get;
            async move { get.query_async(&mut connection).await }
        })
        .await
    }

    /// One `HMGET` of the rows hash for the batch.
    async fn get_many(&self, keys: &[K]) -> Result<Vec<Option<V>>, RedisStoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut get = redis::cmd("HMGET");
        get.arg(&self.rows);
        for key in keys {
            get.arg(arg(key));
        }
        self.read("get_many", |mut connection| {
            let get = &get;
            async move { get.query_async(&mut connection).await }
        })
        .await
    }

    async fn put(&self, key: &K, value: &V) -> Result<Written, RedisStoreError> {
        let created: i64 = self
            .put
            .key(&self.rows)
            .key(&self.keys)
            .key(&self.seal)
            .arg(arg(key))
            .arg(arg(value))
            .invoke_async(&mut self.connection())
            .await
            .map_err(command("put"))?;
        Ok(if created == 1 {
            Written::Created
        } else {
            Written::Updated
        })
    }

    async fn delete(&self, key: &K) -> Result<bool, RedisStoreError> {
        let deleted: i64 = self
            .delete
            .key(&self.rows)
            .key(&self.keys)
            .key(&self.seal)
            .arg(arg(key))
            .invoke_async(&mut self.connection())
            .await
            .map_err(command("delete"))?;
        Ok(deleted == 1)
    }

    async fn scan_keys(
        &self,
        cursor: Option<&Vec<u8>>,
        limit: usize,
    ) -> Result<ScanPage<K, Vec<u8>>, RedisStoreError> {
        let start = match cursor {
            None => b"-".to_vec(),
            Some(last) => [b"(".as_slice(), last].concat(),
        };
        let limit = limit.max(1);
        let mut scan = redis::cmd("ZRANGE");
        scan.arg(&self.keys)
            .arg(start)
            .arg("+")
            .arg("BYLEX")
            .arg("LIMIT")
            .arg(0)
            .arg(limit);
        let raw: Vec<Vec<u8>> = self
            .read("scan", |mut connection| {
                let scan = &scan;
                async move { scan.query_async(&mut connection).await }
            })
            .await?;
        let next = if raw.len() == limit {
            raw.last().cloned()
        } else {
            None
        };
        let keys = raw
            .into_iter()
            .map(|bytes| K::from_redis_value(redis::Value::BulkString(bytes)))
            .collect::<Result<Vec<K>, _>>()
            .map_err(|e| command("scan")(e.into()))?;
        Ok(ScanPage { keys, next })
    }

    fn write_outcome_unknown(error: &RedisStoreError) -> bool {
        // Only the scripts' own type check is known to fail before any write; any other
        // failure (a lost connection, an error between ZADD and HSET) leaves the outcome open.
        !matches!(
            error,
            RedisStoreError::Command { source, .. } if source.code() == Some(TYPE_CHECK_CODE)
        )
    }

    const SEALS: bool = true;

    async fn read_seal(&self) -> Result<Option<SealSecret>, RedisStoreError> {
        let mut get = redis::cmd("GET");
        get.arg(&self.seal);
        let bytes: Option<Vec<u8>> = self
            .read("read the seal", |mut connection| {
                let get = &get;
                async move { get.query_async(&mut connection).await }
            })
            .await?;
        // An older build's decimal id (or anything but 32 bytes) is no seal.
        Ok(bytes.and_then(|bytes| SealSecret::from_slice(&bytes)))
    }

    async fn write_seal(&self, secret: &SealSecret) -> Result<(), RedisStoreError> {
        redis::cmd("SET")
            .arg(&self.seal)
            .arg(&secret.as_bytes()[..])
            .query_async::<()>(&mut self.connection())
            .await
            .map_err(command("write the seal"))
    }

    /// `HRANDFIELD` on the rows' hash, or the default's scan if the server refuses it (see
    /// [the store's docs](RedisStore#sampling)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cuckoo_guard::guard::AsyncStore;
    /// use cuckoo_guard::stores::RedisStore;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::<String, String>::connect("redis://127.0.0.1:6379", "users").await?;
    /// for key in store.sample_keys(100).await? {
    ///     println!("sampled {key}");
    /// }
    /// # Ok(()) }
    /// ```
    async fn sample_keys(&self, n: usize) -> Result<Vec<K>, RedisStoreError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        // ORDERING: Relaxed; a hint that publishes nothing: a stale `false` only sends
        // HRANDFIELD once more, which the server refuses again.
        if !self.sampling_refused.load(Ordering::Relaxed) {
            let mut sample = redis::cmd("HRANDFIELD");
            // A positive count: distinct fields, at most as many as the hash holds.
            sample.arg(&self.rows).arg(n.min(i64::MAX as usize));
            let reply: Result<Vec<Vec<u8>>, RedisStoreError> = self
                .read("sample", |mut connection| {
                    let sample = &sample;
                    async move { sample.query_async(&mut connection).await }
                })
                .await;
            match reply {
                Ok(raw) => {
                    return raw
                        .into_iter()
                        .map(|bytes| K::from_redis_value(redis::Value::BulkString(bytes)))
                        .collect::<Result<Vec<K>, _>>()
                        .map_err(|e| command("sample")(e.into()));
                }
                Err(RedisStoreError::Command { source, .. }) if command_refused(&source) => {
                    // ORDERING: Relaxed; as the load above.
                    self.sampling_refused.store(true, Ordering::Relaxed);
                }
                Err(error) => return Err(error),
            }
        }
        sample_by_scan_async(self, n).await
    }

    /// `true` until the server refuses `HRANDFIELD` (see
    /// [the store's docs](RedisStore#sampling)).
    fn fast_sampling(&self) -> bool {
        // ORDERING: Relaxed; as in `sample_keys`.
        !self.sampling_refused.load(Ordering::Relaxed)
    }
}

impl<K, V> fmt::Debug for RedisStore<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("rows", &self.rows)
            .field("keys", &self.keys)
            .field("eviction_policy", &self.eviction_policy)
            .finish_non_exhaustive()
    }
}
