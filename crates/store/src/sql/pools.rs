//! Warm pools and their members (both backends). A claim is one `UPDATE ... WHERE id =
//! (SELECT ...)`: under SQLite's one writer a second claim waits for the first and then sees
//! the member gone; PostgreSQL adds `FOR UPDATE SKIP LOCKED` ([`Backend::SKIP_LOCKED`]) so
//! concurrent claims lock different members instead of queueing on the same one, and counts
//! the pool's hit after the claim's commit ([`Backend::HIT_AFTER_CLAIM`]), so claims do not
//! queue on the pool's row either.

use async_trait::async_trait;
use chrono::Utc;
use cove_api_types::{EventType, Operation, OperationState};

use super::lifecycle::insert_event;
use super::operations;
use super::sandboxes::{insert, row_to_sandbox};
use super::{query, to_i64, Backend, SqlRow, Tx};
use crate::{
    map_json, NewEvent, NewOperation, PoolClaim, PoolMember, PoolRecord, PoolStore, StoreError,
};

fn row_to_pool(r: &impl SqlRow) -> Result<PoolRecord, StoreError> {
    Ok(PoolRecord {
        name: r.try_get("name")?,
        org: r.try_get("org")?,
        template: r.try_get("template")?,
        release: r.opt_uint("release")?,
        resources: r.resources()?,
        min_ready: r.uint("min_ready")?,
        max: r.uint("max_members")?,
        hits: r.uint("hits")?,
        misses: r.uint("misses")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

#[async_trait]
impl<S: Backend> PoolStore for S {
    async fn put_pool(&self, p: &PoolRecord) -> Result<PoolRecord, StoreError> {
        let row = query(
            "INSERT INTO pools (name, template, release, vcpus, memory_mib, pids_max, disk_mib, \
             min_ready, max_members, hits, misses, created_at, updated_at, org) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, 0, $10, $11, $12) \
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
        .bind(p.release.map(i64::from))
        .bind(i64::from(p.resources.vcpus))
        .bind(to_i64(p.resources.memory_mib)?)
        .bind(to_i64(p.resources.pids_max)?)
        .bind(p.resources.disk_mib.map(to_i64).transpose()?)
        .bind(i64::from(p.min_ready))
        .bind(i64::from(p.max))
        .bind(p.created_at)
        .bind(p.updated_at)
        .bind(&p.org)
        .fetch_optional(&mut self.db())
        .await?
        // The name is another org's pool.
        .ok_or_else(|| StoreError::Conflict("pool name taken by another org".into()))?;
        row_to_pool(&row)
    }

    async fn get_pool(&self, name: &str) -> Result<PoolRecord, StoreError> {
        let row = query("SELECT * FROM pools WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut self.db())
            .await?
            .ok_or(StoreError::NotFound)?;
        row_to_pool(&row)
    }

    async fn list_pools(&self) -> Result<Vec<PoolRecord>, StoreError> {
        let rows = query("SELECT * FROM pools ORDER BY name")
            .fetch_all(&mut self.db())
            .await?;
        rows.iter().map(row_to_pool).collect()
    }

    async fn delete_pool(&self, name: &str) -> Result<bool, StoreError> {
        let res = query("DELETE FROM pools WHERE name = $1")
            .bind(name)
            .execute(&mut self.db())
            .await?;
        Ok(res > 0)
    }

    async fn insert_pool_member(
        &self,
        s: &cove_api_types::Sandbox,
        pool: &str,
    ) -> Result<(), StoreError> {
        insert(&mut self.db(), s, Some(pool)).await
    }

    async fn pool_members(&self) -> Result<Vec<PoolMember>, StoreError> {
        let rows = query("SELECT * FROM sandboxes WHERE pool IS NOT NULL AND state <> 'deleted'")
            .fetch_all(&mut self.db())
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
        let mut tx = self.begin().await?;
        let sql = format!(
            "UPDATE sandboxes SET claimed_from = pool, pool = NULL, env = $1, metadata = $2, \
             cwd = $3, user_name = $4, idle_timeout_s = $5, ttl_s = $6, created_at = $7, \
             updated_at = $7, last_activity_at = $7 \
             WHERE id = (SELECT id FROM sandboxes WHERE pool IS NOT NULL AND state = 'running' \
             AND template = $8 AND release = $9 AND vcpus = $10 AND memory_mib = $11 \
             AND pids_max = $12 AND disk_mib IS NOT DISTINCT FROM $13 AND org = $14 \
             ORDER BY updated_at LIMIT 1{}) \
             RETURNING *",
            S::SKIP_LOCKED
        );
        let row = query(&sql)
            .bind(map_json(&c.env)?)
            .bind(map_json(&c.metadata)?)
            .bind(&c.cwd)
            .bind(&c.user)
            .bind(to_i64(c.idle_timeout_s)?)
            .bind(c.ttl_s.map(to_i64).transpose()?)
            .bind(c.at)
            .bind(&c.template)
            .bind(i64::from(c.release))
            .bind(i64::from(c.resources.vcpus))
            .bind(to_i64(c.resources.memory_mib)?)
            .bind(to_i64(c.resources.pids_max)?)
            .bind(c.resources.disk_mib.map(to_i64).transpose()?)
            .bind(&c.org)
            .fetch_optional(&mut tx)
            .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            return Ok(None);
        };
        let pool: String = row.try_get("claimed_from")?;
        let sandbox = row_to_sandbox(&row)?;
        let now = Utc::now();
        let succeeded = OperationState::Succeeded;
        let operation = operations::insert(&mut tx, op, succeeded, Some(&sandbox.id), now).await?;
        let created = NewEvent {
            kind: EventType::SandboxCreated,
            operation_id: Some(op.id.clone()),
            reason: Some(format!("served by warm pool {pool}")),
            destination: None,
            host: None,
            port: None,
            rule: None,
        };
        insert_event::<S>(&mut tx, &sandbox.id, &created, now).await?;
        let hit = query("UPDATE pools SET hits = hits + 1 WHERE name = $1").bind(&pool);
        if S::HIT_AFTER_CLAIM {
            tx.commit().await?;
            // After the commit, on its own: inside the claim's transaction the pool's row lock
            // would queue every concurrent claim of the pool behind this one's commit.
            if let Err(e) = hit.execute(&mut self.db()).await {
                tracing::warn!(pool = %pool, error = %e, "cannot count a pool hit");
            }
        } else {
            hit.execute(&mut tx).await?;
            tx.commit().await?;
        }
        Ok(Some((PoolMember { pool, sandbox }, operation)))
    }

    async fn record_pool_misses(&self, names: &[String]) -> Result<(), StoreError> {
        for name in names {
            query("UPDATE pools SET misses = misses + 1 WHERE name = $1")
                .bind(name)
                .execute(&mut self.db())
                .await?;
        }
        Ok(())
    }

    async fn retire_member(&self, id: &str, pool: &str) -> Result<bool, StoreError> {
        let res = query(
            "UPDATE sandboxes SET state = 'deleting', prior_state = state, \
             state_reason = 'retired from its warm pool', updated_at = $1 \
             WHERE id = $2 AND pool = $3 AND state IN ('creating', 'running', 'failed')",
        )
        .bind(Utc::now())
        .bind(id)
        .bind(pool)
        .execute(&mut self.db())
        .await?;
        Ok(res > 0)
    }
}
