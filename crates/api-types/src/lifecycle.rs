//! Lifecycle calls on a sandbox (`pause`, `resume`, `suspend`, `wake`), the event stream, and
//! what the runtime can do.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{EventType, Operation};

/// Body of `POST /v1/sandboxes/{id}/{pause|resume|suspend|wake}` (optional; an empty body is
/// `{}`).
///
/// Each call answers `202` with an [`Operation`]. A call that asks for the state the sandbox is
/// already in (a `resume` of a running sandbox, a `pause` of a paused one, a `suspend` of a
/// suspended one, a `wake` of a running one) is not an error: its operation succeeds without doing
/// anything. A call that is illegal from the current state (a `pause` of a suspended sandbox, ...)
/// is `409 invalid_state`. Calls on one sandbox run one at a time, in the order they were
/// acknowledged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LifecycleRequest {
    /// Deadline of the operation in seconds from now (default 1800, at most 86400). An
    /// operation still going at its deadline ends `failed` with `deadline_exceeded`.
    #[serde(default)]
    pub deadline_s: Option<u64>,
}

/// `GET /v1/operations` answer: the most recent operations first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OperationList {
    /// Operations, newest first.
    pub operations: Vec<Operation>,
}

/// One lifecycle event of `GET /v1/events` (SSE event `lifecycle`, its `id` is `seq`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Event {
    /// Position in the stream: increases by at least 1 per event, never reused. Resume with
    /// `?after=SEQ` or the `Last-Event-ID` header.
    pub seq: u64,
    /// When it happened.
    pub time: DateTime<Utc>,
    /// What happened.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// The sandbox it happened to.
    pub sandbox_id: String,
    /// The operation that made it happen, if any (none for the idle controller's own moves
    /// before their operation exists, or for reconciliation).
    pub operation_id: Option<String>,
    /// Detail (why a sandbox failed, `idle` for an idle suspend; for `network.denied`:
    /// `floor`, `denied` or `not_allowed`).
    pub reason: Option<String>,
    /// For `network.denied`: what the sandbox tried to reach (`name`, `ip:port` or
    /// `name (ip:port)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// For `network.denied`: the host it tried (the name the connection or question carried,
    /// else the address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// For `network.denied`: the port it tried (none for a DNS question).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// For `network.denied`: the rule that refused it: `deny RULE` (the policy's deny entry),
    /// `internet off and no allow rule names it`, or `floor (...)` (never reachable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// `GET /v1/capabilities`: what this server's runtime can do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RuntimeCapabilities {
    /// Runtime name (`runc`, `qemu`, `gvisor`).
    pub runtime: String,
    /// The isolation boundary: `container` (namespaces, cgroups, seccomp; the host kernel is
    /// shared), `vm` (its own kernel behind a hypervisor) or `application_kernel` (gVisor: a
    /// kernel in user space answers the sandbox's system calls). Older servers omit it.
    #[serde(default)]
    pub boundary: String,
    /// `pause` keeps processes frozen in memory.
    pub pause: bool,
    /// `suspend` saves process memory too (qemu; gvisor on a node without sandbox networks,
    /// unless a sandbox's checkpoint fails: its wake then says `memory_restored: false`). When
    /// false (runc, gvisor with sandbox networks), `wake` restarts the sandbox from its saved
    /// files: processes and commands from before the suspend are gone.
    pub suspend_memory: bool,
    /// Where suspended sandboxes are kept (`file` or `s3`).
    pub snapshot_store: String,
    /// Sandboxes get a network behind an egress gateway (`network` policies, secrets). When
    /// false they have loopback only and only the default policy is accepted.
    #[serde(default)]
    pub network: bool,
    /// Each sandbox runs in a user namespace of its own: its root (and every other user in it)
    /// is an unprivileged host id range no other sandbox shares (runc with
    /// `--user-namespaces on`, the default). False on `qemu`, whose boundary is the VM, and on
    /// older servers.
    #[serde(default)]
    pub user_namespaces: bool,
    /// Persistent volumes are offered (`POST /v1/volumes`): the runc runtime of a single
    /// server's node, or on a cluster a node (not lost) that keeps them, with the `volumes`
    /// feature on. False elsewhere, where creates answer `400 unsupported` (or `403
    /// feature_disabled`).
    #[serde(default)]
    pub volumes: bool,
    /// Size in MiB of the own disk a sandbox gets when its create names no
    /// `resources.disk_mib` (`cove server --default-disk-mib`); absent when that default is
    /// off and such a sandbox writes to the node's disk without a limit of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_disk_mib: Option<u64>,
    /// How long this server keeps each class of record. Older servers omit it.
    #[serde(default)]
    pub retention: RetentionInfo,
}

/// Retention per class of record, in seconds; `null`: kept until its owner goes (set with
/// `cove server --retention-*-s`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetentionInfo {
    /// Finished operations and their log lines, counted from their last change.
    pub operations_s: Option<u64>,
    /// Lifecycle and network events (`GET /v1/events`), counted from their time.
    pub events_s: Option<u64>,
    /// Ended commands of running sandboxes (their output and id, as `DELETE` of the command
    /// does), counted from their end.
    pub commands_s: Option<u64>,
    /// Suspended sandboxes: one suspended and unchanged this long is deleted with its
    /// snapshot. `null` (the default): kept until deleted.
    pub snapshots_s: Option<u64>,
    /// Audit records (`GET /v1/audit`), counted from their time (default 90 days).
    #[serde(default)]
    pub audit_s: Option<u64>,
}
