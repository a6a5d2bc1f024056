//! [`CuckooFilter`] and its [`Builder`]: the public face of the filter. Keys are hashed here;
//! the sizing maths is in `sizing`, and the table of the chosen fingerprint width in `table`.

use std::fmt;
use std::hash::{BuildHasher, Hash};

use ahash::RandomState;

use crate::error::{BuildError, InsertError};
use crate::sizing::{buckets_for, design_false_positive_rate, fingerprint_bits_for, max_capacity};
use crate::stats::Stats;
use crate::table::{
    GrowFailure, GrowingInsertFailure, Inserted, Table, Tables, Width, MAX_PATH_LEN,
};

/// The default maximum cuckoo path length, in buckets (libcuckoo's `MAX_BFS_PATH_LEN`).
const DEFAULT_MAX_PATH_LEN: usize = 5;

/// A concurrent cuckoo filter: an approximate set with no false negatives, lock-free reads and
/// fine-grained locked writes.
///
/// Every operation takes `&self`; share the filter between threads with `Arc` or a scoped
/// borrow. See the [crate documentation](crate) for the guarantees and how they are kept.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::CuckooFilter;
///
/// let filter = CuckooFilter::with_capacity(1_000_000);
/// filter.insert("user:42").unwrap();
/// assert!(filter.contains("user:42"));
/// assert!(!filter.contains("user:43")); // absent (wrong only with probability ~0.01%)
/// assert!(filter.remove("user:42"));
/// assert!(!filter.contains("user:42"));
/// ```
pub struct CuckooFilter<S = RandomState> {
    hash_builder: S,
    /// The ahash keys of `hash_builder`, when the builder made it (snapshots record them).
    hash_keys: Option<[u64; 4]>,
    /// The capacity the builder was given, in keys.
    built_for: usize,
    /// The base table inline, grown tables appended and never replaced while shared: lookups
    /// load them with no epoch pin or hazard pointer (a pin is a full barrier per call).
    tables: Tables,
}

impl CuckooFilter<RandomState> {
    /// A filter for `capacity` keys of the 16-bit class (15-bit fingerprints and overflow bits:
    /// about 0.023% false positives at 95% load), a random hash key and the default [`Growth`]: past `capacity` it adds tables
    /// rather than refuse inserts.
    ///
    /// A capacity of 0 is rounded up to 1.
    ///
    /// # Panics
    ///
    /// Panics if `capacity` is above the largest supported (about 16 billion keys) or the
    /// buckets cannot be allocated; use [`builder`](Self::builder) to get these as errors.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(3_000_000);
    /// assert!(filter.capacity() >= 3_000_000);
    /// assert_eq!(filter.fingerprint_bits(), 16);
    /// ```
    pub fn with_capacity(capacity: usize) -> Self {
        match Self::builder().capacity(capacity.max(1)).build() {
            Ok(filter) => filter,
            Err(e) => panic!("CuckooFilter::with_capacity({capacity}): {e}"),
        }
    }

    /// A [`Builder`] to choose capacity, false-positive rate or fingerprint width, path length
    /// and hashing.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::builder()
    ///     .capacity(10_000)
    ///     .false_positive_rate(0.05)
    ///     .seed(7)
    ///     .build()?;
    /// assert_eq!(filter.fingerprint_bits(), 8);
    /// # Ok::<(), cuckoo_guard::BuildError>(())
    /// ```
    pub fn builder() -> Builder<RandomState> {
        Builder::new()
    }
}

impl<S: BuildHasher> CuckooFilter<S> {
    #[inline(always)]
    fn hash<K: Hash + ?Sized>(&self, key: &K) -> u64 {
        self.hash_builder.hash_one(key)
    }

    /// Adds one copy of `key`'s fingerprint.
    ///
    /// Inserting a key twice stores two copies, and each [`remove`](Self::remove) takes one
    /// out. A key's two buckets hold at most 8 copies per table (10 in the 12-bit class, whose
    /// buckets have five slots): past that, a filter that may grow adds a table (the 9th,
    /// 17th, ... copy each cost a table twice the last; the 11th, 21st, ... in the 12-bit
    /// class), one that may not fails with [`InsertError::Full`]. Keep copies of one key few.
    ///
    /// # Errors
    ///
    /// [`InsertError::Full`] if no cuckoo path within the path length bound reaches a free
    /// slot (typically above 95% load), [`InsertError::Contended`] if concurrent writers kept
    /// invalidating the paths found. Either way no fingerprint was stored, none was lost or
    /// duplicated, and every key inserted earlier is still found. (Hops of an earlier
    /// attempt that completed before a concurrent writer invalidated the rest of its path
    /// stay done: each only moved a fingerprint to the other bucket of its own pair.)
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(100);
    /// filter.insert(&17u64)?;
    /// filter.insert(&17u64)?;
    /// assert_eq!(filter.count(&17u64), 2);
    /// # Ok::<(), cuckoo_guard::InsertError>(())
    /// ```
    pub fn insert<K: Hash + ?Sized>(&self, key: &K) -> Result<(), InsertError> {
        self.insert_impl(key, false).map(|_| ())
    }

