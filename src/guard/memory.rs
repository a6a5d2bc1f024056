//! An in-process store: a sorted map behind a lock, for examples, tests and small datasets.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::hash::Hash;
use std::ops::Bound;
use std::sync::RwLock;

use super::store::{AsyncStore, SampleRng, ScanPage, Store, Written};
use super::SealSecret;

/// A [`Store`] (and [`AsyncStore`]) kept in memory: a `BTreeMap` behind a `RwLock`.
///
/// Real deployments put the guard in front of a database (see the `sqlite`, `postgres` and
/// `redis` features); this store is for examples, tests of code built on the guard, and data
/// that fits in memory anyway. It never fails.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// let store = MemoryStore::new();
/// let guard = CacheGuard::new(CuckooFilter::with_capacity(1_000), store);
/// guard.warm_up(100, |_| {})?;
/// guard.put(&"alice".to_string(), &30)?;
/// assert_eq!(guard.get(&"alice".to_string())?, Some(30));
/// assert_eq!(guard.get(&"bob".to_string())?, None); // answered by the filter alone
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore<K, V> {
    rows: RwLock<Rows<K, V>>,
}

/// The rows and the seal, under one lock: a write clears the seal in the same critical
/// section.
#[derive(Debug)]
struct Rows<K, V> {
    map: BTreeMap<K, V>,
    seal: Option<SealSecret>,
}

impl<K, V> Default for Rows<K, V> {
    fn default() -> Self {
        Rows {
            map: BTreeMap::new(),
            seal: None,
        }
    }
}

impl<K: Ord, V> MemoryStore<K, V> {
    /// An empty store.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::MemoryStore;
    ///
    /// let store = MemoryStore::<u64, String>::new();
    /// assert!(store.is_empty());
    /// ```
    pub fn new() -> Self {
        MemoryStore {
            rows: RwLock::new(Rows {
                map: BTreeMap::new(),
                seal: None,
            }),
        }
    }

    /// A store holding `rows`.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::MemoryStore;
    ///
    /// let store = MemoryStore::from_rows((0..10u32).map(|k| (k, k * k)));
    /// assert_eq!(store.len(), 10);
    /// ```
    pub fn from_rows(rows: impl IntoIterator<Item = (K, V)>) -> Self {
        MemoryStore {
            rows: RwLock::new(Rows {
                map: rows.into_iter().collect(),
                seal: None,
            }),
        }
    }

