//! Loom models of orphan pruning ([guard.R1], [guard.R3] in the core): a rebuild drops an orphan whose
//! write had ended when it was recorded, and keeps (and inserts) one whose write may still
//! land.
//!
//! Every actor is a spawned thread; the main thread only sets up, joins and asserts. The
//! core, the key `K` and the filters are those of the rebuild models (`loom_tests`): a
//! one-bucket filter whose rebuilds hash with a new key, and a store that is a loom mutex
//! over a list of keys.

use loom::sync::{Arc, Mutex};
use loom::thread;

use super::loom_tests::{core, Core, K};
use super::Broken;
use crate::guard::{RebuildReason, Written};
use crate::sync::{AtomicBool, Ordering};
use crate::table::loom_tests::explore;

/// A rebuild on its own thread: see [`rebuild_whole`]. Returns whether its scan found `K`.
fn rebuild(core: &Arc<Core>, store: &Arc<Mutex<Vec<u64>>>) -> thread::JoinHandle<bool> {
    let (core, store) = (Arc::clone(core), Arc::clone(store));
    thread::spawn(move || rebuild_whole(&core, &store))
}

/// A whole rebuild on the calling thread: waits at the gate, scans the whole store as one
/// page, swaps. Returns whether its scan found `K`.
fn rebuild_whole(core: &Core, store: &Mutex<Vec<u64>>) -> bool {
    let claim = core.claim().expect("no other rebuild holds the claim");
    let mut turn = core
        .begin_rebuild::<()>(claim, RebuildReason::Requested)
        .expect("a warm core builds its next filter");
    while !turn.poll_gate::<()>().expect("room for the orphans") {
        thread::yield_now();
    }
    let keys = store.lock().unwrap().clone();
    turn.load_page::<_, ()>(&keys)
        .expect("room for the scanned keys");
    turn.finish();
    keys.contains(&K)
}

/// What the model's put of `K` learns, and when its write lands.
struct Seen {
    /// The create found the rebuild's next filter (and put a copy there).
    saw_next: bool,
    /// The rebuild's scan found `K`.
    scanned: bool,
    /// Orphans listed once both are done.
    orphans: usize,
}

/// [guard.R1] [guard.R3]: a create of `K` whose outcome the guard never learns races a rebuild.
///
/// With `ends_with_call` the store writes within the call and the call fails with an
/// unknown outcome afterwards (a store whose put ends with its call): the orphan is recorded
/// as ended, and a rebuild that takes it drops it. Without, the create's future is dropped
/// and the write, handed to a server or another thread, lands after the drop: the orphan
/// must stay and be inserted. Either way, once both are done the store holds `K` and the
/// current filter must report it.
fn orphaned_put_racing_a_rebuild(broken: Broken, ends_with_call: bool) -> Seen {
    let core = core(broken, &[]);
    let store = Arc::new(Mutex::new(Vec::new()));
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core
                .begin_put::<_, ()>(&K)
                .expect("room for K")
                .write_ends_with_call(ends_with_call);
            let saw_next = ticket.next.is_some();
            if ends_with_call {
                store.lock().unwrap().push(K);
                core.end_put(ticket, &Err::<Written, ()>(()), |_| true);
            } else {
                drop(ticket);
                store.lock().unwrap().push(K);
            }
            saw_next
        })
    };
    let rebuilder = rebuild(&core, &store);
    let saw_next = creator.join().unwrap();
    let scanned = rebuilder.join().unwrap();
    assert_eq!(*store.lock().unwrap(), [K]);
    assert!(
        core.filter().contains(&K),
        "the rebuilt filter misses an orphaned write's key"
    );
    Seen {
        saw_next,
        scanned,
        orphans: core.stats().orphaned_writes,
    }
}

/// The census asks for the case pruning is about: the create missed the next filter, so
/// only the old filter holds its copy, and the rebuild dropped the orphan, so only its scan
/// can have put `K` into the new filter.
#[test]
fn loom_orphan_pruned_once_its_write_ended() {
    explore(
        "an ended write's orphan pruned, the scan alone covering K",
        |census| {
            let seen = orphaned_put_racing_a_rebuild(Broken::default(), true);
            census.saw(!seen.saw_next && seen.orphans == 0);
        },
    );
}

