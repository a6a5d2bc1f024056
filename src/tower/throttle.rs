//! Answering the attacker: a [`Throttle`] on a [`GuardLayer`](super::GuardLayer) counts, per
//! client, the requests the filter answered and those it blocked, and answers a client whose
//! blocked share passes a threshold with `429 Too Many Requests` and `Retry-After` for a
//! cool-down, before the filter or the service is asked.
//!
//! Counts are kept per client key (the peer address, a header such as `X-Forwarded-For` or an
//! API key, or any closure: an [`ExtractKey`]) in a bounded cache (moka's, least recently
//! used out first), so an attacker who varies its client key evicts entries but cannot grow
//! memory. The share is measured over a window: a client is throttled once, within one window,
//! at least [`min_blocked`](Throttle::min_blocked) of its requests were blocked and they make
//! at least [`blocked_share`](Throttle::blocked_share) of its requests. A client whose keys all
//! exist is never blocked, so never throttled, whatever its rate.

use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::request::Parts;
use http::{HeaderValue, Response, StatusCode};

use super::ExtractKey;
use crate::sync::{AtomicU64, Ordering};

/// What a [`GuardLayer`](super::GuardLayer) does about the client of each request it checks:
/// nothing ([`NoThrottle`], the default), or a [`Throttle`].
pub trait Throttling<B> {
    /// The client a request's outcome is recorded for.
    type Ticket;

    /// Before the filter is asked: `Err` with the response for a client in its cool-down,
    /// else the ticket to [`record`](Self::record) the outcome with.
    fn screen(&self, parts: &Parts) -> Result<Self::Ticket, Response<B>>;

    /// After the filter answered: whether it blocked the request.
    fn record(&self, ticket: Self::Ticket, blocked: bool);
}

/// No throttling: every request goes on to the filter.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::tower::throttle::{NoThrottle, Throttling};
///
/// let parts = http::Request::new(()).into_parts().0;
/// assert!(Throttling::<()>::screen(&NoThrottle, &parts).is_ok());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct NoThrottle;

impl<B> Throttling<B> for NoThrottle {
    type Ticket = ();

    fn screen(&self, _: &Parts) -> Result<(), Response<B>> {
        Ok(())
    }

    fn record(&self, (): (), _: bool) {}
}

/// Counts of a [`Throttle`], from [`Throttle::stats`].
///
/// # Examples
///
/// ```
/// use cuckoo_guard::tower::{key, throttle::Throttle};
///
/// let throttle = Throttle::new(key::header::<String>("x-api-key"));
/// assert_eq!(throttle.stats().throttled_requests, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ThrottleStats {
    /// Requests answered `429` because their client was in its cool-down.
    pub throttled_requests: u64,
    /// Times a client passed the threshold and began a cool-down.
    pub clients_throttled: u64,
}

/// A [`Throttle`] setting out of range.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::tower::{key, throttle::{Throttle, ThrottleError}};
///
/// let error = Throttle::new(key::header::<String>("x-api-key")).blocked_share(1.5).unwrap_err();
/// assert!(matches!(error, ThrottleError::BlockedShare(_)));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ThrottleError {
    /// The blocked share is not in (0, 1].
    BlockedShare(f64),
    /// The window or the cool-down is zero.
    ZeroDuration,
    /// The client bound is zero.
    ZeroClients,
}

impl fmt::Display for ThrottleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThrottleError::BlockedShare(share) => {
                write!(f, "throttle blocked share {share} is not in (0, 1]")
            }
            ThrottleError::ZeroDuration => {
                f.write_str("a throttle's window and cool-down must be longer than zero")
            }
            ThrottleError::ZeroClients => {
                f.write_str("a throttle must be allowed to track at least one client")
            }
        }
    }
}

impl std::error::Error for ThrottleError {}

