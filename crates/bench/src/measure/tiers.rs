//! Concurrency tiers: for each tier N (`--tiers`, default 1, 10, 20 and 50), bursts of N
//! creates sent at once, each timed from its request until the sandbox runs (its create
//! operation succeeded, or the answer already said `running`):
//! - cold creates on the server under test, beside N raw `runc run --detach` of a `sleep`
//!   container started at once (N threads released together, each on its own overlay);
//! - warm-pool claims against a pool of N ready members (refilled between bursts), beside the
//!   same raw runc tier and the cold tier of Cove;
//! - with a PostgreSQL URL, cold creates through two control-plane replicas on PostgreSQL
//!   (alternating between them; [`super::replicas::Replicas`]) as creates per second beside the
//!   single SQLite server's cold tier.
//!
//! A tier runs bursts until it has `scale.tier_samples` timed creates and at least
//! `scale.tier_rounds` bursts; the sandboxes (containers) of a burst are deleted, untimed, before
//! the next. Creates per second are the successful creates over the summed wall time of the
//! bursts (first request sent → last create running); errors are failed creates.

use std::future::Future;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::Context;
use cove_client::Client;

use super::pools;
use super::replicas::Replicas;
use super::{dist_ms, progress, run_command, Ctx, TEMPLATE};
use crate::raw::{Bundle, RawRunc};
use crate::report::{Metric, Stats, Unavailable, Unit};
use crate::server::{create_sandbox, delete_many, ServerSettings};

/// What bursts of creates did, summed over rounds.
#[derive(Debug, Default)]
pub struct Burst {
    /// Each successful create's latency.
    pub samples: Vec<Duration>,
    /// Failed creates.
    pub errors: u64,
    /// Creates a pool did not serve (they booted a sandbox instead).
    pub misses: u64,
    /// Summed wall time of the bursts.
    pub wall: Duration,
    /// The first failure, for the log.
    pub first_error: Option<String>,
}

