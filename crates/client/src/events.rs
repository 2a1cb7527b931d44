//! The lifecycle event stream: `GET /v1/events` (server-sent events), resumable by sequence.

use cove_api_types::Event;
use futures::{Stream, StreamExt};
use reqwest::Method;

use crate::sse::{self, EventStream};
use crate::{Client, ClientError, Result};

impl Client {
    /// `GET /v1/events`: lifecycle events after sequence number `after` (all retained events
    /// when `None`), then new ones as they happen. The stream never ends by itself; drop it to
    /// stop. A dropped connection is resumed from the last event seen, up to a few times in a
    /// row; then the error is yielded and the stream ends.
    pub fn events(&self, after: Option<u64>) -> impl Stream<Item = Result<Event>> + Send + 'static {
        let state = EventsState {
            client: self.clone(),
            after,
            events: None,
            failures: 0,
            done: false,
        };
        futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        })
    }
}

/// Progress of an [`Client::events`] stream.
struct EventsState {
    client: Client,
    after: Option<u64>,
    events: Option<EventStream>,
    failures: u32,
    done: bool,
}

impl EventsState {
    async fn next(&mut self) -> Option<Result<Event>> {
        let url = self.client.url(&["v1", "events"]);
        let url_text = url.to_string();
        loop {
            if self.done {
                return None;
            }
            let events = match &mut self.events {
                Some(events) => events,
                None => {
                    let mut request = self.client.request(Method::GET, url.clone());
                    if let Some(after) = self.after {
                        request = request.query(&[("after", after)]);
                    }
                    match sse::open(request).await {
                        Ok(events) => self.events.insert(events),
                        Err(err) => match self.retry(err).await {
                            Some(err) => return Some(Err(err)),
                            None => continue,
                        },
                    }
                }
            };
            let err = match events.next().await {
                Some(Ok(event)) => {
                    self.failures = 0;
                    if event.data.trim().is_empty() {
                        continue;
                    }
                    return match serde_json::from_str::<Event>(&event.data) {
                        Ok(ev) => {
                            self.after = Some(ev.seq);
                            Some(Ok(ev))
                        }
                        Err(source) => {
                            self.done = true;
                            Some(Err(ClientError::Decode {
                                url: url_text,
                                source,
                            }))
                        }
                    };
                }
                Some(Err(err)) => sse::stream_error(&url_text, err),
                None => ClientError::Stream {
                    url: url_text.clone(),
                    reason: "the event stream ended".into(),
                },
            };
            self.events = None;
            if let Some(err) = self.retry(err).await {
                return Some(Err(err));
            }
        }
    }

    /// Sleeps before a reconnection, or gives up and returns the error.
    async fn retry(&mut self, err: ClientError) -> Option<ClientError> {
        let retryable = err.is_retryable() || matches!(err, ClientError::Stream { .. });
        if !retryable || self.failures >= sse::MAX_RECONNECTS {
            self.done = true;
            return Some(err);
        }
        self.failures += 1;
        tracing::debug!(error = %err, "reconnecting the event stream");
        tokio::time::sleep(sse::backoff(self.failures)).await;
        None
    }
}
