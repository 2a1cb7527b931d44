//! `ReadFile`: `FileInfo`, then `Data` chunks of at most [`MAX_CHUNK_BYTES`], then `End`.
//!
//! Symlinks are followed (inside the sandbox). A directory or any other non-regular file is
//! `WrongType` (opening is non-blocking, so a FIFO cannot hang the agent). The file is read to
//! its end rather than to its size, so `/proc` files work; an empty file is `FileInfo` + `End`.
//! The file is opened as the user (`PermissionDenied` where the user may not read it); Cove's
//! own paths are refused.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cove_guest_protocol::{ErrorCode, FileInfo, GuestPath, Response, MAX_CHUNK_BYTES};

use super::info::file_info;
use super::path::display;
use super::Actor;
use crate::error::AgentError;
use crate::responder::Responder;
use crate::state::Agent;

/// Streams a file to `r`.
pub async fn read_file(
    agent: &Arc<Agent>,
    path: GuestPath,
    user: Option<String>,
    offset: u64,
    length: Option<u64>,
    r: &Responder,
) {
    let agent = agent.clone();
    let r2 = r.clone();
    let done = tokio::task::spawn_blocking(move || match open(&agent, &path, user.as_deref()) {
        Ok((file, info, path)) => {
            if r2.blocking_send(Response::FileInfo(info)) {
                stream(file, &path, offset, length, &r2);
            }
        }
        Err(e) => {
            r2.blocking_send(e.into_response());
        }
    })
    .await;
    if let Err(e) = done {
        r.send(AgentError::internal(format!("read task failed: {e}")).into_response())
            .await;
    }
}

fn open(
    agent: &Agent,
    path: &GuestPath,
    user: Option<&str>,
) -> Result<(File, FileInfo, PathBuf), AgentError> {
    let actor = Actor::of(agent, user)?;
    let path = actor.path(path)?;
    agent.reserved.check(&path, true)?;
    let as_user = actor.assume()?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(&path)
        .map_err(|e| AgentError::io("open", &path, &e))?;
    let meta = file
        .metadata()
        .map_err(|e| AgentError::io("stat", &path, &e))?;
    if meta.is_dir() {
        return Err(AgentError::new(
            ErrorCode::WrongType,
            format!("{} is a directory", display(&path)),
        ));
    }
    if !meta.is_file() {
        return Err(AgentError::new(
            ErrorCode::WrongType,
            format!("{} is not a regular file", display(&path)),
        ));
    }
    let mut info = file_info(&path, &meta, &actor.db);
    if let Ok(l) = fs::symlink_metadata(&path) {
        if l.file_type().is_symlink() {
            info.symlink_target = fs::read_link(&path).ok().map(|t| super::path::to_guest(&t));
        }
    }
    // Reading an open descriptor needs no further permission.
    drop(as_user);
    Ok((file, info, path))
}

/// Sends the bytes `[offset, offset + length)` as `Data` frames, then `End` (or an error).
fn stream(mut file: File, path: &Path, offset: u64, length: Option<u64>, r: &Responder) {
    let result = (|| -> io::Result<bool> {
        if offset > 0 {
            file.seek(SeekFrom::Start(offset))?;
        }
        let mut left = length.unwrap_or(u64::MAX);
        while left > 0 {
            let want = left.min(MAX_CHUNK_BYTES as u64) as usize;
            let mut buf = vec![0u8; want];
            let mut filled = 0;
            while filled < want {
                match file.read(&mut buf[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if filled == 0 {
                break;
            }
            buf.truncate(filled);
            left -= filled as u64;
            if !r.blocking_send(Response::Data { data: buf }) {
                return Ok(false);
            }
            if filled < want {
                break;
            }
        }
        Ok(true)
    })();
    match result {
        Ok(true) => {
            r.blocking_send(Response::End);
        }
        Ok(false) => {}
        Err(e) => {
            r.blocking_send(AgentError::io("read", path, &e).into_response());
        }
    }
}
