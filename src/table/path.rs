//! Cuckoo paths: a breadth-first search (or, selectable for comparison, the cuckoo filter
//! paper's random walk) that reads the table without changing it, and an execution that moves
//! the free slot backwards along the path, one re-validated hop at a time. Both searches only
//! propose; every change to the table is a \[stripe.W3\] hop of [`displace`](RawTable::displace), so
//! the random walk adds no protocol step (and needs no loom model of its own: the hop models
//! cover every table write it leads to).
//!
//! The search follows libcuckoo: starting from both buckets of the new key, it expands a
//! bucket by queueing the alternate bucket of each of its fingerprints, and stops at the first
//! bucket with a free slot, so the path found is a shortest one. A path of `max_path_len`
//! buckets displaces at most `max_path_len - 1` fingerprints.
//!
//! Execution starts at the free end, so no fingerprint is ever out of the table (moving from
//! the key's end first would clear a slot before its fingerprint had a new home): the last
//! fingerprint on the path moves into the free slot, which frees its old slot for the
//! fingerprint before it, and so on, until a slot in the new key's own bucket is free. Each hop is one \[stripe.W3\] step of the protocol in
//! [`stripe`](super::stripe): it locks the stripes of its two buckets, checks that the
//! fingerprint is still where the search saw it and that the destination still has a free
//! slot, copies, then clears. If another writer changed either bucket since the search, the
//! hop is refused and the insert searches again; hops already made stay valid, since each only
//! moved a fingerprint to the other bucket of its own pair.

use super::geometry::Geometry;
use super::stripe::PairLock;
use super::{Probe, RawTable};
use crate::fingerprint::{empty_lanes, first_lane, lane, with_lane, Layout};
use crate::sync::Ordering;

/// The longest cuckoo path an insert may search, in buckets: the bound on the builder's
/// `max_path_len`, and the size of the arrays a path and the statistics' histogram use.
pub(crate) const MAX_PATH_LEN: usize = 8;

/// One displacement: the fingerprint `fp` in `slot` of bucket `from` moves to a free slot of
/// bucket `to`, the other bucket of its pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Hop {
    pub(crate) from: usize,
    pub(crate) slot: usize,
    pub(crate) fp: u64,
    pub(crate) to: usize,
}

/// A cuckoo path, stored in execution order: `hops[0]` moves into the free slot, the last hop
/// frees a slot in one of the new key's buckets. Empty if such a slot is already free.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Path {
    hops: [Hop; MAX_PATH_LEN - 1],
    len: usize,
}

impl Path {
    pub(crate) fn hops(&self) -> &[Hop] {
        &self.hops[..self.len]
    }
}

/// A search node: a bucket reached from `parent` by moving the fingerprint `fp` out of slot
/// `slot` of the parent's bucket.
#[derive(Debug, Clone, Copy)]
struct Node {
    bucket: u32,
    parent: u32,
    fp: u16,
    slot: u8,
    depth: u8,
}

/// The most nodes a search of paths up to `len` buckets can queue: two roots, each with up
/// to `slots` children per level.
fn queue_bound(slots: usize, len: usize) -> usize {
    2 * (0..len).map(|d| slots.pow(d as u32)).sum::<usize>()
}

impl<L: Layout, G: Geometry> RawTable<L, G> {
    /// Searches for the shortest cuckoo path from `p`'s buckets to a free slot.
    ///
    /// Reads bucket words without locks and stores nothing; the path is only a proposal,
    /// re-validated hop by hop by [`execute_path`](Self::execute_path). `None` means no bucket
    /// within `max_path_len` has a free slot.
    pub(crate) fn search_path(&self, p: Probe) -> Option<Path> {
        debug_assert!(queue_bound(L::SLOTS, MAX_PATH_LEN) <= u32::MAX as usize);
        let mut queue: Vec<Node> =
            Vec::with_capacity(queue_bound(L::SLOTS, self.max_path_len).min(256));
        let root = |bucket: usize| Node {
            bucket: bucket as u32,
            fp: 0,
            parent: 0,
            slot: 0,
            depth: 0,
        };
        queue.push(root(p.primary));
        if p.alternate != p.primary {
            queue.push(root(p.alternate));
        }
        let mut head = 0;
        while head < queue.len() {
            let node = queue[head];
            let bucket = node.bucket as usize;
            // ORDERING: Relaxed; the search only proposes, each hop re-validates under its
            // stripe locks [stripe.W3].
            let word = L::load(&self.buckets[bucket], Ordering::Relaxed);
            if empty_lanes::<L>(word) != 0 {
                return Some(Self::trace(&queue, head));
            }
            if usize::from(node.depth) + 1 < self.max_path_len {
                for slot in 0..L::SLOTS {
                    let fp = lane::<L>(word, slot);
                    let child = self.geometry.alternate(bucket as u64, fp) as usize;
                    // A fingerprint whose two buckets coincide cannot make room.
                    if fp == 0 || child == bucket {
                        continue;
                    }
                    queue.push(Node {
                        bucket: child as u32,
                        fp: fp as u16,
                        parent: head as u32,
                        slot: slot as u8,
                        depth: node.depth + 1,
                    });
                }
            }
            head += 1;
        }
        None
    }

