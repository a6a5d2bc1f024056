//! Loom models of the rebuild protocol from its second adversarial review ([guard.R1] to [guard.R3] in the
//! core): updates that remove only their own copies, updates, creates and deletes split around
//! a rebuild's scan, dropped and unknown-outcome puts whose writes land after a scan, colliding
//! creates and updates, writes across a stopped or a failed rebuild, deletes across two
//! rebuilds and in a grown filter, and an update that moves a key's only copy under a lookup.
//!
//! The set-up is the one of the core's `loom_tests` (its `core`, its `Keyed` hasher, its keys:
//! `J` and `K` share one fingerprint under every hash key). The store here also counts the
//! rebuild scans that read it, so a write knows whether it landed before or after a scan.
//! Every actor is a spawned thread; the main thread only sets up, joins and asserts. Each model
//! asserts by census that the interleaving it exists for was reached. Each model but two has a
//! negative control that breaks one step ([`Broken`]) and must fail; the delete in a grown
//! filter and the update under a lookup have none, as no single step of the core's protocol
//! is what keeps them right (the table's remove and lookup are, with their own models).
//!
//! The models whose rebuild thread also plays a write run at a preemption bound of 2 or 3
//! ([`HEAVY_BOUND`], [`CREATE_DELETE_BOUND`]); the others at `LOOM_MAX_PREEMPTIONS`.

use loom::sync::{Arc, Mutex};
use loom::thread;

use super::loom_tests::{core, Core, Keyed, J, K};
use super::{Broken, GuardCore};
use crate::guard::{RebuildPolicy, RebuildReason, Written};
use crate::sync::{pin, AtomicBool, AtomicU64, Ordering};
pub(super) use crate::table::loom_tests::{bounded, explore_at};
use crate::table::loom_tests::{explore, Census};
use crate::{CuckooFilter, Growth};

/// The model's store: its rows, and how many rebuild scans and swaps have happened.
#[derive(Debug, Default)]
struct Rows {
    keys: Vec<u64>,
    scans: u32,
    swaps: u32,
}

type Store = Arc<Mutex<Rows>>;

fn store(keys: &[u64]) -> Store {
    Arc::new(Mutex::new(Rows {
        keys: keys.to_vec(),
        ..Rows::default()
    }))
}

impl Rows {
    /// A put (an upsert): created if the row was absent, updated if not.
    fn put(&mut self, key: u64) -> Written {
        if self.keys.contains(&key) {
            Written::Updated
        } else {
            self.keys.push(key);
            Written::Created
        }
    }

    /// A delete: whether a row was deleted.
    fn delete(&mut self, key: u64) -> bool {
        let before = self.keys.len();
        self.keys.retain(|&k| k != key);
        self.keys.len() < before
    }

    /// A rebuild's scan of every row, as one page.
    fn scan(&mut self) -> Vec<u64> {
        self.scans += 1;
        self.keys.clone()
    }
}

/// Whether a rebuild's next filter is published.
fn pending(core: &Core) -> bool {
    let pin = pin();
    // ORDERING: Acquire; a census probe of the published filters.
    core.filters.load(Ordering::Acquire, &pin).next.is_some()
}

/// The current generation's id.
fn current_id(core: &Core) -> u64 {
    let pin = pin();
    // ORDERING: Acquire; a census probe of the published filters.
    core.filters.load(Ordering::Acquire, &pin).current.id
}

/// A whole put of `key` (filter inserts, the store's upsert, the end); returns what the store
/// wrote and the scans before the write.
fn put(core: &Core, store: &Store, key: u64) -> (Written, u32) {
    let ticket = core.begin_put::<_, ()>(&key).expect("room for the key");
    let (written, scans) = {
        let mut rows = store.lock().unwrap();
        (rows.put(key), rows.scans)
    };
    core.end_put(ticket, &Ok::<_, ()>(written), |_| true);
    (written, scans)
}

/// A rebuild under a fresh claim, from its start to its swap, on the calling thread.
fn full_rebuild(core: &Core, store: &Store) {
    let claim = core.claim().expect("the only rebuild");
    let mut turn = core
        .begin_rebuild::<()>(claim, RebuildReason::Requested)
        .expect("a warm core builds its next filter");
    while !turn.poll_gate::<()>().expect("room for the orphans") {
        thread::yield_now();
    }
    let keys = store.lock().unwrap().scan();
    turn.load_page::<_, ()>(&keys)
        .expect("room for the scanned keys");
    turn.finish();
    store.lock().unwrap().swaps += 1;
}

