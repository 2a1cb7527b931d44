//! `POST /sandboxes/{id}/fork` (the SDK's `fork`) on Cove's fork: one fresh checkpoint of the
//! sandbox, `count` new sandboxes created from it. The answer (`201`) lists one item per fork,
//! its `sandbox` or its `error`, after each fork's create has ended. A fork has the parent's
//! template, environment, egress policy, metadata and E2B lifecycle settings, and its own
//! timeout (`timeout`, default 300 s).
//!
//! E2B takes 1 to 20 forks per call, Cove 1 to 16: a `count` above 16 is `400`. Cove's feature
//! gates apply (`fork` or `checkpoints` disabled: `403`).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cove_api_types::ForkRequest;
use serde::Deserialize;

use super::lifecycle::Lifecycle;
use super::{e2b_sandbox, parse_body, user_metadata, E2B_MARKER_KEY};
use crate::error::RestError;
use crate::model::sandboxes::ForkResult;
use crate::{E2b, DEFAULT_TIMEOUT_S};

/// Most forks E2B's API takes in one call.
pub const E2B_MAX_FORKS: u32 = 20;

/// `SandboxForkRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ForkBody {
    timeout: Option<u64>,
    count: Option<u32>,
}

/// The handler.
pub(super) async fn fork(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, RestError> {
    let req: ForkBody = parse_body(&body)?;
    let count = req.count.unwrap_or(1);
    if count == 0 || count > E2B_MAX_FORKS {
        return Err(RestError::new(
            StatusCode::BAD_REQUEST,
            format!("count must be between 1 and {E2B_MAX_FORKS}"),
        ));
    }
    let s = e2b_sandbox(&e2b, &id).await?;
    let timeout = req.timeout.unwrap_or(DEFAULT_TIMEOUT_S);
    let parent = Lifecycle::of(&s);
    let lifecycle = Lifecycle::new(parent.auto_pause(), parent.auto_resume, timeout)
        .with_pause_memory(parent.auto_pause_memory);
    let mut metadata = user_metadata(&s);
    metadata.insert(E2B_MARKER_KEY.to_string(), lifecycle.marker());
    let forked = e2b.cp.fork(&s.id, ForkRequest { count, metadata }).await?;
    let mut items: Vec<ForkResult> = Vec::with_capacity(forked.sandboxes.len());
    for f in forked.sandboxes {
        let made = async {
            e2b.finish(&f.operation.id).await?;
            Ok::<_, RestError>(e2b.cp.get_sandbox(&f.sandbox.id).await?)
        }
        .await;
        match made {
            Ok(sb) => {
                if let Err(e) = e2b.live_for(&sb, timeout).await {
                    tracing::warn!(sandbox_id = %sb.id, error = %e, "e2b fork: cannot set the timeout");
                }
                items.push(ForkResult::Made {
                    sandbox: e2b.sandbox_json(&sb),
                });
            }
            Err(e) => items.push(ForkResult::Failed { error: e.body() }),
        }
    }
    tracing::info!(sandbox_id = %s.id, checkpoint_id = %forked.checkpoint.id, count, "e2b fork");
    Ok((StatusCode::CREATED, axum::Json(items)).into_response())
}
