//! A guard's sealed snapshots and its restart from them.
//!
//! # The seal
//!
//! A snapshot of a guard's filter is only as good as its store's state: a row written after
//! the snapshot and missing from it would be a false negative after a restart. So a guard
//! trusts a snapshot at start only if its store proves nothing was written since: the store
//! keeps a *seal* ([`Store::SEALS`](super::Store::SEALS)), a secret naming one snapshot,
//! which every `put` and `delete` clears in the same atomic step as its write.
//!
//! [`CacheGuard::seal`](super::CacheGuard::seal) and
//! [`AsyncCacheGuard::seal`](super::AsyncCacheGuard::seal) (`S` the seal write, `T` the
//! snapshot, under the rebuild claim so no rebuild runs):
//!
//! 1. draws a new [`SealSecret`] (32 bytes from the operating system's generator) and writes
//!    it as the store's seal (`S`);
//! 2. waits at the writer gate until every create that entered it before has returned from
//!    its store write (two flips, so a phase a stopped rebuild left undrained is drained too);
//! 3. writes the current filter's snapshot (`T`), its header carrying the secret's public id
//!    and a MAC of the whole file keyed by the secret (keyed BLAKE3).
//!
//! At restart, [`CacheGuard::restore`](super::CacheGuard::restore) trusts the file if the
//! store holds a seal and the file's MAC checks out under its secret. Why that is safe: a
//! create enters the gate, inserts into the
//! filter, writes to the store and leaves. One that entered before step 2 left before `T`
//! began (step 2 waits for it), so `T` holds its insert. One that entered after step 2 began
//! read the flipped phase, which comes after `S` completed; its store write comes later
//! still, and clears the seal. A delete needs no wait: one that lands before `S` left at most
//! a stale copy in `T` (a false positive); one after `S` clears the seal. A write whose
//! outcome was unknown keeps its copy in the filter, so in `T` (its create left the gate
//! before `T`); if it lands later it clears the seal, or on PostgreSQL, whose statement may
//! clear the seal as it stood when the statement began, its copy is in `T` anyway.
//!
//! A crash or an error between `S` and the renamed file leaves a seal naming a file that does
//! not exist, or an older file with another seal id and MAC: not trusted. The file write holds the
//! rebuild claim until it ends, also when an async seal's future is dropped while a blocking
//! thread writes: no rebuild swaps the filter and no second seal writes the path meanwhile.
//! Each write has its own temporary file, and the body's checksums are seeded with the
//! header's, so two writes of one path can never leave one's header over the other's body.
//!
//! With a store whose write and seal clearing are one atomic step, linearizable with the
//! seal write, step 2 is implied: a create whose write did not clear the seal wrote before
//! `S`, so its filter insert happened before `T`. The wait keeps the argument to the guard's
//! own gate for stores whose clearing only orders against `S` on the server: a write whose
//! statement reads the seal as it stood before `S`, though `S` has returned to the sealer,
//! keeps the seal, and only the wait makes its create's filter insert visible to `T` (the
//! model `loom_seal_server_ordered_clearing_waits_for_in_flight_creates`, whose control
//! without the wait finds the false negative). A seal stopped
//! in step 2 (its future dropped) leaves its phase undrained for the next rebuild, as a
//! stopped rebuild does. The steps and their order are one state machine in the core (its
//! `seal` module), which both guards drive, one blocking and one awaiting; the loom models
//! `loom_seal_*` check the order and the clearing through both drivers.
//!
//! # What a snapshot file is trusted for
//!
//! A trusted file is *fresh*: no write through a guard came after its seal (above). It is
//! also *authentic*: it is the file some guard wrote under the seal the store holds, byte for
//! byte. The restart checks, in order:
//!
//! 1. who may have written the file (Unix): the opened file must be owned by the process's
//!    effective user and not writable by its group or others ([`Restart::Exposed`]), so no
//!    other local user can have replaced or altered it;
//! 2. that the store holds a seal whose public id is the file's
//!    ([`Restart::NoSeal`], [`Restart::OtherSeal`]);
//! 3. the MAC, over every raw byte of the file, before the body is parsed, compared in
//!    constant time ([`SnapshotError::NotAuthentic`]); then the body's own checks.
//!
//! The public id and the XXH64 checksums prove nothing: anyone who reads an old sealed file
//! can copy its id and recompute every checksum of an altered body. Only the MAC does, under
//! these assumptions: the seal secret stays in the store (whoever can read the store's seal
//! can forge a trusted file, so the seal row or key must be as private as the rows; an older
//! build's seal, an integer, reads as none), BLAKE3 keyed with 32 random bytes is a MAC, and
//! the process's own user (and root) are trusted, since they can write the file and the
//! process's memory alike. The MAC pass and the parse read the same opened file; only its
//! owner could change it between them. A file readable by others is not refused, but it holds
//! the filter's hash keys (see the snapshot module): keep it private for that reason.
//!
//! Writes that bypass this guard (another program, a migration, another guard in another
//! process) do not reach its filter, sealed or not; like the guard's consistency rules in
//! general, the seal assumes every write goes through this guard. A writer that bypasses it
//! must delete the seal itself (the store adapters document where it is). The same holds for
//! a write of an earlier process whose outcome was unknown and which lands after the
//! restart: the restarted guard never saw it, as after a warm-up that scanned before it
//! landed.

