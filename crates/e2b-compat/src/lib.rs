//! E2B compatibility: code written against the official E2B SDKs (Python `e2b`, npm `e2b`) runs
//! against Cove with only environment variables changed:
//!
//! ```text
//! E2B_API_KEY=<Cove admin token>  E2B_API_URL=http://127.0.0.1:7703  E2B_SANDBOX_URL=http://127.0.0.1:7703
//! ```
//!
//! One listener ([`router`], `cove server --e2b-listen`, default `127.0.0.1:7703`) serves both
//! E2B's REST control API ([`rest`]) and the in-sandbox `envd` API ([`envd`]: the Connect
//! protocol with the JSON codec, and `/files`). A request goes to envd when it carries
//! `E2b-Sandbox-Id`/`E2b-Sandbox-Port`, when its host is `{port}-{id}.{domain}`, or when it is a
//! signed `/files` URL; everything else is the REST API ([`dispatch`]). Both sides call the same
//! [`ControlPlane`] service methods as Cove's own `/v1` API.
//!
//! E2B sandbox ids are Cove sandbox ids without their `sb-` prefix (16 lowercase letters and
//! digits, so `{port}-{id}.{domain}` host names work). A sandbox's E2B end of life and its
//! timeout action are Cove's expiry (`expires_at`, `on_expiry`: `delete`, or `suspend` for
//! `autoPause`), kept in the store: every replica sees it, a restart keeps it, and Cove's
//! expiry controller ends the sandbox. What else only E2B has (watcher buffers, the configs
//! processes were started with) lives in memory in [`E2b`].

use std::sync::Arc;

use axum::Router;
use base64::Engine;
use cove_control_plane::ControlPlane;

use sha2::{Digest, Sha256};

pub mod dispatch;
pub mod envd;
pub mod envelope;
pub mod error;
pub mod model;
pub mod rest;

/// Default address of the compatibility listener.
pub const DEFAULT_E2B_LISTEN: &str = "127.0.0.1:7703";

/// The envd port the SDK addresses (`E2b-Sandbox-Port`, `49983-{id}.{domain}`).
pub const ENVD_PORT: u16 = 49983;

/// The envd version reported to SDKs: it decides which features the SDK uses.
pub const ENVD_VERSION: &str = "0.6.13";

/// Page size used to read Cove's sandbox listing.
const LIST_PAGE: u32 = 500;

/// Default sandbox timeout in seconds (E2B's).
pub const DEFAULT_TIMEOUT_S: u64 = 300;

/// Settings of the compatibility layer.
#[derive(Debug, Clone)]
pub struct E2bConfig {
    /// The `--e2b-domain` given: `Host` routing accepts `{port}-{id}.{domain}` for it only
    /// (its port, if any, aside); `None` = any domain is routed.
    pub domain: Option<String>,
    /// Domain returned to SDKs for `get_host()` (`{port}-{id}.{domain}`, see
    /// [`sandbox_domain`]); `None` = no domain in answers (the SDK falls back to `E2B_DOMAIN`).
    pub answered_domain: Option<String>,
    /// Secret from which each sandbox's envd access token is derived (stable while it is).
    pub token_secret: Vec<u8>,
}

/// The domain answered to SDKs, from `--e2b-domain` and the listener's port: by default
/// `localhost:PORT` (browsers and curl resolve `*.localhost` to loopback, so
/// `get_host(8080)` = `8080-<id>.localhost:PORT` reaches this listener); `localhost` or a
/// `*.localhost` name without a port gets the listener's; any other name is answered as given
/// (with its port when it has one; without, it is reached on its scheme's port, e.g. through a
/// reverse proxy).
pub fn sandbox_domain(configured: Option<&str>, listen_port: u16) -> String {
    let Some(d) = configured.map(str::trim).filter(|d| !d.is_empty()) else {
        return format!("localhost:{listen_port}");
    };
    let d = d.trim_end_matches('.');
    let has_port = d
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let local =
        d.eq_ignore_ascii_case("localhost") || d.to_ascii_lowercase().ends_with(".localhost");
    if !has_port && local {
        format!("{d}:{listen_port}")
    } else {
        d.to_string()
    }
}

