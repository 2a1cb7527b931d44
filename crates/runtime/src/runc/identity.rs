//! The files Cove owns inside a sandbox's own tree (its overlay upper dir): `/etc/hostname`,
//! `/etc/hosts` and the mount points under `/.cove`.
//!
//! The tree is the tenant's: its root may have left a symlink, a FIFO or a directory at any of
//! these names or their parents. Everything here goes through [`cove_confine::Tree`] (no link
//! followed, nothing but regular files read, Cove's names replaced rather than written
//! through); plain path calls are denied in this module.
#![deny(clippy::disallowed_methods)]

use std::path::Path;

use crate::RuntimeError;

/// Writes `/etc/hostname` and `/etc/hosts` into `upper/` so the sandbox sees its own name, and
/// pre-creates the mount points under `/.cove` (so runc need not create them in the overlay).
///
/// `upper/` is the sandbox's own tree, shaped by its root: everything here goes through
/// [`cove_confine::Tree`], so a symlink, FIFO or directory the sandbox planted at one of these
/// names (or at a parent) is replaced, never written through or opened. Both files are
/// rewritten on every start where they differ: the hostname belongs to the platform. Files that
/// are already right are left alone, so a sandbox whose disk is full still starts.
pub(crate) fn write_identity(upper: &Path, hostname: &str) -> Result<(), RuntimeError> {
    let fail = |e: cove_confine::Error| RuntimeError::Io {
        context: "write the sandbox's identity files".to_string(),
        source: e.into(),
    };
    let tree = cove_confine::Tree::open(upper).map_err(fail)?;
    tree.ensure_dir(Path::new("etc"), 0o755).map_err(fail)?;
    tree.write_if_changed(
        Path::new("etc/hostname"),
        format!("{hostname}\n").as_bytes(),
        0o644,
    )
    .map_err(fail)?;
    let hosts = format!(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n"
    );
    tree.write_if_changed(Path::new("etc/hosts"), hosts.as_bytes(), 0o644)
        .map_err(fail)?;

    tree.ensure_dir(Path::new(".cove/bin"), 0o755)
        .map_err(fail)?;
    let agent = Path::new(".cove/bin/cove-guest-agent");
    if !tree.stat(agent).map_err(fail)?.is_some_and(|m| m.is_file()) {
        // The mount point of the agent's bind: an empty regular file of Cove's.
        tree.replace_file(agent, b"", 0o644, None).map_err(fail)?;
    }
    tree.ensure_dir(Path::new(".cove/run"), 0o755)
        .map_err(fail)?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn planted_links_fifos_and_dirs_are_replaced_not_written_through() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let upper = tmp.path().join("upper");
        let host = tmp.path().join("host");
        std::fs::create_dir_all(upper.join("etc")).expect("mkdir");
        std::fs::create_dir_all(&host).expect("mkdir");
        std::fs::write(host.join("secret"), b"host").expect("write");
        symlink(host.join("secret"), upper.join("etc/hostname")).expect("symlink");
        symlink(host.join("secret"), upper.join("etc/hostname.cove-tmp")).expect("symlink");
        nix::unistd::mkfifo(&upper.join("etc/hosts"), nix::sys::stat::Mode::S_IRWXU)
            .expect("mkfifo");
        symlink(&host, upper.join(".cove")).expect("symlink");

        write_identity(&upper, "sbx-1").expect("identity");

        assert_eq!(std::fs::read(host.join("secret")).expect("read"), b"host");
        assert_eq!(std::fs::read_dir(&host).expect("ls").count(), 1);
        assert_eq!(
            std::fs::read(upper.join("etc/hostname")).expect("read"),
            b"sbx-1\n"
        );
        let hosts = std::fs::read_to_string(upper.join("etc/hosts")).expect("read");
        assert!(hosts.contains("127.0.1.1\tsbx-1\n"), "{hosts}");
        assert!(std::fs::symlink_metadata(upper.join(".cove"))
            .expect("stat")
            .is_dir());
        assert!(upper.join(".cove/run").is_dir());
        assert!(upper.join(".cove/bin/cove-guest-agent").is_file());
        // Again: nothing changes, nothing fails.
        write_identity(&upper, "sbx-1").expect("again");
    }
}
