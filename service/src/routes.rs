//! The HTTP side: the public users routes behind the guard's layer and the moka cache, the
//! admin routes, and the state they share ([`App`]).

use std::error::Error as StdError;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use cuckoo_guard::fleet::{Fleet, FleetConfig, FleetStats, RedisCoordinator};
use cuckoo_guard::guard::{Admission, AsyncStore, GuardError, GuardStats, Written};
use cuckoo_guard::tower::throttle::{Throttle, ThrottleStats, Throttling};
use cuckoo_guard::tower::{key, ExtractKey, GuardLayer};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use serde::{Deserialize, Serialize};

use crate::config::{BoxError, Config, CACHE_ENTRY_OVERHEAD};
use crate::database::{Queries, Users};

/// Keys per page of the warm-up's scan.
const WARM_UP_PAGE: usize = 10_000;

/// The most ids one `GET /users?ids=` may ask for.
pub const MAX_IDS: usize = 100;

/// The guard's membership of its fleet.
type UsersFleet = Fleet<RedisCoordinator, i64>;

/// A failed database call, as the handlers report it: 503 with a fixed body; the detail
/// (the database's error text) goes to the log only.
#[derive(Debug)]
pub(crate) struct DbError(String);

/// The body of every 503: nothing of the database's error reaches the client.
pub const UNAVAILABLE_BODY: &str = "database unavailable";

impl<E: StdError> From<GuardError<E>> for DbError {
    fn from(error: GuardError<E>) -> Self {
        DbError(error.to_string())
    }
}

impl IntoResponse for DbError {
    fn into_response(self) -> Response {
        eprintln!("users-service: 503: {}", self.0);
        (StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE_BODY).into_response()
    }
}

/// The service's shared state.
///
/// # Examples
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
/// let dir = tempfile::tempdir()?;
/// let config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
/// let (_router, app) = users_service::build(&config).await?;
/// app.ready().await?;
/// assert!(!app.stats().warming);
/// assert_eq!(app.queries().gets(), 0);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct App {
    users: Users,
    cache: moka::future::Cache<i64, String>,
    queries: Arc<Queries>,
    guarded: bool,
    max_name_bytes: usize,
    prometheus: Arc<PrometheusRecorder>,
    metrics: PrometheusHandle,
    warm_up: tokio::sync::watch::Receiver<WarmUp>,
    /// The fleet membership once joined (with [`Config::fleet`]), kept for the service's
    /// life: dropping it stops the member's tasks.
    fleet: Arc<OnceLock<UsersFleet>>,
    /// The fleet's name, the `fleet` label of its metrics.
    fleet_name: Option<Arc<str>>,
    /// The layer's throttle, with [`Config::throttle_by`].
    throttle: Option<Throttle<ClientHeader>>,
}

/// The client a request comes from: the first comma-separated value of a header.
#[derive(Debug, Clone)]
pub(crate) struct ClientHeader(axum::http::HeaderName);

impl ExtractKey for ClientHeader {
    type Key = String;

    fn extract(&self, parts: &axum::http::request::Parts) -> Option<String> {
        let value = parts.headers.get(&self.0)?.to_str().ok()?;
        let first = value.split(',').next()?.trim();
        (!first.is_empty()).then(|| first.to_owned())
    }
}

/// Where the guard's warm-up is.
#[derive(Debug, Clone)]
enum WarmUp {
    Running,
    Done,
    Failed(String),
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("users", &self.users)
            .field("guarded", &self.guarded)
            .finish_non_exhaustive()
    }
}

impl App {
    /// The guard's stats.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
    /// # let dir = tempfile::tempdir()?;
    /// # let config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
    /// let (_router, app) = users_service::build(&config).await?;
    /// app.ready().await?;
    /// assert_eq!(app.stats().lookups, 0);
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> GuardStats {
        self.users.stats()
    }

    /// The fleet member's stats, once it joined its fleet ([`Config::fleet`]); `None` without
    /// a fleet or before the join.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
    /// # let dir = tempfile::tempdir()?;
    /// # let config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
    /// let (_router, app) = users_service::build(&config).await?;
    /// app.ready().await?;
    /// assert!(app.fleet_stats().is_none()); // no fleet configured
    /// # Ok(()) }
    /// ```
    pub fn fleet_stats(&self) -> Option<FleetStats> {
        self.fleet.get().map(Fleet::stats)
    }

