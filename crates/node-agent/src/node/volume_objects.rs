//! Object volumes on this node: their images moved to and from the snapshot store
//! (`volumes/<volume id>/<generation>`, [`crate::snapshot::SnapshotStore::volumes`]).
//!
//! A stored image is sparse-aware: a header (`COVEVOL1`, then the image size, u64
//! little-endian), then one record per non-zero block of [`BLOCK_BYTES`] (its offset and
//! length, u64 little-endian, then its bytes), then an end mark (offset `u64::MAX`). An empty
//! 1 GiB volume is a few MiB stored, and the download writes only the blocks it gets, so the
//! node's copy is sparse again.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use cove_node_api::NodeError;
use tokio_util::sync::CancellationToken;

use super::{runtime_err, NodeAgent};
use crate::snapshot::SnapshotError;

/// Magic of a stored volume image.
const MAGIC: &[u8; 8] = b"COVEVOL1";
/// Unit of the sparse encoding (1 MiB).
const BLOCK_BYTES: usize = 1 << 20;
/// Offset of the end mark.
const END: u64 = u64::MAX;

fn join_err(e: tokio::task::JoinError) -> NodeError {
    NodeError::Internal(format!("volume task: {e}"))
}

fn store_err(id: &str, generation: u64, e: SnapshotError) -> NodeError {
    match e {
        SnapshotError::Missing(_) => NodeError::FileNotFound(format!(
            "generation {generation} of volume {id} is not in the snapshot store"
        )),
        SnapshotError::Io(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
            NodeError::NoSpace("the node's disk is full".into())
        }
        e => NodeError::Internal(format!("volume {id} generation {generation}: {e}")),
    }
}

/// Writes image `path` in the stored encoding to `out`; returns the bytes written.
fn encode(path: &Path, mut out: impl Write) -> std::io::Result<u64> {
    let mut file = File::open(path)?;
    let size = file.metadata()?.len();
    out.write_all(MAGIC)?;
    out.write_all(&size.to_le_bytes())?;
    let mut written = 16u64;
    let mut buf = vec![0u8; BLOCK_BYTES];
    let mut offset = 0u64;
    while offset < size {
        let want = (size - offset).min(BLOCK_BYTES as u64) as usize;
        file.read_exact(&mut buf[..want])?;
        let block = &buf[..want];
        if block.iter().any(|b| *b != 0) {
            out.write_all(&offset.to_le_bytes())?;
            out.write_all(&(want as u64).to_le_bytes())?;
            out.write_all(block)?;
            written += 16 + want as u64;
        }
        offset += want as u64;
    }
    out.write_all(&END.to_le_bytes())?;
    out.write_all(&0u64.to_le_bytes())?;
    out.flush()?;
    Ok(written + 16)
}

fn read_u64(input: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    input.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("stored volume image: {what}"),
    )
}

/// Writes the image encoded in `input` to a new sparse file `path`, fsync'd; returns the
/// bytes read.
fn decode(mut input: impl Read, path: &Path) -> std::io::Result<u64> {
    let mut magic = [0u8; 8];
    input.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(bad("unknown format"));
    }
    let size = read_u64(&mut input)?;
    let mut file = File::create(path)?;
    file.set_len(size)?;
    let mut read = 16u64;
    let mut buf = vec![0u8; BLOCK_BYTES];
    loop {
        let offset = read_u64(&mut input)?;
        let len = read_u64(&mut input)?;
        read += 16;
        if offset == END {
            break;
        }
        let end = offset
            .checked_add(len)
            .ok_or_else(|| bad("block overflows"))?;
        if len as usize > BLOCK_BYTES || end > size {
            return Err(bad("block out of the image"));
        }
        input.read_exact(&mut buf[..len as usize])?;
        file.seek(SeekFrom::Start(offset))?;
        file.write_all(&buf[..len as usize])?;
        read += len;
    }
    file.sync_all()?;
    Ok(read)
}

