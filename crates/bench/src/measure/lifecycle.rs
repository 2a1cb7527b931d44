//! Lifecycle round trips of one running sandbox, each request's operation waited for:
//! - pause + resume (processes frozen and thawed, memory stays); baseline `runc pause` +
//!   `runc resume` of a raw `sleep` container;
//! - suspend + wake (on runc: the container is stopped and its files kept, then started
//!   again); baseline what that is for raw runc: `runc kill` + `delete`, unmount the overlay,
//!   mount it again over the kept upper dir, `runc run --detach`.
//!
//! After each series a command runs in the sandbox, so a round trip that left it broken fails
//! the bench instead of yielding a number. A server without the routes (an older build) makes
//! the metric "not available in this build".

use std::time::{Duration, Instant};

use cove_client::{Client, ClientError};

use super::{dist_ms, progress, run_command, time_blocking, Ctx, TEMPLATE};
use crate::raw::RawRunc;
use crate::report::{Metric, Unavailable, Unit};
use crate::server::{create_sandbox, delete_sandbox, wait_succeeded};

/// What the lifecycle measurements produced.
pub struct Lifecycle {
    /// Measured metrics.
    pub metrics: Vec<Metric>,
    /// Round trips this server cannot do.
    pub unavailable: Vec<Unavailable>,
}

/// One round trip's two verbs.
#[derive(Debug, Clone, Copy)]
enum RoundTrip {
    PauseResume,
    SuspendWake,
}

impl RoundTrip {
    fn key(self) -> &'static str {
        match self {
            RoundTrip::PauseResume => "pause_resume",
            RoundTrip::SuspendWake => "suspend_wake",
        }
    }

    fn name(self) -> &'static str {
        match self {
            RoundTrip::PauseResume => "pause+resume round trip",
            RoundTrip::SuspendWake => "suspend+wake round trip",
        }
    }

    fn label(self) -> &'static str {
        match self {
            RoundTrip::PauseResume => "pause/resume",
            RoundTrip::SuspendWake => "suspend/wake",
        }
    }

    async fn once(self, client: &Client, id: &str) -> Result<(), Failure> {
        let first = match self {
            RoundTrip::PauseResume => client.pause_sandbox(id).await?,
            RoundTrip::SuspendWake => client.suspend_sandbox(id).await?,
        };
        wait_succeeded(client, &first.id, self.label())
            .await
            .map_err(Failure::Other)?;
        let second = match self {
            RoundTrip::PauseResume => client.resume_sandbox(id).await?,
            RoundTrip::SuspendWake => client.wake_sandbox(id).await?,
        };
        wait_succeeded(client, &second.id, self.label())
            .await
            .map_err(Failure::Other)
    }
}

/// Why a round trip did not happen.
enum Failure {
    /// The server has no such route (`404`/`405` without an API error body).
    NoRoute(u16),
    /// Anything else.
    Other(anyhow::Error),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Failure {
        match e {
            ClientError::Status { status, .. } if status == 404 || status == 405 => {
                Failure::NoRoute(status)
            }
            e => Failure::Other(anyhow::Error::new(e)),
        }
    }
}

/// Measures both round trips and their raw baselines.
pub async fn measure(ctx: &Ctx<'_>) -> anyhow::Result<Lifecycle> {
    let runs = ctx.scale.lifecycle_runs;
    progress(&format!("lifecycle: {runs} × pause+resume, suspend+wake"));
    let id = create_sandbox(&ctx.client, TEMPLATE).await?;
    let mut series = Vec::new();
    let mut result = Ok(());
    for trip in [RoundTrip::PauseResume, RoundTrip::SuspendWake] {
        match round_trips(&ctx.client, &id, trip, runs).await {
            Ok(samples) => series.push((trip, Some(samples))),
            Err(Failure::NoRoute(status)) => {
                progress(&format!(
                    "{}: not available in this build (the server answers {status})",
                    trip.label()
                ));
                series.push((trip, None));
            }
            Err(Failure::Other(e)) => {
                result = Err(e);
                break;
            }
        }
    }
    delete_sandbox(&ctx.client, &id).await?;
    result?;

    let mut out = Lifecycle {
        metrics: Vec::new(),
        unavailable: Vec::new(),
    };
    for (trip, samples) in series {
        let Some(samples) = samples else {
            out.unavailable.push(Unavailable {
                key: trip.key(),
                name: trip.name().to_string(),
                reason: format!("{}: not available in this build", trip.label()),
            });
            continue;
        };
        let (baseline, raw) = match trip {
            RoundTrip::PauseResume => ("runc pause + resume", raw_pause_resume(ctx.raw, runs)?),
            RoundTrip::SuspendWake => (
                "runc kill + delete, runc run -d (upper kept)",
                raw_stop_start(ctx.raw, runs)?,
            ),
        };
        out.metrics.push(
            Metric::new(trip.key(), trip.name(), Unit::Ms, dist_ms(&samples)?)
                .baseline(baseline, dist_ms(&raw)?),
        );
    }
    Ok(out)
}

/// `runs` timed round trips after a warm-up, then a command to show the sandbox works.
async fn round_trips(
    client: &Client,
    id: &str,
    trip: RoundTrip,
    runs: usize,
) -> Result<Vec<Duration>, Failure> {
    let mut samples = Vec::with_capacity(runs);
    for i in 0..=runs {
        let t0 = Instant::now();
        trip.once(client, id).await?;
        if i > 0 {
            samples.push(t0.elapsed());
        }
    }
    run_command(client, id, &["true"])
        .await
        .map_err(Failure::Other)?;
    Ok(samples)
}

/// `runc pause` + `runc resume` of a raw `sleep` container.
pub(super) fn raw_pause_resume(raw: &RawRunc, runs: usize) -> anyhow::Result<Vec<Duration>> {
    let bundle = super::blocking(|| raw.bundle(&["sleep", "86400"]))?;
    let id = raw.new_name();
    super::blocking(|| raw.run_detached(&bundle, &id))?;
    let samples = time_blocking(runs, || raw.pause(&id).and_then(|()| raw.resume(&id)));
    super::blocking(|| raw.delete(&id).and_then(|()| bundle.remove()))?;
    samples
}

/// Stop and start again with the upper dir kept: kill + delete, remount, `runc run -d`.
pub(super) fn raw_stop_start(raw: &RawRunc, runs: usize) -> anyhow::Result<Vec<Duration>> {
    let bundle = super::blocking(|| raw.bundle(&["sleep", "86400"]))?;
    let mut id = raw.new_name();
    super::blocking(|| raw.run_detached(&bundle, &id))?;
    let samples = time_blocking(runs, || {
        raw.kill(&id)?;
        raw.delete(&id)?;
        bundle.unmount()?;
        bundle.mount()?;
        id = raw.new_name();
        raw.run_detached(&bundle, &id)
    });
    super::blocking(|| raw.delete(&id).and_then(|()| bundle.remove()))?;
    samples
}