    /// Adds `key` only if the filter does not already report it present; returns whether it
    /// added a copy.
    ///
    /// The check and the insert are one atomic step under the locks of the key's two buckets,
    /// so concurrent `insert_unique` calls of one key add exactly one copy. A false positive
    /// (another key with the same fingerprint and buckets) also counts as present.
    ///
    /// `Ok(false)` means the key is covered by a copy that is already there, possibly one
    /// another key put in. If that other key is later removed, this key is reported absent:
    /// the no-false-negative guarantee covers keys whose own copy is in the filter (an
    /// `insert`, or an `insert_unique` that returned `Ok(true)`). Use `insert_unique` only
    /// where keys are never removed, or where each key's removal also removes every key
    /// that shares its copy; otherwise use [`insert`](Self::insert).
    ///
    /// # Errors
    ///
    /// As [`insert`](Self::insert).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(100);
    /// assert!(filter.insert_unique("a")?);
    /// assert!(!filter.insert_unique("a")?);
    /// assert_eq!(filter.count("a"), 1);
    /// # Ok::<(), cuckoo_guard::InsertError>(())
    /// ```
    pub fn insert_unique<K: Hash + ?Sized>(&self, key: &K) -> Result<bool, InsertError> {
        self.insert_impl(key, true)
            .map(|inserted| inserted == Inserted::Added)
    }

    fn insert_impl<K: Hash + ?Sized>(
        &self,
        key: &K,
        unique: bool,
    ) -> Result<Inserted, InsertError> {
        self.insert_hashed(self.hash(key), unique)
    }

    fn insert_hashed(&self, hash: u64, unique: bool) -> Result<Inserted, InsertError> {
        let result = self.tables.insert(hash, unique);
        result.map_err(|failure| match failure {
            GrowingInsertFailure::Full(GrowFailure::Limit) => InsertError::Full {
                len: self.len(),
                capacity: self.capacity(),
            },
            GrowingInsertFailure::Full(GrowFailure::Allocation { bytes }) => {
                InsertError::GrowthAllocationFailed { bytes }
            }
            GrowingInsertFailure::Full(GrowFailure::MemoryLimit { limit, needed }) => {
                InsertError::MemoryLimit { limit, needed }
            }
            GrowingInsertFailure::Contended => InsertError::Contended,
        })
    }

    /// The hash the filter files `key` under: a key's copies can be inserted later with
    /// [`insert_hash`](Self::insert_hash), into this filter or one built with the same
    /// hasher, without the key itself.
    pub(crate) fn hash_key<K: Hash + ?Sized>(&self, key: &K) -> u64 {
        self.hash(key)
    }

    /// [`insert`](Self::insert) of a key given by its [`hash_key`](Self::hash_key).
    pub(crate) fn insert_hash(&self, hash: u64) -> Result<(), InsertError> {
        self.insert_hashed(hash, false).map(|_| ())
    }

    /// [`contains`](Self::contains) of a key given by its [`hash_key`](Self::hash_key).
    pub(crate) fn contains_hash(&self, hash: u64) -> bool {
        self.tables.contains(hash)
    }

    /// [`remove`](Self::remove) of a key given by its [`hash_key`](Self::hash_key).
    pub(crate) fn remove_hash(&self, hash: u64) -> bool {
        self.tables.remove(hash)
    }

    /// Whether `key` may be in the filter.
    ///
    /// `false` is always right: a key inserted before this call began and not removed is
    /// reported present, whatever other threads are doing. `true` is wrong with the
    /// false-positive probability (about `8 x load / 2^bits`). Never blocks: a lookup that
    /// keeps racing displacements answers `true` after a bounded number of retries.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(100);
    /// filter.insert(&[1u8, 2, 3][..]).unwrap();
    /// assert!(filter.contains(&[1u8, 2, 3][..]));
    /// ```
    #[inline]
    pub fn contains<K: Hash + ?Sized>(&self, key: &K) -> bool {
        let hash = self.hash(key);
        self.tables.contains(hash)
    }

    /// Looks up every key of `keys`, writing to `results[i]` whether `keys[i]` may be present
    /// as of the call's start.
    ///
    /// A key whose insert happened before the call began is reported present (no false
    /// negatives). A key inserted while the call runs may be reported absent even where a
    /// [`contains`](Self::contains) made at the same moment would find it: a call that begins
    /// on a filter that has not grown reads only the base table, so it misses a key placed in
    /// a table grown during the call (if the filter grew, keys answered "absent" from one
    /// bucket are all looked up again, one by one).
    ///
    /// Faster than calling [`contains`](Self::contains) in a loop on large filters: keys are
    /// hashed and their primary buckets prefetched 16 at a time before any is probed, so the
    /// memory loads of consecutive keys overlap; keys whose primary bucket does not answer
    /// (see [`overflow_share`](Self::overflow_share)) get their other bucket prefetched and
    /// read after. Allocates nothing.
    ///
    /// # Panics
    ///
    /// Panics if `results.len() != keys.len()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(100);
    /// filter.insert(&2u32).unwrap();
    /// let mut found = [false; 3];
    /// filter.contains_many(&[1u32, 2, 3], &mut found);
    /// assert!(found[1]);
    /// ```
    pub fn contains_many<K: Hash>(&self, keys: &[K], results: &mut [bool]) {
        self.tables.contains_many(&self.hash_builder, keys, results);
    }

    /// Removes one copy of `key`'s fingerprint; returns whether one was found.
    ///
    /// **Only remove keys you inserted** (and as many times as you inserted them, and not
    /// across a [`clear`](Self::clear), which removes every key). Removing a key that was
    /// never inserted can take out the fingerprint of another key that shares its fingerprint
    /// and buckets, and that key would then be reported absent: a false negative. The [`guard`](crate) layer only removes after the store confirms a delete.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(100);
    /// filter.insert("k").unwrap();
    /// assert!(filter.remove("k"));
    /// assert!(!filter.remove("k"));
    /// ```
    pub fn remove<K: Hash + ?Sized>(&self, key: &K) -> bool {
        let hash = self.hash(key);
        self.tables.remove(hash)
    }

