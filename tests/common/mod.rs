//! Shared test code: the store conformance suite every adapter passes, and the concurrency
//! check of a guard over a real store.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use cuckoo_guard::guard::{AsyncCacheGuard, AsyncStore, CacheGuard, Store, Written};

pub(crate) mod counted;
pub(crate) mod servers;

/// Stops a test's workers and bounds its run time, so a worker that finds a false negative
/// (or gets stuck) fails the test with a message instead of hanging it.
///
/// Workers poll [`Stop::stopped`] and hold [`Stop::raise_on_panic`]; the code that ends the
/// run (and blocks until then: in a thread scope, not a closure that only spawns) holds
/// [`Stop::raise_on_drop`], so a panic anywhere stops every worker. Past the
/// deadline, `stopped` raises the stop and panics with the test's name and limit. A worker
/// stuck in a call that never returns cannot poll: while the first `Stop` (the owner) lives,
/// a watchdog thread ends the test binary with a message 30 seconds after the deadline.
pub(crate) struct Stop {
    shared: Arc<StopShared>,
    owner: bool,
}

struct StopShared {
    raised: AtomicBool,
    what: String,
    limit: Duration,
    deadline: Instant,
    /// Set when the owner is dropped: the watchdog stands down.
    finished: Mutex<bool>,
    wake: Condvar,
}

/// How long after the deadline the watchdog ends a test binary whose workers never stopped.
const WATCHDOG_GRACE: Duration = Duration::from_secs(30);

impl Stop {
    /// A stop for `what` (named in the messages), failing the run after `limit`.
    pub(crate) fn new(what: &str, limit: Duration) -> Self {
        let current = std::thread::current();
        let test = current.name().unwrap_or("a test");
        let shared = Arc::new(StopShared {
            raised: AtomicBool::new(false),
            what: format!("{test}: {what}"),
            limit,
            deadline: Instant::now() + limit,
            finished: Mutex::new(false),
            wake: Condvar::new(),
        });
        let watched = Arc::clone(&shared);
        std::thread::spawn(move || {
            let finished = watched.finished.lock().unwrap();
            let (finished, _) = watched
                .wake
                .wait_timeout_while(finished, limit + WATCHDOG_GRACE, |done| !*done)
                .unwrap();
            if !*finished {
                // Past the harness's capture: the process ends before it could report.
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "DEADLINE {}: still running {:?} after its {limit:?} deadline, a worker is \
                     stuck; ending the test binary",
                    watched.what,
                    WATCHDOG_GRACE
                );
                std::process::exit(101);
            }
        });
        Stop {
            shared,
            owner: true,
        }
    }

    /// Whether the workers should stop. Past the deadline, raises the stop and panics.
    pub(crate) fn stopped(&self) -> bool {
        if self.shared.raised.load(SeqCst) {
            return true;
        }
        if Instant::now() > self.shared.deadline {
            self.raise();
            panic!(
                "DEADLINE {}: not done within {:?}",
                self.shared.what, self.shared.limit
            );
        }
        false
    }

    /// Stops the workers.
    pub(crate) fn raise(&self) {
        self.shared.raised.store(true, SeqCst);
    }

    /// Raises the stop when dropped, however the holder ends.
    pub(crate) fn raise_on_drop(&self) -> RaiseStop {
        RaiseStop {
            stop: self.clone(),
            only_on_panic: false,
        }
    }

    /// Raises the stop if the holder panics.
    pub(crate) fn raise_on_panic(&self) -> RaiseStop {
        RaiseStop {
            stop: self.clone(),
            only_on_panic: true,
        }
    }
}

impl Clone for Stop {
    fn clone(&self) -> Self {
        Stop {
            shared: Arc::clone(&self.shared),
            owner: false,
        }
    }
}

impl Drop for Stop {
    fn drop(&mut self) {
        if self.owner {
            self.raise();
            *self.shared.finished.lock().unwrap() = true;
            self.shared.wake.notify_all();
        }
    }
}

