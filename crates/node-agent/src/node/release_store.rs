//! Releases built from a file in the snapshot store, so a node that lacks one fetches it.
//!
//! Layout: `releases/<digest hex>/rootfs.tar` (the tree, packed as the runc runtime packs a
//! sandbox's files: owners, modes, links, devices, extended attributes) and then
//! `release.json` ([`StoredRelease`]: the defaults and extra lines the digest covers, and the
//! root directory's mode and owner, which the tar does not carry). The manifest is written
//! last, so its presence means the tree is complete. Keyed by digest: two releases built from
//! the same inputs share one copy.
//!
//! Only a node whose snapshot store is shared keeps releases there ([`NodeConfig`]'s
//! `share_releases`: a store given by URL, as every node of a cluster is started with); a
//! single server with its default local store skips the upload, which would only cost time
//! and disk. Built-in recipes are never stored: every node builds them from its own cache.
//!
//! A fetch unpacks into a staging directory beside the release, recomputes the digest over
//! the unpacked tree and the stored defaults, and renames the tree into place only when it
//! matches the digest the control plane recorded at build time; otherwise the staging
//! directory goes and the create fails with [`NodeError::ReleaseCorrupt`].

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;

use cove_runtime::runc::snapshot::{pack, unpack};
use serde::{Deserialize, Serialize};

use super::*;
use crate::snapshot::SnapshotError;
use crate::template::TemplateDefaults;

/// Object of the packed tree.
const TREE: &str = "rootfs.tar";
/// Object of the manifest (written last).
const MANIFEST: &str = "release.json";
/// Version of [`StoredRelease`]'s format.
const STORED_VERSION: u32 = 1;

/// What `release.json` holds besides the tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StoredRelease {
    /// [`STORED_VERSION`].
    version: u32,
    /// Default user (part of the digest).
    user: String,
    /// Default working directory (part of the digest).
    workdir: String,
    /// Environment (part of the digest).
    env: BTreeMap<String, String>,
    /// The digest manifest's extra lines (`start=…`, `ready=…`).
    extra: Vec<String>,
    /// Permission bits of the tree's root directory.
    root_mode: u32,
    /// Owner of the root directory.
    root_uid: u32,
    /// Group of the root directory.
    root_gid: u32,
}

/// The 64 hex digits of a `sha256:` digest (the store key), or `InvalidArgument`.
fn digest_hex(digest: &str) -> Result<&str, NodeError> {
    digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| NodeError::InvalidArgument {
            field: "digest".into(),
            message: format!("{digest:?} is not sha256: and 64 hex digits"),
        })
}

/// `ReleaseCorrupt`: `what` (the release) and why.
fn corrupt(what: &str, why: String) -> NodeError {
    NodeError::ReleaseCorrupt(format!("{what} {why}"))
}

fn store_err(e: SnapshotError) -> NodeError {
    match e {
        SnapshotError::Cancelled => NodeError::Cancelled,
        other => NodeError::Internal(format!("release store: {other}")),
    }
}

impl NodeAgent {
    /// Keeps the release tree at `rootfs` with `digest` in the snapshot store (when the store
    /// is shared, see the module doc; a copy already there is kept as it is).
    ///
    /// # Errors
    /// `Internal` when the store fails, `Cancelled`.
    pub(super) async fn store_release(
        &self,
        rootfs: &Path,
        digest: &str,
        defaults: TemplateDefaults,
        extra: Vec<String>,
        cancel: &CancellationToken,
    ) -> Result<bool, NodeError> {
        if !self.cfg.share_releases {
            return Ok(false);
        }
        let hex = digest_hex(digest)?;
        let store = self.cfg.snapshots.releases();
        match store.object(hex, MANIFEST).await {
            Ok(_) => return Ok(true),
            Err(SnapshotError::Missing(_)) => {}
            Err(e) => return Err(store_err(e)),
        }
        let meta = tokio::fs::metadata(rootfs)
            .await
            .map_err(|e| NodeError::Internal(format!("stat {}: {e}", rootfs.display())))?;
        let root = rootfs.to_path_buf();
        store
            .save_artifact(hex, TREE, cancel, |w| async move {
                tokio::task::spawn_blocking(move || pack(&root, w))
                    .await
                    .map_err(std::io::Error::other)?
            })
            .await
            .map_err(store_err)?;
        let manifest = StoredRelease {
            version: STORED_VERSION,
            user: defaults.user,
            workdir: defaults.workdir,
            env: defaults.env,
            extra,
            root_mode: meta.mode() & 0o7777,
            root_uid: meta.uid(),
            root_gid: meta.gid(),
        };
        let body = serde_json::to_vec(&manifest)
            .map_err(|e| NodeError::Internal(format!("release manifest: {e}")))?;
        store
            .put_object(hex, MANIFEST, body.into())
            .await
            .map_err(store_err)?;
        info!(digest, "release stored for other nodes");
        Ok(true)
    }

