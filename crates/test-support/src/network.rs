//! `NodeNetwork` of the fake node: the policy a sandbox was launched with (or last set), zero
//! counters, and denials a test sends with [`FakeNode::deny`].

use async_trait::async_trait;
use cove_domain::EgressPolicy;
use cove_node_api::{
    NetworkCounters, NetworkDenied, NodeError, NodeNetwork, NodeSandboxState, SandboxNetworkInfo,
};
use futures::stream::{BoxStream, StreamExt};

use crate::{Call, FakeNode};

impl FakeNode {
    /// Reports a refused connection of `sandbox_id` toward `destination` (reason `denied`) to
    /// every `network_denials` stream.
    pub fn deny(&self, sandbox_id: &str, destination: &str) {
        let _ = self.shared.denials.send(NetworkDenied {
            sandbox_id: sandbox_id.to_string(),
            destination: destination.to_string(),
            protocol: "tcp".into(),
            reason: "denied".into(),
            host: destination.split(':').next().map(str::to_string),
            port: destination
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse().ok()),
            rule: Some(format!("deny {destination}")),
        });
    }

    /// The policy the fake node holds for a sandbox (as launched or last set).
    pub fn network_policy(&self, sandbox_id: &str) -> Option<EgressPolicy> {
        self.lock()
            .sandboxes
            .get(sandbox_id)
            .map(|s| s.launch.network.clone())
    }
}

#[async_trait]
impl NodeNetwork for FakeNode {
    async fn sandbox_network(&self, id: &str) -> Result<SandboxNetworkInfo, NodeError> {
        let mut st = self.lock();
        let sb = st.sandbox(id)?;
        if sb.state == NodeSandboxState::Stopped {
            return Err(NodeError::SandboxNotFound(id.to_string()));
        }
        Ok(SandboxNetworkInfo {
            policy: sb.launch.network.clone(),
            counters: NetworkCounters::default(),
            address: Some("198.51.100.2".into()),
        })
    }

    async fn set_sandbox_network(&self, id: &str, policy: EgressPolicy) -> Result<(), NodeError> {
        {
            let mut st = self.lock();
            let sb = st.sandbox(id)?;
            sb.launch.network = policy;
        }
        self.bump();
        Ok(())
    }

    async fn rearm_secrets(
        &self,
        id: &str,
        secrets: std::collections::BTreeMap<String, cove_node_api::LaunchSecret>,
    ) -> Result<(), NodeError> {
        self.run(Call::RearmSecrets, id, None, |st| {
            let launch = &mut st.sandbox(id)?.launch;
            // As the real node: a sandbox started without substitution trusts no gateway CA.
            if launch.secrets.is_empty() && !launch.arm_secrets {
                return Err(NodeError::Unsupported(
                    "the sandbox was started without secret substitution".into(),
                ));
            }
            launch.secrets = secrets;
            Ok(())
        })
        .await
    }

    /// Answers `200` with `port P METHOD PATH` from a running sandbox; port 1 is closed.
    async fn forward_http(
        &self,
        id: &str,
        request: cove_node_api::PortRequest,
        _body: cove_node_api::ByteStream,
    ) -> Result<(cove_node_api::PortResponse, cove_node_api::ByteStream), NodeError> {
        {
            let mut st = self.lock();
            st.serving(id)?;
        }
        if request.port == 1 {
            return Err(NodeError::PortClosed("nothing answers on port 1".into()));
        }
        let text = format!(
            "port {} {} {}",
            request.port, request.method, request.path_and_query
        );
        let body = futures::stream::once(async move { Ok(bytes::Bytes::from(text)) }).boxed();
        Ok((
            cove_node_api::PortResponse {
                status: 200,
                headers: vec![("content-type".into(), b"text/plain".to_vec())],
            },
            body,
        ))
    }

    fn network_denials(&self) -> BoxStream<'static, NetworkDenied> {
        let rx = self.shared.denials.subscribe();
        futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(e) => return Some((e, rx)),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .boxed()
    }
}
