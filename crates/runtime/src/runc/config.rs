//! The OCI `config.json` of a sandbox, built with `oci-spec`.
//!
//! Choices (beyond `runc spec`'s defaults, whose masked and read-only paths are kept):
//! - init = the guest agent, root, `oomScoreAdj: -1000` so the sandbox's own OOM never kills it
//!   (the agent resets its children to 0) when the node agent has `CAP_SYS_RESOURCE` (without it
//!   the kernel refuses to lower a score and runc would fail, so the field is left out),
//!   `noNewPrivileges: false` so `sudo` works inside; its environment is `PATH` and, when
//!   command cgroups are delegated, [`COMMAND_CGROUP_FDS_ENV`] naming the descriptors runc
//!   passes it (`command_cgroups.rs`: never mounted writable inside);
//! - Docker's default capability set without `CAP_NET_RAW` (no raw sockets; ICMP echo through
//!   datagram sockets for every group instead), in bounding/effective/permitted;
//!   inheritable/ambient empty;
//! - namespaces pid, mount, uts, ipc, cgroup and network: the node's namespace for the sandbox
//!   when [`SandboxSpec::network`] names one (its `path`; the gateway behind it), else a new one
//!   with loopback only; with a node network, `/etc/resolv.conf` (the gateway) and, with an
//!   interception CA, the system trust bundle `/etc/ssl/certs/ca-certificates.crt` (the
//!   release's bundle + that CA) are bound read-only from the sandbox directory's `net/`;
//! - resources: memory = memory+swap = `memory_mib` (no swap), `pids_max`, cpu quota =
//!   `vcpus` × 100 ms per 100 ms and a cpuset of `vcpus` CPUs (so `nproc` agrees), devices
//!   deny-all (runc adds its default device allow-list);
//! - mounts: runc's standard set (proc, /dev tmpfs, devpts, /dev/shm, mqueue, sysfs ro, cgroup
//!   ro) plus the guest agent binary (read-only bind) and the run dir
//!   ([`GUEST_RUN_DIR`], on the sandbox's own disk when it has one, so it is bounded by that
//!   disk's size; its entries sealed once the agent listens, see `seal.rs`) as a read-write
//!   bind with `nosuid,nodev,noexec`: the agent keeps its
//!   socket, spilled output and scripts there; scripts are run by an interpreter (`sh FILE`,
//!   `source FILE`), which needs read, not exec, permission, and a host-backed directory the guest
//!   can write should not also hold executables; and lxcfs's `/proc` and `/sys` views bound over
//!   the sandbox's own (see `views.rs`);
//! - seccomp: see [`super::seccomp`];
//! - with an id range (user namespaces, `userns.rs`): a `user` namespace mapping ids
//!   `0..65536` to the range; `/sys` is then a read-only bind of the host's when the sandbox
//!   joins a node network (sysfs cannot be mounted in a user namespace that does not own the
//!   network namespace), and the network namespace's sysctls are the node's to set (the
//!   sandbox's root may not write them there); the hard `RLIMIT_NOFILE` stays within the node
//!   agent's own (raising it needs `CAP_SYS_RESOURCE` in the host's user namespace).

use std::collections::HashSet;
use std::path::Path;

use cove_guest_protocol::{
    COMMAND_CGROUP_FDS_ENV, GUEST_AGENT_PATH, GUEST_RUN_DIR, GUEST_SOCKET_PATH,
};
use oci_spec::runtime::{
    Capability, LinuxBuilder, LinuxCapabilities, LinuxCpu, LinuxDeviceCgroup, LinuxIdMapping,
    LinuxIdMappingBuilder, LinuxMemoryBuilder, LinuxNamespace, LinuxNamespaceType, LinuxPids,
    LinuxResources, Mount, PosixRlimitBuilder, PosixRlimitType, Process, Root, Spec, User,
};
use oci_spec::OciSpecError;

use super::layout::Layout;
use super::seccomp;
use super::userns::{IdRange, RANGE_SIZE};
use super::views::HostViews;
use crate::{RuntimeError, SandboxSpec};

/// The system trust bundle of Debian-like releases (curl, OpenSSL, Python's `ssl` read it).
pub(crate) use crate::CA_BUNDLE_PATH;

