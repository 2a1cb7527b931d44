//! Create: accepted `creating`, then `running` on the node; failures of the node fail it.

use cove_api_types::{
    CreateSandboxRequest, ErrorCode, EventType, OperationKind, OperationState, SandboxState,
};
use cove_domain::ResourcesRequest;
use cove_node_api::{NodeError, NodeSandboxState};
use cove_test_support::{Call, Fault};

use crate::harness::as_system;
use crate::harness::{code, Harness};

#[tokio::test]
async fn create_goes_from_creating_to_running_on_the_node() {
    as_system(async {
        let h = Harness::new().await;
        let req = CreateSandboxRequest {
            resources: Some(ResourcesRequest {
                vcpus: Some(2),
                memory_mib: Some(1024),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (s, op) = h.create_with(req).await;
        assert_eq!(s.state, SandboxState::Creating);
        assert_eq!(op.kind, OperationKind::CreateSandbox);
        assert_eq!(op.sandbox_id.as_deref(), Some(s.id.as_str()));
        assert_eq!((s.user.as_str(), s.cwd.as_str()), ("user", "/home/user"));
        h.succeeds(&op).await;

        assert_eq!(h.state(&s.id).await, SandboxState::Running);
        assert_eq!(h.node.state_of(&s.id), Some(NodeSandboxState::Running));
        let launch = h.node.launch_of(&s.id).expect("launched");
        assert_eq!((launch.template.as_str(), launch.release), ("base", 1));
        assert_eq!(
            (launch.resources.vcpus, launch.resources.memory_mib),
            (2, 1024)
        );
        assert_eq!(h.node.lifecycle_calls(&s.id), vec![Call::Start]);
        assert_eq!(
            h.events(&s.id).await,
            vec![EventType::SandboxCreated, EventType::SandboxRunning]
        );
        let listed =
            h.cp.list_sandboxes(None, None, Vec::new(), None, None)
                .await
                .expect("list");
        assert_eq!(listed.sandboxes.len(), 1);
    })
    .await;
}

#[tokio::test]
async fn create_refuses_unknown_templates_and_missing_releases_before_the_node() {
    as_system(async {
        let h = Harness::new().await;
        let unknown = CreateSandboxRequest {
            template: Some("nope".into()),
            ..Default::default()
        };
        assert_eq!(
            code(h.cp.create_sandbox(unknown, None).await),
            ErrorCode::TemplateNotFound
        );
        // `tiny` is a recipe of the node, but no release of it was built.
        let unbuilt = CreateSandboxRequest {
            template: Some("tiny".into()),
            ..Default::default()
        };
        assert_eq!(
            code(h.cp.create_sandbox(unbuilt, None).await),
            ErrorCode::ReleaseNotFound
        );
        let huge = CreateSandboxRequest {
            resources: Some(ResourcesRequest {
                vcpus: Some(1000),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            code(h.cp.create_sandbox(huge, None).await),
            ErrorCode::InvalidArgument
        );
        assert_eq!(h.node.count(Call::Start), 0);
    })
    .await;
}

#[tokio::test]
async fn a_start_failure_fails_the_sandbox_and_leaves_nothing_on_the_node() {
    as_system(async {
        let h = Harness::new().await;
        h.node.inject(
            Call::Start,
            Fault::fail(NodeError::Runtime("runc exploded".into())).after_effect(),
        );
        let (s, op) = h.create_with(Default::default()).await;
        let done = h
            .ends(&op, OperationState::Failed, ErrorCode::Internal)
            .await;
        // 5xx details stay in the log.
        assert!(!done.error.expect("error").message.contains("runc"));
        let sb = h.sandbox(&s.id).await;
        assert_eq!(sb.state, SandboxState::Failed);
        assert!(sb.state_reason.expect("reason").starts_with("start failed"));
        assert_eq!(
            h.node.lifecycle_calls(&s.id),
            vec![Call::Start, Call::Destroy]
        );
        assert_eq!(h.node.state_of(&s.id), None);
        assert_eq!(
            h.events(&s.id).await,
            vec![EventType::SandboxCreated, EventType::SandboxFailed]
        );
    })
    .await;
}

#[tokio::test]
async fn a_release_missing_on_the_node_fails_the_create_with_release_not_found() {
    as_system(async {
        let h = Harness::new().await;
        h.node.inject(
            Call::Start,
            Fault::fail(NodeError::ReleaseNotFound(
                "release 1 of base is gone".into(),
            )),
        );
        let (s, op) = h.create_with(Default::default()).await;
        h.ends(&op, OperationState::Failed, ErrorCode::ReleaseNotFound)
            .await;
        assert_eq!(h.state(&s.id).await, SandboxState::Failed);
    })
    .await;
}

#[tokio::test]
async fn a_create_may_name_the_servers_runtime_and_no_other() {
    as_system(async {
        let h = Harness::new().await;
        let other = CreateSandboxRequest {
            runtime: Some("firecracker".into()),
            ..Default::default()
        };
        assert_eq!(
            code(h.cp.create_sandbox(other, None).await),
            ErrorCode::InvalidArgument
        );
        assert!(h.node.sandbox_ids().is_empty(), "nothing started");
        let own = CreateSandboxRequest {
            runtime: Some(h.cp.capabilities().runtime),
            ..Default::default()
        };
        let (s, op) = h.create_with(own).await;
        h.succeeds(&op).await;
        assert_eq!(h.state(&s.id).await, SandboxState::Running);
    })
    .await;
}

/// Issue 12: the server's default own disk goes to every create (and pool) that names no size,
/// is shown in the capabilities, and a size in the request wins.
#[tokio::test]
async fn creates_without_a_disk_size_get_the_default_disk() {
    as_system(async {
        let h = Harness::with(cove_test_support::FakeNode::new(), |cfg| {
            cfg.default_disk_mib = Some(10240)
        })
        .await;
        assert_eq!(h.cp.capabilities().default_disk_mib, Some(10240));
        let (s, op) = h.create_with(CreateSandboxRequest::default()).await;
        h.succeeds(&op).await;
        assert_eq!(s.resources.disk_mib, Some(10240));
        let launch = h.node.launch_of(&s.id).expect("launched");
        assert_eq!(launch.resources.disk_mib, Some(10240));

        let req = CreateSandboxRequest {
            resources: Some(ResourcesRequest {
                disk_mib: Some(256),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (s, op) = h.create_with(req).await;
        h.succeeds(&op).await;
        assert_eq!(s.resources.disk_mib, Some(256));
    })
    .await;
}

/// Without a default (the library's default), a create without a size has no own disk.
#[tokio::test]
async fn without_a_default_disk_creates_have_none() {
    as_system(async {
        let off = Harness::new().await;
        assert_eq!(off.cp.capabilities().default_disk_mib, None);
        let (s, _) = off.create_with(CreateSandboxRequest::default()).await;
        assert_eq!(s.resources.disk_mib, None);
    })
    .await;
}

#[tokio::test]
async fn a_create_on_a_full_node_disk_is_no_space_and_records_nothing() {
    as_system(async {
        let h = Harness::new().await;
        h.node.set_disk_available(Some(1 << 20));
        let before = h.node.count(cove_test_support::Call::Start);
        let err =
            h.cp.create_sandbox(Default::default(), None)
                .await
                .expect_err("refused");
        assert_eq!(err.code(), cove_api_types::ErrorCode::NoSpace, "{err:?}");
        assert_eq!(h.node.count(cove_test_support::Call::Start), before);
        h.node.set_disk_available(Some(1 << 30));
        h.running().await;
    })
    .await;
}
