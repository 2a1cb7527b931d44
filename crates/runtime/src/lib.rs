//! Runtimes: how a node isolates sandboxes. One [`Runtime`] trait; drivers per isolation kind.
//!
//! A runtime owns everything of a sandbox on the node: its directory's layout, its disk, its
//! process or VM, its snapshots (as named artifacts: [`Runtime::snapshot_artifacts`]) and the
//! channel to its guest agent ([`GuestConnector`], returned by [`Runtime::start`] and
//! [`Runtime::adopt`]). Commands and files go through the guest agent, not the runtime.
//!
//! Drivers: [`runc::RuncRuntime`] (OCI container; with [`runc::GvisorConfig`] the same driver
//! runs gVisor's `runsc`), [`qemu::QemuRuntime`] (microvm).

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use cove_domain::Resources;
use tokio::io::{AsyncRead, AsyncWrite};

pub mod qemu;
pub mod runc;
mod unix_socket;

pub use unix_socket::UnixSocketConnector;

/// Which isolation a runtime provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    /// OCI container run by `runc`.
    Runc,
    /// QEMU microvm (KVM, or TCG where there is no usable KVM).
    Qemu,
    /// OCI container run by gVisor's `runsc` on its application kernel.
    Gvisor,
}

impl RuntimeKind {
    /// Wire name (`runc`, `qemu`, `gvisor`).
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Runc => "runc",
            RuntimeKind::Qemu => "qemu",
            RuntimeKind::Gvisor => "gvisor",
        }
    }

    /// The isolation boundary (`container`, `vm`, or `application_kernel`: gVisor's kernel in
    /// user space answers the sandbox's system calls).
    pub fn boundary(self) -> &'static str {
        match self {
            RuntimeKind::Runc => "container",
            RuntimeKind::Qemu => "vm",
            RuntimeKind::Gvisor => "application_kernel",
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
    /// Suspend can save the process memory of a sandbox without a network
    /// ([`SandboxSpec::network`] `None`) through [`Runtime::checkpoint_memory`] (gVisor: its
    /// checkpoints cannot hold the host sockets of a network).
    pub suspend_memory_without_network: bool,
    /// The sandbox can join a network namespace made by the node ([`SandboxSpec::network`]);
    /// without it the sandbox has loopback only.
    pub network: bool,
    /// The sandbox reaches that namespace through a tap device there ([`SandboxNetwork::tap`]:
    /// a VM's NIC) rather than by running in it.
    pub network_tap: bool,
    /// Each sandbox's root is an unprivileged host id range of its own (a user namespace; runc
    /// with `--user-namespaces on`). False for VMs, whose boundary is the VM itself.
    pub user_namespaces: bool,
    /// Host directories can be bound into a sandbox ([`SandboxSpec::volumes`]).
    pub volumes: bool,
}

/// The system trust bundle in a sandbox (Debian's path): with an extra CA, the sandbox sees its
/// release's bundle plus that CA here (runc binds it read-only; a VM's guest agent writes it).
pub const CA_BUNDLE_PATH: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The network a sandbox joins: a namespace prepared by the node (its egress gateway behind it)
/// and the files that go with it.
#[derive(Clone, PartialEq, Eq)]
pub struct SandboxNetwork {
    /// The network namespace file to join (`/run/netns/<name>`; runc:
    /// `linux.namespaces[type=network].path`).
    pub netns_path: PathBuf,
    /// Content of the sandbox's `/etc/resolv.conf` (the gateway as its only resolver).
    pub resolv_conf: String,
    /// PEM of CAs to trust besides the release's own (the node's sandbox CA and the gateway's
    /// interception CA, for secret substitution); added to the sandbox's system trust store.
    pub extra_ca_pem: Option<String>,
    /// The sandbox's address (a VM configures its own interface with it).
    pub address: std::net::Ipv4Addr,
    /// The gateway: the sandbox's only peer, default route and resolver.
    pub gateway: std::net::Ipv4Addr,
    /// With [`Capabilities::network_tap`]: the tap device in the namespace, bridged to the link
    /// to the gateway, for the VM's NIC.
    pub tap: Option<String>,
}

