//! What a sealed restart of a fleet member saves against a fresh join: two members over one
//! PostgreSQL table; member A seals at shutdown, member B creates and deletes rows while A is
//! down, then A restarts from its file and catches up from the Redis log (`Fleet::restore`),
//! and for comparison a fresh guard joins and scans the whole table (`Fleet::join`). Both
//! times run until the member serves.
//!
//! ```sh
//! cargo run --release --example fleet_restart --features postgres,redis,fleet -- --rows 1000000
//! ```
//!
//! The servers are `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`) and
//! `REDIS_URL` (default `redis://127.0.0.1:6379`); the row count is `--rows N` or the first
//! argument (default 1,000,000). The example creates its own table and fleet
//! (`cuckoo_guard_restart_` and a unique suffix), and drops the table and deletes the fleet's
//! Redis keys at the end. The sealed file is in a temporary directory, so the restart reads
//! it from the page cache, as a restart on the same host soon after the seal would.
//!
//! Each start is timed twice from the call: until it returned (for `Fleet::join`, the scan)
//! and until the member serves (a joined member enters service as its warm-up ends; a
//! restored one once it applied the log written since its seal).

use std::error::Error;
use std::future::Future;
use std::time::{Duration, Instant};

use cuckoo_guard::fleet::{Fleet, FleetConfig, FleetStats, RedisCoordinator};
use cuckoo_guard::guard::{Admission, AsyncCacheGuard};
use cuckoo_guard::stores::PostgresStore;
use cuckoo_guard::CuckooFilter;

type BoxError = Box<dyn Error + Send + Sync>;
type Store = PostgresStore<i64, String>;
type Guard = AsyncCacheGuard<Store>;
type Member = Fleet<RedisCoordinator, i64>;

/// Rows member B creates while A is down (above the table's), and rows of the table it
/// deletes.
const CREATED: i64 = 1_000;
const DELETED: i64 = 100;
/// Rows checked for "present" on each restarted member, spread over the table.
const SAMPLE: i64 = 10_000;
/// Keys that do not exist checked for "absent": a member that fails open passes every key,
/// so the false-negative check means something only if these are blocked.
const ABSENT: i64 = 10_000;
/// The longest the example waits for a member to serve.
const PATIENCE: Duration = Duration::from_secs(600);

