//! Checkpoint archives: a checkpoint streamed out as one tar (header, manifest, artifacts),
//! and an uploaded archive staged on the node's disk, checked whole, then stored as a
//! checkpoint. Nothing of an import is kept unless every entry passed.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use bytes::Bytes;
use cove_node_api::{ByteStream, ImportedCheckpoint, ARCHIVE_HEADER, ARCHIVE_HEADER_MAX_BYTES};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use super::lifecycle::snapshot_err;
use super::*;
use crate::snapshot::{Manifest, SnapshotError, MANIFEST_VERSION};

/// Name of the manifest entry of an archive.
const MANIFEST_ENTRY: &str = "snapshot.json";
/// Folder of the artifact entries of an archive.
const ARTIFACTS_DIR: &str = "artifacts/";
/// Folder of the data dir where uploads are staged.
const IMPORTS_DIR: &str = "imports";
/// Tar block size.
const BLOCK: u64 = 512;

/// One artifact entry of a staged archive: where its bytes are in the staged file.
struct StagedArtifact {
    name: String,
    offset: u64,
    size: u64,
}

impl NodeAgent {
    /// See [`cove_node_api::NodeCheckpoints::export_checkpoint`].
    pub(super) async fn export_archive(
        &self,
        checkpoint_id: &str,
        header: Bytes,
    ) -> Result<ByteStream, NodeError> {
        let store = self.cfg.snapshots.checkpoints();
        let manifest = store
            .manifest(checkpoint_id)
            .await
            .map_err(|e| missing_checkpoint(e, checkpoint_id))?;
        let manifest_json = serde_json::to_vec(&manifest)
            .map_err(|e| NodeError::Internal(format!("manifest: {e}")))?;
        let mut parts: Vec<ByteStream> = vec![
            small_entry(ARCHIVE_HEADER, header)?,
            small_entry(MANIFEST_ENTRY, manifest_json.into())?,
        ];
        for artifact in &manifest.artifacts {
            let (size, body) = store
                .artifact_bytes(checkpoint_id, &artifact.name)
                .await
                .map_err(snapshot_err)?;
            let head = entry_header(&format!("{ARTIFACTS_DIR}{}", artifact.name), size)?;
            parts.push(futures::stream::iter([Ok(head)]).boxed());
            parts.push(body);
            parts.push(futures::stream::iter([Ok(padding(size))]).boxed());
        }
        // The end of a tar: two zero blocks.
        parts.push(futures::stream::iter([Ok(Bytes::from(vec![0u8; 2 * BLOCK as usize]))]).boxed());
        Ok(futures::stream::iter(parts).flatten().boxed())
    }

    /// Removes the staged uploads of imports a restart interrupted; returns how many. Call
    /// only while no import runs (at start-up, with the snapshot sweep).
    pub(super) async fn sweep_imports(&self) -> Result<u64, NodeError> {
        let dir = self.cfg.data_dir.join(IMPORTS_DIR);
        let io = |e: std::io::Error| NodeError::Internal(format!("sweep {}: {e}", dir.display()));
        let mut entries = match tokio::fs::read_dir(&dir).await {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io(e)),
        };
        let mut removed = 0;
        while let Some(entry) = entries.next_entry().await.map_err(io)? {
            tokio::fs::remove_file(entry.path()).await.map_err(io)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// See [`cove_node_api::NodeCheckpoints::import_checkpoint`].
    pub(super) async fn import_archive(
        &self,
        checkpoint_id: &str,
        body: ByteStream,
        max_bytes: u64,
        cancel: &CancellationToken,
    ) -> Result<ImportedCheckpoint, NodeError> {
        let dir = self.cfg.data_dir.join(IMPORTS_DIR);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| NodeError::Internal(format!("create {}: {e}", dir.display())))?;
        let staged = dir.join(format!("{checkpoint_id}.tar"));
        let result = self
            .import_staged(checkpoint_id, &staged, body, max_bytes, cancel)
            .await;
        let _ = tokio::fs::remove_file(&staged).await;
        if result.is_err() {
            let _ = self.cfg.snapshots.checkpoints().delete(checkpoint_id).await;
        }
        result
    }

