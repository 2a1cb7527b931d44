//! The node contract's one table: every remote method's name, wire number, shape (unary,
//! server stream, client stream, bidirectional), the trait method it carries and the protocol
//! version its current arguments and result appeared in.
//!
//! `contract!` turns the table into the [`Method`] enum (the wire numbers; `proto/node.proto`
//! carries a plain `uint32`), its lookups, and a compile-time check that every row names a
//! method of [`cove_node_api::NodeApi`]. The client refuses locally a call whose method is newer
//! than the version both sides speak ([`Method::check`]), and the server refuses a call newer
//! than its caller claims, so a control plane and its nodes need not upgrade in lockstep.

use std::collections::BTreeMap;

use cove_domain::EgressPolicy;
#[allow(unused_imports)] // the traits name the rows' methods
use cove_node_api::{
    LaunchSecret, LaunchVolume, NodeApi, NodeCheckpoints, NodeCommands, NodeError, NodeFiles,
    NodeLifecycle, NodeMetrics, NodeNetwork, NodeReleases, NodeVolumes, PtySize, SandboxLaunch,
    SandboxPath, SetXattrsRequest, SpawnRequest, VolumeEntryAttrs, XattrsRequest,
};

use crate::{PROTOCOL_FLOOR, PROTOCOL_VERSION};

/// How a method travels over gRPC (which of the four `Node` service calls carries it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One call, one reply.
    Unary,
    /// One call, a stream of items back.
    ServerStream,
    /// The call, then bytes up; one reply.
    ClientStream,
    /// The call and bytes up; items and bytes back.
    Bidi,
}

/// Declares the table: `Variant = number, shape, trait_method, since version[, args(...)];`.
/// `args(ref a: String, val b: u32)` (a unary method's arguments as the trait takes them, `ref`
/// passed borrowed, `val` by value) makes the serving side's dispatch of that method
/// ([`dispatch`]); a method without it (a stream, an upload, a call the server runs to its end
/// or cancels when the caller goes away, a result that is not a `Result`) is dispatched by
/// hand in `server.rs`.
macro_rules! contract {
    ($( $name:ident = $number:literal, $shape:ident, $call:ident, since $since:literal
        $(, args($($mode:ident $arg:ident : $ty:ty),*))?; )*) => {
        /// A remote method of the node contract; its discriminant is its wire number.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum Method {
            $(
                #[doc = concat!("`", stringify!($call), "` (", stringify!($shape),
                    ", since protocol v", stringify!($since), ").")]
                $name = $number,
            )*
        }

        impl Method {
            /// Every method, in table order.
            pub const ALL: &'static [Method] = &[$(Method::$name,)*];

            /// The method of wire number `number`, if the table has one.
            pub fn from_number(number: u32) -> Option<Method> {
                match number {
                    $($number => Some(Method::$name),)*
                    _ => None,
                }
            }

            /// Its wire number.
            pub fn number(self) -> u32 {
                self as u32
            }

            /// The protocol version its arguments and result appeared in.
            pub fn since(self) -> u32 {
                match self {
                    $(Method::$name => $since,)*
                }
            }

            /// How it travels.
            pub fn shape(self) -> Shape {
                match self {
                    $(Method::$name => Shape::$shape,)*
                }
            }

            /// The name of the [`cove_node_api::NodeApi`] method it carries.
            pub fn name(self) -> &'static str {
                match self {
                    $(Method::$name => stringify!($call),)*
                }
            }
        }

        /// Compile-time check that every row names a method of the node contract (a row
        /// whose trait method is renamed or removed stops the build). The other direction
        /// (a trait method without a row) is held by [`crate::RemoteNode`], which implements
        /// every trait and can only call through a [`Method`].
        #[allow(dead_code)]
        fn rows_name_trait_methods() {
            $( let _ = <dyn cove_node_api::NodeApi>::$call; )*
        }

        /// Serves a unary method whose row has its arguments: decodes them, calls `node`,
        /// encodes the `Result`. `None` for a method served by hand.
        pub(crate) async fn dispatch(
            node: &dyn NodeApi,
            method: Method,
            args: &[u8],
        ) -> Option<Result<Vec<u8>, tonic::Status>> {
            match method {
                $($(
                    Method::$name => Some(
                        async {
                            #[allow(clippy::let_unit_value, unused_parens)]
                            let ($($arg,)*): ($($ty,)*) = crate::wire::args(args)?;
                            let result = node.$call($(contract!(@pass $mode $arg)),*).await;
                            Ok::<_, tonic::Status>(crate::wire::encode(&result))
                        }
                        .await,
                    ),
                )?)*
                _ => None,
            }
        }
    };
    (@pass ref $arg:ident) => { &$arg };
    (@pass val $arg:ident) => { $arg };
}

