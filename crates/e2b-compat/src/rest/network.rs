//! E2B's egress rules on Cove's egress policy: `network` on create, `allow_internet_access`,
//! and the live update `PUT /sandboxes/{id}/network` (the SDK's `update_network`), which
//! replaces the whole configuration (omitted fields are cleared), as E2B does.
//!
//! E2B's rules, as its SDK and documentation state them: `allowOut` takes IPs, CIDRs, domains
//! and `*.domains`; `denyOut` takes IPs and CIDRs only; `0.0.0.0/0` means all traffic; an
//! `allowOut` entry wins over a `denyOut` entry; `allow_internet_access: false` is `denyOut:
//! ["0.0.0.0/0"]`; `dnsServers` are opened (all traffic to them) when `allowOut` names a domain.
//! On Cove's policy (where a deny entry wins):
//!
//! - `denyOut` holds `0.0.0.0/0` (or internet access is off): `internet: false`, `allow` =
//!   `allowOut` (+ `dnsServers` when `allowOut` names a domain), no deny entries.
//! - otherwise: `internet: true`, `deny` = `denyOut` with every `allowOut` address range cut
//!   out of it (so an allowed address inside a denied range stays reachable), `allow` =
//!   `allowOut` (kept so the rules read back as given; with the internet on they open nothing
//!   more). A domain in `allowOut` does not reopen an address that a narrower `denyOut` range
//!   closes, since Cove decides addresses before names.
//! - `allowOut` holding `0.0.0.0/0`: everything is open.
//!
//! Cove's gateway answers the sandbox's DNS itself, so no default resolver (E2B's `8.8.8.8`) is
//! opened. What Cove cannot do here is refused with `400` naming the field: `egressProxy`,
//! per-host `rules` (header transforms), `maskRequestHost`, `httpsPorts`, and
//! `allowPublicTraffic: false`.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cove_api_types::{EgressPolicy, EgressRule};
use ipnet::Ipv4Net;
use serde::Deserialize;
use serde_json::Value;

use super::{e2b_sandbox, parse_body};
use crate::error::RestError;
use crate::model::sandboxes::SandboxNetwork;
use crate::E2b;

/// E2B's "all traffic".
pub const ALL_TRAFFIC: &str = "0.0.0.0/0";

/// `SandboxNetworkConfig` (create) and `SandboxNetworkUpdateConfig` (update).
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct NetworkConfig {
    #[serde(alias = "allow_out")]
    allow_out: Option<Vec<String>>,
    #[serde(alias = "deny_out")]
    deny_out: Option<Vec<String>>,
    #[serde(alias = "dns_servers")]
    dns_servers: Option<Vec<String>>,
    #[serde(alias = "egress_proxy")]
    egress_proxy: Option<Value>,
    rules: Option<Value>,
    #[serde(alias = "allow_public_traffic")]
    allow_public_traffic: Option<bool>,
    #[serde(alias = "mask_request_host")]
    mask_request_host: Option<String>,
    #[serde(alias = "https_ports")]
    https_ports: Option<Vec<Value>>,
    /// Update only: `false` is `denyOut: ["0.0.0.0/0"]`.
    #[serde(rename = "allow_internet_access", alias = "allowInternetAccess")]
    allow_internet_access: Option<bool>,
}

fn bad(message: String) -> RestError {
    RestError::new(StatusCode::BAD_REQUEST, message)
}

fn not_here(what: &str) -> RestError {
    bad(format!(
        "{what} is not supported by Cove's E2B compatibility layer yet"
    ))
}

/// Refuses the fields Cove has no equivalent for.
fn refuse_unsupported(n: &NetworkConfig) -> Result<(), RestError> {
    if n.egress_proxy.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(not_here("network.egressProxy (a SOCKS5 egress proxy)"));
    }
    let has_rules = match &n.rules {
        Some(Value::Object(m)) => !m.is_empty(),
        Some(Value::Null) | None => false,
        Some(_) => true,
    };
    if has_rules {
        return Err(not_here("network.rules (per-host request transforms)"));
    }
    if n.mask_request_host.as_ref().is_some_and(|h| !h.is_empty()) {
        return Err(not_here("network.maskRequestHost"));
    }
    if n.https_ports.as_ref().is_some_and(|p| !p.is_empty()) {
        return Err(not_here("network.httpsPorts"));
    }
    Ok(())
}

/// E2B's `network.allowPublicTraffic` as Cove's `public` (ports reachable without the port
/// token): `true` unless the create said `false`, as on E2B.
pub(crate) fn public_traffic(network: Option<&NetworkConfig>) -> bool {
    network.and_then(|n| n.allow_public_traffic).unwrap_or(true)
}

