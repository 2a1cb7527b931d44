//! `/v1/volumes` handlers.
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/volumes` `{name, size_mib}` | `201` `Volume` |
//! | `GET /v1/volumes` | `VolumeList` |
//! | `GET /v1/volumes/{name}` | `Volume` |
//! | `DELETE /v1/volumes/{name}` | `204` (`409 volume_in_use` while mounted) |
//! | `PUT /v1/volumes/{name}/files?path=&uid=&gid=&mode=` | streamed body → the file, atomically; `FileInfo` |
//! | `GET /v1/volumes/{name}/files?path=` | the bytes (streamed) |
//! | `DELETE /v1/volumes/{name}/files?path=` | `204`; a directory with its contents, a symlink the link only |
//! | `PATCH /v1/volumes/{name}/files?path=` `{uid?, gid?, mode?}` | `FileInfo` |
//! | `GET /v1/volumes/{name}/files:list?path=&depth=` | `FileList` |
//! | `GET /v1/volumes/{name}/files:stat?path=` | `FileInfo` (`lstat`) |
//! | `POST /v1/volumes/{name}/files:mkdir` `{path, parents?, uid?, gid?, mode?}` | `201` `FileInfo` |
//!
//! A volume's `FileInfo` carries `uid`, `gid`, `atime` and `ctime` too.

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use cove_api_types::{CreateVolumeRequest, MakeVolumeDirRequest, VolumeFileAttrs};
use cove_control_plane::ControlPlane;
use serde::Deserialize;

use super::extract::{ApiJson, ApiQuery};
use crate::render::ApiError;

/// The volume routes (mounted under the management API's authentication).
pub(super) fn routes() -> Router<ControlPlane> {
    Router::new()
        .route("/v1/volumes", get(list).post(create))
        .route("/v1/volumes/{name}", get(get_one).delete(delete))
        .route(
            "/v1/volumes/{name}/files",
            get(read)
                .put(write)
                .delete(remove)
                .patch(set_attrs)
                .layer(DefaultBodyLimit::disable()),
        )
        .route("/v1/volumes/{name}/files:list", get(list_files))
        .route("/v1/volumes/{name}/files:stat", get(stat))
        .route("/v1/volumes/{name}/files:mkdir", post(mkdir))
}

/// Query of `GET`/`DELETE`/`PATCH /v1/volumes/{name}/files` and `files:stat`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct VolumeFileQuery {
    /// Path in the volume (`/` is its root; relative paths start there too).
    path: String,
}

/// Query of `PUT /v1/volumes/{name}/files`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct VolumeWriteQuery {
    /// Path in the volume (`/` is its root; relative paths start there too). Missing parents
    /// are made (uid and gid 1000, mode 0755); an existing file is replaced.
    path: String,
    /// Owner uid of the file (default 1000, `user` of the built-in templates).
    uid: Option<u32>,
    /// Owner gid of the file (default 1000).
    gid: Option<u32>,
    /// Permission bits of the file (default 0o644 = 420; at most 0o7777).
    mode: Option<u32>,
}

/// Query of `GET /v1/volumes/{name}/files:list`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct VolumeListQuery {
    /// Directory in the volume (default `/`, its root).
    path: Option<String>,
    /// Levels to list: 1 (default) = the directory's own entries, n = n-1 levels below them
    /// too, each directory's entries right after it (1 to [`MAX_LIST_DEPTH`]).
    depth: Option<u32>,
}

#[utoipa::path(
    post,
    path = "/v1/volumes",
    tag = "volumes",
    description = "Create a persistent volume: an empty filesystem of `size_mib` MiB on the node, mounted into sandboxes at create (`volumes` of `POST /v1/sandboxes`). A taken name is `409 volume_exists`. Node-local, on the runc runtime (`400 unsupported` elsewhere): on a cluster it is made on one node (`node`), chosen now, and the sandboxes that mount it run there only; `503 unavailable` when no node that keeps volumes can take it. With `storage: \"object\"` it is kept in the server's snapshot store and attached to one node at a time (the node of the sandboxes that hold it; uploaded and on no node once the last is deleted or suspended; fetched by the next sandbox's node, or by a ready node for a files call), so a suspended sandbox that mounts it can wake on another node.",
    request_body = cove_api_types::CreateVolumeRequest,
    responses((status = 201, body = cove_api_types::Volume, description = "The volume")),
)]
pub(super) async fn create(
    State(cp): State<ControlPlane>,
    ApiJson(req): ApiJson<CreateVolumeRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((StatusCode::CREATED, Json(cp.create_volume(req).await?)))
}

#[utoipa::path(
    get,
    path = "/v1/volumes",
    tag = "volumes",
    description = "List the org's volumes by name, with their use and the sandboxes that mount them.",
    responses((status = 200, body = cove_api_types::VolumeList, description = "The volumes")),
)]
pub(super) async fn list(State(cp): State<ControlPlane>) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.list_volumes().await?))
}

