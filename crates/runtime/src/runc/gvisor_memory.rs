//! gVisor: a suspend that keeps process memory, for sandboxes without a network.
//!
//! gVisor cannot checkpoint a sandbox that holds a host socket, and the guest agent's socket is
//! one (`--host-uds=create`); a sandbox with a network uses the host's network stack
//! (`--network=host`), which cannot be checkpointed at all. So only a sandbox without a network
//! keeps its memory, and only once its agent is quiet:
//!
//! 1. [`checkpoint`]: thaw the sandbox, unseal the run dir, send the agent the quiesce signal
//!    (`runsc kill <id> USR1`, see "Quiesce" in [`cove_guest_protocol`]) and wait for its
//!    quiesce marker in the run dir (it closed the listener and every connection), then
//!    `runsc checkpoint` into `<dir>/checkpoint/`: the sandbox stops. Commands keep their state
//!    in the agent's memory, their spilled output in the run dir.
//! 2. The suspend saves the files (`fs.tar`), then [`ARTIFACTS`]: the image
//!    (`checkpoint.img` as is) and the run dir packed (gVisor reopens every file it had open by
//!    its path, so spilled output must be back where it was).
//! 3. A wake loads them back into `<dir>/checkpoint/` ([`load`]); the driver's start then
//!    prepares the sandbox as for a cold start (the same overlay, bundle and run dir paths, so on
//!    the same node), unpacks the run dir, runs `runsc restore` instead of `runsc run`, and sends
//!    the relisten signal (`USR2`); the agent listens at the same path again (the old socket
//!    file, which gVisor's agent cannot remove from inside, is not in the packed run dir).
//!
//! A checkpoint (the sandbox keeps running) takes the same step 1, saves the same artifacts
//! while the sandbox is stopped, then carries it on in place from the image
//! ([`restore_in_place`]); `runsc checkpoint --leave-running` restores in the foreground and is
//! not used (see `docs/runtimes.md`, "Checkpoints with memory"). Every image names its sandbox
//! ([`OWNER_ARTIFACT`]): a fork or a create from a checkpoint starts from the files instead,
//! since a restored kernel keeps the other sandbox's hostname.
//!
//! What fails falls back without losing the sandbox: an agent that does not quiesce in time is
//! told to listen again and the sandbox is frozen as before; a failed `runsc checkpoint`
//! (something in the sandbox holds a host socket: a unix socket bound on its disk is one) leaves
//! the sandbox stopped with its files intact. Either way the suspend saves the files only and the
//! wake restarts the sandbox (`memory_restored: false`); the reason is logged. A restore that
//! fails (runsc refuses the image, or the agent does not come back) is undone and the sandbox
//! starts cold in the same prepared directory, on its files.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cove_guest_protocol::{QUIESCED_MARKER, QUIESCE_SIGNAL, RELISTEN_SIGNAL};
use tracing::{info, warn};

use super::cli::Runc;
use super::freezer::Freezer;
use super::join_error;
use super::layout::{io_err, Layout};
use crate::{ArtifactReader, ArtifactSpec, ArtifactWriter, RuntimeError};

/// The memory image (`runsc checkpoint`'s `checkpoint.img`, as is).
pub const IMAGE_ARTIFACT: &str = "gvisor-memory.img";
/// The agent's run dir at the checkpoint, packed like the files.
pub const RUN_ARTIFACT: &str = "gvisor-run.tar";
/// The id of the sandbox the image was taken of (written by the host, not the sandbox): an
/// image restores only into that sandbox (a rollback, a wake), never into a fork, which would
/// carry the other sandbox's hostname and memory.
pub const OWNER_ARTIFACT: &str = "gvisor-owner";
/// What a suspend or checkpoint with memory saves after `fs.tar`.
pub(crate) const ARTIFACTS: &[ArtifactSpec] = &[
    ArtifactSpec {
        name: IMAGE_ARTIFACT,
        memory: true,
    },
    ArtifactSpec {
        name: RUN_ARTIFACT,
        memory: true,
    },
    ArtifactSpec {
        name: OWNER_ARTIFACT,
        memory: true,
    },
];

