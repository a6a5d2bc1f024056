//! [`Blocking`]: a synchronous [`Store`] run as an [`AsyncStore`] on tokio's blocking threads.
//!
//! Each call clones what it borrows (the key, the value, the cursor, the secret) into a
//! closure that runs the sync call on `tokio::task::spawn_blocking`, and maps the task's end:
//! a store error is [`BlockingError::Store`], a panic in the store resumes in the caller, a
//! task the runtime dropped unrun (it is shutting down) is [`BlockingError::Shutdown`], and a
//! call with no runtime to run on is [`BlockingError::NoRuntime`].
//!
//! A future dropped while its closure runs does not stop the closure: the store call still
//! completes, at any later time. The guard already allows for it: a put future dropped
//! before its end leaves its key an orphan whose write may land at any later time, kept in
//! the filter and in every later rebuild (the orphans of the `core` module); a dropped delete removes
//! nothing from the filter (a stale copy at worst); a dropped lookup installs nothing in the
//! memo; and a dropped seal never writes the file its late seal write would name (the file is
//! written only after the seal write returned), so at worst a later restart scans.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::runtime::Handle;

use super::{AsyncStore, ScanPage, SealSecret, Store, Written};

/// A synchronous [`Store`] as an [`AsyncStore`]: every call runs on tokio's blocking threads
/// ([`tokio::task::spawn_blocking`]), so an [`AsyncCacheGuard`](super::AsyncCacheGuard) can
/// sit in front of it without stalling the runtime's workers.
///
/// The store is shared behind an [`Arc`] (each call's closure holds a clone), and cloning a
/// `Blocking` shares the same store. Each call clones its key (and a put its value) into its
/// closure. Calls run on the runtime given to [`with_handle`](Self::with_handle), or else on
/// the runtime that polls them; polled outside any, they fail with
/// [`BlockingError::NoRuntime`].
///
/// # Dropped futures
///
/// A blocking closure cannot be cancelled: a future dropped while its store call runs leaves
/// the call running, so a `put` (or `delete`) may land after its future was dropped. The guard
/// treats a put dropped before its end as a write of unknown outcome that may land at any
/// later time (it keeps the key's filter copies, and inserts the key into every later
/// rebuild), a dropped delete keeps its copy, and a dropped seal writes no file for its seal
/// to name, so a late write never causes a false negative.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{AsyncCacheGuard, Blocking, MemoryStore, Written};
/// use cuckoo_guard::CuckooFilter;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Any `Store` (an `SqliteStore`, say); its calls run on tokio's blocking threads.
/// let store = Blocking::new(MemoryStore::from_rows((0..100u64).map(|k| (k, k * 10))));
/// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000), store);
/// guard.warm_up(64, |_| {}).await?;
///
/// assert_eq!(guard.get(&7).await?, Some(70));
/// assert_eq!(guard.get(&5_000).await?, None); // blocked: the store was not asked
/// assert_eq!(guard.put(&500, &5).await?, Written::Created);
/// assert_eq!(guard.store().get_ref().len(), 101);
/// # Ok(()) }
/// ```
pub struct Blocking<S> {
    store: Arc<S>,
    handle: Option<Handle>,
}

impl<S> Blocking<S> {
    /// `store`, its calls run on the runtime that polls them.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{Blocking, MemoryStore};
    ///
    /// let store = Blocking::new(MemoryStore::<u64, u64>::new());
    /// assert!(store.get_ref().is_empty());
    /// ```
    pub fn new(store: S) -> Self {
        Blocking::from_arc(Arc::new(store))
    }

    /// A store already shared (with a sync [`CacheGuard`](super::CacheGuard), say).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cuckoo_guard::guard::{Blocking, MemoryStore};
    ///
    /// let shared = Arc::new(MemoryStore::<u64, u64>::new());
    /// let store = Blocking::from_arc(Arc::clone(&shared));
    /// assert!(Arc::ptr_eq(store.shared(), &shared));
    /// ```
    pub fn from_arc(store: Arc<S>) -> Self {
        Blocking {
            store,
            handle: None,
        }
    }

