//! The drill's database: SQLite (embedded, the default), PostgreSQL or Redis, each behind the
//! crate's guard. The store answers the lookups; for the bulk work its trait does not cover
//! (count, clear, bulk load) each backend opens its own driver connection to the same data.

mod postgres;
mod redact;
mod redis;
mod sqlite;

use std::convert::Infallible;
use std::future::Future;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use cuckoo_guard::fleet::{Fleet, FleetConfig, FleetStats, RedisCoordinator};
use cuckoo_guard::guard::{
    AsyncCacheGuard, AsyncStore, FilterRef, GuardStats, Restart, Sealed, Written,
};
use cuckoo_guard::CuckooFilter;
use tokio::runtime::Runtime;

use crate::{CliError, Context, DrillArgs};
use redact::looks_like_conninfo;
pub(crate) use redact::redact;

/// One engine as the drill uses it: the drill's table (a namespace in Redis), bulk access to it
/// over the tool's own connection, and the guard in front of it.
pub(crate) trait Backend: Sync {
    /// The database, for the report.
    fn describe(&self) -> String;

    /// The engine's short name, for the report.
    fn kind(&self) -> &'static str;

    /// How many rows the table holds, and whether they are the drill's keys `1..=rows`.
    fn census(&self, rows: u64) -> Result<Census, CliError>;

    /// Deletes every row of the drill's table (`--fresh`).
    fn clear(&self) -> Result<(), CliError>;

    /// Inserts the rows `lo..=hi` (straight into the database: the guard is not warm yet).
    fn load(&self, lo: i64, hi: i64) -> Result<(), CliError>;

    /// The guard in front of the table.
    fn guard(&self) -> &dyn Guarded;

    /// Restarts the guard as a new process would: opens a new store over new connections and
    /// restores a guard from the snapshot at `path` ([`AsyncCacheGuard::restore`]), with
    /// `fallback` as its filter if the snapshot is not trusted (that guard is warming: call
    /// [`Guarded::warm_up`]). The new guard replaces the old one, which is dropped after the
    /// timing.
    fn restart(&mut self, path: &Path, fallback: CuckooFilter) -> Result<Restarted, CliError>;

    /// Another guard with `filter` in front of the same table, as another instance of a
    /// service runs it: its own store over new connections, on its own runtime of up to
    /// `threads` workers. It is warming (join it to a fleet, or warm it up).
    fn instance(&self, filter: CuckooFilter, threads: usize) -> Result<Box<dyn Guarded>, CliError>;
}

/// How [`Backend::restart`] started the new guard.
#[derive(Debug)]
pub(crate) struct Restarted {
    /// Whether the snapshot was trusted, and why not.
    pub(crate) restart: Restart,
    /// From opening the store until `restore` returned (no warm-up).
    pub(crate) elapsed: Duration,
    /// Of that, opening the store.
    pub(crate) open: Duration,
}

/// The guard in front of the drill's table, and the store behind it: an [`AsyncGuard`] for every
/// backend (the SQLite store's sync calls run through the library's `Blocking`).
pub(crate) trait Guarded: Sync {
    /// Loads every key of the store into the guard's filter, reporting keys loaded so far.
    fn warm_up(&self, progress: &mut (dyn FnMut(u64) + Send)) -> Result<u64, CliError>;

    /// Looks `key` up in the store itself: one database query. `Ok(true)` if it has a row.
    fn direct_get(&self, key: i64) -> Result<bool, String>;

    /// Looks `key` up through the guard. `Ok(true)` if it has a row.
    fn guard_get(&self, key: i64) -> Result<bool, String>;

    /// Creates (or updates) the row `key` through the guard. `Ok(true)` if it created it.
    fn guard_put(&self, key: i64) -> Result<bool, String>;

    /// Deletes the row `key` through the guard. `Ok(true)` if there was one.
    fn guard_delete(&self, key: i64) -> Result<bool, String>;

    /// The guard's counters.
    fn stats(&self) -> GuardStats;

    /// The guard's filter.
    fn filter(&self) -> FilterRef;

    /// Writes the filter's snapshot to `path` and seals it in the store.
    fn seal(&self, path: &Path) -> Result<Sealed, CliError>;

