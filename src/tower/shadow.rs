//! Shadow mode: the layer asks the filter about every request as a [`GuardLayer`] does, but
//! calls the service for each, and counts what it would have blocked ([`ShadowStats`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use super::{Admit, ExtractKey, GuardLayer, Methods};
use crate::guard::shadow::ShadowLog;
use crate::guard::Admission;
use crate::sharded::{bump, Sharded};
use crate::sync::AtomicU64;

/// A [`Layer`] that runs a guard in *shadow mode*, made by [`GuardLayer::shadow`]: every
/// request reaches the service, and the layer counts the requests it would have blocked and,
/// of those, the ones the service then answered with a success (`2xx`): **would-be false
/// negatives**, a key the filter lacks though the handler found it (a row written around
/// the guard, or an extractor that does not yield the handler's key). Each would-be false
/// negative is also reported on standard error with the key's `Debug` text (each key once,
/// at most 64 keys per layer; the counter counts all), which is why the key type must be
/// `Debug`.
///
/// A request the filter rules out carries [`Admission::Shadow`] in its extensions (others
/// carry their admission as under [`GuardLayer`]), so a handler that finishes its lookup
/// with `get_admitted` reads the store for it, and the guard counts what it finds
/// ([`GuardStats::shadow_false_negatives`](crate::guard::GuardStats::shadow_false_negatives)).
/// Clones of the layer, and the services it makes, share one set of counters: keep a clone
/// to read [`stats`](Self::stats), or publish them with `cuckoo_guard::metrics::record_shadow`
/// (feature `metrics`). Once they show no would-be false negatives over a representative
/// period, remove `.shadow()` and the layer blocks.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use cuckoo_guard::guard::{CacheGuard, MemoryStore, Store};
/// use cuckoo_guard::tower::{key, GuardLayer};
/// use cuckoo_guard::CuckooFilter;
/// use http::{Request, Response, StatusCode};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// let guard = CacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u64, String>::new());
/// guard.warm_up(10, |_| {})?;
/// guard.store().put(&7, &"ada".to_string())?; // a row the filter never saw
///
/// let shadow = GuardLayer::new(guard.clone(), key::path_segment::<u64>(1)).shadow();
/// let handler = guard.clone();
/// let service = shadow.layer(service_fn(move |request: Request<()>| {
///     let id: u64 = request.uri().path()[7..].parse().unwrap();
///     let found = handler.store().get(&id).unwrap();
///     let mut response = Response::new(found.unwrap_or_default());
///     if response.body().is_empty() {
///         *response.status_mut() = StatusCode::NOT_FOUND;
///     }
///     async move { Ok::<_, Infallible>(response) }
/// }));
///
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let get = |uri: &str| Request::get(uri).body(()).unwrap();
/// let found = service.clone().oneshot(get("/users/7")).await?;
/// assert_eq!(found.body(), "ada"); // served, though the filter would have blocked it
/// let absent = service.oneshot(get("/users/8")).await?;
/// assert_eq!(absent.status(), StatusCode::NOT_FOUND); // the handler's own 404
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// let stats = shadow.stats();
/// assert_eq!((stats.would_block, stats.would_be_false_negatives), (2, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ShadowLayer<G, E> {
    guard: G,
    extract: E,
    methods: Methods,
    shared: Arc<Shared>,
}

/// What a [`ShadowLayer`] and its services counted, from [`ShadowLayer::stats`] or
/// [`ShadowService::stats`].
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use cuckoo_guard::tower::{key, GuardLayer, ShadowStats};
/// use cuckoo_guard::CuckooFilter;
///
/// let filter = Arc::new(CuckooFilter::with_capacity(10));
/// let shadow = GuardLayer::new(filter, key::path_segment::<u64>(1)).shadow();
/// let stats: ShadowStats = shadow.stats();
/// assert_eq!((stats.checked, stats.would_block, stats.would_be_false_negatives), (0, 0, 0));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShadowStats {
    /// Requests whose key the layer asked the filter about (a checked method, a key found).
    pub checked: u64,
    /// Of `checked`, those the filter ruled out: a blocking layer would have answered them
    /// without calling the service.
    pub would_block: u64,
    /// Of `would_block`, those the service answered with a success (`2xx`): requests a
    /// blocking layer would have answered "not found" wrongly. Turn blocking on only while
    /// this stays 0.
    pub would_be_false_negatives: u64,
}

