//! `cove ports ID [--public|--private] [--link PORT [--path P]]`: how to reach a sandbox's
//! ports (host on the proxy listener, path on the API, port token, public or private); with
//! `--public`/`--private`, changes that first; with `--link`, prints a one-time link for a
//! browser (it sets a cookie for that port's host and works once, for 5 minutes).

use clap::Args;
use cove_api_types::SandboxPorts;
use cove_client::Client;

/// Options of `cove ports`.
#[derive(Debug, Args)]
pub struct PortsArgs {
    /// Sandbox id.
    pub id: String,
    /// Make the ports reachable without a credential.
    #[arg(long, conflicts_with = "private")]
    pub public: bool,
    /// Make the ports need a credential again (the default).
    #[arg(long)]
    pub private: bool,
    /// Print a one-time link to this port for a browser (needs the server's proxy listener).
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub link: Option<u16>,
    /// Where the link lands (default `/`).
    #[arg(long, value_name = "PATH", requires = "link")]
    pub path: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cove ports`.
pub async fn run(client: &Client, args: PortsArgs) -> anyhow::Result<()> {
    let ports = match (args.public, args.private) {
        (true, _) => client.set_sandbox_ports(&args.id, true).await?,
        (_, true) => client.set_sandbox_ports(&args.id, false).await?,
        _ => client.sandbox_ports(&args.id).await?,
    };
    if let Some(port) = args.link {
        let link = client
            .port_link(&args.id, port, args.path.as_deref())
            .await?;
        if args.json {
            crate::outln!("{}", serde_json::to_string_pretty(&link)?);
        } else {
            crate::outln!("{}", link.url);
        }
        return Ok(());
    }
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&ports)?);
    } else {
        crate::out!("{}", describe(&ports));
    }
    Ok(())
}

/// The text form.
fn describe(p: &SandboxPorts) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: &str| out.push_str(&format!("{name:<8} {value}\n"));
    field(
        "access:",
        if p.public {
            "public (no credential needed)"
        } else {
            "private (port token, a one-time link's cookie, or the admin token)"
        },
    );
    field(
        "host:",
        &p.host.as_ref().map_or_else(
            || "- (no proxy listener)".to_string(),
            |h| format!("http://{h}/"),
        ),
    );
    field("path:", &format!("{}{{port}}/", p.path));
    field("token:", &p.token);
    for port in &p.exposed {
        let url = p.host.as_ref().map_or_else(
            || format!("{}{port}/", p.path),
            |h| format!("http://{}/", h.replace("{port}", &port.to_string())),
        );
        field("exposed:", &format!("{port} {url}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Verb};

    #[test]
    fn flags_parse() {
        let cli = Cli::try_parse_from(["cove", "ports", "sb-1", "--link", "8000", "--path", "/a"])
            .expect("parses");
        let Verb::Ports(args) = cli.verb else {
            panic!("expected ports")
        };
        assert_eq!(args.link, Some(8000));
        assert_eq!(args.path.as_deref(), Some("/a"));
        assert!(Cli::try_parse_from(["cove", "ports", "sb-1", "--public", "--private"]).is_err());
        assert!(Cli::try_parse_from(["cove", "ports", "sb-1", "--link", "0"]).is_err());
    }

    #[test]
    fn describe_shows_host_and_access() {
        let p = SandboxPorts {
            sandbox_id: "sb-1".into(),
            token: "t".into(),
            path: "/v1/sandboxes/sb-1/ports/".into(),
            public: false,
            host: Some("{port}-sb-1.localhost:7704".into()),
            exposed: vec![8000],
        };
        let text = describe(&p);
        assert!(
            text.contains("exposed: 8000 http://8000-sb-1.localhost:7704/\n"),
            "{text}"
        );
        assert!(
            text.contains("host:    http://{port}-sb-1.localhost:7704/\n"),
            "{text}"
        );
        assert!(text.contains("access:  private"), "{text}");
    }
}
