//! `cove files ls SANDBOX [PATH]`: a directory's entries.

use std::ffi::OsString;

use clap::Args;
use cove_client::Client;

use super::{mode_string, sandbox_path, shown_name, type_char};
use crate::table;

/// Options of `cove files ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// Directory (default: the user's home).
    #[arg(default_value = ".")]
    pub path: OsString,
    /// Levels to list (1 = the directory's own entries).
    #[arg(short, long, default_value_t = 1)]
    pub depth: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cove files ls`.
pub async fn run(client: &Client, args: LsArgs) -> anyhow::Result<()> {
    let list = client
        .list_files(&args.sandbox, sandbox_path(&args.path), args.depth)
        .await?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = list
        .entries
        .iter()
        .map(|e| {
            vec![
                format!("{}{}", type_char(e.file_type), mode_string(e.mode)),
                e.owner.clone(),
                e.group.clone(),
                e.size.to_string(),
                e.mtime.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                shown_name(e, args.depth > 1),
            ]
        })
        .collect();
    table::print(
        &["MODE", "OWNER", "GROUP", "SIZE", "MODIFIED", "NAME"],
        &rows,
    );
    Ok(())
}
