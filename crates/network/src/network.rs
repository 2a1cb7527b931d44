//! The node's network handle: starts the gateway (with crash recovery), hands out sandbox
//! networks from the prepared pool, applies policy changes, and tears everything down.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use tokio::sync::{broadcast, watch, Notify};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::cmd;
use crate::config::{Floor, NetworkConfig};
use crate::counters::{Counters, DeniedEvent, DeniedReason, NetworkCounters};
use crate::dns::{self, NameCache};
use crate::error::{NetworkError, Result};
use crate::intercept::{self, Interception, Reuse, SandboxTls, Secret};
use crate::plumbing;
use crate::policy::EgressPolicy;
use crate::sockets::SocketMaker;

/// What a sandbox gets: a named network namespace to run in, and its addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attachment {
    /// The sandbox.
    pub sandbox_id: String,
    /// The namespace's name (`ip netns` name); persist it to re-adopt after a crash.
    pub netns: String,
    /// The namespace file to join (runc: `linux.namespaces[type=network].path`).
    pub netns_path: PathBuf,
    /// The sandbox's address (a /32 on `eth0`).
    pub address: Ipv4Addr,
    /// The gateway: default route and the only DNS resolver.
    pub gateway: Ipv4Addr,
}

impl Attachment {
    /// The `/etc/resolv.conf` to put in the sandbox.
    pub fn resolv_conf(&self) -> String {
        format!(
            "nameserver {}\noptions timeout:2 attempts:2\n",
            self.gateway
        )
    }
}

/// A sandbox the node agent still runs after a restart, to keep its namespace.
#[derive(Debug, Clone)]
pub struct Adopt {
    /// The sandbox.
    pub sandbox_id: String,
    /// The namespace name from its [`Attachment`].
    pub netns: String,
    /// Its current policy.
    pub policy: EgressPolicy,
}

/// What [`Network::start`] found from a previous run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Sandboxes whose namespace was kept and re-plumbed (their old connections are gone).
    pub adopted: Vec<Attachment>,
    /// Sandboxes to adopt whose namespace no longer existed (they need a new attach).
    pub missing: Vec<String>,
    /// Namespaces removed because nobody claimed them (prepared or orphaned).
    pub removed: Vec<String>,
}

pub(crate) struct SandboxEntry {
    pub id: String,
    policy: RwLock<Arc<EgressPolicy>>,
    tls: RwLock<Option<Arc<SandboxTls>>>,
    pub counters: Counters,
    /// Open proxied connections allowed at once ([`MAX_CONNECTIONS`]).
    pub connections: Arc<tokio::sync::Semaphore>,
    /// This sandbox's warnings about malformed TLS hellos.
    pub malformed_hellos: crate::warn::RateLimit,
}

/// Connections one sandbox may have open through the gateway at once; more are closed.
pub const MAX_CONNECTIONS: usize = 256;

impl SandboxEntry {
    pub(crate) fn tls(&self) -> Option<Arc<SandboxTls>> {
        self.tls.read().clone()
    }

    pub(crate) fn policy(&self) -> Arc<EgressPolicy> {
        self.policy.read().clone()
    }
}

#[derive(Default)]
struct Pool {
    used: BTreeSet<u32>,
    cursor: u32,
    prepared: VecDeque<u32>,
    preparing: usize,
    attached: HashMap<String, u32>,
}

impl Pool {
    fn allocate(&mut self, config: &NetworkConfig) -> Result<u32> {
        let n = config.slots();
        for i in 0..n {
            let slot = (self.cursor + i) % n + 1;
            if !self.used.contains(&slot) {
                self.cursor = slot % n;
                self.used.insert(slot);
                return Ok(slot);
            }
        }
        Err(NetworkError::PoolExhausted(config.pool))
    }
}

pub(crate) struct Shared {
    pub config: NetworkConfig,
    pub floor: Floor,
    pub upstream: SocketMaker,
    /// Sockets in the gateway namespace (inbound connections to sandboxes' ports).
    gateway_sockets: SocketMaker,
    pub names: NameCache,
    sandboxes: RwLock<HashMap<Ipv4Addr, Arc<SandboxEntry>>>,
    events: broadcast::Sender<DeniedEvent>,
    pool: Mutex<Pool>,
    upstream_tls: OnceLock<Arc<rustls::ClientConfig>>,
}

impl Shared {
    pub(crate) fn entry(&self, ip: Ipv4Addr) -> Option<Arc<SandboxEntry>> {
        self.sandboxes.read().get(&ip).cloned()
    }

