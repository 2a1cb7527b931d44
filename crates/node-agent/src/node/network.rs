//! Sandbox networks: the node's [`cove_network::Network`] (a namespace per sandbox behind the
//! egress gateway) wired into the sandbox lifecycle.
//!
//! * Node start ([`NodeAgent::with_network`]): the gateway starts, adopting the namespaces of the
//!   sandboxes the runtime still runs (recorded in `<data-dir>/network/<id>.json`, written at
//!   attach and on every policy change, so a `kill -9` of the node loses nothing); every other
//!   namespace of the node's prefix is removed. A running sandbox whose namespace is gone is
//!   reported stopped on adoption (its processes cannot move to a new namespace).
//! * Start and wake: attach (a prepared namespace), the runtime joins it and gets the gateway as
//!   its resolver; with secrets, interception is turned on and its CA handed to the runtime.
//! * Release (suspend's end, delete): the runtime stops, then the namespace goes. Pause and
//!   resume touch nothing.
//! * Counters count from the sandbox's creation: a suspend writes them into the snapshot's
//!   manifest and the wake adds them back, a rollback carries them on, and the record holds
//!   them for a restart (written every metrics tick when they changed, and at shutdown).
//! * Node shutdown: the handle is dropped, leaving the namespaces for the next start's recovery
//!   (sandboxes keep running while the server is down).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use cove_domain::EgressPolicy;
use cove_network::{Adopt, Network, NetworkConfig, NetworkError, Reuse, Secret};
use cove_node_api::{
    NetworkCounters, NetworkDenied, NodeNetwork, PortRequest, PortResponse, SandboxLaunch,
    SandboxNetworkInfo,
};
use cove_runtime::{RuntimeState, SandboxNetwork};
use serde::{Deserialize, Serialize};

use super::*;

/// Variables TLS clients read for their CA bundle: OpenSSL and Python's `ssl`
/// (`SSL_CERT_FILE`), requests (`REQUESTS_CA_BUNDLE`), pip (`PIP_CERT`), curl
/// (`CURL_CA_BUNDLE`), Node.js (`NODE_EXTRA_CA_CERTS`, added to its built-in roots).
const TRUST_ENV: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
];

/// What the node records of one sandbox's network (`<data-dir>/network/<id>.json`, mode 0600):
/// enough to adopt its namespace after a restart and keep its placeholders and CA. Never a
/// secret's value.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct NetRecord {
    /// The namespace's name (`ip netns` name).
    pub netns: String,
    /// The policy in force.
    pub policy: EgressPolicy,
    /// Secret name → placeholder in the sandbox's environment.
    #[serde(default)]
    pub placeholders: BTreeMap<String, String>,
    /// The key of the sandbox's interception CA (the sandbox trusts that CA), to re-arm
    /// interception after a restart.
    #[serde(default)]
    pub ca_key_pem: Option<String>,
    /// Its counters when last recorded (every few seconds and at shutdown), carried on by the
    /// next start's adoption.
    #[serde(default)]
    pub counters: Option<NetworkCounters>,
}

/// The node's network state: the gateway and what it knows per sandbox.
pub(crate) struct NodeNet {
    pub net: Network,
    /// Placeholders per sandbox (commands get them in their environment).
    pub placeholders: Mutex<HashMap<String, BTreeMap<String, String>>>,
    /// Sandboxes the runtime still runs whose namespace was gone at start.
    pub lost: Mutex<HashSet<String>>,
}

fn net_err(e: NetworkError) -> NodeError {
    match e {
        NetworkError::NotAttached(id) => NodeError::SandboxNotFound(id),
        NetworkError::Config(m) => NodeError::InvalidArgument {
            field: "secrets".into(),
            message: m,
        },
        other => NodeError::Runtime(format!("sandbox network: {other}")),
    }
}

fn io_err(what: &str, path: &std::path::Path, e: std::io::Error) -> NodeError {
    NodeError::Internal(format!("{what} {}: {e}", path.display()))
}

