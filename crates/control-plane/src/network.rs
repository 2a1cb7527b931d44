//! Sandbox networks: the egress policy (`network` on create, `GET`/`PUT
//! /v1/sandboxes/{id}/network`), secrets (sealed in the store, handed to the node on every start
//! and wake), and `network.denied` events from the node's gateway.
//!
//! A policy change is written to the store first, then to the node when the sandbox holds a
//! network there (running or paused); a start or wake re-reads the stored policy after the node
//! started the sandbox and pushes it again if it changed meanwhile, so no change is lost to a
//! concurrent lifecycle call.
//!
//! Secrets: the values are sealed (AES-256-GCM, the sandbox id as associated data) with the
//! server's key ([`crate::ControlPlaneConfig::secrets_key`]) before they reach the store; the
//! sandbox record shows names and hosts only. Values are never logged.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use cove_api_types::{
    EgressPolicy, NetworkCounters, Sandbox, SandboxNetwork, SandboxSecret, SandboxState,
    SecretRequest,
};
use cove_domain::{validate, InvalidInput};
use cove_node_api::{LaunchSecret, NodeError, SandboxLaunch};
use cove_store::NewEvent;
use futures::StreamExt;
use ring::aead;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{ControlPlane, ServiceError};

/// Most secrets per sandbox.
pub const MAX_SECRETS: usize = 32;
/// Longest secret value, in bytes.
pub const MAX_SECRET_BYTES: usize = 8192;
/// Most hosts per secret.
pub const MAX_SECRET_HOSTS: usize = 32;

/// A refusal toward the same destination is recorded at most once per this long.
const DENIAL_REPEAT: Duration = Duration::from_secs(10);
/// At most this many denials are recorded per sandbox per [`DENIAL_REPEAT`] (the counters count
/// every one).
const DENIALS_PER_WINDOW: u32 = 20;

/// The server's key that seals secret values (32 bytes), and the keys port tokens and volume
/// content tokens are derived with (HMAC keys derived from it, so no use weakens another).
#[derive(Clone)]
pub struct SecretsKey(
    Arc<aead::LessSafeKey>,
    Arc<ring::hmac::Key>,
    Arc<ring::hmac::Key>,
);

impl SecretsKey {
    /// A key from 32 bytes. Errors when the length is wrong.
    pub fn new(bytes: &[u8]) -> Result<Self, String> {
        let unbound = aead::UnboundKey::new(&aead::AES_256_GCM, bytes)
            .map_err(|_| "the secrets key must be 32 bytes".to_string())?;
        let root = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, bytes);
        let ports = ring::hmac::sign(&root, b"cove port tokens v1");
        let volumes = ring::hmac::sign(&root, b"cove volume tokens v1");
        Ok(SecretsKey(
            Arc::new(aead::LessSafeKey::new(unbound)),
            Arc::new(ring::hmac::Key::new(
                ring::hmac::HMAC_SHA256,
                ports.as_ref(),
            )),
            Arc::new(ring::hmac::Key::new(
                ring::hmac::HMAC_SHA256,
                volumes.as_ref(),
            )),
        ))
    }

    /// 32 hex digits of an HMAC of `message` under the volume token key.
    pub(crate) fn volume_mac(&self, message: &[u8]) -> String {
        let tag = ring::hmac::sign(&self.2, message);
        tag.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The port token of a sandbox: 32 hex digits of an HMAC of its id.
    pub(crate) fn port_token(&self, sandbox_id: &str) -> String {
        self.port_mac(sandbox_id.as_bytes())
    }

    /// 32 hex digits of an HMAC of `message` under the port key (port tokens, port cookies).
    pub(crate) fn port_mac(&self, message: &[u8]) -> String {
        let tag = ring::hmac::sign(&self.1, message);
        tag.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn seal(&self, sandbox_id: &str, plain: &[u8]) -> Result<String, ServiceError> {
        let mut nonce = [0u8; aead::NONCE_LEN];
        rand::Rng::fill(&mut rand::thread_rng(), &mut nonce[..]);
        let mut buf = plain.to_vec();
        self.0
            .seal_in_place_append_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(sandbox_id.as_bytes()),
                &mut buf,
            )
            .map_err(|_| ServiceError::Internal("cannot seal secrets".into()))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&buf);
        Ok(format!(
            "v1:{}",
            base64::engine::general_purpose::STANDARD.encode(out)
        ))
    }

    fn open(&self, sandbox_id: &str, sealed: &str) -> Result<Vec<u8>, ServiceError> {
        let bad = || ServiceError::Internal(format!("sealed secrets of {sandbox_id} unreadable"));
        let raw = sealed
            .strip_prefix("v1:")
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .ok_or_else(bad)?;
        if raw.len() < aead::NONCE_LEN {
            return Err(bad());
        }
        let (nonce, body) = raw.split_at(aead::NONCE_LEN);
        let nonce = aead::Nonce::try_assume_unique_for_key(nonce).map_err(|_| bad())?;
        let mut body = body.to_vec();
        let plain = self
            .0
            .open_in_place(nonce, aead::Aad::from(sandbox_id.as_bytes()), &mut body)
            .map_err(|_| bad())?;
        Ok(plain.to_vec())
    }
}

