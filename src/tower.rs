//! A [`tower`](https://docs.rs/tower) layer that answers requests for keys the guard's filter
//! reports absent, without calling the service behind it (feature `tower`).
//!
//! [`GuardLayer`] is configured with a guard (anything that can [`Admit`] a key: a
//! [`CacheGuard`], an [`AsyncCacheGuard`], a shared [`CuckooFilter`]) and a key extractor over
//! the request's [`Parts`]. For each request:
//!
//! - a method other than `GET` or `HEAD` (by default; see [`GuardLayer::methods`]), or no key
//!   can be extracted: the request passes through untouched (a `PUT` or `POST` may create
//!   the key, so it must reach the service);
//! - the filter says **definitely absent**: the layer answers with its blocked response (by
//!   default `404 Not Found` with an empty body) and the inner service is not called;
//! - the filter says **maybe** (or the guard is still warming up): the request goes on, with
//!   the guard's [`Admission`] in its extensions, so the handler can finish the lookup with
//!   [`CacheGuard::get_admitted`] without counting it twice.
//!
//! The layer only asks the filter: it never calls the store, never blocks and never awaits,
//! so it is safe on any executor thread whichever guard it holds. The guard's stats count
//! its decisions ([`GuardStats::blocked`](crate::guard::GuardStats::blocked)).
//!
//! # The key must be the handler's key
//!
//! The extractor must produce exactly the key the handler looks up and the write path stores:
//! a key extracted differently (still percent-encoded, another case, another type) is not the
//! key in the filter, and its requests are answered "absent" although the row exists: a false
//! negative made by configuration. The helpers in [`key`] decode the way axum's `Path` and
//! `Query` extractors do, and read a header's value as text. A bare [`CuckooFilter`] behind
//! the layer must have been filled with keys of the extractor's type (a key hashes by its
//! type: `7u64` and `7i32` are different keys) and must hold every key before it serves,
//! since unlike a guard it has no warm-up state that passes requests meanwhile.
//!
//! The layer reads the path the router it is added to sees. On a router that
//! [nests](https://docs.rs/axum/latest/axum/struct.Router.html#method.nest) another, add it to
//! the inner router, where the nesting prefix has been stripped: added to the outer one it
//! sees the full path, and `path_segment(1)` would read another segment. And
//! `Router::route_layer` wraps every route added to that router before it: build the guarded
//! routes in a router of their own and merge it, so no other route is checked against this
//! guard's keys.
//!
//! # Shadow mode, for a rollout
//!
//! [`GuardLayer::shadow`] gives a [`ShadowLayer`]: it asks the filter about the same requests
//! but calls the service for every one, and counts what it would have blocked
//! ([`ShadowStats::would_block`]) and which of those the service then answered with a `2xx`
//! ([`ShadowStats::would_be_false_negatives`]: each is also reported once per key on standard
//! error). Run it until the would-be false negatives stay at 0, then drop `.shadow()`. A
//! ruled-out request carries [`Admission::Shadow`], which a handler's `get_admitted` reads
//! from the store (the guard counts its findings in
//! [`GuardStats::shadow_false_negatives`](crate::guard::GuardStats::shadow_false_negatives)).
//!
//! # With axum
//!
//! Put the layer on the routes with [`Router::route_layer`](https://docs.rs/axum/latest/axum/struct.Router.html#method.route_layer),
//! so it runs after routing and only on the routes it guards (other methods of those routes,
//! such as a `PUT` that creates, pass through):
//!
//! ```
//! use axum::{extract::{Path, State}, routing::get, Extension, Router};
//! use cuckoo_guard::guard::{Admission, CacheGuard, MemoryStore};
//! use cuckoo_guard::tower::{key, GuardLayer};
//! use cuckoo_guard::CuckooFilter;
//!
//! type Guard = CacheGuard<MemoryStore<u64, String>>;
//!
//! async fn user(
//!     State(guard): State<Guard>,
//!     Path(id): Path<u64>,
//!     Extension(admission): Extension<Admission>,
//! ) -> Result<String, axum::http::StatusCode> {
//!     // A `MemoryStore` answers at once; a guard over a blocking store would call
//!     // `get_admitted` from `tokio::task::spawn_blocking`.
//!     match guard.get_admitted(&id, admission) {
//!         Ok(Some(name)) => Ok(name),
//!         Ok(None) => Err(axum::http::StatusCode::NOT_FOUND),
//!         Err(_) => Err(axum::http::StatusCode::SERVICE_UNAVAILABLE),
//!     }
//! }
//!
//! let store = MemoryStore::from_rows([(1, "ada".to_string())]);
//! let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), store);
//! guard.warm_up(1_000, |_| {})?;
//! let app: Router = Router::new()
//!     .route("/users/{id}", get(user))
//!     .route_layer(GuardLayer::new(guard.clone(), key::path_segment::<u64>(1)))
//!     .with_state(guard);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Handlers that prefer axum's own middleware can write the same check with
//! `axum::middleware::from_fn_with_state`:
//!
//! ```
//! use axum::{extract::{Path, Request, State}, http::StatusCode, middleware::{self, Next}};
//! use axum::{response::{IntoResponse, Response}, routing::get, Router};
//! use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
//! use cuckoo_guard::CuckooFilter;
//!
//! type Guard = AsyncCacheGuard<MemoryStore<u64, String>>;
//!
//! async fn screen(State(guard): State<Guard>, Path(id): Path<u64>, mut request: Request, next: Next) -> Response {
//!     let admission = guard.admit(&id);
//!     if admission.is_blocked() {
//!         return StatusCode::NOT_FOUND.into_response();
//!     }
//!     request.extensions_mut().insert(admission);
//!     next.run(request).await
//! }
//!
//! # async fn user() -> &'static str { "" }
//! let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000), MemoryStore::new());
//! let app: Router = Router::new()
//!     .route("/users/{id}", get(user))
//!     .route_layer(middleware::from_fn_with_state(guard.clone(), screen))
//!     .with_state(guard);
//! ```
//!
//! # With a plain `tower::ServiceBuilder`
//!
//! ```
//! use std::convert::Infallible;
//! use std::sync::Arc;
//! use cuckoo_guard::tower::{key, GuardLayer};
//! use cuckoo_guard::CuckooFilter;
//! use http::{Method, Request, Response, StatusCode};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! let filter = Arc::new(CuckooFilter::with_capacity(100));
//! filter.insert(&"ada".to_string())?;
//! let service = ServiceBuilder::new()
//!     .layer(GuardLayer::new(filter, key::header::<String>("x-user")))
//!     .service(service_fn(|_: Request<String>| async {
//!         Ok::<_, Infallible>(Response::new("found".to_string()))
//!     }));
//!
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let ask = |user: &str| Request::builder().header("x-user", user).body(String::new()).unwrap();
//! let found = service.clone().oneshot(ask("ada")).await?;
//! assert_eq!(found.body(), "found");
//! let absent = service.oneshot(ask("bob")).await?;
//! assert_eq!(absent.status(), StatusCode::NOT_FOUND);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::guard::{Admission, AsyncCacheGuard, AsyncStore, CacheGuard, Store};
use crate::CuckooFilter;

