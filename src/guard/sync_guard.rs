//! [`CacheGuard`]: the guard for a synchronous [`Store`].

use std::fmt;
use std::hash::BuildHasher;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ahash::RandomState;

use super::batch::Batch;
use super::core::{seal_blocking, Admission, GuardCore, RebuildClaim, Step, Triggered, WarmUp};
use super::memo::{Memo, MemoError, Probe, Shared, DEFAULT_MEMO_ENTRIES};
use super::periodic::{self, PeriodicSeal, Turn};
use super::restart::{self, new_seal_secret, Restart, Sealed};
use super::store::{Store, Written};
use super::{
    FilterRef, GuardError, GuardStats, RebuildPolicy, RebuildReason, RebuildReport, WarmUpProgress,
};
use crate::snapshot;
use crate::CuckooFilter;

/// A [`CuckooFilter`] in front of a synchronous [`Store`], kept in sync by the
/// [consistency rules](super#consistency-rules).
///
/// `Send + Sync` when the store is: share it (it is cheap to clone: clones share one guard)
/// and call it from any thread. The filter grows when a create finds no room, and the guard
/// rebuilds it from the store on a background thread when the [`RebuildPolicy`] says so,
/// while lookups and writes go on.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), MemoryStore::new());
/// guard.warm_up(100, |_| {})?;
/// guard.put(&1u64, &"one")?;
/// assert_eq!(guard.get(&1)?, Some("one"));
/// assert_eq!(guard.get(&2)?, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CacheGuard<St: Store, H = RandomState> {
    inner: Arc<Inner<St, H>>,
}

struct Inner<St: Store, H> {
    core: GuardCore<H>,
    /// Keys the store just answered absent after the filter admitted them.
    memo: Memo<St::Key, Shared<St::Value, St::Error>>,
    store: St,
    warm_up: WarmUp<St::Cursor>,
    /// Starts an automatic rebuild; chosen where the bounds it needs are known (`new`).
    spawn: fn(&Arc<Inner<St, H>>, Triggered),
}

