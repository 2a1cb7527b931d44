//! Checkpoints, rollback and fork: `/v1/sandboxes/{id}/checkpoints`, `/v1/checkpoints`,
//! `/v1/sandboxes/{id}/rollback`, `/v1/sandboxes/{id}/fork`.

use bytes::Bytes;
use cove_api_types::{
    Checkpoint, CheckpointList, CreateCheckpointRequest, CreateCheckpointResponse, ForkRequest,
    ForkResponse, Operation, RollbackRequest, IDEMPOTENCY_KEY_HEADER,
};
use futures::{Stream, TryStreamExt};
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use reqwest::{Body, Method};

use crate::{Client, ClientError, Result};

impl Client {
    /// `POST /v1/sandboxes/{id}/checkpoints`: starts saving a checkpoint of a running or
    /// paused sandbox; returns the checkpoint (`creating`) and the operation to wait for.
    pub async fn create_checkpoint(
        &self,
        sandbox_id: &str,
        request: &CreateCheckpointRequest,
        idempotency_key: Option<&str>,
    ) -> Result<CreateCheckpointResponse> {
        let url = self.url(&["v1", "sandboxes", sandbox_id, "checkpoints"]);
        let mut builder = self.request(Method::POST, url).json(request);
        if let Some(key) = idempotency_key {
            builder = builder.header(IDEMPOTENCY_KEY_HEADER, key);
        }
        self.json(builder).await
    }

    /// `GET /v1/sandboxes/{id}/checkpoints` (newest first), or every checkpoint
    /// (`GET /v1/checkpoints`) when `sandbox_id` is `None`.
    pub async fn list_checkpoints(&self, sandbox_id: Option<&str>) -> Result<CheckpointList> {
        let url = match sandbox_id {
            Some(id) => self.url(&["v1", "sandboxes", id, "checkpoints"]),
            None => self.url(&["v1", "checkpoints"]),
        };
        self.json(self.request(Method::GET, url)).await
    }

    /// `GET /v1/checkpoints/{cid}`.
    pub async fn get_checkpoint(&self, checkpoint_id: &str) -> Result<Checkpoint> {
        let url = self.url(&["v1", "checkpoints", checkpoint_id]);
        self.json(self.request(Method::GET, url)).await
    }

    /// `DELETE /v1/checkpoints/{cid}`.
    pub async fn delete_checkpoint(&self, checkpoint_id: &str) -> Result<()> {
        let url = self.url(&["v1", "checkpoints", checkpoint_id]);
        self.send(self.request(Method::DELETE, url)).await.map(drop)
    }

    /// `POST /v1/sandboxes/{id}/rollback`: returns the sandbox to checkpoint `checkpoint_id`
    /// (an operation).
    pub async fn rollback_sandbox(
        &self,
        sandbox_id: &str,
        checkpoint_id: &str,
    ) -> Result<Operation> {
        let url = self.url(&["v1", "sandboxes", sandbox_id, "rollback"]);
        let body = RollbackRequest {
            checkpoint: checkpoint_id.to_string(),
            deadline_s: None,
        };
        self.json(self.request(Method::POST, url).json(&body)).await
    }

    /// `POST /v1/sandboxes/{id}/fork`: creates `request.count` sandboxes from a fresh
    /// checkpoint of this one.
    pub async fn fork_sandbox(
        &self,
        sandbox_id: &str,
        request: &ForkRequest,
    ) -> Result<ForkResponse> {
        let url = self.url(&["v1", "sandboxes", sandbox_id, "fork"]);
        self.json(self.request(Method::POST, url).json(request))
            .await
    }

    /// `GET /v1/checkpoints/{cid}/archive`: the checkpoint's archive (a tar) as a stream.
    /// Errors found before the first byte are returned here; the stream yields transport
    /// errors only (a failure on the server mid-stream cuts the stream short).
    pub async fn checkpoint_archive(
        &self,
        checkpoint_id: &str,
    ) -> Result<impl Stream<Item = Result<Bytes>> + Send + 'static> {
        let url = self.url(&["v1", "checkpoints", checkpoint_id, "archive"]);
        let response = self.send(self.request(Method::GET, url)).await?;
        Ok(response.bytes_stream().map_err(ClientError::Transport))
    }

    /// `POST /v1/checkpoints/import[?name=]`: uploads a checkpoint archive (pass a
    /// `tokio::fs::File` or `Body::wrap_stream(..)` for large ones); returns the new `ready`
    /// checkpoint.
    pub async fn import_checkpoint(
        &self,
        archive: impl Into<Body>,
        name: Option<&str>,
    ) -> Result<Checkpoint> {
        let mut request = self
            .request(Method::POST, self.url(&["v1", "checkpoints", "import"]))
            .header(CONTENT_TYPE, HeaderValue::from_static("application/x-tar"))
            .body(archive);
        if let Some(name) = name {
            request = request.query(&[("name", name)]);
        }
        self.json(request).await
    }
}
