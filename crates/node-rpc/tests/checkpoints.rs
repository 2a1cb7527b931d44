//! Checkpoints over real gRPC on loopback (protocol v5): a FakeNode served by `NodeService`,
//! called through `RemoteNode` — checkpoint, restore into another sandbox, export (a server
//! stream) and import (a client stream) round trip, typed errors, and cancellation.

#![allow(clippy::unwrap_used)]

mod common;

use common::{launch, serve, TOKEN};

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cove_node_api::{
    NodeCheckpoints, NodeError, NodeFiles, NodeLifecycle, SandboxPath, WriteFileRequest,
};
use cove_node_rpc::RemoteNode;
use cove_test_support::{Call, FakeNode, Fault};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

fn body(bytes: Vec<u8>) -> cove_node_api::ByteStream {
    // Several chunks, so the upload is a real stream.
    let chunks: Vec<Result<Bytes, std::io::Error>> = bytes
        .chunks(7)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures::stream::iter(chunks))
}

#[tokio::test]
async fn checkpoints_cross_the_wire() {
    let fake = FakeNode::new();
    fake.add_release("base", 1);
    let (addr, cert) = serve(Arc::new(fake.clone())).await;
    let remote = RemoteNode::connect(&addr, TOKEN, cert).await.unwrap();
    remote.start_sandbox(launch("sbx-1")).await.unwrap();
    let write = WriteFileRequest {
        path: SandboxPath::from("/tmp/kept"),
        user: None,
        mode: None,
        max_bytes: None,
    };
    remote
        .write_file("sbx-1", write, body(b"kept".to_vec()))
        .await
        .unwrap();

    // A checkpoint, and a new sandbox restored from it with the file.
    let info = remote
        .checkpoint_sandbox("sbx-1", "ck-1", CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(info.file_bytes, 4);
    assert_eq!(fake.checkpoint_ids(), vec!["ck-1".to_string()]);
    remote
        .restore_checkpoint(launch("sbx-2"), "ck-1", CancellationToken::new())
        .await
        .unwrap();
    let (_, bytes) = remote
        .read_file("sbx-2", SandboxPath::from("/tmp/kept"), None, 0, None)
        .await
        .unwrap();
    let read: Vec<u8> = bytes.map(|b| b.unwrap().to_vec()).concat().await;
    assert_eq!(read, b"kept");

    // Export streams the archive down; import streams it up as another checkpoint.
    let header = Bytes::from_static(b"{\"of\":\"sbx-1\"}");
    let archive: Vec<u8> = remote
        .export_checkpoint("ck-1", header.clone())
        .await
        .unwrap()
        .map(|b| b.unwrap().to_vec())
        .concat()
        .await;
    assert!(archive.starts_with(&header));
    let imported = remote
        .import_checkpoint(
            "ck-2",
            body(archive.clone()),
            1 << 20,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(imported.header, header);
    assert_eq!(imported.file_bytes, 4);
    assert_eq!(
        remote
            .import_checkpoint("ck-3", body(archive), 8, CancellationToken::new())
            .await
            .map(|_| ()),
        Err(NodeError::TooLarge("archive too large".into())),
        "the node's limit is carried"
    );

    // Typed errors cross the wire: a missing checkpoint, a missing sandbox.
    remote.delete_checkpoint("ck-1").await.unwrap();
    assert!(matches!(
        remote.export_checkpoint("ck-1", header).await.map(|_| ()),
        Err(NodeError::InvalidArgument { field, .. }) if field == "checkpoint"
    ));
    assert!(matches!(
        remote
            .restore_checkpoint(launch("sbx-3"), "ck-1", CancellationToken::new())
            .await,
        Err(NodeError::InvalidArgument { field, .. }) if field == "checkpoint"
    ));
    assert_eq!(
        remote
            .checkpoint_sandbox("sbx-nope", "ck-4", CancellationToken::new())
            .await,
        Err(NodeError::SandboxNotFound("sbx-nope".into()))
    );
    let mut ids = fake.checkpoint_ids();
    ids.sort();
    assert_eq!(ids, vec!["ck-2".to_string()]);
}

#[tokio::test]
async fn a_cancelled_checkpoint_ends_on_the_caller_and_keeps_nothing() {
    let fake = FakeNode::new();
    fake.add_release("base", 1);
    let (addr, cert) = serve(Arc::new(fake.clone())).await;
    let remote = RemoteNode::connect(&addr, TOKEN, cert).await.unwrap();
    remote.start_sandbox(launch("sbx-1")).await.unwrap();
    fake.inject(Call::Checkpoint, Fault::hang());
    let cancel = CancellationToken::new();
    let call = {
        let (remote, cancel) = (remote.clone(), cancel.clone());
        tokio::spawn(async move { remote.checkpoint_sandbox("sbx-1", "ck-1", cancel).await })
    };
    for _ in 0..100 {
        if fake.count(Call::Checkpoint) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fake.count(Call::Checkpoint), 1, "the call reached the node");
    cancel.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended, Err(NodeError::Cancelled));
    assert!(fake.checkpoint_ids().is_empty());
}
