//! The snapshot store: where suspended sandboxes keep their state, and where checkpoints are
//! kept (the same layout under `checkpoints/<checkpoint id>/`, see
//! [`SnapshotStore::checkpoints`]).
//!
//! An object store (the `object_store` crate): a local directory by default
//! (`<data-dir>/snapshots`), or S3-compatible storage (`s3://bucket/prefix`). A snapshot is the
//! runtime's artifacts, one object each (`<prefix>/sandboxes/<id>/<artifact>`, e.g. runc's
//! `fs.tar`), whose bytes this module moves without looking inside, and last a manifest
//! (`snapshot.json`, [`Manifest`]) that makes it complete. Objects appear only when complete (a
//! local store renames a staged file into place; S3 completes a multipart upload), so a crash
//! mid-upload leaves no manifest, only staging debris: [`SnapshotStore::sweep_staging`] removes
//! a local store's; an S3 bucket should have a lifecycle rule that aborts incomplete multipart
//! uploads.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

mod bridge;

pub use bridge::{ChannelReader, ChannelWriter};

/// Size of the parts a snapshot is uploaded in (8 MiB; S3 wants at least 5 MiB).
const PART_BYTES: usize = 8 << 20;
/// Parts in flight at once during an upload.
const UPLOAD_CONCURRENCY: usize = 4;
/// Parts fetched ahead during a restore.
const DOWNLOAD_CONCURRENCY: usize = 2;
/// Name of the manifest object of one sandbox under `sandboxes/<id>/`.
const MANIFEST_NAME: &str = "snapshot.json";
/// Folder of suspended sandboxes' snapshots.
const SANDBOXES: &str = "sandboxes";
/// Folder of checkpoints.
const CHECKPOINTS: &str = "checkpoints";
/// Folder of release root filesystems, keyed by the hex of their content digest.
const RELEASES: &str = "releases";
/// Folder of object volumes' images, keyed by volume id, one object per generation.
const VOLUMES: &str = "volumes";
/// Version of [`Manifest`]'s format.
pub const MANIFEST_VERSION: u32 = 1;

/// What a complete snapshot holds: written last, so its presence means every artifact is there.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// Format version ([`MANIFEST_VERSION`]).
    pub version: u32,
    /// The runtime that took it (`runc`, `qemu`); only that runtime can restore it.
    pub runtime: String,
    /// Whether it holds process memory (a wake continues running processes).
    pub memory: bool,
    /// The artifacts, in the order they were saved.
    pub artifacts: Vec<ManifestArtifact>,
    /// A suspended sandbox's network counters, which its wake carries on (`None` in
    /// checkpoints and snapshots taken before counters were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_counters: Option<cove_node_api::NetworkCounters>,
}

/// One artifact of a [`Manifest`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ManifestArtifact {
    /// Object name.
    pub name: String,
    /// Bytes of content it holds, as the runtime counted them (file bytes for files).
    pub content_bytes: u64,
}