    /// The number of copies of `key`'s fingerprint in its two buckets: at least the number of
    /// times `key` was inserted and not removed (more if other keys share its fingerprint and
    /// buckets).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(100);
    /// assert_eq!(filter.count("x"), 0);
    /// filter.insert("x").unwrap();
    /// assert_eq!(filter.count("x"), 1);
    /// ```
    pub fn count<K: Hash + ?Sized>(&self, key: &K) -> usize {
        let hash = self.hash(key);
        self.tables.count(hash)
    }
}

impl<S: BuildHasher + Clone> CuckooFilter<S> {
    /// An empty filter for `capacity` keys configured as this one (width, path length,
    /// displacement, growth) and hashing as this one, so hashes from
    /// [`hash_key`](Self::hash_key) carry over.
    pub(crate) fn sibling(&self, capacity: usize) -> Result<Self, BuildError> {
        self.sibling_hashed_by(capacity, self.hash_builder.clone(), self.hash_keys)
    }

    /// The largest capacity at most `capacity` whose [`sibling`](Self::sibling) fits under this
    /// filter's memory ceiling (no ceiling: `capacity`), found without allocating; `None` if
    /// not even a filter for one key fits.
    pub(crate) fn largest_sibling_under_ceiling(&self, capacity: usize) -> Option<usize> {
        let Some(limit) = self.max_memory() else {
            return Some(capacity);
        };
        let width = self.tables.base().width();
        let max_steps = self.tables.max_growth_steps();
        let fits = |capacity: usize| {
            buckets_for(capacity, width.slots())
                .is_some_and(|buckets| first_heap_bytes(width, buckets, max_steps) <= limit)
        };
        if !fits(1) {
            return None;
        }
        // `fits` holds at `low` and, as the bytes grow with the capacity, below it.
        let (mut low, mut high) = (1, capacity.max(1));
        while low < high {
            let mid = low + (high - low).div_ceil(2);
            if fits(mid) {
                low = mid;
            } else {
                high = mid - 1;
            }
        }
        Some(low)
    }

    /// [`sibling`](Self::sibling) hashing with `hash_builder`, whose ahash keys are `hash_keys`
    /// (`None`: not the builder's hasher).
    pub(crate) fn sibling_hashed_by(
        &self,
        capacity: usize,
        hash_builder: S,
        hash_keys: Option<[u64; 4]>,
    ) -> Result<Self, BuildError> {
        let mut builder = Builder::new()
            .hasher(hash_builder)
            .capacity(capacity.max(1))
            .fingerprint_bits(self.fingerprint_bits())
            .max_path_len(self.max_path_len())
            .displacement(self.displacement())
            .growth(self.growth());
        builder.max_memory = self.max_memory();
        builder.hash_keys = hash_keys;
        builder.build()
    }
}

/// Four unpredictable ahash keys, drawn anew on each call: 32 bytes from the operating
/// system's generator (`getrandom`), or [`fallback_keys`] if it fails.
fn random_keys() -> [u64; 4] {
    let mut bytes = [0u8; 32];
    match getrandom::fill(&mut bytes) {
        Ok(()) => keys_of(bytes),
        Err(_) => fallback_keys(),
    }
}

/// The four little-endian words of `bytes`.
fn keys_of(bytes: [u8; 32]) -> [u64; 4] {
    let mut keys = [0u64; 4];
    for (key, chunk) in keys.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        *key = u64::from_le_bytes(word);
    }
    keys
}

/// Keys for a process without a working random generator: the clock, the process id, a
/// per-thread count of draws and an address, mixed by a fixed-key ahash. Distinct for each
/// draw, but guessable by whoever knows when and where the filter was made; a filter keyed so
/// is as correct (no false negatives), only less hard to flood with keys chosen to collide.
/// Touches neither `getrandom` nor ahash's own random source, so it cannot panic for want of
/// one.
fn fallback_keys() -> [u64; 4] {
    thread_local! {
        static DRAWS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    let draw = DRAWS
        .try_with(|draws| {
            let draw = draws.get();
            draws.set(draw.wrapping_add(1));
            draw
        })
        .unwrap_or(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64);
    let place = std::ptr::addr_of!(draw) as usize as u64;
    let mixer = RandomState::with_seeds(now, u64::from(std::process::id()), draw, place);
    [0u64, 1, 2, 3].map(|i| mixer.hash_one((i, now, draw, place)))
}

/// A builder-made hasher with fresh random keys, as an `S`, and its keys: `None` unless `S` is
/// the ahash `RandomState` the builder makes.
pub(crate) fn fresh_ahash<S: 'static>() -> Option<(S, [u64; 4])> {
    let keys = random_keys();
    let [k0, k1, k2, k3] = keys;
    let hasher: Box<dyn std::any::Any> = Box::new(RandomState::with_seeds(k0, k1, k2, k3));
    hasher.downcast::<S>().ok().map(|hasher| (*hasher, keys))
}