/// `net.ipv4.ping_group_range` of the sandbox's network namespace: every group may open ICMP
/// datagram sockets (`ping` without `CAP_NET_RAW`).
const PING_GROUP_RANGE: &str = "0 2147483647";

/// `PATH` of the guest agent.
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// CFS period in microseconds (cpu quota = vcpus × period).
const CPU_PERIOD_US: u64 = 100_000;

/// `RLIMIT_NOFILE` of the sandbox (Docker ≥ 25's defaults: soft 1024, hard 524288).
const NOFILE_SOFT: u64 = 1024;
const NOFILE_HARD: u64 = 524_288;

/// Docker's default capabilities without `CAP_NET_RAW`: no raw or packet sockets (ICMP echo
/// still works for every user through datagram sockets, [`PING_GROUP_RANGE`]).
const CAPABILITIES: &[Capability] = &[
    Capability::Chown,
    Capability::DacOverride,
    Capability::Fsetid,
    Capability::Fowner,
    Capability::Mknod,
    Capability::Setgid,
    Capability::Setuid,
    Capability::Setfcap,
    Capability::Setpcap,
    Capability::NetBindService,
    Capability::SysChroot,
    Capability::Kill,
    Capability::AuditWrite,
];

/// Paths masked as in `runc spec`.
const MASKED_PATHS: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/sys/firmware",
    "/proc/scsi",
];

/// Paths made read-only as in `runc spec`.
const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// OOM score of the guest agent: never chosen by the OOM killer.
const AGENT_OOM_SCORE_ADJ: i32 = -1000;

/// `CAP_SYS_RESOURCE`, needed to lower an OOM score and to raise a hard rlimit.
const CAP_SYS_RESOURCE_BIT: u32 = 24;

/// What the calling process (the node agent, which runs runc) may grant a sandbox. Some hosts,
/// e.g. CI sandboxes, run root without `CAP_SYS_RESOURCE`; runc then fails on a lowered OOM score
/// or a raised hard rlimit, so the config must stay within what the caller has.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostPrivileges {
    /// `CAP_SYS_RESOURCE` is in the effective set.
    pub sys_resource: bool,
    /// This process's hard `RLIMIT_NOFILE`.
    pub nofile_hard: u64,
}

impl HostPrivileges {
    /// Reads `/proc/self/status` and `/proc/self/limits`.
    pub(crate) fn probe() -> Self {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let sys_resource = status
            .lines()
            .find_map(|l| {
                l.strip_prefix("CapEff:")
                    .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            })
            .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE_BIT) != 0);
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let nofile_hard = limits
            .lines()
            .find_map(|l| {
                let rest = l.strip_prefix("Max open files")?;
                let hard = rest.split_whitespace().nth(1)?;
                Some(if hard == "unlimited" {
                    u64::MAX
                } else {
                    hard.parse().ok()?
                })
            })
            .unwrap_or(NOFILE_SOFT);
        HostPrivileges {
            sys_resource,
            nofile_hard,
        }
    }

    fn oom_score_adj(self) -> Option<i32> {
        self.sys_resource.then_some(AGENT_OOM_SCORE_ADJ)
    }

    fn nofile(self, userns: bool) -> (u64, u64) {
        let hard = if self.sys_resource && !userns {
            NOFILE_HARD
        } else {
            NOFILE_HARD.min(self.nofile_hard)
        };
        (NOFILE_SOFT.min(hard), hard)
    }
}

