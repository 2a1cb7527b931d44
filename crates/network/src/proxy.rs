//! The transparent TCP proxy: every sandbox connection lands here (nft DNAT), is judged against
//! the floor and the sandbox's current policy, and is then spliced to a socket made in the
//! upstream namespace toward the original destination.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use crate::counters::{Counted, Counters, DeniedReason};
use crate::intercept::Prefixed;
use crate::network::{SandboxEntry, Shared};
use crate::policy::Verdict;
use crate::sniff::{sniff, Sniffed, MAX_SNIFF};

/// One warning per sandbox per this interval for malformed TLS hellos.
pub(crate) const MALFORMED_HELLO_INTERVAL: Duration = Duration::from_secs(10);

/// Accept failures (out of file descriptors, say) are logged at most once per this interval.
static ACCEPT_FAILED: crate::warn::RateLimit = crate::warn::RateLimit::new(Duration::from_secs(10));

/// Accepts sandbox connections until the task is aborted.
pub(crate) async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, SocketAddr::V4(peer))) => {
                let shared = shared.clone();
                tokio::spawn(async move { handle(shared, stream, *peer.ip()).await });
            }
            Ok(_) => {}
            Err(e) => {
                if let Some(suppressed) = ACCEPT_FAILED.allow() {
                    warn!(error = %e, suppressed, "gateway accept failed");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn original_dst(stream: &TcpStream) -> std::io::Result<SocketAddrV4> {
    let sa = nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::OriginalDst)
        .map_err(std::io::Error::from)?;
    Ok(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
        u16::from_be(sa.sin_port),
    ))
}

/// Reads the client's first bytes until they name a host, carry none, or time/size runs out.
/// A malformed TLS hello is worth a warning, at most one per sandbox per
/// [`MALFORMED_HELLO_INTERVAL`], showing only a short escaped prefix of the sandbox's bytes.
async fn read_name(
    entry: &SandboxEntry,
    stream: &mut TcpStream,
    head: &mut Vec<u8>,
    timeout: Duration,
) -> Option<String> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut chunk = [0u8; 4096];
    loop {
        match sniff(head) {
            Sniffed::Name(n) => return Some(n),
            Sniffed::NoName => return None,
            Sniffed::Malformed => {
                if let Some(suppressed) = entry.malformed_hellos.allow() {
                    warn!(sandbox_id = %entry.id, len = head.len(),
                        prefix = %crate::warn::escaped_prefix(head), suppressed,
                        "malformed TLS hello from a sandbox");
                }
                return None;
            }
            Sniffed::Incomplete if head.len() >= MAX_SNIFF => return None,
            Sniffed::Incomplete => {}
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => head.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
}

async fn handle(shared: Arc<Shared>, mut stream: TcpStream, peer: Ipv4Addr) {
    let Some(entry) = shared.entry(peer) else {
        debug!(%peer, "connection from an unattached address dropped");
        return;
    };
    let Ok(_permit) = entry.connections.clone().try_acquire_owned() else {
        debug!(sandbox_id = %entry.id, "too many open connections; closing a new one");
        return;
    };
    let dst = match original_dst(&stream) {
        Ok(d) => d,
        Err(e) => {
            debug!(sandbox_id = %entry.id, error = %e, "no original destination");
            return;
        }
    };
    let ip = *dst.ip();
    if shared.floor.contains(ip) || dst.port() == 0 {
        let mut head = Vec::new();
        let name = first_bytes(&mut stream, &mut head, shared.config.sniff_timeout).await;
        let rule = DeniedReason::Floor.rule(None, ip, None);
        let line = shared.deny_tcp(&entry, dst, name, DeniedReason::Floor, rule);
        refuse(stream, head, &line).await;
        return;
    }
    let policy = entry.policy();
    let mut head = Vec::new();
    let mut name = None;
    let mut verdict = policy.judge_ip(ip);
    let tls = entry.tls();
    let intercepting = tls.is_some() && dst.port() == 443 && verdict == Verdict::Allow;
    if verdict == Verdict::NeedName || intercepting {
        name = read_name(&entry, &mut stream, &mut head, shared.config.sniff_timeout).await;
        verdict = policy.judge_connection(ip, name.as_deref(), false);
        if let (Verdict::NotAllowed, Some(n)) = (verdict, &name) {
            // Only an allowed name can still open it, and only on an address it resolves to.
            // A name no allow rule matches is never looked up: the lookup itself would carry
            // sandbox-chosen bytes (`<data>.exfil.test`) to the upstream resolver.
            if policy.allows_lookup(n) {
                let resolves = shared.resolves_to(n, ip).await;
                verdict = policy.judge_connection(ip, Some(n), resolves);
            }
        }
    }
    match verdict {
        Verdict::Allow => {}
        Verdict::Denied | Verdict::NotAllowed | Verdict::NeedName => {
            let reason = if verdict == Verdict::Denied {
                DeniedReason::Denied
            } else {
                DeniedReason::NotAllowed
            };
            if head.is_empty() {
                name = first_bytes(&mut stream, &mut head, shared.config.sniff_timeout).await;
            }
            let rule = reason.rule(Some(&policy), ip, name.as_deref());
            let line = shared.deny_tcp(&entry, dst, name, reason, rule);
            refuse(stream, head, &line).await;
            return;
        }
    }
    Counters::add(&entry.counters.connections_allowed, 1);
    let upstream =
        match tokio::time::timeout(shared.config.connect_timeout, shared.connect_upstream(dst))
            .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                debug!(sandbox_id = %entry.id, %dst, error = %e, "upstream connect failed");
                return;
            }
            Err(_) => {
                debug!(sandbox_id = %entry.id, %dst, "upstream connect timed out");
                return;
            }
        };
    if let (Some(tls), Some(n)) = (tls, &name) {
        let is_tls = head.first() == Some(&0x16);
        // Secrets go only to an address the secret's host resolves to by the gateway's own
        // lookup (asked only when the policy lets the name be looked up): a connection that
        // carries the host's name toward any other address stays end-to-end, placeholder and
        // all.
        if is_tls
            && dst.port() == 443
            && tls.wants(n)
            && policy.allows_lookup(n)
            && shared.resolves_to(n, ip).await
        {
            let client = match shared.upstream_tls() {
                Ok(c) => c,
                Err(e) => {
                    warn!(sandbox_id = %entry.id, error = %e, "no upstream TLS config");
                    return;
                }
            };
            let id = entry.id.clone();
            Counters::add(&entry.counters.bytes_out, head.len() as u64);
            let sandbox = Prefixed::new(
                head,
                Counted {
                    inner: stream,
                    counters: entry,
                },
            );
            if let Err(e) = crate::intercept::serve(tls, client, n.clone(), sandbox, upstream).await
            {
                debug!(sandbox_id = %id, name = %n, error = %e, "intercepted connection ended");
            }
            return;
        }
    }
    splice(entry, stream, upstream, head).await;
}

