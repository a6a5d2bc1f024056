//! The store traits a [`CacheGuard`](super::CacheGuard) sits in front of.

use std::future::Future;
use std::hash::Hash;

use super::SealSecret;

/// What a [`Store::put`] did to the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Written {
    /// The key did not exist; the write created it.
    Created,
    /// The key existed; the write only replaced its value.
    Updated,
}

/// One page of a key scan: the keys, and where the next page starts (`None` after the last).
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::ScanPage;
///
/// let last: ScanPage<u32, u32> = ScanPage { keys: vec![7, 9], next: None };
/// assert!(last.next.is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPage<K, C> {
    /// Keys of this page.
    pub keys: Vec<K>,
    /// The cursor to pass for the next page, or `None` if the scan is complete.
    pub next: Option<C>,
}

/// A synchronous backing store: the source of truth the guard keeps its filter in sync with.
///
/// Every write to the store must go through the guard; a key created behind its back is
/// unknown to the filter, which then reports it absent.
///
/// # Contract
///
/// - `put` is an upsert and says truthfully whether it created the key or updated it; two
///   concurrent `put`s of one new key must report one `Created` and one `Updated`.
/// - `delete` says whether a key was deleted.
/// - A `get` that begins after a `put` returned sees that put's write (no stale replica reads):
///   the guard's false-positive memo trusts a `get`'s "absent" until the next `put` of the key.
/// - A scan started with `scan_keys(None, n)` and continued with each page's `next` returns
///   every key that exists for the whole scan exactly once.
/// - Errors are returned, never swallowed into `Ok(None)` or `Ok(false)`.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{MemoryStore, Store, Written};
///
/// let store = MemoryStore::<u64, String>::new();
/// assert_eq!(store.put(&1, &"one".to_string())?, Written::Created);
/// assert_eq!(store.put(&1, &"uno".to_string())?, Written::Updated);
/// assert_eq!(store.get(&1)?.as_deref(), Some("uno"));
/// assert!(store.delete(&1)?);
/// # Ok::<(), std::convert::Infallible>(())
/// ```
pub trait Store {
    /// The key type; the guard hashes it into the filter, and keeps copies of a few absent
    /// ones in its false-positive memo (compared with `Eq`, shared between threads).
    type Key: Hash + Eq + Clone + Send;
    /// The value type.
    type Value;
    /// Where a key scan resumes.
    type Cursor;
    /// The store's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The value of `key`, or `None` if it does not exist.
    ///
    /// # Errors
    ///
    /// Any failure of the store.
    fn get(&self, key: &Self::Key) -> Result<Option<Self::Value>, Self::Error>;

    /// The values of `keys`, in their order (`None` for a key that does not exist): one
    /// round trip for a batch, where the store has a query for it (the guard's
    /// [`get_many`](super::CacheGuard::get_many)). The `i`-th value must be `keys[i]`'s: a
    /// query whose rows come back in the database's order must put them back in place (the
    /// guard checks only the count, and asks key by key if it is wrong). Every value read must reflect the store
    /// as of some moment after the call began, as [`get`](Self::get)'s does. The default
    /// calls `get` for each key.
    ///
    /// # Errors
    ///
    /// Any failure of the store.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{MemoryStore, Store};
    ///
    /// let store = MemoryStore::from_rows([(1u8, 'a'), (3, 'c')]);
    /// assert_eq!(store.get_many(&[3, 2, 1])?, [Some('c'), None, Some('a')]);
    /// # Ok::<(), std::convert::Infallible>(())
    /// ```
    fn get_many(&self, keys: &[Self::Key]) -> Result<Vec<Option<Self::Value>>, Self::Error> {
        keys.iter().map(|key| self.get(key)).collect()
    }

    /// Creates or updates `key`, reporting which.
    ///
    /// # Errors
    ///
    /// Any failure of the store; [`write_outcome_unknown`](Self::write_outcome_unknown) says
    /// whether the write may still have been applied.
    fn put(&self, key: &Self::Key, value: &Self::Value) -> Result<Written, Self::Error>;

