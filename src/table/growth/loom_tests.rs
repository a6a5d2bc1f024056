//! Loom models of growth (\[growth.G1\] to \[growth.G5\] in `growth`).
//!
//! As in the table's models, every actor is a spawned thread, the main thread only sets up,
//! joins and asserts, and each model has a negative control running a broken variant of the
//! step under test. The base table has one bucket of four slots and each grown table two
//! buckets, so a handful of keys fill them.

use loom::sync::Arc;
use loom::thread;

use super::super::loom_tests::{explore, Census};
use super::{Broken, Tables};
use crate::sync::{AtomicBool, Ordering};
use crate::table::{stripe, Inserted, Table, Width};

/// The key whose copies the models move about (fingerprint 7, sub-bucket 0).
const K: u64 = 0x0000_0001_0000_0007;

/// A key with `K`'s fingerprint and base bucket and the other sub-bucket of a two-bucket grown
/// table (their pairs there differ when the fingerprint's sub-bucket offset is even).
const K2: u64 = 0x0000_0001_0001_0007;

/// A key with fingerprint `fp` (1 to 6: none collides with `K` or another filler).
fn filler(fp: u64) -> u64 {
    assert!((1..7).contains(&fp));
    (fp << 40) | fp
}

/// A filter of one one-bucket base table that may add `max_steps` tables, doubling, with
/// `broken` in its growth protocol.
fn tables(max_steps: usize, broken: Broken) -> Arc<Tables> {
    let base = Table::new(Width::Fp15, 1, 1, 0).expect("a tiny table");
    let mut t = Tables::new(base, 1, max_steps);
    t.broken = broken;
    Arc::new(t)
}

/// Runs `f` on a spawned loom thread with the shared tables.
fn spawn<T: Send + 'static>(
    t: &Arc<Tables>,
    f: impl FnOnce(&Tables) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let t = Arc::clone(t);
    thread::spawn(move || f(&t))
}

/// A stale writer loaded `grown` before another thread grew the filter, so its insert of `K`
/// lands in the base table; it then removes `K`, and \[growth.G3\] takes the copy the other thread
/// put into the new table (the newest match). The other thread, `G`, grew, inserted `K` and
/// then looks `K` up (`remove_after`: removes it); the writer's copy in the base table stands in
/// for `G`'s. A lookup or remove reading the base table first can read it before the writer's
/// put and the new table after its take. `broken` breaks the grower's lookup (for the whole
/// filter: the writer does not look up) or remove (for the grower's call only: the writer's
/// remove must take the grower's copy).
fn stale_put_then_take(remove_after: bool, broken: Broken, census: Census) {
    let oldest_first = broken.lookup_oldest_first || broken.remove_oldest_first;
    let t = tables(
        1,
        Broken {
            remove_oldest_first: false,
            ..broken
        },
    );
    let writer = spawn(&t, |t| {
        assert_eq!(t.insert(K, false), Ok(Inserted::Added));
        t.remove(K)
    });
    let grower = spawn(&t, move |t| {
        t.grow(0).unwrap();
        assert_eq!(t.insert(K, false), Ok(Inserted::Added));
        if remove_after {
            t.remove_traced(K, broken)
        } else {
            t.find(K)
        }
    });
    let writer_removed = writer.join().unwrap();
    let found = grower.join().unwrap();
    assert!(
        found.is_some(),
        "the grower missed a copy of a key its own thread inserted"
    );
    if oldest_first {
        // A broken grower's remove can also take the copy that a writer still reading the
        // base table alone needs: the controls fail on the grower's own miss only.
        return;
    }
    assert!(
        writer_removed,
        "the writer missed a copy of a key its own thread inserted"
    );
    // The writer's copy in the base table answered (or was taken): the writer took the
    // grower's copy from the new table first.
    census.saw(found == Some(0));
    assert_eq!(t.count(K), usize::from(!remove_after));
}

#[test]
fn loom_growth_lookup_reads_newest_first() {
    explore("a lookup answered by the stale writer's copy", |census| {
        stale_put_then_take(false, Broken::default(), census)
    });
}