/// Errors of the snapshot store.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The store URL is not usable.
    #[error("snapshot store url {url}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// Why it is refused.
        reason: String,
    },
    /// No snapshot of this sandbox.
    #[error("no snapshot of sandbox {0}")]
    Missing(String),
    /// The manifest is unreadable or of another format or runtime.
    #[error("snapshot of sandbox {id} is unusable: {reason}")]
    Corrupt {
        /// Sandbox id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// The object store failed.
    #[error("snapshot store: {0}")]
    Store(#[from] object_store::Error),
    /// Reading or writing the sandbox's files failed.
    #[error("snapshot files: {0}")]
    Io(#[from] std::io::Error),
    /// The caller cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// A handle to the snapshot store; cheap to clone.
#[derive(Debug, Clone)]
pub struct SnapshotStore {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    /// The directory of a local store (for [`SnapshotStore::sweep_staging`]).
    local_root: Option<PathBuf>,
    kind: &'static str,
    /// The folder of its snapshots under the prefix: `sandboxes` (suspends, keyed by sandbox
    /// id) or `checkpoints` (keyed by checkpoint id).
    scope: &'static str,
}

impl SnapshotStore {
    /// A store in the local directory `dir` (created if missing).
    pub fn local(dir: &Path) -> Result<Self, SnapshotError> {
        std::fs::create_dir_all(dir)?;
        let store = object_store::local::LocalFileSystem::new_with_prefix(dir)?;
        Ok(SnapshotStore {
            store: Arc::new(store),
            prefix: ObjectPath::default(),
            local_root: Some(dir.to_path_buf()),
            kind: "file",
            scope: SANDBOXES,
        })
    }

    /// A store from a URL: `file:///path` (a local directory) or `s3://bucket[/prefix]`.
    /// `options` are object-store settings such as `aws_access_key_id`, `aws_region`,
    /// `aws_endpoint`, `aws_allow_http` (the composition root passes the `AWS_*` environment).
    pub fn from_url(
        url: &str,
        options: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, SnapshotError> {
        let bad = |reason: String| SnapshotError::BadUrl {
            url: url.to_string(),
            reason,
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        match parsed.scheme() {
            "file" => {
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| bad("not an absolute local path".into()))?;
                Self::local(&dir)
            }
            "s3" => {
                // The S3 client's TLS (rustls without a bundled provider) uses the process's
                // default provider: ring, as everywhere else in Cove. Already set is fine.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let (store, prefix) = object_store::parse_url_opts(&parsed, options)
                    .map_err(|e| bad(e.to_string()))?;
                Ok(SnapshotStore {
                    store: Arc::from(store),
                    prefix,
                    local_root: None,
                    kind: "s3",
                    scope: SANDBOXES,
                })
            }
            other => Err(bad(format!(
                "unsupported scheme {other:?} (use file:// or s3://)"
            ))),
        }
    }

    /// The same store seen from its checkpoints' folder (`<prefix>/checkpoints/<checkpoint
    /// id>/...`): every method then takes a checkpoint id where it names a sandbox id.
    pub fn checkpoints(&self) -> SnapshotStore {
        SnapshotStore {
            scope: CHECKPOINTS,
            ..self.clone()
        }
    }

    /// The same store seen from its releases' folder (`<prefix>/releases/<digest hex>/...`):
    /// every method then takes a digest's hex where it names a sandbox id.
    pub fn releases(&self) -> SnapshotStore {
        SnapshotStore {
            scope: RELEASES,
            ..self.clone()
        }
    }

    /// The same store seen from its object volumes' folder (`<prefix>/volumes/<volume
    /// id>/<generation>`): every method then takes a volume id where it names a sandbox id,
    /// and a generation's number as the artifact name.
    pub fn volumes(&self) -> SnapshotStore {
        SnapshotStore {
            scope: VOLUMES,
            ..self.clone()
        }
    }

    /// Deletes every object of `key` but `keep` (none is fine).
    pub async fn delete_except(&self, key: &str, keep: &str) -> Result<(), SnapshotError> {
        let kept = self.key(key, keep);
        let mut listed = self.store.list(Some(&self.dir_key(key)));
        let mut doomed = Vec::new();
        while let Some(meta) = listed.next().await {
            match meta {
                Ok(meta) if meta.location != kept => doomed.push(meta.location),
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        for key in doomed {
            match self.store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Writes a small object `name` of `key` in one piece (a release's manifest).
    pub async fn put_object(
        &self,
        key: &str,
        name: &str,
        body: Bytes,
    ) -> Result<(), SnapshotError> {
        self.store.put(&self.key(key, name), body.into()).await?;
        Ok(())
    }

    /// Reads a small object `name` of `key` whole; [`SnapshotError::Missing`] when there is
    /// none.
    pub async fn object(&self, key: &str, name: &str) -> Result<Bytes, SnapshotError> {
        match self.store.get(&self.key(key, name)).await {
            Ok(g) => Ok(g.bytes().await?),
            Err(object_store::Error::NotFound { .. }) => Err(SnapshotError::Missing(key.into())),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes object `name` of `key`; none is fine.
    pub async fn delete_object(&self, key: &str, name: &str) -> Result<(), SnapshotError> {
        match self.store.delete(&self.key(key, name)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// `file` or `s3`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    fn dir_key(&self, sandbox_id: &str) -> ObjectPath {
        self.prefix.clone().join(self.scope).join(sandbox_id)
    }

    fn key(&self, sandbox_id: &str, name: &str) -> ObjectPath {
        self.dir_key(sandbox_id).join(name)
    }

    /// Uploads artifact `name` of `sandbox_id`: `produce` writes its bytes into the blocking
    /// writer it is given (from a blocking thread) and returns the content bytes it counted,
    /// while this call uploads them in parts. On error or cancellation the upload is aborted.
    pub async fn save_artifact<F, Fut>(
        &self,
        sandbox_id: &str,
        name: &str,
        cancel: &CancellationToken,
        produce: F,
    ) -> Result<u64, SnapshotError>
    where
        F: FnOnce(bridge::ChannelWriter) -> Fut,
        Fut: std::future::Future<Output = std::io::Result<u64>>,
    {
        let key = self.key(sandbox_id, name);
        let (writer, mut chunks) = bridge::channel_writer(PART_BYTES);
        let upload = self.store.put_multipart(&key).await?;
        let mut upload = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let streamed = async {
            let result: Result<(), SnapshotError> = async {
                loop {
                    let chunk: Option<Bytes> = tokio::select! {
                        c = chunks.recv() => c,
                        () = cancel.cancelled() => return Err(SnapshotError::Cancelled),
                    };
                    let Some(chunk) = chunk else { return Ok(()) };
                    upload.wait_for_capacity(UPLOAD_CONCURRENCY).await?;
                    upload.put(chunk);
                }
            }
            .await;
            // Stops the producer if it is still writing (its sends fail).
            drop(chunks);
            result
        };
        let (streamed, produced) = futures::join!(streamed, produce(writer));
        let outcome = match (streamed, produced) {
            (Err(e), _) => Err(e),
            (Ok(()), Err(e)) => Err(SnapshotError::Io(e)),
            (Ok(()), Ok(bytes)) => Ok(bytes),
        };
        match outcome {
            Ok(content_bytes) => {
                upload.finish().await?;
                Ok(content_bytes)
            }
            Err(e) => {
                if let Err(abort) = upload.abort().await {
                    warn!(sandbox_id, error = %abort, "cannot abort a snapshot upload");
                }
                Err(e)
            }
        }
    }

    /// Downloads artifact `name` of `sandbox_id` into `consume`, which reads it from the
    /// blocking reader it is given (on a blocking thread) and returns the content bytes it
    /// restored.
    pub async fn restore_artifact<F, Fut>(
        &self,
        sandbox_id: &str,
        name: &str,
        cancel: &CancellationToken,
        consume: F,
    ) -> Result<u64, SnapshotError>
    where
        F: FnOnce(bridge::ChannelReader) -> Fut,
        Fut: std::future::Future<Output = std::io::Result<u64>>,
    {
        let key = self.key(sandbox_id, name);
        let size = match self.store.head(&key).await {
            Ok(meta) => meta.size,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(SnapshotError::Missing(sandbox_id.to_string()))
            }
            Err(e) => return Err(e.into()),
        };
        // Ranged reads of a part each, two in flight: large chunks for the consumer (a plain
        // local `get` streams 8 KiB pieces) and overlap of transfer and unpacking on S3.
        let fetches: Vec<_> = (0..size)
            .step_by(PART_BYTES)
            .map(|start| {
                let end = (start + PART_BYTES as u64).min(size);
                fetch_range(self.store.clone(), key.clone(), start..end)
            })
            .collect();
        let mut body = futures::stream::iter(fetches).buffered(DOWNLOAD_CONCURRENCY);
        let (tx, reader) = bridge::channel_reader(DOWNLOAD_CONCURRENCY);
        let streamed = async move {
            loop {
                let chunk = tokio::select! {
                    c = body.next() => c,
                    () = cancel.cancelled() => return Err(SnapshotError::Cancelled),
                };
                let Some(chunk) = chunk else { return Ok(()) };
                let chunk = chunk.map_err(|e| std::io::Error::other(e.to_string()));
                let failed = chunk.is_err();
                if tx.send(chunk).await.is_err() || failed {
                    // The consumer stopped (its error is reported below) or the read failed.
                    return Ok(());
                }
            }
        };
        let (streamed, consumed) = futures::join!(streamed, consume(reader));
        let content_bytes = consumed?;
        streamed?;
        Ok(content_bytes)
    }

    /// Artifact `name` of snapshot `key` as it is stored: its size in bytes and its bytes.
    /// [`SnapshotError::Missing`] when there is none.
    pub async fn artifact_bytes(
        &self,
        key: &str,
        name: &str,
    ) -> Result<
        (
            u64,
            futures::stream::BoxStream<'static, std::io::Result<Bytes>>,
        ),
        SnapshotError,
    > {
        let got = match self.store.get(&self.key(key, name)).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(SnapshotError::Missing(key.to_string()))
            }
            Err(e) => return Err(e.into()),
        };
        let size = got.meta.size;
        let body = got
            .into_stream()
            .map(|c| c.map_err(|e| std::io::Error::other(e.to_string())))
            .boxed();
        Ok((size, body))
    }

    /// Writes the manifest, which completes the snapshot.
    pub async fn commit(&self, sandbox_id: &str, manifest: &Manifest) -> Result<(), SnapshotError> {
        let body = serde_json::to_vec(manifest).map_err(|e| SnapshotError::Io(e.into()))?;
        self.store
            .put(&self.key(sandbox_id, MANIFEST_NAME), body.into())
            .await?;
        info!(sandbox_id, runtime = %manifest.runtime, memory = manifest.memory, "snapshot saved");
        Ok(())
    }

    /// The manifest of `sandbox_id`'s snapshot ([`SnapshotError::Missing`] when there is no
    /// complete one).
    pub async fn manifest(&self, sandbox_id: &str) -> Result<Manifest, SnapshotError> {
        let got = match self.store.get(&self.key(sandbox_id, MANIFEST_NAME)).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(SnapshotError::Missing(sandbox_id.to_string()))
            }
            Err(e) => return Err(e.into()),
        };
        let bytes = got.bytes().await?;
        let corrupt = |reason: String| SnapshotError::Corrupt {
            id: sandbox_id.to_string(),
            reason,
        };
        let manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if manifest.version != MANIFEST_VERSION {
            return Err(corrupt(format!("manifest version {}", manifest.version)));
        }
        Ok(manifest)
    }

    /// Whether a complete snapshot of `sandbox_id` exists.
    pub async fn exists(&self, sandbox_id: &str) -> Result<bool, SnapshotError> {
        match self.store.head(&self.key(sandbox_id, MANIFEST_NAME)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes the snapshot of `sandbox_id` (the manifest first, so a half-deleted snapshot is
    /// never taken for a complete one); none is fine.
    pub async fn delete(&self, sandbox_id: &str) -> Result<(), SnapshotError> {
        let mut keys = vec![self.key(sandbox_id, MANIFEST_NAME)];
        let dir = self.dir_key(sandbox_id);
        let mut listed = self.store.list(Some(&dir));
        while let Some(meta) = listed.next().await {
            match meta {
                Ok(meta) if meta.location != keys[0] => keys.push(meta.location),
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        for key in keys {
            match self.store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(root) = &self.local_root {
            // A local store keeps the object's directory; drop it once empty (an upload in
            // flight for the same sandbox keeps it).
            let dir = root.join(self.scope).join(sandbox_id);
            match tokio::fs::remove_dir(&dir).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Ids of the sandboxes that have a snapshot.
    pub async fn list(&self) -> Result<Vec<String>, SnapshotError> {
        let base = self.prefix.clone().join(self.scope);
        let mut objects = self.store.list(Some(&base));
        let mut ids = Vec::new();
        while let Some(meta) = objects.next().await {
            let meta = meta?;
            let parts: Vec<_> = meta
                .location
                .prefix_match(&base)
                .into_iter()
                .flatten()
                .collect();
            if let [id, name] = parts.as_slice() {
                if name.as_ref() == MANIFEST_NAME {
                    ids.push(id.as_ref().to_string());
                }
            }
        }
        Ok(ids)
    }

    /// Removes the staging files that interrupted uploads left in a local store; returns how
    /// many. Call only while no upload runs (at start-up). A no-op for S3.
    pub async fn sweep_staging(&self) -> Result<u64, SnapshotError> {
        let Some(root) = self.local_root.clone() else {
            return Ok(0);
        };
        let scope = self.scope;
        let removed = tokio::task::spawn_blocking(move || sweep_dir(&root.join(scope)))
            .await
            .map_err(|e| SnapshotError::Io(std::io::Error::other(e)))??;
        if removed > 0 {
            info!(removed, "removed half-written snapshots");
        }
        Ok(removed)
    }
}

/// One byte range of an object.
async fn fetch_range(
    store: Arc<dyn ObjectStore>,
    key: ObjectPath,
    range: std::ops::Range<u64>,
) -> object_store::Result<Bytes> {
    store.get_range(&key, range).await
}

/// Removes `<name>#<digits>` files (the local store's staged uploads) and then-empty
/// directories below `dir`.
fn sweep_dir(dir: &Path) -> std::io::Result<u64> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            removed += sweep_dir(&path)?;
            // Only empty directories go; others still hold a snapshot.
            let _ = std::fs::remove_dir(&path);
        } else if is_staging_name(&entry.file_name().to_string_lossy()) {
            std::fs::remove_file(&path)?;
            removed += 1;
        }
    }
    Ok(removed)
}

fn is_staging_name(name: &str) -> bool {
    match name.rsplit_once('#') {
        Some((_, digits)) => !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

#[cfg(test)]
mod tests;