contract! {
    Recipes = 1, Unary, recipes, since 1;
    BuildRelease = 2, ServerStream, build_release, since 1;
    RemoveRelease = 3, Unary, remove_release, since 1, args(ref template: String, val number: u32);
    CachedReleases = 4, Unary, cached_releases, since 1, args();
    RemoveStoredRelease = 5, Unary, remove_stored_release, since 4, args(ref digest: String);
    BuildFileRelease = 6, ServerStream, build_file_release, since 8;
    StartSandbox = 10, Unary, start_sandbox, since 1;
    AdoptSandbox = 11, Unary, adopt_sandbox, since 1, args(ref id: String);
    InspectSandbox = 12, Unary, inspect_sandbox, since 1, args(ref id: String);
    FailureReason = 13, Unary, failure_reason, since 1;
    PauseSandbox = 14, Unary, pause_sandbox, since 1, args(ref id: String);
    ResumeSandbox = 15, Unary, resume_sandbox, since 1, args(ref id: String);
    SuspendSandbox = 16, Unary, suspend_sandbox, since 1;
    WakeSandbox = 17, Unary, wake_sandbox, since 1;
    ReleaseSandbox = 18, Unary, release_sandbox, since 1, args(ref id: String);
    DestroySandbox = 19, Unary, destroy_sandbox, since 1, args(ref id: String);
    ListSandboxes = 20, Unary, list_sandboxes, since 1, args();
    HasSnapshot = 21, Unary, has_snapshot, since 1, args(ref id: String);
    DeleteSnapshot = 22, Unary, delete_snapshot, since 1, args(ref id: String);
    ListSnapshots = 23, Unary, list_snapshots, since 1, args();
    SweepSnapshots = 24, Unary, sweep_snapshots, since 1, args();
    Capabilities = 25, Unary, capabilities, since 1;
    CheckAgent = 26, Unary, check_agent, since 2;
    RepairSandbox = 27, Unary, repair_sandbox, since 2, args(val launch: SandboxLaunch);
    Spawn = 30, Unary, spawn, since 1, args(ref sandbox: String, val spawn: SpawnRequest);
    Command = 31, Unary, command, since 1, args(ref sandbox: String, ref command: String);
    Commands = 32, Unary, commands, since 1, args(ref sandbox: String);
    Signal = 33, Unary, signal, since 1,
        args(ref sandbox: String, ref command: String, val signal: i32);
    Kill = 34, Unary, kill, since 1,
        args(ref sandbox: String, ref command: String, val grace_ms: u64);
    Attach = 35, ServerStream, attach, since 1;
    StdinWrite = 36, Unary, stdin_write, since 1;
    StdinClose = 37, Unary, stdin_close, since 1, args(ref sandbox: String, ref command: String);
    Resize = 38, Unary, resize, since 1,
        args(ref sandbox: String, ref command: String, val size: PtySize);
    Forget = 39, Unary, forget, since 1, args(ref sandbox: String, ref command: String);
    WriteFile = 40, ClientStream, write_file, since 1;
    ReadFile = 41, ServerStream, read_file, since 1;
    Stat = 42, Unary, stat, since 1,
        args(ref sandbox: String, val path: SandboxPath, val user: Option<String>);
    ListDir = 43, Unary, list_dir, since 1,
        args(ref sandbox: String, val path: SandboxPath, val user: Option<String>, val depth: u32);
    MakeDir = 44, Unary, make_dir, since 1,
        args(ref sandbox: String, val path: SandboxPath, val user: Option<String>);
    Remove = 45, Unary, remove, since 1,
        args(ref sandbox: String, val path: SandboxPath, val user: Option<String>);
    Rename = 46, Unary, rename, since 1,
        args(ref sandbox: String, val from: SandboxPath, val to: SandboxPath, val user: Option<String>);
    Watch = 47, ServerStream, watch, since 1;
    SetXattrs = 48, Unary, set_xattrs, since 10,
        args(ref sandbox: String, val set: SetXattrsRequest);
    Xattrs = 49, Unary, xattrs, since 10, args(ref sandbox: String, val get: XattrsRequest);
    Capacity = 50, Unary, capacity, since 1, args();
    SandboxMetrics = 51, Unary, sandbox_metrics, since 1, args(ref id: String);
    SandboxNetwork = 60, Unary, sandbox_network, since 1, args(ref id: String);
    SetSandboxNetwork = 61, Unary, set_sandbox_network, since 1,
        args(ref id: String, val policy: EgressPolicy);
    RearmSecrets = 62, Unary, rearm_secrets, since 1,
        args(ref id: String, val secrets: BTreeMap<String, LaunchSecret>);
    ForwardHttp = 63, Bidi, forward_http, since 1;
    NetworkDenials = 64, ServerStream, network_denials, since 1;
    CheckpointSandbox = 70, Unary, checkpoint_sandbox, since 5;
    RestoreCheckpoint = 71, Unary, restore_checkpoint, since 5;
    ExportCheckpoint = 72, ServerStream, export_checkpoint, since 5;
    ImportCheckpoint = 73, ClientStream, import_checkpoint, since 5;
    DeleteCheckpoint = 74, Unary, delete_checkpoint, since 5, args(ref checkpoint: String);
    CreateVolume = 80, Unary, create_volume, since 5, args(ref id: String, val size_mib: u64);
    DeleteVolume = 81, Unary, delete_volume, since 5, args(ref id: String);
    VolumeUsage = 82, Unary, volume_usage, since 5, args(ref id: String);
    ReadVolumeFile = 83, ServerStream, read_volume_file, since 5;
    WriteVolumeFile = 84, ClientStream, write_volume_file, since 5;
    ListVolumeDir = 85, Unary, list_volume_dir, since 5,
        args(ref id: String, val path: String, val depth: u32);
    StatVolumePath = 86, Unary, stat_volume_path, since 6, args(ref id: String, val path: String);
    RemoveVolumePath = 87, Unary, remove_volume_path, since 6,
        args(ref id: String, val path: String);
    MakeVolumeDir = 88, Unary, make_volume_dir, since 6,
        args(ref id: String, val path: String, val parents: bool, val attrs: VolumeEntryAttrs);
    SetVolumeAttrs = 89, Unary, set_volume_attrs, since 6,
        args(ref id: String, val path: String, val attrs: VolumeEntryAttrs);
    DownloadVolume = 90, Unary, download_volume, since 7,
        args(ref id: String, val size_mib: u64, val generation: u64);
    UploadVolume = 91, Unary, upload_volume, since 7, args(ref id: String, val generation: u64);
    ReleaseVolume = 92, Unary, release_volume, since 7, args(ref id: String, val keep: u64);
    AttachVolumes = 93, Unary, attach_volumes, since 9,
        args(ref id: String, val volumes: Vec<LaunchVolume>);
}

