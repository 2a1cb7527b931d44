//! Cove's Model Context Protocol server: sandboxes handed to agents as MCP tools.
//!
//! Every tool is a call of the public REST API through [`cove_client`], with the caller's
//! management token, so a tool can do exactly what that token can:
//! - over stdio (`cove mcp`), the token is the one `cove mcp` was started with;
//! - over streamable HTTP (`/mcp` on `cove server`, see [`http::router`]), each request's own
//!   `Authorization: Bearer` token, so one endpoint serves many callers, each scoped to theirs.
//!
//! Tools, one module per resource:
//! - [`tools::sandboxes`]: `create_sandbox`, `list_sandboxes`, `get_sandbox`, `pause_sandbox`,
//!   `resume_sandbox`, `suspend_sandbox`, `wake_sandbox`, `delete_sandbox`.
//! - [`tools::commands`]: `run_command` (waits, with a timeout; exit code and output, cut with a
//!   note when large), `start_background_command`, `read_output` (from a byte offset),
//!   `kill_command`.
//! - [`tools::files`]: `write_file`, `read_file`, `list_files`.
//! - [`tools::templates`]: the one tool `list_templates`.
//! - [`tools::network`]: `get_network_policy`, `set_network_policy`, `preview_url`.
//! - [`tools::checkpoints`]: `create_checkpoint`, `list_checkpoints`, `rollback_sandbox`,
//!   `fork_sandbox`.
//!
//! A failed call is an MCP tool error (`isError: true`) whose text starts with the API's error
//! code and whose structured content is `{code, message, request_id}` (see [`error`]).

pub mod error;
pub mod http;
pub mod tools;

use cove_client::Client;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{tool_handler, RoleServer, ServerHandler, ServiceExt};

use crate::error::ToolFailure;

/// Instructions given to the MCP client at initialisation.
const INSTRUCTIONS: &str = "Cove sandboxes: isolated Linux machines to run code in. \
Create one with create_sandbox (it answers once the sandbox runs), run commands with \
run_command, move files with write_file/read_file/list_files, and delete the sandbox with \
delete_sandbox when done. Long-running programs: start_background_command, then read_output \
from the returned offset, kill_command to stop.";

/// Where a tool call gets its API client from.
#[derive(Debug, Clone)]
enum Access {
    /// One client for every call (stdio: the token `cove mcp` was given).
    Fixed(Client),
    /// A client per call, with the bearer token of the HTTP request that carried it.
    PerRequest {
        /// Shared connection pool.
        http: reqwest::Client,
        /// Base URL of the REST API (the server's own listener).
        base_url: String,
    },
}

/// The MCP server: the tools of [`tools`] over an API client.
#[derive(Debug, Clone)]
pub struct CoveMcp {
    access: Access,
    tool_router: rmcp::handler::server::router::tool::ToolRouter<CoveMcp>,
}

impl CoveMcp {
    /// A server whose every tool call uses `client` (and so its token).
    pub fn with_client(client: Client) -> Self {
        Self::new(Access::Fixed(client))
    }

    /// A server whose tool calls use the bearer token of the HTTP request carrying each call,
    /// against the REST API at `base_url` (e.g. `http://127.0.0.1:7700`).
    pub fn per_request(http: reqwest::Client, base_url: String) -> Self {
        Self::new(Access::PerRequest { http, base_url })
    }

    fn new(access: Access) -> Self {
        CoveMcp {
            access,
            tool_router: Self::sandbox_tools()
                + Self::command_tools()
                + Self::file_tools()
                + Self::template_tools()
                + Self::network_tools()
                + Self::checkpoint_tools(),
        }
    }

    /// The API client of one tool call: the fixed one, or one with the calling HTTP request's
    /// bearer token (`unauthorized` when it has none).
    fn client(&self, ctx: &RequestContext<RoleServer>) -> Result<Client, ToolFailure> {
        match &self.access {
            Access::Fixed(client) => Ok(client.clone()),
            Access::PerRequest { http, base_url } => {
                let parts = ctx
                    .extensions
                    .get::<axum::http::request::Parts>()
                    .ok_or_else(|| ToolFailure::unauthorized("the call carried no HTTP request"))?;
                let token = http::bearer(&parts.headers)
                    .ok_or_else(|| ToolFailure::unauthorized("missing bearer token"))?;
                Client::with_http_client(http.clone(), base_url, token).map_err(ToolFailure::from)
            }
        }
    }

    /// Serves MCP over this process's stdin and stdout until the client closes stdin.
    ///
    /// Errors: the transport failed to start (`rmcp::service::ServerInitializeError`) or broke.
    pub async fn serve_stdio(self) -> anyhow::Result<()> {
        let running = self.serve(rmcp::transport::stdio()).await?;
        running.waiting().await?;
        Ok(())
    }
}

#[tool_handler(router = self.tool_router.clone())]
impl ServerHandler for CoveMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("cove", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}
