//! The one switch between std's primitives and loom's models.
//!
//! Every other module imports atomics, fences and spin hints from here, never from `std` or
//! `loom` directly; `.ci/run` fails if any other file under `src/` names std's atomics. Under
//! `--cfg cuckoo_loom` the same names resolve to loom's models, so the model tests in `table/`
//! check the real protocol code, not a copy of it.
//!
//! The cfg is `cuckoo_loom`, not the customary `loom`: `RUSTFLAGS` reaches every crate in the
//! build, and some dependencies of the optional features and dev-dependencies (such as
//! `event-listener`, under `redis`) switch to loom themselves under `cfg(loom)` and then fail
//! to build.

#[cfg(cuckoo_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(cuckoo_loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(not(cuckoo_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(cuckoo_loom))]
pub(crate) use std::sync::Mutex;

/// Called once per turn of every retry or spin loop.
///
/// Under loom this yields to the model scheduler, so a spinning thread cannot starve the thread
/// it waits for (loom would otherwise report the spin as a livelock).
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(cuckoo_loom)]
    loom::thread::yield_now();
    #[cfg(not(cuckoo_loom))]
    std::hint::spin_loop();
}

/// Exponential backoff for lock acquisition (test-and-test-and-set), so that waiting writers
/// spin on a plain load rather than bounce the lock's cache line with failed compare-exchanges.
///
/// Spins `2^step` times for the first few turns, then yields the thread, so a writer preempted
/// while holding a stripe does not keep another core busy for a whole time slice.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    const SPIN_LIMIT: u32 = 6;

    #[inline]
    pub(crate) fn snooze(&mut self) {
        // Under loom every turn yields: the model scheduler must run the lock holder.
        if cfg!(cuckoo_loom) || self.step > Self::SPIN_LIMIT {
            yield_now();
        } else {
            for _ in 0..1u32 << self.step {
                std::hint::spin_loop();
            }
            self.step += 1;
        }
    }
}

/// Gives up the rest of the time slice (a model scheduling point under loom).
#[inline]
pub(crate) fn yield_now() {
    #[cfg(cuckoo_loom)]
    loom::thread::yield_now();
    #[cfg(not(cuckoo_loom))]
    std::thread::yield_now();
}

/// A small number fixed for the calling thread: threads are numbered in the order they first
/// ask, so the first threads of a process get distinct numbers. The one way the crate spreads
/// threads over copies of something: statistics counters (`sharded`) and store connections.
///
/// Under loom every thread gets 0: a statistic needs no model of its own.
#[inline]
pub(crate) fn thread_index() -> usize {
    #[cfg(not(cuckoo_loom))]
    {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        std::thread_local! {
            // ORDERING: Relaxed; hands out distinct numbers, publishes nothing.
            static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
        }
        // A thread being torn down may count in any shard.
        INDEX.try_with(|i| *i).unwrap_or(0)
    }
    #[cfg(cuckoo_loom)]
    {
        0
    }
}

/// Hints the CPU to start loading the cache line that holds `value`.
///
/// A prefetch is only a hint: it reads nothing in the abstract machine, cannot fault, and
/// leaves `value` untouched. It is a no-op under loom and on targets without a stable
/// prefetch intrinsic.
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(all(target_arch = "x86_64", not(cuckoo_loom)))]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY:
        // 1. `_mm_prefetch` requires SSE, which every x86_64 target has.
        // 2. The pointer comes from a live reference; even so, a prefetch never dereferences it
        //    in the abstract machine and cannot fault, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast::<i8>()) };
    }
    #[cfg(not(all(target_arch = "x86_64", not(cuckoo_loom))))]
    {
        let _ = value;
    }
}
