//! Runtimes: how a node isolates sandboxes. One [`Runtime`] trait; drivers per isolation kind.
//!
//! A runtime starts a sandbox whose init process is the guest agent, listening on
//! [`cove_guest_protocol::GUEST_SOCKET_PATH`] inside the sandbox; the runtime hands back a
//! [`GuestConnector`] that opens byte streams to that agent from the host (a unix socket for
//! runc, a mux stream over virtio-serial for qemu). Everything else (commands, files) goes
//! through the guest agent, not through the runtime.
//!
//! Drivers: [`runc::RuncRuntime`] (OCI container), [`qemu::QemuRuntime`] (microvm).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};

pub mod qemu;
pub mod runc;

/// A bidirectional byte stream to the guest agent.
pub trait GuestStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> GuestStream for T {}

/// Opens new byte streams to a sandbox's guest agent; each speaks the guest protocol from its
/// `Hello` on. Cheap to share.
#[async_trait]
pub trait GuestConnector: Send + Sync + std::fmt::Debug + 'static {
    /// Opens one new stream. Fails with an I/O error when the agent cannot be reached (not
    /// started yet, paused, gone).
    async fn connect(&self) -> io::Result<Box<dyn GuestStream>>;
}

/// A connector that connects a unix socket per stream (runc: the agent's bind-mounted socket).
#[derive(Debug, Clone)]
pub struct UnixConnector {
    /// Host path of the agent's socket.
    pub socket: PathBuf,
}

#[async_trait]
impl GuestConnector for UnixConnector {
    async fn connect(&self) -> io::Result<Box<dyn GuestStream>> {
        Ok(Box::new(
            tokio::net::UnixStream::connect(&self.socket).await?,
        ))
    }
}

/// Which isolation a runtime provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    /// OCI container run by `runc`.
    Runc,
    /// QEMU microvm (KVM, or TCG where there is no usable KVM).
    Qemu,
}

impl RuntimeKind {
    /// Wire name (`runc`, `qemu`).
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Runc => "runc",
            RuntimeKind::Qemu => "qemu",
        }
    }

    /// The isolation boundary (`container` or `vm`).
    pub fn boundary(self) -> &'static str {
        match self {
            RuntimeKind::Runc => "container",
            RuntimeKind::Qemu => "vm",
        }
    }
}

/// What a runtime can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Pause/resume keeps processes in memory (freezer, QMP stop).
    pub pause: bool,
    /// Suspend can save process memory (false for runc here: CRIU does not work on this kernel).
    pub suspend_memory: bool,
}

/// Everything a runtime needs to start one sandbox.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// Sandbox id; also the container id. `[a-z0-9_-]`, at most 64 bytes.
    pub id: String,
    /// The release's read-only root filesystem (overlay lower dir).
    pub rootfs: PathBuf,
    /// The sandbox's own directory on the node (`<data-dir>/sandboxes/<id>`). The runtime owns
    /// its content: `upper/`, `work/`, `rootfs/` (mount point), `run/` (mounted at
    /// [`cove_guest_protocol::GUEST_RUN_DIR`]), `bundle/`.
    pub dir: PathBuf,
    /// Host path of the static guest agent binary, bind-mounted read-only at
    /// [`cove_guest_protocol::GUEST_AGENT_PATH`].
    pub guest_agent: PathBuf,
    /// Extra arguments for the guest agent (after `--listen <socket>`).
    pub guest_agent_args: Vec<String>,
    /// Hostname inside the sandbox.
    pub hostname: String,
    /// CPU limit in vCPUs (cgroup cpu quota = vcpus × period).
    pub vcpus: u32,
    /// Memory limit in MiB (memory and memory+swap).
    pub memory_mib: u64,
    /// Maximum number of processes (pids cgroup).
    pub pids_max: u64,
    /// Size in MiB of a disk of the sandbox's own: a sparse ext4 image in `dir` that holds
    /// `upper/` and `work/`, so a full sandbox fills only its image (`None` = `upper/` on the
    /// node's disk).
    pub disk_mib: Option<u64>,
}

