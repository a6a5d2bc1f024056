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
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(cuckoo_loom)]
pub(crate) use loom::sync::{Condvar, Mutex};
#[cfg(not(cuckoo_loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(cuckoo_loom))]
pub(crate) use std::sync::{Condvar, Mutex};

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

/// Asks the kernel to back the spare capacity of `buffer` with transparent huge pages
/// (2 MiB), for a buffer of at least 4 MiB whose pages have not yet been written.
///
/// A lookup reads one or two buckets at random positions in the table: on 4 KiB pages, a
/// table larger than the TLB's reach costs each of those reads a page walk, on 2 MiB pages it
/// costs none up to gigabytes. Only a hint: on kernels where transparent huge pages are off,
/// on other systems and under loom it does nothing, and the memory is the same either way.
/// Called on an empty `Vec` after reserving its capacity, so that the first writes fault in
/// huge pages; only the 2 MiB-aligned part of the allocation is advised.
pub(crate) fn advise_huge_pages<T>(buffer: &Vec<T>) {
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(cuckoo_loom)))]
    {
        const HUGE_PAGE: usize = 2 << 20;
        let bytes = buffer.capacity().saturating_mul(std::mem::size_of::<T>());
        if bytes < 2 * HUGE_PAGE {
            return;
        }
        let start = buffer.as_ptr() as usize;
        let first = start.next_multiple_of(HUGE_PAGE);
        let end = (start + bytes) / HUGE_PAGE * HUGE_PAGE;
        if end <= first {
            return;
        }
        // SAFETY: `[first, end)` lies inside the allocation `buffer` owns (its capacity) and
        // is page-aligned. `MADV_HUGEPAGE` changes neither the contents of that range nor
        // which addresses are mapped: it only marks the range as eligible for huge pages.
        // A failure (huge pages disabled, an old kernel) leaves the range as it was, so the
        // result is ignored.
        let _ =
            unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
    }
    #[cfg(not(all(any(target_os = "linux", target_os = "android"), not(cuckoo_loom))))]
    {
        let _ = buffer;
    }
}

/// A value that readers load without locking and a writer replaces from time to time: a
/// crossbeam-epoch `Atomic`, whose replaced values are freed only once every thread that was
/// pinned when the replacement happened has unpinned.
///
/// Under loom it is a plain atomic pointer whose replaced values live until the cell drops:
/// the models check the orderings of loads and replacements, not the reclamation, which is
/// crossbeam-epoch's.
#[cfg(not(cuckoo_loom))]
pub(crate) struct Published<T> {
    value: crossbeam_epoch::Atomic<T>,
}

/// A thread's pin: values loaded from a [`Published`] under it stay alive until it drops.
/// Held for one guard call at most, never across a store call (it would keep every replaced
/// value alive and stall reclamation for the whole process).
#[cfg(not(cuckoo_loom))]
pub(crate) struct Pin(crossbeam_epoch::Guard);

/// Pins the calling thread (a full barrier on the first pin of a thread's nesting).
#[cfg(not(cuckoo_loom))]
#[inline]
pub(crate) fn pin() -> Pin {
    Pin(crossbeam_epoch::pin())
}

#[cfg(not(cuckoo_loom))]
impl<T> Published<T> {
    pub(crate) fn new(value: T) -> Self {
        Published {
            value: crossbeam_epoch::Atomic::new(value),
        }
    }

    /// The current value, alive as long as `pin`.
    #[inline]
    pub(crate) fn load<'p>(&'p self, order: Ordering, pin: &'p Pin) -> &'p T {
        let shared = self.value.load(order, &pin.0);
        // SAFETY: the pointer is never null (`new` and `replace` store owned values, nothing
        // stores null); a value replaced after this load is destroyed through
        // `defer_destroy`, which waits until `pin` (held for `'p`) is dropped, and the current
        // one only when the cell drops, which cannot happen while it is borrowed for `'p`.
        unsafe { shared.deref() }
    }

    /// Replaces the value; the old one is dropped once every thread pinned now has unpinned.
    pub(crate) fn replace(&self, value: T, order: Ordering, pin: &Pin)
    where
        T: Send + 'static,
    {
        let old = self
            .value
            .swap(crossbeam_epoch::Owned::new(value), order, &pin.0);
        // SAFETY: `old` was just unlinked by the swap, so no load that starts from now on can
        // return it; loads that returned it earlier are pinned, and `defer_destroy` runs
        // the drop only after they unpin. `T: Send` because the drop may run on another
        // thread.
        unsafe { pin.0.defer_destroy(old) };
    }
}

impl<T> std::fmt::Debug for Published<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Published").finish_non_exhaustive()
    }
}

#[cfg(not(cuckoo_loom))]
impl<T> Drop for Published<T> {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no thread can load the value any more; the value is
        // non-null and owned by this cell (replaced ones were handed to `defer_destroy`).
        unsafe {
            let current = self
                .value
                .load(Ordering::Relaxed, crossbeam_epoch::unprotected());
            drop(current.into_owned());
        }
    }
}

#[cfg(cuckoo_loom)]
pub(crate) struct Published<T> {
    current: loom::sync::atomic::AtomicPtr<T>,
    all: std::sync::Mutex<Vec<*mut T>>,
}

// SAFETY: the cell hands out shared references to `T` across threads and drops every `T`
// on the thread that drops the cell: what `T: Send + Sync` permits.
#[cfg(cuckoo_loom)]
unsafe impl<T: Send + Sync> Sync for Published<T> {}
// SAFETY: as above; the raw pointers are owned boxes.
#[cfg(cuckoo_loom)]
unsafe impl<T: Send + Sync> Send for Published<T> {}

#[cfg(cuckoo_loom)]
pub(crate) struct Pin;

#[cfg(cuckoo_loom)]
pub(crate) fn pin() -> Pin {
    Pin
}

#[cfg(cuckoo_loom)]
impl<T> Published<T> {
    pub(crate) fn new(value: T) -> Self {
        let raw = Box::into_raw(Box::new(value));
        Published {
            current: loom::sync::atomic::AtomicPtr::new(raw),
            all: std::sync::Mutex::new(vec![raw]),
        }
    }

    pub(crate) fn load<'p>(&'p self, order: Ordering, _pin: &'p Pin) -> &'p T {
        let raw = self.current.load(order);
        // SAFETY: every pointer stored came from `Box::into_raw` and is freed only when the
        // cell drops, which cannot happen while `self` is borrowed for `'p`.
        unsafe { &*raw }
    }

    pub(crate) fn replace(&self, value: T, order: Ordering, _pin: &Pin)
    where
        T: Send + 'static,
    {
        let raw = Box::into_raw(Box::new(value));
        self.all.lock().unwrap().push(raw);
        self.current.store(raw, order);
    }
}

#[cfg(cuckoo_loom)]
impl<T> Drop for Published<T> {
    fn drop(&mut self) {
        for raw in self.all.lock().unwrap().drain(..) {
            // SAFETY: each pointer came from `Box::into_raw` once and is freed once, here,
            // when no thread can load from the cell any more.
            drop(unsafe { Box::from_raw(raw) });
        }
    }
}
