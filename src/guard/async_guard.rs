//! [`AsyncCacheGuard`]: the guard for an [`AsyncStore`].

use std::fmt;
use std::hash::BuildHasher;
use std::path::Path;
use std::sync::{Arc, OnceLock};
#[cfg(feature = "tokio")]
use std::time::Duration;

use ahash::RandomState;

use super::batch::Batch;
use super::core::{seal_async, Admission, GuardCore, RebuildClaim, Step, Triggered, WarmUp};
use super::driver::{Link, RebuildDriver, Rebuilds};
use super::fleet_link::FleetLink;
use super::memo::{Memo, MemoError, Probe, Shared, DEFAULT_MEMO_ENTRIES};
#[cfg(feature = "tokio")]
use super::periodic::{self, PeriodicSeal, Turn};
use super::restart::{self, new_seal_secret, Restart, Sealed};
use super::store::{AsyncStore, Written};
use super::{
    FilterRef, GuardError, GuardStats, RebuildPolicy, RebuildReason, RebuildReport, WarmUpProgress,
};
use crate::error::SnapshotError;
use crate::{snapshot, CuckooFilter};

/// A [`CuckooFilter`] in front of an [`AsyncStore`], kept in sync by the same
/// [consistency rules](super#consistency-rules) as [`CacheGuard`](super::CacheGuard).
///
/// The filter is consulted synchronously (it never blocks or parks), so lookups that the
/// filter blocks complete without awaiting anything. The futures are `Send` when the store's
/// are; nothing is held across an `.await` but the store call itself. Clones share one guard.
///
/// Automatic rebuilds (see [`RebuildPolicy`]) run in the guard's [`RebuildDriver`] if
/// [`background`](Self::background) made one: a future to spawn on any executor. Without a
/// driver they run as tokio tasks when the crate's `tokio` feature is on and the write that
/// triggers one runs inside a tokio runtime. Otherwise they are skipped, counted in
/// [`GuardStats::rebuilds_skipped`] (and reported once on standard error): call
/// [`rebuild`](Self::rebuild) yourself then (the stats show when the filter has grown).
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// async fn handler(guard: &AsyncCacheGuard<MemoryStore<u64, String>>, id: u64) -> Option<String> {
///     guard.get(&id).await.ok().flatten()
/// }
/// # let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::new());
/// # let _ = handler(&guard, 1);
/// ```
pub struct AsyncCacheGuard<St: AsyncStore, H = RandomState> {
    inner: Arc<Inner<St, H>>,
}

struct Inner<St: AsyncStore, H> {
    core: GuardCore<H>,
    /// Keys the store just answered absent after the filter admitted them.
    memo: Memo<St::Key, Shared<St::Value, St::Error>>,
    store: St,
    warm_up: WarmUp<St::Cursor>,
    /// Starts an automatic rebuild; chosen where the bounds it needs are known (`new`).
    spawn: fn(&Arc<Inner<St, H>>, Triggered),
    /// The requests to the guard's [`RebuildDriver`]s, if any.
    drivers: Link,
    /// The guard's fleet, once it joined one ([`crate::fleet`]).
    fleet: OnceLock<Arc<dyn FleetLink<St::Key>>>,
}

/// A guard held without keeping it alive (the fleet's hooks hold their guard so, since the
/// guard holds them).
#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
pub(crate) struct WeakGuard<St: AsyncStore, H>(std::sync::Weak<Inner<St, H>>);

#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
impl<St: AsyncStore, H> WeakGuard<St, H> {
    pub(crate) fn upgrade(&self) -> Option<AsyncCacheGuard<St, H>> {
        self.0.upgrade().map(|inner| AsyncCacheGuard { inner })
    }
}