pub mod key;
mod shadow;
pub mod throttle;

pub use self::shadow::{ShadowFuture, ShadowLayer, ShadowService, ShadowStats};
use self::throttle::{NoThrottle, Refusal, Throttle, Throttling};

/// Something that decides, from a filter alone, whether a lookup of a key may go on.
///
/// Implemented by the guards (counted in their stats, [`Admission::Warming`] while warming
/// up), by a bare [`CuckooFilter`] (for a filter kept in sync by other means), and through
/// `Arc` and `&` by whatever they point to.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::Admission;
/// use cuckoo_guard::tower::Admit;
/// use cuckoo_guard::CuckooFilter;
///
/// let filter = CuckooFilter::with_capacity(10);
/// filter.insert(&7u32)?;
/// assert_eq!(filter.admit(&7u32), Admission::Pass);
/// assert_eq!(Admit::<u32>::admit(&filter, &8), Admission::Blocked);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Admit<K: ?Sized> {
    /// The filter's decision for `key`.
    fn admit(&self, key: &K) -> Admission;

    /// The filter's decision for `key` in shadow mode ([`ShadowLayer`]): "absent" is
    /// [`Admission::Shadow`], which a handler's `get_admitted` reads from the store. The
    /// guards count it as a would-be block ([`GuardStats::shadow_would_block`](crate::guard::GuardStats::shadow_would_block));
    /// by default it is [`admit`](Self::admit)'s decision with `Blocked` answered `Shadow`.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::Admission;
    /// use cuckoo_guard::tower::Admit;
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(10);
    /// assert_eq!(Admit::<u32>::admit_shadow(&filter, &7), Admission::Shadow);
    /// filter.insert(&7u32)?;
    /// assert_eq!(Admit::<u32>::admit_shadow(&filter, &7), Admission::Pass);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn admit_shadow(&self, key: &K) -> Admission {
        match self.admit(key) {
            Admission::Blocked => Admission::Shadow,
            other => other,
        }
    }
}

