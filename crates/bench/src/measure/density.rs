//! Density: how many idle sandboxes (running, no command) one node holds, and the memory each
//! costs the node. Creates sandboxes (4 at a time) until `scale.density_max`, until
//! `MemAvailable` falls under `scale.density_min_available`, or until a create fails.
//!
//! Memory per sandbox, two ways:
//! - RSS of everything Cove adds: the processes in each sandbox's memory cgroup (the guest
//!   agent; found from the init pids `runc list` reports) plus the growth of this process's RSS
//!   (the in-process server: control plane, node agent, guest connections), over the count;
//! - the drop of `MemAvailable` (kernel memory, page cache and all) per sandbox: the
//!   least-squares slope of `MemAvailable` read after every batch against the count, which
//!   rides out a one-off swing of another process better than first-minus-last (also reported).
//!
//! Baseline: raw runc containers running busybox `sleep`, each on its own overlay, measured the
//! same two ways (at most `scale.density_baseline_max` of them: the cost is linear).

use std::time::Duration;

use anyhow::bail;
use futures::StreamExt;

use super::{progress, Ctx, TEMPLATE};
use crate::args::MIB;
use crate::host::{self, ProcessMemory};
use crate::raw::{container_init_pids, Bundle, RawRunc};
use crate::report::{Metric, Stats, Unit};
use crate::server::{create_sandbox, delete_many};
use crate::stats::slope;

/// Sandboxes created at once.
const CREATE_PARALLEL: usize = 4;
/// Pause between the last create and the memory reading, so start-up work has settled.
const SETTLE: Duration = Duration::from_secs(2);

/// Memory readings of one density run.
struct Footprint {
    /// How many were running.
    count: usize,
    /// Sum over their processes.
    processes: ProcessMemory,
    /// Growth of this process's RSS, bytes (0 for the baseline).
    server_growth: u64,
    /// `(count, MemAvailable bytes)` read as they were started, from `(0, before)` to
    /// `(count, after settling)`.
    available: Vec<(f64, f64)>,
}

impl Footprint {
    fn per_unit_mib(&self, bytes: u64) -> f64 {
        bytes as f64 / MIB as f64 / self.count.max(1) as f64
    }

    /// `MemAvailable` drop per unit, MiB: the negated least-squares slope.
    fn available_drop_mib(&self) -> f64 {
        slope(&self.available).map_or(0.0, |s| -s / MIB as f64)
    }

    /// First-minus-last `MemAvailable` over the count, MiB.
    fn available_delta_mib(&self) -> f64 {
        match (self.available.first(), self.available.last()) {
            (Some(first), Some(last)) => (first.1 - last.1) / MIB as f64 / self.count.max(1) as f64,
            _ => 0.0,
        }
    }
}

