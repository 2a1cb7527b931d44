//! `cove rollback`: returns a sandbox to one of its checkpoints; waits and prints its state.

use clap::Args;
use cove_client::Client;

/// Options of `cove rollback`.
#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// Checkpoint id (one of this sandbox's, see `cove checkpoint ls SANDBOX`).
    pub checkpoint: String,
}

/// Runs `cove rollback`.
pub async fn run(client: &Client, args: RollbackArgs) -> anyhow::Result<()> {
    let op = client
        .rollback_sandbox(&args.sandbox, &args.checkpoint)
        .await?;
    super::checkpoint::wait(client, &op).await?;
    let s = client.get_sandbox(&args.sandbox).await?;
    match s.memory_restored {
        Some(false) => crate::outln!(
            "{} {} (processes restarted: its commands ended)",
            s.id,
            s.state.as_str()
        ),
        _ => crate::outln!("{} {}", s.id, s.state.as_str()),
    }
    Ok(())
}
