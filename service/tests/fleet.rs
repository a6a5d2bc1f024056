//! Three `users-service` processes (the real binary) as one fleet over one PostgreSQL table
//! and the machine's Redis. Clients create users on one instance and read each new id on
//! another as soon as the create returns, while other clients read ids whose creates are
//! still in flight: a 404 for an id whose create had returned before the read began is a
//! false negative, and there must be none. Then a lookup-only phase (no Redis call per
//! lookup), `kill -9` of one instance while the others keep creating (writers stall at most
//! about one lease), and a new instance joining while creates run: pairs through it from the
//! moment it listens, then every id created meanwhile read on it. Two smaller fleets: one
//! with an instance paused past its lease, and one over a `redis-server` of the test's own,
//! killed and restarted empty (members fail open, creates are refused, then they rejoin).
//!
//! `CG_FLEET_PAIRS` sets the create-then-read pairs of the first phase (100,000 by default).
//! The figures are printed on stderr (`-- --show-output`):
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379 \
//!     cargo test -p cuckoo-guard-users-service --test fleet -- --show-output
//! ```

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use cuckoo_guard::fleet::{Coordinator, Position, RedisCoordinator};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

// The library's rule for server tests: a missing server is a visible SKIPPED, and a failure
// under `CG_REQUIRE_SERVERS=1`.
#[allow(dead_code)]
#[path = "../../tests/common/servers.rs"]
mod servers;

/// Create-then-read tasks, and tasks reading ids whose creates are in flight.
const WRITERS: usize = 12;
const IN_FLIGHT_READERS: usize = 2;
/// How far below the last id handed out the in-flight readers read.
const IN_FLIGHT_WINDOW: i64 = 2 * WRITERS as i64;
/// Lookups of the lookup-only phase.
const LOOKUPS: usize = 30_000;
/// The bound on any one HTTP request, and on an instance's start and catching up.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// Failed creates after which the writers give up.
const MAX_FAILURES: usize = 100;

fn pairs() -> u64 {
    let pairs = std::env::var("CG_FLEET_PAIRS").map_or(100_000, |v| {
        v.parse().expect("CG_FLEET_PAIRS is a number of pairs")
    });
    assert!(pairs > 0, "CG_FLEET_PAIRS must be at least 1");
    pairs
}

/// The lease the service's members run with (the library's default).
fn lease() -> Duration {
    cuckoo_guard::fleet::FleetConfig::new("users").lease_length()
}

/// The instances' processes, killed (`SIGKILL`) when dropped, so a failing test leaves none.
#[derive(Default)]
struct Processes(Vec<Option<Child>>);

impl Processes {
    fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.0[index].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for index in 0..self.0.len() {
            self.kill(index);
        }
    }
}

/// A `redis-server` of the test's own on a free loopback port, saving nothing, killed
/// (`SIGKILL`) when dropped: [`kill`](Self::kill) and [`launch`](Self::launch) stop it and
/// start it again, empty, on the same port.
struct OwnRedis {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl OwnRedis {
    /// Starts one, or `None` (after a notice) if `redis-server` is not installed; under
    /// `CG_REQUIRE_SERVERS=1` that fails the test.
    fn start() -> Option<OwnRedis> {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var("CG_REQUIRE_SERVERS").as_deref() != Ok("1"),
                "redis-server is not installed (CG_REQUIRE_SERVERS=1 forbids skipping)"
            );
            eprintln!("SKIPPED: redis-server is not installed");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let mut server = OwnRedis {
            port,
            dir: tempfile::tempdir().expect("a data directory"),
            child: None,
        };
        server.launch();
        Some(server)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again, after [`kill`](Self::kill)) and waits (bounded) for its port.
    fn launch(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server does not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `SIGKILL`: nothing survives.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("redis-server is killed");
            child.wait().expect("redis-server is reaped");
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One running instance: its public and admin base URLs.
#[derive(Clone)]
struct Instance {
    base: String,
    admin: String,
}

/// Starts one instance and waits (bounded) until it prints both addresses, which it does
/// once its join of the fleet (with the warm-up) has finished.
fn start(
    processes: &mut Processes,
    database: &str,
    table: &str,
    redis: &str,
    fleet: &str,
) -> Instance {
    // The fleet's creates commit one row each; the tests check the answers, not a crash's.
    let database = servers::without_flush_wait(database);
    let mut child = Command::new(env!("CARGO_BIN_EXE_users-service"))
        .args(["--db", &database, "--table", table])
        .args(["--listen", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
        .args(["--fleet-redis", redis, "--fleet-name", fleet])
        .args(["--connections", "4"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the users-service binary starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let index = processes.0.len();
    processes.0.push(Some(child));
    // Reads the instance's stdout to its end, so the process never blocks on a full pipe.
    let (lines, addresses) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = lines.send(line);
        }
    });
    let deadline = Instant::now() + START_TIMEOUT;
    let (mut base, mut admin) = (None, None);
    while base.is_none() || admin.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match addresses.recv_timeout(left) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("instance {index} printed no addresses within {START_TIMEOUT:?}")
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("instance {index} exited before it printed its addresses")
            }
        };
        let url = line.rsplit_once(" on ").map(|(_, url)| url.to_owned());
        if line.starts_with("listening on ") {
            base = url;
        } else if line.starts_with("admin (stats, metrics) on ") {
            admin = url;
        }
    }
    Instance {
        base: base.unwrap(),
        admin: admin.unwrap(),
    }
}

async fn stats(client: &Client, instance: &Instance) -> Value {
    client
        .get(format!("{}/stats", instance.admin))
        .send()
        .await
        .expect("/stats answers")
        .json()
        .await
        .expect("/stats is JSON")
}