    /// The layer's throttle counts, with [`Config::throttle_by`]; `None` without.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
    /// # let dir = tempfile::tempdir()?;
    /// let mut config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
    /// config.throttle_by = Some("x-forwarded-for".into());
    /// let (_router, app) = users_service::build(&config).await?;
    /// assert_eq!(app.throttle_stats().map(|s| s.throttled_requests), Some(0));
    /// # Ok(()) }
    /// ```
    pub fn throttle_stats(&self) -> Option<ThrottleStats> {
        self.throttle.as_ref().map(Throttle::stats)
    }

    /// The admin routes, `GET /stats` (JSON) and `GET /metrics` (Prometheus text), to serve
    /// on a listener of their own that only operators reach (never on the public one).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
    /// # let dir = tempfile::tempdir()?;
    /// # let config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
    /// let (_public, app) = users_service::build(&config).await?;
    /// let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// tokio::spawn(async move { axum::serve(admin, app.admin_router()).await });
    /// # Ok(()) }
    /// ```
    pub fn admin_router(&self) -> Router {
        Router::new()
            .route("/stats", get(stats))
            .route("/metrics", get(metrics))
            .with_state(self.clone())
    }

    /// The bytes of the names the cache holds now (after its pending evictions).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
    /// # let dir = tempfile::tempdir()?;
    /// # let config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
    /// let (_router, app) = users_service::build(&config).await?;
    /// assert_eq!(app.cached_name_bytes().await, 0);
    /// # Ok(()) }
    /// ```
    pub async fn cached_name_bytes(&self) -> u64 {
        self.cache.run_pending_tasks().await;
        self.cache.iter().map(|(_, name)| name.len() as u64).sum()
    }

    /// The database calls so far.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
    /// # let dir = tempfile::tempdir()?;
    /// # let config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
    /// let (_router, app) = users_service::build(&config).await?;
    /// app.ready().await?;
    /// assert!(app.queries().snapshot()[3] >= 1); // the warm-up's scan
    /// # Ok(()) }
    /// ```
    pub fn queries(&self) -> &Queries {
        &self.queries
    }

    /// Waits until the guard's warm-up (or, with [`Config::fleet`], its join of the fleet,
    /// which includes the warm-up) has finished. A fleet member may still pass lookups to
    /// the database for a while after (until it has caught up: `/stats` shows
    /// `fleet.serving`).
    ///
    /// # Errors
    ///
    /// The warm-up or the join failed (the guard keeps passing every lookup to the
    /// database).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
    /// # let dir = tempfile::tempdir()?;
    /// # let config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
    /// let (_router, app) = users_service::build(&config).await?;
    /// app.ready().await?;
    /// assert!(!app.stats().warming);
    /// # Ok(()) }
    /// ```
    pub async fn ready(&self) -> Result<(), BoxError> {
        let mut state = self.warm_up.clone();
        let state = state
            .wait_for(|state| !matches!(state, WarmUp::Running))
            .await
            .map_err(|_| "the warm-up task stopped")?;
        match &*state {
            WarmUp::Failed(error) => Err(format!("warm-up failed: {error}").into()),
            _ => Ok(()),
        }
    }
}

/// The throttle of `config`: of clients named by its request header
/// [`throttle_by`](Config::throttle_by), with its window, cool-down and hold; `None` without
/// the header.
pub(crate) fn throttle(config: &Config) -> Result<Option<Throttle<ClientHeader>>, BoxError> {
    let Some(header) = &config.throttle_by else {
        return Ok(None);
    };
    let name = axum::http::HeaderName::from_bytes(header.as_bytes())
        .map_err(|_| format!("throttle header {header:?} is not a valid header name"))?;
    let throttle = Throttle::builder(ClientHeader(name))
        .window(config.throttle_window)
        .cool_down(config.throttle_cool_down)
        .hold(config.throttle_hold)
        .build()?;
    Ok(Some(throttle))
}

