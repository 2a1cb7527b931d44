//! The node link's TLS transport for tonic: a listener's connections after a TLS handshake
//! (server side) and a channel whose connector makes one (client side). TLS is done here with
//! tokio-rustls rather than by tonic so both sides can pin certificates ([`crate::tls`]).

use std::io;
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

/// Longest a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One accepted connection after its TLS handshake.
pub struct TlsIo(tokio_rustls::server::TlsStream<TcpStream>);

impl Connected for TlsIo {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl AsyncRead for TlsIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The connections of `listener` after a TLS handshake with `config`, for tonic's
/// `serve_with_incoming`. Handshakes run concurrently, each bounded by 10 s; a failed one is
/// dropped (logged at debug). Accepting stops when the stream is dropped.
pub fn tls_incoming(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
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
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(TlsIo(tls))).await;
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
