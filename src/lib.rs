//! A concurrent cuckoo filter for guarding a database against cache-penetration traffic:
//! lookups of keys that do not exist, which miss every cache and land on the database.
//!
//! A [`CuckooFilter`] answers "definitely absent" or "maybe present" for a key, in a few
//! nanoseconds and about 17 bits per key, with **no false negatives**: a key that was inserted
//! and not removed is always reported present, whatever other threads do at the same time.
//!
//! - [Quick start](#quick-start)
//! - [Guarantees](#guarantees)
//! - [How the concurrency works](#how-the-concurrency-works)
//! - [False positives and memory](#false-positives-and-memory)
//! - [Removing keys](#removing-keys)
//! - [Snapshots](#snapshots)
//!
//! # Quick start
//!
//! ```
//! use std::sync::Arc;
//! use cuckoo_guard::CuckooFilter;
//!
//! let filter = Arc::new(CuckooFilter::with_capacity(100_000));
//! std::thread::scope(|s| {
//!     for t in 0..2u64 {
//!         let filter = &filter;
//!         s.spawn(move || {
//!             for k in (t * 50_000)..((t + 1) * 50_000) {
//!                 filter.insert(&k).expect("sized for 100,000 keys");
//!             }
//!         });
//!     }
//! });
//! assert_eq!(filter.len(), 100_000);
//! assert!((0..100_000u64).all(|k| filter.contains(&k)));
//! let false_positives = (100_000..200_000u64).filter(|k| filter.contains(k)).count();
//! assert!(false_positives < 100); // about 0.023% of absent keys in the 16-bit class
//! ```
//!
//! # Guarantees
//!
//! - **No false negatives.** If `insert(k)` returned `Ok` before `contains(k)` began, and no
//!   `remove(k)` has taken that copy out, `contains(k)` returns `true`: under any interleaving
//!   of concurrent inserts, removes (of `k` or of keys sharing its fingerprint and buckets),
//!   and the displacements inserts make.
//! - **Readers never block.** A lookup takes no lock and stores nothing to shared memory (the
//!   one exception: when a concurrent writer in its lock stripe forces a retry, it bumps a
//!   per-thread statistics counter). If it keeps racing writers in its stripe (say a writer
//!   preempted while moving fingerprints in its two buckets), it answers `true` after a
//!   bounded number of retries: a false positive, never a hang. [`Stats::read_fallbacks`]
//!   counts such answers.
//! - **A failed insert loses nothing.** [`InsertError`] means no fingerprint was stored and
//!   none was lost or duplicated: the cuckoo path is searched before anything moves, so there
//!   is no victim slot and no half-done eviction chain (a path cut short by a concurrent
//!   writer leaves only completed hops, each a fingerprint moved within its own bucket pair).
//! - **`insert_unique` shares copies.** When it returns `Ok(false)`, the key is covered by a
//!   copy already present, which may belong to another key with the same fingerprint and
//!   buckets; removing that key makes this one absent. The no-false-negative guarantee is for
//!   keys with their own copy: `insert`, or `insert_unique` returning `Ok(true)`.
//! - **False-positive rate** as documented below for the width chosen, measured by the crate's
//!   tests; **memory** as [`CuckooFilter::memory_usage`] reports it.
//!
//! # How the concurrency works
//!
//! A bucket is four fingerprints packed into one aligned atomic word, so it is read and
//! written with single atomic loads and stores, and matched against a fingerprint without a
//! loop over slots (both of a key's buckets in one SSE2 comparison on x86_64, SWAR bit
//! operations elsewhere). Writers lock *stripes* (4096 words, each covering every 4096th
//! bucket) in ascending order, with test-and-test-and-set and backoff. An insert uses a free
//! slot in either of the key's buckets if it can; otherwise it searches the cuckoo graph
//! breadth-first, without changing anything, for the shortest path to a free slot, then moves
//! the free slot back along that path one hop at a time, each hop re-checked under its locks
//! and done as copy-then-clear. Around each hop, and around each remove's clearing store, a
//! version counter for the fingerprint's bucket pair is odd: every store that can take a copy
//! out of a bucket changes it. A reader loads that version, both buckets and the version
//! again: a match answers at once, and "absent" is answered only if no such store overlapped
//! the read. A lookup
//! pins no epoch and takes no hazard pointer: either costs a full memory barrier per call,
//! which stops consecutive lookups from overlapping their cache misses (`BENCHMARKS.md`).
//! The `# Synchronization protocol` section of the `table::stripe` module lists each step
//! and invariant; loom model tests check each one.
//!
//! # False positives and memory
//!
//! | class | fingerprint | bits per slot | false positives at 95% load | bits per key at 95% load |
//! |---|---|---|---|---|
//! | 8-bit  | 8 bits  | 8    | ~2.9% (`8 x 0.95 / 255`) | ~8.4 |
//! | 12-bit | 12 bits | 12.8 | ~0.17% (at most `10 x 0.95 / 4095` = 0.23%) | ~13.5 |
//! | 16-bit | 15 bits | 16   | ~0.018% (at most `8 x 0.95 / 32767` = 0.023%) | ~16.8 |
//!
//! The 12-bit and 16-bit classes keep four overflow bits per bucket: a negative lookup whose
//! fingerprint's bit is clear in its primary bucket reads that one bucket, which both speeds
//! it up and lowers its false-positive rate below the two-bucket bound.
//!
//! The rate scales with the load: at half load it is half as high. A filter that grew (see
//! [`Growth`]) sums the rates of its tables. Any capacity is accepted
//! as is: the alternate bucket is `(h(fp) - i) mod m`, which needs no power-of-two table, so
//! a filter for 3 million keys is not rounded up to 4 million slots. The hash is ahash with a
//! random key per filter (settable with [`Builder::seed`] or [`Builder::hasher`]), so an
//! attacker cannot pick keys that collide.
//!
//! # Removing keys
//!
//! [`CuckooFilter::remove`] takes out one copy of a key's fingerprint. Remove only keys you
//! inserted, once per insert: removing a key that was never inserted can take out another
//! key's identical fingerprint and make *that* key a false negative.

//!
//! # Snapshots
//!
//! [`CuckooFilter::write_snapshot`] writes a filter while other threads keep reading and
//! writing it; [`CuckooFilter::read_snapshot`] reads it back after checking everything (magic,
//! version, checksums, and that this build hashes as the writer did). The [`snapshot`] module
//! documents the format byte by byte and why the file must be kept private (it holds the hash
//! keys).
//!
//! ```
//! use cuckoo_guard::CuckooFilter;
//!
//! let filter = CuckooFilter::with_capacity(1_000);
//! filter.insert("user:42")?;
//! let mut bytes = Vec::new();
//! filter.write_snapshot(&mut bytes)?;
//! assert!(CuckooFilter::read_snapshot(&bytes[..])?.contains("user:42"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod filter;
mod fingerprint;
#[cfg(feature = "fleet")]
#[cfg_attr(docsrs, doc(cfg(feature = "fleet")))]
pub mod fleet;
pub mod guard;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
mod secret;
mod sharded;
mod sizing;
pub mod snapshot;
mod stats;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "sqlite", feature = "postgres", feature = "redis")))
)]
pub mod stores;
mod sync;
mod table;
#[cfg(all(test, not(cuckoo_loom)))]
mod test_rng;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;

pub use crate::error::{BuildError, InsertError, SnapshotError};
pub use crate::filter::{Builder, CuckooFilter, Displacement, Growth};
pub use crate::stats::Stats;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
