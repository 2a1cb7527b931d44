//! The step trees of a file build and their cache.
//!
//! A step that changes files (`RUN`, `COPY`, `WORKDIR`) produces a whole tree at
//! `<cache>/<key>/rootfs`, where the key is the hex SHA-256 of the previous step's key, the
//! step and the context files it reads ([`step_key`]). The tree is a hard-link copy of its
//! parent's tree with the step's changes applied by create-and-rename (`layer.rs`), so a step
//! costs the files it changes plus one directory entry per file, and a tree is never written
//! once published (an overlay lower directory, or the parent of a later copy). Published by
//! rename, so a reader sees a whole tree or none, and never replaced (a rerun with `no_cache`
//! publishes beside the old tree). Each use marks the entry; `layer_gc.rs` removes the least
//! recently used entries when the cache outgrows its bound.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::command::Events;
use super::guard::Guard;
use super::oci::OciArchive;
use super::staging::Staging;
use super::{
    cache, context, digest, files, layer, layer_gc, oci, BuildError, BuildEvent, TemplateDefaults,
};

/// Time bound of one step's blocking work on tenant bytes (a build's own deadline is an hour;
/// its cancellation stops the work sooner).
const STEP_TIME: std::time::Duration = std::time::Duration::from_secs(3600);

/// The cache key of a step: hex SHA-256 of `parent_key`, the step's canonical text and what it
/// reads (the context hash of a `COPY`; empty otherwise).
pub fn step_key(parent_key: &str, step: &str, reads: &str) -> String {
    let mut h = Sha256::new();
    for part in [parent_key, step, reads] {
        h.update(part.as_bytes());
        h.update(b"\0");
    }
    format!("{:x}", h.finalize())
}

/// How a step changes its parent's tree.
#[derive(Debug, Clone)]
pub enum StepTree {
    /// Apply a layer tar (a sandbox's changed files, see `layer.rs`) from this file.
    Layer(PathBuf),
    /// Copy context entries (relative to the unpacked context dir, or to an earlier stage's
    /// tree) to an absolute destination.
    Copy {
        /// The unpacked context, or the stage's tree.
        context: PathBuf,
        /// Source paths in it.
        sources: Vec<String>,
        /// Absolute destination in the tree.
        dest: String,
        /// `--chown=USER[:GROUP]` (names resolve in the tree being built).
        chown: Option<String>,
        /// `--chmod=OCTAL`.
        chmod: Option<u32>,
    },
    /// Create this absolute directory (and its parents) if missing.
    Mkdir(String),
}

/// The step cache of a node (`<dir>/<key>/rootfs`).
#[derive(Debug, Clone)]
pub struct LayerCache {
    dir: PathBuf,
}

impl LayerCache {
    /// A cache in `dir` (created on first use).
    pub fn new(dir: PathBuf) -> Self {
        LayerCache { dir }
    }

    /// The tree of step `key`, if it was built before.
    pub fn lookup(&self, key: &str) -> Option<PathBuf> {
        let entry = self.dir.join(key);
        let tree = entry.join("rootfs");
        if !tree.is_dir() {
            return None;
        }
        layer_gc::touch(&entry);
        Some(tree)
    }

    /// Builds the tree of step `key` from `parent` and `change`, publishes it (replacing an
    /// older tree of the key) and returns its path.
    ///
    /// # Errors
    /// The step's failure ([`BuildError::Failed`], `Io`, `Cancelled`); nothing is published.
    pub async fn produce(
        &self,
        key: &str,
        parent: &Path,
        change: StepTree,
        events: mpsc::Sender<BuildEvent>,
        cancel: CancellationToken,
    ) -> Result<PathBuf, BuildError> {
        std::fs::create_dir_all(&self.dir).map_err(files::io(&self.dir, "create"))?;
        let entry = self.dir.join(key);
        let mut events = Events::new(events, cancel);
        let staging = Staging::beside(&entry, "step")?;
        let rootfs = staging.rootfs();
        let built = async {
            cache::copy_tree(parent, &rootfs, &mut events).await?;
            events.check_cancelled()?;
            let dir = rootfs.clone();
            let guard = Guard::new(
                events.cancel().clone(),
                "the step's changes",
                layer::MAX_LAYER_BYTES,
                STEP_TIME,
            );
            tokio::task::spawn_blocking(move || apply(&dir, change, &guard))
                .await
                .map_err(|e| BuildError::Failed {
                    step: "apply".into(),
                    detail: e.to_string(),
                })?
        }
        .await;
        if let Err(e) = built {
            staging.discard().await;
            return Err(e);
        }
        let published = self.publish(staging, &entry).await?;
        layer_gc::touch(&published);
        Ok(published.join("rootfs"))
    }
}