impl<St: Store, H> Clone for CacheGuard<St, H> {
    fn clone(&self) -> Self {
        CacheGuard {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<St, H> CacheGuard<St, H>
where
    St: Store + Send + Sync + 'static,
    St::Value: Send,
    St::Cursor: Send,
    H: BuildHasher + Clone + Send + Sync + 'static,
{
    /// A guard over `store` with `filter`, warming: lookups go to the store until
    /// [`warm_up`](Self::warm_up) has loaded the store's keys.
    ///
    /// `filter` should be empty. Its capacity is a starting point: with the default
    /// [`Growth`](crate::Growth) it grows when a create finds no room, and the default
    /// [`RebuildPolicy`] then rebuilds it to fit the store.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.is_warming());
    /// ```
    pub fn new(filter: CuckooFilter<H>, store: St) -> Self {
        Self::with_policy(filter, store, RebuildPolicy::default())
    }

    /// [`new`](Self::new) with a [`RebuildPolicy`] other than the default.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore, RebuildPolicy};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::with_policy(
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
        CacheGuard {
            inner: Arc::new(Inner {
                core: GuardCore::new(filter, policy),
                memo: Memo::new(DEFAULT_MEMO_ENTRIES),
                store,
                warm_up,
                spawn: spawn_rebuild::<St, H>,
            }),
        }
    }
}

impl<St> CacheGuard<St, RandomState>
where
    St: Store + Send + Sync + 'static,
    St::Value: Send,
    St::Cursor: Send,
{
    /// A guard over `store` started from the snapshot at `path` if it can be trusted, ready
    /// at once; otherwise a warming guard over a filter from `fallback`, to be warmed up as
    /// usual. Never fails: every reason not to trust the file is a [`Restart`] (also in
    /// [`GuardStats::restart`], for the log).
    ///
    /// The snapshot is trusted only if it is readable, checks out, and was written under the
    /// seal the store holds (its MAC, checked before its body is read, checks out under the
    /// seal's secret): one [`seal`](Self::seal) wrote and no write through a guard has
    /// cleared since (the [module documentation](super#restart-from-a-sealed-snapshot)). On
    /// Unix, a file that its group or others may write, or that another user than the
    /// process's effective user owns, is never trusted ([`Restart::Exposed`]). The
    /// seal stays in the store until this guard's first write clears it, so a guard that
    /// restarts again before any write trusts the same file.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("users.cgsnap");
    /// let store = Arc::new(MemoryStore::from_rows((0..1_000u64).map(|k| (k, k))));
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(2_000), Arc::clone(&store));
    /// guard.warm_up(256, |_| {})?;
    /// guard.seal(&path)?; // at shutdown
    /// drop(guard);
    ///
    /// let (guard, restart) = CacheGuard::restore(&path, store, || CuckooFilter::with_capacity(2_000));
    /// assert!(restart.is_trusted());
    /// assert_eq!(guard.get(&7)?, Some(7)); // no warm-up needed
    /// assert_eq!(guard.get(&5_000)?, None); // blocked
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn restore(
        path: impl AsRef<Path>,
        store: St,
        fallback: impl FnOnce() -> CuckooFilter,
    ) -> (Self, Restart) {
        let restart = restart::open(path.as_ref()).and_then(|file| {
            let seal = St::SEALS.then(|| store.read_seal());
            let secret = restart::trust(seal, file.seal_id())?;
            restart::load(file, &secret)
        });
        let (guard, restart) = match restart {
            Ok((filter, restart)) => {
                // Warm already: `warm_up` returns at once instead of loading the keys twice.
                let guard =
                    Self::build(filter, store, RebuildPolicy::default(), WarmUp::finished());
                guard.core().finish_warm_up();
                (guard, restart)
            }
            Err(restart) => (CacheGuard::new(fallback(), store), restart),
        };
        guard.core().set_restart(restart.to_string());
        (guard, restart)
    }
}

impl<St: Store, H: BuildHasher> CacheGuard<St, H> {
    fn core(&self) -> &GuardCore<H> {
        &self.inner.core
    }

    /// Writes a snapshot of the guard's filter to `path` and seals it in the store, so that
    /// [`restore`](CacheGuard::restore) trusts it until the next write through a guard: at
    /// shutdown, or periodically (a guard of a store that is rarely written then restarts
    /// fast after a crash too). Lookups and writes go on meanwhile; the seal waits for the
    /// creates in flight to return from their store writes, and waits for a running rebuild
    /// to finish (none starts while it is written). The protocol is in the [module documentation](super#restart-from-a-sealed-snapshot).
    ///
    /// The file is written as [`CuckooFilter::write_snapshot_file`] writes one: owner-only,
    /// under a temporary name, synced, renamed.
    ///
    /// # Errors
    ///
    /// [`GuardError::SealUnsupported`] if the store keeps no seal ([`Store::SEALS`]);
    /// [`GuardError::Warming`] before the warm-up finished; [`GuardError::Store`] if the seal
    /// cannot be written;
    /// [`GuardError::Snapshot`] if the file cannot be (the seal then names no file, and no
    /// restart trusts it), or if the operating system gives no random bytes for the seal's
    /// secret ([`SealSecret`](super::SealSecret)); [`GuardError::AtCeiling`] if the filter is
    /// at its memory ceiling and holds no copy of some created keys (no file is written).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, GuardError, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u8, u8>::new());
    /// let early = guard.seal(dir.path().join("g.cgsnap"));
    /// assert!(matches!(early, Err(GuardError::Warming)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn seal(&self, path: impl AsRef<Path>) -> Result<Sealed, GuardError<St::Error>> {
        if !St::SEALS {
            return Err(GuardError::SealUnsupported);
        }
        let turn = self.core().begin_seal::<St::Error>()?;
        let secret = new_seal_secret().map_err(GuardError::Snapshot)?;
        // A running rebuild ends on its own (a scan, or an error); the seal waits for it.
        let written = seal_blocking(
            turn,
            || {
                self.inner
                    .store
                    .write_seal(&secret)
                    .map_err(GuardError::Store)
            },
            |file| file.write(|filter| snapshot::write_file(filter, path.as_ref(), Some(&secret))),
        )?
        .ok_or(GuardError::AtCeiling)?
        .map_err(GuardError::Snapshot)?;
        Ok(Sealed {
            seal: secret.id(),
            written,
        })
    }

