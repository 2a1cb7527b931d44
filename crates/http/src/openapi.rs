//! The OpenAPI 3.1 document of the management API (`GET /v1/openapi.json`), generated from the
//! handlers' `#[utoipa::path]` attributes and the `cove-api-types` schemas. It is checked in as
//! `docs/openapi.json`; a test fails when the two drift.

use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use super::{
    checkpoints, commands, events, expiry, files, files_upload, lifecycle, nodes, operations, orgs,
    pools, ports, sandboxes, templates, volumes,
};

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Cove management API",
        description = "Sandboxes for AI agents. Every call but `/healthz`, `/metrics` and \
            `/v1/openapi.json` needs `Authorization: Bearer <token>`. Every error answers an \
            `ErrorBody` `{code, message, request_id}` whose `code` (`ErrorCode`) has one HTTP \
            status. Lifecycle calls answer `202` with an `Operation` to poll. Command output and \
            stdin are on the data plane (its own listener, authorised by the command's \
            attachment token): `GET /v1/attach/{cid}?offset=N` is server-sent events `stdout` / \
            `stderr` (`OutputEvent`), `gap` (`GapEvent`) and `exit` (`Command`); with \
            `Accept: application/octet-stream` it is the command's raw stdout from stdout byte \
            `offset` instead (one such stream per command at a time, else `409 \
            failed_precondition`; a clean end means the command exited, whose status is then \
            read from `GET /v1/sandboxes/{id}/commands/{cid}`); \
            `POST /v1/attach/{cid}/stdin`, `POST /v1/attach/{cid}/stdin:close`; \
            `GET /v1/attach/{cid}/pty` a WebSocket of `PtyMessage`.",
        license(name = "Apache-2.0"),
    ),
    paths(
        sandboxes::create, sandboxes::list, sandboxes::get_one, sandboxes::delete,
        sandboxes::metrics, sandboxes::network, sandboxes::set_network, expiry::set, expiry::clear,
        ports::access,
        ports::set_access, ports::create_link,
        lifecycle::pause, lifecycle::resume, lifecycle::suspend, lifecycle::wake,
        lifecycle::capabilities,
        checkpoints::create, checkpoints::list_of_sandbox, checkpoints::list,
        checkpoints::get_one, checkpoints::delete, checkpoints::rollback, checkpoints::fork,
        checkpoints::archive, checkpoints::import,
        templates::list, templates::get_one, templates::build, templates::create,
        templates::delete, templates::delete_release,
        pools::list, pools::get_one, pools::put, pools::delete,
        volumes::create, volumes::list, volumes::get_one, volumes::delete, volumes::write,
        volumes::read, volumes::list_files, volumes::stat, volumes::remove, volumes::mkdir,
        volumes::set_attrs,
        nodes::list, nodes::drain, nodes::ready,
        orgs::create, orgs::list, orgs::get_one, orgs::update, orgs::set_quotas, orgs::create_key,
        orgs::list_keys, orgs::revoke_key, orgs::audit,
        commands::create, commands::list, commands::get_one, commands::forget, commands::output,
        commands::signal, commands::kill, commands::attachment,
        operations::get_one, operations::list, operations::cancel, operations::logs,
        events::stream,
        files::write, files::read, files::remove, files::list, files::stat, files::exists,
        files::mkdir, files::mv, files::watch, files_upload::upload,
        healthz, metrics, openapi_json,
    ),
    components(schemas(
        cove_api_types::ErrorBody, cove_api_types::ErrorCode, cove_api_types::OutputEvent,
        cove_api_types::GapEvent, cove_api_types::PtyMessage, cove_api_types::TerminalSize,
        cove_api_types::CheckpointArchiveHeader,
    )),
    modifiers(&Common),
)]
pub struct ApiDoc;

/// Adds the bearer scheme (required by every operation but the open ones) and the error
/// answer every operation can give.
struct Common;

/// Operations that need no token.
const OPEN: [&str; 3] = ["/healthz", "/metrics", "/v1/openapi.json"];

