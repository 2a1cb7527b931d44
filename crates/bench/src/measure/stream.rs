//! stdout streaming throughput: `head -c N /dev/zero` inside a sandbox, read by the client
//! through the data plane, as SSE (base64) until the exit event (`stdout_stream`), and as the
//! raw binary stream (`Accept: application/octet-stream`) until its end plus the read of the
//! command's exit (`stdout_stream_binary`). Baseline: the same writer on the host, the
//! sandbox's own busybox `head -c N /dev/zero` (the `tiny` rootfs's static binary, writing
//! 4 KiB at a time as it does in the sandbox) `| cat`, with cat's stdout read by this process
//! through a pipe; the host's GNU `head` (128 KiB writes) `| cat` is a second baseline.

use std::ffi::OsString;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;

use super::{dist_ms, median, mib_per_s, progress, run_command, time_blocking, Ctx, TEMPLATE};
use crate::args::MIB;
use crate::report::{Metric, Unit};
use crate::server::{create_sandbox, delete_sandbox};

/// Measures `scale.stream_runs` transfers of `scale.stream_bytes` each way, SSE and binary.
pub async fn measure(ctx: &Ctx<'_>) -> anyhow::Result<Vec<Metric>> {
    let (runs, bytes) = (ctx.scale.stream_runs, ctx.scale.stream_bytes);
    let mib = bytes / MIB;
    progress(&format!(
        "stdout streaming: {runs} × {mib} MiB, SSE and binary"
    ));
    let id = create_sandbox(&ctx.client, TEMPLATE).await?;
    let result = async {
        let sse = stream_runs(ctx, &id, runs, bytes).await?;
        let binary = binary_runs(ctx, &id, runs, bytes).await?;
        anyhow::Ok((sse, binary))
    }
    .await;
    delete_sandbox(&ctx.client, &id).await?;
    let (sse, binary) = result?;

    let busybox = ctx.raw.busybox();
    let same = time_blocking(runs, || {
        host_pipe(busybox.as_os_str().into(), &["head".into()], bytes)
    })?;
    let gnu = time_blocking(runs, || host_pipe("head".into(), &[], bytes))?;
    let host_rate = mib_per_s(bytes, median(&same));
    let gnu_rate = mib_per_s(bytes, median(&gnu));
    let metric = |key, what: &str, samples: &[Duration]| -> anyhow::Result<Metric> {
        let rate = mib_per_s(bytes, median(samples));
        Ok(Metric::new(
            key,
            format!("stdout {mib} MiB through the data plane, {what}"),
            Unit::Ms,
            dist_ms(samples)?,
        )
        .baseline(
            format!("the sandbox's busybox head -c {mib}M /dev/zero | cat on the host"),
            dist_ms(&same)?,
        )
        .baseline(
            format!("GNU head -c {mib}M /dev/zero | cat on the host"),
            dist_ms(&gnu)?,
        )
        .note(format!(
            "{rate:.0} MiB/s vs {host_rate:.0} MiB/s (GNU head {gnu_rate:.0} MiB/s)"
        ))
        .extra("bytes", bytes)
        .extra("mib_per_s", rate)
        .extra("baseline_mib_per_s", host_rate)
        .extra("gnu_head_mib_per_s", gnu_rate))
    };
    Ok(vec![
        metric("stdout_stream", "SSE", &sse)?,
        metric("stdout_stream_binary", "binary", &binary)?,
    ])
}

/// Like [`stream_runs`] over the raw binary stream: start, read the body to its end, then read
/// the command's exit from the API (what a client of the binary stream does).
async fn binary_runs(
    ctx: &Ctx<'_>,
    id: &str,
    runs: usize,
    bytes: u64,
) -> anyhow::Result<Vec<Duration>> {
    let req = cove_api_types::CreateCommandRequest {
        argv: Some(vec![
            "head".into(),
            "-c".into(),
            bytes.to_string(),
            "/dev/zero".into(),
        ]),
        ..Default::default()
    };
    let mut samples = Vec::with_capacity(runs);
    for i in 0..=runs {
        let t0 = Instant::now();
        let resp = ctx
            .client
            .create_command(id, &req)
            .await
            .context("start head")?;
        let mut body = std::pin::pin!(ctx
            .client
            .attach_binary(&resp.attachment, 0)
            .await
            .context("open the binary stream")?);
        let mut got = 0u64;
        while let Some(chunk) = body.next().await {
            got += chunk.context("read the binary stream")?.len() as u64;
        }
        let cmd = ctx
            .client
            .get_command(id, &resp.command.id, Some(Duration::from_secs(30)))
            .await
            .context("read the command's exit")?;
        let took = t0.elapsed();
        if got != bytes || cmd.exit_code != Some(0) {
            bail!(
                "binary stream moved {got} of {bytes} bytes, exit {:?}",
                cmd.exit_code
            );
        }
        if i > 0 {
            samples.push(took);
        }
    }
    Ok(samples)
}

async fn stream_runs(
    ctx: &Ctx<'_>,
    id: &str,
    runs: usize,
    bytes: u64,
) -> anyhow::Result<Vec<Duration>> {
    let count = bytes.to_string();
    let argv = ["head", "-c", count.as_str(), "/dev/zero"];
    let mut samples = Vec::with_capacity(runs);
    for i in 0..=runs {
        let t0 = Instant::now();
        let got = run_command(&ctx.client, id, &argv).await?;
        let took = t0.elapsed();
        if got != bytes {
            bail!("streamed {got} bytes, expected {bytes}");
        }
        if i > 0 {
            samples.push(took);
        }
    }
    Ok(samples)
}

/// `<program> <pre...> -c <bytes> /dev/zero | cat` (`head` or `busybox head`), cat's output
/// read and counted here.
fn host_pipe(program: OsString, pre: &[OsString], bytes: u64) -> anyhow::Result<()> {
    let mut head = Command::new(program)
        .args(pre)
        .args(["-c", &bytes.to_string(), "/dev/zero"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("spawn head")?;
    let head_out = head.stdout.take().context("head has no stdout")?;
    let mut cat = Command::new("cat")
        .stdin(head_out)
        .stdout(Stdio::piped())
        .spawn()
        .context("spawn cat")?;
    let mut out = cat.stdout.take().context("cat has no stdout")?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0u64;
    loop {
        let n = out.read(&mut buf).context("read cat's output")?;
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    let (h, c) = (head.wait()?, cat.wait()?);
    if !h.success() || !c.success() || got != bytes {
        bail!("head | cat moved {got} of {bytes} bytes ({h}, {c})");
    }
    Ok(())
}
