//! The fleet's Redis coordinator against the real server at `REDIS_URL` (set by `.ci/run`):
//! every method of the `Coordinator` trait, the blocking read on its own connection, trims,
//! holds, and a server that lost its data. Each test uses a fleet of its own.
#![cfg(all(feature = "fleet", feature = "redis"))]

use crate::common;

use std::collections::BTreeSet;
use std::future::Future;
use std::time::{Duration, Instant};

use common::OwnRedis;
use cuckoo_guard::fleet::{
    Coordinator, InstanceId, MemberId, Op, Position, RedisCoordinator, RedisCoordinatorError,
    SealRecord,
};
use cuckoo_guard::guard::SealSecret;

/// Every test's bound: a call that hangs fails the test.
const LIMIT: Duration = Duration::from_secs(30);

/// Runs `test` with the server's URL and a fresh fleet name, bounded by [`LIMIT`], then
/// deletes the fleet's keys.
fn with_fleet<F, Fut>(test: F)
where
    F: FnOnce(String, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(url) = common::servers::server_url(&common::servers::REDIS) else {
        return;
    };
    let name = common::unique_name("fleet");
    common::runtime().block_on(async {
        let outcome = tokio::time::timeout(LIMIT, test(url.clone(), name.clone())).await;
        cleanup(&url, &name).await;
        outcome.expect("the test did not finish in time");
    });
}

async fn connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn cleanup(url: &str, name: &str) {
    let mut connection = connection(url).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("cuckoo-guard:{{{name}}}:*"))
        .query_async(&mut connection)
        .await
        .unwrap();
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut connection)
            .await
            .unwrap();
    }
}

async fn coordinator(url: &str, name: &str) -> RedisCoordinator {
    RedisCoordinator::builder(url, name)
        .hold(Duration::ZERO)
        .connect()
        .await
        .unwrap()
}

const LEASE: Duration = Duration::from_secs(10);
const A: InstanceId = InstanceId(1);
const B: InstanceId = InstanceId(2);

/// The position right after `p` (no entry can fall between them).
fn next(p: Position) -> Position {
    Position {
        ms: p.ms,
        seq: p.seq + 1,
    }
}

/// Reads from `after` until `count` entries came (each read waits at most 1 s).
async fn read_entries(
    c: &RedisCoordinator,
    after: Position,
    count: usize,
) -> Vec<cuckoo_guard::fleet::Entry> {
    let mut entries = Vec::new();
    let mut cursor = after;
    while entries.len() < count {
        let batch = c
            .read(cursor, Position::ZERO, 100, Duration::from_secs(1))
            .await
            .unwrap();
        if let Some(last) = batch.entries.last() {
            cursor = last.position;
        }
        entries.extend(batch.entries);
    }
    entries
}

#[test]
fn register_returns_the_top_and_the_creates_in_flight() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        let first = c.register(A, None, LEASE).await.unwrap();
        assert_eq!(first.top, Position::ZERO);
        assert!(first.in_flight.is_empty());
        assert!(!first.previous_kept);

        let announced = c.announce_create(A, b"ada").await.unwrap();
        let second = c.register(B, None, LEASE).await.unwrap();
        assert_ne!(second.member, first.member);
        assert_eq!(second.top, announced.position);
        assert_eq!(second.in_flight, vec![b"ada".to_vec()]);
        assert_eq!(c.top().await.unwrap(), announced.position);

        c.create_ended(announced.position).await.unwrap();
        assert!(c.in_flight().await.unwrap().is_empty());
        let third = c.register(B, None, LEASE).await.unwrap();
        assert!(third.in_flight.is_empty());
        assert_eq!(third.top, announced.position);
    });
}

