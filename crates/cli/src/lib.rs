//! The `cove` command line: one module per verb under [`commands`], global options here.
//!
//! Every verb except `server` talks to a Cove server through [`cove_client`]; `server` runs one.

pub mod commands;
pub mod exit;
pub mod hints;
pub mod lifecycle;
pub mod output;
mod table;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Args, Parser, Subcommand};
use cove_client::Client;

/// The `cove` command line.
#[derive(Debug, Parser)]
#[command(
    name = "cove",
    version,
    about = "Cove: self-hosted sandboxes for AI agents",
    after_help = exit::EXIT_HELP
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

/// The `--url` and `--data-dir` defaults: a token read from that data dir belongs to the server
/// at that URL.
const DEFAULT_URL: &str = "http://127.0.0.1:7700";
const DEFAULT_DATA_DIR: &str = "/var/lib/cove";

impl GlobalArgs {
    /// Where the token comes from, in words: `--token/COVE_TOKEN`, or the token file's path.
    pub fn token_source(&self) -> String {
        match &self.token {
            Some(_) => "--token/COVE_TOKEN".to_string(),
            None => self.data_dir.join("admin.token").display().to_string(),
        }
    }

    /// A one-line notice when the token is the default data dir's (the local server's own) but
    /// the URL names another server: such a token is almost never that server's.
    pub fn token_mismatch(&self) -> Option<String> {
        let default_file = self.token.is_none() && self.data_dir == Path::new(DEFAULT_DATA_DIR);
        (default_file && self.url.trim_end_matches('/') != DEFAULT_URL).then(|| {
            format!(
                "using the token of {} (the local server's) for {}; pass --token or set \
                 COVE_TOKEN for another server",
                self.token_source(),
                self.url
            )
        })
    }

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
    /// (Boxed: its many flags would make every other verb as large.)
    Server(Box<commands::server::ServerArgs>),
    /// Run a node agent that joins a control plane (`--control-plane URL --join-token T`), or
    /// list, drain and ready the nodes of one (`ls`, `drain NAME`, `ready NAME`).
    Node(commands::node::NodeArgs),
    /// Build and list templates.
    #[command(subcommand)]
    Template(commands::template::TemplateVerb),
    /// Orgs and their quotas (the admin token).
    #[command(subcommand)]
    Org(commands::org::OrgVerb),
    /// API keys of an org (the admin token); a key acts as its org.
    #[command(subcommand)]
    Key(commands::key::KeyVerb),
    /// The audit log: who did what, when.
    Audit(commands::audit::AuditArgs),
    /// Warm pools: booted sandboxes kept ready so matching creates skip the boot.
    #[command(subcommand)]
    Pool(commands::pool::PoolVerb),
    /// Persistent volumes: node-local disks sandboxes mount at create (`cove create --volume
    /// NAME:/path[:ro]`); create, ls, rm, and get/put/files without a sandbox.
    #[command(subcommand)]
    Volume(commands::volume::VolumeVerb),
    /// Checkpoints: saved states of running sandboxes (create, ls, get, rm, export, import).
    #[command(subcommand)]
    Checkpoint(commands::checkpoint::CheckpointVerb),
    /// Return a sandbox to one of its checkpoints; prints its final state.
    Rollback(commands::rollback::RollbackArgs),
    /// Create sandboxes from a fresh checkpoint of a running one; prints their ids.
    Fork(commands::fork::ForkArgs),
    /// Create a sandbox, wait until it runs, and print its id.
    Create(commands::create::CreateArgs),
    /// List sandboxes (with their metadata; filter with -m KEY=VALUE).
    Ls(commands::ls::LsArgs),
    /// Show one sandbox.
    Get(commands::get::GetArgs),
    /// Show a sandbox's CPU, memory and disk use (--json: with its last 10 minutes).
    Metrics(commands::metrics::MetricsArgs),
    /// Delete sandboxes and wait until they are gone.
    Rm(commands::rm::RmArgs),
    /// Run a command in a sandbox, streaming its output; exits with its exit code. With -d,
    /// start it in the background and print its id.
    Exec(commands::exec::ExecArgs),
    /// Create a sandbox, run one command in it, delete it; exits with the command's exit code.
    Run(commands::run::RunArgs),
    /// List the commands of a sandbox (running ones; -a also ended ones).
    Ps(commands::ps::PsArgs),
    /// Print a command's output (-f: follow it until it ends; --offset: from that byte).
    Logs(commands::logs::LogsArgs),
    /// Follow a command (output, Ctrl-C, stdin with -i) until it ends; exits with its code.
    Attach(commands::attach::AttachArgs),
    /// Kill a command's whole process tree, or send it one signal (--signal).
    Kill(commands::kill::KillArgs),
    /// Copy a file or, with -r, a directory into or out of a sandbox (`SANDBOX:/path` on one
    /// side).
    Cp(commands::cp::CpArgs),
    /// Files in a sandbox: ls, stat, mkdir, mv, rm, watch.
    Files(commands::files::FilesArgs),
    /// Pause a sandbox: freeze its processes (memory stays on the node); prints the final
    /// state. Undo with `cove resume`.
    Pause(lifecycle::LifecycleArgs),
    /// Resume a paused sandbox (thaw its frozen processes); prints the final state. A
    /// suspended sandbox is woken with `cove wake` instead.
    Resume(lifecycle::LifecycleArgs),
    /// Suspend a sandbox: save its files to the snapshot store and release its node resources.
    /// On runc, processes do not survive (wake restarts them). Undo with `cove wake`.
    Suspend(lifecycle::LifecycleArgs),
    /// Wake a sandbox from whatever rest it is in: a suspended one is restored from its
    /// snapshot, a paused one is thawed (as `cove resume`), a running one is left as it is;
    /// prints the final state.
    Wake(lifecycle::LifecycleArgs),
    /// Set when a sandbox expires (--in SECONDS, --at TIME or --never) and what its expiry
    /// does (--on-expiry delete|suspend|pause).
    Expire(commands::expire::ExpireArgs),
    /// Show a sandbox's egress policy and traffic counters; with --no-internet/--allow/--deny,
    /// replace the policy (live: the next connection follows it).
    Network(commands::network::NetworkVerbArgs),
    /// Show how to reach a sandbox's ports (proxy host, path, token, public or private);
    /// --public/--private change who may reach them, --link PORT prints a one-time browser
    /// link.
    Ports(commands::ports::PortsArgs),
    /// List recent operations (of one sandbox with a sandbox id), or show one operation.
    Ops(commands::ops::OpsArgs),
    /// Follow the lifecycle event stream.
    Events(commands::events::EventsArgs),
    /// Serve the Model Context Protocol on stdin/stdout: sandboxes as tools for an agent
    /// (register `cove mcp` as a stdio server in the MCP client).
    Mcp(commands::mcp::McpArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(commands::completions::CompletionsArgs),
}

impl Verb {
    /// The sandbox a verb works on and, for the lifecycle verbs, the verb's name: where an
    /// error about the sandbox's state gets a hint naming the next step.
    fn hint_target(&self) -> Option<(String, Option<&'static str>)> {
        let id = |s: &String| Some((s.clone(), None));
        match self {
            Verb::Exec(a) => id(&a.sandbox),
            Verb::Run(_) => None,
            Verb::Ps(a) => id(&a.sandbox),
            Verb::Logs(a) => id(&a.sandbox),
            Verb::Attach(a) => id(&a.sandbox),
            Verb::Kill(a) => id(&a.sandbox),
            Verb::Metrics(a) => id(&a.id),
            Verb::Cp(a) => a.sandbox_id().map(|s| (s, None)),
            Verb::Files(a) => Some((a.verb.sandbox().to_owned(), None)),
            Verb::Network(a) => Some((a.id.clone(), None)),
            Verb::Expire(a) => Some((a.id.clone(), None)),
            Verb::Ports(a) => Some((a.id.clone(), None)),
            Verb::Rollback(a) => id(&a.sandbox),
            Verb::Fork(a) => id(&a.sandbox),
            Verb::Pause(a) => Some((a.id.clone(), Some("pause"))),
            Verb::Resume(a) => Some((a.id.clone(), Some("resume"))),
            Verb::Suspend(a) => Some((a.id.clone(), Some("suspend"))),
            Verb::Wake(a) => Some((a.id.clone(), Some("wake"))),
            _ => None,
        }
    }
}

/// Runs the verb; the exit code is the command's for `exec`, `run` and `attach`. An error
/// about a sandbox's state names the next step (see [`hints`]).
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let global = &cli.global;
    match cli.verb {
        Verb::Server(args) => {
            commands::server::run(global, *args).await?;
            return Ok(ExitCode::SUCCESS);
        }
        Verb::Completions(args) => {
            commands::completions::run(args)?;
            return Ok(ExitCode::SUCCESS);
        }
        Verb::Node(commands::node::NodeArgs { verb: None, agent }) => {
            commands::node::run_agent(global, agent).await?;
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    init_client_logging();
    let client = global.client()?;
    if let Some(notice) = global.token_mismatch() {
        eprintln!("cove: {notice}");
    }
    let target = cli.verb.hint_target();
    let result = run_verb(&client, cli.verb).await;
    let result = result.map_err(|err| {
        let refused = err
            .downcast_ref::<cove_client::ClientError>()
            .and_then(|e| e.api_body())
            .is_some_and(|b| b.code == cove_api_types::ErrorCode::Unauthorized);
        if refused {
            err.context(format!(
                "{} refused the token from {}",
                global.url,
                global.token_source()
            ))
        } else {
            err
        }
    });
    match (result, target) {
        (Err(err), Some((id, verb))) => Err(hints::explain(&client, &id, verb, err).await),
        (result, _) => result,
    }
}

/// Runs a verb that talks to the server through `client`.
async fn run_verb(client: &Client, verb: Verb) -> anyhow::Result<ExitCode> {
    match verb {
        Verb::Server(_)
        | Verb::Completions(_)
        | Verb::Node(commands::node::NodeArgs { verb: None, .. }) => bail!("not a client verb"),
        Verb::Node(commands::node::NodeArgs {
            verb: Some(verb), ..
        }) => commands::node::run(client, verb).await?,
        Verb::Template(verb) => commands::template::run(client, verb).await?,
        Verb::Pool(verb) => commands::pool::run(client, verb).await?,
        Verb::Volume(verb) => commands::volume::run(client, verb).await?,
        Verb::Org(verb) => commands::org::run(client, verb).await?,
        Verb::Key(verb) => commands::key::run(client, verb).await?,
        Verb::Audit(args) => commands::audit::run(client, args).await?,
        Verb::Checkpoint(verb) => commands::checkpoint::run(client, verb).await?,
        Verb::Rollback(args) => commands::rollback::run(client, args).await?,
        Verb::Fork(args) => commands::fork::run(client, args).await?,
        Verb::Create(args) => commands::create::run(client, args).await?,
        Verb::Ls(args) => commands::ls::run(client, args).await?,
        Verb::Get(args) => commands::get::run(client, args).await?,
        Verb::Metrics(args) => commands::metrics::run(client, args).await?,
        Verb::Rm(args) => return commands::rm::run(client, args).await,
        Verb::Exec(args) => return commands::exec::run(client, args).await,
        Verb::Run(args) => return commands::run::run(client, args).await,
        Verb::Ps(args) => commands::ps::run(client, args).await?,
        Verb::Logs(args) => commands::logs::run(client, args).await?,
        Verb::Attach(args) => return commands::attach::run(client, args).await,
        Verb::Kill(args) => commands::kill::run(client, args).await?,
        Verb::Cp(args) => commands::cp::run(client, args).await?,
        Verb::Files(args) => commands::files::run(client, args).await?,
        Verb::Pause(args) => commands::pause::run(client, args).await?,
        Verb::Resume(args) => commands::resume::run(client, args).await?,
        Verb::Suspend(args) => commands::suspend::run(client, args).await?,
        Verb::Wake(args) => commands::wake::run(client, args).await?,
        Verb::Ops(args) => commands::ops::run(client, args).await?,
        Verb::Network(args) => commands::network::run(client, args).await?,
        Verb::Expire(args) => commands::expire::run(client, args).await?,
        Verb::Ports(args) => commands::ports::run(client, args).await?,
        Verb::Events(args) => commands::events::run(client, args).await?,
        Verb::Mcp(args) => commands::mcp::run(client, args).await?,
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
    fn the_local_token_for_another_server_is_said() {
        let local = GlobalArgs {
            url: DEFAULT_URL.into(),
            token: None,
            data_dir: DEFAULT_DATA_DIR.into(),
        };
        assert_eq!(local.token_mismatch(), None);
        let other = GlobalArgs {
            url: "https://cove.example.internal:7700".into(),
            ..local.clone()
        };
        let notice = other.token_mismatch().expect("a notice");
        assert!(notice.contains("/var/lib/cove/admin.token"), "{notice}");
        assert!(notice.contains("cove.example.internal"), "{notice}");
        // A token given, or another data dir's token file: that server's, no notice.
        let given = GlobalArgs {
            token: Some("t".into()),
            ..other.clone()
        };
        assert_eq!(given.token_mismatch(), None);
        assert_eq!(given.token_source(), "--token/COVE_TOKEN");
        let own_dir = GlobalArgs {
            data_dir: "/tmp/cove/cp".into(),
            ..other
        };
        assert_eq!(own_dir.token_mismatch(), None);
    }

    #[test]
    fn unknown_verbs_are_refused() {
        assert!(parse(&["frobnicate"]).is_err());
        assert!(parse(&[]).is_err());
    }
}
