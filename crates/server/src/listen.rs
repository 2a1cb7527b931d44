//! Bounds on every listener a client can reach (the API with the console and `/mcp`, the data
//! plane, E2B, the port proxy, the node link): a connection cap over the whole process and per
//! peer, a time limit on a request's head, and an idle timeout. Without them ~20,000 idle
//! connections that never sent a byte held as many file descriptors, and the node could no
//! longer start `runc`.
//!
//! - **Caps** ([`Admission`]): one count of open connections over all listeners of the process
//!   (file descriptors are one budget) and one per peer (an IPv4 address, or an IPv6 /64, which
//!   one host usually holds whole). A connection over either cap is closed as soon as it is
//!   accepted; its descriptor is back at once.
//! - **Head timeout**: an HTTP client must send a request's whole head within it, counted from
//!   when the server starts waiting (a new connection, or a kept-alive one after its last
//!   response), so a slow or silent client cannot hold a connection with a trickle of bytes.
//! - **Idle timeout**: a connection with no request in flight (none being read, answered or
//!   streamed) for this long is closed. A long poll, an SSE stream or a file transfer is a
//!   request in flight, so it is never idle; a WebSocket, once upgraded (after its token was
//!   checked), belongs to its handler and keeps its place in the caps until it closes.
//!
//! The node link (gRPC over TLS) takes the same caps; its TLS handshake must finish within the
//! head timeout, and a link that sends nothing for the idle timeout is closed (a node's
//! channel pings while a call is open and reconnects when it needs the link again).

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt;
use tracing::warn;

/// Default of `--listen-header-timeout`. hyper counts it from when it starts waiting for a
/// head, which on a kept-alive connection is right after the last response: it must outlast
/// the idle time of clients' connection pools (reqwest's, under E2B's Python SDK, keeps an idle
/// connection 90 s), or a client reusing a pooled connection meets a reset.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(100);
/// Default of `--listen-idle-timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Default of `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Default of `--max-connections-per-peer`.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 512;

/// The bounds of a process's listeners (flags of `cove server` and `cove node`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenLimits {
    /// Longest wait for a request's head (and for the node link's TLS handshake).
    pub header_timeout: Duration,
    /// A connection with no request in flight this long is closed.
    pub idle_timeout: Duration,
    /// Open connections over every listener of the process.
    pub max_connections: usize,
    /// Open connections from one peer (IPv4 address or IPv6 /64) over every listener.
    pub max_connections_per_peer: usize,
}

impl Default for ListenLimits {
    fn default() -> Self {
        ListenLimits {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
        }
    }
}

/// Connections refused for a cap are logged at most once per this interval.
const REFUSED_LOG_INTERVAL: Duration = Duration::from_secs(10);
static REFUSED: cove_network::RateLimit = cove_network::RateLimit::new(REFUSED_LOG_INTERVAL);
static ACCEPT_FAILED: cove_network::RateLimit = cove_network::RateLimit::new(REFUSED_LOG_INTERVAL);

/// The connection caps of one process, shared by its listeners.
#[derive(Clone)]
pub struct Admission {
    inner: Arc<AdmissionInner>,
}

struct AdmissionInner {
    limits: ListenLimits,
    total: Arc<Semaphore>,
    per_peer: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection's place in the caps, given back when dropped.
pub struct Permit {
    _total: OwnedSemaphorePermit,
    peer: IpAddr,
    admission: Arc<AdmissionInner>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut peers = self.admission.per_peer.lock();
        if let Some(n) = peers.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                peers.remove(&self.peer);
            }
        }
    }
}

/// Whom a connection counts against: an IPv4 address (an IPv4-mapped IPv6 one as IPv4), or
/// the /64 of an IPv6 address.
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

