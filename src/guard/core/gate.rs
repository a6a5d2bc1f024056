//! The writer gate: lets a rebuild wait for every create that began before it announced its
//! next filter, without making creates wait for anything.
//!
//! # Protocol
//!
//! - **[gate.W1] A create enters** before it loads the guard's filters: it reads the phase, counts
//!   itself in that phase's counter, issues a `SeqCst` fence, and reads the phase again; if the
//!   phase moved between the two reads it uncounts itself and tries again. It stays counted
//!   until its store write has returned (or its future was dropped, or it panicked), then
//!   **[gate.W2] leaves**.
//! - **[gate.W3] A rebuild** publishes its next filter and issues a `SeqCst` fence; then it
//!   flips the phase, and **[gate.W4] waits** until the old phase's counter reads zero before its
//!   scan starts.
//!
//! # Why the scan never starts while a create that missed the next filter is in flight
//!
//! The create's fence (after its count, before its filter load) and the rebuild's fence (after
//! its publication, before any of its counter reads and its flip) are ordered one way or the
//! other in the total order of `SeqCst` fences:
//!
//! - **The rebuild's fence first.** The create's filter load, after its own fence, sees the
//!   publication (a write before the earlier fence is visible to a read after the later one):
//!   the create finds the next filter and inserts its key there itself.
//! - **The create's fence first.** The rebuild's counter reads, after its fence, see the
//!   create's count. The create's second phase read either saw the phase this flip replaces,
//!   and then the rebuild waits on exactly that counter until the create leaves; or it saw the
//!   flip itself, and then (acquiring from the flip, which follows the publication) its filter
//!   load sees the next filter.
//!
//! A second fence, after the flip and before the counter reads, settles which phase a create
//! counts in against each flip: either the rebuild's reads see its count, or its second phase
//! read sees the flip (and it recounts in the new phase). So a create cannot stay counted in a
//! phase, on a stale read of it, after a rebuild drained that phase: the next rebuild, which
//! waits only on the other phase, would miss it. (`SeqCst` reads alone exclude this too; the
//! fence states it in the terms loom checks.)
//!
//! The counter a rebuild waits on must not hold creates from before an *earlier* flip that
//! nobody waited for: a rebuild that stops before its wait hands its phase on, and the next
//! rebuild waits for it to drain (after its own fence) before flipping (module `rebuild`).
//! Such a create may have loaded the filters after the stopped rebuild withdrew its next
//! filter; the next rebuild's fence covers it as above, its counter read being the drain of
//! the handed-on phase. With every flip drained before the next, a create counted in the old
//! phase is one that entered since the last flip, which the cases above cover.
//!
//! A create counted in the new phase is never waited for, so a stream of creates cannot hold a
//! rebuild back; a create that keeps entering the old phase sees the flip on its second read
//! and moves to the new one. (The fences are what loom checks: it models `SeqCst` fences but
//! treats `SeqCst` accesses as acquire/release.)

use crossbeam_utils::CachePadded;

use crate::sync::{fence, AtomicUsize, Ordering};

/// The phase and the two phases' counts of creates in flight.
#[derive(Debug)]
pub(crate) struct Gate {
    phase: AtomicUsize,
    active: [CachePadded<AtomicUsize>; 2],
}

impl Gate {
    pub(crate) fn new() -> Self {
        Gate {
            phase: AtomicUsize::new(0),
            active: [
                CachePadded::new(AtomicUsize::new(0)),
                CachePadded::new(AtomicUsize::new(0)),
            ],
        }
    }

    /// [gate.W1] Counts a create in the current phase; returns the phase to [`leave`](Self::leave).
    pub(crate) fn enter(&self) -> usize {
        loop {
            // ORDERING: SeqCst; [gate.W1] the phase to count in.
            let phase = self.phase.load(Ordering::SeqCst);
            // ORDERING: SeqCst; [gate.W1] the count a rebuild's [gate.W4] reads.
            self.active[phase].fetch_add(1, Ordering::SeqCst);
            // ORDERING: SeqCst fence; [gate.W1] against the rebuild's fence in [gate.W3]: either the
            // rebuild's counter reads see the count, or the create's filter load sees the
            // next filter (module docs).
            fence(Ordering::SeqCst);
            // ORDERING: SeqCst (Acquire); [gate.W1]: reading the flip acquires the publication
            // before it, so the filter load that follows finds the next filter.
            if self.phase.load(Ordering::SeqCst) == phase {
                return phase;
            }
            // ORDERING: Relaxed; the create was not yet counted for any rebuild's purpose (it
            // has loaded nothing), so its uncounting publishes nothing.
            self.active[phase].fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// [gate.W2] Uncounts a create once its store write has returned.
    pub(crate) fn leave(&self, phase: usize) {
        // ORDERING: SeqCst (at least Release); [gate.W2] pairs with [gate.W4]: the rebuild that reads the
        // count this leaves also sees everything the create did before, its store write
        // included.
        self.active[phase].fetch_sub(1, Ordering::SeqCst);
    }

    /// [gate.W3] Called by a rebuild right after it published its next filter, before any
    /// [`drained`](Self::drained) or [`flip`](Self::flip).
    pub(crate) fn published(&self) {
        // ORDERING: SeqCst fence; [gate.W3] against the create's fence in [gate.W1]: after it, the
        // rebuild's counter reads see every count whose fence came first, and a create whose
        // fence comes later sees the publication.
        fence(Ordering::SeqCst);
    }

    /// [gate.W3] Flips the phase (after [`published`](Self::published)); returns the old phase.
    pub(crate) fn flip(&self) -> usize {
        // ORDERING: SeqCst (Release); [gate.W3]: a create that reads the new phase acquires the
        // publication sequenced before this flip.
        let old = self.phase.fetch_xor(1, Ordering::SeqCst);
        // ORDERING: SeqCst fence; [gate.W3] against the create's fence in [gate.W1], for the phase:
        // either this rebuild's counter reads see the create's count, or the create's second
        // phase read sees the flip and it moves to the new phase.
        fence(Ordering::SeqCst);
        old
    }

    /// [gate.W3] without the fence after the flip: a loom negative control.
    #[cfg(cuckoo_loom)]
    pub(crate) fn flip_unfenced(&self) -> usize {
        // ORDERING: SeqCst; the broken variant of `flip`.
        self.phase.fetch_xor(1, Ordering::SeqCst)
    }

    /// [gate.W4] Whether every create counted in `phase` has left.
    pub(crate) fn drained(&self, phase: usize) -> bool {
        // ORDERING: SeqCst (Acquire); [gate.W4]: after the fence of [gate.W3] it reads every count whose
        // [gate.W1] fence came first, and it synchronizes with the [gate.W2] it reads, so the scan that
        // follows sees those creates' store writes.
        self.active[phase].load(Ordering::SeqCst) == 0
    }
}
