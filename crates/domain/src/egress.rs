//! The egress policy of a sandbox: what outbound connections its node's gateway lets through
//! (DESIGN.md §5–6). Pure rules, no I/O: the gateway (crate `cove-network`) enforces them on each
//! connection with the destination's IP and, where the connection names one (TLS SNI, HTTP
//! `Host`), its name. The API calls this object `network` (`POST /v1/sandboxes {network: ..}`).
//!
//! Rules are strings: an IPv4 CIDR (`10.1.0.0/16`), an IPv4 address (`203.0.113.7`), an exact
//! domain (`api.example.com`) or a wildcard (`*.example.com`: every name below it, not the name
//! itself). `deny` wins over `allow` for the same destination; with `internet: false` only
//! `allow` opens anything. A domain rule matches only a connection that carries that name and
//! goes to an address the name resolves to through the gateway, so allowing a domain opens
//! neither its raw IP nor another name on the same IP. The floor (node, host, metadata, other
//! sandboxes, private ranges) is the gateway's and no policy can open it. Sandboxes have IPv4
//! only, so IPv6 entries are refused.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::InvalidInput;

/// Most rules in one list (allow or deny).
pub const MAX_RULES: usize = 256;
/// Longest domain in a rule, in bytes (RFC 1035).
pub const MAX_DOMAIN_LEN: usize = 253;

/// One entry of an allow or deny list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EgressRule {
    /// An IPv4 network (host bits cleared); a bare IP is a /32.
    Net(Ipv4Net),
    /// Exactly this host name (lowercase, no trailing dot).
    Domain(String),
    /// `*.example.com`: every name strictly below `example.com` (stored without `*.`).
    Wildcard(String),
}

/// Lowercases a host name and strips one trailing dot.
pub fn normalize_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl EgressRule {
    /// True when this rule names `ip` (network rules only).
    pub fn matches_ip(&self, ip: Ipv4Addr) -> bool {
        matches!(self, EgressRule::Net(net) if net.contains(&ip))
    }

    /// True when this rule names `name` (domain rules only); `name` must be normalised with
    /// [`normalize_name`].
    pub fn matches_name(&self, name: &str) -> bool {
        match self {
            EgressRule::Net(_) => false,
            EgressRule::Domain(d) => d == name,
            EgressRule::Wildcard(base) => {
                name.len() > base.len() + 1
                    && name.ends_with(base.as_str())
                    && name.as_bytes()[name.len() - base.len() - 1] == b'.'
            }
        }
    }

    /// Whether the rule is about names (and so needs a name on the connection to match).
    pub fn is_domain(&self) -> bool {
        !matches!(self, EgressRule::Net(_))
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
    let d = normalize_name(s);
    (!d.is_empty() && d.len() <= MAX_DOMAIN_LEN && d.split('.').all(valid_label)).then_some(d)
}

impl FromStr for EgressRule {
    type Err = String;

    /// Parses one entry; the error says what is wrong with it (quoted).
    fn from_str(entry: &str) -> Result<Self, String> {
        let s = entry.trim();
        let bad = |why: &str| format!("{entry:?}: {why}");
        if s.contains(':') {
            return Err(bad(
                "IPv6 entries are not supported (sandboxes have IPv4 only)",
            ));
        }
        if let Ok(net) = s.parse::<Ipv4Net>() {
            return Ok(EgressRule::Net(net.trunc()));
        }
        if let Ok(ip) = s.parse::<Ipv4Addr>() {
            return Ok(EgressRule::Net(Ipv4Net::from(ip)));
        }
        if s.contains('/') {
            return Err(bad("not a valid IPv4 CIDR"));
        }
        if let Some(base) = s.strip_prefix("*.") {
            return parse_domain(base)
                .map(EgressRule::Wildcard)
                .ok_or_else(|| bad("not a valid `*.domain`"));
        }
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(bad("not a valid IPv4 address"));
        }
        parse_domain(s)
            .map(EgressRule::Domain)
            .ok_or_else(|| bad("expected an IPv4 CIDR, an IPv4 address, a domain or `*.domain`"))
    }
}

impl fmt::Display for EgressRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EgressRule::Net(net) if net.prefix_len() == 32 => write!(f, "{}", net.addr()),
            EgressRule::Net(net) => write!(f, "{net}"),
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

/// A sandbox's egress policy. Default: the internet is open and there are no rules.
///
/// * `internet: true`: every destination outside the floor is allowed unless a deny entry names
///   it.
/// * `internet: false`: only destinations named by an allow entry are reachable (and DNS
///   answers only names an allow entry names).
/// * Deny wins over allow.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EgressPolicy {
    /// Whether destinations no rule names are allowed (default true).
    #[serde(default = "default_internet")]
    pub internet: bool,
    /// Destinations allowed even with `internet: false`: CIDRs, IPs, `domain` or `*.domain`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub allow: Vec<EgressRule>,
    /// Destinations refused even when allowed otherwise (same forms as `allow`).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
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