impl<St: AsyncStore, H> Clone for AsyncCacheGuard<St, H> {
    fn clone(&self) -> Self {
        AsyncCacheGuard {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<St, H> AsyncCacheGuard<St, H>
where
    St: AsyncStore + 'static,
    H: BuildHasher + Clone + Send + Sync + 'static,
{
    /// A guard over `store` with `filter`, warming; see [`CacheGuard::new`](super::CacheGuard::new).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.is_warming());
    /// ```
    pub fn new(filter: CuckooFilter<H>, store: St) -> Self {
        Self::with_policy(filter, store, RebuildPolicy::default())
    }

    /// As [`CacheGuard::with_policy`](super::CacheGuard::with_policy).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore, RebuildPolicy};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::with_policy(
    ///     CuckooFilter::with_capacity(10),
    ///     MemoryStore::<u8, u8>::new(),
    ///     RebuildPolicy::manual(),
    /// );
    /// assert!(!guard.policy().is_automatic());
    /// ```
    pub fn with_policy(filter: CuckooFilter<H>, store: St, policy: RebuildPolicy) -> Self {
        Self::build(filter, store, policy, WarmUp::new())
    }

    fn build(
        filter: CuckooFilter<H>,
        store: St,
        policy: RebuildPolicy,
        warm_up: WarmUp<St::Cursor>,
    ) -> Self {
        AsyncCacheGuard {
            inner: Arc::new(Inner {
                core: GuardCore::new(filter, policy),
                memo: Memo::new(DEFAULT_MEMO_ENTRIES),
                store,
                warm_up,
                spawn: spawn_rebuild::<St, H>,
                drivers: Link::default(),
                fleet: OnceLock::new(),
            }),
        }
    }
}

impl<St: AsyncStore + 'static> AsyncCacheGuard<St, RandomState> {
    /// As [`CacheGuard::restore`](super::CacheGuard::restore): a guard over `store` started
    /// from the snapshot at `path` if the store's seal names it, ready at once; otherwise a
    /// warming guard over a filter from `fallback`. The file is read on tokio's blocking
    /// threads when the `tokio` feature is on and a runtime is running.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("users.cgsnap");
    /// let store = Arc::new(MemoryStore::from_rows((0..1_000u64).map(|k| (k, k))));
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(2_000), Arc::clone(&store));
    /// guard.warm_up(256, |_| {}).await?;
    /// guard.seal(&path).await?; // at shutdown
    /// drop(guard);
    ///
    /// let (guard, restart) =
    ///     AsyncCacheGuard::restore(&path, store, || CuckooFilter::with_capacity(2_000)).await;
    /// assert!(restart.is_trusted());
    /// assert_eq!(guard.get(&7).await?, Some(7)); // no warm-up needed
    /// assert_eq!(guard.get(&5_000).await?, None); // blocked
    /// # Ok(()) }
    /// ```
    pub async fn restore(
        path: impl AsRef<Path>,
        store: St,
        fallback: impl FnOnce() -> CuckooFilter,
    ) -> (Self, Restart) {
        let (guard, restart, _) =
            Self::restore_with(path, store, fallback, |store, tag| async move {
                let seal = if St::SEALS {
                    Some(store.read_seal().await)
                } else {
                    None
                };
                let trusted = restart::trust(seal, tag).map(|secret| (secret, ()));
                (store, trusted)
            })
            .await;
        (guard, restart)
    }

    /// [`restore`](Self::restore) with the seal's secret found by `trust` from the file's seal
    /// id (it hands the store back), with what else it read, which comes back only if the
    /// file was trusted.
    pub(crate) async fn restore_with<T, F, Fut>(
        path: impl AsRef<Path>,
        store: St,
        fallback: impl FnOnce() -> CuckooFilter,
        trust: F,
    ) -> (Self, Restart, Option<T>)
    where
        F: FnOnce(St, u64) -> Fut,
        Fut: std::future::Future<Output = (St, Result<(super::SealSecret, T), Restart>)>,
    {
        let path = path.as_ref().to_owned();
        let opened = blocking(
            move || restart::open(&path),
            || Err(Restart::Unreadable(shut_down())),
        );
        let (store, restart) = match opened.await {
            Ok(file) => {
                let (store, trusted) = trust(store, file.seal_id()).await;
                (store, trusted.map(|trusted| (file, trusted)))
            }
            Err(restart) => (store, Err(restart)),
        };
        let restart = match restart {
            Ok((file, (secret, found))) => blocking(
                move || restart::load(file, &secret),
                || Err(Restart::Unreadable(shut_down())),
            )
            .await
            .map(|(filter, restart)| (filter, restart, found)),
            Err(restart) => Err(restart),
        };
        let (guard, restart, found) = match restart {
            Ok((filter, restart, found)) => {
                // Warm already: `warm_up` returns at once instead of loading the keys twice.
                let guard =
                    Self::build(filter, store, RebuildPolicy::default(), WarmUp::finished());
                guard.core().finish_warm_up();
                (guard, restart, Some(found))
            }
            Err(restart) => (AsyncCacheGuard::new(fallback(), store), restart, None),
        };
        guard.core().set_restart(restart.to_string());
        (guard, restart, found)
    }
}

impl<St: AsyncStore, H: BuildHasher + Sync> AsyncCacheGuard<St, H> {
    pub(crate) fn core(&self) -> &GuardCore<H> {
        &self.inner.core
    }

    /// The guard, held without keeping it alive.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    pub(crate) fn downgrade(&self) -> WeakGuard<St, H> {
        WeakGuard(Arc::downgrade(&self.inner))
    }