/// See [`Stop::raise_on_drop`] and [`Stop::raise_on_panic`].
pub(crate) struct RaiseStop {
    stop: Stop,
    only_on_panic: bool,
}

impl Drop for RaiseStop {
    fn drop(&mut self) {
        if !self.only_on_panic || std::thread::panicking() {
            self.stop.raise();
        }
    }
}

/// The deadline of the shared concurrency checks below (they take seconds).
const CONCURRENCY_DEADLINE: Duration = Duration::from_secs(240);

/// A test's own connection to the PostgreSQL server at `url`, beside a store's (its
/// connection task spawned on the current runtime).
#[cfg(feature = "postgres")]
pub(crate) async fn pg_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Polls `future` once and drops it: its output if it was ready, `None` if it was pending.
// The tests build with the dev-dependencies' newer toolchain, not the library's MSRV.
#[allow(clippy::incompatible_msrv)]
pub(crate) fn poll_once<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

/// Waits until `done` holds, failing the test after 60 s.
pub(crate) async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A tokio runtime with two workers, so spawned tasks really run in parallel.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A name no other test run uses at the same time.
pub(crate) fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros(),
        NEXT.fetch_add(1, SeqCst)
    )
}

/// How the suite makes keys and values of a store's types.
pub(crate) struct Make<K, V> {
    pub(crate) key: fn(u64) -> K,
    pub(crate) value: fn(u64) -> V,
}

async fn all_keys<S: AsyncStore>(store: &S, page_size: usize) -> Vec<S::Key> {
    let mut keys = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.scan_keys(cursor.as_ref(), page_size).await.unwrap();
        assert!(
            page.keys.len() <= page_size,
            "a page held more keys than asked for"
        );
        keys.extend(page.keys);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return keys,
        }
    }
}

