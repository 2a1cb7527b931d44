//! The agent's start-up sequence and its shutdown.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use cove_guest_protocol::QUIESCED_MARKER;

use crate::command_cgroup::CgroupRoots;
use crate::commands::CommandTable;
use crate::config::Config;
use crate::files::reserved::{Reserved, COVE_DIR};
use crate::reaper::Reaper;
use crate::state::Agent;
use crate::users::UserFiles;
use crate::{net, server};

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The SIGCHLD handler could not be installed.
    #[error("installing the SIGCHLD handler: {0}")]
    Reaper(io::Error),
    /// The socket could not be bound.
    #[error("listening on {path}: {source}")]
    Listen {
        /// Socket path.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
}

/// Starts the agent and serves until SIGTERM/SIGINT.
///
/// Start-up: become a child subreaper (orphans are reaped by the agent even when it is not
/// PID 1) and non-dumpable (no ptrace of the agent from inside), bring `lo` up, prepare the run dir (`output/` 0700 and `scripts/` 0711, emptied; the run
/// dir gets search permission for everyone so a non-root user can read its script), start the
/// reaper, then listen (socket mode 0600: only the sandbox's root can use it).
///
/// With `--quiesce-on-signal`, SIGUSR1 closes the socket and every connection (commands keep
/// running, their output is kept) and SIGUSR2 listens again at the same path: see "Quiesce" in
/// [`cove_guest_protocol`].
pub async fn run(config: Config) -> Result<(), StartError> {
    // First: the delegated cgroups arrive as inherited descriptors, close-on-exec from here on.
    let cgroups = CgroupRoots::discover();
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        warn!(error = %e, "cannot become a child subreaper");
    }
    // Not dumpable: without `CAP_SYS_PTRACE` nothing in the sandbox, its root included, may
    // ptrace the agent or read its memory, environment or descriptors through `/proc`.
    // Commands are dumpable again after their exec.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        warn!(error = %e, "cannot make the agent non-dumpable");
    }
    if let Err(e) = net::bring_up_loopback() {
        debug!(error = %e, "cannot bring lo up");
    }
    prepare_run_dir(&config.run_dir);
    let reaper = Reaper::start().map_err(StartError::Reaper)?;
    let listener = listen(&config.listen).map_err(|source| StartError::Listen {
        path: config.listen.clone(),
        source,
    })?;
    let reserved = reserved_paths(&config);
    let agent = Arc::new(Agent {
        reserved,
        config,
        commands: CommandTable::default(),
        reaper,
        users: UserFiles::default(),
        cgroups,
    });
    if !agent.cgroups.enabled() {
        info!("no delegated command cgroups: commands are tracked by their session");
    }
    info!(socket = %agent.config.listen.display(), version = env!("CARGO_PKG_VERSION"), "guest agent listening");
    let mut term = signal(SignalKind::terminate()).map_err(StartError::Reaper)?;
    let mut int = signal(SignalKind::interrupt()).map_err(StartError::Reaper)?;
    let mut quiesce = if agent.config.quiesce_on_signal {
        Some(Quiesce::install().map_err(StartError::Reaper)?)
    } else {
        None
    };
    let mut listener = listener;
    loop {
        let stop = CancellationToken::new();
        let connections = TaskTracker::new();
        tokio::select! {
            _ = server::serve(agent.clone(), listener, &connections, &stop) => break,
            _ = term.recv() => { info!("SIGTERM: stopping"); break }
            _ = int.recv() => { info!("SIGINT: stopping"); break }
            Some(q) = async { Some(quiesce.as_mut()?.quiesce.recv().await) } => { let _ = q; }
        }
        // Quiesce: the listener went with the `serve` future; now every connection.
        let Some(q) = quiesce.as_mut() else { break };
        close_connections(&agent, &stop, &connections).await;
        q.drain_relisten();
        info!("quiesced: no socket and no connection open");
        listener = loop {
            tokio::select! {
                _ = q.relisten.recv() => {}
                _ = term.recv() => { info!("SIGTERM: stopping"); shutdown(&agent); return Ok(()) }
                _ = int.recv() => { info!("SIGINT: stopping"); shutdown(&agent); return Ok(()) }
            }
            unmark_quiesced(&agent);
            match listen(&agent.config.listen) {
                Ok(l) => break l,
                Err(error) => warn!(%error, "cannot listen again; waiting for the next signal"),
            }
        };
        info!(socket = %agent.config.listen.display(), "guest agent listening again");
    }
    shutdown(&agent);
    Ok(())
}

