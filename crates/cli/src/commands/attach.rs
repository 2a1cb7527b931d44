//! `cove attach SANDBOX COMMAND [--offset N] [-i]`: follows a running (or ended) command, as
//! `exec` follows the one it starts: its output from byte `offset`, Ctrl-C passed on, the
//! command's exit code. A command on a terminal (`exec -t`, `pty`) gets this terminal.
//!
//! `--binary` copies the command's stdout to this stdout byte for byte over the data plane's raw
//! stream (`Accept: application/octet-stream`; no stderr, `--offset` counts stdout bytes), then
//! reads the command's exit from the API.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use cove_client::Client;
use tokio::signal::unix::{signal, SignalKind};

use super::exec::{finish, pty, stream, Ended};

/// Options of `cove attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// Command id (as `cove exec -d` and `cove ps` print it).
    pub command: String,
    /// Start at this byte of the command's output (stdout and stderr counted together; with
    /// `--binary`, stdout bytes only).
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub offset: u64,
    /// Copy this terminal's stdin to the command (it must have been started with stdin).
    #[arg(short = 'i', long)]
    pub stdin: bool,
    /// When the command ends, print its status as one JSON line (as `exec --json`).
    #[arg(long)]
    pub json: bool,
    /// Copy only stdout, raw (the data plane's binary stream: exact bytes, no stderr), to this
    /// stdout; one binary stream per command at a time.
    #[arg(long, conflicts_with = "stdin")]
    pub binary: bool,
}

/// Runs `cove attach`. It takes a new attachment token, which revokes the command's previous one.
pub async fn run(client: &Client, args: AttachArgs) -> anyhow::Result<ExitCode> {
    let command = client
        .get_command(&args.sandbox, &args.command, None)
        .await?;
    let attachment = client.new_attachment(&args.sandbox, &args.command).await?;
    let ended = if args.binary {
        binary(client, &args, &attachment).await?
    } else if command.pty {
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

/// Copies the raw stdout stream to stdout, then waits for the command's exit through the API.
async fn binary(
    client: &Client,
    args: &AttachArgs,
    attachment: &cove_api_types::Attachment,
) -> anyhow::Result<Ended> {
    use futures::StreamExt as _;
    use std::io::Write as _;
    let mut stream = Box::pin(client.attach_binary(attachment, args.offset).await?);
    let mut copied = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.with_context(|| {
            format!(
                "the stdout stream broke off; resume with --offset {}",
                args.offset + copied
            )
        })?;
        let mut out = std::io::stdout().lock();
        if let Err(e) = out.write_all(&chunk).and_then(|()| out.flush()) {
            crate::output::exit_on_write_error(&e);
        }
        copied += chunk.len() as u64;
    }
    let command = client
        .get_command(
            &args.sandbox,
            &args.command,
            Some(std::time::Duration::from_secs(30)),
        )
        .await?;
    Ok(Ended::exited(command))
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
        assert!(!args.binary);
        let cli =
            Cli::try_parse_from(["cove", "attach", "sb-1", "cmd-1", "--binary"]).expect("parses");
        let Verb::Attach(args) = cli.verb else {
            panic!("expected attach")
        };
        assert!(args.binary);
        assert!(Cli::try_parse_from(["cove", "attach", "s", "c", "--binary", "-i"]).is_err());
    }
}
