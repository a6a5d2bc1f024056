//! [`Table`]: the table of whichever fingerprint width a filter was built with, so that the
//! filter above it holds one type and dispatches on the width once per call, on a branch that
//! always goes the same way.

use std::hash::{BuildHasher, Hash};

use super::geometry::{Flat, Nested};
use super::{Extra, InsertFailure, Inserted, Probe, RawTable};
use crate::fingerprint::{Fp16, Fp8, Layout};
use crate::stats::Stats;

/// Keys hashed and prefetched ahead of probing in [`Table::contains_many`].
const BATCH: usize = 16;

/// The table of one fingerprint width: flat (a filter's base table) or nested (a table growth
/// added; see `geometry`).
#[derive(Debug)]
pub(crate) enum Table {
    Fp8(RawTable<Fp8>),
    Fp16(RawTable<Fp16>),
    Fp8Nested(RawTable<Fp8, Nested>),
    Fp16Nested(RawTable<Fp16, Nested>),
}

/// Runs `$body` with `$t` bound to the table of whichever width `$table` has.
macro_rules! with_table {
    ($table:expr, $t:ident => $body:expr) => {
        match $table {
            Table::Fp8($t) => $body,
            Table::Fp16($t) => $body,
            Table::Fp8Nested($t) => $body,
            Table::Fp16Nested($t) => $body,
        }
    };
}

impl Table {
    /// A table of `buckets` empty buckets of `bits`-bit fingerprints (8 or 16), searching
    /// paths of at most `max_path_len` buckets, by random walks of `kicks` steps if `kicks` is
    /// not 0. `None` if the buckets cannot be allocated.
    pub(crate) fn new(
        bits: u32,
        buckets: usize,
        max_path_len: usize,
        kicks: usize,
    ) -> Option<Self> {
        debug_assert!(bits == Fp8::BITS || bits == Fp16::BITS);
        if bits == Fp8::BITS {
            RawTable::new(buckets, max_path_len).map(|t| Table::Fp8(t.with_random_walk(kicks)))
        } else {
            RawTable::new(buckets, max_path_len).map(|t| Table::Fp16(t.with_random_walk(kicks)))
        }
    }

    /// A table of `bits`-bit fingerprints whose words `fill` supplies ([`RawTable::load`]):
    /// the base table (`shift` `None`) of `buckets` buckets, or a table nested over a base
    /// of `buckets` buckets with `2^shift` sub-buckets each.
    pub(crate) fn load<E>(
        bits: u32,
        buckets: usize,
        shift: Option<u32>,
        max_path_len: usize,
        kicks: usize,
        fill: impl FnMut(&mut [u64]) -> Result<(), E>,
        no_memory: impl FnOnce(usize) -> E,
    ) -> Result<Self, E> {
        debug_assert!(bits == Fp8::BITS || bits == Fp16::BITS);
        let flat = Flat {
            buckets: buckets as u64,
        };
        let nested = |shift| Nested {
            base: buckets as u64,
            shift,
        };
        Ok(match (bits == Fp8::BITS, shift) {
            (true, None) => Table::Fp8(
                RawTable::load(flat, max_path_len, fill, no_memory)?.with_random_walk(kicks),
            ),
            (false, None) => Table::Fp16(
                RawTable::load(flat, max_path_len, fill, no_memory)?.with_random_walk(kicks),
            ),
            (true, Some(shift)) => Table::Fp8Nested(
                RawTable::load(nested(shift), max_path_len, fill, no_memory)?
                    .with_random_walk(kicks),
            ),
            (false, Some(shift)) => Table::Fp16Nested(
                RawTable::load(nested(shift), max_path_len, fill, no_memory)?
                    .with_random_walk(kicks),
            ),
        })
    }

    /// [`RawTable::copy_out`] of this table.
    pub(crate) fn copy_out<E>(
        &self,
        chunk: usize,
        sink: impl FnMut(&[u64]) -> Result<(), E>,
    ) -> Result<Vec<Extra>, E> {
        with_table!(self, t => t.copy_out(chunk, sink))
    }

