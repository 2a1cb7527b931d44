//! Volume rows (both backends).

use async_trait::async_trait;

use super::{query, to_i64, Backend, SqlRow};
use crate::error::map_unique;
use crate::{StoreError, VolumeObject, VolumeRecord, VolumeStore};

fn row_to_volume(r: &impl SqlRow) -> Result<VolumeRecord, StoreError> {
    Ok(VolumeRecord {
        id: r.try_get("id")?,
        org: r.try_get("org")?,
        name: r.try_get("name")?,
        size_mib: r.uint("size_mib")?,
        created_at: r.try_get("created_at")?,
        node: r.try_get("node")?,
        object: match r.try_get::<String, _>("storage")?.as_str() {
            "local" => None,
            "object" => Some(VolumeObject {
                generation: r.uint("generation")?,
                attached: r.try_get("attached")?,
            }),
            other => return Err(StoreError::Corrupt(format!("volume storage {other:?}"))),
        },
    })
}

#[async_trait]
impl<S: Backend> VolumeStore for S {
    async fn insert_volume(&self, v: &VolumeRecord) -> Result<(), StoreError> {
        query(
            "INSERT INTO volumes (id, org, name, size_mib, created_at, node, storage, generation, \
             attached) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&v.id)
        .bind(&v.org)
        .bind(&v.name)
        .bind(to_i64(v.size_mib)?)
        .bind(v.created_at)
        .bind(&v.node)
        .bind(if v.object.is_some() {
            "object"
        } else {
            "local"
        })
        .bind(to_i64(v.object.map_or(0, |o| o.generation))?)
        .bind(v.object.is_none_or(|o| o.attached))
        .execute(&mut self.db())
        .await
        .map_err(map_unique)?;
        Ok(())
    }

    async fn get_volume(&self, org: &str, name: &str) -> Result<VolumeRecord, StoreError> {
        let row = query("SELECT * FROM volumes WHERE org = $1 AND name = $2")
            .bind(org)
            .bind(name)
            .fetch_optional(&mut self.db())
            .await?
            .ok_or(StoreError::NotFound)?;
        row_to_volume(&row)
    }

    async fn list_volumes(&self, org: Option<&str>) -> Result<Vec<VolumeRecord>, StoreError> {
        let rows = query(
            "SELECT * FROM volumes WHERE (CAST($1 AS TEXT) IS NULL OR org = $1) ORDER BY org, name",
        )
        .bind(org)
        .fetch_all(&mut self.db())
        .await?;
        rows.iter().map(row_to_volume).collect()
    }

    async fn volume_users(&self, org: &str, name: &str) -> Result<Vec<String>, StoreError> {
        let sql = format!(
            "SELECT id FROM sandboxes WHERE org = $1 AND state <> 'deleted' AND {} \
             ORDER BY created_at, id",
            S::has_named_element("sandboxes.volumes", 2)
        );
        let rows = query(&sql)
            .bind(org)
            .bind(name)
            .fetch_all(&mut self.db())
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
        let res = query(
            "UPDATE volumes SET generation = $1, attached = $2, node = $3 \
             WHERE id = $4 AND storage = 'object' AND generation = $5",
        )
        .bind(to_i64(generation)?)
        .bind(node.is_some())
        .bind(node.flatten())
        .bind(id)
        .bind(to_i64(expected)?)
        .execute(&mut self.db())
        .await?;
        if res > 0 {
            return Ok(());
        }
        let exists = query("SELECT 1 FROM volumes WHERE id = $1 AND storage = 'object'")
            .bind(id)
            .fetch_optional(&mut self.db())
            .await?;
        match exists {
            Some(_) => Err(StoreError::Conflict(format!(
                "volume {id} is no longer at generation {expected}"
            ))),
            None => Err(StoreError::NotFound),
        }
    }

    async fn detach_node_volumes(&self, node: &str) -> Result<u64, StoreError> {
        let res = query(
            "UPDATE volumes SET attached = FALSE, node = NULL \
             WHERE storage = 'object' AND attached AND node = $1",
        )
        .bind(node)
        .execute(&mut self.db())
        .await?;
        Ok(res)
    }

    async fn delete_volume(&self, org: &str, name: &str) -> Result<bool, StoreError> {
        let res = query("DELETE FROM volumes WHERE org = $1 AND name = $2")
            .bind(org)
            .bind(name)
            .execute(&mut self.db())
            .await?;
        Ok(res > 0)
    }
}
