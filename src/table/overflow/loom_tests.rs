//! Loom models of the overflow bits (\[overflow.W2\] to \[overflow.R2\] in `overflow`).
//!
//! As in the table's models, every actor is a spawned thread, the main thread only sets up,
//! joins and asserts, and each model has a negative control running a broken variant of the
//! step under test. The readers here make the one-line read themselves (`one_line`, then the
//! two-line read where it sends them, as `contains_newest` does), so that a census can count
//! which of the two answered.
//!
//! \[overflow.W2\]'s order (the bit before the put) has a model but no control: both stores are
//! made under the locks of both buckets, so no writer sees the state between them, and a
//! lookup of the key being inserted may answer "absent" until its insert returns. The bit
//! first keeps \[overflow.I1\] at every store, which the proof then needs no exception for.

use loom::sync::Arc;
use loom::thread;

use super::super::loom_tests::{explore, fp_linking, layout_table, spawn, Census};
use super::super::path::Hop;
use super::super::stripe::Broken;
use super::super::{growth, Inserted, Lookup, Probe, RawTable, Table as AnyTable, Tables, Width};
use crate::fingerprint::{Fp15, Layout};
const _: () = assert!(Fp15::OVERFLOW != 0);

type Table = RawTable<Fp15>;

/// A table of two buckets, one stripe each, with `broken` in its protocol.
fn two_buckets(broken: Broken) -> Arc<Table> {
    layout_table(2, 2, 2, broken)
}

/// How a lookup in the newest table answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Present from the primary word alone.
    OneLinePresent,
    /// Absent from the primary word alone.
    OneLineAbsent,
    /// The overflow bit sent it to both lines; the two-line read's answer.
    TwoLines(bool),
}

impl Answer {
    fn present(self) -> bool {
        matches!(self, Answer::OneLinePresent | Answer::TwoLines(true))
    }
}

/// `contains_newest`, step by step.
fn lookup(t: &Table, p: Probe) -> Answer {
    match t.one_line(p) {
        Some(Lookup::Present) => Answer::OneLinePresent,
        Some(_) => Answer::OneLineAbsent,
        None => Answer::TwoLines(t.contains(p)),
    }
}

// ---------------------------------------------------------------------------------------
// [overflow.W3]: a hop out of the reader's primary sets the bit in the same store.
// ---------------------------------------------------------------------------------------

/// `K` (primary 0, alternate 1) sits in bucket 0; a hop moves it to bucket 1 while a reader
/// looks it up. The reader's one-line load of bucket 0 reads the copy, or the hop's clear,
/// which must carry the bit.
fn hop_out_of_the_primary(broken: Broken, census: Census) {
    let t = two_buckets(broken);
    let fp = fp_linking(0, 1, 2, 1);
    t.set_slot(0, 0, fp);
    let probe = t.probe_at(0, fp);
    let hop = Hop {
        from: 0,
        slot: 0,
        fp,
        to: 1,
    };
    let moving = spawn(&t, move |t| t.displace(hop));
    let reading = spawn(&t, move |t| lookup(t, probe));
    assert!(moving.join().unwrap(), "the hop had a free slot");
    let answer = reading.join().unwrap();
    assert!(
        answer.present(),
        "false negative: a one-line read missed a copy hopping out of its primary"
    );
    census.saw(answer == Answer::TwoLines(true));
}

