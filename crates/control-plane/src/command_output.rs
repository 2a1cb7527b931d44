//! A command's output collected into one answer (the buffered alternative to streaming it):
//! `GET /v1/sandboxes/{id}/commands/{cid}/output`.
//!
//! The answer holds at most `max_bytes` of output. A longer output, or one whose middle the
//! guest dropped, is answered with its head (from offset 0, about half the budget) and its tail
//! (the rest of the budget, ending at the last byte), and `omitted` names the combined-output
//! range in between. Reading stops at what the guest keeps when the answer is made (a command
//! still running after `wait` is answered with its output so far).

use std::time::Duration;

use base64::Engine as _;
use cove_api_types::{CommandOutput, OmittedOutput};
use cove_node_api::{AttachEvent, OutputStream};
use futures::StreamExt;

use crate::error::from_node;
use crate::{ControlPlane, ServiceError};

/// Default output budget of one answer (1 MiB).
pub const DEFAULT_OUTPUT_ANSWER_BYTES: u64 = 1 << 20;
/// Largest output budget of one answer (16 MiB).
pub const MAX_OUTPUT_ANSWER_BYTES: u64 = 16 << 20;

/// Output read from one position: per-stream bytes, where reading stopped, what was seen.
#[derive(Default)]
struct Read {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// Offset of the first byte read (`None` when nothing was read).
    first: Option<u64>,
    /// Offset after the last byte read or gap skipped.
    end: u64,
    /// A gap cut the reading short (head reading stops there).
    hit_gap: bool,
    /// The guest has nothing more (end of kept output).
    exhausted: bool,
}

impl Read {
    fn bytes(&self) -> u64 {
        (self.stdout.len() + self.stderr.len()) as u64
    }
}

impl ControlPlane {
    /// Waits up to `wait` (at most 60 s) for the command to end, then answers with its output
    /// within `max_bytes` (default 1 MiB, at most 16 MiB).
    pub async fn command_output(
        &self,
        sandbox_id: &str,
        cid: &str,
        wait: Option<Duration>,
        max_bytes: Option<u64>,
    ) -> Result<CommandOutput, ServiceError> {
        let budget = max_bytes.unwrap_or(DEFAULT_OUTPUT_ANSWER_BYTES);
        if budget == 0 || budget > MAX_OUTPUT_ANSWER_BYTES {
            return Err(cove_domain::InvalidInput::new(
                "max_bytes",
                format!("must be between 1 and {MAX_OUTPUT_ANSWER_BYTES}"),
            )
            .into());
        }
        let command = self.get_command(sandbox_id, cid, wait).await?;
        let total = command.output_bytes;
        let head_limit = if total <= budget { budget } else { budget / 2 };
        let head = self
            .read_output(sandbox_id, cid, 0, head_limit, true)
            .await?;
        let mut stdout = head.stdout.clone();
        let mut stderr = head.stderr.clone();
        let mut omitted = None;
        if !head.exhausted || head.hit_gap {
            let tail_budget = budget - head.bytes();
            let tail_start = total.saturating_sub(tail_budget).max(head.end);
            let tail = self
                .read_output(sandbox_id, cid, tail_start, tail_budget, false)
                .await?;
            let resumed_at = tail.first.unwrap_or(tail.end);
            if resumed_at > head.end {
                omitted = Some(OmittedOutput {
                    offset: head.end,
                    len: resumed_at - head.end,
                    stdout_at: head.stdout.len() as u64,
                    stderr_at: head.stderr.len() as u64,
                });
            }
            stdout.extend_from_slice(&tail.stdout);
            stderr.extend_from_slice(&tail.stderr);
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        Ok(CommandOutput {
            truncated: omitted.is_some(),
            command,
            stdout: b64.encode(&stdout),
            stderr: b64.encode(&stderr),
            omitted,
        })
    }

    /// Reads kept output from `offset` until `limit` bytes, the end of what is kept, or (when
    /// `stop_at_gap`) a gap.
    async fn read_output(
        &self,
        sandbox_id: &str,
        cid: &str,
        offset: u64,
        limit: u64,
        stop_at_gap: bool,
    ) -> Result<Read, ServiceError> {
        let mut events = self
            .node()
            .attach(sandbox_id, cid, offset, false)
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        let mut read = Read {
            end: offset,
            ..Read::default()
        };
        while let Some(event) = events.next().await {
            match event.map_err(|e| from_node(e, sandbox_id))? {
                AttachEvent::Output {
                    offset,
                    stream,
                    data,
                } => {
                    let room = usize::try_from(limit - read.bytes()).unwrap_or(usize::MAX);
                    let data = &data[..data.len().min(room)];
                    read.first.get_or_insert(offset);
                    read.end = offset + data.len() as u64;
                    match stream {
                        OutputStream::Stdout => read.stdout.extend_from_slice(data),
                        OutputStream::Stderr => read.stderr.extend_from_slice(data),
                    }
                    if read.bytes() >= limit {
                        return Ok(read);
                    }
                }
                AttachEvent::Gap { offset, len } => {
                    if stop_at_gap {
                        read.end = offset;
                        read.hit_gap = true;
                        return Ok(read);
                    }
                    read.end = offset + len;
                }
                AttachEvent::Exited(_) | AttachEvent::End => {
                    read.exhausted = true;
                    return Ok(read);
                }
            }
        }
        read.exhausted = true;
        Ok(read)
    }
}
