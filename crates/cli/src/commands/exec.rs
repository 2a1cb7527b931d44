//! `cove exec`: runs a command in a sandbox, streams its output, exits with its exit code;
//! with `-t`, an interactive session on a pseudo-terminal (the `pty` submodule).

mod pty;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use clap::Args;
use cove_api_types::{Attachment, Command, CommandState, CreateCommandRequest, ErrorCode};
use cove_client::{AttachEvent, Client};
use futures::StreamExt;
use tokio::io::{AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Exit code of a command whose timeout fired, as with coreutils `timeout`.
const EXIT_TIMED_OUT: u8 = 124;
/// Exit code when `cove` gives up on a command after repeated Ctrl-C (128 + SIGINT).
const EXIT_INTERRUPTED: u8 = 130;
/// Exit code when our stdout was closed before the command ended (128 + SIGPIPE).
const EXIT_BROKEN_PIPE: u8 = 141;
/// Size of the chunks stdin is sent in.
const STDIN_CHUNK: usize = 64 * 1024;

/// What to run and how; shared by `exec` and `run`.
#[derive(Debug, Clone, Args)]
pub struct ExecOptions {
    /// Environment variable of the command (repeatable).
    #[arg(short, long = "env", value_name = "K=V", value_parser = parse_key_value)]
    pub env: Vec<(String, String)>,
    /// Working directory of the command (default: the sandbox's).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// User to run as (default: the sandbox's).
    #[arg(short, long)]
    pub user: Option<String>,
    /// Kill the command after this many seconds; `cove` then exits 124.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<f64>,
    /// Copy this terminal's stdin to the command (otherwise it reads EOF at once).
    #[arg(short = 'i', long)]
    pub stdin: bool,
    /// Run on a pseudo-terminal, interactively: the local terminal goes to raw mode, keys go to
    /// the command, window resizes follow. Without a command: the user's login shell.
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Run this shell command line (`bash -l -c SCRIPT`) instead of CMD ARGS...
    #[arg(long, value_name = "SCRIPT", conflicts_with = "argv")]
    pub shell: Option<String>,
    /// Program and arguments, after `--`; run directly, without a shell.
    #[arg(value_name = "CMD", last = true, required_unless_present_any = ["shell", "tty"])]
    pub argv: Vec<String>,
}

/// What `cove exec -t` runs without a command: the user's login shell.
pub const LOGIN_SHELL: &str = "exec \"${SHELL:-/bin/sh}\" -l";

impl ExecOptions {
    /// The command request these options describe.
    pub fn request(&self) -> CreateCommandRequest {
        let (argv, shell) = match &self.shell {
            Some(script) => (None, Some(script.clone())),
            None if self.tty && self.argv.is_empty() => (None, Some(LOGIN_SHELL.to_string())),
            None => (Some(self.argv.clone()), None),
        };
        CreateCommandRequest {
            argv,
            shell,
            env: self.env.iter().cloned().collect(),
            cwd: self.cwd.clone(),
            user: self.user.clone(),
            stdin: self.stdin,
            timeout_s: self.timeout,
            pty: self.tty,
            cols: None,
            rows: None,
        }
    }
}

/// How the command line is read, and what `cove` exits with (shared by `exec` and `run`).
pub(crate) const EXEC_HELP: &str = "\
The command is given one of two ways:
  -- CMD ARGS...     argv, run directly (no shell): cove exec ID -- ls -la /tmp
  --shell 'SCRIPT'   a shell command line:          cove exec ID --shell 'echo $HOME | wc -c'

Output is copied to stdout and stderr as it arrives. The exit code is the command's; 124 when
--timeout killed it; 128+N when signal N ended it. Ctrl-C sends SIGINT to the command, a second
Ctrl-C kills it, a third stops waiting.

With -t the command runs on a terminal (default: the login shell): keys, Ctrl-C included, go to
it, and the local terminal is restored when it ends.";

/// Options of `cove exec`.
#[derive(Debug, Args)]
#[command(after_help = EXEC_HELP)]
pub struct ExecArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// The command.
    #[command(flatten)]
    pub exec: ExecOptions,
}

/// Runs `cove exec`.
pub async fn run(client: &Client, args: ExecArgs) -> anyhow::Result<ExitCode> {
    let mut sigint = signal(SignalKind::interrupt()).context("installing the Ctrl-C handler")?;
    let code = execute(client, &args.sandbox, &args.exec, &mut sigint).await?;
    Ok(ExitCode::from(code))
}