    /// Whether the guard's fleet hooks are the object at `link`.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    pub(crate) fn fleet_is(&self, link: *const ()) -> bool {
        self.inner
            .fleet
            .get()
            .is_some_and(|installed| std::ptr::eq(Arc::as_ptr(installed).cast::<()>(), link))
    }

    /// Installs the guard's fleet hooks; `false` if it is in a fleet already.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    pub(crate) fn set_fleet(&self, link: Arc<dyn FleetLink<St::Key>>) -> bool {
        self.inner.fleet.set(link).is_ok()
    }

    /// As [`CacheGuard::policy`](super::CacheGuard::policy).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.policy().is_automatic());
    /// ```
    pub fn policy(&self) -> &RebuildPolicy {
        self.core().policy()
    }

    /// As [`CacheGuard::with_memo`](super::CacheGuard::with_memo). A lookup future dropped
    /// after its store read installs nothing; a put future dropped during its store write
    /// disables its key's memo slot.
    ///
    /// # Errors
    ///
    /// [`MemoError::Shared`] if the guard has clones (or a background rebuild holds it).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new())
    ///     .with_memo(0)?; // no memo
    /// assert_eq!(guard.stats().memo_entries, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_memo(mut self, entries: usize) -> Result<Self, MemoError> {
        let inner = Arc::get_mut(&mut self.inner).ok_or(MemoError::Shared)?;
        inner.memo = inner.memo.resized(entries);
        Ok(self)
    }

    /// As [`CacheGuard::get`](super::CacheGuard::get).
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if the store fails; [`GuardError::SharedStore`] if it failed on a read
    /// this lookup shared with concurrent lookups of the key ([`GuardError::store_error`] reads
    /// either).
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// # use cuckoo_guard::CuckooFilter;
    /// async fn lookup(guard: &AsyncCacheGuard<MemoryStore<u8, u8>>) -> Option<u8> {
    ///     guard.get(&1).await.unwrap()
    /// }
    /// ```
    pub async fn get(&self, key: &St::Key) -> Result<Option<St::Value>, GuardError<St::Error>>
    where
        St::Value: Clone,
    {
        self.get_admitted(key, self.admit(key)).await
    }

    /// As [`CacheGuard::admit`](super::CacheGuard::admit): the filter's decision, counted,
    /// without the store; synchronous and non-blocking, so safe on any executor thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{Admission, AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert_eq!(guard.admit(&3), Admission::Warming);
    /// ```
    pub fn admit(&self, key: &St::Key) -> Admission {
        let admission = self.core().admit(key);
        if admission == Admission::FailOpen {
            self.spawn_rebuild(self.core().after_failing_open());
        }
        admission
    }

    /// As [`CacheGuard::get_admitted`](super::CacheGuard::get_admitted).
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if the store fails; [`GuardError::SharedStore`] if it failed on a read
    /// this lookup shared with concurrent lookups of the key ([`GuardError::store_error`] reads
    /// either).
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// async fn lookup(guard: &AsyncCacheGuard<MemoryStore<u8, u8>>) -> Option<u8> {
    ///     let admission = guard.admit(&1);
    ///     guard.get_admitted(&1, admission).await.unwrap()
    /// }
    /// ```
    pub async fn get_admitted(
        &self,
        key: &St::Key,
        admission: Admission,
    ) -> Result<Option<St::Value>, GuardError<St::Error>>
    where
        St::Value: Clone,
    {
        if admission.is_blocked() {
            return Ok(None);
        }
        // In a fleet the memo is not consulted: another member's create commits after this
        // member applied it, and a store read between the two would install "absent".
        // Nor are reads coalesced, for the same reason.
        // Flights this lookup joined that were abandoned: after two it reads alone.
        let mut abandoned = 0;
        loop {
            let coalesce = abandoned < 2;
            let mut probe = if self.inner.fleet.get().is_some() {
                Probe::Skip
            } else {
                self.inner.memo.probe_with(key, admission, coalesce)
            };
            match &probe {
                Probe::Hit => {
                    self.core().observe_memo_hit();
                    return Ok(None);
                }
                // [memo.C2]: another lookup of this key reads the store; its answer is ours.
                Probe::Join(flight) => {
                    let mut place = None;
                    match std::future::poll_fn(|cx| flight.poll_wait(cx, &mut place)).await {
                        Some(answer) => {
                            self.core().observe_coalesced(&answer);
                            return answer.map_err(GuardError::SharedStore);
                        }
                        // Its leader was dropped before its answer: look again.
                        None => {
                            abandoned += 1;
                            continue;
                        }
                    }
                }
                _ => {}
            }
            // If this future is dropped while the store call runs, the memo installs nothing
            // and the flight lands abandoned: its followers look again.
            let lead = probe.take_lead();
            let result = self.inner.store.get(key).await;
            self.core().observe_get(admission, &result);
            self.inner.memo.settle(key, probe, &result);
            return match lead {
                Some(lead) => lead.land(result),
                None => result.map_err(GuardError::Store),
            };
        }
    }

    /// As [`CacheGuard::admit_many`](super::CacheGuard::admit_many): the filter's decision for
    /// each of `keys`, counted, with one batched filter pass; synchronous and non-blocking.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{Admission, AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// // Warming: every key goes to the store.
    /// assert_eq!(guard.admit_many(&[1, 2]), [Admission::Warming, Admission::Warming]);
    /// ```
    pub fn admit_many(&self, keys: &[St::Key]) -> Vec<Admission> {
        let admissions = self.core().admit_many(keys);
        if admissions.contains(&Admission::FailOpen) {
            self.spawn_rebuild(self.core().after_failing_open());
        }
        admissions
    }

    /// As [`CacheGuard::get_many`](super::CacheGuard::get_many): the values of `keys`, in
    /// their order, with one filter pass and one store call ([`AsyncStore::get_many`]) for the
    /// keys the filter admitted and the memo does not answer.
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if the store fails (no value of the batch is returned).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// async fn list(guard: &AsyncCacheGuard<MemoryStore<u32, String>>, ids: &[u32]) -> Vec<String> {
    ///     let rows = guard.get_many(ids).await.unwrap_or_default();
    ///     rows.into_iter().flatten().collect()
    /// }
    /// # let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::new());
    /// # let _ = list(&guard, &[1, 2]);
    /// ```
    pub async fn get_many(
        &self,
        keys: &[St::Key],
    ) -> Result<Vec<Option<St::Value>>, GuardError<St::Error>> {
        let admissions = self.admit_many(keys);
        let mut out = Vec::new();
        // In a fleet the memo is not consulted (see `get_admitted`): a batch goes to the store
        // whole but for the keys the filter rules out.
        let memo = self.inner.fleet.get().is_none();
        let batch = Batch::plan(
            self.core(),
            &self.inner.memo,
            memo,
            keys,
            &admissions,
            &mut out,
        );
        if batch.keys.is_empty() {
            return Ok(out);
        }
        let values = match self.inner.store.get_many(&batch.keys).await {
            Ok(values) if values.len() == batch.keys.len() => Ok(values),
            // A store that answered for the wrong number of keys: ask key by key.
            Ok(_) => {
                let mut values = Vec::with_capacity(batch.keys.len());
                let mut failed = None;
                for key in &batch.keys {
                    match self.inner.store.get(key).await {
                        Ok(value) => values.push(value),
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                failed.map_or(Ok(values), Err)
            }
            Err(e) => Err(e),
        };
        batch.settle(
            self.core(),
            &self.inner.memo,
            keys,
            &admissions,
            values,
            &mut out,
        )?;
        Ok(out)
    }

    /// As [`CacheGuard::shadow_get`](super::CacheGuard::shadow_get): the value of `key`,
    /// always read from the store, counting what a blocking guard would have blocked
    /// ([`GuardStats::shadow_would_block`]) and which of those the store found
    /// ([`GuardStats::shadow_false_negatives`], each key also reported once on standard
    /// error, at most 64 keys per guard).
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if the store fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, AsyncStore, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u64, u8>::new());
    /// guard.warm_up(10, |_| {}).await?;
    /// AsyncStore::put(guard.store(), &7, &1).await?; // written around the guard
    /// assert_eq!(guard.shadow_get(&7).await?, Some(1));
    /// assert_eq!(guard.stats().shadow_false_negatives, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn shadow_get(
        &self,
        key: &St::Key,
    ) -> Result<Option<St::Value>, GuardError<St::Error>>
    where
        St::Key: fmt::Debug,
    {
        let admission = self.admit_shadow(key);
        let result = self.inner.store.get(key).await;
        self.core().observe_get(admission, &result);
        if admission == Admission::Shadow && matches!(result, Ok(Some(_))) {
            self.core().report_shadow_miss(key);
        }
        result.map_err(GuardError::Store)
    }

    /// As [`CacheGuard::admit_shadow`](super::CacheGuard::admit_shadow): the filter's decision
    /// in shadow mode, counted, without the store; "absent" is [`Admission::Shadow`], which
    /// [`get_admitted`](Self::get_admitted) reads from the store.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{Admission, AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert_eq!(guard.admit_shadow(&3), Admission::Warming);
    /// ```
    pub fn admit_shadow(&self, key: &St::Key) -> Admission {
        let admission = self.core().admit_shadow(key);
        if admission == Admission::FailOpen {
            self.spawn_rebuild(self.core().after_failing_open());
        }
        admission
    }

    /// As [`CacheGuard::may_contain`](super::CacheGuard::may_contain).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.may_contain(&1)); // warming
    /// ```
    pub fn may_contain(&self, key: &St::Key) -> bool {
        self.core().may_contain(key)
    }

    /// As [`CacheGuard::put`](super::CacheGuard::put).
    ///
    /// # Errors
    ///
    /// [`GuardError::FilterFull`] if the filter has no room, [`GuardError::FilterContended`]
    /// if its insert gave up under contention (either way the store was not touched);
    /// [`GuardError::Store`] if the store fails.
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore, Written};
    /// // The key must be `Clone`, as for `CacheGuard::put`.
    /// async fn create(guard: &AsyncCacheGuard<MemoryStore<u8, u8>>) {
    ///     assert_eq!(guard.put(&1, &10).await.unwrap(), Written::Created);
    /// }
    /// ```
    pub async fn put(
        &self,
        key: &St::Key,
        value: &St::Value,
    ) -> Result<Written, GuardError<St::Error>>
    where
        St::Key: Clone + 'static,
    {
        let ticket = self
            .core()
            .begin_put(key)?
            .write_ends_with_call(St::PUT_ENDS_WITH_FUTURE);
        // [fleet.M2]: announced and acknowledged by every member before the store write. A
        // future dropped while it waits drops the ticket: the key is kept as an orphan.
        let fleet = self.inner.fleet.get();
        let slot = match fleet {
            Some(link) => match link.before_create(key).await {
                Ok(slot) => Some(slot),
                Err(error) => {
                    self.core().cancel_put(ticket);
                    return Err(GuardError::Fleet(error));
                }
            },
            None => None,
        };
        // Clears the key's memo entry before the store write.
        let memo = self.inner.memo.begin_write(key);
        // If this future is dropped while the store call runs, the ticket's drop keeps the
        // copies and records the key as an orphan, and the memo write's drop disables the
        // key's memo slot: the write may still land (rule 4, [guard.R1]). The store's future, a
        // temporary of the statement below, drops before these locals: the orphan's write
        // has ended by then if the store's put ends with its future.
        let result = self.inner.store.put(key, value).await;
        memo.end(match &result {
            Ok(_) => true,
            Err(error) => !St::write_outcome_unknown(error),
        });
        let known = match &result {
            Ok(_) => true,
            Err(error) => !St::write_outcome_unknown(error),
        };
        let trigger = self
            .core()
            .end_put(ticket, &result, St::write_outcome_unknown);
        self.spawn_rebuild(trigger);
        if let (Some(link), Some(slot)) = (fleet, slot) {
            link.after_create(slot, key, known).await;
        }
        result.map_err(GuardError::Store)
    }

    /// As [`CacheGuard::delete`](super::CacheGuard::delete).
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if the store fails (the filter is left as it was).
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// async fn remove(guard: &AsyncCacheGuard<MemoryStore<u8, u8>>) -> bool {
    ///     guard.delete(&1).await.unwrap()
    /// }
    /// ```
    pub async fn delete(&self, key: &St::Key) -> Result<bool, GuardError<St::Error>> {
        // [fleet.M4]: the position applied before the store delete.
        let fleet = self.inner.fleet.get();
        let slot = fleet.map(|link| link.delete_begins());
        let ticket = self.core().begin_delete();
        // [memo.C3]: lookups that begin after this delete returned do not join a read that
        // began before it.
        let memo = self.inner.memo.begin_delete(key);
        // If this future is dropped while the store call runs, nothing is removed from the
        // filter: at worst a stale copy (rule 2 and 4).
        let result = self.inner.store.delete(key).await;
        memo.end(result.is_ok());
        let trigger = self.core().end_delete(key, ticket, &result);
        self.spawn_rebuild(trigger);
        if let (Some(link), Some(slot), Ok(true)) = (fleet, slot, &result) {
            link.after_delete(key, slot).await;
        }
        result.map_err(GuardError::Store)
    }

    /// As [`CacheGuard::warm_up`](super::CacheGuard::warm_up). Cancelling the future (dropping
    /// it) stops the warm-up; a later call resumes after the last page loaded.
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if a scan fails; [`GuardError::FilterFull`] if the store holds
    /// more keys than the filter has room for; [`GuardError::FilterContended`] if an insert
    /// gave up under contention from concurrent writers (calling again resumes);
    /// [`GuardError::WarmUpRunning`] if another warm-up of this guard is running;
    /// [`GuardError::InvalidPageSize`] for a page size of 0.
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// async fn start(guard: &AsyncCacheGuard<MemoryStore<u8, u8>>) {
    ///     let done = guard.warm_up(1_000, |p| println!("{} keys", p.keys_loaded)).await.unwrap();
    ///     assert!(!guard.is_warming());
    ///     println!("{} keys loaded", done.keys_loaded);
    /// }
    /// ```
    pub async fn warm_up(
        &self,
        page_size: usize,
        mut progress: impl FnMut(WarmUpProgress) + Send,
    ) -> Result<WarmUpProgress, GuardError<St::Error>> {
        if page_size == 0 {
            return Err(GuardError::InvalidPageSize);
        }
        let mut turn = self.inner.warm_up.begin(self.core())?;
        loop {
            let cursor = match turn.next() {
                Step::Scan(cursor) => cursor,
                Step::Done(done) => {
                    drop(turn);
                    // [fleet.F5]: the log's top after the scan ended; without it, no
                    // announced delete removes a copy from this filter.
                    if let Some(link) = self.inner.fleet.get() {
                        if let Ok(top) = link.top().await {
                            self.core().set_scanned_at(top);
                        }
                    }
                    // A filter that grew while loading the store is rebuilt to fit it.
                    self.spawn_rebuild(self.core().after_write());
                    return Ok(done);
                }
            };
            let page = self
                .inner
                .store
                .scan_keys(cursor, page_size)
                .await
                .map_err(GuardError::Store)?;
            progress(turn.load(page)?);
        }
    }

    /// Starts an automatic rebuild in the background, if `trigger` claimed one.
    /// After an entry another fleet member announced was applied ([fleet.F4], [fleet.F5]):
    /// starts an automatic rebuild if the policy asks for one, as after a local write.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    pub(crate) fn after_fleet_write(&self) {
        self.spawn_rebuild(self.core().after_write());
    }

    fn spawn_rebuild(&self, trigger: Option<Triggered>) {
        if let Some(trigger) = trigger {
            (self.inner.spawn)(&self.inner, trigger);
        }
    }

    /// Whether the guard is still warming up.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.is_warming());
    /// ```
    pub fn is_warming(&self) -> bool {
        !self.core().is_ready()
    }

    /// As [`CacheGuard::stats`](super::CacheGuard::stats).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert_eq!(guard.stats().lookups, 0);
    /// ```
    pub fn stats(&self) -> GuardStats {
        let mut stats = self.core().stats();
        stats.memo_entries = self.inner.memo.entries();
        stats.memo_slots_disabled = self.inner.memo.disabled();
        stats
    }

    /// As [`CacheGuard::filter`](super::CacheGuard::filter).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.filter().is_empty());
    /// ```
    pub fn filter(&self) -> FilterRef<H> {
        self.core().filter()
    }

    /// As [`CacheGuard::store`](super::CacheGuard::store).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.store().is_empty());
    /// ```
    pub fn store(&self) -> &St {
        &self.inner.store
    }
}

