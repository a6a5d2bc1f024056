//! The cache guard's consistency rules, one behaviour per test, over the in-memory store and
//! fault-injecting wrappers around it. The database adapters get the same rules exercised
//! against real servers in `tests/store_*.rs`.

use std::convert::Infallible;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex, Weak};
use std::time::Duration;

use cuckoo_guard::guard::{
    AsyncCacheGuard, AsyncStore, CacheGuard, FilterRef, GuardError, MemoryStore, RebuildPolicy,
    ScanPage, Store, WarmUpProgress, Written,
};
use cuckoo_guard::{CuckooFilter, Growth};
use tokio::sync::Notify;

use crate::common;

#[cfg(feature = "tokio")]
use cuckoo_guard::guard::Blocking;

type Mem = MemoryStore<u64, u64>;

fn filter(capacity: usize) -> CuckooFilter {
    CuckooFilter::builder()
        .capacity(capacity)
        .seed(7)
        .build()
        .unwrap()
}

/// `filter` that never grows: inserts past its capacity fail.
fn fixed_filter(capacity: usize) -> CuckooFilter {
    CuckooFilter::builder()
        .capacity(capacity)
        .growth(Growth::Fixed)
        .seed(7)
        .build()
        .unwrap()
}

/// Two keys that collide in `filter`'s configuration (same fingerprint and buckets), found by
/// search with 8-bit fingerprints: the filter cannot tell them apart, which is what makes
/// wrong removals dangerous.
fn colliding_pair() -> (CuckooFilter, u64, u64) {
    let make = || {
        CuckooFilter::builder()
            .capacity(64)
            .fingerprint_bits(8)
            .seed(99)
            .build()
            .unwrap()
    };
    let probe = make();
    for a in 0..10_000u64 {
        probe.insert(&a).unwrap();
        for b in (a + 1)..(a + 20_000) {
            if probe.count(&b) == 1 {
                return (make(), a, b);
            }
        }
        probe.remove(&a);
    }
    panic!("no colliding pair found");
}

/// Where injected faults strike.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// `put` fails without writing (a definite failure).
    PutRejected,
    /// `put` writes, then reports a failure whose outcome is unknown (a lost commit reply).
    PutLostReply,
    /// `delete` fails without deleting.
    DeleteRejected,
    /// The second scan page fails (once).
    ScanSecondPage,
}

#[derive(Debug)]
struct Injected {
    outcome_unknown: bool,
}

impl fmt::Display for Injected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "injected failure (outcome unknown: {})",
            self.outcome_unknown
        )
    }
}

impl std::error::Error for Injected {}

/// Code run inside `put`, before the write is applied.
type Probe = Box<dyn Fn(&u64) + Send>;

/// A memory store with switchable faults, a call counter, and an optional probe run inside
/// `put` before the write is applied.
#[derive(Default)]
struct Faulty {
    inner: Mem,
    fault: Mutex<Option<Fault>>,
    gets: AtomicU64,
    scans: AtomicU64,
    probe: Mutex<Option<Probe>>,
}

impl Faulty {
    fn with_rows(rows: impl IntoIterator<Item = (u64, u64)>) -> Self {
        Faulty {
            inner: MemoryStore::from_rows(rows),
            ..Faulty::default()
        }
    }
    fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = Some(fault);
    }
    fn fault(&self) -> Fault {
        self.fault.lock().unwrap().unwrap_or(Fault::None)
    }
}

impl Store for Faulty {
    type Key = u64;
    type Value = u64;
    type Cursor = u64;
    type Error = Injected;

    fn get(&self, key: &u64) -> Result<Option<u64>, Injected> {
        self.gets.fetch_add(1, SeqCst);
        Ok(Store::get(&self.inner, key).unwrap_or_else(|e: Infallible| match e {}))
    }

    fn put(&self, key: &u64, value: &u64) -> Result<Written, Injected> {
        if let Some(probe) = &*self.probe.lock().unwrap() {
            probe(key);
        }
        match self.fault() {
            Fault::PutRejected => Err(Injected {
                outcome_unknown: false,
            }),
            Fault::PutLostReply => {
                Store::put(&self.inner, key, value).unwrap();
                Err(Injected {
                    outcome_unknown: true,
                })
            }
            _ => Ok(Store::put(&self.inner, key, value).unwrap()),
        }
    }

