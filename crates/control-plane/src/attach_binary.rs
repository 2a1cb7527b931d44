//! A command's stdout as raw bytes: what the data plane serves to `Accept:
//! application/octet-stream` (no SSE framing, no base64).
//!
//! Offsets here count stdout bytes only (a client resumes with the number of bytes it already
//! holds), unlike the SSE stream's offsets into the combined output: the stream is read from the
//! start of the combined output, stderr is skipped, and the first `offset` stdout bytes are
//! dropped. A gap (the dropped middle of an output longer than the node's cap) makes later
//! stdout offsets unknowable, so the stream fails there. At most one binary stream per command
//! is open at a time (per control-plane process): a second is refused, since two readers of one
//! raw stream usually means a reconnect racing a connection that is not dead yet.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use parking_lot::Mutex;

use crate::attach::{OutputEvent, OutputSource};
use crate::{ControlPlane, ServiceError};

/// A command's stdout bytes; an error item ends the stream early (the node broke off, or a gap
/// in the kept output). A clean end means the command exited and every stdout byte was sent.
pub type StdoutStream = BoxStream<'static, Result<Bytes, ServiceError>>;

/// The commands that have a binary stream open.
#[derive(Debug, Default, Clone)]
pub(crate) struct BinaryStreams(Arc<Mutex<HashSet<String>>>);

/// Holds a command's binary-stream slot; frees it when dropped (the stream ended or the client
/// went away).
struct Slot {
    streams: BinaryStreams,
    cid: String,
}

impl BinaryStreams {
    fn claim(&self, cid: &str) -> Result<Slot, ServiceError> {
        let mut open = self.0.lock();
        if !open.insert(cid.to_string()) {
            return Err(ServiceError::FailedPrecondition(format!(
                "command {cid} already has a binary stream open: close it first (one at a time)"
            )));
        }
        Ok(Slot {
            streams: self.clone(),
            cid: cid.to_string(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.streams.0.lock();
        open.remove(&self.cid);
    }
}

impl ControlPlane {
    /// Streams the stdout of command `cid` of a running sandbox as raw bytes, from stdout byte
    /// `offset` (the count of stdout bytes the client already has), until the command exits.
    ///
    /// Errors: `failed_precondition` when the command already has a binary stream open; the
    /// errors of [`ControlPlane::attach_output`]. In the stream: the node's errors, and
    /// `failed_precondition` at a gap in the kept output.
    pub async fn attach_stdout(
        &self,
        sandbox_id: &str,
        cid: &str,
        offset: u64,
    ) -> Result<StdoutStream, ServiceError> {
        let slot = self.binary_streams().claim(cid)?;
        let events = self.attach_output(sandbox_id, cid, 0, true).await?;
        let state = Skip {
            events,
            skip: offset,
            _slot: slot,
            done: false,
        };
        Ok(futures::stream::unfold(state, |mut s| async move {
            let item = s.next().await?;
            Some((item, s))
        })
        .boxed())
    }
}

/// Reads output events, yielding stdout bytes past the first `skip`.
struct Skip {
    events: crate::attach::OutputStream,
    skip: u64,
    _slot: Slot,
    done: bool,
}

impl Skip {
    async fn next(&mut self) -> Option<Result<Bytes, ServiceError>> {
        while !self.done {
            match self.events.next().await? {
                Ok(OutputEvent::Output {
                    source: OutputSource::Stdout,
                    mut data,
                    ..
                }) => {
                    let drop = self.skip.min(data.len() as u64) as usize;
                    self.skip -= drop as u64;
                    let _ = data.split_to(drop);
                    if !data.is_empty() {
                        return Some(Ok(data));
                    }
                }
                Ok(OutputEvent::Output { .. }) => {}
                Ok(OutputEvent::Gap { offset, len }) => {
                    self.done = true;
                    return Some(Err(ServiceError::FailedPrecondition(format!(
                        "output bytes {offset}..{} were dropped (the output outgrew the \
                         node's cap): the raw stdout stream cannot continue past them; use \
                         the SSE stream",
                        offset + len
                    ))));
                }
                Ok(OutputEvent::Exited(_)) | Ok(OutputEvent::End) => self.done = true,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_slot_per_command_freed_on_drop() {
        let streams = BinaryStreams::default();
        let a = streams.claim("cmd-a").expect("first");
        assert!(matches!(
            streams.claim("cmd-a"),
            Err(ServiceError::FailedPrecondition(_))
        ));
        let _b = streams.claim("cmd-b").expect("another command");
        drop(a);
        streams.claim("cmd-a").expect("free again");
    }

    #[tokio::test]
    async fn stderr_is_skipped_and_the_offset_counts_stdout_bytes() {
        let out = |source, offset, data: &'static [u8]| {
            Ok(OutputEvent::Output {
                offset,
                source,
                data: Bytes::from_static(data),
            })
        };
        let events = futures::stream::iter(vec![
            out(OutputSource::Stdout, 0, b"abc"),
            out(OutputSource::Stderr, 3, b"ERR"),
            out(OutputSource::Stdout, 6, b"defg"),
            Ok(OutputEvent::End),
            out(OutputSource::Stdout, 10, b"never"),
        ])
        .boxed();
        let streams = BinaryStreams::default();
        let mut s = Skip {
            events,
            skip: 4,
            _slot: streams.claim("c").expect("slot"),
            done: false,
        };
        let mut got = Vec::new();
        while let Some(b) = s.next().await {
            got.extend_from_slice(&b.expect("bytes"));
        }
        assert_eq!(got, b"efg");
    }
}
