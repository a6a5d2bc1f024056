//! The users service over real HTTP: started on 127.0.0.1 port 0, driven with reqwest, against
//! SQLite and PostgreSQL.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use users_service::{build, App, Config, Database};

// The library's rule for server tests, shared as the tool's tests share it: a missing
// PostgreSQL is a visible SKIPPED, and a failure under `CG_REQUIRE_SERVERS=1`.
#[allow(dead_code)]
#[path = "../../tests/common/servers.rs"]
mod servers;

struct Running {
    base: String,
    app: App,
    client: Client,
    table: Option<(String, String)>,
    _dir: tempfile::TempDir,
}

impl Running {
    async fn start(database: &str, guard: bool, seed: u64) -> Option<Running> {
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
        config.guard = guard;
        config.seed = seed;
        config.connections = 4;
        let (router, app) = build(&config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        tokio::time::timeout(Duration::from_secs(60), app.ready())
            .await
            .expect("the warm-up finishes")
            .unwrap();
        Some(Running {
            base: format!("http://{addr}"),
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
        let url = format!("{}/stats", self.base);
        self.client
            .get(url)
            .send()
            .await
            .unwrap()
            .json()
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
    let metrics = service
        .client
        .get(format!("{}/metrics", service.base))
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

    assert!("redis://127.0.0.1".parse::<Database>().is_err());
    assert!("sqlite:".parse::<Database>().is_err());
}
