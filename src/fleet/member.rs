//! [`Fleet`]: one guard's membership, its tasks, and the hooks its writes call.
//!
//! Four tasks per member, on the tokio runtime [`Fleet::join`] runs in (the fourth is the
//! drift sentinel):
//! - the **applier** reads the log and the acknowledgement feed on the coordinator's
//!   blocking connection, applies other members' entries ([fleet.F4], [fleet.F5]),
//!   acknowledges what it applied ([fleet.M3]) and wakes the creates waiting for peers;
//! - the **renewer** renews the lease ([fleet.M1]) on a fixed cadence, each renewal on a
//!   task of its own;
//! - the **keeper** rejoins when the lease is gone ([fleet.M5]), runs
//!   the rebuilds a rejoin or a failed apply needs, trims the log ([fleet.M6]) and announces
//!   creates written while the coordinator was down ([`CreatePolicy::Proceed`]).
//!
//! A member serves ([fleet.F3]) when the guard is warm, its registration is caught up (its
//! applied position at or past the top noted at registration), every rebuild it asked for
//! since has finished, and its deadline is ahead. The member's state is behind one mutex;
//! leaving and entering service happen under it, so no check races a rejoin.

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasher;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::key::encoded;
use super::{
    Coordinator, CreatePolicy, FleetConfig, FleetKey, InstanceId, MemberId, Op, Registration,
    SealRecord,
};
use crate::guard::core::Lookup;
use crate::guard::fleet_link::{BoxFuture, CreateSlot, DeleteSlot, FleetLink};
use crate::guard::{
    AsyncCacheGuard, AsyncStore, FleetError, GuardError, Position, Restart, Sealed,
};
use crate::sync::{AtomicU64, Ordering};
use crate::CuckooFilter;

/// Entries read per call.
const BATCH: usize = 512;
/// How long one read waits for entries or acknowledgements.
const READ_WAIT: Duration = Duration::from_secs(1);
/// The longest pause between retries after a coordinator error.
const MAX_RETRY: Duration = Duration::from_secs(1);

/// A member's counters ([`Fleet::stats`]).
///
/// # Examples
///
/// ```
/// use cuckoo_guard::fleet::FleetStats;
///
/// let stats = FleetStats::default();
/// assert_eq!(stats.creates_announced, 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetStats {
    /// Whether the member answers "absent" now: in service, and its deadline ahead.
    pub serving: bool,
    /// The position it applied last.
    pub applied: Position,
    /// Creates this member announced.
    pub creates_announced: u64,
    /// Creates refused: the coordinator was down ([`CreatePolicy::Refuse`]) or the
    /// acknowledgements did not arrive in time.
    pub creates_refused: u64,
    /// Creates written without an announcement ([`CreatePolicy::Proceed`]), announced later.
    pub creates_unannounced: u64,
    /// Total time creates waited for acknowledgements, in microseconds.
    pub barrier_wait_micros: u64,
    /// Deletes this member announced.
    pub deletes_announced: u64,
    /// Entries of other members applied.
    pub entries_applied: u64,
    /// Members a create of this member stopped waiting for because they were gone.
    pub members_expelled: u64,
    /// Registrations after the first.
    pub rejoins: u64,
    /// Rebuilds this member asked for (a rejoin that could not catch up, a failed apply).
    pub rebuilds_asked: u64,
    /// Coordinator calls that failed.
    pub coordinator_errors: u64,
    /// Coordinator calls made (none on a lookup).
    pub coordinator_calls: u64,
    /// Entries trimmed from the log by this member.
    pub trimmed: u64,
    /// Rows the drift sentinel read from the store and checked.
    pub sentinel_samples: u64,
    /// Rows the store holds and the filter missed: written around the fleet.
    pub sentinel_misses: u64,
    /// Keys in the log or the in-flight set that did not decode as this guard's key type.
    pub undecodable: u64,
}

#[derive(Debug, Default)]
struct Counters {
    creates_announced: AtomicU64,
    creates_refused: AtomicU64,
    creates_unannounced: AtomicU64,
    barrier_wait_micros: AtomicU64,
    deletes_announced: AtomicU64,
    entries_applied: AtomicU64,
    members_expelled: AtomicU64,
    rejoins: AtomicU64,
    rebuilds_asked: AtomicU64,
    coordinator_errors: AtomicU64,
    coordinator_calls: AtomicU64,
    trimmed: AtomicU64,
    sentinel_samples: AtomicU64,
    sentinel_misses: AtomicU64,
    undecodable: AtomicU64,
}

fn add(counter: &AtomicU64, n: u64) {
    // ORDERING: Relaxed; a statistic.
    counter.fetch_add(n, Ordering::Relaxed);
}

fn read(counter: &AtomicU64) -> u64 {
    // ORDERING: Relaxed; a statistic.
    counter.load(Ordering::Relaxed)
}

/// The member's state, behind one lock.
#[derive(Debug)]
struct State {
    member: Option<MemberId>,
    /// The last position applied.
    applied: Position,
    /// The position the member must have applied before it serves.
    target: Position,
    /// The last position acknowledged.
    acked: Position,
    /// Bumped at each registration: a batch read before it is not applied past it.
    epoch: u64,
    /// A rejoin is due (the lease is gone, or the log could not be read).
    rejoin: bool,
    /// Rebuilds asked for, and the count of those a finished rebuild covers.
    rebuilds_wanted: u64,
    rebuilds_done: u64,
    rebuild_running: bool,
    /// No rebuild starts before this (fleet ms): after a lost state, in-flight writes land
    /// first ([fleet.M7]).
    rebuild_not_before: u64,
    /// Creates written while the coordinator was down, to announce.
    unannounced: Vec<Vec<u8>>,
    /// Whether the current outage was reported.
    down_reported: bool,
    /// The coordinator state's id at the last registration.
    state_id: String,
    /// The sealed instance this member restarted from: its entries after the sealed
    /// position are creates whose copies are in the restored filter, skipped like this
    /// member's own.
    skip: Option<InstanceId>,
    /// Sealing ([`Fleet::seal`]): deletes beginning now are not announced.
    sealing: bool,
    /// The guard's deletes between [`FleetLink::delete_begins`] and their end.
    deletes_in_flight: usize,
    /// The greatest position of a delete this member announced.
    own_deletes_top: Position,
    /// A delete's announcement ended with its outcome unknown: its entry may land after any
    /// position, so this member never seals (in this coordinator state).
    own_deletes_unknown: bool,
}

/// A guard's delete in flight ([`FleetLink::delete_begins`] to its end): counted while it
/// lives, so a seal waits for its announcement.
struct DeleteInFlight<C, K>(Arc<Shared<C, K>>);

impl<C, K> Drop for DeleteInFlight<C, K> {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.deletes_in_flight = state.deletes_in_flight.saturating_sub(1);
    }
}

/// A delete's announcement under way ([`FleetLink::after_delete`]). Dropped before its outcome
/// is known (an error, or the future dropped while the coordinator was asked), it marks the
/// member: its entry may lie anywhere in the log, so the member never seals ([fleet.M8]).
/// The mark is made before the delete stops counting as in flight.
struct Announcing<'a, C, K> {
    shared: &'a Shared<C, K>,
    slot: Option<DeleteSlot>,
    settled: bool,
}