    /// The path from a root to `queue[found]`, in execution order.
    fn trace(queue: &[Node], found: usize) -> Path {
        let mut path = Path::default();
        let mut node = queue[found];
        while node.depth > 0 {
            let parent = queue[node.parent as usize];
            path.hops[path.len] = Hop {
                from: parent.bucket as usize,
                slot: usize::from(node.slot),
                fp: u64::from(node.fp),
                to: node.bucket as usize,
            };
            path.len += 1;
            node = parent;
        }
        path
    }

    /// Searches a cuckoo path by a random walk, as the cuckoo filter paper inserts: from a
    /// random one of `p`'s buckets, repeatedly pick a random slot and follow its fingerprint
    /// to that fingerprint's other bucket, until a bucket has a free slot or
    /// `random_walk_kicks` steps are taken. Returns the path in execution order.
    ///
    /// Unlike the paper's walk, this one reads the table without changing it (the path is a
    /// proposal, executed and re-validated hop by hop like a breadth-first one, so a failed
    /// walk moves nothing and needs no victim slot), and it cuts out cycles: a step into a
    /// bucket already on the walk truncates the walk back to that bucket, so the path
    /// executed never visits a bucket twice. Its displacements are the loop-free length; the
    /// paper's in-place walk would make at least as many.
    pub(crate) fn random_walk(&self, p: Probe, attempt: u64) -> Option<Vec<Hop>> {
        // xorshift64* seeded from the probe and the attempt: walks differ between keys and
        // between an insert's retries, and need no shared state.
        let mut state = ((p.primary as u64) << 32 ^ p.fp ^ attempt.wrapping_mul(0x9E37_79B9))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            | 1;
        let mut next = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32
        };
        let mut bucket = if p.alternate != p.primary && next() & 1 == 1 {
            p.alternate
        } else {
            p.primary
        };
        let mut walk: Vec<Hop> = Vec::new();
        for _ in 0..=self.random_walk_kicks {
            // ORDERING: Relaxed; the walk only proposes, each hop re-validates under its
            // stripe locks [stripe.W3].
            let word = L::load(&self.buckets[bucket], Ordering::Relaxed);
            if empty_lanes::<L>(word) != 0 {
                walk.reverse();
                return Some(walk);
            }
            let slot = (next() % L::SLOTS as u64) as usize;
            let fp = lane::<L>(word, slot);
            let to = self.geometry.alternate(bucket as u64, fp) as usize;
            if fp == 0 || to == bucket {
                // Cannot make room; the step counts as a kick, so the loop stays bounded.
                continue;
            }
            walk.push(Hop {
                from: bucket,
                slot,
                fp,
                to,
            });
            // Cut cycles: back at one of the key's own buckets, start over from it; back at
            // a bucket the walk left earlier, resume from there.
            if to == p.primary || to == p.alternate {
                walk.clear();
            } else if let Some(first) = walk.iter().position(|h| h.from == to) {
                walk.truncate(first);
            }
            bucket = to;
        }
        None
    }

    /// Executes `hops` (a path in execution order) from its free end. Returns the hops made
    /// and whether all were made.
    pub(crate) fn execute_path(&self, hops: &[Hop]) -> (usize, bool) {
        for (done, hop) in hops.iter().enumerate() {
            if !self.displace(*hop) {
                return (done, false);
            }
        }
        (hops.len(), true)
    }

    /// One hop \[stripe.W3\]: moves `hop.fp` from `hop.slot` of `hop.from` to a free slot of `hop.to`,
    /// if both are still as the search saw them. Returns whether it moved.
    pub(crate) fn displace(&self, hop: Hop) -> bool {
        debug_assert_ne!(hop.from, hop.to);
        let from_stripe = self.stripe_of(hop.from);
        let to_stripe = self.stripe_of(hop.to);
        let mut locks = PairLock::acquire(&self.stripes, from_stripe, to_stripe);
        let source = &self.buckets[hop.from];
        let destination = &self.buckets[hop.to];
        // ORDERING: Relaxed; under both stripe locks, whose Acquire [stripe.W1] made the previous
        // holders' stores visible.
        let src = L::load(source, Ordering::Relaxed);
        if lane::<L>(src, hop.slot) != hop.fp {
            return false;
        }
        // ORDERING: Relaxed; as above.
        let dst = L::load(destination, Ordering::Relaxed);
        let free = empty_lanes::<L>(dst);
        if free == 0 {
            return false;
        }
        let watch = self.copy.watch();
        let version_stripe = self.stripe_of(hop.from.min(hop.to));
        #[cfg(cuckoo_loom)]
        let version_stripe = if self.broken.hop_versions_lower_lock {
            from_stripe.min(to_stripe)
        } else {
            version_stripe
        };
        #[cfg(not(cuckoo_loom))]
        locks.get(version_stripe).begin_take();
        #[cfg(cuckoo_loom)]
        if self.broken.hop_unfenced {
            locks.get(version_stripe).begin_take_unfenced();
        } else {
            locks.get(version_stripe).begin_take();
        }
        // ORDERING: Relaxed; [stripe.W3] copy first, after the Release fence of `begin_take`.
        L::store(
            destination,
            with_lane::<L>(dst, first_lane::<L>(free), hop.fp),
            Ordering::Relaxed,
        );
        let cleared = with_lane::<L>(src, hop.slot, 0);
        #[cfg(cuckoo_loom)]
        if self.broken.hop_bit_separate {
            // ORDERING: Relaxed; the clear and the bit in two stores: deliberately broken.
            L::store(source, cleared, Ordering::Relaxed);
        }
        // ORDERING: Relaxed; [stripe.W3] clear second, with the source's overflow bit in the
        // same store [overflow.W3]; a reader that sees this store sees the odd version through
        // the fences of [stripe.W3]/[stripe.R3].
        L::store(source, cleared | L::overflow_bit(hop.fp), Ordering::Relaxed);
        locks.get(version_stripe).end_take();
        locks.get(from_stripe).remove_fingerprint();
        locks.get(to_stripe).add_fingerprint();
        if let Some(watch) = watch {
            self.copy.after_take(watch, hop.from, hop.to, hop.fp);
        }
        true
    }

    /// Locks for tests that need to hold a pair while checking something.
    #[cfg(all(test, not(cuckoo_loom)))]
    pub(crate) fn lock_buckets(&self, a: usize, b: usize) -> PairLock<'_> {
        self.lock_pair(a, b)
    }
}

