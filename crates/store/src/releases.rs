//! Releases of templates.

use chrono::{DateTime, Utc};
use cove_api_types::{Release, ReleaseState};
use sqlx::Row;

use crate::{parse_enum, Store, StoreError};

fn row_to_release(r: &sqlx::sqlite::SqliteRow) -> Result<Release, StoreError> {
    Ok(Release {
        template: r.try_get("template")?,
        number: r.try_get::<i64, _>("number")? as u32,
        state: parse_enum(&r.try_get::<String, _>("state")?, ReleaseState::parse)?,
        size_bytes: r.try_get::<Option<i64>, _>("size_bytes")?.map(|v| v as u64),
        recipe_hash: r.try_get("recipe_hash")?,
        created_at: r.try_get::<DateTime<Utc>, _>("created_at")?,
    })
}

impl Store {
    /// Allocates the next release number of `template` (1 for the first) in state `building`.
    pub async fn insert_next_release(
        &self,
        template: &str,
        recipe_hash: &str,
    ) -> Result<Release, StoreError> {
        let mut tx = self.pool.begin().await?;
        let (max,): (Option<i64>,) =
            sqlx::query_as("SELECT MAX(number) FROM releases WHERE template = ?")
                .bind(template)
                .fetch_one(&mut *tx)
                .await?;
        let number = max.unwrap_or(0) + 1;
        let now = Utc::now();
        sqlx::query(
            "INSERT INTO releases (template, number, state, recipe_hash, created_at) \
             VALUES (?, ?, 'building', ?, ?)",
        )
        .bind(template)
        .bind(number)
        .bind(recipe_hash)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Release {
            template: template.to_string(),
            number: number as u32,
            state: ReleaseState::Building,
            size_bytes: None,
            recipe_hash: recipe_hash.to_string(),
            created_at: now,
        })
    }

    /// Sets a release's state (and size when it became ready).
    pub async fn set_release_state(
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

    /// Releases of a template, newest first.
    pub async fn list_releases(&self, template: &str) -> Result<Vec<Release>, StoreError> {
        let rows = sqlx::query("SELECT * FROM releases WHERE template = ? ORDER BY number DESC")
            .bind(template)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row_to_release).collect()
    }

    /// Releases in state `building` (after a restart they are failed).
    pub async fn building_releases(&self) -> Result<Vec<Release>, StoreError> {
        let rows = sqlx::query("SELECT * FROM releases WHERE state = 'building'")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row_to_release).collect()
    }
}
