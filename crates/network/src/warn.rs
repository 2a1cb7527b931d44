//! Rate limiting of warnings a sandbox can trigger (the gateway's about a sandbox's traffic,
//! the node agent's about a guest agent), and the one way sandbox bytes may appear in a log
//! line ([`escaped_prefix`]).
//!
//! A sandbox chooses how often these events happen, so each site that logs one owns a
//! [`RateLimit`]: per sandbox where the site knows the sandbox (a field of its per-sandbox
//! state), one for the whole site otherwise. Whatever the sandbox does, a site writes at most
//! one line per interval per limiter, and that line says how many it held back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Lets one event through per interval and counts the rest.
pub struct RateLimit {
    interval: Duration,
    last: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
}

impl RateLimit {
    /// One event per `interval`.
    pub const fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: Mutex::new(None),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when this event may be logged, `n` being how many were suppressed since the last.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> Option<u64> {
        let mut last = self.last.lock();
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

/// Most bytes of sandbox data a log line shows ([`escaped_prefix`]).
pub const LOGGED_PREFIX: usize = 16;

/// The first [`LOGGED_PREFIX`] bytes of `bytes`, escaped (`\xNN` for anything but printable
/// ASCII, so no control character or line break reaches the log), for a log line about data a
/// sandbox sent. Log its full length separately.
pub fn escaped_prefix(bytes: &[u8]) -> String {
    bytes[..bytes.len().min(LOGGED_PREFIX)]
        .escape_ascii()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_one_event_and_a_count() {
        let r = RateLimit::new(Duration::from_secs(60));
        let allowed = (0..1_000).filter_map(|_| r.allow()).count();
        assert_eq!(allowed, 1);
        // The next line after the interval reports the held-back events.
        let r = RateLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(r.allow_at(t0), Some(0));
        for ms in 0..99 {
            assert_eq!(r.allow_at(t0 + Duration::from_millis(ms * 100)), None);
        }
        assert_eq!(r.allow_at(t0 + Duration::from_secs(10)), Some(99));
        assert_eq!(r.allow_at(t0 + Duration::from_secs(11)), None);
    }

    #[test]
    fn the_prefix_is_short_and_escaped() {
        assert_eq!(escaped_prefix(b"ab\n\x00\x16"), "ab\\n\\x00\\x16");
        let long = vec![b'A'; 70_000];
        assert_eq!(escaped_prefix(&long), "A".repeat(LOGGED_PREFIX));
        assert_eq!(escaped_prefix(b""), "");
    }

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
