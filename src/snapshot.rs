//! Snapshots: a filter written to a file (or any [`Write`]) while it serves, and read back
//! whole and checked.
//!
//! [`CuckooFilter::write_snapshot`] copies the filter while readers and writers run, without
//! stopping or locking them out (each writer checks one flag; see below), and
//! [`CuckooFilter::read_snapshot`] rebuilds it. A snapshot holds every key whose insert
//! returned before the snapshot began and that was not removed before it ended; it may also
//! hold keys inserted or removed while it was taken (a removed one is a false positive of the
//! loaded filter, never a false negative of it).
//!
//! Reading refuses, with a specific [`SnapshotError`], anything it cannot trust: input that
//! is truncated, is not a snapshot, has a format version this build does not read, fails a
//! checksum, or was hashed differently from the filter it would become (another ahash build,
//! another hasher). It never panics and never returns a filter that misses a key the
//! snapshot holds.
//!
//! ```
//! use cuckoo_guard::CuckooFilter;
//!
//! let filter = CuckooFilter::with_capacity(10_000);
//! for id in 0..5_000u64 {
//!     filter.insert(&id)?;
//! }
//! let mut file = Vec::new();
//! filter.write_snapshot(&mut file)?;
//! let restored = CuckooFilter::read_snapshot(&file[..])?;
//! assert!((0..5_000u64).all(|id| restored.contains(&id)));
//! assert_eq!(restored.len(), filter.len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The file holds the hash keys
//!
//! A filter's hash keys are what keep an attacker from choosing keys that collide (the README's
//! "Keys an attacker chooses"): whoever reads them can compute keys that all land in one
//! bucket pair, which fill a fixed-size filter's pair or push a growing filter to add tables.
//! So a snapshot file is as sensitive as the keys: [`CuckooFilter::write_snapshot_file`]
//! creates it readable and writable by its owner only (mode `0600` on Unix), writes it under
//! a temporary name and renames it into place (a reader never sees half a file), and syncs
//! it to disk before the rename. Store and copy it as you would a secret. A guard's rebuilds
//! draw fresh keys (for filters whose hasher the builder made), so a leaked file's keys serve
//! only until the guard it came from, or one restored from it, next rebuilds.
//!
//! # Taking a snapshot while writers run
//!
//! The snapshot reads each table's bucket words once, in order, with no lock held, while
//! inserts, removes and displacements go on. A displacement (or a remove that takes the copy
//! another key was relying on) can move a key's fingerprint from a bucket the copy has not
//! read yet to one it already has, where the copy would miss it. Every such move checks,
//! under its bucket locks, whether it may straddle the copy's position, and if so records the
//! moved fingerprint; the snapshot carries these *extra* copies after each table, and reading
//! puts them back into their bucket pairs. A writer pays one load of a flag when no snapshot
//! runs. The protocol, its proof and its loom models are in the crate's `table::copy`
//! module.
//!
//! # The format (version 3)
//!
//! Every integer is little-endian. A snapshot is a header, the tables, and a trailer.
//!
//! **Header** (128 bytes):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | magic: `89 43 55 43 4B 4F 4F 0A` (`\x89CUCKOO\n`) |
//! | 8 | 2 | format version: 3 |
//! | 10 | 1 | fingerprint bits, which name the layout: 8, 12, 15 or 16 |
//! | 11 | 1 | maximum cuckoo path length, in buckets: 1 to 8 |
//! | 12 | 1 | growth shift: `log2` of the growth factor (0 to 4) |
//! | 13 | 1 | growth steps allowed: 0 (the filter never grows) to 32 |
//! | 14 | 1 | tables in this snapshot: 1 + the growth steps taken |
//! | 15 | 1 | hasher: 1 = ahash keyed by the four keys below; 0 = the caller's own hasher (keys are 0) |
//! | 16 | 4 | random-walk kick limit (0 = breadth-first path search) |
//! | 20 | 4 | reserved, 0 |
//! | 24 | 8 | buckets of the base table: 1 to 2^32 |
//! | 32 | 8 | the capacity, in keys, the filter was built for: its base table has the buckets the builder sizes for it |
//! | 40 | 32 | the hasher's four 64-bit keys |
//! | 72 | 8 | probe: the filter's hash of the `u64` 0x6375636B6F6F2D67 |
//! | 80 | 8 | seal id: the public id of the seal secret the file was sealed with, 0 if unsealed |
//! | 88 | 8 | XXH64 (seed 0) of bytes 0 to 87 |
//! | 96 | 32 | MAC: keyed BLAKE3, keyed by the seal secret, of the whole file with these 32 bytes read as zeros; all zeros if unsealed |
//!
//! A guard's seal ([`CacheGuard::seal`](crate::guard::CacheGuard::seal)) draws a secret of 32
//! random bytes and keeps it in its store; the file carries only the secret's id (the first 8
//! bytes of the secret's unkeyed BLAKE3 hash, [`SealSecret::id`]) and the MAC. The XXH64
//! checksums catch damage; only the MAC tells a file written under the seal from one that
//! was not, and whoever lacks the secret cannot compute it. A restart checks the MAC over
//! the file's raw bytes before it reads the body, and compares it in constant time.
//! Snapshots written without a seal ([`CuckooFilter::write_snapshot`]) have id and MAC 0 and
//! are never trusted at a restart.
//!
//! The probe is how a reader tells whether its hashing matches the writer's: it hashes the
//! same value with the hasher it would use and refuses the snapshot
//! ([`SnapshotError::HasherMismatch`]) if the results differ. ahash does not promise the same
//! hashes across its versions, target features or platforms; a filter loaded with other
//! hashing would look every key up in the wrong buckets.
//!
//! **Tables**, newest first, one section per table. Table `i` (0 is the base table) has
//! `base << (i * shift)` buckets. A section is:
//!
//! - the table's bucket words, in bucket order: 4 bytes each for 8-bit fingerprints, 8 bytes
//!   for the others. 0 is an empty slot. (Plain words: the paper's semi-sorting would save
//!   one bit per slot but decodes slower than a whole load runs; `benches/semi_sort.rs`
//!   measures it.)
//!   - 8 or 16 bits: four slots, slot `j` in bits `j * bits` to `(j + 1) * bits - 1`.
//!   - 15 bits (the 16-bit class): four 16-bit lanes, slot `j`'s fingerprint in bits `16 j`
//!     to `16 j + 14`; bit `16 j + 15` is the bucket's overflow bit `j`, owned by the
//!     fingerprints `f` with `f >> 13 == j`.
//!   - 12 bits (the 12-bit class): five slots, slot `j` in bits `12 j` to `12 j + 11`;
//!     bits 60 to 63 are the overflow bits, bit `60 + (f >> 10)` owned by fingerprint `f`.
//!
//!   An overflow bit set in a bucket says a copy of one of its fingerprints whose primary
//!   bucket this is may live in the other bucket of its pair (`table::overflow`); a reader
//!   keeps them as they are.
//! - the number of extras, 8 bytes, at most one per slot of the table;
//! - a checkpoint, 8 bytes: XXH64, seeded with the header's checksum, of every byte from the
//!   end of the header to the end of the number of extras, so that damage to the words or the
//!   count is caught before the count is used;
//! - each extra, 8 bytes: a bucket index of the table in bits 0 to 31 and a non-zero
//!   fingerprint in bits 32 to 47. Reading inserts the fingerprint into that bucket's pair.
//!
//! **Trailer** (16 bytes): the number of fingerprints in all tables, extras included (8
//! bytes), then XXH64, seeded with the header's checksum, of every byte from the end of the
//! header to the end of that count, checkpoints included (8 bytes). The seed ties the body to
//! its header: a header spliced onto another snapshot's body (of the same shape, say, but
//! another seal id) fails the body's checks.
//!
//! A future format gets a new version number. This build reads versions 2 and 3: version 2
//! is version 3 with fingerprint bits 8 or 16 only (plain words, no overflow bits); a table
//! loaded from it keeps its plain 16-bit fingerprints until the filter is rebuilt. It refuses
//! version 1 (a 96-byte header without the MAC, whose tag was the seal itself).

