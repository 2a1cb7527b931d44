//! `cove logs SANDBOX COMMAND [-f] [--offset N]`: a command's output: what it has written so
//! far, or with `-f` everything until it ends. stdout and stderr go to their own streams;
//! offsets count both together, so `--offset` resumes exactly.

use anyhow::Context as _;
use clap::Args;
use cove_api_types::CommandState;
use cove_client::{AttachEvent, Client};
use futures::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt as _};

/// Options of `cove logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// Command id (as `cove exec -d` and `cove ps` print it).
    pub command: String,
    /// Keep following the output until the command ends.
    #[arg(short, long)]
    pub follow: bool,
    /// Start at this byte of the output (stdout and stderr counted together).
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub offset: u64,
}

/// Runs `cove logs`. It takes a new attachment token, which revokes the command's previous
/// one (another follower reconnecting with it is refused).
pub async fn run(client: &Client, args: LogsArgs) -> anyhow::Result<()> {
    let command = client
        .get_command(&args.sandbox, &args.command, None)
        .await?;
    // Without -f, a running command's output up to what it has written by now.
    let end =
        (!args.follow && command.state == CommandState::Running).then_some(command.output_bytes);
    if end.is_some_and(|end| end <= args.offset) {
        return Ok(());
    }
    let attachment = client.new_attachment(&args.sandbox, &args.command).await?;
    let mut events = std::pin::pin!(client.attach(&attachment, args.offset));
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    while let Some(event) = events.next().await {
        let reached = match event? {
            AttachEvent::Stdout { offset, data } => {
                write(&mut stdout, &data).await?;
                offset + data.len() as u64
            }
            AttachEvent::Stderr { offset, data } => {
                let _ = write(&mut stderr, &data).await;
                offset + data.len() as u64
            }
            AttachEvent::Gap { offset, len } => {
                eprintln!("cove: warning: {len} bytes of output were dropped (over the cap)");
                offset + len
            }
            AttachEvent::Exit(_) => break,
        };
        if end.is_some_and(|end| reached >= end) {
            break;
        }
    }
    Ok(())
}

/// Writes and flushes; a closed stdout ends `cove` quietly (as `cove logs | head` expects).
async fn write(out: &mut (impl AsyncWrite + Unpin), data: &[u8]) -> anyhow::Result<()> {
    let written = async {
        out.write_all(data).await?;
        out.flush().await
    }
    .await;
    match written {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {
            crate::output::exit_on_write_error(&err)
        }
        written => written.context("writing the output"),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::{Cli, Verb};

    #[test]
    fn logs_parses() {
        let cli = Cli::try_parse_from(["cove", "logs", "sb-1", "cmd-1", "-f", "--offset", "10"])
            .expect("parses");
        let Verb::Logs(args) = cli.verb else {
            panic!("expected logs")
        };
        assert!(args.follow);
        assert_eq!(args.offset, 10);
    }
}
