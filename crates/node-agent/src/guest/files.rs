//! [`GuestClient::read_file`] and [`GuestClient::write_file`]: file transfers, each on a
//! connection of its own.

use std::time::Duration;

use bytes::Bytes;
use cove_guest_protocol::{
    read_frame, write_frame, FileInfo, GuestFrame, GuestPath, HostFrame, Request, Response,
    WriteFileRequest, MAX_CHUNK_BYTES,
};
use cove_runtime::GuestStream;
use futures::{stream, StreamExt};
use tokio::sync::oneshot;
use tokio_util::task::AbortOnDropHandle;

use super::attach::STREAM_ID;
use super::client::{GuestClient, CONNECT_TIMEOUT};
use super::connection::{frame_error, kind, open};
use super::error::GuestError;

/// Bytes of upload body sent per `Data` frame (the last one may be shorter). The guest queues
/// at most four frames per upload, so this bounds what an upload holds in the sandbox's memory.
const UPLOAD_FRAME_BYTES: usize = 256 * 1024;
const _: () = assert!(UPLOAD_FRAME_BYTES <= MAX_CHUNK_BYTES);

/// Longest wait for any one frame of a file transfer (the guest reading, syncing or renaming).
pub const TRANSFER_FRAME_TIMEOUT: Duration = Duration::from_secs(60);

async fn next_frame(conn: &mut GuestStream) -> Result<Response, GuestError> {
    let frame: GuestFrame = tokio::time::timeout(TRANSFER_FRAME_TIMEOUT, read_frame(conn))
        .await
        .map_err(|_| GuestError::Timeout)?
        .map_err(frame_error)?;
    if frame.id != STREAM_ID {
        return Err(GuestError::Protocol(format!(
            "file frame with id {}",
            frame.id
        )));
    }
    Ok(frame.response)
}

struct Reading {
    conn: GuestStream,
    left: u64,
    done: bool,
}

impl Reading {
    async fn next_chunk(&mut self) -> Option<Result<Bytes, GuestError>> {
        match next_frame(&mut self.conn).await {
            Ok(Response::Data { data }) => {
                if data.is_empty() || data.len() > MAX_CHUNK_BYTES || data.len() as u64 > self.left
                {
                    return Some(Err(GuestError::Protocol(format!(
                        "file chunk of {} bytes",
                        data.len()
                    ))));
                }
                self.left -= data.len() as u64;
                Some(Ok(Bytes::from(data)))
            }
            Ok(Response::End) => None,
            Ok(Response::Error { code, message }) => {
                Some(Err(GuestError::from_guest(code, message)))
            }
            Ok(other) => Some(Err(GuestError::Protocol(format!(
                "unexpected {} while reading a file",
                kind(&other)
            )))),
            Err(e) => Some(Err(e)),
        }
    }
}