impl<C, K> Drop for Announcing<'_, C, K> {
    fn drop(&mut self) {
        if !self.settled {
            self.shared.state().own_deletes_unknown = true;
        }
        drop(self.slot.take());
    }
}

/// What a member shares between its tasks and its guard's hooks.
struct Shared<C, K> {
    coordinator: C,
    config: FleetConfig,
    instance: InstanceId,
    state: Mutex<State>,
    /// The positions other members acknowledged, as the feed and the writers' polls saw.
    acks: Mutex<HashMap<MemberId, Position>>,
    acked: Notify,
    /// Wakes the keeper early (a rejoin is due).
    wake: Notify,
    counters: Counters,
    /// The fleet clock, and whether the guard serves, its deadline included (type-erased
    /// over its store and hasher).
    clock: Box<dyn Fn() -> (u64, bool) + Send + Sync>,
    /// Ends the guard's service for good ([`Fleet::leave`]).
    stop: Box<dyn Fn() + Send + Sync>,
    /// When the applier last finished a turn (fleet ms): the keeper renews only while it is
    /// recent, so a member whose applier died lets its lease lapse.
    applier_beat: AtomicU64,
    /// This, for the guard's deletes to hold while in flight.
    this: std::sync::Weak<Shared<C, K>>,
    _key: PhantomData<fn(K) -> K>,
}

impl<C, K> Shared<C, K> {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn acks(&self) -> MutexGuard<'_, HashMap<MemberId, Position>> {
        self.acks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn note_ack(&self, member: MemberId, position: Position) {
        let mut acks = self.acks();
        let entry = acks.entry(member).or_default();
        if position > *entry {
            *entry = position;
        }
    }

    /// Counts a coordinator error and reports the first of an outage on standard error.
    fn coordinator_failed(&self, what: &str, error: &dyn std::error::Error) {
        add(&self.counters.coordinator_errors, 1);
        let mut state = self.state();
        if !state.down_reported {
            state.down_reported = true;
            eprintln!(
                "cuckoo-guard: fleet {:?}: the coordinator failed ({what}: {error}); lookups pass \
                 to the store until it is back",
                self.config.name()
            );
        }
    }
}

impl<C: Coordinator, K: FleetKey + Send + Sync + 'static> Shared<C, K> {
    fn call(&self) {
        add(&self.counters.coordinator_calls, 1);
    }

    /// [fleet.M2]: announce, then wait for every registered member but this one (for a
    /// create of this member's guard, whose filter holds the key already), or for every
    /// member (for a create outside the guard, `outside`).
    async fn barrier(&self, key: &K, outside: bool) -> Result<CreateSlot, FleetError> {
        let bytes = encoded(key);
        let started = tokio::time::Instant::now();
        let deadline = started + self.config.create_timeout_value();
        // An outside create gets an origin of its own, so this member applies it too.
        let origin = if outside {
            InstanceId(random_u64())
        } else {
            self.instance
        };
        self.call();
        let announcing = self.coordinator.announce_create(origin, &bytes);
        let announced = match tokio::time::timeout_at(deadline, announcing).await {
            Ok(Ok(announced)) => announced,
            Ok(Err(error)) if !outside && self.config.create_policy() == CreatePolicy::Proceed => {
                self.coordinator_failed("announcing a create", &error);
                add(&self.counters.creates_unannounced, 1);
                self.state().unannounced.push(bytes);
                return Ok(CreateSlot { position: None });
            }
            Ok(Err(error)) => {
                self.coordinator_failed("announcing a create", &error);
                add(&self.counters.creates_refused, 1);
                return Err(FleetError::Coordinator(Box::new(error)));
            }
            Err(_) => {
                add(&self.counters.creates_refused, 1);
                return Err(FleetError::Timeout {
                    waited: started.elapsed(),
                    pending: 0,
                });
            }
        };
        add(&self.counters.creates_announced, 1);
        let position = announced.position;
        if !announced.hold.is_zero() {
            tokio::time::sleep(announced.hold).await;
        }
        let own = if outside { None } else { self.state().member };
        let mut pending: Vec<MemberId> = announced
            .members
            .into_iter()
            .filter(|member| Some(*member) != own)
            .collect();
        // Each pending member's renewal count and when this writer first saw it (fleet ms).
        let mut seen: HashMap<MemberId, (u64, u64)> = HashMap::new();
        let poll = (self.config.renew_every() / 2).max(Duration::from_millis(10));
        let mut next_poll = started + poll;
        loop {
            let notified = self.acked.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let acks = self.acks();
                pending.retain(|member| acks.get(member).map_or(true, |acked| *acked < position));
            }
            if pending.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                add(&self.counters.creates_refused, 1);
                self.call();
                let ending = self.coordinator.create_ended(position);
                let _ = tokio::time::timeout(self.config.renew_every(), ending).await;
                return Err(FleetError::Timeout {
                    waited: started.elapsed(),
                    pending: pending.len(),
                });
            }
            if tokio::time::timeout_at(next_poll.min(deadline), notified)
                .await
                .is_ok()
            {
                continue;
            }
            next_poll = tokio::time::Instant::now() + poll;
            self.call();
            let states =
                match tokio::time::timeout_at(deadline, self.coordinator.members(&pending)).await {
                    Ok(Ok(states)) if states.state != announced.state => {
                        // The state the entry went into is gone: a member missing from the
                        // new one may have lost its registration rather than left, and may
                        // still serve.
                        add(&self.counters.creates_refused, 1);
                        return Err(FleetError::Coordinator(Box::from(
                            "the coordinator's state changed while the create waited for \
                             acknowledgements (its data was lost); the store was not changed",
                        )));
                    }
                    Ok(Ok(states)) => states.members,
                    Ok(Err(error)) => {
                        self.coordinator_failed("reading members", &error);
                        continue;
                    }
                    Err(_) => continue,
                };
            let (now, _) = (self.clock)();
            for state in states {
                if !state.registered || state.acked >= position {
                    self.note_ack(state.member, state.acked);
                    pending.retain(|member| *member != state.member);
                    continue;
                }
                let first = seen.entry(state.member).or_insert((state.renewals, now));
                if first.0 != state.renewals {
                    *first = (state.renewals, now);
                } else if !state.lease_live
                    && now.saturating_sub(first.1) >= self.config.gone_after()
                {
                    // Gone: no lease, and not renewed for a lease's length on this clock.
                    self.call();
                    let expelling = self.coordinator.expel(state.member);
                    if let Ok(Ok(true)) = tokio::time::timeout_at(deadline, expelling).await {
                        add(&self.counters.members_expelled, 1);
                    }
                    pending.retain(|member| *member != state.member);
                }
            }
        }
        add(
            &self.counters.barrier_wait_micros,
            started.elapsed().as_micros() as u64,
        );
        Ok(CreateSlot {
            position: Some(position),
        })
    }
}