    /// Deletes `key`, reporting whether it existed.
    ///
    /// # Errors
    ///
    /// Any failure of the store.
    fn delete(&self, key: &Self::Key) -> Result<bool, Self::Error>;

    /// Up to `limit` keys, starting at `cursor` (`None`: the beginning).
    ///
    /// # Errors
    ///
    /// Any failure of the store.
    fn scan_keys(
        &self,
        cursor: Option<&Self::Cursor>,
        limit: usize,
    ) -> Result<ScanPage<Self::Key, Self::Cursor>, Self::Error>;

    /// Whether a failed `put` may nevertheless have been applied (a connection lost during
    /// the commit, say). The guard keeps the filter copy it added for such a write, because
    /// removing it could hide a row that did get written; for a definite failure it removes
    /// the copy. The default, `true`, is always safe: at worst a stale false positive.
    fn write_outcome_unknown(error: &Self::Error) -> bool {
        let _ = error;
        true
    }

    /// Whether a `put` can no longer change the store once its call has ended, returned
    /// (whatever it returned) or unwound: it writes on the calling thread, within the call,
    /// and leaves nothing behind that could still apply the write (no other thread, queue or
    /// server holding it, no transaction left open that a later call could commit).
    ///
    /// A guard records a put whose outcome it cannot know (an error
    /// [`write_outcome_unknown`](Self::write_outcome_unknown) says may have been applied, a
    /// panic) as an orphaned write ([`GuardStats::orphaned_writes`](super::GuardStats)) and
    /// inserts its key into the filter of every rebuild, since the write might land after the
    /// rebuild's scan passed the key. When this is `true`, the next rebuild drops the orphan
    /// instead: its scan begins after the call ended, so it finds the key if the write left
    /// it in the store. The default, `false`, is always safe: the guard keeps its orphans
    /// (and their filter copies) for good.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{MemoryStore, Store};
    ///
    /// // A memory store writes inside the call, under its lock.
    /// assert!(<MemoryStore<u8, u8> as Store>::PUT_ENDS_WITH_CALL);
    /// ```
    const PUT_ENDS_WITH_CALL: bool = false;

    /// Whether this store keeps a *seal*: a small value stored beside its rows that names the
    /// snapshot a guard wrote, which [`read_seal`](Self::read_seal) returns,
    /// [`write_seal`](Self::write_seal) sets, and **every `put` and `delete` clears in the same
    /// atomic step as its write** (the same transaction, script or lock). A guard trusts a
    /// snapshot at restart only if the store still holds the seal naming it
    /// ([`CacheGuard::restore`](super::CacheGuard::restore)), so a store that cannot clear the
    /// seal atomically with each write must leave this `false` (the default): its guards
    /// always scan at restart.
    ///
    /// The clearing needs to be ordered against `write_seal` only in the store's own order:
    /// a write that begins after `write_seal` returned must see and clear the seal, but one
    /// already under way may read the seal as it stood before (as a PostgreSQL statement
    /// under READ COMMITTED does) and keep it; the guard's seal waits for the creates in
    /// flight at its seal write before it takes the snapshot.
    const SEALS: bool = false;

    /// The seal the store holds, if any (see [`SEALS`](Self::SEALS)). A seal stored in a
    /// format this build does not read (not 32 bytes: an older build's integer, say) reads as
    /// `None`, never as an error or a seal.
    ///
    /// # Errors
    ///
    /// Any failure of the store.
    fn read_seal(&self) -> Result<Option<SealSecret>, Self::Error> {
        Ok(None)
    }

    /// Sets the seal to `secret`, replacing any (see [`SEALS`](Self::SEALS)). Called only if
    /// `SEALS` is true. The secret authenticates the snapshot it seals: keep it where only
    /// those who may write the store can read it (beside the rows).
    ///
    /// # Errors
    ///
    /// Any failure of the store; the guard then does not trust the snapshot it was sealing.
    fn write_seal(&self, secret: &SealSecret) -> Result<(), Self::Error> {
        let _ = secret;
        Ok(())
    }

