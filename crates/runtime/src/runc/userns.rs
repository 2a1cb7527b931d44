//! User namespaces: a sandbox's root is an unprivileged host id range of its own.
//!
//! With [`UserNamespaces`] configured, every sandbox runs in a user namespace mapping its ids
//! `0..65536` (uids and gids alike) to the host ids `base + slot × 65536 ..` of one *slot*. A
//! slot is claimed by creating `<claims_dir>/<slot>` (holding the sandbox id) with `O_EXCL`, so
//! two live sandboxes never share a range, whatever restarted in between; `stop` gives it back.
//! The sandbox's directory keeps its range and the range its upper dir was last shifted into in
//! [`RECORD_FILE`], so a restart (or a crash recovery) claims the same slot again when it is
//! free and shifts nothing; a sandbox whose slot went to another meanwhile gets a new one and
//! its files are shifted (`shift.rs`).
//!
//! Blocking calls; callers run them on `spawn_blocking` or in blocking preparation.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::layout::{io_err, write_file};
use crate::RuntimeError;

/// Ids per sandbox: container ids `0..RANGE_SIZE` are mapped.
pub const RANGE_SIZE: u32 = 65_536;
/// Default first host id of the ranges (2^30): far above host users and `/etc/subuid` ranges.
pub const DEFAULT_BASE: u32 = 1 << 30;
/// The machine-wide claims directory: every server of the machine claims its ranges there, so
/// no two sandboxes of the machine share one; on a tmpfs, it empties at boot, when no sandbox
/// runs.
pub const DEFAULT_CLAIMS_DIR: &str = "/run/cove/userns";
/// The file of a sandbox directory holding its [`Record`].
const RECORD_FILE: &str = "userns.json";
/// Version of the persisted [`Record`].
const RECORD_VERSION: u32 = 1;

/// User namespaces of the runc driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserNamespaces {
    /// First host id of the ranges (`cove server --userns-base`, default [`DEFAULT_BASE`]).
    /// At least [`RANGE_SIZE`], so no range covers host root or the usual host users.
    pub base: u32,
    /// Where slots are claimed. Created if missing. Servers on one machine share ranges
    /// safely only through one such directory ([`DEFAULT_CLAIMS_DIR`]).
    pub claims_dir: PathBuf,
}

impl UserNamespaces {
    /// Ranges starting at `base`, claimed in `claims_dir`.
    pub fn new(base: u32, claims_dir: impl Into<PathBuf>) -> Self {
        UserNamespaces {
            base,
            claims_dir: claims_dir.into(),
        }
    }

    /// How many ranges fit between `base` and the largest host id.
    fn slots(&self) -> u32 {
        ((u64::from(u32::MAX) + 1 - u64::from(self.base)) / u64::from(RANGE_SIZE)) as u32
    }

    /// Checks the base and creates the claims directory. Errors: `Unavailable` naming the
    /// problem.
    pub(crate) fn check(&self) -> Result<(), RuntimeError> {
        if self.base < RANGE_SIZE || self.slots() == 0 {
            return Err(RuntimeError::Unavailable(format!(
                "--userns-base {} must be at least {RANGE_SIZE} and leave room for one range \
                 of {RANGE_SIZE} ids below 2^32",
                self.base
            )));
        }
        std::fs::create_dir_all(&self.claims_dir)
            .map_err(io_err(format!("create {}", self.claims_dir.display())))
    }

    fn range(&self, slot: u32) -> IdRange {
        IdRange {
            host: self.base + slot * RANGE_SIZE,
        }
    }

    fn slot_of(&self, range: IdRange) -> Option<u32> {
        let off = range.host.checked_sub(self.base)?;
        (off % RANGE_SIZE == 0 && off / RANGE_SIZE < self.slots()).then_some(off / RANGE_SIZE)
    }

    fn claim_path(&self, slot: u32) -> PathBuf {
        self.claims_dir.join(slot.to_string())
    }