/// The public router over `users` (the users routes, behind the guard's layer if
/// `config.guard`), with its state; starts the guard's warm-up in the background, or its
/// join of the fleet `coordinator` serves (which warms it up).
pub(crate) fn router(
    config: &Config,
    users: Users,
    queries: Arc<Queries>,
    coordinator: Option<RedisCoordinator>,
    throttle: Option<Throttle<ClientHeader>>,
) -> (Router, App) {
    let recorder = PrometheusBuilder::new().build_recorder();
    let (warm_up, warm_up_state) = tokio::sync::watch::channel(WarmUp::Running);
    let app = App {
        users: users.clone(),
        cache: moka::future::Cache::builder()
            .weigher(|_id: &i64, name: &String| {
                u32::try_from(name.len().saturating_add(CACHE_ENTRY_OVERHEAD)).unwrap_or(u32::MAX)
            })
            .max_capacity(config.cache_bytes)
            .time_to_live(Duration::from_secs(60))
            .build(),
        queries,
        guarded: config.guard,
        max_name_bytes: config.max_name_bytes,
        metrics: recorder.handle(),
        prometheus: Arc::new(recorder),
        warm_up: warm_up_state,
        fleet: Arc::new(OnceLock::new()),
        fleet_name: config
            .fleet
            .as_ref()
            .map(|settings| Arc::from(settings.name.as_str())),
        throttle: throttle.clone(),
    };
    let warming = users.clone();
    let fleet = config
        .fleet
        .as_ref()
        .zip(coordinator)
        .map(|(settings, coordinator)| {
            let settings = FleetConfig::new(settings.name.as_str()).page_size(WARM_UP_PAGE);
            (coordinator, settings, Arc::clone(&app.fleet))
        });
    tokio::spawn(async move {
        let state = match fleet {
            Some((coordinator, settings, slot)) => {
                match Fleet::join(&warming, coordinator, settings).await {
                    Ok(joined) => {
                        let _ = slot.set(joined);
                        WarmUp::Done
                    }
                    Err(error) => WarmUp::Failed(DbError::from(error).0),
                }
            }
            None => match warming.warm_up(WARM_UP_PAGE, |_| {}).await {
                Ok(_) => WarmUp::Done,
                Err(error) => WarmUp::Failed(DbError::from(error).0),
            },
        };
        let _ = warm_up.send(state);
    });

    let mut lookups = Router::new().route(
        "/users/{id}",
        get(get_user).put(put_user).delete(delete_user),
    );
    if config.guard {
        let layer = GuardLayer::new(users, key::path_segment::<i64>(1));
        lookups = match throttle {
            Some(throttle) => lookups.route_layer(layer.throttle(throttle)),
            None => lookups.route_layer(layer),
        };
    }
    // Room for the longest name with every character JSON-escaped (`\uXXXX`), and the rest.
    let body_limit = config.max_name_bytes.saturating_mul(6).saturating_add(1024);
    let router = Router::new()
        .route("/users", get(list_users).post(create_user))
        .merge(lookups)
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .with_state(app.clone());
    (router, app)
}

#[derive(Debug, Serialize, Deserialize)]
struct User {
    id: i64,
    name: String,
}

#[derive(Debug, Deserialize)]
struct Name {
    name: String,
}