impl<C: Coordinator, K: FleetKey + Send + Sync + 'static> FleetLink<K> for Shared<C, K> {
    fn before_create<'a>(&'a self, key: &'a K) -> BoxFuture<'a, Result<CreateSlot, FleetError>> {
        Box::pin(self.barrier(key, false))
    }

    fn after_create<'a>(&'a self, slot: CreateSlot, _key: &'a K, known: bool) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let (Some(position), true) = (slot.position, known) {
                self.call();
                if let Err(error) = self.coordinator.create_ended(position).await {
                    // The entry stays listed in flight: every later rebuild and joiner inserts
                    // its key (a false positive at worst).
                    self.coordinator_failed("ending a create", &error);
                }
            }
        })
    }

    fn delete_begins(&self) -> DeleteSlot {
        let mut state = self.state();
        if state.sealing {
            // [fleet.M8]: the seal's position must cover every delete this member announced;
            // other members keep a stale copy of this one (a false positive).
            return DeleteSlot {
                after: None,
                _in_flight: None,
            };
        }
        let after = if state.unannounced.is_empty() {
            state.applied
        } else {
            // A create written without an announcement may not be in other members'
            // filters: no member removes a copy for this delete ([fleet.F5]).
            Position::ZERO
        };
        state.deletes_in_flight += 1;
        let in_flight = self
            .this
            .upgrade()
            .map(|shared| Box::new(DeleteInFlight(shared)) as Box<dyn Send + Sync>);
        DeleteSlot {
            after: Some(after),
            _in_flight: in_flight,
        }
    }

    fn after_delete<'a>(&'a self, key: &'a K, slot: DeleteSlot) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(after) = slot.after else {
                return;
            };
            // Until the announcement's outcome is known; dropped with this future too.
            let mut announcing = Announcing {
                shared: self,
                slot: Some(slot),
                settled: false,
            };
            self.call();
            match self
                .coordinator
                .announce_delete(self.instance, &encoded(key), after)
                .await
            {
                Ok(position) => {
                    add(&self.counters.deletes_announced, 1);
                    let mut state = self.state();
                    state.own_deletes_top = state.own_deletes_top.max(position);
                    announcing.settled = true;
                }
                // Other members keep a stale copy: a false positive. The entry may still
                // have been appended: `announcing` notes that.
                Err(error) => self.coordinator_failed("announcing a delete", &error),
            }
        })
    }

    fn in_flight(&self) -> BoxFuture<'_, Result<Vec<K>, FleetError>> {
        Box::pin(async move {
            self.call();
            let state_id = self.state().state_id.clone();
            let Some(keys) = self
                .coordinator
                .in_flight_of(&state_id)
                .await
                .map_err(|error| FleetError::Coordinator(Box::new(error)))?
            else {
                // [fleet.M7]: this member's state was lost, with its creates in flight: a scan
                // now could miss a write acknowledged in it. Out of service, rejoin; the
                // rebuild fails, and the rejoin's own waits for the new state to age.
                self.state().rejoin = true;
                (self.stop)();
                self.wake.notify_one();
                return Err(FleetError::Guard(String::from(
                    "the coordinator's state changed: the member rejoins before it rebuilds",
                )));
            };
            // A key that does not decode cannot be in this guard's store: skipped, counted.
            let decoded: Vec<K> = keys.iter().filter_map(|bytes| K::decode(bytes)).collect();
            add(
                &self.counters.undecodable,
                (keys.len() - decoded.len()) as u64,
            );
            Ok(decoded)
        })
    }

    fn top(&self) -> BoxFuture<'_, Result<Position, FleetError>> {
        Box::pin(async move {
            self.call();
            self.coordinator
                .top()
                .await
                .map_err(|error| FleetError::Coordinator(Box::new(error)))
        })
    }
}

/// One guard's membership of a fleet. Dropping it stops the member's tasks; the guard then
/// fails open for good (its deadline passes; a guard joins a fleet once: build a new guard
/// to join again). [`leave`](Self::leave) also ends its service at once and removes the
/// registration, so writers stop waiting for it.
///
/// # Examples
///
/// ```no_run
/// use cuckoo_guard::fleet::{Fleet, FleetConfig, RedisCoordinator};
/// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000), MemoryStore::<u64, String>::new());
/// let coordinator = RedisCoordinator::builder("redis://127.0.0.1:6379", "users").connect().await?;
/// // Joins, then warms up: lookups fail open until the member is caught up.
/// let fleet = Fleet::join(&guard, coordinator, FleetConfig::new("users")).await?;
/// guard.put(&1, &String::from("ada")).await?; // announced before the store write
/// println!("{:?}", fleet.stats());
/// fleet.leave().await;
/// # Ok(()) }
/// ```
pub struct Fleet<C: Coordinator, K> {
    shared: Arc<Shared<C, K>>,
    /// The applier, the keeper and the sentinel.
    tasks: Tasks,
    /// The renewer, stopped last by a seal.
    renewer: Tasks,
}

/// Tasks aborted when dropped.
#[derive(Default)]
struct Tasks(Vec<JoinHandle<()>>);

impl Tasks {
    /// Aborts the tasks and waits until each has stopped.
    async fn stop(&mut self) {
        for task in self.0.drain(..) {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl<C: Coordinator, K> fmt::Debug for Fleet<C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fleet")
            .field("name", &self.shared.config.name())
            .field("instance", &self.shared.instance)
            .finish_non_exhaustive()
    }
}

impl<C: Coordinator, K: FleetKey + Send + Sync + 'static> Fleet<C, K> {
    /// Makes `guard` a member of the fleet `config` names: registers it with `coordinator`,
    /// starts its tasks on the current tokio runtime, and brings its filter up to date:
    /// the warm-up if the guard is warming (call `join` instead of `warm_up`), a rebuild
    /// otherwise. Returns once the warm-up finished; a rebuild runs in the background. The
    /// guard passes lookups to the store until it is caught up ([fleet.M5]).
    ///
    /// # Errors
    ///
    /// [`GuardError::Fleet`] for inconsistent settings, a guard already in a fleet, or a
    /// coordinator that cannot be reached; the warm-up's errors.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [`Fleet`].
    pub async fn join<St, H>(
        guard: &AsyncCacheGuard<St, H>,
        coordinator: C,
        config: FleetConfig,
    ) -> Result<Self, GuardError<St::Error>>
    where
        St: AsyncStore<Key = K> + 'static,
        H: BuildHasher + Clone + Send + Sync + 'static,
    {
        Self::join_with(guard, coordinator, config, None)
            .await
            .map(|(fleet, _)| fleet)
    }

