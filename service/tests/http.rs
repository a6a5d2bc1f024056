//! The users service over real HTTP: started on 127.0.0.1 port 0, driven with reqwest, against
//! SQLite and PostgreSQL.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use users_service::{build, App, Config, Database, FleetSettings};

// The library's rule for server tests, shared as the tool's tests share it: a missing
// PostgreSQL is a visible SKIPPED, and a failure under `CG_REQUIRE_SERVERS=1`.
#[allow(dead_code)]
#[path = "../../tests/common/servers.rs"]
mod servers;

struct Running {
    base: String,
    /// The admin listener (`/stats`, `/metrics`).
    admin: String,
    app: App,
    client: Client,
    table: Option<(String, String)>,
    _dir: tempfile::TempDir,
}

impl Running {
    async fn start(database: &str, guard: bool, seed: u64) -> Option<Running> {
        Running::start_with(database, |config| {
            config.guard = guard;
            config.seed = seed;
        })
        .await
    }

    async fn start_with(database: &str, configure: impl FnOnce(&mut Config)) -> Option<Running> {
        let dir = tempfile::tempdir().unwrap();
        let mut table = None;
        let database = match database {
            "sqlite" => Database::Sqlite(dir.path().join("users.db")),
            _ => {
                let url = servers::server_url(&servers::POSTGRES)?;
                static NEXT: AtomicU32 = AtomicU32::new(0);
                let name = format!(
                    "users_http_{}_{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                );
                table = Some((url.clone(), name));
                Database::Postgres(url)
            }
        };
        let mut config = Config::new(database);
        if let Some((_, name)) = &table {
            config.table = name.clone();
        }
        config.connections = 4;
        configure(&mut config);
        let (router, app) = build(&config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin_addr = admin.local_addr().unwrap();
        let admin_router = app.admin_router();
        tokio::spawn(async move { axum::serve(admin, admin_router).await.unwrap() });
        tokio::time::timeout(Duration::from_secs(60), app.ready())
            .await
            .expect("the warm-up finishes")
            .unwrap();
        Some(Running {
            base: format!("http://{addr}"),
            admin: format!("http://{admin_addr}"),
            app,
            client: Client::new(),
            table,
            _dir: dir,
        })
    }

    async fn get(&self, id: i64) -> (StatusCode, Option<Value>) {
        let response = self
            .client
            .get(format!("{}/users/{id}", self.base))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body = response.json().await.ok();
        (status, body)
    }

    async fn create(&self, id: i64, name: &str) -> StatusCode {
        self.client
            .post(format!("{}/users", self.base))
            .json(&json!({ "id": id, "name": name }))
            .send()
            .await
            .unwrap()
            .status()
    }

    async fn stats(&self) -> Value {
        let url = format!("{}/stats", self.admin);
        self.client
            .get(url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn metrics(&self) -> String {
        let url = format!("{}/metrics", self.admin);
        self.client
            .get(url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    async fn stop(self) {
        if let Some((url, table)) = &self.table {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            client
                .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
                .await
                .unwrap();
        }
    }
}

async fn existing_absent_created_deleted(database: &str) {
    let Some(service) = Running::start(database, true, 1_000).await else {
        return;
    };
    for id in 1..=1_000 {
        let (status, body) = service.get(id).await;
        assert_eq!(status, StatusCode::OK, "existing id {id}");
        assert_eq!(body.unwrap()["name"], format!("user {id}"));
    }

    let gets_before = service.app.queries().gets();
    let false_positives_before = service.app.stats().false_positives;
    let absent = 2_000_000..2_002_000i64;
    for id in absent.clone() {
        assert_eq!(
            service.get(id).await.0,
            StatusCode::NOT_FOUND,
            "absent id {id}"
        );
    }
    let queries = service.app.queries().gets() - gets_before;
    let false_positives = service.app.stats().false_positives - false_positives_before;
    println!(
        "{database}: {} absent ids answered 404 with {queries} database queries",
        absent.end - absent.start
    );
    // A query for an absent id is a filter false positive, and the guard counted each.
    assert_eq!(queries, false_positives);
    assert!(queries <= 5, "{queries} queries for 2,000 absent ids");

    // A create through PUT is not answered by the layer (the id is absent until it lands).
    let put = |id: i64| {
        service
            .client
            .put(format!("{}/users/{id}", service.base))
            .json(&json!({ "name": "linus" }))
            .send()
    };
    assert_eq!(put(6_000).await.unwrap().status(), StatusCode::CREATED);
    assert_eq!(service.get(6_000).await.1.unwrap()["name"], "linus");

    assert_eq!(service.create(5_000, "ada").await, StatusCode::CREATED);
    let (status, body) = service.get(5_000).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body.unwrap()["name"], "ada");
    let updated = service
        .client
        .put(format!("{}/users/5000", service.base))
        .json(&json!({ "name": "grace" }))
        .send()
        .await
        .unwrap();
    assert_eq!(updated.status(), StatusCode::OK);
    assert_eq!(service.get(5_000).await.1.unwrap()["name"], "grace");
    let delete = || {
        service
            .client
            .delete(format!("{}/users/5000", service.base))
            .send()
    };
    assert_eq!(delete().await.unwrap().status(), StatusCode::NO_CONTENT);
    assert_eq!(service.get(5_000).await.0, StatusCode::NOT_FOUND);
    assert_eq!(delete().await.unwrap().status(), StatusCode::NOT_FOUND);

    let stats = service.stats().await;
    assert_eq!(stats["creates"], 2);
    assert_eq!(stats["deletes"], 1);
    assert!(stats["blocked"].as_u64().unwrap() >= 1_995, "{stats}");
    assert!(stats["memo_hits"].is_u64(), "{stats}");
    assert!(stats["memo_entries"].as_u64().unwrap() > 0, "{stats}");
    let metrics = service
        .client
        .get(format!("{}/metrics", service.admin))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let blocked = stats["blocked"].as_u64().unwrap();
    assert!(
        metrics.contains(&format!(
            "cuckoo_guard_blocked_total{{guard=\"users\"}} {blocked}"
        )),
        "{metrics}"
    );
    assert!(metrics.contains("users_service_db_queries_total{kind=\"get\"}"));
    assert!(metrics.contains("# TYPE cuckoo_guard_filter_load_factor gauge"));
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_existing_absent_created_deleted() {
    existing_absent_created_deleted("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_existing_absent_created_deleted() {
    existing_absent_created_deleted("postgres").await;
}

impl Running {
    async fn list(&self, ids: &str) -> (StatusCode, Option<Value>) {
        let response = self
            .client
            .get(format!("{}/users?ids={ids}", self.base))
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.ok())
    }
}

fn ids_of(body: &Value) -> Vec<i64> {
    body.as_array()
        .unwrap()
        .iter()
        .map(|user| user["id"].as_i64().unwrap())
        .collect()
}

/// `GET /users?ids=`: the users that exist, in the order asked, from one database query for
/// the ids the filter admits (none for ids it rules out, none for cached ones).
async fn a_list_is_one_query_for_the_admitted_ids(database: &str) {
    let Some(service) = Running::start(database, true, 1_000).await else {
        return;
    };
    let queries = service.app.queries();
    let (gets, batches) = (queries.gets(), queries.batches());
    let asked = "7,2000001,5,7,2000002,999";
    let (status, body) = service.list(asked).await;
    assert_eq!(status, StatusCode::OK);
    let body = body.unwrap();
    assert_eq!(ids_of(&body), [7, 5, 999]);
    assert_eq!(body[1]["name"], "user 5");
    assert_eq!(queries.batches() - batches, 1, "one query for the batch");
    assert_eq!(queries.gets(), gets, "no single lookups");
    let blocked = service.app.stats().blocked;
    assert!(
        blocked >= 2,
        "the absent ids were ruled out ({blocked} blocked)"
    );

    // Again: the rows come from the cache and the absent ids from the filter.
    let (_, body) = service.list(asked).await;
    assert_eq!(ids_of(&body.unwrap()), [7, 5, 999]);
    assert_eq!(
        queries.batches() - batches,
        1,
        "no query for cached and ruled-out ids"
    );

    // A user created before the list began is in it.
    assert_eq!(
        service.create(3_000_000, "grace").await,
        StatusCode::CREATED
    );
    let (_, body) = service.list("3000000,2000003").await;
    assert_eq!(ids_of(&body.unwrap()), [3_000_000]);

    // Bad input is refused before any lookup.
    assert_eq!(service.list("1,x").await.0, StatusCode::BAD_REQUEST);
    let too_many: Vec<String> = (0..=users_service::MAX_IDS)
        .map(|id| id.to_string())
        .collect();
    assert_eq!(
        service.list(&too_many.join(",")).await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(service.list("").await.0, StatusCode::OK);
    let stats = service.stats().await;
    assert!(stats["db_queries"]["get_many"].as_u64().unwrap() >= 2);
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_list_is_one_query_for_the_admitted_ids() {
    a_list_is_one_query_for_the_admitted_ids("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_list_is_one_query_for_the_admitted_ids() {
    a_list_is_one_query_for_the_admitted_ids("postgres").await;
}

/// Without the layer a list is one database query whatever it asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_guard_a_list_of_absent_ids_still_queries() {
    let service = Running::start("sqlite", false, 100).await.unwrap();
    let batches = service.app.queries().batches();
    let (status, body) = service.list("5000,5001,50").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids_of(&body.unwrap()), [50]);
    assert_eq!(service.app.queries().batches() - batches, 1);
}

/// The service's throttle settings for the tests: by `X-Forwarded-For`, a minute's window and
/// cool-down, so that a slow machine can neither split the 20 blocked requests that throttle
/// a client across two windows nor end a cool-down while a test counts its 429s.
fn throttled(config: &mut Config) {
    config.seed = 500;
    config.throttle_by = Some("x-forwarded-for".into());
    config.throttle_window = Duration::from_secs(60);
    config.throttle_cool_down = Duration::from_secs(60);
}

/// `throttle_by`: a client sending absent ids is answered 429 with `Retry-After` after 20
/// blocked requests, before the filter or the database; a client sending existing ids at any
/// rate never is; `/stats` and `/metrics` count it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attacker_is_throttled_and_a_reader_is_not() {
    let service = Running::start_with("sqlite", throttled).await.unwrap();
    let ask = |client: &'static str, id: i64| {
        service
            .client
            .get(format!("{}/users/{id}", service.base))
            .header("x-forwarded-for", client)
            .send()
    };
    let mut first_throttled = None;
    for i in 0..100 {
        let response = ask("203.0.113.9, 10.0.0.1", 9_000_000 + i).await.unwrap();
        match response.status() {
            StatusCode::NOT_FOUND => assert!(first_throttled.is_none(), "404 after a 429"),
            StatusCode::TOO_MANY_REQUESTS => {
                let retry = response.headers()["retry-after"].to_str().unwrap();
                assert!((1..=60).contains(&retry.parse::<u64>().unwrap()), "{retry}");
                first_throttled.get_or_insert(i);
            }
            other => panic!("attacker request {i}: {other}"),
        }
    }
    assert_eq!(
        first_throttled,
        Some(20),
        "throttled after 20 blocked requests"
    );
    let gets = service.app.queries().gets();
    for i in 0..1_000 {
        let response = ask("198.51.100.7", 1 + i % 500).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "reader request {i}");
    }
    assert!(
        service.app.queries().gets() - gets <= 500,
        "the cache serves repeats"
    );
    let stats = service.stats().await;
    assert_eq!(stats["throttle"]["clients_throttled"], 1);
    assert_eq!(stats["throttle"]["throttled_requests"], 80);
    assert!(service
        .metrics()
        .await
        .contains("cuckoo_guard_layer_throttled_requests_total{guard=\"users\"} 80"));
}

/// `throttle_by` on the list route: a client whose lists ask only for absent ids is answered
/// 429 after 20 such requests; a client listing existing ids (with an absent one among them)
/// never is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attacker_listing_absent_ids_is_throttled_and_a_reader_is_not() {
    let service = Running::start_with("sqlite", throttled).await.unwrap();
    let list = |client: &'static str, ids: String| {
        service
            .client
            .get(format!("{}/users?ids={ids}", service.base))
            .header("x-forwarded-for", client)
            .send()
    };
    let mut first_throttled = None;
    for i in 0..50i64 {
        let absent: Vec<String> = (0..10)
            .map(|j| (9_000_000 + i * 10 + j).to_string())
            .collect();
        let response = list("203.0.113.9", absent.join(",")).await.unwrap();
        match response.status() {
            StatusCode::OK => assert!(first_throttled.is_none(), "200 after a 429"),
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(response.headers().contains_key("retry-after"));
                first_throttled.get_or_insert(i);
            }
            other => panic!("attacker request {i}: {other}"),
        }
    }
    assert_eq!(
        first_throttled,
        Some(20),
        "throttled after 20 blocked lists"
    );
    for i in 0..200i64 {
        let ids = format!("{},{},{}", 1 + i % 500, 1 + (i + 7) % 500, 9_500_000 + i);
        let response = list("198.51.100.7", ids).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "reader request {i}");
    }
    let stats = service.stats().await;
    assert_eq!(stats["throttle"]["clients_throttled"], 1);
    assert_eq!(stats["throttle"]["throttled_requests"], 30);
}