impl<St: Store, H: BuildHasher> Admit<St::Key> for CacheGuard<St, H> {
    fn admit(&self, key: &St::Key) -> Admission {
        CacheGuard::admit(self, key)
    }

    fn admit_shadow(&self, key: &St::Key) -> Admission {
        CacheGuard::admit_shadow(self, key)
    }
}

impl<St: AsyncStore, H: BuildHasher + Sync> Admit<St::Key> for AsyncCacheGuard<St, H> {
    fn admit(&self, key: &St::Key) -> Admission {
        AsyncCacheGuard::admit(self, key)
    }

    fn admit_shadow(&self, key: &St::Key) -> Admission {
        AsyncCacheGuard::admit_shadow(self, key)
    }
}

impl<K: Hash + ?Sized, H: BuildHasher> Admit<K> for CuckooFilter<H> {
    fn admit(&self, key: &K) -> Admission {
        if self.contains(key) {
            Admission::Pass
        } else {
            Admission::Blocked
        }
    }
}

impl<K: ?Sized, T: Admit<K> + ?Sized> Admit<K> for Arc<T> {
    fn admit(&self, key: &K) -> Admission {
        (**self).admit(key)
    }

    fn admit_shadow(&self, key: &K) -> Admission {
        (**self).admit_shadow(key)
    }
}

impl<K: ?Sized, T: Admit<K> + ?Sized> Admit<K> for &T {
    fn admit(&self, key: &K) -> Admission {
        (**self).admit(key)
    }

    fn admit_shadow(&self, key: &K) -> Admission {
        (**self).admit_shadow(key)
    }
}

/// Takes the guard's key out of a request, or `None` if the request has none (it then passes
/// through). Implemented for every `Fn(&Parts) -> Option<K>`; [`key`] has the usual ones.
///
/// A closure of your own must decode as the handler does: the example parses an integer
/// from the raw path, which needs no decoding; a text key from the raw path would still be
/// percent-encoded (use [`key::path_segment`], which decodes).
///
/// # Examples
///
/// ```
/// use cuckoo_guard::tower::ExtractKey;
/// use http::request::Parts;
///
/// let tenant_and_id = |parts: &Parts| {
///     let tenant = parts.headers.get("x-tenant")?.to_str().ok()?;
///     let id: u64 = parts.uri.path().strip_prefix("/items/")?.parse().ok()?;
///     Some((tenant.to_owned(), id))
/// };
/// let (parts, ()) = http::Request::builder()
///     .uri("/items/12")
///     .header("x-tenant", "acme")
///     .body(())?
///     .into_parts();
/// assert_eq!(tenant_and_id.extract(&parts), Some(("acme".to_owned(), 12)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait ExtractKey {
    /// The key type the guard is asked about.
    type Key;

    /// The request's key, or `None` to let the request pass.
    fn extract(&self, parts: &Parts) -> Option<Self::Key>;
}

