//! Quotas cover everything an org holds: its warm pools' members (claimed or not), sandboxes in
//! every state but `deleted` (`max_sandboxes`: suspended and failed ones too; failed ones are
//! alive for `max_running` until deleted), disk (`max_disk_mib`: the sandboxes' own disks and
//! the org's volumes) and snapshot bytes (`max_snapshot_mib`: checkpoints, imports, suspended
//! sandboxes' snapshots); a wake is checked too.

use cove_api_types::{
    CreateCheckpointRequest, CreateOrgRequest, CreateSandboxRequest, CreateVolumeRequest,
    ErrorCode, ForkRequest, LifecycleRequest, Operation, OperationState, OrgUsage, PutPoolRequest,
    Quotas, ResourcesRequest, SandboxState,
};
use cove_control_plane::{LifecycleVerb, SandboxPath, ServiceError, WriteOptions};
use cove_node_api::NodeError;
use cove_test_support::{Call, Fault};
use futures::StreamExt;

use crate::harness::{as_org, as_system};
use crate::harness::{code, eventually, Harness};

async fn org_with(h: &Harness, quotas: Quotas) {
    h.cp.create_org(CreateOrgRequest {
        id: "acme".into(),
        quotas,
        ..Default::default()
    })
    .await
    .expect("org");
}

fn size(vcpus: u32, memory_mib: u64, disk_mib: u64) -> Option<ResourcesRequest> {
    Some(ResourcesRequest {
        vcpus: Some(vcpus),
        memory_mib: Some(memory_mib),
        pids_max: None,
        disk_mib: Some(disk_mib),
    })
}

fn sized(vcpus: u32, memory_mib: u64, disk_mib: u64) -> CreateSandboxRequest {
    CreateSandboxRequest {
        resources: size(vcpus, memory_mib, disk_mib),
        ..Default::default()
    }
}

fn pool(min_ready: u32, max: u32, memory_mib: u64) -> PutPoolRequest {
    PutPoolRequest {
        template: "base".into(),
        release: None,
        resources: size(1, memory_mib, 1024),
        min_ready,
        max,
    }
}

/// A running sandbox of acme made by `req`.
async fn running(h: &Harness, req: CreateSandboxRequest) -> String {
    let r = as_org("acme", h.cp.create_sandbox(req, None))
        .await
        .expect("create");
    h.succeeds(&r.operation).await;
    r.sandbox.id
}

async fn members(h: &Harness, name: &str) -> (u32, u32) {
    let p = as_org("acme", h.cp.get_pool(name)).await.expect("pool");
    (p.ready, p.starting)
}

/// Runs pool passes, each followed by a bounded wait until no member of the org's pools is
/// still starting (members boot on tasks of their own: on a loaded machine one pass's members
/// may not have settled by the next).
async fn pool_passes(h: &Harness) {
    for _ in 0..3 {
        h.cp.reconcile_pools().await.expect("pool pass");
        h.advance(std::time::Duration::from_secs(1)).await;
        eventually("pool members to settle", || async {
            as_org("acme", h.cp.list_pools())
                .await
                .expect("pools")
                .pools
                .iter()
                .all(|p| p.starting == 0)
        })
        .await;
    }
}

async fn suspend(h: &Harness, id: &str) {
    let op = as_org(
        "acme",
        h.cp.lifecycle(
            id,
            LifecycleVerb::Suspend,
            LifecycleRequest::default(),
            None,
        ),
    )
    .await
    .expect("suspend");
    h.succeeds(&op).await;
    assert_eq!(h.state(id).await, SandboxState::Suspended);
}

async fn wake(h: &Harness, id: &str) -> Result<Operation, ServiceError> {
    as_org(
        "acme",
        h.cp.lifecycle(id, LifecycleVerb::Wake, LifecycleRequest::default(), None),
    )
    .await
}

