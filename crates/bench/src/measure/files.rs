//! File upload and download of `scale.file_bytes` (100 MiB): a host file streamed to
//! `/tmp/bench.bin` in a sandbox (`PUT .../files`), then streamed back into a host file
//! (`GET .../files`). Baselines: for the upload `cp` + `fsync` of the copy (an upload is made
//! durable before it is renamed into place, so a plain `cp`, which leaves the bytes in the page
//! cache, is not the same work), then plain `cp`; for the download `cp` (a download makes
//! nothing durable).

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

    let copies = |durable: bool| {
        super::blocking(|| -> anyhow::Result<Vec<Duration>> {
            let mut samples = Vec::with_capacity(runs);
            for i in 0..=runs {
                let _ = std::fs::remove_file(&dst);
                let t0 = Instant::now();
                cp(&src, &dst)?;
                if durable {
                    fsync(&dst)?;
                }
                if i > 0 {
                    samples.push(t0.elapsed());
                }
            }
            Ok(samples)
        })
    };
    let cp_plain = copies(false)?;
    let cp_fsync = copies(true)?;

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
        metric("file_upload", "upload", &up, &cp_fsync, "cp + fsync")?
            .baseline(format!("cp {mib} MiB"), dist_ms(&cp_plain)?),
        metric("file_download", "download", &down, &cp_plain, "cp")?,
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
