//! Feature gates: incubating features a server can turn off for everyone (`cove server
//! --disable-feature checkpoints,fork`) and the admin can turn off for one org
//! (`disabled_features` of `PATCH /v1/orgs/{org}`). A call to a disabled feature answers `403
//! feature_disabled` naming it, never a silent no-op.
//!
//! Which org a call is judged for: the org of the resource it acts on (a sandbox, a
//! checkpoint), else the org the caller acts in (a key's org; the admin token's is
//! `default`). So the admin token, acting on a sandbox of an org with `fork` off, is refused
//! too.

use std::collections::BTreeSet;

pub use cove_api_types::Feature;
use cove_store::StoreError;

use crate::{ControlPlane, ServiceError};

/// The features turned off on this server (every feature is on by default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features {
    disabled: BTreeSet<Feature>,
}

impl Features {
    /// Every feature on.
    pub fn all() -> Self {
        Features::default()
    }

    /// Turns `feature` off.
    pub fn disable(&mut self, feature: Feature) {
        self.disabled.insert(feature);
    }

    /// Parses a comma-separated list of feature names to turn off (`checkpoints,fork`).
    ///
    /// # Errors
    /// The first unknown name, with the known ones.
    pub fn disabling(list: &str) -> Result<Self, String> {
        let mut features = Features::all();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let feature = Feature::parse(name).ok_or_else(|| {
                let known: Vec<_> = Feature::ALL.iter().map(|f| f.as_str()).collect();
                format!("unknown feature {name:?} (known: {})", known.join(", "))
            })?;
            features.disable(feature);
        }
        Ok(features)
    }

    /// Whether `feature` is on.
    pub fn enabled(&self, feature: Feature) -> bool {
        !self.disabled.contains(&feature)
    }

    /// `Ok` when `feature` is on, else [`ServiceError::FeatureDisabled`].
    pub fn require(&self, feature: Feature) -> Result<(), ServiceError> {
        if self.enabled(feature) {
            Ok(())
        } else {
            Err(ServiceError::FeatureDisabled(feature))
        }
    }
}

impl ControlPlane {
    /// `Ok` when `feature` is on both for this server and for org `org`; else `403
    /// feature_disabled` ([`ServiceError::FeatureDisabled`] for the server,
    /// [`ServiceError::FeatureDisabledForOrg`] for the org). An unknown org has every feature
    /// the server has.
    pub(crate) async fn require_feature(
        &self,
        feature: Feature,
        org: &str,
    ) -> Result<(), ServiceError> {
        self.inner.cfg.features.require(feature)?;
        match self.store().get_org(org).await {
            Ok(o) if o.disabled_features.contains(&feature) => {
                Err(ServiceError::FeatureDisabledForOrg {
                    feature,
                    org: org.to_string(),
                })
            }
            Ok(_) | Err(StoreError::NotFound) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_gate() {
        let f = Features::disabling(" fork, ").expect("parse");
        assert!(f.enabled(Feature::Checkpoints));
        assert!(!f.enabled(Feature::Fork));
        assert!(matches!(
            f.require(Feature::Fork),
            Err(ServiceError::FeatureDisabled(Feature::Fork))
        ));
        assert!(Features::disabling("checkpoints,nope").is_err());
        assert_eq!(Features::disabling("").expect("empty"), Features::all());
    }
}
