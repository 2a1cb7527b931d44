//! The sandbox's seccomp filter.
//!
//! It follows Docker's default profile (moby `profiles/seccomp/default.json`) for a container
//! without extra capabilities, written as a deny-list for brevity: the default action is ALLOW and
//! the syscalls Docker's profile does not allow such a container fail with `EPERM`. Three groups:
//!
//! - [`DENIED`]: kernel-wide or host-wide effects (modules, kexec, reboot, swap, clock, accounting,
//!   quotas, keyrings), filesystem and namespace administration (mount family, `pivot_root`,
//!   `setns`, `unshare`), NUMA policy, raw I/O ports, kernel tracing and eBPF (`perf_event_open`,
//!   `bpf`, `userfaultfd`), file handles (`open_by_handle_at`), io_uring (dropped from Docker's
//!   default profile in moby 25), and obsolete calls (`uselib`, `ustat`, `sysfs`, `vm86`, ...).
//! - `clone` with a namespace flag (`CLONE_NEWNS`, `NEWUTS`, `NEWIPC`, `NEWUSER`, `NEWPID`,
//!   `NEWNET`, `NEWCGROUP`) fails with `EPERM`, like Docker's argument filter; `clone3`, whose
//!   flags seccomp cannot read, fails with `ENOSYS` exactly as in Docker, so libc falls back to
//!   `clone`.
//! - `socket` with address family `AF_VSOCK` or `AF_ALG` fails with `EAFNOSUPPORT`, like Docker's
//!   profile (which allows `socket` only when the family is not `AF_VSOCK`). vsock is node-wide,
//!   not per network namespace: a sandbox could listen on the node's vsock ports and reach the
//!   hypervisor's side when the node is a VM. `AF_ALG` is the kernel crypto API, a long line of
//!   kernel bugs reachable from unprivileged code and of no use to a sandbox that has userspace
//!   crypto. As in Docker, 32-bit x86 code that multiplexes `socket` through `socketcall`
//!   passes the family in memory, where seccomp cannot read it; the rule covers the direct
//!   `socket` call of every ABI.
//!
//! Allowed on purpose, as Docker does on kernels ≥ 4.8: `ptrace`, `process_vm_readv`,
//! `process_vm_writev` (debuggers work inside the sandbox; the pid namespace bounds them).
//! `personality` stays allowed for every persona (Docker restricts its argument; the persona
//! flags grant nothing across the sandbox boundary). Names unknown to the host's libseccomp are
//! skipped by runc, so the list may name syscalls of other architectures (`vm86`, `stime`).

use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArgBuilder, LinuxSeccompOperator,
    LinuxSyscall,
};
use oci_spec::OciSpecError;

/// Syscalls that fail with `EPERM` in a sandbox.
pub(crate) const DENIED: &[&str] = &[
    "_sysctl",
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "fanotify_init",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "get_mempolicy",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mbind",
    "mount",
    "mount_setattr",
    "move_mount",
    "move_pages",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "query_module",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "set_mempolicy",
    "setns",
    "settimeofday",
    "stime",
    "swapoff",
    "swapon",
    "syslog",
    "sysfs",
    "umount",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vhangup",
    "vm86",
    "vm86old",
];

/// Namespace flags of `clone(2)` that a sandbox may not use.
const CLONE_NAMESPACE_FLAGS: &[u64] = &[
    0x0002_0000, // CLONE_NEWNS
    0x0200_0000, // CLONE_NEWCGROUP
    0x0400_0000, // CLONE_NEWUTS
    0x0800_0000, // CLONE_NEWIPC
    0x1000_0000, // CLONE_NEWUSER
    0x2000_0000, // CLONE_NEWPID
    0x4000_0000, // CLONE_NEWNET
];

/// Address families `socket(2)` may not open: `AF_ALG` (38) and `AF_VSOCK` (40).
const DENIED_SOCKET_FAMILIES: &[u64] = &[38, 40];

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;
const EAFNOSUPPORT: u32 = 97;

