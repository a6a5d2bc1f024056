//! Loom models of the table protocol
//! (`RUSTFLAGS="--cfg cuckoo_loom" cargo test --release --lib loom`).
//!
//! Every actor is a spawned loom thread; the main thread only sets up, joins and asserts
//! (loom can skip interleavings of an actor that runs on the main thread). Each model has a
//! negative control: the same race run with a test-only broken variant of the step under test,
//! which loom must catch (`#[should_panic]`). If a control ever passes, loom stopped exploring
//! the race and the matching model proves nothing. Census checks assert that the interleaving
//! the protocol exists for (a reader retrying, a hop refused) was reached at least once.
//!
//! A reader that exhausts its attempts answers "present", which no assertion can fault, and
//! loom does reach that fallback (a reader may keep reading a stale odd version, as one whose
//! writer was preempted mid-take would). So every model with a correct reader also asserts,
//! by census, that some execution had the reader race the writer (a failed validation) and
//! still answer from a validated read ([`raced_and_validated`]): the check it makes was made
//! where it matters, not only on the fallback.
//!
//! Tables are tiny (2 to 4 buckets, one or two buckets per stripe), so every step is a race.

use std::sync::Mutex;

use loom::sync::Arc;
use loom::thread;

use super::path::Hop;
use super::stripe::Broken;
use super::*;
use crate::fingerprint::{alternate_index, Fp16};

type Table = RawTable<Fp16>;

/// Runs `f` on a spawned loom thread with a shared table.
pub(crate) fn spawn<L: Layout, T: Send + 'static>(
    table: &Arc<RawTable<L>>,
    f: impl FnOnce(&RawTable<L>) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let table = Arc::clone(table);
    thread::spawn(move || f(&table))
}

/// The `n`-th fingerprint (from 1) whose alternate of bucket `from` is `to`, in a table of
/// `buckets` buckets.
pub(crate) fn fp_linking(from: usize, to: usize, buckets: usize, n: usize) -> u64 {
    (1..=0xFFFFu64)
        .filter(|&fp| alternate_index(from as u64, fp, buckets as u64) == to as u64)
        .nth(n - 1)
        .expect("enough fingerprints link the two buckets")
}

/// A table of `buckets` buckets and `stripes` stripes with `broken` in its stripe protocol.
fn table(buckets: usize, stripes: usize, max_path_len: usize, broken: Broken) -> Arc<Table> {
    layout_table(buckets, stripes, max_path_len, broken)
}

/// [`table`] of layout `L`.
pub(crate) fn layout_table<L: Layout>(
    buckets: usize,
    stripes: usize,
    max_path_len: usize,
    broken: Broken,
) -> Arc<RawTable<L>> {
    let mut t = RawTable::<L>::with_stripes(buckets, stripes, max_path_len).unwrap();
    t.broken = broken;
    Arc::new(t)
}

/// A table of two buckets, one stripe each.
fn two_buckets(broken: Broken) -> Arc<Table> {
    table(2, 2, 2, broken)
}

/// What the census of every reader model must see ([`raced_and_validated`]).
const RACED: &str = "a reader that raced the writer and answered from a validated read";

/// Whether this execution's reads of `t` raced a writer (some validation failed) and every
/// one of them still answered from a validated read, not from the fallback.
fn raced_and_validated(t: &Table) -> bool {
    t.counters().read_retries() > 0 && t.counters().read_fallbacks() == 0
}

/// Whether a writer holds stripe `index` of `t`, loaded by a thread about to call a writer
/// that takes that stripe: if the only other writer holds it, the two writers' critical
/// sections met and the stripe lock [stripe.W1] [stripe.W2] is what ordered them.
fn other_writer_holds(t: &Table, index: usize) -> bool {
    // ORDERING: Relaxed; a census probe of the lock bit, orders nothing.
    stripe::is_locked(t.stripes[index].load(Ordering::Relaxed))
}

/// Records whether any execution of a model reached a state (a census, loom's litmus style).
#[derive(Clone, Default)]
pub(crate) struct Census(std::sync::Arc<Mutex<bool>>);

/// Runs `model` under loom with a fresh census, then asserts the census saw `what`.
pub(crate) fn explore(what: &str, model: impl Fn(Census) + Send + Sync + 'static) {
    let census = Census::default();
    let c = census.clone();
    loom::model(move || model(c.clone()));
    census.assert_seen(what);
}

/// A loom builder at `LOOM_MAX_PREEMPTIONS` (as `loom::model` reads it), capped at `bound`
/// unless `CG_LOOM_FULL=1` asks for every model at `LOOM_MAX_PREEMPTIONS` (for a change to a
/// capped model's protocol: hours, not CI's minutes).
pub(crate) fn bounded(bound: usize) -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    if std::env::var("CG_LOOM_FULL").as_deref() != Ok("1") {
        builder.preemption_bound = Some(builder.preemption_bound.map_or(bound, |b| b.min(bound)));
    }
    builder
}

/// Runs `model` under [`bounded`]`(bound)` with a fresh census, then asserts the census saw
/// `what`.
pub(crate) fn explore_at(bound: usize, what: &str, model: impl Fn(Census) + Send + Sync + 'static) {
    explore_with(bounded(bound), what, model);
}

