//! Volume rows (PostgreSQL).

use async_trait::async_trait;
use sqlx::Row;

use super::PgStore;
use super::{from_i64, to_i64};
use crate::error::map_unique;
use crate::{StoreError, VolumeRecord, VolumeStore};

fn row_to_volume(r: &sqlx::postgres::PgRow) -> Result<VolumeRecord, StoreError> {
    Ok(VolumeRecord {
        id: r.try_get("id")?,
        org: r.try_get("org")?,
        name: r.try_get("name")?,
        size_mib: from_i64(r.try_get("size_mib")?, "size_mib")?,
        created_at: r.try_get("created_at")?,
        node: r.try_get("node")?,
    })
}

#[async_trait]
impl VolumeStore for PgStore {
    async fn insert_volume(&self, v: &VolumeRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO volumes (id, org, name, size_mib, created_at, node) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&v.id)
        .bind(&v.org)
        .bind(&v.name)
        .bind(to_i64(v.size_mib)?)
        .bind(v.created_at)
        .bind(&v.node)
        .execute(&self.pool)
        .await
        .map_err(map_unique)?;
        Ok(())
    }

    async fn get_volume(&self, org: &str, name: &str) -> Result<VolumeRecord, StoreError> {
        let row = sqlx::query("SELECT * FROM volumes WHERE org = $1 AND name = $2")
            .bind(org)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        row_to_volume(&row)
    }

    async fn list_volumes(&self, org: Option<&str>) -> Result<Vec<VolumeRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM volumes WHERE ($1::TEXT IS NULL OR org = $1) ORDER BY org, name",
        )
        .bind(org)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(row_to_volume).collect()
    }

    async fn volume_users(&self, org: &str, name: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "SELECT id FROM sandboxes WHERE org = $1 AND state <> 'deleted' \
             AND volumes::jsonb @> jsonb_build_array(jsonb_build_object('name', $2::TEXT)) \
             ORDER BY created_at, id",
        )
        .bind(org)
        .bind(name)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("id").map_err(StoreError::from))
            .collect()
    }

    async fn delete_volume(&self, org: &str, name: &str) -> Result<bool, StoreError> {
        let res = sqlx::query("DELETE FROM volumes WHERE org = $1 AND name = $2")
            .bind(org)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }
}
