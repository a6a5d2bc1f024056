//! The writer gate: lets a rebuild wait for every create that began before it announced its
//! next filter, without making creates wait for anything.
//!
//! # Protocol
//!
//! - **[W1] A create enters** before it loads the guard's filters: it reads the phase, counts
//!   itself in that phase's counter, and reads the phase again; if the phase moved between the
//!   two reads it uncounts itself and tries again. It stays counted until its store write has
//!   returned (or its future was dropped, or it panicked), then **[W2] leaves**.
//! - **[W3] A rebuild flips** the phase after it published its next filter, and **[W4] waits**
//!   until the old phase's counter reads zero before its scan starts.
//!
//! # Why the scan never starts while a create that missed the next filter is in flight
//!
//! Every operation here and the filters' publication and load are `SeqCst`, so they fall into
//! one total order S. Take a create C that loaded the filters without the next one. Its load
//! precedes the rebuild's publication in S (a `SeqCst` load that misses a `SeqCst` store
//! precedes it), so its second phase read, its count and its first phase read precede the
//! publication too, and so the flip and the rebuild's reads of the counter. C's second read saw
//! the phase p written by the last flip before it in S. If the rebuild's flip is the next flip
//! after that read, its old phase is p and every one of its zero checks comes after C's count
//! in S: it sees C counted until C leaves. If another rebuild's flip came in between, that
//! rebuild flipped away from p after C's count and waited for C to leave; rebuilds run one at a
//! time, so C left before this rebuild began. Either way C's store write has returned before
//! the scan starts, and the scan sees it.
//!
//! A create counted in the new phase read that phase after the flip, hence after the
//! publication, and loads the next filter: it inserts its key there itself. Such creates are
//! never waited for, so a stream of creates cannot hold a rebuild back; a create that keeps
//! entering the old phase sees the flip on its second read and moves to the new one.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicUsize, Ordering};

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

    /// [W1] Counts a create in the current phase; returns the phase to [`leave`](Self::leave).
    pub(crate) fn enter(&self) -> usize {
        loop {
            // ORDERING: SeqCst; [W1] in the total order with [W3] and [W4] (module docs).
            let phase = self.phase.load(Ordering::SeqCst);
            // ORDERING: SeqCst; [W1]: a rebuild's [W4] read after this in S sees the count.
            self.active[phase].fetch_add(1, Ordering::SeqCst);
            // ORDERING: SeqCst; [W1]: a flip before this read in S moves the create to the new
            // phase, whose filters it then loads with the next filter in them.
            if self.phase.load(Ordering::SeqCst) == phase {
                return phase;
            }
            // ORDERING: Relaxed; the create was not yet counted for any rebuild's purpose (it
            // has loaded nothing), so its uncounting publishes nothing.
            self.active[phase].fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// [W2] Uncounts a create once its store write has returned.
    pub(crate) fn leave(&self, phase: usize) {
        // ORDERING: SeqCst (at least Release); [W2] pairs with [W4]: the rebuild that reads the
        // count this leaves also sees everything the create did before, its store write
        // included.
        self.active[phase].fetch_sub(1, Ordering::SeqCst);
    }

    /// [W3] Flips the phase (after the next filter is published); returns the old phase.
    pub(crate) fn flip(&self) -> usize {
        // ORDERING: SeqCst; [W3] follows the publication in S and precedes [W4].
        self.phase.fetch_xor(1, Ordering::SeqCst)
    }

    /// [W4] Whether every create counted in `phase` has left.
    pub(crate) fn drained(&self, phase: usize) -> bool {
        // ORDERING: SeqCst; [W4]: reads every [W1] count that precedes it in S, and (Acquire)
        // synchronizes with the [W2] it reads, so the scan that follows sees those store
        // writes.
        self.active[phase].load(Ordering::SeqCst) == 0
    }
}
