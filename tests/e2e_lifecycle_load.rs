//! 50 sandboxes created, paused, resumed and deleted concurrently: all end deleted, no call
//! fails, and nothing is left on the node.

use std::time::Duration;

use cove_api_types::{CreateSandboxRequest, OperationState, SandboxState};
use cove_client::Client;
use cove_e2e::{client, ensure_template, server};

const SANDBOXES: usize = 50;
const WAIT: Duration = Duration::from_secs(300);

async fn succeeded(c: &Client, op_id: &str, what: &str) {
    let op = c.wait_operation(op_id, WAIT).await.expect("operation ends");
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "{what}: {:?}",
        op.error
    );
}

async fn one_life(c: Client) -> String {
    let req = CreateSandboxRequest {
        template: Some("tiny".into()),
        ..Default::default()
    };
    let created = c.create_sandbox(&req, None).await.expect("create accepted");
    let id = created.sandbox.id.clone();
    succeeded(&c, &created.operation.id, "create").await;
    let op = c.pause_sandbox(&id).await.expect("pause accepted");
    succeeded(&c, &op.id, "pause").await;
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Paused
    );
    let op = c.resume_sandbox(&id).await.expect("resume accepted");
    succeeded(&c, &op.id, "resume").await;
    let op = c.delete_sandbox(&id).await.expect("delete accepted");
    succeeded(&c, &op.id, "delete").await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_sandboxes_created_paused_resumed_and_deleted_concurrently() {
    let c = client();
    ensure_template(&c, "tiny").await;
    let lives = (0..SANDBOXES).map(|_| tokio::spawn(one_life(c.clone())));
    let mut ids = Vec::new();
    for life in futures::future::join_all(lives).await {
        ids.push(life.expect("no panic"));
    }
    assert_eq!(ids.len(), SANDBOXES);
    for id in &ids {
        let err = c.get_sandbox(id).await.expect_err("deleted");
        assert_eq!(err.status(), Some(404));
    }
    let data_dir = &server().data_dir;
    assert!(
        cove_e2e::runc_containers(data_dir).is_empty(),
        "no containers left"
    );
    let left: Vec<_> = std::fs::read_dir(data_dir.join("sandboxes"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "no sandbox dirs left: {left:?}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(
        !mounts.contains(&data_dir.join("sandboxes").display().to_string()),
        "no mounts left"
    );
}
