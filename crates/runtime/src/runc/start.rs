//! `start`: prepare the sandbox directory, mount the overlay, write the OCI config, one
//! `runc run --detach` (the only runc process of a start), and wait for the guest agent's socket.
//! Any failure undoes every step.
//!
//! With user namespaces, preparing also claims the sandbox's id range, shifts its own files into
//! it (once; `shift.rs`), mounts the release idmapped into it as the overlay's lower layer
//! (`idmap.rs`), and gives the range's root what the agent writes on the host: its run dir, the
//! delegated command cgroups (handed to the agent as descriptors, `command_cgroups.rs`), and the
//! network files bound into it.

use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::cli::Runc;
use std::sync::Arc;

use super::config::HostPrivileges;
use super::identity::write_identity;
use super::layout::{io_err, validate_hostname, validate_id, Layout};
use super::userns::{IdRange, Record, UserNamespaces};
use super::views::HostViews;
use super::{command_cgroups, config, disk, gvisor_memory, join_error, mounts, stop};
use crate::UnixSocketConnector;
use crate::{RuntimeError, SandboxSpec, Started};

/// How long the guest agent has to create its socket (generous: on a loaded 2-core host a start
/// that normally takes 50 ms has been seen to take seconds).
const AGENT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the socket's existence is checked: a `stat`, cheap next to the wait it cuts (the
/// socket appears ~half a poll before it is seen, and this wait is on every cold create).
const AGENT_POLL: Duration = Duration::from_millis(1);
/// How often (in polls) the agent process is checked to still be alive (every 100 ms).
const LIVENESS_EVERY: u32 = 100;
/// Name of the file in `bundle/` that `runc run` writes the init's pid to.
pub(crate) const PID_FILE: &str = "init.pid";
/// Largest trust bundle of a sandbox's own that is extended with the gateway's CA, in bytes.
const MAX_CA_BUNDLE_BYTES: u64 = 16 << 20;
/// Longest agent-log tail put into an error, in bytes.
const LOG_TAIL_BYTES: u64 = 2048;

/// Starts the sandbox; on failure removes everything this call made and returns the error.
pub(crate) async fn start(
    runc: &Runc,
    spec: &SandboxSpec,
    host: HostPrivileges,
    views: &Arc<HostViews>,
    userns: Option<&UserNamespaces>,
) -> Result<Started, RuntimeError> {
    validate_id(&spec.id)?;
    validate_hostname(&spec.id, &spec.hostname)?;
    if runc.exists(&spec.id) {
        // Not ours to undo: leave the existing container alone.
        return Err(RuntimeError::Command {
            op: "create",
            id: spec.id.clone(),
            detail: "a container with this id already exists".to_string(),
        });
    }
    let layout = Layout::new(&spec.dir);
    let made_dir = !layout.dir.exists();
    let made_upper = std::fs::symlink_metadata(&layout.upper).is_err();
    let made_disk = !layout.disk_img.exists();
    let began = Instant::now();
    let userns_owned = userns.cloned();
    match run(runc, spec, &layout, host, views.clone(), userns_owned).await {
        Ok(started) => {
            info!(
                sandbox_id = %spec.id,
                init_pid = started.init_pid,
                elapsed_ms = began.elapsed().as_millis() as u64,
                "sandbox started"
            );
            Ok(started)
        }
        Err(error) => {
            warn!(sandbox_id = %spec.id, %error, "sandbox start failed, undoing");
            if let Err(undo) = stop::teardown(runc, &spec.id, &layout, None, userns).await {
                warn!(sandbox_id = %spec.id, error = %undo, "undo of a failed start failed");
            }
            let dir = layout.clone();
            let _ = tokio::task::spawn_blocking(move || {
                if made_upper {
                    // A symlink (own disk) is removed as a link, a directory with its files.
                    match std::fs::symlink_metadata(&dir.upper) {
                        Ok(m) if m.is_dir() => {
                            let _ = std::fs::remove_dir_all(&dir.upper);
                        }
                        _ => {
                            let _ = std::fs::remove_file(&dir.upper);
                        }
                    }
                    let _ = std::fs::remove_file(&dir.agent_log);
                    let _ = Record::remove(&dir.dir);
                }
                if made_disk {
                    let _ = std::fs::remove_file(&dir.disk_img);
                }
                if made_dir {
                    let _ = std::fs::remove_file(super::boot_id::host_file(&dir.dir));
                    let _ = std::fs::remove_dir(&dir.dir);
                }
            })
            .await;
            Err(error)
        }
    }
}