impl Admission {
    /// Caps from `limits` (a cap of 0 is taken as 1).
    pub fn new(limits: ListenLimits) -> Self {
        Admission {
            inner: Arc::new(AdmissionInner {
                limits,
                total: Arc::new(Semaphore::new(limits.max_connections.max(1))),
                per_peer: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The limits.
    pub fn limits(&self) -> ListenLimits {
        self.inner.limits
    }

    /// A place for a connection from `peer`, or `None` when the process or the peer is at its
    /// cap (the caller closes the connection).
    pub fn admit(&self, peer: IpAddr) -> Option<Permit> {
        let key = peer_key(peer);
        let total = self.inner.total.clone().try_acquire_owned().ok()?;
        let mut peers = self.inner.per_peer.lock();
        let n = peers.entry(key).or_insert(0);
        if *n >= self.inner.limits.max_connections_per_peer.max(1) {
            return None;
        }
        *n += 1;
        Some(Permit {
            _total: total,
            peer: key,
            admission: self.inner.clone(),
        })
    }

    /// Connections open now (all listeners).
    pub fn open(&self) -> usize {
        self.inner.limits.max_connections.max(1) - self.inner.total.available_permits()
    }
}

/// Logs a refused connection (rate-limited: a flood of them is one line per interval).
pub(crate) fn log_refused(listener: &'static str, peer: IpAddr) {
    if let Some(suppressed) = REFUSED.allow() {
        warn!(listener, %peer, suppressed, "connection refused: the connection cap is reached");
    }
}

/// A stream that holds its connection's [`Permit`] for as long as it lives (through an
/// upgrade to a WebSocket too).
pub struct Admitted<S> {
    inner: S,
    _permit: Permit,
}

impl<S> Admitted<S> {
    /// `inner` holding `permit`.
    pub fn new(inner: S, permit: Permit) -> Self {
        Admitted {
            inner,
            _permit: permit,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Admitted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Admitted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Requests in flight on one connection, and since when it has had none.
struct Activity {
    state: Mutex<(usize, Instant)>,
    changed: Notify,
}

/// One request in flight, until its response body is dropped (sent or abandoned).
struct Busy(Arc<Activity>);

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Activity {
            state: Mutex::new((0, Instant::now())),
            changed: Notify::new(),
        })
    }

    fn busy(self: &Arc<Self>) -> Busy {
        self.state.lock().0 += 1;
        self.changed.notify_waiters();
        Busy(self.clone())
    }

    /// Returns once the connection has had no request in flight for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (n, since) = *self.state.lock();
            if n > 0 {
                changed.await;
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep_until(since + idle) => return,
                () = changed => {}
            }
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        {
            let mut st = self.0.state.lock();
            st.0 -= 1;
            if st.0 == 0 {
                st.1 = Instant::now();
            }
        }
        self.0.changed.notify_waiters();
    }
}

/// Serves `router` on `listener` within `admission`'s caps and limits until `stop` turns
/// true; then stops accepting, lets the requests in flight finish and returns once every
/// connection has closed. `name` names the listener in logs. With `tls`, every connection is
/// TLS first; its handshake must finish within the head timeout (it counts toward the caps
/// like any connection).
pub(crate) async fn serve_http(
    name: &'static str,
    listener: TcpListener,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    admission: Admission,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()> {
    let (open_tx, open_rx) = watch::channel(());
    loop {
        let accepted = tokio::select! {
            () = stopped(&mut stop) => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                if let Some(suppressed) = ACCEPT_FAILED.allow() {
                    warn!(listener = name, error = %e, suppressed, "accept failed");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(permit) = admission.admit(peer.ip()) else {
            log_refused(name, peer.ip());
            continue;
        };
        // Small SSE events and JSON answers must not wait for delayed ACKs (Nagle): without
        // TCP_NODELAY a keep-alive exec round trip costs ~40 ms instead of a few.
        let _ = tcp.set_nodelay(true);
        let tcp = Admitted::new(tcp, permit);
        let conn = Connection {
            router: router.clone(),
            limits: admission.limits(),
            stop: stop.clone(),
            open: open_rx.clone(),
        };
        match &tls {
            None => {
                tokio::spawn(conn.serve(tcp));
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let head = admission.limits().header_timeout;
                tokio::spawn(async move {
                    // A failed or slow handshake is the client's problem: the connection
                    // closes (its permit is returned) and nothing is logged per attempt.
                    if let Ok(Ok(tls)) = tokio::time::timeout(head, acceptor.accept(tcp)).await {
                        conn.serve(tls).await;
                    }
                });
            }
        }
    }
    drop(open_rx);
    drop(listener);
    open_tx.closed().await;
    Ok(())
}

/// Returns once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

struct Connection {
    router: Router,
    limits: ListenLimits,
    stop: watch::Receiver<bool>,
    /// Held until the connection ends (the listener waits for every one at shutdown).
    open: watch::Receiver<()>,
}

impl Connection {
    async fn serve<I>(self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            router,
            limits,
            mut stop,
            open,
        } = self;
        let activity = Activity::new();
        let tracked = activity.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let busy = tracked.busy();
            let router = router.clone();
            async move {
                let resp = router
                    .oneshot(req.map(Body::new))
                    .await
                    .unwrap_or_else(|e: Infallible| match e {});
                // The request stays in flight until its body is sent or dropped.
                Ok::<_, Infallible>(resp.map(|body| {
                    Body::new(body.map_frame(move |frame| {
                        let _ = &busy;
                        frame
                    }))
                }))
            }
        });
        let mut builder = Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout);
        builder.http2().timer(TokioTimer::new());
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
        tokio::pin!(conn);
        let mut draining = false;
        loop {
            tokio::select! {
                _ = conn.as_mut() => break,
                () = stopped(&mut stop), if !draining => {
                    draining = true;
                    conn.as_mut().graceful_shutdown();
                }
                () = activity.idle_for(limits.idle_timeout) => break,
            }
        }
        drop(open);
    }
}

/// Shortest idle timeout of the node link: its clients ping every 10 s (with a 10 s timeout)
/// while a call is open.
const NODE_LINK_MIN_IDLE: Duration = Duration::from_secs(30);

/// The node link's bounds within `admission`: the TLS handshake within the head timeout, the
/// idle timeout (at least 30 s), the same caps.
pub(crate) fn node_link_bounds(admission: &Admission) -> cove_node_rpc::transport::IncomingBounds {
    let limits = admission.limits();
    let admission = admission.clone();
    cove_node_rpc::transport::IncomingBounds {
        handshake_timeout: limits.header_timeout,
        idle_timeout: limits.idle_timeout.max(NODE_LINK_MIN_IDLE),
        admit: Box::new(move |peer| match admission.admit(peer) {
            Some(p) => Some(Box::new(p) as Box<dyn Send + Sync>),
            None => {
                log_refused("node", peer);
                None
            }
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_peer: usize) -> ListenLimits {
        ListenLimits {
            max_connections: total,
            max_connections_per_peer: per_peer,
            ..Default::default()
        }
    }

    #[test]
    fn caps_count_per_process_and_per_peer_and_free_on_drop() {
        let a = Admission::new(limits(3, 2));
        let one: IpAddr = "192.0.2.1".parse().expect("ip");
        let two: IpAddr = "192.0.2.2".parse().expect("ip");
        let p1 = a.admit(one).expect("first");
        let p2 = a.admit(one).expect("second");
        assert!(a.admit(one).is_none(), "per peer");
        let p3 = a.admit(two).expect("another peer");
        assert!(a.admit("192.0.2.3".parse().expect("ip")).is_none(), "total");
        assert_eq!(a.open(), 3);
        drop(p1);
        assert!(a.admit(two).is_some(), "a freed place is reused");
        drop((p2, p3));
        assert_eq!(a.open(), 0);
        assert!(a.inner.per_peer.lock().is_empty());
    }

    #[test]
    fn an_ipv6_slash_64_is_one_peer_and_mapped_ipv4_is_ipv4() {
        let a = Admission::new(limits(10, 1));
        let _p = a
            .admit("2001:db8:1:2::1".parse().expect("ip"))
            .expect("first");
        assert!(a.admit("2001:db8:1:2::ffff".parse().expect("ip")).is_none());
        assert!(a.admit("2001:db8:1:3::1".parse().expect("ip")).is_some());
        let _q = a.admit("192.0.2.9".parse().expect("ip")).expect("v4");
        assert!(a.admit("::ffff:192.0.2.9".parse().expect("ip")).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn idle_counts_only_without_a_request_in_flight() {
        let activity = Activity::new();
        let idle = Duration::from_secs(10);
        let busy = activity.busy();
        // Busy for longer than the idle timeout: not idle.
        let waited = tokio::time::timeout(Duration::from_secs(30), activity.idle_for(idle)).await;
        assert!(waited.is_err(), "idle while a request was in flight");
        drop(busy);
        let start = Instant::now();
        activity.idle_for(idle).await;
        assert_eq!(start.elapsed(), idle);
    }
}
