//! Loom models of a create at the memory ceiling ([guard.R4] in the core, [seal.I5] in `seal`,
//! [fleet.F4] in `fleet`).
//!
//! Every actor is a spawned thread; the main thread only sets up, joins and asserts. The
//! filters are the small filters of `loom_tests`, allowed to grow but capped at their first
//! table's bytes. Eight keys of other fingerprints that share `K`'s two buckets fill the pair,
//! so `K`'s insert meets the ceiling. A rebuild's next filter keeps the cap. Each model has a negative control that breaks one step and must fail, and a
//! census of the interleaving the step exists for.

use loom::sync::{Arc, Mutex};
use loom::thread;

use super::loom_fleet_tests::acknowledged_create_on;
use super::loom_tests::{try_seal, Core, Driver, Keyed, K};
use super::{Admission, Broken, GuardCore};
use crate::guard::{RebuildPolicy, RebuildReason, Written};
use crate::sync::{pin, Ordering};
use crate::table::loom_tests::{bounded, explore_with, Census};
use crate::CuckooFilter;

/// Eight keys whose fingerprints differ from `K`'s but whose buckets are `K`'s two, under the
/// first hash key and the next: they fill the pair, so `K`'s insert meets the ceiling in the
/// first filter and in a rebuilt one that holds them all, yet a lookup of `K` misses.
const FILL: [u64; 8] = [14, 23, 25, 32, 43, 70, 86, 88];
/// A key no create writes: fingerprint 9.
const ABSENT: u64 = 9;

/// The preemption bound of the models with a rebuild thread: each race takes two.
const REBUILD_BOUND: usize = 2;
/// The preemption bound of the seal model, as the seal's own models run.
const SEAL_BOUND: usize = 4;

/// A loom builder at `bound` preemptions whose executions may be long: filling the eight
/// copies and the insert that searches the full pair take more branches than loom's default.
fn ceiling(bound: usize) -> loom::model::Builder {
    let mut builder = bounded(bound);
    builder.max_branches = 50_000;
    builder
}

/// A warm guard core whose filter holds [`FILL`] and may grow only within its first table's
/// bytes, so `K`'s insert meets the ceiling.
fn full_core(broken: Broken) -> Arc<Core> {
    let first = CuckooFilter::builder()
        .hasher(Keyed(0))
        .capacity(3)
        .build()
        .expect("a tiny filter");
    let filter = CuckooFilter::builder()
        .hasher(Keyed(0))
        .capacity(3)
        .max_memory(first.memory_usage())
        .build()
        .expect("a tiny filter within its own size");
    let mut core = GuardCore::new(filter, RebuildPolicy::manual());
    core.broken = broken;
    core.rekey = Some(|hasher| Keyed(hasher.0 + 1));
    for key in FILL {
        let ticket = core
            .begin_put::<_, ()>(&key)
            .expect("room for the set-up keys");
        core.end_put(ticket, &Ok::<_, ()>(Written::Created), |_| true);
    }
    core.finish_warm_up();
    assert_eq!(core.stats().creates_at_ceiling, 0, "the set-up keys fit");
    Arc::new(core)
}

/// A create of `K` through the core: its inserts (or marks), the store write, its end. Then
/// it notes that it returned.
fn create(core: &Core, store: &Mutex<Vec<u64>>, returned: &Mutex<bool>) {
    let ticket = core
        .begin_put::<_, ()>(&K)
        .expect("a create at the ceiling is taken");
    store.lock().unwrap().push(K);
    core.end_put(ticket, &Ok::<_, ()>(Written::Created), |_| true);
    *returned.lock().unwrap() = true;
}

/// A rebuild on its own thread that may stop at the ceiling: a scan that does not fit drops
/// the turn, which publishes the current filter alone again.
fn rebuild(core: &Arc<Core>, store: &Arc<Mutex<Vec<u64>>>) -> thread::JoinHandle<bool> {
    let (core, store) = (Arc::clone(core), Arc::clone(store));
    thread::spawn(move || {
        let claim = core.claim().expect("the only rebuild");
        let Ok(mut turn) = core.begin_rebuild::<()>(claim, RebuildReason::MemoryLimit) else {
            panic!("the next filter fits under the ceiling");
        };
        loop {
            match turn.poll_gate::<()>() {
                Ok(true) => break,
                Ok(false) => thread::yield_now(),
                Err(_) => return false,
            }
        }
        let keys = store.lock().unwrap().clone();
        if turn.load_page::<_, ()>(&keys).is_err() {
            return false;
        }
        turn.finish();
        true
    })
}