/// The directory in the sandbox's directory that holds a checkpoint (runsc's image dir).
pub(crate) const CHECKPOINT_DIR: &str = "checkpoint";
/// runsc's image file in it.
const IMAGE_FILE: &str = "checkpoint.img";
/// The packed run dir in it, unpacked by the restoring start.
const RUN_FILE: &str = "run.tar";
/// The owner's id in it ([`OWNER_ARTIFACT`]).
const OWNER_FILE: &str = "owner";
/// Largest owner file loaded back (a sandbox id is far shorter).
const MAX_OWNER_BYTES: u64 = 256;
/// How long the agent has to close its socket and connections.
const QUIESCE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the socket is looked for meanwhile.
const QUIESCE_POLL: Duration = Duration::from_millis(5);
/// Largest memory image loaded back (the store's bytes are the node's own, but bounded).
const MAX_IMAGE_BYTES: u64 = 64 << 30;
/// Largest packed run dir loaded back.
const MAX_RUN_BYTES: u64 = 16 << 30;

fn checkpoint_dir(layout: &Layout) -> PathBuf {
    layout.dir.join(CHECKPOINT_DIR)
}

/// Whether the sandbox in `layout` has a memory checkpoint to restore from.
pub(crate) fn pending(layout: &Layout) -> bool {
    checkpoint_dir(layout).join(IMAGE_FILE).is_file()
}

/// Whether the pending checkpoint in `layout` may be restored as sandbox `id`: it was taken of
/// `id` (a wake, a rollback). A checkpoint of another sandbox (a fork, a create from a
/// checkpoint) is not: gVisor's image holds that sandbox's hostname and processes. A
/// checkpoint without an owner (a suspend of before owners were saved) is its sandbox's own.
pub(crate) fn owned_by(layout: &Layout, id: &str) -> bool {
    match std::fs::read(checkpoint_dir(layout).join(OWNER_FILE)) {
        Ok(owner) => owner == id.as_bytes(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Whether the sandbox joined a node network (its network files were written at start).
pub(crate) fn has_network(layout: &Layout) -> bool {
    layout.net.exists()
}

/// Removes the checkpoint of the sandbox (after a restore, or when it cannot be used).
pub(crate) async fn discard(layout: &Layout) {
    let dir = checkpoint_dir(layout);
    match tokio::fs::remove_dir_all(&dir).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => warn!(dir = %dir.display(), %error, "cannot remove a used checkpoint"),
    }
}

/// Step 1 (see the module): the sandbox `id` (paused) is checkpointed into its directory.
/// `Ok(true)`: saved, the sandbox stopped. `Ok(false)`: not saved, why is logged; the sandbox
/// is frozen again, or stopped by a failed checkpoint, with its files intact.
pub(crate) async fn checkpoint(
    runc: &Runc,
    id: &str,
    layout: &Layout,
    freezer: &Freezer,
) -> Result<bool, RuntimeError> {
    if has_network(layout) {
        return Ok(false);
    }
    let began = Instant::now();
    let image_dir = checkpoint_dir(layout);
    discard(layout).await;
    tokio::fs::create_dir_all(&image_dir)
        .await
        .map_err(io_err(format!("create {}", image_dir.display())))?;
    freezer.thaw(id).await?;
    let run = layout.run_dir();
    // The agent removes its socket at the end of a quiesce: the run dir must let it.
    tokio::task::spawn_blocking(move || super::seal::unseal(&run))
        .await
        .map_err(join_error)?;
    // A marker of before would pass for the agent's answer.
    match tokio::fs::remove_file(marker(layout)).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("remove an old quiesce marker")(e)),
    }
    let quiet = match runc.signal(id, QUIESCE_SIGNAL).await {
        Ok(()) => wait_for(&marker(layout), QUIESCE_TIMEOUT).await,
        Err(e) => Err(e.to_string()),
    };
    if let Err(why) = quiet {
        warn!(sandbox_id = %id, reason = %why,
            "the guest agent did not quiesce: suspending the files only");
        relisten(runc, id, layout).await;
        freezer.freeze(id).await?;
        discard(layout).await;
        return Ok(false);
    }
    let quiesced_ms = began.elapsed().as_millis() as u64;
    let checkpoint_began = Instant::now();
    match runc.checkpoint(id, &image_dir).await {
        Ok(()) => {
            let bytes = std::fs::metadata(image_dir.join(IMAGE_FILE)).map_or(0, |m| m.len());
            info!(sandbox_id = %id, quiesced_ms,
                checkpoint_ms = checkpoint_began.elapsed().as_millis() as u64,
                image_bytes = bytes, "sandbox memory checkpointed");
            Ok(true)
        }
        Err(e) => {
            // runsc leaves the sandbox stopped after a failed checkpoint; should one still
            // run, it gets its agent back and is frozen for the files.
            warn!(sandbox_id = %id, error = %e,
                "gVisor checkpoint failed: suspending the files only (the wake restarts the sandbox)");
            if let Ok(Some(state)) = runc.state(id).await {
                if state.status == crate::RuntimeState::Running {
                    relisten(runc, id, layout).await;
                    let _ = freezer.freeze(id).await;
                }
            }
            discard(layout).await;
            Ok(false)
        }
    }
}

