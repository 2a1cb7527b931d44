//! Orgs, API key hashes and org usage (SQLite).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{ApiKey, CheckpointRetention, Feature, Org, Quotas};
use sqlx::Row;

use super::SqliteStore;
use crate::error::map_unique;
use crate::orgs::{decode_features, encode_features};
use crate::{OrgStore, OrgUsage, StoreError};

fn row_to_org(r: &sqlx::sqlite::SqliteRow) -> Result<Org, StoreError> {
    Ok(Org {
        id: r.try_get("id")?,
        quotas: Quotas {
            max_running: r
                .try_get::<Option<i64>, _>("max_running")?
                .map(|v| v as u32),
            max_vcpus: r.try_get::<Option<i64>, _>("max_vcpus")?.map(|v| v as u32),
            max_memory_mib: r
                .try_get::<Option<i64>, _>("max_memory_mib")?
                .map(|v| v as u64),
            max_creates_per_s: r
                .try_get::<Option<i64>, _>("max_creates_per_s")?
                .map(|v| v as u32),
            max_sandboxes: r
                .try_get::<Option<i64>, _>("max_sandboxes")?
                .map(|v| v as u32),
            max_disk_mib: r
                .try_get::<Option<i64>, _>("max_disk_mib")?
                .map(|v| v as u64),
            max_snapshot_mib: r
                .try_get::<Option<i64>, _>("max_snapshot_mib")?
                .map(|v| v as u64),
        },
        disabled_features: decode_features(&r.try_get::<String, _>("disabled_features")?)?,
        checkpoint_retention: CheckpointRetention {
            max_per_sandbox: r
                .try_get::<Option<i64>, _>("checkpoint_max_per_sandbox")?
                .map(|v| v as u32),
            max_age_s: r
                .try_get::<Option<i64>, _>("checkpoint_max_age_s")?
                .map(|v| v as u64),
        },
        created_at: r.try_get("created_at")?,
        usage: None,
    })
}

fn row_to_key(r: &sqlx::sqlite::SqliteRow) -> Result<ApiKey, StoreError> {
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
impl OrgStore for SqliteStore {
    async fn insert_org(&self, org: &Org) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO orgs (id, created_at, max_running, max_vcpus, max_memory_mib, \
             max_creates_per_s, disabled_features, checkpoint_max_per_sandbox, \
             checkpoint_max_age_s, max_sandboxes, max_disk_mib, max_snapshot_mib) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&org.id)
        .bind(org.created_at)
        .bind(org.quotas.max_running)
        .bind(org.quotas.max_vcpus)
        .bind(org.quotas.max_memory_mib.map(|v| v as i64))
        .bind(org.quotas.max_creates_per_s)
        .bind(encode_features(&org.disabled_features))
        .bind(org.checkpoint_retention.max_per_sandbox)
        .bind(org.checkpoint_retention.max_age_s.map(|v| v as i64))
        .bind(org.quotas.max_sandboxes.map(i64::from))
        .bind(org.quotas.max_disk_mib.map(|v| v as i64))
        .bind(org.quotas.max_snapshot_mib.map(|v| v as i64))
        .execute(&self.pool)
        .await
        .map_err(map_unique)?;
        Ok(())
    }

    async fn get_org(&self, id: &str) -> Result<Org, StoreError> {
        let row = sqlx::query("SELECT * FROM orgs WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        row_to_org(&row)
    }

    async fn list_orgs(&self) -> Result<Vec<Org>, StoreError> {
        let rows = sqlx::query("SELECT * FROM orgs ORDER BY id")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row_to_org).collect()
    }

    async fn set_org_quotas(&self, id: &str, q: &Quotas) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE orgs SET max_running = ?, max_vcpus = ?, max_memory_mib = ?, \
             max_creates_per_s = ?, max_sandboxes = ?, max_disk_mib = ?, max_snapshot_mib = ? \
             WHERE id = ?",
        )
        .bind(q.max_running)
        .bind(q.max_vcpus)
        .bind(q.max_memory_mib.map(|v| v as i64))
        .bind(q.max_creates_per_s)
        .bind(q.max_sandboxes.map(i64::from))
        .bind(q.max_disk_mib.map(|v| v as i64))
        .bind(q.max_snapshot_mib.map(|v| v as i64))
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn set_org_settings(
        &self,
        id: &str,
        disabled_features: &[Feature],
        retention: &CheckpointRetention,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE orgs SET disabled_features = ?, checkpoint_max_per_sandbox = ?, \
             checkpoint_max_age_s = ? WHERE id = ?",
        )
        .bind(encode_features(disabled_features))
        .bind(retention.max_per_sandbox)
        .bind(retention.max_age_s.map(|v| v as i64))
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_api_key(&self, key: &ApiKey, hash: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO api_keys (id, org, name, prefix, key_hash, created_at, revoked_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&key.id)
        .bind(&key.org)
        .bind(&key.name)
        .bind(&key.prefix)
        .bind(hash)
        .bind(key.created_at)
        .bind(key.revoked_at)
        .execute(&self.pool)
        .await
        .map_err(map_unique)?;
        Ok(())
    }

    async fn api_key_by_hash(&self, hash: &str) -> Result<Option<ApiKey>, StoreError> {
        let row = sqlx::query("SELECT * FROM api_keys WHERE key_hash = ?")
            .bind(hash)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(row_to_key).transpose()
    }

    async fn list_api_keys(&self, org: &str) -> Result<Vec<ApiKey>, StoreError> {
        let rows = sqlx::query("SELECT * FROM api_keys WHERE org = ? ORDER BY created_at, id")
            .bind(org)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row_to_key).collect()
    }

    async fn revoke_api_key(
        &self,
        org: &str,
        id: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE org = ? AND id = ?",
        )
        .bind(at)
        .bind(org)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn org_usage(&self, org: &str) -> Result<OrgUsage, StoreError> {
        // Unclaimed pool members (`pool` set) count like any sandbox of the org; `alive`:
        // every state but suspended (and deleted, not read). A failed sandbox may hold node
        // resources until it is deleted, so it counts as alive.
        let (running, vcpus, memory_mib, sandboxes, disk_mib, snapshot_bytes): (
            i64,
            i64,
            i64,
            i64,
            i64,
            i64,
        ) = sqlx::query_as(
            "SELECT COALESCE(SUM(alive), 0), COALESCE(SUM(alive * vcpus), 0), \
             COALESCE(SUM(alive * memory_mib), 0), COUNT(*), \
             COALESCE(SUM(COALESCE(disk_mib, 0)), 0) \
             + (SELECT COALESCE(SUM(size_mib), 0) FROM volumes WHERE org = ?1), \
             COALESCE(SUM(snapshot_bytes), 0) \
             + (SELECT COALESCE(SUM(file_bytes), 0) FROM checkpoints WHERE org = ?1) \
             FROM (SELECT vcpus, memory_mib, disk_mib, snapshot_bytes, \
             CASE WHEN state = 'suspended' THEN 0 ELSE 1 END AS alive \
             FROM sandboxes WHERE org = ?1 AND state <> 'deleted') AS s",
        )
        .bind(org)
        .fetch_one(&self.pool)
        .await?;
        Ok(OrgUsage {
            running: running as u64,
            vcpus: vcpus as u64,
            memory_mib: memory_mib as u64,
            sandboxes: sandboxes as u64,
            disk_mib: disk_mib as u64,
            snapshot_mib: crate::orgs::mib_of_bytes(snapshot_bytes),
        })
    }
}
