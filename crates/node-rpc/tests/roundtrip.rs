//! The node contract over real gRPC on loopback: a FakeNode served by `NodeService`, called
//! through `RemoteNode` — unary calls, typed errors, every kind of stream (attach output, file
//! read and write in the node-contract suite; watch, builds, port bodies) and membership, all
//! over TLS with pinned certificates (a wrong certificate or token is refused).

#![allow(clippy::unwrap_used)]

mod common;

use common::{launch, serve, TOKEN};

use std::sync::Arc;

use cove_domain::NodeState;
use cove_node_api::{NodeError, NodeLifecycle, NodeReleases, NodeReport};
use cove_node_rpc::tls::TlsIdentity;
use cove_node_rpc::transport::tls_incoming;
use cove_node_rpc::{
    ClusterClient, ClusterService, JoinAnswer, Membership, MembershipError, RemoteNode,
};
use cove_test_support::FakeNode;
use rustls::pki_types::CertificateDer;

#[tokio::test]
async fn the_contract_round_trips_over_grpc() {
    let fake = FakeNode::new();
    fake.add_release("base", 1);
    let (addr, cert) = serve(Arc::new(fake.clone())).await;
    let remote = RemoteNode::connect(&addr, TOKEN, cert).await.unwrap();
    assert_eq!(remote.capabilities(), fake.capabilities());
    assert_eq!(remote.recipes(), fake.recipes());

    remote.start_sandbox(launch("sbx-1")).await.unwrap();
    assert_eq!(
        remote.list_sandboxes().await.unwrap(),
        vec!["sbx-1".to_string()]
    );
    assert_eq!(
        remote.pause_sandbox("sbx-nope").await,
        Err(NodeError::SandboxNotFound("sbx-nope".into())),
        "typed errors cross the wire as they are"
    );
    let releases = remote.cached_releases().await.unwrap();
    assert_eq!(releases.len(), 1);

    // The agent check and the repair (protocol version 2).
    let second = std::time::Duration::from_secs(1);
    assert_eq!(
        remote.check_agent("sbx-1", second).await,
        Ok(cove_node_api::AgentHealth::Ok)
    );
    fake.set_state("sbx-1", cove_node_api::NodeSandboxState::Stopped);
    assert!(matches!(
        remote.check_agent("sbx-1", second).await,
        Ok(cove_node_api::AgentHealth::Dead { .. })
    ));
    let repaired = remote.repair_sandbox(launch("sbx-1")).await.unwrap();
    assert!(repaired.processes_restarted);
    assert_eq!(
        remote.check_agent("sbx-1", second).await,
        Ok(cove_node_api::AgentHealth::Ok)
    );

    // A command's output and files, streamed: the node-contract suite below.

    // A release build streams its events and its result.
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let built = remote
        .build_release("base", 2, false, tx, Default::default())
        .await
        .unwrap();
    assert!(built.digest.starts_with("sha256:"));
    assert!(rx.recv().await.is_some(), "build events arrive");

    // So does a build from a template file, its context inside the call; the stored copy of
    // a release goes by its digest.
    let (tx, _rx) = tokio::sync::mpsc::channel(16);
    let file = cove_node_api::FileBuild {
        parent: cove_node_api::BuildParent::Release {
            template: "base".into(),
            number: 2,
            digest: built.digest.clone(),
            defaults: Default::default(),
        },
        steps: vec![cove_node_api::FileStep {
            line: 2,
            text: "ENV A=1".into(),
            step: cove_node_api::BuildStep::Env {
                vars: vec![("A".into(), "1".into())],
            },
        }],
        stages: Vec::new(),
        context: bytes::Bytes::from_static(b"context bytes"),
        no_cache: false,
        network: cove_domain::EgressPolicy::offline(),
    };
    let from_file = remote
        .build_file_release("web", 1, file.clone(), tx, Default::default())
        .await
        .unwrap();
    assert_eq!(from_file.defaults.env["A"], "1");
    assert!(remote
        .cached_releases()
        .await
        .unwrap()
        .iter()
        .any(|r| r.template == "web" && r.number == 1));
    remote.remove_stored_release(&built.digest).await.unwrap();
    assert_eq!(fake.count(cove_test_support::Call::RemoveStoredRelease), 1);
    let huge = cove_node_api::FileBuild {
        context: bytes::Bytes::from(vec![0u8; cove_node_rpc::MAX_MESSAGE_BYTES]),
        ..file
    };
    let (tx, _rx) = tokio::sync::mpsc::channel(16);
    assert!(matches!(
        remote
            .build_file_release("web", 2, huge, tx, Default::default())
            .await,
        Err(NodeError::TooLarge(_))
    ));

    // Suspend and wake keep their results.
    remote
        .suspend_sandbox("sbx-1", Default::default())
        .await
        .unwrap();
    assert!(remote.has_snapshot("sbx-1").await.unwrap());
    remote.release_sandbox("sbx-1").await.unwrap();
    remote
        .wake_sandbox(launch("sbx-1"), Default::default())
        .await
        .unwrap();
    remote.destroy_sandbox("sbx-1").await.unwrap();
    assert!(remote.list_sandboxes().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_wrong_token_is_refused() {
    let (addr, cert) = serve(Arc::new(FakeNode::new())).await;
    match RemoteNode::connect(&addr, "wrong", cert).await {
        Err(NodeError::NodeUnreachable(m)) => assert!(m.contains("Unauthenticated"), "{m}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a wrong token was accepted"),
    }
}

#[tokio::test]
async fn a_node_with_another_certificate_is_refused() {
    let (addr, _) = serve(Arc::new(FakeNode::new())).await;
    let other = TlsIdentity::generate().unwrap().cert;
    match RemoteNode::connect(&addr, TOKEN, other).await {
        Err(NodeError::NodeUnreachable(m)) => assert!(m.contains("connect"), "{m}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a certificate other than the pinned one was accepted"),
    }
}

struct Registry;

#[async_trait::async_trait]
impl Membership for Registry {
    async fn join(
        &self,
        name: String,
        _address: String,
        _certificate: CertificateDer<'static>,
        report: NodeReport,
    ) -> Result<JoinAnswer, MembershipError> {
        if name == "refused" {
            return Err(MembershipError::Refused("no".into()));
        }
        assert_eq!(report.capacity.cpus, cove_test_support::FAKE_CPUS);
        Ok(JoinAnswer {
            heartbeat_interval: std::time::Duration::from_secs(2),
        })
    }

    async fn heartbeat(
        &self,
        name: &str,
        _report: NodeReport,
    ) -> Result<Option<NodeState>, MembershipError> {
        Ok((name == "known").then_some(NodeState::Ready))
    }
}

/// Serves the registry over TLS as `token`'s control plane; returns its address.
async fn serve_registry(token: &str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let identity = TlsIdentity::generate().unwrap();
    let incoming = tls_incoming(
        listener,
        identity.server_config().unwrap(),
        Default::default(),
    );
    let service = ClusterService::new(Arc::new(Registry), token, identity.cert.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming(incoming),
    );
    format!("https://{addr}")
}

#[tokio::test]
async fn nodes_discover_join_and_heartbeat() {
    let url = serve_registry(TOKEN).await;
    let fake = FakeNode::new();
    let report = NodeReport::read(&fake).await.unwrap();
    let own = TlsIdentity::generate().unwrap().cert;
    let pinned = ClusterClient::discover(&url, TOKEN).await.unwrap();
    let client = ClusterClient::new(&url, TOKEN, pinned.clone())
        .await
        .unwrap();
    let answer = client
        .join("known", "https://127.0.0.1:1", &own, &report)
        .await
        .unwrap();
    assert_eq!(answer.heartbeat_interval.as_secs(), 2);
    assert_eq!(
        client.heartbeat("known", &report).await.unwrap(),
        Some(NodeState::Ready)
    );
    assert_eq!(client.heartbeat("other", &report).await.unwrap(), None);
    assert!(matches!(
        client
            .join("refused", "https://127.0.0.1:1", &own, &report)
            .await,
        Err(MembershipError::Refused(_))
    ));
    let wrong = ClusterClient::new(&url, "wrong", pinned).await.unwrap();
    assert!(matches!(
        wrong.join("known", "x", &own, &report).await,
        Err(MembershipError::Refused(_))
    ));
}

#[tokio::test]
async fn a_control_plane_that_cannot_prove_the_token_is_not_trusted() {
    // Something answering at the address without the join token (a machine in the middle
    // with its own certificate): discover refuses it, before any token is sent.
    let impostor = serve_registry("not-the-join-token").await;
    match ClusterClient::discover(&impostor, TOKEN).await {
        Err(MembershipError::Refused(m)) => assert!(m.contains("did not prove"), "{m}"),
        other => panic!("an unproven certificate was trusted: {other:?}"),
    }
    // A client pinned to one control plane refuses another's certificate.
    let real = serve_registry(TOKEN).await;
    let pinned = ClusterClient::discover(&real, TOKEN).await.unwrap();
    let report = NodeReport::read(&FakeNode::new()).await.unwrap();
    let own = TlsIdentity::generate().unwrap().cert;
    let to_impostor = ClusterClient::new(&impostor, TOKEN, pinned).await.unwrap();
    assert!(matches!(
        to_impostor.join("known", "x", &own, &report).await,
        Err(MembershipError::Unreachable(_))
    ));
}

/// The node-contract suite (`cove_test_support::contract`) through the gRPC pair: the same
/// cases the fake passes in process.
#[tokio::test]
async fn the_grpc_pair_keeps_the_node_contract() {
    let fake = FakeNode::new();
    cove_test_support::contract::prepare(&fake);
    let (addr, cert) = serve(Arc::new(fake.clone())).await;
    let remote = RemoteNode::connect(&addr, TOKEN, cert).await.unwrap();
    cove_test_support::contract::run(&remote, launch("sbx-contract")).await;
}
