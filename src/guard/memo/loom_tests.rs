//! Loom models of the false-positive memo ([memo.M1] to [memo.M4] in the module docs).
//!
//! Every actor is a spawned thread; the main thread only sets up, joins and asserts. The store
//! is a loom mutex over whether the key exists; the memo has one slot, so every put and lookup
//! meets every other. Each model drives the memo in the order the guards do (a put: [memo.M1], store
//! write, [memo.M2]; a lookup: [memo.M3], store read, [memo.M4]). A lookup that then finds the row in the
//! store asks the memo again, as a client that has seen the row would, and the model ends by
//! asking the memo for the key the store then holds: an entry either time would hide a row. Each has a negative control that breaks
//! one step and must fail, and a census of the interleaving the step exists for.

use loom::sync::{Arc, Mutex};
use loom::thread;

use super::{Broken, Memo, Probe};
use crate::guard::Admission;
use crate::table::loom_tests::{bounded, explore, explore_at, Census};

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

/// What a lookup saw: whether it noted a version ([memo.M3]), whether the store answered absent,
/// the store's state just before its probe, and whether it installed ([memo.M4]).
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

/// The guards' put: [memo.M1], the store write, [memo.M2] with a known outcome.
fn put<T>(memo: &Memo<u64, T>, store: &Store, lands: bool) {
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

/// [memo.M1]-[memo.M4]: a lookup of `K` races a create of `K`. The census asks for both ways the
/// lookup's "absent" must not survive: an install refused because the create began after the
/// note, and an install the create's [memo.M1] then cleared.
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
        "an install the create's [memo.M1] then cleared",
        move |installed| lookup_races_a_create(Broken::default(), false, [r.clone(), installed]),
    );
    refused.assert_seen("an install refused because a create began after the note");
}

