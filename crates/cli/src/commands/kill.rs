//! `cove kill SANDBOX COMMAND [--signal SIG]`: ends a command: by default its whole process
//! tree (SIGTERM, then SIGKILL after the grace period); with `--signal`, that signal only.

use std::time::Duration;

use clap::Args;
use cove_client::Client;

/// Options of `cove kill`.
#[derive(Debug, Args)]
pub struct KillArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// Command id (as `cove exec -d` and `cove ps` print it).
    pub command: String,
    /// Send this signal (`SIGINT`, `INT`, `2`) to the command's process group and return,
    /// instead of killing its whole tree.
    #[arg(short, long, value_name = "SIG")]
    pub signal: Option<String>,
    /// Milliseconds between SIGTERM and SIGKILL when killing the tree (default 2000).
    #[arg(long, value_name = "MS", conflicts_with = "signal")]
    pub grace_ms: Option<u64>,
}

/// Runs `cove kill`: prints `COMMAND STATE` after it (`exited` once a kill answered).
pub async fn run(client: &Client, args: KillArgs) -> anyhow::Result<()> {
    let command = match &args.signal {
        Some(signal) => client.signal(&args.sandbox, &args.command, signal).await?,
        None => {
            let grace = args.grace_ms.map(Duration::from_millis);
            client.kill(&args.sandbox, &args.command, grace).await?
        }
    };
    let state = match command.state {
        cove_api_types::CommandState::Running => "running",
        cove_api_types::CommandState::Exited => "exited",
    };
    crate::outln!("{} {state}", command.id);
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::{Cli, Verb};

    #[test]
    fn kill_parses() {
        let cli = Cli::try_parse_from(["cove", "kill", "sb-1", "cmd-1", "--signal", "INT"])
            .expect("parses");
        let Verb::Kill(args) = cli.verb else {
            panic!("expected kill")
        };
        assert_eq!(args.signal.as_deref(), Some("INT"));
        assert!(
            Cli::try_parse_from(["cove", "kill", "sb-1", "c", "-s", "INT", "--grace-ms", "5"])
                .is_err()
        );
        assert!(Cli::try_parse_from(["cove", "kill", "sb-1"]).is_err());
    }
}
