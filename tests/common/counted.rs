//! A store wrapper that counts the reads reaching the store it wraps: what the guard's
//! coalescing and batch tests count "at the store".

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use cuckoo_guard::guard::{AsyncStore, ScanPage, Store, Written};

/// Counts `get` calls, `get_many` calls and the keys those asked for. A sync read may wait
/// `delay` first (a slow query); a batch may come back one value short (a faulty store).
pub(crate) struct Counted<S> {
    pub(crate) inner: S,
    gets: AtomicU64,
    batches: AtomicU64,
    keys_asked: AtomicUsize,
    delay: Duration,
    short: bool,
}

impl<S> Counted<S> {
    pub(crate) fn new(inner: S) -> Arc<Self> {
        Self::with(inner, Duration::ZERO, false)
    }
    pub(crate) fn with(inner: S, delay: Duration, short: bool) -> Arc<Self> {
        Arc::new(Counted {
            inner,
            gets: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            keys_asked: AtomicUsize::new(0),
            delay,
            short,
        })
    }
    pub(crate) fn gets(&self) -> u64 {
        self.gets.load(SeqCst)
    }
    pub(crate) fn batches(&self) -> u64 {
        self.batches.load(SeqCst)
    }
    pub(crate) fn keys_asked(&self) -> usize {
        self.keys_asked.load(SeqCst)
    }
    fn count_batch(&self, keys: usize) {
        self.batches.fetch_add(1, SeqCst);
        self.keys_asked.fetch_add(keys, SeqCst);
    }
    fn shorten<V>(&self, mut values: Vec<V>) -> Vec<V> {
        if self.short {
            values.pop();
        }
        values
    }
}

impl<S: Store> Store for Counted<S> {
    type Key = S::Key;
    type Value = S::Value;
    type Cursor = S::Cursor;
    type Error = S::Error;

    fn get(&self, key: &Self::Key) -> Result<Option<Self::Value>, Self::Error> {
        self.gets.fetch_add(1, SeqCst);
        std::thread::sleep(self.delay);
        self.inner.get(key)
    }
    fn get_many(&self, keys: &[Self::Key]) -> Result<Vec<Option<Self::Value>>, Self::Error> {
        self.count_batch(keys.len());
        Ok(self.shorten(self.inner.get_many(keys)?))
    }
    fn put(&self, key: &Self::Key, value: &Self::Value) -> Result<Written, Self::Error> {
        self.inner.put(key, value)
    }
    fn delete(&self, key: &Self::Key) -> Result<bool, Self::Error> {
        self.inner.delete(key)
    }
    fn scan_keys(
        &self,
        cursor: Option<&Self::Cursor>,
        limit: usize,
    ) -> Result<ScanPage<Self::Key, Self::Cursor>, Self::Error> {
        self.inner.scan_keys(cursor, limit)
    }
}

impl<S: AsyncStore> AsyncStore for Counted<S> {
    type Key = S::Key;
    type Value = S::Value;
    type Cursor = S::Cursor;
    type Error = S::Error;

    fn get(
        &self,
        key: &Self::Key,
    ) -> impl Future<Output = Result<Option<Self::Value>, Self::Error>> + Send {
        self.gets.fetch_add(1, SeqCst);
        self.inner.get(key)
    }
    fn get_many(
        &self,
        keys: &[Self::Key],
    ) -> impl Future<Output = Result<Vec<Option<Self::Value>>, Self::Error>> + Send {
        self.count_batch(keys.len());
        let values = self.inner.get_many(keys);
        async move { Ok(self.shorten(values.await?)) }
    }
    fn put(
        &self,
        key: &Self::Key,
        value: &Self::Value,
    ) -> impl Future<Output = Result<Written, Self::Error>> + Send {
        self.inner.put(key, value)
    }
    fn delete(&self, key: &Self::Key) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        self.inner.delete(key)
    }
    fn scan_keys(
        &self,
        cursor: Option<&Self::Cursor>,
        limit: usize,
    ) -> impl Future<Output = Result<ScanPage<Self::Key, Self::Cursor>, Self::Error>> + Send {
        self.inner.scan_keys(cursor, limit)
    }
}