async fn run(
    runc: &Runc,
    spec: &SandboxSpec,
    layout: &Layout,
    host: HostPrivileges,
    views: Arc<HostViews>,
    userns: Option<UserNamespaces>,
) -> Result<Started, RuntimeError> {
    let prepared_spec = spec.clone();
    let prepared_layout = layout.clone();
    let gvisor = runc.is_runsc();
    let (log, log_offset, cgroup_fds) = tokio::task::spawn_blocking(move || {
        prepare(
            &prepared_spec,
            &prepared_layout,
            host,
            &views,
            userns.as_ref(),
            gvisor,
        )
    })
    .await
    .map_err(join_error)??;

    let pid_file = layout.bundle.join(PID_FILE);
    // gVisor with a memory checkpoint (a suspend without a network): `runsc restore` on the
    // same paths (`gvisor_memory.rs`). When that fails the sandbox starts cold on the same
    // prepared directory: its files (on its own disk too) stay where they are.
    let mut restored = None;
    if gvisor && spec.network.is_none() && gvisor_memory::pending(layout) {
        let restore_log = log
            .try_clone()
            .map_err(io_err("duplicate agent log handle"))?;
        match restore(runc, spec, layout, &pid_file, restore_log, log_offset).await {
            Ok(pid) => restored = Some(pid),
            Err(error) => {
                warn!(sandbox_id = %spec.id, %error,
                    "gVisor restore failed: starting the sandbox from its files");
                gvisor_memory::undo_restore(runc, &spec.id, layout).await?;
            }
        }
    }
    let pid = match restored {
        Some(pid) => pid,
        None => {
            if !runc
                .run_detached(
                    &spec.id,
                    &layout.bundle,
                    &pid_file,
                    log,
                    &cgroup_fds,
                    spec.network.as_ref().map(|n| n.netns_path.as_path()),
                )
                .await?
            {
                return Err(RuntimeError::Command {
                    op: "create",
                    id: spec.id.clone(),
                    detail: log_since(&layout.agent_log, log_offset),
                });
            }
            read_pid(&spec.id, &pid_file)?
        }
    };
    // The container holds its own binds of the volumes now: the host's idmapped clones go, so
    // nothing under the sandbox directory is a writable volume when the directory is removed.
    if !spec.volumes.is_empty() {
        let clones = layout.clone();
        tokio::task::spawn_blocking(move || super::volumes::unmount_all(&clones))
            .await
            .map_err(join_error)??;
    }
    // runc: a boot id of the sandbox's own (`boot_id.rs`); gVisor's kernel here has none. Not
    // fatal: an init that already exited is reported by the wait for the agent below (with
    // its log), and a kernel that cannot mount it leaves the host's boot id visible.
    if !gvisor {
        let dir = layout.dir.clone();
        match tokio::task::spawn_blocking(move || super::boot_id::mount(&dir, pid))
            .await
            .map_err(join_error)?
        {
            Ok(boot_id) => tracing::debug!(sandbox_id = %spec.id, boot_id, "boot id"),
            Err(error) => {
                warn!(sandbox_id = %spec.id, %error, "cannot give the sandbox a boot id of its own")
            }
        }
    }
    if restored.is_none() {
        wait_for_agent(spec, layout, pid, log_offset).await?;
    }
    let run = layout.run_dir();
    tokio::task::spawn_blocking(move || super::seal::seal(&run))
        .await
        .map_err(join_error)?;
    Ok(Started {
        guest: std::sync::Arc::new(UnixSocketConnector::new(layout.agent_socket())),
        init_pid: pid,
        memory_restored: restored.is_some(),
    })
}

