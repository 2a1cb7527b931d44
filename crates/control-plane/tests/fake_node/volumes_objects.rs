//! Object volumes (`storage: "object"`) on a cluster of three fake nodes sharing one store:
//! attached to the node of the sandboxes that mount them, uploaded and detached when the last
//! is suspended or deleted, attached again wherever the next one goes (a wake after a drain
//! lands on another node with the data); one held by a sandbox pins the others to its node,
//! one held by none moves off a draining node; a failed download leaves nothing attached; a lost
//! node's volume falls back to its last uploaded generation.

use bytes::Bytes;
use cove_api_types::{
    CreateSandboxRequest, CreateVolumeRequest, ErrorCode, NodeState, VolumeMount, VolumeStorage,
};
use cove_control_plane::LifecycleVerb::{Suspend, Wake};
use cove_node_api::NodeError;
use cove_test_support::{Call, FakeNode, Fault};
use futures::StreamExt;

use crate::cluster::{Nodes, NAMES};
use crate::harness::as_system;
use crate::harness::code;

fn object(name: &str) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        size_mib: 64,
        storage: VolumeStorage::Object,
    }
}

fn mounting(name: &str) -> CreateSandboxRequest {
    CreateSandboxRequest {
        volumes: vec![VolumeMount {
            name: name.into(),
            path: format!("/mnt/{name}"),
            read_only: false,
        }],
        ..Default::default()
    }
}

async fn write(n: &Nodes, volume: &str, path: &str, data: &'static [u8]) {
    let body = Box::pin(futures::stream::iter([Ok(Bytes::from_static(data))]));
    n.h.cp
        .write_volume_file(
            volume,
            path.into(),
            Default::default(),
            Some(data.len() as u64),
            body,
        )
        .await
        .expect("write");
}

async fn read(n: &Nodes, volume: &str, path: &str) -> Vec<u8> {
    let (_, bytes) =
        n.h.cp
            .read_volume_file(volume, path.into())
            .await
            .expect("read");
    let read: Vec<Bytes> = bytes.map(|b| b.expect("bytes")).collect().await;
    read.concat()
}

/// Which nodes hold a copy of volume `id`.
fn holders(n: &Nodes, id: &str) -> Vec<&'static str> {
    NAMES
        .into_iter()
        .filter(|x| n.fake(x).volume_ids().iter().any(|v| v == id))
        .collect()
}

/// The id of the one volume on the node volume `name` is attached to.
async fn volume_id(n: &Nodes, name: &str) -> String {
    let v = n.h.cp.get_volume(name).await.expect("get");
    let ids = n.fake(&v.node.expect("attached")).volume_ids();
    assert_eq!(ids.len(), 1, "{ids:?}");
    ids[0].clone()
}

