//! `Watch`: changes below a directory, streamed until the host closes the connection.
//!
//! The directory is watched with inotify ([`tree`]); raw events become protocol events
//! ([`events`]). After the watches are in place the agent answers `Ok`, then sends
//! `FileEvents` frames, each a batch of what the kernel had queued (bounded in size). A slow
//! host slows the reading; the kernel's queue then overflows and the host gets an `Overflow`
//! event instead of unbounded memory in the agent. When the host closes the connection the
//! inotify instance is closed, which frees every watch. At most [`MAX_WATCHES`] watches run at
//! once per sandbox (inotify instances are a per-user resource of the whole host).

// Registering the inotify descriptor with the reactor is `unsafe` (the caller vouches for the
// descriptor's lifetime).
#![allow(unsafe_code)]

pub mod events;
pub mod tree;

use std::sync::Arc;

use cove_guest_protocol::{ErrorCode, FileEvent, Response, WatchRequest};
use nix::errno::Errno;
use tokio::io::unix::AsyncFd;
use tokio::sync::Semaphore;
use tracing::debug;

use self::events::{translate, Flow};
use self::tree::Tree;
use super::path::resolve;
use crate::agent::Agent;
use crate::error::AgentError;
use crate::server::Responder;

/// Most watches running at once in one sandbox.
pub const MAX_WATCHES: usize = 32;
/// Most raw events gathered into one batch before it is sent.
const MAX_BATCH: usize = 4096;
/// Budget of one `FileEvents` frame, by estimate (well under the frame limit).
const FRAME_BUDGET: usize = 256 * 1024;

static RUNNING: Semaphore = Semaphore::const_new(MAX_WATCHES);

/// Serves one watch until the host goes away or the watched directory does.
pub async fn watch(agent: &Arc<Agent>, req: WatchRequest, r: &Responder) {
    let Ok(_permit) = RUNNING.try_acquire() else {
        let e = AgentError::new(
            ErrorCode::FailedPrecondition,
            format!("{MAX_WATCHES} watches already run in this sandbox; stop one first"),
        );
        r.send(e.into_response()).await;
        return;
    };
    let setup = super::blocking(agent, move |a| {
        let db = a.users.load();
        let user = db.resolve(req.user.as_deref())?;
        let root = resolve(&req.path, user.home_path())?;
        Tree::new(root, req.recursive)
    })
    .await;
    let tree = match setup {
        Ok(t) => t,
        Err(e) => {
            r.send(e.into_response()).await;
            return;
        }
    };
    // SAFETY: the descriptor is the tree's inotify instance, which the tree owns and closes only
    // when dropped; the `AsyncFd` owns the tree, so the descriptor stays open while registered.
    let mut afd = match unsafe { AsyncFd::register(tree) } {
        Ok(a) => a,
        Err(e) => {
            let e: std::io::Error = e.into();
            r.send(AgentError::io_plain("watch", &e).into_response())
                .await;
            return;
        }
    };
    if !r.send(Response::Ok).await {
        return;
    }
    let root = afd.get_ref().root().to_path_buf();
    debug!(path = %root.display(), dirs = afd.get_ref().len(), "watch started");
    loop {
        let mut guard = tokio::select! {
            g = afd.readable_mut() => match g {
                Ok(g) => g,
                Err(e) => {
                    r.send(AgentError::io_plain("watch", &e).into_response()).await;
                    return;
                }
            },
            _ = r.closed() => break,
        };
        let mut raw = Vec::new();
        loop {
            match guard.get_inner().read() {
                Ok(evs) => {
                    raw.extend(evs);
                    if raw.len() >= MAX_BATCH {
                        break;
                    }
                }
                Err(Errno::EAGAIN) => {
                    guard.clear_ready();
                    break;
                }
                Err(Errno::EINTR) => {}
                Err(e) => {
                    r.send(AgentError::io_plain("read inotify events", &e.into()).into_response())
                        .await;
                    return;
                }
            }
        }
        let mut out = Vec::new();
        let flow = translate(guard.get_inner_mut(), raw, &mut out);
        drop(guard);
        if !send(r, out).await {
            break;
        }
        if flow == Flow::RootGone {
            r.send(Response::End).await;
            break;
        }
    }
    debug!(path = %root.display(), "watch stopped");
}

/// Sends events in frames of bounded size; `false` when the host is gone.
async fn send(r: &Responder, events: Vec<FileEvent>) -> bool {
    let mut frame = Vec::new();
    let mut bytes = 0;
    for ev in events {
        let size = 32 + ev.path.0.len() + ev.from.as_ref().map_or(0, |f| f.0.len());
        if !frame.is_empty() && bytes + size > FRAME_BUDGET {
            if !r
                .send(Response::FileEvents(std::mem::take(&mut frame)))
                .await
            {
                return false;
            }
            bytes = 0;
        }
        bytes += size;
        frame.push(ev);
    }
    frame.is_empty() || r.send(Response::FileEvents(frame)).await
}

#[cfg(test)]
mod tests;