impl LayerCache {
    /// The tree and defaults of the OCI image archive `archive` (opened by
    /// `template::open_archive` in the operator's import directory; see `oci.rs`), imported
    /// once per archive content: the key is the hex SHA-256 of the archive's bytes. Hashing
    /// and unpacking stop within a chunk when `cancel` fires.
    ///
    /// # Errors
    /// [`BuildError::Failed`] for an archive that is not an image; `Cancelled`; `Io`.
    pub async fn import_oci(
        &self,
        archive: OciArchive,
        no_cache: bool,
        cancel: CancellationToken,
    ) -> Result<(PathBuf, TemplateDefaults, String), BuildError> {
        std::fs::create_dir_all(&self.dir).map_err(files::io(&self.dir, "create"))?;
        let dir = self.dir.clone();
        let join = |e: tokio::task::JoinError| BuildError::Failed {
            step: "oci import".into(),
            detail: e.to_string(),
        };
        let guard = Guard::new(cancel, "the image import", u64::MAX, STEP_TIME);
        let key = {
            let (archive, guard) = (archive.clone(), guard.clone());
            tokio::task::spawn_blocking(move || archive.sha256(&guard))
                .await
                .map_err(join)??
        };
        let key = format!("oci-{key}");
        let entry = dir.join(&key);
        let read_defaults = |entry: &Path| -> Option<TemplateDefaults> {
            let bytes = std::fs::read(oci::defaults_path(entry)).ok()?;
            let (user, workdir, env) = serde_json::from_slice(&bytes).ok()?;
            Some(TemplateDefaults { user, workdir, env })
        };
        if !no_cache {
            if let (true, Some(d)) = (entry.join("rootfs").is_dir(), read_defaults(&entry)) {
                layer_gc::touch(&entry);
                return Ok((entry.join("rootfs"), d, key));
            }
        }
        let staging = Staging::beside(&entry, "import")?;
        let rootfs = staging.rootfs();
        let whole = rootfs.parent().map(Path::to_path_buf).unwrap_or_default();
        let imported = tokio::task::spawn_blocking(move || {
            let d = oci::import(&archive, &rootfs, &guard)?;
            let json = serde_json::to_vec(&(&d.user, &d.workdir, &d.env)).map_err(|e| {
                BuildError::Failed {
                    step: "oci import".into(),
                    detail: e.to_string(),
                }
            })?;
            let path = oci::defaults_path(&whole);
            std::fs::write(&path, json).map_err(files::io(&path, "write"))?;
            Ok::<_, BuildError>(d)
        })
        .await
        .map_err(join)?;
        let d = match imported {
            Ok(d) => d,
            Err(e) => {
                staging.discard().await;
                return Err(e);
            }
        };
        let published = self.publish(staging, &entry).await?;
        layer_gc::touch(&published);
        Ok((published.join("rootfs"), d, key))
    }
}

impl LayerCache {
    /// Publishes `staging` as `entry`, never replacing a published entry (a running step may
    /// have it as its lower directory, a copy may be reading it): a rerun of a cached step
    /// (`no_cache`) is published beside it under a unique name, and losing a race to another
    /// build of the same key keeps the other's (equivalent) tree. Returns the entry used.
    async fn publish(&self, staging: Staging, entry: &Path) -> Result<PathBuf, BuildError> {
        if entry.exists() {
            let name = entry
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let beside = self
                .dir
                .join(format!("{name}.{:016x}", rand::random::<u64>()));
            staging.publish(&beside, true).await?;
            return Ok(beside);
        }
        match staging.publish(entry, true).await {
            Ok(()) => Ok(entry.to_path_buf()),
            Err(_) if entry.join("rootfs").is_dir() => Ok(entry.to_path_buf()),
            Err(e) => Err(e),
        }
    }
}

