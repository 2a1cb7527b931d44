//! `cove checkpoint create|ls|get|rm|export|import`: saved states of running sandboxes, to roll
//! back to (`cove rollback`), fork from (`cove fork`) or create from (`cove create
//! --checkpoint`), and to carry to another server as one archive.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use cove_api_types::{Checkpoint, CreateCheckpointRequest, Operation, OperationState};
use cove_client::Client;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::table;

/// How long `checkpoint create` waits for its operation.
const CHECKPOINT_WAIT: Duration = Duration::from_secs(3600);

/// `cove checkpoint ...`.
#[derive(Debug, Subcommand)]
pub enum CheckpointVerb {
    /// Save a running sandbox's state (it keeps running); waits and prints the checkpoint id
    /// and how long the sandbox was frozen.
    Create(CreateArgs),
    /// List checkpoints (of one sandbox, or all), newest first.
    Ls(LsArgs),
    /// Show one checkpoint as JSON.
    Get(IdArgs),
    /// Delete checkpoints.
    Rm(RmArgs),
    /// Download a checkpoint as one archive (a tar).
    Export(ExportArgs),
    /// Upload a checkpoint archive; prints the new checkpoint's id.
    Import(ImportArgs),
}

/// Options of `cove checkpoint create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// A label for the checkpoint.
    #[arg(long)]
    pub name: Option<String>,
    /// Print the checkpoint and its operation as JSON at once instead of waiting.
    #[arg(long)]
    pub no_wait: bool,
}

/// Options of `cove checkpoint ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only this sandbox's checkpoints.
    pub sandbox: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One checkpoint id.
#[derive(Debug, Args)]
pub struct IdArgs {
    /// Checkpoint id.
    pub checkpoint: String,
}

/// Options of `cove checkpoint rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// Checkpoint ids.
    #[arg(required = true)]
    pub checkpoints: Vec<String>,
}

/// Options of `cove checkpoint export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Checkpoint id.
    pub checkpoint: String,
    /// File to write (default: `<checkpoint>.tar`).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Options of `cove checkpoint import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The archive file.
    pub file: PathBuf,
    /// Name of the new checkpoint (default: the exported one's).
    #[arg(long)]
    pub name: Option<String>,
}

/// Runs a `checkpoint` verb.
pub async fn run(client: &Client, verb: CheckpointVerb) -> anyhow::Result<()> {
    match verb {
        CheckpointVerb::Create(args) => {
            let request = CreateCheckpointRequest { name: args.name };
            let r = client
                .create_checkpoint(&args.sandbox, &request, None)
                .await?;
            if args.no_wait {
                crate::outln!("{}", serde_json::to_string_pretty(&r)?);
                return Ok(());
            }
            wait(client, &r.operation).await?;
            let c = client.get_checkpoint(&r.checkpoint.id).await?;
            crate::outln!(
                "{} (paused {} ms, {} file bytes)",
                c.id,
                c.pause_ms.unwrap_or(0),
                c.file_bytes
            );
        }
        CheckpointVerb::Ls(args) => {
            let list = client.list_checkpoints(args.sandbox.as_deref()).await?;
            if args.json {
                crate::outln!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                print(&list.checkpoints);
            }
        }
        CheckpointVerb::Get(args) => {
            let c = client.get_checkpoint(&args.checkpoint).await?;
            crate::outln!("{}", serde_json::to_string_pretty(&c)?);
        }
        CheckpointVerb::Rm(args) => {
            for id in &args.checkpoints {
                client.delete_checkpoint(id).await?;
                crate::outln!("{id}");
            }
        }
        CheckpointVerb::Export(args) => {
            let path = args
                .output
                .unwrap_or_else(|| PathBuf::from(format!("{}.tar", args.checkpoint)));
            let mut body = Box::pin(client.checkpoint_archive(&args.checkpoint).await?);
            let partial = path.with_extension("tar.partial");
            let mut file = tokio::fs::File::create(&partial)
                .await
                .with_context(|| format!("create {}", partial.display()))?;
            let mut bytes = 0u64;
            while let Some(chunk) = body.next().await {
                let chunk = chunk?;
                bytes += chunk.len() as u64;
                file.write_all(&chunk).await?;
            }
            file.flush().await?;
            tokio::fs::rename(&partial, &path).await?;
            crate::outln!("{} ({bytes} bytes)", path.display());
        }
        CheckpointVerb::Import(args) => {
            let file = tokio::fs::File::open(&args.file)
                .await
                .with_context(|| format!("open {}", args.file.display()))?;
            let c = client.import_checkpoint(file, args.name.as_deref()).await?;
            crate::outln!("{}", c.id);
        }
    }
    Ok(())
}

/// Waits for `op`; a failed operation is an error naming its code.
pub(crate) async fn wait(client: &Client, op: &Operation) -> anyhow::Result<Operation> {
    let op = client.wait_operation(&op.id, CHECKPOINT_WAIT).await?;
    match (op.state, &op.error) {
        (OperationState::Succeeded, _) => Ok(op),
        (state, Some(e)) => bail!("{} {}: {}: {}", op.kind, state.as_str(), e.code, e.message),
        (state, None) => bail!("{} {}", op.kind, state.as_str()),
    }
}

fn print(checkpoints: &[Checkpoint]) {
    let now = chrono::Utc::now();
    let rows: Vec<Vec<String>> = checkpoints
        .iter()
        .map(|c| {
            vec![
                c.id.clone(),
                c.sandbox_id.clone(),
                c.name.clone().unwrap_or_default(),
                c.state.as_str().to_string(),
                c.file_bytes.to_string(),
                c.pause_ms.map(|p| p.to_string()).unwrap_or_default(),
                table::age(c.created_at, now),
            ]
        })
        .collect();
    table::print(
        &[
            "ID",
            "SANDBOX",
            "NAME",
            "STATE",
            "FILE BYTES",
            "PAUSE MS",
            "AGE",
        ],
        &rows,
    );
}