impl<S> CuckooFilter<S> {
    /// The number of fingerprints stored (each insert adds one, each successful remove takes
    /// one). Exact when no writer runs; under concurrency, a sum of per-stripe counts.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(100);
    /// filter.insert("a").unwrap();
    /// filter.insert("a").unwrap();
    /// assert_eq!(filter.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.tables.len()
    }

    /// Whether no fingerprint is stored.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// assert!(CuckooFilter::with_capacity(10).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of fingerprint slots (4 per bucket) in all tables. A table fills near 95%
    /// of its slots (then the filter grows, or with [`Growth::Fixed`] inserts fail); a
    /// filter built for `n` keys has `capacity() >= n / 0.94` before it grows.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(1_000);
    /// assert!(filter.capacity() >= 1_000);
    /// assert_eq!(filter.capacity() % 4, 0);
    /// ```
    pub fn capacity(&self) -> usize {
        self.tables.capacity()
    }

    /// `len() / capacity()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(100);
    /// assert_eq!(filter.load_factor(), 0.0);
    /// ```
    pub fn load_factor(&self) -> f64 {
        self.len() as f64 / self.capacity() as f64
    }

    /// The share of the newest table's bucket overflow bits that are set, sampled (see
    /// [`Stats::overflow_share`]): the share of negative lookups that read two cache lines
    /// instead of one. 0 for layouts without overflow bits.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(1_000);
    /// assert_eq!(filter.overflow_share(), 0.0);
    /// for key in 0..1_000u32 {
    ///     filter.insert(&key)?;
    /// }
    /// assert!(filter.overflow_share() > 0.0); // some keys live in their alternate bucket
    /// # Ok::<(), cuckoo_guard::InsertError>(())
    /// ```
    pub fn overflow_share(&self) -> f64 {
        self.tables.overflow_share()
    }

    /// The false-positive rate expected at the current load: in each table, a lookup
    /// compares its fingerprint with `2 x slots x load` stored ones on average, each matching
    /// with probability `1 / (2^bits - 1)`; a grown filter sums the rates of its tables.
    ///
    /// For the 12-bit and 16-bit classes this is an upper bound: a negative whose overflow bit
    /// is clear compares only its primary bucket's fingerprints, so the rate observed lies
    /// between half of this and all of it (about three quarters at 95% load, as
    /// `tests/statistics.rs` measures).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(1_000);
    /// assert_eq!(filter.expected_false_positive_rate(), 0.0);
    /// for k in 0..1_000 {
    ///     filter.insert(&k).unwrap();
    /// }
    /// assert!(filter.expected_false_positive_rate() < 0.0003);
    /// ```
    pub fn expected_false_positive_rate(&self) -> f64 {
        self.tables.expected_false_positive_rate()
    }

    /// The false-positive rate this filter's fingerprint width is configured for: the rate of
    /// one table at the design load of 95%, whatever the load is now (for that, see
    /// [`expected_false_positive_rate`](Self::expected_false_positive_rate)). After `g`
    /// growth steps the rate is at most `g + 1` times this (see [`Growth`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(1_000);
    /// let rate = filter.configured_false_positive_rate();
    /// assert!(rate > 0.0002 && rate < 0.0003); // the 16-bit class (15-bit fingerprints) at 95% load
    /// assert_eq!(filter.expected_false_positive_rate(), 0.0); // empty
    /// ```
    pub fn configured_false_positive_rate(&self) -> f64 {
        design_false_positive_rate(self.tables.base().width())
    }

    /// The width class: bits per slot, rounded down (8, 12 or 16). The 16-bit class stores
    /// 15-bit fingerprints and the 12-bit class 12-bit ones, each with four overflow bits per
    /// bucket (negatives read one bucket when its bit is clear); a filter loaded from a
    /// format-2 snapshot of the 16-bit class keeps that format's plain 16-bit fingerprints.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::builder().capacity(10).fingerprint_bits(8).build()?;
    /// assert_eq!(filter.fingerprint_bits(), 8);
    /// # Ok::<(), cuckoo_guard::BuildError>(())
    /// ```
    pub fn fingerprint_bits(&self) -> u32 {
        self.tables.base().fingerprint_bits()
    }

    /// How inserts search for room when both of a key's buckets are full.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::{CuckooFilter, Displacement};
    ///
    /// assert_eq!(CuckooFilter::with_capacity(10).displacement(), Displacement::BreadthFirst);
    /// ```
    pub fn displacement(&self) -> Displacement {
        match self.tables.base().random_walk_kicks() {
            0 => Displacement::BreadthFirst,
            max_kicks => Displacement::RandomWalk { max_kicks },
        }
    }

    /// What an insert that finds no room does (see [`Builder::growth`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::{CuckooFilter, Growth};
    ///
    /// assert_eq!(CuckooFilter::with_capacity(10).growth(), Growth::DEFAULT);
    /// let fixed = CuckooFilter::builder().capacity(10).growth(Growth::Fixed).build()?;
    /// assert_eq!(fixed.growth(), Growth::Fixed);
    /// # Ok::<(), cuckoo_guard::BuildError>(())
    /// ```
    pub fn growth(&self) -> Growth {
        match self.tables.max_growth_steps() {
            0 => Growth::Fixed,
            max_steps => Growth::Expand {
                factor: self.tables.growth_factor(),
                max_steps,
            },
        }
    }

    /// The memory ceiling set with [`Builder::max_memory`], if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// assert_eq!(CuckooFilter::with_capacity(10).max_memory(), None);
    /// let capped = CuckooFilter::builder().capacity(10).max_memory(1 << 20).build()?;
    /// assert_eq!(capped.max_memory(), Some(1 << 20));
    /// # Ok::<(), cuckoo_guard::BuildError>(())
    /// ```
    pub fn max_memory(&self) -> Option<usize> {
        Some(self.tables.max_bytes()).filter(|&bytes| bytes != usize::MAX)
    }

    /// The longest cuckoo path (in buckets) an insert searches.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// assert_eq!(CuckooFilter::with_capacity(10).max_path_len(), 5);
    /// ```
    pub fn max_path_len(&self) -> usize {
        self.tables.base().max_path_len()
    }

    /// Heap bytes owned by the filter: the bucket array, the stripe words and the statistics
    /// counters. Excludes the filter's own inline fields (the hasher and the table's sizes)
    /// and the transient queue of a running path search.
    ///
    /// The 16-bit class takes 16 bits per slot and the 12-bit class 12.8, so a full filter
    /// costs `16 / load` or `12.8 / load` bits per key plus up to 32 KiB of stripes.
    ///
    /// On Linux, a bucket array of 4 MiB or more is advised to transparent huge pages before
    /// its first write (`madvise(MADV_HUGEPAGE)`): the same bytes, read through far fewer TLB
    /// entries.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(1_000_000);
    /// let bits_per_key = filter.memory_usage() as f64 * 8.0 / 1_000_000.0;
    /// assert!(bits_per_key < 17.5);
    /// ```
    pub fn memory_usage(&self) -> usize {
        self.tables.heap_bytes()
    }

    /// Removes every fingerprint.
    ///
    /// Every key inserted before counts as removed: do not [`remove`](Self::remove) such a
    /// key afterwards (nor while the clear runs). Its copy is gone, and the remove could take
    /// out the copy of a key inserted after the clear that shares its fingerprint and buckets,
    /// exactly as removing a key never inserted can.
    ///
    /// Runs under every stripe lock of a table, so it waits for writers in progress there and
    /// holds off new ones while it clears it (O(capacity)). A filter that has grown is cleared
    /// one table at a time: keys inserted before the clear began are all removed and keys
    /// inserted after it returned are all kept, but of inserts that overlap it some may be
    /// kept and others not, whatever their order. Lookups keep running; one that overlaps
    /// the clear retries and may answer "present" (a false positive) rather than wait for it.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(100);
    /// filter.insert("a").unwrap();
    /// filter.clear();
    /// assert!(filter.is_empty());
    /// assert!(!filter.contains("a"));
    /// ```
    pub fn clear(&self) {
        self.tables.clear()
    }

    /// Size and operation counters: inserts, failures, displacements, the histogram of
    /// displacements per insert, read retries.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(100);
    /// filter.insert(&1).unwrap();
    /// assert_eq!(filter.stats().inserts, 1);
    /// assert_eq!(filter.stats().failed_inserts, 0);
    /// ```
    pub fn stats(&self) -> Stats {
        self.tables.stats()
    }

    /// The capacity in keys the filter was built for.
    pub(crate) fn built_for(&self) -> usize {
        self.built_for
    }

    /// Tables added so far (one atomic load; [`stats`](Self::stats) sums every counter).
    pub(crate) fn growth_steps(&self) -> usize {
        self.tables.growth_steps()
    }

    pub(crate) fn tables(&self) -> &Tables {
        &self.tables
    }

    /// The ahash keys, if the builder made the hasher.
    pub(crate) fn hash_keys(&self) -> Option<[u64; 4]> {
        self.hash_keys
    }

    /// A filter from a snapshot's parts.
    pub(crate) fn from_parts(
        hash_builder: S,
        hash_keys: Option<[u64; 4]>,
        built_for: usize,
        tables: Tables,
    ) -> Self {
        CuckooFilter {
            hash_builder,
            hash_keys,
            built_for,
            tables,
        }
    }

    /// The filter's hash builder.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::hash::BuildHasher;
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let a = CuckooFilter::builder().capacity(10).seed(3).build()?;
    /// let b = CuckooFilter::builder().capacity(10).seed(3).build()?;
    /// assert_eq!(a.hasher().hash_one("k"), b.hasher().hash_one("k"));
    /// # Ok::<(), cuckoo_guard::BuildError>(())
    /// ```
    pub fn hasher(&self) -> &S {
        &self.hash_builder
    }
}

