//! Store faults under traffic: connections killed by the server, and the server killed and
//! restarted. The guard answers with clear errors while the store is unreachable, recovers
//! on its own, and afterwards finds every key whose create returned.
//!
//! The Redis tests start their own `redis-server` on a free port (append-only file, fsync on
//! every write, so a killed server keeps every acknowledged write), so killing its clients or
//! the server itself disturbs no other test. One PostgreSQL test terminates only the backends
//! of its own store, found by their `application_name`; another starts a cluster of its own
//! (`initdb` and `pg_ctl` as the `postgres` user) and stops it with `pg_ctl stop -m
//! immediate`, a crash, then starts it again.
#![cfg(all(feature = "redis", feature = "postgres"))]

use crate::common;

use std::future::Future;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cuckoo_guard::guard::{AsyncCacheGuard, AsyncStore, Written};
use cuckoo_guard::stores::{PostgresStore, PostgresStoreError, RedisStore};
use cuckoo_guard::CuckooFilter;

use common::OwnRedis;

/// What a run of traffic saw.
#[derive(Debug, Default)]
struct Seen {
    created: Mutex<Vec<i64>>,
    creates_failed: AtomicU64,
    reads: AtomicU64,
    reads_failed: AtomicU64,
    false_negatives: AtomicU64,
}

