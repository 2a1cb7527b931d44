//! Retention: how long each kind of record is kept, enforced by the controller (every minute)
//! and stated in `GET /v1/capabilities`.
//!
//! | class | what goes | default |
//! |---|---|---|
//! | operations | finished operations and their log lines, by last change | 7 days |
//! | events | lifecycle and network events, by time | 7 days |
//! | commands | ended commands of running sandboxes (output and record, as `forget` does), by end time | 1 day |
//! | snapshots | suspended sandboxes unchanged this long, deleted with their snapshot | kept until deleted |
//! | audit | audit records (`GET /v1/audit`), by time | 90 days |
//! | checkpoints | per org (`checkpoint_retention` of the org): `ready` and `failed` checkpoints past `max_per_sandbox` (oldest go) or older than `max_age_s`, from the store and the snapshot store | kept until deleted |
//!
//! A checkpoint still being saved is never deleted nor counted. A create (or fork) that is
//! restoring a checkpoint when the pass deletes it fails; an org's limits are meant to be
//! well above what its creates are using.
//!
//! Unfinished operations, running commands, and sandboxes in any other state are never
//! purged. Commands of paused or suspended sandboxes are judged once they run again (their
//! agent is not reachable before). The rows kept as idempotency markers after a wake without
//! memory go with their sandbox.

use std::time::Duration;

use std::collections::HashMap;

use cove_api_types::{
    Checkpoint, CheckpointRetention, CheckpointState, RetentionInfo, SandboxState,
};
use cove_domain::CommandState;
use cove_node_api::NodeError;
use tracing::{info, warn};

use crate::{ControlPlane, ServiceError};

/// How long a guest has to list its commands for the commands purge.
const LIST_TIMEOUT: Duration = Duration::from_secs(2);

/// How long each class of record is kept; `None`: until its owner goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Finished operations and their log lines (default 7 days).
    pub operations: Option<Duration>,
    /// Events (default 7 days).
    pub events: Option<Duration>,
    /// Ended commands' output and records (default 1 day).
    pub commands: Option<Duration>,
    /// Suspended sandboxes and their snapshots (default `None`: kept until deleted).
    pub snapshots: Option<Duration>,
    /// Audit records (default 90 days).
    pub audit: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        const DAY: Duration = Duration::from_secs(24 * 3600);
        Retention {
            operations: Some(7 * DAY),
            events: Some(7 * DAY),
            commands: Some(DAY),
            snapshots: None,
            audit: Some(90 * DAY),
        }
    }
}

impl Retention {
    /// As `GET /v1/capabilities` states it (seconds; `null`: kept until the owner goes).
    pub fn info(&self) -> RetentionInfo {
        let s = |d: Option<Duration>| d.map(|d| d.as_secs());
        RetentionInfo {
            operations_s: s(self.operations),
            events_s: s(self.events),
            commands_s: s(self.commands),
            snapshots_s: s(self.snapshots),
            audit_s: s(self.audit),
        }
    }
}

/// What one pass removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Purged {
    operations: u64,
    events: u64,
    commands: u64,
    suspended: u64,
    audit: u64,
    checkpoints: u64,
}

impl ControlPlane {
    /// One retention pass over every class; a class that fails is logged and the others still
    /// run.
    pub(crate) async fn enforce_retention(&self) -> Result<(), ServiceError> {
        let r = self.inner.cfg.retention;
        let now = self.inner.cfg.clock.now();
        let cut =
            |d: Duration| now - chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
        let mut purged = Purged::default();
        if let Some(d) = r.operations {
            purged.operations = self.store().purge_operations_before(cut(d)).await?;
        }
        if let Some(d) = r.events {
            purged.events = self.store().purge_events_before(cut(d)).await?;
        }
        if let Some(d) = r.commands {
            purged.commands = self.purge_commands(cut(d)).await?;
        }
        if let Some(d) = r.snapshots {
            purged.suspended = self.delete_long_suspended(cut(d)).await?;
        }
        if let Some(d) = r.audit {
            purged.audit = self.store().purge_audit_before(cut(d)).await?;
        }
        purged.checkpoints = self.purge_checkpoints(now).await?;
        if purged != Purged::default() {
            info!(
                operations = purged.operations,
                events = purged.events,
                commands = purged.commands,
                suspended_sandboxes = purged.suspended,
                audit = purged.audit,
                checkpoints = purged.checkpoints,
                "retention: purged old records"
            );
        }
        Ok(())
    }

