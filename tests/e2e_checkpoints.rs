//! Checkpoints end to end on runc: a checkpoint is taken while the sandbox runs (a counter
//! process keeps counting after the brief freeze), rollback brings the checkpoint's files back
//! (changed, added and deleted ones) and ends the commands from after it, forks get the
//! parent's files with their own hostname, address and random bytes, and a sandbox is created
//! from a checkpoint after its source was deleted. An org's checkpoint retention removes its
//! oldest checkpoints from the store and the snapshot store.

use std::time::Duration;

use cove_api_types::{
    CheckpointState, CreateCheckpointRequest, CreateSandboxRequest, ErrorCode, ForkRequest,
    Operation, OperationState, SandboxState,
};
use cove_client::{Client, ClientError};
use cove_e2e::{client, delete, ensure_template, sandbox, server, sh};

const WAIT: Duration = Duration::from_secs(120);

async fn done(c: &Client, op: &Operation) -> Operation {
    let op = c
        .wait_operation(&op.id, WAIT)
        .await
        .expect("operation ends");
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "{:?} failed: {:?}",
        op.kind,
        op.error
    );
    op
}

async fn out(c: &Client, id: &str, line: &str) -> String {
    let o = sh(c, id, line).await;
    assert_eq!(o.command.exit_code, Some(0), "{line}: {}", o.stderr_text());
    o.stdout_text()
}

