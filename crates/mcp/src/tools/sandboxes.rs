//! Sandbox tools: `create_sandbox`, `list_sandboxes`, `get_sandbox`, the lifecycle moves
//! (`pause_sandbox`, `resume_sandbox`, `suspend_sandbox`, `wake_sandbox`) and `delete_sandbox`.
//! Each waits for its operation, so the answer is the sandbox's state afterwards.

use std::collections::BTreeMap;
use std::time::Duration;

use cove_api_types::{
    CreateSandboxRequest, Operation, OperationState, ResourcesRequest, Sandbox, SandboxState,
};
use cove_client::{Client, ListSandboxes};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, RoleServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::success;
use crate::error::{answer, ToolFailure, ToolResult};
use crate::CoveMcp;

/// Default wait for a lifecycle operation (a create may build nothing but still boot).
const DEFAULT_WAIT_S: u64 = 600;
/// Longest wait a caller may ask for.
const MAX_WAIT_S: u64 = 3600;
/// Most sandboxes `list_sandboxes` returns.
const LIST_LIMIT: u32 = 100;

/// `create_sandbox` arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandboxParams {
    /// Template name (default `base`).
    #[serde(default)]
    pub template: Option<String>,
    /// Virtual CPUs (default: the template's).
    #[serde(default)]
    pub vcpus: Option<u32>,
    /// Memory limit in MiB (default: the template's).
    #[serde(default)]
    pub memory_mib: Option<u64>,
    /// Disk size in MiB (default: the template's).
    #[serde(default)]
    pub disk_mib: Option<u64>,
    /// Environment variables of every command in the sandbox.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Free-form labels.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Seconds to wait until the sandbox runs (default 600, at most 3600).
    #[serde(default)]
    pub wait_s: Option<u64>,
}

/// `list_sandboxes` arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSandboxesParams {
    /// Only sandboxes in this state (`running`, `paused`, `suspended`, ...).
    #[serde(default)]
    pub state: Option<String>,
    /// Only sandboxes of this template.
    #[serde(default)]
    pub template: Option<String>,
}

/// Arguments of the tools that act on one sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxParams {
    /// The sandbox's id (`sb-...`).
    pub sandbox_id: String,
    /// Seconds to wait for the operation to finish (default 600, at most 3600); ignored by
    /// `get_sandbox`.
    #[serde(default)]
    pub wait_s: Option<u64>,
}

/// What a tool tells about a sandbox.
#[derive(Debug, Serialize)]
pub struct SandboxSummary {
    /// Id.
    pub id: String,
    /// State (`running`, `paused`, `suspended`, `deleted`, ...).
    pub state: String,
    /// Why it is in that state, when the server says (e.g. a failure's reason).
    pub state_reason: Option<String>,
    /// Template name.
    pub template: String,
    /// Release number of the template.
    pub release: u32,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Memory limit in MiB.
    pub memory_mib: u64,
    /// Default working directory of commands.
    pub cwd: String,
    /// Default user of commands.
    pub user: String,
    /// Labels.
    pub metadata: BTreeMap<String, String>,
    /// Creation time (RFC 3339).
    pub created_at: String,
}

impl From<&Sandbox> for SandboxSummary {
    fn from(s: &Sandbox) -> Self {
        SandboxSummary {
            id: s.id.clone(),
            state: s.state.as_str().to_owned(),
            state_reason: s.state_reason.clone(),
            template: s.template.clone(),
            release: s.release,
            vcpus: s.resources.vcpus,
            memory_mib: s.resources.memory_mib,
            cwd: s.cwd.clone(),
            user: s.user.clone(),
            metadata: s.metadata.clone(),
            created_at: s.created_at.to_rfc3339(),
        }
    }
}

/// A lifecycle move of [`lifecycle`].
#[derive(Debug, Clone, Copy)]
enum Move {
    Pause,
    Resume,
    Suspend,
    Wake,
}

impl Move {
    fn verb(self) -> &'static str {
        match self {
            Move::Pause => "pause",
            Move::Resume => "resume",
            Move::Suspend => "suspend",
            Move::Wake => "wake",
        }
    }
}

#[tool_router(router = sandbox_tools, vis = "pub(crate)")]
impl CoveMcp {
    #[tool(
        description = "Create a sandbox (an isolated Linux machine) from a template and wait until it runs. Answers its id, state and defaults."
    )]
    async fn create_sandbox(
        &self,
        Parameters(p): Parameters<CreateSandboxParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { create(&self.client(&ctx)?, p).await }.await)
    }

    #[tool(
        description = "List the sandboxes this token can see (newest first, at most 100), optionally only those in one state or of one template."
    )]
    async fn list_sandboxes(
        &self,
        Parameters(p): Parameters<ListSandboxesParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { list(&self.client(&ctx)?, p).await }.await)
    }

    #[tool(description = "Show one sandbox: its state, template, resources and defaults.")]
    async fn get_sandbox(
        &self,
        Parameters(p): Parameters<SandboxParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(
            async {
                let sandbox = self.client(&ctx)?.get_sandbox(&p.sandbox_id).await?;
                Ok(sandbox_answer(&sandbox))
            }
            .await,
        )
    }

    #[tool(
        description = "Pause a running sandbox: freeze its processes (memory stays on the node). Undo with resume_sandbox."
    )]
    async fn pause_sandbox(
        &self,
        Parameters(p): Parameters<SandboxParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { lifecycle(&self.client(&ctx)?, p, Move::Pause).await }.await)
    }

    #[tool(description = "Resume a paused sandbox (thaw its processes).")]
    async fn resume_sandbox(
        &self,
        Parameters(p): Parameters<SandboxParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { lifecycle(&self.client(&ctx)?, p, Move::Resume).await }.await)
    }

    #[tool(
        description = "Suspend a sandbox: save its files to the snapshot store and release its node resources. Running processes may not survive (the runtime decides). Undo with wake_sandbox."
    )]
    async fn suspend_sandbox(
        &self,
        Parameters(p): Parameters<SandboxParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { lifecycle(&self.client(&ctx)?, p, Move::Suspend).await }.await)
    }

    #[tool(
        description = "Wake a suspended sandbox (restore it from its snapshot); a paused one is resumed, a running one left as it is."
    )]
    async fn wake_sandbox(
        &self,
        Parameters(p): Parameters<SandboxParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { lifecycle(&self.client(&ctx)?, p, Move::Wake).await }.await)
    }

    #[tool(description = "Delete a sandbox and everything in it, and wait until it is gone.")]
    async fn delete_sandbox(
        &self,
        Parameters(p): Parameters<SandboxParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { delete(&self.client(&ctx)?, p).await }.await)
    }
}