impl EgressPolicy {
    /// Builds a policy from its string entries and checks it ([`EgressPolicy::validate`]).
    /// Errors: the first entry that is not an IPv4 CIDR, IPv4 address, domain or `*.domain`,
    /// named as `network.allow[i]` / `network.deny[i]`.
    pub fn parse<S: AsRef<str>>(
        internet: bool,
        allow: &[S],
        deny: &[S],
    ) -> Result<Self, InvalidInput> {
        let parse = |field: &str, list: &[S]| {
            list.iter()
                .enumerate()
                .map(|(i, s)| {
                    s.as_ref()
                        .parse()
                        .map_err(|e| InvalidInput::new(format!("network.{field}[{i}]"), e))
                })
                .collect::<Result<Vec<EgressRule>, _>>()
        };
        let p = EgressPolicy {
            internet,
            allow: parse("allow", allow)?,
            deny: parse("deny", deny)?,
        };
        p.validate()?;
        Ok(p)
    }

    /// A policy that reaches nothing.
    pub fn offline() -> Self {
        EgressPolicy {
            internet: false,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }

    /// Whether this is the default policy (internet on, no rules).
    pub fn is_default(&self) -> bool {
        *self == EgressPolicy::default()
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

    fn has_deny_domains(&self) -> bool {
        self.deny.iter().any(EgressRule::is_domain)
    }

    fn has_allow_domains(&self) -> bool {
        self.allow.iter().any(EgressRule::is_domain)
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
    /// when the connection carries none); `name_resolves_to_ip` says whether the gateway's
    /// resolver maps that name to the destination address.
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
    fn parses_every_kind_prints_back_and_refuses_junk() {
        let p = EgressPolicy::parse(
            false,
            &[
                "10.0.0.0/8",
                "1.2.3.4",
                "Api.Example.com.",
                "*.svc.test",
                "10.1.2.3/16",
            ],
            &[],
        )
        .expect("parse");
        assert_eq!(
            p.allow[0],
            EgressRule::Net("10.0.0.0/8".parse().expect("net"))
        );
        assert_eq!(
            p.allow[1],
            EgressRule::Net("1.2.3.4/32".parse().expect("net"))
        );
        assert_eq!(p.allow[2], EgressRule::Domain("api.example.com".into()));
        assert_eq!(p.allow[3], EgressRule::Wildcard("svc.test".into()));
        assert_eq!(p.allow[4].to_string(), "10.1.0.0/16");
        for s in [
            "10.0.0.0/8",
            "203.0.113.7",
            "api.example.com",
            "*.example.com",
        ] {
            assert_eq!(s.parse::<EgressRule>().expect(s).to_string(), s);
        }
        for junk in [
            "1.2.3.4/33",
            "::1",
            "2001:db8::/32",
            "a b",
            "*.",
            "",
            "300.1.1.1",
            "x/y",
            "-bad.com",
        ] {
            assert!(junk.parse::<EgressRule>().is_err(), "{junk:?} accepted");
        }
        let err =
            EgressPolicy::parse(true, &["ok.test"], &["ok.test", "nope/1"]).expect_err("bad entry");
        assert_eq!(err.field, "network.deny[1]");
    }

    #[test]
    fn wildcard_matches_below_only() {
        let r: EgressRule = "*.example.com".parse().expect("rule");
        assert!(r.matches_name("a.example.com"));
        assert!(r.matches_name("a.b.example.com"));
        assert!(!r.matches_name("example.com"));
        assert!(!r.matches_name("badexample.com"));
    }

    #[test]
    fn deny_wins_and_names_need_resolution() {
        let p = EgressPolicy::parse(false, &["203.0.113.0/24", "ok.test"], &["203.0.113.20"])
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
        let open = EgressPolicy::parse(true, &[] as &[&str], &["*.bad.test"]).expect("p");
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
        assert!(!EgressPolicy::offline().allows_lookup("good.test"));
    }

    #[test]
    fn wire_form_round_trips_with_defaults() {
        let p: EgressPolicy = serde_json::from_str(r#"{"allow":["*.a.test"]}"#).expect("json");
        assert!(p.internet);
        assert_eq!(
            serde_json::to_value(&p).expect("ser"),
            serde_json::json!({"internet": true, "allow": ["*.a.test"], "deny": []})
        );
        assert!(serde_json::from_str::<EgressPolicy>(r#"{"deny":["nope/1"]}"#).is_err());
        assert!(serde_json::from_str::<EgressPolicy>(r#"{"other":1}"#).is_err());
        assert!(EgressPolicy::default().is_default());
        assert!(!EgressPolicy::offline().is_default());
    }
}
