//! `cove cp -r`: whole directory trees. Up: the local tree's files go in multipart requests
//! of many files each (large files streamed one by one), empty directories are created, modes
//! kept. Down: the sandbox directory is listed (64 levels deep) and each file downloaded
//! atomically with its mode; directories and symlinks are recreated.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use cove_api_types::FileType;
use cove_client::{Client, DownloadOptions, UploadFile, UploadOptions};

use super::write_atomically;

/// Files larger than this are streamed alone (8 MiB); smaller ones are batched.
const BATCH_FILE_MAX: u64 = 8 << 20;
/// Most content in one multipart request (32 MiB).
const BATCH_BYTES: u64 = 32 << 20;
/// Deepest tree copied (the server lists at most 64 levels).
const MAX_DEPTH: u32 = 64;

/// A file found in the local tree.
struct LocalFile {
    local: PathBuf,
    remote: String,
    size: u64,
    mode: u32,
}

/// Copies the local directory `src` to `dst` in `sandbox`: into `dst/<name of src>` when
/// `dst` ends in `/` or is an existing directory, else to `dst` itself. Prints nothing.
pub(crate) async fn upload(
    client: &Client,
    sandbox: &str,
    src: &Path,
    dst: &str,
    user: Option<&str>,
) -> anyhow::Result<()> {
    let into = dst.ends_with('/');
    let dst = dst.trim_end_matches('/');
    let dst = if dst.is_empty() { "/" } else { dst };
    let existing_dir = matches!(
        client.stat_file(sandbox, dst).await,
        Ok(info) if info.file_type == FileType::Dir
    );
    let root = match into || existing_dir {
        true => {
            let name = src
                .canonicalize()
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .context("the source directory has no name")?;
            format!("{}/{name}", dst.trim_end_matches('/'))
        }
        false => dst.to_owned(),
    };
    let (files, dirs) = walk(src, &root)?;
    for dir in std::iter::once(&root).chain(&dirs) {
        client.make_dir(sandbox, dir.as_str(), user).await?;
    }
    let mut batch: Vec<UploadFile> = Vec::new();
    let mut batch_bytes = 0u64;
    for file in files {
        if file.size > BATCH_FILE_MAX {
            let body = tokio::fs::File::open(&file.local)
                .await
                .with_context(|| format!("opening {}", file.local.display()))?;
            let options = UploadOptions {
                user: user.map(str::to_owned),
                mode: Some(file.mode),
            };
            client
                .upload(sandbox, file.remote.as_str(), body, &options)
                .await
                .with_context(|| format!("uploading {}", file.local.display()))?;
            continue;
        }
        if batch_bytes + file.size > BATCH_BYTES {
            send_batch(client, sandbox, &mut batch, user).await?;
            batch_bytes = 0;
        }
        let data = tokio::fs::read(&file.local)
            .await
            .with_context(|| format!("reading {}", file.local.display()))?;
        batch_bytes += data.len() as u64;
        batch.push(UploadFile {
            path: file.remote.into_bytes(),
            mode: Some(file.mode),
            data: Bytes::from(data),
        });
    }
    send_batch(client, sandbox, &mut batch, user).await
}

async fn send_batch(
    client: &Client,
    sandbox: &str,
    batch: &mut Vec<UploadFile>,
    user: Option<&str>,
) -> anyhow::Result<()> {
    if !batch.is_empty() {
        client.upload_files(sandbox, batch, user).await?;
        batch.clear();
    }
    Ok(())
}

/// The files (with their remote paths) and the directories below `src`, in a stable order.
/// Symlinks to files are copied as the file; symlinked directories are skipped (they could
/// loop), with a warning.
fn walk(src: &Path, root: &str) -> anyhow::Result<(Vec<LocalFile>, Vec<String>)> {
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    let mut todo = vec![(src.to_path_buf(), root.to_owned(), 0u32)];
    while let Some((dir, remote, depth)) = todo.pop() {
        if depth >= MAX_DEPTH {
            bail!("{} is more than {MAX_DEPTH} levels deep", dir.display());
        }
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("reading {}", dir.display()))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                eprintln!(
                    "cove: warning: skipping {} (name is not UTF-8)",
                    path.display()
                );
                continue;
            };
            let child = format!("{remote}/{name}");
            let link = entry.file_type()?.is_symlink();
            let meta =
                std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
            if meta.is_dir() {
                if link {
                    eprintln!(
                        "cove: warning: skipping {} (a symlinked directory)",
                        path.display()
                    );
                    continue;
                }
                dirs.push(child.clone());
                todo.push((path, child, depth + 1));
            } else if meta.is_file() {
                files.push(LocalFile {
                    local: path,
                    remote: child,
                    size: meta.len(),
                    mode: meta.permissions().mode() & 0o7777,
                });
            }
        }
    }
    files.sort_by(|a, b| a.remote.cmp(&b.remote));
    dirs.sort();
    Ok((files, dirs))
}

