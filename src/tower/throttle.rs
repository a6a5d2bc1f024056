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
//!
//! A throttle may also [`hold`](ThrottleBuilder::hold) each `429` before sending it (a
//! tarpit): a client that waits for its answers, as HTTP/1.1 clients do on each connection,
//! then sends at most one request per connection per hold, so an attacker's refused requests
//! stop costing the service a share of its CPU. At most
//! [`max_held`](ThrottleBuilder::max_held) answers are held at once; past it they are sent
//! at once. Holding needs tokio's timer (as tower's own `Timeout` does): outside a tokio
//! runtime, answers are sent at once.

use std::fmt;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::request::Parts;
use http::{HeaderValue, Response, StatusCode};

use super::ExtractKey;
use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// What a [`GuardLayer`](super::GuardLayer) does about the client of each request it checks:
/// nothing ([`NoThrottle`], the default), or a [`Throttle`].
pub trait Throttling<B> {
    /// The client a request's outcome is recorded for.
    type Ticket;

    /// Before the filter is asked: `Err` with the refusal for a client in its cool-down,
    /// else the ticket to [`record`](Self::record) the outcome with.
    fn screen(&self, parts: &Parts) -> Result<Self::Ticket, Refusal<B>>;

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

    fn screen(&self, _: &Parts) -> Result<(), Refusal<B>> {
        Ok(())
    }

    fn record(&self, (): (), _: bool) {}
}

/// A request a [`Throttling`] refused: its response (`429` from a [`Throttle`]) and how long
/// to hold it before sending it. Send it with [`answer`](Self::answer), which waits out the
/// hold, or at once with [`into_response`](Self::into_response); the hold's place among
/// the throttle's [`max_held`](ThrottleBuilder::max_held) is given back when the refusal
/// is dropped.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::tower::throttle::Refusal;
///
/// let refusal = Refusal::new(http::Response::new("slow down"));
/// assert!(refusal.hold().is_zero());
/// assert_eq!(*refusal.into_response().body(), "slow down");
/// ```
pub struct Refusal<B> {
    response: Response<B>,
    /// Boxed, so that a refusal is little larger than its response.
    hold: Option<Box<Held>>,
}

/// A held answer: how long it is held, and its place among a throttle's `max_held` (the
/// count of held answers), given back on drop.
struct Held {
    duration: Duration,
    count: Arc<AtomicUsize>,
}

impl Drop for Held {
    fn drop(&mut self) {
        // ORDERING: Relaxed; a count that bounds held answers, it publishes nothing.
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<B> Refusal<B> {
    /// A refusal answered at once with `response`.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::tower::throttle::Refusal;
    ///
    /// let refusal = Refusal::new(http::Response::new(()));
    /// assert!(refusal.hold().is_zero());
    /// ```
    pub fn new(response: Response<B>) -> Self {
        Refusal {
            response,
            hold: None,
        }
    }

    /// How long the response is held before it is sent (zero: sent at once).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::tower::throttle::Refusal;
    ///
    /// assert!(Refusal::new(http::Response::new(())).hold().is_zero());
    /// ```
    pub fn hold(&self) -> Duration {
        self.hold
            .as_ref()
            .map_or(Duration::ZERO, |held| held.duration)
    }

    /// The response, to send at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::tower::throttle::Refusal;
    ///
    /// let response = Refusal::new(http::Response::new(7)).into_response();
    /// assert_eq!(*response.body(), 7);
    /// ```
    pub fn into_response(self) -> Response<B> {
        self.response
    }

    /// The response, once the hold has passed (at once without a hold or outside a tokio
    /// runtime).
    ///
    /// # Panics
    ///
    /// With a hold, inside a tokio runtime built without its timer (as tokio's own `sleep`).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::tower::throttle::Refusal;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let response = Refusal::new(http::Response::new(7)).answer().await;
    /// assert_eq!(*response.body(), 7);
    /// # });
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub async fn answer(self) -> Response<B> {
        if let Some(sleep) = self.sleep() {
            sleep.await;
        }
        self.response
    }

    /// The hold's timer, if the response is held and a tokio runtime is current.
    pub(crate) fn sleep(&self) -> Option<Pin<Box<tokio::time::Sleep>>> {
        let held = self.hold.as_ref()?;
        tokio::runtime::Handle::try_current().ok()?;
        Some(Box::pin(tokio::time::sleep(held.duration)))
    }
}

impl<B> fmt::Debug for Refusal<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Refusal")
            .field("status", &self.response.status())
            .field("hold", &self.hold())
            .finish_non_exhaustive()
    }
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
    /// Throttled requests whose `429` was given a hold ([`hold`](ThrottleBuilder::hold)); a
    /// caller that sends a [`Refusal`] with [`into_response`](Refusal::into_response), or
    /// a client that hangs up, cuts it short.
    pub held_requests: u64,
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
    /// The hold is as long as the cool-down or longer, so that every held answer would be
    /// held to its cool-down's end.
    HoldNotShorter,
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
            ThrottleError::HoldNotShorter => {
                f.write_str("a throttle's hold must be shorter than its cool-down")
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
    hold: Duration,
    max_held: usize,
}

struct Shared<K> {
    clients: moka::sync::Cache<K, Arc<Mutex<Client>>>,
    settings: Settings,
    throttled_requests: AtomicU64,
    clients_throttled: AtomicU64,
    held_requests: AtomicU64,
    /// The answers held now, at most `settings.max_held`.
    held: Arc<AtomicUsize>,
}

/// Throttling of the clients whose requests the filter keeps blocking: see the
/// [module](self). Make it with [`new`](Self::new) or configure it with
/// [`builder`](Self::builder), keep a clone for its [`stats`](Self::stats), and give it to
/// [`GuardLayer::throttle`](super::GuardLayer::throttle).
///
/// Defaults: a client is throttled once at least 20 of its requests within a 1-second window
/// were blocked and they make at least half of its requests there; it is answered `429` for
/// 10 seconds, at once (no hold); at most 100,000 clients are tracked.
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
        hold: Duration::ZERO,
        max_held: 1_000,
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

