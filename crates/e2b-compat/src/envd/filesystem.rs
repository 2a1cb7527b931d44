//! `filesystem.Filesystem` unary RPCs (stat, make_dir, move, list, remove) over Cove's file
//! services, with envd's path rules ([`super::paths`]) and `EntryInfo` shapes: permission bits
//! only in `mode`, an `ls`-style `permissions`, a symlink described by its target's type with
//! `symlinkTarget` resolved to an absolute path, and a file's user metadata (its `user.e2b.*`
//! extended attributes, set by uploads, see [`super::files`]) in `metadata` for stat, list and
//! move.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use cove_api_types::{FileInfo, FileType, MakeDirRequest, MoveRequest as CoveMove};
use cove_control_plane::{ListOptions, SandboxPath, ServiceError};

use super::paths::{clean, parent, resolve};
use super::{basic_user, unary_request, unary_response};
use crate::dispatch::Target;
use crate::error::{ConnectCode, ConnectError};
use crate::model::envd::{
    Empty, EntryInfo, EntryResponse, ListDirRequest, ListDirResponse, MoveRequest, PathRequest,
};
use crate::E2b;

/// The user a call acts as, and a path resolved for that user.
pub(crate) fn user_and_path(
    t: &Target,
    headers: &HeaderMap,
    path: &str,
) -> Result<(String, String), ConnectError> {
    let user = basic_user(headers)?.unwrap_or_else(|| t.default_user.clone());
    let path = resolve(path, &user)?;
    Ok((user, path))
}

fn file_error(e: ServiceError, path: &str) -> ConnectError {
    match e {
        ServiceError::FileNotFound(_) => ConnectError::new(
            ConnectCode::NotFound,
            format!("path '{path}' does not exist"),
        ),
        other => other.into(),
    }
}

/// The extended-attribute namespace that holds E2B's file metadata.
pub const METADATA_NAMESPACE: &str = "user.e2b.";

/// `lstat` through Cove, as an envd entry (a symlink is described by its target).
pub(crate) async fn entry(
    e2b: &E2b,
    t: &Target,
    user: &str,
    path: &str,
) -> Result<EntryInfo, ConnectError> {
    let info = lstat(e2b, t, user, path).await?;
    Ok(to_entry(e2b, t, user, info, None).await)
}

pub(crate) async fn lstat(
    e2b: &E2b,
    t: &Target,
    user: &str,
    path: &str,
) -> Result<FileInfo, ConnectError> {
    e2b.cp
        .stat_file(
            &t.cove_id,
            SandboxPath(path.as_bytes().to_vec()),
            Some(user.to_string()),
        )
        .await
        .map_err(|e| file_error(e, path))
}

/// An envd entry of Cove's metadata; `shown_path` replaces the path (listings keep the path
/// under the directory as asked).
pub(crate) async fn to_entry(
    e2b: &E2b,
    t: &Target,
    user: &str,
    info: FileInfo,
    shown_path: Option<String>,
) -> EntryInfo {
    let path = shown_path.unwrap_or_else(|| info.path.clone());
    let mut kind = info.file_type;
    let mut mode = info.mode;
    let mut symlink_target = None;
    let is_symlink = info.file_type == FileType::Symlink;
    if is_symlink {
        let target = info.symlink_target.clone().unwrap_or_default();
        let abs = if target.starts_with('/') {
            clean(&target)
        } else {
            clean(&format!("{}/{target}", parent(&info.path)))
        };
        match lstat(e2b, t, user, &abs).await {
            Ok(ti) => {
                kind = ti.file_type;
                mode = ti.mode;
            }
            Err(_) => kind = FileType::Other,
        }
        symlink_target = Some(abs);
    }
    EntryInfo {
        name: info.name,
        file_type: match kind {
            FileType::File => "FILE_TYPE_FILE",
            FileType::Dir => "FILE_TYPE_DIRECTORY",
            FileType::Symlink | FileType::Other => "FILE_TYPE_UNSPECIFIED",
        },
        path,
        size: info.size,
        mode: mode & 0o777,
        permissions: permissions(kind, mode),
        owner: info.owner,
        group: info.group,
        modified_time: info
            .mtime
            .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        symlink_target,
        is_symlink,
        metadata: BTreeMap::new(),
    }
}

/// Fills in the metadata (`user.e2b.*` extended attributes) of regular files among `entries`,
/// read as `user` in one batch. A sandbox that cannot read them (an agent or node that predates
/// them) has none to show, since none could have been written.
pub(crate) async fn add_metadata(e2b: &E2b, t: &Target, user: &str, entries: &mut [EntryInfo]) {
    let wanted: Vec<usize> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.file_type == "FILE_TYPE_FILE" && e.symlink_target.is_none())
        .map(|(i, _)| i)
        .collect();
    if wanted.is_empty() {
        return;
    }
    let paths = wanted.iter().map(|&i| entries[i].path.clone()).collect();
    match e2b
        .cp
        .file_xattrs(
            &t.cove_id,
            paths,
            Some(user.to_string()),
            METADATA_NAMESPACE,
        )
        .await
    {
        Ok(maps) => {
            for (i, m) in wanted.into_iter().zip(maps) {
                entries[i].metadata = m
                    .into_iter()
                    .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
                    .collect();
            }
        }
        Err(e) => {
            tracing::debug!(sandbox_id = %t.cove_id, error = %e, "no file metadata");
        }
    }
}