/// The counters and the report budget the layer's clones and services share.
#[derive(Debug)]
struct Shared {
    counters: Sharded<Counters>,
    log: ShadowLog,
}

#[derive(Debug, Default)]
struct Counters {
    checked: AtomicU64,
    would_block: AtomicU64,
    false_negatives: AtomicU64,
}

impl Shared {
    fn stats(&self) -> ShadowStats {
        ShadowStats {
            checked: self.counters.sum(|c| &c.checked),
            would_block: self.counters.sum(|c| &c.would_block),
            would_be_false_negatives: self.counters.sum(|c| &c.false_negatives),
        }
    }
}

impl<G, E> ShadowLayer<G, E> {
    pub(super) fn new(guard: G, extract: E, methods: Methods) -> Self {
        ShadowLayer {
            guard,
            extract,
            methods,
            shared: Arc::new(Shared {
                counters: Sharded::new(Counters::default),
                log: ShadowLog::default(),
            }),
        }
    }

    /// What this layer, its clones and the services they made have counted so far.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::sync::Arc;
    /// use cuckoo_guard::tower::{key, GuardLayer};
    /// use cuckoo_guard::CuckooFilter;
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// let filter = Arc::new(CuckooFilter::with_capacity(10));
    /// let shadow = GuardLayer::new(filter, key::header::<u64>("x-id")).shadow();
    /// let service = shadow.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(()))
    /// }));
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let request = http::Request::get("/").header("x-id", "5").body(())?;
    /// service.oneshot(request).await?; // absent from the filter, and answered 200
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// assert_eq!(shadow.stats().would_be_false_negatives, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> ShadowStats {
        self.shared.stats()
    }
}

impl<S, G: Clone, E: Clone> Layer<S> for ShadowLayer<G, E> {
    type Service = ShadowService<S, G, E>;