/// `throttle_hold`: a throttled client's 429 on either route arrives after the hold, while
/// another client is served meanwhile; `/stats` and `/metrics` count the held answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_clients_429_is_held_and_others_are_served_meanwhile() {
    let hold = Duration::from_secs(5);
    let service = Running::start_with("sqlite", |config| {
        throttled(config);
        config.throttle_hold = hold;
    })
    .await
    .unwrap();
    let get = |client: &'static str, path: String| {
        service
            .client
            .get(format!("{}{path}", service.base))
            .header("x-forwarded-for", client)
            .send()
    };
    for i in 0..20 {
        let response = get("203.0.113.9", format!("/users/{}", 9_000_000 + i))
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::NOT_FOUND,
            "attacker request {i}"
        );
    }
    let started = std::time::Instant::now();
    let timed = |response| async move {
        let response = response.await;
        (response, started.elapsed())
    };
    let (one, list, reader) = tokio::join!(
        timed(get("203.0.113.9", "/users/9100000".into())),
        timed(get("203.0.113.9", "/users?ids=9100001,9100002".into())),
        timed(get("198.51.100.7", "/users/7".into())),
    );
    let (reader, served_after) = reader;
    assert_eq!(reader.unwrap().status(), StatusCode::OK);
    assert!(served_after < hold, "the reader waited {served_after:?}");
    for (route, (response, after)) in [("one", one), ("list", list)] {
        let response = response.unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "{route}");
        assert!(response.headers().contains_key("retry-after"), "{route}");
        assert!(after >= hold, "{route}: answered after {after:?}");
    }
    let stats = service.stats().await;
    assert_eq!(stats["throttle"]["throttled_requests"], 2);
    assert_eq!(stats["throttle"]["held_requests"], 2);
    assert!(service
        .metrics()
        .await
        .contains("cuckoo_guard_layer_held_requests_total{guard=\"users\"} 2"));
}

