//! A fleet of guards: every replica of a service keeps the promise, with a shared
//! [`Coordinator`] (Redis: [`RedisCoordinator`], feature `redis`) and no network call on a
//! lookup (feature `fleet`).
//!
//! Each replica holds its own [`AsyncCacheGuard`](crate::guard::AsyncCacheGuard) and joins the
//! fleet with [`Fleet::join`]. From then on the guard's creates and deletes are announced in
//! the coordinator's log, and every member applies the others' announcements to its own
//! filter. Lookups stay in process: a member answers "absent" only while it can vouch for
//! its filter, and otherwise passes the lookup to the store ([`Admission::FailOpen`]).
//!
//! [`Admission::FailOpen`]: crate::guard::Admission::FailOpen
//!
//! # The protocol across processes
//!
//! - **[fleet.M1] Membership.** A member registers with a lease (a key with a TTL in the
//!   coordinator) and renews it every [`FleetConfig::renew_every`] by a *conditional*
//!   extension that never recreates an expired lease. Its deadline is taken from the
//!   renewal's **send** time: `sent + lease × (1 − rate error) − margin`, on a clock that
//!   keeps counting while the process is stopped or the machine suspended (`CLOCK_BOOTTIME`).
//!   Past its deadline a member answers no "absent" ([fleet.F1]); a renewal that finds the
//!   lease gone makes it leave service and rejoin ([fleet.F2]).
//! - **[fleet.M2] Creates: announce, wait, write.** A create inserts its key into the local
//!   filters ([guard.R1]), then appends a create entry to the log and records it in flight,
//!   in one atomic step that also reads the registered members. It then waits until each of
//!   them (itself excepted) has acknowledged a position at or past the entry, has left, has
//!   re-registered (a later registration catches up past the entry before it serves), or is
//!   *gone*: its lease no longer exists in the coordinator **and** its renewal count has not
//!   changed for `lease × (1 + rate error) + margin` on the writer's own clock. Only then
//!   does it write the store. When the write's outcome is known, the entry leaves the
//!   in-flight set.
//! - **[fleet.M3] Acknowledgements.** A member acknowledges a position only after applying
//!   every entry up to it ([fleet.F4], [fleet.F5]).
//! - **[fleet.M4] Deletes: write, then announce.** A delete notes the position its member had
//!   applied, deletes in the store, and if the store confirmed, appends a delete entry
//!   carrying that position. Members apply it under [fleet.F5].
//! - **[fleet.M5] Joining.** A member registers first (writers wait for it from then on), and
//!   in the same atomic step notes the log's top and the in-flight keys. It inserts those
//!   keys, applies entries after the top, and scans the store (the warm-up, or a rebuild
//!   whose scan starts after the registration); it serves once the scan is done. A rejoin
//!   whose previous registration is still listed (so nothing it had not acknowledged was
//!   trimmed) and whose log did not go backwards catches up by reading the log to the new
//!   top instead of scanning.
//! - **[fleet.M6] Trimming.** The log is trimmed below the lowest position a registered
//!   member acknowledged. A member removed meanwhile finds its previous registration gone at
//!   its rejoin and rebuilds.
//! - **[fleet.M7] A new coordinator state.** The first registration or announcement on a
//!   coordinator with no fleet state (a new fleet, or one whose data was lost) begins one,
//!   with a random id and a hold: writers hold creates for twice the lease, because members
//!   of the lost state may serve until their deadlines pass. A writer whose wait finds
//!   another state than the one its entry went into refuses the create (a member missing
//!   from the new state may have lost its registration rather than left). A member that
//!   registers into a state younger than [`FleetConfig::write_bound`] (the coordinator
//!   reports the state's age on its own clock), whoever began it, scans the store (its
//!   warm-up, or the rebuild a rejoin into a new state needs) only once the state is that
//!   old: the creates in flight when an earlier state was lost went with its in-flight list,
//!   and their writes must land before the scan. A new fleet's first members wait so too.
//! - **[fleet.M8] Sealed restarts.** [`Fleet::seal`] refuses the guard's creates from then
//!   on ([fleet.F7]: a create that is not refused has its copy in the file) and announces no
//!   delete that begins later (other members keep a stale copy), waits for the deletes in
//!   flight, and under the guard's rebuild claim waits until its applier has passed every
//!   delete it announced, then stops the applier between entries at a position `P`: every
//!   entry up to `P` is applied, none after, and none of the member's own deletes lies past
//!   `P`. A member one of whose delete announcements ended with its outcome unknown (its
//!   entry may land anywhere later) never seals. Still under the claim it records the seal
//!   in the coordinator (a fresh secret, `P`, the member's instance, the state's id, the
//!   generation's scan position), only if the coordinator still lists the member in that
//!   state (so nothing past its acknowledgement was trimmed), which holds trimming at `P`;
//!   it leaves; it waits for the guard's creates in flight; it writes the filter with a MAC
//!   keyed by the secret. [`Fleet::restore`] verifies the file under the record's secret
//!   and registers, taking the record in the same atomic step (a second restart from the
//!   same file finds none) and starting its acknowledged position at `P`. If the state is
//!   the record's and nothing past `P` was trimmed, it applies the log from `P` on, skipping
//!   the sealed instance's entries (only creates, whose copies are in the file), and serves
//!   once caught up. Every create whose write a lookup can see is then in the file (applied
//!   up to `P`, or the sealed instance's own) or in the log after `P`, applied before the
//!   member serves; a create by a writer that did not wait for the member (it had left) was
//!   announced after the member's last applied entry. No delete is applied twice: the
//!   sealed member's own are at or before `P`. Otherwise the restored guard rebuilds.
//!
//! Why "absent" is sound: a create whose write a lookup can see was acknowledged by the
//! member (which applied it first), or was written while the member was gone, which means
//! the member's lease expired, could not be renewed, and its deadline passed before the
//! writer stopped waiting; the member then serves only after a new registration and a
//! catch-up or scan that covers the entry. The in-process half is in the guard core's
//! fleet module ([fleet.F1]-[fleet.F6]), with loom models.
//!
//! # Failure behaviour
//!
//! - **Coordinator down or slow:** renewals fail, deadlines pass, lookups fail open (counted
//!   in [`GuardStats::passed_failing_open`](crate::guard::GuardStats::passed_failing_open)).
//!   Creates follow [`CreatePolicy`]: refused with [`GuardError::Fleet`] (the default), or
//!   written without an announcement and announced when the coordinator is back.
//! - **A member killed:** writers wait for it until its lease is gone and a lease's length has
//!   passed on their clock (one lease, plus the margin).
//! - **A member paused** (`SIGSTOP`, a VM pause) past its lease: its deadline has passed when
//!   it resumes; it fails open and rejoins.
//!
//! [`GuardError::Fleet`]: crate::guard::GuardError::Fleet
//!
//! # Assumptions
//!
//! Clock *rates* of the members and the coordinator differ by at most
//! [`FleetConfig::clock_rate_error`] (1% by default); the members' clock offsets do not
//! matter. The coordinator's wall clock (Redis `TIME`) dates a new state: it must not be
//! stepped forward during a state's first [`FleetConfig::write_bound`] (a host that boots
//! with a wrong clock and has it corrected by a step), nor differ between a server and the
//! replica that replaces it. A create's store write commits within `write_bound` of its
//! acknowledgement, queueing, retries and pauses of the writer included. Writers outside the
//! fleet must announce their creates ([`Fleet::announce_created`]); the coordinator must not
//! evict keys (`noeviction`). The coordinator loses no acknowledged write: one Redis server
//! (a restart that loses data is a new state, handled above), or replicas with
//! `WAIT`/`WAITAOF` before failovers; a failover to a replica that lacks acknowledged
//! entries but keeps the state's id is not detected (stop the fleet's members after such a
//! failover). On platforms other than Linux the fleet clock is `Instant`, which may stop
//! while the machine is suspended.

