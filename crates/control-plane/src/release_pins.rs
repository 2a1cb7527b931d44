//! Which release a create runs: `template` may pin one as `name:N` (a number) or
//! `name@sha256:<64 hex>` (a content digest); a plain name with no `release` takes the latest
//! ready release.

use cove_api_types::{Release, ReleaseState};
use cove_domain::InvalidInput;

use crate::{ControlPlane, ServiceError};

/// A release asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pin {
    /// The newest ready release.
    Latest,
    /// Release number `N`.
    Number(u32),
    /// The ready release with this digest (`sha256:` + 64 lowercase hex digits).
    Digest(String),
}

/// Splits a create's `template` and `release` into a template name and a [`Pin`].
///
/// # Errors
/// `invalid_argument` for a malformed number or digest, or a `release` that disagrees with
/// the number or digest in `template`.
pub(crate) fn parse(template: &str, release: Option<u32>) -> Result<(String, Pin), ServiceError> {
    let bad = |m: &str| ServiceError::from(InvalidInput::new("template", m));
    let (name, pin) = if let Some((name, digest)) = template.split_once('@') {
        let hex = digest
            .strip_prefix("sha256:")
            .ok_or_else(|| bad("a digest pin is `name@sha256:` and 64 hex digits"))?;
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad(
                "a digest pin is `name@sha256:` and 64 lowercase hex digits",
            ));
        }
        (name, Pin::Digest(digest.to_string()))
    } else if let Some((name, n)) = template.split_once(':') {
        let n = n
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| bad("a release pin is `name:N` with N a release number"))?;
        (name, Pin::Number(n))
    } else {
        (template, Pin::Latest)
    };
    let pin = match (pin, release) {
        (pin, None) => pin,
        (Pin::Latest, Some(n)) => Pin::Number(n),
        (Pin::Number(n), Some(r)) if n == r => Pin::Number(n),
        _ => {
            return Err(InvalidInput::new(
                "release",
                "disagrees with the release pinned in `template`",
            )
            .into())
        }
    };
    Ok((name.to_string(), pin))
}

impl ControlPlane {
    /// The ready release of `template` that `pin` names.
    ///
    /// # Errors
    /// `404 release_not_found` when there is none.
    pub(crate) async fn pick_release(
        &self,
        template: &str,
        pin: &Pin,
    ) -> Result<Release, ServiceError> {
        let releases = self.store().list_releases(template).await?;
        let mut ready = releases
            .into_iter()
            .filter(|r| r.state == ReleaseState::Ready);
        let found = match pin {
            Pin::Latest => ready.max_by_key(|r| r.number),
            Pin::Number(n) => ready.find(|r| r.number == *n),
            Pin::Digest(d) => ready
                .filter(|r| r.digest.as_deref() == Some(d))
                .max_by_key(|r| r.number),
        };
        found.ok_or_else(|| {
            ServiceError::ReleaseNotFound(match pin {
                Pin::Latest => format!(
                    "template {template} has no ready release; build one with `cove template \
                     build {template}`"
                ),
                Pin::Number(n) => format!("template {template} has no ready release {n}"),
                Pin::Digest(d) => format!("template {template} has no ready release {d}"),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn names_numbers_and_digests() {
        assert_eq!(parse("base", None).ok(), Some(("base".into(), Pin::Latest)));
        assert_eq!(
            parse("base", Some(3)).ok(),
            Some(("base".into(), Pin::Number(3)))
        );
        assert_eq!(
            parse("base:2", None).ok(),
            Some(("base".into(), Pin::Number(2)))
        );
        assert_eq!(
            parse("base:2", Some(2)).ok(),
            Some(("base".into(), Pin::Number(2)))
        );
        assert_eq!(
            parse(&format!("base@{D}"), None).ok(),
            Some(("base".into(), Pin::Digest(D.into())))
        );
        for bad in [
            "base:0",
            "base:x",
            "base@sha256:12",
            "base@md5:00",
            &format!("base@{}", D.to_uppercase()),
        ] {
            assert!(parse(bad, None).is_err(), "{bad}");
        }
        assert!(parse("base:2", Some(3)).is_err());
        assert!(parse(&format!("base@{D}"), Some(1)).is_err());
    }
}
