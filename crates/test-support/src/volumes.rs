//! `NodeVolumes` of the fake node: a volume is a size and a tree of directories and files in
//! memory (numeric owners, modes, times from the logical clock). Paths resolve from the
//! volume's root (`..` stops there). Usage counts file bytes; a write that would pass the
//! size is `NoSpace`. The errors are the real node's: a missing path `FileNotFound`, a file
//! where a directory is needed (or the reverse) `WrongType`, the root removed
//! `InvalidArgument`.
//!
//! Object volumes go to and from [`STORED`], one snapshot store shared by every fake node of
//! the process (as nodes share one store), keyed by volume id (random) and generation.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use cove_node_api::{
    ByteStream, FileInfo, FileType, NodeError, NodeVolumes, SandboxPath, VolumeEntry,
    VolumeEntryAttrs, VolumeUsage,
};
use futures::stream::BoxStream;
use futures::StreamExt;

use crate::files::resolve;
use crate::{FakeNode, State};

/// Owner of what a volume call makes without one (`user` of the built-in templates).
const DEFAULT_ID: u32 = 1000;

/// The stored generations of object volumes, by (volume id, generation).
static STORED: parking_lot::Mutex<BTreeMap<(String, u64), FakeVolume>> =
    parking_lot::Mutex::new(BTreeMap::new());

fn stored() -> parking_lot::MutexGuard<'static, BTreeMap<(String, u64), FakeVolume>> {
    STORED.lock()
}

/// A volume of the fake node.
#[derive(Clone)]
pub(crate) struct FakeVolume {
    size_mib: u64,
    /// Absolute path in the volume → entry; the root `/` is always there.
    entries: BTreeMap<Vec<u8>, VolumeNode>,
}

#[derive(Clone)]
struct VolumeNode {
    /// `None` for a directory.
    data: Option<Bytes>,
    uid: u32,
    gid: u32,
    mode: u32,
    time_ms: i64,
}

impl FakeVolume {
    fn new(size_mib: u64, now: i64) -> FakeVolume {
        let mut entries = BTreeMap::new();
        entries.insert(b"/".to_vec(), dir_node(VolumeEntryAttrs::default(), now));
        FakeVolume { size_mib, entries }
    }

    fn used_bytes(&self) -> u64 {
        self.entries
            .values()
            .filter_map(|n| n.data.as_ref())
            .map(|d| d.len() as u64)
            .sum()
    }

    fn entry(&self, path: &[u8]) -> Result<VolumeEntry, NodeError> {
        let n = self.entries.get(path).ok_or_else(|| not_found(path))?;
        let cut = path.iter().rposition(|b| *b == b'/').map_or(0, |i| i + 1);
        let (file_type, size) = match &n.data {
            Some(d) => (FileType::File, d.len() as u64),
            None => (FileType::Dir, 4096),
        };
        Ok(VolumeEntry {
            info: FileInfo {
                name: SandboxPath(path[cut..].to_vec()),
                path: SandboxPath(path.to_vec()),
                file_type,
                size,
                mode: n.mode,
                owner: n.uid.to_string(),
                group: n.gid.to_string(),
                mtime_ms: n.time_ms,
                symlink_target: None,
            },
            uid: n.uid,
            gid: n.gid,
            atime_ms: n.time_ms,
            ctime_ms: n.time_ms,
        })
    }

    /// Checks that the parent of `path` is a directory (`FileNotFound`, `WrongType`).
    fn parent_is_dir(&self, path: &[u8]) -> Result<(), NodeError> {
        let Some(p) = parent(path) else { return Ok(()) };
        match self.entries.get(&p) {
            None => Err(not_found(&p)),
            Some(n) if n.data.is_some() => Err(wrong_type(&p, "is not a directory")),
            Some(_) => Ok(()),
        }
    }

    /// Makes the missing parents of `path` (uid and gid 1000, mode 0755).
    fn make_parents(&mut self, path: &[u8], now: i64) -> Result<(), NodeError> {
        let mut chain = Vec::new();
        let mut p = parent(path);
        while let Some(d) = p {
            p = parent(&d);
            chain.push(d);
        }
        for d in chain.into_iter().rev() {
            match self.entries.get(&d) {
                Some(n) if n.data.is_some() => return Err(wrong_type(&d, "is not a directory")),
                Some(_) => {}
                None => {
                    self.entries
                        .insert(d, dir_node(VolumeEntryAttrs::default(), now));
                }
            }
        }
        Ok(())
    }

    fn walk(&self, dir: &[u8], depth: u32, out: &mut Vec<VolumeEntry>) -> Result<(), NodeError> {
        let children: Vec<Vec<u8>> = self
            .entries
            .keys()
            .filter(|k| parent(k).as_deref() == Some(dir))
            .cloned()
            .collect();
        for child in children {
            out.push(self.entry(&child)?);
            if depth > 1 && self.entries[&child].data.is_none() {
                self.walk(&child, depth - 1, out)?;
            }
        }
        Ok(())
    }
}

