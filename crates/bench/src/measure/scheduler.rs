//! One placement decision of the control plane's scheduler
//! (`cove_cluster::scheduler::place`) over 1,000 simulated nodes: mixed
//! runtimes, states, release caches, loads and sizes, deterministic from a fixed seed.

use std::time::{Duration, Instant};

use cove_cluster::scheduler::{place, Candidate, Demand};
use cove_domain::NodeState;

use crate::measure::{dist_ms, progress};
use crate::report::{Metric, Unit};

/// Simulated nodes per decision.
pub const NODES: usize = 1000;

/// Times `runs` decisions (after 100 untimed ones).
pub fn measure(runs: usize) -> anyhow::Result<Metric> {
    progress(&format!(
        "scheduler: placement over {NODES} simulated nodes"
    ));
    let names: Vec<String> = (0..NODES).map(|i| format!("node-{i:04}")).collect();
    // A small linear congruential generator: reproducible without a dependency.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |m: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % m
    };
    let nodes: Vec<Candidate<'_>> = names
        .iter()
        .map(|name| Candidate {
            name,
            state: match next(20) {
                0 => NodeState::Draining,
                1 => NodeState::Lost,
                _ => NodeState::Ready,
            },
            runtime: if next(10) == 0 { "qemu" } else { "runc" },
            cpus: 8 << next(3),
            memory_bytes: (16u64 << next(3)) << 30,
            placed_vcpus: next(32) as u32,
            placed_memory_mib: next(16 * 1024),
            sandboxes: next(64) as u32,
            has_release: next(3) != 0,
        })
        .collect();
    let demand = |i: usize| Demand {
        runtime: "runc",
        vcpus: 1 + (i % 4) as u32,
        memory_mib: 256 << (i % 4),
        require_release: i % 2 == 0,
    };
    let mut placed = 0usize;
    for i in 0..100 {
        placed += usize::from(place(&nodes, &demand(i)).is_ok());
    }
    let mut samples: Vec<Duration> = Vec::with_capacity(runs);
    for i in 0..runs {
        let t0 = Instant::now();
        let chosen = place(&nodes, &demand(i));
        samples.push(t0.elapsed());
        placed += usize::from(chosen.is_ok());
    }
    // Baseline: the least any decision does, one pass over the nodes for the fewest sandboxes.
    let mut scan: Vec<Duration> = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        let fewest = std::hint::black_box(&nodes)
            .iter()
            .enumerate()
            .min_by_key(|(_, n)| n.sandboxes)
            .map(|(i, _)| i);
        std::hint::black_box(fewest);
        scan.push(t0.elapsed());
    }
    let stats = dist_ms(&samples)?;
    Ok(Metric::new(
        "scheduler_decision",
        format!("scheduler decision, {NODES} simulated nodes"),
        Unit::Ms,
        stats,
    )
    .baseline("one pass for the fewest sandboxes", dist_ms(&scan)?)
    .extra("nodes", NODES as u64)
    .extra("placed", placed as u64)
    .note(format!("{placed} of {} decisions found a node", runs + 100)))
}