fn apply(root: &Path, change: StepTree, guard: &Guard) -> Result<(), BuildError> {
    match change {
        StepTree::Layer(tar) => {
            // The node's own file (the runtime wrote it); its content is the tenant's.
            let f = std::fs::File::open(&tar).map_err(files::io(&tar, "open"))?;
            layer::apply_layer(root, std::io::BufReader::new(f), guard).map(drop)
        }
        StepTree::Copy {
            context,
            sources,
            dest,
            chown,
            chmod,
        } => {
            let owner = match &chown {
                Some(spec) => context::resolve_owner(root, spec)?,
                None => (0, 0),
            };
            let attrs = context::CopyAttrs { owner, mode: chmod };
            context::copy_into(root, &context, &sources, &dest, attrs, guard)
        }
        StepTree::Mkdir(dir) => context::mkdir_in(root, &dir),
    }
}

/// Unpacks a build context tar into `dir` (see `context.rs`).
///
/// # Errors
/// [`BuildError::Failed`] for a bad archive.
pub async fn unpack_context(
    archive: bytes::Bytes,
    dir: PathBuf,
    cancel: CancellationToken,
) -> Result<(), BuildError> {
    let guard = Guard::new(
        cancel,
        "the build context",
        layer::MAX_LAYER_BYTES,
        STEP_TIME,
    );
    tokio::task::spawn_blocking(move || context::unpack(&archive, &dir, &guard))
        .await
        .map_err(|e| BuildError::Failed {
            step: "context".into(),
            detail: e.to_string(),
        })?
}

/// Hex SHA-256 of the context entries `sources` name (see `context.rs`).
///
/// # Errors
/// [`BuildError::Failed`] naming a source that is not in the context.
pub async fn hash_sources(
    context: PathBuf,
    sources: Vec<String>,
    cancel: CancellationToken,
) -> Result<String, BuildError> {
    // Hard links in a context could make a small upload read terabytes: bounded.
    let guard = Guard::new(
        cancel,
        "the COPY sources",
        layer::MAX_LAYER_BYTES,
        STEP_TIME,
    );
    tokio::task::spawn_blocking(move || context::hash_sources(&context, &sources, &guard))
        .await
        .map_err(|e| BuildError::Failed {
            step: "context".into(),
            detail: e.to_string(),
        })?
}

/// Copies the final step tree to `dest` (a release's `rootfs`, which must not exist) and
/// measures it: apparent size in bytes and the digest over it, `defaults` and `extra` default
/// lines.
///
/// # Errors
/// `Io`/`Failed` when copying or reading the tree.
pub async fn publish_release(
    tree: &Path,
    dest: &Path,
    defaults: TemplateDefaults,
    extra: Vec<String>,
    events: mpsc::Sender<BuildEvent>,
    cancel: CancellationToken,
) -> Result<(u64, String), BuildError> {
    let mut events = Events::new(events, cancel);
    let staging = Staging::beside(dest, "release")?;
    if let Err(e) = cache::copy_tree(tree, &staging.rootfs(), &mut events).await {
        staging.discard().await;
        return Err(e);
    }
    staging.publish(dest, false).await?;
    let measured = dest.to_path_buf();
    let guard = Guard::new(
        events.cancel().clone(),
        "the release tree",
        u64::MAX,
        STEP_TIME,
    );
    tokio::task::spawn_blocking(move || {
        Ok::<_, BuildError>((
            files::tree_size(&measured)?,
            digest::digest_with(&measured, &defaults, &extra, &guard)?,
        ))
    })
    .await
    .map_err(|e| BuildError::Failed {
        step: "measure".to_string(),
        detail: e.to_string(),
    })?
}
