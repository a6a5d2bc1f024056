//! A guard's side of a fleet: whether it may answer "absent", and how the creates and deletes
//! other guards announced reach its filters. The coordinator and the member's tasks are in
//! [`crate::fleet`] (feature `fleet`); this module holds only what lookups and the filters
//! need, so the loom models check it.
//!
//! # Protocol
//!
//! - **[fleet.F1] A lookup in a fleet** loads the fleet word (`SeqCst`) before it reads the
//!   filter. A word that says "in a fleet, not serving" answers [`Admission::FailOpen`]
//!   (ask the store). A filter that reports the key answers "maybe" as always. A filter that
//!   misses the key answers "absent" only if, after the filter read, the fleet clock is
//!   before the lease deadline and the word (`SeqCst`) is the one loaded first.
//! - **[fleet.F2] Leaving service** (a lease found gone, a coordinator error that may have
//!   skipped entries, a rejoin) advances the word and clears its serving bit (`SeqCst`)
//!   before anything that follows it: a new registration, a catch-up, a rebuild.
//! - **[fleet.F3] Entering service** advances the word and sets the serving bit (`SeqCst`),
//!   only after the member's registration is caught up ([`crate::fleet`]'s docs) and the
//!   deadline was set from a renewal sent after that registration.
//! - **[fleet.F4] A create announced by another guard** loads the filters (`SeqCst`) and
//!   inserts into the current filter and a pending next one, each hashed by its own hasher,
//!   even if the filter already reports the key (an update's create: the copy is counted
//!   stale, for the rebuild policy). A filter at its memory ceiling is marked instead, as a
//!   local create marks it ([guard.R4]). The member acknowledges the entry's
//!   position only after this returned.
//! - **[fleet.F5] A delete announced by another guard** removes a copy only from the
//!   current generation, and only if that generation's scan ended before the delete began:
//!   the delete carries the position its writer had applied before its store delete, and the
//!   generation carries the log's top noted after its scan ended ([`Generation::scanned_at`]);
//!   the delete's position must be past it. Every other filter keeps a stale copy, counted.
//! - **[fleet.F7] A sealed member** ([`crate::fleet`]'s [fleet.M8]) refuses its guard's
//!   creates: the seal stores the flag (`SeqCst`) before it takes the rebuild claim; a create
//!   loads it (`SeqCst`) after its filter inserts, inside the writer gate, and if set removes
//!   its copies and is refused before any store write or announcement. A create that entered
//!   the gate before the seal's drain flipped it is waited for by the drain, so its insert (or
//!   its removal) is in the file; one that entered after loads the flag as set. So every
//!   create that went on to announce and write has its copy in the sealed file.
//! - **[fleet.F6] A rebuild in a fleet**, after it published its next filter, reads the keys
//!   of every create the coordinator lists as in flight (announced, store write not known to
//!   have ended) and inserts them before its scan; it notes the log's top after its scan,
//!   before it publishes the next filter as current.
//!
//! # Why a lookup's "absent" is sound
//!
//! A create's writer waits, after announcing and before its store write, until every
//! member registered when it announced has acknowledged the entry, or has left, or has a
//! lease that is gone from the coordinator and has not been renewed for a lease's length on
//! the writer's own clock ([`crate::fleet`]). A member acknowledges only what it applied
//! ([fleet.F4]), so a create whose write a lookup can see either has its copy in this
//! guard's filters, or was written while this guard's lease had lapsed. A lapsed lease ends
//! the guard's service in two ways: its deadline, taken conservatively from the renewal's
//! send time, passed before the coordinator expired the lease ([fleet.F1]'s clock check); and
//! the renewal that finds the lease gone advances the word ([fleet.F2]). A lookup that read
//! the filter before the word advanced and checks it after sees the change; one that loads
//! the word after sees "not serving" until [fleet.F3], which follows the catch-up.
//!
//! A generation's copies: the scan holds every key committed before it began. A local create
//! in flight across the scan is the gate's ([guard.R1]). A remote create announced before the
//! rebuild's in-flight read had either ended by then (its write precedes the scan) or is
//! listed ([fleet.F6]); one announced after it is applied after it, so its apply finds the
//! next filter ([fleet.F4]) before the member acknowledges and the writer writes. A remote delete that began after the scan ended
//! removes a key whose copy this generation holds ([fleet.F5]); a delete that began before
//! may concern a key the scan never saw, and removing "its" copy could take another key's.

