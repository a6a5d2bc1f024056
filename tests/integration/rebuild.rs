//! The guard's online rebuild: what it replaces, what it keeps, how it fails, and that no key
//! goes missing while creates, deletes and lookups run through it.
// The tests build with the dev-dependencies' newer toolchain, not the library's MSRV.
#![allow(clippy::incompatible_msrv)]

use crate::common::{self, poll_once};

use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cuckoo_guard::guard::{
    AsyncCacheGuard, AsyncStore, CacheGuard, GuardError, MemoryStore, RebuildPolicy, RebuildReason,
    ScanPage, Store, Written,
};
use cuckoo_guard::{CuckooFilter, Growth};

type Mem = MemoryStore<u64, u64>;

const U64_ROWS: common::Make<u64, u64> = common::Make {
    key: |k| k,
    value: |k| k,
};

fn manual(capacity: usize, store: Mem) -> CacheGuard<Mem> {
    CacheGuard::with_policy(
        CuckooFilter::with_capacity(capacity),
        store,
        RebuildPolicy::manual(),
    )
}

/// Waits until no automatic rebuild runs (they run on their own threads).
fn settle<St: Store>(guard: &CacheGuard<St>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while guard.stats().rebuilding {
        assert!(Instant::now() < deadline, "a rebuild ran for 30 seconds");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `max_tables(3)`: the filter may grow twice (a negative then reads 3 tables); the third
/// growth step starts a rebuild, which brings back one table.
#[test]
fn a_guard_rebuilds_once_negatives_read_more_tables_than_its_policy_allows() {
    let policy = RebuildPolicy::default()
        .max_tables(3)
        .unwrap()
        .load_threshold(1.0)
        .unwrap()
        .max_overflow_share(1.0)
        .unwrap();
    let guard = CacheGuard::with_policy(CuckooFilter::with_capacity(100), Mem::new(), policy);
    guard.warm_up(100, |_| {}).unwrap();
    let mut k = 0u64;
    while guard.stats().rebuilds == 0 {
        let before = guard.stats().filter_growth_steps;
        assert!(before <= 2, "grew to {before} steps without a rebuild");
        guard.put(&k, &k).unwrap();
        settle(&guard);
        k += 1;
        assert!(k < 100_000, "no rebuild after {k} creates");
    }
    let stats = guard.stats();
    let report = stats.last_rebuild.unwrap();
    assert_eq!(report.reason, RebuildReason::Growth);
    assert_eq!(report.growth_steps_before, 3);
    assert_eq!(stats.filter_growth_steps, 0);
    assert!((0..k).all(|key| guard.may_contain(&key)));
}

#[test]
fn a_rebuild_needs_a_warm_guard() {
    let guard = manual(100, Mem::new());
    assert!(matches!(guard.rebuild(), Err(GuardError::Warming)));
    guard.warm_up(10, |_| {}).unwrap();
    assert!(guard.rebuild().is_ok());
}

#[test]
fn a_rebuild_fits_the_store_and_drops_grown_tables_and_stale_copies() {
    let guard = manual(100, Mem::new());
    // While warming, creates insert and deletes leave their copies (stale).
    for k in 0..2_000u64 {
        guard.put(&k, &k).unwrap();
    }
    for k in 0..1_000u64 {
        assert!(guard.delete(&k).unwrap());
    }
    guard.warm_up(100, |_| {}).unwrap();
    let before = guard.stats();
    assert_eq!(before.stale_copies, 1_000);
    assert!(before.filter_growth_steps > 0, "{before:?}");
    // 2,000 creates, and the warm-up's 1,000 scanned keys again.
    assert_eq!(before.filter_len, 3_000);

    let report = guard.rebuild().unwrap();
    assert_eq!(report.reason, RebuildReason::Requested);
    assert_eq!(report.keys_scanned, 1_000);
    assert_eq!(report.pages, 2); // the policy's page of 1,000 keys, then an empty last one
    assert_eq!((report.len_before, report.len_after), (3_000, 1_000));
    assert_eq!(report.growth_steps_before, before.filter_growth_steps);
    let after = guard.stats();
    assert_eq!(after.filter_len, 1_000);
    assert_eq!(after.filter_growth_steps, 0);
    assert_eq!(after.growth_steps, before.filter_growth_steps as u64);
    assert_eq!(after.rebuilds, 1);
    assert_eq!(after.last_rebuild, Some(report));
    assert!(after.filter_capacity >= 1_500, "{after:?}");
    assert!((1_000..2_000).all(|k| guard.may_contain(&k)));
    let blocked = (0..1_000).filter(|k| !guard.may_contain(k)).count();
    assert!(blocked > 990, "deleted keys are blocked again: {blocked}");
}

#[test]
fn a_rebuild_keeps_the_smallest_capacity_it_was_given() {
    let guard = manual(10_000, MemoryStore::from_rows((0..10u64).map(|k| (k, k))));
    guard.warm_up(100, |_| {}).unwrap();
    let capacity = guard.stats().filter_capacity;
    guard.rebuild().unwrap();
    assert_eq!(guard.stats().filter_capacity, capacity);
}

#[test]
fn a_rebuild_of_a_filter_built_for_far_more_keys_allocates_for_the_keys_it_holds() {
    let guard = manual(
        20_000_000,
        MemoryStore::from_rows((0..1_000u64).map(|k| (k, k))),
    );
    guard.warm_up(100, |_| {}).unwrap();
    let before = guard.stats().filter_memory_bytes;
    let report = guard.rebuild().unwrap();
    // 1,000 keys at the default headroom of 1.5: at most 8 x 1,500 + 65,536 keys of floor.
    let bound = CuckooFilter::with_capacity(8 * 1_500 + 65_536);
    assert!(report.capacity_after <= bound.capacity(), "{report:?}");
    let after = guard.stats().filter_memory_bytes;
    assert!(
        after <= bound.memory_usage() && after * 100 < before,
        "{before} bytes before, {after} after the rebuild"
    );
    assert!((0..1_000u64).all(|k| guard.may_contain(&k)));
}

/// A store whose scans can be made to fail, and whose puts can be held back: the write lands
/// only when the test says so, long after the put's future was dropped.
#[derive(Default)]
struct Scripted {
    inner: Mem,
    fail_scans: AtomicBool,
    scans: AtomicU64,
    held_back: Mutex<Vec<(u64, u64)>>,
    hold_puts: AtomicBool,
}

#[derive(Debug)]
struct ScanFailed;

impl fmt::Display for ScanFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("scan failed (injected)")
    }
}

