//! An automatic rebuild that `AsyncCacheGuard` hands to `tokio::spawn` owns the rebuild claim
//! from the spawn on: a task the runtime drops before its first poll (the runtime shut down,
//! say) gives it back, so the guard can still rebuild and seal.
#![cfg(feature = "tokio")]

use std::time::Duration;

use cuckoo_guard::guard::{AsyncCacheGuard, GuardError, MemoryStore};
use cuckoo_guard::CuckooFilter;

#[test]
fn an_automatic_rebuild_dropped_unrun_gives_its_claim_back() {
    // More rows than the filter was built for: the warm-up grows it, and its end claims an
    // automatic rebuild (growth) and spawns it.
    let store = MemoryStore::from_rows((0..2_000u64).map(|k| (k, k)));
    let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), store);

    // A short-lived runtime: the warm-up returns before the spawned rebuild task is polled,
    // then the runtime goes away and drops the task unrun.
    let first = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    first.block_on(guard.warm_up(100, |_| {})).unwrap();
    assert!(guard.stats().filter_growth_steps > 0);
    drop(first);

    let second = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    second.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        // A kept claim holds the seal for ever; a synced write on a loaded disk takes seconds.
        let sealed = tokio::time::timeout(
            Duration::from_secs(30),
            guard.seal(dir.path().join("g.cgsnap")),
        )
        .await;
        let rebuilt = guard.rebuild().await;
        let stats = guard.stats();
        assert!(
            sealed.is_ok() && !matches!(rebuilt, Err(GuardError::RebuildRunning)),
            "the dropped rebuild task kept the claim: seal timed out: {}, rebuild: {rebuilt:?}, \
             rebuilding: {}, rebuilds: {}",
            sealed.is_err(),
            stats.rebuilding,
            stats.rebuilds,
        );
    });
}
