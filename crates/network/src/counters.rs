//! Per-sandbox counters and the denied-connection event.

use std::net::Ipv4Addr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};

use crate::policy::EgressPolicy;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Live counters of one sandbox (relaxed atomics). Each also feeds a node-wide Prometheus
/// series through the `metrics` facade (a no-op where no recorder is installed), so operators
/// see the gateway's totals without a label per sandbox.
#[derive(Debug)]
pub(crate) struct Counters {
    pub bytes_out: Tally,
    pub bytes_in: Tally,
    pub connections_allowed: Tally,
    pub connections_denied: Tally,
    pub dns_answered: Tally,
    pub dns_refused: Tally,
}

/// Bytes relayed by the gateway (counter, label `direction`: `out` = sent by sandboxes, `in` =
/// delivered to them).
pub const GATEWAY_BYTES: &str = "cove_gateway_bytes_total";
/// TCP connections the gateway decided on (counter, label `verdict`: `allowed` or `denied`).
pub const GATEWAY_CONNECTIONS: &str = "cove_gateway_connections_total";
/// DNS questions the gateway decided on (counter, label `result`: `answered` or `refused`).
pub const GATEWAY_DNS: &str = "cove_gateway_dns_queries_total";

/// One counter of a sandbox and the node-wide series it adds to.
#[derive(Debug)]
pub(crate) struct Tally {
    local: AtomicU64,
    series: metrics::Counter,
}

impl Tally {
    fn new(series: metrics::Counter) -> Self {
        Tally {
            local: AtomicU64::new(0),
            series,
        }
    }

    fn get(&self) -> u64 {
        self.local.load(Ordering::Relaxed)
    }
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            bytes_out: Tally::new(metrics::counter!(GATEWAY_BYTES, "direction" => "out")),
            bytes_in: Tally::new(metrics::counter!(GATEWAY_BYTES, "direction" => "in")),
            connections_allowed: Tally::new(
                metrics::counter!(GATEWAY_CONNECTIONS, "verdict" => "allowed"),
            ),
            connections_denied: Tally::new(
                metrics::counter!(GATEWAY_CONNECTIONS, "verdict" => "denied"),
            ),
            dns_answered: Tally::new(metrics::counter!(GATEWAY_DNS, "result" => "answered")),
            dns_refused: Tally::new(metrics::counter!(GATEWAY_DNS, "result" => "refused")),
        }
    }
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
        NetworkCounters {
            bytes_out: self.bytes_out.get(),
            bytes_in: self.bytes_in.get(),
            connections_allowed: self.connections_allowed.get(),
            connections_denied: self.connections_denied.get(),
            dns_answered: self.dns_answered.get(),
            dns_refused: self.dns_refused.get(),
        }
    }

    /// Adds `base` to every counter (counts carried over from an earlier attachment; the
    /// node-wide series counted them already).
    pub(crate) fn add_all(&self, base: &NetworkCounters) {
        let carry = |t: &Tally, n: u64| t.local.fetch_add(n, Ordering::Relaxed);
        carry(&self.bytes_out, base.bytes_out);
        carry(&self.bytes_in, base.bytes_in);
        carry(&self.connections_allowed, base.connections_allowed);
        carry(&self.connections_denied, base.connections_denied);
        carry(&self.dns_answered, base.dns_answered);
        carry(&self.dns_refused, base.dns_refused);
    }

    /// Counts `n` on a sandbox's counter and on its node-wide series.
    pub(crate) fn add(counter: &Tally, n: u64) {
        counter.local.fetch_add(n, Ordering::Relaxed);
        counter.series.increment(n);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_counter_also_counts_node_wide_and_carry_over_does_not() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let (a, b) =
            metrics::with_local_recorder(&recorder, || (Counters::default(), Counters::default()));
        Counters::add(&a.connections_denied, 1);
        Counters::add(&b.connections_denied, 2);
        Counters::add(&a.bytes_out, 100);
        Counters::add(&b.dns_refused, 1);
        b.add_all(&NetworkCounters {
            bytes_in: 7,
            ..Default::default()
        });
        assert_eq!(a.snapshot().connections_denied, 1);
        assert_eq!(b.snapshot().connections_denied, 2);
        assert_eq!(b.snapshot().bytes_in, 7);
        let text = handle.render();
        let value = |series: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(series)?.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        assert_eq!(
            value("cove_gateway_connections_total{verdict=\"denied\"}"),
            3
        );
        assert_eq!(value("cove_gateway_bytes_total{direction=\"out\"}"), 100);
        assert_eq!(
            value("cove_gateway_dns_queries_total{result=\"refused\"}"),
            1
        );
        // Carried-over counts were counted node-wide when they happened.
        assert_eq!(value("cove_gateway_bytes_total{direction=\"in\"}"), 0);
    }
}
