//! [`NodeAgent`]: the node side of [`cove_node_api::NodeApi`], over a [`Runtime`] and each sandbox's guest agent.
//!
//! On disk (under the data dir): `releases/<template>/<n>/rootfs` (read-only by convention),
//! `sandboxes/<id>/` (owned by the runtime while the sandbox exists) and `volumes/<id>/`
//! (persistent volumes' images and mount points, `volumes.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cove_node_api::{
    AttachEvent, BuildEvent, BuiltRelease, ByteStream, CommandInfo, FileInfo, NodeCommands,
    NodeError, NodeFiles, NodeLifecycle, NodeReleases, NodeSandboxState, RecipeInfo, SandboxLaunch,
    SandboxPath, SpawnRequest, WriteFileRequest,
};
use cove_runtime::{Runtime, RuntimeState, SandboxSpec};
use futures::stream::BoxStream;
use futures::StreamExt;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::guest::{self, GuestClient};
use crate::template::{self, BuildOptions, Recipe};

/// How long a new sandbox's guest agent has to answer its first hello.
const AGENT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Settings of a node agent.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Data dir (releases and sandboxes live below it).
    pub data_dir: PathBuf,
    /// Host path of the static guest agent binary.
    pub guest_agent: PathBuf,
    /// Build cache for release root filesystems (`None` = no cache).
    pub cache_dir: Option<PathBuf>,
    /// Debian mirror for the `base` template (`None` = the builder's default).
    pub mirror: Option<String>,
    /// Where suspended sandboxes' files are kept.
    pub snapshots: crate::snapshot::SnapshotStore,
    /// Whether the snapshot store is shared with other nodes, so releases built from a file
    /// are kept there for them (`releases/<digest hex>/`, see `release_store`).
    pub share_releases: bool,
    /// Bound of the step cache of file builds (`<data-dir>/layers`), in bytes: after a build
    /// the least recently used entries go until it fits (see `template::trim_layers`).
    pub layer_cache_bytes: u64,
    /// How much of each command's output the guest agents keep.
    pub command_output: crate::guest::OutputLimits,
    /// The operator's directory of image archives that `FROM oci-archive:NAME` may name
    /// (`--oci-import-dir`); `None`: such builds fail with `OciImportDisabled`.
    pub oci_import_dir: Option<PathBuf>,
    /// Largest image archive imported, in bytes (`--oci-import-max-mib`).
    pub oci_import_max_bytes: u64,
}

/// The node agent of this host.
pub struct NodeAgent {
    cfg: NodeConfig,
    runtime: Arc<dyn Runtime>,
    guests: Mutex<HashMap<String, GuestClient>>,
    /// Recent usage samples per sandbox (`metrics.rs`).
    history: Mutex<metrics::History>,
    /// Sandbox networks (`None`: networking off, sandboxes have loopback only).
    network: Option<Arc<network::NodeNet>>,
    /// Held while a release is fetched from the snapshot store (fetches take turns).
    fetching: tokio::sync::Mutex<()>,
    /// Read-held by every file build while it runs; the step cache is trimmed only with it
    /// held for writing (no build is using an entry then).
    layer_builds: Arc<tokio::sync::RwLock<()>>,
    /// Persistent volumes' disks (`<data-dir>/volumes`).
    volumes: Arc<cove_runtime::runc::volume_disks::VolumeDisks>,
}

impl NodeAgent {
    /// A node agent over `runtime`, without sandbox networks (see [`NodeAgent::with_network`]).
    pub fn new(cfg: NodeConfig, runtime: Arc<dyn Runtime>) -> Self {
        NodeAgent {
            runtime,
            guests: Mutex::new(HashMap::new()),
            history: Mutex::new(HashMap::new()),
            network: None,
            fetching: tokio::sync::Mutex::new(()),
            layer_builds: Arc::new(tokio::sync::RwLock::new(())),
            volumes: Arc::new(cove_runtime::runc::volume_disks::VolumeDisks::new(
                cfg.data_dir.join("volumes"),
            )),
            cfg,
        }
    }

    fn release_dir(&self, template: &str, number: u32) -> PathBuf {
        self.cfg
            .data_dir
            .join("releases")
            .join(template)
            .join(number.to_string())
    }

    fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.cfg.data_dir.join("sandboxes").join(id)
    }

    fn guest(&self, id: &str) -> Result<GuestClient, NodeError> {
        let guests = self.guests.lock();
        guests
            .get(id)
            .cloned()
            .ok_or_else(|| NodeError::SandboxNotFound(id.to_string()))
    }

    fn set_guest(&self, id: &str, client: Option<GuestClient>) {
        let mut guests = self.guests.lock();
        match client {
            Some(c) => guests.insert(id.to_string(), c),
            None => guests.remove(id),
        };
    }

    async fn remove_tree(path: &Path) -> Result<(), NodeError> {
        match tokio::fs::remove_dir_all(path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(NodeError::Internal(format!(
                "remove {}: {e}",
                path.display()
            ))),
        }
    }
}

fn recipe_info(r: Recipe) -> RecipeInfo {
    let d = r.defaults();
    let description = match r {
        Recipe::Base => "Debian bookworm with bash, python3 and pip, git, curl, sudo; user `user`",
        Recipe::Tiny => "busybox only; seconds to build, for tests and quick checks",
        Recipe::Full => {
            "base plus build-essential, nodejs, npm, ripgrep, vim-tiny; pip installs into a virtualenv of `user`"
        }
    };
    RecipeInfo {
        name: r.name().to_string(),
        description: description.to_string(),
        user: d.user,
        workdir: d.workdir,
        env: d.env,
        recipe_hash: r.recipe_hash(),
    }
}

/// A runtime error as the contract says it: a full node disk is `NoSpace` (507 `no_space`,
/// without host detail: that goes to the log), anything else `Runtime`.
fn runtime_err(e: cove_runtime::RuntimeError) -> NodeError {
    if e.is_no_space() {
        warn!(error = %e, "the node's disk is full");
        return NodeError::NoSpace("the node's disk is full".into());
    }
    NodeError::Runtime(e.to_string())
}

mod archive;
mod builds;
mod checkpoints;
mod commands;
mod convert;
mod files;
mod lifecycle;
mod metrics;
mod network;
mod release_store;
mod releases;
mod repair;
mod volume_files;
mod volume_objects;
mod volume_paths;
mod volumes;
