//! Operations: `/v1/operations/{id}`, waiting for them, and following their log.

use std::time::Duration;

use cove_api_types::{Operation, OperationList, OperationLogEvent};
use futures::Stream;
use reqwest::Method;
use tokio::time::Instant;

use crate::sse::{self, Resumable, Resume};
use crate::{wait_param, Client, ClientError, Result, LONG_POLL_SLACK, MAX_LONG_POLL};

/// Consecutive transport failures [`Client::wait_operation`] rides out (a server restart).
const MAX_WAIT_RETRIES: u32 = 3;

impl Client {
    /// `GET /v1/operations/{id}`, answering at once.
    pub async fn get_operation(&self, id: &str) -> Result<Operation> {
        self.json(self.request(Method::GET, self.url(&["v1", "operations", id])))
            .await
    }

    /// `POST /v1/operations/{id}/cancel`: asks the operation to stop. It ends `cancelled` if it
    /// had not finished (a cancelled create leaves nothing behind); a finished operation is
    /// returned unchanged. Returns the operation as it is after the request.
    pub async fn cancel_operation(&self, id: &str) -> Result<Operation> {
        let url = self.url(&["v1", "operations", id, "cancel"]);
        self.json(self.request(Method::POST, url)).await
    }

    /// `GET /v1/operations?sandbox_id=&limit=`: recent operations, newest first (of one sandbox
    /// when `sandbox_id` is given; `limit` defaults to 50, at most 500).
    pub async fn list_operations(
        &self,
        sandbox_id: Option<&str>,
        limit: Option<u32>,
    ) -> Result<Vec<Operation>> {
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(id) = sandbox_id {
            query.push(("sandbox_id", id.to_owned()));
        }
        if let Some(limit) = limit {
            query.push(("limit", limit.to_string()));
        }
        let request = self
            .request(Method::GET, self.url(&["v1", "operations"]))
            .query(&query);
        let list: OperationList = self.json(request).await?;
        Ok(list.operations)
    }

    /// `GET /v1/operations/{id}?wait=`: long-polls until the operation is final or `wait` (at
    /// most 30 s) elapses.
    pub async fn poll_operation(&self, id: &str, wait: Duration) -> Result<Operation> {
        let wait = wait.min(MAX_LONG_POLL);
        let request = self
            .request(Method::GET, self.url(&["v1", "operations", id]))
            .query(&[("wait", wait_param(wait))])
            .timeout(wait + LONG_POLL_SLACK);
        self.json(request).await
    }

    /// Long-polls until the operation is final and returns it. A failed or cancelled operation
    /// is `Ok` (check `state` and `error`); [`ClientError::WaitTimeout`] when it is still going
    /// after `timeout`. Brief transport failures are retried.
    pub async fn wait_operation(&self, id: &str, timeout: Duration) -> Result<Operation> {
        let deadline = Instant::now() + timeout;
        let mut failures = 0;
        loop {
            let started = Instant::now();
            let remaining = deadline.saturating_duration_since(started);
            match self.poll_operation(id, remaining).await {
                Ok(op) if op.state.is_final() => return Ok(op),
                Ok(_) => failures = 0,
                Err(err) if err.is_retryable() && failures < MAX_WAIT_RETRIES => {
                    failures += 1;
                    tracing::debug!(operation_id = id, error = %err, "retrying operation wait");
                    tokio::time::sleep(sse::backoff(failures)).await;
                }
                Err(err) => return Err(err),
            }
            if Instant::now() >= deadline {
                return Err(ClientError::WaitTimeout {
                    operation_id: id.to_owned(),
                    timeout,
                });
            }
            // A server that answers a long-poll at once must not make this spin.
            if started.elapsed() < Duration::from_millis(200) {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }

    /// `GET /v1/operations/{id}/logs`: the operation's log and progress, ending with
    /// [`OperationLogEvent::Done`]. Lines after sequence number `after` only, when given.
    ///
    /// The stream reconnects (from the last line seen) when the connection drops before `done`,
    /// up to a few times in a row; then it yields the error and ends.
    pub fn operation_logs(
        &self,
        id: &str,
        after: Option<u64>,
    ) -> impl Stream<Item = Result<OperationLogEvent>> + Send + 'static {
        let url = self.url(&["v1", "operations", id, "logs"]).to_string();
        Resumable::<Logs>::stream(self.http.clone(), url, self.token.clone(), after)
    }
}

/// An operation log's protocol: resumes after the last log line seen, ends after `done`.
enum Logs {}

impl Resume for Logs {
    type Position = Option<u64>;
    type Item = OperationLogEvent;
    const PARAM: &'static str = "after";
    const WHAT: &'static str = "operation log";
    const ENDED: &'static str = "ended before the done event";

    fn decode(stream: &mut Resumable<Self>, event: &sse::Event) -> Result<Option<Self::Item>> {
        let log = parse_log_event(&stream.url, &event.data)?;
        match &log {
            Some(OperationLogEvent::Log { seq, .. }) => stream.offset = Some(*seq),
            Some(OperationLogEvent::Done { .. }) => stream.done = true,
            Some(OperationLogEvent::Progress { .. }) | None => {}
        }
        Ok(log)
    }
}

/// Decodes the data of one log event; keep-alives (empty data) are `None`.
fn parse_log_event(url: &str, data: &str) -> Result<Option<OperationLogEvent>> {
    if data.trim().is_empty() {
        return Ok(None);
    }
    serde_json::from_str(data)
        .map(Some)
        .map_err(|source| ClientError::Decode {
            url: url.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_events_decode() {
        let log = parse_log_event("u", r#"{"type":"log","seq":3,"line":"RUN apt-get"}"#);
        assert_eq!(
            log.expect("decodes"),
            Some(OperationLogEvent::Log {
                seq: 3,
                line: "RUN apt-get".into()
            })
        );
        let progress = parse_log_event("u", r#"{"type":"progress","percent":40,"phase":"unpack"}"#);
        assert_eq!(
            progress.expect("decodes"),
            Some(OperationLogEvent::Progress {
                percent: 40,
                phase: "unpack".into()
            })
        );
        assert_eq!(parse_log_event("u", "").expect("keep-alive"), None);
        assert!(matches!(
            parse_log_event("u", "{"),
            Err(ClientError::Decode { .. })
        ));
    }
}