// Without the `fleet` feature only lookups use this module (a guard alone never joins).
#![cfg_attr(not(feature = "fleet"), allow(dead_code))]

use super::{Admission, Generation, GuardCore, Lookup};
use crate::sharded::bump;
use crate::sync::{pin, AtomicBool, AtomicU64, Ordering};
use crate::InsertError;
use std::hash::{BuildHasher, Hash};

/// What a lookup of a warm guard answered, and why: kept apart for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Pass,
    Blocked,
    /// [fleet.F1]: the member cannot vouch for its filter.
    FailOpen,
    /// [guard.R4]: the filter missed, but it lacks keys created at its memory ceiling.
    Ceiling,
}

impl Decision {
    fn admission(self) -> Admission {
        match self {
            Decision::Pass => Admission::Pass,
            Decision::Blocked => Admission::Blocked,
            Decision::FailOpen | Decision::Ceiling => Admission::FailOpen,
        }
    }
}

/// The word of a guard that is in no fleet: lookups answer from the filter alone.
const ALONE: u64 = 0;
/// Set in the word of a guard in a fleet.
const MEMBER: u64 = 1;
/// Set while the member may answer "absent".
const SERVING: u64 = 2;
/// Each change of service adds this, so a lookup sees any change between its two loads.
const STEP: u64 = 4;

/// A position in a fleet's log of announcements: a Redis stream id, `ms-seq`. Positions
/// grow with each entry; `Position::ZERO` is before the first.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::fleet::Position;
///
/// let p: Position = "1700000000000-3".parse()?;
/// assert!(p > Position::ZERO);
/// assert_eq!(p.to_string(), "1700000000000-3");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    /// The milliseconds part.
    pub ms: u64,
    /// The sequence part.
    pub seq: u64,
}

impl Position {
    /// Before every entry.
    pub const ZERO: Position = Position { ms: 0, seq: 0 };
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// A string that is not a position (`ms-seq`, two decimal numbers).
///
/// # Examples
///
/// ```
/// use cuckoo_guard::fleet::Position;
///
/// assert!("12".parse::<Position>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PositionError {
    /// Not two decimal numbers joined by `-`.
    Malformed(String),
}

impl std::fmt::Display for PositionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PositionError::Malformed(s) => write!(f, "{s:?} is not a log position (ms-seq)"),
        }
    }
}

impl std::error::Error for PositionError {}

impl std::str::FromStr for Position {
    type Err = PositionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let malformed = || PositionError::Malformed(s.to_owned());
        let (ms, seq) = s.split_once('-').ok_or_else(malformed)?;
        Ok(Position {
            ms: ms.parse().map_err(|_| malformed())?,
            seq: seq.parse().map_err(|_| malformed())?,
        })
    }
}

/// Why a fleet operation failed ([`GuardError::Fleet`](crate::guard::GuardError::Fleet)).
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::FleetError;
///
/// let error = FleetError::Config(String::from("the lease must exceed the margin"));
/// assert!(error.to_string().contains("lease"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum FleetError {
    /// The coordinator failed or could not be reached.
    Coordinator(Box<dyn std::error::Error + Send + Sync>),
    /// A create waited this long for members' acknowledgements and was refused; the store
    /// was not touched.
    Timeout {
        /// How long it waited.
        waited: std::time::Duration,
        /// Members that had not acknowledged.
        pending: usize,
    },
    /// The fleet's settings are inconsistent.
    Config(String),
    /// The guard is not warm (a rebuild or a join needs its warm-up first, or the join runs
    /// one), or its member cannot seal (it is not caught up).
    Guard(String),
    /// The guard's member was sealed ([`Fleet::seal`](crate::fleet::Fleet::seal)): creates
    /// through the guard are refused; the store was not changed.
    Sealed,
}

impl std::fmt::Display for FleetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FleetError::Coordinator(e) => write!(f, "the fleet's coordinator failed: {e}"),
            FleetError::Timeout { waited, pending } => write!(
                f,
                "{pending} fleet member(s) did not acknowledge the create within {waited:?}; \
                 the store was not changed"
            ),
            FleetError::Config(why) => write!(f, "invalid fleet settings: {why}"),
            FleetError::Guard(why) => write!(f, "the guard cannot do this in its fleet: {why}"),
            FleetError::Sealed => write!(
                f,
                "the guard's fleet member was sealed: creates are refused; the store was not changed"
            ),
        }
    }
}

