//! Checkpoints on a cluster of real processes: `cove server --no-local-node` and two `cove
//! node` agents (each in its own network namespace, runc, `--network off`) sharing a snapshot
//! store on a real S3 server (`s3s-fs` on the test's bridge). A checkpoint taken on one node
//! creates a sandbox on the other (the first drains) with the file it held; a fork of two
//! spreads over both nodes; a rollback runs on the sandbox's own node; an archive exported
//! through the cluster imports back as a new checkpoint that starts a sandbox; deleting a
//! checkpoint removes its objects from the bucket.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use cove_api_types::{CheckpointState, CreateCheckpointRequest, CreateSandboxRequest, ForkRequest};
use cove_e2e::sandbox;
use futures::StreamExt;

mod cluster;
// Shared with nodes.rs, which also cuts links.
#[allow(dead_code)]
mod netns;
use cluster::{start, until, Cluster, Snapshots};

const NODES: [&str; 2] = ["ck1", "ck2"];

async fn write(c: &Cluster, id: &str, text: &str) {
    c.client
        .upload(id, "/tmp/state.txt", text.to_string(), &Default::default())
        .await
        .unwrap();
}

async fn read(c: &Cluster, id: &str) -> String {
    String::from_utf8(c.client.read_file(id, "/tmp/state.txt").await.unwrap()).unwrap()
}

/// Creates a sandbox from checkpoint `ck` and waits until it runs; returns its id.
async fn from_checkpoint(c: &Cluster, ck: &str) -> String {
    let req = CreateSandboxRequest {
        checkpoint: Some(ck.to_string()),
        ..Default::default()
    };
    let resp = c.client.create_sandbox(&req, None).await.unwrap();
    c.wait_op(resp.operation).await;
    resp.sandbox.id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_restore_fork_roll_back_and_travel_across_nodes() {
    let c = start(&NODES, Snapshots::S3).await;
    let s3 = c.s3.as_ref().unwrap();
    // Always built: the harness's "built once" record is per process.
    cove_e2e::build_template(&c.client, "tiny").await;
    let src = sandbox(&c.client, "tiny").await;
    let a = c.node_of(&src).unwrap();
    let b = NODES.into_iter().find(|n| *n != a).unwrap();
    write(&c, &src, "at the checkpoint").await;

    // A checkpoint on the sandbox's node, kept in the bucket.
    let made = c
        .client
        .create_checkpoint(&src, &CreateCheckpointRequest::default(), None)
        .await
        .unwrap();
    c.wait_op(made.operation).await;
    let ck = c.client.get_checkpoint(&made.checkpoint.id).await.unwrap();
    assert_eq!(ck.state, CheckpointState::Ready, "{ck:?}");
    assert!(s3.bytes_named(&ck.id) > 0, "{:?}", s3.objects());
    write(&c, &src, "after the checkpoint").await;

    // A create from it lands on the other node (the first drains) with the checkpoint's file.
    c.client.drain_node(a).await.unwrap();
    let restored = from_checkpoint(&c, &ck.id).await;
    assert_eq!(c.node_of(&restored), Some(b));
    assert_eq!(read(&c, &restored).await, "at the checkpoint");
    c.client.ready_node(a).await.unwrap();

    // A fork of two: one sandbox per node (each holds one sandbox, so spread alternates),
    // both with the parent's files as they are now.
    let fork = c
        .client
        .fork_sandbox(
            &src,
            &ForkRequest {
                count: 2,
                metadata: Default::default(),
            },
        )
        .await
        .unwrap();
    c.wait_op(fork.operation).await;
    let mut placed = BTreeSet::new();
    for child in fork.sandboxes {
        c.wait_op(child.operation).await;
        let id = child.sandbox.id;
        placed.insert(c.node_of(&id).unwrap());
        assert_eq!(read(&c, &id).await, "after the checkpoint");
    }
    assert_eq!(
        placed,
        BTreeSet::from(NODES),
        "the forks spread over both nodes"
    );

    // A rollback runs where the sandbox is.
    c.wait_op(c.client.rollback_sandbox(&src, &ck.id).await.unwrap())
        .await;
    assert_eq!(c.node_of(&src), Some(a));
    assert_eq!(read(&c, &src).await, "at the checkpoint");

    // Export through the cluster, import it back as a new checkpoint, start a sandbox of it
    // on the other node this time.
    let mut archive = Vec::new();
    let mut body = Box::pin(c.client.checkpoint_archive(&ck.id).await.unwrap());
    while let Some(chunk) = body.next().await {
        archive.extend_from_slice(&chunk.unwrap());
    }
    assert!(
        archive.len() > 1024,
        "a tar of the checkpoint: {} bytes",
        archive.len()
    );
    let copy = c
        .client
        .import_checkpoint(archive, Some("copy"))
        .await
        .unwrap();
    assert_eq!(copy.state, CheckpointState::Ready, "{copy:?}");
    assert!(s3.bytes_named(&copy.id) > 0, "{:?}", s3.objects());
    c.client.drain_node(b).await.unwrap();
    let imported = from_checkpoint(&c, &copy.id).await;
    assert_eq!(c.node_of(&imported), Some(a));
    assert_eq!(read(&c, &imported).await, "at the checkpoint");

    // Deleting a checkpoint removes its objects from the shared store.
    c.client.delete_checkpoint(&ck.id).await.unwrap();
    until(
        "the checkpoint's objects to go",
        Duration::from_secs(30),
        || async { s3.bytes_named(&ck.id) == 0 },
    )
    .await;
}
