//! The current table, behind the epoch-protected pointer that growth will swap.
//!
//! Readers pin an epoch ([`pin`]) and load the current table through it; a later grow or
//! rebuild will publish a new table with a Release swap and retire the old one with
//! `defer_destroy`, so a reader still holding the old one keeps reading valid memory until it
//! unpins (pitfall P11: pin per call or per small batch, never across blocking work).
//!
//! crossbeam-epoch keeps its participants in std thread-locals and std atomics, which loom
//! cannot see (all loom threads share one OS thread). Under `cfg(cuckoo_loom)` this module is a plain
//! owned box with the same API, so loom checks the table protocol and crossbeam's own tests
//! check crossbeam.

#[cfg(not(cuckoo_loom))]
mod imp {
    use crossbeam_epoch::{self as epoch, Atomic};

    use crate::sync::Ordering;

    /// A pinned epoch: tables loaded through it stay allocated while it lives.
    #[derive(Debug)]
    pub(crate) struct Guard(epoch::Guard);

    /// Pins the current thread's epoch.
    #[inline]
    pub(crate) fn pin() -> Guard {
        Guard(epoch::pin())
    }

    /// An epoch-protected owner of the current `T`.
    #[derive(Debug)]
    pub(crate) struct Current<T> {
        /// Invariant: non-null from `new` until `drop`, pointing to a `T` owned by this cell.
        ptr: Atomic<T>,
    }

    impl<T> Current<T> {
        pub(crate) fn new(value: T) -> Self {
            Current {
                ptr: Atomic::new(value),
            }
        }

        /// The current `T`, valid while `guard` is pinned.
        #[inline(always)]
        pub(crate) fn load<'g>(&'g self, guard: &'g Guard) -> &'g T {
            // ORDERING: Acquire; pairs with the publication of the table (`Atomic::new` now, a
            // Release swap once growth exists), so the table's contents are visible.
            let shared = self.ptr.load(Ordering::Acquire, &guard.0);
            // SAFETY:
            // 1. `ptr` is non-null from `new` until `drop` (its invariant), and `drop` cannot
            //    run while `&'g self` is borrowed.
            // 2. `guard` pins the epoch, so a table retired by a future swap is not freed
            //    before the returned reference (bounded by 'g) is gone.
            unsafe { shared.deref() }
        }
    }

    impl<T> Drop for Current<T> {
        fn drop(&mut self) {
            let ptr = std::mem::replace(&mut self.ptr, Atomic::null());
            // SAFETY:
            // 1. `&mut self` proves no reader holds a reference loaded through this cell
            //    (every such reference borrows `self`).
            // 2. The pointer was created by `Atomic::new` and never retired or freed, so this
            //    is its only owner and it is freed exactly once.
            drop(unsafe { ptr.into_owned() });
        }
    }
}

#[cfg(cuckoo_loom)]
mod imp {
    /// Stands in for a pinned epoch under loom.
    #[derive(Debug)]
    pub(crate) struct Guard(());

    #[inline]
    pub(crate) fn pin() -> Guard {
        Guard(())
    }

    /// Under loom the current table is never swapped, so an owned box models it.
    #[derive(Debug)]
    pub(crate) struct Current<T> {
        value: Box<T>,
    }

    impl<T> Current<T> {
        pub(crate) fn new(value: T) -> Self {
            Current {
                value: Box::new(value),
            }
        }

        #[inline(always)]
        pub(crate) fn load<'g>(&'g self, _guard: &'g Guard) -> &'g T {
            &self.value
        }
    }
}

pub(crate) use imp::{pin, Current, Guard};