    fn delete(&self, key: &u64) -> Result<bool, Injected> {
        if self.fault() == Fault::DeleteRejected {
            return Err(Injected {
                outcome_unknown: false,
            });
        }
        Ok(Store::delete(&self.inner, key).unwrap())
    }

    fn scan_keys(
        &self,
        cursor: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, Injected> {
        let page = self.scans.fetch_add(1, SeqCst);
        if page == 1 && self.fault() == Fault::ScanSecondPage {
            *self.fault.lock().unwrap() = None;
            return Err(Injected {
                outcome_unknown: false,
            });
        }
        Ok(Store::scan_keys(&self.inner, cursor, limit).unwrap())
    }

    fn write_outcome_unknown(error: &Injected) -> bool {
        error.outcome_unknown
    }
}

fn warm(guard: &CacheGuard<impl Store<Error = impl std::error::Error>>) {
    guard.warm_up(64, |_| {}).unwrap();
}

#[test]
fn misses_are_answered_without_the_store() {
    let guard = CacheGuard::new(
        filter(10_000),
        Faulty::with_rows((0..5_000).map(|k| (k, k))),
    );
    warm(&guard);
    for k in 1_000_000..1_100_000u64 {
        assert_eq!(guard.get(&k).unwrap(), None);
    }
    let stats = guard.stats();
    let store_calls = guard.store().gets.load(SeqCst);
    assert_eq!(stats.blocked + stats.false_positives, 100_000);
    assert_eq!(
        store_calls, stats.false_positives,
        "only false positives reach the store"
    );
    assert!(
        store_calls < 100,
        "{store_calls} of 100,000 misses reached the store"
    );
    assert!(stats.observed_false_positive_rate < 0.001);
    for k in 0..5_000u64 {
        assert_eq!(guard.get(&k).unwrap(), Some(k));
    }
    assert_eq!(guard.stats().store_hits, 5_000);
}

#[test]
fn rule_1_the_filter_knows_a_key_before_the_store_write() {
    let guard = Arc::new(CacheGuard::new(filter(1_000), Faulty::default()));
    warm(&guard);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let weak: Weak<CacheGuard<Faulty>> = Arc::downgrade(&guard);
    let log = Arc::clone(&seen);
    *guard.store().probe.lock().unwrap() = Some(Box::new(move |key| {
        let guard = weak.upgrade().unwrap();
        log.lock().unwrap().push(guard.filter().contains(key));
    }));
    for k in 0..500u64 {
        guard.put(&k, &k).unwrap();
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 500);
    assert!(
        seen.iter().all(|&known| known),
        "a key reached the store before the filter"
    );
}

#[test]
fn rule_1_an_update_removes_its_extra_copy() {
    let guard = CacheGuard::new(filter(100), MemoryStore::<u64, u64>::new());
    warm(&guard);
    assert_eq!(guard.put(&1, &10).unwrap(), Written::Created);
    for v in 0..20 {
        assert_eq!(guard.put(&1, &v).unwrap(), Written::Updated);
    }
    assert_eq!(guard.filter().count(&1), 1);
    assert_eq!(guard.filter().len(), 1);
    let stats = guard.stats();
    assert_eq!((stats.creates, stats.updates), (1, 20));
}

#[test]
fn rule_1_a_definite_store_failure_removes_the_copy() {
    let guard = CacheGuard::new(filter(100), Faulty::default());
    warm(&guard);
    guard.store().set(Fault::PutRejected);
    assert!(matches!(guard.put(&5, &5), Err(GuardError::Store(_))));
    assert_eq!(guard.filter().len(), 0, "the failed create's copy stayed");
    assert!(!guard.may_contain(&5));
    assert_eq!(guard.stats().stale_copies, 0);
}

#[test]
fn rule_4_a_failure_that_may_have_been_applied_keeps_the_copy() {
    let guard = CacheGuard::new(filter(100), Faulty::default());
    warm(&guard);
    guard.store().set(Fault::PutLostReply);
    assert!(matches!(guard.put(&5, &50), Err(GuardError::Store(_))));
    // The write did land: the filter must still report the key.
    assert_eq!(
        guard.get(&5).unwrap(),
        Some(50),
        "false negative after a lost reply"
    );
    assert_eq!(guard.stats().stale_copies, 1);
}

#[test]
fn rule_2_a_delete_removes_only_after_the_store_confirms() {
    let guard = CacheGuard::new(filter(100), Faulty::default());
    warm(&guard);
    guard.put(&3, &3).unwrap();
    guard.store().set(Fault::DeleteRejected);
    assert!(guard.delete(&3).is_err());
    assert_eq!(
        guard.get(&3).unwrap(),
        Some(3),
        "a failed delete removed the filter copy"
    );
    guard.store().set(Fault::None);
    assert!(guard.delete(&3).unwrap());
    assert!(!guard.may_contain(&3));
    assert!(!guard.delete(&3).unwrap());
    assert_eq!(guard.filter().len(), 0);
}

#[test]
fn rule_2_deleting_an_absent_key_never_removes_a_colliding_key() {
    let (filter, present, absent) = colliding_pair();
    let guard = CacheGuard::new(filter, MemoryStore::<u64, u64>::new());
    warm(&guard);
    guard.put(&present, &1).unwrap();
    // The store says `absent` was never there, so its "copy" (which is `present`'s) stays.
    assert!(!guard.delete(&absent).unwrap());
    assert_eq!(
        guard.get(&present).unwrap(),
        Some(1),
        "false negative for a colliding key"
    );
}

#[test]
fn rule_3_a_create_is_inserted_even_when_the_filter_already_says_yes() {
    let (filter, first, second) = colliding_pair();
    let guard = CacheGuard::new(filter, MemoryStore::<u64, u64>::new());
    warm(&guard);
    guard.put(&first, &1).unwrap();
    assert!(guard.may_contain(&second), "the pair collides");
    guard.put(&second, &2).unwrap();
    assert_eq!(
        guard.filter().count(&second),
        2,
        "the second create was skipped"
    );
    assert!(guard.delete(&first).unwrap());
    assert_eq!(
        guard.get(&second).unwrap(),
        Some(2),
        "false negative after the other key's delete"
    );
}

#[test]
fn rule_2_a_delete_during_warm_up_never_removes_an_unscanned_collision() {
    let (filter, scanned_first, scanned_later) = {
        let (f, a, b) = colliding_pair();
        (f, a.min(b), a.max(b))
    };
    // Page 1 holds `scanned_first` (and fillers below it); `scanned_later` comes in a later page.
    let fillers = (0..scanned_first.min(10)).map(|k| (k, k));
    let store = MemoryStore::from_rows(fillers.chain([(scanned_first, 1), (scanned_later, 2)]));
    let guard = CacheGuard::new(filter, store);
    let mut deleted = false;
    guard
        .warm_up(1, |progress| {
            if progress.keys_loaded == 1 + scanned_first.min(10) && !deleted {
                // `scanned_first` is in the filter; `scanned_later` is not yet.
                assert!(guard.delete(&scanned_later).unwrap());
                deleted = true;
            }
        })
        .unwrap();
    assert!(deleted);
    assert_eq!(
        guard.get(&scanned_first).unwrap(),
        Some(1),
        "warm-up delete hit a collision"
    );
    assert_eq!(guard.stats().stale_copies, 1);
}

#[test]
fn lookups_during_warm_up_go_to_the_store() {
    let guard = CacheGuard::new(filter(100), Faulty::with_rows([(1, 1)]));
    assert!(guard.is_warming());
    assert_eq!(guard.get(&1).unwrap(), Some(1));
    assert_eq!(guard.get(&2).unwrap(), None);
    let stats = guard.stats();
    assert_eq!(
        (
            stats.passed_while_warming,
            stats.blocked,
            stats.false_positives
        ),
        (2, 0, 0)
    );
    assert_eq!(guard.store().gets.load(SeqCst), 2);
}

/// The warm-up of either guard over a [`Faulty`] store, so one test covers both.
trait Warming {
    type Error: fmt::Debug;
    fn warm(
        &self,
        page_size: usize,
        progress: impl FnMut(WarmUpProgress) + Send,
    ) -> Result<WarmUpProgress, GuardError<Self::Error>>;
    fn warming(&self) -> bool;
    fn guarded(&self) -> (FilterRef, &Faulty);
}

impl Warming for CacheGuard<Faulty> {
    type Error = Injected;
    fn warm(
        &self,
        page_size: usize,
        progress: impl FnMut(WarmUpProgress) + Send,
    ) -> Result<WarmUpProgress, GuardError<Injected>> {
        self.warm_up(page_size, progress)
    }
    fn warming(&self) -> bool {
        self.is_warming()
    }
    fn guarded(&self) -> (FilterRef, &Faulty) {
        (self.filter(), self.store())
    }
}

#[cfg(feature = "tokio")]
impl Warming for AsyncCacheGuard<Blocking<Faulty>> {
    type Error = cuckoo_guard::guard::BlockingError<Injected>;
    fn warm(
        &self,
        page_size: usize,
        progress: impl FnMut(WarmUpProgress) + Send,
    ) -> Result<WarmUpProgress, GuardError<Self::Error>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(self.warm_up(page_size, progress))
    }
    fn warming(&self) -> bool {
        self.is_warming()
    }
    fn guarded(&self) -> (FilterRef, &Faulty) {
        (self.filter(), self.store().get_ref())
    }
}