impl Burst {
    /// Adds another burst's figures to these.
    fn absorb(&mut self, other: Burst) {
        self.samples.extend(other.samples);
        self.errors += other.errors;
        self.misses += other.misses;
        self.wall += other.wall;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    /// Successful creates per second of wall time.
    pub fn per_s(&self) -> f64 {
        self.samples.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// p50/p90/p99 of the latencies; an error naming the first failure when none succeeded.
    fn dist(&self, what: &str) -> anyhow::Result<Stats> {
        dist_ms(&self.samples).with_context(|| {
            format!(
                "{what}: no create succeeded ({} failed, first: {})",
                self.errors,
                self.first_error.as_deref().unwrap_or("-")
            )
        })
    }

    /// p95 of the latencies in ms, for the notes.
    fn p95(&self) -> f64 {
        self.dist("p95")
            .ok()
            .and_then(|s| match s {
                Stats::Distribution(s) => s.p95,
                Stats::Single { value } => Some(value),
            })
            .unwrap_or(f64::NAN)
    }
}

/// Sends `n` creates at once (`create(i)` for i in 0..n: its latency, the sandbox id and
/// whether a pool served it); returns the burst's figures and the created sandboxes' ids.
pub async fn burst<F, Fut>(n: usize, create: F) -> (Burst, Vec<String>)
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<(Duration, String, bool)>>,
{
    let began = Instant::now();
    let results = futures::future::join_all((0..n).map(create)).await;
    tally(results, began.elapsed())
}

/// The figures of one burst from its creates' results (latency, id, served by a pool) and
/// its wall time; also the ids of the sandboxes (containers) made.
fn tally(
    results: impl IntoIterator<Item = anyhow::Result<(Duration, String, bool)>>,
    wall: Duration,
) -> (Burst, Vec<String>) {
    let mut burst = Burst {
        wall,
        ..Burst::default()
    };
    let mut ids = Vec::new();
    for r in results {
        match r {
            Ok((took, id, served)) => {
                burst.samples.push(took);
                burst.misses += u64::from(!served);
                ids.push(id);
            }
            Err(e) => {
                burst.errors += 1;
                burst.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    (burst, ids)
}

/// One tier's cold creates on Cove and on raw runc.
struct ColdTier {
    n: usize,
    cove: Burst,
    raw: Burst,
}

/// Measures every tier; the replicas' rows are unavailable without a PostgreSQL URL.
pub async fn measure(
    ctx: &Ctx<'_>,
    settings: &ServerSettings,
    postgres_url: Option<&str>,
    tiers: &[usize],
) -> anyhow::Result<(Vec<Metric>, Vec<Unavailable>)> {
    let Some(&largest) = tiers.last() else {
        return Ok((Vec::new(), Vec::new()));
    };
    let mut cold = Vec::with_capacity(tiers.len());
    let single = [ctx.client.clone()];
    cold_bursts(&single, 1, 1).await?; // warm-up
    let bundles: Vec<Bundle> = super::blocking(|| {
        (0..largest)
            .map(|_| ctx.raw.bundle(&["sleep", "86400"]))
            .collect::<anyhow::Result<_>>()
    })?;
    let raw_result = async {
        super::blocking(|| raw_bursts(ctx.raw, &bundles[..1], 1))?; // warm-up
        for &n in tiers {
            let rounds = rounds(ctx, n);
            progress(&format!(
                "tiers: {n} cold creates at once × {rounds}, Cove and raw runc"
            ));
            let cove = cold_bursts(&single, n, rounds).await?;
            let raw = super::blocking(|| raw_bursts(ctx.raw, &bundles[..n], rounds))?;
            cold.push(ColdTier { n, cove, raw });
        }
        anyhow::Ok(())
    }
    .await;
    let removed: anyhow::Result<()> =
        super::blocking(|| bundles.into_iter().try_for_each(Bundle::remove));
    raw_result?;
    removed?;

    let mut metrics: Vec<Metric> = cold
        .iter()
        .map(cold_metric)
        .collect::<anyhow::Result<_>>()?;
    let pool = pool_tiers(ctx, tiers).await?;
    for (tier, claims) in cold.iter().zip(pool) {
        metrics.push(pool_metric(tier, &claims)?);
    }
    let mut unavailable = Vec::new();
    match postgres_url {
        Some(url) => {
            for (tier, two) in cold
                .iter()
                .zip(replica_tiers(ctx, settings, url, tiers).await?)
            {
                metrics.push(replicas_metric(tier, &two)?);
            }
        }
        None => unavailable.push(Unavailable {
            key: "tier_replicas_create",
            name: "N at once: creates/s through two replicas on PostgreSQL".to_string(),
            reason: "no --postgres-url (COVE_BENCH_POSTGRES_URL) given".to_string(),
        }),
    }
    Ok((metrics, unavailable))
}

/// Bursts per tier: enough for `tier_samples` creates, at least `tier_rounds`.
fn rounds(ctx: &Ctx<'_>, n: usize) -> usize {
    ctx.scale
        .tier_samples
        .div_ceil(n.max(1))
        .max(ctx.scale.tier_rounds)
}

/// `rounds` bursts of `n` cold creates, alternating over `clients`, each burst deleted after.
async fn cold_bursts(clients: &[Client], n: usize, rounds: usize) -> anyhow::Result<Burst> {
    let mut all = Burst::default();
    for _ in 0..rounds {
        let (b, ids) = burst(n, |i| {
            let client = &clients[i % clients.len()];
            async move {
                let t0 = Instant::now();
                let id = create_sandbox(client, TEMPLATE).await?;
                Ok((t0.elapsed(), id, false))
            }
        })
        .await;
        delete_many(&clients[0], &ids, 8).await?;
        all.absorb(b);
    }
    all.misses = 0;
    Ok(all)
}

/// `rounds` bursts of `runc run --detach`, one thread per bundle, released together; each
/// burst's containers are deleted (in parallel, untimed) before the next.
fn raw_bursts(raw: &RawRunc, bundles: &[Bundle], rounds: usize) -> anyhow::Result<Burst> {
    let mut all = Burst::default();
    for _ in 0..rounds {
        let gate = Barrier::new(bundles.len() + 1);
        let (results, wall) = std::thread::scope(|s| {
            let workers: Vec<_> = bundles
                .iter()
                .map(|bundle| {
                    let gate = &gate;
                    s.spawn(move || {
                        let id = raw.new_name();
                        gate.wait();
                        let t0 = Instant::now();
                        raw.run_detached(bundle, &id)
                            .map(|()| (t0.elapsed(), id, false))
                    })
                })
                .collect();
            gate.wait();
            let began = Instant::now();
            let results: Vec<anyhow::Result<(Duration, String, bool)>> = workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a runc thread panicked")))
                })
                .collect();
            (results, began.elapsed())
        });
        let (mut b, ids) = tally(results, wall);
        b.misses = 0;
        let deleted: Vec<anyhow::Result<()>> = std::thread::scope(|s| {
            let ds: Vec<_> = ids.iter().map(|id| s.spawn(|| raw.delete(id))).collect();
            ds.into_iter()
                .map(|d| {
                    d.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a runc thread panicked")))
                })
                .collect()
        });
        deleted.into_iter().collect::<anyhow::Result<()>>()?;
        all.absorb(b);
    }
    Ok(all)
}

/// Warm-pool claims at each tier (a pool of the tier's size); the pool is deleted and its
/// members gone afterwards, also on an error.
async fn pool_tiers(ctx: &Ctx<'_>, tiers: &[usize]) -> anyhow::Result<Vec<Burst>> {
    let result = async {
        let mut out = Vec::with_capacity(tiers.len());
        for &n in tiers {
            let rounds = rounds(ctx, n);
            progress(&format!(
                "tiers: {n} warm-pool claims at once × {rounds}, pool of {n}"
            ));
            pools::put_pool(&ctx.client, n as u32).await?;
            let mut all = Burst::default();
            for _ in 0..rounds {
                let (b, ids) = pools::claim_burst(&ctx.client, n).await?;
                // A claim must hand out a working sandbox.
                if let Some(id) = ids.first() {
                    run_command(&ctx.client, id, &["true"]).await?;
                }
                delete_many(&ctx.client, &ids, 8).await?;
                all.absorb(b);
            }
            out.push(all);
        }
        anyhow::Ok(out)
    }
    .await;
    let _ = ctx.client.delete_pool(pools::POOL).await;
    let drained = pools::wait_drained(ctx).await;
    let out = result?;
    drained?;
    Ok(out)
}

/// Cold creates through two replicas on PostgreSQL at each tier.
async fn replica_tiers(
    ctx: &Ctx<'_>,
    settings: &ServerSettings,
    url: &str,
    tiers: &[usize],
) -> anyhow::Result<Vec<Burst>> {
    progress("tiers: starting two replicas on PostgreSQL and a node");
    let replicas = Replicas::start(settings, url).await?;
    let result = async {
        let clients = replicas.clients()?;
        cold_bursts(&clients, 2, 1).await?; // warm-up, one through each
        let mut out = Vec::with_capacity(tiers.len());
        for &n in tiers {
            let rounds = rounds(ctx, n);
            progress(&format!(
                "tiers: {n} creates at once × {rounds} through two replicas"
            ));
            out.push(cold_bursts(&clients, n, rounds).await?);
        }
        anyhow::Ok(out)
    }
    .await;
    let stopped = replicas.stop().await;
    let out = result?;
    stopped?;
    Ok(out)
}

/// `p50/p95/p99` of a burst's latencies, for a note.
fn percentiles(b: &Burst) -> String {
    match b.dist("percentiles") {
        Ok(Stats::Distribution(s)) => format!(
            "{:.0}/{:.0}/{:.0} ms",
            s.p50,
            s.p95.unwrap_or(f64::NAN),
            s.p99
        ),
        _ => "-".to_string(),
    }
}

fn log_errors(what: &str, b: &Burst) {
    if let Some(e) = &b.first_error {
        progress(&format!("tiers: {what}: {} failed, first: {e}", b.errors));
    }
}

fn cold_metric(t: &ColdTier) -> anyhow::Result<Metric> {
    let n = t.n;
    log_errors(&format!("{n} cold creates"), &t.cove);
    log_errors(&format!("{n} raw runc runs"), &t.raw);
    Ok(Metric::new(
        "tier_cold_create",
        format!("{n} at once: cold create → running"),
        Unit::Ms,
        t.cove.dist("cold creates")?,
    )
    .baseline(format!("runc run -d, {n} at once"), t.raw.dist("raw runc")?)
    .note(format!(
        "p95 {:.0} vs {:.0} ms; {:.1} vs {:.1} creates/s; errors {} vs {}",
        t.cove.p95(),
        t.raw.p95(),
        t.cove.per_s(),
        t.raw.per_s(),
        t.cove.errors,
        t.raw.errors
    ))
    .extra("tier", n as u64)
    .extra("errors", t.cove.errors)
    .extra("baseline_errors", t.raw.errors)
    .extra("creates_per_s", t.cove.per_s())
    .extra("baseline_creates_per_s", t.raw.per_s()))
}

fn pool_metric(t: &ColdTier, claims: &Burst) -> anyhow::Result<Metric> {
    let n = t.n;
    log_errors(&format!("{n} pool claims"), claims);
    Ok(Metric::new(
        "tier_pool_claim",
        format!("{n} at once: warm-pool claim → running, pool of {n}"),
        Unit::Ms,
        claims.dist("pool claims")?,
    )
    .baseline(format!("runc run -d, {n} at once"), t.raw.dist("raw runc")?)
    .baseline(
        format!("cold create → running, {n} at once"),
        t.cove.dist("cold creates")?,
    )
    .note(format!(
        "p95 {:.0} vs {:.0} ms; {:.1} vs {:.1} creates/s; errors {}, misses {}",
        claims.p95(),
        t.raw.p95(),
        claims.per_s(),
        t.raw.per_s(),
        claims.errors,
        claims.misses
    ))
    .extra("tier", n as u64)
    .extra("errors", claims.errors)
    .extra("misses", claims.misses)
    .extra("creates_per_s", claims.per_s()))
}

fn replicas_metric(t: &ColdTier, two: &Burst) -> anyhow::Result<Metric> {
    let n = t.n;
    log_errors(&format!("{n} creates through two replicas"), two);
    Ok(Metric::new(
        "tier_replicas_create",
        format!("{n} at once: creates/s through two replicas on PostgreSQL"),
        Unit::PerS,
        Stats::single(two.per_s()),
    )
    .baseline(
        format!("one server on SQLite, {n} at once"),
        Stats::single(t.cove.per_s()),
    )
    .note(format!(
        "create → running p50/p95/p99 {} vs {}; errors {} vs {}",
        percentiles(two),
        percentiles(&t.cove),
        two.errors,
        t.cove.errors
    ))
    .extra("tier", n as u64)
    .extra("errors", two.errors)
    .extra("baseline_errors", t.cove.errors))
}
