//! The layout of a sandbox directory and the files this driver writes into `upper/`.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::RuntimeError;

/// File name of the agent's socket inside `run/` (mirrors `GUEST_SOCKET_PATH` in `GUEST_RUN_DIR`).
const AGENT_SOCKET_NAME: &str = "agent.sock";
/// Mount point of a sandbox's own disk inside its directory (`disk.rs`).
pub(crate) const DISK_DIR: &str = "disk";
/// The run dir's name on a sandbox's own disk.
pub(crate) const RUN_ON_DISK: &str = "run";

/// Paths inside one sandbox directory.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub dir: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    /// With a user namespace: the release's rootfs idmapped into the sandbox's range, the
    /// overlay's lower layer (`idmap.rs`).
    pub lower: PathBuf,
    pub rootfs: PathBuf,
    pub run: PathBuf,
    pub bundle: PathBuf,
    pub agent_log: PathBuf,
    /// The image of the sandbox's own disk, when it has one.
    pub disk_img: PathBuf,
    /// Where that image is mounted.
    pub disk_mnt: PathBuf,
    /// The sandbox's network files (`resolv.conf`, `ca-certificates.crt`), bound read-only into
    /// it when it joins a node network.
    pub net: PathBuf,
    /// With user namespaces: the sandbox's idmapped clones of its volumes (`volumes.rs`).
    pub volumes: PathBuf,
}

impl Layout {
    pub(crate) fn new(dir: &Path) -> Self {
        Layout {
            dir: dir.to_path_buf(),
            upper: dir.join("upper"),
            work: dir.join("work"),
            lower: dir.join("lower"),
            rootfs: dir.join("rootfs"),
            run: dir.join("run"),
            bundle: dir.join("bundle"),
            agent_log: dir.join("agent.log"),
            disk_img: dir.join("disk.img"),
            disk_mnt: dir.join(DISK_DIR),
            net: dir.join("net"),
            volumes: dir.join("volumes"),
        }
    }

    /// Host directory bound at the sandbox's run dir: `disk/run` on the sandbox's own disk
    /// when it has one (so what the agent keeps there counts against the disk's size), else
    /// `run/` on the node's disk.
    pub(crate) fn run_dir(&self) -> PathBuf {
        let on_disk = self.disk_mnt.join(RUN_ON_DISK);
        if on_disk.is_dir() {
            on_disk
        } else {
            self.run.clone()
        }
    }

    /// Host path of the guest agent's socket.
    pub(crate) fn agent_socket(&self) -> PathBuf {
        self.run_dir().join(AGENT_SOCKET_NAME)
    }

    /// The `/etc/resolv.conf` bound into a sandbox with a node network.
    pub(crate) fn resolv_conf(&self) -> PathBuf {
        self.net.join("resolv.conf")
    }

    /// The system trust bundle (release bundle + the gateway's CA) bound into the sandbox.
    pub(crate) fn ca_bundle(&self) -> PathBuf {
        self.net.join("ca-certificates.crt")
    }

    pub(crate) fn config_json(&self) -> PathBuf {
        self.bundle.join("config.json")
    }
}

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let context = context.into();
    move |source| RuntimeError::Io { context, source }
}

/// Writes `bytes` to `path` through a temp file + rename. Only for host-owned directories (the
/// sandbox's `net/`, `bundle/`): never inside a tenant's tree (see `identity.rs`).
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), RuntimeError> {
    let tmp = path.with_extension("cove-tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io_err(format!("create {}", tmp.display())))?;
    f.write_all(bytes)
        .map_err(io_err(format!("write {}", tmp.display())))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io_err(format!("rename to {}", path.display())))
}

/// Checks that a sandbox id is a safe container id and path component.
pub(crate) fn validate_id(id: &str) -> Result<(), RuntimeError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::Command {
            op: "start",
            id: id.to_string(),
            detail: "invalid sandbox id: expected 1-64 of [a-z0-9_-]".to_string(),
        })
    }
}

/// Checks that a hostname is a valid single DNS label-ish name (it goes into `/etc/hosts`).
pub(crate) fn validate_hostname(id: &str, hostname: &str) -> Result<(), RuntimeError> {
    let ok = !hostname.is_empty()
        && hostname.len() <= 63
        && hostname
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        && !hostname.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::Command {
            op: "start",
            id: id.to_string(),
            detail: format!("invalid hostname {hostname:?}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        assert!(validate_id("sbx-1_a").is_ok());
        assert!(validate_id("").is_err());
        assert!(validate_id("../x").is_err());
        assert!(validate_id("A").is_err());
        assert!(validate_id(&"a".repeat(65)).is_err());
    }

    #[test]
    fn hostnames_are_checked() {
        assert!(validate_hostname("x", "sbx-1").is_ok());
        assert!(validate_hostname("x", "a b").is_err());
        assert!(validate_hostname("x", "a\nb").is_err());
        assert!(validate_hostname("x", "-a").is_err());
    }
}
