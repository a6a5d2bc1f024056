//! The seal ([`restart`](crate::guard::restart)), written once for the sync and async guards:
//! a turn that says which I/O step comes next, and two drivers that perform them, one that
//! blocks ([`seal_blocking`], the sync guard's) and one that awaits ([`seal_async`], the async
//! guard's). The drivers own no order; the loom models run both.
//!
//! # Protocol
//!
//! A [`SealTurn`] hands out [`SealStep`]s in this order:
//!
//! - **[seal.S1] Claim.** The turn takes the rebuild claim, [`SealStep::Wait`] while a rebuild
//!   or another seal holds it. From here until the file write ends no rebuild publishes a
//!   filter and no other seal starts.
//! - **[seal.S2] Seal write.** [`SealStep::WriteSeal`]: the guard writes a fresh secret as
//!   the store's seal (`S`) and reports it with [`SealTurn::seal_written`]. A failed write
//!   ends the seal (the turn drops, the claim with it).
//! - **[seal.S3] Drain.** [`SealStep::Wait`] until every create that entered the writer gate
//!   before the drain began has left it: the drain flips the gate twice and waits for each
//!   old phase, which also drains a phase a stopped rebuild left undrained, and leaves the
//!   phase where it was.
//! - **[seal.S4] File.** [`SealStep::WriteFile`]: the current filter and the claim, together in
//!   a [`SealFile`]. The guard writes the snapshot file (`T`) from it; the claim ends when the
//!   file write ends, or is abandoned, wherever that runs (the async guard's blocking thread
//!   goes on when the seal's future is dropped).
//! - Then [`SealStep::Done`].
//!
//! # Invariants
//!
//! - **[seal.I1]** `T` reads the filter only after `S` returned and after every create that
//!   entered the gate before the drain's first flip has returned from its store write: such a
//!   create's filter insert is in `T`, and any later create reads a phase flipped after `S`,
//!   so its store write comes after `S` and clears the seal (the argument in
//!   [`restart`](crate::guard::restart)).
//! - **[seal.I2]** The claim is held from [seal.S1] to the end of `T`: the filter `T` reads is
//!   the current one until `T` ends, and two seals never write one path at once.
//! - **[seal.I3]** A turn dropped during [seal.S3] (an async seal's future dropped) records
//!   the phase it was draining as undrained in the rebuild log *before* its claim drops, as a
//!   stopped rebuild does: the next rebuild waits for it before it flips.
//! - **[seal.I4]** A driver performs each step as handed out and reports the seal write only
//!   once it returned; it reads no filter but the [`SealFile`]'s.
//! - **[seal.I5]** A file is written only from a filter that holds a copy of every created
//!   key: one marked at its memory ceiling ([guard.R4]) writes none. The mark is loaded at
//!   [seal.S4], after the drain: a create drained by [seal.S3] marked before it left the gate;
//!   a later one writes the store after `S`, which clears the seal.

use std::future::Future;
use std::hash::BuildHasher;
use std::time::Duration;

use super::{GuardCore, RebuildClaim};
use crate::guard::{FilterRef, GuardError};
use crate::CuckooFilter;

/// Waits of [`seal_blocking`] that only yield the thread before it sleeps between polls.
const YIELDS: u32 = 64;
/// The sleep of [`seal_blocking`] between polls once it stopped yielding: the creates it
/// waits for are store writes in flight, the rebuild it waits for a scan.
const WAIT: Duration = Duration::from_micros(200);

/// What the guard does next for a seal.
#[derive(Debug)]
pub(crate) enum SealStep<H> {
    /// Wait a little ([seal.S1], [seal.S3]), then ask again.
    Wait,
    /// Write the seal to the store; once it returned, [`SealTurn::seal_written`] ([seal.S2]).
    WriteSeal,
    /// Write the snapshot file from this filter, under the claim ([seal.S4]).
    WriteFile(SealFile<H>),
    /// The seal is complete.
    Done,
}

/// The filter a seal's file is written from, with the rebuild claim, which ends when the
/// write does ([seal.I2]).
#[derive(Debug)]
pub(crate) struct SealFile<H> {
    filter: FilterRef<H>,
    claim: RebuildClaim,
    /// The loom control `ceiling_sealed`: the mark is not checked.
    #[cfg(cuckoo_loom)]
    mark_ignored: bool,
}

