//! `GET /v1/events`: lifecycle events as server-sent events (`event: lifecycle`, `id: SEQ`,
//! data: an [`Event`](cove_api_types::Event) as JSON), and refusals of sandboxes' gateways
//! (`event: network_denied`, type `network.denied` with `destination`), oldest first, then live. Resume with
//! `?after=SEQ` or the `Last-Event-ID` header (the query wins). Keep-alive comments every 15 s.

use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::IntoResponse;
use cove_control_plane::events::EVENTS_PAGE;
use cove_control_plane::ControlPlane;
use cove_domain::InvalidInput;
use serde::Deserialize;

use super::extract::ApiQuery;
use super::operations::async_stream;
use crate::render::ApiError;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    /// Resume after this event seq (default: from the oldest kept; `Last-Event-ID` also works).
    after: Option<u64>,
}

#[utoipa::path(
    get,
    path = "/v1/events",
    tag = "events",
    description = "Server-sent events `lifecycle` (with `id` = seq; data: one `Event` as JSON) from `?after=` or `Last-Event-ID`, then live.",
    params(EventsQuery, ("Last-Event-ID" = Option<String>, Header, description = "Resume after this seq")),
    responses((status = 200, body = cove_api_types::Event, content_type = "text/event-stream", description = "An event stream (`text/event-stream`)")),
)]
pub(super) async fn stream(
    State(cp): State<ControlPlane>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let after = match q.after {
        Some(after) => after,
        None => match headers.get("last-event-id") {
            None => 0,
            Some(v) => v
                .to_str()
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| InvalidInput::new("Last-Event-ID", "must be an event seq"))?,
        },
    };
    // The body is streamed after this handler returns, outside the caller's scope: the feed
    // keeps the caller's view.
    let mut feed = cp.event_feed(after)?;
    let events = async_stream(move |tx| async move {
        loop {
            let Ok(page) = feed.next_page().await else {
                return;
            };
            let drained = page.len() < EVENTS_PAGE as usize;
            for ev in page {
                let name = match ev.kind {
                    cove_api_types::EventType::NetworkDenied => "network_denied",
                    _ => "lifecycle",
                };
                let sse = SseEvent::default()
                    .event(name)
                    .id(ev.seq.to_string())
                    .json_data(&ev)
                    .unwrap_or_else(|_| SseEvent::default().comment("unencodable event"));
                if tx.send(sse).await.is_err() {
                    return;
                }
            }
            if drained {
                feed.wait(Duration::from_secs(15)).await;
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
