//! A fake internet for tests and benchmarks, built entirely from namespaces it creates.
//!
//! Topology (all addresses are inside these namespaces; [`FakeInternet::create`] refuses to run
//! when a host route overlaps them):
//!
//! ```text
//!  {p}-up      203.0.113.1/30  ── veth ──  203.0.113.2/30   {p}-inet
//!  (stands for the host: the gateway's         on lo: 203.0.113.10 (HTTP :80, HTTPS :443),
//!   upstream namespace; HTTP "host service"               203.0.113.20 (HTTP :80, HTTPS :443),
//!   on 0.0.0.0:8081)                                      203.0.113.53 (DNS :53),
//!                                                         169.254.169.254 (metadata HTTP :80)
//!  {p}-direct  203.0.113.6/30  ── veth ──  203.0.113.5/30   {p}-inet   (a path without gateway)
//! ```
//!
//! Servers are tokio tasks on the caller's runtime; their sockets live in the namespaces above.

mod bench;
mod clients;
mod servers;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use ipnet::Ipv4Net;
use tokio::task::JoinHandle;

pub use bench::{bench, BenchReport};
pub use clients::{
    check_route, dns_exchange, dns_query, http_download, http_get, https_get, https_get_with,
    DnsAnswer, Download, Reply,
};

use crate::cmd;
use crate::config::{NetworkConfig, Upstream};
use crate::error::{NetworkError, Result};
use crate::sockets::SocketMaker;

/// The upstream namespace's address toward the fake internet (a "host address").
pub const UP_ADDR: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
/// Web server A: HTTP on 80, HTTPS on 443 (certificate for `allowed.test` and `other.test`).
pub const WEB_A: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
/// Web server B: HTTP on 80, HTTPS on 443 (the same certificate as A, so a TLS server name of
/// A's can be sent to B).
pub const WEB_B: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
/// The fake internet's DNS server.
pub const DNS_ADDR: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 53);
/// The fake cloud metadata server (HTTP on 80).
pub const METADATA: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
/// The port of the "host loopback service" in the upstream namespace (bound on 0.0.0.0).
pub const HOST_SERVICE_PORT: u16 = 8081;
/// The sandbox pool the lab's networks use.
pub const LAB_POOL: &str = "198.51.100.0/24";
/// Names the fake DNS server knows: (name, address).
pub const NAMES: &[(&str, Ipv4Addr)] = &[
    ("allowed.test", WEB_A),
    ("other.test", WEB_A),
    ("b.test", WEB_B),
    ("api.sub.test", WEB_B),
    ("loop.test", Ipv4Addr::LOCALHOST),
    ("meta.test", METADATA),
];

const RANGES: &[&str] = &["203.0.113.0/24", "169.254.169.254/32", LAB_POOL];

/// Most entries [`Seen`] keeps per list (later ones are dropped).
const SEEN_MAX: usize = 10_000;
/// Most DNS packets [`Seen`] keeps (each at most 4 KiB).
const SEEN_PACKETS: usize = 1_000;

/// What the fake internet's servers received, for tests to check what left the gateway.
#[derive(Debug, Default)]
pub struct Seen {
    dns_names: std::sync::Mutex<Vec<String>>,
    dns_packets: std::sync::Mutex<Vec<Vec<u8>>>,
    authorizations: std::sync::Mutex<Vec<String>>,
}

