//! Copying a table's bucket words out while readers and writers run: the table half of a
//! snapshot.
//!
//! # Protocol
//!
//! A *copier* reads every bucket word once, in ascending bucket order, with no lock held;
//! writers keep running their puts and takes (`stripe`). A put only adds a copy, so it cannot
//! hide a key from the copier. A take can: a hop of `f` from bucket `s` to bucket `d`, or a
//! remove of a key `x` that takes the copy of a key `k` from `s` while `x`'s own copy (which
//! now stands for `k`) is in `d`, leaves `k` represented only in `d`. If the copier read `d`
//! before that copy arrived there and reads `s` after it left, the copy is in neither word
//! it read. Every take therefore checks, under the locks of its two buckets, whether it
//! straddles the copier that way, and if it may, logs `(d, f)` as an *extra*: a copy the
//! snapshot adds to `d`'s pair when it is loaded.
//!
//! - **\[copy.C1\] Start and end.** The copier sets `active` (Relaxed), then takes and releases
//!   every stripe lock in turn (the *handshake*). A writer reads `active` under its stripe
//!   locks: one that locked a stripe after the handshake passed it sees `true`; one that held
//!   a lock before made its stores before the copier's first read, which the handshake's
//!   Acquire orders after them. At the end the copier clears `active` and hands over again, so
//!   every writer that saw `true` has finished logging (it logs before it unlocks) before the
//!   copier collects the extras.
//! - **\[copy.C2\] Announce, then read.** For each chunk of buckets `[c, e)`, the copier stores
//!   `announced = e` (Relaxed), issues `fence(SeqCst)`, loads the chunk's words (Acquire), and
//!   stores `read = e` (Release).
//! - **\[copy.C3\] Before a take's stores** (while `active`), the writer loads `read` (Acquire).
//!   If the bucket it takes from, `s`, is below it, the copier finished reading `s` before
//!   the take (the Release store of \[copy.C2\] follows that read), so the copy was read in `s` and
//!   the take needs no log. A remove that finds its fingerprint in both buckets takes the
//!   copy from a bucket below `read` if one is: the copy it leaves is then read later (or
//!   was read already), and nothing is logged. This avoids most extras that duplicate a
//!   copy the copier also read.
//! - **\[copy.C4\] After a take's stores**, still under its locks, a writer whose `s` was not
//!   below `read` issues `fence(SeqCst)` and loads `announced` (Relaxed). If the pair's other
//!   bucket `d` holds `f` (a hop has just put it there; a remove checks) and `d` is below
//!   `announced`, it logs `(d, f)`.
//! - **\[copy.C5\] After a put into a key's alternate** that set the overflow bit of `f` in
//!   its primary `x` (\[overflow.W2\]), still under its locks, a writer logs `(x, f)` if `x`
//!   was below `read` at \[copy.C3\] (read before the bit), and otherwise checks `x` as
//!   \[copy.C4\] checks `d`. Without the extra a copy could hold the put and not the bit,
//!   and a later remove of that key from the loaded table could take the copy another key
//!   with primary `x` stands on (\[overflow.I1\]). The extra is placed with both buckets'
//!   bits set.
//!
//! # Why the snapshot misses no key
//!
//! The two `SeqCst` fences of \[copy.C2\] and \[copy.C4\] are ordered one way or the other. If the
//! writer's comes first, the copier's later loads of every bucket it had not yet announced
//! see the writer's stores (a put into `d` or any later store): `d` is read after the take.
//! If the copier's comes first, the writer's load of `announced` sees `d`'s chunk announced
//! and the writer logs. So a take whose copy could leave the words the copier reads (taken
//! from an unread `s`, standing on in a `d` read before its arrival) always leaves an extra
//! behind, and a take from a bucket already read \[copy.C3\] takes a copy the copier has. By
//! induction over the takes that move a key's standing copy during the copy (each hop or
//! hand-over is one take, checked on its own), every key whose insert returned before the
//! copy began and that is not removed has a copy in the words read or in the extras. A key
//! removed during the copy may be in the snapshot: a false positive, never a false negative.
//!
//! Puts never log: a put into a bucket already read only concerns keys inserted after the
//! copy began. `clear` never logs: it removes every key.
//!
//! Extras can still duplicate a copy the copier did read: a take whose `read` bound is older
//! than the copier's progress (nothing orders that load after the copier's later stores), or
//! one that straddles the chunk being read, logs for a copy the copier may have seen. A
//! duplicate is a stale copy after the key's removal, a false positive. It also takes a slot:
//! a snapshot of a table so full that its duplicates find no room, even by random walks, is
//! refused when loaded (`SnapshotError::Overfull`), never loaded without a key. The ignored
//! loom models `loom_copy_*_residual_duplicate` show both.
//!
//! A copy whose sink panics unwinds through its end handshake; the extras it collected are
//! dropped at the next copy's start.
//!
//! The loom models in `table::copy::loom_tests` (`loom_copy_*`) check each step beside a broken
//! variant.

