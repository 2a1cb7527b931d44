//! The lifecycle event stream: `GET /v1/events` (server-sent events), resumable by sequence.

use cove_api_types::Event;
use futures::Stream;

use crate::sse::{self, Resumable, Resume};
use crate::{Client, ClientError, Result};

impl Client {
    /// `GET /v1/events`: lifecycle events after sequence number `after` (all retained events
    /// when `None`), then new ones as they happen. The stream never ends by itself; drop it to
    /// stop. A dropped connection is resumed from the last event seen, up to a few times in a
    /// row; then the error is yielded and the stream ends.
    pub fn events(&self, after: Option<u64>) -> impl Stream<Item = Result<Event>> + Send + 'static {
        let url = self.url(&["v1", "events"]).to_string();
        Resumable::<Events>::stream(self.http.clone(), url, self.token.clone(), after)
    }
}

/// The lifecycle event stream's protocol: resumes after the last sequence number seen, never
/// ends by itself.
enum Events {}

impl Resume for Events {
    type Position = Option<u64>;
    type Item = Event;
    const PARAM: &'static str = "after";
    const WHAT: &'static str = "the event stream";
    const ENDED: &'static str = "the event stream ended";

    fn decode(stream: &mut Resumable<Self>, event: &sse::Event) -> Result<Option<Event>> {
        if event.data.trim().is_empty() {
            return Ok(None);
        }
        let ev: Event =
            serde_json::from_str(&event.data).map_err(|source| ClientError::Decode {
                url: stream.url.clone(),
                source,
            })?;
        stream.offset = Some(ev.seq);
        Ok(Some(ev))
    }
}
