//! The online rebuild ([guard.R3] in the core's docs), written once for the sync and async guards: a
//! turn publishes the next filter, waits at the gate, takes the scanned pages and swaps; the
//! guards make the store calls. Also the automatic triggers and the rebuild counters.
//!
//! # One rebuild at a time, and every flip drained
//!
//! A rebuild first *claims* the guard (a flag set by compare-and-swap), so two never overlap
//! and only the claim holder publishes filters. The claim is an owned value, a
//! [`RebuildClaim`], that clears the flag when it drops: it moves into the thread or task that
//! runs the rebuild and into a seal's file write, and whatever drops it (a finished or stopped
//! turn, a task dropped unrun, a thread that could not be spawned, an abandoned file write)
//! lets the next rebuild start. No path has to give it back by hand. The gate's proof
//! needs every flip away from a phase to be followed by a drain of that phase before the next
//! flip back to it. A turn that stops before its drain (a scan error right away, a dropped
//! future) leaves its phase *undrained* in the log, and the next turn waits for that phase to
//! drain before it flips: no new create enters it meanwhile (the gate's current phase is the
//! other one), so the wait ends when the creates in flight back then have returned.

use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{Filters, Generation, GuardCore};
use crate::guard::{GuardError, RebuildPolicy, RebuildReason, RebuildReport};
use crate::sharded::bump_and_get;
use crate::sync::{pin, AtomicBool, AtomicU64, Ordering};
use crate::{BuildError, InsertError};

/// Writes between two checks of the load and stale-copy triggers (growth is checked on each),
/// and lookups failing open between two checks of the memory ceiling's trigger.
const CHECK_EVERY: u64 = 64;
/// The wait after a failed automatic rebuild before the next may start; doubles per failure.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Attempts at one scanned key's insert that gives up under contention.
const INSERT_ATTEMPTS: usize = 32;

/// The first filter's capacity stays a rebuild's floor only up to this multiple of the keys
/// the rebuild sizes for, plus [`FLOOR_SLACK`] keys: a filter built (or restored) for far more
/// keys than it holds does not make every rebuild allocate for them.
const FLOOR_FACTOR: usize = 8;
/// Keys of floor a rebuild keeps beyond [`FLOOR_FACTOR`] times its keys (128 KiB of 16-bit
/// fingerprints).
const FLOOR_SLACK: usize = 1 << 16;

/// The capacity a rebuild builds for: `len` fingerprints times the headroom, and at least the
/// first filter's capacity `min_capacity` as far as [`FLOOR_FACTOR`] and [`FLOOR_SLACK`] allow.
fn rebuild_capacity(len: usize, headroom: f64, min_capacity: usize) -> usize {
    let need = (len as f64 * headroom).ceil() as usize;
    let floor = min_capacity.min(
        need.saturating_mul(FLOOR_FACTOR)
            .saturating_add(FLOOR_SLACK),
    );
    need.max(floor)
}

/// What the rebuild log holds behind its lock.
#[derive(Debug, Default)]
struct Log {
    rebuilds: u64,
    failed: u64,
    skipped: u64,
    /// Whether a skip was reported on standard error.
    skip_reported: bool,
    /// Whether reaching the memory ceiling was reported on standard error ([guard.R4]).
    ceiling_reported: bool,
    last: Option<RebuildReport>,
    last_error: Option<String>,
    retired_growth_steps: u64,
    stale_at_last_rebuild: u64,
    next_id: u64,
    undrained: Option<usize>,
    not_before: Option<Instant>,
    backoff: Duration,
}

