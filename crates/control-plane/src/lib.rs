//! The control plane: desired state, operations and services (lifecycle, commands, files,
//! templates, auth), and their HTTP surfaces (`http::management_router`, `http::data_plane_router`).
//!
//! Services are methods of [`ControlPlane`], one file per resource. They talk to a node through
//! [`cove_node_api::NodeApi`] and never touch a runtime or a guest directly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cove_node_api::NodeApi;
use cove_store::Store;

pub mod auth;
mod commands;
pub mod error;
mod files;
pub mod http;
pub mod operations;
mod reconcile;
mod sandboxes;
mod templates;

pub use error::ServiceError;
pub use files::{ReadFileQuery, WriteFileQuery};
pub use operations::Operations;

/// Settings of the control plane.
#[derive(Debug, Clone)]
pub struct ControlPlaneConfig {
    /// Base URL clients use to reach the data plane (e.g. `http://127.0.0.1:7701`).
    pub data_plane_url: String,
    /// Lifetime of an attachment token.
    pub attachment_ttl: Duration,
    /// Name of the runtime sandboxes run on (`runc`).
    pub runtime: String,
}

/// The control plane's services; cheap to clone.
#[derive(Clone)]
pub struct ControlPlane {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    node: Arc<dyn NodeApi>,
    ops: Operations,
    cfg: ControlPlaneConfig,
    /// One lifecycle lock per sandbox: its operations run one at a time.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl ControlPlane {
    /// Builds the services.
    pub fn new(store: Store, node: Arc<dyn NodeApi>, cfg: ControlPlaneConfig) -> Self {
        let ops = Operations::new(store.clone());
        ControlPlane {
            inner: Arc::new(Inner { store, node, ops, cfg, locks: Mutex::new(HashMap::new()) }),
        }
    }

    /// The operation service.
    pub fn operations(&self) -> &Operations {
        &self.inner.ops
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub(crate) fn node(&self) -> &Arc<dyn NodeApi> {
        &self.inner.node
    }

    fn lifecycle_lock(&self, sandbox_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.inner.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(sandbox_id.to_string()).or_default().clone()
    }

    fn forget_lock(&self, sandbox_id: &str) {
        let mut locks = self.inner.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.remove(sandbox_id);
    }
}
