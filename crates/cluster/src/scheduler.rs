//! Placement: which node takes a new (or waking) sandbox. A pure function of the nodes'
//! reported capacity and what is already placed on them, so it is tested in microseconds and
//! benchmarked with thousands of simulated nodes (`cove-bench`).
//!
//! Rules, in order:
//! 1. only `ready` nodes of the asked runtime;
//! 2. release cache: a node that holds the release wins; with `require_release` (a built-in
//!    recipe's release, which nodes build and never fetch) only those qualify;
//! 3. free capacity: the sandbox's memory must fit in the node's memory minus what is placed
//!    there, and its vCPUs in [`CPU_OVERCOMMIT`] × the node's CPUs minus what is placed;
//! 4. spread: the fewest sandboxes, then the lowest memory use after placement, then the name
//!    (deterministic).
//!
//! A sandbox that mounts volumes is placed by the same rules among one node only: the one that
//! keeps its volumes (the cluster narrows the candidates). A new volume's node is chosen by
//! [`place_volume`]:
//! 1. only `ready` nodes of the asked runtime that keep volumes;
//! 2. free disk: a node that reports its free disk must have room for the whole volume (images
//!    are sparse, so volumes may over-commit a disk as they do on one server);
//! 3. the most free disk, then the fewest sandboxes, then the name.

use cove_domain::NodeState;

/// vCPUs placed per CPU of a node at most (sandboxes rarely keep every vCPU busy).
pub const CPU_OVERCOMMIT: u32 = 4;

/// A node as placement sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// Node name.
    pub name: &'a str,
    /// Its state (only `ready` qualifies).
    pub state: NodeState,
    /// Its runtime (`runc`, `qemu`).
    pub runtime: &'a str,
    /// CPUs it offers.
    pub cpus: u32,
    /// Memory it offers, bytes.
    pub memory_bytes: u64,
    /// vCPUs of the sandboxes placed on it.
    pub placed_vcpus: u32,
    /// Memory of the sandboxes placed on it, MiB.
    pub placed_memory_mib: u64,
    /// Sandboxes it holds.
    pub sandboxes: u32,
    /// Whether it holds the release's root filesystem.
    pub has_release: bool,
}

/// What the sandbox needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demand<'a> {
    /// Runtime it must run on.
    pub runtime: &'a str,
    /// vCPUs.
    pub vcpus: u32,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// Only nodes that hold the release qualify.
    pub require_release: bool,
}

/// Why no node qualified (the first rule that left none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoPlacement {
    /// No node is `ready`.
    #[error("no node is ready")]
    NoReadyNode,
    /// No ready node runs the runtime.
    #[error("no ready node runs this runtime")]
    NoRuntime,
    /// No ready node of the runtime holds the release.
    #[error("no ready node holds the release")]
    NoRelease,
    /// No ready node of the runtime keeps volumes.
    #[error("no ready node of this runtime keeps volumes")]
    NoVolumes,
    /// No qualifying node has room for the sandbox's vCPUs and memory.
    #[error("no ready node has room for the sandbox")]
    NoRoom,
}

/// How a qualifying node ranks: no release held, sandboxes, memory use after placement in
/// 1/1000, name — the smallest wins.
type Rank<'a> = (bool, u32, u64, &'a str);