/// How long a rebuild waits between looks at the gate: the creates it waits for are store
/// writes in flight.
#[cfg(feature = "tokio")]
const GATE_POLL: Duration = Duration::from_micros(200);

/// Runs `f`, a file read or write, on tokio's blocking threads if a runtime is running (with
/// the `tokio` feature), else on the calling thread. A runtime shutting down before the task
/// ran gives `cancelled()`.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
    cancelled: impl FnOnce() -> T,
) -> T {
    #[cfg(feature = "tokio")]
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        return match runtime.spawn_blocking(f).await {
            Ok(value) => value,
            Err(error) => match error.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_) => cancelled(),
            },
        };
    }
    let _ = cancelled;
    f()
}

/// The error of a file task the runtime dropped at shutdown.
fn shut_down() -> SnapshotError {
    SnapshotError::Io(std::io::Error::other(
        "the tokio runtime shut down before the snapshot file was handled",
    ))
}

/// Waits [`GATE_POLL`] on tokio's timer, or yields to the executor once without the `tokio`
/// feature (the wait is as long as the store writes in flight).
async fn gate_pause() {
    #[cfg(feature = "tokio")]
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::time::sleep(GATE_POLL).await;
        return;
    }
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await;
}

impl<St, H> Inner<St, H>
where
    St: AsyncStore,
    H: BuildHasher + Clone + Send + Sync + 'static,
{
    async fn rebuild(
        &self,
        claim: RebuildClaim,
        reason: RebuildReason,
    ) -> Result<RebuildReport, GuardError<St::Error>> {
        let mut turn = self.core.begin_rebuild(claim, reason)?;
        // [memo.M5]: rows written behind the guard's back are looked up in the store again.
        self.memo.forget_all();
        while !turn.poll_gate()? {
            gate_pause().await;
        }
        let fleet = self.fleet.get();
        if let Some(link) = fleet {
            // [fleet.F6]: the creates in flight, read after the gate.
            let keys = match link.in_flight().await {
                Ok(keys) => keys,
                Err(error) => {
                    turn.fail(&error);
                    return Err(GuardError::Fleet(error));
                }
            };
            if let Err(error) = turn.insert_keys(&keys) {
                turn.fail(&error);
                return Err(error);
            }
        }
        let page_size = self.core.policy().page_size_value();
        let mut cursor = None;
        loop {
            let page = match self.store.scan_keys(cursor.as_ref(), page_size).await {
                Ok(page) => page,
                Err(error) => {
                    turn.fail(&error);
                    return Err(GuardError::Store(error));
                }
            };
            if let Err(error) = turn.load_page(&page.keys) {
                turn.fail(&error);
                return Err(error);
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        if let Some(link) = fleet {
            // [fleet.F6] [fleet.F5]: the log's top after the scan, before the publication.
            match link.top().await {
                Ok(top) => turn.note_scanned_at(top),
                Err(error) => {
                    turn.fail(&error);
                    return Err(GuardError::Fleet(error));
                }
            }
        }
        Ok(turn.finish())
    }
}

impl<St: AsyncStore, H: BuildHasher + Clone + Send + Sync + 'static> AsyncCacheGuard<St, H> {
    /// As [`CacheGuard::seal_periodically`](super::CacheGuard::seal_periodically), as a task
    /// on the current tokio runtime (feature `tokio`). Dropping the handle aborts the task.
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime, as `tokio::spawn` does.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u8, u8>::new());
    /// guard.warm_up(10, |_| {}).await?;
    /// let task = guard.seal_periodically(dir.path().join("g.cgsnap"), Duration::from_millis(5));
    /// while task.report().unchanged == 0 {
    ///     tokio::time::sleep(Duration::from_millis(5)).await;
    /// }
    /// assert_eq!(task.stop().sealed, 1); // nothing written after the first seal
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn seal_periodically(&self, path: impl AsRef<Path>, every: Duration) -> PeriodicSeal
    where
        St: 'static,
    {
        let guard = self.clone();
        periodic::spawn_task(
            &tokio::runtime::Handle::current(),
            path.as_ref().to_owned(),
            every,
            move |path, last| {
                let guard = guard.clone();
                async move {
                    if guard.is_warming() {
                        return Ok(Turn::Warming);
                    }
                    if let Some(last) = last {
                        let seal = guard.store().read_seal().await.map_err(GuardError::Store)?;
                        if seal.map(|secret| secret.id()) == Some(last) {
                            return Ok(Turn::Unchanged);
                        }
                    }
                    guard.seal(&path).await.map(Turn::Sealed)
                }
            },
        )
    }

    /// As [`CacheGuard::seal`](super::CacheGuard::seal): writes a snapshot of the filter to
    /// `path` and seals it in the store. The file is written on tokio's blocking threads when
    /// the `tokio` feature is on and a runtime is running (else on the calling thread).
    /// Dropping the future stops the seal; the store may then hold a seal that names no file
    /// (or an older one), which no restart trusts.
    ///
    /// # Errors
    ///
    /// As [`CacheGuard::seal`](super::CacheGuard::seal).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u8, u8>::new());
    /// guard.warm_up(10, |_| {}).await?;
    /// let sealed = guard.seal(dir.path().join("g.cgsnap")).await?;
    /// assert_eq!(sealed.written.items, 0);
    /// # Ok(()) }
    /// ```
    pub async fn seal(&self, path: impl AsRef<Path>) -> Result<Sealed, GuardError<St::Error>>
    where
        St: 'static,
    {
        if !St::SEALS {
            return Err(GuardError::SealUnsupported);
        }
        let store = &self.inner.store;
        // A running rebuild ends on its own (a scan, or an error); the seal waits for it.
        self.seal_with(path, |secret, _| async move {
            store.write_seal(&secret).await.map_err(GuardError::Store)
        })
        .await
    }

    /// The seal's steps ([seal.S1]-[seal.S4]) with `write_seal` as [seal.S2], given the new
    /// secret and the current generation's scan position ([fleet.F5]): the store's seal for
    /// [`seal`](Self::seal), a fleet's record for [`crate::fleet::Fleet::seal`].
    pub(crate) async fn seal_with<F, Fut>(
        &self,
        path: impl AsRef<Path>,
        write_seal: F,
    ) -> Result<Sealed, GuardError<St::Error>>
    where
        St: 'static,
        F: FnOnce(super::SealSecret, Option<super::Position>) -> Fut,
        Fut: std::future::Future<Output = Result<(), GuardError<St::Error>>>,
    {
        let turn = self.core().begin_seal::<St::Error>()?;
        let secret = Arc::new(new_seal_secret().map_err(GuardError::Snapshot)?);
        let seal = secret.id();
        let path = path.as_ref().to_owned();
        let core = self.core();
        let mut write_seal = Some(write_seal);
        let written = seal_async(
            turn,
            // Under the claim: the current generation stays current until the file is written.
            || {
                let write = write_seal.take();
                let secret = (*secret).clone();
                async move {
                    match write {
                        Some(write) => write(secret, core.current_scanned_at()).await,
                        None => Ok(()),
                    }
                }
            },
            gate_pause,
            |file| {
                let secret = Arc::clone(&secret);
                // The write holds the claim until it ends, also if this future is dropped
                // meanwhile and the write goes on: no rebuild swaps the filter and no other
                // seal starts until this file is in place or abandoned.
                blocking(
                    move || {
                        file.write(|filter| snapshot::write_file(filter, &path, Some(&*secret)))
                    },
                    || Some(Err(shut_down())),
                )
            },
        )
        .await?
        .ok_or(GuardError::AtCeiling)?
        .map_err(GuardError::Snapshot)?;
        Ok(Sealed { seal, written })
    }

    /// A future that runs the guard's automatic rebuilds, for the caller to spawn on any
    /// executor (as `tokio_postgres::connect` returns its connection): see [`RebuildDriver`].
    /// While it exists, automatic rebuilds run in it rather than as tokio tasks, so a guard
    /// used outside a tokio runtime, or without the `tokio` feature, rebuilds too. Each call
    /// makes another driver; any of them runs the next rebuild.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// // Any executor's spawn will do; the task ends when the guard is dropped.
    /// let rebuilds = tokio::spawn(guard.background());
    /// drop(guard);
    /// rebuilds.await.unwrap();
    /// # }
    /// ```
    pub fn background(&self) -> RebuildDriver
    where
        St: 'static,
    {
        let guard: std::sync::Weak<Inner<St, H>> = Arc::downgrade(&self.inner);
        RebuildDriver::new(&self.inner.drivers.0, guard)
    }

    /// As [`CacheGuard::rebuild`](super::CacheGuard::rebuild): rebuilds the filter from the
    /// store while lookups and writes go on. The future does the scan; dropping it stops the
    /// rebuild and keeps the current filter.
    ///
    /// # Errors
    ///
    /// As [`CacheGuard::rebuild`](super::CacheGuard::rebuild).
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// async fn nightly(guard: &AsyncCacheGuard<MemoryStore<u64, String>>) {
    ///     let report = guard.rebuild().await.unwrap();
    ///     println!("{} keys in {:?}", report.keys_scanned, report.duration);
    /// }
    /// ```
    pub async fn rebuild(&self) -> Result<RebuildReport, GuardError<St::Error>> {
        let claim = self.core().claim().ok_or(GuardError::RebuildRunning)?;
        self.inner.rebuild(claim, RebuildReason::Requested).await
    }
}