impl NodeAgent {
    fn net_dir(&self) -> PathBuf {
        self.cfg.data_dir.join("network")
    }

    fn net_record_path(&self, id: &str) -> PathBuf {
        self.net_dir().join(format!("{id}.json"))
    }

    fn write_net_record(&self, id: &str, rec: &NetRecord) -> Result<(), NodeError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = self.net_dir();
        std::fs::create_dir_all(&dir).map_err(|e| io_err("create", &dir, e))?;
        let path = self.net_record_path(id);
        let tmp = path.with_extension("json.tmp");
        let json = serde_json::to_vec(rec).map_err(|e| NodeError::Internal(e.to_string()))?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io_err("create", &tmp, e))?;
        // No fsync: the record guards against the node process dying (its page cache stays);
        // a machine crash ends the sandboxes with it. The rename makes it whole or absent.
        f.write_all(&json).map_err(|e| io_err("write", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io_err("rename", &path, e))
    }

    fn read_net_records(&self) -> Vec<(String, NetRecord)> {
        let Ok(entries) = std::fs::read_dir(self.net_dir()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let path = e.path();
            let Some(id) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".json"))
            else {
                let _ = std::fs::remove_file(&path);
                continue;
            };
            match std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<NetRecord>(&b).ok())
            {
                Some(rec) => out.push((id.to_string(), rec)),
                None => {
                    warn!(path = %path.display(), "unreadable sandbox network record removed");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        out
    }

    fn read_net_record(&self, id: &str) -> Option<NetRecord> {
        std::fs::read(self.net_record_path(id))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    }

    fn remove_net_record(&self, id: &str) {
        match std::fs::remove_file(self.net_record_path(id)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => warn!(sandbox_id = %id, error = %e, "cannot remove the network record"),
        }
    }

    /// Starts the node's sandbox network with `config`: adopts the namespaces of the sandboxes
    /// the runtime still runs (or keeps paused), removes every other namespace of the prefix.
    /// Call once, before the node serves. Errors: the gateway could not start (`ip`/`nft`
    /// failures, a pool that overlaps a host route).
    pub async fn with_network(mut self, config: NetworkConfig) -> Result<Self, NodeError> {
        let mut adopt = Vec::new();
        let mut placeholders = HashMap::new();
        let mut counted = HashMap::new();
        for (id, rec) in self.read_net_records() {
            let alive = matches!(
                self.runtime.state(&id).await,
                Ok(Some(RuntimeState::Running | RuntimeState::Paused))
            );
            if alive {
                placeholders.insert(id.clone(), rec.placeholders.clone());
                if let Some(c) = rec.counters {
                    counted.insert(id.clone(), c);
                }
                adopt.push(Adopt {
                    sandbox_id: id,
                    netns: rec.netns,
                    policy: rec.policy,
                });
            } else {
                self.remove_net_record(&id);
            }
        }
        let (net, recovery) = Network::start(config, adopt)
            .await
            .map_err(|e| NodeError::Runtime(format!("sandbox network: {e}")))?;
        for a in &recovery.adopted {
            // A VM's tap bridge takes in the namespace's new link to the gateway.
            if self.runtime.capabilities().network_tap {
                if let Err(e) = net.add_tap(&a.sandbox_id).await {
                    warn!(sandbox_id = %a.sandbox_id, error = %e, "cannot re-bridge the VM's tap");
                }
            }
            if let Some(c) = counted.get(&a.sandbox_id) {
                if let Err(e) = net.add_counters(&a.sandbox_id, &gateway_counters(c)) {
                    warn!(sandbox_id = %a.sandbox_id, error = %e, "cannot carry network counters on");
                }
            }
        }
        for id in &recovery.missing {
            warn!(sandbox_id = %id, "the sandbox's network namespace was gone at start");
            placeholders.remove(id);
            self.remove_net_record(id);
        }
        info!(
            adopted = recovery.adopted.len(),
            missing = recovery.missing.len(),
            removed = recovery.removed.len(),
            "sandbox network ready"
        );
        self.network = Some(Arc::new(NodeNet {
            net,
            placeholders: Mutex::new(placeholders),
            lost: Mutex::new(recovery.missing.into_iter().collect()),
        }));
        Ok(self)
    }

    /// At node shutdown: removes what the node prepared on the host for sandbox networks (the
    /// ready pool's namespaces, the gateway namespace with every veth, route and the nft
    /// table). Sandboxes still attached keep their own namespace (they keep running while the
    /// node is down) and the next start adopts it. With `keep`, everything is left as it is
    /// when a sandbox is attached (the next start replaces the gateway and removes the rest).
    pub async fn close_network(&self, keep: bool) {
        let Some(n) = &self.network else {
            return;
        };
        let attached = n.net.attached();
        if attached > 0 {
            self.save_network_counters();
            if keep {
                info!(attached, "leaving the sandbox networks for the next start");
                return;
            }
            if let Err(e) = n.net.close_keeping_attached().await {
                warn!(error = %e, "cannot remove the sandbox network gateway");
            }
            return;
        }
        if let Err(e) = n.net.close().await {
            warn!(error = %e, "cannot remove the sandbox network gateway");
        }
    }

    /// Whether sandboxes of this node get a network (gateway started, runtime able to join).
    pub fn network_enabled(&self) -> bool {
        self.network.is_some() && self.runtime.capabilities().network
    }

    /// Whether the sandbox's namespace was gone when the node started (it cannot be adopted).
    pub(crate) fn network_lost(&self, id: &str) -> bool {
        self.network
            .as_ref()
            .is_some_and(|n| n.lost.lock().contains(id))
    }

    /// The environment that points TLS clients at the sandbox's trust bundle, for a sandbox
    /// with a network on a node with a sandbox CA (`--sandbox-ca-file`); empty otherwise.
    /// Names a request sets itself are kept.
    pub(crate) fn trust_env(&self, id: &str) -> Vec<(&'static str, &'static str)> {
        let Some(n) = &self.network else {
            return Vec::new();
        };
        let attached = n.placeholders.lock().contains_key(id);
        if !attached || n.net.config().sandbox_ca_pem.is_none() {
            return Vec::new();
        }
        TRUST_ENV
            .iter()
            .map(|name| (*name, cove_runtime::CA_BUNDLE_PATH))
            .collect()
    }

    /// The placeholders of a sandbox's secrets (name → placeholder).
    pub(crate) fn placeholders(&self, id: &str) -> BTreeMap<String, String> {
        self.network
            .as_ref()
            .and_then(|n| n.placeholders.lock().get(id).cloned())
            .unwrap_or_default()
    }

    /// The counters of a sandbox attached here (`None` when it is not).
    pub(crate) fn net_counters(&self, id: &str) -> Option<NetworkCounters> {
        let n = self.network.as_ref()?;
        n.net.counters(id).ok().map(counters)
    }

    /// Records the counters of every attached sandbox whose counters moved since its record
    /// was written (for the next start after a restart). Errors are logged.
    pub fn save_network_counters(&self) {
        let Some(n) = &self.network else {
            return;
        };
        for (id, mut rec) in self.read_net_records() {
            let Some(now) = n.net.counters(&id).ok().map(counters) else {
                continue;
            };
            if rec.counters == Some(now) {
                continue;
            }
            rec.counters = Some(now);
            if let Err(e) = self.write_net_record(&id, &rec) {
                warn!(sandbox_id = %id, error = %e, "cannot record the network counters");
            }
        }
    }

    /// Gives the sandbox of `launch` its network: attach with its policy, interception for its
    /// secrets, counters starting from `carried`. `None` on a node without sandbox networks
    /// (only the default policy and no secrets are accepted there: [`NodeError::Unsupported`]
    /// otherwise).
    pub(crate) async fn attach_network(
        &self,
        launch: &SandboxLaunch,
        carried: Option<NetworkCounters>,
    ) -> Result<Option<SandboxNetwork>, NodeError> {
        let wants = !launch.network.is_default() || !launch.secrets.is_empty();
        let node_net = match &self.network {
            Some(n) if self.runtime.capabilities().network => n,
            Some(_) => {
                if wants {
                    return Err(NodeError::Unsupported(format!(
                        "the {} runtime has no sandbox network yet (loopback only): only the \
                         default egress policy and no secrets are accepted",
                        self.runtime.kind().as_str()
                    )));
                }
                return Ok(None);
            }
            None => {
                if wants {
                    return Err(NodeError::Unsupported(
                        "this node has no sandbox network (networking is off): only the default \
                         egress policy and no secrets are accepted"
                            .into(),
                    ));
                }
                return Ok(None);
            }
        };
        let id = launch.id.as_str();
        // A leftover of an interrupted start goes first.
        self.detach_network(id).await?;
        let att = node_net
            .net
            .attach(id, launch.network.clone())
            .await
            .map_err(net_err)?;
        let mut placeholders = BTreeMap::new();
        // The node's sandbox CA (`cove server --sandbox-ca-file`), then the interception CA.
        let node_ca = node_net.net.config().sandbox_ca_pem.clone();
        let mut extra_ca_pem = node_ca.clone();
        let mut ca_key_pem = None;
        let mut tap = None;
        let setup = async {
            if self.runtime.capabilities().network_tap {
                tap = Some(node_net.net.add_tap(id).await.map_err(net_err)?);
            }
            if let Some(c) = &carried {
                node_net
                    .net
                    .add_counters(id, &gateway_counters(c))
                    .map_err(net_err)?;
            }
            // Without secrets but armed (a pool member), interception intercepts nothing
            // until secrets are handed in, and the sandbox already trusts its CA then.
            if !launch.secrets.is_empty() || launch.arm_secrets {
                let i = node_net
                    .net
                    .intercept(id, gateway_secrets(&launch.secrets))
                    .map_err(net_err)?;
                placeholders = i.placeholders;
                extra_ca_pem = Some(match &node_ca {
                    Some(c) if !c.ends_with('\n') => format!("{c}\n{}", i.ca_pem),
                    Some(c) => format!("{c}{}", i.ca_pem),
                    None => i.ca_pem,
                });
                ca_key_pem = Some(i.ca_key_pem);
            }
            self.write_net_record(
                id,
                &NetRecord {
                    netns: att.netns.clone(),
                    policy: launch.network.clone(),
                    placeholders: placeholders.clone(),
                    ca_key_pem: ca_key_pem.clone(),
                    counters: carried,
                },
            )
        }
        .await;
        if let Err(e) = setup {
            let _ = self.detach_network(id).await;
            return Err(e);
        }
        node_net
            .placeholders
            .lock()
            .insert(id.to_string(), placeholders);
        Ok(Some(SandboxNetwork {
            netns_path: att.netns_path.clone(),
            resolv_conf: att.resolv_conf(),
            extra_ca_pem,
            address: att.address,
            gateway: att.gateway,
            tap,
        }))
    }

    /// Removes the sandbox's network (namespace, veth, rules, address) and its record; none is
    /// fine.
    pub(crate) async fn detach_network(&self, id: &str) -> Result<(), NodeError> {
        let Some(n) = &self.network else {
            return Ok(());
        };
        n.placeholders.lock().remove(id);
        n.lost.lock().remove(id);
        let released = match n.net.release(id).await {
            Ok(()) | Err(NetworkError::NotAttached(_)) => Ok(()),
            Err(e) => Err(net_err(e)),
        };
        self.remove_net_record(id);
        released
    }
}

