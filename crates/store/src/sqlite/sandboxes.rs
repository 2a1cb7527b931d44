//! Sandboxes (SQLite).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{OnExpiry, Resources, Sandbox, SandboxState};
use sqlx::Row;

use super::SqliteStore;
use crate::error::map_unique;
use crate::{
    json_map, json_policy, json_secrets, map_json, parse_enum, policy_json, secrets_json,
    SandboxFilter, SandboxStore, StoreError,
};
use cove_api_types::EgressPolicy;

pub(super) fn row_to_sandbox(r: &sqlx::sqlite::SqliteRow) -> Result<Sandbox, StoreError> {
    Ok(Sandbox {
        id: r.try_get("id")?,
        org: r.try_get("org")?,
        template: r.try_get("template")?,
        release: r.try_get::<i64, _>("release")? as u32,
        release_digest: r.try_get("release_digest")?,
        state: parse_enum(&r.try_get::<String, _>("state")?, SandboxState::parse)?,
        state_reason: r.try_get("state_reason")?,
        runtime: r.try_get("runtime")?,
        resources: Resources {
            vcpus: r.try_get::<i64, _>("vcpus")? as u32,
            memory_mib: r.try_get::<i64, _>("memory_mib")? as u64,
            pids_max: r.try_get::<i64, _>("pids_max")? as u64,
            disk_mib: r.try_get::<Option<i64>, _>("disk_mib")?.map(|v| v as u64),
        },
        env: json_map(&r.try_get::<String, _>("env")?)?,
        metadata: json_map(&r.try_get::<String, _>("metadata")?)?,
        cwd: r.try_get("cwd")?,
        user: r.try_get("user_name")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        idle_timeout_s: r.try_get::<i64, _>("idle_timeout_s")? as u64,
        ttl_s: r.try_get::<Option<i64>, _>("ttl_s")?.map(|v| v as u64),
        last_activity_at: r.try_get("last_activity_at")?,
        memory_restored: r.try_get::<Option<bool>, _>("memory_restored")?,
        network: json_policy(&r.try_get::<String, _>("network")?)?,
        secrets: json_secrets(&r.try_get::<String, _>("secrets")?)?,
        public: r.try_get::<bool, _>("public")?,
        volumes: crate::volumes::json_mounts(&r.try_get::<String, _>("volumes")?)?,
        expires_at: r.try_get("expires_at")?,
        on_expiry: parse_enum(&r.try_get::<String, _>("on_expiry")?, OnExpiry::parse)?,
    })
}

#[async_trait]
impl SandboxStore for SqliteStore {
    async fn insert_sandbox(&self, s: &Sandbox) -> Result<(), StoreError> {
        insert(&self.pool, s, None).await
    }

