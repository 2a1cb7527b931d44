//! Warm pools on a real server with runc: a pool fills, a matching create is served
//! `running` at once and runs a command with the env and metadata given at claim, the pool
//! refills, and deleting the pool drains it (its members' containers go).

use std::time::{Duration, Instant};

use std::collections::BTreeSet;

use cove_api_types::{
    CreateSandboxRequest, ErrorCode, OperationState, Pool, PutPoolRequest, ResourcesRequest,
    SandboxState,
};
use cove_client::{Client, ListSandboxes};
use cove_e2e::{client, delete, ensure_template, runc_containers, server, sh};

/// Polls pool `name` (every 100 ms, at most `within`) until `done` holds.
async fn pool_until(
    c: &Client,
    name: &str,
    within: Duration,
    done: impl Fn(&Pool) -> bool,
) -> Pool {
    let start = Instant::now();
    loop {
        let p = c.pool(name).await.expect("get pool");
        if done(&p) {
            return p;
        }
        assert!(
            start.elapsed() < within,
            "pool {name} never got there: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A size no other test of this binary asks for, so only this test's creates match the pool.
fn pool_size() -> Option<ResourcesRequest> {
    Some(ResourcesRequest {
        memory_mib: Some(320),
        ..Default::default()
    })
}

/// Containers on the node that no listed sandbox owns: the pool members (a sandbox is listed
/// from its create on, before its container exists, and until its container is gone).
async fn members(c: &Client) -> BTreeSet<String> {
    let all = ListSandboxes {
        limit: Some(500),
        ..Default::default()
    };
    let listed: BTreeSet<String> = c
        .list_sandboxes(&all)
        .await
        .expect("list")
        .sandboxes
        .into_iter()
        .map(|s| s.id)
        .collect();
    runc_containers(&server().data_dir)
        .into_iter()
        .filter(|id| !listed.contains(id))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_serves_creates_running_refills_and_drains() {
    let c = client();
    ensure_template(&c, "tiny").await;
    let put = PutPoolRequest {
        template: "tiny".into(),
        release: None,
        resources: pool_size(),
        min_ready: 2,
        max: 2,
    };
    let p = c.put_pool("e2e-warm", &put).await.expect("put pool");
    assert_eq!((p.min_ready, p.max, p.hits), (2, 2, 0));
    pool_until(&c, "e2e-warm", Duration::from_secs(120), |p| p.ready == 2).await;
    // The next pass may retire and replace a member just counted ready (one that failed or no
    // longer fits): wait, bounded, for two unlisted containers rather than read one instant.
    let start = Instant::now();
    let containers = loop {
        let now = members(&c).await;
        if now.len() == 2 || start.elapsed() > Duration::from_secs(60) {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        containers.len(),
        2,
        "members run but are not listed: {containers:?}, pool {:?}",
        c.pool("e2e-warm").await
    );

    let req = CreateSandboxRequest {
        template: Some("tiny".into()),
        resources: pool_size(),
        env: [("CLAIMED_AS".to_string(), "pool-e2e".to_string())].into(),
        metadata: [("suite".to_string(), "pools".to_string())].into(),
        cwd: Some("/tmp".into()),
        ..Default::default()
    };
    let created = c.create_sandbox(&req, None).await.expect("create");
    let id = created.sandbox.id.clone();
    assert_eq!(
        created.sandbox.state,
        SandboxState::Running,
        "served running"
    );
    assert_eq!(created.operation.state, OperationState::Succeeded);
    assert!(containers.contains(&id), "a member was claimed");
    let out = sh(&c, &id, "echo $CLAIMED_AS; pwd; hostname").await;
    assert_eq!(out.stdout_text(), format!("pool-e2e\n/tmp\n{id}\n"));
    let got = c.get_sandbox(&id).await.expect("get");
    assert_eq!(got.metadata.get("suite").map(String::as_str), Some("pools"));
    let listed = c
        .list_sandboxes(&ListSandboxes::default())
        .await
        .expect("list");
    assert!(
        listed.sandboxes.iter().any(|s| s.id == id),
        "claimed is listed"
    );

    let p = pool_until(&c, "e2e-warm", Duration::from_secs(120), |p| p.ready == 2).await;
    assert_eq!((p.hits, p.misses), (1, 0));
    let now = members(&c).await;
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(!now.contains(&id));
    assert!(runc_containers(&server().data_dir).contains(&id));
    let all = c.pools().await.expect("list pools");
    assert!(all.pools.iter().any(|p| p.name == "e2e-warm"));

    c.delete_pool("e2e-warm").await.expect("delete pool");
    let err = c.pool("e2e-warm").await.expect_err("gone");
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::PoolNotFound)
    );
    let start = Instant::now();
    loop {
        let left = runc_containers(&server().data_dir);
        if left.len() == 1 {
            assert!(left.contains(&id), "the claimed sandbox stays: {left:?}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not drained: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    delete(&c, &id).await;
}

/// Pause and resume write the cgroup freezer: runc sees the sandbox paused, and its
/// processes and files are there after the resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_through_the_freezer_keep_processes_and_files() {
    let c = client();
    let id = cove_e2e::sandbox(&c, "tiny").await;
    sh(&c, &id, "echo kept > /tmp/freezer-file").await;
    let long = cove_api_types::CreateCommandRequest {
        argv: Some(vec!["sleep".into(), "600".into()]),
        ..Default::default()
    };
    let started = c.create_command(&id, &long).await.expect("start sleep");
    let cid = started.command.id.clone();

    let op = c.pause_sandbox(&id).await.expect("pause");
    let op = c
        .wait_operation(&op.id, Duration::from_secs(60))
        .await
        .expect("pause ends");
    assert_eq!(op.state, OperationState::Succeeded, "{op:?}");
    let state = std::process::Command::new("runc")
        .arg("--root")
        .arg(server().data_dir.join("runc"))
        .args(["state", &id])
        .output()
        .expect("runc state");
    let state = String::from_utf8_lossy(&state.stdout);
    assert!(state.contains("\"status\": \"paused\""), "{state}");

    let op = c.resume_sandbox(&id).await.expect("resume");
    let op = c
        .wait_operation(&op.id, Duration::from_secs(60))
        .await
        .expect("resume ends");
    assert_eq!(op.state, OperationState::Succeeded, "{op:?}");
    let cmd = c.get_command(&id, &cid, None).await.expect("command");
    assert_eq!(cmd.state, cove_api_types::CommandState::Running, "{cmd:?}");
    let line = format!(
        "cat /tmp/freezer-file; tr '\\0' ' ' < /proc/{}/cmdline",
        cmd.pid
    );
    let out = sh(&c, &id, &line).await;
    assert_eq!(
        out.stdout_text(),
        "kept\nsleep 600 ",
        "the same process runs on"
    );
    delete(&c, &id).await;
}