use std::fs::{self, File, OpenOptions};
use std::hash::BuildHasher;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use ahash::RandomState;
use xxhash_rust::xxh64::{xxh64, Xxh64};

use crate::error::SnapshotError;
use crate::filter::{CuckooFilter, Displacement, Growth};
use crate::secret::SealSecret;
use crate::sizing::buckets_for;
use crate::table::{Extra, Table, Tables, Width, MAX_PATH_LEN};

impl<S: BuildHasher> CuckooFilter<S> {
    /// Writes a snapshot of the filter to `w` while other threads keep reading and writing
    /// it (the [`snapshot`](crate::snapshot) module documents the format and the protocol).
    ///
    /// The snapshot holds every key whose insert returned before this call and that was not
    /// removed before it returned; keys inserted or removed during the call may or may not be
    /// in it. Writes go to `w` in chunks of up to 64 KiB; a slow `w` only makes the copy
    /// take longer (and the writers that move fingerprints across its position log a few
    /// more extras). One snapshot of a filter runs at a time; a second call waits.
    ///
    /// The snapshot holds the filter's hash keys: see the [module documentation](crate::snapshot#the-file-holds-the-hash-keys)
    /// before storing it anywhere but a private file ([`write_snapshot_file`](Self::write_snapshot_file)).
    ///
    /// # Errors
    ///
    /// [`SnapshotError::Io`] if writing fails; the filter is unchanged.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let filter = CuckooFilter::with_capacity(1_000);
    /// filter.insert("user:42")?;
    /// let mut bytes = Vec::new();
    /// let written = filter.write_snapshot(&mut bytes)?;
    /// assert_eq!(written.bytes, bytes.len() as u64);
    /// let restored = CuckooFilter::read_snapshot(&bytes[..])?;
    /// assert!(restored.contains("user:42"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_snapshot<W: Write>(&self, w: W) -> Result<SnapshotWritten, SnapshotError> {
        write(self, w, 0)
    }

    /// [`write_snapshot`](Self::write_snapshot) to a file at `path`: created readable only by
    /// its owner (mode `0600` on Unix, because it holds the hash keys), written under a
    /// temporary name in the same directory, synced, and renamed over `path`, so a reader
    /// finds the old file or the whole new one. Each call has its own temporary file
    /// (`.NAME.PID.RANDOM.tmp`), so writes of one path at once do not mix; one that a crash
    /// interrupts stays behind (owner-only) and may be deleted.
    ///
    /// # Errors
    ///
    /// [`SnapshotError::Io`] if the file cannot be created, written, synced or renamed; the
    /// temporary file is removed and an existing file at `path` is left as it was.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::CuckooFilter;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("users.cgsnap");
    /// let filter = CuckooFilter::with_capacity(1_000);
    /// filter.insert(&7u64)?;
    /// filter.write_snapshot_file(&path)?;
    /// # #[cfg(unix)]
    /// # {
    /// use std::os::unix::fs::PermissionsExt;
    /// assert_eq!(std::fs::metadata(&path)?.permissions().mode() & 0o777, 0o600);
    /// # }
    /// assert!(CuckooFilter::read_snapshot_file(&path)?.contains(&7u64));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_snapshot_file(
        &self,
        path: impl AsRef<Path>,
    ) -> Result<SnapshotWritten, SnapshotError> {
        write_file(self, path.as_ref(), None)
    }

    /// Reads a snapshot of a filter that hashed with `hasher` (one built with
    /// [`Builder::hasher`](crate::Builder::hasher)), checking that `hasher` hashes as the
    /// snapshot's filter did.
    ///
    /// # Errors
    ///
    /// As [`read_snapshot`](CuckooFilter::read_snapshot), except that a snapshot without hash
    /// keys is accepted; [`SnapshotError::HasherMismatch`] if `hasher` hashes differently.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::hash::BuildHasherDefault;
    /// use std::collections::hash_map::DefaultHasher;
    /// use cuckoo_guard::{CuckooFilter, SnapshotError};
    ///
    /// type Fixed = BuildHasherDefault<DefaultHasher>;
    /// let filter = CuckooFilter::builder().capacity(100).hasher(Fixed::default()).build()?;
    /// filter.insert("a")?;
    /// let mut bytes = Vec::new();
    /// filter.write_snapshot(&mut bytes)?;
    /// assert!(matches!(CuckooFilter::read_snapshot(&bytes[..]), Err(SnapshotError::HashKeysMissing)));
    /// let restored = CuckooFilter::read_snapshot_with_hasher(&bytes[..], Fixed::default())?;
    /// assert!(restored.contains("a"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_snapshot_with_hasher<R: Read>(r: R, hasher: S) -> Result<Self, SnapshotError> {
        read(r, |_| Ok((hasher, None)))
    }
}