impl Log {
    /// After a failed rebuild, or one that left the filter at its ceiling: the next automatic
    /// one waits twice as long as the last wait ([`FIRST_BACKOFF`] to [`MAX_BACKOFF`]).
    fn back_off(&mut self) {
        self.backoff = (self.backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
        self.not_before = Some(Instant::now() + self.backoff);
    }
}

/// A copy of the rebuild counters, for [`GuardStats`](crate::guard::GuardStats).
#[derive(Debug)]
pub(crate) struct LogSnapshot {
    pub(crate) rebuilds: u64,
    pub(crate) failed: u64,
    pub(crate) skipped: u64,
    pub(crate) running: bool,
    pub(crate) last: Option<RebuildReport>,
    pub(crate) last_error: Option<String>,
    pub(crate) retired_growth_steps: u64,
}

/// The policy, the claim flag and the counters of a guard's rebuilds.
#[derive(Debug)]
pub(crate) struct RebuildLog {
    policy: RebuildPolicy,
    /// The smallest capacity (in keys) a rebuild builds, as far as [`rebuild_capacity`]
    /// bounds it: the first filter's.
    min_capacity: usize,
    /// The claim flag, shared with the [`RebuildClaim`] that holds it.
    running: Arc<AtomicBool>,
    /// Stale copies counted in total; the trigger compares the count since the last rebuild.
    stale: AtomicU64,
    log: Mutex<Log>,
}

/// The right to run the one rebuild (or seal); dropping it lets the next start. Owned (it
/// holds the flag by an `Arc`, as tokio's `OwnedSemaphorePermit` holds its semaphore), so it
/// moves into a rebuild's thread or task and into a seal's file write.
#[derive(Debug)]
pub(crate) struct RebuildClaim {
    running: Arc<AtomicBool>,
}

impl RebuildClaim {
    /// Whether this is the claim of `log`'s flag.
    fn claims(&self, log: &RebuildLog) -> bool {
        Arc::ptr_eq(&self.running, &log.running)
    }
}

impl Drop for RebuildClaim {
    fn drop(&mut self) {
        // ORDERING: Release; pairs with the claim's compare-and-swap, so the next rebuild sees
        // the filters this one published and its log entries.
        self.running.store(false, Ordering::Release);
    }
}

impl RebuildLog {
    pub(crate) fn new(policy: RebuildPolicy, min_capacity: usize) -> Self {
        RebuildLog {
            policy,
            min_capacity,
            running: Arc::new(AtomicBool::new(false)),
            stale: AtomicU64::new(0),
            log: Mutex::new(Log {
                next_id: 1,
                ..Log::default()
            }),
        }
    }

    pub(crate) fn policy(&self) -> &RebuildPolicy {
        &self.policy
    }

