//! The egress policy of a sandbox: what outbound connections its gateway lets through
//! (DESIGN.md §5–6). Pure rules, no I/O: the node's gateway enforces them on each connection,
//! with the destination's IP and, where the connection names one (TLS SNI, HTTP `Host`), its
//! domain.
//!
//! Rules are strings: a CIDR (`10.1.0.0/16`, `2001:db8::/32`), an IP (`203.0.113.7`), an exact
//! domain (`api.example.com`) or a wildcard (`*.example.com`: every name below it, not the name
//! itself). `deny` wins over `allow` for the same destination; with `internet: false` only
//! `allow` opens anything. A domain rule never matches a connection that names no domain, so
//! allowing a domain does not open its raw IP. The floor (node, host, metadata, other
//! sandboxes) is the gateway's and no policy can open it.

use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::InvalidInput;

/// Most rules in one list (allow or deny).
pub const MAX_RULES: usize = 256;
/// Longest domain in a rule, in bytes (RFC 1035).
pub const MAX_DOMAIN_LEN: usize = 253;

/// A sandbox's egress policy. Default: the internet is open and there are no rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressPolicy {
    /// Whether destinations no rule names are allowed (default true).
    #[serde(default = "default_internet")]
    pub internet: bool,
    /// Destinations allowed even with `internet: false`.
    #[serde(default)]
    pub allow: Vec<EgressRule>,
    /// Destinations refused even when allowed otherwise.
    #[serde(default)]
    pub deny: Vec<EgressRule>,
}

fn default_internet() -> bool {
    true
}

impl Default for EgressPolicy {
    fn default() -> Self {
        EgressPolicy {
            internet: true,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }
}

/// One rule: which destinations it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EgressRule {
    /// An address range: `addr/prefix` (an IP alone is a full-length prefix).
    Cidr {
        /// Network address (host bits are zero).
        addr: IpAddr,
        /// Prefix length in bits.
        prefix: u8,
    },
    /// Exactly this domain (lowercase, no trailing dot).
    Domain(String),
    /// Every name below this domain (`*.example.com` stores `example.com`).
    Wildcard(String),
}

/// What a connection's destination is, as the gateway sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Destination<'a> {
    /// The IP it goes to.
    pub ip: IpAddr,
    /// The name it asked for (TLS SNI, HTTP `Host`, or a DNS question), if any.
    pub domain: Option<&'a str>,
}

impl EgressRule {
    /// Whether this rule names `dest`.
    pub fn matches(&self, dest: &Destination<'_>) -> bool {
        match self {
            EgressRule::Cidr { addr, prefix } => in_prefix(dest.ip, *addr, *prefix),
            EgressRule::Domain(d) => dest.domain.is_some_and(|n| normalize(n) == *d),
            EgressRule::Wildcard(d) => dest.domain.is_some_and(|n| {
                let n = normalize(n);
                n.len() > d.len()
                    && n.ends_with(d.as_str())
                    && n[..n.len() - d.len()].ends_with('.')
            }),
        }
    }

    /// Whether the rule is about names (and so needs a name on the connection to match).
    pub fn is_domain(&self) -> bool {
        !matches!(self, EgressRule::Cidr { .. })
    }
}

impl EgressPolicy {
    /// Whether the policy lets a connection to `dest` through (the floor aside).
    pub fn allows(&self, dest: &Destination<'_>) -> bool {
        if self.deny.iter().any(|r| r.matches(dest)) {
            return false;
        }
        self.internet || self.allow.iter().any(|r| r.matches(dest))
    }

    /// Whether a DNS question for `name` may be answered: with `internet` on, unless a domain
    /// rule denies it; with it off, only names an allow rule names.
    pub fn allows_name(&self, name: &str) -> bool {
        let probe = |r: &EgressRule| {
            r.is_domain()
                && r.matches(&Destination {
                    ip: IpAddr::from([0, 0, 0, 0]),
                    domain: Some(name),
                })
        };
        if self.deny.iter().any(probe) {
            return false;
        }
        self.internet || self.allow.iter().any(probe)
    }