    /// The upstream TLS client config (built on first use).
    pub(crate) fn upstream_tls(&self) -> Result<Arc<rustls::ClientConfig>> {
        if let Some(c) = self.upstream_tls.get() {
            return Ok(c.clone());
        }
        let c = intercept::upstream_client_config(
            self.config.upstream.tls_roots_pem.as_deref(),
            self.config.sandbox_ca_pem.as_deref(),
        )?;
        Ok(self.upstream_tls.get_or_init(|| c).clone())
    }

    /// A connection toward `dst` from the upstream namespace: through the upstream proxy when
    /// one is configured, else straight.
    pub(crate) async fn connect_upstream(
        &self,
        dst: SocketAddrV4,
    ) -> std::io::Result<tokio::net::TcpStream> {
        match &self.config.upstream_proxy {
            Some(p) => p.connect(&self.upstream, dst).await,
            None => self.upstream.connect(dst).await,
        }
    }

    fn pool(&self) -> parking_lot::MutexGuard<'_, Pool> {
        self.pool.lock()
    }

    pub(crate) async fn resolves_to(&self, name: &str, ip: Ipv4Addr) -> bool {
        dns::resolves_to(self, name, ip).await
    }

    /// Counts and reports a refused connection (the `network_denied` event, with the rule
    /// that refused it); returns the one-line reason the client is told.
    pub(crate) fn deny_tcp(
        &self,
        entry: &SandboxEntry,
        dst: SocketAddrV4,
        name: Option<String>,
        reason: DeniedReason,
        rule: String,
    ) -> String {
        Counters::add(&entry.counters.connections_denied, 1);
        let destination = match &name {
            Some(n) => format!("{n} ({dst})"),
            None => dst.to_string(),
        };
        let line = format!("cove: the sandbox's egress policy denied {destination}: {rule}");
        debug!(sandbox_id = %entry.id, %destination, ?reason, %rule, "connection denied");
        let _ = self.events.send(DeniedEvent {
            sandbox_id: entry.id.clone(),
            destination,
            ip: Some(*dst.ip()),
            port: Some(dst.port()),
            name,
            protocol: "tcp",
            reason,
            rule,
        });
        line
    }

    pub(crate) fn deny_dns(&self, entry: &SandboxEntry, name: &str, reason: DeniedReason) {
        debug!(sandbox_id = %entry.id, %name, ?reason, "dns question refused");
        let _ = self.events.send(DeniedEvent {
            sandbox_id: entry.id.clone(),
            destination: name.to_string(),
            ip: None,
            port: None,
            name: Some(name.to_string()),
            protocol: "dns",
            reason,
            rule: reason.rule(
                Some(&entry.policy()),
                std::net::Ipv4Addr::UNSPECIFIED,
                Some(name),
            ),
        });
    }

    fn attachment(&self, id: &str, slot: u32) -> Attachment {
        let ns = plumbing::sandbox_ns(&self.config.prefix, slot);
        Attachment {
            sandbox_id: id.to_string(),
            netns_path: cmd::netns_path(&ns),
            netns: ns,
            address: self.config.slot_addr(slot),
            gateway: self.config.gateway(),
        }
    }

    fn register(&self, id: &str, slot: u32, policy: EgressPolicy) {
        let entry = Arc::new(SandboxEntry {
            id: id.to_string(),
            policy: RwLock::new(Arc::new(policy)),
            tls: RwLock::new(None),
            counters: Counters::default(),
            connections: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS)),
            malformed_hellos: crate::warn::RateLimit::new(crate::proxy::MALFORMED_HELLO_INTERVAL),
        });
        self.sandboxes
            .write()
            .insert(self.config.slot_addr(slot), entry);
    }

    fn entry_of(&self, id: &str) -> Result<Arc<SandboxEntry>> {
        let slot = *self
            .pool()
            .attached
            .get(id)
            .ok_or_else(|| NetworkError::NotAttached(id.to_string()))?;
        self.entry(self.config.slot_addr(slot))
            .ok_or_else(|| NetworkError::NotAttached(id.to_string()))
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| NetworkError::io("network task", std::io::Error::other(e.to_string())))?
}

/// The node's sandbox networks and egress gateway. Create one per node with [`Network::start`]
/// inside a tokio runtime; its proxy and DNS tasks run on that runtime until
/// [`Network::shutdown`] or drop.
pub struct Network {
    shared: Arc<Shared>,
    refill: Arc<Notify>,
    stop: watch::Sender<bool>,
    refill_task: Option<JoinHandle<()>>,
    servers: Vec<JoinHandle<()>>,
}

