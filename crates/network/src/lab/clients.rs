//! Blocking clients that run inside a namespace (on a thread that entered it). Each checks first
//! that the route to its destination leaves through a device of that namespace.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

use crate::cmd;
use crate::error::{NetworkError, Result};

/// The outcome of one request: the body (status 200), or what went wrong (refused, reset,
/// closed, another status, timeout).
pub type Reply = std::result::Result<String, String>;

/// Errors unless `ip -n ns route get dest` names a device that is in `ns`.
pub fn check_route(ns: &str, dest: Ipv4Addr) -> Result<()> {
    let out = cmd::run(
        "ip",
        &["-j", "-n", ns, "route", "get", &dest.to_string()],
        None,
    )?;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let dev = v
        .get(0)
        .and_then(|r| r.get("dev"))
        .and_then(|d| d.as_str())
        .unwrap_or("")
        .to_string();
    if dev.is_empty() || !cmd::links(Some(ns))?.contains(&dev) {
        return Err(NetworkError::Config(format!(
            "route from {ns} to {dest} leaves through {dev:?}, not a device of {ns}; not sending"
        )));
    }
    Ok(())
}

fn parse_reply(raw: &[u8]) -> Reply {
    if raw.is_empty() {
        return Err("closed without a response".into());
    }
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("truncated response: {text:?}"))?;
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("status: {status}\n{head}\n\n{body}"));
    }
    let chunked = head.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding")
                && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    if chunked {
        return dechunk(body);
    }
    Ok(body.to_string())
}

/// The payload of a `transfer-encoding: chunked` body (no trailers expected).
fn dechunk(mut body: &str) -> Reply {
    let mut out = String::new();
    loop {
        let (size, rest) = body
            .split_once("\r\n")
            .ok_or_else(|| format!("truncated chunk: {body:?}"))?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("chunk size {size:?}: {e}"))?;
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest
            .get(..size)
            .ok_or_else(|| format!("truncated chunk: {rest:?}"))?;
        out.push_str(chunk);
        body = rest
            .get(size..)
            .and_then(|r| r.strip_prefix("\r\n"))
            .ok_or_else(|| format!("chunk without its CRLF: {rest:?}"))?;
    }
}

fn read_all(s: &mut impl Read) -> std::result::Result<Vec<u8>, String> {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return Ok(raw),
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
            Err(e) if raw.is_empty() => return Err(format!("read: {e}")),
            Err(_) => return Ok(raw),
        }
        if raw.len() > 1 << 20 {
            return Ok(raw);
        }
    }
}

fn connect(dest: SocketAddrV4, timeout: Duration) -> std::result::Result<TcpStream, String> {
    let s = TcpStream::connect_timeout(&SocketAddr::V4(dest), timeout)
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// `GET path` with `Host: host` to `dest`, from inside `ns`.
pub fn http_get(
    ns: &str,
    dest: SocketAddrV4,
    host: &str,
    path: &str,
    timeout: Duration,
) -> Result<Reply> {
    check_route(ns, *dest.ip())?;
    let req = get_request(host, path);
    cmd::run_in_netns(ns, move || {
        let mut s = send(dest, &req, timeout)?;
        parse_reply(&read_all(&mut s)?)
    })
}

fn get_request(host: &str, path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}

/// Connects to `dest` and writes `req` (on a thread inside the namespace).
fn send(
    dest: SocketAddrV4,
    req: &str,
    timeout: Duration,
) -> std::result::Result<TcpStream, String> {
    let mut s = connect(dest, timeout)?;
    s.write_all(req.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    Ok(s)
}

/// What [`http_download`] received after the response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Download {
    /// Body bytes received (bytes).
    pub bytes: u64,
    /// Of those, how many were not zero (the lab's `/bytes/N` serves zeros).
    pub nonzero: u64,
}

/// `GET path` with `Host: host` to `dest` from inside `ns`, reading the whole body however
/// large (unlike [`http_get`], which keeps at most 1 MiB); the status must be 200.
pub fn http_download(
    ns: &str,
    dest: SocketAddrV4,
    host: &str,
    path: &str,
    timeout: Duration,
) -> Result<std::result::Result<Download, String>> {
    check_route(ns, *dest.ip())?;
    let req = get_request(host, path);
    cmd::run_in_netns(ns, move || {
        let mut s = send(dest, &req, timeout)?;
        let mut buf = vec![0u8; 256 * 1024];
        let (mut head, mut got) = (
            Vec::new(),
            Download {
                bytes: 0,
                nonzero: 0,
            },
        );
        let mut in_body = false;
        loop {
            let n = match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => return Err(format!("read after {} body bytes: {e}", got.bytes)),
            };
            let mut chunk = &buf[..n];
            if !in_body {
                head.extend_from_slice(chunk);
                let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
                    if head.len() > 64 * 1024 {
                        return Err("response head over 64 KiB".into());
                    }
                    continue;
                };
                let status = String::from_utf8_lossy(&head[..end])
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string();
                if status.split_whitespace().nth(1) != Some("200") {
                    return Err(format!("status: {status}"));
                }
                in_body = true;
                let body_start = end + 4 - (head.len() - n);
                chunk = &chunk[body_start..];
            }
            got.bytes += chunk.len() as u64;
            got.nonzero += chunk.iter().filter(|b| **b != 0).count() as u64;
        }
        if !in_body {
            return Err("closed before the response head ended".into());
        }
        Ok(got)
    })
}

