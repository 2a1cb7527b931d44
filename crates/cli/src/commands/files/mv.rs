//! `cove files mv SANDBOX FROM TO`: rename a path.

use std::ffi::OsString;

use clap::Args;
use cove_client::Client;

use super::sandbox_path;

/// Options of `cove files mv`.
#[derive(Debug, Args)]
pub struct MvArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// Path to move.
    pub from: OsString,
    /// New path (an existing file there is replaced).
    pub to: OsString,
}

/// Runs `cove files mv`.
pub async fn run(client: &Client, args: MvArgs) -> anyhow::Result<()> {
    let info = client
        .move_file(
            &args.sandbox,
            sandbox_path(&args.from),
            sandbox_path(&args.to),
        )
        .await?;
    crate::outln!("{}", info.path);
    Ok(())
}
