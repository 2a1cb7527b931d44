//! Shared fixture: a fake internet plus a gateway, both under unique prefixes, removed at the end
//! of the test even when it panics.

#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use cove_network::lab::{self, DnsAnswer, FakeInternet};
use cove_network::{plumbing, EgressPolicy, Network};

/// Per-request timeout inside tests.
pub const TIMEOUT: Duration = Duration::from_secs(3);

pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "these tests create network namespaces and need root"
    );
}

/// Deletes every namespace of a node prefix and of a lab prefix (sync, for Drop).
pub fn sweep(node_prefix: &str, lab_prefix: &str) {
    let names = cove_network::cmd::netns_names().unwrap_or_default();
    for n in names {
        let ours = n == plumbing::gateway_ns(node_prefix)
            || plumbing::parse_sandbox_ns(node_prefix, &n).is_some()
            || [
                format!("{lab_prefix}-up"),
                format!("{lab_prefix}-inet"),
                format!("{lab_prefix}-direct"),
            ]
            .contains(&n);
        if ours {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &n])
                .status();
        }
    }
}

pub struct Fixture {
    pub lab: Option<FakeInternet>,
    pub net: Option<Network>,
    pub node_prefix: String,
    pub lab_prefix: String,
}

impl Fixture {
    /// `name`: 1-6 of [a-z0-9], unique per test.
    pub async fn new(name: &str) -> Fixture {
        Self::new_with(name, |_| {}).await
    }

    /// [`Fixture::new`] with `tweak` applied to the gateway's config first.
    pub async fn new_with(
        name: &str,
        tweak: impl FnOnce(&mut cove_network::NetworkConfig),
    ) -> Fixture {
        require_root();
        let (node_prefix, lab_prefix) = (format!("{name}n"), format!("{name}l"));
        sweep(&node_prefix, &lab_prefix);
        let mut fx = Fixture {
            lab: None,
            net: None,
            node_prefix: node_prefix.clone(),
            lab_prefix: lab_prefix.clone(),
        };
        fx.lab = Some(
            FakeInternet::create(&lab_prefix)
                .await
                .expect("fake internet"),
        );
        let mut config = fx.lab().network_config(&node_prefix);
        tweak(&mut config);
        let (net, _) = Network::start(config, Vec::new()).await.expect("gateway");
        fx.net = Some(net);
        fx
    }

    pub fn lab(&self) -> &FakeInternet {
        self.lab.as_ref().expect("lab")
    }

    pub fn net(&self) -> &Network {
        self.net.as_ref().expect("net")
    }

    /// Attaches a sandbox; returns its namespace name.
    pub async fn sandbox(&self, id: &str, policy: EgressPolicy) -> String {
        self.net().attach(id, policy).await.expect("attach").netns
    }

    /// Shuts the gateway down and removes the lab; asserts nothing of either is left.
    pub async fn finish(mut self) {
        if let Some(net) = self.net.take() {
            net.shutdown().await.expect("shutdown");
        }
        if let Some(lab) = self.lab.take() {
            lab.destroy().expect("destroy lab");
        }
        let inv = cove_network::inventory(&self.node_prefix).expect("inventory");
        assert!(
            inv.namespaces.is_empty(),
            "left behind: {:?}",
            inv.namespaces
        );
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if self.net.is_some() || self.lab.is_some() {
            drop(self.net.take());
            if let Some(lab) = self.lab.take() {
                let _ = lab.destroy();
            }
            sweep(&self.node_prefix, &self.lab_prefix);
        }
    }
}

pub fn policy(internet: bool, allow: &[&str], deny: &[&str]) -> EgressPolicy {
    EgressPolicy::parse(internet, allow, deny).expect("policy")
}

pub async fn http(ns: &str, ip: impl Into<Ipv4Addr>, port: u16, host: &str) -> lab::Reply {
    let (ns, host, ip) = (ns.to_string(), host.to_string(), ip.into());
    tokio::task::spawn_blocking(move || {
        lab::http_get(&ns, SocketAddrV4::new(ip, port), &host, "/", TIMEOUT)
    })
    .await
    .expect("join")
    .expect("client setup")
}

pub async fn https(ns: &str, ip: impl Into<Ipv4Addr>, sni: &str, ca: &str) -> lab::Reply {
    let (ns, sni, ca, ip) = (ns.to_string(), sni.to_string(), ca.to_string(), ip.into());
    tokio::task::spawn_blocking(move || {
        lab::https_get(&ns, SocketAddrV4::new(ip, 443), &sni, &ca, TIMEOUT)
    })
    .await
    .expect("join")
    .expect("client setup")
}

pub async fn dns(ns: &str, server: impl Into<Ipv4Addr>, name: &str) -> Result<DnsAnswer, String> {
    let (ns, name, server) = (ns.to_string(), name.to_string(), server.into());
    tokio::task::spawn_blocking(move || {
        lab::dns_query(&ns, SocketAddrV4::new(server, 53), &name, TIMEOUT)
    })
    .await
    .expect("join")
    .expect("client setup")
}
