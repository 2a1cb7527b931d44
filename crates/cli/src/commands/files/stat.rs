//! `cove files stat SANDBOX PATH`: one path's metadata (`lstat`).

use std::ffi::OsString;

use clap::Args;
use cove_client::Client;

use super::{mode_string, sandbox_path, type_char};

/// Options of `cove files stat`.
#[derive(Debug, Args)]
pub struct StatArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// Path.
    pub path: OsString,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cove files stat`.
pub async fn run(client: &Client, args: StatArgs) -> anyhow::Result<()> {
    let info = client
        .stat_file(&args.sandbox, sandbox_path(&args.path))
        .await?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&info)?);
        return Ok(());
    }
    crate::outln!("path:      {}", info.path);
    crate::outln!(
        "type:      {}",
        serde_json::to_value(info.file_type)?
            .as_str()
            .unwrap_or("?")
    );
    crate::outln!("size:      {}", info.size);
    crate::outln!(
        "mode:      {:04o} ({}{})",
        info.mode,
        type_char(info.file_type),
        mode_string(info.mode)
    );
    crate::outln!("owner:     {}:{}", info.owner, info.group);
    crate::outln!(
        "modified:  {}",
        info.mtime
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    if let Some(target) = &info.symlink_target {
        crate::outln!("target:    {target}");
    }
    Ok(())
}