    /// [`join`](Self::join), or with `sealed`, the join of a guard restored from that sealed
    /// file: it catches up from the record's position if the log still covers it (the second
    /// value: why not, otherwise).
    async fn join_with<St, H>(
        guard: &AsyncCacheGuard<St, H>,
        coordinator: C,
        config: FleetConfig,
        sealed: Option<SealRecord>,
    ) -> Result<(Self, Result<(), String>), GuardError<St::Error>>
    where
        St: AsyncStore<Key = K> + 'static,
        H: BuildHasher + Clone + Send + Sync + 'static,
    {
        config.check().map_err(GuardError::Fleet)?;
        let instance = InstanceId(random_u64());
        // Weak: the guard holds these hooks.
        let clock_guard = guard.downgrade();
        let stop_guard = guard.downgrade();
        let shared = Arc::new_cyclic(|this| Shared {
            this: this.clone(),
            coordinator,
            config,
            instance,
            state: Mutex::new(State {
                member: None,
                applied: Position::ZERO,
                target: Position::ZERO,
                acked: Position::ZERO,
                epoch: 0,
                rejoin: false,
                rebuilds_wanted: 0,
                rebuilds_done: 0,
                rebuild_running: false,
                rebuild_not_before: 0,
                unannounced: Vec::new(),
                down_reported: false,
                state_id: String::new(),
                skip: None,
                sealing: false,
                deletes_in_flight: 0,
                own_deletes_top: Position::ZERO,
                own_deletes_unknown: false,
            }),
            acks: Mutex::new(HashMap::new()),
            acked: Notify::new(),
            wake: Notify::new(),
            counters: Counters::default(),
            clock: Box::new(move || match clock_guard.upgrade() {
                Some(guard) => {
                    let core = guard.core();
                    let now = core.fleet_now();
                    (now, core.fleet_serving() && now < core.fleet_deadline())
                }
                None => (0, false),
            }),
            stop: Box::new(move || {
                if let Some(guard) = stop_guard.upgrade() {
                    guard.core().fleet_stop_serving();
                    guard.core().fleet_set_deadline(0);
                }
            }),
            applier_beat: AtomicU64::new(guard.core().fleet_now()),
            _key: PhantomData,
        });
        guard.core().fleet_join();
        // From here on, the guard's creates are announced.
        if !guard.set_fleet(Arc::clone(&shared) as Arc<dyn FleetLink<K>>) {
            return Err(GuardError::Fleet(FleetError::Config(String::from(
                "the guard is in a fleet already",
            ))));
        }
        let sent = guard.core().fleet_now();
        let lease = shared.config.lease_length();
        let coordinator_error = |error| GuardError::Fleet(FleetError::Coordinator(Box::new(error)));
        shared.call();
        let (registration, taken) = match &sealed {
            None => (
                shared
                    .coordinator
                    .register(instance, None, lease)
                    .await
                    .map_err(coordinator_error)?,
                None,
            ),
            Some(record) => shared
                .coordinator
                .register_sealed(instance, record.secret.id(), lease)
                .await
                .map_err(coordinator_error)?,
        };
        guard
            .core()
            .fleet_set_deadline(shared.config.deadline_after(sent));
        let covered = match (&sealed, taken) {
            (None, _) => Err(String::from("no sealed file")),
            (Some(_), None) => Err(String::from(
                "the coordinator no longer holds its seal (the hold passed, or another restart \
                 took it)",
            )),
            (Some(record), Some(taken)) => {
                shared.call();
                if taken.secret.id() != record.secret.id() {
                    Err(String::from("the coordinator holds another seal"))
                } else if registration.fresh_state || registration.state != record.state {
                    Err(String::from(
                        "the coordinator's state changed since the seal",
                    ))
                } else if registration.top < record.applied {
                    Err(String::from("the log went backwards since the seal"))
                } else {
                    match shared.coordinator.trimmed_after(record.applied).await {
                        Ok(false) => Ok(()),
                        Ok(true) => Err(String::from("the log was trimmed past the seal")),
                        Err(error) => Err(format!("the log could not be checked: {error}")),
                    }
                }
            }
        };
        let warming = guard.is_warming();
        // A warm-up that loaded pages before the registration (or creates made before it)
        // may lack rows other members created meanwhile: a rebuild follows the warm-up.
        let filled_before = !guard.filter().is_empty();
        {
            let mut state = shared.state();
            state.member = Some(registration.member);
            state.state_id = registration.state.clone();
            state.target = registration.top;
            match (&sealed, &covered) {
                (Some(record), Ok(())) => {
                    // The sealed filter holds every entry up to the record's position and
                    // its own instance's: catch up from there, skipping those.
                    state.applied = record.applied;
                    state.acked = record.applied;
                    state.skip = Some(record.instance);
                    if let Some(at) = record.scanned_at {
                        guard.core().set_scanned_at(at);
                    }
                }
                _ => {
                    state.applied = registration.top;
                    state.acked = registration.top;
                    state.rebuild_not_before = scan_not_before(guard, &shared, &registration);
                    if !warming || filled_before {
                        // The filter was (partly) filled before the registration.
                        state.rebuilds_wanted += 1;
                    }
                }
            }
        }
        // [fleet.M5]: the creates in flight at registration, before the scan.
        for bytes in &registration.in_flight {
            let Some(key) = K::decode(bytes) else {
                add(&shared.counters.undecodable, 1);
                continue;
            };
            if guard.core().apply_create(&key).is_err() {
                shared.state().rebuilds_wanted += 1;
            }
        }
        let fleet = Fleet {
            tasks: Tasks(vec![
                tokio::spawn(applier(guard.clone(), Arc::clone(&shared))),
                tokio::spawn(keeper(guard.clone(), Arc::clone(&shared))),
                tokio::spawn(sentinel(guard.clone(), Arc::clone(&shared))),
            ]),
            renewer: Tasks(vec![tokio::spawn(renewer(
                guard.clone(),
                Arc::clone(&shared),
            ))]),
            shared,
        };
        if warming {
            // [fleet.M7]: the warm-up is a scan too.
            let not_before = fleet.shared.state().rebuild_not_before;
            let wait = not_before.saturating_sub(guard.core().fleet_now());
            if wait > 0 {
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            let page_size = fleet.shared.config.page_size_value();
            guard.warm_up(page_size, |_| {}).await?;
            // At once, not at the applier's or the keeper's next turn.
            maybe_serve(guard, &fleet.shared);
        }
        Ok((fleet, covered))
    }

    /// Starts a guard from the snapshot file at `path` written by [`Fleet::seal`], and joins
    /// the fleet with it: the restart of a member ([fleet.M8]). The file is trusted if the
    /// coordinator still holds its seal's record (the file's MAC checks out under the
    /// record's secret, as [`AsyncCacheGuard::restore`]'s under the store's seal), and the
    /// member then catches up from the log after the position the file covers, instead of
    /// scanning the store, if the log still covers it: same coordinator state, nothing
    /// trimmed past the position (the record holds trimming back for
    /// [`FleetConfig::seal_hold`]). Otherwise the guard warms up from `fallback()` (a file
    /// not trusted) or rebuilds from the store (a file trusted, the log moved on:
    /// [`Restart::NotCovered`]). Lookups fail open until the member is caught up.
    ///
    /// # Errors
    ///
    /// As [`Fleet::join`].
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cuckoo_guard::fleet::{Fleet, FleetConfig, RedisCoordinator};
    /// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let path = "/var/lib/users/guard.cgsnap";
    /// let store = MemoryStore::<u64, String>::new();
    /// let coordinator = RedisCoordinator::builder("redis://127.0.0.1:6379", "users").connect().await?;
    /// let (guard, mut fleet, restart) = Fleet::restore(
    ///     path,
    ///     store,
    ///     || CuckooFilter::with_capacity(1_000_000),
    ///     coordinator,
    ///     FleetConfig::new("users"),
    /// )
    /// .await?;
    /// println!("{restart}");
    /// // ... serve; at shutdown:
    /// fleet.seal(&guard, path).await?;
    /// # Ok(()) }
    /// ```
    pub async fn restore<St>(
        path: impl AsRef<Path>,
        store: St,
        fallback: impl FnOnce() -> CuckooFilter,
        coordinator: C,
        config: FleetConfig,
    ) -> Result<(AsyncCacheGuard<St>, Self, Restart), GuardError<St::Error>>
    where
        St: AsyncStore<Key = K> + 'static,
    {
        config.check().map_err(GuardError::Fleet)?;
        let peek = &coordinator;
        let (guard, restart, record) =
            AsyncCacheGuard::restore_with(path, store, fallback, |store, tag| async move {
                let found = match peek.peek_seal(tag).await {
                    Ok(Some(record)) if tag != 0 && record.secret.id() == tag => {
                        Ok((record.secret.clone(), record))
                    }
                    Ok(_) => Err(Restart::NotCovered(String::from(
                        "the coordinator holds no record of its seal (the hold passed, another \
                         restart took it, or it was never sealed in this fleet)",
                    ))),
                    Err(error) => Err(Restart::SealUnreadable(error.to_string())),
                };
                (store, found)
            })
            .await;
        let (fleet, covered) = Self::join_with(&guard, coordinator, config, record).await?;
        let restart = match covered {
            Err(why) if restart.is_trusted() => {
                let restart = Restart::NotCovered(why);
                guard.core().set_restart(restart.to_string());
                restart
            }
            _ => restart,
        };
        Ok((guard, fleet, restart))
    }

    /// Seals the member for a restart and leaves the fleet ([fleet.M8]): refuses the guard's
    /// creates from now on ([`FleetError::Sealed`]) and stops announcing its deletes (other
    /// members keep their copies: false positives), waits for the deletes it announces, then
    /// under the guard's rebuild claim waits until the member applied the log past its own
    /// deletes, stops applying at that position `P`, records the seal in the coordinator
    /// (a fresh secret, `P`, this instance), which holds the log at `P` for
    /// [`FleetConfig::seal_hold`], leaves, waits for the guard's creates in flight, and
    /// writes the filter's snapshot to `path` with a MAC keyed by the seal's secret.
    /// [`Fleet::restore`] starts from it. The store keeps no seal of it; any store will do.
    ///
    /// A seal refused before it began (`guard` is not this member's, the member is not caught
    /// up, or one of its deletes' announcements ended with its outcome unknown, so its entry
    /// may land past any position: such a member never seals, and its restart rebuilds)
    /// changes nothing. Once it began, the member has left the fleet when this
    /// returns, whatever the outcome, and the guard refuses creates.
    ///
    /// # Errors
    ///
    /// [`GuardError::Fleet`] if `guard` is not this member's, if the member is not caught up
    /// (a warm-up, a rejoin or a rebuild it needs has not finished: its filter may lack
    /// entries), if its deletes or its applier did not finish within
    /// [`FleetConfig::create_timeout`], or if the coordinator failed or no longer lists the
    /// member; the snapshot's errors.
    ///
    /// # Examples
    ///
    /// See [`Fleet::restore`].
    pub async fn seal<St, H>(
        &mut self,
        guard: &AsyncCacheGuard<St, H>,
        path: impl AsRef<Path>,
    ) -> Result<FleetSealed, GuardError<St::Error>>
    where
        St: AsyncStore<Key = K> + 'static,
        H: BuildHasher + Clone + Send + Sync + 'static,
    {
        let shared = Arc::clone(&self.shared);
        if !guard.fleet_is(Arc::as_ptr(&shared).cast()) {
            return refused("the guard is not this fleet member's");
        }
        caught_up(&shared, guard)?;
        let tasks = std::mem::take(&mut self.tasks);
        let renewer = std::mem::take(&mut self.renewer);
        let result = seal_member(&shared, guard, path.as_ref(), tasks, renewer).await;
        // Left already unless the seal failed before its record.
        leave_registration(&shared).await;
        result
    }

    /// The member's counters.
    ///
    /// # Examples
    ///
    /// See [`Fleet`].
    pub fn stats(&self) -> FleetStats {
        let counters = &self.shared.counters;
        let (_, serving) = (self.shared.clock)();
        let state = self.shared.state();
        FleetStats {
            serving,
            applied: state.applied,
            creates_announced: read(&counters.creates_announced),
            creates_refused: read(&counters.creates_refused),
            creates_unannounced: read(&counters.creates_unannounced),
            barrier_wait_micros: read(&counters.barrier_wait_micros),
            deletes_announced: read(&counters.deletes_announced),
            entries_applied: read(&counters.entries_applied),
            members_expelled: read(&counters.members_expelled),
            rejoins: read(&counters.rejoins),
            rebuilds_asked: read(&counters.rebuilds_asked),
            coordinator_errors: read(&counters.coordinator_errors),
            coordinator_calls: read(&counters.coordinator_calls),
            trimmed: read(&counters.trimmed),
            sentinel_samples: read(&counters.sentinel_samples),
            sentinel_misses: read(&counters.sentinel_misses),
            undecodable: read(&counters.undecodable),
        }
    }

    /// The member's current registration, if any.
    ///
    /// # Examples
    ///
    /// See [`Fleet`].
    pub fn member(&self) -> Option<MemberId> {
        self.shared.state().member
    }

    /// Announces a create of `key` made **outside** the fleet (a batch job, a migration):
    /// call it before the store write and write only if it returns `Ok`; then call
    /// [`Announcement::ended`] once the write's outcome is known.
    ///
    /// # Errors
    ///
    /// As a guard's create: the coordinator cannot be reached, or the members did not
    /// acknowledge in time.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use cuckoo_guard::fleet::{Fleet, RedisCoordinator};
    /// # async fn f(fleet: &Fleet<RedisCoordinator, u64>) -> Result<(), Box<dyn std::error::Error>> {
    /// let announcement = fleet.announce_created(&42).await?;
    /// // ... INSERT the row with id 42 ...
    /// announcement.ended().await;
    /// # Ok(()) }
    /// ```
    pub async fn announce_created(&self, key: &K) -> Result<Announcement<C, K>, FleetError> {
        let slot = self.shared.barrier(key, true).await?;
        Ok(Announcement {
            shared: Arc::clone(&self.shared),
            position: slot.position,
        })
    }

    /// Leaves the fleet: stops the tasks and removes the registration, so writers stop
    /// waiting for this member. The guard fails open from then on.
    ///
    /// # Examples
    ///
    /// See [`Fleet`].
    pub async fn leave(self) {
        drop(self.tasks);
        drop(self.renewer);
        leave_registration(&self.shared).await;
    }
}

/// What [`Fleet::seal`] wrote.
///
/// # Examples
///
/// ```no_run
/// # use cuckoo_guard::fleet::{Fleet, RedisCoordinator};
/// # use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
/// # async fn f(mut fleet: Fleet<RedisCoordinator, u64>, guard: AsyncCacheGuard<MemoryStore<u64, u64>>) -> Result<(), Box<dyn std::error::Error>> {
/// let sealed = fleet.seal(&guard, "guard.cgsnap").await?;
/// println!("covers the log up to {}", sealed.applied);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetSealed {
    /// The seal's public id, in the file's header and naming the coordinator's record.
    pub seal: u64,
    /// The log position the file covers.
    pub applied: Position,
    /// The snapshot written.
    pub written: crate::snapshot::SnapshotWritten,
}