/// Runs a command in `sandbox`, copying its output to this process's stdout and stderr as it
/// arrives; returns the exit code `cove` should exit with. The first Ctrl-C (`sigint`) sends
/// SIGINT to the command, the second kills it, the third stops waiting.
pub(crate) async fn execute(
    client: &Client,
    sandbox: &str,
    options: &ExecOptions,
    sigint: &mut Signal,
) -> anyhow::Result<u8> {
    if options.tty {
        return pty::execute(client, sandbox, options).await;
    }
    let started = client.create_command(sandbox, &options.request()).await?;
    let stdin_task = options
        .stdin
        .then(|| tokio::spawn(copy_stdin(client.clone(), started.attachment.clone())));
    let outcome = stream_output(
        client,
        sandbox,
        &started.command.id,
        &started.attachment,
        sigint,
    )
    .await;
    if let Some(task) = stdin_task {
        task.abort();
    }
    let command = match outcome? {
        Outcome::Exited(command) => command,
        Outcome::Abandoned => {
            eprintln!("cove: interrupted; the command may still be running");
            return Ok(EXIT_INTERRUPTED);
        }
        Outcome::StdoutClosed => return Ok(EXIT_BROKEN_PIPE),
    };
    if command.truncated {
        eprintln!("cove: warning: the command's output exceeded the kept cap; some was dropped");
    }
    Ok(exit_status(&command))
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
    sigint: &mut Signal,
) -> anyhow::Result<Outcome> {
    let mut events = std::pin::pin!(client.attach(attachment, 0));
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
                    write_flush(&mut stderr, &data).await.context("writing to stderr")?;
                }
                Some(Ok(AttachEvent::Exit(command))) => return Ok(Outcome::Exited(command)),
                Some(Ok(AttachEvent::Gap { len, .. })) => {
                    eprintln!("cove: warning: {len} bytes of output were dropped (over the cap)");
                }
                Some(Err(err)) => {
                    eprintln!("cove: warning: output stream lost: {err}; waiting for the exit");
                    return wait_exit(client, sandbox, command_id).await.map(Outcome::Exited);
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

/// The exit code `cove` reports for an ended command: its own exit code; 124 when its timeout
/// fired; 128 + the signal number when a signal ended it.
pub fn exit_status(command: &Command) -> u8 {
    if command.timed_out {
        return EXIT_TIMED_OUT;
    }
    if let Some(code) = command.exit_code {
        return u8::try_from(code.rem_euclid(256)).unwrap_or(1);
    }
    match command.signal.as_deref().and_then(signal_number) {
        Some(n) => 128u8.saturating_add(n),
        None => 1,
    }
}

/// The Linux number of a signal named `SIGTERM`, `TERM`, `SIGRTMIN+2` or `"15"`.
fn signal_number(name: &str) -> Option<u8> {
    if let Ok(n) = name.parse::<u8>() {
        return Some(n);
    }
    let name = name.strip_prefix("SIG").unwrap_or(name);
    if let Some(rest) = name.strip_prefix("RTMIN+") {
        return rest.parse::<u8>().ok().map(|n| 34u8.saturating_add(n));
    }
    const NAMES: [&str; 31] = [
        "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
        "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG",
        "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
    ];
    match name {
        "IOT" => Some(6),
        "POLL" => Some(29),
        "RTMIN" => Some(34),
        "RTMAX" => Some(64),
        _ => NAMES
            .iter()
            .position(|n| *n == name)
            .and_then(|i| u8::try_from(i + 1).ok()),
    }
}

/// Parses `KEY=VALUE` (the value may contain `=`).
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got `{s}`")),
    }
}

