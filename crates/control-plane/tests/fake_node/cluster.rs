//! Several fake nodes behind a `Cluster`: placement spreads, drain and quarantine stop
//! placement, a lost node's running sandboxes fail `node_lost` while suspended ones stay and
//! wake elsewhere, and a node that returns has its unwanted sandboxes removed.

use std::sync::Arc;
use std::time::Duration;

use cove_api_types::{ErrorCode, NodeState, SandboxState};
use cove_cluster::{Cluster, ClusterConfig};
use cove_control_plane::LifecycleVerb::*;
use cove_node_api::{NodeError, NodeReport};
use cove_test_support::{Call, FakeNode, Fault};

use crate::harness::as_system;
use crate::harness::{code, Harness};

pub(crate) const NAMES: [&str; 3] = ["a", "b", "c"];

/// Three fake nodes (`a`, `b`, `c`, each with release 1 of `base`) behind a cluster.
pub(crate) struct Nodes {
    pub(crate) h: Harness,
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) fakes: Vec<FakeNode>,
}

impl Nodes {
    pub(crate) async fn new() -> Nodes {
        use cove_node_api::NodeLifecycle;
        let runtime = FakeNode::new().capabilities().runtime;
        let cluster = Cluster::new(ClusterConfig {
            runtime,
            ..ClusterConfig::default()
        });
        let mut fakes = Vec::new();
        for name in NAMES {
            let fake = FakeNode::new();
            fake.add_release("base", 1);
            let report = NodeReport::read(&fake).await.expect("report");
            cluster.join(name, "fake", Arc::new(fake.clone()), report, false);
            fakes.push(fake);
        }
        let h = Harness::with_cluster(fakes[0].clone(), Some(cluster.clone()), |cfg| {
            cfg.controller_interval = Duration::from_secs(1);
            cfg.reconcile_interval = Duration::from_secs(3600);
        })
        .await;
        let nodes = Nodes { h, cluster, fakes };
        nodes.beat(&NAMES).await;
        nodes
    }

    pub(crate) fn fake(&self, name: &str) -> &FakeNode {
        &self.fakes[NAMES.iter().position(|n| *n == name).expect("a node name")]
    }

    /// Heartbeats of `names` with their current reports.
    pub(crate) async fn beat(&self, names: &[&str]) {
        for name in names {
            let report = NodeReport::read(self.fake(name)).await.expect("report");
            self.cluster.heartbeat(name, report);
        }
    }

    pub(crate) fn counts(&self) -> Vec<usize> {
        self.fakes.iter().map(|f| f.sandbox_ids().len()).collect()
    }

    pub(crate) fn state_of(&self, name: &str) -> NodeState {
        let nodes = self.cluster.nodes();
        nodes.iter().find(|n| n.name == name).expect("node").state
    }
}

#[tokio::test]
async fn creates_spread_across_nodes() {
    as_system(async {
        let n = Nodes::new().await;
        for _ in 0..6 {
            n.h.running().await;
        }
        assert_eq!(n.counts(), vec![2, 2, 2]);
        let listed = n.h.cp.list_nodes().await.expect("nodes").nodes;
        assert_eq!(listed.len(), 3);
        assert!(listed
            .iter()
            .all(|v| v.sandboxes == 2 && v.state == NodeState::Ready));
        assert!(listed[0].releases.contains(&"base/1".to_string()));
    })
    .await;
}

#[tokio::test]
async fn a_drained_node_takes_no_creates_until_ready_again() {
    as_system(async {
        let n = Nodes::new().await;
        let kept = n.h.running().await;
        assert_eq!(n.cluster.node_of(&kept).as_deref(), Some("a"));
        n.h.cp
            .set_node_state("a", NodeState::Draining)
            .await
            .expect("drain");
        for _ in 0..4 {
            n.h.running().await;
        }
        assert_eq!(n.counts(), vec![1, 2, 2], "nothing new on a drained node");
        assert_eq!(n.h.state(&kept).await, SandboxState::Running);
        n.h.cp
            .set_node_state("a", NodeState::Ready)
            .await
            .expect("ready");
        n.h.running().await;
        assert_eq!(n.counts(), vec![2, 2, 2]);
        assert_eq!(
            code(n.h.cp.set_node_state("zz", NodeState::Draining).await),
            ErrorCode::NodeNotFound
        );
        assert_eq!(
            code(n.h.cp.set_node_state("a", NodeState::Lost).await),
            ErrorCode::InvalidArgument
        );
    })
    .await;
}

