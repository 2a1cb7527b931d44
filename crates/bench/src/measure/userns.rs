//! What user namespaces cost a cold start: the server under test (user namespaces on, its
//! default) beside a second server with `--user-namespaces off`, interleaved in the same run so
//! load on the machine hits both alike. Both keep their default network mode.

use super::network::alternating_cold_starts;
use super::{dist_ms, progress, Ctx};
use crate::report::{Metric, Unavailable, Unit};
use crate::server::ServerSettings;

/// The metric's key.
const KEY: &str = "cold_start_userns";

/// Measures `scale.cold_start_runs` cold starts on each server; unavailable when the server
/// under test runs without user namespaces.
pub async fn measure(
    ctx: &Ctx<'_>,
    settings: &ServerSettings,
) -> anyhow::Result<Result<Metric, Unavailable>> {
    if !ctx.client.capabilities().await?.user_namespaces {
        return Ok(Err(Unavailable {
            key: KEY,
            name: "create → first command, user namespaces on vs off".into(),
            reason: "the server under test runs without user namespaces".into(),
        }));
    }
    let runs = ctx.scale.cold_start_runs;
    progress(&format!(
        "user namespaces: {runs} cold starts each with user namespaces on and off"
    ));
    let off = ServerSettings {
        user_namespaces: false,
        ..settings.clone()
    };
    let (on, plain) = alternating_cold_starts(ctx, off, runs, "--user-namespaces off").await?;
    Ok(Ok(Metric::new(
        KEY,
        "create → first command `true`, user namespaces on",
        Unit::Ms,
        dist_ms(&on)?,
    )
    .baseline("the same, --user-namespaces off", dist_ms(&plain)?)))
}
