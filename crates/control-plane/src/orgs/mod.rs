//! Orgs and their API keys: the admin token makes orgs and keys; a key acts as its org.
//! Keys are random secrets shown once and stored only as SHA-256 hashes (with a short prefix
//! kept in clear, to tell them apart in listings). See [`scope`] for how an org's view is
//! enforced, [`quotas`] for its limits, [`audit`] for the record of what callers did.

use chrono::Utc;
use cove_api_types::{
    ApiKey, ApiKeyList, CheckpointRetention, CreateApiKeyRequest, CreateOrgRequest, CreatedApiKey,
    Org, OrgList, Quotas, UpdateOrgRequest,
};
use cove_domain::{ids, InvalidInput};
use cove_store::StoreError;
use tracing::info;

use crate::auth::{hash_token, new_token};
use crate::{ControlPlane, ServiceError};

pub mod audit;
pub mod quotas;
pub mod scope;

pub use scope::{Actor, Caller};

/// Characters of a key's secret kept in clear (`cove_` + 8).
const PREFIX_LEN: usize = 13;

/// Refuses a caller other than the admin token (`forbidden`).
pub(crate) fn require_admin() -> Result<(), ServiceError> {
    if scope::require()?.has_admin_rights() {
        Ok(())
    } else {
        Err(ServiceError::Forbidden(
            "this needs the server's admin token".into(),
        ))
    }
}

fn org_not_found(id: &str) -> ServiceError {
    ServiceError::NotFound(format!("org {id} not found"))
}

/// Checks a checkpoint retention's limits (`invalid_argument` naming the field).
fn validate_retention(r: &CheckpointRetention) -> Result<(), ServiceError> {
    if r.max_per_sandbox
        .is_some_and(|n| !(1..=10_000).contains(&n))
    {
        return Err(InvalidInput::new(
            "checkpoint_retention.max_per_sandbox",
            "must be 1 to 10000",
        )
        .into());
    }
    if r.max_age_s
        .is_some_and(|s| !(60..=315_360_000).contains(&s))
    {
        return Err(InvalidInput::new(
            "checkpoint_retention.max_age_s",
            "must be 60 to 315360000 seconds",
        )
        .into());
    }
    Ok(())
}

/// Checks an org's quotas: the MiB limits are stored as signed 64-bit integers, so each is at
/// most `i64::MAX` (`invalid_argument` naming the field; 0 or absent keeps its meaning).
fn validate_quotas(q: &Quotas) -> Result<(), ServiceError> {
    let mib = [
        ("quotas.max_memory_mib", q.max_memory_mib),
        ("quotas.max_disk_mib", q.max_disk_mib),
        ("quotas.max_snapshot_mib", q.max_snapshot_mib),
    ];
    for (field, v) in mib {
        if v.is_some_and(|v| i64::try_from(v).is_err()) {
            return Err(InvalidInput::new(field, format!("must be at most {}", i64::MAX)).into());
        }
    }
    Ok(())
}

impl ControlPlane {
    /// Resolves a bearer token: the admin token acts in the default org, an API key in its
    /// own. Unknown or revoked: `unauthorized`.
    pub async fn authenticate(&self, token: &str) -> Result<Caller, ServiceError> {
        let hash = hash_token(token);
        if self.store().token_exists(&hash).await? {
            return Ok(Caller::admin());
        }
        match self.store().api_key_by_hash(&hash).await? {
            Some(k) if k.revoked_at.is_none() => Ok(Caller {
                org: k.org,
                actor: Actor::Key(k.id),
            }),
            Some(_) => Err(ServiceError::Unauthorized("API key revoked".into())),
            None => Err(ServiceError::Unauthorized("invalid token".into())),
        }
    }

    /// `POST /v1/orgs` (admin): a new org. A taken id is `already_exists`.
    pub async fn create_org(&self, req: CreateOrgRequest) -> Result<Org, ServiceError> {
        require_admin()?;
        if !ids::is_org_id(&req.id) {
            return Err(InvalidInput::new(
                "id",
                "must be 1 to 40 of a-z, 0-9 and -, starting with a letter",
            )
            .into());
        }
        validate_retention(&req.checkpoint_retention)?;
        validate_quotas(&req.quotas)?;
        let org = Org {
            id: req.id,
            quotas: req.quotas,
            disabled_features: req.disabled_features,
            checkpoint_retention: req.checkpoint_retention,
            created_at: Utc::now(),
            usage: None,
        };
        match self.store().insert_org(&org).await {
            Ok(()) => {}
            Err(StoreError::Conflict(_)) => {
                return Err(ServiceError::AlreadyExists(format!(
                    "org {} already exists",
                    org.id
                )))
            }
            Err(e) => return Err(e.into()),
        }
        info!(org = %org.id, "org created");
        self.store().get_org(&org.id).await.map_err(Into::into)
    }