/// Two tasks, one creating keys, one reading keys whose create returned, until `stop`.
fn traffic<St>(
    guard: &AsyncCacheGuard<St>,
    seen: &Arc<Seen>,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>>
where
    St: AsyncStore<Key = i64, Value = i64> + 'static,
{
    let writer = {
        let (guard, seen, stop) = (guard.clone(), Arc::clone(seen), Arc::clone(stop));
        tokio::spawn(async move {
            let mut id = 0;
            while !stop.load(Ordering::Relaxed) {
                id += 1;
                match guard.put(&id, &id).await {
                    Ok(written) => {
                        assert_eq!(written, Written::Created);
                        seen.created.lock().unwrap().push(id);
                    }
                    Err(_) => {
                        seen.creates_failed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        })
    };
    let reader = {
        let (guard, seen, stop) = (guard.clone(), Arc::clone(seen), Arc::clone(stop));
        tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let key = {
                    let created = seen.created.lock().unwrap();
                    n = n
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (!created.is_empty()).then(|| created[n % created.len()])
                };
                let Some(key) = key else {
                    tokio::task::yield_now().await;
                    continue;
                };
                seen.reads.fetch_add(1, Ordering::Relaxed);
                match guard.get(&key).await {
                    Ok(Some(value)) => assert_eq!(value, key),
                    Ok(None) => {
                        seen.false_negatives.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        seen.reads_failed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        })
    };
    vec![writer, reader]
}

/// Runs traffic, applies `fault` after a second (and a create), measures the time from the
/// end of the fault to the first read that succeeds, lets traffic run another second (and on
/// to more than 100 creates), then checks every created key. Returns the recovery time.
async fn survive<St, F, Fut>(guard: AsyncCacheGuard<St>, label: &str, fault: F) -> Duration
where
    St: AsyncStore<Key = i64, Value = i64> + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = traffic(&guard, &seen, &stop);
    let prober = {
        let (guard, seen) = (guard.clone(), Arc::clone(&seen));
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            common::until("a create before the fault", || {
                !seen.created.lock().unwrap().is_empty()
            })
            .await;
            let probe = seen.created.lock().unwrap()[0];
            fault().await;
            let ended = Instant::now();
            loop {
                if let Ok(Some(_)) = guard.get(&probe).await {
                    return ended.elapsed();
                }
                assert!(ended.elapsed() < Duration::from_secs(30), "no recovery");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let recovery = prober.await.unwrap();
    // Traffic goes on for a second, and until more than 100 creates returned.
    tokio::time::sleep(Duration::from_secs(1)).await;
    common::until("more than 100 creates", || {
        seen.created.lock().unwrap().len() > 100
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }

    let created = seen.created.lock().unwrap().clone();
    let mut missing = 0;
    for key in &created {
        if guard.get(key).await.unwrap() != Some(*key) {
            missing += 1;
        }
    }
    println!(
        "{label}: recovered {recovery:?} after the fault; {} creates returned, {} failed; \
         {} reads checked, {} failed; {} false negatives; {missing} created keys missing after",
        created.len(),
        seen.creates_failed.load(Ordering::Relaxed),
        seen.reads.load(Ordering::Relaxed),
        seen.reads_failed.load(Ordering::Relaxed),
        seen.false_negatives.load(Ordering::Relaxed),
    );
    assert!(created.len() > 100, "too little traffic: {}", created.len());
    assert_eq!(seen.false_negatives.load(Ordering::Relaxed), 0);
    assert_eq!(missing, 0);
    recovery
}

async fn redis_guard(url: &str) -> AsyncCacheGuard<RedisStore<i64, i64>> {
    let store = RedisStore::<i64, i64>::connect(url, "reconnect")
        .await
        .unwrap();
    let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000), store);
    guard.warm_up(1_000, |_| {}).await.unwrap();
    guard
}

async fn postgres_guard(url: String, table: &str) -> AsyncCacheGuard<PostgresStore<i64, i64>> {
    let store = PostgresStore::<i64, i64>::builder(url)
        .table(table)
        .create_table_if_missing(true)
        .connections(4)
        .connect()
        .await
        .unwrap();
    let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000), store);
    guard.warm_up(1_000, |_| {}).await.unwrap();
    guard
}

async fn redis_command(url: &str, command: &mut redis::Cmd) -> redis::RedisResult<redis::Value> {
    let mut connection = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    command.query_async(&mut connection).await
}

#[test]
fn redis_recovers_when_the_server_kills_its_clients() {
    let Some(server) = OwnRedis::start(&["--appendonly", "yes", "--appendfsync", "always"]) else {
        return;
    };
    common::runtime().block_on(async {
        let url = server.url();
        let guard = redis_guard(&url).await;
        let killer = url.clone();
        let recovery = survive(guard, "Redis CLIENT KILL", move || async move {
            let mut kill = redis::cmd("CLIENT");
            kill.arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .arg("SKIPME")
                .arg("yes");
            let killed = redis_command(&killer, &mut kill).await.unwrap();
            assert_ne!(killed, redis::Value::Int(0), "no client was killed");
        })
        .await;
        assert!(recovery < Duration::from_secs(3), "{recovery:?}");
    });
}

#[test]
fn redis_recovers_when_the_server_is_killed_and_restarted() {
    let Some(server) = OwnRedis::start(&["--appendonly", "yes", "--appendfsync", "always"]) else {
        return;
    };
    let server = Arc::new(Mutex::new(server));
    common::runtime().block_on(async {
        let url = server.lock().unwrap().url();
        let guard = redis_guard(&url).await;
        let down = guard.clone();
        let restarted = Arc::clone(&server);
        let recovery = survive(guard, "Redis kill -9 and restart", move || async move {
            restarted.lock().unwrap().kill();
            // While the server is down, calls fail with a clear error, never hang.
            let started = Instant::now();
            let error = down.get(&1).await.expect_err("the server is down");
            let waited = started.elapsed();
            println!("while down: {error} (after {waited:?})");
            assert!(waited < Duration::from_secs(10), "{waited:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
            let server = Arc::clone(&restarted);
            tokio::task::spawn_blocking(move || server.lock().unwrap().launch())
                .await
                .unwrap();
        })
        .await;
        // A retry delay of up to a second, jittered up to twice that, may have just begun
        // when the server is back; a failed retry cycle (about 5 s) or none fails.
        assert!(recovery < Duration::from_secs(4), "{recovery:?}");
    });
}

#[test]
fn postgres_recovers_when_its_backends_are_terminated() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    let table = common::unique_name("cg_reconnect");
    let application = table.clone();
    let separator = if url.contains('?') { '&' } else { '?' };
    let store_url = format!("{url}{separator}application_name={application}");
    common::runtime().block_on(async {
        let guard = postgres_guard(store_url, &table).await;
        let admin_url = url.clone();
        let recovery = survive(
            guard,
            "PostgreSQL pg_terminate_backend",
            move || async move {
                let (admin, connection) =
                    tokio_postgres::connect(&admin_url, tokio_postgres::NoTls)
                        .await
                        .unwrap();
                tokio::spawn(connection);
                let killed = admin
                    .query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE application_name = $1",
                        &[&application],
                    )
                    .await
                    .unwrap();
                assert!(!killed.is_empty(), "no backend was terminated");
                println!("terminated {} backends", killed.len());
            },
        )
        .await;
        assert!(recovery < Duration::from_secs(3), "{recovery:?}");

        let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        admin
            .batch_execute(&format!("DROP TABLE {table}"))
            .await
            .unwrap();
    });
}

/// A PostgreSQL cluster of the test's own, run as the `postgres` user.
struct OwnPostgres {
    bin: std::path::PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

impl OwnPostgres {
    fn start() -> Option<OwnPostgres> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|versions| {
                versions
                    .filter_map(|v| Some(v.ok()?.path().join("bin")))
                    .find(|bin| bin.join("initdb").exists())
            });
        let runuser = Path::new("/usr/sbin/runuser").exists();
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"));
        let (Some(bin), true, true) = (bin, runuser, root) else {
            eprintln!("SKIPPED: needs PostgreSQL's initdb, runuser and root to start a cluster");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("chown")
            .args(["postgres:"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success());
        let data = dir.path().join("data");
        let initdb = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(bin.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(
            initdb.status.success(),
            "{}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = OwnPostgres { bin, dir, port };
        cluster.pg_ctl(&["start", "-w"]);
        Some(cluster)
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl` on the cluster's data directory, as the `postgres` user.
    fn pg_ctl_command(&self) -> Command {
        let mut command = Command::new("runuser");
        command
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.path().join("data"));
        command
    }

    fn pg_ctl(&self, args: &[&str]) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        let output = self
            .pg_ctl_command()
            .args(["-o", &options, "-l"])
            .arg(self.dir.path().join("log"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "pg_ctl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl OwnPostgres {
    /// Sends `signal` (`STOP`, `CONT`) to the postmaster, then to its children (the
    /// backends of every connection among them).
    fn signal(&self, signal: &str) -> bool {
        let Ok(pid_file) = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid"))
        else {
            return false;
        };
        let pid = pid_file
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned();
        let postmaster = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .is_ok_and(|status| status.success());
        // No children is no error (exit status 1).
        let children = Command::new("pkill")
            .args([&format!("-{signal}"), "-P", &pid])
            .status()
            .is_ok_and(|status| status.code().is_some_and(|code| code <= 1));
        postmaster && children
    }

    /// Stops every process of the cluster (`SIGSTOP`): connections stay open, nothing
    /// answers. The cluster resumes (`SIGCONT`) when the returned value drops, a panic
    /// included.
    fn stop_answering(&self) -> Resume<'_> {
        assert!(self.signal("STOP"), "cannot stop the cluster's processes");
        Resume(self)
    }
}

/// Resumes a stopped cluster when dropped.
struct Resume<'c>(&'c OwnPostgres);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        let resumed = self.0.signal("CONT");
        if !std::thread::panicking() {
            assert!(resumed, "cannot resume the cluster's processes");
        }
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = self
            .pg_ctl_command()
            .args(["stop", "-m", "immediate"])
            .output();
    }
}

#[test]
fn postgres_recovers_when_the_server_crashes_and_restarts() {
    let Some(cluster) = OwnPostgres::start() else {
        return;
    };
    let cluster = Arc::new(cluster);
    common::runtime().block_on(async {
        let guard = postgres_guard(cluster.url(), "reconnect").await;
        let down = guard.clone();
        let restarted = Arc::clone(&cluster);
        let recovery = survive(guard, "PostgreSQL crash and restart", move || async move {
            let stopping = Arc::clone(&restarted);
            tokio::task::spawn_blocking(move || stopping.pg_ctl(&["stop", "-m", "immediate"]))
                .await
                .unwrap();
            let started = Instant::now();
            let error = down.get(&1).await.expect_err("the server is down");
            let waited = started.elapsed();
            println!("while down: {error} (after {waited:?})");
            assert!(waited < Duration::from_secs(5), "{waited:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
            tokio::task::spawn_blocking(move || restarted.pg_ctl(&["start", "-w"]))
                .await
                .unwrap();
        })
        .await;
        // A retry delay of up to a second may have just begun when the server is back, and
        // the first backend after crash recovery is slow; a failed retry cycle fails.
        assert!(recovery < Duration::from_secs(4), "{recovery:?}");
    });
}

/// A server that stops answering without closing its connections (every process of the
/// test's own cluster stopped with `SIGSTOP`) would hold a call until TCP gives up, minutes
/// later. With a statement timeout, a put on an open connection fails with the timeout error
/// within the timeout plus the connect timeout, and counts as an unknown outcome; the next
/// call fails within a bound too; once the server resumes, the store works again. Each call
/// is bounded by the test (`STALLED`), so a store without the timeout fails the test.
#[test]
fn postgres_calls_time_out_while_the_server_is_stopped() {
    const STALLED: Duration = Duration::from_secs(20);
    let Some(cluster) = OwnPostgres::start() else {
        return;
    };
    let watchdog = common::Stop::new("calls to a stopped PostgreSQL", Duration::from_secs(120));
    common::runtime().block_on(async {
        let store = PostgresStore::<i64, i64>::builder(cluster.url())
            .table("stopped")
            .create_table_if_missing(true)
            .statement_timeout(Some(Duration::from_secs(1)))
            .connect()
            .await
            .unwrap();
        assert_eq!(store.put(&1, &1).await.unwrap(), Written::Created);

        let resume = cluster.stop_answering();
        // The put takes the pool's idle connection, open but unanswered.
        let started = Instant::now();
        let error = tokio::time::timeout(STALLED, store.put(&2, &2))
            .await
            .unwrap_or_else(|_| panic!("a put to a stopped server stalled for {STALLED:?}"))
            .expect_err("the server is stopped");
        let waited = started.elapsed();
        println!("put while stopped: {error} (after {waited:?})");
        assert!(
            matches!(
                error,
                PostgresStoreError::Timeout {
                    operation: "put",
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains("timed out"), "{error}");
        assert!(
            <PostgresStore<i64, i64> as AsyncStore>::write_outcome_unknown(&error),
            "a timed-out put may still land"
        );
        assert!(
            waited >= Duration::from_secs(1) && waited < Duration::from_secs(6),
            "{waited:?}"
        );
        // The pool was cleared: the next call needs a new connection, which a stopped
        // server does not complete either.
        let started = Instant::now();
        let error = tokio::time::timeout(STALLED, store.get(&1))
            .await
            .unwrap_or_else(|_| panic!("a get to a stopped server stalled for {STALLED:?}"))
            .expect_err("the server is stopped");
        let waited = started.elapsed();
        println!("get while stopped: {error} (after {waited:?})");
        assert!(
            matches!(
                error,
                PostgresStoreError::Timeout { .. }
                    | PostgresStoreError::ConnectTimeout
                    | PostgresStoreError::Unavailable { .. }
            ),
            "{error:?}"
        );
        assert!(waited < Duration::from_secs(6), "{waited:?}");

        drop(resume);
        let resumed = Instant::now();
        loop {
            match tokio::time::timeout(STALLED, store.get(&1)).await {
                Ok(Ok(value)) => {
                    assert_eq!(value, Some(1));
                    break;
                }
                Ok(Err(error)) if resumed.elapsed() < Duration::from_secs(10) => {
                    println!("after resuming: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(Err(error)) => panic!("the store does not recover: {error}"),
                Err(_) => panic!("a get to a resumed server stalled for {STALLED:?}"),
            }
        }
        println!("recovered {:?} after resuming", resumed.elapsed());
        assert_eq!(store.put(&3, &3).await.unwrap(), Written::Created);
        assert_eq!(store.get(&3).await.unwrap(), Some(3));
    });
    drop(watchdog);
}