/// [fleet.M2] and [fleet.M5] under concurrency: every create is either past a
/// registration's top and lists its member, or at or below the top and among its in-flight
/// keys.
#[test]
fn registrations_and_creates_racing_see_each_other() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        let mut creates = Vec::new();
        for writer in 0..4u8 {
            let c = c.clone();
            creates.push(tokio::spawn(async move {
                let mut announced = Vec::new();
                for i in 0..50u8 {
                    let key = vec![writer, i];
                    announced.push((key.clone(), c.announce_create(A, &key).await.unwrap()));
                }
                announced
            }));
        }
        let mut joins = Vec::new();
        for _ in 0..2 {
            let c = c.clone();
            joins.push(tokio::spawn(async move {
                let mut registered = Vec::new();
                for _ in 0..25 {
                    registered.push(c.register(B, None, LEASE).await.unwrap());
                }
                registered
            }));
        }
        let mut announced = Vec::new();
        for task in creates {
            announced.extend(task.await.unwrap());
        }
        let mut registrations = Vec::new();
        for task in joins {
            registrations.extend(task.await.unwrap());
        }
        for r in &registrations {
            let in_flight: BTreeSet<&Vec<u8>> = r.in_flight.iter().collect();
            for (key, a) in &announced {
                if a.position > r.top {
                    assert!(
                        a.members.contains(&r.member),
                        "a create after {} missed its member",
                        r.top
                    );
                } else {
                    assert!(
                        in_flight.contains(key),
                        "a create before {} was missed",
                        r.top
                    );
                }
            }
        }
        let positions: BTreeSet<Position> = announced.iter().map(|(_, a)| a.position).collect();
        assert_eq!(positions.len(), 200);
        let (first, last) = (positions.first().unwrap(), positions.last().unwrap());
        assert!(
            registrations
                .iter()
                .any(|r| *first <= r.top && r.top < *last),
            "no registration fell among the creates: the race was not run"
        );
    });
}

#[test]
fn announce_create_lists_the_members_and_records_the_create_in_flight() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        let a = c.register(A, None, LEASE).await.unwrap().member;
        let b = c.register(B, None, LEASE).await.unwrap().member;
        let first = c.announce_create(A, b"ada").await.unwrap();
        let second = c.announce_create(B, b"bob").await.unwrap();
        assert!(second.position > first.position);
        let members: BTreeSet<MemberId> = first.members.iter().copied().collect();
        assert_eq!(members, BTreeSet::from([a, b]));
        assert_eq!(first.hold, Duration::ZERO);
        let in_flight: BTreeSet<Vec<u8>> = c.in_flight().await.unwrap().into_iter().collect();
        assert_eq!(
            in_flight,
            BTreeSet::from([b"ada".to_vec(), b"bob".to_vec()])
        );

        c.leave(b).await.unwrap();
        let third = c.announce_create(A, b"cy").await.unwrap();
        assert_eq!(third.members, vec![a]);
        c.create_ended(first.position).await.unwrap();
        let in_flight: BTreeSet<Vec<u8>> = c.in_flight().await.unwrap().into_iter().collect();
        assert_eq!(in_flight, BTreeSet::from([b"bob".to_vec(), b"cy".to_vec()]));
    });
}

#[test]
fn a_read_blocks_until_entries_come_and_returns_them_in_order() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        c.register(A, None, LEASE).await.unwrap();
        let top = c.top().await.unwrap();
        let reader = c.clone();
        let read = tokio::spawn(async move {
            reader
                .read(top, Position::ZERO, 10, Duration::from_secs(20))
                .await
                .unwrap()
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !read.is_finished(),
            "the read returned before any entry came"
        );
        let appended = Instant::now();
        let create = c.announce_create(A, b"ada").await.unwrap().position;
        let first = read.await.unwrap();
        assert!(
            appended.elapsed() < Duration::from_secs(10),
            "the read did not wake"
        );
        assert_eq!(first.entries[0].position, create);
        let delete = c.announce_delete(B, b"bob", create).await.unwrap();
        let binary = c.announce_create(B, &[0, 255, 10]).await.unwrap().position;
        let entries = read_entries(&c, top, 3).await;
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].position, create);
        assert_eq!(entries[0].origin, A);
        assert_eq!(entries[0].op, Op::Create);
        assert_eq!(entries[0].key, b"ada");
        assert_eq!(entries[1].position, delete);
        assert_eq!(entries[1].origin, B);
        assert_eq!(entries[1].op, Op::Delete { after: create });
        assert_eq!(entries[1].key, b"bob");
        assert_eq!(entries[2].position, binary);
        assert_eq!(entries[2].key, vec![0, 255, 10]);

        // `max` bounds a batch, and a read after the last entry returns none.
        let batch = c
            .read(Position::ZERO, Position::ZERO, 2, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(batch.entries.len(), 2);
        let batch = c
            .read(binary, Position::ZERO, 10, Duration::ZERO)
            .await
            .unwrap();
        assert!(batch.entries.is_empty());
    });
}

