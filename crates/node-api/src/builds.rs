//! Builds of a release from a template file: the parsed steps, the parent release and the
//! defaults a release gives its sandboxes.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// `PATH` a file build gives a parent without one (as Docker's BuildKit does, and the guest
/// agent's default), so `ENV PATH=/x:$PATH` means the same on every parent.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What a release gives its sandboxes unless a create request or command says otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseDefaults {
    /// Default user of commands.
    pub user: String,
    /// Default working directory of commands (absolute).
    pub workdir: String,
    /// Environment of every command.
    pub env: BTreeMap<String, String>,
    /// A shell command started when a sandbox starts (`START`).
    #[serde(default)]
    pub start: Option<String>,
    /// A shell check that must exit 0 before a sandbox counts as running (`READY`).
    #[serde(default)]
    pub ready: Option<ReadyCheck>,
    /// `LABEL`s of the file (recorded only).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// TCP ports the file `EXPOSE`s (recorded only).
    #[serde(default)]
    pub ports: Vec<u16>,
}

/// A readiness check (`READY [--timeout=SECONDS] CMD`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyCheck {
    /// Shell command; ready when it exits 0.
    pub command: String,
    /// How long a sandbox may take to become ready, in seconds.
    pub timeout_s: u64,
}

/// One step of a template file, as the node runs it. Paths are as written in the file
/// (relative ones resolve against the working directory of the step). The words of `ENV`,
/// `ARG`, `WORKDIR`, `USER`, `LABEL`, `EXPOSE` and a `COPY` destination are as written: the
/// node expands them ([`BuildStep::expanded`]) against the build's environment, the parent's
/// included. `COPY` sources arrive expanded (the control plane checks them against the
/// context).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BuildStep {
    /// `RUN`: a shell command (`/bin/sh -c`) or an argv, as the step's user in its working
    /// directory with its environment (plus the build arguments).
    Run {
        /// Shell command or argv.
        program: StepProgram,
    },
    /// `COPY`/`ADD`: files of the build context (paths relative to its root, already checked
    /// to stay inside it), or of an earlier stage's tree (`--from`), to `dest` in the tree; a
    /// source directory's contents are copied.
    Copy {
        /// Source paths in the context (or in the stage's tree, relative to its root).
        sources: Vec<String>,
        /// Destination in the tree.
        dest: String,
        /// `--from`: the index of an earlier stage of [`FileBuild::stages`] to copy from
        /// instead of the context.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<u32>,
        /// `--chown=USER[:GROUP]` as written (names resolve against the tree's `/etc/passwd`
        /// and `/etc/group`); copied entries are root's without it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        chown: Option<String>,
        /// `--chmod=OCTAL`: the mode of every copied file and directory.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        chmod: Option<u32>,
    },
    /// `ENV`: variables of later steps and of sandboxes.
    Env {
        /// Variables, in file order (every value sees the environment before the line).
        vars: Vec<(String, String)>,
    },
    /// `ARG`: a build argument, in the environment of later `RUN` steps only.
    Arg {
        /// Name.
        name: String,
        /// Value: the build's `--build-arg` (quoted to stay literal), else the file's
        /// default.
        value: String,
    },
    /// `LABEL`: metadata of the release (recorded only).
    Label {
        /// Keys and values, in file order.
        labels: Vec<(String, String)>,
    },
    /// `EXPOSE`: ports the release's sandboxes serve (recorded only; `N`, `N/tcp`, `N/udp`).
    Expose {
        /// Ports as written.
        ports: Vec<String>,
    },
    /// `WORKDIR`: the working directory of later steps and of sandboxes (created if missing).
    Workdir {
        /// Absolute or relative to the previous one.
        path: String,
    },
    /// `USER`: the user of later steps and of sandboxes.
    User {
        /// Login name or numeric id.
        user: String,
    },
    /// `START`: started when a sandbox starts.
    Start {
        /// Shell command.
        command: String,
    },
    /// `READY`: must pass before a sandbox counts as running.
    Ready(ReadyCheck),
}