/// Ends service and removes the member's registration, if it has one: writers stop waiting
/// for it.
async fn leave_registration<C: Coordinator, K: FleetKey + Send + Sync + 'static>(
    shared: &Arc<Shared<C, K>>,
) {
    // Before the registration goes: writers stop waiting for this member then.
    (shared.stop)();
    let member = shared.state().member.take();
    if let Some(member) = member {
        shared.call();
        if let Err(error) = shared.coordinator.leave(member).await {
            shared.coordinator_failed("leaving", &error);
        }
    }
}

/// A seal refused before it began.
fn refused<T, E>(why: &str) -> Result<T, GuardError<E>> {
    Err(GuardError::Fleet(FleetError::Guard(why.to_owned())))
}

/// [fleet.M8]: whether the member's filter holds every entry up to its applied position:
/// warm, registered, no rejoin due (its registration may be gone, and with it the log past
/// its acknowledgement), no rebuild asked for and not done.
fn caught_up<St, H, C, K, E>(
    shared: &Shared<C, K>,
    guard: &AsyncCacheGuard<St, H>,
) -> Result<(), GuardError<E>>
where
    St: AsyncStore,
    H: BuildHasher + Sync,
{
    let state = shared.state();
    if state.own_deletes_unknown {
        return refused(
            "a delete's announcement ended with its outcome unknown: its entry may lie past any \
             position the seal could record (a restart rebuilds instead)",
        );
    }
    if guard.is_warming()
        || state.member.is_none()
        || state.rejoin
        || state.rebuild_running
        || state.rebuilds_done < state.rebuilds_wanted
    {
        return refused(
            "the member is not caught up (a warm-up, a rejoin or a rebuild has not finished)",
        );
    }
    Ok(())
}

