//! Shadow mode: the guards' `shadow_get` and the tower layer's `shadow()` always reach the
//! store (the service), count what a blocking guard would have blocked, and which of those
//! were found: rows written around the guard, which the filter lacks.

use std::time::Duration;

use cuckoo_guard::guard::{Admission, AsyncCacheGuard, AsyncStore, CacheGuard, MemoryStore, Store};
use cuckoo_guard::CuckooFilter;

/// Bounds every awaited call, so a test fails instead of hanging.
const LIMIT: Duration = Duration::from_secs(30);

type Guard = CacheGuard<MemoryStore<u64, String>>;

fn row(id: u64) -> String {
    format!("user {id}")
}

/// A warm guard over rows `0..100`.
fn guard() -> Guard {
    let store = MemoryStore::from_rows((0..100).map(|id| (id, row(id))));
    let guard = CacheGuard::new(CuckooFilter::with_capacity(10_000), store);
    guard.warm_up(1_000, |_| {}).unwrap();
    guard
}

/// The first key from `from` the filter rules out (the filter's false positives pass, so a
/// test picks keys it rules out rather than assume them).
fn ruled_out(may_contain: impl Fn(&u64) -> bool, from: u64) -> u64 {
    (from..from + 1_000)
        .find(|key| !may_contain(key))
        .expect("a filter of 100 keys rules out most of 1,000 others")
}

#[test]
fn shadow_get_reads_the_store_for_keys_the_filter_rules_out() {
    let guard = guard();
    let around = ruled_out(|k| guard.may_contain(k), 1_000);
    let absent = ruled_out(|k| guard.may_contain(k), around + 1);
    // Written around the guard: in the store, not in the filter.
    Store::put(guard.store(), &around, &row(around)).unwrap();

    assert_eq!(
        guard.get(&around).unwrap(),
        None,
        "blocking: a false negative"
    );
    assert_eq!(guard.stats().blocked, 1);

    assert_eq!(guard.shadow_get(&around).unwrap(), Some(row(around)));
    assert_eq!(guard.shadow_get(&absent).unwrap(), None);
    assert_eq!(guard.shadow_get(&7).unwrap(), Some(row(7)));
    let stats = guard.stats();
    assert_eq!(stats.shadow_would_block, 2, "{stats:?}");
    assert_eq!(stats.shadow_false_negatives, 1, "{stats:?}");
    assert_eq!(
        stats.blocked, 1,
        "shadow lookups are not blocked: {stats:?}"
    );
    assert_eq!(stats.lookups, 4, "{stats:?}");
    assert_eq!(stats.store_hits, 2, "{stats:?}");
    assert_eq!(stats.false_positives, 0, "{stats:?}");
    // The absent key the filter ruled out counts as ruled out, not as a false positive.
    assert_eq!(stats.observed_false_positive_rate, 0.0);

    // A second lookup of the same key counts again (the log reports it once).
    guard.shadow_get(&around).unwrap();
    assert_eq!(guard.stats().shadow_false_negatives, 2);
}

#[test]
fn shadow_admission_through_get_admitted_counts_what_the_store_finds() {
    let guard = guard();
    let around = ruled_out(|k| guard.may_contain(k), 5_000);
    Store::put(guard.store(), &around, &row(around)).unwrap();
    let admission = guard.admit_shadow(&around);
    assert_eq!(admission, Admission::Shadow);
    assert!(!admission.is_blocked());
    assert_eq!(guard.admit_shadow(&3), Admission::Pass);
    assert_eq!(
        guard.get_admitted(&around, admission).unwrap(),
        Some(row(around))
    );
    let stats = guard.stats();
    assert_eq!(
        (stats.shadow_would_block, stats.shadow_false_negatives),
        (1, 1)
    );
    assert_eq!((stats.lookups, stats.passed, stats.blocked), (2, 1, 0));
}