    /// Up to `n` distinct keys chosen at random among the rows the store holds now, in no
    /// particular order; empty if the store is. Fewer than `n` come back when the store holds
    /// fewer rows; an implementation may document other cases. For a drift sentinel, which
    /// checks sampled keys against the filter: a key missing from the filter is a row written
    /// around the guard, unless the key was deleted through the guard after it was sampled,
    /// so read it again ([`get`](Self::get)) before counting it as drift.
    ///
    /// The default reads every key ([`scan_keys`](Self::scan_keys) from the start, in pages
    /// of 1,000) and keeps a reservoir sample: every key the scan returns is equally likely,
    /// at the cost of O(rows) store reads and O(`n`) memory per call. A store with a cheaper
    /// sampler overrides this, documents its bias, and says so with
    /// [`fast_sampling`](Self::fast_sampling).
    ///
    /// # Errors
    ///
    /// Any failure of the store.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{MemoryStore, Store};
    ///
    /// let store = MemoryStore::from_rows((0..1_000u32).map(|k| (k, k)));
    /// let sample = store.sample_keys(10)?;
    /// assert_eq!(sample.len(), 10);
    /// assert!(sample.iter().all(|k| *k < 1_000));
    /// assert!(MemoryStore::<u32, u32>::new().sample_keys(10)?.is_empty());
    /// # Ok::<(), std::convert::Infallible>(())
    /// ```
    fn sample_keys(&self, n: usize) -> Result<Vec<Self::Key>, Self::Error> {
        sample_by_scan(self, n)
    }

    /// Whether [`sample_keys`](Self::sample_keys) costs about O(`n`) store reads rather
    /// than a pass over every row, so a sampler may run it often. The default, `false`,
    /// fits the default `sample_keys`, which scans every key.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{MemoryStore, Store};
    ///
    /// // A memory store samples in one pass over its map.
    /// assert!(!Store::fast_sampling(&MemoryStore::<u8, u8>::new()));
    /// ```
    fn fast_sampling(&self) -> bool {
        false
    }
}

/// An asynchronous backing store; the same contract as [`Store`].
///
/// Implementations may write `async fn` for each method; the futures must be `Send` so the
/// guard can be used from multi-threaded runtimes.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{AsyncStore, MemoryStore, Written};
///
/// # futures_lite_block_on(async {
/// let store = MemoryStore::<u64, u64>::new();
/// assert_eq!(AsyncStore::put(&store, &1, &10).await?, Written::Created);
/// assert_eq!(AsyncStore::get(&store, &1).await?, Some(10));
/// # Ok::<(), std::convert::Infallible>(())
/// # }).unwrap();
/// # fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let waker = std::task::Waker::noop();
/// #     let mut cx = std::task::Context::from_waker(&waker);
/// #     let mut f = std::pin::pin!(f);
/// #     loop {
/// #         if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; }
/// #     }
/// # }
/// ```
pub trait AsyncStore: Send + Sync {
    /// As [`Store::Key`].
    type Key: Hash + Eq + Clone + Send + Sync;
    /// The value type.
    type Value: Send;
    /// Where a key scan resumes.
    type Cursor: Send + Sync;
    /// The store's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// As [`Store::get`].
    fn get(
        &self,
        key: &Self::Key,
    ) -> impl Future<Output = Result<Option<Self::Value>, Self::Error>> + Send;

    /// As [`Store::get_many`]: the values of `keys`, in their order. The default awaits
    /// [`get`](Self::get) for each key in turn.
    fn get_many(
        &self,
        keys: &[Self::Key],
    ) -> impl Future<Output = Result<Vec<Option<Self::Value>>, Self::Error>> + Send {
        async move {
            let mut values = Vec::with_capacity(keys.len());
            for key in keys {
                values.push(self.get(key).await?);
            }
            Ok(values)
        }
    }

    /// As [`Store::put`].
    fn put(
        &self,
        key: &Self::Key,
        value: &Self::Value,
    ) -> impl Future<Output = Result<Written, Self::Error>> + Send;

