//! Would a layout that keeps a key's two buckets in one cache line, in the style of the Morton
//! filter's blocks, answer negatives faster than this crate's one-word buckets? A
//! single-threaded model of such a layout, measured beside the two-line probe
//! (`benches/contenders.rs`) and this crate's 16-bit class in one process (BENCHMARKS.md,
//! "A cache-line layout, measured").
//!
//! ```sh
//! cargo run --release --example line_study                  # 16M keys at 94% load
//! cargo run --release --example line_study -- 200000000 0.94  # keys, load
//! ```
//!
//! The model: 64-byte lines on huge pages (as this crate's tables), each a header word (32
//! overflow bits; the other 32 left for a version) and 7 bucket words of four 16-bit
//! fingerprints. A key has a line, two buckets in it (a pair chosen by its fingerprint) and a
//! second line (an involution of the first line and the fingerprint), so a copy has four
//! places. An insert fills either bucket; failing that, it moves copies between the line's
//! buckets (breadth first); then it tries the second line and sets its fingerprint's
//! overflow bit in the first; last, it kicks copies across lines, and a copy that leaves a
//! line sets its bit there. A negative reads the first line's two buckets and its header,
//! and the second line only when the bit is set.
//!
//! The lookups measured, each a bound on the ones after it:
//! - one bucket word of the line, nothing else (unsound: a bound on any one-line lookup);
//! - both bucket words, no header (unsound: the layout with no overflow at all);
//! - the layout (sound here, single-threaded);
//! - the layout with the header read again after the buckets, as a seqlock reader would:
//!   the least a concurrent reader adds (writers are not modelled).
//!
//! Each is paired with the probe over the same bytes: 7 rounds, medians of the rounds'
//! ratios, 4,194,304 distinct absent keys. The run fails if the layout loses a key.

#[path = "../benches/contenders.rs"]
mod contenders;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use contenders::{
    advise_huge_pages, built_class, insert_members, member, non_member, paired, scalar, splitmix,
    Contender, Probe,
};

/// Bucket words per line, after the header word.
const BUCKETS: usize = 7;
const SLOTS: usize = 4 * BUCKETS;
const ONES: u64 = 0x0001_0001_0001_0001;
const HIGHS: u64 = 0x8000_8000_8000_8000;
/// Kicks across lines before an insert gives up, as in the cuckoo filter paper.
const MAX_KICKS: usize = 500;

/// The inserts' random choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 += 1;
        splitmix(self.0 ^ 0xABCD_0000_0000)
    }
}

/// Does a 16-bit lane of `word` hold `fp` (the exact "has a zero lane" test on `word ^ fp`)?
#[inline]
fn has(word: u64, fp: u64) -> bool {
    let v = word ^ (fp * ONES);
    (v.wrapping_sub(ONES) & !v & HIGHS) != 0
}

/// The two buckets of a fingerprint in a line add up to this, modulo 7.
#[inline]
fn pair_sum(fp: u64) -> usize {
    ((fp * 7) >> 16) as usize
}

/// The other bucket of the pair that holds `fp` in bucket `b` (an involution).
#[inline]
fn other_bucket(b: usize, fp: u64) -> usize {
    let d = pair_sum(fp) as isize - b as isize;
    (d + BUCKETS as isize * ((d < 0) as isize)) as usize
}

/// The overflow bit of `fp` in a line's header: its top five bits choose one of 32.
#[inline]
fn bit(fp: u64) -> u64 {
    1 << (fp >> 11)
}

/// Where a key's copy may be: its first line, its fingerprint, its bucket pair.
struct Spot {
    line: usize,
    fp: u64,
    b1: usize,
    b2: usize,
}

/// One cache line: the header word, then the bucket words. Single-threaded throughout: the
/// atomics (all `Relaxed`) only keep the compiler from merging the header's two reads.
#[repr(align(64))]
struct Line([AtomicU64; 8]);

/// The layout's table.
struct Lines {
    table: Vec<Line>,
}

/// The lookups measured (see the file's docs), as `Lookup`'s parameter.
const ONE_WORD: u8 = 0;
const TWO_WORDS: u8 = 1;
const LAYOUT: u8 = 2;
const VALIDATED: u8 = 3;

/// `Lines` looked up with one of the lookups, chosen at compile time.
struct Lookup<'a, const KIND: u8>(&'a Lines);

impl Lines {
    fn new(lines: usize) -> Lines {
        let mut table: Vec<Line> = Vec::with_capacity(lines);
        advise_huge_pages(&table);
        table.extend((0..lines).map(|_| Line(std::array::from_fn(|_| AtomicU64::new(0)))));
        Lines { table }
    }

