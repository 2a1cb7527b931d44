//! The query strings of the file routes, and their conversion to the file services' arguments.
//!
//! A path comes as UTF-8 (`path`) or as base64 bytes (`path_b64`), exactly one;
//! [`guest_path`] decodes the pair. Each conversion destructures its query whole, so a new
//! query field has to be handed on (or refused) here.

#[cfg(doc)]
use cove_api_types::MAX_LIST_DEPTH;
use cove_control_plane::{
    guest_path, ListOptions, ReadOptions, SandboxPath, ServiceError, WatchOptions, WriteOptions,
};
use serde::Deserialize;

/// Query naming one path: `files:stat`, `files:exists`, `DELETE files`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct PathQuery {
    /// The path (UTF-8).
    pub path: Option<String>,
    /// The path as base64 bytes (instead of `path`).
    pub path_b64: Option<String>,
    /// Whose home resolves a relative path (default: the sandbox's user).
    pub user: Option<String>,
}

impl PathQuery {
    /// The decoded path and the user.
    pub(super) fn into_service(self) -> Result<(SandboxPath, Option<String>), ServiceError> {
        let Self {
            path,
            path_b64,
            user,
        } = self;
        Ok((guest_path("path", path, path_b64)?, user))
    }
}

/// Query of `files:list`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    /// Directory to list (UTF-8); a symlink to a directory is followed.
    pub path: Option<String>,
    /// The directory as base64 bytes (instead of `path`).
    pub path_b64: Option<String>,
    /// Whose home resolves a relative path (default: the sandbox's user).
    pub user: Option<String>,
    /// Levels to list: 1 (default) = the directory's own entries, n = n-1 levels below them
    /// too (1 to [`MAX_LIST_DEPTH`]).
    pub depth: Option<u32>,
}

impl ListQuery {
    /// The decoded path, the user and how to list.
    pub(super) fn into_service(
        self,
    ) -> Result<(SandboxPath, Option<String>, ListOptions), ServiceError> {
        let Self {
            path,
            path_b64,
            user,
            depth,
        } = self;
        Ok((
            guest_path("path", path, path_b64)?,
            user,
            ListOptions { depth },
        ))
    }
}

/// Query of `files:watch`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct WatchQuery {
    /// Directory to watch (UTF-8); a symlink to a directory is followed.
    pub path: Option<String>,
    /// The directory as base64 bytes (instead of `path`).
    pub path_b64: Option<String>,
    /// Whose home resolves a relative path (default: the sandbox's user).
    pub user: Option<String>,
    /// Watch every subdirectory too, including new ones (default false).
    pub recursive: Option<bool>,
}

impl WatchQuery {
    /// The decoded path, the user and how to watch.
    pub(super) fn into_service(
        self,
    ) -> Result<(SandboxPath, Option<String>, WatchOptions), ServiceError> {
        let Self {
            path,
            path_b64,
            user,
            recursive,
        } = self;
        Ok((
            guest_path("path", path, path_b64)?,
            user,
            WatchOptions {
                recursive: recursive.unwrap_or(false),
            },
        ))
    }
}

/// Query of `PUT /v1/sandboxes/{id}/files`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct WriteFileQuery {
    /// Destination path (UTF-8); relative paths are under the user's home.
    pub path: Option<String>,
    /// Destination path as base64 bytes (instead of `path`).
    pub path_b64: Option<String>,
    /// Owner of the file and of created parents (default: the sandbox's user).
    pub user: Option<String>,
    /// Permission bits: octal with a leading `0`/`0o` (`0755`) or decimal (`493`); default
    /// 0644, or the replaced file's mode.
    pub mode: Option<String>,
}

impl WriteFileQuery {
    /// The decoded path, the user and how to write.
    pub(super) fn into_service(
        self,
    ) -> Result<(SandboxPath, Option<String>, WriteOptions), ServiceError> {
        let Self {
            path,
            path_b64,
            user,
            mode,
        } = self;
        Ok((
            guest_path("path", path, path_b64)?,
            user,
            WriteOptions { mode },
        ))
    }
}

/// Query of `GET /v1/sandboxes/{id}/files`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadFileQuery {
    /// Path to read (UTF-8); symlinks are followed inside the sandbox.
    pub path: Option<String>,
    /// Path as base64 bytes (instead of `path`).
    pub path_b64: Option<String>,
    /// User whose home resolves a relative path (default: the sandbox's user).
    pub user: Option<String>,
    /// First byte to read (default 0).
    pub offset: Option<u64>,
    /// Bytes to read at most (default: to the end).
    pub length: Option<u64>,
}

impl ReadFileQuery {
    /// The decoded path, the user and which bytes to read.
    pub(super) fn into_service(
        self,
    ) -> Result<(SandboxPath, Option<String>, ReadOptions), ServiceError> {
        let Self {
            path,
            path_b64,
            user,
            offset,
            length,
        } = self;
        Ok((
            guest_path("path", path, path_b64)?,
            user,
            ReadOptions { offset, length },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_hand_on_every_field() {
        let (path, user, options) = ReadFileQuery {
            path: None,
            path_b64: Some("L3RtcC//".into()),
            user: Some("u".into()),
            offset: Some(3),
            length: Some(4),
        }
        .into_service()
        .expect("valid");
        assert_eq!(path.0, b"/tmp/\xff");
        assert_eq!(user.as_deref(), Some("u"));
        assert_eq!(
            options,
            ReadOptions {
                offset: Some(3),
                length: Some(4)
            }
        );
        let (_, _, w) = WatchQuery {
            path: Some("/d".into()),
            ..Default::default()
        }
        .into_service()
        .expect("valid");
        assert!(!w.recursive);
    }

    #[test]
    fn bad_paths_keep_their_errors() {
        let err = PathQuery {
            path_b64: Some("not base64!".into()),
            ..Default::default()
        }
        .into_service()
        .expect_err("refused");
        assert_eq!(err.code(), cove_api_types::ErrorCode::InvalidArgument);
        assert!(
            err.public_message().contains("path_b64"),
            "{}",
            err.public_message()
        );
        let err = ListQuery::default().into_service().expect_err("refused");
        assert!(
            err.public_message().contains("give path or path_b64"),
            "{}",
            err.public_message()
        );
    }
}
