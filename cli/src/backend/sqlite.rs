//! The SQLite backend: a database file (by default a new one in a temporary directory). The
//! sync store runs behind the async guard through the library's [`Blocking`], its calls on
//! tokio's blocking threads.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cuckoo_guard::guard::{AsyncCacheGuard, Blocking};
use cuckoo_guard::stores::SqliteStore;
use cuckoo_guard::CuckooFilter;
use rusqlite::{Connection, OpenFlags};
use tempfile::TempDir;
use tokio::runtime::Runtime;

use super::{runtime, value_of, AsyncGuard, Backend, Census, Guarded, Restarted, Table};
use crate::{CliError, Context, DrillArgs};

/// The guard over an [`SqliteStore`] of the drill's table, and the tool's own connection to
/// the same file for the bulk work.
pub(super) struct SqliteBackend {
    /// The first field: its runtime waits for the store calls still running when dropped.
    guarded: AsyncGuard<Blocking<SqliteStore<i64, String>>>,
    conn: Mutex<Connection>,
    table: Table,
    /// Connections of the store's pool.
    connections: usize,
    /// Keeps the temporary directory (and the database in it) alive until the drill ends;
    /// the last field, so it goes after the connections.
    temp: Option<TempDir>,
}

impl SqliteBackend {
    /// Opens the file `db` (empty: a new temporary one).
    pub(super) fn open(
        db: &str,
        args: &DrillArgs,
        filter: CuckooFilter,
    ) -> Result<SqliteBackend, CliError> {
        let (path, temp) = if db.is_empty() {
            let temp = tempfile::Builder::new()
                .prefix("cuckoo-guard-drill-")
                .tempdir()
                .context("cannot create a temporary directory for the database")?;
            (temp.path().join("drill.sqlite"), Some(temp))
        } else {
            (PathBuf::from(db), None)
        };
        let table = Table::new(args);
        let threads = args.threads();
        let connections = threads.clamp(1, 64);
        let runtime = runtime(threads)?;
        let store = open_store(&path, &table, connections, !args.no_create)?;
        let conn = bulk_connection(&path).context("cannot open the drill's database")?;
        Ok(SqliteBackend {
            guarded: AsyncGuard::new(AsyncCacheGuard::new(filter, store), runtime),
            conn: Mutex::new(conn),
            table,
            connections,
            temp,
        })
    }

    /// The database file.
    fn path(&self) -> &Path {
        self.guarded.guard.store().get_ref().path()
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // Only the drill's main thread uses it; a panic there ends the drill.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The store of the drill's table in the file at `path`, with a pool of `connections`.
fn open_store(
    path: &Path,
    table: &Table,
    connections: usize,
    create: bool,
) -> Result<Blocking<SqliteStore<i64, String>>, CliError> {
    SqliteStore::<i64, String>::builder(path)
        .table(&table.name)
        .key_column(&table.key)
        .value_column(&table.value)
        .create_table_if_missing(create)
        .connections(connections)
        .open()
        .map(Blocking::new)
        .map_err(|e| CliError::from_error("cannot open the drill's database", &e))
}

/// A connection to the store's file set up as the store sets up its own: the WAL journal
/// (which lets it read and write beside the store's connections), a busy timeout to wait out
/// their writes, and `synchronous = NORMAL`.
fn bulk_connection(path: &Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

/// Runs `insert` for the rows `lo..=hi`, in one transaction.
fn insert_rows(conn: &mut Connection, insert: &str, lo: i64, hi: i64) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare_cached(insert)?;
        for k in lo..=hi {
            insert.execute((k, value_of(k)))?;
        }
    }
    tx.commit()
}

impl Backend for SqliteBackend {
    fn describe(&self) -> String {
        format!(
            "SQLite {}{}",
            self.path().display(),
            if self.temp.is_some() {
                " (temporary)"
            } else {
                ""
            }
        )
    }

    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn census(&self, rows: u64) -> Result<Census, CliError> {
        let (count, min, max) = self
            .conn()
            .query_row(&self.table.census_sql(), [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .context("cannot count the drill's rows")?;
        Census::of_keys(count, min, max, rows)
    }

    fn clear(&self) -> Result<(), CliError> {
        let (t, _, _) = self.table.quoted();
        self.conn()
            .execute(&format!("DELETE FROM {t}"), [])
            .context("cannot clear the drill's table")?;
        Ok(())
    }

    fn load(&self, lo: i64, hi: i64) -> Result<(), CliError> {
        let (t, k, v) = self.table.quoted();
        let sql = format!("INSERT INTO {t} ({k}, {v}) VALUES (?1, ?2)");
        insert_rows(&mut self.conn(), &sql, lo, hi).context("cannot load the drill's rows")
    }

    fn guard(&self) -> &dyn Guarded {
        &self.guarded
    }

    fn restart(&mut self, path: &Path, fallback: CuckooFilter) -> Result<Restarted, CliError> {
        let db = self.path().to_path_buf();
        let (table, connections) = (&self.table, self.connections);
        let open = |_: &Runtime| open_store(&db, table, connections, false);
        self.guarded.restart(path, open, fallback)
    }

    fn instance(&self, filter: CuckooFilter, threads: usize) -> Result<Box<dyn Guarded>, CliError> {
        let open = |_: &Runtime| open_store(self.path(), &self.table, self.connections, false);
        Ok(Box::new(AsyncGuard::instance(threads, filter, open)?))
    }
}
