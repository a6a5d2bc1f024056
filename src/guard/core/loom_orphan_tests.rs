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
use crate::table::loom_tests::explore;

/// A rebuild on its own thread: waits at the gate, scans the whole store as one page, swaps.
/// Returns whether its scan found `K`.
fn rebuild(core: &Arc<Core>, store: &Arc<Mutex<Vec<u64>>>) -> thread::JoinHandle<bool> {
    let (core, store) = (Arc::clone(core), Arc::clone(store));
    thread::spawn(move || {
        let claim = core.claim().expect("the only rebuild");
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
    })
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
