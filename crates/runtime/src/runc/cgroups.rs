//! Host paths of a process's cgroups: `/proc/<pid>/cgroup` joined to the hierarchies' mount
//! points from `/proc/self/mountinfo`.
//!
//! With cgroup v1 (this project's hosts run the hybrid layout) every controller has its own
//! hierarchy, and runc places the memory cgroup under the caller's memory cgroup while the others
//! sit elsewhere, so the paths must be read, not derived from `cgroupsPath`. Named hierarchies
//! (`name=systemd`) are skipped. On a pure cgroup v2 host the single unified path is returned as
//! controller `unified`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::RuntimeError;

/// `(controller, host path)` for every cgroup of `pid`.
pub(crate) fn paths_of_pid(pid: u32) -> Result<Vec<(String, PathBuf)>, RuntimeError> {
    let cgroup_file = format!("/proc/{pid}/cgroup");
    let cgroups = std::fs::read_to_string(&cgroup_file).map_err(|source| RuntimeError::Io {
        context: format!("read {cgroup_file}"),
        source,
    })?;
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|source| RuntimeError::Io {
            context: "read /proc/self/mountinfo".to_string(),
            source,
        })?;
    Ok(resolve(&cgroups, &hierarchy_mounts(&mountinfo)))
}

/// `(controller, host path, hierarchy mount point)` of every cgroup v1 controller of this
/// process (where runc makes a relative `cgroupsPath`). Empty on a pure cgroup v2 host.
pub(crate) fn own_paths() -> Result<Vec<(String, PathBuf, PathBuf)>, RuntimeError> {
    let cgroups =
        std::fs::read_to_string("/proc/self/cgroup").map_err(|source| RuntimeError::Io {
            context: "read /proc/self/cgroup".to_string(),
            source,
        })?;
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|source| RuntimeError::Io {
            context: "read /proc/self/mountinfo".to_string(),
            source,
        })?;
    let mounts = hierarchy_mounts(&mountinfo);
    Ok(resolve(&cgroups, &mounts)
        .into_iter()
        .filter_map(|(controller, path)| {
            let mount_point = mounts.get(&controller)?.clone();
            Some((controller, path, mount_point))
        })
        .collect())
}

/// Mount points of the cgroup hierarchies, keyed by controller (`""` for the v2 hierarchy).
fn hierarchy_mounts(mountinfo: &str) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for line in mountinfo.lines() {
        // `id parent maj:min root mountpoint opts [optional...] - fstype source superopts`
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mut left_fields = left.split(' ');
        let (Some(root), Some(mount_point)) = (left_fields.nth(3), left_fields.next()) else {
            continue;
        };
        if root != "/" {
            continue; // a bind mount of a sub-cgroup, not the hierarchy's root
        }
        let mut right_fields = right.split(' ');
        let (Some(fstype), _, Some(super_opts)) = (
            right_fields.next(),
            right_fields.next(),
            right_fields.next(),
        ) else {
            continue;
        };
        match fstype {
            "cgroup" => {
                for opt in super_opts.split(',') {
                    if is_controller(opt) {
                        out.entry(opt.to_string())
                            .or_insert_with(|| PathBuf::from(mount_point));
                    }
                }
            }
            "cgroup2" => {
                out.entry(String::new())
                    .or_insert_with(|| PathBuf::from(mount_point));
            }
            _ => {}
        }
    }
    out
}

/// Whether a cgroup v1 super option names a controller (not `rw`, `relatime`, `name=...`).
fn is_controller(opt: &str) -> bool {
    !matches!(
        opt,
        "rw" | "ro" | "relatime" | "noatime" | "nosuid" | "nodev" | "noexec" | "clone_children"
    ) && !opt.contains('=')
        && !opt.starts_with("xattr")
        && !opt.is_empty()
}

fn resolve(cgroups: &str, mounts: &BTreeMap<String, PathBuf>) -> Vec<(String, PathBuf)> {
    let mut v1 = Vec::new();
    let mut unified = None;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = Path::new(path.trim_start_matches('/'));
        if controllers.is_empty() {
            if let Some(mp) = mounts.get("") {
                unified = Some(("unified".to_string(), mp.join(rel)));
            }
            continue;
        }
        for controller in controllers.split(',') {
            if controller.contains('=') {
                continue; // named hierarchy
            }
            if let Some(mp) = mounts.get(controller) {
                v1.push((controller.to_string(), mp.join(rel)));
            }
        }
    }
    if v1.is_empty() {
        unified.into_iter().collect()
    } else {
        v1.sort();
        v1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
30 29 0:26 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
31 29 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
32 29 0:28 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
33 29 0:29 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
34 29 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 29 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn maps_v1_controllers() {
        let mounts = hierarchy_mounts(MOUNTINFO);
        assert_eq!(mounts["memory"], PathBuf::from("/sys/fs/cgroup/memory"));
        assert_eq!(
            mounts["cpuacct"],
            PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")
        );
        assert!(!mounts.contains_key("name=systemd"));
        let cg = "9:name=systemd:/cove/a\n8:pids:/cove/a\n4:memory:/process_api/x/cove/a\n1:cpu:/cove/a\n0::/\n";
        let got = resolve(cg, &mounts);
        assert_eq!(
            got,
            vec![
                (
                    "cpu".to_string(),
                    PathBuf::from("/sys/fs/cgroup/cpu/cove/a")
                ),
                (
                    "memory".to_string(),
                    PathBuf::from("/sys/fs/cgroup/memory/process_api/x/cove/a")
                ),
                (
                    "pids".to_string(),
                    PathBuf::from("/sys/fs/cgroup/pids/cove/a")
                ),
            ]
        );
    }

    #[test]
    fn maps_pure_v2() {
        let mounts = hierarchy_mounts("35 29 0:31 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        let got = resolve("0::/cove/a\n", &mounts);
        assert_eq!(
            got,
            vec![(
                "unified".to_string(),
                PathBuf::from("/sys/fs/cgroup/cove/a")
            )]
        );
    }
}
