//! Host ⇄ guest protocol: the messages the node agent and the guest agent exchange, and their framing.
//!
//! # Wire format (version [`PROTOCOL_VERSION`])
//! A connection is a byte stream (a unix socket for runc sandboxes). Each frame is a 4-byte
//! big-endian body length followed by the body, a [postcard](https://docs.rs/postcard) encoding of
//! [`HostFrame`] (host → guest) or [`GuestFrame`] (guest → host). A body is at most
//! [`MAX_FRAME_BYTES`]; a longer length prefix is a protocol error and the reader drops the
//! connection without allocating it.
//!
//! The first frame on every connection is [`Request::Hello`] from the host, offering its newest
//! version; the guest answers [`Response::Hello`] with the version the connection speaks (see
//! [`PROTOCOL_VERSION`]), or [`Response::Error`] with [`ErrorCode::UnsupportedVersion`] and
//! closes.
//!
//! # Multiplexing
//! Every frame carries a request id chosen by the host. The guest serves the requests of one
//! connection concurrently and tags every response with the id of the request it answers, so many
//! unary requests share one connection. A unary request gets one response frame, except that a
//! listing too large for one frame ([`Request::ListDir`], [`Request::ListCommands`]) comes as
//! [`Response::EntriesPart`] / [`Response::CommandsPart`] frames before its final frame. A streaming request ([`Request::Attach`],
//! [`Request::ReadFile`], [`Request::WriteFile`], [`Request::Watch`]) takes a connection of its
//! own, so that the socket's own flow control paces one stream without stalling the others.
//!
//! # Streams
//! - `Attach`: the guest sends [`Response::Output`] frames from the requested offset on, then
//!   [`Response::Exited`] once the command has ended and every byte was sent (or, with
//!   `follow: false`, [`Response::End`] when the currently kept output is exhausted). Where the
//!   reader's position falls in the dropped middle of a truncated output, a [`Response::Gap`]
//!   says which bytes are gone and the stream continues after them.
//! - `ReadFile`: [`Response::FileInfo`], then [`Response::Data`] frames, then [`Response::End`].
//! - `WriteFile`: the host sends [`Request::Data`] frames and then [`Request::DataEnd`] with the
//!   same id; the guest answers [`Response::FileInfo`] once the file is durably renamed into place,
//!   or [`Response::Error`] (the temporary file is removed, the old file is untouched).
//! - `Watch`: [`Response::Ok`] once the directory is watched (or [`Response::Error`]), then
//!   [`Response::FileEvents`] frames for as long as the host keeps the connection open; closing
//!   it removes the guest's watches.

//!
//! # Quiesce (gVisor checkpoints)
//! A guest agent started with [`QUIESCE_FLAG`] stops talking to the host on [`QUIESCE_SIGNAL`]:
//! it closes its listening socket and every connection, tries to remove the socket file (gVisor
//! refuses that from inside: the host removes it), and then creates [`QUIESCED_MARKER`] in its
//! run dir, the sign that no host socket is left open; commands keep running and their output
//! is kept. On [`RELISTEN_SIGNAL`] it removes the marker and listens at the same path again
//! (the socket file must be gone by then). gVisor
//! cannot checkpoint a sandbox that holds a host socket, and the agent's socket is one; the
//! signals come from outside the sandbox (`runsc kill`), so no socket into it is needed. This
//! is outside the framed protocol: frames and [`PROTOCOL_VERSION`] are unchanged, and an agent
//! without the flag ignores both signals.

use serde::{Deserialize, Serialize};

mod codec;
pub mod mux;
mod types;

pub use codec::{decode_body, encode_frame, read_frame, write_frame, FrameError};
pub use types::*;

/// The newest protocol version this crate speaks. Bumped when messages are added or changed.
///
/// - 1: everything but extended attributes.
/// - 2: adds [`Request::SetXattrs`], [`Request::GetXattrs`] and [`Response::Xattrs`]
///   (appended, so every version 1 frame still decodes the same).
/// - 3: a spawn is answered with [`Response::SpawnedCommand`] (the command's whole
///   [`CommandInfo`]) instead of [`Response::Spawned`] (its pid alone), so the host needs no
///   [`Request::GetCommand`] after it (appended; earlier frames decode the same).
///
/// The host offers its newest version in `Hello`; a guest answers with the version both will
/// speak (the host's, when it speaks it) or `UnsupportedVersion`. A host that meets a guest
/// too old for its offer (one that answers `UnsupportedVersion`) reconnects offering the next
/// older version, down to [`MIN_PROTOCOL_VERSION`], and leaves out what that version lacks.
pub const PROTOCOL_VERSION: u32 = 3;