impl CuckooFilter<RandomState> {
    /// Reads a snapshot written by [`write_snapshot`](CuckooFilter::write_snapshot): the
    /// filter as it was, with its hash keys, configuration and fingerprints.
    ///
    /// Everything is checked before the filter is returned: the magic bytes, the format
    /// version, both checksums, every header field, and a probe hash that this build's ahash
    /// must reproduce under the file's keys. Reads exactly the snapshot's bytes from `r`.
    ///
    /// # Errors
    ///
    /// [`SnapshotError::Truncated`], [`BadMagic`](SnapshotError::BadMagic),
    /// [`UnsupportedVersion`](SnapshotError::UnsupportedVersion),
    /// [`HeaderChecksum`](SnapshotError::HeaderChecksum),
    /// [`BodyChecksum`](SnapshotError::BodyChecksum),
    /// [`InvalidHeader`](SnapshotError::InvalidHeader) or
    /// [`InvalidBody`](SnapshotError::InvalidBody) for damaged or foreign input;
    /// [`HasherMismatch`](SnapshotError::HasherMismatch) if this build hashes differently;
    /// [`HashKeysMissing`](SnapshotError::HashKeysMissing) for a filter that used a caller's
    /// hasher; [`AllocationFailed`](SnapshotError::AllocationFailed),
    /// [`Overfull`](SnapshotError::Overfull) or [`Io`](SnapshotError::Io).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::{CuckooFilter, SnapshotError};
    ///
    /// let filter = CuckooFilter::with_capacity(1_000);
    /// filter.insert(&1u64)?;
    /// let mut bytes = Vec::new();
    /// filter.write_snapshot(&mut bytes)?;
    /// assert!(CuckooFilter::read_snapshot(&bytes[..])?.contains(&1u64));
    ///
    /// bytes[200] ^= 0x10; // one flipped bit in the tables
    /// let error = CuckooFilter::read_snapshot(&bytes[..]).unwrap_err();
    /// assert!(matches!(error, SnapshotError::BodyChecksum));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_snapshot<R: Read>(r: R) -> Result<Self, SnapshotError> {
        read(r, ahash_of)
    }

    /// [`read_snapshot`](Self::read_snapshot) from the file at `path`, buffered; a file with
    /// bytes after the snapshot is refused ([`SnapshotError::TrailingData`]).
    ///
    /// # Errors
    ///
    /// As [`read_snapshot`](Self::read_snapshot), plus [`SnapshotError::Io`] if the file cannot
    /// be opened.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::{CuckooFilter, SnapshotError};
    ///
    /// let missing = CuckooFilter::read_snapshot_file("/nonexistent/users.cgsnap");
    /// assert!(matches!(missing, Err(SnapshotError::Io(_))));
    /// ```
    pub fn read_snapshot_file(path: impl AsRef<Path>) -> Result<Self, SnapshotError> {
        read_file(path.as_ref(), |r| Self::read_snapshot(r))
    }
}

/// The first 8 bytes of every snapshot.
const MAGIC: [u8; 8] = *b"\x89CUCKOO\n";

/// The format version this build writes. It also reads version 2, whose 16-bit words hold
/// plain 16-bit fingerprints.
pub const FORMAT_VERSION: u16 = 3;

/// The oldest format version this build reads.
const OLDEST_READABLE: u16 = 2;

/// Bytes of the header, its checksum and the MAC included.
const HEADER_LEN: usize = 128;

/// Where the MAC sits in the header.
const MAC_AT: usize = 96;

/// Bytes of the MAC.
const MAC_LEN: usize = 32;

/// The value whose hash the header carries as the probe.
const PROBE_KEY: u64 = 0x6375_636B_6F6F_2D67;

/// Buckets copied and written per chunk.
const CHUNK: usize = 8192;

/// The largest bucket count of one table.
const MAX_BUCKETS: u64 = 1 << 32;

/// The probe value of a hasher: its hash of [`PROBE_KEY`].
fn probe_of(hasher: &impl BuildHasher) -> u64 {
    hasher.hash_one(PROBE_KEY)
}

/// The configuration a snapshot's header records (its `Debug` leaves out the hash keys).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Header {
    version: u16,
    width: Width,
    max_path_len: usize,
    step_shift: u32,
    max_steps: usize,
    tables: usize,
    keys: Option<[u64; 4]>,
    kicks: usize,
    base_buckets: usize,
    built_for: usize,
    probe: u64,
    tag: u64,
    mac: [u8; MAC_LEN],
}

impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Header")
            .field("version", &self.version)
            .field("width", &self.width)
            .field("max_path_len", &self.max_path_len)
            .field("step_shift", &self.step_shift)
            .field("max_steps", &self.max_steps)
            .field("tables", &self.tables)
            .field("keys", &self.keys.map(|_| "<redacted>"))
            .field("kicks", &self.kicks)
            .field("base_buckets", &self.base_buckets)
            .field("built_for", &self.built_for)
            .field("probe", &self.probe)
            .field("tag", &self.tag)
            .finish()
    }
}

