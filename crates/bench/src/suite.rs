//! One whole run: start the server and the raw runtime, measure everything in order, clean up,
//! and return the report.

use std::time::Instant;

use anyhow::Context;

use crate::args::{Args, MIB};
use crate::host;
use crate::measure::{self, Ctx, TEMPLATE};
use crate::raw::RawRunc;
use crate::report::{Machine, Report};
use crate::server::{CoveServer, ServerSettings};

/// Runs every measurement; everything it started is cleaned up, also on error.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    let began = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let scale = args.scale();
    let machine = machine(args)?;
    measure::progress(&format!(
        "{} cores, {:.1} GiB, Linux {}, {}",
        machine.cores, machine.mem_total_gib, machine.kernel, machine.runc
    ));

    let settings = ServerSettings {
        guest_agent: args.guest_agent_path(),
        cache_dir: args.cache_dir.clone(),
        runc: args.runc.clone(),
        verbose: args.verbose,
        network: cove_server::NetworkMode::Auto,
        runtime: cove_server::RuntimeChoice::Runc,
        user_namespaces: true,
    };
    let server = CoveServer::start(settings.clone()).await?;
    let client = server.client()?;
    server.ensure_release(&client, TEMPLATE).await?;
    let raw = RawRunc::new(&args.runc, &args.cache_dir).await?;

    let ctx = Ctx {
        server: &server,
        client,
        raw: &raw,
        scale,
    };
    let mut metrics = Vec::new();
    let mut unavailable = Vec::new();
    if args.wants("cold_start") {
        metrics.push(measure::cold_start::measure(&ctx).await?);
    }
    if args.wants("exec") {
        metrics.push(measure::exec::measure(&ctx).await?);
    }
    if args.wants("stream") {
        metrics.extend(measure::stream::measure(&ctx).await?);
    }
    if args.wants("files") {
        metrics.extend(measure::files::measure(&ctx).await?);
    }
    if args.wants("lifecycle") {
        let lifecycle = measure::lifecycle::measure(&ctx).await?;
        metrics.extend(lifecycle.metrics);
        unavailable.extend(lifecycle.unavailable);
    }
    if args.wants("checkpoints") {
        let checkpoints = measure::checkpoints::measure(&ctx).await?;
        metrics.extend(checkpoints.metrics);
        unavailable.extend(checkpoints.unavailable);
    }
    if args.wants("pools") {
        metrics.extend(measure::pools::measure(&ctx).await?);
    }
    if args.wants("density") {
        metrics.extend(measure::density::measure(&ctx).await?);
    }
    if args.wants("concurrency") {
        metrics.extend(measure::concurrency::measure(&ctx).await?);
    }
    if args.wants("tiers") {
        let (tiers, missing) =
            measure::tiers::measure(&ctx, &settings, args.postgres_url.as_deref(), &args.tiers())
                .await?;
        metrics.extend(tiers);
        unavailable.extend(missing);
    }
    if args.wants("network") {
        let network = measure::network::measure(&ctx, &settings).await?;
        metrics.extend(network.metrics);
        unavailable.extend(network.unavailable);
    }
    if args.wants("userns") {
        match measure::userns::measure(&ctx, &settings).await? {
            Ok(metric) => metrics.push(metric),
            Err(missing) => unavailable.push(missing),
        }
    }
    if args.wants("store") {
        match measure::store::measure(args.postgres_url.as_deref(), scale.store_runs).await? {
            Ok(metric) => metrics.push(metric),
            Err(missing) => unavailable.push(missing),
        }
    }
    if args.wants("replicas") {
        match measure::replicas::measure(
            &server,
            &settings,
            args.postgres_url.as_deref(),
            scale.replica_creates,
        )
        .await?
        {
            Ok(metric) => metrics.push(metric),
            Err(missing) => unavailable.push(missing),
        }
    }
    if args.wants("scheduler") {
        metrics.push(measure::scheduler::measure(scale.scheduler_runs)?);
    }

    drop(ctx);
    drop(raw);
    server.stop().await.context("clean up the server")?;
    Ok(Report::finish(
        args.quick,
        machine,
        started_at,
        began,
        metrics,
        unavailable,
    ))
}

/// What this machine is.
fn machine(args: &Args) -> anyhow::Result<Machine> {
    let runc = host::version_line(&args.runc.display().to_string())?;
    let runc = if runc.is_empty() {
        "runc (unknown version)".to_string()
    } else {
        runc
    };
    Ok(Machine {
        cores: host::cores(),
        mem_total_gib: host::mem_total()? as f64 / (1024.0 * MIB as f64),
        kernel: host::kernel_release(),
        runc,
        qemu: None,
    })
}
