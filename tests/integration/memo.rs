//! The false-positive memo through both guards: a replayed false positive costs one store
//! read, a create of it is found by the very next lookup, a lookup whose store read raced a
//! create leaves nothing behind (also when its future is dropped), and under load no lookup
//! that began after a create returned misses the key.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::task::{Context, Poll};
use std::thread;

use cuckoo_guard::guard::{
    AsyncCacheGuard, AsyncStore, CacheGuard, MemoryStore, RebuildPolicy, ScanPage, Store, Written,
};
use cuckoo_guard::CuckooFilter;

const ROWS: u64 = 5_000;
const REPLAYS: u64 = 10_000;

/// 8-bit fingerprints: false positives are easy to find.
fn filter() -> CuckooFilter {
    CuckooFilter::builder()
        .capacity(10_000)
        .fingerprint_bits(8)
        .seed(7)
        .build()
        .unwrap()
}

type Hook = Box<dyn Fn(u64) + Send + Sync>;

/// A [`MemoryStore`] that counts its reads and may run a hook between a read and its answer.
struct Counting {
    rows: MemoryStore<u64, u64>,
    gets: AtomicU64,
    after_read: Mutex<Option<Hook>>,
    before_write: Mutex<Option<Hook>>,
}

impl Counting {
    fn new() -> Self {
        Counting {
            rows: MemoryStore::from_rows((0..ROWS).map(|k| (k, k))),
            gets: AtomicU64::new(0),
            after_read: Mutex::new(None),
            before_write: Mutex::new(None),
        }
    }
    fn gets(&self) -> u64 {
        self.gets.load(SeqCst)
    }
}

impl Store for Counting {
    type Key = u64;
    type Value = u64;
    type Cursor = u64;
    type Error = std::convert::Infallible;

    fn get(&self, key: &u64) -> Result<Option<u64>, Self::Error> {
        self.gets.fetch_add(1, SeqCst);
        let value = Store::get(&self.rows, key);
        if let Some(hook) = &*self.after_read.lock().unwrap() {
            hook(*key);
        }
        value
    }
    fn put(&self, key: &u64, value: &u64) -> Result<Written, Self::Error> {
        if let Some(hook) = &*self.before_write.lock().unwrap() {
            hook(*key);
        }
        Store::put(&self.rows, key, value)
    }
    fn delete(&self, key: &u64) -> Result<bool, Self::Error> {
        Store::delete(&self.rows, key)
    }
    fn scan_keys(
        &self,
        cursor: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, Self::Error> {
        Store::scan_keys(&self.rows, cursor, limit)
    }
}

impl AsyncStore for Counting {
    type Key = u64;
    type Value = u64;
    type Cursor = u64;
    type Error = std::convert::Infallible;