/// 450 rows, scanned in pages of 100 that fail on the second page once.
fn resumes_after_a_scan_error(guard: &impl Warming) {
    let (filter, store) = guard.guarded();
    store.set(Fault::ScanSecondPage);
    let mut pages = 0;
    assert!(matches!(
        guard.warm(100, |_| pages += 1),
        Err(GuardError::Store(_))
    ));
    assert_eq!(pages, 1);
    assert!(
        guard.warming(),
        "a failed warm-up must keep passing lookups through"
    );
    let mut reported = Vec::new();
    let done = guard.warm(100, |p| reported.push(p.keys_loaded)).unwrap();
    assert_eq!(
        reported,
        [200, 300, 400, 450],
        "the resume did not start at page 2"
    );
    assert_eq!((done.keys_loaded, done.pages), (450, 5));
    assert!(!guard.warming());
    assert_eq!(filter.len(), 450, "the first page was loaded twice");
    assert!((0..450).all(|k| filter.contains(&k)));
    // A further call has nothing to do.
    assert_eq!(
        guard.warm(100, |_| panic!("no page to load")).unwrap(),
        done
    );
    assert_eq!(store.scans.load(SeqCst), 6);
}

#[test]
fn an_interrupted_warm_up_resumes_where_it_stopped() {
    let rows = || Faulty::with_rows((0..450).map(|k| (k, k)));
    let guard = CacheGuard::new(filter(1_000), rows());
    resumes_after_a_scan_error(&guard);
    assert_eq!(guard.get(&449).unwrap(), Some(449));
    #[cfg(feature = "tokio")]
    resumes_after_a_scan_error(&AsyncCacheGuard::new(filter(1_000), Blocking::new(rows())));
}

