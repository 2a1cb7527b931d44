//! Mux frames and their byte encoding.
//!
//! A frame is a 9-byte header: a kind byte, a `u32` big-endian stream id (or sequence number),
//! and a `u32` big-endian payload length; then the payload. Lengths are checked before anything is
//! allocated: a data payload is at most [`MAX_DATA`], any other payload at most [`MAX_CONTROL`].

/// Bytes of a frame header.
pub const HEADER_BYTES: usize = 9;
/// Largest payload of a [`Frame::Data`], in bytes (32 KiB).
pub const MAX_DATA: usize = 32 * 1024;
/// Largest payload of any other frame, in bytes.
pub const MAX_CONTROL: usize = 1024;
/// The payload of [`Frame::Hello`]: a magic that also lets a reader find the start of a session.
pub const HELLO_MAGIC: &[u8; 8] = b"COVEMUX1";

const K_HELLO: u8 = 0x01;
const K_OPEN: u8 = 0x02;
const K_DATA: u8 = 0x03;
const K_CREDIT: u8 = 0x04;
const K_CLOSE: u8 = 0x05;
const K_RESET: u8 = 0x06;
const K_PING: u8 = 0x07;
const K_PONG: u8 = 0x08;
const K_CONTROL: u8 = 0x09;
const K_CONTROL_REPLY: u8 = 0x0a;

/// One mux frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Starts a session (host → guest, first frame after connecting, repeated until answered:
    /// a guest that has not opened its port yet loses what the host sends); the guest answers
    /// with the same `Hello`. A `Hello` with a new session number makes the guest drop every
    /// stream of the earlier session; a repeated one is only answered.
    Hello {
        /// Session number chosen by the host.
        session: u32,
    },
    /// Opens stream `id` (host → guest); both directions start with [`super::WINDOW`] bytes of
    /// credit.
    Open {
        /// Stream id chosen by the host, never reused within a session.
        id: u32,
    },
    /// Bytes of stream `id`; the sender must hold that much credit.
    Data {
        /// Stream id.
        id: u32,
        /// At most [`MAX_DATA`] bytes.
        data: Vec<u8>,
    },
    /// The receiver of stream `id` consumed `bytes` more; the sender may send that much more.
    Credit {
        /// Stream id.
        id: u32,
        /// Bytes granted.
        bytes: u32,
    },
    /// The sender will send no more data on stream `id` (half-close, end of file for the peer).
    Close {
        /// Stream id.
        id: u32,
    },
    /// Stream `id` is abandoned in both directions.
    Reset {
        /// Stream id.
        id: u32,
    },
    /// Liveness probe; answered with a `Pong` carrying the same sequence number.
    Ping {
        /// Sequence number.
        seq: u32,
    },
    /// Answer to a `Ping`.
    Pong {
        /// Sequence number of the ping.
        seq: u32,
    },
    /// A control request to the guest's transport itself (clock, entropy), see [`super::Control`].
    Control {
        /// Sequence number, echoed by the reply.
        seq: u32,
        /// Encoded [`super::Control`], at most [`MAX_CONTROL`] bytes.
        body: Vec<u8>,
    },
    /// Answer to a `Control`: empty on success, otherwise an error message (UTF-8).
    ControlReply {
        /// Sequence number of the request.
        seq: u32,
        /// Empty = done; otherwise what failed.
        body: Vec<u8>,
    },
}

/// A frame that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Unknown kind byte.
    #[error("unknown mux frame kind {0:#04x}")]
    Kind(u8),
    /// A payload longer than its kind allows.
    #[error("mux frame of kind {kind:#04x} with {len} bytes exceeds its limit")]
    TooLong {
        /// Kind byte.
        kind: u8,
        /// Announced length.
        len: usize,
    },
    /// A payload whose content does not fit its kind.
    #[error("malformed mux frame of kind {0:#04x}")]
    Malformed(u8),
}

