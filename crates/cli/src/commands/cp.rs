//! `cove cp`: copies one file into or out of a sandbox, streamed; with `-r`, a directory
//! tree (the `tree` submodule).

mod tree;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use clap::Args;
use cove_client::{Body, Client, DownloadOptions, UploadOptions};
use futures::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt as _};
use tokio_util::io::ReaderStream;

/// Options of `cove cp`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  cove cp ./data.csv sb-123:/home/user/\n  \
    cove cp sb-123:/home/user/out.json .\n  tar c dir | cove cp - sb-123:/tmp/dir.tar\n  \
    cove cp -r ./project sb-123:/home/user/\n  cove cp -r sb-123:/home/user/results ./\n\n\
    A local path that contains `:` is written with a `/` before it: ./a:b")]
pub struct CpArgs {
    /// Source: `SANDBOX:/path`, a local file, or `-` for stdin.
    pub src: String,
    /// Destination: `SANDBOX:/path` (ending in `/` keeps the file name), a local path (a
    /// directory keeps the file name), or `-` for stdout.
    pub dst: String,
    /// User who writes (upload) or reads (download) the file in the sandbox.
    #[arg(short, long)]
    pub user: Option<String>,
    /// Permission bits of an uploaded file, in octal (default: the local file's).
    #[arg(long, value_name = "OCTAL", value_parser = parse_mode, conflicts_with = "recursive")]
    pub mode: Option<u32>,
    /// Copy a directory and everything below it (modes kept; up: many files per request).
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Resume a paused or wake a suspended sandbox first.
    #[arg(long)]
    pub wake: bool,
}

impl CpArgs {
    /// The sandbox on either side, if one is named.
    pub fn sandbox_id(&self) -> Option<String> {
        [&self.src, &self.dst]
            .into_iter()
            .find_map(|s| match parse_location(s) {
                Ok(Location::Sandbox { id, .. }) => Some(id),
                _ => None,
            })
    }
}

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Location {
    /// `-`: stdin as a source, stdout as a destination.
    Stdio,
    /// A local path.
    Local(PathBuf),
    /// An absolute path in a sandbox.
    Sandbox { id: String, path: String },
}

/// `SANDBOX:/path` when the part before the first `:` holds no `/` and is not empty; `-`;
/// otherwise a local path.
fn parse_location(s: &str) -> anyhow::Result<Location> {
    if s == "-" {
        return Ok(Location::Stdio);
    }
    match s.split_once(':') {
        Some((id, path)) if !id.is_empty() && !id.contains('/') => {
            if !path.starts_with('/') {
                bail!("the sandbox path in `{s}` must be absolute (SANDBOX:/path)");
            }
            Ok(Location::Sandbox {
                id: id.to_owned(),
                path: path.to_owned(),
            })
        }
        _ => Ok(Location::Local(PathBuf::from(s))),
    }
}

/// Parses octal permission bits (`644`, `0755`).
pub(crate) fn parse_mode(s: &str) -> Result<u32, String> {
    match u32::from_str_radix(s.trim_start_matches("0o"), 8) {
        Ok(mode) if mode <= 0o7777 => Ok(mode),
        _ => Err(format!(
            "expected octal permission bits like 644, got `{s}`"
        )),
    }
}

/// Runs `cove cp`.
pub async fn run(client: &Client, args: CpArgs) -> anyhow::Result<()> {
    if let (true, Some(id)) = (args.wake, args.sandbox_id()) {
        crate::hints::ensure_running(client, &id).await?;
    }
    let user = args.user.as_deref();
    match (parse_location(&args.src)?, parse_location(&args.dst)?) {
        (Location::Sandbox { .. }, Location::Sandbox { .. }) => {
            bail!("cannot copy between sandboxes; copy through a local file")
        }
        (Location::Sandbox { id, path }, Location::Local(local)) if args.recursive => {
            tree::download(client, &id, &path, &local, user).await
        }
        (Location::Local(local), Location::Sandbox { id, path }) if args.recursive => {
            tree::upload(client, &id, &local, &path, user).await
        }
        (Location::Stdio, _) | (_, Location::Stdio) if args.recursive => {
            bail!("-r copies directories, not stdin or stdout (use tar with `-`)")
        }
        (Location::Sandbox { id, path }, local) => download(client, &args, &id, &path, local).await,
        (local, Location::Sandbox { id, path }) => upload(client, &args, local, &id, &path).await,
        _ => bail!("one of SRC and DST must be SANDBOX:/path"),
    }
}