impl std::error::Error for FleetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FleetError::Coordinator(e) => Some(&**e),
            _ => None,
        }
    }
}

/// Whether a member may answer "absent", and until when ([fleet.F1]-[fleet.F3]).
#[derive(Debug)]
pub(crate) struct FleetState {
    word: AtomicU64,
    /// The lease deadline on the fleet clock, in milliseconds.
    deadline: AtomicU64,
    /// [fleet.F7]: the member was sealed; the guard's creates are refused.
    sealed: AtomicBool,
    /// The models' clock, moved by their actors.
    #[cfg(cuckoo_loom)]
    pub(crate) now: AtomicU64,
}

impl FleetState {
    pub(crate) fn new() -> Self {
        FleetState {
            word: AtomicU64::new(ALONE),
            deadline: AtomicU64::new(0),
            sealed: AtomicBool::new(false),
            #[cfg(cuckoo_loom)]
            now: AtomicU64::new(0),
        }
    }

    /// The fleet clock, in milliseconds: `CLOCK_BOOTTIME` on Linux, which keeps counting
    /// while the process is stopped and while the machine is suspended, so a member paused
    /// past its deadline sees it passed when it resumes.
    pub(crate) fn now(&self) -> u64 {
        #[cfg(cuckoo_loom)]
        {
            // ORDERING: SeqCst; the models' clock is one more shared variable.
            self.now.load(Ordering::SeqCst)
        }
        #[cfg(not(cuckoo_loom))]
        {
            fleet_clock_ms()
        }
    }
}

/// Milliseconds since an arbitrary start, counting stopped and suspended time where the
/// platform allows.
#[cfg(not(cuckoo_loom))]
pub(crate) fn fleet_clock_ms() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_BOOTTIME exists on every Linux
        // this crate builds for (2.6.39+).
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        if rc == 0 {
            return ts.tv_sec as u64 * 1_000 + ts.tv_nsec as u64 / 1_000_000;
        }
    }
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

impl<H> GuardCore<H> {
    /// Makes the guard a fleet member that does not serve yet ([fleet.F2]).
    pub(crate) fn fleet_join(&self) {
        // ORDERING: SeqCst; [fleet.F2] from "alone": lookups after it fail open.
        let _ = self
            .fleet
            .word
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| {
                Some(((word | MEMBER) & !SERVING) + STEP)
            });
    }

    /// [fleet.F7]: refuses the guard's creates from now on; called before the seal's claim.
    pub(crate) fn fleet_seal(&self) {
        // ORDERING: SeqCst; [fleet.F7]: before the seal's drain flips the gate, so a create
        // that enters the gate after the flip loads `true`.
        self.fleet.sealed.store(true, Ordering::SeqCst);
    }

    /// [fleet.F7]: whether the member was sealed; a create checks it after its filter
    /// inserts, inside the writer gate.
    pub(crate) fn fleet_sealed(&self) -> bool {
        // ORDERING: SeqCst; [fleet.F7]: after the gate entry, so either the seal's drain
        // waits for this create or this load follows the seal's store.
        self.fleet.sealed.load(Ordering::SeqCst)
    }

    /// [fleet.F2]: stops answering "absent".
    pub(crate) fn fleet_stop_serving(&self) {
        // ORDERING: SeqCst; [fleet.F2]: a lookup whose first load preceded this sees a
        // different word at its second.
        let _ = self
            .fleet
            .word
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| {
                (word & MEMBER != 0).then_some((word & !SERVING) + STEP)
            });
    }

    /// [fleet.F3]: answers "absent" again (until the deadline).
    pub(crate) fn fleet_start_serving(&self) {
        // ORDERING: SeqCst; [fleet.F3], after the catch-up's inserts (program order) and the
        // deadline's store.
        let _ = self
            .fleet
            .word
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| {
                (word & MEMBER != 0).then_some((word | SERVING) + STEP)
            });
    }

    /// Whether the member answers "absent" now (not counting the deadline).
    pub(crate) fn fleet_serving(&self) -> bool {
        // ORDERING: SeqCst; a status read.
        let word = self.fleet.word.load(Ordering::SeqCst);
        word & MEMBER == 0 || word & SERVING != 0
    }

    /// Sets the lease deadline, in milliseconds of [`FleetState::now`].
    pub(crate) fn fleet_set_deadline(&self, deadline: u64) {
        // ORDERING: SeqCst; [fleet.F1]: read by lookups after their filter read.
        self.fleet.deadline.store(deadline, Ordering::SeqCst);
    }

    /// The lease deadline.
    pub(crate) fn fleet_deadline(&self) -> u64 {
        // ORDERING: SeqCst; a status read.
        self.fleet.deadline.load(Ordering::SeqCst)
    }

    /// The fleet clock.
    pub(crate) fn fleet_now(&self) -> u64 {
        self.fleet.now()
    }
}

