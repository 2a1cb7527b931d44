//! `Watch`: changes below a directory, streamed until the host closes the connection.
//!
//! The directory is watched with inotify ([`tree`]); raw events become protocol events
//! ([`events`]). After the watches are in place the agent answers `Ok`, then sends
//! `FileEvents` frames, each a batch of what the kernel had queued (bounded in size). A slow
//! host slows the reading; the kernel's queue then overflows and the host gets an `Overflow`
//! event instead of unbounded memory in the agent. When the host closes the connection the
//! inotify instance is closed, which frees every watch. At most [`MAX_WATCHES`] watches run at
//! once per sandbox (inotify instances are a per-user resource of the whole host).
//!
//! Watches are set up as the user (who needs read permission on every watched directory; a
//! subdirectory the user cannot read is not watched), and Cove's own paths are neither watched
//! nor reported.

// Registering the inotify descriptor with the reactor is `unsafe` (the caller vouches for the
// descriptor's lifetime).
#![allow(unsafe_code)]

pub mod events;
pub mod tree;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cove_guest_protocol::{ErrorCode, FileEvent, Response, WatchRequest};
use nix::errno::Errno;
use tokio::io::unix::AsyncFd;
use tokio::sync::Semaphore;
use tracing::debug;

use self::events::{translate, Flow};
use self::tree::Tree;
use super::Actor;
use crate::error::AgentError;
use crate::responder::Responder;
use crate::state::Agent;

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
        let actor = Actor::of(a, req.user.as_deref())?;
        let root = actor.path(&req.path)?;
        a.reserved.check(&root, true)?;
        let hidden = hidden_below(a, &root);
        let _as_user = actor.assume()?;
        Ok((Tree::new(root, req.recursive, hidden)?, actor))
    })
    .await;
    let (tree, actor) = match setup {
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
        let translated = translate_as(&actor, guard.get_inner_mut(), raw, &mut out);
        let tree = guard.get_inner();
        out.retain(|ev| !tree.hides(Path::new(OsStr::from_bytes(&ev.path.0))));
        drop(guard);
        let flow = match translated {
            Ok(flow) => flow,
            Err(e) => {
                r.send(e.into_response()).await;
                return;
            }
        };
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

/// [`translate`] as the user: new directories are watched with the user's permissions. The
/// identity belongs to this (worker) thread only until it returns, before anything awaits.
fn translate_as(
    actor: &Actor,
    tree: &mut Tree,
    raw: Vec<nix::sys::inotify::InotifyEvent>,
    out: &mut Vec<FileEvent>,
) -> Result<Flow, AgentError> {
    let _as_user = actor.assume()?;
    Ok(translate(tree, raw, out))
}

/// Cove's paths below `root`, as paths under `root` (which may be reached through symlinks).
fn hidden_below(agent: &Agent, root: &Path) -> Vec<PathBuf> {
    let real_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    agent
        .reserved
        .roots()
        .iter()
        .filter_map(|r| r.strip_prefix(&real_root).ok())
        .map(|rest| root.join(rest))
        .collect()
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