/// 450 rows in pages of 100; the progress callback panics after the second page.
fn resumes_after_a_panic_in_the_progress_callback(guard: &impl Warming) {
    let (filter, _) = guard.guarded();
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        guard.warm(100, |p| assert!(p.pages < 2, "callback fails"))
    }));
    assert!(panicked.is_err());
    assert!(guard.warming());
    assert_eq!(filter.len(), 200);
    let mut reported = Vec::new();
    let done = guard.warm(100, |p| reported.push(p.pages)).unwrap();
    assert_eq!(reported, [3, 4, 5], "the resume did not start after page 2");
    assert_eq!(done.keys_loaded, 450);
    assert_eq!(filter.len(), 450, "a page was loaded twice");
    assert!(!guard.warming());
}

#[test]
fn a_panicking_progress_callback_stops_the_warm_up_and_a_retry_resumes() {
    let rows = || Faulty::with_rows((0..450).map(|k| (k, k)));
    resumes_after_a_panic_in_the_progress_callback(&CacheGuard::new(filter(1_000), rows()));
    #[cfg(feature = "tokio")]
    resumes_after_a_panic_in_the_progress_callback(&AsyncCacheGuard::new(
        filter(1_000),
        Blocking::new(rows()),
    ));
}

/// A memory store whose scan number `park_at` (counting from 0) waits for `release`, after
/// telling `parked`: a store call that is still running when the test acts.
struct Parking {
    inner: Mem,
    scans: AtomicU64,
    park_at: u64,
    parked: Notify,
    release: Notify,
}

