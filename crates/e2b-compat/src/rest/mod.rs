//! E2B's REST control API (`X-API-Key`) over Cove's sandbox services: create (v1 and v2), connect
//! (resumes), get, list (metadata, state and template filters, `X-Next-Token` paging), kill,
//! `set_timeout` and refreshes, pause (a Cove pause or suspend, see `pause.rs`), metrics of one
//! or several sandboxes, logs, egress rules and their live update, snapshots and fork on Cove's checkpoints, volumes
//! on Cove's volumes and their content API (authorised by the volume's token, not `X-API-Key`),
//! and auto-resume (one file per resource or verb below). What Cove does not offer here (the
//! template build API, secrets) answers `501` with a JSON error, which the SDK raises as an
//! exception.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use axum::Router;
use chrono::{DateTime, Utc};
use cove_api_types::{OperationState, Sandbox, SandboxState};
use cove_control_plane::orgs::{audit, scope};
use cove_control_plane::ServiceError;
use serde::Deserialize;

use self::lifecycle::Lifecycle;
use crate::error::RestError;
use crate::model::sandboxes::{NewSandbox, SandboxDetail, SandboxIds};

mod create;
mod fork;
pub(crate) mod lifecycle;
pub(crate) mod list;
mod logs;
mod metrics;
pub(crate) mod network;
pub(crate) mod pause;
pub(crate) mod snapshots;
mod timeouts;
mod volume_content;
mod volumes;
use crate::{e2b_id, E2b, ENVD_VERSION};

/// Metadata key Cove adds to sandboxes created through E2B (hidden from E2B clients); the
/// store migration gave such sandboxes E2B's default timeout when expiry moved into the store.
pub const E2B_MARKER_KEY: &str = "cove.e2b";

/// Longest time a REST call waits for a lifecycle operation (create, suspend, wake).
pub const OPERATION_WAIT: Duration = Duration::from_secs(300);

/// Largest page of `GET /v2/sandboxes`.
pub const MAX_LIST_LIMIT: usize = 100;

/// The REST router.
pub fn router(e2b: E2b) -> Router {
    let unsupported = |what: &'static str| any(move || async move { RestError::unsupported(what) });
    Router::new()
        .route("/v2/sandboxes", post(create::create).get(list::list_v2))
        .route("/sandboxes", post(create::create).get(list::list_v1))
        .route("/sandboxes/metrics", get(metrics::many))
        .route("/sandboxes/{id}", get(get_one).delete(kill))
        .route("/sandboxes/{id}/timeout", post(timeouts::set_timeout))
        .route("/sandboxes/{id}/refreshes", post(timeouts::refresh))
        .route("/sandboxes/{id}/pause", post(pause::pause))
        .route("/v2/sandboxes/{id}/connect", post(pause::connect))
        .route("/sandboxes/{id}/connect", post(pause::connect))
        .route("/sandboxes/{id}/resume", post(pause::connect))
        .route("/sandboxes/{id}/metrics", get(metrics::sandbox_metrics))
        .route("/sandboxes/{id}/network", put(network::update))
        .route("/sandboxes/{id}/fork", post(fork::fork))
        .route("/sandboxes/{id}/snapshots", post(snapshots::create))
        .route("/sandboxes/{id}/logs", get(logs::logs_v1))
        .route("/v2/sandboxes/{id}/logs", get(logs::logs_v2))
        .route("/snapshots", get(snapshots::list))
        .route("/templates", unsupported("the template build API"))
        .route("/templates/{*rest}", any(snapshots::templates))
        .route("/v2/templates", unsupported("the template build API"))
        .route(
            "/v2/templates/{*rest}",
            unsupported("the template build API"),
        )
        .route("/v3/templates", unsupported("the template build API"))
        .route(
            "/v3/templates/{*rest}",
            unsupported("the template build API"),
        )
        .route("/default-templates", unsupported("the template build API"))
        .route("/secrets", unsupported("the secrets API"))
        .route("/secrets/{*rest}", unsupported("the secrets API"))
        .route("/volumes", post(volumes::create).get(volumes::list))
        .route(
            "/volumes/{id}",
            get(volumes::get_one).delete(volumes::delete),
        )
        .route_layer(middleware::from_fn_with_state(e2b.clone(), require_api_key))
        .merge(volume_content::routes(e2b.clone()))
        .route("/health", get(|| async { StatusCode::OK }))
        .fallback(|| async { RestError::new(StatusCode::NOT_FOUND, "no such route") })
        .with_state(e2b)
}

