//! Loom models of a guard's side of a fleet ([fleet.F1]-[fleet.F7] in the core's `fleet`
//! module): a lookup against a member that lapsed and rejoined, a create another member
//! announced racing a rebuild, a delete another member announced racing a rebuild, and a
//! create of the member's own guard racing the member's seal.
//!
//! Every actor is a spawned thread; the main thread only sets up, joins and asserts. The
//! core, `K`, `J` and the store are those of the rebuild models (`loom_tests`). The
//! coordinator's part is modelled by what the member sees of it: the in-flight list is a
//! loom mutex over keys, the log's top an atomic counter, an acknowledgement a flag or the
//! applier's join, and the
//! fleet clock the core's model clock.

use loom::sync::{Arc, Mutex};
use loom::thread;

use super::loom_rebuild_tests::{bounded, explore_at};
use super::loom_tests::{core, seal, Core, Driver, J, K};
use super::{Admission, Broken, FleetError, Position};
use crate::guard::{GuardError, RebuildReason, Written};
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use crate::table::loom_tests::explore;

fn flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

fn position(ms: u64) -> Position {
    Position { ms, seq: 0 }
}

/// A warm member serving until `deadline` on the model clock, with `keys` in its filter.
fn member(broken: Broken, keys: &[u64], deadline: u64) -> Arc<Core> {
    let core = core(broken, keys);
    core.fleet_join();
    core.fleet_set_deadline(deadline);
    core.fleet_start_serving();
    core
}

/// [fleet.F1]-[fleet.F3]: the member's lease lapsed at 100 without the member noticing. A
/// writer elsewhere sees it gone once the clock passes the deadline (200) and writes `K`
/// without waiting for it. The member's keeper then finds the lease gone, leaves service,
/// registers anew (deadline 300), catches up (applies `K`) and serves again. A lookup of `K`
/// that begins after the write must not answer "absent". Returns whether the lookup failed
/// open (the filter it read missed `K`). `batch`: the lookup is a batch of `J` and `K`
/// (`admit_many`: one word load, one batched filter read, one lease check for the misses).
fn lookup_racing_a_rejoin(broken: Broken, batch: bool) -> bool {
    let core = member(broken, &[], 100);
    let written = flag();
    let writer = {
        let (core, written) = (Arc::clone(&core), Arc::clone(&written));
        thread::spawn(move || {
            // ORDERING: SeqCst; the model clock passes the lapsed member's deadline before the
            // write, as [fleet.M2]'s "gone" requires.
            core.fleet.now.store(200, Ordering::SeqCst);
            // ORDERING: SeqCst; the store write, visible to lookups that begin later.
            written.store(true, Ordering::SeqCst);
        })
    };
    let keeper = {
        let core = Arc::clone(&core);
        thread::spawn(move || {
            core.fleet_stop_serving();
            core.fleet_set_deadline(300);
            core.apply_create(&K).expect("room for K");
            core.fleet_start_serving();
        })
    };
    let reader = {
        let (core, written) = (Arc::clone(&core), Arc::clone(&written));
        thread::spawn(move || {
            // ORDERING: SeqCst; the lookup begins after the write it sees.
            if !written.load(Ordering::SeqCst) {
                return false;
            }
            let admission = if batch {
                core.admit_many(&[J, K])[1]
            } else {
                core.admit(&K)
            };
            assert_ne!(
                admission,
                Admission::Blocked,
                "a member answered \"absent\" for a key written while its lease had lapsed"
            );
            admission == Admission::FailOpen
        })
    };
    writer.join().unwrap();
    keeper.join().unwrap();
    let failed_open = reader.join().unwrap();
    assert!(core.filter().contains(&K), "the catch-up applied K");
    failed_open
}

#[test]
fn loom_fleet_lookup_after_a_lapse_fails_open() {
    explore(
        "a lookup after the write whose filter read missed K",
        |census| census.saw(lookup_racing_a_rejoin(Broken::default(), false)),
    );
}

#[test]
fn loom_fleet_batch_lookup_after_a_lapse_fails_open() {
    explore(
        "a batch after the write whose filter read missed K",
        |census| census.saw(lookup_racing_a_rejoin(Broken::default(), true)),
    );
}