impl Header {
    fn of<S: BuildHasher>(filter: &CuckooFilter<S>, tables: usize, tag: u64) -> Self {
        let t = filter.tables();
        Header {
            version: FORMAT_VERSION,
            width: t.base().width(),
            max_path_len: filter.max_path_len(),
            step_shift: t.step_shift(),
            max_steps: t.max_growth_steps(),
            tables,
            keys: filter.hash_keys(),
            kicks: t.base().random_walk_kicks(),
            base_buckets: t.base().num_buckets(),
            built_for: filter.built_for(),
            probe: probe_of(filter.hasher()),
            tag,
            mac: [0; MAC_LEN],
        }
    }

    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&self.version.to_le_bytes());
        h[10] = self.width.fingerprint_bits() as u8;
        h[11] = self.max_path_len as u8;
        h[12] = self.step_shift as u8;
        h[13] = self.max_steps as u8;
        h[14] = self.tables as u8;
        h[15] = u8::from(self.keys.is_some());
        h[16..20].copy_from_slice(&(self.kicks as u32).to_le_bytes());
        h[24..32].copy_from_slice(&(self.base_buckets as u64).to_le_bytes());
        h[32..40].copy_from_slice(&(self.built_for as u64).to_le_bytes());
        for (i, key) in self.keys.unwrap_or_default().iter().enumerate() {
            h[40 + 8 * i..48 + 8 * i].copy_from_slice(&key.to_le_bytes());
        }
        h[72..80].copy_from_slice(&self.probe.to_le_bytes());
        h[80..88].copy_from_slice(&self.tag.to_le_bytes());
        let checksum = xxh64(&h[..88], 0);
        h[88..96].copy_from_slice(&checksum.to_le_bytes());
        h[MAC_AT..].copy_from_slice(&self.mac);
        h
    }

    /// The seed of the body's checksums: the header's own checksum, so that a body checks out
    /// only behind the header it was written with (two files spliced together do not).
    fn body_seed(&self) -> u64 {
        let h = self.encode();
        u64::from_le_bytes(h[88..96].try_into().expect("8 bytes"))
    }

    fn decode(h: &[u8; HEADER_LEN]) -> Result<Self, SnapshotError> {
        let u32_at = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
        if h[0..8] != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        let version = u16::from_le_bytes([h[8], h[9]]);
        if !(OLDEST_READABLE..=FORMAT_VERSION).contains(&version) {
            return Err(SnapshotError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        if xxh64(&h[..88], 0) != u64_at(88) {
            return Err(SnapshotError::HeaderChecksum);
        }
        let invalid = |field| Err(SnapshotError::InvalidHeader { field });
        let width = match (version, h[10]) {
            (_, 8) => Width::Fp8,
            (_, 16) => Width::Fp16,
            (3.., 12) => Width::Fp12,
            (3.., 15) => Width::Fp15,
            _ => return invalid("fingerprint width"),
        };
        let max_path_len = usize::from(h[11]);
        if !(1..=MAX_PATH_LEN).contains(&max_path_len) {
            return invalid("maximum path length");
        }
        let (step_shift, max_steps) = (u32::from(h[12]), usize::from(h[13]));
        let growth_ok = if max_steps == 0 {
            step_shift == 0
        } else {
            step_shift <= 4 && max_steps <= 32 && step_shift as usize * max_steps <= 16
        };
        if !growth_ok {
            return invalid("growth");
        }
        let tables = usize::from(h[14]);
        if tables == 0 || tables > max_steps + 1 {
            return invalid("table count");
        }
        let keys = match h[15] {
            0 if h[40..72].iter().all(|&b| b == 0) => None,
            1 => Some([u64_at(40), u64_at(48), u64_at(56), u64_at(64)]),
            _ => return invalid("hasher"),
        };
        let kicks = u32_at(16) as usize;
        if kicks > 100_000 {
            return invalid("random-walk kick limit");
        }
        if u32_at(20) != 0 {
            return invalid("reserved bytes");
        }
        let base = u64_at(24);
        let largest = (tables as u64 - 1) * u64::from(step_shift);
        if base == 0 || base > MAX_BUCKETS || base << largest > MAX_BUCKETS {
            return invalid("bucket count");
        }
        let Ok(base_buckets) = usize::try_from(base) else {
            return invalid("bucket count");
        };
        let built_for = match usize::try_from(u64_at(32)) {
            Ok(n) if n >= 1 => n,
            _ => return invalid("capacity"),
        };
        // Every writer's base table has `buckets_for(built_for)` buckets (the builder sizes it
        // so, grown tables nest over it, a rebuild builds afresh): a file that claims another
        // capacity would size the guard's rebuilds by a number its tables do not bear out.
        if buckets_for(built_for, width.slots()) != Some(base_buckets) {
            return Err(SnapshotError::CapacityMismatch {
                built_for: built_for as u64,
                base_buckets: base,
            });
        }
        let tag = u64_at(80);
        let mac: [u8; MAC_LEN] = h[MAC_AT..].try_into().expect("32 bytes");
        if tag == 0 && mac != [0; MAC_LEN] {
            return invalid("MAC");
        }
        Ok(Header {
            version,
            width,
            max_path_len,
            step_shift,
            max_steps,
            tables,
            keys,
            kicks,
            base_buckets,
            built_for,
            probe: u64_at(72),
            tag,
            mac,
        })
    }

    /// Buckets of table `i` (0 is the base table).
    fn buckets(&self, i: usize) -> usize {
        self.base_buckets << (i as u32 * self.step_shift)
    }

    fn word_bytes(&self) -> usize {
        self.width.word_bytes()
    }

    fn growth(&self) -> Growth {
        if self.max_steps == 0 {
            Growth::Fixed
        } else {
            Growth::Expand {
                factor: 1 << self.step_shift,
                max_steps: self.max_steps,
            }
        }
    }

    fn displacement(&self) -> Displacement {
        match self.kicks {
            0 => Displacement::BreadthFirst,
            max_kicks => Displacement::RandomWalk { max_kicks },
        }
    }
}

/// Writes `values` into the start of `bytes` as `width`-byte little-endian words, growing
/// it if it is too short (never shrinking it, so a buffer reused chunk after chunk is
/// zeroed once), and returns the bytes written.
#[inline]
fn encode<'a>(values: &[u64], width: usize, bytes: &'a mut Vec<u8>) -> &'a [u8] {
    let len = values.len() * width;
    if bytes.len() < len {
        bytes.resize(len, 0);
    }
    let out = &mut bytes[..len];
    if width == 8 {
        for (v, b) in values.iter().zip(out.chunks_exact_mut(8)) {
            b.copy_from_slice(&v.to_le_bytes());
        }
    } else {
        for (v, b) in values.iter().zip(out.chunks_exact_mut(4)) {
            b.copy_from_slice(&(*v as u32).to_le_bytes());
        }
    }
    out
}

