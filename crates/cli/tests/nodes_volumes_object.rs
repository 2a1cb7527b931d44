//! Object volumes on a cluster of real processes: `cove server --no-local-node` and two `cove
//! node` agents (each in its own network namespace, runc, `--network off`) sharing a snapshot
//! store on a real S3 server (`s3s-fs` on the test's bridge). A sandbox writes to an object
//! volume on node A and is suspended (A uploads the volume and drops its copy); A is drained;
//! the wake lands on B, which downloads the volume first, and the file is there.

#![allow(clippy::unwrap_used)]

use cove_api_types::{
    CreateSandboxRequest, CreateVolumeRequest, NodeState, VolumeMount, VolumeStorage,
};
use cove_e2e::{delete, sandbox_with, sh};

mod cluster;
// Shared with nodes.rs, which also cuts links.
#[allow(dead_code)]
mod netns;
use cluster::{start, Snapshots};

const NODES: [&str; 2] = ["ov1", "ov2"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_volume_wakes_with_its_sandbox_on_another_node() {
    let c = start(&NODES, Snapshots::S3).await;
    // Always built: the harness's "built once" record is per process.
    cove_e2e::build_template(&c.client, "tiny").await;
    let made = c
        .client
        .create_volume_with(&CreateVolumeRequest {
            name: "roams".into(),
            size_mib: 64,
            storage: VolumeStorage::Object,
        })
        .await
        .unwrap();
    assert_eq!(made.storage, VolumeStorage::Object);
    let image_on = |node: &str| {
        std::fs::read_dir(c.root.join(node).join("volumes"))
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| !e.file_name().to_string_lossy().starts_with('.'))
                })
                .count()
            })
            .unwrap_or(0)
    };

    let req = CreateSandboxRequest {
        volumes: vec![VolumeMount {
            name: "roams".into(),
            path: "/data".into(),
            read_only: false,
        }],
        ..Default::default()
    };
    let sb = sandbox_with(&c.client, "tiny", req).await;
    let a = c.node_of(&sb).unwrap();
    let b = NODES.into_iter().find(|n| *n != a).unwrap();
    let out = sh(&c.client, &sb, "echo travelled > /data/note && sync").await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());

    // Suspended: uploaded to the bucket, on no node.
    c.wait_op(c.client.suspend_sandbox(&sb).await.unwrap())
        .await;
    let v = c.client.volume("roams").await.unwrap();
    assert_eq!((v.node.as_deref(), v.used_bytes), (None, None), "{v:?}");
    assert_eq!(image_on(a), 0);
    let s3 = c.s3.as_ref().unwrap();
    assert!(s3.bytes_named("/volumes/") > 0, "{:?}", s3.objects());

    // A drains; the wake lands on B with the volume's data.
    let drained = c.client.drain_node(a).await.unwrap();
    assert_eq!(drained.state, NodeState::Draining);
    c.wait_op(c.client.wake_sandbox(&sb).await.unwrap()).await;
    assert_eq!(c.node_of(&sb).unwrap(), b);
    assert_eq!(
        c.client.volume("roams").await.unwrap().node.as_deref(),
        Some(b)
    );
    assert_eq!(image_on(b), 1);
    let out = sh(&c.client, &sb, "cat /data/note").await;
    assert_eq!(out.stdout_text(), "travelled\n", "{}", out.stderr_text());

    delete(&c.client, &sb).await;
    c.client.delete_volume("roams").await.unwrap();
    assert_eq!(image_on(b), 0);
    assert_eq!(s3.bytes_named("/volumes/"), 0, "{:?}", s3.objects());
}