/// One client's counts in the current window.
#[derive(Debug)]
struct Client {
    window_start: Instant,
    requests: u32,
    blocked: u32,
    /// The end of its cool-down, while it lasts.
    until: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Settings {
    share: f64,
    min_blocked: u32,
    window: Duration,
    cool_down: Duration,
    max_clients: u64,
}

struct Shared<K> {
    clients: moka::sync::Cache<K, Arc<Mutex<Client>>>,
    settings: Settings,
    throttled_requests: AtomicU64,
    clients_throttled: AtomicU64,
}

/// Throttling of the clients whose requests the filter keeps blocking: see the
/// [module](self). Configure it, keep a clone for its [`stats`](Self::stats), and give it to
/// [`GuardLayer::throttle`](super::GuardLayer::throttle).
///
/// Defaults: a client is throttled once at least 20 of its requests within a 1-second window
/// were blocked and they make at least half of its requests there; it is answered `429` for
/// 10 seconds; at most 100,000 clients are tracked.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use cuckoo_guard::tower::{key, throttle::Throttle, GuardLayer};
/// use cuckoo_guard::CuckooFilter;
///
/// let throttle = Throttle::new(key::header::<String>("x-api-key"))
///     .blocked_share(0.8)?
///     .cool_down(Duration::from_secs(30))?;
/// let filter = Arc::new(CuckooFilter::with_capacity(1_000));
/// let layer = GuardLayer::new(filter, key::path_segment::<u64>(1)).throttle(throttle.clone());
/// # let _ = layer;
/// assert_eq!(throttle.stats().clients_throttled, 0);
/// # Ok::<(), cuckoo_guard::tower::throttle::ThrottleError>(())
/// ```
pub struct Throttle<C: ExtractKey> {
    client: C,
    shared: Arc<Shared<C::Key>>,
}

impl<C: ExtractKey + Clone> Clone for Throttle<C> {
    fn clone(&self) -> Self {
        Throttle {
            client: self.client.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<C: ExtractKey> fmt::Debug for Throttle<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttle")
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl<C> Throttle<C>
where
    C: ExtractKey,
    C::Key: Hash + Eq + Send + Sync + 'static,
{
    /// A throttle of the clients `client` names, with the default settings.
    pub fn new(client: C) -> Self {
        Self::with(
            client,
            Settings {
                share: 0.5,
                min_blocked: 20,
                window: Duration::from_secs(1),
                cool_down: Duration::from_secs(10),
                max_clients: 100_000,
            },
        )
    }

    fn with(client: C, settings: Settings) -> Self {
        let clients = moka::sync::Cache::builder()
            .max_capacity(settings.max_clients)
            .time_to_idle(settings.window.saturating_add(settings.cool_down))
            .build();
        Throttle {
            client,
            shared: Arc::new(Shared {
                clients,
                settings,
                throttled_requests: AtomicU64::new(0),
                clients_throttled: AtomicU64::new(0),
            }),
        }
    }

    fn set(self, change: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = self.shared.settings;
        change(&mut settings);
        Self::with(self.client, settings)
    }

    /// The share of a client's requests within a window that must have been blocked for it
    /// to be throttled, in (0, 1] (default 0.5).
    ///
    /// # Errors
    ///
    /// [`ThrottleError::BlockedShare`] outside (0, 1] or NaN.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// assert!(Throttle::new(key::header::<String>("x-api-key")).blocked_share(0.9).is_ok());
    /// ```
    pub fn blocked_share(self, share: f64) -> Result<Self, ThrottleError> {
        if !(share > 0.0 && share <= 1.0) {
            return Err(ThrottleError::BlockedShare(share));
        }
        Ok(self.set(|s| s.share = share))
    }

    /// The fewest blocked requests within a window that can throttle a client (default 20),
    /// so that a client's few mistyped ids never do.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// let throttle = Throttle::new(key::header::<String>("x-api-key")).min_blocked(100);
    /// # let _ = throttle;
    /// ```
    pub fn min_blocked(self, requests: u32) -> Self {
        self.set(|s| s.min_blocked = requests.max(1))
    }

    /// The window the share is measured over (default 1 second).
    ///
    /// # Errors
    ///
    /// [`ThrottleError::ZeroDuration`] for zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// assert!(Throttle::new(key::header::<String>("x-api-key")).window(Duration::from_secs(5)).is_ok());
    /// ```
    pub fn window(self, window: Duration) -> Result<Self, ThrottleError> {
        if window.is_zero() {
            return Err(ThrottleError::ZeroDuration);
        }
        Ok(self.set(|s| s.window = window))
    }

    /// How long a throttled client is answered `429` (default 10 seconds); `Retry-After`
    /// gives the seconds left.
    ///
    /// # Errors
    ///
    /// [`ThrottleError::ZeroDuration`] for zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// assert!(Throttle::new(key::header::<String>("x-api-key")).cool_down(Duration::ZERO).is_err());
    /// ```
    pub fn cool_down(self, cool_down: Duration) -> Result<Self, ThrottleError> {
        if cool_down.is_zero() {
            return Err(ThrottleError::ZeroDuration);
        }
        Ok(self.set(|s| s.cool_down = cool_down))
    }

    /// The most clients tracked at once (default 100,000); past it the least recently seen
    /// are forgotten.
    ///
    /// # Errors
    ///
    /// [`ThrottleError::ZeroClients`] for zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// assert!(Throttle::new(key::header::<String>("x-api-key")).max_clients(1_000).is_ok());
    /// ```
    pub fn max_clients(self, clients: u64) -> Result<Self, ThrottleError> {
        if clients == 0 {
            return Err(ThrottleError::ZeroClients);
        }
        Ok(self.set(|s| s.max_clients = clients))
    }

    /// The throttle's counts so far, shared by every clone.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// let throttle = Throttle::new(key::header::<String>("x-api-key"));
    /// assert_eq!(throttle.stats().clients_throttled, 0);
    /// ```
    pub fn stats(&self) -> ThrottleStats {
        ThrottleStats {
            // ORDERING: Relaxed; statistics, they publish nothing.
            throttled_requests: self.shared.throttled_requests.load(Ordering::Relaxed),
            // ORDERING: Relaxed; as above.
            clients_throttled: self.shared.clients_throttled.load(Ordering::Relaxed),
        }
    }
}

fn lock(client: &Mutex<Client>) -> std::sync::MutexGuard<'_, Client> {
    // Every critical section leaves the counts valid; a panic elsewhere poisons nothing.
    client.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<C, B> Throttling<B> for Throttle<C>
where
    C: ExtractKey,
    C::Key: Hash + Eq + Send + Sync + 'static,
    B: Default,
{
    type Ticket = Option<C::Key>;

    fn screen(&self, parts: &Parts) -> Result<Option<C::Key>, Response<B>> {
        let Some(client) = self.client.extract(parts) else {
            return Ok(None);
        };
        if let Some(counts) = self.shared.clients.get(&client) {
            let now = Instant::now();
            let left = lock(&counts)
                .until
                .and_then(|until| until.checked_duration_since(now))
                .filter(|left| !left.is_zero());
            if let Some(left) = left {
                // ORDERING: Relaxed; a statistic.
                self.shared
                    .throttled_requests
                    .fetch_add(1, Ordering::Relaxed);
                let mut response = Response::new(B::default());
                *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                let seconds = left.as_secs() + u64::from(left.subsec_nanos() > 0);
                response
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, HeaderValue::from(seconds));
                return Err(response);
            }
        }
        Ok(Some(client))
    }

    fn record(&self, ticket: Option<C::Key>, blocked: bool) {
        let Some(client) = ticket else {
            return;
        };
        let settings = self.shared.settings;
        let now = Instant::now();
        let counts = self.shared.clients.get_with(client, || {
            Arc::new(Mutex::new(Client {
                window_start: now,
                requests: 0,
                blocked: 0,
                until: None,
            }))
        });
        let mut counts = lock(&counts);
        if now.saturating_duration_since(counts.window_start) >= settings.window {
            counts.window_start = now;
            counts.requests = 0;
            counts.blocked = 0;
        }
        counts.requests = counts.requests.saturating_add(1);
        counts.blocked = counts.blocked.saturating_add(u32::from(blocked));
        if counts.blocked >= settings.min_blocked
            && f64::from(counts.blocked) >= settings.share * f64::from(counts.requests)
        {
            counts.until = Some(now + settings.cool_down);
            counts.window_start = now;
            counts.requests = 0;
            counts.blocked = 0;
            // ORDERING: Relaxed; a statistic.
            self.shared
                .clients_throttled
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}