/// Decodes `width`-byte little-endian words from `bytes` into `values`.
#[inline]
fn decode(bytes: &[u8], width: usize, values: &mut [u64]) {
    if width == 8 {
        for (v, b) in values.iter_mut().zip(bytes.chunks_exact(8)) {
            *v = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        }
    } else {
        for (v, b) in values.iter_mut().zip(bytes.chunks_exact(4)) {
            *v = u64::from(u32::from_le_bytes(b.try_into().expect("4 bytes")));
        }
    }
}

/// What [`CuckooFilter::write_snapshot`] wrote.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::CuckooFilter;
///
/// let filter = CuckooFilter::with_capacity(100);
/// filter.insert("a")?;
/// let written = filter.write_snapshot(std::io::sink())?;
/// assert_eq!(written.items, 1);
/// assert_eq!(written.extras, 0); // no writer moved anything during the copy
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SnapshotWritten {
    /// Bytes written.
    pub bytes: u64,
    /// Fingerprints in the snapshot, extras included.
    pub items: u64,
    /// Copies concurrent writers moved across the copy, carried as extras.
    pub extras: u64,
}

/// Writes `filter`'s snapshot to `w` (see the module documentation).
pub(crate) fn write<S: BuildHasher>(
    filter: &CuckooFilter<S>,
    mut w: impl Write,
    tag: u64,
) -> Result<SnapshotWritten, SnapshotError> {
    let tables = filter.tables();
    // A key inserted before this call is in a table this load counts (growth [growth.G2]).
    let grown = tables.growth_steps();
    let header = Header::of(filter, grown + 1, tag);
    w.write_all(&header.encode())?;
    let width = header.word_bytes();
    let mut sum = Xxh64::new(header.body_seed());
    let mut bytes = Vec::with_capacity(CHUNK * width);
    let (mut items, mut extras_total, mut written) = (0u64, 0u64, HEADER_LEN as u64);
    // Newest first: a remove hands a key over only to a copy in its own or an older table
    // (growth invariant (b)), so a copy handed over while one table is copied lands in a
    // table not copied yet.
    for i in (0..=grown).rev() {
        let extras = tables.table(i).copy_out(CHUNK, |values| {
            items += header.width.occupied(values);
            let encoded = encode(values, width, &mut bytes);
            sum.update(encoded);
            written += encoded.len() as u64;
            w.write_all(encoded)
        })?;
        bytes.clear();
        bytes.extend_from_slice(&(extras.len() as u64).to_le_bytes());
        sum.update(&bytes);
        let checkpoint = sum.digest().to_le_bytes();
        bytes.extend_from_slice(&checkpoint);
        sum.update(&checkpoint);
        let hashed = bytes.len();
        for extra in &extras {
            bytes.extend_from_slice(&(extra.bucket as u64 | extra.fp << 32).to_le_bytes());
        }
        items += extras.len() as u64;
        extras_total += extras.len() as u64;
        sum.update(&bytes[hashed..]);
        written += bytes.len() as u64;
        w.write_all(&bytes)?;
    }
    let count = items.to_le_bytes();
    sum.update(&count);
    w.write_all(&count)?;
    w.write_all(&sum.digest().to_le_bytes())?;
    w.flush()?;
    Ok(SnapshotWritten {
        bytes: written + 16,
        items,
        extras: extras_total,
    })
}

/// Passes writes on to `w`, feeding every byte written to the MAC if there is one.
struct MacWriter<'a, W> {
    w: W,
    mac: Option<&'a mut blake3::Hasher>,
}

impl<W: Write> Write for MacWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.w.write(buf)?;
        if let Some(mac) = self.mac.as_deref_mut() {
            mac.update(&buf[..n]);
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}

