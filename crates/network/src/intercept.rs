//! TLS interception for secret substitution: toward a host a sandbox secret names (on an address
//! the gateway's own lookup gives that host, `proxy.rs`), the gateway terminates the sandbox's
//! TLS with a certificate from the sandbox's own CA, opens verified TLS upstream, and forwards
//! HTTP/1.1 requests, replacing the secret's placeholder with its value in request headers.
//! Responses come back with the value replaced by the placeholder again (headers, trailers and
//! the streamed body, `scrub.rs`), so an upstream that echoes its request hands the sandbox
//! nothing it did not have. Requests ask for `accept-encoding: identity`; a response that is
//! encoded anyway (compressed: it could hide the value) is refused with a 502. Every other
//! connection stays end-to-end and carries the placeholder.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::{NetworkError, Result};
use crate::policy::{normalize_name, EgressRule};
use crate::scrub::{ScrubbedBody, Scrubber};

/// A secret of a sandbox: the real value and the hosts it may be sent to.
#[derive(Debug, Clone)]
pub struct Secret {
    /// The real value (never enters the sandbox). No CR, LF or NUL.
    pub value: String,
    /// Exact domains or `*.domain` entries; requests toward them get the value.
    pub hosts: Vec<EgressRule>,
}

/// What the sandbox needs for interception: its CA and the placeholders of its secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct Interception {
    /// PEM of the sandbox's CA; install it in the sandbox's trust store.
    pub ca_pem: String,
    /// Secret name → the placeholder to put in the sandbox's environment instead of the value.
    pub placeholders: BTreeMap<String, String>,
    /// PEM of the CA's private key: keep it (privately, on the node) to re-arm interception
    /// after a node restart with [`Reuse`], so the sandbox's trust store stays valid.
    pub ca_key_pem: String,
}

impl std::fmt::Debug for Interception {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interception")
            .field("ca_pem", &self.ca_pem)
            .field("placeholders", &self.placeholders)
            .finish_non_exhaustive()
    }
}

/// What a re-armed interception keeps from an earlier one (after a node restart, the sandbox
/// still trusts the old CA and its commands hold the old placeholders).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Reuse {
    /// The CA key of the earlier [`Interception::ca_key_pem`]: the CA is made again with the
    /// same key and name, so certificates it signs chain to the CA the sandbox trusts.
    pub ca_key_pem: Option<String>,
    /// Secret name → placeholder of the earlier interception (names missing here get new ones).
    pub placeholders: BTreeMap<String, String>,
}

impl std::fmt::Debug for Reuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reuse")
            .field("ca_key", &self.ca_key_pem.is_some())
            .field("placeholders", &self.placeholders)
            .finish()
    }
}

struct Substitution {
    placeholder: String,
    value: String,
    hosts: Vec<EgressRule>,
}