impl<S> fmt::Debug for CuckooFilter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CuckooFilter")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .field("fingerprint_bits", &self.fingerprint_bits())
            .field("max_path_len", &self.max_path_len())
            .finish_non_exhaustive()
    }
}

/// How an insert finds room when both of its key's buckets are full.
///
/// Either way the search only reads the table; the path found is then executed from its free
/// end, one locked and re-validated hop at a time, so a failed insert moves nothing and the
/// no-false-negative guarantee holds for both.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::{CuckooFilter, Displacement};
///
/// let filter = CuckooFilter::builder()
///     .capacity(10_000)
///     .displacement(Displacement::RandomWalk { max_kicks: 500 })
///     .build()?;
/// filter.insert("k").unwrap();
/// # Ok::<(), cuckoo_guard::BuildError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Displacement {
    /// Breadth-first search of the cuckoo graph for the shortest path to a free slot, of at
    /// most [`Builder::max_path_len`] buckets (libcuckoo's insert; the default).
    #[default]
    BreadthFirst,
    /// A random walk, as the cuckoo filter paper inserts: follow a random fingerprint of the
    /// current bucket to its other bucket, up to `max_kicks` steps (the paper uses 500),
    /// cutting out cycles. For comparison with the breadth-first search: it reaches a similar
    /// load with many more displacements per insert near full.
    RandomWalk {
        /// Steps a walk may take before the insert reports the filter full (1 to 100,000).
        max_kicks: usize,
    },
}

