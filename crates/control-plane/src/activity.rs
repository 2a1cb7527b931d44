//! Activity tracking for idle suspends: API and data-plane access touch an in-memory map (a
//! mutex-guarded insert, no I/O); the controller flushes it to the store every tick, so a busy
//! sandbox costs one SQL write per tick, not one per request.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;

/// Last activity per sandbox since the last flush.
#[derive(Default)]
pub(crate) struct Activity {
    seen: Mutex<HashMap<String, DateTime<Utc>>>,
}

impl Activity {
    /// Records activity of `sandbox_id` at `now`.
    pub(crate) fn touch(&self, sandbox_id: &str, now: DateTime<Utc>) {
        let mut seen = self.seen.lock();
        match seen.get_mut(sandbox_id) {
            Some(at) => *at = now,
            None => {
                seen.insert(sandbox_id.to_string(), now);
            }
        }
    }

    /// Takes everything recorded since the last call.
    pub(crate) fn take(&self) -> Vec<(String, DateTime<Utc>)> {
        let mut seen = self.seen.lock();
        seen.drain().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touches_are_collected_once() {
        let a = Activity::default();
        a.touch("sb-1", Utc::now());
        a.touch("sb-1", Utc::now());
        a.touch("sb-2", Utc::now());
        let mut taken: Vec<String> = a.take().into_iter().map(|(id, _)| id).collect();
        taken.sort();
        assert_eq!(taken, vec!["sb-1", "sb-2"]);
        assert!(a.take().is_empty());
    }
}