/// Copies the sandbox directory `src` to the local `dst`: into `dst/<name of src>` when `dst`
/// ends in `/` or is an existing directory, else to `dst` itself.
pub(crate) async fn download(
    client: &Client,
    sandbox: &str,
    src: &str,
    dst: &Path,
    user: Option<&str>,
) -> anyhow::Result<()> {
    let into = dst.as_os_str().as_encoded_bytes().ends_with(b"/");
    let src = src.trim_end_matches('/');
    let src = if src.is_empty() { "/" } else { src };
    let info = client.stat_file(sandbox, src).await?;
    if info.file_type != FileType::Dir {
        bail!("{src} is not a directory (copy a file without -r)");
    }
    let root = if into || dst.is_dir() {
        match Path::new(src).file_name() {
            Some(name) => dst.join(name),
            None => dst.to_path_buf(),
        }
    } else {
        dst.to_path_buf()
    };
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let mut entries = client.list_files(sandbox, src, MAX_DEPTH).await?.entries;
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let prefix = if src == "/" {
        String::from("/")
    } else {
        format!("{src}/")
    };
    let options = DownloadOptions {
        user: user.map(str::to_owned),
        ..Default::default()
    };
    for entry in entries {
        if entry.path_b64.is_some() {
            eprintln!("cove: warning: skipping {} (name is not UTF-8)", entry.path);
            continue;
        }
        let Some(rel) = entry.path.strip_prefix(&prefix) else {
            continue;
        };
        if rel.is_empty()
            || rel
                .split('/')
                .any(|c| c == ".." || c == "." || c.is_empty())
        {
            continue;
        }
        let local = root.join(rel);
        match entry.file_type {
            FileType::Dir => std::fs::create_dir_all(&local)
                .with_context(|| format!("creating {}", local.display()))?,
            FileType::File => {
                if let Some(parent) = local.parent() {
                    std::fs::create_dir_all(parent)
                        .with_context(|| format!("creating {}", parent.display()))?;
                }
                let stream = client
                    .download(sandbox, entry.path.as_str(), &options)
                    .await?;
                write_atomically(stream, &local).await?;
                std::fs::set_permissions(
                    &local,
                    std::fs::Permissions::from_mode(entry.mode & 0o7777),
                )
                .with_context(|| format!("setting the mode of {}", local.display()))?;
            }
            FileType::Symlink => {
                if let Some(target) = &entry.symlink_target {
                    let _ = std::fs::remove_file(&local);
                    std::os::unix::fs::symlink(target, &local)
                        .with_context(|| format!("creating the symlink {}", local.display()))?;
                }
            }
            FileType::Other => {
                eprintln!(
                    "cove: warning: skipping {} (not a file, directory or symlink)",
                    entry.path
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_trees_in_order_with_modes() {
        let dir = std::env::temp_dir().join(format!("cove-cp-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("b/c")).expect("mkdir");
        std::fs::create_dir_all(dir.join("empty")).expect("mkdir");
        std::fs::write(dir.join("a.txt"), "a").expect("write");
        std::fs::write(dir.join("b/c/run.sh"), "#!/bin/sh").expect("write");
        std::fs::set_permissions(
            dir.join("b/c/run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        let (files, dirs) = walk(&dir, "/dst").expect("walk");
        let names: Vec<_> = files.iter().map(|f| (f.remote.as_str(), f.mode)).collect();
        assert_eq!(names[0].0, "/dst/a.txt");
        assert_eq!(names[1], ("/dst/b/c/run.sh", 0o755));
        assert_eq!(dirs, ["/dst/b", "/dst/b/c", "/dst/empty"]);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