impl Parking {
    fn new(rows: u64, park_at: u64) -> Self {
        Parking {
            inner: MemoryStore::from_rows((0..rows).map(|k| (k, k))),
            scans: AtomicU64::new(0),
            park_at,
            parked: Notify::new(),
            release: Notify::new(),
        }
    }
}

impl AsyncStore for Parking {
    type Key = u64;
    type Value = u64;
    type Cursor = u64;
    type Error = Infallible;

    async fn get(&self, key: &u64) -> Result<Option<u64>, Infallible> {
        AsyncStore::get(&self.inner, key).await
    }
    async fn put(&self, key: &u64, value: &u64) -> Result<Written, Infallible> {
        AsyncStore::put(&self.inner, key, value).await
    }
    async fn delete(&self, key: &u64) -> Result<bool, Infallible> {
        AsyncStore::delete(&self.inner, key).await
    }
    async fn scan_keys(
        &self,
        cursor: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, Infallible> {
        if self.scans.fetch_add(1, SeqCst) == self.park_at {
            self.parked.notify_one();
            self.release.notified().await;
        }
        AsyncStore::scan_keys(&self.inner, cursor, limit).await
    }
}

#[test]
fn a_cancelled_async_warm_up_resumes_after_the_last_page_loaded() {
    common::runtime().block_on(async {
        // 950 rows in pages of 100; the fourth scan never returns.
        let guard = AsyncCacheGuard::new(filter(2_000), Parking::new(950, 3));
        let mut first = Vec::new();
        let warm_up = guard.warm_up(100, |p| first.push(p.pages));
        tokio::select! {
            _ = warm_up => panic!("the parked scan returned"),
            () = guard.store().parked.notified() => {} // drops the warm-up's future
        }
        assert_eq!(first, [1, 2, 3]);
        assert!(guard.is_warming());
        assert_eq!(guard.filter().len(), 300);
        let mut second = Vec::new();
        let done = guard.warm_up(100, |p| second.push(p.pages)).await.unwrap();
        assert_eq!(
            second,
            (4..=10).collect::<Vec<_>>(),
            "did not resume at page 4"
        );
        assert_eq!((done.keys_loaded, done.pages), (950, 10));
        assert!(!guard.is_warming());
        assert_eq!(guard.filter().len(), 950, "a page was loaded twice");
        assert!((0..950).all(|k| guard.may_contain(&k)));
    });
}

#[test]
fn a_second_concurrent_async_warm_up_is_refused() {
    common::runtime().block_on(async {
        let guard = Arc::new(AsyncCacheGuard::new(filter(2_000), Parking::new(1_000, 2)));
        // Spawned, so the warm-up's future must be `Send`.
        let first = tokio::spawn({
            let guard = Arc::clone(&guard);
            async move { guard.warm_up(100, |_| {}).await }
        });
        // The first warm-up is parked in its third scan.
        guard.store().parked.notified().await;
        assert!(matches!(
            guard.warm_up(100, |_| panic!("no page to load")).await,
            Err(GuardError::WarmUpRunning)
        ));
        guard.store().release.notify_one();
        let done = first.await.unwrap().unwrap();
        assert_eq!(done.keys_loaded, 1_000);
        assert_eq!(guard.warm_up(100, |_| {}).await.unwrap(), done);
        assert_eq!(guard.filter().len(), 1_000);
    });
}

#[test]
fn a_warm_up_from_another_thread_is_refused_while_one_runs() {
    let guard = CacheGuard::new(
        filter(1_000),
        MemoryStore::from_rows((0..450u64).map(|k| (k, k))),
    );
    let (to_main, from_warm_up) = mpsc::channel();
    let (to_warm_up, from_main) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let guard = &guard;
        let running = scope.spawn(move || {
            guard.warm_up(100, |p| {
                if p.pages == 2 {
                    to_main.send(()).unwrap();
                    from_main.recv().unwrap();
                }
            })
        });
        // The warm-up is inside its callback, between pages 2 and 3.
        from_warm_up.recv().unwrap();
        assert!(matches!(
            guard.warm_up(100, |_| panic!("no page to load")),
            Err(GuardError::WarmUpRunning)
        ));
        assert!(guard.is_warming());
        to_warm_up.send(()).unwrap();
        let done = running.join().unwrap().unwrap();
        assert_eq!((done.keys_loaded, done.pages), (450, 5));
    });
    assert!(!guard.is_warming());
    assert_eq!(guard.filter().len(), 450);
}

