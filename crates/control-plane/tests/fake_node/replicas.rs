//! Two control-plane replicas on one PostgreSQL (each its own `PgStore`, so its own
//! connections, in one schema of the database at `COVE_TEST_POSTGRES_URL`) over one fake
//! node, racing each other: creates of one org never exceed its quota, nor do wakes, and a
//! volume delete racing a create that mounts the volume never leaves a mount of a deleted
//! volume. Each race
//! is first forced (a create through one replica hangs in the node while holding what it
//! checked; the other replica's call must wait for it), then run free many times.
//!
//! Real time (the replicas wait on PostgreSQL); without the URL the cases are skipped, and
//! fail under CI.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use cove_api_types::{
    CreateOrgRequest, CreateSandboxRequest, CreateVolumeRequest, ErrorCode, LifecycleRequest,
    OperationState, Quotas, SandboxState, VolumeMount,
};
use cove_control_plane::{ControlPlane, ControlPlaneConfig, LifecycleVerb, ServiceError};
use cove_store::{PgStore, SandboxFilter, Store, StoreError};
use cove_test_support::{postgres_url, Call, FakeNode, Fault};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::harness::{as_org, as_system};

/// Two replicas on one schema, and the node they share.
struct Replicas {
    a: ControlPlane,
    b: ControlPlane,
    node: FakeNode,
    stores: [Arc<dyn Store>; 2],
    url: String,
    schema: String,
}

impl Replicas {
    /// A fresh schema, two replicas on it, release 1 of `base` built; `None` when skipped.
    async fn start() -> Option<Replicas> {
        let url = postgres_url()?;
        let schema = format!("cove_replicas_{:08x}", rand::random::<u32>());
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(&url)
            .await
            .expect("connect");
        sqlx::query(&format!("CREATE SCHEMA \"{schema}\""))
            .execute(&admin)
            .await
            .expect("create schema");
        admin.close().await;
        let node = FakeNode::new();
        let mut stores = Vec::new();
        let mut cps = Vec::new();
        for _ in 0..2 {
            let opts = PgConnectOptions::from_str(&url)
                .expect("url")
                .options([("search_path", schema.as_str())]);
            let store: Arc<dyn Store> = Arc::new(PgStore::connect_with(opts).await.expect("store"));
            let cfg = ControlPlaneConfig::new("http://127.0.0.1:9");
            cps.push(ControlPlane::new(
                store.clone(),
                Arc::new(node.clone()),
                cfg,
            ));
            stores.push(store);
        }
        let (b, a) = (cps.pop().expect("b"), cps.pop().expect("a"));
        let r = Replicas {
            a,
            b,
            node,
            stores: [stores[0].clone(), stores[1].clone()],
            url,
            schema,
        };
        let built =
            r.a.build_release("base", Default::default())
                .await
                .expect("build");
        r.settled(&built.operation.id).await;
        r.a.create_org(CreateOrgRequest {
            id: "acme".into(),
            quotas: Quotas {
                max_sandboxes: Some(2),
                ..Quotas::default()
            },
            ..Default::default()
        })
        .await
        .expect("org");
        Some(r)
    }

    /// Waits (at most a minute) for operation `id` to end; returns its final state.
    async fn settled(&self, id: &str) -> OperationState {
        for _ in 0..60 {
            let op = self
                .a
                .operations()
                .wait(id, Duration::from_secs(1))
                .await
                .expect("wait");
            if op.state.is_final() {
                return op.state;
            }
        }
        panic!("operation {id} did not end");
    }

    /// Every sandbox of acme not deleted.
    async fn sandboxes(&self) -> Vec<cove_api_types::Sandbox> {
        let f = SandboxFilter {
            org: Some("acme".into()),
            limit: 1000,
            ..Default::default()
        };
        self.stores[0].list_sandboxes(&f).await.expect("list")
    }

    /// Mounts `(sandbox, volume)` of sandboxes not deleted whose volume is gone.
    async fn mounts_of_deleted_volumes(&self) -> Vec<(String, String)> {
        let mut bad = Vec::new();
        for s in self.sandboxes().await {
            for m in &s.volumes {
                match self.stores[1].get_volume("acme", &m.name).await {
                    Ok(_) => {}
                    Err(StoreError::NotFound) => bad.push((s.id.clone(), m.name.clone())),
                    Err(e) => panic!("get volume: {e}"),
                }
            }
        }
        bad
    }

    /// Deletes every sandbox of acme and waits for the deletes.
    async fn delete_all(&self) {
        for s in self.sandboxes().await {
            if s.state == SandboxState::Deleting {
                continue;
            }
            if let Ok(op) = as_org("acme", self.a.delete_sandbox(&s.id, None)).await {
                self.settled(&op.id).await;
            }
        }
    }

