//! The shared cluster state: the node registry, placements, the node link identity, operation
//! leases and claims.

use std::sync::Arc;

use chrono::Duration;
use cove_api_types::{NodeState, OperationKind, OperationState};
use cove_store::{NodeRecord, OperationUpdate, PlacementRecord, Store};

use crate::fixtures::{now, operation};

fn node(name: &str) -> NodeRecord {
    NodeRecord {
        name: name.into(),
        address: "https://10.0.0.1:7702".into(),
        certificate: vec![1, 2, 3],
        report: "{}".into(),
        state: NodeState::Ready,
        reason: None,
        last_heartbeat_at: now(),
    }
}

pub async fn nodes_join_heartbeat_and_keep_an_operators_state(store: Arc<dyn Store>) {
    assert_eq!(
        store.upsert_node(&node("n1")).await.expect("join"),
        NodeState::Ready
    );
    assert_eq!(
        store
            .node_heartbeat("nope", "{}", now())
            .await
            .expect("unknown"),
        None
    );
    assert!(store
        .set_node_state("n1", NodeState::Draining, None)
        .await
        .expect("drain"));
    // A join again keeps the operator's drain.
    let mut again = node("n1");
    again.address = "https://10.0.0.2:7702".into();
    assert_eq!(
        store.upsert_node(&again).await.expect("rejoin"),
        NodeState::Draining
    );
    store
        .set_node_state("n1", NodeState::Lost, Some("no heartbeat"))
        .await
        .expect("lost");
    let at = now() + Duration::seconds(5);
    assert_eq!(
        store
            .node_heartbeat("n1", "{\"x\":1}", at)
            .await
            .expect("beat"),
        Some(NodeState::Ready)
    );
    let listed = store.list_nodes().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].address, "https://10.0.0.2:7702");
    assert_eq!(listed[0].report, "{\"x\":1}");
    assert_eq!(listed[0].reason, None);
    assert_eq!(listed[0].last_heartbeat_at, at);
    assert_eq!(listed[0].certificate, vec![1, 2, 3]);
}

pub async fn placements_are_put_moved_and_deleted(store: Arc<dyn Store>) {
    let p = PlacementRecord {
        sandbox_id: "sb-1".into(),
        node: "n1".into(),
        vcpus: 2,
        memory_mib: 512,
    };
    store.put_placement(&p).await.expect("put");
    let moved = PlacementRecord {
        node: "n2".into(),
        ..p.clone()
    };
    store.put_placement(&moved).await.expect("move");
    assert_eq!(store.list_placements().await.expect("list"), vec![moved]);
    store.delete_placement("sb-1").await.expect("delete");
    assert!(store.list_placements().await.expect("list").is_empty());
}

pub async fn the_first_node_link_identity_wins(store: Arc<dyn Store>) {
    let first = store.node_link_identity("c1", "k1").await.expect("first");
    assert_eq!(first, ("c1".into(), "k1".into()));
    let second = store.node_link_identity("c2", "k2").await.expect("second");
    assert_eq!(second, first);
}

pub async fn leases_are_held_and_expired_ones_claimed_once(store: Arc<dyn Store>) {
    let a = store
        .insert_operation(&operation("op-a", OperationKind::CreateSandbox, "sb-a"))
        .await
        .expect("a");
    store
        .insert_operation(&operation("op-b", OperationKind::SuspendSandbox, "sb-b"))
        .await
        .expect("b");
    let soon = now() + Duration::seconds(10);
    let leased = store
        .lease_operations("r1", &["op-a".into(), "op-b".into()], soon)
        .await
        .expect("lease");
    assert_eq!(leased.len(), 2);
    // Another owner cannot lease them, and nothing is expired yet.
    assert!(store
        .lease_operations("r2", &["op-a".into()], soon)
        .await
        .expect("lease r2")
        .is_empty());
    let stale = now() - Duration::minutes(1);
    let claimed = store
        .claim_expired_operations("r2", now(), stale, soon, 10)
        .await
        .expect("claim");
    assert!(claimed.is_empty());
    // r1's lease of op-a runs out: r2 claims it, once.
    let past = now() - Duration::seconds(1);
    store
        .lease_operations("r1", &["op-a".into()], past)
        .await
        .expect("expire");
    let claimed = store
        .claim_expired_operations("r2", now(), stale, soon, 10)
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, a.id);
    assert!(store
        .claim_expired_operations("r3", now(), stale, soon, 10)
        .await
        .expect("claim again")
        .is_empty());
    // r1 lost it: its renewal leaves it alone.
    assert!(store
        .lease_operations("r1", &["op-a".into()], soon)
        .await
        .expect("renew")
        .is_empty());
    // A finished operation is never claimed.
    store
        .update_operation(
            "op-b",
            &OperationUpdate {
                state: Some(OperationState::Succeeded),
                ..Default::default()
            },
        )
        .await
        .expect("finish");
    store
        .lease_operations("r1", &["op-b".into()], past)
        .await
        .expect("no lease of a finished one");
    assert!(store
        .claim_expired_operations("r2", now(), stale, soon, 10)
        .await
        .expect("claim")
        .is_empty());
    // Never leased and older than the stale mark: claimed.
    store
        .insert_operation(&operation("op-c", OperationKind::WakeSandbox, "sb-c"))
        .await
        .expect("c");
    let claimed = store
        .claim_expired_operations("r2", now(), now() + Duration::seconds(1), soon, 10)
        .await
        .expect("claim unleased");
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, "op-c");
}

pub async fn one_leader_at_a_time(store: Arc<dyn Store>) {
    let lead = store.try_lead().await.expect("lead").expect("leads");
    assert!(lead.is_held());
    if store.shared() {
        assert!(store.try_lead().await.expect("second").is_none());
        drop(lead);
        // The lock goes with its connection; the keeper is aborted on drop.
        let mut again = None;
        for _ in 0..50 {
            again = store.try_lead().await.expect("again");
            if again.is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(
            again.is_some(),
            "leadership is free after the leader dropped it"
        );
    }
}
