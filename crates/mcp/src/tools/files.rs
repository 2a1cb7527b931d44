//! File tools: `write_file`, `read_file`, `list_files`. Content travels as UTF-8 text, or as
//! base64 when asked (binary files).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use cove_api_types::FileType;
use cove_client::{Client, DownloadOptions, UploadOptions};
use futures::TryStreamExt;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, RoleServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::success;
use crate::error::{answer, ToolFailure, ToolResult};
use crate::CoveMcp;

/// Default cap of `read_file` (bytes).
const DEFAULT_READ_BYTES: u64 = 256 * 1024;
/// Largest `read_file` cap (bytes).
const MAX_READ_BYTES: u64 = 8 * 1024 * 1024;
/// Most entries `list_files` returns.
const MAX_ENTRIES: usize = 1000;

/// How file content is encoded in a tool's arguments or answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// UTF-8 text (reading: invalid sequences become U+FFFD).
    #[default]
    Utf8,
    /// Base64 (standard alphabet, padded): any bytes.
    Base64,
}

/// `write_file` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileParams {
    /// The sandbox's id.
    pub sandbox_id: String,
    /// Path in the sandbox (absolute, or relative to the user's home); missing parent
    /// directories are created.
    pub path: String,
    /// The file's whole content.
    pub content: String,
    /// How `content` is encoded (default `utf8`).
    #[serde(default)]
    pub encoding: Encoding,
    /// Permission bits as an octal string, e.g. `"755"` (default 644, or the replaced file's).
    #[serde(default)]
    pub mode: Option<String>,
}

/// `read_file` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileParams {
    /// The sandbox's id.
    pub sandbox_id: String,
    /// Path in the sandbox.
    pub path: String,
    /// How to encode the answer (default `utf8`; use `base64` for binary files).
    #[serde(default)]
    pub encoding: Encoding,
    /// First byte to read (default 0).
    #[serde(default)]
    pub offset: Option<u64>,
    /// Most bytes to read (default 262144, at most 8388608).
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

/// `list_files` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesParams {
    /// The sandbox's id.
    pub sandbox_id: String,
    /// Directory to list (default: the user's home).
    #[serde(default)]
    pub path: Option<String>,
    /// Levels to descend (default 1: the directory's own entries; at most 10).
    #[serde(default)]
    pub depth: Option<u32>,
}

/// One entry of `list_files`.
#[derive(Debug, Serialize)]
pub struct Entry {
    /// Absolute path.
    pub path: String,
    /// `file`, `dir`, `symlink` or `other`.
    #[serde(rename = "type")]
    pub file_type: &'static str,
    /// Size in bytes.
    pub size: u64,
}

#[tool_router(router = file_tools, vis = "pub(crate)")]
impl CoveMcp {
    #[tool(
        description = "Write a file in a sandbox (replacing it atomically; parent directories are created). Content is UTF-8 text, or base64 with encoding=base64."
    )]
    async fn write_file(
        &self,
        Parameters(p): Parameters<WriteFileParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { write(&self.client(&ctx)?, p).await }.await)
    }

    #[tool(
        description = "Read a file from a sandbox (at most max_bytes from offset). Answers UTF-8 text, or base64 with encoding=base64, and whether more bytes follow."
    )]
    async fn read_file(
        &self,
        Parameters(p): Parameters<ReadFileParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { read(&self.client(&ctx)?, p).await }.await)
    }

    #[tool(
        description = "List a directory in a sandbox: each entry's path, type and size (depth levels deep, at most 1000 entries)."
    )]
    async fn list_files(
        &self,
        Parameters(p): Parameters<ListFilesParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { list(&self.client(&ctx)?, p).await }.await)
    }
}

async fn write(client: &Client, p: WriteFileParams) -> ToolResult {
    let data = match p.encoding {
        Encoding::Utf8 => p.content.into_bytes(),
        Encoding::Base64 => B64
            .decode(p.content.trim())
            .map_err(|_| ToolFailure::invalid("`content` is not base64"))?,
    };
    let mode = match &p.mode {
        None => None,
        Some(m) => Some(
            u32::from_str_radix(m.trim_start_matches("0o"), 8)
                .map_err(|_| ToolFailure::invalid(format!("`mode` {m:?} is not octal")))?,
        ),
    };
    let options = UploadOptions { mode, user: None };
    let info = client
        .upload(&p.sandbox_id, &p.path, data, &options)
        .await?;
    Ok(success(
        format!("wrote {} bytes to {}", info.size, info.path),
        &serde_json::json!({ "path": info.path, "size": info.size, "mode": format!("{:o}", info.mode) }),
    ))
}

async fn read(client: &Client, p: ReadFileParams) -> ToolResult {
    let max = p
        .max_bytes
        .unwrap_or(DEFAULT_READ_BYTES)
        .clamp(1, MAX_READ_BYTES);
    let offset = p.offset.unwrap_or(0);
    let info = client.stat_file(&p.sandbox_id, &p.path).await?;
    if info.file_type != FileType::File {
        return Err(ToolFailure::invalid(format!(
            "{} is not a regular file",
            info.path
        )));
    }
    let options = DownloadOptions {
        offset: Some(offset),
        length: Some(max),
        user: None,
    };
    let bytes: Vec<u8> = client
        .download(&p.sandbox_id, &p.path, &options)
        .await?
        .try_fold(Vec::new(), |mut acc, b| async move {
            acc.extend_from_slice(&b);
            Ok(acc)
        })
        .await?;
    let end = offset + bytes.len() as u64;
    let more = end < info.size;
    let content = match p.encoding {
        Encoding::Utf8 => String::from_utf8_lossy(&bytes).into_owned(),
        Encoding::Base64 => B64.encode(&bytes),
    };
    let mut text = content.clone();
    if more {
        text.push_str(&format!(
            "\n[file truncated: bytes {offset}..{end} of {}; read more with offset {end}]",
            info.size
        ));
    }
    Ok(success(
        text,
        &serde_json::json!({
            "path": info.path,
            "size": info.size,
            "offset": offset,
            "content": content,
            "encoding": match p.encoding { Encoding::Utf8 => "utf8", Encoding::Base64 => "base64" },
            "truncated": more,
        }),
    ))
}

async fn list(client: &Client, p: ListFilesParams) -> ToolResult {
    let depth = p.depth.unwrap_or(1).clamp(1, 10);
    let path = p
        .path
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| ".".to_owned());
    let listing = client.list_files(&p.sandbox_id, &path, depth).await?;
    let total = listing.entries.len();
    let entries: Vec<Entry> = listing
        .entries
        .iter()
        .take(MAX_ENTRIES)
        .map(|e| Entry {
            path: e.path.clone(),
            file_type: match e.file_type {
                FileType::File => "file",
                FileType::Dir => "dir",
                FileType::Symlink => "symlink",
                FileType::Other => "other",
            },
            size: e.size,
        })
        .collect();
    let mut text = if entries.is_empty() {
        "empty directory".to_owned()
    } else {
        entries
            .iter()
            .map(|e| format!("{} {} {}", e.file_type, e.size, e.path))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if total > MAX_ENTRIES {
        text.push_str(&format!(
            "\n[{} more entries not listed]",
            total - MAX_ENTRIES
        ));
    }
    Ok(success(
        text,
        &serde_json::json!({ "entries": entries, "total": total }),
    ))
}
