//! Volume calls over real gRPC on loopback: a FakeNode served by `NodeService`, called through
//! `RemoteNode` — create, usage, delete, the file streams (read, write), listings to a depth,
//! the path calls of protocol v6 (stat, remove, mkdir, owner and mode), and the object volume
//! moves of v7 (download, upload, release), attaching volumes to a running sandbox (v9), with their
//! arguments and typed errors crossing the wire as they are.

#![allow(clippy::unwrap_used)]

mod common;

use common::{serve, TOKEN};

use std::sync::Arc;

use bytes::Bytes;
use cove_node_api::{FileType, NodeError, NodeVolumes, VolumeEntryAttrs};
use cove_node_rpc::RemoteNode;
use cove_test_support::FakeNode;
use futures::StreamExt;

fn body(data: &'static [u8]) -> cove_node_api::ByteStream {
    Box::pin(futures::stream::iter(vec![Ok(Bytes::from_static(data))]))
}

async fn connect() -> (FakeNode, RemoteNode) {
    let fake = FakeNode::new();
    let (addr, cert) = serve(Arc::new(fake.clone())).await;
    let remote = RemoteNode::connect(&addr, TOKEN, cert).await.unwrap();
    (fake, remote)
}

#[tokio::test]
async fn volume_calls_cross_the_wire() {
    let (fake, remote) = connect().await;
    // The node's own capabilities, volumes included, are what the control plane sees.
    assert!(cove_node_api::NodeLifecycle::capabilities(&remote).volumes);

    remote.create_volume("vol-1", 64).await.unwrap();
    assert_eq!(fake.volume_ids(), vec!["vol-1".to_string()]);
    assert!(matches!(
        remote.create_volume("vol-1", 64).await,
        Err(NodeError::AlreadyExists(_))
    ));
    let usage = remote.volume_usage("vol-1").await.unwrap();
    assert_eq!((usage.used_bytes, usage.free_bytes), (0, 64 << 20));
    assert!(matches!(
        remote.volume_usage("vol-nope").await,
        Err(NodeError::FileNotFound(_))
    ));

    // A write (client stream) with its owner and mode; a read (server stream) of its bytes.
    let attrs = VolumeEntryAttrs {
        uid: Some(7),
        gid: Some(8),
        mode: Some(0o600),
    };
    let written = remote
        .write_volume_file("vol-1", "/a/b.txt".into(), attrs, body(b"hello"))
        .await
        .unwrap();
    assert_eq!((written.uid, written.gid, written.info.mode), (7, 8, 0o600));
    let (info, bytes) = remote
        .read_volume_file("vol-1", "a/b.txt".into())
        .await
        .unwrap();
    assert_eq!(info.size, 5);
    let read: Vec<Bytes> = bytes.map(|b| b.unwrap()).collect().await;
    assert_eq!(read.concat(), b"hello");
    assert_eq!(remote.volume_usage("vol-1").await.unwrap().used_bytes, 5);
    assert!(matches!(
        remote
            .read_volume_file("vol-1", "/a".into())
            .await
            .map(|_| ()),
        Err(NodeError::WrongType { .. })
    ));

    // Listings to a depth.
    let top = remote
        .list_volume_dir("vol-1", "/".into(), 1)
        .await
        .unwrap();
    assert_eq!(top.len(), 1);
    assert_eq!(top[0].info.file_type, FileType::Dir);
    let deep = remote
        .list_volume_dir("vol-1", "/".into(), 2)
        .await
        .unwrap();
    let paths: Vec<String> = deep
        .iter()
        .map(|e| String::from_utf8_lossy(&e.info.path.0).into_owned())
        .collect();
    assert_eq!(paths, ["/a", "/a/b.txt"]);

    // The path calls (v6): stat, mkdir with parents and attributes, owner and mode, remove.
    let stat = remote
        .stat_volume_path("vol-1", "/a/b.txt".into())
        .await
        .unwrap();
    assert_eq!(stat, written);
    assert!(matches!(
        remote.stat_volume_path("vol-1", "/nope".into()).await,
        Err(NodeError::FileNotFound(_))
    ));
    let made = remote
        .make_volume_dir(
            "vol-1",
            "/x/y".into(),
            true,
            VolumeEntryAttrs {
                mode: Some(0o700),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (made.info.file_type, made.info.mode),
        (FileType::Dir, 0o700)
    );
    assert!(matches!(
        remote
            .make_volume_dir("vol-1", "/p/q".into(), false, Default::default())
            .await,
        Err(NodeError::FileNotFound(_))
    ));
    let changed = remote
        .set_volume_attrs(
            "vol-1",
            "/x/y".into(),
            VolumeEntryAttrs {
                uid: Some(0),
                gid: None,
                mode: Some(0o750),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (changed.uid, changed.gid, changed.info.mode),
        (0, 1000, 0o750)
    );
    remote
        .remove_volume_path("vol-1", "/x".into())
        .await
        .unwrap();
    assert!(matches!(
        remote.stat_volume_path("vol-1", "/x/y".into()).await,
        Err(NodeError::FileNotFound(_))
    ));
    assert!(matches!(
        remote.remove_volume_path("vol-1", "/".into()).await,
        Err(NodeError::InvalidArgument { .. })
    ));

    remote.delete_volume("vol-1").await.unwrap();
    assert!(fake.volume_ids().is_empty());
    assert!(matches!(
        remote.stat_volume_path("vol-1", "/a".into()).await,
        Err(NodeError::FileNotFound(_))
    ));
}

#[tokio::test]
async fn object_volume_moves_cross_the_wire() {
    let (fake, remote) = connect().await;
    let id = format!("vol-rpc-{}", std::process::id());
    // Generation 0: an empty volume of the size given.
    remote.download_volume(&id, 32, 0).await.unwrap();
    assert_eq!(fake.volume_ids(), vec![id.clone()]);
    remote
        .write_volume_file(&id, "/f".into(), VolumeEntryAttrs::default(), body(b"abc"))
        .await
        .unwrap();
    assert_eq!(remote.upload_volume(&id, 1).await.unwrap(), 3);
    remote.release_volume(&id, 1).await.unwrap();
    assert!(fake.volume_ids().is_empty());
    assert_eq!(FakeNode::stored_volume_generations(&id), [1]);
    remote.download_volume(&id, 32, 1).await.unwrap();
    assert_eq!(remote.volume_usage(&id).await.unwrap().used_bytes, 3);
    assert!(matches!(
        remote.download_volume(&id, 32, 9).await,
        Err(NodeError::FileNotFound(_))
    ));
    assert!(matches!(
        remote.upload_volume("vol-nope", 1).await,
        Err(NodeError::FileNotFound(_))
    ));
    remote.delete_volume(&id).await.unwrap();
    assert!(FakeNode::stored_volume_generations(&id).is_empty());
}

#[tokio::test]
async fn attaching_volumes_to_a_running_sandbox_crosses_the_wire() {
    use cove_node_api::NodeLifecycle;
    let (fake, remote) = connect().await;
    assert!(remote.capabilities().attach_volumes, "the node says it can");
    fake.add_release("base", 1);
    remote
        .start_sandbox(common::launch("sb-attach"))
        .await
        .unwrap();
    remote.create_volume("vol-a", 16).await.unwrap();
    let mount = cove_node_api::LaunchVolume {
        id: "vol-a".into(),
        path: "/data".into(),
        read_only: true,
        node: None,
    };
    remote
        .attach_volumes("sb-attach", vec![mount.clone()])
        .await
        .unwrap();
    assert_eq!(fake.launch_of("sb-attach").unwrap().volumes, vec![mount]);
    let missing = cove_node_api::LaunchVolume {
        id: "vol-nope".into(),
        path: "/x".into(),
        read_only: false,
        node: None,
    };
    assert!(matches!(
        remote.attach_volumes("sb-attach", vec![missing]).await,
        Err(NodeError::FileNotFound(_))
    ));
    assert!(matches!(
        remote.attach_volumes("sb-none", Vec::new()).await,
        Err(NodeError::SandboxNotFound(_))
    ));
}
