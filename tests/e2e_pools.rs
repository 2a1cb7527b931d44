//! Warm pools on a real server with runc: a pool fills, a matching create is served
//! `running` at once and runs a command with the env and metadata given at claim, the pool
//! refills, and deleting the pool drains it (its members' containers go).

use std::time::{Duration, Instant};

use cove_api_types::{
    CreateSandboxRequest, ErrorCode, OperationState, Pool, PutPoolRequest, SandboxState,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_serves_creates_running_refills_and_drains() {
    let c = client();
    ensure_template(&c, "tiny").await;
    let put = PutPoolRequest {
        template: "tiny".into(),
        release: None,
        resources: None,
        min_ready: 2,
        max: 2,
    };
    let p = c.put_pool("e2e-warm", &put).await.expect("put pool");
    assert_eq!((p.min_ready, p.max, p.hits), (2, 2, 0));
    pool_until(&c, "e2e-warm", Duration::from_secs(120), |p| p.ready == 2).await;
    let containers = runc_containers(&server().data_dir);
    assert_eq!(containers.len(), 2, "{containers:?}");
    let listed = c
        .list_sandboxes(&ListSandboxes::default())
        .await
        .expect("list");
    assert!(
        listed.sandboxes.iter().all(|s| !containers.contains(&s.id)),
        "members are not listed"
    );

    let req = CreateSandboxRequest {
        template: Some("tiny".into()),
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
    assert_eq!(runc_containers(&server().data_dir).len(), 3);
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