#[test]
fn acknowledgements_are_recorded_and_published_to_the_feed() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        let a = c.register(A, None, LEASE).await.unwrap().member;
        let b = c.register(B, None, LEASE).await.unwrap().member;
        let p = c.announce_create(A, b"ada").await.unwrap().position;

        // A read waiting on the feed wakes for an acknowledgement.
        let reader = c.clone();
        let read = tokio::spawn(async move {
            reader
                .read(p, Position::ZERO, 10, Duration::from_secs(20))
                .await
                .unwrap()
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let woke = Instant::now();
        c.ack(a, p).await.unwrap();
        let batch = read.await.unwrap();
        assert!(
            woke.elapsed() < Duration::from_secs(10),
            "the read did not wake"
        );
        assert!(batch.entries.is_empty());
        assert_eq!(batch.acks, vec![(a, p)]);
        assert!(batch.acks_cursor > Position::ZERO);

        c.ack(b, p).await.unwrap();
        let next_batch = c
            .read(p, batch.acks_cursor, 10, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(next_batch.acks, vec![(b, p)]);
        assert!(next_batch.acks_cursor > batch.acks_cursor);
        let none = c
            .read(p, next_batch.acks_cursor, 10, Duration::ZERO)
            .await
            .unwrap();
        assert!(none.acks.is_empty());
        assert_eq!(none.acks_cursor, next_batch.acks_cursor);

        let states = c.members(&[a, b]).await.unwrap();
        assert!(states.members.iter().all(|s| s.acked == p && s.registered));

        // A member no longer registered acknowledges nothing.
        c.leave(b).await.unwrap();
        c.ack(b, next(p)).await.unwrap();
        let state = &c.members(&[b]).await.unwrap().members[0];
        assert!(!state.registered);
        assert_eq!(state.acked, Position::ZERO);
        let after = c
            .read(p, next_batch.acks_cursor, 10, Duration::ZERO)
            .await
            .unwrap();
        assert!(after.acks.is_empty());
    });
}

#[test]
fn renew_extends_a_live_lease_and_never_recreates_an_expired_one() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        // Leases that must still be live when looked at have seconds to spare, so a stalled
        // client does not let them lapse; the short one only lapses.
        let member = c
            .register(A, None, Duration::from_secs(3))
            .await
            .unwrap()
            .member;
        // A renewal extends the three-second lease to ten seconds from now.
        assert!(c.renew(member, Duration::from_secs(10)).await.unwrap());
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        let state = &c.members(&[member]).await.unwrap().members[0];
        assert!(
            state.registered && state.lease_live,
            "the renewal did not extend"
        );
        assert_eq!(state.renewals, 1);
        let lease = Duration::from_millis(200);
        assert!(c.renew(member, lease).await.unwrap());
        assert_eq!(c.members(&[member]).await.unwrap().members[0].renewals, 2);

        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!c.renew(member, lease).await.unwrap());
        let state = &c.members(&[member]).await.unwrap().members[0];
        assert!(state.registered, "an expired lease is not a removal");
        assert!(!state.lease_live, "renew recreated the lease");
        assert_eq!(state.renewals, 2);
        assert!(!c.renew(member, LEASE).await.unwrap());
        assert!(!c.members(&[member]).await.unwrap().members[0].lease_live);
    });
}

