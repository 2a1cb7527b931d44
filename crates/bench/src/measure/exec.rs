//! Exec round trip: `true` in a running sandbox, from the create-command request through
//! reading the exit event on the data plane. Baselines: `runc exec` of `/bin/true` into a raw
//! container, and a plain fork/exec of `/bin/true` on the host.

use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use super::{dist_ms, median, progress, run_command_timed, time_blocking, Ctx, TEMPLATE};
use crate::report::{Metric, Unit};
use crate::server::{create_sandbox, delete_sandbox};

/// Measures `scale.exec_runs` round trips of each kind.
pub async fn measure(ctx: &Ctx<'_>) -> anyhow::Result<Metric> {
    let runs = ctx.scale.exec_runs;
    progress(&format!("exec round trip: {runs} × `true`"));
    let id = create_sandbox(&ctx.client, TEMPLATE).await?;
    let mut samples = Vec::with_capacity(runs);
    let mut accepted = Vec::with_capacity(runs);
    let mut result = Ok(());
    for i in 0..=runs {
        let t0 = std::time::Instant::now();
        match run_command_timed(&ctx.client, &id, &["true"]).await {
            Ok((_, took)) if i > 0 => {
                samples.push(t0.elapsed());
                accepted.push(took);
            }
            Ok(_) => {}
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    delete_sandbox(&ctx.client, &id).await?;
    result?;

    let raw = &ctx.raw;
    let bundle = super::blocking(|| raw.bundle(&["sleep", "86400"]))?;
    let container = raw.new_name();
    super::blocking(|| raw.run_detached(&bundle, &container))?;
    let runc_exec = time_blocking(runs, || raw.exec(&container, &["/bin/true"]));
    super::blocking(|| raw.delete(&container).and_then(|()| bundle.remove()))?;
    let runc_exec = runc_exec?;

    let host = time_blocking(runs, host_true)?;

    let accepted_ms = median(&accepted).as_secs_f64() * 1e3;

    Ok(Metric::new(
        "exec_round_trip",
        "exec `true` round trip",
        Unit::Ms,
        dist_ms(&samples)?,
    )
    .baseline("runc exec /bin/true", dist_ms(&runc_exec)?)
    .baseline("host fork/exec /bin/true", dist_ms(&host)?)
    .note(format!("create-command request p50 {accepted_ms:.1} ms"))
    .extra("create_command_p50_ms", accepted_ms))
}

/// Forks and execs `/bin/true` on the host and waits for it.
fn host_true() -> anyhow::Result<()> {
    let status = Command::new("/bin/true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("run /bin/true")?;
    if !status.success() {
        bail!("/bin/true failed: {status}");
    }
    Ok(())
}