/// A started sandbox.
#[derive(Debug, Clone)]
pub struct Started {
    /// runc: host path of the guest agent's socket; qemu: the VM's virtio-serial chardev socket
    /// (it speaks the mux, not the guest protocol; use `connector`).
    pub agent_socket: PathBuf,
    /// Opens streams to the guest agent.
    pub connector: Arc<dyn GuestConnector>,
    /// Host pid of the sandbox's init (runc: the guest agent; qemu: the QEMU process).
    pub init_pid: u32,
    /// Whether process memory was restored from a snapshot (qemu after a suspend) rather than
    /// the sandbox booting afresh.
    pub memory_restored: bool,
}

/// State of a sandbox as the runtime sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeState {
    /// Created but not started.
    Created,
    /// Processes run.
    Running,
    /// Processes frozen.
    Paused,
    /// Init exited.
    Stopped,
}

/// Errors of a runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The host lacks something the runtime needs (binary, kernel feature).
    #[error("runtime unavailable: {0}")]
    Unavailable(String),
    /// No such sandbox on this node.
    #[error("sandbox {id} not found in the runtime")]
    NotFound {
        /// Sandbox id.
        id: String,
    },
    /// A runtime command failed.
    #[error("{op} failed for sandbox {id}: {detail}")]
    Command {
        /// Operation (`create`, `start`, `pause`, ...).
        op: &'static str,
        /// Sandbox id.
        id: String,
        /// stderr of the failed command, trimmed.
        detail: String,
    },
    /// The guest agent did not come up in time.
    #[error("guest agent of sandbox {id} did not start within {waited_ms} ms")]
    AgentTimeout {
        /// Sandbox id.
        id: String,
        /// Milliseconds waited.
        waited_ms: u64,
    },
    /// A host I/O error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (may hold a host path; never shown to API clients).
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// An isolation runtime. Implementations are cheap to share (`Arc<dyn Runtime>`).
#[async_trait]
pub trait Runtime: Send + Sync + 'static {
    /// Which kind this is.
    fn kind(&self) -> RuntimeKind;

    /// What it can do.
    fn capabilities(&self) -> Capabilities;

    /// Creates and starts the sandbox, and waits until the guest agent's socket exists (at most
    /// 30 s). On failure nothing is left behind (mounts, cgroups, container state are removed).
    async fn start(&self, spec: &SandboxSpec) -> Result<Started, RuntimeError>;

    /// State of a sandbox, or `None` when the runtime has no such sandbox.
    async fn state(&self, id: &str) -> Result<Option<RuntimeState>, RuntimeError>;

    /// A connector to the guest agent of a sandbox that is already running (adoption after the
    /// node restarted). No I/O is required to happen here; connecting may fail later.
    async fn connector(
        &self,
        id: &str,
        dir: &Path,
    ) -> Result<Arc<dyn GuestConnector>, RuntimeError>;

    /// Saves what the runtime can of a paused or running sandbox's memory into `dir/upper/`
    /// (the part of the sandbox directory the snapshot store saves), leaving the sandbox
    /// paused. Returns `false` when the runtime cannot save memory (runc): nothing was done.
    /// On error the sandbox is left paused and nothing partial remains in `upper/`.
    async fn checkpoint(&self, _id: &str, _dir: &Path) -> Result<bool, RuntimeError> {
        Ok(false)
    }

    /// Why a sandbox that stopped by itself stopped (a guest kernel panic, the VM process
    /// dying), when the runtime knows. `None` for a live or cleanly stopped sandbox.
    async fn failure(&self, _id: &str, _dir: &Path) -> Option<String> {
        None
    }

    /// Freezes every process of the sandbox.
    async fn pause(&self, id: &str) -> Result<(), RuntimeError>;

    /// Thaws a paused sandbox.
    async fn resume(&self, id: &str) -> Result<(), RuntimeError>;

    /// Stops the sandbox and removes every node resource it holds (processes, container state,
    /// cgroups, mounts) except `spec.dir`'s `upper/` (its files). Idempotent.
    async fn stop(&self, id: &str, dir: &std::path::Path) -> Result<(), RuntimeError>;

    /// Ids of all sandboxes this runtime has on the node (for reconciliation after a restart).
    async fn list(&self) -> Result<Vec<String>, RuntimeError>;

    /// Host paths of the cgroup directories of a running sandbox, per controller (for OOM
    /// accounting and stats): `(controller, path)`.
    async fn cgroup_paths(&self, id: &str) -> Result<Vec<(String, PathBuf)>, RuntimeError>;
}
