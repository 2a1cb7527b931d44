//! `cove pause`: freezes every process of a sandbox (memory stays on the node); waits and prints the final state.

use cove_client::Client;

use crate::lifecycle::{call, LifecycleArgs};

/// Runs `cove pause`.
pub async fn run(client: &Client, args: LifecycleArgs) -> anyhow::Result<()> {
    call(client, "pause", args).await
}
