//! [`RebuildDriver`]: an [`AsyncCacheGuard`](super::AsyncCacheGuard)'s automatic rebuilds as a
//! future the caller spawns on any executor, as `tokio_postgres::connect` returns its
//! connection.
//!
//! # Protocol
//!
//! A guard and its drivers share one [`Requests`] cell behind a mutex: how many drivers
//! exist, the wakers of those that wait, the one requested rebuild (its claim and reason) and
//! whether the guard is gone. Every step below runs under that lock, and wakers are woken
//! after it is released.
//!
//! - **[driver.D1] Offer.** A write that claimed an automatic rebuild offers it to the cell. If
//!   a driver exists, the cell keeps the request and every waiting driver is woken; otherwise
//!   the guard runs it as a tokio task, or skips it and counts the skip. At most one request
//!   is kept: it holds the rebuild claim, so no second one is made before it ends.
//! - **[driver.D2] Poll.** A driver first polls the rebuild it runs, if any. Then it takes the
//!   kept request and starts it; if there is none it ends once the guard is gone, else it
//!   leaves its waker and waits. Taking and leaving the waker are one critical section, so an
//!   offer either finds the request taken or wakes this driver: no wake-up is lost.
//! - **[driver.D3] Drop.** A dropped driver takes its waker away; the last one drops a request
//!   nobody took, which ends its claim, and counts it as skipped. A rebuild it was running
//!   stops as a dropped rebuild future does (the guard keeps its filter).
//! - **[driver.D4] The guard gone.** When the guard's last handle drops, the cell is closed and
//!   every waiting driver woken; each then ends, after the rebuild it runs.
//!
//! A driver holds the guard weakly, so a driver alone keeps no guard alive; a rebuild it runs
//! holds it until the rebuild ends.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};

use super::core::Triggered;

/// A guard's side of its drivers: starts a requested rebuild, counts one that never ran.
pub(super) trait Rebuilds: Send + Sync {
    /// The rebuild `trigger` claimed, as a future that owns the guard and the claim.
    fn run(self: Arc<Self>, trigger: Triggered) -> Pin<Box<dyn Future<Output = ()> + Send>>;
    /// Counts a rebuild that was requested and never ran ([`GuardStats::rebuilds_skipped`]).
    ///
    /// [`GuardStats::rebuilds_skipped`]: super::GuardStats::rebuilds_skipped
    fn skipped(&self, why: &str);
}

/// What the cell holds.
#[derive(Default)]
struct State {
    /// Drivers made and not dropped.
    drivers: usize,
    /// The waiting drivers' wakers, by driver id.
    wakers: Vec<(u64, Waker)>,
    /// The rebuild requested and not yet taken ([driver.D1]).
    pending: Option<Triggered>,
    /// The guard is gone ([driver.D4]).
    closed: bool,
    /// The next driver's id.
    next_id: u64,
}

/// The cell a guard and its drivers share.
#[derive(Default)]
pub(super) struct Requests {
    state: Mutex<State>,
}

impl fmt::Debug for Requests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Requests").finish_non_exhaustive()
    }
}

impl Requests {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Held only to read or move a few fields; no caller code runs under it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [driver.D1] Hands `trigger` to the drivers, or back if there is none.
    pub(super) fn offer(&self, trigger: Triggered) -> Result<(), Triggered> {
        let wakers: Vec<Waker> = {
            let mut state = self.lock();
            if state.drivers == 0 || state.closed {
                return Err(trigger);
            }
            state.pending = Some(trigger);
            state.wakers.drain(..).map(|(_, waker)| waker).collect()
        };
        wakers.into_iter().for_each(Waker::wake);
        Ok(())
    }

