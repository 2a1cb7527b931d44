//! Sandbox networks for the node agent: a network namespace per sandbox, and an egress gateway
//! in the node that enforces each sandbox's policy.
//!
//! # What a sandbox gets
//! A namespace `{prefix}-s{slot}` with `eth0` holding one /32 from the node's pool, a route to
//! the gateway (the pool's first address) and a default route via it. Its resolver is the
//! gateway ([`Attachment::resolv_conf`]). Namespaces are prepared ahead in a small pool, so
//! [`Network::attach`] normally takes microseconds.
//!
//! # The gateway
//! The host ends of the veths sit in a gateway namespace `{prefix}-gw` that forwards nothing
//! (see [`plumbing`] for why a separate namespace). nftables there DNATs every TCP connection
//! to the in-process transparent proxy, accepts UDP only for the gateway's DNS on port 53, drops
//! everything else (port 53 elsewhere included) and drops packets whose source address is not
//! the sandbox's own. The proxy reads the original destination, refuses the floor, judges the
//! connection with the sandbox's [`EgressPolicy`] (reading TLS SNI or HTTP `Host` when a domain
//! rule needs it), and connects from the upstream namespace ([`Upstream`]: the host in
//! production; tests point it at a fake internet). The DNS server answers only names the policy
//! allows, forwarding them to the upstream resolver; otherwise REFUSED with no upstream query.
//!
//! # The floor (no policy opens it)
//! Loopback, link-local (so `169.254.169.254`), multicast/reserved, the sandbox pool (the
//! gateway and other sandboxes), every address of the upstream namespace (the host's own
//! addresses, so its services on any interface), the resolver, [`NetworkConfig::extra_floor`]
//! (the control plane), and the private ranges unless [`NetworkConfig::allow_private`].
//!
//! # What the node agent calls
//! * **Node start / crash recovery**: [`Network::start`]`(config, adopt)` with the sandboxes it
//!   still runs (sandbox id, persisted [`Attachment::netns`], policy). Everything else with the
//!   prefix is removed; adopted namespaces are re-plumbed (same address). [`Recovery`] says what
//!   happened; `missing` sandboxes need a fresh attach.
//! * **Create**: [`Network::attach`]`(id, policy)` → [`Attachment`]: join `netns_path` (runc's
//!   network namespace `path`) and write `resolv_conf()` into the sandbox. Persist `netns`.
//! * **Delete**: [`Network::release`]`(id)`; removes every link, route, rule and address.
//! * **Suspend** (processes stopped): `release`; **resume**: `attach` again (a new address).
//!   A freeze-only pause needs nothing.
//! * **Policy change** (`PUT /v1/sandboxes/{id}/network`): [`Network::set_policy`]; the next
//!   connection follows it. [`Network::policy`] for GET.
//! * **Counters / events**: [`Network::counters`], [`Network::denied_events`] (the
//!   `network_denied` event: [`DeniedEvent`]).
//! * **Node shutdown**: [`Network::shutdown`] (or [`Network::close`] on a shared handle)
//!   removes everything; [`Network::close_keeping_attached`] removes everything but the
//!   attached sandboxes' own namespaces (the ready pool, the gateway namespace with every veth
//!   and the nft table), which the next start adopts; dropping the handle instead stops serving
//!   and leaves everything for the next start's recovery ([`Network::attached`] tells whether
//!   any sandbox needs that).
//!
//! * **Secrets** (on create, after attach): [`Network::intercept`]`(id, secrets)` →
//!   [`Interception`]: install `ca_pem` in the sandbox's trust store and set each secret's
//!   environment variable to its placeholder. The value stays in the node.
//!
//! # Testing and measuring
//! With the `lab` feature (tests, the e2e harness and cove-bench only; a production build does
//! not contain it), `lab::FakeInternet` builds a fake internet from namespaces it creates (HTTP,
//! HTTPS with a test CA, DNS, a metadata server on 169.254.169.254, a "host" service) and
//! `lab::FakeInternet::network_config` points a gateway at it. `lab::bench()` measures
//! request setup and a download through the gateway beside a direct veth path (also as
//! `cargo run -p cove-network --release --example gateway_bench -- ROUNDS MIB`). All need root.
//!
//! # Logs
//! Whatever a sandbox sends, the gateway's log stays bounded: a warning a sandbox can cause
//! (a TLS hello the gateway cannot parse) is rate-limited per sandbox ([`warn::RateLimit`]) and
//! shows at most a short escaped prefix of the sandbox's bytes ([`warn::escaped_prefix`]).
//!
//! # Limits
//! Interception covers TLS on port 443 toward hosts a secret names, on an address the gateway's
//! own lookup gives that host, HTTP/1.1 inside (ALPN `http/1.1`); plain HTTP never gets a
//! secret. Responses there come back with each value replaced by its placeholder; an encoded
//! (compressed) response is refused. UDP other than DNS and IPv6 are not forwarded.
//! DNS is UDP only.

pub mod cmd;
pub mod config;
mod counters;
mod dns;
pub mod error;
mod intercept;
#[cfg(feature = "lab")]
pub mod lab;
mod network;
pub mod plumbing;
pub mod policy;
mod proxy;
mod relay;
mod scrub;
pub mod sniff;
mod sockets;
mod upstream_proxy;
pub mod warn;

pub use cmd::run_in_netns;
pub use config::{Floor, NetworkConfig, Upstream};
pub use counters::{
    DeniedEvent, DeniedReason, NetworkCounters, GATEWAY_BYTES, GATEWAY_CONNECTIONS, GATEWAY_DNS,
};
pub use error::{NetworkError, Result};
pub use intercept::{Interception, Reuse, Secret};
pub use network::{Adopt, Attachment, Network, Recovery, MAX_CONNECTIONS};
pub use plumbing::{inventory, Inventory};
pub use policy::{EgressPolicy, EgressRule, Verdict};
pub use upstream_proxy::UpstreamProxy;
pub use warn::RateLimit;