#[tokio::test]
async fn an_object_volume_follows_its_sandbox_to_another_node() {
    as_system(async {
        let n = Nodes::new().await;
        let made =
            n.h.cp
                .create_volume(object("shared"))
                .await
                .expect("create");
        assert_eq!(made.storage, VolumeStorage::Object);
        let home = made.node.clone().expect("attached where it was made");
        let id = volume_id(&n, "shared").await;
        write(&n, "shared", "/a.txt", b"first").await;

        // A sandbox that mounts it runs on its node; suspended, the volume is uploaded and held
        // by no node.
        let sb = n.h.running_with(mounting("shared")).await;
        assert_eq!(n.cluster.node_of(&sb).as_deref(), Some(home.as_str()));
        n.h.apply(&sb, Suspend).await;
        for f in &n.fakes {
            f.add_snapshot(&sb);
        }
        let v = n.h.cp.get_volume("shared").await.expect("get");
        assert_eq!((v.node, v.used_bytes), (None, None), "detached");
        assert!(holders(&n, &id).is_empty());
        assert_eq!(FakeNode::stored_volume_generations(&id), [1]);

        // Its node drains; the wake lands elsewhere, which downloads the volume first.
        n.h.cp
            .set_node_state(&home, NodeState::Draining)
            .await
            .expect("drain");
        n.h.apply(&sb, Wake).await;
        let there = n.cluster.node_of(&sb).expect("placed");
        assert_ne!(there, home);
        assert_eq!(holders(&n, &id), [there.as_str()]);
        assert_eq!(
            n.h.cp
                .get_volume("shared")
                .await
                .expect("get")
                .node
                .as_deref(),
            Some(there.as_str())
        );
        assert_eq!(read(&n, "shared", "/a.txt").await, b"first");

        // Deleted, it is uploaded again (generation 2; the first is dropped) and can be deleted.
        write(&n, "shared", "/b.txt", b"second").await;
        let op = n.h.cp.delete_sandbox(&sb, None).await.expect("delete");
        n.h.succeeds(&op).await;
        assert!(holders(&n, &id).is_empty());
        assert_eq!(FakeNode::stored_volume_generations(&id), [2]);
        // A files call attaches it to a ready node, where it stays.
        assert_eq!(read(&n, "shared", "/b.txt").await, b"second");
        let held = holders(&n, &id);
        assert_eq!(held.len(), 1);
        assert_ne!(held[0], home, "not the draining node");
        // A sandbox that mounts it pins others there while it holds it.
        let one = n.h.running_with(mounting("shared")).await;
        assert_eq!(n.cluster.node_of(&one).as_deref(), Some(held[0]));
        let two = n.h.running_with(mounting("shared")).await;
        assert_eq!(n.cluster.node_of(&two).as_deref(), Some(held[0]));
        // Held on a node that drains: a new sandbox that mounts it is refused, as for a local one.
        n.h.cp
            .set_node_state(held[0], NodeState::Draining)
            .await
            .expect("drain");
        assert_eq!(
            code(n.h.cp.create_sandbox(mounting("shared"), None).await),
            ErrorCode::Unavailable
        );
        // Held by none, it moves off the draining node to where the next sandbox goes.
        for id in [&one, &two] {
            let op = n.h.cp.delete_sandbox(id, None).await.expect("delete");
            n.h.succeeds(&op).await;
        }
        assert!(holders(&n, &id).is_empty());
        assert_eq!(FakeNode::stored_volume_generations(&id), [3]);
        // Attached by a files call to a ready node X, held by no sandbox: when X drains, the
        // next sandbox moves it (X uploads it, the sandbox's node fetches it).
        n.h.cp
            .set_node_state(held[0], NodeState::Ready)
            .await
            .expect("ready");
        write(&n, "shared", "/c.txt", b"third").await;
        let x = holders(&n, &id)[0];
        assert_ne!(x, home);
        n.h.cp
            .set_node_state(x, NodeState::Draining)
            .await
            .expect("drain");
        let three = n.h.running_with(mounting("shared")).await;
        let moved = n.cluster.node_of(&three).expect("placed");
        assert!(moved != home && moved != x, "{moved}");
        assert_eq!(holders(&n, &id), [moved.as_str()]);
        assert_eq!(FakeNode::stored_volume_generations(&id), [4]);
        assert_eq!(read(&n, "shared", "/c.txt").await, b"third");
        let op = n.h.cp.delete_sandbox(&three, None).await.expect("delete");
        n.h.succeeds(&op).await;
        n.h.cp.delete_volume("shared").await.expect("delete");
        assert!(holders(&n, &id).is_empty());
        assert!(FakeNode::stored_volume_generations(&id).is_empty());
    })
    .await;
}

#[tokio::test]
async fn a_failed_download_attaches_nothing_and_a_lost_node_falls_back_to_the_last_upload() {
    as_system(async {
        let n = Nodes::new().await;
        n.h.cp.create_volume(object("data")).await.expect("create");
        let id = volume_id(&n, "data").await;
        write(&n, "data", "/kept.txt", b"kept").await;
        let sb = n.h.running_with(mounting("data")).await;
        let op = n.h.cp.delete_sandbox(&sb, None).await.expect("delete");
        n.h.succeeds(&op).await;
        assert_eq!(FakeNode::stored_volume_generations(&id), [1]);

        // Every node fails the download: the create fails, nothing is attached.
        for f in &n.fakes {
            f.inject(
                Call::DownloadVolume,
                Fault::fail(NodeError::Internal("store down".into())),
            );
        }
        let e =
            n.h.cp
                .create_sandbox(mounting("data"), None)
                .await
                .expect_err("download failed");
        assert_eq!(e.code(), ErrorCode::Internal);
        for f in &n.fakes {
            f.clear_faults();
        }
        assert!(holders(&n, &id).is_empty());
        assert_eq!(n.h.cp.get_volume("data").await.expect("get").node, None);

        // Attached again and written to, then its node is lost: the write since the upload is
        // gone, the volume is at generation 1 again and another node takes it.
        let sb = n.h.running_with(mounting("data")).await;
        let home = n.cluster.node_of(&sb).expect("placed");
        write(&n, "data", "/lost.txt", b"lost").await;
        let others: Vec<&str> = NAMES.into_iter().filter(|x| *x != home).collect();
        for _ in 0..6 {
            n.h.advance(std::time::Duration::from_secs(2)).await;
            n.beat(&others).await;
        }
        n.h.controller_pass().await;
        assert_eq!(n.state_of(&home), NodeState::Lost);
        assert_eq!(n.h.cp.get_volume("data").await.expect("get").node, None);
        assert_eq!(read(&n, "data", "/kept.txt").await, b"kept");
        assert_eq!(
            code(n.h.cp.stat_volume_file("data", "/lost.txt".into()).await),
            ErrorCode::FileNotFound
        );
    })
    .await;
}