/// Undoes [`checkpoint`] when the suspend failed afterwards: the stopped container goes and the
/// sandbox carries on from its checkpoint on the same directory (its overlay, run dir and
/// bundle are still in place), its agent listening again. Returns the new init's host pid.
pub(crate) async fn restore_in_place(
    runc: &Runc,
    id: &str,
    layout: &Layout,
) -> Result<u32, RuntimeError> {
    let began = Instant::now();
    // A checkpoint's container may already be gone (deleted while its artifacts were saved).
    if runc.exists(id) {
        runc.delete_force(id).await?;
    }
    let deleted_ms = began.elapsed().as_millis() as u64;
    remove_socket(layout).await;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&layout.agent_log)
        .map_err(io_err(format!("open {}", layout.agent_log.display())))?;
    let pid_file = layout.bundle.join(super::start::PID_FILE);
    let image_dir = checkpoint_dir(layout);
    if !runc
        .restore_detached(id, &layout.bundle, &image_dir, &pid_file, log)
        .await?
    {
        return Err(RuntimeError::Command {
            op: "restore",
            id: id.to_string(),
            detail: "runsc restore failed (its error is in the agent log)".to_string(),
        });
    }
    let pid = super::start::read_pid(id, &pid_file)?;
    let restored_ms = began.elapsed().as_millis() as u64;
    relisten(runc, id, layout).await;
    discard(layout).await;
    info!(sandbox_id = %id, deleted_ms, restored_ms, listening_ms = began.elapsed().as_millis() as u64,
        "sandbox carries on from its memory checkpoint, in place");
    Ok(pid)
}

/// The agent's quiesce marker on the host.
fn marker(layout: &Layout) -> PathBuf {
    layout.run_dir().join(QUIESCED_MARKER)
}

/// After a restore that failed in a prepared directory: whatever runsc started goes, with the
/// checkpoint and what the restore unpacked into the run dir (the quiesce marker, above all), so
/// the sandbox can start cold there.
pub(crate) async fn undo_restore(
    runc: &Runc,
    id: &str,
    layout: &Layout,
) -> Result<(), RuntimeError> {
    if runc.exists(id) {
        runc.kill(id).await?;
        runc.delete_force(id).await?;
    }
    clear_for_cold_start(layout).await
}

/// Removes what a checkpoint left in the sandbox's directory (the image, the quiesced agent's
/// socket and marker) so the sandbox can start cold there.
pub(crate) async fn clear_for_cold_start(layout: &Layout) -> Result<(), RuntimeError> {
    discard(layout).await;
    remove_socket(layout).await;
    match tokio::fs::remove_file(marker(layout)).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove the quiesce marker")(e)),
    }
}

