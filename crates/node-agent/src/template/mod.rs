//! Template builders: turn a recipe into a release root filesystem.
//!
//! [`build_rootfs`] builds a [`Recipe`] into a destination directory. The build happens in a
//! temp dir beside the destination and is renamed into place only on success, so a failed or
//! cancelled build leaves nothing at the destination (and removes its temp dir). With a cache
//! directory, a finished tree is also kept at `<cache_dir>/<name>-<recipe_hash>/rootfs` and later
//! builds of the same recipe copy it instead (see `cache.rs` for the copy strategy).
//!
//! Recipes (`recipe.rs`, the data; `base.rs`, `tiny.rs`, the builders):
//! - `base`: Debian bookworm `minbase` by `mmdebstrap` with bash, python3 (+ `python`, pip,
//!   venv), git, curl, sudo, attr, ncurses-bin (tput), ca-certificates, procps, iproute2 and a
//!   few archivers; a `user` account (uid/gid 1000, home `/home/user`, bash) with passwordless
//!   sudo; no apt lists, caches, manuals or docs. About 25 s and 250 MB here.
//! - `full`: `base` plus build-essential, nodejs and npm, ripgrep, vim-tiny and a virtualenv
//!   of `user` (`/home/user/.venv`) first on `PATH`, so `pip install` works as `user`.
//! - `tiny`: the host's static busybox with an applet symlink each, the standard directories and
//!   `root`/`user`/`nobody` accounts. Milliseconds.
//!
//! Every recipe ends with a placeholder `/etc/hostname`, a localhost-only `/etc/hosts` and an
//! empty `/etc/resolv.conf` (never the build host's).

use std::path::{Path, PathBuf};
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::info;

mod base;
mod cache;
mod command;
mod context;
mod digest;
mod files;
mod guard;
mod layer;
mod layer_gc;
mod oci;
mod recipe;
mod staging;
mod steps;
mod tiny;

pub(crate) use digest::manifest_digest;
pub use layer_gc::{trim as trim_layers, Trimmed};
pub use oci::{open_archive, ArchiveRefused, OciArchive, DEFAULT_MAX_ARCHIVE_BYTES};
pub use recipe::{Recipe, TemplateDefaults};
pub use steps::{hash_sources, publish_release, step_key, unpack_context, LayerCache, StepTree};

use command::Events;
use staging::Staging;

/// What a build reports while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildEvent {
    /// One line of build output.
    Log(String),
    /// Overall progress (never decreasing) and the current phase.
    Progress {
        /// 0–100.
        percent: u8,
        /// Short description of the phase (`downloading packages`, ...).
        phase: String,
    },
}

/// Options of a build.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Keep finished trees here and reuse them (`<cache_dir>/<name>-<recipe_hash>/rootfs`).
    pub cache_dir: Option<PathBuf>,
    /// Debian mirror for `base` (default `http://deb.debian.org/debian`).
    pub mirror: Option<String>,
}

/// A finished build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltRootfs {
    /// Apparent size of the tree's files in bytes (hard links counted once).
    pub size_bytes: u64,
    /// The tree was copied from the cache instead of built.
    pub from_cache: bool,
    /// Content digest of the tree and the recipe's defaults (`sha256:` + hex; see
    /// the `template::digest` module of this crate for the manifest and what is reproducible).
    pub digest: String,
}

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A tool the recipe needs is not installed on the node.
    #[error("{tool} is missing on this node (install it with `{hint}`)")]
    ToolMissing {
        /// The tool.
        tool: String,
        /// How to install it.
        hint: String,
    },
    /// A build step failed.
    #[error("build step {step} failed: {detail}")]
    Failed {
        /// The step (`mmdebstrap`, `copy`, ...).
        step: String,
        /// What went wrong (the tool's last output lines).
        detail: String,
    },
    /// A host I/O error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (may hold a host path; never shown to API clients).
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// An image layer does not match its digest in the image's manifest or config (or has a
    /// digest that is not SHA-256).
    #[error("image layer {layer}: {detail}")]
    InvalidLayer {
        /// The layer's path in the archive.
        layer: String,
        /// What is wrong.
        detail: String,
    },
    /// The build was cancelled.
    #[error("build cancelled")]
    Cancelled,
}

