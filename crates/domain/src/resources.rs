//! Resource limits of a sandbox: the one [`Resources`] value that travels from request
//! validation to the runtime's limits (cgroups, VM size), its defaults and bounds.

use serde::{Deserialize, Serialize};

use crate::InvalidInput;

/// Resources of a sandbox. Defaults: 1 vCPU, 512 MiB memory, 1024 processes, no disk of its
/// own (a server gives one of [`DEFAULT_DISK_MIB`] unless configured otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Resources {
    /// CPU limit in vCPUs (1–16).
    pub vcpus: u32,
    /// Memory limit in MiB (64–65536).
    pub memory_mib: u64,
    /// Process limit (16–65536).
    pub pids_max: u64,
    /// Size in MiB of the sandbox's own disk, which holds every file it writes (64–1048576).
    /// When it is full, writes in the sandbox fail with "No space left on device" and file
    /// uploads with `507 no_space`, while the node and other sandboxes are unaffected. A create
    /// that names no size gets the server's default (`cove server --default-disk-mib`,
    /// [`DEFAULT_DISK_MIB`]). Absent only where the server's default is off (`0`): the sandbox
    /// then writes to the node's disk without a size limit of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mib: Option<u64>,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            vcpus: 1,
            memory_mib: 512,
            pids_max: 1024,
            disk_mib: None,
        }
    }
}

/// Optional resource overrides in a create request; unset fields take the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResourcesRequest {
    /// vCPUs (1–16).
    pub vcpus: Option<u32>,
    /// Memory in MiB (64–65536).
    pub memory_mib: Option<u64>,
    /// Process limit (16–65536).
    pub pids_max: Option<u64>,
    /// Size in MiB of a disk of the sandbox's own (64–1048576); see [`Resources::disk_mib`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mib: Option<u64>,
}

/// vCPU bounds (inclusive).
pub const VCPUS: (u32, u32) = (1, 16);
/// Memory bounds in MiB (inclusive).
pub const MEMORY_MIB: (u64, u64) = (64, 65536);
/// Process-count bounds (inclusive).
pub const PIDS: (u64, u64) = (16, 65536);
/// Own-disk size bounds in MiB (inclusive): 64 MiB to 1 TiB.
pub const DISK_MIB: (u64, u64) = (64, 1 << 20);
/// The own-disk size in MiB a server gives a sandbox whose create names none (10 GiB; the
/// image is sparse, so it costs the node only what the sandbox writes).
pub const DEFAULT_DISK_MIB: u64 = 10 * 1024;

/// Applies a request's overrides to the defaults (1 vCPU, 512 MiB, 1024 pids, no own disk) and
/// checks bounds.
pub fn resolve(req: Option<&ResourcesRequest>) -> Result<Resources, InvalidInput> {
    let mut r = Resources::default();
    let Some(req) = req else { return Ok(r) };
    if let Some(v) = req.vcpus {
        check(
            "resources.vcpus",
            u64::from(v),
            (u64::from(VCPUS.0), u64::from(VCPUS.1)),
        )?;
        r.vcpus = v;
    }
    if let Some(v) = req.memory_mib {
        check("resources.memory_mib", v, MEMORY_MIB)?;
        r.memory_mib = v;
    }
    if let Some(v) = req.pids_max {
        check("resources.pids_max", v, PIDS)?;
        r.pids_max = v;
    }
    if let Some(v) = req.disk_mib {
        check("resources.disk_mib", v, DISK_MIB)?;
        r.disk_mib = Some(v);
    }
    Ok(r)
}

fn check(field: &str, v: u64, (lo, hi): (u64, u64)) -> Result<(), InvalidInput> {
    if v < lo || v > hi {
        return Err(InvalidInput::new(
            field,
            format!("must be between {lo} and {hi}, got {v}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bounds() {
        assert_eq!(resolve(None), Ok(Resources::default()));
        let req = ResourcesRequest {
            memory_mib: Some(1024),
            ..Default::default()
        };
        assert_eq!(resolve(Some(&req)).map(|r| r.memory_mib), Ok(1024));
        let bad = ResourcesRequest {
            vcpus: Some(0),
            ..Default::default()
        };
        assert_eq!(
            resolve(Some(&bad)).map_err(|e| e.field),
            Err("resources.vcpus".to_string())
        );
        let disk = ResourcesRequest {
            disk_mib: Some(128),
            ..Default::default()
        };
        assert_eq!(resolve(Some(&disk)).map(|r| r.disk_mib), Ok(Some(128)));
        let tiny = ResourcesRequest {
            disk_mib: Some(8),
            ..Default::default()
        };
        assert_eq!(
            resolve(Some(&tiny)).map_err(|e| e.field),
            Err("resources.disk_mib".to_string())
        );
    }
}
