//! `cove network ID [--no-internet] [--allow DEST].. [--deny DEST]..`: shows a sandbox's egress
//! policy and its gateway's counters; with any flag, replaces the policy first (live: the next
//! connection follows it).

use clap::Args;
use cove_api_types::SandboxNetwork;
use cove_client::Client;

use super::create::NetworkArgs;

/// Options of `cove network`.
#[derive(Debug, Args)]
pub struct NetworkVerbArgs {
    /// Sandbox id.
    pub id: String,
    /// The new policy (all of it: flags not given take their defaults).
    #[command(flatten)]
    pub network: NetworkArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cove network`.
pub async fn run(client: &Client, args: NetworkVerbArgs) -> anyhow::Result<()> {
    let net = match args.network.policy() {
        Some(policy) => client.set_sandbox_network(&args.id, &policy).await?,
        None => client.sandbox_network(&args.id).await?,
    };
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&net)?);
    } else {
        crate::out!("{}", describe(&net));
    }
    Ok(())
}

fn list(rules: &[cove_api_types::EgressRule]) -> String {
    if rules.is_empty() {
        return "-".to_string();
    }
    rules
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The text form.
fn describe(n: &SandboxNetwork) -> String {
    let c = &n.counters;
    let mut out = String::new();
    let mut field = |name: &str, value: &str| out.push_str(&format!("{name:<10} {value}\n"));
    field("internet:", if n.network.internet { "on" } else { "off" });
    field("allow:", &list(&n.network.allow));
    field("deny:", &list(&n.network.deny));
    field(
        "enforced:",
        &match (&n.enforced, &n.address) {
            (true, Some(a)) => format!("yes (address {a})"),
            (true, None) => "yes".to_string(),
            (false, _) => "no (not running on a node with sandbox networks)".to_string(),
        },
    );
    field(
        "traffic:",
        &format!("{} bytes out, {} bytes in", c.bytes_out, c.bytes_in),
    );
    field(
        "conns:",
        &format!(
            "{} allowed, {} denied",
            c.connections_allowed, c.connections_denied
        ),
    );
    field(
        "dns:",
        &format!("{} answered, {} refused", c.dns_answered, c.dns_refused),
    );
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Verb};

    #[test]
    fn flags_replace_the_policy_and_none_only_shows_it() {
        let cli = Cli::try_parse_from(["cove", "network", "sb-1", "--allow", "example.com"])
            .expect("parses");
        let Verb::Network(args) = cli.verb else {
            panic!("expected network")
        };
        let p = args.network.policy().expect("policy");
        assert!(p.internet);
        assert_eq!(p.allow[0].to_string(), "example.com");
        let cli = Cli::try_parse_from(["cove", "network", "sb-1"]).expect("parses");
        let Verb::Network(args) = cli.verb else {
            panic!("expected network")
        };
        assert!(args.network.policy().is_none());
    }

    #[test]
    fn describe_shows_policy_and_counters() {
        let n: SandboxNetwork = serde_json::from_value(serde_json::json!({
            "sandbox_id": "sb-1",
            "network": {"internet": false, "allow": ["pypi.org"], "deny": []},
            "enforced": true, "address": "10.1.0.2",
            "counters": {"bytes_out": 10, "bytes_in": 20, "connections_allowed": 1,
                "connections_denied": 2, "dns_answered": 3, "dns_refused": 4}
        }))
        .expect("network");
        let text = describe(&n);
        assert!(text.contains("internet:  off\n"), "{text}");
        assert!(text.contains("allow:     pypi.org\n"), "{text}");
        assert!(text.contains("conns:     1 allowed, 2 denied\n"), "{text}");
    }
}