/// A sandbox's CA, leaf cache and secrets.
pub(crate) struct SandboxTls {
    ca_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    ca_der: rustls::pki_types::CertificateDer<'static>,
    subs: Vec<Substitution>,
    configs: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

fn tls_err(what: &str, e: impl std::fmt::Display) -> NetworkError {
    NetworkError::io(
        format!("interception: {what}"),
        std::io::Error::other(e.to_string()),
    )
}

fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| NetworkError::io("reading /dev/urandom", e))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl SandboxTls {
    /// A fresh CA for `sandbox_id` and a placeholder per secret. Errors:
    /// [`NetworkError::Config`] for a bad name, value or host list.
    pub(crate) fn new(
        sandbox_id: &str,
        secrets: BTreeMap<String, Secret>,
        reuse: &Reuse,
    ) -> Result<(Self, Interception)> {
        let mut subs = Vec::new();
        let mut placeholders = BTreeMap::new();
        for (name, s) in secrets {
            let ok_name = !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !name.as_bytes()[0].is_ascii_digit();
            if !ok_name {
                return Err(NetworkError::Config(format!(
                    "secret name {name:?} must be an environment variable name"
                )));
            }
            if s.value.is_empty() || s.value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(NetworkError::Config(format!(
                    "secret {name}: value must be non-empty without CR, LF or NUL"
                )));
            }
            if s.hosts.is_empty() || s.hosts.iter().any(|h| matches!(h, EgressRule::Net(_))) {
                return Err(NetworkError::Config(format!(
                    "secret {name}: hosts must be domains or *.domain"
                )));
            }
            let placeholder = match reuse.placeholders.get(&name) {
                Some(p) => p.clone(),
                None => format!(
                    "cove-placeholder-{}-{}",
                    name.to_ascii_lowercase(),
                    random_hex(12)?
                ),
            };
            placeholders.insert(name, placeholder.clone());
            subs.push(Substitution {
                placeholder,
                value: s.value,
                hosts: s.hosts,
            });
        }
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| tls_err("CA", e))?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("cove sandbox {sandbox_id} gateway CA"),
        );
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let key = match &reuse.ca_key_pem {
            Some(pem) => rcgen::KeyPair::from_pem(pem).map_err(|e| tls_err("CA key", e))?,
            None => rcgen::KeyPair::generate().map_err(|e| tls_err("CA key", e))?,
        };
        let ca_key_pem = key.serialize_pem();
        let cert = params.self_signed(&key).map_err(|e| tls_err("CA", e))?;
        let ca_pem = cert.pem();
        let ca_der = cert.der().clone();
        let issuer = rcgen::Issuer::new(params, key);
        let me = SandboxTls {
            ca_pem: ca_pem.clone(),
            issuer,
            ca_der,
            subs,
            configs: Mutex::new(HashMap::new()),
        };
        Ok((
            me,
            Interception {
                ca_pem,
                placeholders,
                ca_key_pem,
            },
        ))
    }

    /// True when some secret may be sent to `name`: connections to it are intercepted.
    pub(crate) fn wants(&self, name: &str) -> bool {
        self.subs
            .iter()
            .any(|s| s.hosts.iter().any(|h| h.matches_name(name)))
    }

    /// The sandbox CA's PEM.
    pub(crate) fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    fn server_config(&self, name: &str) -> Result<Arc<rustls::ServerConfig>> {
        if let Some(c) = self.configs.lock().get(name) {
            return Ok(c.clone());
        }
        let params = rcgen::CertificateParams::new(vec![name.to_string()])
            .map_err(|e| tls_err("leaf", e))?;
        let key = rcgen::KeyPair::generate().map_err(|e| tls_err("leaf key", e))?;
        let leaf = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| tls_err("leaf", e))?;
        let der_key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| tls_err("leaf key", e))?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_err("server config", e))?
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone(), self.ca_der.clone()], der_key)
            .map_err(|e| tls_err("server config", e))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        self.configs.lock().insert(name.to_string(), config.clone());
        Ok(config)
    }

    /// The scrubber of responses from `name`: each value sent there back to its placeholder.
    fn scrubber(&self, name: &str) -> Scrubber {
        Scrubber::new(
            self.subs
                .iter()
                .filter(|s| s.hosts.iter().any(|h| h.matches_name(name)))
                .map(|s| (s.value.clone(), s.placeholder.clone())),
        )
    }

    fn substitute(&self, name: &str, headers: &mut http::HeaderMap) {
        for s in self
            .subs
            .iter()
            .filter(|s| s.hosts.iter().any(|h| h.matches_name(name)))
        {
            for value in headers.values_mut() {
                let Ok(text) = value.to_str() else { continue };
                if text.contains(&s.placeholder) {
                    if let Ok(v) =
                        http::HeaderValue::from_str(&text.replace(&s.placeholder, &s.value))
                    {
                        *value = v;
                    }
                }
            }
        }
    }
}

