//! Sandboxes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{EgressPolicy, EgressRule, Operation, Resources, ResourcesRequest, SandboxState};

/// `POST /v1/sandboxes` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandboxRequest {
    /// Template name (default `base`).
    #[serde(default)]
    pub template: Option<String>,
    /// Release number of the template (default: its latest ready release).
    #[serde(default)]
    pub release: Option<u32>,
    /// The runtime to run on (`runc`, `qemu`, `gvisor`; `GET /v1/capabilities` names the
    /// server's).
    /// Default: the server's. One the server does not offer is `400 invalid_argument`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Resource limits.
    #[serde(default)]
    pub resources: Option<ResourcesRequest>,
    /// Environment for every command of the sandbox (a command's own env overrides it).
    /// Names match `[A-Za-z_][A-Za-z0-9_]*`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Free-form labels (at most 64 keys, 256 bytes per key, 4096 bytes per value).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Default working directory of commands (default: the template's, `/home/user` in `base`).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Default user of commands (default: the template's, `user` in `base`).
    #[serde(default)]
    pub user: Option<String>,
    /// Suspend the sandbox after this many seconds without command activity or API access
    /// (default 21600 = 6 h; 0 = never). A command that is still running counts as activity.
    #[serde(default)]
    pub idle_timeout_s: Option<u64>,
    /// Delete the sandbox this many seconds after its creation, whatever its state (default:
    /// never). It sets the sandbox's `expires_at`; not with `expires_at`.
    #[serde(default)]
    pub ttl_s: Option<u64>,
    /// When the sandbox expires (RFC 3339, in the future, at most 10 years ahead; default:
    /// never, or `ttl_s` after creation). `PUT /v1/sandboxes/{id}/expiry` changes it live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// What its expiry does: `delete` (default), `suspend` or `pause`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_expiry: Option<crate::OnExpiry>,
    /// Egress policy: `{internet (default true), allow: [..], deny: [..]}`; entries are IPv4
    /// CIDRs, IPv4 addresses, domains or `*.domain`. Default: the internet open, no rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<EgressPolicy>,
    /// Secrets the node's gateway substitutes: each name is an environment variable of every
    /// command holding a placeholder; requests over HTTPS toward the secret's `hosts` carry the
    /// value in place of the placeholder. Values are never shown, logged or stored in clear.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, SecretRequest>,
    /// Start from this `ready` checkpoint (`ck-…`) instead of the template's root filesystem:
    /// its files (and memory, on runtimes that saved it) are restored. The template, release
    /// and resources are the checkpoint's, so `template`, `release` and `resources` must be
    /// absent; `env`, `cwd` and `user` default to the checkpoint's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// Whether the sandbox's ports are reachable without a credential (default `false`: the
    /// admin token, the port token or a port cookie is needed). `PUT
    /// /v1/sandboxes/{id}/ports` changes it live.
    #[serde(default, skip_serializing_if = "is_false")]
    pub public: bool,
    /// Volumes to mount (`POST /v1/volumes` made them; at most 16, no path or volume twice).
    /// On the runc runtime only (`400 unsupported` elsewhere). Volumes are node-local: on a
    /// cluster every one must be on one node (`400 invalid_argument` otherwise), and the
    /// sandbox runs on that node only (`503 unavailable` while it is not ready).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<crate::VolumeMount>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One secret of a create request.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretRequest {
    /// The value (never enters the sandbox). Non-empty, no CR, LF or NUL, at most 8 KiB.
    pub value: String,
    /// Hosts that receive the value: exact domains or `*.domain` (at least one).
    #[schema(value_type = Vec<String>)]
    pub hosts: Vec<EgressRule>,
}

impl std::fmt::Debug for SecretRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretRequest")
            .field("value", &"<redacted>")
            .field("hosts", &self.hosts)
            .finish()
    }
}

/// A secret as a sandbox shows it: where its value goes, never the value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SandboxSecret {
    /// Hosts that receive the value.
    #[schema(value_type = Vec<String>)]
    pub hosts: Vec<EgressRule>,
}

/// `GET /v1/sandboxes/{id}/network` (and the answer of `PUT`): the egress policy and the
/// gateway's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SandboxNetwork {
    /// The sandbox.
    pub sandbox_id: String,
    /// The egress policy (`PUT` replaces it; the next connection follows it).
    pub network: EgressPolicy,
    /// Whether a gateway enforces it now (false while the sandbox is suspended, or on a node
    /// without sandbox networks, where sandboxes have loopback only).
    pub enforced: bool,
    /// The sandbox's address behind the gateway, while enforced.
    #[serde(default)]
    pub address: Option<String>,
    /// Traffic through the gateway since the network was attached (zero when not enforced; a
    /// wake or a server restart starts again from zero).
    pub counters: NetworkCounters,
}

/// Traffic counters of a sandbox's network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NetworkCounters {
    /// Bytes the sandbox sent through the gateway (payload).
    pub bytes_out: u64,
    /// Bytes the gateway delivered to the sandbox (payload).
    pub bytes_in: u64,
    /// TCP connections let through.
    pub connections_allowed: u64,
    /// TCP connections refused (by the policy or the floor).
    pub connections_denied: u64,
    /// DNS questions answered.
    pub dns_answered: u64,
    /// DNS questions refused.
    pub dns_refused: u64,
}