    fn lock(&self) -> MutexGuard<'_, Log> {
        // Held only to read or update counters; a panic cannot leave them half-written.
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `phase` as flipped away from and not yet drained (a seal's drain stopped under
    /// the claim): the next turn waits for it before it flips. The phase it replaces, if any,
    /// is the gate's current one, which that turn drains after its flip anyway.
    pub(crate) fn leave_undrained(&self, phase: usize) {
        self.lock().undrained = Some(phase);
    }

    /// [guard.R4] Whether this is the first create at the memory ceiling (to report once).
    pub(crate) fn first_at_ceiling(&self) -> bool {
        !std::mem::replace(&mut self.lock().ceiling_reported, true)
    }

    /// Counts `n` stale copies for the stale-share trigger.
    pub(crate) fn add_stale(&self, n: u64) {
        // ORDERING: Relaxed; a statistic for the trigger, publishes nothing.
        self.stale.fetch_add(n, Ordering::Relaxed);
    }

    /// Sets the claim flag if no rebuild holds it, as the claim that clears it when dropped.
    fn try_claim(&self) -> Option<RebuildClaim> {
        // ORDERING: Acquire on success; pairs with the Release of the previous claim's drop.
        self.running
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(|| RebuildClaim {
                running: Arc::clone(&self.running),
            })
    }

    pub(crate) fn snapshot(&self) -> LogSnapshot {
        // ORDERING: Relaxed; a statistic. Loaded before the lock, as in `finish`.
        let running = self.running.load(Ordering::Relaxed);
        let log = self.lock();
        LogSnapshot {
            rebuilds: log.rebuilds,
            failed: log.failed,
            skipped: log.skipped,
            running,
            last: log.last.clone(),
            last_error: log.last_error.clone(),
            retired_growth_steps: log.retired_growth_steps,
        }
    }
}

/// An automatic rebuild a write triggered: its claim, taken, and why.
#[derive(Debug)]
pub(crate) struct Triggered {
    pub(crate) claim: RebuildClaim,
    pub(crate) reason: RebuildReason,
}

/// Where a turn stands at the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Waiting for a phase an earlier turn left undrained, before flipping.
    Leftover(usize),
    /// Flipped; waiting for the old phase.
    Flipped(usize),
    /// Every create that missed the next filter has left; orphans inserted; scanning.
    Scanning,
}

/// A running rebuild: holds the claim, the current and the next generation.
pub(crate) struct RebuildTurn<'c, H: Send + Sync + 'static> {
    core: &'c GuardCore<H>,
    _claim: RebuildClaim,
    current: Arc<Generation<H>>,
    next: Arc<Generation<H>>,
    stage: Stage,
    reason: RebuildReason,
    started: Instant,
    keys: u64,
    pages: u64,
    len_before: usize,
    growth_steps_before: usize,
    error: Option<String>,
    finished: bool,
    /// The orphans as the loom control `orphans_read_before_the_gate` reads them.
    #[cfg(cuckoo_loom)]
    early_orphans: Option<Vec<super::Orphan>>,
}

impl<H: Send + Sync + 'static> std::fmt::Debug for RebuildTurn<'_, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RebuildTurn")
            .field("next", &self.next.id)
            .field("stage", &self.stage)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl<H: BuildHasher> GuardCore<H> {
    /// Claims the rebuild (for a rebuild or a seal), if none holds it.
    pub(crate) fn claim(&self) -> Option<RebuildClaim> {
        self.rebuilds.try_claim()
    }

    /// Whether an automatic rebuild should start after a write ([`CHECK_EVERY`]); claims it if
    /// so. The caller runs it under the claim, hands it on, or drops it (then nothing runs).
    pub(crate) fn after_write(&self) -> Option<Triggered> {
        let policy = &self.rebuilds.policy;
        // ORDERING: Relaxed; a hint, the claim below decides.
        if !policy.is_automatic()
            || !self.is_ready()
            || self.rebuilds.running.load(Ordering::Relaxed)
        {
            return None;
        }
        let writes = bump_and_get(&self.shard().writes);
        let pin = pin();
        // ORDERING: Acquire; the current filter's published contents.
        let filters = self.filters.load(Ordering::Acquire, &pin);
        if filters.next.is_some() {
            return None;
        }
        let filter = &filters.current.filter;
        // Growth is checked on every write: a negative reads every table. So is the mark
        // ([guard.R4]): while it is set, every lookup the filter misses reads the store.
        let tables = filter.growth_steps().saturating_add(1);
        let reason = if filters.current.lacks_keys() {
            RebuildReason::MemoryLimit
        } else if tables > policy.max_tables_value() {
            RebuildReason::Growth
        } else if writes % CHECK_EVERY != 0 {
            return None;
        } else if filter.load_factor() >= policy.load_threshold_value() {
            RebuildReason::Load
        } else if policy.overflow_share_value() < 1.0
            && filter.overflow_share() >= policy.overflow_share_value()
        {
            RebuildReason::OverflowBits
        } else {
            // ORDERING: Relaxed; a statistic for the trigger.
            let stale = self.rebuilds.stale.load(Ordering::Relaxed);
            let since = stale.saturating_sub(self.rebuilds.lock().stale_at_last_rebuild);
            if (since as f64) < policy.stale_share_value() * filter.len().max(1) as f64 {
                return None;
            }
            RebuildReason::StaleCopies
        };
        self.claim_automatic(reason)
    }

    /// [guard.R4] Whether an automatic rebuild should start after a lookup that failed open
    /// (every [`CHECK_EVERY`]th per shard, so that a flood of them does not queue on the
    /// rebuild log's lock): the current filter lacks keys created at its memory ceiling and
    /// no rebuild is pending. Claims it if so, as [`after_write`](Self::after_write) does. A
    /// marked filter whose rebuild failed is retried by the lookups it sends to the store,
    /// not only by writes.
    pub(crate) fn after_failing_open(&self) -> Option<Triggered> {
        if !self.rebuilds.policy.is_automatic()
            || bump_and_get(&self.shard().failing_open) % CHECK_EVERY != 0
            || !self.is_ready()
            // ORDERING: Relaxed; a hint, the claim below decides.
            || self.rebuilds.running.load(Ordering::Relaxed)
        {
            return None;
        }
        let still_lacking = || {
            let pin = pin();
            // ORDERING: Acquire; as in `filter`.
            let filters = self.filters.load(Ordering::Acquire, &pin);
            filters.next.is_none() && filters.current.lacks_keys()
        };
        if !still_lacking() {
            return None;
        }
        let triggered = self.claim_automatic(RebuildReason::MemoryLimit)?;
        // Again under the claim, which no swap passes: a rebuild that ran between the first
        // look and the claim may have ended the ceiling, and its successor need not scan.
        still_lacking().then_some(triggered)
    }

    /// Claims an automatic rebuild for `reason`, unless a failed or skipped one's wait has not
    /// passed or a rebuild holds the claim.
    fn claim_automatic(&self, reason: RebuildReason) -> Option<Triggered> {
        let waiting = self
            .rebuilds
            .lock()
            .not_before
            .is_some_and(|t| Instant::now() < t);
        if waiting {
            return None;
        }
        let claim = self.rebuilds.try_claim()?;
        Some(Triggered { claim, reason })
    }

    /// An automatic rebuild that claimed the guard and has nowhere to run (`why`): counted, and
    /// reported on standard error the first time. The trigger waits [`FIRST_BACKOFF`] before
    /// it claims again, so a write does not pay for a claim and a skip each time; called
    /// before the claim drops where the caller still holds it.
    pub(crate) fn rebuild_skipped(&self, why: &str) {
        let first = {
            let mut log = self.rebuilds.lock();
            log.skipped += 1;
            let until = Instant::now() + FIRST_BACKOFF;
            log.not_before = Some(log.not_before.map_or(until, |t| t.max(until)));
            !std::mem::replace(&mut log.skip_reported, true)
        };
        if first {
            eprintln!(
                "cuckoo-guard: an automatic rebuild was skipped: {why}; later skips are counted \
                 in GuardStats::rebuilds_skipped"
            );
        }
    }

    /// A rebuild that could not build its next filter: counted as failed, with its error, and
    /// the next automatic one waits as after any failure.
    fn rebuild_not_started(&self, error: &BuildError) {
        let mut log = self.rebuilds.lock();
        log.failed += 1;
        log.last_error = Some(format!("the next filter could not be built: {error}"));
        log.back_off();
    }

    /// [gate.W3] The gate's flip (or, in a loom negative control, its unfenced variant).
    fn flip(&self) -> usize {
        #[cfg(cuckoo_loom)]
        if self.broken.flip_unfenced {
            return self.gate.flip_unfenced();
        }
        self.gate.flip()
    }

    /// [guard.R3] Starts a rebuild under `claim`: builds the next filter (with fresh hash keys where
    /// the builder made the hasher), publishes it beside the current one and flips the gate
    /// (or first waits for an earlier turn's phase).
    pub(crate) fn begin_rebuild<E>(
        &self,
        claim: RebuildClaim,
        reason: RebuildReason,
    ) -> Result<RebuildTurn<'_, H>, GuardError<E>>
    where
        H: Clone + Send + Sync + 'static,
    {
        debug_assert!(claim.claims(&self.rebuilds), "a claim of another guard");
        if !self.is_ready() {
            return Err(GuardError::Warming);
        }
        let pin = pin();
        // ORDERING: Acquire; only the claim holder publishes, so this is what it replaces.
        let filters = self.filters.load(Ordering::Acquire, &pin);
        let current = Arc::clone(&filters.current);
        let len_before = current.filter.len();
        // [guard.R4]: the creates a filter at its ceiling holds no copy of need room too.
        let lacking = usize::try_from(current.uncovered()).unwrap_or(usize::MAX);
        let capacity = rebuild_capacity(
            len_before.saturating_add(lacking),
            self.rebuilds.policy.headroom_value(),
            self.rebuilds.min_capacity,
        );
        let hasher = self.fresh_hasher(&current.filter);
        let build = |capacity: usize| match &hasher {
            Some((hasher, keys)) => {
                current
                    .filter
                    .sibling_hashed_by(capacity, hasher.clone(), *keys)
            }
            None => current.filter.sibling(capacity),
        };
        let filter = match build(capacity) {
            // Past the memory ceiling: the largest first table under it, which holds about
            // as many keys as the current filter's tables together, and which the scan fills
            // (or which stops the rebuild at the ceiling). Its size is computed, so only the
            // filter taken is allocated.
            Err(error @ BuildError::MemoryLimit { .. }) => {
                match current.filter.largest_sibling_under_ceiling(capacity) {
                    Some(fits) => build(fits),
                    None => Err(error),
                }
            }
            built => built,
        }
        .map_err(|error| {
            // No turn exists yet to count it: recorded here, with the failure's wait, so
            // that the writes that trigger rebuilds do not retry it on every call.
            self.rebuild_not_started(&error);
            GuardError::RebuildFilter(error)
        })?;
        let (id, undrained) = {
            let mut log = self.rebuilds.lock();
            log.next_id += 1;
            (log.next_id - 1, log.undrained.take())
        };
        #[cfg(cuckoo_loom)]
        let undrained = undrained.filter(|_| !self.broken.leftover_ignored);
        let next = Arc::new(Generation::new(id, filter));
        self.filters.replace(
            Filters {
                current: Arc::clone(&current),
                next: Some(Arc::clone(&next)),
            },
            // ORDERING: SeqCst; [guard.R3] publication, in the gate's total order before the flip.
            Ordering::SeqCst,
            &pin,
        );
        self.gate.published();
        let stage = match undrained {
            Some(phase) => Stage::Leftover(phase),
            None => Stage::Flipped(self.flip()),
        };
        #[cfg(cuckoo_loom)]
        let early_orphans = self.broken.orphans_read_before_the_gate.then(|| {
            self.orphans
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|recorded| recorded.orphan.clone())
                .collect()
        });
        Ok(RebuildTurn {
            core: self,
            _claim: claim,
            growth_steps_before: current.filter.growth_steps(),
            current,
            next,
            stage,
            reason,
            started: Instant::now(),
            keys: 0,
            pages: 0,
            len_before,
            error: None,
            finished: false,
            #[cfg(cuckoo_loom)]
            early_orphans,
        })
    }
}