impl std::fmt::Debug for SandboxNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxNetwork")
            .field("netns_path", &self.netns_path)
            .field("address", &self.address)
            .field("tap", &self.tap)
            .field("extra_ca", &self.extra_ca_pem.is_some())
            .finish()
    }
}

/// Everything a runtime needs to start one sandbox.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// Sandbox id; also the container id. `[a-z0-9_-]`, at most 64 bytes.
    pub id: String,
    /// The release's read-only root filesystem.
    pub rootfs: PathBuf,
    /// The sandbox's own directory on the node (`<data-dir>/sandboxes/<id>`). Its content is the
    /// runtime's alone: the node agent creates and removes the directory, nothing inside it.
    pub dir: PathBuf,
    /// Host path of the static guest agent binary, made available read-only at
    /// [`cove_guest_protocol::GUEST_AGENT_PATH`].
    pub guest_agent: PathBuf,
    /// Extra arguments for the guest agent (after `--listen <socket>`).
    pub guest_agent_args: Vec<String>,
    /// Hostname inside the sandbox.
    pub hostname: String,
    /// Limits (vCPUs → CPU quota or VM vCPUs, memory, processes, own disk), as validated by the
    /// control plane.
    pub resources: Resources,
    /// The network namespace to join (`None`: a namespace of its own with loopback only).
    /// Only for runtimes whose [`Capabilities::network`] is true.
    pub network: Option<SandboxNetwork>,
    /// Host directories bound into the sandbox (persistent volumes, mounted on the node by the
    /// node agent), in order. Only for runtimes whose [`Capabilities::volumes`] is true.
    pub volumes: Vec<VolumeBind>,
}

/// A host directory bound into a sandbox: a persistent volume's filesystem. With user
/// namespaces the bind is idmapped into the sandbox's range, so the volume's files keep the
/// container ids (`user` is 1000 on the volume, whichever sandbox wrote it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeBind {
    /// The host directory (the volume's mount point on the node).
    pub source: PathBuf,
    /// Where it appears in the sandbox (absolute, validated by the control plane).
    pub target: String,
    /// Bound read-only (writes fail with `EROFS`).
    pub read_only: bool,
}

/// A bidirectional byte stream to a sandbox's guest agent.
pub trait GuestIo: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> GuestIo for T {}

/// One open stream to a guest agent.
pub type GuestStream = Box<dyn GuestIo>;

/// Opens streams to one sandbox's guest agent. The guest protocol runs unary calls over one
/// stream and gives every output, file or watch stream one of its own, so a connector must be
/// able to open many at once: runc connects the agent's unix socket each time; a VM runtime
/// opens a new channel over its one virtio-serial port.
#[async_trait]
pub trait GuestConnector: Send + Sync + std::fmt::Debug + 'static {
    /// Opens a new stream (no handshake yet). Fails with an I/O error when the agent does not
    /// accept connections (not started, gone, frozen).
    async fn connect(&self) -> std::io::Result<GuestStream>;
}

/// A started (or adopted) sandbox.
#[derive(Debug, Clone)]
pub struct Started {
    /// Opens streams to its guest agent.
    pub guest: Arc<dyn GuestConnector>,
    /// Host pid of the sandbox's init (the guest agent, or the VM's process).
    pub init_pid: u32,
    /// Whether process memory was restored from loaded artifacts (a VM woken from its saved
    /// state) rather than the sandbox booting afresh.
    pub memory_restored: bool,
}

/// A sandbox found on the node after a restart.
#[derive(Debug, Clone)]
pub struct Adopted {
    /// What the runtime sees.
    pub state: RuntimeState,
    /// Opens streams to its guest agent (which may not answer while paused or stopped).
    pub guest: Arc<dyn GuestConnector>,
}

/// One piece of a snapshot, named by the runtime (`fs.tar`, `memory.bin`, ...). The node agent
/// moves an artifact's bytes to and from the snapshot store and never looks inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArtifactSpec {
    /// Object name (`[a-z0-9._-]`), unique within one snapshot.
    pub name: &'static str,
    /// Whether it holds process memory (a wake from it continues running processes).
    pub memory: bool,
}

/// Where an artifact's bytes go during a save: a blocking writer (run it on a blocking thread).
pub type ArtifactWriter = Box<dyn std::io::Write + Send>;
/// Where an artifact's bytes come from during a restore: a blocking reader.
pub type ArtifactReader = Box<dyn std::io::Read + Send>;

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

