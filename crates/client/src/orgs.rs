//! Orgs, their API keys and quotas (`/v1/orgs`, admin token), and the audit log (`/v1/audit`).

use cove_api_types::{
    ApiKey, ApiKeyList, AuditPage, CreateApiKeyRequest, CreateOrgRequest, CreatedApiKey, Org,
    OrgList, Quotas, UpdateOrgRequest,
};
use reqwest::Method;

use crate::{Client, Result};

impl Client {
    /// `POST /v1/orgs`: a new org with `quotas`.
    pub async fn create_org(&self, id: &str, quotas: Quotas) -> Result<Org> {
        let body = CreateOrgRequest {
            id: id.to_string(),
            quotas,
            ..CreateOrgRequest::default()
        };
        let url = self.url(&["v1", "orgs"]);
        self.json(self.request(Method::POST, url).json(&body)).await
    }

    /// `POST /v1/orgs` with every setting of `req` (quotas, disabled features, checkpoint
    /// retention).
    pub async fn create_org_with(&self, req: &CreateOrgRequest) -> Result<Org> {
        let url = self.url(&["v1", "orgs"]);
        self.json(self.request(Method::POST, url).json(req)).await
    }

    /// `GET /v1/orgs`: every org.
    pub async fn orgs(&self) -> Result<OrgList> {
        self.json(self.request(Method::GET, self.url(&["v1", "orgs"])))
            .await
    }

    /// `GET /v1/orgs/{org}`: one org, its quotas and its `usage`.
    pub async fn org(&self, id: &str) -> Result<Org> {
        self.json(self.request(Method::GET, self.url(&["v1", "orgs", id])))
            .await
    }

    /// `PUT /v1/orgs/{org}/quotas`: replaces the org's quotas.
    pub async fn set_org_quotas(&self, id: &str, quotas: &Quotas) -> Result<Org> {
        let url = self.url(&["v1", "orgs", id, "quotas"]);
        self.json(self.request(Method::PUT, url).json(quotas)).await
    }

    /// `PATCH /v1/orgs/{org}`: replaces the org's settings that `req` gives (quotas, disabled
    /// features, checkpoint retention).
    pub async fn update_org(&self, id: &str, req: &UpdateOrgRequest) -> Result<Org> {
        let url = self.url(&["v1", "orgs", id]);
        self.json(self.request(Method::PATCH, url).json(req)).await
    }

    /// `POST /v1/orgs/{org}/keys`: a new API key; its secret is in this answer only.
    pub async fn create_api_key(&self, org: &str, name: &str) -> Result<CreatedApiKey> {
        let body = CreateApiKeyRequest {
            name: name.to_string(),
        };
        let url = self.url(&["v1", "orgs", org, "keys"]);
        self.json(self.request(Method::POST, url).json(&body)).await
    }

    /// `GET /v1/orgs/{org}/keys`: the org's keys (no secrets).
    pub async fn api_keys(&self, org: &str) -> Result<ApiKeyList> {
        let url = self.url(&["v1", "orgs", org, "keys"]);
        self.json(self.request(Method::GET, url)).await
    }

    /// `DELETE /v1/orgs/{org}/keys/{key}`: revokes a key.
    pub async fn revoke_api_key(&self, org: &str, key_id: &str) -> Result<ApiKey> {
        let url = self.url(&["v1", "orgs", org, "keys", key_id]);
        self.json(self.request(Method::DELETE, url)).await
    }

    /// `GET /v1/audit`: audit records after `after` (the admin token: every org's, or
    /// `org`'s; a key: its own org's).
    pub async fn audit(
        &self,
        after: u64,
        limit: Option<u32>,
        org: Option<&str>,
    ) -> Result<AuditPage> {
        let mut query = vec![("after", after.to_string())];
        if let Some(l) = limit {
            query.push(("limit", l.to_string()));
        }
        if let Some(o) = org {
            query.push(("org", o.to_string()));
        }
        let url = self.url(&["v1", "audit"]);
        self.json(self.request(Method::GET, url).query(&query))
            .await
    }
}
