//! Namespaces, veths, routes and nftables: creating and removing them (blocking calls that
//! shell out to `ip` and `nft`; call them from `spawn_blocking`).
//!
//! Topology. One gateway namespace `{prefix}-gw` holds the gateway address (on `lo`), the host
//! end `{prefix}v{slot}` of every sandbox veth, a /32 route per sandbox, and the `ip cove` nft
//! table. A sandbox namespace `{prefix}-s{slot}` holds `eth0` with the slot's /32, a link route
//! to the gateway and a default route via it. The gateway namespace forwards nothing: every TCP
//! connection is DNATed to the in-process proxy and UDP is accepted only for the gateway's DNS,
//! so a sandbox can reach nothing but the gateway. A separate namespace (rather than the host
//! side) keeps the host's sysctls, routes and nft tables untouched and gives the sandboxes no
//! route to any host address, and deleting it on recovery removes every veth at once.

use std::net::Ipv4Addr;

use crate::cmd;
use crate::config::NetworkConfig;
use crate::error::Result;

/// Name of the nft table (family `ip`) in the gateway namespace.
pub const NFT_TABLE: &str = "cove";

/// The gateway namespace's name for `prefix`.
pub fn gateway_ns(prefix: &str) -> String {
    format!("{prefix}-gw")
}

/// The sandbox namespace name of `slot`.
pub fn sandbox_ns(prefix: &str, slot: u32) -> String {
    format!("{prefix}-s{slot}")
}

/// The gateway-side veth name of `slot` (at most 14 bytes: prefix ≤ 8, slot ≤ 65535).
pub fn gateway_veth(prefix: &str, slot: u32) -> String {
    format!("{prefix}v{slot}")
}

/// The slot of a sandbox namespace name made with this prefix.
pub fn parse_sandbox_ns(prefix: &str, name: &str) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?.strip_prefix("-s")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.starts_with('0') {
        return None;
    }
    digits.parse().ok()
}

fn ruleset(config: &NetworkConfig) -> String {
    let gw = config.gateway();
    let port = config.proxy_port;
    format!(
        r#"table ip {NFT_TABLE} {{
  set sandboxes {{ type ifname . ipv4_addr; }}
  chain guard {{
    type filter hook prerouting priority -150; policy accept;
    iifname "lo" accept
    iifname . ip saddr != @sandboxes counter drop
    ip daddr {gw} udp dport 53 accept
    ip daddr != {gw} tcp dport 53 counter drop
    meta l4proto != tcp counter drop
  }}
  chain divert {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname != "lo" meta l4proto tcp dnat to {gw}:{port}
  }}
  chain input {{
    type filter hook input priority 0; policy drop;
    iifname "lo" accept
    ct state established,related accept
    ip daddr {gw} tcp dport {port} ct status dnat accept
    ip daddr {gw} udp dport 53 accept
    counter drop
  }}
  chain forward {{
    type filter hook forward priority 0; policy drop;
  }}
}}
"#
    )
}

/// Deletes a leftover gateway namespace (which removes every veth whose end is in it), then
/// creates it fresh with the gateway address, IPv6 off and the nft table.
pub fn create_gateway(config: &NetworkConfig) -> Result<()> {
    let ns = gateway_ns(&config.prefix);
    if cmd::netns_names()?.contains(&ns) {
        cmd::run("ip", &["netns", "del", &ns], None)?;
    }
    cmd::run("ip", &["netns", "add", &ns], None)?;
    let setup = || -> Result<()> {
        cmd::ip_batch(
            Some(&ns),
            &format!("link set lo up\naddr add {}/32 dev lo\n", config.gateway()),
        )?;
        cmd::run(
            "ip",
            &[
                "netns",
                "exec",
                &ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
                "net.ipv4.ip_forward=0",
            ],
            None,
        )?;
        cmd::nft(&ns, &ruleset(config))
    };
    setup().inspect_err(|_| {
        let _ = cmd::run("ip", &["netns", "del", &ns], None);
    })
}

