//! Who a request acts as, in scope for the services it calls.
//!
//! The management API's and the E2B API's authentication layers resolve the credential to a
//! [`Caller`] and run the request inside [`scoped`]. Services read it to stamp new resources
//! with the caller's org and to hide other orgs' resources: a resource of another org is
//! reported exactly as a missing one.
//!
//! The rule is **fail closed**: a service that looks at its caller and finds none in scope
//! refuses with [`ServiceError::NoCaller`] (`500 internal`, logged at error level: it is a
//! bug), never "everyone". Work that is not a tenant's request says so on purpose and runs as
//! [`Caller::system`] (through [`as_system`]), which sees every org and makes resources in the
//! default org: the controllers and the expiry loop, reconciliation and takeover at start-up or
//! as leader, the background half of an operation, clean-ups spawned when a request is dropped,
//! and surfaces that authorise with a token of their own (a command's attachment token, a
//! sandbox's port token, envd's token) once that token was checked. Request work handed to
//! `tokio::spawn`, which does not inherit the scope, keeps its caller with [`carried`].
//! A response body streamed after the handler returned (SSE) is outside the scope too, so a
//! handler that streams captures [`current`] first.

use cove_api_types::DEFAULT_ORG;

use crate::ServiceError;

/// Who authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// The server's admin token.
    Admin,
    /// An API key (its id).
    Key(String),
    /// A volume's content token (`volume:<name>`): it reaches that volume's files only.
    VolumeToken(String),
    /// The server itself: background work, and surfaces past their own token check.
    System,
}

/// The caller of a request: an org, and who acts in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The org it acts in.
    pub org: String,
    /// Who.
    pub actor: Actor,
}

impl Caller {
    /// The admin token's caller: the built-in default org.
    pub fn admin() -> Self {
        Caller {
            org: DEFAULT_ORG.to_string(),
            actor: Actor::Admin,
        }
    }

    /// The server itself: it sees every org, has the admin token's rights, and makes new
    /// resources in the default org. Background work runs as it on purpose ([`as_system`]).
    pub fn system() -> Self {
        Caller {
            org: DEFAULT_ORG.to_string(),
            actor: Actor::System,
        }
    }

    /// Whether this is the admin token.
    pub fn is_admin(&self) -> bool {
        self.actor == Actor::Admin
    }

    /// Whether this is the server itself ([`Caller::system`]).
    pub fn is_system(&self) -> bool {
        self.actor == Actor::System
    }

    /// Whether this caller has the admin token's rights: the admin token, or the server.
    pub fn has_admin_rights(&self) -> bool {
        self.is_admin() || self.is_system()
    }

    /// Whether this caller may see a resource of `org`: its own org's, or any for the system.
    pub fn sees(&self, org: &str) -> bool {
        self.is_system() || self.org == org
    }

    /// The org a listing is limited to: the caller's, or `None` (every org) for the system.
    pub fn listing_org(&self) -> Option<String> {
        (!self.is_system()).then(|| self.org.clone())
    }

    /// `admin`, `system` or the key's id (the audit log's `actor`).
    pub fn actor_name(&self) -> &str {
        match &self.actor {
            Actor::Admin => "admin",
            Actor::System => "system",
            Actor::Key(id) | Actor::VolumeToken(id) => id,
        }
    }
}

tokio::task_local! {
    static CALLER: Caller;
}

/// Runs `f` as `caller`.
pub async fn scoped<F: std::future::Future>(caller: Caller, f: F) -> F::Output {
    CALLER.scope(caller, f).await
}

/// Runs `f` as the server itself ([`Caller::system`]): for work that is no tenant's request.
pub async fn as_system<F: std::future::Future>(f: F) -> F::Output {
    scoped(Caller::system(), f).await
}

/// `f` run as the current caller: for request work handed to `tokio::spawn`, which does not
/// inherit it. Without a caller in scope, `f` runs without one too (and its service calls
/// refuse).
pub fn carried<F: std::future::Future>(f: F) -> impl std::future::Future<Output = F::Output> {
    let caller = current();
    async move {
        match caller {
            Some(c) => scoped(c, f).await,
            None => f.await,
        }
    }
}

/// The caller in scope (`None` when there is none: use [`require`] where a service decides
/// on it).
pub fn current() -> Option<Caller> {
    CALLER.try_with(Caller::clone).ok()
}