    /// As [`Store::delete`].
    fn delete(&self, key: &Self::Key) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// As [`Store::scan_keys`].
    fn scan_keys(
        &self,
        cursor: Option<&Self::Cursor>,
        limit: usize,
    ) -> impl Future<Output = Result<ScanPage<Self::Key, Self::Cursor>, Self::Error>> + Send;

    /// As [`Store::write_outcome_unknown`].
    fn write_outcome_unknown(error: &Self::Error) -> bool {
        let _ = error;
        true
    }

    /// Whether a `put` can no longer change the store once its future has completed or been
    /// dropped (or panicked): the future makes its write while it is polled and leaves
    /// nothing behind, as [`Store::PUT_ENDS_WITH_CALL`] asks of a call. A guard then drops an
    /// orphaned write at its next rebuild ([`Store::PUT_ENDS_WITH_CALL`] says why that is
    /// safe).
    ///
    /// Leave it `false` (the default, always safe) for a store whose write outlives its
    /// future: a statement sent to a server keeps running after the client drops the
    /// future, a command queued on a multiplexed connection may still be sent, and a call
    /// handed to another thread (`spawn_blocking`) runs to its end whatever happens to the
    /// future. An adapter running a [`Store`] on another thread must not copy the store's
    /// [`PUT_ENDS_WITH_CALL`](Store::PUT_ENDS_WITH_CALL) here.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncStore, MemoryStore};
    ///
    /// // A memory store's put future writes when first polled, under its lock.
    /// assert!(<MemoryStore<u8, u8> as AsyncStore>::PUT_ENDS_WITH_FUTURE);
    /// ```
    const PUT_ENDS_WITH_FUTURE: bool = false;

    /// As [`Store::SEALS`]: every `put` and `delete` clears the seal in the same atomic step
    /// as its write, or this stays `false`.
    const SEALS: bool = false;

    /// As [`Store::read_seal`].
    fn read_seal(&self) -> impl Future<Output = Result<Option<SealSecret>, Self::Error>> + Send {
        std::future::ready(Ok(None))
    }

    /// As [`Store::write_seal`].
    fn write_seal(
        &self,
        secret: &SealSecret,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let _ = secret;
        std::future::ready(Ok(()))
    }

    /// As [`Store::sample_keys`]: up to `n` distinct keys chosen at random among the rows
    /// the store holds now. The default scans every key into a reservoir sample (O(rows)
    /// store reads); a store with a cheaper sampler overrides it and
    /// [`fast_sampling`](Self::fast_sampling).
    ///
    /// # Errors
    ///
    /// Any failure of the store.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncStore, MemoryStore};
    ///
    /// # futures_lite_block_on(async {
    /// let store = MemoryStore::from_rows((0..100u64).map(|k| (k, k)));
    /// let sample = AsyncStore::sample_keys(&store, 5).await?;
    /// assert_eq!(sample.len(), 5);
    /// # Ok::<(), std::convert::Infallible>(())
    /// # }).unwrap();
    /// # fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     let waker = std::task::Waker::noop();
    /// #     let mut cx = std::task::Context::from_waker(&waker);
    /// #     let mut f = std::pin::pin!(f);
    /// #     loop {
    /// #         if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; }
    /// #     }
    /// # }
    /// ```
    fn sample_keys(
        &self,
        n: usize,
    ) -> impl Future<Output = Result<Vec<Self::Key>, Self::Error>> + Send {
        sample_by_scan_async(self, n)
    }

    /// As [`Store::fast_sampling`]: whether `sample_keys` costs about O(`n`) store reads
    /// rather than a pass over every row. The default is `false`.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncStore, MemoryStore};
    ///
    /// assert!(!AsyncStore::fast_sampling(&MemoryStore::<u8, u8>::new()));
    /// ```
    fn fast_sampling(&self) -> bool {
        false
    }
}

