//! `cove expire ID (--in SECONDS | --at TIME | --never) [--on-expiry delete|suspend|pause]`: sets
//! when a sandbox expires (it is then deleted or suspended) and prints the new expiry.

use clap::Args;
use cove_api_types::{OnExpiry, SetExpiryRequest};
use cove_client::Client;

use super::create::parse_on_expiry;

/// Options of `cove expire`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("when").required(true).args(["in_s", "at", "never"])))]
pub struct ExpireArgs {
    /// Sandbox id.
    pub id: String,
    /// Expire this many seconds from now.
    #[arg(long = "in", value_name = "SECONDS")]
    pub in_s: Option<u64>,
    /// Expire at this time (RFC 3339, e.g. 2030-01-01T00:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub at: Option<chrono::DateTime<chrono::Utc>>,
    /// Never expire (its TTL included).
    #[arg(long)]
    pub never: bool,
    /// What the expiry does: `delete`, `suspend` or `pause` (default: what it did before).
    #[arg(long, value_name = "ACTION", value_parser = parse_on_expiry)]
    pub on_expiry: Option<OnExpiry>,
}

impl ExpireArgs {
    /// The request these options describe (`None`: clear the expiry).
    pub fn request(&self) -> Option<SetExpiryRequest> {
        (!self.never).then_some(SetExpiryRequest {
            expires_at: self.at,
            in_s: self.in_s,
            on_expiry: self.on_expiry,
        })
    }
}

/// Runs `cove expire`.
pub async fn run(client: &Client, args: ExpireArgs) -> anyhow::Result<()> {
    let s = match args.request() {
        Some(req) => client.set_sandbox_expiry(&args.id, &req).await?,
        None => client.clear_sandbox_expiry(&args.id).await?,
    };
    match s.expires_at {
        Some(at) => crate::outln!(
            "{} expires at {} ({})",
            s.id,
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            s.on_expiry.as_str()
        ),
        None => crate::outln!("{} does not expire", s.id),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ExpireArgs,
    }

    #[test]
    fn one_of_in_at_never() {
        let req = |argv: &[&str]| {
            Cli::try_parse_from(argv)
                .map(|c| c.args.request())
                .map_err(|e| e.kind())
        };
        assert_eq!(
            req(&["x", "sb-1", "--in", "60", "--on-expiry", "suspend"]),
            Ok(Some(SetExpiryRequest {
                in_s: Some(60),
                on_expiry: Some(OnExpiry::Suspend),
                ..Default::default()
            }))
        );
        assert_eq!(req(&["x", "sb-1", "--never"]), Ok(None));
        assert!(req(&["x", "sb-1"]).is_err());
        assert!(req(&["x", "sb-1", "--in", "5", "--never"]).is_err());
        assert!(req(&["x", "sb-1", "--in", "5", "--on-expiry", "stop"]).is_err());
    }
}