use std::fmt;
use std::fs::File;
use std::path::Path;

use super::SealSecret;
use crate::error::SnapshotError;
use crate::snapshot::{SealedFile, SnapshotWritten};
use crate::CuckooFilter;

/// How [`CacheGuard::restore`](super::CacheGuard::restore) started a guard.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, MemoryStore, Restart};
/// use cuckoo_guard::CuckooFilter;
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("guard.cgsnap");
/// let (_guard, restart) = CacheGuard::restore(
///     &path,
///     MemoryStore::<u64, String>::new(),
///     || CuckooFilter::with_capacity(1_000),
/// );
/// assert!(matches!(restart, Restart::NoSnapshot));
/// assert!(!restart.is_trusted());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Restart {
    /// The snapshot was written under the seal the store holds (its MAC checks out under the
    /// seal's secret): the guard filters at once.
    Trusted {
        /// Fingerprints in the loaded filter.
        keys: usize,
        /// The seal's public id ([`SealSecret::id`]).
        seal: u64,
    },
    /// There is no file at the path.
    NoSnapshot,
    /// The file could not be read or failed a check, its MAC under the store's seal
    /// included ([`SnapshotError::NotAuthentic`]).
    Unreadable(SnapshotError),
    /// Another user than this process's may have written the file: it is writable by its
    /// group or others, or another user owns it (checked on Unix only).
    Exposed(Exposure),
    /// The store keeps no seal ([`Store::SEALS`](super::Store::SEALS)).
    StoreKeepsNoSeal,
    /// The store holds no seal: something was written through a guard since the snapshot was
    /// sealed, or it never was (a snapshot written with `write_snapshot`, say), or it holds
    /// one in a format this build does not read (an older build's).
    NoSeal,
    /// The store's seal names another snapshot.
    OtherSeal {
        /// The store's seal's public id ([`SealSecret::id`]).
        store: u64,
        /// The seal id in the file's header (0 if the file was not sealed).
        file: u64,
    },
    /// The seal could not be read from the store (or, for a fleet member, the coordinator).
    SealUnreadable(String),
    /// A fleet member's file ([`Fleet::restore`](crate::fleet::Fleet::restore)): the
    /// coordinator holds no record of its seal, or the fleet's log no longer covers the
    /// position the file was sealed at (trimmed past it, a new coordinator state). Why is
    /// said. A file trusted but not covered is replaced by a rebuild from the store.
    NotCovered(String),
}

impl Restart {
    /// Whether the guard started from the snapshot, ready at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::Restart;
    ///
    /// assert!(!Restart::NoSeal.is_trusted());
    /// ```
    pub fn is_trusted(&self) -> bool {
        matches!(self, Restart::Trusted { .. })
    }
}

impl fmt::Display for Restart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Restart::Trusted { keys, seal } => {
                write!(f, "started from the sealed snapshot {seal:#018x} ({keys} keys)")
            }
            Restart::NoSnapshot => write!(f, "warming up: no snapshot file"),
            Restart::Unreadable(e) => write!(f, "warming up: the snapshot was refused: {e}"),
            Restart::Exposed(exposure) => write!(
                f,
                "warming up: the snapshot is not trusted because {exposure}"
            ),
            Restart::StoreKeepsNoSeal => {
                write!(f, "warming up: the store keeps no seal, so no snapshot is trusted")
            }
            Restart::NoSeal => write!(
                f,
                "warming up: the store holds no seal (written to since the snapshot, or never sealed)"
            ),
            Restart::OtherSeal { store, file } => write!(
                f,
                "warming up: the store's seal {store:#018x} names another snapshot than the file's {file:#018x}"
            ),
            Restart::SealUnreadable(e) => write!(f, "warming up: the seal could not be read: {e}"),
            Restart::NotCovered(why) => write!(
                f,
                "not trusted: the fleet's log does not cover the snapshot: {why}"
            ),
        }
    }
}

