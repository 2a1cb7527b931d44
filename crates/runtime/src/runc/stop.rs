//! `stop`: kill the container (its init directly through a pidfd when the runtime tracks it,
//! `kill.rs`; else through runc), delete runc's state (and with it the cgroups), unmount the
//! overlay (and the sandbox's own disk, detaching its loop device) and remove everything of the
//! sandbox directory except `upper/` (the sandbox's files; with an own disk, `disk.img` and the
//! `upper` symlink into it) and `agent.log`, and remove the per-command cgroups delegated to the
//! agent (`command_cgroups.rs`), unmount the idmapped release (`lower/`) and give back the
//! sandbox's user namespace range (`userns.rs`; the directory keeps its record, so the next start
//! asks for the same range). Idempotent, and works when runc has no such container.

use std::path::Path;

use tracing::{debug, info};

use super::cli::Runc;
use super::freezer::{Freezer, Tracked};
use super::layout::{validate_id, Layout};
use super::userns::UserNamespaces;
use super::{disk, join_error, mounts};
use crate::{RuntimeError, RuntimeState};

/// Stops sandbox `id` whose directory is `dir`; `tracked` is its init and cgroup freezer when
/// the runtime knows them (then one runc process runs: `runc delete --force`; otherwise
/// `runc state`, `runc resume` when paused, `runc kill` and `runc delete --force`); `userns` the
/// driver's user namespaces, when on.
pub(crate) async fn stop(
    runc: &Runc,
    id: &str,
    dir: &Path,
    tracked: Option<&Tracked>,
    userns: Option<&UserNamespaces>,
) -> Result<(), RuntimeError> {
    validate_id(id)?;
    teardown(runc, id, &Layout::new(dir), tracked, userns).await?;
    info!(sandbox_id = %id, "sandbox stopped");
    Ok(())
}

/// The steps of `stop`; also the undo of a failed `start`.
pub(crate) async fn teardown(
    runc: &Runc,
    id: &str,
    layout: &Layout,
    tracked: Option<&Tracked>,
    userns: Option<&UserNamespaces>,
) -> Result<(), RuntimeError> {
    if let Some(tracked) = tracked {
        if runc.exists(id) {
            let t = tracked.clone();
            let owned = id.to_string();
            let killed = tokio::task::spawn_blocking(move || t.kill(&owned))
                .await
                .map_err(join_error)??;
            debug!(sandbox_id = %id, ?killed, "container init killed directly");
            // Also what a container whose init was already gone needs: runc removes its
            // state and cgroups (and kills anything left, which a pid namespace never has).
            runc.delete_force(id).await?;
        }
    } else {
        kill_through_runc(runc, id).await?;
    }
    let layout = layout.clone();
    let id = id.to_string();
    let userns = userns.cloned();
    tokio::task::spawn_blocking(move || {
        super::command_cgroups::remove(&id);
        remove_node_resources(&layout)?;
        if let Some(userns) = userns {
            userns.release(&id, &layout.dir);
        }
        Ok(())
    })
    .await
    .map_err(join_error)?
}

/// Kills and deletes a container the runtime does not track (a failed start, an unknown id):
/// through `runc state`, `runc resume` when paused, `runc kill` and `runc delete --force`.
async fn kill_through_runc(runc: &Runc, id: &str) -> Result<(), RuntimeError> {
    match runc.state(id).await? {
        None => {}
        Some(state) => {
            if state.pid > 0 && state.status != RuntimeState::Stopped {
                // A cgroup the sandbox froze below its own keeps its tasks alive through any
                // kill (`freezer.rs`, `Tracked::kill`).
                if let Ok(freezer) = Freezer::of_pid(state.pid) {
                    tokio::task::spawn_blocking(move || freezer.thaw_below())
                        .await
                        .map_err(join_error)?;
                }
            }
            if state.status == RuntimeState::Paused {
                // Frozen tasks do not die until thawed.
                let thawed = runc.resume(id).await;
                match thawed {
                    Ok(()) | Err(RuntimeError::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            if state.status != RuntimeState::Stopped {
                runc.kill(id).await?;
            }
            runc.delete_force(id).await?;
        }
    }
    Ok(())
}

/// Unmounts the overlay, the volumes' idmapped clones and the own disk, and removes `work/`,
/// `bundle/`, `run/` and the empty mount points.
fn remove_node_resources(layout: &Layout) -> Result<(), RuntimeError> {
    mounts::unmount(&layout.rootfs)?;
    mounts::unmount(&layout.lower)?;
    super::volumes::unmount_all(layout)?;
    // Before the disk goes: its run dir is sealed too, and a sealed directory cannot be cleared
    // at the next start's preparation otherwise (it unseals again anyway).
    super::seal::unseal(&layout.run_dir());
    super::seal::unseal(&layout.run);
    disk::unmount(layout)?;
    let _ = std::fs::remove_file(super::boot_id::host_file(&layout.dir));
    for dir in [&layout.work, &layout.bundle, &layout.run] {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(RuntimeError::Io {
                    context: format!("remove {}", dir.display()),
                    source,
                })
            }
        }
    }
    // Only empty directories: never recurse into what might still be a mount.
    for mount_point in [&layout.rootfs, &layout.lower] {
        match std::fs::remove_dir(mount_point) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(RuntimeError::Io {
                    context: format!("remove mount point {}", mount_point.display()),
                    source,
                })
            }
        }
    }
    Ok(())
}
