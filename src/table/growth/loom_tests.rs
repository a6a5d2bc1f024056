//! Loom models of growth (\[G1\] to \[G5\] in `growth`).
//!
//! As in the table's models, every actor is a spawned thread, the main thread only sets up,
//! joins and asserts, and each model has a negative control running a broken variant of the
//! step under test. The base table has one bucket of four slots and each grown table two
//! buckets, so a handful of keys fill them.

use loom::sync::Arc;
use loom::thread;

use super::super::loom_tests::{explore, Census};
use super::{GrowFailure, Tables};
use crate::table::{Inserted, Table};

/// The key whose copies the models move about (fingerprint 7).
const K: u64 = 0x0000_0001_0000_0007;

/// A key with fingerprint `fp` (1 to 6: none collides with `K` or another filler).
fn filler(fp: u64) -> u64 {
    assert!((1..7).contains(&fp));
    (fp << 40) | fp
}

/// A filter of one one-bucket base table that may add `max_steps` tables, doubling.
fn tables(max_steps: usize) -> Arc<Tables> {
    let base = Table::new(16, 1, 1, 0).expect("a tiny table");
    Arc::new(Tables::new(base, 2, max_steps))
}

/// Runs `f` on a spawned loom thread with the shared tables.
fn spawn<T: Send + 'static>(
    t: &Arc<Tables>,
    f: impl FnOnce(&Tables) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let t = Arc::clone(t);
    thread::spawn(move || f(&t))
}

/// A lookup: the real one, or a broken variant of \[G4\].
#[derive(Debug, Clone, Copy, PartialEq)]
enum Lookup {
    Correct,
    /// Loads `grown` once, before the base table.
    LoadingOnce,
    /// Loads `grown` after the base table, but never again.
    WithoutReload,
}

impl Lookup {
    /// Which table answered "present", if any.
    fn find(self, t: &Tables, hash: u64) -> Option<usize> {
        match self {
            Lookup::Correct => {
                let found = t.find(hash);
                assert_eq!(found.is_some(), t.contains(hash));
                found
            }
            Lookup::LoadingOnce => t.contains_loading_once(hash).then_some(usize::MAX),
            Lookup::WithoutReload => t.contains_without_reload(hash).then_some(usize::MAX),
        }
    }
}

/// A writer grows the filter, puts a second copy of `K` into the new table and removes one
/// (the first in table order: the base table's). The copy moves from the base table to the
/// grown one; a concurrent lookup of `K` must find it. The lookup must load `grown` after
/// reading the base table: loaded before, it can miss both the new table and the copy that
/// left the base table.
fn net_move_into_new_table(lookup: Lookup, census: Census) {
    let t = tables(1);
    assert_eq!(t.insert(K, false), Ok(Inserted::Added));
    let writer = spawn(&t, |t| {
        t.grow(0).unwrap();
        assert_eq!(t.insert(K, false), Ok(Inserted::Added));
        assert!(t.remove(K));
    });
    let reader = spawn(&t, move |t| lookup.find(t, K));
    writer.join().unwrap();
    let found = reader.join().unwrap();
    assert!(found.is_some(), "a lookup missed a key moved into a new table");
    census.saw(found == Some(1));
    assert_eq!(t.count(K), 1);
}

#[test]
fn loom_growth_net_move_into_new_table() {
    explore("a lookup that found K in the new table", |census| {
        net_move_into_new_table(Lookup::Correct, census)
    });
}

#[test]
#[should_panic(expected = "missed a key moved into a new table")]
fn loom_growth_net_move_control_loading_once() {
    loom::model(|| net_move_into_new_table(Lookup::LoadingOnce, Census::default()));
}

/// As `net_move_into_new_table`, one level up: `K` is in the first grown table, and the writer
/// adds a second, puts `K` there and removes the first grown table's copy. A lookup that
/// loaded `grown` when only one grown table existed must load it again after missing there.
fn net_move_after_load(lookup: Lookup, census: Census) {
    let t = tables(2);
    t.grow(0).unwrap();
    assert_eq!(t.insert(K, false), Ok(Inserted::Added));
    let writer = spawn(&t, |t| {
        t.grow(1).unwrap();
        assert_eq!(t.insert(K, false), Ok(Inserted::Added));
        assert!(t.remove(K));
    });
    let reader = spawn(&t, move |t| lookup.find(t, K));
    writer.join().unwrap();
    let found = reader.join().unwrap();
    assert!(found.is_some(), "a lookup missed a key moved into a newer table");
    census.saw(found == Some(2));
}

#[test]
fn loom_growth_lookup_reloads_after_miss() {
    explore("a lookup that found K in the newest table", |census| {
        net_move_after_load(Lookup::Correct, census)
    });
}

#[test]
#[should_panic(expected = "missed a key moved into a newer table")]
fn loom_growth_lookup_reload_control_without_reload() {
    loom::model(|| net_move_after_load(Lookup::WithoutReload, Census::default()));
}