#[cfg(all(test, not(cuckoo_loom)))]
mod tests {
    use super::*;
    use crate::fingerprint::{alternate_index, Fp16, SLOTS};

    /// A fingerprint whose alternate of bucket `from` is `to` in a table of `m` buckets.
    fn fp_linking(from: usize, to: usize, m: usize) -> u64 {
        (1..=0xFFFFu64)
            .find(|&fp| alternate_index(from as u64, fp, m as u64) == to as u64)
            .expect("some fingerprint links the two buckets")
    }

    #[test]
    fn queue_bound_matches_libcuckoo() {
        // libcuckoo: 2 * (4^5 - 1) / 3 = 682 buckets for paths of 5.
        assert_eq!(queue_bound(4, 5), 682);
        assert!(queue_bound(5, MAX_PATH_LEN) <= u32::MAX as usize);
    }

    #[test]
    fn search_finds_the_free_slot_in_a_root() {
        let t = RawTable::<Fp16>::new(64, 5).unwrap();
        let p = t.probe_at(3, 77);
        let path = t.search_path(p).unwrap();
        assert!(path.hops().is_empty());
    }

    #[test]
    fn search_finds_a_known_two_hop_path_and_execution_frees_the_root() {
        // Buckets 0 and a(0) are full; one fingerprint in bucket 0 leads to bucket 5, which
        // is full too, and one fingerprint there leads to bucket 9, which has room.
        let m = 64;
        let t = RawTable::<Fp16>::new(m, 5).unwrap();
        let new_fp = (1..=0xFFFFu64)
            .find(|&fp| ![0, 5, 9].contains(&alternate_index(0, fp, m as u64)))
            .unwrap();
        let p = t.probe_at(0, new_fp);
        let to5 = fp_linking(0, 5, m);
        let to9 = fp_linking(5, 9, m);
        // Every other fingerprint leads back into one of the full buckets (0, 5 or a(0)) so
        // that the only way out is 0 -> 5 -> 9.
        let full = [0, 5, p.alternate];
        let stuck = |b: usize| -> u64 {
            (1..=0xFFFFu64)
                .find(|&fp| {
                    let alt = alternate_index(b as u64, fp, m as u64) as usize;
                    fp != to5 && fp != to9 && fp != new_fp && full.contains(&alt) && alt != b
                })
                .unwrap()
        };
        let fill = [
            (0, [to5, stuck(0), stuck(0), stuck(0)]),
            (5, [to9, stuck(5), stuck(5), stuck(5)]),
            (p.alternate, [stuck(p.alternate); 4]),
        ];
        for (b, fps) in fill {
            for (s, fp) in fps.into_iter().enumerate() {
                t.set_slot(b, s, fp);
            }
        }
        let path = t.search_path(p).expect("a path exists");
        let hops = path.hops();
        assert_eq!(hops.len(), 2, "{hops:?}");
        assert_eq!((hops[0].from, hops[0].to, hops[0].fp), (5, 9, to9));
        assert_eq!((hops[1].from, hops[1].to, hops[1].fp), (0, 5, to5));
        let len = t.len();
        assert_eq!(t.execute_path(path.hops()), (2, true));
        assert_eq!(t.len(), len, "hops move, they do not add or drop");
        assert_eq!(t.count(t.probe_at(0, to5)), 1);
        assert_eq!(t.count(t.probe_at(5, to9)), 1);
        assert!(t.insert(p, false).is_ok());
        assert_eq!(t.count(p), 1);
    }

