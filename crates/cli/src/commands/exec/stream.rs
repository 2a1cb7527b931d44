//! Following a command's output on the data plane: copy it to stdout and stderr as it arrives,
//! copy stdin to it, pass Ctrl-C on, and find out how it ended.

use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use cove_api_types::{Attachment, Command, CommandState, ErrorCode, SandboxState};
use cove_client::{AttachEvent, Client};
use futures::StreamExt;
use tokio::io::{AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::signal::unix::Signal;

use super::status::Ended;
use crate::exit::{EXIT_BROKEN_PIPE, EXIT_INTERRUPTED};

/// Size of the chunks stdin is sent in.
const STDIN_CHUNK: usize = 64 * 1024;

/// Follows command `command_id` of `sandbox` from output byte `offset` until it ends: output to
/// this process's stdout and stderr, this process's stdin to the command when `stdin`. The
/// first Ctrl-C (`sigint`) sends SIGINT to the command, the second kills it, the third stops
/// waiting. A suspend of the sandbox under the command is reported as such.
pub(crate) async fn follow(
    client: &Client,
    sandbox: &str,
    command_id: &str,
    attachment: &Attachment,
    offset: u64,
    stdin: bool,
    sigint: &mut Signal,
) -> anyhow::Result<Ended> {
    let stdin_task = stdin.then(|| tokio::spawn(copy_stdin(client.clone(), attachment.clone())));
    let outcome = stream_output(client, sandbox, command_id, attachment, offset, sigint).await;
    if let Some(task) = stdin_task {
        task.abort();
    }
    let command = match outcome {
        Ok(Outcome::Exited(command)) => command,
        Ok(Outcome::Abandoned) => {
            eprintln!("cove: interrupted; the command may still be running");
            return Ok(Ended::stopped(EXIT_INTERRUPTED));
        }
        Ok(Outcome::StdoutClosed) => return Ok(Ended::stopped(EXIT_BROKEN_PIPE)),
        Err(err) if was_suspended(client, sandbox).await => {
            drop(err);
            return Ok(Ended::suspended());
        }
        Err(err) => return Err(err),
    };
    if command.truncated {
        eprintln!("cove: warning: the command's output exceeded the kept cap; some was dropped");
    }
    Ok(Ended::exited(command))
}

/// Whether `sandbox` is suspending or suspended (which ends its commands on runc).
async fn was_suspended(client: &Client, sandbox: &str) -> bool {
    client.get_sandbox(sandbox).await.is_ok_and(|s| {
        matches!(
            s.state,
            SandboxState::Suspending | SandboxState::Suspended | SandboxState::Waking
        )
    })
}

/// How copying a command's output ended.
enum Outcome {
    /// The command exited.
    Exited(Command),
    /// The user stopped waiting (third Ctrl-C).
    Abandoned,
    /// Our stdout was closed (`cove exec ... | head`); the command got SIGPIPE.
    StdoutClosed,
}

/// Copies output until the exit event.
async fn stream_output(
    client: &Client,
    sandbox: &str,
    command_id: &str,
    attachment: &Attachment,
    offset: u64,
    sigint: &mut Signal,
) -> anyhow::Result<Outcome> {
    let mut events = std::pin::pin!(client.attach(attachment, offset));
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    let mut interrupts = 0;
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(AttachEvent::Stdout { data, .. })) => {
                    match write_flush(&mut stdout, &data).await {
                        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {
                            // As in a local pipeline: the writer learns its reader is gone.
                            let _ = client.signal(sandbox, command_id, "SIGPIPE").await;
                            return Ok(Outcome::StdoutClosed);
                        }
                        written => written.context("writing to stdout")?,
                    }
                }
                Some(Ok(AttachEvent::Stderr { data, .. })) => {
                    // A closed stderr loses the command's errors, not its result.
                    let _ = write_flush(&mut stderr, &data).await;
                }
                Some(Ok(AttachEvent::Exit(command))) => return Ok(Outcome::Exited(command)),
                Some(Ok(AttachEvent::Gap { len, .. })) => {
                    eprintln!("cove: warning: {len} bytes of output were dropped (over the cap)");
                }
                Some(Err(err)) => {
                    // Said only when the command is found to have ended; a suspend says its own.
                    let command = wait_exit(client, sandbox, command_id).await?;
                    eprintln!("cove: warning: output stream lost ({err}); some output may be missing");
                    return Ok(Outcome::Exited(command));
                }
                None => return wait_exit(client, sandbox, command_id).await.map(Outcome::Exited),
            },
            Some(()) = sigint.recv() => {
                interrupts += 1;
                match interrupts {
                    1 => {
                        if let Err(err) = client.signal(sandbox, command_id, "SIGINT").await {
                            eprintln!("cove: cannot interrupt the command: {err}");
                        }
                    }
                    2 => {
                        eprintln!("cove: killing the command (Ctrl-C again to stop waiting)");
                        let (client, sandbox, id) =
                            (client.clone(), sandbox.to_owned(), command_id.to_owned());
                        // Killing waits for every process to go; keep copying output meanwhile.
                        tokio::spawn(async move {
                            if let Err(err) = client.kill(&sandbox, &id, None).await {
                                eprintln!("cove: cannot kill the command: {err}");
                            }
                        });
                    }
                    _ => return Ok(Outcome::Abandoned),
                }
            }
        }
    }
}

async fn write_flush(out: &mut (impl AsyncWrite + Unpin), data: &[u8]) -> std::io::Result<()> {
    out.write_all(data).await?;
    out.flush().await
}

/// Long-polls the command until it has exited (when its output stream is lost).
async fn wait_exit(client: &Client, sandbox: &str, command_id: &str) -> anyhow::Result<Command> {
    loop {
        let command = client
            .get_command(sandbox, command_id, Some(Duration::from_secs(30)))
            .await?;
        if command.state == CommandState::Exited {
            return Ok(command);
        }
    }
}

/// Copies this process's stdin to the command, then closes the command's stdin at EOF.
async fn copy_stdin(client: Client, attachment: Attachment) {
    let copied: anyhow::Result<()> = async {
        let mut stdin = tokio::io::stdin();
        let mut buf = vec![0u8; STDIN_CHUNK];
        loop {
            let n = stdin.read(&mut buf).await.context("reading stdin")?;
            if n == 0 {
                break;
            }
            client
                .stdin_write(&attachment, Bytes::copy_from_slice(&buf[..n]))
                .await?;
        }
        client.stdin_close(&attachment).await?;
        Ok(())
    }
    .await;
    if let Err(err) = copied {
        // The command exited or closed its stdin: the rest of the input has no reader.
        let gone = err
            .downcast_ref::<cove_client::ClientError>()
            .and_then(|e| e.api_body())
            .is_some_and(|body| {
                matches!(
                    body.code,
                    ErrorCode::FailedPrecondition | ErrorCode::CommandNotFound
                )
            });
        if !gone {
            eprintln!("cove: warning: stdin not fully copied: {err:#}");
        }
    }
}
