//! The coordinator a fleet shares: a log of announcements, the members' leases and their
//! acknowledgements. [`RedisCoordinator`](super::RedisCoordinator) is the implementation
//! (feature `redis`); the trait lets another engine follow.

use std::future::Future;
use std::time::Duration;

use super::Position;
use crate::guard::SealSecret;

/// One guard object's id, random per [`join`](super::Fleet::join): the origin of the entries
/// its creates and deletes announce, so it skips its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(pub u64);

/// One registration of a member: each (re)registration gets a new id, so a writer that
/// waits for a member it found at its announcement knows a later registration is another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(pub u64);

/// What an announced entry asks every member to do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// Add a copy of the key (before the writer's store write).
    Create,
    /// Remove a copy of the key (after the writer's store delete confirmed it). `after` is
    /// the position the writer's own member had applied before its store delete began.
    Delete {
        /// The writer's applied position before its store delete.
        after: Position,
    },
}

/// An entry of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its position.
    pub position: Position,
    /// The instance that announced it.
    pub origin: InstanceId,
    /// What it asks.
    pub op: Op,
    /// The key, encoded by [`FleetKey`](super::FleetKey).
    pub key: Vec<u8>,
}

/// What [`Coordinator::register`] returns, all read in the one atomic step that registered.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Registration {
    /// The new member's id.
    pub member: MemberId,
    /// The log's top when the member was registered: a writer that announces later waits
    /// for this member.
    pub top: Position,
    /// The keys of creates announced and not yet ended ([`Coordinator::create_ended`]), at
    /// registration.
    pub in_flight: Vec<Vec<u8>>,
    /// Whether the `previous` member passed to `register` was still registered: if so, no
    /// entry past its acknowledged position was trimmed.
    pub previous_kept: bool,
    /// The coordinator state's id ([`Announced::state`]).
    pub state: String,
    /// Whether this registration began a new state (the coordinator had none: a new fleet,
    /// or its data was lost, with the in-flight creates).
    pub fresh_state: bool,
    /// How long ago the coordinator's state began, on the coordinator's clock (zero for a
    /// state begun by this registration).
    pub state_age: Duration,
}

/// A sealed snapshot's record in the coordinator ([`Fleet::seal`](super::Fleet::seal)): what
/// a restart needs to trust the file and to catch up from the log after it.
#[derive(Clone)]
#[non_exhaustive]
pub struct SealRecord {
    /// The seal's secret: the file's MAC is keyed by it, and its public id names the record.
    pub secret: SealSecret,
    /// The sealing member's instance: the restored member takes it over, so it skips the
    /// entries its sealed self announced (their effects are in the file).
    pub instance: InstanceId,
    /// The coordinator state's id when the seal was written ([`Announced::state`]).
    pub state: String,
    /// The position the sealed filter covers: every entry up to it was applied, none after.
    pub applied: Position,
    /// The log's top noted after the sealed generation's scan ([fleet.F5]), if noted.
    pub scanned_at: Option<Position>,
}

impl SealRecord {
    /// A record of `secret` for `instance`, covering the log up to `applied` in the state
    /// `state`, of a generation scanned at `scanned_at`.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::fleet::{InstanceId, Position, SealRecord};
    /// use cuckoo_guard::guard::SealSecret;
    ///
    /// let secret = SealSecret::from_bytes([7; 32]);
    /// let record = SealRecord::new(secret, InstanceId(1), "0a1b".into(), Position::ZERO, None);
    /// assert_eq!(record.instance, InstanceId(1));
    /// ```
    pub fn new(
        secret: SealSecret,
        instance: InstanceId,
        state: String,
        applied: Position,
        scanned_at: Option<Position>,
    ) -> Self {
        SealRecord {
            secret,
            instance,
            state,
            applied,
            scanned_at,
        }
    }
}

impl std::fmt::Debug for SealRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret stays out of logs.
        f.debug_struct("SealRecord")
            .field("seal", &self.secret.id())
            .field("instance", &self.instance)
            .field("state", &self.state)
            .field("applied", &self.applied)
            .field("scanned_at", &self.scanned_at)
            .finish_non_exhaustive()
    }
}

/// What [`Coordinator::announce_create`] returns, all read in the one atomic step that
/// appended the entry.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Announced {
    /// The entry's position.
    pub position: Position,
    /// Every member registered when the entry was appended (the writer's own included).
    pub members: Vec<MemberId>,
    /// How long writers must hold creates because the coordinator's state is new (its data
    /// was lost, or the fleet is starting): guards of an earlier state may still serve until
    /// their deadlines pass. Zero otherwise. An announcement on a coordinator without a
    /// state begins one, with its hold.
    pub hold: Duration,
    /// The id of the coordinator's state the entry went into: random, made when the state
    /// began. A waiting writer that finds another state ([`MemberStates::state`]) cannot
    /// tell a member that left from one whose registration was lost.
    pub state: String,
}

/// What [`Coordinator::members`] returns, read in one atomic step.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MemberStates {
    /// The id of the coordinator's state ([`Announced::state`]); empty if it has none.
    pub state: String,
    /// The members asked for, in order.
    pub members: Vec<MemberState>,
}

/// A member as a waiting writer sees it ([`Coordinator::members`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemberState {
    /// The member.
    pub member: MemberId,
    /// Still registered (not left, not expelled).
    pub registered: bool,
    /// Its lease key still exists (the coordinator has not expired it).
    pub lease_live: bool,
    /// How many times its lease was renewed: a writer decides a member is gone on its own
    /// clock when this stops changing.
    pub renewals: u64,
    /// The position it acknowledged last.
    pub acked: Position,
}