    async fn get_sandbox(&self, id: &str) -> Result<Sandbox, StoreError> {
        let row = sqlx::query("SELECT * FROM sandboxes WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        row_to_sandbox(&row)
    }

    async fn transition_sandbox(
        &self,
        id: &str,
        from: &[SandboxState],
        to: SandboxState,
        reason: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut changed = false;
        for f in from {
            let res = sqlx::query(
                "UPDATE sandboxes SET state = ?, state_reason = ?, updated_at = ? \
                 WHERE id = ? AND state = ?",
            )
            .bind(to.as_str())
            .bind(reason)
            .bind(Utc::now())
            .bind(id)
            .bind(f.as_str())
            .execute(&self.pool)
            .await?;
            if res.rows_affected() > 0 {
                changed = true;
                break;
            }
        }
        Ok(changed)
    }

    async fn list_sandboxes(&self, f: &SandboxFilter) -> Result<Vec<Sandbox>, StoreError> {
        let mut sql = String::from("SELECT * FROM sandboxes WHERE pool IS NULL");
        if !f.include_deleted && f.state != Some(SandboxState::Deleted) {
            sql.push_str(" AND state != 'deleted'");
        }
        if f.org.is_some() {
            sql.push_str(" AND org = ?");
        }
        if f.state.is_some() {
            sql.push_str(" AND state = ?");
        }
        if f.template.is_some() {
            sql.push_str(" AND template = ?");
        }
        for _ in &f.metadata {
            sql.push_str(
                " AND EXISTS (SELECT 1 FROM json_each(sandboxes.metadata) \
                 WHERE json_each.key = ? AND json_each.value = ?)",
            );
        }
        if f.after.is_some() {
            sql.push_str(" AND (created_at < ? OR (created_at = ? AND id < ?))");
        }
        sql.push_str(" ORDER BY created_at DESC, id DESC LIMIT ?");
        let mut q = sqlx::query(&sql);
        if let Some(o) = &f.org {
            q = q.bind(o);
        }
        if let Some(s) = f.state {
            q = q.bind(s.as_str());
        }
        if let Some(t) = &f.template {
            q = q.bind(t);
        }
        for (key, value) in &f.metadata {
            q = q.bind(key).bind(value);
        }
        if let Some((at, id)) = &f.after {
            q = q.bind(at).bind(at).bind(id);
        }
        let rows = q.bind(f.limit).fetch_all(&self.pool).await?;
        rows.iter().map(row_to_sandbox).collect()
    }

    async fn sandboxes_in(&self, states: &[SandboxState]) -> Result<Vec<Sandbox>, StoreError> {
        let mut out = Vec::new();
        for s in states {
            let rows = sqlx::query("SELECT * FROM sandboxes WHERE state = ?")
                .bind(s.as_str())
                .fetch_all(&self.pool)
                .await?;
            for r in &rows {
                out.push(row_to_sandbox(r)?);
            }
        }
        Ok(out)
    }

    async fn set_sandbox_network(
        &self,
        id: &str,
        policy: &EgressPolicy,
    ) -> Result<bool, StoreError> {
        let res = sqlx::query("UPDATE sandboxes SET network = ? WHERE id = ?")
            .bind(policy_json(policy)?)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn set_sandbox_public(&self, id: &str, public: bool) -> Result<bool, StoreError> {
        let res = sqlx::query("UPDATE sandboxes SET public = ? WHERE id = ?")
            .bind(public)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn set_snapshot_bytes(&self, id: &str, bytes: u64) -> Result<bool, StoreError> {
        let bytes = i64::try_from(bytes)
            .map_err(|_| StoreError::Corrupt(format!("{bytes} does not fit a row")))?;
        let res = sqlx::query("UPDATE sandboxes SET snapshot_bytes = ? WHERE id = ?")
            .bind(bytes)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn set_sealed_secrets(&self, id: &str, sealed: &str) -> Result<bool, StoreError> {
        let res = sqlx::query("UPDATE sandboxes SET secrets_sealed = ? WHERE id = ?")
            .bind(sealed)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn set_sandbox_secrets(
        &self,
        id: &str,
        public: &std::collections::BTreeMap<String, cove_api_types::SandboxSecret>,
        sealed: &str,
    ) -> Result<bool, StoreError> {
        let res = sqlx::query("UPDATE sandboxes SET secrets = ?, secrets_sealed = ? WHERE id = ?")
            .bind(secrets_json(public)?)
            .bind(sealed)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn set_sandbox_volumes(
        &self,
        id: &str,
        volumes: &[cove_api_types::VolumeMount],
    ) -> Result<bool, StoreError> {
        let res = sqlx::query("UPDATE sandboxes SET volumes = ? WHERE id = ?")
            .bind(crate::volumes::mounts_json(volumes)?)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn sealed_secrets(&self, id: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT secrets_sealed FROM sandboxes WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        Ok(row.try_get("secrets_sealed")?)
    }

    async fn set_sandbox_expiry(
        &self,
        id: &str,
        expires_at: Option<DateTime<Utc>>,
        on_expiry: OnExpiry,
    ) -> Result<bool, StoreError> {
        let res = sqlx::query(
            "UPDATE sandboxes SET expires_at = ?, on_expiry = ? \
             WHERE id = ? AND state NOT IN ('deleting', 'deleted')",
        )
        .bind(expires_at)
        .bind(on_expiry.as_str())
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn extend_sandbox_expiry(
        &self,
        id: &str,
        at: DateTime<Utc>,
        on_expiry: OnExpiry,
    ) -> Result<bool, StoreError> {
        let res = sqlx::query(
            "UPDATE sandboxes SET expires_at = ?, on_expiry = ? \
             WHERE id = ? AND state NOT IN ('deleting', 'deleted') \
             AND (expires_at IS NULL OR expires_at < ?)",
        )
        .bind(at)
        .bind(on_expiry.as_str())
        .bind(id)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn expired_sandboxes(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Sandbox>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM sandboxes WHERE expires_at IS NOT NULL AND expires_at <= ? \
             AND state NOT IN ('deleting', 'deleted') ORDER BY expires_at, id LIMIT ?",
        )
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(row_to_sandbox).collect()
    }

    async fn claim_expiry(&self, id: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let res = sqlx::query(
            "UPDATE sandboxes SET expires_at = NULL \
             WHERE id = ? AND expires_at IS NOT NULL AND expires_at <= ?",
        )
        .bind(id)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() == 1)
    }
}

/// Inserts `s`, as a member of `pool` when given.
pub(super) async fn insert(
    db: &sqlx::SqlitePool,
    s: &Sandbox,
    pool: Option<&str>,
) -> Result<(), StoreError> {
    let env = map_json(&s.env)?;
    let metadata = map_json(&s.metadata)?;
    sqlx::query(
        "INSERT INTO sandboxes (id, template, release, state, state_reason, runtime, vcpus, \
         memory_mib, pids_max, env, metadata, cwd, user_name, created_at, updated_at, \
         idle_timeout_s, ttl_s, last_activity_at, memory_restored, disk_mib, pool, \
         release_digest, network, secrets, public, org, volumes, expires_at, on_expiry) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&s.id)
    .bind(&s.template)
    .bind(s.release)
    .bind(s.state.as_str())
    .bind(&s.state_reason)
    .bind(&s.runtime)
    .bind(s.resources.vcpus)
    .bind(s.resources.memory_mib as i64)
    .bind(s.resources.pids_max as i64)
    .bind(env)
    .bind(metadata)
    .bind(&s.cwd)
    .bind(&s.user)
    .bind(s.created_at)
    .bind(s.updated_at)
    .bind(s.idle_timeout_s as i64)
    .bind(s.ttl_s.map(|v| v as i64))
    .bind(s.last_activity_at)
    .bind(s.memory_restored)
    .bind(s.resources.disk_mib.map(|v| v as i64))
    .bind(pool)
    .bind(&s.release_digest)
    .bind(policy_json(&s.network)?)
    .bind(secrets_json(&s.secrets)?)
    .bind(s.public)
    .bind(&s.org)
    .bind(crate::volumes::mounts_json(&s.volumes)?)
    .bind(s.expires_at)
    .bind(s.on_expiry.as_str())
    .execute(db)
    .await
    .map_err(map_unique)?;
    Ok(())
}
