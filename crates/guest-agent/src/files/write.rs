//! `WriteFile`: an atomic upload.
//!
//! The bytes go to a new temporary file in the destination's directory (`O_EXCL`, random name),
//! which is synced, given to its owner (`fchown`), given its mode (the request's, else the
//! replaced file's, else 0644) and renamed over the destination; the directory is then synced.
//! Missing parents are created owned by the user.
//!
//! Everything runs as the user (see [`super::identity`]): replacing a file needs write
//! permission on it (and, for the atomic rename, on its directory), creating one needs write
//! permission on the directory; otherwise `PermissionDenied` and nothing changed. A file a
//! non-root user replaces keeps its owner and group (its set-id bits are dropped, as a write by
//! that user would drop them); a new file, and any file root writes, belongs to the request's
//! user. Cove's own paths are refused, and so are pseudo-filesystems (`InvalidArgument`). On any error, an upload beyond `max_bytes`, or a host
//! that goes away before `DataEnd`, the temporary file is removed and the old file is untouched.
//!
//! A destination that is a symlink to an existing regular file is written through (the link
//! stays); any other symlink is replaced by the new file.
//!
//! An upload never takes a filesystem's last [`MIN_FREE_BYTES`]: one that starts with less
//! free is `NoSpace` at once. A disk filled by the sandbox's own processes thus refuses uploads
//! clearly (filesystems keep some slack after a writer hit `ENOSPC`, which a small file would
//! otherwise take), and the space left stays for the sandbox to recover with. Running out in the
//! middle is `NoSpace` too, with the temporary file removed.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use cove_guest_protocol::{ErrorCode, FileInfo, Response, WriteFileRequest};
use tokio::sync::mpsc;

use super::identity::Identity;
use super::info::lstat_info;
use super::mkdir::create_dirs;
use super::path::display;
use super::{pseudo, Actor};
use crate::error::describe;
use crate::error::AgentError;
use crate::responder::Responder;
use crate::state::Agent;

/// Free bytes an upload leaves on the destination's filesystem at the least (1 MiB).
pub const MIN_FREE_BYTES: u64 = 1 << 20;

/// A frame of an upload, routed from the connection.
#[derive(Debug)]
pub enum Upload {
    /// Bytes.
    Data(Vec<u8>),
    /// The last frame.
    End,
}

/// How the upload ended without a file.
enum Failed {
    /// Answer this error.
    Error(AgentError),
    /// The host went away: nobody to answer.
    Abandoned,
}

impl From<AgentError> for Failed {
    fn from(e: AgentError) -> Self {
        Failed::Error(e)
    }
}

/// Receives an upload and answers `FileInfo` or an error.
pub async fn write_file(
    agent: &Arc<Agent>,
    req: WriteFileRequest,
    rx: mpsc::Receiver<Upload>,
    r: &Responder,
) {
    let agent = agent.clone();
    let result = tokio::task::spawn_blocking(move || write_blocking(&agent, req, rx)).await;
    let response = match result {
        Ok(Ok(info)) => Response::FileInfo(info),
        Ok(Err(Failed::Error(e))) => e.into_response(),
        Ok(Err(Failed::Abandoned)) => return,
        Err(e) => AgentError::internal(format!("upload task failed: {e}")).into_response(),
    };
    r.send(response).await;
}

/// Removes the temporary file unless the upload completed.
struct TempFile {
    path: PathBuf,
    keep: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_file(&self.path);
        }
    }
}

