//! E2B volumes on Cove's volumes: `Volume.create(name)` (`POST /volumes`) makes a Cove volume of
//! [`E2B_VOLUME_SIZE_MIB`] in the caller's org, `Volume.connect`/`get_info` (`GET
//! /volumes/{id}`), `Volume.list` (`GET /volumes`) and `Volume.destroy` (`DELETE
//! /volumes/{id}`) act on it; `volume_mounts={path: volume}` on a create mounts it read-write
//! (`volumeMounts: [{name, path}]`). An E2B `volumeID` is the Cove volume's name (names are
//! unique per org), so the SDK's id and name are the same string.
//!
//! The `token` answered is the volume's content token (`ControlPlane::volume_token`), which
//! E2B's volume content API (`/volumecontent/...`, `volume_content.rs`) takes as its bearer
//! credential. Cove's feature gates apply (`volumes` off answers `403`).

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cove_api_types::{CreateVolumeRequest, SandboxState, Volume, VolumeMount, VolumeStorage};
use cove_control_plane::ServiceError;
use serde::Deserialize;

use super::parse_body;
use crate::error::RestError;
use crate::model::volumes::{VolumeAndToken, VolumeInfo};
use crate::E2b;

/// Size of a volume made through E2B, whose API has no size (1 GiB; the image is sparse, so
/// only what is written takes room on the node's disk).
pub const E2B_VOLUME_SIZE_MIB: u64 = 1024;

/// `NewVolume`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NewVolume {
    name: String,
}

/// `SandboxVolumeMount` of a create.
#[derive(Debug, Deserialize)]
pub(super) struct E2bVolumeMount {
    name: String,
    path: String,
}

/// Cove's mounts of an E2B create's `volumeMounts` (read-write, as on E2B).
pub(super) fn mounts(volume_mounts: Option<Vec<E2bVolumeMount>>) -> Vec<VolumeMount> {
    volume_mounts
        .unwrap_or_default()
        .into_iter()
        .map(|m| VolumeMount {
            name: m.name,
            path: m.path,
            read_only: false,
        })
        .collect()
}

/// `VolumeAndToken`: the token reaches this volume's content API only.
async fn with_token(e2b: &E2b, v: &Volume) -> Result<VolumeAndToken, RestError> {
    let token = e2b.cp.volume_token(&v.name).await?;
    Ok(VolumeAndToken {
        volume_id: v.name.clone(),
        name: v.name.clone(),
        token,
    })
}

fn not_found(id: &str) -> RestError {
    RestError::new(StatusCode::NOT_FOUND, format!("volume {id} not found"))
}

/// `POST /volumes`: `201` with the new volume.
pub(super) async fn create(State(e2b): State<E2b>, body: Bytes) -> Result<Response, RestError> {
    let req: NewVolume = parse_body(&body)?;
    let v = e2b
        .cp
        .create_volume(CreateVolumeRequest {
            name: req.name,
            size_mib: E2B_VOLUME_SIZE_MIB,
            storage: VolumeStorage::Local,
        })
        .await?;
    tracing::info!(volume = %v.name, "e2b volume created");
    Ok((StatusCode::CREATED, axum::Json(with_token(&e2b, &v).await?)).into_response())
}

/// `GET /volumes`: the org's volumes, by name.
pub(super) async fn list(State(e2b): State<E2b>) -> Result<Response, RestError> {
    let all = e2b.cp.list_volumes().await?;
    let out: Vec<VolumeInfo> = all
        .volumes
        .iter()
        .map(|v| VolumeInfo {
            volume_id: v.name.clone(),
            name: v.name.clone(),
        })
        .collect();
    Ok(axum::Json(out).into_response())
}

/// `GET /volumes/{id}`.
pub(super) async fn get_one(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
) -> Result<Response, RestError> {
    match e2b.cp.get_volume(&id).await {
        Ok(v) => Ok(axum::Json(with_token(&e2b, &v).await?).into_response()),
        Err(ServiceError::VolumeNotFound(_)) => Err(not_found(&id)),
        Err(e) => Err(e.into()),
    }
}

/// `DELETE /volumes/{id}`: `204`; `404` when there is none (the SDK's `destroy` then answers
/// `False`); `409` while a sandbox mounts it. E2B's `kill` answers before Cove's delete ends,
/// so a volume whose every user is being deleted is deleted once they are gone (waiting at
/// most [`KILLED_USERS_WAIT`]).
pub(super) async fn delete(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
) -> Result<Response, RestError> {
    let start = tokio::time::Instant::now();
    loop {
        match e2b.cp.delete_volume(&id).await {
            Ok(()) => return Ok(StatusCode::NO_CONTENT.into_response()),
            Err(ServiceError::VolumeNotFound(_)) => return Err(not_found(&id)),
            Err(e @ ServiceError::VolumeInUse(_)) => {
                if start.elapsed() >= KILLED_USERS_WAIT || !only_killed_users(&e2b, &id).await {
                    return Err(e.into());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Longest a volume delete waits for the sandboxes being deleted that still mount it.
pub const KILLED_USERS_WAIT: Duration = Duration::from_secs(60);

/// Whether every sandbox that mounts volume `name` is being deleted.
async fn only_killed_users(e2b: &E2b, name: &str) -> bool {
    let Ok(v) = e2b.cp.get_volume(name).await else {
        return false;
    };
    for id in &v.mounted_by {
        match e2b.cp.get_sandbox(id).await {
            Ok(s) if s.state == SandboxState::Deleting => {}
            Err(ServiceError::SandboxNotFound(_)) => {}
            _ => return false,
        }
    }
    true
}
