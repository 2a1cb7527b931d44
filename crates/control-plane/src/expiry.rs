//! Sandbox expiry: a sandbox's `expires_at` and `on_expiry` (`delete`, `suspend` or `pause`) live in the
//! store, so every replica sees them and a restart keeps them. Cove's TTL (`ttl_s` at create)
//! and E2B's timeout (create `timeout`, `set_timeout`, `connect`, auto-pause) both set them.
//!
//! The expiry pass (`ControlPlane::end_expired`) runs on every replica: it reads the
//! sandboxes whose expiry has passed and claims each one with a conditional write
//! ([`cove_store::SandboxStore::claim_expiry`] clears `expires_at` only while it is still
//! past), so of replicas racing for one expiry exactly one acts. It then deletes, suspends or
//! pauses the sandbox with the reason `ttl` (the expiry a create's `ttl_s` set) or `expired` (any
//! other), which the operation's events and the sandbox's `state_reason` carry. A suspend or
//! pause leaves the sandbox without an expiry until one is set again.

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use cove_api_types::{CreateSandboxRequest, OnExpiry, Sandbox, SandboxState, SetExpiryRequest};
use cove_domain::InvalidInput;
use tracing::{info, warn};

use crate::lifecycle::LifecycleVerb;
use crate::sandboxes::MAX_TIMEOUT_S;
use crate::{ControlPlane, ServiceError};

/// Most expired sandboxes one pass acts on (the next pass takes the rest).
const EXPIRY_BATCH: u32 = 256;

/// Longest `in_s` of [`SetExpiryRequest`] (10 years).
pub const MAX_IN_S: u64 = MAX_TIMEOUT_S;

/// The reason recorded when a create's `ttl_s` ends a sandbox.
pub const REASON_TTL: &str = "ttl";
/// The reason recorded when any other expiry ends a sandbox.
pub const REASON_EXPIRED: &str = "expired";

impl ControlPlane {
    /// `invalid_argument` for an `on_expiry` this server's runtime cannot do (`pause` without
    /// a pause).
    pub(crate) fn check_on_expiry(&self, on_expiry: OnExpiry) -> Result<(), ServiceError> {
        if on_expiry == OnExpiry::Pause && !self.capabilities().pause {
            return Err(InvalidInput::new(
                "on_expiry",
                "`pause` needs a runtime that pauses sandboxes; use `suspend`",
            )
            .into());
        }
        Ok(())
    }
}

/// `secs` from `at`, bounded by [`MAX_TIMEOUT_S`].
fn after(at: DateTime<Utc>, secs: u64) -> DateTime<Utc> {
    at + ChronoDuration::seconds(secs.min(MAX_TIMEOUT_S) as i64)
}

/// The expiry a create asks for, for a sandbox created at `now`: `ttl_s` after `now`, or
/// `expires_at`; `invalid_argument` for both, a TTL of 0, or a time out of bounds.
pub(crate) fn of_create(
    req: &CreateSandboxRequest,
    now: DateTime<Utc>,
) -> Result<(Option<DateTime<Utc>>, OnExpiry), ServiceError> {
    let on_expiry = req.on_expiry.unwrap_or_default();
    let at = match (req.ttl_s, req.expires_at) {
        (Some(_), Some(_)) => {
            return Err(InvalidInput::new("expires_at", "must be absent with `ttl_s`").into())
        }
        (Some(ttl), None) => {
            if ttl == 0 || ttl > MAX_TIMEOUT_S {
                return Err(InvalidInput::new("ttl_s", "must be 1 to 315360000").into());
            }
            Some(after(now, ttl))
        }
        (None, Some(at)) => {
            if at <= now || at > after(now, MAX_TIMEOUT_S) {
                return Err(InvalidInput::new(
                    "expires_at",
                    "must be in the future, at most 10 years ahead",
                )
                .into());
            }
            Some(at)
        }
        (None, None) => None,
    };
    Ok((at, on_expiry))
}

/// Why an expiry ends `s`: `ttl` when its expiry is the one its create's `ttl_s` set.
fn reason(s: &Sandbox, expired_at: DateTime<Utc>) -> &'static str {
    let by_ttl = s.ttl_s.is_some_and(|ttl| {
        let ttl_end = after(s.created_at, ttl);
        (expired_at - ttl_end).num_milliseconds().abs() < 1000
    });
    if by_ttl {
        REASON_TTL
    } else {
        REASON_EXPIRED
    }
}

impl ControlPlane {
    /// `PUT /v1/sandboxes/{id}/expiry`: sets when sandbox `id` expires (exactly one of
    /// `expires_at` and `in_s`) and, when given, what its expiry does. A time already past
    /// makes it expire at the next pass. Answers the sandbox.
    pub async fn set_expiry(
        &self,
        id: &str,
        req: SetExpiryRequest,
    ) -> Result<Sandbox, ServiceError> {
        let now = self.inner.cfg.clock.now();
        let at = match (req.expires_at, req.in_s) {
            (Some(at), None) => {
                if at > after(now, MAX_TIMEOUT_S) {
                    return Err(
                        InvalidInput::new("expires_at", "must be at most 10 years ahead").into(),
                    );
                }
                at
            }
            (None, Some(secs)) => {
                if secs > MAX_TIMEOUT_S {
                    return Err(InvalidInput::new("in_s", "must be 0 to 315360000").into());
                }
                after(now, secs)
            }
            _ => {
                return Err(InvalidInput::new(
                    "expires_at",
                    "give exactly one of `expires_at` and `in_s`",
                )
                .into())
            }
        };
        let s = self.get_sandbox(id).await?;
        let on_expiry = req.on_expiry.unwrap_or(s.on_expiry);
        self.check_on_expiry(on_expiry)?;
        self.write_expiry(&s, Some(at), on_expiry).await
    }

