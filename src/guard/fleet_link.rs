//! The hooks a fleet member installs in its [`AsyncCacheGuard`](super::AsyncCacheGuard): the
//! guard calls them around its store writes and rebuilds ([fleet.M2], [fleet.M4],
//! [fleet.F6]); [`crate::fleet`] implements them.

// Without the `fleet` feature nothing installs the hooks.
#![cfg_attr(not(feature = "fleet"), allow(dead_code))]

use std::future::Future;
use std::pin::Pin;

use super::{FleetError, Position};

/// A boxed future, for the object-safe hooks.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A create's place in the fleet's log: its position, or none if it was written without an
/// announcement (the coordinator was down and the policy proceeds).
#[derive(Debug)]
pub(crate) struct CreateSlot {
    pub(crate) position: Option<Position>,
}

/// A delete's place in the fleet ([fleet.M4]): the position its member had applied, or none
/// if it is not to be announced (the member is sealing); dropped when the delete ended,
/// announced or not, which a seal waits for ([fleet.M8]).
pub(crate) struct DeleteSlot {
    pub(crate) after: Option<Position>,
    /// Counts the delete in flight until dropped (held only to be dropped).
    pub(crate) _in_flight: Option<Box<dyn Send + Sync>>,
}

/// The fleet side of a guard's writes.
pub(crate) trait FleetLink<K>: Send + Sync {
    /// [fleet.M2]: announces a create of `key` and waits for the members' acknowledgements;
    /// the store write may begin when this returns `Ok`.
    fn before_create<'a>(&'a self, key: &'a K) -> BoxFuture<'a, Result<CreateSlot, FleetError>>;

    /// [fleet.M2]: the create's store write returned; `known` if its outcome is known (the
    /// entry then leaves the in-flight set).
    fn after_create<'a>(&'a self, slot: CreateSlot, key: &'a K, known: bool) -> BoxFuture<'a, ()>;

    /// [fleet.M4]: a delete begins: notes the position this member had applied, before the
    /// store delete.
    fn delete_begins(&self) -> DeleteSlot;

    /// [fleet.M4]: announces a delete the store confirmed.
    fn after_delete<'a>(&'a self, key: &'a K, slot: DeleteSlot) -> BoxFuture<'a, ()>;

    /// [fleet.F6]: the keys of the creates in flight.
    fn in_flight(&self) -> BoxFuture<'_, Result<Vec<K>, FleetError>>;

    /// [fleet.F5]: the log's top.
    fn top(&self) -> BoxFuture<'_, Result<Position, FleetError>>;
}
