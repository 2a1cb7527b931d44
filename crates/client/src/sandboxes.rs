//! Sandboxes: `/v1/sandboxes`.

use cove_api_types::{
    CreateSandboxRequest, CreateSandboxResponse, EgressPolicy, Operation, PortLink,
    PortLinkRequest, Sandbox, SandboxList, SandboxNetwork, SandboxPorts, SandboxState,
    SetExpiryRequest, SetPortsRequest, IDEMPOTENCY_KEY_HEADER,
};
use reqwest::Method;

use crate::{Client, Result};

/// Filters and paging of [`Client::list_sandboxes`]; the default lists the first page of all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListSandboxes {
    /// Only sandboxes in this state.
    pub state: Option<SandboxState>,
    /// Only sandboxes of this template.
    pub template: Option<String>,
    /// Only sandboxes whose metadata has each of these `(key, value)` pairs
    /// (`?metadata.KEY=VALUE`).
    pub metadata: Vec<(String, String)>,
    /// Page size (the server caps it).
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl ListSandboxes {
    fn query(&self) -> Vec<(String, String)> {
        let mut query = Vec::new();
        if let Some(state) = self.state {
            query.push(("state".to_owned(), state.as_str().to_owned()));
        }
        if let Some(template) = &self.template {
            query.push(("template".to_owned(), template.clone()));
        }
        for (key, value) in &self.metadata {
            query.push((format!("metadata.{key}"), value.clone()));
        }
        if let Some(limit) = self.limit {
            query.push(("limit".to_owned(), limit.to_string()));
        }
        if let Some(cursor) = &self.cursor {
            query.push(("cursor".to_owned(), cursor.clone()));
        }
        query
    }
}

impl Client {
    /// `POST /v1/sandboxes`: starts creating a sandbox; wait for the returned operation with
    /// [`Client::wait_operation`]. With an `idempotency_key`, repeating the same request returns
    /// the same sandbox and operation.
    pub async fn create_sandbox(
        &self,
        request: &CreateSandboxRequest,
        idempotency_key: Option<&str>,
    ) -> Result<CreateSandboxResponse> {
        let mut builder = self
            .request(Method::POST, self.url(&["v1", "sandboxes"]))
            .json(request);
        if let Some(key) = idempotency_key {
            builder = builder.header(IDEMPOTENCY_KEY_HEADER, key);
        }
        self.json(builder).await
    }

    /// `GET /v1/sandboxes/{id}`.
    pub async fn get_sandbox(&self, id: &str) -> Result<Sandbox> {
        self.json(self.request(Method::GET, self.url(&["v1", "sandboxes", id])))
            .await
    }

    /// `GET /v1/sandboxes/{id}/metrics`: CPU, memory and disk use now and over the last
    /// minutes.
    pub async fn sandbox_metrics(&self, id: &str) -> Result<cove_api_types::SandboxMetrics> {
        self.json(self.request(Method::GET, self.url(&["v1", "sandboxes", id, "metrics"])))
            .await
    }

    /// `GET /v1/sandboxes/{id}/network`: the egress policy and the gateway's counters.
    pub async fn sandbox_network(&self, id: &str) -> Result<SandboxNetwork> {
        self.json(self.request(Method::GET, self.url(&["v1", "sandboxes", id, "network"])))
            .await
    }

    /// `PUT /v1/sandboxes/{id}/network`: replaces the egress policy (the next connection
    /// follows it).
    pub async fn set_sandbox_network(
        &self,
        id: &str,
        policy: &EgressPolicy,
    ) -> Result<SandboxNetwork> {
        let request = self
            .request(Method::PUT, self.url(&["v1", "sandboxes", id, "network"]))
            .json(policy);
        self.json(request).await
    }

    /// `PUT /v1/sandboxes/{id}/expiry`: when the sandbox expires and what its expiry does.
    pub async fn set_sandbox_expiry(&self, id: &str, req: &SetExpiryRequest) -> Result<Sandbox> {
        let request = self
            .request(Method::PUT, self.url(&["v1", "sandboxes", id, "expiry"]))
            .json(req);
        self.json(request).await
    }

    /// `DELETE /v1/sandboxes/{id}/expiry`: the sandbox expires no more.
    pub async fn clear_sandbox_expiry(&self, id: &str) -> Result<Sandbox> {
        let request = self.request(Method::DELETE, self.url(&["v1", "sandboxes", id, "expiry"]));
        self.json(request).await
    }

    /// `GET /v1/sandboxes/{id}/ports`: the port token, path prefix, proxy host and access of
    /// the sandbox's ports (`{path}{port}/...` is proxied to that port of the sandbox).
    pub async fn sandbox_ports(&self, id: &str) -> Result<SandboxPorts> {
        self.json(self.request(Method::GET, self.url(&["v1", "sandboxes", id, "ports"])))
            .await
    }

    /// `PUT /v1/sandboxes/{id}/ports {public}`: makes the sandbox's ports public (no credential
    /// needed) or private again.
    pub async fn set_sandbox_ports(&self, id: &str, public: bool) -> Result<SandboxPorts> {
        let request = self
            .request(Method::PUT, self.url(&["v1", "sandboxes", id, "ports"]))
            .json(&SetPortsRequest { public });
        self.json(request).await
    }

    /// `POST /v1/sandboxes/{id}/ports:link`: a one-time link to `port` on the proxy listener
    /// that sets a cookie for that host and lands on `path` (default `/`).
    pub async fn port_link(&self, id: &str, port: u16, path: Option<&str>) -> Result<PortLink> {
        let request = self
            .request(
                Method::POST,
                self.url(&["v1", "sandboxes", id, "ports:link"]),
            )
            .json(&PortLinkRequest {
                port,
                path: path.map(str::to_string),
            });
        self.json(request).await
    }

    /// `GET /v1/sandboxes`: one page, newest first; follow `next_cursor` for the rest.
    pub async fn list_sandboxes(&self, filter: &ListSandboxes) -> Result<SandboxList> {
        let request = self
            .request(Method::GET, self.url(&["v1", "sandboxes"]))
            .query(&filter.query());
        self.json(request).await
    }

    /// `DELETE /v1/sandboxes/{id}`: starts deleting it; returns the delete operation.
    pub async fn delete_sandbox(&self, id: &str) -> Result<Operation> {
        self.json(self.request(Method::DELETE, self.url(&["v1", "sandboxes", id])))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_query_has_only_set_fields() {
        assert!(ListSandboxes::default().query().is_empty());
        let filter = ListSandboxes {
            state: Some(SandboxState::Running),
            template: Some("base".into()),
            metadata: vec![("team".into(), "red".into())],
            limit: Some(10),
            cursor: Some("c1".into()),
        };
        assert_eq!(
            filter.query(),
            [
                ("state", "running"),
                ("template", "base"),
                ("metadata.team", "red"),
                ("limit", "10"),
                ("cursor", "c1"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .to_vec()
        );
    }
}