fn gateway_secrets(
    secrets: &BTreeMap<String, cove_node_api::LaunchSecret>,
) -> BTreeMap<String, Secret> {
    secrets
        .iter()
        .map(|(name, s)| {
            (
                name.clone(),
                Secret {
                    value: s.value.clone(),
                    hosts: s.hosts.clone(),
                },
            )
        })
        .collect()
}

/// An upgraded connection to a sandbox port as streams: `input` is written to it (its end shuts
/// the write side down), the returned stream is what it sends.
fn splice_upgraded(upgraded: hyper::upgrade::Upgraded, mut input: ByteStream) -> ByteStream {
    use tokio::io::AsyncWriteExt;
    let (read, mut write) = tokio::io::split(hyper_util::rt::TokioIo::new(upgraded));
    tokio::spawn(async move {
        while let Some(Ok(chunk)) = input.next().await {
            if write.write_all(&chunk).await.is_err() || write.flush().await.is_err() {
                return;
            }
        }
        let _ = write.shutdown().await;
    });
    tokio_util::io::ReaderStream::new(read).boxed()
}

/// Why a connection to a sandbox port failed, for people (no host detail).
fn io_reason(e: &NetworkError) -> String {
    match e {
        NetworkError::Io { source, .. } => match source.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
            std::io::ErrorKind::TimedOut => "no answer in time".into(),
            other => other.to_string(),
        },
        other => other.to_string(),
    }
}

