//! `/v1/operations` handlers: get with long-poll, and the log stream of a build.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::{OperationList, OperationLogEvent};
use cove_control_plane::ControlPlane;
use futures::Stream;
use serde::Deserialize;

use super::extract::{parse_wait, ApiQuery};
use crate::render::ApiError;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct GetQuery {
    /// Long-poll: `30s`, `500ms`, `2m` or a number of seconds.
    wait: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/operations/{id}",
    tag = "operations",
    description = "Get an operation (`?wait=30s`: long-poll until it ends).",
    params(("id" = String, Path, description = "Operation id"), GetQuery),
    responses((status = 200, body = cove_api_types::Operation, description = "The operation")),
)]
pub(super) async fn get_one(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<GetQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let op = match q.wait.as_deref() {
        Some(w) => cp.operations().wait(&id, parse_wait(w)?).await?,
        None => cp.operations().get(&id).await?,
    };
    Ok(Json(op))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    /// Only the operations of this sandbox.
    sandbox_id: Option<String>,
    /// How many, newest first (default 50, at most 500).
    limit: Option<u32>,
}

/// `GET /v1/operations?sandbox_id=&limit=`: recent operations, newest first.
#[utoipa::path(
    get,
    path = "/v1/operations",
    tag = "operations",
    description = "Recent operations, newest first.",
    params(ListQuery),
    responses((status = 200, body = cove_api_types::OperationList, description = "The operations")),
)]
pub(super) async fn list(
    State(cp): State<ControlPlane>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let operations = cp
        .operations()
        .list(q.sandbox_id.as_deref(), q.limit)
        .await?;
    Ok(Json(OperationList { operations }))
}

/// `POST /v1/operations/{id}/cancel`: the operation once it ended (or as it is after 10 s).
#[utoipa::path(
    post,
    path = "/v1/operations/{id}/cancel",
    tag = "operations",
    description = "Cancel an operation; answers once it ended (or as it is after 10 s).",
    params(("id" = String, Path, description = "Operation id")),
    responses((status = 200, body = cove_api_types::Operation, description = "The operation")),
)]
pub(super) async fn cancel(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.operations().cancel(&id).await?))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct LogsQuery {
    /// Resume after this log line seq (default: from the first line).
    after: Option<u64>,
}

#[utoipa::path(
    get,
    path = "/v1/operations/{id}/logs",
    tag = "operations",
    description = "Server-sent events of an operation's log: `log` (with `id` = seq), `progress`, then `done` with the final operation. Each event's data is one `OperationLogEvent` as JSON.",
    params(("id" = String, Path, description = "Operation id"), LogsQuery),
    responses((status = 200, body = cove_api_types::OperationLogEvent, content_type = "text/event-stream", description = "An event stream (`text/event-stream`)")),
)]
pub(super) async fn logs(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<LogsQuery>,
) -> Result<impl IntoResponse, ApiError> {
    cp.operations().get(&id).await?;
    let stream = log_stream(cp, id, q.after.unwrap_or(0));
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

fn event(ev: &OperationLogEvent) -> Event {
    let name = match ev {
        OperationLogEvent::Log { .. } => "log",
        OperationLogEvent::Progress { .. } => "progress",
        OperationLogEvent::Done { .. } => "done",
    };
    let mut e = Event::default().event(name);
    if let OperationLogEvent::Log { seq, .. } = ev {
        e = e.id(seq.to_string());
    }
    e.json_data(ev)
        .unwrap_or_else(|_| Event::default().comment("unencodable event"))
}

/// Log lines from `after` on, progress when it changes, then `done` once the operation is final
/// and every line was sent.
fn log_stream(
    cp: ControlPlane,
    id: String,
    after: u64,
) -> impl Stream<Item = Result<Event, Infallible>> {
    async_stream(move |tx| async move {
        let mut after = after;
        let mut last_progress = None;
        let mut changes = cp.operations().subscribe();
        loop {
            changes.borrow_and_update();
            let Ok(op) = cp.operations().get(&id).await else {
                return;
            };
            let Ok(lines) = cp.operations().logs(&id, after).await else {
                return;
            };
            let drained = lines.len() < 500;
            for (seq, line) in lines {
                after = seq;
                if tx
                    .send(event(&OperationLogEvent::Log { seq, line }))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if op.progress != last_progress {
                last_progress = op.progress;
                if let Some(percent) = op.progress {
                    let ev = OperationLogEvent::Progress {
                        percent,
                        phase: String::new(),
                    };
                    if tx.send(event(&ev)).await.is_err() {
                        return;
                    }
                }
            }
            if op.state.is_final() && drained {
                let _ = tx
                    .send(event(&OperationLogEvent::Done { operation: op }))
                    .await;
                return;
            }
            if drained {
                let _ = tokio::time::timeout(Duration::from_secs(15), changes.changed()).await;
            }
        }
    })
}

/// A stream fed by a task through a bounded channel (the task stops when the client goes). The
/// task runs as the request's caller.
pub(super) fn async_stream<F, Fut>(f: F) -> impl Stream<Item = Result<Event, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Event>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(cove_control_plane::orgs::scope::carried(f(tx)));
    futures::StreamExt::map(tokio_stream::wrappers::ReceiverStream::new(rx), Ok)
}
