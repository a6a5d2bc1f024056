//! The tower layer: blocked requests never reach the service, passed ones carry their
//! admission, requests without a key pass untouched; it composes with axum's `route_layer` and
//! `ServiceBuilder`.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Extension, Router};
use cuckoo_guard::guard::{Admission, AsyncCacheGuard, CacheGuard, MemoryStore};
use cuckoo_guard::tower::{key, GuardLayer};
use cuckoo_guard::CuckooFilter;
use http::request::Parts;
use http::{Request, Response, StatusCode};
use tower::{service_fn, ServiceBuilder, ServiceExt};

type Guard = CacheGuard<MemoryStore<u64, String>>;

fn guard(rows: impl IntoIterator<Item = u64>) -> Guard {
    let store = MemoryStore::from_rows(rows.into_iter().map(|id| (id, format!("user {id}"))));
    let guard = CacheGuard::new(CuckooFilter::with_capacity(10_000), store);
    guard.warm_up(1_000, |_| {}).unwrap();
    guard
}

async fn user(
    State(guard): State<Guard>,
    Path(id): Path<u64>,
    admission: Option<Extension<Admission>>,
) -> Result<String, StatusCode> {
    let Extension(admission) = admission.ok_or(StatusCode::INTERNAL_SERVER_ERROR)?;
    guard
        .get_admitted(&id, admission)
        .map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?
        .ok_or(StatusCode::NOT_FOUND)
}

fn app(guard: &Guard, handled: &Arc<AtomicUsize>) -> Router {
    let handled = Arc::clone(handled);
    Router::new()
        .route(
            "/users/{id}",
            get(move |state, path, admission| {
                handled.fetch_add(1, Ordering::Relaxed);
                user(state, path, admission)
            }),
        )
        .route("/health", get(|| async { "ok" }))
        .route_layer(GuardLayer::new(guard.clone(), key::path_segment::<u64>(1)))
        .with_state(guard.clone())
}

async fn status(app: &Router, uri: &str) -> (StatusCode, Vec<u8>) {
    let response = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, body.to_vec())
}

#[tokio::test]
async fn absent_keys_are_answered_without_the_handler() {
    let guard = guard(0..1_000);
    let handled = Arc::new(AtomicUsize::new(0));
    let app = app(&guard, &handled);

    for id in 0..1_000 {
        let (code, body) = status(&app, &format!("/users/{id}")).await;
        assert_eq!(code, StatusCode::OK, "existing id {id}");
        assert_eq!(body, format!("user {id}").into_bytes());
    }
    assert_eq!(handled.load(Ordering::Relaxed), 1_000);

    let mut not_found = 0;
    for id in 1_000_000..1_010_000u64 {
        let (code, body) = status(&app, &format!("/users/{id}")).await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert!(body.is_empty());
        not_found += 1;
    }
    let stats = guard.stats();
    // Only the filter's false positives reached the handler, and each of them was counted
    // once: by the layer as a pass, by the handler as a false positive.
    let reached = handled.load(Ordering::Relaxed) - 1_000;
    assert_eq!(reached as u64, stats.false_positives);
    assert_eq!(stats.blocked + stats.false_positives, not_found);
    assert_eq!(stats.lookups, 11_000);
    assert!(stats.blocked > 9_900, "{stats:?}");
}

#[tokio::test]
async fn requests_without_a_key_and_unguarded_routes_pass() {
    let guard = guard(0..10);
    let handled = Arc::new(AtomicUsize::new(0));
    let app = app(&guard, &handled);
    assert_eq!(status(&app, "/health").await.0, StatusCode::OK);
    // "abc" does not parse as u64: the layer lets it through, the handler's `Path` rejects it.
    assert_eq!(status(&app, "/users/abc").await.0, StatusCode::BAD_REQUEST);
    // No route: the route layer never runs.
    assert_eq!(status(&app, "/nothing/5").await.0, StatusCode::NOT_FOUND);
    assert_eq!(guard.stats().lookups, 0);
}