/// Runs `model` under `builder` with a fresh census, then asserts the census saw `what`.
pub(crate) fn explore_with(
    builder: loom::model::Builder,
    what: &str,
    model: impl Fn(Census) + Send + Sync + 'static,
) {
    let census = Census::default();
    let c = census.clone();
    builder.check(move || model(c.clone()));
    census.assert_seen(what);
}

impl Census {
    pub(crate) fn saw(&self, reached: bool) {
        if reached {
            *self.0.lock().unwrap() = true;
        }
    }
    pub(crate) fn assert_seen(&self, what: &str) {
        assert!(*self.0.lock().unwrap(), "loom never explored: {what}");
    }
}

// ---------------------------------------------------------------------------------------
// [stripe.R1]-[stripe.R3] against [stripe.W3]: a reader racing a displacement between its two buckets.
// ---------------------------------------------------------------------------------------

/// The reader probes bucket 0 then bucket 1; the hop moves the fingerprint from bucket 1 to
/// bucket 0, so a reader without validation can load bucket 0 before the copy and bucket 1
/// after the clear.
fn reader_races_displacement(broken: Broken, census: Census) {
    let t = two_buckets(broken);
    let fp = fp_linking(1, 0, 2, 1);
    t.set_slot(1, 0, fp);
    let probe = t.probe_at(0, fp);
    assert_eq!((probe.primary, probe.alternate), (0, 1));
    let hop = Hop {
        from: 1,
        slot: 0,
        fp,
        to: 0,
    };
    let moving = spawn(&t, move |t| t.displace(hop));
    let reading = spawn(&t, move |t| t.contains(probe));
    assert!(
        moving.join().unwrap(),
        "the hop had a free slot and nothing else moved"
    );
    assert!(
        reading.join().unwrap(),
        "false negative: the reader missed a moving fingerprint"
    );
    census.saw(raced_and_validated(&t));
}