    /// Fetches release `number` of `template` with `digest` from the snapshot store into the
    /// node's releases, checking the digest. Concurrent fetches on the node take turns, and a
    /// release another fetch brought meanwhile is not fetched again.
    ///
    /// # Errors
    /// `ReleaseNotFound` when the store has no copy; `ReleaseCorrupt` when the copy cannot be
    /// read back or does not match `digest` (nothing of it is kept); `Internal`.
    pub(super) async fn fetch_release(
        &self,
        template: &str,
        number: u32,
        digest: &str,
    ) -> Result<(), NodeError> {
        let hex = digest_hex(digest)?;
        let _turn = self.fetching.lock().await;
        let dest = self.release_dir(template, number);
        if tokio::fs::metadata(dest.join("rootfs")).await.is_ok() {
            return Ok(());
        }
        let store = self.cfg.snapshots.releases();
        let what = format!("release {number} of {template} in the snapshot store");
        let corrupt = |why: String| corrupt(&what, why);
        let manifest: StoredRelease = match store.object(hex, MANIFEST).await {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| corrupt(format!("has an unreadable manifest: {e}")))?,
            Err(SnapshotError::Missing(_)) => {
                return Err(NodeError::ReleaseNotFound(format!(
                    "release {number} of {template} is neither on this node nor in the snapshot \
                     store"
                )))
            }
            Err(e) => return Err(store_err(e)),
        };
        if manifest.version != STORED_VERSION {
            return Err(corrupt(format!(
                "has manifest version {}",
                manifest.version
            )));
        }
        let parent = dest
            .parent()
            .ok_or_else(|| NodeError::Internal("release dir has no parent".into()))?
            .to_path_buf();
        let staging = parent.join(format!(".fetch-{number}-{:08x}", rand::random::<u32>()));
        let fetched = self
            .fetch_into(&staging, hex, digest, manifest, &what)
            .await;
        let placed = match fetched {
            Ok(()) => match tokio::fs::rename(&staging, &dest).await {
                Ok(()) => Ok(()),
                Err(e) => Err(NodeError::Internal(format!(
                    "rename {} to {}: {e}",
                    staging.display(),
                    dest.display()
                ))),
            },
            Err(e) => Err(e),
        };
        if placed.is_err() {
            let _ = Self::remove_tree(&staging).await;
        }
        if placed.is_ok() {
            info!(
                template,
                number, digest, "release fetched from the snapshot store"
            );
        }
        placed
    }

    /// Unpacks the stored tree into `staging/rootfs` and checks it against `digest`.
    async fn fetch_into(
        &self,
        staging: &Path,
        hex: &str,
        digest: &str,
        manifest: StoredRelease,
        what: &str,
    ) -> Result<(), NodeError> {
        let corrupt = |why: String| corrupt(what, why);
        let root = staging.join("rootfs");
        let internal = |e: std::io::Error| NodeError::Internal(format!("fetch a release: {e}"));
        tokio::fs::create_dir_all(&root).await.map_err(internal)?;
        std::os::unix::fs::chown(&root, Some(manifest.root_uid), Some(manifest.root_gid))
            .map_err(internal)?;
        std::fs::set_permissions(
            &root,
            std::os::unix::fs::PermissionsExt::from_mode(manifest.root_mode),
        )
        .map_err(internal)?;
        let into = root.clone();
        let unpacked = self
            .cfg
            .snapshots
            .releases()
            .restore_artifact(hex, TREE, &CancellationToken::new(), |r| async move {
                tokio::task::spawn_blocking(move || unpack(r, &into))
                    .await
                    .map_err(std::io::Error::other)?
            })
            .await;
        match unpacked {
            Ok(_) => {}
            Err(SnapshotError::Io(e)) => return Err(corrupt(format!("cannot be unpacked: {e}"))),
            Err(SnapshotError::Missing(_)) => return Err(corrupt("has no tree".into())),
            Err(e) => return Err(store_err(e)),
        }
        let defaults = TemplateDefaults {
            user: manifest.user,
            workdir: manifest.workdir,
            env: manifest.env,
        };
        let extra = manifest.extra;
        let measured = root.clone();
        let got = tokio::task::spawn_blocking(move || {
            template::manifest_digest(&measured, &defaults, &extra)
        })
        .await
        .map_err(|e| NodeError::Internal(format!("digest: {e}")))?
        .map_err(|e| NodeError::Internal(format!("digest: {e}")))?;
        if got != digest {
            warn!(expected = digest, got = %got, "a stored release does not match its digest");
            return Err(corrupt(format!("does not match its digest {digest}")));
        }
        Ok(())
    }

    /// See [`cove_node_api::NodeReleases::remove_stored_release`]. The manifest goes first,
    /// so a half-removed copy is never taken for a whole one.
    pub(super) async fn unstore_release(&self, digest: &str) -> Result<(), NodeError> {
        let hex = digest_hex(digest)?;
        let store = self.cfg.snapshots.releases();
        store
            .delete_object(hex, MANIFEST)
            .await
            .map_err(store_err)?;
        store.delete(hex).await.map_err(store_err)?;
        info!(digest, "stored release removed");
        Ok(())
    }
}