/// `runsc restore` of the checkpoint in the prepared directory: the run dir unpacked, the
/// sandbox restored, its agent told to listen again and answering. Returns the init's pid.
async fn restore(
    runc: &Runc,
    spec: &SandboxSpec,
    layout: &Layout,
    pid_file: &Path,
    log: std::fs::File,
    log_offset: u64,
) -> Result<u32, RuntimeError> {
    let unpack_layout = layout.clone();
    tokio::task::spawn_blocking(move || gvisor_memory::unpack_run_dir(&unpack_layout))
        .await
        .map_err(join_error)??;
    let began = Instant::now();
    let image_dir = layout.dir.join(gvisor_memory::CHECKPOINT_DIR);
    if !runc
        .restore_detached(&spec.id, &layout.bundle, &image_dir, pid_file, log)
        .await?
    {
        return Err(RuntimeError::Command {
            op: "restore",
            id: spec.id.clone(),
            detail: log_since(&layout.agent_log, log_offset),
        });
    }
    info!(sandbox_id = %spec.id, restore_ms = began.elapsed().as_millis() as u64,
        "sandbox restored by runsc");
    let pid = read_pid(&spec.id, pid_file)?;
    // The agent kept its state in memory; it listens again on its signal.
    runc.signal(&spec.id, cove_guest_protocol::RELISTEN_SIGNAL)
        .await?;
    wait_for_agent(spec, layout, pid, log_offset).await?;
    Ok(pid)
}

/// The init's host pid as `runc run --pid-file` wrote it.
pub(crate) fn read_pid(id: &str, pid_file: &std::path::Path) -> Result<u32, RuntimeError> {
    let text = std::fs::read_to_string(pid_file).map_err(|source| RuntimeError::Io {
        context: format!("read {}", pid_file.display()),
        source,
    })?;
    text.trim()
        .parse()
        .ok()
        .filter(|&pid: &u32| pid > 0)
        .ok_or_else(|| RuntimeError::Command {
            op: "create",
            id: id.to_string(),
            detail: format!("runc wrote no pid to its pid file ({:?})", text.trim()),
        })
}

/// Blocking part: directories, identity files, overlay mount, config.json, agent log.
/// Returns the opened agent log and its length before this start.
fn prepare(
    spec: &SandboxSpec,
    layout: &Layout,
    host: HostPrivileges,
    views: &HostViews,
    userns: Option<&UserNamespaces>,
    gvisor: bool,
) -> Result<(std::fs::File, u64, Vec<OwnedFd>), RuntimeError> {
    if !spec.rootfs.is_dir() {
        return Err(RuntimeError::Io {
            context: format!("release rootfs {}", spec.rootfs.display()),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    }
    if !spec.guest_agent.is_file() {
        return Err(RuntimeError::Io {
            context: format!("guest agent {}", spec.guest_agent.display()),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    }
    // Stale mounts from a crashed node agent (runc has no container, checked by the caller).
    mounts::unmount(&layout.rootfs)?;
    mounts::unmount(&layout.lower)?;
    // Start from a fresh run dir, so an old socket is not mistaken for the new agent's.
    super::seal::unseal(&layout.run);
    match std::fs::remove_dir_all(&layout.run) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(format!("clear {}", layout.run.display()))(e)),
    }
    for d in [&layout.dir, &layout.rootfs, &layout.run, &layout.bundle] {
        std::fs::create_dir_all(d).map_err(io_err(format!("create {}", d.display())))?;
    }
    let (upper, work) = match spec.resources.disk_mib {
        Some(mib) => {
            let dirs = disk::prepare(layout, mib)?;
            // The run dir lives on the disk; it is kept (a full disk has no block for a new
            // directory) and only the old socket is removed.
            let run = layout.disk_mnt.join(super::layout::RUN_ON_DISK);
            std::fs::create_dir_all(&run).map_err(io_err(format!("create {}", run.display())))?;
            super::seal::unseal(&run);
            match std::fs::remove_file(layout.agent_socket()) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("remove the old agent socket")(e)),
            }
            dirs
        }
        None => {
            for d in [&layout.upper, &layout.work] {
                std::fs::create_dir_all(d).map_err(io_err(format!("create {}", d.display())))?;
            }
            (layout.upper.clone(), layout.work.clone())
        }
    };
    write_identity(&upper, &spec.hostname)?;
    let ids = match userns {
        Some(userns) => {
            let began = Instant::now();
            let range = userns.claim(&spec.id, &layout.dir)?;
            shift_upper(layout, &upper, range, userns)?;
            // The run dir on an own disk keeps the agent's files of the last run.
            let run = layout.run_dir();
            super::shift::tree(&run, range.host(), userns.base).map_err(io_err(format!(
                "give {} to the sandbox's root",
                run.display()
            )))?;
            idmap_release(&spec.rootfs, layout, range)?;
            mounts::mount_overlay(&layout.lower, &upper, &work, &layout.rootfs)?;
            debug!(
                sandbox_id = %spec.id,
                host_root = range.host(),
                elapsed_us = began.elapsed().as_micros() as u64,
                "user namespace prepared"
            );
            Some(range)
        }
        None => {
            unshift_upper(layout, &upper)?;
            mounts::mount_overlay(&spec.rootfs, &upper, &work, &layout.rootfs)?;
            None
        }
    };
    if let Some(net) = &spec.network {
        write_network_files(net, layout)?;
        if let Some(range) = ids {
            shift_host_paths([layout.resolv_conf().as_path(), &layout.ca_bundle()], range)?;
        }
    }
    super::volumes::prepare(spec, layout, ids)?;
    // gVisor's agent sees gVisor's cgroups, not the host's, and runsc passes no descriptors:
    // its commands are tracked by their session.
    let command_cgroups = if gvisor {
        Vec::new()
    } else {
        command_cgroups::prepare(&spec.id)?
    };
    if let Some(range) = ids {
        for d in &command_cgroups {
            command_cgroups::give_to(&d.dir, range.host())?;
        }
    }
    // Handed to the agent as descriptors (`runc run --preserve-fds`), never mounted inside. A
    // kernel or node that cannot make the detached mount (no `open_tree`, no privilege) leaves
    // that hierarchy out: the agent then tracks commands by their session.
    let mut cgroup_fds = Vec::new();
    let mut hierarchies = Vec::new();
    for d in command_cgroups {
        match d.open() {
            Ok(fd) => {
                cgroup_fds.push(fd);
                hierarchies.push(d.hierarchy);
            }
            Err(error) => {
                warn!(sandbox_id = %spec.id, hierarchy = %d.hierarchy, %error,
                    "cannot hand the command cgroup to the agent; commands use sessions");
            }
        }
    }
    let mut config = config::build(spec, layout, host, views, &hierarchies, ids)?;
    if gvisor {
        config::for_gvisor(&mut config);
    }
    config::write(&config, layout)?;

    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&layout.agent_log)
        .map_err(io_err(format!("open {}", layout.agent_log.display())))?;
    let offset = log
        .metadata()
        .map_err(io_err(format!("stat {}", layout.agent_log.display())))?
        .len();
    Ok((log, offset, cgroup_fds))
}