#[test]
fn expel_removes_only_members_whose_lease_expired() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        // Live for three seconds: a stalled client still finds it live at the first expel.
        let short = c
            .register(A, None, Duration::from_secs(3))
            .await
            .unwrap()
            .member;
        let long = c.register(B, None, LEASE).await.unwrap().member;
        assert!(!c.expel(short).await.unwrap(), "expelled a live member");
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        assert!(!c.expel(long).await.unwrap(), "expelled a live member");
        assert!(c.expel(short).await.unwrap());
        assert!(!c.expel(short).await.unwrap(), "expelled twice");
        let states = c.members(&[short, long]).await.unwrap();
        assert!(!states.members[0].registered);
        assert!(states.members[1].registered && states.members[1].lease_live);
        let members = c.announce_create(A, b"ada").await.unwrap().members;
        assert_eq!(members, vec![long]);
    });
}

#[test]
fn register_with_a_previous_member_carries_its_acknowledgement() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        let old = c.register(A, None, LEASE).await.unwrap().member;
        let p = c.announce_create(A, b"ada").await.unwrap().position;
        c.announce_create(A, b"bob").await.unwrap();
        c.ack(old, p).await.unwrap();

        let again = c.register(A, Some(old), LEASE).await.unwrap();
        assert!(again.previous_kept);
        let states = c.members(&[old, again.member]).await.unwrap();
        assert!(!states.members[0].registered && !states.members[0].lease_live);
        assert!(states.members[1].registered && states.members[1].lease_live);
        assert_eq!(
            states.members[1].acked, p,
            "the acknowledgement was not carried over"
        );

        // A previous member that was removed meanwhile is not kept, and the new one starts
        // at the top.
        c.leave(again.member).await.unwrap();
        let third = c.register(A, Some(again.member), LEASE).await.unwrap();
        assert!(!third.previous_kept);
        let top = c.top().await.unwrap();
        assert_eq!(
            c.members(&[third.member]).await.unwrap().members[0].acked,
            top
        );
    });
}

#[test]
fn trim_respects_the_lowest_acknowledgement_and_the_top_survives_it() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        assert_eq!(c.trim().await.unwrap(), 0, "trimmed without members");
        assert!(!c.trimmed_after(Position::ZERO).await.unwrap());

        let a = c.register(A, None, LEASE).await.unwrap().member;
        let b = c.register(B, None, LEASE).await.unwrap().member;
        let mut ids = Vec::new();
        for key in ["k1", "k2", "k3", "k4", "k5"] {
            ids.push(c.announce_create(A, key.as_bytes()).await.unwrap().position);
        }
        // Both members start at the top before the entries: nothing goes.
        assert_eq!(c.trim().await.unwrap(), 0);
        c.ack(a, ids[2]).await.unwrap();
        c.ack(b, ids[4]).await.unwrap();
        assert_eq!(c.trim().await.unwrap(), 2);
        let left = c
            .read(Position::ZERO, Position::ZERO, 100, Duration::ZERO)
            .await
            .unwrap()
            .entries;
        assert_eq!(
            left.iter().map(|e| e.position).collect::<Vec<_>>(),
            ids[2..].to_vec()
        );
        assert!(c.trimmed_after(Position::ZERO).await.unwrap());
        assert!(c.trimmed_after(ids[0]).await.unwrap());
        assert!(!c.trimmed_after(ids[1]).await.unwrap());
        assert!(!c.trimmed_after(ids[2]).await.unwrap());

        // Without `a`, `b`'s acknowledgement rules; past the last entry, all go.
        c.leave(a).await.unwrap();
        c.ack(b, next(ids[4])).await.unwrap();
        assert_eq!(c.trim().await.unwrap(), 3);
        assert!(c.trimmed_after(ids[3]).await.unwrap());
        assert!(!c.trimmed_after(ids[4]).await.unwrap());
        let left = c
            .read(Position::ZERO, Position::ZERO, 100, Duration::ZERO)
            .await
            .unwrap()
            .entries;
        assert!(left.is_empty());
        assert_eq!(
            c.top().await.unwrap(),
            ids[4],
            "the top went with the entries"
        );
        assert_eq!(c.register(A, None, LEASE).await.unwrap().top, ids[4]);
        assert!(c.announce_create(A, b"k6").await.unwrap().position > ids[4]);
        assert_eq!(c.trim().await.unwrap(), 0, "trimmed past a new member");
    });
}