#[test]
fn loom_stripe_lookup_survives_displacement() {
    explore(RACED, |c| reader_races_displacement(Broken::default(), c));
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_lookup_unvalidated() {
    loom::model(|| {
        reader_races_displacement(
            Broken {
                lookup_unvalidated: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_lookup_unfenced() {
    loom::model(|| {
        reader_races_displacement(
            Broken {
                lookup_unfenced: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_version_load_relaxed() {
    loom::model(|| {
        reader_races_displacement(
            Broken {
                version_load_relaxed: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_odd_version_ignored() {
    loom::model(|| {
        reader_races_displacement(
            Broken {
                odd_version_ignored: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_hop_unfenced() {
    loom::model(|| {
        reader_races_displacement(
            Broken {
                hop_unfenced: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// The fingerprint moves 1 -> 0 and back 0 -> 1 while the reader reads: the bucket contents
/// return to what they were (an ABA), but the version has moved on by two hops.
#[test]
fn loom_stripe_lookup_survives_a_move_and_its_return() {
    explore(RACED, |census| {
        let t = two_buckets(Broken::default());
        let fp = fp_linking(1, 0, 2, 1);
        t.set_slot(1, 0, fp);
        let probe = t.probe_at(0, fp);
        let mover = spawn(&t, move |t| {
            assert!(t.displace(Hop {
                from: 1,
                slot: 0,
                fp,
                to: 0
            }));
            assert!(t.displace(Hop {
                from: 0,
                slot: 0,
                fp,
                to: 1
            }));
        });
        let reader = spawn(&t, move |t| t.contains(probe));
        mover.join().unwrap();
        assert!(
            reader.join().unwrap(),
            "false negative across a move and its return"
        );
        census.saw(raced_and_validated(&t));
    });
}

// ---------------------------------------------------------------------------------------
// [stripe.W2]/[stripe.W3]: a remove racing a displacement (an unlocked remove could clear a hop's
// transient second copy).
// ---------------------------------------------------------------------------------------

/// Keys A and B share fingerprint and buckets. A's copy moves from bucket 1 to bucket 0, where
/// B's copy is; B is removed at the same time. Exactly A's copy must remain.
fn remove_races_displacement(broken: Broken, census: Census) {
    let t = two_buckets(broken);
    let fp = fp_linking(1, 0, 2, 1);
    t.set_slot(1, 0, fp); // key A
    t.set_slot(0, 0, fp); // key B
    let probe = t.probe_at(0, fp);
    let mover = spawn(&t, move |t| {
        t.displace(Hop {
            from: 1,
            slot: 0,
            fp,
            to: 0,
        })
    });
    let remover = spawn(&t, move |t| {
        let met_the_hop = other_writer_holds(t, 0);
        (t.remove(probe), met_the_hop)
    });
    mover.join().unwrap();
    let (removed, met_the_hop) = remover.join().unwrap();
    assert!(removed, "B's copy was there to remove");
    census.saw(met_the_hop);
    assert_eq!(
        t.count(probe),
        1,
        "lost or duplicated fingerprint: exactly A's copy must remain"
    );
    assert!(t.contains(probe), "false negative for A");
}

#[test]
fn loom_stripe_remove_racing_displacement_keeps_the_other_copy() {
    // The remove arrived while the hop held the pair (its copy in flight), so it waited.
    explore(
        "a remove that arrived while the hop held the pair's stripes",
        |c| remove_races_displacement(Broken::default(), c),
    );
}

#[test]
#[should_panic(expected = "lost or duplicated fingerprint")]
fn loom_stripe_control_remove_unlocked() {
    loom::model(|| {
        remove_races_displacement(
            Broken {
                remove_unlocked: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// [stripe.W2]/[stripe.W3]: an insert racing a displacement into the same free slot.
// ---------------------------------------------------------------------------------------

/// Bucket 0 has one free slot; a hop moves F there from bucket 1 while an insert of H (whose
/// buckets are 0 and 1) wants it too. Neither fingerprint may be lost.
fn insert_races_displacement(broken: Broken, census: Census) {
    let t = two_buckets(broken);
    let f = fp_linking(1, 0, 2, 1);
    let h = fp_linking(0, 1, 2, 2);
    let filler = fp_linking(0, 1, 2, 3);
    for slot in 0..3 {
        t.set_slot(0, slot, filler);
    }
    t.set_slot(1, 0, f);
    let insert_probe = t.probe_at(0, h);
    let mover = spawn(&t, move |t| {
        t.displace(Hop {
            from: 1,
            slot: 0,
            fp: f,
            to: 0,
        })
    });
    let inserter = spawn(&t, move |t| {
        t.insert(insert_probe, false) == Ok(Inserted::Added)
    });
    let moved = mover.join().unwrap();
    assert!(inserter.join().unwrap(), "bucket 1 always has room for H");
    assert_eq!(t.count(t.probe_at(1, f)), 1, "lost fingerprint: F");
    assert_eq!(t.count(insert_probe), 1, "lost fingerprint: H");
    census.saw(!moved);
}

#[test]
fn loom_stripe_insert_racing_displacement_loses_nothing() {
    explore(
        "a hop refused because an insert took its free slot first",
        |c| insert_races_displacement(Broken::default(), c),
    );
}

#[test]
#[should_panic(expected = "lost fingerprint")]
fn loom_stripe_control_insert_unlocked() {
    loom::model(|| {
        insert_races_displacement(
            Broken {
                insert_unlocked: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// [stripe.W1]/[stripe.W2]: two writers on overlapping buckets.
// ---------------------------------------------------------------------------------------

fn two_inserts_into_one_bucket(broken: Broken, census: Census) {
    let t = two_buckets(broken);
    let a = t.probe_at(0, fp_linking(0, 1, 2, 1));
    let b = t.probe_at(0, fp_linking(0, 0, 2, 1));
    assert_ne!(
        a.alternate, b.alternate,
        "the pairs overlap in bucket 0 only"
    );
    let insert = move |t: &Table, p: Probe| {
        // Bucket 0's stripe, which both pairs take.
        let met_the_other = other_writer_holds(t, 0);
        (t.insert(p, false) == Ok(Inserted::Added), met_the_other)
    };
    let first = spawn(&t, move |t| insert(t, a));
    let second = spawn(&t, move |t| insert(t, b));
    let (first, second) = (first.join().unwrap(), second.join().unwrap());
    assert!(first.0 && second.0);
    census.saw(first.1 || second.1);
    assert_eq!(t.count(a), 1, "lost fingerprint: a");
    assert_eq!(t.count(b), 1, "lost fingerprint: b");
    if !broken.insert_unlocked {
        assert_eq!(t.len(), 2, "stripe counts must match the buckets");
    }
}

#[test]
fn loom_stripe_two_writers_on_overlapping_buckets_lose_nothing() {
    // One insert arrived while the other held bucket 0's stripe, so it waited.
    explore(
        "an insert that arrived while the other held bucket 0's stripe",
        |c| two_inserts_into_one_bucket(Broken::default(), c),
    );
}

#[test]
#[should_panic(expected = "lost fingerprint")]
fn loom_stripe_control_insert_unlocked_two_writers() {
    loom::model(|| {
        two_inserts_into_one_bucket(
            Broken {
                insert_unlocked: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// insert_unique: check and insert under the same locks.
// ---------------------------------------------------------------------------------------

fn two_unique_inserts_of_one_key(broken: Broken, census: Census) {
    let t = two_buckets(broken);
    let p = t.probe_at(0, fp_linking(0, 1, 2, 1));
    let insert = move |t: &Table| {
        let met_the_other = other_writer_holds(t, 0);
        (t.insert(p, true) == Ok(Inserted::Added), met_the_other)
    };
    let first = spawn(&t, insert);
    let second = spawn(&t, insert);
    let (first, second) = (first.join().unwrap(), second.join().unwrap());
    census.saw(first.1 || second.1);
    let added = [first.0, second.0];
    assert_eq!(t.count(p), 1, "insert_unique stored a duplicate");
    assert_eq!(
        added.iter().filter(|&&a| a).count(),
        1,
        "exactly one call adds"
    );
}

#[test]
fn loom_stripe_insert_unique_adds_one_copy() {
    // One unique insert arrived while the other held the pair, between its check and its put.
    explore(
        "a unique insert that arrived while the other held the pair",
        |c| two_unique_inserts_of_one_key(Broken::default(), c),
    );
}

#[test]
#[should_panic(expected = "insert_unique stored a duplicate")]
fn loom_stripe_control_unique_check_then_act() {
    loom::model(|| {
        two_unique_inserts_of_one_key(
            Broken {
                unique_check_then_act: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// The whole insert: search, execute, place, racing a reader of the fingerprint it displaces.
// ---------------------------------------------------------------------------------------

/// Three buckets. The new key H has buckets 0 and 1, both full. Key K sits in bucket 0 and its
/// other bucket is 2, which is empty: the insert must search, move K from 0 to 2, and take the
/// freed slot, while a reader looks K up.
fn insert_with_displacement_races_reader(broken: Broken, census: Census) {
    let t = table(3, 4, 2, broken);
    let k = fp_linking(0, 2, 3, 1);
    let to1 = fp_linking(0, 1, 3, 1);
    let to0 = fp_linking(1, 0, 3, 1);
    let h = fp_linking(0, 1, 3, 2);
    t.set_slot(0, 0, to1);
    t.set_slot(0, 1, to1);
    t.set_slot(0, 2, to1);
    t.set_slot(0, 3, k);
    for slot in 0..4 {
        t.set_slot(1, slot, to0);
    }
    let new_key = t.probe_at(0, h);
    let k_probe = t.probe_at(0, k);
    assert_eq!(k_probe.alternate, 2);
    let inserter = spawn(&t, move |t| t.insert(new_key, false));
    // Bucket 2 first, then bucket 0: an unvalidated read can load 2 before the copy and 0
    // after the clear.
    let reader = spawn(&t, move |t| t.contains(t.probe_at(2, k)));
    assert_eq!(inserter.join().unwrap(), Ok(Inserted::Added));
    assert!(
        reader.join().unwrap(),
        "false negative during an insert's displacement"
    );
    assert_eq!(t.count(k_probe), 1);
    assert_eq!(t.count(new_key), 1);
    assert_eq!(t.len(), 9);
    census.saw(raced_and_validated(&t));
}

#[test]
fn loom_stripe_insert_with_displacement_keeps_the_displaced_key_visible() {
    explore(RACED, |c| {
        insert_with_displacement_races_reader(Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_lookup_unvalidated_insert_with_displacement() {
    loom::model(|| {
        insert_with_displacement_races_reader(
            Broken {
                lookup_unvalidated: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// [stripe.I4]: a plain insert or remove in a bucket a hop just left, racing a reader of the hop.
// ---------------------------------------------------------------------------------------

/// The hop moves f from bucket 1 to bucket 0; then another writer, locking only bucket 1's
/// stripe (its key's pair is {1, 1}), inserts or removes g there. The reader loads bucket 0
/// before the copy and bucket 1 after the plain write: only a Release put, or a take's Release
/// fence, lets its Acquire fence see the hop's odd version through the writer's lock
/// (write-read causality).
fn reader_races_hop_then_plain_write(remove: bool, broken: Broken, census: Census) {
    let t = two_buckets(broken);
    let f = fp_linking(1, 0, 2, 1);
    let g = fp_linking(1, 1, 2, 1);
    t.set_slot(1, 0, f);
    if remove {
        t.set_slot(1, 1, g);
    }
    let g_probe = t.probe_at(1, g);
    assert_eq!(g_probe.alternate, 1, "g's pair is bucket 1 alone");
    let probe = t.probe_at(0, f);
    let hop = Hop {
        from: 1,
        slot: 0,
        fp: f,
        to: 0,
    };
    let moving = spawn(&t, move |t| t.displace(hop));
    let writing = spawn(&t, move |t| {
        if remove {
            assert!(t.remove(g_probe));
        } else {
            assert_eq!(t.insert(g_probe, false), Ok(Inserted::Added));
        }
    });
    let reading = spawn(&t, move |t| t.contains(probe));
    assert!(moving.join().unwrap());
    writing.join().unwrap();
    assert!(
        reading.join().unwrap(),
        "false negative: a plain write hid the hop"
    );
    census.saw(raced_and_validated(&t));
}

#[test]
fn loom_stripe_lookup_survives_a_hop_then_a_plain_insert_into_the_source() {
    // At most 3 preemptions: the controls of this race are caught at 3, and 4 takes minutes.
    explore_at(3, RACED, |c| {
        reader_races_hop_then_plain_write(false, Broken::default(), c)
    });
}

#[test]
fn loom_stripe_lookup_survives_a_hop_then_a_plain_remove_from_the_source() {
    // At most 3 preemptions: the controls of this race are caught at 3, and 4 takes minutes.
    explore_at(3, RACED, |c| {
        reader_races_hop_then_plain_write(true, Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_put_relaxed() {
    loom::model(|| {
        reader_races_hop_then_plain_write(
            false,
            Broken {
                put_relaxed: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_take_relaxed() {
    loom::model(|| {
        reader_races_hop_then_plain_write(
            true,
            Broken {
                take_relaxed: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// [stripe.I2]: the version stripe is the pair's (the lower index), whichever bucket is primary.
// ---------------------------------------------------------------------------------------

/// The reader's primary bucket is 1, its alternate 0; the hop moves f from 0 to 1. Bucket 0
/// and bucket 1 have different stripes, so validating against the primary's stripe (1)
/// misses the hop, which bumps stripe 0.
fn reader_with_primary_above_alternate(broken: Broken, census: Census) {
    let t = two_buckets(broken);
    let f = fp_linking(1, 0, 2, 1);
    t.set_slot(0, 0, f);
    let probe = t.probe_at(1, f);
    assert_eq!((probe.primary, probe.alternate), (1, 0));
    let hop = Hop {
        from: 0,
        slot: 0,
        fp: f,
        to: 1,
    };
    let moving = spawn(&t, move |t| t.displace(hop));
    let reading = spawn(&t, move |t| t.contains(probe));
    assert!(moving.join().unwrap());
    assert!(
        reading.join().unwrap(),
        "false negative: primary above alternate"
    );
    census.saw(raced_and_validated(&t));
}

#[test]
fn loom_stripe_lookup_validates_the_pair_stripe_whichever_bucket_is_primary() {
    explore(RACED, |c| {
        reader_with_primary_above_alternate(Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_lookup_primary_stripe() {
    loom::model(|| {
        reader_with_primary_above_alternate(
            Broken {
                lookup_primary_stripe: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// Both buckets share one stripe (one stripe for the table): the hop locks it once, and the
/// reader validates against it.
#[test]
fn loom_stripe_lookup_survives_displacement_within_one_stripe() {
    explore(RACED, |census| {
        let t = table(2, 1, 2, Broken::default());
        let f = fp_linking(1, 0, 2, 1);
        t.set_slot(1, 0, f);
        let probe = t.probe_at(0, f);
        let hop = Hop {
            from: 1,
            slot: 0,
            fp: f,
            to: 0,
        };
        let moving = spawn(&t, move |t| t.displace(hop));
        let reading = spawn(&t, move |t| t.contains(probe));
        assert!(moving.join().unwrap());
        assert!(
            reading.join().unwrap(),
            "false negative with a shared stripe"
        );
        assert_eq!(t.len(), 1);
        census.saw(raced_and_validated(&t));
    });
}

// ---------------------------------------------------------------------------------------
// count: validated like a lookup, so a moving copy counts exactly once.
// ---------------------------------------------------------------------------------------

fn count_races_displacement(broken: Broken, census: Census) {
    let t = two_buckets(broken);
    let f = fp_linking(1, 0, 2, 1);
    t.set_slot(1, 0, f);
    let probe = t.probe_at(0, f);
    let hop = Hop {
        from: 1,
        slot: 0,
        fp: f,
        to: 0,
    };
    let moving = spawn(&t, move |t| t.displace(hop));
    let counting = spawn(&t, move |t| t.count(probe));
    assert!(moving.join().unwrap());
    assert_eq!(
        counting.join().unwrap(),
        1,
        "count saw the moving copy 0 or 2 times"
    );
    census.saw(raced_and_validated(&t));
}

#[test]
fn loom_stripe_count_sees_a_moving_copy_once() {
    explore(RACED, |c| count_races_displacement(Broken::default(), c));
}

#[test]
#[should_panic(expected = "count saw the moving copy")]
fn loom_stripe_control_count_unvalidated() {
    loom::model(|| {
        count_races_displacement(
            Broken {
                count_unvalidated: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// clear: under every stripe, racing a hop.
// ---------------------------------------------------------------------------------------

#[test]
fn loom_stripe_clear_racing_a_hop_leaves_an_empty_consistent_table() {
    let census = Census::default();
    let c = census.clone();
    loom::model(move || {
        let t = two_buckets(Broken::default());
        let f = fp_linking(1, 0, 2, 1);
        t.set_slot(1, 0, f);
        let hop = Hop {
            from: 1,
            slot: 0,
            fp: f,
            to: 0,
        };
        let moving = spawn(&t, move |t| t.displace(hop));
        let clearing = spawn(&t, |t| t.clear());
        let moved = moving.join().unwrap();
        clearing.join().unwrap();
        // Before the clear, the hop's copy is cleared with the rest; after it, the hop finds
        // its fingerprint gone and is refused. Either way nothing survives and counts agree.
        assert_eq!(
            t.count(t.probe_at(0, f)),
            0,
            "a hop resurrected a cleared fingerprint"
        );
        assert_eq!(t.len(), 0, "stripe counts disagree with the buckets");
        c.saw(!moved);
    });
    census.assert_seen("a hop refused because the clear ran first");
}

// ---------------------------------------------------------------------------------------
// [stripe.W3] for removes: a put and a take of colliding copies move a copy (a net move).
// ---------------------------------------------------------------------------------------

/// The first fingerprint that is none of `taken`.
fn other_fp(taken: &[u64]) -> u64 {
    (1..=0xFFFFu64).find(|fp| !taken.contains(fp)).unwrap()
}

/// The net-move geometry: one stripe for both buckets, `f` linking buckets 0 and 1, bucket 0
/// full with a copy of `f` and three fillers. Returns the table and the probes of `f` with
/// primary 1 (a lookup loads bucket 1 first, then bucket 0) and with primary 0.
fn net_move_table(broken: Broken) -> (Arc<Table>, Probe, Probe) {
    let t = table(2, 1, 2, broken);
    let f = fp_linking(1, 0, 2, 1);
    let filler = other_fp(&[f]);
    t.set_slot(0, 0, f);
    for slot in 1..4 {
        t.set_slot(0, slot, filler);
    }
    let primary_1 = t.probe_at(1, f);
    let primary_0 = t.probe_at(0, f);
    assert_eq!((primary_1.primary, primary_1.alternate), (1, 0));
    assert_eq!((primary_0.primary, primary_0.alternate), (0, 1));
    (t, primary_1, primary_0)
}

/// Whose copies a read counts while the writer puts and takes copies of the primary-0 probe.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Victim {
    /// K, primary 1: the writer's key collides with it (same fingerprint and buckets).
    Colliding,
    /// The writer's own key: the guard's update path.
    Same,
}

/// How the racing read looks the victim up.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Read {
    Contains,
    Count,
}

/// One writer inserts the primary-0 probe of `f` (bucket 0 is full, so the copy goes to
/// bucket 1) and removes it again (a remove scans bucket 0 first, so it takes the copy that
/// was there). That is a net move of a copy from bucket 0 to bucket 1, and without a window
/// the stripe word (count +1, then -1) ends as it began.
///
/// - `Victim::Colliding`, the reviewed trace: K (primary 1, alternate 0) owns the copy in
///   bucket 0, and the writer's key K2 collides with it. A read of K loads bucket 1 before
///   the put and bucket 0 after the take.
/// - `Victim::Same`, the guard's update path with one key and no collision: the create
///   inserts the key again, the store answers "updated", the guard removes one copy and
///   takes the old one. A read loads bucket 0 first and may see the take there and still the
///   old value of bucket 1 (Relaxed loads, no sequential consistency).
fn put_then_take_races_read(victim: Victim, read: Read, broken: Broken, census: Census) {
    let (t, primary_1, primary_0) = net_move_table(broken);
    let k = match victim {
        Victim::Colliding => primary_1,
        Victim::Same => primary_0,
    };
    let writer = spawn(&t, move |t| {
        assert_eq!(t.insert(primary_0, false), Ok(Inserted::Added));
        assert!(t.remove(primary_0), "a copy was there to remove");
    });
    let reader = spawn(&t, move |t| match read {
        Read::Contains => usize::from(t.contains(k)),
        Read::Count => t.count(k),
    });
    writer.join().unwrap();
    let seen = reader.join().unwrap();
    assert!(
        seen >= 1,
        "false negative: {read:?} of {victim:?} saw {seen} copies after a put and a take"
    );
    assert_eq!(t.count(k), 1, "exactly one copy remains");
    census.saw(raced_and_validated(&t));
}

#[test]
fn loom_stripe_lookup_survives_a_put_and_a_colliding_take() {
    explore(RACED, |c| {
        put_then_take_races_read(Victim::Colliding, Read::Contains, Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_remove_unversioned() {
    loom::model(|| {
        put_then_take_races_read(
            Victim::Colliding,
            Read::Contains,
            Broken {
                remove_unversioned: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

#[test]
fn loom_stripe_count_survives_a_put_and_a_colliding_take() {
    explore(RACED, |c| {
        put_then_take_races_read(Victim::Colliding, Read::Count, Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "false negative: Count")]
fn loom_stripe_control_remove_unversioned_count() {
    loom::model(|| {
        put_then_take_races_read(
            Victim::Colliding,
            Read::Count,
            Broken {
                remove_unversioned: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

#[test]
fn loom_stripe_lookup_survives_the_guard_update_path() {
    explore(RACED, |c| {
        put_then_take_races_read(Victim::Same, Read::Contains, Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_remove_unversioned_update_path() {
    loom::model(|| {
        put_then_take_races_read(
            Victim::Same,
            Read::Contains,
            Broken {
                remove_unversioned: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// A multi-hop path racing a reader of both fingerprints it moves.
// ---------------------------------------------------------------------------------------

/// Four buckets, one stripe each. `k1` sits in bucket 0 (other bucket 2) and `k2` in bucket 2
/// (other bucket 3, empty); buckets 0 and 2 are full. The path moves `k2` from 2 to 3, then
/// `k1` from 0 to 2 into the slot the first hop freed, while a reader looks up `k1` and then
/// `k2`, each loading its hop's destination first.
fn multi_hop_path_races_reader(broken: Broken, census: Census) {
    let t = table(4, 4, 3, broken);
    let k1 = fp_linking(0, 2, 4, 1);
    let k2 = fp_linking(2, 3, 4, 1);
    let filler = other_fp(&[k1, k2]);
    t.set_slot(0, 0, k1);
    t.set_slot(2, 0, k2);
    for slot in 1..4 {
        t.set_slot(0, slot, filler);
        t.set_slot(2, slot, filler);
    }
    let k1_probe = t.probe_at(2, k1);
    let k2_probe = t.probe_at(3, k2);
    assert_eq!((k1_probe.alternate, k2_probe.alternate), (0, 2));
    let hops = [
        Hop {
            from: 2,
            slot: 0,
            fp: k2,
            to: 3,
        },
        Hop {
            from: 0,
            slot: 0,
            fp: k1,
            to: 2,
        },
    ];
    let moving = spawn(&t, move |t| t.execute_path(&hops));
    let reading = spawn(&t, move |t| (t.contains(k1_probe), t.contains(k2_probe)));
    assert_eq!(moving.join().unwrap(), (2, true), "the path was valid");
    let (found_k1, found_k2) = reading.join().unwrap();
    assert!(found_k1 && found_k2, "false negative during a two-hop path");
    assert_eq!(t.count(k1_probe) + t.count(k2_probe), 2);
    census.saw(raced_and_validated(&t));
}

#[test]
fn loom_stripe_lookup_survives_a_multi_hop_path() {
    explore(RACED, |c| multi_hop_path_races_reader(Broken::default(), c));
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_lookup_unvalidated_multi_hop_path() {
    loom::model(|| {
        multi_hop_path_races_reader(
            Broken {
                lookup_unvalidated: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// [stripe.I2]/[stripe.W3]: a pair whose version stripe is the higher of its two stripe locks.
// ---------------------------------------------------------------------------------------

/// Three buckets, two stripes: bucket 1 has stripe 1 and bucket 2 has stripe 0, so a hop
/// between them locks stripe 0 first and its version stripe (bucket 1's) second. The hop
/// moves `f` from 2 to 1 while a reader loads bucket 1, then bucket 2.
fn version_stripe_is_the_higher_lock(broken: Broken, census: Census) {
    let t = table(3, 2, 2, broken);
    let f = fp_linking(2, 1, 3, 1);
    t.set_slot(2, 0, f);
    let probe = t.probe_at(1, f);
    assert_eq!(probe.alternate, 2);
    assert_eq!(t.version_stripe(probe), 1);
    assert!(
        t.stripe_of(2) < t.stripe_of(1),
        "the version stripe is the higher lock"
    );
    let hop = Hop {
        from: 2,
        slot: 0,
        fp: f,
        to: 1,
    };
    let moving = spawn(&t, move |t| t.displace(hop));
    let reading = spawn(&t, move |t| t.contains(probe));
    assert!(moving.join().unwrap());
    assert!(
        reading.join().unwrap(),
        "false negative: a hop whose version stripe is the higher lock"
    );
    census.saw(raced_and_validated(&t));
}

#[test]
fn loom_stripe_lookup_survives_a_hop_whose_version_stripe_is_the_higher_lock() {
    explore(RACED, |c| {
        version_stripe_is_the_higher_lock(Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_hop_versions_lower_lock() {
    loom::model(|| {
        version_stripe_is_the_higher_lock(
            Broken {
                hop_versions_lower_lock: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// clear: a take of everything, racing a reader.
// ---------------------------------------------------------------------------------------

/// K (primary 0, alternate 1) has its copy in bucket 1; both buckets share one stripe. A
/// writer clears the table and inserts K again, which puts the new copy in bucket 0. A count
/// of K that loads bucket 0 after the new put and bucket 1 before the clear sees two copies,
/// a state that never existed; without the clear's windows the stripe word is back where it
/// was (count 1, then 0, then 1), so only the version can reject that read. Every validated
/// count is 0 or 1.
fn count_races_clear_and_reinsert(broken: Broken, census: Census) {
    let t = table(2, 1, 2, broken);
    let f = fp_linking(1, 0, 2, 1);
    t.set_slot(1, 0, f);
    let k = t.probe_at(0, f);
    let writer = spawn(&t, move |t| {
        t.clear();
        assert_eq!(t.insert(k, false), Ok(Inserted::Added));
    });
    let counter = spawn(&t, move |t| t.count(k));
    writer.join().unwrap();
    let n = counter.join().unwrap();
    assert!(
        n <= 1,
        "count saw {n} copies across a clear: a state that never existed"
    );
    assert_eq!(
        t.len(),
        1,
        "stripe counts disagree with the buckets after a clear"
    );
    census.saw(raced_and_validated(&t));
}

#[test]
fn loom_stripe_count_racing_a_clear_and_a_reinsert_sees_one_instant() {
    explore(RACED, |c| {
        count_races_clear_and_reinsert(Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "count saw 2 copies across a clear")]
fn loom_stripe_control_clear_unversioned() {
    loom::model(|| {
        count_races_clear_and_reinsert(
            Broken {
                clear_unversioned: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// insert_unique through a path search.
// ---------------------------------------------------------------------------------------

/// Three buckets. H's buckets 0 and 1 are full; every fingerprint in bucket 0 can move to
/// bucket 2, which is empty. Two `insert_unique(H)` calls each need a path search and a hop
/// before a slot is free: exactly one adds, and no fingerprint is lost or duplicated.
fn two_unique_inserts_through_a_path(broken: Broken, census: Census) {
    let t = table(3, 4, 2, broken);
    let movable: Vec<u64> = (1..=4).map(|n| fp_linking(0, 2, 3, n)).collect();
    let to0 = fp_linking(1, 0, 3, 1);
    let h = (1..=0xFFFFu64)
        .filter(|fp| !movable.contains(fp) && *fp != to0)
        .find(|&fp| alternate_index(0, fp, 3) == 1)
        .unwrap();
    for (slot, &fp) in movable.iter().enumerate() {
        t.set_slot(0, slot, fp);
        t.set_slot(1, slot, to0);
    }
    let p = t.probe_at(0, h);
    let insert = move |t: &Table| t.insert(p, true) == Ok(Inserted::Added);
    let first = spawn(&t, insert);
    let second = spawn(&t, insert);
    let added = [first.join().unwrap(), second.join().unwrap()];
    assert_eq!(t.count(p), 1, "insert_unique stored a duplicate");
    assert_eq!(
        added.iter().filter(|&&a| a).count(),
        1,
        "exactly one call adds"
    );
    for &fp in &movable {
        assert_eq!(
            t.count(t.probe_at(0, fp)),
            1,
            "lost or duplicated a moved copy"
        );
    }
    assert_eq!(t.len(), 9);
    // Both calls searched the same path, and the one that came second found its hop refused.
    census.saw(t.counters().path_retries() > 0);
}

#[test]
fn loom_stripe_insert_unique_through_a_path_search_adds_one_copy() {
    // At most 3 preemptions: the controls of this race are caught at 3, and 4 takes minutes.
    explore_at(
        3,
        "an insert_unique whose path the other call's hop invalidated",
        |c| two_unique_inserts_through_a_path(Broken::default(), c),
    );
}

#[test]
#[should_panic(expected = "insert_unique stored a duplicate")]
fn loom_stripe_control_unique_check_then_act_through_a_path() {
    loom::model(|| {
        two_unique_inserts_through_a_path(
            Broken {
                unique_check_then_act: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// count's locked fallback.
// ---------------------------------------------------------------------------------------

/// A count with a single optimistic attempt races a hop of the copy it counts, so that its
/// fallback runs: under the pair's locks it must count the copy exactly once.
fn count_fallback_races_displacement(broken: Broken, census: Census) {
    let t = two_buckets(broken);
    let f = fp_linking(1, 0, 2, 1);
    t.set_slot(1, 0, f);
    let probe = t.probe_at(0, f);
    let hop = Hop {
        from: 1,
        slot: 0,
        fp: f,
        to: 0,
    };
    let moving = spawn(&t, move |t| t.displace(hop));
    let counting = spawn(&t, move |t| t.count_with_attempts(probe, 1));
    assert!(moving.join().unwrap());
    assert_eq!(
        counting.join().unwrap(),
        1,
        "count's fallback saw the moving copy 0 or 2 times"
    );
    census.saw(t.counters().read_fallbacks() > 0);
}

#[test]
fn loom_stripe_count_fallback_under_the_locks_counts_a_moving_copy_once() {
    explore("count falling back to the locks", |c| {
        count_fallback_races_displacement(Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "count's fallback saw the moving copy")]
fn loom_stripe_control_count_fallback_unlocked() {
    loom::model(|| {
        count_fallback_races_displacement(
            Broken {
                count_fallback_unlocked: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// [stripe.W3]/[stripe.I4]: a take in another pair carries a hop's version through its lock.
// ---------------------------------------------------------------------------------------

/// Three buckets, four stripes. `f`'s pair is {1, 2}; `g`'s pair is {2, 0}, whose version
/// stripe (bucket 0's) is neither of `f`'s. A hop moves `f` from 2 to 1; a remove of `g` then
/// clears `g` from bucket 2. The reader of `f` loads bucket 1 before the copy and bucket 2
/// after `g`'s take: it can learn of the hop only through the take's Release fence, sequenced
/// after its lock of bucket 2's stripe, which the hop released (write-read causality).
fn reader_races_hop_then_foreign_take(broken: Broken, census: Census) {
    let t = table(3, 4, 2, broken);
    let f = fp_linking(2, 1, 3, 1);
    let g = fp_linking(2, 0, 3, 1);
    t.set_slot(2, 0, f);
    t.set_slot(2, 1, g);
    let g_probe = t.probe_at(2, g);
    let f_probe = t.probe_at(1, f);
    assert_eq!((f_probe.alternate, g_probe.alternate), (2, 0));
    assert_eq!(
        t.version_stripe(g_probe),
        0,
        "g's version stripe is not one of f's"
    );
    let hop = Hop {
        from: 2,
        slot: 0,
        fp: f,
        to: 1,
    };
    let moving = spawn(&t, move |t| t.displace(hop));
    let removing = spawn(&t, move |t| t.remove(g_probe));
    let reading = spawn(&t, move |t| t.contains(f_probe));
    assert!(moving.join().unwrap());
    assert!(removing.join().unwrap());
    assert!(
        reading.join().unwrap(),
        "false negative: a take in another pair hid the hop"
    );
    census.saw(raced_and_validated(&t));
}

#[test]
fn loom_stripe_lookup_survives_a_hop_then_a_take_in_another_pair() {
    // At most 3 preemptions: the controls of this race are caught at 3, and 4 takes minutes.
    explore_at(3, RACED, |c| {
        reader_races_hop_then_foreign_take(Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_stripe_control_take_unfenced() {
    loom::model(|| {
        reader_races_hop_then_foreign_take(
            Broken {
                take_unfenced: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}
