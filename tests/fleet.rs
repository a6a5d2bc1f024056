//! A fleet of guards in one process: several `AsyncCacheGuard`s over one PostgreSQL table,
//! each with its own Redis coordinator connection, as replicas of a service would be. No
//! member may answer "absent" for a row another member created ([fleet.M1]-[fleet.M7]).
#![cfg(all(feature = "fleet", feature = "redis", feature = "postgres"))]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::servers::{server_url, POSTGRES, REDIS};
use common::{unique_name, until, OwnRedis};
use cuckoo_guard::fleet::{Coordinator, Fleet, FleetConfig, Position, RedisCoordinator};
use cuckoo_guard::guard::{
    Admission, AsyncCacheGuard, FleetError, GuardError, RebuildPolicy, Restart,
};
use cuckoo_guard::stores::PostgresStore;
use cuckoo_guard::CuckooFilter;

type Guard = AsyncCacheGuard<PostgresStore<i64, String>>;
type Member = Fleet<RedisCoordinator, i64>;

/// The longest any test here waits for a condition.
const PATIENCE: Duration = Duration::from_secs(60);

/// A store whose commits do not wait for the WAL flush: these tests check the members'
/// answers, never what a server crash keeps.
async fn store(url: &str, table: &str) -> PostgresStore<i64, String> {
    PostgresStore::builder(common::servers::without_flush_wait(url))
        .table(table)
        .create_table_if_missing(true)
        .connect()
        .await
        .unwrap()
}

fn guard(store: PostgresStore<i64, String>) -> Guard {
    AsyncCacheGuard::with_policy(
        CuckooFilter::with_capacity(200_000),
        store,
        RebuildPolicy::manual(),
    )
}

/// Settings for a test fleet: a short lease so lapses take a second, not three.
fn config(name: &str) -> FleetConfig {
    FleetConfig::new(name)
        .lease(Duration::from_millis(1_200))
        .create_timeout(Duration::from_secs(20))
        .write_bound(Duration::from_secs(1))
}

async fn coordinator(url: &str, fleet: &str) -> RedisCoordinator {
    RedisCoordinator::builder(url, fleet)
        .hold(Duration::from_millis(2_500))
        .connect()
        .await
        .unwrap()
}

/// `n` guards over one new table, each joined to one new fleet; returns once all serve.
async fn fleet_of(n: usize, pg: &str, redis: &str) -> (String, String, Vec<(Guard, Member)>) {
    let table = unique_name("fleet");
    let name = unique_name("fleet");
    let mut members = Vec::new();
    for _ in 0..n {
        let guard = guard(store(pg, &table).await);
        let fleet = Fleet::join(&guard, coordinator(redis, &name).await, config(&name))
            .await
            .unwrap();
        members.push((guard, fleet));
    }
    until("every member serves", || {
        members.iter().all(|(_, f)| f.stats().serving)
    })
    .await;
    (name, table, members)
}

/// The `q` quantile of `times` (sorted in place).
fn percentile(times: &mut [Duration], q: f64) -> Duration {
    times.sort();
    times[((times.len() - 1) as f64 * q).round() as usize]
}

fn servers() -> Option<(String, String)> {
    Some((server_url(&POSTGRES)?, server_url(&REDIS)?))
}

