//! E2B's REST control API (`X-API-Key`) over Cove's sandbox services: create (v1 and v2),
//! connect (resumes), get, list (metadata, state and template filters, `X-Next-Token`
//! paging), kill, set_timeout and pause (a Cove suspend); `allow_internet_access: false` is
//! Cove's `network.internet: false`; metrics come from Cove's per-sandbox usage. Features Cove
//! does not have here yet (E2B's network rules, snapshots, fork, templates, secrets, volumes) answer `501` or `400` with a JSON
//! error, which the SDK raises as an exception.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;
use chrono::{DateTime, Utc};
use cove_api_types::{
    CreateSandboxRequest, LifecycleRequest, OperationState, Sandbox, SandboxState,
};
use cove_control_plane::{LifecycleVerb, ServiceError};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::RestError;

pub(crate) mod list;
mod metrics;
use crate::{e2b_id, E2b, SandboxTtl, DEFAULT_TIMEOUT_S, ENVD_VERSION};

/// Metadata key Cove adds to sandboxes created through E2B (hidden from E2B clients); the
/// reaper adopts such sandboxes after a restart.
pub const E2B_MARKER_KEY: &str = "cove.e2b";

/// Longest time a REST call waits for a lifecycle operation (create, suspend, wake).
pub const OPERATION_WAIT: Duration = Duration::from_secs(300);

/// Largest page of `GET /v2/sandboxes`.
pub const MAX_LIST_LIMIT: usize = 100;