#[test]
#[should_panic(expected = "hides a key the store holds")]
fn loom_memo_control_clear_skipped() {
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
fn loom_memo_control_install_unchecked() {
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
fn loom_memo_control_writing_ignored() {
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

/// [memo.M2] for a write of unknown outcome: a put of `K` is dropped during its store write (a
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
fn loom_memo_control_unknown_forgotten() {
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

/// [memo.M1]/[memo.M2] with two puts of `K` in flight: one fails definitely (nothing lands), one
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
fn loom_memo_control_writing_as_flag() {
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

/// A lookup of `key` (not `K`) the filter admitted, for a key the store never holds: the
/// store answers absent, and the lookup installs when [memo.M4] lets it.
fn lookup_of_other(memo: &Arc<Memo<u64>>, key: u64) -> thread::JoinHandle<bool> {
    let memo = Arc::clone(memo);
    thread::spawn(move || {
        let probe = memo.probe(&key, Admission::Pass);
        if let Probe::Hit = probe {
            return false;
        }
        memo.settle(&key, probe, &Ok::<Option<()>, ()>(None))
    })
}

/// Two keys in one slot: a lookup of `J` (never stored) installs and evicts while a lookup of
/// `K` races a create of `K`. `J`'s install and eviction must not let a stale "absent" of
/// `K` survive the create. The census asks for `J` installing in an execution where the
/// lookup of `K` read "absent".
#[test]
fn loom_memo_two_keys_share_a_slot() {
    const J: u64 = 8;
    explore(
        "a lookup of J installed while K's lookup read absent",
        |census| {
            let memo = memo(Broken::default());
            let store = Store::default();
            let reader = lookup(&memo, &store);
            let other = lookup_of_other(&memo, J);
            let creator = {
                let (memo, store) = (Arc::clone(&memo), Arc::clone(&store));
                thread::spawn(move || put(&memo, &store, true))
            };
            let looked = reader.join().unwrap();
            let j_installed = other.join().unwrap();
            creator.join().unwrap();
            if let Some(looked) = looked {
                census.saw(j_installed && looked.read_absent);
            }
            assert_not_hidden(&memo, &store);
        },
    );
}

/// A delete of `K` then a create of `K` (one actor, in that order: the create returned
/// after the delete) race a lookup of `K`. The lookup may install "absent" after the delete;
/// the create's [memo.M1] must clear it. The census asks for that install.
#[test]
fn loom_memo_delete_then_create_race_a_lookup() {
    explore("an install after the delete", |census| {
        let memo = memo(Broken::default());
        let store = Store::new(Mutex::new(Row {
            present: true,
            put_dropped: false,
        }));
        let reader = lookup(&memo, &store);
        let writer = {
            let (memo, store) = (Arc::clone(&memo), Arc::clone(&store));
            thread::spawn(move || {
                // Deletes do not touch the memo.
                store.lock().unwrap().present = false;
                put(&memo, &store, true);
            })
        };
        let looked = reader.join().unwrap();
        writer.join().unwrap();
        if let Some(looked) = looked {
            census.saw(looked.installed);
        }
        assert_not_hidden(&memo, &store);
    });
}

/// [memo.M5]: a row written behind the guard's back (a store write with no [memo.M1]), then a rebuild
/// starts (one actor, in that order), race a lookup of `K`. The census asks for the lookup that
/// noted its version before the clear, read the store before the write and tried to install
/// after the clear: only the version bump refuses it.
fn lookup_races_a_bypassing_write_then_a_rebuild(broken: Broken, census: Census) {
    let memo = memo(broken);
    let store = Store::default();
    let reader = {
        let (memo, store) = (Arc::clone(&memo), Arc::clone(&store));
        thread::spawn(move || {
            let probe = memo.probe(&K, Admission::Pass);
            if let Probe::Hit = probe {
                return None;
            }
            let noted = matches!(probe, Probe::Miss { .. });
            let read_absent = !store.lock().unwrap().present;
            let answer = if read_absent { None } else { Some(()) };
            let installed = memo.settle(&K, probe, &Ok::<_, ()>(answer));
            Some((noted, read_absent, installed))
        })
    };
    let rebuilder = {
        let (memo, store) = (Arc::clone(&memo), Arc::clone(&store));
        thread::spawn(move || {
            store.lock().unwrap().present = true;
            memo.forget_all();
        })
    };
    let looked = reader.join().unwrap();
    rebuilder.join().unwrap();
    if let Some((noted, read_absent, installed)) = looked {
        census.saw(noted && read_absent && !installed);
    }
    assert_not_hidden(&memo, &store);
}

#[test]
fn loom_memo_rebuild_clear_refuses_an_install_noted_before_it() {
    explore(
        "a lookup that noted before the clear, read before the write, refused after the clear",
        |census| lookup_races_a_bypassing_write_then_a_rebuild(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "hides a key the store holds")]
fn loom_memo_control_rebuild_version_kept() {
    loom::model(|| {
        lookup_races_a_bypassing_write_then_a_rebuild(
            Broken {
                rebuild_version_kept: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// `with_memo` after a put of unknown outcome: a client's put of `K` is dropped during its
/// store write, the client resizes the memo (as `with_memo` does, holding the guard alone) and
/// looks `K` up in the new memo, while the database applies the write. Then the database
/// actor, which joined the client and made sure the write landed, asks the new memo: it must
/// not answer "absent". The census asks for the client's lookup reading "absent" (before the
/// write landed).
fn resized_memo_races_a_late_write(broken: Broken, census: Census) {
    let memo = memo(broken);
    let store = Store::default();
    let client = {
        let (memo, store) = (Arc::clone(&memo), Arc::clone(&store));
        thread::spawn(move || {
            let write = memo.begin_write(&K);
            store.lock().unwrap().put_dropped = true;
            drop(write);
            let fresh = Arc::new(memo.resized(1));
            let probe = fresh.probe(&K, Admission::Pass);
            let read_absent = !store.lock().unwrap().present;
            let answer = if read_absent { None } else { Some(()) };
            fresh.settle(&K, probe, &Ok::<_, ()>(answer));
            (fresh, read_absent)
        })
    };
    let database = {
        let store = Arc::clone(&store);
        thread::spawn(move || {
            let land = || {
                let mut row = store.lock().unwrap();
                if row.put_dropped {
                    row.present = true;
                }
                row.present
            };
            let landed = land();
            let (fresh, read_absent) = client.join().unwrap();
            if !landed {
                assert!(land(), "the put sent its write");
            }
            assert_not_hit(&fresh);
            read_absent
        })
    };
    census.saw(database.join().unwrap());
}

#[test]
fn loom_memo_resize_after_an_unknown_put_starts_disabled() {
    explore(
        "a lookup in the new memo before the late write landed",
        |census| resized_memo_races_a_late_write(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "hides a key the store holds")]
fn loom_memo_control_resize_forgets() {
    loom::model(|| {
        resized_memo_races_a_late_write(
            Broken {
                resize_forgets: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// Guard-level models: the real `CacheGuard` over a store whose writes of unknown outcome
// land when a second actor (the database) applies them.
// ---------------------------------------------------------------------------------------

mod guard_level {
    use std::fmt;

    use loom::sync::Mutex;
    use loom::thread;

    use crate::guard::{Admission, CacheGuard, RebuildPolicy, ScanPage, Store, Written};
    use crate::table::loom_tests::Census;
    use crate::{CuckooFilter, Growth};

    const K: u64 = 7;

    /// The database's state for `K`: a write that was sent but not yet applied, and whether
    /// the row exists.
    #[derive(Debug, Default)]
    struct Db {
        pending: bool,
        present: bool,
    }

    /// A store whose every put times out after sending its write: the outcome is unknown, and
    /// the write lands when [`Late::land`] applies it.
    #[derive(Debug, Default)]
    struct Late(Mutex<Db>);

    #[derive(Debug)]
    struct TimedOut;

    impl fmt::Display for TimedOut {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("timed out after sending the write")
        }
    }

    impl std::error::Error for TimedOut {}

    impl Late {
        fn land(&self) -> bool {
            let mut db = self.0.lock().unwrap();
            if db.pending {
                db.present = true;
            }
            db.pending
        }
    }

    impl Store for Late {
        type Key = u64;
        type Value = ();
        type Cursor = u64;
        type Error = TimedOut;

        fn get(&self, _: &u64) -> Result<Option<()>, TimedOut> {
            Ok(self.0.lock().unwrap().present.then_some(()))
        }
        fn put(&self, _: &u64, _: &()) -> Result<Written, TimedOut> {
            self.0.lock().unwrap().pending = true;
            Err(TimedOut)
        }
        fn delete(&self, _: &u64) -> Result<bool, TimedOut> {
            unreachable!("the models delete nothing")
        }
        fn scan_keys(&self, _: Option<&u64>, _: usize) -> Result<ScanPage<u64, u64>, TimedOut> {
            Ok(ScanPage {
                keys: Vec::new(),
                next: None,
            })
        }
        fn write_outcome_unknown(_: &TimedOut) -> bool {
            true
        }
    }

    type Guard = CacheGuard<std::sync::Arc<Late>>;

    fn guard(store: &std::sync::Arc<Late>) -> Guard {
        let filter = CuckooFilter::builder()
            .capacity(3)
            .growth(Growth::Fixed)
            .build()
            .expect("a tiny filter");
        CacheGuard::with_policy(
            filter,
            std::sync::Arc::clone(store),
            RebuildPolicy::manual(),
        )
        .with_memo(1)
        .expect("a new guard")
    }

    /// A client puts `K` (the store times out: unknown outcome, the write may land), resizes
    /// the memo if `resize` (the guard is not shared: `with_memo` accepts) and looks `K` up,
    /// while the database applies the write. Then a second client, which joined the first, makes
    /// sure the write landed and looks `K` up: that lookup began after the row exists and no
    /// delete ran, so it must find it. The census asks for the first lookup reading "absent"
    /// (the write not landed yet). The lookups are `get_admitted(K, Pass)`: the filter passes
    /// `K`, since a put of unknown outcome keeps its copy; the guard stays warming, so the
    /// model needs no warm-up scan.
    fn unknown_put_then_lookups(resize: bool, census: Census) {
        let store = std::sync::Arc::new(Late::default());
        let guard = guard(&store);
        let client = thread::spawn(move || {
            let put = guard.put(&K, &());
            assert!(put.is_err(), "the store times out");
            let guard = if resize {
                guard.with_memo(1).expect("the guard is not shared")
            } else {
                guard
            };
            let first = guard
                .get_admitted(&K, Admission::Pass)
                .expect("reads succeed");
            (guard, first.is_none())
        });
        let database_then_client = {
            let store = std::sync::Arc::clone(&store);
            thread::spawn(move || {
                let landed = store.land();
                let (guard, first_absent) = client.join().unwrap();
                if !landed {
                    assert!(store.land(), "the put sent its write");
                }
                let second = guard
                    .get_admitted(&K, Admission::Pass)
                    .expect("reads succeed");
                assert_eq!(
                    second,
                    Some(()),
                    "the memo hides a key the store holds (a put of unknown outcome landed \
                     before this lookup began)"
                );
                first_absent
            })
        };
        census.saw(database_then_client.join().unwrap());
    }

    /// The put's [memo.M2] disabled `K`'s slot: the first lookup installs nothing, the second reads
    /// the landed row.
    #[test]
    fn loom_memo_unknown_put_then_lookups_keep_the_slot_disabled() {
        crate::table::loom_tests::explore(
            "a first lookup that read absent before the unknown write landed",
            |census| unknown_put_then_lookups(false, census),
        );
    }

    /// `with_memo` on a guard that is not shared, after a put of unknown outcome: the new memo
    /// starts with every slot disabled, so the first lookup installs nothing and the second
    /// reads the landed row.
    #[test]
    fn loom_memo_with_memo_keeps_an_unknown_put_disabled() {
        crate::table::loom_tests::explore(
            "a first lookup that read absent before the unknown write landed",
            |census| unknown_put_then_lookups(true, census),
        );
    }
}

// ---------------------------------------------------------------------------------------
// [memo.C1]-[memo.C4]: coalesced store reads.
// ---------------------------------------------------------------------------------------

type Coalescing = Memo<u64, super::Shared<(), ()>>;

fn coalescing(broken: Broken) -> Arc<Coalescing> {
    let mut memo = Memo::new(1);
    memo.broken = broken;
    Arc::new(memo)
}

/// What a coalescing lookup answered, and whether it joined a flight on the way.
#[derive(Debug, Clone, Copy)]
struct Answered {
    present: bool,
    joined: bool,
}

/// A lookup the filter admitted, as the guards make it with coalescing: [memo.M3] with
/// [memo.C1] or [memo.C2], the store read, [memo.M4] and [memo.C4]. `drop_lead`: a leader whose
/// future is dropped after its store read, before it lands.
fn coalesced_lookup(memo: &Coalescing, store: &Store, drop_lead: bool) -> Answered {
    let mut joined = false;
    let mut abandoned = 0;
    loop {
        let mut probe = memo.probe_with(&K, Admission::Pass, abandoned < 2);
        match &probe {
            Probe::Hit => {
                return Answered {
                    present: false,
                    joined,
                }
            }
            Probe::Join(flight) => match flight.wait() {
                Some(answer) => {
                    return Answered {
                        present: matches!(answer, Ok(Some(()))),
                        joined: true,
                    }
                }
                None => {
                    joined = true;
                    abandoned += 1;
                    continue;
                }
            },
            _ => {}
        }
        let lead = probe.take_lead();
        let present = store.lock().unwrap().present;
        let result: Result<Option<()>, ()> = Ok(present.then_some(()));
        memo.settle(&K, probe, &result);
        if drop_lead {
            drop(lead);
        } else if let Some(lead) = lead {
            assert_eq!(lead.land(result).ok(), Some(present.then_some(())));
        }
        return Answered { present, joined };
    }
}

/// The write a coalescing model races.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Write {
    /// A create through the guard: [memo.M1], the store write, [memo.M2].
    Create,
    /// A delete through the guard of a row that exists.
    Delete,
    /// A row written behind the guard's back, then a rebuild's clear ([memo.M5]).
    BypassThenRebuild,
}

/// The preemption bound of [`follower_races_a_write`]: three actors, and each race it asks for
/// takes two (the leader's read before the write, the follower's join after it).
const WRITE_RACE_BOUND: usize = 3;

/// [memo.C2], [memo.C3]: a lookup of `K` (the leader, in most interleavings) races `write`, and
/// a second lookup notes whether the write (and for `BypassThenRebuild`, the clear) had
/// returned before it began. One that began after must see the write, whichever read it took
/// its answer from. The census asks for a lookup that joined another's read.
fn follower_races_a_write(broken: Broken, write: Write, census: Census) {
    let memo = coalescing(broken);
    let store = Store::default();
    store.lock().unwrap().present = write == Write::Delete;
    let written = Arc::new(Mutex::new(false));
    let leader = {
        let (memo, store) = (Arc::clone(&memo), Arc::clone(&store));
        thread::spawn(move || coalesced_lookup(&memo, &store, false))
    };
    let writer = {
        let (memo, store, written) = (Arc::clone(&memo), Arc::clone(&store), Arc::clone(&written));
        thread::spawn(move || {
            match write {
                Write::Create => put(&memo, &store, true),
                Write::Delete => {
                    let delete = memo.begin_delete(&K);
                    store.lock().unwrap().present = false;
                    delete.end(true);
                }
                Write::BypassThenRebuild => {
                    store.lock().unwrap().present = true;
                    memo.forget_all();
                }
            }
            *written.lock().unwrap() = true;
        })
    };
    let follower = {
        let (memo, store, written) = (Arc::clone(&memo), Arc::clone(&store), Arc::clone(&written));
        thread::spawn(move || {
            let after_write = *written.lock().unwrap();
            let answered = coalesced_lookup(&memo, &store, false);
            if after_write {
                assert_eq!(
                    answered.present,
                    write != Write::Delete,
                    "a coalesced lookup missed a write that returned before it began"
                );
            }
            answered
        })
    };
    let first = leader.join().unwrap();
    writer.join().unwrap();
    let second = follower.join().unwrap();
    census.saw(first.joined || second.joined);
}

#[test]
fn loom_memo_a_coalesced_lookup_never_misses_a_create_that_returned_before_it() {
    explore_at(
        WRITE_RACE_BOUND,
        "a lookup that joined another's store read",
        |census| follower_races_a_write(Broken::default(), Write::Create, census),
    );
}

#[test]
#[should_panic(expected = "missed a write that returned before it began")]
fn loom_memo_control_flight_kept() {
    bounded(WRITE_RACE_BOUND).check(|| {
        follower_races_a_write(
            Broken {
                flight_kept: true,
                ..Broken::default()
            },
            Write::Create,
            Census::default(),
        )
    });
}

#[test]
fn loom_memo_a_coalesced_lookup_never_returns_a_row_deleted_before_it() {
    explore_at(
        WRITE_RACE_BOUND,
        "a lookup that joined another's store read",
        |census| follower_races_a_write(Broken::default(), Write::Delete, census),
    );
}

#[test]
#[should_panic(expected = "missed a write that returned before it began")]
fn loom_memo_control_flight_kept_by_a_delete() {
    bounded(WRITE_RACE_BOUND).check(|| {
        follower_races_a_write(
            Broken {
                flight_kept: true,
                ..Broken::default()
            },
            Write::Delete,
            Census::default(),
        )
    });
}

#[test]
fn loom_memo_a_rebuild_clear_ends_coalescing_on_reads_from_before_it() {
    explore_at(
        WRITE_RACE_BOUND,
        "a lookup that joined another's store read",
        |census| follower_races_a_write(Broken::default(), Write::BypassThenRebuild, census),
    );
}

#[test]
#[should_panic(expected = "missed a write that returned before it began")]
fn loom_memo_control_rebuild_flight_kept() {
    bounded(WRITE_RACE_BOUND).check(|| {
        follower_races_a_write(
            Broken {
                rebuild_flight_kept: true,
                ..Broken::default()
            },
            Write::BypassThenRebuild,
            Census::default(),
        )
    });
}

/// [memo.C4] for a leader dropped before it lands: a lookup that joined its flight must not
/// wait forever; it looks again and reads the store itself. The follower waits as the async
/// guard does (polling, a waker left), and gives up with a panic if the flight is still
/// pending once the leader's thread is done. The census asks for a follower that joined.
fn follower_of_a_dropped_leader(broken: Broken, census: Census) {
    let memo = coalescing(broken);
    let store = Store::default();
    store.lock().unwrap().present = true;
    let leader_done = Arc::new(Mutex::new(false));
    let leader = {
        let (memo, store, done) = (
            Arc::clone(&memo),
            Arc::clone(&store),
            Arc::clone(&leader_done),
        );
        thread::spawn(move || {
            coalesced_lookup(&memo, &store, true);
            *done.lock().unwrap() = true;
        })
    };
    let follower = {
        let (memo, store, done) = (
            Arc::clone(&memo),
            Arc::clone(&store),
            Arc::clone(&leader_done),
        );
        thread::spawn(move || {
            let probe = memo.probe(&K, Admission::Pass);
            let Probe::Join(flight) = probe else {
                // It led, or the leader was done: an ordinary lookup.
                drop(probe);
                return (coalesced_lookup(&memo, &store, false).present, false);
            };
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let mut place = None;
            loop {
                let leader_gone = *done.lock().unwrap();
                match flight.poll_wait(&mut cx, &mut place) {
                    std::task::Poll::Ready(Some(answer)) => return (answer == Ok(Some(())), true),
                    std::task::Poll::Ready(None) => {
                        return (coalesced_lookup(&memo, &store, false).present, true)
                    }
                    std::task::Poll::Pending => {
                        assert!(
                            !leader_gone,
                            "a follower stranded: its leader is gone and the flight never landed"
                        );
                        thread::yield_now();
                    }
                }
            }
        })
    };
    leader.join().unwrap();
    let (present, joined) = follower.join().unwrap();
    assert!(present, "the row is in the store");
    census.saw(joined);
}

#[test]
fn loom_memo_a_dropped_leader_does_not_strand_its_followers() {
    explore("a follower whose leader was dropped", |census| {
        follower_of_a_dropped_leader(Broken::default(), census)
    });
}

#[test]
#[should_panic(expected = "a follower stranded")]
fn loom_memo_control_abandon_silent() {
    loom::model(|| {
        follower_of_a_dropped_leader(
            Broken {
                abandon_silent: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}
