//! Orgs, API key hashes and org usage (both backends).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{ApiKey, CheckpointRetention, Feature, Org, Quotas};

use super::{query, to_i64, Backend, SqlRow};
use crate::error::map_unique;
use crate::orgs::{decode_features, encode_features};
use crate::{OrgStore, OrgUsage, StoreError};

fn row_to_org(r: &impl SqlRow) -> Result<Org, StoreError> {
    Ok(Org {
        id: r.try_get("id")?,
        quotas: Quotas {
            max_running: r.opt_uint("max_running")?,
            max_vcpus: r.opt_uint("max_vcpus")?,
            max_memory_mib: r.opt_uint("max_memory_mib")?,
            max_creates_per_s: r.opt_uint("max_creates_per_s")?,
            max_sandboxes: r.opt_uint("max_sandboxes")?,
            max_disk_mib: r.opt_uint("max_disk_mib")?,
            max_snapshot_mib: r.opt_uint("max_snapshot_mib")?,
        },
        disabled_features: decode_features(&r.try_get::<String, _>("disabled_features")?)?,
        checkpoint_retention: CheckpointRetention {
            max_per_sandbox: r.opt_uint("checkpoint_max_per_sandbox")?,
            max_age_s: r.opt_uint("checkpoint_max_age_s")?,
        },
        created_at: r.try_get("created_at")?,
        usage: None,
    })
}

fn row_to_key(r: &impl SqlRow) -> Result<ApiKey, StoreError> {
    Ok(ApiKey {
        id: r.try_get("id")?,
        org: r.try_get("org")?,
        name: r.try_get("name")?,
        prefix: r.try_get("prefix")?,
        created_at: r.try_get("created_at")?,
        revoked_at: r.try_get("revoked_at")?,
    })
}