impl std::fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretsKey(<redacted>)")
    }
}

/// Checks a create request's secrets (names, values, hosts; no clash with `env`).
pub(crate) fn validate_secrets(
    secrets: &BTreeMap<String, SecretRequest>,
    env: &BTreeMap<String, String>,
) -> Result<(), InvalidInput> {
    if secrets.len() > MAX_SECRETS {
        return Err(InvalidInput::new(
            "secrets",
            format!("at most {MAX_SECRETS} secrets"),
        ));
    }
    for (name, s) in secrets {
        let field = format!("secrets.{name}");
        // Names are environment variable names (the placeholder's variable).
        validate::env("secrets", &BTreeMap::from([(name.clone(), String::new())]))?;
        if env.contains_key(name) {
            return Err(InvalidInput::new(
                field,
                "a secret and an env variable cannot share a name",
            ));
        }
        if s.value.is_empty()
            || s.value.len() > MAX_SECRET_BYTES
            || s.value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
        {
            return Err(InvalidInput::new(
                format!("{field}.value"),
                format!("must be 1-{MAX_SECRET_BYTES} bytes without CR, LF or NUL"),
            ));
        }
        if s.hosts.is_empty() || s.hosts.len() > MAX_SECRET_HOSTS {
            return Err(InvalidInput::new(
                format!("{field}.hosts"),
                format!("must name 1-{MAX_SECRET_HOSTS} hosts"),
            ));
        }
        if let Some(h) = s.hosts.iter().find(|h| !h.is_domain()) {
            return Err(InvalidInput::new(
                format!("{field}.hosts"),
                format!("{h}: hosts are domains or *.domain, not addresses"),
            ));
        }
    }
    Ok(())
}

/// The values of `secrets` sealed with `key` for sandbox `id` (the store's opaque string).
fn seal_secrets(
    key: &SecretsKey,
    id: &str,
    secrets: &BTreeMap<String, SecretRequest>,
) -> Result<String, ServiceError> {
    let values: BTreeMap<&str, &str> = secrets
        .iter()
        .map(|(k, v)| (k.as_str(), v.value.as_str()))
        .collect();
    let plain = serde_json::to_vec(&values).map_err(|e| ServiceError::Internal(e.to_string()))?;
    key.seal(id, &plain)
}

/// The public part of secrets (names and hosts).
pub(crate) fn public_secrets(
    secrets: &BTreeMap<String, SecretRequest>,
) -> BTreeMap<String, SandboxSecret> {
    secrets
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                SandboxSecret {
                    hosts: v.hosts.clone(),
                },
            )
        })
        .collect()
}

/// A request body for the idempotency hash: secret values are left out (the hash is stored).
pub(crate) fn hashable_body(
    req: &cove_api_types::CreateSandboxRequest,
) -> Result<serde_json::Value, ServiceError> {
    let mut redacted = req.clone();
    for s in redacted.secrets.values_mut() {
        s.value.clear();
    }
    serde_json::to_value(&redacted).map_err(|e| ServiceError::Internal(e.to_string()))
}

/// Whether a sandbox in `state` holds a network on the node.
fn has_node_network(state: SandboxState) -> bool {
    matches!(state, SandboxState::Running | SandboxState::Paused)
}

impl ControlPlane {
    /// Refuses a policy other than the default, or secrets, when the node has no sandbox
    /// network (networking off, or a runtime without one such as qemu): `not_implemented`.
    pub(crate) fn check_network_supported(
        &self,
        policy: &EgressPolicy,
        secrets: bool,
    ) -> Result<(), ServiceError> {
        if (policy.is_default() && !secrets) || self.node().capabilities().network {
            return Ok(());
        }
        let caps = self.node().capabilities();
        Err(ServiceError::NotImplemented(format!(
            "sandboxes on this server have no network (runtime {}{}): only the default egress \
             policy and no secrets are accepted",
            caps.runtime,
            if caps.runtime == "runc" {
                ", networking off"
            } else {
                ""
            }
        )))
    }