fn api_code(e: ClientError) -> Option<ErrorCode> {
    e.api_body().map(|b| b.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_while_running_then_rollback_restores_the_files() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    out(
        &c,
        &id,
        "cd /home/user && echo one > kept.txt && echo gone > deleted-later.txt && \
         mkdir -p dir && echo inner > dir/f",
    )
    .await;
    // A counter that runs through the checkpoint.
    c.create_command(
        &id,
        &cove_e2e::shell(
            "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done",
        ),
    )
    .await
    .expect("counter");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let r = c
        .create_checkpoint(
            &id,
            &CreateCheckpointRequest {
                name: Some("before".into()),
            },
            None,
        )
        .await
        .expect("checkpoint");
    assert_eq!(r.checkpoint.state, CheckpointState::Creating);
    done(&c, &r.operation).await;
    let ck = c.get_checkpoint(&r.checkpoint.id).await.expect("get");
    assert_eq!(ck.state, CheckpointState::Ready, "{ck:?}");
    assert!(!ck.memory, "runc saves files only");
    assert!(ck.file_bytes > 0);
    let pause_ms = ck.pause_ms.expect("pause measured");
    eprintln!("checkpoint froze the sandbox for {pause_ms} ms");
    // The sandbox kept running: the counter moves on.
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Running
    );
    let a: u64 = out(&c, &id, "cat /tmp/count")
        .await
        .trim()
        .parse()
        .expect("count");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b: u64 = out(&c, &id, "cat /tmp/count")
        .await
        .trim()
        .parse()
        .expect("count");
    assert!(
        b > a,
        "the counter stopped after the checkpoint ({a} then {b})"
    );

    out(
        &c,
        &id,
        "cd /home/user && echo two > kept.txt && rm deleted-later.txt && echo new > added.txt && \
         rm -r dir",
    )
    .await;
    let later = c
        .create_command(&id, &cove_e2e::shell("sleep 100000"))
        .await
        .expect("later command");

    let op = c.rollback_sandbox(&id, &ck.id).await.expect("rollback");
    done(&c, &op).await;
    let s = c.get_sandbox(&id).await.expect("get");
    assert_eq!(s.state, SandboxState::Running);
    assert_eq!(s.memory_restored, Some(false));
    let files = out(
        &c,
        &id,
        "cd /home/user && cat kept.txt deleted-later.txt dir/f && \
         (test -e added.txt && echo added-present || echo added-absent)",
    )
    .await;
    assert_eq!(files, "one\ngone\ninner\nadded-absent\n");
    // The command started after the checkpoint ended with the processes.
    let gone = c
        .get_command(&id, &later.command.id, None)
        .await
        .expect_err("the command is gone");
    assert_eq!(api_code(gone), Some(ErrorCode::CommandNotFound));

    // Listed, deleted, then unknown.
    let list = c.list_checkpoints(Some(&id)).await.expect("list");
    assert!(list.checkpoints.iter().any(|x| x.id == ck.id));
    c.delete_checkpoint(&ck.id)
        .await
        .expect("delete checkpoint");
    let e = c.get_checkpoint(&ck.id).await.expect_err("deleted");
    assert_eq!(api_code(e), Some(ErrorCode::CheckpointNotFound));
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_get_the_files_and_their_own_identity() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    out(&c, &id, "echo prepared > /home/user/state").await;
    let r = c
        .fork_sandbox(
            &id,
            &ForkRequest {
                count: 3,
                metadata: [("attempt".to_string(), "n".to_string())].into(),
            },
        )
        .await
        .expect("fork");
    assert_eq!(r.sandboxes.len(), 3);
    done(&c, &r.operation).await;
    let parent_net = c.sandbox_network(&id).await.expect("network");
    let mut hostnames = std::collections::BTreeSet::new();
    let mut randoms = std::collections::BTreeSet::new();
    let mut addresses = std::collections::BTreeSet::new();
    addresses.insert(parent_net.address.clone());
    hostnames.insert(out(&c, &id, "hostname").await);
    randoms.insert(out(&c, &id, "head -c 16 /dev/urandom | od -An -tx1").await);
    for fork in &r.sandboxes {
        done(&c, &fork.operation).await;
        let fid = &fork.sandbox.id;
        assert_eq!(out(&c, fid, "cat /home/user/state").await, "prepared\n");
        hostnames.insert(out(&c, fid, "hostname").await);
        randoms.insert(out(&c, fid, "head -c 16 /dev/urandom | od -An -tx1").await);
        let net = c.sandbox_network(fid).await.expect("network");
        addresses.insert(net.address.clone());
    }
    assert_eq!(hostnames.len(), 4, "{hostnames:?}");
    assert_eq!(randoms.len(), 4, "{randoms:?}");
    if parent_net.enforced {
        assert_eq!(addresses.len(), 4, "{addresses:?}");
    }
    for fork in &r.sandboxes {
        delete(&c, &fork.sandbox.id).await;
    }
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_is_created_from_a_checkpoint_of_a_deleted_sandbox() {
    let c = client();
    ensure_template(&c, "tiny").await;
    let id = sandbox(&c, "tiny").await;
    out(
        &c,
        &id,
        "echo saved > /home/user/data && mkdir -p /home/user/d",
    )
    .await;
    let r = c
        .create_checkpoint(&id, &CreateCheckpointRequest::default(), None)
        .await
        .expect("checkpoint");
    done(&c, &r.operation).await;
    delete(&c, &id).await;

    let resp = c
        .create_sandbox(
            &CreateSandboxRequest {
                checkpoint: Some(r.checkpoint.id.clone()),
                ..Default::default()
            },
            None,
        )
        .await
        .expect("create from checkpoint");
    done(&c, &resp.operation).await;
    let new = resp.sandbox.id;
    assert_eq!(out(&c, &new, "cat /home/user/data").await, "saved\n");
    assert_eq!(resp.sandbox.template, "tiny");
    // A create that also names a template is refused.
    let mixed = c
        .create_sandbox(
            &CreateSandboxRequest {
                checkpoint: Some(r.checkpoint.id.clone()),
                template: Some("tiny".into()),
                ..Default::default()
            },
            None,
        )
        .await
        .expect_err("refused");
    assert_eq!(api_code(mixed), Some(ErrorCode::InvalidArgument));
    delete(&c, &new).await;
    c.delete_checkpoint(&r.checkpoint.id).await.expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orgs_retention_removes_its_oldest_checkpoints_from_the_snapshot_store() {
    let s = server();
    let admin = client();
    ensure_template(&admin, "tiny").await;
    let org = format!("ck-retention-{}", std::process::id());
    admin
        .create_org_with(&cove_api_types::CreateOrgRequest {
            id: org.clone(),
            checkpoint_retention: cove_api_types::CheckpointRetention {
                max_per_sandbox: Some(1),
                max_age_s: None,
            },
            ..Default::default()
        })
        .await
        .expect("org");
    let key = admin.create_api_key(&org, "e2e").await.expect("key");
    let c = Client::new(&s.api_url, key.secret).expect("client");
    let id = sandbox(&c, "tiny").await;
    let on_disk = |ck: &str| s.data_dir.join("snapshots/checkpoints").join(ck).exists();
    let mut made = Vec::new();
    for _ in 0..3 {
        let r = c
            .create_checkpoint(&id, &CreateCheckpointRequest::default(), None)
            .await
            .expect("checkpoint");
        done(&c, &r.operation).await;
        // The newest checkpoint is never one the retention pass removes, so it is on disk
        // now whenever the (shared server's) minute pass runs; older ones may already be gone.
        assert!(on_disk(&r.checkpoint.id), "saved in the snapshot store");
        made.push(r.checkpoint.id);
    }

    // The retention pass runs every minute.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let left = loop {
        let left: Vec<String> = c
            .list_checkpoints(Some(&id))
            .await
            .expect("list")
            .checkpoints
            .into_iter()
            .map(|ck| ck.id)
            .collect();
        if left.len() == 1 || std::time::Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(left, [made[2].clone()], "the newest stays");
    assert!(
        !on_disk(&made[0]) && !on_disk(&made[1]),
        "the oldest are gone"
    );
    assert!(on_disk(&made[2]));
    delete(&c, &id).await;
}
