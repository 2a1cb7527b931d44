//! Who a request acts as, in scope for the services it calls.
//!
//! The management API's and the E2B API's authentication layers resolve the credential to a
//! [`Caller`] and run the request inside [`scoped`]. Services read it to stamp new resources
//! with the caller's org and to hide other orgs' resources: a resource of another org is
//! reported exactly as a missing one. Work outside a request (controllers, reconciliation, the
//! background half of an operation) has no caller and sees every org, as the server itself.
//! A response body streamed after the handler returned (SSE) is outside the scope too, so a
//! handler that streams captures [`current`] first.

use cove_api_types::DEFAULT_ORG;

/// Who authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// The server's admin token.
    Admin,
    /// An API key (its id).
    Key(String),
    /// A volume's content token (`volume:<name>`): it reaches that volume's files only.
    VolumeToken(String),
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

    /// Whether this is the admin token.
    pub fn is_admin(&self) -> bool {
        self.actor == Actor::Admin
    }

    /// `admin` or the key's id (the audit log's `actor`).
    pub fn actor_name(&self) -> &str {
        match &self.actor {
            Actor::Admin => "admin",
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

/// `f` run as the current caller: for request work handed to `tokio::spawn`, which does not
/// inherit it.
pub(crate) fn carried<F: std::future::Future>(
    f: F,
) -> impl std::future::Future<Output = F::Output> {
    let caller = current();
    async move {
        match caller {
            Some(c) => scoped(c, f).await,
            None => f.await,
        }
    }
}

/// The caller of the request being served (`None` outside a request).
pub fn current() -> Option<Caller> {
    CALLER.try_with(Caller::clone).ok()
}

/// The org new resources are made in: the caller's, or the default org outside a request.
pub(crate) fn acting_org() -> String {
    CALLER
        .try_with(|c| c.org.clone())
        .unwrap_or_else(|_| DEFAULT_ORG.to_string())
}

/// Whether the caller may see a resource of `org` (outside a request: always).
pub(crate) fn sees(org: &str) -> bool {
    CALLER.try_with(|c| c.org == org).unwrap_or(true)
}

/// The org a listing is limited to (`None` outside a request: every org).
pub(crate) fn listing_org() -> Option<String> {
    CALLER.try_with(|c| c.org.clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn outside_a_request_everything_is_seen_and_made_in_the_default_org() {
        assert!(sees("acme"));
        assert_eq!(acting_org(), DEFAULT_ORG);
        assert_eq!(listing_org(), None);
        let acme = Caller {
            org: "acme".into(),
            actor: Actor::Key("key-1".into()),
        };
        scoped(acme, async {
            assert!(sees("acme"));
            assert!(!sees(DEFAULT_ORG));
            assert_eq!(acting_org(), "acme");
            assert_eq!(listing_org().as_deref(), Some("acme"));
            assert_eq!(
                current().map(|c| c.actor_name().to_string()).as_deref(),
                Some("key-1")
            );
        })
        .await;
    }
}
