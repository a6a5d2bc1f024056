//! The false-positive memo after `with_memo` on a guard that already ran a put of unknown
//! outcome: the resized memo must not forget that the put's write may still land.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::task::{Context, Poll};

use cuckoo_guard::guard::{
    AsyncCacheGuard, AsyncStore, MemoryStore, RebuildPolicy, ScanPage, Store, Written,
};
use cuckoo_guard::CuckooFilter;

/// An [`AsyncStore`] over a [`MemoryStore`] whose puts, once `stuck`, never return: a write
/// in flight whose future the caller drops, to land later (by hand, on `rows`).
struct Stuck {
    rows: MemoryStore<u64, u64>,
    stuck: AtomicBool,
}

impl AsyncStore for Stuck {
    type Key = u64;
    type Value = u64;
    type Cursor = u64;
    type Error = std::convert::Infallible;

    async fn get(&self, key: &u64) -> Result<Option<u64>, Self::Error> {
        Store::get(&self.rows, key)
    }
    async fn put(&self, key: &u64, value: &u64) -> Result<Written, Self::Error> {
        if self.stuck.load(SeqCst) {
            std::future::pending::<()>().await;
        }
        Store::put(&self.rows, key, value)
    }
    async fn delete(&self, key: &u64) -> Result<bool, Self::Error> {
        Store::delete(&self.rows, key)
    }
    async fn scan_keys(
        &self,
        cursor: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, Self::Error> {
        Store::scan_keys(&self.rows, cursor, limit)
    }
}

/// A waker that does nothing: the test polls by hand.
struct NoWake;

impl std::task::Wake for NoWake {
    fn wake(self: std::sync::Arc<Self>) {}
}

/// A put future dropped during its store write disables its key's memo slot; `with_memo` on
/// the guard (not shared, so it accepts) builds a memo whose slots all start disabled. The
/// next lookup reads "absent" and installs nothing; the write lands; a lookup that begins
/// after the row exists finds it.
#[test]
fn memo_review_with_memo_after_a_dropped_put_finds_the_late_write() {
    late_write_after_with_memo(1_024);
}

/// As above, on a guard built with no memo (0 slots): the dropped put disables nothing, yet
/// the memo given afterwards must still start disabled.
#[test]
fn with_memo_on_a_guard_without_a_memo_after_a_dropped_put_finds_the_late_write() {
    late_write_after_with_memo(0);
}

fn late_write_after_with_memo(first_memo: usize) {
    const KEY: u64 = 1_000_000;
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async {
            let store = Stuck {
                rows: MemoryStore::from_rows((0..1_000u64).map(|k| (k, k))),
                stuck: AtomicBool::new(true),
            };
            let guard = AsyncCacheGuard::with_policy(
                CuckooFilter::with_capacity(10_000),
                store,
                RebuildPolicy::manual(),
            )
            .with_memo(first_memo)
            .expect("a new guard");
            guard.warm_up(1_000, |_| {}).await.unwrap();
            let mut put = Box::pin(guard.put(&KEY, &3));
            let waker = std::task::Waker::from(std::sync::Arc::new(NoWake));
            let mut cx = Context::from_waker(&waker);
            assert!(matches!(put.as_mut().poll(&mut cx), Poll::Pending));
            drop(put); // the write is on its way
            assert_eq!(guard.stats().memo_slots_disabled, first_memo.min(1));
            let guard = guard.with_memo(1_024).expect("the guard is not shared");
            assert_eq!(guard.stats().memo_slots_disabled, 1_024);
            assert!(guard.may_contain(&KEY), "the dropped put kept its copy");
            assert_eq!(guard.get(&KEY).await.unwrap(), None, "not landed yet");
            // The write lands.
            Store::put(&guard.store().rows, &KEY, &3).unwrap();
            assert_eq!(
                guard.get(&KEY).await.unwrap(),
                Some(3),
                "the memo hides a row whose write landed before this lookup began"
            );
        });
}
