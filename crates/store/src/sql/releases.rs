//! Releases of templates (both backends).

use async_trait::async_trait;
use chrono::Utc;
use cove_api_types::{Release, ReleaseState};

use super::{query, to_i64, Backend, SqlRow, Tx, XactLock};
use crate::error::map_unique;
use crate::{parse_enum, ReleaseStore, StoreError};

fn row_to_release(r: &impl SqlRow) -> Result<Release, StoreError> {
    Ok(Release {
        template: r.try_get("template")?,
        number: r.uint("number")?,
        state: parse_enum(&r.try_get::<String, _>("state")?, ReleaseState::parse)?,
        size_bytes: r.opt_uint("size_bytes")?,
        recipe_hash: r.try_get("recipe_hash")?,
        digest: r.try_get("digest")?,
        defaults: crate::json_defaults(r.try_get("defaults")?)?,
        build_operation_id: r.try_get("build_operation_id")?,
        created_at: r.try_get("created_at")?,
    })
}

#[async_trait]
impl<S: Backend> ReleaseStore for S {
    async fn insert_next_release(
        &self,
        template: &str,
        recipe_hash: &str,
    ) -> Result<Release, StoreError> {
        // Under the lock (PostgreSQL) or SQLite's one writer (the insert is the transaction's
        // first statement, so it never has to upgrade a read lock), concurrent allocations
        // never read the same maximum.
        let mut tx = self.begin().await?;
        S::lock_xact(&mut tx, XactLock::ReleaseNumber, template).await?;
        let row = query(
            "INSERT INTO releases (template, number, state, recipe_hash, created_at) \
             VALUES ($1, (SELECT COALESCE(MAX(number), 0) + 1 FROM releases WHERE template = $1), \
             'building', $2, $3) RETURNING *",
        )
        .bind(template)
        .bind(recipe_hash)
        .bind(Utc::now())
        .fetch_one(&mut tx)
        .await
        .map_err(map_unique)?;
        tx.commit().await?;
        row_to_release(&row)
    }

    async fn set_release_state(
        &self,
        template: &str,
        number: u32,
        state: ReleaseState,
        size_bytes: Option<u64>,
    ) -> Result<(), StoreError> {
        query(
            "UPDATE releases SET state = $1, size_bytes = $2 WHERE template = $3 AND number = $4",
        )
        .bind(state.as_str())
        .bind(size_bytes.map(to_i64).transpose()?)
        .bind(template)
        .bind(i64::from(number))
        .execute(&mut self.db())
        .await?;
        Ok(())
    }

    async fn set_release_digest(
        &self,
        template: &str,
        number: u32,
        digest: &str,
    ) -> Result<(), StoreError> {
        query("UPDATE releases SET digest = $1 WHERE template = $2 AND number = $3")
            .bind(digest)
            .bind(template)
            .bind(i64::from(number))
            .execute(&mut self.db())
            .await?;
        Ok(())
    }

    async fn set_release_defaults(
        &self,
        template: &str,
        number: u32,
        defaults: &cove_api_types::TemplateDefaults,
    ) -> Result<(), StoreError> {
        query("UPDATE releases SET defaults = $1 WHERE template = $2 AND number = $3")
            .bind(crate::defaults_json(defaults)?)
            .bind(template)
            .bind(i64::from(number))
            .execute(&mut self.db())
            .await?;
        Ok(())
    }

    async fn set_release_operation(
        &self,
        template: &str,
        number: u32,
        operation_id: &str,
    ) -> Result<(), StoreError> {
        query("UPDATE releases SET build_operation_id = $1 WHERE template = $2 AND number = $3")
            .bind(operation_id)
            .bind(template)
            .bind(i64::from(number))
            .execute(&mut self.db())
            .await?;
        Ok(())
    }

    async fn list_releases(&self, template: &str) -> Result<Vec<Release>, StoreError> {
        let rows = query("SELECT * FROM releases WHERE template = $1 ORDER BY number DESC")
            .bind(template)
            .fetch_all(&mut self.db())
            .await?;
        rows.iter().map(row_to_release).collect()
    }

    async fn building_releases(&self) -> Result<Vec<Release>, StoreError> {
        let rows = query("SELECT * FROM releases WHERE state = 'building'")
            .fetch_all(&mut self.db())
            .await?;
        rows.iter().map(row_to_release).collect()
    }
}