fn dir_node(attrs: VolumeEntryAttrs, now: i64) -> VolumeNode {
    VolumeNode {
        data: None,
        uid: attrs.uid.unwrap_or(DEFAULT_ID),
        gid: attrs.gid.unwrap_or(DEFAULT_ID),
        mode: attrs.mode.unwrap_or(0o755),
        time_ms: now,
    }
}

/// `path` from the volume's root, normalised (`..` stops at the root).
fn in_volume(path: &str) -> Result<Vec<u8>, NodeError> {
    resolve(format!("/{path}").as_bytes(), "root")
}

fn parent(path: &[u8]) -> Option<Vec<u8>> {
    if path == b"/" {
        return None;
    }
    let cut = path.iter().rposition(|b| *b == b'/')?;
    Some(if cut == 0 {
        b"/".to_vec()
    } else {
        path[..cut].to_vec()
    })
}

fn not_found(path: &[u8]) -> NodeError {
    NodeError::FileNotFound(format!(
        "{}: no such file or directory",
        String::from_utf8_lossy(path)
    ))
}

fn wrong_type(path: &[u8], what: &str) -> NodeError {
    NodeError::WrongType {
        field: "path".into(),
        message: format!("{} {what}", String::from_utf8_lossy(path)),
    }
}

fn volume<'a>(st: &'a mut State, id: &str) -> Result<&'a mut FakeVolume, NodeError> {
    st.volumes
        .get_mut(id)
        .ok_or_else(|| NodeError::FileNotFound(format!("volume {id} is not on this node")))
}

impl FakeNode {
    /// Ids of the volumes the fake node holds, in id order.
    pub fn volume_ids(&self) -> Vec<String> {
        self.lock().volumes.keys().cloned().collect()
    }

    /// The generations of object volume `id` in the shared store, oldest first.
    pub fn stored_volume_generations(id: &str) -> Vec<u64> {
        stored()
            .keys()
            .filter(|(v, _)| v == id)
            .map(|(_, g)| *g)
            .collect()
    }

    /// Runs `f` on volume `id` with the next timestamp.
    fn with_volume<T>(
        &self,
        id: &str,
        f: impl FnOnce(&mut FakeVolume, i64) -> Result<T, NodeError>,
    ) -> Result<T, NodeError> {
        let mut st = self.lock();
        let now = st.tick() as i64;
        f(volume(&mut st, id)?, now)
    }
}

#[async_trait]
impl NodeVolumes for FakeNode {
    async fn create_volume(&self, id: &str, size_mib: u64) -> Result<(), NodeError> {
        let mut st = self.lock();
        if st.volumes.contains_key(id) {
            return Err(NodeError::AlreadyExists(format!("volume {id} exists")));
        }
        let now = st.tick() as i64;
        st.volumes
            .insert(id.to_string(), FakeVolume::new(size_mib, now));
        Ok(())
    }

    async fn attach_volumes(
        &self,
        sandbox_id: &str,
        volumes: Vec<cove_node_api::LaunchVolume>,
    ) -> Result<(), NodeError> {
        self.run(crate::Call::AttachVolumes, sandbox_id, None, |st| {
            for v in &volumes {
                if !st.volumes.contains_key(&v.id) {
                    return Err(NodeError::FileNotFound(format!(
                        "volume {} is not on this node",
                        v.id
                    )));
                }
            }
            st.serving(sandbox_id)?.launch.volumes.extend(volumes);
            Ok(())
        })
        .await
    }

    async fn delete_volume(&self, id: &str) -> Result<(), NodeError> {
        self.lock().volumes.remove(id);
        stored().retain(|(v, _), _| v != id);
        Ok(())
    }

    async fn download_volume(
        &self,
        id: &str,
        size_mib: u64,
        generation: u64,
    ) -> Result<(), NodeError> {
        self.run(crate::Call::DownloadVolume, id, None, |st| {
            let now = st.tick() as i64;
            let copy = if generation == 0 {
                FakeVolume::new(size_mib, now)
            } else {
                stored()
                    .get(&(id.to_string(), generation))
                    .cloned()
                    .ok_or_else(|| {
                        NodeError::FileNotFound(format!(
                            "generation {generation} of volume {id} is not in the snapshot store"
                        ))
                    })?
            };
            st.volumes.insert(id.to_string(), copy);
            Ok(())
        })
        .await
    }

    async fn upload_volume(&self, id: &str, generation: u64) -> Result<u64, NodeError> {
        self.run(crate::Call::UploadVolume, id, None, |st| {
            let v = volume(st, id)?.clone();
            let bytes = v.used_bytes();
            stored().insert((id.to_string(), generation), v);
            Ok(bytes)
        })
        .await
    }

