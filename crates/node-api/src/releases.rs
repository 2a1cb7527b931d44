//! Release root filesystems: the built-in recipes and their builds.

use crate::{BuildEvent, BuiltFileRelease, BuiltRelease, FileBuild, NodeError, RecipeInfo};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// A release by template name and number (`base` 1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ReleaseRef {
    /// Template name.
    pub template: String,
    /// Release number.
    pub number: u32,
}

/// Release root filesystems: the built-in recipes and their builds.
#[async_trait]
pub trait NodeReleases: Send + Sync + 'static {
    /// Built-in recipes the node can build (`base`, `tiny`).
    fn recipes(&self) -> Vec<RecipeInfo>;

    /// Builds release `number` of `template`. Idempotent per (template, number): a partial earlier
    /// attempt is discarded first. Nothing is left behind on failure or cancellation.
    async fn build_release(
        &self,
        template: &str,
        number: u32,
        no_cache: bool,
        events: tokio::sync::mpsc::Sender<BuildEvent>,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<BuiltRelease, NodeError>;

    /// Builds release `number` of `template` from a template file: each step that changes
    /// files runs in a sandbox of the node's runtime (`RUN`) or copies from the build context
    /// (`COPY`), and its result is cached by the hash of its parent, its instruction and the
    /// context files it reads. Nothing of the release is left behind on failure (the failing
    /// command's output is in the events); cached steps stay.
    ///
    /// # Errors
    /// [`NodeError::Build`] when a step fails (its message names the line),
    /// [`NodeError::ReleaseNotFound`] when the parent is not on the node,
    /// [`NodeError::Unsupported`] when the runtime cannot run build steps,
    /// [`NodeError::Cancelled`].
    async fn build_file_release(
        &self,
        template: &str,
        number: u32,
        build: FileBuild,
        events: tokio::sync::mpsc::Sender<BuildEvent>,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<BuiltFileRelease, NodeError>;

    /// The releases whose root filesystems the node holds now (its release cache, reported in
    /// heartbeats so placement prefers a node that has the release).
    ///
    /// # Errors
    /// `Internal` when the node's release directory cannot be read.
    async fn cached_releases(&self) -> Result<Vec<ReleaseRef>, NodeError>;

    /// Removes a release's files (after a failed build, or when retiring it).
    async fn remove_release(&self, template: &str, number: u32) -> Result<(), NodeError>;

    /// Removes the copy of the release with content digest `digest` (`sha256:` + 64 hex
    /// digits) from the snapshot store, where nodes that lack it fetch it from (none is fine).
    ///
    /// # Errors
    /// `InvalidArgument` for a malformed digest; `Internal` when the store fails.
    async fn remove_stored_release(&self, digest: &str) -> Result<(), NodeError>;
}
