//! Criterion suite for batch lookups through a guard (`cargo bench --bench batch
//! --all-features`), per store: one `get_many` of 100 keys against 100 `get`s of the same
//! keys, one after the other, as a list endpoint would make them.
//!
//! Groups (`Throughput::Elements`, the 100 keys; ids `get_many` and `100 x get`):
//! - `batch/<store>/present`: 100 keys that all exist, so every key reaches the store: one
//!   round trip against 100.
//! - `batch/<store>/half_absent`: 50 existing keys and 50 absent ones, which the filter rules
//!   out (no store call for them either way).
//!
//! Stores: the in-memory store, SQLite (a file in a temporary directory, sync guard),
//! PostgreSQL at `DATABASE_URL` and Redis at `REDIS_URL` (async guards on a 2-thread tokio
//! runtime); a server that cannot be reached is skipped with a notice. Each store holds
//! 10,000 rows; the guard's memo is off (`with_memo(0)`), so that absent keys cost the same
//! every iteration.

#[allow(dead_code)]
#[path = "../tests/common/servers.rs"]
mod servers;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use cuckoo_guard::guard::{AsyncCacheGuard, AsyncStore, CacheGuard, MemoryStore, Store};
use cuckoo_guard::stores::{PostgresStore, RedisStore, SqliteStore};
use cuckoo_guard::CuckooFilter;

const ROWS: i64 = 10_000;
const BATCH: i64 = 100;

fn value(k: i64) -> String {
    format!("user {k}")
}

/// The two batches: 100 existing keys, and 50 existing with 50 absent ones interleaved.
fn batches() -> [(&'static str, Vec<i64>); 2] {
    let present = (0..BATCH).map(|i| i * 97 % ROWS).collect();
    let half = (0..BATCH)
        .map(|i| {
            if i % 2 == 0 {
                i * 97 % ROWS
            } else {
                ROWS + i * 31
            }
        })
        .collect();
    [("present", present), ("half_absent", half)]
}

fn filter() -> CuckooFilter {
    CuckooFilter::with_capacity(ROWS as usize * 2)
}

fn group<'c>(
    c: &'c mut Criterion,
    name: &str,
) -> BenchmarkGroup<'c, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .throughput(Throughput::Elements(BATCH as u64))
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    group
}

fn sync_store<S>(c: &mut Criterion, name: &str, store: S)
where
    S: Store<Key = i64, Value = String> + Send + Sync + 'static,
    S::Cursor: Send,
    S::Error: std::fmt::Debug,
{
    for k in 0..ROWS {
        store.put(&k, &value(k)).unwrap();
    }
    let guard = CacheGuard::new(filter(), store).with_memo(0).unwrap();
    guard.warm_up(10_000, |_| {}).unwrap();
    for (kind, keys) in batches() {
        let mut group = group(c, &format!("batch/{name}/{kind}"));
        group.bench_function("get_many", |b| {
            b.iter(|| black_box(guard.get_many(&keys).unwrap()))
        });
        group.bench_function("100 x get", |b| {
            b.iter(|| {
                for key in &keys {
                    black_box(guard.get(key).unwrap());
                }
            })
        });
        group.finish();
    }
}

fn async_store<S>(c: &mut Criterion, rt: &tokio::runtime::Runtime, name: &str, store: S)
where
    S: AsyncStore<Key = i64, Value = String> + 'static,
    S::Error: std::fmt::Debug,
{
    let guard = rt.block_on(async {
        for k in 0..ROWS {
            store.put(&k, &value(k)).await.unwrap();
        }
        let guard = AsyncCacheGuard::new(filter(), store).with_memo(0).unwrap();
        guard.warm_up(10_000, |_| {}).await.unwrap();
        guard
    });
    for (kind, keys) in batches() {
        let mut group = group(c, &format!("batch/{name}/{kind}"));
        group.bench_function("get_many", |b| {
            b.iter(|| black_box(rt.block_on(guard.get_many(&keys)).unwrap()))
        });
        group.bench_function("100 x get", |b| {
            b.iter(|| {
                rt.block_on(async {
                    for key in &keys {
                        black_box(guard.get(key).await.unwrap());
                    }
                })
            })
        });
        group.finish();
    }
}

fn benches(c: &mut Criterion) {
    sync_store(c, "memory", MemoryStore::<i64, String>::new());
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::<i64, String>::builder(dir.path().join("batch.db"))
        .create_table_if_missing(true)
        .open()
        .unwrap();
    sync_store(c, "sqlite", sqlite);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if let Some(url) = servers::server_url(&servers::POSTGRES) {
        let table = format!("cg_bench_batch_{}", std::process::id());
        let store = rt
            .block_on(
                PostgresStore::<i64, String>::builder(&url)
                    .table(&table)
                    .create_table_if_missing(true)
                    .connect(),
            )
            .unwrap();
        async_store(c, &rt, "postgres", store);
        rt.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            client
                .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
                .await
                .unwrap();
        });
    }
    if let Some(url) = servers::server_url(&servers::REDIS) {
        let namespace = format!("cg_bench_batch_{}", std::process::id());
        let store = rt
            .block_on(RedisStore::<i64, String>::connect(&url, &namespace))
            .unwrap();
        async_store(c, &rt, "redis", Arc::new(store));
    }
}

criterion_group!(batch, benches);
criterion_main!(batch);
