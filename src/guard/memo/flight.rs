//! A store read in flight that lookups of the same key wait on instead of reading again
//! ([memo.C1]-[memo.C4] in the memo's module docs).
//!
//! A [`FlightCell`] is made by the lookup that leads the read, held by the memo slot while
//! other lookups may join, and by every lookup that joined. It lands once: with the leader's
//! answer, or abandoned (the leader was dropped or panicked before its answer), in which case
//! each waiter starts its lookup over. Blocking waiters park on a condition variable, async
//! waiters leave their wakers; both are woken by the landing.

use std::mem;
use std::sync::PoisonError;
use std::task::{Context, Poll, Waker};

use crate::sync::{Condvar, Mutex};

/// One shared store read: pending until it lands.
#[derive(Debug)]
pub(crate) struct FlightCell<T> {
    state: Mutex<Landing<T>>,
    landed: Condvar,
}

#[derive(Debug)]
enum Landing<T> {
    /// The leader's read runs; the wakers of async waiters polled so far.
    Pending(Vec<Waker>),
    /// The leader's answer, cloned for each waiter.
    Done(T),
    /// The leader is gone without an answer: waiters start over.
    Abandoned,
}

impl<T> FlightCell<T> {
    pub(super) fn new() -> Self {
        FlightCell {
            state: Mutex::new(Landing::Pending(Vec::new())),
            landed: Condvar::new(),
        }
    }

    /// \[memo.C4\]: lands the read, `None` for abandoned, and wakes every waiter. Only the first
    /// landing counts.
    pub(super) fn land(&self, answer: Option<T>) {
        let wakers = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if !matches!(*state, Landing::Pending(_)) {
                return;
            }
            let landing = match answer {
                Some(answer) => Landing::Done(answer),
                None => Landing::Abandoned,
            };
            match mem::replace(&mut *state, landing) {
                Landing::Pending(wakers) => wakers,
                _ => Vec::new(),
            }
        };
        self.landed.notify_all();
        for waker in wakers {
            waker.wake();
        }
    }
}

impl<T: Clone> FlightCell<T> {
    /// Blocks until the read lands: its answer, or `None` if it was abandoned.
    pub(crate) fn wait(&self) -> Option<T> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match &*state {
                Landing::Done(answer) => return Some(answer.clone()),
                Landing::Abandoned => return None,
                Landing::Pending(_) => {
                    state = self
                        .landed
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }

    /// The async [`wait`](Self::wait): ready with the answer (or `None`, abandoned) once the read
    /// landed, otherwise leaves `cx`'s waker at `*index` (the waiter's place among the wakers,
    /// kept by the waiter across polls so that re-polls replace rather than add).
    pub(crate) fn poll_wait(
        &self,
        cx: &mut Context<'_>,
        index: &mut Option<usize>,
    ) -> Poll<Option<T>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match &mut *state {
            Landing::Done(answer) => Poll::Ready(Some(answer.clone())),
            Landing::Abandoned => Poll::Ready(None),
            Landing::Pending(wakers) => {
                match index.and_then(|i| wakers.get_mut(i)) {
                    Some(waker) => waker.clone_from(cx.waker()),
                    None => {
                        *index = Some(wakers.len());
                        wakers.push(cx.waker().clone());
                    }
                }
                Poll::Pending
            }
        }
    }
}
