//! Command creates with an `Idempotency-Key`: a retry returns the first command with a new
//! token (never a second process), another body is `idempotency_mismatch`, and after the
//! sandbox's processes restarted the retry is told so (`guest_restarted`).

use cove_api_types::{CreateCommandRequest, ErrorCode};
use cove_control_plane::LifecycleVerb::*;
use cove_node_api::NodeError;
use cove_test_support::{Call, Fault, Script};

use crate::harness::as_system;
use crate::harness::{code, Harness};

fn shell(s: &str) -> CreateCommandRequest {
    CreateCommandRequest {
        shell: Some(s.into()),
        ..Default::default()
    }
}

fn key(k: &str) -> Option<String> {
    Some(k.to_string())
}

#[tokio::test]
async fn a_retried_create_returns_the_first_command_with_a_new_token() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.script("sleep 100", Script::running());
        let first =
            h.cp.create_command_idempotent(&id, shell("sleep 100"), key("run-1"))
                .await
                .expect("first");
        let again =
            h.cp.create_command_idempotent(&id, shell("sleep 100"), key("run-1"))
                .await
                .expect("retry");
        assert_eq!(again.command.id, first.command.id);
        assert_eq!(h.node.count_on(Call::Spawn, &id), 1, "one process");
        assert_ne!(again.attachment.token, first.attachment.token);
        assert_eq!(
            h.cp.authorize_attachment(&first.command.id, &again.attachment.token)
                .await
                .expect("new token works"),
            id
        );
        assert_eq!(
            code(
                h.cp.authorize_attachment(&first.command.id, &first.attachment.token)
                    .await
            ),
            ErrorCode::Unauthorized,
            "the old token stops working"
        );
        // Another key is another command; no key never deduplicates.
        let other =
            h.cp.create_command_idempotent(&id, shell("sleep 100"), key("run-2"))
                .await
                .expect("other key");
        assert_ne!(other.command.id, first.command.id);
        h.cp.create_command(&id, shell("sleep 100"))
            .await
            .expect("no key");
        h.cp.create_command(&id, shell("sleep 100"))
            .await
            .expect("no key");
        assert_eq!(h.node.count_on(Call::Spawn, &id), 4);
    })
    .await;
}

#[tokio::test]
async fn the_same_key_with_another_body_is_a_mismatch() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.cp.create_command_idempotent(&id, shell("echo a"), key("k"))
            .await
            .expect("first");
        assert_eq!(
            code(
                h.cp.create_command_idempotent(&id, shell("echo b"), key("k"))
                    .await
            ),
            ErrorCode::IdempotencyMismatch
        );
        // Keys are per sandbox.
        let other = h.running().await;
        h.cp.create_command_idempotent(&other, shell("echo b"), key("k"))
            .await
            .expect("another sandbox");
        assert_eq!(h.node.count(Call::Spawn), 2);
    })
    .await;
}

#[tokio::test]
async fn a_failed_start_frees_its_key() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.inject(
            Call::Spawn,
            Fault::fail(NodeError::SpawnFailed("fork: EAGAIN".into())),
        );
        assert_eq!(
            code(
                h.cp.create_command_idempotent(&id, shell("true"), key("k"))
                    .await
            ),
            ErrorCode::Unavailable
        );
        h.cp.create_command_idempotent(&id, shell("true"), key("k"))
            .await
            .expect("retry starts it");
    })
    .await;
}

#[tokio::test]
async fn a_retry_after_the_processes_restarted_says_so() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.script("sleep 100", Script::running());
        let first =
            h.cp.create_command_idempotent(&id, shell("sleep 100"), key("k"))
                .await
                .expect("first");
        h.apply(&id, Suspend).await;
        h.apply(&id, Wake).await;
        assert_eq!(
            code(
                h.cp.create_command_idempotent(&id, shell("sleep 100"), key("k"))
                    .await
            ),
            ErrorCode::GuestRestarted
        );
        assert_eq!(h.node.count_on(Call::Spawn, &id), 1, "no second process");
        assert_eq!(
            code(h.cp.get_command(&id, &first.command.id, None).await),
            ErrorCode::CommandNotFound
        );
        assert_eq!(
            code(
                h.cp.authorize_attachment(&first.command.id, &first.attachment.token)
                    .await
            ),
            ErrorCode::Unauthorized
        );
    })
    .await;
}