#[tokio::test]
async fn a_node_failing_creates_in_a_row_is_quarantined() {
    as_system(async {
        let n = Nodes::new().await;
        n.fake("a").inject(
            Call::Start,
            Fault::fail(NodeError::Runtime("runc broke".into())).always(),
        );
        for _ in 0..3 {
            let (s, op) = n.h.create_with(Default::default()).await;
            n.h.settle(&op.id).await;
            assert_eq!(n.h.state(&s.id).await, SandboxState::Failed);
        }
        assert_eq!(n.state_of("a"), NodeState::Quarantined);
        let reason = n.cluster.nodes()[0].reason.clone().expect("a reason");
        assert!(reason.contains("3 creates failed in a row"), "{reason}");
        let id = n.h.running().await;
        assert_ne!(n.cluster.node_of(&id).as_deref(), Some("a"));
        // An operator ends the quarantine.
        n.h.cp
            .set_node_state("a", NodeState::Ready)
            .await
            .expect("ready");
        assert_eq!(n.state_of("a"), NodeState::Ready);
    })
    .await;
}

#[tokio::test]
async fn a_lost_node_fails_its_running_sandboxes_and_a_returning_one_reconciles() {
    as_system(async {
        let n = Nodes::new().await;
        let mut on = std::collections::BTreeMap::new();
        for _ in 0..6 {
            let id = n.h.running().await;
            on.entry(n.cluster.node_of(&id).expect("placed"))
                .or_insert_with(Vec::new)
                .push(id);
        }
        let (b_running, b_suspended) = (on["b"][0].clone(), on["b"][1].clone());
        n.h.apply(&b_suspended, Suspend).await;
        assert!(n.fake("b").snapshot_exists(&b_suspended));

        // b stops sending heartbeats; a and c keep on.
        for _ in 0..6 {
            n.h.advance(Duration::from_secs(2)).await;
            n.beat(&["a", "c"]).await;
        }
        n.h.controller_pass().await;
        assert_eq!(n.state_of("b"), NodeState::Lost);
        let failed = n.h.sandbox(&b_running).await;
        assert_eq!(failed.state, SandboxState::Failed);
        let reason = n.h.event_log(&b_running).await;
        assert!(
            reason
                .iter()
                .any(|(_, r)| r.as_deref().is_some_and(|r| r.starts_with("node_lost"))),
            "{reason:?}"
        );
        assert_eq!(n.h.state(&b_suspended).await, SandboxState::Suspended);
        for id in &on["a"] {
            assert_eq!(n.h.state(id).await, SandboxState::Running);
        }

        // New creates go elsewhere; the suspended one wakes on another node (the fake nodes do
        // not share a snapshot store, so give a's the snapshot as a shared store would).
        let id = n.h.running().await;
        assert_ne!(n.cluster.node_of(&id).as_deref(), Some("b"));
        for f in &n.fakes {
            f.add_snapshot(&b_suspended);
        }
        n.h.apply(&b_suspended, Wake).await;
        assert_ne!(n.cluster.node_of(&b_suspended).as_deref(), Some("b"));

        // b comes back: it is ready again, and what it still holds that the control plane no
        // longer wants is removed (the failed sandbox), or released where it runs elsewhere now
        // (the woken one, its snapshot kept).
        n.beat(&["a", "b", "c"]).await;
        assert_eq!(n.state_of("b"), NodeState::Ready);
        n.h.advance(Duration::ZERO).await;
        n.h.cp.reconcile().await.expect("reconcile");
        assert!(
            !n.fake("b").sandbox_ids().contains(&b_running),
            "the failed sandbox is removed from the returning node"
        );
        crate::harness::eventually("the woken sandbox released on b", || async {
            !n.fake("b").sandbox_ids().contains(&b_suspended)
        })
        .await;
        assert_eq!(n.h.state(&b_suspended).await, SandboxState::Running);
    })
    .await;
}