/// The index in `nodes` of the node that takes a sandbox needing `demand`.
///
/// # Errors
/// [`NoPlacement`]: the first rule that left no node.
pub fn place(nodes: &[Candidate<'_>], demand: &Demand<'_>) -> Result<usize, NoPlacement> {
    let mut stage = NoPlacement::NoReadyNode;
    let mut best: Option<(usize, Rank<'_>)> = None;
    for (i, n) in nodes.iter().enumerate() {
        if n.state != NodeState::Ready {
            continue;
        }
        stage = stage.max_with(NoPlacement::NoRuntime);
        if n.runtime != demand.runtime {
            continue;
        }
        stage = stage.max_with(NoPlacement::NoRelease);
        if demand.require_release && !n.has_release {
            continue;
        }
        stage = stage.max_with(NoPlacement::NoRoom);
        let memory_mib = n.memory_bytes / (1024 * 1024);
        let memory_after = n.placed_memory_mib.saturating_add(demand.memory_mib);
        let vcpus_after = n.placed_vcpus.saturating_add(demand.vcpus);
        if memory_after > memory_mib || vcpus_after > n.cpus.saturating_mul(CPU_OVERCOMMIT) {
            continue;
        }
        let use_permille = memory_after.saturating_mul(1000) / memory_mib.max(1);
        let key = (!n.has_release, n.sandboxes, use_permille, n.name);
        if best.as_ref().is_none_or(|(_, k)| key < *k) {
            best = Some((i, key));
        }
    }
    best.map(|(i, _)| i).ok_or(stage)
}

/// How a node qualifying for a volume ranks: the most free disk (unknown: none), then the
/// fewest sandboxes, then the name — the smallest wins.
type VolumeRank<'a> = (std::cmp::Reverse<u64>, u32, &'a str);

/// A node as volume placement sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeCandidate<'a> {
    /// Node name.
    pub name: &'a str,
    /// Its state (only `ready` qualifies).
    pub state: NodeState,
    /// Its runtime (`runc`, `qemu`).
    pub runtime: &'a str,
    /// Whether it keeps volumes (its capabilities).
    pub volumes: bool,
    /// Bytes free on its data dir at its last heartbeat (`None`: unknown).
    pub disk_available_bytes: Option<u64>,
    /// Sandboxes it holds.
    pub sandboxes: u32,
}

