//! The drill's database: SQLite (embedded, the default), PostgreSQL or Redis, each behind the
//! crate's guard, plus the few bulk operations the drill needs that the store traits do not
//! cover (count, clear, bulk load).

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use cuckoo_guard::guard::{AsyncCacheGuard, AsyncStore, CacheGuard, GuardStats, Store};
use cuckoo_guard::stores::{PostgresStore, RedisStore, SqliteStore};
use cuckoo_guard::CuckooFilter;
use tempfile::TempDir;
use tokio::runtime::Runtime;

use crate::{CliError, Context, DrillArgs};

/// How long connecting to a server may take before the drill gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The value stored for key `k` (the drill only checks presence; the value gives rows a
/// realistic width).
fn value_of(k: i64) -> String {
    format!("row-{k}")
}

/// `"name"`, with embedded quotes doubled: an SQL identifier that cannot inject SQL.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The URL with any password replaced by `***`, for printing: the userinfo password (which
/// may itself contain `/` or `@`) and any `password=` query parameter.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let (head, query) = match url.find('?') {
        Some(q) => (&url[..q], Some(&url[q..])),
        None => (url, None),
    };
    // The userinfo ends at the last `@` of the part before the query.
    let mut out = match head[scheme_end..].rfind('@') {
        Some(at) => {
            let userinfo = &head[scheme_end..scheme_end + at];
            let user = userinfo.split(':').next().unwrap_or("");
            let password = if userinfo.contains(':') { ":***" } else { "" };
            format!(
                "{}{user}{password}{}",
                &head[..scheme_end],
                &head[scheme_end + at..]
            )
        }
        None => head.to_string(),
    };
    if let Some(query) = query {
        let redacted: Vec<String> = query[1..]
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&redacted.join("&"));
    }
    out
}

/// How long a bulk step (count, clear, load a chunk, warm up) may take on a server.
const BULK_TIMEOUT: Duration = Duration::from_secs(300);
/// How long one lookup may take on a server before it counts as a store error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A server call that failed, or did not answer in time.
#[derive(Debug)]
pub(crate) enum Bounded<E> {
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

fn bounded_bulk<T, E>(
    runtime: &Runtime,
    future: impl Future<Output = Result<T, E>>,
) -> Result<T, Bounded<E>> {
    bounded(runtime, BULK_TIMEOUT, future)
}

fn bounded_request<T, E>(
    runtime: &Runtime,
    future: impl Future<Output = Result<T, E>>,
) -> Result<T, Bounded<E>> {
    bounded(runtime, REQUEST_TIMEOUT, future)
}

/// What the table holds before the drill loads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Census {
    /// Rows in the table.
    pub(crate) rows: u64,
    /// Whether the rows are exactly the drill's keys `1..=N`.
    pub(crate) is_drill_data: bool,
}

/// The drill's database and the guard in front of it.
pub(crate) enum Backend {
    Sqlite {
        guard: CacheGuard<SqliteStore<i64, String>>,
        table: String,
        /// Keeps the temporary directory (and the database in it) alive until the drill ends.
        _temp: Option<TempDir>,
    },
    Postgres {
        guard: AsyncCacheGuard<PostgresStore<i64, String>>,
        table: String,
        url: String,
        runtime: Runtime,
    },
    Redis {
        guard: AsyncCacheGuard<RedisStore<i64, String>>,
        url: String,
        runtime: Runtime,
    },
}

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

