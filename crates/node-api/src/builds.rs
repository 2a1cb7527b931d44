//! Builds of a release from a template file: the parsed steps, the parent release and the
//! defaults a release gives its sandboxes.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

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
/// (relative ones resolve against the working directory of the step).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BuildStep {
    /// `RUN`: a shell command (`/bin/sh -c`) or an argv, as the step's user in its working
    /// directory with its environment (plus the build arguments).
    Run {
        /// Shell command or argv.
        program: StepProgram,
    },
    /// `COPY`/`ADD`: files of the build context (paths relative to its root, already checked
    /// to stay inside it) to `dest` in the tree; a source directory's contents are copied.
    Copy {
        /// Source paths in the context.
        sources: Vec<String>,
        /// Destination in the tree.
        dest: String,
    },
    /// `ENV`: variables of later steps and of sandboxes.
    Env {
        /// Variables, in file order.
        vars: Vec<(String, String)>,
    },
    /// `ARG`: a build argument, in the environment of later `RUN` steps only.
    Arg {
        /// Name.
        name: String,
        /// Value (the default of the file).
        value: String,
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

/// The release a file build starts from (its `FROM`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BuildParent {
    /// A ready release of a template on this node.
    Release {
        /// Template.
        template: String,
        /// Release number.
        number: u32,
        /// Its content digest (the root of the step cache keys).
        digest: String,
        /// Its defaults.
        defaults: ReleaseDefaults,
    },
    /// `oci-archive:NAME`: a `docker save` or OCI image layout tarball in the node's OCI
    /// import directory (`--oci-import-dir`; a node without one answers `OciImportDisabled`).
    OciArchive {
        /// A plain relative name inside that directory (never a host path).
        path: String,
    },
}

/// A build of a release from a template file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileBuild {
    /// Where it starts.
    pub parent: BuildParent,
    /// The steps after `FROM`, in order.
    pub steps: Vec<FileStep>,
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
