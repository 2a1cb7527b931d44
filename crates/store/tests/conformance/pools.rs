//! Warm pools: rows, hidden members, atomic claims, retiring against claims.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use cove_api_types::{EventType, OperationKind, OperationState, Resources, SandboxState};
use cove_store::{NewOperation, PoolClaim, PoolRecord, SandboxFilter, Store, StoreError};

use crate::fixtures::{bare_sandbox, now, operation, sandbox};

fn pool(name: &str) -> PoolRecord {
    let t = now();
    PoolRecord {
        org: "default".into(),
        name: name.into(),
        template: "tiny".into(),
        release: None,
        resources: sandbox("x").resources,
        min_ready: 2,
        max: 4,
        hits: 0,
        misses: 0,
        created_at: t,
        updated_at: t,
    }
}

fn claim() -> PoolClaim {
    let s = sandbox("x");
    PoolClaim {
        org: "default".into(),
        template: s.template,
        release: s.release,
        resources: s.resources,
        env: BTreeMap::from([("CLAIMED".into(), "yes".into())]),
        metadata: BTreeMap::from([("who".into(), "claimer".into())]),
        cwd: "/claimed".into(),
        user: "root".into(),
        idle_timeout_s: 77,
        ttl_s: Some(99),
        at: now(),
    }
}

/// A create operation for a claim, with a fresh id.
fn op() -> NewOperation {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    NewOperation {
        org: "default".into(),
        sandbox_id: None,
        ..operation(&format!("op-claim-{n}"), OperationKind::CreateSandbox, "")
    }
}

fn everything() -> SandboxFilter {
    SandboxFilter {
        limit: 500,
        ..SandboxFilter::default()
    }
}

pub async fn pools_round_trip_and_put_keeps_counters(store: Arc<dyn Store>) {
    let p = pool("p1");
    assert_eq!(store.put_pool(&p).await.expect("put"), p);
    assert_eq!(store.get_pool("p1").await.expect("get"), p);
    assert!(matches!(
        store.get_pool("nope").await,
        Err(StoreError::NotFound)
    ));
    store
        .record_pool_misses(&["p1".into(), "nope".into()])
        .await
        .expect("miss");
    let changed = PoolRecord {
        org: "default".into(),
        release: Some(7),
        min_ready: 0,
        max: 1,
        resources: Resources {
            disk_mib: None,
            ..p.resources
        },
        created_at: now() + chrono::Duration::seconds(5),
        updated_at: now() + chrono::Duration::seconds(5),
        ..p.clone()
    };
    let stored = store.put_pool(&changed).await.expect("replace");
    assert_eq!(stored.misses, 1, "counters survive a put");
    assert_eq!(stored.created_at, p.created_at, "created_at survives a put");
    assert_eq!(stored.release, Some(7));
    assert_eq!(stored.max, 1);
    assert_eq!(stored.resources.disk_mib, None);
    store.put_pool(&pool("a0")).await.expect("put a0");
    let names: Vec<String> = store
        .list_pools()
        .await
        .expect("list")
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["a0", "p1"]);
    assert!(store.delete_pool("p1").await.expect("delete"));
    assert!(!store.delete_pool("p1").await.expect("delete again"));
}

pub async fn members_are_hidden_until_claimed(store: Arc<dyn Store>) {
    store.put_pool(&pool("p1")).await.expect("put");
    let member = sandbox("sb-member");
    store
        .insert_pool_member(&member, "p1")
        .await
        .expect("insert member");
    store
        .insert_sandbox(&sandbox("sb-plain"))
        .await
        .expect("insert plain");
    let listed: Vec<String> = store
        .list_sandboxes(&everything())
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, ["sb-plain"], "members are not listed");
    let members = store.pool_members().await.expect("members");
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].pool, "p1");
    assert_eq!(members[0].sandbox, member);

    // Another size, release or template does not match.
    for c in [
        PoolClaim {
            org: "default".into(),
            release: 4,
            ..claim()
        },
        PoolClaim {
            org: "default".into(),
            template: "other".into(),
            ..claim()
        },
        PoolClaim {
            org: "default".into(),
            resources: bare_sandbox("x").resources,
            ..claim()
        },
    ] {
        assert_eq!(store.claim_member(&c, &op()).await.expect("claim"), None);
    }
    let c = claim();
    let claim_op = op();
    let (got, operation) = store
        .claim_member(&c, &claim_op)
        .await
        .expect("claim")
        .expect("a member");
    assert_eq!(operation.id, claim_op.id);
    assert_eq!(operation.state, OperationState::Succeeded);
    assert_eq!(operation.sandbox_id.as_deref(), Some("sb-member"));
    let events = store.events_after(None, 0, 10).await.expect("events");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, EventType::SandboxCreated);
    assert_eq!(
        events[0].operation_id.as_deref(),
        Some(claim_op.id.as_str())
    );
    assert_eq!(got.pool, "p1");
    assert_eq!(got.sandbox.id, "sb-member");
    assert_eq!(got.sandbox.state, SandboxState::Running);
    assert_eq!(got.sandbox.env, c.env);
    assert_eq!(got.sandbox.metadata, c.metadata);
    assert_eq!(got.sandbox.cwd, "/claimed");
    assert_eq!(got.sandbox.user, "root");
    assert_eq!(got.sandbox.idle_timeout_s, 77);
    assert_eq!(got.sandbox.ttl_s, Some(99));
    assert_eq!(got.sandbox.created_at, c.at);
    assert_eq!(got.sandbox.last_activity_at, Some(c.at));
    assert_eq!(
        store.get_sandbox("sb-member").await.expect("get"),
        got.sandbox
    );
    assert_eq!(store.get_pool("p1").await.expect("pool").hits, 1);
    assert!(store.pool_members().await.expect("members").is_empty());
    assert_eq!(
        store
            .list_sandboxes(&everything())
            .await
            .expect("list")
            .len(),
        2
    );
    assert_eq!(
        store.claim_member(&c, &op()).await.expect("claim"),
        None,
        "taken"
    );
    let ops = store.list_operations(None, None, 10).await.expect("ops");
    assert_eq!(ops.len(), 1, "a claim that found nothing records nothing");
}