impl RuntimeError {
    /// Whether the node's disk was full: an I/O error `ENOSPC`, or a runtime command (runc,
    /// mkfs, mount) that said so on stderr.
    pub fn is_no_space(&self) -> bool {
        match self {
            RuntimeError::Io { source, .. } => {
                source.kind() == std::io::ErrorKind::StorageFull
                    || source.raw_os_error() == Some(libc::ENOSPC)
            }
            RuntimeError::Command { detail, .. } => detail.contains("No space left on device"),
            _ => false,
        }
    }
}

/// An isolation runtime. Implementations are cheap to share (`Arc<dyn Runtime>`).
///
/// The node agent calls one sandbox's methods one at a time. A suspend is
/// `pause` → [`Runtime::checkpoint_memory`] → [`Runtime::save_artifact`] for each of
/// [`Runtime::snapshot_artifacts`] (and of [`Runtime::memory_artifacts`] when the memory was
/// checkpointed) → `stop`; a wake is [`Runtime::load_artifact`] for each → `start`, on a fresh
/// directory.
#[async_trait]
pub trait Runtime: Send + Sync + 'static {
    /// Which kind this is.
    fn kind(&self) -> RuntimeKind;

    /// What it can do.
    fn capabilities(&self) -> Capabilities;

    /// Creates and starts the sandbox (from artifacts loaded into `spec.dir`, if any) and returns
    /// once its guest agent accepts connections (at most 30 s). On failure nothing is left
    /// behind but what was in `spec.dir` before (mounts, cgroups, processes are removed).
    async fn start(&self, spec: &SandboxSpec) -> Result<Started, RuntimeError>;

    /// Finds a sandbox this runtime started before the node agent restarted (`None`: no trace
    /// of it), with a connector to its guest agent.
    async fn adopt(&self, id: &str, dir: &std::path::Path)
        -> Result<Option<Adopted>, RuntimeError>;

    /// State of a sandbox, or `None` when the runtime has no such sandbox.
    async fn state(&self, id: &str) -> Result<Option<RuntimeState>, RuntimeError>;

    /// Why a sandbox that stopped by itself stopped (a guest kernel panic, the VM process
    /// dying), when the runtime knows. `None` for a live or cleanly stopped sandbox.
    async fn failure(&self, _id: &str, _dir: &std::path::Path) -> Option<String> {
        None
    }

    /// Freezes every process of the sandbox.
    async fn pause(&self, id: &str) -> Result<(), RuntimeError>;

    /// Thaws a paused sandbox.
    async fn resume(&self, id: &str) -> Result<(), RuntimeError>;

    /// The artifacts a snapshot of this runtime consists of, in the order they are saved.
    fn snapshot_artifacts(&self) -> &'static [ArtifactSpec];

    /// Suspend only, after `pause`: a runtime that saves process memory by stopping the sandbox
    /// (gVisor's `runsc checkpoint`) does it here, into `dir`. `Ok(true)`: the memory is saved
    /// and the sandbox no longer runs; the suspend saves [`Runtime::memory_artifacts`] besides
    /// the files. `Ok(false)`: memory is not kept this time (the runtime cannot for this
    /// sandbox, or its checkpoint failed: the reason is logged); the sandbox's files are intact
    /// and the suspend saves them alone (the sandbox is paused, or stopped when a failed
    /// checkpoint stopped it). The default keeps no memory here.
    async fn checkpoint_memory(
        &self,
        _id: &str,
        _dir: &std::path::Path,
    ) -> Result<bool, RuntimeError> {
        Ok(false)
    }

    /// Checkpoint only, after `pause` of a running sandbox: [`Runtime::checkpoint_memory`] for a
    /// sandbox that must keep running. `Ok(true)`: the memory is saved in `dir` and the sandbox
    /// is stopped; the node saves the files and [`Runtime::memory_artifacts`], then calls
    /// [`Runtime::undo_checkpoint`], which carries the sandbox on from that memory (or, when it
    /// cannot, starts it again from its files). `Ok(false)`: memory is not kept; the sandbox is
    /// paused (a checkpoint that failed and stopped it started it again from its files). The
    /// default keeps no memory.
    async fn checkpoint_memory_live(
        &self,
        _id: &str,
        _dir: &std::path::Path,
    ) -> Result<bool, RuntimeError> {
        Ok(false)
    }

    /// After a suspend whose [`Runtime::checkpoint_memory`] succeeded failed later (the
    /// snapshot store): the sandbox carries on from the memory saved in `dir`, in place.
    async fn undo_checkpoint(&self, id: &str, _dir: &std::path::Path) -> Result<(), RuntimeError> {
        Err(RuntimeError::Unavailable(format!(
            "sandbox {id}: this runtime does not checkpoint memory on its own"
        )))
    }

    /// The artifacts a suspend saves after the files when [`Runtime::checkpoint_memory`] saved
    /// the memory (each `memory: true`); a wake loads them before `start`, which then restores
    /// the memory. None by default.
    fn memory_artifacts(&self) -> &'static [ArtifactSpec] {
        &[]
    }

    /// Writes artifact `name` of the paused sandbox in `dir` to `out`; returns the bytes of
    /// content it holds (file bytes for a files artifact).
    async fn save_artifact(
        &self,
        id: &str,
        dir: &std::path::Path,
        name: &str,
        out: ArtifactWriter,
    ) -> Result<u64, RuntimeError>;

    /// Reads artifact `name` into `dir` (a directory without a running sandbox) so that the
    /// next [`Runtime::start`] continues from it; returns the bytes of content restored.
    /// Hostile input is refused: nothing is ever written outside `dir`.
    async fn load_artifact(
        &self,
        dir: &std::path::Path,
        name: &str,
        input: ArtifactReader,
    ) -> Result<u64, RuntimeError>;

    /// Reads artifact `name` that came from outside the node (an imported checkpoint archive)
    /// to the end and refuses it unless restoring it would stay inside the sandbox (no path
    /// out of its directory, no devices but whiteouts); returns its content bytes.
    /// Errors: `Io` with kind `InvalidData` naming the first refused entry.
    async fn check_artifact(&self, name: &str, input: ArtifactReader) -> Result<u64, RuntimeError>;

    /// Stops the sandbox and releases every node resource it holds (processes, container state,
    /// cgroups, mounts). Its files stay in `dir`, so a later `start` on the same directory
    /// continues from them; the node agent removes the directory when it is done with it.
    /// Idempotent.
    async fn stop(&self, id: &str, dir: &std::path::Path) -> Result<(), RuntimeError>;

    /// Binds `volumes` into running sandbox `id` (its directory `dir`) at their targets, with
    /// what a start's binds have (read-only, `nosuid`, `nodev`, the sandbox's ids): a warm pool
    /// member claimed by a create that mounts volumes. The targets are resolved in the
    /// sandbox's tree without following a link; a missing directory is made, anything else
    /// but a directory refused. Errors: `Unavailable` on a runtime that cannot (the default),
    /// `NotFound` when the sandbox does not run, `Io` (`InvalidInput`) for a refused target.
    async fn attach_volumes(
        &self,
        _id: &str,
        _dir: &std::path::Path,
        _volumes: &[VolumeBind],
    ) -> Result<(), RuntimeError> {
        Err(RuntimeError::Unavailable(format!(
            "the {} runtime cannot attach volumes to a running sandbox",
            self.kind().as_str()
        )))
    }

    /// Ids of all sandboxes this runtime has on the node (for reconciliation after a restart).
    async fn list(&self) -> Result<Vec<String>, RuntimeError>;

    /// Host paths of the cgroup directories of a running sandbox, per controller (for OOM
    /// accounting and stats): `(controller, path)`.
    async fn cgroup_paths(&self, id: &str) -> Result<Vec<(String, PathBuf)>, RuntimeError>;

    /// How much of its disk the sandbox in `dir` uses: its own disk's filesystem when it has
    /// one, else the bytes allocated to its writable layer. Works whether or not it runs.
    async fn disk_usage(&self, id: &str, dir: &std::path::Path) -> Result<DiskUsage, RuntimeError>;
}

/// Disk use of one sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes used (allocated blocks of its writable layer, or used blocks of its own disk).
    pub used_bytes: u64,
    /// Size of its own disk, bytes (`None`: it has none and shares the node's disk).
    pub limit_bytes: Option<u64>,
}