/// The store contract, on an empty store: create vs update reporting, delete reporting,
/// scans that return every key exactly once at any page size, and concurrent creates of one
/// key reporting one create.
pub(crate) async fn conformance<S>(store: Arc<S>, make: Make<S::Key, S::Value>)
where
    S: AsyncStore + 'static,
    S::Key: Ord + Clone + Debug + Send + Sync + 'static,
    S::Value: PartialEq + Debug + Send + Sync + 'static,
    S::Error: Debug,
{
    let (key, value) = (make.key, make.value);
    // An empty store.
    let empty = store.scan_keys(None, 10).await.unwrap();
    assert!(
        empty.keys.is_empty() && empty.next.is_none(),
        "a new store must be empty"
    );
    assert_eq!(store.get(&key(1)).await.unwrap(), None);
    assert!(
        !store.delete(&key(1)).await.unwrap(),
        "deleting a missing key reports false"
    );
    assert_eq!(
        store.get_many(&[key(1), key(2), key(1)]).await.unwrap(),
        [None, None, None]
    );

    // Create, then update, reported as such; get sees the latest value.
    assert_eq!(
        store.put(&key(1), &value(10)).await.unwrap(),
        Written::Created
    );
    assert_eq!(store.get(&key(1)).await.unwrap(), Some(value(10)));
    assert_eq!(
        store.put(&key(1), &value(11)).await.unwrap(),
        Written::Updated
    );
    assert_eq!(
        store.put(&key(1), &value(11)).await.unwrap(),
        Written::Updated
    );
    assert_eq!(store.get(&key(1)).await.unwrap(), Some(value(11)));

    // Delete reported once; afterwards the key is gone and can be created again.
    assert!(store.delete(&key(1)).await.unwrap());
    assert!(!store.delete(&key(1)).await.unwrap());
    assert_eq!(store.get(&key(1)).await.unwrap(), None);
    assert_eq!(
        store.put(&key(1), &value(12)).await.unwrap(),
        Written::Created
    );
    assert!(store.delete(&key(1)).await.unwrap());

    // Scans: every key exactly once, whatever the page size.
    let n = 1_234u64;
    for i in 0..n {
        assert_eq!(
            store.put(&key(i), &value(i)).await.unwrap(),
            Written::Created
        );
    }
    let expected: BTreeSet<S::Key> = (0..n).map(key).collect();
    for page in [1, 7, 100, 1_234, 5_000] {
        let keys = all_keys(&*store, page).await;
        assert_eq!(
            keys.len(),
            n as usize,
            "page size {page}: a key was repeated or missed"
        );
        let distinct: BTreeSet<S::Key> = keys.into_iter().collect();
        assert_eq!(distinct, expected, "page size {page}: wrong keys");
    }
    // A page never holds more than asked for.
    let page = store.scan_keys(None, 10).await.unwrap();
    assert_eq!(page.keys.len(), 10);
    assert!(page.next.is_some());

    // Batch reads: the keys' order, `None` for a missing key, a repeated key answered each
    // time, as per-key `get`s answer; a batch over several SQLite statements (512 keys each).
    get_many_matches_get(&*store, &[], &key, &value, n).await;
    let mixed: Vec<u64> = vec![7, 5_000_001, 3, 7, 5_000_001, 0, n - 1, n];
    get_many_matches_get(&*store, &mixed, &key, &value, n).await;
    // 1,300 keys, a quarter missing, in no order, then 200 repeats of keys from the start.
    let mut large: Vec<u64> = (0..1_300u64).map(|i| (i * 7_919) % 1_650).collect();
    large.extend_from_within(..200);
    get_many_matches_get(&*store, &large, &key, &value, n).await;

    // Concurrent creates of one new key: exactly one reports `Created`.
    for round in 0..20u64 {
        let k = key(1_000_000 + round);
        let tasks: Vec<_> = (0..4u64)
            .map(|t| {
                let (store, k) = (Arc::clone(&store), k.clone());
                tokio::spawn(async move { store.put(&k, &value(t)).await.unwrap() })
            })
            .collect();
        let mut created = 0;
        for task in tasks {
            if task.await.unwrap() == Written::Created {
                created += 1;
            }
        }
        assert_eq!(
            created, 1,
            "concurrent creates of one key: {created} reported Created"
        );
    }
}

/// Checks `get_many` of `keys` (numbers for `key`) on a store holding `value(k)` for each
/// `k < rows`, against the expected values and per-key `get`s.
async fn get_many_matches_get<S>(
    store: &S,
    keys: &[u64],
    key: &impl Fn(u64) -> S::Key,
    value: &impl Fn(u64) -> S::Value,
    rows: u64,
) where
    S: AsyncStore,
    S::Value: PartialEq + Debug,
    S::Error: Debug,
{
    let keys_of_store: Vec<S::Key> = keys.iter().map(|&k| key(k)).collect();
    let batch = store.get_many(&keys_of_store).await.unwrap();
    let expected: Vec<Option<S::Value>> =
        keys.iter().map(|&k| (k < rows).then(|| value(k))).collect();
    assert_eq!(batch.len(), keys.len(), "get_many: one answer per key");
    for (i, (&k, got)) in keys.iter().zip(&batch).enumerate() {
        assert_eq!(got, &expected[i], "get_many: key {k} at position {i}");
        let single = store.get(&keys_of_store[i]).await.unwrap();
        assert_eq!(got, &single, "get_many and get differ on key {k}");
    }
}

/// Checks one sample: at most `n` keys, none twice, every one among `rows`.
pub(crate) fn check_sample<K: Ord + Debug>(sample: &[K], n: usize, rows: &BTreeSet<K>) {
    assert!(
        sample.len() <= n,
        "{} keys sampled, {n} asked for",
        sample.len()
    );
    let distinct: BTreeSet<&K> = sample.iter().collect();
    assert_eq!(
        distinct.len(),
        sample.len(),
        "a key sampled twice: {sample:?}"
    );
    if let Some(stray) = sample.iter().find(|k| !rows.contains(k)) {
        panic!("sampled {stray:?}, which the store does not hold");
    }
}