#[test]
fn a_warming_guard_counts_no_would_be_blocks() {
    let store = MemoryStore::from_rows([(1u64, row(1))]);
    let guard = CacheGuard::new(CuckooFilter::with_capacity(100), store);
    assert_eq!(guard.shadow_get(&1).unwrap(), Some(row(1)));
    assert_eq!(guard.shadow_get(&2).unwrap(), None);
    let stats = guard.stats();
    assert_eq!(stats.passed_while_warming, 2);
    assert_eq!(
        (stats.shadow_would_block, stats.shadow_false_negatives),
        (0, 0)
    );
}

#[tokio::test]
async fn the_async_guard_shadow_get_counts_alike() {
    let store = MemoryStore::from_rows((0..100u64).map(|id| (id, row(id))));
    let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10_000), store);
    tokio::time::timeout(LIMIT, guard.warm_up(1_000, |_| {}))
        .await
        .unwrap()
        .unwrap();
    let around = ruled_out(|k| guard.may_contain(k), 1_000);
    let absent = ruled_out(|k| guard.may_contain(k), around + 1);
    AsyncStore::put(guard.store(), &around, &row(around))
        .await
        .unwrap();

    let shared = &guard;
    let shadow_get = |key: u64| async move {
        tokio::time::timeout(LIMIT, shared.shadow_get(&key))
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(shadow_get(around).await, Some(row(around)));
    assert_eq!(shadow_get(absent).await, None);
    assert_eq!(shadow_get(5).await, Some(row(5)));
    assert_eq!(guard.admit_shadow(&absent), Admission::Shadow);
    let stats = guard.stats();
    assert_eq!(stats.shadow_would_block, 3, "{stats:?}");
    assert_eq!(stats.shadow_false_negatives, 1, "{stats:?}");
    assert_eq!((stats.blocked, stats.lookups), (0, 4), "{stats:?}");

    // Blocking, the same key is a false negative.
    assert_eq!(
        tokio::time::timeout(LIMIT, guard.get(&around))
            .await
            .unwrap()
            .unwrap(),
        None
    );
}

#[cfg(feature = "tower")]
mod layer {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use axum::body::Body;
    use axum::extract::{Path, State};
    use axum::routing::get;
    use axum::{Extension, Router};
    use cuckoo_guard::tower::{key, Admit, GuardLayer, ShadowLayer, ShadowStats};
    use http::{Method, Request, Response, StatusCode};
    use tower::util::BoxCloneService;
    use tower::{service_fn, Layer, ServiceBuilder, ServiceExt};

    use super::*;

    /// The handler finishes the lookup with the admission the layer left.
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

    /// The guarded routes, without their layer: `GET` finds, `PUT` creates through the guard.
    fn routes(handled: &Arc<AtomicUsize>) -> Router<Guard> {
        let handled = Arc::clone(handled);
        Router::new().route(
            "/users/{id}",
            get(move |state, path, admission| {
                handled.fetch_add(1, Ordering::Relaxed);
                user(state, path, admission)
            })
            .put(
                |State(guard): State<Guard>, Path(id): Path<u64>| async move {
                    guard.put(&id, &row(id)).unwrap();
                    StatusCode::CREATED
                },
            ),
        )
    }