    /// How long each `429` is held before it is sent (default zero: at once), shorter than
    /// the cool-down; never past the client's cool-down, and `Retry-After` counts from when
    /// the answer is sent. An HTTP/1.1 client that waits for its answers then sends at most
    /// one request per connection per hold (over HTTP/2, one per stream). Each held answer
    /// keeps its connection open meanwhile, so behind a proxy that sets the client header,
    /// a hold also ties up the proxy's connection to the service: keep it short there and
    /// [`max_held`](Self::max_held) under the proxy's connection limit. Outside a tokio
    /// runtime, answers are sent at once.
    ///
    /// # Panics
    ///
    /// A held answer panics inside a tokio runtime built without its timer (as tokio's own
    /// `sleep` does, and tower's `Timeout`); `#[tokio::main]` enables it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// let builder = Throttle::builder(key::header::<String>("x-api-key"));
    /// assert!(builder.hold(Duration::from_secs(1)).build().is_ok());
    /// ```
    pub fn hold(mut self, hold: Duration) -> Self {
        self.settings.hold = hold;
        self
    }

    /// The most answers held at once, across every client (default 1,000; zero never holds);
    /// past it, `429`s are sent at once, so memory and connections held stay bounded
    /// whatever the attackers send.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cuckoo_guard::tower::{key, throttle::Throttle};
    ///
    /// let builder = Throttle::builder(key::header::<String>("x-api-key"));
    /// assert!(builder.hold(Duration::from_secs(1)).max_held(100).build().is_ok());
    /// ```
    pub fn max_held(mut self, answers: usize) -> Self {
        self.settings.max_held = answers;
        self
    }

    /// The throttle.
    ///
    /// # Errors
    ///
    /// [`ThrottleError::BlockedShare`] for a share outside (0, 1] or NaN,
    /// [`ThrottleError::ZeroDuration`] for a zero window or cool-down,
    /// [`ThrottleError::ZeroClients`] for a zero client bound,
    /// [`ThrottleError::HoldNotShorter`] for a hold not shorter than the cool-down.
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
        if settings.hold >= settings.cool_down {
            return Err(ThrottleError::HoldNotShorter);
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
                held_requests: AtomicU64::new(0),
                held: Arc::new(AtomicUsize::new(0)),
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
            // ORDERING: Relaxed; as above.
            held_requests: self.shared.held_requests.load(Ordering::Relaxed),
        }
    }
}

impl<C: ExtractKey> Throttle<C> {
    /// A hold for a client whose cool-down has `left` to run (the throttle's hold, cut to
    /// the cool-down's end), if the throttle holds answers, a place is free and a tokio
    /// runtime is current.
    fn held(&self, left: Duration) -> Option<Box<Held>> {
        let settings = &self.shared.settings;
        let hold = settings.hold.min(left);
        if hold.is_zero() || tokio::runtime::Handle::try_current().is_err() {
            return None;
        }
        let count = &self.shared.held;
        // ORDERING: Relaxed; the count bounds held answers, it publishes nothing. Every
        // add is undone, by the drop of the `Held` below or at once.
        if count.fetch_add(1, Ordering::Relaxed) >= settings.max_held {
            // ORDERING: Relaxed; as above.
            count.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        // ORDERING: Relaxed; a statistic.
        self.shared.held_requests.fetch_add(1, Ordering::Relaxed);
        Some(Box::new(Held {
            duration: hold,
            count: Arc::clone(count),
        }))
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

    fn screen(&self, parts: &Parts) -> Result<Option<C::Key>, Refusal<B>> {
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
                let hold = self.held(left);
                // The seconds left once the answer is sent, after its hold.
                let after =
                    left.saturating_sub(hold.as_ref().map_or(Duration::ZERO, |held| held.duration));
                let seconds = after.as_secs() + u64::from(after.subsec_nanos() > 0);
                let mut response = Response::new(B::default());
                *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                response
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, HeaderValue::from(seconds));
                return Err(Refusal { response, hold });
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