impl Method {
    /// `Ok` when a peer pair speaking `version` (the lower of both sides') carries this
    /// method; otherwise `Unsupported` naming the method and both versions.
    pub fn check(self, version: u32) -> Result<(), NodeError> {
        if self.since() <= version {
            Ok(())
        } else {
            Err(NodeError::Unsupported(format!(
                "{} needs node protocol v{}; this node and control plane share v{version} \
                 (upgrade the older side)",
                self.name(),
                self.since()
            )))
        }
    }
}

/// The version two sides speak: the lower of `ours` and `theirs`, where a peer that sent no
/// version (a v9 node, which predates the field) speaks the floor.
pub(crate) fn shared(ours: u32, theirs: u32) -> u32 {
    let theirs = if theirs == 0 { PROTOCOL_FLOOR } else { theirs };
    ours.min(theirs).min(PROTOCOL_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_consistent() {
        let mut numbers: Vec<u32> = Method::ALL.iter().map(|m| m.number()).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(
            numbers.len(),
            Method::ALL.len(),
            "a wire number is used twice"
        );
        for m in Method::ALL {
            assert_eq!(Method::from_number(m.number()), Some(*m));
            assert!(m.since() >= 1 && m.since() <= PROTOCOL_VERSION, "{m:?}");
        }
        assert_eq!(Method::from_number(0), None);
        assert_eq!(Method::from_number(9999), None);
        const { assert!(PROTOCOL_FLOOR <= PROTOCOL_VERSION) };
    }

    #[test]
    fn a_method_newer_than_the_shared_version_is_refused_by_name() {
        assert!(Method::AttachVolumes.check(9).is_ok());
        let e = Method::SetXattrs
            .check(9)
            .expect_err("set_xattrs is v10")
            .to_string();
        assert!(
            e.contains("set_xattrs") && e.contains("v10") && e.contains("v9"),
            "{e}"
        );
        assert_eq!(shared(10, 0), PROTOCOL_FLOOR);
        assert_eq!(shared(9, 10), 9);
    }
}
