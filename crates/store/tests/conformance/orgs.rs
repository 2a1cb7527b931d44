//! Orgs, API key hashes, quotas' usage, the audit log, and org scoping of listings.

use std::sync::Arc;

use chrono::Duration;
use cove_api_types::{
    ApiKey, AuditEntry, CheckpointRetention, Feature, Org, Quotas, Resources, SandboxState,
    DEFAULT_ORG,
};
use cove_store::{SandboxFilter, Store, StoreError, VolumeRecord};

use crate::fixtures::{now, operation, sandbox};

fn org(id: &str) -> Org {
    Org {
        id: id.into(),
        quotas: Quotas::default(),
        disabled_features: Vec::new(),
        checkpoint_retention: CheckpointRetention::default(),
        created_at: now(),
        usage: None,
    }
}

fn key(id: &str, org: &str) -> ApiKey {
    ApiKey {
        id: id.into(),
        org: org.into(),
        name: format!("name of {id}"),
        prefix: "cove_abcdefgh".into(),
        created_at: now(),
        revoked_at: None,
    }
}

pub async fn orgs_round_trip_and_the_default_org_exists(store: Arc<dyn Store>) {
    let default = store.get_org(DEFAULT_ORG).await.expect("default org");
    assert_eq!(default.quotas, Quotas::default());
    let acme = Org {
        quotas: Quotas {
            max_running: Some(2),
            max_vcpus: Some(4),
            max_memory_mib: Some(1 << 40),
            max_creates_per_s: None,
            max_sandboxes: Some(7),
            max_disk_mib: Some(3 << 40),
            max_snapshot_mib: Some(5 << 40),
        },
        ..org("acme")
    };
    store.insert_org(&acme).await.expect("insert");
    assert_eq!(store.get_org("acme").await.expect("get"), acme);
    assert!(matches!(
        store.insert_org(&org("acme")).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.get_org("nope").await,
        Err(StoreError::NotFound)
    ));
    let ids: Vec<String> = store
        .list_orgs()
        .await
        .expect("list")
        .into_iter()
        .map(|o| o.id)
        .collect();
    assert_eq!(ids, ["acme", "default"]);
    let q = Quotas {
        max_creates_per_s: Some(5),
        max_sandboxes: Some(9),
        max_disk_mib: Some(4096),
        max_snapshot_mib: Some(2048),
        ..Quotas::default()
    };
    assert!(store.set_org_quotas("acme", &q).await.expect("set"));
    assert_eq!(store.get_org("acme").await.expect("get").quotas, q);
    assert!(!store.set_org_quotas("nope", &q).await.expect("set"));

    // Feature gates and checkpoint retention: stored sorted and once, replaced together.
    let retention = CheckpointRetention {
        max_per_sandbox: Some(3),
        max_age_s: Some(86_400),
    };
    let disabled = [Feature::Volumes, Feature::Fork, Feature::Fork];
    assert!(store
        .set_org_settings("acme", &disabled, &retention)
        .await
        .expect("settings"));
    let got = store.get_org("acme").await.expect("get");
    assert_eq!(got.disabled_features, [Feature::Fork, Feature::Volumes]);
    assert_eq!(got.checkpoint_retention, retention);
    assert_eq!(got.quotas, q, "settings leave the quotas alone");
    assert!(store
        .set_org_settings("acme", &[], &CheckpointRetention::default())
        .await
        .expect("settings"));
    let got = store.get_org("acme").await.expect("get");
    assert!(got.disabled_features.is_empty());
    assert_eq!(got.checkpoint_retention, CheckpointRetention::default());
    assert!(!store
        .set_org_settings("nope", &[], &retention)
        .await
        .expect("settings"));
    let born = Org {
        disabled_features: vec![Feature::Export],
        checkpoint_retention: retention,
        ..org("born-gated")
    };
    store.insert_org(&born).await.expect("insert");
    assert_eq!(store.get_org("born-gated").await.expect("get"), born);
}