/// Waits until `done` holds, up to `limit`; whether it did.
async fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while !done() {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

/// [fleet.M8]: the steps of [`Fleet::seal`] after its checks.
async fn seal_member<St, H, C, K>(
    shared: &Arc<Shared<C, K>>,
    guard: &AsyncCacheGuard<St, H>,
    path: &Path,
    mut tasks: Tasks,
    mut renewer: Tasks,
) -> Result<FleetSealed, GuardError<St::Error>>
where
    St: AsyncStore<Key = K> + 'static,
    H: BuildHasher + Clone + Send + Sync + 'static,
    C: Coordinator,
    K: FleetKey + Send + Sync + 'static,
{
    let limit = shared.config.create_timeout_value();
    // [fleet.F7]: the guard's creates are refused from here on, before the seal's claim;
    // deletes beginning now are not announced.
    guard.core().fleet_seal();
    shared.state().sealing = true;
    if !wait_until(limit, || shared.state().deletes_in_flight == 0).await {
        return refused("the guard's deletes in flight did not end in time");
    }
    let hold = shared.config.seal_hold_value();
    let sealed: Sealed = guard
        .seal_with(path, |secret, scanned_at| async move {
            // Under the claim: no rebuild runs. The applier applies past this member's own
            // deletes, so none of them lies past the sealed position; then it stops between
            // entries (an entry applies under the state lock, with no await).
            let own = shared.state().own_deletes_top;
            if !wait_until(limit, || shared.state().applied >= own).await {
                return refused("the member did not apply its own deletes in time");
            }
            tasks.stop().await;
            caught_up(shared, guard)?;
            (shared.stop)();
            announce_unannounced(shared).await;
            let (member, state_id, position) = {
                let state = shared.state();
                (state.member, state.state_id.clone(), state.applied)
            };
            let Some(member) = member else {
                return refused("the member is not registered");
            };
            let record = SealRecord::new(secret, shared.instance, state_id, position, scanned_at);
            shared.call();
            match shared.coordinator.put_seal(member, &record, hold).await {
                // Still registered, in the same state: nothing past its acknowledgement was
                // trimmed, and it applied every entry up to `position`.
                Ok(true) => {}
                Ok(false) => {
                    return refused(
                        "the coordinator no longer lists the member, or its state changed",
                    )
                }
                Err(error) => {
                    shared.coordinator_failed("recording a seal", &error);
                    return Err(GuardError::Fleet(FleetError::Coordinator(Box::new(error))));
                }
            }
            // The record holds the log at `position`: writers need not wait for this member
            // while the file is written.
            leave_registration(shared).await;
            renewer.stop().await;
            Ok(())
        })
        .await?;
    // Creates that raced the seal while the coordinator was down: announced if it is back.
    announce_unannounced(shared).await;
    let left = shared.state().unannounced.len();
    if left > 0 {
        // The file holds them; other members miss them until they rebuild (or their
        // sentinels find them).
        eprintln!(
            "cuckoo-guard: fleet {:?}: sealed with {left} create(s) written while the coordinator \
             was down and never announced",
            shared.config.name()
        );
    }
    Ok(FleetSealed {
        seal: sealed.seal,
        // The applier stopped at the recorded position.
        applied: shared.state().applied,
        written: sealed.written,
    })
}

/// A create announced by [`Fleet::announce_created`].
pub struct Announcement<C: Coordinator, K> {
    shared: Arc<Shared<C, K>>,
    position: Option<Position>,
}

impl<C: Coordinator, K> fmt::Debug for Announcement<C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Announcement")
            .field("position", &self.position)
            .finish_non_exhaustive()
    }
}

impl<C: Coordinator, K: FleetKey + Send + Sync + 'static> Announcement<C, K> {
    /// The store write's outcome is known: the create is no longer in flight. Not calling it
    /// leaves the key listed in flight (every rebuild and joiner then inserts it).
    ///
    /// # Examples
    ///
    /// See [`Fleet::announce_created`].
    pub async fn ended(self) {
        if let Some(position) = self.position {
            self.shared.call();
            if let Err(error) = self.shared.coordinator.create_ended(position).await {
                self.shared.coordinator_failed("ending a create", &error);
            }
        }
    }
}

/// Enters service if every condition of [fleet.F3] holds.
fn maybe_serve<St, H, C, K>(guard: &AsyncCacheGuard<St, H>, shared: &Shared<C, K>)
where
    St: AsyncStore,
    H: BuildHasher + Sync,
{
    let core = guard.core();
    let state = shared.state();
    let ready = core.is_ready()
        && state.member.is_some()
        && !state.rejoin
        && state.applied >= state.target
        && state.rebuilds_done >= state.rebuilds_wanted
        && core.fleet_now() < core.fleet_deadline();
    if ready && !core.fleet_serving() {
        core.fleet_start_serving();
    }
}

/// Leaves service and asks the keeper for a rejoin ([fleet.F2]).
fn stop_and_rejoin<St, H, C, K>(guard: &AsyncCacheGuard<St, H>, shared: &Shared<C, K>)
where
    St: AsyncStore,
    H: BuildHasher + Sync,
{
    let mut state = shared.state();
    state.rejoin = true;
    guard.core().fleet_stop_serving();
    drop(state);
    shared.wake.notify_one();
}

/// Leaves service until a rebuild asked for now has finished.
fn stop_and_rebuild<St, H, C, K>(guard: &AsyncCacheGuard<St, H>, shared: &Shared<C, K>)
where
    St: AsyncStore,
    H: BuildHasher + Sync,
{
    let mut state = shared.state();
    state.rebuilds_wanted += 1;
    add(&shared.counters.rebuilds_asked, 1);
    guard.core().fleet_stop_serving();
    drop(state);
    shared.wake.notify_one();
}