    /// Joins the guard, still warming, to the fleet `config` names, coordinated through the
    /// Redis at `redis_url` with creates held for `hold` on a new fleet. Returns once the
    /// guard is warm (the join's warm-up replaces [`Guarded::warm_up`]).
    fn join_fleet(
        &self,
        redis_url: &str,
        config: FleetConfig,
        hold: Duration,
    ) -> Result<(), CliError>;

    /// The fleet member's counters, if the guard joined a fleet.
    fn fleet_stats(&self) -> Option<FleetStats>;

    /// Leaves the fleet, if the guard is in one (writers stop waiting for it).
    fn leave_fleet(&self);
}

/// Opens the database `--db` names (and, unless `--no-create`, creates the drill's table) and
/// puts a guard with `filter` in front of it.
pub(crate) fn open(args: &DrillArgs, filter: CuckooFilter) -> Result<Box<dyn Backend>, CliError> {
    let db = args.db.as_deref().unwrap_or("");
    if db.starts_with("postgres://") || db.starts_with("postgresql://") || looks_like_conninfo(db) {
        Ok(Box::new(postgres::PostgresBackend::open(db, args, filter)?))
    } else if db.starts_with("redis://") {
        Ok(Box::new(redis::RedisBackend::open(db, args, filter)?))
    } else if let Some((scheme, _)) = db.split_once("://") {
        let plain = scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        let scheme = if plain { scheme } else { "(not printed)" };
        Err(CliError::new(format!(
            "--db: unknown scheme {scheme:?}; give an SQLite file path, postgres://... or redis://..."
        )))
    } else {
        Ok(Box::new(sqlite::SqliteBackend::open(db, args, filter)?))
    }
}

/// Deletes the keys the fleet `name` left in the Redis at `redis_url`, once every member left
/// (the leases expire by themselves).
pub(crate) fn remove_fleet_keys(redis_url: &str, name: &str) -> Result<(), CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let prefix = format!("cuckoo-guard:{{{name}}}");
    let mut del = ::redis::cmd("DEL");
    for suffix in [
        "log", "acks", "members", "renewals", "acked", "inflight", "trimmed", "epoch", "hold",
        "born", "seals",
    ] {
        del.arg(format!("{prefix}:{suffix}"));
    }
    bounded(&runtime, CONNECT_TIMEOUT, async {
        let mut conn = ::redis::Client::open(redis_url)?
            .get_multiplexed_async_connection()
            .await?;
        del.query_async::<()>(&mut conn).await
    })
    .context(&format!(
        "cannot remove the fleet's keys from Redis at {}",
        redact(redis_url)
    ))
}

/// Keys per page of the warm-up's scan.
const WARM_UP_PAGE: usize = 20_000;
/// How long connecting to a server may take before the drill gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a bulk step (count, clear, load a chunk, warm up, seal) may take.
const BULK_TIMEOUT: Duration = Duration::from_secs(300);
/// How long one lookup or write may take before it counts as a store error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The value stored for key `k` (the drill only checks presence; the value gives rows a
/// realistic width).
fn value_of(k: i64) -> String {
    format!("row-{k}")
}

/// The drill's SQL table: the one place its name and columns are defined. The SQL backends
/// configure their store with these names and build their own statements from them.
#[derive(Debug)]
struct Table {
    /// The table (`--table`).
    name: String,
    /// The key column: a unique `BIGINT`/`INTEGER`.
    key: String,
    /// The value column.
    value: String,
}

impl Table {
    fn new(args: &DrillArgs) -> Table {
        Table {
            name: args.table.clone(),
            key: "key".into(),
            value: "value".into(),
        }
    }

    /// The table, key column and value column as SQL identifiers.
    fn quoted(&self) -> (String, String, String) {
        (quote(&self.name), quote(&self.key), quote(&self.value))
    }

    /// The rows, smallest key and largest key of the table, for [`Census::of_keys`].
    fn census_sql(&self) -> String {
        let (t, k, _) = self.quoted();
        format!("SELECT count(*), min({k}), max({k}) FROM {t}")
    }
}