pub async fn api_keys_are_found_by_hash_listed_and_revoked(store: Arc<dyn Store>) {
    store.insert_org(&org("acme")).await.expect("org");
    store.insert_org(&org("other")).await.expect("org");
    let k1 = key("key-1", "acme");
    store.insert_api_key(&k1, "hash-1").await.expect("insert");
    store
        .insert_api_key(&key("key-2", "acme"), "hash-2")
        .await
        .expect("insert");
    store
        .insert_api_key(&key("key-3", "other"), "hash-3")
        .await
        .expect("insert");
    assert!(matches!(
        store.insert_api_key(&key("key-4", "acme"), "hash-1").await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store.api_key_by_hash("hash-1").await.expect("find"),
        Some(k1)
    );
    assert_eq!(store.api_key_by_hash("key-1").await.expect("find"), None);
    let ids = |keys: Vec<ApiKey>| keys.into_iter().map(|k| k.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_api_keys("acme").await.expect("list")),
        ["key-1", "key-2"]
    );
    // Another org's key is not revoked through this org.
    assert!(!store
        .revoke_api_key("acme", "key-3", now())
        .await
        .expect("revoke"));
    let at = now();
    assert!(store
        .revoke_api_key("acme", "key-1", at)
        .await
        .expect("revoke"));
    assert!(store
        .revoke_api_key("acme", "key-1", at + Duration::seconds(60))
        .await
        .expect("again"));
    let got = store
        .api_key_by_hash("hash-1")
        .await
        .expect("find")
        .expect("still there");
    assert_eq!(got.revoked_at, Some(at), "the first revocation time stays");
    assert_eq!(
        store
            .api_key_by_hash("hash-3")
            .await
            .expect("find")
            .and_then(|k| k.revoked_at),
        None
    );
}