    /// `GET /v1/orgs` (admin): every org.
    pub async fn list_orgs(&self) -> Result<OrgList, ServiceError> {
        require_admin()?;
        Ok(OrgList {
            orgs: self.store().list_orgs().await?,
        })
    }

    /// `GET /v1/orgs/{org}` with what it holds now (`usage`): the admin sees any org, a key
    /// only its own.
    pub async fn get_org(&self, id: &str) -> Result<Org, ServiceError> {
        let c = scope::require()?;
        if !c.has_admin_rights() && c.org != id {
            return Err(org_not_found(id));
        }
        match self.store().get_org(id).await {
            Ok(mut o) => {
                o.usage = Some(self.store().org_usage(id).await?);
                Ok(o)
            }
            Err(StoreError::NotFound) => Err(org_not_found(id)),
            Err(e) => Err(e.into()),
        }
    }

    /// `PUT /v1/orgs/{org}/quotas` (admin): replaces the org's quotas.
    pub async fn set_org_quotas(&self, id: &str, quotas: Quotas) -> Result<Org, ServiceError> {
        require_admin()?;
        validate_quotas(&quotas)?;
        if !self.store().set_org_quotas(id, &quotas).await? {
            return Err(org_not_found(id));
        }
        info!(org = %id, ?quotas, "org quotas set");
        self.get_org(id).await
    }

    /// `PATCH /v1/orgs/{org}` (admin): replaces each setting the request gives (quotas,
    /// disabled features, checkpoint retention) and keeps the others. Everything is checked
    /// before anything changes.
    ///
    /// # Errors
    /// `forbidden` (not the admin token), `not_found` (org), `invalid_argument`
    /// (`checkpoint_retention`, a MiB quota above `i64::MAX`).
    pub async fn update_org(&self, id: &str, req: UpdateOrgRequest) -> Result<Org, ServiceError> {
        require_admin()?;
        if let Some(r) = &req.checkpoint_retention {
            validate_retention(r)?;
        }
        if let Some(q) = &req.quotas {
            validate_quotas(q)?;
        }
        let org = self.get_org(id).await?;
        if let Some(q) = req.quotas {
            if !self.store().set_org_quotas(id, &q).await? {
                return Err(org_not_found(id));
            }
        }
        if req.disabled_features.is_some() || req.checkpoint_retention.is_some() {
            let disabled = req.disabled_features.unwrap_or(org.disabled_features);
            let retention = req.checkpoint_retention.unwrap_or(org.checkpoint_retention);
            if !self
                .store()
                .set_org_settings(id, &disabled, &retention)
                .await?
            {
                return Err(org_not_found(id));
            }
        }
        let org = self.get_org(id).await?;
        info!(org = %id, disabled_features = ?org.disabled_features,
            checkpoint_retention = ?org.checkpoint_retention, "org updated");
        Ok(org)
    }

    /// `POST /v1/orgs/{org}/keys` (admin): a new key; its secret is in this answer only.
    pub async fn create_api_key(
        &self,
        org: &str,
        req: CreateApiKeyRequest,
    ) -> Result<CreatedApiKey, ServiceError> {
        require_admin()?;
        if req.name.len() > 200 || req.name.chars().any(char::is_control) {
            return Err(InvalidInput::new("name", "must be at most 200 bytes, no controls").into());
        }
        self.get_org(org).await?;
        let secret = new_token();
        let key = ApiKey {
            id: ids::new_key_id(),
            org: org.to_string(),
            name: req.name,
            prefix: secret.chars().take(PREFIX_LEN).collect(),
            created_at: Utc::now(),
            revoked_at: None,
        };
        self.store()
            .insert_api_key(&key, &hash_token(&secret))
            .await?;
        info!(org = %org, key_id = %key.id, "api key created");
        Ok(CreatedApiKey { key, secret })
    }

    /// `GET /v1/orgs/{org}/keys` (admin): the org's keys, without secrets.
    pub async fn list_api_keys(&self, org: &str) -> Result<ApiKeyList, ServiceError> {
        require_admin()?;
        self.get_org(org).await?;
        Ok(ApiKeyList {
            keys: self.store().list_api_keys(org).await?,
        })
    }

    /// `DELETE /v1/orgs/{org}/keys/{key}` (admin): revokes a key; it answers `401` from then
    /// on. Revoking twice is fine.
    pub async fn revoke_api_key(&self, org: &str, key_id: &str) -> Result<ApiKey, ServiceError> {
        require_admin()?;
        self.get_org(org).await?;
        if !self.store().revoke_api_key(org, key_id, Utc::now()).await? {
            return Err(ServiceError::NotFound(format!("key {key_id} not found")));
        }
        info!(org = %org, key_id = %key_id, "api key revoked");
        self.store()
            .list_api_keys(org)
            .await?
            .into_iter()
            .find(|k| k.id == key_id)
            .ok_or_else(|| ServiceError::NotFound(format!("key {key_id} not found")))
    }
}
