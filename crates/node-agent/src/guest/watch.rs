//! [`GuestClient::watch`]: changes below a directory, on a connection of its own.

use cove_guest_protocol::{
    read_frame, write_frame, FileEvent, GuestFrame, HostFrame, Request, Response, WatchRequest,
};
use futures::stream;

use super::attach::STREAM_ID;
use super::client::{GuestClient, CONNECT_TIMEOUT};
use super::connection::{frame_error, kind, open};
use super::error::GuestError;
use super::files::TRANSFER_FRAME_TIMEOUT;

/// Most events accepted in one frame from the guest (a frame is also bounded in bytes).
pub const MAX_EVENTS_PER_FRAME: usize = 65_536;
/// Longest path accepted in an event, in bytes (`PATH_MAX`).
const MAX_EVENT_PATH: usize = 4096;

struct Watching {
    conn: super::connection::Stream,
    done: bool,
}

impl Watching {
    /// The next batch; `Ok(None)` when the guest ended the watch (the directory is gone).
    async fn next_batch(&mut self) -> Result<Option<Vec<FileEvent>>, GuestError> {
        let frame: GuestFrame = read_frame(&mut self.conn).await.map_err(frame_error)?;
        if frame.id != STREAM_ID {
            return Err(GuestError::Protocol(format!(
                "watch frame with id {}",
                frame.id
            )));
        }
        match frame.response {
            Response::FileEvents(events) => {
                if events.len() > MAX_EVENTS_PER_FRAME {
                    return Err(GuestError::Protocol(format!(
                        "{} events in one frame",
                        events.len()
                    )));
                }
                let bad = events.iter().any(|e| {
                    let long =
                        |p: &[u8]| p.is_empty() || p.len() > MAX_EVENT_PATH || p.contains(&0);
                    long(&e.path.0) || e.from.as_ref().is_some_and(|f| long(&f.0))
                });
                if bad {
                    return Err(GuestError::Protocol("event with an invalid path".into()));
                }
                Ok(Some(events))
            }
            Response::End => Ok(None),
            Response::Error { code, message } => Err(GuestError::from_guest(code, message)),
            other => Err(GuestError::Protocol(format!(
                "unexpected {} while watching",
                kind(&other)
            ))),
        }
    }
}

impl GuestClient {
    /// Watches a directory: returns once the guest's watches are in place (a missing path, a
    /// file, a tree too large are the call's error), then yields batches of events until the
    /// guest ends the watch (its directory is gone) or fails (the last item). Dropping the
    /// stream closes the connection, and the guest removes its watches.
    pub async fn watch(
        &self,
        req: WatchRequest,
    ) -> Result<
        impl futures::Stream<Item = Result<Vec<FileEvent>, GuestError>> + Send + 'static,
        GuestError,
    > {
        let mut conn = open(self.connector(), CONNECT_TIMEOUT).await?;
        write_frame(
            &mut conn,
            &HostFrame {
                id: STREAM_ID,
                request: Request::Watch(req),
            },
        )
        .await
        .map_err(frame_error)?;
        let first: GuestFrame = tokio::time::timeout(TRANSFER_FRAME_TIMEOUT, read_frame(&mut conn))
            .await
            .map_err(|_| GuestError::Timeout)?
            .map_err(frame_error)?;
        if first.id != STREAM_ID {
            return Err(GuestError::Protocol(format!(
                "watch answered with id {}",
                first.id
            )));
        }
        match first.response {
            Response::Ok => {}
            Response::Error { code, message } => return Err(GuestError::from_guest(code, message)),
            other => {
                return Err(GuestError::Protocol(format!(
                    "unexpected {} instead of the watch's start",
                    kind(&other)
                )))
            }
        }
        let state = Watching { conn, done: false };
        Ok(Box::pin(stream::unfold(state, |mut st| async move {
            if st.done {
                return None;
            }
            match st.next_batch().await {
                Ok(Some(events)) => Some((Ok(events), st)),
                Ok(None) => None,
                Err(e) => {
                    st.done = true;
                    Some((Err(e), st))
                }
            }
        })))
    }
}