    /// Forgets the ended commands of running sandboxes that ended before `before`.
    async fn purge_commands(
        &self,
        before: chrono::DateTime<chrono::Utc>,
    ) -> Result<u64, ServiceError> {
        let mut n = 0;
        for s in self.store().sandboxes_in(&[SandboxState::Running]).await? {
            let listed = tokio::time::timeout(LIST_TIMEOUT, self.node().commands(&s.id)).await;
            let Ok(Ok(commands)) = listed else {
                continue; // An agent that does not answer now is judged on the next pass.
            };
            for c in commands {
                let ended = c
                    .ended_at_ms
                    .and_then(|ms| chrono::DateTime::from_timestamp_millis(ms as i64));
                if c.state == CommandState::Running || ended.is_none_or(|t| t >= before) {
                    continue;
                }
                match self.node().forget(&s.id, &c.command_id).await {
                    Ok(()) | Err(NodeError::CommandNotFound(_)) => {}
                    Err(e) => {
                        warn!(sandbox_id = %s.id, command_id = %c.command_id, error = %e,
                            "retention: cannot forget an ended command");
                        continue;
                    }
                }
                match self.store().delete_command(&c.command_id).await {
                    Ok(()) | Err(cove_store::StoreError::NotFound) => n += 1,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(n)
    }

    /// Deletes, for every org with a checkpoint retention, its checkpoints past it, oldest
    /// first. A checkpoint that cannot be removed from the snapshot store is kept (and judged
    /// again on the next pass).
    async fn purge_checkpoints(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<u64, ServiceError> {
        let mut n = 0;
        for org in self.store().list_orgs().await? {
            let r = org.checkpoint_retention;
            if r == CheckpointRetention::default() {
                continue;
            }
            let all = self.store().list_checkpoints(Some(&org.id), None).await?;
            for c in past_retention(&all, &r, now).into_iter().rev() {
                if let Err(e) = self.node().delete_checkpoint(&c.id).await {
                    warn!(checkpoint_id = %c.id, org = %org.id, error = %e,
                        "retention: cannot remove a checkpoint from the snapshot store");
                    continue;
                }
                if self.store().delete_checkpoint(&c.id).await? {
                    n += 1;
                }
                info!(checkpoint_id = %c.id, sandbox_id = %c.sandbox_id, org = %org.id,
                    "retention: checkpoint deleted");
            }
        }
        Ok(n)
    }

    /// Starts the delete of every sandbox suspended (and unchanged) since before `before`.
    async fn delete_long_suspended(
        &self,
        before: chrono::DateTime<chrono::Utc>,
    ) -> Result<u64, ServiceError> {
        let mut n = 0;
        for s in self
            .store()
            .sandboxes_in(&[SandboxState::Suspended])
            .await?
        {
            if s.updated_at >= before || self.store().has_unfinished_operation(&s.id).await? {
                continue;
            }
            match self.delete_sandbox(&s.id, None).await {
                Ok(op) => {
                    n += 1;
                    info!(sandbox_id = %s.id, op_id = %op.id,
                        "retention: deleting a sandbox suspended past the snapshot retention");
                }
                Err(e) => {
                    warn!(sandbox_id = %s.id, error = %e, "retention: cannot delete a suspended sandbox")
                }
            }
        }
        Ok(n)
    }
}

/// The checkpoints of `newest_first` (one org's, newest first) past `r` at `now`, newest
/// first: beyond the `max_per_sandbox` newest of their sandbox, or created more than
/// `max_age_s` ago. Checkpoints being saved are neither deleted nor counted.
fn past_retention<'a>(
    newest_first: &'a [Checkpoint],
    r: &CheckpointRetention,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<&'a Checkpoint> {
    let oldest_kept = r
        .max_age_s
        .and_then(|s| chrono::Duration::try_seconds(i64::try_from(s).ok()?))
        .map(|age| now - age);
    let mut kept: HashMap<&str, u32> = HashMap::new();
    let mut out = Vec::new();
    for c in newest_first {
        if c.state == CheckpointState::Creating {
            continue;
        }
        let too_old = oldest_kept.is_some_and(|t| c.created_at < t);
        let count = kept.entry(c.sandbox_id.as_str()).or_default();
        let too_many = r.max_per_sandbox.is_some_and(|max| *count >= max);
        if too_old || too_many {
            out.push(c);
        } else {
            *count += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use cove_api_types::Resources;

    use super::*;

    fn ck(id: &str, sandbox: &str, state: CheckpointState, minutes_ago: i64) -> Checkpoint {
        let now = Utc
            .with_ymd_and_hms(2026, 1, 1, 12, 0, 0)
            .single()
            .expect("time");
        Checkpoint {
            id: id.into(),
            org: "o".into(),
            sandbox_id: sandbox.into(),
            name: None,
            state,
            state_reason: None,
            template: "base".into(),
            release: 1,
            resources: Resources::default(),
            env: Default::default(),
            cwd: "/".into(),
            user: "user".into(),
            runtime: "runc".into(),
            memory: false,
            file_bytes: 0,
            pause_ms: None,
            operation_id: None,
            created_at: now - chrono::Duration::minutes(minutes_ago),
        }
    }

    #[test]
    fn saving_checkpoints_are_neither_deleted_nor_counted() {
        let now = Utc
            .with_ymd_and_hms(2026, 1, 1, 12, 0, 0)
            .single()
            .expect("time");
        // Newest first, as the store lists them.
        let all = [
            ck("c4", "a", CheckpointState::Creating, 1),
            ck("c3", "a", CheckpointState::Ready, 2),
            ck("c2", "a", CheckpointState::Failed, 3),
            ck("c1", "a", CheckpointState::Ready, 300),
            ck("b1", "b", CheckpointState::Ready, 4),
        ];
        let per_sandbox = CheckpointRetention {
            max_per_sandbox: Some(2),
            max_age_s: None,
        };
        let gone: Vec<&str> = past_retention(&all, &per_sandbox, now)
            .iter()
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(gone, ["c1"]);
        let by_age = CheckpointRetention {
            max_per_sandbox: None,
            max_age_s: Some(3600),
        };
        let gone: Vec<&str> = past_retention(&all, &by_age, now)
            .iter()
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(gone, ["c1"]);
        let old_creating = [ck("c9", "a", CheckpointState::Creating, 1000)];
        assert!(past_retention(&old_creating, &by_age, now).is_empty());
    }
}