/// Deletes the gateway namespace (no error when it is gone).
pub fn delete_gateway(prefix: &str) -> Result<()> {
    let ns = gateway_ns(prefix);
    if cmd::netns_names()?.contains(&ns) {
        cmd::run("ip", &["netns", "del", &ns], None)?;
    }
    Ok(())
}

/// Creates the sandbox namespace of `slot` (unless `reuse`, when it exists already and only its
/// old `eth0` is replaced), its veth, address and routes, and the gateway's route and nft element.
/// On failure, removes what it made.
pub fn plumb(config: &NetworkConfig, slot: u32, reuse: bool) -> Result<()> {
    let p = &config.prefix;
    let (sbx, veth, gw_ns) = (sandbox_ns(p, slot), gateway_veth(p, slot), gateway_ns(p));
    let (addr, gw) = (config.slot_addr(slot), config.gateway());
    if reuse {
        let _ = cmd::run("ip", &["-n", &sbx, "link", "del", "eth0"], None);
    } else {
        cmd::run("ip", &["netns", "add", &sbx], None)?;
    }
    let steps = || -> Result<()> {
        // Set from here, in the node's user namespace, which owns this network namespace: a
        // sandbox in a user namespace of its own can neither write them nor bind a port below
        // 1024 without them. Every group may ping through ICMP datagram sockets (no raw
        // sockets in a sandbox), and every port may be bound (as Docker does).
        cmd::run(
            "ip",
            &[
                "netns",
                "exec",
                &sbx,
                "sysctl",
                "-qw",
                "net.ipv4.ping_group_range=0 2147483647",
                "net.ipv4.ip_unprivileged_port_start=0",
            ],
            None,
        )?;
        cmd::ip_batch(
            Some(&sbx),
            &format!(
                "link set lo up\n\
                 link add eth0 type veth peer name {veth} netns {gw_ns}\n\
                 addr add {addr}/32 dev eth0\n\
                 link set eth0 up\n\
                 route add {gw}/32 dev eth0 scope link\n\
                 route add default via {gw} dev eth0\n"
            ),
        )?;
        cmd::ip_batch(
            Some(&gw_ns),
            &format!("link set {veth} up\nroute add {addr}/32 dev {veth}\n"),
        )?;
        cmd::nft(
            &gw_ns,
            &format!("add element ip {NFT_TABLE} sandboxes {{ \"{veth}\" . {addr} }}\n"),
        )
    };
    steps().inspect_err(|_| {
        let _ = unplumb(config, slot);
    })
}

/// The tap device [`bridge_tap`] makes in a sandbox namespace.
pub const TAP: &str = "tap0";

/// Gives the sandbox namespace of `slot` a tap device for a VM: `tap0` and `eth0` (the link to
/// the gateway) in a bridge `br0`, and the slot's address taken off `eth0` (the VM holds it), so
/// the VM's only peer is the gateway. Idempotent: after an adoption replaced `eth0`, the new one
/// joins the bridge.
pub fn bridge_tap(config: &NetworkConfig, slot: u32) -> Result<()> {
    let sbx = sandbox_ns(&config.prefix, slot);
    let links = cmd::links(Some(&sbx))?;
    let mut script = String::new();
    if !links.iter().any(|l| l == TAP) {
        script.push_str(&format!(
            "tuntap add dev {TAP} mode tap
"
        ));
    }
    if !links.iter().any(|l| l == "br0") {
        script.push_str(
            "link add br0 type bridge
",
        );
    }
    script.push_str(&format!(
        "addr flush dev eth0
         link set eth0 master br0
         link set {TAP} master br0
         link set br0 up
         link set {TAP} up
         link set eth0 up
"
    ));
    cmd::ip_batch(Some(&sbx), &script)
}

