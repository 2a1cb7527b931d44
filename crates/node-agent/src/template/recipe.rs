//! Recipes: what each template's root filesystem contains, as data. The builders ([`super::base`],
//! [`super::tiny`]) read these constants, and [`Recipe::recipe_hash`] hashes the same constants,
//! so a change to a recipe changes its hash (and so its cache entry).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// Bumped whenever a builder changes what it produces in a way the constants below do not show.
pub(crate) const BUILDER_VERSION: u32 = 1;

/// Debian suite of the `base` recipe.
pub(crate) const BASE_SUITE: &str = "bookworm";

/// Default Debian mirror.
pub(crate) const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";

/// Packages of the `base` recipe, on top of mmdebstrap's `minbase` variant (Essential + apt).
pub(crate) const BASE_PACKAGES: &[&str] = &[
    "attr",
    "bash",
    "ca-certificates",
    "coreutils",
    "curl",
    "git",
    "iproute2",
    "less",
    "ncurses-bin",
    "netbase",
    "passwd",
    "procps",
    "python-is-python3",
    "python3",
    "python3-pip",
    "python3-venv",
    "sudo",
    "unzip",
    "xz-utils",
];

/// Packages the `full` recipe adds to [`BASE_PACKAGES`] (close to E2B's default image).
pub(crate) const FULL_EXTRA_PACKAGES: &[&str] =
    &["build-essential", "nodejs", "npm", "ripgrep", "vim-tiny"];

/// The virtualenv of `user` in the `full` recipe, first on `PATH`, so `pip install` works
/// without root and without `--break-system-packages`.
pub(crate) const FULL_VENV: &str = "/home/user/.venv";

/// `PATH` of the `base` recipe's sandboxes: `user`'s `~/.local/bin` (where `pip install` puts
/// console scripts) first, as Debian's own `~/.profile` does, then Debian's default.
pub(crate) const BASE_PATH: &str =
    "/home/user/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `PATH` of the `full` recipe's sandboxes (the virtualenv first).
pub(crate) const FULL_PATH: &str =
    "/home/user/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// mmdebstrap `--customize-hook`s the `full` recipe runs after [`BASE_CUSTOMIZE_HOOKS`]: the
/// virtualenv, owned by `user`, and a profile script putting it first on login shells' `PATH`
/// (Debian's `/etc/profile` resets `PATH`).
pub(crate) const FULL_CUSTOMIZE_HOOKS: &[&str] = &[
    r#"chroot "$1" python3 -m venv /home/user/.venv"#,
    r#"chroot "$1" chown -R 1000:1000 /home/user/.venv"#,
    r#"printf '%s\n' 'export VIRTUAL_ENV=/home/user/.venv' 'export PATH="$VIRTUAL_ENV/bin:$PATH"' > "$1"/etc/profile.d/50-cove-venv.sh"#,
    r#"rm -rf "$1"/var/log/apt/* "$1"/var/log/dpkg.log "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old"#,
];

/// dpkg options of the `base` recipe (kept in the image, so later `apt install`s honour them):
/// no manuals, info pages, translations or docs except copyright files, like Debian's slim images.
pub(crate) const BASE_DPKG_OPTS: &[&str] = &[
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
];

/// mmdebstrap `--customize-hook`s of the `base` recipe (`$1` is the root filesystem). They run
/// while mmdebstrap still has the chroot set up. Debian's `EXTERNALLY-MANAGED` marker (PEP 668)
/// goes, so `pip install x` works: as `user` pip falls back to a user installation
/// (`~/.local`, its `bin` on [`BASE_PATH`]), as root into `/usr/local`, as in Python's own images.
pub(crate) const BASE_CUSTOMIZE_HOOKS: &[&str] = &[
    r#"chroot "$1" groupadd --gid 1000 user"#,
    r#"chroot "$1" useradd --create-home --uid 1000 --gid 1000 --shell /bin/bash user"#,
    r#"rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED"#,
    r#"rm -rf "$1"/var/log/apt/* "$1"/var/log/dpkg.log "$1"/var/log/alternatives.log "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old"#,
];

/// Login name, ids and home of the unprivileged user of every recipe.
pub(crate) const USER_NAME: &str = "user";
pub(crate) const USER_ID: u32 = 1000;
pub(crate) const USER_HOME: &str = "/home/user";

/// `/etc/sudoers.d/90-cove-user` of the `base` recipe (mode 0440).
pub(crate) const SUDOERS_PATH: &str = "etc/sudoers.d/90-cove-user";
pub(crate) const SUDOERS: &str = "user ALL=(ALL:ALL) NOPASSWD: ALL\n";

/// Files every recipe writes last (paths relative to the root). The hostname is a placeholder
/// (the runtime writes each sandbox's own), `hosts` is localhost only, and `resolv.conf` is empty
/// rather than the build host's.
pub(crate) const COMMON_FILES: &[(&str, &str)] = &[
    ("etc/hostname", "cove\n"),
    (
        "etc/hosts",
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    ),
    ("etc/resolv.conf", ""),
];

/// Directories of the `tiny` recipe with their modes.
pub(crate) const TINY_DIRS: &[(&str, u32)] = &[
    ("bin", 0o755),
    ("sbin", 0o755),
    ("usr/bin", 0o755),
    ("usr/sbin", 0o755),
    ("usr/local/bin", 0o755),
    ("etc", 0o755),
    ("dev", 0o755),
    ("proc", 0o555),
    ("sys", 0o555),
    ("run", 0o755),
    ("tmp", 0o1777),
    ("var/tmp", 0o1777),
    ("root", 0o700),
    ("home", 0o755),
    ("home/user", 0o755),
];

