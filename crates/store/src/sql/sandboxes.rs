//! Sandboxes (both backends).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{OnExpiry, Sandbox, SandboxState};

use super::{json_array, query, to_i64, Args, Backend, Conn, SqlRow};
use crate::error::map_unique;
use crate::{
    json_map, json_policy, json_secrets, map_json, parse_enum, policy_json, secrets_json,
    SandboxFilter, SandboxStore, StoreError,
};
use cove_api_types::EgressPolicy;

/// Wire strings of `states` as a JSON array, for [`Backend::in_json_array`].
pub(super) fn state_strings(states: &[SandboxState]) -> Result<String, StoreError> {
    let states: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
    json_array(&states)
}

pub(super) fn row_to_sandbox(r: &impl SqlRow) -> Result<Sandbox, StoreError> {
    Ok(Sandbox {
        id: r.try_get("id")?,
        org: r.try_get("org")?,
        template: r.try_get("template")?,
        release: r.uint("release")?,
        release_digest: r.try_get("release_digest")?,
        state: parse_enum(&r.try_get::<String, _>("state")?, SandboxState::parse)?,
        state_reason: r.try_get("state_reason")?,
        runtime: r.try_get("runtime")?,
        resources: r.resources()?,
        env: json_map(&r.try_get::<String, _>("env")?)?,
        metadata: json_map(&r.try_get::<String, _>("metadata")?)?,
        cwd: r.try_get("cwd")?,
        user: r.try_get("user_name")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        idle_timeout_s: r.uint("idle_timeout_s")?,
        ttl_s: r.opt_uint("ttl_s")?,
        last_activity_at: r.try_get("last_activity_at")?,
        memory_restored: r.try_get("memory_restored")?,
        network: json_policy(&r.try_get::<String, _>("network")?)?,
        secrets: json_secrets(&r.try_get::<String, _>("secrets")?)?,
        public: r.try_get::<bool, _>("public")?,
        volumes: crate::volumes::json_mounts(&r.try_get::<String, _>("volumes")?)?,
        expires_at: r.try_get("expires_at")?,
        on_expiry: parse_enum(&r.try_get::<String, _>("on_expiry")?, OnExpiry::parse)?,
    })
}

#[async_trait]
impl<S: Backend> SandboxStore for S {
    async fn insert_sandbox(&self, s: &Sandbox) -> Result<(), StoreError> {
        insert(&mut self.db(), s, None).await
    }