/// A rebuild that stops right after it flipped the gate (a dropped future), its phase left
/// undrained.
fn stopped_rebuild(core: &Core) {
    let claim = core.claim().expect("the only rebuild");
    let turn = core.begin_rebuild::<()>(claim, RebuildReason::Requested);
    drop(turn.expect("a warm core builds its next filter"));
}

/// A rebuild that passes the gate and fails before its first page (a scan error).
fn failed_rebuild(core: &Core) {
    let claim = core.claim().expect("the only rebuild");
    let mut turn = core
        .begin_rebuild::<()>(claim, RebuildReason::Requested)
        .expect("a warm core builds its next filter");
    while !turn.poll_gate::<()>().expect("room for the orphans") {
        thread::yield_now();
    }
    turn.fail(&"the scan failed");
}

/// A rebuild with a create of `key` across its scan: the create begins once the next filter is
/// published (so it inserts there too, and the rebuild does not wait for it), `begun` is set,
/// and its store write lands after the scan. The one thread plays both, so the create's copy
/// is the only one of `key` in the next filter.
fn rebuild_with_a_create_across_its_scan(core: &Core, store: &Store, key: u64, begun: &AtomicBool) {
    let claim = core.claim().expect("the only rebuild");
    let mut turn = core
        .begin_rebuild::<()>(claim, RebuildReason::Requested)
        .expect("a warm core builds its next filter");
    let ticket = core.begin_put::<_, ()>(&key).expect("room for the key");
    assert!(ticket.next.is_some(), "the create finds the next filter");
    // ORDERING: SeqCst; census only, orders nothing the model asserts.
    begun.store(true, Ordering::SeqCst);
    while !turn.poll_gate::<()>().expect("room for the orphans") {
        thread::yield_now();
    }
    let keys = store.lock().unwrap().scan();
    turn.load_page::<_, ()>(&keys)
        .expect("room for the scanned keys");
    let written = store.lock().unwrap().put(key);
    core.end_put(ticket, &Ok::<_, ()>(written), |_| true);
    turn.finish();
    store.lock().unwrap().swaps += 1;
}

/// Panics unless the current filter reports every key the store holds.
fn assert_covers(core: &Core, store: &Store) {
    for key in store.lock().unwrap().keys.clone() {
        assert!(
            core.filter().contains(&key),
            "the filter misses a key the store holds: {key:#x}"
        );
    }
}

/// The preemption bound of the models whose rebuild thread also plays a create of `J` across
/// its scan, or a delete around it (the two writers of a thread multiply the interleavings:
/// at 4 each takes minutes). The race each asks for takes at most two preemptions (the
/// rebuild's wait at the gate yields to the other writer without one), and each control is
/// caught at this bound.
const HEAVY_BOUND: usize = 2;

/// The preemption bound of [`create_and_delete_around_the_scan`]: its race takes three (the
/// create begins after the flip, pauses before its write, and writes between the delete's
/// store call and its end).
const CREATE_DELETE_BOUND: usize = 3;

/// Panics unless the current filter holds a copy for each of `J` and `K`, both stored: they
/// share a fingerprint, so one copy would report both until a delete of `K` took it.
fn assert_own_copies(core: &Core) {
    assert!(
        core.filter().count(&K) >= 2,
        "the filter misses a key the store holds: `J` and `K` share one copy"
    );
}

/// The census flag of a model, shared with its actors.
fn flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

/// Reads a census flag.
fn seen(flag: &AtomicBool) -> bool {
    // ORDERING: SeqCst; census only, orders nothing the model asserts.
    flag.load(Ordering::SeqCst)
}

