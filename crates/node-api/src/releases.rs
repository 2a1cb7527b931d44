//! Release root filesystems: the built-in recipes and their builds.

use crate::{BuildEvent, BuiltRelease, NodeError, RecipeInfo};
use async_trait::async_trait;

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

    /// Removes a release's files (after a failed build, or when retiring it).
    async fn remove_release(&self, template: &str, number: u32) -> Result<(), NodeError>;
}