/// Measures Cove's density and memory per idle sandbox, and the raw baseline's.
pub async fn measure(ctx: &Ctx<'_>) -> anyhow::Result<Vec<Metric>> {
    let max = ctx.scale.density_max;
    progress(&format!("density: up to {max} idle sandboxes"));
    let rss_before = host::self_rss()?;
    let mut available = vec![(0.0, host::mem_available()? as f64)];

    let mut ids: Vec<String> = Vec::new();
    let mut stop_reason = format!("reached the limit of {max}");
    'create: while ids.len() < max {
        let now = host::mem_available()?;
        if !ids.is_empty() {
            available.push((ids.len() as f64, now as f64));
        }
        if now < ctx.scale.density_min_available {
            stop_reason = format!(
                "MemAvailable under {} MiB",
                ctx.scale.density_min_available / MIB
            );
            break;
        }
        let batch = CREATE_PARALLEL.min(max - ids.len());
        let created: Vec<anyhow::Result<String>> = futures::stream::iter(0..batch)
            .map(|_| create_sandbox(&ctx.client, TEMPLATE))
            .buffer_unordered(batch)
            .collect()
            .await;
        let mut failed = None;
        for c in created {
            match c {
                Ok(id) => ids.push(id),
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            stop_reason = format!("a create failed: {e:#}");
            break 'create;
        }
    }
    tokio::time::sleep(SETTLE).await;
    let cove = read_footprint(ctx, ids.len(), available, rss_before);
    progress(&format!("density: deleting {} sandboxes", ids.len()));
    let deleted = delete_many(&ctx.client, &ids, CREATE_PARALLEL).await;
    let cove = cove?;
    deleted?;
    if cove.count == 0 {
        bail!("density: no sandbox could be created ({stop_reason})");
    }

    let raw_count = cove.count.min(ctx.scale.density_baseline_max);
    progress(&format!(
        "density baseline: {raw_count} raw `sleep` containers"
    ));
    let raw = super::blocking(|| raw_footprint(ctx.raw, raw_count))?;

    let server_mib = cove.per_unit_mib(cove.server_growth);
    let agents_mib = cove.per_unit_mib(cove.processes.rss);
    let cove_rss = agents_mib + server_mib;
    let raw_rss = raw.per_unit_mib(raw.processes.rss);
    let cove_pss = cove.per_unit_mib(cove.processes.pss) + server_mib;
    let raw_pss = raw.per_unit_mib(raw.processes.pss);
    Ok(vec![
        Metric::new(
            "density_sandboxes",
            "idle sandboxes held",
            Unit::Count,
            Stats::single(cove.count as f64),
        )
        .note(format!("stopped: {stop_reason}"))
        .extra("stop_reason", stop_reason.clone()),
        Metric::new(
            "density_rss_per_sandbox",
            "RSS Cove adds per idle sandbox",
            Unit::Mib,
            Stats::single(cove_rss),
        )
        .baseline("RSS per raw runc `sleep` container", Stats::single(raw_rss))
        .note(format!(
            "guest agent {agents_mib:.2} + server {server_mib:.2}; PSS {cove_pss:.2} vs {raw_pss:.2}"
        ))
        .extra("guest_rss_mib", agents_mib)
        .extra("server_rss_growth_mib", server_mib)
        .extra("pss_mib", cove_pss)
        .extra("baseline_pss_mib", raw_pss)
        .extra("baseline_containers", raw.count),
        Metric::new(
            "density_mem_available_per_sandbox",
            "MemAvailable drop per idle sandbox",
            Unit::Mib,
            Stats::single(cove.available_drop_mib()),
        )
        .baseline(
            "MemAvailable drop per raw `sleep` container",
            Stats::single(raw.available_drop_mib()),
        )
        .note(format!(
            "first-minus-last {:.2} vs {:.2}",
            cove.available_delta_mib(),
            raw.available_delta_mib()
        ))
        .extra("first_minus_last_mib", cove.available_delta_mib())
        .extra("baseline_first_minus_last_mib", raw.available_delta_mib()),
    ])
}

/// Reads the memory of Cove's running sandboxes.
fn read_footprint(
    ctx: &Ctx<'_>,
    count: usize,
    mut available: Vec<(f64, f64)>,
    rss_before: u64,
) -> anyhow::Result<Footprint> {
    available.push((count as f64, host::mem_available()? as f64));
    let rss_after = host::self_rss()?;
    let inits = container_init_pids(ctx.server.runc(), &ctx.server.runc_root())?;
    Ok(Footprint {
        count,
        processes: cgroup_memory(&inits),
        server_growth: rss_after.saturating_sub(rss_before),
        available,
    })
}

/// Starts `count` raw `sleep` containers, reads their memory, removes them.
fn raw_footprint(raw: &RawRunc, count: usize) -> anyhow::Result<Footprint> {
    let mut available = vec![(0.0, host::mem_available()? as f64)];
    let mut running: Vec<(String, Bundle)> = Vec::with_capacity(count);
    let mut started = Ok(());
    for _ in 0..count {
        let bundle = match raw.bundle(&["sleep", "86400"]) {
            Ok(b) => b,
            Err(e) => {
                started = Err(e);
                break;
            }
        };
        let id = raw.new_name();
        if let Err(e) = raw.run_detached(&bundle, &id) {
            let _ = bundle.remove();
            started = Err(e);
            break;
        }
        running.push((id, bundle));
        match host::mem_available() {
            Ok(now) => available.push((running.len() as f64, now as f64)),
            Err(e) => {
                started = Err(e);
                break;
            }
        }
    }
    let footprint = started.and_then(|()| {
        std::thread::sleep(SETTLE);
        available.push((running.len() as f64, host::mem_available()? as f64));
        Ok(Footprint {
            count: running.len(),
            processes: cgroup_memory(&raw.init_pids()?),
            server_growth: 0,
            available,
        })
    });
    for (id, bundle) in running {
        raw.delete(&id)?;
        bundle.remove()?;
    }
    footprint
}

/// Summed memory of every process in the memory cgroups of `inits`.
fn cgroup_memory(inits: &[u32]) -> ProcessMemory {
    let mut total = ProcessMemory::default();
    for &init in inits {
        for pid in host::cgroup_pids(init) {
            if let Some(mem) = host::process_memory(pid) {
                total += mem;
            }
        }
    }
    total
}