/// The sampling contract, on an empty store: nothing from it empty; every key when more are
/// asked for than it holds; exactly `n` distinct stored keys from 50 rows and from 10,000;
/// and every one of 50 rows drawn within 400 samples of 5 (a key with the uniform chance
/// 1/10 per sample is missed by all 400 with probability 0.9^400, about 5e-19). Stores whose
/// sample may fall short of `n` are checked on their own.
pub(crate) async fn sampling<S>(store: &S, make: Make<S::Key, S::Value>)
where
    S: AsyncStore,
    S::Key: Ord + Clone + Debug,
    S::Error: Debug,
{
    let (key, value) = (make.key, make.value);
    assert_eq!(
        store.sample_keys(10).await.unwrap(),
        Vec::new(),
        "an empty store"
    );
    for i in 0..50u64 {
        store.put(&key(i), &value(i)).await.unwrap();
    }
    let mut rows: BTreeSet<S::Key> = (0..50).map(key).collect();
    assert_eq!(store.sample_keys(0).await.unwrap(), Vec::new(), "n = 0");
    for n in [50, 51, 1_000, usize::MAX] {
        let all = store.sample_keys(n).await.unwrap();
        check_sample(&all, n, &rows);
        assert_eq!(all.len(), 50, "n = {n} of 50 rows");
    }
    let mut seen = BTreeSet::new();
    for round in 1.. {
        let sample = store.sample_keys(5).await.unwrap();
        check_sample(&sample, 5, &rows);
        assert_eq!(sample.len(), 5, "5 of 50 rows");
        seen.extend(sample);
        if seen.len() == rows.len() {
            break;
        }
        assert!(
            round < 400,
            "400 samples of 5 never drew {:?}",
            rows.difference(&seen).collect::<Vec<_>>()
        );
    }
    for i in 50..10_000u64 {
        store.put(&key(i), &value(i)).await.unwrap();
    }
    rows.extend((50..10_000).map(key));
    for _ in 0..5 {
        let sample = store.sample_keys(100).await.unwrap();
        check_sample(&sample, 100, &rows);
        assert_eq!(sample.len(), 100, "100 of 10,000 rows");
    }
}

/// After `break_store` made the store unusable, every operation must return an error rather
/// than a plausible answer.
pub(crate) async fn errors_surface<S>(store: &S, key: S::Key, value: S::Value)
where
    S: AsyncStore,
    S::Value: Debug,
{
    assert!(store.get(&key).await.is_err(), "get swallowed an error");
    assert!(
        store.get_many(std::slice::from_ref(&key)).await.is_err(),
        "get_many swallowed an error"
    );
    assert!(
        store.put(&key, &value).await.is_err(),
        "put swallowed an error"
    );
    assert!(
        store.delete(&key).await.is_err(),
        "delete swallowed an error"
    );
    assert!(
        store.scan_keys(None, 10).await.is_err(),
        "scan swallowed an error"
    );
    assert!(
        store.sample_keys(10).await.is_err(),
        "sample swallowed an error"
    );
}

/// Per key: `generation << 2 | phase` (0 absent, 1 creating, 2 present, 3 deleting). Only the
/// key's writer changes it; equal reads before and after a lookup prove nothing happened.
fn set_phase(states: &[AtomicU64], k: u64, phase: u64) {
    let s = &states[k as usize];
    s.store(((s.load(SeqCst) >> 2) + 1) << 2 | phase, SeqCst);
}

/// The next key writer `writer` of `writers` works on (writers own disjoint keys).
fn next_key(x: &mut u64, writer: u64, writers: u64, keys: u64) -> u64 {
    *x = x
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    (*x >> 33) % (keys / writers) * writers + writer
}