/// A shared store, as for [`Store`].
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// let store = Arc::new(MemoryStore::<u8, u8>::new());
/// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), Arc::clone(&store));
/// assert!(guard.store().is_empty());
/// ```
impl<S: AsyncStore + ?Sized> AsyncStore for std::sync::Arc<S> {
    type Key = S::Key;
    type Value = S::Value;
    type Cursor = S::Cursor;
    type Error = S::Error;

    fn get(
        &self,
        key: &Self::Key,
    ) -> impl Future<Output = Result<Option<Self::Value>, Self::Error>> + Send {
        (**self).get(key)
    }

    fn get_many(
        &self,
        keys: &[Self::Key],
    ) -> impl Future<Output = Result<Vec<Option<Self::Value>>, Self::Error>> + Send {
        (**self).get_many(keys)
    }

    fn put(
        &self,
        key: &Self::Key,
        value: &Self::Value,
    ) -> impl Future<Output = Result<Written, Self::Error>> + Send {
        (**self).put(key, value)
    }

    fn delete(&self, key: &Self::Key) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        (**self).delete(key)
    }

    fn scan_keys(
        &self,
        cursor: Option<&Self::Cursor>,
        limit: usize,
    ) -> impl Future<Output = Result<ScanPage<Self::Key, Self::Cursor>, Self::Error>> + Send {
        (**self).scan_keys(cursor, limit)
    }

    fn write_outcome_unknown(error: &Self::Error) -> bool {
        S::write_outcome_unknown(error)
    }

    const PUT_ENDS_WITH_FUTURE: bool = S::PUT_ENDS_WITH_FUTURE;

    const SEALS: bool = S::SEALS;

    fn read_seal(&self) -> impl Future<Output = Result<Option<SealSecret>, Self::Error>> + Send {
        (**self).read_seal()
    }

    fn write_seal(
        &self,
        secret: &SealSecret,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        (**self).write_seal(secret)
    }

    fn sample_keys(
        &self,
        n: usize,
    ) -> impl Future<Output = Result<Vec<Self::Key>, Self::Error>> + Send {
        (**self).sample_keys(n)
    }

    fn fast_sampling(&self) -> bool {
        (**self).fast_sampling()
    }
}

/// A shared store: every call goes to the store behind the `Arc`, so several guards in turn
/// (a guard and the one [`restore`](super::CacheGuard::restore)d after it, say) can use one
/// store value.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use cuckoo_guard::guard::{MemoryStore, Store, Written};
///
/// let store = Arc::new(MemoryStore::<u8, u8>::new());
/// assert_eq!(Store::put(&Arc::clone(&store), &1, &1)?, Written::Created);
/// assert_eq!(store.len(), 1);
/// # Ok::<(), std::convert::Infallible>(())
/// ```
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    type Key = S::Key;
    type Value = S::Value;
    type Cursor = S::Cursor;
    type Error = S::Error;

    fn get(&self, key: &Self::Key) -> Result<Option<Self::Value>, Self::Error> {
        (**self).get(key)
    }

    fn get_many(&self, keys: &[Self::Key]) -> Result<Vec<Option<Self::Value>>, Self::Error> {
        (**self).get_many(keys)
    }

    fn put(&self, key: &Self::Key, value: &Self::Value) -> Result<Written, Self::Error> {
        (**self).put(key, value)
    }

    fn delete(&self, key: &Self::Key) -> Result<bool, Self::Error> {
        (**self).delete(key)
    }

    fn scan_keys(
        &self,
        cursor: Option<&Self::Cursor>,
        limit: usize,
    ) -> Result<ScanPage<Self::Key, Self::Cursor>, Self::Error> {
        (**self).scan_keys(cursor, limit)
    }

    fn write_outcome_unknown(error: &Self::Error) -> bool {
        S::write_outcome_unknown(error)
    }

    const PUT_ENDS_WITH_CALL: bool = S::PUT_ENDS_WITH_CALL;

    const SEALS: bool = S::SEALS;

    fn read_seal(&self) -> Result<Option<SealSecret>, Self::Error> {
        (**self).read_seal()
    }

    fn write_seal(&self, secret: &SealSecret) -> Result<(), Self::Error> {
        (**self).write_seal(secret)
    }

    fn sample_keys(&self, n: usize) -> Result<Vec<Self::Key>, Self::Error> {
        (**self).sample_keys(n)
    }

    fn fast_sampling(&self) -> bool {
        (**self).fast_sampling()
    }
}