/// A lookup of `K` on its own thread, made once the create returned (if it had when the
/// lookup began): it must not answer "absent". Returns whether it was made, and whether it
/// read a marked filter that missed `K` while a rebuild's next filter was pending.
fn lookup_after_create(
    core: &Arc<Core>,
    returned: &Arc<Mutex<bool>>,
) -> thread::JoinHandle<(bool, bool)> {
    let (core, returned) = (Arc::clone(core), Arc::clone(returned));
    thread::spawn(move || {
        if !*returned.lock().unwrap() {
            return (false, false);
        }
        let pending = {
            let pin = pin();
            // ORDERING: Acquire; census only: whether a rebuild's next filter was published.
            core.filters.load(Ordering::Acquire, &pin).next.is_some()
        };
        let admission = core.decide_warm(&K);
        assert_ne!(
            admission,
            Admission::Blocked,
            "false negative: a lookup that began after the create returned ruled its key out"
        );
        // A guard in no fleet fails open only for a marked filter.
        (true, pending && admission == Admission::FailOpen)
    })
}

/// [guard.R4] A create of `K` meets the ceiling while a rebuild runs; the store holds only two
/// of the eight keys the filter has copies of (the others were deleted behind the guard's
/// back), so the rebuild fits. A lookup that began after the create returned must not rule `K` out,
/// whichever filter it reads; once both are done, the rebuilt filter holds `K` and rules out
/// a key never written. The census asks for a lookup that read the marked filter while the
/// rebuild was pending.
fn create_at_ceiling_during_rebuild(broken: Broken, census: Census) {
    let core = full_core(broken);
    let store = Arc::new(Mutex::new(FILL[..2].to_vec()));
    let returned = Arc::new(Mutex::new(false));
    let creator = {
        let (core, store, returned) =
            (Arc::clone(&core), Arc::clone(&store), Arc::clone(&returned));
        thread::spawn(move || create(&core, &store, &returned))
    };
    let rebuilder = rebuild(&core, &store);
    let looker = lookup_after_create(&core, &returned);
    creator.join().unwrap();
    let swapped = rebuilder.join().unwrap();
    let (_, read_marked) = looker.join().unwrap();
    census.saw(read_marked);
    assert!(
        swapped,
        "three keys, or four copies, fit the rebuilt filter"
    );
    assert!(core.filter().contains(&K), "the rebuilt filter misses K");
    assert_eq!(
        core.decide_warm(&ABSENT),
        Admission::Blocked,
        "the rebuilt filter, which fits, answers \"absent\" again"
    );
}