#[test]
fn loom_overflow_a_hop_out_of_the_primary_sets_its_bit() {
    explore("a reader sent to two lines by the hop's bit", |c| {
        hop_out_of_the_primary(Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_overflow_control_hop_bit_separate() {
    loom::model(|| {
        hop_out_of_the_primary(
            Broken {
                hop_bit_separate: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// [overflow.W2]: an insert into the alternate sets the primary's bit.
// ---------------------------------------------------------------------------------------

/// Bucket 0 holds `J` (fingerprint `f`, primary 0) and three others, so an insert of `K`
/// (fingerprint `f`, primary 0) goes to bucket 1 unless a remove of `J` freed bucket 0 first.
/// A reader looks `K` up once its insert returned, racing the remove; after the remove bucket 0
/// holds no `f`, so only `K`'s bit there sends the reader to bucket 1.
fn insert_into_the_alternate(broken: Broken, census: Census) {
    let t = two_buckets(broken);
    let f = fp_linking(0, 1, 2, 1);
    t.set_slot(0, 0, f);
    for (slot, n) in [(1, 2), (2, 3), (3, 4)] {
        t.set_slot(0, slot, fp_linking(0, 1, 2, n));
    }
    let probe = t.probe_at(0, f);
    let removing = spawn(&t, move |t| t.remove(probe));
    let inserting = spawn(&t, move |t| t.insert(probe, false));
    assert_eq!(inserting.join().unwrap(), Ok(Inserted::Added));
    // Spawned once the insert returned, racing the remove.
    let reading = spawn(&t, move |t| lookup(t, probe));
    assert!(removing.join().unwrap(), "J was there to remove");
    let answer = reading.join().unwrap();
    assert!(
        answer.present(),
        "false negative: K in its alternate with no bit in its primary"
    );
    census.saw(answer == Answer::TwoLines(true) && t.count_locked(probe) == 1);
}

#[test]
fn loom_overflow_an_insert_into_the_alternate_sets_the_primary_bit() {
    explore("K found in its alternate through the bit", |c| {
        insert_into_the_alternate(Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_overflow_control_alternate_put_unmarked() {
    loom::model(|| {
        insert_into_the_alternate(
            Broken {
                alternate_put_unmarked: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

#[test]
fn loom_overflow_the_bit_after_the_put_is_not_observable() {
    // The order of [overflow.W2] has no control (module doc): the same model, the bit second.
    explore("K found in its alternate through the bit", |c| {
        insert_into_the_alternate(
            Broken {
                alternate_put_before_bit: true,
                ..Broken::default()
            },
            c,
        )
    });
}

// ---------------------------------------------------------------------------------------
// [overflow.W4]: a remove takes from its key's primary when the primary holds a match.
// ---------------------------------------------------------------------------------------

/// `A` (primary 0) and `B` (primary 1) share a fingerprint and the pair {0, 1}, each in its
/// own primary. Removing `A` must take the copy in bucket 0; a take from bucket 1 with no bit
/// leaves `B` with its copy in bucket 0 and a clear bit in bucket 1.
fn remove_beside_a_colliding_key(broken: Broken, census: Census) {
    let t = two_buckets(broken);
    let f = fp_linking(0, 1, 2, 1);
    t.set_slot(0, 0, f);
    t.set_slot(1, 0, f);
    let a = t.probe_at(0, f);
    let b = t.probe_at(1, f);
    assert_eq!((b.primary, b.alternate), (1, 0));
    let removing = spawn(&t, move |t| t.remove(a));
    let reading = spawn(&t, move |t| lookup(t, b));
    assert!(removing.join().unwrap(), "A was there to remove");
    let answer = reading.join().unwrap();
    assert!(
        answer.present(),
        "false negative: B lost to a remove of A that took from A's alternate"
    );
    census.saw(answer == Answer::OneLinePresent);
}

#[test]
fn loom_overflow_a_remove_takes_from_its_primary() {
    explore("B found in its primary", |c| {
        remove_beside_a_colliding_key(Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_overflow_control_remove_alternate_first_unmarked() {
    loom::model(|| {
        remove_beside_a_colliding_key(
            Broken {
                remove_alternate_first_unmarked: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

// ---------------------------------------------------------------------------------------
// [overflow.R1] [overflow.R2]: a claim handed from a newer table to an older one.
// ---------------------------------------------------------------------------------------

/// A hash with fingerprint `fp`, base bucket `base` (of two) and sub-bucket `sub` (of two).
fn key(fp: u64, base: u64, sub: u64) -> u64 {
    // The base bucket is `(hash >> 32) * 2 >> 32`: the top bit picks it.
    (base << 63) | (sub << 16) | fp
}

/// The hand-over trace of `overflow`'s module doc. The base table has buckets {0, 1}; `K`
/// (primary 1) and `R` (primary 0) share fingerprint `f` and sit in their primaries. A reader
/// looks `K` up, loading the table count before a writer adds a table, inserts `X`
/// (fingerprint `f`, base bucket 1, the sub-bucket of `R`'s alternate there), removes `R`
/// (which takes `X`'s copy in the new table: `X` now stands on `R`'s copy in bucket 0 of the
/// base), then removes `X` (no copy in the new table; in the base, its primary 1 holds `K`'s
/// copy, which it takes). `K` is left with a copy in bucket 0 only. Either guard alone keeps
/// the reader from "absent": the reload of the table count \[overflow.R2\], or the bit the
/// last remove sets in bucket 1 of the base, a table that is no longer the newest
/// \[overflow.W6\].
fn claim_handed_to_an_older_table(
    stripes: Broken,
    growth: growth::Broken,
) -> (Arc<Tables>, Option<usize>) {
    let f = (1..=Fp15::LANE)
        .find(|&f| crate::fingerprint::alternate_index(0, f, 2) == 1)
        .expect("a fingerprint pairing the two base buckets");
    let mut base = AnyTable::new(Width::Fp15, 2, 1, 0).expect("a tiny table");
    let AnyTable::Fp15(raw) = &mut base else {
        unreachable!("a 15-bit flat base")
    };
    raw.broken = stripes;
    let mut tables = Tables::new(base, 1, 1);
    tables.set_broken(growth);
    let t = Arc::new(tables);
    let (k, r) = (key(f, 1, 0), key(f, 0, 0));
    assert_eq!(t.insert(k, false), Ok(Inserted::Added));
    assert_eq!(t.insert(r, false), Ok(Inserted::Added));
    // `R`'s alternate in the grown table lies under base bucket 1.
    let sub = crate::fingerprint::nested_alternate_index(0, f, 2, 1) & 1;
    let x = key(f, 1, sub);
    let writer = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            t.grow(0).unwrap();
            assert_eq!(t.insert(x, false), Ok(Inserted::Added));
            assert_eq!(t.remove_traced(r, growth::Broken::default()), Some(1));
            assert_eq!(t.remove_traced(x, growth::Broken::default()), Some(0));
        })
    };
    let reader = {
        let t = Arc::clone(&t);
        thread::spawn(move || t.find(k))
    };
    writer.join().unwrap();
    let found = reader.join().unwrap();
    assert!(
        found.is_some(),
        "false negative: K handed to the other end of its pair in an older table"
    );
    (t, found)
}

/// \[overflow.W6\] off, to show that the reload alone suffices.
fn w6_off() -> Broken {
    Broken {
        older_remove_unmarked: true,
        ..Broken::default()
    }
}

#[test]
fn loom_overflow_a_one_line_absent_rechecks_the_table_count() {
    explore("a one-line absent whose reload found a new table", |c| {
        let (t, _) = claim_handed_to_an_older_table(w6_off(), growth::Broken::default());
        c.saw(t.stale_one_line_answers() > 0);
    });
}

#[test]
fn loom_overflow_a_remove_in_an_older_table_sets_its_bit() {
    explore(
        "a one-line read sent to two lines by the older remove's bit",
        |c| {
            let (t, found) = claim_handed_to_an_older_table(
                Broken::default(),
                growth::Broken {
                    one_line_unrechecked: true,
                    ..growth::Broken::default()
                },
            );
            let AnyTable::Fp15(base) = t.base() else {
                unreachable!("a 15-bit flat base")
            };
            c.saw(found == Some(0) && base.bit_sends() > 0);
        },
    );
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_overflow_control_one_line_unrechecked() {
    loom::model(|| {
        claim_handed_to_an_older_table(
            w6_off(),
            growth::Broken {
                one_line_unrechecked: true,
                ..growth::Broken::default()
            },
        );
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_overflow_control_one_line_relaxed() {
    loom::model(|| {
        claim_handed_to_an_older_table(
            Broken {
                one_line_relaxed: true,
                ..w6_off()
            },
            growth::Broken::default(),
        );
    });
}

// ---------------------------------------------------------------------------------------
// [overflow.W2]: a unique insert standing on a copy in its alternate marks its primary.
// ---------------------------------------------------------------------------------------

/// `K` (primary 1) sits in bucket 1; a unique insert of `K2` (same fingerprint, primary 0)
/// finds it and answers "already present", while a hop moves `K`'s copy to bucket 0. A reader
/// looks `K2` up once its insert returned, racing the hop.
fn unique_insert_on_a_copy_in_the_alternate(broken: Broken, census: Census) {
    let t = two_buckets(broken);
    let f = fp_linking(0, 1, 2, 1);
    t.set_slot(1, 0, f);
    let k2 = t.probe_at(0, f);
    let hop = Hop {
        from: 1,
        slot: 0,
        fp: f,
        to: 0,
    };
    let moving = spawn(&t, move |t| t.displace(hop));
    let inserting = spawn(&t, move |t| t.insert(k2, true));
    assert_eq!(inserting.join().unwrap(), Ok(Inserted::AlreadyPresent));
    // Spawned once the insert returned, racing the hop.
    let reading = spawn(&t, move |t| lookup(t, k2));
    assert!(moving.join().unwrap(), "bucket 0 had room for the hop");
    let answer = reading.join().unwrap();
    assert!(
        answer.present(),
        "false negative: a unique insert answered already present and its key reads absent"
    );
    census.saw(answer == Answer::TwoLines(true));
}

#[test]
fn loom_overflow_a_unique_insert_marks_its_primary() {
    explore("K2 found in its alternate through the bit", |c| {
        unique_insert_on_a_copy_in_the_alternate(Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_overflow_control_unique_uncovered() {
    loom::model(|| {
        unique_insert_on_a_copy_in_the_alternate(
            Broken {
                unique_uncovered: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}