    #[test]
    fn a_stale_hop_is_refused_without_changing_anything() {
        let m = 16;
        let t = RawTable::<Fp16>::new(m, 5).unwrap();
        let fp = fp_linking(2, 7, m);
        t.set_slot(2, 1, fp);
        let before = t.words();
        // Wrong slot: the fingerprint is not where the hop says.
        assert!(!t.displace(Hop {
            from: 2,
            slot: 0,
            fp,
            to: 7
        }));
        // Destination full.
        for s in 0..SLOTS {
            t.set_slot(7, s, 0x4242);
        }
        let full = t.words();
        assert!(!t.displace(Hop {
            from: 2,
            slot: 1,
            fp,
            to: 7
        }));
        assert_eq!(t.words(), full);
        for s in 0..SLOTS {
            t.set_slot(7, s, 0);
        }
        assert_eq!(t.words(), before);
        assert!(t.displace(Hop {
            from: 2,
            slot: 1,
            fp,
            to: 7
        }));
        assert_eq!(t.count(t.probe_at(7, fp)), 1);
        assert_eq!(t.words(), vec![(7, fp)]);
    }

    #[test]
    fn a_bucket_pair_sharing_one_stripe_locks_once() {
        // Two stripes for 16 buckets: buckets 2 and 4 share stripe 0. A non-reentrant lock
        // taken twice would hang here.
        let m = 16;
        let t = RawTable::<Fp16>::with_stripes(m, 2, 5).unwrap();
        let fp = fp_linking(2, 4, m);
        t.set_slot(2, 0, fp);
        assert!(t.displace(Hop {
            from: 2,
            slot: 0,
            fp,
            to: 4
        }));
        let p = t.probe_at(4, fp);
        assert_eq!(t.count(p), 1);
        {
            let _held = t.lock_buckets(2, 4);
        }
        assert!(t.remove(p));
        assert_eq!(t.len(), 0);
    }
}
