//! A fake internet for tests and benchmarks, built entirely from namespaces it creates.
//!
//! Its addresses are chosen at run time: [`inet_range`] and [`lab_pool`] are the first two
//! /24s of a fixed candidate list (203.0.113.0/24, 198.51.100.0/24, then the /24s of the
//! benchmarking range 198.18.0.0/15) that no route of the host uses, the same in every process
//! on one host. The addresses below are offsets in `inet_range` (`N` = its network address):
//!
//! ```text
//!  {p}-up      N+1/30  ── veth ──  N+2/30   {p}-inet
//!  (stands for the host: the gateway's         on lo: N+10 (HTTP :80, HTTPS :443),
//!   upstream namespace; HTTP "host service"           N+20 (HTTP :80, HTTPS :443),
//!   on 0.0.0.0:8081)                                  N+53 (DNS :53),
//!                                                     N+30 (HTTP CONNECT proxy :3128),
//!                                                     169.254.169.254 (metadata HTTP :80)
//!  {p}-direct  N+6/30  ── veth ──  N+5/30   {p}-inet   (a path without gateway)
//! ```
//!
//! The metadata address is the real one (the floor must refuse it) but exists only inside
//! `{p}-inet`: nothing of the lab routes from the host's namespace.
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

/// An address of the fake internet: an offset in [`inet_range`] (chosen at run time). It
/// prints as the address (`format!("{WEB_A}")`); [`LabAddr::ip`] gives it as an `Ipv4Addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LabAddr(u8);

impl LabAddr {
    /// The address.
    pub fn ip(self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(inet_range().network()) + u32::from(self.0))
    }
}

impl std::fmt::Display for LabAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.ip().fmt(f)
    }
}

impl From<LabAddr> for Ipv4Addr {
    fn from(a: LabAddr) -> Ipv4Addr {
        a.ip()
    }
}

/// The upstream namespace's address toward the fake internet (a "host address").
pub const UP_ADDR: LabAddr = LabAddr(1);
/// The fake internet's end of the upstream namespace's link.
const INET_UP: LabAddr = LabAddr(2);
/// The fake internet's end of the direct namespace's link.
const INET_DIRECT: LabAddr = LabAddr(5);
/// The direct namespace's address.
const DIRECT_ADDR: LabAddr = LabAddr(6);
/// Web server A: HTTP on 80, HTTPS on 443 (certificate for `allowed.test` and `other.test`).
pub const WEB_A: LabAddr = LabAddr(10);
/// Web server B: HTTP on 80, HTTPS on 443 (the same certificate as A, so a TLS server name of
/// A's can be sent to B).
pub const WEB_B: LabAddr = LabAddr(20);
/// The fake internet's DNS server.
pub const DNS_ADDR: LabAddr = LabAddr(53);
/// The fake internet's HTTP CONNECT proxy (a corporate upstream proxy) on [`PROXY_PORT`]: it
/// tunnels only to addresses of the fake internet and records what it was asked
/// ([`Seen::proxied`]).
pub const PROXY_ADDR: LabAddr = LabAddr(30);
/// The port of [`PROXY_ADDR`].
pub const PROXY_PORT: u16 = 3128;
/// The fake cloud metadata server (HTTP on 80).
pub const METADATA: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
/// The port of the "host loopback service" in the upstream namespace (bound on 0.0.0.0).
pub const HOST_SERVICE_PORT: u16 = 8081;
/// Names the fake DNS server knows: (name, address).
pub fn names() -> Vec<(&'static str, Ipv4Addr)> {
    vec![
        ("allowed.test", WEB_A.ip()),
        ("other.test", WEB_A.ip()),
        ("b.test", WEB_B.ip()),
        ("api.sub.test", WEB_B.ip()),
        ("loop.test", Ipv4Addr::LOCALHOST),
        ("meta.test", METADATA),
    ]
}

/// The fake internet's addresses: the first /24 of the candidates no host route uses.
pub fn inet_range() -> Ipv4Net {
    chosen().0
}

/// The sandbox pool the lab's networks use: the second /24 of the candidates no host route
/// uses.
pub fn lab_pool() -> Ipv4Net {
    chosen().1
}

/// The /24s the lab may use, in order of preference.
fn candidates() -> impl Iterator<Item = Ipv4Net> {
    let bench = u32::from(Ipv4Addr::new(198, 18, 0, 0));
    [
        Ipv4Addr::new(203, 0, 113, 0),
        Ipv4Addr::new(198, 51, 100, 0),
    ]
    .into_iter()
    .chain((0..512u32).map(move |i| Ipv4Addr::from(bench + (i << 8))))
    .filter_map(|a| Ipv4Net::new(a, 24).ok())
}