/// What a filter does when an insert finds no room.
///
/// With [`Expand`](Growth::Expand) (the default) the filter adds a table, `factor` times the
/// size of the last, and inserts there; lookups then probe every table and removes find a copy
/// wherever it is. Adding a table neither moves nor rehashes a key, so it never stops readers
/// or writers and cannot lose a key, and a filter that never grew pays nothing for the option
/// on its lookups.
///
/// Every table a lookup probes can answer a false "present", so the false-positive rate of a
/// grown filter is the sum of its tables' rates: after `g` steps, at most `g + 1` times the
/// configured rate (each full table contributes its rate at 95% load, the newest less). Only a
/// new filter sized for the keys, filled from where they are kept, brings the rate back to
/// that of one table.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::{CuckooFilter, Growth, InsertError};
///
/// // The default: room is added as needed.
/// let growing = CuckooFilter::builder().capacity(100).seed(1).build()?;
/// for k in 0..10_000 {
///     growing.insert(&k).unwrap();
/// }
/// assert!(growing.stats().growth_steps >= 6);
/// assert!((0..10_000).all(|k| growing.contains(&k)));
///
/// // A fixed size: the insert that finds no room fails.
/// let fixed = CuckooFilter::builder().capacity(100).growth(Growth::Fixed).build()?;
/// let error = (0..10_000).find_map(|k| fixed.insert(&k).err()).unwrap();
/// assert!(matches!(error, InsertError::Full { .. }));
/// # Ok::<(), cuckoo_guard::BuildError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Growth {
    /// Never add a table: an insert that finds no room fails with [`InsertError::Full`].
    Fixed,
    /// Add a table `factor` times the size of the last one when an insert finds no room, at
    /// most `max_steps` times; past that, inserts that find no room fail with
    /// [`InsertError::Full`].
    ///
    /// Added tables split each bucket of the first into sub-buckets (so that keys sharing
    /// buckets in a large table share them in every smaller one, which lets a remove take
    /// the copy it finds first); the sub-bucket comes from 16 bits of the hash, so
    /// `factor^max_steps` may be at most `2^16`.
    Expand {
        /// Size of each added table over the one before it: 1, 2, 4, 8 or 16 (RedisBloom's
        /// `EXPANSION`).
        factor: usize,
        /// Tables that may be added (1 to 32, and `factor^max_steps <= 2^16`).
        max_steps: usize,
    },
}

impl Growth {
    /// Doubling, up to 16 added tables: room for about `2^17` times the initial capacity.
    pub const DEFAULT: Growth = Growth::Expand {
        factor: 2,
        max_steps: 16,
    };
}

impl Default for Growth {
    fn default() -> Self {
        Growth::DEFAULT
    }
}

/// Configures and builds a [`CuckooFilter`].
///
/// Only [`capacity`](Self::capacity) is required. The fingerprint width comes from
/// [`fingerprint_bits`](Self::fingerprint_bits), or else is the narrowest supported width that
/// meets [`false_positive_rate`](Self::false_positive_rate), or else 16 bits.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::CuckooFilter;
///
/// let filter = CuckooFilter::builder()
///     .capacity(1_000_000)
///     .false_positive_rate(0.001)
///     .max_path_len(6)
///     .seed(42)
///     .build()?;
/// assert_eq!(filter.fingerprint_bits(), 16);
/// # Ok::<(), cuckoo_guard::BuildError>(())
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until `.build()` is called"]
pub struct Builder<S = RandomState> {
    capacity: Option<usize>,
    false_positive_rate: Option<f64>,
    fingerprint_bits: Option<u32>,
    max_path_len: usize,
    displacement: Displacement,
    growth: Growth,
    max_memory: Option<usize>,
    hash_builder: S,
    hash_keys: Option<[u64; 4]>,
}

/// The hasher and its keys are left out: they are what keeps an attacker from choosing keys
/// that collide (a seed names the keys too).
impl<S> fmt::Debug for Builder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("capacity", &self.capacity)
            .field("false_positive_rate", &self.false_positive_rate)
            .field("fingerprint_bits", &self.fingerprint_bits)
            .field("max_path_len", &self.max_path_len)
            .field("displacement", &self.displacement)
            .field("growth", &self.growth)
            .field("max_memory", &self.max_memory)
            .field("hasher", &format_args!("<redacted>"))
            .finish()
    }
}

impl Builder<RandomState> {
    fn new() -> Self {
        // Kept so that a snapshot can record them.
        let [k0, k1, k2, k3] = random_keys();
        Builder {
            capacity: None,
            false_positive_rate: None,
            fingerprint_bits: None,
            max_path_len: DEFAULT_MAX_PATH_LEN,
            displacement: Displacement::BreadthFirst,
            growth: Growth::DEFAULT,
            max_memory: None,
            hash_builder: RandomState::with_seeds(k0, k1, k2, k3),
            hash_keys: Some([k0, k1, k2, k3]),
        }
    }
}

impl<S> Builder<S> {
    /// The number of keys the filter must hold. Buckets are sized so that this many keys fill
    /// the filter to 94%, below the ~95% where inserts start to fail; any capacity is
    /// accepted as is, without rounding to a power of two.
    pub fn capacity(mut self, keys: usize) -> Self {
        self.capacity = Some(keys);
        self
    }