impl GuestClient {
    /// Reads a file: its metadata, then its bytes from `offset` (at most `length`) as a stream of
    /// chunks. A guest error before the data (missing file, a directory) is the call's error; a
    /// later one is the stream's last item.
    pub async fn read_file(
        &self,
        path: GuestPath,
        user: Option<String>,
        offset: u64,
        length: Option<u64>,
    ) -> Result<
        (
            FileInfo,
            impl futures::Stream<Item = Result<Bytes, GuestError>> + Send + 'static,
        ),
        GuestError,
    > {
        let mut conn = open(self.connector(), CONNECT_TIMEOUT).await?;
        let request = Request::ReadFile {
            path,
            user,
            offset,
            length,
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
        let info = match next_frame(&mut conn).await? {
            Response::FileInfo(info) => info,
            Response::Error { code, message } => return Err(GuestError::from_guest(code, message)),
            other => {
                return Err(GuestError::Protocol(format!(
                    "unexpected {} instead of file info",
                    kind(&other)
                )))
            }
        };
        let state = Reading {
            conn,
            left: length.unwrap_or(u64::MAX),
            done: false,
        };
        let body = Box::pin(stream::unfold(state, |mut st| async move {
            if st.done {
                return None;
            }
            let item = st.next_chunk().await;
            match &item {
                Some(Ok(_)) => {}
                _ => st.done = true,
            }
            item.map(|i| (i, st))
        }));
        Ok((info, body))
    }

    /// Uploads a file atomically: the guest writes a temporary file and renames it into place
    /// only after the whole body arrived. An error of `body` aborts the upload (the guest discards
    /// the temporary file; the old file stays) and is returned as `Unavailable`. An early guest
    /// error (`TooLarge`, `NoSpace`, a directory at the path) stops sending at once.
    pub async fn write_file<S>(
        &self,
        req: WriteFileRequest,
        mut body: S,
    ) -> Result<FileInfo, GuestError>
    where
        S: futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + Unpin + 'static,
    {
        let conn = open(self.connector(), CONNECT_TIMEOUT).await?;
        let (mut rd, mut wr) = tokio::io::split(conn);
        let (answer_tx, mut answer) = oneshot::channel();
        let _abort_reader = AbortOnDropHandle::new(tokio::spawn(async move {
            let frame = read_frame::<_, GuestFrame>(&mut rd)
                .await
                .map_err(frame_error);
            let _ = answer_tx.send(frame);
        }));

        let early = |answer: Result<Result<GuestFrame, GuestError>, oneshot::error::RecvError>| {
            match answer {
                Ok(Ok(frame)) => match frame.response {
                    Response::Error { code, message } => GuestError::from_guest(code, message),
                    other => GuestError::Protocol(format!(
                        "unexpected {} before the upload ended",
                        kind(&other)
                    )),
                },
                Ok(Err(e)) => e,
                Err(_) => GuestError::Unavailable("upload connection lost".into()),
            }
        };
        let frame = HostFrame {
            id: STREAM_ID,
            request: Request::WriteFile(req),
        };
        write_frame(&mut wr, &frame).await.map_err(frame_error)?;
        let mut pending: Vec<u8> = Vec::with_capacity(UPLOAD_FRAME_BYTES);
        loop {
            let item = tokio::select! {
                a = &mut answer => return Err(early(a)),
                item = body.next() => item,
            };
            // Body pieces (often a few KiB each) are gathered into frames of
            // `UPLOAD_FRAME_BYTES`: per frame the guest pays a read, a queue hand-off and a
            // write, so few large frames move the same bytes with a fraction of the calls.
            let mut request_chunks: Vec<Request> = Vec::new();
            match item {
                Some(Ok(bytes)) => {
                    let mut rest = &bytes[..];
                    while !rest.is_empty() {
                        let take = (UPLOAD_FRAME_BYTES - pending.len()).min(rest.len());
                        pending.extend_from_slice(&rest[..take]);
                        rest = &rest[take..];
                        if pending.len() == UPLOAD_FRAME_BYTES {
                            request_chunks.push(Request::Data {
                                data: std::mem::replace(
                                    &mut pending,
                                    Vec::with_capacity(UPLOAD_FRAME_BYTES),
                                ),
                            });
                        }
                    }
                }
                Some(Err(e)) => {
                    return Err(GuestError::Unavailable(format!(
                        "upload aborted: body failed: {e}"
                    )))
                }
                None => {
                    if !pending.is_empty() {
                        request_chunks.push(Request::Data {
                            data: std::mem::take(&mut pending),
                        });
                    }
                    request_chunks.push(Request::DataEnd);
                }
            };
            let end = matches!(request_chunks.last(), Some(Request::DataEnd));
            for request in request_chunks {
                let frame = HostFrame {
                    id: STREAM_ID,
                    request,
                };
                tokio::select! {
                    a = &mut answer => return Err(early(a)),
                    w = tokio::time::timeout(TRANSFER_FRAME_TIMEOUT, write_frame(&mut wr, &frame)) => {
                        w.map_err(|_| GuestError::Timeout)?.map_err(frame_error)?;
                    }
                }
            }
            if end {
                break;
            }
        }
        let frame = tokio::time::timeout(TRANSFER_FRAME_TIMEOUT, &mut answer)
            .await
            .map_err(|_| GuestError::Timeout)?
            .map_err(|_| GuestError::Unavailable("upload connection lost".into()))??;
        if frame.id != STREAM_ID {
            return Err(GuestError::Protocol(format!(
                "upload answered with id {}",
                frame.id
            )));
        }
        match frame.response {
            Response::FileInfo(info) => Ok(info),
            Response::Error { code, message } => Err(GuestError::from_guest(code, message)),
            other => Err(GuestError::Protocol(format!(
                "unexpected {} after upload",
                kind(&other)
            ))),
        }
    }
}