async fn get_user(
    State(app): State<App>,
    Path(id): Path<i64>,
    admission: Option<Extension<Admission>>,
) -> Result<Response, DbError> {
    if let Some(name) = app.cache.get(&id).await {
        return Ok(Json(User { id, name }).into_response());
    }
    let found = if app.guarded {
        // The layer admitted this request (or it holds no key the layer could parse, which
        // `Path` rejected before this handler).
        let admission = admission.map_or_else(|| app.users.admit(&id), |Extension(a)| a);
        app.users.get_admitted(&id, admission).await?
    } else {
        app.users
            .store()
            .get(&id)
            .await
            .map_err(|e| DbError(format!("database get failed: {e}")))?
    };
    Ok(match found {
        Some(name) => {
            app.cache.insert(id, name.clone()).await;
            Json(User { id, name }).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    })
}

#[derive(Debug, Deserialize)]
struct Ids {
    ids: String,
}

/// `GET /users?ids=1,2,3`: the users of those ids that exist, in the order asked (repeats
/// once each). Ids the cache holds are answered from it; the rest go to the guard's batch
/// lookup (one filter pass, one database query for the ids it admits), or straight to the
/// database without the guard. At most [`MAX_IDS`] ids; 400 for more, or for an id that is
/// not an integer. With [`Config::throttle_by`], the layer's throttle screens the request
/// first, and counts it as blocked when the filter rules out every id it asks for.
async fn list_users(
    State(app): State<App>,
    parts: axum::http::request::Parts,
    axum::extract::Query(Ids { ids }): axum::extract::Query<Ids>,
) -> Result<Response, DbError> {
    let mut asked: Vec<i64> = Vec::new();
    for id in ids.split(',').filter(|id| !id.is_empty()) {
        let Ok(id) = id.trim().parse::<i64>() else {
            return Ok((StatusCode::BAD_REQUEST, "ids: comma-separated integers").into_response());
        };
        if !asked.contains(&id) {
            if asked.len() == MAX_IDS {
                let message = format!("at most {MAX_IDS} ids per request");
                return Ok((StatusCode::BAD_REQUEST, message).into_response());
            }
            asked.push(id);
        }
    }
    let throttle = app.throttle.as_ref().filter(|_| app.guarded);
    let ticket = match throttle {
        Some(throttle) => match Throttling::<axum::body::Body>::screen(throttle, &parts) {
            Ok(ticket) => Some(ticket),
            Err(refusal) => return Ok(refusal.answer().await),
        },
        None => None,
    };
    if let (Some(throttle), Some(ticket)) = (throttle, ticket) {
        // The filter's answer, not counted as lookups: the batch below counts them.
        let blocked = !asked.is_empty() && asked.iter().all(|id| !app.users.may_contain(id));
        Throttling::<axum::body::Body>::record(throttle, ticket, blocked);
    }
    let mut names: Vec<Option<String>> = Vec::with_capacity(asked.len());
    let mut missing = Vec::new();
    for &id in &asked {
        let cached = app.cache.get(&id).await;
        if cached.is_none() {
            missing.push(id);
        }
        names.push(cached);
    }
    let found = if missing.is_empty() {
        Vec::new()
    } else if app.guarded {
        app.users.get_many(&missing).await?
    } else {
        app.users
            .store()
            .get_many(&missing)
            .await
            .map_err(|e| DbError(format!("database get_many failed: {e}")))?
    };
    let mut found = missing.iter().zip(found);
    let mut users = Vec::new();
    for (&id, name) in asked.iter().zip(names) {
        let name = match name {
            Some(name) => Some(name),
            None => match found.next() {
                Some((_, Some(name))) => {
                    app.cache.insert(id, name.clone()).await;
                    Some(name)
                }
                _ => None,
            },
        };
        if let Some(name) = name {
            users.push(User { id, name });
        }
    }
    Ok(Json(users).into_response())
}

/// Runs a write and the cache invalidation after it in a task of their own, so a client that
/// disconnects cannot cancel them halfway; the cache entry goes whatever the outcome, since a
/// failed write may still have been applied.
async fn write_then_invalidate<T: Send + 'static>(
    app: &App,
    id: i64,
    write: impl Future<Output = Result<T, DbError>> + Send + 'static,
) -> Result<T, DbError> {
    let cache = app.cache.clone();
    tokio::spawn(async move {
        let result = write.await;
        cache.invalidate(&id).await;
        result
    })
    .await
    .map_err(|e| DbError(format!("write task failed: {e}")))?
}

async fn write(app: &App, id: i64, name: String) -> Result<Response, DbError> {
    if name.len() > app.max_name_bytes {
        let message = format!("name longer than {} bytes", app.max_name_bytes);
        return Ok((StatusCode::UNPROCESSABLE_ENTITY, message).into_response());
    }
    let users = app.users.clone();
    let value = name.clone();
    let written =
        write_then_invalidate(app, id, async move { Ok(users.put(&id, &value).await?) }).await?;
    let status = match written {
        Written::Created => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    Ok((status, Json(User { id, name })).into_response())
}

async fn create_user(State(app): State<App>, Json(user): Json<User>) -> Result<Response, DbError> {
    write(&app, user.id, user.name).await
}

async fn put_user(
    State(app): State<App>,
    Path(id): Path<i64>,
    Json(body): Json<Name>,
) -> Result<Response, DbError> {
    write(&app, id, body.name).await
}

async fn delete_user(State(app): State<App>, Path(id): Path<i64>) -> Result<StatusCode, DbError> {
    let users = app.users.clone();
    let existed =
        write_then_invalidate(&app, id, async move { Ok(users.delete(&id).await?) }).await?;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    })
}