#[tokio::test]
async fn an_org_capped_at_one_sandbox_and_512_mib_gets_no_pool_of_four_2_gib_members() {
    as_system(async {
        let h = Harness::new().await;
        org_with(
            &h,
            Quotas {
                max_running: Some(1),
                max_memory_mib: Some(512),
                ..Quotas::default()
            },
        )
        .await;
        let refused = as_org("acme", h.cp.put_pool("warm", pool(4, 4, 2048))).await;
        let e = refused.expect_err("past the quotas");
        assert_eq!(e.code(), ErrorCode::QuotaExceeded);
        assert!(e.public_message().contains("max_running"), "{e}");
        // A pool that asks for no ready member is set, but the controller boots none past the
        // quotas, however many passes run.
        as_org("acme", h.cp.put_pool("warm", pool(0, 4, 2048)))
            .await
            .expect("min_ready 0 holds nothing");
        as_org("acme", h.cp.put_pool("warm", pool(1, 4, 2048)))
            .await
            .expect_err("one 2 GiB member is past 512 MiB");
        pool_passes(&h).await;
        assert_eq!(h.node.sandbox_ids().len(), 0, "no member booted");
    })
    .await;
}

#[tokio::test]
async fn pool_members_count_toward_their_org_and_the_controller_stops_at_its_quotas() {
    as_system(async {
        let h = Harness::new().await;
        org_with(
            &h,
            Quotas {
                max_running: Some(2),
                max_memory_mib: Some(1024),
                ..Quotas::default()
            },
        )
        .await;
        let other = running(&h, sized(2, 256, 1024)).await;
        // Two 512 MiB members alone fit; beside the 256 MiB sandbox only one does.
        as_org("acme", h.cp.put_pool("warm", pool(2, 2, 512)))
            .await
            .expect("pool");
        pool_passes(&h).await;
        assert_eq!(
            members(&h, "warm").await,
            (1, 0),
            "one member, then the quota"
        );
        assert_eq!(h.node.sandbox_ids().len(), 2);
        // The org's usage shows the member beside its sandbox.
        let usage = as_org("acme", h.cp.get_org("acme"))
            .await
            .expect("org")
            .usage
            .expect("usage");
        assert_eq!(
            usage,
            OrgUsage {
                running: 2,
                vcpus: 3,
                memory_mib: 768,
                sandboxes: 2,
                disk_mib: 2048,
                snapshot_mib: 0,
            }
        );

        // The member counts: a cold start of the org is past max_running.
        let cold = as_org("acme", h.cp.create_sandbox(sized(2, 128, 1024), None)).await;
        assert_eq!(code(cold), ErrorCode::QuotaExceeded);
        // A create the member serves holds nothing more: it is claimed though the org is full.
        let want = CreateSandboxRequest {
            resources: pool(0, 1, 512).resources,
            ..Default::default()
        };
        let served = as_org("acme", h.cp.create_sandbox(want, None))
            .await
            .expect("served by the pool");
        assert_eq!(served.sandbox.state, SandboxState::Running);
        pool_passes(&h).await;
        assert_eq!(
            members(&h, "warm").await,
            (0, 0),
            "no refill past the quota"
        );

        // Room made, the next pass refills.
        let del = as_org("acme", h.cp.delete_sandbox(&other, None))
            .await
            .expect("delete");
        h.settle(&del.id).await;
        pool_passes(&h).await;
        assert_eq!(
            members(&h, "warm").await,
            (1, 0),
            "refilled within the quota"
        );
    })
    .await;
}