impl<F, K> ExtractKey for F
where
    F: Fn(&Parts) -> Option<K>,
{
    type Key = K;

    fn extract(&self, parts: &Parts) -> Option<K> {
        self(parts)
    }
}

/// The response a [`GuardService`] gives a request whose key the filter reports absent.
/// Implemented for [`NotFound`] (the default) and for every `Fn(&Parts) -> Response<B>`.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::tower::Blocked;
/// use http::{request::Parts, Response, StatusCode};
///
/// let gone = |_: &Parts| {
///     let mut response = Response::new("no such user".to_string());
///     *response.status_mut() = StatusCode::GONE;
///     response
/// };
/// let (parts, ()) = http::Request::new(()).into_parts();
/// assert_eq!(gone.respond(&parts).status(), StatusCode::GONE);
/// ```
pub trait Blocked<B> {
    /// The response for the blocked request whose head is `parts`.
    fn respond(&self, parts: &Parts) -> Response<B>;
}

/// The default blocked response: `404 Not Found` with an empty (default) body.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::tower::{Blocked, NotFound};
/// use http::StatusCode;
///
/// let (parts, ()) = http::Request::new(()).into_parts();
/// let response: http::Response<String> = NotFound.respond(&parts);
/// assert_eq!(response.status(), StatusCode::NOT_FOUND);
/// assert!(response.body().is_empty());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct NotFound;

impl<B: Default> Blocked<B> for NotFound {
    fn respond(&self, _: &Parts) -> Response<B> {
        let mut response = Response::new(B::default());
        *response.status_mut() = StatusCode::NOT_FOUND;
        response
    }
}

impl<F, B> Blocked<B> for F
where
    F: Fn(&Parts) -> Response<B>,
{
    fn respond(&self, parts: &Parts) -> Response<B> {
        self(parts)
    }
}

/// A [`Layer`] that puts a guard's filter in front of a service: see the [module](self).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use cuckoo_guard::tower::{key, GuardLayer};
/// use cuckoo_guard::CuckooFilter;
/// use http::{request::Parts, Response, StatusCode};
///
/// let filter = Arc::new(CuckooFilter::with_capacity(1_000));
/// let layer = GuardLayer::new(filter, key::query::<u64>("id")).on_blocked(|_: &Parts| {
///     let mut response = Response::new(String::from("{\"error\":\"not found\"}"));
///     *response.status_mut() = StatusCode::NOT_FOUND;
///     response
/// });
/// # let _ = layer;
/// ```
#[derive(Clone)]
pub struct GuardLayer<G, E, R = NotFound, T = NoThrottle> {
    guard: G,
    extract: E,
    blocked: R,
    methods: Methods,
    throttle: T,
}

/// The request methods a layer checks; the others pass.
#[derive(Debug, Clone)]
struct Methods(Arc<[Method]>);

impl Methods {
    fn reads() -> Self {
        Methods(Arc::new([Method::GET, Method::HEAD]))
    }

    fn contains(&self, method: &Method) -> bool {
        self.0.contains(method)
    }
}

impl<G, E> GuardLayer<G, E> {
    /// A layer asking `guard` about the key `extract` takes from each request, answering
    /// `404 Not Found` with an empty body for keys the filter reports absent.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::tower::{key, GuardLayer};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u64, String>::new());
    /// let layer = GuardLayer::new(guard, key::path_segment::<u64>(1));
    /// # let _ = layer;
    /// ```
    pub fn new(guard: G, extract: E) -> Self {
        Self {
            guard,
            extract,
            blocked: NotFound,
            methods: Methods::reads(),
            throttle: NoThrottle,
        }
    }
}

