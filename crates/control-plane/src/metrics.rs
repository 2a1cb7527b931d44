//! Prometheus series of the control plane: recorded through the `metrics` facade where things
//! happen (operations, commands, data-plane bytes) and rendered by whatever recorder the
//! server installed (`GET /metrics`). Gauges of sandboxes and node capacity are refreshed at
//! each scrape. Without an installed recorder, recording is a no-op.

use std::sync::Arc;
use std::time::Duration;

use cove_api_types::{OperationKind, OperationState, SandboxState};
use tracing::warn;

use crate::{ControlPlane, ServiceError};

/// Sandboxes per state, set at scrape time (gauge, label `state`; `deleted` is not counted).
pub const SANDBOXES: &str = "cove_sandboxes";
/// Finished operations (counter, labels `kind`, `result` = succeeded/failed/cancelled).
pub const OPERATIONS_TOTAL: &str = "cove_operations_total";
/// Run time of finished operations in seconds (histogram, label `kind`).
pub const OPERATION_DURATION: &str = "cove_operation_duration_seconds";
/// Seconds from an accepted create to the sandbox running (histogram).
pub const CREATE_TO_RUNNING: &str = "cove_sandbox_create_to_running_seconds";
/// Seconds a sandbox's processes were frozen while a checkpoint of it was saved (histogram).
pub const CHECKPOINT_PAUSE: &str = "cove_checkpoint_pause_seconds";
/// Whether this replica leads the controllers (gauge, 1 or 0; replicas on a shared store).
pub const LEADER: &str = "cove_controller_leader";
/// Operations taken over from a replica that stopped (counter, label `kind`).
pub const TAKEOVERS_TOTAL: &str = "cove_operations_taken_over_total";
/// Commands started (counter).
pub const COMMANDS_TOTAL: &str = "cove_commands_total";
/// Bytes through the data plane (counter, label `stream`: `stdout` and `stderr` sent to
/// clients reading a command's output, `stdin` received for a command).
pub const DATA_PLANE_BYTES: &str = "cove_data_plane_bytes_total";
/// CPUs the node offers (gauge).
pub const NODE_CPUS: &str = "cove_node_cpus";
/// Memory of the node, bytes (gauge).
pub const NODE_MEMORY: &str = "cove_node_memory_bytes";
/// Memory available on the node now, bytes (gauge).
pub const NODE_MEMORY_AVAILABLE: &str = "cove_node_memory_available_bytes";
/// Sandboxes the node holds (running or paused, as the node counts them; gauge).
pub const NODE_SANDBOXES: &str = "cove_node_sandboxes";
/// vCPUs allotted to running and paused sandboxes (gauge; compare with [`NODE_CPUS`]).
pub const ALLOTTED_VCPUS: &str = "cove_sandboxes_allotted_vcpus";
/// Memory limits of running and paused sandboxes summed, bytes (gauge; compare with
/// [`NODE_MEMORY`]).
pub const ALLOTTED_MEMORY: &str = "cove_sandboxes_allotted_memory_bytes";

/// HTTP requests answered (counter, labels `listener` = `api`/`data`/`proxy`, `method`,
/// `route` = the matched route's template such as `/v1/sandboxes/{id}` (`unmatched` for none),
/// `status` = the response's code).
pub const HTTP_REQUESTS: &str = "cove_http_requests_total";
/// Seconds from a request's arrival to its response's head (histogram, labels `listener` and
/// `route`); a stream's own length is not in it.
pub const HTTP_DURATION: &str = "cove_http_request_duration_seconds";
/// Warm pools (gauge).
pub const POOLS: &str = "cove_pools";
/// Members of every warm pool (gauge, label `state`: `ready` or `starting`).
pub const POOL_MEMBERS: &str = "cove_pool_members";
/// Ready members every pool keeps, summed (gauge; compare with [`POOL_MEMBERS`]).
pub const POOL_MIN_READY: &str = "cove_pool_min_ready";
/// Creates a pool matched (counter, label `result`: `hit` = served by a ready member, `miss` =
/// started cold, with label `reason`: `empty`, `checkpoint`, `volumes`, `policy_with_start`
/// or `secrets_with_start`), as this replica served them.
pub const POOL_CLAIMS: &str = "cove_pool_claims_total";

/// Renders the installed recorder's series in the Prometheus text format; set by the
/// composition root in [`crate::ControlPlaneConfig::metrics`].
#[derive(Clone)]
pub struct MetricsRender(pub Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for MetricsRender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsRender")
    }
}

/// Counts a finished operation and its run time.
pub(crate) fn operation_finished(kind: OperationKind, state: OperationState, took: Duration) {
    metrics::counter!(OPERATIONS_TOTAL, "kind" => kind.as_str(), "result" => state.as_str())
        .increment(1);
    metrics::histogram!(OPERATION_DURATION, "kind" => kind.as_str()).record(took.as_secs_f64());
}

/// Records whether this replica leads the controllers.
pub(crate) fn leader(leading: bool) {
    metrics::gauge!(LEADER).set(if leading { 1.0 } else { 0.0 });
}

/// Counts an operation taken over from a replica that stopped.
pub(crate) fn taken_over(kind: OperationKind) {
    metrics::counter!(TAKEOVERS_TOTAL, "kind" => kind.as_str()).increment(1);
}