/// Writes `filter`'s snapshot to `path`: owner-only, under a temporary name, synced, then
/// renamed into place. With a `seal`, the header carries the seal's id and the MAC of the
/// whole file keyed by its secret (written last, into the header's MAC field).
pub(crate) fn write_file<S: BuildHasher>(
    filter: &CuckooFilter<S>,
    path: &Path,
    seal: Option<&SealSecret>,
) -> Result<SnapshotWritten, SnapshotError> {
    let name = path.file_name().ok_or_else(|| {
        SnapshotError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        ))
    })?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut options = OpenOptions::new();
    // A new file per write: two writes of one path never share (and truncate) one file.
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let (mut file, temporary) = open_temporary(dir, name, &options)?;
    let result = (|| {
        let tag = seal.map_or(0, SealSecret::id);
        let mut mac = seal.map(|secret| blake3::Hasher::new_keyed(secret.as_bytes()));
        let written = write(
            filter,
            MacWriter {
                w: &mut file,
                mac: mac.as_mut(),
            },
            tag,
        )?;
        if let Some(mac) = mac {
            // The MAC field was written as zeros and hashed so; it gets the MAC in place.
            file.seek(SeekFrom::Start(MAC_AT as u64))?;
            file.write_all(mac.finalize().as_bytes())?;
        }
        file.sync_all()?;
        fs::rename(&temporary, path)?;
        // The rename is durable once the directory is synced; where a directory cannot be
        // opened (not Unix), the file itself is synced already.
        if let Ok(dir) = File::open(dir) {
            let _ = dir.sync_all();
        }
        Ok(written)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    result
}

/// A new file beside `path`'s name in `dir`, named `.{name}.{pid}.{random}.tmp`.
fn open_temporary(
    dir: &Path,
    name: &std::ffi::OsStr,
    options: &OpenOptions,
) -> Result<(File, std::path::PathBuf), SnapshotError> {
    let random = RandomState::new();
    let mut attempt = 0u64;
    loop {
        let mut temporary_name = std::ffi::OsString::from(".");
        temporary_name.push(name);
        temporary_name.push(format!(
            ".{}.{:016x}.tmp",
            std::process::id(),
            random.hash_one(attempt)
        ));
        let temporary = dir.join(temporary_name);
        match options.open(&temporary) {
            Ok(file) => return Ok((file, temporary)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 8 => {
                attempt += 1;
            }
            Err(e) => return Err(SnapshotError::Io(e)),
        }
    }
}

/// Reads a body: bucket words into tables (or nowhere, for [`inspect`]), extras and the
/// trailer, hashing as it goes.
struct Body<R> {
    r: R,
    sum: Xxh64,
    bytes: Vec<u8>,
    width: usize,
    layout: Width,
    items: u64,
    extras: u64,
    read: u64,
}

impl<R: Read> Body<R> {
    fn new(r: R, header: &Header) -> Self {
        Body {
            r,
            sum: Xxh64::new(header.body_seed()),
            bytes: Vec::new(),
            width: header.word_bytes(),
            layout: header.width,
            items: 0,
            extras: 0,
            read: HEADER_LEN as u64,
        }
    }

    fn read_hashed(&mut self, n: usize) -> Result<(), SnapshotError> {
        self.bytes.resize(n, 0);
        self.r.read_exact(&mut self.bytes)?;
        self.sum.update(&self.bytes);
        self.read += n as u64;
        Ok(())
    }

    fn u64(&mut self) -> Result<u64, SnapshotError> {
        self.read_hashed(8)?;
        Ok(u64::from_le_bytes(
            self.bytes[..8].try_into().expect("8 bytes"),
        ))
    }

    /// Fills `values` with the next bucket words.
    fn words(&mut self, values: &mut [u64]) -> Result<(), SnapshotError> {
        self.read_hashed(values.len() * self.width)?;
        decode(&self.bytes, self.width, values);
        self.items += self.layout.occupied(values);
        Ok(())
    }

    /// The extras count and checkpoint of a table of `buckets` buckets, then its extras,
    /// unchecked until [`finish`](Self::finish) has checked the trailer ([`check_extras`]).
    fn extras(&mut self, buckets: usize) -> Result<Vec<u64>, SnapshotError> {
        let n = self.u64()?;
        let mut checkpoint = [0u8; 8];
        self.r.read_exact(&mut checkpoint)?;
        if self.sum.digest() != u64::from_le_bytes(checkpoint) {
            return Err(SnapshotError::BodyChecksum);
        }
        self.sum.update(&checkpoint);
        self.read += 8;
        if n > (self.layout.slots() * buckets) as u64 {
            return Err(SnapshotError::InvalidBody {
                what: "more extras than the table has slots",
            });
        }
        let mut extras = Vec::new();
        for _ in 0..n {
            extras.push(self.u64()?);
        }
        self.items += n;
        self.extras += n;
        Ok(extras)
    }

    /// Reads the trailer and checks it against what was read.
    fn finish(mut self) -> Result<u64, SnapshotError> {
        let items = self.u64()?;
        let mut checksum = [0u8; 8];
        self.r.read_exact(&mut checksum)?;
        self.read += 8;
        if self.sum.digest() != u64::from_le_bytes(checksum) {
            return Err(SnapshotError::BodyChecksum);
        }
        if items != self.items {
            return Err(SnapshotError::InvalidBody {
                what: "the item count differs from the fingerprints stored",
            });
        }
        Ok(self.read)
    }
}

/// The extras of a table of `buckets` buckets of `bits`-bit fingerprints, as read by
/// [`Body::extras`], checked.
fn check_extras(raw: &[u64], buckets: usize, bits: u32) -> Result<Vec<Extra>, SnapshotError> {
    raw.iter()
        .map(|&raw| {
            let (bucket, fp) = ((raw & 0xFFFF_FFFF) as usize, raw >> 32);
            if bucket >= buckets || fp == 0 || fp >= 1 << bits {
                return Err(SnapshotError::InvalidBody {
                    what: "an extra names no bucket of its table or no fingerprint",
                });
            }
            Ok(Extra { bucket, fp })
        })
        .collect()
}

fn read_header(r: &mut impl Read) -> Result<Header, SnapshotError> {
    let mut h = [0u8; HEADER_LEN];
    // The magic first, so that short input that is not a snapshot is called that.
    r.read_exact(&mut h[..MAGIC.len()])?;
    if h[..MAGIC.len()] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    r.read_exact(&mut h[MAGIC.len()..])?;
    Header::decode(&h)
}

/// Reads a snapshot with the hasher `hasher_for` picks from its header.
pub(crate) fn read<S: BuildHasher>(
    r: impl Read,
    hasher_for: impl FnOnce(&Header) -> Result<(S, Option<[u64; 4]>), SnapshotError>,
) -> Result<CuckooFilter<S>, SnapshotError> {
    read_tagged(r, hasher_for).map(|(filter, _)| filter)
}

/// [`read`], also returning the snapshot's tag.
pub(crate) fn read_tagged<S: BuildHasher>(
    mut r: impl Read,
    hasher_for: impl FnOnce(&Header) -> Result<(S, Option<[u64; 4]>), SnapshotError>,
) -> Result<(CuckooFilter<S>, u64), SnapshotError> {
    let header = read_header(&mut r)?;
    let (hasher, keys) = hasher_for(&header)?;
    if probe_of(&hasher) != header.probe {
        return Err(SnapshotError::HasherMismatch);
    }
    let mut body = Body::new(r, &header);
    let mut tables = Vec::with_capacity(header.tables);
    for i in (0..header.tables).rev() {
        let table = Table::load(
            header.width,
            header.base_buckets,
            (i > 0).then(|| i as u32 * header.step_shift),
            header.max_path_len,
            header.kicks,
            |values| body.words(values),
            |bytes| SnapshotError::AllocationFailed { bytes },
        )?;
        let extras = body.extras(header.buckets(i))?;
        tables.push((table, extras, header.buckets(i)));
    }
    body.finish()?;
    for (table, raw, buckets) in &mut tables {
        let extras = check_extras(raw, *buckets, header.width.fingerprint_bits())?;
        if !extras.into_iter().all(|extra| table.place_extra(extra)) {
            return Err(SnapshotError::Overfull);
        }
    }
    let mut oldest_first = tables.into_iter().rev().map(|(table, _, _)| table);
    let base = oldest_first
        .next()
        .expect("a snapshot has at least one table");
    let tables = Tables::from_tables(
        base,
        oldest_first.collect(),
        header.step_shift,
        header.max_steps,
    )
    .ok_or(SnapshotError::InvalidHeader {
        field: "table count",
    })?;
    let filter = CuckooFilter::from_parts(hasher, keys, header.built_for, tables);
    Ok((filter, header.tag))
}

/// The hasher of a snapshot that holds its ahash keys.
pub(crate) fn ahash_of(header: &Header) -> Result<(RandomState, Option<[u64; 4]>), SnapshotError> {
    let [k0, k1, k2, k3] = header.keys.ok_or(SnapshotError::HashKeysMissing)?;
    Ok((RandomState::with_seeds(k0, k1, k2, k3), header.keys))
}

/// An opened snapshot file whose header was read, to be loaded only if its MAC checks out
/// under a seal's secret ([`load`](Self::load)).
#[derive(Debug)]
pub(crate) struct SealedFile {
    file: File,
    header: Header,
}

impl SealedFile {
    /// Reads the header of the snapshot in `file`.
    pub(crate) fn new(mut file: File) -> Result<Self, SnapshotError> {
        let header = read_header(&mut BufReader::new(&mut file))?;
        Ok(SealedFile { file, header })
    }

    /// The id of the seal the file names, 0 if the file was not sealed.
    pub(crate) fn seal_id(&self) -> u64 {
        self.header.tag
    }

    /// The filter of a file sealed with `secret` (a filter with ahash keys): the MAC is
    /// checked over every byte of the file first, and only then is the body read (see
    /// [`read_file`]).
    pub(crate) fn load(mut self, secret: &SealSecret) -> Result<CuckooFilter, SnapshotError> {
        // One pass for the MAC, over the file's raw bytes with the MAC field as zeros.
        self.file.seek(SeekFrom::Start(0))?;
        let mut r = BufReader::with_capacity(1 << 20, &mut self.file);
        let mut header = [0u8; HEADER_LEN];
        r.read_exact(&mut header)?;
        let mut mac = blake3::Hasher::new_keyed(secret.as_bytes());
        mac.update(&header[..MAC_AT]);
        mac.update(&[0; MAC_LEN]);
        loop {
            let bytes = match r.fill_buf() {
                Ok([]) => break,
                Ok(bytes) => bytes,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            mac.update(bytes);
            let n = bytes.len();
            r.consume(n);
        }
        let stored = blake3::Hash::from_bytes(header[MAC_AT..].try_into().expect("32 bytes"));
        // blake3::Hash's equality takes the same time wherever the two differ.
        if self.header.tag == 0 || mac.finalize() != stored {
            return Err(SnapshotError::NotAuthentic);
        }
        // A second pass reads the body. It reads the file opened and checked, which only its
        // owner (this process's user, on Unix) or root could have changed in between.
        drop(r);
        self.file.seek(SeekFrom::Start(0))?;
        let mut r = BufReader::with_capacity(1 << 20, &mut self.file);
        let (filter, tag) = read_tagged(&mut r, ahash_of)?;
        if tag != self.header.tag {
            return Err(SnapshotError::NotAuthentic);
        }
        if r.read(&mut [0u8; 1])? != 0 {
            return Err(SnapshotError::TrailingData);
        }
        Ok(filter)
    }
}

/// Reads a snapshot file: buffered, and refused if bytes follow the snapshot.
pub(crate) fn read_file<S: BuildHasher>(
    path: &Path,
    read_from: impl FnOnce(&mut BufReader<File>) -> Result<CuckooFilter<S>, SnapshotError>,
) -> Result<CuckooFilter<S>, SnapshotError> {
    let mut r = BufReader::with_capacity(1 << 20, File::open(path)?);
    let filter = read_from(&mut r)?;
    if r.read(&mut [0u8; 1])? != 0 {
        return Err(SnapshotError::TrailingData);
    }
    Ok(filter)
}

/// A snapshot's header and the result of checking its body, from [`inspect`].
///
/// # Examples
///
/// ```
/// use cuckoo_guard::{snapshot, CuckooFilter};
///
/// let filter = CuckooFilter::builder().capacity(1_000).fingerprint_bits(8).build()?;
/// filter.insert("k")?;
/// let mut bytes = Vec::new();
/// filter.write_snapshot(&mut bytes)?;
/// let info = snapshot::inspect(&bytes[..])?;
/// assert_eq!(info.fingerprint_bits, 8);
/// assert_eq!(info.body.as_ref().unwrap().items, 1);
/// assert!(info.readable_by_this_build());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct Info {
    /// The format version.
    pub format_version: u16,
    /// Bits per slot: 8 or 16.
    pub fingerprint_bits: u32,
    /// Whether the buckets hold overflow bits (the 16-bit class of format 3: 15-bit
    /// fingerprints); format-2 files of the 16-bit class hold plain 16-bit fingerprints.
    pub overflow_bits: bool,
    /// Buckets of the base table.
    pub base_buckets: u64,
    /// Tables in the snapshot (1 + the growth steps the filter had taken).
    pub tables: usize,
    /// Buckets of all tables.
    pub buckets: u64,
    /// The capacity the filter was built for, in keys.
    pub built_for: u64,
    /// The filter's growth policy.
    pub growth: Growth,
    /// The filter's path search.
    pub displacement: Displacement,
    /// The maximum cuckoo path length.
    pub max_path_len: usize,
    /// Whether the file holds the ahash keys (`false`: the filter used a caller's hasher).
    pub hash_keys: bool,
    /// Whether the probe matches this build's ahash under the file's keys (`None` without
    /// keys).
    pub probe_matches: Option<bool>,
    /// The public id of the seal the file was written under (0 if unsealed). The file's MAC
    /// can only be checked with the seal's secret, which stays in the store.
    pub tag: u64,
    /// The body: what it holds if every check passed, else why not.
    pub body: Result<BodyInfo, SnapshotError>,
}

/// The checked body of a snapshot (see [`Info`]).
///
/// # Examples
///
/// ```
/// use cuckoo_guard::{snapshot, CuckooFilter};
///
/// let filter = CuckooFilter::with_capacity(1_000);
/// let mut bytes = Vec::new();
/// filter.write_snapshot(&mut bytes)?;
/// let body = snapshot::inspect(&bytes[..])?.body?;
/// assert_eq!((body.items, body.extras, body.bytes), (0, 0, bytes.len() as u64));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BodyInfo {
    /// Fingerprints, extras included.
    pub items: u64,
    /// Extras: copies moved by writers while the snapshot was taken.
    pub extras: u64,
    /// Bytes of the whole snapshot.
    pub bytes: u64,
}

impl Info {
    /// Fingerprint slots of all tables.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::{snapshot, CuckooFilter};
    ///
    /// let filter = CuckooFilter::with_capacity(1_000);
    /// let mut bytes = Vec::new();
    /// filter.write_snapshot(&mut bytes)?;
    /// assert_eq!(snapshot::inspect(&bytes[..])?.capacity(), filter.capacity() as u64);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn capacity(&self) -> u64 {
        self.buckets * Width::for_class(self.fingerprint_bits).slots() as u64
    }

    /// Whether [`CuckooFilter::read_snapshot`] in this build would load the file: the header
    /// holds ahash keys, the probe matches, and the body checked out.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::hash::RandomState;
    /// use cuckoo_guard::{snapshot, CuckooFilter};
    ///
    /// let filter = CuckooFilter::builder().capacity(10).hasher(RandomState::new()).build()?;
    /// let mut bytes = Vec::new();
    /// filter.write_snapshot(&mut bytes)?;
    /// let info = snapshot::inspect(&bytes[..])?;
    /// assert!(!info.hash_keys);
    /// assert!(!info.readable_by_this_build()); // needs read_snapshot_with_hasher
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn readable_by_this_build(&self) -> bool {
        self.probe_matches == Some(true) && self.body.is_ok()
    }
}

