//! `GET /sandboxes/{id}/metrics?start=&end=` (E2B's `SandboxMetric` list) from Cove's
//! per-sandbox usage (`GET /v1/sandboxes/{id}/metrics`): the kept history (one sample every
//! few seconds, the last 10 minutes) and the current reading, oldest first, within
//! `[start, end]` (Unix seconds, both optional).
//!
//! Field mapping: `cpuUsedPct` = CPUs busy since the previous sample ÷ `cpuCount` × 100
//! (0 for the first sample); `memUsed` = the memory charged to the sandbox (page cache
//! included, bytes), `memCache` = 0 (not split out), `memTotal` = its limit; `diskUsed` = its
//! writable layer or own disk, `diskTotal` = its disk's size (0 without one of its own). A
//! sandbox that is not running (suspended) has no samples: an empty list, as E2B answers.
//!
//! `GET /sandboxes/metrics?sandbox_ids=a,b` (several sandboxes at once): the current reading
//! of each running sandbox named, as `{"sandboxes": {id: SandboxMetric}}`; ids that are
//! unknown, gone or paused are left out. At most [`MAX_MANY`] ids.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use cove_api_types::{MetricsSample, Sandbox};
use cove_control_plane::ServiceError;
use serde::Deserialize;

use super::{e2b_sandbox, rfc3339};
use crate::error::RestError;
use crate::model::metrics::{SandboxMetric, SandboxesMetrics};
use crate::E2b;

/// Most sandboxes one `GET /sandboxes/metrics` names.
pub const MAX_MANY: usize = 100;

/// One MiB in bytes.
const MIB: u64 = 1024 * 1024;

/// `?start=&end=`, Unix seconds.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Window {
    start: Option<i64>,
    end: Option<i64>,
}

/// The handler.
pub(crate) async fn sandbox_metrics(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    Query(window): Query<Window>,
) -> Result<Json<Vec<SandboxMetric>>, RestError> {
    let s = e2b_sandbox(&e2b, &id).await?;
    let m = match e2b.cp.sandbox_metrics(&s.id).await {
        Ok(m) => m,
        Err(ServiceError::SandboxNotRunning { .. }) => return Ok(Json(Vec::new())),
        Err(e) => return Err(e.into()),
    };
    let samples: Vec<SandboxMetric> = m
        .history
        .iter()
        .chain(std::iter::once(&m.current))
        .filter(|x| window.start.is_none_or(|t| x.at.timestamp() >= t))
        .filter(|x| window.end.is_none_or(|t| x.at.timestamp() <= t))
        .map(|x| metric(&s, x))
        .collect();
    Ok(Json(samples))
}

/// `?sandbox_ids=a,b`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ManyQuery {
    sandbox_ids: Option<String>,
}

/// `GET /sandboxes/metrics`.
pub(crate) async fn many(
    State(e2b): State<E2b>,
    Query(q): Query<ManyQuery>,
) -> Result<Json<SandboxesMetrics>, RestError> {
    let ids: Vec<&str> = q
        .sandbox_ids
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if ids.len() > MAX_MANY {
        return Err(RestError::new(
            StatusCode::BAD_REQUEST,
            format!("at most {MAX_MANY} sandbox ids per call"),
        ));
    }
    let mut out = BTreeMap::new();
    for id in ids {
        let Ok(s) = e2b_sandbox(&e2b, id).await else {
            continue;
        };
        // A paused sandbox has no current reading (a frozen one still holds memory on its node).
        if super::e2b_state(s.state) != Some("running") {
            continue;
        }
        match e2b.cp.sandbox_metrics(&s.id).await {
            Ok(m) => {
                out.insert(id.to_string(), metric(&s, &m.current));
            }
            Err(ServiceError::SandboxNotRunning { .. } | ServiceError::SandboxNotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Json(SandboxesMetrics { sandboxes: out }))
}

/// One `SandboxMetric`.
fn metric(s: &Sandbox, x: &MetricsSample) -> SandboxMetric {
    let cpus = s.resources.vcpus.max(1);
    let pct = x.cpu.rate.map_or(0.0, |r| r / f64::from(cpus) * 100.0);
    let mem_total = x.memory.limit_bytes.unwrap_or(s.resources.memory_mib * MIB);
    let disk_total = x
        .disk
        .limit_bytes
        .or(s.resources.disk_mib.map(|d| d * MIB))
        .unwrap_or(0);
    SandboxMetric {
        timestamp: rfc3339(x.at),
        timestamp_unix: x.at.timestamp(),
        cpu_count: cpus,
        cpu_used_pct: (pct * 100.0).round() / 100.0,
        mem_used: x.memory.bytes,
        mem_total,
        mem_cache: 0,
        disk_used: x.disk.used_bytes.unwrap_or(0),
        disk_total,
    }
}