#[test]
fn trimmed_after_sees_a_log_that_is_gone_or_replaced() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        c.register(A, None, LEASE).await.unwrap();
        let p = c.announce_create(A, b"ada").await.unwrap().position;
        assert!(!c.trimmed_after(p).await.unwrap());
        let mut raw = connection(&url).await;
        let log = format!("{}:log", c.key_prefix());
        let _: () = redis::cmd("DEL")
            .arg(&log)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(c.trimmed_after(p).await.unwrap(), "missed a lost log");
        assert!(!c.trimmed_after(Position::ZERO).await.unwrap());
        assert_eq!(c.top().await.unwrap(), Position::ZERO);
        // A new log whose ids are below `p`.
        let _: String = redis::cmd("XADD")
            .arg(&log)
            .arg("1-1")
            .arg("o")
            .arg("c")
            .arg("k")
            .arg("x")
            .arg("i")
            .arg("1")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(c.trimmed_after(p).await.unwrap(), "missed a replaced log");
    });
}

#[test]
fn a_malformed_entry_is_an_error_not_a_skip() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        let top = c.top().await.unwrap();
        let mut raw = connection(&url).await;
        let _: String = redis::cmd("XADD")
            .arg(format!("{}:log", c.key_prefix()))
            .arg("*")
            .arg("o")
            .arg("c")
            .query_async(&mut raw)
            .await
            .unwrap();
        let error = c
            .read(top, Position::ZERO, 10, Duration::ZERO)
            .await
            .unwrap_err();
        assert!(
            matches!(error, RedisCoordinatorError::Malformed { .. }),
            "{error:?}"
        );
    });
}

#[test]
fn a_new_epoch_holds_creates_until_the_hold_elapses() {
    with_fleet(|url, name| async move {
        let c = RedisCoordinator::builder(&url, &name)
            .hold(Duration::from_secs(5))
            .connect()
            .await
            .unwrap();
        c.register(A, None, LEASE).await.unwrap();
        let hold = c.announce_create(A, b"ada").await.unwrap().hold;
        assert!(
            hold > Duration::ZERO && hold <= Duration::from_secs(5),
            "{hold:?}"
        );
        tokio::time::sleep(Duration::from_millis(5300)).await;
        assert_eq!(
            c.announce_create(A, b"bob").await.unwrap().hold,
            Duration::ZERO
        );
        // The epoch exists: a later registration holds nothing.
        c.register(B, None, LEASE).await.unwrap();
        assert_eq!(
            c.announce_create(A, b"cy").await.unwrap().hold,
            Duration::ZERO
        );
    });
}

#[test]
fn a_server_that_lost_its_data_starts_a_new_epoch() {
    let Some(mut server) = OwnRedis::start(&[]) else {
        return;
    };
    common::runtime().block_on(async {
        tokio::time::timeout(LIMIT, async {
            let c = RedisCoordinator::builder(server.url(), "lost")
                .hold(Duration::from_secs(60))
                .connect()
                .await
                .unwrap();
            let member = c.register(A, None, LEASE).await.unwrap().member;
            let p = c.announce_create(A, b"ada").await.unwrap().position;
            c.ack(member, p).await.unwrap();

            server.kill();
            server.launch();
            // The first call after the restart may fail on the broken connection.
            let registration = match c.register(A, Some(member), LEASE).await {
                Ok(registration) => registration,
                Err(_) => c.register(A, Some(member), LEASE).await.unwrap(),
            };
            assert!(!registration.previous_kept);
            assert_eq!(registration.top, Position::ZERO);
            assert!(c.trimmed_after(p).await.unwrap());
            let hold = c.announce_create(A, b"bob").await.unwrap().hold;
            assert!(hold > Duration::from_secs(30), "{hold:?}");
        })
        .await
        .expect("the test did not finish in time");
    });
}