    /// [`RawTable::place_extra`] of this table.
    pub(crate) fn place_extra(&mut self, extra: Extra) -> bool {
        with_table!(self, t => t.place_extra(extra))
    }

    #[inline(always)]
    pub(crate) fn contains(&self, hash: u64) -> bool {
        with_table!(self, t => t.contains(t.probe(hash)))
    }

    pub(crate) fn count(&self, hash: u64) -> usize {
        with_table!(self, t => t.count(t.probe(hash)))
    }

    pub(crate) fn count_locked(&self, hash: u64) -> usize {
        with_table!(self, t => t.count_locked(t.probe(hash)))
    }

    #[inline]
    pub(crate) fn insert(&self, hash: u64, unique: bool) -> Result<Inserted, InsertFailure> {
        with_table!(self, t => t.insert(t.probe(hash), unique))
    }

    pub(crate) fn insert_while(
        &self,
        hash: u64,
        unique: bool,
        still_newest: impl Fn() -> bool,
    ) -> Result<Inserted, InsertFailure> {
        with_table!(self, t => t.insert_while(t.probe(hash), unique, still_newest))
    }

    /// An empty nested table over this (flat) one, with `2^shift` sub-buckets per bucket and
    /// the same width, path length and displacement; `None` if it cannot be allocated.
    pub(crate) fn nested(&self, shift: u32) -> Option<Self> {
        let (base, len, kicks) = (
            self.num_buckets(),
            self.max_path_len(),
            self.random_walk_kicks(),
        );
        if self.fingerprint_bits() == Fp8::BITS {
            RawTable::nested(base, shift, len).map(|t| Table::Fp8Nested(t.with_random_walk(kicks)))
        } else {
            RawTable::nested(base, shift, len).map(|t| Table::Fp16Nested(t.with_random_walk(kicks)))
        }
    }

    #[inline]
    pub(crate) fn remove(&self, hash: u64) -> bool {
        with_table!(self, t => t.remove(t.probe(hash)))
    }

    /// Writes `results[i] = contains(hash of keys[i])`: hashes and prefetches `BATCH` keys at
    /// a time, then probes them, so the memory loads of consecutive keys overlap.
    ///
    /// # Panics
    ///
    /// If `keys` and `results` differ in length.
    pub(crate) fn contains_many<K: Hash, S: BuildHasher>(
        &self,
        hasher: &S,
        keys: &[K],
        results: &mut [bool],
    ) {
        assert_eq!(
            keys.len(),
            results.len(),
            "contains_many: {} keys but {} result slots",
            keys.len(),
            results.len()
        );
        with_table!(self, t => {
            let mut probes = [Probe::default(); BATCH];
            for (keys, results) in keys.chunks(BATCH).zip(results.chunks_mut(BATCH)) {
                for (probe, key) in probes.iter_mut().zip(keys) {
                    *probe = t.probe(hasher.hash_one(key));
                    t.prefetch(*probe);
                }
                for (probe, result) in probes.iter().zip(results.iter_mut()) {
                    *result = t.contains(*probe);
                }
            }
        })
    }

    pub(crate) fn fingerprint_bits(&self) -> u32 {
        match self {
            Table::Fp8(_) | Table::Fp8Nested(_) => Fp8::BITS,
            Table::Fp16(_) | Table::Fp16Nested(_) => Fp16::BITS,
        }
    }

    pub(crate) fn len(&self) -> usize {
        with_table!(self, t => t.len())
    }

    pub(crate) fn capacity(&self) -> usize {
        with_table!(self, t => t.capacity())
    }

    pub(crate) fn num_buckets(&self) -> usize {
        with_table!(self, t => t.num_buckets())
    }

    pub(crate) fn random_walk_kicks(&self) -> usize {
        with_table!(self, t => t.random_walk_kicks())
    }

    pub(crate) fn max_path_len(&self) -> usize {
        with_table!(self, t => t.max_path_len())
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        with_table!(self, t => t.heap_bytes())
    }

    pub(crate) fn clear(&self) {
        with_table!(self, t => t.clear())
    }

    pub(crate) fn stats(&self) -> Stats {
        with_table!(self, t => t.counters().snapshot(t.len(), t.capacity(), t.max_path_len()))
    }
}
