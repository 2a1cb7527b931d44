//! The tools, one module per resource. Each tool is a `#[tool]` method of [`crate::CoveMcp`]
//! whose parameters are a `Deserialize + JsonSchema` struct (its field docs are the schema's
//! descriptions) and whose answer carries a short text for the model and the same facts as
//! structured content (JSON).

pub mod checkpoints;
pub mod commands;
pub mod files;
pub mod network;
pub mod sandboxes;
pub mod templates;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;

use crate::error::ToolFailure;

/// A successful answer: `text` for the model, `value` as structured content.
fn success(text: String, value: &impl Serialize) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = serde_json::to_value(value).ok();
    result
}

/// Decodes a base64 field of an API answer (`internal` when the server sent bad base64).
fn decode_b64(field: &str, data: &str) -> Result<Vec<u8>, ToolFailure> {
    B64.decode(data).map_err(|_| {
        ToolFailure::new(
            cove_api_types::ErrorCode::Internal,
            format!("the server's `{field}` is not base64"),
        )
    })
}