impl<G, E, R, T> GuardLayer<G, E, R, T> {
    /// Answers blocked requests with `blocked` instead of an empty 404.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cuckoo_guard::tower::{key, GuardLayer};
    /// use cuckoo_guard::CuckooFilter;
    /// use http::{request::Parts, Response, StatusCode};
    ///
    /// let filter = Arc::new(CuckooFilter::with_capacity(100));
    /// let layer = GuardLayer::new(filter, key::header::<String>("x-user"))
    ///     .on_blocked(|_: &Parts| Response::builder().status(StatusCode::FORBIDDEN).body(String::new()).unwrap());
    /// # let _ = layer;
    /// ```
    pub fn on_blocked<R2>(self, blocked: R2) -> GuardLayer<G, E, R2, T> {
        GuardLayer {
            guard: self.guard,
            extract: self.extract,
            blocked,
            methods: self.methods,
            throttle: self.throttle,
        }
    }

    /// Answers the clients whose requests the filter keeps blocking with `429 Too Many
    /// Requests` for a cool-down, before the filter is asked (see [`throttle`]). Only requests
    /// the layer checks count: a method it checks, with a key.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cuckoo_guard::tower::{key, throttle::Throttle, GuardLayer};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = Arc::new(CuckooFilter::with_capacity(100));
    /// let layer = GuardLayer::new(filter, key::path_segment::<u64>(1))
    ///     .throttle(Throttle::new(key::header::<String>("x-forwarded-for")));
    /// # let _ = layer;
    /// ```
    pub fn throttle<C: ExtractKey>(
        self,
        throttle: Throttle<C>,
    ) -> GuardLayer<G, E, R, Throttle<C>> {
        GuardLayer {
            guard: self.guard,
            extract: self.extract,
            blocked: self.blocked,
            methods: self.methods,
            throttle,
        }
    }

    /// Checks requests of these methods only (default: `GET` and `HEAD`); the others pass
    /// through. Add a method only if no request of it can create its key: a `PUT` that
    /// creates a row asks for a key the filter does not hold yet.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cuckoo_guard::tower::{key, GuardLayer};
    /// use cuckoo_guard::CuckooFilter;
    /// use http::Method;
    ///
    /// let filter = Arc::new(CuckooFilter::with_capacity(100));
    /// // A DELETE of an absent key gets its 404 from the filter too.
    /// let layer = GuardLayer::new(filter, key::path_segment::<u64>(1))
    ///     .methods([Method::GET, Method::HEAD, Method::DELETE]);
    /// # let _ = layer;
    /// ```
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = Methods(methods.into_iter().collect());
        self
    }
}

impl<S, G: Clone, E: Clone, R: Clone, T: Clone> Layer<S> for GuardLayer<G, E, R, T> {
    type Service = GuardService<S, G, E, R, T>;

    fn layer(&self, inner: S) -> Self::Service {
        GuardService {
            inner,
            guard: self.guard.clone(),
            extract: self.extract.clone(),
            blocked: self.blocked.clone(),
            methods: self.methods.clone(),
            throttle: self.throttle.clone(),
        }
    }
}

impl<G, E, R, T> fmt::Debug for GuardLayer<G, E, R, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardLayer").finish_non_exhaustive()
    }
}

/// The [`Service`] a [`GuardLayer`] wraps around `S`.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use std::sync::Arc;
/// use cuckoo_guard::tower::{key, GuardLayer};
/// use cuckoo_guard::CuckooFilter;
/// use tower::{service_fn, Layer};
///
/// let filter = Arc::new(CuckooFilter::with_capacity(100));
/// let inner = service_fn(|_: http::Request<()>| async { Ok::<_, Infallible>(http::Response::new(())) });
/// let service = GuardLayer::new(filter, key::path_segment::<u32>(0)).layer(inner);
/// # let _ = service;
/// ```
#[derive(Clone)]
pub struct GuardService<S, G, E, R = NotFound, T = NoThrottle> {
    inner: S,
    guard: G,
    extract: E,
    blocked: R,
    methods: Methods,
    throttle: T,
}

