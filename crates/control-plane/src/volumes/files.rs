//! A volume's files without a sandbox: read one file, write one file, list a directory. The
//! node resolves every path inside the volume (`..` stops at its root, symlinks resolve as if
//! it were `/`); this layer checks the shape and maps a full volume to `507
//! insufficient_storage`.

use bytes::Bytes;
use cove_api_types::{FileInfo, FileList, MAX_UPLOAD_BYTES};
use cove_domain::validate;
use cove_node_api::{ByteStream, NodeError};
use futures::stream::BoxStream;
use futures::StreamExt;
use serde::Deserialize;
use tracing::info;

use crate::files::to_api;
use crate::{ControlPlane, ServiceError};

/// Query of `GET`/`PUT /v1/volumes/{name}/files`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct VolumeFileQuery {
    /// Path in the volume (`/` is its root; relative paths start there too).
    pub path: String,
}

/// Query of `GET /v1/volumes/{name}/files:list`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct VolumeListQuery {
    /// Directory in the volume (default `/`, its root).
    pub path: Option<String>,
}

/// A node error of a call on volume `name`: a full volume is `insufficient_storage`, a node
/// without volumes `unsupported`; the rest as for sandboxes.
pub(crate) fn volume_err(e: NodeError, name: &str) -> ServiceError {
    match e {
        NodeError::NoSpace(_) => {
            ServiceError::InsufficientStorage(format!("volume {name} is full"))
        }
        NodeError::Unsupported(m) => ServiceError::Unsupported(m),
        other => crate::error::from_node(other, ""),
    }
}

impl ControlPlane {
    /// Writes one file of volume `name` from a byte stream, atomically (the file appears
    /// complete or not at all), owned by uid 1000. `declared_len` is the request's
    /// `Content-Length`: beyond the volume's free space the write is refused at once with
    /// `insufficient_storage`, as is one that fills the volume midway (nothing is left).
    pub async fn write_volume_file(
        &self,
        name: &str,
        q: VolumeFileQuery,
        declared_len: Option<u64>,
        body: ByteStream,
    ) -> Result<FileInfo, ServiceError> {
        self.require_volumes().await?;
        let v = self.volume_record(name).await?;
        validate::path("path", q.path.as_bytes())?;
        if let Some(len) = declared_len {
            if len > MAX_UPLOAD_BYTES {
                return Err(ServiceError::TooLarge(format!(
                    "upload of {len} bytes exceeds the maximum of {MAX_UPLOAD_BYTES} bytes"
                )));
            }
            let usage = self
                .node()
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
        let info = self
            .node()
            .write_volume_file(&v.id, q.path, body)
            .await
            .map_err(|e| volume_err(e, name))?;
        info!(volume_id = %v.id, bytes = info.size, "volume file written");
        Ok(to_api(info))
    }

    /// Reads one regular file of volume `name`: its metadata and its bytes.
    pub async fn read_volume_file(
        &self,
        name: &str,
        q: VolumeFileQuery,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, std::io::Error>>), ServiceError> {
        self.require_volumes().await?;
        let v = self.volume_record(name).await?;
        validate::path("path", q.path.as_bytes())?;
        let (info, stream) = self
            .node()
            .read_volume_file(&v.id, q.path)
            .await
            .map_err(|e| volume_err(e, name))?;
        let stream = stream.map(|r| r.map_err(std::io::Error::other)).boxed();
        Ok((to_api(info), stream))
    }

    /// The entries of a directory of volume `name`, by name.
    pub async fn list_volume_files(
        &self,
        name: &str,
        q: VolumeListQuery,
    ) -> Result<FileList, ServiceError> {
        self.require_volumes().await?;
        let v = self.volume_record(name).await?;
        let path = q.path.unwrap_or_else(|| "/".into());
        validate::path("path", path.as_bytes())?;
        let entries = self
            .node()
            .list_volume_dir(&v.id, path)
            .await
            .map_err(|e| volume_err(e, name))?;
        Ok(FileList {
            entries: entries.into_iter().map(to_api).collect(),
        })
    }
}
