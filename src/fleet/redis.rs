//! [`RedisCoordinator`]: a fleet's [`Coordinator`] in Redis (features `fleet` and `redis`).
//!
//! The layout of the keys, why each step is atomic and how a new coordinator state holds
//! creates are in [`RedisCoordinator`]'s documentation.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Script, Value};

use super::coordinator::{
    Announced, Batch, Coordinator, Entry, InstanceId, MemberId, MemberState, Op, Registration,
    SealRecord,
};
use super::{MemberStates, Position};
use crate::guard::{SealSecret, SEAL_SECRET_LEN};
use crate::stores::redis::eviction_policy;

/// How many entries the acknowledgement feed keeps (about: `MAXLEN ~`).
const ACKS_KEPT: u64 = 10_000;

/// How much longer than a read's wait its connection waits for the reply.
const READ_SLACK: Duration = Duration::from_secs(2);

/// How many idle read connections a coordinator keeps.
const READ_POOL: usize = 2;

/// Reads the log's top (`last-generated-id`), `max-deleted-entry-id` and `p:trimmed`:
/// `{exists, top, max_deleted, trimmed}` (`KEYS[1]` the log, `KEYS[2]` `p:trimmed`).
const STREAM_INFO: &str = r"
local function stream_info(log, trimmed_key)
  local trimmed = redis.call('GET', trimmed_key) or '0-0'
  if redis.call('EXISTS', log) == 0 then
    return {0, '0-0', '0-0', trimmed}
  end
  local info = redis.call('XINFO', 'STREAM', log)
  local top, deleted = '0-0', '0-0'
  for i = 1, #info - 1, 2 do
    if info[i] == 'last-generated-id' then top = info[i + 1] end
    if info[i] == 'max-deleted-entry-id' then deleted = info[i + 1] end
  end
  return {1, top, deleted, trimmed}
end
";

/// Positions compared exactly as decimal strings (no floating point), the server's clock, and
/// a seal record's fields (`v1 <applied> <expiry ms> <rest>`, see [`RedisCoordinator`]).
const HELPERS: &str = r"
local function parts(id)
  if type(id) ~= 'string' then return nil end
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then return nil end
  return (string.gsub(ms, '^0+(%d)', '%1')), (string.gsub(seq, '^0+(%d)', '%1'))
end
local function less_number(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local function less(a, b)
  local am, as = parts(a)
  local bm, bs = parts(b)
  if am ~= bm then return less_number(am, bm) end
  return less_number(as, bs)
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function seal_fields(record)
  if type(record) ~= 'string' then return nil end
  local applied, expiry = string.match(record, '^v1 (%d+%-%d+) (%d+) ')
  if not applied then return nil end
  return applied, tonumber(expiry)
end
";

/// `KEYS`: epoch, inflight. `ARGV`: the state.
const IN_FLIGHT_OF: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
return redis.call('HVALS', KEYS[2])
";

/// `KEYS`: log, trimmed.
const INFO: &str = r"
return stream_info(KEYS[1], KEYS[2])
";

/// `KEYS`: members, renewals, acked, inflight, epoch, hold, log, trimmed, the new lease,
/// seals, born, [the previous lease]. `ARGV`: new member, instance, lease ms, previous member
/// or '', epoch, hold ms, seal id or ''. Returns the state's age in ms last. A held seal record is taken (removed) whether or not it
/// still covers the log; it becomes the member's position only if it does.
const REGISTER: &str = r"
local fresh = 0
if redis.call('EXISTS', KEYS[5]) == 0 then
  fresh = 1
  redis.call('SET', KEYS[11], ARGV[5] .. ' ' .. string.format('%d', now_ms()))
  redis.call('SET', KEYS[5], ARGV[5])
  if tonumber(ARGV[6]) > 0 then
    redis.call('SET', KEYS[6], '1', 'PX', ARGV[6])
  end
end
local top = stream_info(KEYS[7], KEYS[8])[2]
local kept = 0
local acked = top
if ARGV[4] ~= '' then
  if redis.call('HEXISTS', KEYS[1], ARGV[4]) == 1 then
    kept = 1
    acked = redis.call('HGET', KEYS[3], ARGV[4]) or '0-0'
  end
  redis.call('DEL', KEYS[12])
  redis.call('HDEL', KEYS[1], ARGV[4])
  redis.call('HDEL', KEYS[2], ARGV[4])
  redis.call('HDEL', KEYS[3], ARGV[4])
end
local sealed = false
if ARGV[7] ~= '' then
  local record = redis.call('HGET', KEYS[10], ARGV[7])
  local applied, expiry = seal_fields(record)
  if record then redis.call('HDEL', KEYS[10], ARGV[7]) end
  if applied and expiry > now_ms() and not less(top, applied) then
    acked = applied
    sealed = record
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SET', KEYS[9], '1', 'PX', ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], 0)
redis.call('HSET', KEYS[3], ARGV[1], acked)
local epoch = redis.call('GET', KEYS[5])
local born_of, born = string.match(redis.call('GET', KEYS[11]) or '', '^(%S+) (%d+)$')
born = tonumber(born)
if born_of ~= epoch or not born then
  born = now_ms()
  redis.call('SET', KEYS[11], epoch .. ' ' .. string.format('%d', born))
end
local age = math.max(0, now_ms() - born)
return {top, redis.call('HVALS', KEYS[4]), kept, redis.call('GET', KEYS[5]), fresh, sealed, age}
";

/// `KEYS`: seals, members, epoch. `ARGV`: seal id, applied, hold ms, the record's rest,
/// member, state. Holds nothing unless the member is registered and the state is current.
const PUT_SEAL: &str = r"
if redis.call('HEXISTS', KEYS[2], ARGV[5]) == 0 or redis.call('GET', KEYS[3]) ~= ARGV[6] then
  return 0
end
local expiry = now_ms() + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], 'v1 ' .. ARGV[2] .. ' ' .. string.format('%d', expiry) .. ' ' .. ARGV[4])
return 1
";

/// `KEYS`: seals. `ARGV`: seal id. An expired record is removed.
const PEEK_SEAL: &str = r"
local record = redis.call('HGET', KEYS[1], ARGV[1])
local applied, expiry = seal_fields(record)
if not applied then return false end
if expiry <= now_ms() then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return false
end
return record
";

