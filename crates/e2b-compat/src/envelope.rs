//! Connect protocol envelopes: 1 byte of flags, a 4-byte big-endian length, then the payload
//! (here always UTF-8 JSON). Flag `0x02` marks the end-of-stream frame; `0x01` (compressed) is
//! refused, since compression is never negotiated.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Flags of an ordinary message.
pub const FLAG_MESSAGE: u8 = 0x00;
/// Flag bit of a compressed message (never negotiated, so refused).
pub const FLAG_COMPRESSED: u8 = 0x01;
/// Flag bit of the end-of-stream frame.
pub const FLAG_END_STREAM: u8 = 0x02;

/// Largest payload accepted in one envelope (4 MiB): stdin chunks and RPC requests are far
/// smaller; anything larger is refused rather than buffered.
pub const MAX_ENVELOPE_PAYLOAD: usize = 4 << 20;

/// One decoded envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// Its flags byte.
    pub flags: u8,
    /// Its payload.
    pub payload: Bytes,
}

impl Envelope {
    /// Whether this is the end-of-stream frame.
    pub fn is_end_stream(&self) -> bool {
        self.flags & FLAG_END_STREAM != 0
    }
}

/// Why bytes are not a valid envelope stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// The length field is larger than [`MAX_ENVELOPE_PAYLOAD`].
    #[error("envelope of {0} bytes is larger than the limit of {MAX_ENVELOPE_PAYLOAD} bytes")]
    TooLarge(usize),
    /// A flag other than end-of-stream is set (compression was not negotiated).
    #[error("envelope flags {0:#04x} are not supported (compression is not negotiated)")]
    BadFlags(u8),
    /// The stream ended in the middle of an envelope.
    #[error("the stream ended inside an envelope")]
    Truncated,
}

/// Encodes one envelope.
pub fn encode(flags: u8, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + payload.len());
    b.put_u8(flags);
    b.put_u32(payload.len().min(u32::MAX as usize) as u32);
    b.put_slice(payload);
    b.freeze()
}

/// Incremental decoder: feed it bytes as they arrive, take whole envelopes out.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: BytesMut,
}

impl Decoder {
    /// A decoder with nothing buffered.
    pub fn new() -> Self {
        Decoder::default()
    }

    /// Appends received bytes.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next whole envelope, `Ok(None)` when more bytes are needed. After an error the
    /// decoder's state is unspecified: stop reading.
    pub fn next_envelope(&mut self) -> Result<Option<Envelope>, EnvelopeError> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let flags = self.buf[0];
        if flags & !FLAG_END_STREAM != 0 {
            return Err(EnvelopeError::BadFlags(flags));
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > MAX_ENVELOPE_PAYLOAD {
            return Err(EnvelopeError::TooLarge(len));
        }
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        self.buf.advance(5);
        let payload = self.buf.split_to(len).freeze();
        Ok(Some(Envelope { flags, payload }))
    }

    /// Checks that the input ended on an envelope boundary.
    pub fn finish(&self) -> Result<(), EnvelopeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(EnvelopeError::Truncated)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_split_reads() {
        let mut wire = Vec::new();
        wire.extend_from_slice(&encode(FLAG_MESSAGE, br#"{"a":1}"#));
        wire.extend_from_slice(&encode(FLAG_END_STREAM, b"{}"));
        let mut d = Decoder::new();
        let mut got = Vec::new();
        for b in &wire {
            d.push(std::slice::from_ref(b));
            while let Some(e) = d.next_envelope().expect("valid") {
                got.push(e);
            }
        }
        d.finish().expect("boundary");
        assert_eq!(got.len(), 2);
        assert_eq!(&got[0].payload[..], br#"{"a":1}"#);
        assert!(!got[0].is_end_stream());
        assert!(got[1].is_end_stream());
    }

    #[test]
    fn refuses_compression_huge_lengths_and_truncation() {
        let mut d = Decoder::new();
        d.push(&[FLAG_COMPRESSED, 0, 0, 0, 1, b'x']);
        assert_eq!(d.next_envelope(), Err(EnvelopeError::BadFlags(1)));
        let mut d = Decoder::new();
        d.push(&[0, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(d.next_envelope(), Err(EnvelopeError::TooLarge(_))));
        let mut d = Decoder::new();
        d.push(&[0, 0, 0, 0, 3, b'a']);
        assert_eq!(d.next_envelope(), Ok(None));
        assert_eq!(d.finish(), Err(EnvelopeError::Truncated));
    }

    proptest! {
        /// Arbitrary bytes never panic the decoder, and every envelope it returns lies within
        /// the input and within the size limit.
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048),
                                       cut in 0usize..2048) {
            let mut d = Decoder::new();
            let cut = cut.min(data.len());
            let mut total = 0usize;
            for part in [&data[..cut], &data[cut..]] {
                d.push(part);
                while let Ok(Some(e)) = d.next_envelope() {
                    prop_assert!(e.payload.len() <= MAX_ENVELOPE_PAYLOAD);
                    total += 5 + e.payload.len();
                    prop_assert!(total <= data.len());
                }
            }
        }

        /// Any sequence of envelopes, encoded and cut into arbitrary pieces, decodes back to
        /// itself.
        #[test]
        fn encode_decode_round_trip(
            msgs in proptest::collection::vec(
                (prop_oneof![Just(FLAG_MESSAGE), Just(FLAG_END_STREAM)],
                 proptest::collection::vec(any::<u8>(), 0..300)), 0..8),
            chunk in 1usize..64,
        ) {
            let mut wire = Vec::new();
            for (f, p) in &msgs {
                wire.extend_from_slice(&encode(*f, p));
            }
            let mut d = Decoder::new();
            let mut got = Vec::new();
            for piece in wire.chunks(chunk) {
                d.push(piece);
                while let Some(e) = d.next_envelope().expect("valid stream") {
                    got.push((e.flags, e.payload.to_vec()));
                }
            }
            prop_assert!(d.finish().is_ok());
            prop_assert_eq!(got, msgs);
        }
    }
}