/// The client config for upstream TLS: `roots_pem` when given, else the host's trust store;
/// and `extra_pem` (the node's sandbox CA) besides.
pub(crate) fn upstream_client_config(
    roots_pem: Option<&str>,
    extra_pem: Option<&str>,
) -> Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let mut add_pem = |pem: &str| -> Result<()> {
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots
                .add(cert.map_err(|e| tls_err("roots", e))?)
                .map_err(|e| tls_err("roots", e))?;
        }
        Ok(())
    };
    match roots_pem {
        Some(pem) => add_pem(pem)?,
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    if let Some(pem) = extra_pem {
        let mut roots_extra = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots_extra
                .add(cert.map_err(|e| tls_err("sandbox CA", e))?)
                .map_err(|e| tls_err("sandbox CA", e))?;
        }
        roots.roots.extend(roots_extra.roots);
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err("client config", e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A stream whose first bytes come from a buffer (the ClientHello already read).
pub(crate) struct Prefixed<S> {
    head: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    pub(crate) fn new(head: Vec<u8>, inner: S) -> Self {
        Prefixed {
            head,
            pos: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.pos < self.head.len() {
            let n = (self.head.len() - self.pos).min(buf.remaining());
            let start = self.pos;
            buf.put_slice(&self.head[start..start + n]);
            self.pos += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

type Body = Either<ScrubbedBody<Incoming>, Full<Bytes>>;

fn misdirected(name: &str) -> Response<Body> {
    let body = format!(
        r#"{{"code":"network_denied","message":"request Host does not match the TLS server name {name}"}}"#
    );
    let mut r = Response::new(Either::Right(Full::new(Bytes::from(body))));
    *r.status_mut() = StatusCode::MISDIRECTED_REQUEST;
    r
}

/// The answer to a response from a secret's host whose body is encoded (compressed), which the
/// gateway cannot check for the secret's value.
fn encoded_refused() -> Response<Body> {
    let body = r#"{"code":"network_denied","message":"a secret's host answered with an encoded (compressed) body, which the gateway cannot check for the secret's value; ask with accept-encoding: identity"}"#;
    let mut r = Response::new(Either::Right(Full::new(Bytes::from(body))));
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
}

/// Whether a response's `content-encoding` is other than `identity`.
fn is_encoded(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .any(|v| {
            v.to_str().map_or(true, |v| {
                v.split(',')
                    .map(str::trim)
                    .any(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"))
            })
        })
}

/// A response from the secret's host with every value back to its placeholder: headers now,
/// the body as it streams (its length changes, so `content-length` goes and the body is sent
/// chunked, except where a response has no body).
fn scrubbed(resp: Response<Incoming>, scrubber: &Scrubber, head: bool) -> Response<Body> {
    if scrubber.is_empty() {
        return resp.map(|b| Either::Left(Scrubber::default().body(b)));
    }
    if is_encoded(resp.headers()) {
        return encoded_refused();
    }
    let (mut parts, body) = resp.into_parts();
    scrubber.headers(&mut parts.headers);
    let bodiless = head
        || parts.status.is_informational()
        || parts.status == StatusCode::NO_CONTENT
        || parts.status == StatusCode::NOT_MODIFIED;
    if !bodiless {
        parts.headers.remove(http::header::CONTENT_LENGTH);
    }
    Response::from_parts(parts, Either::Left(scrubber.body(body)))
}

/// Serves one intercepted connection: `sandbox` is the sandbox side (ClientHello included),
/// `upstream` a TCP stream to the original destination. Returns when either side closes.
pub(crate) async fn serve<S>(
    tls: Arc<SandboxTls>,
    client_config: Arc<rustls::ClientConfig>,
    name: String,
    sandbox: S,
    upstream: tokio::net::TcpStream,
) -> Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let server_name = rustls::pki_types::ServerName::try_from(name.clone())
        .map_err(|e| tls_err("server name", e))?;
    let up = tokio_rustls::TlsConnector::from(client_config)
        .connect(server_name, upstream)
        .await
        .map_err(|e| NetworkError::io(format!("interception: upstream TLS to {name}"), e))?;
    let sbx = tokio_rustls::TlsAcceptor::from(tls.server_config(&name)?)
        .accept(sandbox)
        .await
        .map_err(|e| NetworkError::io("interception: sandbox TLS", e))?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(up))
        .await
        .map_err(|e| tls_err("upstream http", e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let sender = Arc::new(tokio::sync::Mutex::new(sender));
    let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let (tls, sender, name) = (tls.clone(), sender.clone(), name.clone());
        async move {
            let host = req
                .headers()
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(|h| {
                    let h = h.trim();
                    normalize_name(
                        h.rsplit_once(':')
                            .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
                            .map_or(h, |(h, _)| h),
                    )
                });
            if host.is_some_and(|h| h != name) {
                return Ok::<_, hyper::Error>(misdirected(&name));
            }
            tls.substitute(&name, req.headers_mut());
            req.headers_mut().insert(
                http::header::ACCEPT_ENCODING,
                http::HeaderValue::from_static("identity"),
            );
            let head = req.method() == http::Method::HEAD;
            let resp = sender.lock().await.send_request(req).await?;
            Ok(scrubbed(resp, &tls.scrubber(&name), head))
        }
    });
    hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(sbx), svc)
        .await
        .map_err(|e| tls_err("sandbox http", e))
}