    /// The highest false-positive rate acceptable at 95% load. Picks the width class with the
    /// fewest bits per key that meets it: 8 bits per slot down to about 2.9%, the 12-bit class
    /// (13.5 bits per key at 95% load) down to about 0.23%, the 16-bit class down to about
    /// 0.023%.
    pub fn false_positive_rate(mut self, rate: f64) -> Self {
        self.false_positive_rate = Some(rate);
        self
    }

    /// The width class, in bits per slot: 8, 12 or 16 (see
    /// [`CuckooFilter::fingerprint_bits`]).
    pub fn fingerprint_bits(mut self, bits: u32) -> Self {
        self.fingerprint_bits = Some(bits);
        self
    }

    /// The longest cuckoo path an insert may search, in buckets (1 to 8, default 5). A path of
    /// `len` buckets displaces at most `len - 1` fingerprints; longer paths reach a higher
    /// load before the first failed insert but cost more per insert near full.
    pub fn max_path_len(mut self, len: usize) -> Self {
        self.max_path_len = len;
        self
    }

    /// How inserts search for room: [`Displacement::BreadthFirst`] (the default) or
    /// [`Displacement::RandomWalk`].
    pub fn displacement(mut self, displacement: Displacement) -> Self {
        self.displacement = displacement;
        self
    }

    /// What an insert that finds no room does: add a table ([`Growth::Expand`], the default:
    /// doubling, up to 16 times) or fail ([`Growth::Fixed`]).
    pub fn growth(mut self, growth: Growth) -> Self {
        self.growth = growth;
        self
    }

    /// The most memory the filter may take, in bytes, as [`CuckooFilter::memory_usage`]
    /// counts it: growth adds no table that would pass it, and an insert that finds no room
    /// then fails with [`InsertError::MemoryLimit`]. Without it, a filter that keeps taking
    /// keys grows until [`Growth`]'s step limit (about `2^17` times its first table). Not kept
    /// in snapshots: a filter read from one has no ceiling until it is built again.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::{CuckooFilter, InsertError};
    ///
    /// let filter = CuckooFilter::builder().capacity(1_000).max_memory(64 * 1024).build()?;
    /// let refused = (0..1_000_000u32).find_map(|k| filter.insert(&k).err());
    /// assert!(matches!(refused, Some(InsertError::MemoryLimit { limit: 65_536, .. })));
    /// assert!(filter.memory_usage() <= 64 * 1024);
    /// # Ok::<(), cuckoo_guard::BuildError>(())
    /// ```
    pub fn max_memory(mut self, bytes: usize) -> Self {
        self.max_memory = Some(bytes);
        self
    }

    /// Hash keys with ahash keyed by `seed` instead of a random key. Filters with the same
    /// seed hash alike (within one build of the program), which tests and snapshots need; a
    /// secret random key (the default) keeps an attacker from choosing colliding keys.
    ///
    /// The seed makes this filter reproducible, not a guard's later ones: a
    /// [guard](crate::guard)'s rebuilds draw fresh random keys for every filter the builder
    /// hashed for, seeded or not. Only a hasher given to [`hasher`](Self::hasher) is kept
    /// across rebuilds (the guard cannot make another one like it).
    pub fn seed(self, seed: u64) -> Builder<RandomState> {
        let mut state = seed;
        let mut next = || {
            // splitmix64: four independent ahash keys from one seed.
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let keys = [next(), next(), next(), next()];
        let mut builder = self.hasher(RandomState::with_seeds(keys[0], keys[1], keys[2], keys[3]));
        builder.hash_keys = Some(keys);
        builder
    }

    /// Hash keys with `hash_builder`. Index and fingerprint both come from its 64-bit output,
    /// so it must mix all bits well (ahash, foldhash, SipHash do).
    ///
    /// A [guard](crate::guard) keeps this hasher, and so its keys, across its rebuilds: it
    /// draws fresh keys only for hashers the builder made.
    pub fn hasher<T>(self, hash_builder: T) -> Builder<T> {
        Builder {
            capacity: self.capacity,
            false_positive_rate: self.false_positive_rate,
            fingerprint_bits: self.fingerprint_bits,
            max_path_len: self.max_path_len,
            displacement: self.displacement,
            growth: self.growth,
            max_memory: self.max_memory,
            hash_builder,
            hash_keys: None,
        }
    }

    /// Builds the filter.
    ///
    /// # Errors
    ///
    /// A [`BuildError`] if the capacity is unset, 0 or too large, the rate is not in (0, 1)
    /// or below what 16 bits reach, the width is not 8, 12 or 16 (or too narrow for the rate
    /// also given), the path length is outside `1..=8`, the growth factor or step limit is
    /// out of range, or the buckets cannot be allocated.
    pub fn build(self) -> Result<CuckooFilter<S>, BuildError> {
        let capacity = match self.capacity {
            None => return Err(BuildError::CapacityNotSet),
            Some(0) => return Err(BuildError::ZeroCapacity),
            Some(n) => n,
        };
        let bits = fingerprint_bits_for(self.fingerprint_bits, self.false_positive_rate)?;
        if !(1..=MAX_PATH_LEN).contains(&self.max_path_len) {
            return Err(BuildError::InvalidMaxPathLen {
                len: self.max_path_len,
            });
        }
        let kicks = match self.displacement {
            Displacement::BreadthFirst => 0,
            Displacement::RandomWalk { max_kicks } if (1..=100_000).contains(&max_kicks) => {
                max_kicks
            }
            Displacement::RandomWalk { max_kicks } => {
                return Err(BuildError::InvalidMaxKicks { max_kicks })
            }
        };
        let (factor, max_steps) = match self.growth {
            Growth::Fixed => (0, 0),
            Growth::Expand { factor, max_steps }
                if factor.is_power_of_two()
                    && factor <= 16
                    && (1..=32).contains(&max_steps)
                    && factor.trailing_zeros() as usize * max_steps <= 16 =>
            {
                (factor.trailing_zeros(), max_steps)
            }
            Growth::Expand { factor, max_steps } => {
                return Err(BuildError::InvalidGrowth { factor, max_steps })
            }
        };
        let width = Width::for_class(bits);
        let too_large = BuildError::CapacityTooLarge {
            requested: capacity,
            max: max_capacity(width.slots()),
        };
        let buckets = buckets_for(capacity, width.slots()).ok_or(too_large)?;
        let needed = first_heap_bytes(width, buckets, max_steps);
        if let Some(limit) = self.max_memory.filter(|&limit| needed > limit) {
            // Refused without allocating.
            return Err(BuildError::MemoryLimit { limit, needed });
        }
        let allocation_failed = BuildError::AllocationFailed {
            bytes: buckets.saturating_mul(width.word_bytes()),
        };
        let table =
            Table::new(width, buckets, self.max_path_len, kicks).ok_or(allocation_failed)?;
        let mut tables = Tables::new(table, factor, max_steps);
        debug_assert_eq!(
            tables.heap_bytes(),
            needed,
            "the computed size is the built one"
        );
        if let Some(limit) = self.max_memory {
            tables = tables.with_max_bytes(limit);
        }
        Ok(CuckooFilter {
            hash_builder: self.hash_builder,
            hash_keys: self.hash_keys,
            built_for: capacity,
            tables,
        })
    }
}

/// The heap bytes of a new filter's tables: a base table of `buckets` buckets of layout `width`,
/// with room for `max_steps` growth steps ([`CuckooFilter::memory_usage`] before any growth),
/// computed without allocating them.
fn first_heap_bytes(width: Width, buckets: usize, max_steps: usize) -> usize {
    Tables::heap_bytes_for(Table::heap_bytes_for(width, buckets), max_steps)
}

#[cfg(all(test, not(cuckoo_loom)))]
mod key_tests {
    use super::*;

