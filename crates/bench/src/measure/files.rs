//! File upload and download of `scale.file_bytes` (100 MiB): a host file streamed to
//! `/tmp/bench.bin` in a sandbox (`PUT .../files`), then streamed back into a host file
//! (`GET .../files`). The main baselines copy with the block size of the path's end in the
//! guest, so the ratio compares like with like: for the upload `dd bs=256K conv=fsync` (the
//! agent writes the 256 KiB frames the node gathers, then `fsync`s the file before its rename;
//! a copy that leaves the bytes in the page cache is not the same work), for the download
//! `dd bs=1M` (the agent reads the file 1 MiB at a time; a download makes nothing durable).
//! `cp` (+ `fsync`) follow as further baselines (GNU `cp` copies in the kernel with
//! `copy_file_range`, no user-space blocks at all).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cove_client::{Client, DownloadOptions, UploadOptions};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use super::{dist_ms, median, mib_per_s, progress, Ctx, TEMPLATE};
use crate::args::MIB;
use crate::report::{Metric, Unit};
use crate::server::{create_sandbox, delete_sandbox};

/// Where the file goes inside the sandbox.
const GUEST_PATH: &str = "/tmp/bench.bin";
/// The agent's writes of an upload: the node's frames (`UPLOAD_FRAME_BYTES` in
/// `cove-node-agent`).
const UPLOAD_BLOCK: &str = "256K";
/// The agent's reads of a download (`MAX_CHUNK_BYTES` of the guest protocol).
const DOWNLOAD_BLOCK: &str = "1M";

/// A host copy of the source file, the baselines.
#[derive(Debug, Clone, Copy)]
enum HostCopy {
    /// `cp`, then `fsync` of the copy when `fsync`.
    Cp { fsync: bool },
    /// `dd bs=<block>`, with `conv=fsync` when `fsync`.
    Dd { block: &'static str, fsync: bool },
}

/// Measures `scale.file_runs` uploads, downloads and `cp`s.
pub async fn measure(ctx: &Ctx<'_>) -> anyhow::Result<Vec<Metric>> {
    let (runs, bytes) = (ctx.scale.file_runs, ctx.scale.file_bytes);
    let mib = bytes / MIB;
    progress(&format!("files: {runs} × {mib} MiB up and down"));
    let dir = tempfile::Builder::new()
        .prefix("cove-bench-files-")
        .tempdir()
        .context("create a temp dir for files")?;
    let src = dir.path().join("source.bin");
    let dst = dir.path().join("copy.bin");
    super::blocking(|| write_source(&src, bytes))?;

    let id = create_sandbox(&ctx.client, TEMPLATE).await?;
    let result = transfer_runs(&ctx.client, &id, &src, &dst, runs, bytes).await;
    delete_sandbox(&ctx.client, &id).await?;
    let (up, down) = result?;

    let copies = |copy: HostCopy| {
        super::blocking(|| -> anyhow::Result<Vec<Duration>> {
            let mut samples = Vec::with_capacity(runs);
            for i in 0..=runs {
                let _ = std::fs::remove_file(&dst);
                let t0 = Instant::now();
                match copy {
                    HostCopy::Cp { fsync: durable } => {
                        cp(&src, &dst)?;
                        if durable {
                            fsync(&dst)?;
                        }
                    }
                    HostCopy::Dd { block, fsync } => dd(&src, &dst, block, fsync)?,
                }
                if i > 0 {
                    samples.push(t0.elapsed());
                }
            }
            Ok(samples)
        })
    };
    let cp_plain = copies(HostCopy::Cp { fsync: false })?;
    let cp_fsync = copies(HostCopy::Cp { fsync: true })?;
    let dd_up = copies(HostCopy::Dd {
        block: UPLOAD_BLOCK,
        fsync: true,
    })?;
    let dd_down = copies(HostCopy::Dd {
        block: DOWNLOAD_BLOCK,
        fsync: false,
    })?;

    let metric = |key, what: &str, samples: &[Duration], base: &[Duration], base_what: &str| {
        let rate = mib_per_s(bytes, median(samples));
        let base_rate = mib_per_s(bytes, median(base));
        anyhow::Ok(
            Metric::new(
                key,
                format!("{what} {mib} MiB"),
                Unit::Ms,
                dist_ms(samples)?,
            )
            .baseline(format!("{base_what} {mib} MiB"), dist_ms(base)?)
            .note(format!("{rate:.0} MiB/s vs {base_rate:.0} MiB/s"))
            .extra("bytes", bytes)
            .extra("mib_per_s", rate)
            .extra("baseline_mib_per_s", base_rate),
        )
    };
    Ok(vec![
        metric(
            "file_upload",
            "upload",
            &up,
            &dd_up,
            "dd bs=256K conv=fsync",
        )?
        .baseline(format!("cp + fsync {mib} MiB"), dist_ms(&cp_fsync)?)
        .baseline(format!("cp {mib} MiB"), dist_ms(&cp_plain)?),
        metric("file_download", "download", &down, &dd_down, "dd bs=1M")?
            .baseline(format!("cp {mib} MiB"), dist_ms(&cp_plain)?),
    ])
}

/// Uploads and downloads `runs` times after a warm-up; returns (uploads, downloads).
async fn transfer_runs(
    client: &Client,
    id: &str,
    src: &Path,
    dst: &Path,
    runs: usize,
    bytes: u64,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let (mut up, mut down) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for i in 0..=runs {
        let t0 = Instant::now();
        let file = tokio::fs::File::open(src)
            .await
            .with_context(|| format!("open {}", src.display()))?;
        let info = client
            .upload(id, GUEST_PATH, file, &UploadOptions::default())
            .await
            .context("upload")?;
        let took_up = t0.elapsed();
        if info.size != bytes {
            bail!("uploaded file has {} bytes, expected {bytes}", info.size);
        }

        let _ = tokio::fs::remove_file(dst).await;
        let t0 = Instant::now();
        let got = download(client, id, dst).await?;
        let took_down = t0.elapsed();
        if got != bytes {
            bail!("downloaded {got} bytes, expected {bytes}");
        }
        if i > 0 {
            up.push(took_up);
            down.push(took_down);
        }
    }
    Ok((up, down))
}

/// Streams the sandbox's file into `dst`; returns the bytes written.
async fn download(client: &Client, id: &str, dst: &Path) -> anyhow::Result<u64> {
    let mut stream = std::pin::pin!(client
        .download(id, GUEST_PATH, &DownloadOptions::default())
        .await
        .context("download")?);
    let mut out = tokio::fs::File::create(dst)
        .await
        .with_context(|| format!("create {}", dst.display()))?;
    let mut got = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.context("download stream")?;
        got += chunk.len() as u64;
        out.write_all(&chunk)
            .await
            .with_context(|| format!("write {}", dst.display()))?;
    }
    out.flush().await?;
    Ok(got)
}

