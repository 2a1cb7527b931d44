//! Reading the name a connection carries: TLS SNI (parsed by rustls) or the HTTP `Host` header
//! (parsed by httparse), from the first bytes the client sends.

use crate::policy::normalize_name;

/// The most bytes read while looking for a name.
pub const MAX_SNIFF: usize = 16 * 1024;

/// What the first bytes say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniffed {
    /// More bytes are needed.
    Incomplete,
    /// The connection carries this (normalised) name.
    Name(String),
    /// The connection carries no name (not TLS/HTTP, no SNI, no Host).
    NoName,
    /// A TLS record that is not a well-formed client hello: no name, and worth a (rate-limited)
    /// warning.
    Malformed,
}

/// Looks for a name in `buf` (everything the client sent so far).
pub fn sniff(buf: &[u8]) -> Sniffed {
    match buf.first() {
        None => Sniffed::Incomplete,
        Some(0x16) => sniff_tls(buf),
        Some(_) => sniff_http(buf),
    }
}

fn sniff_tls(buf: &[u8]) -> Sniffed {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut rest = buf;
    while !rest.is_empty() {
        match acceptor.read_tls(&mut rest) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => return Sniffed::Malformed,
        }
    }
    match acceptor.accept() {
        Ok(None) => Sniffed::Incomplete,
        Ok(Some(accepted)) => match accepted.client_hello().server_name() {
            Some(name) => Sniffed::Name(normalize_name(name)),
            None => Sniffed::NoName,
        },
        Err(_) => Sniffed::Malformed,
    }
}

fn sniff_http(buf: &[u8]) -> Sniffed {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => Sniffed::Incomplete,
        Ok(httparse::Status::Complete(_)) => {
            let host = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("host"))
                .and_then(|h| std::str::from_utf8(h.value).ok());
            match host.map(strip_port) {
                Some(h) if !h.is_empty() => Sniffed::Name(normalize_name(h)),
                _ => Sniffed::NoName,
            }
        }
        Err(_) => Sniffed::NoName,
    }
}

fn strip_port(host: &str) -> &str {
    let host = host.trim();
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_host_with_and_without_port() {
        assert_eq!(
            sniff(b"GET / HTTP/1.1\r\nHost: Example.COM:8080\r\n\r\n"),
            Sniffed::Name("example.com".into())
        );
        assert_eq!(
            sniff(b"GET / HTTP/1.1\r\nHost: a.test\r\n"),
            Sniffed::Incomplete
        );
        assert_eq!(sniff(b"GET / HTTP/1.1\r\n\r\n"), Sniffed::NoName);
        assert_eq!(sniff(b"SSH-2.0-OpenSSH\r\n"), Sniffed::NoName);
    }

    #[test]
    fn tls_sni_from_a_real_client_hello() {
        let roots = rustls::RootCertStore::empty();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("Api.Example.test").expect("name");
        let mut conn =
            rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("conn");
        let mut hello = Vec::new();
        conn.write_tls(&mut hello).expect("hello");
        assert_eq!(sniff(&hello), Sniffed::Name("api.example.test".into()));
        assert_eq!(sniff(&hello[..hello.len() / 2]), Sniffed::Incomplete);
        // A handshake record whose body is not a client hello.
        let mut bad = hello[..5].to_vec();
        let body = [0x01, 0x00, 0x00, 0x04, 0xff, 0xff, 0xff, 0xff];
        bad[3..5].copy_from_slice(&(body.len() as u16).to_be_bytes());
        bad.extend_from_slice(&body);
        assert_eq!(sniff(&bad), Sniffed::Malformed);
    }
}