#[tokio::test]
async fn a_file_release_builds_on_one_node_and_runs_on_another_by_its_digest() {
    as_system(async {
        let n = Nodes::new().await;
        let mut tar = tar::Builder::new(Vec::new());
        let file = b"FROM base:1\nRUN make\n";
        let mut header = tar::Header::new_gnu();
        header.set_size(file.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, "Dockerfile", &file[..])
            .expect("append");
        let q = cove_control_plane::TemplateFileBuild {
            name: "web".into(),
            ..Default::default()
        };
        let built =
            n.h.cp
                .create_template_from_file(q, tar.into_inner().expect("tar").into())
                .await
                .expect("accepted");
        n.h.settle(&built.operation.id).await;
        let built_on: Vec<usize> = NAMES
            .iter()
            .map(|name| n.fake(name).count_on(Call::BuildRelease, "web"))
            .collect();
        assert_eq!(built_on, vec![1, 0, 0], "built once, on the first node");

        // With the builder drained, a node without the release takes the create and gets the
        // digest to fetch it by.
        n.h.cp
            .set_node_state("a", NodeState::Draining)
            .await
            .expect("drain");
        let id =
            n.h.running_with(cove_api_types::CreateSandboxRequest {
                template: Some("web".into()),
                ..Default::default()
            })
            .await;
        let node = n.cluster.node_of(&id).expect("placed");
        assert_ne!(node, "a");
        let digest = n.h.cp.get_template("web").await.expect("template").releases[0]
            .digest
            .clone();
        assert!(digest.is_some());
        assert_eq!(
            n.fake(&node)
                .launch_of(&id)
                .expect("launched")
                .release_digest,
            digest
        );
    })
    .await;
}

/// Reaches every node as the one fake node (what a replica connects to after a sync).
struct SameNode(FakeNode);

#[async_trait::async_trait]
impl cove_cluster::NodeConnector for SameNode {
    async fn connect(
        &self,
        _address: &str,
        _certificate: &[u8],
    ) -> Result<Arc<dyn cove_node_api::NodeApi>, String> {
        Ok(Arc::new(self.0.clone()))
    }
}

#[tokio::test]
async fn replicas_share_nodes_states_and_placements_through_the_store() {
    as_system(async {
        use cove_node_api::NodeLifecycle;
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn cove_store::Store> = Arc::new(
            cove_store::SqliteStore::open(&dir.path().join("shared.db"))
                .await
                .expect("store"),
        );
        let fake = FakeNode::new();
        fake.add_release("base", 1);
        let cfg = ClusterConfig {
            runtime: fake.capabilities().runtime,
            ..ClusterConfig::default()
        };
        let replica =
            || Cluster::new_shared(cfg.clone(), store.clone(), Arc::new(SameNode(fake.clone())));
        let (a, b) = (replica(), replica());
        let report = NodeReport::read(&fake).await.expect("report");
        let joined = a
            .join_remote(
                "n1",
                "https://n1:7710",
                vec![1, 2, 3],
                Arc::new(fake.clone()),
                report.clone(),
            )
            .await
            .expect("join at A");
        assert_eq!(joined, NodeState::Ready);
        assert!(b.nodes().is_empty(), "B learns nodes from the store");
        b.sync().await.expect("sync");
        let at_b = b.nodes();
        assert_eq!(at_b.len(), 1);
        assert_eq!(
            (
                at_b[0].name.as_str(),
                at_b[0].address.as_str(),
                at_b[0].state
            ),
            ("n1", "https://n1:7710", NodeState::Ready)
        );

        // A sandbox placed through A's control plane is routed by B.
        let h = Harness::with_cluster(fake.clone(), Some(a.clone()), |_| {}).await;
        let id = h.running().await;
        assert_eq!(a.node_of(&id).as_deref(), Some("n1"));
        b.sync().await.expect("sync");
        assert_eq!(b.node_of(&id).as_deref(), Some("n1"));

        // Heartbeats at B are recorded for both; one of a node no replica knows asks it to join.
        assert_eq!(
            b.heartbeat_remote("n1", report.clone()).await,
            Some(NodeState::Ready)
        );
        assert_eq!(b.heartbeat_remote("zz", report.clone()).await, None);

        // A drain made at B holds at A, and a join again keeps it.
        b.set_state("n1", NodeState::Draining).expect("drain");
        b.record_states(&["n1".to_string()]).await;
        a.sync().await.expect("sync");
        assert_eq!(a.nodes()[0].state, NodeState::Draining);
        let again = a
            .join_remote(
                "n1",
                "https://n1:7710",
                vec![1, 2, 3],
                Arc::new(fake.clone()),
                report,
            )
            .await
            .expect("join again");
        assert_eq!(again, NodeState::Draining);

        // A delete through A forgets the placement for every replica.
        let del = h.cp.delete_sandbox(&id, None).await.expect("delete");
        h.succeeds(&del).await;
        crate::harness::eventually("the sandbox deleted", || async {
            h.state(&id).await == SandboxState::Deleted
        })
        .await;
        b.sync().await.expect("sync");
        assert_eq!(b.node_of(&id), None);
    })
    .await;
}
