//! A volume's files without a sandbox: read one file, write one file, list a directory (to a
//! depth), describe a path, remove one (a directory with its contents), make a directory, set
//! owner and mode. The node resolves every path inside the volume (`..` stops at its root,
//! symlinks resolve as if it were `/`, a final symlink is never followed); this layer checks
//! the shape and maps a full volume to `507 insufficient_storage`. Answers carry the numeric
//! owner and every timestamp (`uid`, `gid`, `atime`, `ctime` of [`FileInfo`]). A volume delete
//! waits for the calls in flight (an upload until its body ends; a read until its file is
//! open), and calls that come meanwhile wait for it, then find no volume. Each call goes to the
//! node that keeps the volume (`unavailable` while it is lost).

use bytes::Bytes;
use cove_api_types::{
    FileInfo, FileList, MakeVolumeDirRequest, VolumeFileAttrs, MAX_LIST_DEPTH, MAX_UPLOAD_BYTES,
};
use cove_domain::{validate, InvalidInput};
use cove_node_api::{ByteStream, NodeError, VolumeEntry, VolumeEntryAttrs};
use futures::stream::BoxStream;
use futures::StreamExt;
use tracing::info;

use crate::files::to_api;
use crate::{ControlPlane, ServiceError};

/// A volume entry as the API answers it: [`FileInfo`] with `uid`, `gid`, `atime`, `ctime`.
fn entry_to_api(e: VolumeEntry) -> FileInfo {
    use chrono::TimeZone;
    let time = |ms: i64| {
        chrono::Utc
            .timestamp_millis_opt(ms)
            .single()
            .unwrap_or_default()
    };
    FileInfo {
        uid: Some(e.uid),
        gid: Some(e.gid),
        atime: Some(time(e.atime_ms)),
        ctime: Some(time(e.ctime_ms)),
        ..to_api(e.info)
    }
}

fn check_mode(mode: Option<u32>) -> Result<(), ServiceError> {
    match mode {
        Some(m) if m > 0o7777 => {
            Err(InvalidInput::new("mode", "must be permission bits, at most 0o7777 (4095)").into())
        }
        _ => Ok(()),
    }
}

/// A node error of a call on volume `name`: a full volume is `insufficient_storage`, a node
/// without volumes `unsupported`, a node that cannot be reached `unavailable`; the rest as
/// for sandboxes.
pub(crate) fn volume_err(e: NodeError, name: &str) -> ServiceError {
    match e {
        NodeError::NoSpace(_) => {
            ServiceError::InsufficientStorage(format!("volume {name} is full"))
        }
        NodeError::Unsupported(m) => ServiceError::Unsupported(m),
        NodeError::NodeUnreachable(m) | NodeError::NoNodeAvailable(m) => {
            ServiceError::Unavailable(format!("the node of volume {name} is unreachable: {m}"))
        }
        other => crate::error::from_node(other, ""),
    }
}

impl ControlPlane {
    /// Writes one file at `path` of volume `name` from a byte stream, atomically (the file
    /// appears complete or not at all; missing parents are made with uid and gid 1000, mode
    /// 0755), owned by `attrs.uid`/`attrs.gid` (default 1000) with `attrs.mode` (default
    /// 0644). `declared_len` is the request's
    /// `Content-Length`: beyond the volume's free space the write is refused at once with
    /// `insufficient_storage`, as is one that fills the volume midway (nothing is left).
    pub async fn write_volume_file(
        &self,
        name: &str,
        path: String,
        attrs: VolumeFileAttrs,
        declared_len: Option<u64>,
        body: ByteStream,
    ) -> Result<FileInfo, ServiceError> {
        self.require_volumes().await?;
        let _not_deleted = self.inner.volume_files_lock.read().await;
        let v = self.volume_record(name).await?;
        validate::path("path", path.as_bytes())?;
        check_mode(attrs.mode)?;
        let node = self.files_node(&v).await?;
        if let Some(len) = declared_len {
            if len > MAX_UPLOAD_BYTES {
                return Err(ServiceError::TooLarge(format!(
                    "upload of {len} bytes exceeds the maximum of {MAX_UPLOAD_BYTES} bytes"
                )));
            }
            let usage = node
                .volume_usage(&v.id)
                .await
                .map_err(|e| volume_err(e, name))?;
            if len > usage.free_bytes {
                return Err(ServiceError::InsufficientStorage(format!(
                    "volume {name} has {} bytes free, the upload is {len} bytes",
                    usage.free_bytes
                )));
            }
        }
        let attrs = VolumeEntryAttrs {
            uid: attrs.uid,
            gid: attrs.gid,
            mode: attrs.mode,
        };
        let entry = node
            .write_volume_file(&v.id, path, attrs, body)
            .await
            .map_err(|e| volume_err(e, name))?;
        info!(volume_id = %v.id, bytes = entry.info.size, "volume file written");
        Ok(entry_to_api(entry))
    }

