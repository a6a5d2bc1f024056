//! The handle to the filter a guard currently uses ([`FilterRef`]).

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use super::Generation;
use crate::CuckooFilter;

/// The filter a guard uses at the moment of the call; a rebuild may swap in another one
/// while this handle lives (the handle keeps the old one alive, not current).
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{CacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// let guard = CacheGuard::new(CuckooFilter::with_capacity(10), MemoryStore::<u8, u8>::new());
/// let filter = guard.filter();
/// assert!(filter.is_empty());
/// ```
pub struct FilterRef<H = ahash::RandomState> {
    pub(crate) generation: Arc<Generation<H>>,
}

impl<H> Deref for FilterRef<H> {
    type Target = CuckooFilter<H>;

    fn deref(&self) -> &CuckooFilter<H> {
        &self.generation.filter
    }
}

impl<H> fmt::Debug for FilterRef<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.generation.filter, f)
    }
}
