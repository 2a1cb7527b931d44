//! `cove volume stat|mkdir|chmod|rm-file`: a volume's paths without a sandbox (the file verbs
//! `get`, `put` and `files` are in `volume.rs`).

use clap::Args;
use cove_api_types::{FileInfo, MakeVolumeDirRequest, VolumeFileAttrs};
use cove_client::Client;

use super::cp::parse_mode;

/// Options of `cove volume stat`.
#[derive(Debug, Args)]
pub struct StatArgs {
    /// Volume name.
    pub name: String,
    /// Path in the volume.
    pub path: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Options of `cove volume mkdir`.
#[derive(Debug, Args)]
pub struct MkdirArgs {
    /// Volume name.
    pub name: String,
    /// Directory to make in the volume.
    pub path: String,
    /// Fail when a parent is missing or the path exists (default: make parents, accept an
    /// existing directory).
    #[arg(long)]
    pub no_parents: bool,
    /// Permission bits, in octal (default 755).
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<u32>,
    /// Owner uid (default 1000).
    #[arg(long)]
    pub uid: Option<u32>,
    /// Owner gid (default 1000).
    #[arg(long)]
    pub gid: Option<u32>,
}

/// Options of `cove volume chmod`.
#[derive(Debug, Args)]
pub struct ChmodArgs {
    /// Volume name.
    pub name: String,
    /// Path in the volume (a symlink is changed itself).
    pub path: String,
    /// New permission bits, in octal.
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<u32>,
    /// New owner uid.
    #[arg(long)]
    pub uid: Option<u32>,
    /// New owner gid.
    #[arg(long)]
    pub gid: Option<u32>,
}

/// Options of `cove volume rm-file`.
#[derive(Debug, Args)]
pub struct RmFileArgs {
    /// Volume name.
    pub name: String,
    /// Paths in the volume: files, symlinks (never their targets) or directory trees.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

fn show(info: &FileInfo) -> anyhow::Result<()> {
    crate::outln!("path:      {}", info.path);
    crate::outln!(
        "type:      {}",
        serde_json::to_value(info.file_type)?
            .as_str()
            .unwrap_or("?")
    );
    crate::outln!("size:      {}", info.size);
    crate::outln!("mode:      {:04o}", info.mode);
    let id = |v: Option<u32>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    crate::outln!("uid:gid:   {}:{}", id(info.uid), id(info.gid));
    crate::outln!("mtime:     {}", info.mtime.to_rfc3339());
    if let Some(t) = &info.symlink_target {
        crate::outln!("target:    {t}");
    }
    Ok(())
}

/// Runs `cove volume stat`.
pub async fn stat(client: &Client, args: StatArgs) -> anyhow::Result<()> {
    let info = client.stat_volume_file(&args.name, &args.path).await?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&info)?);
        return Ok(());
    }
    show(&info)
}

/// Runs `cove volume mkdir`; prints the directory's path.
pub async fn mkdir(client: &Client, args: MkdirArgs) -> anyhow::Result<()> {
    let req = MakeVolumeDirRequest {
        path: args.path,
        parents: Some(!args.no_parents),
        uid: args.uid,
        gid: args.gid,
        mode: args.mode,
    };
    let info = client.make_volume_dir(&args.name, &req).await?;
    crate::outln!("{}", info.path);
    Ok(())
}

/// Runs `cove volume chmod`; prints the path's new metadata.
pub async fn chmod(client: &Client, args: ChmodArgs) -> anyhow::Result<()> {
    if args.mode.is_none() && args.uid.is_none() && args.gid.is_none() {
        anyhow::bail!("nothing to change: give --mode, --uid or --gid");
    }
    let attrs = VolumeFileAttrs {
        uid: args.uid,
        gid: args.gid,
        mode: args.mode,
    };
    let info = client
        .set_volume_file_attrs(&args.name, &args.path, &attrs)
        .await?;
    show(&info)
}

/// Runs `cove volume rm-file`; prints each removed path.
pub async fn rm_file(client: &Client, args: RmFileArgs) -> anyhow::Result<()> {
    for path in &args.paths {
        client.remove_volume_file(&args.name, path).await?;
        crate::outln!("{path}");
    }
    Ok(())
}