mod coordinator;
mod key;
mod member;
#[cfg(feature = "redis")]
mod redis;

pub use self::coordinator::{
    Announced, Batch, Coordinator, Entry, InstanceId, MemberId, MemberState, MemberStates, Op,
    Registration, SealRecord,
};
pub use self::key::FleetKey;
pub use self::member::{Announcement, Fleet, FleetSealed, FleetStats};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::{RedisCoordinator, RedisCoordinatorBuilder, RedisCoordinatorError};
pub use crate::guard::{Position, PositionError};

use std::time::Duration;

/// What a create does when the coordinator cannot be reached.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::fleet::{CreatePolicy, FleetConfig};
///
/// let config = FleetConfig::new("users").on_coordinator_down(CreatePolicy::Refuse);
/// assert_eq!(config.create_policy(), CreatePolicy::Refuse);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CreatePolicy {
    /// Refuse the create with [`GuardError::Fleet`](crate::guard::GuardError::Fleet) before
    /// the store is touched. The promise holds on every member.
    #[default]
    Refuse,
    /// Write the store without an announcement, and announce the key when the coordinator
    /// is reachable again. Members that still serve meanwhile (partitioned from this writer
    /// but not from the coordinator) answer "absent" for the key until then: availability of
    /// creates is bought with the promise, for the outage.
    Proceed,
}