/// A remove racing the same net move as `net_move_into_new_table`: two copies of `K` were
/// inserted (one before, one by the writer) and two removes run, so each must find one. A
/// remove that loads `grown` before scanning the base table can miss both.
fn remove_races_growth(loading_once: bool) {
    let t = tables(1);
    assert_eq!(t.insert(K, false), Ok(Inserted::Added));
    let writer = spawn(&t, |t| {
        t.grow(0).unwrap();
        assert_eq!(t.insert(K, false), Ok(Inserted::Added));
        assert!(t.remove(K));
    });
    let remover = spawn(&t, move |t| {
        if loading_once {
            t.remove_loading_once(K)
        } else {
            t.remove(K)
        }
    });
    writer.join().unwrap();
    assert!(remover.join().unwrap(), "a remove missed a copy moved into a new table");
    assert_eq!(t.count(K), 0);
    assert_eq!(t.len(), 0);
}

#[test]
fn loom_growth_remove_races_growth() {
    loom::model(|| remove_races_growth(false));
}

#[test]
#[should_panic(expected = "a remove missed a copy")]
fn loom_growth_remove_control_loading_once() {
    loom::model(|| remove_races_growth(true));
}

/// \[G3\]'s order. A writer loaded `grown` before another grew the filter, so its insert of
/// `K` lands in the base table; it then removes `K`. Meanwhile the grower inserted `K` into the
/// new table and looks it up. The remove must take the writer's own copy from the base table
/// (the first in table order): taking the grower's copy from the newer table moves a copy
/// backwards, and the grower's lookup can read the base table before the put and the new
/// table after the take.
fn remove_order(newest_first: bool, census: Census) {
    let t = tables(1);
    let writer = spawn(&t, move |t| {
        assert_eq!(t.insert(K, false), Ok(Inserted::Added));
        if newest_first {
            assert!(t.remove_newest_first(K));
        } else {
            assert!(t.remove(K));
        }
    });
    let grower = spawn(&t, |t| {
        t.grow(0).unwrap();
        assert_eq!(t.insert(K, false), Ok(Inserted::Added));
        t.find(K)
    });
    writer.join().unwrap();
    let found = grower.join().unwrap();
    assert!(found.is_some(), "a lookup missed a key its own thread inserted");
    census.saw(found == Some(1));
    assert_eq!(t.count(K), 1);
}

#[test]
fn loom_growth_remove_takes_first_in_table_order() {
    explore("the grower's lookup finding its copy in the new table", |census| {
        remove_order(false, census)
    });
}

#[test]
#[should_panic(expected = "missed a key its own thread inserted")]
fn loom_growth_remove_order_control_newest_first() {
    loom::model(|| remove_order(true, Census::default()));
}

/// Two inserts find the full base table at once and both grow \[G1\] \[G2\]. Neither key is
/// lost, each is found by its own thread at once, and exactly one table is added.
fn inserts_race_growth(grow: fn(&Tables, usize) -> Result<(), GrowFailure>) {
    let t = tables(2);
    for fp in 1..=4 {
        assert_eq!(t.insert(filler(fp), false), Ok(Inserted::Added));
    }
    let inserter = |key| {
        move |t: &Tables| {
            assert_eq!(t.insert_with_broken_growth(key, grow), Ok(Inserted::Added));
            assert!(t.contains(key), "an insert that returned is not found");
        }
    };
    let a = spawn(&t, inserter(filler(5)));
    let b = spawn(&t, inserter(filler(6)));
    a.join().unwrap();
    b.join().unwrap();
    assert!((1..=6).all(|fp| t.contains(filler(fp))));
    assert_eq!(t.len(), 6);
    assert_eq!(t.growth_steps(), 1, "racing inserts added more than one table");
}

#[test]
fn loom_growth_inserts_race_growth() {
    loom::model(|| inserts_race_growth(Tables::grow));
}

#[test]
#[should_panic(expected = "added more than one table")]
fn loom_growth_inserts_control_unchecked() {
    loom::model(|| inserts_race_growth(Tables::grow_unchecked));
}

#[test]
#[should_panic(expected = "counted before it was filled")]
fn loom_growth_inserts_control_reserving_first() {
    loom::model(|| inserts_race_growth(Tables::grow_reserving_first));
}

/// \[G5\]: two unique inserts of `K`, one of them after growing the filter, add one copy. The
/// one that loaded `grown` before the growth must not put into the base table once the other
/// has checked it.
fn unique_inserts_race_growth(check_newest: bool) {
    let t = tables(1);
    let stale = spawn(&t, move |t| {
        if check_newest {
            t.insert(K, true).unwrap()
        } else {
            t.base().insert(K, true).unwrap()
        }
    });
    let grower = spawn(&t, |t| {
        t.grow(0).unwrap();
        t.insert(K, true).unwrap()
    });
    let added = [stale.join().unwrap(), grower.join().unwrap()]
        .iter()
        .filter(|&&i| i == Inserted::Added)
        .count();
    assert_eq!(added, 1, "two unique inserts of one key both added a copy");
    assert_eq!(t.count(K), 1);
}

#[test]
fn loom_growth_unique_inserts_race_growth() {
    loom::model(|| unique_inserts_race_growth(true));
}

#[test]
#[should_panic(expected = "both added a copy")]
fn loom_growth_unique_control_unchecked_newest() {
    loom::model(|| unique_inserts_race_growth(false));
}
