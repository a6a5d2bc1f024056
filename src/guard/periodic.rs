//! Periodic seals: a guard that seals its snapshot now and then restarts fast after a crash
//! too, if nothing was written since the last seal.
//!
//! Each turn asks the store for its seal first: if it still names the last snapshot this task
//! wrote (and the file is there), nothing was written through a guard since and the file is
//! still good, so the turn writes nothing. Otherwise it seals anew
//! ([`CacheGuard::seal`](super::CacheGuard::seal)). A store written between turns is never
//! trusted at restart (the write cleared the seal): the restarted guard warms up, as it would
//! without the task.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use super::restart::Sealed;

/// What a periodic seal task has done, from [`PeriodicSeal::report`].
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::SealReport;
///
/// let report = SealReport::default();
/// assert_eq!(report.sealed + report.unchanged + report.failed, 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SealReport {
    /// Turns that wrote a snapshot and sealed it.
    pub sealed: u64,
    /// Turns that found the last seal still in the store and its file in place.
    pub unchanged: u64,
    /// Turns that failed (the store or the file); the next turn tries again.
    pub failed: u64,
    /// The last seal written, if any.
    pub last_seal: Option<u64>,
    /// The last failure, for the log.
    pub last_error: Option<String>,
}

/// The state a periodic seal task shares with its handle.
#[derive(Debug, Default)]
struct Shared {
    stopped: Mutex<bool>,
    wake: Condvar,
    report: Mutex<SealReport>,
}

impl Shared {
    fn report(&self) -> std::sync::MutexGuard<'_, SealReport> {
        // Held only to copy or update counters.
        self.report.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits `every` or until stopped; whether to go on.
    fn sleep(&self, every: Duration) -> bool {
        let stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        let (stopped, _) = self
            .wake
            .wait_timeout_while(stopped, every, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner);
        !*stopped
    }

    /// The seal this task wrote last, if its file is still at `path`.
    fn last_seal(&self, path: &Path) -> Option<u64> {
        self.report().last_seal.filter(|_| path.exists())
    }

    fn record<E: std::fmt::Display>(&self, outcome: Result<Turn, E>) {
        let mut report = self.report();
        match outcome {
            Ok(Turn::Sealed(sealed)) => {
                report.sealed += 1;
                report.last_seal = Some(sealed.seal);
            }
            Ok(Turn::Unchanged) => report.unchanged += 1,
            Ok(Turn::Warming) => {}
            Err(error) => {
                report.failed += 1;
                report.last_error = Some(error.to_string());
            }
        }
    }
}

/// What one turn did.
pub(super) enum Turn {
    Sealed(Sealed),
    Unchanged,
    /// The guard is still warming up: nothing to seal yet.
    Warming,
}

/// What runs the turns.
#[derive(Debug)]
enum Worker {
    Thread(std::thread::JoinHandle<()>),
    #[cfg(feature = "tokio")]
    Task(tokio::task::JoinHandle<()>),
}

/// A running periodic seal task, from
/// [`CacheGuard::seal_periodically`](super::CacheGuard::seal_periodically) or
/// [`AsyncCacheGuard::seal_periodically`](super::AsyncCacheGuard::seal_periodically). Dropping
/// it stops the task: a thread finishes the turn it is in, a tokio task is aborted (a seal cut
/// short leaves a seal that names no file, or an older file: never trusted).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// let dir = tempfile::tempdir()?;
/// let guard = CacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u8, u8>::new());
/// guard.warm_up(10, |_| {})?;
/// let task = guard.seal_periodically(dir.path().join("g.cgsnap"), Duration::from_millis(10));
/// while task.report().unchanged == 0 {
///     std::thread::sleep(Duration::from_millis(5)); // a turn that found nothing to do
/// }
/// let report = task.stop();
/// assert_eq!(report.sealed, 1); // nothing was written after the first seal
/// assert!(report.unchanged >= 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PeriodicSeal {
    shared: Arc<Shared>,
    worker: Option<Worker>,
}

impl PeriodicSeal {
    /// What the task has done so far.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// # use cuckoo_guard::CuckooFilter;
    /// # let dir = tempfile::tempdir()?;
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u8, u8>::new());
    /// let task = guard.seal_periodically(dir.path().join("g.cgsnap"), Duration::from_secs(60));
    /// assert_eq!(task.report().sealed, 0); // the first turn comes after a minute
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn report(&self) -> SealReport {
        self.shared.report().clone()
    }

    /// Stops the task (a thread after its current turn) and returns its report.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// # use cuckoo_guard::CuckooFilter;
    /// # let dir = tempfile::tempdir()?;
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u8, u8>::new());
    /// let task = guard.seal_periodically(dir.path().join("g.cgsnap"), Duration::from_secs(60));
    /// assert_eq!(task.stop().failed, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stop(mut self) -> SealReport {
        self.halt();
        self.report()
    }

    fn halt(&mut self) {
        *self
            .shared
            .stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.wake.notify_all();
        match self.worker.take() {
            // A panic in the task is in its report's absence of progress; it is not re-raised
            // in the thread that stops it.
            Some(Worker::Thread(thread)) => drop(thread.join()),
            #[cfg(feature = "tokio")]
            Some(Worker::Task(task)) => task.abort(),
            None => {}
        }
    }
}

impl Drop for PeriodicSeal {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Starts the turns of a sync guard on a thread: every `every`, `turn` runs with the last seal
/// this task wrote (if its file is still there).
pub(super) fn spawn_thread<E: std::fmt::Display>(
    path: PathBuf,
    every: Duration,
    turn: impl Fn(&Path, Option<u64>) -> Result<Turn, E> + Send + 'static,
) -> PeriodicSeal {
    let shared = Arc::new(Shared::default());
    let worker = {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("cuckoo-guard-seal".into())
            .spawn(move || {
                while shared.sleep(every) {
                    shared.record(turn(&path, shared.last_seal(&path)));
                }
            })
    };
    let worker = match worker {
        Ok(thread) => Some(Worker::Thread(thread)),
        Err(error) => {
            shared.record::<String>(Err(format!("cannot start the seal thread: {error}")));
            None
        }
    };
    PeriodicSeal { shared, worker }
}

/// Starts the turns of an async guard as a tokio task on `runtime`.
#[cfg(feature = "tokio")]
pub(super) fn spawn_task<E, F>(
    runtime: &tokio::runtime::Handle,
    path: PathBuf,
    every: Duration,
    turn: impl Fn(PathBuf, Option<u64>) -> F + Send + 'static,
) -> PeriodicSeal
where
    E: std::fmt::Display,
    F: std::future::Future<Output = Result<Turn, E>> + Send,
{
    let shared = Arc::new(Shared::default());
    let task = {
        let shared = Arc::clone(&shared);
        runtime.spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let outcome = turn(path.clone(), shared.last_seal(&path)).await;
                shared.record(outcome);
            }
        })
    };
    PeriodicSeal {
        shared,
        worker: Some(Worker::Task(task)),
    }
}
