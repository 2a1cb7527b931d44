//! `cove files rm SANDBOX PATH...`: remove paths (a symlink loses the link only).

use std::ffi::OsString;

use clap::Args;
use cove_client::Client;

use super::sandbox_path;

/// Options of `cove files rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// Paths to remove; a directory is removed with everything in it.
    #[arg(required = true)]
    pub paths: Vec<OsString>,
    /// A missing path is not an error.
    #[arg(short, long)]
    pub force: bool,
}

/// Runs `cove files rm`.
pub async fn run(client: &Client, args: RmArgs) -> anyhow::Result<()> {
    for path in &args.paths {
        match client.remove_file(&args.sandbox, sandbox_path(path)).await {
            Ok(()) => {}
            Err(e)
                if args.force
                    && e.status() == Some(404)
                    && e.api_body()
                        .is_some_and(|b| b.code == cove_api_types::ErrorCode::FileNotFound) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