/// `"name"`, with embedded quotes doubled: an SQL identifier that cannot inject SQL. Every
/// statement the tool builds quotes its names with this.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// What the table holds before the drill loads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Census {
    /// Rows in the table.
    pub(crate) rows: u64,
    /// Whether the rows are exactly the drill's keys `1..=N`.
    pub(crate) is_drill_data: bool,
}

impl Census {
    /// The census of `count` unique integer keys between `min` and `max`: `rows` of them
    /// between 1 and `rows` are exactly `1..=rows`.
    fn of_keys(
        count: i64,
        min: Option<i64>,
        max: Option<i64>,
        rows: u64,
    ) -> Result<Census, CliError> {
        let expect = expected_rows(rows)?;
        Ok(Census {
            rows: count.max(0) as u64,
            is_drill_data: count == expect && min == Some(1) && max == Some(expect),
        })
    }
}

/// `rows` as the largest key of the drill's data.
fn expected_rows(rows: u64) -> Result<i64, CliError> {
    i64::try_from(rows).map_err(|_| CliError::new("too many rows"))
}

/// A server call that failed, or did not answer in time.
#[derive(Debug)]
enum Bounded<E> {
    Failed(E),
    TimedOut(Duration),
}

impl<E: std::fmt::Display> std::fmt::Display for Bounded<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bounded::Failed(error) => error.fmt(f),
            Bounded::TimedOut(limit) => write!(f, "no answer within {} s", limit.as_secs()),
        }
    }
}

impl<E: std::error::Error> std::error::Error for Bounded<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Bounded::Failed(error) => error.source(),
            Bounded::TimedOut(_) => None,
        }
    }
}

/// Runs `future` on `runtime`, giving up after `limit`: a stuck server must not hang the drill.
fn bounded<T, E>(
    runtime: &Runtime,
    limit: Duration,
    future: impl Future<Output = Result<T, E>>,
) -> Result<T, Bounded<E>> {
    match runtime.block_on(async { tokio::time::timeout(limit, future).await }) {
        Ok(result) => result.map_err(Bounded::Failed),
        Err(_) => Err(Bounded::TimedOut(limit)),
    }
}

/// The async runtime of a server backend.
fn runtime(threads: usize) -> Result<Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.clamp(1, 4))
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Runs a connect future with [`CONNECT_TIMEOUT`].
fn connect<T, E: std::error::Error + 'static>(
    runtime: &Runtime,
    what: &str,
    future: impl Future<Output = Result<T, E>>,
) -> Result<T, CliError> {
    runtime
        .block_on(async { tokio::time::timeout(CONNECT_TIMEOUT, future).await })
        .map_err(|_| {
            CliError::new(format!(
                "{what}: no answer within {} s",
                CONNECT_TIMEOUT.as_secs()
            ))
        })?
        .context(what)
}

fn seal_context(path: &Path) -> String {
    format!("cannot seal the guard's snapshot {}", path.display())
}

/// An [`AsyncCacheGuard`], its fleet membership if it joined one, and the runtime that drives
/// them (and the backend's own connection).
struct AsyncGuard<S: AsyncStore> {
    fleet: Mutex<Option<Fleet<RedisCoordinator, i64>>>,
    guard: AsyncCacheGuard<S>,
    runtime: Runtime,
}

impl<S: AsyncStore> AsyncGuard<S> {
    fn new(guard: AsyncCacheGuard<S>, runtime: Runtime) -> Self {
        AsyncGuard {
            fleet: Mutex::new(None),
            guard,
            runtime,
        }
    }

    /// A new guard with `filter` over the store `open` opens on a new runtime.
    fn instance(
        threads: usize,
        filter: CuckooFilter,
        open: impl FnOnce(&Runtime) -> Result<S, CliError>,
    ) -> Result<Self, CliError>
    where
        S: 'static,
    {
        let runtime = runtime(threads)?;
        let store = open(&runtime)?;
        Ok(AsyncGuard::new(
            AsyncCacheGuard::new(filter, store),
            runtime,
        ))
    }

    fn fleet(&self) -> std::sync::MutexGuard<'_, Option<Fleet<RedisCoordinator, i64>>> {
        // A panic while holding it ends the drill.
        self.fleet.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs a bulk step (count, clear, load a chunk, warm up) with [`BULK_TIMEOUT`].
    fn run_bulk<T, E>(&self, future: impl Future<Output = Result<T, E>>) -> Result<T, Bounded<E>> {
        bounded(&self.runtime, BULK_TIMEOUT, future)
    }