/// Files of the `tiny` recipe (besides [`COMMON_FILES`]).
pub(crate) const TINY_FILES: &[(&str, &str)] = &[
    (
        "etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\n\
         user:x:1000:1000:user:/home/user:/bin/sh\n\
         nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    ),
    ("etc/group", "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n"),
    (
        "etc/profile",
        "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
    ),
];

/// Where the `tiny` recipe takes busybox from (the `busybox-static` package).
pub(crate) const HOST_BUSYBOX: &str = "/bin/busybox";

/// A template's build recipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recipe {
    /// Debian bookworm (minbase) with bash, python3, git, curl, sudo and a `user` account.
    Base,
    /// The host's static busybox with an applet symlink each; builds in well under a second.
    Tiny,
    /// `base` plus build-essential, nodejs and npm, ripgrep, vim-tiny and a virtualenv of
    /// `user` first on `PATH` (a separate recipe, so `base`'s cache key stays as it is).
    Full,
}

/// What a sandbox of a template gets unless its create request says otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateDefaults {
    /// User that commands run as.
    pub user: String,
    /// Working directory of commands.
    pub workdir: String,
    /// Environment of commands.
    pub env: BTreeMap<String, String>,
}

impl Recipe {
    /// The recipe of a built-in template name (`base`, `tiny`).
    pub fn for_template(name: &str) -> Option<Recipe> {
        match name {
            "base" => Some(Recipe::Base),
            "tiny" => Some(Recipe::Tiny),
            "full" => Some(Recipe::Full),
            _ => None,
        }
    }

    /// The template name.
    pub fn name(&self) -> &'static str {
        match self {
            Recipe::Base => "base",
            Recipe::Tiny => "tiny",
            Recipe::Full => "full",
        }
    }

    /// Defaults of sandboxes of this template.
    pub fn defaults(&self) -> TemplateDefaults {
        let mut env = BTreeMap::new();
        if matches!(self, Recipe::Base | Recipe::Full) {
            env.insert("LANG".to_string(), "C.UTF-8".to_string());
        }
        if *self == Recipe::Base {
            env.insert("PATH".to_string(), BASE_PATH.to_string());
        }
        if *self == Recipe::Full {
            env.insert("PATH".to_string(), FULL_PATH.to_string());
            env.insert("VIRTUAL_ENV".to_string(), FULL_VENV.to_string());
        }
        TemplateDefaults {
            user: USER_NAME.to_string(),
            workdir: USER_HOME.to_string(),
            env,
        }
    }

    /// Hex SHA-256 of everything that determines the output: builder version, suite, packages,
    /// dpkg options, hooks, files and directories. (The mirror is not part of it: every mirror
    /// serves the same suite. Package updates within the suite do not change it either.)
    pub fn recipe_hash(&self) -> String {
        let digest = Sha256::digest(self.description().as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A canonical text of the recipe, the input of [`Recipe::recipe_hash`].
    fn description(&self) -> String {
        let mut d = format!(
            "cove template builder {BUILDER_VERSION}\nrecipe {}\n",
            self.name()
        );
        let mut line = |k: &str, v: &str| {
            d.push_str(k);
            d.push(' ');
            d.push_str(&v.replace('\n', "\\n"));
            d.push('\n');
        };
        match self {
            Recipe::Base => {
                line("suite", BASE_SUITE);
                line("variant", "minbase");
                for p in BASE_PACKAGES {
                    line("package", p);
                }
                for o in BASE_DPKG_OPTS {
                    line("dpkgopt", o);
                }
                for h in BASE_CUSTOMIZE_HOOKS {
                    line("hook", h);
                }
                line("file", &format!("{SUDOERS_PATH} 0440 {SUDOERS}"));
            }
            Recipe::Full => {
                line("suite", BASE_SUITE);
                line("variant", "minbase");
                for p in BASE_PACKAGES.iter().chain(FULL_EXTRA_PACKAGES) {
                    line("package", p);
                }
                for o in BASE_DPKG_OPTS {
                    line("dpkgopt", o);
                }
                for h in BASE_CUSTOMIZE_HOOKS.iter().chain(FULL_CUSTOMIZE_HOOKS) {
                    line("hook", h);
                }
                line("file", &format!("{SUDOERS_PATH} 0440 {SUDOERS}"));
            }
            Recipe::Tiny => {
                line("busybox", HOST_BUSYBOX);
                for (dir, mode) in TINY_DIRS {
                    line("dir", &format!("{dir} {mode:o}"));
                }
                for (path, content) in TINY_FILES {
                    line("file", &format!("{path} {content}"));
                }
                line("owner", &format!("{USER_HOME} {USER_ID}:{USER_ID}"));
            }
        }
        for (path, content) in COMMON_FILES {
            line("file", &format!("{path} {content}"));
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for r in [Recipe::Base, Recipe::Tiny, Recipe::Full] {
            assert_eq!(Recipe::for_template(r.name()), Some(r));
        }
        assert_eq!(Recipe::for_template("nope"), None);
    }

    #[test]
    fn hashes_are_stable_and_distinct() {
        let base = Recipe::Base.recipe_hash();
        assert_eq!(base.len(), 64);
        assert_eq!(base, Recipe::Base.recipe_hash());
        assert_ne!(base, Recipe::Tiny.recipe_hash());
        assert_ne!(base, Recipe::Full.recipe_hash());
    }

    #[test]
    fn defaults() {
        let d = Recipe::Base.defaults();
        assert_eq!(d.user, "user");
        assert_eq!(d.workdir, "/home/user");
        assert_eq!(d.env.get("LANG").map(String::as_str), Some("C.UTF-8"));
        assert!(d.env["PATH"].starts_with("/home/user/.local/bin:"));
        assert_eq!(Recipe::Tiny.defaults().workdir, "/home/user");
    }
}