    /// Seals and stores the values of a new sandbox's secrets.
    pub(crate) async fn store_secrets(
        &self,
        id: &str,
        secrets: &BTreeMap<String, SecretRequest>,
    ) -> Result<(), ServiceError> {
        if secrets.is_empty() {
            return Ok(());
        }
        let key =
            self.inner.cfg.secrets_key.as_ref().ok_or_else(|| {
                ServiceError::NotImplemented("this server has no secrets key".into())
            })?;
        let sealed = seal_secrets(key, id, secrets)?;
        self.store().set_sealed_secrets(id, &sealed).await?;
        Ok(())
    }

    /// Gives claimed pool member `id` the secrets of the create that claimed it: their public
    /// part and sealed values in its record, then the node's gateway (which keeps the CA the
    /// member trusts and makes placeholders its next commands get). Errors: the node could not
    /// take them (the caller deletes the member rather than hand it out without them).
    pub(crate) async fn claimed_secrets(
        &self,
        id: &str,
        secrets: &BTreeMap<String, SecretRequest>,
    ) -> Result<(), ServiceError> {
        let key =
            self.inner.cfg.secrets_key.as_ref().ok_or_else(|| {
                ServiceError::NotImplemented("this server has no secrets key".into())
            })?;
        let sealed = seal_secrets(key, id, secrets)?;
        if !self
            .store()
            .set_sandbox_secrets(id, &public_secrets(secrets), &sealed)
            .await?
        {
            return Err(ServiceError::SandboxNotFound(id.to_string()));
        }
        let launch = secrets
            .iter()
            .map(|(name, s)| {
                (
                    name.clone(),
                    LaunchSecret {
                        value: s.value.clone(),
                        hosts: s.hosts.clone(),
                    },
                )
            })
            .collect();
        self.node()
            .rearm_secrets(id, launch)
            .await
            .map_err(|e| crate::error::from_node(e, id))
    }

    /// The secrets of a stored sandbox with their values, for the node.
    async fn launch_secrets(
        &self,
        s: &Sandbox,
    ) -> Result<BTreeMap<String, LaunchSecret>, ServiceError> {
        if s.secrets.is_empty() {
            return Ok(BTreeMap::new());
        }
        let sealed = self.store().sealed_secrets(&s.id).await?.ok_or_else(|| {
            ServiceError::Internal(format!("sandbox {} has no sealed secrets", s.id))
        })?;
        let key = self.inner.cfg.secrets_key.as_ref().ok_or_else(|| {
            ServiceError::Internal("this server has no secrets key to open secrets".into())
        })?;
        let plain = key.open(&s.id, &sealed)?;
        let values: BTreeMap<String, String> = serde_json::from_slice(&plain)
            .map_err(|_| ServiceError::Internal(format!("sealed secrets of {} corrupt", s.id)))?;
        s.secrets
            .iter()
            .map(|(name, public)| {
                let value = values.get(name).cloned().ok_or_else(|| {
                    ServiceError::Internal(format!("sealed secrets of {} incomplete", s.id))
                })?;
                Ok((
                    name.clone(),
                    LaunchSecret {
                        value,
                        hosts: public.hosts.clone(),
                    },
                ))
            })
            .collect()
    }

    /// What the node needs to start or wake `s` (its stored policy, secrets and volumes).
    pub(crate) async fn launch_of(&self, s: &Sandbox) -> Result<SandboxLaunch, ServiceError> {
        Ok(SandboxLaunch {
            id: s.id.clone(),
            template: s.template.clone(),
            release: s.release,
            release_digest: self.fetchable_digest(s),
            resources: s.resources,
            network: s.network.clone(),
            secrets: self.launch_secrets(s).await?,
            // A relaunched unclaimed pool member is not armed: a claim with secrets then
            // fails its re-arm and the member is deleted, not handed out.
            arm_secrets: false,
            volumes: self.launch_volumes(&s.org, &s.volumes).await?,
        })
    }

    /// After a start or wake with `launched`: pushes the stored policy to the node when a
    /// `PUT` changed it meanwhile.
    pub(crate) async fn resync_network(&self, id: &str, launched: &EgressPolicy) {
        let Ok(s) = self.store().get_sandbox(id).await else {
            return;
        };
        if s.network != *launched {
            if let Err(e) = self.node().set_sandbox_network(id, s.network).await {
                warn!(sandbox_id = %id, error = %e, "cannot apply a policy changed during start");
            }
        }
    }

    /// After a server restart: hands an adopted sandbox's secrets to its node again (the node
    /// keeps no value across restarts).
    pub(crate) async fn rearm_secrets(&self, id: &str) {
        let Ok(s) = self.store().get_sandbox(id).await else {
            return;
        };
        if s.secrets.is_empty() {
            return;
        }
        let rearmed = match self.launch_secrets(&s).await {
            Ok(secrets) => self
                .node()
                .rearm_secrets(id, secrets)
                .await
                .map_err(|e| crate::error::from_node(e, id)),
            Err(e) => Err(e),
        };
        if let Err(e) = rearmed {
            warn!(sandbox_id = %id, error = %e, "cannot re-arm the sandbox's secrets");
        }
    }

