//! Create → first command finished, cold: a new sandbox each run (no warm pool), then `true`
//! through the API and the data plane. Baseline: `runc run` of `/bin/true` on the same `tiny`
//! rootfs (an overlay, as for a sandbox), which creates, runs, waits for and deletes a
//! container.

use std::time::Instant;

use super::{dist_ms, progress, run_command, time_blocking, Ctx, TEMPLATE};
use crate::report::{Metric, Unit};
use crate::server::{create_sandbox, delete_sandbox};

/// Measures `scale.cold_start_runs` cold starts and as many raw `runc run`s.
pub async fn measure(ctx: &Ctx<'_>) -> anyhow::Result<Metric> {
    let runs = ctx.scale.cold_start_runs;
    progress(&format!("cold start: {runs} creates → `true`"));
    let mut samples = Vec::with_capacity(runs);
    for i in 0..=runs {
        let t0 = Instant::now();
        let id = create_sandbox(&ctx.client, TEMPLATE).await?;
        run_command(&ctx.client, &id, &["true"]).await?;
        let took = t0.elapsed();
        delete_sandbox(&ctx.client, &id).await?;
        if i > 0 {
            samples.push(took);
        }
    }

    let bundle = super::blocking(|| ctx.raw.bundle(&["/bin/true"]))?;
    let raw = time_blocking(runs, || ctx.raw.run(&bundle, &ctx.raw.new_name()))?;
    super::blocking(|| bundle.remove())?;

    Ok(Metric::new(
        "cold_start",
        "create → first command `true` done, cold",
        Unit::Ms,
        dist_ms(&samples)?,
    )
    .baseline("runc run /bin/true", dist_ms(&raw)?))
}
