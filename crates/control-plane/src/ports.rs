//! Sandbox ports: who may reach them, and the way in.
//!
//! Two surfaces reach a port of a running sandbox with the same rules: the path proxy of the
//! management API (`/v1/sandboxes/{id}/ports/{port}/{path}`) and the proxy listener, which routes
//! by host name (`{port}-{id}.{domain}`, see [`PortsProxy`]); the E2B listener hands such hosts
//! for ports other than envd's to the same code.
//!
//! A request passes when the sandbox is `public`, or it carries one of:
//! * the admin bearer token (path proxy only: a browser on the proxy listener never holds it);
//! * the sandbox's port token ([`ControlPlane::port_token`]; header [`PORT_TOKEN_HEADER`] or
//!   query [`PORT_TOKEN_QUERY`]): an HMAC of the sandbox id under the server's key, stable for
//!   the sandbox's life;
//! * the port cookie ([`PORT_COOKIE`]) that a one-time link set: `{expiry}.{mac}`, the MAC
//!   binding the sandbox, the port and the expiry, so it opens that one host until it expires
//!   and survives restarts (stateless).
//!
//! One-time links ([`ControlPlane::create_port_link`]) are random tickets kept (hashed) in the
//! server's memory for [`LINK_TTL`]; the first visit removes the ticket, so a second one is
//! refused. A restart forgets outstanding links (make a new one).

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cove_api_types::{PortLink, PortLinkRequest, SandboxPorts};
use cove_domain::InvalidInput;
use cove_node_api::NodeError;
use sha2::Digest;
use tracing::info;

use crate::{ControlPlane, ServiceError};

/// Header carrying a sandbox's port token (`GET /v1/sandboxes/{id}/ports`).
pub const PORT_TOKEN_HEADER: &str = "x-cove-port-token";
/// Query parameter carrying a sandbox's port token (removed before the request is passed on).
pub const PORT_TOKEN_QUERY: &str = "cove_port_token";
/// Query parameter carrying a one-time link's ticket (removed before the request is passed on).
pub const PORT_LINK_QUERY: &str = "cove_link";
/// Name of the cookie a one-time link sets (removed before the request is passed on).
pub const PORT_COOKIE: &str = "cove_port";
/// How long a one-time link can be used.
pub const LINK_TTL: Duration = Duration::from_secs(300);
/// How long the cookie a link set opens its port.
pub const COOKIE_TTL: Duration = Duration::from_secs(24 * 3600);
/// Most one-time links outstanding at once (expired ones are dropped first).
const MAX_LINKS: usize = 10_000;

/// Request headers not passed to a sandbox's port (nor back from it): hop-by-hop ones (RFC 9110
/// §7.6.1; an upgrade is re-added by the proxy itself), and the port token.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    PORT_TOKEN_HEADER,
];

/// Whether a header is passed to or from a sandbox's port.
pub fn passes(name: &str) -> bool {
    !HOP_BY_HOP.contains(&name.to_ascii_lowercase().as_str())
}

/// Where the proxy listener is reached, for the host names and links the API hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortsProxy {
    /// The domain of `{port}-{id}.{domain}` host names (`localhost` by default: browsers
    /// resolve `*.localhost` to loopback).
    pub domain: String,
    /// The port clients reach the proxy listener on (its bound port).
    pub port: u16,
}

impl PortsProxy {
    /// `{port}-{id}.{domain}:{proxy port}` for a sandbox port.
    pub fn host(&self, sandbox_id: &str, port: u16) -> String {
        format!("{port}-{sandbox_id}.{}:{}", self.domain, self.port)
    }

    /// The sandbox and port a `Host` header names: `{port}-{id}.{domain}[:any port]`, the
    /// domain compared without case. `None` for any other host.
    pub fn target(&self, host: &str) -> Option<(String, u16)> {
        host_target(host, Some(&self.domain))
    }
}

/// `{port}-{id}.{domain}[:listener port]` → (id, port); any domain when `domain` is `None`.
/// The id is what follows the first `-` of the first label (lowercase letters, digits, `-`).
pub fn host_target(host: &str, domain: Option<&str>) -> Option<(String, u16)> {
    let host = match host.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    let (label, rest) = host.split_once('.')?;
    if let Some(d) = domain {
        if !rest.eq_ignore_ascii_case(d) {
            return None;
        }
    }
    let (port, id) = label.split_once('-')?;
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id = id.to_ascii_lowercase();
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return None;
    }
    let port: u16 = port.parse().ok()?;
    (port > 0).then_some((id, port))
}

