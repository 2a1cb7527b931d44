//! `cove run`: creates a sandbox, runs one command in it, deletes it.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use cove_api_types::CreateSandboxRequest;
use cove_client::Client;
use tokio::signal::unix::{signal, SignalKind};

use super::create::{wait_created, NetworkArgs, ResourceArgs};
use super::exec::{execute, finish, Ended, ExecOptions, EXEC_HELP};
use super::rm::delete_result;

use crate::exit::EXIT_INTERRUPTED;

/// Options of `cove run`.
#[derive(Debug, Args)]
#[command(after_help = EXEC_HELP)]
pub struct RunArgs {
    /// Template to start from (default: the server's, `base`). No `-t`: that is `--tty`.
    #[arg(long)]
    pub template: Option<String>,
    /// Resource limits of the sandbox.
    #[command(flatten)]
    pub resources: ResourceArgs,
    /// Egress policy of the sandbox.
    #[command(flatten)]
    pub network: NetworkArgs,
    /// When the command ends, print `{exit_code, signal, oom_killed, timed_out, suspended}` as
    /// one JSON line on stdout (after its output).
    #[arg(long)]
    pub json: bool,
    /// The command.
    #[command(flatten)]
    pub exec: ExecOptions,
}

impl RunArgs {
    /// The create request of the sandbox.
    pub fn sandbox_request(&self) -> CreateSandboxRequest {
        CreateSandboxRequest {
            template: self.template.clone(),
            resources: self.resources.request(),
            network: self.network.policy(),
            ..Default::default()
        }
    }
}

/// Runs `cove run`. The sandbox is deleted however the command ends, also on an error or
/// Ctrl-C; a second Ctrl-C while deleting stops waiting for the deletion.
pub async fn run(client: &Client, args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut sigint = signal(SignalKind::interrupt()).context("installing the Ctrl-C handler")?;
    let created = client.create_sandbox(&args.sandbox_request(), None).await?;
    let id = created.sandbox.id;

    let ready = tokio::select! {
        ready = wait_created(client, &id, &created.operation.id) => Some(ready),
        Some(()) = sigint.recv() => None,
    };
    let outcome = match ready {
        Some(Ok(_)) => execute(client, &id, &args.exec, &mut sigint).await,
        Some(Err(err)) => Err(err),
        None => {
            eprintln!("cove: interrupted; deleting sandbox {id}");
            Ok(Ended::stopped(EXIT_INTERRUPTED))
        }
    };

    let delete = async {
        let operation = client.delete_sandbox(&id).await?;
        delete_result(client, &operation.id).await
    };
    tokio::select! {
        deleted = delete => {
            if let Err(err) = deleted {
                eprintln!("cove: warning: sandbox {id} was not deleted: {err:#}");
            }
        }
        Some(()) = sigint.recv() => {
            eprintln!("cove: not waiting for sandbox {id} to be deleted");
        }
    }
    outcome.map(|ended| ExitCode::from(finish(&id, &ended, args.json)))
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use cove_api_types::ResourcesRequest;

    use crate::{Cli, Verb};

    #[test]
    fn run_takes_sandbox_and_exec_flags() {
        let cli = Cli::try_parse_from([
            "cove",
            "run",
            "--template",
            "tiny",
            "--memory-mib",
            "256",
            "-e",
            "X=1",
            "--cwd",
            "/tmp",
            "--",
            "python3",
            "-c",
            "print(1)",
        ])
        .expect("parses");
        let Verb::Run(args) = cli.verb else {
            panic!("expected run")
        };
        let sandbox = args.sandbox_request();
        assert_eq!(sandbox.template.as_deref(), Some("tiny"));
        assert_eq!(
            sandbox.resources,
            Some(ResourcesRequest {
                vcpus: None,
                memory_mib: Some(256),
                pids_max: None,
                disk_mib: None
            })
        );
        assert!(sandbox.env.is_empty(), "--env is the command's");
        let command = args.exec.request();
        assert_eq!(
            command.argv,
            Some(vec!["python3".into(), "-c".into(), "print(1)".into()])
        );
        assert_eq!(command.env["X"], "1");
        assert_eq!(command.cwd.as_deref(), Some("/tmp"));

        let cli = Cli::try_parse_from(["cove", "run", "--shell", "echo hi"]).expect("parses");
        let Verb::Run(args) = cli.verb else {
            panic!("expected run")
        };
        assert_eq!(args.exec.request().shell.as_deref(), Some("echo hi"));
        assert!(Cli::try_parse_from(["cove", "run"]).is_err());
    }
}