impl std::error::Error for ScanFailed {}

fn infallible<T>(result: Result<T, Infallible>) -> T {
    result.unwrap_or_else(|e| match e {})
}

impl Store for Scripted {
    type Key = u64;
    type Value = u64;
    type Cursor = u64;
    type Error = ScanFailed;

    fn get(&self, key: &u64) -> Result<Option<u64>, ScanFailed> {
        Ok(infallible(Store::get(&self.inner, key)))
    }
    fn put(&self, key: &u64, value: &u64) -> Result<Written, ScanFailed> {
        Ok(infallible(Store::put(&self.inner, key, value)))
    }
    fn delete(&self, key: &u64) -> Result<bool, ScanFailed> {
        Ok(infallible(Store::delete(&self.inner, key)))
    }
    fn scan_keys(
        &self,
        cursor: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, ScanFailed> {
        self.scans.fetch_add(1, SeqCst);
        if self.fail_scans.load(SeqCst) {
            return Err(ScanFailed);
        }
        Ok(infallible(Store::scan_keys(&self.inner, cursor, limit)))
    }
}

impl AsyncStore for Scripted {
    type Key = u64;
    type Value = u64;
    type Cursor = u64;
    type Error = ScanFailed;

    async fn get(&self, key: &u64) -> Result<Option<u64>, ScanFailed> {
        Store::get(self, key)
    }
    async fn put(&self, key: &u64, value: &u64) -> Result<Written, ScanFailed> {
        if self.hold_puts.load(SeqCst) {
            // The write is on its way (queued on a connection, say) and lands later; this
            // call never returns.
            self.held_back.lock().unwrap().push((*key, *value));
            std::future::pending::<()>().await;
        }
        Store::put(self, key, value)
    }
    async fn delete(&self, key: &u64) -> Result<bool, ScanFailed> {
        Store::delete(self, key)
    }
    async fn scan_keys(
        &self,
        cursor: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, ScanFailed> {
        Store::scan_keys(self, cursor, limit)
    }
}

#[test]
fn a_failed_rebuild_keeps_the_current_filter_and_says_why() {
    let store = Scripted {
        inner: MemoryStore::from_rows((0..500u64).map(|k| (k, k))),
        ..Scripted::default()
    };
    let guard = CacheGuard::with_policy(
        CuckooFilter::with_capacity(1_000),
        store,
        RebuildPolicy::manual(),
    );
    guard.warm_up(100, |_| {}).unwrap();
    guard.store().fail_scans.store(true, SeqCst);
    assert!(matches!(
        guard.rebuild(),
        Err(GuardError::Store(ScanFailed))
    ));
    let stats = guard.stats();
    assert_eq!((stats.rebuilds, stats.rebuilds_failed), (0, 1));
    assert_eq!(
        stats.last_rebuild_error.as_deref(),
        Some("scan failed (injected)")
    );
    assert!(!stats.rebuilding);
    assert_eq!(stats.filter_len, 500);
    // Writes during and after the failure are kept; the next rebuild works.
    guard.put(&1_000, &1).unwrap();
    guard.store().fail_scans.store(false, SeqCst);
    let report = guard.rebuild().unwrap();
    assert_eq!(report.keys_scanned, 501);
    assert!((0..500).chain([1_000]).all(|k| guard.may_contain(&k)));
}

#[test]
fn a_write_that_lands_after_its_future_was_dropped_survives_a_rebuild() {
    let guard = AsyncCacheGuard::with_policy(
        CuckooFilter::with_capacity(1_000),
        Scripted::default(),
        RebuildPolicy::manual(),
    );
    assert!(poll_once(guard.warm_up(100, |_| {})).is_some());
    guard.store().hold_puts.store(true, SeqCst);
    // The caller gives up on the put (a timeout, a closed connection): its future is dropped
    // while the write is still on its way.
    assert!(poll_once(guard.put(&7, &7)).is_none());
    assert_eq!(guard.stats().orphaned_writes, 1);
    // A rebuild scans a store that does not hold 7 yet ...
    let report = poll_once(guard.rebuild()).unwrap().unwrap();
    assert_eq!(report.keys_scanned, 0);
    // ... and then the write lands.
    let (key, value) = guard.store().held_back.lock().unwrap()[0];
    Store::put(&guard.store().inner, &key, &value).unwrap();
    assert!(guard.may_contain(&7), "the orphaned write's key was lost");
    assert_eq!(poll_once(guard.get(&7)).unwrap().unwrap(), Some(7));
}

/// What a filter's hasher makes of one value: equal for equal hash keys.
fn probe<H: std::hash::BuildHasher>(filter: &CuckooFilter<H>) -> u64 {
    filter.hasher().hash_one(0x6b65_7973_u64)
}

#[test]
fn a_rebuild_draws_fresh_hash_keys_and_keeps_every_key_and_orphan() {
    let guard = AsyncCacheGuard::with_policy(
        CuckooFilter::with_capacity(1_000),
        Scripted {
            inner: MemoryStore::from_rows((0..500u64).map(|k| (k, k))),
            ..Scripted::default()
        },
        RebuildPolicy::manual(),
    );
    assert!(poll_once(guard.warm_up(100, |_| {})).is_some());
    // An orphan recorded under the first filter's keys, whose write lands after the scans.
    guard.store().hold_puts.store(true, SeqCst);
    assert!(poll_once(guard.put(&7_000, &7)).is_none());
    assert_eq!(guard.stats().orphaned_writes, 1);
    let mut seen = vec![probe(&guard.filter())];
    for _ in 0..2 {
        poll_once(guard.rebuild()).unwrap().unwrap();
        let keys = probe(&guard.filter());
        assert!(!seen.contains(&keys), "a rebuild kept hash keys");
        seen.push(keys);
        assert!((0..500).chain([7_000]).all(|k| guard.may_contain(&k)));
    }
    let (key, value) = guard.store().held_back.lock().unwrap()[0];
    Store::put(&guard.store().inner, &key, &value).unwrap();
    assert_eq!(poll_once(guard.get(&7_000)).unwrap().unwrap(), Some(7));
}

#[test]
fn a_seeded_filter_is_rekeyed_and_a_callers_hasher_kept() {
    let rows = || MemoryStore::from_rows((0..300u64).map(|k| (k, k)));
    let seeded = CuckooFilter::builder()
        .capacity(500)
        .seed(5)
        .build()
        .unwrap();
    let guard = CacheGuard::with_policy(seeded, rows(), RebuildPolicy::manual());
    guard.warm_up(100, |_| {}).unwrap();
    let before = probe(&guard.filter());
    guard.rebuild().unwrap();
    assert_ne!(
        probe(&guard.filter()),
        before,
        "the seed's keys outlived a rebuild"
    );
    assert!((0..300).all(|k| guard.may_contain(&k)));

    let own = ahash::RandomState::with_seeds(1, 2, 3, 4);
    let filter = CuckooFilter::builder()
        .capacity(500)
        .hasher(own)
        .build()
        .unwrap();
    let guard = CacheGuard::with_policy(filter, rows(), RebuildPolicy::manual());
    guard.warm_up(100, |_| {}).unwrap();
    let before = probe(&guard.filter());
    guard.rebuild().unwrap();
    assert_eq!(probe(&guard.filter()), before, "a caller's hasher is kept");
    assert!((0..300).all(|k| guard.may_contain(&k)));
}

#[test]
fn one_rebuild_at_a_time() {
    let store = Scripted {
        inner: MemoryStore::from_rows((0..100u64).map(|k| (k, k))),
        ..Scripted::default()
    };
    let guard = CacheGuard::with_policy(
        CuckooFilter::with_capacity(1_000),
        store,
        RebuildPolicy::manual().page_size(1).unwrap(),
    );
    guard.warm_up(100, |_| {}).unwrap();
    let refused = AtomicU64::new(0);
    let finished = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..20 {
                    match guard.rebuild() {
                        Ok(report) => {
                            assert_eq!(report.keys_scanned, 100);
                            finished.fetch_add(1, SeqCst);
                        }
                        Err(GuardError::RebuildRunning) => {
                            refused.fetch_add(1, SeqCst);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    let stats = guard.stats();
    assert_eq!(stats.rebuilds, finished.load(SeqCst));
    assert_eq!(finished.load(SeqCst) + refused.load(SeqCst), 40);
    // The warm-up scans 2 pages, each rebuild 101 pages of one key (the last is empty).
    assert_eq!(guard.store().scans.load(SeqCst), 2 + 101 * stats.rebuilds);
}

#[test]
fn automatic_rebuilds_fit_a_guard_that_started_far_too_small() {
    let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), Mem::new());
    guard.warm_up(100, |_| {}).unwrap();
    for k in 0..200_000u64 {
        guard.put(&k, &k).expect("a create was refused");
    }
    settle(&guard);
    let stats = guard.stats();
    assert_eq!(stats.writes_refused, 0);
    assert!(stats.rebuilds >= 1, "{stats:?}");
    assert!(stats.growth_steps >= 1, "{stats:?}");
    assert!((0..200_000).all(|k| guard.may_contain(&k)));
    let blocked = (200_000..300_000u64)
        .filter(|k| !guard.may_contain(k))
        .count();
    assert!(blocked > 99_000, "{blocked} of 100,000 absent keys blocked");
}

#[test]
fn a_full_filter_that_may_not_grow_is_rebuilt_before_it_refuses() {
    // Rebuilt at 90% load into room for 1.5 times its keys, the filter never fills.
    let filter = CuckooFilter::builder()
        .capacity(1_000)
        .growth(Growth::Fixed)
        .build()
        .unwrap();
    let guard = CacheGuard::new(filter, Mem::new());
    guard.warm_up(100, |_| {}).unwrap();
    let mut refused = 0;
    for k in 0..50_000u64 {
        match guard.put(&k, &k) {
            Ok(_) => {}
            Err(GuardError::FilterFull(_)) => {
                // The rebuild was not done in time; it is on its way.
                refused += 1;
                settle(&guard);
                guard.put(&k, &k).unwrap();
            }
            Err(e) => panic!("{e}"),
        }
    }
    settle(&guard);
    let stats = guard.stats();
    assert!(stats.rebuilds >= 5, "{stats:?}");
    assert_eq!(stats.writes_refused, refused);
    assert!((0..50_000).all(|k| guard.may_contain(&k)));
}

#[test]
fn async_automatic_rebuilds_run_as_tokio_tasks() {
    let runtime = common::runtime();
    runtime.block_on(async {
        let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000), Mem::new());
        guard.warm_up(100, |_| {}).await.unwrap();
        for k in 0..100_000u64 {
            guard.put(&k, &k).await.expect("a create was refused");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while guard.stats().rebuilding || guard.stats().rebuilds == 0 {
            assert!(Instant::now() < deadline, "{:?}", guard.stats());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let stats = guard.stats();
        assert_eq!(stats.writes_refused, 0);
        for k in 0..100_000u64 {
            assert_eq!(guard.get(&k).await.unwrap(), Some(k));
        }
    });
}

#[test]
fn no_false_negatives_while_rebuilds_run_back_to_back() {
    let guard = CacheGuard::with_policy(
        CuckooFilter::with_capacity(1_000),
        Mem::new(),
        RebuildPolicy::manual().page_size(64).unwrap(),
    );
    let stop = common::Stop::new("back-to-back rebuilds", Duration::from_secs(120));
    let (checked, present) = std::thread::scope(|s| {
        // However the check below ends, the rebuilds stop.
        let _stop_rebuilds = stop.raise_on_drop();
        s.spawn(|| {
            let _raise = stop.raise_on_panic();
            while !stop.stopped() {
                match guard.rebuild() {
                    Ok(_) | Err(GuardError::Warming | GuardError::RebuildRunning) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        });
        common::guard_concurrency_sync(&guard, U64_ROWS, 4_000, 200_000)
    });
    let stats = guard.stats();
    assert!(stats.rebuilds >= 3, "{stats:?}");
    assert!(checked > 10_000, "{checked} lookups checked");
    assert!(guard.filter().len() >= present);
    // Once the rebuilds are done, every row the store holds passes the filter.
    let rows = Store::scan_keys(guard.store(), None, usize::MAX)
        .unwrap()
        .keys;
    assert_eq!(rows.len(), present);
    let missing: Vec<_> = rows.iter().filter(|k| !guard.may_contain(k)).collect();
    assert!(
        missing.is_empty(),
        "rows missing from the filter: {missing:?}"
    );
    println!(
        "{checked} lookups checked, {} rebuilds, {present} keys at the end",
        stats.rebuilds
    );
}

/// A filter for `capacity` keys that may not grow past its own size (`max_memory`).
fn capped(capacity: usize) -> CuckooFilter {
    let size = CuckooFilter::with_capacity(capacity).memory_usage();
    CuckooFilter::builder()
        .capacity(capacity)
        .max_memory(size)
        .build()
        .unwrap()
}

/// Puts keys `from..` until `creates_at_ceiling` reaches `past`; returns the next key.
fn fill_past_the_ceiling(guard: &CacheGuard<Mem>, from: u64, past: u64) -> u64 {
    let mut k = from;
    while guard.stats().creates_at_ceiling < past {
        guard.put(&k, &k).expect("a create at the ceiling is taken");
        k += 1;
        assert!(k < from + 100_000, "no ceiling after {k} creates");
    }
    k
}

/// [guard.R4]: at the ceiling the guard takes every create, finds every row, and passes what
/// its filter misses to the store; a seal refuses; a rebuild that fits ends it.
#[test]
fn a_guard_at_its_memory_ceiling_takes_creates_and_hides_no_row_until_a_rebuild_fits() {
    let guard = CacheGuard::with_policy(capped(1_000), Mem::new(), RebuildPolicy::manual());
    guard.warm_up(100, |_| {}).unwrap();
    let end = fill_past_the_ceiling(&guard, 0, 500);
    let stats = guard.stats();
    assert!(stats.at_ceiling);
    assert_eq!(stats.writes_refused, 0);
    assert_eq!(
        stats.filter_growth_steps, 0,
        "the ceiling allows no table more"
    );
    for k in 0..end {
        assert_eq!(
            guard.get(&k).unwrap(),
            Some(k),
            "key {k} hidden at the ceiling"
        );
    }
    // Keys never written: the filter rules most out, but cannot vouch for its answer.
    let before = guard.stats().passed_at_ceiling;
    let mut failing_open = 0;
    for k in end..end + 1_000 {
        let admission = guard.admit(&k);
        assert!(!admission.is_blocked(), "a marked filter blocked key {k}");
        failing_open += u64::from(admission == cuckoo_guard::guard::Admission::FailOpen);
        assert_eq!(guard.get(&k).unwrap(), None);
    }
    assert!(
        failing_open > 950,
        "{failing_open} of 1000 absent keys failed open"
    );
    let stats = guard.stats();
    // Twice each: `admit`, then `get`.
    assert_eq!(
        stats.passed_at_ceiling,
        before + 2 * failing_open,
        "{stats:?}"
    );
    assert_eq!(stats.blocked, 0);
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        guard.seal(dir.path().join("g.cgsnap")),
        Err(GuardError::AtCeiling)
    ));
    // Fewer rows than the ceiling holds: a rebuild fits, and the filter answers "absent" again.
    for k in 0..end / 2 {
        assert!(guard.delete(&k).unwrap());
    }
    let report = guard.rebuild().unwrap();
    assert_eq!(report.keys_scanned, end - end / 2);
    let stats = guard.stats();
    assert!(!stats.at_ceiling, "{stats:?}");
    for k in end / 2..end {
        assert_eq!(guard.get(&k).unwrap(), Some(k));
    }
    let blocked = (end..end + 1_000)
        .filter(|k| guard.admit(k).is_blocked())
        .count();
    assert!(blocked > 950, "{blocked} of 1000 absent keys blocked");
    guard.seal(dir.path().join("g.cgsnap")).unwrap();
}

/// A create and a delete of key `k`, then a pause: a write that may start an automatic
/// rebuild, which has run when this returns.
fn write_and_settle(guard: &CacheGuard<Mem>, k: u64) {
    guard.put(&k, &k).unwrap();
    assert!(guard.delete(&k).unwrap());
    settle(guard);
    std::thread::sleep(Duration::from_millis(20));
}

/// A guard with the automatic policy filled with twice the keys that fit under its ceiling
/// (the rebuild at the first create past the ceiling may fit, the later ones cannot), then
/// written to until an automatic rebuild has failed (failed ones wait 1 s, doubling, before
/// the next). Returns the guard, the end of its keys and the next key free to write.
fn past_the_ceiling_with_a_failed_rebuild(deadline: Instant) -> (CacheGuard<Mem>, u64, u64) {
    let guard = CacheGuard::new(capped(1_000), Mem::new());
    guard.warm_up(100, |_| {}).unwrap();
    let end = fill_past_the_ceiling(&guard, 0, 1_000);
    let mut k = end;
    while guard.stats().rebuilds_failed == 0 {
        assert!(Instant::now() < deadline, "{:?}", guard.stats());
        write_and_settle(&guard, k);
        k += 1;
    }
    (guard, end, k)
}

/// After a `MemoryLimit` rebuild ended the ceiling: it was the last rebuild, the `rows` are
/// found, and the filter blocks absent keys from `absent` on again.
fn assert_the_ceiling_ended(guard: &CacheGuard<Mem>, rows: std::ops::Range<u64>, absent: u64) {
    let stats = guard.stats();
    assert_eq!(
        stats.last_rebuild.as_ref().map(|r| r.reason),
        Some(RebuildReason::MemoryLimit)
    );
    assert!(!stats.at_ceiling, "{stats:?}");
    for key in rows {
        assert_eq!(guard.get(&key).unwrap(), Some(key));
    }
    let blocked = (absent..absent + 1_000)
        .filter(|k| guard.admit(k).is_blocked())
        .count();
    assert!(blocked > 950, "{blocked} of 1000 absent keys blocked");
}

/// [guard.R4] with the automatic policy: writes at the ceiling start rebuilds (`MemoryLimit`),
/// which fail while the store holds more keys than fit, and one succeeds once deletes made
/// room; meanwhile no row is hidden.
#[test]
fn an_automatic_rebuild_starts_at_the_ceiling_and_ends_it_once_the_keys_fit() {
    let deadline = Instant::now() + Duration::from_secs(60);
    let (guard, end, mut k) = past_the_ceiling_with_a_failed_rebuild(deadline);
    let stats = guard.stats();
    assert!(stats.at_ceiling, "{stats:?}");
    for k in 0..end {
        assert!(
            guard.may_contain(&k),
            "key {k} hidden while no rebuild fits"
        );
    }
    for k in 0..end * 3 / 4 {
        assert!(guard.delete(&k).unwrap());
    }
    while guard.stats().at_ceiling {
        assert!(Instant::now() < deadline, "{:?}", guard.stats());
        write_and_settle(&guard, k);
        k += 1;
    }
    assert_the_ceiling_ended(&guard, end * 3 / 4..end, k);
}

/// [guard.R4] with the automatic policy and no writes: rows deleted behind the guard's back
/// make room, and the lookups that fail open at the ceiling start the rebuild that fits.
#[test]
fn lookups_failing_open_at_the_ceiling_start_the_rebuild_that_ends_it() {
    let deadline = Instant::now() + Duration::from_secs(60);
    let (guard, end, k) = past_the_ceiling_with_a_failed_rebuild(deadline);
    settle(&guard);
    let before = guard.stats();
    assert!(before.at_ceiling, "{before:?}");
    // From here on, no write goes through the guard.
    for key in 0..end * 3 / 4 {
        assert!(Store::delete(guard.store(), &key).unwrap());
    }
    let mut lookups = 0u64;
    while guard.stats().at_ceiling {
        assert!(
            Instant::now() < deadline,
            "{lookups} lookups: {:?}",
            guard.stats()
        );
        assert_eq!(guard.get(&(k + lookups)).unwrap(), None);
        lookups += 1;
        settle(&guard);
        std::thread::sleep(Duration::from_millis(5));
    }
    let stats = guard.stats();
    assert_eq!(stats.rebuilds, before.rebuilds + 1, "{stats:?}");
    assert_eq!(stats.rebuilds_failed, before.rebuilds_failed, "{stats:?}");
    assert_the_ceiling_ended(&guard, end * 3 / 4..end, k + lookups);
}

/// As the test above, on the async guard: a batch lookup that fails open at the ceiling starts
/// the rebuild as a tokio task.
#[test]
fn an_async_guards_lookups_at_the_ceiling_start_the_rebuild_that_ends_it() {
    common::runtime().block_on(async {
        let guard = AsyncCacheGuard::new(capped(1_000), Mem::new());
        guard.warm_up(100, |_| {}).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        // Twice the keys that fit, and a write after the first failed rebuild's wait.
        let mut k = 0u64;
        while guard.stats().creates_at_ceiling < 1_000 || guard.stats().rebuilds_failed == 0 {
            assert!(Instant::now() < deadline, "{:?}", guard.stats());
            guard.put(&k, &k).await.unwrap();
            k += 1;
            if guard.stats().creates_at_ceiling >= 1_000 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        while guard.stats().rebuilding {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let before = guard.stats();
        assert!(before.at_ceiling, "{before:?}");
        // From here on, no write goes through the guard.
        for key in 0..k * 3 / 4 {
            assert!(AsyncStore::delete(guard.store(), &key).await.unwrap());
        }
        let mut absent = 1_000_000u64;
        while guard.stats().at_ceiling {
            assert!(Instant::now() < deadline, "{:?}", guard.stats());
            let batch: Vec<u64> = (absent..absent + 10).collect();
            absent += 10;
            let values = guard.get_many(&batch).await.unwrap();
            assert!(values.iter().all(Option::is_none));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let stats = guard.stats();
        assert_eq!(stats.rebuilds, before.rebuilds + 1, "{stats:?}");
        assert_eq!(stats.rebuilds_failed, before.rebuilds_failed, "{stats:?}");
        assert_eq!(
            stats.last_rebuild.as_ref().map(|r| r.reason),
            Some(RebuildReason::MemoryLimit)
        );
        for key in k * 3 / 4..k {
            assert_eq!(guard.get(&key).await.unwrap(), Some(key));
        }
        let blocked = guard
            .admit_many(&(absent..absent + 1_000).collect::<Vec<_>>())
            .iter()
            .filter(|a| a.is_blocked())
            .count();
        assert!(blocked > 950, "{blocked} of 1000 absent keys blocked");
    });
}

/// [guard.R4] on the async guard: creates at the ceiling are taken, no row is hidden.
#[test]
fn an_async_guard_at_its_ceiling_hides_no_row() {
    common::runtime().block_on(async {
        let guard =
            AsyncCacheGuard::with_policy(capped(1_000), Mem::new(), RebuildPolicy::manual());
        guard.warm_up(100, |_| {}).await.unwrap();
        let mut k = 0u64;
        while guard.stats().creates_at_ceiling < 200 {
            guard
                .put(&k, &k)
                .await
                .expect("a create at the ceiling is taken");
            k += 1;
            assert!(k < 100_000, "no ceiling after {k} creates");
        }
        for key in 0..k {
            assert_eq!(guard.get(&key).await.unwrap(), Some(key));
        }
        let before = guard.stats().passed_at_ceiling;
        let admitted = guard.admit_many(&(k..k + 100).collect::<Vec<_>>());
        assert!(admitted.iter().all(|a| !a.is_blocked()));
        let failing_open = admitted
            .iter()
            .filter(|a| **a == cuckoo_guard::guard::Admission::FailOpen)
            .count() as u64;
        assert!(
            failing_open > 95,
            "{failing_open} of 100 absent keys failed open"
        );
        assert_eq!(guard.stats().passed_at_ceiling, before + failing_open);
    });
}