#[test]
fn a_growing_filter_takes_any_number_of_creates() {
    // No rebuilds: growth alone keeps every create.
    let guard = CacheGuard::with_policy(
        CuckooFilter::with_capacity(100),
        MemoryStore::<u64, u64>::new(),
        RebuildPolicy::manual(),
    );
    warm(&guard);
    for k in 0..20_000 {
        guard.put(&k, &k).expect("a create was refused");
    }
    let stats = guard.stats();
    assert_eq!(stats.creates, 20_000);
    assert_eq!(stats.writes_refused, 0);
    assert!(stats.filter_growth_steps >= 7, "{stats:?}");
    assert!((0..20_000).all(|k| guard.get(&k).unwrap() == Some(k)));
    assert!((20_000..40_000).all(|k| guard.get(&k).unwrap().is_none()));
    assert!(
        guard.stats().blocked > 19_000,
        "the grown filter still blocks absent keys"
    );
}

#[test]
fn a_full_filter_refuses_creates_before_touching_the_store() {
    let guard = CacheGuard::new(fixed_filter(50), MemoryStore::<u64, u64>::new());
    warm(&guard);
    let mut k = 0;
    let error = loop {
        match guard.put(&k, &k) {
            Ok(_) => k += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(error, GuardError::FilterFull(_)), "{error}");
    assert!(error.to_string().contains("store was not changed"));
    assert_eq!(
        guard.store().len(),
        k as usize,
        "the refused key reached the store"
    );
    assert_eq!(guard.stats().writes_refused, 1);
    // Updates of existing keys still need a (temporary) slot, so they are refused too; keys
    // already stored stay readable.
    assert!((0..k).all(|key| guard.get(&key).unwrap() == Some(key)));
}

#[test]
fn a_warm_up_larger_than_the_filter_fails_and_keeps_passing_through() {
    let guard = CacheGuard::new(
        fixed_filter(10),
        MemoryStore::from_rows((0..1_000u64).map(|k| (k, k))),
    );
    assert!(matches!(
        guard.warm_up(100, |_| {}),
        Err(GuardError::FilterFull(_))
    ));
    assert!(guard.is_warming());
    assert!((0..1_000).all(|k| guard.get(&k).unwrap() == Some(k)));
}

#[test]
fn a_second_concurrent_warm_up_is_refused() {
    let guard = CacheGuard::new(
        filter(100),
        MemoryStore::from_rows((0..10u64).map(|k| (k, k))),
    );
    let (started, first_running) = mpsc::channel();
    let (answered, second_answered) = mpsc::channel();
    let second = std::thread::scope(|s| {
        let guard = &guard;
        // The first warm-up holds its first page until the second, on another thread, was
        // answered.
        s.spawn(move || {
            let mut held = false;
            guard
                .warm_up(1, |_| {
                    if !held {
                        held = true;
                        started.send(()).unwrap();
                        second_answered
                            .recv_timeout(Duration::from_secs(30))
                            .expect("the second warm-up answers while the first runs");
                    }
                })
                .unwrap();
        });
        let second = s.spawn(move || {
            first_running.recv().unwrap();
            let second = guard.warm_up(1, |_| {}).map(|_| ());
            answered.send(()).unwrap();
            second
        });
        second.join().unwrap()
    });
    assert!(
        matches!(second, Err(GuardError::WarmUpRunning)),
        "{second:?}"
    );
    assert!(!guard.is_warming(), "the first warm-up finished");
}

/// Writers create and delete, readers look up; a lookup of a key whose create returned
/// before the lookup began (and whose delete had not begun) must find it.
#[test]
fn concurrent_creates_deletes_and_lookups_lose_nothing() {
    let guard = CacheGuard::new(filter(20_000), MemoryStore::<u64, u64>::new());
    let make = common::Make {
        key: |k| k,
        value: |k| k,
    };
    let (checked, present) = common::guard_concurrency_sync(&guard, make, 20_000, 200_000);
    assert!(checked > 10_000, "too few lookups checked: {checked}");
    assert_eq!(guard.store().len(), present);
    assert_eq!(
        guard.filter().len(),
        present,
        "filter length differs from the row count"
    );
}

#[test]
fn stats_add_up() {
    let guard = CacheGuard::new(
        filter(1_000),
        MemoryStore::from_rows((0..100u64).map(|k| (k, k))),
    );
    guard.get(&1).unwrap(); // warming
    warm(&guard);
    for k in 0..200u64 {
        guard.get(&k).unwrap();
    }
    let s = guard.stats();
    assert_eq!(s.lookups, 201);
    assert_eq!(s.lookups, s.blocked + s.passed);
    assert_eq!(
        s.passed,
        s.store_hits + s.false_positives + s.passed_while_warming - 1
    );
    assert_eq!(s.store_hits, 101);
    assert_eq!(s.filter_len, 100);
    assert!(s.configured_false_positive_rate > 0.0002 && s.configured_false_positive_rate < 0.0003);
    assert!(s.expected_false_positive_rate < s.configured_false_positive_rate);
    assert!(!s.warming);
}

#[test]
fn the_async_guard_follows_the_same_rules() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = MemoryStore::from_rows((0..1_000u64).map(|k| (k, k)));
        let guard = Arc::new(AsyncCacheGuard::new(filter(5_000), store));
        assert_eq!(guard.get(&10).await.unwrap(), Some(10)); // warming: passes through
        guard.warm_up(100, |_| {}).await.unwrap();
        assert!(!guard.is_warming());
        assert_eq!(guard.get(&1_000_000).await.unwrap(), None);
        assert_eq!(guard.put(&5_000, &1).await.unwrap(), Written::Created);
        assert_eq!(guard.put(&5_000, &2).await.unwrap(), Written::Updated);
        assert_eq!(guard.filter().count(&5_000), 1);
        assert!(guard.delete(&5_000).await.unwrap());
        assert!(!guard.may_contain(&5_000));
        // Tasks on both workers; every created key must be found afterwards.
        let tasks: Vec<_> = (0..4u64)
            .map(|t| {
                let guard = Arc::clone(&guard);
                tokio::spawn(async move {
                    for k in (10_000 + t * 500)..(10_500 + t * 500) {
                        guard.put(&k, &k).await.unwrap();
                        assert_eq!(guard.get(&k).await.unwrap(), Some(k));
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(guard.filter().len(), 3_000);
        let stats = guard.stats();
        assert_eq!(stats.creates, 2_001);
        assert_eq!(stats.passed_while_warming, 1);
    });
}

#[test]
fn guard_errors_display_and_chain() {
    let guard = CacheGuard::new(filter(10), Faulty::default());
    guard.store().set(Fault::PutRejected);
    let error = guard.put(&1, &1).unwrap_err();
    assert!(error
        .to_string()
        .starts_with("store error: injected failure"));
    assert!(std::error::Error::source(&error).is_some());
}