#[tokio::test]
async fn a_created_key_passes_at_once_and_a_deleted_one_is_blocked() {
    let guard = guard(0..10);
    let handled = Arc::new(AtomicUsize::new(0));
    let app = app(&guard, &handled);
    assert_eq!(status(&app, "/users/500").await.0, StatusCode::NOT_FOUND);
    guard.put(&500, &"new".to_string()).unwrap();
    assert_eq!(
        status(&app, "/users/500").await,
        (StatusCode::OK, b"new".to_vec())
    );
    guard.delete(&500).unwrap();
    assert_eq!(status(&app, "/users/500").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_warming_guard_passes_everything() {
    let store = MemoryStore::from_rows([(1u64, "one".to_string())]);
    let guard = CacheGuard::new(CuckooFilter::with_capacity(100), store);
    let handled = Arc::new(AtomicUsize::new(0));
    let app = app(&guard, &handled);
    assert_eq!(status(&app, "/users/1").await.0, StatusCode::OK);
    assert_eq!(status(&app, "/users/2").await.0, StatusCode::NOT_FOUND);
    assert_eq!(handled.load(Ordering::Relaxed), 2);
    assert_eq!(guard.stats().passed_while_warming, 2);
}

#[tokio::test]
async fn the_async_guard_and_a_custom_response_through_service_builder() {
    let store = MemoryStore::from_rows([("ada".to_string(), ())]);
    let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(100), store);
    guard.warm_up(10, |_| {}).await.unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let service = ServiceBuilder::new()
        .layer(
            GuardLayer::new(guard.clone(), key::header::<String>("x-user")).on_blocked(
                |parts: &Parts| {
                    let mut response = Response::new(format!("no {}", parts.uri.path()));
                    *response.status_mut() = StatusCode::FORBIDDEN;
                    response
                },
            ),
        )
        .service(service_fn(move |request: Request<()>| {
            counted.fetch_add(1, Ordering::Relaxed);
            let admission = request.extensions().get::<Admission>().copied();
            async move { Ok::<_, Infallible>(Response::new(format!("{admission:?}"))) }
        }));
    let ask = |user: Option<&str>| {
        let mut request = Request::get("/p");
        if let Some(user) = user {
            request = request.header("x-user", user);
        }
        request.body(()).unwrap()
    };

    let found = service.clone().oneshot(ask(Some("ada"))).await.unwrap();
    assert_eq!(found.body(), "Some(Pass)");
    let blocked = service.clone().oneshot(ask(Some("bob"))).await.unwrap();
    assert_eq!(blocked.status(), StatusCode::FORBIDDEN);
    assert_eq!(blocked.body(), "no /p");
    let unkeyed = service.clone().oneshot(ask(None)).await.unwrap();
    assert_eq!(unkeyed.body(), "None");
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    assert_eq!(guard.stats().blocked, 1);
}

#[test]
fn the_layered_service_is_clone_send_and_sync() {
    fn check<T: Clone + Send + Sync + 'static>(_: &T) {}
    let guard = guard(0..1);
    let handled = Arc::new(AtomicUsize::new(0));
    check(&app(&guard, &handled));
    let layer = GuardLayer::new(
        Arc::new(CuckooFilter::with_capacity(10)),
        key::query::<u32>("id"),
    );
    check(&layer);
    let service = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(()))
        }));
    check(&service);
}

