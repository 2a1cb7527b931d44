//! `cove fork`: creates sandboxes from a fresh checkpoint of a running one; waits until they
//! run and prints their ids, one a line.

use clap::Args;
use cove_api_types::ForkRequest;
use cove_client::Client;

use super::exec::parse_key_value;

/// Options of `cove fork`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// How many forks (1 to 16).
    #[arg(short = 'n', long, default_value_t = 1)]
    pub count: u32,
    /// Label of every fork (repeatable).
    #[arg(short, long = "metadata", value_name = "K=V", value_parser = parse_key_value)]
    pub metadata: Vec<(String, String)>,
}

/// Runs `cove fork`.
pub async fn run(client: &Client, args: ForkArgs) -> anyhow::Result<()> {
    let request = ForkRequest {
        count: args.count,
        metadata: args.metadata.into_iter().collect(),
    };
    let r = client.fork_sandbox(&args.sandbox, &request).await?;
    super::checkpoint::wait(client, &r.operation).await?;
    for fork in &r.sandboxes {
        super::checkpoint::wait(client, &fork.operation).await?;
        crate::outln!("{}", fork.sandbox.id);
    }
    Ok(())
}