    #[inline]
    fn spot(&self, key: u64) -> Spot {
        let h = splitmix(key);
        let line = (((h >> 32) * self.table.len() as u64) >> 32) as usize;
        let mut fp = h & 0xFFFF;
        fp += (fp == 0) as u64;
        let b1 = ((((h >> 16) & 0xFFFF) * BUCKETS as u64) >> 16) as usize;
        Spot {
            line,
            fp,
            b1,
            b2: other_bucket(b1, fp),
        }
    }

    #[inline]
    fn other_line(&self, line: usize, fp: u64) -> usize {
        let n = self.table.len();
        let c = (((fp.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) * n as u64) >> 32) as usize;
        (c + n - line) % n
    }

    fn get(&self, line: usize, b: usize) -> u64 {
        self.table[line].0[1 + b].load(Relaxed)
    }

    fn set(&self, line: usize, b: usize, w: u64) {
        self.table[line].0[1 + b].store(w, Relaxed)
    }

    fn lane(w: u64, s: usize) -> u64 {
        (w >> (16 * s)) & 0xFFFF
    }

    fn with_lane(w: u64, s: usize, fp: u64) -> u64 {
        (w & !(0xFFFF << (16 * s))) | (fp << (16 * s))
    }

    fn free_slot(w: u64) -> Option<usize> {
        (0..4).find(|&s| Self::lane(w, s) == 0)
    }

    fn set_bit(&self, line: usize, fp: u64) {
        self.table[line].0[0].fetch_or(bit(fp), Relaxed);
    }

    /// Puts `fp` into bucket `b` or its pair in `line`, moving copies inside the line
    /// (breadth-first over the line's buckets) if both are full.
    fn place_in_line(&self, line: usize, b: usize, fp: u64) -> bool {
        let mut parent = [None::<(usize, usize)>; BUCKETS];
        let mut seen = [false; BUCKETS];
        let mut queue = [0usize; BUCKETS];
        let (mut head, mut tail) = (0, 0);
        for root in [b, other_bucket(b, fp)] {
            if !seen[root] {
                seen[root] = true;
                queue[tail] = root;
                tail += 1;
            }
        }
        while head < tail {
            let x = queue[head];
            head += 1;
            let wx = self.get(line, x);
            if let Some(s) = Self::free_slot(wx) {
                // Walk back: fill x's free slot from its parent, and so on to a root.
                let (mut to, mut to_slot) = (x, s);
                while let Some((from, from_slot)) = parent[to] {
                    let moved = Self::lane(self.get(line, from), from_slot);
                    self.set(
                        line,
                        to,
                        Self::with_lane(self.get(line, to), to_slot, moved),
                    );
                    to = from;
                    to_slot = from_slot;
                }
                self.set(line, to, Self::with_lane(self.get(line, to), to_slot, fp));
                return true;
            }
            for s in 0..4 {
                let y = other_bucket(x, Self::lane(wx, s));
                if !seen[y] {
                    seen[y] = true;
                    parent[y] = Some((x, s));
                    queue[tail] = y;
                    tail += 1;
                }
            }
        }
        false
    }

    fn insert(&self, key: u64, rng: &mut Rng) -> bool {
        let s = self.spot(key);
        if self.place_in_line(s.line, s.b1, s.fp) {
            return true;
        }
        let alt = self.other_line(s.line, s.fp);
        if alt != s.line && self.place_in_line(alt, s.b1, s.fp) {
            self.set_bit(s.line, s.fp);
            return true;
        }
        // Random walk across lines: the new copy takes a slot in its primary line and the
        // evicted copy leaves for its other line, setting its bit in the line it leaves.
        let (mut line, mut b, mut fp) =
            (s.line, if rng.next() & 1 == 0 { s.b1 } else { s.b2 }, s.fp);
        for _ in 0..MAX_KICKS {
            let slot = (rng.next() % 4) as usize;
            let w = self.get(line, b);
            let victim = Self::lane(w, slot);
            self.set(line, b, Self::with_lane(w, slot, fp));
            self.set_bit(line, victim);
            let next = self.other_line(line, victim);
            if next != line && self.place_in_line(next, b, victim) {
                return true;
            }
            line = next;
            b = if rng.next() & 1 == 0 {
                b
            } else {
                other_bucket(b, victim)
            };
            fp = victim;
        }
        false
    }

    /// Absent with its primary's bit set: the share of negatives that read a second line.
    fn reads_second(&self, key: u64) -> bool {
        let s = self.spot(key);
        !Lookup::<TWO_WORDS>(self).contains(key)
            && self.table[s.line].0[0].load(Relaxed) & bit(s.fp) != 0
    }
}