    async fn send(app: &Router, method: Method, uri: &str) -> (StatusCode, Vec<u8>) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        let response = tokio::time::timeout(LIMIT, app.clone().oneshot(request))
            .await
            .expect("the service answers in time")
            .unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, body.to_vec())
    }

    #[tokio::test]
    async fn shadow_mode_serves_a_row_written_around_the_guard_and_counts_it() {
        let guard = guard();
        let around = ruled_out(|k| guard.may_contain(k), 1_000);
        let absent = ruled_out(|k| guard.may_contain(k), around + 1);
        Store::put(guard.store(), &around, &row(around)).unwrap();
        let handled = Arc::new(AtomicUsize::new(0));

        // Shadow off: the layer answers 404 and the handler never runs.
        let blocking = routes(&handled)
            .route_layer(GuardLayer::new(guard.clone(), key::path_segment::<u64>(1)))
            .with_state(guard.clone());
        let (code, body) = send(&blocking, Method::GET, &format!("/users/{around}")).await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert!(body.is_empty());
        assert_eq!(handled.load(Ordering::Relaxed), 0);
        assert_eq!(guard.stats().blocked, 1);

        // Shadow on: the same request reaches the handler, which finds the row.
        let shadow = GuardLayer::new(guard.clone(), key::path_segment::<u64>(1)).shadow();
        let shadowed = routes(&handled)
            .route_layer(shadow.clone())
            .with_state(guard.clone());
        assert_eq!(
            send(&shadowed, Method::GET, &format!("/users/{around}")).await,
            (StatusCode::OK, row(around).into_bytes())
        );
        let stats = shadow.stats();
        assert_eq!(
            (
                stats.checked,
                stats.would_block,
                stats.would_be_false_negatives
            ),
            (1, 1, 1)
        );

        // A truly absent key: would be blocked, and the handler's 404 is no false negative.
        assert_eq!(
            send(&shadowed, Method::GET, &format!("/users/{absent}"))
                .await
                .0,
            StatusCode::NOT_FOUND
        );
        // A key in the filter: checked, not a would-be block.
        assert_eq!(
            send(&shadowed, Method::GET, "/users/7").await,
            (StatusCode::OK, row(7).into_bytes())
        );
        assert_eq!(handled.load(Ordering::Relaxed), 3);
        let stats = shadow.stats();
        assert_eq!(stats.checked, 3, "{stats:?}");
        assert_eq!(stats.would_block, 2, "{stats:?}");
        assert_eq!(stats.would_be_false_negatives, 1, "{stats:?}");

        // The handler's `get_admitted` read the store for the ruled-out keys, and the guard
        // counted them as shadow lookups, not blocked ones.
        let guard_stats = guard.stats();
        assert_eq!(guard_stats.shadow_would_block, 2, "{guard_stats:?}");
        assert_eq!(guard_stats.shadow_false_negatives, 1, "{guard_stats:?}");
        assert_eq!(guard_stats.blocked, 1, "only the blocking layer's request");

        // The blocking layer still blocks it after the shadow run.
        assert_eq!(
            send(&blocking, Method::GET, &format!("/users/{around}"))
                .await
                .0,
            StatusCode::NOT_FOUND
        );
        assert_eq!(handled.load(Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn unchecked_methods_and_keyless_requests_are_not_counted() {
        let guard = guard();
        let handled = Arc::new(AtomicUsize::new(0));
        let shadow = GuardLayer::new(guard.clone(), key::path_segment::<u64>(1)).shadow();
        let shadowed = routes(&handled)
            .route_layer(shadow.clone())
            .with_state(guard.clone());
        let new = ruled_out(|k| guard.may_contain(k), 9_000);
        assert_eq!(
            send(&shadowed, Method::PUT, &format!("/users/{new}"))
                .await
                .0,
            StatusCode::CREATED
        );
        // Not a u64: no key, the handler's `Path` rejects it.
        assert_eq!(
            send(&shadowed, Method::GET, "/users/abc").await.0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(shadow.stats(), ShadowStats::default());
        // Created through the guard: in the filter, so no would-be block.
        assert_eq!(
            send(&shadowed, Method::GET, &format!("/users/{new}")).await,
            (StatusCode::OK, row(new).into_bytes())
        );
        let stats = shadow.stats();
        assert_eq!((stats.checked, stats.would_block), (1, 0), "{stats:?}");
    }

    type Users = BoxCloneService<Request<()>, Response<String>, Infallible>;

    /// A service that knows "ada" and "eve" (answers 200 with the admission it was given) and
    /// no one else (404), behind `layer`.
    fn users<G>(layer: &ShadowLayer<G, key::Header<String>>) -> Users
    where
        G: Admit<String> + Clone + Send + Sync + 'static,
    {
        BoxCloneService::new(
            ServiceBuilder::new()
                .layer(layer.clone())
                .service(service_fn(|request: Request<()>| {
                    let user = request.headers()["x-user"].to_str().unwrap().to_owned();
                    let admission = request.extensions().get::<Admission>().copied();
                    let mut response = Response::new(format!("{admission:?}"));
                    if user != "ada" && user != "eve" {
                        *response.status_mut() = StatusCode::NOT_FOUND;
                    }
                    async move { Ok::<_, Infallible>(response) }
                })),
        )
    }

    async fn ask(service: &Users, user: &str) -> Response<String> {
        let request = Request::get("/p").header("x-user", user).body(()).unwrap();
        tokio::time::timeout(LIMIT, service.clone().oneshot(request))
            .await
            .expect("the service answers in time")
            .unwrap()
    }

    /// The async guard (its own `admit_shadow`) and a bare filter (the trait's default) behind
    /// `ServiceBuilder`; "eve" was written around both.
    #[tokio::test]
    async fn the_async_guard_and_a_bare_filter_through_service_builder() {
        let store = MemoryStore::from_rows([("ada".to_string(), ())]);
        let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(100), store);
        tokio::time::timeout(LIMIT, guard.warm_up(10, |_| {}))
            .await
            .unwrap()
            .unwrap();
        let eve_ruled_out = !guard.may_contain(&"eve".to_string());
        let bob_ruled_out = !guard.may_contain(&"bob".to_string());

        let shadow = GuardLayer::new(guard.clone(), key::header::<String>("x-user")).shadow();
        let service = users(&shadow);
        assert_eq!(ask(&service, "ada").await.body(), "Some(Pass)");
        let eve = ask(&service, "eve").await;
        assert_eq!(eve.status(), StatusCode::OK, "shadow mode never blocks");
        if eve_ruled_out {
            assert_eq!(eve.body(), "Some(Shadow)");
        }
        assert_eq!(ask(&service, "bob").await.status(), StatusCode::NOT_FOUND);
        let stats = shadow.stats();
        let would_block = u64::from(eve_ruled_out) + u64::from(bob_ruled_out);
        assert_eq!(stats.checked, 3);
        assert_eq!(stats.would_block, would_block, "{stats:?}");
        assert_eq!(stats.would_be_false_negatives, u64::from(eve_ruled_out));
        assert_eq!(guard.stats().shadow_would_block, would_block);
        assert_eq!(guard.stats().blocked, 0);

        let bare = Arc::new(CuckooFilter::with_capacity(100));
        bare.insert(&"ada".to_string()).unwrap();
        let eve_ruled_out = !bare.contains(&"eve".to_string());
        let bare_shadow = GuardLayer::new(bare, key::header::<String>("x-user")).shadow();
        let eve = ask(&users(&bare_shadow), "eve").await;
        assert_eq!(eve.status(), StatusCode::OK);
        let stats = bare_shadow.stats();
        assert_eq!(
            (stats.checked, stats.would_be_false_negatives),
            (1, u64::from(eve_ruled_out))
        );
        // Each layer counts apart.
        assert_eq!(shadow.stats().checked, 3);
    }

    #[test]
    fn the_shadow_layer_and_service_are_clone_send_and_sync() {
        fn check<T: Clone + Send + Sync + 'static>(_: &T) {}
        let guard = guard();
        let handled = Arc::new(AtomicUsize::new(0));
        let shadow = GuardLayer::new(guard.clone(), key::path_segment::<u64>(1)).shadow();
        check(&shadow);
        let app: Router = routes(&handled)
            .route_layer(shadow.clone())
            .with_state(guard.clone());
        check(&app);
        let service = shadow.layer(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(()))
        }));
        check(&service);
    }
}