    async fn release_volume(&self, id: &str, keep: u64) -> Result<(), NodeError> {
        self.lock().volumes.remove(id);
        stored().retain(|(v, g), _| v != id || *g == keep);
        Ok(())
    }

    async fn volume_usage(&self, id: &str) -> Result<VolumeUsage, NodeError> {
        self.with_volume(id, |v, _| {
            let used_bytes = v.used_bytes();
            Ok(VolumeUsage {
                used_bytes,
                free_bytes: (v.size_mib << 20).saturating_sub(used_bytes),
            })
        })
    }

    async fn read_volume_file(
        &self,
        id: &str,
        path: String,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, NodeError>>), NodeError> {
        let path = in_volume(&path)?;
        self.with_volume(id, |v, _| {
            let entry = v.entry(&path)?;
            let Some(data) = v.entries[&path].data.clone() else {
                return Err(wrong_type(&path, "is a directory"));
            };
            Ok((entry.info, futures::stream::iter([Ok(data)]).boxed()))
        })
    }

    async fn write_volume_file(
        &self,
        id: &str,
        path: String,
        attrs: VolumeEntryAttrs,
        mut body: ByteStream,
    ) -> Result<VolumeEntry, NodeError> {
        let path = in_volume(&path)?;
        let mut data = BytesMut::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| NodeError::Internal(format!("body: {e}")))?;
            data.extend_from_slice(&chunk);
        }
        let data = data.freeze();
        self.with_volume(id, |v, now| {
            if v.entries.get(&path).is_some_and(|n| n.data.is_none()) {
                return Err(wrong_type(&path, "is a directory"));
            }
            let replaced = v.entries.get(&path).and_then(|n| n.data.as_ref());
            let used = v.used_bytes() - replaced.map_or(0, |d| d.len() as u64);
            if used + data.len() as u64 > v.size_mib << 20 {
                return Err(NodeError::NoSpace(format!("volume {id} is full")));
            }
            v.make_parents(&path, now)?;
            let node = VolumeNode {
                data: Some(data),
                mode: attrs.mode.unwrap_or(0o644),
                ..dir_node(attrs, now)
            };
            v.entries.insert(path.clone(), node);
            v.entry(&path)
        })
    }

    async fn list_volume_dir(
        &self,
        id: &str,
        path: String,
        depth: u32,
    ) -> Result<Vec<VolumeEntry>, NodeError> {
        let path = in_volume(&path)?;
        self.with_volume(id, |v, _| {
            if v.entry(&path)?.info.file_type != FileType::Dir {
                return Err(wrong_type(&path, "is not a directory"));
            }
            let mut out = Vec::new();
            v.walk(&path, depth, &mut out)?;
            Ok(out)
        })
    }

    async fn stat_volume_path(&self, id: &str, path: String) -> Result<VolumeEntry, NodeError> {
        let path = in_volume(&path)?;
        self.with_volume(id, |v, _| v.entry(&path))
    }

    async fn remove_volume_path(&self, id: &str, path: String) -> Result<(), NodeError> {
        let path = in_volume(&path)?;
        self.with_volume(id, |v, _| {
            if path == b"/" {
                return Err(NodeError::InvalidArgument {
                    field: "path".into(),
                    message: "the volume's root cannot be removed".into(),
                });
            }
            v.entry(&path)?;
            let below = [path.as_slice(), b"/"].concat();
            v.entries
                .retain(|k, _| *k != path && !k.starts_with(&below));
            Ok(())
        })
    }

    async fn make_volume_dir(
        &self,
        id: &str,
        path: String,
        parents: bool,
        attrs: VolumeEntryAttrs,
    ) -> Result<VolumeEntry, NodeError> {
        let path = in_volume(&path)?;
        self.with_volume(id, |v, now| {
            match v.entries.get(&path) {
                Some(n) if parents && n.data.is_none() => return v.entry(&path),
                Some(_) => {
                    return Err(NodeError::AlreadyExists(format!(
                        "{} exists",
                        String::from_utf8_lossy(&path)
                    )))
                }
                None => {}
            }
            if parents {
                v.make_parents(&path, now)?;
            } else {
                v.parent_is_dir(&path)?;
            }
            v.entries.insert(path.clone(), dir_node(attrs, now));
            v.entry(&path)
        })
    }

    async fn set_volume_attrs(
        &self,
        id: &str,
        path: String,
        attrs: VolumeEntryAttrs,
    ) -> Result<VolumeEntry, NodeError> {
        let path = in_volume(&path)?;
        self.with_volume(id, |v, now| {
            let n = v.entries.get_mut(&path).ok_or_else(|| not_found(&path))?;
            n.uid = attrs.uid.unwrap_or(n.uid);
            n.gid = attrs.gid.unwrap_or(n.gid);
            n.mode = attrs.mode.unwrap_or(n.mode);
            n.time_ms = now;
            v.entry(&path)
        })
    }
}
