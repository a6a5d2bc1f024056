//! Criterion suite for growth and rebuilds (`cargo bench --all-features --bench growth`).
//!
//! Groups (`Throughput::Elements`; ids `variant/threads`):
//! - `growth/lookup/{hit,miss}/1M`: lookups on a filter of 1 million keys that grew to 1, 2 or
//!   4 tables (it started at 1/1, 1/3 or 1/15 of the keys, doubling), against one table
//!   built for the keys. Misses read every table; hits stop at the table that has the key.
//! - `guard/lookup/1M`: a lookup the filter answers "absent", three ways on one warm guard
//!   over a `MemoryStore`: `filter.contains` on the guard's current filter (no pin: the
//!   handle is taken once, outside the loop), `guard.may_contain` (an epoch pin, a load of the
//!   published filters, the lookup), and `guard.get` (the same plus the guard's counters).
//! - `rebuild/{sqlite,postgres}/<rows>`: one `CacheGuard::rebuild` (or the async guard's) of
//!   a guard over a table of that many rows: keys scanned per second, page size 10,000. The
//!   PostgreSQL group needs `DATABASE_URL` (or a server at the `.ci/run` address) and is
//!   skipped without one.

#[path = "contenders.rs"]
mod contenders;

use std::hint::black_box;
use std::time::{Duration, Instant};

use contenders::{member, non_member, timed_split};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use cuckoo_guard::guard::{CacheGuard, MemoryStore, RebuildPolicy};
use cuckoo_guard::{CuckooFilter, Growth};

const KEYS: usize = 1_000_000;
const QUERIES: usize = 1 << 20;
const THREADS: [usize; 2] = [1, 2];

/// A filter holding `KEYS` members that grew until it has `tables` tables (1: built for the
/// keys, no growth).
fn grown(tables: u32) -> CuckooFilter {
    let start = KEYS / ((1 << tables) - 1);
    let filter = CuckooFilter::builder()
        .capacity(start)
        .growth(Growth::DEFAULT)
        .seed(1)
        .build()
        .unwrap();
    for i in 0..KEYS as u64 {
        filter.insert(&member(i)).unwrap();
    }
    filter
}

fn growth_lookups(c: &mut Criterion) {
    let hits: Vec<u64> = (0..QUERIES as u64)
        .map(|i| member(contenders::splitmix(i) % KEYS as u64))
        .collect();
    let misses: Vec<u64> = (0..QUERIES as u64).map(non_member).collect();
    let filters: Vec<(String, CuckooFilter)> = [1u32, 2, 3, 4]
        .into_iter()
        .map(|t| {
            let filter = grown(t);
            let tables = filter.stats().growth_steps + 1;
            let name = if t == 1 {
                "one table".to_owned()
            } else {
                format!("{tables} tables")
            };
            (name, filter)
        })
        .collect();
    for (kind, queries) in [("hit", &hits), ("miss", &misses)] {
        let mut group = c.benchmark_group(format!("growth/lookup/{kind}/1M"));
        group.throughput(Throughput::Elements(QUERIES as u64));
        for (name, filter) in &filters {
            for &t in &THREADS {
                group.bench_function(BenchmarkId::new(name, format!("{t}t")), |b| {
                    b.iter_custom(|iters| {
                        timed_split(iters, t, queries, |qs| {
                            black_box(qs.iter().filter(|k| filter.contains(*k)).count());
                        })
                    })
                });
            }
        }
        group.finish();
    }
}

fn guard_lookups(c: &mut Criterion) {
    let store = MemoryStore::from_rows((0..KEYS as u64).map(|i| (member(i), ())));
    let guard = CacheGuard::with_policy(
        CuckooFilter::with_capacity(KEYS),
        store,
        RebuildPolicy::manual(),
    );
    guard.warm_up(100_000, |_| {}).unwrap();
    let misses: Vec<u64> = (0..QUERIES as u64).map(non_member).collect();
    let filter = guard.filter();
    let mut group = c.benchmark_group("guard/lookup/1M");
    group.throughput(Throughput::Elements(QUERIES as u64));
    for &t in &THREADS {
        group.bench_function(
            BenchmarkId::new("filter.contains (no pin)", format!("{t}t")),
            |b| {
                b.iter_custom(|iters| {
                    timed_split(iters, t, &misses, |qs| {
                        black_box(qs.iter().filter(|k| filter.contains(*k)).count());
                    })
                })
            },
        );
        group.bench_function(
            BenchmarkId::new("guard.may_contain (pin)", format!("{t}t")),
            |b| {
                b.iter_custom(|iters| {
                    timed_split(iters, t, &misses, |qs| {
                        black_box(qs.iter().filter(|k| guard.may_contain(k)).count());
                    })
                })
            },
        );
        group.bench_function(
            BenchmarkId::new("guard.get (pin, counters)", format!("{t}t")),
            |b| {
                b.iter_custom(|iters| {
                    timed_split(iters, t, &misses, |qs| {
                        black_box(
                            qs.iter()
                                .filter(|k| guard.get(k).unwrap().is_some())
                                .count(),
                        );
                    })
                })
            },
        );
    }
    group.finish();
}

