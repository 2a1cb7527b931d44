//! `cove-bench --runtime gvisor`: the gvisor runtime measured beside raw `runsc` doing the same
//! with the same `tiny` rootfs, in one run, on the platform Cove picks (`systrap` where this
//! runsc has it, else `ptrace`; every row names it):
//!
//! | metric | Cove (server with `--runtime gvisor`) | baseline |
//! |---|---|---|
//! | create | create → running | `runsc run --detach` of a `sleep` bundle |
//! | exec | command `true` + attach until exit | `runsc exec <id> true` |
//! | suspend | the operation | `runsc checkpoint` (memory to an image) + `runsc delete` |
//! | wake | the operation | `runsc restore --detach` of that image |
//! | fork | fork of 1, request → running | `runsc restore` of a checkpoint into a new container |
//! | system calls | [`SYSCALL_LOOP`] in a sandbox | the same command on a runc server; raw `runsc exec` |
//!
//! The system-call row starts a second server (runc) once the gvisor one is stopped, so at
//! most one server runs at a time. After each Cove series a command runs in the sandbox, so a
//! broken sandbox fails the run.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cove_api_types::ForkRequest;
use cove_client::Client;

use crate::args::{Args, MIB};
use crate::host;
use crate::measure::{blocking, dist_ms, progress, run_command, TEMPLATE};
use crate::raw::RawRunc;
use crate::report::{Machine, Metric, Report, Unit};
use crate::server::{create_sandbox, delete_sandbox, wait_succeeded, CoveServer, ServerSettings};

/// Iterations of the system-call loop.
pub const SYSCALL_ITERATIONS: u32 = 5000;

/// A busybox `sh` loop whose every iteration opens and closes `/etc/hostname` (`: <file`: an
/// `open`, the shell's `fcntl`/`dup2` of the redirection and a `close`).
pub const SYSCALL_LOOP: &str = "i=0; while [ $i -lt 5000 ]; do : </etc/hostname; i=$((i+1)); done";