#[test]
#[should_panic(expected = "while its lease had lapsed")]
fn loom_fleet_control_batch_no_deadline_check() {
    loom::model(|| {
        lookup_racing_a_rejoin(
            Broken {
                no_deadline_check: true,
                ..Broken::default()
            },
            true,
        );
    });
}

#[test]
#[should_panic(expected = "while its lease had lapsed")]
fn loom_fleet_control_batch_word_not_rechecked() {
    loom::model(|| {
        lookup_racing_a_rejoin(
            Broken {
                word_not_rechecked: true,
                ..Broken::default()
            },
            true,
        );
    });
}

#[test]
#[should_panic(expected = "while its lease had lapsed")]
fn loom_fleet_control_no_deadline_check() {
    loom::model(|| {
        lookup_racing_a_rejoin(
            Broken {
                no_deadline_check: true,
                ..Broken::default()
            },
            false,
        );
    });
}

#[test]
#[should_panic(expected = "while its lease had lapsed")]
fn loom_fleet_control_word_not_rechecked() {
    loom::model(|| {
        lookup_racing_a_rejoin(
            Broken {
                word_not_rechecked: true,
                ..Broken::default()
            },
            false,
        );
    });
}

/// A rebuild of a member, whole, on the calling thread: publishes its next filter, waits at
/// the gate, reads the in-flight creates and inserts them (unless `skip_in_flight`), scans
/// the store, notes the log's top, publishes. Returns whether its scan found `K`.
fn fleet_rebuild(
    core: &Core,
    store: &Mutex<Vec<u64>>,
    in_flight: &Mutex<Vec<u64>>,
    top: &AtomicU64,
    skip_in_flight: bool,
) -> bool {
    let claim = core.claim().expect("the only rebuild");
    let mut turn = core
        .begin_rebuild::<()>(claim, RebuildReason::Requested)
        .expect("a warm core builds its next filter");
    while !turn.poll_gate::<()>().expect("room for the orphans") {
        thread::yield_now();
    }
    if !skip_in_flight {
        let keys = in_flight.lock().unwrap().clone();
        turn.insert_keys::<_, ()>(&keys)
            .expect("room for the in-flight keys");
    }
    let keys = store.lock().unwrap().clone();
    turn.load_page::<_, ()>(&keys)
        .expect("room for the scanned keys");
    // ORDERING: SeqCst; the log's top, read after the scan ([fleet.F5]).
    turn.note_scanned_at(position(top.load(Ordering::SeqCst)));
    turn.finish();
    keys.contains(&K)
}

/// [fleet.F4] [fleet.F6]: another member's create of `K` races this member's rebuild. The
/// writer announces (the key joins the in-flight list), the member applies and acknowledges,
/// the writer writes the store and ends the create (the key leaves the list). Once all are
/// done the member's filter must report `K`. Returns whether the rebuild's scan missed `K`.
fn remote_create_racing_a_rebuild(broken: Broken, skip_in_flight: bool) -> bool {
    let core = core(broken, &[]);
    let store = Arc::new(Mutex::new(Vec::new()));
    let in_flight = Arc::new(Mutex::new(Vec::new()));
    let top = Arc::new(AtomicU64::new(0));
    let writer = {
        let (core, store, in_flight) = (
            Arc::clone(&core),
            Arc::clone(&store),
            Arc::clone(&in_flight),
        );
        thread::spawn(move || {
            // The announcement: the entry is in the log and the key in the in-flight list.
            in_flight.lock().unwrap().push(K);
            // The member's applier reads the entry, applies it and acknowledges; the writer
            // waits for the acknowledgement ([fleet.M2], [fleet.M3]).
            let applier = thread::spawn(move || core.apply_create(&K).expect("room for K"));
            applier.join().unwrap();
            store.lock().unwrap().push(K);
            in_flight.lock().unwrap().retain(|key| *key != K);
        })
    };
    let rebuilder = {
        let (core, store, in_flight, top) = (
            Arc::clone(&core),
            Arc::clone(&store),
            Arc::clone(&in_flight),
            Arc::clone(&top),
        );
        thread::spawn(move || fleet_rebuild(&core, &store, &in_flight, &top, skip_in_flight))
    };
    writer.join().unwrap();
    let scanned = rebuilder.join().unwrap();
    assert_eq!(*store.lock().unwrap(), [K]);
    assert!(
        core.filter().contains(&K),
        "the rebuilt filter misses a create another member announced"
    );
    !scanned
}