/// Shifts the sandbox's own files into `range`: the whole upper dir unless its record says it
/// is there already, else only what [`write_identity`] may just have written as the host's root.
fn shift_upper(
    layout: &Layout,
    upper: &Path,
    range: IdRange,
    userns: &UserNamespaces,
) -> Result<(), RuntimeError> {
    let mut record = Record::read(&layout.dir);
    if record.upper == Some(range.host()) {
        let identity = [
            "",
            "etc",
            "etc/hostname",
            "etc/hosts",
            ".cove",
            ".cove/bin",
            ".cove/bin/cove-guest-agent",
            ".cove/run",
        ];
        return super::shift::paths_in(upper, &identity, range.host(), userns.base).map_err(
            io_err(format!("shift {} into the sandbox's ids", upper.display())),
        );
    }
    let began = Instant::now();
    let changed = super::shift::tree(upper, range.host(), userns.base).map_err(io_err(format!(
        "shift {} into the sandbox's ids",
        upper.display()
    )))?;
    record.range = Some(range);
    record.upper = Some(range.host());
    record.write(&layout.dir)?;
    info!(
        dir = %layout.dir.display(),
        changed,
        elapsed_ms = began.elapsed().as_millis() as u64,
        "sandbox files shifted into its id range"
    );
    Ok(())
}

/// Without user namespaces: moves files a sandbox wrote while it had one back to container ids
/// (a node restarted with `--user-namespaces off`), and forgets its range.
fn unshift_upper(layout: &Layout, upper: &Path) -> Result<(), RuntimeError> {
    let record = Record::read(&layout.dir);
    let Some(range) = record.range else {
        return Ok(());
    };
    if record.upper.is_some() {
        super::shift::tree(upper, 0, range.host()).map_err(io_err(format!(
            "shift {} back to host ids",
            upper.display()
        )))?;
    }
    Record::remove(&layout.dir)
}

