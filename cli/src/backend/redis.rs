//! The Redis backend: a namespace of keys on a server, in the layout of [`RedisStore`].

use std::path::Path;

use cuckoo_guard::guard::AsyncCacheGuard;
use cuckoo_guard::stores::RedisStore;
use cuckoo_guard::CuckooFilter;
use redis::aio::MultiplexedConnection;
use tokio::runtime::Runtime;

use super::{
    connect, expected_rows, redact, runtime, value_of, AsyncGuard, Backend, Census, Guarded,
    Restarted,
};
use crate::{CliError, Context, DrillArgs};

/// Rows per pipeline while loading: the driver times out a reply that takes too long.
const PIPELINE_ROWS: i64 = 2_000;

/// The guard over a [`RedisStore`] of the drill's namespace, and the tool's own connection to
/// the same server for the bulk work, on the keys the store names.
pub(super) struct RedisBackend {
    conn: MultiplexedConnection,
    /// The URL without its password.
    url: String,
    /// The URL as given, to connect again (never printed).
    db: String,
    /// The key namespace (`--table`).
    namespace: String,
    /// The last field: the runtime drives the connections of the fields before it.
    guarded: AsyncGuard<RedisStore<i64, String>>,
}

impl RedisBackend {
    /// Connects to the server at `db` (a `redis://` URL) and uses the namespace `--table`.
    /// Redis has no tables to create: with `--no-create` a namespace without rows is an error.
    pub(super) fn open(
        db: &str,
        args: &DrillArgs,
        filter: CuckooFilter,
    ) -> Result<RedisBackend, CliError> {
        let runtime = runtime(args.threads())?;
        let url = redact(db);
        let what = format!("cannot open Redis at {url}");
        let store = open_store(&runtime, db, &args.table)?;
        let conn = connect(&runtime, &what, async {
            redis::Client::open(db)?
                .get_multiplexed_async_connection()
                .await
        })?;
        let backend = RedisBackend {
            conn,
            url,
            db: db.to_string(),
            namespace: args.table.clone(),
            guarded: AsyncGuard::new(AsyncCacheGuard::new(filter, store), runtime),
        };
        if args.no_create && backend.census(args.rows)?.rows == 0 {
            return Err(CliError::new(format!(
                "Redis namespace {:?} holds no rows (and --no-create forbids loading them)",
                args.table
            )));
        }
        Ok(backend)
    }

    /// The hash of the rows and the sorted set indexing their keys.
    fn keys(&self) -> (&str, &str) {
        let store = self.guarded.guard.store();
        (store.rows_key(), store.index_key())
    }
}

/// The store of the namespace `namespace` on the server at `db`.
fn open_store(
    runtime: &Runtime,
    db: &str,
    namespace: &str,
) -> Result<RedisStore<i64, String>, CliError> {
    connect(
        runtime,
        &format!("cannot open Redis at {}", redact(db)),
        RedisStore::<i64, String>::connect(db, namespace),
    )
}

impl Backend for RedisBackend {
    fn describe(&self) -> String {
        format!("Redis {}", self.url)
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn census(&self, rows: u64) -> Result<Census, CliError> {
        let expect = expected_rows(rows)?;
        let (rows_key, index_key) = self.keys();
        let (hlen, zcard, first, last): (u64, u64, bool, bool) = self
            .guarded
            .run_bulk(
                redis::pipe()
                    .cmd("HLEN")
                    .arg(rows_key)
                    .cmd("ZCARD")
                    .arg(index_key)
                    .cmd("HEXISTS")
                    .arg(rows_key)
                    .arg(1)
                    .cmd("HEXISTS")
                    .arg(rows_key)
                    .arg(expect)
                    .query_async(&mut self.conn.clone()),
            )
            .context("cannot count the drill's rows")?;
        Ok(Census {
            rows: hlen,
            is_drill_data: hlen == rows && zcard == rows && first && last,
        })
    }

    fn clear(&self) -> Result<(), CliError> {
        let (rows_key, index_key) = self.keys();
        self.guarded
            .run_bulk(
                redis::cmd("UNLINK")
                    .arg(rows_key)
                    .arg(index_key)
                    .query_async::<()>(&mut self.conn.clone()),
            )
            .context("cannot clear the drill's keys")
    }

    fn load(&self, lo: i64, hi: i64) -> Result<(), CliError> {
        let (rows_key, index_key) = self.keys();
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
                pipe.cmd("ZADD").arg(index_key).arg(0).arg(k).ignore();
            }
            self.guarded
                .run_bulk(pipe.query_async::<()>(&mut self.conn.clone()))
                .context("cannot load the drill's rows")?;
            start = end + 1;
        }
        Ok(())
    }

    fn guard(&self) -> &dyn Guarded {
        &self.guarded
    }

    fn restart(&mut self, path: &Path, fallback: CuckooFilter) -> Result<Restarted, CliError> {
        let open = |runtime: &Runtime| open_store(runtime, &self.db, &self.namespace);
        self.guarded.restart(path, open, fallback)
    }

    fn instance(&self, filter: CuckooFilter, threads: usize) -> Result<Box<dyn Guarded>, CliError> {
        let open = |runtime: &Runtime| open_store(runtime, &self.db, &self.namespace);
        Ok(Box::new(AsyncGuard::instance(threads, filter, open)?))
    }
}