#[test]
fn loom_fleet_remote_create_covered_across_a_rebuild() {
    explore_at(3, "a remote create whose write the scan missed", |census| {
        census.saw(remote_create_racing_a_rebuild(Broken::default(), false));
    });
}

#[test]
#[should_panic(expected = "misses a create another member announced")]
fn loom_fleet_control_apply_skips_next() {
    bounded(3).check(|| {
        remote_create_racing_a_rebuild(
            Broken {
                apply_skips_next: true,
                ..Broken::default()
            },
            false,
        );
    });
}

#[test]
#[should_panic(expected = "misses a create another member announced")]
fn loom_fleet_control_a_rebuild_that_skips_the_in_flight_creates() {
    bounded(3).check(|| {
        remote_create_racing_a_rebuild(Broken::default(), true);
    });
}

/// [fleet.F5]: another member deletes `K` (stored beside `J`, which shares its fingerprint)
/// while this member rebuilds. The writer's member applies one more entry, the writer notes
/// its applied position, deletes in the store and announces; this member applies the delete.
/// Once all are done the member's filter must still report `J`. Returns whether the delete
/// removed a copy.
fn remote_delete_racing_a_rebuild(broken: Broken) -> bool {
    let core = core(broken, &[K, J]);
    core.set_scanned_at(position(0));
    let store = Arc::new(Mutex::new(vec![K, J]));
    let top = Arc::new(AtomicU64::new(0));
    let writer = {
        let (core, store, top) = (Arc::clone(&core), Arc::clone(&store), Arc::clone(&top));
        thread::spawn(move || {
            // ORDERING: SeqCst; an entry appended to the log and applied by the writer's member.
            let after = top.fetch_add(1, Ordering::SeqCst) + 1;
            store.lock().unwrap().retain(|key| *key != K);
            // The announcement; this member's applier reads it and applies it.
            let applier = thread::spawn(move || core.apply_delete(&K, position(after)));
            applier.join().unwrap()
        })
    };
    let rebuilder = {
        let (core, store, top) = (Arc::clone(&core), Arc::clone(&store), Arc::clone(&top));
        thread::spawn(move || {
            let in_flight = Mutex::new(Vec::new());
            fleet_rebuild(&core, &store, &in_flight, &top, false);
        })
    };
    let removed = writer.join().unwrap();
    rebuilder.join().unwrap();
    assert_eq!(*store.lock().unwrap(), [J]);
    assert!(
        core.filter().contains(&J),
        "a delete another member announced took the copy of a key the store holds"
    );
    removed
}

#[test]
fn loom_fleet_remote_delete_removes_only_a_scanned_copy() {
    explore_at(3, "a remote delete that removed a copy", |census| {
        census.saw(remote_delete_racing_a_rebuild(Broken::default()));
    });
}

#[test]
#[should_panic(expected = "took the copy of a key the store holds")]
fn loom_fleet_control_delete_ignores_scan() {
    bounded(3).check(|| {
        remote_delete_racing_a_rebuild(Broken {
            delete_ignores_scan: true,
            ..Broken::default()
        });
    });
}

/// [fleet.M3] [fleet.F4]: another member's create of `K`. This member's applier applies the
/// entry and acknowledges it (or, with `ack_first`, acknowledges before applying: the broken
/// order); the writer waits for the acknowledgement, then writes the store. A lookup that
/// begins after the write must not answer "absent". Returns whether the lookup ran after the
/// write.
fn acknowledged_create(ack_first: bool) -> bool {
    acknowledged_create_on(&member(Broken::default(), &[], 100), ack_first)
}

