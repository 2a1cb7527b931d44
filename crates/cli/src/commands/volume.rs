//! `cove volume create|ls|rm|get|put|files`: persistent volumes (node-local disks that sandboxes
//! mount with `cove create --volume NAME:/path[:ro]`) and their files without a sandbox.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use cove_api_types::Volume;
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
    /// List a directory of a volume.
    Files(FilesArgs),
}

/// Options of `cove volume create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Name (a-z, 0-9, -, _), unique in the org.
    pub name: String,
    /// Size in MiB (16 to 1048576): writes past it fail with ENOSPC.
    #[arg(long, value_name = "MIB")]
    pub size_mib: u64,
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
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `volume` verb.
pub async fn run(client: &Client, verb: VolumeVerb) -> anyhow::Result<()> {
    match verb {
        VolumeVerb::Create(args) => {
            let v = client.create_volume(&args.name, args.size_mib).await?;
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
        VolumeVerb::Files(args) => {
            let list = client.list_volume_files(&args.name, &args.path).await?;
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
                            e.name.clone(),
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