    async fn import_staged(
        &self,
        checkpoint_id: &str,
        staged: &Path,
        mut body: ByteStream,
        max_bytes: u64,
        cancel: &CancellationToken,
    ) -> Result<ImportedCheckpoint, NodeError> {
        let io = |e: std::io::Error| NodeError::Internal(format!("stage an import: {e}"));
        let mut file = tokio::fs::File::create(staged).await.map_err(io)?;
        let mut total = 0u64;
        loop {
            let chunk = tokio::select! {
                c = body.next() => c,
                () = cancel.cancelled() => return Err(NodeError::Cancelled),
            };
            let Some(chunk) = chunk else { break };
            let chunk = chunk.map_err(|e| NodeError::InvalidArgument {
                field: "archive".into(),
                message: format!("reading the upload failed: {e}"),
            })?;
            total += chunk.len() as u64;
            if total > max_bytes {
                return Err(NodeError::TooLarge(format!(
                    "the archive is larger than {max_bytes} bytes"
                )));
            }
            if let Err(e) = file.write_all(&chunk).await {
                if e.raw_os_error() == Some(libc::ENOSPC) {
                    return Err(NodeError::NoSpace("the node's disk is full".into()));
                }
                return Err(io(e));
            }
        }
        file.flush().await.map_err(io)?;
        drop(file);

        let path = staged.to_path_buf();
        let kind = self.runtime.kind().as_str().to_string();
        let known: Vec<String> = self
            .runtime
            .snapshot_artifacts()
            .iter()
            .map(|a| a.name.to_string())
            .collect();
        let (header, manifest, artifacts) =
            tokio::task::spawn_blocking(move || read_layout(&path, &kind, &known))
                .await
                .map_err(|e| NodeError::Internal(e.to_string()))??;

        // Every artifact is checked before any is stored.
        let mut file_bytes = 0;
        for a in &artifacts {
            let input = range_reader(staged, a.offset, a.size).map_err(io)?;
            let bytes = self
                .runtime
                .check_artifact(&a.name, Box::new(input))
                .await
                .map_err(|e| refused(&format!("artifact {}: {e}", a.name)))?;
            let memory = self
                .runtime
                .snapshot_artifacts()
                .iter()
                .any(|s| s.name == a.name && s.memory);
            if !memory {
                file_bytes += bytes;
            }
        }
        let store = self.cfg.snapshots.checkpoints();
        store.delete(checkpoint_id).await.map_err(snapshot_err)?;
        for a in &artifacts {
            let (offset, size) = (a.offset, a.size);
            let path = staged.to_path_buf();
            store
                .save_artifact(checkpoint_id, &a.name, cancel, |mut out| async move {
                    tokio::task::spawn_blocking(move || {
                        let mut input = range_reader(&path, offset, size)?;
                        std::io::copy(&mut input, &mut out)?;
                        std::io::Write::flush(&mut out)?;
                        Ok(size)
                    })
                    .await
                    .map_err(std::io::Error::other)?
                })
                .await
                .map_err(snapshot_err)?;
        }
        store
            .commit(checkpoint_id, &manifest)
            .await
            .map_err(snapshot_err)?;
        info!(checkpoint_id, file_bytes, "checkpoint imported");
        Ok(ImportedCheckpoint {
            header,
            runtime: manifest.runtime.clone(),
            file_bytes,
            memory: manifest.memory,
        })
    }
}