async fn upload(
    client: &Client,
    args: &CpArgs,
    src: Location,
    sandbox: &str,
    path: &str,
) -> anyhow::Result<()> {
    let mut options = UploadOptions {
        user: args.user.clone(),
        mode: args.mode,
    };
    let (body, name) = match src {
        Location::Local(local) => {
            let file = tokio::fs::File::open(&local)
                .await
                .with_context(|| format!("opening {}", local.display()))?;
            let meta = file
                .metadata()
                .await
                .with_context(|| format!("{}", local.display()))?;
            if meta.is_dir() {
                bail!(
                    "{} is a directory; pass -r to copy a directory",
                    local.display()
                );
            }
            options.mode = options.mode.or(Some(meta.permissions().mode() & 0o7777));
            (Body::from(file), file_name(&local))
        }
        _ => (
            Body::wrap_stream(ReaderStream::new(tokio::io::stdin())),
            None,
        ),
    };
    let target = if path.ends_with('/') {
        let Some(name) = name else {
            bail!("give the file name in the sandbox path when copying from stdin");
        };
        format!("{path}{name}")
    } else {
        path.to_owned()
    };
    client.upload(sandbox, &target, body, &options).await?;
    Ok(())
}

async fn download(
    client: &Client,
    args: &CpArgs,
    sandbox: &str,
    path: &str,
    dst: Location,
) -> anyhow::Result<()> {
    let options = DownloadOptions {
        user: args.user.clone(),
        ..Default::default()
    };
    let stream = client.download(sandbox, path, &options).await?;
    let Location::Local(local) = dst else {
        let mut stdout = tokio::io::stdout();
        let copied = copy(stream, &mut stdout).await;
        // `cove cp SB:/big - | head`: the reader left, as in any pipeline.
        if let Some(err) = copied
            .as_ref()
            .err()
            .and_then(|e| e.downcast_ref::<std::io::Error>())
            .filter(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
        {
            crate::output::exit_on_write_error(err);
        }
        return copied.context("writing to stdout");
    };
    let is_dir = args.dst.ends_with('/')
        || tokio::fs::metadata(&local)
            .await
            .map(|m| m.is_dir())
            .unwrap_or(false);
    let target = if is_dir {
        let Some(name) = file_name(Path::new(path)) else {
            bail!("`{path}` has no file name; give the local file name");
        };
        local.join(name)
    } else {
        local
    };
    write_atomically(stream, &target).await
}

/// Writes the stream to a temporary file beside `target`, then renames it over `target`: a
/// failed copy leaves no partial file.
pub(crate) async fn write_atomically(
    stream: impl futures::Stream<Item = cove_client::Result<bytes::Bytes>>,
    target: &Path,
) -> anyhow::Result<()> {
    let name = file_name(target).with_context(|| format!("{} is not a file", target.display()))?;
    let temp = target.with_file_name(format!(".{name}.cove-{}", std::process::id()));
    let written = async {
        let mut file = tokio::fs::File::create(&temp)
            .await
            .with_context(|| format!("creating {}", temp.display()))?;
        copy(stream, &mut file)
            .await
            .with_context(|| format!("writing {}", temp.display()))?;
        file.sync_all()
            .await
            .with_context(|| format!("writing {}", temp.display()))?;
        tokio::fs::rename(&temp, target)
            .await
            .with_context(|| format!("renaming to {}", target.display()))
    }
    .await;
    if written.is_err() {
        let _ = tokio::fs::remove_file(&temp).await;
    }
    written
}

/// Copies every chunk of `stream` to `out`, then flushes it.
pub(crate) async fn copy(
    stream: impl futures::Stream<Item = cove_client::Result<bytes::Bytes>>,
    out: &mut (impl AsyncWrite + Unpin),
) -> anyhow::Result<()> {
    let mut stream = std::pin::pin!(stream);
    while let Some(chunk) = stream.next().await {
        out.write_all(&chunk?).await?;
    }
    out.flush().await?;
    Ok(())
}

/// The last component of a path, as text.
fn file_name(path: &Path) -> Option<String> {
    path.file_name().map(|n| n.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Verb};

    #[test]
    fn locations_parse() {
        let sandbox = |id: &str, path: &str| Location::Sandbox {
            id: id.into(),
            path: path.into(),
        };
        assert_eq!(
            parse_location("sb-1:/tmp/x").expect("ok"),
            sandbox("sb-1", "/tmp/x")
        );
        assert_eq!(
            parse_location("sb-1:/a:b").expect("ok"),
            sandbox("sb-1", "/a:b")
        );
        assert_eq!(parse_location("-").expect("ok"), Location::Stdio);
        assert_eq!(
            parse_location("./a:b").expect("ok"),
            Location::Local("./a:b".into())
        );
        assert_eq!(
            parse_location("/x/y").expect("ok"),
            Location::Local("/x/y".into())
        );
        assert_eq!(
            parse_location(":x").expect("ok"),
            Location::Local(":x".into())
        );
        assert!(parse_location("sb-1:relative").is_err());
    }

    #[test]
    fn modes_are_octal() {
        assert_eq!(parse_mode("644"), Ok(0o644));
        assert_eq!(parse_mode("0755"), Ok(0o755));
        assert!(parse_mode("999").is_err());
        assert!(parse_mode("77777").is_err());
    }

    #[test]
    fn cp_parses() {
        let cli = Cli::try_parse_from(["cove", "cp", "-", "sb-1:/tmp/f", "--mode", "600"])
            .expect("parses");
        let Verb::Cp(args) = cli.verb else {
            panic!("expected cp")
        };
        assert_eq!(
            (args.src.as_str(), args.dst.as_str(), args.mode),
            ("-", "sb-1:/tmp/f", Some(0o600))
        );
        assert!(Cli::try_parse_from(["cove", "cp", "only-one"]).is_err());
    }

    #[tokio::test]
    async fn downloads_replace_the_target_atomically() {
        let dir = std::env::temp_dir().join(format!("cove-cp-test-{}", std::process::id()));
        tokio::fs::create_dir_all(&dir).await.expect("mkdir");
        let target = dir.join("out.bin");
        let chunks = vec![
            Ok(bytes::Bytes::from_static(b"ab")),
            Ok(bytes::Bytes::from_static(b"cd")),
        ];
        write_atomically(futures::stream::iter(chunks), &target)
            .await
            .expect("written");
        assert_eq!(tokio::fs::read(&target).await.expect("read"), b"abcd");

        let failing = vec![
            Ok(bytes::Bytes::from_static(b"xx")),
            Err(cove_client::ClientError::InvalidUrl {
                url: "broken".into(),
            }),
        ];
        assert!(write_atomically(futures::stream::iter(failing), &target)
            .await
            .is_err());
        assert_eq!(
            tokio::fs::read(&target).await.expect("read"),
            b"abcd",
            "old file kept"
        );
        let mut entries = tokio::fs::read_dir(&dir).await.expect("ls");
        let mut names = Vec::new();
        while let Some(entry) = entries.next_entry().await.expect("entry") {
            names.push(entry.file_name());
        }
        assert_eq!(names, ["out.bin"], "no temporary file left");
        tokio::fs::remove_dir_all(&dir).await.expect("cleanup");
    }
}
