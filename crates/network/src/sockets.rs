//! Makes sockets inside a chosen network namespace from async code.
//!
//! A socket belongs to the namespace of the thread that created it. The gateway's listeners are
//! made in the gateway namespace and its upstream sockets in the upstream namespace, by one
//! long-lived thread per namespace; the tokio side then uses them like any other socket.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::mpsc;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::oneshot;

use crate::cmd;
use crate::error::{NetworkError, Result};

enum Request {
    Tcp(oneshot::Sender<std::io::Result<Socket>>),
    Udp(oneshot::Sender<std::io::Result<std::net::UdpSocket>>),
    TcpListener(
        SocketAddrV4,
        oneshot::Sender<std::io::Result<std::net::TcpListener>>,
    ),
    UdpBound(
        SocketAddrV4,
        oneshot::Sender<std::io::Result<std::net::UdpSocket>>,
    ),
}

/// A socket maker bound to one namespace (or to the process's own).
#[derive(Clone)]
pub(crate) struct SocketMaker {
    tx: Option<mpsc::Sender<Request>>,
}

fn tcp_socket() -> std::io::Result<Socket> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    s.set_nonblocking(true)?;
    s.set_tcp_nodelay(true)?;
    Ok(s)
}

fn udp_socket(bind: SocketAddrV4) -> std::io::Result<std::net::UdpSocket> {
    let s = std::net::UdpSocket::bind(bind)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

fn tcp_listener(bind: SocketAddrV4) -> std::io::Result<std::net::TcpListener> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.bind(&SocketAddr::V4(bind).into())?;
    s.listen(1024)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

fn serve(rx: mpsc::Receiver<Request>) {
    while let Ok(req) = rx.recv() {
        match req {
            Request::Tcp(reply) => drop(reply.send(tcp_socket())),
            Request::Udp(reply) => {
                drop(reply.send(udp_socket(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))))
            }
            Request::TcpListener(a, reply) => drop(reply.send(tcp_listener(a))),
            Request::UdpBound(a, reply) => drop(reply.send(udp_socket(a))),
        }
    }
}

impl SocketMaker {
    /// A maker for the named namespace (`None` = the process's own). The thread ends when the last
    /// clone is dropped.
    pub(crate) fn new(netns: Option<&str>) -> Result<Self> {
        let Some(name) = netns else {
            return Ok(SocketMaker { tx: None });
        };
        let path = cmd::netns_path(name);
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("cove-net-sockets".into())
            .spawn(move || match cmd::enter_netns(&path) {
                Ok(()) => {
                    drop(ready_tx.send(Ok(())));
                    serve(rx);
                }
                Err(e) => drop(ready_tx.send(Err(e))),
            })
            .map_err(|e| NetworkError::io("spawning the socket thread", e))?;
        ready_rx
            .recv()
            .map_err(|_| NetworkError::io("socket thread", std::io::Error::other("exited")))??;
        Ok(SocketMaker { tx: Some(tx) })
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<std::io::Result<T>>) -> Request,
        local: impl FnOnce() -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let Some(tx) = &self.tx else { return local() };
        let (reply, wait) = oneshot::channel();
        tx.send(make(reply))
            .map_err(|_| std::io::Error::other("socket thread gone"))?;
        wait.await
            .map_err(|_| std::io::Error::other("socket thread gone"))?
    }

    /// Connects a TCP stream to `dest` from this maker's namespace.
    pub(crate) async fn connect(
        &self,
        dest: SocketAddrV4,
    ) -> std::io::Result<tokio::net::TcpStream> {
        let socket = self.ask(Request::Tcp, tcp_socket).await?;
        let std_stream: std::net::TcpStream = socket.into();
        tokio::net::TcpSocket::from_std_stream(std_stream)
            .connect(SocketAddr::V4(dest))
            .await
    }

    /// An unbound-port UDP socket in this maker's namespace.
    pub(crate) async fn udp(&self) -> std::io::Result<tokio::net::UdpSocket> {
        let s = self
            .ask(Request::Udp, || {
                udp_socket(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
            })
            .await?;
        tokio::net::UdpSocket::from_std(s)
    }

    /// A UDP socket bound to `addr` in this maker's namespace.
    pub(crate) async fn udp_bound(
        &self,
        addr: SocketAddrV4,
    ) -> std::io::Result<tokio::net::UdpSocket> {
        let s = self
            .ask(|r| Request::UdpBound(addr, r), || udp_socket(addr))
            .await?;
        tokio::net::UdpSocket::from_std(s)
    }

    /// A TCP listener on `addr` in this maker's namespace.
    pub(crate) async fn listen(
        &self,
        addr: SocketAddrV4,
    ) -> std::io::Result<tokio::net::TcpListener> {
        let s = self
            .ask(|r| Request::TcpListener(addr, r), || tcp_listener(addr))
            .await?;
        tokio::net::TcpListener::from_std(s)
    }
}
