//! Node configuration for sandbox networks and the checks made against the host at start.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use ipnet::Ipv4Net;

use crate::cmd;
use crate::error::{NetworkError, Result};

/// Where the gateway's upstream (internet-side) sockets live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// Named network namespace (under `/run/netns`) the gateway makes upstream sockets in; `None`
    /// = the node process's own namespace (production: the host).
    pub netns: Option<String>,
    /// The DNS resolver the gateway forwards allowed questions to (production: the host's resolver,
    /// see [`Upstream::host`]).
    pub resolver: SocketAddrV4,
    /// PEM of the CAs upstream servers must chain to when the gateway terminates TLS (secret
    /// substitution); `None` = the host's trust store.
    pub tls_roots_pem: Option<String>,
}

impl Upstream {
    /// The host namespace and the first IPv4 `nameserver` of `/etc/resolv.conf`.
    /// Errors: [`NetworkError::Config`] when the file has no IPv4 nameserver.
    pub fn host() -> Result<Self> {
        let text = std::fs::read_to_string("/etc/resolv.conf")
            .map_err(|e| NetworkError::io("reading /etc/resolv.conf", e))?;
        let resolver = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("nameserver"))
            .find_map(|rest| rest.trim().parse::<Ipv4Addr>().ok())
            .ok_or_else(|| {
                NetworkError::Config("/etc/resolv.conf has no IPv4 nameserver".into())
            })?;
        Ok(Upstream {
            netns: None,
            resolver: SocketAddrV4::new(resolver, 53),
            tls_roots_pem: None,
        })
    }
}

/// The node's network settings.
#[derive(Debug, Clone)]
pub struct NetworkConfig {
    /// Name prefix of every namespace and link this node creates (1–8 of `[a-z0-9]`). Recovery
    /// removes or re-adopts everything with it, so two nodes on one host need different prefixes.
    pub prefix: String,
    /// Sandbox addresses. The first host address is the gateway; each sandbox gets one /32.
    /// Refused at start when it overlaps a route of the host or of the upstream namespace.
    pub pool: Ipv4Net,
    /// How many namespaces are kept prepared so taking one is fast.
    pub prepared: usize,
    /// The TCP port of the transparent proxy on the gateway address.
    pub proxy_port: u16,
    /// The internet side of the gateway.
    pub upstream: Upstream,
    /// Allow policies to reach private ranges (10/8, 172.16/12, 192.168/16, 100.64/10).
    pub allow_private: bool,
    /// More addresses no policy opens (the control plane, other services of the node).
    pub extra_floor: Vec<Ipv4Net>,
    /// Time to connect upstream before the sandbox's connection is closed.
    pub connect_timeout: Duration,
    /// Time the gateway waits for a TLS ClientHello or HTTP request head when a domain rule needs
    /// it (or for secret interception on port 443). A protocol where the server speaks first is
    /// judged without a name after this time, so with domain rules it starts this much later.
    pub sniff_timeout: Duration,
    /// An HTTP CONNECT proxy every allowed connection goes out through (a corporate network's
    /// upstream proxy); `None` = straight to the destination. DNS still goes to
    /// [`Upstream::resolver`].
    pub upstream_proxy: Option<crate::UpstreamProxy>,
    /// PEM of CAs every sandbox and build trusts besides its own bundle (a corporate network's
    /// TLS-inspecting CA): the node agent installs it in each sandbox's trust store, and the
    /// gateway trusts it too when it verifies upstream servers itself (secret substitution).
    pub sandbox_ca_pem: Option<String>,
}

impl NetworkConfig {
    /// A configuration with the defaults: prefix `cove`, 8 prepared, proxy on 15001, private
    /// ranges closed, 10 s connect and 5 s sniff timeouts.
    pub fn new(pool: Ipv4Net, upstream: Upstream) -> Self {
        NetworkConfig {
            prefix: "cove".into(),
            pool,
            prepared: 8,
            proxy_port: 15001,
            upstream,
            allow_private: false,
            extra_floor: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            sniff_timeout: Duration::from_secs(5),
            upstream_proxy: None,
            sandbox_ca_pem: None,
        }
    }

