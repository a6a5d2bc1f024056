//! The guard against real stores while it grows and rebuilds on its own: a guard sized for
//! 1,000 keys, two tasks creating, deleting and reading until `CG_STRESS_CREATES` keys were
//! created (200,000 by default, as in CI; `CG_STRESS_CREATES=1000000` for the full run), with
//! automatic rebuilds. Every read of a key whose create returned (and whose delete has not
//! begun) must find it; no create may be refused. Prints rebuilds, growth steps, checked reads
//! and the observed false-positive rate before and after each rebuild.
//!
//! ```text
//! CG_STRESS_CREATES=1000000 cargo test --release --all-features --test rebuild_stress -- --nocapture --test-threads 1
//! ```
#![cfg(all(feature = "sqlite", feature = "postgres", feature = "redis"))]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{servers, Blocking};
use cuckoo_guard::guard::{AsyncCacheGuard, AsyncStore, GuardStats};
use cuckoo_guard::stores::{PostgresStore, RedisStore, SqliteStore};
use cuckoo_guard::CuckooFilter;

fn creates_target() -> u64 {
    std::env::var("CG_STRESS_CREATES")
        .ok()
        .map(|v| v.parse().expect("CG_STRESS_CREATES is a number"))
        .unwrap_or(200_000)
}

/// Keys of writer `w`: `w`, `w + 2`, `w + 4`, ...; absent keys (never created) are above 2^40.
const ABSENT: u64 = 1 << 40;

/// One sample of the guard's counters.
#[derive(Clone, Copy)]
struct Sample {
    rebuilds: u64,
    false_positives: u64,
    blocked: u64,
    growth_steps: u64,
    filter_len: usize,
}

impl Sample {
    fn of(stats: &GuardStats) -> Self {
        Sample {
            rebuilds: stats.rebuilds,
            false_positives: stats.false_positives,
            blocked: stats.blocked,
            growth_steps: stats.growth_steps,
            filter_len: stats.filter_len,
        }
    }
}

/// The observed rate between two samples.
fn rate(from: &Sample, to: &Sample) -> f64 {
    let fp = to.false_positives - from.false_positives;
    let negatives = fp + to.blocked - from.blocked;
    if negatives == 0 {
        0.0
    } else {
        fp as f64 / negatives as f64
    }
}