    /// [driver.D4] The guard is gone.
    fn close(&self) {
        let (wakers, pending) = {
            let mut state = self.lock();
            state.closed = true;
            let wakers: Vec<Waker> = state.wakers.drain(..).map(|(_, waker)| waker).collect();
            (wakers, state.pending.take())
        };
        drop(pending);
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// The guard's hold on its [`Requests`]: closes them when the guard drops ([driver.D4]).
#[derive(Debug, Default)]
pub(super) struct Link(pub(super) Arc<Requests>);

impl Drop for Link {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The automatic rebuilds of an [`AsyncCacheGuard`](super::AsyncCacheGuard), as a future to
/// spawn on any executor: made by
/// [`AsyncCacheGuard::background`](super::AsyncCacheGuard::background).
///
/// While a driver exists, every automatic rebuild the guard's [`RebuildPolicy`] asks for
/// runs in it, with or without tokio. The future ends when every handle of the guard is
/// dropped (after the rebuild it runs, if any). Until it is polled, a rebuild handed to it
/// waits, holding the guard's one rebuild claim (a seal waits for it and
/// [`rebuild`](super::AsyncCacheGuard::rebuild) returns
/// [`GuardError::RebuildRunning`](super::GuardError::RebuildRunning)), so spawn it right away.
/// Dropping it stops the rebuild it runs (the guard keeps its filter); with no driver left,
/// automatic rebuilds go back to tokio tasks, or are skipped and counted in
/// [`GuardStats::rebuilds_skipped`](super::GuardStats::rebuilds_skipped).
///
/// [`RebuildPolicy`]: super::RebuildPolicy
///
/// # Examples
///
/// A thread that runs the driver with a minimal executor of its own (any executor will do):
///
/// ```
/// use std::future::Future;
/// use std::sync::Arc;
/// use std::task::{Context, Poll, Wake, Waker};
/// use std::thread::{self, Thread};
/// use std::time::Duration;
///
/// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// /// Polls `future` on this thread, parking it until woken.
/// fn block_on<F: Future>(future: F) -> F::Output {
///     struct Unpark(Thread);
///     impl Wake for Unpark {
///         fn wake(self: Arc<Self>) {
///             self.0.unpark();
///         }
///     }
///     let waker = Waker::from(Arc::new(Unpark(thread::current())));
///     let mut cx = Context::from_waker(&waker);
///     let mut future = std::pin::pin!(future);
///     loop {
///         if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
///             return output;
///         }
///         thread::park();
///     }
/// }
///
/// // A filter built for 10 keys in front of 1,000 rows: the warm-up grows it, and its end
/// // asks for an automatic rebuild.
/// let store = MemoryStore::from_rows((0..1_000u64).map(|k| (k, k)));
/// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), store);
/// let driver = guard.background();
/// let rebuilds = thread::spawn(move || block_on(driver));
///
/// block_on(guard.warm_up(100, |_| {}))?;
/// while guard.stats().rebuilds == 0 {
///     thread::sleep(Duration::from_millis(1));
/// }
/// assert_eq!(guard.stats().filter_growth_steps, 0);
///
/// drop(guard);
/// rebuilds.join().unwrap(); // the driver ends with the guard
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a rebuild driver does nothing unless spawned or polled"]
pub struct RebuildDriver {
    id: u64,
    requests: Arc<Requests>,
    guard: Weak<dyn Rebuilds>,
    running: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl RebuildDriver {
    pub(super) fn new(requests: &Arc<Requests>, guard: Weak<dyn Rebuilds>) -> Self {
        let id = {
            let mut state = requests.lock();
            state.drivers += 1;
            state.next_id += 1;
            state.next_id
        };
        RebuildDriver {
            id,
            requests: Arc::clone(requests),
            guard,
            running: None,
        }
    }
}

impl Future for RebuildDriver {
    type Output = ();

    /// [driver.D2]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        loop {
            if let Some(running) = &mut this.running {
                if running.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                // Drops the guard's handle: if it was the last, the guard closes the cell.
                this.running = None;
            }
            let trigger = {
                let mut state = this.requests.lock();
                match state.pending.take() {
                    Some(trigger) => trigger,
                    None if state.closed => return Poll::Ready(()),
                    None => {
                        let id = this.id;
                        match state.wakers.iter_mut().find(|(owner, _)| *owner == id) {
                            Some((_, waker)) => waker.clone_from(cx.waker()),
                            None => state.wakers.push((id, cx.waker().clone())),
                        }
                        return Poll::Pending;
                    }
                }
            };
            match this.guard.upgrade() {
                Some(guard) => this.running = Some(guard.run(trigger)),
                // The guard is gone: the claim ends with the trigger.
                None => return Poll::Ready(()),
            }
        }
    }
}

impl Drop for RebuildDriver {
    /// [driver.D3]
    fn drop(&mut self) {
        let orphaned = {
            let mut state = self.requests.lock();
            state.drivers -= 1;
            let id = self.id;
            state.wakers.retain(|(owner, _)| *owner != id);
            if state.drivers == 0 {
                state.pending.take()
            } else {
                None
            }
        };
        if let Some(trigger) = orphaned {
            if let Some(guard) = self.guard.upgrade() {
                guard.skipped("its rebuild driver was dropped before it ran the rebuild");
            }
            drop(trigger);
        }
    }
}

impl fmt::Debug for RebuildDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RebuildDriver")
            .field("running", &self.running.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(cuckoo_loom)))]
mod tests {
    use crate::sync::{AtomicUsize, Ordering};
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    use crate::guard::{AsyncCacheGuard, GuardError, MemoryStore};
    use crate::CuckooFilter;