impl Network {
    /// Starts the gateway: checks the config against the host's routes now, recreates the gateway
    /// namespace (removing every veth of a previous run), re-plumbs the namespaces of `adopt`,
    /// removes every other namespace with the prefix, binds the proxy and DNS, and begins filling
    /// the prepared pool. One running node per prefix: a second start with the same prefix takes
    /// the namespaces over. On error nothing of this prefix is left behind (past the config checks).
    /// Errors: config/route checks, `ip`/`nft` failures, binding.
    pub async fn start(config: NetworkConfig, adopt: Vec<Adopt>) -> Result<(Network, Recovery)> {
        config.validate()?;
        match Self::start_inner(config.clone(), adopt).await {
            Ok(v) => Ok(v),
            Err(e) => {
                // Leave no half-built gateway behind (past the config checks, a previous run's
                // gateway has been replaced already).
                if !matches!(
                    e,
                    NetworkError::Config(_) | NetworkError::PoolOverlapsRoute { .. }
                ) {
                    let cfg = config;
                    let _ = blocking(move || {
                        if cmd::netns_names()?.contains(&plumbing::gateway_ns(&cfg.prefix)) {
                            for slot in plumbing::existing_slots(&cfg.prefix)? {
                                plumbing::unplumb(&cfg, slot)?;
                            }
                            plumbing::delete_gateway(&cfg.prefix)?;
                        }
                        Ok(())
                    })
                    .await;
                }
                Err(e)
            }
        }
    }

    async fn start_inner(config: NetworkConfig, adopt: Vec<Adopt>) -> Result<(Network, Recovery)> {
        let cfg = config.clone();
        let floor = blocking(move || {
            cfg.check_routes()?;
            Floor::build(&cfg)
        })
        .await?;
        let cfg = config.clone();
        let wanted: HashMap<u32, Adopt> = adopt
            .iter()
            .filter_map(|a| {
                plumbing::parse_sandbox_ns(&config.prefix, &a.netns).map(|s| (s, a.clone()))
            })
            .collect();
        let wanted_slots: Vec<u32> = wanted.keys().copied().collect();
        let (kept, removed) = blocking(move || {
            plumbing::create_gateway(&cfg)?;
            let (mut kept, mut removed) = (Vec::new(), Vec::new());
            for slot in plumbing::existing_slots(&cfg.prefix)? {
                if wanted_slots.contains(&slot) {
                    match plumbing::plumb(&cfg, slot, true) {
                        Ok(()) => kept.push(slot),
                        Err(e) => warn!(slot, error = %e, "re-plumbing an adopted sandbox failed"),
                    }
                } else {
                    plumbing::unplumb(&cfg, slot)?;
                    removed.push(plumbing::sandbox_ns(&cfg.prefix, slot));
                }
            }
            Ok((kept, removed))
        })
        .await?;
        let upstream_ns = config.upstream.netns.clone();
        let upstream = blocking(move || SocketMaker::new(upstream_ns.as_deref())).await?;
        let gw_ns = plumbing::gateway_ns(&config.prefix);
        let gw_maker = blocking(move || SocketMaker::new(Some(&gw_ns))).await?;
        let gw = config.gateway();
        let listener = gw_maker
            .listen(SocketAddrV4::new(gw, config.proxy_port))
            .await
            .map_err(|e| NetworkError::io("binding the gateway proxy", e))?;
        let dns_socket = gw_maker
            .udp_bound(SocketAddrV4::new(gw, 53))
            .await
            .map_err(|e| NetworkError::io("binding the gateway dns", e))?;
        let (events, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared {
            config,
            floor,
            upstream,
            gateway_sockets: gw_maker,
            names: NameCache::default(),
            sandboxes: RwLock::new(HashMap::new()),
            events,
            pool: Mutex::new(Pool::default()),
            upstream_tls: OnceLock::new(),
        });
        let mut recovery = Recovery {
            removed,
            ..Recovery::default()
        };
        for (slot, a) in &wanted {
            if kept.contains(slot) {
                let mut pool = shared.pool();
                pool.used.insert(*slot);
                pool.attached.insert(a.sandbox_id.clone(), *slot);
                drop(pool);
                shared.register(&a.sandbox_id, *slot, a.policy.clone());
                recovery
                    .adopted
                    .push(shared.attachment(&a.sandbox_id, *slot));
            } else {
                recovery.missing.push(a.sandbox_id.clone());
            }
        }
        recovery.missing.extend(
            adopt
                .iter()
                .filter(|a| plumbing::parse_sandbox_ns(&shared.config.prefix, &a.netns).is_none())
                .map(|a| a.sandbox_id.clone()),
        );
        let servers = vec![
            tokio::spawn(crate::proxy::serve(shared.clone(), listener)),
            tokio::spawn(dns::serve(shared.clone(), dns_socket)),
        ];
        let refill = Arc::new(Notify::new());
        let (stop, stop_rx) = watch::channel(false);
        let refill_task = Some(tokio::spawn(refill_loop(
            shared.clone(),
            refill.clone(),
            stop_rx,
        )));
        info!(
            prefix = %shared.config.prefix,
            pool = %shared.config.pool,
            adopted = recovery.adopted.len(),
            removed = recovery.removed.len(),
            "sandbox network gateway started"
        );
        Ok((
            Network {
                shared,
                refill,
                stop,
                refill_task,
                servers,
            },
            recovery,
        ))
    }