async fn drive<S>(name: &str, store: S, key: fn(u64) -> S::Key, value: fn(u64) -> S::Value)
where
    S: AsyncStore + 'static,
    S::Key: Send + Sync + 'static,
    S::Value: PartialEq + std::fmt::Debug + Send + Sync + 'static,
    S::Error: std::fmt::Debug,
{
    let target = creates_target();
    let guard = Arc::new(AsyncCacheGuard::new(
        CuckooFilter::with_capacity(1_000),
        store,
    ));
    guard.warm_up(1_000, |_| {}).await.unwrap();
    let started = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicU64::new(0));

    // Samples every 50 ms, and at each rebuild a window boundary.
    let samples = Arc::new(Mutex::new(vec![Sample::of(&guard.stats())]));
    let monitor = {
        let (guard, done, samples) = (Arc::clone(&guard), Arc::clone(&done), Arc::clone(&samples));
        tokio::spawn(async move {
            while !done.load(SeqCst) {
                tokio::time::sleep(Duration::from_millis(50)).await;
                samples.lock().unwrap().push(Sample::of(&guard.stats()));
            }
        })
    };

    let mut writers = Vec::new();
    for w in 0..2u64 {
        let (guard, checked) = (Arc::clone(&guard), Arc::clone(&checked));
        writers.push(tokio::spawn(async move {
            let mut x = w + 1;
            let mut live: Vec<u64> = Vec::new();
            let mut created = 0;
            let mut next = w;
            while created < target / 2 {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let k = next;
                next += 2;
                guard
                    .put(&key(k), &value(k))
                    .await
                    .unwrap_or_else(|e| panic!("create of {k} refused or failed: {e:?}"));
                created += 1;
                live.push(k);
                // One delete per four creates, of a random live key of this writer.
                if created % 4 == 0 {
                    let i = (x >> 33) as usize % live.len();
                    let gone = live.swap_remove(i);
                    assert!(guard.delete(&key(gone)).await.unwrap());
                }
                // A read of a live key (it must be found) and two of absent keys.
                let i = (x >> 13) as usize % live.len();
                let k = live[i];
                let found = guard.get(&key(k)).await.unwrap();
                assert_eq!(found, Some(value(k)), "false negative for key {k}");
                checked.fetch_add(1, SeqCst);
                for a in 0..2 {
                    let absent = ABSENT + (x >> (20 + a)) % (1 << 30);
                    assert_eq!(guard.get(&key(absent)).await.unwrap(), None);
                }
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    // Let a rebuild that is running finish, then sample once more.
    while guard.stats().rebuilding {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done.store(true, SeqCst);
    monitor.await.unwrap();
    let last = guard.stats();
    samples.lock().unwrap().push(Sample::of(&last));

    assert_eq!(last.writes_refused, 0, "{last:?}");
    assert_eq!(last.writes_contended, 0, "{last:?}");
    assert_eq!(last.creates, target / 2 * 2);
    assert!(last.rebuilds >= 1, "no rebuild ran: {last:?}");

    println!(
        "{name}: {} creates, {} deletes, {} checked reads, 0 false negatives, 0 refused; \
         {} rebuilds ({} failed), {} growth steps, {:.1} s; observed false-positive rate {:.5}%",
        last.creates,
        last.deletes,
        checked.load(SeqCst),
        last.rebuilds,
        last.rebuilds_failed,
        last.growth_steps,
        started.elapsed().as_secs_f64(),
        last.observed_false_positive_rate * 100.0,
    );
    // Windows between rebuilds: the rate observed in each, with the filter's state.
    let samples = samples.lock().unwrap();
    let mut start = samples[0];
    println!("{name}: window  fingerprints  growth steps  observed FP rate");
    for pair in samples.windows(2) {
        if pair[1].rebuilds != pair[0].rebuilds {
            println!(
                "{name}: before rebuild {}: {:>10}  {:>5}  {:.5}%",
                pair[1].rebuilds,
                pair[0].filter_len,
                pair[0].growth_steps,
                rate(&start, &pair[0]) * 100.0
            );
            start = pair[1];
        }
    }
    let end = samples[samples.len() - 1];
    println!(
        "{name}: after the last rebuild: {:>10}  {:>5}  {:.5}%",
        end.filter_len,
        end.growth_steps,
        rate(&start, &end) * 100.0
    );
}

#[test]
fn sqlite_guard_grows_and_rebuilds_without_losing_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::<i64, i64>::builder(dir.path().join("stress.db"))
        .create_table_if_missing(true)
        .open()
        .unwrap();
    common::runtime().block_on(drive("SQLite", Blocking(store), |k| k as i64, |k| k as i64));
}

#[test]
fn postgres_guard_grows_and_rebuilds_without_losing_a_key() {
    let Some(url) = servers::server_url(&servers::POSTGRES) else {
        return;
    };
    common::runtime().block_on(async {
        let table = common::unique_name("stress");
        let store = PostgresStore::<i64, i64>::builder(&url)
            .table(&table)
            .create_table_if_missing(true)
            .connect()
            .await
            .unwrap();
        drive("PostgreSQL", store, |k| k as i64, |k| k as i64).await;
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(&format!("DROP TABLE {table}"))
            .await
            .unwrap();
    });
}

#[test]
fn redis_guard_grows_and_rebuilds_without_losing_a_key() {
    let Some(url) = servers::server_url(&servers::REDIS) else {
        return;
    };
    common::runtime().block_on(async {
        let namespace = common::unique_name("stress");
        let store = RedisStore::<u64, u64>::connect(&url, &namespace)
            .await
            .unwrap();
        let (rows, index) = (store.rows_key().to_owned(), store.index_key().to_owned());
        drive("Redis", store, |k| k, |k| k).await;
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("DEL")
            .arg(rows)
            .arg(index)
            .query_async(&mut connection)
            .await
            .unwrap();
    });
}