/// The census asks for the case the kept orphan is for: the create missed the next filter
/// and the scan missed the write, so only the orphan's insert covers `K`; the orphan is still
/// listed afterwards.
#[test]
fn loom_orphan_kept_while_its_write_may_land() {
    explore(
        "an orphan alone covering a write that landed after the scan",
        |census| {
            let seen = orphaned_put_racing_a_rebuild(Broken::default(), false);
            census.saw(!seen.saw_next && !seen.scanned && seen.orphans == 1);
        },
    );
}

#[test]
#[should_panic(expected = "misses an orphaned write's key")]
fn loom_orphan_control_unsettled_orphans_pruned() {
    loom::model(|| {
        orphaned_put_racing_a_rebuild(
            Broken {
                unsettled_orphans_pruned: true,
                ..Broken::default()
            },
            false,
        );
    });
}

/// [guard.R1] [guard.R3]: a rebuild prunes an ended orphan and then stops before its scan;
/// a second rebuild then runs whole. The stopped rebuild republishes the current filter,
/// which holds the create's own copy, and the second one's scan began after the write ended:
/// `K` is reported throughout. Returns whether the create missed the first rebuild's next
/// filter and had recorded its orphan before the first rebuild took the list.
fn pruned_by_a_stopped_rebuild(broken: Broken) -> bool {
    let core = core(broken, &[]);
    let store = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::new(AtomicBool::new(false));
    let creator = {
        let (core, store, recorded) =
            (Arc::clone(&core), Arc::clone(&store), Arc::clone(&recorded));
        thread::spawn(move || {
            let ticket = core
                .begin_put::<_, ()>(&K)
                .expect("room for K")
                .write_ends_with_call(true);
            let saw_next = ticket.next.is_some();
            store.lock().unwrap().push(K);
            core.end_put(ticket, &Err::<Written, ()>(()), |_| true);
            // ORDERING: SeqCst; after the orphan's record, so a rebuild that reads it before
            // its gate's last poll took a list holding the orphan.
            recorded.store(true, Ordering::SeqCst);
            saw_next
        })
    };
    let rebuilder = {
        let (core, store, recorded) =
            (Arc::clone(&core), Arc::clone(&store), Arc::clone(&recorded));
        thread::spawn(move || {
            let claim = core.claim().expect("the only rebuild");
            let mut turn = core
                .begin_rebuild::<()>(claim, RebuildReason::Requested)
                .expect("a warm core builds its next filter");
            let taken_after_record = loop {
                // ORDERING: SeqCst; read before the poll that takes the orphan list.
                let before = recorded.load(Ordering::SeqCst);
                if turn.poll_gate::<()>().expect("room for the orphans") {
                    break before;
                }
                thread::yield_now();
            };
            drop(turn);
            // The store first: a create whose write is in it has its copy in the filters.
            let stored = store.lock().unwrap().contains(&K);
            let after_stop = !stored || core.filter().contains(&K);
            rebuild_whole(&core, &store);
            (taken_after_record, after_stop)
        })
    };
    let saw_next = creator.join().unwrap();
    let (taken_after_record, after_stop) = rebuilder.join().unwrap();
    assert!(
        after_stop,
        "the filter a stopped rebuild left misses an orphaned write's key"
    );
    assert_eq!(*store.lock().unwrap(), [K]);
    assert!(
        core.filter().contains(&K),
        "the rebuilt filter misses an orphaned write's key"
    );
    !saw_next && taken_after_record
}

/// The census asks for the case at stake: the create missed the first rebuild's next filter
/// and its ended orphan was in the list that rebuild pruned before it stopped.
#[test]
fn loom_orphan_pruned_by_a_stopped_rebuild_stays_covered() {
    explore(
        "an ended orphan pruned by a rebuild that then stopped",
        |census| census.saw(pruned_by_a_stopped_rebuild(Broken::default())),
    );
}

#[test]
#[should_panic(expected = "misses an orphaned write's key")]
fn loom_orphan_control_stopped_publishes_next() {
    loom::model(|| {
        pruned_by_a_stopped_rebuild(Broken {
            stopped_publishes_next: true,
            ..Broken::default()
        });
    });
}