/// `KEYS`: the lease, renewals. `ARGV`: member, lease ms.
const RENEW: &str = r"
if redis.call('PEXPIRE', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
  return 1
end
return 0
";

/// `KEYS`: the lease, members, renewals, acked. `ARGV`: member.
const LEAVE: &str = r"
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return 1
";

/// `KEYS`: the lease, members, renewals, acked. `ARGV`: member.
const EXPEL: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local removed = redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return removed
";

/// `KEYS`: log, inflight, members, hold, epoch, born. `ARGV`: key, origin, a new epoch, hold
/// ms. Begins a state (epoch, birth and hold) if there is none, as `register` does.
const ANNOUNCE_CREATE: &str = r"
if redis.call('EXISTS', KEYS[5]) == 0 then
  redis.call('SET', KEYS[6], ARGV[3] .. ' ' .. string.format('%d', now_ms()))
  redis.call('SET', KEYS[5], ARGV[3])
  if tonumber(ARGV[4]) > 0 then
    redis.call('SET', KEYS[4], '1', 'PX', ARGV[4])
  end
end
local id = redis.call('XADD', KEYS[1], '*', 'o', 'c', 'k', ARGV[1], 'i', ARGV[2])
redis.call('HSET', KEYS[2], id, ARGV[1])
return {id, redis.call('HKEYS', KEYS[3]), redis.call('PTTL', KEYS[4]), redis.call('GET', KEYS[5])}
";

/// `KEYS`: members, acked, acks. `ARGV`: member, position, feed length.
const ACK: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'm', ARGV[1], 'p', ARGV[2])
return 1
";

/// `KEYS`: members, renewals, acked, epoch, then each member's lease. `ARGV`: the members.
/// Returns the epoch (or false), then four values per member: registered, lease live,
/// renewals, acked.
const MEMBERS: &str = r"
local out = {redis.call('GET', KEYS[4])}
for i, member in ipairs(ARGV) do
  out[#out + 1] = redis.call('HEXISTS', KEYS[1], member)
  out[#out + 1] = redis.call('EXISTS', KEYS[4 + i])
  out[#out + 1] = redis.call('HGET', KEYS[2], member)
  out[#out + 1] = redis.call('HGET', KEYS[3], member)
end
return out
";

/// `KEYS`: members, acked, log, trimmed, seals. A missing or malformed acknowledged
/// position trims nothing; a held seal record holds the trim at its position, an expired or
/// malformed one is removed.
const TRIM: &str = r"
local members = redis.call('HKEYS', KEYS[1])
if #members == 0 then return 0 end
local min = nil
for _, member in ipairs(members) do
  local acked = redis.call('HGET', KEYS[2], member)
  if not parts(acked) then return 0 end
  if min == nil or less(acked, min) then min = acked end
end
local now = now_ms()
local seals = redis.call('HGETALL', KEYS[5])
for i = 1, #seals - 1, 2 do
  local applied, expiry = seal_fields(seals[i + 1])
  if not applied or expiry <= now then
    redis.call('HDEL', KEYS[5], seals[i])
  elseif less(applied, min) then
    min = applied
  end
end
if not less('0-0', min) or redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
local last = redis.call('XREVRANGE', KEYS[3], '(' .. min, '-', 'COUNT', 1)
if #last == 0 then return 0 end
local removed = redis.call('XTRIM', KEYS[3], 'MINID', '=', min)
local before = redis.call('GET', KEYS[4])
if not parts(before) or less(before, last[1][1]) then
  redis.call('SET', KEYS[4], last[1][1])
end
return removed
";

/// Why a [`RedisCoordinator`] operation failed.
///
/// # Examples
///
/// ```no_run
/// use cuckoo_guard::fleet::{RedisCoordinator, RedisCoordinatorError};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// match RedisCoordinator::builder("redis://127.0.0.1:6379", "users").connect().await {
///     Ok(coordinator) => println!("connected: {coordinator:?}"),
///     Err(RedisCoordinatorError::EvictionPolicy { policy }) => {
///         eprintln!("configure noeviction, not {policy}")
///     }
///     Err(other) => return Err(other.into()),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum RedisCoordinatorError {
    /// The URL is invalid or the server cannot be reached.
    Connect {
        /// The driver's error.
        source: redis::RedisError,
    },
    /// A command or script failed (transport or server error).
    Command {
        /// What the coordinator was doing.
        operation: &'static str,
        /// The driver's error.
        source: redis::RedisError,
    },
    /// The server returned something the fleet's layout does not allow (a log entry without
    /// its fields, a position that is not `ms-seq`, ...): the keys were written by something
    /// else.
    Malformed {
        /// What was malformed, and where.
        what: String,
    },
    /// The server's `maxmemory-policy` may evict the fleet's keys (anything but
    /// `noeviction`: `volatile-*` policies evict the leases, which carry a time to live), and
    /// [`RedisCoordinatorBuilder::allow_eviction`] did not opt in.
    EvictionPolicy {
        /// The server's policy.
        policy: String,
    },
    /// The fleet name is empty or starts with `}`, so it would not be a hash tag keeping the
    /// fleet's keys in one cluster slot.
    FleetName {
        /// The name.
        name: String,
    },
}

impl fmt::Display for RedisCoordinatorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisCoordinatorError::Connect { source } => {
                write!(f, "cannot connect to the fleet's Redis: {source}")
            }
            RedisCoordinatorError::Command { operation, source } => {
                write!(f, "fleet coordinator: Redis {operation} failed: {source}")
            }
            RedisCoordinatorError::Malformed { what } => {
                write!(f, "fleet coordinator: malformed data in Redis: {what}")
            }
            RedisCoordinatorError::EvictionPolicy { policy } => write!(
                f,
                "the Redis server's maxmemory-policy {policy:?} may evict the fleet's keys \
                 (its leases carry a time to live), which would let writers stop waiting \
                 for live members; configure `noeviction` (or opt in with \
                 `allow_eviction(true)`)"
            ),
            RedisCoordinatorError::FleetName { name } => write!(
                f,
                "the fleet name {name:?} must be non-empty and must not start with `}}`"
            ),
        }
    }
}

impl std::error::Error for RedisCoordinatorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RedisCoordinatorError::Connect { source }
            | RedisCoordinatorError::Command { source, .. } => Some(source),
            RedisCoordinatorError::Malformed { .. }
            | RedisCoordinatorError::EvictionPolicy { .. }
            | RedisCoordinatorError::FleetName { .. } => None,
        }
    }
}

fn command(operation: &'static str) -> impl FnOnce(redis::RedisError) -> RedisCoordinatorError {
    move |source| RedisCoordinatorError::Command { operation, source }
}

fn malformed(what: impl Into<String>) -> RedisCoordinatorError {
    RedisCoordinatorError::Malformed { what: what.into() }
}

/// Configures and connects a [`RedisCoordinator`].
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use cuckoo_guard::fleet::RedisCoordinator;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let coordinator = RedisCoordinator::builder("redis://127.0.0.1:6379", "users")
///     .hold(Duration::from_secs(10))
///     .response_timeout(Duration::from_secs(1))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until `.connect()` is called"]
pub struct RedisCoordinatorBuilder {
    url: String,
    name: String,
    hold: Duration,
    response_timeout: Duration,
    allow_eviction: bool,
}

/// Leaves out the URL, which may hold a password.
impl fmt::Debug for RedisCoordinatorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCoordinatorBuilder")
            .field("url", &"<redacted>")
            .field("name", &self.name)
            .field("hold", &self.hold)
            .field("response_timeout", &self.response_timeout)
            .field("allow_eviction", &self.allow_eviction)
            .finish()
    }
}