    /// Counts its wakes.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            // ORDERING: Relaxed; a test's count, read on the same thread.
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Polls `future` on this thread until it is ready (the store's futures never wait).
    fn block_on<F: Future>(future: F) -> F::Output {
        let waker = Waker::from(Arc::new(Wakes::default()));
        let mut cx = Context::from_waker(&waker);
        let mut future = std::pin::pin!(future);
        for _ in 0..1_000_000 {
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
        }
        panic!("a future over the memory store never finished")
    }

    /// A filter built for 10 keys in front of 1,000 rows: the warm-up grows it, and its end
    /// claims an automatic rebuild (growth).
    fn grown_guard() -> AsyncCacheGuard<MemoryStore<u64, u64>> {
        let store = MemoryStore::from_rows((0..1_000u64).map(|k| (k, k)));
        AsyncCacheGuard::new(CuckooFilter::with_capacity(10), store)
    }

    /// No tokio runtime runs here, so without the driver this rebuild would be skipped (the
    /// next test); polled by hand, the driver runs it.
    #[test]
    fn an_automatic_rebuild_runs_in_the_driver_outside_any_runtime() {
        assert!(tokio::runtime::Handle::try_current().is_err());
        let guard = grown_guard();
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        let mut cx = Context::from_waker(&waker);
        let mut driver = guard.background();
        assert!(std::pin::Pin::new(&mut driver).poll(&mut cx).is_pending());

        block_on(guard.warm_up(100, |_| {})).unwrap();
        let stats = guard.stats();
        assert!(stats.filter_growth_steps > 0, "{stats:?}");
        assert!(stats.rebuilding, "the rebuild waits for its driver");
        assert_eq!((stats.rebuilds, stats.rebuilds_skipped), (0, 0));
        assert_eq!(
            wakes.0.load(Ordering::Relaxed),
            1,
            "the request woke the driver"
        );

        let mut polls = 0;
        while guard.stats().rebuilds == 0 {
            assert!(std::pin::Pin::new(&mut driver).poll(&mut cx).is_pending());
            polls += 1;
            assert!(polls < 1_000_000, "the driver never finished the rebuild");
        }
        let stats = guard.stats();
        assert_eq!(stats.filter_growth_steps, 0, "{stats:?}");
        assert_eq!(stats.rebuilds_skipped, 0);
        assert!(!stats.rebuilding);
        assert!(guard.may_contain(&999));

        // The driver ends with the guard.
        let before = wakes.0.load(Ordering::Relaxed);
        drop(guard);
        assert!(
            wakes.0.load(Ordering::Relaxed) > before,
            "the guard's drop woke the driver"
        );
        assert!(std::pin::Pin::new(&mut driver).poll(&mut cx).is_ready());
    }

    #[test]
    fn an_automatic_rebuild_with_no_driver_and_no_runtime_is_skipped_and_counted() {
        let guard = grown_guard();
        block_on(guard.warm_up(100, |_| {})).unwrap();
        let stats = guard.stats();
        assert!(stats.filter_growth_steps > 0, "{stats:?}");
        assert_eq!(stats.rebuilds_skipped, 1, "{stats:?}");
        assert_eq!(stats.rebuilds, 0);
        assert!(!stats.rebuilding, "the skipped rebuild let go of its claim");
        // A rebuild on demand still runs.
        block_on(guard.rebuild()).unwrap();
        assert_eq!(guard.stats().filter_growth_steps, 0);
    }

    #[test]
    fn a_driver_dropped_before_it_ran_the_rebuild_lets_go_of_the_claim() {
        let guard = grown_guard();
        let driver = guard.background();
        block_on(guard.warm_up(100, |_| {})).unwrap();
        assert!(guard.stats().rebuilding, "the rebuild waits for its driver");
        drop(driver);
        let stats = guard.stats();
        assert!(!stats.rebuilding, "{stats:?}");
        assert_eq!(stats.rebuilds_skipped, 1);
        assert!(!matches!(
            block_on(guard.rebuild()),
            Err(GuardError::RebuildRunning)
        ));
    }

    /// Two drivers wait; the first is dropped: the other runs the rebuild, not counted skipped.
    #[test]
    fn any_of_two_drivers_runs_the_rebuild() {
        let guard = grown_guard();
        let waker = Waker::from(Arc::new(Wakes::default()));
        let mut cx = Context::from_waker(&waker);
        let mut first = guard.background();
        let mut second = guard.background();
        assert!(std::pin::Pin::new(&mut first).poll(&mut cx).is_pending());
        assert!(std::pin::Pin::new(&mut second).poll(&mut cx).is_pending());
        drop(first);
        block_on(guard.warm_up(100, |_| {})).unwrap();
        let mut polls = 0;
        while guard.stats().rebuilds == 0 {
            assert!(std::pin::Pin::new(&mut second).poll(&mut cx).is_pending());
            polls += 1;
            assert!(polls < 1_000_000, "the driver never finished the rebuild");
        }
        assert_eq!(guard.stats().rebuilds_skipped, 0);
    }
}
