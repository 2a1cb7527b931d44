//! Host side of the guest protocol: [`GuestClient`], a client of one sandbox's guest agent.
//!
//! Unary calls (spawn, stdin, signal, kill, resize, command state, stat, list, mkdir, remove,
//! rename) share one lazily (re)connected connection, multiplexed by request id. Streams
//! (attach, file reads and writes, watches) each open a connection of their own so the socket's
//! flow control paces them.
//!
//! The guest is untrusted: frames are bounded by the codec, lists by [`MAX_LIST_ENTRIES`] and
//! [`MAX_LIST_COMMANDS`], error messages by length; a frame for an unknown id or of an unexpected
//! kind is a [`GuestError::Protocol`] and drops the connection; warnings a guest can trigger are
//! rate-limited. Unary calls time out after [`CALL_TIMEOUT`] (kill: its grace period + 30 s).

mod attach;
mod client;
mod connection;
mod error;
mod files;
mod output;
mod watch;

pub use attach::AttachEvent;
pub use client::{GuestClient, CALL_TIMEOUT, CONNECT_TIMEOUT};
pub use connection::{MAX_LIST_COMMANDS, MAX_LIST_ENTRIES};
pub use error::GuestError;
pub use files::TRANSFER_FRAME_TIMEOUT;
pub use output::{OutputLimits, DEFAULT_OUTPUT_CAP_BYTES, DEFAULT_OUTPUT_MEMORY_BYTES};
pub use watch::MAX_EVENTS_PER_FRAME;
