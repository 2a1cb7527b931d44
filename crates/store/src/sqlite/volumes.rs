//! Volume rows (SQLite).

use async_trait::async_trait;
use sqlx::Row;

use super::SqliteStore;
use crate::error::map_unique;
use crate::{StoreError, VolumeRecord, VolumeStore};

fn row_to_volume(r: &sqlx::sqlite::SqliteRow) -> Result<VolumeRecord, StoreError> {
    Ok(VolumeRecord {
        id: r.try_get("id")?,
        org: r.try_get("org")?,
        name: r.try_get("name")?,
        size_mib: r.try_get::<i64, _>("size_mib")? as u64,
        created_at: r.try_get("created_at")?,
        node: r.try_get("node")?,
    })
}

#[async_trait]
impl VolumeStore for SqliteStore {
    async fn insert_volume(&self, v: &VolumeRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO volumes (id, org, name, size_mib, created_at, node) VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(&v.id)
        .bind(&v.org)
        .bind(&v.name)
        .bind(v.size_mib as i64)
        .bind(v.created_at)
        .bind(&v.node)
        .execute(&self.pool)
        .await
        .map_err(map_unique)?;
        Ok(())
    }

    async fn get_volume(&self, org: &str, name: &str) -> Result<VolumeRecord, StoreError> {
        let row = sqlx::query("SELECT * FROM volumes WHERE org = ? AND name = ?")
            .bind(org)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        row_to_volume(&row)
    }

    async fn list_volumes(&self, org: Option<&str>) -> Result<Vec<VolumeRecord>, StoreError> {
        let rows =
            sqlx::query("SELECT * FROM volumes WHERE (?1 IS NULL OR org = ?1) ORDER BY org, name")
                .bind(org)
                .fetch_all(&self.pool)
                .await?;
        rows.iter().map(row_to_volume).collect()
    }

    async fn volume_users(&self, org: &str, name: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "SELECT id FROM sandboxes WHERE org = ? AND state != 'deleted' AND EXISTS \
             (SELECT 1 FROM json_each(sandboxes.volumes) \
              WHERE json_extract(json_each.value, '$.name') = ?) \
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
        let res = sqlx::query("DELETE FROM volumes WHERE org = ? AND name = ?")
            .bind(org)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }
}
