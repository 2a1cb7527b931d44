//! `cove exec`: runs a command in a sandbox, streams its output, exits with its exit code;
//! with `-d`, starts it in the background and prints its id; with `-t`, an interactive
//! session on a pseudo-terminal (the `pty` submodule).

pub(crate) mod pty;
pub(crate) mod status;
pub(crate) mod stream;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use cove_api_types::CreateCommandRequest;
use cove_client::Client;
use tokio::signal::unix::{signal, Signal, SignalKind};

pub use status::{exit_status, Ended};

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
--timeout killed it; 128+N when signal N ended it; 125 when cove itself failed. One line on
stderr says when the OOM killer, the timeout or a suspend of the sandbox ended it. Ctrl-C
sends SIGINT to the command, a second Ctrl-C kills it, a third stops waiting.

With -t the command runs on a terminal (default: the login shell): keys, Ctrl-C included, go to
it, and the local terminal is restored when it ends.";

/// Options of `cove exec`.
#[derive(Debug, Args)]
#[command(after_help = EXEC_HELP)]
pub struct ExecArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// Start the command in the background and print its id (follow it with `cove logs -f`
    /// or `cove attach`, list it with `cove ps`, stop it with `cove kill`).
    #[arg(short = 'd', long, conflicts_with_all = ["stdin", "tty", "json"])]
    pub detach: bool,
    /// When the command ends, print `{exit_code, signal, oom_killed, timed_out, suspended}` as
    /// one JSON line on stdout (after its output).
    #[arg(long)]
    pub json: bool,
    /// Resume a paused or wake a suspended sandbox first.
    #[arg(long)]
    pub wake: bool,
    /// The command.
    #[command(flatten)]
    pub exec: ExecOptions,
}

/// Runs `cove exec`.
pub async fn run(client: &Client, args: ExecArgs) -> anyhow::Result<ExitCode> {
    if args.wake {
        crate::hints::ensure_running(client, &args.sandbox).await?;
    }
    if args.detach {
        let started = client
            .create_command(&args.sandbox, &args.exec.request())
            .await?;
        crate::outln!("{}", started.command.id);
        return Ok(ExitCode::SUCCESS);
    }
    let mut sigint = signal(SignalKind::interrupt()).context("installing the Ctrl-C handler")?;
    let ended = execute(client, &args.sandbox, &args.exec, &mut sigint).await?;
    Ok(ExitCode::from(finish(&args.sandbox, &ended, args.json)))
}

/// Runs a command in `sandbox`, copying its output to this process's stdout and stderr as it
/// arrives; returns how it ended. The first Ctrl-C (`sigint`) sends SIGINT to the command, the
/// second kills it, the third stops waiting.
pub(crate) async fn execute(
    client: &Client,
    sandbox: &str,
    options: &ExecOptions,
    sigint: &mut Signal,
) -> anyhow::Result<Ended> {
    if options.tty {
        return pty::execute(client, sandbox, options).await;
    }
    let started = client.create_command(sandbox, &options.request()).await?;
    stream::follow(
        client,
        sandbox,
        &started.command.id,
        &started.attachment,
        0,
        options.stdin,
        sigint,
    )
    .await
}

/// Says how a followed command ended: the note on stderr when it did not end by itself, the
/// JSON summary on stdout with `json`. Returns the exit code for `cove`.
pub(crate) fn finish(sandbox: &str, ended: &Ended, json: bool) -> u8 {
    if let Some(note) = ended.note(sandbox) {
        eprintln!("{note}");
    }
    if json {
        crate::outln!("{}", ended.json());
    }
    ended.code
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
    fn detach_json_and_wake_parse() {
        let args = parse(&["exec", "-d", "sb-1", "--", "sleep", "9"]).expect("parses");
        assert!(args.detach && !args.json && !args.wake);
        let args = parse(&["exec", "--json", "--wake", "sb-1", "--", "true"]).expect("parses");
        assert!(args.json && args.wake && !args.detach);
        assert!(parse(&["exec", "-d", "-i", "sb-1", "--", "cat"]).is_err());
        assert!(parse(&["exec", "-d", "-t", "sb-1"]).is_err());
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

    #[test]
    fn key_values_parse() {
        assert_eq!(parse_key_value("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert_eq!(parse_key_value("A="), Ok(("A".into(), String::new())));
        assert!(parse_key_value("=x").is_err());
        assert!(parse_key_value("A").is_err());
    }
}