/// Cove's policy for E2B's `allow_internet_access` and `network` (`None`: the default policy,
/// for a create that restricts nothing).
///
/// # Errors
/// `400` naming the entry that is not an IPv4 address, CIDR or domain (a domain in `denyOut`),
/// a `dnsServers` entry that is not an IPv4 address, more than 256 rules after the mapping, or
/// a field Cove does not support (see the module documentation).
pub(crate) fn egress_policy(
    allow_internet_access: Option<bool>,
    network: Option<&NetworkConfig>,
) -> Result<Option<EgressPolicy>, RestError> {
    let empty = NetworkConfig::default();
    let n = network.unwrap_or(&empty);
    refuse_unsupported(n)?;
    let mut allow_all = false;
    let mut allow = Vec::new();
    for (i, entry) in n.allow_out.iter().flatten().enumerate() {
        if entry.trim() == ALL_TRAFFIC {
            allow_all = true;
            continue;
        }
        let rule: EgressRule = entry
            .parse()
            .map_err(|e| bad(format!("network.allowOut[{i}]: {e}")))?;
        if !allow.contains(&rule) {
            allow.push(rule);
        }
    }
    let mut deny_all = allow_internet_access == Some(false);
    let mut deny = Vec::new();
    for (i, entry) in n.deny_out.iter().flatten().enumerate() {
        if entry.trim() == ALL_TRAFFIC {
            deny_all = true;
            continue;
        }
        match entry.parse::<EgressRule>() {
            Ok(EgressRule::Net(net)) => deny.push(net),
            Ok(_) => {
                return Err(bad(format!(
                    "network.denyOut[{i}]: {entry:?}: deny rules take IP addresses and CIDR \
                     ranges only"
                )))
            }
            Err(e) => return Err(bad(format!("network.denyOut[{i}]: {e}"))),
        }
    }
    if allow.iter().any(EgressRule::is_domain) {
        for (i, entry) in n.dns_servers.iter().flatten().enumerate() {
            let ip: std::net::Ipv4Addr = entry.trim().parse().map_err(|_| {
                bad(format!(
                    "network.dnsServers[{i}]: {entry:?} is not an IPv4 address"
                ))
            })?;
            let rule = EgressRule::Net(Ipv4Net::from(ip));
            if !allow.contains(&rule) {
                allow.push(rule);
            }
        }
    }
    let policy = if allow_all {
        EgressPolicy::default()
    } else if deny_all {
        EgressPolicy {
            internet: false,
            allow,
            deny: Vec::new(),
        }
    } else {
        let holes: Vec<Ipv4Net> = allow
            .iter()
            .filter_map(|r| match r {
                EgressRule::Net(n) => Some(*n),
                _ => None,
            })
            .collect();
        let mut left: Vec<Ipv4Net> = Vec::new();
        for net in deny {
            for piece in holes.iter().fold(vec![net], |pieces, hole| {
                pieces
                    .into_iter()
                    .flat_map(|p| subtract(p, *hole))
                    .collect()
            }) {
                if !left.contains(&piece) {
                    left.push(piece);
                }
            }
        }
        EgressPolicy {
            internet: true,
            allow,
            deny: left.into_iter().map(EgressRule::Net).collect(),
        }
    };
    policy
        .validate()
        .map_err(|e| bad(format!("{}: {}", e.field, e.message)))?;
    Ok((!policy.is_default()).then_some(policy))
}

/// `net` without `hole`: the CIDR blocks covering exactly the addresses of `net` outside
/// `hole` (at most one per bit of `hole`'s prefix beyond `net`'s).
pub(crate) fn subtract(net: Ipv4Net, hole: Ipv4Net) -> Vec<Ipv4Net> {
    if hole.contains(&net) {
        return Vec::new();
    }
    if !net.contains(&hole) {
        // CIDR blocks either nest or are disjoint.
        return vec![net];
    }
    match net.subnets(net.prefix_len() + 1) {
        Ok(halves) => halves.flat_map(|h| subtract(h, hole)).collect(),
        Err(_) => Vec::new(),
    }
}

/// E2B's `network` of a sandbox detail (`None` for the default policy): the policy read back
/// in E2B's terms.
pub(crate) fn network_json(p: &EgressPolicy) -> Option<SandboxNetwork> {
    if p.is_default() {
        return None;
    }
    let list = |rules: &[EgressRule]| rules.iter().map(|r| r.to_string()).collect::<Vec<_>>();
    let deny = if p.internet {
        list(&p.deny)
    } else {
        vec![ALL_TRAFFIC.to_string()]
    };
    Some(SandboxNetwork {
        allow_out: list(&p.allow),
        deny_out: deny,
    })
}