#[tokio::test]
async fn max_sandboxes_counts_suspended_sandboxes_and_is_checked_on_create_and_fork() {
    as_system(async {
        let h = Harness::new().await;
        org_with(
            &h,
            Quotas {
                max_sandboxes: Some(2),
                max_running: Some(1),
                ..Quotas::default()
            },
        )
        .await;
        let first = running(&h, sized(1, 256, 1024)).await;
        suspend(&h, &first).await;
        // Suspended, it holds no CPU: a second one runs beside it.
        let second = running(&h, sized(1, 256, 1024)).await;
        suspend(&h, &second).await;
        // Two suspended sandboxes run nothing, but a third would exist past max_sandboxes.
        let e = as_org("acme", h.cp.create_sandbox(sized(1, 256, 1024), None))
            .await
            .expect_err("third");
        assert_eq!(e.code(), ErrorCode::QuotaExceeded);
        assert!(e.public_message().contains("max_sandboxes"), "{e}");

        // A wake is checked against the quotas on sandboxes alive.
        h.succeeds(&wake(&h, &first).await.expect("wake within max_running"))
            .await;
        assert_eq!(h.state(&first).await, SandboxState::Running);
        let e = wake(&h, &second).await.expect_err("second wake");
        assert_eq!(e.code(), ErrorCode::QuotaExceeded);
        assert!(e.public_message().contains("max_running"), "{e}");
        assert_eq!(h.state(&second).await, SandboxState::Suspended);

        // Forks and creates from a checkpoint are new sandboxes too.
        let ck = as_org(
            "acme",
            h.cp.create_checkpoint(&first, CreateCheckpointRequest::default(), None),
        )
        .await
        .expect("checkpoint");
        h.succeeds(&ck.operation).await;
        let fork = ForkRequest {
            count: 1,
            ..Default::default()
        };
        assert_eq!(
            code(as_org("acme", h.cp.fork(&first, fork)).await),
            ErrorCode::QuotaExceeded
        );
        let restore = CreateSandboxRequest {
            checkpoint: Some(ck.checkpoint.id.clone()),
            ..Default::default()
        };
        assert_eq!(
            code(as_org("acme", h.cp.create_sandbox(restore.clone(), None)).await),
            ErrorCode::QuotaExceeded
        );

        // Deleting the suspended one frees its place: a create from the checkpoint exists then,
        // once the first no longer runs.
        let del = as_org("acme", h.cp.delete_sandbox(&second, None))
            .await
            .expect("delete");
        h.settle(&del.id).await;
        suspend(&h, &first).await;
        let r = as_org("acme", h.cp.create_sandbox(restore, None))
            .await
            .expect("restore within the quotas");
        h.succeeds(&r.operation).await;
    })
    .await;
}

#[tokio::test]
async fn max_disk_mib_counts_sandbox_disks_and_volumes() {
    as_system(async {
        let h = Harness::new().await;
        org_with(
            &h,
            Quotas {
                max_disk_mib: Some(4096),
                ..Quotas::default()
            },
        )
        .await;
        let e = as_org("acme", h.cp.create_sandbox(sized(1, 256, 8192), None))
            .await
            .expect_err("one disk past the quota");
        assert_eq!(e.code(), ErrorCode::QuotaExceeded);
        assert!(e.public_message().contains("max_disk_mib"), "{e}");
        let id = running(&h, sized(1, 256, 2048)).await;
        let volume = |name: &str, size_mib| CreateVolumeRequest {
            name: name.into(),
            size_mib,
            ..Default::default()
        };
        as_org("acme", h.cp.create_volume(volume("data", 1024)))
            .await
            .expect("volume within the quota");
        let e = as_org("acme", h.cp.create_volume(volume("more", 2048)))
            .await
            .expect_err("volume past the quota");
        assert!(e.public_message().contains("max_disk_mib"), "{e}");
        let e = as_org("acme", h.cp.create_sandbox(sized(1, 256, 2048), None))
            .await
            .expect_err("sandbox past the quota");
        assert!(e.public_message().contains("max_disk_mib"), "{e}");
        // A pool whose members' disks alone exceed it is refused.
        let mut big = pool(1, 1, 256);
        big.resources = size(1, 256, 8192);
        assert_eq!(
            code(as_org("acme", h.cp.put_pool("warm", big)).await),
            ErrorCode::QuotaExceeded
        );
        // Another org is not held to acme's quota.
        let other = h.cp.create_sandbox(sized(1, 256, 8192), None).await;
        assert!(other.is_ok(), "{other:?}");
        let del = as_org("acme", h.cp.delete_sandbox(&id, None))
            .await
            .expect("delete");
        h.settle(&del.id).await;
        as_org("acme", h.cp.create_volume(volume("more", 2048)))
            .await
            .expect("room made");
    })
    .await;
}

