//! Resource limits of a sandbox: defaults and bounds.

use cove_api_types::{Resources, ResourcesRequest};

use crate::InvalidInput;

/// vCPU bounds (inclusive).
pub const VCPUS: (u32, u32) = (1, 16);
/// Memory bounds in MiB (inclusive).
pub const MEMORY_MIB: (u64, u64) = (64, 65536);
/// Process-count bounds (inclusive).
pub const PIDS: (u64, u64) = (16, 65536);

/// Applies a request's overrides to the defaults (1 vCPU, 512 MiB, 1024 pids) and checks bounds.
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
    }
}