#[test]
#[should_panic(expected = "the grower missed a copy of a key its own thread inserted")]
fn loom_growth_control_lookup_oldest_first() {
    loom::model(|| {
        stale_put_then_take(
            false,
            Broken {
                lookup_oldest_first: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

#[test]
fn loom_growth_remove_scans_newest_first() {
    explore(
        "a remove that took the writer's copy from the base table",
        |census| stale_put_then_take(true, Broken::default(), census),
    );
}

#[test]
#[should_panic(expected = "the grower missed a copy of a key its own thread inserted")]
fn loom_growth_control_remove_oldest_first() {
    loom::model(|| {
        stale_put_then_take(
            true,
            Broken {
                remove_oldest_first: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// Invariant (b): `K2` shares `K`'s fingerprint and base bucket but not its buckets in the grown
/// table. With `K` in the base table and `K2` in the grown one, removing `K2` must take `K2`'s
/// copy (the newest match), never `K`'s, while a lookup of `K` runs.
fn remove_takes_its_own_class(broken: Broken, census: Census) {
    let t = tables(1, broken);
    assert_eq!(t.insert(K, false), Ok(Inserted::Added));
    t.grow(0).unwrap();
    assert_eq!(t.insert(K2, false), Ok(Inserted::Added));
    assert_eq!(
        t.count(K),
        1,
        "K2 must not share K's buckets in the grown table"
    );
    let removed = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&removed);
    let remover = spawn(&t, move |t| {
        let took = t.remove(K2);
        // ORDERING: Release; the census edge from the remove to a lookup that sees it done.
        done.store(true, Ordering::Release);
        took
    });
    let reader = spawn(&t, move |t| {
        // ORDERING: Acquire; pairs with the remover's Release store (census only).
        let after_the_remove = removed.load(Ordering::Acquire);
        (t.contains(K), after_the_remove)
    });
    assert!(remover.join().unwrap());
    let (found, after_the_remove) = reader.join().unwrap();
    assert!(found, "a remove of K2 took K's copy");
    census.saw(after_the_remove);
}

#[test]
fn loom_growth_remove_takes_the_newest_match() {
    // The lookup of K read the base table after the remove of K2 returned: had the remove
    // taken the oldest match, K's copy would be gone.
    explore(
        "a lookup of K that began after the remove of K2 returned",
        |c| remove_takes_its_own_class(Broken::default(), c),
    );
}

#[test]
#[should_panic(expected = "took K's copy")]
fn loom_growth_control_remove_oldest_first_newest_match() {
    loom::model(|| {
        remove_takes_its_own_class(
            Broken {
                remove_oldest_first: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// Two inserts find the full base table at once and both grow \[growth.G1\] \[growth.G2\]. Neither key is
/// lost, each is found by its own thread at once, and exactly one table is added.
fn inserts_race_growth(broken: Broken, census: Census) {
    let t = tables(2, broken);
    for fp in 1..=4 {
        assert_eq!(t.insert(filler(fp), false), Ok(Inserted::Added));
    }
    let inserter = |key| {
        move |t: &Tables| {
            assert_eq!(t.insert(key, false), Ok(Inserted::Added));
            assert!(t.contains(key), "an insert that returned is not found");
        }
    };
    let a = spawn(&t, inserter(filler(5)));
    let b = spawn(&t, inserter(filler(6)));
    a.join().unwrap();
    b.join().unwrap();
    assert!((1..=6).all(|fp| t.contains(filler(fp))));
    assert_eq!(t.len(), 6);
    assert_eq!(
        t.growth_steps(),
        1,
        "racing inserts added more than one table"
    );
    // Both inserts found the base table full and called the growth step: [growth.G1]'s check made
    // the later call a no-op.
    census.saw(t.full_then_grown() == 2);
}

#[test]
fn loom_growth_inserts_race_growth() {
    explore("two inserts that both called the growth step", |c| {
        inserts_race_growth(Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "added more than one table")]
fn loom_growth_control_grow_unchecked() {
    loom::model(|| {
        inserts_race_growth(
            Broken {
                grow_unchecked: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

#[test]
#[should_panic(expected = "counted before it was filled")]
fn loom_growth_control_grow_reserving_first() {
    loom::model(|| {
        inserts_race_growth(
            Broken {
                grow_reserving_first: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// \[growth.G5\]: two unique inserts of `K`, one of them after growing the filter, add one copy. The
/// one that loaded `grown` before the growth must not put into the base table once the other
/// has checked it.
fn unique_inserts_race_growth(broken: Broken, census: Census) {
    let t = tables(1, broken);
    let stale = spawn(&t, move |t| t.insert(K, true).unwrap());
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
    // The stale insert loaded `grown` before the growth, and its put into the base table was
    // refused under the base's locks [growth.G5]: it retried in the new table.
    census.saw(t.outgrown_retries() > 0);
}

#[test]
fn loom_growth_unique_inserts_race_growth() {
    explore(
        "a stale unique insert refused by [growth.G5] and retried",
        |c| unique_inserts_race_growth(Broken::default(), c),
    );
}

#[test]
#[should_panic(expected = "both added a copy")]
fn loom_growth_control_unique_outgrown_unchecked() {
    loom::model(|| {
        unique_inserts_race_growth(
            Broken {
                unique_outgrown_unchecked: true,
                ..Broken::default()
            },
            Census::default(),
        )
    });
}

/// A net move inside an older table under a lookup that reads the newest table
/// first. The base table has two buckets, and `K` and `K2` share fingerprint 7 and the base
/// pair {0, 1} (but not a pair in the grown table). Bucket 0 holds `K` and three fillers. A
/// stale writer puts `K2` into the base table (bucket 1, its primary being full), then removes
/// `K2`: no match in the grown table, so it takes the first match in the base table, in its
/// primary bucket 0, which is `K`'s copy; `K2`'s copy in bucket 1 stands in for `K`. A lookup
/// of `K` (grown table, then base) must find it, from a validated read of the base.
fn stale_net_move_in_an_older_table(broken: stripe::Broken, census: Census) {
    let mut base = Table::new(Width::Fp15, 2, 1, 0).expect("a tiny table");
    let Table::Fp15(raw) = &mut base else {
        unreachable!("a 15-bit flat base")
    };
    raw.broken = broken;
    let t = Arc::new(Tables::new(base, 1, 1));
    assert_eq!(t.insert(K, false), Ok(Inserted::Added));
    for fp in 1..=3 {
        assert_eq!(t.insert(filler(fp), false), Ok(Inserted::Added));
    }
    t.grow(0).unwrap();
    let writer = spawn(&t, move |t| {
        // A writer that loaded `grown` before the growth [growth.G2].
        assert_eq!(t.base().insert(K2, false), Ok(Inserted::Added));
        assert!(t.remove(K2), "a remove of an inserted key found no copy");
    });
    let reader = spawn(&t, |t| t.find(K));
    writer.join().unwrap();
    let found = reader.join().unwrap();
    assert!(
        found.is_some(),
        "false negative: K lost to a net move in the base table"
    );
    assert_eq!(t.count(K), 1, "K2's copy must stand in for K");
    assert_eq!(t.count(K2), 1);
    let stats = t.base().stats();
    census.saw(found == Some(0) && stats.read_retries > 0 && stats.read_fallbacks == 0);
}

#[test]
fn loom_growth_stale_net_move_in_an_older_table() {
    explore("a lookup of K raced the net move and validated", |c| {
        stale_net_move_in_an_older_table(stripe::Broken::default(), c)
    });
}

#[test]
#[should_panic(expected = "K lost to a net move in the base table")]
fn loom_growth_control_remove_unversioned() {
    loom::model(|| {
        // [growth.G3] newest first, but the base table's take has no version window.
        stale_net_move_in_an_older_table(
            stripe::Broken {
                remove_unversioned: true,
                ..stripe::Broken::default()
            },
            Census::default(),
        )
    });
}