fn counters(c: cove_network::NetworkCounters) -> NetworkCounters {
    NetworkCounters {
        bytes_out: c.bytes_out,
        bytes_in: c.bytes_in,
        connections_allowed: c.connections_allowed,
        connections_denied: c.connections_denied,
        dns_answered: c.dns_answered,
        dns_refused: c.dns_refused,
    }
}

fn gateway_counters(c: &NetworkCounters) -> cove_network::NetworkCounters {
    cove_network::NetworkCounters {
        bytes_out: c.bytes_out,
        bytes_in: c.bytes_in,
        connections_allowed: c.connections_allowed,
        connections_denied: c.connections_denied,
        dns_answered: c.dns_answered,
        dns_refused: c.dns_refused,
    }
}

fn denied(e: cove_network::DeniedEvent) -> NetworkDenied {
    let reason = match e.reason {
        cove_network::DeniedReason::Floor => "floor",
        cove_network::DeniedReason::Denied => "denied",
        cove_network::DeniedReason::NotAllowed => "not_allowed",
    };
    let host = e.name.or_else(|| e.ip.map(|ip| ip.to_string()));
    NetworkDenied {
        sandbox_id: e.sandbox_id,
        destination: e.destination,
        protocol: e.protocol.to_string(),
        reason: reason.to_string(),
        host,
        port: e.port,
        rule: Some(e.rule),
    }
}

