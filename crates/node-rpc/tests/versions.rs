//! Per-method protocol versions over real gRPC on loopback: a control plane and a node of
//! different versions keep working for the methods both know, and a call to a method newer
//! than the shared version fails at the caller with `Unsupported` naming the method and both
//! versions (not a refusal of every call).

#![allow(clippy::unwrap_used)]

mod common;

use common::{launch, serve, serve_service, TOKEN};

use std::sync::Arc;

use cove_node_api::{NodeError, NodeFiles, NodeLifecycle, SandboxPath, XattrsRequest};
use cove_node_rpc::{Method, NodeService, RemoteNode, PROTOCOL_FLOOR, PROTOCOL_VERSION};
use cove_test_support::FakeNode;

fn xattrs_of_root() -> XattrsRequest {
    XattrsRequest {
        paths: vec![SandboxPath::from("/")],
        user: None,
        namespace: "user.".into(),
    }
}

/// Old methods work across versions; `xattrs` (v10) fails locally, by name.
async fn old_methods_work_and_the_new_one_is_named(remote: &RemoteNode) {
    assert_eq!(remote.protocol_version(), PROTOCOL_VERSION - 1);
    remote.start_sandbox(launch("sbx-1")).await.unwrap();
    assert_eq!(remote.list_sandboxes().await.unwrap().len(), 1);
    remote.inspect_sandbox("sbx-1").await.unwrap();
    let e = remote.xattrs("sbx-1", xattrs_of_root()).await.unwrap_err();
    let NodeError::Unsupported(message) = &e else {
        panic!("not Unsupported: {e:?}")
    };
    assert!(
        message.contains("xattrs")
            && message.contains(&format!("v{}", Method::Xattrs.since()))
            && message.contains(&format!("v{}", PROTOCOL_VERSION - 1)),
        "{message}"
    );
    // Refused at the caller: sent on, it would have met the fake's own refusal (newer
    // node) or the older node's FAILED_PRECONDITION (`NodeUnreachable`).
    assert!(!message.contains("fake node"), "{message}");
    remote.destroy_sandbox("sbx-1").await.unwrap();
}

#[tokio::test]
async fn a_control_plane_one_version_behind_keeps_working_for_the_methods_it_has() {
    assert_eq!(Method::Xattrs.since(), PROTOCOL_VERSION);
    let fake = FakeNode::new();
    fake.add_release("base", 1);
    let (addr, cert) = serve(Arc::new(fake.clone())).await;
    let remote = RemoteNode::connect_speaking(&addr, TOKEN, cert, PROTOCOL_VERSION - 1)
        .await
        .unwrap();
    old_methods_work_and_the_new_one_is_named(&remote).await;
}

#[tokio::test]
async fn a_node_one_version_behind_keeps_working_for_the_methods_it_has() {
    let fake = FakeNode::new();
    fake.add_release("base", 1);
    let service = NodeService::new(Arc::new(fake.clone()), TOKEN).speaking(PROTOCOL_VERSION - 1);
    let (addr, cert) = serve_service(service).await;
    let remote = RemoteNode::connect(&addr, TOKEN, cert).await.unwrap();
    old_methods_work_and_the_new_one_is_named(&remote).await;
}

#[tokio::test]
async fn peers_of_the_same_version_carry_the_newest_methods() {
    const { assert!(PROTOCOL_FLOOR < PROTOCOL_VERSION) };
    let fake = FakeNode::new();
    fake.add_release("base", 1);
    let (addr, cert) = serve(Arc::new(fake.clone())).await;
    let remote = RemoteNode::connect(&addr, TOKEN, cert).await.unwrap();
    assert_eq!(remote.protocol_version(), PROTOCOL_VERSION);
    remote.start_sandbox(launch("sbx-1")).await.unwrap();
    // The call reaches the fake node, which answers with its own refusal (it keeps none).
    let e = remote.xattrs("sbx-1", xattrs_of_root()).await.unwrap_err();
    assert!(
        matches!(&e, NodeError::Unsupported(m) if m.contains("fake node")),
        "{e:?}"
    );
}
