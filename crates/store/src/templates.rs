//! Templates built from a file (built-in recipes have no row).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::StoreError;

/// A template built from a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileTemplate {
    /// Name (one namespace for every org).
    pub name: String,
    /// The org that owns it.
    pub org: String,
    /// The template file of its newest build.
    pub file: String,
    /// First created.
    pub created_at: DateTime<Utc>,
    /// Last given a new file.
    pub updated_at: DateTime<Utc>,
}

/// File template rows.
#[async_trait]
pub trait TemplateStore: Send + Sync {
    /// Creates the template `name` of `org` with `file`, or replaces the file of an existing
    /// one of the same org (keeping its creation time). A name another org holds is
    /// [`StoreError::Conflict`] (nothing is written).
    async fn put_file_template(&self, name: &str, org: &str, file: &str) -> Result<(), StoreError>;

    /// The file template `name`, if there is one.
    async fn file_template(&self, name: &str) -> Result<Option<FileTemplate>, StoreError>;

    /// Every file template, by name.
    async fn file_templates(&self) -> Result<Vec<FileTemplate>, StoreError>;

    /// Deletes the file template `name`; whether it was there. Its releases' rows stay (their
    /// numbers are never reused).
    async fn delete_file_template(&self, name: &str) -> Result<bool, StoreError>;

    /// Deletes the file template `name` only when none of its releases is `ready` or
    /// `building` (one conditional statement, so a release another replica has just recorded
    /// keeps it); whether it was deleted. A template whose builds all failed is gone this way,
    /// and its name is free again.
    async fn delete_file_template_if_unbuilt(&self, name: &str) -> Result<bool, StoreError>;
}