async fn usage(h: &Harness) -> OrgUsage {
    as_org("acme", h.cp.get_org("acme"))
        .await
        .expect("org")
        .usage
        .expect("usage")
}

/// Writes `mib` MiB of zeros at `path` in sandbox `id` of acme.
async fn fill(h: &Harness, id: &str, path: &str, mib: usize) {
    let q = SandboxPath(path.as_bytes().to_vec());
    let body = futures::stream::iter([Ok(bytes::Bytes::from(vec![0u8; mib << 20]))]).boxed();
    as_org(
        "acme",
        h.cp.write_file(id, q, None, WriteOptions::default(), None, body),
    )
    .await
    .expect("write");
}

/// A ready checkpoint of acme's sandbox `id`, or the refusal of its create.
async fn checkpoint_of(h: &Harness, id: &str) -> Result<String, ServiceError> {
    let r = as_org(
        "acme",
        h.cp.create_checkpoint(id, CreateCheckpointRequest::default(), None),
    )
    .await?;
    h.succeeds(&r.operation).await;
    Ok(r.checkpoint.id)
}

async fn import(h: &Harness, body: cove_node_api::ByteStream) -> Result<String, ServiceError> {
    as_org("acme", h.cp.import_checkpoint(body, None))
        .await
        .map(|c| c.id)
}

fn over(e: ServiceError, quota: &str) {
    assert_eq!(e.code(), ErrorCode::QuotaExceeded, "{e}");
    assert!(e.public_message().contains(quota), "{e}");
}

#[tokio::test]
async fn max_snapshot_mib_counts_checkpoints_imports_and_suspended_snapshots() {
    as_system(async {
        let h = Harness::new().await;
        org_with(
            &h,
            Quotas {
                max_snapshot_mib: Some(30),
                ..Quotas::default()
            },
        )
        .await;
        let id = running(&h, sized(1, 256, 1024)).await;
        fill(&h, &id, "/home/user/a", 12).await;
        let first = checkpoint_of(&h, &id).await.expect("within the quota");
        assert_eq!(usage(&h).await.snapshot_mib, 12);
        // An import is the org's too: 12 + 12 of 30.
        let (_, body) = h.cp.export_checkpoint(&first).await.expect("export");
        import(&h, body).await.expect("import within the quota");
        assert_eq!(usage(&h).await.snapshot_mib, 24);
        // A third copy is refused once its size is known, and nothing of it is kept.
        let kept = h.node.checkpoint_ids().len();
        let (_, body) = h.cp.export_checkpoint(&first).await.expect("export");
        over(
            import(&h, body).await.expect_err("past"),
            "max_snapshot_mib",
        );
        assert_eq!(
            h.node.checkpoint_ids().len(),
            kept,
            "the refused import is gone"
        );

        // A checkpoint's size is known once saved: one is taken while there is room left...
        fill(&h, &id, "/home/user/b", 12).await;
        let big = checkpoint_of(&h, &id)
            .await
            .expect("24 of 30 used: room left");
        assert_eq!(usage(&h).await.snapshot_mib, 48);
        // ...and none past it, a fork's neither.
        over(
            checkpoint_of(&h, &id).await.expect_err("at the quota"),
            "max_snapshot_mib",
        );
        let fork = ForkRequest {
            count: 1,
            ..Default::default()
        };
        over(
            as_org("acme", h.cp.fork(&id, fork))
                .await
                .expect_err("fork"),
            "max_snapshot_mib",
        );
        // An upload larger than what is left plus an archive's overhead (6 + 16 MiB) is cut
        // off before it is read whole.
        as_org("acme", h.cp.delete_checkpoint(&big))
            .await
            .expect("delete");
        assert_eq!(usage(&h).await.snapshot_mib, 24);
        let junk = futures::stream::iter([Ok(bytes::Bytes::from(vec![0u8; 23 << 20]))]).boxed();
        over(
            import(&h, junk).await.expect_err("cut off"),
            "max_snapshot_mib",
        );
        assert_eq!(h.node.checkpoint_ids().len(), kept);

        // A suspended sandbox's snapshot counts until its wake; a suspend itself is never
        // refused (it releases more than it keeps).
        suspend(&h, &id).await;
        assert_eq!(usage(&h).await.snapshot_mib, 48);
        over(
            import(&h, h.cp.export_checkpoint(&first).await.expect("export").1)
                .await
                .expect_err("past"),
            "max_snapshot_mib",
        );
        h.succeeds(&wake(&h, &id).await.expect("wake")).await;
        assert_eq!(usage(&h).await.snapshot_mib, 24);
    })
    .await;
}