impl Seen {
    /// Every name asked of the fake DNS server (normalised), in order.
    pub fn dns_names(&self) -> Vec<String> {
        self.dns_names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The raw packets the fake DNS server received (the first `SEEN_PACKETS` of them), in order.
    pub fn dns_packets(&self) -> Vec<Vec<u8>> {
        self.dns_packets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every non-empty `Authorization` header the HTTPS servers received, in order.
    pub fn authorizations(&self) -> Vec<String> {
        self.authorizations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn push(list: &std::sync::Mutex<Vec<String>>, value: String) {
        let mut l = list.lock().unwrap_or_else(|e| e.into_inner());
        if l.len() < SEEN_MAX {
            l.push(value);
        }
    }

    pub(crate) fn dns_name(&self, name: String) {
        Self::push(&self.dns_names, name);
    }

    pub(crate) fn dns_packet(&self, packet: &[u8]) {
        let mut l = self.dns_packets.lock().unwrap_or_else(|e| e.into_inner());
        if l.len() < SEEN_PACKETS {
            l.push(packet.to_vec());
        }
    }

    pub(crate) fn authorization(&self, value: String) {
        Self::push(&self.authorizations, value);
    }
}

/// The namespaces and servers of one fake internet. Drop does not clean up; call
/// [`FakeInternet::destroy`].
pub struct FakeInternet {
    /// Prefix of the namespaces (`{prefix}-up`, `{prefix}-inet`, `{prefix}-direct`).
    pub prefix: String,
    /// The namespace standing for the host (use as [`Upstream::netns`]).
    pub upstream_ns: String,
    /// The namespace holding the servers.
    pub inet_ns: String,
    /// A client namespace wired straight to the fake internet, for baselines.
    pub direct_ns: String,
    /// PEM of the CA that signed the HTTPS server's certificate.
    pub ca_pem: String,
    /// DNS questions the fake DNS server has received.
    pub dns_queries: Arc<AtomicU64>,
    /// What the servers saw: the names asked of the DNS server and the `Authorization` headers
    /// the HTTPS servers received.
    pub seen: Arc<Seen>,
    tasks: Vec<JoinHandle<()>>,
}

impl FakeInternet {
    /// Creates the namespaces and starts the servers. `prefix` is 1-8 of `[a-z0-9]`; leftovers
    /// with the same prefix are removed first. Errors: a host route overlapping the lab ranges,
    /// `ip` failures, binding.
    pub async fn create(prefix: &str) -> Result<FakeInternet> {
        let host_routes = cmd::routes(None)?;
        for r in RANGES {
            let r: Ipv4Net = r.parse().expect("static range");
            if let Some(hit) = host_routes.iter().find(|h| {
                h.prefix_len() > 0 && (h.contains(&r.network()) || r.contains(&h.network()))
            }) {
                return Err(NetworkError::Config(format!(
                    "host route {hit} overlaps lab range {r}; refusing to build a fake internet"
                )));
            }
        }
        let lab = |s: &str| format!("{prefix}-{s}");
        let (up, inet, direct) = (lab("up"), lab("inet"), lab("direct"));
        destroy_namespaces(prefix)?;
        let built = async {
            for ns in [&up, &inet, &direct] {
                cmd::run("ip", &["netns", "add", ns], None)?;
            }
            cmd::ip_batch(
                Some(&inet),
                &format!(
                    "link set lo up\n\
                     addr add {WEB_A}/32 dev lo\n\
                     addr add {WEB_B}/32 dev lo\n\
                     addr add {DNS_ADDR}/32 dev lo\n\
                     addr add {METADATA}/32 dev lo\n\
                     link add i-up type veth peer name eth0 netns {up}\n\
                     addr add 203.0.113.2/30 dev i-up\n\
                     link set i-up up\n\
                     link add i-direct type veth peer name eth0 netns {direct}\n\
                     addr add 203.0.113.5/30 dev i-direct\n\
                     link set i-direct up\n"
                ),
            )?;
            cmd::ip_batch(Some(&up), &format!("link set lo up\naddr add {UP_ADDR}/30 dev eth0\nlink set eth0 up\nroute add default via 203.0.113.2\n"))?;
            cmd::ip_batch(Some(&direct), "link set lo up\naddr add 203.0.113.6/30 dev eth0\nlink set eth0 up\nroute add default via 203.0.113.5\n")?;
            let inet_maker = SocketMaker::new(Some(&inet))?;
            let up_maker = SocketMaker::new(Some(&up))?;
            let (ca_pem, tasks, dns_queries, seen) =
                servers::start(&inet_maker, &up_maker).await?;
            Ok::<_, NetworkError>((ca_pem, tasks, dns_queries, seen))
        }
        .await;
        let (ca_pem, tasks, dns_queries, seen) = match built {
            Ok(v) => v,
            Err(e) => {
                let _ = destroy_namespaces(prefix);
                return Err(e);
            }
        };
        Ok(FakeInternet {
            prefix: prefix.to_string(),
            upstream_ns: up,
            inet_ns: inet,
            direct_ns: direct,
            ca_pem,
            dns_queries,
            seen,
            tasks,
        })
    }

    /// A network config whose upstream is this fake internet: pool [`LAB_POOL`], the given node
    /// prefix, upstream namespace `{prefix}-up`, resolver [`DNS_ADDR`].
    pub fn network_config(&self, node_prefix: &str) -> NetworkConfig {
        let mut c = NetworkConfig::new(
            LAB_POOL.parse().expect("static pool"),
            Upstream {
                netns: Some(self.upstream_ns.clone()),
                resolver: SocketAddrV4::new(DNS_ADDR, 53),
                tls_roots_pem: Some(self.ca_pem.clone()),
            },
        );
        c.prefix = node_prefix.to_string();
        c.prepared = 4;
        c
    }

    /// Stops the servers and deletes the namespaces.
    pub fn destroy(self) -> Result<()> {
        for t in &self.tasks {
            t.abort();
        }
        destroy_namespaces(&self.prefix)
    }
}

/// Deletes the lab namespaces of `prefix` (those that exist).
pub fn destroy_namespaces(prefix: &str) -> Result<()> {
    let names = cmd::netns_names()?;
    for s in ["up", "inet", "direct"] {
        let ns = format!("{prefix}-{s}");
        if names.contains(&ns) {
            cmd::run("ip", &["netns", "del", &ns], None)?;
        }
    }
    Ok(())
}
