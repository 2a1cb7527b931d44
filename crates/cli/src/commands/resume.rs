//! `cove resume`: thaws a paused sandbox; waits and prints the final state.

use cove_client::Client;

use crate::lifecycle::{call, LifecycleArgs};

/// Runs `cove resume`.
pub async fn run(client: &Client, args: LifecycleArgs) -> anyhow::Result<()> {
    call(client, "resume", args).await
}