    /// Checks list sizes (at most [`MAX_RULES`] each).
    pub fn validate(&self) -> Result<(), InvalidInput> {
        for (field, list) in [("network.allow", &self.allow), ("network.deny", &self.deny)] {
            if list.len() > MAX_RULES {
                return Err(InvalidInput::new(
                    field,
                    format!("at most {MAX_RULES} rules, got {}", list.len()),
                ));
            }
        }
        Ok(())
    }
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn in_prefix(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

fn valid_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && l.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !l.starts_with('-')
        && !l.ends_with('-')
}

fn parse_domain(s: &str) -> Option<String> {
    let d = normalize(s);
    (!d.is_empty() && d.len() <= MAX_DOMAIN_LEN && d.split('.').all(valid_label)).then_some(d)
}

impl FromStr for EgressRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Some((addr, prefix)) = s.split_once('/') {
            let addr: IpAddr = addr
                .parse()
                .map_err(|_| format!("{s:?}: bad CIDR address"))?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix: u8 = prefix
                .parse()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{s:?}: prefix must be 0-{max}"))?;
            return Ok(EgressRule::Cidr { addr, prefix });
        }
        if let Ok(addr) = s.parse::<IpAddr>() {
            let prefix = if addr.is_ipv4() { 32 } else { 128 };
            return Ok(EgressRule::Cidr { addr, prefix });
        }
        if let Some(rest) = s.strip_prefix("*.") {
            return parse_domain(rest)
                .map(EgressRule::Wildcard)
                .ok_or_else(|| format!("{s:?}: not a domain pattern"));
        }
        parse_domain(s)
            .map(EgressRule::Domain)
            .ok_or_else(|| format!("{s:?}: not a CIDR, IP, domain or *.domain"))
    }
}

impl std::fmt::Display for EgressRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EgressRule::Cidr { addr, prefix } => write!(f, "{addr}/{prefix}"),
            EgressRule::Domain(d) => f.write_str(d),
            EgressRule::Wildcard(d) => write!(f, "*.{d}"),
        }
    }
}

impl Serialize for EgressRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for EgressRule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(ip: &str, domain: Option<&'static str>) -> Destination<'static> {
        Destination {
            ip: ip.parse().expect("ip"),
            domain,
        }
    }

    fn policy(json: &str) -> EgressPolicy {
        serde_json::from_str(json).expect("policy")
    }

    #[test]
    fn rules_parse_and_print_back() {
        for s in [
            "10.0.0.0/8",
            "203.0.113.7/32",
            "2001:db8::/32",
            "api.example.com",
            "*.example.com",
        ] {
            let r: EgressRule = s.parse().expect(s);
            assert_eq!(r.to_string(), s);
        }
        assert_eq!(
            "203.0.113.7".parse::<EgressRule>().map(|r| r.to_string()),
            Ok("203.0.113.7/32".into())
        );
        for bad in [
            "10.0.0.0/33",
            "exa mple.com",
            "*.",
            "",
            "-bad.com",
            "1.2.3.4/x",
        ] {
            assert!(bad.parse::<EgressRule>().is_err(), "{bad}");
        }
    }

    #[test]
    fn deny_wins_and_internet_off_opens_only_allow() {
        let p = policy(
            r#"{"internet":false,"allow":["198.51.100.0/24","example.com"],"deny":["198.51.100.128/25"]}"#,
        );
        assert!(p.allows(&dest("198.51.100.5", None)));
        assert!(!p.allows(&dest("198.51.100.200", None)));
        assert!(!p.allows(&dest("203.0.113.1", None)));
        assert!(p.allows(&dest("203.0.113.1", Some("Example.COM."))));
        assert!(!p.allows(&dest("203.0.113.1", Some("other.com"))));
        assert!(p.allows_name("example.com"));
        assert!(!p.allows_name("sub.example.com"));
        let open = EgressPolicy::default();
        assert!(open.allows(&dest("203.0.113.1", None)));
    }

    #[test]
    fn wildcard_names_children_only_and_domains_never_raw_ips() {
        let p = policy(r#"{"internet":false,"allow":["*.example.com"]}"#);
        assert!(p.allows_name("a.example.com"));
        assert!(p.allows_name("a.b.example.com"));
        assert!(!p.allows_name("example.com"));
        assert!(!p.allows_name("badexample.com"));
        assert!(!p.allows(&dest("203.0.113.1", None)));
        let unknown: Result<EgressPolicy, _> = serde_json::from_str(r#"{"internet":true,"x":1}"#);
        assert!(unknown.is_err());
    }
}