async fn stats(State(app): State<App>) -> Json<serde_json::Value> {
    let s = app.users.stats();
    let [get, put, delete, scan] = app.queries.snapshot();
    Json(serde_json::json!({
        "guarded": app.guarded,
        "warming": s.warming,
        "lookups": s.lookups,
        "blocked": s.blocked,
        "passed": s.passed,
        "store_hits": s.store_hits,
        "false_positives": s.false_positives,
        "memo_hits": s.memo_hits,
        "memo_entries": s.memo_entries,
        "memo_slots_disabled": s.memo_slots_disabled,
        "observed_false_positive_rate": s.observed_false_positive_rate,
        "creates": s.creates,
        "updates": s.updates,
        "deletes": s.deletes,
        "writes_refused": s.writes_refused,
        "stale_copies": s.stale_copies,
        "filter_len": s.filter_len,
        "filter_capacity": s.filter_capacity,
        "filter_load_factor": s.filter_load_factor,
        "growth_steps": s.growth_steps,
        "rebuilds": s.rebuilds,
        "passed_failing_open": s.passed_failing_open,
        "db_queries": {
            "get": get,
            "get_many": app.queries.batches(),
            "put": put,
            "delete": delete,
            "scan": scan,
        },
        "coalesced": s.coalesced,
        "cache_entries": app.cache.entry_count(),
        "fleet": app.fleet_stats().map(|fleet| fleet_json(&fleet)),
        "throttle": app.throttle_stats().map(|throttle| serde_json::json!({
            "throttled_requests": throttle.throttled_requests,
            "clients_throttled": throttle.clients_throttled,
            "held_requests": throttle.held_requests,
        })),
    }))
}

/// The fleet member's part of `/stats`.
fn fleet_json(fleet: &FleetStats) -> serde_json::Value {
    serde_json::json!({
        "serving": fleet.serving,
        "applied": fleet.applied.to_string(),
        "creates_announced": fleet.creates_announced,
        "creates_refused": fleet.creates_refused,
        "creates_unannounced": fleet.creates_unannounced,
        "barrier_wait_micros": fleet.barrier_wait_micros,
        "deletes_announced": fleet.deletes_announced,
        "entries_applied": fleet.entries_applied,
        "members_expelled": fleet.members_expelled,
        "rejoins": fleet.rejoins,
        "rebuilds_asked": fleet.rebuilds_asked,
        "coordinator_calls": fleet.coordinator_calls,
        "coordinator_errors": fleet.coordinator_errors,
        "trimmed": fleet.trimmed,
        "sentinel_samples": fleet.sentinel_samples,
        "sentinel_misses": fleet.sentinel_misses,
        "undecodable": fleet.undecodable,
    })
}

async fn metrics(State(app): State<App>) -> impl IntoResponse {
    let stats = app.users.stats();
    let fleet = app.fleet_name.as_deref().zip(app.fleet_stats());
    let [get, put, delete, scan] = app.queries.snapshot();
    metrics::with_local_recorder(&*app.prometheus, || {
        cuckoo_guard::metrics::describe();
        cuckoo_guard::metrics::record(&stats, "users");
        if let Some((name, fleet)) = &fleet {
            cuckoo_guard::metrics::record_fleet(fleet, name);
        }
        if let Some(throttle) = app.throttle_stats() {
            cuckoo_guard::metrics::record_throttle(&throttle, "users");
        }
        for (kind, value) in [
            ("get", get),
            ("put", put),
            ("delete", delete),
            ("scan", scan),
            ("get_many", app.queries.batches()),
        ] {
            metrics::counter!("users_service_db_queries_total", "kind" => kind).absolute(value);
        }
        metrics::gauge!("users_service_cache_entries").set(app.cache.entry_count() as f64);
    });
    (
        [("content-type", "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
}