/// What [`CacheGuard::seal`](super::CacheGuard::seal) wrote. The seal's secret stays in the
/// store; this holds its public id.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// let dir = tempfile::tempdir()?;
/// let guard = CacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u8, u8>::new());
/// guard.warm_up(10, |_| {})?;
/// let sealed = guard.seal(dir.path().join("g.cgsnap"))?;
/// assert_ne!(sealed.seal, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sealed {
    /// The seal's public id ([`SealSecret::id`]), in the snapshot's header.
    pub seal: u64,
    /// The snapshot written.
    pub written: SnapshotWritten,
}

/// A new seal secret, or the seal's error if the operating system has no randomness.
pub(super) fn new_seal_secret() -> Result<SealSecret, SnapshotError> {
    SealSecret::random().map_err(SnapshotError::Io)
}

/// Who may have written a snapshot file other than this process's user, from
/// [`Restart::Exposed`]. Checked on Unix only (on other platforms no file is refused for it).
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::Exposure;
///
/// let exposure = Exposure::Writable { mode: 0o664 };
/// assert!(exposure.to_string().contains("0o664"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exposure {
    /// The file's group or others may write it.
    Writable {
        /// The file's permission bits.
        mode: u32,
    },
    /// Another user owns the file than the process's effective user.
    Owner {
        /// The file's owner.
        owner: u32,
        /// The process's effective user.
        user: u32,
    },
}

impl fmt::Display for Exposure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exposure::Writable { mode } => {
                write!(f, "its group or others may write it (mode {mode:#o})")
            }
            Exposure::Owner { owner, user } => write!(
                f,
                "user {owner} owns it, not this process's effective user {user}"
            ),
        }
    }
}

/// Why the file `meta` describes may have been written by another user than this process's.
#[cfg(unix)]
fn exposure(meta: &std::fs::Metadata) -> Option<Exposure> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: `geteuid` takes no arguments, touches no memory of ours and cannot fail.
    let user = unsafe { libc::geteuid() };
    if meta.uid() != user {
        return Some(Exposure::Owner {
            owner: meta.uid(),
            user,
        });
    }
    let mode = meta.mode() & 0o7777;
    (mode & 0o022 != 0).then_some(Exposure::Writable { mode })
}

/// No owner or mode check off Unix.
#[cfg(not(unix))]
fn exposure(_meta: &std::fs::Metadata) -> Option<Exposure> {
    None
}

/// The snapshot file at `path`, opened and its header read, or why a restart cannot use it:
/// missing, writable by others than its owner, owned by another user, or no snapshot.
pub(super) fn open(path: &Path) -> Result<SealedFile, Restart> {
    let file = match File::open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Restart::NoSnapshot),
        Err(e) => return Err(Restart::Unreadable(SnapshotError::Io(e))),
        Ok(file) => file,
    };
    // The opened file's own metadata: what is checked is what is read.
    let meta = file
        .metadata()
        .map_err(|e| Restart::Unreadable(SnapshotError::Io(e)))?;
    if let Some(exposure) = exposure(&meta) {
        return Err(Restart::Exposed(exposure));
    }
    SealedFile::new(file).map_err(Restart::Unreadable)
}

/// The store's seal secret (`None` if the store keeps none) if it is the seal `tag` (a file's
/// header) names.
pub(super) fn trust<E: fmt::Display>(
    seal: Option<Result<Option<SealSecret>, E>>,
    tag: u64,
) -> Result<SealSecret, Restart> {
    match seal {
        None => Err(Restart::StoreKeepsNoSeal),
        Some(Err(e)) => Err(Restart::SealUnreadable(e.to_string())),
        Some(Ok(None)) => Err(Restart::NoSeal),
        Some(Ok(Some(secret))) if secret.id() != tag || tag == 0 => Err(Restart::OtherSeal {
            store: secret.id(),
            file: tag,
        }),
        Some(Ok(Some(secret))) => Ok(secret),
    }
}

/// The filter of `file` if its MAC checks out under `secret`.
pub(super) fn load(
    file: SealedFile,
    secret: &SealSecret,
) -> Result<(CuckooFilter, Restart), Restart> {
    let filter = file.load(secret).map_err(Restart::Unreadable)?;
    let keys = filter.len();
    Ok((
        filter,
        Restart::Trusted {
            keys,
            seal: secret.id(),
        },
    ))
}