/// The config of one sandbox whose overlay is (to be) mounted at `layout.rootfs`; `ids`: its
/// user namespace's host range (`None`: no user namespace).
pub(crate) fn build(
    spec: &SandboxSpec,
    layout: &Layout,
    host: HostPrivileges,
    views: &HostViews,
    command_cgroups: &[String],
    ids: Option<IdRange>,
) -> Result<Spec, RuntimeError> {
    let mut args = vec![
        GUEST_AGENT_PATH.to_string(),
        "--listen".to_string(),
        GUEST_SOCKET_PATH.to_string(),
    ];
    args.extend(spec.guest_agent_args.iter().cloned());

    let caps: HashSet<Capability> = CAPABILITIES.iter().copied().collect();
    let mut capabilities = LinuxCapabilities::default();
    capabilities.set_bounding(Some(caps.clone()));
    capabilities.set_effective(Some(caps.clone()));
    capabilities.set_permitted(Some(caps));
    capabilities.set_inheritable(Some(HashSet::new()));
    capabilities.set_ambient(Some(HashSet::new()));

    let (nofile_soft, nofile_hard) = host.nofile(ids.is_some());
    let nofile = PosixRlimitBuilder::default()
        .typ(PosixRlimitType::RlimitNofile)
        .soft(nofile_soft)
        .hard(nofile_hard)
        .build()
        .map_err(|e| config_error(spec, e))?;

    let mut user = User::default();
    user.set_uid(0);
    user.set_gid(0);

    let mut process = Process::default();
    process.set_terminal(Some(false));
    process.set_user(user);
    process.set_args(Some(args));
    let mut env = vec![PATH_ENV.to_string()];
    if !command_cgroups.is_empty() {
        // The delegated command cgroups arrive as descriptors 3, 4, ... (`command_cgroups.rs`).
        env.push(format!(
            "{COMMAND_CGROUP_FDS_ENV}={}",
            command_cgroups.join(",")
        ));
    }
    process.set_env(Some(env));
    process.set_cwd("/".into());
    process.set_capabilities(Some(capabilities));
    process.set_rlimits(Some(vec![nofile]));
    process.set_no_new_privileges(Some(false));
    process.set_oom_score_adj(host.oom_score_adj());

    let mut root = Root::default();
    root.set_path(absolute(&layout.rootfs)?);
    root.set_readonly(Some(false));

    // A node network's namespace belongs to the host's user namespace: with a user namespace
    // of its own the sandbox cannot write its sysctls (the node sets them, see
    // `cove_network::plumbing`).
    let sysctl = if ids.is_some() && spec.network.is_some() {
        std::collections::HashMap::new()
    } else {
        // Written from inside: groups are read in the sandbox's user namespace, where only
        // its own are valid.
        let range = match ids {
            Some(_) => format!("0 {}", RANGE_SIZE - 1),
            None => PING_GROUP_RANGE.to_string(),
        };
        std::collections::HashMap::from([("net.ipv4.ping_group_range".to_string(), range)])
    };
    let mut linux = LinuxBuilder::default();
    if let Some(range) = ids {
        let mapping = id_mapping(range).map_err(|e| config_error(spec, e))?;
        linux = linux
            .uid_mappings(vec![mapping])
            .gid_mappings(vec![mapping]);
    }
    let linux = linux
        .namespaces(namespaces(
            spec.network.as_ref().map(|n| n.netns_path.clone()),
            ids.is_some(),
        ))
        .resources(
            resources(spec, views.cpuset(&spec.id, spec.resources.vcpus))
                .map_err(|e| config_error(spec, e))?,
        )
        .cgroups_path(format!("cove/{}", spec.id))
        .masked_paths(strings(MASKED_PATHS))
        .readonly_paths(strings(READONLY_PATHS))
        .seccomp(seccomp::profile().map_err(|e| config_error(spec, e))?)
        .sysctl(sysctl)
        .build()
        .map_err(|e| config_error(spec, e))?;

    let mut config = Spec::default();
    config.set_version("1.0.2".to_string());
    config.set_process(Some(process));
    config.set_root(Some(root));
    config.set_hostname(Some(spec.hostname.clone()));
    config.set_mounts(Some(mounts(
        spec,
        layout,
        &views.lxcfs_mounts(),
        ids.is_some(),
    )?));
    config.set_annotations(None);
    config.set_linux(Some(linux));
    Ok(config)
}

/// Adapts a runc config for gVisor's `runsc`: the network namespace is the one runsc runs in
/// (joined by `run_detached`), not one of the config's; no seccomp profile (gVisor's kernel answers the
/// system calls; runsc ignores an OCI profile by default) and no sysctls (gVisor's network
/// stack has its own).
pub(crate) fn for_gvisor(config: &mut Spec) {
    if let Some(linux) = config.linux_mut() {
        // No network namespace in the config at all: runsc would make a new one for an entry
        // without a path, even with `--network=host`. It then stays in the namespace it runs
        // in (the node's for the sandbox), or makes an empty one for `--network=none`.
        if let Some(namespaces) = linux.namespaces_mut() {
            namespaces.retain(|ns| ns.typ() != LinuxNamespaceType::Network);
        }
        linux.set_seccomp(None);
        linux.set_sysctl(None);
    }
    // The agent quiesces for a checkpoint on a signal from `runsc kill` (`gvisor_memory.rs`).
    if let Some(process) = config.process_mut() {
        let mut args = process.args().clone().unwrap_or_default();
        args.push(cove_guest_protocol::QUIESCE_FLAG.to_string());
        process.set_args(Some(args));
    }
}

