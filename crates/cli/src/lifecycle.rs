//! What `pause`, `resume`, `suspend` and `wake` share: wait for the operation, print the
//! sandbox's final state.

use std::time::Duration;

use anyhow::bail;
use cove_api_types::{LifecycleRequest, OperationState};
use cove_client::Client;

/// How long a lifecycle verb waits for its operation (which has its own deadline).
const LIFECYCLE_WAIT: Duration = Duration::from_secs(3600);

/// Options every lifecycle verb takes.
#[derive(Debug, Clone, clap::Args)]
pub struct LifecycleArgs {
    /// Sandbox id.
    pub id: String,
    /// Deadline of the operation in seconds (default: the server's, 1800).
    #[arg(long, value_name = "SECONDS")]
    pub deadline: Option<u64>,
    /// Print the operation and return at once instead of waiting.
    #[arg(long)]
    pub no_wait: bool,
}

/// Makes the call `verb` (`pause`, `resume`, `suspend`, `wake`), waits for its operation,
/// and prints `ID STATE` (with `memory_restored` after a wake). A failed operation is an error.
pub(crate) async fn call(client: &Client, verb: &str, args: LifecycleArgs) -> anyhow::Result<()> {
    let request = LifecycleRequest {
        deadline_s: args.deadline,
    };
    let operation = client.lifecycle(&args.id, verb, &request).await?;
    if args.no_wait {
        println!("{} {}", operation.id, operation.state.as_str());
        return Ok(());
    }
    let operation = client.wait_operation(&operation.id, LIFECYCLE_WAIT).await?;
    match (operation.state, &operation.error) {
        (OperationState::Succeeded, _) => {}
        (state, Some(error)) => bail!(
            "{verb} {}: {}: {}",
            state.as_str(),
            error.code,
            error.message
        ),
        (state, None) => bail!("{verb} {}", state.as_str()),
    }
    let sandbox = client.get_sandbox(&args.id).await?;
    match (verb, sandbox.memory_restored) {
        ("wake", Some(false)) => println!(
            "{} {} (memory not restored: processes restarted)",
            sandbox.id,
            sandbox.state.as_str()
        ),
        _ => println!("{} {}", sandbox.id, sandbox.state.as_str()),
    }
    Ok(())
}
