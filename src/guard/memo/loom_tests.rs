//! Loom models of the false-positive memo ([M1] to [M4] in the module docs).
//!
//! Every actor is a spawned thread; the main thread only sets up, joins and asserts. The store
//! is a loom mutex over whether the key exists; the memo has one slot, so every put and lookup
//! meets every other. Each model drives the memo in the order the guards do (a put: [M1], store
//! write, [M2]; a lookup: [M3], store read, [M4]). A lookup that then finds the row in the
//! store asks the memo again, as a client that has seen the row would, and the model ends by
//! asking the memo for the key the store then holds: an entry either time would hide a row. Each has a negative control that breaks
//! one step and must fail, and a census of the interleaving the step exists for.

use loom::sync::{Arc, Mutex};
use loom::thread;

use super::{Broken, Memo, Probe};
use crate::guard::Admission;
use crate::table::loom_tests::{explore, Census};

const K: u64 = 7;

/// The store's state for `K`: absent, or present (and, for the late-landing model, whether
/// the put's future was dropped before its write landed).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Row {
    present: bool,
    put_dropped: bool,
}

type Store = Arc<Mutex<Row>>;

fn memo(broken: Broken) -> Arc<Memo<u64>> {
    let mut memo = Memo::new(1);
    memo.broken = broken;
    Arc::new(memo)
}

/// What a lookup saw: whether it noted a version ([M3]), whether the store answered absent,
/// the store's state just before its probe, and whether it installed ([M4]).
#[derive(Debug, Clone, Copy)]
struct Looked {
    noted: bool,
    read_absent: bool,
    before_probe: Row,
    installed: bool,
}

/// A lookup the filter admitted, as the guards make it.
fn lookup(memo: &Arc<Memo<u64>>, store: &Store) -> thread::JoinHandle<Option<Looked>> {
    let (memo, store) = (Arc::clone(memo), Arc::clone(store));
    thread::spawn(move || {
        let before_probe = *store.lock().unwrap();
        let probe = memo.probe(&K, Admission::Pass);
        if let Probe::Hit = probe {
            return None;
        }
        let noted = matches!(probe, Probe::Miss { .. });
        let at_read = *store.lock().unwrap();
        let answer = if at_read.present { Some(()) } else { None };
        let installed = memo.settle(&K, probe, &Ok::<_, ()>(answer));
        // A later lookup by a client that has seen the row (in the store, say).
        if store.lock().unwrap().present {
            assert_not_hit(&memo);
        }
        Some(Looked {
            noted,
            read_absent: !at_read.present,
            before_probe,
            installed,
        })
    })
}

/// The guards' put: [M1], the store write, [M2] with a known outcome.
fn put(memo: &Memo<u64>, store: &Store, lands: bool) {
    let write = memo.begin_write(&K);
    if lands {
        store.lock().unwrap().present = true;
    }
    write.end(true);
}

fn assert_not_hit(memo: &Memo<u64>) {
    assert!(
        !matches!(memo.probe(&K, Admission::Pass), Probe::Hit),
        "the memo hides a key the store holds"
    );
}

/// After every actor joined, with the store holding `K`: the memo must not answer "absent".
fn assert_not_hidden(memo: &Memo<u64>, store: &Store) {
    assert!(store.lock().unwrap().present);
    assert_not_hit(memo);
}

/// [M1]-[M4]: a lookup of `K` races a create of `K`. The census asks for both ways the
/// lookup's "absent" must not survive: an install refused because the create began after the
/// note, and an install the create's [M1] then cleared.
fn lookup_races_a_create(broken: Broken, clear_after_write: bool, census: [Census; 2]) {
    let memo = memo(broken);
    let store = Store::default();
    let reader = lookup(&memo, &store);
    let creator = {
        let (memo, store) = (Arc::clone(&memo), Arc::clone(&store));
        thread::spawn(move || {
            if clear_after_write {
                store.lock().unwrap().present = true;
                memo.begin_write(&K).end(true);
            } else {
                put(&memo, &store, true);
            }
        })
    };
    let looked = reader.join().unwrap();
    creator.join().unwrap();
    if let Some(looked) = looked {
        census[0].saw(looked.noted && looked.read_absent && !looked.installed);
        census[1].saw(looked.installed);
    }
    assert_not_hidden(&memo, &store);
}

fn censuses() -> [Census; 2] {
    [Census::default(), Census::default()]
}