impl RedisCoordinatorBuilder {
    /// How long writers hold creates after the coordinator's state is created (a new
    /// fleet, or one whose data was lost; see
    /// [`RedisCoordinator`](RedisCoordinator#a-new-coordinator-state)); default 6 s. Make it
    /// at least twice the fleet's [lease](super::FleetConfig::lease).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use cuckoo_guard::fleet::RedisCoordinator;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let coordinator = RedisCoordinator::builder("redis://127.0.0.1:6379", "users")
    ///     .hold(Duration::from_secs(2 * 5))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// How long a call (other than [`read`](Coordinator::read), whose connection waits its
    /// `wait` plus 2 s) waits for the server's reply; default 2 s.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use cuckoo_guard::fleet::RedisCoordinator;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let coordinator = RedisCoordinator::builder("redis://127.0.0.1:6379", "users")
    ///     .response_timeout(Duration::from_millis(500))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Connect even if the server's `maxmemory-policy` may evict keys (anything but
    /// `noeviction`); default `false`, which refuses such a server with
    /// [`RedisCoordinatorError::EvictionPolicy`]. An evicted lease makes writers stop
    /// waiting for a live member after one lease; an evicted log or member entry loses
    /// announcements.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use cuckoo_guard::fleet::RedisCoordinator;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let coordinator = RedisCoordinator::builder("redis://127.0.0.1:6379", "users")
    ///     .allow_eviction(true)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// Connects to the server and checks its `maxmemory-policy` (`CONFIG GET`; a server
    /// that does not answer it cannot be checked, and
    /// [`eviction_policy`](RedisCoordinator::eviction_policy) is then `None`).
    ///
    /// # Errors
    ///
    /// [`RedisCoordinatorError::FleetName`] for an empty name or one starting with `}`;
    /// [`RedisCoordinatorError::Connect`] if the URL is invalid or the server cannot be
    /// reached; [`RedisCoordinatorError::EvictionPolicy`] if the server may evict keys and
    /// [`allow_eviction`](Self::allow_eviction) did not opt in.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use cuckoo_guard::fleet::RedisCoordinator;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let coordinator = RedisCoordinator::builder("redis://127.0.0.1:6379", "users")
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(self) -> Result<RedisCoordinator, RedisCoordinatorError> {
        if self.name.is_empty() || self.name.starts_with('}') {
            return Err(RedisCoordinatorError::FleetName { name: self.name });
        }
        let connect = |source| RedisCoordinatorError::Connect { source };
        let client = redis::Client::open(self.url.as_str()).map_err(connect)?;
        let mut connection = ConnectionManager::new_with_config(
            client.clone(),
            manager_config(self.response_timeout),
        )
        .await
        .map_err(connect)?;
        let eviction_policy = eviction_policy(&mut connection)
            .await
            .map_err(|source| RedisCoordinatorError::Connect { source })?;
        if let Some(policy) = &eviction_policy {
            if !self.allow_eviction && !policy.eq_ignore_ascii_case("noeviction") {
                return Err(RedisCoordinatorError::EvictionPolicy {
                    policy: policy.clone(),
                });
            }
        }
        let prefix = format!("cuckoo-guard:{{{}}}", self.name);
        let key = |suffix: &str| format!("{prefix}:{suffix}");
        let keys = Keys {
            log: key("log"),
            acks: key("acks"),
            members: key("members"),
            renewals: key("renewals"),
            acked: key("acked"),
            inflight: key("inflight"),
            trimmed: key("trimmed"),
            epoch: key("epoch"),
            hold: key("hold"),
            seals: key("seals"),
            born: key("born"),
            lease: key("lease:"),
            prefix,
        };
        let with_info = |body: &str| Script::new(&format!("{HELPERS}{STREAM_INFO}{body}"));
        let with_helpers = |body: &str| Script::new(&format!("{HELPERS}{body}"));
        let scripts = Scripts {
            info: with_info(INFO),
            register: with_info(REGISTER),
            renew: Script::new(RENEW),
            leave: Script::new(LEAVE),
            expel: Script::new(EXPEL),
            announce_create: with_helpers(ANNOUNCE_CREATE),
            ack: Script::new(ACK),
            members: Script::new(MEMBERS),
            trim: with_helpers(TRIM),
            put_seal: with_helpers(PUT_SEAL),
            peek_seal: with_helpers(PEEK_SEAL),
            in_flight_of: Script::new(IN_FLIGHT_OF),
        };
        Ok(RedisCoordinator {
            shared: Arc::new(Shared {
                name: self.name,
                keys,
                scripts,
                client,
                eviction_policy,
                hold: self.hold,
                readers: Mutex::new(Vec::new()),
            }),
            connection,
        })
    }
}

/// How the coordinator's connection manager replaces a broken connection: up to 3 attempts,
/// 1 s each, with jittered exponential delays from 50 ms up to 500 ms between them, after
/// which the call fails (the member fails open) and the next call starts again.
fn manager_config(response_timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_number_of_retries(3)
        .set_min_delay(Duration::from_millis(50))
        .set_exponent_base(2.0)
        .set_max_delay(Duration::from_millis(500))
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(response_timeout))
}

/// The fleet's key names (see [`RedisCoordinator`]).
struct Keys {
    prefix: String,
    log: String,
    acks: String,
    members: String,
    renewals: String,
    acked: String,
    inflight: String,
    trimmed: String,
    epoch: String,
    hold: String,
    seals: String,
    born: String,
    /// `p:lease:`, the leases' common prefix.
    lease: String,
}

impl Keys {
    fn lease(&self, member: MemberId) -> String {
        format!("{}{}", self.lease, member.0)
    }
}

struct Scripts {
    info: Script,
    register: Script,
    renew: Script,
    leave: Script,
    expel: Script,
    announce_create: Script,
    ack: Script,
    members: Script,
    trim: Script,
    put_seal: Script,
    peek_seal: Script,
    in_flight_of: Script,
}

struct Shared {
    name: String,
    keys: Keys,
    scripts: Scripts,
    client: redis::Client,
    eviction_policy: Option<String>,
    hold: Duration,
    /// Idle connections for [`Coordinator::read`]'s blocking reads: a read takes one (or
    /// opens one) and puts it back only if its read completed without error, so a connection
    /// left blocked by a dropped or failed read is closed, never reused.
    readers: Mutex<Vec<MultiplexedConnection>>,
}

