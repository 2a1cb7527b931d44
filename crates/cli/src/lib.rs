//! The `cove` command line: one module per verb under [`commands`], global options here.
//!
//! Every verb except `server` talks to a Cove server through [`cove_client`]; `server` runs one.

pub mod commands;
pub mod lifecycle;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Args, Parser, Subcommand};
use cove_client::Client;

/// The `cove` command line.
#[derive(Debug, Parser)]
#[command(
    name = "cove",
    version,
    about = "Cove: self-hosted sandboxes for AI agents"
)]
pub struct Cli {
    /// Options of every verb.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub verb: Verb,
}

/// Options of every verb.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// URL of the Cove server.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "COVE_URL",
        default_value = "http://127.0.0.1:7700"
    )]
    pub url: String,
    /// Management token [default: the contents of <DATA_DIR>/admin.token].
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "COVE_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Data directory of the server (and where the default token is read from).
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "COVE_DATA_DIR",
        default_value = "/var/lib/cove"
    )]
    pub data_dir: PathBuf,
}

impl GlobalArgs {
    /// A client of the server, with the token from `--token`, `COVE_TOKEN` or the data dir.
    pub fn client(&self) -> anyhow::Result<Client> {
        let token = match &self.token {
            Some(token) => token.trim().to_owned(),
            None => {
                let path = self.data_dir.join("admin.token");
                std::fs::read_to_string(&path)
                    .with_context(|| {
                        format!(
                            "no token: pass --token, set COVE_TOKEN, or make {} readable",
                            path.display()
                        )
                    })?
                    .trim()
                    .to_owned()
            }
        };
        if token.is_empty() {
            bail!("the management token is empty");
        }
        Ok(Client::new(&self.url, token)?)
    }
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Run the Cove server (control plane, node agent and data plane) in the foreground.
    Server(commands::server::ServerArgs),
    /// Build and list templates.
    #[command(subcommand)]
    Template(commands::template::TemplateVerb),
    /// Create a sandbox, wait until it runs, and print its id.
    Create(commands::create::CreateArgs),
    /// List sandboxes.
    Ls(commands::ls::LsArgs),
    /// Show one sandbox.
    Get(commands::get::GetArgs),
    /// Delete sandboxes and wait until they are gone.
    Rm(commands::rm::RmArgs),
    /// Run a command in a sandbox, streaming its output; exits with its exit code.
    Exec(commands::exec::ExecArgs),
    /// Create a sandbox, run one command in it, delete it; exits with the command's exit code.
    Run(commands::run::RunArgs),
    /// Copy a file into or out of a sandbox (`SANDBOX:/path` on one side).
    Cp(commands::cp::CpArgs),
    /// Files in a sandbox: ls, stat, mkdir, mv, rm, watch.
    #[command(subcommand)]
    Files(commands::files::FilesVerb),
    /// Pause a sandbox: freeze its processes (memory stays on the node); prints the final state.
    Pause(lifecycle::LifecycleArgs),
    /// Resume a paused sandbox; prints the final state.
    Resume(lifecycle::LifecycleArgs),
    /// Suspend a sandbox: save its files to the snapshot store and release its node resources.
    /// On runc, processes do not survive (wake restarts them).
    Suspend(lifecycle::LifecycleArgs),
    /// Wake a suspended sandbox: restore its files and start it; prints the final state.
    Wake(lifecycle::LifecycleArgs),
    /// List recent operations (of one sandbox with a sandbox id), or show one operation.
    Ops(commands::ops::OpsArgs),
    /// Follow the lifecycle event stream.
    Events(commands::events::EventsArgs),
}

/// Runs the verb; the exit code is the command's for `exec` and `run`.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if !matches!(cli.verb, Verb::Server(_)) {
        init_client_logging();
    }
    let global = &cli.global;
    match cli.verb {
        Verb::Server(args) => commands::server::run(global, args).await?,
        Verb::Template(verb) => commands::template::run(&global.client()?, verb).await?,
        Verb::Create(args) => commands::create::run(&global.client()?, args).await?,
        Verb::Ls(args) => commands::ls::run(&global.client()?, args).await?,
        Verb::Get(args) => commands::get::run(&global.client()?, args).await?,
        Verb::Rm(args) => return commands::rm::run(&global.client()?, args).await,
        Verb::Exec(args) => return commands::exec::run(&global.client()?, args).await,
        Verb::Run(args) => return commands::run::run(&global.client()?, args).await,
        Verb::Cp(args) => commands::cp::run(&global.client()?, args).await?,
        Verb::Files(verb) => commands::files::run(&global.client()?, verb).await?,
        Verb::Pause(args) => commands::pause::run(&global.client()?, args).await?,
        Verb::Resume(args) => commands::resume::run(&global.client()?, args).await?,
        Verb::Suspend(args) => commands::suspend::run(&global.client()?, args).await?,
        Verb::Wake(args) => commands::wake::run(&global.client()?, args).await?,
        Verb::Ops(args) => commands::ops::run(&global.client()?, args).await?,
        Verb::Events(args) => commands::events::run(&global.client()?, args).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Logs the client's reconnections and retries to stderr, only when `RUST_LOG` asks. (The
/// server verb installs the server's own subscriber.)
fn init_client_logging() {
    let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() else {
        return;
    };
    // Another subscriber (a test harness) may already be installed; keep it.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("cove").chain(args.iter().copied()))
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn global_options_go_anywhere() {
        let cli = parse(&[
            "ls",
            "--url",
            "http://h:1",
            "--token",
            "t",
            "--data-dir",
            "/d",
        ])
        .expect("parses");
        assert_eq!(cli.global.url, "http://h:1");
        assert_eq!(cli.global.token.as_deref(), Some("t"));
        assert_eq!(cli.global.data_dir, PathBuf::from("/d"));
        let cli = parse(&["--url", "http://h:2", "get", "sb-1"]).expect("parses");
        assert_eq!(cli.global.url, "http://h:2");
    }

    #[test]
    fn token_is_read_from_the_data_dir() {
        let dir = std::env::temp_dir().join(format!("cove-cli-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("admin.token"), "secret\n").expect("write");
        let global = GlobalArgs {
            url: "http://h:1".into(),
            token: None,
            data_dir: dir.clone(),
        };
        assert!(global.client().is_ok());
        let missing = GlobalArgs {
            data_dir: dir.join("nope"),
            ..global
        };
        let err = missing.client().expect_err("no token");
        assert!(format!("{err:#}").contains("no token"), "{err:#}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn unknown_verbs_are_refused() {
        assert!(parse(&["frobnicate"]).is_err());
        assert!(parse(&[]).is_err());
    }
}