/// Reads a snapshot's header and checks its body without building the filter: for tools
/// that report on a file.
///
/// # Errors
///
/// [`SnapshotError`] if the header cannot be read or checked (truncated, bad magic,
/// unsupported version, header checksum, invalid field). A body that fails its checks is
/// reported in [`Info::body`] instead.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::{snapshot, CuckooFilter, SnapshotError};
///
/// let filter = CuckooFilter::with_capacity(1_000);
/// let mut bytes = Vec::new();
/// filter.write_snapshot(&mut bytes)?;
/// let last = bytes.len() - 20;
/// bytes[last] ^= 1;
/// let info = snapshot::inspect(&bytes[..])?;
/// assert!(matches!(info.body, Err(SnapshotError::BodyChecksum)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn inspect(mut r: impl Read) -> Result<Info, SnapshotError> {
    let header = read_header(&mut r)?;
    let probe_matches = header
        .keys
        .map(|_| ahash_of(&header).map(|(h, _)| probe_of(&h) == header.probe))
        .transpose()?;
    let buckets = (0..header.tables).map(|i| header.buckets(i) as u64).sum();
    let body = (|| {
        let mut body = Body::new(r, &header);
        let mut values = vec![0u64; CHUNK];
        let mut checked = Vec::new();
        for i in (0..header.tables).rev() {
            let mut left = header.buckets(i);
            while left > 0 {
                let n = left.min(CHUNK);
                body.words(&mut values[..n])?;
                left -= n;
            }
            let raw = body.extras(header.buckets(i))?;
            checked.push((raw, header.buckets(i)));
        }
        let (items, extras) = (body.items, body.extras);
        let bytes = body.finish()?;
        for (raw, buckets) in &checked {
            check_extras(raw, *buckets, header.width.fingerprint_bits())?;
        }
        Ok(BodyInfo {
            items,
            extras,
            bytes,
        })
    })();
    Ok(Info {
        format_version: header.version,
        fingerprint_bits: header.width.class(),
        overflow_bits: header.width.has_overflow_bits(),
        base_buckets: header.base_buckets as u64,
        tables: header.tables,
        buckets,
        built_for: header.built_for as u64,
        growth: header.growth(),
        displacement: header.displacement(),
        max_path_len: header.max_path_len,
        hash_keys: header.keys.is_some(),
        probe_matches,
        tag: header.tag,
        body,
    })
}

#[cfg(all(test, not(cuckoo_loom)))]
mod tests;