/// Writes `config.json` into the bundle directory.
pub(crate) fn write(config: &Spec, layout: &Layout) -> Result<(), RuntimeError> {
    let json = serde_json::to_vec_pretty(config).map_err(|e| RuntimeError::Io {
        context: "serialise OCI config".to_string(),
        source: std::io::Error::other(e),
    })?;
    super::layout::write_file(&layout.config_json(), &json)
}

/// Container ids `0..RANGE_SIZE` to the host ids of `range`.
fn id_mapping(range: IdRange) -> Result<LinuxIdMapping, OciSpecError> {
    LinuxIdMappingBuilder::default()
        .container_id(0u32)
        .host_id(range.host())
        .size(RANGE_SIZE)
        .build()
}

fn namespaces(netns: Option<std::path::PathBuf>, userns: bool) -> Vec<LinuxNamespace> {
    userns
        .then_some(LinuxNamespaceType::User)
        .into_iter()
        .chain([
            LinuxNamespaceType::Pid,
            LinuxNamespaceType::Mount,
            LinuxNamespaceType::Uts,
            LinuxNamespaceType::Ipc,
            LinuxNamespaceType::Network,
            LinuxNamespaceType::Cgroup,
        ])
        .map(|typ| {
            let mut ns = LinuxNamespace::default();
            ns.set_typ(typ);
            if typ == LinuxNamespaceType::Network {
                ns.set_path(netns.clone());
            }
            ns
        })
        .collect()
}

fn resources(spec: &SandboxSpec, cpuset: Option<String>) -> Result<LinuxResources, OciSpecError> {
    let bytes =
        i64::try_from(spec.resources.memory_mib.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX);
    let memory = LinuxMemoryBuilder::default()
        .limit(bytes)
        .swap(bytes)
        .build()?;

    let mut pids = LinuxPids::default();
    pids.set_limit(i64::try_from(spec.resources.pids_max).unwrap_or(i64::MAX));

    let mut cpu = LinuxCpu::default();
    cpu.set_period(Some(CPU_PERIOD_US));
    cpu.set_quota(Some(
        i64::from(spec.resources.vcpus.max(1)) * CPU_PERIOD_US as i64,
    ));
    cpu.set_cpus(cpuset);

    let mut deny_all = LinuxDeviceCgroup::default();
    deny_all.set_allow(false);
    deny_all.set_access(Some("rwm".to_string()));

    let mut resources = LinuxResources::default();
    resources.set_memory(Some(memory));
    resources.set_pids(Some(pids));
    resources.set_cpu(Some(cpu));
    resources.set_devices(Some(vec![deny_all]));
    Ok(resources)
}

