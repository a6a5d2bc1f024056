//! Injected store faults: errors before a call, errors after it (the call was applied but
//! reported failed), timeouts (applied, reported after a delay) and latency spikes, on every
//! call type at 0%, 1%, 10% and 50%, under two threads creating, deleting and reading through
//! a guard over SQLite, with rebuilds and a warm-up that meet the same faults. Afterwards
//! every key the store holds must pass the filter: no false negatives, stale copies counted.
#![cfg(feature = "sqlite")]

use crate::common;

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cuckoo_guard::guard::{
    AsyncCacheGuard, AsyncStore, CacheGuard, GuardError, MemoryStore, RebuildPolicy, ScanPage,
    Store, Written,
};
use cuckoo_guard::stores::SqliteStore;
use cuckoo_guard::CuckooFilter;

/// When an injected fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// An error before the call: nothing was done.
    ErrorBefore,
    /// The call ran, then an error: a write was applied though the caller sees a failure.
    ErrorAfter,
    /// The call ran slowly, then the caller gave up: applied, reported as a timeout.
    Timeout,
    /// The call is slow but succeeds.
    Latency,
}

#[derive(Debug)]
enum FaultError<E> {
    Injected(Fault),
    Store(E),
}

impl<E: fmt::Display> fmt::Display for FaultError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultError::Injected(fault) => write!(f, "injected fault: {fault:?}"),
            FaultError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl<E: std::error::Error> std::error::Error for FaultError<E> {}

/// A store that injects faults into a share of its calls, decided by a seeded hash of the
/// call's number, so a rate and seed give the same faults in the same places.
struct Faulty<S> {
    inner: S,
    /// Faults per million calls.
    rate: u64,
    seed: u64,
    calls: AtomicU64,
    injected: [AtomicU64; 4],
}

impl<S> Faulty<S> {
    fn new(inner: S, rate: f64, seed: u64) -> Self {
        Faulty {
            inner,
            rate: (rate * 1e6) as u64,
            seed,
            calls: AtomicU64::new(0),
            injected: Default::default(),
        }
    }

