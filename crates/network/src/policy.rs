//! A sandbox's egress policy: `{internet, allow, deny}` and how one connection is judged.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::error::NetworkError;

/// One entry of an allow or deny list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// An IPv4 network; a bare IP is stored as a /32.
    Net(Ipv4Net),
    /// An exact host name, lowercase, without a trailing dot (`api.example.com`).
    Domain(String),
    /// `*.example.com`: every name strictly below `example.com` (not `example.com` itself).
    Wildcard(String),
}

impl Rule {
    /// True when this rule names `ip` (network rules only).
    pub fn matches_ip(&self, ip: Ipv4Addr) -> bool {
        matches!(self, Rule::Net(net) if net.contains(&ip))
    }

    /// True when this rule names `name` (domain rules only). `name` must be normalised
    /// with [`normalize_name`].
    pub fn matches_name(&self, name: &str) -> bool {
        match self {
            Rule::Net(_) => false,
            Rule::Domain(d) => d == name,
            Rule::Wildcard(base) => {
                name.len() > base.len() + 1
                    && name.ends_with(base.as_str())
                    && name.as_bytes()[name.len() - base.len() - 1] == b'.'
            }
        }
    }

    fn is_domain(&self) -> bool {
        !matches!(self, Rule::Net(_))
    }
}

/// Lowercases a host name and strips one trailing dot.
pub fn normalize_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn valid_domain(d: &str) -> bool {
    !d.is_empty()
        && d.len() <= 253
        && d.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl FromStr for Rule {
    type Err = NetworkError;

    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        let bad = |reason| NetworkError::PolicyEntry {
            entry: entry.to_string(),
            reason,
        };
        let s = entry.trim();
        if s.contains(':') {
            return Err(bad(
                "IPv6 entries are not supported (sandboxes have IPv4 only)",
            ));
        }
        if let Ok(net) = s.parse::<Ipv4Net>() {
            return Ok(Rule::Net(net.trunc()));
        }
        if let Ok(ip) = s.parse::<Ipv4Addr>() {
            return Ok(Rule::Net(Ipv4Net::from(ip)));
        }
        if s.contains('/') {
            return Err(bad("not a valid IPv4 CIDR"));
        }
        if let Some(base) = s.strip_prefix("*.") {
            let base = normalize_name(base);
            if !valid_domain(&base) {
                return Err(bad("not a valid `*.domain`"));
            }
            return Ok(Rule::Wildcard(base));
        }
        let name = normalize_name(s);
        if name.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(bad("not a valid IPv4 address"));
        }
        if !valid_domain(&name) {
            return Err(bad("expected a CIDR, an IP, a domain or `*.domain`"));
        }
        Ok(Rule::Domain(name))
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Net(net) if net.prefix_len() == 32 => write!(f, "{}", net.addr()),
            Rule::Net(net) => write!(f, "{net}"),
            Rule::Domain(d) => write!(f, "{d}"),
            Rule::Wildcard(d) => write!(f, "*.{d}"),
        }
    }
}

/// The wire shape of a policy (`{"internet": true, "allow": [..], "deny": [..]}`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyWire {
    #[serde(default = "default_internet")]
    internet: bool,
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
}

fn default_internet() -> bool {
    true
}

/// A sandbox's egress policy.
///
/// * `internet: true` (the default): every destination outside the floor is allowed unless a
///   deny entry names it.
/// * `internet: false`: only destinations named by an allow entry are reachable.
/// * Deny wins over allow. Network entries match the destination address; domain entries match the
///   name the connection itself carries (TLS SNI or HTTP `Host`), and an allowed name is only
///   reachable on the addresses that name resolves to through the gateway.
/// * Nothing here opens the floor (see [`crate::NetworkConfig`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PolicyWire", into = "PolicyWire")]
pub struct NetworkPolicy {
    /// Whether destinations that no allow entry names are reachable.
    pub internet: bool,
    /// Destinations opened (needed when `internet` is false).
    pub allow: Vec<Rule>,
    /// Destinations closed whatever else says.
    pub deny: Vec<Rule>,
}

impl Default for NetworkPolicy {
    fn default() -> Self {
        NetworkPolicy {
            internet: true,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }
}

impl TryFrom<PolicyWire> for NetworkPolicy {
    type Error = NetworkError;

    fn try_from(w: PolicyWire) -> Result<Self, Self::Error> {
        NetworkPolicy::parse(w.internet, &w.allow, &w.deny)
    }
}

impl From<NetworkPolicy> for PolicyWire {
    fn from(p: NetworkPolicy) -> Self {
        PolicyWire {
            internet: p.internet,
            allow: p.allow.iter().map(ToString::to_string).collect(),
            deny: p.deny.iter().map(ToString::to_string).collect(),
        }
    }
}

/// What the gateway decided about one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Connect.
    Allow,
    /// Refuse: a deny entry names it.
    Denied,
    /// Refuse: internet is off and no allow entry names it.
    NotAllowed,
    /// The decision depends on the name the connection carries; read it first.
    NeedName,
}

impl NetworkPolicy {
    /// Builds a policy from its string entries. Errors: [`NetworkError::PolicyEntry`] naming the
    /// first entry that is not a CIDR, IP, domain or `*.domain`.
    pub fn parse<S: AsRef<str>>(internet: bool, allow: &[S], deny: &[S]) -> crate::Result<Self> {
        let parse = |list: &[S]| {
            list.iter()
                .map(|s| s.as_ref().parse())
                .collect::<Result<Vec<Rule>, _>>()
        };
        Ok(NetworkPolicy {
            internet,
            allow: parse(allow)?,
            deny: parse(deny)?,
        })
    }

