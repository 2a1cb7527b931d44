//! `cove rm`: deletes sandboxes and waits until they are gone.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use cove_api_types::OperationState;
use cove_client::Client;

/// How long `rm` waits for each delete operation.
pub(crate) const DELETE_WAIT: Duration = Duration::from_secs(600);

/// Options of `cove rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// Sandbox ids.
    #[arg(required = true)]
    pub ids: Vec<String>,
}

/// Runs `cove rm`: starts every delete, then waits for each; prints the ids deleted. Fails
/// (exit 125) if any delete failed, after trying them all.
pub async fn run(client: &Client, args: RmArgs) -> anyhow::Result<ExitCode> {
    let mut started = Vec::new();
    let mut failed = false;
    for id in &args.ids {
        match client.delete_sandbox(id).await {
            Ok(operation) => started.push((id, operation)),
            Err(err) => {
                eprintln!("error: {id}: {err}");
                failed = true;
            }
        }
    }
    for (id, operation) in started {
        match delete_result(client, &operation.id).await {
            Ok(()) => crate::outln!("{id}"),
            Err(err) => {
                eprintln!("error: {id}: {err:#}");
                failed = true;
            }
        }
    }
    Ok(if failed {
        ExitCode::from(crate::exit::EXIT_COVE_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Waits for a delete operation to succeed.
pub(crate) async fn delete_result(client: &Client, operation_id: &str) -> anyhow::Result<()> {
    let operation = client.wait_operation(operation_id, DELETE_WAIT).await?;
    match (operation.state, operation.error) {
        (OperationState::Succeeded, _) => Ok(()),
        (_, Some(error)) => anyhow::bail!("delete failed: {}: {}", error.code, error.message),
        (state, None) => anyhow::bail!("delete {}", state.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::{Cli, Verb};

    #[test]
    fn rm_takes_ids() {
        let cli = Cli::try_parse_from(["cove", "rm", "sb-1", "sb-2"]).expect("parses");
        let Verb::Rm(args) = cli.verb else {
            panic!("expected rm")
        };
        assert_eq!(args.ids, ["sb-1", "sb-2"]);
        assert!(Cli::try_parse_from(["cove", "rm"]).is_err());
    }
}
