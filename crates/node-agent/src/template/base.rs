//! The `base` (and `full`) recipe: Debian bookworm via `mmdebstrap --variant=minbase`, with the `user`
//! account created by customize hooks and passwordless sudo written afterwards.

use std::path::Path;

use tokio::process::Command;

use super::command::{self, Events, Tool};
use super::files::write_file;
use super::recipe::{
    BASE_CUSTOMIZE_HOOKS, BASE_DPKG_OPTS, BASE_PACKAGES, BASE_SUITE, DEFAULT_MIRROR,
    FULL_CUSTOMIZE_HOOKS, FULL_EXTRA_PACKAGES, SUDOERS, SUDOERS_PATH,
};
use super::{BuildError, BuildOptions};

const MMDEBSTRAP: Tool = Tool {
    name: "mmdebstrap",
    hint: "apt-get install mmdebstrap",
};

/// mmdebstrap's progress lines (its `I:` messages, in order) and the percentage each stands for.
const PHASES: &[(&str, u8, &str)] = &[
    ("running apt-get update", 5, "updating package lists"),
    ("downloading packages", 15, "downloading packages"),
    ("extracting archives", 40, "extracting packages"),
    (
        "installing essential packages",
        50,
        "installing essential packages",
    ),
    ("installing remaining packages", 65, "installing packages"),
    ("running --customize-hook", 85, "customizing"),
    ("cleaning package lists", 90, "cleaning up"),
    ("success in", 92, "bootstrapped"),
];

/// Builds the base root filesystem into `root` (which must not exist); mmdebstrap's temporary
/// files go to `scratch`. With `full`, the `full` recipe's packages and hooks are added.
pub(crate) async fn build(
    root: &Path,
    scratch: &Path,
    opts: &BuildOptions,
    events: &mut Events,
    full: bool,
) -> Result<(), BuildError> {
    let mirror = opts.mirror.as_deref().unwrap_or(DEFAULT_MIRROR);
    if !["http://", "https://", "file://"]
        .iter()
        .any(|scheme| mirror.starts_with(scheme))
    {
        return Err(BuildError::Failed {
            step: "options".to_string(),
            detail: format!("mirror {mirror:?} is not an http, https or file URL"),
        });
    }
    let mut cmd = Command::new(MMDEBSTRAP.name);
    let mut packages = BASE_PACKAGES.to_vec();
    let mut hooks = BASE_CUSTOMIZE_HOOKS.to_vec();
    if full {
        packages.extend_from_slice(FULL_EXTRA_PACKAGES);
        hooks.extend_from_slice(FULL_CUSTOMIZE_HOOKS);
    }
    cmd.arg("--variant=minbase")
        .arg(format!("--include={}", packages.join(",")));
    for opt in BASE_DPKG_OPTS {
        cmd.arg(format!("--dpkgopt={opt}"));
    }
    for hook in hooks {
        cmd.arg(format!("--customize-hook={hook}"));
    }
    cmd.arg(BASE_SUITE)
        .arg(root)
        .arg(mirror)
        .env("LC_ALL", "C.UTF-8")
        .env("TMPDIR", scratch);
    events.progress(1, "starting mmdebstrap").await;
    command::run("mmdebstrap", MMDEBSTRAP, cmd, events, phase_of).await?;

    events.progress(94, "configuring sudo").await;
    let root = root.to_path_buf();
    tokio::task::spawn_blocking(move || write_file(&root, SUDOERS_PATH, SUDOERS.as_bytes(), 0o440))
        .await
        .map_err(|e| BuildError::Failed {
            step: "configure".to_string(),
            detail: e.to_string(),
        })?
}

fn phase_of(line: &str) -> Option<(u8, &'static str)> {
    let message = line.strip_prefix("I: ")?;
    PHASES
        .iter()
        .find(|(needle, _, _)| message.contains(needle))
        .map(|(_, percent, phase)| (*percent, *phase))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_mmdebstrap_lines_to_progress() {
        assert_eq!(
            phase_of("I: downloading packages with apt..."),
            Some((15, "downloading packages"))
        );
        assert_eq!(
            phase_of("I: running --customize-hook in shell: sh -c 'x'"),
            Some((85, "customizing"))
        );
        assert_eq!(phase_of("Get:1 http://deb.debian.org bookworm"), None);
    }
}
