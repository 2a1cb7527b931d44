//! Acting as a sandbox user for one file operation: the calling thread's filesystem uid and gid
//! and its supplementary groups become the user's, so the kernel checks every path operation
//! exactly as it would for that user's own processes, and what is created belongs to the user.
//!
//! Linux keeps credentials per thread. The raw `setfsuid`, `setfsgid` and `setgroups` system
//! calls change only the calling thread (glibc's `setgroups` would change every thread of the
//! agent), so an [`Identity`] is bound to the blocking thread that runs one operation and is put
//! back when dropped, before the thread serves anything else. Changing the filesystem uid away
//! from 0 also drops the filesystem capabilities (`CAP_DAC_OVERRIDE`, `CAP_CHOWN`, `CAP_FOWNER`,
//! ...) from the thread's effective set; changing it back to 0 restores them.
//!
//! The kernel makes a process non-dumpable whenever a thread's filesystem ids change; the agent's
//! own dumpable flag (as found at the first switch; the agent makes itself non-dumpable at
//! start-up) is put back with its identity, so the agent's `/proc` entries stay as they were.
//!
//! gVisor's kernel has no `setfsuid`/`setfsgid` (`ENOSYS`): there the thread's effective ids are
//! switched instead, with the raw `setresuid`/`setresgid` (one thread only; the real and saved
//! ids stay root, so the thread can always return). The effective uid drives the filesystem uid
//! and the capabilities the same way.
//!
//! Root (uid 0) keeps the agent's own identity, and so does everything when the agent itself
//! does not run as root (tests on a host).

// The credential system calls have no safe wrapper that changes one thread only.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::sync::OnceLock;

use cove_guest_protocol::ErrorCode;

use crate::error::AgentError;
use crate::users::{User, UserDb};

/// Most supplementary groups taken over from `/etc/group` (the kernel's `NGROUPS_MAX`).
const MAX_GROUPS: usize = 65536;

/// The calling thread acting as a user; dropping it restores the agent's identity.
///
/// Not `Send`: credentials belong to the thread that switched them.
pub struct Identity {
    /// The agent's supplementary groups to restore (`None`: nothing was switched).
    saved_groups: Option<Vec<libc::gid_t>>,
    _thread_bound: PhantomData<*const ()>,
}

impl Identity {
    /// Makes the calling thread act as `user` for file access (see the module documentation).
    /// A no-op for root and when the agent is not root. `Internal` when the switch fails; the
    /// thread is then back to the agent's identity.
    pub fn assume(user: &User, db: &UserDb) -> Result<Identity, AgentError> {
        if user.uid == 0 || nix::unistd::geteuid().as_raw() != 0 {
            return Ok(Identity::unchanged());
        }
        agent_dumpable();
        let saved = current_groups()?;
        let mut groups = db.groups_of(user);
        groups.truncate(MAX_GROUPS);
        let identity = Identity {
            saved_groups: Some(saved),
            _thread_bound: PhantomData,
        };
        // From here on, dropping `identity` restores whatever was already switched.
        set_groups(&groups)?;
        set_fsgid(user.gid)?;
        set_fsuid(user.uid)?;
        Ok(identity)
    }

    /// An identity that changed nothing.
    pub fn unchanged() -> Identity {
        Identity {
            saved_groups: None,
            _thread_bound: PhantomData,
        }
    }

    /// Whether the thread acts as another user than the agent.
    pub fn is_switched(&self) -> bool {
        self.saved_groups.is_some()
    }

    /// Runs `f` with the agent's own identity, then acts as the user again. For operations on an
    /// already open descriptor only (`fchown`, `fchmod`): a path looked up here would escape the
    /// user's permissions.
    pub fn as_agent<T>(&self, f: impl FnOnce() -> T) -> Result<T, AgentError> {
        if !self.is_switched() {
            return Ok(f());
        }
        let (uid, gid) = (current_fsuid(), current_fsgid());
        set_fsuid(0)?;
        set_fsgid(0)?;
        let out = f();
        set_fsgid(gid)?;
        set_fsuid(uid)?;
        Ok(out)
    }
}

impl Drop for Identity {
    fn drop(&mut self) {
        let Some(groups) = self.saved_groups.take() else {
            return;
        };
        // Root may always return to uid 0; should that ever fail, this thread must not serve
        // anything else with a borrowed identity.
        if set_fsuid(0)
            .and(set_fsgid(0))
            .and(set_groups(&groups))
            .is_err()
        {
            tracing::error!("cannot restore the agent's identity after a file operation");
            std::process::abort();
        }
        restore_dumpable();
    }
}

/// The agent's dumpable flag before any switch (read once, before the first one).
fn agent_dumpable() -> libc::c_int {
    static DUMPABLE: OnceLock<libc::c_int> = OnceLock::new();
    // SAFETY: PR_GET_DUMPABLE takes no pointer and returns the flag.
    *DUMPABLE.get_or_init(|| unsafe { libc::prctl(libc::PR_GET_DUMPABLE) })
}

/// Puts the agent's dumpable flag back (the kernel cleared it on the credential change).
fn restore_dumpable() {
    let flag = agent_dumpable();
    if flag >= 0 {
        // SAFETY: PR_SET_DUMPABLE takes a plain integer argument.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, flag as libc::c_ulong) };
    }
}

fn switch_error(what: &str, err: std::io::Error) -> AgentError {
    AgentError::new(
        ErrorCode::Internal,
        format!("cannot act as the user ({what}): {err}"),
    )
}