pub async fn usage_counts_sandboxes_pool_members_disks_volumes_and_snapshots(
    store: Arc<dyn Store>,
) {
    store.insert_org(&org("acme")).await.expect("org");
    let sized = |id: &str, org: &str, state: SandboxState, vcpus: u32, mib: u64| {
        let mut s = sandbox(id);
        s.org = org.into();
        s.state = state;
        s.resources = Resources {
            vcpus,
            memory_mib: mib,
            disk_mib: Some(mib * 2),
            ..s.resources
        };
        s
    };
    for s in [
        sized("sb-a1", "acme", SandboxState::Running, 2, 512),
        sized("sb-a2", "acme", SandboxState::Paused, 1, 256),
        sized("sb-a3", "acme", SandboxState::Suspended, 8, 8192),
        sized("sb-a4", "acme", SandboxState::Failed, 8, 8192),
        sized("sb-a5", "acme", SandboxState::Deleted, 8, 8192),
        sized("sb-d1", DEFAULT_ORG, SandboxState::Running, 4, 4096),
    ] {
        store.insert_sandbox(&s).await.expect("insert");
    }
    let mut no_disk = sized("sb-a6", "acme", SandboxState::Creating, 1, 64);
    no_disk.resources.disk_mib = None;
    store.insert_sandbox(&no_disk).await.expect("insert");
    let u = store.org_usage("acme").await.expect("usage");
    // A failed sandbox may still hold node resources: it counts as alive until deleted.
    assert_eq!((u.running, u.vcpus, u.memory_mib), (4, 12, 9024));
    // Suspended and failed sandboxes exist and hold their disks; deleted ones do not.
    assert_eq!(
        (u.sandboxes, u.disk_mib),
        (5, 2 * (512 + 256 + 8192 + 8192))
    );

    // An unclaimed warm pool member counts like any sandbox of its org.
    store
        .insert_pool_member(&sized("sb-p1", "acme", SandboxState::Running, 4, 4096), "p")
        .await
        .expect("member");
    // So do the org's volumes (another org's do not).
    for (id, owner, size_mib) in [("vol-a", "acme", 1000), ("vol-d", DEFAULT_ORG, 5000)] {
        store
            .insert_volume(&VolumeRecord {
                id: id.into(),
                org: owner.into(),
                name: id.into(),
                size_mib,
                created_at: now(),
                node: None,
                object: None,
            })
            .await
            .expect("volume");
    }
    let u = store.org_usage("acme").await.expect("usage");
    assert_eq!((u.running, u.vcpus, u.memory_mib), (5, 16, 13120));
    assert_eq!(
        (u.sandboxes, u.disk_mib),
        (6, 2 * (512 + 256 + 8192 + 8192 + 4096) + 1000)
    );
    assert_eq!(u.snapshot_mib, 0);

    // Snapshot bytes: the org's checkpoints (any state; a failed or creating one has none)
    // and the snapshots of its sandboxes not deleted, in MiB rounded up.
    for (id, owner, bytes) in [
        ("ck-a1", "acme", 3 << 20),
        ("ck-a2", "acme", 1),
        ("ck-d1", DEFAULT_ORG, 9 << 20),
    ] {
        let mut c = crate::checkpoints::checkpoint(id, "sb-a1", 0);
        c.org = owner.into();
        store.insert_checkpoint(&c).await.expect("checkpoint");
        assert!(store
            .checkpoint_ready(id, bytes, false, 1)
            .await
            .expect("ready"));
    }
    let mut creating = crate::checkpoints::checkpoint("ck-a3", "sb-a1", 0);
    creating.org = "acme".into();
    store
        .insert_checkpoint(&creating)
        .await
        .expect("checkpoint");
    assert!(store
        .set_snapshot_bytes("sb-a3", 2 << 20)
        .await
        .expect("set"));
    assert!(store
        .set_snapshot_bytes("sb-a5", 7 << 20)
        .await
        .expect("set"));
    assert!(!store.set_snapshot_bytes("sb-none", 1).await.expect("set"));
    let u = store.org_usage("acme").await.expect("usage");
    assert_eq!(u.snapshot_mib, 6, "3 MiB + 1 byte + 2 MiB, rounded up");
    // A wake drops the snapshot; a deleted checkpoint is gone.
    assert!(store.set_snapshot_bytes("sb-a3", 0).await.expect("set"));
    assert!(store.delete_checkpoint("ck-a2").await.expect("delete"));
    assert_eq!(
        store.org_usage("acme").await.expect("usage").snapshot_mib,
        3
    );
    assert_eq!(
        store.org_usage("nobody").await.expect("usage"),
        Default::default()
    );
}

