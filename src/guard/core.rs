//! The consistency rules and the warm-up, written once for the sync and async guards.
//!
//! Each guard operation is "a decision here, a store call there, a decision here again"; this
//! module holds the decisions and the counters, the guards hold the store calls. The warm-up's
//! state machine is in [`warm_up`].

use std::hash::{BuildHasher, Hash};

use super::{GuardError, GuardStats, Written};
use crate::sharded::{bump, Sharded};
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::{CuckooFilter, InsertError};

mod warm_up;

pub(super) use self::warm_up::{Step, WarmUp};

const WARMING: u32 = 0;
const READY: u32 = 1;

/// What the filter decided for a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// Definitely absent: answer `None` without the store.
    Blocked,
    /// Maybe present: ask the store.
    Pass,
    /// Warming up: the filter is incomplete, ask the store.
    Warming,
}

/// Taken before a store delete: whether the warm-up had finished when the delete began.
#[derive(Debug, Clone, Copy)]
pub(super) struct DeleteTicket {
    ready_before: bool,
}

#[derive(Debug, Default)]
struct Shard {
    blocked: AtomicU64,
    passed: AtomicU64,
    warming: AtomicU64,
    store_hits: AtomicU64,
    false_positives: AtomicU64,
    store_errors: AtomicU64,
    creates: AtomicU64,
    updates: AtomicU64,
    deletes: AtomicU64,
    refused: AtomicU64,
    contended: AtomicU64,
    stale_copies: AtomicU64,
    missing_copies: AtomicU64,
}

/// The guard error for a filter insert that stored nothing: no room and contention are
/// different conditions with different advice (a bigger filter, or a retry).
fn insert_failure<E>(error: InsertError) -> GuardError<E> {
    match error {
        InsertError::Contended => GuardError::FilterContended,
        full => GuardError::FilterFull(full),
    }
}

/// The filter, the warm-up state and the counters of a guard.
#[derive(Debug)]
pub(super) struct GuardCore<H> {
    pub(super) filter: CuckooFilter<H>,
    state: AtomicU32,
    shards: Sharded<Shard>,
}

impl<H: BuildHasher> GuardCore<H> {
    pub(super) fn new(filter: CuckooFilter<H>) -> Self {
        GuardCore {
            filter,
            state: AtomicU32::new(WARMING),
            shards: Sharded::new(Shard::default),
        }
    }

    fn shard(&self) -> &Shard {
        self.shards.local()
    }

    pub(super) fn is_ready(&self) -> bool {
        // ORDERING: Acquire; pairs with the Release in `finish_warm_up`, so a lookup that sees
        // "ready" also sees every key the warm-up inserted.
        self.state.load(Ordering::Acquire) == READY
    }

    /// Lookup step 1: ask the filter, unless it is still warming up.
    pub(super) fn admit<K: Hash + ?Sized>(&self, key: &K) -> Admission {
        if !self.is_ready() {
            bump(&self.shard().warming);
            Admission::Warming
        } else if self.filter.contains(key) {
            bump(&self.shard().passed);
            Admission::Pass
        } else {
            bump(&self.shard().blocked);
            Admission::Blocked
        }
    }

    /// Lookup step 2: count what the store answered.
    pub(super) fn observe_get<V, E>(&self, admission: Admission, result: &Result<Option<V>, E>) {
        let shard = self.shard();
        match result {
            Ok(Some(_)) => bump(&shard.store_hits),
            // Only a filter that said "maybe" can have produced a false positive.
            Ok(None) if admission == Admission::Pass => bump(&shard.false_positives),
            Ok(None) => {}
            Err(_) => bump(&shard.store_errors),
        }
    }

    /// Create step 1 (rule 1, rule 3): add a copy of the key **before** the store write, even
    /// if the filter already reports it. Refuses the write if the filter has no room or its
    /// insert gave up under contention.
    pub(super) fn begin_put<K: Hash + ?Sized, E>(&self, key: &K) -> Result<(), GuardError<E>> {
        self.filter.insert(key).map_err(|error| {
            let shard = self.shard();
            bump(match error {
                InsertError::Contended => &shard.contended,
                _ => &shard.refused,
            });
            insert_failure(error)
        })
    }

    /// Create step 2: keep the copy for a create; remove it again for an update or a definite
    /// failure; keep it (stale, a false positive at worst) when the failure may have been
    /// applied (rule 4).
    pub(super) fn end_put<K: Hash + ?Sized, E>(
        &self,
        key: &K,
        result: &Result<Written, E>,
        outcome_unknown: impl FnOnce(&E) -> bool,
    ) {
        let shard = self.shard();
        match result {
            Ok(Written::Created) => bump(&shard.creates),
            Ok(Written::Updated) => {
                bump(&shard.updates);
                self.remove_own_copy(key);
            }
            Err(error) => {
                bump(&shard.store_errors);
                if outcome_unknown(error) {
                    bump(&shard.stale_copies);
                } else {
                    self.remove_own_copy(key);
                }
            }
        }
    }