    async fn get(&self, key: &u64) -> Result<Option<u64>, Self::Error> {
        Store::get(self, key)
    }
    async fn put(&self, key: &u64, value: &u64) -> Result<Written, Self::Error> {
        Store::put(self, key, value)
    }
    async fn delete(&self, key: &u64) -> Result<bool, Self::Error> {
        Store::delete(self, key)
    }
    async fn scan_keys(
        &self,
        cursor: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, Self::Error> {
        Store::scan_keys(self, cursor, limit)
    }
}

/// `n` absent keys the warm filter admits.
fn false_positives(may_contain: impl Fn(&u64) -> bool, n: usize) -> Vec<u64> {
    let found: Vec<u64> = (1_000_000..2_000_000u64)
        .filter(|k| may_contain(k))
        .take(n)
        .collect();
    assert_eq!(found.len(), n, "not enough false positives found");
    found
}

fn sync_guard() -> CacheGuard<Arc<Counting>> {
    let guard =
        CacheGuard::with_policy(filter(), Arc::new(Counting::new()), RebuildPolicy::manual());
    guard.warm_up(1_000, |_| {}).unwrap();
    guard
}

#[test]
fn a_replayed_false_positive_costs_one_store_read_until_it_is_created() {
    let guard = sync_guard();
    let key = false_positives(|k| guard.may_contain(k), 1)[0];
    let before = guard.store().gets();
    for _ in 0..REPLAYS {
        assert_eq!(guard.get(&key).unwrap(), None);
    }
    let reads = guard.store().gets() - before;
    println!("sync guard: {REPLAYS} replays of a false positive, {reads} store reads");
    assert!(reads <= 2, "{REPLAYS} replays made {reads} store reads");
    let stats = guard.stats();
    assert_eq!(stats.memo_hits, REPLAYS - reads);
    assert_eq!(stats.false_positives, reads);
    assert_eq!(stats.passed, REPLAYS);

    assert_eq!(guard.put(&key, &42).unwrap(), Written::Created);
    assert_eq!(guard.get(&key).unwrap(), Some(42));
    // An update of a present key, and other keys' entries, are untouched by the create.
    assert_eq!(guard.put(&key, &43).unwrap(), Written::Updated);
    assert_eq!(guard.get(&key).unwrap(), Some(43));
}

#[test]
fn a_memo_of_no_slots_sends_every_replay_to_the_store() {
    let guard =
        CacheGuard::with_policy(filter(), Arc::new(Counting::new()), RebuildPolicy::manual())
            .with_memo(0)
            .unwrap();
    guard.warm_up(1_000, |_| {}).unwrap();
    let key = false_positives(|k| guard.may_contain(k), 1)[0];
    let before = guard.store().gets();
    for _ in 0..1_000 {
        assert_eq!(guard.get(&key).unwrap(), None);
    }
    assert_eq!(guard.store().gets() - before, 1_000);
    assert_eq!(guard.stats().memo_hits, 0);
}

#[test]
fn a_rebuild_clears_the_memo_which_then_refills() {
    let guard = sync_guard();
    let keys = false_positives(|k| guard.may_contain(k), 2);
    for key in &keys {
        assert_eq!(guard.get(key).unwrap(), None);
    }
    guard.put(&keys[0], &1).unwrap();
    guard.rebuild().unwrap();
    assert_eq!(guard.get(&keys[0]).unwrap(), Some(1));
    // Blocked by the new filter, or one store read that memoizes it again.
    let before = guard.store().gets();
    for _ in 0..100 {
        assert_eq!(guard.get(&keys[1]).unwrap(), None);
    }
    assert!(guard.store().gets() - before <= 1);
}

/// A row written behind the guard's back (straight into the store) for a key the memo holds
/// as absent: the memo may answer "absent" until a rebuild, and every lookup that begins
/// after the rebuild started finds the row.
#[test]
fn a_row_written_behind_the_guards_back_is_found_after_a_rebuild() {
    let guard = sync_guard();
    let key = false_positives(|k| guard.may_contain(k), 1)[0];
    assert_eq!(guard.get(&key).unwrap(), None);
    assert_eq!(guard.get(&key).unwrap(), None);
    assert_eq!(guard.stats().memo_hits, 1, "the key is memoized as absent");
    Store::put(&guard.store().rows, &key, &9).unwrap();
    guard.rebuild().unwrap();
    assert_eq!(guard.get(&key).unwrap(), Some(9));
}

#[test]
fn async_a_row_written_behind_the_guards_back_is_found_after_a_rebuild() {
    runtime().block_on(async {
        let guard = AsyncCacheGuard::with_policy(
            filter(),
            Arc::new(Counting::new()),
            RebuildPolicy::manual(),
        );
        guard.warm_up(1_000, |_| {}).await.unwrap();
        let key = false_positives(|k| guard.may_contain(k), 1)[0];
        assert_eq!(guard.get(&key).await.unwrap(), None);
        assert_eq!(guard.get(&key).await.unwrap(), None);
        assert_eq!(guard.stats().memo_hits, 1, "the key is memoized as absent");
        Store::put(&guard.store().rows, &key, &9).unwrap();
        guard.rebuild().await.unwrap();
        assert_eq!(guard.get(&key).await.unwrap(), Some(9));
    });
}

/// The read-through race through the sync guard: a lookup reads "absent" from the store, a
/// create of that key runs to the end, then the lookup finishes (answering from its read). The
/// next lookup must find the key.
#[test]
fn a_lookup_whose_read_raced_a_create_installs_nothing() {
    let guard = sync_guard();
    let key = false_positives(|k| guard.may_contain(k), 1)[0];
    let (read_tx, read_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = Mutex::new(go_rx);
    *guard.store().after_read.lock().unwrap() = Some(Box::new(move |k| {
        if k == key {
            read_tx.send(()).unwrap();
            go_rx.lock().unwrap().recv().unwrap();
        }
    }));
    let reader = {
        let guard = guard.clone();
        thread::spawn(move || guard.get(&key).unwrap())
    };
    read_rx.recv().unwrap();
    // The lookup has read "absent" and waits; the create runs to the end meanwhile.
    assert_eq!(guard.put(&key, &7).unwrap(), Written::Created);
    go_tx.send(()).unwrap();
    assert_eq!(
        reader.join().unwrap(),
        None,
        "the lookup began before the create"
    );
    *guard.store().after_read.lock().unwrap() = None;
    assert_eq!(guard.get(&key).unwrap(), Some(7));
}

/// A lookup that runs whole while a create of its key is in flight (its memo step done, its
/// store write not yet landed) reads "absent" and must install nothing: the write lands
/// after the read.
#[test]
fn a_lookup_during_a_create_in_flight_installs_nothing() {
    let guard = sync_guard();
    let key = false_positives(|k| guard.may_contain(k), 1)[0];
    let (writing_tx, writing_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = Mutex::new(go_rx);
    *guard.store().before_write.lock().unwrap() = Some(Box::new(move |_| {
        writing_tx.send(()).unwrap();
        go_rx.lock().unwrap().recv().unwrap();
    }));
    let creator = {
        let guard = guard.clone();
        thread::spawn(move || guard.put(&key, &5).unwrap())
    };
    writing_rx.recv().unwrap();
    assert_eq!(guard.get(&key).unwrap(), None, "the write has not landed");
    go_tx.send(()).unwrap();
    assert_eq!(creator.join().unwrap(), Written::Created);
    assert_eq!(guard.get(&key).unwrap(), Some(5));
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

#[test]
fn async_a_replayed_false_positive_costs_one_store_read_until_it_is_created() {
    runtime().block_on(async {
        let guard = AsyncCacheGuard::with_policy(
            filter(),
            Arc::new(Counting::new()),
            RebuildPolicy::manual(),
        );
        guard.warm_up(1_000, |_| {}).await.unwrap();
        let key = false_positives(|k| guard.may_contain(k), 1)[0];
        let before = guard.store().gets();
        for _ in 0..REPLAYS {
            assert_eq!(guard.get(&key).await.unwrap(), None);
        }
        let reads = guard.store().gets() - before;
        println!("async guard: {REPLAYS} replays of a false positive, {reads} store reads");
        assert!(reads <= 2, "{REPLAYS} replays made {reads} store reads");
        assert_eq!(guard.stats().memo_hits, REPLAYS - reads);
        assert_eq!(guard.put(&key, &42).await.unwrap(), Written::Created);
        assert_eq!(guard.get(&key).await.unwrap(), Some(42));
    });
}

/// An [`AsyncStore`] whose reads wait, after reading, until released: a lookup future can be
/// left between its store read and its install.
struct Paused {
    inner: Counting,
    hold: AtomicBool,
    released: AtomicBool,
    /// Puts never return (a write stuck in flight, its future to be dropped).
    stuck_writes: AtomicBool,
}

impl Paused {
    fn new() -> Self {
        Paused {
            inner: Counting::new(),
            hold: AtomicBool::new(false),
            released: AtomicBool::new(false),
            stuck_writes: AtomicBool::new(false),
        }
    }
}

impl AsyncStore for Paused {
    type Key = u64;
    type Value = u64;
    type Cursor = u64;
    type Error = std::convert::Infallible;

    async fn get(&self, key: &u64) -> Result<Option<u64>, Self::Error> {
        let value = Store::get(&self.inner, key);
        if self.hold.load(SeqCst) {
            std::future::poll_fn(|cx| {
                if self.released.load(SeqCst) {
                    Poll::Ready(())
                } else {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            })
            .await;
        }
        value
    }
    async fn put(&self, key: &u64, value: &u64) -> Result<Written, Self::Error> {
        if self.stuck_writes.load(SeqCst) {
            std::future::pending::<()>().await;
        }
        Store::put(&self.inner, key, value)
    }
    async fn delete(&self, key: &u64) -> Result<bool, Self::Error> {
        Store::delete(&self.inner, key)
    }
    async fn scan_keys(
        &self,
        cursor: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, Self::Error> {
        Store::scan_keys(&self.inner, cursor, limit)
    }
}

/// The read-through race through the async guard: a lookup future reads "absent" and is left
/// pending; a create runs to the end; the lookup future then either finishes or is dropped.
/// Either way the next lookup must find the key.
#[test]
fn async_a_lookup_whose_read_raced_a_create_installs_nothing_finished_or_dropped() {
    for drop_it in [false, true] {
        runtime().block_on(async {
            let guard =
                AsyncCacheGuard::with_policy(filter(), Paused::new(), RebuildPolicy::manual());
            guard.warm_up(1_000, |_| {}).await.unwrap();
            let key = false_positives(|k| guard.may_contain(k), 1)[0];
            guard.store().hold.store(true, SeqCst);
            let mut lookup = Box::pin(guard.get(&key));
            let waker = std::task::Waker::noop();
            let mut cx = Context::from_waker(waker);
            assert!(lookup.as_mut().poll(&mut cx).is_pending());
            assert_eq!(
                guard.store().inner.gets(),
                1,
                "the lookup has read the store"
            );
            assert_eq!(guard.put(&key, &9).await.unwrap(), Written::Created);
            guard.store().released.store(true, SeqCst);
            if drop_it {
                drop(lookup);
            } else {
                assert_eq!(lookup.await.unwrap(), None);
            }
            guard.store().hold.store(false, SeqCst);
            assert_eq!(
                guard.get(&key).await.unwrap(),
                Some(9),
                "dropped: {drop_it}"
            );
        });
    }
}

/// A put future dropped during its store write: the write may land at any later time, so its
/// key's slot stops remembering. A lookup between the drop and the late landing reads
/// "absent" and must install nothing.
#[test]
fn async_a_dropped_put_disables_its_slot() {
    runtime().block_on(async {
        let guard = AsyncCacheGuard::with_policy(filter(), Paused::new(), RebuildPolicy::manual());
        guard.warm_up(1_000, |_| {}).await.unwrap();
        let key = false_positives(|k| guard.may_contain(k), 1)[0];
        guard.store().stuck_writes.store(true, SeqCst);
        let mut put = Box::pin(guard.put(&key, &3));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(put.as_mut().poll(&mut cx).is_pending());
        drop(put);
        assert_eq!(guard.stats().memo_slots_disabled, 1);
        assert_eq!(guard.get(&key).await.unwrap(), None);
        // The write lands late.
        Store::put(&guard.store().inner.rows, &key, &3).unwrap();
        assert_eq!(guard.get(&key).await.unwrap(), Some(3));
    });
}

/// Waits (yielding) until `done` holds; fails the test after 60 s.
fn wait_for(round: usize, what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "round {round}: no {what} within 60 s"
        );
        thread::yield_now();
    }
}

/// Readers replay false-positive keys while writers create them (and a rebuild runs): a
/// lookup that began after a create of its key returned must find the key.
#[test]
fn stress_replays_racing_creates_never_miss_a_created_key() {
    const KEYS: usize = 64;
    const READERS: usize = 3;
    for round in 0..5 {
        let guard =
            CacheGuard::with_policy(filter(), Arc::new(Counting::new()), RebuildPolicy::manual())
                .with_memo(8) // few slots: keys share them
                .unwrap();
        guard.warm_up(1_000, |_| {}).unwrap();
        let keys = Arc::new(false_positives(|k| guard.may_contain(k), KEYS));
        let created: Arc<Vec<AtomicBool>> =
            Arc::new((0..KEYS).map(|_| AtomicBool::new(false)).collect());
        let start = Arc::new(Barrier::new(READERS + 2));
        let done = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..READERS)
            .map(|r| {
                let (guard, keys, created, start, done) = (
                    guard.clone(),
                    Arc::clone(&keys),
                    Arc::clone(&created),
                    Arc::clone(&start),
                    Arc::clone(&done),
                );
                thread::spawn(move || {
                    start.wait();
                    let mut lookups = 0u64;
                    let mut i = r;
                    while !done.load(SeqCst) {
                        let at = i % KEYS;
                        let was_created = created[at].load(SeqCst);
                        let found = guard.get(&keys[at]).unwrap();
                        assert!(
                            !was_created || found == Some(keys[at]),
                            "round {round}: a lookup after the create of {} returned {found:?}",
                            keys[at]
                        );
                        lookups += 1;
                        i = i.wrapping_mul(31).wrapping_add(7);
                    }
                    lookups
                })
            })
            .collect();
        let writer = {
            let (guard, keys, created, start) = (
                guard.clone(),
                Arc::clone(&keys),
                Arc::clone(&created),
                Arc::clone(&start),
            );
            thread::spawn(move || {
                start.wait();
                // The creates race replays only once the memo answers them.
                wait_for(round, "a memo hit before the first create", || {
                    guard.stats().memo_hits > 0
                });
                for (at, key) in keys.iter().enumerate() {
                    for _ in 0..200 {
                        thread::yield_now();
                    }
                    assert_eq!(guard.put(key, key).unwrap(), Written::Created);
                    created[at].store(true, SeqCst);
                }
            })
        };
        let rebuilder = {
            let (guard, start, created) = (guard.clone(), Arc::clone(&start), Arc::clone(&created));
            thread::spawn(move || {
                start.wait();
                // Mid-way: a rebuild draws new hash keys, after which the keys not yet
                // created are (almost all) ruled out by the filter and no longer replayed
                // through the memo.
                wait_for(round, "half the creates before the rebuild", || {
                    created[KEYS / 2].load(SeqCst)
                });
                guard.rebuild().unwrap();
            })
        };
        writer.join().unwrap();
        rebuilder.join().unwrap();
        done.store(true, SeqCst);
        let lookups: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        for key in keys.iter() {
            assert_eq!(guard.get(key).unwrap(), Some(*key));
        }
        let stats = guard.stats();
        assert!(
            stats.memo_hits > 0 && lookups > 1_000,
            "round {round}: {lookups} lookups, {} memo hits: the race was not exercised",
            stats.memo_hits
        );
    }
}
