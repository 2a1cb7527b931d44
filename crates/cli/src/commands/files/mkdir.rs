//! `cove files mkdir SANDBOX PATH`: `mkdir -p`.

use std::ffi::OsString;

use clap::Args;
use cove_client::Client;

use super::sandbox_path;

/// Options of `cove files mkdir`.
#[derive(Debug, Args)]
pub struct MkdirArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// Directory to create, with its missing parents.
    pub path: OsString,
    /// Owner of the created directories (default: the sandbox's user).
    #[arg(long)]
    pub user: Option<String>,
}

/// Runs `cove files mkdir`.
pub async fn run(client: &Client, args: MkdirArgs) -> anyhow::Result<()> {
    let info = client
        .make_dir(
            &args.sandbox,
            sandbox_path(&args.path),
            args.user.as_deref(),
        )
        .await?;
    crate::outln!("{}", info.path);
    Ok(())
}
