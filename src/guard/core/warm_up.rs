//! The warm-up, written once for the sync and async guards: a state machine that decides
//! which page to scan next and what a scanned page changes; the guards make the store calls.
//!
//! A guard's loop is: [`WarmUp::begin`] a turn; while [`WarmUpTurn::next`] asks for a page,
//! scan it from the store and hand it to [`WarmUpTurn::load`].
//!
//! # Why a warm-up never skips a page nor marks the guard ready early
//!
//! - **One turn at a time.** The resume state lives in a `Mutex<Option<_>>`: a turn takes it
//!   out and the turn's `Drop` puts it back, so a second warm-up finds `None` and gets
//!   [`GuardError::WarmUpRunning`]. The lock is held only to take or put back, never across a
//!   store call, an `.await` or the progress callback.
//! - **The position moves past a page only once the whole page is in the filter**, in
//!   [`WarmUpTurn::load`], together with the progress that counts it; the guard calls the
//!   progress callback after that. Every way a warm-up can stop (a scan error, a filter insert
//!   error, a panic, its future dropped at an `.await`) drops the turn, which puts back the
//!   position as last moved: the next warm-up resumes at the first page not fully loaded, so
//!   no page is skipped. Only a page stopped part-way (a filter insert error, or a panic while
//!   inserting) is loaded again: its extra copies are false positives, never false negatives.
//!   `load` has no `.await`, so a cancelled future stops between pages, never inside one.
//! - **Ready only at the end of the scan.** `load` moves the position to the end only after
//!   the last page is in the filter, and only [`WarmUpTurn::next`], finding the position at
//!   the end, switches the guard to filtering (`GuardCore::finish_warm_up` is private to the
//!   core and this module).

use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::GuardCore;
use crate::guard::{GuardError, ScanPage, WarmUpProgress};

/// Where the scan of the store's keys stands.
#[derive(Debug)]
enum Position<C> {
    /// No page loaded yet.
    Start,
    /// Pages up to this cursor are loaded; the next page starts at it.
    At(C),
    /// Every page is loaded.
    End,
}

/// What a warm-up resumes from: the scan position and the progress that counts the pages
/// before it.
#[derive(Debug)]
struct ResumeState<C> {
    position: Position<C>,
    progress: WarmUpProgress,
}

impl<C> Default for ResumeState<C> {
    fn default() -> Self {
        ResumeState {
            position: Position::Start,
            progress: WarmUpProgress {
                keys_loaded: 0,
                pages: 0,
            },
        }
    }
}

/// A guard's warm-up: the resume state, or `None` while a warm-up holds it.
#[derive(Debug)]
pub(in crate::guard) struct WarmUp<C> {
    slot: Mutex<Option<ResumeState<C>>>,
}

/// The running warm-up's hold on the resume state; dropping it puts the state back.
pub(in crate::guard) struct WarmUpTurn<'a, C, H> {
    slot: &'a Mutex<Option<ResumeState<C>>>,
    core: &'a GuardCore<H>,
    state: ResumeState<C>,
}

/// What a warm-up does next.
#[derive(Debug)]
pub(in crate::guard) enum Step<'t, C> {
    /// Scan the page starting at this cursor (`None`: the first page) and
    /// [`load`](WarmUpTurn::load) it.
    Scan(Option<&'t C>),
    /// Every page is loaded and the guard filters: the warm-up's result.
    Done(WarmUpProgress),
}

fn lock<C>(slot: &Mutex<Option<ResumeState<C>>>) -> MutexGuard<'_, Option<ResumeState<C>>> {
    // Held only to take the state out or put it back, where nothing panics; a poisoned lock
    // would still hold a whole state.
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<C> WarmUp<C> {
    pub(in crate::guard) fn new() -> Self {
        WarmUp {
            slot: Mutex::new(Some(ResumeState::default())),
        }
    }

    /// A warm-up that has loaded everything (a guard restored from a trusted snapshot): a
    /// call to `warm_up` returns at once.
    pub(in crate::guard) fn finished() -> Self {
        WarmUp {
            slot: Mutex::new(Some(ResumeState {
                position: Position::End,
                progress: WarmUpProgress {
                    keys_loaded: 0,
                    pages: 0,
                },
            })),
        }
    }

    /// Takes the warm-up's turn, or refuses if another warm-up holds it.
    pub(in crate::guard) fn begin<'a, H, E>(
        &'a self,
        core: &'a GuardCore<H>,
    ) -> Result<WarmUpTurn<'a, C, H>, GuardError<E>> {
        let state = lock(&self.slot).take().ok_or(GuardError::WarmUpRunning)?;
        Ok(WarmUpTurn {
            slot: &self.slot,
            core,
            state,
        })
    }
}

impl<C, H: BuildHasher> WarmUpTurn<'_, C, H> {
    /// The page to scan next, or, once every page is loaded, the switch to filtering.
    pub(in crate::guard) fn next(&self) -> Step<'_, C> {
        match &self.state.position {
            Position::Start => Step::Scan(None),
            Position::At(cursor) => Step::Scan(Some(cursor)),
            Position::End => {
                self.core.finish_warm_up();
                Step::Done(self.state.progress)
            }
        }
    }

    /// Adds a scanned page's keys to the filter, then moves the position past the page and
    /// returns the progress to report.
    ///
    /// On an error the position stays before the page, so the next warm-up scans it again.
    pub(in crate::guard) fn load<K: Hash, E>(
        &mut self,
        page: ScanPage<K, C>,
    ) -> Result<WarmUpProgress, GuardError<E>> {
        let loaded = self.core.warm_page(&page.keys)?;
        let state = &mut self.state;
        state.progress.keys_loaded += loaded;
        state.progress.pages += 1;
        state.position = match page.next {
            Some(cursor) => Position::At(cursor),
            None => Position::End,
        };
        Ok(state.progress)
    }
}

impl<C, H> Drop for WarmUpTurn<'_, C, H> {
    fn drop(&mut self) {
        *lock(self.slot) = Some(std::mem::take(&mut self.state));
    }
}