/// A fleet's [`Coordinator`] in Redis: the log is a stream, leases are keys with a time to
/// live, and every atomic step is a Lua script (the layout and the atomicity of each step
/// are [below](#layout)). Clones share the connections.
///
/// # Layout
///
/// Every key of the fleet `name` starts with `p = cuckoo-guard:{name}`, so the hash tag
/// `{name}` puts them all in one cluster slot and every script may touch any of them:
///
/// | key | type | holds |
/// |---|---|---|
/// | `p:log` | stream | the log (ids from `XADD *`; fields below) |
/// | `p:acks` | stream | the acknowledgement feed (`MAXLEN ~ 10000`; fields below) |
/// | `p:members` | hash | registered member id → its instance id |
/// | `p:lease:<member>` | string | a member's lease, with a `PX` time to live |
/// | `p:renewals` | hash | member id → how many times its lease was renewed |
/// | `p:acked` | hash | member id → the position it acknowledged last |
/// | `p:inflight` | hash | position → key bytes of each create announced and not yet ended |
/// | `p:trimmed` | string | the greatest position [`trim`](Coordinator::trim) removed |
/// | `p:epoch` | string | a random value, present while the coordinator's state exists |
/// | `p:hold` | string | present (with a `PX` time to live) while creates are held |
/// | `p:born` | string | the epoch and when that state began, in ms of the server's clock (`TIME`): `<epoch> <ms>` |
/// | `p:seals` | hash | seal id (decimal) → a sealed snapshot's record, below |
///
/// A log entry's fields: `o` (`c` create, `d` delete), `k` (the key's bytes), `i` (the origin
/// [`InstanceId`], decimal) and, for deletes only, `a` (their `after` position, `ms-seq`). An
/// acknowledgement's: `m` (the member id, decimal) and `p` (the position).
///
/// A seal record ([`put_seal`](Coordinator::put_seal)) is one string:
/// `v1 <applied> <expiry> <instance> <scanned_at or -> <secret, hex> <state>`, the expiry in
/// milliseconds of the server's clock (`TIME`). [`trim`](Coordinator::trim) removes
/// expired records; a held one keeps the log from being trimmed past its `applied`.
///
/// "The top" is the log's `last-generated-id` (`XINFO STREAM`), not its last existing entry:
/// a trim may have removed every entry, and the next `XADD` still returns a greater id.
///
/// The acknowledgement feed only wakes waiting writers: a reader further behind than its
/// last 10,000 entries misses the older ones, and `p:acked` (read by
/// [`members`](Coordinator::members)) holds each member's latest position.
///
/// # Atomicity
///
/// Each method is one command or one Lua script, and Redis runs a script with nothing else
/// interleaved:
///
/// - **register** creates the epoch (and the hold) if missing, removes the previous
///   registration, adds the new member with its lease, and reads the top and the in-flight
///   keys: a create announced later is appended after this top and finds the member
///   registered ([fleet.M5]); a create announced earlier is either below the top or, if its
///   write has not ended, among the in-flight keys. A kept previous registration hands its
///   acknowledged position over in the same step, so no trim can fall between the two.
/// - **announce_create** appends the entry, records it in flight and reads the members in
///   one step: a member registered after the step sees the entry's key in flight or gets a
///   top past it ([fleet.M2]).
/// - **renew** extends the lease only if it exists (`PEXPIRE` on a missing key does
///   nothing) and counts the renewal in the same step, so a lapsed lease is never recreated
///   and a writer that saw the count unchanged saw no renewal ([fleet.M1]).
/// - **expel** removes a member only if its lease key is gone, checked in the same step.
/// - **ack** records the position only for a registered member (so an expelled member's
///   late acknowledgement cannot hold back trimming again), and publishes it to the feed.
/// - **members** reads every asked member's registration, lease, renewals and position in
///   one step.
/// - **trim** reads the registered members' positions and trims below the lowest in one step,
///   so a member registering concurrently (whose position starts at the top) or handing over
///   a kept position is either counted or registered after the trim ([fleet.M6]). It records
///   the greatest position it removed in `p:trimmed`.
/// - **put_seal** holds the record only if the member is still registered and the epoch is
///   the record's, checked in the same step.
/// - **register_sealed** is register that also takes the seal's record (removes it, so a
///   second restart from the same file finds none) and, if it is unexpired and its position
///   is not past the top, starts the member's acknowledged position there: no trim passes it
///   before the member catches up.
/// - **top** and **trimmed_after** read `XINFO STREAM` (and `p:trimmed`) in one step.
///
/// # A new coordinator state
///
/// The first registration on a coordinator without an epoch (a new fleet, or a server whose
/// data was lost: restarted without persistence, failed over to a replica that lacked it)
/// creates the epoch and a hold that lasts the builder's
/// [`hold`](RedisCoordinatorBuilder::hold) (6 s by default). While the hold lives,
/// [`announce_create`](Coordinator::announce_create) reports its remaining time and writers
/// hold their creates: members registered in the lost state may still answer "absent" until
/// their deadlines pass, and they no longer appear among the members a writer waits for
/// ([fleet.M7]). The hold must be at least two leases.
///
/// Only a state without an epoch is new. A failover to a replica that holds the epoch but
/// lacks the latest writes (replication is asynchronous) starts no hold: a lost renewal is
/// covered by the writers' own wait ([fleet.M2]: a lease gone *and* its renewals unchanged
/// for a lease on the writer's clock), and a log whose ids went backwards shows in
/// [`trimmed_after`](Coordinator::trimmed_after).
///
/// # Connections
///
/// Calls other than [`read`](Coordinator::read) share one multiplexed connection, replaced
/// when it breaks (a [`ConnectionManager`]), and fail after the builder's
/// [`response_timeout`](RedisCoordinatorBuilder::response_timeout). Reads block on the server
/// (`XREAD BLOCK`), which a connection cannot do while serving other commands, so each
/// runs on a connection of its own whose reply timeout is the read's wait plus 2 s; such
/// connections are opened when needed and closed after an error.
///
/// # What Redis must be configured with
///
/// `maxmemory-policy noeviction` (checked at connect, see
/// [`allow_eviction`](RedisCoordinatorBuilder::allow_eviction)), and persistence that
/// matches what a lost state costs: after a loss the fleet rejoins and rebuilds, and writers
/// hold creates for the builder's [`hold`](RedisCoordinatorBuilder::hold). On Redis Cluster
/// all the keys share the slot of the hash tag `{name}`. Redis 7 or later (`XINFO STREAM`'s
/// `last-generated-id` and `max-deleted-entry-id`, `XREVRANGE` with exclusive bounds).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use cuckoo_guard::fleet::{Coordinator, InstanceId, RedisCoordinator};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let coordinator = RedisCoordinator::builder("redis://127.0.0.1:6379", "users")
///     .connect()
///     .await?;
/// let registration = coordinator
///     .register(InstanceId(7), None, Duration::from_secs(3))
///     .await?;
/// let announced = coordinator.announce_create(InstanceId(7), b"alice").await?;
/// assert!(announced.position > registration.top);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisCoordinator {
    shared: Arc<Shared>,
    connection: ConnectionManager,
}