pub async fn listings_are_scoped_to_an_org(store: Arc<dyn Store>) {
    store.insert_org(&org("acme")).await.expect("org");
    let mut a = sandbox("sb-a");
    a.org = "acme".into();
    store.insert_sandbox(&a).await.expect("insert");
    store
        .insert_sandbox(&sandbox("sb-d"))
        .await
        .expect("insert");
    let listed = |org: Option<&str>| {
        let store = store.clone();
        let org = org.map(String::from);
        async move {
            store
                .list_sandboxes(&SandboxFilter {
                    org,
                    limit: 10,
                    ..SandboxFilter::default()
                })
                .await
                .expect("list")
                .into_iter()
                .map(|s| s.id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(Some("acme")).await, ["sb-a"]);
    assert_eq!(listed(Some(DEFAULT_ORG)).await, ["sb-d"]);
    assert_eq!(listed(None).await.len(), 2);
    assert_eq!(store.get_sandbox("sb-a").await.expect("get").org, "acme");

    // Operations carry their org; idempotency keys are per org.
    let mut op = operation("op-a", cove_api_types::OperationKind::CreateSandbox, "sb-a");
    op.org = "acme".into();
    op.idempotency_key = Some("k".into());
    store.insert_operation(&op).await.expect("op");
    let mut op2 = operation("op-d", cove_api_types::OperationKind::CreateSandbox, "sb-d");
    op2.idempotency_key = Some("k".into());
    store
        .insert_operation(&op2)
        .await
        .expect("the same key in another org");
    let by_key = store
        .operation_by_idempotency_key("acme", cove_api_types::OperationKind::CreateSandbox, "k")
        .await
        .expect("by key")
        .expect("found");
    assert_eq!(by_key.0.id, "op-a");
    assert_eq!(by_key.0.org, "acme");
    let ops = store
        .list_operations(Some("acme"), None, 10)
        .await
        .expect("ops");
    assert_eq!(
        ops.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(),
        ["op-a"]
    );

    // Events follow their sandbox's org.
    for id in ["sb-a", "sb-d"] {
        store
            .transition_with_event(
                id,
                &[SandboxState::Running],
                SandboxState::Paused,
                None,
                Some(&cove_store::NewEvent {
                    kind: cove_api_types::EventType::SandboxPaused,
                    operation_id: None,
                    reason: None,
                    destination: None,
                    host: None,
                    port: None,
                    rule: None,
                }),
            )
            .await
            .expect("transition");
    }
    let events = store
        .events_after(Some("acme"), 0, 10)
        .await
        .expect("events");
    assert_eq!(
        events
            .iter()
            .map(|e| e.sandbox_id.as_str())
            .collect::<Vec<_>>(),
        ["sb-a"]
    );
    assert_eq!(store.events_after(None, 0, 10).await.expect("all").len(), 2);
}

fn entry(org: &str, action: &str, age_s: i64) -> AuditEntry {
    AuditEntry {
        seq: 0,
        time: now() - Duration::seconds(age_s),
        org: org.into(),
        actor: "admin".into(),
        action: action.into(),
        resource: Some("sb-1".into()),
        status: 202,
        outcome: "ok".into(),
        request_id: Some("req-1".into()),
    }
}

pub async fn audit_records_are_paged_scoped_and_purged(store: Arc<dyn Store>) {
    let mut seqs = Vec::new();
    for (i, org) in ["acme", "default", "acme", "acme"].into_iter().enumerate() {
        let age = if i == 0 { 3600 } else { 0 };
        seqs.push(
            store
                .append_audit(&entry(org, &format!("POST /v1/x{i}"), age))
                .await
                .expect("append"),
        );
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let all = store.audit_after(None, 0, 10).await.expect("all");
    assert_eq!(all.len(), 4);
    assert_eq!(all[1].org, "default");
    assert_eq!(all[1].action, "POST /v1/x1");
    assert_eq!(all[1].resource.as_deref(), Some("sb-1"));
    assert_eq!(all[1].request_id.as_deref(), Some("req-1"));
    assert_eq!((all[1].status, all[1].outcome.as_str()), (202, "ok"));
    let acme = store.audit_after(Some("acme"), 0, 2).await.expect("page");
    assert_eq!(
        acme.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [seqs[0], seqs[2]]
    );
    let next = store
        .audit_after(Some("acme"), seqs[2], 2)
        .await
        .expect("next page");
    assert_eq!(next.iter().map(|e| e.seq).collect::<Vec<_>>(), [seqs[3]]);
    let purged = store
        .purge_audit_before(now() - Duration::seconds(60))
        .await
        .expect("purge");
    assert_eq!(purged, 1);
    assert_eq!(store.audit_after(None, 0, 10).await.expect("all").len(), 3);
}

/// Concurrent audit records (a burst of requests, written in batches by SQLite) each get a
/// sequence number of their own, and every one is stored once with its own fields.
pub async fn concurrent_audit_records_are_each_stored_once(store: Arc<dyn Store>) {
    let appends = (0..40).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            let e = entry("acme", &format!("POST /v1/burst{i}"), 0);
            (i, store.append_audit(&e).await.expect("append"))
        })
    });
    let mut seqs = std::collections::BTreeMap::new();
    for a in appends.collect::<Vec<_>>() {
        let (i, seq) = a.await.expect("join");
        assert!(seqs.insert(seq, i).is_none(), "seq {seq} given twice");
    }
    let all = store.audit_after(None, 0, 100).await.expect("all");
    assert_eq!(all.len(), 40);
    for e in all {
        assert_eq!(e.action, format!("POST /v1/burst{}", seqs[&e.seq]));
    }
}