/// The caller in scope, or [`ServiceError::NoCaller`] (logged at error level with the place
/// that asked) when there is none: the one accessor services decide on (with
/// [`Caller::sees`] for a resource's org).
#[track_caller]
pub fn require() -> Result<Caller, ServiceError> {
    let asked_at = std::panic::Location::caller();
    current().ok_or_else(|| {
        tracing::error!(
            at = %asked_at,
            "a service was called with no caller in scope (a bug: background work runs as \
             Caller::system())"
        );
        ServiceError::NoCaller
    })
}

/// The org new resources are made in: the caller's (the default org for the system).
#[track_caller]
pub(crate) fn acting_org() -> Result<String, ServiceError> {
    require().map(|c| c.org)
}

/// The org a listing is limited to (`None` for the system: every org).
#[track_caller]
pub(crate) fn listing_org() -> Result<Option<String>, ServiceError> {
    require().map(|c| c.listing_org())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acme() -> Caller {
        Caller {
            org: "acme".into(),
            actor: Actor::Key("key-1".into()),
        }
    }

    #[tokio::test]
    async fn without_a_caller_every_accessor_refuses() {
        assert!(current().is_none());
        assert!(matches!(require(), Err(ServiceError::NoCaller)));
        assert!(matches!(acting_org(), Err(ServiceError::NoCaller)));
        assert!(matches!(listing_org(), Err(ServiceError::NoCaller)));
        assert_eq!(
            ServiceError::NoCaller.code(),
            cove_api_types::ErrorCode::Internal
        );
        assert!(ServiceError::NoCaller
            .public_message()
            .contains("no caller in scope"));
    }

    #[tokio::test]
    async fn a_key_sees_and_makes_in_its_own_org_only() {
        scoped(acme(), async {
            let c = require().ok();
            assert!(c
                .as_ref()
                .is_some_and(|c| c.sees("acme") && !c.sees(DEFAULT_ORG)));
            assert_eq!(acting_org().ok().as_deref(), Some("acme"));
            assert_eq!(listing_org().ok().flatten().as_deref(), Some("acme"));
            assert_eq!(
                current().map(|c| c.actor_name().to_string()).as_deref(),
                Some("key-1")
            );
            assert!(!require().is_ok_and(|c| c.has_admin_rights()));
        })
        .await;
    }

    #[tokio::test]
    async fn the_admin_token_acts_in_the_default_org() {
        scoped(Caller::admin(), async {
            let c = require().ok();
            assert!(c
                .as_ref()
                .is_some_and(|c| c.sees(DEFAULT_ORG) && !c.sees("acme")));
            assert_eq!(listing_org().ok().flatten().as_deref(), Some(DEFAULT_ORG));
            assert!(require().is_ok_and(|c| c.has_admin_rights() && !c.is_system()));
        })
        .await;
    }

    #[tokio::test]
    async fn the_system_caller_sees_every_org_and_makes_in_the_default_org() {
        as_system(async {
            let c = require().ok();
            assert!(c
                .as_ref()
                .is_some_and(|c| c.sees("acme") && c.sees(DEFAULT_ORG)));
            assert_eq!(acting_org().ok().as_deref(), Some(DEFAULT_ORG));
            assert_eq!(listing_org().ok(), Some(None));
            assert!(c
                .as_ref()
                .is_some_and(|c| c.is_system() && c.has_admin_rights()));
            assert_eq!(c.as_ref().map(Caller::actor_name), Some("system"));
        })
        .await;
    }

    #[tokio::test]
    async fn carried_keeps_the_caller_across_a_spawn_and_none_stays_none() {
        let seen = scoped(acme(), async {
            tokio::spawn(carried(async { current() }))
                .await
                .ok()
                .flatten()
        })
        .await;
        assert_eq!(seen, Some(acme()));
        // A spawn that does not carry has no caller, and refuses.
        let bare = scoped(acme(), async { tokio::spawn(async { acting_org() }).await })
            .await
            .ok();
        assert!(matches!(bare, Some(Err(ServiceError::NoCaller))));
        let none = tokio::spawn(carried(async { current() }))
            .await
            .ok()
            .flatten();
        assert_eq!(none, None);
    }
}
