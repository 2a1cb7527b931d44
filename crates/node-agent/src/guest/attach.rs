//! [`GuestClient::attach`]: a command's output as a stream, on a connection of its own.

use bytes::Bytes;
use cove_guest_protocol::{
    read_frame, write_frame, CommandInfo, GuestFrame, HostFrame, Request, Response, Stream,
    MAX_CHUNK_BYTES,
};
use futures::stream;

use super::client::{GuestClient, CONNECT_TIMEOUT};
use super::connection::{frame_error, kind, open};
use super::error::GuestError;

/// One event of an attached command.
#[derive(Debug, Clone, PartialEq)]
pub enum AttachEvent {
    /// Output bytes, exactly as the process wrote them, starting at `offset` of the command's
    /// combined output.
    Output {
        /// Offset of the first byte.
        offset: u64,
        /// The stream they came from.
        stream: Stream,
        /// The bytes.
        data: Bytes,
    },
    /// Bytes `[offset, offset + len)` were dropped by the guest (the middle of a long output);
    /// the stream continues at `offset + len`.
    Gap {
        /// Offset of the first dropped byte.
        offset: u64,
        /// Number of dropped bytes (at least 1).
        len: u64,
    },
    /// The command ended and every kept byte was sent; the last event.
    Exited(CommandInfo),
    /// Without `follow`: the kept output is exhausted while the command runs; the last event.
    End,
}

/// The request id of the one request on a streaming connection.
pub(super) const STREAM_ID: u64 = 1;

struct Attached {
    stream: super::connection::Stream,
    requested: u64,
    next: Option<u64>,
    done: bool,
}

impl Attached {
    async fn next_event(&mut self) -> Result<AttachEvent, GuestError> {
        let frame: GuestFrame = read_frame(&mut self.stream).await.map_err(frame_error)?;
        if frame.id != STREAM_ID {
            return Err(GuestError::Protocol(format!(
                "attach frame with id {}",
                frame.id
            )));
        }
        match frame.response {
            Response::Output {
                offset,
                stream,
                data,
            } => {
                let ok_offset = match self.next {
                    Some(next) => offset == next,
                    None => offset <= self.requested,
                };
                if !ok_offset {
                    return Err(GuestError::Protocol(format!(
                        "output at offset {offset} out of order"
                    )));
                }
                if data.is_empty() || data.len() > MAX_CHUNK_BYTES {
                    return Err(GuestError::Protocol(format!(
                        "output chunk of {} bytes",
                        data.len()
                    )));
                }
                let Some(end) = offset.checked_add(data.len() as u64) else {
                    return Err(GuestError::Protocol(format!(
                        "output at offset {offset} overflows"
                    )));
                };
                self.next = Some(end);
                Ok(AttachEvent::Output {
                    offset,
                    stream,
                    data: Bytes::from(data),
                })
            }
            Response::Gap { offset, len } => {
                let ok_offset = match self.next {
                    Some(next) => offset == next,
                    None => offset <= self.requested,
                };
                let Some(end) = offset.checked_add(len).filter(|_| ok_offset && len > 0) else {
                    return Err(GuestError::Protocol(format!(
                        "gap of {len} bytes at offset {offset} out of order"
                    )));
                };
                self.next = Some(end);
                Ok(AttachEvent::Gap { offset, len })
            }
            Response::Exited(info) => Ok(AttachEvent::Exited(info)),
            Response::End => Ok(AttachEvent::End),
            Response::Error { code, message } => Err(GuestError::from_guest(code, message)),
            other => Err(GuestError::Protocol(format!(
                "unexpected {} while attached",
                kind(&other)
            ))),
        }
    }
}

impl GuestClient {
    /// Streams a command's output from `offset` (clamped by the guest to what it kept) on a
    /// connection of its own. With `follow`, the stream ends with `Exited` once the command has
    /// ended; without, with `Exited` or `End` after the output kept so far. A guest error (unknown
    /// command) or a broken connection is the stream's last item. There is no idle timeout: a
    /// command may be silent for a long time.
    pub async fn attach(
        &self,
        command_id: &str,
        offset: u64,
        follow: bool,
    ) -> Result<
        impl futures::Stream<Item = Result<AttachEvent, GuestError>> + Send + 'static,
        GuestError,
    > {
        let mut conn = open(self.connector(), CONNECT_TIMEOUT).await?;
        let request = Request::Attach {
            command_id: command_id.to_string(),
            offset,
            follow,
        };
        write_frame(
            &mut conn,
            &HostFrame {
                id: STREAM_ID,
                request,
            },
        )
        .await
        .map_err(frame_error)?;
        let state = Attached {
            stream: conn,
            requested: offset,
            next: None,
            done: false,
        };
        Ok(Box::pin(stream::unfold(state, |mut st| async move {
            if st.done {
                return None;
            }
            let item = st.next_event().await;
            st.done = !matches!(
                item,
                Ok(AttachEvent::Output { .. } | AttachEvent::Gap { .. })
            );
            Some((item, st))
        })))
    }
}