#[utoipa::path(
    get,
    path = "/v1/volumes/{name}",
    tag = "volumes",
    description = "Get a volume: its size, bytes used, and the sandboxes that mount it.",
    params(("name" = String, Path, description = "Volume name")),
    responses((status = 200, body = cove_api_types::Volume, description = "The volume")),
)]
pub(super) async fn get_one(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.get_volume(&name).await?))
}

#[utoipa::path(
    delete,
    path = "/v1/volumes/{name}",
    tag = "volumes",
    description = "Delete a volume and its data; `409 volume_in_use` while a sandbox that is not deleted mounts it.",
    params(("name" = String, Path, description = "Volume name")),
    responses((status = 204, description = "Deleted")),
)]
pub(super) async fn delete(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    cp.delete_volume(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    put,
    path = "/v1/volumes/{name}/files",
    tag = "volumes",
    description = "Write one file of a volume from the request body (streamed), atomically, without a sandbox; owned by `uid`/`gid` (default 1000) with `mode` (default 0o644), missing parents made. `..` and symlinks cannot lead out of the volume. A file that does not fit is `507 insufficient_storage` (nothing is left).",
    params(("name" = String, Path, description = "Volume name"), VolumeWriteQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 200, body = cove_api_types::FileInfo, description = "The written file")),
)]
pub(super) async fn write(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<VolumeWriteQuery>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    super::files::upload(&headers, body, |declared, stream| {
        let attrs = VolumeFileAttrs {
            uid: q.uid,
            gid: q.gid,
            mode: q.mode,
        };
        cp.write_volume_file(&name, q.path, attrs, declared, stream)
    })
    .await
    .map(Json)
    .map_err(ApiError)
}

#[utoipa::path(
    get,
    path = "/v1/volumes/{name}/files",
    tag = "volumes",
    description = "Read one regular file of a volume (streamed), without a sandbox.",
    params(("name" = String, Path, description = "Volume name"), VolumeFileQuery),
    responses((status = 200, body = Vec<u8>, content_type = "application/octet-stream", description = "The bytes")),
)]
pub(super) async fn read(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<VolumeFileQuery>,
) -> Result<Response, ApiError> {
    let (_info, stream) = cp.read_volume_file(&name, q.path).await?;
    let mut resp = Body::from_stream(stream).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(resp)
}

#[utoipa::path(
    get,
    path = "/v1/volumes/{name}/files:list",
    tag = "volumes",
    description = "List a directory of a volume, by name, without a sandbox: `depth` levels (default 1), each directory's entries right after it; symlinks are listed, never descended into.",
    params(("name" = String, Path, description = "Volume name"), VolumeListQuery),
    responses((status = 200, body = cove_api_types::FileList, description = "The entries")),
)]
pub(super) async fn list_files(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<VolumeListQuery>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.list_volume_files(&name, q.path, q.depth).await?))
}

#[utoipa::path(
    get,
    path = "/v1/volumes/{name}/files:stat",
    tag = "volumes",
    description = "Describe a path of a volume (`lstat`: a final symlink itself), without a sandbox.",
    params(("name" = String, Path, description = "Volume name"), VolumeFileQuery),
    responses((status = 200, body = cove_api_types::FileInfo, description = "The path")),
)]
pub(super) async fn stat(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<VolumeFileQuery>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.stat_volume_file(&name, q.path).await?))
}

#[utoipa::path(
    delete,
    path = "/v1/volumes/{name}/files",
    tag = "volumes",
    description = "Remove a path of a volume without a sandbox: a file, a symlink (the link only), or a directory with everything below it. The root is `400 invalid_argument`.",
    params(("name" = String, Path, description = "Volume name"), VolumeFileQuery),
    responses((status = 204, description = "Removed")),
)]
pub(super) async fn remove(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<VolumeFileQuery>,
) -> Result<StatusCode, ApiError> {
    cp.remove_volume_file(&name, q.path).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    post,
    path = "/v1/volumes/{name}/files:mkdir",
    tag = "volumes",
    description = "Make a directory of a volume without a sandbox: with its missing parents and fine when it exists (default), or, with `parents: false`, `404 file_not_found` for a missing parent and `409 already_exists` for an existing path.",
    params(("name" = String, Path, description = "Volume name")),
    request_body = cove_api_types::MakeVolumeDirRequest,
    responses((status = 201, body = cove_api_types::FileInfo, description = "The directory")),
)]
pub(super) async fn mkdir(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<MakeVolumeDirRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(cp.make_volume_dir(&name, req).await?),
    ))
}

#[utoipa::path(
    patch,
    path = "/v1/volumes/{name}/files",
    tag = "volumes",
    description = "Set the owner and permission bits of a path of a volume, without a sandbox; what is absent is kept. A final symlink is changed itself (it has no mode: `400`).",
    params(("name" = String, Path, description = "Volume name"), VolumeFileQuery),
    request_body = cove_api_types::VolumeFileAttrs,
    responses((status = 200, body = cove_api_types::FileInfo, description = "The path")),
)]
pub(super) async fn set_attrs(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<VolumeFileQuery>,
    ApiJson(attrs): ApiJson<VolumeFileAttrs>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.set_volume_file_attrs(&name, q.path, attrs).await?))
}