impl fmt::Debug for RedisCoordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCoordinator")
            .field("name", &self.shared.name)
            .field("prefix", &self.shared.keys.prefix)
            .field("hold", &self.shared.hold)
            .field("eviction_policy", &self.shared.eviction_policy)
            .finish_non_exhaustive()
    }
}

impl RedisCoordinator {
    /// A builder for the coordinator of the fleet `name` at `url` (`redis://host:port/db`),
    /// using the keys `cuckoo-guard:{name}:*`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cuckoo_guard::fleet::RedisCoordinator;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let coordinator = RedisCoordinator::builder("redis://127.0.0.1:6379", "users")
    ///     .connect()
    ///     .await?;
    /// assert_eq!(coordinator.key_prefix(), "cuckoo-guard:{users}");
    /// # Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>, name: impl Into<String>) -> RedisCoordinatorBuilder {
        RedisCoordinatorBuilder {
            url: url.into(),
            name: name.into(),
            hold: Duration::from_secs(6),
            response_timeout: Duration::from_secs(2),
            allow_eviction: false,
        }
    }

    /// The fleet's name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use cuckoo_guard::fleet::RedisCoordinator;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let coordinator = RedisCoordinator::builder("redis://127.0.0.1", "users").connect().await?;
    /// assert_eq!(coordinator.name(), "users");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The prefix of every key of the fleet, `cuckoo-guard:{name}` (see
    /// [the layout](RedisCoordinator#layout)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use cuckoo_guard::fleet::RedisCoordinator;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let coordinator = RedisCoordinator::builder("redis://127.0.0.1", "users").connect().await?;
    /// let log = format!("{}:log", coordinator.key_prefix());
    /// # let _ = log;
    /// # Ok(()) }
    /// ```
    pub fn key_prefix(&self) -> &str {
        &self.shared.keys.prefix
    }

    /// The server's `maxmemory-policy` as read at connect, or `None` if it did not answer
    /// `CONFIG GET`, so the coordinator could not check that its keys are never evicted.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use cuckoo_guard::fleet::RedisCoordinator;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let coordinator = RedisCoordinator::builder("redis://127.0.0.1", "users").connect().await?;
    /// if coordinator.eviction_policy().is_none() {
    ///     eprintln!("warning: cannot check Redis's maxmemory-policy; it must be noeviction");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn eviction_policy(&self) -> Option<&str> {
        self.shared.eviction_policy.as_deref()
    }

    fn connection(&self) -> ConnectionManager {
        self.connection.clone()
    }

    fn keys(&self) -> &Keys {
        &self.shared.keys
    }

    /// Runs `script` (`leave` or `expel`) over `member`'s lease, the members, renewals and
    /// acknowledgements, with the member as its one argument.
    async fn member_script(
        &self,
        script: &Script,
        member: MemberId,
        operation: &'static str,
    ) -> Result<i64, RedisCoordinatorError> {
        let keys = self.keys();
        script
            .key(keys.lease(member))
            .key(&keys.members)
            .key(&keys.renewals)
            .key(&keys.acked)
            .arg(member.0)
            .invoke_async(&mut self.connection())
            .await
            .map_err(command(operation))
    }

    /// [`Coordinator::register`], also taking the record of the seal `seal` if given.
    async fn register_with(
        &self,
        instance: InstanceId,
        previous: Option<MemberId>,
        seal: Option<u64>,
        lease: Duration,
    ) -> Result<(Registration, Option<String>), RedisCoordinatorError> {
        let keys = self.keys();

        let member = MemberId(random_u64());
        let mut invocation = self.shared.scripts.register.prepare_invoke();
        invocation
            .key(&keys.members)
            .key(&keys.renewals)
            .key(&keys.acked)
            .key(&keys.inflight)
            .key(&keys.epoch)
            .key(&keys.hold)
            .key(&keys.log)
            .key(&keys.trimmed)
            .key(keys.lease(member))
            .key(&keys.seals)
            .key(&keys.born);
        if let Some(previous) = previous {
            invocation.key(keys.lease(previous));
        }
        invocation
            .arg(member.0)
            .arg(instance.0)
            .arg(millis(lease, 1))
            .arg(previous.map(|p| p.0.to_string()).unwrap_or_default())
            .arg(format!("{:016x}", random_u64()))
            .arg(millis(self.shared.hold, 0))
            .arg(seal.map(|id| id.to_string()).unwrap_or_default());
        type Reply = (String, Vec<Vec<u8>>, i64, String, i64, Option<String>, i64);
        let (top, in_flight, kept, state, fresh, sealed, age): Reply = invocation
            .invoke_async(&mut self.connection())
            .await
            .map_err(command("register"))?;
        let registration = Registration {
            member,
            top: position(&top, "the log's last-generated-id")?,
            in_flight,
            previous_kept: kept == 1,
            state,
            fresh_state: fresh == 1,
            state_age: Duration::from_millis(u64::try_from(age).unwrap_or(0)),
        };
        Ok((registration, sealed))
    }

    /// `{exists, top, max_deleted, trimmed}` of the log, in one step.
    async fn stream_info(
        &self,
        operation: &'static str,
    ) -> Result<(bool, Position, Position, Position), RedisCoordinatorError> {
        let keys = self.keys();
        let (exists, top, deleted, trimmed): (i64, String, String, String) = self
            .shared
            .scripts
            .info
            .key(&keys.log)
            .key(&keys.trimmed)
            .invoke_async(&mut self.connection())
            .await
            .map_err(command(operation))?;
        Ok((
            exists == 1,
            position(&top, "the log's last-generated-id")?,
            position(&deleted, "the log's max-deleted-entry-id")?,
            position(&trimmed, "the trimmed position")?,
        ))
    }

    /// A connection for a blocking read: an idle one, or a new one.
    async fn reader(&self) -> Result<MultiplexedConnection, RedisCoordinatorError> {
        let idle = self
            .shared
            .readers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop();
        match idle {
            Some(connection) => Ok(connection),
            None => self
                .shared
                .client
                .get_multiplexed_async_connection_with_config(
                    &AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(Duration::from_secs(1))),
                )
                .await
                .map_err(command("read (connect)")),
        }
    }

    fn reader_done(&self, connection: MultiplexedConnection) {
        let mut idle = self
            .shared
            .readers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if idle.len() < READ_POOL {
            idle.push(connection);
        }
    }
}

/// A duration in whole milliseconds, at least `floor`.
fn millis(duration: Duration, floor: u64) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(floor)
}

fn position(text: &str, what: &str) -> Result<Position, RedisCoordinatorError> {
    text.parse()
        .map_err(|_| malformed(format!("{what} {text:?} is not a position (ms-seq)")))
}

fn member_id(text: &str, what: &str) -> Result<MemberId, RedisCoordinatorError> {
    text.parse()
        .map(MemberId)
        .map_err(|_| malformed(format!("{what} {text:?} is not a member id")))
}