    /// The gateway's address (first host of the pool).
    pub fn gateway(&self) -> Ipv4Addr {
        offset_addr(self.pool, 1)
    }

    /// Number of sandbox slots (pool hosts minus the gateway).
    pub fn slots(&self) -> u32 {
        let hosts = 1u64 << (32 - u32::from(self.pool.prefix_len()));
        (hosts.saturating_sub(3)).min(65_535) as u32
    }

    /// The address of sandbox slot `slot` (1..=`slots()`): pool network + 1 + slot.
    pub(crate) fn slot_addr(&self, slot: u32) -> Ipv4Addr {
        offset_addr(self.pool, slot + 1)
    }

    /// The sandbox slot a pool address belongs to (None for the gateway, the network and
    /// broadcast addresses, and addresses outside the pool).
    pub fn addr_slot(&self, ip: Ipv4Addr) -> Option<u32> {
        if !self.pool.contains(&ip) {
            return None;
        }
        let off = u32::from(ip) - u32::from(self.pool.network());
        (off >= 2 && off - 1 <= self.slots()).then(|| off - 1)
    }

    /// Checks the settings themselves (not the host).
    pub fn validate(&self) -> Result<()> {
        let p = &self.prefix;
        if p.is_empty()
            || p.len() > 8
            || !p
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            return Err(NetworkError::Config(format!(
                "prefix {p:?} must be 1-8 of [a-z0-9]"
            )));
        }
        if self.pool.prefix_len() > 29 || self.pool.prefix_len() < 16 {
            return Err(NetworkError::Config(format!(
                "pool {} must be a /16 to /29",
                self.pool
            )));
        }
        if self.pool != self.pool.trunc() {
            return Err(NetworkError::Config(format!(
                "pool {} has host bits set",
                self.pool
            )));
        }
        if self.prepared > 256 {
            return Err(NetworkError::Config("prepared must be at most 256".into()));
        }
        if let Some(pem) = &self.sandbox_ca_pem {
            check_ca_pem(pem)?;
        }
        Ok(())
    }

    /// Refuses a pool overlapping any non-default route of the host namespace or of the upstream
    /// namespace, read now. Errors: [`NetworkError::PoolOverlapsRoute`].
    pub fn check_routes(&self) -> Result<()> {
        let mut spaces = vec![None];
        if let Some(ns) = &self.upstream.netns {
            spaces.push(Some(ns.as_str()));
        }
        for ns in spaces {
            for route in cmd::routes(ns)? {
                if route.prefix_len() > 0
                    && (route.contains(&self.pool.network())
                        || self.pool.contains(&route.network()))
                {
                    return Err(NetworkError::PoolOverlapsRoute {
                        pool: self.pool,
                        route,
                        namespace: ns.unwrap_or("host").to_string(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Most bytes of [`NetworkConfig::sandbox_ca_pem`] (with a sandbox's interception CA it must
/// fit what a VM's guest agent takes, 16 KiB).
pub const MAX_SANDBOX_CA_BYTES: usize = 12 * 1024;

/// A sandbox CA must be PEM certificates only, at least one, at most
/// [`MAX_SANDBOX_CA_BYTES`].
fn check_ca_pem(pem: &str) -> Result<()> {
    use rustls::pki_types::pem::{PemObject, SectionKind};
    if pem.len() > MAX_SANDBOX_CA_BYTES {
        return Err(NetworkError::Config(format!(
            "the sandbox CA is {} bytes, at most {MAX_SANDBOX_CA_BYTES}",
            pem.len()
        )));
    }
    let mut certs = 0;
    for item in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem.as_bytes()) {
        match item {
            Ok((SectionKind::Certificate, _)) => certs += 1,
            Ok(_) => {
                return Err(NetworkError::Config(
                    "the sandbox CA file holds something other than certificates (a key?)".into(),
                ))
            }
            Err(e) => {
                return Err(NetworkError::Config(format!(
                    "the sandbox CA file is not PEM: {e}"
                )))
            }
        }
    }
    if certs == 0 {
        return Err(NetworkError::Config(
            "the sandbox CA file holds no PEM certificate".into(),
        ));
    }
    Ok(())
}

fn offset_addr(net: Ipv4Net, off: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net.network()) + off)
}

/// Addresses no policy opens.
#[derive(Debug, Clone)]
pub struct Floor {
    nets: Vec<Ipv4Net>,
}

const ALWAYS: &[&str] = &[
    "0.0.0.0/8",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
];
const PRIVATE: &[&str] = &[
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
];

impl Floor {
    /// The floor for `config`: loopback, link-local (so 169.254.169.254), multicast/reserved, the
    /// sandbox pool (the gateway and other sandboxes), every address of the upstream namespace's
    /// interfaces (the host's own addresses), the resolver, `extra_floor`, and the private ranges
    /// unless `allow_private`.
    pub fn build(config: &NetworkConfig) -> Result<Self> {
        let mut nets: Vec<Ipv4Net> = ALWAYS
            .iter()
            .map(|s| s.parse().expect("static net"))
            .collect();
        if !config.allow_private {
            nets.extend(
                PRIVATE
                    .iter()
                    .map(|s| s.parse::<Ipv4Net>().expect("static net")),
            );
        }
        nets.push(config.pool);
        nets.push(Ipv4Net::from(*config.upstream.resolver.ip()));
        nets.extend(
            cmd::addresses(config.upstream.netns.as_deref())?
                .into_iter()
                .map(Ipv4Net::from),
        );
        nets.extend(config.extra_floor.iter().copied());
        Ok(Floor { nets })
    }

    /// True when `ip` is in the floor.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.nets.iter().any(|n| n.contains(&ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pool: &str) -> NetworkConfig {
        NetworkConfig::new(
            pool.parse().expect("pool"),
            Upstream {
                netns: None,
                resolver: "127.0.0.53:53".parse().expect("sa"),
                tls_roots_pem: None,
            },
        )
    }

    #[test]
    fn slots_map_to_addresses_and_back() {
        let c = cfg("198.51.100.0/24");
        assert_eq!(c.gateway(), Ipv4Addr::new(198, 51, 100, 1));
        assert_eq!(c.slots(), 253);
        assert_eq!(c.slot_addr(1), Ipv4Addr::new(198, 51, 100, 2));
        assert_eq!(c.slot_addr(253), Ipv4Addr::new(198, 51, 100, 254));
        assert_eq!(c.addr_slot(Ipv4Addr::new(198, 51, 100, 2)), Some(1));
        assert_eq!(c.addr_slot(Ipv4Addr::new(198, 51, 100, 1)), None);
        assert_eq!(c.addr_slot(Ipv4Addr::new(198, 51, 100, 255)), None);
        assert!(c.validate().is_ok());
        let mut bad = cfg("198.51.100.0/24");
        bad.prefix = "Bad-Prefix".into();
        assert!(bad.validate().is_err());
    }

    #[test]
    fn floor_closes_loopback_metadata_private_pool_and_host() {
        let mut c = cfg("198.51.100.0/24");
        c.extra_floor = vec!["203.0.113.99/32".parse().expect("net")];
        let floor = Floor::build(&c).expect("floor");
        for ip in [
            "127.0.0.1",
            "127.8.9.10",
            "169.254.169.254",
            "10.1.2.3",
            "172.20.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "198.51.100.1",
            "198.51.100.77",
            "127.0.0.53",
            "224.0.0.1",
            "0.0.0.0",
            "203.0.113.99",
        ] {
            assert!(
                floor.contains(ip.parse().expect("ip")),
                "{ip} must be in the floor"
            );
        }
        for host_ip in cmd::addresses(None).expect("host addresses") {
            assert!(floor.contains(host_ip), "host address {host_ip}");
        }
        assert!(!floor.contains("203.0.113.10".parse().expect("ip")));
        c.allow_private = true;
        let open = Floor::build(&c).expect("floor");
        assert!(!open.contains("10.1.2.3".parse().expect("ip")));
        assert!(open.contains("169.254.169.254".parse().expect("ip")));
    }
}
