//! Checkpoint rows (SQLite).

use async_trait::async_trait;
use cove_api_types::{Checkpoint, CheckpointState, Resources};
use sqlx::Row;

use super::SqliteStore;
use crate::error::map_unique;
use crate::{json_map, map_json, parse_enum, CheckpointStore, StoreError};

fn row_to_checkpoint(r: &sqlx::sqlite::SqliteRow) -> Result<Checkpoint, StoreError> {
    Ok(Checkpoint {
        id: r.try_get("id")?,
        org: r.try_get("org")?,
        sandbox_id: r.try_get("sandbox_id")?,
        name: r.try_get("name")?,
        state: parse_enum(&r.try_get::<String, _>("state")?, CheckpointState::parse)?,
        state_reason: r.try_get("state_reason")?,
        template: r.try_get("template")?,
        release: r.try_get::<i64, _>("release")? as u32,
        resources: Resources {
            vcpus: r.try_get::<i64, _>("vcpus")? as u32,
            memory_mib: r.try_get::<i64, _>("memory_mib")? as u64,
            pids_max: r.try_get::<i64, _>("pids_max")? as u64,
            disk_mib: r.try_get::<Option<i64>, _>("disk_mib")?.map(|v| v as u64),
        },
        env: json_map(&r.try_get::<String, _>("env")?)?,
        cwd: r.try_get("cwd")?,
        user: r.try_get("user_name")?,
        runtime: r.try_get("runtime")?,
        memory: r.try_get("memory")?,
        file_bytes: r.try_get::<i64, _>("file_bytes")? as u64,
        pause_ms: r.try_get::<Option<i64>, _>("pause_ms")?.map(|v| v as u64),
        operation_id: r.try_get("operation_id")?,
        created_at: r.try_get("created_at")?,
    })
}

#[async_trait]
impl CheckpointStore for SqliteStore {
    async fn insert_checkpoint(&self, c: &Checkpoint) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO checkpoints (id, sandbox_id, name, state, state_reason, template, \
             release, vcpus, memory_mib, pids_max, disk_mib, env, cwd, user_name, runtime, \
             memory, file_bytes, pause_ms, operation_id, created_at, org) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&c.id)
        .bind(&c.sandbox_id)
        .bind(&c.name)
        .bind(c.state.as_str())
        .bind(&c.state_reason)
        .bind(&c.template)
        .bind(c.release)
        .bind(c.resources.vcpus)
        .bind(c.resources.memory_mib as i64)
        .bind(c.resources.pids_max as i64)
        .bind(c.resources.disk_mib.map(|v| v as i64))
        .bind(map_json(&c.env)?)
        .bind(&c.cwd)
        .bind(&c.user)
        .bind(&c.runtime)
        .bind(c.memory)
        .bind(c.file_bytes as i64)
        .bind(c.pause_ms.map(|v| v as i64))
        .bind(&c.operation_id)
        .bind(c.created_at)
        .bind(&c.org)
        .execute(&self.pool)
        .await
        .map_err(map_unique)?;
        Ok(())
    }

    async fn get_checkpoint(&self, id: &str) -> Result<Checkpoint, StoreError> {
        let row = sqlx::query("SELECT * FROM checkpoints WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        row_to_checkpoint(&row)
    }

    async fn list_checkpoints(
        &self,
        org: Option<&str>,
        sandbox_id: Option<&str>,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM checkpoints WHERE (?1 IS NULL OR sandbox_id = ?1) \
             AND (?2 IS NULL OR org = ?2) ORDER BY created_at DESC, id DESC",
        )
        .bind(sandbox_id)
        .bind(org)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(row_to_checkpoint).collect()
    }

    async fn checkpoint_ready(
        &self,
        id: &str,
        file_bytes: u64,
        memory: bool,
        pause_ms: u64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE checkpoints SET state = 'ready', file_bytes = ?, memory = ?, pause_ms = ? \
             WHERE id = ? AND state = 'creating'",
        )
        .bind(file_bytes as i64)
        .bind(memory)
        .bind(pause_ms as i64)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn checkpoint_failed(&self, id: &str, reason: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE checkpoints SET state = 'failed', state_reason = ? \
             WHERE id = ? AND state = 'creating'",
        )
        .bind(reason)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn fail_unfinished_checkpoints(&self, reason: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "UPDATE checkpoints SET state = 'failed', state_reason = ? \
             WHERE state = 'creating' RETURNING id",
        )
        .bind(reason)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| r.try_get("id").map_err(StoreError::from))
            .collect()
    }

    async fn delete_checkpoint(&self, id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM checkpoints WHERE id = ?")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }
}
