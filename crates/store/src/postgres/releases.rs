//! Releases of templates (PostgreSQL).

use async_trait::async_trait;
use chrono::Utc;
use cove_api_types::{Release, ReleaseState};
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::{from_i64, to_i64, PgStore, LOCK_RELEASE_NUMBER};
use crate::error::map_unique;
use crate::{parse_enum, ReleaseStore, StoreError};

fn row_to_release(r: &PgRow) -> Result<Release, StoreError> {
    Ok(Release {
        template: r.try_get("template")?,
        number: from_i64(r.try_get("number")?, "number")?,
        state: parse_enum(&r.try_get::<String, _>("state")?, ReleaseState::parse)?,
        size_bytes: r
            .try_get::<Option<i64>, _>("size_bytes")?
            .map(|v| from_i64(v, "size_bytes"))
            .transpose()?,
        recipe_hash: r.try_get("recipe_hash")?,
        digest: r.try_get("digest")?,
        defaults: crate::json_defaults(r.try_get("defaults")?)?,
        build_operation_id: r.try_get("build_operation_id")?,
        created_at: r.try_get("created_at")?,
    })
}

#[async_trait]
impl ReleaseStore for PgStore {
    async fn insert_next_release(
        &self,
        template: &str,
        recipe_hash: &str,
    ) -> Result<Release, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(LOCK_RELEASE_NUMBER)
            .bind(template)
            .execute(&mut *tx)
            .await?;
        let (max,): (Option<i64>,) =
            sqlx::query_as("SELECT MAX(number) FROM releases WHERE template = $1")
                .bind(template)
                .fetch_one(&mut *tx)
                .await?;
        let number = max.unwrap_or(0) + 1;
        let row = sqlx::query(
            "INSERT INTO releases (template, number, state, recipe_hash, created_at) \
             VALUES ($1, $2, 'building', $3, $4) RETURNING *",
        )
        .bind(template)
        .bind(number)
        .bind(recipe_hash)
        .bind(Utc::now())
        .fetch_one(&mut *tx)
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
        sqlx::query(
            "UPDATE releases SET state = $1, size_bytes = $2 WHERE template = $3 AND number = $4",
        )
        .bind(state.as_str())
        .bind(size_bytes.map(to_i64).transpose()?)
        .bind(template)
        .bind(i64::from(number))
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
        sqlx::query("UPDATE releases SET digest = $1 WHERE template = $2 AND number = $3")
            .bind(digest)
            .bind(template)
            .bind(i64::from(number))
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
        sqlx::query("UPDATE releases SET defaults = $1 WHERE template = $2 AND number = $3")
            .bind(crate::defaults_json(defaults)?)
            .bind(template)
            .bind(i64::from(number))
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
        sqlx::query(
            "UPDATE releases SET build_operation_id = $1 WHERE template = $2 AND number = $3",
        )
        .bind(operation_id)
        .bind(template)
        .bind(i64::from(number))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn list_releases(&self, template: &str) -> Result<Vec<Release>, StoreError> {
        let rows = sqlx::query("SELECT * FROM releases WHERE template = $1 ORDER BY number DESC")
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