/// The applier task.
async fn applier<St, H, C, K>(guard: AsyncCacheGuard<St, H>, shared: Arc<Shared<C, K>>)
where
    St: AsyncStore<Key = K> + 'static,
    H: BuildHasher + Clone + Send + Sync + 'static,
    C: Coordinator,
    K: FleetKey + Send + Sync + 'static,
{
    let mut acks_cursor = Position::ZERO;
    let mut retry = Duration::from_millis(10);
    let mut last_epoch = 0;
    loop {
        let (from, epoch) = {
            let state = shared.state();
            (state.applied, state.epoch)
        };
        if epoch != last_epoch {
            // A registration, possibly into a new state whose feed starts over.
            last_epoch = epoch;
            acks_cursor = Position::ZERO;
        }
        shared.call();
        let batch = match shared
            .coordinator
            .read(from, acks_cursor, BATCH, READ_WAIT)
            .await
        {
            Ok(batch) => batch,
            Err(error) => {
                // Nothing is lost: the next read starts after the last entry applied, and
                // writers wait for this member meanwhile. A coordinator that is gone shows in
                // the renewals ([fleet.M1]): the deadline passes, or the lease is found gone.
                shared.coordinator_failed("reading the log", &error);
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(MAX_RETRY);
                continue;
            }
        };
        retry = Duration::from_millis(10);
        // ORDERING: Relaxed; a liveness hint for the keeper, no data hangs on it.
        shared
            .applier_beat
            .store(guard.core().fleet_now(), Ordering::Relaxed);
        acks_cursor = batch.acks_cursor;
        if let Some(state_of_batch) = &batch.state {
            if *state_of_batch != shared.state().state_id {
                // [fleet.M7]: entries of another state than this member's (its state was
                // lost): not applied, not acknowledged; the member rejoins.
                stop_and_rejoin(&guard, &shared);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        }
        if !batch.acks.is_empty() {
            for (member, position) in &batch.acks {
                shared.note_ack(*member, *position);
            }
            shared.acked.notify_waiters();
        }
        let mut failed = false;
        let mut applied_entries = 0;
        for entry in &batch.entries {
            // One entry at a time under the state lock: a registration that changes the
            // epoch stops the batch, and no entry is applied twice (a delete applied twice
            // could take another key's copy).
            let mut state = shared.state();
            if state.epoch != epoch {
                break;
            }
            if entry.origin != shared.instance && Some(entry.origin) != state.skip {
                match K::decode(&entry.key) {
                    Some(key) => match entry.op {
                        Op::Create => {
                            if guard.core().apply_create(&key).is_err() {
                                failed = true;
                            }
                        }
                        Op::Delete { after } => {
                            guard.core().apply_delete(&key, after);
                        }
                    },
                    // Not a key of this guard's type: it cannot be in its store.
                    None => add(&shared.counters.undecodable, 1),
                }
                add(&shared.counters.entries_applied, 1);
                applied_entries += 1;
            }
            state.applied = state.applied.max(entry.position);
        }
        // The rebuild policy sees other members' writes as it sees local ones (growth, load,
        // stale copies).
        for _ in 0..applied_entries {
            guard.after_fleet_write();
        }
        if failed {
            // [fleet.F2] before the acknowledgement: a key this filter could not take.
            stop_and_rebuild(&guard, &shared);
        }
        let to_ack = {
            let state = shared.state();
            match state.member {
                Some(member) if state.applied > state.acked => Some((member, state.applied)),
                _ => None,
            }
        };
        if let Some((member, position)) = to_ack {
            // [fleet.M3]: everything up to `position` is applied.
            shared.call();
            match shared.coordinator.ack(member, position).await {
                Ok(()) => {
                    let mut state = shared.state();
                    if state.member == Some(member) {
                        state.acked = state.acked.max(position);
                    }
                }
                Err(error) => shared.coordinator_failed("acknowledging", &error),
            }
        }
        maybe_serve(&guard, &shared);
    }
}

/// The keeper task.
async fn keeper<St, H, C, K>(guard: AsyncCacheGuard<St, H>, shared: Arc<Shared<C, K>>)
where
    St: AsyncStore<Key = K> + 'static,
    H: BuildHasher + Clone + Send + Sync + 'static,
    C: Coordinator,
    K: FleetKey + Send + Sync + 'static,
{
    let mut last_trim = tokio::time::Instant::now();
    loop {
        let rejoin = shared.state().rejoin;
        if rejoin {
            rejoin_once(&guard, &shared).await;
        }
        start_rebuild_if_wanted(&guard, &shared);
        announce_unannounced(&shared).await;
        if last_trim.elapsed() >= shared.config.trim_every_value() {
            last_trim = tokio::time::Instant::now();
            shared.call();
            match shared.coordinator.trim().await {
                Ok(n) => add(&shared.counters.trimmed, n),
                Err(error) => shared.coordinator_failed("trimming the log", &error),
            }
        }
        maybe_serve(&guard, &shared);
        let pause = if shared.state().rejoin {
            Duration::from_millis(100)
        } else {
            shared.config.renew_every()
        };
        let _ = tokio::time::timeout(pause, shared.wake.notified()).await;
    }
}

/// The renewer task: a renewal every [`FleetConfig::renew_every`] counted from the previous
/// send, each on a task of its own, so neither a slow reply nor the keeper's other work
/// delays the next ([fleet.M1]).
async fn renewer<St, H, C, K>(guard: AsyncCacheGuard<St, H>, shared: Arc<Shared<C, K>>)
where
    St: AsyncStore<Key = K> + 'static,
    H: BuildHasher + Clone + Send + Sync + 'static,
    C: Coordinator,
    K: FleetKey + Send + Sync + 'static,
{
    let lease = shared.config.lease_length();
    let mut ticks = tokio::time::interval(shared.config.renew_every());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticks.tick().await;
        if shared.state().rejoin {
            continue;
        }
        let (guard, shared) = (guard.clone(), Arc::clone(&shared));
        tokio::spawn(async move { renew_once(&guard, &shared, lease).await });
    }
}

/// [fleet.M1]: one renewal; a lease found gone starts a rejoin.
async fn renew_once<St, H, C, K>(
    guard: &AsyncCacheGuard<St, H>,
    shared: &Arc<Shared<C, K>>,
    lease: Duration,
) where
    St: AsyncStore,
    H: BuildHasher + Sync,
    C: Coordinator,
    K: FleetKey + Send + Sync + 'static,
{
    let Some(member) = shared.state().member else {
        return;
    };
    let sent = guard.core().fleet_now();
    // ORDERING: Relaxed; see `applier_beat`.
    let beat = shared.applier_beat.load(Ordering::Relaxed);
    if sent.saturating_sub(beat) > 3 * (READ_WAIT.as_millis() as u64) + 2_000 {
        // The applier has not finished a turn for seconds: let the lease lapse, so writers
        // stop waiting for acknowledgements that will not come.
        return;
    }
    shared.call();
    match shared.coordinator.renew(member, lease).await {
        Ok(true) => {
            let mut state = shared.state();
            if state.member == Some(member) && !state.rejoin {
                guard
                    .core()
                    .fleet_set_deadline(shared.config.deadline_after(sent));
                state.down_reported = false;
            }
        }
        Ok(false) => stop_and_rejoin(guard, shared),
        // The deadline passes by itself if this goes on.
        Err(error) => shared.coordinator_failed("renewing the lease", &error),
    }
}