/// Tells a quiesced agent to listen again and waits for its socket; seals the run dir. An
/// agent that never quiesced (no marker) still listens and is left alone. The old socket file
/// goes first: gVisor's agent cannot remove it from inside, and cannot bind over it. Failures
/// are logged: the node finds an agent that does not answer by its health checks.
pub(crate) async fn relisten(runc: &Runc, id: &str, layout: &Layout) {
    if tokio::fs::symlink_metadata(marker(layout)).await.is_ok() {
        remove_socket(layout).await;
        let done = match runc.signal(id, RELISTEN_SIGNAL).await {
            Ok(()) => wait_for(&layout.agent_socket(), QUIESCE_TIMEOUT).await,
            Err(e) => Err(e.to_string()),
        };
        if let Err(reason) = done {
            warn!(sandbox_id = %id, %reason, "the guest agent did not listen again");
        }
    }
    let run = layout.run_dir();
    let _ = tokio::task::spawn_blocking(move || super::seal::seal(&run)).await;
}

/// Removes the quiesced agent's socket file (the run dir is unsealed while it is quiesced).
async fn remove_socket(layout: &Layout) {
    let socket = layout.agent_socket();
    match tokio::fs::remove_file(&socket).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            warn!(socket = %socket.display(), %error, "cannot remove the agent's old socket")
        }
    }
}

/// Waits until `path` exists.
async fn wait_for(path: &Path, timeout: Duration) -> Result<(), String> {
    let began = Instant::now();
    loop {
        if tokio::fs::symlink_metadata(path).await.is_ok() {
            return Ok(());
        }
        if began.elapsed() >= timeout {
            return Err(format!(
                "{} was missing after {} ms",
                path.file_name().unwrap_or_default().to_string_lossy(),
                timeout.as_millis()
            ));
        }
        tokio::time::sleep(QUIESCE_POLL).await;
    }
}

/// Writes memory artifact `name` of the checkpointed sandbox in `dir` to `out`; returns its
/// bytes.
pub(crate) async fn save(
    id: &str,
    dir: &Path,
    name: &str,
    out: ArtifactWriter,
) -> Result<u64, RuntimeError> {
    let layout = Layout::new(dir);
    match name {
        OWNER_ARTIFACT => {
            let owner = id.as_bytes().to_vec();
            tokio::task::spawn_blocking(move || -> std::io::Result<u64> {
                let mut out = out;
                out.write_all(&owner)?;
                out.flush()?;
                Ok(owner.len() as u64)
            })
            .await
            .map_err(join_error)?
            .map_err(io_err("save the gVisor image's owner"))
        }
        IMAGE_ARTIFACT => {
            let image = checkpoint_dir(&layout).join(IMAGE_FILE);
            tokio::task::spawn_blocking(move || -> std::io::Result<u64> {
                let mut out = out;
                let mut f = std::fs::File::open(&image)?;
                let n = std::io::copy(&mut f, &mut out)?;
                out.flush()?;
                Ok(n)
            })
            .await
            .map_err(join_error)?
            .map_err(io_err("save the gVisor memory image"))
        }
        RUN_ARTIFACT => {
            // The run dir is the sandbox's to write: packed confined, like its files.
            let run = layout.run_dir();
            tokio::task::spawn_blocking(move || super::snapshot::pack(&run, out))
                .await
                .map_err(join_error)?
                .map_err(io_err("pack the agent's run dir"))
        }
        other => Err(unknown(other)),
    }
}

/// Reads memory artifact `name` into `<dir>/checkpoint/` for the next start; returns its bytes.
pub(crate) async fn load(
    dir: &Path,
    name: &str,
    input: ArtifactReader,
) -> Result<u64, RuntimeError> {
    let (file, max) = match name {
        IMAGE_ARTIFACT => (IMAGE_FILE, MAX_IMAGE_BYTES),
        RUN_ARTIFACT => (RUN_FILE, MAX_RUN_BYTES),
        OWNER_ARTIFACT => (OWNER_FILE, MAX_OWNER_BYTES),
        other => return Err(unknown(other)),
    };
    let target_dir = checkpoint_dir(&Layout::new(dir));
    tokio::task::spawn_blocking(move || -> std::io::Result<u64> {
        std::fs::create_dir_all(&target_dir)?;
        let path = target_dir.join(file);
        let mut f = std::fs::File::create(&path)?;
        let mut bounded = input.take(max + 1);
        let n = std::io::copy(&mut bounded, &mut f)?;
        if n > max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{file} is larger than {max} bytes"),
            ));
        }
        f.sync_all()?;
        Ok(n)
    })
    .await
    .map_err(join_error)?
    .map_err(io_err(format!("load {name}")))
}