impl Frame {
    /// Appends the encoding of the frame to `out`. Panics never; a too long data payload is the
    /// caller's bug and is cut at [`MAX_DATA`] by the stream code before it gets here.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (kind, id, payload): (u8, u32, &[u8]) = match self {
            Frame::Hello { session } => (K_HELLO, *session, HELLO_MAGIC),
            Frame::Open { id } => (K_OPEN, *id, &[]),
            Frame::Data { id, data } => (K_DATA, *id, data),
            Frame::Credit { id, bytes } => {
                return push(out, K_CREDIT, *id, &bytes.to_be_bytes());
            }
            Frame::Close { id } => (K_CLOSE, *id, &[]),
            Frame::Reset { id } => (K_RESET, *id, &[]),
            Frame::Ping { seq } => (K_PING, *seq, &[]),
            Frame::Pong { seq } => (K_PONG, *seq, &[]),
            Frame::Control { seq, body } => (K_CONTROL, *seq, body),
            Frame::ControlReply { seq, body } => (K_CONTROL_REPLY, *seq, body),
        };
        push(out, kind, id, payload);
    }

    /// The encoding of the frame.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Decodes one frame from the start of `buf`: `Ok(None)` when more bytes are needed,
    /// `Ok(Some((frame, used)))` with the bytes it took, or an error for bytes that can never be
    /// a frame (checked on the header alone, so nothing is buffered for a bad length).
    pub fn decode(buf: &[u8]) -> Result<Option<(Frame, usize)>, DecodeError> {
        if buf.len() < HEADER_BYTES {
            return Ok(None);
        }
        let kind = buf[0];
        let id = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
        let len = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) as usize;
        let limit = match kind {
            K_DATA => MAX_DATA,
            K_HELLO..=K_CONTROL_REPLY => MAX_CONTROL,
            other => return Err(DecodeError::Kind(other)),
        };
        if len > limit {
            return Err(DecodeError::TooLong { kind, len });
        }
        if buf.len() < HEADER_BYTES + len {
            return Ok(None);
        }
        let payload = &buf[HEADER_BYTES..HEADER_BYTES + len];
        let empty = |f: Frame| {
            if payload.is_empty() {
                Ok(f)
            } else {
                Err(DecodeError::Malformed(kind))
            }
        };
        let frame = match kind {
            K_HELLO if payload == HELLO_MAGIC => Frame::Hello { session: id },
            K_HELLO => return Err(DecodeError::Malformed(kind)),
            K_OPEN => empty(Frame::Open { id })?,
            K_DATA => Frame::Data {
                id,
                data: payload.to_vec(),
            },
            K_CREDIT => match <[u8; 4]>::try_from(payload) {
                Ok(b) => Frame::Credit {
                    id,
                    bytes: u32::from_be_bytes(b),
                },
                Err(_) => return Err(DecodeError::Malformed(kind)),
            },
            K_CLOSE => empty(Frame::Close { id })?,
            K_RESET => empty(Frame::Reset { id })?,
            K_PING => empty(Frame::Ping { seq: id })?,
            K_PONG => empty(Frame::Pong { seq: id })?,
            K_CONTROL => Frame::Control {
                seq: id,
                body: payload.to_vec(),
            },
            _ => Frame::ControlReply {
                seq: id,
                body: payload.to_vec(),
            },
        };
        Ok(Some((frame, HEADER_BYTES + len)))
    }
}

fn push(out: &mut Vec<u8>, kind: u8, id: u32, payload: &[u8]) {
    out.push(kind);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
}

/// Position of the next [`Frame::Hello`] encoding in `buf` (any session), for a reader that
/// lost its place.
pub fn find_hello(buf: &[u8]) -> Option<usize> {
    let n = HEADER_BYTES + HELLO_MAGIC.len();
    buf.windows(n).position(|w| {
        w[0] == K_HELLO && w[5..9] == [0, 0, 0, 8] && &w[HEADER_BYTES..] == HELLO_MAGIC
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_frame() -> impl Strategy<Value = Frame> {
        let bytes = |n| proptest::collection::vec(any::<u8>(), 0..n);
        prop_oneof![
            any::<u32>().prop_map(|session| Frame::Hello { session }),
            any::<u32>().prop_map(|id| Frame::Open { id }),
            (any::<u32>(), bytes(MAX_DATA)).prop_map(|(id, data)| Frame::Data { id, data }),
            (any::<u32>(), any::<u32>()).prop_map(|(id, bytes)| Frame::Credit { id, bytes }),
            any::<u32>().prop_map(|id| Frame::Close { id }),
            any::<u32>().prop_map(|id| Frame::Reset { id }),
            any::<u32>().prop_map(|seq| Frame::Ping { seq }),
            any::<u32>().prop_map(|seq| Frame::Pong { seq }),
            (any::<u32>(), bytes(MAX_CONTROL)).prop_map(|(seq, body)| Frame::Control { seq, body }),
            (any::<u32>(), bytes(MAX_CONTROL))
                .prop_map(|(seq, body)| Frame::ControlReply { seq, body }),
        ]
    }

    proptest! {
        #[test]
        fn round_trips_whole_and_split(frames in proptest::collection::vec(any_frame(), 1..8), cut in any::<usize>()) {
            let mut buf = Vec::new();
            for f in &frames {
                f.encode(&mut buf);
            }
            // Every prefix shorter than a frame asks for more bytes.
            let cut = cut % buf.len();
            if let Some((_, used)) = Frame::decode(&buf[..cut]).expect("prefix") {
                prop_assert!(used <= cut);
            }
            let mut at = 0;
            for f in &frames {
                let (got, used) = Frame::decode(&buf[at..]).expect("valid").expect("complete");
                prop_assert_eq!(&got, f);
                at += used;
            }
            prop_assert_eq!(at, buf.len());
        }

        #[test]
        fn arbitrary_bytes_never_panic_or_overread(buf in proptest::collection::vec(any::<u8>(), 0..4096)) {
            match Frame::decode(&buf) {
                Ok(Some((_, used))) => prop_assert!(used <= buf.len()),
                Ok(None) => {
                    // Only a header that announces a legal length may ask for more.
                    if buf.len() >= HEADER_BYTES {
                        let len = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) as usize;
                        prop_assert!(len <= MAX_DATA);
                    }
                }
                Err(_) => {}
            }
        }
    }

    #[test]
    fn oversized_lengths_fail_on_the_header() {
        let mut h = vec![K_DATA, 0, 0, 0, 1];
        h.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            Frame::decode(&h),
            Err(DecodeError::TooLong { .. })
        ));
        let mut h = vec![K_PING, 0, 0, 0, 1];
        h.extend_from_slice(&2000u32.to_be_bytes());
        assert!(Frame::decode(&h).is_err());
    }

    #[test]
    fn finds_a_hello_after_garbage() {
        let mut buf = vec![0xff, 0x00, 0x13];
        Frame::Hello { session: 77 }.encode(&mut buf);
        assert_eq!(find_hello(&buf), Some(3));
        assert_eq!(find_hello(&buf[..5]), None);
    }
}
