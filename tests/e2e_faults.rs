//! Issue 12, faults: a corrupted snapshot object makes its wake fail with the clear code
//! `snapshot_corrupt` (not `internal`), the sandbox stays suspended and can be deleted, and
//! nothing else is affected: another suspended sandbox wakes with its files.

use std::time::Duration;

use cove_api_types::{ErrorCode, OperationState, SandboxState};
use cove_client::Client;
use cove_e2e::{client, delete, sandbox, server, sh};

async fn run_op(c: &Client, op: cove_api_types::Operation) -> cove_api_types::Operation {
    c.wait_operation(&op.id, Duration::from_secs(120))
        .await
        .expect("operation finishes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_snapshot_fails_its_wake_with_a_clear_code() {
    let c = client();
    let damaged = sandbox(&c, "tiny").await;
    let intact = sandbox(&c, "tiny").await;
    for id in [&damaged, &intact] {
        assert_eq!(
            sh(&c, id, "echo kept > /home/user/f && echo ok")
                .await
                .stdout_text(),
            "ok\n"
        );
        let op = run_op(&c, c.suspend_sandbox(id).await.expect("suspend")).await;
        assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
    }
    let object = server()
        .data_dir
        .join("snapshots/sandboxes")
        .join(&damaged)
        .join("fs.tar");
    let len = std::fs::metadata(&object).expect("snapshot object").len();
    // Not a tar stream any more: garbage of the same length.
    std::fs::write(&object, vec![0x5a_u8; len as usize]).expect("corrupt");

    let op = run_op(&c, c.wake_sandbox(&damaged).await.expect("wake")).await;
    assert_eq!(op.state, OperationState::Failed);
    let error = op.error.expect("an error");
    assert_eq!(error.code, ErrorCode::SnapshotCorrupt, "{error:?}");
    let s = c.get_sandbox(&damaged).await.expect("get");
    assert_eq!(s.state, SandboxState::Suspended, "{s:?}");

    // Nothing else is affected.
    let op = run_op(&c, c.wake_sandbox(&intact).await.expect("wake")).await;
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
    assert_eq!(
        sh(&c, &intact, "cat /home/user/f").await.stdout_text(),
        "kept\n"
    );
    delete(&c, &damaged).await;
    delete(&c, &intact).await;
}
