//! Services fail closed without a caller (`orgs::scope`): a call made outside any request and
//! not as the server is refused with `no caller in scope` (`500 internal`), never served as
//! "every org"; the same calls as the server (`Caller::system()`) succeed.

use cove_api_types::{CreateVolumeRequest, ErrorCode, PutPoolRequest};
use cove_control_plane::orgs::scope;
use cove_control_plane::ServiceError;

use crate::harness::as_system;
use crate::harness::Harness;

/// `r` is the refusal of a call without a caller.
fn refused<T: std::fmt::Debug>(what: &str, r: Result<T, ServiceError>) {
    match r {
        Err(e @ ServiceError::NoCaller) => {
            assert_eq!(e.code(), ErrorCode::Internal, "{what}");
            assert!(e.public_message().contains("no caller in scope"), "{what}");
        }
        other => panic!("{what} without a caller: {other:?}"),
    }
}

fn volume(name: &str) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        size_mib: 64,
        storage: Default::default(),
    }
}

fn pool(min_ready: u32) -> PutPoolRequest {
    PutPoolRequest {
        template: "base".into(),
        release: None,
        resources: None,
        min_ready,
        max: 2,
    }
}

#[tokio::test]
async fn service_calls_without_a_caller_are_refused_and_succeed_as_the_server() {
    let h = Harness::new().await;
    // Things to look up, made as the server.
    let (sandbox, op) = as_system(h.create_with(Default::default())).await;
    as_system(async {
        h.cp.create_volume(volume("kept")).await.expect("volume");
        h.cp.put_pool("warm", pool(0)).await.expect("pool");
    })
    .await;
    assert!(scope::current().is_none());

    // No caller in scope: every call is refused, and nothing is made.
    refused("get sandbox", h.cp.get_sandbox(&sandbox.id).await);
    refused(
        "list sandboxes",
        h.cp.list_sandboxes(None, None, Vec::new(), None, None)
            .await,
    );
    refused(
        "create sandbox",
        h.cp.create_sandbox(Default::default(), None).await,
    );
    refused("get template", h.cp.get_template("base").await);
    refused("list templates", h.cp.list_templates().await);
    refused(
        "build a release",
        h.cp.build_release("base", Default::default()).await,
    );
    refused("get volume", h.cp.get_volume("kept").await);
    refused("list volumes", h.cp.list_volumes().await);
    refused("create volume", h.cp.create_volume(volume("new")).await);
    refused("get pool", h.cp.get_pool("warm").await);
    refused("list pools", h.cp.list_pools().await);
    refused("put pool", h.cp.put_pool("cold", pool(0)).await);
    refused("get operation", h.cp.operations().get(&op.id).await);
    refused("list operations", h.cp.operations().list(None, None).await);
    refused("list orgs", h.cp.list_orgs().await);
    refused("audit", h.cp.list_audit(0, None, None).await);

    // The same calls as the server.
    as_system(async {
        assert_eq!(
            h.cp.get_sandbox(&sandbox.id).await.expect("get").id,
            sandbox.id
        );
        let listed =
            h.cp.list_sandboxes(None, None, Vec::new(), None, None)
                .await;
        assert_eq!(listed.expect("list").sandboxes.len(), 1);
        h.cp.create_sandbox(Default::default(), None)
            .await
            .expect("create");
        h.cp.get_template("base").await.expect("template");
        assert!(!h
            .cp
            .list_templates()
            .await
            .expect("list")
            .templates
            .is_empty());
        h.cp.build_release("base", Default::default())
            .await
            .expect("build");
        h.cp.get_volume("kept").await.expect("volume");
        h.cp.create_volume(volume("new"))
            .await
            .expect("create volume");
        assert_eq!(h.cp.list_volumes().await.expect("volumes").volumes.len(), 2);
        h.cp.get_pool("warm").await.expect("pool");
        h.cp.put_pool("cold", pool(0)).await.expect("put pool");
        assert_eq!(h.cp.list_pools().await.expect("pools").pools.len(), 2);
        h.cp.operations().get(&op.id).await.expect("operation");
        h.cp.list_orgs().await.expect("orgs");
        h.cp.list_audit(0, None, None).await.expect("audit");
    })
    .await;
}

#[tokio::test]
async fn a_spawned_task_keeps_no_caller_unless_it_is_given_one() {
    let h = Harness::new().await;
    let (sandbox, _) = as_system(h.create_with(Default::default())).await;
    let cp = h.cp.clone();
    let id = sandbox.id.clone();
    // Spawned from the server's scope without carrying it: refused.
    let bare =
        as_system(async move { tokio::spawn(async move { cp.get_sandbox(&id).await }).await })
            .await
            .expect("join");
    refused("get sandbox in a bare spawn", bare);
    // Given the server on purpose: served.
    let (cp, id) = (h.cp.clone(), sandbox.id.clone());
    let given = tokio::spawn(as_system(async move { cp.get_sandbox(&id).await }))
        .await
        .expect("join");
    assert_eq!(given.expect("served").id, sandbox.id);
}