/// Whether the kernel has `setfsuid`/`setfsgid` (not gVisor's: see the module documentation).
fn has_fs_ids() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        // SAFETY: setfsuid takes a plain integer; an invalid id (-1) changes nothing.
        let rc = unsafe { libc::syscall(libc::SYS_setfsuid, -1i64) };
        !(rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS))
    })
}

/// The thread's current filesystem uid (`setfsuid(-1)` changes nothing and returns it; without
/// it, the thread's effective uid).
fn current_fsuid() -> libc::uid_t {
    if !has_fs_ids() {
        // SAFETY: geteuid takes nothing and reads the calling thread's credentials.
        return unsafe { libc::syscall(libc::SYS_geteuid) as libc::uid_t };
    }
    // SAFETY: setfsuid takes a plain integer; an invalid id (-1) changes nothing.
    unsafe { libc::syscall(libc::SYS_setfsuid, -1i64) as libc::uid_t }
}

/// The thread's current filesystem gid.
fn current_fsgid() -> libc::gid_t {
    if !has_fs_ids() {
        // SAFETY: getegid takes nothing and reads the calling thread's credentials.
        return unsafe { libc::syscall(libc::SYS_getegid) as libc::gid_t };
    }
    // SAFETY: setfsgid takes a plain integer; an invalid id (-1) changes nothing.
    unsafe { libc::syscall(libc::SYS_setfsgid, -1i64) as libc::gid_t }
}

fn set_fsuid(uid: libc::uid_t) -> Result<(), AgentError> {
    if has_fs_ids() {
        // SAFETY: setfsuid takes a plain integer and changes the calling thread only.
        unsafe { libc::syscall(libc::SYS_setfsuid, i64::from(uid)) };
    } else {
        // SAFETY: the raw setresuid takes plain integers (-1: unchanged) and changes the
        // calling thread only.
        unsafe { libc::syscall(libc::SYS_setresuid, -1i64, i64::from(uid), -1i64) };
    }
    if current_fsuid() != uid {
        return Err(switch_error(
            "setfsuid",
            std::io::Error::from_raw_os_error(libc::EPERM),
        ));
    }
    Ok(())
}

fn set_fsgid(gid: libc::gid_t) -> Result<(), AgentError> {
    if has_fs_ids() {
        // SAFETY: setfsgid takes a plain integer and changes the calling thread only.
        unsafe { libc::syscall(libc::SYS_setfsgid, i64::from(gid)) };
    } else {
        // SAFETY: the raw setresgid takes plain integers (-1: unchanged) and changes the
        // calling thread only.
        unsafe { libc::syscall(libc::SYS_setresgid, -1i64, i64::from(gid), -1i64) };
    }
    if current_fsgid() != gid {
        return Err(switch_error(
            "setfsgid",
            std::io::Error::from_raw_os_error(libc::EPERM),
        ));
    }
    Ok(())
}

fn set_groups(groups: &[libc::gid_t]) -> Result<(), AgentError> {
    // SAFETY: the pointer and length describe a live slice of gid_t; the raw system call (not
    // glibc's wrapper) changes the calling thread only.
    let rc = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if rc != 0 {
        return Err(switch_error("setgroups", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn current_groups() -> Result<Vec<libc::gid_t>, AgentError> {
    // SAFETY: a size of 0 asks for the count only; nothing is written.
    let n = unsafe { libc::syscall(libc::SYS_getgroups, 0, std::ptr::null_mut::<libc::gid_t>()) };
    if n < 0 {
        return Err(switch_error("getgroups", std::io::Error::last_os_error()));
    }
    let mut groups = vec![0 as libc::gid_t; n as usize];
    // SAFETY: the buffer holds `n` gid_t values, the size passed.
    let got = unsafe { libc::syscall(libc::SYS_getgroups, n, groups.as_mut_ptr()) };
    if got < 0 {
        return Err(switch_error("getgroups", std::io::Error::last_os_error()));
    }
    groups.truncate(got as usize);
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn db() -> UserDb {
        UserDb::parse(
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n",
            b"root:x:0:\nnogroup:x:65534:\n",
        )
    }

    /// As root on a host: a thread acting as `nobody` is refused a 0600 root file and creates
    /// files as `nobody`; dropping the identity gives root back.
    #[test]
    fn acts_as_the_user_and_restores() {
        if nix::unistd::geteuid().as_raw() != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"s").expect("write");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let db = db();
        let nobody = db.by_name("nobody").expect("nobody").clone();
        std::thread::spawn(move || {
            let id = Identity::assume(&nobody, &db).expect("assume");
            assert!(id.is_switched());
            let err = std::fs::read(&secret).expect_err("denied");
            assert_eq!(err.raw_os_error(), Some(libc::EACCES));
            let mine = secret.with_file_name("mine");
            std::fs::write(&mine, b"m").expect("create");
            let meta = std::fs::metadata(&mine).expect("stat");
            assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
            let file = std::fs::File::open(&mine).expect("open");
            id.as_agent(|| std::os::unix::fs::fchown(&file, Some(0), Some(0)))
                .expect("switch")
                .expect("fchown as the agent");
            assert!(
                std::fs::read(&secret).is_err(),
                "the user again after as_agent"
            );
            drop(id);
            assert_eq!(std::fs::read(&secret).expect("root again"), b"s");
            // SAFETY: PR_GET_DUMPABLE takes no pointer.
            let dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE) };
            assert_eq!(
                dumpable, 1,
                "the agent stays visible in /proc to the sandbox's root"
            );
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn root_changes_nothing() {
        let db = db();
        let root = db.resolve(Some("root")).expect("root");
        assert!(!Identity::assume(&root, &db).expect("assume").is_switched());
    }
}