/// Runs the gvisor measurements; everything started is cleaned up, also on error.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    let began = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let runs = args.scale().gvisor_runs;
    let runsc = Path::new("runsc");
    let version = host::version_line("runsc")?;
    let platform = cove_runtime::runc::gvisor_default_platform(runsc);
    let machine = Machine {
        cores: host::cores(),
        mem_total_gib: host::mem_total()? as f64 / (1024.0 * MIB as f64),
        kernel: host::kernel_release(),
        runc: host::version_line(&args.runc.display().to_string()).unwrap_or_default(),
        qemu: None,
    };
    progress(&format!(
        "{} cores, {:.1} GiB, Linux {}, {version}, platform {platform}",
        machine.cores, machine.mem_total_gib, machine.kernel
    ));

    let settings = ServerSettings {
        guest_agent: args.guest_agent_path(),
        cache_dir: args.cache_dir.clone(),
        runc: args.runc.clone(),
        verbose: args.verbose,
        network: cove_server::NetworkMode::Off,
        runtime: cove_server::RuntimeChoice::Gvisor,
        user_namespaces: false,
    };
    let server = CoveServer::start(settings.clone()).await?;
    let cove = match server.client() {
        Ok(client) => match server.ensure_release(&client, TEMPLATE).await {
            Ok(()) => measure_cove(&client, runs).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    server.stop().await.context("clean up the gvisor server")?;
    let cove = cove?;

    let raw = RawRunc::runsc(runsc, &platform, &args.cache_dir).await?;
    let raw_samples = measure_raw(&raw, runs);
    drop(raw);
    let raw = raw_samples?;

    let runc_server = CoveServer::start(ServerSettings {
        runtime: cove_server::RuntimeChoice::Runc,
        ..settings
    })
    .await?;
    let on_runc = match runc_server.client() {
        Ok(client) => match runc_server.ensure_release(&client, TEMPLATE).await {
            Ok(()) => syscall_series(&client, "runc", runs).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    runc_server
        .stop()
        .await
        .context("clean up the runc server")?;
    let on_runc = on_runc?;

    let ms = dist_ms;
    let p = &platform;
    let wake_note = if cove.memory_restored {
        "memory restored"
    } else {
        "files only: the sandbox restarts (memory_restored false)"
    };
    let metrics = vec![
        Metric::new(
            "gvisor_create",
            format!("gvisor ({p}): create → running"),
            Unit::Ms,
            ms(&cove.create)?,
        )
        .baseline("runsc run --detach", ms(&raw.run)?),
        Metric::new(
            "gvisor_exec",
            format!("gvisor ({p}): exec `true` round trip"),
            Unit::Ms,
            ms(&cove.exec)?,
        )
        .baseline("runsc exec true", ms(&raw.exec)?),
        Metric::new(
            "gvisor_suspend",
            format!("gvisor ({p}): suspend"),
            Unit::Ms,
            ms(&cove.suspend)?,
        )
        .baseline("runsc checkpoint + delete", ms(&raw.checkpoint)?)
        .baseline("runsc checkpoint alone", ms(&raw.checkpoint_only)?),
        Metric::new(
            "gvisor_wake",
            format!("gvisor ({p}): wake"),
            Unit::Ms,
            ms(&cove.wake)?,
        )
        .baseline("runsc restore --detach", ms(&raw.restore)?)
        .note(wake_note),
        Metric::new(
            "gvisor_fork",
            format!("gvisor ({p}): fork of 1, request → running"),
            Unit::Ms,
            ms(&cove.fork)?,
        )
        .baseline("runsc restore into a new container", ms(&raw.fork)?),
        Metric::new(
            "gvisor_syscalls",
            format!("gvisor ({p}): {SYSCALL_ITERATIONS} open+close in sh"),
            Unit::Ms,
            ms(&cove.syscalls)?,
        )
        .baseline("the same on a runc server", ms(&on_runc)?)
        .baseline("raw runsc exec of the loop", ms(&raw.syscalls)?)
        .note("command round trip of a busybox sh loop `: </etc/hostname`"),
    ];
    Ok(Report::finish(
        args.quick,
        machine,
        started_at,
        began,
        metrics,
        Vec::new(),
    ))
}

/// Cove's samples on gVisor.
struct CoveSamples {
    create: Vec<Duration>,
    exec: Vec<Duration>,
    suspend: Vec<Duration>,
    wake: Vec<Duration>,
    fork: Vec<Duration>,
    syscalls: Vec<Duration>,
    /// Whether the wakes said they restored memory.
    memory_restored: bool,
}

async fn measure_cove(client: &Client, runs: usize) -> anyhow::Result<CoveSamples> {
    progress(&format!("gvisor: {runs} × create"));
    let warm = create_sandbox(client, TEMPLATE).await?;
    delete_sandbox(client, &warm).await?;
    let mut create = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        let id = create_sandbox(client, TEMPLATE).await?;
        create.push(t0.elapsed());
        delete_sandbox(client, &id).await?;
    }
    let id = create_sandbox(client, TEMPLATE).await?;
    let result = series(client, &id, runs).await;
    delete_sandbox(client, &id).await?;
    let (exec, suspend, wake, fork, memory_restored) = result?;
    let syscalls = syscall_series(client, "gvisor", runs).await?;
    Ok(CoveSamples {
        create,
        exec,
        suspend,
        wake,
        fork,
        syscalls,
        memory_restored,
    })
}

type Series = (
    Vec<Duration>,
    Vec<Duration>,
    Vec<Duration>,
    Vec<Duration>,
    bool,
);

/// exec, suspend, wake and fork samples of sandbox `id`, and whether the wakes restored memory.
async fn series(client: &Client, id: &str, runs: usize) -> anyhow::Result<Series> {
    let exec_runs = runs * 4;
    progress(&format!("gvisor: {exec_runs} × exec `true`"));
    run_command(client, id, &["true"]).await?;
    let mut exec = Vec::new();
    for _ in 0..exec_runs {
        let t0 = Instant::now();
        run_command(client, id, &["true"]).await?;
        exec.push(t0.elapsed());
    }
    progress(&format!("gvisor: {runs} × suspend, wake"));
    let (mut suspend, mut wake) = (Vec::new(), Vec::new());
    let mut memory_restored = true;
    for _ in 0..runs {
        let t0 = Instant::now();
        let op = client.suspend_sandbox(id).await.context("suspend")?;
        wait_succeeded(client, &op.id, "suspend").await?;
        suspend.push(t0.elapsed());
        let t0 = Instant::now();
        let op = client.wake_sandbox(id).await.context("wake")?;
        wait_succeeded(client, &op.id, "wake").await?;
        wake.push(t0.elapsed());
        let sb = client.get_sandbox(id).await.context("get the sandbox")?;
        memory_restored &= sb.memory_restored == Some(true);
    }
    run_command(client, id, &["true"]).await?;
    progress(&format!("gvisor: {runs} × fork of 1"));
    let mut fork = Vec::new();
    let mut checkpoints = Vec::new();
    for i in 0..=runs {
        let t0 = Instant::now();
        let r = client
            .fork_sandbox(
                id,
                &ForkRequest {
                    count: 1,
                    metadata: Default::default(),
                },
            )
            .await
            .context("fork")?;
        for f in &r.sandboxes {
            wait_succeeded(client, &f.operation.id, "fork").await?;
        }
        if i > 0 {
            fork.push(t0.elapsed());
        }
        checkpoints.push(r.checkpoint.id.clone());
        for f in &r.sandboxes {
            run_command(client, &f.sandbox.id, &["true"]).await?;
            delete_sandbox(client, &f.sandbox.id).await?;
        }
    }
    for c in checkpoints {
        client
            .delete_checkpoint(&c)
            .await
            .context("delete a fork's checkpoint")?;
    }
    run_command(client, id, &["true"]).await?;
    Ok((exec, suspend, wake, fork, memory_restored))
}

/// `runs` timed runs of [`SYSCALL_LOOP`] in a new sandbox of the server `client` speaks to
/// (`what` names its runtime in the progress line), after one warm-up.
async fn syscall_series(client: &Client, what: &str, runs: usize) -> anyhow::Result<Vec<Duration>> {
    progress(&format!(
        "{what}: {runs} × {SYSCALL_ITERATIONS} open+close in a sandbox"
    ));
    let id = create_sandbox(client, TEMPLATE).await?;
    let result = async {
        let argv = ["sh", "-c", SYSCALL_LOOP];
        run_command(client, &id, &argv).await?;
        let mut samples = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t0 = Instant::now();
            run_command(client, &id, &argv).await?;
            samples.push(t0.elapsed());
        }
        Ok::<_, anyhow::Error>(samples)
    }
    .await;
    delete_sandbox(client, &id).await?;
    result
}

/// The raw baseline's samples.
struct RawSamples {
    run: Vec<Duration>,
    exec: Vec<Duration>,
    checkpoint: Vec<Duration>,
    /// `runsc checkpoint` alone (the container ends `stopped`).
    checkpoint_only: Vec<Duration>,
    restore: Vec<Duration>,
    fork: Vec<Duration>,
    syscalls: Vec<Duration>,
}

/// The raw `runsc` series, each after one untimed warm-up; blocking (runsc itself is timed).
fn measure_raw(raw: &RawRunc, runs: usize) -> anyhow::Result<RawSamples> {
    blocking(|| {
        progress(&format!("raw runsc: {runs} × run --detach"));
        let mut run = Vec::new();
        for i in 0..=runs {
            let bundle = raw.bundle(&["sleep", "1d"])?;
            let id = raw.new_name();
            let t0 = Instant::now();
            raw.run_detached(&bundle, &id)?;
            if i > 0 {
                run.push(t0.elapsed());
            }
            raw.delete(&id)?;
            bundle.remove()?;
        }

        progress(&format!(
            "raw runsc: {} × exec, {runs} × checkpoint, restore, fork",
            runs * 4
        ));
        let bundle = raw.bundle(&["sleep", "1d"])?;
        let id = raw.new_name();
        raw.run_detached(&bundle, &id)?;
        let mut exec = Vec::new();
        for i in 0..=runs * 4 {
            let t0 = Instant::now();
            raw.exec(&id, &["true"])?;
            if i > 0 {
                exec.push(t0.elapsed());
            }
        }
        let mut syscalls = Vec::new();
        for i in 0..=runs {
            let t0 = Instant::now();
            raw.exec(&id, &["sh", "-c", SYSCALL_LOOP])?;
            if i > 0 {
                syscalls.push(t0.elapsed());
            }
        }
        let images = tempfile::Builder::new()
            .prefix("cove-bench-runsc-img-")
            .tempdir()
            .context("a directory for checkpoint images")?;
        let (mut checkpoint, mut checkpoint_only, mut restore) =
            (Vec::new(), Vec::new(), Vec::new());
        for i in 0..=runs {
            let image = images.path().join(format!("life-{i}"));
            std::fs::create_dir(&image).context("create an image dir")?;
            let t0 = Instant::now();
            raw.checkpoint(&id, &image)?;
            let saved_only = t0.elapsed();
            raw.delete(&id)?;
            let saved = t0.elapsed();
            let t0 = Instant::now();
            raw.restore(&bundle, &id, &image)?;
            let restored = t0.elapsed();
            if i > 0 {
                checkpoint.push(saved);
                checkpoint_only.push(saved_only);
                restore.push(restored);
            }
            raw.exec(&id, &["true"])?;
            std::fs::remove_dir_all(&image).context("remove an image")?;
        }
        let image = images.path().join("fork");
        std::fs::create_dir(&image).context("create an image dir")?;
        raw.checkpoint(&id, &image)?;
        raw.delete(&id)?;
        bundle.remove()?;
        let mut fork = Vec::new();
        for i in 0..=runs {
            let bundle = raw.bundle(&["sleep", "1d"])?;
            let id = raw.new_name();
            let t0 = Instant::now();
            raw.restore(&bundle, &id, &image)?;
            if i > 0 {
                fork.push(t0.elapsed());
            }
            raw.exec(&id, &["true"])?;
            raw.delete(&id)?;
            bundle.remove()?;
        }
        if run.is_empty() || exec.is_empty() {
            bail!("no raw runsc samples");
        }
        Ok(RawSamples {
            run,
            exec,
            checkpoint,
            checkpoint_only,
            restore,
            fork,
            syscalls,
        })
    })
}