/// A random id: the OS's generator, or ahash's randomly seeded hasher if that fails.
/// `bytes` as lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A seal record's text (see [`RedisCoordinator`]'s layout), parsed.
fn seal_record(text: &str) -> Result<SealRecord, RedisCoordinatorError> {
    // The text holds the secret: it stays out of the error.
    let bad = || malformed("a seal record");
    let fields: Vec<&str> = text.split(' ').collect();
    let [version, applied, _expiry, instance, scanned_at, secret, state] = fields[..] else {
        return Err(bad());
    };
    if version != "v1" || secret.len() != 2 * SEAL_SECRET_LEN || !secret.is_ascii() {
        return Err(bad());
    }
    let mut bytes = [0u8; SEAL_SECRET_LEN];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&secret[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(SealRecord::new(
        SealSecret::from_bytes(bytes),
        InstanceId(instance.parse().map_err(|_| bad())?),
        state.to_owned(),
        position(applied, "a seal record's position")?,
        match scanned_at {
            "-" => None,
            at => Some(position(at, "a seal record's scan position")?),
        },
    ))
}

fn random_u64() -> u64 {
    getrandom::u64()
        .unwrap_or_else(|_| ahash::RandomState::new().hash_one(std::time::SystemTime::now()))
}

/// The bytes of a string reply.
fn bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(text) => Some(text.as_bytes()),
        Value::VerbatimString { text, .. } => Some(text.as_bytes()),
        _ => None,
    }
}

fn text<'a>(value: &'a Value, what: &str) -> Result<&'a str, RedisCoordinatorError> {
    bytes(value)
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .ok_or_else(|| malformed(format!("{what}: expected a string, got {value:?}")))
}

/// An entry's fields: name and value.
type Fields<'a> = Vec<(&'a [u8], &'a Value)>;