    /// Runs the calls on the blocking threads of the runtime `handle` names, whatever runtime
    /// (if any) polls them. Once that runtime has shut down, calls fail with
    /// [`BlockingError::Shutdown`].
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{AsyncStore, Blocking, MemoryStore};
    ///
    /// let runtime = tokio::runtime::Runtime::new()?;
    /// let store = Blocking::new(MemoryStore::from_rows([(1u64, 10u64)]))
    ///     .with_handle(runtime.handle().clone());
    /// // Polled by a runtime of its own; the store call runs on `runtime`'s blocking threads.
    /// let other = tokio::runtime::Builder::new_current_thread().build()?;
    /// assert_eq!(other.block_on(store.get(&1))?, Some(10));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_handle(mut self, handle: Handle) -> Self {
        self.handle = Some(handle);
        self
    }

    /// The store.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{Blocking, MemoryStore};
    ///
    /// let store = Blocking::new(MemoryStore::from_rows([(1u8, 1u8)]));
    /// assert_eq!(store.get_ref().len(), 1);
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.store
    }

    /// The shared store (a clone of it is the same store, usable from sync code).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{Blocking, MemoryStore, Store};
    ///
    /// let store = Blocking::new(MemoryStore::<u8, u8>::new());
    /// Store::put(&**store.shared(), &1, &1)?;
    /// assert_eq!(store.get_ref().len(), 1);
    /// # Ok::<(), std::convert::Infallible>(())
    /// ```
    pub fn shared(&self) -> &Arc<S> {
        &self.store
    }

    /// The shared store, unwrapped.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{Blocking, MemoryStore};
    ///
    /// let store = Blocking::new(MemoryStore::<u8, u8>::new()).into_inner();
    /// assert!(store.is_empty());
    /// ```
    pub fn into_inner(self) -> Arc<S> {
        self.store
    }
}

impl<S> Clone for Blocking<S> {
    fn clone(&self) -> Self {
        Blocking {
            store: Arc::clone(&self.store),
            handle: self.handle.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for Blocking<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Blocking")
            .field("store", &self.store)
            .field("handle", &self.handle.as_ref().map(Handle::id))
            .finish()
    }
}

impl<S> Blocking<S>
where
    S: Store + Send + Sync + 'static,
    S::Error: Send,
{
    /// Runs `call` on the store on a blocking thread. Resumes the call's panic, if any.
    fn run<T, F>(&self, call: F) -> impl Future<Output = Result<T, BlockingError<S::Error>>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&S) -> Result<T, S::Error> + Send + 'static,
    {
        let (store, handle) = (Arc::clone(&self.store), self.handle.clone());
        async move {
            // The runtime polling the call, looked up when it is first polled.
            let handle = match handle {
                Some(handle) => handle,
                None => Handle::try_current().map_err(|_| BlockingError::NoRuntime)?,
            };
            match handle.spawn_blocking(move || call(&store)).await {
                Ok(result) => result.map_err(BlockingError::Store),
                Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
                Err(_) => Err(BlockingError::Shutdown),
            }
        }
    }
}