/// A batch of [`Coordinator::read`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Batch {
    /// Entries after the position asked, in log order.
    pub entries: Vec<Entry>,
    /// Acknowledgements published after the cursor asked, in order: each a member and what
    /// it acknowledged.
    pub acks: Vec<(MemberId, Position)>,
    /// The cursor of the acknowledgement feed after this batch.
    pub acks_cursor: Position,
    /// For a batch with entries, the coordinator state's id read right after them (empty if
    /// it has none): entries of another state than the member's are not applied.
    pub state: Option<String>,
}

/// The shared state of a fleet. Every method is one round trip and, where it says so, one
/// atomic step on the coordinator. Errors are transport or server errors: the member fails
/// open and retries.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::fleet::Coordinator;
///
/// fn needs_a_coordinator<C: Coordinator>(_: &C) {}
/// ```
pub trait Coordinator: Send + Sync + 'static {
    /// A transport or server error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Registers a new member of `instance` with a lease of `lease`, and in the same atomic
    /// step reads the log's top and the in-flight creates; removes `previous` if given and
    /// reports whether it was still registered.
    fn register(
        &self,
        instance: InstanceId,
        previous: Option<MemberId>,
        lease: Duration,
    ) -> impl Future<Output = Result<Registration, Self::Error>> + Send;

    /// As [`register`](Self::register) for a member restarting from the sealed snapshot
    /// whose seal id is `seal`, with no previous registration: in the same atomic step, takes
    /// the seal's record ([`put_seal`](Self::put_seal)) if it is still held, so no second
    /// restart can take it, and starts the member's acknowledged position at the record's
    /// `applied`, so no trim passes it while the member catches up. `None` if the record was
    /// not held (the registration stands; the member must not trust the file).
    fn register_sealed(
        &self,
        instance: InstanceId,
        seal: u64,
        lease: Duration,
    ) -> impl Future<Output = Result<(Registration, Option<SealRecord>), Self::Error>> + Send;

    /// Holds `record` under its seal's id for `hold`, in one atomic step with a check that
    /// `member` is still registered and the coordinator's state is `record.state`
    /// (`Ok(false)` and nothing held otherwise: the log past the member's acknowledgement may
    /// have been trimmed). Meanwhile no trim removes an entry past `record.applied`, and
    /// [`peek_seal`](Self::peek_seal) and [`register_sealed`](Self::register_sealed) find it.
    fn put_seal(
        &self,
        member: MemberId,
        record: &SealRecord,
        hold: Duration,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// The record held under the seal id `seal`, if its hold has not passed; it stays held.
    fn peek_seal(
        &self,
        seal: u64,
    ) -> impl Future<Output = Result<Option<SealRecord>, Self::Error>> + Send;

    /// Extends `member`'s lease to `lease` from now if it still exists (never recreates an
    /// expired one) and counts the renewal. `Ok(false)`: the lease is gone.
    fn renew(
        &self,
        member: MemberId,
        lease: Duration,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Removes `member` (its lease, its registration, its acknowledgement).
    fn leave(&self, member: MemberId) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Removes `member` if its lease is gone (a writer found it not renewed for a lease's
    /// length on its own clock). Returns whether it was removed.
    fn expel(&self, member: MemberId) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Appends a create of `key` and records it in flight, in one atomic step that also
    /// reads the registered members and the state's id, and begins a state (with its hold)
    /// if the coordinator has none.
    fn announce_create(
        &self,
        origin: InstanceId,
        key: &[u8],
    ) -> impl Future<Output = Result<Announced, Self::Error>> + Send;

    /// The create at `position` ended (its store write returned with a known outcome): it is
    /// no longer in flight.
    fn create_ended(
        &self,
        position: Position,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Appends a delete of `key`; `after` is the position the writer had applied before its
    /// store delete began.
    fn announce_delete(
        &self,
        origin: InstanceId,
        key: &[u8],
        after: Position,
    ) -> impl Future<Output = Result<Position, Self::Error>> + Send;

    /// Reads up to `max` entries after `after` and the acknowledgements published after
    /// `acks_after`, waiting up to `wait` if there are none. Implementations use a
    /// connection of their own for the wait, so other calls do not queue behind it.
    fn read(
        &self,
        after: Position,
        acks_after: Position,
        max: usize,
        wait: Duration,
    ) -> impl Future<Output = Result<Batch, Self::Error>> + Send;

    /// Records that `member` applied every entry up to `position`, and publishes it to the
    /// acknowledgement feed.
    fn ack(
        &self,
        member: MemberId,
        position: Position,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The states of `members` and the coordinator state's id, read in one atomic step.
    fn members(
        &self,
        members: &[MemberId],
    ) -> impl Future<Output = Result<MemberStates, Self::Error>> + Send;

    /// The log's top: the position of the last entry ever appended (it survives a trim of
    /// every entry), or [`Position::ZERO`].
    fn top(&self) -> impl Future<Output = Result<Position, Self::Error>> + Send;

    /// The keys of the creates in flight.
    fn in_flight(&self) -> impl Future<Output = Result<Vec<Vec<u8>>, Self::Error>> + Send;

    /// The keys of the creates in flight if the coordinator's state is `state`, read in one
    /// atomic step with the state; `None` if it is another (the list of `state` was lost).
    fn in_flight_of(
        &self,
        state: &str,
    ) -> impl Future<Output = Result<Option<Vec<Vec<u8>>>, Self::Error>> + Send;

    /// Whether entries after `after` may have been trimmed (the log's first entry is past
    /// the one after `after`, or the log was replaced).
    fn trimmed_after(
        &self,
        after: Position,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Trims the log below the lowest position acknowledged by a registered member or held
    /// by a seal record ([`put_seal`](Self::put_seal)); returns how many entries went.
    fn trim(&self) -> impl Future<Output = Result<u64, Self::Error>> + Send;
}