impl BuildStep {
    /// This step with its words expanded (see [`crate::words`]) against `env` (the build's
    /// environment before the step) and `args` (its build arguments).
    ///
    /// # Errors
    /// A word that does not expand, naming the word's role.
    pub fn expanded(
        &self,
        env: &BTreeMap<String, String>,
        args: &BTreeMap<String, String>,
    ) -> Result<BuildStep, String> {
        let vars = crate::words::Vars {
            env: Some(env),
            args: Some(args),
        };
        let x = |what: &str, w: &str| {
            crate::words::expand(w, &vars).map_err(|e| format!("{what}: {e}"))
        };
        let pairs = |what: &str, kv: &[(String, String)]| {
            kv.iter()
                .map(|(k, v)| Ok((x(what, k)?, x(what, v)?)))
                .collect::<Result<Vec<_>, String>>()
        };
        Ok(match self {
            BuildStep::Env { vars } => BuildStep::Env {
                vars: pairs("ENV", vars)?,
            },
            BuildStep::Arg { name, value } => BuildStep::Arg {
                name: name.clone(),
                value: x("ARG", value)?,
            },
            BuildStep::Label { labels } => BuildStep::Label {
                labels: pairs("LABEL", labels)?,
            },
            BuildStep::Expose { ports } => BuildStep::Expose {
                ports: ports
                    .iter()
                    .map(|p| x("EXPOSE", p))
                    .collect::<Result<_, _>>()?,
            },
            BuildStep::Workdir { path } => BuildStep::Workdir {
                path: x("WORKDIR", path)?,
            },
            BuildStep::User { user } => BuildStep::User {
                user: x("USER", user)?,
            },
            BuildStep::Copy {
                sources,
                dest,
                from,
                chown,
                chmod,
            } => BuildStep::Copy {
                sources: sources.clone(),
                dest: x("COPY destination", dest)?,
                from: *from,
                chown: chown.as_deref().map(|c| x("COPY --chown", c)).transpose()?,
                chmod: *chmod,
            },
            other => other.clone(),
        })
    }
}

/// The TCP port of an expanded `EXPOSE` word (`80`, `80/tcp`); `None` for a UDP one.
///
/// # Errors
/// A word that is not a port 1-65535 with an optional `/tcp` or `/udp`.
pub fn exposed_port(word: &str) -> Result<Option<u16>, String> {
    let (port, proto) = word.split_once('/').unwrap_or((word, "tcp"));
    let n: u16 = port
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("EXPOSE {word}: not a port number"))?;
    match proto.to_ascii_lowercase().as_str() {
        "tcp" => Ok(Some(n)),
        "udp" => Ok(None),
        _ => Err(format!("EXPOSE {word}: the protocol is tcp or udp")),
    }
}

/// What a `RUN` step executes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepProgram {
    /// `RUN cmd` (shell form).
    Shell(String),
    /// `RUN ["a", "b"]` (exec form).
    Argv(Vec<String>),
}

/// A step with the line of the file it came from (for the build log).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStep {
    /// 1-based line of the instruction.
    pub line: u32,
    /// The instruction as written (for the log), e.g. `RUN make`.
    pub text: String,
    /// What to do.
    pub step: BuildStep,
}

/// The release a file build (or one of its stages) starts from (its `FROM`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BuildParent {
    /// An earlier stage of the same build (`FROM build`, where an earlier line said
    /// `FROM … AS build`), by its index in [`FileBuild::stages`]: it starts from that stage's
    /// tree and defaults.
    Stage {
        /// Index in [`FileBuild::stages`] (lower than the stage that names it).
        index: u32,
    },
    /// A ready release of a template on this node.
    Release {
        /// Template.
        template: String,
        /// Release number.
        number: u32,
        /// Its content digest (the root of the step cache keys).
        digest: String,
        /// Its defaults.
        defaults: Box<ReleaseDefaults>,
    },
    /// `oci-archive:NAME`: a `docker save` or OCI image layout tarball in the node's OCI
    /// import directory (`--oci-import-dir`; a node without one answers `OciImportDisabled`).
    OciArchive {
        /// A plain relative name inside that directory (never a host path).
        path: String,
    },
}

/// A stage of a multi-stage file build before the last `FROM`: built first, in order, and
/// read by `COPY --from` (or a later `FROM`); its tree is not part of the release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildStage {
    /// Its name (`AS NAME`), or its index as text (for the build log).
    pub name: String,
    /// Where it starts.
    pub parent: BuildParent,
    /// Its steps after `FROM`, in order.
    pub steps: Vec<FileStep>,
}

/// A build of a release from a template file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileBuild {
    /// Where it starts (its last `FROM`).
    pub parent: BuildParent,
    /// The steps after the last `FROM`, in order.
    pub steps: Vec<FileStep>,
    /// The stages before the last `FROM` (multi-stage builds), in file order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<BuildStage>,
    /// The build context: a tar archive (may be empty).
    pub context: Bytes,
    /// Ignore cached step results (they are still refreshed).
    pub no_cache: bool,
    /// The egress policy of the `RUN` sandboxes (enforced by the node's gateway; with the
    /// default policy on a node without sandbox networks, steps have loopback only). Not part
    /// of a step's cache key.
    #[serde(default)]
    pub network: cove_domain::EgressPolicy,
}

/// Result of a file build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuiltFileRelease {
    /// Size of the root filesystem in bytes.
    pub size_bytes: u64,
    /// Content digest (`sha256:` + 64 hex digits).
    pub digest: String,
    /// Defaults of the release's sandboxes.
    pub defaults: ReleaseDefaults,
    /// Steps that changed files, and how many of them came from the step cache.
    pub steps_cached: u32,
    /// Steps that changed files and ran.
    pub steps_run: u32,
}