    /// The number of rows.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::MemoryStore;
    ///
    /// assert_eq!(MemoryStore::<u8, u8>::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.read().map.len()
    }

    /// Whether the store has no rows.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::MemoryStore;
    ///
    /// assert!(MemoryStore::<u8, u8>::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `n` keys, each subset of `min(n, len)` keys equally likely (Knuth's selection
    /// sampling: one pass in key order under the read lock, taking each key with probability
    /// wanted / left).
    fn sample(&self, n: usize) -> Vec<K>
    where
        K: Clone,
    {
        let rows = self.read();
        let mut left = rows.map.len();
        let want = n.min(left);
        let mut keys = Vec::with_capacity(want);
        let mut rng = SampleRng::new();
        for key in rows.map.keys() {
            if keys.len() == want {
                break;
            }
            if rng.below(left as u64) < (want - keys.len()) as u64 {
                keys.push(key.clone());
            }
            left -= 1;
        }
        keys
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Rows<K, V>> {
        // A panic while holding the lock cannot leave the map half-updated (each operation
        // is a single map call), so a poisoned lock is still consistent.
        self.rows.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Rows<K, V>> {
        self.rows.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl<K: Ord + Hash + Clone + Send, V: Clone> Store for MemoryStore<K, V> {
    type Key = K;
    type Value = V;
    type Cursor = K;
    type Error = Infallible;

    fn get(&self, key: &K) -> Result<Option<V>, Infallible> {
        Ok(self.read().map.get(key).cloned())
    }

    /// Every key looked up under one read lock.
    fn get_many(&self, keys: &[K]) -> Result<Vec<Option<V>>, Infallible> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.read();
        Ok(keys.iter().map(|key| rows.map.get(key).cloned()).collect())
    }

    fn put(&self, key: &K, value: &V) -> Result<Written, Infallible> {
        let mut rows = self.write();
        rows.seal = None;
        Ok(match rows.map.insert(key.clone(), value.clone()) {
            None => Written::Created,
            Some(_) => Written::Updated,
        })
    }

    fn delete(&self, key: &K) -> Result<bool, Infallible> {
        let mut rows = self.write();
        rows.seal = None;
        Ok(rows.map.remove(key).is_some())
    }

    fn scan_keys(&self, cursor: Option<&K>, limit: usize) -> Result<ScanPage<K, K>, Infallible> {
        let rows = self.read();
        let start = cursor.map_or(Bound::Unbounded, Bound::Excluded);
        let keys: Vec<K> = rows
            .map
            .range((start, Bound::Unbounded))
            .take(limit.max(1))
            .map(|(k, _)| k.clone())
            .collect();
        let next = (keys.len() == limit.max(1))
            .then(|| keys.last().cloned())
            .flatten();
        Ok(ScanPage { keys, next })
    }

    fn write_outcome_unknown(_: &Infallible) -> bool {
        false
    }

    /// Writes under the map's lock, within the call.
    const PUT_ENDS_WITH_CALL: bool = true;

    const SEALS: bool = true;

    fn read_seal(&self) -> Result<Option<SealSecret>, Infallible> {
        Ok(self.read().seal.clone())
    }

    fn write_seal(&self, secret: &SealSecret) -> Result<(), Infallible> {
        self.write().seal = Some(secret.clone());
        Ok(())
    }

    /// Exactly `min(n, len)` keys, every such set of keys equally likely, in key order: one
    /// pass over the map under its read lock (so [`fast_sampling`](Store::fast_sampling)
    /// stays `false`), without copying keys it does not take.
    fn sample_keys(&self, n: usize) -> Result<Vec<K>, Infallible> {
        Ok(self.sample(n))
    }
}

impl<K, V> AsyncStore for MemoryStore<K, V>
where
    K: Ord + Hash + Clone + Send + Sync,
    V: Clone + Send + Sync,
{
    type Key = K;
    type Value = V;
    type Cursor = K;
    type Error = Infallible;

    async fn get(&self, key: &K) -> Result<Option<V>, Infallible> {
        Store::get(self, key)
    }

    /// As [`Store::get_many`] for this store: one read lock.
    async fn get_many(&self, keys: &[K]) -> Result<Vec<Option<V>>, Infallible> {
        Store::get_many(self, keys)
    }

    async fn put(&self, key: &K, value: &V) -> Result<Written, Infallible> {
        Store::put(self, key, value)
    }

    async fn delete(&self, key: &K) -> Result<bool, Infallible> {
        Store::delete(self, key)
    }

    async fn scan_keys(
        &self,
        cursor: Option<&K>,
        limit: usize,
    ) -> Result<ScanPage<K, K>, Infallible> {
        Store::scan_keys(self, cursor, limit)
    }

    fn write_outcome_unknown(_: &Infallible) -> bool {
        false
    }

    /// Writes within the first poll, under the map's lock.
    const PUT_ENDS_WITH_FUTURE: bool = true;

    const SEALS: bool = true;

    async fn read_seal(&self) -> Result<Option<SealSecret>, Infallible> {
        Store::read_seal(self)
    }

    async fn write_seal(&self, secret: &SealSecret) -> Result<(), Infallible> {
        Store::write_seal(self, secret)
    }

    /// As [`Store::sample_keys`] for this store.
    async fn sample_keys(&self, n: usize) -> Result<Vec<K>, Infallible> {
        Ok(self.sample(n))
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use super::*;

    /// Both traits' `get_many`: the keys' order, `None` for a missing key, a repeated key
    /// answered each time, nothing for nothing.
    #[test]
    fn get_many_answers_in_the_keys_order() {
        let store = MemoryStore::from_rows([(1u8, 'a'), (3, 'c')]);
        let keys = [3, 2, 1, 3, 9];
        let expected = [Some('c'), None, Some('a'), Some('c'), None];
        assert_eq!(Store::get_many(&store, &keys).unwrap(), expected);
        assert!(Store::get_many(&store, &[]).unwrap().is_empty());
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut batch = std::pin::pin!(AsyncStore::get_many(&store, &keys));
        match batch.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(values) => assert_eq!(values.unwrap(), expected),
            std::task::Poll::Pending => panic!("a memory store answers at once"),
        }
    }
}
