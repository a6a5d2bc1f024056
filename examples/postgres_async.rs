//! The `AsyncCacheGuard` in front of a PostgreSQL table on tokio: connect, warm up, then serve
//! lookups from several tasks sharing the guard in an `Arc`, as request handlers would.
//!
//! ```sh
//! cargo run --example postgres_async --features postgres
//! DATABASE_URL=postgres://user@host/db cargo run --example postgres_async --features postgres
//! ```
//!
//! The server is `DATABASE_URL`, or `postgres://postgres@127.0.0.1:5432/test`. The example
//! creates its own table (`cuckoo_guard_example_` and the process id), fills it with 10,000
//! rows and drops it at the end.

use std::error::Error;
use std::sync::Arc;

use cuckoo_guard::guard::AsyncCacheGuard;
use cuckoo_guard::stores::PostgresStore;
use cuckoo_guard::CuckooFilter;

/// Handlers' errors cross task boundaries, so they are `Send + Sync`.
type BoxError = Box<dyn Error + Send + Sync>;

const ROWS: i64 = 10_000;
const TASKS: i64 = 8;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let table = format!("cuckoo_guard_example_{}", std::process::id());
    let store = PostgresStore::<i64, String>::builder(&url)
        .table(&table)
        .create_table_if_missing(true)
        .connect()
        .await?;
    let guard = Arc::new(AsyncCacheGuard::new(
        CuckooFilter::with_capacity(2 * ROWS as usize),
        store,
    ));
    // The application's own connection, for what does not go through the guard: loading the
    // rows it already has, and dropping the example's table.
    let (db, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let served = serve(&guard, &db, &table).await;
    // Drop the table whether or not the run succeeded; report the run's error first.
    let dropped = db.batch_execute(&format!("DROP TABLE \"{table}\"")).await;
    served?;
    Ok(dropped?)
}

async fn serve(
    guard: &Arc<AsyncCacheGuard<PostgresStore<i64, String>>>,
    db: &tokio_postgres::Client,
    table: &str,
) -> Result<(), BoxError> {
    // Rows written before the guard warms up stand for the data an application already has;
    // from then on every write goes through the guard.
    db.execute(
        &format!(
            "INSERT INTO \"{table}\" (key, value) \
                 SELECT g, 'user ' || g FROM generate_series(1, $1::bigint) g"
        ),
        &[&ROWS],
    )
    .await?;
    let warm = guard
        .warm_up(2_500, |p| {
            println!("  warm-up: {} keys loaded", p.keys_loaded)
        })
        .await?;
    println!("table {table}: {} keys in the filter", warm.keys_loaded);

    // Each task is a request handler: every other lookup is a real user, the rest are ids
    // that do not exist (above the largest), which the filter answers without a query.
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let guard = Arc::clone(guard);
        tasks.push(tokio::spawn(async move {
            let mut found = 0u64;
            for i in 0..2_000 {
                let id = if i % 2 == 0 {
                    1 + (task * 2_000 + i) % ROWS
                } else {
                    ROWS + 1 + task * 2_000 + i
                };
                found += guard.get(&id).await?.is_some() as u64;
            }
            Ok::<_, BoxError>(found)
        }));
    }
    for (task, handle) in tasks.into_iter().enumerate() {
        println!(
            "task {task}: {} of 2000 lookups found a row",
            handle.await??
        );
    }

    // A write from a handler: the new key is in the filter before the row is visible.
    let id = ROWS + 1;
    println!("put {id}: {:?}", guard.put(&id, &"new user".into()).await?);
    println!("get {id}: {:?}", guard.get(&id).await?);
    println!("delete {id}: {:?}", guard.delete(&id).await?);

    let stats = guard.stats();
    println!(
        "lookups {}: blocked by the filter {}, sent to PostgreSQL {} ({} rows found, {} false positives)",
        stats.lookups, stats.blocked, stats.passed, stats.store_hits, stats.false_positives
    );
    println!(
        "false-positive rate {:.4}% observed, {:.4}% expected at {:.2}% load",
        100.0 * stats.observed_false_positive_rate,
        100.0 * stats.expected_false_positive_rate,
        100.0 * stats.filter_load_factor,
    );
    Ok(())
}
