//! Resource limits of a sandbox: defaults and bounds.

use cove_api_types::{Resources, ResourcesRequest};

use crate::InvalidInput;

/// vCPU bounds (inclusive).
pub const VCPUS: (u32, u32) = (1, 16);
/// Memory bounds in MiB (inclusive).
pub const MEMORY_MIB: (u64, u64) = (64, 65536);
/// Process-count bounds (inclusive).
pub const PIDS: (u64, u64) = (16, 65536);
/// Own-disk size bounds in MiB (inclusive): 64 MiB to 1 TiB.
pub const DISK_MIB: (u64, u64) = (64, 1 << 20);

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