#[test]
fn a_long_read_does_not_time_out_nor_hold_up_other_calls() {
    with_fleet(|url, name| async move {
        let c = RedisCoordinator::builder(&url, &name)
            .hold(Duration::ZERO)
            .response_timeout(Duration::from_secs(3))
            .connect()
            .await
            .unwrap();
        let member = c.register(A, None, LEASE).await.unwrap().member;
        let top = c.top().await.unwrap();
        let reader = c.clone();
        let started = Instant::now();
        let read = tokio::spawn(async move {
            reader
                .read(top, Position::ZERO, 10, Duration::from_secs(8))
                .await
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let renewing = Instant::now();
        assert!(c.renew(member, LEASE).await.unwrap());
        assert!(
            renewing.elapsed() < Duration::from_secs(5),
            "a renewal waited for the read"
        );
        let batch = read.await.unwrap().expect("the blocking read failed");
        assert!(batch.entries.is_empty() && batch.acks.is_empty());
        assert!(started.elapsed() >= Duration::from_millis(7900));

        // The read connection is reused after a completed read.
        let batch = c
            .read(top, Position::ZERO, 10, Duration::from_millis(10))
            .await
            .unwrap();
        assert!(batch.entries.is_empty());
    });
}

#[test]
fn a_dropped_read_does_not_delay_the_next() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        c.register(A, None, LEASE).await.unwrap();
        let top = c.top().await.unwrap();
        let dropped = tokio::time::timeout(
            Duration::from_millis(100),
            c.read(top, Position::ZERO, 10, Duration::from_secs(10)),
        )
        .await;
        assert!(dropped.is_err());
        // The dropped read's XREAD still blocks on the server: a read sent on its
        // connection would wait behind it and time out.
        let started = Instant::now();
        let batch = c
            .read(top, Position::ZERO, 10, Duration::from_millis(300))
            .await
            .expect("the read queued behind the dropped one");
        assert!(batch.entries.is_empty());
        assert!(started.elapsed() < Duration::from_secs(2));
        let p = c.announce_create(A, b"ada").await.unwrap().position;
        let batch = c
            .read(top, Position::ZERO, 10, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(batch.entries[0].position, p);
    });
}

#[test]
fn an_evicting_server_is_refused_unless_allowed() {
    let Some(server) = OwnRedis::start(&["--maxmemory-policy", "volatile-lru"]) else {
        return;
    };
    common::runtime().block_on(async {
        tokio::time::timeout(LIMIT, async {
            let refused = RedisCoordinator::builder(server.url(), "evicting")
                .connect()
                .await
                .unwrap_err();
            assert!(
                matches!(
                    &refused,
                    RedisCoordinatorError::EvictionPolicy { policy } if policy == "volatile-lru"
                ),
                "{refused:?}"
            );
            let allowed = RedisCoordinator::builder(server.url(), "evicting")
                .allow_eviction(true)
                .connect()
                .await
                .unwrap();
            assert_eq!(allowed.eviction_policy(), Some("volatile-lru"));
        })
        .await
        .expect("the test did not finish in time");
    });
}

#[test]
fn every_call_works_over_resp3() {
    with_fleet(|url, name| async move {
        let separator = if url.contains('?') { '&' } else { '?' };
        let c = coordinator(&format!("{url}{separator}protocol=resp3"), &name).await;
        let a = c.register(A, None, LEASE).await.unwrap();
        let gone = MemberId(a.member.0.wrapping_add(1));
        let create = c.announce_create(A, b"ada").await.unwrap();
        assert_eq!(create.members, vec![a.member]);
        let delete = c.announce_delete(B, b"bob", create.position).await.unwrap();
        c.ack(a.member, delete).await.unwrap();
        let batch = c
            .read(a.top, Position::ZERO, 10, Duration::from_millis(100))
            .await
            .unwrap();
        assert_eq!(batch.entries.len(), 2);
        assert_eq!(
            batch.entries[1].op,
            Op::Delete {
                after: create.position
            }
        );
        assert_eq!(batch.acks, vec![(a.member, delete)]);
        let states = c.members(&[a.member, gone]).await.unwrap();
        assert!(states.members[0].registered && states.members[0].lease_live);
        assert_eq!(states.members[0].acked, delete);
        assert!(!states.members[1].registered && !states.members[1].lease_live);
        assert_eq!(
            (states.members[1].renewals, states.members[1].acked),
            (0, Position::ZERO)
        );
        assert!(c.renew(a.member, LEASE).await.unwrap());
        assert_eq!(c.members(&[a.member]).await.unwrap().members[0].renewals, 1);
        assert_eq!(c.trim().await.unwrap(), 1);
        assert!(c.trimmed_after(Position::ZERO).await.unwrap());
        assert_eq!(c.top().await.unwrap(), delete);
        assert_eq!(c.in_flight().await.unwrap(), vec![b"ada".to_vec()]);
    });
}

