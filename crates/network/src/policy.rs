//! A sandbox's egress policy: the domain's [`EgressPolicy`] (`{internet, allow, deny}`) and how
//! one connection is judged ([`EgressPolicy::judge_ip`], [`EgressPolicy::judge_connection`],
//! [`EgressPolicy::allows_lookup`]). The rules live in `cove-domain` so the API, the store and
//! the gateway share one type.

pub use cove_domain::egress::{normalize_name, EgressPolicy, EgressRule, Verdict};