#[async_trait::async_trait]
impl NodeNetwork for NodeAgent {
    async fn sandbox_network(&self, id: &str) -> Result<SandboxNetworkInfo, NodeError> {
        let n = self
            .network
            .as_ref()
            .ok_or_else(|| NodeError::SandboxNotFound(id.to_string()))?;
        let policy = n.net.policy(id).map_err(net_err)?;
        let c = n.net.counters(id).map_err(net_err)?;
        let address = n.net.attachment(id).ok().map(|a| a.address.to_string());
        Ok(SandboxNetworkInfo {
            policy,
            counters: counters(c),
            address,
        })
    }

    async fn set_sandbox_network(&self, id: &str, policy: EgressPolicy) -> Result<(), NodeError> {
        let Some(n) = &self.network else {
            if policy.is_default() {
                return Ok(());
            }
            return Err(NodeError::Unsupported(
                "this node has no sandbox network (networking is off)".into(),
            ));
        };
        let att = n.net.attachment(id).map_err(net_err)?;
        let ca_key_pem = self.read_net_record(id).and_then(|r| r.ca_key_pem);
        let rec = NetRecord {
            netns: att.netns,
            policy: policy.clone(),
            placeholders: self.placeholders(id),
            ca_key_pem,
            counters: self.net_counters(id),
        };
        // Recorded first: a restart in between adopts the new policy, which is what was asked.
        self.write_net_record(id, &rec)?;
        n.net.set_policy(id, policy).map_err(net_err)?;
        info!(sandbox_id = %id, "egress policy changed");
        Ok(())
    }

