//! Sandbox lifecycle calls: `POST /v1/sandboxes/{id}/{pause|resume|suspend|wake}`.
//!
//! Each returns the [`Operation`] at once (`202`); wait for it with [`Client::wait_operation`].
//! Asking for the state the sandbox is already in succeeds without doing anything; an illegal
//! move is `409 invalid_state`.

use cove_api_types::{LifecycleRequest, Operation, RuntimeCapabilities};
use reqwest::Method;

use crate::{Client, Result};

impl Client {
    /// `POST /v1/sandboxes/{id}/pause`: freezes every process (memory stays on the node).
    pub async fn pause_sandbox(&self, id: &str) -> Result<Operation> {
        self.lifecycle(id, "pause", &LifecycleRequest::default())
            .await
    }

    /// `POST /v1/sandboxes/{id}/resume`: thaws a paused sandbox.
    pub async fn resume_sandbox(&self, id: &str) -> Result<Operation> {
        self.lifecycle(id, "resume", &LifecycleRequest::default())
            .await
    }

    /// `POST /v1/sandboxes/{id}/suspend`: saves the sandbox's files to the snapshot store and
    /// releases every node resource. On runc, processes do not survive (see
    /// [`RuntimeCapabilities::suspend_memory`]).
    pub async fn suspend_sandbox(&self, id: &str) -> Result<Operation> {
        self.lifecycle(id, "suspend", &LifecycleRequest::default())
            .await
    }

    /// `POST /v1/sandboxes/{id}/wake`: restores a suspended sandbox and starts it.
    pub async fn wake_sandbox(&self, id: &str) -> Result<Operation> {
        self.lifecycle(id, "wake", &LifecycleRequest::default())
            .await
    }

    /// `POST /v1/sandboxes/{id}/{verb}` with a body (e.g. a `deadline_s`); `verb` is one of
    /// `pause`, `resume`, `suspend`, `wake`.
    pub async fn lifecycle(
        &self,
        id: &str,
        verb: &str,
        request: &LifecycleRequest,
    ) -> Result<Operation> {
        let url = self.url(&["v1", "sandboxes", id, verb]);
        self.json(self.request(Method::POST, url).json(request))
            .await
    }

    /// `GET /v1/capabilities`: what the server's runtime can do.
    pub async fn capabilities(&self) -> Result<RuntimeCapabilities> {
        self.json(self.request(Method::GET, self.url(&["v1", "capabilities"])))
            .await
    }
}