    fn layer(&self, inner: S) -> Self::Service {
        ShadowService {
            inner,
            guard: self.guard.clone(),
            extract: self.extract.clone(),
            methods: self.methods.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<G, E> fmt::Debug for ShadowLayer<G, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShadowLayer")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// The [`Service`] a [`ShadowLayer`] wraps around `S`: calls `S` for every request.
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
/// let service = GuardLayer::new(filter, key::path_segment::<u32>(0)).shadow().layer(inner);
/// assert_eq!(service.stats().checked, 0);
/// ```
#[derive(Clone)]
pub struct ShadowService<S, G, E> {
    inner: S,
    guard: G,
    extract: E,
    methods: Methods,
    shared: Arc<Shared>,
}

impl<S, G, E> ShadowService<S, G, E> {
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
    /// let filter = Arc::new(CuckooFilter::with_capacity(10));
    /// let shadow = GuardLayer::new(filter, key::path_segment::<u32>(0)).shadow();
    /// assert_eq!(*shadow.layer(7).get_ref(), 7);
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// What the layer this service came from, its clones and their services have counted
    /// (as [`ShadowLayer::stats`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cuckoo_guard::tower::{key, GuardLayer};
    /// use cuckoo_guard::CuckooFilter;
    /// use tower::Layer;
    ///
    /// let filter = Arc::new(CuckooFilter::with_capacity(10));
    /// let shadow = GuardLayer::new(filter, key::path_segment::<u32>(0)).shadow();
    /// assert_eq!(shadow.layer(()).stats(), shadow.stats());
    /// ```
    pub fn stats(&self) -> ShadowStats {
        self.shared.stats()
    }
}

impl<S: fmt::Debug, G, E> fmt::Debug for ShadowService<S, G, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShadowService")
            .field("inner", &self.inner)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<S, G, E, ReqB, ResB> Service<Request<ReqB>> for ShadowService<S, G, E>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    E: ExtractKey,
    E::Key: fmt::Debug,
    G: Admit<E::Key>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ShadowFuture<S::Future, E::Key>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        if !self.methods.contains(request.method()) {
            return ShadowFuture {
                future: self.inner.call(request),
                watch: None,
            };
        }
        let (mut parts, body) = request.into_parts();
        let mut watch = None;
        if let Some(key) = self.extract.extract(&parts) {
            let counters = self.shared.counters.local();
            bump(&counters.checked);
            let admission = match self.guard.admit_shadow(&key) {
                // An `Admit` of its own that answers `Blocked` here: still a shadow lookup.
                Admission::Blocked | Admission::Shadow => {
                    bump(&counters.would_block);
                    watch = Some(Watch {
                        key,
                        shared: Arc::clone(&self.shared),
                    });
                    Admission::Shadow
                }
                other => other,
            };
            parts.extensions.insert(admission);
        }
        ShadowFuture {
            future: self.inner.call(Request::from_parts(parts, body)),
            watch,
        }
    }
}

/// A request the filter ruled out, watched until its response.
struct Watch<K> {
    key: K,
    shared: Arc<Shared>,
}

pin_project! {
    /// The response future of a [`ShadowService`]: the inner service's, whose response
    /// is checked if the filter ruled the request's key out.
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
    ///     .shadow()
    ///     .layer(inner);
    /// let future = service.call(http::Request::builder().uri("/3").body(())?);
    /// # let _ = future;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub struct ShadowFuture<F, K> {
        #[pin]
        future: F,
        watch: Option<Watch<K>>,
    }
}

impl<F, K, B, Err> Future for ShadowFuture<F, K>
where
    F: Future<Output = Result<Response<B>, Err>>,
    K: fmt::Debug,
{
    type Output = Result<Response<B>, Err>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = std::task::ready!(this.future.poll(cx));
        if let (Some(watch), Ok(response)) = (this.watch.take(), &output) {
            if response.status().is_success() {
                bump(&watch.shared.counters.local().false_negatives);
                watch
                    .shared
                    .log
                    .report(&watch.key, "the service answered it with a success (2xx)");
            }
        }
        Poll::Ready(output)
    }
}

impl<F, K> fmt::Debug for ShadowFuture<F, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShadowFuture")
            .field("watched", &self.watch.is_some())
            .finish_non_exhaustive()
    }
}

impl<G, E, R> GuardLayer<G, E, R> {
    /// This layer in *shadow mode* ([`ShadowLayer`]): it asks the filter about the same
    /// requests (the same extractor and [`methods`](Self::methods)) but calls the service for
    /// every one, counting those it would have blocked and which of those the service then
    /// answered with a success. The blocked response ([`on_blocked`](Self::on_blocked)) is
    /// not used. Roll out with it, then drop `.shadow()` once its
    /// [`would_be_false_negatives`](ShadowStats::would_be_false_negatives) stay 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use axum::{routing::get, Router};
    /// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
    /// use cuckoo_guard::tower::{key, GuardLayer};
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let guard = CacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u64, String>::new());
    /// let shadow = GuardLayer::new(guard, key::path_segment::<u64>(1)).shadow();
    /// let app: Router = Router::new()
    ///     .route("/users/{id}", get(|| async { "found" }))
    ///     .route_layer(shadow.clone()); // keep a clone to read the counters
    /// assert_eq!(shadow.stats().would_block, 0);
    /// ```
    pub fn shadow(self) -> ShadowLayer<G, E> {
        ShadowLayer::new(self.guard, self.extract, self.methods)
    }
}