/// A sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Sandbox {
    /// Id (`sb-` + 16 lowercase letters/digits); also its hostname.
    pub id: String,
    /// The org it belongs to.
    #[serde(default = "crate::default_org")]
    pub org: String,
    /// Template name.
    pub template: String,
    /// Release number it runs.
    pub release: u32,
    /// Content digest of that release (`sha256:…`; absent for releases built before digests).
    #[serde(default)]
    pub release_digest: Option<String>,
    /// Current state.
    pub state: SandboxState,
    /// Why it is `failed` (or other detail of the state).
    pub state_reason: Option<String>,
    /// Runtime isolating it (`runc`, `qemu`, `gvisor`).
    pub runtime: String,
    /// Resource limits.
    pub resources: Resources,
    /// Sandbox-wide environment.
    pub env: BTreeMap<String, String>,
    /// Labels.
    pub metadata: BTreeMap<String, String>,
    /// Default working directory of commands.
    pub cwd: String,
    /// Default user of commands.
    pub user: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last state change.
    pub updated_at: DateTime<Utc>,
    /// Seconds without activity after which the sandbox is suspended (0 = never).
    #[serde(default)]
    pub idle_timeout_s: u64,
    /// Seconds after creation at which the sandbox is deleted (`None` = never), as created.
    #[serde(default)]
    pub ttl_s: Option<u64>,
    /// When the sandbox expires (`None` = never): it is then deleted or suspended, as
    /// `on_expiry` says. Set by `ttl_s` or `expires_at` at create, and by `PUT
    /// /v1/sandboxes/{id}/expiry`; an expiry that suspends clears it.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    /// What its expiry does: `delete`, `suspend` or `pause`.
    #[serde(default)]
    pub on_expiry: crate::OnExpiry,
    /// Last command activity or API access (flushed from memory every few seconds, so it may lag
    /// by that much).
    #[serde(default)]
    pub last_activity_at: Option<DateTime<Utc>>,
    /// After a `wake`: whether process memory was restored (`false` on runc, where waking
    /// restarts the sandbox from its saved files and the commands from before the suspend are
    /// gone). `None` until the sandbox is first woken.
    #[serde(default)]
    pub memory_restored: Option<bool>,
    /// Its egress policy.
    #[serde(default)]
    pub network: EgressPolicy,
    /// Its secrets: names and hosts (values are never shown).
    #[serde(default)]
    pub secrets: BTreeMap<String, SandboxSecret>,
    /// Whether its ports are reachable without a credential (see `GET
    /// /v1/sandboxes/{id}/ports`).
    #[serde(default)]
    pub public: bool,
    /// The volumes it mounts (kept across suspend, wake and restarts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<crate::VolumeMount>,
}

/// `PUT /v1/sandboxes/{id}/expiry` body: exactly one of `expires_at` and `in_s`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetExpiryRequest {
    /// When the sandbox expires (RFC 3339; at most 10 years ahead; a time past makes it
    /// expire at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// Or: this many seconds from now (0 to 315360000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_s: Option<u64>,
    /// What the expiry does: `delete`, `suspend` or `pause` (default: what it did before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_expiry: Option<crate::OnExpiry>,
}

/// `202` answer of `POST /v1/sandboxes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CreateSandboxResponse {
    /// The sandbox (state `creating`).
    pub sandbox: Sandbox,
    /// The create operation to poll.
    pub operation: Operation,
}

/// `GET /v1/sandboxes` answer. Ordered by creation time, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SandboxList {
    /// One page of sandboxes.
    pub sandboxes: Vec<Sandbox>,
    /// Pass as `?cursor=` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// `GET`/`PUT /v1/sandboxes/{id}/ports`: how to reach the sandbox's ports. Two ways in, the
/// same access rules:
/// * the path proxy on the management API: `{path}{port}/{rest}`;
/// * the proxy listener (`cove server --proxy-listen`), by host name: `host` with `{port}` in
///   place of the port (`8000-sb-….localhost:7704`), the form a browser needs.
///
/// Unless `public`, a request needs the admin bearer token (path proxy only), the port token
/// (header `x-cove-port-token` or query `cove_port_token`), or the cookie a one-time link
/// (`POST /v1/sandboxes/{id}/ports:link`) sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SandboxPorts {
    /// The sandbox.
    pub sandbox_id: String,
    /// Its port token (stable for the sandbox's life).
    pub token: String,
    /// The path prefix of its ports: `/v1/sandboxes/{id}/ports/`.
    pub path: String,
    /// Whether its ports are reachable without a credential.
    #[serde(default)]
    pub public: bool,
    /// Host (and port) of its ports on the proxy listener with `{port}` in place of the
    /// sandbox port, e.g. `{port}-sb-0123456789abcdef.localhost:7704`; absent when the server
    /// has no proxy listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// TCP ports its release `EXPOSE`s (its template file's `EXPOSE` lines): the ports to
    /// preview, at `{path}{port}/` or on `host`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exposed: Vec<u16>,
}

/// `PUT /v1/sandboxes/{id}/ports` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPortsRequest {
    /// Whether the sandbox's ports are reachable without a credential; the next request
    /// follows it (open connections, such as a WebSocket, keep going).
    pub public: bool,
}

/// `POST /v1/sandboxes/{id}/ports:link` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PortLinkRequest {
    /// The sandbox port (1-65535).
    pub port: u16,
    /// Where the link lands after it set its cookie (default `/`); a path, optionally with a
    /// query, starting with `/`.
    #[serde(default)]
    pub path: Option<String>,
}

/// `201` answer of `POST /v1/sandboxes/{id}/ports:link`: a one-time link to a port on the proxy
/// listener. The first visit before `expires_at` sets an `HttpOnly` cookie for that host (the
/// sandbox and port) and redirects (`303`) to `path`; a second visit is refused (`401`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PortLink {
    /// The sandbox.
    pub sandbox_id: String,
    /// The sandbox port.
    pub port: u16,
    /// The link (`http://{port}-{id}.{domain}:{proxy port}{path}?cove_link=…`).
    pub url: String,
    /// After this the link is refused (5 minutes after it was made).
    pub expires_at: DateTime<Utc>,
}