/// Records the time from an accepted create to a running sandbox.
pub(crate) fn create_to_running(took: Duration) {
    metrics::histogram!(CREATE_TO_RUNNING).record(took.as_secs_f64());
}

/// Records how long a checkpoint froze its sandbox.
pub(crate) fn checkpoint_pause(took: Duration) {
    metrics::histogram!(CHECKPOINT_PAUSE).record(took.as_secs_f64());
}

/// Counts a started command.
pub(crate) fn command_created() {
    metrics::counter!(COMMANDS_TOTAL).increment(1);
}

/// Counts `bytes` of `stream` (`stdout`, `stderr` or `stdin`) through the data plane.
pub(crate) fn data_plane_bytes(stream: &'static str, bytes: usize) {
    metrics::counter!(DATA_PLANE_BYTES, "stream" => stream).increment(bytes as u64);
}

/// Counts one answered HTTP request of `listener` (the HTTP surfaces call it for every
/// request); `route` is a route template (never a tenant's path) and a `method` other than the
/// seven common ones counts as `other`, so the series stay few.
pub fn http_request(
    listener: &'static str,
    method: &str,
    route: String,
    status: u16,
    took: Duration,
) {
    let method = match method {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    };
    metrics::counter!(HTTP_REQUESTS, "listener" => listener, "method" => method,
        "route" => route.clone(), "status" => status.to_string())
    .increment(1);
    metrics::histogram!(HTTP_DURATION, "listener" => listener, "route" => route)
        .record(took.as_secs_f64());
}

/// Counts a create a pool matched and served (`result="hit"`).
pub(crate) fn pool_hit() {
    metrics::counter!(POOL_CLAIMS, "result" => "hit").increment(1);
}

/// Counts a create a pool matched but did not serve (`result="miss"`), with why: `empty` (no
/// ready member), or what the create asks that a member cannot take (`checkpoint`, `volumes`,
/// `policy_with_start`, `secrets_with_start`).
pub(crate) fn pool_miss(reason: &'static str) {
    metrics::counter!(POOL_CLAIMS, "result" => "miss", "reason" => reason).increment(1);
}

/// States whose sandboxes hold node resources for the allotment gauges.
const HOLDING: [SandboxState; 2] = [SandboxState::Running, SandboxState::Paused];

impl ControlPlane {
    /// The current series in the Prometheus text format, with the sandbox and node gauges
    /// refreshed (a node that cannot report its capacity leaves its gauges as they were,
    /// logged); `None` when the server installed no recorder.
    ///
    /// # Errors
    /// A store failure while counting sandboxes.
    pub async fn render_metrics(&self) -> Result<Option<String>, ServiceError> {
        let Some(render) = self.inner.cfg.metrics.clone() else {
            return Ok(None);
        };
        let live: Vec<SandboxState> = SandboxState::ALL
            .iter()
            .copied()
            .filter(|s| *s != SandboxState::Deleted)
            .collect();
        let sandboxes = self.store().sandboxes_in(&live).await?;
        for state in live {
            let n = sandboxes.iter().filter(|s| s.state == state).count();
            metrics::gauge!(SANDBOXES, "state" => state.as_str()).set(n as f64);
        }
        let holding = sandboxes.iter().filter(|s| HOLDING.contains(&s.state));
        let (vcpus, memory) = holding.fold((0u64, 0u64), |(c, m), s| {
            (
                c + u64::from(s.resources.vcpus),
                m + (s.resources.memory_mib << 20),
            )
        });
        metrics::gauge!(ALLOTTED_VCPUS).set(vcpus as f64);
        metrics::gauge!(ALLOTTED_MEMORY).set(memory as f64);
        self.pool_gauges().await?;
        match self.node().capacity().await {
            Ok(cap) => {
                metrics::gauge!(NODE_CPUS).set(f64::from(cap.cpus));
                metrics::gauge!(NODE_MEMORY).set(cap.memory_bytes as f64);
                metrics::gauge!(NODE_MEMORY_AVAILABLE).set(cap.memory_available_bytes as f64);
                metrics::gauge!(NODE_SANDBOXES).set(f64::from(cap.sandboxes));
            }
            Err(e) => warn!(error = %e, "node capacity unavailable for /metrics"),
        }
        Ok(Some((render.0)()))
    }

    /// Sets the warm-pool series from the store: totals over every pool, no pool names (they
    /// are tenants' words, and `/metrics` needs no token).
    async fn pool_gauges(&self) -> Result<(), ServiceError> {
        let pools = self.store().list_pools().await?;
        let members = self.store().pool_members().await?;
        let (ready, starting) = members.iter().fold((0u64, 0u64), |(r, s), m| {
            if m.sandbox.state == SandboxState::Running {
                (r + 1, s)
            } else {
                (r, s + 1)
            }
        });
        metrics::gauge!(POOLS).set(pools.len() as f64);
        metrics::gauge!(POOL_MEMBERS, "state" => "ready").set(ready as f64);
        metrics::gauge!(POOL_MEMBERS, "state" => "starting").set(starting as f64);
        let min_ready: u64 = pools.iter().map(|p| u64::from(p.min_ready)).sum();
        metrics::gauge!(POOL_MIN_READY).set(min_ready as f64);
        Ok(())
    }
}