fn overlaps(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// The first two candidates no non-default route in `routes` overlaps (the first two
/// candidates when fewer are free: [`FakeInternet::create`] then refuses).
pub fn choose_ranges(routes: &[Ipv4Net]) -> (Ipv4Net, Ipv4Net) {
    let mut free =
        candidates().filter(|c| !routes.iter().any(|r| r.prefix_len() > 0 && overlaps(r, c)));
    let mut fallback = candidates();
    let first = free.next().or_else(|| fallback.next());
    let second = free.next().or_else(|| fallback.nth(1));
    match (first, second) {
        (Some(a), Some(b)) => (a, b),
        _ => (Ipv4Net::default(), Ipv4Net::default()),
    }
}

fn chosen() -> (Ipv4Net, Ipv4Net) {
    static CHOSEN: std::sync::OnceLock<(Ipv4Net, Ipv4Net)> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(|| choose_ranges(&cmd::routes(None).unwrap_or_default()))
}

/// Most entries [`Seen`] keeps per list (later ones are dropped).
const SEEN_MAX: usize = 10_000;
/// Most DNS packets [`Seen`] keeps (each at most 4 KiB).
const SEEN_PACKETS: usize = 1_000;

/// What the fake internet's servers received, for tests to check what left the gateway.
#[derive(Debug, Default)]
pub struct Seen {
    dns_names: parking_lot::Mutex<Vec<String>>,
    dns_packets: parking_lot::Mutex<Vec<Vec<u8>>>,
    authorizations: parking_lot::Mutex<Vec<String>>,
    proxied: parking_lot::Mutex<Vec<(String, String)>>,
}

impl Seen {
    /// Every name asked of the fake DNS server (normalised), in order.
    pub fn dns_names(&self) -> Vec<String> {
        self.dns_names.lock().clone()
    }

    /// The raw packets the fake DNS server received (the first `SEEN_PACKETS` of them), in order.
    pub fn dns_packets(&self) -> Vec<Vec<u8>> {
        self.dns_packets.lock().clone()
    }

    /// Every non-empty `Authorization` header the HTTPS servers received, in order.
    pub fn authorizations(&self) -> Vec<String> {
        self.authorizations.lock().clone()
    }

    /// Every CONNECT the proxy ([`PROXY_ADDR`]) received, in order: (`ip:port`,
    /// `Proxy-Authorization` or empty).
    pub fn proxied(&self) -> Vec<(String, String)> {
        self.proxied.lock().clone()
    }

    pub(crate) fn proxied_one(&self, target: String, auth: String) {
        let mut l = self.proxied.lock();
        if l.len() < SEEN_MAX {
            l.push((target, auth));
        }
    }

    fn push(list: &parking_lot::Mutex<Vec<String>>, value: String) {
        let mut l = list.lock();
        if l.len() < SEEN_MAX {
            l.push(value);
        }
    }

    pub(crate) fn dns_name(&self, name: String) {
        Self::push(&self.dns_names, name);
    }

    pub(crate) fn dns_packet(&self, packet: &[u8]) {
        let mut l = self.dns_packets.lock();
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
        // The ranges were chosen free of host routes; a route added since is refused here.
        let host_routes = cmd::routes(None)?;
        for r in [inet_range(), lab_pool()] {
            if let Some(hit) = host_routes
                .iter()
                .find(|h| h.prefix_len() > 0 && overlaps(h, &r))
            {
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
                     addr add {PROXY_ADDR}/32 dev lo\n\
                     addr add {METADATA}/32 dev lo\n\
                     link add i-up type veth peer name eth0 netns {up}\n\
                     addr add {INET_UP}/30 dev i-up\n\
                     link set i-up up\n\
                     link add i-direct type veth peer name eth0 netns {direct}\n\
                     addr add {INET_DIRECT}/30 dev i-direct\n\
                     link set i-direct up\n"
                ),
            )?;
            cmd::ip_batch(Some(&up), &format!("link set lo up\naddr add {UP_ADDR}/30 dev eth0\nlink set eth0 up\nroute add default via {INET_UP}\n"))?;
            cmd::ip_batch(Some(&direct), &format!("link set lo up\naddr add {DIRECT_ADDR}/30 dev eth0\nlink set eth0 up\nroute add default via {INET_DIRECT}\n"))?;
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

    /// A network config whose upstream is this fake internet: pool [`lab_pool`], the given node
    /// prefix, upstream namespace `{prefix}-up`, resolver [`DNS_ADDR`].
    pub fn network_config(&self, node_prefix: &str) -> NetworkConfig {
        let mut c = NetworkConfig::new(
            lab_pool(),
            Upstream {
                netns: Some(self.upstream_ns.clone()),
                resolver: SocketAddrV4::new(DNS_ADDR.ip(), 53),
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
