//! Concurrency: `scale.concurrency_clients` clients (each its own connection pool) creating a
//! sandbox, waiting until it runs, deleting it and waiting until it is gone, again and again
//! for `scale.concurrency_duration`; cycles under way at the end finish. Reports throughput
//! (completed cycles per second of wall time), errors, and create and delete latencies.
//!
//! Baseline: as many threads doing `runc run --detach` of a `sleep` container and `runc delete
//! --force`, each thread on its own overlay, for the same duration.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{dist_ms, progress, Ctx, TEMPLATE};
use crate::raw::RawRunc;
use crate::report::{Metric, Stats, Unit};
use crate::server::{create_sandbox, delete_sandbox};

/// Pause of a worker after a failed create, so a broken server is not hammered.
const ERROR_PAUSE: Duration = Duration::from_millis(100);

/// What one side's workers did.
#[derive(Debug, Default)]
struct Tally {
    creates: Vec<Duration>,
    deletes: Vec<Duration>,
    cycles: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn error(&mut self, e: &anyhow::Error) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(format!("{e:#}"));
        }
    }
}

/// Measures Cove under concurrent clients, then the raw baseline.
pub async fn measure(ctx: &Ctx<'_>) -> anyhow::Result<Vec<Metric>> {
    let clients = ctx.scale.concurrency_clients;
    let duration = ctx.scale.concurrency_duration;
    progress(&format!(
        "concurrency: {clients} clients creating and deleting for {} s",
        duration.as_secs()
    ));
    let (cove, cove_wall) = cove_cycles(ctx, clients, duration).await?;
    progress(&format!(
        "concurrency baseline: {clients} threads of raw runc for {} s",
        duration.as_secs()
    ));
    let (raw, raw_wall) = super::blocking(|| raw_cycles(ctx.raw, clients, duration))?;
    if let Some(e) = &cove.first_error {
        progress(&format!("concurrency: {} errors, first: {e}", cove.errors));
    }

    let rate = |t: &Tally, wall: Duration| t.cycles as f64 / wall.as_secs_f64().max(1e-9);
    let errors = format!("errors {} vs {}", cove.errors, raw.errors);
    Ok(vec![
        Metric::new(
            "concurrency_throughput",
            format!("{clients} clients create+delete, sandboxes"),
            Unit::PerS,
            Stats::single(rate(&cove, cove_wall)),
        )
        .baseline(
            "runc run -d + delete -f",
            Stats::single(rate(&raw, raw_wall)),
        )
        .note(errors)
        .extra("cycles", cove.cycles)
        .extra("errors", cove.errors)
        .extra("baseline_cycles", raw.cycles)
        .extra("baseline_errors", raw.errors)
        .extra("clients", clients as u64)
        .extra("duration_s", duration.as_secs_f64()),
        Metric::new(
            "concurrency_create",
            format!("{clients} clients: create → running"),
            Unit::Ms,
            dist_ms(&cove.creates)?,
        )
        .baseline("runc run -d", dist_ms(&raw.creates)?)
        .extra("errors", cove.errors),
        Metric::new(
            "concurrency_delete",
            format!("{clients} clients: delete → gone"),
            Unit::Ms,
            dist_ms(&cove.deletes)?,
        )
        .baseline("runc delete -f", dist_ms(&raw.deletes)?)
        .extra("errors", cove.errors),
    ])
}

/// Runs the Cove workers; returns their tally and the wall time until the last one ended.
async fn cove_cycles(
    ctx: &Ctx<'_>,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<(Tally, Duration)> {
    let tally = Mutex::new(Tally::default());
    let clients: Vec<_> = (0..clients)
        .map(|_| ctx.server.client())
        .collect::<anyhow::Result<_>>()?;
    let t0 = Instant::now();
    let deadline = t0 + duration;
    let workers = clients.iter().map(|client| {
        let tally = &tally;
        async move {
            while Instant::now() < deadline {
                let c0 = Instant::now();
                let id = match create_sandbox(client, TEMPLATE).await {
                    Ok(id) => id,
                    Err(e) => {
                        lock(tally).error(&e);
                        tokio::time::sleep(ERROR_PAUSE).await;
                        continue;
                    }
                };
                let created = c0.elapsed();
                let d0 = Instant::now();
                let deleted = delete_sandbox(client, &id).await;
                let mut t = lock(tally);
                t.creates.push(created);
                match deleted {
                    Ok(()) => {
                        t.deletes.push(d0.elapsed());
                        t.cycles += 1;
                    }
                    Err(e) => t.error(&e),
                }
            }
        }
    });
    futures::future::join_all(workers).await;
    let wall = t0.elapsed();
    let tally = tally.into_inner();
    Ok((tally, wall))
}

/// Runs the raw workers on threads; returns their tally and the wall time.
fn raw_cycles(
    raw: &RawRunc,
    threads: usize,
    duration: Duration,
) -> anyhow::Result<(Tally, Duration)> {
    let tally = Mutex::new(Tally::default());
    let bundles: Vec<_> = (0..threads)
        .map(|_| raw.bundle(&["sleep", "86400"]))
        .collect::<anyhow::Result<_>>()?;
    let t0 = Instant::now();
    let deadline = t0 + duration;
    std::thread::scope(|s| {
        for bundle in &bundles {
            let tally = &tally;
            s.spawn(move || {
                while Instant::now() < deadline {
                    let id = raw.new_name();
                    let c0 = Instant::now();
                    if let Err(e) = raw.run_detached(bundle, &id) {
                        lock(tally).error(&e);
                        std::thread::sleep(ERROR_PAUSE);
                        continue;
                    }
                    let created = c0.elapsed();
                    let d0 = Instant::now();
                    let deleted = raw.delete(&id);
                    let mut t = lock(tally);
                    t.creates.push(created);
                    match deleted {
                        Ok(()) => {
                            t.deletes.push(d0.elapsed());
                            t.cycles += 1;
                        }
                        Err(e) => t.error(&e),
                    }
                }
            });
        }
    });
    let wall = t0.elapsed();
    for bundle in bundles {
        bundle.remove()?;
    }
    let tally = tally.into_inner();
    Ok((tally, wall))
}

fn lock(tally: &Mutex<Tally>) -> parking_lot::MutexGuard<'_, Tally> {
    tally.lock()
}