#[tokio::test]
async fn a_throttle_header_that_is_not_a_header_name_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(Database::Sqlite(dir.path().join("users.db")));
    config.throttle_by = Some("x forwarded".into());
    let error = build(&config).await.unwrap_err().to_string();
    assert!(error.contains("not a valid header name"), "{error}");
}

/// `throttle_window` and `throttle_cool_down` are the throttle's: a client sending 19 blocked
/// requests, a window's wait and 19 more is not throttled; a client sending 10, then 11 two
/// seconds later (within its window, past the default one) is, until its cool-down (shorter
/// than the default one) ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_throttles_window_and_cool_down_are_the_configs() {
    let window = Duration::from_secs(8);
    let cool_down = Duration::from_secs(4);
    let service = Running::start_with("sqlite", |config| {
        throttled(config);
        config.throttle_window = window;
        config.throttle_cool_down = cool_down;
    })
    .await
    .unwrap();
    let service = &service;
    // `client` sends `requests` absent ids, then waits `pause`, for each group; their statuses.
    let send = |client: &'static str, base: i64, groups: Vec<(u32, Duration)>| async move {
        let mut id = base;
        let mut statuses = Vec::new();
        for (requests, pause) in groups {
            for _ in 0..requests {
                id += 1;
                let response = service
                    .client
                    .get(format!("{}/users/{id}", service.base))
                    .header("x-forwarded-for", client)
                    .send()
                    .await
                    .unwrap();
                statuses.push(response.status());
            }
            tokio::time::sleep(pause).await;
        }
        statuses
    };
    let (spread, burst) = tokio::join!(
        send(
            "203.0.113.9",
            9_000_000,
            vec![(19, window), (19, Duration::ZERO)]
        ),
        send(
            "203.0.113.10",
            9_100_000,
            vec![
                (10, Duration::from_secs(2)),
                (11, cool_down),
                (1, Duration::ZERO)
            ],
        ),
    );
    let not_found = StatusCode::NOT_FOUND;
    assert!(spread.iter().all(|s| *s == not_found), "{spread:?}");
    assert!(burst[..20].iter().all(|s| *s == not_found), "{burst:?}");
    assert_eq!(burst[20], StatusCode::TOO_MANY_REQUESTS, "{burst:?}");
    assert_eq!(burst[21], not_found, "after the cool-down: {burst:?}");
    let stats = service.stats().await;
    assert_eq!(stats["throttle"]["clients_throttled"], 1);
    assert_eq!(stats["throttle"]["throttled_requests"], 1);
}