/// Go's `FileMode.String()` for a file type and permission bits.
pub fn permissions(kind: FileType, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(match kind {
        FileType::Dir => 'd',
        FileType::Symlink => 'L',
        _ => '-',
    });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// `POST /filesystem.Filesystem/Stat`.
pub async fn stat(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let run = async {
        let req: PathRequest = unary_request(&body)?;
        let (user, path) = user_and_path(&t, &headers, &req.path)?;
        let mut entry = [entry(&e2b, &t, &user, &path).await?];
        add_metadata(&e2b, &t, &user, &mut entry).await;
        let [entry] = entry;
        Ok::<_, ConnectError>(unary_response(&EntryResponse { entry }))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /filesystem.Filesystem/MakeDir`: `mkdir -p`; an existing directory is
/// `already_exists`, an existing file `invalid_argument`.
pub async fn make_dir(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let run = async {
        let req: PathRequest = unary_request(&body)?;
        let (user, path) = user_and_path(&t, &headers, &req.path)?;
        match lstat(&e2b, &t, &user, &path).await {
            Ok(i) if i.file_type == FileType::Dir => {
                return Err(ConnectError::new(
                    ConnectCode::AlreadyExists,
                    format!("directory '{path}' already exists"),
                ))
            }
            Ok(_) => {
                return Err(ConnectError::new(
                    ConnectCode::InvalidArgument,
                    format!("path '{path}' already exists and is not a directory"),
                ))
            }
            Err(_) => {}
        }
        let info = e2b
            .cp
            .make_dir(
                &t.cove_id,
                MakeDirRequest {
                    path: Some(path.clone()),
                    path_b64: None,
                    user: Some(user.clone()),
                },
            )
            .await
            .map_err(|e| file_error(e, &path))?;
        let entry = to_entry(&e2b, &t, &user, info, None).await;
        Ok::<_, ConnectError>(unary_response(&EntryResponse { entry }))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /filesystem.Filesystem/Move`.
pub async fn rename(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let run = async {
        let req: MoveRequest = unary_request(&body)?;
        let (user, from) = user_and_path(&t, &headers, &req.source)?;
        let (_, to) = user_and_path(&t, &headers, &req.destination)?;
        let info = e2b
            .cp
            .move_file(
                &t.cove_id,
                CoveMove {
                    from: Some(from.clone()),
                    from_b64: None,
                    to: Some(to),
                    to_b64: None,
                    user: Some(user.clone()),
                },
            )
            .await
            .map_err(|e| file_error(e, &from))?;
        let mut entry = [to_entry(&e2b, &t, &user, info, None).await];
        add_metadata(&e2b, &t, &user, &mut entry).await;
        let [entry] = entry;
        Ok::<_, ConnectError>(unary_response(&EntryResponse { entry }))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /filesystem.Filesystem/ListDir`: `depth` levels (0 = 1), entries under the path as
/// asked; a file is `invalid_argument`.
pub async fn list_dir(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let run = async {
        let req: ListDirRequest = unary_request(&body)?;
        let (user, path) = user_and_path(&t, &headers, &req.path)?;
        let depth = req.depth.max(1);
        let list = e2b
            .cp
            .list_files(
                &t.cove_id,
                SandboxPath(path.clone().into_bytes()),
                Some(user.clone()),
                ListOptions {
                    depth: Some(depth.min(cove_api_types::MAX_LIST_DEPTH)),
                },
            )
            .await
            .map_err(|e| match e {
                ServiceError::Invalid(_) => ConnectError::new(
                    ConnectCode::InvalidArgument,
                    format!("path '{path}' is not a directory"),
                ),
                other => file_error(other, &path),
            })?;
        let mut entries = Vec::with_capacity(list.entries.len());
        for info in list.entries {
            entries.push(to_entry(&e2b, &t, &user, info, None).await);
        }
        add_metadata(&e2b, &t, &user, &mut entries).await;
        Ok::<_, ConnectError>(unary_response(&ListDirResponse { entries }))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /filesystem.Filesystem/Remove`: `rm -rf`; a missing path is fine.
pub async fn remove(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let run = async {
        let req: PathRequest = unary_request(&body)?;
        let (user, path) = user_and_path(&t, &headers, &req.path)?;
        let target = SandboxPath(path.clone().into_bytes());
        match e2b.cp.remove_file(&t.cove_id, target, Some(user)).await {
            Ok(()) | Err(ServiceError::FileNotFound(_)) => Ok(unary_response(&Empty {})),
            Err(e) => Err(file_error(e, &path)),
        }
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_read_like_ls() {
        assert_eq!(permissions(FileType::File, 0o644), "-rw-r--r--");
        assert_eq!(permissions(FileType::Dir, 0o755), "drwxr-xr-x");
        assert_eq!(permissions(FileType::File, 0o4755), "-rwxr-xr-x");
    }
}