impl<H> GuardCore<H> {
    /// [guard.R3] The orphans a rebuild inserts into its next filter, taken after its gate: prunes
    /// those whose write had ended when recorded (this rebuild's scan, which begins after
    /// this lock, and every later one see what the write did) and returns the others.
    fn take_orphans(&self) -> Vec<super::Orphan> {
        let mut orphans = self.orphans.lock().unwrap_or_else(PoisonError::into_inner);
        #[cfg(cuckoo_loom)]
        if self.broken.unsettled_orphans_pruned {
            orphans.clear();
        }
        orphans.retain(|recorded| !recorded.write_ended);
        orphans
            .iter()
            .map(|recorded| recorded.orphan.clone())
            .collect()
    }
}

impl<H: BuildHasher + Clone + Send + Sync + 'static> RebuildTurn<'_, H> {
    /// Whether the scan may start: every create that loaded the filters without the next one
    /// has left the gate. Polled by the guard between waits; once true, the orphans are in the
    /// next filter.
    pub(crate) fn poll_gate<E>(&mut self) -> Result<bool, GuardError<E>> {
        let core = self.core;
        if let Stage::Leftover(phase) = self.stage {
            if !self.drained(phase) {
                return Ok(false);
            }
            self.stage = Stage::Flipped(core.flip());
        }
        if let Stage::Flipped(phase) = self.stage {
            if !self.drained(phase) {
                return Ok(false);
            }
            self.stage = Stage::Scanning;
            let orphans = self.orphans();
            for orphan in &orphans {
                #[cfg(cuckoo_loom)]
                if core.broken.orphans_hashed_by_current {
                    let hash = self.current.filter.hash_key(orphan);
                    self.insert(|filter| filter.insert_hash(hash))?;
                    continue;
                }
                self.insert(|filter| filter.insert(orphan))?;
            }
        }
        Ok(true)
    }