/// A one-time link waiting for its visit.
#[derive(Debug, Clone)]
pub(crate) struct LinkTicket {
    sandbox_id: String,
    port: u16,
    expires_at: DateTime<Utc>,
}

/// The one-time links of this server, by the SHA-256 of their ticket.
#[derive(Debug, Default)]
pub(crate) struct PortLinks(parking_lot::Mutex<HashMap<String, LinkTicket>>);

fn ticket_hash(ticket: &str) -> String {
    sha2::Sha256::digest(ticket.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How a request to a port was let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortAccess {
    /// The sandbox is public.
    Public,
    /// The admin bearer token (its `Authorization` header is not passed on).
    Admin,
    /// The port token.
    Token,
    /// The cookie of a one-time link.
    Cookie,
}

/// What a request to a port carries to be let in (each `None` when absent).
#[derive(Debug, Clone, Copy, Default)]
pub struct PortCredentials<'a> {
    /// A bearer token, when the surface accepts the admin token.
    pub bearer: Option<&'a str>,
    /// The port token (header or query).
    pub token: Option<&'a str>,
    /// The value of the [`PORT_COOKIE`] cookie.
    pub cookie: Option<&'a str>,
}

fn equal(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn check_port(port: u16) -> Result<(), ServiceError> {
    if port == 0 {
        return Err(InvalidInput::new("port", "must be 1-65535").into());
    }
    Ok(())
}

impl ControlPlane {
    /// Where the proxy listener is reached, when the server has one.
    pub fn ports_proxy(&self) -> Option<&PortsProxy> {
        self.inner.cfg.ports_proxy.as_ref()
    }

    fn ports_key(&self) -> Result<&crate::network::SecretsKey, ServiceError> {
        self.inner.cfg.secrets_key.as_ref().ok_or_else(|| {
            ServiceError::NotImplemented("this server has no key for port tokens".into())
        })
    }

    /// The port token of sandbox `id`: with it (header `x-cove-port-token` or query
    /// `cove_port_token`), its ports are reachable without the admin token. `not_implemented`
    /// without a server key.
    pub async fn port_token(&self, id: &str) -> Result<String, ServiceError> {
        let s = self.get_sandbox(id).await?;
        Ok(self.ports_key()?.port_token(&s.id))
    }

    /// The port token of sandbox `id` without looking it up (`None` without a server key).
    pub fn port_token_for(&self, id: &str) -> Option<String> {
        self.inner
            .cfg
            .secrets_key
            .as_ref()
            .map(|key| key.port_token(id))
    }

    /// Whether `token` is the port token of sandbox `id` (compared in constant time).
    pub fn is_port_token(&self, id: &str, token: &str) -> bool {
        self.inner
            .cfg
            .secrets_key
            .as_ref()
            .is_some_and(|key| equal(&key.port_token(id), token))
    }

    /// `GET /v1/sandboxes/{id}/ports`: its port token, whether it is public, its host on the
    /// proxy listener, and the ports its release `EXPOSE`s.
    pub async fn sandbox_ports(&self, id: &str) -> Result<SandboxPorts, ServiceError> {
        let s = self.get_sandbox(id).await?;
        let exposed = self
            .store()
            .list_releases(&s.template)
            .await?
            .into_iter()
            .find(|r| r.number == s.release)
            .and_then(|r| r.defaults)
            .map(|d| d.ports)
            .unwrap_or_default();
        Ok(SandboxPorts {
            exposed,
            token: self.ports_key()?.port_token(&s.id),
            path: format!("/v1/sandboxes/{}/ports/", s.id),
            public: s.public,
            host: self
                .inner
                .cfg
                .ports_proxy
                .as_ref()
                .map(|p| format!("{{port}}-{}.{}:{}", s.id, p.domain, p.port)),
            sandbox_id: s.id,
        })
    }

    /// `PUT /v1/sandboxes/{id}/ports {public}`: whether its ports need a credential; the next
    /// request follows it.
    pub async fn set_ports_public(
        &self,
        id: &str,
        public: bool,
    ) -> Result<SandboxPorts, ServiceError> {
        let s = self.get_sandbox(id).await?;
        self.touch(&s.id);
        if !self.store().set_sandbox_public(&s.id, public).await? {
            return Err(ServiceError::SandboxNotFound(s.id));
        }
        info!(sandbox_id = %s.id, public, "sandbox ports access set");
        self.sandbox_ports(&s.id).await
    }

    /// `POST /v1/sandboxes/{id}/ports:link`: a one-time link to `port` on the proxy listener.
    /// `not_implemented` without a proxy listener.
    pub async fn create_port_link(
        &self,
        id: &str,
        req: &PortLinkRequest,
    ) -> Result<PortLink, ServiceError> {
        check_port(req.port)?;
        let path = req.path.clone().unwrap_or_else(|| "/".into());
        if !path.starts_with('/')
            || path.len() > 2048
            || path
                .bytes()
                .any(|b| b.is_ascii_control() || b == b' ' || b == b'#')
        {
            return Err(InvalidInput::new(
                "path",
                "must start with / and hold no spaces, controls or #, at most 2048 bytes",
            )
            .into());
        }
        let proxy = self.inner.cfg.ports_proxy.clone().ok_or_else(|| {
            ServiceError::NotImplemented(
                "this server has no proxy listener (cove server --proxy-listen)".into(),
            )
        })?;
        let s = self.get_sandbox(id).await?;
        self.touch(&s.id);
        let ticket = crate::auth::new_token();
        let now = Utc::now();
        let expires_at = now + chrono::Duration::from_std(LINK_TTL).unwrap_or_default();
        {
            let mut links = self.inner.port_links.0.lock();
            links.retain(|_, t| t.expires_at > now);
            if links.len() >= MAX_LINKS {
                return Err(ServiceError::Unavailable(
                    "too many one-time port links outstanding; try again later".into(),
                ));
            }
            links.insert(
                ticket_hash(&ticket),
                LinkTicket {
                    sandbox_id: s.id.clone(),
                    port: req.port,
                    expires_at,
                },
            );
        }
        let sep = if path.contains('?') { '&' } else { '?' };
        Ok(PortLink {
            url: format!(
                "http://{}{path}{sep}{PORT_LINK_QUERY}={ticket}",
                proxy.host(&s.id, req.port)
            ),
            sandbox_id: s.id,
            port: req.port,
            expires_at,
        })
    }

    /// Uses up the one-time link `ticket` for `port` of sandbox `id`: the value of the cookie to
    /// set ([`PORT_COOKIE`], for [`COOKIE_TTL`]). `unauthorized` for a ticket that is unknown,
    /// used already, expired, or for another sandbox or port.
    pub fn redeem_port_link(
        &self,
        id: &str,
        port: u16,
        ticket: &str,
    ) -> Result<String, ServiceError> {
        let entry = self.inner.port_links.0.lock().remove(&ticket_hash(ticket));
        let now = Utc::now();
        match entry {
            Some(t) if t.sandbox_id == id && t.port == port && t.expires_at > now => {
                let expiry = now.timestamp() + COOKIE_TTL.as_secs() as i64;
                let mac = self
                    .ports_key()?
                    .port_mac(cookie_message(id, port, expiry).as_bytes());
                info!(sandbox_id = %id, port, "one-time port link used");
                Ok(format!("{expiry}.{mac}"))
            }
            _ => Err(ServiceError::Unauthorized(
                "this link is not valid (links work once, for 5 minutes)".into(),
            )),
        }
    }

    /// Whether `cookie` is a port cookie for `port` of sandbox `id` that has not expired.
    fn is_port_cookie(&self, id: &str, port: u16, cookie: &str) -> bool {
        let Some((expiry, mac)) = cookie.split_once('.') else {
            return false;
        };
        let Ok(expiry) = expiry.parse::<i64>() else {
            return false;
        };
        if expiry <= Utc::now().timestamp() {
            return false;
        }
        self.inner.cfg.secrets_key.as_ref().is_some_and(|key| {
            equal(
                &key.port_mac(cookie_message(id, port, expiry).as_bytes()),
                mac,
            )
        })
    }

    /// Decides whether a request with `creds` may reach `port` of sandbox `id`. Errors:
    /// `sandbox_not_found`, `unauthorized` (no or a wrong credential on a private sandbox).
    pub async fn authorize_port(
        &self,
        id: &str,
        port: u16,
        creds: PortCredentials<'_>,
    ) -> Result<PortAccess, ServiceError> {
        check_port(port)?;
        let s = self.get_sandbox(id).await?;
        if let Some(t) = creds.bearer {
            if let Ok(caller) = self.authenticate(t).await {
                // A management credential reaches its own org's sandboxes only; another
                // org's sandbox is not there for it.
                if caller.org != s.org {
                    return Err(ServiceError::SandboxNotFound(id.to_string()));
                }
                return Ok(PortAccess::Admin);
            }
        }
        if s.public {
            return Ok(PortAccess::Public);
        }
        if let Some(token) = creds.token {
            if self.is_port_token(&s.id, token) {
                return Ok(PortAccess::Token);
            }
            return Err(ServiceError::Unauthorized("invalid port token".into()));
        }
        if creds
            .cookie
            .is_some_and(|c| self.is_port_cookie(&s.id, port, c))
        {
            return Ok(PortAccess::Cookie);
        }
        Err(ServiceError::Unauthorized(
            "a private sandbox port needs its port token, the cookie of a one-time link, or the \
             admin token"
                .into(),
        ))
    }

    /// Passes an HTTP request to `port` of a running sandbox: `bad_gateway` when nothing
    /// answers there, `sandbox_not_running` unless it runs. An upgrade request (WebSocket) that
    /// the sandbox answers with `101` carries the upgraded connection's bytes in `body` (in) and
    /// the returned stream (out).
    pub async fn forward_port(
        &self,
        id: &str,
        request: cove_node_api::PortRequest,
        body: cove_node_api::ByteStream,
    ) -> Result<(cove_node_api::PortResponse, cove_node_api::ByteStream), ServiceError> {
        check_port(request.port)?;
        let s = self.running_sandbox(id).await?;
        if !self.node().capabilities().network {
            return Err(ServiceError::NotImplemented(
                "sandboxes on this server have no network, so no ports".into(),
            ));
        }
        self.node()
            .forward_http(&s.id, request, body)
            .await
            .map_err(|e| match e {
                NodeError::SandboxNotFound(_) => {
                    ServiceError::BadGateway(format!("sandbox {} has no network on its node", s.id))
                }
                other => crate::error::from_node(other, &s.id),
            })
    }
}

fn cookie_message(id: &str, port: u16, expiry: i64) -> String {
    format!("cove port cookie v1\0{id}\0{port}\0{expiry}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_name_port_and_sandbox() {
        let proxy = PortsProxy {
            domain: "localhost".into(),
            port: 7704,
        };
        assert_eq!(
            proxy.target("8000-sb-0123456789abcdef.localhost:7704"),
            Some(("sb-0123456789abcdef".to_string(), 8000))
        );
        assert_eq!(
            proxy.target("8000-SB-ABC.LocalHost"),
            Some(("sb-abc".to_string(), 8000))
        );
        assert_eq!(proxy.target("8000-sb-abc.example.org"), None);
        assert_eq!(proxy.target("localhost:7704"), None);
        assert_eq!(proxy.target("0-sb-abc.localhost"), None);
        assert_eq!(proxy.target("70000-sb-abc.localhost"), None);
        assert_eq!(proxy.target("x-sb-abc.localhost"), None);
        assert_eq!(proxy.target("8000-sb_abc.localhost"), None);
        assert_eq!(
            proxy.host("sb-abc", 3000),
            "3000-sb-abc.localhost:7704".to_string()
        );
        assert_eq!(
            host_target("49983-abc123.e2b.test:7703", None),
            Some(("abc123".to_string(), 49983))
        );
    }

    #[test]
    fn hop_by_hop_headers_and_the_token_do_not_pass() {
        assert!(!passes("Connection"));
        assert!(!passes("upgrade"));
        assert!(!passes(PORT_TOKEN_HEADER));
        assert!(passes("authorization"));
        assert!(passes("sec-websocket-key"));
    }
}