#[tokio::test]
async fn throttle_settings_out_of_range_are_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(Database::Sqlite(dir.path().join("users.db")));
    config.throttle_by = Some("x-forwarded-for".into());
    config.throttle_window = Duration::ZERO;
    let error = build(&config).await.unwrap_err().to_string();
    assert!(error.contains("longer than zero"), "{error}");
    config.throttle_window = Duration::from_secs(1);
    config.throttle_hold = config.throttle_cool_down;
    let error = build(&config).await.unwrap_err().to_string();
    assert!(error.contains("hold must be shorter"), "{error}");
}

/// Without the layer every absent id is a database query: the counting above is live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_guard_every_absent_id_reaches_the_database() {
    let service = Running::start("sqlite", false, 100).await.unwrap();
    let before = service.app.queries().gets();
    for id in 1_000..1_200 {
        assert_eq!(service.get(id).await.0, StatusCode::NOT_FOUND);
    }
    assert_eq!(service.app.queries().gets() - before, 200);
    assert_eq!(service.stats().await["lookups"], 0);
}

async fn concurrent_creates_are_never_404(database: &str) {
    const CLIENTS: i64 = 4;
    const CREATES: i64 = 300;
    let Some(service) = Running::start(database, true, 0).await else {
        return;
    };
    let service = std::sync::Arc::new(service);
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let service = std::sync::Arc::clone(&service);
        clients.push(tokio::spawn(async move {
            let mut created = Vec::new();
            let mut checked = 0u32;
            for n in 0..CREATES {
                let id = 1_000_000 * (client + 1) + n;
                assert_eq!(service.create(id, "x").await, StatusCode::CREATED);
                created.push(id);
                // The new id, and an earlier one of this client's, at once.
                let earlier = created[(n as usize * 7919) % created.len()];
                for id in [id, earlier] {
                    let (status, _) = service.get(id).await;
                    assert_eq!(status, StatusCode::OK, "id {id} after its create returned");
                    checked += 1;
                }
                // Another client's ids are absent or present; either answer is fine, but
                // the request must succeed.
                let other = 1_000_000 * ((client + 1) % CLIENTS + 1) + n;
                let (status, _) = service.get(other).await;
                assert!(matches!(status, StatusCode::OK | StatusCode::NOT_FOUND));
            }
            checked
        }));
    }
    let mut checked = 0;
    for client in clients {
        checked += client.await.unwrap();
    }
    assert_eq!(checked, (CLIENTS * CREATES * 2) as u32);
    let stats = service.stats().await;
    println!("{database}: {checked} reads of created ids, all 200; stats {stats}");
    assert_eq!(stats["creates"], CLIENTS * CREATES);
    assert_eq!(stats["writes_refused"], 0);
    if let Ok(service) = std::sync::Arc::try_unwrap(service) {
        service.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_concurrent_creates_are_never_404() {
    concurrent_creates_are_never_404("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_concurrent_creates_are_never_404() {
    concurrent_creates_are_never_404("postgres").await;
}

#[tokio::test]
async fn bad_configuration_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(Database::Sqlite(dir.path().join("users.db")));
    config.table = "users; DROP TABLE x".to_owned();
    let error = build(&config)
        .await
        .expect_err("a bad table name is refused");
    assert!(error.to_string().contains("table name"), "{error}");

    let config = Config::new(Database::Postgres(
        "postgres://postgres@127.0.0.1:1/test".to_owned(),
    ));
    let error = build(&config)
        .await
        .expect_err("an unreachable server is an error");
    assert!(error.to_string().contains("PostgreSQL"), "{error}");

    // A fleet whose Redis cannot be reached: an error at start, without the URL's password.
    let mut config = Config::new(Database::Sqlite(dir.path().join("users.db")));
    config.fleet = Some(FleetSettings::new(
        "redis://:fleet-secret@127.0.0.1:1",
        "users",
    ));
    let error = build(&config)
        .await
        .expect_err("an unreachable coordinator is an error");
    assert!(error.to_string().contains("Redis"), "{error}");
    assert!(!error.to_string().contains("fleet-secret"), "{error}");
    assert!(!format!("{config:?}").contains("fleet-secret"));

    assert!("redis://127.0.0.1".parse::<Database>().is_err());
    assert!("sqlite:".parse::<Database>().is_err());
}

/// The counters (false positives among them) are for operators: the public listener does not
/// serve them, the admin listener does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_metrics_are_only_on_the_admin_listener() {
    let service = Running::start("sqlite", true, 10).await.unwrap();
    for path in ["/stats", "/metrics"] {
        let public = service
            .client
            .get(format!("{}{path}", service.base))
            .send()
            .await
            .unwrap();
        assert_eq!(public.status(), StatusCode::NOT_FOUND, "public {path}");
        let admin = service
            .client
            .get(format!("{}{path}", service.admin))
            .send()
            .await
            .unwrap();
        assert_eq!(admin.status(), StatusCode::OK, "admin {path}");
        assert!(!admin.text().await.unwrap().is_empty());
    }
    // The admin listener serves nothing else.
    let users = service
        .client
        .get(format!("{}/users/1", service.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(users.status(), StatusCode::NOT_FOUND);
    // A lone guard: no fleet stats, and it never failed open.
    let stats = service.stats().await;
    assert_eq!(stats["fleet"], Value::Null, "{stats:#}");
    assert_eq!(stats["passed_failing_open"], 0, "{stats:#}");
    let metrics = service.metrics().await;
    assert!(metrics.contains("cuckoo_guard_lookups_total"), "{metrics}");
    assert!(!metrics.contains("cuckoo_guard_fleet_serving"), "{metrics}");
}

/// A replica in a fleet (one member, over SQLite and the machine's Redis) publishes its
/// member's counters on `/metrics`, labelled with the fleet's name, and in `/stats`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_members_counters_are_in_metrics_and_stats() {
    let Some(redis) = servers::server_url(&servers::REDIS) else {
        return;
    };
    let fleet = format!("users_http_metrics_{}", std::process::id());
    let settings = FleetSettings::new(redis.as_str(), fleet.as_str());
    let service = Running::start_with("sqlite", |config| {
        config.seed = 10;
        config.fleet = Some(settings);
    })
    .await
    .unwrap();
    // A delete, not a create: the first create of a new fleet state is held for two leases.
    let deleted = service
        .client
        .delete(format!("{}/users/1", service.base))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let stats = loop {
        let stats = service.stats().await;
        if stats["fleet"]["serving"] == true {
            break stats;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the member is not serving: {stats:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(stats["fleet"]["deletes_announced"], 1, "{stats:#}");
    assert_eq!(stats["fleet"]["undecodable"], 0, "{stats:#}");

    let series = |metrics: &str, name: &str| -> f64 {
        let series = format!("{name}{{fleet=\"{fleet}\"}} ");
        let line = metrics
            .lines()
            .find(|line| line.starts_with(&series))
            .unwrap_or_else(|| panic!("no {series} in {metrics}"));
        line[series.len()..].parse().unwrap()
    };
    // Serving, as `/stats` said: a stall past the lease's deadline between the two requests
    // may have paused it since, so the scrape is repeated until it says so too.
    let metrics = loop {
        let metrics = service.metrics().await;
        if series(&metrics, "cuckoo_guard_fleet_serving") == 1.0 {
            break metrics;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the member is not serving: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let value = |name: &str| series(&metrics, name);
    assert_eq!(value("cuckoo_guard_fleet_deletes_announced_total"), 1.0);
    // A lone member applies no one else's entries.
    assert_eq!(value("cuckoo_guard_fleet_entries_applied_total"), 0.0);
    assert!(value("cuckoo_guard_fleet_coordinator_calls_total") >= 1.0);
    for name in [
        "cuckoo_guard_fleet_creates_announced_total",
        "cuckoo_guard_fleet_rejoins_total",
        "cuckoo_guard_fleet_rebuilds_asked_total",
        "cuckoo_guard_fleet_coordinator_errors_total",
        "cuckoo_guard_fleet_trimmed_total",
        "cuckoo_guard_fleet_sentinel_samples_total",
        "cuckoo_guard_fleet_sentinel_misses_total",
        "cuckoo_guard_fleet_members_expelled_total",
        "cuckoo_guard_fleet_undecodable_total",
        "cuckoo_guard_fleet_barrier_wait_microseconds_total",
    ] {
        value(name);
    }
    assert!(
        metrics.contains("# TYPE cuckoo_guard_fleet_serving gauge"),
        "{metrics}"
    );
    assert!(
        metrics.contains("# TYPE cuckoo_guard_fleet_sentinel_misses_total counter"),
        "{metrics}"
    );
    service.stop().await;
    delete_fleet_keys(&redis, &fleet).await;
}

/// Deletes the keys of `fleet` in the Redis at `url`.
async fn delete_fleet_keys(url: &str, fleet: &str) {
    let client = redis::Client::open(url).expect("a Redis URL");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis for the clean-up");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("cuckoo-guard:{{{fleet}}}*"))
        .query_async(&mut connection)
        .await
        .expect("the fleet's keys");
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL")
            .arg(&keys)
            .query_async(&mut connection)
            .await
            .expect("the fleet's keys are deleted");
    }
}

/// A name over the cap is refused with a short 422, a body far over it with 413, and
/// nothing is written either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_names_are_refused() {
    let service = Running::start_with("sqlite", |config| config.max_name_bytes = 100)
        .await
        .unwrap();
    assert_eq!(
        service.create(1, &"a".repeat(100)).await,
        StatusCode::CREATED
    );
    let refused = service
        .client
        .post(format!("{}/users", service.base))
        .json(&json!({ "id": 2, "name": "a".repeat(101) }))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body = refused.text().await.unwrap();
    assert!(body.contains("100 bytes") && body.len() < 100, "{body}");
    let put = service
        .client
        .put(format!("{}/users/1", service.base))
        .json(&json!({ "name": "é".repeat(51) }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        put.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "bytes, not chars"
    );
    // Near axum's default 2 MiB limit: refused before it is parsed. The service may answer 413
    // and close the connection while the client still writes the body; the client then sees
    // the closed connection instead of the answer.
    let huge = service
        .client
        .post(format!("{}/users", service.base))
        .json(&json!({ "id": 3, "name": "a".repeat(2_000_000) }))
        .send()
        .await;
    match huge {
        Ok(huge) => assert_eq!(huge.status(), StatusCode::PAYLOAD_TOO_LARGE),
        Err(error) => assert!(
            closed_while_writing(&error),
            "the huge body was neither refused nor cut off: {error:?}"
        ),
    }
    for id in [2, 3] {
        assert_eq!(service.get(id).await.0, StatusCode::NOT_FOUND, "id {id}");
    }
    assert_eq!(service.get(1).await.1.unwrap()["name"], "a".repeat(100));
}

/// Whether a request failed because the server closed the connection while the client wrote
/// the body (a broken pipe or a reset), as a server does after answering early.
fn closed_while_writing(error: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            );
        }
        source = cause.source();
    }
    false
}

/// The cache holds at most its byte budget, however long the cached names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_is_bounded_in_bytes() {
    const BUDGET: u64 = 256 << 10;
    const NAME: usize = 60 << 10;
    let service = Running::start_with("sqlite", |config| {
        config.max_name_bytes = NAME;
        config.cache_bytes = BUDGET;
    })
    .await
    .unwrap();
    for id in 1..=40 {
        assert_eq!(
            service.create(id, &"n".repeat(NAME)).await,
            StatusCode::CREATED
        );
    }
    // Each lookup caches its row.
    for id in 1..=40 {
        assert_eq!(service.get(id).await.0, StatusCode::OK);
    }
    let cached = service.app.cached_name_bytes().await;
    assert!(cached > 0, "the cache is in use");
    assert!(cached <= BUDGET, "{cached} bytes cached, budget {BUDGET}");
}

/// A failed database call answers 503 with a fixed body: none of the database's error text
/// (table names, SQL, server messages) reaches the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_errors_are_not_echoed() {
    let service = Running::start("sqlite", true, 10).await.unwrap();
    let path = service._dir.path().join("users.db");
    let conn = rusqlite_connection(&path);
    conn.execute_batch("ALTER TABLE users RENAME TO users_gone_secret_name")
        .unwrap();
    let response = service
        .client
        .get(format!("{}/users/5", service.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = response.text().await.unwrap();
    assert_eq!(body, users_service::UNAVAILABLE_BODY);
    let write = service
        .client
        .put(format!("{}/users/6", service.base))
        .json(&json!({ "name": "x" }))
        .send()
        .await
        .unwrap();
    assert_eq!(write.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(write.text().await.unwrap(), users_service::UNAVAILABLE_BODY);
}

fn rusqlite_connection(path: &std::path::Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn
}

/// Neither a configuration error nor the configuration's `Debug` prints a password.
#[tokio::test]
async fn database_passwords_are_not_printed() {
    for secret in ["Sx3?Qc9-pw", "Pa9#Xq9", "Pz7%40Zk7", "Pq4/Qw7", "Pv2@Vx8"] {
        let unsupported = format!("mysql://app:{secret}@db.example/users");
        let error = unsupported.parse::<Database>().unwrap_err();
        assert!(error.contains("unsupported database"), "{error}");
        let postgres = format!("postgres://app:{secret}@127.0.0.1:1/test?password={secret}");
        let database: Database = postgres.parse().unwrap();
        let config = Config::new(database.clone());
        let build_error = build(&config)
            .await
            .expect_err("nothing listens on port 1")
            .to_string();
        for text in [error, format!("{config:?}"), build_error] {
            for piece in secret.split(['?', '#', '/', '@']).filter(|p| p.len() >= 3) {
                assert!(!text.contains(piece), "{secret:?} printed: {text}");
            }
        }
    }
}
