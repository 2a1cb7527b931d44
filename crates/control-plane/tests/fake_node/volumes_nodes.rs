//! Volumes on a cluster of three fake nodes: a volume is made on one node and recorded with
//! it; its files calls go there; every sandbox that mounts it is created, woken and forked
//! there (volumes on two nodes are refused, a drained node refuses them); a lost node's
//! volumes answer `503 unavailable` and stay recorded; a cluster whose nodes keep no volumes
//! answers `400 unsupported`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cove_api_types::{
    CreateSandboxRequest, CreateVolumeRequest, ErrorCode, ForkRequest, MakeVolumeDirRequest,
    NodeState, SandboxState, VolumeMount,
};
use cove_cluster::{Cluster, ClusterConfig};
use cove_control_plane::LifecycleVerb::{Suspend, Wake};
use cove_node_api::{NodeCapabilities, NodeLifecycle, NodeReport};
use cove_test_support::FakeNode;
use futures::StreamExt;

use crate::cluster::{Nodes, NAMES};
use crate::harness::as_system;
use crate::harness::{code, Harness};

fn volume(name: &str) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        size_mib: 64,
        storage: Default::default(),
    }
}

fn mounting(names: &[&str]) -> CreateSandboxRequest {
    CreateSandboxRequest {
        volumes: names
            .iter()
            .map(|n| VolumeMount {
                name: (*n).into(),
                path: format!("/mnt/{n}"),
                read_only: false,
            })
            .collect(),
        ..Default::default()
    }
}

fn at(path: &str) -> String {
    path.into()
}

/// The node volume `name` was recorded on, which keeps it.
async fn volume_node(n: &Nodes, name: &str) -> &'static str {
    let v = n.h.cp.get_volume(name).await.expect("get");
    let node = v.node.expect("a cluster records the node");
    let home = NAMES.into_iter().find(|x| *x == node).expect("a node");
    assert_eq!(n.fake(home).volume_ids().len(), 1, "{home} keeps it");
    home
}

#[tokio::test]
async fn a_volume_stays_on_its_node_and_so_do_the_sandboxes_that_mount_it() {
    as_system(async {
        let n = Nodes::new().await;
        n.h.cp.create_volume(volume("data")).await.expect("create");
        let home = volume_node(&n, "data").await;
        let others: Vec<&str> = NAMES.into_iter().filter(|x| *x != home).collect();
        for o in &others {
            assert!(n.fake(o).volume_ids().is_empty(), "made on one node only");
        }

        // Its files go to its node.
        let body = Box::pin(futures::stream::iter([Ok(Bytes::from_static(b"kept"))]));
        n.h.cp
            .write_volume_file(
                "data",
                at("/notes/a.txt"),
                Default::default(),
                Some(4),
                body,
            )
            .await
            .expect("write");
        let (info, bytes) =
            n.h.cp
                .read_volume_file("data", at("notes/a.txt"))
                .await
                .expect("read");
        assert_eq!(info.size, 4);
        let read: Vec<Bytes> = bytes.map(|b| b.expect("bytes")).collect().await;
        assert_eq!(read.concat(), b"kept");
        let made =
            n.h.cp
                .make_volume_dir(
                    "data",
                    MakeVolumeDirRequest {
                        path: "/x/y".into(),
                        parents: None,
                        uid: None,
                        gid: None,
                        mode: Some(0o700),
                    },
                )
                .await
                .expect("mkdir");
        assert_eq!(made.mode, 0o700);
        n.h.cp
            .remove_volume_file("data", at("/x"))
            .await
            .expect("rm");
        assert_eq!(
            code(n.h.cp.stat_volume_file("data", at("/x/y")).await),
            ErrorCode::FileNotFound
        );
        let listed =
            n.h.cp
                .list_volume_files("data", None, Some(2))
                .await
                .expect("list");
        assert_eq!(listed.entries.len(), 2, "{listed:?}");
        assert_eq!(
            n.h.cp.get_volume("data").await.expect("get").used_bytes,
            Some(4)
        );

        // Every sandbox that mounts it is placed on its node, however full that node gets.
        let mut ids = Vec::new();
        for _ in 0..4 {
            let id = n.h.running_with(mounting(&["data"])).await;
            assert_eq!(n.cluster.node_of(&id).as_deref(), Some(home));
            let launch = n.fake(home).launch_of(&id).expect("launched");
            assert_eq!(launch.volumes[0].node.as_deref(), Some(home));
            ids.push(id);
        }
        // A suspended one wakes there too, though spread would pick another node (every fake
        // gets the snapshot, as a shared store would have it).
        n.h.apply(&ids[0], Suspend).await;
        for f in &n.fakes {
            f.add_snapshot(&ids[0]);
        }
        n.h.apply(&ids[0], Wake).await;
        assert_eq!(n.cluster.node_of(&ids[0]).as_deref(), Some(home));
        // So does a fork.
        let forked =
            n.h.cp
                .fork(
                    &ids[1],
                    ForkRequest {
                        count: 1,
                        ..Default::default()
                    },
                )
                .await
                .expect("fork");
        n.h.succeeds(&forked.sandboxes[0].operation).await;
        let fork = &forked.sandboxes[0].sandbox.id;
        assert_eq!(n.cluster.node_of(fork).as_deref(), Some(home));

        // The next volume goes to a node with fewer sandboxes; one sandbox cannot mount both.
        n.h.cp.create_volume(volume("logs")).await.expect("create");
        let logs_home = n.h.cp.get_volume("logs").await.expect("get").node;
        assert_ne!(logs_home.as_deref(), Some(home));
        let e =
            n.h.cp
                .create_sandbox(mounting(&["data", "logs"]), None)
                .await
                .expect_err("two nodes");
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
        let message = e.public_message();
        assert!(
            message.contains(home) && message.contains("one node"),
            "{message}"
        );

        // A drained node takes no sandbox that mounts its volumes: refused at once, naming it; a
        // wake fails and leaves the sandbox suspended; a fork is refused.
        n.h.apply(&ids[2], Suspend).await;
        for f in &n.fakes {
            f.add_snapshot(&ids[2]);
        }
        n.h.cp
            .set_node_state(home, NodeState::Draining)
            .await
            .expect("drain");
        let e =
            n.h.cp
                .create_sandbox(mounting(&["data"]), None)
                .await
                .expect_err("drained");
        assert_eq!(e.code(), ErrorCode::Unavailable);
        let message = e.public_message();
        assert!(
            message.contains(home) && message.contains("draining"),
            "{message}"
        );
        let op = n.h.call(&ids[2], Wake).await.expect("accepted");
        let failed =
            n.h.ends(
                &op,
                cove_api_types::OperationState::Failed,
                ErrorCode::Unavailable,
            )
            .await;
        let why = failed.error.expect("an error").message;
        assert!(why.contains(home) && why.contains("draining"), "{why}");
        assert_eq!(n.h.state(&ids[2]).await, SandboxState::Suspended);
        assert_eq!(
            code(
                n.h.cp
                    .fork(
                        &ids[1],
                        ForkRequest {
                            count: 1,
                            ..Default::default()
                        },
                    )
                    .await
            ),
            ErrorCode::Unavailable
        );
        // Its volumes' files are still served.
        n.h.cp
            .stat_volume_file("data", at("/notes/a.txt"))
            .await
            .expect("served while draining");
        n.h.cp
            .set_node_state(home, NodeState::Ready)
            .await
            .expect("ready");
        n.h.apply(&ids[2], Wake).await;
        assert_eq!(n.cluster.node_of(&ids[2]).as_deref(), Some(home));

        // Unmounted, the volume is deleted on its node.
        for id in ids.iter().chain([fork]) {
            let op = n.h.cp.delete_sandbox(id, None).await.expect("delete");
            n.h.succeeds(&op).await;
        }
        n.h.cp.delete_volume("data").await.expect("delete");
        assert!(n.fake(home).volume_ids().is_empty());
    })
    .await;
}