    /// Gives `sandbox_id` a network with `policy`: takes a prepared namespace (microseconds) or,
    /// when none is ready, prepares one now (~15 ms). Errors: [`NetworkError::AlreadyAttached`],
    /// [`NetworkError::PoolExhausted`], `ip`/`nft` failures.
    pub async fn attach(&self, sandbox_id: &str, policy: EgressPolicy) -> Result<Attachment> {
        let (slot, ready) = {
            let mut pool = self.shared.pool();
            if pool.attached.contains_key(sandbox_id) {
                return Err(NetworkError::AlreadyAttached(sandbox_id.to_string()));
            }
            let (slot, ready) = match pool.prepared.pop_front() {
                Some(slot) => (slot, true),
                None => (pool.allocate(&self.shared.config)?, false),
            };
            pool.attached.insert(sandbox_id.to_string(), slot);
            (slot, ready)
        };
        if !ready {
            let cfg = self.shared.config.clone();
            if let Err(e) = blocking(move || plumbing::plumb(&cfg, slot, false)).await {
                let mut pool = self.shared.pool();
                pool.attached.remove(sandbox_id);
                pool.used.remove(&slot);
                return Err(e);
            }
        }
        self.shared.register(sandbox_id, slot, policy);
        self.refill.notify_one();
        debug!(
            sandbox_id,
            slot,
            prepared = ready,
            "sandbox network attached"
        );
        Ok(self.shared.attachment(sandbox_id, slot))
    }

    /// Removes the sandbox's veth, routes, nft element, address and namespace (on delete, and
    /// on suspend when the sandbox's processes stop; resume attaches again). Errors:
    /// [`NetworkError::NotAttached`], `ip`/`nft` failures (the slot then stays reserved until
    /// the next start's recovery).
    pub async fn release(&self, sandbox_id: &str) -> Result<()> {
        let slot = self
            .shared
            .pool()
            .attached
            .remove(sandbox_id)
            .ok_or_else(|| NetworkError::NotAttached(sandbox_id.to_string()))?;
        let addr = self.shared.config.slot_addr(slot);
        self.shared.sandboxes.write().remove(&addr);
        let cfg = self.shared.config.clone();
        blocking(move || plumbing::unplumb(&cfg, slot)).await?;
        self.shared.pool().used.remove(&slot);
        debug!(sandbox_id, slot, "sandbox network released");
        Ok(())
    }

    /// Replaces the sandbox's policy; the next connection and DNS question follow it (open
    /// connections keep going). Errors: [`NetworkError::NotAttached`].
    pub fn set_policy(&self, sandbox_id: &str, policy: EgressPolicy) -> Result<()> {
        let entry = self.shared.entry_of(sandbox_id)?;
        *entry.policy.write() = Arc::new(policy);
        Ok(())
    }

    /// Turns on secret substitution for the sandbox: makes its CA (install `ca_pem` in the
    /// sandbox's trust store) and a placeholder per secret (put it in the sandbox's environment
    /// instead of the value). TLS connections on port 443 toward a host a secret names are then
    /// terminated by the gateway, which verifies the upstream server and replaces the placeholder
    /// with the value in request headers; requests toward other hosts keep the placeholder.
    /// Calling it again replaces the CA and the secrets. Errors: [`NetworkError::NotAttached`],
    /// [`NetworkError::Config`] for a bad secret.
    pub fn intercept(
        &self,
        sandbox_id: &str,
        secrets: BTreeMap<String, Secret>,
    ) -> Result<Interception> {
        self.intercept_with(sandbox_id, secrets, &Reuse::default())
    }

