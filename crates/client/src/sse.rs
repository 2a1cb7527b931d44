//! Opening a server-sent event stream, and the reconnect loop shared by resuming streams.

use std::fmt::Debug;
use std::pin::Pin;
use std::time::Duration;

pub(crate) use eventsource_stream::Event;
use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use reqwest::header::{HeaderValue, ACCEPT};
use reqwest::{Method, RequestBuilder};

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

/// The protocol of one kind of resumable stream; [`Resumable`] does the rest.
pub(crate) trait Resume: Sized + 'static {
    /// Where a reconnection resumes; `None` asks for the whole stream.
    type Position: Copy + Into<Option<u64>> + Debug + Send;
    /// What the stream yields.
    type Item: Send;
    /// The query parameter carrying the resume position.
    const PARAM: &'static str;
    /// What the stream is, for logs.
    const WHAT: &'static str;
    /// The reason of the error when the server ends the stream before its last item.
    const ENDED: &'static str;
    /// Decodes one event, moving `stream.offset` past it and setting `stream.done` after the
    /// last item; `Ok(None)` when there is nothing new (keep-alives, re-sent data).
    fn decode(stream: &mut Resumable<Self>, event: &Event) -> Result<Option<Self::Item>>;
}

/// A server-sent event stream that, when the connection drops or fails, reconnects at its
/// resume position after a [`backoff`], up to [`MAX_RECONNECTS`] failures in a row; then, or on
/// an error not worth a retry, or on an undecodable event, it yields the error and ends.
pub(crate) struct Resumable<R: Resume> {
    pub(crate) http: reqwest::Client,
    /// The stream's URL, without the resume parameter.
    pub(crate) url: String,
    /// The bearer token.
    pub(crate) token: String,
    /// Where a reconnection resumes: past the last item yielded.
    pub(crate) offset: R::Position,
    pub(crate) events: Option<EventStream>,
    /// Consecutive failed (re)connections.
    pub(crate) failures: u32,
    pub(crate) done: bool,
}

impl<R: Resume> Resumable<R> {
    /// The items of the stream at `url` from `offset` on.
    pub(crate) fn stream(
        http: reqwest::Client,
        url: String,
        token: String,
        offset: R::Position,
    ) -> impl Stream<Item = Result<R::Item>> + Send + 'static {
        let state = Resumable::<R> {
            http,
            url,
            token,
            offset,
            events: None,
            failures: 0,
            done: false,
        };
        futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        })
    }

    async fn next(&mut self) -> Option<Result<R::Item>> {
        loop {
            if self.done {
                return None;
            }
            let err = match self.events.as_mut() {
                None => {
                    let connected = match self.request() {
                        Ok(request) => open(request).await,
                        Err(err) => Err(err),
                    };
                    match connected {
                        Ok(events) => {
                            self.events = Some(events);
                            continue;
                        }
                        Err(err) => err,
                    }
                }
                Some(events) => match events.next().await {
                    Some(Ok(event)) => {
                        self.failures = 0;
                        match R::decode(self, &event) {
                            Ok(Some(item)) => return Some(Ok(item)),
                            Ok(None) => continue,
                            Err(err) => {
                                self.done = true;
                                return Some(Err(err));
                            }
                        }
                    }
                    Some(Err(err)) => stream_error(&self.url, err),
                    None => ClientError::Stream {
                        url: self.url.clone(),
                        reason: R::ENDED.into(),
                    },
                },
            };
            self.events = None;
            if let Some(err) = self.retry(err).await {
                return Some(Err(err));
            }
        }
    }

    /// The request that (re)opens the stream at the resume position.
    fn request(&self) -> Result<RequestBuilder> {
        let url = crate::parse_http_url(&self.url)?;
        let request = self.http.request(Method::GET, url).bearer_auth(&self.token);
        Ok(match self.offset.into() {
            Some(offset) => request.query(&[(R::PARAM, offset)]),
            None => request,
        })
    }

    /// Sleeps before a reconnection, or gives up and returns the error.
    async fn retry(&mut self, err: ClientError) -> Option<ClientError> {
        let retryable = err.is_retryable() || matches!(err, ClientError::Stream { .. });
        if !retryable || self.failures >= MAX_RECONNECTS {
            self.done = true;
            return Some(err);
        }
        self.failures += 1;
        tracing::debug!(url = %self.url, offset = ?self.offset, error = %err, "reconnecting {}", R::WHAT);
        tokio::time::sleep(backoff(self.failures)).await;
        None
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