/// The compatibility layer's state; cheap to clone.
#[derive(Clone)]
pub struct E2b {
    pub(crate) cp: ControlPlane,
    pub(crate) cfg: Arc<E2bConfig>,
    pub(crate) watchers: envd::watchers::Watchers,
    pub(crate) configs: envd::process::Configs,
}

impl E2b {
    /// The layer over `cp`.
    pub fn new(cp: ControlPlane, cfg: E2bConfig) -> Self {
        E2b {
            cp,
            cfg: Arc::new(cfg),
            watchers: Default::default(),
            configs: Default::default(),
        }
    }

    /// The envd access token of a sandbox: `base64url(sha256(secret ‖ cove id))`, stable for
    /// its whole life (pause, resume and connect keep it).
    pub fn access_token(&self, cove_id: &str) -> String {
        let mut h = Sha256::new();
        h.update(&self.cfg.token_secret);
        h.update(b"\0e2b-envd\0");
        h.update(cove_id.as_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(h.finalize())
    }

    /// Every sandbox in `state`, through the listing service (all pages).
    pub(crate) async fn sandboxes_in(
        &self,
        state: Option<cove_api_types::SandboxState>,
    ) -> Result<Vec<cove_api_types::Sandbox>, cove_control_plane::ServiceError> {
        let mut all = Vec::new();
        let mut cursor = None;
        loop {
            let page = self
                .cp
                .list_sandboxes(state, None, Vec::new(), Some(LIST_PAGE), cursor)
                .await?;
            all.extend(page.sandboxes);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(all),
            }
        }
    }

    pub(crate) fn forget(&self, cove_id: &str) {
        self.configs.forget_sandbox(cove_id);
    }

    /// The sandbox lives at least `secs` more seconds (its expiry moves later, never
    /// earlier), and its expiry does what its create asked (`autoPause`: see
    /// [`E2b::on_expiry`]).
    pub(crate) async fn live_for(
        &self,
        s: &cove_api_types::Sandbox,
        secs: u64,
    ) -> Result<(), cove_control_plane::ServiceError> {
        let on_expiry = self.on_expiry(&rest::lifecycle::Lifecycle::of(s));
        self.cp.extend_expiry(&s.id, secs, on_expiry).await
    }

    /// What Cove's expiry does at the end of a sandbox's E2B timeout: delete (`onTimeout:
    /// kill`); for a pause, what a full pause does on this runtime (a memory-keeping suspend,
    /// or the freezer where suspends keep files only), or a suspend of files when the create
    /// said `autoPauseMemory: false`.
    pub(crate) fn on_expiry(
        &self,
        lifecycle: &rest::lifecycle::Lifecycle,
    ) -> cove_api_types::OnExpiry {
        let freeze = self.pause_kind(true) == Some(rest::pause::PauseKind::Freeze);
        lifecycle.on_expiry(freeze)
    }
}

/// The Cove id of an E2B sandbox id (`None` for ids Cove never gives out).
pub fn cove_id(e2b_id: &str) -> Option<String> {
    let id = format!("sb-{e2b_id}");
    cove_domain::ids::is_well_formed("sb", &id).then_some(id)
}

/// The E2B id of a Cove sandbox id.
pub fn e2b_id(cove_id: &str) -> &str {
    cove_id.strip_prefix("sb-").unwrap_or(cove_id)
}

/// The compatibility listener's router (REST and envd on one port). Sandboxes end at their
/// E2B timeout by Cove's expiry controller, which the server runs.
pub fn router(cp: ControlPlane, cfg: E2bConfig) -> Router {
    dispatch::router(E2b::new(cp, cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_both_ways() {
        assert_eq!(e2b_id("sb-abcdefgh01234567"), "abcdefgh01234567");
        assert_eq!(
            cove_id("abcdefgh01234567").as_deref(),
            Some("sb-abcdefgh01234567")
        );
        assert_eq!(cove_id("../etc"), None);
        assert_eq!(cove_id("ABCDEFGH01234567"), None);
    }
}

#[cfg(test)]
mod fuzz;