/// Builds `recipe` into `dest` (must not exist; its parent is created if needed). Builds in a
/// temp dir beside dest and renames into place only on success, so a failed build leaves
/// nothing at dest. Cancelling `cancel` kills the build tool and removes the temp dir; so does
/// dropping the future (the removal then finishes on a background thread).
pub async fn build_rootfs(
    recipe: Recipe,
    dest: &Path,
    opts: &BuildOptions,
    events: mpsc::Sender<BuildEvent>,
    cancel: CancellationToken,
) -> Result<BuiltRootfs, BuildError> {
    let began = Instant::now();
    let mut events = Events::new(events, cancel);
    events.check_cancelled()?;
    if dest.symlink_metadata().is_ok() {
        return Err(BuildError::Io {
            context: format!("build destination {}", dest.display()),
            source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        });
    }
    let (parent, _) = staging::split(dest)?;
    std::fs::create_dir_all(parent).map_err(files::io(parent, "create"))?;

    let cached = opts
        .cache_dir
        .as_deref()
        .and_then(|dir| cache::cached_rootfs(dir, recipe));
    let from_cache = cached.is_some();
    let staging = Staging::beside(dest, "build")?;
    let built = match &cached {
        Some(cached) => {
            events.progress(10, "copying from cache").await;
            cache::copy_tree(cached, &staging.rootfs(), &mut events).await
        }
        None => build_fresh(recipe, &staging, opts, &mut events).await,
    };
    if let Err(e) = built.and_then(|()| events.check_cancelled()) {
        staging.discard().await;
        return Err(e);
    }
    if let (None, Some(cache_dir)) = (&cached, &opts.cache_dir) {
        events.progress(96, "filling cache").await;
        match cache::fill(cache_dir, recipe, &staging.rootfs(), &mut events).await {
            Ok(()) => {}
            Err(BuildError::Cancelled) => {
                staging.discard().await;
                return Err(BuildError::Cancelled);
            }
            // The build itself is good; a cache that cannot be filled only costs time later.
            Err(e) => events.log(format!("template cache not filled: {e}")).await,
        }
    }
    staging.publish(dest, false).await?;

    let measured = dest.to_path_buf();
    let defaults = recipe.defaults();
    let (size_bytes, digest) = tokio::task::spawn_blocking(move || {
        Ok::<_, BuildError>((
            files::tree_size(&measured)?,
            digest::release_digest(&measured, &defaults)?,
        ))
    })
    .await
    .map_err(|e| BuildError::Failed {
        step: "measure".to_string(),
        detail: e.to_string(),
    })??;
    events.progress(100, "done").await;
    info!(
        template = recipe.name(),
        from_cache,
        size_bytes,
        elapsed_ms = began.elapsed().as_millis() as u64,
        "template rootfs built"
    );
    Ok(BuiltRootfs {
        size_bytes,
        from_cache,
        digest,
    })
}

/// Runs the recipe's builder into the staging rootfs, then writes the files common to every
/// recipe.
async fn build_fresh(
    recipe: Recipe,
    staging: &Staging,
    opts: &BuildOptions,
    events: &mut Events,
) -> Result<(), BuildError> {
    let root = &staging.rootfs();
    match recipe {
        Recipe::Base => base::build(root, &staging.scratch()?, opts, events, false).await?,
        Recipe::Full => base::build(root, &staging.scratch()?, opts, events, true).await?,
        Recipe::Tiny => {
            events.progress(10, "assembling busybox tree").await;
            let dir = root.to_path_buf();
            tokio::task::spawn_blocking(move || tiny::build(&dir))
                .await
                .map_err(|e| BuildError::Failed {
                    step: "tiny".to_string(),
                    detail: e.to_string(),
                })??;
        }
    }
    events.check_cancelled()?;
    events.progress(95, "writing common files").await;
    let dir = root.to_path_buf();
    tokio::task::spawn_blocking(move || files::write_files(&dir, recipe::COMMON_FILES))
        .await
        .map_err(|e| BuildError::Failed {
            step: "common files".to_string(),
            detail: e.to_string(),
        })?
}
