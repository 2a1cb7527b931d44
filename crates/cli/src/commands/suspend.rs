//! `cove suspend`: saves a sandbox's files to the snapshot store and releases its node resources (processes do not survive on runc); waits and prints the final state.

use cove_client::Client;

use crate::lifecycle::{call, LifecycleArgs};

/// Runs `cove suspend`.
pub async fn run(client: &Client, args: LifecycleArgs) -> anyhow::Result<()> {
    call(client, "suspend", args).await
}
