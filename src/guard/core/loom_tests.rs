//! Loom models of the rebuild's hand-off ([guard.R1] to [guard.R3] in the core, [gate.W1] to [gate.W4] in `gate`)
//! and of the seal ([seal.S1] to [seal.I4] in `seal`), the seal's through both guards' drivers.
//!
//! Every actor is a spawned thread; the main thread only sets up, joins and asserts. Each model
//! has a negative control that breaks one step and must fail. The store is a loom mutex over a
//! list of keys; filters hash a `u64` key to itself XOR the filter's hash key, so the keys pick
//! their fingerprints and buckets (the filters here have one bucket: any two keys with one
//! fingerprint collide, under every hash key). Each rebuild's next filter gets the next hash
//! key, as a guard's rebuilds draw fresh keys: a key's fingerprint differs from one
//! generation to the next, and two keys that collide in one collide in all.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::task::{Context, Poll};

use loom::sync::{Arc, Mutex};
use loom::thread;

use super::{Broken, GuardCore};
use crate::guard::{GuardError, RebuildPolicy, RebuildReason, Written};
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use crate::table::loom_tests::{bounded, explore, explore_at, Census};
use crate::{CuckooFilter, Growth};

/// The created (or deleted) key: fingerprint 7.
pub(super) const K: u64 = 0x0000_0001_0000_0007;
/// Another key with `K`'s fingerprint: in a one-bucket filter, `K`'s copies and `J`'s are
/// interchangeable.
pub(super) const J: u64 = 0x0000_0002_0000_0007;

/// Hashes a `u64` key to itself XOR a hash key.
#[derive(Debug, Clone, Copy)]
pub(super) struct Identity {
    key: u64,
    value: u64,
}

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.value ^ self.key
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("the models hash u64 keys only");
    }
    fn write_u64(&mut self, value: u64) {
        self.value = value;
    }
}

/// The hasher of a filter of hash key `.0`: 0 for the first filter, one more per rebuild.
/// Keys below 4 change only a key's fingerprint (7 becomes 6, 5, 4), never its bucket.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Keyed(pub(super) u64);

impl BuildHasher for Keyed {
    type Hasher = Identity;
    fn build_hasher(&self) -> Identity {
        Identity {
            key: self.0,
            value: 0,
        }
    }
}

pub(super) type Core = GuardCore<Keyed>;

/// A warm guard core over a one-bucket filter that may not grow, with `keys` in it; its
/// rebuilds hash with the next hash key.
pub(super) fn core(broken: Broken, keys: &[u64]) -> Arc<Core> {
    let filter = CuckooFilter::builder()
        .hasher(Keyed(0))
        .capacity(3)
        .growth(Growth::Fixed)
        .build()
        .expect("a tiny filter");
    let mut core = GuardCore::new(filter, RebuildPolicy::manual());
    core.broken = broken;
    core.rekey = Some(|hasher| Keyed(hasher.0 + 1));
    for key in keys {
        let ticket = core
            .begin_put::<_, ()>(key)
            .expect("room for the set-up keys");
        core.end_put(ticket, &Ok::<_, ()>(Written::Created), |_| true);
    }
    core.finish_warm_up();
    Arc::new(core)
}

/// A rebuild on its own thread: waits at the gate, scans the whole store as one page, swaps.
pub(super) fn rebuild(core: &Arc<Core>, store: &Arc<Mutex<Vec<u64>>>) -> thread::JoinHandle<()> {
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
    })
}

/// [guard.R1] [guard.R3] [gate.W1]-[gate.W4]: a create of `K` races a rebuild. Whatever the interleaving, once both
/// are done the store holds `K` and the (new) current filter must report it. The census asks
/// for the case the gate exists for: the create loaded the filters before the next one was
/// published, so only the rebuild's scan can put `K` into the new filter.
fn create_during_rebuild(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    let store = Arc::new(Mutex::new(Vec::new()));
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let saw_next = ticket.next.is_some();
            store.lock().unwrap().push(K);
            core.end_put(ticket, &Ok::<_, ()>(Written::Created), |_| true);
            saw_next
        })
    };
    let rebuilder = rebuild(&core, &store);
    let saw_next = creator.join().unwrap();
    rebuilder.join().unwrap();
    census.saw(!saw_next);
    assert_eq!(*store.lock().unwrap(), [K]);
    assert!(
        core.filter().contains(&K),
        "the rebuilt filter misses a key whose create returned"
    );
}