/// `X-API-Key` must be a Cove token: an org's API key acts in its org (as E2B's team), the
/// admin token in the default org. The request is served as that caller, and one that may
/// change something is recorded in the audit log.
async fn require_api_key(
    State(e2b): State<E2b>,
    matched: Option<axum::extract::MatchedPath>,
    params: Result<axum::extract::RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    req: Request,
    next: Next,
) -> Response {
    let key = req
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    let Some(key) = key.filter(|k| !k.is_empty()) else {
        return RestError::new(StatusCode::UNAUTHORIZED, "missing X-API-Key header")
            .into_response();
    };
    let caller = match e2b.cp.authenticate(key).await {
        Ok(c) => c,
        Err(ServiceError::Unauthorized(_)) => {
            return RestError::new(StatusCode::UNAUTHORIZED, "invalid API key").into_response()
        }
        Err(e) => return RestError::from(e).into_response(),
    };
    if !audit::audited(req.method().as_str()) {
        return scope::scoped(caller, next.run(req)).await;
    }
    let action = format!(
        "{} e2b:{}",
        req.method(),
        matched.as_ref().map_or(req.uri().path(), |m| m.as_str())
    );
    let resp = scope::scoped(caller.clone(), next.run(req)).await;
    let status = resp.status().as_u16();
    e2b.cp
        .record_audit(audit::AuditRecord {
            caller,
            action,
            resource: params.ok().and_then(|p| {
                p.iter()
                    .find(|(k, _)| *k == "id")
                    .map(|(_, v)| v.to_string())
            }),
            status,
            outcome: audit::outcome(status, None),
            request_id: None,
        })
        .await;
    resp
}

/// A sandbox as E2B sees it: gone states are not found.
pub(crate) async fn e2b_sandbox(e2b: &E2b, id: &str) -> Result<Sandbox, RestError> {
    let not_found = || RestError::new(StatusCode::NOT_FOUND, format!("sandbox {id} not found"));
    let cove_id = crate::cove_id(id).ok_or_else(not_found)?;
    match e2b.cp.get_sandbox(&cove_id).await {
        Ok(s) if e2b_state(s.state).is_some() => Ok(s),
        Ok(_) | Err(ServiceError::SandboxNotFound(_)) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}

/// E2B's state of a Cove state (`None`: gone for E2B). E2B has no `degraded`: a sandbox being
/// repaired is `running` (its files are there; calls answer `unavailable` until it is back).
pub(crate) fn e2b_state(s: SandboxState) -> Option<&'static str> {
    match s {
        SandboxState::Creating | SandboxState::Running | SandboxState::Degraded => Some("running"),
        SandboxState::Paused
        | SandboxState::Suspending
        | SandboxState::Suspended
        | SandboxState::Waking => Some("paused"),
        SandboxState::Deleting | SandboxState::Deleted | SandboxState::Failed => None,
    }
}