/// [`acknowledged_create`] on the member `core` (serving, `K` not applied yet).
pub(super) fn acknowledged_create_on(core: &Arc<Core>, ack_first: bool) -> bool {
    let acked = flag();
    let written = flag();
    let applier = {
        let (core, acked) = (Arc::clone(core), Arc::clone(&acked));
        thread::spawn(move || {
            if ack_first {
                // ORDERING: SeqCst; the broken order's acknowledgement.
                acked.store(true, Ordering::SeqCst);
            }
            core.apply_create(&K).expect("room for K, or a mark");
            // ORDERING: SeqCst; [fleet.M3]: acknowledged after the apply.
            acked.store(true, Ordering::SeqCst);
        })
    };
    let writer = {
        let (acked, written) = (Arc::clone(&acked), Arc::clone(&written));
        thread::spawn(move || {
            // ORDERING: SeqCst; [fleet.M2]: the store write waits for the acknowledgement.
            while !acked.load(Ordering::SeqCst) {
                thread::yield_now();
            }
            // ORDERING: SeqCst; the store write.
            written.store(true, Ordering::SeqCst);
        })
    };
    let reader = {
        let (core, written) = (Arc::clone(core), Arc::clone(&written));
        thread::spawn(move || {
            // ORDERING: SeqCst; the lookup begins after the write it sees.
            if !written.load(Ordering::SeqCst) {
                return false;
            }
            assert_ne!(
                core.admit(&K),
                Admission::Blocked,
                "a member answered \"absent\" for a create it had acknowledged"
            );
            true
        })
    };
    applier.join().unwrap();
    writer.join().unwrap();
    reader.join().unwrap()
}

#[test]
fn loom_fleet_acknowledged_create_is_present() {
    explore("a lookup after the acknowledged create's write", |census| {
        census.saw(acknowledged_create(false));
    });
}

#[test]
#[should_panic(expected = "for a create it had acknowledged")]
fn loom_fleet_control_an_acknowledgement_before_the_apply() {
    loom::model(|| {
        acknowledged_create(true);
    });
}

/// [fleet.F7]: a create through a member's guard races the member's seal ([fleet.M8]): the
/// create is refused, or its copy is in the sealed file (the restored member skips the
/// entry it announced). Returns whether the create went through though the seal had begun
/// before it ended (the drain must then wait for it).
fn create_racing_a_fleet_seal(broken: Broken) -> bool {
    let core = member(broken, &[], 1_000);
    let sealing = flag();
    let creator = {
        let (core, sealing) = (Arc::clone(&core), Arc::clone(&sealing));
        thread::spawn(move || match core.begin_put::<_, ()>(&K) {
            Ok(ticket) => {
                // ORDERING: SeqCst; census only, orders nothing the model asserts.
                let during = sealing.load(Ordering::SeqCst);
                core.end_put(ticket, &Ok::<_, ()>(Written::Created), |_| true);
                Some(during)
            }
            Err(GuardError::Fleet(FleetError::Sealed)) => None,
            Err(other) => panic!("a create failed otherwise: {other:?}"),
        })
    };
    let sealer = {
        let core = Arc::clone(&core);
        thread::spawn(move || {
            core.fleet_seal();
            // ORDERING: SeqCst; census only.
            sealing.store(true, Ordering::SeqCst);
            seal(&core, Driver::Async, || {}, |filter| filter.contains(&K))
        })
    };
    let created = creator.join().unwrap();
    let in_file = sealer.join().unwrap();
    if created.is_some() {
        assert!(
            in_file,
            "false negative: a create the sealed member let through is missing from its file"
        );
    }
    created == Some(true)
}

#[test]
fn loom_fleet_a_create_racing_a_seal_is_refused_or_in_the_file() {
    explore("a create that went through while the seal ran", |census| {
        census.saw(create_racing_a_fleet_seal(Broken::default()));
    });
}

#[test]
#[should_panic(expected = "missing from its file")]
fn loom_fleet_control_sealed_checked_before_gate() {
    loom::model(|| {
        create_racing_a_fleet_seal(Broken {
            sealed_checked_before_gate: true,
            ..Broken::default()
        });
    });
}