    /// Seals the guard's snapshot at `path` every `every` on a background thread, so that a
    /// restart after a crash is fast too when nothing was written since the last seal. A turn
    /// first reads the store's seal: if it still names the last snapshot the task wrote and
    /// the file is there, the turn writes nothing; otherwise it [`seal`](Self::seal)s anew.
    /// Turns before the warm-up finished do nothing. Failures are counted in the task's
    /// [`report`](PeriodicSeal::report) and retried next turn. The first turn comes after
    /// `every`; dropping the handle stops the task.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("users.cgsnap");
    /// let store = Arc::new(MemoryStore::<u64, u64>::new());
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), Arc::clone(&store));
    /// guard.warm_up(100, |_| {})?;
    /// guard.put(&1, &1)?;
    /// let task = guard.seal_periodically(&path, Duration::from_millis(5));
    /// while task.report().sealed == 0 {
    ///     std::thread::sleep(Duration::from_millis(5));
    /// }
    /// drop(task); // the process crashes here, say
    /// drop(guard);
    ///
    /// let (guard, restart) = CacheGuard::restore(&path, store, || CuckooFilter::with_capacity(1_000));
    /// assert!(restart.is_trusted());
    /// assert!(guard.may_contain(&1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn seal_periodically(&self, path: impl AsRef<Path>, every: Duration) -> PeriodicSeal
    where
        St: Send + Sync + 'static,
        St::Value: Send,
        St::Cursor: Send,
        H: Send + Sync + 'static,
    {
        let guard = self.clone();
        periodic::spawn_thread(path.as_ref().to_owned(), every, move |path, last| {
            if guard.is_warming() {
                return Ok(Turn::Warming);
            }
            if let Some(last) = last {
                let seal = guard.store().read_seal().map_err(GuardError::Store)?;
                if seal.map(|secret| secret.id()) == Some(last) {
                    return Ok(Turn::Unchanged);
                }
            }
            guard.seal(path).map(Turn::Sealed)
        })
    }

    /// The guard's rebuild policy.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.policy().is_automatic());
    /// ```
    pub fn policy(&self) -> &RebuildPolicy {
        self.core().policy()
    }

    /// Gives the guard a false-positive memo of `entries` slots (1,024 by default; 0 turns it
    /// off), on a guard not yet cloned or shared.
    ///
    /// A key the filter wrongly admits (a false positive) stays admitted until a rebuild, and
    /// each lookup of it costs a store read; a client replaying one such key would make every
    /// request a database read. After the store answers "absent" for a key the filter passed,
    /// the guard remembers the key (the whole key, not a hash); a later lookup of it is
    /// answered "absent" without the store ([`GuardStats::memo_hits`]) until a
    /// [`put`](Self::put) of that key, which clears it before its store write. Each slot holds
    /// one key (the newest). Every rebuild clears the memo, so rows written behind the
    /// guard's back are found once a rebuild has started.
    ///
    /// Memory is bounded in entries, not bytes: each entry is a clone of a key (for a key
    /// that owns heap data, such as a `String`, its heap data too), so the memo holds at most
    /// `entries` keys plus a few words per slot.
    ///
    /// Known limit: a slot a write of unknown outcome touched (an error that may have been
    /// applied, a dropped future, a panic) stops remembering for the guard's life, rebuilds
    /// included, since that write may land at any later time; its replays go to the store.
    /// [`GuardStats::memo_slots_disabled`] counts such slots. On a guard that has seen such a
    /// write, `with_memo` gives a memo whose every slot is disabled: it cannot tell which new
    /// slot the write's key maps to.
    ///
    /// # Errors
    ///
    /// [`MemoError::Shared`] if the guard has clones (or a background rebuild holds it): a memo
    /// replaced while in use could keep an entry a put never cleared.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new())
    ///     .with_memo(4_096)?;
    /// assert_eq!(guard.stats().memo_entries, 4_096);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_memo(mut self, entries: usize) -> Result<Self, MemoError> {
        let inner = Arc::get_mut(&mut self.inner).ok_or(MemoError::Shared)?;
        inner.memo = inner.memo.resized(entries);
        Ok(self)
    }

    /// The value of `key`: `Ok(None)` without asking the store if the filter rules the key
    /// out or the false-positive memo holds it ([`with_memo`](Self::with_memo)), else the
    /// store's answer.
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
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let store = MemoryStore::from_rows([(1u8, "one")]);
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), store);
    /// assert_eq!(guard.get(&1)?, Some("one")); // warming: asks the store
    /// guard.warm_up(10, |_| {})?;
    /// assert_eq!(guard.get(&2)?, None);        // ready: blocked by the filter
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get(&self, key: &St::Key) -> Result<Option<St::Value>, GuardError<St::Error>>
    where
        St::Value: Clone,
    {
        self.get_admitted(key, self.admit(key))
    }

    /// The first step of [`get`](Self::get): the filter's decision for `key`, counted as a
    /// lookup in the [stats](Self::stats). Never touches the store, never blocks. A lookup
    /// that fails open at the filter's memory ceiling may start an automatic rebuild
    /// ([`RebuildReason::MemoryLimit`]) in the background.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{Admission, CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// guard.warm_up(10, |_| {})?;
    /// assert_eq!(guard.admit(&3), Admission::Blocked);
    /// assert_eq!(guard.stats().blocked, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn admit(&self, key: &St::Key) -> Admission {
        let admission = self.core().admit(key);
        if admission == Admission::FailOpen {
            self.spawn_rebuild(self.core().after_failing_open());
        }
        admission
    }

    /// The second step of [`get`](Self::get), for a lookup [`admit`](Self::admit) decided:
    /// `Ok(None)` at once if it was blocked, otherwise the store's answer, counted (a hit, or
    /// a false positive). The lookup itself is not counted again.
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
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::from_rows([(1u8, 'a')]));
    /// guard.warm_up(10, |_| {})?;
    /// let admission = guard.admit(&1);
    /// assert_eq!(guard.get_admitted(&1, admission)?, Some('a'));
    /// assert_eq!((guard.stats().lookups, guard.stats().store_hits), (1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_admitted(
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
        // Flights this lookup joined that were abandoned: after two it reads alone.
        let mut abandoned = 0;
        loop {
            let coalesce = abandoned < 2;
            let mut probe = self.inner.memo.probe_with(key, admission, coalesce);
            match &probe {
                Probe::Hit => {
                    self.core().observe_memo_hit();
                    return Ok(None);
                }
                // [memo.C2]: another lookup of this key reads the store; its answer is ours.
                Probe::Join(flight) => match flight.wait() {
                    Some(answer) => {
                        self.core().observe_coalesced(&answer);
                        return answer.map_err(GuardError::SharedStore);
                    }
                    // Its leader was gone before its answer: look again.
                    None => {
                        abandoned += 1;
                        continue;
                    }
                },
                _ => {}
            }
            let lead = probe.take_lead();
            let result = self.inner.store.get(key);
            self.core().observe_get(admission, &result);
            self.inner.memo.settle(key, probe, &result);
            return match lead {
                Some(lead) => lead.land(result),
                None => result.map_err(GuardError::Store),
            };
        }
    }

    /// The filter's decision for each of `keys`, counted as lookups: [`admit`](Self::admit)
    /// of a batch, with one pass of the filter's batched lookup
    /// ([`CuckooFilter::contains_many`]), which overlaps the keys' memory loads. Never touches
    /// the store, never blocks.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{Admission, CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::from_rows([(1u8, 'a')]));
    /// guard.warm_up(10, |_| {})?;
    /// let admissions = guard.admit_many(&[1, 2]);
    /// assert_eq!(admissions[0], Admission::Pass);
    /// assert_eq!(guard.stats().lookups, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn admit_many(&self, keys: &[St::Key]) -> Vec<Admission> {
        let admissions = self.core().admit_many(keys);
        if admissions.contains(&Admission::FailOpen) {
            self.spawn_rebuild(self.core().after_failing_open());
        }
        admissions
    }

    /// The values of `keys`, in their order (`None` for a key that does not exist): for list
    /// endpoints. One filter pass ([`admit_many`](Self::admit_many)), then one store call
    /// ([`Store::get_many`]) for the keys the filter admitted and the false-positive memo does
    /// not answer; keys the filter rules out never reach the store. Each key is counted and
    /// remembered as [`get`](Self::get) counts and remembers it; a batch does not share reads
    /// with concurrent lookups.
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if the store fails (no value of the batch is returned).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let rows = MemoryStore::from_rows([(1u32, "one"), (3, "three")]);
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(100), rows);
    /// guard.warm_up(10, |_| {})?;
    /// assert_eq!(guard.get_many(&[3, 2, 1])?, [Some("three"), None, Some("one")]);
    /// assert!(guard.stats().blocked >= 1); // 2 never reached the store
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_many(
        &self,
        keys: &[St::Key],
    ) -> Result<Vec<Option<St::Value>>, GuardError<St::Error>> {
        let admissions = self.admit_many(keys);
        let mut out = Vec::new();
        let batch = Batch::plan(
            self.core(),
            &self.inner.memo,
            true,
            keys,
            &admissions,
            &mut out,
        );
        if batch.keys.is_empty() {
            return Ok(out);
        }
        let values = match self.inner.store.get_many(&batch.keys) {
            Ok(values) if values.len() == batch.keys.len() => Ok(values),
            // A store that answered for the wrong number of keys: ask key by key.
            Ok(_) => batch
                .keys
                .iter()
                .map(|key| self.inner.store.get(key))
                .collect(),
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

    /// The value of `key`, always read from the store: a lookup in *shadow mode*, to see what
    /// the guard would block before it blocks anything (a rollout, or a check for rows written
    /// around the guard).
    ///
    /// The filter is asked as [`get`](Self::get) asks it, but a key it rules out is read from
    /// the store anyway and counted in [`GuardStats::shadow_would_block`] (not in
    /// [`GuardStats::blocked`]); if the store finds it, the lookup is a would-be false negative,
    /// counted in [`GuardStats::shadow_false_negatives`] and reported on standard error with
    /// the key's `Debug` text (each key once, at most 64 keys per guard; the counter counts
    /// all). Keys the filter passes are looked up and counted as `get` counts them, but the
    /// false-positive memo is neither asked nor filled: nothing is answered without the store.
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if the store fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore, Store};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u64, &str>::new());
    /// guard.warm_up(10, |_| {})?;
    /// guard.store().put(&7, &"written around the guard")?; // the filter never saw it
    /// assert_eq!(guard.get(&7)?, None);                      // blocking: a false negative
    /// assert_eq!(guard.shadow_get(&7)?, Some("written around the guard"));
    /// assert_eq!(guard.shadow_get(&8)?, None);
    /// let stats = guard.stats();
    /// assert_eq!((stats.shadow_would_block, stats.shadow_false_negatives), (2, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shadow_get(&self, key: &St::Key) -> Result<Option<St::Value>, GuardError<St::Error>>
    where
        St::Key: fmt::Debug,
    {
        let admission = self.admit_shadow(key);
        let result = self.inner.store.get(key);
        self.core().observe_get(admission, &result);
        if admission == Admission::Shadow && matches!(result, Ok(Some(_))) {
            self.core().report_shadow_miss(key);
        }
        result.map_err(GuardError::Store)
    }

    /// The first step of [`shadow_get`](Self::shadow_get), for a middleware that decides
    /// before the handler runs (the `tower` feature's `ShadowLayer`): as
    /// [`admit`](Self::admit), except that a key the filter rules out is answered
    /// [`Admission::Shadow`] and counted in [`GuardStats::shadow_would_block`]. Given to
    /// [`get_admitted`](Self::get_admitted), `Admission::Shadow` reads the store and counts a
    /// value found in [`GuardStats::shadow_false_negatives`].
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{Admission, CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// guard.warm_up(10, |_| {})?;
    /// let admission = guard.admit_shadow(&3);
    /// assert_eq!(admission, Admission::Shadow);
    /// assert_eq!(guard.get_admitted(&3, admission)?, None); // asked the store
    /// assert_eq!(guard.stats().shadow_would_block, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn admit_shadow(&self, key: &St::Key) -> Admission {
        let admission = self.core().admit_shadow(key);
        if admission == Admission::FailOpen {
            self.spawn_rebuild(self.core().after_failing_open());
        }
        admission
    }

    /// Whether `key` may exist, from the filter alone (always `true` while warming).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.may_contain(&3)); // warming
    /// guard.warm_up(10, |_| {})?;
    /// assert!(!guard.may_contain(&3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn may_contain(&self, key: &St::Key) -> bool {
        self.core().may_contain(key)
    }

    /// Creates or updates `key` in the store, keeping the filter in sync (rules 1, 3, 4).
    ///
    /// # Errors
    ///
    /// [`GuardError::FilterFull`] if the filter has no room (it may not grow, or has grown as
    /// far as it may), [`GuardError::FilterContended`]
    /// if its insert gave up under contention (either way the store was not touched);
    /// [`GuardError::Store`] if the store fails.
    ///
    /// The key must be `Clone`: a write whose outcome is unknown keeps a copy of its key, to
    /// insert it into every rebuilt filter under that filter's fresh hash keys.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore, Written};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::new());
    /// assert_eq!(guard.put(&"k", &1)?, Written::Created);
    /// assert_eq!(guard.put(&"k", &2)?, Written::Updated);
    /// assert_eq!(guard.filter().count(&"k"), 1); // the update's extra copy was removed
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put(&self, key: &St::Key, value: &St::Value) -> Result<Written, GuardError<St::Error>>
    where
        St::Key: Clone + Send + Sync + 'static,
    {
        let ticket = self
            .core()
            .begin_put(key)?
            .write_ends_with_call(St::PUT_ENDS_WITH_CALL);
        // Clears the key's memo entry before the store write; if the store panics, its drop
        // disables the key's memo slot (the write may have landed).
        let memo = self.inner.memo.begin_write(key);
        let result = self.inner.store.put(key, value);
        memo.end(match &result {
            Ok(_) => true,
            Err(error) => !St::write_outcome_unknown(error),
        });
        let trigger = self
            .core()
            .end_put(ticket, &result, St::write_outcome_unknown);
        self.spawn_rebuild(trigger);
        result.map_err(GuardError::Store)
    }

    /// Deletes `key` from the store; removes it from the filter once the store confirms it
    /// (rule 2). Returns whether the key existed.
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if the store fails (the filter is left as it was).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::new());
    /// guard.warm_up(10, |_| {})?;
    /// guard.put(&9u8, &())?;
    /// assert!(guard.delete(&9)?);
    /// assert!(!guard.may_contain(&9));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn delete(&self, key: &St::Key) -> Result<bool, GuardError<St::Error>> {
        let ticket = self.core().begin_delete();
        // [memo.C3]: lookups that begin after this delete returned do not join a read that
        // began before it.
        let memo = self.inner.memo.begin_delete(key);
        let result = self.inner.store.delete(key);
        memo.end(result.is_ok());
        let trigger = self.core().end_delete(key, ticket, &result);
        self.spawn_rebuild(trigger);
        result.map_err(GuardError::Store)
    }

    /// Loads every key of the store into the filter, `page_size` keys per store call, calling
    /// `progress` after each page; then switches the guard from warming to filtering.
    ///
    /// Lookups and writes may run meanwhile. Returns at once if the guard is already warm.
    /// If it fails, the guard stays warming and a later call resumes after the last page.
    ///
    /// # Errors
    ///
    /// [`GuardError::Store`] if a scan fails; [`GuardError::FilterFull`] if the store holds
    /// more keys than the filter has room for; [`GuardError::FilterContended`] if an insert
    /// gave up under contention from concurrent writers (calling again resumes);
    /// [`GuardError::WarmUpRunning`] if another thread is warming this guard up;
    /// [`GuardError::InvalidPageSize`] for a page size of 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let store = MemoryStore::from_rows((0..1_000u32).map(|k| (k, ())));
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), store);
    /// let done = guard.warm_up(100, |_| {})?;
    /// assert_eq!(done.keys_loaded, 1_000);
    /// assert!(!guard.is_warming());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn warm_up(
        &self,
        page_size: usize,
        mut progress: impl FnMut(WarmUpProgress),
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
                    // A filter that grew while loading the store is rebuilt to fit it.
                    self.spawn_rebuild(self.core().after_write());
                    return Ok(done);
                }
            };
            let page = self
                .inner
                .store
                .scan_keys(cursor, page_size)
                .map_err(GuardError::Store)?;
            progress(turn.load(page)?);
        }
    }

    /// Starts an automatic rebuild in the background, if `trigger` claimed one.
    fn spawn_rebuild(&self, trigger: Option<Triggered>) {
        if let Some(trigger) = trigger {
            (self.inner.spawn)(&self.inner, trigger);
        }
    }

    /// Whether the guard is still warming up (sending every lookup to the store).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.is_warming());
    /// ```
    pub fn is_warming(&self) -> bool {
        !self.core().is_ready()
    }

    /// Lookup, write and filter counters.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::new());
    /// guard.put(&1u8, &1u8)?;
    /// assert_eq!(guard.stats().creates, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> GuardStats {
        let mut stats = self.core().stats();
        stats.memo_entries = self.inner.memo.entries();
        stats.memo_slots_disabled = self.inner.memo.disabled();
        stats
    }

    /// The guard's current filter, for inspection (a rebuild may replace it; the handle keeps
    /// the one it has alive). Writing to it directly breaks the consistency rules; go through
    /// the guard. Ask the guard, not this filter, whether a key may exist: at its memory
    /// ceiling the filter holds no copy of some created keys ([`GuardStats::at_ceiling`]),
    /// and only the guard knows to pass those lookups to the store.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.filter().is_empty());
    /// ```
    pub fn filter(&self) -> FilterRef<H> {
        self.core().filter()
    }

    /// The guard's store, for reads and for operations the guard does not cover. Writing to
    /// it directly breaks the consistency rules; go through the guard.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
    /// assert!(guard.store().is_empty());
    /// ```
    pub fn store(&self) -> &St {
        &self.inner.store
    }
}

