//! Bounds of blocking work on tenant bytes (hashing, unpacking, copying): a [`Guard`] carries
//! the build's cancellation token, a byte budget and a deadline, and is checked every chunk,
//! so a cancelled build stops within one chunk (milliseconds) and no input can loop or grow
//! without end. A [`Metered`] reader checks it on every read.

use std::io::Read;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::BuildError;

/// Why guarded work stopped.
const GOING: u8 = 0;
const CANCELLED: u8 = 1;
const TOO_LARGE: u8 = 2;
const TOO_SLOW: u8 = 3;

#[derive(Debug)]
struct Shared {
    cancel: CancellationToken,
    deadline: Instant,
    max_bytes: u64,
    used: AtomicU64,
    stopped: AtomicU8,
}

/// The bounds of one piece of blocking work; clones share the budget.
#[derive(Debug, Clone)]
pub(crate) struct Guard {
    shared: Arc<Shared>,
    /// What is bounded, for messages (`the image archive`, `layer blobs/sha256/…`).
    what: Arc<str>,
}

impl Guard {
    /// At most `max_bytes` read through it, for at most `max_time`, until `cancel` fires.
    pub(crate) fn new(
        cancel: CancellationToken,
        what: impl Into<Arc<str>>,
        max_bytes: u64,
        max_time: Duration,
    ) -> Guard {
        Guard {
            shared: Arc::new(Shared {
                cancel,
                deadline: Instant::now() + max_time,
                max_bytes,
                used: AtomicU64::new(0),
                stopped: AtomicU8::new(GOING),
            }),
            what: what.into(),
        }
    }

    /// A guard with the same token and deadline and a budget of its own (`what` and
    /// `max_bytes`), e.g. for one layer of an archive.
    pub(crate) fn child(&self, what: impl Into<Arc<str>>, max_bytes: u64) -> Guard {
        Guard {
            shared: Arc::new(Shared {
                cancel: self.shared.cancel.clone(),
                deadline: self.shared.deadline,
                max_bytes,
                used: AtomicU64::new(0),
                stopped: AtomicU8::new(GOING),
            }),
            what: what.into(),
        }
    }

    /// `Err` once cancelled or past the deadline.
    pub(crate) fn check(&self) -> Result<(), BuildError> {
        self.charge(0)
    }

    /// Counts `n` more bytes; `Err` past the budget, once cancelled or past the deadline.
    pub(crate) fn charge(&self, n: u64) -> Result<(), BuildError> {
        let s = &self.shared;
        let stop = if s.cancel.is_cancelled() {
            CANCELLED
        } else if Instant::now() > s.deadline {
            TOO_SLOW
        } else if s.used.fetch_add(n, Ordering::Relaxed).saturating_add(n) > s.max_bytes {
            TOO_LARGE
        } else {
            GOING
        };
        if stop == GOING {
            return Ok(());
        }
        let _ = s
            .stopped
            .compare_exchange(GOING, stop, Ordering::Relaxed, Ordering::Relaxed);
        Err(self.error(stop))
    }

    /// Why the work stopped, if the guard stopped it: for turning a reader's error (which a
    /// library such as `tar` wraps in its own) back into the reason.
    pub(crate) fn stopped(&self) -> Option<BuildError> {
        match self.shared.stopped.load(Ordering::Relaxed) {
            GOING if self.shared.cancel.is_cancelled() => Some(BuildError::Cancelled),
            GOING => None,
            stop => Some(self.error(stop)),
        }
    }

    /// The guard's reason when it stopped the work, else `other`.
    pub(crate) fn or(&self, other: BuildError) -> BuildError {
        self.stopped().unwrap_or(other)
    }

    fn error(&self, stop: u8) -> BuildError {
        let s = &self.shared;
        match stop {
            CANCELLED => BuildError::Cancelled,
            TOO_LARGE => BuildError::Failed {
                step: "limit".into(),
                detail: format!("{} is larger than {} bytes", self.what, s.max_bytes),
            },
            _ => BuildError::Failed {
                step: "limit".into(),
                detail: format!("{} took longer than its time bound", self.what),
            },
        }
    }

    /// Hex SHA-256 of everything `r` yields (a reader made by [`Guard::reader`]), read 256 KiB
    /// at a time; a read error is `context`'s I/O error unless the guard stopped the read.
    pub(crate) fn sha256_hex<R: Read>(
        &self,
        r: &mut R,
        context: &str,
    ) -> Result<String, BuildError> {
        use sha2::{Digest as _, Sha256};
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = r.read(&mut buf).map_err(|source| {
                self.or(BuildError::Io {
                    context: context.into(),
                    source,
                })
            })?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        Ok(format!("{:x}", h.finalize()))
    }

    /// `inner` read through this guard.
    pub(crate) fn reader<R: Read>(&self, inner: R) -> Metered<R> {
        Metered {
            inner,
            guard: self.clone(),
        }
    }
}

/// A reader charging every read to a [`Guard`]; a stop is an I/O error (the guard says why).
pub(crate) struct Metered<R> {
    inner: R,
    guard: Guard,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.guard
            .check()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let n = self.inner.read(buf)?;
        self.guard
            .charge(n as u64)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_stops_reads_past_its_budget_and_once_cancelled() {
        let cancel = CancellationToken::new();
        let guard = Guard::new(cancel.clone(), "input", 10, Duration::from_secs(60));
        let mut out = Vec::new();
        let err = guard
            .reader(std::io::repeat(7).take(1 << 20))
            .read_to_end(&mut out)
            .expect_err("over budget");
        assert!(err.to_string().contains("larger than 10 bytes"), "{err}");
        assert!(matches!(guard.stopped(), Some(BuildError::Failed { .. })));

        let guard = Guard::new(cancel.clone(), "input", u64::MAX, Duration::from_secs(60));
        let mut r = guard.reader(std::io::repeat(7));
        let mut buf = [0u8; 64];
        assert_eq!(r.read(&mut buf).expect("read"), 64);
        cancel.cancel();
        assert!(r.read(&mut buf).is_err());
        assert!(matches!(guard.stopped(), Some(BuildError::Cancelled)));

        let guard = Guard::new(CancellationToken::new(), "input", 1, Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        assert!(guard.check().is_err());
    }
}
