//! Checkpoint tools: `create_checkpoint`, `list_checkpoints`, `rollback_sandbox` and
//! `fork_sandbox`. Each waits for its operations, so an answer is the state reached.

use cove_api_types::{Checkpoint, CreateCheckpointRequest, ForkRequest};
use cove_client::Client;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, RoleServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::sandboxes::{sandbox_answer, settle, SandboxSummary};
use super::success;
use crate::error::{answer, ToolFailure, ToolResult};
use crate::CoveMcp;

/// Most sandboxes one `fork_sandbox` call makes (the API's own bound may be lower).
const MAX_FORKS: u32 = 16;

/// `create_checkpoint` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCheckpointParams {
    /// The sandbox's id (`sb-...`); it must be running or paused.
    pub sandbox_id: String,
    /// A name to find the checkpoint by.
    #[serde(default)]
    pub name: Option<String>,
    /// Seconds to wait for the checkpoint (default 600, at most 3600).
    #[serde(default)]
    pub wait_s: Option<u64>,
}

/// `list_checkpoints` arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListCheckpointsParams {
    /// Only this sandbox's checkpoints (default: every checkpoint the token can see).
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

/// `rollback_sandbox` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackParams {
    /// The sandbox's id (`sb-...`).
    pub sandbox_id: String,
    /// The checkpoint to go back to (`ck-...`, one of this sandbox's).
    pub checkpoint_id: String,
    /// Seconds to wait (default 600, at most 3600).
    #[serde(default)]
    pub wait_s: Option<u64>,
}

/// `fork_sandbox` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkParams {
    /// The sandbox to copy (`sb-...`).
    pub sandbox_id: String,
    /// How many copies (default 1, at most 16).
    #[serde(default)]
    pub count: Option<u32>,
    /// Seconds to wait for the copies to run (default 600, at most 3600).
    #[serde(default)]
    pub wait_s: Option<u64>,
}

/// What a tool tells about a checkpoint.
#[derive(Debug, Serialize)]
pub struct CheckpointSummary {
    /// Id (`ck-...`).
    pub id: String,
    /// The sandbox it was taken of.
    pub sandbox_id: String,
    /// Its name, if given.
    pub name: Option<String>,
    /// State (`creating`, `ready`, `failed`, ...).
    pub state: String,
    /// Template name of the sandbox.
    pub template: String,
    /// Creation time (RFC 3339).
    pub created_at: String,
}

impl From<&Checkpoint> for CheckpointSummary {
    fn from(c: &Checkpoint) -> Self {
        CheckpointSummary {
            id: c.id.clone(),
            sandbox_id: c.sandbox_id.clone(),
            name: c.name.clone(),
            state: c.state.as_str().to_owned(),
            template: c.template.clone(),
            created_at: c.created_at.to_rfc3339(),
        }
    }
}

#[tool_router(router = checkpoint_tools, vis = "pub(crate)")]
impl CoveMcp {
    #[tool(
        description = "Save a checkpoint of a running or paused sandbox (its files, and its memory where the runtime keeps it) and wait until it is ready. Go back to it with rollback_sandbox."
    )]
    async fn create_checkpoint(
        &self,
        Parameters(p): Parameters<CreateCheckpointParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { create(&self.client(&ctx)?, p).await }.await)
    }

    #[tool(description = "List checkpoints (newest first), of one sandbox or of every sandbox.")]
    async fn list_checkpoints(
        &self,
        Parameters(p): Parameters<ListCheckpointsParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { list(&self.client(&ctx)?, p).await }.await)
    }

    #[tool(
        description = "Return a sandbox to one of its checkpoints (files and, where kept, processes), and wait until it runs again."
    )]
    async fn rollback_sandbox(
        &self,
        Parameters(p): Parameters<RollbackParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(
            async {
                let client = self.client(&ctx)?;
                let op = client
                    .rollback_sandbox(&p.sandbox_id, &p.checkpoint_id)
                    .await?;
                settle(&client, &op, p.wait_s).await?;
                Ok(sandbox_answer(&client.get_sandbox(&p.sandbox_id).await?))
            }
            .await,
        )
    }

    #[tool(
        description = "Copy a sandbox: checkpoint it and create `count` new sandboxes from that checkpoint, each with the same files; waits until they run and answers their ids."
    )]
    async fn fork_sandbox(
        &self,
        Parameters(p): Parameters<ForkParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { fork(&self.client(&ctx)?, p).await }.await)
    }
}

async fn create(client: &Client, p: CreateCheckpointParams) -> ToolResult {
    let request = CreateCheckpointRequest { name: p.name };
    let created = client
        .create_checkpoint(&p.sandbox_id, &request, None)
        .await?;
    settle(client, &created.operation, p.wait_s).await?;
    let checkpoint = client.get_checkpoint(&created.checkpoint.id).await?;
    let summary = CheckpointSummary::from(&checkpoint);
    Ok(success(
        format!(
            "checkpoint {} of {} is {}",
            summary.id, summary.sandbox_id, summary.state
        ),
        &summary,
    ))
}

async fn list(client: &Client, p: ListCheckpointsParams) -> ToolResult {
    let list = client.list_checkpoints(p.sandbox_id.as_deref()).await?;
    let checkpoints: Vec<CheckpointSummary> = list
        .checkpoints
        .iter()
        .map(CheckpointSummary::from)
        .collect();
    let mut text = match checkpoints.len() {
        0 => "no checkpoints".to_owned(),
        n => format!("{n} checkpoint(s):"),
    };
    for c in &checkpoints {
        let name = c.name.as_deref().unwrap_or("-");
        text.push_str(&format!("\n{} {} {} {}", c.id, c.sandbox_id, c.state, name));
    }
    Ok(success(
        text,
        &serde_json::json!({ "checkpoints": checkpoints }),
    ))
}

async fn fork(client: &Client, p: ForkParams) -> ToolResult {
    let count = p.count.unwrap_or(1);
    if count == 0 || count > MAX_FORKS {
        return Err(ToolFailure::invalid(format!(
            "`count` must be 1-{MAX_FORKS}"
        )));
    }
    let request = ForkRequest {
        count,
        ..Default::default()
    };
    let forked = client.fork_sandbox(&p.sandbox_id, &request).await?;
    settle(client, &forked.operation, p.wait_s).await?;
    let mut sandboxes = Vec::with_capacity(forked.sandboxes.len());
    for created in &forked.sandboxes {
        settle(client, &created.operation, p.wait_s).await?;
        let sandbox = client.get_sandbox(&created.sandbox.id).await?;
        sandboxes.push(SandboxSummary::from(&sandbox));
    }
    let ids: Vec<&str> = sandboxes.iter().map(|s| s.id.as_str()).collect();
    Ok(success(
        format!(
            "{} forked into {} (checkpoint {})",
            p.sandbox_id,
            ids.join(", "),
            forked.checkpoint.id
        ),
        &serde_json::json!({ "checkpoint_id": forked.checkpoint.id, "sandboxes": sandboxes }),
    ))
}
