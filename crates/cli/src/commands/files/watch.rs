//! `cove files watch SANDBOX PATH`: print changes below a directory as they happen.

use std::ffi::OsString;

use clap::Args;
use cove_api_types::FileEvent;
use cove_client::Client;
use futures::StreamExt;

use super::sandbox_path;

/// Options of `cove files watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// Directory to watch.
    pub path: OsString,
    /// Watch subdirectories too (new ones included).
    #[arg(short, long)]
    pub recursive: bool,
    /// Print one JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cove files watch` until interrupted or the directory is removed.
pub async fn run(client: &Client, args: WatchArgs) -> anyhow::Result<()> {
    let events = client
        .watch_files(&args.sandbox, sandbox_path(&args.path), args.recursive)
        .await?;
    let mut events = std::pin::pin!(events);
    let mut closed = std::pin::pin!(crate::output::stdout_closed());
    loop {
        let event = tokio::select! {
            e = events.next() => e,
            _ = tokio::signal::ctrl_c() => return Ok(()),
            () = &mut closed => crate::output::exit_stdout_closed(),
        };
        let Some(event) = event else {
            return Ok(());
        };
        let event = event?;
        if args.json {
            crate::outln!("{}", serde_json::to_string(&event)?);
        } else {
            crate::outln!("{}", line(&event));
        }
    }
}

/// `create file /path`, `rename file /old -> /new`.
fn line(e: &FileEvent) -> String {
    let kind = e.event.as_str();
    let ty = serde_json::to_value(e.file_type)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    match &e.from {
        Some(from) => format!("{kind} {ty} {from} -> {}", e.path),
        None => format!("{kind} {ty} {}", e.path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cove_api_types::{FileEventKind, FileType};

    #[test]
    fn lines() {
        let e = FileEvent {
            event: FileEventKind::Rename,
            path: "/b".into(),
            path_b64: None,
            file_type: FileType::File,
            from: Some("/a".into()),
            from_b64: None,
        };
        assert_eq!(line(&e), "rename file /a -> /b");
    }
}
