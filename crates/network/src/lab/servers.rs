//! The fake internet's servers: HTTP, HTTPS (test CA), DNS, metadata, and a host service.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

use super::{
    inet_range, names, Seen, DNS_ADDR, HOST_SERVICE_PORT, METADATA, PROXY_ADDR, PROXY_PORT, WEB_A,
    WEB_B,
};
use crate::error::{NetworkError, Result};
use crate::policy::normalize_name;
use crate::sockets::SocketMaker;

fn bind_err(what: &str) -> impl FnOnce(std::io::Error) -> NetworkError + '_ {
    move |e| NetworkError::io(format!("lab: binding {what}"), e)
}

fn tls_err(e: impl std::fmt::Display) -> NetworkError {
    NetworkError::io(
        "lab: test certificates",
        std::io::Error::other(e.to_string()),
    )
}

/// What [`start`] returns: the CA PEM, the tasks, the DNS question counter and what the
/// servers saw.
type Started = (String, Vec<JoinHandle<()>>, Arc<AtomicU64>, Arc<Seen>);

/// Starts every server.
pub(super) async fn start(inet: &SocketMaker, up: &SocketMaker) -> Result<Started> {
    let mut tasks = Vec::new();
    for (ip, label) in [
        (WEB_A.ip(), "web-a"),
        (WEB_B.ip(), "web-b"),
        (METADATA, "metadata"),
    ] {
        let l = inet
            .listen(SocketAddrV4::new(ip, 80))
            .await
            .map_err(bind_err(label))?;
        tasks.push(tokio::spawn(http_server(l, label)));
    }
    let l = up
        .listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, HOST_SERVICE_PORT))
        .await
        .map_err(bind_err("host service"))?;
    tasks.push(tokio::spawn(http_server(l, "host-service")));
    let seen = Arc::new(Seen::default());
    let (ca_pem, acceptor) = tls_setup()?;
    // Labels `tls-{sni}` (A) and `tls-b-{sni}` (B).
    for (ip, label) in [(WEB_A.ip(), "tls"), (WEB_B.ip(), "tls-b")] {
        let l = inet
            .listen(SocketAddrV4::new(ip, 443))
            .await
            .map_err(bind_err("https"))?;
        let server = https_server(l, label, acceptor.clone(), seen.clone());
        tasks.push(tokio::spawn(server));
    }
    let dns = inet
        .udp_bound(SocketAddrV4::new(DNS_ADDR.ip(), 53))
        .await
        .map_err(bind_err("dns"))?;
    let queries = Arc::new(AtomicU64::new(0));
    tasks.push(tokio::spawn(dns_server(dns, queries.clone(), seen.clone())));
    let l = inet
        .listen(SocketAddrV4::new(PROXY_ADDR.ip(), PROXY_PORT))
        .await
        .map_err(bind_err("proxy"))?;
    tasks.push(tokio::spawn(connect_proxy(l, inet.clone(), seen.clone())));
    Ok((ca_pem, tasks, queries, seen))
}

fn tls_setup() -> Result<(String, tokio_rustls::TlsAcceptor)> {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "cove lab test CA");
    let ca_key = rcgen::KeyPair::generate().map_err(tls_err)?;
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).map_err(tls_err)?;
    let leaf_params =
        rcgen::CertificateParams::new(vec!["allowed.test".to_string(), "other.test".to_string()])
            .map_err(tls_err)?;
    let leaf_key = rcgen::KeyPair::generate().map_err(tls_err)?;
    let leaf = leaf_params.signed_by(&leaf_key, &ca).map_err(tls_err)?;
    let key =
        rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).map_err(tls_err)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .map_err(tls_err)?;
    Ok((ca.pem(), tokio_rustls::TlsAcceptor::from(Arc::new(config))))
}

/// Reads a request head; returns (path, host, authorization).
async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Option<(String, String, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    for _ in 0..32 {
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut chunk))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(_)) = req.parse(&buf) {
            let header = |name: &str| {
                req.headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(h.value).into_owned())
                    .unwrap_or_default()
            };
            let (host, auth) = (header("host"), header("authorization"));
            return Some((req.path.unwrap_or("/").to_string(), host, auth));
        }
    }
    None
}

