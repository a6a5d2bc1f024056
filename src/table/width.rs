//! [`Table`]: the table of whichever fingerprint width a filter was built with, so that the
//! filter above it holds one type and dispatches on the width once per call, on a branch that
//! always goes the same way.

use std::hash::{BuildHasher, Hash};

use super::geometry::{Flat, Nested};
use super::{Extra, InsertFailure, Inserted, Lookup, Probe, RawTable};
use crate::fingerprint::{Fp12, Fp15, Fp16, Fp8, Width};
use crate::stats::Stats;

/// Keys hashed and prefetched ahead of probing in [`Table::contains_many`].
const BATCH: usize = 16;

/// The table of one fingerprint layout: flat (a filter's base table) or nested (a table growth
/// added; see `geometry`).
#[derive(Debug)]
pub(crate) enum Table {
    Fp8(RawTable<Fp8>),
    Fp12(RawTable<Fp12>),
    Fp15(RawTable<Fp15>),
    Fp16(RawTable<Fp16>),
    Fp8Nested(RawTable<Fp8, Nested>),
    Fp12Nested(RawTable<Fp12, Nested>),
    Fp15Nested(RawTable<Fp15, Nested>),
    Fp16Nested(RawTable<Fp16, Nested>),
}

/// Runs `$body` with `$t` bound to the table of whichever layout `$table` has.
macro_rules! with_table {
    ($table:expr, $t:ident => $body:expr) => {
        match $table {
            Table::Fp8($t) => $body,
            Table::Fp12($t) => $body,
            Table::Fp15($t) => $body,
            Table::Fp16($t) => $body,
            Table::Fp8Nested($t) => $body,
            Table::Fp12Nested($t) => $body,
            Table::Fp15Nested($t) => $body,
            Table::Fp16Nested($t) => $body,
        }
    };
}

impl Table {
    /// A table of `buckets` empty buckets of layout `width`, searching paths of at most
    /// `max_path_len` buckets, by random walks of `kicks` steps if `kicks` is not 0. `None`
    /// if the buckets cannot be allocated.
    pub(crate) fn new(
        width: Width,
        buckets: usize,
        max_path_len: usize,
        kicks: usize,
    ) -> Option<Self> {
        Some(match width {
            Width::Fp8 => Table::Fp8(RawTable::new(buckets, max_path_len)?.with_random_walk(kicks)),
            Width::Fp12 => {
                Table::Fp12(RawTable::new(buckets, max_path_len)?.with_random_walk(kicks))
            }
            Width::Fp15 => {
                Table::Fp15(RawTable::new(buckets, max_path_len)?.with_random_walk(kicks))
            }
            Width::Fp16 => {
                Table::Fp16(RawTable::new(buckets, max_path_len)?.with_random_walk(kicks))
            }
        })
    }

    /// The heap bytes of a new table of `buckets` buckets of layout `width`
    /// ([`heap_bytes`](Self::heap_bytes)), computed without allocating it.
    pub(crate) fn heap_bytes_for(width: Width, buckets: usize) -> usize {
        match width {
            Width::Fp8 => RawTable::<Fp8>::heap_bytes_for(buckets),
            Width::Fp12 => RawTable::<Fp12>::heap_bytes_for(buckets),
            Width::Fp15 => RawTable::<Fp15>::heap_bytes_for(buckets),
            Width::Fp16 => RawTable::<Fp16>::heap_bytes_for(buckets),
        }
    }

    /// A table of layout `width` whose words `fill` supplies ([`RawTable::load`]): the base
    /// table (`shift` `None`) of `buckets` buckets, or a table nested over a base of `buckets`
    /// buckets with `2^shift` sub-buckets each.
    pub(crate) fn load<E>(
        width: Width,
        buckets: usize,
        shift: Option<u32>,
        max_path_len: usize,
        kicks: usize,
        fill: impl FnMut(&mut [u64]) -> Result<(), E>,
        no_memory: impl FnOnce(usize) -> E,
    ) -> Result<Self, E> {
        let flat = Flat {
            buckets: buckets as u64,
        };
        let nested = |shift| Nested {
            base: buckets as u64,
            shift,
        };
        let len = max_path_len;
        Ok(match (width, shift) {
            (Width::Fp8, None) => Table::Fp8(RawTable::load(flat, len, fill, no_memory)?),
            (Width::Fp12, None) => Table::Fp12(RawTable::load(flat, len, fill, no_memory)?),
            (Width::Fp15, None) => Table::Fp15(RawTable::load(flat, len, fill, no_memory)?),
            (Width::Fp16, None) => Table::Fp16(RawTable::load(flat, len, fill, no_memory)?),
            (Width::Fp8, Some(shift)) => {
                Table::Fp8Nested(RawTable::load(nested(shift), len, fill, no_memory)?)
            }
            (Width::Fp12, Some(shift)) => {
                Table::Fp12Nested(RawTable::load(nested(shift), len, fill, no_memory)?)
            }
            (Width::Fp15, Some(shift)) => {
                Table::Fp15Nested(RawTable::load(nested(shift), len, fill, no_memory)?)
            }
            (Width::Fp16, Some(shift)) => {
                Table::Fp16Nested(RawTable::load(nested(shift), len, fill, no_memory)?)
            }
        }
        .with_random_walk(kicks))
    }

