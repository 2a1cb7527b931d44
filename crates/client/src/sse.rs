//! Opening a server-sent event stream, and the backoff shared by resuming streams.

use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::Stream;
use reqwest::header::{HeaderValue, ACCEPT};
use reqwest::RequestBuilder;

use crate::{ClientError, Result};

/// Consecutive failed (re)connections a resuming stream tolerates before it gives up.
pub(crate) const MAX_RECONNECTS: u32 = 5;

/// A stream of parsed server-sent events.
pub(crate) type EventStream =
    Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<reqwest::Error>>> + Send>>;

/// Sends `request` asking for `text/event-stream` and returns its events.
pub(crate) async fn open(request: RequestBuilder) -> Result<EventStream> {
    let request = request.header(ACCEPT, HeaderValue::from_static("text/event-stream"));
    let response = crate::send(request).await?;
    Ok(Box::pin(response.bytes_stream().eventsource()))
}

/// Delay before reconnection attempt `attempt` (1-based): 200 ms doubling, at most 3 s.
pub(crate) fn backoff(attempt: u32) -> Duration {
    let ms = 200u64.saturating_mul(1 << attempt.saturating_sub(1).min(4));
    Duration::from_millis(ms.min(3000))
}

/// Maps a failure of a live event stream: a broken connection is a transport error (worth a
/// reconnect); unparsable bytes are a stream error (not).
pub(crate) fn stream_error(url: &str, err: EventStreamError<reqwest::Error>) -> ClientError {
    match err {
        EventStreamError::Transport(e) => ClientError::Transport(e),
        other => ClientError::Stream {
            url: url.to_owned(),
            reason: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_millis(200));
        assert_eq!(backoff(2), Duration::from_millis(400));
        assert_eq!(backoff(3), Duration::from_millis(800));
        assert_eq!(backoff(5), Duration::from_millis(3000));
        assert_eq!(backoff(50), Duration::from_millis(3000));
    }
}
