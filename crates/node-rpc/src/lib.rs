//! The node contract ([`cove_node_api::NodeApi`]) and node membership over gRPC (tonic/prost,
//! `proto/node.proto`, [`PROTOCOL_VERSION`]).
//!
//! - [`NodeService`] serves any `NodeApi` (a node agent) to a control plane;
//!   [`RemoteNode`] is the control plane's side: it implements `NodeApi` over a channel, so a
//!   remote node is used exactly like the in-process one, streams included.
//! - [`ClusterService`] serves a [`Membership`] (the control plane's node registry) to node
//!   agents; [`ClusterClient`] is a node agent's side (join, heartbeats).
//!
//! Arguments and results are the contract's serde types as JSON inside protobuf envelopes; bulk
//! bytes travel raw. Every call carries the join token as a bearer, inside TLS whose
//! certificates both sides pin at join ([`tls`]).

// tonic's handlers must return `tonic::Status`, which is large; boxing it would fight the API.
#![allow(clippy::result_large_err)]

mod checkpoints;
mod client;
pub mod contract;
mod membership;
mod server;
pub mod tls;
pub mod transport;
mod volumes;
mod wire;

/// Generated protobuf and gRPC code of `proto/node.proto`.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("cove.node.v1");
}

pub use client::RemoteNode;
pub use contract::{Method, Shape};
pub use membership::{ClusterClient, ClusterService, JoinAnswer, Membership, MembershipError};
pub use server::NodeService;

/// Version of the wire (`proto/node.proto`). Each method has the version it appeared in (the
/// table in [`contract`]); two peers speak the lower of their versions, and a call to a method
/// newer than that fails at the caller with `NodeError::Unsupported` naming the method and both
/// versions, while the methods both know keep working: nodes and the control plane upgrade one
/// at a time. A peer below [`PROTOCOL_FLOOR`] is refused (at join and on every call). Version 2 added the guest agent check and the repair (`CHECK_AGENT`,
/// `REPAIR_SANDBOX`); version 3 made the link TLS with pinned certificates (`Discover`,
/// `JoinRequest.certificate`); version 4 added the release digest in a launch (a node fetches
/// a file release it lacks from the snapshot store), `REMOVE_STORED_RELEASE` and
/// `BUILD_FILE_RELEASE`; version 5 carried the checkpoints (`CHECKPOINT_SANDBOX`,
/// `RESTORE_CHECKPOINT`, `EXPORT_CHECKPOINT`, `IMPORT_CHECKPOINT`, `DELETE_CHECKPOINT`) and the
/// volumes (`CREATE_VOLUME` .. `LIST_VOLUME_DIR`); version 6 the volume path calls
/// (`STAT_VOLUME_PATH`, `REMOVE_VOLUME_PATH`, `MAKE_VOLUME_DIR`, `SET_VOLUME_ATTRS`); version 7
/// moved object volumes to and from the snapshot store (`DOWNLOAD_VOLUME`, `UPLOAD_VOLUME`,
/// `RELEASE_VOLUME`); version 8 sends a file build's words as written (the node expands
/// `ENV`, `ARG`, `WORKDIR`, `USER` and `COPY` destinations against the parent's environment)
/// and adds the `LABEL` and `EXPOSE` steps; version 9 attaches volumes to a running sandbox
/// (`ATTACH_VOLUMES`, a warm pool member's claim); version 10 negotiates per method (the
/// serving node's version in every unary reply, `Reply.version`; method numbers from the table,
/// the wire's `Call.method` a plain number) and carries file extended attributes (`SET_XATTRS`,
/// `XATTRS`).
pub const PROTOCOL_VERSION: u32 = 10;

/// The oldest peer version accepted: 9. A v9 node (which refuses any caller but v9 and sends no
/// version in its replies) is called at v9, so a v10 control plane drives v9 and v10 nodes
/// alike (without the v10 methods on the v9 ones); upgrade the control plane first, then the
/// nodes one at a time. From v10 on either side may go first.
pub const PROTOCOL_FLOOR: u32 = 9;

/// Most bytes in one message of a byte stream (file contents, bodies).
pub const CHUNK_BYTES: usize = 256 * 1024;

/// Largest message either side accepts, bytes (a chunk plus its envelope, or a large listing).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// One item of a release build's stream (`T`: what the finished build returns).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) enum BuildItem<T = cove_node_api::BuiltRelease> {
    /// A log line or progress.
    Event(cove_node_api::BuildEvent),
    /// The build finished.
    Done(T),
}
