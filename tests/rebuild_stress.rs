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

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::servers;
use cuckoo_guard::guard::{AsyncCacheGuard, AsyncStore, CacheGuard, GuardStats, Store, Written};
use cuckoo_guard::stores::{PostgresStore, RedisStore, SqliteStore};
use cuckoo_guard::CuckooFilter;

fn creates_target() -> u64 {
    std::env::var("CG_STRESS_CREATES")
        .ok()
        .map(|v| v.parse().expect("CG_STRESS_CREATES is a number"))
        .unwrap_or(200_000)
}

/// The deadline of one run: 6 ms a create (`CG_STRESS_CREATES` scales it), at least two
/// minutes; room for PostgreSQL on a loaded machine.
fn stress_deadline(target: u64) -> Duration {
    Duration::from_secs((target * 6 / 1_000).max(120))
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

/// The guard calls the stress test makes, on plain threads: a sync guard's directly, an async
/// guard's through its runtime (whose workers then run the automatic rebuilds).
trait StressGuard: Send + Sync {
    fn warm_up(&self);
    fn put(&self, k: u64) -> bool;
    fn delete(&self, k: u64) -> bool;
    /// Whether the guard found `k` (and its value is right).
    fn get(&self, k: u64) -> bool;
    fn stats(&self) -> GuardStats;
}

struct Threaded<S: Store>(CacheGuard<S>);

impl<S> StressGuard for Threaded<S>
where
    S: Store<Key = i64, Value = i64> + Send + Sync,
    S::Cursor: Send,
    S::Error: std::fmt::Debug,
{
    fn warm_up(&self) {
        self.0.warm_up(1_000, |_| {}).unwrap();
    }
    fn put(&self, k: u64) -> bool {
        self.0.put(&(k as i64), &(k as i64)).unwrap() == Written::Created
    }
    fn delete(&self, k: u64) -> bool {
        self.0.delete(&(k as i64)).unwrap()
    }
    fn get(&self, k: u64) -> bool {
        match self.0.get(&(k as i64)).unwrap() {
            Some(v) => v == k as i64 || panic!("key {k} has value {v}"),
            None => false,
        }
    }
    fn stats(&self) -> GuardStats {
        self.0.stats()
    }
}

struct Async<S: AsyncStore> {
    guard: AsyncCacheGuard<S>,
    runtime: tokio::runtime::Handle,
}

impl<S> StressGuard for Async<S>
where
    S: AsyncStore<Key = i64, Value = i64> + 'static,
    S::Error: std::fmt::Debug,
{
    fn warm_up(&self) {
        self.runtime
            .block_on(self.guard.warm_up(1_000, |_| {}))
            .unwrap();
    }
    fn put(&self, k: u64) -> bool {
        self.runtime
            .block_on(self.guard.put(&(k as i64), &(k as i64)))
            .unwrap()
            == Written::Created
    }
    fn delete(&self, k: u64) -> bool {
        self.runtime
            .block_on(self.guard.delete(&(k as i64)))
            .unwrap()
    }
    fn get(&self, k: u64) -> bool {
        match self.runtime.block_on(self.guard.get(&(k as i64))).unwrap() {
            Some(v) => v == k as i64 || panic!("key {k} has value {v}"),
            None => false,
        }
    }
    fn stats(&self) -> GuardStats {
        self.guard.stats()
    }
}

fn drive(name: &str, guard: &dyn StressGuard) {
    let target = creates_target();
    guard.warm_up();
    let started = Instant::now();
    let stop = common::Stop::new(&format!("{name} stress"), stress_deadline(target));
    let checked = AtomicU64::new(0);
    // Samples every 50 ms; a change of the rebuild count marks a window boundary.
    let samples = Mutex::new(vec![Sample::of(&guard.stats())]);
    std::thread::scope(|s| {
        // However the writers end, the sampler (and a writer still running) stops.
        let _stop_workers = stop.raise_on_drop();
        s.spawn(|| {
            let _raise = stop.raise_on_panic();
            while !stop.stopped() {
                std::thread::sleep(Duration::from_millis(50));
                samples.lock().unwrap().push(Sample::of(&guard.stats()));
            }
        });
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let (checked, stop) = (&checked, &stop);
                s.spawn(move || {
                    let _raise = stop.raise_on_panic();
                    let mut x = w + 1;
                    let mut live: Vec<u64> = Vec::new();
                    let mut created = 0;
                    let mut next = w;
                    while created < target / 2 {
                        if stop.stopped() {
                            return;
                        }
                        x = x
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        let k = next;
                        next += 2;
                        assert!(guard.put(k), "key {k} existed already");
                        created += 1;
                        live.push(k);
                        // One delete per four creates, of a random live key of this writer.
                        if created % 4 == 0 {
                            let i = (x >> 33) as usize % live.len();
                            let gone = live.swap_remove(i);
                            assert!(guard.delete(gone));
                        }
                        // A read of a live key (it must be found) and two of absent keys.
                        let k = live[(x >> 13) as usize % live.len()];
                        assert!(guard.get(k), "false negative for key {k}");
                        checked.fetch_add(1, SeqCst);
                        for a in 0..2 {
                            assert!(!guard.get(ABSENT + (x >> (20 + a)) % (1 << 30)));
                        }
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        // Let a rebuild that is running finish before the last sample.
        while guard.stats().rebuilding && !stop.stopped() {
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let last = guard.stats();
    let mut samples = samples.into_inner().unwrap();
    samples.push(Sample::of(&last));

    assert_eq!(last.writes_refused, 0, "{last:?}");
    assert_eq!(last.writes_contended, 0, "{last:?}");
    assert_eq!(last.creates, target / 2 * 2);
    assert!(last.rebuilds >= 1, "no rebuild ran: {last:?}");

    println!(
        "{name}: {} creates, {} deletes, {} checked reads, 0 false negatives, 0 refused; \
         {} rebuilds ({} failed), {} growth steps, {:.1} s; observed false-positive rate {:.4}%",
        last.creates,
        last.deletes,
        checked.load(SeqCst),
        last.rebuilds,
        last.rebuilds_failed,
        last.growth_steps,
        started.elapsed().as_secs_f64(),
        last.observed_false_positive_rate * 100.0,
    );
    // Windows between rebuilds: the rate observed in each, and the filter as it ended.
    println!("{name}: window                  fingerprints  tables added  observed FP rate");
    let mut start = samples[0];
    for pair in samples.windows(2) {
        if pair[1].rebuilds != pair[0].rebuilds {
            println!(
                "{name}: before rebuild {:>3}      {:>12}  {:>12}  {:.4}%",
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
        "{name}: after the last rebuild  {:>12}  {:>12}  {:.4}%",
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
    let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), store);
    drive("SQLite", &Threaded(guard));
}

#[test]
fn postgres_guard_grows_and_rebuilds_without_losing_a_key() {
    let Some(url) = servers::server_url(&servers::POSTGRES) else {
        return;
    };
    let url = servers::without_flush_wait(&url);
    let runtime = common::runtime();
    let table = common::unique_name("stress");
    let store = runtime.block_on(
        PostgresStore::<i64, i64>::builder(&url)
            .table(&table)
            .create_table_if_missing(true)
            .connect(),
    );
    let guard = Async {
        guard: AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000), store.unwrap()),
        runtime: runtime.handle().clone(),
    };
    drive("PostgreSQL", &guard);
    runtime.block_on(async {
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
    let runtime = common::runtime();
    let namespace = common::unique_name("stress");
    let store = runtime
        .block_on(RedisStore::<i64, i64>::connect(&url, &namespace))
        .unwrap();
    let (rows, index) = (store.rows_key().to_owned(), store.index_key().to_owned());
    let guard = Async {
        guard: AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000), store),
        runtime: runtime.handle().clone(),
    };
    drive("Redis", &guard);
    runtime.block_on(async {
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
