//! Node membership: a node agent joins a control plane and sends heartbeats ([`ClusterClient`]);
//! the control plane serves its node registry ([`Membership`]) through [`ClusterService`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cove_domain::NodeState;
use cove_node_api::NodeReport;
use rustls::pki_types::CertificateDer;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::pb::cluster_client::ClusterClient as PbClusterClient;
use crate::pb::cluster_server::{Cluster, ClusterServer};
use crate::pb::{
    DiscoverReply, DiscoverRequest, HeartbeatReply, HeartbeatRequest, JoinReply, JoinRequest,
};
use crate::tls::{check_discover_proof, discover_proof, PinnedVerifier, NONCE_BYTES};
use crate::wire::{check_token, check_version, encode, with_token};
use crate::PROTOCOL_VERSION;

/// What the control plane answers a join with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinAnswer {
    /// How often the node must send a heartbeat.
    pub heartbeat_interval: Duration,
}

/// Why a join or heartbeat failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    /// The control plane refused the node (a wrong token, a version it does not speak, a node
    /// it cannot call back at its address).
    #[error("refused: {0}")]
    Refused(String),
    /// The control plane cannot be reached.
    #[error("control plane unreachable: {0}")]
    Unreachable(String),
}

/// The control plane's node registry as node agents see it.
#[async_trait]
pub trait Membership: Send + Sync + 'static {
    /// A node joins (or joins again after a restart or a loss) as `name`, serving the node
    /// contract at `address` with TLS certificate `certificate` (DER; pinned for calls to it).
    async fn join(
        &self,
        name: String,
        address: String,
        certificate: CertificateDer<'static>,
        report: NodeReport,
    ) -> Result<JoinAnswer, MembershipError>;

    /// A heartbeat of a joined node; returns its state, or `None` when the registry does not
    /// know it (the node then joins again).
    async fn heartbeat(
        &self,
        name: &str,
        report: NodeReport,
    ) -> Result<Option<NodeState>, MembershipError>;
}

/// Serves a [`Membership`] over gRPC to node agents that present the join token.
pub struct ClusterService {
    membership: Arc<dyn Membership>,
    token: Arc<str>,
    certificate: CertificateDer<'static>,
}

impl ClusterService {
    /// Serves `membership` to callers that present `token`, over TLS with `certificate` (DER),
    /// which `Discover` proves with the token.
    pub fn new(
        membership: Arc<dyn Membership>,
        token: &str,
        certificate: CertificateDer<'static>,
    ) -> Self {
        ClusterService {
            membership,
            token: token.into(),
            certificate,
        }
    }

    /// The tonic service, ready for `tonic::transport::Server::add_service`.
    pub fn into_server(self) -> ClusterServer<ClusterService> {
        ClusterServer::new(self)
    }
}

fn report(bytes: &[u8]) -> Result<NodeReport, Status> {
    serde_json::from_slice(bytes).map_err(|e| Status::invalid_argument(format!("report: {e}")))
}

fn status(e: MembershipError) -> Status {
    match e {
        MembershipError::Refused(m) => Status::failed_precondition(m),
        MembershipError::Unreachable(m) => Status::unavailable(m),
    }
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn discover(
        &self,
        req: Request<DiscoverRequest>,
    ) -> Result<Response<DiscoverReply>, Status> {
        let d = req.into_inner();
        check_version(d.version)?;
        if d.nonce.len() != NONCE_BYTES {
            return Err(Status::invalid_argument(format!(
                "the nonce must be {NONCE_BYTES} bytes"
            )));
        }
        Ok(Response::new(DiscoverReply {
            version: PROTOCOL_VERSION,
            proof: discover_proof(&self.token, &d.nonce, &self.certificate),
        }))
    }

    async fn join(&self, req: Request<JoinRequest>) -> Result<Response<JoinReply>, Status> {
        check_token(&req, &self.token)?;
        let j = req.into_inner();
        check_version(j.version)?;
        let answer = self
            .membership
            .join(
                j.name,
                j.address,
                CertificateDer::from(j.certificate),
                report(&j.report)?,
            )
            .await
            .map_err(status)?;
        Ok(Response::new(JoinReply {
            version: PROTOCOL_VERSION,
            heartbeat_interval_s: answer.heartbeat_interval.as_secs().max(1) as u32,
        }))
    }

    async fn heartbeat(
        &self,
        req: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatReply>, Status> {
        check_token(&req, &self.token)?;
        let h = req.into_inner();
        check_version(h.version)?;
        let state = self
            .membership
            .heartbeat(&h.name, report(&h.report)?)
            .await
            .map_err(status)?;
        Ok(Response::new(HeartbeatReply {
            state: state.map_or("unknown", NodeState::as_str).to_string(),
        }))
    }
}

/// A node agent's side of membership.
#[derive(Clone)]
pub struct ClusterClient {
    client: PbClusterClient<Channel>,
    token: String,
}

fn from_status(s: Status) -> MembershipError {
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown => {
            MembershipError::Unreachable(s.message().to_string())
        }
        _ => MembershipError::Refused(s.message().to_string()),
    }
}

