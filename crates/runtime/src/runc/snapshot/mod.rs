//! runc's snapshot: one artifact, `fs.tar`, a tar stream of the sandbox's overlay upper
//! directory (its own files, with overlayfs's whiteouts and opaque directories). runc cannot save
//! memory here (CRIU does not work on this kernel), so a wake restarts processes.
//!
//! Owners are container ids: a sandbox in a user namespace is packed relative to its range, and
//! a restored upper dir is shifted into whatever range its next start claims.
//!
//! [`pack`] and [`unpack`] are blocking; the driver runs them on `spawn_blocking`.

use std::path::Path;

use super::join_error;
use super::layout::Layout;
use crate::{ArtifactReader, ArtifactSpec, ArtifactWriter, RuntimeError};

mod check;
mod guard;
mod pack;
mod unpack;

pub use check::check;
pub use pack::pack;
pub use unpack::unpack;

/// Name of the files artifact.
pub const FILES_ARTIFACT: &str = "fs.tar";

/// The artifacts of a runc snapshot.
pub(crate) const ARTIFACTS: &[ArtifactSpec] = &[ArtifactSpec {
    name: FILES_ARTIFACT,
    memory: false,
}];

fn unknown(name: &str) -> RuntimeError {
    RuntimeError::Unavailable(format!("runc snapshots have no artifact {name:?}"))
}

/// Packs the upper dir of the (frozen) sandbox in `dir` into `out`.
pub(crate) async fn save(dir: &Path, name: &str, out: ArtifactWriter) -> Result<u64, RuntimeError> {
    if name != FILES_ARTIFACT {
        return Err(unknown(name));
    }
    let upper = Layout::new(dir).upper;
    let range = super::userns::Record::read(dir).range.map(|r| r.host());
    tokio::task::spawn_blocking(move || pack::pack_relative(&upper, out, range))
        .await
        .map_err(join_error)?
        .map_err(|source| RuntimeError::Io {
            context: "pack the sandbox's files".into(),
            source,
        })
}

/// Checks artifact `name` that came from outside (see [`check`]); returns its file bytes.
pub(crate) async fn check_artifact(name: &str, input: ArtifactReader) -> Result<u64, RuntimeError> {
    if name != FILES_ARTIFACT {
        return Err(unknown(name));
    }
    tokio::task::spawn_blocking(move || check(input))
        .await
        .map_err(join_error)?
        .map_err(|source| RuntimeError::Io {
            context: "check an imported snapshot".into(),
            source,
        })
}

/// Unpacks `input` into a new, empty upper dir in `dir`.
pub(crate) async fn load(
    dir: &Path,
    name: &str,
    input: ArtifactReader,
) -> Result<u64, RuntimeError> {
    if name != FILES_ARTIFACT {
        return Err(unknown(name));
    }
    let upper = Layout::new(dir).upper;
    let bytes = tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&upper)?;
        unpack(input, &upper)
    })
    .await
    .map_err(join_error)?
    .map_err(|source| RuntimeError::Io {
        context: "unpack the sandbox's files".into(),
        source,
    })?;
    // The files now have container ids: the next start shifts them into its range.
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || super::userns::Record::remove(&dir))
        .await
        .map_err(join_error)??;
    Ok(bytes)
}

#[cfg(test)]
mod tests;