/// A fleet's settings.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cuckoo_guard::fleet::FleetConfig;
///
/// let config = FleetConfig::new("users").lease(Duration::from_secs(3));
/// assert_eq!(config.renew_every(), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone)]
pub struct FleetConfig {
    name: String,
    lease: Duration,
    renew_every: Option<Duration>,
    clock_rate_error: f64,
    margin: Duration,
    create_policy: CreatePolicy,
    create_timeout: Duration,
    page_size: usize,
    trim_every: Duration,
    sentinel_rate: u32,
    write_bound: Duration,
    seal_hold: Duration,
}

impl FleetConfig {
    /// Settings for the fleet `name`: a 3 s lease renewed every second, 1% clock rate error,
    /// a 50 ms margin, creates refused while the coordinator is down and after 30 s of
    /// waiting, warm-up pages of 10,000 keys, the log trimmed every 10 s, the drift sentinel
    /// reading 20 rows per second, a sealed snapshot's log held for 5 minutes.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::fleet::FleetConfig;
    ///
    /// assert_eq!(FleetConfig::new("users").name(), "users");
    /// ```
    pub fn new(name: impl Into<String>) -> Self {
        FleetConfig {
            name: name.into(),
            lease: Duration::from_secs(3),
            renew_every: None,
            clock_rate_error: 0.01,
            margin: Duration::from_millis(50),
            create_policy: CreatePolicy::Refuse,
            create_timeout: Duration::from_secs(30),
            page_size: 10_000,
            trim_every: Duration::from_secs(10),
            sentinel_rate: 20,
            write_bound: Duration::from_secs(15),
            seal_hold: Duration::from_secs(300),
        }
    }

    /// The fleet's name.
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::fleet::FleetConfig;
    /// assert_eq!(FleetConfig::new("a").name(), "a");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lease: how long a member that stopped renewing may still answer "absent" at
    /// most, and how long writers wait for a member that died.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use cuckoo_guard::fleet::FleetConfig;
    /// let config = FleetConfig::new("a").lease(Duration::from_millis(900));
    /// assert_eq!(config.lease_length(), Duration::from_millis(900));
    /// ```
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The lease length.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use cuckoo_guard::fleet::FleetConfig;
    /// assert_eq!(FleetConfig::new("a").lease_length(), Duration::from_secs(3));
    /// ```
    pub fn lease_length(&self) -> Duration {
        self.lease
    }

    /// How often a member renews its lease (a third of the lease unless set).
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use cuckoo_guard::fleet::FleetConfig;
    /// let config = FleetConfig::new("a").renewing_every(Duration::from_millis(500));
    /// assert_eq!(config.renew_every(), Duration::from_millis(500));
    /// ```
    pub fn renewing_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// How often a member renews its lease.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use cuckoo_guard::fleet::FleetConfig;
    /// assert_eq!(FleetConfig::new("a").renew_every(), Duration::from_secs(1));
    /// ```
    pub fn renew_every(&self) -> Duration {
        self.renew_every.unwrap_or(self.lease / 3)
    }

    /// The bound on how much faster or slower one clock of the fleet runs than another, as
    /// a fraction (0.01 is 1%).
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::fleet::FleetConfig;
    /// let config = FleetConfig::new("a").clock_rate_error(0.05);
    /// # let _ = config;
    /// ```
    pub fn clock_rate_error(mut self, error: f64) -> Self {
        self.clock_rate_error = error;
        self
    }

    /// A fixed safety margin on both sides of the lease (the member's deadline ends this much
    /// earlier; writers wait this much longer).
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use cuckoo_guard::fleet::FleetConfig;
    /// let config = FleetConfig::new("a").margin(Duration::from_millis(100));
    /// # let _ = config;
    /// ```
    pub fn margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// What creates do while the coordinator is down.
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::fleet::{CreatePolicy, FleetConfig};
    /// let config = FleetConfig::new("a").on_coordinator_down(CreatePolicy::Proceed);
    /// assert_eq!(config.create_policy(), CreatePolicy::Proceed);
    /// ```
    pub fn on_coordinator_down(mut self, policy: CreatePolicy) -> Self {
        self.create_policy = policy;
        self
    }

    /// What creates do while the coordinator is down.
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::fleet::{CreatePolicy, FleetConfig};
    /// assert_eq!(FleetConfig::new("a").create_policy(), CreatePolicy::Refuse);
    /// ```
    pub fn create_policy(&self) -> CreatePolicy {
        self.create_policy
    }

    /// How long a create waits for the members' acknowledgements before it is refused.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use cuckoo_guard::fleet::FleetConfig;
    /// let config = FleetConfig::new("a").create_timeout(Duration::from_secs(5));
    /// # let _ = config;
    /// ```
    pub fn create_timeout(mut self, timeout: Duration) -> Self {
        self.create_timeout = timeout;
        self
    }

