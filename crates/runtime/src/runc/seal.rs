//! The run dir's own entries (the agent's socket, `output/`, `scripts/`) sealed against the
//! sandbox: once the agent listens, the host sets the immutable attribute (`chattr +i`) on the
//! run dir, so no entry of it can be removed, renamed or replaced from inside, not even by the
//! sandbox's root, which lacks `CAP_LINUX_IMMUTABLE` to clear it. Files inside `output/` and
//! `scripts/` stay writable for the agent. The host clears the attribute before it clears or
//! removes the directory (start, stop).
//!
//! Blocking calls; callers run them on `spawn_blocking` or in blocking preparation.

use std::path::Path;
use std::process::{Command, Stdio};

use tracing::warn;

/// Makes `dir`'s entries immutable. A filesystem without the attribute only logs: the
/// sandbox then runs unsealed.
pub(crate) fn seal(dir: &Path) {
    if let Err(e) = chattr("+i", dir) {
        warn!(dir = %dir.display(), error = %e, "cannot seal the agent's run dir");
    }
}

/// Clears what [`seal`] set; a missing directory is fine.
pub(crate) fn unseal(dir: &Path) {
    if dir.is_dir() {
        if let Err(e) = chattr("-i", dir) {
            warn!(dir = %dir.display(), error = %e, "cannot unseal the agent's run dir");
        }
    }
}

fn chattr(flag: &str, dir: &Path) -> Result<(), String> {
    let out = Command::new("chattr")
        .arg(flag)
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run chattr: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(super::cli::message(&out.stderr))
    }
}
