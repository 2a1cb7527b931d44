//! `cove files ls|stat|mkdir|mv|rm|watch SANDBOX PATH...`: files in a sandbox, one file per verb.
//! (`cove cp` copies files in and out.)
//!
//! Paths are taken as given, bytes included (a name that is not UTF-8 is sent base64-encoded);
//! relative paths are under the sandbox user's home.

pub mod ls;
pub mod mkdir;
pub mod mv;
pub mod rm;
pub mod stat;
pub mod watch;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use clap::{Args, Subcommand};
use cove_api_types::{FileInfo, FileType};
use cove_client::{Client, SandboxPath};

/// `cove files ...`.
#[derive(Debug, Subcommand)]
pub enum FilesVerb {
    /// List a directory (`-d N` descends N-1 levels; symlinks are shown, never followed).
    Ls(ls::LsArgs),
    /// Show a path's metadata (a symlink itself, not its target).
    Stat(stat::StatArgs),
    /// Create a directory and its missing parents.
    Mkdir(mkdir::MkdirArgs),
    /// Rename or move a path.
    Mv(mv::MvArgs),
    /// Remove files, symlinks (never their targets) or directory trees.
    Rm(rm::RmArgs),
    /// Print changes below a directory as they happen, until interrupted.
    Watch(watch::WatchArgs),
}

/// `cove files [--wake] VERB ...`.
#[derive(Debug, Args)]
pub struct FilesArgs {
    /// Resume a paused or wake a suspended sandbox first.
    #[arg(long, global = true)]
    pub wake: bool,
    /// What to do.
    #[command(subcommand)]
    pub verb: FilesVerb,
}

impl FilesVerb {
    /// The sandbox the verb works in.
    pub fn sandbox(&self) -> &str {
        match self {
            FilesVerb::Ls(a) => &a.sandbox,
            FilesVerb::Stat(a) => &a.sandbox,
            FilesVerb::Mkdir(a) => &a.sandbox,
            FilesVerb::Mv(a) => &a.sandbox,
            FilesVerb::Rm(a) => &a.sandbox,
            FilesVerb::Watch(a) => &a.sandbox,
        }
    }
}

/// Runs a `files` verb (after waking its sandbox with `--wake`).
pub async fn run(client: &Client, args: FilesArgs) -> anyhow::Result<()> {
    if args.wake {
        crate::hints::ensure_running(client, args.verb.sandbox()).await?;
    }
    match args.verb {
        FilesVerb::Ls(args) => ls::run(client, args).await,
        FilesVerb::Stat(args) => stat::run(client, args).await,
        FilesVerb::Mkdir(args) => mkdir::run(client, args).await,
        FilesVerb::Mv(args) => mv::run(client, args).await,
        FilesVerb::Rm(args) => rm::run(client, args).await,
        FilesVerb::Watch(args) => watch::run(client, args).await,
    }
}

/// A command-line path as the client's path (its exact bytes).
pub(crate) fn sandbox_path(p: &OsString) -> SandboxPath<'_> {
    SandboxPath::Bytes(p.as_bytes())
}

/// One-letter type as `ls -l` shows it.
pub(crate) fn type_char(t: FileType) -> char {
    match t {
        FileType::File => '-',
        FileType::Dir => 'd',
        FileType::Symlink => 'l',
        FileType::Other => '?',
    }
}

/// `rwxr-xr-x` of permission bits (setuid/setgid/sticky shown as `s`/`t`).
pub(crate) fn mode_string(mode: u32) -> String {
    let mut out = String::with_capacity(9);
    for (shift, special, ch) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (mode >> shift) & 0o7;
        out.push(if bits & 4 != 0 { 'r' } else { '-' });
        out.push(if bits & 2 != 0 { 'w' } else { '-' });
        out.push(match (bits & 1 != 0, mode & special != 0) {
            (true, true) => ch,
            (false, true) => ch.to_ascii_uppercase(),
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    out
}

/// A path for display, with a symlink's target: `name -> target`.
pub(crate) fn shown_name(info: &FileInfo, full_path: bool) -> String {
    let name = if full_path { &info.path } else { &info.name };
    match &info.symlink_target {
        Some(t) => format!("{name} -> {t}"),
        None => name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_render_like_ls() {
        assert_eq!(mode_string(0o755), "rwxr-xr-x");
        assert_eq!(mode_string(0o644), "rw-r--r--");
        assert_eq!(mode_string(0o4755), "rwsr-xr-x");
        assert_eq!(mode_string(0o1777), "rwxrwxrwt");
        assert_eq!(mode_string(0o2640), "rw-r-S---");
    }
}