/// Gives host paths the host's root made (run dir, network files) to the range's root.
fn shift_host_paths<'a>(
    paths: impl IntoIterator<Item = &'a Path>,
    range: IdRange,
) -> Result<(), RuntimeError> {
    let to = range.host();
    for path in paths {
        match std::fs::symlink_metadata(path) {
            Ok(meta) => {
                use std::os::unix::fs::MetadataExt;
                let uid = super::shift::shifted(meta.uid(), to, to);
                let gid = super::shift::shifted(meta.gid(), to, to);
                if uid.is_some() || gid.is_some() {
                    std::os::unix::fs::lchown(path, uid, gid)
                        .map_err(io_err("give host files to the sandbox's root"))?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("give host files to the sandbox's root")(e)),
        }
    }
    Ok(())
}

/// Mounts the release's rootfs at `layout.lower`, idmapped into `range`.
fn idmap_release(rootfs: &Path, layout: &Layout, range: IdRange) -> Result<(), RuntimeError> {
    std::fs::create_dir_all(&layout.lower)
        .map_err(io_err(format!("create {}", layout.lower.display())))?;
    let ns = super::idmap::userns_fd(range)
        .map_err(io_err("make a user namespace for the sandbox's ids"))?;
    super::idmap::mount_idmapped(rootfs, &ns, &layout.lower, true).map_err(io_err(format!(
        "mount {} idmapped on {}",
        rootfs.display(),
        layout.lower.display()
    )))
}

/// Writes `net/resolv.conf` and, with an extra CA, `net/ca-certificates.crt`: the sandbox's own
/// bundle (read through the mounted overlay, so a bundle the sandbox updated counts) followed by
/// the CA.
fn write_network_files(net: &crate::SandboxNetwork, layout: &Layout) -> Result<(), RuntimeError> {
    std::fs::create_dir_all(&layout.net)
        .map_err(io_err(format!("create {}", layout.net.display())))?;
    super::layout::write_file(&layout.resolv_conf(), net.resolv_conf.as_bytes())?;
    if let Some(ca) = &net.extra_ca_pem {
        // The sandbox's tree is read confined (no link followed, in the middle of the path
        // either; a FIFO not opened): only a regular file at the path counts.
        let mut bundle = cove_confine::Tree::open(&layout.rootfs)
            .and_then(|tree| tree.read_file(Path::new(config::CA_BUNDLE_PATH), MAX_CA_BUNDLE_BYTES))
            .unwrap_or_default();
        if !bundle.is_empty() && !bundle.ends_with(b"\n") {
            bundle.push(b'\n');
        }
        bundle.extend_from_slice(ca.as_bytes());
        super::layout::write_file(&layout.ca_bundle(), &bundle)?;
    }
    Ok(())
}

/// Polls for the agent's socket; fails early when the agent process is gone.
async fn wait_for_agent(
    spec: &SandboxSpec,
    layout: &Layout,
    pid: u32,
    log_offset: u64,
) -> Result<(), RuntimeError> {
    use std::os::unix::fs::FileTypeExt;
    let socket = layout.agent_socket();
    let began = Instant::now();
    let mut polls = 0u32;
    loop {
        if let Ok(meta) = tokio::fs::symlink_metadata(&socket).await {
            if meta.file_type().is_socket() {
                return Ok(());
            }
        }
        polls += 1;
        if polls % LIVENESS_EVERY == 0 && !process_alive(pid) {
            return Err(RuntimeError::Command {
                op: "start",
                id: spec.id.clone(),
                detail: format!(
                    "guest agent exited before listening: {}",
                    log_since(&layout.agent_log, log_offset)
                ),
            });
        }
        if began.elapsed() >= AGENT_TIMEOUT {
            return Err(RuntimeError::AgentTimeout {
                id: spec.id.clone(),
                waited_ms: began.elapsed().as_millis() as u64,
            });
        }
        tokio::time::sleep(AGENT_POLL).await;
    }
}

/// Whether `pid` exists and is not a zombie.
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// What the agent log gained since `offset` (runc's error, or the agent's last words), bounded.
fn log_since(path: &Path, offset: u64) -> String {
    let read = || -> std::io::Result<String> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        let start = offset.max(len.saturating_sub(LOG_TAIL_BYTES));
        f.seek(SeekFrom::Start(start))?;
        let mut buf = Vec::new();
        f.take(LOG_TAIL_BYTES).read_to_end(&mut buf)?;
        Ok(super::cli::message(&buf))
    };
    match read() {
        Ok(s) if !s.is_empty() => s,
        Ok(_) => "no output".to_string(),
        Err(e) => format!("agent log unreadable: {e}"),
    }
}