    #[test]
    fn the_generators_bytes_are_the_keys() {
        let bytes: [u8; 32] = std::array::from_fn(|i| i as u8);
        assert_eq!(
            keys_of(bytes),
            [
                0x0706_0504_0302_0100,
                0x0f0e_0d0c_0b0a_0908,
                0x1716_1514_1312_1110,
                0x1f1e_1d1c_1b1a_1918
            ]
        );
    }

    #[test]
    fn every_draw_of_keys_is_new() {
        for draw in [random_keys, fallback_keys] {
            let mut seen = std::collections::HashSet::new();
            for _ in 0..1_000 {
                let keys = draw();
                assert!(seen.insert(keys), "a draw repeated {keys:x?}");
                let distinct: std::collections::HashSet<u64> = keys.into_iter().collect();
                assert_eq!(distinct.len(), 4, "{keys:x?}");
            }
        }
    }
}

#[cfg(all(test, not(cuckoo_loom)))]
mod ceiling_tests {
    use super::*;

    /// The computed size is the built one (`build` also asserts it in debug builds), and the
    /// largest capacity under a ceiling is exactly the last that builds under it.
    #[test]
    fn the_largest_sibling_under_a_ceiling_is_the_last_that_builds() {
        let growths = [
            Growth::Fixed,
            Growth::Expand {
                factor: 2,
                max_steps: 8,
            },
        ];
        let mut checked = 0;
        for bits in [8, 12, 16] {
            for growth in growths {
                for capacity in [1, 100, 5_000, 70_000] {
                    let filter = CuckooFilter::builder()
                        .capacity(capacity)
                        .fingerprint_bits(bits)
                        .growth(growth)
                        .build()
                        .unwrap();
                    let width = filter.tables.base().width();
                    let buckets = buckets_for(capacity, width.slots()).unwrap();
                    let computed = first_heap_bytes(width, buckets, growth_steps(growth));
                    assert_eq!(filter.memory_usage(), computed, "{bits} bits, {capacity}");
                    // A ceiling of two thirds of that filter: a sibling for `capacity` is over it.
                    let limit = computed * 2 / 3;
                    let capped = CuckooFilter::builder()
                        .capacity(1)
                        .fingerprint_bits(bits)
                        .growth(growth)
                        .max_memory(limit)
                        .build();
                    let Ok(capped) = capped else {
                        continue;
                    };
                    let fits = capped.largest_sibling_under_ceiling(capacity).unwrap();
                    assert!(fits < capacity, "{bits} bits, {capacity}: {fits}");
                    let built = capped.sibling(fits).unwrap();
                    assert!(built.memory_usage() <= limit);
                    assert!(matches!(
                        capped.sibling(fits + 1),
                        Err(BuildError::MemoryLimit { .. })
                    ));
                    checked += 1;
                }
            }
        }
        // Small filters may have no sibling under two thirds of their size; the others do.
        assert!(checked >= 12, "{checked} ceilings checked");
        let tiny = CuckooFilter::builder()
            .capacity(1)
            .max_memory(usize::MAX)
            .build()
            .unwrap();
        assert_eq!(tiny.largest_sibling_under_ceiling(10), Some(10));
    }

    fn growth_steps(growth: Growth) -> usize {
        match growth {
            Growth::Fixed => 0,
            Growth::Expand { max_steps, .. } => max_steps,
        }
    }
}