use std::sync::PoisonError;

use crate::sync::{fence, AtomicBool, AtomicU64, Mutex, Ordering};

/// A copy a take may have hidden from the copier: fingerprint `fp` belongs in the pair of
/// bucket `bucket`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extra {
    pub(crate) bucket: usize,
    pub(crate) fp: u64,
}

/// The copy protocol broken on purpose, one step per field: the loom models' negative
/// controls (`loom_copy_control_<field>`).
#[cfg(cuckoo_loom)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Broken {
    /// \[copy.C4\]: a writer never logs its extra.
    pub(crate) no_log: bool,
    /// \[copy.C4\]: a writer logs without its `SeqCst` fence.
    pub(crate) writer_unfenced: bool,
    /// \[copy.C2\]: the copier reads without its `SeqCst` fence.
    pub(crate) copier_unfenced: bool,
    /// \[copy.C3\]: a writer loads `read` after its take's stores instead of before.
    pub(crate) read_bound_after_take: bool,
    /// \[copy.C1\]: the copy starts without the start handshake.
    pub(crate) no_start_handshake: bool,
    /// \[copy.C1\]: the copy collects the extras without the end handshake.
    pub(crate) no_end_handshake: bool,
    /// `run` keeps `announced` and `read` from the copy before.
    pub(crate) no_reset: bool,
    /// \[copy.C3\]: a remove that finds its fingerprint in both buckets takes it from the
    /// primary first even if the alternate was read.
    pub(crate) no_reorder: bool,
}

/// What the loom models observe of a copy, logged in execution order.
#[cfg(all(test, cuckoo_loom))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// The copier stored `active = true` \[copy.C1\].
    Started,
    /// The copier stored `active = false` \[copy.C1\].
    Ending,
    /// The copier took the extras (logged under their lock).
    Collected,
    /// A take's \[copy.C3\]: `read` as loaded, or `None` if it saw no copy running.
    Watched(Option<u64>),
    /// A take logged an extra \[copy.C4\] (logged under the extras' lock).
    Logged,
}

/// The state a table keeps for its copier.
#[derive(Debug)]
pub(crate) struct CopyState {
    /// Whether a copy is running \[copy.C1\].
    active: AtomicBool,
    /// Buckets below this may have been read \[copy.C2\].
    announced: AtomicU64,
    /// Buckets below this have been read \[copy.C2\].
    read: AtomicU64,
    /// Extras logged by writers \[copy.C4\].
    extras: Mutex<Vec<Extra>>,
    /// Held by the copier: one copy of a table at a time.
    running: Mutex<()>,
    #[cfg(cuckoo_loom)]
    pub(crate) broken: Broken,
    #[cfg(all(test, cuckoo_loom))]
    events: std::sync::Mutex<Vec<Event>>,
}

/// What a writer learned at \[copy.C3\]: whether its take must be checked after its stores.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watch {
    /// `read` as loaded before the take's stores.
    read: u64,
}

impl Watch {
    /// Whether the copier had finished reading `bucket` when the watch was taken \[copy.C3\].
    #[inline]
    pub(crate) fn has_read(self, bucket: usize) -> bool {
        (bucket as u64) < self.read
    }
}

impl CopyState {
    pub(crate) fn new() -> Self {
        CopyState {
            active: AtomicBool::new(false),
            announced: AtomicU64::new(0),
            read: AtomicU64::new(0),
            extras: Mutex::new(Vec::new()),
            running: Mutex::new(()),
            #[cfg(cuckoo_loom)]
            broken: Broken::default(),
            #[cfg(all(test, cuckoo_loom))]
            events: std::sync::Mutex::new(Vec::new()),
        }
    }