    async fn rearm_secrets(
        &self,
        id: &str,
        secrets: BTreeMap<String, cove_node_api::LaunchSecret>,
    ) -> Result<(), NodeError> {
        let n = self
            .network
            .as_ref()
            .ok_or_else(|| NodeError::SandboxNotFound(id.to_string()))?;
        let rec = self
            .read_net_record(id)
            .ok_or_else(|| NodeError::SandboxNotFound(id.to_string()))?;
        if rec.ca_key_pem.is_none() {
            // A fresh CA would not be trusted by the sandbox: substitution would fail its TLS.
            return Err(NodeError::Unsupported(
                "the sandbox was started without secret substitution: it trusts no gateway CA"
                    .into(),
            ));
        }
        let reuse = Reuse {
            ca_key_pem: rec.ca_key_pem.clone(),
            placeholders: rec.placeholders.clone(),
        };
        let i = n
            .net
            .intercept_with(id, gateway_secrets(&secrets), &reuse)
            .map_err(net_err)?;
        n.placeholders
            .lock()
            .insert(id.to_string(), i.placeholders.clone());
        self.write_net_record(
            id,
            &NetRecord {
                placeholders: i.placeholders,
                ca_key_pem: Some(i.ca_key_pem),
                ..rec
            },
        )?;
        info!(sandbox_id = %id, secrets = secrets.len(), "secret substitution armed");
        Ok(())
    }

    async fn forward_http(
        &self,
        id: &str,
        request: PortRequest,
        body: ByteStream,
    ) -> Result<(PortResponse, ByteStream), NodeError> {
        let n = self
            .network
            .as_ref()
            .ok_or_else(|| NodeError::SandboxNotFound(id.to_string()))?;
        let port = request.port;
        let closed =
            |why: String| NodeError::PortClosed(format!("nothing answers on port {port}: {why}"));
        let stream = match n.net.connect_sandbox(id, port).await {
            Ok(s) => s,
            Err(NetworkError::NotAttached(id)) => return Err(NodeError::SandboxNotFound(id)),
            Err(e) => return Err(closed(io_reason(&e))),
        };
        let upgrade = request
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("upgrade"));
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| closed(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        let mut req = http::Request::builder()
            .method(request.method.as_str())
            .uri(request.path_and_query.as_str());
        for (name, value) in &request.headers {
            req = req.header(name.as_str(), value.as_slice());
        }
        // An upgrade request goes without a body: `body` is for the upgraded connection.
        let (req_body, upgraded_in) = if upgrade {
            (futures::stream::empty().boxed(), Some(body))
        } else {
            (body, None)
        };
        let frames = req_body.map(|chunk| chunk.map(hyper::body::Frame::data));
        let req = req
            .body(http_body_util::StreamBody::new(frames))
            .map_err(|e| NodeError::InvalidArgument {
                field: "request".into(),
                message: e.to_string(),
            })?;
        let mut resp = sender
            .send_request(req)
            .await
            .map_err(|e| closed(e.to_string()))?;
        let status = resp.status();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
            .collect();
        let head = PortResponse {
            status: status.as_u16(),
            headers,
        };
        if let (http::StatusCode::SWITCHING_PROTOCOLS, Some(input)) = (status, upgraded_in) {
            let upgraded = hyper::upgrade::on(&mut resp)
                .await
                .map_err(|e| closed(format!("upgrade: {e}")))?;
            return Ok((head, splice_upgraded(upgraded, input)));
        }
        let body = http_body_util::BodyStream::new(resp.into_body())
            .filter_map(|frame| async move {
                match frame {
                    Ok(f) => f.into_data().ok().map(Ok),
                    Err(e) => Some(Err(std::io::Error::other(e))),
                }
            })
            .boxed();
        Ok((head, body))
    }

    fn network_denials(&self) -> BoxStream<'static, NetworkDenied> {
        let Some(n) = &self.network else {
            return futures::stream::pending().boxed();
        };
        let rx = n.net.denied_events();
        futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(e) => return Some((denied(e), rx)),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        warn!(lost = n, "network denial events dropped (slow reader)");
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .boxed()
    }
}
