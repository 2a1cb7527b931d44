//! Sandbox networks on the node: the egress policy of a running sandbox (read and changed live),
//! its counters, and the connections the gateway refused.

use async_trait::async_trait;
use cove_domain::{EgressPolicy, EgressRule};
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};

use crate::{ByteStream, NodeError};

/// An HTTP request to a port of a sandbox (the proxy of `/v1/sandboxes/{id}/ports/{port}/..`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortRequest {
    /// TCP port in the sandbox (1-65535).
    pub port: u16,
    /// HTTP method.
    pub method: String,
    /// Path and query to send (`/index.html?x=1`).
    pub path_and_query: String,
    /// Headers to send (hop-by-hop ones already removed), in order.
    pub headers: Vec<(String, Vec<u8>)>,
}

/// The sandbox's answer to a [`PortRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortResponse {
    /// HTTP status.
    pub status: u16,
    /// Response headers (hop-by-hop ones removed), in order.
    pub headers: Vec<(String, Vec<u8>)>,
}

/// A secret the node's gateway substitutes: the sandbox gets a placeholder in its environment,
/// and requests over TLS toward `hosts` get the value in place of the placeholder.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSecret {
    /// The real value (never enters the sandbox, never logged).
    pub value: String,
    /// Exact domains or `*.domain` entries the value may be sent to.
    pub hosts: Vec<EgressRule>,
}

impl std::fmt::Debug for LaunchSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchSecret")
            .field("value", &"<redacted>")
            .field("hosts", &self.hosts)
            .finish()
    }
}

/// Traffic of one sandbox through the gateway since it was created: the node carries the counts
/// across a suspend and wake (in the snapshot), a rollback, and a node restart (in its own
/// record, written every few seconds and at shutdown, so a `kill -9` loses at most the last
/// few seconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkCounters {
    /// Bytes the sandbox sent (payload).
    pub bytes_out: u64,
    /// Bytes delivered to the sandbox (payload).
    pub bytes_in: u64,
    /// TCP connections let through.
    pub connections_allowed: u64,
    /// TCP connections refused (policy or floor).
    pub connections_denied: u64,
    /// DNS questions answered.
    pub dns_answered: u64,
    /// DNS questions refused.
    pub dns_refused: u64,
}

/// A sandbox's network as the node runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxNetworkInfo {
    /// The policy the gateway enforces now.
    pub policy: EgressPolicy,
    /// Counters since the sandbox was created.
    pub counters: NetworkCounters,
    /// The sandbox's address behind the gateway.
    pub address: Option<String>,
}

/// A connection or DNS question the gateway refused (the `network_denied` event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkDenied {
    /// The sandbox that tried.
    pub sandbox_id: String,
    /// What it tried to reach: `name`, `ip:port` or `name (ip:port)`.
    pub destination: String,
    /// `tcp` or `dns`.
    pub protocol: String,
    /// Why: `floor` (never reachable), `denied` (a deny rule), `not_allowed` (internet off and
    /// no allow rule).
    pub reason: String,
    /// The host it tried: the name the connection or question carried, else the address
    /// (older nodes: none).
    #[serde(default)]
    pub host: Option<String>,
    /// The port it tried (none for a DNS question and from older nodes).
    #[serde(default)]
    pub port: Option<u16>,
    /// The rule that refused it, as a user reads it (older nodes: none).
    #[serde(default)]
    pub rule: Option<String>,
}

/// Sandbox networks on the node.
#[async_trait]
pub trait NodeNetwork: Send + Sync + 'static {
    /// The network of a running or paused sandbox. [`NodeError::SandboxNotFound`] when the
    /// node holds no network for it (not started here, suspended, networking off).
    async fn sandbox_network(&self, id: &str) -> Result<SandboxNetworkInfo, NodeError>;

    /// Replaces the egress policy of a running or paused sandbox; the next connection and DNS
    /// question follow it (open connections keep going). [`NodeError::SandboxNotFound`] as for
    /// [`NodeNetwork::sandbox_network`]; [`NodeError::Unsupported`] for a policy other than the
    /// default when the node has no sandbox network.
    async fn set_sandbox_network(&self, id: &str, policy: EgressPolicy) -> Result<(), NodeError>;

    /// Hands `secrets` to the gateway of a running sandbox that trusts a gateway CA (started
    /// with secrets or with [`crate::SandboxLaunch::arm_secrets`]): after a node restart (the
    /// node keeps no value across restarts) with the same secrets, or to a warm pool member at
    /// its claim. The sandbox keeps the CA it trusts and the placeholders of names it had;
    /// new names get new placeholders, which commands started from then on get in their
    /// environment. [`NodeError::SandboxNotFound`] as for [`NodeNetwork::sandbox_network`];
    /// [`NodeError::Unsupported`] when the sandbox trusts no gateway CA (it was started
    /// without secrets and without `arm_secrets`).
    async fn rearm_secrets(
        &self,
        id: &str,
        secrets: std::collections::BTreeMap<String, LaunchSecret>,
    ) -> Result<(), NodeError>;

    /// Sends an HTTP/1.1 request with `body` to a port of a running sandbox and returns the
    /// answer's head and body. A request with an `upgrade` header (a WebSocket) is sent without
    /// a body; when the sandbox answers `101`, `body` is written to the upgraded connection and
    /// the returned stream is what the sandbox sends on it, each until its end.
    /// [`NodeError::PortClosed`] when nothing listens there (or it does not speak HTTP);
    /// [`NodeError::SandboxNotFound`] without a network for it.
    async fn forward_http(
        &self,
        id: &str,
        request: PortRequest,
        body: ByteStream,
    ) -> Result<(PortResponse, ByteStream), NodeError>;

    /// Refused connections and DNS questions of every sandbox, live from now on (a slow reader
    /// loses the oldest). Ends only when the node stops.
    fn network_denials(&self) -> BoxStream<'static, NetworkDenied>;
}