/// The wait a caller asked for, bounded.
pub(super) fn wait(wait_s: Option<u64>) -> Duration {
    Duration::from_secs(wait_s.unwrap_or(DEFAULT_WAIT_S).min(MAX_WAIT_S))
}

/// Waits for `op`; a failed or cancelled operation is a failure with its error's code.
pub(super) async fn settle(
    client: &Client,
    op: &Operation,
    wait_s: Option<u64>,
) -> Result<(), ToolFailure> {
    let op = client.wait_operation(&op.id, wait(wait_s)).await?;
    match (op.state, op.error) {
        (OperationState::Succeeded, _) => Ok(()),
        (_, Some(error)) => Err(ToolFailure::new(
            error.code,
            format!(
                "{} operation {} failed: {}",
                op.kind.as_str(),
                op.id,
                error.message
            ),
        )),
        (state, None) => Err(ToolFailure::new(
            cove_api_types::ErrorCode::Internal,
            format!("operation {} ended {}", op.id, state.as_str()),
        )),
    }
}

pub(super) fn sandbox_answer(sandbox: &Sandbox) -> CallToolResult {
    let summary = SandboxSummary::from(sandbox);
    let text = format!(
        "sandbox {} is {} (template {}, release {}; {} vCPU, {} MiB; commands run as {} in {})",
        summary.id,
        summary.state,
        summary.template,
        summary.release,
        summary.vcpus,
        summary.memory_mib,
        summary.user,
        summary.cwd
    );
    success(text, &summary)
}

async fn create(client: &Client, p: CreateSandboxParams) -> ToolResult {
    let resources =
        (p.vcpus.is_some() || p.memory_mib.is_some() || p.disk_mib.is_some()).then(|| {
            ResourcesRequest {
                vcpus: p.vcpus,
                memory_mib: p.memory_mib,
                disk_mib: p.disk_mib,
                ..Default::default()
            }
        });
    let request = CreateSandboxRequest {
        template: p.template,
        resources,
        env: p.env,
        metadata: p.metadata,
        ..Default::default()
    };
    let created = client.create_sandbox(&request, None).await?;
    settle(client, &created.operation, p.wait_s).await?;
    let sandbox = client.get_sandbox(&created.sandbox.id).await?;
    Ok(sandbox_answer(&sandbox))
}

async fn list(client: &Client, p: ListSandboxesParams) -> ToolResult {
    let state = match p.state.as_deref() {
        None | Some("") => None,
        Some(s) => Some(
            SandboxState::parse(s)
                .ok_or_else(|| ToolFailure::invalid(format!("unknown sandbox state `{s}`")))?,
        ),
    };
    let filter = ListSandboxes {
        state,
        template: p.template,
        limit: Some(LIST_LIMIT),
        ..Default::default()
    };
    let page = client.list_sandboxes(&filter).await?;
    let sandboxes: Vec<SandboxSummary> = page.sandboxes.iter().map(SandboxSummary::from).collect();
    let mut text = match sandboxes.len() {
        0 => "no sandboxes".to_owned(),
        n => format!("{n} sandbox(es):"),
    };
    for s in &sandboxes {
        text.push_str(&format!("\n{} {} {}", s.id, s.state, s.template));
    }
    if page.next_cursor.is_some() {
        text.push_str(&format!("\n(only the newest {LIST_LIMIT} are listed)"));
    }
    Ok(success(
        text,
        &serde_json::json!({ "sandboxes": sandboxes, "more": page.next_cursor.is_some() }),
    ))
}

async fn lifecycle(client: &Client, p: SandboxParams, what: Move) -> ToolResult {
    let op = match what {
        Move::Pause => client.pause_sandbox(&p.sandbox_id).await?,
        Move::Resume => client.resume_sandbox(&p.sandbox_id).await?,
        Move::Suspend => client.suspend_sandbox(&p.sandbox_id).await?,
        Move::Wake => client.wake_sandbox(&p.sandbox_id).await?,
    };
    settle(client, &op, p.wait_s).await.map_err(|mut f| {
        f.message = format!("{}: {}", what.verb(), f.message);
        f
    })?;
    let sandbox = client.get_sandbox(&p.sandbox_id).await?;
    Ok(sandbox_answer(&sandbox))
}

async fn delete(client: &Client, p: SandboxParams) -> ToolResult {
    let op = client.delete_sandbox(&p.sandbox_id).await?;
    settle(client, &op, p.wait_s).await?;
    Ok(success(
        format!("sandbox {} is deleted", p.sandbox_id),
        &serde_json::json!({ "id": p.sandbox_id, "state": "deleted" }),
    ))
}