    /// Claims a range for sandbox `id` whose directory is `dir`: the one recorded there when it
    /// is free (or already this sandbox's), else the lowest free one; records it in `dir`.
    /// Errors: every slot is taken, or the claims directory cannot be written.
    pub(crate) fn claim(&self, id: &str, dir: &Path) -> Result<IdRange, RuntimeError> {
        let mut record = Record::read(dir);
        if let Some(slot) = record.range.and_then(|r| self.slot_of(r)) {
            if self.try_claim(slot, id)? {
                return Ok(self.range(slot));
            }
        }
        let taken: std::collections::HashSet<u32> = std::fs::read_dir(&self.claims_dir)
            .map_err(io_err(format!("list {}", self.claims_dir.display())))?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        for slot in (0..self.slots()).filter(|s| !taken.contains(s)) {
            if self.try_claim(slot, id)? {
                let range = self.range(slot);
                record.range = Some(range);
                record.write(dir)?;
                return Ok(range);
            }
        }
        Err(RuntimeError::Unavailable(format!(
            "no free user namespace range: all {} are taken",
            self.slots()
        )))
    }

    /// Whether `slot` is now sandbox `id`'s (newly claimed, or claimed by it before).
    fn try_claim(&self, slot: u32, id: &str) -> Result<bool, RuntimeError> {
        let path = self.claim_path(slot);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut f) => {
                use std::io::Write;
                f.write_all(id.as_bytes())
                    .map_err(io_err(format!("write {}", path.display())))?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // A claim whose id was never written (a crash right after the create) is
                // nobody's; it is taken over only by the sandbox that recorded this slot.
                let owner = std::fs::read_to_string(&path).unwrap_or_default();
                Ok(owner == id)
            }
            Err(e) => Err(io_err(format!("claim {}", path.display()))(e)),
        }
    }

    /// Gives back the range sandbox `id` (directory `dir`) claimed; keeps the record in `dir`,
    /// so its next start asks for the same range. Best effort.
    pub(crate) fn release(&self, id: &str, dir: &Path) {
        let Some(slot) = Record::read(dir).range.and_then(|r| self.slot_of(r)) else {
            return;
        };
        let path = self.claim_path(slot);
        if std::fs::read_to_string(&path).is_ok_and(|owner| owner == id) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// A sandbox's host id range: container id `n` is host id `host + n`, for `n < RANGE_SIZE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IdRange {
    host: u32,
}

impl IdRange {
    /// The range starting at host id `host` (tests; sandboxes get theirs from a claim).
    #[cfg(test)]
    pub(crate) fn at(host: u32) -> IdRange {
        IdRange { host }
    }

    /// The host id of the sandbox's root.
    pub(crate) fn host(self) -> u32 {
        self.host
    }
}

/// What a sandbox directory remembers of its user namespace (`userns.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// Format version.
    #[serde(default)]
    pub version: u32,
    /// The range the sandbox last ran with.
    pub range: Option<IdRange>,
    /// The first host id of the range the whole upper dir was last shifted into (`None`: its
    /// files have container ids, as unpacked from a snapshot or written without a user
    /// namespace).
    pub upper: Option<u32>,
}

impl Record {
    /// The record of `dir`; empty when missing or unreadable (everything is then redone).
    pub(crate) fn read(dir: &Path) -> Record {
        std::fs::read(dir.join(RECORD_FILE))
            .ok()
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
            .filter(|r| r.version == RECORD_VERSION)
            .unwrap_or_default()
    }

    /// Writes the record into `dir` atomically.
    pub(crate) fn write(&self, dir: &Path) -> Result<(), RuntimeError> {
        let mut r = self.clone();
        r.version = RECORD_VERSION;
        let bytes = serde_json::to_vec(&r).map_err(|e| RuntimeError::Io {
            context: "serialise the user namespace record".into(),
            source: std::io::Error::other(e),
        })?;
        write_file(&dir.join(RECORD_FILE), &bytes)
    }

    /// Removes the record of `dir` (its files were replaced by a snapshot's). Missing is fine.
    pub(crate) fn remove(dir: &Path) -> Result<(), RuntimeError> {
        match std::fs::remove_file(dir.join(RECORD_FILE)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("remove the user namespace record")(e)),
        }
    }
}

