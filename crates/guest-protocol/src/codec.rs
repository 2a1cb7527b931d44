//! Length-prefixed framing: `u32` big-endian body length, then a postcard body.

use serde::{de::DeserializeOwned, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::MAX_FRAME_BYTES;

/// Errors of reading or writing frames.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the stream between frames.
    #[error("connection closed")]
    Closed,
    /// The length prefix exceeds [`MAX_FRAME_BYTES`].
    #[error("frame of {len} bytes exceeds the limit of {MAX_FRAME_BYTES}")]
    TooLarge {
        /// Announced length.
        len: usize,
    },
    /// The body is not a valid message.
    #[error("malformed frame: {0}")]
    Malformed(#[from] postcard::Error),
    /// The stream failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Encodes one frame (length prefix + body). Fails with `TooLarge` if the body would exceed the
/// limit.
///
/// The body is sized first (a walk over the value, no copy) and serialized straight after the
/// prefix into one buffer of the exact size: output and upload chunks are copied once here,
/// not once into a growing vector and again behind the prefix.
pub fn encode_frame<T: Serialize>(frame: &T) -> Result<Vec<u8>, FrameError> {
    let len = postcard::experimental::serialized_size(frame)?;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { len });
    }
    let mut out = Vec::with_capacity(len + 4);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    Ok(postcard::to_extend(frame, out)?)
}

/// Decodes a frame body (without its length prefix).
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    Ok(postcard::from_bytes(body)?)
}

/// Writes one frame and flushes.
pub async fn write_frame<W, T>(w: &mut W, frame: &T) -> Result<(), FrameError>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    let buf = encode_frame(frame)?;
    w.write_all(&buf).await?;
    w.flush().await?;
    Ok(())
}

/// Reads one frame. Returns `Closed` on a clean end of stream before a frame starts; a stream
/// that ends inside a frame is an `Io` error.
pub async fn read_frame<R, T>(r: &mut R) -> Result<T, FrameError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { len });
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    decode_body(&body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GuestFrame, HostFrame, Request, Response, Stream};

    #[tokio::test]
    async fn round_trip() {
        let frames = vec![
            HostFrame {
                id: 1,
                request: Request::Hello { version: 1 },
            },
            HostFrame {
                id: 2,
                request: Request::Data {
                    data: vec![0, 255, 10],
                },
            },
        ];
        let mut buf = Vec::new();
        for f in &frames {
            write_frame(&mut buf, f).await.expect("write");
        }
        let mut r = &buf[..];
        for f in &frames {
            let got: HostFrame = read_frame(&mut r).await.expect("read");
            assert_eq!(&got, f);
        }
        assert!(matches!(
            read_frame::<_, HostFrame>(&mut r).await,
            Err(FrameError::Closed)
        ));
    }

    #[tokio::test]
    async fn rejects_oversized_length_without_allocating() {
        let buf = u32::MAX.to_be_bytes();
        let mut r = &buf[..];
        assert!(matches!(
            read_frame::<_, GuestFrame>(&mut r).await,
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn output_chunk_of_max_size_fits() {
        let f = GuestFrame {
            id: u64::MAX,
            response: Response::Output {
                offset: u64::MAX,
                stream: Stream::Stderr,
                data: vec![0xAB; crate::MAX_CHUNK_BYTES],
            },
        };
        assert!(encode_frame(&f).is_ok());
    }

    fn info() -> crate::CommandInfo {
        crate::CommandInfo {
            command_id: "c1".into(),
            pid: 7,
            argv: vec!["/bin/true".into()],
            user: "root".into(),
            cwd: "/root".into(),
            started_at_ms: 1,
            ended_at_ms: None,
            state: crate::CommandState::Running,
            exit_code: None,
            signal: None,
            timed_out: false,
            output_bytes: 0,
            truncated: false,
            stdin_open: false,
            oom_killed: false,
            pty: false,
        }
    }

    /// Both spawn answers round-trip, and the old one keeps its exact bytes (variant 2, the
    /// pid as a varint), so a host of either version decodes what an agent of the other sends
    /// on the version they agreed on.
    #[tokio::test]
    async fn both_spawn_answers_round_trip() {
        let old = GuestFrame {
            id: 1,
            response: Response::Spawned { pid: 7 },
        };
        assert_eq!(encode_frame(&old).expect("encode"), [0, 0, 0, 3, 1, 2, 7]);
        let new = GuestFrame {
            id: 2,
            response: Response::SpawnedCommand(info()),
        };
        let mut buf = Vec::new();
        write_frame(&mut buf, &old).await.expect("write");
        write_frame(&mut buf, &new).await.expect("write");
        let mut r = &buf[..];
        assert_eq!(
            read_frame::<_, GuestFrame>(&mut r).await.expect("read"),
            old
        );
        assert_eq!(
            read_frame::<_, GuestFrame>(&mut r).await.expect("read"),
            new
        );
    }
}