/// The filter described in the module docs, for x86-64 (with its x86 and x32 ABIs).
pub(crate) fn profile() -> Result<LinuxSeccomp, OciSpecError> {
    let mut syscalls = vec![LinuxSyscall::default()];
    syscalls[0].set_names(DENIED.iter().map(|s| s.to_string()).collect());
    syscalls[0].set_action(LinuxSeccompAction::ScmpActErrno);
    syscalls[0].set_errno_ret(Some(EPERM));

    // One rule per flag: the conditions of one rule are ANDed, and we want "any flag set".
    // The flags argument is arg 0 of clone on x86-64 and x86.
    for flag in CLONE_NAMESPACE_FLAGS {
        let arg = LinuxSeccompArgBuilder::default()
            .index(0usize)
            .value(*flag)
            .value_two(*flag)
            .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
            .build()?;
        let mut rule = LinuxSyscall::default();
        rule.set_names(vec!["clone".to_string()]);
        rule.set_action(LinuxSeccompAction::ScmpActErrno);
        rule.set_errno_ret(Some(EPERM));
        rule.set_args(Some(vec![arg]));
        syscalls.push(rule);
    }

    // The family is arg 0 of socket; an equality test per family.
    for family in DENIED_SOCKET_FAMILIES {
        let arg = LinuxSeccompArgBuilder::default()
            .index(0usize)
            .value(*family)
            .op(LinuxSeccompOperator::ScmpCmpEq)
            .build()?;
        let mut rule = LinuxSyscall::default();
        rule.set_names(vec!["socket".to_string()]);
        rule.set_action(LinuxSeccompAction::ScmpActErrno);
        rule.set_errno_ret(Some(EAFNOSUPPORT));
        rule.set_args(Some(vec![arg]));
        syscalls.push(rule);
    }

    let mut clone3 = LinuxSyscall::default();
    clone3.set_names(vec!["clone3".to_string()]);
    clone3.set_action(LinuxSeccompAction::ScmpActErrno);
    clone3.set_errno_ret(Some(ENOSYS));
    syscalls.push(clone3);

    let mut seccomp = LinuxSeccomp::default();
    seccomp.set_default_action(LinuxSeccompAction::ScmpActAllow);
    seccomp.set_architectures(Some(vec![
        Arch::ScmpArchX86_64,
        Arch::ScmpArchX86,
        Arch::ScmpArchX32,
    ]));
    seccomp.set_syscalls(Some(syscalls));
    Ok(seccomp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denies_the_dangerous_and_allows_ptrace() {
        for name in [
            "mount",
            "unshare",
            "setns",
            "bpf",
            "keyctl",
            "kexec_load",
            "reboot",
        ] {
            assert!(DENIED.contains(&name), "{name}");
        }
        for name in [
            "ptrace",
            "process_vm_readv",
            "personality",
            "clone",
            "clone3",
        ] {
            assert!(!DENIED.contains(&name), "{name}");
        }
        let mut sorted = DENIED.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), DENIED.len(), "duplicates in DENIED");
    }

    #[test]
    fn serialises_to_oci_json() {
        let json = serde_json::to_value(profile().expect("profile")).expect("serialise");
        assert_eq!(json["defaultAction"], "SCMP_ACT_ALLOW");
        assert_eq!(json["syscalls"][0]["action"], "SCMP_ACT_ERRNO");
        assert_eq!(json["syscalls"][1]["args"][0]["op"], "SCMP_CMP_MASKED_EQ");
    }

    #[test]
    fn socket_of_vsock_and_alg_fails_with_eafnosupport() {
        let json = serde_json::to_value(profile().expect("profile")).expect("serialise");
        let rules: Vec<_> = json["syscalls"]
            .as_array()
            .expect("syscalls")
            .iter()
            .filter(|r| r["names"] == serde_json::json!(["socket"]))
            .collect();
        let families: Vec<_> = rules
            .iter()
            .map(|r| {
                assert_eq!(r["action"], "SCMP_ACT_ERRNO");
                assert_eq!(r["errnoRet"], 97);
                assert_eq!(r["args"][0]["index"], 0);
                assert_eq!(r["args"][0]["op"], "SCMP_CMP_EQ");
                r["args"][0]["value"].as_u64().expect("family")
            })
            .collect();
        assert_eq!(families, [38, 40], "AF_ALG and AF_VSOCK");
    }
}
