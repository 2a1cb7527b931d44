//! Template tools: `list_templates`, so an agent can pick what to create a sandbox from.

use cove_api_types::Template;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, RoleServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::success;
use crate::error::{answer, ToolResult};
use crate::CoveMcp;

/// `list_templates` arguments (none yet; an object so the schema can grow).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTemplatesParams {}

/// What a tool tells about a template.
#[derive(Debug, Serialize)]
pub struct TemplateSummary {
    /// Name (what `create_sandbox` takes as `template`).
    pub name: String,
    /// One line about it.
    pub description: String,
    /// Newest ready release, if any (a template without one cannot make sandboxes yet).
    pub latest_release: Option<u32>,
    /// Default working directory of commands.
    pub cwd: String,
    /// Default user of commands.
    pub user: String,
    /// Ports its servers listen on (from `EXPOSE`), for `preview_url`.
    pub ports: Vec<u16>,
}

impl From<&Template> for TemplateSummary {
    fn from(t: &Template) -> Self {
        TemplateSummary {
            name: t.name.clone(),
            description: t.description.clone(),
            latest_release: t.latest_release,
            cwd: t.defaults.workdir.clone(),
            user: t.defaults.user.clone(),
            ports: t.defaults.ports.clone(),
        }
    }
}

#[tool_router(router = template_tools, vis = "pub(crate)")]
impl CoveMcp {
    #[tool(
        description = "List the templates sandboxes can be created from: name, description, newest release and the defaults its sandboxes get."
    )]
    async fn list_templates(
        &self,
        Parameters(_p): Parameters<ListTemplatesParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { list(&self.client(&ctx)?).await }.await)
    }
}

async fn list(client: &cove_client::Client) -> ToolResult {
    let list = client.templates().await?;
    let templates: Vec<TemplateSummary> =
        list.templates.iter().map(TemplateSummary::from).collect();
    let mut text = match templates.len() {
        0 => "no templates".to_owned(),
        n => format!("{n} template(s):"),
    };
    for t in &templates {
        let release = t
            .latest_release
            .map_or_else(|| "no release yet".to_owned(), |r| format!("release {r}"));
        text.push_str(&format!("\n{} ({release}): {}", t.name, t.description));
    }
    Ok(success(
        text,
        &serde_json::json!({ "templates": templates }),
    ))
}
