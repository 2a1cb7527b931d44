//! The nodes test's own network: a bridge on the host and one network namespace per node, so
//! each node agent has an address of its own and its link can be cut (`ip link set ... down`).
//!
//! Cluster `k` (1-99) uses `198.18.k.0/24` (RFC 2544's benchmarking range, checked free of host
//! routes before anything is made): the bridge `cvnb{k}` holds `.1` (where the control plane's
//! node listener binds) and node `i` gets `.{10 + i}` on a veth in namespace `cvn{k}n{i}`.
//! Nothing is routed anywhere else: the namespaces have only their /24, and the host gains
//! only the bridge's connected route. Everything is removed on drop (and before use, if a
//! killed run left it).

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};

/// Which `k` the next [`TestNet`] of this process takes (tests of one binary run in parallel).
static NEXT: AtomicU8 = AtomicU8::new(1);

/// The bridge, its address and one namespace per node.
pub struct TestNet {
    k: u8,
    nodes: usize,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ip_quiet(args: &[&str]) {
    let _ = Command::new("ip").args(args).output();
}

impl TestNet {
    /// Makes the bridge and `nodes` namespaces (each with its veth up and its address).
    ///
    /// Panics if a host route already covers the cluster's range (the test never takes over
    /// a range the machine uses).
    pub fn create(nodes: usize) -> TestNet {
        let k = NEXT.fetch_add(1, Ordering::SeqCst) + (std::process::id() % 40) as u8;
        let net = TestNet { k, nodes };
        net.remove();
        let routes = Command::new("ip")
            .args(["-4", "-o", "route", "show", "table", "all"])
            .output()
            .expect("ip route");
        let routes = String::from_utf8_lossy(&routes.stdout);
        let range = format!("198.18.{k}.");
        assert!(
            !routes
                .lines()
                .any(|l| l.starts_with(&range) || l.starts_with("198.18.0.0/15")),
            "a host route uses 198.18.{k}.0/24: {routes}"
        );
        let bridge = net.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"]);
        ip(&["addr", "add", &format!("{}/24", net.host()), "dev", &bridge]);
        ip(&["link", "set", &bridge, "up"]);
        for i in 0..nodes {
            let ns = net.namespace(i);
            let (host_end, ns_end) = (net.host_veth(i), format!("cvn{k}p{i}"));
            ip(&["netns", "add", &ns]);
            ip(&[
                "link", "add", &host_end, "type", "veth", "peer", "name", &ns_end, "netns", &ns,
            ]);
            ip(&["link", "set", &host_end, "master", &bridge, "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", net.node_address(i)),
                "dev",
                &ns_end,
            ]);
            ip(&["-n", &ns, "link", "set", &ns_end, "up"]);
        }
        // Before anything is sent: the range must route to the bridge, nowhere else.
        let route = Command::new("ip")
            .args(["-4", "route", "get", &net.node_address(0).to_string()])
            .output()
            .expect("ip route get");
        let route = String::from_utf8_lossy(&route.stdout);
        assert!(route.contains(&format!("dev {bridge}")), "{route}");
        net
    }

    fn bridge(&self) -> String {
        format!("cvnb{}", self.k)
    }

    /// The namespace of node `i`.
    pub fn namespace(&self, i: usize) -> String {
        format!("cvn{}n{i}", self.k)
    }

    /// The host end of node `i`'s veth (down = the node's link is cut).
    pub fn host_veth(&self, i: usize) -> String {
        format!("cvn{}h{i}", self.k)
    }

    /// The bridge's address on the host: where the control plane listens for nodes.
    pub fn host(&self) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.k, 1)
    }

    /// Node `i`'s address inside its namespace.
    pub fn node_address(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.k, 10 + i as u8)
    }

    /// Cuts (`up == false`) or restores node `i`'s link.
    pub fn set_link(&self, i: usize, up: bool) {
        ip(&[
            "link",
            "set",
            &self.host_veth(i),
            if up { "up" } else { "down" },
        ]);
    }

    fn remove(&self) {
        for i in 0..self.nodes {
            // Removing the namespace removes its veth end, and with it the pair.
            ip_quiet(&["netns", "del", &self.namespace(i)]);
            ip_quiet(&["link", "del", &self.host_veth(i)]);
        }
        ip_quiet(&["link", "del", &self.bridge()]);
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        self.remove();
    }
}
