//! Releases of templates (SQLite).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{Release, ReleaseState};
use sqlx::Row;

use super::SqliteStore;
use crate::error::map_unique;
use crate::{parse_enum, ReleaseStore, StoreError};

fn row_to_release(r: &sqlx::sqlite::SqliteRow) -> Result<Release, StoreError> {
    Ok(Release {
        template: r.try_get("template")?,
        number: r.try_get::<i64, _>("number")? as u32,
        state: parse_enum(&r.try_get::<String, _>("state")?, ReleaseState::parse)?,
        size_bytes: r.try_get::<Option<i64>, _>("size_bytes")?.map(|v| v as u64),
        recipe_hash: r.try_get("recipe_hash")?,
        digest: r.try_get("digest")?,
        defaults: crate::json_defaults(r.try_get("defaults")?)?,
        build_operation_id: r.try_get("build_operation_id")?,
        created_at: r.try_get::<DateTime<Utc>, _>("created_at")?,
    })
}

#[async_trait]
impl ReleaseStore for SqliteStore {
    async fn insert_next_release(
        &self,
        template: &str,
        recipe_hash: &str,
    ) -> Result<Release, StoreError> {
        // One statement, so concurrent allocations never read the same maximum (a read-then-
        // write transaction would fail to upgrade its lock under SQLite).
        let now = Utc::now();
        let (number,): (i64,) = sqlx::query_as(
            "INSERT INTO releases (template, number, state, recipe_hash, created_at) \
             VALUES (?, (SELECT COALESCE(MAX(number), 0) + 1 FROM releases WHERE template = ?), \
             'building', ?, ?) RETURNING number",
        )
        .bind(template)
        .bind(template)
        .bind(recipe_hash)
        .bind(now)
        .fetch_one(&self.pool)
        .await
        .map_err(map_unique)?;
        Ok(Release {
            template: template.to_string(),
            number: number as u32,
            state: ReleaseState::Building,
            size_bytes: None,
            recipe_hash: recipe_hash.to_string(),
            digest: None,
            defaults: None,
            build_operation_id: None,
            created_at: now,
        })
    }

    async fn set_release_state(
        &self,
        template: &str,
        number: u32,
        state: ReleaseState,
        size_bytes: Option<u64>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE releases SET state = ?, size_bytes = ? WHERE template = ? AND number = ?",
        )
        .bind(state.as_str())
        .bind(size_bytes.map(|v| v as i64))
        .bind(template)
        .bind(number)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn set_release_digest(
        &self,
        template: &str,
        number: u32,
        digest: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE releases SET digest = ? WHERE template = ? AND number = ?")
            .bind(digest)
            .bind(template)
            .bind(number)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn set_release_defaults(
        &self,
        template: &str,
        number: u32,
        defaults: &cove_api_types::TemplateDefaults,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE releases SET defaults = ? WHERE template = ? AND number = ?")
            .bind(crate::defaults_json(defaults)?)
            .bind(template)
            .bind(number)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn set_release_operation(
        &self,
        template: &str,
        number: u32,
        operation_id: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE releases SET build_operation_id = ? WHERE template = ? AND number = ?")
            .bind(operation_id)
            .bind(template)
            .bind(number)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn list_releases(&self, template: &str) -> Result<Vec<Release>, StoreError> {
        let rows = sqlx::query("SELECT * FROM releases WHERE template = ? ORDER BY number DESC")
            .bind(template)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row_to_release).collect()
    }

    async fn building_releases(&self) -> Result<Vec<Release>, StoreError> {
        let rows = sqlx::query("SELECT * FROM releases WHERE state = 'building'")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row_to_release).collect()
    }
}