    /// A policy that reaches nothing.
    pub fn offline() -> Self {
        NetworkPolicy {
            internet: false,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }

    fn has_deny_domains(&self) -> bool {
        self.deny.iter().any(Rule::is_domain)
    }

    fn has_allow_domains(&self) -> bool {
        self.allow.iter().any(Rule::is_domain)
    }

    /// Judges a destination address before any byte of the connection is read.
    pub fn judge_ip(&self, ip: Ipv4Addr) -> Verdict {
        if self.deny.iter().any(|r| r.matches_ip(ip)) {
            return Verdict::Denied;
        }
        let allowed = self.internet || self.allow.iter().any(|r| r.matches_ip(ip));
        if self.has_deny_domains() || (!allowed && self.has_allow_domains()) {
            return Verdict::NeedName;
        }
        if allowed {
            Verdict::Allow
        } else {
            Verdict::NotAllowed
        }
    }

    /// Judges a connection once its name is known. `name` is the normalised SNI or `Host` (None
    /// when the connection carries none); `name_resolves_to_ip` says whether the gateway's resolver
    /// maps that name to the destination address.
    pub fn judge_connection(
        &self,
        ip: Ipv4Addr,
        name: Option<&str>,
        name_resolves_to_ip: bool,
    ) -> Verdict {
        if self.deny.iter().any(|r| r.matches_ip(ip)) {
            return Verdict::Denied;
        }
        if let Some(name) = name {
            if self.deny.iter().any(|r| r.matches_name(name)) {
                return Verdict::Denied;
            }
        }
        if self.internet || self.allow.iter().any(|r| r.matches_ip(ip)) {
            return Verdict::Allow;
        }
        match name {
            Some(name)
                if name_resolves_to_ip && self.allow.iter().any(|r| r.matches_name(name)) =>
            {
                Verdict::Allow
            }
            _ => Verdict::NotAllowed,
        }
    }

    /// Judges a DNS question for `name` (normalised): true when the gateway may resolve it.
    pub fn allows_lookup(&self, name: &str) -> bool {
        if self.deny.iter().any(|r| r.matches_name(name)) {
            return false;
        }
        self.internet || self.allow.iter().any(|r| r.matches_name(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().expect("ip")
    }

    #[test]
    fn parses_every_kind_and_refuses_junk() {
        let p = NetworkPolicy::parse(
            false,
            &["10.0.0.0/8", "1.2.3.4", "Api.Example.com.", "*.svc.test"],
            &[],
        )
        .expect("parse");
        assert_eq!(p.allow[0], Rule::Net("10.0.0.0/8".parse().expect("net")));
        assert_eq!(p.allow[1], Rule::Net("1.2.3.4/32".parse().expect("net")));
        assert_eq!(p.allow[2], Rule::Domain("api.example.com".into()));
        assert_eq!(p.allow[3], Rule::Wildcard("svc.test".into()));
        for junk in ["1.2.3.4/33", "::1", "a b", "*.", "", "300.1.1.1", "x/y"] {
            assert!(junk.parse::<Rule>().is_err(), "{junk:?} accepted");
        }
    }

    #[test]
    fn wildcard_matches_below_only() {
        let r: Rule = "*.example.com".parse().expect("rule");
        assert!(r.matches_name("a.example.com"));
        assert!(r.matches_name("a.b.example.com"));
        assert!(!r.matches_name("example.com"));
        assert!(!r.matches_name("badexample.com"));
    }

    #[test]
    fn deny_wins_and_names_need_resolution() {
        let p = NetworkPolicy::parse(false, &["203.0.113.0/24", "ok.test"], &["203.0.113.20"])
            .expect("p");
        assert_eq!(p.judge_ip(ip("203.0.113.20")), Verdict::Denied);
        assert_eq!(p.judge_ip(ip("203.0.113.10")), Verdict::Allow);
        assert_eq!(p.judge_ip(ip("198.51.100.9")), Verdict::NeedName);
        assert_eq!(
            p.judge_connection(ip("198.51.100.9"), Some("ok.test"), true),
            Verdict::Allow
        );
        assert_eq!(
            p.judge_connection(ip("198.51.100.9"), Some("ok.test"), false),
            Verdict::NotAllowed
        );
        assert_eq!(
            p.judge_connection(ip("198.51.100.9"), Some("no.test"), true),
            Verdict::NotAllowed
        );
        assert_eq!(
            p.judge_connection(ip("198.51.100.9"), None, false),
            Verdict::NotAllowed
        );
        let open = NetworkPolicy::parse(true, &[] as &[&str], &["*.bad.test"]).expect("p");
        assert_eq!(open.judge_ip(ip("198.51.100.9")), Verdict::NeedName);
        assert_eq!(
            open.judge_connection(ip("198.51.100.9"), Some("x.bad.test"), true),
            Verdict::Denied
        );
        assert_eq!(
            open.judge_connection(ip("198.51.100.9"), None, false),
            Verdict::Allow
        );
        assert!(!open.allows_lookup("x.bad.test"));
        assert!(open.allows_lookup("good.test"));
        assert!(!NetworkPolicy::offline().allows_lookup("good.test"));
    }

    #[test]
    fn wire_form_round_trips_with_defaults() {
        let p: NetworkPolicy = serde_json::from_str(r#"{"allow":["*.a.test"]}"#).expect("json");
        assert!(p.internet);
        assert_eq!(
            serde_json::to_value(&p).expect("ser")["allow"][0],
            "*.a.test"
        );
        assert!(serde_json::from_str::<NetworkPolicy>(r#"{"deny":["nope/1"]}"#).is_err());
        assert!(serde_json::from_str::<NetworkPolicy>(r#"{"other":1}"#).is_err());
    }
}