impl<H: BuildHasher> GuardCore<H> {
    /// [fleet.F1] A lookup of a warm guard, counted.
    #[inline]
    pub(super) fn admit_warm<K: Hash + ?Sized>(&self, key: &K) -> Admission {
        let decision = self.decide(key);
        self.count(decision);
        decision.admission()
    }

    /// Counts one lookup's decision.
    #[inline]
    fn count(&self, decision: Decision) {
        let shard = self.shard();
        bump(match decision {
            Decision::Pass => &shard.passed,
            Decision::Blocked => &shard.blocked,
            Decision::FailOpen => &shard.fail_open,
            Decision::Ceiling => &shard.passed_at_ceiling,
        });
    }

    /// [fleet.F1] for a batch of lookups of a warm guard, counted: the fleet word loaded once
    /// before the filter reads, one `contains_many`, and each key the filter missed checked
    /// against the generation's mark ([guard.R4]) and the lease after the reads, as
    /// [`decide_warm`](Self::decide_warm) checks one.
    pub(super) fn admit_warm_many<K: Hash>(&self, keys: &[K]) -> Vec<Admission> {
        // ORDERING: SeqCst; [fleet.F1] first load, before the filter reads.
        let word = self.fleet.word.load(Ordering::SeqCst);
        let mut decisions = vec![Decision::FailOpen; keys.len()];
        if word & MEMBER == 0 || word & SERVING != 0 {
            let mut found = vec![false; keys.len()];
            let lacks = self.filter_contains_many(keys, &mut found);
            let serving = found.contains(&false)
                && !lacks
                && (word == ALONE || self.fleet_still_serving(word));
            for (decision, found) in decisions.iter_mut().zip(found) {
                if found {
                    *decision = Decision::Pass;
                } else if lacks {
                    *decision = Decision::Ceiling;
                } else if serving {
                    *decision = Decision::Blocked;
                }
            }
        }
        decisions
            .into_iter()
            .map(|decision| {
                self.count(decision);
                decision.admission()
            })
            .collect()
    }

    /// [fleet.F1] A lookup of a warm guard, not counted.
    #[inline]
    pub(super) fn decide_warm<K: Hash + ?Sized>(&self, key: &K) -> Admission {
        self.decide(key).admission()
    }

    /// [fleet.F1] and [guard.R4]: what a lookup of a warm guard answers, and why.
    #[inline]
    fn decide<K: Hash + ?Sized>(&self, key: &K) -> Decision {
        // ORDERING: SeqCst; [fleet.F1] first load, before the filter read.
        let word = self.fleet.word.load(Ordering::SeqCst);
        if word & MEMBER != 0 && word & SERVING == 0 {
            return Decision::FailOpen;
        }
        match self.filter_lookup(key) {
            Lookup::Found => return Decision::Pass,
            Lookup::Uncovered => return Decision::Ceiling,
            Lookup::Missed => {}
        }
        if word != ALONE && !self.fleet_still_serving(word) {
            return Decision::FailOpen;
        }
        Decision::Blocked
    }

    /// [fleet.F1] After a filter read that missed: the deadline has not passed and the word
    /// did not change.
    fn fleet_still_serving(&self, word: u64) -> bool {
        #[cfg(cuckoo_loom)]
        if self.broken.no_deadline_check {
            // ORDERING: SeqCst; the broken variant's second load only.
            return self.fleet.word.load(Ordering::SeqCst) == word;
        }
        // ORDERING: SeqCst; [fleet.F1], after the filter read.
        let deadline = self.fleet.deadline.load(Ordering::SeqCst);
        if self.fleet.now() >= deadline {
            return false;
        }
        #[cfg(cuckoo_loom)]
        if self.broken.word_not_rechecked {
            return true;
        }
        // ORDERING: SeqCst; [fleet.F1] second load: any change of service since the first.
        self.fleet.word.load(Ordering::SeqCst) == word
    }