/// Times `iters` rebuilds with `rebuild`, which returns the keys it scanned.
fn time_rebuilds(iters: u64, rows: u64, mut rebuild: impl FnMut() -> u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        assert_eq!(rebuild(), rows);
    }
    start.elapsed()
}

fn rebuilds(c: &mut Criterion) {
    #[cfg(feature = "sqlite")]
    {
        use cuckoo_guard::stores::SqliteStore;
        const ROWS: u64 = 1_000_000;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rebuild.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE rows (key INTEGER PRIMARY KEY, value TEXT NOT NULL);
                 WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < 1000000)
                 INSERT INTO rows SELECT k, 'row ' || k FROM n;",
            )
            .unwrap();
        }
        let store = SqliteStore::<i64, String>::builder(&path)
            .table("rows")
            .open()
            .unwrap();
        let policy = RebuildPolicy::manual().page_size(10_000).unwrap();
        let guard = CacheGuard::with_policy(CuckooFilter::with_capacity(1_000), store, policy);
        guard.warm_up(10_000, |_| {}).unwrap();
        let mut group = c.benchmark_group("rebuild/sqlite/1M");
        group.throughput(Throughput::Elements(ROWS));
        group.sample_size(10);
        group.bench_function("CacheGuard::rebuild", |b| {
            b.iter_custom(|iters| {
                time_rebuilds(iters, ROWS, || guard.rebuild().unwrap().keys_scanned)
            })
        });
        group.finish();
    }
    #[cfg(feature = "postgres")]
    postgres_rebuilds(c);
}

#[cfg(feature = "postgres")]
fn postgres_rebuilds(c: &mut Criterion) {
    use cuckoo_guard::guard::AsyncCacheGuard;
    use cuckoo_guard::stores::PostgresStore;
    const ROWS: u64 = 1_000_000;
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Ok((client, connection)) =
        runtime.block_on(tokio_postgres::connect(&url, tokio_postgres::NoTls))
    else {
        eprintln!("rebuild/postgres skipped: no server at {url}");
        return;
    };
    runtime.spawn(connection);
    let table = "cuckoo_guard_bench_rebuild";
    runtime
        .block_on(client.batch_execute(&format!(
            "DROP TABLE IF EXISTS {table};
             CREATE TABLE {table} (key BIGINT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO {table} SELECT k, 'row ' || k FROM generate_series(1, {ROWS}) AS k;
             ANALYZE {table};"
        )))
        .unwrap();
    let store = runtime
        .block_on(
            PostgresStore::<i64, String>::builder(&url)
                .table(table)
                .connect(),
        )
        .unwrap();
    let policy = RebuildPolicy::manual().page_size(10_000).unwrap();
    let guard = AsyncCacheGuard::with_policy(CuckooFilter::with_capacity(1_000), store, policy);
    runtime.block_on(guard.warm_up(10_000, |_| {})).unwrap();
    let mut group = c.benchmark_group("rebuild/postgres/1M");
    group.throughput(Throughput::Elements(ROWS));
    group.sample_size(10);
    group.bench_function("AsyncCacheGuard::rebuild", |b| {
        b.iter_custom(|iters| {
            time_rebuilds(iters, ROWS, || {
                runtime.block_on(guard.rebuild()).unwrap().keys_scanned
            })
        })
    });
    group.finish();
    runtime
        .block_on(client.batch_execute(&format!("DROP TABLE {table}")))
        .unwrap();
}

criterion_group!(benches, growth_lookups, guard_lookups, rebuilds);
criterion_main!(benches);