    /// [`Network::intercept`] keeping the CA key and placeholders of an earlier interception
    /// (`reuse`): after a node restart, a sandbox adopted with its namespace still trusts the
    /// old CA and its commands hold the old placeholders. Errors as for `intercept`, and
    /// [`NetworkError::Io`] for a CA key that does not parse.
    pub fn intercept_with(
        &self,
        sandbox_id: &str,
        secrets: BTreeMap<String, Secret>,
        reuse: &Reuse,
    ) -> Result<Interception> {
        let entry = self.shared.entry_of(sandbox_id)?;
        let (tls, interception) = SandboxTls::new(sandbox_id, secrets, reuse)?;
        *entry.tls.write() = Some(Arc::new(tls));
        Ok(interception)
    }

    /// The sandbox CA's PEM when interception is on. Errors: [`NetworkError::NotAttached`].
    pub fn ca_pem(&self, sandbox_id: &str) -> Result<Option<String>> {
        Ok(self
            .shared
            .entry_of(sandbox_id)?
            .tls()
            .map(|t| t.ca_pem().to_string()))
    }

    /// The sandbox's current policy. Errors: [`NetworkError::NotAttached`].
    pub fn policy(&self, sandbox_id: &str) -> Result<EgressPolicy> {
        Ok((*self.shared.entry_of(sandbox_id)?.policy()).clone())
    }

    /// The sandbox's counters since attach. Errors: [`NetworkError::NotAttached`].
    pub fn counters(&self, sandbox_id: &str) -> Result<NetworkCounters> {
        Ok(self.shared.entry_of(sandbox_id)?.counters.snapshot())
    }

    /// Gives an attached sandbox a tap device for a VM's NIC, bridged to its link to the
    /// gateway ([`plumbing::bridge_tap`]); returns the tap's name. Call it again after an
    /// adoption. Errors: [`NetworkError::NotAttached`], `ip` failures.
    pub async fn add_tap(&self, sandbox_id: &str) -> Result<String> {
        let slot = *self
            .shared
            .pool()
            .attached
            .get(sandbox_id)
            .ok_or_else(|| NetworkError::NotAttached(sandbox_id.to_string()))?;
        let cfg = self.shared.config.clone();
        blocking(move || plumbing::bridge_tap(&cfg, slot)).await?;
        Ok(plumbing::TAP.to_string())
    }

    /// Adds `base` to the sandbox's counters: what an earlier attachment of the same sandbox
    /// counted (before a suspend, a rollback or a node restart), so they count from its
    /// creation. Errors: [`NetworkError::NotAttached`].
    pub fn add_counters(&self, sandbox_id: &str, base: &NetworkCounters) -> Result<()> {
        self.shared.entry_of(sandbox_id)?.counters.add_all(base);
        Ok(())
    }

    /// The sandbox's attachment. Errors: [`NetworkError::NotAttached`].
    pub fn attachment(&self, sandbox_id: &str) -> Result<Attachment> {
        let slot = *self
            .shared
            .pool()
            .attached
            .get(sandbox_id)
            .ok_or_else(|| NetworkError::NotAttached(sandbox_id.to_string()))?;
        Ok(self.shared.attachment(sandbox_id, slot))
    }

    /// Refused connections and DNS questions of every sandbox, as they happen (a lagging
    /// receiver loses the oldest; capacity 1024).
    pub fn denied_events(&self) -> broadcast::Receiver<DeniedEvent> {
        self.shared.events.subscribe()
    }

    /// The node configuration in use.
    pub fn config(&self) -> &NetworkConfig {
        &self.shared.config
    }