/// The oldest protocol version this crate still speaks.
pub const MIN_PROTOCOL_VERSION: u32 = 1;

/// The first version with extended attributes ([`Request::SetXattrs`], [`Request::GetXattrs`]).
pub const XATTRS_VERSION: u32 = 2;

/// The first version whose spawn answer is [`Response::SpawnedCommand`]; an agent on an older
/// connection answers [`Response::Spawned`].
pub const SPAWN_INFO_VERSION: u32 = 3;

/// Most paths in one [`Request::GetXattrs`].
pub const MAX_XATTR_PATHS: usize = 64;

/// Most bytes of extended attributes (names with their namespace, and values) set by one
/// [`Request::SetXattrs`] or returned for one path by [`Request::GetXattrs`]: 8 KiB, so a full
/// `GetXattrs` answer fits a frame.
pub const MAX_XATTR_BYTES: usize = 8192;

/// Largest frame body in bytes (1 MiB + headroom for the envelope). Chunks of output and file data
/// are at most [`MAX_CHUNK_BYTES`], so every legal frame fits.
pub const MAX_FRAME_BYTES: usize = (1 << 20) + 4096;

/// Largest data payload in one `Output` or `Data` frame, in bytes (1 MiB).
pub const MAX_CHUNK_BYTES: usize = 1 << 20;

/// Path of the guest agent's listening socket inside a sandbox.
pub const GUEST_SOCKET_PATH: &str = "/.cove/run/agent.sock";

/// Directory inside a sandbox that holds the agent's socket and its own state (spilled output,
/// large scripts). It is backed by the node, not by the sandbox's disk, so a full disk or a deleted
/// `/tmp` in the sandbox does not break the agent.
pub const GUEST_RUN_DIR: &str = "/.cove/run";

/// The guest agent's flag that turns quiescing on (see "Quiesce" above).
pub const QUIESCE_FLAG: &str = "--quiesce-on-signal";

/// The signal that quiesces an agent started with [`QUIESCE_FLAG`] (`SIGUSR1`; the name as
/// `kill` and `runsc kill` take it).
pub const QUIESCE_SIGNAL: &str = "USR1";

/// The signal that makes a quiesced agent listen again (`SIGUSR2`).
pub const RELISTEN_SIGNAL: &str = "USR2";

/// The file a quiesced agent creates in its run dir ([`GUEST_RUN_DIR`]) once it holds no
/// socket any more; removed when it listens again.
pub const QUIESCED_MARKER: &str = "quiesced";

/// Path of the guest agent binary inside a sandbox (mounted read-only).
pub const GUEST_AGENT_PATH: &str = "/.cove/bin/cove-guest-agent";

/// Name of the cgroup the node delegates to the guest agent inside each cgroup v1 hierarchy it
/// delegates (`cove/<id>/cove-commands` in the `freezer` and `memory` hierarchies). The agent
/// makes one cgroup per command below it; where it is missing (cgroup v2, a VM) commands are
/// tracked by their session. Inside the sandbox it is visible read-only only (through the
/// sandbox's read-only cgroup mount): the agent reaches it through descriptors the node hands
/// it ([`COMMAND_CGROUP_FDS_ENV`]), so nothing in the sandbox, its root included, can make a
/// cgroup there or move a process (the agent above all) into one.
pub const COMMAND_CGROUP_DIR: &str = "cove-commands";

/// Environment variable of the guest agent naming the delegated cgroup hierarchies whose
/// [`COMMAND_CGROUP_DIR`] the node passed it as open descriptors, in descriptor order from 3:
/// `freezer,memory` means descriptor 3 is the freezer one and 4 the memory one. Each is a
/// detached mount of that one directory (`..` stays inside it).
pub const COMMAND_CGROUP_FDS_ENV: &str = "COVE_COMMAND_CGROUP_FDS";

/// The first descriptor of [`COMMAND_CGROUP_FDS_ENV`].
pub const COMMAND_CGROUP_FIRST_FD: i32 = 3;

/// A frame from the host to the guest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostFrame {
    /// Request id chosen by the host; unique per connection while the request is open.
    pub id: u64,
    /// The request, or a data frame of an open `WriteFile`.
    pub request: Request,
}

/// A frame from the guest to the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuestFrame {
    /// Id of the request this frame answers.
    pub id: u64,
    /// The response.
    pub response: Response,
}