/// The quiesce and relisten signals (`--quiesce-on-signal`).
struct Quiesce {
    quiesce: Signal,
    relisten: Signal,
}

impl Quiesce {
    fn install() -> io::Result<Self> {
        Ok(Quiesce {
            quiesce: signal(SignalKind::user_defined1())?,
            relisten: signal(SignalKind::user_defined2())?,
        })
    }

    /// Forgets a relisten signal that came while the agent listened, so that it waits for the
    /// next one.
    fn drain_relisten(&mut self) {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        while let std::task::Poll::Ready(Some(())) = self.relisten.poll_recv(&mut cx) {}
    }
}

/// Longest wait for the connections to close at a quiesce (a connection stuck in a write to a
/// host that does not read is dropped with the task anyway).
const QUIESCE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Ends every connection, waits until each has closed its stream, then creates the quiesce
/// marker: it tells the host that the agent holds no host socket any more.
async fn close_connections(agent: &Agent, stop: &CancellationToken, connections: &TaskTracker) {
    stop.cancel();
    connections.close();
    if tokio::time::timeout(QUIESCE_WAIT, connections.wait())
        .await
        .is_err()
    {
        warn!(
            open = connections.len(),
            "connections did not close in time"
        );
    }
    // gVisor refuses to remove its host socket from inside (`EPERM`): the host does.
    if let Err(error) = fs::remove_file(&agent.config.listen) {
        debug!(%error, "cannot remove the socket at a quiesce");
    }
    let marker = agent.config.run_dir.join(QUIESCED_MARKER);
    if let Err(error) = fs::write(&marker, b"") {
        warn!(%error, "cannot mark the agent quiesced");
    }
}

/// Leaves the quiesced state: the marker goes before the agent listens again.
fn unmark_quiesced(agent: &Agent) {
    match fs::remove_file(agent.config.run_dir.join(QUIESCED_MARKER)) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(error) => warn!(%error, "cannot remove the quiesce marker"),
    }
}

/// `/.cove`, the run dir, the socket and the agent's own binary.
fn reserved_paths(config: &Config) -> Reserved {
    let mut paths = vec![
        PathBuf::from(COVE_DIR),
        config.run_dir.clone(),
        config.listen.clone(),
    ];
    if let Ok(exe) = std::env::current_exe() {
        paths.push(exe);
    }
    Reserved::new(paths)
}

/// Kills every command's tree and removes the socket.
fn shutdown(agent: &Agent) {
    for command in agent.commands.all() {
        if let Some(tree) = command.live_tree() {
            tree.signal(libc::SIGKILL);
        }
    }
    let _ = fs::remove_file(&agent.config.listen);
}

fn listen(path: &Path) -> io::Result<UnixListener> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    // Created 0600 (the umask): under gVisor the socket is a host socket (`runsc
    // --host-uds=create`) whose mode cannot be changed afterwards (`EPERM`).
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = bound?;
    match fs::metadata(path) {
        Ok(meta) if meta.permissions().mode() & 0o777 == 0o600 => {}
        Ok(_) => fs::set_permissions(path, fs::Permissions::from_mode(0o600))?,
        // gVisor's host sockets cannot be looked at from inside (`EPERM`); the umask made it.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
        Err(e) => return Err(e),
    }
    Ok(listener)
}

fn prepare_run_dir(run_dir: &Path) {
    let result = (|| -> io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(run_dir)?;
        let mode = fs::metadata(run_dir)?.permissions().mode();
        if mode & 0o011 != 0o011 {
            fs::set_permissions(run_dir, fs::Permissions::from_mode((mode | 0o011) & 0o7777))?;
        }
        for (name, mode) in [("output", 0o700), ("scripts", 0o711)] {
            let dir = run_dir.join(name);
            if dir.exists() {
                fs::remove_dir_all(&dir)?;
            }
            fs::DirBuilder::new().mode(mode).create(&dir)?;
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode))?;
        }
        crate::commands::login_path::install(run_dir)?;
        Ok(())
    })();
    if let Err(e) = result {
        warn!(error = %e, run_dir = %run_dir.display(), "cannot prepare the run dir; output will not spill");
    }
}