#[async_trait]
impl<S: Backend> OrgStore for S {
    async fn insert_org(&self, org: &Org) -> Result<(), StoreError> {
        query(
            "INSERT INTO orgs (id, created_at, max_running, max_vcpus, max_memory_mib, \
             max_creates_per_s, disabled_features, checkpoint_max_per_sandbox, \
             checkpoint_max_age_s, max_sandboxes, max_disk_mib, max_snapshot_mib) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(&org.id)
        .bind(org.created_at)
        .bind(org.quotas.max_running.map(i64::from))
        .bind(org.quotas.max_vcpus.map(i64::from))
        .bind(org.quotas.max_memory_mib.map(to_i64).transpose()?)
        .bind(org.quotas.max_creates_per_s.map(i64::from))
        .bind(encode_features(&org.disabled_features))
        .bind(org.checkpoint_retention.max_per_sandbox.map(i64::from))
        .bind(org.checkpoint_retention.max_age_s.map(to_i64).transpose()?)
        .bind(org.quotas.max_sandboxes.map(i64::from))
        .bind(org.quotas.max_disk_mib.map(to_i64).transpose()?)
        .bind(org.quotas.max_snapshot_mib.map(to_i64).transpose()?)
        .execute(&mut self.db())
        .await
        .map_err(map_unique)?;
        Ok(())
    }

    async fn get_org(&self, id: &str) -> Result<Org, StoreError> {
        let row = query("SELECT * FROM orgs WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut self.db())
            .await?
            .ok_or(StoreError::NotFound)?;
        row_to_org(&row)
    }

    async fn list_orgs(&self) -> Result<Vec<Org>, StoreError> {
        let rows = query("SELECT * FROM orgs ORDER BY id")
            .fetch_all(&mut self.db())
            .await?;
        rows.iter().map(row_to_org).collect()
    }

    async fn set_org_quotas(&self, id: &str, q: &Quotas) -> Result<bool, StoreError> {
        let done = query(
            "UPDATE orgs SET max_running = $1, max_vcpus = $2, max_memory_mib = $3, \
             max_creates_per_s = $4, max_sandboxes = $5, max_disk_mib = $6, max_snapshot_mib = $7 \
             WHERE id = $8",
        )
        .bind(q.max_running.map(i64::from))
        .bind(q.max_vcpus.map(i64::from))
        .bind(q.max_memory_mib.map(to_i64).transpose()?)
        .bind(q.max_creates_per_s.map(i64::from))
        .bind(q.max_sandboxes.map(i64::from))
        .bind(q.max_disk_mib.map(to_i64).transpose()?)
        .bind(q.max_snapshot_mib.map(to_i64).transpose()?)
        .bind(id)
        .execute(&mut self.db())
        .await?;
        Ok(done > 0)
    }

    async fn set_org_settings(
        &self,
        id: &str,
        disabled_features: &[Feature],
        retention: &CheckpointRetention,
    ) -> Result<bool, StoreError> {
        let done = query(
            "UPDATE orgs SET disabled_features = $1, checkpoint_max_per_sandbox = $2, \
             checkpoint_max_age_s = $3 WHERE id = $4",
        )
        .bind(encode_features(disabled_features))
        .bind(retention.max_per_sandbox.map(i64::from))
        .bind(retention.max_age_s.map(to_i64).transpose()?)
        .bind(id)
        .execute(&mut self.db())
        .await?;
        Ok(done > 0)
    }

    async fn insert_api_key(&self, key: &ApiKey, hash: &str) -> Result<(), StoreError> {
        query(
            "INSERT INTO api_keys (id, org, name, prefix, key_hash, created_at, revoked_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&key.id)
        .bind(&key.org)
        .bind(&key.name)
        .bind(&key.prefix)
        .bind(hash)
        .bind(key.created_at)
        .bind(key.revoked_at)
        .execute(&mut self.db())
        .await
        .map_err(map_unique)?;
        Ok(())
    }

    async fn api_key_by_hash(&self, hash: &str) -> Result<Option<ApiKey>, StoreError> {
        let row = query("SELECT * FROM api_keys WHERE key_hash = $1")
            .bind(hash)
            .fetch_optional(&mut self.db())
            .await?;
        row.as_ref().map(row_to_key).transpose()
    }

    async fn list_api_keys(&self, org: &str) -> Result<Vec<ApiKey>, StoreError> {
        let rows = query("SELECT * FROM api_keys WHERE org = $1 ORDER BY created_at, id")
            .bind(org)
            .fetch_all(&mut self.db())
            .await?;
        rows.iter().map(row_to_key).collect()
    }

    async fn revoke_api_key(
        &self,
        org: &str,
        id: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let done = query(
            "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE org = $2 AND id = $3",
        )
        .bind(at)
        .bind(org)
        .bind(id)
        .execute(&mut self.db())
        .await?;
        Ok(done > 0)
    }

    async fn org_usage(&self, org: &str) -> Result<OrgUsage, StoreError> {
        // Unclaimed pool members (`pool` set) count like any sandbox of the org; `alive`:
        // every state but suspended (and deleted, not read). A failed sandbox may hold node
        // resources until it is deleted, so it counts as alive.
        let row = query(
            "SELECT CAST(COALESCE(SUM(alive), 0) AS BIGINT) AS running, \
             CAST(COALESCE(SUM(alive * vcpus), 0) AS BIGINT) AS vcpus, \
             CAST(COALESCE(SUM(alive * memory_mib), 0) AS BIGINT) AS memory_mib, \
             COUNT(*) AS sandboxes, \
             CAST(COALESCE(SUM(COALESCE(disk_mib, 0)), 0) AS BIGINT) \
             + (SELECT CAST(COALESCE(SUM(size_mib), 0) AS BIGINT) FROM volumes WHERE org = $1) \
             AS disk_mib, \
             CAST(COALESCE(SUM(snapshot_bytes), 0) AS BIGINT) \
             + (SELECT CAST(COALESCE(SUM(file_bytes), 0) AS BIGINT) FROM checkpoints \
             WHERE org = $1) AS snapshot_bytes \
             FROM (SELECT vcpus, memory_mib, disk_mib, snapshot_bytes, \
             CASE WHEN state = 'suspended' THEN 0 ELSE 1 END AS alive \
             FROM sandboxes WHERE org = $1 AND state <> 'deleted') AS s",
        )
        .bind(org)
        .fetch_one(&mut self.db())
        .await?;
        Ok(OrgUsage {
            running: row.uint("running")?,
            vcpus: row.uint("vcpus")?,
            memory_mib: row.uint("memory_mib")?,
            sandboxes: row.uint("sandboxes")?,
            disk_mib: row.uint("disk_mib")?,
            snapshot_mib: crate::orgs::mib_of_bytes(row.try_get("snapshot_bytes")?),
        })
    }
}