async fn splice(
    entry: Arc<SandboxEntry>,
    stream: TcpStream,
    mut upstream: TcpStream,
    head: Vec<u8>,
) {
    let _ = stream.set_nodelay(true);
    if !head.is_empty() {
        if upstream.write_all(&head).await.is_err() {
            return;
        }
        Counters::add(&entry.counters.bytes_out, head.len() as u64);
    }
    if let Err(e) = crate::relay::relay(&stream, &upstream, &entry).await {
        debug!(sandbox_id = %entry.id, error = %e, "relayed connection ended");
    }
}

/// A TLS alert record: fatal (2), `access_denied` (49). Sent in the clear before any
/// handshake message, which every TLS version allows, so the client reports "access denied"
/// instead of a reset or an unexpected end of file.
const TLS_ACCESS_DENIED: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 49];

/// Most bytes read (and dropped) from a refused connection after the answer, so that closing
/// it does not reset the connection before the client has read the answer.
const REFUSED_DRAIN: usize = 64 * 1024;

/// Reads what a refused client sends first (one read, at most `wait` and 5 s), so the answer
/// can be in its protocol and the reason can name the host it asked for; returns that name.
async fn first_bytes(stream: &mut TcpStream, head: &mut Vec<u8>, wait: Duration) -> Option<String> {
    let mut chunk = [0u8; 4096];
    if let Ok(Ok(n)) =
        tokio::time::timeout(wait.min(Duration::from_secs(5)), stream.read(&mut chunk)).await
    {
        head.extend_from_slice(&chunk[..n]);
    }
    match sniff(head) {
        Sniffed::Name(n) => Some(n),
        _ => None,
    }
}

/// Tells a refused client why, in its own protocol: a TLS client (first byte 0x16) gets the
/// `access_denied` alert; anything else that spoke first (HTTP) gets a `403` whose body is the
/// one-line `reason`; a client that sent nothing just sees the close. Then ends the connection
/// gracefully, reading (and dropping) at most [`REFUSED_DRAIN`] bytes for at most one second.
async fn refuse(mut stream: TcpStream, head: Vec<u8>, reason: &str) {
    let answer: Vec<u8> = match head.first() {
        None => return,
        Some(0x16) => TLS_ACCESS_DENIED.to_vec(),
        Some(_) => forbidden_response(reason).into_bytes(),
    };
    if stream.write_all(&answer).await.is_err() {
        return;
    }
    let _ = stream.shutdown().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < REFUSED_DRAIN {
        match tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => break,
        }
    }
}

/// The `403` a refused plain-HTTP client gets: `reason` as a one-line text body, and as the
/// `x-cove-denied` header.
fn forbidden_response(reason: &str) -> String {
    // The reason holds names a sandbox sent: only printable ASCII goes into the header.
    let header: String = reason
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    let body = format!("{header}\n");
    format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain; charset=utf-8\r\n\
         x-cove-denied: {header}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}
