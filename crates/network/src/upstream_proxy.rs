//! The upstream proxy of a corporate network: when configured, every connection the gateway
//! lets out goes through it as an HTTP `CONNECT` tunnel to the judged destination's address
//! (`CONNECT ip:port`, never the name a sandbox sent: the proxy must not resolve a
//! sandbox-chosen name to an address the gateway never judged).

use std::net::SocketAddrV4;

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{NetworkError, Result};
use crate::sockets::SocketMaker;

/// Most bytes of the proxy's answer head.
const MAX_HEAD: usize = 16 * 1024;

/// An HTTP CONNECT proxy: `http://[user:password@]host:port`.
#[derive(Clone, PartialEq, Eq)]
pub struct UpstreamProxy {
    host: String,
    port: u16,
    /// `Basic ...` from the URL's user and password.
    authorization: Option<String>,
}

impl std::fmt::Debug for UpstreamProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamProxy")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("authorization", &self.authorization.is_some())
            .finish()
    }
}

impl std::fmt::Display for UpstreamProxy {
    /// The URL without its credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}:{}", self.host, self.port)
    }
}

impl std::str::FromStr for UpstreamProxy {
    type Err = NetworkError;

    /// Parses `http://[user[:password]@]host[:port]` (port default 80; a trailing `/` is
    /// fine). Errors: [`NetworkError::Config`] for another scheme, a path, or a bad port.
    fn from_str(url: &str) -> Result<Self> {
        let bad = |why: &str| NetworkError::Config(format!("upstream proxy: {why}"));
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("the URL must start with http:// (an HTTP CONNECT proxy)"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') || rest.contains('?') || rest.contains('#') {
            return Err(bad("the URL takes no path"));
        }
        let (userinfo, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (h, p.parse::<u16>().map_err(|_| bad("bad port"))?),
            None => (hostport, 80),
        };
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        {
            return Err(bad("bad host (an IPv4 address or a DNS name)"));
        }
        let authorization = userinfo.map(|u| {
            let decoded = percent_decode(u);
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(decoded)
            )
        });
        Ok(UpstreamProxy {
            host: host.to_string(),
            port,
            authorization,
        })
    }
}

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

impl UpstreamProxy {
    /// Where the proxy listens (a name is resolved by the node's own resolver, each time).
    async fn address(&self) -> std::io::Result<SocketAddrV4> {
        if let Ok(ip) = self.host.parse() {
            return Ok(SocketAddrV4::new(ip, self.port));
        }
        tokio::net::lookup_host((self.host.as_str(), self.port))
            .await?
            .find_map(|a| match a {
                std::net::SocketAddr::V4(v4) => Some(v4),
                std::net::SocketAddr::V6(_) => None,
            })
            .ok_or_else(|| std::io::Error::other("the upstream proxy's name has no IPv4 address"))
    }

    /// A tunnel to `dst` through the proxy, made from `maker`'s namespace. Errors: the proxy
    /// cannot be reached, or answers other than 2xx (its status in the message).
    pub(crate) async fn connect(
        &self,
        maker: &SocketMaker,
        dst: SocketAddrV4,
    ) -> std::io::Result<TcpStream> {
        let mut s = maker.connect(self.address().await?).await?;
        let mut head = format!("CONNECT {dst} HTTP/1.1\r\nHost: {dst}\r\n");
        if let Some(auth) = &self.authorization {
            head.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).await?;
        // Byte by byte up to the blank line: what follows belongs to the tunnel.
        let mut buf = Vec::with_capacity(256);
        let mut byte = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            if buf.len() >= MAX_HEAD {
                return Err(std::io::Error::other(
                    "the upstream proxy's answer is too long",
                ));
            }
            if s.read(&mut byte).await? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the upstream proxy closed the connection",
                ));
            }
            buf.push(byte[0]);
        }
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(&buf) {
            Ok(httparse::Status::Complete(_)) => match resp.code {
                Some(code) if (200..300).contains(&code) => Ok(s),
                Some(code) => Err(std::io::Error::other(format!(
                    "the upstream proxy answered {code} to CONNECT {dst}"
                ))),
                None => Err(std::io::Error::other("the upstream proxy sent no status")),
            },
            _ => Err(std::io::Error::other(
                "the upstream proxy's answer is not HTTP",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls_and_refuses_others() {
        let p: UpstreamProxy = "http://proxy.corp:3128".parse().expect("url");
        assert_eq!(p.to_string(), "http://proxy.corp:3128");
        assert_eq!(p.authorization, None);
        let p: UpstreamProxy = "http://al%40ice:s3cret@10.1.2.3:8080/"
            .parse()
            .expect("url");
        assert_eq!(p.to_string(), "http://10.1.2.3:8080");
        assert_eq!(
            p.authorization.as_deref(),
            Some("Basic YWxAaWNlOnMzY3JldA==")
        );
        assert!(!format!("{p:?}").contains("s3cret"));
        let p: UpstreamProxy = "http://10.0.0.1".parse().expect("url");
        assert_eq!(p.port, 80);
        for bad in [
            "https://p:1",
            "socks5://p:1",
            "http://p:1/path",
            "http://p:notaport",
            "http://",
            "http://a b:1",
        ] {
            assert!(bad.parse::<UpstreamProxy>().is_err(), "{bad}");
        }
    }
}
