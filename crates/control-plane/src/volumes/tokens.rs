//! Volume content tokens: a bearer credential that reaches one volume's files and nothing
//! else (E2B's volume `token`, for its `/volumecontent` API).
//!
//! A token is `cvt1.<org>.<mac>`: the org the volume belongs to, and 32 hex digits of an HMAC
//! (the server's key, derived for this use only) of the org and the volume's id. Nothing is
//! stored: a token is checked by recomputing it. The id is new for every volume made, so a
//! token dies with its volume, and one for a volume deleted and made again under the same name
//! is refused. Tokens do not expire otherwise; there is no rotation in this version.

use cove_domain::volumes;
use cove_store::StoreError;

use crate::orgs::scope::{self, Actor, Caller};
use crate::{ControlPlane, ServiceError};

/// Prefix (and version) of a volume token.
const PREFIX: &str = "cvt1.";

fn message(org: &str, volume_id: &str) -> Vec<u8> {
    let mut m = Vec::with_capacity(org.len() + volume_id.len() + 1);
    m.extend_from_slice(org.as_bytes());
    m.push(0);
    m.extend_from_slice(volume_id.as_bytes());
    m
}

/// Compares in constant time (for equal lengths).
fn equal(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

impl ControlPlane {
    fn volume_token_key(&self) -> Result<&crate::network::SecretsKey, ServiceError> {
        self.inner.cfg.secrets_key.as_ref().ok_or_else(|| {
            ServiceError::NotImplemented("this server has no key for volume tokens".into())
        })
    }

    /// The content token of volume `name` of the caller's org. Errors: `volume_not_found`,
    /// `not_implemented` without a server key.
    pub async fn volume_token(&self, name: &str) -> Result<String, ServiceError> {
        self.require_volumes().await?;
        let v = self.volume_record(name).await?;
        let mac = self.volume_token_key()?.volume_mac(&message(&v.org, &v.id));
        Ok(format!("{PREFIX}{}.{mac}", v.org))
    }

    /// The caller `token` acts as when it is the content token of volume `name`: its org, as
    /// [`Actor::VolumeToken`]. Any other token (of another volume, of a volume since deleted,
    /// malformed) is `unauthorized`, which does not tell whether the volume exists.
    pub async fn authenticate_volume_token(
        &self,
        name: &str,
        token: &str,
    ) -> Result<Caller, ServiceError> {
        let refused = || ServiceError::Unauthorized("invalid volume token".into());
        let (org, mac) = token
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split_once('.'))
            .ok_or_else(refused)?;
        if volumes::name("name", name).is_err() || org.is_empty() {
            return Err(refused());
        }
        let key = self.volume_token_key()?;
        let v = match self.store().get_volume(org, name).await {
            Ok(v) => v,
            Err(StoreError::NotFound) => return Err(refused()),
            Err(e) => return Err(e.into()),
        };
        if !equal(&key.volume_mac(&message(&v.org, &v.id)), mac) {
            return Err(refused());
        }
        Ok(Caller {
            org: v.org,
            actor: Actor::VolumeToken(format!("volume:{}", v.name)),
        })
    }
}

/// Whether the request being served may reach volume `name`: any caller but a volume token,
/// which reaches its own volume only ([`ServiceError::NoCaller`] without a caller).
pub(crate) fn token_reaches(name: &str) -> Result<bool, ServiceError> {
    Ok(match scope::require()?.actor {
        Actor::VolumeToken(v) => v.strip_prefix("volume:") == Some(name),
        _ => true,
    })
}
