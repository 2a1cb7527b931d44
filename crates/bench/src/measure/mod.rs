//! The measurements, one file each, every one beside its baseline from the same run:
//!
//! | file | Cove | baseline |
//! |---|---|---|
//! | `cold_start.rs` | create → first command `true` finished | `runc run /bin/true` |
//! | `exec.rs` | command `true` + attach until exit | `runc exec`, host fork/exec |
//! | `stream.rs` | `head -c N /dev/zero` read through the data plane, SSE and binary | the sandbox's busybox `head \| cat` on the host |
//! | `files.rs` | upload and download of a file | `dd` in the agent's block sizes (+ `fsync`), `cp` |
//! | `lifecycle.rs` | pause+resume, suspend+wake | `runc pause`+`resume`; kill+delete, `runc run` |
//! | `checkpoints.rs` | checkpoint pause, checkpoint, rollback, fork of 3 | `runc pause`+`resume`; kill+delete, `runc run` |
//! | `density.rs` | idle sandboxes a node holds, memory per sandbox | raw `sleep` containers |
//! | `concurrency.rs` | clients creating and deleting sandboxes at once | raw `runc run -d` + `delete` |
//! | `tiers.rs` | 1, 10, 20, 50 creates at once: cold, warm-pool claims, two replicas | raw `runc run -d` at once; one SQLite server |
//! | `pools.rs` | create served by a warm pool → running; a burst of creates on a full pool | cold create → running |
//! | `userns.rs` | create → first command with user namespaces | the same on a server with them off |
//! | `store.rs` | the store calls of one create on PostgreSQL | the same calls on SQLite |
//!
//! Every Cove sandbox is of the `tiny` template: none of these needs more than busybox.
//! Each timed series starts with one untimed warm-up run.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cove_api_types::CreateCommandRequest;
use cove_client::{AttachEvent, Client};
use futures::StreamExt;

use crate::args::Scale;
use crate::raw::RawRunc;
use crate::report::Stats;
use crate::server::CoveServer;
use crate::stats::Summary;

pub mod checkpoints;
pub mod cold_start;
pub mod concurrency;
pub mod density;
pub mod exec;
pub mod files;
pub mod lifecycle;
pub mod network;
pub mod pools;
pub mod replicas;
pub mod scheduler;
pub mod store;
pub mod stream;
pub mod tiers;
pub mod userns;

/// The template of every sandbox the bench creates.
pub const TEMPLATE: &str = "tiny";

/// What every measurement works with.
pub struct Ctx<'a> {
    /// The server under test.
    pub server: &'a CoveServer,
    /// A client of it.
    pub client: Client,
    /// The raw runtime of the baselines.
    pub raw: &'a RawRunc,
    /// How much to do.
    pub scale: Scale,
}

/// Says on stderr what is being measured.
pub fn progress(what: &str) {
    eprintln!("cove-bench: {what}");
}

/// Runs blocking work (raw runc, host processes) on this worker thread without stalling the
/// runtime's other tasks.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Times `runs` calls of `f` after one untimed warm-up call.
pub fn time_blocking(
    runs: usize,
    mut f: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Duration>> {
    blocking(|| {
        f()?;
        let mut samples = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t0 = Instant::now();
            f()?;
            samples.push(t0.elapsed());
        }
        Ok(samples)
    })
}

/// The p50/p90/p99 of durations, in ms.
pub fn dist_ms(samples: &[Duration]) -> anyhow::Result<Stats> {
    Summary::of_ms(samples)
        .map(Stats::Distribution)
        .context("no samples to summarise")
}

/// Runs `argv` in `sandbox` through the API and the data plane until it exits; returns the
/// number of output bytes read. A non-zero exit is an error.
pub async fn run_command(client: &Client, sandbox: &str, argv: &[&str]) -> anyhow::Result<u64> {
    run_command_timed(client, sandbox, argv)
        .await
        .map(|(bytes, _)| bytes)
}

/// [`run_command`], also returning how long the create-command request took (the rest of the
/// round trip is the data plane's).
pub async fn run_command_timed(
    client: &Client,
    sandbox: &str,
    argv: &[&str],
) -> anyhow::Result<(u64, Duration)> {
    let t0 = Instant::now();
    let req = CreateCommandRequest {
        argv: Some(argv.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    };
    let resp = client
        .create_command(sandbox, &req)
        .await
        .with_context(|| format!("start {argv:?} in {sandbox}"))?;
    let accepted = t0.elapsed();
    let mut events = std::pin::pin!(client.attach(&resp.attachment, 0));
    let mut bytes = 0u64;
    while let Some(event) = events.next().await {
        match event.with_context(|| format!("read the output of {argv:?}"))? {
            AttachEvent::Stdout { data, .. } | AttachEvent::Stderr { data, .. } => {
                bytes += data.len() as u64;
            }
            AttachEvent::Gap { len, .. } => bytes += len,
            AttachEvent::Exit(cmd) => {
                if cmd.exit_code != Some(0) {
                    bail!(
                        "{argv:?} in {sandbox} ended with exit code {:?}, signal {:?}",
                        cmd.exit_code,
                        cmd.signal
                    );
                }
                return Ok((bytes, accepted));
            }
        }
    }
    bail!("the output of {argv:?} ended without an exit event")
}

/// MiB per second of `bytes` moved in `took`.
pub fn mib_per_s(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / crate::args::MIB as f64 / took.as_secs_f64().max(1e-9)
}

/// The median (nearest rank) of `samples`; zero when empty.
pub fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted
        .get(sorted.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or_default()
}
