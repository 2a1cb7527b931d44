//! Errors of the guest client.

use cove_guest_protocol::ErrorCode;

/// Longest guest error message passed on, in bytes (the guest is untrusted).
const MAX_MESSAGE_BYTES: usize = 4096;

/// A failed call to the guest agent.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GuestError {
    /// The guest answered with an error.
    #[error("guest error {code:?}: {message}")]
    Guest {
        /// The guest's code.
        code: ErrorCode,
        /// The guest's message (bounded).
        message: String,
    },
    /// The agent cannot be reached or the connection was lost (sandbox stopped, agent dead), or
    /// an upload's body failed.
    #[error("guest agent unavailable: {0}")]
    Unavailable(String),
    /// The guest sent something invalid (wrong id, unexpected frame, bad frame).
    #[error("guest protocol violation: {0}")]
    Protocol(String),
    /// A call got no answer in time.
    #[error("guest agent did not answer in time")]
    Timeout,
    /// The agent speaks an older protocol version that lacks the call (an agent started before
    /// the node was upgraded).
    #[error("{0}")]
    TooOld(String),
}

impl GuestError {
    /// A guest error with its message cut to a bounded length.
    pub(crate) fn from_guest(code: ErrorCode, message: String) -> Self {
        GuestError::Guest {
            code,
            message: bounded(message),
        }
    }

    /// The guest's code, when the guest answered an error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            GuestError::Guest { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// Cuts a string from the guest to [`MAX_MESSAGE_BYTES`] on a character boundary.
pub(crate) fn bounded(mut s: String) -> String {
    if s.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_messages_on_char_boundaries() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let b = bounded(long);
        assert!(b.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert!(b.ends_with('…'));
        assert_eq!(bounded("short".into()), "short");
    }
}
