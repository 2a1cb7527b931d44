//! Network tools: `get_network_policy`, `set_network_policy` (the sandbox's egress policy, live)
//! and `preview_url` (a browser link to a port of the sandbox).

use cove_api_types::{EgressPolicy, SandboxNetwork};
use cove_client::Client;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, RoleServer};
use schemars::JsonSchema;
use serde::Deserialize;

use super::success;
use crate::error::{answer, ToolFailure, ToolResult};
use crate::CoveMcp;

/// `get_network_policy` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetNetworkParams {
    /// The sandbox's id (`sb-...`).
    pub sandbox_id: String,
}

/// `set_network_policy` arguments: the whole policy, replacing the old one.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetNetworkParams {
    /// The sandbox's id (`sb-...`).
    pub sandbox_id: String,
    /// Whether destinations no rule names are reachable (default true).
    #[serde(default = "yes")]
    pub internet: bool,
    /// Rules that allow: domains (`pypi.org`), `*.domain` (`*.github.com`), IPv4 addresses or
    /// CIDRs.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Rules that deny, in the same forms; a deny wins over an allow.
    #[serde(default)]
    pub deny: Vec<String>,
}

fn yes() -> bool {
    true
}

/// `preview_url` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewParams {
    /// The sandbox's id (`sb-...`).
    pub sandbox_id: String,
    /// The port a server in the sandbox listens on (1-65535).
    pub port: u16,
    /// Where the link lands (default `/`).
    #[serde(default)]
    pub path: Option<String>,
}

#[tool_router(router = network_tools, vis = "pub(crate)")]
impl CoveMcp {
    #[tool(
        description = "Show a sandbox's egress policy (internet on/off, allow and deny rules) and its traffic counters (bytes, connections allowed and denied)."
    )]
    async fn get_network_policy(
        &self,
        Parameters(p): Parameters<GetNetworkParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(
            async {
                let network = self.client(&ctx)?.sandbox_network(&p.sandbox_id).await?;
                Ok(network_answer(&network))
            }
            .await,
        )
    }

    #[tool(
        description = "Replace a sandbox's egress policy, live (the next connection follows it): internet true/false plus allow and deny rules (domains like pypi.org, *.github.com, IPv4 addresses or CIDRs)."
    )]
    async fn set_network_policy(
        &self,
        Parameters(p): Parameters<SetNetworkParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { set(&self.client(&ctx)?, p).await }.await)
    }

    #[tool(
        description = "A one-time browser link to a port of the sandbox (a web server, a notebook, a dev server). The link sets a cookie for that port's host and then lands on `path`; it expires if unused."
    )]
    async fn preview_url(
        &self,
        Parameters(p): Parameters<PreviewParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(
            async {
                if p.port == 0 {
                    return Err(ToolFailure::invalid("`port` must be 1-65535"));
                }
                let link = self
                    .client(&ctx)?
                    .port_link(&p.sandbox_id, p.port, p.path.as_deref())
                    .await?;
                Ok(success(
                    format!(
                        "port {} of {}: {} (one use, expires {})",
                        link.port,
                        link.sandbox_id,
                        link.url,
                        link.expires_at.to_rfc3339()
                    ),
                    &link,
                ))
            }
            .await,
        )
    }
}

async fn set(client: &Client, p: SetNetworkParams) -> ToolResult {
    // The rules parse as the API parses them (the policy's own deserializer), so a bad rule is
    // the same `invalid_argument` here as over REST.
    let policy: EgressPolicy = serde_json::from_value(serde_json::json!({
        "internet": p.internet,
        "allow": p.allow,
        "deny": p.deny,
    }))
    .map_err(|e| ToolFailure::invalid(format!("bad egress policy: {e}")))?;
    let network = client.set_sandbox_network(&p.sandbox_id, &policy).await?;
    Ok(network_answer(&network))
}

fn network_answer(n: &SandboxNetwork) -> CallToolResult {
    let rules = |rules: &[cove_api_types::EgressRule]| {
        rules.iter().map(ToString::to_string).collect::<Vec<_>>()
    };
    let allow = rules(&n.network.allow);
    let deny = rules(&n.network.deny);
    let text = format!(
        "sandbox {}: internet {}, allow [{}], deny [{}]{}; {} connection(s) allowed, {} denied, {} bytes out, {} in",
        n.sandbox_id,
        if n.network.internet { "on" } else { "off" },
        allow.join(", "),
        deny.join(", "),
        if n.enforced { "" } else { " (not enforced on this node)" },
        n.counters.connections_allowed,
        n.counters.connections_denied,
        n.counters.bytes_out,
        n.counters.bytes_in,
    );
    success(text, n)
}