/// Checks that this kernel can give a sandbox its release through an idmapped overlay lower
/// layer: a user namespace with a mapping, an idmapped clone of a directory made in `dir` (on
/// the data dir's filesystem, like the releases) and an overlay on it.
/// Errors: `Unavailable` naming the step that failed.
pub(crate) fn probe(cfg: &UserNamespaces, dir: &Path) -> Result<(), RuntimeError> {
    let fail = |step: &str, e: &dyn std::fmt::Display| {
        RuntimeError::Unavailable(format!(
            "user namespaces: {step} failed ({e}); this kernel or filesystem cannot give \
             sandboxes user namespaces, start with `--user-namespaces off` to run without them"
        ))
    };
    let tmp = tempfile::Builder::new()
        .prefix(".userns-probe-")
        .tempdir_in(dir)
        .map_err(|e| fail("a probe directory", &e))?;
    let (lower, upper, work, merged, idmapped) = (
        tmp.path().join("lower"),
        tmp.path().join("upper"),
        tmp.path().join("work"),
        tmp.path().join("merged"),
        tmp.path().join("idmapped"),
    );
    for d in [&lower, &upper, &work, &merged, &idmapped] {
        std::fs::create_dir(d).map_err(|e| fail("a probe directory", &e))?;
    }
    std::fs::write(lower.join("probe"), b"").map_err(|e| fail("a probe file", &e))?;
    let range = IdRange { host: cfg.base };
    let ns = super::idmap::userns_fd(range).map_err(|e| fail("a user namespace", &e))?;
    super::idmap::mount_idmapped(&lower, &ns, &idmapped, true)
        .map_err(|e| fail("an idmapped mount", &e))?;
    let result = (|| {
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(idmapped.join("probe"))
            .map_err(|e| fail("stat through the idmapped mount", &e))?
            .uid();
        if owner != range.host() {
            return Err(fail(
                "the idmapped mount",
                &format!(
                    "a root-owned file shows owner {owner}, not {}",
                    range.host()
                ),
            ));
        }
        super::mounts::mount_overlay(&idmapped, &upper, &work, &merged)
            .map_err(|e| fail("an overlay on an idmapped lower layer", &e))?;
        super::mounts::unmount(&merged)
    })();
    let _ = super::mounts::unmount(&merged);
    let _ = super::mounts::unmount(&idmapped);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_exclusive_reused_and_released() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cfg = UserNamespaces::new(DEFAULT_BASE, tmp.path().join("claims"));
        cfg.check().expect("check");
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir_all(&a).expect("a");
        std::fs::create_dir_all(&b).expect("b");
        let ra = cfg.claim("a", &a).expect("claim a");
        let rb = cfg.claim("b", &b).expect("claim b");
        assert_eq!(ra.host(), DEFAULT_BASE);
        assert_eq!(rb.host(), DEFAULT_BASE + RANGE_SIZE);
        // A restart of a claims its range again.
        assert_eq!(cfg.claim("a", &a).expect("again"), ra);
        // Released and taken by c, a gets another range on its next start.
        cfg.release("a", &a);
        let c = tmp.path().join("c");
        std::fs::create_dir_all(&c).expect("c");
        assert_eq!(cfg.claim("c", &c).expect("claim c"), ra);
        let ra2 = cfg.claim("a", &a).expect("a moves");
        assert_ne!(ra2, ra);
        assert_ne!(ra2, rb);
        assert_eq!(Record::read(&a).range, Some(ra2));
        // Releasing another's slot does nothing.
        cfg.release("b", &a);
        assert!(cfg.claim_path(cfg.slot_of(ra2).expect("slot")).exists());
    }

    #[test]
    fn a_base_below_one_range_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        assert!(UserNamespaces::new(1000, tmp.path()).check().is_err());
        assert!(UserNamespaces::new(u32::MAX - 10, tmp.path())
            .check()
            .is_err());
    }
}