/// Parses a positive number of seconds.
fn parse_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 => Ok(secs),
        _ => Err(format!("expected a positive number of seconds, got `{s}`")),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Verb};

    fn parse(args: &[&str]) -> Result<ExecArgs, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("cove").chain(args.iter().copied()))?;
        let Verb::Exec(args) = cli.verb else {
            panic!("expected exec")
        };
        Ok(args)
    }

    #[test]
    fn words_after_dashes_are_argv() {
        let args =
            parse(&["exec", "sb-1", "--env", "A=1", "--", "ls", "-la", "/tmp"]).expect("parses");
        assert_eq!(args.sandbox, "sb-1");
        let request = args.exec.request();
        assert_eq!(
            request.argv,
            Some(vec!["ls".into(), "-la".into(), "/tmp".into()])
        );
        assert_eq!(request.shell, None);
        assert_eq!(request.env["A"], "1");
        assert!(!request.stdin);
    }

    #[test]
    fn one_word_is_argv_too() {
        let args = parse(&["exec", "sb-1", "--", "echo $HOME"]).expect("parses");
        assert_eq!(args.exec.request().argv, Some(vec!["echo $HOME".into()]));
    }

    #[test]
    fn shell_runs_a_script() {
        let args = parse(&[
            "exec",
            "sb-1",
            "--shell",
            "echo $HOME | wc -c",
            "--timeout",
            "2.5",
            "-i",
        ])
        .expect("parses");
        let request = args.exec.request();
        assert_eq!(request.shell.as_deref(), Some("echo $HOME | wc -c"));
        assert_eq!(request.argv, None);
        assert_eq!(request.timeout_s, Some(2.5));
        assert!(request.stdin);
    }

    #[test]
    fn tty_runs_a_login_shell_without_a_command() {
        let args = parse(&["exec", "-t", "sb-1"]).expect("parses");
        let request = args.exec.request();
        assert!(request.pty);
        assert_eq!(request.shell.as_deref(), Some(LOGIN_SHELL));
        let args = parse(&["exec", "-t", "sb-1", "--", "top"]).expect("parses");
        assert_eq!(args.exec.request().argv, Some(vec!["top".into()]));
        assert!(args.exec.request().pty);
    }

    #[test]
    fn bad_exec_lines_are_refused() {
        assert!(parse(&["exec", "sb-1"]).is_err(), "no command");
        assert!(
            parse(&["exec", "sb-1", "--shell", "x", "--", "ls"]).is_err(),
            "both"
        );
        assert!(parse(&["exec", "sb-1", "--timeout", "0", "--", "ls"]).is_err());
        assert!(parse(&["exec", "sb-1", "--timeout", "soon", "--", "ls"]).is_err());
        assert!(parse(&["exec", "--", "ls"]).is_err(), "no sandbox");
    }

    fn ended(exit_code: Option<i32>, signal: Option<&str>, timed_out: bool) -> Command {
        serde_json::from_value(serde_json::json!({
            "id": "cmd-1", "sandbox_id": "sb-1", "argv": ["x"], "user": "user", "cwd": "/",
            "pid": 2, "state": "exited", "exit_code": exit_code, "signal": signal,
            "timed_out": timed_out, "truncated": false, "output_bytes": 0, "stdin_open": false,
            "started_at": "2025-01-01T00:00:00Z", "ended_at": "2025-01-01T00:00:01Z"
        }))
        .expect("command")
    }

    #[test]
    fn exit_statuses_follow_the_shell() {
        assert_eq!(exit_status(&ended(Some(0), None, false)), 0);
        assert_eq!(exit_status(&ended(Some(42), None, false)), 42);
        assert_eq!(exit_status(&ended(Some(256 + 3), None, false)), 3);
        assert_eq!(exit_status(&ended(None, Some("SIGKILL"), false)), 137);
        assert_eq!(exit_status(&ended(None, Some("SIGINT"), false)), 130);
        assert_eq!(exit_status(&ended(None, Some("TERM"), false)), 143);
        assert_eq!(exit_status(&ended(None, Some("SIGKILL"), true)), 124);
        assert_eq!(exit_status(&ended(None, Some("SIGWHAT"), false)), 1);
    }

    #[test]
    fn signal_names_map_to_linux_numbers() {
        assert_eq!(signal_number("SIGHUP"), Some(1));
        assert_eq!(signal_number("SIGSEGV"), Some(11));
        assert_eq!(signal_number("SIGSYS"), Some(31));
        assert_eq!(signal_number("9"), Some(9));
        assert_eq!(signal_number("SIGRTMIN+2"), Some(36));
    }

    #[test]
    fn key_values_parse() {
        assert_eq!(parse_key_value("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert_eq!(parse_key_value("A="), Ok(("A".into(), String::new())));
        assert!(parse_key_value("=x").is_err());
        assert!(parse_key_value("A").is_err());
    }
}