impl NodeAgent {
    /// See [`cove_node_api::NodeVolumes::download_volume`].
    pub(super) async fn fetch_volume(
        &self,
        id: &str,
        size_mib: u64,
        generation: u64,
    ) -> Result<(), NodeError> {
        let disks = self.volumes.clone();
        if generation == 0 {
            let id_owned = id.to_string();
            return tokio::task::spawn_blocking(move || {
                disks.remove(&id_owned)?;
                disks.create(&id_owned, size_mib)
            })
            .await
            .map_err(join_err)?
            .map_err(runtime_err);
        }
        let staged = disks.staging_path(id).map_err(runtime_err)?;
        let store = self.cfg.snapshots.volumes();
        let cancel = CancellationToken::new();
        let target = staged.clone();
        let fetched = store
            .restore_artifact(id, &generation.to_string(), &cancel, |input| async move {
                tokio::task::spawn_blocking(move || decode(input, &target))
                    .await
                    .map_err(std::io::Error::other)?
            })
            .await;
        let installed = match fetched {
            Ok(bytes) => {
                let id_owned = id.to_string();
                let staged = staged.clone();
                tokio::task::spawn_blocking(move || disks.install(&id_owned, &staged))
                    .await
                    .map_err(join_err)?
                    .map_err(runtime_err)
                    .map(|()| bytes)
            }
            Err(e) => Err(store_err(id, generation, e)),
        };
        if installed.is_err() {
            let _ = std::fs::remove_file(&staged);
        }
        let bytes = installed?;
        tracing::info!(volume_id = %id, generation, stored_bytes = bytes, "volume downloaded");
        Ok(())
    }

    /// See [`cove_node_api::NodeVolumes::upload_volume`].
    pub(super) async fn store_volume(&self, id: &str, generation: u64) -> Result<u64, NodeError> {
        let disks = self.volumes.clone();
        if !disks.exists(id) {
            return Err(NodeError::FileNotFound(format!(
                "volume {id} is not on this node"
            )));
        }
        let id_owned = id.to_string();
        let image = tokio::task::spawn_blocking(move || {
            disks.unmount(&id_owned)?;
            let image = disks.image_path(&id_owned);
            File::open(&image).and_then(|f| f.sync_all()).map_err(|e| {
                cove_runtime::RuntimeError::Io {
                    context: format!("sync {}", image.display()),
                    source: e,
                }
            })?;
            Ok::<_, cove_runtime::RuntimeError>(image)
        })
        .await
        .map_err(join_err)?
        .map_err(runtime_err)?;
        let store = self.cfg.snapshots.volumes();
        let cancel = CancellationToken::new();
        let bytes = store
            .save_artifact(id, &generation.to_string(), &cancel, |out| async move {
                tokio::task::spawn_blocking(move || encode(&image, out))
                    .await
                    .map_err(std::io::Error::other)?
            })
            .await
            .map_err(|e| store_err(id, generation, e))?;
        tracing::info!(volume_id = %id, generation, stored_bytes = bytes, "volume uploaded");
        Ok(bytes)
    }

    /// See [`cove_node_api::NodeVolumes::release_volume`]; `keep: None` drops every stored
    /// generation (a delete).
    pub(super) async fn drop_volume(&self, id: &str, keep: Option<u64>) -> Result<(), NodeError> {
        let disks = self.volumes.clone();
        let id_owned = id.to_string();
        tokio::task::spawn_blocking(move || {
            disks.remove(&id_owned)?;
            // What an interrupted download left.
            let staged = disks.staging_path(&id_owned)?;
            match std::fs::remove_file(&staged) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(cove_runtime::RuntimeError::Io {
                        context: format!("remove {}", staged.display()),
                        source: e,
                    })
                }
                _ => Ok(()),
            }
        })
        .await
        .map_err(join_err)?
        .map_err(runtime_err)?;
        let store = self.cfg.snapshots.volumes();
        match keep {
            Some(g) => store.delete_except(id, &g.to_string()).await,
            None => store.delete(id).await,
        }
        .map_err(|e| NodeError::Internal(format!("volume {id}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_round_trips_sparse() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = dir.path().join("src.img");
        let mut f = File::create(&src).expect("create");
        f.set_len(5 * BLOCK_BYTES as u64 + 17).expect("size");
        f.seek(SeekFrom::Start(3 * BLOCK_BYTES as u64 + 5))
            .expect("seek");
        f.write_all(b"hello").expect("write");
        f.seek(SeekFrom::Start(5 * BLOCK_BYTES as u64 + 10))
            .expect("seek");
        f.write_all(b"tail").expect("write");
        drop(f);
        let mut stored = Vec::new();
        let n = encode(&src, &mut stored).expect("encode");
        assert_eq!(n, stored.len() as u64);
        // Two non-zero blocks, the header and the end mark.
        assert_eq!(n, 16 + (16 + BLOCK_BYTES as u64) + (16 + 17) + 16);
        let dst = dir.path().join("dst.img");
        assert_eq!(decode(&stored[..], &dst).expect("decode"), n);
        assert_eq!(
            std::fs::read(&src).expect("src"),
            std::fs::read(&dst).expect("dst")
        );
        assert!(decode(&b"NOTCOVE!"[..], &dst).is_err());
    }
}
