//! The node link's TLS transport for tonic: a listener's connections after a TLS handshake
//! (server side) and a channel whose connector makes one (client side). TLS is done here with
//! tokio-rustls rather than by tonic so both sides can pin certificates ([`crate::tls`]).

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::transport::{Channel, Endpoint, Uri};
use tracing::debug;

use crate::tls::LINK_NAME;

/// Bounds of a node-link listener (the server's `--node-listen`, `cove node`'s listener).
pub struct IncomingBounds {
    /// Longest a TLS handshake may take before the connection is dropped.
    pub handshake_timeout: Duration,
    /// A link that sends nothing for this long is closed (a node-link client pings every
    /// 10 s while a call is open, and reconnects when it needs the link again).
    pub idle_timeout: Duration,
    /// A place for a connection from this peer in the process's connection caps (held until
    /// the connection closes), or `None` to close it at once.
    pub admit: Box<dyn Fn(IpAddr) -> Option<Box<dyn Send + Sync>> + Send + Sync>,
}

impl Default for IncomingBounds {
    /// 10 s handshakes, 120 s idle, no cap.
    fn default() -> Self {
        IncomingBounds {
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            admit: Box::new(|_| Some(Box::new(()))),
        }
    }
}

/// One accepted connection after its TLS handshake, holding its place in the caps.
pub struct TlsIo {
    tls: tokio_rustls::server::TlsStream<TcpStream>,
    idle: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
    _permit: Box<dyn Send + Sync>,
}

impl Connected for TlsIo {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.tls.get_ref().0.connect_info()
    }
}

impl AsyncRead for TlsIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.tls).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let next = tokio::time::Instant::now() + self.idle;
                    self.deadline.as_mut().reset(next);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the node link was idle too long",
                ))),
                Poll::Pending => Poll::Pending,
            },
            other => other,
        }
    }
}

impl AsyncWrite for TlsIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tls).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }
}

/// The connections of `listener` after a TLS handshake with `config`, for tonic's
/// `serve_with_incoming`, within `bounds`: a connection the caps refuse is closed before its
/// handshake; handshakes run concurrently, each bounded by the handshake timeout; a failed
/// one is dropped (logged at debug). Accepting stops when the stream is dropped.
pub fn tls_incoming(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    bounds: IncomingBounds,
) -> ReceiverStream<io::Result<TlsIo>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = tx.closed() => return,
                a = listener.accept() => a,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    debug!(error = %e, "accept on the node link");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Some(permit) = (bounds.admit)(peer.ip()) else {
                debug!(%peer, "node link connection over the connection cap");
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            let (handshake, idle) = (bounds.handshake_timeout, bounds.idle_timeout);
            tokio::spawn(async move {
                match tokio::time::timeout(handshake, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        let io = TlsIo {
                            tls,
                            idle,
                            deadline: Box::pin(tokio::time::sleep(idle)),
                            _permit: permit,
                        };
                        let _ = tx.send(Ok(io)).await;
                    }
                    Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake on the node link"),
                    Err(_) => debug!(%peer, "TLS handshake on the node link timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// An endpoint for a node-link URL (`https://host:port`; `http://` is taken to mean the same,
/// since the link is always TLS). tonic sees `http://`: the TLS is the connector's.
///
/// # Errors
/// A message naming the URL when it does not parse or has another scheme.
pub fn endpoint(url: &str) -> Result<Endpoint, String> {
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("node link URL {url:?}: {e}"))?;
    match uri.scheme_str() {
        Some("https" | "http") => {}
        _ => return Err(format!("node link URL {url:?}: use https://host:port")),
    }
    let authority = uri
        .authority()
        .ok_or_else(|| format!("node link URL {url:?}: no host:port"))?;
    Endpoint::from_shared(format!("http://{authority}"))
        .map_err(|e| format!("node link URL {url:?}: {e}"))
}

/// A channel over `endpoint` whose connections are TLS with `config` (made lazily when
/// `lazy`, else now).
///
/// # Errors
/// The connection or handshake failed (only when not lazy).
pub async fn tls_channel(
    endpoint: Endpoint,
    config: Arc<rustls::ClientConfig>,
    lazy: bool,
) -> Result<Channel, tonic::transport::Error> {
    let connector = tower::service_fn(move |uri: Uri| {
        let config = config.clone();
        async move {
            let host = uri
                .host()
                .ok_or_else(|| io::Error::other("no host"))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let port = uri.port_u16().unwrap_or(443);
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let name = ServerName::try_from(LINK_NAME).map_err(io::Error::other)?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok::<_, io::Error>(TokioIo::new(tls))
        }
    });
    if lazy {
        Ok(endpoint.connect_with_connector_lazy(connector))
    } else {
        endpoint.connect_with_connector(connector).await
    }
}
