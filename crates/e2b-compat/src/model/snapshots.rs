//! Snapshots (Cove checkpoints).

use serde::Serialize;

/// `SnapshotInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotInfo {
    /// The checkpoint id.
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    /// Its name, when it has one (a list of zero or one).
    pub names: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::assert_wire;

    #[test]
    fn snapshot_info() {
        let s = SnapshotInfo {
            snapshot_id: "ck-1".into(),
            names: vec![],
        };
        assert_wire(&s, r#"{"snapshotID":"ck-1","names":[]}"#);
    }
}