    /// Runs one lookup with [`REQUEST_TIMEOUT`]; `Ok(true)` if the key has a row.
    fn request<V, E: std::fmt::Display>(
        &self,
        future: impl Future<Output = Result<Option<V>, E>>,
    ) -> Result<bool, String> {
        bounded(&self.runtime, REQUEST_TIMEOUT, future)
            .map(|row| row.is_some())
            .map_err(|e| e.to_string())
    }

    /// [`Backend::restart`] for a backend whose `open` opens a new store on the runtime.
    fn restart(
        &mut self,
        path: &Path,
        open: impl FnOnce(&Runtime) -> Result<S, CliError>,
        fallback: CuckooFilter,
    ) -> Result<Restarted, CliError>
    where
        S: 'static,
    {
        let started = Instant::now();
        let store = open(&self.runtime)?;
        let opened = started.elapsed();
        let restore = async {
            Ok::<_, Infallible>(AsyncCacheGuard::restore(path, store, move || fallback).await)
        };
        let (guard, restart) = self.run_bulk(restore).context("cannot restore the guard")?;
        let elapsed = started.elapsed();
        self.guard = guard;
        Ok(Restarted {
            restart,
            elapsed,
            open: opened,
        })
    }
}

impl<S> Guarded for AsyncGuard<S>
where
    S: AsyncStore<Key = i64, Value = String> + 'static,
    AsyncGuard<S>: Sync,
{
    fn warm_up(&self, progress: &mut (dyn FnMut(u64) + Send)) -> Result<u64, CliError> {
        let done = self
            .run_bulk(
                self.guard
                    .warm_up(WARM_UP_PAGE, |p| progress(p.keys_loaded)),
            )
            .context("warm-up failed")?;
        Ok(done.keys_loaded)
    }

    fn direct_get(&self, key: i64) -> Result<bool, String> {
        self.request(self.guard.store().get(&key))
    }

    fn guard_get(&self, key: i64) -> Result<bool, String> {
        self.request(self.guard.get(&key))
    }

    fn guard_put(&self, key: i64) -> Result<bool, String> {
        bounded(
            &self.runtime,
            REQUEST_TIMEOUT,
            self.guard.put(&key, &value_of(key)),
        )
        .map(|written| written == Written::Created)
        .map_err(|e| e.to_string())
    }

    fn guard_delete(&self, key: i64) -> Result<bool, String> {
        bounded(&self.runtime, REQUEST_TIMEOUT, self.guard.delete(&key)).map_err(|e| e.to_string())
    }

    fn stats(&self) -> GuardStats {
        self.guard.stats()
    }

    fn filter(&self) -> FilterRef {
        self.guard.filter()
    }

    fn seal(&self, path: &Path) -> Result<Sealed, CliError> {
        self.run_bulk(self.guard.seal(path))
            .context(&seal_context(path))
    }

    fn join_fleet(
        &self,
        redis_url: &str,
        config: FleetConfig,
        hold: Duration,
    ) -> Result<(), CliError> {
        let coordinator = connect(
            &self.runtime,
            &format!("cannot reach the fleet's Redis at {}", redact(redis_url)),
            RedisCoordinator::builder(redis_url, config.name())
                .hold(hold)
                .connect(),
        )?;
        let fleet = self
            .run_bulk(Fleet::join(&self.guard, coordinator, config))
            .context("cannot join the fleet")?;
        *self.fleet() = Some(fleet);
        Ok(())
    }

    fn fleet_stats(&self) -> Option<FleetStats> {
        self.fleet().as_ref().map(Fleet::stats)
    }

    fn leave_fleet(&self) {
        let Some(fleet) = self.fleet().take() else {
            return;
        };
        // Best effort: a registration left behind expires with its lease.
        let _ = self.run_bulk(async {
            fleet.leave().await;
            Ok::<_, Infallible>(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote("t"), "\"t\"");
        assert_eq!(quote("a\"b"), "\"a\"\"b\"");
    }
}
