//! E2B snapshots on Cove's checkpoints: `create_snapshot` (`POST /sandboxes/{id}/snapshots`)
//! takes a checkpoint and waits until it is ready; its `snapshotID` is the checkpoint's id and
//! its `names` the checkpoint's name, if any. `Sandbox.create(snapshot_id)` creates from the
//! checkpoint (a template id that is a checkpoint id, or the name of a ready checkpoint when no
//! template has that name); `list_snapshots` is `GET /snapshots` (ready checkpoints, newest
//! first, `sandboxID` and `name` filters, `X-Next-Token` paging); `delete_snapshot` is `DELETE
//! /templates/{id}` with a checkpoint id.
//!
//! What a snapshot holds is what the runtime's checkpoints hold: files always, memory where
//! the runtime saves it (qemu; not runc, where a sandbox made from it starts its processes
//! afresh), whatever `memory` the request asked for. Cove's feature gates apply: with
//! `checkpoints` disabled every call here answers `403`.

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use cove_api_types::{Checkpoint, CheckpointState, CreateCheckpointRequest};
use cove_control_plane::ServiceError;
use serde::Deserialize;

use super::{e2b_sandbox, parse_body};
use crate::error::RestError;
use crate::model::snapshots::SnapshotInfo;
use crate::E2b;

/// Largest page of `GET /snapshots`.
pub const MAX_SNAPSHOT_PAGE: usize = 100;

/// `SandboxSnapshotRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SnapshotRequest {
    name: Option<String>,
    /// Whether to keep memory; Cove keeps what the runtime can.
    #[allow(dead_code)]
    memory: Option<bool>,
}

/// `SnapshotInfo`.
fn snapshot_json(c: &Checkpoint) -> SnapshotInfo {
    SnapshotInfo {
        snapshot_id: c.id.clone(),
        names: c.name.iter().cloned().collect(),
    }
}

/// Whether `id` has the shape of a Cove checkpoint id.
pub(crate) fn is_checkpoint_id(id: &str) -> bool {
    cove_domain::ids::is_well_formed("ck", id)
}

/// `POST /sandboxes/{id}/snapshots`: `201` with the ready snapshot. A sandbox that is paused
/// (suspended) is `409`, as is one being moved between states.
pub(super) async fn create(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, RestError> {
    let req: SnapshotRequest = parse_body(&body)?;
    let s = e2b_sandbox(&e2b, &id).await?;
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let made = e2b
        .cp
        .create_checkpoint(&s.id, CreateCheckpointRequest { name: req.name }, key)
        .await?;
    e2b.finish(&made.operation.id).await?;
    let c = e2b.cp.checkpoint(&made.checkpoint.id).await?;
    if c.state != CheckpointState::Ready {
        return Err(RestError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "snapshot {} failed: {}",
                c.id,
                c.state_reason.as_deref().unwrap_or("unknown reason")
            ),
        ));
    }
    tracing::info!(sandbox_id = %s.id, checkpoint_id = %c.id, "e2b snapshot created");
    Ok((StatusCode::CREATED, axum::Json(snapshot_json(&c))).into_response())
}

/// The query of `GET /snapshots`.
#[derive(Debug, Default)]
struct ListQuery {
    sandbox_id: Option<String>,
    name: Option<String>,
    limit: Option<usize>,
    next_token: Option<String>,
}