impl Backend {
    /// Opens (and, unless `--no-create`, creates) the drill's table and puts a guard with
    /// `filter` in front of it.
    pub(crate) fn open(args: &DrillArgs, filter: CuckooFilter) -> Result<Backend, CliError> {
        let threads = args.threads();
        let db = args.db.as_deref().unwrap_or("");
        if db.starts_with("postgres://") || db.starts_with("postgresql://") {
            let runtime = runtime(threads)?;
            let url = redact(db);
            let store = connect(
                &runtime,
                &format!("cannot open PostgreSQL at {url}"),
                PostgresStore::<i64, String>::builder(db)
                    .table(&args.table)
                    .create_table_if_missing(!args.no_create)
                    .connections(threads.clamp(1, 16))
                    .connect(),
            )?;
            Ok(Backend::Postgres {
                guard: AsyncCacheGuard::new(filter, store),
                table: args.table.clone(),
                url,
                runtime,
            })
        } else if db.starts_with("redis://") {
            let runtime = runtime(threads)?;
            let url = redact(db);
            let store = connect(
                &runtime,
                &format!("cannot open Redis at {url}"),
                RedisStore::<i64, String>::connect(db, &args.table),
            )?;
            let backend = Backend::Redis {
                guard: AsyncCacheGuard::new(filter, store),
                url,
                runtime,
            };
            // Redis has no tables to create; "missing" is a namespace without rows.
            if args.no_create && backend.census(args.rows)?.rows == 0 {
                return Err(CliError::new(format!(
                    "Redis namespace {:?} holds no rows (and --no-create forbids loading them)",
                    args.table
                )));
            }
            Ok(backend)
        } else if let Some((scheme, _)) = db.split_once("://") {
            Err(CliError::new(format!(
                "--db: unknown scheme {scheme:?}; give an SQLite file path, postgres://... or redis://..."
            )))
        } else {
            let (path, temp) = if db.is_empty() {
                let temp = tempfile::Builder::new()
                    .prefix("cuckoo-guard-drill-")
                    .tempdir()
                    .context("cannot create a temporary directory for the database")?;
                (temp.path().join("drill.sqlite"), Some(temp))
            } else {
                (PathBuf::from(db), None)
            };
            let store = SqliteStore::<i64, String>::builder(&path)
                .table(&args.table)
                .create_table_if_missing(!args.no_create)
                .connections(threads.clamp(1, 64))
                .open()
                .map_err(|e| CliError::from_error("cannot open the drill's database", &e))?;
            Ok(Backend::Sqlite {
                guard: CacheGuard::new(filter, store),
                table: args.table.clone(),
                _temp: temp,
            })
        }
    }

    /// The database, for the report.
    pub(crate) fn describe(&self) -> String {
        match self {
            Backend::Sqlite { guard, _temp, .. } => format!(
                "SQLite {}{}",
                guard.store().path().display(),
                if _temp.is_some() { " (temporary)" } else { "" }
            ),
            Backend::Postgres { url, .. } => format!("PostgreSQL {url}"),
            Backend::Redis { url, .. } => format!("Redis {url}"),
        }
    }