/// The REST router.
pub fn router(e2b: E2b) -> Router {
    let unsupported = |what: &'static str| any(move || async move { RestError::unsupported(what) });
    Router::new()
        .route("/v2/sandboxes", post(create).get(list::list_v2))
        .route("/sandboxes", post(create).get(list::list_v1))
        .route("/sandboxes/{id}", get(get_one).delete(kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/v2/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}/resume", post(connect))
        .route("/sandboxes/{id}/metrics", get(metrics::sandbox_metrics))
        .route(
            "/sandboxes/metrics",
            unsupported("metrics of several sandboxes at once"),
        )
        .route(
            "/sandboxes/{id}/network",
            unsupported("updating the network policy"),
        )
        .route("/sandboxes/{id}/fork", unsupported("forking a sandbox"))
        .route("/sandboxes/{id}/snapshots", unsupported("snapshots"))
        .route(
            "/sandboxes/{id}/refreshes",
            unsupported("refreshing a sandbox"),
        )
        .route("/sandboxes/{id}/logs", unsupported("sandbox logs"))
        .route("/v2/sandboxes/{id}/logs", unsupported("sandbox logs"))
        .route("/snapshots", unsupported("snapshots"))
        .route("/templates", unsupported("the template build API"))
        .route("/templates/{*rest}", unsupported("the template build API"))
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
        .route("/volumes", unsupported("volumes"))
        .route("/volumes/{*rest}", unsupported("volumes"))
        .route_layer(middleware::from_fn_with_state(e2b.clone(), require_api_key))
        .route("/health", get(|| async { StatusCode::OK }))
        .fallback(|| async { RestError::new(StatusCode::NOT_FOUND, "no such route") })
        .with_state(e2b)
}

/// `X-API-Key` must be a Cove token (the admin token until orgs exist).
async fn require_api_key(State(e2b): State<E2b>, req: Request, next: Next) -> Response {
    let key = req
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    let Some(key) = key.filter(|k| !k.is_empty()) else {
        return RestError::new(StatusCode::UNAUTHORIZED, "missing X-API-Key header")
            .into_response();
    };
    match e2b.cp.check_token(key).await {
        Ok(()) => next.run(req).await,
        Err(ServiceError::Unauthorized(_)) => {
            RestError::new(StatusCode::UNAUTHORIZED, "invalid API key").into_response()
        }
        Err(e) => RestError::from(e).into_response(),
    }
}

/// A sandbox as E2B sees it: gone states are not found.
async fn e2b_sandbox(e2b: &E2b, id: &str) -> Result<Sandbox, RestError> {
    let not_found = || RestError::new(StatusCode::NOT_FOUND, format!("sandbox {id} not found"));
    let cove_id = crate::cove_id(id).ok_or_else(not_found)?;
    match e2b.cp.get_sandbox(&cove_id).await {
        Ok(s) if e2b_state(s.state).is_some() => Ok(s),
        Ok(_) | Err(ServiceError::SandboxNotFound(_)) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}

/// E2B's state of a Cove state (`None`: gone for E2B).
pub(crate) fn e2b_state(s: SandboxState) -> Option<&'static str> {
    match s {
        SandboxState::Creating | SandboxState::Running => Some("running"),
        SandboxState::Paused
        | SandboxState::Suspending
        | SandboxState::Suspended
        | SandboxState::Waking => Some("paused"),
        SandboxState::Deleting | SandboxState::Deleted | SandboxState::Failed => None,
    }
}

fn user_metadata(s: &Sandbox) -> BTreeMap<String, String> {
    s.metadata
        .iter()
        .filter(|(k, _)| !k.starts_with(E2B_MARKER_KEY))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl E2b {
    /// The sandbox's E2B end of life (tracked, else from Cove's TTL, else far away).
    fn end_at(&self, s: &Sandbox) -> DateTime<Utc> {
        if let Some(t) = self.ttl_of(&s.id) {
            return t.end_at;
        }
        match s.ttl_s {
            Some(ttl) => s.created_at + chrono::Duration::seconds(ttl.min(i64::MAX as u64) as i64),
            None => s.created_at + chrono::Duration::days(3650),
        }
    }

    /// `Sandbox` (create and connect answers).
    fn sandbox_json(&self, s: &Sandbox) -> Value {
        json!({
            "templateID": s.template,
            "sandboxID": e2b_id(&s.id),
            "alias": s.template,
            "clientID": "cove",
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": self.access_token(&s.id),
            "trafficAccessToken": null,
            "domain": self.cfg.domain,
        })
    }

    /// `SandboxDetail` / `ListedSandbox`.
    pub(crate) fn detail_json(&self, s: &Sandbox) -> Value {
        let on_timeout = match self.ttl_of(&s.id) {
            Some(t) if t.auto_pause => "pause",
            _ => "kill",
        };
        json!({
            "templateID": s.template,
            "sandboxID": e2b_id(&s.id),
            "alias": s.template,
            "clientID": "cove",
            "startedAt": rfc3339(s.created_at),
            "endAt": rfc3339(self.end_at(s)),
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": self.access_token(&s.id),
            "cpuCount": s.resources.vcpus,
            "memoryMB": s.resources.memory_mib,
            "diskSizeMB": s.resources.disk_mib.unwrap_or(0),
            "state": e2b_state(s.state).unwrap_or("running"),
            "metadata": user_metadata(s),
            "allowInternetAccess": s.network.internet,
            "domain": self.cfg.domain,
            "lifecycle": { "autoResume": false, "onTimeout": on_timeout },
            "pauseMode": "filesystem",
        })
    }

    /// Waits for an operation to end; its error as a REST error.
    async fn finish(&self, op_id: &str) -> Result<(), RestError> {
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
    async fn settled(&self, id: &str) -> Result<Sandbox, RestError> {
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

/// `NewSandbox` / `NewSandboxV2`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: Option<String>,
    timeout: Option<u64>,
    auto_pause: Option<bool>,
    auto_resume: Option<Value>,
    /// `false`: the sandbox reaches nothing outside (Cove's `network.internet: false`).
    #[serde(rename = "allow_internet_access", alias = "allowInternetAccess")]
    allow_internet_access: Option<bool>,
    network: Option<Value>,
    metadata: Option<BTreeMap<String, String>>,
    env_vars: Option<BTreeMap<String, String>>,
    mcp: Option<Value>,
    iam: Option<Value>,
    volume_mounts: Option<Vec<Value>>,
}

fn parse_body<T: for<'de> Deserialize<'de> + Default>(body: &Bytes) -> Result<T, RestError> {
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

fn refuse_unsupported(req: &NewSandbox) -> Result<(), RestError> {
    let bad = |what: &str| {
        Err(RestError::new(
            StatusCode::BAD_REQUEST,
            format!("{what} is not supported by Cove's E2B compatibility layer yet"),
        ))
    };
    if req.network.as_ref().is_some_and(|n| !n.is_null()) {
        return bad("the network configuration (allowOut/denyOut rules)");
    }
    if req.mcp.as_ref().is_some_and(|n| !n.is_null()) {
        return bad("the MCP gateway");
    }
    if req.iam.as_ref().is_some_and(|n| !n.is_null()) {
        return bad("IAM tokens");
    }
    if req.volume_mounts.as_ref().is_some_and(|v| !v.is_empty()) {
        return bad("volume mounts");
    }
    let auto_resume = req
        .auto_resume
        .as_ref()
        .and_then(|v| v.get("enabled"))
        .and_then(Value::as_bool);
    if auto_resume == Some(true) {
        return bad("auto-resume on traffic");
    }
    Ok(())
}

/// `POST /v2/sandboxes` (and v1 `POST /sandboxes`): creates and waits until it runs.
async fn create(
    State(e2b): State<E2b>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, RestError> {
    let req: NewSandbox = parse_body(&body)?;
    refuse_unsupported(&req)?;
    let timeout = req.timeout.unwrap_or(DEFAULT_TIMEOUT_S);
    let mut metadata = req.metadata.unwrap_or_default();
    if metadata.keys().any(|k| k.starts_with(E2B_MARKER_KEY)) {
        return Err(RestError::new(
            StatusCode::BAD_REQUEST,
            format!("metadata keys starting with {E2B_MARKER_KEY} are reserved"),
        ));
    }
    metadata.insert(E2B_MARKER_KEY.to_string(), "1".to_string());
    let create = CreateSandboxRequest {
        template: Some(req.template_id.unwrap_or_else(|| "base".to_string())),
        env: req.env_vars.unwrap_or_default(),
        metadata,
        // E2B's own timeout governs the sandbox's life; Cove's idle suspend stays off.
        idle_timeout_s: Some(0),
        network: (req.allow_internet_access == Some(false))
            .then(cove_api_types::EgressPolicy::offline),
        ..Default::default()
    };
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let resp = e2b.cp.create_sandbox(create, key).await?;
    e2b.finish(&resp.operation.id).await?;
    let s = e2b.cp.get_sandbox(&resp.sandbox.id).await?;
    if e2b.ttl_of(&s.id).is_none() {
        e2b.set_ttl(
            &s.id,
            SandboxTtl {
                end_at: Utc::now() + chrono::Duration::seconds(timeout as i64),
                auto_pause: req.auto_pause.unwrap_or(false),
            },
        );
    }
    tracing::info!(sandbox_id = %s.id, timeout_s = timeout, "e2b sandbox created");
    Ok((StatusCode::CREATED, axum::Json(e2b.sandbox_json(&s))).into_response())
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

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TimeoutBody {
    timeout: Option<u64>,
}

/// `POST /sandboxes/{id}/timeout`: the sandbox ends `timeout` seconds from now (may shorten).
async fn set_timeout(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, RestError> {
    let req: TimeoutBody = parse_body(&body)?;
    let s = e2b_sandbox(&e2b, &id).await?;
    let t = req.timeout.unwrap_or(0);
    let auto_pause = e2b.ttl_of(&s.id).is_some_and(|t| t.auto_pause);
    e2b.set_ttl(
        &s.id,
        SandboxTtl {
            end_at: Utc::now() + chrono::Duration::seconds(t.min(i64::MAX as u64 / 2) as i64),
            auto_pause,
        },
    );
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /sandboxes/{id}/pause`: a Cove suspend (files kept; memory where the runtime can).
/// `409` when already paused.
async fn pause(State(e2b): State<E2b>, Path(id): Path<String>) -> Result<Response, RestError> {
    let s = e2b.settled(&id).await?;
    if e2b_state(s.state) == Some("paused") {
        return Err(RestError::new(
            StatusCode::CONFLICT,
            format!("sandbox {id} is already paused"),
        ));
    }
    let op = e2b
        .cp
        .lifecycle(
            &s.id,
            LifecycleVerb::Suspend,
            LifecycleRequest::default(),
            None,
        )
        .await?;
    e2b.finish(&op.id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ConnectBody {
    timeout: Option<u64>,
}

/// `POST /v2/sandboxes/{id}/connect`: `200` when running, `201` after resuming a paused one;
/// the timeout is only ever extended.
async fn connect(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, RestError> {
    let req: ConnectBody = parse_body(&body)?;
    let s = e2b.settled(&id).await.map_err(|e| {
        if e.status == StatusCode::NOT_FOUND {
            RestError::new(
                StatusCode::NOT_FOUND,
                format!("paused sandbox {id} not found"),
            )
        } else {
            e
        }
    })?;
    let verb = match s.state {
        SandboxState::Suspended => Some(LifecycleVerb::Wake),
        SandboxState::Paused => Some(LifecycleVerb::Resume),
        _ => None,
    };
    let status = match verb {
        Some(verb) => {
            let op = e2b
                .cp
                .lifecycle(&s.id, verb, LifecycleRequest::default(), None)
                .await?;
            e2b.finish(&op.id).await?;
            StatusCode::CREATED
        }
        None => StatusCode::OK,
    };
    let wanted =
        Utc::now() + chrono::Duration::seconds(req.timeout.unwrap_or(DEFAULT_TIMEOUT_S) as i64);
    let current = e2b.ttl_of(&s.id);
    let end_at = current.as_ref().map_or(wanted, |t| t.end_at.max(wanted));
    e2b.set_ttl(
        &s.id,
        SandboxTtl {
            end_at,
            auto_pause: current.is_some_and(|t| t.auto_pause),
        },
    );
    let s = e2b.cp.get_sandbox(&s.id).await?;
    Ok((status, axum::Json(e2b.sandbox_json(&s))).into_response())
}