impl<H> SealFile<H> {
    /// Runs `write` on the filter, then lets the claim go; `None`, writing nothing, if the
    /// filter lacks keys created at its memory ceiling ([seal.I5]).
    pub(crate) fn write<T>(self, write: impl FnOnce(&CuckooFilter<H>) -> T) -> Option<T> {
        #[cfg(cuckoo_loom)]
        let refused = self.filter.generation.lacks_keys() && !self.mark_ignored;
        #[cfg(not(cuckoo_loom))]
        let refused = self.filter.generation.lacks_keys();
        let written = (!refused).then(|| write(&self.filter));
        drop(self.claim);
        written
    }
}

/// Where a seal stands. Each stage after [seal.S1] holds the claim; a tuple variant's fields
/// drop in order, so a drain records its phase before its claim lets a rebuild start
/// ([seal.I3]).
enum Stage<'c, H> {
    Claim,
    WriteSeal(RebuildClaim),
    Drain(CreatesDrain<'c, H>, RebuildClaim),
    File(RebuildClaim),
    /// The loom control `seal_after_snapshot`: the seal written after the file.
    #[cfg(cuckoo_loom)]
    LateSeal,
    Done,
}

/// A seal in progress: the state machine of [seal.S1] to [seal.S4].
pub(crate) struct SealTurn<'c, H> {
    core: &'c GuardCore<H>,
    stage: Stage<'c, H>,
}

impl<H: BuildHasher> GuardCore<H> {
    /// Starts a seal; its first step claims the rebuild ([seal.S1]).
    pub(crate) fn begin_seal<E>(&self) -> Result<SealTurn<'_, H>, GuardError<E>> {
        if !self.is_ready() {
            return Err(GuardError::Warming);
        }
        // [seal.I5] decides at [seal.S4]; this early look spares a filter already marked the
        // seal write, which would end every older file's trust for no new one.
        #[cfg(cuckoo_loom)]
        let checked = !self.broken.ceiling_sealed;
        #[cfg(not(cuckoo_loom))]
        let checked = true;
        if checked && self.filter().generation.lacks_keys() {
            return Err(GuardError::AtCeiling);
        }
        Ok(SealTurn {
            core: self,
            stage: Stage::Claim,
        })
    }
}

impl<H: BuildHasher> SealTurn<'_, H> {
    /// The next step.
    pub(crate) fn next(&mut self) -> SealStep<H> {
        loop {
            match std::mem::replace(&mut self.stage, Stage::Done) {
                Stage::Claim => {
                    let Some(claim) = self.core.claim() else {
                        self.stage = Stage::Claim;
                        return SealStep::Wait;
                    };
                    #[cfg(cuckoo_loom)]
                    if self.core.broken.seal_after_snapshot {
                        self.stage = Stage::File(claim);
                        continue;
                    }
                    self.stage = Stage::WriteSeal(claim);
                }
                Stage::WriteSeal(claim) => {
                    self.stage = Stage::WriteSeal(claim);
                    return SealStep::WriteSeal;
                }
                Stage::Drain(mut drain, claim) => {
                    if drain.poll() {
                        self.stage = Stage::File(claim);
                    } else {
                        self.stage = Stage::Drain(drain, claim);
                        return SealStep::Wait;
                    }
                }
                Stage::File(claim) => {
                    #[cfg(cuckoo_loom)]
                    if self.core.broken.seal_after_snapshot {
                        self.stage = Stage::LateSeal;
                    }
                    return SealStep::WriteFile(SealFile {
                        filter: self.core.filter(),
                        claim,
                        #[cfg(cuckoo_loom)]
                        mark_ignored: self.core.broken.ceiling_sealed,
                    });
                }
                #[cfg(cuckoo_loom)]
                Stage::LateSeal => {
                    self.stage = Stage::LateSeal;
                    return SealStep::WriteSeal;
                }
                Stage::Done => return SealStep::Done,
            }
        }
    }

    /// The seal write of [`SealStep::WriteSeal`] returned ([seal.S2]): the drain begins.
    pub(crate) fn seal_written(&mut self) {
        self.stage = match std::mem::replace(&mut self.stage, Stage::Done) {
            #[cfg(cuckoo_loom)]
            Stage::WriteSeal(claim) if self.core.broken.seal_skips_wait => Stage::File(claim),
            Stage::WriteSeal(claim) => Stage::Drain(CreatesDrain::new(self.core), claim),
            #[cfg(cuckoo_loom)]
            Stage::LateSeal => Stage::Done,
            // A report out of turn changes nothing: the steps still come in order.
            other => other,
        };
    }
}

