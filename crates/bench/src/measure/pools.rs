//! Creates served by a warm pool, through the API:
//! - one create at a time from a pool of 1 that refills between runs: request sent →
//!   answer with the sandbox `running` (its operation already succeeded); baseline: a cold
//!   create → `running` (request, then its operation waited for) of the same size in this
//!   run;
//! - a burst: `burst` creates at once against a pool of `burst` ready members; every
//!   create's latency, and errors (failed requests) and misses (answers that had to boot);
//!   baseline: the creates served one at a time above.
//!
//! Each claimed sandbox runs `true` before it is deleted, so a claim that handed out a broken
//! sandbox fails the bench instead of yielding a number.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cove_api_types::{CreateSandboxRequest, PutPoolRequest, SandboxState};
use cove_client::Client;

use super::tiers::{self, Burst};
use super::{dist_ms, progress, run_command, Ctx, TEMPLATE};
use crate::report::{Metric, Stats, Unit};
use crate::server::{delete_many, delete_sandbox};

/// Name of the bench's pool.
pub const POOL: &str = "bench";
/// Longest wait for a pool to have its members ready.
const FILL_TIMEOUT: Duration = Duration::from_secs(600);
/// Pause between a pool's members being ready and a burst of claims, so the node has settled
/// after booting them: 100 ms and 20 ms per member, at most 1 s (a pool of 50).
fn settle(members: usize) -> Duration {
    Duration::from_millis(100 + 20 * members as u64).min(Duration::from_secs(1))
}

/// Measures both pool rows.
pub async fn measure(ctx: &Ctx<'_>) -> anyhow::Result<Vec<Metric>> {
    let runs = ctx.scale.pool_runs;
    let burst = ctx.scale.pool_burst;
    progress(&format!(
        "warm pool: {runs} creates from a pool, a burst of {burst}"
    ));
    let result = measure_both(&ctx.client, runs, burst).await;
    let _ = ctx.client.delete_pool(POOL).await;
    let drained = wait_drained(ctx).await;
    let metrics = result?;
    drained?;
    Ok(metrics)
}

