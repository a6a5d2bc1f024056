//! Answering the attacker: a [`Throttle`] on a [`GuardLayer`](super::GuardLayer) counts, per
//! client, the requests the filter answered and those it blocked, and answers a client whose
//! blocked share passes a threshold with `429 Too Many Requests` and `Retry-After` for a
//! cool-down, before the filter or the service is asked.
//!
//! Counts are kept per client key (the peer address, a header such as `X-Forwarded-For` or an
//! API key, or any closure: an [`ExtractKey`]) in a bounded cache (moka's, least recently
//! used out first), so an attacker who varies its client key evicts entries but cannot grow
//! memory. The share is measured over a window: a client is throttled once, within one window,
//! at least [`min_blocked`](ThrottleBuilder::min_blocked) of its requests were blocked and they
//! make at least [`blocked_share`](ThrottleBuilder::blocked_share) of its requests. A client
//! whose keys all exist is never blocked, so never throttled, whatever its rate.

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
/// let built = Throttle::builder(key::header::<String>("x-api-key")).blocked_share(1.5).build();
/// let error = built.unwrap_err();
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
/// [module](self). Make it with [`new`](Self::new) or configure it with
/// [`builder`](Self::builder), keep a clone for its [`stats`](Self::stats), and give it to
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
/// let throttle = Throttle::builder(key::header::<String>("x-api-key"))
///     .blocked_share(0.8)
///     .cool_down(Duration::from_secs(30))
///     .build()?;
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

impl Settings {
    const DEFAULT: Settings = Settings {
        share: 0.5,
        min_blocked: 20,
        window: Duration::from_secs(1),
        cool_down: Duration::from_secs(10),
        max_clients: 100_000,
    };
}

/// The settings of a [`Throttle`], checked by [`build`](Self::build); from
/// [`Throttle::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cuckoo_guard::tower::{key, throttle::Throttle};
///
/// let throttle = Throttle::builder(key::header::<String>("x-api-key"))
///     .blocked_share(0.8)
///     .min_blocked(50)
///     .window(Duration::from_secs(5))
///     .cool_down(Duration::from_secs(60))
///     .max_clients(10_000)
///     .build()?;
/// # let _ = throttle;
/// # Ok::<(), cuckoo_guard::tower::throttle::ThrottleError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct ThrottleBuilder<C> {
    client: C,
    settings: Settings,
}

impl<C> ThrottleBuilder<C> {
    /// The share of a client's requests within a window that must have been blocked for it
    /// to be throttled, in (0, 1] (default 0.5).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// let builder = Throttle::builder(key::header::<String>("x-api-key"));
    /// assert!(builder.blocked_share(0.9).build().is_ok());
    /// ```
    pub fn blocked_share(mut self, share: f64) -> Self {
        self.settings.share = share;
        self
    }

    /// The fewest blocked requests within a window that can throttle a client (default 20,
    /// at least 1), so that a client's few mistyped ids never do.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// let builder = Throttle::builder(key::header::<String>("x-api-key"));
    /// assert!(builder.min_blocked(100).build().is_ok());
    /// ```
    pub fn min_blocked(mut self, requests: u32) -> Self {
        self.settings.min_blocked = requests.max(1);
        self
    }

    /// The window the share is measured over (default 1 second).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// let builder = Throttle::builder(key::header::<String>("x-api-key"));
    /// assert!(builder.window(Duration::from_secs(5)).build().is_ok());
    /// ```
    pub fn window(mut self, window: Duration) -> Self {
        self.settings.window = window;
        self
    }

    /// How long a throttled client is answered `429` (default 10 seconds); `Retry-After`
    /// gives the seconds left.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// let builder = Throttle::builder(key::header::<String>("x-api-key"));
    /// assert!(builder.cool_down(Duration::ZERO).build().is_err());
    /// ```
    pub fn cool_down(mut self, cool_down: Duration) -> Self {
        self.settings.cool_down = cool_down;
        self
    }

    /// The most clients tracked at once (default 100,000); past it the least recently seen
    /// are forgotten.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// let builder = Throttle::builder(key::header::<String>("x-api-key"));
    /// assert!(builder.max_clients(1_000).build().is_ok());
    /// ```
    pub fn max_clients(mut self, clients: u64) -> Self {
        self.settings.max_clients = clients;
        self
    }

    /// The throttle.
    ///
    /// # Errors
    ///
    /// [`ThrottleError::BlockedShare`] for a share outside (0, 1] or NaN,
    /// [`ThrottleError::ZeroDuration`] for a zero window or cool-down,
    /// [`ThrottleError::ZeroClients`] for a zero client bound.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::tower::{key, throttle::{Throttle, ThrottleError}};
    ///
    /// let built = Throttle::builder(key::header::<String>("x-api-key")).max_clients(0).build();
    /// assert!(matches!(built, Err(ThrottleError::ZeroClients)));
    /// ```
    pub fn build(self) -> Result<Throttle<C>, ThrottleError>
    where
        C: ExtractKey,
        C::Key: Hash + Eq + Send + Sync + 'static,
    {
        let settings = self.settings;
        if !(settings.share > 0.0 && settings.share <= 1.0) {
            return Err(ThrottleError::BlockedShare(settings.share));
        }
        if settings.window.is_zero() || settings.cool_down.is_zero() {
            return Err(ThrottleError::ZeroDuration);
        }
        if settings.max_clients == 0 {
            return Err(ThrottleError::ZeroClients);
        }
        Ok(Throttle::with(self.client, settings))
    }
}

impl<C> Throttle<C>
where
    C: ExtractKey,
    C::Key: Hash + Eq + Send + Sync + 'static,
{
    /// A throttle of the clients `client` names, with the default settings.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// let throttle = Throttle::new(key::header::<String>("x-forwarded-for"));
    /// assert_eq!(throttle.stats().clients_throttled, 0);
    /// ```
    pub fn new(client: C) -> Self {
        Self::with(client, Settings::DEFAULT)
    }

    /// A builder for a throttle of the clients `client` names, from the default settings.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// let throttle = Throttle::builder(key::header::<String>("x-api-key"))
    ///     .cool_down(Duration::from_secs(30))
    ///     .build()?;
    /// # let _ = throttle;
    /// # Ok::<(), cuckoo_guard::tower::throttle::ThrottleError>(())
    /// ```
    pub fn builder(client: C) -> ThrottleBuilder<C> {
        ThrottleBuilder {
            client,
            settings: Settings::DEFAULT,
        }
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