impl<S> AsyncStore for Blocking<S>
where
    S: Store + Send + Sync + 'static,
    S::Key: Sync + 'static,
    S::Value: Clone + Send + 'static,
    S::Cursor: Clone + Send + Sync + 'static,
{
    type Key = S::Key;
    type Value = S::Value;
    type Cursor = S::Cursor;
    type Error = BlockingError<S::Error>;

    fn get(
        &self,
        key: &S::Key,
    ) -> impl Future<Output = Result<Option<S::Value>, Self::Error>> + Send {
        let key = key.clone();
        self.run(move |store| store.get(&key))
    }

    /// The store's [`Store::get_many`], in one blocking call; an empty batch makes none.
    fn get_many(
        &self,
        keys: &[S::Key],
    ) -> impl Future<Output = Result<Vec<Option<S::Value>>, Self::Error>> + Send {
        let call = (!keys.is_empty()).then(|| {
            let keys = keys.to_vec();
            self.run(move |store| store.get_many(&keys))
        });
        async move {
            match call {
                Some(call) => call.await,
                None => Ok(Vec::new()),
            }
        }
    }

    fn put(
        &self,
        key: &S::Key,
        value: &S::Value,
    ) -> impl Future<Output = Result<Written, Self::Error>> + Send {
        let (key, value) = (key.clone(), value.clone());
        self.run(move |store| store.put(&key, &value))
    }

    fn delete(&self, key: &S::Key) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        let key = key.clone();
        self.run(move |store| store.delete(&key))
    }

    fn scan_keys(
        &self,
        cursor: Option<&S::Cursor>,
        limit: usize,
    ) -> impl Future<Output = Result<ScanPage<S::Key, S::Cursor>, Self::Error>> + Send {
        let cursor = cursor.cloned();
        self.run(move |store| store.scan_keys(cursor.as_ref(), limit))
    }

    /// The store's answer for its own errors. A call that found no runtime never reached the
    /// store: a definite failure. A call the runtime dropped unrun never reached it either,
    /// but it counts as unknown, which is always safe (a stale filter copy at worst).
    fn write_outcome_unknown(error: &Self::Error) -> bool {
        match error {
            BlockingError::Store(error) => S::write_outcome_unknown(error),
            BlockingError::NoRuntime => false,
            BlockingError::Shutdown => true,
        }
    }

    /// `false` whatever `S` declares: a dropped future does not stop its blocking call, so a
    /// put may still land after its future ended, and its orphan must stay.
    const PUT_ENDS_WITH_FUTURE: bool = false;

    const SEALS: bool = S::SEALS;

    fn read_seal(&self) -> impl Future<Output = Result<Option<SealSecret>, Self::Error>> + Send {
        self.run(|store| store.read_seal())
    }

    fn write_seal(
        &self,
        secret: &SealSecret,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let secret = secret.clone();
        self.run(move |store| store.write_seal(&secret))
    }

    fn sample_keys(
        &self,
        n: usize,
    ) -> impl Future<Output = Result<Vec<S::Key>, Self::Error>> + Send {
        self.run(move |store| store.sample_keys(n))
    }

    fn fast_sampling(&self) -> bool {
        self.store.fast_sampling()
    }
}

/// Why a [`Blocking`] store call failed.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use cuckoo_guard::guard::{AsyncStore, Blocking, BlockingError, MemoryStore};
///
/// // Polled outside any tokio runtime, a call has nowhere to run.
/// let store = Blocking::new(MemoryStore::<u64, u64>::new());
/// let outside = futures_lite_block_on(store.get(&1));
/// assert!(matches!(outside, Err(BlockingError::NoRuntime)));
/// let error: BlockingError<Infallible> = BlockingError::Shutdown;
/// assert!(error.to_string().contains("shutting down"));
/// # fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let waker = std::task::Waker::noop();
/// #     let mut cx = std::task::Context::from_waker(&waker);
/// #     let mut f = std::pin::pin!(f);
/// #     loop {
/// #         if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; }
/// #     }
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum BlockingError<E> {
    /// The store's call returned this error.
    Store(E),
    /// The runtime is shutting down and dropped the call before it ran: the store was not
    /// called.
    Shutdown,
    /// The call was made outside a tokio runtime, and the store has no runtime of its own
    /// ([`Blocking::with_handle`]): the store was not called.
    NoRuntime,
}

