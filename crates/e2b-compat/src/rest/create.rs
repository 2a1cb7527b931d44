//! `POST /v2/sandboxes` (and v1 `POST /sandboxes`): creates a sandbox and waits until it runs.
//!
//! `templateID` names a template, or a snapshot: a checkpoint id (`ck-…`), or the name of a
//! ready checkpoint when no template has that name (the sandbox then starts from the
//! checkpoint, see [`super::snapshots`]). `network` and `allow_internet_access` become the
//! egress policy ([`super::network`]); `autoPause`, `autoResume` and `timeout` are kept in the
//! sandbox's hidden marker ([`super::lifecycle`]); `volumeMounts` mount Cove volumes
//! read-write ([`super::volumes`]). MCP and IAM tokens answer `400` (not supported here).

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use cove_api_types::CreateSandboxRequest;
use cove_control_plane::ServiceError;
use serde::Deserialize;
use serde_json::Value;

use super::lifecycle::Lifecycle;
use super::network::{egress_policy, public_traffic, NetworkConfig};
use super::snapshots::{checkpoint_named, is_checkpoint_id};
use super::{parse_body, E2B_MARKER_KEY};
use crate::error::RestError;
use crate::{E2b, DEFAULT_TIMEOUT_S};

/// `NewSandbox` / `NewSandboxV2`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: Option<String>,
    timeout: Option<u64>,
    auto_pause: Option<bool>,
    /// `false`: a timeout pause keeps files only.
    auto_pause_memory: Option<bool>,
    auto_resume: Option<Value>,
    /// `false`: the sandbox reaches nothing outside (E2B's `denyOut: ["0.0.0.0/0"]`).
    #[serde(rename = "allow_internet_access", alias = "allowInternetAccess")]
    allow_internet_access: Option<bool>,
    network: Option<NetworkConfig>,
    metadata: Option<BTreeMap<String, String>>,
    env_vars: Option<BTreeMap<String, String>>,
    mcp: Option<Value>,
    iam: Option<Value>,
    volume_mounts: Option<Vec<super::volumes::E2bVolumeMount>>,
}

fn refuse_unsupported(req: &NewSandbox) -> Result<(), RestError> {
    let bad = |what: &str| {
        Err(RestError::new(
            StatusCode::BAD_REQUEST,
            format!("{what} is not supported by Cove's E2B compatibility layer yet"),
        ))
    };
    if req.mcp.as_ref().is_some_and(|n| !n.is_null()) {
        return bad("the MCP gateway");
    }
    if req.iam.as_ref().is_some_and(|n| !n.is_null()) {
        return bad("IAM tokens");
    }
    Ok(())
}

/// The handler.
pub(super) async fn create(
    State(e2b): State<E2b>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, RestError> {
    let req: NewSandbox = parse_body(&body)?;
    refuse_unsupported(&req)?;
    let timeout = req.timeout.unwrap_or(DEFAULT_TIMEOUT_S);
    let auto_resume = req
        .auto_resume
        .as_ref()
        .and_then(|v| v.get("enabled"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let pause_memory = req.auto_pause_memory.unwrap_or(true);
    if !pause_memory && e2b.pause_kind(false).is_none() {
        return Err(RestError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "a filesystem-only auto-pause is not supported on the {} runtime: its pauses \
                 keep memory",
                e2b.cp.capabilities().runtime
            ),
        ));
    }
    let lifecycle = Lifecycle::new(req.auto_pause.unwrap_or(false), auto_resume, timeout)
        .with_pause_memory(pause_memory);
    let mut metadata = req.metadata.unwrap_or_default();
    if metadata.keys().any(|k| k.starts_with(E2B_MARKER_KEY)) {
        return Err(RestError::new(
            StatusCode::BAD_REQUEST,
            format!("metadata keys starting with {E2B_MARKER_KEY} are reserved"),
        ));
    }
    metadata.insert(E2B_MARKER_KEY.to_string(), lifecycle.marker());
    let template = req.template_id.unwrap_or_else(|| "base".to_string());
    let mut create = CreateSandboxRequest {
        env: req.env_vars.unwrap_or_default(),
        metadata,
        // E2B's own timeout governs the sandbox's life; Cove's idle suspend stays off.
        idle_timeout_s: Some(0),
        network: egress_policy(req.allow_internet_access, req.network.as_ref())?,
        // As on E2B: ports are reachable without a token unless the create said otherwise.
        public: public_traffic(req.network.as_ref()),
        volumes: super::volumes::mounts(req.volume_mounts),
        ..Default::default()
    };
    if is_checkpoint_id(&template) {
        create.checkpoint = Some(template.clone());
    } else {
        create.template = Some(template.clone());
    }
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let resp = match e2b.cp.create_sandbox(create.clone(), key.clone()).await {
        // Not a template: perhaps the name of a snapshot.
        Err(ServiceError::TemplateNotFound(t)) => match checkpoint_named(&e2b, &template).await {
            Some(ck) => {
                create.template = None;
                create.checkpoint = Some(ck);
                e2b.cp.create_sandbox(create, key).await?
            }
            None => return Err(ServiceError::TemplateNotFound(t).into()),
        },
        other => other?,
    };
    // The expiry is in the store from the start (a create that never finishes ends too);
    // the timeout counts from when the sandbox runs, as on E2B.
    e2b.live_for(&resp.sandbox, timeout).await?;
    e2b.finish(&resp.operation.id).await?;
    let expiry = cove_api_types::SetExpiryRequest {
        in_s: Some(timeout.min(cove_control_plane::expiry::MAX_IN_S)),
        on_expiry: Some(e2b.on_expiry(&lifecycle)),
        ..Default::default()
    };
    let s = e2b.cp.set_expiry(&resp.sandbox.id, expiry).await?;
    tracing::info!(sandbox_id = %s.id, timeout_s = timeout, "e2b sandbox created");
    Ok((StatusCode::CREATED, axum::Json(e2b.sandbox_json(&s))).into_response())
}