impl<const KIND: u8> Contender for Lookup<'_, KIND> {
    #[inline(always)]
    fn contains(&self, key: u64) -> bool {
        let s = self.0.spot(key);
        let w = &self.0.table[s.line].0;
        if KIND == ONE_WORD {
            return has(w[1 + s.b1].load(Relaxed), s.fp);
        }
        if KIND == TWO_WORDS {
            return has(w[1 + s.b1].load(Relaxed), s.fp) | has(w[1 + s.b2].load(Relaxed), s.fp);
        }
        let head = w[0].load(Relaxed);
        if has(w[1 + s.b1].load(Relaxed), s.fp) | has(w[1 + s.b2].load(Relaxed), s.fp) {
            return true;
        }
        let validated = KIND != VALIDATED || w[0].load(Relaxed) == head;
        if head & bit(s.fp) == 0 && validated {
            return false;
        }
        let a = &self.0.table[self.0.other_line(s.line, s.fp)].0;
        has(a[1 + s.b1].load(Relaxed), s.fp) || has(a[1 + s.b2].load(Relaxed), s.fp)
    }
    fn insert(&self, _: u64) -> bool {
        unreachable!("filled through Lines::insert")
    }
    fn remove(&self, _: u64) -> Option<bool> {
        None
    }
}

fn print(name: &str, set: &impl Contender, probe: &Probe, misses: &[u64]) {
    let one = paired(misses, 1, scalar(set), scalar(probe));
    let two = paired(misses, 2, scalar(set), scalar(probe));
    println!(
        "  {name:<30} absent 1t {:6.1} M/s ({:.2}x probe {:.1})  2t {:6.1} ({:.2}x probe {:.1})",
        one.rate, one.ratio, one.probe, two.rate, two.ratio, two.probe,
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map_or(16_000_000, |a| a.parse().expect("keys: a number"));
    let load: f64 = args
        .next()
        .map_or(0.94, |a| a.parse().expect("load: a fraction"));
    let lines = (n as f64 / (SLOTS as f64 * load)).ceil() as usize;
    let table = Lines::new(lines);
    let mut rng = Rng(3);
    let start = Instant::now();
    if let Some(i) = (0..n as u64).find(|&i| !table.insert(member(i), &mut rng)) {
        eprintln!(
            "the layout refused key {i} of {n}, at {:.1}% load (a copy is lost: no lookups run)",
            i as f64 / (lines * SLOTS) as f64 * 100.0
        );
        std::process::exit(1);
    }
    let fill = start.elapsed().as_secs_f64();
    let layout = Lookup::<LAYOUT>(&table);
    let lost = (0..n as u64)
        .filter(|&i| !layout.contains(member(i)))
        .count();
    if lost > 0 {
        eprintln!("the layout lost {lost} of {n} keys");
        std::process::exit(1);
    }
    let misses: Vec<u64> = (0..1u64 << 22).map(non_member).collect();
    let second = misses.iter().filter(|&&k| table.reads_second(k)).count();
    let positives = misses.iter().filter(|&&k| layout.contains(k)).count();
    let bits_set: u64 = table
        .table
        .iter()
        .map(|l| u64::from(l.0[0].load(Relaxed).count_ones()))
        .sum();
    let bytes = lines * 64;
    let share = |count: usize| count as f64 / misses.len() as f64 * 100.0;
    println!(
        "{n} keys; line layout filled in {fill:.1} s, load {:.1}%, {:.2} bits per key, \
         {:.1}% of overflow bits set, {:.2}% of negatives read a second line, \
         {:.4}% false positives",
        n as f64 / (lines * SLOTS) as f64 * 100.0,
        bytes as f64 * 8.0 / n as f64,
        bits_set as f64 / (lines * 32) as f64 * 100.0,
        share(second),
        share(positives),
    );
    let probe = Probe::new(bytes);
    print(
        "one bucket word (unsound)",
        &Lookup::<ONE_WORD>(&table),
        &probe,
        &misses,
    );
    print(
        "two bucket words (unsound)",
        &Lookup::<TWO_WORDS>(&table),
        &probe,
        &misses,
    );
    print("line layout", &layout, &probe, &misses);
    print(
        "line layout, header re-read",
        &Lookup::<VALIDATED>(&table),
        &probe,
        &misses,
    );
    drop((table, probe));
    let filter = built_class(n, 16);
    let refused = insert_members(&filter, n);
    println!(
        "cuckoo-guard 16-bit class: load {:.1}%, {:.2} bits per key, {refused} refused",
        filter.load_factor() * 100.0,
        filter.memory_usage() as f64 * 8.0 / n as f64,
    );
    let probe = Probe::new(filter.memory_usage());
    print("cuckoo-guard 16-bit class", &filter, &probe, &misses);
}