    /// `GET /v1/sandboxes/{id}/network`: the policy and, while the node enforces it, the
    /// gateway's counters.
    pub async fn sandbox_network(&self, id: &str) -> Result<SandboxNetwork, ServiceError> {
        let s = self.get_sandbox(id).await?;
        self.touch(&s.id);
        let mut out = SandboxNetwork {
            sandbox_id: s.id.clone(),
            network: s.network.clone(),
            enforced: false,
            address: None,
            counters: NetworkCounters::default(),
        };
        if has_node_network(s.state) {
            match self.node().sandbox_network(&s.id).await {
                Ok(info) => {
                    let c = info.counters;
                    out.enforced = true;
                    out.network = info.policy;
                    out.address = info.address;
                    out.counters = NetworkCounters {
                        bytes_out: c.bytes_out,
                        bytes_in: c.bytes_in,
                        connections_allowed: c.connections_allowed,
                        connections_denied: c.connections_denied,
                        dns_answered: c.dns_answered,
                        dns_refused: c.dns_refused,
                    };
                }
                Err(NodeError::SandboxNotFound(_)) => {}
                Err(e) => return Err(crate::error::from_node(e, &s.id)),
            }
        }
        Ok(out)
    }

    /// `PUT /v1/sandboxes/{id}/network`: replaces the egress policy; the next connection
    /// follows it. A suspended sandbox gets it when it wakes.
    pub async fn set_sandbox_network(
        &self,
        id: &str,
        policy: EgressPolicy,
    ) -> Result<SandboxNetwork, ServiceError> {
        policy.validate()?;
        let s = self.get_sandbox(id).await?;
        self.check_network_supported(&policy, false)?;
        if s.state == SandboxState::Deleting {
            return Err(ServiceError::InvalidState {
                id: s.id,
                from: SandboxState::Deleting,
                to: SandboxState::Running,
            });
        }
        if !self.store().set_sandbox_network(&s.id, &policy).await? {
            return Err(ServiceError::SandboxNotFound(s.id));
        }
        // The state now (a lifecycle call may have moved it since the read above).
        let now = self.store().get_sandbox(&s.id).await?;
        if has_node_network(now.state) {
            match self.node().set_sandbox_network(&s.id, policy.clone()).await {
                Ok(()) | Err(NodeError::SandboxNotFound(_)) => {}
                Err(e) => return Err(crate::error::from_node(e, &s.id)),
            }
        }
        info!(sandbox_id = %s.id, internet = policy.internet, allow = policy.allow.len(),
            deny = policy.deny.len(), "egress policy set");
        self.sandbox_network(&s.id).await
    }

    /// Records the node's `network.denied` events until `stop` (repeats toward one destination
    /// at most every [`DENIAL_REPEAT`], at most [`DENIALS_PER_WINDOW`] per sandbox per window).
    pub(crate) async fn record_denials(&self, stop: CancellationToken) {
        let mut denials = self.node().network_denials();
        let mut last: HashMap<(String, String), Instant> = HashMap::new();
        let mut window: HashMap<String, (Instant, u32)> = HashMap::new();
        loop {
            let d = tokio::select! {
                () = stop.cancelled() => return,
                d = denials.next() => match d {
                    Some(d) => d,
                    None => return,
                },
            };
            let now = Instant::now();
            let key = (d.sandbox_id.clone(), d.destination.clone());
            if last
                .get(&key)
                .is_some_and(|t| now.duration_since(*t) < DENIAL_REPEAT)
            {
                continue;
            }
            let w = window.entry(d.sandbox_id.clone()).or_insert((now, 0));
            if now.duration_since(w.0) >= DENIAL_REPEAT {
                *w = (now, 0);
            }
            if w.1 >= DENIALS_PER_WINDOW {
                continue;
            }
            w.1 += 1;
            last.insert(key, now);
            if last.len() > 10_000 {
                last.retain(|_, t| now.duration_since(*t) < DENIAL_REPEAT);
                window.retain(|_, (t, _)| now.duration_since(*t) < DENIAL_REPEAT);
            }
            let event = NewEvent {
                kind: cove_api_types::EventType::NetworkDenied,
                operation_id: None,
                reason: Some(d.reason.clone()),
                destination: Some(d.destination.clone()),
                host: d.host.clone(),
                port: d.port,
                rule: d.rule.clone(),
            };
            if let Err(e) = self.record_event(&d.sandbox_id, event).await {
                warn!(sandbox_id = %d.sandbox_id, error = %e, "cannot record a network denial");
            }
        }
    }
}
