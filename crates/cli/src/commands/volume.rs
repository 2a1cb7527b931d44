//! `cove volume create|ls|rm|get|put|files|stat|mkdir|chmod|rm-file`: persistent volumes
//! (node-local disks, or kept in the snapshot store with `--storage object`, that sandboxes mount with `cove create --volume NAME:/path[:ro]`) and their
//! files without a sandbox (the path verbs are in `volume_files.rs`).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use cove_api_types::{CreateVolumeRequest, Volume, VolumeStorage};
use cove_client::{Body, Client};
use tokio_util::io::ReaderStream;

use crate::table;

/// `cove volume ...`.
#[derive(Debug, Subcommand)]
pub enum VolumeVerb {
    /// Create an empty volume of a fixed size; prints its name.
    Create(CreateArgs),
    /// List volumes with their size, use and the sandboxes that mount them.
    Ls(LsArgs),
    /// Delete volumes and their data (refused while a sandbox mounts one).
    Rm(RmArgs),
    /// Copy a file of a volume to a local file, or to stdout with `-`.
    Get(GetArgs),
    /// Copy a local file, or stdin with `-`, into a volume (atomically).
    Put(PutArgs),
    /// List a directory of a volume (`-d N` descends N-1 levels).
    Files(FilesArgs),
    /// Show a path's metadata (a symlink itself), with its uid, gid and times.
    Stat(super::volume_files::StatArgs),
    /// Make a directory of a volume, with its missing parents.
    Mkdir(super::volume_files::MkdirArgs),
    /// Set the owner and permission bits of a path of a volume.
    Chmod(super::volume_files::ChmodArgs),
    /// Remove paths of a volume: files, symlinks (never their targets) or directory trees.
    RmFile(super::volume_files::RmFileArgs),
}

/// Options of `cove volume create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Name (a-z, 0-9, -, _), unique in the org.
    pub name: String,
    /// Size in MiB (16 to 1048576): writes past it fail with ENOSPC.
    #[arg(long, value_name = "MIB")]
    pub size_mib: u64,
    /// Where it is kept: `local` (the disk of one node; its sandboxes run there) or `object`
    /// (kept in the snapshot store, so it follows its sandboxes to any node).
    #[arg(long, value_parser = ["local", "object"], default_value = "local")]
    pub storage: String,
    /// Print the volume as JSON instead of its name.
    #[arg(long)]
    pub json: bool,
}

/// Options of `cove volume ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Options of `cove volume rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// Volume names.
    #[arg(required = true)]
    pub names: Vec<String>,
}

/// Options of `cove volume get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// Volume name.
    pub name: String,
    /// Path in the volume.
    pub path: String,
    /// Local file to write (`-` or absent: stdout).
    pub dst: Option<String>,
}

/// Options of `cove volume put`.
#[derive(Debug, Args)]
pub struct PutArgs {
    /// Volume name.
    pub name: String,
    /// Local file to read (`-`: stdin).
    pub src: String,
    /// Path in the volume.
    pub path: String,
}

/// Options of `cove volume files`.
#[derive(Debug, Args)]
pub struct FilesArgs {
    /// Volume name.
    pub name: String,
    /// Directory in the volume (default: its root).
    #[arg(default_value = "/")]
    pub path: String,
    /// Levels to list (1: the directory's own entries).
    #[arg(short, long, default_value_t = 1)]
    pub depth: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `volume` verb.
pub async fn run(client: &Client, verb: VolumeVerb) -> anyhow::Result<()> {
    match verb {
        VolumeVerb::Create(args) => {
            let storage = match args.storage.as_str() {
                "object" => VolumeStorage::Object,
                _ => VolumeStorage::Local,
            };
            let v = client
                .create_volume_with(&CreateVolumeRequest {
                    name: args.name,
                    size_mib: args.size_mib,
                    storage,
                })
                .await?;
            if args.json {
                crate::outln!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                crate::outln!("{}", v.name);
            }
        }
        VolumeVerb::Ls(args) => {
            let list = client.volumes().await?;
            if args.json {
                crate::outln!("{}", serde_json::to_string_pretty(&list.volumes)?);
            } else {
                print(&list.volumes);
            }
        }
        VolumeVerb::Rm(args) => {
            for name in &args.names {
                client.delete_volume(name).await?;
                crate::outln!("{name}");
            }
        }
        VolumeVerb::Get(args) => {
            let stream = client.download_from_volume(&args.name, &args.path).await?;
            match args.dst.as_deref() {
                None | Some("-") => {
                    let mut stdout = tokio::io::stdout();
                    let copied = super::cp::copy(stream, &mut stdout).await;
                    if let Some(err) = copied
                        .as_ref()
                        .err()
                        .and_then(|e| e.downcast_ref::<std::io::Error>())
                        .filter(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
                    {
                        crate::output::exit_on_write_error(err);
                    }
                    copied.context("writing to stdout")?;
                }
                Some(local) => {
                    super::cp::write_atomically(stream, &PathBuf::from(local)).await?;
                }
            }
        }
        VolumeVerb::Put(args) => {
            let body = if args.src == "-" {
                Body::wrap_stream(ReaderStream::new(tokio::io::stdin()))
            } else {
                let file = tokio::fs::File::open(&args.src)
                    .await
                    .with_context(|| format!("opening {}", args.src))?;
                Body::from(file)
            };
            client
                .upload_to_volume(&args.name, &args.path, body)
                .await?;
        }
        VolumeVerb::Stat(args) => super::volume_files::stat(client, args).await?,
        VolumeVerb::Mkdir(args) => super::volume_files::mkdir(client, args).await?,
        VolumeVerb::Chmod(args) => super::volume_files::chmod(client, args).await?,
        VolumeVerb::RmFile(args) => super::volume_files::rm_file(client, args).await?,
        VolumeVerb::Files(args) => {
            let list = client
                .list_volume_tree(&args.name, &args.path, args.depth)
                .await?;
            if args.json {
                crate::outln!("{}", serde_json::to_string_pretty(&list.entries)?);
            } else {
                let rows: Vec<Vec<String>> = list
                    .entries
                    .iter()
                    .map(|e| {
                        vec![
                            format!("{:?}", e.file_type).to_lowercase(),
                            e.size.to_string(),
                            format!("{}:{}", e.owner, e.group),
                            if args.depth > 1 {
                                e.path.clone()
                            } else {
                                e.name.clone()
                            },
                        ]
                    })
                    .collect();
                table::print(&["TYPE", "SIZE", "OWNER", "NAME"], &rows);
            }
        }
    }
    Ok(())
}

fn print(volumes: &[Volume]) {
    let rows: Vec<Vec<String>> = volumes
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                format!("{}MiB", v.size_mib),
                v.used_bytes
                    .map_or_else(|| "-".to_owned(), |b| format!("{}MiB", b >> 20)),
                if v.mounted_by.is_empty() {
                    "-".to_owned()
                } else {
                    v.mounted_by.join(",")
                },
            ]
        })
        .collect();
    table::print(&["NAME", "SIZE", "USED", "MOUNTED BY"], &rows);
}
