//! `Attach`: stream a command's output from an offset.
//!
//! Frames go through the connection's bounded writer queue, so a slow reader slows this stream
//! down (the socket's flow control) instead of making the agent buffer. The first frame starts
//! exactly at the requested offset (clamped to the kept output), even inside a record; frames are
//! at most [`MAX_CHUNK_BYTES`] of one stream. Once every kept byte was sent: `Exited` if the
//! command has ended (whatever `follow` says), else `End` without `follow`, else wait for more.
//! A reader positioned in the dropped middle of a long output gets a `Gap` for the bytes it
//! cannot have and continues at the kept tail.

use std::sync::Arc;

use cove_guest_protocol::{Response, MAX_CHUNK_BYTES};

use crate::error::AgentError;
use crate::output_log::{Chunk, LogReader, Next};
use crate::responder::Responder;
use crate::state::Agent;

/// Streams the output of `command_id` to `r` until done or the connection closes.
pub async fn attach(
    agent: &Arc<Agent>,
    command_id: &str,
    offset: u64,
    follow: bool,
    r: &Responder,
) {
    let command = match agent.commands.get(command_id) {
        Ok(c) => c,
        Err(e) => {
            r.send(e.into_response()).await;
            return;
        }
    };
    let mut progress = command.progress.subscribe();
    let mut reader = LogReader::new(&command.log.lock(), offset);
    loop {
        let exited = *progress.borrow_and_update();
        loop {
            // The log's lock is released at the end of this statement.
            let next = reader.next(&command.log.lock(), MAX_CHUNK_BYTES);
            let chunk = match next {
                Next::Chunk(c) => c,
                Next::CaughtUp => break,
                Next::Gap { offset, len } => {
                    if !r.send(Response::Gap { offset, len }).await {
                        return;
                    }
                    continue;
                }
                Next::Spilled(s) => {
                    let result = tokio::task::spawn_blocking(move || {
                        let c = reader.read_spilled(s, MAX_CHUNK_BYTES);
                        (reader, c)
                    })
                    .await;
                    let Ok((back, c)) = result else { return };
                    reader = back;
                    match c {
                        Ok(c) => c,
                        Err(e) => {
                            let err = AgentError::internal(format!("reading kept output: {e}"));
                            r.send(err.into_response()).await;
                            return;
                        }
                    }
                }
            };
            if !send_chunk(r, chunk).await {
                return;
            }
        }
        if exited {
            r.send(Response::Exited(command.info())).await;
            return;
        }
        if !follow {
            r.send(Response::End).await;
            return;
        }
        tokio::select! {
            changed = progress.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = r.closed() => return,
        }
    }
}

async fn send_chunk(r: &Responder, chunk: Chunk) -> bool {
    r.send(Response::Output {
        offset: chunk.offset,
        stream: chunk.stream,
        data: chunk.data,
    })
    .await
}
