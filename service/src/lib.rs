//! An axum users service with the stack people run in front of a database: the guard's tower
//! layer first (keys the filter reports absent are answered 404 from memory), a moka
//! read-through cache for existing rows, then SQLite (by default) or PostgreSQL.
//!
//! Public routes ([`build`]): `GET /users/{id}`, `GET /users?ids=1,2,3` (the users of those ids
//! that exist, at most [`MAX_IDS`]), `POST /users` (`{"id": 1, "name": "ada"}`),
//! `PUT /users/{id}` (`{"name": "ada"}`), `DELETE /users/{id}`. Admin routes
//! ([`App::admin_router`], served on a separate listener that must stay private): `GET /stats`
//! (JSON) and `GET /metrics` (Prometheus text). Every database call goes through a counting
//! store wrapper, so they show the queries the guard saved; their false-positive counters
//! would help an attacker find keys the filter wrongly admits, so they are not public.
//!
//! A name longer than [`Config::max_name_bytes`] is refused with 422 (a body too large to hold
//! one, with 413); the cache is bounded in bytes ([`Config::cache_bytes`]). A failed database
//! call answers 503 with a fixed body; its detail goes to the log (stderr).
//!
//! The cache is read-through with a 60 s time to live, and a write invalidates its key after
//! the database write (in a task a disconnecting client cannot cancel). A lookup that read
//! the old row just before a concurrent write can still put it back in the cache after the
//! invalidation, so a row may be served stale (or after its delete) for up to the time to
//! live; it never hides a row, since the cache holds only rows it found.
//!
//! Why the guard with a cache: a cache only holds what it has seen, and a key that does not
//! exist has no row to cache. Penetration traffic asks for such keys, each one new, so every
//! request misses the cache and reaches the database; the filter knows every key that does
//! exist, so it answers the others from memory.
//!
//! Several replicas over one table run as a fleet ([`Config::fleet`], `--fleet-redis`): each
//! guard joins it through Redis ([`cuckoo_guard::fleet`]), announces its creates there before
//! the database write, and applies the others', so a row created through one replica is never
//! answered 404 by another; lookups make no Redis call. `/stats` then has a `fleet` object
//! (whether the member serves, creates announced, their total barrier wait, coordinator
//! calls, entries applied) beside `passed_failing_open`, the lookups passed to the database
//! while the member could not vouch for its filter, and `/metrics` has the member's
//! `cuckoo_guard_fleet_*` series labelled `fleet` with the fleet's name
//! ([`cuckoo_guard::metrics::record_fleet`]). A create the fleet cannot announce
//! (Redis down, a member not acknowledging in time) is refused with 503.
//!
//! One [`AsyncCacheGuard`](cuckoo_guard::guard::AsyncCacheGuard) serves either database: the
//! PostgreSQL store is async; the SQLite store's calls run on tokio's blocking threads through
//! the library's [`Blocking`](cuckoo_guard::guard::Blocking). The modules: `config` (the
//! set-up and its parsing), `database` (opening, seeding and counting the store), `routes`
//! (the handlers and routers).

mod config;
mod database;
mod routes;

use std::sync::Arc;

use axum::Router;
use cuckoo_guard::fleet::RedisCoordinator;

pub use crate::config::{BoxError, Config, Database, FleetSettings, CACHE_ENTRY_OVERHEAD};
pub use crate::database::Queries;
pub use crate::routes::{App, MAX_IDS, UNAVAILABLE_BODY};

/// Opens the database (seeding it if asked), starts the guard's warm-up in the background
/// and returns the public router (the users routes; the admin routes are on
/// [`App::admin_router`]) with its state. Lookups pass through to the database until the
/// warm-up has finished ([`App::ready`]). With [`Config::fleet`], it connects to the fleet's
/// Redis first, and the background task joins the fleet (which warms the guard up) instead;
/// lookups then pass through until the member is caught up with the fleet as well.
///
/// # Errors
///
/// The database cannot be opened, the table name is invalid, seeding failed, or the fleet's
/// Redis cannot be reached (or may evict keys: it must run with `noeviction`).
///
/// # Examples
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), users_service::BoxError> {
/// let dir = tempfile::tempdir()?;
/// let mut config = users_service::Config::new(users_service::Database::Sqlite(dir.path().join("u.db")));
/// config.seed = 10;
/// let (router, app) = users_service::build(&config).await?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// tokio::spawn(async move { axum::serve(listener, router).await });
/// app.ready().await?;
/// # Ok(()) }
/// ```
pub async fn build(config: &Config) -> Result<(Router, App), BoxError> {
    let throttle = routes::throttle(config)?;
    let queries = Arc::new(Queries::default());
    let users = database::open(config, &queries).await?;
    let coordinator = match &config.fleet {
        Some(fleet) => Some(
            RedisCoordinator::builder(fleet.redis_url.as_str(), fleet.name.as_str())
                .connect()
                .await?,
        ),
        None => None,
    };
    Ok(routes::router(
        config,
        users,
        queries,
        coordinator,
        throttle,
    ))
}