fn parse_query(q: Option<&str>) -> Result<ListQuery, RestError> {
    let mut out = ListQuery::default();
    for kv in q.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let v = percent_encoding::percent_decode_str(&v.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned();
        match k {
            "sandboxID" => out.sandbox_id = Some(v).filter(|v| !v.is_empty()),
            "name" => out.name = Some(v).filter(|v| !v.is_empty()),
            "nextToken" => out.next_token = Some(v).filter(|v| !v.is_empty()),
            "limit" => {
                let n: usize = v.parse().map_err(|_| {
                    RestError::new(StatusCode::BAD_REQUEST, "limit must be a number")
                })?;
                if n == 0 || n > MAX_SNAPSHOT_PAGE {
                    return Err(RestError::new(
                        StatusCode::BAD_REQUEST,
                        format!("limit must be between 1 and {MAX_SNAPSHOT_PAGE}"),
                    ));
                }
                out.limit = Some(n);
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Whether checkpoint `c` answers to `name`: its id or its name, either optionally followed
/// by `:tag` (Cove's checkpoints have no tags, so any tag names the same one).
fn answers_to(c: &Checkpoint, name: &str) -> bool {
    let base = name.rsplit_once(':').map_or(name, |(b, _)| b);
    [name, base]
        .iter()
        .any(|n| c.id == *n || c.name.as_deref() == Some(*n))
}

/// `GET /snapshots`: one page of ready checkpoints, newest first; `X-Next-Token` only when
/// more follow. An unknown `sandboxID` lists nothing.
pub(super) async fn list(State(e2b): State<E2b>, req: Request) -> Result<Response, RestError> {
    let q = parse_query(req.uri().query())?;
    let cove_id = match &q.sandbox_id {
        None => None,
        Some(id) => match crate::cove_id(id) {
            Some(c) => Some(c),
            None => return Ok(axum::Json(Vec::<SnapshotInfo>::new()).into_response()),
        },
    };
    let all = match e2b.cp.list_checkpoints(cove_id.as_deref()).await {
        Ok(l) => l.checkpoints,
        Err(ServiceError::SandboxNotFound(_)) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let mut listed: Vec<Checkpoint> = all
        .into_iter()
        .filter(|c| c.state == CheckpointState::Ready)
        .filter(|c| q.name.as_deref().is_none_or(|n| answers_to(c, n)))
        .collect();
    // Newest first, ties by id: the order tokens continue in.
    listed.sort_by(|a, b| order_key(a).cmp(&order_key(b)));
    let start = match &q.next_token {
        None => 0,
        Some(t) => {
            let after = decode_token(t)?;
            // The page goes on after the last one given, even if that one was deleted since.
            listed
                .iter()
                .position(|c| order_key(c) > (after.0, after.1.as_str()))
                .unwrap_or(listed.len())
        }
    };
    let limit = q.limit.unwrap_or(MAX_SNAPSHOT_PAGE);
    let page: Vec<&Checkpoint> = listed.iter().skip(start).take(limit).collect();
    let more = start + page.len() < listed.len();
    let body: Vec<SnapshotInfo> = page.iter().map(|c| snapshot_json(c)).collect();
    let mut resp = axum::Json(body).into_response();
    if more {
        if let Some(last) = page.last() {
            let (newer, id) = order_key(last);
            let token = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(format!("{}__{id}", -newer));
            if let Ok(v) = HeaderValue::from_str(&token) {
                resp.headers_mut().insert("x-next-token", v);
            }
        }
    }
    Ok(resp)
}

/// The listing order of a checkpoint: newest first (negated creation time in microseconds),
/// then by id.
fn order_key(c: &Checkpoint) -> (i64, &str) {
    (-c.created_at.timestamp_micros(), c.id.as_str())
}

/// The position a `nextToken` names: `base64url("{created_at µs}__{id}")`.
fn decode_token(t: &str) -> Result<(i64, String), RestError> {
    let bad = || {
        RestError::new(
            StatusCode::BAD_REQUEST,
            "nextToken is not a token from a listing",
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(t)
        .map_err(|_| bad())?;
    let raw = String::from_utf8(raw).map_err(|_| bad())?;
    let (micros, id) = raw.split_once("__").ok_or_else(bad)?;
    let micros: i64 = micros.parse().map_err(|_| bad())?;
    Ok((-micros, id.to_string()))
}

/// `/templates/{id}`: `DELETE` of a checkpoint id is `delete_snapshot` (`204`; `404` when
/// there is none, which the SDK reads as `False`). Every other templates call is E2B's template
/// build API, which Cove does not offer here (`501`); deleting an id that is neither a
/// checkpoint nor a template is `404`.
pub(super) async fn templates(
    State(e2b): State<E2b>,
    method: Method,
    Path(rest): Path<String>,
) -> Result<Response, RestError> {
    let unsupported = || RestError::unsupported("the template build API");
    if method != Method::DELETE || rest.contains('/') {
        return Err(unsupported());
    }
    let not_found = || RestError::new(StatusCode::NOT_FOUND, format!("snapshot {rest} not found"));
    if is_checkpoint_id(&rest) {
        return match e2b.cp.delete_checkpoint(&rest).await {
            Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
            Err(ServiceError::CheckpointNotFound(_)) => Err(not_found()),
            Err(e) => Err(e.into()),
        };
    }
    match e2b.cp.get_template(&rest).await {
        Ok(_) => Err(unsupported()),
        Err(ServiceError::TemplateNotFound(_)) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}

/// The ready checkpoint a create's `templateID` names when no template has that name: the
/// newest ready one with that name (or `name:tag`).
pub(crate) async fn checkpoint_named(e2b: &E2b, name: &str) -> Option<String> {
    let all = e2b.cp.list_checkpoints(None).await.ok()?.checkpoints;
    all.into_iter()
        .find(|c| c.state == CheckpointState::Ready && answers_to(c, name))
        .map(|c| c.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_queries_parse() {
        let q =
            parse_query(Some("sandboxID=abc&name=my%20snap&limit=2&nextToken=x")).expect("parses");
        assert_eq!(q.sandbox_id.as_deref(), Some("abc"));
        assert_eq!(q.name.as_deref(), Some("my snap"));
        assert_eq!(q.limit, Some(2));
        assert_eq!(q.next_token.as_deref(), Some("x"));
        assert!(parse_query(Some("limit=0")).is_err());
        assert!(is_checkpoint_id("ck-abcdefgh01234567"));
        assert!(!is_checkpoint_id("base"));
    }
}
