//! Shadow mode's report of would-be false negatives on standard error: a key the filter would
//! have blocked, then found by the store or the handler. Each key is reported once, and at
//! most [`KEYS_REPORTED`] keys are, so a drifted filter cannot flood the log; the counters
//! ([`GuardStats::shadow_false_negatives`](super::GuardStats::shadow_false_negatives), the
//! layer's `ShadowStats`) count every one.

use std::collections::HashSet;
use std::fmt::{self, Write as _};
use std::sync::{Mutex, PoisonError};

/// Distinct keys reported before the rest are only counted.
pub(crate) const KEYS_REPORTED: usize = 64;

/// The longest key description reported, in bytes (a longer one is cut, marked `...`).
const KEY_TEXT_MAX: usize = 200;

/// The keys reported so far; locked only on a would-be false negative.
#[derive(Debug, Default)]
pub(crate) struct ShadowLog {
    state: Mutex<Reported>,
}

#[derive(Debug, Default)]
struct Reported {
    keys: HashSet<String>,
    budget_spent_reported: bool,
}

impl ShadowLog {
    /// Reports on standard error that `key` would have been blocked, but `found` (such as
    /// "the store found it"), unless this key was reported already or the budget is spent
    /// (said once). Returns whether this call wrote the key's report.
    pub(crate) fn report(&self, key: &dyn fmt::Debug, found: &str) -> bool {
        let text = describe(key);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.keys.contains(&text) {
            return false;
        }
        if state.keys.len() >= KEYS_REPORTED {
            if !std::mem::replace(&mut state.budget_spent_reported, true) {
                eprintln!(
                    "cuckoo-guard: shadow mode: {KEYS_REPORTED} keys reported as would-be false \
                     negatives; later ones are only counted"
                );
            }
            return false;
        }
        eprintln!(
            "cuckoo-guard: shadow mode: would-be false negative: the filter would have blocked \
             key {text}, but {found}"
        );
        state.keys.insert(text);
        true
    }
}

/// The key's `Debug` text, cut to [`KEY_TEXT_MAX`] bytes at a character boundary.
fn describe(key: &dyn fmt::Debug) -> String {
    let mut text = String::new();
    // Writing to a String fails only if the key's `Debug` does; report what it wrote.
    let _ = write!(text, "{key:?}");
    if text.len() > KEY_TEXT_MAX {
        let mut end = KEY_TEXT_MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

#[cfg(all(test, not(cuckoo_loom)))]
mod tests {
    use super::*;

    #[test]
    fn each_key_is_reported_once_and_the_budget_bounds_the_keys() {
        let log = ShadowLog::default();
        assert!(log.report(&7u64, "the store found it"));
        assert!(!log.report(&7u64, "the store found it"));
        for key in 0..KEYS_REPORTED as u64 - 1 {
            assert!(
                log.report(&(1_000 + key), "the store found it"),
                "key {key}"
            );
        }
        assert!(
            !log.report(&5u64, "the store found it"),
            "the budget is spent"
        );
        assert_eq!(log.state.lock().unwrap().keys.len(), KEYS_REPORTED);
    }

    #[test]
    fn a_long_key_is_cut_at_a_character_boundary() {
        let key = "é".repeat(KEY_TEXT_MAX);
        let text = describe(&key);
        assert!(text.ends_with("..."));
        assert!(text.len() <= KEY_TEXT_MAX + 3, "{}", text.len());
    }
}
