//! Volumes and the files of their content API.

use serde::Serialize;

/// `Volume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VolumeInfo {
    /// The volume's id: its name.
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    /// Its name.
    pub name: String,
}

/// `VolumeAndToken`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VolumeAndToken {
    /// The volume's id: its name.
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    /// Its name.
    pub name: String,
    /// A token that reaches this volume's content API only.
    pub token: String,
}

/// The type of a volume entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeEntryType {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// Anything else (fifo, socket, device).
    Unknown,
}

/// `VolumeEntryStat`: one file of a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VolumeEntryStat {
    /// Base name.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub entry_type: VolumeEntryType,
    /// Path inside the volume.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Owner uid (0 when unknown).
    pub uid: u32,
    /// Owner gid (0 when unknown).
    pub gid: u32,
    /// Last access, RFC 3339 (the modification time when unknown).
    pub atime: String,
    /// Last modification, RFC 3339.
    pub mtime: String,
    /// Last status change, RFC 3339 (the modification time when unknown).
    pub ctime: String,
    /// A symlink's target as stored; omitted for other types.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::assert_wire;

    #[test]
    fn volumes_and_entries() {
        assert_wire(
            &VolumeAndToken {
                volume_id: "v".into(),
                name: "v".into(),
                token: "t".into(),
            },
            r#"{"volumeID":"v","name":"v","token":"t"}"#,
        );
        assert_wire(
            &VolumeInfo {
                volume_id: "v".into(),
                name: "v".into(),
            },
            r#"{"volumeID":"v","name":"v"}"#,
        );
        let mut e = VolumeEntryStat {
            name: "a".into(),
            entry_type: VolumeEntryType::Directory,
            path: "/a".into(),
            size: 4096,
            mode: 0o755,
            uid: 0,
            gid: 0,
            atime: "t1".into(),
            mtime: "t2".into(),
            ctime: "t3".into(),
            target: None,
        };
        let base = r#""name":"a","path":"/a","size":4096,"mode":493,"uid":0,"gid":0,
            "atime":"t1","mtime":"t2","ctime":"t3""#;
        assert_wire(&e, &format!(r#"{{{base},"type":"directory"}}"#));
        e.entry_type = VolumeEntryType::Symlink;
        e.target = Some("b".into());
        assert_wire(&e, &format!(r#"{{{base},"type":"symlink","target":"b"}}"#));
        for (t, s) in [
            (VolumeEntryType::File, "file"),
            (VolumeEntryType::Unknown, "unknown"),
        ] {
            assert_eq!(serde_json::to_value(t).expect("json"), s);
        }
    }
}
