//! Per-sandbox counters and the denied-connection event.

use std::net::Ipv4Addr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};

use crate::policy::EgressPolicy;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Live counters of one sandbox (relaxed atomics).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub bytes_out: AtomicU64,
    pub bytes_in: AtomicU64,
    pub connections_allowed: AtomicU64,
    pub connections_denied: AtomicU64,
    pub dns_answered: AtomicU64,
    pub dns_refused: AtomicU64,
}

/// A snapshot of a sandbox's counters since it was attached (plus what
/// [`crate::Network::add_counters`] carried over).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NetworkCounters {
    /// Bytes the sandbox sent through the gateway (payload, not headers).
    pub bytes_out: u64,
    /// Bytes the gateway delivered to the sandbox.
    pub bytes_in: u64,
    /// TCP connections the policy let through.
    pub connections_allowed: u64,
    /// TCP connections refused (policy or floor).
    pub connections_denied: u64,
    /// DNS questions answered (forwarded upstream).
    pub dns_answered: u64,
    /// DNS questions refused by the policy.
    pub dns_refused: u64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> NetworkCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        NetworkCounters {
            bytes_out: g(&self.bytes_out),
            bytes_in: g(&self.bytes_in),
            connections_allowed: g(&self.connections_allowed),
            connections_denied: g(&self.connections_denied),
            dns_answered: g(&self.dns_answered),
            dns_refused: g(&self.dns_refused),
        }
    }

    /// Adds `base` to every counter (counts carried over from an earlier attachment).
    pub(crate) fn add_all(&self, base: &NetworkCounters) {
        Self::add(&self.bytes_out, base.bytes_out);
        Self::add(&self.bytes_in, base.bytes_in);
        Self::add(&self.connections_allowed, base.connections_allowed);
        Self::add(&self.connections_denied, base.connections_denied);
        Self::add(&self.dns_answered, base.dns_answered);
        Self::add(&self.dns_refused, base.dns_refused);
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Why a destination was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeniedReason {
    /// The address is in the floor (host, node, sandboxes, link-local, metadata, private...).
    Floor,
    /// A deny entry names it.
    Denied,
    /// Internet is off and no allow entry names it.
    NotAllowed,
}

impl DeniedReason {
    /// The rule that refused a destination, as a user reads it: `floor`, `deny RULE` (the
    /// first deny entry naming `ip` or `name`), or `internet off, no allow rule`.
    pub fn rule(self, policy: Option<&EgressPolicy>, ip: Ipv4Addr, name: Option<&str>) -> String {
        match self {
            DeniedReason::Floor => {
                "floor (host, node, sandbox, metadata and private addresses are never reachable)"
                    .to_string()
            }
            DeniedReason::Denied => policy
                .and_then(|p| {
                    p.deny.iter().find(|r| {
                        (!ip.is_unspecified() && r.matches_ip(ip))
                            || name.is_some_and(|n| r.matches_name(n))
                    })
                })
                .map_or_else(|| "deny".to_string(), |r| format!("deny {r}")),
            DeniedReason::NotAllowed => "internet off and no allow rule names it".to_string(),
        }
    }
}

/// One refused connection or DNS question (the `network_denied` event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeniedEvent {
    /// The sandbox that tried.
    pub sandbox_id: String,
    /// `name`, `ip:port` or `name (ip:port)`: what a user reads.
    pub destination: String,
    /// The destination address (None for a DNS question).
    pub ip: Option<Ipv4Addr>,
    /// The destination port (None for a DNS question).
    pub port: Option<u16>,
    /// The name the connection or question carried, if any.
    pub name: Option<String>,
    /// `tcp` or `dns`.
    pub protocol: &'static str,
    /// Why.
    pub reason: DeniedReason,
    /// The rule that refused it ([`DeniedReason::rule`]).
    pub rule: String,
}

/// The sandbox side of a proxied connection: what is read from it counts as `bytes_out`, what is
/// written to it as `bytes_in`.
pub(crate) struct Counted<S> {
    pub inner: S,
    pub counters: Arc<super::network::SandboxEntry>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        if n > 0 {
            Counters::add(&self.counters.counters.bytes_out, n);
        }
        res
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &res {
            Counters::add(&self.counters.counters.bytes_in, *n as u64);
        }
        res
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