fn mounts(
    spec: &SandboxSpec,
    layout: &Layout,
    lxcfs: &[(std::path::PathBuf, String)],
    userns: bool,
) -> Result<Vec<Mount>, RuntimeError> {
    let m = |dest: &str, typ: &str, source: &str, opts: &[&str]| {
        let mut mount = Mount::default();
        mount.set_destination(dest.into());
        mount.set_typ(Some(typ.to_string()));
        mount.set_source(Some(source.into()));
        mount.set_options(Some(strings(opts)));
        mount
    };
    let mut agent = m(
        GUEST_AGENT_PATH,
        "bind",
        "",
        &["bind", "ro", "nosuid", "nodev"],
    );
    agent.set_source(Some(absolute(&spec.guest_agent)?));
    let mut run = m(
        GUEST_RUN_DIR,
        "bind",
        "",
        &["bind", "nosuid", "nodev", "noexec"],
    );
    run.set_source(Some(absolute(&layout.run_dir())?));
    let views = lxcfs.iter().map(|(src, dest)| {
        let mut view = m(dest, "bind", "", &["bind", "nosuid", "nodev", "noexec"]);
        view.set_source(Some(src.clone()));
        view
    });
    let mut all = vec![
        m("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        m(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        m(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        m(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        m(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        if userns && spec.network.is_some() {
            // Recursive: a user namespace may not bind a mount without the mounts below it
            // (the kernel locks them); `rro` makes them all read-only.
            m(
                "/sys",
                "bind",
                "/sys",
                &["rbind", "rro", "nosuid", "noexec", "nodev", "ro"],
            )
        } else {
            m(
                "/sys",
                "sysfs",
                "sysfs",
                &["nosuid", "noexec", "nodev", "ro"],
            )
        },
        m(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", "ro"],
        ),
        agent,
        run,
    ];
    // After /proc and /sys: the views are mounted over their files.
    all.extend(views);
    // Volumes, before the network files: a volume cannot hide them.
    let sources = super::volumes::sources(spec, layout, userns);
    for (v, source) in spec.volumes.iter().zip(sources) {
        let mut opts = vec!["rbind", "nosuid", "nodev"];
        if v.read_only {
            opts.push("ro");
        }
        let mut bind = m(&v.target, "bind", "", &opts);
        bind.set_source(Some(source));
        all.push(bind);
    }
    if let Some(net) = &spec.network {
        let mut resolv = m(
            "/etc/resolv.conf",
            "bind",
            "",
            &["bind", "ro", "nosuid", "nodev", "noexec"],
        );
        resolv.set_source(Some(absolute(&layout.resolv_conf())?));
        all.push(resolv);
        if net.extra_ca_pem.is_some() {
            let mut bundle = m(
                CA_BUNDLE_PATH,
                "bind",
                "",
                &["bind", "ro", "nosuid", "nodev", "noexec"],
            );
            bundle.set_source(Some(absolute(&layout.ca_bundle())?));
            all.push(bundle);
        }
    }
    Ok(all)
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn absolute(path: &Path) -> Result<std::path::PathBuf, RuntimeError> {
    std::path::absolute(path).map_err(|source| RuntimeError::Io {
        context: format!("make {} absolute", path.display()),
        source,
    })
}

fn config_error(spec: &SandboxSpec, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Command {
        op: "config",
        id: spec.id.clone(),
        detail: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIVILEGED: HostPrivileges = HostPrivileges {
        sys_resource: true,
        nofile_hard: 1024,
    };

    #[test]
    fn stays_within_host_privileges() {
        let s = spec();
        let layout = Layout::new(&s.dir);
        let unprivileged = HostPrivileges {
            sys_resource: false,
            nofile_hard: 20_000,
        };
        let json = serde_json::to_value(
            build(
                &s,
                &layout,
                unprivileged,
                &HostViews::without_lxcfs(vec![0, 1]),
                &[],
                None,
            )
            .expect("build"),
        )
        .expect("json");
        assert!(json["process"].get("oomScoreAdj").is_none());
        assert_eq!(json["process"]["rlimits"][0]["hard"], 20_000);
        let json = serde_json::to_value(
            build(
                &s,
                &layout,
                PRIVILEGED,
                &HostViews::without_lxcfs(vec![0, 1]),
                &[],
                None,
            )
            .expect("build"),
        )
        .expect("json");
        assert_eq!(json["process"]["rlimits"][0]["hard"], NOFILE_HARD);
    }

    fn spec() -> SandboxSpec {
        SandboxSpec {
            id: "sbx1".to_string(),
            rootfs: "/releases/base/1/rootfs".into(),
            dir: "/data/sandboxes/sbx1".into(),
            guest_agent: "/usr/lib/cove/cove-guest-agent".into(),
            guest_agent_args: vec!["--log".to_string(), "debug".to_string()],
            hostname: "sbx1".to_string(),
            resources: cove_domain::Resources {
                vcpus: 2,
                memory_mib: 512,
                pids_max: 256,
                disk_mib: None,
            },
            network: None,
            volumes: Vec::new(),
        }
    }

    #[test]
    fn for_gvisor_leaves_the_network_to_runsc_and_drops_seccomp_and_sysctls() {
        let mut s = spec();
        s.network = Some(crate::SandboxNetwork {
            netns_path: "/run/netns/cove-s7".into(),
            resolv_conf: "nameserver 10.239.0.1\n".into(),
            extra_ca_pem: None,
            address: std::net::Ipv4Addr::new(10, 239, 0, 7),
            gateway: std::net::Ipv4Addr::new(10, 239, 0, 1),
            tap: None,
        });
        let layout = Layout::new(&s.dir);
        let views = HostViews::without_lxcfs(vec![0, 1]);
        let mut config = build(&s, &layout, PRIVILEGED, &views, &[], None).expect("build");
        for_gvisor(&mut config);
        let json = serde_json::to_value(config).expect("json");
        let types: Vec<_> = json["linux"]["namespaces"]
            .as_array()
            .expect("namespaces")
            .iter()
            .map(|n| n["type"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(types, ["pid", "mount", "uts", "ipc", "cgroup"]);
        assert!(json["linux"].get("seccomp").is_none());
        assert!(json["linux"].get("sysctl").is_none());
        // The agent quiesces on a signal, for checkpoints.
        assert_eq!(
            json["process"]["args"].as_array().and_then(|a| a.last()),
            Some(&serde_json::json!("--quiesce-on-signal"))
        );
        // The same limits and cgroup as on runc.
        assert_eq!(json["linux"]["cgroupsPath"], "cove/sbx1");
        assert_eq!(json["linux"]["resources"]["pids"]["limit"], 256);
        // The resolver file is still bound in.
        assert!(json["mounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .any(|m| m["destination"] == "/etc/resolv.conf"));
    }

    #[test]
    fn a_node_network_is_joined_by_path_with_its_files_bound_read_only() {
        let mut s = spec();
        s.network = Some(crate::SandboxNetwork {
            netns_path: "/run/netns/cove-s7".into(),
            resolv_conf: "nameserver 10.239.0.1\n".into(),
            extra_ca_pem: Some("-----BEGIN CERTIFICATE-----".into()),
            address: std::net::Ipv4Addr::new(10, 239, 0, 7),
            gateway: std::net::Ipv4Addr::new(10, 239, 0, 1),
            tap: None,
        });
        let layout = Layout::new(&s.dir);
        let json = serde_json::to_value(
            build(
                &s,
                &layout,
                PRIVILEGED,
                &HostViews::without_lxcfs(vec![0, 1]),
                &[],
                None,
            )
            .expect("build"),
        )
        .expect("json");
        let net = json["linux"]["namespaces"]
            .as_array()
            .expect("namespaces")
            .iter()
            .find(|n| n["type"] == "network")
            .expect("network namespace");
        assert_eq!(net["path"], "/run/netns/cove-s7");
        let mounts = json["mounts"].as_array().expect("mounts");
        let bound = |dest: &str| {
            mounts
                .iter()
                .find(|m| m["destination"] == dest)
                .unwrap_or_else(|| panic!("{dest} mounted"))
                .clone()
        };
        let resolv = bound("/etc/resolv.conf");
        assert_eq!(resolv["source"], "/data/sandboxes/sbx1/net/resolv.conf");
        assert!(resolv["options"]
            .as_array()
            .expect("options")
            .contains(&serde_json::json!("ro")));
        assert_eq!(
            bound(CA_BUNDLE_PATH)["source"],
            "/data/sandboxes/sbx1/net/ca-certificates.crt"
        );
        // Without a node network: a namespace of its own (no path), no bound files.
        let plain = serde_json::to_value(
            build(
                &spec(),
                &layout,
                PRIVILEGED,
                &HostViews::without_lxcfs(vec![0, 1]),
                &[],
                None,
            )
            .expect("build"),
        )
        .expect("json");
        assert!(plain["linux"]["namespaces"]
            .as_array()
            .expect("namespaces")
            .iter()
            .all(|n| n.get("path").is_none()));
        assert!(!plain["mounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .any(|m| m["destination"] == "/etc/resolv.conf"));
    }

    #[test]
    fn a_user_namespace_maps_the_range_and_leaves_a_node_network_to_the_node() {
        let range = IdRange::at(1 << 30);
        let mut s = spec();
        let layout = Layout::new(&s.dir);
        let views = HostViews::without_lxcfs(vec![0, 1]);
        let build_json = |s: &SandboxSpec| {
            serde_json::to_value(
                build(s, &layout, PRIVILEGED, &views, &[], Some(range)).expect("build"),
            )
            .expect("json")
        };
        // Own network namespace: sysfs of its own and the ping sysctl set by runc.
        let json = build_json(&s);
        let linux = &json["linux"];
        assert_eq!(linux["namespaces"][0]["type"], "user");
        let mapping = serde_json::json!([{"containerID": 0, "hostID": 1u32 << 30, "size": 65536}]);
        assert_eq!(linux["uidMappings"], mapping);
        assert_eq!(linux["gidMappings"], mapping);
        // Written from inside the user namespace: only its own groups are valid there.
        assert_eq!(linux["sysctl"]["net.ipv4.ping_group_range"], "0 65535");
        let sys = |json: &serde_json::Value| {
            json["mounts"]
                .as_array()
                .expect("mounts")
                .iter()
                .find(|m| m["destination"] == "/sys")
                .expect("/sys")
                .clone()
        };
        assert_eq!(sys(&json)["type"], "sysfs");
        // Raising the hard RLIMIT_NOFILE needs CAP_SYS_RESOURCE in the host's namespace.
        assert_eq!(json["process"]["rlimits"][0]["hard"], 1024);
        // A node network: the host's /sys bound read-only, the sysctls left to the node.
        s.network = Some(crate::SandboxNetwork {
            netns_path: "/run/netns/cove-s7".into(),
            resolv_conf: String::new(),
            extra_ca_pem: None,
            address: std::net::Ipv4Addr::new(10, 239, 0, 7),
            gateway: std::net::Ipv4Addr::new(10, 239, 0, 1),
            tap: None,
        });
        let json = build_json(&s);
        let sys = sys(&json);
        assert_eq!(
            (&sys["type"], &sys["source"]),
            (&serde_json::json!("bind"), &serde_json::json!("/sys"))
        );
        assert!(sys["options"]
            .as_array()
            .expect("options")
            .contains(&serde_json::json!("rro")));
        assert!(json["linux"]
            .get("sysctl")
            .is_none_or(|s| s.as_object().is_none_or(|o| o.is_empty())));
    }

    #[test]
    fn config_has_the_promised_shape() {
        let s = spec();
        let layout = Layout::new(&s.dir);
        let json = serde_json::to_value(
            build(
                &s,
                &layout,
                PRIVILEGED,
                &HostViews::without_lxcfs(vec![0, 1]),
                &[],
                None,
            )
            .expect("build"),
        )
        .expect("json");
        let p = &json["process"];
        assert_eq!(
            p["args"],
            serde_json::json!([
                GUEST_AGENT_PATH,
                "--listen",
                GUEST_SOCKET_PATH,
                "--log",
                "debug"
            ])
        );
        assert_eq!(p["oomScoreAdj"], -1000);
        assert_eq!(p["noNewPrivileges"], false);
        assert_eq!(p["terminal"], false);
        assert_eq!(
            p["capabilities"]["bounding"].as_array().map(Vec::len),
            Some(13)
        );
        assert_eq!(p["capabilities"]["ambient"], serde_json::json!([]));
        assert_eq!(json["root"]["path"], "/data/sandboxes/sbx1/rootfs");
        assert_eq!(json["hostname"], "sbx1");
        let r = &json["linux"]["resources"];
        assert_eq!(r["memory"]["limit"], 512 * 1024 * 1024);
        assert_eq!(r["memory"]["swap"], 512 * 1024 * 1024);
        assert_eq!(r["pids"]["limit"], 256);
        assert_eq!(r["cpu"]["quota"], 200_000);
        assert_eq!(json["linux"]["cgroupsPath"], "cove/sbx1");
        let ns: Vec<_> = json["linux"]["namespaces"]
            .as_array()
            .expect("namespaces")
            .iter()
            .map(|n| n["type"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(ns, ["pid", "mount", "uts", "ipc", "network", "cgroup"]);
        let mounts = json["mounts"].as_array().expect("mounts");
        let agent = mounts
            .iter()
            .find(|m| m["destination"] == GUEST_AGENT_PATH)
            .expect("agent mount");
        assert_eq!(agent["source"], "/usr/lib/cove/cove-guest-agent");
        let run = mounts
            .iter()
            .find(|m| m["destination"] == GUEST_RUN_DIR)
            .expect("run mount");
        assert_eq!(run["source"], "/data/sandboxes/sbx1/run");
    }
}