    /// [fleet.F4] Applies a create another guard announced: into the current filter and a
    /// pending next one.
    pub(crate) fn apply_create<K: Hash + ?Sized>(&self, key: &K) -> Result<(), InsertError> {
        let pin = pin();
        // ORDERING: SeqCst; [fleet.F4]: a create announced after a rebuild's in-flight read
        // ([fleet.F6]) is applied after it, and finds the next filter published before it.
        let filters = self.filters.load(Ordering::SeqCst, &pin);
        let hash = filters.current.filter.hash_key(key);
        // A key the filter reports already (an update elsewhere, most likely) gets a second
        // copy all the same ([fleet.F4]); counted as stale, so the rebuild policy reclaims
        // the slots.
        let duplicate = filters.current.filter.contains_hash(hash);
        #[cfg(cuckoo_loom)]
        let next = filters
            .next
            .as_deref()
            .filter(|_| !self.broken.apply_skips_next);
        #[cfg(not(cuckoo_loom))]
        let next = filters.next.as_deref();
        let next = next.map(|next| (next, next.filter.hash_key(key)));
        // [guard.R4]: a filter at its memory ceiling is marked instead, before the member
        // acknowledges, as a local create marks it before its store write.
        self.insert_copies(&filters.current, hash, next, |filter, hash| {
            filter.insert_hash(hash)
        })?;
        bump(&self.shard().applied_creates);
        if duplicate {
            self.stale_copy();
        }
        Ok(())
    }

    /// [fleet.F5] Applies a delete another guard announced, begun when its writer had applied
    /// the log up to `after`. Returns whether a copy was removed.
    pub(crate) fn apply_delete<K: Hash + ?Sized>(&self, key: &K, after: Position) -> bool {
        let pin = pin();
        // ORDERING: Acquire; which generations are found does not matter for safety: only the
        // current one whose scan ended before `after` is touched.
        let filters = self.filters.load(Ordering::Acquire, &pin);
        let mut removed = false;
        for generation in filters.both() {
            let current = std::ptr::eq(generation, &*filters.current);
            #[cfg(cuckoo_loom)]
            let scanned_before =
                self.broken.delete_ignores_scan || generation.scanned_before(after);
            #[cfg(not(cuckoo_loom))]
            let scanned_before = generation.scanned_before(after);
            if current && scanned_before {
                if generation.filter.remove(key) {
                    removed = true;
                } else {
                    bump(&self.shard().missing_copies);
                }
            } else {
                self.stale_copy();
            }
        }
        bump(&self.shard().applied_deletes);
        removed
    }

    /// [fleet.F5] Notes on the warm-up's generation (0) the log's top read after its scan, if
    /// it is still current (a rebuild's generation notes its own).
    pub(crate) fn set_scanned_at(&self, top: Position) {
        let pin = pin();
        // ORDERING: Acquire; which generation is current.
        let filters = self.filters.load(Ordering::Acquire, &pin);
        if filters.current.id == 0 {
            filters.current.note_scanned_at(top);
        }
    }
}

impl<H> GuardCore<H> {
    /// [fleet.F5] The current generation's scan position, if noted.
    pub(crate) fn current_scanned_at(&self) -> Option<Position> {
        let pin = pin();
        // ORDERING: Acquire; which generation is current (a seal reads it under the rebuild
        // claim, so it stays current).
        let filters = self.filters.load(Ordering::Acquire, &pin);
        let scanned_at = *filters
            .current
            .scanned_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        scanned_at
    }
}

impl<H> Generation<H> {
    /// [fleet.F5] Records the log's top read after this generation's scan ended.
    pub(crate) fn note_scanned_at(&self, top: Position) {
        *self
            .scanned_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(top);
    }

    /// [fleet.F5] Whether a delete begun after its writer applied `after` began after this
    /// generation's scan ended.
    fn scanned_before(&self, after: Position) -> bool {
        let scanned_at = *self
            .scanned_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        matches!(scanned_at, Some(top) if after > top)
    }
}