    /// Reads the regular file at `path` of volume `name`: its metadata and its bytes.
    pub async fn read_volume_file(
        &self,
        name: &str,
        path: String,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, std::io::Error>>), ServiceError> {
        self.require_volumes().await?;
        let _not_deleted = self.inner.volume_files_lock.read().await;
        let v = self.volume_record(name).await?;
        validate::path("path", path.as_bytes())?;
        let (info, stream) = self
            .files_node(&v)
            .await?
            .read_volume_file(&v.id, path)
            .await
            .map_err(|e| volume_err(e, name))?;
        let stream = stream.map(|r| r.map_err(std::io::Error::other)).boxed();
        Ok((to_api(info), stream))
    }

    /// The entries of directory `path` of volume `name` (default `/`, its root), by name,
    /// down to `depth` levels: 1 (default) = the directory's own entries, n = n-1 levels below
    /// them too, each directory's entries right after it (1 to [`MAX_LIST_DEPTH`]).
    pub async fn list_volume_files(
        &self,
        name: &str,
        path: Option<String>,
        depth: Option<u32>,
    ) -> Result<FileList, ServiceError> {
        self.require_volumes().await?;
        let _not_deleted = self.inner.volume_files_lock.read().await;
        let v = self.volume_record(name).await?;
        let path = path.unwrap_or_else(|| "/".into());
        validate::path("path", path.as_bytes())?;
        let depth = depth.unwrap_or(1);
        if !(1..=MAX_LIST_DEPTH).contains(&depth) {
            return Err(
                InvalidInput::new("depth", format!("must be 1 to {MAX_LIST_DEPTH}")).into(),
            );
        }
        let entries = self
            .files_node(&v)
            .await?
            .list_volume_dir(&v.id, path, depth)
            .await
            .map_err(|e| volume_err(e, name))?;
        Ok(FileList {
            entries: entries.into_iter().map(entry_to_api).collect(),
        })
    }

    /// Describes `path` of volume `name` (`lstat`: a final symlink itself).
    pub async fn stat_volume_file(
        &self,
        name: &str,
        path: String,
    ) -> Result<FileInfo, ServiceError> {
        self.require_volumes().await?;
        let _not_deleted = self.inner.volume_files_lock.read().await;
        let v = self.volume_record(name).await?;
        validate::path("path", path.as_bytes())?;
        let entry = self
            .files_node(&v)
            .await?
            .stat_volume_path(&v.id, path)
            .await
            .map_err(|e| volume_err(e, name))?;
        Ok(entry_to_api(entry))
    }

    /// Removes `path` of volume `name`: a file, a symlink (the link only) or a directory with
    /// everything below it. The root is `invalid_argument`.
    pub async fn remove_volume_file(&self, name: &str, path: String) -> Result<(), ServiceError> {
        self.require_volumes().await?;
        let _not_deleted = self.inner.volume_files_lock.read().await;
        let v = self.volume_record(name).await?;
        validate::path("path", path.as_bytes())?;
        self.files_node(&v)
            .await?
            .remove_volume_path(&v.id, path)
            .await
            .map_err(|e| volume_err(e, name))?;
        info!(volume_id = %v.id, "volume path removed");
        Ok(())
    }

    /// Makes a directory of volume `name` (see [`MakeVolumeDirRequest`]).
    pub async fn make_volume_dir(
        &self,
        name: &str,
        req: MakeVolumeDirRequest,
    ) -> Result<FileInfo, ServiceError> {
        self.require_volumes().await?;
        let _not_deleted = self.inner.volume_files_lock.read().await;
        let v = self.volume_record(name).await?;
        validate::path("path", req.path.as_bytes())?;
        check_mode(req.mode)?;
        let attrs = VolumeEntryAttrs {
            uid: req.uid,
            gid: req.gid,
            mode: req.mode,
        };
        let entry = self
            .files_node(&v)
            .await?
            .make_volume_dir(&v.id, req.path, req.parents.unwrap_or(true), attrs)
            .await
            .map_err(|e| volume_err(e, name))?;
        Ok(entry_to_api(entry))
    }

    /// Sets the owner and permission bits of `path` of volume `name` (what is absent is
    /// kept; a final symlink is changed itself, and has no mode: `invalid_argument`).
    pub async fn set_volume_file_attrs(
        &self,
        name: &str,
        path: String,
        attrs: VolumeFileAttrs,
    ) -> Result<FileInfo, ServiceError> {
        self.require_volumes().await?;
        let _not_deleted = self.inner.volume_files_lock.read().await;
        let v = self.volume_record(name).await?;
        validate::path("path", path.as_bytes())?;
        check_mode(attrs.mode)?;
        let entry = self
            .files_node(&v)
            .await?
            .set_volume_attrs(
                &v.id,
                path,
                VolumeEntryAttrs {
                    uid: attrs.uid,
                    gid: attrs.gid,
                    mode: attrs.mode,
                },
            )
            .await
            .map_err(|e| volume_err(e, name))?;
        Ok(entry_to_api(entry))
    }
}
