//! Feature gates: incubating features a server can turn off (`cove server
//! --disable-feature checkpoints,fork`). A call to a disabled feature answers `403
//! feature_disabled` naming it, never a silent no-op. Without orgs the gates are per server.

use std::collections::BTreeSet;

use crate::ServiceError;

/// A gated feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// Checkpoints: take, list, get, delete, roll back to, create a sandbox from one.
    Checkpoints,
    /// Forks of a running sandbox.
    Fork,
    /// Checkpoint archives: export (download) and import (upload).
    Export,
    /// Persistent volumes: create, list, get, delete, their files, mounting them at create.
    Volumes,
}

impl Feature {
    /// Every feature.
    pub const ALL: &'static [Feature] = &[
        Feature::Checkpoints,
        Feature::Fork,
        Feature::Export,
        Feature::Volumes,
    ];

    /// Its name (as `--disable-feature` takes it and `feature_disabled` names it).
    pub fn as_str(self) -> &'static str {
        match self {
            Feature::Checkpoints => "checkpoints",
            Feature::Fork => "fork",
            Feature::Export => "export",
            Feature::Volumes => "volumes",
        }
    }

    /// The feature of a name.
    pub fn parse(s: &str) -> Option<Feature> {
        Feature::ALL.iter().copied().find(|f| f.as_str() == s)
    }
}

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