/// [fleet.M5]: registers anew; catches up from the log if nothing was trimmed past the
/// member's position and the log did not go backwards, else asks for a rebuild.
async fn rejoin_once<St, H, C, K>(guard: &AsyncCacheGuard<St, H>, shared: &Arc<Shared<C, K>>)
where
    St: AsyncStore,
    H: BuildHasher + Sync,
    C: Coordinator,
    K: FleetKey + Send + Sync + 'static,
{
    let previous = shared.state().member;
    let sent = guard.core().fleet_now();
    shared.call();
    let registration = match shared
        .coordinator
        .register(shared.instance, previous, shared.config.lease_length())
        .await
    {
        Ok(registration) => registration,
        Err(error) => {
            shared.coordinator_failed("registering", &error);
            return;
        }
    };
    add(&shared.counters.rejoins, 1);
    let applied = shared.state().applied;
    shared.call();
    let trimmed = shared
        .coordinator
        .trimmed_after(applied)
        .await
        .unwrap_or(true);
    let catch_up = registration.previous_kept && registration.top >= applied && !trimmed;
    guard
        .core()
        .fleet_set_deadline(shared.config.deadline_after(sent));
    let mut state = shared.state();
    // Still not serving: [fleet.F2] happened when the rejoin was asked for.
    state.member = Some(registration.member);
    if registration.fresh_state || registration.state != state.state_id {
        // The log this member's deletes went into is gone.
        state.own_deletes_top = Position::ZERO;
        state.own_deletes_unknown = false;
    }
    state.state_id = registration.state.clone();
    state.rejoin = false;
    state.epoch += 1;
    state.down_reported = false;
    state.target = registration.top;
    if catch_up {
        state.acked = state.acked.min(state.applied);
    } else {
        state.applied = registration.top;
        state.acked = registration.top;
        state.rebuilds_wanted += 1;
        add(&shared.counters.rebuilds_asked, 1);
        state.rebuild_not_before = scan_not_before(guard, shared, &registration);
    }
}

/// [fleet.M7]: the fleet clock before which a scan of this member must not begin: the
/// coordinator's state must be [`FleetConfig::write_bound`] old, so the writes of creates in
/// flight when an earlier state was lost (with its in-flight list) have landed. Whoever began
/// the state, this member or another.
fn scan_not_before<St, H, C, K>(
    guard: &AsyncCacheGuard<St, H>,
    shared: &Shared<C, K>,
    registration: &Registration,
) -> u64
where
    St: AsyncStore,
    H: BuildHasher + Sync,
{
    // The coordinator's clock measured the age, this member's measures the wait: both may
    // run off by the rate error.
    let error = 2.0 * shared.config.clock_rate_error_value();
    let left = shared
        .config
        .write_bound_value()
        .mul_f64(1.0 + error)
        .saturating_sub(registration.state_age);
    guard
        .core()
        .fleet_now()
        .saturating_add(left.as_millis() as u64)
}

/// Starts a rebuild task if one was asked for and none runs.
fn start_rebuild_if_wanted<St, H, C, K>(guard: &AsyncCacheGuard<St, H>, shared: &Arc<Shared<C, K>>)
where
    St: AsyncStore<Key = K> + 'static,
    H: BuildHasher + Clone + Send + Sync + 'static,
    C: Coordinator,
    K: FleetKey + Send + Sync + 'static,
{
    if guard.is_warming() {
        return;
    }
    let wanted = {
        let mut state = shared.state();
        if state.rebuild_running
            || state.rebuilds_done >= state.rebuilds_wanted
            || guard.core().fleet_now() < state.rebuild_not_before
        {
            return;
        }
        state.rebuild_running = true;
        state.rebuilds_wanted
    };
    let (guard, shared) = (guard.clone(), Arc::clone(shared));
    /// Clears `rebuild_running` however the rebuild task ends (a panic included).
    struct Running<C, K>(Arc<Shared<C, K>>);
    impl<C, K> Drop for Running<C, K> {
        fn drop(&mut self) {
            self.0.state().rebuild_running = false;
            self.0.wake.notify_one();
        }
    }
    tokio::spawn(async move {
        let running = Running(Arc::clone(&shared));
        // A rebuild already running may have published its next filter before the request:
        // this one starts after it.
        let result = loop {
            match guard.rebuild().await {
                Err(GuardError::RebuildRunning) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => break other,
            }
        };
        match result {
            Ok(_) => {
                let mut state = shared.state();
                state.rebuilds_done = state.rebuilds_done.max(wanted);
            }
            Err(error) => eprintln!(
                "cuckoo-guard: fleet {:?}: a rebuild failed ({error}); retrying",
                shared.config.name()
            ),
        }
        drop(running);
        // At once, not at the applier's or the keeper's next turn.
        maybe_serve(&guard, &shared);
    });
}

/// The drift sentinel: reads random rows from the store and checks them against the filter
/// while the member serves. A row created through the fleet is in every serving member's
/// filter before it is written ([fleet.M2]), so a row the filter misses, and the store still
/// holds when read again, was written around the fleet.
async fn sentinel<St, H, C, K>(guard: AsyncCacheGuard<St, H>, shared: Arc<Shared<C, K>>)
where
    St: AsyncStore<Key = K> + 'static,
    H: BuildHasher + Clone + Send + Sync + 'static,
    C: Coordinator,
    K: FleetKey + Send + Sync + 'static,
{
    let rate = shared.config.sentinel_rate_value();
    if rate == 0 {
        return;
    }
    let mut reported = 0u32;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let core = guard.core();
        if !core.is_ready() || !core.fleet_serving() {
            continue;
        }
        let Ok(keys) = guard.store().sample_keys(rate as usize).await else {
            continue;
        };
        add(&shared.counters.sentinel_samples, keys.len() as u64);
        let mut drifted = Vec::new();
        // A filter at its memory ceiling lacks keys created since ([guard.R4]) and passes
        // what it misses to the store: a miss there is no drift.
        let covered = |key: &K| core.filter_lookup(key) != Lookup::Missed;
        for key in keys {
            if covered(&key) {
                continue;
            }
            // Deleted since it was sampled? Then its copy went with it.
            if let Ok(Some(_)) = guard.store().get(&key).await {
                if !covered(&key) {
                    drifted.push(key);
                }
            }
        }
        if drifted.is_empty() {
            continue;
        }
        add(&shared.counters.sentinel_misses, drifted.len() as u64);
        if reported < 10 {
            reported += 1;
            eprintln!(
                "cuckoo-guard: fleet {:?}: {} row(s) in the store are missing from the filter \
                 (written around the fleet), e.g. key bytes {:02x?}; failing open and rebuilding",
                shared.config.name(),
                drifted.len(),
                encoded(&drifted[0]),
            );
        }
        stop_and_rebuild(&guard, &shared);
    }
}

/// [`CreatePolicy::Proceed`]: announces what was written while the coordinator was down.
async fn announce_unannounced<C: Coordinator, K: FleetKey + Send + Sync + 'static>(
    shared: &Arc<Shared<C, K>>,
) {
    // A key leaves the list only once announced: a task stopped meanwhile loses none.
    let keys = shared.state().unannounced.clone();
    for bytes in keys {
        shared.call();
        match shared
            .coordinator
            .announce_create(shared.instance, &bytes)
            .await
        {
            Ok(announced) => {
                {
                    let mut state = shared.state();
                    if let Some(at) = state.unannounced.iter().position(|k| *k == bytes) {
                        state.unannounced.remove(at);
                    }
                }
                shared.call();
                let _ = shared.coordinator.create_ended(announced.position).await;
            }
            Err(_) => return,
        }
    }
}

/// A random 64-bit id.
fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // The OS's generator failed: a time-and-address mix still makes collisions unlikely.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return now.as_nanos() as u64 ^ (&bytes as *const _ as u64);
    }
    u64::from_le_bytes(bytes)
}