    /// This table searching by random walks of `kicks` steps (0: breadth-first).
    fn with_random_walk(mut self, kicks: usize) -> Self {
        with_table!(&mut self, t => t.set_random_walk(kicks));
        self
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

    /// The two-line read \[stripe.R1\]..\[stripe.R3\]: for tables that are not the newest.
    #[inline(always)]
    pub(crate) fn contains(&self, hash: u64) -> bool {
        with_table!(self, t => t.contains(t.probe(hash)))
    }

    /// A lookup in the filter's newest table, one line when the primary answers
    /// \[overflow.R1\].
    #[inline(always)]
    pub(crate) fn contains_newest(&self, hash: u64) -> Lookup {
        with_table!(self, t => t.contains_newest_hash(hash))
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
        let (base, len) = (self.num_buckets(), self.max_path_len());
        let table = match self.width() {
            Width::Fp8 => Table::Fp8Nested(RawTable::nested(base, shift, len)?),
            Width::Fp12 => Table::Fp12Nested(RawTable::nested(base, shift, len)?),
            Width::Fp15 => Table::Fp15Nested(RawTable::nested(base, shift, len)?),
            Width::Fp16 => Table::Fp16Nested(RawTable::nested(base, shift, len)?),
        };
        Some(table.with_random_walk(self.random_walk_kicks()))
    }

    #[inline]
    pub(crate) fn remove(&self, hash: u64) -> bool {
        with_table!(self, t => t.remove(t.probe(hash)))
    }

    /// [`RawTable::remove_in_older`]: a remove in a table that is not the newest.
    #[inline]
    pub(crate) fn remove_in_older(&self, hash: u64) -> bool {
        with_table!(self, t => t.remove_in_older(t.probe(hash)))
    }

    /// Writes `results[i]`, the lookup of `keys[i]` in this table as the filter's newest: hashes
    /// and prefetches `BATCH` keys at a time, then probes them, so the memory loads of
    /// consecutive keys overlap. Primaries are prefetched first; the keys whose primary does
    /// not answer \[overflow.R1\] get their alternates prefetched and a two-line read after.
    /// Returns whether any "absent" came from one line: final only if the table is still the
    /// newest \[overflow.R2\]. `keys` and `results` have one length ([`Tables::contains_many`]
    /// checks).
    ///
    /// [`Tables::contains_many`]: super::Tables::contains_many
    pub(crate) fn contains_many<K: Hash, S: BuildHasher>(
        &self,
        hasher: &S,
        keys: &[K],
        results: &mut [bool],
    ) -> bool {
        debug_assert_eq!(keys.len(), results.len());
        let mut one_line = false;
        with_table!(self, t => {
            let mut probes = [Probe::default(); BATCH];
            let mut pending = [0u8; BATCH];
            for (keys, results) in keys.chunks(BATCH).zip(results.chunks_mut(BATCH)) {
                for (probe, key) in probes.iter_mut().zip(keys) {
                    *probe = t.probe(hasher.hash_one(key));
                    t.prefetch_newest(*probe);
                }
                let mut waiting = 0;
                for (i, (probe, result)) in probes.iter().zip(results.iter_mut()).enumerate() {
                    match t.one_line(*probe) {
                        Some(Lookup::Present) => *result = true,
                        Some(_) => {
                            *result = false;
                            one_line = true;
                        }
                        None => {
                            t.prefetch(*probe);
                            pending[waiting] = i as u8;
                            waiting += 1;
                        }
                    }
                }
                for &i in &pending[..waiting] {
                    results[usize::from(i)] = t.contains(probes[usize::from(i)]);
                }
            }
        });
        one_line
    }

    pub(crate) fn width(&self) -> Width {
        match self {
            Table::Fp8(_) | Table::Fp8Nested(_) => Width::Fp8,
            Table::Fp12(_) | Table::Fp12Nested(_) => Width::Fp12,
            Table::Fp15(_) | Table::Fp15Nested(_) => Width::Fp15,
            Table::Fp16(_) | Table::Fp16Nested(_) => Width::Fp16,
        }
    }

    /// Bits per slot (the width class the filter reports).
    pub(crate) fn fingerprint_bits(&self) -> u32 {
        self.width().class()
    }

    /// The share of overflow bits set (sampled; 0 for a layout without them).
    pub(crate) fn overflow_share(&self) -> f64 {
        with_table!(self, t => t.overflow_share())
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
        let mut stats =
            with_table!(self, t => t.counters().snapshot(t.len(), t.capacity(), t.max_path_len()));
        stats.overflow_share = self.overflow_share();
        stats
    }
}