    async fn stop(self) {
        for s in &self.stores {
            s.close().await;
        }
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(&self.url)
            .await
            .expect("connect");
        sqlx::query(&format!("DROP SCHEMA \"{}\" CASCADE", self.schema))
            .execute(&admin)
            .await
            .expect("drop schema");
        admin.close().await;
    }
}

/// A create of acme through `cp`, run on a task of its own.
fn create(
    cp: &ControlPlane,
    req: CreateSandboxRequest,
) -> tokio::task::JoinHandle<Result<String, ServiceError>> {
    let cp = cp.clone();
    tokio::spawn(async move {
        as_org("acme", cp.create_sandbox(req, None))
            .await
            .map(|r| r.sandbox.id)
    })
}

fn mounting(volume: &str) -> CreateSandboxRequest {
    CreateSandboxRequest {
        volumes: vec![VolumeMount {
            name: volume.into(),
            path: "/data".into(),
            read_only: false,
        }],
        ..Default::default()
    }
}

/// A volume delete of acme through `cp`, run on a task of its own.
fn delete_volume(
    cp: &ControlPlane,
    name: &str,
) -> tokio::task::JoinHandle<Result<(), ServiceError>> {
    let cp = cp.clone();
    let name = name.to_string();
    tokio::spawn(async move { as_org("acme", cp.delete_volume(&name)).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_of_one_org_through_two_replicas_never_exceed_its_quota() {
    as_system(async {
        let Some(r) = Replicas::start().await else {
            return;
        };
        // Forced: a create through A holds the org's quota check while the node answers it; two
        // through B meanwhile wait for it, then one fits and one is refused.
        r.node.inject(Call::Capacity, Fault::hang());
        let first = create(&r.a, CreateSandboxRequest::default());
        r.node.wait_for_calls(Call::Capacity, 1).await;
        let second = create(&r.b, CreateSandboxRequest::default());
        let third = create(&r.b, CreateSandboxRequest::default());
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !second.is_finished() && !third.is_finished(),
            "B checked acme's quota while A held it"
        );
        r.node.release(Call::Capacity);
        let mut outcomes = Vec::new();
        for t in [first, second, third] {
            outcomes.push(t.await.expect("task"));
        }
        let admitted = outcomes.iter().filter(|o| o.is_ok()).count();
        for e in outcomes.into_iter().filter_map(Result::err) {
            assert_eq!(e.code(), ErrorCode::QuotaExceeded, "{e}");
        }
        assert_eq!(admitted, 2, "max_sandboxes is 2");
        assert_eq!(r.sandboxes().await.len(), 2);

        // Free: rounds of 12 creates at once, alternating replicas (the node answers each
        // capacity question after 20 ms, as a busy one would: a wide window between check and
        // record).
        r.node.inject(
            Call::Capacity,
            Fault::delay(Duration::from_millis(20)).always(),
        );
        for round in 0..4 {
            r.delete_all().await;
            let tasks: Vec<_> = (0..12)
                .map(|i| {
                    let cp = if i % 2 == 0 { &r.a } else { &r.b };
                    create(cp, CreateSandboxRequest::default())
                })
                .collect();
            let mut admitted = 0;
            for t in tasks {
                match t.await.expect("task") {
                    Ok(_) => admitted += 1,
                    Err(e) => assert_eq!(e.code(), ErrorCode::QuotaExceeded, "{e}"),
                }
            }
            let alive = r.sandboxes().await.len();
            assert_eq!(admitted, 2, "round {round}: {admitted} creates admitted");
            assert_eq!(alive, 2, "round {round}: {alive} sandboxes of acme");
            let usage = r.stores[1].org_usage("acme").await.expect("usage");
            assert_eq!(usage.sandboxes, 2, "round {round}");
        }
        r.delete_all().await;
        r.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_volume_delete_racing_a_create_that_mounts_it_never_leaves_a_mount_of_a_deleted_volume() {
    as_system(async {
        let Some(r) = Replicas::start().await else {
            return;
        };
        let volume = |name: &str| CreateVolumeRequest {
            name: name.into(),
            size_mib: 64,
            storage: Default::default(),
        };
        as_org("acme", r.a.create_volume(volume("data")))
            .await
            .expect("volume");
        // Forced: a create through B that mounts `data` hangs in the node after checking the
        // volume; a delete of `data` through A meanwhile waits for it, then finds it mounted.
        r.node.inject(Call::Capacity, Fault::hang());
        let seen = r.node.count(Call::Capacity);
        let made = create(&r.b, mounting("data"));
        r.node.wait_for_calls(Call::Capacity, seen + 1).await;
        let deleted = delete_volume(&r.a, "data");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !deleted.is_finished(),
            "A deleted the volume while B's create that mounts it was between check and record"
        );
        r.node.release(Call::Capacity);
        let id = made.await.expect("task").expect("create");
        let e = deleted.await.expect("task").expect_err("mounted");
        assert_eq!(e.code(), ErrorCode::VolumeInUse, "{e}");
        assert!(r.mounts_of_deleted_volumes().await.is_empty());
        let op = as_org("acme", r.a.delete_sandbox(&id, None))
            .await
            .expect("delete");
        r.settled(&op.id).await;

        // Free: a delete and a create that mounts the volume at once, through either replica.
        for round in 0..8 {
            let name = format!("vol-{round}");
            as_org("acme", r.a.create_volume(volume(&name)))
                .await
                .expect("volume");
            let (creator, deleter) = if round % 2 == 0 {
                (&r.a, &r.b)
            } else {
                (&r.b, &r.a)
            };
            let made = create(creator, mounting(&name));
            let deleted = delete_volume(deleter, &name);
            let made = made.await.expect("task");
            let deleted = deleted.await.expect("task");
            match (&made, &deleted) {
                (Ok(_), Err(e)) => assert_eq!(e.code(), ErrorCode::VolumeInUse, "{e}"),
                (Err(e), Ok(())) => assert_eq!(e.code(), ErrorCode::VolumeNotFound, "{e}"),
                other => panic!("round {round}: {other:?}"),
            }
            let bad = r.mounts_of_deleted_volumes().await;
            assert!(bad.is_empty(), "round {round}: {bad:?}");
            r.delete_all().await;
        }
        r.stop().await;
    })
    .await;
}

/// A lifecycle call on acme's sandbox `id` through `cp`, run on a task of its own; the final
/// state of its operation, or the refusal of the call.
fn lifecycle(
    r: &Replicas,
    cp: &ControlPlane,
    id: &str,
    verb: LifecycleVerb,
) -> tokio::task::JoinHandle<Result<OperationState, ServiceError>> {
    let (cp, settler, id) = (cp.clone(), r.a.clone(), id.to_string());
    tokio::spawn(as_system(async move {
        let op = as_org(
            "acme",
            cp.lifecycle(&id, verb, LifecycleRequest::default(), None),
        )
        .await?;
        loop {
            let done = settler
                .operations()
                .wait(&op.id, Duration::from_secs(1))
                .await?;
            if done.state.is_final() {
                return Ok(done.state);
            }
        }
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wakes_of_one_org_through_two_replicas_never_exceed_its_quota() {
    as_system(async {
        let Some(r) = Replicas::start().await else {
            return;
        };
        r.a.set_org_quotas(
            "acme",
            Quotas {
                max_running: Some(1),
                ..Quotas::default()
            },
        )
        .await
        .expect("quotas");
        let mut ids = Vec::new();
        for _ in 0..2 {
            let made = as_org(
                "acme",
                r.a.create_sandbox(CreateSandboxRequest::default(), None),
            )
            .await
            .expect("create");
            assert_eq!(
                r.settled(&made.operation.id).await,
                OperationState::Succeeded
            );
            let id = made.sandbox.id;
            let st = lifecycle(&r, &r.a, &id, LifecycleVerb::Suspend).await;
            assert_eq!(
                st.expect("task").expect("suspend"),
                OperationState::Succeeded
            );
            ids.push(id);
        }
        for round in 0..6 {
            let woken = [
                lifecycle(&r, &r.a, &ids[0], LifecycleVerb::Wake),
                lifecycle(&r, &r.b, &ids[1], LifecycleVerb::Wake),
            ];
            for w in woken {
                match w.await.expect("task") {
                    Ok(OperationState::Succeeded | OperationState::Failed) => {}
                    Ok(other) => panic!("round {round}: {other:?}"),
                    Err(e) => assert_eq!(e.code(), ErrorCode::QuotaExceeded, "{e}"),
                }
            }
            let running: Vec<_> = r
                .sandboxes()
                .await
                .into_iter()
                .filter(|s| s.state != SandboxState::Suspended)
                .collect();
            assert_eq!(running.len(), 1, "round {round}: {running:?}");
            let back = lifecycle(&r, &r.b, &running[0].id, LifecycleVerb::Suspend);
            assert_eq!(
                back.await.expect("task").expect("suspend"),
                OperationState::Succeeded
            );
        }
        r.delete_all().await;
        r.stop().await;
    })
    .await;
}