#[test]
fn loom_rebuild_scan_waits_for_creates_that_missed_the_next_filter() {
    explore("a create that missed the next filter", |census| {
        create_during_rebuild(Broken::default(), census)
    });
}

#[test]
#[should_panic(expected = "misses a key whose create returned")]
fn loom_rebuild_control_gate_skipped() {
    loom::model(|| {
        create_during_rebuild(
            Broken {
                gate_skipped: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

#[test]
#[should_panic(expected = "misses a key whose create returned")]
fn loom_rebuild_control_next_skipped() {
    loom::model(|| {
        create_during_rebuild(
            Broken {
                next_skipped: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R1] with new hash keys: a create of `K` races a rebuild whose next filter hashes with
/// another key, so `K` has another fingerprint there. The create inserts `K` into each filter
/// hashed by that filter's hasher; a lookup the creator makes once its create returned, and
/// one after both are done, must find `K` in whichever filter they read. The census asks for
/// the case where only the create's own copy can: it found the next filter and the scan read
/// the store before the write, so the scan did not insert `K`.
fn create_into_a_rekeyed_next(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    let store = Arc::new(Mutex::new(Vec::new()));
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let saw_next = ticket.next.is_some();
            store.lock().unwrap().push(K);
            core.end_put(ticket, &Ok::<_, ()>(Written::Created), |_| true);
            assert!(
                core.filter_contains(&K),
                "a lookup misses a key whose create returned"
            );
            saw_next
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
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
    };
    let saw_next = creator.join().unwrap();
    let scanned = rebuilder.join().unwrap();
    census.saw(saw_next && !scanned);
    assert_eq!(
        core.filter().hasher().0,
        1,
        "the rebuild hashes with a new key"
    );
    assert!(
        core.filter().contains(&K),
        "the rebuilt filter misses a key whose create returned"
    );
}

#[test]
fn loom_rebuild_a_create_hashes_into_a_rekeyed_next_filter_by_its_keys() {
    explore(
        "a create whose copy in the next filter is the only one",
        |census| create_into_a_rekeyed_next(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "misses a key whose create returned")]
fn loom_rebuild_control_next_hashed_by_current() {
    loom::model(|| {
        create_into_a_rekeyed_next(
            Broken {
                next_hashed_by_current: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R1] [guard.R3]: a create of `K` whose future is dropped during its store write (its ticket
/// dropped, never ended) races a rebuild; the write lands after the drop. The dropped ticket
/// records its orphan before it leaves the gate, so the rebuild's orphan drain finds it or the
/// create found the next filter. The census asks for a create that missed the next filter and
/// a scan that missed the write: only the orphan covers `K`.
fn dropped_put_racing_a_rebuild(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    let store = Arc::new(Mutex::new(Vec::new()));
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let saw_next = ticket.next.is_some();
            drop(ticket);
            store.lock().unwrap().push(K);
            saw_next
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
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
    };
    let saw_next = creator.join().unwrap();
    let scanned = rebuilder.join().unwrap();
    census.saw(!saw_next && !scanned);
    assert_eq!(core.stats().orphaned_writes, 1);
    assert!(
        core.filter().contains(&K),
        "the rebuilt filter misses a dropped put's key"
    );
}

#[test]
fn loom_rebuild_a_dropped_put_records_its_orphan_before_it_leaves_the_gate() {
    explore("a dropped put that only its orphan covers", |census| {
        dropped_put_racing_a_rebuild(Broken::default(), census)
    });
}

#[test]
#[should_panic(expected = "misses a dropped put's key")]
fn loom_rebuild_control_orphan_after_leave() {
    loom::model(|| {
        dropped_put_racing_a_rebuild(
            Broken {
                orphan_after_leave: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R1] [guard.R3] with new hash keys: a create of `K` whose write's outcome is unknown (an orphan)
/// lands in the store only after a rebuild's scan read it; the rebuild hashes with a new key.
/// The orphan, kept as the key, must be inserted into the next filter under its hasher. The
/// census asks for the write landing after the scan.
fn orphan_across_a_rekeyed_rebuild(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    let store = Arc::new(Mutex::new(Vec::new()));
    {
        let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
        core.end_put(ticket, &Err::<Written, ()>(()), |_| true);
    }
    let writer = {
        let store = Arc::clone(&store);
        thread::spawn(move || store.lock().unwrap().push(K))
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
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
    };
    writer.join().unwrap();
    let scanned = rebuilder.join().unwrap();
    census.saw(!scanned);
    assert_eq!(
        core.filter().hasher().0,
        1,
        "the rebuild hashes with a new key"
    );
    assert!(
        core.filter().contains(&K),
        "the rebuilt filter misses an orphaned write's key"
    );
}

#[test]
fn loom_rebuild_an_orphan_is_reinserted_under_the_new_keys() {
    explore("an orphaned write landing after the scan", |census| {
        orphan_across_a_rekeyed_rebuild(Broken::default(), census)
    });
}

#[test]
#[should_panic(expected = "misses an orphaned write's key")]
fn loom_rebuild_control_orphans_skipped() {
    loom::model(|| {
        orphan_across_a_rekeyed_rebuild(
            Broken {
                orphans_skipped: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R3] with a stopped rebuild: a create of `K` races a rebuild that stops right after it
/// flipped the gate (before its wait), and then a second rebuild that runs to the end. A create
/// counted before the first flip and loading the filters after the first rebuild withdrew its
/// next filter is in neither the second rebuild's phase nor its next filter: only the drain of
/// the first rebuild's phase, before the second flips, keeps the scan from starting early. The
/// census asks for a create that missed both next filters.
fn create_across_a_stopped_rebuild(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    let store = Arc::new(Mutex::new(Vec::new()));
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let saw_next = ticket.next.is_some();
            store.lock().unwrap().push(K);
            core.end_put(ticket, &Ok::<_, ()>(Written::Created), |_| true);
            saw_next
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let claim = core.claim().expect("the only rebuild");
            let stopped = core.begin_rebuild::<()>(claim, RebuildReason::Requested);
            drop(stopped.expect("a warm core builds its next filter"));
            let claim = core.claim().expect("the first rebuild let go of its claim");
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
        })
    };
    let saw_next = creator.join().unwrap();
    rebuilder.join().unwrap();
    census.saw(!saw_next);
    assert_eq!(core.stats().rebuilds_failed, 1);
    assert!(
        core.filter().contains(&K),
        "the rebuilt filter misses a key whose create returned"
    );
}

#[test]
fn loom_rebuild_after_a_stopped_one_drains_its_phase_first() {
    explore("a create that missed both next filters", |census| {
        create_across_a_stopped_rebuild(Broken::default(), census)
    });
}

#[test]
#[should_panic(expected = "misses a key whose create returned")]
fn loom_rebuild_control_leftover_ignored() {
    loom::model(|| {
        create_across_a_stopped_rebuild(
            Broken {
                leftover_ignored: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R2]: `J` and `K` are both in the store and the filter; a delete of `K` races a rebuild. If
/// the store delete lands before the scan reads the store, the next filter holds only `J`'s
/// copy, and a delete that removed "`K`'s" copy from it would take `J`'s. The census asks for a
/// delete that left a copy stale because a rebuild was under way.
fn delete_during_rebuild(broken: Broken, census: Census) {
    let core = core(broken, &[J, K]);
    let store = Arc::new(Mutex::new(vec![J, K]));
    let deleter = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_delete();
            store.lock().unwrap().retain(|&key| key != K);
            core.end_delete(&K, ticket, &Ok::<_, ()>(true));
        })
    };
    let rebuilder = rebuild(&core, &store);
    deleter.join().unwrap();
    rebuilder.join().unwrap();
    census.saw(core.stats().stale_copies > 0);
    assert_eq!(*store.lock().unwrap(), [J]);
    assert!(
        core.filter().contains(&J),
        "a delete during the rebuild took a copy of another key"
    );
}

#[test]
fn loom_rebuild_delete_leaves_the_unscanned_next_filter_alone() {
    explore(
        "a delete that left a stale copy in a rebuild's filter",
        |census| delete_during_rebuild(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "took a copy of another key")]
fn loom_rebuild_control_delete_from_every_filter() {
    loom::model(|| {
        delete_during_rebuild(
            Broken {
                delete_from_every_filter: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [gate.W1] [gate.W3] across two rebuilds: a create of `K` races two rebuilds that both run to the end.
/// The second rebuild waits only on the phase the first flipped to. A create whose second
/// phase read returned the first rebuild's old phase after that phase was drained would be
/// waited for by nobody; the fence after each flip rules that out (either the rebuild's counter
/// reads see the create, or the create's phase read sees the flip). The census asks for a create
/// that touched only the first rebuild's filter.
fn create_across_two_rebuilds(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    let store = Arc::new(Mutex::new(Vec::new()));
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let newest = ticket.next.unwrap_or(ticket.current).0;
            store.lock().unwrap().push(K);
            core.end_put(ticket, &Ok::<_, ()>(Written::Created), |_| true);
            newest
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            for _ in 0..2 {
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
            }
        })
    };
    let newest = creator.join().unwrap();
    rebuilder.join().unwrap();
    census.saw(newest == 1);
    assert_eq!(core.stats().rebuilds, 2);
    assert_eq!(
        core.filter().hasher().0,
        2,
        "each rebuild hashes with a new key"
    );
    assert!(
        core.filter().contains(&K),
        "the rebuilt filter misses a key whose create returned"
    );
}

#[test]
fn loom_rebuild_two_in_a_row_wait_for_every_create() {
    explore(
        "a create that touched only the first rebuild's filter",
        |census| create_across_two_rebuilds(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "misses a key whose create returned")]
fn loom_rebuild_control_flip_unfenced() {
    loom::model(|| {
        create_across_two_rebuilds(
            Broken {
                flip_unfenced: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// How a model's sealer drives the seal: as the sync guard does ([`super::seal_blocking`]) or
/// as the async guard does ([`super::seal_async`], its future polled on the sealer's thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Driver {
    Sync,
    Async,
}

/// Wakes nothing: [`block_on`] polls again after each yield.
struct NoWake;

impl std::task::Wake for NoWake {
    fn wake(self: std::sync::Arc<Self>) {}
}

fn no_waker() -> std::task::Waker {
    std::task::Waker::from(std::sync::Arc::new(NoWake))
}

/// Polls `future` on the calling thread until it is ready, yielding to loom between polls.
fn block_on<F: Future>(future: F) -> F::Output {
    let waker = no_waker();
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::yield_now();
    }
}

/// The async guard's pause between polls of the seal: pending once, as a timer is.
fn pause() -> impl Future<Output = ()> {
    let mut waited = false;
    std::future::poll_fn(move |cx| {
        if waited {
            Poll::Ready(())
        } else {
            waited = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
}

/// Seals `core` as `driver` does: `write_seal` is the store's seal write, `snapshot` the file
/// write (it reads the filter it is handed).
pub(super) fn seal<T>(
    core: &Core,
    driver: Driver,
    write_seal: impl Fn(),
    snapshot: impl FnOnce(&CuckooFilter<Keyed>) -> T,
) -> T {
    try_seal(core, driver, write_seal, snapshot).expect("the model's filter is not at its ceiling")
}

/// [`seal`], or `None` if the seal wrote no file: the filter was marked at its memory ceiling
/// ([seal.I5]).
pub(super) fn try_seal<T>(
    core: &Core,
    driver: Driver,
    write_seal: impl Fn(),
    snapshot: impl FnOnce(&CuckooFilter<Keyed>) -> T,
) -> Option<T> {
    let turn = match core.begin_seal::<()>() {
        Ok(turn) => turn,
        Err(GuardError::AtCeiling) => return None,
        Err(error) => panic!("a warm core seals: {error:?}"),
    };
    let write_seal = &write_seal;
    match driver {
        Driver::Sync => super::seal_blocking(
            turn,
            || {
                write_seal();
                Ok::<(), ()>(())
            },
            |file| file.write(snapshot),
        ),
        Driver::Async => block_on(super::seal_async(
            turn,
            || async move {
                write_seal();
                Ok::<(), ()>(())
            },
            pause,
            |file| async move { file.write(snapshot) },
        )),
    }
    .expect("the model's seal write cannot fail")
}

/// Starts the async guard's seal of `core` and drops its future after one poll; whether it
/// was still waiting then (stopped in its drain, [seal.I3]).
fn stop_a_seal(core: &Core) -> bool {
    let turn = core.begin_seal::<()>().expect("a warm core seals");
    let future = super::seal_async(
        turn,
        || async { Ok::<(), ()>(()) },
        pause,
        |file| async move { file.write(|_| ()) },
    );
    let waker = no_waker();
    let mut cx = Context::from_waker(&waker);
    let mut future = Box::pin(future);
    future.as_mut().poll(&mut cx).is_pending()
}

/// How the model's store clears the seal when it writes a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Clearing {
    /// In the write's critical section (a transaction, a script, one lock).
    Atomic,
    /// As PostgreSQL's `WITH unseal AS (DELETE ...)` under READ COMMITTED: the statement's
    /// snapshot, taken before the commit, decides whether there is a seal row to delete (a
    /// row updated since is deleted in its new version). A seal written in between survives
    /// a put that commits after it.
    StatementSnapshot,
    /// Never: the broken store of a negative control.
    Never,
}

/// The seal ([`restart`](crate::guard::restart)): a create of `K` races a seal. The store is a
/// loom mutex over its keys and its seal, cleared by a put as `clearing` says. The snapshot is
/// the filter as the seal reads it (the copy itself has its own models in `table::copy`).
/// Once both are done, a store that still holds the seal must hold no key the snapshot lacks:
/// that is what a restart trusts. The census asks for the case the seal exists for: the seal
/// survived and the store holds `K`.
fn create_during_seal(broken: Broken, clearing: Clearing, driver: Driver, census: Census) {
    let core = core(broken, &[]);
    let store = Arc::new(Mutex::new((Vec::new(), None::<u64>)));
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let clears = match clearing {
                Clearing::Atomic => true,
                Clearing::StatementSnapshot => store.lock().unwrap().1.is_some(),
                Clearing::Never => false,
            };
            {
                let mut store = store.lock().unwrap();
                store.0.push(K);
                if clears {
                    store.1 = None;
                }
            }
            core.end_put(ticket, &Ok::<_, ()>(Written::Created), |_| true);
        })
    };
    let sealer = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            seal(
                &core,
                driver,
                || store.lock().unwrap().1 = Some(1),
                |filter| filter.contains(&K),
            )
        })
    };
    creator.join().unwrap();
    let snapshot_has_k = sealer.join().unwrap();
    let (keys, seal) = store.lock().unwrap().clone();
    if seal == Some(1) {
        census.saw(keys.contains(&K));
        assert!(
            snapshot_has_k || !keys.contains(&K),
            "false negative: the store's seal names a snapshot that misses one of its keys"
        );
    }
}

#[test]
fn loom_seal_a_surviving_seal_names_a_snapshot_with_every_key() {
    explore("a seal that survived a create of a stored key", |census| {
        create_during_seal(Broken::default(), Clearing::Atomic, Driver::Sync, census)
    });
}

#[test]
fn loom_seal_async_a_surviving_seal_names_a_snapshot_with_every_key() {
    explore("a seal that survived a create of a stored key", |census| {
        create_during_seal(Broken::default(), Clearing::Atomic, Driver::Async, census)
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_seal_control_seal_after_snapshot() {
    loom::model(|| {
        create_during_seal(
            Broken {
                seal_after_snapshot: true,
                ..Broken::default()
            },
            Clearing::Atomic,
            Driver::Sync,
            Census::default(),
        )
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_seal_control_seal_after_snapshot_async() {
    loom::model(|| {
        create_during_seal(
            Broken {
                seal_after_snapshot: true,
                ..Broken::default()
            },
            Clearing::Atomic,
            Driver::Async,
            Census::default(),
        )
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_seal_control_seal_async_overlaps_the_seal_write() {
    loom::model(|| {
        create_during_seal(
            Broken {
                seal_async_overlaps_the_seal_write: true,
                ..Broken::default()
            },
            Clearing::Atomic,
            Driver::Async,
            Census::default(),
        )
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_seal_control_a_put_that_leaves_the_seal() {
    loom::model(|| {
        create_during_seal(
            Broken::default(),
            Clearing::Never,
            Driver::Sync,
            Census::default(),
        )
    });
}

/// The seal over a store whose clearing orders against the seal write only on the server: as
/// [`create_during_seal`] with [`Clearing::StatementSnapshot`], but the seal is a Relaxed
/// atomic beside the keys, a register whose writes and reads are ordered in the store (one
/// modification order) and carry no happens-before edge to the guard's threads. A write's
/// statement may read the seal as it stood before a seal write that already returned to the
/// sealer, and then keeps it. Only the seal's wait at the gate makes such a create's filter
/// insert visible to the snapshot; a create that enters the gate after the wait's flip reads
/// the seal through the flip and clears it. The census asks for that case: the seal survived a create
/// of a stored key whose statement read no seal after the seal write had returned (its
/// clearing missed a seal already written).
fn create_during_server_ordered_seal(broken: Broken, driver: Driver, census: Census) {
    let core = core(broken, &[]);
    let keys = Arc::new(Mutex::new(Vec::new()));
    // 0: no seal; 1: the seal.
    let seal_row = Arc::new(AtomicU64::new(0));
    // Set once the seal write returned (census only).
    let sealed = Arc::new(AtomicBool::new(false));
    let creator = {
        let (core, keys) = (Arc::clone(&core), Arc::clone(&keys));
        let seal_row = Arc::clone(&seal_row);
        let sealed = Arc::clone(&sealed);
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            // ORDERING: Relaxed; census only, orders nothing.
            let after_the_seal = sealed.load(Ordering::Relaxed);
            // ORDERING: Relaxed; the statement's snapshot of the seal, ordered against the
            // seal write only in the store's modification order.
            let seen = seal_row.load(Ordering::Relaxed);
            keys.lock().unwrap().push(K);
            if seen != 0 {
                // ORDERING: Relaxed; the statement's delete of the seal row, as above.
                seal_row.store(0, Ordering::Relaxed);
            }
            core.end_put(ticket, &Ok::<_, ()>(Written::Created), |_| true);
            seen == 0 && after_the_seal
        })
    };
    let sealer = {
        let (core, seal_row) = (Arc::clone(&core), Arc::clone(&seal_row));
        thread::spawn(move || {
            seal(
                &core,
                driver,
                || {
                    // ORDERING: Relaxed; the seal write, ordered on the server only.
                    seal_row.store(1, Ordering::Relaxed);
                    // ORDERING: Relaxed; census only, orders nothing.
                    sealed.store(true, Ordering::Relaxed);
                },
                |filter| filter.contains(&K),
            )
        })
    };
    let missed_a_written_seal = creator.join().unwrap();
    let snapshot_has_k = sealer.join().unwrap();
    let keys = keys.lock().unwrap().clone();
    // ORDERING: Relaxed; read after both threads are joined.
    if seal_row.load(Ordering::Relaxed) == 1 {
        census.saw(keys.contains(&K) && missed_a_written_seal);
        assert!(
            snapshot_has_k || !keys.contains(&K),
            "false negative: the store's seal names a snapshot that misses one of its keys"
        );
    }
}

#[test]
fn loom_seal_server_ordered_clearing_waits_for_in_flight_creates() {
    explore(
        "a seal that survived a create whose statement missed it",
        |census| create_during_server_ordered_seal(Broken::default(), Driver::Sync, census),
    );
}

#[test]
fn loom_seal_async_server_ordered_clearing_waits_for_in_flight_creates() {
    explore(
        "a seal that survived a create whose statement missed it",
        |census| create_during_server_ordered_seal(Broken::default(), Driver::Async, census),
    );
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_seal_control_seal_skips_wait() {
    loom::model(|| {
        create_during_server_ordered_seal(
            Broken {
                seal_skips_wait: true,
                ..Broken::default()
            },
            Driver::Sync,
            Census::default(),
        )
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_seal_control_seal_skips_wait_async() {
    loom::model(|| {
        create_during_server_ordered_seal(
            Broken {
                seal_skips_wait: true,
                ..Broken::default()
            },
            Driver::Async,
            Census::default(),
        )
    });
}

#[test]
fn loom_seal_read_committed_clearing_keeps_the_snapshot_whole() {
    explore("a seal that survived a put landing after it", |census| {
        create_during_seal(
            Broken::default(),
            Clearing::StatementSnapshot,
            Driver::Sync,
            census,
        )
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_seal_control_seal_after_snapshot_read_committed() {
    loom::model(|| {
        create_during_seal(
            Broken {
                seal_after_snapshot: true,
                ..Broken::default()
            },
            Clearing::StatementSnapshot,
            Driver::Sync,
            Census::default(),
        )
    });
}

/// The gate across a stopped rebuild and a stopped seal: a create of `K` races a rebuild
/// that stops right after its flip (leaving its phase undrained), then an async seal whose
/// future is polled once and dropped (its drain's first flip goes back to the undrained
/// phase), then a rebuild that runs to the end. The last scan must not start while a create
/// that missed its next filter is in flight. Only the async guard's seal can stop in its
/// drain (the sync one returns once its file is written). The census asks for a create that
/// missed both next filters and a seal stopped in its drain.
fn create_across_a_stopped_rebuild_and_a_stopped_seal(broken: Broken, census: Census) {
    let core = core(broken, &[]);
    let store = Arc::new(Mutex::new(Vec::new()));
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let saw_next = ticket.next.is_some();
            store.lock().unwrap().push(K);
            core.end_put(ticket, &Ok::<_, ()>(Written::Created), |_| true);
            saw_next
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let claim = core.claim().expect("the only rebuild");
            let stopped = core.begin_rebuild::<()>(claim, RebuildReason::Requested);
            drop(stopped.expect("a warm core builds its next filter"));
            // The async guard's seal, its future polled once and dropped.
            let stopped = stop_a_seal(&core);
            let claim = core.claim().expect("the seal let go");
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
            stopped
        })
    };
    let saw_next = creator.join().unwrap();
    let stopped = rebuilder.join().unwrap();
    census.saw(!saw_next && stopped);
    assert!(
        core.filter().contains(&K),
        "the rebuilt filter misses a key whose create returned"
    );
}

#[test]
fn loom_seal_a_stopped_drain_leaves_its_phase_to_the_next_rebuild() {
    explore(
        "a create that missed both next filters, a seal stopped in its drain",
        |census| create_across_a_stopped_rebuild_and_a_stopped_seal(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "misses a key whose create returned")]
fn loom_seal_control_seal_drain_forgets() {
    loom::model(|| {
        create_across_a_stopped_rebuild_and_a_stopped_seal(
            Broken {
                seal_drain_forgets: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// A key whose fingerprint under the first filter's hash key is `K`'s under the second's, and
/// the other way round (6 and 7 swap when the key is 1): a copy removed from one generation
/// by the hash another generation's hasher gave takes the other key's copy.
pub(super) const L: u64 = 0x0000_0001_0000_0006;

/// [guard.R1] with new hash keys: an update of `K` (the row is there) races a rebuild whose next
/// filter hashes with another key; `L` is in the store too. The update inserts a copy into
/// each filter it finds and, once the store says "updated", removes each copy from its own
/// generation by the hash it inserted there. Once both are done, and already when the updater
/// looks after its update, `K` and `L` must be reported. The census asks for the case where a
/// copy removed by the wrong generation's hash would take `L`'s: the update found the next
/// filter and the scan had filled it before the update's store write.
fn update_across_a_rekeyed_rebuild(broken: Broken, census: Census) {
    let core = core(broken, &[K, L]);
    // The rows, and whether the rebuild's scan has read them.
    let store = Arc::new(Mutex::new((vec![K, L], false)));
    let updater = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let saw_next = ticket.next.is_some();
            // The store's write of an existing row: it notes whether the scan read already.
            let scanned_before = store.lock().unwrap().1;
            core.end_put(ticket, &Ok::<_, ()>(Written::Updated), |_| true);
            assert!(
                core.filter_contains(&K) && core.filter_contains(&L),
                "an update took a copy of another key"
            );
            saw_next && scanned_before
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let claim = core.claim().expect("the only rebuild");
            let mut turn = core
                .begin_rebuild::<()>(claim, RebuildReason::Requested)
                .expect("a warm core builds its next filter");
            while !turn.poll_gate::<()>().expect("room for the orphans") {
                thread::yield_now();
            }
            let keys = {
                let mut store = store.lock().unwrap();
                store.1 = true;
                store.0.clone()
            };
            turn.load_page::<_, ()>(&keys)
                .expect("room for the scanned keys");
            turn.finish();
        })
    };
    let reached = updater.join().unwrap();
    rebuilder.join().unwrap();
    census.saw(reached);
    assert_eq!(
        core.filter().hasher().0,
        1,
        "the rebuild hashes with a new key"
    );
    // The control removes by a hash that may find no copy; what it must be caught at is the
    // other key's copy.
    if !broken.own_copies_hashed_by_current {
        assert_eq!(
            core.stats().missing_copies,
            0,
            "an update missed its own copy"
        );
    }
    assert!(
        core.filter().contains(&K) && core.filter().contains(&L),
        "an update took a copy of another key"
    );
}

#[test]
fn loom_rebuild_an_update_removes_each_copy_by_its_generations_hash() {
    // At most 2 preemptions, as its control: 2 reach the census, and 3 is CI's slowest model.
    explore_at(
        2,
        "an update that found the next filter after the scan filled it",
        |census| update_across_a_rekeyed_rebuild(Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "an update took a copy of another key")]
fn loom_rebuild_control_own_copies_hashed_by_current() {
    bounded(2).check(|| {
        update_across_a_rekeyed_rebuild(
            Broken {
                own_copies_hashed_by_current: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// [guard.R1] [guard.R3] with new hash keys: a create of `K` whose write's outcome is unknown races a
/// rebuild whose next filter hashes with another key; the write lands after the create
/// returned (and may land after the scan). The orphan is recorded before the create leaves
/// the gate, so either the rebuild's orphan drain finds it or the create found the next
/// filter. `early` asks for a create that missed the next filter and a scan that missed the
/// write (only the orphan's insert, under the next filter's hasher, covers `K`); `late` for an
/// orphan recorded after the drain (the final filter holds one copy: the create's own).
fn orphan_racing_a_rekeyed_rebuild(broken: Broken, early: Census, late: Census) {
    let core = core(broken, &[]);
    let store = Arc::new(Mutex::new(Vec::new()));
    let creator = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
        thread::spawn(move || {
            let ticket = core.begin_put::<_, ()>(&K).expect("room for K");
            let saw_next = ticket.next.is_some();
            core.end_put(ticket, &Err::<Written, ()>(()), |_| true);
            store.lock().unwrap().push(K);
            assert!(
                core.filter_contains(&K),
                "a lookup misses an orphaned write's key"
            );
            saw_next
        })
    };
    let rebuilder = {
        let (core, store) = (Arc::clone(&core), Arc::clone(&store));
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
    };
    let saw_next = creator.join().unwrap();
    let scanned = rebuilder.join().unwrap();
    early.saw(!saw_next && !scanned);
    late.saw(saw_next && !scanned && core.filter().count(&K) == 1);
    assert_eq!(
        core.filter().hasher().0,
        1,
        "the rebuild hashes with a new key"
    );
    assert!(
        core.filter().contains(&K),
        "the rebuilt filter misses an orphaned write's key"
    );
}

#[test]
fn loom_rebuild_an_orphan_racing_the_drain_is_covered_under_the_new_keys() {
    let (early, late) = (Census::default(), Census::default());
    let (e, l) = (early.clone(), late.clone());
    loom::model(move || orphan_racing_a_rekeyed_rebuild(Broken::default(), e.clone(), l.clone()));
    early.assert_seen("an orphan that only the drain's insert covers");
    late.assert_seen("an orphan recorded after the drain");
}

#[test]
#[should_panic(expected = "misses an orphaned write's key")]
fn loom_rebuild_control_orphans_hashed_by_current() {
    loom::model(|| {
        orphan_racing_a_rekeyed_rebuild(
            Broken {
                orphans_hashed_by_current: true,
                ..Broken::default()
            },
            Census::default(),
            Census::default(),
        )
    });
}
