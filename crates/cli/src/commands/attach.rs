//! `cove attach SANDBOX COMMAND [--offset N] [-i]`: follows a running (or ended) command, as
//! `exec` follows the one it starts: its output from byte `offset`, Ctrl-C passed on, the
//! command's exit code. A command on a terminal (`exec -t`, `pty`) gets this terminal.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use cove_client::Client;
use tokio::signal::unix::{signal, SignalKind};

use super::exec::{finish, pty, stream};

/// Options of `cove attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// Command id (as `cove exec -d` and `cove ps` print it).
    pub command: String,
    /// Start at this byte of the command's output (stdout and stderr counted together).
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub offset: u64,
    /// Copy this terminal's stdin to the command (it must have been started with stdin).
    #[arg(short = 'i', long)]
    pub stdin: bool,
    /// When the command ends, print its status as one JSON line (as `exec --json`).
    #[arg(long)]
    pub json: bool,
}

/// Runs `cove attach`. It takes a new attachment token, which revokes the command's previous one.
pub async fn run(client: &Client, args: AttachArgs) -> anyhow::Result<ExitCode> {
    let command = client
        .get_command(&args.sandbox, &args.command, None)
        .await?;
    let attachment = client.new_attachment(&args.sandbox, &args.command).await?;
    let ended = if command.pty {
        pty::session(client, &attachment, args.offset).await?
    } else {
        let mut sigint =
            signal(SignalKind::interrupt()).context("installing the Ctrl-C handler")?;
        stream::follow(
            client,
            &args.sandbox,
            &args.command,
            &attachment,
            args.offset,
            args.stdin,
            &mut sigint,
        )
        .await?
    };
    Ok(ExitCode::from(finish(&args.sandbox, &ended, args.json)))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::{Cli, Verb};

    #[test]
    fn attach_parses() {
        let cli = Cli::try_parse_from(["cove", "attach", "sb-1", "cmd-1", "--offset", "7"])
            .expect("parses");
        let Verb::Attach(args) = cli.verb else {
            panic!("expected attach")
        };
        assert_eq!((args.command.as_str(), args.offset), ("cmd-1", 7));
    }
}
