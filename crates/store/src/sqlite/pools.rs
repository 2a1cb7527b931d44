//! Warm pools and their members (SQLite). A claim is one `UPDATE ... WHERE id = (SELECT ...)`
//! inside a transaction whose first statement writes, so SQLite's single writer makes it
//! atomic: a second claim waits for the first and then sees the member gone.

use async_trait::async_trait;
use chrono::Utc;
use cove_api_types::{EventType, Operation, Resources};
use sqlx::Row;

use super::lifecycle::insert_event;
use super::operations::row_to_operation;
use super::sandboxes::{insert, row_to_sandbox};
use super::SqliteStore;
use crate::error::map_unique;
use crate::{
    map_json, NewEvent, NewOperation, PoolClaim, PoolMember, PoolRecord, PoolStore, StoreError,
};

fn row_to_pool(r: &sqlx::sqlite::SqliteRow) -> Result<PoolRecord, StoreError> {
    Ok(PoolRecord {
        name: r.try_get("name")?,
        org: r.try_get("org")?,
        template: r.try_get("template")?,
        release: r.try_get::<Option<i64>, _>("release")?.map(|v| v as u32),
        resources: Resources {
            vcpus: r.try_get::<i64, _>("vcpus")? as u32,
            memory_mib: r.try_get::<i64, _>("memory_mib")? as u64,
            pids_max: r.try_get::<i64, _>("pids_max")? as u64,
            disk_mib: r.try_get::<Option<i64>, _>("disk_mib")?.map(|v| v as u64),
        },
        min_ready: r.try_get::<i64, _>("min_ready")? as u32,
        max: r.try_get::<i64, _>("max_members")? as u32,
        hits: r.try_get::<i64, _>("hits")? as u64,
        misses: r.try_get::<i64, _>("misses")? as u64,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

#[async_trait]
impl PoolStore for SqliteStore {
    async fn put_pool(&self, p: &PoolRecord) -> Result<PoolRecord, StoreError> {
        let row = sqlx::query(
            "INSERT INTO pools (name, template, release, vcpus, memory_mib, pids_max, disk_mib, \
             min_ready, max_members, hits, misses, created_at, updated_at, org) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?) \
             ON CONFLICT (name) DO UPDATE SET template = excluded.template, \
             release = excluded.release, vcpus = excluded.vcpus, \
             memory_mib = excluded.memory_mib, pids_max = excluded.pids_max, \
             disk_mib = excluded.disk_mib, min_ready = excluded.min_ready, \
             max_members = excluded.max_members, updated_at = excluded.updated_at \
             WHERE pools.org = excluded.org \
             RETURNING *",
        )
        .bind(&p.name)
        .bind(&p.template)
        .bind(p.release)
        .bind(p.resources.vcpus)
        .bind(p.resources.memory_mib as i64)
        .bind(p.resources.pids_max as i64)
        .bind(p.resources.disk_mib.map(|v| v as i64))
        .bind(p.min_ready)
        .bind(p.max)
        .bind(p.created_at)
        .bind(p.updated_at)
        .bind(&p.org)
        .fetch_optional(&self.pool)
        .await?
        // The name is another org's pool.
        .ok_or_else(|| StoreError::Conflict("pool name taken by another org".into()))?;
        row_to_pool(&row)
    }

    async fn get_pool(&self, name: &str) -> Result<PoolRecord, StoreError> {
        let row = sqlx::query("SELECT * FROM pools WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        row_to_pool(&row)
    }

    async fn list_pools(&self) -> Result<Vec<PoolRecord>, StoreError> {
        let rows = sqlx::query("SELECT * FROM pools ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row_to_pool).collect()
    }

    async fn delete_pool(&self, name: &str) -> Result<bool, StoreError> {
        let res = sqlx::query("DELETE FROM pools WHERE name = ?")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn insert_pool_member(
        &self,
        s: &cove_api_types::Sandbox,
        pool: &str,
    ) -> Result<(), StoreError> {
        insert(&self.pool, s, Some(pool)).await
    }

    async fn pool_members(&self) -> Result<Vec<PoolMember>, StoreError> {
        let rows =
            sqlx::query("SELECT * FROM sandboxes WHERE pool IS NOT NULL AND state != 'deleted'")
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|r| {
                Ok(PoolMember {
                    pool: r.try_get("pool")?,
                    sandbox: row_to_sandbox(r)?,
                })
            })
            .collect()
    }

    async fn claim_member(
        &self,
        c: &PoolClaim,
        op: &NewOperation,
    ) -> Result<Option<(PoolMember, Operation)>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(
            "UPDATE sandboxes SET claimed_from = pool, pool = NULL, env = ?, metadata = ?, \
             cwd = ?, user_name = ?, idle_timeout_s = ?, ttl_s = ?, created_at = ?, \
             updated_at = ?, last_activity_at = ? \
             WHERE id = (SELECT id FROM sandboxes WHERE pool IS NOT NULL AND state = 'running' \
             AND template = ? AND release = ? AND vcpus = ? AND memory_mib = ? AND pids_max = ? \
             AND disk_mib IS ? AND org = ? ORDER BY updated_at LIMIT 1) \
             RETURNING *",
        )
        .bind(map_json(&c.env)?)
        .bind(map_json(&c.metadata)?)
        .bind(&c.cwd)
        .bind(&c.user)
        .bind(c.idle_timeout_s as i64)
        .bind(c.ttl_s.map(|v| v as i64))
        .bind(c.at)
        .bind(c.at)
        .bind(c.at)
        .bind(&c.template)
        .bind(c.release)
        .bind(c.resources.vcpus)
        .bind(c.resources.memory_mib as i64)
        .bind(c.resources.pids_max as i64)
        .bind(c.resources.disk_mib.map(|v| v as i64))
        .bind(&c.org)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            return Ok(None);
        };
        let pool: String = row.try_get("claimed_from")?;
        sqlx::query("UPDATE pools SET hits = hits + 1 WHERE name = ?")
            .bind(&pool)
            .execute(&mut *tx)
            .await?;
        let sandbox = row_to_sandbox(&row)?;
        let now = Utc::now();
        let op_row = sqlx::query(
            "INSERT INTO operations (id, kind, state, sandbox_id, template, release, \
             idempotency_key, request_hash, created_at, updated_at, deadline, org) \
             VALUES (?, ?, 'succeeded', ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
        )
        .bind(&op.id)
        .bind(op.kind.as_str())
        .bind(&sandbox.id)
        .bind(&op.template)
        .bind(op.release)
        .bind(&op.idempotency_key)
        .bind(&op.request_hash)
        .bind(now)
        .bind(now)
        .bind(op.deadline)
        .bind(&op.org)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_unique)?;
        let operation = row_to_operation(&op_row)?;
        let created = NewEvent {
            kind: EventType::SandboxCreated,
            operation_id: Some(op.id.clone()),
            reason: Some(format!("served by warm pool {pool}")),
            destination: None,
            host: None,
            port: None,
            rule: None,
        };
        insert_event(&mut tx, &sandbox.id, &created, now).await?;
        tx.commit().await?;
        Ok(Some((PoolMember { pool, sandbox }, operation)))
    }

    async fn record_pool_misses(&self, names: &[String]) -> Result<(), StoreError> {
        for name in names {
            sqlx::query("UPDATE pools SET misses = misses + 1 WHERE name = ?")
                .bind(name)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    async fn retire_member(&self, id: &str, pool: &str) -> Result<bool, StoreError> {
        let res = sqlx::query(
            "UPDATE sandboxes SET state = 'deleting', prior_state = state, \
             state_reason = 'retired from its warm pool', updated_at = ? \
             WHERE id = ? AND pool = ? AND state IN ('creating', 'running', 'failed')",
        )
        .bind(Utc::now())
        .bind(id)
        .bind(pool)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() > 0)
    }
}