impl Modify for Common {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("A management token"))
                    .build(),
            ),
        );
        let error = ResponseBuilder::new()
            .description(
                "An error: `ErrorBody`; its `code` is stable and decides the status (`ErrorCode`)",
            )
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                        "ErrorBody",
                    ))))
                    .build(),
            )
            .build();
        let bearer =
            utoipa::openapi::security::SecurityRequirement::new::<_, _, &str>("bearer", []);
        for (path, item) in api.paths.paths.iter_mut() {
            let ops = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in ops.into_iter().flatten() {
                // Handler names repeat across resources (`list`, `get_one`): prefix the tag.
                if let (Some(tag), Some(id)) =
                    (op.tags.as_ref().and_then(|t| t.first()), &op.operation_id)
                {
                    op.operation_id = Some(format!("{tag}_{id}"));
                }
                op.responses
                    .responses
                    .insert("default".to_string(), RefOr::T(error.clone()));
                if !OPEN.contains(&path.as_str()) {
                    op.security = Some(vec![bearer.clone()]);
                }
            }
        }
    }
}

/// SSE routes and their event names. Their `text/event-stream` schema describes one event as
/// server-sent events carry it: `event`, `id`, and `data`, a JSON text of the route's payload
/// schema (`contentMediaType` + `contentSchema`); routes marked `true` may end with an `error`
/// event whose data is an `ErrorBody`.
const SSE_EVENTS: [(&str, &[&str], bool); 3] = [
    (
        "/v1/operations/{id}/logs",
        &["log", "progress", "done"],
        false,
    ),
    ("/v1/events", &["lifecycle"], false),
    (
        "/v1/sandboxes/{id}/files:watch",
        &[
            "create", "write", "remove", "rename", "chmod", "overflow", "error",
        ],
        true,
    ),
];

/// The document as JSON.
pub fn openapi_value() -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or(serde_json::Value::Null);
    for (path, events, errors) in SSE_EVENTS {
        let Some(item) = doc
            .pointer_mut(&format!(
                "/paths/{}",
                path.replace('~', "~0").replace('/', "~1")
            ))
            .and_then(|v| v.as_object_mut())
        else {
            continue;
        };
        for op in item.values_mut() {
            let Some(content) = op
                .pointer_mut("/responses/200/content/text~1event-stream")
                .and_then(|c| c.as_object_mut())
            else {
                continue;
            };
            let mut payload = content.remove("schema").unwrap_or(serde_json::Value::Null);
            if errors {
                payload = serde_json::json!({"oneOf": [
                    payload,
                    {"$ref": "#/components/schemas/ErrorBody"},
                ]});
            }
            content.insert(
                "schema".to_string(),
                serde_json::json!({
                    "type": "object",
                    "description": "One server-sent event; `data` is a JSON text.",
                    "required": ["data"],
                    "properties": {
                        "event": {"type": "string", "enum": events},
                        "id": {"type": "string"},
                        "retry": {"type": "integer"},
                        "data": {
                            "type": "string",
                            "contentMediaType": "application/json",
                            "contentSchema": payload,
                        },
                    },
                }),
            );
        }
    }
    doc
}

/// The document as pretty JSON, as checked in at `docs/openapi.json` (with a final newline).
pub fn openapi_pretty_json() -> String {
    let mut text = serde_json::to_string_pretty(&openapi_value())
        .unwrap_or_else(|e| format!("{{\"error\": \"cannot render the document: {e}\"}}"));
    text.push('\n');
    text
}

#[utoipa::path(
    get,
    path = "/healthz",
    tag = "server",
    description = "Liveness: `ok` while the server answers.",
    responses((status = 200, body = String, content_type = "text/plain", description = "`ok`")),
)]
#[allow(dead_code)]
fn healthz() {}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "server",
    description = "Prometheus text format: `cove_sandboxes{state}`, \
        `cove_operations_total{kind,result}`, `cove_operation_duration_seconds{kind}`, \
        `cove_sandbox_create_to_running_seconds`, `cove_commands_total`, \
        `cove_data_plane_bytes_total{stream}`, `cove_node_cpus`, `cove_node_memory_bytes`, \
        `cove_node_memory_available_bytes`, `cove_node_sandboxes`, \
        `cove_sandboxes_allotted_vcpus`, `cove_sandboxes_allotted_memory_bytes`.",
    responses((status = 200, body = String, content_type = "text/plain", description = "The series")),
)]
#[allow(dead_code)]
fn metrics() {}

#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "server",
    description = "This document.",
    responses((status = 200, body = Object, description = "OpenAPI 3.1")),
)]
pub(super) async fn openapi_json() -> Response {
    Json(openapi_value()).into_response()
}