#[test]
fn a_fleet_name_that_is_no_hash_tag_is_refused() {
    common::runtime().block_on(async {
        for name in ["", "}users"] {
            let error = RedisCoordinator::builder("redis://127.0.0.1:1", name)
                .connect()
                .await
                .unwrap_err();
            assert!(
                matches!(error, RedisCoordinatorError::FleetName { .. }),
                "{error:?}"
            );
        }
    });
}

/// An announcement on a coordinator without a state begins one, with its hold, and every
/// later call names the same state; a wiped coordinator has another.
#[test]
fn an_announcement_begins_a_state_and_members_name_it() {
    with_fleet(|url, name| async move {
        let c = RedisCoordinator::builder(&url, &name)
            .hold(Duration::from_secs(2))
            .connect()
            .await
            .unwrap();
        let announced = c.announce_create(InstanceId(1), b"k").await.unwrap();
        assert!(!announced.state.is_empty());
        assert!(announced.hold > Duration::ZERO, "a new state holds creates");
        let registration = c
            .register(InstanceId(2), None, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(!registration.fresh_state);
        assert_eq!(registration.state, announced.state);
        let states = c.members(&[registration.member]).await.unwrap();
        assert_eq!(states.state, announced.state);
        cleanup(&url, &name).await;
        let states = c.members(&[registration.member]).await.unwrap();
        assert_eq!(states.state, "", "no state after the wipe");
        assert!(!states.members[0].registered);
        let again = c
            .register(
                InstanceId(2),
                Some(registration.member),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        assert!(again.fresh_state && !again.previous_kept);
        assert_ne!(again.state, announced.state);
    });
}

/// A seal's record: held, read without being taken, taken once by `register_sealed` (which
/// starts the member's acknowledged position at the record's), holding trims back at its
/// position while held, and gone once its hold passed.
#[test]
fn a_seal_record_holds_the_log_and_is_taken_once() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        let a = c.register(A, None, LEASE).await.unwrap();
        let mut ids = Vec::new();
        for key in ["k1", "k2", "k3", "k4"] {
            ids.push(c.announce_create(B, key.as_bytes()).await.unwrap().position);
        }
        let secret = SealSecret::from_bytes([9; 32]);
        let record = SealRecord::new(
            secret.clone(),
            InstanceId(77),
            a.state.clone(),
            ids[1],
            Some(ids[0]),
        );
        // Only for a registered member, in the record's state.
        let stranger = MemberId(12_345);
        assert!(!c
            .put_seal(stranger, &record, Duration::from_secs(60))
            .await
            .unwrap());
        let other_state = SealRecord::new(secret.clone(), InstanceId(77), "x".into(), ids[1], None);
        assert!(!c
            .put_seal(a.member, &other_state, Duration::from_secs(60))
            .await
            .unwrap());
        assert!(c.peek_seal(secret.id()).await.unwrap().is_none());
        assert!(c
            .put_seal(a.member, &record, Duration::from_secs(60))
            .await
            .unwrap());
        let peeked = c.peek_seal(secret.id()).await.unwrap().expect("held");
        assert_eq!(peeked.secret.as_bytes(), secret.as_bytes());
        assert_eq!(
            (peeked.instance, peeked.applied, peeked.scanned_at),
            (InstanceId(77), ids[1], Some(ids[0]))
        );
        assert_eq!(peeked.state, a.state);
        assert!(c.peek_seal(secret.id() ^ 1).await.unwrap().is_none());
        assert!(
            !format!("{peeked:?}").contains("0909"),
            "the secret shows in Debug"
        );
        // The only member acknowledges everything; the record holds the trim at its position.
        c.ack(a.member, ids[3]).await.unwrap();
        assert_eq!(c.trim().await.unwrap(), 1);
        assert!(!c.trimmed_after(ids[0]).await.unwrap());
        assert!(c.trimmed_after(Position::ZERO).await.unwrap());
        // Taken once: the member starts at the record's position.
        let (restored, taken) = c.register_sealed(A, secret.id(), LEASE).await.unwrap();
        assert_eq!(taken.expect("taken").applied, ids[1]);
        let states = c.members(&[restored.member]).await.unwrap();
        assert_eq!(states.members[0].acked, ids[1]);
        let (_, again) = c.register_sealed(A, secret.id(), LEASE).await.unwrap();
        assert!(again.is_none(), "a record taken twice");
        assert!(c.peek_seal(secret.id()).await.unwrap().is_none());
        // An expired record is neither read nor taken, and trims remove it.
        let short = SealRecord::new(secret.clone(), InstanceId(78), a.state, ids[1], None);
        assert!(c
            .put_seal(a.member, &short, Duration::from_millis(50))
            .await
            .unwrap());
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert!(c.peek_seal(secret.id()).await.unwrap().is_none());
        assert!(c
            .put_seal(a.member, &short, Duration::from_millis(50))
            .await
            .unwrap());
        tokio::time::sleep(Duration::from_millis(120)).await;
        let (_, expired) = c.register_sealed(A, secret.id(), LEASE).await.unwrap();
        assert!(expired.is_none(), "an expired record was taken");
        assert!(c
            .put_seal(a.member, &short, Duration::from_millis(50))
            .await
            .unwrap());
        tokio::time::sleep(Duration::from_millis(120)).await;
        c.trim().await.unwrap();
        let mut connection = connection(&url).await;
        let left: i64 = redis::cmd("HLEN")
            .arg(format!("{}:seals", c.key_prefix()))
            .query_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(left, 0, "an expired record outlived a trim");
    });
}