async fn send(app: &Router, method: http::Method, uri: &str) -> StatusCode {
    app.clone()
        .oneshot(
            Request::builder()
                .method(method)
                .uri(uri)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn writes_pass_by_default_and_chosen_methods_are_checked() {
    let guard = guard(0..10);
    let created = guard.clone();
    let put = move |Path(id): Path<u64>| async move {
        created.put(&id, &"new".to_string()).unwrap();
        StatusCode::CREATED
    };
    let app = Router::new()
        .route(
            "/users/{id}",
            get(|| async { "found" })
                .put(put)
                .delete(|| async { "deleted" }),
        )
        .route_layer(GuardLayer::new(guard.clone(), key::path_segment::<u64>(1)));
    // A PUT of a new key creates it: the layer must let it through.
    assert_eq!(
        send(&app, http::Method::PUT, "/users/77").await,
        StatusCode::CREATED
    );
    assert_eq!(
        send(&app, http::Method::GET, "/users/77").await,
        StatusCode::OK
    );
    assert_eq!(
        send(&app, http::Method::HEAD, "/users/78").await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        send(&app, http::Method::DELETE, "/users/78").await,
        StatusCode::OK
    );

    let app = Router::new()
        .route(
            "/users/{id}",
            get(|| async { "found" }).delete(|| async { "deleted" }),
        )
        .route_layer(
            GuardLayer::new(guard.clone(), key::path_segment::<u64>(1))
                .methods([http::Method::GET, http::Method::DELETE]),
        );
    assert_eq!(
        send(&app, http::Method::DELETE, "/users/78").await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        send(&app, http::Method::DELETE, "/users/7").await,
        StatusCode::OK
    );
}

#[tokio::test]
async fn in_a_nested_router_the_layer_sees_the_path_without_the_prefix() {
    let guard = guard(0..10);
    let users = Router::new()
        .route("/users/{id}", get(|| async { "found" }))
        .route_layer(GuardLayer::new(guard.clone(), key::path_segment::<u64>(1)));
    let app = Router::new().nest("/tenants/{tenant}", users);
    assert_eq!(
        send(&app, http::Method::GET, "/tenants/500/users/3").await,
        StatusCode::OK
    );
    assert_eq!(
        send(&app, http::Method::GET, "/tenants/3/users/500").await,
        StatusCode::NOT_FOUND
    );
}

/// A layer throttling by the `x-client` header: at least 20 blocked requests making half a
/// client's requests within a window start a 10-second cool-down.
fn throttled_app(
    guard: &Guard,
) -> (
    Router,
    cuckoo_guard::tower::throttle::Throttle<key::Header<String>>,
) {
    // A minute's window, so that a slow machine cannot split the counts the tests need.
    let throttle =
        cuckoo_guard::tower::throttle::Throttle::builder(key::header::<String>("x-client"))
            .window(std::time::Duration::from_secs(60))
            .build()
            .unwrap();
    (app_throttled_by(guard, throttle.clone()), throttle)
}

/// The users route behind a layer with `throttle`.
fn app_throttled_by(
    guard: &Guard,
    throttle: cuckoo_guard::tower::throttle::Throttle<key::Header<String>>,
) -> Router {
    Router::new()
        .route("/users/{id}", get(user))
        .route_layer(GuardLayer::new(guard.clone(), key::path_segment::<u64>(1)).throttle(throttle))
        .with_state(guard.clone())
}

async fn status_as(app: &Router, client: &str, uri: &str) -> Response<Body> {
    app.clone()
        .oneshot(
            Request::get(uri)
                .header("x-client", client)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn a_client_asking_for_absent_keys_is_throttled_and_others_are_not() {
    let guard = guard(0..1_000);
    let (app, throttle) = throttled_app(&guard);
    // The attacker: absent ids, answered 404 until the 20th blocked request.
    for id in 0..20u64 {
        let response = status_as(&app, "attacker", &format!("/users/{}", 1_000_000 + id)).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "request {id}");
    }
    let lookups = guard.stats().lookups;
    let throttled = status_as(&app, "attacker", "/users/5").await;
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = throttled.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=10).contains(&retry), "Retry-After {retry}");
    assert_eq!(guard.stats().lookups, lookups, "answered before the filter");
    // A client asking only for existing ids, at any rate, is never throttled.
    for id in 0..2_000u64 {
        let response = status_as(&app, "reader", &format!("/users/{}", id % 1_000)).await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    // Nor is one whose few absent ids stay under the minimum.
    for id in 0..19u64 {
        let response = status_as(&app, "typos", &format!("/users/{}", 2_000_000 + id)).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }
    assert_eq!(
        status_as(&app, "typos", "/users/1").await.status(),
        StatusCode::OK
    );
    // Requests without a client key are not counted.
    for id in 0..100u64 {
        let (status, _) = status(&app, &format!("/users/{}", 3_000_000 + id)).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    let stats = throttle.stats();
    assert_eq!((stats.clients_throttled, stats.throttled_requests), (1, 1));
}

#[tokio::test]
async fn a_client_whose_blocked_share_stays_under_the_threshold_is_not_throttled() {
    let guard = guard(0..1_000);
    let (app, throttle) = throttled_app(&guard);
    // 30 absent ids among 100 requests: a share of 0.3, under the default 0.5.
    for i in 0..100u64 {
        let uri = if i % 10 < 3 {
            format!("/users/{}", 5_000_000 + i)
        } else {
            format!("/users/{}", i)
        };
        let response = status_as(&app, "mixed", &uri).await;
        assert_ne!(
            response.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "request {i}"
        );
    }
    assert_eq!(throttle.stats().clients_throttled, 0);
}

/// A throttle holding each `429` for 2 seconds, at most one at a time; tokio's clock is
/// paused, so the holds pass in virtual time.
#[tokio::test(start_paused = true)]
async fn a_held_answer_waits_out_its_hold_and_past_max_held_is_sent_at_once() {
    use cuckoo_guard::tower::throttle::Throttle;
    use std::time::Duration;
    use tokio::time::Instant;

    let guard = guard(0..1_000);
    let throttle = Throttle::builder(key::header::<String>("x-client"))
        .window(Duration::from_secs(60))
        .hold(Duration::from_secs(2))
        .max_held(1)
        .build()
        .unwrap();
    let app = app_throttled_by(&guard, throttle.clone());
    for id in 0..20u64 {
        let response = status_as(&app, "attacker", &format!("/users/{}", 1_000_000 + id)).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "request {id}");
    }
    let started = Instant::now();
    let held = tokio::spawn({
        let app = app.clone();
        async move { status_as(&app, "attacker", "/users/1").await }
    });
    for _ in 0..100 {
        if throttle.stats().held_requests == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(throttle.stats().held_requests, 1, "the first 429 is held");
    // The one place is taken: the next 429 is sent at once, and a reader is served meanwhile.
    let at_once = status_as(&app, "attacker", "/users/2").await;
    assert_eq!(at_once.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after = |response: &Response<Body>| -> u64 {
        response.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    // The 10-second cool-down, counted from when each answer is sent. The cool-down runs on
    // the real clock, where the hold runs on the paused one: up to 2 s of a stall pass.
    assert!((8..=10).contains(&retry_after(&at_once)), "{at_once:?}");
    assert_eq!(
        status_as(&app, "reader", "/users/3").await.status(),
        StatusCode::OK
    );
    assert_eq!(started.elapsed(), Duration::ZERO, "neither waited");
    assert!(!held.is_finished(), "the held 429 waits for its hold");
    let held = held.await.unwrap();
    assert_eq!(held.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(retry_after(&held) <= 8, "{held:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // Its place was given back: the next 429 is held again.
    let again = Instant::now();
    let response = status_as(&app, "attacker", "/users/4").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        again.elapsed() >= Duration::from_secs(2),
        "{:?}",
        again.elapsed()
    );
    let stats = throttle.stats();
    assert_eq!((stats.throttled_requests, stats.held_requests), (3, 2));
}

/// Outside a tokio runtime there is no timer to hold with: a throttled client's `429` is
/// ready at the first poll, and no hold is counted.
#[test]
fn outside_a_runtime_a_429_is_sent_at_once() {
    use cuckoo_guard::tower::throttle::Throttle;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;
    use tower::{Layer, Service};

    let throttle = Throttle::builder(key::header::<String>("x-client"))
        .window(Duration::from_secs(60))
        .hold(Duration::from_secs(5))
        .build()
        .unwrap();
    let inner = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
    let mut service = GuardLayer::new(
        Arc::new(CuckooFilter::with_capacity(1_000)),
        key::path_segment::<u64>(0),
    )
    .throttle(throttle.clone())
    .layer(inner);
    let mut context = Context::from_waker(Waker::noop());
    let mut statuses = Vec::new();
    for id in 0..21u64 {
        let request = Request::get(format!("/{id}"))
            .header("x-client", "attacker")
            .body(())
            .unwrap();
        let mut future = std::pin::pin!(service.call(request));
        match future.as_mut().poll(&mut context) {
            Poll::Ready(response) => statuses.push(response.unwrap().status()),
            Poll::Pending => panic!("request {id} was held outside a runtime"),
        }
    }
    assert!(
        statuses[..20].iter().all(|s| *s == StatusCode::NOT_FOUND),
        "{statuses:?}"
    );
    assert_eq!(statuses[20], StatusCode::TOO_MANY_REQUESTS);
    let stats = throttle.stats();
    assert_eq!((stats.throttled_requests, stats.held_requests), (1, 0));
}

#[test]
fn throttle_settings_out_of_range_are_errors() {
    use cuckoo_guard::tower::throttle::{Throttle, ThrottleError};
    use std::time::Duration;
    let throttle = || Throttle::builder(key::header::<String>("x-client"));
    assert!(matches!(
        throttle().blocked_share(0.0).build(),
        Err(ThrottleError::BlockedShare(_))
    ));
    assert!(matches!(
        throttle().blocked_share(f64::NAN).build(),
        Err(ThrottleError::BlockedShare(_))
    ));
    assert!(throttle().blocked_share(1.0).build().is_ok());
    assert!(matches!(
        throttle().window(Duration::ZERO).build(),
        Err(ThrottleError::ZeroDuration)
    ));
    assert!(matches!(
        throttle().cool_down(Duration::ZERO).build(),
        Err(ThrottleError::ZeroDuration)
    ));
    assert!(matches!(
        throttle().max_clients(0).build(),
        Err(ThrottleError::ZeroClients)
    ));
    assert!(matches!(
        throttle().hold(Duration::from_secs(10)).build(),
        Err(ThrottleError::HoldNotShorter)
    ));
    assert!(throttle()
        .hold(Duration::from_millis(9_999))
        .build()
        .is_ok());
}