impl<S, G, E, R, T> GuardService<S, G, E, R, T> {
    /// The wrapped service.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cuckoo_guard::tower::{key, GuardLayer};
    /// use cuckoo_guard::CuckooFilter;
    /// use tower::Layer;
    ///
    /// let layer = GuardLayer::new(Arc::new(CuckooFilter::with_capacity(10)), key::path_segment::<u32>(0));
    /// assert_eq!(*layer.layer(7).get_ref(), 7);
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: fmt::Debug, G, E, R, T> fmt::Debug for GuardService<S, G, E, R, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, G, E, R, T, ReqB, ResB> Service<Request<ReqB>> for GuardService<S, G, E, R, T>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    E: ExtractKey,
    G: Admit<E::Key>,
    R: Blocked<ResB>,
    T: Throttling<ResB>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        if !self.methods.contains(request.method()) {
            return ResponseFuture {
                state: State::Inner {
                    future: self.inner.call(request),
                },
            };
        }
        let (mut parts, body) = request.into_parts();
        if let Some(key) = self.extract.extract(&parts) {
            let ticket = match self.throttle.screen(&parts) {
                Ok(ticket) => ticket,
                Err(refusal) => {
                    let state = match refusal.sleep() {
                        Some(sleep) => State::Held {
                            sleep,
                            refusal: Some(refusal),
                        },
                        None => State::Blocked {
                            response: Some(refusal.into_response()),
                        },
                    };
                    return ResponseFuture { state };
                }
            };
            let admission = self.guard.admit(&key);
            self.throttle.record(ticket, admission.is_blocked());
            if admission.is_blocked() {
                return ResponseFuture {
                    state: State::Blocked {
                        response: Some(self.blocked.respond(&parts)),
                    },
                };
            }
            parts.extensions.insert(admission);
        }
        ResponseFuture {
            state: State::Inner {
                future: self.inner.call(Request::from_parts(parts, body)),
            },
        }
    }
}

pin_project! {
    /// The response future of a [`GuardService`]: the blocked response at once, a throttled
    /// client's `429` once its hold has passed, or the inner service's.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::sync::Arc;
    /// use cuckoo_guard::tower::{key, GuardLayer};
    /// use cuckoo_guard::CuckooFilter;
    /// use tower::{service_fn, Layer, Service};
    ///
    /// let inner = service_fn(|_: http::Request<()>| async { Ok::<_, Infallible>(http::Response::new(())) });
    /// let mut service = GuardLayer::new(Arc::new(CuckooFilter::with_capacity(10)), key::path_segment::<u32>(0))
    ///     .layer(inner);
    /// let future = service.call(http::Request::builder().uri("/3").body(())?);
    /// # let _ = future;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub struct ResponseFuture<F, B> {
        #[pin]
        state: State<F, B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        Blocked { response: Option<Response<B>> },
        Held { sleep: Pin<Box<tokio::time::Sleep>>, refusal: Option<Refusal<B>> },
        Inner { #[pin] future: F },
    }
}

impl<F, B, Err> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<Response<B>, Err>>,
{
    type Output = Result<Response<B>, Err>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Blocked { response } => Poll::Ready(Ok(response
                .take()
                .expect("a blocked response future is not polled after it completed"))),
            StateProj::Held { sleep, refusal } => {
                std::task::ready!(sleep.as_mut().poll(cx));
                Poll::Ready(Ok(refusal
                    .take()
                    .expect("a held response future is not polled after it completed")
                    .into_response()))
            }
            StateProj::Inner { future } => future.poll(cx),
        }
    }
}

impl<F, B> fmt::Debug for ResponseFuture<F, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