/// The endpoint of the control plane's node listener: 5 s to connect, 10 s per call.
fn control_plane_endpoint(url: &str) -> Result<tonic::transport::Endpoint, MembershipError> {
    Ok(crate::transport::endpoint(url)
        .map_err(MembershipError::Refused)?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10)))
}

impl ClusterClient {
    /// Learns the control plane's TLS certificate at `url` (its node listener,
    /// `https://host:port`): connects accepting any certificate, and keeps the one presented
    /// only if the control plane proves, with `token`, that it is its own ([`crate::tls`]).
    ///
    /// # Errors
    /// `Unreachable` when it does not answer; `Refused` when the URL is malformed or the proof
    /// is wrong (a wrong token, or something in the middle).
    pub async fn discover(
        url: &str,
        token: &str,
    ) -> Result<CertificateDer<'static>, MembershipError> {
        let endpoint = control_plane_endpoint(url)?;
        let verifier = PinnedVerifier::recording();
        let config = verifier
            .client_config()
            .map_err(|e| MembershipError::Refused(e.to_string()))?;
        let channel = crate::transport::tls_channel(endpoint, config, false)
            .await
            .map_err(|e| MembershipError::Unreachable(format!("{url}: {e}")))?;
        let nonce: [u8; NONCE_BYTES] = rand::random();
        let reply = PbClusterClient::new(channel)
            .discover(DiscoverRequest {
                version: PROTOCOL_VERSION,
                nonce: nonce.to_vec(),
            })
            .await
            .map_err(from_status)?
            .into_inner();
        let seen = verifier
            .seen()
            .ok_or_else(|| MembershipError::Refused("no certificate was presented".into()))?;
        check_discover_proof(token, &nonce, &seen, &reply.proof)
            .map_err(|e| MembershipError::Refused(e.to_string()))?;
        Ok(seen)
    }

    /// A client of the control plane at `url` (`https://host:port`, its node listener) that
    /// accepts only `certificate` (from [`ClusterClient::discover`]). The connection is made
    /// lazily and re-made after failures.
    ///
    /// # Errors
    /// `Refused` when the URL is malformed.
    pub async fn new(
        url: &str,
        token: &str,
        certificate: CertificateDer<'static>,
    ) -> Result<ClusterClient, MembershipError> {
        let endpoint = control_plane_endpoint(url)?;
        let config = PinnedVerifier::pinned(certificate)
            .client_config()
            .map_err(|e| MembershipError::Refused(e.to_string()))?;
        let channel = crate::transport::tls_channel(endpoint, config, true)
            .await
            .map_err(|e| MembershipError::Unreachable(format!("{url}: {e}")))?;
        Ok(ClusterClient {
            client: PbClusterClient::new(channel),
            token: token.to_string(),
        })
    }

    /// Joins as `name`, serving the node contract at `address` with TLS certificate
    /// `certificate` (DER).
    ///
    /// # Errors
    /// `Refused` (token, version, a callback to `address` that failed) or `Unreachable`.
    pub async fn join(
        &self,
        name: &str,
        address: &str,
        certificate: &CertificateDer<'static>,
        report: &NodeReport,
    ) -> Result<JoinAnswer, MembershipError> {
        let req = with_token(
            JoinRequest {
                version: PROTOCOL_VERSION,
                name: name.to_string(),
                address: address.to_string(),
                report: encode(report),
                certificate: certificate.to_vec(),
            },
            &self.token,
        );
        let reply = self
            .client
            .clone()
            .join(req)
            .await
            .map_err(from_status)?
            .into_inner();
        Ok(JoinAnswer {
            heartbeat_interval: Duration::from_secs(u64::from(reply.heartbeat_interval_s.max(1))),
        })
    }

    /// Sends a heartbeat; returns the node's state (`None`: join again).
    ///
    /// # Errors
    /// As [`ClusterClient::join`].
    pub async fn heartbeat(
        &self,
        name: &str,
        report: &NodeReport,
    ) -> Result<Option<NodeState>, MembershipError> {
        let req = with_token(
            HeartbeatRequest {
                version: PROTOCOL_VERSION,
                name: name.to_string(),
                report: encode(report),
            },
            &self.token,
        );
        let reply = self
            .client
            .clone()
            .heartbeat(req)
            .await
            .map_err(from_status)?
            .into_inner();
        Ok(NodeState::parse(&reply.state))
    }
}
