//! `cove mcp`: a Model Context Protocol server on stdin/stdout, for an MCP client (an agent
//! framework, an IDE) to start as a subprocess. Its tools (see [`cove_mcp`]) call the server at
//! `--url` with `--token`, so they can do what that token can. Nothing but MCP messages is
//! written to stdout; logs go to stderr when `RUST_LOG` asks.

use clap::Args;
use cove_client::Client;

/// Options of `cove mcp` (none beyond the global `--url`, `--token`, `--data-dir`).
#[derive(Debug, Args)]
pub struct McpArgs {}

/// Runs `cove mcp` until the MCP client closes stdin.
pub async fn run(client: &Client, _args: McpArgs) -> anyhow::Result<()> {
    cove_mcp::CoveMcp::with_client(client.clone())
        .serve_stdio()
        .await
}
