//! A seal's snapshot file against the ways two writes of one path can meet: a dropped
//! `AsyncCacheGuard::seal` whose file write goes on (it keeps the guard's rebuild claim until
//! the file is in place, so no rebuild swaps the filter and no other seal starts meanwhile),
//! two writes of one path at once (each has its own temporary file), and a header spliced
//! onto another snapshot's body (the MAC covers the whole file, and the body's checksums are
//! seeded with the header's, so the splice is refused). Together these once let a restart trust a file that missed a stored
//! key: a dropped seal's late body written over a newer seal's file.

use crate::common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::sync::Arc;
#[cfg(feature = "tokio")]
use std::time::{Duration, Instant};

use cuckoo_guard::guard::{CacheGuard, MemoryStore, RebuildPolicy, Restart, Store};
use cuckoo_guard::{CuckooFilter, SnapshotError};

#[cfg(feature = "tokio")]
#[test]
fn a_dropped_async_seal_keeps_the_claim_until_its_file_is_in_place() {
    // An attempt checks the claim only while the write is still under way, and a loaded
    // machine can finish the write before the first look: attempts go on until one looked.
    const ATTEMPTS: usize = 10;
    let checked = (0..ATTEMPTS).find(|_| dropped_seal_attempt() > 0);
    assert!(
        checked.is_some(),
        "in {ATTEMPTS} attempts the file write always ended before the first look: nothing \
         was checked"
    );
}

/// One dropped async seal: asserts that the rebuild claim stays taken until the file is in
/// place, and that a restart trusts the file. Returns how many rebuilds the claim refused
/// while the write went on (0: the write ended before the first look, or within the poll).
#[cfg(feature = "tokio")]
fn dropped_seal_attempt() -> usize {
    use cuckoo_guard::guard::{AsyncCacheGuard, GuardError};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("guard.cgsnap");
    let store = Arc::new(MemoryStore::<u64, u64>::new());
    common::runtime().block_on(async {
        // Big enough that the file write takes a while (tens of MB, synced).
        let guard =
            AsyncCacheGuard::new(CuckooFilter::with_capacity(16_000_000), Arc::clone(&store));
        guard.warm_up(1_000, |_| {}).await.unwrap();

        // One poll writes the seal, drains nothing and hands the file write to a blocking
        // thread; then the future is dropped. (Ready at once, it has let the claim go, and the
        // loop below ends at its first look.)
        let _ = common::poll_once(guard.seal(&path));
        let sealed = store
            .read_seal()
            .unwrap()
            .expect("the seal was written")
            .id();

        // Until the file is in place, no rebuild (and no seal) can claim the guard.
        let dropped = Instant::now();
        let mut refused = 0;
        loop {
            // The write renames its file before it gives the claim back: a free claim means
            // the file is there.
            if !guard.stats().rebuilding {
                assert!(
                    path.exists(),
                    "the claim was free before the file was in place"
                );
                break;
            }
            match guard.rebuild().await {
                Err(GuardError::RebuildRunning) => refused += 1,
                // The write ended between the look and the rebuild, which then took the
                // free claim: the file was in place before that.
                Ok(_) => {
                    assert!(
                        path.exists(),
                        "a rebuild took the claim before the file was in place"
                    );
                    break;
                }
                Err(e) => panic!("the rebuild failed: {e}"),
            }
            assert!(dropped.elapsed() < Duration::from_secs(60));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(guard);
        let (_guard, restart) = AsyncCacheGuard::restore(&path, Arc::clone(&store), || {
            CuckooFilter::with_capacity(10)
        })
        .await;
        assert!(
            matches!(restart, Restart::Trusted { seal, .. } if seal == sealed),
            "{restart}"
        );
        refused
    })
}

/// Two filters of one shape, sealed to two files: seal A, then a rebuild (new hash keys) and
/// a create of `K` (which clears seal A), then seal B. Returns the files' bytes and the store.
fn two_seals(dir: &std::path::Path) -> (Vec<u8>, Vec<u8>, Arc<MemoryStore<u64, u64>>) {
    let store = Arc::new(MemoryStore::<u64, u64>::from_rows(
        (0..100u64).map(|k| (k, k)),
    ));
    let guard = CacheGuard::with_policy(
        CuckooFilter::with_capacity(1_000),
        Arc::clone(&store),
        RebuildPolicy::manual(),
    );
    guard.warm_up(1_000, |_| {}).unwrap();
    guard.seal(dir.join("a.cgsnap")).unwrap();
    guard.rebuild().unwrap();
    guard.put(&K, &K).unwrap();
    let b = guard.seal(dir.join("b.cgsnap")).unwrap();
    assert_eq!(store.read_seal().unwrap().map(|s| s.id()), Some(b.seal));
    let a = fs::read(dir.join("a.cgsnap")).unwrap();
    let b = fs::read(dir.join("b.cgsnap")).unwrap();
    assert_eq!(a.len(), b.len());
    assert_eq!(
        a[..40],
        b[..40],
        "one shape: the headers differ in the hash keys (the rebuild drew new ones), the \
         probe, the seal id and the MAC only"
    );
    (a, b, store)
}

const K: u64 = 1_000_000;

/// Bytes of a snapshot's header (format 2).
const HEADER: usize = 128;

#[test]
fn a_header_spliced_onto_another_snapshots_body_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, store) = two_seals(dir.path());
    // B's header (the store's seal's id, and B's MAC) over A's body (without K).
    let spliced = dir.path().join("spliced.cgsnap");
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&spliced).unwrap();
    file.write_all(&b[..HEADER]).unwrap();
    file.write_all(&a[HEADER..]).unwrap();
    drop(file);
    let (guard, restart) = CacheGuard::restore(&spliced, Arc::clone(&store), || {
        CuckooFilter::with_capacity(10)
    });
    assert!(
        matches!(restart, Restart::Unreadable(SnapshotError::NotAuthentic)),
        "{restart}"
    );
    guard.warm_up(1_000, |_| {}).unwrap();
    assert_eq!(guard.get(&K).unwrap(), Some(K));
    // The files themselves are good.
    let (guard, restart) =
        CacheGuard::restore(dir.path().join("b.cgsnap"), Arc::clone(&store), || {
            CuckooFilter::with_capacity(10)
        });
    assert!(restart.is_trusted(), "{restart}");
    assert_eq!(guard.get(&K).unwrap(), Some(K));
}

#[test]
fn writes_of_one_path_at_once_never_mix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("both.cgsnap");
    let filters: Vec<CuckooFilter> = (0..2u64)
        .map(|i| {
            let f = CuckooFilter::with_capacity(200_000);
            for k in 0..100_000u64 {
                f.insert(&(k * 2 + i)).unwrap();
            }
            f
        })
        .collect();
    let expected: Vec<Vec<u8>> = filters
        .iter()
        .map(|f| {
            let mut bytes = Vec::new();
            f.write_snapshot(&mut bytes).unwrap();
            bytes
        })
        .collect();
    for _ in 0..20 {
        std::thread::scope(|s| {
            for f in &filters {
                let path = &path;
                s.spawn(move || f.write_snapshot_file(path).unwrap());
            }
        });
        let bytes = fs::read(&path).unwrap();
        assert!(
            expected.contains(&bytes),
            "the file is neither write's snapshot"
        );
    }
    let leftovers: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "both.cgsnap")
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}