    /// Waits (at most `timeout`) until the prepared pool is full; returns whether it is.
    pub async fn wait_prepared(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let full = {
                let pool = self.shared.pool();
                pool.prepared.len() >= self.shared.config.prepared && pool.preparing == 0
            };
            if full {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the gateway and removes everything it made: every sandbox namespace with the prefix
    /// (attached ones included), every veth, rule and address, and the gateway namespace.
    pub async fn shutdown(self) -> Result<()> {
        self.close().await
    }

    /// [`Network::shutdown`] through a shared handle: after it the handle serves nothing (every
    /// later attach fails). Waits for a namespace being prepared to be done first, so nothing
    /// is made after the removal.
    pub async fn close(&self) -> Result<()> {
        self.stop_and_remove(false).await
    }

    /// Stops the gateway and removes what it prepared on the host, keeping only what attached
    /// sandboxes need to be adopted by the next start: the ready pool's namespaces and the
    /// gateway namespace go (every veth, route, address and the nft table go with it), each
    /// attached sandbox's own namespace stays (without its link to the gateway: the next start
    /// re-plumbs it, as after a crash). After it the handle serves nothing.
    pub async fn close_keeping_attached(&self) -> Result<()> {
        self.stop_and_remove(true).await
    }

    async fn stop_and_remove(&self, keep_attached: bool) -> Result<()> {
        let _ = self.stop.send(true);
        self.refill.notify_one();
        for s in &self.servers {
            s.abort();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.shared.pool().preparing > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let prefix = self.shared.config.prefix.clone();
        let cfg = self.shared.config.clone();
        let kept: BTreeSet<u32> = if keep_attached {
            self.shared.pool().attached.values().copied().collect()
        } else {
            BTreeSet::new()
        };
        let kept_count = kept.len();
        blocking(move || {
            for slot in plumbing::existing_slots(&prefix)? {
                if !kept.contains(&slot) {
                    plumbing::unplumb(&cfg, slot)?;
                }
            }
            plumbing::delete_gateway(&prefix)
        })
        .await?;
        self.shared.sandboxes.write().clear();
        *self.shared.pool() = Pool::default();
        info!(prefix = %self.shared.config.prefix, kept = kept_count,
            "sandbox network gateway shut down");
        Ok(())
    }

    /// Connects to TCP `port` of the sandbox from the gateway (the sandbox sees the gateway's
    /// address as the peer): the way in for a sandbox's ports. Errors:
    /// [`NetworkError::NotAttached`], [`NetworkError::Io`] when nothing listens there
    /// (connection refused) or it does not answer within the connect timeout.
    pub async fn connect_sandbox(
        &self,
        sandbox_id: &str,
        port: u16,
    ) -> Result<tokio::net::TcpStream> {
        let addr = self.attachment(sandbox_id)?.address;
        let connect = self
            .shared
            .gateway_sockets
            .connect(SocketAddrV4::new(addr, port));
        match tokio::time::timeout(self.shared.config.connect_timeout, connect).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(NetworkError::io(format!("connecting to port {port}"), e)),
            Err(_) => Err(NetworkError::io(
                format!("connecting to port {port}"),
                std::io::Error::from(std::io::ErrorKind::TimedOut),
            )),
        }
    }

    /// How many sandboxes are attached now.
    pub fn attached(&self) -> usize {
        self.shared.pool().attached.len()
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.refill.notify_one();
        for s in &self.servers {
            s.abort();
        }
        // The refill loop ends at the stop; a namespace it is preparing now is left, like the
        // others, for the next start's recovery.
        drop(self.refill_task.take());
    }
}

async fn refill_loop(shared: Arc<Shared>, wake: Arc<Notify>, mut stop: watch::Receiver<bool>) {
    loop {
        if *stop.borrow() {
            return;
        }
        let slot = {
            let mut pool = shared.pool();
            // Checked under the pool's lock: `close` sets `stop` before it reads `preparing`
            // under that lock, so it either sees this preparation or this loop sees the stop.
            if *stop.borrow() {
                return;
            }
            if pool.prepared.len() + pool.preparing >= shared.config.prepared {
                None
            } else {
                match pool.allocate(&shared.config) {
                    Ok(slot) => {
                        pool.preparing += 1;
                        Some(slot)
                    }
                    Err(_) => None,
                }
            }
        };
        let Some(slot) = slot else {
            tokio::select! {
                _ = wake.notified() => {}
                _ = stop.changed() => {}
            }
            continue;
        };
        let cfg = shared.config.clone();
        let res = blocking(move || plumbing::plumb(&cfg, slot, false)).await;
        let failed = {
            let mut pool = shared.pool();
            pool.preparing -= 1;
            match res {
                Ok(()) => {
                    pool.prepared.push_back(slot);
                    None
                }
                Err(e) => {
                    pool.used.remove(&slot);
                    Some(e)
                }
            }
        };
        if let Some(e) = failed {
            warn!(slot, error = %e, "preparing a sandbox namespace failed");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