impl<E: fmt::Display> fmt::Display for BlockingError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockingError::Store(error) => error.fmt(f),
            BlockingError::Shutdown => write!(
                f,
                "the tokio runtime is shutting down: the store call did not run"
            ),
            BlockingError::NoRuntime => write!(
                f,
                "no tokio runtime to run the store call on (call it from a runtime, or give \
                 the store one with `Blocking::with_handle`)"
            ),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for BlockingError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BlockingError::Store(error) => Some(error),
            BlockingError::Shutdown | BlockingError::NoRuntime => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    use super::*;
    use crate::guard::{AsyncCacheGuard, GuardError, MemoryStore};
    use crate::CuckooFilter;

    type Mem = MemoryStore<u64, u64>;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Every method of the trait reaches the store, and answers as the store does.
    #[test]
    fn every_call_reaches_the_store() {
        let store = Blocking::new(Mem::from_rows((0..10).map(|k| (k, k))));
        runtime().block_on(async {
            assert_eq!(store.get(&3).await.unwrap(), Some(3));
            assert_eq!(store.put(&3, &30).await.unwrap(), Written::Updated);
            assert_eq!(store.put(&10, &100).await.unwrap(), Written::Created);
            assert!(store.delete(&0).await.unwrap());
            assert!(!store.delete(&0).await.unwrap());
            let first = store.scan_keys(None, 4).await.unwrap();
            assert_eq!(first.keys, [1, 2, 3, 4]);
            let rest = store.scan_keys(first.next.as_ref(), 100).await.unwrap();
            assert_eq!(rest.keys, [5, 6, 7, 8, 9, 10]);
            assert!(rest.next.is_none());
            assert!(store.read_seal().await.unwrap().is_none());
            let secret = SealSecret::random().unwrap();
            store.write_seal(&secret).await.unwrap();
            let read = store
                .read_seal()
                .await
                .unwrap()
                .expect("the seal just written");
            assert_eq!(read.id(), secret.id());
        });
        assert_eq!(Store::get(store.get_ref(), &3).unwrap(), Some(30));
        assert_eq!(store.get_ref().len(), 10);
    }

    /// A guard over the bridge: warm-up, lookups, writes, a seal and a trusted restore (the
    /// seal methods and `SEALS` carried through).
    #[test]
    fn a_guard_over_the_bridge_seals_and_restores() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bridge.cgsnap");
        let shared = Arc::new(Mem::from_rows((0..1_000).map(|k| (k, k))));
        runtime().block_on(async {
            let store = Blocking::from_arc(Arc::clone(&shared));
            let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(4_000), store);
            guard.warm_up(100, |_| {}).await.unwrap();
            assert_eq!(guard.get(&7).await.unwrap(), Some(7));
            assert_eq!(guard.get(&5_000).await.unwrap(), None);
            assert_eq!(guard.put(&5_000, &1).await.unwrap(), Written::Created);
            assert!(guard.delete(&8).await.unwrap());
            guard.seal(&path).await.unwrap();
            drop(guard);

            let store = Blocking::from_arc(Arc::clone(&shared));
            let (guard, restart) =
                AsyncCacheGuard::restore(&path, store, || CuckooFilter::with_capacity(4_000)).await;
            assert!(restart.is_trusted(), "{restart}");
            assert_eq!(guard.get(&5_000).await.unwrap(), Some(1));
            assert_eq!(guard.get(&8).await.unwrap(), None);
            // A write clears the seal through the bridge: the next restore distrusts the file.
            assert_eq!(guard.put(&6_000, &1).await.unwrap(), Written::Created);
            drop(guard);
            let store = Blocking::from_arc(Arc::clone(&shared));
            let (_, restart) =
                AsyncCacheGuard::restore(&path, store, || CuckooFilter::with_capacity(4_000)).await;
            assert!(!restart.is_trusted(), "{restart}");
        });
    }

    /// A store that counts its `get` and `get_many` calls.
    struct Counting {
        inner: Mem,
        gets: crate::sync::AtomicUsize,
        batches: crate::sync::AtomicUsize,
    }

    impl Store for Counting {
        type Key = u64;
        type Value = u64;
        type Cursor = u64;
        type Error = Infallible;

        fn get(&self, key: &u64) -> Result<Option<u64>, Infallible> {
            self.gets.fetch_add(1, crate::sync::Ordering::SeqCst);
            Store::get(&self.inner, key)
        }
        fn get_many(&self, keys: &[u64]) -> Result<Vec<Option<u64>>, Infallible> {
            self.batches.fetch_add(1, crate::sync::Ordering::SeqCst);
            Store::get_many(&self.inner, keys)
        }
        fn put(&self, key: &u64, value: &u64) -> Result<Written, Infallible> {
            Store::put(&self.inner, key, value)
        }
        fn delete(&self, key: &u64) -> Result<bool, Infallible> {
            Store::delete(&self.inner, key)
        }
        fn scan_keys(
            &self,
            cursor: Option<&u64>,
            limit: usize,
        ) -> Result<ScanPage<u64, u64>, Infallible> {
            Store::scan_keys(&self.inner, cursor, limit)
        }
    }

    /// A batch is one call of the store's `get_many`, answered in the keys' order; an empty
    /// batch calls nothing, and needs no runtime.
    #[test]
    fn get_many_is_one_call_of_the_stores() {
        let store = Blocking::new(Counting {
            inner: Mem::new(),
            gets: crate::sync::AtomicUsize::new(0),
            batches: crate::sync::AtomicUsize::new(0),
        });
        for k in [1, 3] {
            Store::put(&store.get_ref().inner, &k, &(k * 10)).unwrap();
        }
        let values = runtime().block_on(store.get_many(&[3, 2, 1, 3])).unwrap();
        assert_eq!(values, [Some(30), None, Some(10), Some(30)]);
        let counts = |s: &Counting| {
            (
                s.gets.load(crate::sync::Ordering::SeqCst),
                s.batches.load(crate::sync::Ordering::SeqCst),
            )
        };
        assert_eq!(counts(store.get_ref()), (0, 1));

        let waker = std::task::Waker::from(Arc::new(Noop));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut empty = std::pin::pin!(store.get_many(&[]));
        match empty.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(values) => assert!(values.unwrap().is_empty()),
            std::task::Poll::Pending => panic!("an empty batch waits for nothing"),
        }
        assert_eq!(counts(store.get_ref()), (0, 1));
    }

    /// A store whose calls panic.
    struct Panicking;

    // `SEALS` is the store's own.
    const _: () = assert!(<Blocking<Mem> as AsyncStore>::SEALS);
    const _: () = assert!(!<Blocking<Panicking> as AsyncStore>::SEALS);

    impl Store for Panicking {
        type Key = u64;
        type Value = u64;
        type Cursor = u64;
        type Error = Infallible;

        fn get(&self, _: &u64) -> Result<Option<u64>, Infallible> {
            panic!("the store's get panicked")
        }
        fn put(&self, _: &u64, _: &u64) -> Result<Written, Infallible> {
            panic!("the store's put panicked")
        }
        fn delete(&self, _: &u64) -> Result<bool, Infallible> {
            panic!("the store's delete panicked")
        }
        fn scan_keys(&self, _: Option<&u64>, _: usize) -> Result<ScanPage<u64, u64>, Infallible> {
            panic!("the store's scan panicked")
        }
    }

    /// A panic on the blocking thread resumes in the caller, with its message.
    #[test]
    fn a_panic_in_the_store_resumes_in_the_caller() {
        let runtime = runtime();
        let store = Blocking::new(Panicking);
        let panicked = catch_unwind(AssertUnwindSafe(|| runtime.block_on(store.put(&1, &1))))
            .expect_err("the store's panic must reach the caller");
        assert_eq!(
            panicked.downcast_ref::<&str>(),
            Some(&"the store's put panicked")
        );
        // Through a guard: the panic ends the guard's call too, and the key becomes an orphan.
        let guard =
            AsyncCacheGuard::new(CuckooFilter::with_capacity(100), Blocking::new(Panicking));
        let panicked = catch_unwind(AssertUnwindSafe(|| runtime.block_on(guard.put(&1, &1))));
        assert!(panicked.is_err());
        assert_eq!(guard.stats().orphaned_writes, 1);
        assert!(guard.filter().contains(&1));
    }

    /// A call on a runtime that has shut down is an error that names the shutdown, and the
    /// guard keeps the key's copy (an unknown outcome).
    #[test]
    fn a_runtime_shut_down_is_an_error() {
        let dead = runtime();
        let handle = dead.handle().clone();
        drop(dead);
        let store = Blocking::new(Mem::new()).with_handle(handle);
        let other = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let failed = other.block_on(store.put(&1, &1)).unwrap_err();
        assert!(matches!(failed, BlockingError::Shutdown), "{failed:?}");
        assert!(failed.to_string().contains("shutting down"));
        assert!(store.get_ref().is_empty(), "the call must not have run");

        let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(100), store);
        let failed = other.block_on(guard.put(&1, &1)).unwrap_err();
        assert!(matches!(failed, GuardError::Store(BlockingError::Shutdown)));
        assert!(
            guard.filter().contains(&1),
            "an unknown outcome keeps the copy"
        );
    }

    /// Outside a runtime, a call fails without reaching the store, and the guard removes the
    /// copy it added (a definite failure).
    #[test]
    fn no_runtime_is_an_error() {
        let guard =
            AsyncCacheGuard::new(CuckooFilter::with_capacity(100), Blocking::new(Mem::new()));
        runtime().block_on(guard.warm_up(10, |_| {})).unwrap();
        let waker = std::task::Waker::from(Arc::new(Noop));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut put = std::pin::pin!(guard.put(&1, &1));
        let failed = loop {
            if let std::task::Poll::Ready(result) = put.as_mut().poll(&mut cx) {
                break result.unwrap_err();
            }
        };
        assert!(matches!(
            failed,
            GuardError::Store(BlockingError::NoRuntime)
        ));
        assert!(guard.store().get_ref().is_empty());
        assert!(
            !guard.filter().contains(&1),
            "a definite failure removes the copy"
        );
        assert!(!guard.may_contain(&1));
    }

    /// A waker for polling outside any runtime.
    struct Noop;

    impl std::task::Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    /// A store whose put waits for the test's word before writing.
    struct Gated {
        inner: Mem,
        open: Mutex<bool>,
        opened: Condvar,
    }

    impl Store for Gated {
        type Key = u64;
        type Value = u64;
        type Cursor = u64;
        type Error = Infallible;

        fn get(&self, key: &u64) -> Result<Option<u64>, Infallible> {
            Store::get(&self.inner, key)
        }
        fn put(&self, key: &u64, value: &u64) -> Result<Written, Infallible> {
            let open = self.open.lock().unwrap();
            drop(self.opened.wait_while(open, |open| !*open).unwrap());
            Store::put(&self.inner, key, value)
        }
        fn delete(&self, key: &u64) -> Result<bool, Infallible> {
            Store::delete(&self.inner, key)
        }
        fn scan_keys(
            &self,
            cursor: Option<&u64>,
            limit: usize,
        ) -> Result<ScanPage<u64, u64>, Infallible> {
            Store::scan_keys(&self.inner, cursor, limit)
        }
    }

    /// A put whose future is dropped while its store call runs still lands; the guard counts
    /// it an orphan, keeps the key's copy, and a lookup finds the row once it landed.
    #[test]
    fn a_dropped_put_lands_later_and_stays_visible() {
        let runtime = runtime();
        let store = Blocking::new(Gated {
            inner: Mem::new(),
            open: Mutex::new(false),
            opened: Condvar::new(),
        });
        let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(100), store);
        runtime.block_on(async {
            guard.warm_up(10, |_| {}).await.unwrap();
            let put = tokio::time::timeout(Duration::from_millis(50), guard.put(&1, &10)).await;
            assert!(
                put.is_err(),
                "the put must still be waiting on its store call"
            );
        });
        assert_eq!(guard.stats().orphaned_writes, 1);
        let gated = guard.store().get_ref();
        *gated.open.lock().unwrap() = true;
        gated.opened.notify_all();
        runtime.block_on(async {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while guard.store().get_ref().inner.is_empty() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the dropped put never landed"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            assert_eq!(guard.get(&1).await.unwrap(), Some(10));
        });
    }
}