/// A registration reports its state's age on the server's clock: zero for the registration
/// that began the state, growing after ([fleet.M7]).
#[test]
fn a_registration_reports_the_states_age() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        let first = c.register(A, None, LEASE).await.unwrap();
        assert!(first.fresh_state);
        assert!(
            first.state_age < Duration::from_millis(50),
            "{:?}",
            first.state_age
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let second = c.register(B, None, LEASE).await.unwrap();
        assert!(!second.fresh_state);
        assert!(
            second.state_age >= Duration::from_millis(290)
                && second.state_age < Duration::from_secs(10),
            "{:?}",
            second.state_age
        );
    });
}

/// The creates in flight are read only for the member's own state ([fleet.M7]), and a state
/// whose recorded birth belongs to another epoch is dated from now.
#[test]
fn in_flight_creates_are_read_for_one_state_and_a_stale_birth_is_ignored() {
    with_fleet(|url, name| async move {
        let c = coordinator(&url, &name).await;
        let first = c.register(A, None, LEASE).await.unwrap();
        c.announce_create(A, b"ada").await.unwrap();
        assert_eq!(
            c.in_flight_of(&first.state).await.unwrap(),
            Some(vec![b"ada".to_vec()])
        );
        assert_eq!(c.in_flight_of("another").await.unwrap(), None);
        // A birth written for another epoch (a partial loss, a hand's edit) counts for nothing.
        let mut connection = connection(&url).await;
        let _: () = redis::cmd("SET")
            .arg(format!("{}:born", c.key_prefix()))
            .arg("another 1")
            .query_async(&mut connection)
            .await
            .unwrap();
        let second = c.register(B, None, LEASE).await.unwrap();
        assert!(
            second.state_age < Duration::from_secs(5),
            "{:?}",
            second.state_age
        );
    });
}
