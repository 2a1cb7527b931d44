//! What the gRPC test files share: a node served over TLS on loopback, and a launch.

#![allow(clippy::unwrap_used, dead_code)] // not every test file uses every item

use std::sync::Arc;

use cove_node_api::NodeApi;
use cove_node_rpc::tls::TlsIdentity;
use cove_node_rpc::transport::tls_incoming;
use cove_node_rpc::NodeService;
use rustls::pki_types::CertificateDer;

/// The join token every test node takes.
pub const TOKEN: &str = "join-token-for-tests";

/// Serves `node` over TLS on a loopback port; returns its `https://` address and certificate.
pub async fn serve(node: Arc<dyn NodeApi>) -> (String, CertificateDer<'static>) {
    serve_service(NodeService::new(node, TOKEN)).await
}

/// Serves `service` (taking [`TOKEN`]) over TLS on a loopback port, as [`serve`].
pub async fn serve_service(service: NodeService) -> (String, CertificateDer<'static>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let identity = TlsIdentity::generate().unwrap();
    let incoming = tls_incoming(
        listener,
        identity.server_config().unwrap(),
        Default::default(),
    );
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming(incoming),
    );
    (format!("https://{addr}"), identity.cert)
}

pub use cove_test_support::contract::launch;