    #[cfg(all(test, cuckoo_loom))]
    fn record(&self, event: Event) {
        self.events.lock().unwrap().push(event);
    }

    /// The events logged so far.
    #[cfg(all(test, cuckoo_loom))]
    pub(crate) fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// The extras logged and not collected yet.
    #[cfg(all(test, not(cuckoo_loom)))]
    pub(crate) fn logged_extras(&self) -> usize {
        self.extras
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether a remove that finds its fingerprint in both buckets takes it from a bucket
    /// already read first \[copy.C3\].
    #[inline(always)]
    pub(crate) fn reorders(&self) -> bool {
        #[cfg(cuckoo_loom)]
        let reorders = !self.broken.no_reorder;
        #[cfg(not(cuckoo_loom))]
        let reorders = true;
        reorders
    }

    /// \[copy.C3\], called under the stripe locks of a take's buckets before its stores: `None`
    /// when no copy runs (the common case: one Relaxed load of a word only a copier writes).
    #[inline(always)]
    pub(crate) fn watch(&self) -> Option<Watch> {
        // ORDERING: Relaxed; [copy.C1] the handshake orders the copier's store before every lock
        // taken after it, and this load is made under such a lock.
        let watch = if self.active.load(Ordering::Relaxed) {
            self.watch_active()
        } else {
            None
        };
        #[cfg(all(test, cuckoo_loom))]
        self.record(Event::Watched(watch.map(|w| w.read)));
        watch
    }

    #[cold]
    #[inline(never)]
    fn watch_active(&self) -> Option<Watch> {
        #[cfg(cuckoo_loom)]
        if self.broken.read_bound_after_take {
            return Some(Watch { read: u64::MAX });
        }
        // ORDERING: Acquire; [copy.C3] pairs with the Release store of `read` in [copy.C2]: a bucket
        // below this bound was read before this take's stores.
        let read = self.read.load(Ordering::Acquire);
        Some(Watch { read })
    }

    /// \[copy.C4\], called under the same locks after a take of `fp` from bucket `taken`, whose
    /// pair's other bucket `other` holds a copy of `fp` (checked by the caller).
    #[inline]
    pub(crate) fn after_take(&self, watch: Watch, taken: usize, other: usize, fp: u64) {
        #[cfg(cuckoo_loom)]
        let watch = if self.broken.read_bound_after_take {
            // ORDERING: Acquire; the broken variant's late load.
            let read = self.read.load(Ordering::Acquire);
            Watch { read }
        } else {
            watch
        };
        if (taken as u64) < watch.read {
            return;
        }
        self.check_straddle(other, fp);
    }

    /// \[copy.C5\], called under the locks of a put into the alternate after its stores: the
    /// overflow bit it set in `primary` \[overflow.W2\] may be missing from the copy if the
    /// copier read `primary` before it, so the pair gets an extra (placed with both buckets'
    /// bits).
    #[inline]
    pub(crate) fn after_mark(&self, watch: Watch, primary: usize, fp: u64) {
        if (primary as u64) < watch.read {
            self.log(Extra {
                bucket: primary,
                fp,
            });
        } else {
            self.check_straddle(primary, fp);
        }
    }

    #[cold]
    fn log(&self, extra: Extra) {
        let mut extras = self.extras.lock().unwrap_or_else(PoisonError::into_inner);
        extras.push(extra);
        #[cfg(all(test, cuckoo_loom))]
        self.record(Event::Logged);
    }

    #[cold]
    #[inline(never)]
    fn check_straddle(&self, other: usize, fp: u64) {
        #[cfg(cuckoo_loom)]
        if self.broken.no_log {
            return;
        }
        #[cfg(cuckoo_loom)]
        let fenced = !self.broken.writer_unfenced;
        #[cfg(not(cuckoo_loom))]
        let fenced = true;
        if fenced {
            // ORDERING: SeqCst fence; [copy.C4] against the copier's fence of [copy.C2]: either the
            // copier's later loads see this take's stores, or the load below sees the
            // copier's announcement.
            fence(Ordering::SeqCst);
        }
        // ORDERING: Relaxed; [copy.C4] ordered after this take's stores by the fence above.
        if (other as u64) < self.announced.load(Ordering::Relaxed) {
            self.log(Extra { bucket: other, fp });
        }
    }

    /// Runs a copy: \[copy.C1\] start, `body` (which reads the words in chunks through
    /// [`Chunks`]), \[copy.C1\] end, and returns `body`'s result with the extras.
    pub(crate) fn run<T>(
        &self,
        stripes: &[AtomicU64],
        body: impl FnOnce(&mut Chunks<'_>) -> T,
    ) -> (T, Vec<Extra>) {
        let _one_copier = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        #[cfg(cuckoo_loom)]
        let reset = !self.broken.no_reset;
        #[cfg(not(cuckoo_loom))]
        let reset = true;
        if reset {
            // ORDERING: Relaxed; published to writers by the handshake below [copy.C1].
            self.announced.store(0, Ordering::Relaxed);
            // ORDERING: Relaxed; as above.
            self.read.store(0, Ordering::Relaxed);
        }
        // Extras a copy whose sink panicked left behind (its end handshake ran while
        // unwinding, so no writer of it still logs).
        self.extras
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        // ORDERING: Relaxed; [copy.C1] published by the handshake.
        self.active.store(true, Ordering::Relaxed);
        #[cfg(all(test, cuckoo_loom))]
        self.record(Event::Started);
        #[cfg(cuckoo_loom)]
        let start_handshake = !self.broken.no_start_handshake;
        #[cfg(not(cuckoo_loom))]
        let start_handshake = true;
        if start_handshake {
            handshake(stripes);
        }
        let ending = Ending {
            state: self,
            stripes,
        };
        let result = body(&mut Chunks { state: self });
        drop(ending);
        let extras = {
            let mut logged = self.extras.lock().unwrap_or_else(PoisonError::into_inner);
            #[cfg(all(test, cuckoo_loom))]
            self.record(Event::Collected);
            std::mem::take(&mut *logged)
        };
        (result, extras)
    }
}

/// Takes and releases every stripe lock in ascending order \[copy.C1\].
fn handshake(stripes: &[AtomicU64]) {
    for stripe in stripes {
        drop(super::stripe::StripeLock::acquire(stripe));
    }
}

/// Ends a copy \[copy.C1\], also when the copier's sink fails or panics.
struct Ending<'a> {
    state: &'a CopyState,
    stripes: &'a [AtomicU64],
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        // ORDERING: Relaxed; [copy.C1] the handshake below waits out every writer that saw `true`.
        self.state.active.store(false, Ordering::Relaxed);
        #[cfg(all(test, cuckoo_loom))]
        self.state.record(Event::Ending);
        #[cfg(cuckoo_loom)]
        let end_handshake = !self.state.broken.no_end_handshake;
        #[cfg(not(cuckoo_loom))]
        let end_handshake = true;
        if end_handshake {
            handshake(self.stripes);
        }
    }
}

/// The copier's side of \[copy.C2\].
#[derive(Debug)]
pub(crate) struct Chunks<'a> {
    state: &'a CopyState,
}

impl Chunks<'_> {
    /// Announces buckets up to `end`, runs `read` (the loads of the chunk), then marks them
    /// read \[copy.C2\].
    #[inline]
    pub(crate) fn read<T>(&mut self, end: usize, read: impl FnOnce() -> T) -> T {
        // ORDERING: Relaxed; [copy.C2] ordered before the loads of the chunk by the fence below.
        self.state.announced.store(end as u64, Ordering::Relaxed);
        #[cfg(cuckoo_loom)]
        let fenced = !self.state.broken.copier_unfenced;
        #[cfg(not(cuckoo_loom))]
        let fenced = true;
        if fenced {
            // ORDERING: SeqCst fence; [copy.C2] against a writer's fence of [copy.C4].
            fence(Ordering::SeqCst);
        }
        let result = read();
        // ORDERING: Release; [copy.C2] pairs with the writer's Acquire load of [copy.C3]: the loads
        // above happen before any take that sees this bound.
        self.state.read.store(end as u64, Ordering::Release);
        result
    }
}

#[cfg(all(test, cuckoo_loom))]
mod loom_tests;
