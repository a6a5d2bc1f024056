//! Where a key's two buckets are: [`Flat`] for a filter's base table, [`Nested`] for the
//! tables growth adds.
//!
//! A nested table of `base << shift` buckets splits each bucket `b` of the base table into
//! `2^shift` sub-buckets. Two keys that share a fingerprint and a bucket pair in a nested table
//! share them in every smaller nested table of the same base and in the base table: a copy a
//! remove finds in the newest table that holds one can stand in for the remover's own copy
//! in an older table (`growth`, invariant (b)).

use std::fmt::Debug;

use crate::fingerprint::{
    alternate_index, nested_alternate_index, nested_primary_index, primary_index,
};

/// A table's bucket count and its two index functions.
pub(crate) trait Geometry: Copy + Debug + Send + Sync + 'static {
    /// The number of buckets.
    fn buckets(&self) -> u64;
    /// The primary bucket of a 64-bit hash.
    fn primary(&self, hash: u64) -> u64;
    /// The other bucket of fingerprint `fp` stored in `index`: an involution.
    fn alternate(&self, index: u64, fp: u64) -> u64;
}

/// Any number of buckets, indexed by the high 32 bits of the hash.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flat {
    pub(crate) buckets: u64,
}

impl Geometry for Flat {
    #[inline(always)]
    fn buckets(&self) -> u64 {
        self.buckets
    }

    #[inline(always)]
    fn primary(&self, hash: u64) -> u64 {
        primary_index(hash, self.buckets)
    }

    #[inline(always)]
    fn alternate(&self, index: u64, fp: u64) -> u64 {
        alternate_index(index, fp, self.buckets)
    }
}

/// `base << shift` buckets: the base table's buckets, each split into `2^shift` sub-buckets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Nested {
    pub(crate) base: u64,
    pub(crate) shift: u32,
}

impl Geometry for Nested {
    #[inline(always)]
    fn buckets(&self) -> u64 {
        self.base << self.shift
    }

    #[inline(always)]
    fn primary(&self, hash: u64) -> u64 {
        nested_primary_index(hash, self.base, self.shift)
    }

    #[inline(always)]
    fn alternate(&self, index: u64, fp: u64) -> u64 {
        nested_alternate_index(index, fp, self.base, self.shift)
    }
}

#[cfg(all(test, not(cuckoo_loom)))]
mod tests {
    use super::*;
    use crate::fingerprint::{fingerprint, Fp16, Fp8};

    fn mix(x: u64) -> u64 {
        let x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^ (x >> 31)
    }

    /// The bucket pair of a key, as an ordered pair.
    fn pair(g: &impl Geometry, hash: u64, fp: u64) -> (u64, u64) {
        let p = g.primary(hash);
        let a = g.alternate(p, fp);
        (p.min(a), p.max(a))
    }

    #[test]
    fn nested_indices_are_in_range_and_alternate_is_an_involution() {
        for base in [1u64, 2, 3, 7, 100, 1_000_003] {
            for shift in [0, 1, 3, 16] {
                let g = Nested { base, shift };
                for k in 0..2_000u64 {
                    let h = mix(k);
                    let fp = fingerprint::<Fp8>(h);
                    let p = g.primary(h);
                    assert!(p < g.buckets());
                    let a = g.alternate(p, fp);
                    assert!(a < g.buckets());
                    assert_eq!(g.alternate(a, fp), p, "base {base} shift {shift}");
                }
            }
        }
    }

    #[test]
    fn a_collision_in_a_nested_table_is_one_in_every_smaller_table() {
        // Keys of one fingerprint and one base bucket, so that collisions are common.
        for base in [1u64, 5, 64] {
            let flat = Flat { buckets: base };
            let tables: Vec<Nested> = (0..=6).map(|shift| Nested { base, shift }).collect();
            let fp = 0x1234;
            let keys: Vec<u64> = (0..400u64)
                .map(|k| (mix(k) & !0xFFFF) | fp)
                .filter(|&h| fingerprint::<Fp16>(h) == fp)
                .collect();
            let mut collisions = 0;
            for (i, &x) in keys.iter().enumerate() {
                for &y in &keys[i + 1..] {
                    for (j, big) in tables.iter().enumerate() {
                        if pair(big, x, fp) != pair(big, y, fp) {
                            continue;
                        }
                        collisions += 1;
                        assert_eq!(pair(&flat, x, fp), pair(&flat, y, fp));
                        for small in &tables[..j] {
                            assert_eq!(pair(small, x, fp), pair(small, y, fp));
                        }
                    }
                }
            }
            assert!(collisions > 100, "too few collisions to test: {collisions}");
        }
    }

    #[test]
    fn a_nested_table_of_shift_zero_is_its_base() {
        for k in 0..1_000u64 {
            let h = mix(k);
            let fp = fingerprint::<Fp16>(h);
            let flat = Flat { buckets: 977 };
            let nested = Nested {
                base: 977,
                shift: 0,
            };
            assert_eq!(flat.primary(h), nested.primary(h));
            let p = flat.primary(h);
            assert_eq!(flat.alternate(p, fp), nested.alternate(p, fp));
        }
    }

    #[test]
    fn sub_buckets_are_used_evenly() {
        let g = Nested { base: 3, shift: 4 };
        let mut hits = vec![0u32; g.buckets() as usize];
        for k in 0..48_000u64 {
            hits[g.primary(mix(k)) as usize] += 1;
        }
        // 1,000 expected per bucket; 5 standard deviations is about 160.
        assert!(hits.iter().all(|&n| (800..1_200).contains(&n)), "{hits:?}");
    }
}
