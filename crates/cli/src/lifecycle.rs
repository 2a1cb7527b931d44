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
        crate::outln!("{} {}", operation.id, operation.state.as_str());
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
        ("wake", Some(false)) => crate::outln!(
            "{} {} (memory not restored: processes restarted)",
            sandbox.id,
            sandbox.state.as_str()
        ),
        _ => crate::outln!("{} {}", sandbox.id, sandbox.state.as_str()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::{Cli, Verb};

    #[test]
    fn lifecycle_verbs_take_an_id_and_options() {
        let cli =
            Cli::try_parse_from(["cove", "pause", "sb-1", "--deadline", "5"]).expect("parses");
        let Verb::Pause(args) = cli.verb else {
            panic!("expected pause")
        };
        assert_eq!(
            (args.id.as_str(), args.deadline, args.no_wait),
            ("sb-1", Some(5), false)
        );
        for verb in ["resume", "suspend", "wake"] {
            let cli = Cli::try_parse_from(["cove", verb, "sb-2", "--no-wait"]).expect("parses");
            assert!(matches!(
                cli.verb,
                Verb::Resume(_) | Verb::Suspend(_) | Verb::Wake(_)
            ));
            assert!(
                Cli::try_parse_from(["cove", verb]).is_err(),
                "{verb} needs an id"
            );
        }
        let cli = Cli::try_parse_from(["cove", "ops", "sb-1", "--limit", "3"]).expect("parses");
        let Verb::Ops(args) = cli.verb else {
            panic!("expected ops")
        };
        assert_eq!((args.id.as_deref(), args.limit), (Some("sb-1"), Some(3)));
        assert!(Cli::try_parse_from(["cove", "ops"]).is_ok());
        let cli = Cli::try_parse_from(["cove", "events", "--after", "7"]).expect("parses");
        let Verb::Events(args) = cli.verb else {
            panic!("expected events")
        };
        assert_eq!(args.after, Some(7));
    }
}