    /// Removes the copy this guard call inserted in `begin_put`.
    fn remove_own_copy<K: Hash + ?Sized>(&self, key: &K) {
        if !self.filter.remove(key) {
            // Only possible if someone removed from the filter behind the guard's back.
            bump(&self.shard().missing_copies);
        }
    }

    /// Delete step 1: note whether the warm-up had finished before the store delete begins.
    pub(super) fn begin_delete(&self) -> DeleteTicket {
        DeleteTicket {
            ready_before: self.is_ready(),
        }
    }

    /// Delete step 2 (rule 2): remove a copy only after the store confirmed a deletion, and
    /// only if the warm-up had finished before the delete began. Otherwise the scan may not
    /// have inserted this key yet, and removing "its" copy could take out another key's
    /// identical fingerprint (a false negative); the copy is left stale instead.
    pub(super) fn end_delete<K: Hash + ?Sized, E>(
        &self,
        key: &K,
        ticket: DeleteTicket,
        result: &Result<bool, E>,
    ) {
        let shard = self.shard();
        match result {
            Ok(true) => {
                bump(&shard.deletes);
                if ticket.ready_before {
                    if !self.filter.remove(key) {
                        // The store held a key the filter never saw: it was written around
                        // the guard. Counted, so the misuse shows in the stats.
                        bump(&shard.missing_copies);
                    }
                } else {
                    bump(&shard.stale_copies);
                }
            }
            Ok(false) => {}
            Err(_) => bump(&shard.store_errors),
        }
    }

    /// Warm-up: adds one page of scanned keys.
    fn warm_page<'k, K: Hash + 'k, E>(
        &self,
        keys: impl IntoIterator<Item = &'k K>,
    ) -> Result<u64, GuardError<E>> {
        let mut loaded = 0;
        for key in keys {
            self.filter.insert(key).map_err(insert_failure)?;
            loaded += 1;
        }
        Ok(loaded)
    }

    /// Warm-up done: from now on lookups consult the filter.
    fn finish_warm_up(&self) {
        // ORDERING: Release; publishes the warm-up's inserts to lookups that load "ready"
        // with Acquire (`is_ready`).
        self.state.store(READY, Ordering::Release);
    }

    pub(super) fn stats(&self) -> GuardStats {
        let sum = |field: fn(&Shard) -> &AtomicU64| self.shards.sum(field);
        let blocked = sum(|s| &s.blocked);
        let passed = sum(|s| &s.passed);
        let warming = sum(|s| &s.warming);
        let false_positives = sum(|s| &s.false_positives);
        let negatives = blocked + false_positives;
        GuardStats {
            lookups: blocked + passed + warming,
            blocked,
            passed: passed + warming,
            passed_while_warming: warming,
            store_hits: sum(|s| &s.store_hits),
            false_positives,
            observed_false_positive_rate: if negatives == 0 {
                0.0
            } else {
                false_positives as f64 / negatives as f64
            },
            expected_false_positive_rate: self.filter.expected_false_positive_rate(),
            configured_false_positive_rate: self.filter.configured_false_positive_rate(),
            store_errors: sum(|s| &s.store_errors),
            creates: sum(|s| &s.creates),
            updates: sum(|s| &s.updates),
            deletes: sum(|s| &s.deletes),
            writes_refused: sum(|s| &s.refused),
            writes_contended: sum(|s| &s.contended),
            stale_copies: sum(|s| &s.stale_copies),
            missing_copies: sum(|s| &s.missing_copies),
            warming: !self.is_ready(),
            filter_len: self.filter.len(),
            filter_capacity: self.filter.capacity(),
            filter_load_factor: self.filter.load_factor(),
            filter_memory_bytes: self.filter.memory_usage(),
            filter_growth_steps: self.filter.stats().growth_steps,
        }
    }
}

#[cfg(all(test, not(cuckoo_loom)))]
mod tests {
    use super::*;

    #[test]
    fn no_room_and_contention_are_different_guard_errors() {
        let full = InsertError::Full {
            len: 95,
            capacity: 100,
        };
        let as_full = insert_failure::<std::io::Error>(full.clone());
        assert!(matches!(&as_full, GuardError::FilterFull(e) if *e == full));
        assert!(as_full.to_string().contains("no room"), "{as_full}");
        let as_contended = insert_failure::<std::io::Error>(InsertError::Contended);
        assert!(matches!(as_contended, GuardError::FilterContended));
        let message = as_contended.to_string();
        assert!(
            message.contains("contention") && message.contains("retried"),
            "{message}"
        );
        assert!(!message.contains("no room"), "{message}");
    }
}