    /// `DELETE /v1/sandboxes/{id}/expiry`: the sandbox expires no more. Answers it.
    pub async fn clear_expiry(&self, id: &str) -> Result<Sandbox, ServiceError> {
        let s = self.get_sandbox(id).await?;
        self.write_expiry(&s, None, s.on_expiry).await
    }

    async fn write_expiry(
        &self,
        s: &Sandbox,
        at: Option<DateTime<Utc>>,
        on_expiry: OnExpiry,
    ) -> Result<Sandbox, ServiceError> {
        if !self
            .store()
            .set_sandbox_expiry(&s.id, at, on_expiry)
            .await?
        {
            return Err(ServiceError::InvalidState {
                id: s.id.clone(),
                from: SandboxState::Deleting,
                to: s.state,
            });
        }
        self.touch(&s.id);
        info!(sandbox_id = %s.id, expires_at = ?at, on_expiry = on_expiry.as_str(), "sandbox expiry set");
        self.get_sandbox(&s.id).await
    }

    /// Moves the expiry of sandbox `id` to `secs` from now unless it is later already (never
    /// earlier; E2B's connect and refresh), with `on_expiry`.
    pub async fn extend_expiry(
        &self,
        id: &str,
        secs: u64,
        on_expiry: OnExpiry,
    ) -> Result<(), ServiceError> {
        let s = self.get_sandbox(id).await?;
        let at = after(self.inner.cfg.clock.now(), secs);
        self.store()
            .extend_sandbox_expiry(&s.id, at, on_expiry)
            .await?;
        Ok(())
    }

    /// One expiry pass: claims every sandbox whose expiry has passed and deletes or suspends
    /// it. Returns how many it claimed. Runs on every replica; a claim is a conditional write,
    /// so one expiry is acted on once.
    pub(crate) async fn end_expired(&self) -> Result<usize, ServiceError> {
        let now = self.inner.cfg.clock.now();
        let mut claimed = 0;
        for s in self.store().expired_sandboxes(now, EXPIRY_BATCH).await? {
            let Some(expired_at) = s.expires_at else {
                continue;
            };
            let verb = match (s.on_expiry, s.state) {
                (OnExpiry::Delete, _) => None,
                (OnExpiry::Suspend, SandboxState::Running | SandboxState::Paused) => {
                    Some(LifecycleVerb::Suspend)
                }
                (OnExpiry::Pause, SandboxState::Running) => Some(LifecycleVerb::Pause),
                // At rest already, or failed: the claim only clears the expiry.
                (
                    OnExpiry::Suspend | OnExpiry::Pause,
                    SandboxState::Suspended | SandboxState::Failed,
                )
                | (OnExpiry::Pause, SandboxState::Paused) => {
                    if self.store().claim_expiry(&s.id, now).await? {
                        claimed += 1;
                    }
                    continue;
                }
                // Between states: decided at a later pass, once it settles.
                (OnExpiry::Suspend | OnExpiry::Pause, _) => continue,
            };
            if !self.store().claim_expiry(&s.id, now).await? {
                continue;
            }
            claimed += 1;
            let why = reason(&s, expired_at);
            let done = match verb {
                Some(verb) => {
                    self.begin_lifecycle(&s.id, verb, None, None, None, Some(why))
                        .await
                }
                None => self.delete_sandbox_because(&s.id, None, Some(why)).await,
            };
            match done {
                Ok(op) => info!(sandbox_id = %s.id, op_id = %op.id, reason = why,
                    on_expiry = s.on_expiry.as_str(), "sandbox expired"),
                Err(e) => {
                    warn!(sandbox_id = %s.id, error = %e, "cannot end an expired sandbox");
                    // Not a refusal of the move: try again at the next pass.
                    if !matches!(e, ServiceError::InvalidState { .. }) {
                        let _ = self
                            .store()
                            .extend_sandbox_expiry(&s.id, expired_at, s.on_expiry)
                            .await;
                    }
                }
            }
        }
        Ok(claimed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_asks_for_a_ttl_or_a_time_not_both() {
        let now = Utc::now();
        let ttl = CreateSandboxRequest {
            ttl_s: Some(60),
            ..Default::default()
        };
        assert_eq!(
            of_create(&ttl, now).expect("ttl"),
            (Some(now + ChronoDuration::seconds(60)), OnExpiry::Delete)
        );
        let at = CreateSandboxRequest {
            expires_at: Some(now + ChronoDuration::seconds(5)),
            on_expiry: Some(OnExpiry::Suspend),
            ..Default::default()
        };
        assert_eq!(
            of_create(&at, now).expect("at"),
            (Some(now + ChronoDuration::seconds(5)), OnExpiry::Suspend)
        );
        for bad in [
            CreateSandboxRequest {
                ttl_s: Some(60),
                expires_at: Some(now + ChronoDuration::seconds(5)),
                ..Default::default()
            },
            CreateSandboxRequest {
                ttl_s: Some(0),
                ..Default::default()
            },
            CreateSandboxRequest {
                expires_at: Some(now - ChronoDuration::seconds(5)),
                ..Default::default()
            },
        ] {
            assert!(of_create(&bad, now).is_err(), "{bad:?}");
        }
        assert_eq!(
            of_create(&CreateSandboxRequest::default(), now).expect("none"),
            (None, OnExpiry::Delete)
        );
    }
}