pub async fn only_running_members_are_claimed(store: Arc<dyn Store>) {
    store.put_pool(&pool("p1")).await.expect("put");
    let starting = cove_api_types::Sandbox {
        state: SandboxState::Creating,
        ..sandbox("sb-starting")
    };
    store
        .insert_pool_member(&starting, "p1")
        .await
        .expect("insert");
    assert_eq!(
        store.claim_member(&claim(), &op()).await.expect("claim"),
        None
    );
}

pub async fn concurrent_claims_never_share_a_member(store: Arc<dyn Store>) {
    store.put_pool(&pool("p1")).await.expect("put");
    for i in 0..8 {
        store
            .insert_pool_member(&sandbox(&format!("sb-m{i}")), "p1")
            .await
            .expect("insert");
    }
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.claim_member(&claim(), &op()).await
        }));
    }
    let mut got = Vec::new();
    for t in tasks {
        if let Some((m, _)) = t.await.expect("join").expect("claim") {
            got.push(m.sandbox.id);
        }
    }
    let distinct: HashSet<&String> = got.iter().collect();
    assert_eq!(got.len(), 8, "every member claimed once: {got:?}");
    assert_eq!(distinct.len(), 8, "no member claimed twice: {got:?}");
    assert_eq!(store.get_pool("p1").await.expect("pool").hits, 8);
}

pub async fn retiring_is_compare_and_set_against_claims(store: Arc<dyn Store>) {
    store.put_pool(&pool("p1")).await.expect("put");
    store
        .insert_pool_member(&sandbox("sb-a"), "p1")
        .await
        .expect("insert a");
    store
        .insert_pool_member(&sandbox("sb-b"), "p1")
        .await
        .expect("insert b");
    assert!(!store
        .retire_member("sb-a", "other")
        .await
        .expect("wrong pool"));
    assert!(store.retire_member("sb-a", "p1").await.expect("retire"));
    let a = store.get_sandbox("sb-a").await.expect("get");
    assert_eq!(a.state, SandboxState::Deleting);
    assert_eq!(
        store.prior_state("sb-a").await.expect("prior"),
        Some(SandboxState::Running)
    );
    let (claimed, _) = store
        .claim_member(&claim(), &op())
        .await
        .expect("claim")
        .expect("b");
    assert_eq!(
        claimed.sandbox.id, "sb-b",
        "a retiring member is not claimed"
    );
    assert!(
        !store
            .retire_member("sb-b", "p1")
            .await
            .expect("retire claimed"),
        "a claimed sandbox is no member to retire"
    );
    assert_eq!(
        store.get_sandbox("sb-b").await.expect("get").state,
        SandboxState::Running
    );
}

pub async fn a_claim_with_a_taken_idempotency_key_claims_nothing(store: Arc<dyn Store>) {
    store.put_pool(&pool("p1")).await.expect("put");
    store
        .insert_pool_member(&sandbox("sb-a"), "p1")
        .await
        .expect("insert");
    let keyed = NewOperation {
        org: "default".into(),
        idempotency_key: Some("k1".into()),
        ..op()
    };
    store
        .insert_operation(&keyed)
        .await
        .expect("first use of the key");
    let again = NewOperation {
        org: "default".into(),
        idempotency_key: Some("k1".into()),
        ..op()
    };
    assert!(matches!(
        store.claim_member(&claim(), &again).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store.pool_members().await.expect("members").len(),
        1,
        "still a member"
    );
    assert_eq!(store.get_pool("p1").await.expect("pool").hits, 0);
}
