//! Checkpoints on the qemu runtime (TCG here), one VM: a checkpoint saves memory while the VM
//! keeps running, and a rollback brings back both the files and the running counter process
//! (it continues from where the checkpoint caught it). Skipped (passes with a message) without
//! `qemu-system-x86_64`.

use std::time::Duration;

use cove_api_types::{CreateCheckpointRequest, CreateCommandRequest, OperationState};
use cove_client::Client;
use cove_e2e::{client_of, delete, sandbox, server_with, sh, shell, Server};

fn qemu_server() -> &'static Server {
    server_with(|cfg| {
        cfg.runtime = cove_server::RuntimeChoice::Qemu;
    })
}

async fn wait_ok(c: &Client, op: &cove_api_types::Operation) {
    let op = c
        .wait_operation(&op.id, Duration::from_secs(300))
        .await
        .expect("operation ends");
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "{:?}: {:?}",
        op.kind,
        op.error
    );
}

async fn count(c: &Client, id: &str) -> u64 {
    sh(c, id, "cat /tmp/count")
        .await
        .stdout_text()
        .trim()
        .parse()
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_restores_files_and_the_running_counter() {
    if !cove_e2e::have_qemu() {
        return;
    }
    let c = client_of(qemu_server());
    let id = sandbox(&c, "tiny").await;
    c.create_command(
        &id,
        &CreateCommandRequest {
            user: Some("root".into()),
            ..shell("i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done")
        },
    )
    .await
    .expect("counter");
    sh(&c, &id, "echo before > /tmp/f").await;
    tokio::time::sleep(Duration::from_millis(800)).await;

    let r = c
        .create_checkpoint(&id, &CreateCheckpointRequest::default(), None)
        .await
        .expect("checkpoint");
    wait_ok(&c, &r.operation).await;
    let ck = c.get_checkpoint(&r.checkpoint.id).await.expect("get");
    assert!(ck.memory, "qemu saves memory: {ck:?}");
    eprintln!("qemu checkpoint pause: {:?} ms", ck.pause_ms);
    // The VM runs on after the checkpoint.
    let a = count(&c, &id).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let b = count(&c, &id).await;
    assert!(
        b > a,
        "the counter stopped after the checkpoint ({a} then {b})"
    );
    sh(&c, &id, "echo after > /tmp/f").await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let before_rollback = count(&c, &id).await;

    let op = c.rollback_sandbox(&id, &ck.id).await.expect("rollback");
    wait_ok(&c, &op).await;
    let s = c.get_sandbox(&id).await.expect("get");
    assert_eq!(s.memory_restored, Some(true));
    assert_eq!(sh(&c, &id, "cat /tmp/f").await.stdout_text(), "before\n");
    let x = count(&c, &id).await;
    assert!(
        x < before_rollback,
        "the counter went back ({x} vs {before_rollback})"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let y = count(&c, &id).await;
    assert!(y > x, "the restored counter keeps counting ({x} then {y})");

    c.delete_checkpoint(&ck.id)
        .await
        .expect("delete checkpoint");
    delete(&c, &id).await;
}