/// Threads create, delete and look up through a guard over a synchronous store: every lookup
/// of a key whose create returned before the lookup began (and whose delete had not begun)
/// must find it. Returns the lookups checked and the number of keys present at the end.
pub(crate) fn guard_concurrency_sync<S>(
    guard: &CacheGuard<S>,
    make: Make<S::Key, S::Value>,
    keys: u64,
    operations: u64,
) -> (usize, usize)
where
    S: Store + Send + Sync,
    S::Key: Hash + Clone + Send + Sync + 'static,
    S::Value: Clone + PartialEq + Debug + Send + Sync,
    S::Cursor: Send,
    S::Error: Debug,
{
    guard.warm_up(500, |_| {}).unwrap();
    let states: Vec<AtomicU64> = (0..keys).map(|_| AtomicU64::new(0)).collect();
    let checked = AtomicUsize::new(0);
    let writers_done = AtomicUsize::new(0);
    let stop = Stop::new("the concurrency check", CONCURRENCY_DEADLINE);
    std::thread::scope(|scope| {
        for writer in 0..2u64 {
            let (states, writers_done, stop) = (&states, &writers_done, &stop);
            scope.spawn(move || {
                let _raise = stop.raise_on_panic();
                let mut x = writer + 1;
                for _ in 0..operations {
                    if stop.stopped() {
                        break;
                    }
                    let k = next_key(&mut x, writer, 2, keys);
                    if states[k as usize].load(SeqCst) & 3 == 0 {
                        set_phase(states, k, 1);
                        let written = guard.put(&(make.key)(k), &(make.value)(k)).unwrap();
                        assert_eq!(written, Written::Created);
                        set_phase(states, k, 2);
                    } else {
                        set_phase(states, k, 3);
                        assert!(guard.delete(&(make.key)(k)).unwrap());
                        set_phase(states, k, 0);
                    }
                }
                writers_done.fetch_add(1, SeqCst);
            });
        }
        for reader in 0..2u64 {
            let (states, checked, writers_done, stop) = (&states, &checked, &writers_done, &stop);
            scope.spawn(move || {
                let _raise = stop.raise_on_panic();
                let mut x = reader + 77;
                while writers_done.load(SeqCst) < 2 && !stop.stopped() {
                    let k = next_key(&mut x, 0, 1, keys);
                    let before = states[k as usize].load(SeqCst);
                    let found = guard.get(&(make.key)(k)).unwrap();
                    if before & 3 == 2 && states[k as usize].load(SeqCst) == before {
                        assert_eq!(found, Some((make.value)(k)), "false negative for key {k}");
                        checked.fetch_add(1, SeqCst);
                    }
                }
            });
        }
    });
    let present = states.iter().filter(|s| s.load(SeqCst) & 3 == 2).count();
    let stats = guard.stats();
    assert_eq!((stats.missing_copies, stats.store_errors), (0, 0));
    // Only a delete during a rebuild leaves a copy stale.
    if stats.rebuilds + stats.rebuilds_failed == 0 {
        assert_eq!(stats.stale_copies, 0);
    }
    (checked.load(SeqCst), present)
}

