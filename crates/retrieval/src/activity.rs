//! [`RecentTouches`]: the vector stores this worker marked active lately, so that searches write a
//! store's `last_active_at` (and the `expires_at` it moves) at most once per [`TOUCH_INTERVAL`]
//! instead of on every search.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Seconds within which a store this worker marked active is not marked again: its
/// `last_active_at` lags by less than this (its expiry counts in days).
pub const TOUCH_INTERVAL: i64 = 60;

/// When this worker last marked each store active (seconds since the epoch); only stores marked
/// within [`TOUCH_INTERVAL`] are kept.
#[derive(Default)]
pub struct RecentTouches {
    marked_at: Mutex<HashMap<String, i64>>,
}

impl RecentTouches {
    /// Of `ids`, those not marked within [`TOUCH_INTERVAL`] before `now`.
    pub fn due(&self, ids: &[String], now: i64) -> Vec<String> {
        let marked_at = self.lock();
        ids.iter()
            .filter(|id| marked_at.get(id.as_str()).is_none_or(|at| now - at >= TOUCH_INTERVAL))
            .cloned()
            .collect()
    }

    /// Record `ids` as marked at `now`, forgetting the stores marked too long ago to matter.
    pub fn record(&self, ids: &[String], now: i64) {
        let mut marked_at = self.lock();
        marked_at.retain(|_, at| now - *at < TOUCH_INTERVAL);
        for id in ids {
            marked_at.insert(id.clone(), now);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.marked_at.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_store_is_due_again_once_the_interval_has_passed() {
        let touches = RecentTouches::default();
        assert_eq!(touches.due(&ids(&["vs_a", "vs_b"]), 1000), ids(&["vs_a", "vs_b"]));
        touches.record(&ids(&["vs_a"]), 1000);
        assert_eq!(touches.due(&ids(&["vs_a", "vs_b"]), 1000 + TOUCH_INTERVAL - 1), ids(&["vs_b"]));
        assert_eq!(touches.due(&ids(&["vs_a", "vs_b"]), 1000 + TOUCH_INTERVAL), ids(&["vs_a", "vs_b"]));
    }

    #[test]
    fn stores_marked_long_ago_are_forgotten() {
        let touches = RecentTouches::default();
        touches.record(&ids(&["vs_old"]), 1000);
        touches.record(&ids(&["vs_new"]), 1000 + TOUCH_INTERVAL);
        let marked_at = touches.lock();
        assert_eq!(marked_at.keys().collect::<Vec<_>>(), ["vs_new"]);
    }
}
