//! The time of day the controller decides by: idle suspends, TTL deletes and retention compare
//! stored times with [`Clock::now`]. The server uses [`SystemClock`]; tests pass a clock that
//! follows paused tokio time, so those decisions are tested without sleeping.

use chrono::{DateTime, Utc};

/// A source of the current time (UTC).
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Now.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}