/// Tasks create, delete and look up through an async guard over a real store: every lookup
/// of a key whose create returned before the lookup began (and whose delete had not begun)
/// must find it, and at the end the filter's length equals the store's row count.
///
/// Returns the lookups checked and the number of keys present at the end.
pub(crate) async fn guard_concurrency<S>(
    guard: Arc<AsyncCacheGuard<S>>,
    make: Make<S::Key, S::Value>,
    keys: u64,
    operations: u64,
) -> (usize, usize)
where
    S: AsyncStore + 'static,
    S::Key: Hash + Clone + Send + Sync + 'static,
    S::Value: Clone + PartialEq + Debug + Send + Sync + 'static,
    S::Error: Debug,
{
    guard.warm_up(500, |_| {}).await.unwrap();
    let states: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let checked = Arc::new(AtomicUsize::new(0));
    let writers_done = Arc::new(AtomicUsize::new(0));
    let stop = Stop::new("the concurrency check", CONCURRENCY_DEADLINE);
    let stop_workers = stop.raise_on_drop();
    let mut writers = Vec::new();
    for writer in 0..2u64 {
        let (guard, states, done, stop) = (
            Arc::clone(&guard),
            Arc::clone(&states),
            Arc::clone(&writers_done),
            stop.clone(),
        );
        writers.push(tokio::spawn(async move {
            let _raise = stop.raise_on_panic();
            let mut x = writer + 1;
            for _ in 0..operations {
                if stop.stopped() {
                    break;
                }
                let k = next_key(&mut x, writer, 2, keys);
                if states[k as usize].load(SeqCst) & 3 == 0 {
                    set_phase(&states, k, 1);
                    let written = guard.put(&(make.key)(k), &(make.value)(k)).await.unwrap();
                    assert_eq!(written, Written::Created);
                    set_phase(&states, k, 2);
                } else {
                    set_phase(&states, k, 3);
                    assert!(guard.delete(&(make.key)(k)).await.unwrap());
                    set_phase(&states, k, 0);
                }
            }
            done.fetch_add(1, SeqCst);
        }));
    }
    let mut readers = Vec::new();
    for reader in 0..2u64 {
        let (guard, states, checked, done, stop) = (
            Arc::clone(&guard),
            Arc::clone(&states),
            Arc::clone(&checked),
            Arc::clone(&writers_done),
            stop.clone(),
        );
        readers.push(tokio::spawn(async move {
            let _raise = stop.raise_on_panic();
            let mut x = reader + 77;
            while done.load(SeqCst) < 2 && !stop.stopped() {
                let k = next_key(&mut x, 0, 1, keys);
                let before = states[k as usize].load(SeqCst);
                let found = guard.get(&(make.key)(k)).await.unwrap();
                if before & 3 == 2 && states[k as usize].load(SeqCst) == before {
                    assert_eq!(found, Some((make.value)(k)), "false negative for key {k}");
                    checked.fetch_add(1, SeqCst);
                }
            }
        }));
    }
    // Every task is joined before a panic of one is passed on, so none runs on.
    let mut panicked = None;
    for task in writers.into_iter().chain(readers) {
        if let Err(error) = task.await {
            panicked.get_or_insert(error);
        }
    }
    drop(stop_workers);
    if let Some(error) = panicked {
        std::panic::resume_unwind(error.into_panic());
    }
    let present = states.iter().filter(|s| s.load(SeqCst) & 3 == 2).count();
    let stats = guard.stats();
    assert_eq!(
        (stats.stale_copies, stats.missing_copies, stats.store_errors),
        (0, 0, 0)
    );
    (checked.load(SeqCst), present)
}

/// A `redis-server` of the test's own on a free loopback port, with its own data directory,
/// killed when dropped.
pub(crate) struct OwnRedis {
    port: u16,
    dir: tempfile::TempDir,
    args: Vec<String>,
    child: Option<std::process::Child>,
}

impl OwnRedis {
    /// Starts one with the extra `args` (saving no snapshots), or `None` (after a notice) if
    /// `redis-server` is not installed; under `CG_REQUIRE_SERVERS` that fails the test.
    pub(crate) fn start(args: &[&str]) -> Option<OwnRedis> {
        if std::process::Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var_os("CG_REQUIRE_SERVERS").is_none(),
                "redis-server is not installed"
            );
            eprintln!("SKIPPED: redis-server is not installed");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = OwnRedis {
            port,
            dir: tempfile::tempdir().unwrap(),
            args: args.iter().map(|a| a.to_string()).collect(),
            child: None,
        };
        server.launch();
        Some(server)
    }

    /// Its URL.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again, after [`kill`](Self::kill)) and waits for its port.
    pub(crate) fn launch(&mut self) {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", ""])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: no shutdown, only what the append-only file (if enabled) holds survives.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