/// Creates through one member and reads through another right after the create returned:
/// never "absent". Absent keys are blocked (the members do serve), and lookups make no
/// coordinator call.
#[test]
fn a_create_through_one_member_is_present_on_the_others() {
    let Some((pg, redis)) = servers() else { return };
    common::runtime().block_on(async {
        let (_, _, members) = fleet_of(3, &pg, &redis).await;
        let members = Arc::new(members);
        let mut tasks = Vec::new();
        // Three writers at once, one per member, each reading its creates on the next member.
        for w in 0..3usize {
            let members = Arc::clone(&members);
            tasks.push(tokio::spawn(async move {
                let mut false_negatives = 0;
                let mut latencies = Vec::new();
                for i in 0..400i64 {
                    let key = (w as i64) * 1_000_000 + i;
                    let (writer, _) = &members[w];
                    let started = Instant::now();
                    writer.put(&key, &format!("row {key}")).await.unwrap();
                    latencies.push(started.elapsed());
                    let (reader, _) = &members[(w + 1) % 3];
                    if reader.admit(&key) == Admission::Blocked {
                        false_negatives += 1;
                    }
                    assert_eq!(reader.get(&key).await.unwrap(), Some(format!("row {key}")));
                }
                (false_negatives, latencies)
            }));
        }
        let mut false_negatives = 0;
        let mut latencies = Vec::new();
        for task in tasks {
            let (count, mut times) = task.await.unwrap();
            false_negatives += count;
            latencies.append(&mut times);
        }
        assert_eq!(
            false_negatives, 0,
            "members answered absent for created rows"
        );
        // The same creates on a guard alone over the same database, for the barrier's cost.
        let alone = guard(store(&pg, &unique_name("alone")).await);
        alone.warm_up(1_000, |_| {}).await.unwrap();
        let mut baseline = Vec::new();
        for key in 0..1_200i64 {
            let started = Instant::now();
            alone.put(&key, &format!("row {key}")).await.unwrap();
            baseline.push(started.elapsed());
        }
        eprintln!(
            "create latency, 3 members, 3 concurrent writers: p50 {:?} p99 {:?}; a guard alone, \
             one writer: p50 {:?} p99 {:?}",
            percentile(&mut latencies, 0.50),
            percentile(&mut latencies, 0.99),
            percentile(&mut baseline, 0.50),
            percentile(&mut baseline, 0.99),
        );
        // A member whose renewal a busy machine delayed fails open meanwhile: allowed, and
        // counted apart from the blocked ones. A stall that left every member past its
        // renewal's deadline blocks none: the pass is repeated, within the test's patience.
        let started = Instant::now();
        loop {
            let calls_before: Vec<u64> = members
                .iter()
                .map(|(_, f)| f.stats().coordinator_calls)
                .collect();
            let (mut blocked, mut failed_open) = (0, 0);
            for key in 5_000_000..5_001_000i64 {
                for (guard, _) in members.iter() {
                    match guard.admit(&key) {
                        Admission::Blocked => blocked += 1,
                        Admission::FailOpen => failed_open += 1,
                        _ => {}
                    }
                }
            }
            assert!(
                blocked + failed_open > 2_900,
                "serving members block absent keys ({blocked} of 3000, {failed_open} failed open)"
            );
            for ((_, fleet), before) in members.iter().zip(calls_before) {
                // The tasks' own calls (reads, renewals) go on; lookups add none: 3,000
                // lookups within well under a second add at most a few task calls.
                let during = fleet.stats().coordinator_calls - before;
                eprintln!("coordinator calls during 3,000 lookups on one member: {during}");
                assert!(
                    during < 100,
                    "{during} coordinator calls during 3,000 lookups"
                );
            }
            if blocked > 0 {
                break;
            }
            assert!(started.elapsed() < PATIENCE, "no member served");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for (guard, fleet) in members.iter() {
            let stats = fleet.stats();
            assert!(stats.creates_announced >= 400, "{stats:?}");
            assert!(
                guard.stats().fleet_creates_applied >= 800,
                "{:?}",
                guard.stats()
            );
        }
    });
}

/// Deletes propagate: a row deleted through one member is announced and applied by the
/// others, and rows that remain stay present everywhere.
#[test]
fn deletes_reach_every_member_and_keep_other_rows() {
    let Some((pg, redis)) = servers() else { return };
    common::runtime().block_on(async {
        let (_, _, members) = fleet_of(2, &pg, &redis).await;
        let (a, fleet_a) = &members[0];
        let (b, _) = &members[1];
        for key in 0..200i64 {
            a.put(&key, &format!("row {key}")).await.unwrap();
        }
        // Some entries past every member's scan, so the deletes below may remove copies.
        for key in 0..100i64 {
            assert!(b.delete(&key).await.unwrap());
        }
        until("the deletes are announced and applied", || {
            a.stats().fleet_deletes_applied >= 100
        })
        .await;
        assert!(fleet_a.stats().entries_applied >= 100);
        for key in 100..200i64 {
            assert_ne!(a.admit(&key), Admission::Blocked);
            assert_ne!(b.admit(&key), Admission::Blocked);
        }
        for key in 0..100i64 {
            assert_eq!(a.get(&key).await.unwrap(), None);
        }
    });
}

/// A member whose tasks stop (its process died) keeps writers waiting at most about one
/// lease, and fails open on its own misses once its deadline passed.
#[test]
fn a_dead_member_stalls_writers_for_about_a_lease() {
    let Some((pg, redis)) = servers() else { return };
    common::runtime().block_on(async {
        let (_, _, mut members) = fleet_of(2, &pg, &redis).await;
        let (dead_guard, dead_fleet) = members.pop().unwrap();
        let (live, _) = &members[0];
        // Past the new fleet's hold ([fleet.M7]), so the next create waits for the dead only.
        live.put(&6, &String::from("six")).await.unwrap();
        drop(dead_fleet); // no leave: its lease must expire
        let started = Instant::now();
        live.put(&7, &String::from("seven")).await.unwrap();
        let stalled = started.elapsed();
        eprintln!("a create waited {stalled:?} for a dead member (lease 1.2 s)");
        assert!(stalled < Duration::from_secs(6), "{stalled:?}");
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        // The dead member's filter may lack 7; past its deadline it must not say "absent".
        assert_ne!(dead_guard.admit(&7), Admission::Blocked);
        assert_ne!(dead_guard.admit(&123_456_789), Admission::Blocked);
        assert!(dead_guard.stats().passed_failing_open >= 2);
    });
}

/// A member that joins while others create: 0 false negatives on it, for keys created before,
/// during and after its join.
#[test]
fn a_member_joining_mid_run_misses_nothing() {
    let Some((pg, redis)) = servers() else { return };
    common::runtime().block_on(async {
        let (name, table, members) = fleet_of(2, &pg, &redis).await;
        let members = Arc::new(members);
        let writer = {
            let members = Arc::clone(&members);
            tokio::spawn(async move {
                for key in 0..1_500i64 {
                    let (guard, _) = &members[(key % 2) as usize];
                    guard.put(&key, &format!("row {key}")).await.unwrap();
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let joiner = guard(store(&pg, &table).await);
        let fleet = Fleet::join(&joiner, coordinator(&redis, &name).await, config(&name))
            .await
            .unwrap();
        writer.await.unwrap();
        until("the joiner serves", || fleet.stats().serving).await;
        let mut false_negatives = 0;
        for key in 0..1_500i64 {
            if joiner.admit(&key) == Admission::Blocked {
                false_negatives += 1;
            }
        }
        assert_eq!(false_negatives, 0);
        until("the joiner blocks an absent key", || {
            joiner.admit(&9_999_999) == Admission::Blocked
        })
        .await;
    });
}

/// Redis killed and restarted empty: members fail open meanwhile, creates are refused with a
/// fleet error (the store untouched), and after the restart the members rejoin, rebuild and
/// serve again without a false negative.
#[test]
fn a_restarted_coordinator_fails_open_then_recovers() {
    let Some(pg) = server_url(&POSTGRES) else {
        return;
    };
    let Some(mut own) = OwnRedis::start(&[]) else {
        return;
    };
    let redis = own.url();
    common::runtime().block_on(async {
        let (_, _, members) = fleet_of(2, &pg, &redis).await;
        let (a, _) = &members[0];
        let (b, fleet_b) = &members[1];
        for key in 0..50i64 {
            a.put(&key, &format!("row {key}")).await.unwrap();
        }
        own.kill();
        let down = Instant::now();
        match a.put(&1_000, &String::from("refused")).await {
            Err(GuardError::Fleet(_)) => {}
            other => panic!("a create while the coordinator is down: {other:?}"),
        }
        assert_eq!(
            b.get(&1_000).await.unwrap(),
            None,
            "the refused create left no row"
        );
        until("the members fail open", || {
            b.admit(&2_000_000) == Admission::FailOpen
        })
        .await;
        own.launch();
        until("the members serve again", || {
            members.iter().all(|(_, f)| f.stats().serving)
        })
        .await;
        eprintln!("recovered {:?} after the kill", down.elapsed());
        assert!(fleet_b.stats().rejoins >= 1);
        for key in 0..50i64 {
            assert_ne!(b.admit(&key), Admission::Blocked);
        }
        for key in 100..150i64 {
            b.put(&key, &format!("row {key}")).await.unwrap();
            assert_ne!(a.admit(&key), Admission::Blocked);
        }
        assert!(b.stats().passed_failing_open >= 1);
    });
}

/// Rows inserted by SQL behind the fleet's back: the drift sentinel finds one, fails open
/// and rebuilds; afterwards the member holds the rows. Reports the time to detection.
#[test]
fn the_sentinel_finds_rows_written_around_the_fleet() {
    let Some((pg, redis)) = servers() else { return };
    common::runtime().block_on(async {
        let table = unique_name("fleet");
        let name = unique_name("fleet");
        let member = guard(store(&pg, &table).await);
        let fleet = Fleet::join(
            &member,
            coordinator(&redis, &name).await,
            config(&name).sentinel_rate(50),
        )
        .await
        .unwrap();
        until("the member serves", || fleet.stats().serving).await;
        for key in 0..990i64 {
            member.put(&key, &format!("row {key}")).await.unwrap();
        }
        // 1% of the rows written around the guard, as a migration would.
        let (client, connection) = tokio_postgres::connect(&pg, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .execute(
                &format!(
                    "INSERT INTO \"{table}\" SELECT g, 'outside ' || g FROM generate_series(10000, 10009) g"
                ),
                &[],
            )
            .await
            .unwrap();
        let drifted = Instant::now();
        until("the sentinel finds the drift", || fleet.stats().sentinel_misses > 0).await;
        eprintln!(
            "the sentinel found a 1% drift after {:?} at 50 rows/s ({} rows sampled)",
            drifted.elapsed(),
            fleet.stats().sentinel_samples
        );
        until("the member serves again after its rebuild", || {
            member.stats().rebuilds >= 1 && fleet.stats().serving
        })
        .await;
        for key in 10_000..10_010i64 {
            assert_ne!(member.admit(&key), Admission::Blocked);
        }
    });
}

/// A member expelled (its lease deleted, as if it had paused past it) while the log is
/// trimmed past its position: its renewal finds the lease gone, its rejoin finds its old
/// registration gone, and it rebuilds from the store; creates made meanwhile on another
/// member are present on it afterwards.
#[test]
fn a_member_trimmed_past_rebuilds() {
    let Some((pg, redis)) = servers() else { return };
    common::runtime().block_on(async {
        let (name, _, members) = fleet_of(2, &pg, &redis).await;
        let (a, fleet_a) = &members[0];
        let (b, fleet_b) = &members[1];
        let coordinator = coordinator(&redis, &name).await;
        let slow = fleet_b.member().expect("registered");
        let mut connection = redis::Client::open(redis.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("DEL")
            .arg(format!("{}:lease:{}", coordinator.key_prefix(), slow.0))
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(coordinator.expel(slow).await.unwrap());
        for key in 0..300i64 {
            a.put(&key, &format!("row {key}")).await.unwrap();
        }
        let trimmed = coordinator.trim().await.unwrap();
        eprintln!("trimmed {trimmed} entries past the expelled member");
        until("the expelled member rebuilt and serves", || {
            fleet_b.stats().rebuilds_asked >= 1
                && b.stats().rebuilds >= 1
                && fleet_b.stats().serving
        })
        .await;
        for key in 0..300i64 {
            assert_ne!(b.admit(&key), Admission::Blocked, "key {key}");
        }
        assert!(fleet_b.stats().rejoins >= 1);
        assert!(fleet_a.stats().creates_announced >= 300);
    });
}

/// A create announced (and acknowledged) **before** a member joined, whose row is written
/// **after** the joiner's scan: the joiner takes the key from the coordinator's in-flight
/// creates at its registration ([fleet.M5]) and never answers "absent" for it.
#[test]
fn a_create_in_flight_across_a_join_is_present_on_the_joiner() {
    let Some((pg, redis)) = servers() else { return };
    common::runtime().block_on(async {
        let (name, table, members) = fleet_of(1, &pg, &redis).await;
        let (_, fleet_a) = &members[0];
        // An outside writer announces 77 through member A; the row is not written yet.
        let announcement = fleet_a.announce_created(&77).await.unwrap();
        let joiner = guard(store(&pg, &table).await);
        let fleet = Fleet::join(&joiner, coordinator(&redis, &name).await, config(&name))
            .await
            .unwrap();
        until("the joiner serves", || fleet.stats().serving).await;
        // The write lands after the joiner's warm-up scanned the (empty) table.
        let (client, connection) = tokio_postgres::connect(&pg, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .execute(&format!("INSERT INTO \"{table}\" VALUES (77, 'late')"), &[])
            .await
            .unwrap();
        announcement.ended().await;
        assert_ne!(joiner.admit(&77), Admission::Blocked);
        assert_eq!(joiner.get(&77).await.unwrap(), Some(String::from("late")));
        until("the joiner blocks an absent key", || {
            joiner.admit(&78) == Admission::Blocked
        })
        .await;
    });
}

/// Waits until `fleet`'s member acknowledged a position past `position` in the coordinator,
/// so a trim could pass it.
async fn acked_past(coordinator: &RedisCoordinator, fleet: &Member, position: Position) {
    let member = fleet.member().expect("registered");
    let start = Instant::now();
    loop {
        let states = coordinator.members(&[member]).await.unwrap();
        if states.members[0].acked > position {
            return;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the member never acknowledged past {position}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [fleet.M8]: a member sealed at shutdown restarts from its file and catches up from the log
/// without scanning the store: rows created and deleted through the other member meanwhile
/// are right, a trim while it was down stopped at the sealed position, the sealed guard
/// refuses creates and announces no delete (a delete made after the seal leaves copies).
#[test]
fn a_sealed_member_restarts_from_the_log() {
    let Some((pg, redis)) = servers() else { return };
    common::runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.cgsnap");
        let (name, table, mut members) = fleet_of(2, &pg, &redis).await;
        let (b, fleet_b) = members.pop().unwrap();
        let (a, mut fleet_a) = members.pop().unwrap();
        for key in 0..100i64 {
            a.put(&key, &format!("a {key}")).await.unwrap();
            b.put(&(1_000 + key), &format!("b {key}")).await.unwrap();
        }
        // A delete announced just before the seal: the sealed position covers it, so no
        // restart applies it to a filter that already lost the copy.
        assert!(a.delete(&99).await.unwrap());
        let top = coordinator(&redis, &name).await.top().await.unwrap();
        let sealed = fleet_a.seal(&a, &path).await.unwrap();
        assert!(sealed.applied >= top, "{sealed:?} below {top}");
        assert!(sealed.written.items >= 199, "{sealed:?}");
        // The sealed guard refuses creates and leaves the store alone.
        match a.put(&5_000, &String::from("late")).await {
            Err(GuardError::Fleet(FleetError::Sealed)) => {}
            other => panic!("a create through a sealed guard: {other:?}"),
        }
        assert_eq!(b.get(&5_000).await.unwrap(), None);
        // A delete through the sealed guard is not announced (the seal's position covers every
        // delete the member announced): every member keeps its copy, a false positive.
        let announced = fleet_a.stats().deletes_announced;
        assert!(a.delete(&7).await.unwrap());
        assert_eq!(fleet_a.stats().deletes_announced, announced);
        drop(a);
        // While A is down: creates and deletes through B, and a trim.
        for key in 0..200i64 {
            b.put(&(2_000 + key), &format!("b {key}")).await.unwrap();
        }
        for key in 0..50i64 {
            assert!(b.delete(&(2_000 + key)).await.unwrap());
        }
        let coordinator_b = coordinator(&redis, &name).await;
        acked_past(&coordinator_b, &fleet_b, sealed.applied).await;
        coordinator_b.trim().await.unwrap();
        assert!(
            !coordinator_b.trimmed_after(sealed.applied).await.unwrap(),
            "the seal's record holds the log at its position"
        );
        let (a, fleet_a, restart) = Fleet::restore(
            &path,
            store(&pg, &table).await,
            || CuckooFilter::with_capacity(200_000),
            coordinator(&redis, &name).await,
            config(&name),
        )
        .await
        .unwrap();
        assert!(restart.is_trusted(), "{restart}");
        until("the restored member serves", || fleet_a.stats().serving).await;
        for key in (0..99).chain(1_000..1_100).chain(2_050..2_200) {
            assert_ne!(a.admit(&key), Admission::Blocked, "key {key}");
        }
        let stats = fleet_a.stats();
        assert_eq!(stats.rebuilds_asked, 0, "{stats:?}");
        assert_eq!(a.stats().rebuilds, 0);
        // B's 200 creates and 50 deletes after the seal, nothing of the sealed instance's.
        assert_eq!(stats.entries_applied, 250, "{stats:?}");
        assert_eq!(a.stats().fleet_deletes_applied, 50);
        assert_ne!(
            a.admit(&7),
            Admission::Blocked,
            "the unannounced delete's copy stays"
        );
        until("the restored member blocks an absent key", || {
            a.admit(&9_999) == Admission::Blocked
        })
        .await;
        // The restored member is a member: B's creates wait for it and reach it.
        b.put(&3_000, &String::from("after")).await.unwrap();
        assert_ne!(a.admit(&3_000), Admission::Blocked);
        fleet_a.leave().await;
        fleet_b.leave().await;
    });
}

/// [fleet.M8]: a sealed file whose log lost an entry past its position is trusted as a file
/// but rebuilt from the store ([`Restart::NotCovered`]); a second restart from a copy of the
/// same file finds no record (a record is taken once) and warms up. Neither answers "absent"
/// for a row.
#[test]
fn a_sealed_file_the_log_no_longer_covers_is_rebuilt() {
    let Some((pg, redis)) = servers() else { return };
    common::runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.cgsnap");
        let copy = dir.path().join("copy.cgsnap");
        let (name, table, mut members) = fleet_of(2, &pg, &redis).await;
        let (b, fleet_b) = members.pop().unwrap();
        let (c, mut fleet_c) = members.pop().unwrap();
        for key in 0..100i64 {
            c.put(&key, &format!("c {key}")).await.unwrap();
        }
        let sealed = fleet_c.seal(&c, &path).await.unwrap();
        drop(c);
        std::fs::copy(&path, &copy).unwrap();
        for key in 100..300i64 {
            b.put(&key, &format!("b {key}")).await.unwrap();
        }
        // An entry past the seal's position is lost (as to a failover, or a hand's XDEL).
        let coordinator_b = coordinator(&redis, &name).await;
        let mut connection = redis::Client::open(redis.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let log = format!("{}:log", coordinator_b.key_prefix());
        let after: redis::Value = redis::cmd("XRANGE")
            .arg(&log)
            .arg(format!("({}", sealed.applied))
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut connection)
            .await
            .unwrap();
        let redis::Value::Array(entries) = after else {
            panic!("{after:?}")
        };
        let redis::Value::Array(entry) = &entries[0] else {
            panic!("{entries:?}")
        };
        let id: String = redis::from_redis_value(entry[0].clone()).unwrap();
        let _: i64 = redis::cmd("XDEL")
            .arg(&log)
            .arg(&id)
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(coordinator_b.trimmed_after(sealed.applied).await.unwrap());
        let (c, fleet_c, restart) = Fleet::restore(
            &path,
            store(&pg, &table).await,
            || CuckooFilter::with_capacity(200_000),
            coordinator(&redis, &name).await,
            config(&name),
        )
        .await
        .unwrap();
        assert!(matches!(restart, Restart::NotCovered(_)), "{restart}");
        until("the restored member rebuilt and serves", || {
            fleet_c.stats().serving && c.stats().rebuilds >= 1
        })
        .await;
        for key in 0..300i64 {
            assert_ne!(c.admit(&key), Admission::Blocked, "key {key}");
        }
        // A second restart from the same file: the record was taken, so the fallback warms up.
        let (d, fleet_d, restart) = Fleet::restore(
            &copy,
            store(&pg, &table).await,
            || CuckooFilter::with_capacity(200_000),
            coordinator(&redis, &name).await,
            config(&name),
        )
        .await
        .unwrap();
        assert!(matches!(restart, Restart::NotCovered(_)), "{restart}");
        assert!(!restart.is_trusted());
        until("the second restart serves", || fleet_d.stats().serving).await;
        for key in 0..300i64 {
            assert_ne!(d.admit(&key), Admission::Blocked, "key {key}");
        }
        for fleet in [fleet_b, fleet_c, fleet_d] {
            fleet.leave().await;
        }
    });
}

/// [fleet.M8]: a member whose registration is gone (expelled, so the log past its
/// acknowledgement may have been trimmed) cannot seal: no record is held. A seal refused
/// for a guard that is not the member's changes nothing.
#[test]
fn an_expelled_member_cannot_seal() {
    let Some((pg, redis)) = servers() else { return };
    common::runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.cgsnap");
        let (name, _, mut members) = fleet_of(2, &pg, &redis).await;
        let (b, fleet_b) = members.pop().unwrap();
        let (a, mut fleet_a) = members.pop().unwrap();
        // A guard that is not the member's: refused, nothing changes.
        assert!(fleet_a.seal(&b, &path).await.is_err());
        until("A serves", || fleet_a.stats().serving).await;
        a.put(&1, &String::from("one")).await.unwrap();
        let coordinator = coordinator(&redis, &name).await;
        let member = fleet_a.member().expect("registered");
        let mut connection = redis::Client::open(redis.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("DEL")
            .arg(format!("{}:lease:{}", coordinator.key_prefix(), member.0))
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(coordinator.expel(member).await.unwrap());
        assert!(fleet_a.seal(&a, &path).await.is_err());
        let seals: i64 = redis::cmd("HLEN")
            .arg(format!("{}:seals", coordinator.key_prefix()))
            .query_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(seals, 0, "an expelled member's seal was held");
        b.put(&2, &String::from("two")).await.unwrap();
        assert_ne!(b.admit(&1), Admission::Blocked);
        fleet_b.leave().await;
    });
}

/// An update through one member (a put of an existing key) adds a second copy on the others
/// ([fleet.F4]): counted as stale there, and the rebuild policy's stale share reclaims the
/// slots with a rebuild triggered by the applied entries, as by local writes.
#[test]
fn updates_elsewhere_count_as_stale_copies_and_trigger_rebuilds() {
    let Some((pg, redis)) = servers() else { return };
    common::runtime().block_on(async {
        let table = unique_name("fleet");
        let name = unique_name("fleet");
        let writer = guard(store(&pg, &table).await);
        let fleet_w = Fleet::join(&writer, coordinator(&redis, &name).await, config(&name))
            .await
            .unwrap();
        // The reader rebuilds automatically once stale copies pass 10% of its filter.
        let reader = AsyncCacheGuard::with_policy(
            CuckooFilter::with_capacity(200_000),
            store(&pg, &table).await,
            RebuildPolicy::default(),
        );
        let fleet_r = Fleet::join(&reader, coordinator(&redis, &name).await, config(&name))
            .await
            .unwrap();
        until("both serve", || {
            fleet_w.stats().serving && fleet_r.stats().serving
        })
        .await;
        for key in 0..300i64 {
            writer.put(&key, &format!("v1 {key}")).await.unwrap();
        }
        for key in 0..300i64 {
            writer.put(&key, &format!("v2 {key}")).await.unwrap();
        }
        until("the reader applied the updates", || {
            fleet_r.stats().entries_applied >= 600
        })
        .await;
        assert!(reader.stats().stale_copies >= 270, "{:?}", reader.stats());
        until("the reader rebuilt for its stale copies", || {
            reader.stats().rebuilds >= 1
        })
        .await;
        until("the reader serves", || fleet_r.stats().serving).await;
        for key in 0..300i64 {
            assert_ne!(reader.admit(&key), Admission::Blocked, "key {key}");
        }
        fleet_w.leave().await;
        fleet_r.leave().await;
    });
}

/// [fleet.M8]: a delete whose announcement ended with its outcome unknown (the coordinator
/// did not answer in time; the entry lands later) may lie past any position a seal could
/// record, where a restart from the file would apply it to a filter that already lost the
/// copy (taking a colliding key's): the member refuses to seal, and its restart rebuilds.
#[test]
fn a_member_with_a_delete_of_unknown_outcome_does_not_seal() {
    let Some((pg, _)) = servers() else { return };
    let Some(own) = OwnRedis::start(&[]) else {
        return;
    };
    let redis = own.url();
    common::runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let name = unique_name("fleet");
        let a = guard(store(&pg, &unique_name("fleet")).await);
        let impatient = RedisCoordinator::builder(&redis, &name)
            .hold(Duration::from_millis(2_500))
            .response_timeout(Duration::from_millis(800))
            .connect()
            .await
            .unwrap();
        let mut fleet_a = Fleet::join(&a, impatient, config(&name)).await.unwrap();
        until("A serves", || fleet_a.stats().serving).await;
        a.put(&1, &String::from("one")).await.unwrap();
        // The server holds writes until the delete returned: the delete's announcement times
        // out, and its entry is appended when the pause ends.
        let mut connection = redis::Client::open(redis.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(10_000)
            .arg("WRITE")
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(a.delete(&1).await.unwrap());
        let _: () = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query_async(&mut connection)
            .await
            .unwrap();
        let refused = fleet_a.seal(&a, dir.path().join("a.cgsnap")).await;
        match refused {
            Err(GuardError::Fleet(FleetError::Guard(why))) => {
                assert!(why.contains("outcome unknown"), "{why}")
            }
            other => panic!("a member with a delete of unknown outcome sealed: {other:?}"),
        }
        // Refused before it began: the member goes on.
        until("A serves again", || fleet_a.stats().serving).await;
        fleet_a.leave().await;
    });
}

/// [fleet.M7]: a create acknowledged in a coordinator state that is then lost (Redis
/// restarted empty), whose row is written after the loss: a guard that joins the new state
/// scans only once the state is `write_bound` old, so its warm-up holds the row, whoever
/// began the state.
#[test]
fn a_write_in_flight_across_a_lost_state_reaches_a_joiner() {
    let Some((pg, _)) = servers() else { return };
    let Some(mut own) = OwnRedis::start(&[]) else {
        return;
    };
    let redis = own.url();
    common::runtime().block_on(async {
        let table = unique_name("fleet");
        let name = unique_name("fleet");
        // Seconds to spare after the write at 700 ms, for a slow commit on a loaded machine.
        let bound = Duration::from_secs(5);
        let config = config(&name).write_bound(bound);
        let a = guard(store(&pg, &table).await);
        let fleet_a = Fleet::join(&a, coordinator(&redis, &name).await, config.clone())
            .await
            .unwrap();
        until("A serves", || fleet_a.stats().serving).await;
        // Acknowledged in the first state; the row is not written yet.
        let announcement = fleet_a.announce_created(&77).await.unwrap();
        own.kill();
        own.launch();
        let lost = Instant::now();
        // Another guard begins the new state; the joiner registers into it. Joins return
        // after their warm-ups: they run meanwhile.
        let join = |delay: u64| {
            let (pg, table, redis, name, config) = (
                pg.clone(),
                table.clone(),
                redis.clone(),
                name.clone(),
                config.clone(),
            );
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                let guard = guard(store(&pg, &table).await);
                let fleet = Fleet::join(&guard, coordinator(&redis, &name).await, config)
                    .await
                    .unwrap();
                (guard, fleet)
            })
        };
        let other = join(0);
        let joiner = join(200);
        // The slow write lands within the bound of the loss, while the joins run.
        let (client, connection) = tokio_postgres::connect(&pg, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        tokio::time::sleep(Duration::from_millis(700)).await;
        client
            .execute(&format!("INSERT INTO \"{table}\" VALUES (77, 'late')"), &[])
            .await
            .unwrap();
        assert!(lost.elapsed() < bound, "the write landed after the bound");
        let (joiner, fleet_j) = joiner.await.unwrap();
        let (other, fleet_o) = other.await.unwrap();
        // A, of the lost state, rejoins the new one (another began it) and rebuilds.
        for (guard, fleet) in [(&joiner, &fleet_j), (&other, &fleet_o), (&a, &fleet_a)] {
            until("the member serves", || fleet.stats().serving).await;
            assert_ne!(
                guard.admit(&77),
                Admission::Blocked,
                "a member lost the row"
            );
        }
        drop(announcement);
        for fleet in [fleet_a, fleet_j, fleet_o] {
            fleet.leave().await;
        }
    });
}

/// [fleet.M7]: a member of a state that was lost, which has not noticed yet (its lease is
/// long), rebuilds: the rebuild finds the coordinator's state changed (its list of creates in
/// flight is gone) and fails, and the member leaves service and rejoins, instead of serving a
/// scan that missed a write acknowledged in the lost state.
#[test]
fn a_member_of_a_lost_state_does_not_rebuild_into_the_new_one() {
    let Some((pg, _)) = servers() else { return };
    let Some(mut own) = OwnRedis::start(&[]) else {
        return;
    };
    let redis = own.url();
    common::runtime().block_on(async {
        let table = unique_name("fleet");
        let name = unique_name("fleet");
        let config = config(&name)
            // No renewal comes before the rebuild: a renewal would notice the loss first.
            .lease(Duration::from_secs(30))
            .renewing_every(Duration::from_secs(10))
            .write_bound(Duration::from_secs(2));
        let a = guard(store(&pg, &table).await);
        let fleet_a = Fleet::join(&a, coordinator(&redis, &name).await, config.clone())
            .await
            .unwrap();
        until("A serves", || fleet_a.stats().serving).await;
        let announcement = fleet_a.announce_created(&77).await.unwrap();
        own.kill();
        own.launch();
        // A has not noticed the loss (its next renewal is seconds away) and rebuilds, once its
        // connection to the coordinator is back.
        let outcome = loop {
            match a.rebuild().await {
                Err(GuardError::Fleet(FleetError::Coordinator(_))) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => break other,
            }
        };
        match outcome {
            Err(GuardError::Fleet(FleetError::Guard(why))) => {
                assert!(why.contains("state"), "{why}")
            }
            other => panic!("a rebuild read the new state's creates in flight: {other:?}"),
        }
        assert!(
            !fleet_a.stats().serving,
            "A serves after its state was lost"
        );
        let (client, connection) = tokio_postgres::connect(&pg, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .execute(&format!("INSERT INTO \"{table}\" VALUES (77, 'late')"), &[])
            .await
            .unwrap();
        assert_ne!(a.admit(&77), Admission::Blocked);
        until("A rejoined, rebuilt and serves", || fleet_a.stats().serving).await;
        assert_ne!(a.admit(&77), Admission::Blocked);
        assert!(fleet_a.stats().rejoins >= 1);
        drop(announcement);
        fleet_a.leave().await;
    });
}
