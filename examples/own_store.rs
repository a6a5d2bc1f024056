//! Putting the guard in front of a data-access type of your own: implement `AsyncStore` for it
//! (get, upsert, delete, a paged key scan, and which errors may have written anyway), then use
//! it with `AsyncCacheGuard` like any store.
//!
//! ```sh
//! cargo run --example own_store
//! ```
//!
//! `UserRepo` stands for an application's repository; here it keeps users in a map, where a
//! real one would run queries.

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt;
use std::ops::Bound::{Excluded, Unbounded};

use cuckoo_guard::guard::{AsyncCacheGuard, AsyncStore, ScanPage, Written};
use cuckoo_guard::CuckooFilter;
use tokio::sync::RwLock;

#[derive(Debug, Clone)]
struct User {
    id: u64,
    name: String,
}

/// The application's repository, with the methods it already had.
#[derive(Debug, Default)]
struct UserRepo {
    users: RwLock<BTreeMap<u64, User>>,
}

#[derive(Debug)]
enum RepoError {
    /// Refused by validation before anything was written.
    Invalid(&'static str),
}

impl fmt::Display for RepoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepoError::Invalid(why) => write!(f, "invalid user: {why}"),
        }
    }
}

impl Error for RepoError {}

impl UserRepo {
    async fn find(&self, id: u64) -> Result<Option<User>, RepoError> {
        Ok(self.users.read().await.get(&id).cloned())
    }

    /// Inserts or replaces `user`; `true` if it was new.
    async fn save(&self, user: &User) -> Result<bool, RepoError> {
        if user.name.is_empty() {
            return Err(RepoError::Invalid("empty name"));
        }
        Ok(self
            .users
            .write()
            .await
            .insert(user.id, user.clone())
            .is_none())
    }

    async fn remove(&self, id: u64) -> Result<bool, RepoError> {
        Ok(self.users.write().await.remove(&id).is_some())
    }

    /// Up to `limit` ids in ascending order, after `after` if given.
    async fn ids_after(&self, after: Option<u64>, limit: usize) -> Result<Vec<u64>, RepoError> {
        let from = after.map_or(Unbounded, Excluded);
        let users = self.users.read().await;
        Ok(users
            .range((from, Unbounded))
            .take(limit)
            .map(|(id, _)| *id)
            .collect())
    }
}

// The store code: the guard's view of the repository.
impl AsyncStore for UserRepo {
    type Key = u64;
    type Value = User;
    /// A scan resumes after the last id of the previous page (ids are scanned in order, so
    /// every id that exists for the whole scan is seen exactly once).
    type Cursor = u64;
    type Error = RepoError;

    async fn get(&self, id: &u64) -> Result<Option<User>, RepoError> {
        self.find(*id).await
    }

    async fn put(&self, id: &u64, user: &User) -> Result<Written, RepoError> {
        debug_assert_eq!(*id, user.id);
        let created = self.save(user).await?;
        Ok(if created {
            Written::Created
        } else {
            Written::Updated
        })
    }

    async fn delete(&self, id: &u64) -> Result<bool, RepoError> {
        self.remove(*id).await
    }

    async fn scan_keys(
        &self,
        after: Option<&u64>,
        limit: usize,
    ) -> Result<ScanPage<u64, u64>, RepoError> {
        let limit = limit.max(1);
        let keys = self.ids_after(after.copied(), limit).await?;
        // A short page is the last; a full one may have more after it.
        let next = if keys.len() == limit {
            keys.last().copied()
        } else {
            None
        };
        Ok(ScanPage { keys, next })
    }

    fn write_outcome_unknown(error: &RepoError) -> bool {
        // A validation error wrote nothing, so the guard may take its filter copy out again.
        // A timeout or a dropped connection of a real repository would return `true` here.
        !matches!(error, RepoError::Invalid(_))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let repo = UserRepo::default();
    for id in 1..=1_000 {
        let name = format!("user {id}");
        repo.save(&User { id, name }).await?;
    }
    let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10_000), repo);
    let warm = guard
        .warm_up(300, |p| println!("  warm-up: {} keys", p.keys_loaded))
        .await?;
    println!("warmed up: {} users in the filter", warm.keys_loaded);

    println!("get 7: {:?}", guard.get(&7).await?);
    println!("get 5000: {:?}", guard.get(&5_000).await?);
    let ada = User {
        id: 5_000,
        name: "ada".into(),
    };
    println!("put 5000: {:?}", guard.put(&ada.id, &ada).await?);
    println!("get 5000: {:?}", guard.get(&5_000).await?);
    println!("delete 7: {:?}", guard.delete(&7).await?);
    println!("get 7: {:?}", guard.get(&7).await?);

    // A definite failure: the guard takes out the filter copy it added for 6000, which is
    // blocked again (short of a false positive).
    let nameless = User {
        id: 6_000,
        name: String::new(),
    };
    if let Err(error) = guard.put(&nameless.id, &nameless).await {
        println!("put 6000: {error}");
    }
    println!("may 6000 exist? {}", guard.may_contain(&6_000));

    for id in 10_000..20_000 {
        guard.get(&id).await?;
    }
    let stats = guard.stats();
    println!(
        "lookups {}: blocked {}, sent to the repository {} ({} found, {} false positives)",
        stats.lookups, stats.blocked, stats.passed, stats.store_hits, stats.false_positives
    );
    println!(
        "writes: {} created, {} deleted, {} failed ({} stale filter copies kept)",
        stats.creates, stats.deletes, stats.store_errors, stats.stale_copies
    );
    Ok(())
}