    /// The fault for the next call, if any; `write` allows faults after the call.
    fn draw(&self) -> Option<Fault> {
        let n = self.calls.fetch_add(1, Relaxed);
        let mut x = (n ^ self.seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 31;
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x ^= x >> 29;
        if x % 1_000_000 >= self.rate {
            return None;
        }
        let fault = match (x >> 40) % 4 {
            0 => Fault::ErrorBefore,
            1 => Fault::ErrorAfter,
            2 => Fault::Timeout,
            _ => Fault::Latency,
        };
        self.injected[fault as usize].fetch_add(1, Relaxed);
        Some(fault)
    }

    fn call<T, E>(&self, run: impl FnOnce() -> Result<T, E>) -> Result<T, FaultError<E>> {
        match self.draw() {
            Some(Fault::ErrorBefore) => Err(FaultError::Injected(Fault::ErrorBefore)),
            Some(Fault::ErrorAfter) => {
                run().map_err(FaultError::Store)?;
                Err(FaultError::Injected(Fault::ErrorAfter))
            }
            Some(Fault::Timeout) => {
                std::thread::sleep(Duration::from_millis(2));
                run().map_err(FaultError::Store)?;
                Err(FaultError::Injected(Fault::Timeout))
            }
            Some(Fault::Latency) => {
                std::thread::sleep(Duration::from_millis(2));
                run().map_err(FaultError::Store)
            }
            None => run().map_err(FaultError::Store),
        }
    }

    fn injected(&self) -> [u64; 4] {
        [0, 1, 2, 3].map(|i| self.injected[i].load(Relaxed))
    }
}

impl<S: Store> Store for Faulty<S>
where
    S::Error: std::error::Error,
{
    type Key = S::Key;
    type Value = S::Value;
    type Cursor = S::Cursor;
    type Error = FaultError<S::Error>;

    fn get(&self, key: &S::Key) -> Result<Option<S::Value>, Self::Error> {
        self.call(|| self.inner.get(key))
    }

    fn put(&self, key: &S::Key, value: &S::Value) -> Result<Written, Self::Error> {
        self.call(|| self.inner.put(key, value))
    }

    fn delete(&self, key: &S::Key) -> Result<bool, Self::Error> {
        self.call(|| self.inner.delete(key))
    }

    fn scan_keys(
        &self,
        cursor: Option<&S::Cursor>,
        limit: usize,
    ) -> Result<ScanPage<S::Key, S::Cursor>, Self::Error> {
        self.call(|| self.inner.scan_keys(cursor, limit))
    }

    fn write_outcome_unknown(error: &Self::Error) -> bool {
        match error {
            FaultError::Injected(fault) => *fault != Fault::ErrorBefore,
            FaultError::Store(e) => S::write_outcome_unknown(e),
        }
    }

    /// Every fault strikes within the call, on the calling thread.
    const PUT_ENDS_WITH_CALL: bool = S::PUT_ENDS_WITH_CALL;
}

type Guard = CacheGuard<Faulty<SqliteStore<i64, i64>>>;

/// What the traffic of one thread saw.
#[derive(Debug, Default)]
struct Tally {
    operations: u64,
    errors: u64,
    store_errors: u64,
    checked_reads: u64,
    false_negatives: u64,
}

impl Tally {
    fn error<E>(&mut self, error: &GuardError<E>) {
        self.errors += 1;
        if matches!(error, GuardError::Store(_)) {
            self.store_errors += 1;
        }
    }
}

/// One thread: creates keys of its own, deletes some, reads keys whose create returned and
/// whose delete has not begun (those must be found).
fn traffic(guard: &Guard, stop: &common::Stop, thread: i64, operations: u64) -> Tally {
    let mut tally = Tally::default();
    let mut present: Vec<i64> = Vec::new();
    let mut next = thread << 40;
    let mut x = thread as u64 + 1;
    for _ in 0..operations {
        if stop.stopped() {
            break;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        tally.operations += 1;
        match x % 10 {
            0..=4 => {
                next += 1;
                match guard.put(&next, &next) {
                    Ok(written) => {
                        assert_eq!(written, Written::Created);
                        present.push(next);
                    }
                    Err(error) => tally.error(&error),
                }
            }
            5 | 6 if !present.is_empty() => {
                let key = present.swap_remove((x >> 8) as usize % present.len());
                if let Err(error) = guard.delete(&key) {
                    tally.error(&error);
                }
            }
            _ if !present.is_empty() => {
                let key = present[(x >> 8) as usize % present.len()];
                match guard.get(&key) {
                    Ok(Some(value)) => {
                        assert_eq!(value, key);
                        tally.checked_reads += 1;
                    }
                    Ok(None) => tally.false_negatives += 1,
                    Err(error) => tally.error(&error),
                }
            }
            _ => {}
        }
    }
    tally
}

fn sweep(rate: f64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("faults.db");
    let open = || {
        SqliteStore::<i64, i64>::builder(&path)
            .create_table_if_missing(true)
            .connections(2)
            .open()
            .unwrap()
    };
    // Rows before the warm-up, which meets the faults too.
    let seeded = open();
    for key in 1..=2_000 {
        seeded.put(&key, &key).unwrap();
    }
    let store = Faulty::new(open(), rate, 0x5EED ^ (rate * 1e6) as u64);
    let guard = CacheGuard::with_policy(
        CuckooFilter::with_capacity(1_000),
        store,
        RebuildPolicy::manual(),
    );
    let mut warm_ups = 0;
    loop {
        warm_ups += 1;
        match guard.warm_up(100, |_| {}) {
            Ok(_) => break,
            Err(GuardError::Store(_)) => assert!(warm_ups < 10_000, "the warm-up never finished"),
            Err(other) => panic!("{other}"),
        }
    }

    let stop = common::Stop::new(&format!("{rate} faults"), Duration::from_secs(120));
    let rebuilds = Mutex::new((0u64, 0u64));
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        // However the traffic ends, the rebuilds (and the other thread's traffic) stop.
        let _stop_workers = stop.raise_on_drop();
        let workers: Vec<_> = (0..2)
            .map(|thread| {
                scope.spawn({
                    let (guard, stop) = (&guard, &stop);
                    move || {
                        let _raise = stop.raise_on_panic();
                        traffic(guard, stop, thread + 1, 20_000)
                    }
                })
            })
            .collect();
        scope.spawn(|| {
            let _raise = stop.raise_on_panic();
            while !stop.stopped() {
                let outcome = guard.rebuild();
                let mut counts = rebuilds.lock().unwrap();
                match outcome {
                    Ok(_) => counts.0 += 1,
                    Err(_) => counts.1 += 1,
                }
                drop(counts);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    // At 1% faults a run's rebuilds can all miss a fault by chance: more rebuilds, after the
    // traffic, until one meets a fault (each scan makes many store calls).
    let mut extra = 0;
    while rate > 0.0 && rebuilds.lock().unwrap().1 == 0 && extra < 500 {
        let mut counts = rebuilds.lock().unwrap();
        match guard.rebuild() {
            Ok(_) => counts.0 += 1,
            Err(_) => counts.1 += 1,
        }
        extra += 1;
    }

    // Every key the store holds (read without faults) must pass the filter.
    let truth = open();
    let mut stored = HashSet::new();
    let mut cursor = None;
    loop {
        let page = truth.scan_keys(cursor.as_ref(), 10_000).unwrap();
        stored.extend(page.keys.iter().copied());
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let filter = guard.filter();
    let missing = stored.iter().filter(|key| !filter.contains(*key)).count();
    let stats = guard.stats();
    let (rebuilt, rebuilds_failed) = *rebuilds.lock().unwrap();
    let [before, after, timeouts, latency] = guard.store().injected();
    let operations: u64 = tallies.iter().map(|t| t.operations).sum();
    let errors: u64 = tallies.iter().map(|t| t.errors).sum();
    let checked: u64 = tallies.iter().map(|t| t.checked_reads).sum();
    let false_negatives: u64 = tallies.iter().map(|t| t.false_negatives).sum();
    println!(
        "{:>4}% faults: {operations} operations, {errors} failed; injected {before} errors before, \
         {after} after, {timeouts} timeouts, {latency} latency spikes; warm-up attempts {warm_ups}; \
         rebuilds {rebuilt} swapped, {rebuilds_failed} failed; {checked} reads checked, \
         {false_negatives} false negatives; {} keys stored, {missing} missing from the filter; \
         {} stale copies, {} orphaned writes",
        rate * 100.0,
        stored.len(),
        stats.stale_copies,
        stats.orphaned_writes,
    );
    assert_eq!(false_negatives, 0);
    assert_eq!(missing, 0);
    // Every store error a caller saw is counted in the guard's stats.
    let store_errors: u64 = tallies.iter().map(|t| t.store_errors).sum();
    assert_eq!(stats.store_errors, store_errors);
    if rate == 0.0 {
        assert_eq!(errors + before + after + timeouts + latency, 0);
    } else {
        assert!(before > 0 && after > 0 && timeouts > 0 && latency > 0);
        assert!(errors > 0);
    }
    assert!(checked > 1_000, "{checked}");
    // The rebuilds ran beside the traffic and met the same faults: without faults each one
    // swaps, and up to 10% of calls failing some still do.
    assert!(
        rebuilt + rebuilds_failed >= 3,
        "{rebuilt} + {rebuilds_failed} rebuilds"
    );
    if rate == 0.0 {
        assert_eq!(rebuilds_failed, 0);
    } else {
        assert!(rebuilds_failed > 0, "no rebuild met a fault");
    }
    if rate <= 0.10 {
        assert!(rebuilt > 0, "no rebuild swapped at {rate} faults");
    }
    assert_eq!(stats.rebuilds, rebuilt);
}

#[test]
fn no_faults() {
    sweep(0.0);
}

#[test]
fn one_percent_of_calls_fail() {
    sweep(0.01);
}

#[test]
fn ten_percent_of_calls_fail() {
    sweep(0.10);
}

#[test]
fn half_the_calls_fail() {
    sweep(0.50);
}

/// A put whose caller never learns its outcome: the store applies it, then reports an error
/// that may or may not have been applied (sync), or never answers (async: the future writes
/// when first polled, then waits forever). `ENDS` is what the store declares: whether its put
/// can no longer write once the call (the future) has ended, true of this one.
#[derive(Default)]
struct Unanswered<const ENDS: bool> {
    rows: MemoryStore<u64, u64>,
}

#[derive(Debug)]
struct NoAnswer;

impl fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no answer")
    }
}

impl std::error::Error for NoAnswer {}

impl<const ENDS: bool> Store for Unanswered<ENDS> {
    type Key = u64;
    type Value = u64;
    type Cursor = u64;
    type Error = NoAnswer;

    fn get(&self, key: &u64) -> Result<Option<u64>, NoAnswer> {
        Ok(Store::get(&self.rows, key).unwrap_or_else(|never| match never {}))
    }

    fn put(&self, key: &u64, value: &u64) -> Result<Written, NoAnswer> {
        let _ = Store::put(&self.rows, key, value);
        Err(NoAnswer)
    }

    fn delete(&self, key: &u64) -> Result<bool, NoAnswer> {
        Ok(Store::delete(&self.rows, key).unwrap_or_else(|never| match never {}))
    }

    fn scan_keys(
        &self,
        cursor: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, NoAnswer> {
        Ok(Store::scan_keys(&self.rows, cursor, limit).unwrap_or_else(|never| match never {}))
    }

    const PUT_ENDS_WITH_CALL: bool = ENDS;
}

impl<const ENDS: bool> AsyncStore for Unanswered<ENDS> {
    type Key = u64;
    type Value = u64;
    type Cursor = u64;
    type Error = NoAnswer;

    async fn get(&self, key: &u64) -> Result<Option<u64>, NoAnswer> {
        Store::get(self, key)
    }

    async fn put(&self, key: &u64, value: &u64) -> Result<Written, NoAnswer> {
        let _ = Store::put(&self.rows, key, value);
        std::future::pending().await
    }

    async fn delete(&self, key: &u64) -> Result<bool, NoAnswer> {
        Store::delete(self, key)
    }

    async fn scan_keys(
        &self,
        cursor: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, NoAnswer> {
        Store::scan_keys(self, cursor, limit)
    }

    const PUT_ENDS_WITH_FUTURE: bool = ENDS;
}

/// The orphaned writes of a sync guard over `Unanswered<ENDS>` after three puts, and after a
/// rebuild; every key must pass the filter after the rebuild.
fn sync_orphans<const ENDS: bool>() -> (usize, usize) {
    let guard = CacheGuard::with_policy(
        CuckooFilter::with_capacity(100),
        Unanswered::<ENDS>::default(),
        RebuildPolicy::manual(),
    );
    guard.warm_up(10, |_| {}).unwrap();
    for key in 1..=3 {
        guard.put(&key, &key).expect_err("the put has no answer");
    }
    let before = guard.stats().orphaned_writes;
    guard.rebuild().unwrap();
    for key in 1..=3 {
        assert!(
            guard.filter().contains(&key),
            "key {key} lost by the rebuild"
        );
    }
    (before, guard.stats().orphaned_writes)
}

/// The same for an async guard whose put futures are dropped after the store wrote.
fn async_orphans<const ENDS: bool>() -> (usize, usize) {
    common::runtime().block_on(async {
        let guard = AsyncCacheGuard::with_policy(
            CuckooFilter::with_capacity(100),
            Unanswered::<ENDS>::default(),
            RebuildPolicy::manual(),
        );
        guard.warm_up(10, |_| {}).await.unwrap();
        for key in 1..=3 {
            let put = guard.put(&key, &key);
            let answered = tokio::time::timeout(Duration::from_millis(10), put).await;
            assert!(answered.is_err(), "the put has no answer");
        }
        let before = guard.stats().orphaned_writes;
        guard.rebuild().await.unwrap();
        for key in 1..=3 {
            assert!(
                guard.filter().contains(&key),
                "key {key} lost by the rebuild"
            );
        }
        (before, guard.stats().orphaned_writes)
    })
}

/// A rebuild drops the orphaned writes of a store whose puts end with their call (the
/// rebuild's scan began after the writes ended and found their keys), and keeps those of a
/// store that does not say so, whose writes might still land.
#[test]
fn a_rebuild_prunes_orphans_only_of_a_store_whose_puts_end_with_the_call() {
    assert_eq!(
        sync_orphans::<true>(),
        (3, 0),
        "sync, puts end with the call"
    );
    assert_eq!(sync_orphans::<false>(), (3, 3), "sync, undeclared");
    assert_eq!(
        async_orphans::<true>(),
        (3, 0),
        "async, puts end with the future"
    );
    assert_eq!(async_orphans::<false>(), (3, 3), "async, undeclared");
}

/// Reads the guard's orphan count when dropped: the put future of [`DropOrdered`] holds one.
struct OrphanProbe {
    orphans: Arc<OnceLock<Box<dyn Fn() -> usize + Send + Sync>>>,
    seen: Arc<Mutex<Vec<usize>>>,
}

impl Drop for OrphanProbe {
    fn drop(&mut self) {
        let orphans = self.orphans.get().expect("the guard is registered")();
        self.seen.lock().unwrap().push(orphans);
    }
}

/// An async store whose put writes on its first poll and then never answers, declaring that
/// its put cannot write once its future is gone; the future records the guard's orphan count
/// as it drops.
#[derive(Default)]
struct DropOrdered {
    rows: MemoryStore<u64, u64>,
    orphans: Arc<OnceLock<Box<dyn Fn() -> usize + Send + Sync>>>,
    seen: Arc<Mutex<Vec<usize>>>,
}

impl AsyncStore for DropOrdered {
    type Key = u64;
    type Value = u64;
    type Cursor = u64;
    type Error = NoAnswer;

    async fn get(&self, key: &u64) -> Result<Option<u64>, NoAnswer> {
        Ok(Store::get(&self.rows, key).unwrap_or_else(|never| match never {}))
    }

    async fn put(&self, key: &u64, value: &u64) -> Result<Written, NoAnswer> {
        let _probe = OrphanProbe {
            orphans: Arc::clone(&self.orphans),
            seen: Arc::clone(&self.seen),
        };
        let _ = Store::put(&self.rows, key, value);
        std::future::pending().await
    }

    async fn delete(&self, key: &u64) -> Result<bool, NoAnswer> {
        Ok(Store::delete(&self.rows, key).unwrap_or_else(|never| match never {}))
    }

    async fn scan_keys(
        &self,
        cursor: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, NoAnswer> {
        Ok(Store::scan_keys(&self.rows, cursor, limit).unwrap_or_else(|never| match never {}))
    }

    const PUT_ENDS_WITH_FUTURE: bool = true;
}

/// An async guard's dropped put records its orphan (as ended) only after the store's put
/// future is gone: were the orphan recorded first, a rebuild could prune it while the store
/// future, still alive, could write.
#[test]
fn a_dropped_async_put_records_its_orphan_after_the_store_future_is_dropped() {
    common::runtime().block_on(async {
        let store = DropOrdered::default();
        let (orphans, seen) = (Arc::clone(&store.orphans), Arc::clone(&store.seen));
        let guard = AsyncCacheGuard::with_policy(
            CuckooFilter::with_capacity(100),
            store,
            RebuildPolicy::manual(),
        );
        let probe = guard.clone();
        let registered = orphans.set(Box::new(move || probe.stats().orphaned_writes));
        assert!(registered.is_ok());
        guard.warm_up(10, |_| {}).await.unwrap();
        let answered = tokio::time::timeout(Duration::from_millis(10), guard.put(&7, &7)).await;
        assert!(answered.is_err(), "the put has no answer");
        assert_eq!(
            *seen.lock().unwrap(),
            [0],
            "the store's put future saw the orphan recorded before it was dropped"
        );
        assert_eq!(guard.stats().orphaned_writes, 1);
        guard.rebuild().await.unwrap();
        assert!(
            guard.filter().contains(&7),
            "the key was lost by the rebuild"
        );
        assert_eq!(guard.stats().orphaned_writes, 0);
    });
}
