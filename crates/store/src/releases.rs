//! Releases of templates.

use async_trait::async_trait;
use cove_api_types::{Release, ReleaseState, TemplateDefaults};

use crate::StoreError;

/// Release rows.
#[async_trait]
pub trait ReleaseStore: Send + Sync {
    /// Allocates the next release number of `template` (1 for the first, then one more than
    /// the highest, also under concurrent calls) in state `building`.
    async fn insert_next_release(
        &self,
        template: &str,
        recipe_hash: &str,
    ) -> Result<Release, StoreError>;

    /// Sets a release's state, and its size (`None` clears it). An unknown release is a no-op.
    async fn set_release_state(
        &self,
        template: &str,
        number: u32,
        state: ReleaseState,
        size_bytes: Option<u64>,
    ) -> Result<(), StoreError>;

    /// Records a built release's content digest. An unknown release is a no-op.
    async fn set_release_digest(
        &self,
        template: &str,
        number: u32,
        digest: &str,
    ) -> Result<(), StoreError>;

    /// Records the defaults a release built from a file gives its sandboxes. An unknown
    /// release is a no-op.
    async fn set_release_defaults(
        &self,
        template: &str,
        number: u32,
        defaults: &TemplateDefaults,
    ) -> Result<(), StoreError>;

    /// Records the operation that builds a release. An unknown release is a no-op.
    async fn set_release_operation(
        &self,
        template: &str,
        number: u32,
        operation_id: &str,
    ) -> Result<(), StoreError>;

    /// Releases of a template, newest first.
    async fn list_releases(&self, template: &str) -> Result<Vec<Release>, StoreError>;

    /// Releases in state `building` (after a restart they are failed).
    async fn building_releases(&self) -> Result<Vec<Release>, StoreError>;
}