    async fn get_sandbox(&self, id: &str) -> Result<Sandbox, StoreError> {
        let row = query("SELECT * FROM sandboxes WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut self.db())
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
        let sql = format!(
            "UPDATE sandboxes SET state = $1, state_reason = $2, updated_at = $3 \
             WHERE id = $4 AND state IN {}",
            S::in_json_array(5)
        );
        let res = query(&sql)
            .bind(to.as_str())
            .bind(reason)
            .bind(Utc::now())
            .bind(id)
            .bind(state_strings(from)?)
            .execute(&mut self.db())
            .await?;
        Ok(res > 0)
    }

    async fn list_sandboxes(&self, f: &SandboxFilter) -> Result<Vec<Sandbox>, StoreError> {
        let mut sql = String::from("SELECT * FROM sandboxes WHERE pool IS NULL");
        let mut args = Args::default();
        if !f.include_deleted && f.state != Some(SandboxState::Deleted) {
            sql.push_str(" AND state <> 'deleted'");
        }
        if let Some(o) = &f.org {
            sql.push_str(&format!(" AND org = ${}", args.add(o.as_str())));
        }
        if let Some(s) = f.state {
            sql.push_str(&format!(" AND state = ${}", args.add(s.as_str())));
        }
        if let Some(t) = &f.template {
            sql.push_str(&format!(" AND template = ${}", args.add(t.as_str())));
        }
        for (key, value) in &f.metadata {
            let (key, value) = (args.add(key.as_str()), args.add(value.as_str()));
            sql.push_str(&format!(" AND {}", S::json_key_is("metadata", key, value)));
        }
        if let Some((at, id)) = &f.after {
            let (at, id) = (args.add(*at), args.add(id.as_str()));
            sql.push_str(&format!(" AND (created_at, id) < (${at}, ${id})"));
        }
        let limit = args.add(i64::from(f.limit));
        sql.push_str(&format!(
            " ORDER BY created_at DESC, id DESC LIMIT ${limit}"
        ));
        let rows = args.query(&sql).fetch_all(&mut self.db()).await?;
        rows.iter().map(row_to_sandbox).collect()
    }

    async fn sandboxes_in(&self, states: &[SandboxState]) -> Result<Vec<Sandbox>, StoreError> {
        let sql = format!(
            "SELECT * FROM sandboxes WHERE state IN {}",
            S::in_json_array(1)
        );
        let rows = query(&sql)
            .bind(state_strings(states)?)
            .fetch_all(&mut self.db())
            .await?;
        rows.iter().map(row_to_sandbox).collect()
    }

    async fn set_sandbox_network(
        &self,
        id: &str,
        policy: &EgressPolicy,
    ) -> Result<bool, StoreError> {
        let res = query("UPDATE sandboxes SET network = $1 WHERE id = $2")
            .bind(policy_json(policy)?)
            .bind(id)
            .execute(&mut self.db())
            .await?;
        Ok(res > 0)
    }

    async fn set_sandbox_public(&self, id: &str, public: bool) -> Result<bool, StoreError> {
        let res = query("UPDATE sandboxes SET public = $1 WHERE id = $2")
            .bind(public)
            .bind(id)
            .execute(&mut self.db())
            .await?;
        Ok(res > 0)
    }

    async fn set_snapshot_bytes(&self, id: &str, bytes: u64) -> Result<bool, StoreError> {
        let bytes = i64::try_from(bytes)
            .map_err(|_| StoreError::Corrupt(format!("{bytes} does not fit a row")))?;
        let res = query("UPDATE sandboxes SET snapshot_bytes = $1 WHERE id = $2")
            .bind(bytes)
            .bind(id)
            .execute(&mut self.db())
            .await?;
        Ok(res > 0)
    }

    async fn set_sealed_secrets(&self, id: &str, sealed: &str) -> Result<bool, StoreError> {
        let res = query("UPDATE sandboxes SET secrets_sealed = $1 WHERE id = $2")
            .bind(sealed)
            .bind(id)
            .execute(&mut self.db())
            .await?;
        Ok(res > 0)
    }

    async fn set_sandbox_secrets(
        &self,
        id: &str,
        public: &std::collections::BTreeMap<String, cove_api_types::SandboxSecret>,
        sealed: &str,
    ) -> Result<bool, StoreError> {
        let res = query("UPDATE sandboxes SET secrets = $1, secrets_sealed = $2 WHERE id = $3")
            .bind(secrets_json(public)?)
            .bind(sealed)
            .bind(id)
            .execute(&mut self.db())
            .await?;
        Ok(res > 0)
    }

    async fn set_sandbox_volumes(
        &self,
        id: &str,
        volumes: &[cove_api_types::VolumeMount],
    ) -> Result<bool, StoreError> {
        let res = query("UPDATE sandboxes SET volumes = $1 WHERE id = $2")
            .bind(crate::volumes::mounts_json(volumes)?)
            .bind(id)
            .execute(&mut self.db())
            .await?;
        Ok(res > 0)
    }

    async fn sealed_secrets(&self, id: &str) -> Result<Option<String>, StoreError> {
        let row = query("SELECT secrets_sealed FROM sandboxes WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut self.db())
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
        let res = query(
            "UPDATE sandboxes SET expires_at = $1, on_expiry = $2 \
             WHERE id = $3 AND state NOT IN ('deleting', 'deleted')",
        )
        .bind(expires_at)
        .bind(on_expiry.as_str())
        .bind(id)
        .execute(&mut self.db())
        .await?;
        Ok(res > 0)
    }

    async fn extend_sandbox_expiry(
        &self,
        id: &str,
        at: DateTime<Utc>,
        on_expiry: OnExpiry,
    ) -> Result<bool, StoreError> {
        let res = query(
            "UPDATE sandboxes SET expires_at = $1, on_expiry = $2 \
             WHERE id = $3 AND state NOT IN ('deleting', 'deleted') \
             AND (expires_at IS NULL OR expires_at < $4)",
        )
        .bind(at)
        .bind(on_expiry.as_str())
        .bind(id)
        .bind(at)
        .execute(&mut self.db())
        .await?;
        Ok(res > 0)
    }

    async fn expired_sandboxes(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Sandbox>, StoreError> {
        let rows = query(
            "SELECT * FROM sandboxes WHERE expires_at IS NOT NULL AND expires_at <= $1 \
             AND state NOT IN ('deleting', 'deleted') ORDER BY expires_at, id LIMIT $2",
        )
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&mut self.db())
        .await?;
        rows.iter().map(row_to_sandbox).collect()
    }

    async fn claim_expiry(&self, id: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let res = query(
            "UPDATE sandboxes SET expires_at = NULL \
             WHERE id = $1 AND expires_at IS NOT NULL AND expires_at <= $2",
        )
        .bind(id)
        .bind(now)
        .execute(&mut self.db())
        .await?;
        Ok(res == 1)
    }
}

/// Inserts `s`, as a member of `pool` when given.
pub(super) async fn insert<C: Conn + ?Sized>(
    db: &mut C,
    s: &Sandbox,
    pool: Option<&str>,
) -> Result<(), StoreError> {
    query(
        "INSERT INTO sandboxes (id, template, release, state, state_reason, runtime, vcpus, \
         memory_mib, pids_max, env, metadata, cwd, user_name, created_at, updated_at, \
         idle_timeout_s, ttl_s, last_activity_at, memory_restored, disk_mib, pool, \
         release_digest, network, secrets, public, org, volumes, expires_at, on_expiry) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
         $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29)",
    )
    .bind(&s.id)
    .bind(&s.template)
    .bind(i64::from(s.release))
    .bind(s.state.as_str())
    .bind(&s.state_reason)
    .bind(&s.runtime)
    .bind(i64::from(s.resources.vcpus))
    .bind(to_i64(s.resources.memory_mib)?)
    .bind(to_i64(s.resources.pids_max)?)
    .bind(map_json(&s.env)?)
    .bind(map_json(&s.metadata)?)
    .bind(&s.cwd)
    .bind(&s.user)
    .bind(s.created_at)
    .bind(s.updated_at)
    .bind(to_i64(s.idle_timeout_s)?)
    .bind(s.ttl_s.map(to_i64).transpose()?)
    .bind(s.last_activity_at)
    .bind(s.memory_restored)
    .bind(s.resources.disk_mib.map(to_i64).transpose()?)
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