/// What one run measured.
struct Figures {
    rows: i64,
    seal: Duration,
    file_bytes: u64,
    restore_returned: Duration,
    restore_serving: Duration,
    join_returned: Duration,
    join_serving: Duration,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let rows = rows_argument()?;
    let pg = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let unique = format!(
        "cuckoo_guard_restart_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_micros()
    );
    let (db, connection) = tokio_postgres::connect(&pg, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let measured = measure(&pg, &redis, &db, &unique, rows).await;
    // Clean up whether or not the run succeeded; report the run's error first.
    let dropped = db
        .batch_execute(&format!("DROP TABLE IF EXISTS \"{unique}\""))
        .await;
    let cleaned = delete_fleet_keys(&redis, &unique).await;
    let figures = measured?;
    dropped?;
    cleaned?;
    report(&figures);
    Ok(())
}

/// `--rows N`, `--rows=N` or a lone `N`; 1,000,000 without one.
fn rows_argument() -> Result<i64, BoxError> {
    let mut args = std::env::args().skip(1);
    let mut rows = None;
    while let Some(arg) = args.next() {
        let value = if arg == "--rows" {
            args.next().ok_or("--rows needs a number")?
        } else if let Some(value) = arg.strip_prefix("--rows=") {
            value.to_string()
        } else {
            arg
        };
        rows = Some(value.replace(['_', ','], "").parse::<i64>()?);
    }
    let rows = rows.unwrap_or(1_000_000);
    if rows < DELETED {
        return Err(format!("at least {DELETED} rows").into());
    }
    Ok(rows)
}

async fn store(url: &str, table: &str) -> Result<Store, BoxError> {
    Ok(PostgresStore::builder(url)
        .table(table)
        .create_table_if_missing(true)
        .connect()
        .await?)
}

async fn coordinator(url: &str, fleet: &str) -> Result<RedisCoordinator, BoxError> {
    Ok(RedisCoordinator::builder(url, fleet).connect().await?)
}

/// The filter every member starts with: room for twice the rows, as the README's setup.
fn filter(rows: i64) -> CuckooFilter {
    CuckooFilter::with_capacity(2 * (rows + CREATED) as usize)
}

/// Waits until the member serves, polling its stats every 2 ms.
async fn serving(fleet: &Member, what: &str) -> Result<(), BoxError> {
    let start = Instant::now();
    while !fleet.stats().serving {
        if start.elapsed() > PATIENCE {
            return Err(format!("{what}: not serving after {PATIENCE:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// Runs `start`, then waits until the member it returns serves: the time `start` took and
/// the time until serving, both from the call.
async fn timed_start<T, F>(
    what: &str,
    start: F,
) -> Result<(T, Member, Duration, Duration), BoxError>
where
    F: Future<Output = Result<(T, Member), BoxError>>,
{
    let began = Instant::now();
    let (value, fleet) = start.await?;
    let returned = began.elapsed();
    serving(&fleet, what).await?;
    Ok((value, fleet, returned, began.elapsed()))
}

async fn measure(
    pg: &str,
    redis: &str,
    db: &tokio_postgres::Client,
    name: &str,
    rows: i64,
) -> Result<Figures, BoxError> {
    let config = || FleetConfig::new(name);
    // The table and its rows, written around the guards: the data the service already has.
    let store_b = store(pg, name).await?;
    let filled = Instant::now();
    db.execute(
        &format!(
            "INSERT INTO \"{name}\" (key, value) \
                 SELECT g, 'row ' || g FROM generate_series(1, $1::bigint) g"
        ),
        &[&rows],
    )
    .await?;
    db.batch_execute(&format!("ANALYZE \"{name}\"")).await?;
    println!(
        "table {name}: {rows} rows inserted in {:?}",
        filled.elapsed()
    );

    // Member B, then member A: each joins and warms up by scanning the table.
    let b = Guard::new(filter(rows), store_b);
    let coordinator_b = coordinator(redis, name).await?;
    let ((), fleet_b, _, b_serving) = timed_start("B", async {
        Ok(((), Fleet::join(&b, coordinator_b, config()).await?))
    })
    .await?;
    println!("B joined and serves after {b_serving:?}");
    let (store_a, coordinator_a) = (store(pg, name).await?, coordinator(redis, name).await?);
    let (a, mut fleet_a, _, a_serving) = timed_start("A", async {
        let a = Guard::new(filter(rows), store_a);
        let fleet = Fleet::join(&a, coordinator_a, config()).await?;
        Ok((a, fleet))
    })
    .await?;
    println!("A joined and serves after {a_serving:?}");

    // (a) A seals at shutdown.
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("a.cgsnap");
    let sealing = Instant::now();
    let sealed = fleet_a.seal(&a, &path).await?;
    let seal = sealing.elapsed();
    let file_bytes = std::fs::metadata(&path)?.len();
    println!(
        "A sealed in {seal:?}: {} keys, {file_bytes} bytes, log position {}",
        sealed.written.items, sealed.applied
    );
    drop(fleet_a);
    drop(a);

    // (b) While A is down, B creates rows above the table's and deletes rows of it.
    let wrote = Instant::now();
    for key in rows + 1..=rows + CREATED {
        b.put(&key, &format!("row {key}")).await?;
    }
    let deleted: Vec<i64> = (0..DELETED).map(|i| 1 + i * (rows / DELETED)).collect();
    for key in &deleted {
        if !b.delete(key).await? {
            return Err(format!("B found no row {key} to delete").into());
        }
    }
    println!(
        "B created {CREATED} rows and deleted {DELETED} in {:?}",
        wrote.elapsed()
    );

    // (c) A restarts from its file and catches up from the log. The store and the Redis
    // connection are opened before the clock starts, as for the join below.
    let (store_a, coordinator_a) = (store(pg, name).await?, coordinator(redis, name).await?);
    let ((a, restart), fleet_a, restore_returned, restore_serving) =
        timed_start("the restored A", async {
            let (a, fleet, restart) =
                Fleet::restore(&path, store_a, || filter(rows), coordinator_a, config()).await?;
            Ok(((a, restart), fleet))
        })
        .await?;
    if !restart.is_trusted() {
        return Err(format!("the sealed file was not trusted: {restart}").into());
    }
    let stats = fleet_a.stats();
    println!(
        "A restored: {restart}; Fleet::restore returned after {restore_returned:?}, serves \
         after {restore_serving:?} ({} log entries applied, {} rebuilds)",
        stats.entries_applied,
        a.stats().rebuilds
    );
    if a.stats().rebuilds != 0 || stats.rebuilds_asked != 0 {
        return Err("the restored member rebuilt: not a restart without a scan".into());
    }

    // (d) For comparison: a fresh guard joins and scans the whole table.
    let (store_c, coordinator_c) = (store(pg, name).await?, coordinator(redis, name).await?);
    let (c, fleet_c, join_returned, join_serving) = timed_start("the fresh C", async {
        let c = Guard::new(filter(rows), store_c);
        let fleet = Fleet::join(&c, coordinator_c, config()).await?;
        Ok((c, fleet))
    })
    .await?;
    println!(
        "C joined fresh: Fleet::join returned after {join_returned:?}, serves after \
         {join_serving:?}"
    );

    // (e) Both answer "present" for every row sampled, B's new ones included.
    let step = (rows / SAMPLE).max(1);
    let present: Vec<i64> = (1..=rows)
        .step_by(step as usize)
        .chain(rows + 1..=rows + CREATED)
        .filter(|key| !deleted.contains(key))
        .collect();
    for (member, guard, fleet) in [("restored A", &a, &fleet_a), ("fresh C", &c, &fleet_c)] {
        check(member, guard, fleet.stats(), &present, &deleted, rows)?;
    }

    fleet_a.leave().await;
    fleet_c.leave().await;
    fleet_b.leave().await;
    Ok(Figures {
        rows,
        seal,
        file_bytes,
        restore_returned,
        restore_serving,
        join_returned,
        join_serving,
    })
}

/// No false negative among `present`; most absent keys blocked (the member does answer
/// "absent").
fn check(
    member: &str,
    guard: &Guard,
    stats: FleetStats,
    present: &[i64],
    deleted: &[i64],
    rows: i64,
) -> Result<(), BoxError> {
    let blocked = |keys: &mut dyn Iterator<Item = i64>| {
        keys.filter(|key| guard.admit(key) == Admission::Blocked)
            .count()
    };
    let false_negatives = blocked(&mut present.iter().copied());
    let absent = rows + CREATED + 1_000_000;
    let absent_blocked = blocked(&mut (absent..absent + ABSENT));
    let deleted_blocked = blocked(&mut deleted.iter().copied());
    println!(
        "{member}: {} rows checked, {false_negatives} answered absent; {absent_blocked} of \
         {ABSENT} absent keys blocked; {deleted_blocked} of {DELETED} deleted rows blocked \
         (serving: {})",
        present.len(),
        stats.serving
    );
    if false_negatives != 0 {
        return Err(format!("{member}: {false_negatives} false negatives").into());
    }
    if (absent_blocked as i64) < ABSENT * 9 / 10 {
        return Err(format!("{member}: only {absent_blocked} absent keys blocked").into());
    }
    Ok(())
}

/// Deletes the fleet's Redis keys (`cuckoo-guard:{name}:*`).
async fn delete_fleet_keys(url: &str, name: &str) -> Result<(), BoxError> {
    let mut connection = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let pattern = format!("cuckoo-guard:{{{name}}}:*");
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1_000)
            .query_async(&mut connection)
            .await?;
        if !keys.is_empty() {
            let _: () = redis::cmd("DEL")
                .arg(keys)
                .query_async(&mut connection)
                .await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

fn report(f: &Figures) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let ratio = |d: Duration| d.as_secs_f64() / f.restore_serving.as_secs_f64();
    println!();
    println!(
        "| rows | seal | file | restore to serving (returned) | warm-up to serving (scan) \
         | ratio (scan only) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {} | {:.1} ms | {:.2} MB | {:.1} ms ({:.1} ms) | {:.1} ms ({:.1} ms) | {:.1}x ({:.1}x) |",
        f.rows,
        ms(f.seal),
        f.file_bytes as f64 / 1e6,
        ms(f.restore_serving),
        ms(f.restore_returned),
        ms(f.join_serving),
        ms(f.join_returned),
        ratio(f.join_serving),
        ratio(f.join_returned),
    );
}