    /// The orphans to insert into the next filter: every one recorded so far ([guard.R3]).
    fn orphans(&mut self) -> Vec<super::Orphan> {
        #[cfg(cuckoo_loom)]
        {
            let broken = &self.core.broken;
            if broken.orphans_skipped {
                return Vec::new();
            }
            if broken.orphans_taken {
                let mut list = self
                    .core
                    .orphans
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                return std::mem::take(&mut *list)
                    .into_iter()
                    .map(|recorded| recorded.orphan)
                    .collect();
            }
            if let Some(early) = self.early_orphans.take() {
                return early;
            }
        }
        self.core.take_orphans()
    }

    fn drained(&self, phase: usize) -> bool {
        #[cfg(cuckoo_loom)]
        if self.core.broken.gate_skipped {
            return true;
        }
        self.core.gate.drained(phase)
    }

    fn insert<E>(
        &self,
        mut insert: impl FnMut(&crate::CuckooFilter<H>) -> Result<(), InsertError>,
    ) -> Result<(), GuardError<E>> {
        let mut attempts = 0;
        loop {
            match insert(&self.next.filter) {
                Ok(()) => return Ok(()),
                Err(InsertError::Contended) if attempts < INSERT_ATTEMPTS => {
                    attempts += 1;
                    crate::sync::yield_now();
                }
                Err(error) => return Err(super::insert_failure(error)),
            }
        }
    }

