//! Create → exec → files persist between commands → delete, with list/get reflecting states.

use cove_api_types::{ErrorCode, SandboxState};
use cove_client::ListSandboxes;
use cove_e2e::{client, delete, sandbox, sh};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_exec_persist_delete() {
    let c = client();
    let id = sandbox(&c, "tiny").await;

    let got = c.get_sandbox(&id).await.expect("get");
    assert_eq!(got.state, SandboxState::Running);
    assert_eq!(got.template, "tiny");
    let listed = c
        .list_sandboxes(&ListSandboxes::default())
        .await
        .expect("list");
    assert!(listed
        .sandboxes
        .iter()
        .any(|s| s.id == id && s.state == SandboxState::Running));

    let w = sh(
        &c,
        &id,
        "echo hello-from-one > /tmp/state.txt && echo written",
    )
    .await;
    assert_eq!(w.stdout_text(), "written\n");
    assert_eq!(w.command.exit_code, Some(0));
    let r = sh(&c, &id, "cat /tmp/state.txt; hostname").await;
    assert_eq!(r.stdout_text(), format!("hello-from-one\n{id}\n"));

    delete(&c, &id).await;
    let err = c
        .get_sandbox(&id)
        .await
        .expect_err("deleted sandbox is gone");
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::SandboxNotFound)
    );
    let listed = c
        .list_sandboxes(&ListSandboxes::default())
        .await
        .expect("list");
    assert!(!listed.sandboxes.iter().any(|s| s.id == id));
    // Deleting twice: documented as 404 sandbox_not_found.
    let err = c.delete_sandbox(&id).await.expect_err("second delete");
    assert_eq!(err.status(), Some(404));
    // Nothing is left on the node.
    let dir = cove_e2e::server().data_dir.join("sandboxes").join(&id);
    assert!(!dir.exists(), "sandbox dir left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_template_is_404_and_creates_nothing() {
    let c = client();
    let before = c
        .list_sandboxes(&ListSandboxes::default())
        .await
        .expect("list")
        .sandboxes
        .len();
    let req = cove_api_types::CreateSandboxRequest {
        template: Some("no-such-template-xyz".into()),
        ..Default::default()
    };
    let err = c
        .create_sandbox(&req, None)
        .await
        .expect_err("unknown template");
    assert_eq!(err.status(), Some(404));
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::TemplateNotFound)
    );
    let after = c
        .list_sandboxes(&ListSandboxes::default())
        .await
        .expect("list")
        .sandboxes
        .len();
    assert_eq!(before, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_create_returns_the_same_sandbox() {
    let c = client();
    cove_e2e::ensure_template(&c, "tiny").await;
    let req = cove_api_types::CreateSandboxRequest {
        template: Some("tiny".into()),
        ..Default::default()
    };
    let a = c.create_sandbox(&req, Some("key-1")).await.expect("first");
    let b = c.create_sandbox(&req, Some("key-1")).await.expect("replay");
    assert_eq!(a.sandbox.id, b.sandbox.id);
    assert_eq!(a.operation.id, b.operation.id);
    let other = cove_api_types::CreateSandboxRequest {
        template: Some("tiny".into()),
        metadata: [("k".to_string(), "v".to_string())].into(),
        ..Default::default()
    };
    let err = c
        .create_sandbox(&other, Some("key-1"))
        .await
        .expect_err("mismatch");
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::IdempotencyMismatch)
    );
    c.wait_operation(&a.operation.id, std::time::Duration::from_secs(60))
        .await
        .expect("wait");
    delete(&c, &a.sandbox.id).await;
}