/// Hands an automatic rebuild to the guard's [`RebuildDriver`]s if there are any, else runs it
/// as a tokio task if a runtime is running (with the `tokio` feature); otherwise skips it,
/// counted.
fn spawn_rebuild<St, H>(inner: &Arc<Inner<St, H>>, trigger: Triggered)
where
    St: AsyncStore + 'static,
    H: BuildHasher + Clone + Send + Sync + 'static,
{
    let Err(trigger) = inner.drivers.0.offer(trigger) else {
        return;
    };
    #[cfg(feature = "tokio")]
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let shared = Arc::clone(inner);
        // The task owns the claim: a task dropped before it runs drops it.
        runtime.spawn(async move {
            // The outcome is in the stats (`rebuilds`, `rebuilds_failed`, the last error).
            let _ = shared.rebuild(trigger.claim, trigger.reason).await;
        });
        return;
    }
    inner.core.rebuild_skipped(
        "the AsyncCacheGuard has no RebuildDriver (`background`) and the write or lookup ran \
         outside a tokio runtime or without the `tokio` feature",
    );
    drop(trigger);
}

impl<St, H> Rebuilds for Inner<St, H>
where
    St: AsyncStore + 'static,
    H: BuildHasher + Clone + Send + Sync + 'static,
{
    fn run(
        self: Arc<Self>,
        trigger: Triggered,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(async move {
            // The outcome is in the stats (`rebuilds`, `rebuilds_failed`, the last error).
            let _ = self.rebuild(trigger.claim, trigger.reason).await;
        })
    }

    fn skipped(&self, why: &str) {
        self.core.rebuild_skipped(why);
    }
}

impl<St: AsyncStore, H> fmt::Debug for AsyncCacheGuard<St, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCacheGuard")
            .field("filter", &self.inner.core.filter())
            .finish_non_exhaustive()
    }
}
