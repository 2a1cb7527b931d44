//! Volume rows (SQLite).

use async_trait::async_trait;
use sqlx::Row;

use super::SqliteStore;
use crate::error::map_unique;
use crate::{StoreError, VolumeObject, VolumeRecord, VolumeStore};

fn row_to_volume(r: &sqlx::sqlite::SqliteRow) -> Result<VolumeRecord, StoreError> {
    Ok(VolumeRecord {
        id: r.try_get("id")?,
        org: r.try_get("org")?,
        name: r.try_get("name")?,
        size_mib: r.try_get::<i64, _>("size_mib")? as u64,
        created_at: r.try_get("created_at")?,
        node: r.try_get("node")?,
        object: match r.try_get::<String, _>("storage")?.as_str() {
            "local" => None,
            "object" => Some(VolumeObject {
                generation: r.try_get::<i64, _>("generation")? as u64,
                attached: r.try_get("attached")?,
            }),
            other => return Err(StoreError::Corrupt(format!("volume storage {other:?}"))),
        },
    })
}

#[async_trait]
impl VolumeStore for SqliteStore {
    async fn insert_volume(&self, v: &VolumeRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO volumes (id, org, name, size_mib, created_at, node, storage, generation, \
             attached) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&v.id)
        .bind(&v.org)
        .bind(&v.name)
        .bind(v.size_mib as i64)
        .bind(v.created_at)
        .bind(&v.node)
        .bind(if v.object.is_some() {
            "object"
        } else {
            "local"
        })
        .bind(v.object.map_or(0, |o| o.generation as i64))
        .bind(v.object.is_none_or(|o| o.attached))
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

    async fn set_volume_attachment(
        &self,
        id: &str,
        expected: u64,
        generation: u64,
        node: Option<Option<&str>>,
    ) -> Result<(), StoreError> {
        let res = sqlx::query(
            "UPDATE volumes SET generation = ?, attached = ?, node = ? \
             WHERE id = ? AND storage = 'object' AND generation = ?",
        )
        .bind(generation as i64)
        .bind(node.is_some())
        .bind(node.flatten())
        .bind(id)
        .bind(expected as i64)
        .execute(&self.pool)
        .await?;
        if res.rows_affected() > 0 {
            return Ok(());
        }
        let exists = sqlx::query("SELECT 1 FROM volumes WHERE id = ? AND storage = 'object'")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        match exists {
            Some(_) => Err(StoreError::Conflict(format!(
                "volume {id} is no longer at generation {expected}"
            ))),
            None => Err(StoreError::NotFound),
        }
    }

    async fn detach_node_volumes(&self, node: &str) -> Result<u64, StoreError> {
        let res = sqlx::query(
            "UPDATE volumes SET attached = 0, node = NULL \
             WHERE storage = 'object' AND attached = 1 AND node = ?",
        )
        .bind(node)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected())
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
