//! Checkpoints of one running sandbox, each operation waited for:
//! - `checkpoint_pause`: how long each checkpoint froze the sandbox (the server's
//!   `pause_ms`); baseline `runc pause` + `runc resume` of a raw container;
//! - `checkpoint`: a checkpoint's operation, request to `ready`;
//! - `rollback`: a rollback to that checkpoint (on runc: the container restarted over the
//!   checkpoint's files); baseline kill + delete, remount, `runc run -d` of a raw container;
//! - `fork_3`: a fork of 3, request until all three run (compare with `cold_start` of the
//!   same run).
//!
//! After each series a command runs in the sandbox, so a broken one fails the bench. A server
//! without the routes makes the metrics "not available in this build".

use std::time::{Duration, Instant};

use cove_api_types::{CreateCheckpointRequest, ForkRequest};
use cove_client::{Client, ClientError};

use super::lifecycle::{raw_pause_resume, raw_stop_start};
use super::{dist_ms, progress, run_command, Ctx, TEMPLATE};
use crate::report::{Metric, Unavailable, Unit};
use crate::server::{create_sandbox, delete_sandbox, wait_succeeded};

/// Forks of the fork metric.
const FORKS: u32 = 3;

/// Keys of the metrics of this group.
const KEYS: [(&str, &str); 4] = [
    ("checkpoint_pause", "checkpoint pause (sandbox frozen)"),
    ("checkpoint", "checkpoint, request to ready"),
    ("rollback", "rollback to a checkpoint"),
    ("fork_3", "fork of 3, request to all running"),
];

/// What the checkpoint measurements produced.
pub struct Checkpoints {
    /// Measured metrics.
    pub metrics: Vec<Metric>,
    /// Metrics this server cannot produce.
    pub unavailable: Vec<Unavailable>,
}

/// The samples of one run of the group.
struct Samples {
    pause: Vec<Duration>,
    checkpoint: Vec<Duration>,
    rollback: Vec<Duration>,
    fork: Vec<Duration>,
}

/// Measures checkpoints, rollbacks and forks of a `tiny` sandbox, `lifecycle_runs` each.
pub async fn measure(ctx: &Ctx<'_>) -> anyhow::Result<Checkpoints> {
    let runs = ctx.scale.lifecycle_runs;
    progress(&format!(
        "checkpoints: {runs} × checkpoint, rollback, fork of {FORKS}"
    ));
    let id = create_sandbox(&ctx.client, TEMPLATE).await?;
    let measured = series(&ctx.client, &id, runs).await;
    delete_sandbox(&ctx.client, &id).await?;
    let samples = match measured {
        Ok(s) => s,
        Err(Failure::NoRoute(status)) => {
            progress(&format!(
                "checkpoints: not available in this build (the server answers {status})"
            ));
            return Ok(Checkpoints {
                metrics: Vec::new(),
                unavailable: KEYS
                    .iter()
                    .map(|(key, name)| Unavailable {
                        key,
                        name: name.to_string(),
                        reason: "checkpoints: not available in this build".into(),
                    })
                    .collect(),
            });
        }
        Err(Failure::Other(e)) => return Err(e),
    };
    let raw_pause = raw_pause_resume(ctx.raw, runs)?;
    let raw_restart = raw_stop_start(ctx.raw, runs)?;
    let metrics = vec![
        Metric::new(KEYS[0].0, KEYS[0].1, Unit::Ms, dist_ms(&samples.pause)?)
            .baseline("runc pause + resume", dist_ms(&raw_pause)?),
        Metric::new(
            KEYS[1].0,
            KEYS[1].1,
            Unit::Ms,
            dist_ms(&samples.checkpoint)?,
        ),
        Metric::new(KEYS[2].0, KEYS[2].1, Unit::Ms, dist_ms(&samples.rollback)?).baseline(
            "runc kill + delete, runc run -d (upper kept)",
            dist_ms(&raw_restart)?,
        ),
        Metric::new(KEYS[3].0, KEYS[3].1, Unit::Ms, dist_ms(&samples.fork)?)
            .note("compare with cold_start of the same run"),
    ];
    Ok(Checkpoints {
        metrics,
        unavailable: Vec::new(),
    })
}

/// `runs` timed checkpoints, rollbacks and forks after a warm-up each.
async fn series(client: &Client, id: &str, runs: usize) -> Result<Samples, Failure> {
    let mut s = Samples {
        pause: Vec::new(),
        checkpoint: Vec::new(),
        rollback: Vec::new(),
        fork: Vec::new(),
    };
    let mut checkpoints = Vec::new();
    for i in 0..=runs {
        let t0 = Instant::now();
        let r = client
            .create_checkpoint(id, &CreateCheckpointRequest::default(), None)
            .await?;
        wait(client, &r.operation.id, "checkpoint").await?;
        let took = t0.elapsed();
        let c = client.get_checkpoint(&r.checkpoint.id).await?;
        if i > 0 {
            s.checkpoint.push(took);
            s.pause
                .push(Duration::from_millis(c.pause_ms.unwrap_or_default()));
        }
        checkpoints.push(c.id);
    }
    let target = checkpoints.first().cloned().unwrap_or_default();
    for i in 0..=runs {
        let t0 = Instant::now();
        let op = client.rollback_sandbox(id, &target).await?;
        wait(client, &op.id, "rollback").await?;
        if i > 0 {
            s.rollback.push(t0.elapsed());
        }
    }
    check(client, id).await?;
    for i in 0..=runs {
        let t0 = Instant::now();
        let r = client
            .fork_sandbox(
                id,
                &ForkRequest {
                    count: FORKS,
                    metadata: Default::default(),
                },
            )
            .await?;
        for fork in &r.sandboxes {
            wait(client, &fork.operation.id, "fork").await?;
        }
        if i > 0 {
            s.fork.push(t0.elapsed());
        }
        checkpoints.push(r.checkpoint.id.clone());
        for fork in &r.sandboxes {
            delete_sandbox(client, &fork.sandbox.id)
                .await
                .map_err(Failure::Other)?;
        }
    }
    check(client, id).await?;
    for c in checkpoints {
        client.delete_checkpoint(&c).await?;
    }
    Ok(s)
}

async fn wait(client: &Client, op_id: &str, what: &str) -> Result<(), Failure> {
    wait_succeeded(client, op_id, what)
        .await
        .map_err(Failure::Other)
}

async fn check(client: &Client, id: &str) -> Result<(), Failure> {
    run_command(client, id, &["true"])
        .await
        .map(drop)
        .map_err(Failure::Other)
}

/// Why the series did not finish.
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