/// Waits until the deleted pool's members are gone: until runc has no container that is not
/// a listed sandbox (so the measurements after this one see a quiet node).
pub async fn wait_drained(ctx: &Ctx<'_>) -> anyhow::Result<()> {
    let began = Instant::now();
    loop {
        let listed = ctx
            .client
            .list_sandboxes(&cove_client::ListSandboxes {
                limit: Some(500),
                ..Default::default()
            })
            .await
            .context("list sandboxes")?
            .sandboxes
            .len();
        let containers = std::fs::read_dir(ctx.server.runc_root())
            .map(|d| d.flatten().filter(|e| e.path().is_dir()).count())
            .unwrap_or(0);
        if containers <= listed {
            return Ok(());
        }
        if began.elapsed() > FILL_TIMEOUT {
            bail!(
                "the pool's members were not deleted ({containers} containers, {listed} sandboxes)"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn measure_both(client: &Client, runs: usize, burst: usize) -> anyhow::Result<Vec<Metric>> {
    put_pool(client, 1).await?;
    let mut samples = Vec::with_capacity(runs);
    let mut misses = 0u64;
    for i in 0..=runs {
        wait_ready(client, 1).await?;
        let (took, id, served) = create_timed(client).await?;
        run_command(client, &id, &["true"]).await?;
        delete_sandbox(client, &id).await?;
        if i > 0 {
            samples.push(took);
            misses += u64::from(!served);
        }
    }
    let mut cold = Vec::with_capacity(runs);
    for _ in 0..runs.clamp(1, 10) {
        let t0 = Instant::now();
        let id = cold_create(client).await?;
        cold.push(t0.elapsed());
        delete_sandbox(client, &id).await?;
    }
    let one = Metric::new(
        "warm_pool_create",
        "create from a warm pool → running (API)",
        Unit::Ms,
        dist_ms(&samples)?,
    )
    .baseline("cold create → running (API)", dist_ms(&cold)?)
    .note(format!("misses {misses} of {runs}"))
    .extra("misses", misses);

    let burst_metric = measure_burst(client, burst, dist_ms(&samples)?).await?;
    Ok(vec![one, burst_metric])
}

/// The burst; its baseline is `alone`, the creates served one at a time.
async fn measure_burst(client: &Client, burst: usize, alone: Stats) -> anyhow::Result<Metric> {
    put_pool(client, burst as u32).await?;
    let (claimed, ids) = claim_burst(client, burst).await?;
    // Stop refilling before the claimed sandboxes are deleted.
    client.delete_pool(POOL).await.context("delete the pool")?;
    for id in ids.iter().take(3) {
        run_command(client, id, &["true"]).await?;
    }
    delete_many(client, &ids, 8).await?;
    Ok(Metric::new(
        "warm_pool_burst",
        format!("{burst} creates at once, pool of {burst}"),
        Unit::Ms,
        dist_ms(&claimed.samples)?,
    )
    .baseline("one create at a time from the pool", alone)
    .note(format!(
        "errors {}, misses {}, burst wall {:.0} ms",
        claimed.errors,
        claimed.misses,
        claimed.wall.as_secs_f64() * 1000.0
    ))
    .extra("errors", claimed.errors)
    .extra("misses", claimed.misses)
    .extra("burst", burst as u64))
}

/// Waits until the bench pool (already put with `n` members) has them ready, lets the node
/// settle, then sends `n` creates of the pool's size at once: each claim's latency, errors
/// and misses, and the claimed sandboxes' ids (for the caller to delete).
pub async fn claim_burst(client: &Client, n: usize) -> anyhow::Result<(Burst, Vec<String>)> {
    wait_ready(client, n as u32).await?;
    // Let the node settle after booting the members before the burst.
    tokio::time::sleep(settle(n)).await;
    let (burst, ids) = tiers::burst(n, |_| create_timed(client)).await;
    if let Some(e) = &burst.first_error {
        progress(&format!(
            "warm pool burst of {n}: {} creates failed, first: {e}",
            burst.errors
        ));
    }
    Ok((burst, ids))
}

/// Sets the bench pool to keep `n` ready `tiny` sandboxes of the default size.
pub async fn put_pool(client: &Client, n: u32) -> anyhow::Result<()> {
    let req = PutPoolRequest {
        template: TEMPLATE.to_string(),
        release: None,
        resources: None,
        min_ready: n,
        max: n,
    };
    client.put_pool(POOL, &req).await.context("put the pool")?;
    Ok(())
}

/// Waits until the pool has `n` ready members.
async fn wait_ready(client: &Client, n: u32) -> anyhow::Result<()> {
    let began = Instant::now();
    loop {
        let p = client.pool(POOL).await.context("get the pool")?;
        if p.ready >= n {
            return Ok(());
        }
        if began.elapsed() > FILL_TIMEOUT {
            bail!("the pool did not get {n} ready members (has {})", p.ready);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One create of the pool's size; its latency until the answer says `running` (for a miss:
/// until its operation succeeded), its id, and whether the pool served it.
async fn create_timed(client: &Client) -> anyhow::Result<(Duration, String, bool)> {
    let req = CreateSandboxRequest {
        template: Some(TEMPLATE.to_string()),
        ..Default::default()
    };
    let t0 = Instant::now();
    let resp = client.create_sandbox(&req, None).await.context("create")?;
    let served = resp.sandbox.state == SandboxState::Running;
    if !served {
        crate::server::wait_succeeded(client, &resp.operation.id, "create").await?;
    }
    Ok((t0.elapsed(), resp.sandbox.id, served))
}

/// A cold create → running of another size than the pool's, so the pool cannot serve it.
async fn cold_create(client: &Client) -> anyhow::Result<String> {
    let req = CreateSandboxRequest {
        template: Some(TEMPLATE.to_string()),
        resources: Some(cove_api_types::ResourcesRequest {
            memory_mib: Some(384),
            ..Default::default()
        }),
        ..Default::default()
    };
    let resp = client.create_sandbox(&req, None).await.context("create")?;
    crate::server::wait_succeeded(client, &resp.operation.id, "cold create").await?;
    Ok(resp.sandbox.id)
}