/// How long a rebuild sleeps between looks at the gate: the creates it waits for are store
/// writes in flight.
const GATE_POLL: Duration = Duration::from_micros(200);

impl<St, H> Inner<St, H>
where
    St: Store,
    H: BuildHasher + Clone + Send + Sync + 'static,
{
    fn rebuild(
        &self,
        claim: RebuildClaim,
        reason: RebuildReason,
    ) -> Result<RebuildReport, GuardError<St::Error>> {
        let mut turn = self.core.begin_rebuild(claim, reason)?;
        // [memo.M5]: rows written behind the guard's back are looked up in the store again.
        self.memo.forget_all();
        while !turn.poll_gate()? {
            std::thread::sleep(GATE_POLL);
        }
        let page_size = self.core.policy().page_size_value();
        let mut cursor = None;
        loop {
            let page = match self.store.scan_keys(cursor.as_ref(), page_size) {
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
                None => return Ok(turn.finish()),
            }
        }
    }
}

impl<St: Store, H: BuildHasher + Clone + Send + Sync + 'static> CacheGuard<St, H> {
    /// Rebuilds the filter from the store while lookups and writes go on: scans every key
    /// into a new filter sized for them (times the policy's headroom) and swaps it in. The
    /// false-positive rate returns to the design point; grown tables and stale copies are
    /// gone. Blocks the calling thread for the scan; automatic rebuilds run on a background
    /// thread instead.
    ///
    /// Creates that start while the rebuild is pending insert into both filters; the scan
    /// starts only once every create that began earlier has finished its store write. A
    /// failed rebuild leaves the current filter in place.
    ///
    /// # Errors
    ///
    /// [`GuardError::Warming`] before the warm-up finished, [`GuardError::RebuildRunning`]
    /// while another rebuild runs, [`GuardError::Store`] if a scan fails,
    /// [`GuardError::RebuildFilter`] if the new filter cannot be built,
    /// [`GuardError::FilterFull`] or [`GuardError::FilterContended`] if it cannot take a key.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore, RebuildPolicy};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::with_policy(
    ///     CuckooFilter::with_capacity(100),
    ///     MemoryStore::new(),
    ///     RebuildPolicy::manual(),
    /// );
    /// guard.warm_up(100, |_| {})?;
    /// for k in 0..10_000u32 {
    ///     guard.put(&k, &())?; // the filter grows
    /// }
    /// assert!(guard.stats().filter_growth_steps > 0);
    /// let report = guard.rebuild()?;
    /// assert_eq!(report.keys_scanned, 10_000);
    /// assert_eq!(guard.stats().filter_growth_steps, 0);
    /// assert!(guard.may_contain(&9_999));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rebuild(&self) -> Result<RebuildReport, GuardError<St::Error>> {
        let claim = self.core().claim().ok_or(GuardError::RebuildRunning)?;
        self.inner.rebuild(claim, RebuildReason::Requested)
    }
}

/// Runs an automatic rebuild on a thread of its own, which owns the claim: a thread that
/// cannot be spawned drops it with its closure.
fn spawn_rebuild<St, H>(inner: &Arc<Inner<St, H>>, trigger: Triggered)
where
    St: Store + Send + Sync + 'static,
    St::Value: Send,
    St::Cursor: Send,
    H: BuildHasher + Clone + Send + Sync + 'static,
{
    let shared = Arc::clone(inner);
    let spawned = std::thread::Builder::new()
        .name("cuckoo-guard-rebuild".into())
        .spawn(move || {
            // The outcome is in the stats (`rebuilds`, `rebuilds_failed`, the last error).
            let _ = shared.rebuild(trigger.claim, trigger.reason);
        });
    if let Err(error) = spawned {
        // No error of the write that triggered it: counted, as a skipped rebuild.
        inner
            .core
            .rebuild_skipped(&format!("no thread for the rebuild ({error})"));
    }
}

impl<St: Store, H> fmt::Debug for CacheGuard<St, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheGuard")
            .field("filter", &self.inner.core.filter())
            .finish_non_exhaustive()
    }
}
