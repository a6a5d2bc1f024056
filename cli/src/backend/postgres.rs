//! The PostgreSQL backend: a table on a server.

use std::path::Path;

use cuckoo_guard::guard::AsyncCacheGuard;
use cuckoo_guard::stores::PostgresStore;
use cuckoo_guard::CuckooFilter;
use tokio::runtime::Runtime;
use tokio_postgres::{Client, NoTls};

use super::{connect, redact, runtime, AsyncGuard, Backend, Census, Guarded, Restarted, Table};
use crate::{CliError, Context, DrillArgs};

/// The guard over a [`PostgresStore`] of the drill's table, and the tool's own client of the
/// same server for the bulk work.
pub(super) struct PostgresBackend {
    conn: Client,
    table: Table,
    /// The URL without its password.
    url: String,
    /// The URL as given, to connect again (never printed).
    db: String,
    /// Connections of the store's pool.
    connections: usize,
    /// The last field: the runtime drives the connections of the fields before it.
    guarded: AsyncGuard<PostgresStore<i64, String>>,
}

impl PostgresBackend {
    /// Connects to the server at `db` (a `postgres://` URL).
    pub(super) fn open(
        db: &str,
        args: &DrillArgs,
        filter: CuckooFilter,
    ) -> Result<PostgresBackend, CliError> {
        let threads = args.threads();
        let runtime = runtime(threads)?;
        let url = redact(db);
        let what = format!("cannot open PostgreSQL at {url}");
        let table = Table::new(args);
        let connections = threads.clamp(1, 16);
        let store = open_store(&runtime, db, &table, connections, !args.no_create)?;
        let conn = connect(&runtime, &what, async {
            let (client, connection) = tokio_postgres::connect(db, NoTls).await?;
            // The connection task ends when the client is dropped.
            tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok::<_, tokio_postgres::Error>(client)
        })?;
        Ok(PostgresBackend {
            conn,
            table,
            url,
            db: db.to_string(),
            connections,
            guarded: AsyncGuard::new(AsyncCacheGuard::new(filter, store), runtime),
        })
    }
}

/// The store of the drill's table on the server at `db`, with a pool of `connections`.
fn open_store(
    runtime: &Runtime,
    db: &str,
    table: &Table,
    connections: usize,
    create: bool,
) -> Result<PostgresStore<i64, String>, CliError> {
    connect(
        runtime,
        &format!("cannot open PostgreSQL at {}", redact(db)),
        PostgresStore::<i64, String>::builder(db)
            .table(&table.name)
            .key_column(&table.key)
            .value_column(&table.value)
            .create_table_if_missing(create)
            .connections(connections)
            .connect(),
    )
}

impl Backend for PostgresBackend {
    fn describe(&self) -> String {
        format!("PostgreSQL {}", self.url)
    }

    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn census(&self, rows: u64) -> Result<Census, CliError> {
        let row = self
            .guarded
            .run_bulk(self.conn.query_one(&self.table.census_sql(), &[]))
            .context("cannot count the drill's rows")?;
        let read = || -> Result<(i64, Option<i64>, Option<i64>), tokio_postgres::Error> {
            Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
        };
        let (_, k, _) = self.table.quoted();
        let (count, min, max) = read().context(&format!(
            "table {:?} does not have the drill's shape (a bigint {k})",
            self.table.name
        ))?;
        Census::of_keys(count, min, max, rows)
    }

    fn clear(&self) -> Result<(), CliError> {
        let (t, _, _) = self.table.quoted();
        self.guarded
            .run_bulk(self.conn.batch_execute(&format!("TRUNCATE {t}")))
            .context("cannot clear the drill's table")
    }

    fn load(&self, lo: i64, hi: i64) -> Result<(), CliError> {
        let (t, k, v) = self.table.quoted();
        let sql = format!(
            "INSERT INTO {t} ({k}, {v}) SELECT g, 'row-' || g \
             FROM generate_series($1::bigint, $2::bigint) AS g"
        );
        self.guarded
            .run_bulk(self.conn.execute(&sql, &[&lo, &hi]))
            .map(drop)
            .context("cannot load the drill's rows")
    }

    fn guard(&self) -> &dyn Guarded {
        &self.guarded
    }

    fn restart(&mut self, path: &Path, fallback: CuckooFilter) -> Result<Restarted, CliError> {
        let open =
            |runtime: &Runtime| open_store(runtime, &self.db, &self.table, self.connections, false);
        self.guarded.restart(path, open, fallback)
    }

    fn instance(&self, filter: CuckooFilter, threads: usize) -> Result<Box<dyn Guarded>, CliError> {
        let open =
            |runtime: &Runtime| open_store(runtime, &self.db, &self.table, self.connections, false);
        Ok(Box::new(AsyncGuard::instance(threads, filter, open)?))
    }
}
