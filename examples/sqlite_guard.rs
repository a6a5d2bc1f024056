//! The synchronous `CacheGuard` in front of an SQLite table: open the store, size the filter,
//! warm it up from the table with progress, write and read through the guard, and see lookups
//! of absent keys answered by the filter without a query.
//!
//! ```sh
//! cargo run --example sqlite_guard --features sqlite                  # a temporary database
//! cargo run --example sqlite_guard --features sqlite -- users.sqlite  # a database file of yours
//! ```
//!
//! The table is `users (id INTEGER PRIMARY KEY, name TEXT NOT NULL)`, created if missing and,
//! if empty, filled with 10,000 rows to stand for the data an application already has.

use std::error::Error;

use cuckoo_guard::guard::CacheGuard;
use cuckoo_guard::stores::SqliteStore;
use cuckoo_guard::CuckooFilter;

fn main() -> Result<(), Box<dyn Error>> {
    let temp = tempfile::tempdir()?;
    let path = match std::env::args_os().nth(1) {
        Some(path) => path.into(),
        None => temp.path().join("users.sqlite"),
    };
    let store = SqliteStore::<i64, String>::builder(&path)
        .table("users")
        .key_column("id")
        .value_column("name")
        .create_table_if_missing(true)
        .open()?;

    // Rows written before the guard exists (here over the application's own connection) are
    // what warm-up loads; from then on every write goes through the guard, or the filter
    // cannot know the key.
    let (rows, max_id) = {
        let db = rusqlite::Connection::open(&path)?;
        db.execute(
            "WITH RECURSIVE n(id) AS (SELECT 1 UNION ALL SELECT id + 1 FROM n WHERE id < 10000)
             INSERT INTO users (id, name) SELECT id, 'user ' || id FROM n
             WHERE NOT EXISTS (SELECT 1 FROM users)",
            [],
        )?;
        db.query_row(
            "SELECT count(*), coalesce(max(id), 0) FROM users",
            [],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
        )?
    };
    println!("{}: {rows} rows", path.display());

    // Room for twice today's rows; a 0.1% false-positive bound picks 16-bit fingerprints.
    let filter = CuckooFilter::builder()
        .capacity(2 * rows as usize + 1_000)
        .false_positive_rate(0.001)
        .build()?;
    let guard = CacheGuard::new(filter, store);
    let warm = guard.warm_up(2_500, |p| {
        println!("  warm-up: {} keys after {} pages", p.keys_loaded, p.pages)
    })?;
    println!("warmed up: {} keys in the filter", warm.keys_loaded);

    let id = max_id + 1;
    println!("put {id}: {:?}", guard.put(&id, &"alice".to_string())?);
    println!(
        "put {id}: {:?}",
        guard.put(&id, &"alice smith".to_string())?
    );
    println!("get {id}: {:?}", guard.get(&id)?);
    println!("delete {id}: {:?}", guard.delete(&id)?);
    println!("get {id}: {:?}", guard.get(&id)?);

    // Present keys go to SQLite; absent ones (ids above the largest) are answered by the
    // filter, except for its rare false positives, which SQLite then answers "no such row".
    let mut found = 0;
    for id in 1..=1_000 {
        found += guard.get(&id)?.is_some() as u32;
    }
    let mut absent_found = 0;
    for id in max_id + 1..=max_id + 100_000 {
        absent_found += guard.get(&id)?.is_some() as u32;
    }
    println!("ids 1..=1000: {found} found; 100,000 ids above {max_id}: {absent_found} found");

    let stats = guard.stats();
    println!(
        "lookups {}: blocked by the filter {}, sent to SQLite {} ({} rows found, {} false positives)",
        stats.lookups, stats.blocked, stats.passed, stats.store_hits, stats.false_positives
    );
    println!(
        "false-positive rate {:.4}% observed, {:.4}% expected at {:.2}% load; filter {} KiB",
        100.0 * stats.observed_false_positive_rate,
        100.0 * stats.expected_false_positive_rate,
        100.0 * stats.filter_load_factor,
        stats.filter_memory_bytes / 1024
    );
    println!(
        "writes: {} created, {} updated, {} deleted",
        stats.creates, stats.updates, stats.deletes
    );
    Ok(())
}