/// `PUT /sandboxes/{id}/network`: replaces the egress policy of a running or paused sandbox;
/// the next connection follows it (a paused one gets it when it wakes). `204`.
pub(super) async fn update(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, RestError> {
    let req: NetworkConfig = parse_body(&body)?;
    let s = e2b_sandbox(&e2b, &id).await?;
    let policy = egress_policy(req.allow_internet_access, Some(&req))?.unwrap_or_default();
    e2b.cp.set_sandbox_network(&s.id, policy).await?;
    if let Some(public) = req.allow_public_traffic {
        e2b.cp.set_ports_public(&s.id, public).await?;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(allow: &[&str], deny: &[&str]) -> NetworkConfig {
        NetworkConfig {
            allow_out: Some(allow.iter().map(|s| s.to_string()).collect()),
            deny_out: Some(deny.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    }

    fn policy(aia: Option<bool>, c: &NetworkConfig) -> Option<EgressPolicy> {
        egress_policy(aia, Some(c)).expect("maps")
    }

    fn strs(rules: &[EgressRule]) -> Vec<String> {
        rules.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn deny_all_with_allowed_hosts_is_internet_off() {
        let p = policy(None, &cfg(&["allowed.test", "1.1.1.1"], &[ALL_TRAFFIC])).expect("some");
        assert!(!p.internet);
        assert_eq!(strs(&p.allow), ["allowed.test", "1.1.1.1"]);
        assert!(p.deny.is_empty());
        assert_eq!(
            network_json(&p),
            Some(SandboxNetwork {
                allow_out: vec!["allowed.test".into(), "1.1.1.1".into()],
                deny_out: vec![ALL_TRAFFIC.into()],
            })
        );
        let off = policy(Some(false), &NetworkConfig::default()).expect("some");
        assert_eq!(off, EgressPolicy::offline());
    }

    #[test]
    fn allow_wins_over_a_wider_deny() {
        let p = policy(None, &cfg(&["10.1.2.3"], &["10.0.0.0/8", "192.0.2.7"])).expect("some");
        assert!(p.internet);
        let deny: Vec<Ipv4Net> = p
            .deny
            .iter()
            .map(|r| match r {
                EgressRule::Net(n) => *n,
                other => panic!("{other}"),
            })
            .collect();
        let hole: std::net::Ipv4Addr = "10.1.2.3".parse().expect("ip");
        assert!(deny.iter().all(|n| !n.contains(&hole)));
        for ip in [
            "10.1.2.2",
            "10.1.2.4",
            "10.255.0.1",
            "10.0.0.0",
            "192.0.2.7",
        ] {
            let ip: std::net::Ipv4Addr = ip.parse().expect("ip");
            assert!(deny.iter().any(|n| n.contains(&ip)), "{ip} still denied");
        }
        // 10.0.0.0/8 minus one address is 24 blocks, plus the /32.
        assert_eq!(deny.len(), 25);
    }

    #[test]
    fn all_traffic_allowed_opens_everything_and_defaults_are_none() {
        assert_eq!(policy(None, &cfg(&[ALL_TRAFFIC], &[ALL_TRAFFIC])), None);
        assert_eq!(policy(None, &NetworkConfig::default()), None);
        assert_eq!(egress_policy(Some(true), None).expect("maps"), None);
    }

    #[test]
    fn refusals_name_the_field() {
        let e = egress_policy(None, Some(&cfg(&[], &["example.com"]))).expect_err("domain");
        assert!(e.message.contains("network.denyOut[0]"), "{}", e.message);
        let e = egress_policy(None, Some(&cfg(&["::1"], &[]))).expect_err("v6");
        assert!(e.message.contains("network.allowOut[0]"), "{}", e.message);
        let proxy = NetworkConfig {
            egress_proxy: Some(serde_json::json!({"address": "p:1080"})),
            ..Default::default()
        };
        let e = egress_policy(None, Some(&proxy)).expect_err("proxy");
        assert!(e.message.contains("egressProxy"), "{}", e.message);
        let private = NetworkConfig {
            allow_public_traffic: Some(false),
            ..Default::default()
        };
        assert_eq!(egress_policy(None, Some(&private)).expect("maps"), None);
        assert!(!public_traffic(Some(&private)));
        assert!(public_traffic(None));
    }

    #[test]
    fn dns_servers_open_only_with_a_domain() {
        let mut c = cfg(&["allowed.test"], &[ALL_TRAFFIC]);
        c.dns_servers = Some(vec!["1.1.1.1".into()]);
        let p = policy(None, &c).expect("some");
        assert_eq!(strs(&p.allow), ["allowed.test", "1.1.1.1"]);
        let mut c = cfg(&["2.2.2.2"], &[ALL_TRAFFIC]);
        c.dns_servers = Some(vec!["1.1.1.1".into()]);
        assert_eq!(strs(&policy(None, &c).expect("some").allow), ["2.2.2.2"]);
    }

    #[test]
    fn subtraction_is_exact() {
        let net: Ipv4Net = "10.0.0.0/30".parse().expect("net");
        let hole: Ipv4Net = "10.0.0.1/32".parse().expect("hole");
        let got: Vec<String> = subtract(net, hole)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, ["10.0.0.0/32", "10.0.0.2/31"]);
        assert!(subtract(hole, net).is_empty());
        let other: Ipv4Net = "11.0.0.0/8".parse().expect("net");
        assert_eq!(subtract(net, other), vec![net]);
    }
}
