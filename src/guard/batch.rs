//! The store-facing half of a batch lookup (`get_many` on either guard): which admitted keys
//! the memo answers, which go to the store in one call, and how the store's answers are
//! counted and settled, each key as its own [`get_admitted`](super::CacheGuard::get_admitted)
//! would ([memo.M3], [memo.M4]). Batches do not coalesce: a key of a batch neither leads nor
//! joins a flight.

use std::hash::{BuildHasher, Hash};

use super::core::{Admission, GuardCore};
use super::memo::{Memo, Probe};
use super::GuardError;

/// The keys of a batch that go to the store, with what the memo noted for each.
pub(super) struct Batch<'m, K, T> {
    /// Per key asked: its index in the batch and its memo probe.
    asked: Vec<(usize, Probe<'m, K, T>)>,
    /// The keys asked, in the order of `asked`: the store call's argument.
    pub(super) keys: Vec<K>,
}

impl<'m, K: Hash + Eq + Clone, T> Batch<'m, K, T> {
    /// Before the store call: blocked keys and memo hits are answered `None` in `out`; the
    /// rest are asked. `use_memo` false (a fleet member): the memo is not asked.
    pub(super) fn plan<H: BuildHasher, V>(
        core: &GuardCore<H>,
        memo: &'m Memo<K, T>,
        use_memo: bool,
        keys: &[K],
        admissions: &[Admission],
        out: &mut Vec<Option<V>>,
    ) -> Self {
        out.clear();
        out.resize_with(keys.len(), || None);
        let mut asked = Vec::new();
        for (index, (key, &admission)) in keys.iter().zip(admissions).enumerate() {
            if admission.is_blocked() {
                continue;
            }
            if !use_memo {
                asked.push((index, Probe::Skip));
                continue;
            }
            match memo.probe_with(key, admission, false) {
                Probe::Hit => core.observe_memo_hit(),
                probe => asked.push((index, probe)),
            }
        }
        let keys = asked
            .iter()
            .map(|(index, _)| keys[*index].clone())
            .collect();
        Batch { asked, keys }
    }

    /// After the store call: `values` (one per asked key, in order) counted and settled in
    /// the memo, and written to `out`.
    pub(super) fn settle<H: BuildHasher, V, E>(
        self,
        core: &GuardCore<H>,
        memo: &Memo<K, T>,
        batch: &[K],
        admissions: &[Admission],
        values: Result<Vec<Option<V>>, E>,
        out: &mut [Option<V>],
    ) -> Result<(), GuardError<E>> {
        let values = match values {
            Ok(values) => values,
            Err(e) => {
                core.observe_get::<V, _>(Admission::Pass, &Err(()));
                return Err(GuardError::Store(e));
            }
        };
        debug_assert_eq!(values.len(), self.asked.len());
        for ((index, probe), value) in self.asked.into_iter().zip(values) {
            let result: Result<Option<V>, E> = Ok(value);
            core.observe_get(admissions[index], &result);
            memo.settle(&batch[index], probe, &result);
            if let Ok(value) = result {
                out[index] = value;
            }
        }
        Ok(())
    }
}