#[tokio::test]
async fn a_lost_nodes_volumes_answer_unavailable_and_stay_recorded() {
    as_system(async {
        let n = Nodes::new().await;
        n.h.cp.create_volume(volume("data")).await.expect("create");
        let home = volume_node(&n, "data").await;
        let alive: Vec<&str> = NAMES.into_iter().filter(|x| *x != home).collect();
        for _ in 0..6 {
            n.h.advance(Duration::from_secs(2)).await;
            n.beat(&alive).await;
        }
        n.h.controller_pass().await;
        assert_eq!(n.state_of(home), NodeState::Lost);

        let e =
            n.h.cp
                .stat_volume_file("data", at("/"))
                .await
                .expect_err("lost");
        assert_eq!(e.code(), ErrorCode::Unavailable);
        assert!(e.public_message().contains(home), "{e}");
        assert_eq!(
            code(n.h.cp.delete_volume("data").await),
            ErrorCode::Unavailable
        );
        assert_eq!(
            code(n.h.cp.create_sandbox(mounting(&["data"]), None).await),
            ErrorCode::Unavailable
        );
        // Still recorded (its use unknown), and still on its node.
        let v = n.h.cp.get_volume("data").await.expect("kept");
        assert_eq!((v.node.as_deref(), v.used_bytes), (Some(home), None));
        assert_eq!(n.fake(home).volume_ids().len(), 1);
        // New volumes go to the nodes left.
        n.h.cp.create_volume(volume("next")).await.expect("create");
        let next = n.h.cp.get_volume("next").await.expect("get").node;
        assert!(alive.contains(&next.as_deref().expect("a node")));

        // Back, it serves them again.
        n.beat(&NAMES).await;
        n.h.cp
            .stat_volume_file("data", at("/"))
            .await
            .expect("served");
        n.h.cp.delete_volume("data").await.expect("delete");
    })
    .await;
}

#[tokio::test]
async fn a_cluster_whose_nodes_keep_no_volumes_refuses_them_with_unsupported() {
    as_system(async {
        let fake = FakeNode::with_capabilities(NodeCapabilities {
            volumes: false,
            ..FakeNode::new().capabilities()
        });
        fake.add_release("base", 1);
        let cluster = Cluster::new(ClusterConfig {
            runtime: fake.capabilities().runtime,
            ..ClusterConfig::default()
        });
        let report = NodeReport::read(&fake).await.expect("report");
        cluster.join("a", "fake", Arc::new(fake.clone()), report, false);
        let h = Harness::with_cluster(fake.clone(), Some(cluster), |_| {}).await;
        let err =
            h.cp.create_volume(volume("data"))
                .await
                .expect_err("refused");
        assert_eq!(err.code(), ErrorCode::Unsupported);
        assert!(err.to_string().contains("keeps volumes"), "{err}");
        assert!(!h.cp.capabilities().volumes);
        assert!(fake.volume_ids().is_empty());
    })
    .await;
}
