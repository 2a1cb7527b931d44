//! Checkpoint rows (both backends).

use async_trait::async_trait;
use cove_api_types::{Checkpoint, CheckpointState};

use super::{query, to_i64, Backend, SqlRow};
use crate::error::map_unique;
use crate::{json_map, map_json, parse_enum, CheckpointStore, StoreError};

fn row_to_checkpoint(r: &impl SqlRow) -> Result<Checkpoint, StoreError> {
    Ok(Checkpoint {
        id: r.try_get("id")?,
        org: r.try_get("org")?,
        sandbox_id: r.try_get("sandbox_id")?,
        name: r.try_get("name")?,
        state: parse_enum(&r.try_get::<String, _>("state")?, CheckpointState::parse)?,
        state_reason: r.try_get("state_reason")?,
        template: r.try_get("template")?,
        release: r.uint("release")?,
        resources: r.resources()?,
        env: json_map(&r.try_get::<String, _>("env")?)?,
        cwd: r.try_get("cwd")?,
        user: r.try_get("user_name")?,
        runtime: r.try_get("runtime")?,
        memory: r.try_get("memory")?,
        file_bytes: r.uint("file_bytes")?,
        pause_ms: r.opt_uint("pause_ms")?,
        operation_id: r.try_get("operation_id")?,
        created_at: r.try_get("created_at")?,
    })
}

#[async_trait]
impl<S: Backend> CheckpointStore for S {
    async fn insert_checkpoint(&self, c: &Checkpoint) -> Result<(), StoreError> {
        query(
            "INSERT INTO checkpoints (id, sandbox_id, name, state, state_reason, template, \
             release, vcpus, memory_mib, pids_max, disk_mib, env, cwd, user_name, runtime, \
             memory, file_bytes, pause_ms, operation_id, created_at, org) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)",
        )
        .bind(&c.id)
        .bind(&c.sandbox_id)
        .bind(&c.name)
        .bind(c.state.as_str())
        .bind(&c.state_reason)
        .bind(&c.template)
        .bind(i64::from(c.release))
        .bind(i64::from(c.resources.vcpus))
        .bind(to_i64(c.resources.memory_mib)?)
        .bind(to_i64(c.resources.pids_max)?)
        .bind(c.resources.disk_mib.map(to_i64).transpose()?)
        .bind(map_json(&c.env)?)
        .bind(&c.cwd)
        .bind(&c.user)
        .bind(&c.runtime)
        .bind(c.memory)
        .bind(to_i64(c.file_bytes)?)
        .bind(c.pause_ms.map(to_i64).transpose()?)
        .bind(&c.operation_id)
        .bind(c.created_at)
        .bind(&c.org)
        .execute(&mut self.db())
        .await
        .map_err(map_unique)?;
        Ok(())
    }

    async fn get_checkpoint(&self, id: &str) -> Result<Checkpoint, StoreError> {
        let row = query("SELECT * FROM checkpoints WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut self.db())
            .await?
            .ok_or(StoreError::NotFound)?;
        row_to_checkpoint(&row)
    }

    async fn list_checkpoints(
        &self,
        org: Option<&str>,
        sandbox_id: Option<&str>,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let rows = query(
            "SELECT * FROM checkpoints WHERE (CAST($1 AS TEXT) IS NULL OR sandbox_id = $1) \
             AND (CAST($2 AS TEXT) IS NULL OR org = $2) ORDER BY created_at DESC, id DESC",
        )
        .bind(sandbox_id)
        .bind(org)
        .fetch_all(&mut self.db())
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
        let done = query(
            "UPDATE checkpoints SET state = 'ready', file_bytes = $1, memory = $2, pause_ms = $3 \
             WHERE id = $4 AND state = 'creating'",
        )
        .bind(to_i64(file_bytes)?)
        .bind(memory)
        .bind(to_i64(pause_ms)?)
        .bind(id)
        .execute(&mut self.db())
        .await?;
        Ok(done == 1)
    }

    async fn checkpoint_failed(&self, id: &str, reason: &str) -> Result<bool, StoreError> {
        let done = query(
            "UPDATE checkpoints SET state = 'failed', state_reason = $1 \
             WHERE id = $2 AND state = 'creating'",
        )
        .bind(reason)
        .bind(id)
        .execute(&mut self.db())
        .await?;
        Ok(done == 1)
    }

    async fn fail_unfinished_checkpoints(&self, reason: &str) -> Result<Vec<String>, StoreError> {
        let rows = query(
            "UPDATE checkpoints SET state = 'failed', state_reason = $1 \
             WHERE state = 'creating' RETURNING id",
        )
        .bind(reason)
        .fetch_all(&mut self.db())
        .await?;
        rows.iter()
            .map(|r| r.try_get("id").map_err(StoreError::from))
            .collect()
    }

    async fn delete_checkpoint(&self, id: &str) -> Result<bool, StoreError> {
        let done = query("DELETE FROM checkpoints WHERE id = $1")
            .bind(id)
            .execute(&mut self.db())
            .await?;
        Ok(done == 1)
    }
}