#[tokio::test]
async fn a_sandbox_that_failed_holding_node_resources_counts_until_deleted() {
    as_system(async {
        let h = Harness::new().await;
        org_with(
            &h,
            Quotas {
                max_running: Some(1),
                max_memory_mib: Some(512),
                ..Quotas::default()
            },
        )
        .await;
        let id = running(&h, sized(1, 512, 1024)).await;
        // The node cannot destroy it: the delete fails and the sandbox stays on the node.
        h.node.inject(
            Call::Destroy,
            Fault::fail(NodeError::Runtime("frozen".into())),
        );
        let del = as_org("acme", h.cp.delete_sandbox(&id, None))
            .await
            .expect("delete");
        h.settle(&del.id).await;
        assert_eq!(h.state(&id).await, SandboxState::Failed);
        assert!(h.node.sandbox_ids().contains(&id), "still on the node");
        let u = usage(&h).await;
        assert_eq!((u.running, u.memory_mib), (1, 512), "{u:?}");
        // It holds its org's quota: no other sandbox, however often asked.
        for _ in 0..3 {
            over(
                as_org("acme", h.cp.create_sandbox(sized(1, 256, 1024), None))
                    .await
                    .expect_err("past"),
                "max_running",
            );
        }
        // A delete that works releases the node's resources and the quota.
        h.node.clear_faults();
        let del = as_org("acme", h.cp.delete_sandbox(&id, None))
            .await
            .expect("delete again");
        h.succeeds(&del).await;
        assert_eq!(h.state(&id).await, SandboxState::Deleted);
        assert!(!h.node.sandbox_ids().contains(&id), "gone from the node");
        assert_eq!(usage(&h).await.running, 0);
        running(&h, sized(1, 512, 1024)).await;
    })
    .await;
}

#[tokio::test]
async fn of_two_wakes_past_max_running_one_is_refused_and_stays_suspended() {
    as_system(async {
        let h = Harness::new().await;
        org_with(
            &h,
            Quotas {
                max_running: Some(1),
                ..Quotas::default()
            },
        )
        .await;
        let first = running(&h, sized(1, 256, 1024)).await;
        suspend(&h, &first).await;
        let second = running(&h, sized(1, 256, 1024)).await;
        suspend(&h, &second).await;
        // Asked together: whether refused when accepted or where the wake is recorded (under the
        // org's quota lock, after another took the room), one of them runs.
        let asked = [wake(&h, &first).await, wake(&h, &second).await];
        let mut refused = 0;
        for a in asked {
            let e = match a {
                Ok(op) => match h.settle(&op.id).await {
                    done if done.state == OperationState::Succeeded => continue,
                    done => done.error.map(|e| e.code),
                },
                Err(e) => Some(e.code()),
            };
            assert_eq!(e, Some(ErrorCode::QuotaExceeded));
            refused += 1;
        }
        assert_eq!(refused, 1);
        assert_eq!(usage(&h).await.running, 1);
        let states = [h.state(&first).await, h.state(&second).await];
        assert!(
            states.contains(&SandboxState::Running) && states.contains(&SandboxState::Suspended),
            "{states:?}"
        );
    })
    .await;
}