/// [guard.R1]: an update of `K` (the row is there) races a rebuild during which a create of `J`
/// (`K`'s fingerprint) inserts into the next filter and writes after the scan. The update
/// removes its copies only from the generations it inserted into; the next filter holds no
/// copy of its. The census asks for an update that missed the next filter and ended after
/// `J`'s copy was there: a removal from every generation would take `J`'s only copy.
fn update_beside_a_create_in_the_next(broken: Broken, census: Census) {
    let core = core(broken, &[K]);
    let store = store(&[K]);
    let begun = flag();
    let updater = {
        let (core, store, begun) = (Arc::clone(&core), Arc::clone(&store), Arc::clone(&begun));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let missed_next = ticket.next.is_none();
            let written = store.lock().unwrap().put(K);
            let beside = seen(&begun);
            core.end_put(ticket, &Ok::<_, ()>(written), |_| true);
            missed_next && beside
        })
    };
    let rebuilder = {
        let (core, store, begun) = (Arc::clone(&core), Arc::clone(&store), Arc::clone(&begun));
        thread::spawn(move || rebuild_with_a_create_across_its_scan(&core, &store, J, &begun))
    };
    census.saw(updater.join().unwrap());
    rebuilder.join().unwrap();
    assert_own_copies(&core);
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_an_update_removes_only_its_own_copies() {
    explore_at(
        HEAVY_BOUND,
        "an update that missed the next filter ending beside a create's copy there",
        |census| update_beside_a_create_in_the_next(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_update_removes_unowned_copies() {
    bounded(HEAVY_BOUND).check(|| {
        update_beside_a_create_in_the_next(
            Broken {
                update_removes_unowned_copies: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R2] [guard.R1]: `J` and `K` are stored; a put of `K` races a rebuild during which a delete of
/// `K` runs split around the scan: it begins and deletes the row once the next filter is
/// published, before the wait at the gate, and ends after the swap. (The rebuild's thread
/// plays the delete, so the model keeps two actors.) The delete removes a copy only from the
/// generation current when it began, and only if it still is: the next filter, scanned after
/// the row was gone, holds `J`'s copy and the put's own, never the delete's. `recreated` asks
/// for the put's write landing after the scan (recreating `K`), `updated` for an update whose
/// row the delete then took (the next filter holds `J`'s copy alone).
fn update_and_delete_around_the_scan(broken: Broken, recreated: Census, updated: Census) {
    let core = core(broken, &[J, K]);
    let store = store(&[J, K]);
    let updater = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || put(&core, &store, K))
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let claim = core.claim().expect("the only rebuild");
            let mut turn = core
                .begin_rebuild::<()>(claim, RebuildReason::Requested)
                .expect("a warm core builds its next filter");
            let ticket = core.begin_delete();
            let deleted = store.lock().unwrap().delete(K);
            while !turn.poll_gate::<()>().expect("room for the orphans") {
                thread::yield_now();
            }
            let keys = store.lock().unwrap().scan();
            turn.load_page::<_, ()>(&keys)
                .expect("room for the scanned keys");
            turn.finish();
            core.end_delete(&K, ticket, &Ok::<_, ()>(deleted));
            deleted
        })
    };
    let (written, scans) = updater.join().unwrap();
    let deleted = rebuilder.join().unwrap();
    assert!(deleted, "the delete found the row set up");
    recreated.saw(written == Written::Created && scans == 1);
    updated.saw(written == Written::Updated);
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_an_update_and_a_delete_split_around_the_scan_keep_every_stored_key() {
    let (recreated, updated) = (Census::default(), Census::default());
    let (r, u) = (recreated.clone(), updated.clone());
    bounded(HEAVY_BOUND)
        .check(move || update_and_delete_around_the_scan(Broken::default(), r.clone(), u.clone()));
    recreated.assert_seen("a put recreating the deleted key after the scan");
    updated.assert_seen("an update whose row the delete then took");
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_delete_notes_the_next_generation() {
    bounded(HEAVY_BOUND).check(|| {
        update_and_delete_around_the_scan(
            Broken {
                delete_notes_the_next_generation: true,
                ..Broken::default()
            },
            Census::default(),
            Census::default(),
        )
    });
}

/// [guard.R2] [guard.R1]: a create of `K` races a rebuild, after whose swap a delete of `K` runs (the
/// rebuild's thread plays it). A delete the store did not confirm removes nothing. The census
/// asks for the split where that matters: the create's write landed after the scan (the next
/// filter holds the create's own copy of `K` alone) and after the delete found no row.
fn create_and_delete_around_the_scan(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    let store = store(&[]);
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || put(&core, &store, K))
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            full_rebuild(&core, &store);
            let ticket = core.begin_delete();
            let deleted = store.lock().unwrap().delete(K);
            core.end_delete(&K, ticket, &Ok::<_, ()>(deleted));
            deleted
        })
    };
    let (_, scans) = creator.join().unwrap();
    let deleted = rebuilder.join().unwrap();
    let stored = store.lock().unwrap().keys.contains(&K);
    census.saw(!deleted && scans == 1 && stored);
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_a_create_and_a_delete_split_around_the_scan_keep_the_created_key() {
    explore_at(
        CREATE_DELETE_BOUND,
        "a create written after the scan and after a delete that found no row",
        |census| create_and_delete_around_the_scan(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_delete_unconfirmed_removes() {
    bounded(CREATE_DELETE_BOUND).check(|| {
        create_and_delete_around_the_scan(
            Broken {
                delete_unconfirmed_removes: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R1] [guard.R3]: a put of `K` dropped during its store write (set-up: its copy and its orphan are
/// recorded), whose write lands at any time while two rebuilds run. Every rebuild inserts
/// every orphan. The census asks for the write landing after both scans: only the second
/// rebuild's orphan insert covers `K`.
fn dropped_put_across_two_rebuilds(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    drop(core.begin_put::<_, ()>(&K).expect("room for K"));
    let store = store(&[]);
    let writer = {
        let store = Arc::clone(&store);
        thread::spawn(move || {
            let mut rows = store.lock().unwrap();
            rows.put(K);
            rows.scans
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            full_rebuild(&core, &store);
            full_rebuild(&core, &store);
        })
    };
    let scans = writer.join().unwrap();
    rebuilder.join().unwrap();
    census.saw(scans == 2);
    assert_eq!(core.stats().rebuilds, 2);
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_a_dropped_put_landing_after_two_scans_stays_covered() {
    explore("a dropped put's write landing after both scans", |census| {
        dropped_put_across_two_rebuilds(Broken::default(), census)
    });
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_orphans_taken() {
    loom::model(|| {
        dropped_put_across_two_rebuilds(
            Broken {
                orphans_taken: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R1] [guard.R3]: a put of `K` is dropped during its store write while a rebuild runs; the write
/// lands after the drop. The rebuild reads the orphans only once it passed the gate. The
/// census asks for a put that missed the next filter and was dropped after the rebuild began
/// (its orphan recorded after the next filter was published), its write landing after the
/// scan.
fn dropped_put_during_a_rebuild(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    let store = store(&[]);
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let missed_next = ticket.next.is_none();
            let dropped_while_pending = pending(&core);
            drop(ticket);
            let scans = {
                let mut rows = store.lock().unwrap();
                rows.put(K);
                rows.scans
            };
            missed_next && dropped_while_pending && scans == 1
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || full_rebuild(&core, &store))
    };
    census.saw(creator.join().unwrap());
    rebuilder.join().unwrap();
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_a_dropped_put_recorded_after_the_rebuild_began_is_inserted() {
    explore(
        "a put dropped after the next filter was published, landing after the scan",
        |census| dropped_put_during_a_rebuild(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_orphans_read_before_the_gate() {
    loom::model(|| {
        dropped_put_during_a_rebuild(
            Broken {
                orphans_read_before_the_gate: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R1] [guard.R3]: a put of `K` is dropped during its store write while a rebuild runs; the write
/// lands after the drop. The dropped put records its orphan. The census asks for a put that
/// missed the next filter and whose write landed after the swap.
fn dropped_put_landing_after_the_swap(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    let store = store(&[]);
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let missed_next = ticket.next.is_none();
            drop(ticket);
            let swaps = {
                let mut rows = store.lock().unwrap();
                rows.put(K);
                rows.swaps
            };
            missed_next && swaps == 1
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || full_rebuild(&core, &store))
    };
    census.saw(creator.join().unwrap());
    rebuilder.join().unwrap();
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_a_dropped_put_landing_after_the_swap_is_covered() {
    explore(
        "a dropped put that missed the next filter landing after the swap",
        |census| dropped_put_landing_after_the_swap(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_dropped_put_not_orphaned() {
    loom::model(|| {
        dropped_put_landing_after_the_swap(
            Broken {
                dropped_put_not_orphaned: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R1]: a put of `K` whose outcome is unknown keeps its copies; its write lands after the put
/// returned. A lookup that finds the row in the store, then asks the filter, must find `K`;
/// then a rebuild runs. The census asks for the lookup after the write landed, before the
/// rebuild.
fn unknown_outcome_under_a_lookup(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    let store = store(&[]);
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            core.end_put(ticket, &Err::<Written, ()>(()), |_| true);
            store.lock().unwrap().put(K);
        })
    };
    let looker = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let landed = store.lock().unwrap().keys.contains(&K);
            if landed {
                assert!(
                    core.filter_contains(&K),
                    "a lookup misses a key the store holds"
                );
            }
            full_rebuild(&core, &store);
            landed
        })
    };
    creator.join().unwrap();
    census.saw(looker.join().unwrap());
    assert_eq!(core.stats().orphaned_writes, 1);
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_an_unknown_outcome_keeps_its_copies_for_lookups() {
    explore("a lookup after an unknown write landed", |census| {
        unknown_outcome_under_a_lookup(Broken::default(), census)
    });
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_unknown_outcome_removes_copies() {
    loom::model(|| {
        unknown_outcome_under_a_lookup(
            Broken {
                unknown_outcome_removes_copies: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R1] [guard.R3]: a put of `K` whose outcome is unknown (set-up: its copy kept, its orphan
/// recorded) lands at any time while two rebuilds run. The census asks for the write landing
/// after both scans: only the orphan, inserted by each rebuild, covers `K`.
fn unknown_outcome_across_two_rebuilds(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    {
        let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
        core.end_put(ticket, &Err::<Written, ()>(()), |_| true);
    }
    let store = store(&[]);
    let writer = {
        let store = Arc::clone(&store);
        thread::spawn(move || {
            let mut rows = store.lock().unwrap();
            rows.put(K);
            rows.scans
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            full_rebuild(&core, &store);
            full_rebuild(&core, &store);
        })
    };
    let scans = writer.join().unwrap();
    rebuilder.join().unwrap();
    census.saw(scans == 2);
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_an_unknown_outcome_landing_after_two_scans_stays_covered() {
    explore("an unknown write landing after both scans", |census| {
        unknown_outcome_across_two_rebuilds(Broken::default(), census)
    });
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_unknown_outcome_not_orphaned() {
    loom::model(|| {
        unknown_outcome_across_two_rebuilds(
            Broken {
                unknown_outcome_not_orphaned: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R1] [guard.R3]: a put of `K` whose outcome is unknown races a rebuild; its write lands after the
/// put returned. The put records its orphan before it leaves the gate. The census asks for a
/// put that missed the next filter and a write that landed after the scan: only the orphan,
/// read once the gate drained, covers `K`.
fn unknown_outcome_racing_the_drain(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    let store = store(&[]);
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let missed_next = ticket.next.is_none();
            core.end_put(ticket, &Err::<Written, ()>(()), |_| true);
            let scans = {
                let mut rows = store.lock().unwrap();
                rows.put(K);
                rows.scans
            };
            missed_next && scans == 1
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || full_rebuild(&core, &store))
    };
    census.saw(creator.join().unwrap());
    rebuilder.join().unwrap();
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_an_unknown_outcome_records_its_orphan_before_it_leaves_the_gate() {
    explore(
        "an unknown write that missed the next filter landing after the scan",
        |census| unknown_outcome_racing_the_drain(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_unknown_orphan_after_leave() {
    loom::model(|| {
        unknown_outcome_racing_the_drain(
            Broken {
                unknown_orphan_after_leave: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R1]: `K` is stored; an update of `K` races a create of `J` (`K`'s fingerprint) followed by
/// a rebuild. Every put inserts a copy of its own, even where a filter already reports its
/// key, so each removal takes a copy its put added. The updater looks `K` up once its update
/// returned. The census asks for the create's insert landing while the update held its copy.
fn colliding_create_and_update(broken: Broken, census: Census) {
    let core = core(broken, &[K]);
    let store = store(&[K]);
    let holding = flag();
    let updater = {
        let (core, store, holding) = (Arc::clone(&core), Arc::clone(&store), Arc::clone(&holding));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            // ORDERING: SeqCst; census only, orders nothing the model asserts.
            holding.store(true, Ordering::SeqCst);
            let written = store.lock().unwrap().put(K);
            // ORDERING: SeqCst; census only.
            holding.store(false, Ordering::SeqCst);
            core.end_put(ticket, &Ok::<_, ()>(written), |_| true);
            assert!(
                core.filter_contains(&K),
                "a lookup misses a key the store holds"
            );
        })
    };
    let creator = {
        let (core, store, holding) = (Arc::clone(&core), Arc::clone(&store), Arc::clone(&holding));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&J).expect("room for J");
            let met = seen(&holding);
            let written = store.lock().unwrap().put(J);
            core.end_put(ticket, &Ok::<_, ()>(written), |_| true);
            full_rebuild(&core, &store);
            met
        })
    };
    updater.join().unwrap();
    census.saw(creator.join().unwrap());
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_colliding_creates_and_updates_keep_their_copies() {
    explore_at(
        HEAVY_BOUND,
        "a create inserting while a colliding update held its copy",
        |census| colliding_create_and_update(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_insert_skipped_when_present() {
    bounded(HEAVY_BOUND).check(|| {
        colliding_create_and_update(
            Broken {
                insert_skipped_when_present: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R1] [guard.R3] across a failed rebuild: `K` is stored; an update of `K` races a rebuild that
/// fails after its gate, then a rebuild with a create of `J` (`K`'s fingerprint under the same
/// hash key) across its scan. The update removes its copies by generation id; every
/// generation has its own. The census asks for an update that inserted into the failed
/// rebuild's filter and ended beside `J`'s copy in the second rebuild's.
fn update_across_a_failed_rebuild(broken: Broken, census: Census) {
    let core = core(broken, &[K]);
    let store = store(&[K]);
    let begun = flag();
    let updater = {
        let (core, store, begun) = (Arc::clone(&core), Arc::clone(&store), Arc::clone(&begun));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let in_failed = ticket.next.is_some_and(|(id, _)| id == 1);
            let written = store.lock().unwrap().put(K);
            let beside = seen(&begun);
            core.end_put(ticket, &Ok::<_, ()>(written), |_| true);
            in_failed && beside
        })
    };
    let rebuilder = {
        let (core, store, begun) = (Arc::clone(&core), Arc::clone(&store), Arc::clone(&begun));
        thread::spawn(move || {
            failed_rebuild(&core);
            rebuild_with_a_create_across_its_scan(&core, &store, J, &begun);
        })
    };
    census.saw(updater.join().unwrap());
    rebuilder.join().unwrap();
    assert_eq!(core.stats().rebuilds_failed, 1);
    assert_own_copies(&core);
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_an_update_across_a_failed_rebuild_removes_only_its_own_copies() {
    explore_at(
        HEAVY_BOUND,
        "an update in the failed filter ending beside a create's copy in the next",
        |census| update_across_a_failed_rebuild(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_stopped_ids_reused() {
    bounded(HEAVY_BOUND).check(|| {
        update_across_a_failed_rebuild(
            Broken {
                stopped_ids_reused: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R3] across a stopped rebuild: `J` is stored; a lookup of `J` races a rebuild that stops
/// right after its flip and then one that runs to the end. A stopped rebuild publishes the
/// current filter alone again, never its unfinished next one. The census asks for the lookup
/// between the stop and the second rebuild's swap.
fn lookups_across_a_stopped_rebuild(broken: Broken, census: Census) {
    let core = core(broken, &[J]);
    let store = store(&[J]);
    let stopped = flag();
    let looker = {
        let (core, store, stopped) = (Arc::clone(&core), Arc::clone(&store), Arc::clone(&stopped));
        thread::spawn(move || {
            let between = seen(&stopped) && store.lock().unwrap().swaps == 0;
            assert!(
                core.filter_contains(&J),
                "a lookup misses a key the store holds"
            );
            between
        })
    };
    let rebuilder = {
        let (core, store, stopped) = (Arc::clone(&core), Arc::clone(&store), Arc::clone(&stopped));
        thread::spawn(move || {
            stopped_rebuild(&core);
            // ORDERING: SeqCst; census only.
            stopped.store(true, Ordering::SeqCst);
            full_rebuild(&core, &store);
        })
    };
    census.saw(looker.join().unwrap());
    rebuilder.join().unwrap();
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_lookups_across_a_stopped_rebuild_see_the_current_filter() {
    explore(
        "lookups between a stopped rebuild and the next swap",
        |census| lookups_across_a_stopped_rebuild(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_stopped_publishes_next() {
    loom::model(|| {
        lookups_across_a_stopped_rebuild(
            Broken {
                stopped_publishes_next: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R1] [guard.R3] across a failed rebuild: a create of `K` races a rebuild that fails after its
/// gate and then one that runs to the end. The create enters the gate before it loads the
/// filters, so a create that missed the second next filter is one the second scan waits for.
/// The census asks for that create.
fn create_across_a_failed_rebuild(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    let store = store(&[]);
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let newest = ticket.next.unwrap_or(ticket.current).0;
            let written = store.lock().unwrap().put(K);
            core.end_put(ticket, &Ok::<_, ()>(written), |_| true);
            newest < 2
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            failed_rebuild(&core);
            full_rebuild(&core, &store);
        })
    };
    census.saw(creator.join().unwrap());
    rebuilder.join().unwrap();
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_a_create_across_a_failed_rebuild_is_scanned() {
    explore("a create that missed the last next filter", |census| {
        create_across_a_failed_rebuild(Broken::default(), census)
    });
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_filters_loaded_before_entering() {
    loom::model(|| {
        create_across_a_failed_rebuild(
            Broken {
                filters_loaded_before_entering: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R2] across two rebuilds: `J` and `K` are stored; a delete of `K` races two rebuilds. The
/// delete notes the current generation before its store delete and removes a copy only from
/// it, only if it is still current. The census asks for a delete that began before the first
/// rebuild and ended after the second swapped: both later filters were scanned after the
/// store delete and hold `J`'s copy alone.
fn delete_across_two_rebuilds(broken: Broken, census: Census) {
    let core = core(broken, &[J, K]);
    let store = store(&[J, K]);
    let deleter = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_delete();
            let began = ticket.generation;
            let deleted = store.lock().unwrap().delete(K);
            let ends = current_id(&core);
            core.end_delete(&K, ticket, &Ok::<_, ()>(deleted));
            began == 0 && ends == 2
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            full_rebuild(&core, &store);
            full_rebuild(&core, &store);
        })
    };
    census.saw(deleter.join().unwrap());
    rebuilder.join().unwrap();
    assert_eq!(core.stats().rebuilds, 2);
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_a_delete_across_two_rebuilds_leaves_their_filters_alone() {
    explore("a delete that spanned both rebuilds", |census| {
        delete_across_two_rebuilds(Broken::default(), census)
    });
}

#[test]
#[should_panic(expected = "misses a key the store holds")]
fn loom_rebuild_control_delete_generation_noted_late() {
    loom::model(|| {
        delete_across_two_rebuilds(
            Broken {
                delete_generation_noted_late: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// A warm guard core over a filter that has grown once: it holds `J`, `K` and as many keys
/// of `K`'s buckets and other fingerprints as it took to grow, returned with them.
fn grown_core() -> (Arc<Core>, Vec<u64>) {
    let filter = CuckooFilter::builder()
        .hasher(Keyed(0))
        .capacity(3)
        .growth(Growth::Expand {
            factor: 1,
            max_steps: 1,
        })
        .build()
        .expect("a tiny filter");
    let mut core = GuardCore::new(filter, RebuildPolicy::manual());
    core.rekey = Some(|hasher| Keyed(hasher.0 + 1));
    let mut keys = vec![J, K];
    // `K`'s high bits with another fingerprint: `K`'s primary bucket.
    let fillers = (0x10..0x80).map(|fp| K - 7 + fp);
    for key in [J, K].into_iter().chain(fillers) {
        if key != J && key != K {
            keys.push(key);
        }
        let ticket = core
            .begin_put::<_, ()>(&key)
            .expect("room for the set-up keys");
        core.end_put(ticket, &Ok::<_, ()>(Written::Created), |_| true);
        if core.filter().growth_steps() > 0 {
            break;
        }
    }
    core.finish_warm_up();
    assert_eq!(core.filter().growth_steps(), 1, "the filter grew");
    (Arc::new(core), keys)
}

/// [guard.R2] in a grown filter: `K` and the keys it took to grow the current filter are stored; a
/// delete of `K` races a create of `J` (`K`'s fingerprint). Removing "`K`'s" copy in a grown
/// filter takes a copy of `K`'s fingerprint from `K`'s buckets in either table, never another
/// fingerprint, and the copies of `J` and `K` are counted. No single step of the core's
/// protocol keeps this right (the grown table's remove does), so the model has no control.
/// The census asks for the delete's removal after the create's insert, when two copies of
/// the fingerprint are there.
fn delete_in_a_grown_filter(census: Census) {
    let (core, mut keys) = grown_core();
    keys.retain(|&key| key != J);
    // `J`'s set-up copy goes again: the create below adds it.
    assert!(core.filter().remove(&J));
    let store = store(&keys);
    let inserted = flag();
    let deleter = {
        let (core, store, inserted) =
            (Arc::clone(&core), Arc::clone(&store), Arc::clone(&inserted));
        thread::spawn(move || {
            let ticket = core.begin_delete();
            let deleted = store.lock().unwrap().delete(K);
            let after = seen(&inserted);
            core.end_delete(&K, ticket, &Ok::<_, ()>(deleted));
            after
        })
    };
    let creator = {
        let (core, store, inserted) =
            (Arc::clone(&core), Arc::clone(&store), Arc::clone(&inserted));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&J).expect("room for J");
            // ORDERING: SeqCst; census only.
            inserted.store(true, Ordering::SeqCst);
            let written = store.lock().unwrap().put(J);
            core.end_put(ticket, &Ok::<_, ()>(written), |_| true);
        })
    };
    census.saw(deleter.join().unwrap());
    creator.join().unwrap();
    assert_eq!(core.stats().missing_copies, 0, "the delete found its copy");
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_a_delete_in_a_grown_filter_takes_no_other_key() {
    let census = Census::default();
    let c = census.clone();
    let mut builder = loom::model::Builder::new();
    // The set-up's inserts, on the main thread before any actor, run past loom's default.
    builder.max_branches = 100_000;
    builder.check(move || delete_in_a_grown_filter(c.clone()));
    census.assert_seen("a delete removing while a create's copy of its fingerprint was there");
}

/// [guard.R1] under a lookup: `K` is stored with one copy; an update of `K` inserts a second copy and,
/// once the store said "updated", removes one: the first it finds, which may be the one that
/// was there, so `K`'s only copy moves. A lookup racing the update must find `K` throughout.
/// The table's validated reads keep this right, not a step of the core, so the model has no
/// control. The census asks for one lookup spanning the update's insert and its removal.
fn update_moving_the_only_copy(census: Census) {
    let core = core(Broken::default(), &[K]);
    let store = store(&[K]);
    // 0: before the update's insert; 1: inserted; 2: removed.
    let stage = Arc::new(AtomicU64::new(0));
    let updater = {
        let (core, store, stage) = (Arc::clone(&core), Arc::clone(&store), Arc::clone(&stage));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            // ORDERING: SeqCst; census only.
            stage.store(1, Ordering::SeqCst);
            let written = store.lock().unwrap().put(K);
            core.end_put(ticket, &Ok::<_, ()>(written), |_| true);
            // ORDERING: SeqCst; census only.
            stage.store(2, Ordering::SeqCst);
        })
    };
    let looker = {
        let (core, stage) = (Arc::clone(&core), Arc::clone(&stage));
        thread::spawn(move || {
            // ORDERING: SeqCst; census only.
            let before = stage.load(Ordering::SeqCst);
            assert!(
                core.filter_contains(&K),
                "a lookup misses a key the store holds"
            );
            // ORDERING: SeqCst; census only.
            let after = stage.load(Ordering::SeqCst);
            before == 0 && after == 2
        })
    };
    updater.join().unwrap();
    census.saw(looker.join().unwrap());
    assert_eq!(core.filter().count(&K), 1);
    assert_covers(&core, &store);
}

#[test]
fn loom_rebuild_an_update_moving_the_only_copy_keeps_it_visible() {
    explore(
        "a lookup spanning an update's insert and removal",
        update_moving_the_only_copy,
    );
}