/// The sync guard's driver: performs the steps of `turn`, yielding and then sleeping between
/// polls. `write_seal` writes the seal ([seal.S2]), `write_file` the file ([seal.S4]).
///
/// # Errors
///
/// The seal write's error; the file write's outcome is `write_file`'s to report.
pub(crate) fn seal_blocking<H: BuildHasher, T, E>(
    mut turn: SealTurn<'_, H>,
    mut write_seal: impl FnMut() -> Result<(), E>,
    write_file: impl FnOnce(SealFile<H>) -> T,
) -> Result<T, E> {
    let mut write_file = Some(write_file);
    let mut written = None;
    let mut waits = 0u32;
    loop {
        match turn.next() {
            SealStep::Wait => {
                waits = waits.saturating_add(1);
                if cfg!(cuckoo_loom) || waits < YIELDS {
                    crate::sync::yield_now();
                } else {
                    std::thread::sleep(WAIT);
                }
            }
            SealStep::WriteSeal => {
                write_seal()?;
                turn.seal_written();
            }
            SealStep::WriteFile(file) => written = write_file.take().map(|write| write(file)),
            SealStep::Done => break,
        }
    }
    Ok(written.expect("a seal's turn hands out its file once before it is done"))
}

/// The async guard's driver: performs the steps of `turn`, awaiting `pause` between polls.
/// `write_seal` writes the seal ([seal.S2]), `write_file` the file ([seal.S4]; the async
/// guard moves the [`SealFile`] to a blocking thread). Dropping the future stops the seal:
/// the turn drops, and with it the claim, unless a file write holds it ([seal.I2],
/// [seal.I3]).
///
/// # Errors
///
/// The seal write's error; the file write's outcome is `write_file`'s to report.
pub(crate) async fn seal_async<H: BuildHasher, T, E, S, P, F>(
    mut turn: SealTurn<'_, H>,
    mut write_seal: impl FnMut() -> S,
    mut pause: impl FnMut() -> P,
    write_file: impl FnOnce(SealFile<H>) -> F,
) -> Result<T, E>
where
    S: Future<Output = Result<(), E>>,
    P: Future<Output = ()>,
    F: Future<Output = T>,
{
    let mut write_file = Some(write_file);
    let mut written = None;
    // The loom control `seal_async_overlaps_the_seal_write`: the seal write, started.
    #[cfg(cuckoo_loom)]
    let mut started: Option<std::pin::Pin<Box<S>>> = None;
    loop {
        match turn.next() {
            SealStep::Wait => pause().await,
            SealStep::WriteSeal => {
                #[cfg(cuckoo_loom)]
                if turn.core.broken.seal_async_overlaps_the_seal_write {
                    started = Some(Box::pin(write_seal()));
                    turn.seal_written();
                    continue;
                }
                write_seal().await?;
                turn.seal_written();
            }
            SealStep::WriteFile(file) => {
                if let Some(write) = write_file.take() {
                    written = Some(write(file).await);
                }
            }
            SealStep::Done => break,
        }
    }
    #[cfg(cuckoo_loom)]
    if let Some(started) = started {
        started.await?;
    }
    Ok(written.expect("a seal's turn hands out its file once before it is done"))
}

/// The seal's wait for creates in flight ([seal.S3]), as a poll: flips the writer gate twice
/// and waits for each old phase to drain. Made only under the rebuild claim. Dropped before
/// it is done, it leaves its phase undrained in the rebuild log ([seal.I3]).
struct CreatesDrain<'c, H> {
    core: &'c GuardCore<H>,
    /// Flips still to make.
    flips: u8,
    /// The phase being drained.
    old: Option<usize>,
}

impl<'c, H> CreatesDrain<'c, H> {
    fn new(core: &'c GuardCore<H>) -> Self {
        CreatesDrain {
            core,
            flips: 2,
            old: None,
        }
    }

    /// Whether every create that entered the gate before the first poll has left it.
    fn poll(&mut self) -> bool {
        loop {
            match self.old {
                Some(old) if !self.core.gate.drained(old) => return false,
                _ if self.flips == 0 => {
                    self.old = None;
                    return true;
                }
                _ => {
                    self.old = Some(self.core.gate.flip());
                    self.flips -= 1;
                }
            }
        }
    }
}

impl<H> Drop for CreatesDrain<'_, H> {
    fn drop(&mut self) {
        #[cfg(cuckoo_loom)]
        if self.core.broken.seal_drain_forgets {
            return;
        }
        if let Some(old) = self.old {
            self.core.rebuilds.leave_undrained(old);
        }
    }
}