/// A stream's entries in a reply: `[[id, [field, value, ...]], ...]`.
fn stream_entries(value: &Value) -> Result<Vec<(Position, Fields<'_>)>, RedisCoordinatorError> {
    let Value::Array(entries) = value else {
        return Err(malformed(format!("XREAD: expected entries, got {value:?}")));
    };
    entries
        .iter()
        .map(|entry| {
            let Value::Array(parts) = entry else {
                return Err(malformed(format!(
                    "XREAD: expected an entry, got {entry:?}"
                )));
            };
            let [id, fields] = parts.as_slice() else {
                return Err(malformed(format!(
                    "XREAD: expected an entry, got {entry:?}"
                )));
            };
            let id = position(text(id, "an entry's id")?, "an entry's id")?;
            let fields = match fields {
                Value::Array(flat) if flat.len() % 2 == 0 => flat
                    .chunks(2)
                    .map(|pair| {
                        bytes(&pair[0]).map(|name| (name, &pair[1])).ok_or_else(|| {
                            malformed(format!("entry {id}: a field name {:?}", pair[0]))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                Value::Map(pairs) => pairs
                    .iter()
                    .map(|(name, value)| {
                        bytes(name)
                            .map(|name| (name, value))
                            .ok_or_else(|| malformed(format!("entry {id}: a field name {name:?}")))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                other => return Err(malformed(format!("entry {id}: fields {other:?}"))),
            };
            Ok((id, fields))
        })
        .collect()
}

fn field<'a>(
    fields: &[(&[u8], &'a Value)],
    name: &str,
    stream: &str,
    id: Position,
) -> Result<&'a Value, RedisCoordinatorError> {
    fields
        .iter()
        .find(|(field, _)| *field == name.as_bytes())
        .map(|(_, value)| *value)
        .ok_or_else(|| malformed(format!("{stream} entry {id} has no field {name:?}")))
}

/// A log entry from its fields.
fn log_entry(id: Position, fields: &[(&[u8], &Value)]) -> Result<Entry, RedisCoordinatorError> {
    let op = text(field(fields, "o", "log", id)?, "a log entry's op")?;
    let key = bytes(field(fields, "k", "log", id)?)
        .ok_or_else(|| malformed(format!("log entry {id}: the key is not a string")))?
        .to_vec();
    let origin = text(field(fields, "i", "log", id)?, "a log entry's origin")?;
    let origin = origin.parse().map(InstanceId).map_err(|_| {
        malformed(format!(
            "log entry {id}: origin {origin:?} is not an instance id"
        ))
    })?;
    let op = match op {
        "c" => Op::Create,
        "d" => Op::Delete {
            after: position(
                text(field(fields, "a", "log", id)?, "a delete's after")?,
                &format!("log entry {id}'s after"),
            )?,
        },
        other => return Err(malformed(format!("log entry {id}: unknown op {other:?}"))),
    };
    Ok(Entry {
        position: id,
        origin,
        op,
        key,
    })
}

/// The batch in an `XREAD` reply over the log and the acknowledgement feed.
fn batch(reply: &Value, keys: &Keys, acks_after: Position) -> Result<Batch, RedisCoordinatorError> {
    let mut batch = Batch {
        acks_cursor: acks_after,
        ..Batch::default()
    };
    let streams: Vec<(&Value, &Value)> = match reply {
        Value::Nil => Vec::new(),
        Value::Map(pairs) => pairs
            .iter()
            .map(|(name, entries)| (name, entries))
            .collect(),
        Value::Array(streams) => streams
            .iter()
            .map(|stream| match stream {
                Value::Array(parts) if parts.len() == 2 => Ok((&parts[0], &parts[1])),
                other => Err(malformed(format!(
                    "XREAD: expected a stream, got {other:?}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        other => return Err(malformed(format!("XREAD: unexpected reply {other:?}"))),
    };
    for (name, entries) in streams {
        let name = bytes(name).unwrap_or_default();
        if name == keys.log.as_bytes() {
            for (id, fields) in stream_entries(entries)? {
                batch.entries.push(log_entry(id, &fields)?);
            }
        } else if name == keys.acks.as_bytes() {
            for (id, fields) in stream_entries(entries)? {
                let member = member_id(
                    text(field(&fields, "m", "acks", id)?, "an ack's member")?,
                    &format!("ack {id}'s member"),
                )?;
                let acked = position(
                    text(field(&fields, "p", "acks", id)?, "an ack's position")?,
                    &format!("ack {id}'s position"),
                )?;
                batch.acks.push((member, acked));
                batch.acks_cursor = id;
            }
        } else {
            return Err(malformed(format!(
                "XREAD returned the stream {:?}, which was not asked",
                String::from_utf8_lossy(name)
            )));
        }
    }
    Ok(batch)
}

impl Coordinator for RedisCoordinator {
    type Error = RedisCoordinatorError;

    async fn register(
        &self,
        instance: InstanceId,
        previous: Option<MemberId>,
        lease: Duration,
    ) -> Result<Registration, RedisCoordinatorError> {
        self.register_with(instance, previous, None, lease)
            .await
            .map(|(registration, _)| registration)
    }

    async fn register_sealed(
        &self,
        instance: InstanceId,
        seal: u64,
        lease: Duration,
    ) -> Result<(Registration, Option<SealRecord>), RedisCoordinatorError> {
        let (registration, record) = self
            .register_with(instance, None, Some(seal), lease)
            .await?;
        let record = match record {
            Some(text) => Some(seal_record(&text)?),
            None => None,
        };
        Ok((registration, record))
    }

    async fn put_seal(
        &self,
        member: MemberId,
        record: &SealRecord,
        hold: Duration,
    ) -> Result<bool, RedisCoordinatorError> {
        let scanned_at = record
            .scanned_at
            .map_or_else(|| String::from("-"), |p| p.to_string());
        let rest = format!(
            "{} {} {} {}",
            record.instance.0,
            scanned_at,
            hex(record.secret.as_bytes()),
            record.state
        );
        let keys = self.keys();
        let held: i64 = self
            .shared
            .scripts
            .put_seal
            .key(&keys.seals)
            .key(&keys.members)
            .key(&keys.epoch)
            .arg(record.secret.id())
            .arg(record.applied.to_string())
            .arg(millis(hold, 1))
            .arg(rest)
            .arg(member.0)
            .arg(&record.state)
            .invoke_async(&mut self.connection())
            .await
            .map_err(command("hold a seal"))?;
        Ok(held == 1)
    }

    async fn peek_seal(&self, seal: u64) -> Result<Option<SealRecord>, RedisCoordinatorError> {
        let text: Option<String> = self
            .shared
            .scripts
            .peek_seal
            .key(&self.keys().seals)
            .arg(seal)
            .invoke_async(&mut self.connection())
            .await
            .map_err(command("read a seal"))?;
        text.as_deref().map(seal_record).transpose()
    }

    async fn renew(
        &self,
        member: MemberId,
        lease: Duration,
    ) -> Result<bool, RedisCoordinatorError> {
        let keys = self.keys();
        let renewed: i64 = self
            .shared
            .scripts
            .renew
            .key(keys.lease(member))
            .key(&keys.renewals)
            .arg(member.0)
            .arg(millis(lease, 1))
            .invoke_async(&mut self.connection())
            .await
            .map_err(command("renew"))?;
        Ok(renewed == 1)
    }

    async fn leave(&self, member: MemberId) -> Result<(), RedisCoordinatorError> {
        self.member_script(&self.shared.scripts.leave, member, "leave")
            .await
            .map(drop)
    }

    async fn expel(&self, member: MemberId) -> Result<bool, RedisCoordinatorError> {
        let removed = self
            .member_script(&self.shared.scripts.expel, member, "expel")
            .await?;
        Ok(removed == 1)
    }

    async fn announce_create(
        &self,
        origin: InstanceId,
        key: &[u8],
    ) -> Result<Announced, RedisCoordinatorError> {
        let keys = self.keys();
        let (id, members, hold, state): (String, Vec<String>, i64, String) = self
            .shared
            .scripts
            .announce_create
            .key(&keys.log)
            .key(&keys.inflight)
            .key(&keys.members)
            .key(&keys.hold)
            .key(&keys.epoch)
            .key(&keys.born)
            .arg(key)
            .arg(origin.0)
            .arg(format!("{:016x}", random_u64()))
            .arg(millis(self.shared.hold, 0))
            .invoke_async(&mut self.connection())
            .await
            .map_err(command("announce a create"))?;
        Ok(Announced {
            position: position(&id, "a create's position")?,
            members: members
                .iter()
                .map(|member| member_id(member, "a registered member"))
                .collect::<Result<_, _>>()?,
            // PTTL: -2 without the key, -1 without a time to live (which the hold never is).
            hold: Duration::from_millis(u64::try_from(hold).unwrap_or(0)),
            state,
        })
    }

    async fn create_ended(&self, position: Position) -> Result<(), RedisCoordinatorError> {
        redis::cmd("HDEL")
            .arg(&self.keys().inflight)
            .arg(position.to_string())
            .query_async::<i64>(&mut self.connection())
            .await
            .map_err(command("end a create"))?;
        Ok(())
    }

    async fn announce_delete(
        &self,
        origin: InstanceId,
        key: &[u8],
        after: Position,
    ) -> Result<Position, RedisCoordinatorError> {
        let id: String = redis::cmd("XADD")
            .arg(&self.keys().log)
            .arg("*")
            .arg("o")
            .arg("d")
            .arg("k")
            .arg(key)
            .arg("i")
            .arg(origin.0)
            .arg("a")
            .arg(after.to_string())
            .query_async(&mut self.connection())
            .await
            .map_err(command("announce a delete"))?;
        position(&id, "a delete's position")
    }

    /// `XREAD COUNT max [BLOCK wait] STREAMS log acks after acks_after` on a connection of
    /// its own (see [`RedisCoordinator`]). `max` bounds each stream's entries. A zero `wait`
    /// does not block. An entry without its fields is an error
    /// ([`RedisCoordinatorError::Malformed`]): the member fails open rather than skip it.
    async fn read(
        &self,
        after: Position,
        acks_after: Position,
        max: usize,
        wait: Duration,
    ) -> Result<Batch, RedisCoordinatorError> {
        let keys = self.keys();
        let mut read = redis::cmd("XREAD");
        read.arg("COUNT").arg(max.max(1));
        // Whole milliseconds, rounded up (`BLOCK 0` would wait for ever), at most ~49 days.
        let block =
            millis(wait.saturating_add(Duration::from_nanos(999_999)), 0).min(u64::from(u32::MAX));
        if block > 0 {
            read.arg("BLOCK").arg(block);
        }
        read.arg("STREAMS")
            .arg(&keys.log)
            .arg(&keys.acks)
            .arg(after.to_string())
            .arg(acks_after.to_string());
        let mut connection = self.reader().await?;
        connection.set_response_timeout(wait.saturating_add(READ_SLACK));
        let reply: Value = read
            .query_async(&mut connection)
            .await
            .map_err(command("read"))?;
        let mut batch = batch(&reply, keys, acks_after)?;
        if !batch.entries.is_empty() {
            // After the entries: a state read here that is the member's was the state when
            // they were read (a lost state does not come back).
            let state: Option<String> = redis::cmd("GET")
                .arg(&keys.epoch)
                .query_async(&mut connection)
                .await
                .map_err(command("read the state"))?;
            batch.state = Some(state.unwrap_or_default());
        }
        self.reader_done(connection);
        Ok(batch)
    }

    async fn ack(&self, member: MemberId, position: Position) -> Result<(), RedisCoordinatorError> {
        let keys = self.keys();
        let _: i64 = self
            .shared
            .scripts
            .ack
            .key(&keys.members)
            .key(&keys.acked)
            .key(&keys.acks)
            .arg(member.0)
            .arg(position.to_string())
            .arg(ACKS_KEPT)
            .invoke_async(&mut self.connection())
            .await
            .map_err(command("acknowledge"))?;
        Ok(())
    }

    async fn members(&self, members: &[MemberId]) -> Result<MemberStates, RedisCoordinatorError> {
        let keys = self.keys();
        let mut invocation = self.shared.scripts.members.prepare_invoke();
        invocation
            .key(&keys.members)
            .key(&keys.renewals)
            .key(&keys.acked)
            .key(&keys.epoch);
        for &member in members {
            invocation.key(keys.lease(member));
        }
        for member in members {
            invocation.arg(member.0);
        }
        let values: Vec<Value> = invocation
            .invoke_async(&mut self.connection())
            .await
            .map_err(command("read the members"))?;
        let Some((state, values)) = values.split_first() else {
            return Err(malformed(String::from(
                "the members script returned nothing",
            )));
        };
        let state = match state {
            Value::Nil | Value::Boolean(false) => String::new(),
            value => text(value, "the coordinator state's id")?.to_owned(),
        };
        if values.len() != members.len() * 4 {
            return Err(malformed(format!(
                "the members script returned {} values for {} members",
                values.len(),
                members.len()
            )));
        }
        // A Lua `false` (a missing field) is a null in RESP2 and may be a boolean in RESP3.
        let flag = |value: &Value| matches!(value, Value::Int(1) | Value::Boolean(true));
        let members = members
            .iter()
            .zip(values.chunks(4))
            .map(|(&member, state)| {
                let renewals = match &state[2] {
                    Value::Nil | Value::Boolean(false) => 0,
                    value => {
                        let count = text(value, "a renewal count")?;
                        count.parse().map_err(|_| {
                            malformed(format!("member {}: renewal count {count:?}", member.0))
                        })?
                    }
                };
                let acked = match &state[3] {
                    Value::Nil | Value::Boolean(false) => Position::ZERO,
                    value => position(
                        text(value, "an acknowledged position")?,
                        &format!("member {}'s acknowledged position", member.0),
                    )?,
                };
                Ok(MemberState {
                    member,
                    registered: flag(&state[0]),
                    lease_live: flag(&state[1]),
                    renewals,
                    acked,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(MemberStates { state, members })
    }

    /// The log's `last-generated-id`: it survives a trim of every entry.
    async fn top(&self) -> Result<Position, RedisCoordinatorError> {
        Ok(self.stream_info("read the top").await?.1)
    }

    async fn in_flight(&self) -> Result<Vec<Vec<u8>>, RedisCoordinatorError> {
        redis::cmd("HVALS")
            .arg(&self.keys().inflight)
            .query_async(&mut self.connection())
            .await
            .map_err(command("read the creates in flight"))
    }

    async fn in_flight_of(
        &self,
        state: &str,
    ) -> Result<Option<Vec<Vec<u8>>>, RedisCoordinatorError> {
        let keys = self.keys();
        self.shared
            .scripts
            .in_flight_of
            .key(&keys.epoch)
            .key(&keys.inflight)
            .arg(state)
            .invoke_async(&mut self.connection())
            .await
            .map_err(command("read the creates in flight"))
    }

    /// True if [`trim`](Coordinator::trim) removed an entry past `after` (it records the
    /// greatest position it removed: Redis's own `max-deleted-entry-id` does not count
    /// trims), if something deleted one (`XDEL`: `max-deleted-entry-id`), if the log's
    /// `last-generated-id` is below `after` (the log was replaced), or if the log is gone
    /// and `after` is past [`Position::ZERO`].
    async fn trimmed_after(&self, after: Position) -> Result<bool, RedisCoordinatorError> {
        let (exists, top, deleted, trimmed) = self.stream_info("check for a trim").await?;
        Ok(trimmed > after
            || deleted > after
            || (exists && top < after)
            || (!exists && after > Position::ZERO))
    }

    async fn trim(&self) -> Result<u64, RedisCoordinatorError> {
        let keys = self.keys();
        let removed: i64 = self
            .shared
            .scripts
            .trim
            .key(&keys.members)
            .key(&keys.acked)
            .key(&keys.log)
            .key(&keys.trimmed)
            .key(&keys.seals)
            .invoke_async(&mut self.connection())
            .await
            .map_err(command("trim the log"))?;
        Ok(u64::try_from(removed).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys {
            prefix: "p".into(),
            log: "p:log".into(),
            acks: "p:acks".into(),
            members: String::new(),
            renewals: String::new(),
            acked: String::new(),
            inflight: String::new(),
            trimmed: String::new(),
            epoch: String::new(),
            hold: String::new(),
            seals: String::new(),
            born: String::new(),
            lease: String::new(),
        }
    }

    fn s(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn entry(id: &str, fields: &[&str]) -> Value {
        Value::Array(vec![
            s(id),
            Value::Array(fields.iter().map(|f| s(f)).collect()),
        ])
    }

    #[test]
    fn a_reply_parses_into_entries_and_acks() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                s("p:log"),
                Value::Array(vec![
                    entry("5-0", &["o", "c", "k", "ada", "i", "7"]),
                    entry("6-1", &["o", "d", "k", "bob", "i", "8", "a", "5-0"]),
                ]),
            ]),
            Value::Array(vec![
                s("p:acks"),
                Value::Array(vec![entry("9-0", &["m", "3", "p", "6-1"])]),
            ]),
        ]);
        let batch = batch(&reply, &keys(), Position::ZERO).unwrap();
        assert_eq!(batch.entries.len(), 2);
        assert_eq!(batch.entries[0].op, Op::Create);
        assert_eq!(batch.entries[0].origin, InstanceId(7));
        assert_eq!(batch.entries[1].key, b"bob");
        assert_eq!(
            batch.entries[1].op,
            Op::Delete {
                after: Position { ms: 5, seq: 0 }
            }
        );
        assert_eq!(batch.acks, vec![(MemberId(3), Position { ms: 6, seq: 1 })]);
        assert_eq!(batch.acks_cursor, Position { ms: 9, seq: 0 });
    }

    #[test]
    fn malformed_entries_are_errors() {
        for fields in [
            &["o", "c", "k", "ada"][..],
            &["o", "x", "k", "ada", "i", "7"],
            &["o", "d", "k", "ada", "i", "7"],
            &["o", "c", "k", "ada", "i", "seven"],
        ] {
            let reply = Value::Array(vec![Value::Array(vec![
                s("p:log"),
                Value::Array(vec![entry("5-0", fields)]),
            ])]);
            assert!(
                matches!(
                    batch(&reply, &keys(), Position::ZERO),
                    Err(RedisCoordinatorError::Malformed { .. })
                ),
                "{fields:?}"
            );
        }
    }

    #[test]
    fn no_reply_keeps_the_cursor() {
        let cursor = Position { ms: 4, seq: 2 };
        let batch = batch(&Value::Nil, &keys(), cursor).unwrap();
        assert!(batch.entries.is_empty() && batch.acks.is_empty());
        assert_eq!(batch.acks_cursor, cursor);
    }
}