/// Removes the nft element, the veth pair (and with it the gateway's route) and the sandbox
/// namespace of `slot`. Parts already gone are skipped.
pub fn unplumb(config: &NetworkConfig, slot: u32) -> Result<()> {
    let p = &config.prefix;
    let (sbx, veth, gw_ns) = (sandbox_ns(p, slot), gateway_veth(p, slot), gateway_ns(p));
    let addr: Ipv4Addr = config.slot_addr(slot);
    let names = cmd::netns_names()?;
    if names.contains(&gw_ns) {
        let script = format!("delete element ip {NFT_TABLE} sandboxes {{ \"{veth}\" . {addr} }}\n");
        if let Err(e) = cmd::nft(&gw_ns, &script) {
            if !e.to_string().contains("No such file") {
                return Err(e);
            }
        }
        if cmd::links(Some(&gw_ns))?.contains(&veth) {
            cmd::run("ip", &["-n", &gw_ns, "link", "del", &veth], None)?;
        }
    }
    if names.contains(&sbx) {
        let _ = cmd::run("ip", &["-n", &sbx, "link", "del", "eth0"], None);
        cmd::run("ip", &["netns", "del", &sbx], None)?;
    }
    Ok(())
}

/// Slots of the sandbox namespaces that exist now for this prefix.
pub fn existing_slots(prefix: &str) -> Result<Vec<u32>> {
    let mut slots: Vec<u32> = cmd::netns_names()?
        .iter()
        .filter_map(|n| parse_sandbox_ns(prefix, n))
        .collect();
    slots.sort_unstable();
    Ok(slots)
}

/// What exists for one prefix, for leak checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    /// Named namespaces with this prefix (gateway and sandboxes), sorted.
    pub namespaces: Vec<String>,
    /// Links in the gateway namespace (including `lo`).
    pub gateway_links: usize,
    /// IPv4 routes in the gateway namespace's main and local tables.
    pub gateway_routes: usize,
    /// IPv4 addresses in the gateway namespace.
    pub gateway_addresses: usize,
    /// Elements of the `sandboxes` nft set.
    pub nft_elements: usize,
    /// Rules in the gateway's nft ruleset.
    pub nft_rules: usize,
    /// Links in the host (this process's) namespace.
    pub host_links: usize,
}

/// Counts what exists now for `prefix`.
pub fn inventory(prefix: &str) -> Result<Inventory> {
    let gw_ns = gateway_ns(prefix);
    let mut namespaces: Vec<String> = cmd::netns_names()?
        .into_iter()
        .filter(|n| *n == gw_ns || parse_sandbox_ns(prefix, n).is_some())
        .collect();
    namespaces.sort();
    let host_links = cmd::links(None)?.len();
    let mut inv = Inventory {
        gateway_links: 0,
        gateway_routes: 0,
        gateway_addresses: 0,
        nft_elements: 0,
        nft_rules: 0,
        host_links,
        namespaces,
    };
    if inv.namespaces.contains(&gw_ns) {
        inv.gateway_links = cmd::links(Some(&gw_ns))?.len();
        inv.gateway_routes = cmd::routes(Some(&gw_ns))?.len();
        inv.gateway_addresses = cmd::addresses(Some(&gw_ns))?.len();
        let out = cmd::run(
            "ip",
            &["netns", "exec", &gw_ns, "nft", "-j", "list", "ruleset"],
            None,
        )?;
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        for item in v
            .get("nftables")
            .and_then(|n| n.as_array())
            .into_iter()
            .flatten()
        {
            if item.get("rule").is_some() {
                inv.nft_rules += 1;
            }
            if let Some(set) = item.get("set") {
                inv.nft_elements += set
                    .get("elem")
                    .and_then(|e| e.as_array())
                    .map_or(0, Vec::len);
            }
        }
    }
    Ok(inv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_sandbox_ns("cove", &sandbox_ns("cove", 42)), Some(42));
        assert_eq!(parse_sandbox_ns("cove", "cove-s"), None);
        assert_eq!(parse_sandbox_ns("cove", "cove-s01"), None);
        assert_eq!(parse_sandbox_ns("cove", "cove2-s1"), None);
        assert_eq!(parse_sandbox_ns("cove", "cove-gw"), None);
        assert!(gateway_veth("abcdefgh", 65535).len() <= 15);
    }
}
