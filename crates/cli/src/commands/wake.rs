//! `cove wake`: restores a suspended sandbox and starts it again; waits and prints the final state.

use cove_client::Client;

use crate::lifecycle::{call, LifecycleArgs};

/// Runs `cove wake`.
pub async fn run(client: &Client, args: LifecycleArgs) -> anyhow::Result<()> {
    call(client, "wake", args).await
}