#[test]
fn loom_memo_lookup_racing_a_create_never_keeps_a_stale_absent() {
    let refused = Census::default();
    let r = refused.clone();
    explore(
        "an install the create's [M1] then cleared",
        move |installed| lookup_races_a_create(Broken::default(), false, [r.clone(), installed]),
    );
    refused.assert_seen("an install refused because a create began after the note");
}

#[test]
#[should_panic(expected = "hides a key the store holds")]
fn loom_memo_control_put_leaves_the_entry() {
    loom::model(|| {
        lookup_races_a_create(
            Broken {
                clear_skipped: true,
                ..Broken::default()
            },
            false,
            censuses(),
        )
    });
}

#[test]
#[should_panic(expected = "hides a key the store holds")]
fn loom_memo_control_install_without_the_version_check() {
    loom::model(|| {
        lookup_races_a_create(
            Broken {
                install_unchecked: true,
                ..Broken::default()
            },
            false,
            censuses(),
        )
    });
}

#[test]
#[should_panic(expected = "hides a key the store holds")]
fn loom_memo_control_note_while_a_put_is_in_flight() {
    loom::model(|| {
        lookup_races_a_create(
            Broken {
                writing_ignored: true,
                ..Broken::default()
            },
            false,
            censuses(),
        )
    });
}

#[test]
#[should_panic(expected = "hides a key the store holds")]
fn loom_memo_control_clear_after_the_store_write() {
    loom::model(|| lookup_races_a_create(Broken::default(), true, censuses()));
}

/// [M2] for a write of unknown outcome: a put of `K` is dropped during its store write (a
/// dropped future), and its write lands afterwards. The census asks for the lookup that probed
/// and read between the drop and the landing: with the slot enabled again it would install an
/// "absent" the landing makes false.
fn lookup_races_a_put_that_lands_late(broken: Broken, census: Census) {
    let memo = memo(broken);
    let store = Store::default();
    let reader = lookup(&memo, &store);
    let writer = {
        let (memo, store) = (Arc::clone(&memo), Arc::clone(&store));
        thread::spawn(move || {
            let write = memo.begin_write(&K);
            drop(write);
            store.lock().unwrap().put_dropped = true;
            store.lock().unwrap().present = true;
        })
    };
    let looked = reader.join().unwrap();
    writer.join().unwrap();
    if let Some(looked) = looked {
        census.saw(looked.before_probe.put_dropped && looked.read_absent);
    }
    assert_not_hidden(&memo, &store);
}

#[test]
fn loom_memo_put_of_unknown_outcome_disables_its_slot() {
    explore(
        "a lookup between a dropped put and its late write",
        |census| lookup_races_a_put_that_lands_late(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "hides a key the store holds")]
fn loom_memo_control_unknown_outcome_forgotten() {
    loom::model(|| {
        lookup_races_a_put_that_lands_late(
            Broken {
                unknown_forgotten: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [M1]/[M2] with two puts of `K` in flight: one fails definitely (nothing lands), one
/// creates. The census asks for the lookup that probed after the failed one ended and
/// before the create's write landed, while the create was in flight: it must note nothing.
fn lookup_races_a_failed_put_and_a_create(broken: Broken, census: Census) {
    let memo = memo(broken);
    let store = Store::default();
    let reader = lookup(&memo, &store);
    let failed = {
        let (memo, store) = (Arc::clone(&memo), Arc::clone(&store));
        thread::spawn(move || put(&memo, &store, false))
    };
    let creator = {
        let (memo, store) = (Arc::clone(&memo), Arc::clone(&store));
        thread::spawn(move || put(&memo, &store, true))
    };
    let looked = reader.join().unwrap();
    failed.join().unwrap();
    creator.join().unwrap();
    if let Some(looked) = looked {
        census.saw(!looked.noted && looked.read_absent);
    }
    assert_not_hidden(&memo, &store);
}

#[test]
fn loom_memo_two_puts_in_flight_are_both_counted() {
    explore("a lookup that probed while a put was in flight", |census| {
        lookup_races_a_failed_put_and_a_create(Broken::default(), census)
    });
}

#[test]
#[should_panic(expected = "hides a key the store holds")]
fn loom_memo_control_in_flight_as_a_flag() {
    loom::model(|| {
        lookup_races_a_failed_put_and_a_create(
            Broken {
                writing_as_flag: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}
