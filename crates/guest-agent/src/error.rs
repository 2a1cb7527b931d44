//! The one error type of request handlers: a protocol [`ErrorCode`] and a message for the host.

use std::fmt;
use std::io;
use std::path::Path;

use cove_guest_protocol::{ErrorCode, Response};

/// A failed request, as it goes on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentError {
    /// Stable code.
    pub code: ErrorCode,
    /// Detail for the host; names sandbox paths only.
    pub message: String,
}

impl AgentError {
    /// An error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// `InvalidArgument`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    /// `NotFound`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// `FailedPrecondition`.
    pub fn precondition(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::FailedPrecondition, message)
    }

    /// `Internal`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// An I/O failure of `what` (e.g. "open") on `path`, with its errno mapped to a code.
    pub fn io(what: &str, path: &Path, err: &io::Error) -> Self {
        Self::new(
            code_for_io(err),
            format!("{what} {}: {}", path.display(), describe(err)),
        )
    }

    /// An I/O failure without a path.
    pub fn io_plain(what: &str, err: &io::Error) -> Self {
        Self::new(code_for_io(err), format!("{what}: {}", describe(err)))
    }

    /// The wire form.
    pub fn into_response(self) -> Response {
        Response::Error {
            code: self.code,
            message: self.message,
        }
    }
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl std::error::Error for AgentError {}

/// The errno's text without Rust's " (os error N)" suffix.
pub fn describe(err: &io::Error) -> String {
    let text = err.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Maps an I/O error to a protocol code by its errno.
pub fn code_for_io(err: &io::Error) -> ErrorCode {
    match err.raw_os_error() {
        Some(errno) => code_for_errno(errno),
        None => match err.kind() {
            io::ErrorKind::NotFound => ErrorCode::NotFound,
            io::ErrorKind::PermissionDenied => ErrorCode::PermissionDenied,
            io::ErrorKind::AlreadyExists => ErrorCode::AlreadyExists,
            io::ErrorKind::InvalidInput => ErrorCode::InvalidArgument,
            _ => ErrorCode::Internal,
        },
    }
}

/// Maps an errno to a protocol code.
pub fn code_for_errno(errno: i32) -> ErrorCode {
    match errno {
        libc::ENOENT => ErrorCode::NotFound,
        libc::EEXIST | libc::ENOTEMPTY => ErrorCode::AlreadyExists,
        libc::EACCES | libc::EPERM | libc::EROFS => ErrorCode::PermissionDenied,
        libc::ENOTDIR | libc::EISDIR => ErrorCode::WrongType,
        libc::ENOSPC | libc::EDQUOT => ErrorCode::NoSpace,
        libc::ENAMETOOLONG | libc::EINVAL | libc::ELOOP => ErrorCode::InvalidArgument,
        libc::EFBIG => ErrorCode::TooLarge,
        libc::EXDEV | libc::EBUSY => ErrorCode::FailedPrecondition,
        _ => ErrorCode::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_mapping() {
        assert_eq!(code_for_errno(libc::ENOENT), ErrorCode::NotFound);
        assert_eq!(code_for_errno(libc::EEXIST), ErrorCode::AlreadyExists);
        assert_eq!(code_for_errno(libc::EACCES), ErrorCode::PermissionDenied);
        assert_eq!(code_for_errno(libc::EPERM), ErrorCode::PermissionDenied);
        assert_eq!(code_for_errno(libc::ENOTDIR), ErrorCode::WrongType);
        assert_eq!(code_for_errno(libc::EISDIR), ErrorCode::WrongType);
        assert_eq!(code_for_errno(libc::ENOSPC), ErrorCode::NoSpace);
        assert_eq!(code_for_errno(libc::EDQUOT), ErrorCode::NoSpace);
        assert_eq!(
            code_for_errno(libc::ENAMETOOLONG),
            ErrorCode::InvalidArgument
        );
        assert_eq!(code_for_errno(libc::EIO), ErrorCode::Internal);
    }

    #[test]
    fn io_message_names_path_without_os_error_suffix() {
        let err = io::Error::from_raw_os_error(libc::ENOSPC);
        let e = AgentError::io("write", Path::new("/home/user/f"), &err);
        assert_eq!(e.code, ErrorCode::NoSpace);
        assert_eq!(e.message, "write /home/user/f: No space left on device");
    }
}