/// The metadata an E2B client sees (without Cove's hidden marker).
pub(crate) fn user_metadata(s: &Sandbox) -> BTreeMap<String, String> {
    s.metadata
        .iter()
        .filter(|(k, _)| !k.starts_with(E2B_MARKER_KEY))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

pub(crate) fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl E2b {
    /// The sandbox's E2B end of life: its expiry, else far away.
    fn end_at(&self, s: &Sandbox) -> DateTime<Utc> {
        s.expires_at
            .unwrap_or_else(|| s.created_at + chrono::Duration::days(3650))
    }

    /// What `Sandbox` and `SandboxDetail` both say of `s`.
    fn sandbox_ids(&self, s: &Sandbox) -> SandboxIds {
        SandboxIds {
            template_id: s.template.clone(),
            sandbox_id: e2b_id(&s.id).to_string(),
            alias: s.template.clone(),
            client_id: "cove",
            envd_version: ENVD_VERSION,
            envd_access_token: self.access_token(&s.id),
            domain: self.cfg.answered_domain.clone(),
        }
    }

    /// `Sandbox` (create, connect and fork answers).
    pub(crate) fn sandbox_json(&self, s: &Sandbox) -> NewSandbox {
        NewSandbox {
            ids: self.sandbox_ids(s),
            traffic_access_token: (!s.public).then(|| self.cp.port_token_for(&s.id)).flatten(),
        }
    }

    /// `SandboxDetail` / `ListedSandbox`.
    pub(crate) fn detail_json(&self, s: &Sandbox) -> SandboxDetail {
        SandboxDetail {
            ids: self.sandbox_ids(s),
            started_at: rfc3339(s.created_at),
            end_at: rfc3339(self.end_at(s)),
            cpu_count: s.resources.vcpus,
            memory_mb: s.resources.memory_mib,
            disk_size_mb: s.resources.disk_mib.unwrap_or(0),
            state: e2b_state(s.state).unwrap_or("running"),
            metadata: user_metadata(s),
            allow_internet_access: s.network.internet,
            lifecycle: Lifecycle::of(s).wire(),
            // Cove never snapshots a guest that does not answer (see `pause`).
            envd_unresponsive_at_pause: false,
            pause_mode: self.pause_mode(s),
            network: network::network_json(&s.network),
        }
    }

    /// Waits for an operation to end; its error as a REST error.
    pub(crate) async fn finish(&self, op_id: &str) -> Result<(), RestError> {
        let until = tokio::time::Instant::now() + OPERATION_WAIT;
        loop {
            let op = self
                .cp
                .operations()
                .wait(op_id, Duration::from_secs(30))
                .await?;
            match op.state {
                OperationState::Succeeded => return Ok(()),
                OperationState::Failed | OperationState::Cancelled => {
                    let msg = op
                        .error
                        .map(|e| e.message)
                        .unwrap_or_else(|| "the operation failed".into());
                    return Err(RestError::new(StatusCode::INTERNAL_SERVER_ERROR, msg));
                }
                _ if tokio::time::Instant::now() >= until => {
                    return Err(RestError::new(
                        StatusCode::GATEWAY_TIMEOUT,
                        format!("operation {op_id} did not finish in time"),
                    ))
                }
                _ => {}
            }
        }
    }

    /// Waits (bounded) while a sandbox is between states; answers its settled state.
    pub(crate) async fn settled(&self, id: &str) -> Result<Sandbox, RestError> {
        let until = tokio::time::Instant::now() + OPERATION_WAIT;
        loop {
            let s = e2b_sandbox(self, id).await?;
            let moving = matches!(
                s.state,
                SandboxState::Creating | SandboxState::Suspending | SandboxState::Waking
            );
            if !moving || tokio::time::Instant::now() >= until {
                return Ok(s);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Parses a JSON body (empty = the defaults); `400` when it does not parse.
pub(crate) fn parse_body<T: for<'de> Deserialize<'de> + Default>(
    body: &Bytes,
) -> Result<T, RestError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| {
        RestError::new(
            StatusCode::BAD_REQUEST,
            format!("invalid request body: {e}"),
        )
    })
}

/// `GET /sandboxes/{id}`.
async fn get_one(State(e2b): State<E2b>, Path(id): Path<String>) -> Result<Response, RestError> {
    let s = e2b_sandbox(&e2b, &id).await?;
    Ok(axum::Json(e2b.detail_json(&s)).into_response())
}

/// `DELETE /sandboxes/{id}`: `204`, or `404` when already gone.
async fn kill(State(e2b): State<E2b>, Path(id): Path<String>) -> Result<Response, RestError> {
    let s = e2b_sandbox(&e2b, &id).await?;
    match e2b.cp.delete_sandbox(&s.id, None).await {
        Ok(_) | Err(ServiceError::InvalidState { .. }) => {}
        Err(ServiceError::SandboxNotFound(_)) => {
            return Err(RestError::new(
                StatusCode::NOT_FOUND,
                format!("sandbox {id} not found"),
            ))
        }
        Err(e) => return Err(e.into()),
    }
    e2b.forget(&s.id);
    e2b.watchers.forget_sandbox(&s.id);
    Ok(StatusCode::NO_CONTENT.into_response())
}
