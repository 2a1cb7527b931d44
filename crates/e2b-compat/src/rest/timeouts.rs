//! A sandbox's E2B end of life: `POST /sandboxes/{id}/timeout` (`set_timeout`: now + timeout,
//! may shorten) and `POST /sandboxes/{id}/refreshes` (keep-alive: now + duration, never
//! shortens).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cove_api_types::SetExpiryRequest;
use serde::Deserialize;

use super::lifecycle::Lifecycle;
use super::{e2b_sandbox, e2b_state, parse_body};
use crate::error::RestError;
use crate::E2b;

/// A refresh without `duration`, or with a shorter one, keeps the sandbox this long (E2B's).
pub const MIN_REFRESH_S: u64 = 15;

/// Longest refresh (E2B's bound).
pub const MAX_REFRESH_S: u64 = 3600;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TimeoutBody {
    timeout: Option<u64>,
}

/// `POST /sandboxes/{id}/timeout`: the sandbox ends `timeout` seconds from now (may shorten;
/// 0 ends it at the expiry controller's next pass).
pub(super) async fn set_timeout(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, RestError> {
    let req: TimeoutBody = parse_body(&body)?;
    let s = e2b_sandbox(&e2b, &id).await?;
    let t = req.timeout.unwrap_or(0);
    let expiry = SetExpiryRequest {
        in_s: Some(t.min(cove_control_plane::expiry::MAX_IN_S)),
        on_expiry: Some(e2b.on_expiry(&Lifecycle::of(&s))),
        ..Default::default()
    };
    e2b.cp.set_expiry(&s.id, expiry).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RefreshBody {
    duration: Option<u64>,
}

/// `POST /sandboxes/{id}/refreshes`: the sandbox lives at least `duration` more seconds (15
/// to 3600, default 15); an end of life already later stays. `204`; `404` for a sandbox that
/// is gone or paused; `400` above 3600.
pub(super) async fn refresh(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, RestError> {
    let req: RefreshBody = parse_body(&body)?;
    let d = req.duration.unwrap_or(MIN_REFRESH_S);
    if d > MAX_REFRESH_S {
        return Err(RestError::new(
            StatusCode::BAD_REQUEST,
            format!("duration must be at most {MAX_REFRESH_S} seconds"),
        ));
    }
    let s = e2b_sandbox(&e2b, &id).await?;
    if e2b_state(s.state) != Some("running") {
        return Err(RestError::new(
            StatusCode::NOT_FOUND,
            format!("sandbox {id} is not running"),
        ));
    }
    e2b.live_for(&s, d.max(MIN_REFRESH_S)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