    /// The page size of the warm-up [`Fleet::join`] runs.
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::fleet::FleetConfig;
    /// let config = FleetConfig::new("a").page_size(1_000);
    /// # let _ = config;
    /// ```
    pub fn page_size(mut self, keys: usize) -> Self {
        self.page_size = keys.max(1);
        self
    }

    /// How often a member trims the log.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use cuckoo_guard::fleet::FleetConfig;
    /// let config = FleetConfig::new("a").trim_every(Duration::from_secs(60));
    /// # let _ = config;
    /// ```
    pub fn trim_every(mut self, every: Duration) -> Self {
        self.trim_every = every;
        self
    }

    /// Checks that the settings are consistent.
    pub(crate) fn check(&self) -> Result<(), crate::guard::FleetError> {
        let fail = |why: &str| Err(crate::guard::FleetError::Config(why.to_owned()));
        if !(0.0..0.5).contains(&self.clock_rate_error) {
            return fail("the clock rate error must be at least 0 and below 0.5");
        }
        let usable = self.lease.as_secs_f64() * (1.0 - self.clock_rate_error);
        if usable <= self.margin.as_secs_f64() {
            return fail("the lease must be longer than the margin");
        }
        if self.renew_every().is_zero() || self.renew_every().as_secs_f64() * 2.0 > usable {
            return fail("renewals must come at least twice per lease (after the margin)");
        }
        if self.name.is_empty() {
            return fail("the fleet needs a name");
        }
        Ok(())
    }

    pub(crate) fn create_timeout_value(&self) -> Duration {
        self.create_timeout
    }

    pub(crate) fn page_size_value(&self) -> usize {
        self.page_size
    }

    pub(crate) fn trim_every_value(&self) -> Duration {
        self.trim_every
    }

    /// How many random rows per second the drift sentinel reads from the store and checks
    /// against the filter (0 turns it off). A row the filter misses was written around the
    /// fleet: the member logs its key, fails open and rebuilds. At the default 20 rows per
    /// second, a drift of 1% of the rows is found in 5 s on average.
    ///
    /// # Examples
    ///
    /// ```
    /// # use cuckoo_guard::fleet::FleetConfig;
    /// let config = FleetConfig::new("a").sentinel_rate(100);
    /// # let _ = config;
    /// ```
    pub fn sentinel_rate(mut self, rows_per_second: u32) -> Self {
        self.sentinel_rate = rows_per_second;
        self
    }

    /// The longest a create's store write may run after its announcement was acknowledged
    /// (set it above the database's statement timeout; 15 s by default). A member that
    /// registers into a coordinator state younger than this (a new fleet, or a state begun
    /// after the coordinator lost its data, with the in-flight creates) scans the store only
    /// once the state is this old, so a write in flight across the loss lands before its scan:
    /// the first join of a new fleet, and the recovery after a loss, take this long.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use cuckoo_guard::fleet::FleetConfig;
    /// let config = FleetConfig::new("a").write_bound(Duration::from_secs(30));
    /// # let _ = config;
    /// ```
    pub fn write_bound(mut self, bound: Duration) -> Self {
        self.write_bound = bound;
        self
    }

    /// How long the coordinator keeps the log from being trimmed past a sealed snapshot
    /// ([`Fleet::seal`]): a restart from the file within this time catches up from the log; a
    /// later one rebuilds. The log grows by every create and delete of the fleet meanwhile.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use cuckoo_guard::fleet::FleetConfig;
    /// let config = FleetConfig::new("a").seal_hold(Duration::from_secs(60));
    /// # let _ = config;
    /// ```
    pub fn seal_hold(mut self, hold: Duration) -> Self {
        self.seal_hold = hold;
        self
    }

    pub(crate) fn seal_hold_value(&self) -> Duration {
        self.seal_hold
    }

    pub(crate) fn clock_rate_error_value(&self) -> f64 {
        self.clock_rate_error
    }

    pub(crate) fn write_bound_value(&self) -> Duration {
        self.write_bound
    }

    pub(crate) fn sentinel_rate_value(&self) -> u32 {
        self.sentinel_rate
    }

    /// A member's deadline after a renewal sent at `sent` (fleet clock, ms).
    pub(crate) fn deadline_after(&self, sent: u64) -> u64 {
        let lease = (self.lease.as_millis() as f64 * (1.0 - self.clock_rate_error)) as u64;
        sent.saturating_add(lease)
            .saturating_sub(self.margin.as_millis() as u64)
    }

    /// How long a writer must see a member's lease gone and its renewals unchanged before it
    /// stops waiting for it, in ms.
    pub(crate) fn gone_after(&self) -> u64 {
        (self.lease.as_millis() as f64 * (1.0 + self.clock_rate_error)).ceil() as u64
            + self.margin.as_millis() as u64
    }
}