/// HTTPS `GET /` to `dest` with TLS server name `sni`, trusting only `ca_pem`, from inside `ns`.
pub fn https_get(
    ns: &str,
    dest: SocketAddrV4,
    sni: &str,
    ca_pem: &str,
    timeout: Duration,
) -> Result<Reply> {
    https_get_with(ns, dest, sni, ca_pem, "", timeout)
}

/// [`https_get`] with extra request header lines (`"Name: value\r\n"` each).
pub fn https_get_with(
    ns: &str,
    dest: SocketAddrV4,
    sni: &str,
    ca_pem: &str,
    extra_headers: &str,
    timeout: Duration,
) -> Result<Reply> {
    check_route(ns, *dest.ip())?;
    let (sni, ca_pem, extra) = (
        sni.to_string(),
        ca_pem.to_string(),
        extra_headers.to_string(),
    );
    cmd::run_in_netns(ns, move || {
        let mut roots = rustls::RootCertStore::empty();
        for cert in pem_certs(ca_pem.as_bytes()) {
            roots.add(cert).map_err(|e| e.to_string())?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name =
            rustls::pki_types::ServerName::try_from(sni.clone()).map_err(|e| e.to_string())?;
        let conn =
            rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
        let sock = connect(dest, timeout)?;
        let mut tls = rustls::StreamOwned::new(conn, sock);
        let req = format!("GET / HTTP/1.1\r\nHost: {sni}\r\n{extra}Connection: close\r\n\r\n");
        tls.write_all(req.as_bytes())
            .map_err(|e| format!("tls: {e}"))?;
        parse_reply(&read_all(&mut tls)?)
    })
}

fn pem_certs(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .filter_map(|c| c.ok())
        .collect()
}

/// A DNS answer: its response code and the A records in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsAnswer {
    /// The response code.
    pub code: ResponseCode,
    /// IPv4 addresses answered.
    pub ips: Vec<Ipv4Addr>,
}

/// Asks `server` for the A record of `name` over UDP from inside `ns`. `Err(..)` inside = no
/// answer within `timeout`.
pub fn dns_query(
    ns: &str,
    server: SocketAddrV4,
    name: &str,
    timeout: Duration,
) -> Result<std::result::Result<DnsAnswer, String>> {
    let mut msg = Message::query();
    msg.metadata.recursion_desired = true;
    match Name::from_ascii(format!("{name}.")) {
        Ok(n) => msg.add_query(Query::query(n, RecordType::A)),
        Err(e) => return Ok(Err(e.to_string())),
    };
    dns_exchange(ns, server, msg, timeout)
}

/// Sends the DNS message `msg` (any question, records or options a test puts in it) to
/// `server` from inside `ns` and reads the answer with its id.
pub fn dns_exchange(
    ns: &str,
    server: SocketAddrV4,
    msg: Message,
    timeout: Duration,
) -> Result<std::result::Result<DnsAnswer, String>> {
    check_route(ns, *server.ip())?;
    cmd::run_in_netns(ns, move || {
        let id = msg.metadata.id;
        let sock = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
        sock.set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        sock.send_to(
            &msg.to_vec().map_err(|e| e.to_string())?,
            SocketAddr::V4(server),
        )
        .map_err(|e| format!("send: {e}"))?;
        let mut buf = [0u8; 4096];
        for _ in 0..4 {
            let n = sock.recv(&mut buf).map_err(|e| format!("no answer: {e}"))?;
            let Ok(reply) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            if reply.metadata.id != id {
                continue;
            }
            let ips = reply
                .answers
                .iter()
                .filter_map(|r| match &r.data {
                    RData::A(a) => Some(a.0),
                    _ => None,
                })
                .collect();
            return Ok(DnsAnswer {
                code: reply.metadata.response_code,
                ips,
            });
        }
        Err("no matching answer".to_string())
    })
}