#[test]
fn loom_ceiling_a_create_at_the_ceiling_marks_the_filter_it_could_not_enter() {
    explore_with(
        ceiling(REBUILD_BOUND),
        "a lookup of the marked filter mid-rebuild",
        |census| create_at_ceiling_during_rebuild(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_ceiling_control_unmarked() {
    ceiling(REBUILD_BOUND).check(|| {
        create_at_ceiling_during_rebuild(
            Broken {
                ceiling_unmarked: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R4] A create of `K` meets the ceiling in both filters: the rebuild's scan filled its
/// next filter (the store holds all eight keys) before the create loads the filters, and the
/// create races the swap and a lookup. (Creates before the scan are the fitting model's.) Once
/// both are done, the rebuilt filter, which `K` could not enter, must not rule `K` out. The
/// census asks for a create that loaded both filters before the swap.
fn create_at_ceiling_into_a_full_next(broken: Broken, census: Census) {
    let core = full_core(broken);
    let store = Arc::new(Mutex::new(FILL.to_vec()));
    let returned = Arc::new(Mutex::new(false));
    let scanned = Arc::new(Mutex::new(false));
    let rebuilder = {
        let (core, store, scanned) = (Arc::clone(&core), Arc::clone(&store), Arc::clone(&scanned));
        thread::spawn(move || {
            let claim = core.claim().expect("the only rebuild");
            let mut turn = core
                .begin_rebuild::<()>(claim, RebuildReason::MemoryLimit)
                .expect("the next filter fits under the ceiling");
            while !turn.poll_gate::<()>().expect("no orphans") {
                thread::yield_now();
            }
            let keys = store.lock().unwrap().clone();
            turn.load_page::<_, ()>(&keys)
                .expect("the eight keys fill the next filter's pair");
            *scanned.lock().unwrap() = true;
            turn.finish();
        })
    };
    let creator = {
        let (core, store, returned) =
            (Arc::clone(&core), Arc::clone(&store), Arc::clone(&returned));
        thread::spawn(move || {
            while !*scanned.lock().unwrap() {
                thread::yield_now();
            }
            create(&core, &store, &returned);
        })
    };
    let first = core.filter();
    let looker = lookup_after_create(&core, &returned);
    rebuilder.join().unwrap();
    creator.join().unwrap();
    looker.join().unwrap();
    // The first filter is marked only by a create that loaded it with the next one pending.
    census.saw(first.generation.lacks_keys() && !core.filter().contains(&K));
    assert_ne!(
        core.decide_warm(&K),
        Admission::Blocked,
        "false negative: the rebuilt filter rules out a key whose create returned"
    );
}

#[test]
fn loom_ceiling_a_create_marks_a_next_filter_it_could_not_enter() {
    explore_with(
        ceiling(REBUILD_BOUND),
        "a create that loaded both filters before the swap",
        |census| create_at_ceiling_into_a_full_next(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_ceiling_control_next_unmarked() {
    ceiling(REBUILD_BOUND).check(|| {
        create_at_ceiling_into_a_full_next(
            Broken {
                ceiling_next_unmarked: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [seal.I5] A create of `K` meets the ceiling while a seal runs. The store clears its seal
/// on every put (one lock). Once both are done, a store whose seal survived must hold no key
/// the sealed file lacks, and no file may be written from a filter that lacks a key. The
/// census asks for a seal that survived the create and wrote no file.
fn create_at_ceiling_during_seal(broken: Broken, driver: Driver, census: Census) {
    let core = full_core(broken);
    let store = Arc::new(Mutex::new((FILL.to_vec(), None::<u64>)));
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core
                .begin_put::<_, ()>(&K)
                .expect("a create at the ceiling is taken");
            {
                let mut store = store.lock().unwrap();
                store.0.push(K);
                store.1 = None;
            }
            core.end_put(ticket, &Ok::<_, ()>(Written::Created), |_| true);
        })
    };
    let sealer = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            try_seal(
                &core,
                driver,
                || store.lock().unwrap().1 = Some(1),
                |filter| filter.contains(&K),
            )
        })
    };
    creator.join().unwrap();
    let file = sealer.join().unwrap();
    let (keys, seal) = store.lock().unwrap().clone();
    assert!(keys.contains(&K));
    if seal == Some(1) {
        census.saw(file.is_none());
        assert_ne!(
            file,
            Some(false),
            "false negative: the store's seal names a snapshot that misses one of its keys"
        );
    }
}

#[test]
fn loom_ceiling_a_seal_writes_no_file_of_a_marked_filter() {
    explore_with(
        ceiling(SEAL_BOUND),
        "a surviving seal that wrote no file",
        |census| create_at_ceiling_during_seal(Broken::default(), Driver::Sync, census),
    );
}

#[test]
fn loom_ceiling_an_async_seal_writes_no_file_of_a_marked_filter() {
    explore_with(
        ceiling(SEAL_BOUND),
        "a surviving seal that wrote no file",
        |census| create_at_ceiling_during_seal(Broken::default(), Driver::Async, census),
    );
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_ceiling_control_sealed() {
    ceiling(SEAL_BOUND).check(|| {
        create_at_ceiling_during_seal(
            Broken {
                ceiling_sealed: true,
                ..Broken::default()
            },
            Driver::Sync,
            Census::default(),
        )
    });
}

/// [fleet.F4] with [guard.R4]: another member's create of `K` reaches a member whose filter is
/// at its ceiling; the fleet's model of an acknowledged create ([`acknowledged_create_on`])
/// runs on it: a lookup that begins after the write must not answer "absent". Returns whether
/// the lookup ran after the write.
fn acknowledged_create_at_ceiling(broken: Broken) -> bool {
    let core = full_core(broken);
    core.fleet_join();
    core.fleet_set_deadline(100);
    core.fleet_start_serving();
    let ran = acknowledged_create_on(&core, false);
    assert!(
        !core.filter().contains(&K),
        "the member's filter took K: the model is not at the ceiling"
    );
    ran
}

#[test]
fn loom_ceiling_an_acknowledged_create_at_the_ceiling_is_not_ruled_out() {
    explore_with(
        ceiling(SEAL_BOUND),
        "a lookup after the acknowledged create's write",
        |census| census.saw(acknowledged_create_at_ceiling(Broken::default())),
    );
}

#[test]
#[should_panic(expected = "for a create it had acknowledged")]
fn loom_ceiling_control_unmarked_by_the_apply() {
    ceiling(SEAL_BOUND).check(|| {
        acknowledged_create_at_ceiling(Broken {
            ceiling_unmarked: true,
            ..Broken::default()
        });
    });
}
