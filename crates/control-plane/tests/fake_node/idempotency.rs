//! `Idempotency-Key`: the same key and body return the first operation (and sandbox); the same
//! key with another body is `idempotency_mismatch`.

use std::collections::BTreeMap;

use cove_api_types::{CreateSandboxRequest, ErrorCode, LifecycleRequest, SandboxState};
use cove_control_plane::LifecycleVerb::*;
use cove_test_support::Call;

use crate::harness::as_system;
use crate::harness::{code, Harness};

fn req(label: &str) -> CreateSandboxRequest {
    CreateSandboxRequest {
        metadata: BTreeMap::from([("label".to_string(), label.to_string())]),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_repeated_create_returns_the_first_sandbox_and_operation() {
    as_system(async {
        let h = Harness::new().await;
        let key = Some("create-1".to_string());
        let first =
            h.cp.create_sandbox(req("a"), key.clone())
                .await
                .expect("first");
        h.succeeds(&first.operation).await;
        let again =
            h.cp.create_sandbox(req("a"), key.clone())
                .await
                .expect("again");
        assert_eq!(again.sandbox.id, first.sandbox.id);
        assert_eq!(again.operation.id, first.operation.id);
        assert_eq!(again.sandbox.state, SandboxState::Running, "as it is now");
        assert_eq!(h.node.count(Call::Start), 1, "started once");
        let listed =
            h.cp.list_sandboxes(None, None, Vec::new(), None, None)
                .await
                .expect("list");
        assert_eq!(listed.sandboxes.len(), 1);

        let other = h.cp.create_sandbox(req("b"), key).await;
        assert_eq!(code(other), ErrorCode::IdempotencyMismatch);
        // Without a key every create is new.
        h.cp.create_sandbox(req("a"), None).await.expect("new");
        h.cp.create_sandbox(req("a"), Some("create-2".into()))
            .await
            .expect("new key");
        let listed =
            h.cp.list_sandboxes(None, None, Vec::new(), None, None)
                .await
                .expect("list");
        assert_eq!(listed.sandboxes.len(), 3);
    })
    .await;
}

#[tokio::test]
async fn a_repeated_lifecycle_call_returns_the_first_operation() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        let key = Some("pause-1".to_string());
        let body = LifecycleRequest {
            deadline_s: Some(60),
        };
        let first =
            h.cp.lifecycle(&id, Pause, body.clone(), key.clone())
                .await
                .expect("pause");
        h.succeeds(&first).await;
        let again =
            h.cp.lifecycle(&id, Pause, body, key.clone())
                .await
                .expect("replay");
        assert_eq!(again.id, first.id);
        assert_eq!(h.node.count(Call::Pause), 1);

        let other = LifecycleRequest {
            deadline_s: Some(61),
        };
        let mismatch = h.cp.lifecycle(&id, Pause, other, key.clone()).await;
        assert_eq!(code(mismatch), ErrorCode::IdempotencyMismatch);

        // The same key on another verb is another request.
        let resume =
            h.cp.lifecycle(&id, Resume, LifecycleRequest::default(), key)
                .await
                .expect("resume");
        assert_ne!(resume.id, first.id);
        h.succeeds(&resume).await;
        assert_eq!(h.state(&id).await, SandboxState::Running);
    })
    .await;
}

#[tokio::test]
async fn the_same_key_on_another_sandbox_is_a_mismatch() {
    as_system(async {
        let h = Harness::new().await;
        let a = h.running().await;
        let b = h.running().await;
        let key = Some("suspend-x".to_string());
        let op =
            h.cp.lifecycle(&a, Suspend, LifecycleRequest::default(), key.clone())
                .await
                .expect("suspend a");
        h.succeeds(&op).await;
        let on_b =
            h.cp.lifecycle(&b, Suspend, LifecycleRequest::default(), key)
                .await;
        assert_eq!(code(on_b), ErrorCode::IdempotencyMismatch);
        assert_eq!(h.state(&b).await, SandboxState::Running);
    })
    .await;
}