/// Answers `/bytes/N` with N zero bytes, anything else with `site=LABEL host=HOST` (and
/// ` auth=AUTHORIZATION` when the request had one).
async fn respond<S: AsyncWrite + Unpin>(
    s: &mut S,
    label: &str,
    path: &str,
    host: &str,
    auth: &str,
) -> std::io::Result<()> {
    if let Some(n) = path
        .strip_prefix("/bytes/")
        .and_then(|n| n.parse::<u64>().ok())
    {
        s.write_all(
            format!("HTTP/1.1 200 OK\r\ncontent-length: {n}\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
        let block = vec![0u8; 256 * 1024];
        let mut left = n;
        while left > 0 {
            let k = left.min(block.len() as u64) as usize;
            s.write_all(&block[..k]).await?;
            left -= k as u64;
        }
    } else {
        let mut body = format!("site={label} host={host}");
        if !auth.is_empty() {
            body.push_str(&format!(" auth={auth}"));
        }
        s.write_all(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await?;
    }
    s.shutdown().await
}

async fn http_server(l: TcpListener, label: &'static str) {
    while let Ok((mut s, _)) = l.accept().await {
        tokio::spawn(async move {
            if let Some((path, host, auth)) = read_head(&mut s).await {
                let _ = respond(&mut s, label, &path, &host, &auth).await;
            }
        });
    }
}

async fn https_server(
    l: TcpListener,
    label: &'static str,
    acceptor: tokio_rustls::TlsAcceptor,
    seen: Arc<Seen>,
) {
    while let Ok((s, _)) = l.accept().await {
        let (acceptor, seen) = (acceptor.clone(), seen.clone());
        tokio::spawn(async move {
            let Ok(mut tls) = acceptor.accept(s).await else {
                return;
            };
            let sni = tls.get_ref().1.server_name().unwrap_or("").to_string();
            if let Some((path, host, auth)) = read_head(&mut tls).await {
                if !auth.is_empty() {
                    seen.authorization(auth.clone());
                }
                let _ = respond(&mut tls, &format!("{label}-{sni}"), &path, &host, &auth).await;
            }
        });
    }
}

/// An HTTP CONNECT proxy (a corporate network's upstream proxy): tunnels to the target when it
/// is inside the fake internet, else answers 403; records each CONNECT target and
/// `Proxy-Authorization` in [`Seen`].
async fn connect_proxy(l: TcpListener, inet: SocketMaker, seen: Arc<Seen>) {
    while let Ok((mut s, _)) = l.accept().await {
        let (inet, seen) = (inet.clone(), seen.clone());
        tokio::spawn(async move {
            let Some((target, auth)) = read_connect(&mut s).await else {
                let _ = s
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await;
                return;
            };
            seen.proxied_one(target.to_string(), auth);
            // Only ever inside the lab: anything else is refused, never dialled.
            if !inet_range().contains(target.ip()) {
                let _ = s
                    .write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                    .await;
                return;
            }
            let Ok(mut up) = inet.connect(target).await else {
                let _ = s
                    .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
                    .await;
                return;
            };
            if s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_ok()
            {
                let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
            }
        });
    }
}

/// Reads a `CONNECT ip:port` request head (at most 16 KiB, 5 s); returns the target and the
/// `Proxy-Authorization` header (empty when none).
async fn read_connect<S: AsyncRead + Unpin>(s: &mut S) -> Option<(SocketAddrV4, String)> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    // Byte by byte: nothing after the head may be consumed (the tunnel's first bytes).
    while buf.len() < 16 * 1024 && !buf.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout_at(deadline, s.read(&mut byte)).await {
            Ok(Ok(1)) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    if !matches!(req.parse(&buf), Ok(httparse::Status::Complete(_)))
        || req.method != Some("CONNECT")
    {
        return None;
    }
    let target = req.path?.parse().ok()?;
    let auth = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("proxy-authorization"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned())
        .unwrap_or_default();
    Some((target, auth))
}

async fn dns_server(socket: UdpSocket, queries: Arc<AtomicU64>, seen: Arc<Seen>) {
    let mut buf = vec![0u8; 4096];
    while let Ok((n, from)) = socket.recv_from(&mut buf).await {
        queries.fetch_add(1, Ordering::Relaxed);
        seen.dns_packet(&buf[..n]);
        let Ok(req) = Message::from_vec(&buf[..n]) else {
            continue;
        };
        let Some(q) = req.queries.first() else {
            continue;
        };
        let name = normalize_name(&q.name.to_ascii());
        seen.dns_name(name.clone());
        let mut reply = Message::response(req.metadata.id, req.metadata.op_code);
        reply.metadata.message_type = MessageType::Response;
        reply.metadata.recursion_desired = req.metadata.recursion_desired;
        reply.metadata.recursion_available = true;
        reply.queries = req.queries.clone();
        match names().into_iter().find(|(n, _)| *n == name) {
            Some((_, ip)) if q.query_type == RecordType::A => {
                reply.add_answer(Record::from_rdata(q.name.clone(), 60, RData::A(A(ip))));
            }
            Some(_) => {}
            None => reply.metadata.response_code = ResponseCode::NXDomain,
        }
        if let Ok(bytes) = reply.to_vec() {
            let _ = socket.send_to(&bytes, from).await;
        }
    }
}