/// Unpacks the run dir of the checkpoint into the sandbox's (prepared, empty of the agent's
/// files) run dir; blocking. Confined like every unpack: nothing lands outside it.
pub(crate) fn unpack_run_dir(layout: &Layout) -> Result<(), RuntimeError> {
    let packed = checkpoint_dir(layout).join(RUN_FILE);
    let run = layout.run_dir();
    let f = std::fs::File::open(&packed).map_err(io_err(format!("open {}", packed.display())))?;
    super::snapshot::unpack(f, &run)
        .map(drop)
        .map_err(io_err("unpack the agent's run dir"))
}

/// Memory images never come from outside the node: an imported archive holding one is refused.
pub(crate) fn refuse_import(name: &str) -> RuntimeError {
    RuntimeError::Io {
        context: format!("check {name}"),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "a gVisor memory image cannot be imported",
        ),
    }
}

fn unknown(name: &str) -> RuntimeError {
    RuntimeError::Unavailable(format!("gVisor memory has no artifact {name:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_loaded_image_is_pending_until_discarded_and_saves_back_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path());
        assert!(!pending(&layout));
        let image = b"gvisor image bytes".to_vec();
        let n = load(
            dir.path(),
            IMAGE_ARTIFACT,
            Box::new(std::io::Cursor::new(image.clone())),
        )
        .await
        .expect("load");
        assert_eq!(n, image.len() as u64);
        assert!(pending(&layout));
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("lock").extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let saved = save(
            "sb",
            dir.path(),
            IMAGE_ARTIFACT,
            Box::new(Shared(out.clone())),
        )
        .await
        .expect("save");
        assert_eq!(saved, image.len() as u64);
        assert_eq!(*out.lock().expect("lock"), image);
        discard(&layout).await;
        assert!(!pending(&layout));
    }

    #[tokio::test]
    async fn unknown_names_and_imports_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(load(dir.path(), "fs.tar", Box::new(std::io::empty()))
            .await
            .is_err());
        match refuse_import(IMAGE_ARTIFACT) {
            RuntimeError::Io { source, .. } => {
                assert_eq!(source.kind(), std::io::ErrorKind::InvalidData)
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn an_image_restores_only_into_the_sandbox_it_was_taken_of() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path());
        // No owner saved (a suspend of before): the sandbox's own.
        assert!(owned_by(&layout, "sb-1"));
        let out = dir.path().join("saved-owner");
        let n = save(
            "sb-1",
            dir.path(),
            OWNER_ARTIFACT,
            Box::new(std::fs::File::create(&out).expect("create")),
        )
        .await
        .expect("save");
        assert_eq!(n, 4);
        let saved = std::fs::read(&out).expect("read");
        assert_eq!(saved, b"sb-1");
        load(
            dir.path(),
            OWNER_ARTIFACT,
            Box::new(std::io::Cursor::new(saved.clone())),
        )
        .await
        .expect("load");
        assert!(owned_by(&layout, "sb-1"));
        assert!(!owned_by(&layout, "sb-2"));
        assert!(!owned_by(&layout, "sb-"));
        // An owner file too long for any id is refused on load.
        let other = tempfile::tempdir().expect("tempdir");
        assert!(load(
            other.path(),
            OWNER_ARTIFACT,
            Box::new(std::io::Cursor::new(vec![b'a'; 300])),
        )
        .await
        .is_err());
    }

    #[test]
    fn a_sandbox_with_network_files_has_a_network() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path());
        assert!(!has_network(&layout));
        std::fs::create_dir_all(&layout.net).expect("net dir");
        assert!(has_network(&layout));
    }
}
