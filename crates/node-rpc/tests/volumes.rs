//! Volume calls over real gRPC on loopback (protocol v5): a FakeNode served by `NodeService`,
//! called through `RemoteNode` — create, usage, delete and typed errors (the fake keeps no
//! volume files, so its `Unsupported` answer to the file streams crosses the wire as it is).

#![allow(clippy::unwrap_used)]

mod common;

use common::{serve, TOKEN};

use std::sync::Arc;

use bytes::Bytes;
use cove_node_api::{NodeError, NodeVolumes};
use cove_node_rpc::RemoteNode;
use cove_test_support::FakeNode;

#[tokio::test]
async fn volume_calls_cross_the_wire() {
    let fake = FakeNode::new();
    let (addr, cert) = serve(Arc::new(fake.clone())).await;
    let remote = RemoteNode::connect(&addr, TOKEN, cert).await.unwrap();

    remote.create_volume("vol-1", 64).await.unwrap();
    assert_eq!(fake.volume_ids(), vec!["vol-1".to_string()]);
    assert!(matches!(
        remote.create_volume("vol-1", 64).await,
        Err(NodeError::AlreadyExists(_))
    ));
    let usage = remote.volume_usage("vol-1").await.unwrap();
    assert_eq!(usage.free_bytes, 64 << 20);
    assert!(matches!(
        remote.volume_usage("vol-nope").await,
        Err(NodeError::FileNotFound(_))
    ));

    // The streams open and carry the node's answer.
    assert!(matches!(
        remote
            .read_volume_file("vol-1", "/a".into())
            .await
            .map(|_| ()),
        Err(NodeError::Unsupported(_))
    ));
    let body = Box::pin(futures::stream::iter(vec![Ok(Bytes::from_static(b"x"))]));
    assert!(matches!(
        remote
            .write_volume_file("vol-1", "/a".into(), Default::default(), body)
            .await,
        Err(NodeError::Unsupported(_))
    ));
    assert!(matches!(
        remote.list_volume_dir("vol-1", "/".into(), 1).await,
        Err(NodeError::Unsupported(_))
    ));

    remote.delete_volume("vol-1").await.unwrap();
    assert!(fake.volume_ids().is_empty());
}