/// The index in `nodes` of the node that keeps a new volume of `size_mib` MiB for sandboxes
/// of `runtime`.
///
/// # Errors
/// [`NoPlacement`]: the first rule that left no node (`NoRoom`: no node has the disk).
pub fn place_volume(
    nodes: &[VolumeCandidate<'_>],
    runtime: &str,
    size_mib: u64,
) -> Result<usize, NoPlacement> {
    let mut stage = NoPlacement::NoReadyNode;
    let mut best: Option<(usize, VolumeRank<'_>)> = None;
    let size_bytes = size_mib.saturating_mul(1024 * 1024);
    for (i, n) in nodes.iter().enumerate() {
        if n.state != NodeState::Ready {
            continue;
        }
        stage = stage.max_with(NoPlacement::NoRuntime);
        if n.runtime != runtime {
            continue;
        }
        stage = stage.max_with(NoPlacement::NoVolumes);
        if !n.volumes {
            continue;
        }
        stage = stage.max_with(NoPlacement::NoRoom);
        if n.disk_available_bytes.is_some_and(|free| free < size_bytes) {
            continue;
        }
        let key = (
            std::cmp::Reverse(n.disk_available_bytes.unwrap_or(0)),
            n.sandboxes,
            n.name,
        );
        if best.as_ref().is_none_or(|(_, k)| key < *k) {
            best = Some((i, key));
        }
    }
    best.map(|(i, _)| i).ok_or(stage)
}

impl NoPlacement {
    /// The later of two rules (a node that passed a rule moves the reason on).
    fn max_with(self, other: NoPlacement) -> NoPlacement {
        if (other as u8) > (self as u8) {
            other
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1024 * 1024 * 1024;

    fn node(name: &str) -> Candidate<'_> {
        Candidate {
            name,
            state: NodeState::Ready,
            runtime: "runc",
            cpus: 4,
            memory_bytes: 8 * GIB,
            placed_vcpus: 0,
            placed_memory_mib: 0,
            sandboxes: 0,
            has_release: true,
        }
    }

    fn demand() -> Demand<'static> {
        Demand {
            runtime: "runc",
            vcpus: 1,
            memory_mib: 512,
            require_release: true,
        }
    }

    #[test]
    fn spreads_to_the_node_with_fewest_sandboxes() {
        let mut nodes = vec![node("a"), node("b"), node("c")];
        nodes[0].sandboxes = 2;
        nodes[1].sandboxes = 1;
        nodes[2].sandboxes = 3;
        assert_eq!(place(&nodes, &demand()), Ok(1));
    }

    #[test]
    fn ties_break_by_memory_use_then_name() {
        let mut nodes = vec![node("b"), node("a"), node("c")];
        assert_eq!(place(&nodes, &demand()), Ok(1), "same load: the first name");
        nodes[1].placed_memory_mib = 4096;
        assert_eq!(place(&nodes, &demand()), Ok(0));
    }

    #[test]
    fn only_ready_nodes_qualify() {
        let mut nodes = vec![node("a"), node("b"), node("c"), node("d")];
        nodes[0].state = NodeState::Draining;
        nodes[1].state = NodeState::Quarantined;
        nodes[2].state = NodeState::Lost;
        nodes[3].sandboxes = 50;
        assert_eq!(place(&nodes, &demand()), Ok(3));
        nodes[3].state = NodeState::Lost;
        assert_eq!(place(&nodes, &demand()), Err(NoPlacement::NoReadyNode));
        assert_eq!(place(&[], &demand()), Err(NoPlacement::NoReadyNode));
    }

    #[test]
    fn the_runtime_must_match() {
        let mut nodes = vec![node("a"), node("b")];
        nodes[0].runtime = "qemu";
        assert_eq!(place(&nodes, &demand()), Ok(1));
        nodes[1].runtime = "qemu";
        assert_eq!(place(&nodes, &demand()), Err(NoPlacement::NoRuntime));
    }

    #[test]
    fn a_cached_release_wins_and_can_be_required() {
        let mut nodes = vec![node("a"), node("b")];
        nodes[0].has_release = false;
        nodes[1].sandboxes = 5;
        assert_eq!(place(&nodes, &demand()), Ok(1), "the cache beats spread");
        let soft = Demand {
            require_release: false,
            ..demand()
        };
        nodes[1].state = NodeState::Draining;
        assert_eq!(
            place(&nodes, &soft),
            Ok(0),
            "without the requirement, any node"
        );
        assert_eq!(place(&nodes, &demand()), Err(NoPlacement::NoRelease));
    }

    fn volume_node(name: &str) -> VolumeCandidate<'_> {
        VolumeCandidate {
            name,
            state: NodeState::Ready,
            runtime: "runc",
            volumes: true,
            disk_available_bytes: Some(100 * GIB),
            sandboxes: 0,
        }
    }

    #[test]
    fn a_volume_goes_to_the_ready_node_with_the_most_free_disk() {
        let mut nodes = vec![volume_node("a"), volume_node("b"), volume_node("c")];
        nodes[1].disk_available_bytes = Some(200 * GIB);
        assert_eq!(place_volume(&nodes, "runc", 1024), Ok(1));
        nodes[1].state = NodeState::Draining;
        nodes[0].sandboxes = 3;
        assert_eq!(place_volume(&nodes, "runc", 1024), Ok(2), "then spread");
        nodes[2].sandboxes = 3;
        assert_eq!(place_volume(&nodes, "runc", 1024), Ok(0), "then the name");
    }

    #[test]
    fn a_volume_needs_a_ready_node_of_the_runtime_that_keeps_volumes_and_has_the_disk() {
        let mut nodes = vec![volume_node("a"), volume_node("b")];
        nodes[0].volumes = false;
        nodes[1].runtime = "qemu";
        assert_eq!(
            place_volume(&nodes, "runc", 64),
            Err(NoPlacement::NoVolumes)
        );
        nodes[1].runtime = "runc";
        nodes[1].disk_available_bytes = Some(63 * 1024 * 1024);
        assert_eq!(place_volume(&nodes, "runc", 64), Err(NoPlacement::NoRoom));
        nodes[1].disk_available_bytes = None;
        assert_eq!(place_volume(&nodes, "runc", 64), Ok(1), "unknown disk");
        nodes[1].state = NodeState::Lost;
        assert_eq!(
            place_volume(&nodes, "runc", 64),
            Err(NoPlacement::NoVolumes)
        );
        nodes[0].state = NodeState::Quarantined;
        assert_eq!(
            place_volume(&nodes, "runc", 64),
            Err(NoPlacement::NoReadyNode)
        );
    }

    #[test]
    fn capacity_bounds_memory_and_overcommitted_vcpus() {
        let mut nodes = vec![node("a"), node("b")];
        nodes[0].placed_memory_mib = 8 * 1024 - 256;
        assert_eq!(place(&nodes, &demand()), Ok(1), "a has 256 MiB left");
        nodes[1].placed_vcpus = 4 * CPU_OVERCOMMIT;
        assert_eq!(place(&nodes, &demand()), Err(NoPlacement::NoRoom));
        nodes[1].placed_vcpus = 4 * CPU_OVERCOMMIT - 1;
        assert_eq!(place(&nodes, &demand()), Ok(1), "the last vCPU fits");
    }
}
