//! Loom models of the copy protocol \[C1\]-\[C4\]
//! (`RUSTFLAGS="--cfg cuckoo_loom" cargo test --release --lib loom_c`).
//!
//! A copier reads a two-bucket table one bucket per chunk (bucket 0, then bucket 1) while a
//! writer moves a key's only copy from bucket 1 to bucket 0: the order in which a copier
//! without the protocol reads bucket 0 before the copy arrives and bucket 1 after it left.
//! Every actor is spawned; the main thread sets up, joins and asserts. Each model has
//! negative controls, each a test-only [`Broken`] step that loom must catch, and a census
//! that the straddle the protocol exists for (a logged extra) was reached.
//!
//! The models run at a preemption bound of at most 3 ([`bounded`]): the copier's handshakes
//! take every stripe lock twice, and at 4 the net-move model alone takes over ten minutes.
//! Every negative control is caught at 3.

use loom::sync::Arc;

use super::{Broken, Extra};
use crate::fingerprint::Fp16;
use crate::table::loom_tests::{fp_linking, spawn, Census};
use crate::table::path::Hop;
use crate::table::RawTable;

type Table = RawTable<Fp16>;

/// A loom builder at `LOOM_MAX_PREEMPTIONS` (as `loom::model` reads it), capped at 3.
fn bounded() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.map_or(3, |b| b.min(3)));
    builder
}

/// Runs `model` under [`bounded`] with a fresh census, then asserts the census saw `what`.
fn explore(what: &str, model: impl Fn(Census) + Send + Sync + 'static) {
    let census = Census::default();
    let c = census.clone();
    bounded().check(move || model(c.clone()));
    census.assert_seen(what);
}

/// Runs a negative control under [`bounded`].
fn model(f: impl Fn() + Send + Sync + 'static) {
    bounded().check(f);
}

/// What the census of every model must see.
const STRADDLED: &str = "a take that straddled the copier and logged an extra";

/// A table of two buckets, one stripe each, with `broken` in its copy protocol.
fn table(broken: Broken) -> Arc<Table> {
    let mut t = Table::with_stripes(2, 2, 2).unwrap();
    t.copy_state_mut().broken = broken;
    Arc::new(t)
}

/// Copies `t` one bucket per chunk: the words read and the extras.
fn copy(t: &Table) -> (Vec<u64>, Vec<Extra>) {
    let mut words = Vec::new();
    let extras = t
        .copy_out(1, |chunk| {
            words.extend_from_slice(chunk);
            Ok::<(), ()>(())
        })
        .unwrap();
    (words, extras)
}

/// Copies of `fp` the snapshot holds: in the two words read and in the extras.
fn held(words: &[u64], extras: &[Extra], fp: u64) -> usize {
    let in_words = words
        .iter()
        .map(|w| (0..4).filter(|j| (w >> (16 * j)) & 0xFFFF == fp).count())
        .sum::<usize>();
    in_words + extras.iter().filter(|e| e.fp == fp).count()
}

// ---------------------------------------------------------------------------------------
// [C2]-[C4] against a hop.
// ---------------------------------------------------------------------------------------

/// A key's only copy hops from bucket 1 to bucket 0 while the copier reads 0 then 1.
fn copier_races_hop(broken: Broken, census: Census) {
    let t = table(broken);
    let fp = fp_linking(1, 0, 2, 1);
    t.set_slot(1, 0, fp);
    let hop = Hop {
        from: 1,
        slot: 0,
        fp,
        to: 0,
    };
    let mover = spawn(&t, move |t| t.displace(hop));
    let copier = spawn(&t, copy);
    assert!(mover.join().unwrap(), "the hop had a free slot");
    let (words, extras) = copier.join().unwrap();
    assert!(
        held(&words, &extras, fp) >= 1,
        "false negative: the snapshot lost a copy that moved during it"
    );
    census.saw(!extras.is_empty());
}

#[test]
fn loom_c4_a_hop_across_the_copier_leaves_an_extra() {
    explore(STRADDLED, |c| copier_races_hop(Broken::None, c));
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_c4_negative_control_no_log_loses_the_hop() {
    model(|| copier_races_hop(Broken::NoLog, Census::default()));
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_c4_negative_control_writer_without_fence_loses_the_hop() {
    model(|| copier_races_hop(Broken::NoWriterFence, Census::default()));
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_c2_negative_control_copier_without_fence_loses_the_hop() {
    model(|| copier_races_hop(Broken::NoCopierFence, Census::default()));
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_c3_negative_control_read_bound_loaded_after_the_take_loses_the_hop() {
    model(|| copier_races_hop(Broken::ReadBoundAfterTake, Census::default()));
}

// ---------------------------------------------------------------------------------------
// [C4] against a net move: a colliding key's put into bucket 0, then its remove taking
// the other key's copy from bucket 1.
// ---------------------------------------------------------------------------------------

/// Key k's copy is in bucket 1 (full, so a colliding insert lands in bucket 0); a writer
/// inserts colliding key x (into 0) and removes it, which takes the first copy it finds, k's
/// in bucket 1: k now stands on x's copy in bucket 0.
fn copier_races_net_move(broken: Broken, census: Census) {
    let t = table(broken);
    let fp = fp_linking(1, 0, 2, 1);
    t.set_slot(1, 0, fp);
    for slot in 1..4 {
        t.set_slot(1, slot, fp_linking(1, 0, 2, slot + 1));
    }
    let key = t.probe_at(1, fp);
    let writer = spawn(&t, move |t| {
        t.insert(key, false).unwrap();
        assert!(t.remove(key));
    });
    let copier = spawn(&t, copy);
    writer.join().unwrap();
    let (words, extras) = copier.join().unwrap();
    assert!(
        held(&words, &extras, fp) >= 1,
        "false negative: the snapshot lost a key whose copy was taken by a colliding remove"
    );
    census.saw(!extras.is_empty());
}

#[test]
fn loom_c4_a_net_move_across_the_copier_leaves_an_extra() {
    explore(STRADDLED, |c| copier_races_net_move(Broken::None, c));
}

#[test]
#[should_panic(expected = "false negative")]
fn loom_c4_negative_control_no_log_loses_the_net_move() {
    model(|| copier_races_net_move(Broken::NoLog, Census::default()));
}
