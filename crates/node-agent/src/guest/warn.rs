//! Rate limiting of warnings a guest can trigger.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lets one event through per interval and counts the rest.
pub(crate) struct RateLimit {
    interval: Duration,
    last: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
}

impl RateLimit {
    /// One event per `interval`.
    pub(crate) const fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: Mutex::new(None),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when this event may be logged, `n` being how many were suppressed since the last.
    pub(crate) fn allow(&self) -> Option<u64> {
        let now = Instant::now();
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match *last {
            Some(t) if now.duration_since(t) < self.interval => {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                None
            }
            _ => {
                *last = Some(now);
                Some(self.suppressed.swap(0, Ordering::Relaxed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lets_one_through_per_interval() {
        let r = RateLimit::new(Duration::from_secs(60));
        assert_eq!(r.allow(), Some(0));
        assert_eq!(r.allow(), None);
        assert_eq!(r.allow(), None);
        let r2 = RateLimit::new(Duration::ZERO);
        assert_eq!(r2.allow(), Some(0));
        assert_eq!(r2.allow(), Some(0));
    }
}