    /// Adds one scanned page to the next filter.
    pub(crate) fn load_page<'k, K: Hash + 'k, E>(
        &mut self,
        keys: impl IntoIterator<Item = &'k K>,
    ) -> Result<(), GuardError<E>> {
        debug_assert_eq!(
            self.stage,
            Stage::Scanning,
            "a page scanned before the gate"
        );
        for key in keys {
            self.insert(|filter| filter.insert(key))?;
            self.keys += 1;
        }
        self.pages += 1;
        Ok(())
    }

    /// [fleet.F6] Adds keys that are not a scanned page (a fleet's creates in flight).
    pub(crate) fn insert_keys<'k, K: Hash + 'k, E>(
        &mut self,
        keys: impl IntoIterator<Item = &'k K>,
    ) -> Result<(), GuardError<E>> {
        debug_assert_eq!(self.stage, Stage::Scanning, "keys inserted before the gate");
        for key in keys {
            self.insert(|filter| filter.insert(key))?;
        }
        Ok(())
    }

    /// [fleet.F5] Notes on the next filter the log's top read after its scan ended.
    pub(crate) fn note_scanned_at(&self, top: crate::guard::Position) {
        self.next.note_scanned_at(top);
    }

    /// Notes why the rebuild stops (kept in the stats).
    pub(crate) fn fail(&mut self, error: &dyn std::fmt::Display) {
        self.error = Some(error.to_string());
    }

    /// [guard.R3] Publishes the next filter as the current one, alone.
    pub(crate) fn finish(mut self) -> RebuildReport {
        debug_assert_eq!(self.stage, Stage::Scanning, "finished before the gate");
        let core = self.core;
        let pin = pin();
        core.filters.replace(
            Filters {
                current: Arc::clone(&self.next),
                next: None,
            },
            // ORDERING: SeqCst; [guard.R3] publication (Release: the scan's inserts are visible to
            // lookups that load it).
            Ordering::SeqCst,
            &pin,
        );
        let report = RebuildReport {
            reason: self.reason,
            keys_scanned: self.keys,
            pages: self.pages,
            duration: self.started.elapsed(),
            len_before: self.len_before,
            growth_steps_before: self.growth_steps_before,
            len_after: self.next.filter.len(),
            capacity_after: self.next.filter.capacity(),
        };
        // Loaded before the log's lock, under which no atomic operation runs: a loom thread
        // switch there would block another thread on a real lock ([guard.R4]'s creates take it).
        let next_marked = self.next.lacks_keys();
        let retired = self.current.filter.growth_steps() as u64;
        // ORDERING: Relaxed; a statistic for the trigger.
        let stale = core.rebuilds.stale.load(Ordering::Relaxed);
        let mut log = core.rebuilds.lock();
        log.rebuilds += 1;
        log.retired_growth_steps += retired;
        log.stale_at_last_rebuild = stale;
        log.last = Some(report.clone());
        if next_marked {
            // [guard.R4]: creates met the ceiling in the new filter too; the next automatic
            // rebuild waits as after a failure, so writes and lookups at the ceiling do not scan
            // back to back.
            log.back_off();
        } else {
            log.not_before = None;
            log.backoff = Duration::ZERO;
        }
        drop(log);
        self.finished = true;
        report
    }
}

impl<H: Send + Sync + 'static> Drop for RebuildTurn<'_, H> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let core = self.core;
        let pin = pin();
        #[cfg(cuckoo_loom)]
        let current = if core.broken.stopped_publishes_next {
            &self.next
        } else {
            &self.current
        };
        #[cfg(not(cuckoo_loom))]
        let current = &self.current;
        core.filters.replace(
            Filters {
                current: Arc::clone(current),
                next: None,
            },
            // ORDERING: SeqCst; [guard.R3] the stopped rebuild's next filter is withdrawn.
            Ordering::SeqCst,
            &pin,
        );
        let mut log = core.rebuilds.lock();
        #[cfg(cuckoo_loom)]
        if core.broken.stopped_ids_reused {
            log.next_id -= 1;
        }
        log.failed += 1;
        log.last_error = Some(
            self.error
                .take()
                .unwrap_or_else(|| "stopped before the swap (dropped)".to_owned()),
        );
        log.undrained = match self.stage {
            Stage::Leftover(phase) | Stage::Flipped(phase) => Some(phase),
            Stage::Scanning => None,
        };
        log.back_off();
    }
}