    /// The engine's short name, for the report.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Backend::Sqlite { .. } => "sqlite",
            Backend::Postgres { .. } => "postgres",
            Backend::Redis { .. } => "redis",
        }
    }

    /// How many rows the table holds, and whether they are the drill's keys `1..=rows`.
    pub(crate) fn census(&self, rows: u64) -> Result<Census, CliError> {
        let expect = i64::try_from(rows).map_err(|_| CliError::new("too many rows"))?;
        match self {
            Backend::Sqlite { guard, table, .. } => {
                let sql = format!(
                    "SELECT count(*), min({k}), max({k}) FROM {t}",
                    k = quote("key"),
                    t = quote(table)
                );
                let (count, min, max): (i64, Option<i64>, Option<i64>) = guard
                    .store()
                    .with_connection(|c| {
                        c.query_row(&sql, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    })
                    .context("cannot count the drill's rows")?;
                Ok(Census {
                    rows: count.max(0) as u64,
                    // Keys are unique integers: N of them between 1 and N are exactly 1..=N.
                    is_drill_data: count == expect && min == Some(1) && max == Some(expect),
                })
            }
            Backend::Postgres {
                guard,
                table,
                runtime,
                ..
            } => {
                let sql = format!(
                    "SELECT count(*), min({k}), max({k}) FROM {t}",
                    k = quote("key"),
                    t = quote(table)
                );
                let row = bounded_bulk(runtime, guard.store().client().query_one(&sql, &[]))
                    .context("cannot count the drill's rows")?;
                let read = || -> Result<(i64, Option<i64>, Option<i64>), tokio_postgres::Error> {
                    Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
                };
                let (count, min, max) = read().context(&format!(
                    "table {table:?} does not have the drill's shape (a bigint \"key\")"
                ))?;
                Ok(Census {
                    rows: count.max(0) as u64,
                    is_drill_data: count == expect && min == Some(1) && max == Some(expect),
                })
            }
            Backend::Redis { guard, runtime, .. } => {
                let (rows_key, keys_key) = guard.store().redis_keys();
                let (hlen, zcard, first, last): (u64, u64, bool, bool) = bounded_bulk(
                    runtime,
                    redis::pipe()
                        .cmd("HLEN")
                        .arg(rows_key)
                        .cmd("ZCARD")
                        .arg(keys_key)
                        .cmd("HEXISTS")
                        .arg(rows_key)
                        .arg(1)
                        .cmd("HEXISTS")
                        .arg(rows_key)
                        .arg(expect)
                        .query_async(&mut guard.store().connection()),
                )
                .context("cannot count the drill's rows")?;
                Ok(Census {
                    rows: hlen,
                    is_drill_data: hlen == rows && zcard == rows && first && last,
                })
            }
        }
    }

    /// Deletes every row of the drill's table (`--fresh`).
    pub(crate) fn clear(&self) -> Result<(), CliError> {
        match self {
            Backend::Sqlite { guard, table, .. } => {
                let sql = format!("DELETE FROM {}", quote(table));
                guard
                    .store()
                    .with_connection(|c| c.execute(&sql, []))
                    .context("cannot clear the drill's table")?;
            }
            Backend::Postgres {
                guard,
                table,
                runtime,
                ..
            } => {
                let sql = format!("TRUNCATE {}", quote(table));
                bounded_bulk(runtime, guard.store().client().batch_execute(&sql))
                    .context("cannot clear the drill's table")?;
            }
            Backend::Redis { guard, runtime, .. } => {
                let (rows_key, keys_key) = guard.store().redis_keys();
                let () = bounded_bulk(
                    runtime,
                    redis::cmd("UNLINK")
                        .arg(rows_key)
                        .arg(keys_key)
                        .query_async(&mut guard.store().connection()),
                )
                .context("cannot clear the drill's keys")?;
            }
        }
        Ok(())
    }

    /// Inserts the rows `lo..=hi` (straight into the store: the guard is not warm yet).
    pub(crate) fn load(&self, lo: i64, hi: i64) -> Result<(), CliError> {
        match self {
            Backend::Sqlite { guard, table, .. } => {
                let sql = format!(
                    "INSERT INTO {} ({}, {}) VALUES (?1, ?2)",
                    quote(table),
                    quote("key"),
                    quote("value")
                );
                guard
                    .store()
                    .with_connection(|c| {
                        let tx = c.transaction()?;
                        {
                            let mut insert = tx.prepare_cached(&sql)?;
                            for k in lo..=hi {
                                insert.execute((k, value_of(k)))?;
                            }
                        }
                        tx.commit()
                    })
                    .context("cannot load the drill's rows")
            }
            Backend::Postgres {
                guard,
                table,
                runtime,
                ..
            } => {
                let sql = format!(
                    "INSERT INTO {} ({}, {}) SELECT g, 'row-' || g \
                     FROM generate_series($1::bigint, $2::bigint) AS g",
                    quote(table),
                    quote("key"),
                    quote("value")
                );
                bounded_bulk(runtime, guard.store().client().execute(&sql, &[&lo, &hi]))
                    .map(drop)
                    .context("cannot load the drill's rows")
            }
            Backend::Redis { guard, runtime, .. } => {
                let (rows_key, keys_key) = guard.store().redis_keys();
                // Small pipelines: the driver times out a reply that takes too long.
                const PIPELINE_ROWS: i64 = 2_000;
                let mut start = lo;
                while start <= hi {
                    let end = (start + PIPELINE_ROWS - 1).min(hi);
                    let mut pipe = redis::pipe();
                    for k in start..=end {
                        pipe.cmd("HSET")
                            .arg(rows_key)
                            .arg(k)
                            .arg(value_of(k))
                            .ignore();
                        pipe.cmd("ZADD").arg(keys_key).arg(0).arg(k).ignore();
                    }
                    let () =
                        bounded_bulk(runtime, pipe.query_async(&mut guard.store().connection()))
                            .context("cannot load the drill's rows")?;
                    start = end + 1;
                }
                Ok(())
            }
        }
    }

    /// Loads every key of the store into the guard's filter, reporting keys loaded so far.
    pub(crate) fn warm_up(&self, progress: impl FnMut(u64) + Send) -> Result<u64, CliError> {
        const PAGE: usize = 20_000;
        let mut progress = progress;
        let done = match self {
            Backend::Sqlite { guard, .. } => guard
                .warm_up(PAGE, |p| progress(p.keys_loaded))
                .context("warm-up failed")?,
            Backend::Postgres { guard, runtime, .. } => {
                bounded_bulk(runtime, guard.warm_up(PAGE, |p| progress(p.keys_loaded)))
                    .context("warm-up failed")?
            }
            Backend::Redis { guard, runtime, .. } => {
                bounded_bulk(runtime, guard.warm_up(PAGE, |p| progress(p.keys_loaded)))
                    .context("warm-up failed")?
            }
        };
        Ok(done.keys_loaded)
    }

    /// Looks `key` up in the store itself: one database query. `Ok(true)` if it has a row.
    pub(crate) fn direct_get(&self, key: i64) -> Result<bool, String> {
        match self {
            Backend::Sqlite { guard, .. } => sync_present(guard.store(), key),
            Backend::Postgres { guard, runtime, .. } => async_present(runtime, guard.store(), key),
            Backend::Redis { guard, runtime, .. } => async_present(runtime, guard.store(), key),
        }
    }

    /// Looks `key` up through the guard. `Ok(true)` if it has a row.
    pub(crate) fn guard_get(&self, key: i64) -> Result<bool, String> {
        match self {
            Backend::Sqlite { guard, .. } => guard
                .get(&key)
                .map(|row| row.is_some())
                .map_err(|e| e.to_string()),
            Backend::Postgres { guard, runtime, .. } => bounded_request(runtime, guard.get(&key))
                .map(|row| row.is_some())
                .map_err(|e| e.to_string()),
            Backend::Redis { guard, runtime, .. } => bounded_request(runtime, guard.get(&key))
                .map(|row| row.is_some())
                .map_err(|e| e.to_string()),
        }
    }

    /// The guard's counters.
    pub(crate) fn stats(&self) -> GuardStats {
        match self {
            Backend::Sqlite { guard, .. } => guard.stats(),
            Backend::Postgres { guard, .. } => guard.stats(),
            Backend::Redis { guard, .. } => guard.stats(),
        }
    }

    /// The guard's filter.
    pub(crate) fn filter(&self) -> &CuckooFilter {
        match self {
            Backend::Sqlite { guard, .. } => guard.filter(),
            Backend::Postgres { guard, .. } => guard.filter(),
            Backend::Redis { guard, .. } => guard.filter(),
        }
    }
}

fn sync_present<S: Store<Key = i64>>(store: &S, key: i64) -> Result<bool, String> {
    store
        .get(&key)
        .map(|row| row.is_some())
        .map_err(|e| e.to_string())
}

fn async_present<S: AsyncStore<Key = i64>>(
    runtime: &Runtime,
    store: &S,
    key: i64,
) -> Result<bool, String> {
    bounded_request(runtime, store.get(&key))
        .map(|row| row.is_some())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://user:secret@host:5432/db"),
            "postgres://user:***@host:5432/db"
        );
        assert_eq!(redact("postgres://user@host/db"), "postgres://user@host/db");
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("redis://:pw@host"), "redis://:***@host");
        assert_eq!(redact("plain/path"), "plain/path");
        assert_eq!(
            redact("postgres://u:pa/ss@host/db"),
            "postgres://u:***@host/db"
        );
        assert_eq!(
            redact("postgres://host/db?user=u&password=secret&x=1"),
            "postgres://host/db?user=u&password=***&x=1"
        );
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote("t"), "\"t\"");
        assert_eq!(quote("a\"b"), "\"a\"\"b\"");
    }
}