fn write_blocking(
    agent: &Agent,
    req: WriteFileRequest,
    mut rx: mpsc::Receiver<Upload>,
) -> Result<FileInfo, Failed> {
    let actor = Actor::of(agent, req.user.as_deref())?;
    let mut target = actor.path(&req.path)?;
    if let Ok(m) = fs::symlink_metadata(&target) {
        if m.file_type().is_symlink() {
            if let Ok(real) = fs::canonicalize(&target) {
                if real.is_file() {
                    target = real;
                }
            }
        }
    }
    let (Some(dir), Some(_)) = (target.parent(), target.file_name()) else {
        return Err(AgentError::new(ErrorCode::WrongType, "/ is a directory").into());
    };
    agent.reserved.check(&target, false)?;
    pseudo::check_writable(&target)?;
    let as_user = actor.assume()?;
    create_dirs(dir, &actor.user)?;
    let old = match fs::metadata(&target) {
        Ok(m) if m.is_dir() => {
            return Err(AgentError::new(
                ErrorCode::WrongType,
                format!("{} is a directory", display(&target)),
            )
            .into())
        }
        Ok(m) => {
            if m.is_file() {
                check_writable(&target)?;
            }
            Some(m)
        }
        Err(_) => None,
    };
    let owner = Owner::of(&actor, &as_user, old.as_ref());
    let old_mode = old.as_ref().map(|m| m.mode() & 0o7777);
    let mode = owner.mode(req.mode.map(|m| m & 0o7777).or(old_mode).unwrap_or(0o644));
    check_free_space(dir, &target)?;

    let (mut file, mut temp) = create_temp(dir).map_err(|mut e| {
        if e.code == ErrorCode::PermissionDenied && old.is_some() {
            e.message = format!(
                "{}: replacing {} needs write permission on its directory too (uploads replace \
                 files atomically)",
                e.message,
                display(&target)
            );
        }
        e
    })?;
    let io_err = |what: &str, e: &std::io::Error| AgentError::io(what, &target, e);
    let mut total: u64 = 0;
    loop {
        match rx.blocking_recv() {
            Some(Upload::Data(data)) => {
                total += data.len() as u64;
                if let Some(max) = req.max_bytes {
                    if total > max {
                        return Err(AgentError::new(
                            ErrorCode::TooLarge,
                            format!("upload to {} exceeds {max} bytes", display(&target)),
                        )
                        .into());
                    }
                }
                file.write_all(&data).map_err(|e| io_err("write", &e))?;
            }
            Some(Upload::End) => break,
            None => return Err(Failed::Abandoned),
        }
    }
    file.sync_all().map_err(|e| io_err("sync", &e))?;
    // Ownership and mode go through the open descriptor; giving the file to another owner (the
    // replaced file's) takes the agent's own rights.
    let give = || {
        std::os::unix::fs::fchown(&file, Some(owner.uid), Some(owner.gid))
            .map_err(|e| io_err("chown", &e))?;
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| io_err("chmod", &e))
    };
    if owner.foreign {
        as_user.as_agent(give)??;
    } else {
        give()?;
    }
    drop(file);
    fs::rename(&temp.path, &target).map_err(|e| io_err("rename", &e))?;
    temp.keep = true;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(lstat_info(&target, &actor.db)?)
}

/// Who owns the written file.
struct Owner {
    uid: u32,
    gid: u32,
    /// Owned by someone else than the (non-root) writer: the replaced file's owner.
    foreign: bool,
}

impl Owner {
    /// A replaced file keeps its owner when a non-root user writes it (as writing it in place
    /// would); root's files and new files belong to the request's user.
    fn of(actor: &Actor, identity: &Identity, old: Option<&fs::Metadata>) -> Owner {
        let user = &actor.user;
        match old {
            Some(m) if identity.is_switched() && (m.uid(), m.gid()) != (user.uid, user.gid) => {
                Owner {
                    uid: m.uid(),
                    gid: m.gid(),
                    foreign: true,
                }
            }
            _ => Owner {
                uid: user.uid,
                gid: user.gid,
                foreign: false,
            },
        }
    }

    /// The mode to give: set-user-id and set-group-id bits are dropped from a file that stays
    /// another owner's, as the kernel drops them when a non-root user writes such a file.
    fn mode(&self, mode: u32) -> u32 {
        if self.foreign {
            mode & !(libc::S_ISUID | libc::S_ISGID)
        } else {
            mode
        }
    }
}

/// `PermissionDenied` unless the calling thread's identity may write the existing file `path`
/// (opened for writing, not truncated; non-blocking so nothing waits).
fn check_writable(path: &Path) -> Result<(), AgentError> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map(drop)
        .map_err(|e| AgentError::io("open for writing", path, &e))
}

/// `NoSpace` when `dir`'s filesystem has less than [`MIN_FREE_BYTES`] available.
fn check_free_space(dir: &Path, target: &Path) -> Result<(), AgentError> {
    let Ok(st) = nix::sys::statvfs::statvfs(dir) else {
        // Nothing known: the write itself will tell.
        return Ok(());
    };
    let free = st.blocks_available().saturating_mul(st.fragment_size());
    if free >= MIN_FREE_BYTES {
        return Ok(());
    }
    Err(AgentError::new(
        ErrorCode::NoSpace,
        format!(
            "write {}: {} ({} KiB free; uploads leave at least {} KiB free)",
            display(target),
            describe(&std::io::Error::from_raw_os_error(libc::ENOSPC)),
            free / 1024,
            MIN_FREE_BYTES / 1024
        ),
    ))
}

/// A new, empty temporary file in `dir`.
fn create_temp(dir: &Path) -> Result<(File, TempFile), AgentError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut last = None;
    for _ in 0..16 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(
            ".cove-upload-{:x}-{:x}-{n:x}",
            std::process::id(),
            nanos
        ));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(f) => return Ok((f, TempFile { path, keep: false })),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(AgentError::io("create a temporary file in", dir, &e)),
        }
    }
    let e = last.unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::EEXIST));
    Err(AgentError::io("create a temporary file in", dir, &e))
}