/// Waits (bounded) until the instance's member serves: joined, caught up, warm.
async fn wait_serving(client: &Client, index: usize, instance: &Instance) -> Duration {
    let started = Instant::now();
    loop {
        let stats = stats(client, instance).await;
        if stats["fleet"]["serving"] == json!(true) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < START_TIMEOUT,
            "instance {index} does not serve after {START_TIMEOUT:?}: /stats {stats:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (bounded: past one lease, with a margin) until the instance's member no longer
/// serves: its deadline passed without a renewal.
async fn wait_not_serving(client: &Client, index: usize, instance: &Instance) -> Duration {
    let started = Instant::now();
    let limit = lease() * 2 + Duration::from_secs(5);
    loop {
        let stats = stats(client, instance).await;
        if stats["fleet"]["serving"] == json!(false) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "instance {index} still serves after {limit:?}: /stats {stats:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The status of `GET /users/{id}` on `instance`.
async fn get_status(client: &Client, instance: &Instance, id: i64) -> StatusCode {
    client
        .get(format!("{}/users/{id}", instance.base))
        .send()
        .await
        .unwrap_or_else(|error| panic!("GET {id} answers: {error}"))
        .status()
}

/// The status of `POST /users` creating `id` on `instance`.
async fn create_status(client: &Client, instance: &Instance, id: i64) -> StatusCode {
    client
        .post(format!("{}/users", instance.base))
        .json(&json!({ "id": id, "name": format!("user {id}") }))
        .send()
        .await
        .unwrap_or_else(|error| panic!("POST {id} answers: {error}"))
        .status()
}

/// A figure of `/stats`: `path` is `"lookups"` or `"fleet.coordinator_calls"`.
fn figure(stats: &Value, path: &str) -> u64 {
    let mut value = stats;
    for part in path.split('.') {
        value = &value[part];
    }
    value
        .as_u64()
        .unwrap_or_else(|| panic!("/stats has no number at {path}: {stats:#}"))
}

/// The sum over `instances` of `path` in `after` minus `before`.
fn delta(before: &[Value], after: &[Value], instances: &[usize], path: &str) -> u64 {
    instances
        .iter()
        .map(|&i| figure(&after[i], path) - figure(&before[i], path))
        .sum()
}

async fn all_stats(client: &Client, instances: &[Instance]) -> Vec<Value> {
    let mut all = Vec::new();
    for instance in instances {
        all.push(stats(client, instance).await);
    }
    all
}

/// Ids handed out to creates, and where each create is.
struct Ledger {
    first: i64,
    next: AtomicI64,
    /// [`NOT_STARTED`], [`IN_FLIGHT`] or [`RETURNED`], by `id - first`.
    state: Vec<AtomicU8>,
}

const NOT_STARTED: u8 = 0;
const IN_FLIGHT: u8 = 1;
const RETURNED: u8 = 2;

impl Ledger {
    fn new(first: i64, ids: u64) -> Ledger {
        Ledger {
            first,
            next: AtomicI64::new(first),
            state: (0..ids).map(|_| AtomicU8::new(NOT_STARTED)).collect(),
        }
    }

    /// The next id, marked in flight; `None` once every id was handed out.
    fn hand_out(&self) -> Option<i64> {
        // ORDERING: SeqCst throughout the ledger; a test's bookkeeping, kept simple.
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let slot = self.state.get(usize::try_from(id - self.first).ok()?)?;
        slot.store(IN_FLIGHT, Ordering::SeqCst);
        Some(id)
    }

    fn returned(&self, id: i64) {
        self.state[(id - self.first) as usize].store(RETURNED, Ordering::SeqCst);
    }

    fn has_returned(&self, id: i64) -> bool {
        self.state[(id - self.first) as usize].load(Ordering::SeqCst) == RETURNED
    }

    /// An id handed out lately (its create may be in flight), if any.
    fn recent(&self, random: u64) -> Option<i64> {
        let top = self.next.load(Ordering::SeqCst).min(self.end()) - 1;
        let id = top - (random % IN_FLIGHT_WINDOW as u64) as i64;
        (id >= self.first).then_some(id)
    }

    fn end(&self) -> i64 {
        self.first + self.state.len() as i64
    }
}

/// What a phase's clients saw.
#[derive(Default)]
struct Tally {
    pairs: AtomicU64,
    /// `(id, instance read, by an in-flight reader)` of each 404 for an id whose create had
    /// returned before the read began.
    false_negatives: Mutex<Vec<(i64, usize, bool)>>,
    /// Creates answered anything but 201 (or not answered).
    create_failures: Mutex<Vec<String>>,
    /// Reads answered anything but 200 or 404.
    read_failures: Mutex<Vec<String>>,
    /// `(started, latency)` of each create that returned 201.
    creates: Mutex<Vec<(Instant, Duration)>>,
    in_flight_reads: AtomicU64,
    in_flight_404s: AtomicU64,
}

impl Tally {
    fn fail(list: &Mutex<Vec<String>>, what: String) {
        let mut list = list.lock().unwrap();
        if list.len() < 20 {
            eprintln!("fleet test: {what}");
        }
        list.push(what);
    }

    fn false_negative(&self, id: i64, at: usize, in_flight_reader: bool) {
        let mut list = self.false_negatives.lock().unwrap();
        if list.len() < 20 {
            eprintln!(
                "fleet test: FALSE NEGATIVE: id {id} returned, then 404 on instance {at} ({})",
                if in_flight_reader {
                    "in-flight reader"
                } else {
                    "the pair's read"
                }
            );
        }
        list.push((id, at, in_flight_reader));
    }

    /// The false negatives: `(reads, distinct ids, of the reads those of in-flight readers)`.
    fn false_negatives(&self) -> (usize, usize, usize) {
        let list = self.false_negatives.lock().unwrap();
        let mut ids: Vec<i64> = list.iter().map(|&(id, ..)| id).collect();
        ids.sort_unstable();
        ids.dedup();
        let in_flight = list.iter().filter(|&&(.., reader)| reader).count();
        (list.len(), ids.len(), in_flight)
    }
}

/// A small xorshift generator: the clients' choices need no quality.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Reads `id` on `instance`; `Some(true)` found, `Some(false)` 404, `None` anything else
/// (recorded).
async fn read(
    client: &Client,
    instances: &[Instance],
    at: usize,
    id: i64,
    tally: &Tally,
) -> Option<bool> {
    let url = format!("{}/users/{id}", instances[at].base);
    match client.get(url).send().await {
        Ok(response) if response.status() == StatusCode::OK => Some(true),
        Ok(response) if response.status() == StatusCode::NOT_FOUND => Some(false),
        Ok(response) => {
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            Tally::fail(
                &tally.read_failures,
                format!("GET {id} on {at}: {status} {body}"),
            );
            None
        }
        Err(error) => {
            Tally::fail(&tally.read_failures, format!("GET {id} on {at}: {error}"));
            None
        }
    }
}

/// Runs create-then-read pairs over `targets` (writing on one, reading on the next) until
/// `ledger` is used up or `stop` is set, with readers of in-flight ids beside them.
async fn run_pairs(
    client: &Client,
    instances: &[Instance],
    targets: &[usize],
    ledger: &Arc<Ledger>,
    tally: &Arc<Tally>,
    stop: &Arc<AtomicBool>,
) {
    let writers_done = Arc::new(AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for task in 0..WRITERS {
        let (client, instances, targets) = (client.clone(), instances.to_vec(), targets.to_vec());
        let (ledger, tally, stop) = (Arc::clone(ledger), Arc::clone(tally), Arc::clone(stop));
        writers.spawn(async move {
            let mut turn = task;
            // ORDERING: SeqCst; a test's flag.
            // A fleet refusing creates fails the test soon, not after every id.
            while !stop.load(Ordering::SeqCst)
                && tally.create_failures.lock().unwrap().len() < MAX_FAILURES
            {
                let Some(id) = ledger.hand_out() else { break };
                let writer = targets[turn % targets.len()];
                let reader = targets[(turn + 1) % targets.len()];
                turn += 1;
                let started = Instant::now();
                let created = client
                    .post(format!("{}/users", instances[writer].base))
                    .json(&json!({ "id": id, "name": format!("user {id}") }))
                    .send()
                    .await;
                let latency = started.elapsed();
                match created {
                    Ok(response) if response.status() == StatusCode::CREATED => {}
                    Ok(response) => {
                        let status = response.status();
                        let body = response.text().await.unwrap_or_default();
                        let what = format!("POST {id} on {writer}: {status} {body}");
                        Tally::fail(&tally.create_failures, what);
                        continue;
                    }
                    Err(error) => {
                        let what = format!("POST {id} on {writer}: {error}");
                        Tally::fail(&tally.create_failures, what);
                        continue;
                    }
                }
                ledger.returned(id);
                tally.creates.lock().unwrap().push((started, latency));
                if read(&client, &instances, reader, id, &tally).await == Some(false) {
                    tally.false_negative(id, reader, false);
                }
                // ORDERING: Relaxed; a count read after the tasks are joined.
                tally.pairs.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let mut readers = tokio::task::JoinSet::new();
    for task in 0..IN_FLIGHT_READERS {
        let (client, instances, targets) = (client.clone(), instances.to_vec(), targets.to_vec());
        let (ledger, tally, done) = (
            Arc::clone(ledger),
            Arc::clone(tally),
            Arc::clone(&writers_done),
        );
        readers.spawn(async move {
            let mut random = Random(0x9e37_79b9_7f4a_7c15 ^ (task as u64 + 1));
            // ORDERING: SeqCst; a test's flag.
            while !done.load(Ordering::SeqCst) {
                // About as many reads as the pairs make, not a flood.
                tokio::time::sleep(Duration::from_millis(2)).await;
                let Some(id) = ledger.recent(random.next()) else {
                    continue;
                };
                let at = targets[random.next() as usize % targets.len()];
                // Whether the create had returned before this read began.
                let returned = ledger.has_returned(id);
                let found = read(&client, &instances, at, id, &tally).await;
                // ORDERING: Relaxed; counts read after the tasks are joined.
                tally.in_flight_reads.fetch_add(1, Ordering::Relaxed);
                if found == Some(false) {
                    if returned {
                        tally.false_negative(id, at, true);
                    } else {
                        tally.in_flight_404s.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    while let Some(joined) = writers.join_next().await {
        joined.expect("a writer task");
    }
    // ORDERING: SeqCst; a test's flag.
    writers_done.store(true, Ordering::SeqCst);
    while let Some(joined) = readers.join_next().await {
        joined.expect("an in-flight reader task");
    }
}

/// [`run_pairs`] in a task of its own, until `stop` is set.
fn spawn_pairs(
    client: &Client,
    instances: &[Instance],
    targets: &[usize],
    ledger: &Arc<Ledger>,
    tally: &Arc<Tally>,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let (client, instances, targets) = (client.clone(), instances.to_vec(), targets.to_vec());
    let (ledger, tally, stop) = (Arc::clone(ledger), Arc::clone(tally), Arc::clone(stop));
    tokio::spawn(async move {
        run_pairs(&client, &instances, &targets, &ledger, &tally, &stop).await;
    })
}

/// Reads on `instance` every id of `ledger` whose create had returned; returns how many were
/// read and those answered 404.
async fn sweep(client: &Client, instance: &Instance, ledger: &Arc<Ledger>) -> (usize, Vec<i64>) {
    let ids: Vec<i64> = (ledger.first..ledger.end())
        .filter(|&id| ledger.has_returned(id))
        .collect();
    let count = ids.len();
    let ids = Arc::new(ids);
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..8 {
        let (client, base, ids) = (client.clone(), instance.base.clone(), Arc::clone(&ids));
        tasks.spawn(async move {
            let mut missing = Vec::new();
            for &id in ids.iter().skip(task).step_by(8) {
                let url = format!("{base}/users/{id}");
                let status = client
                    .get(url)
                    .send()
                    .await
                    .expect("a read answers")
                    .status();
                if status != StatusCode::OK {
                    missing.push(id);
                }
            }
            missing
        });
    }
    let mut missing = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        missing.extend(joined.expect("a sweep task"));
    }
    (count, missing)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report_latencies(phase: &str, creates: &[(Instant, Duration)]) {
    let mut latencies: Vec<Duration> = creates.iter().map(|&(_, latency)| latency).collect();
    latencies.sort();
    eprintln!(
        "fleet test: {phase}: create latency (client) p50 {:?}, p99 {:?}, max {:?} over {} creates",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        percentile(&latencies, 1.0),
        latencies.len()
    );
}

/// Drops the test's table and its fleet's keys in Redis.
async fn clean_up(database: &str, table: &str, redis: &str, fleet: &str) {
    let (client, connection) = tokio_postgres::connect(database, tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL for the clean-up");
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
        .await
        .expect("the table is dropped");
    let redis = redis::Client::open(redis).expect("a Redis URL");
    let mut connection = redis
        .get_multiplexed_async_connection()
        .await
        .expect("Redis for the clean-up");
    let pattern = format!("cuckoo-guard:{{{fleet}}}*");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_no_false_negatives_and_a_kill() {
    let Some(database) = servers::server_url(&servers::POSTGRES) else {
        return;
    };
    let Some(redis) = servers::server_url(&servers::REDIS) else {
        return;
    };
    let unique = format!(
        "{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let table = format!("users_fleet_{unique}");
    let fleet = format!("users-fleet-test-{unique}");
    let client = Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .pool_max_idle_per_host(64)
        .build()
        .unwrap();

    // One at a time: the first creates the table.
    let mut processes = Processes::default();
    let mut instances: Vec<Instance> = Vec::new();
    for index in 0..3 {
        let started = Instant::now();
        instances.push(start(&mut processes, &database, &table, &redis, &fleet));
        let serving = wait_serving(&client, index, &instances[index]).await;
        eprintln!(
            "fleet test: instance {index} up in {:?} (serving {serving:?} after it listened)",
            started.elapsed()
        );
    }
    let all: Vec<usize> = (0..3).collect();

    // A new fleet holds creates for a while ([fleet.M7]): one create on each instance waits
    // it out before the measured phase.
    for (index, instance) in instances.iter().enumerate() {
        let started = Instant::now();
        let response = client
            .post(format!("{}/users", instance.base))
            .json(&json!({ "id": index + 1, "name": "first" }))
            .send()
            .await
            .expect("the first create answers");
        assert_eq!(
            response.status(),
            StatusCode::CREATED,
            "first create on {index}"
        );
        eprintln!(
            "fleet test: first create on instance {index}: {:?}",
            started.elapsed()
        );
    }

    // Phase 1: create on one instance, read on another.
    let pairs = pairs();
    let before = all_stats(&client, &instances).await;
    let ledger = Arc::new(Ledger::new(1_000_000, pairs));
    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let never = Arc::new(AtomicBool::new(false));
    let limit = Duration::from_secs(60) + Duration::from_millis(5u64.saturating_mul(pairs));
    tokio::time::timeout(
        limit,
        run_pairs(&client, &instances, &all, &ledger, &tally, &never),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "phase 1 did not finish within {limit:?}: {} of {pairs} pairs",
            tally.pairs.load(Ordering::Relaxed)
        )
    });
    let elapsed = started.elapsed();
    let after = all_stats(&client, &instances).await;
    let done = tally.pairs.load(Ordering::Relaxed);
    let false_negatives = tally.false_negatives();
    let announced = delta(&before, &after, &all, "fleet.creates_announced");
    let barrier = delta(&before, &after, &all, "fleet.barrier_wait_micros");
    eprintln!(
        "fleet test: phase 1: {done} pairs in {elapsed:.1?} ({:.0} pairs/s), false negatives: \
         {} reads of {} ids ({} of the reads by in-flight readers); {} in-flight reads ({} of \
         them 404 while the create was in flight)",
        done as f64 / elapsed.as_secs_f64(),
        false_negatives.0,
        false_negatives.1,
        false_negatives.2,
        tally.in_flight_reads.load(Ordering::Relaxed),
        tally.in_flight_404s.load(Ordering::Relaxed),
    );
    report_latencies("phase 1", &tally.creates.lock().unwrap());
    eprintln!(
        "fleet test: phase 1: barrier wait per create (from /stats) {:.0} µs over {announced} \
         announced creates; fail-open lookups {}; lookups {}; blocked {}; memo hits {}; \
         entries applied {}; coordinator calls per create {:.2}",
        barrier as f64 / announced.max(1) as f64,
        delta(&before, &after, &all, "passed_failing_open"),
        delta(&before, &after, &all, "lookups"),
        delta(&before, &after, &all, "blocked"),
        delta(&before, &after, &all, "memo_hits"),
        delta(&before, &after, &all, "fleet.entries_applied"),
        delta(&before, &after, &all, "fleet.coordinator_calls") as f64 / announced.max(1) as f64,
    );
    assert_eq!(
        false_negatives,
        (0, 0, 0),
        "false negatives (reads, ids, in-flight reads)"
    );
    assert_eq!(*tally.create_failures.lock().unwrap(), Vec::<String>::new());
    assert_eq!(*tally.read_failures.lock().unwrap(), Vec::<String>::new());
    assert_eq!(done, pairs, "every pair ran");
    assert!(
        announced >= pairs,
        "every create was announced: {announced}"
    );

    // Phase 2: lookups only (half of existing ids, half absent): no coordinator call each.
    let before = all_stats(&client, &instances).await;
    let phase_2 = Instant::now();
    let mut lookups = tokio::task::JoinSet::new();
    for task in 0..8u64 {
        let (client, instances) = (client.clone(), instances.clone());
        lookups.spawn(async move {
            let mut random = Random(0x2545_f491_4f6c_dd1d ^ (task + 1));
            let mut wrong = Vec::new();
            for n in 0..LOOKUPS as u64 / 8 {
                let existing = n % 2 == 0;
                let offset = (random.next() % pairs) as i64;
                let id = if existing {
                    1_000_000 + offset
                } else {
                    1_000_000_000 + offset
                };
                let at = random.next() as usize % instances.len();
                let url = format!("{}/users/{id}", instances[at].base);
                let status = client
                    .get(url)
                    .send()
                    .await
                    .expect("a lookup answers")
                    .status();
                let expected = if existing {
                    StatusCode::OK
                } else {
                    StatusCode::NOT_FOUND
                };
                if status != expected {
                    wrong.push((id, at, status));
                }
            }
            wrong
        });
    }
    let mut wrong = Vec::new();
    while let Some(joined) = lookups.join_next().await {
        wrong.extend(joined.expect("a lookup task"));
    }
    let after = all_stats(&client, &instances).await;
    let calls = delta(&before, &after, &all, "fleet.coordinator_calls");
    let looked_up = delta(&before, &after, &all, "lookups");
    let per_lookup = calls as f64 / looked_up.max(1) as f64;
    eprintln!(
        "fleet test: phase 2: {looked_up} lookups in {:.1?}, {calls} coordinator calls (background: \
         renewals, log reads, trims) = {per_lookup:.5} per lookup; blocked {}; fail-open {}",
        phase_2.elapsed(),
        delta(&before, &after, &all, "blocked"),
        delta(&before, &after, &all, "passed_failing_open"),
    );
    assert_eq!(wrong, [], "lookups answered wrongly (id, instance, status)");
    assert!(looked_up >= LOOKUPS as u64, "{looked_up} lookups counted");
    // Lookups make no calls: the background's (a few a second per instance) and a margin.
    let background = 10.0 * 3.0 * phase_2.elapsed().as_secs_f64();
    assert!(
        (calls as f64) < looked_up as f64 * 0.01 + background,
        "{calls} coordinator calls for {looked_up} lookups in {:?}",
        phase_2.elapsed()
    );
    for index in 0..3 {
        // Each member answers "absent" itself: the reads above tested serving filters.
        let blocked = figure(&after[index], "blocked") - figure(&before[index], "blocked");
        assert!(
            blocked > 0,
            "instance {index} blocked nothing: {:#}",
            after[index]
        );
    }

    // Phase 3: kill -9 instance 2 while creates run on 0 and 1.
    let survivors = [0, 1];
    let ledger = Arc::new(Ledger::new(10_000_000, 10_000_000));
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let before = all_stats(&client, &instances).await;
    let run = spawn_pairs(&client, &instances, &survivors, &ledger, &tally, &stop);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let killed_at = Instant::now();
    processes.kill(2);
    eprintln!("fleet test: phase 3: instance 2 killed (SIGKILL)");
    // Past the stall a dead member can cause (one lease and a margin), and some more.
    tokio::time::sleep(lease() * 2 + Duration::from_secs(3)).await;
    // ORDERING: SeqCst; a test's flag.
    stop.store(true, Ordering::SeqCst);
    tokio::time::timeout(REQUEST_TIMEOUT * 2, run)
        .await
        .expect("the writers stop")
        .expect("the phase's task");
    let after = all_stats(&client, &instances[..2]).await;
    let creates = tally.creates.lock().unwrap().clone();
    // Creates in progress at the kill or begun after it.
    let affected: Vec<(Instant, Duration)> = creates
        .iter()
        .copied()
        .filter(|&(started, latency)| started + latency >= killed_at)
        .collect();
    let longest = affected
        .iter()
        .map(|&(_, latency)| latency)
        .max()
        .unwrap_or_default();
    let resumed = creates
        .iter()
        .filter(|&&(started, _)| started >= killed_at + lease() + Duration::from_secs(1))
        .count();
    let false_negatives = tally.false_negatives();
    eprintln!(
        "fleet test: phase 3: {} pairs, false negatives on the survivors {:?} (reads, ids, \
         in-flight reads), memo hits {}, longest create \
         after the kill {longest:?} (lease {:?}), {resumed} creates begun a lease after the \
         kill, members expelled {}, fail-open lookups {}",
        tally.pairs.load(Ordering::Relaxed),
        false_negatives,
        delta(&before, &after, &survivors, "memo_hits"),
        lease(),
        delta(&before, &after, &survivors, "fleet.members_expelled"),
        delta(&before, &after, &survivors, "passed_failing_open"),
    );
    report_latencies("phase 3", &creates);
    assert_eq!(
        false_negatives,
        (0, 0, 0),
        "false negatives after the kill (reads, ids, in-flight reads)"
    );
    assert_eq!(*tally.create_failures.lock().unwrap(), Vec::<String>::new());
    assert_eq!(*tally.read_failures.lock().unwrap(), Vec::<String>::new());
    assert!(
        longest < lease() + Duration::from_secs(5),
        "a create stalled {longest:?} after the kill"
    );
    assert!(resumed > 0, "no create ran after the killed member's lease");

    // Phase 4: a new member joins while creates run on 0 and 1; pairs through it from the
    // moment it listens (it fails open until it serves), then every id created meanwhile is
    // read on it.
    let background = Arc::new(Ledger::new(20_000_000, 10_000_000));
    let background_tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let run = spawn_pairs(
        &client,
        &instances,
        &survivors,
        &background,
        &background_tally,
        &stop,
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let join_started = Instant::now();
    let joiner =
        tokio::task::block_in_place(|| start(&mut processes, &database, &table, &redis, &fleet));
    let listening = join_started.elapsed();
    instances.push(joiner);
    let through_joiner = [0, 3, 1, 3];
    let ledger = Arc::new(Ledger::new(30_000_000, pairs.min(20_000)));
    let tally = Arc::new(Tally::default());
    let before_joiner = stats(&client, &instances[3]).await;
    let (_, serving) = tokio::join!(
        run_pairs(
            &client,
            &instances,
            &through_joiner,
            &ledger,
            &tally,
            &never
        ),
        wait_serving(&client, 3, &instances[3]),
    );
    // ORDERING: SeqCst; a test's flag.
    stop.store(true, Ordering::SeqCst);
    tokio::time::timeout(REQUEST_TIMEOUT * 2, run)
        .await
        .expect("the writers stop")
        .expect("the phase's task");
    let after_joiner = stats(&client, &instances[3]).await;
    let (swept_background, missing_background) = sweep(&client, &instances[3], &background).await;
    let (swept_through, missing_through) = sweep(&client, &instances[3], &ledger).await;
    let false_negatives = tally.false_negatives();
    let background_false_negatives = background_tally.false_negatives();
    eprintln!(
        "fleet test: phase 4: the new member listened after {listening:.1?} and was seen serving \
         {serving:.1?} later (polled every 100 ms); {} pairs through it ({:?} false negatives), {} pairs on 0 and 1 meanwhile ({:?} \
         false negatives); then {swept_background} + {swept_through} ids read on it, {} + {} \
         404; its fail-open lookups {}, rebuilds asked {}",
        tally.pairs.load(Ordering::Relaxed),
        false_negatives,
        background_tally.pairs.load(Ordering::Relaxed),
        background_false_negatives,
        missing_background.len(),
        missing_through.len(),
        figure(&after_joiner, "passed_failing_open") - figure(&before_joiner, "passed_failing_open"),
        figure(&after_joiner, "fleet.rebuilds_asked"),
    );
    report_latencies(
        "phase 4 (through the new member)",
        &tally.creates.lock().unwrap(),
    );
    assert_eq!(false_negatives, (0, 0, 0), "through the new member");
    assert_eq!(
        background_false_negatives,
        (0, 0, 0),
        "on 0 and 1 during the join"
    );
    assert_eq!(
        missing_background,
        Vec::<i64>::new(),
        "ids created during the join, 404 on the new member"
    );
    assert_eq!(
        missing_through,
        Vec::<i64>::new(),
        "ids created through the new member, 404 on it"
    );
    for tally in [&tally, &background_tally] {
        assert_eq!(*tally.create_failures.lock().unwrap(), Vec::<String>::new());
        assert_eq!(*tally.read_failures.lock().unwrap(), Vec::<String>::new());
    }
    assert!(swept_background > 0, "creates ran during the join");

    drop(processes);
    clean_up(&database, &table, &redis, &fleet).await;
}

/// Sends `signal` (`STOP`, `CONT`) to an instance's process.
fn signal(processes: &Processes, index: usize, signal: &str) {
    let pid = processes.0[index].as_ref().expect("running").id();
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill(1) runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// An instance paused with `SIGSTOP` longer than its lease while another creates rows:
/// writers stop waiting for it after about a lease (and expel it), the log is trimmed past
/// it, and when it resumes (`SIGCONT`) it never answers 404 for those rows from its stale
/// filter: its deadline has passed, so it passes them to the database until it has rejoined
/// and, the log it had not read being gone, rebuilt from the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_instance_fails_open_when_it_resumes() {
    let Some(database) = servers::server_url(&servers::POSTGRES) else {
        return;
    };
    let Some(redis) = servers::server_url(&servers::REDIS) else {
        return;
    };
    let unique = format!(
        "{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let table = format!("users_pause_{unique}");
    let fleet = format!("users-pause-test-{unique}");
    let client = Client::builder().timeout(REQUEST_TIMEOUT).build().unwrap();
    let mut processes = Processes::default();
    let mut instances = Vec::new();
    for index in 0..2 {
        instances.push(start(&mut processes, &database, &table, &redis, &fleet));
        wait_serving(&client, index, &instances[index]).await;
    }
    // Past the new fleet's hold.
    for (index, instance) in instances.iter().enumerate() {
        let response = client
            .post(format!("{}/users", instance.base))
            .json(&json!({ "id": index + 1, "name": "first" }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    let before = stats(&client, &instances[1]).await;
    signal(&processes, 1, "STOP");
    let paused = Instant::now();
    let mut longest = Duration::ZERO;
    for id in 100..120 {
        let started = Instant::now();
        let response = client
            .post(format!("{}/users", instances[0].base))
            .json(&json!({ "id": id, "name": "made while 1 was paused" }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED, "create {id}");
        longest = longest.max(started.elapsed());
    }
    // Paused past the lease, and past the creates.
    let past = lease() * 2;
    if let Some(left) = past.checked_sub(paused.elapsed()) {
        tokio::time::sleep(left).await;
    }
    // The writer expelled the paused instance: a trim (the members' keepers run one every
    // 10 s) removes the entries it never read.
    let coordinator = RedisCoordinator::builder(redis.as_str(), fleet.as_str())
        .connect()
        .await
        .unwrap();
    let read_up_to: Position = before["fleet"]["applied"]
        .as_str()
        .expect("the paused instance's applied position")
        .parse()
        .unwrap();
    let trimming = Instant::now();
    while !coordinator.trimmed_after(read_up_to).await.unwrap() {
        assert!(
            trimming.elapsed() < Duration::from_secs(20),
            "the log was never trimmed past the paused instance"
        );
        coordinator.trim().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal(&processes, 1, "CONT");
    let mut not_found = Vec::new();
    for id in 100..120 {
        let response = client
            .get(format!("{}/users/{id}", instances[1].base))
            .send()
            .await
            .unwrap();
        if response.status() == StatusCode::NOT_FOUND {
            not_found.push(id);
        }
    }
    let after = stats(&client, &instances[1]).await;
    eprintln!(
        "pause test: paused {:?} (lease {:?}); the longest create meanwhile took {longest:?}; \
         fail-open lookups on the resumed instance: {}",
        paused.elapsed(),
        lease(),
        figure(&after, "passed_failing_open") - figure(&before, "passed_failing_open"),
    );
    assert!(
        not_found.is_empty(),
        "the resumed instance answered 404 for rows created while it was paused: {not_found:?}"
    );
    assert!(longest < lease() + Duration::from_secs(5), "{longest:?}");
    wait_serving(&client, 1, &instances[1]).await;
    for id in 100..120 {
        let response = client
            .get(format!("{}/users/{id}", instances[1].base))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "id {id} after the rejoin"
        );
    }
    let rejoined = stats(&client, &instances[1]).await;
    assert!(
        figure(&rejoined, "fleet.rebuilds_asked") > figure(&before, "fleet.rebuilds_asked"),
        "the instance trimmed past did not rebuild: {rejoined}"
    );
    assert!(figure(&rejoined, "rebuilds") > figure(&before, "rebuilds"));
    drop(processes);
    clean_up(&database, &table, &redis, &fleet).await;
}

/// Rows in `table` whose ids are in `ids`, counted by PostgreSQL itself.
async fn rows_among(database: &str, table: &str, ids: &[i64]) -> i64 {
    let (client, connection) = tokio_postgres::connect(database, tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL for the count");
    tokio::spawn(connection);
    client
        .query_one(
            &format!("SELECT count(*) FROM {table} WHERE id = ANY($1)"),
            &[&ids],
        )
        .await
        .expect("the count")
        .get(0)
}

/// Two instances over the test's own Redis, which is killed and restarted empty: meanwhile
/// both answer lookups through the database (existing rows 200, absent ones 404, counted as
/// fail-open) and refuse creates with 503 without writing them; after the restart both
/// rejoin the new coordinator state, rebuild and serve again, and create/read pairs across
/// them find no false negative.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_redis_fails_open_then_recovers_across_processes() {
    let Some(database) = servers::server_url(&servers::POSTGRES) else {
        return;
    };
    let Some(mut own) = OwnRedis::start() else {
        return;
    };
    let redis = own.url();
    let unique = format!(
        "{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let table = format!("users_restart_{unique}");
    let fleet = format!("users-restart-test-{unique}");
    let client = Client::builder().timeout(REQUEST_TIMEOUT).build().unwrap();
    let mut processes = Processes::default();
    let mut instances = Vec::new();
    for index in 0..2 {
        instances.push(start(&mut processes, &database, &table, &redis, &fleet));
        wait_serving(&client, index, &instances[index]).await;
    }
    let both = [0, 1];
    // Past the new fleet's hold.
    for (index, instance) in instances.iter().enumerate() {
        assert_eq!(
            create_status(&client, instance, index as i64 + 1).await,
            StatusCode::CREATED,
            "first create on {index}"
        );
    }

    // Before: pairs across the two, and rows created on each and read nowhere yet (so no
    // cache holds them when they are read during the outage).
    let ledger = Arc::new(Ledger::new(1_000_000, 200));
    let tally = Arc::new(Tally::default());
    let never = Arc::new(AtomicBool::new(false));
    tokio::time::timeout(
        REQUEST_TIMEOUT,
        run_pairs(&client, &instances, &both, &ledger, &tally, &never),
    )
    .await
    .expect("the pairs before the outage finish");
    assert_eq!(tally.false_negatives(), (0, 0, 0), "before the outage");
    assert_eq!(*tally.create_failures.lock().unwrap(), Vec::<String>::new());
    assert_eq!(*tally.read_failures.lock().unwrap(), Vec::<String>::new());
    let pairs_before = tally.pairs.load(Ordering::Relaxed);
    assert_eq!(pairs_before, 200, "every pair ran");
    let unread: Vec<i64> = (2_000_000..2_000_020).collect();
    for &id in &unread {
        let at = (id % 2) as usize;
        assert_eq!(
            create_status(&client, &instances[at], id).await,
            StatusCode::CREATED,
            "create {id} on {at}"
        );
    }

    // Redis killed: creates refused at once, even before the members' deadlines pass.
    own.kill();
    let down = Instant::now();
    let mut refused = Vec::new();
    let mut longest_refusal = Duration::ZERO;
    for id in 3_000_000..3_000_004i64 {
        let at = (id % 2) as usize;
        let started = Instant::now();
        let status = create_status(&client, &instances[at], id).await;
        longest_refusal = longest_refusal.max(started.elapsed());
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "create {id} on {at} with Redis down"
        );
        refused.push(id);
    }
    let mut stopped = Vec::new();
    for (index, instance) in instances.iter().enumerate() {
        wait_not_serving(&client, index, instance).await;
        stopped.push(down.elapsed());
    }
    let before = all_stats(&client, &instances).await;
    let existing: Vec<i64> = (ledger.first..ledger.end())
        .filter(|&id| ledger.has_returned(id))
        .chain(unread.iter().copied())
        .collect();
    let absent: Vec<i64> = (4_000_000..4_000_050).collect();
    let mut wrong = Vec::new();
    for (index, instance) in instances.iter().enumerate() {
        for &id in &existing {
            let status = get_status(&client, instance, id).await;
            if status != StatusCode::OK {
                wrong.push((id, index, status));
            }
        }
        for &id in &absent {
            let status = get_status(&client, instance, id).await;
            if status != StatusCode::NOT_FOUND {
                wrong.push((id, index, status));
            }
        }
    }
    for id in 3_000_010..3_000_014i64 {
        let at = (id % 2) as usize;
        let started = Instant::now();
        let status = create_status(&client, &instances[at], id).await;
        longest_refusal = longest_refusal.max(started.elapsed());
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "create {id} on {at} with Redis down, past the deadlines"
        );
        refused.push(id);
    }
    for (index, instance) in instances.iter().enumerate() {
        for &id in &refused {
            let status = get_status(&client, instance, id).await;
            if status != StatusCode::NOT_FOUND {
                wrong.push((id, index, status));
            }
        }
    }
    let during = all_stats(&client, &instances).await;
    let fail_open = delta(&before, &during, &both, "passed_failing_open");
    let outage = down.elapsed();
    assert_eq!(
        wrong,
        [],
        "lookups with Redis down answered wrongly (id, instance, status)"
    );
    assert_eq!(
        rows_among(&database, &table, &refused).await,
        0,
        "a refused create wrote its row"
    );
    for index in both {
        // Every lookup of an id the filter lacks went to the database: at least the absent
        // and the refused ones.
        let counted = figure(&during[index], "passed_failing_open")
            - figure(&before[index], "passed_failing_open");
        assert!(
            counted >= (absent.len() + refused.len()) as u64,
            "instance {index} counted {counted} fail-open lookups: {:#}",
            during[index]
        );
        assert_eq!(
            figure(&during[index], "blocked"),
            figure(&before[index], "blocked"),
            "instance {index} answered absent from its filter with Redis down"
        );
    }

    // Redis back, empty: a new coordinator state; both rejoin and rebuild.
    own.launch();
    let restarted = Instant::now();
    let (serving_0, serving_1) = tokio::join!(
        wait_serving(&client, 0, &instances[0]),
        wait_serving(&client, 1, &instances[1]),
    );
    let recovery = restarted.elapsed();
    let ledger_after = Arc::new(Ledger::new(5_000_000, 200));
    let tally = Arc::new(Tally::default());
    tokio::time::timeout(
        REQUEST_TIMEOUT,
        run_pairs(&client, &instances, &both, &ledger_after, &tally, &never),
    )
    .await
    .expect("the pairs after the restart finish");
    let mut missing = Vec::new();
    let mut found_refused = Vec::new();
    for (index, instance) in instances.iter().enumerate() {
        for &id in &existing {
            if get_status(&client, instance, id).await != StatusCode::OK {
                missing.push((id, index));
            }
        }
        for &id in &refused {
            if get_status(&client, instance, id).await != StatusCode::NOT_FOUND {
                found_refused.push((id, index));
            }
        }
    }
    let after = all_stats(&client, &instances).await;
    eprintln!(
        "fleet test: redis restart: refused creates took at most {longest_refusal:?}; members \
         stopped serving {:.1?} and {:.1?} after the kill (lease {:?}); {fail_open} fail-open \
         lookups in an outage of {outage:.1?}; serving again {:.1?} and {:.1?} after the \
         restart (recovery {recovery:.1?}), rejoins {}, rebuilds {}; {} pairs after it \
         ({:?} false negatives)",
        stopped[0],
        stopped[1],
        lease(),
        serving_0,
        serving_1,
        delta(&during, &after, &both, "fleet.rejoins"),
        delta(&during, &after, &both, "rebuilds"),
        tally.pairs.load(Ordering::Relaxed),
        tally.false_negatives(),
    );
    assert_eq!(tally.false_negatives(), (0, 0, 0), "after the restart");
    assert_eq!(*tally.create_failures.lock().unwrap(), Vec::<String>::new());
    assert_eq!(*tally.read_failures.lock().unwrap(), Vec::<String>::new());
    assert_eq!(tally.pairs.load(Ordering::Relaxed), 200, "every pair ran");
    assert_eq!(missing, [], "rows from before the outage, 404 after it");
    assert_eq!(found_refused, [], "refused creates found after the restart");
    for index in both {
        assert!(
            figure(&after[index], "fleet.rejoins") > figure(&during[index], "fleet.rejoins"),
            "instance {index} did not rejoin: {:#}",
            after[index]
        );
    }

    drop(processes);
    clean_up(&database, &table, &redis, &fleet).await;
}