/// Keys per page of the default [`Store::sample_keys`]'s scan.
const SAMPLE_SCAN_PAGE: usize = 1_000;

/// The default [`Store::sample_keys`]: a reservoir sample over a scan of every key. Also the
/// fallback of stores whose own sampler cannot serve a table or server.
pub(crate) fn sample_by_scan<S: Store + ?Sized>(
    store: &S,
    n: usize,
) -> Result<Vec<S::Key>, S::Error> {
    let mut reservoir = Reservoir::new(n);
    if n == 0 {
        return Ok(reservoir.into_keys());
    }
    let mut cursor = None;
    loop {
        let page = store.scan_keys(cursor.as_ref(), SAMPLE_SCAN_PAGE)?;
        page.keys.into_iter().for_each(|key| reservoir.offer(key));
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(reservoir.into_keys()),
        }
    }
}

/// The default [`AsyncStore::sample_keys`], as [`sample_by_scan`].
pub(crate) async fn sample_by_scan_async<S: AsyncStore + ?Sized>(
    store: &S,
    n: usize,
) -> Result<Vec<S::Key>, S::Error> {
    let mut reservoir = Reservoir::new(n);
    if n == 0 {
        return Ok(reservoir.into_keys());
    }
    let mut cursor = None;
    loop {
        let page = store.scan_keys(cursor.as_ref(), SAMPLE_SCAN_PAGE).await?;
        page.keys.into_iter().for_each(|key| reservoir.offer(key));
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(reservoir.into_keys()),
        }
    }
}

/// A uniform sample of `n` items from a stream of unknown length (Vitter's algorithm R): the
/// first `n` fill it, and the `i`-th after them (counting from 0) replaces a random one with
/// probability `n / (i + 1)`.
struct Reservoir<K> {
    n: usize,
    seen: u64,
    keys: Vec<K>,
    rng: SampleRng,
}

impl<K> Reservoir<K> {
    fn new(n: usize) -> Self {
        Reservoir {
            n,
            seen: 0,
            // `n` may be far above the rows there are: grow as keys come.
            keys: Vec::with_capacity(n.min(SAMPLE_SCAN_PAGE)),
            rng: SampleRng::new(),
        }
    }

    fn offer(&mut self, key: K) {
        if self.keys.len() < self.n {
            self.keys.push(key);
        } else {
            let slot = self.rng.below(self.seen.saturating_add(1));
            if let Some(kept) = usize::try_from(slot)
                .ok()
                .and_then(|s| self.keys.get_mut(s))
            {
                *kept = key;
            }
        }
        self.seen = self.seen.saturating_add(1);
    }

    fn into_keys(self) -> Vec<K> {
        self.keys
    }
}

/// The pseudo-random numbers of key sampling (splitmix64), seeded from the operating
/// system's generator, or from the clock and an address if it fails: sampling needs spread,
/// not secrecy.
#[derive(Debug, Clone)]
pub(crate) struct SampleRng(u64);

impl SampleRng {
    pub(crate) fn new() -> Self {
        let seed = getrandom::u64().unwrap_or_else(|_| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos() as u64);
            let place = std::ptr::addr_of!(now) as usize as u64;
            now ^ place.rotate_left(32) ^ u64::from(std::process::id())
        });
        SampleRng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`, each equally likely (Lemire's multiply-and-reject); 0 if
    /// `bound` is 0.
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            return 0;
        }
        let threshold = bound.wrapping_neg() % bound;
        loop {
            let wide = u128::from(self.next_u64()) * u128::from(bound);
            if (wide as u64) >= threshold {
                return (wide >> 64) as u64;
            }
        }
    }
}