/// Writes `bytes` of pseudo-random data (xorshift, not compressible) to `path`.
fn write_source(path: &Path, bytes: u64) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?,
    );
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut block = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        for word in block.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word.copy_from_slice(&x.to_le_bytes());
        }
        let n = usize::try_from(left.min(block.len() as u64)).unwrap_or(block.len());
        f.write_all(&block[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    Ok(())
}

/// `fsync` of `path`'s data (what an upload does before its rename).
fn fsync(path: &Path) -> anyhow::Result<()> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("fsync {}", path.display()))
}

/// `dd if=src of=dst bs=<block> [conv=fsync]` on the host: plain reads and writes of `block`.
fn dd(src: &Path, dst: &Path, block: &str, fsync: bool) -> anyhow::Result<()> {
    let mut cmd = Command::new("dd");
    cmd.arg(format!("if={}", src.display()))
        .arg(format!("of={}", dst.display()))
        .arg(format!("bs={block}"))
        .arg("status=none");
    if fsync {
        cmd.arg("conv=fsync");
    }
    let status = cmd.stdin(Stdio::null()).status().context("run dd")?;
    if !status.success() {
        bail!("dd failed: {status}");
    }
    Ok(())
}

/// `cp src dst` on the host.
fn cp(src: &Path, dst: &Path) -> anyhow::Result<()> {
    let status = Command::new("cp")
        .arg(src)
        .arg(dst)
        .stdin(Stdio::null())
        .status()
        .context("run cp")?;
    if !status.success() {
        bail!("cp failed: {status}");
    }
    Ok(())
}