/// Reads the staged archive's entries: the header, the manifest (of runtime `kind`, naming
/// only artifacts in `known`), then each artifact in the manifest's order; anything else is
/// refused.
fn read_layout(
    path: &Path,
    kind: &str,
    known: &[String],
) -> Result<(Bytes, Manifest, Vec<StagedArtifact>), NodeError> {
    let file = std::fs::File::open(path).map_err(|e| NodeError::Internal(e.to_string()))?;
    let mut archive = tar::Archive::new(file);
    let mut entries = archive
        .entries()
        .map_err(|e| refused(&format!("not a tar archive: {e}")))?;
    let mut next = |what: &str| -> Result<(String, u64, u64, Vec<u8>), NodeError> {
        let mut entry = entries
            .next()
            .ok_or_else(|| refused(&format!("it ends before {what}")))?
            .map_err(|e| refused(&format!("unreadable entry: {e}")))?;
        let kind = entry.header().entry_type();
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if !matches!(kind, tar::EntryType::Regular | tar::EntryType::Continuous) {
            return Err(refused(&format!("entry {name:?} is not a regular file")));
        }
        let size = entry.size();
        let offset = entry.raw_file_position();
        let mut small = Vec::new();
        if what != "an artifact" {
            if size > ARCHIVE_HEADER_MAX_BYTES {
                return Err(refused(&format!("entry {name:?} is too large")));
            }
            entry
                .read_to_end(&mut small)
                .map_err(|e| refused(&format!("unreadable entry {name:?}: {e}")))?;
        }
        Ok((name, offset, size, small))
    };
    let (name, _, _, header) = next(ARCHIVE_HEADER)?;
    if name != ARCHIVE_HEADER {
        return Err(refused(&format!(
            "the first entry must be {ARCHIVE_HEADER}, not {name:?}"
        )));
    }
    let (name, _, _, manifest) = next(MANIFEST_ENTRY)?;
    if name != MANIFEST_ENTRY {
        return Err(refused(&format!(
            "the second entry must be {MANIFEST_ENTRY}, not {name:?}"
        )));
    }
    let manifest: Manifest = serde_json::from_slice(&manifest)
        .map_err(|e| refused(&format!("unreadable {MANIFEST_ENTRY}: {e}")))?;
    if manifest.version != MANIFEST_VERSION {
        return Err(refused(&format!(
            "manifest version {} is not {MANIFEST_VERSION}",
            manifest.version
        )));
    }
    if manifest.runtime != kind {
        return Err(refused(&format!(
            "taken by runtime {}, this node runs {kind}",
            manifest.runtime
        )));
    }
    let mut artifacts = Vec::new();
    for a in &manifest.artifacts {
        if !known.contains(&a.name) || artifacts.iter().any(|s: &StagedArtifact| s.name == a.name) {
            return Err(refused(&format!("unknown artifact {:?}", a.name)));
        }
        let (name, offset, size, _) = next("an artifact")?;
        if name != format!("{ARTIFACTS_DIR}{}", a.name) {
            return Err(refused(&format!(
                "entry {name:?} is not artifact {}",
                a.name
            )));
        }
        artifacts.push(StagedArtifact {
            name: a.name.clone(),
            offset,
            size,
        });
    }
    if let Some(extra) = entries.next() {
        let name = extra
            .map(|e| String::from_utf8_lossy(&e.path_bytes()).into_owned())
            .unwrap_or_default();
        return Err(refused(&format!(
            "unexpected entry {name:?} after the artifacts"
        )));
    }
    Ok((Bytes::from(header), manifest, artifacts))
}

/// A blocking reader of `size` bytes at `offset` of the file at `path`.
fn range_reader(path: &Path, offset: u64, size: u64) -> std::io::Result<impl Read + Send> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    Ok(file.take(size))
}

/// A tar entry of `data` named `name`.
fn small_entry(name: &str, data: Bytes) -> Result<ByteStream, NodeError> {
    let size = data.len() as u64;
    let head = entry_header(name, size)?;
    Ok(futures::stream::iter([Ok(head), Ok(data), Ok(padding(size))]).boxed())
}

/// The 512-byte header of a regular file entry of `size` bytes.
fn entry_header(name: &str, size: u64) -> Result<Bytes, NodeError> {
    let mut h = tar::Header::new_ustar();
    h.set_path(name)
        .map_err(|e| NodeError::Internal(format!("archive entry {name}: {e}")))?;
    h.set_size(size);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mtime(0);
    h.set_cksum();
    Ok(Bytes::copy_from_slice(h.as_bytes()))
}

/// Zeros that pad an entry of `size` bytes to a whole block.
fn padding(size: u64) -> Bytes {
    let rest = (BLOCK - size % BLOCK) % BLOCK;
    Bytes::from(vec![0u8; rest as usize])
}

fn refused(message: &str) -> NodeError {
    NodeError::InvalidArgument {
        field: "archive".into(),
        message: format!("archive refused: {message}"),
    }
}

fn missing_checkpoint(e: SnapshotError, checkpoint_id: &str) -> NodeError {
    match e {
        SnapshotError::Missing(_) => NodeError::InvalidArgument {
            field: "checkpoint".into(),
            message: format!("checkpoint {checkpoint_id} is not in the snapshot store"),
        },
        other => snapshot_err(other),
    }
}
