//! Checkpoint archives: a `ready` checkpoint downloads as one versioned archive (its header
//! says what the checkpoint is of; the node adds the snapshot's manifest and artifacts), and
//! an uploaded archive becomes a new `ready` checkpoint, from which sandboxes are created as
//! from any checkpoint. The node checks the archive whole before keeping anything; the header
//! is checked here like a create request.

use chrono::Utc;
use cove_api_types::{
    Checkpoint, CheckpointArchiveHeader, CheckpointState, ResourcesRequest,
    CHECKPOINT_ARCHIVE_FORMAT,
};
use cove_domain::{ids, resources, validate, InvalidInput};
use cove_node_api::{ByteStream, NodeError, ARCHIVE_VERSION};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::error::from_node;
use crate::features::Feature;
use crate::orgs::quotas::{exceeded, Ask, CAPACITY_RETRY_S};
use crate::{ControlPlane, ServiceError};

/// Largest archive an import accepts (64 GiB).
pub const MAX_ARCHIVE_BYTES: u64 = 64 << 30;

/// Bytes an archive may carry past the snapshot it holds (tar headers, the header and the
/// manifest), when an import is cut off at what is left of the org's `max_snapshot_mib`.
const ARCHIVE_OVERHEAD_BYTES: u64 = 16 << 20;

impl ControlPlane {
    /// The archive of `ready` checkpoint `id`: the checkpoint and the archive's bytes (an
    /// uncompressed tar, see [`CheckpointArchiveHeader`]).
    ///
    /// # Errors
    /// `feature_disabled` (`export`), `checkpoint_not_found`, `failed_precondition` (not
    /// `ready`).
    pub async fn export_checkpoint(
        &self,
        id: &str,
    ) -> Result<(Checkpoint, ByteStream), ServiceError> {
        self.inner.cfg.features.require(Feature::Checkpoints)?;
        self.inner.cfg.features.require(Feature::Export)?;
        let c = self.ready_checkpoint(id).await?;
        self.require_feature(Feature::Checkpoints, &c.org).await?;
        self.require_feature(Feature::Export, &c.org).await?;
        let header = CheckpointArchiveHeader {
            format: CHECKPOINT_ARCHIVE_FORMAT.to_string(),
            version: ARCHIVE_VERSION,
            checkpoint: c.clone(),
        };
        let header = serde_json::to_vec_pretty(&header)
            .map_err(|e| ServiceError::Internal(e.to_string()))?;
        let body = self
            .node()
            .export_checkpoint(&c.id, header.into())
            .await
            .map_err(|e| from_node(e, &c.sandbox_id))?;
        info!(checkpoint_id = %c.id, "checkpoint exported");
        Ok((c, body))
    }

    /// Stores the uploaded archive `body` as a new `ready` checkpoint (named `name`, or as
    /// the exported one was). Nothing is kept when any part is refused.
    ///
    /// # Errors
    /// `feature_disabled` (`export`), `invalid_argument` (field `archive`: not an archive of
    /// this format and version, an entry out of the sandbox, a device, another runtime's;
    /// or a header field), `payload_too_large`, `no_space`, `quota_exceeded` (the org's
    /// `max_snapshot_mib`: checked before the upload, which is cut off past what is left,
    /// and again once the snapshot's size is known).
    pub async fn import_checkpoint(
        &self,
        body: ByteStream,
        name: Option<String>,
    ) -> Result<Checkpoint, ServiceError> {
        let org = crate::orgs::scope::acting_org()?;
        self.require_feature(Feature::Checkpoints, &org).await?;
        self.require_feature(Feature::Export, &org).await?;
        let room = self.snapshot_room(&org).await?;
        let limit = room.map_or(MAX_ARCHIVE_BYTES, |r| {
            r.saturating_add(ARCHIVE_OVERHEAD_BYTES)
                .min(MAX_ARCHIVE_BYTES)
        });
        let id = ids::new_checkpoint_id();
        let imported = self
            .node()
            .import_checkpoint(&id, body, limit, CancellationToken::new())
            .await
            .map_err(|e| match e {
                NodeError::TooLarge(_) if limit < MAX_ARCHIVE_BYTES => exceeded(
                    format!(
                        "quota max_snapshot_mib of org {org} exceeded: the archive is larger \
                         than the {} MiB left",
                        room.unwrap_or(0) >> 20
                    ),
                    CAPACITY_RETRY_S,
                ),
                e => from_node(e, ""),
            })?;
        let checked = checked_header(&imported.header).map(|h| {
            let c = h.checkpoint;
            Checkpoint {
                id: id.clone(),
                org: org.clone(),
                sandbox_id: c.sandbox_id,
                name: name.or(c.name),
                state: CheckpointState::Ready,
                state_reason: None,
                template: c.template,
                release: c.release,
                resources: c.resources,
                env: c.env,
                cwd: c.cwd,
                user: c.user,
                runtime: imported.runtime.clone(),
                memory: imported.memory,
                file_bytes: imported.file_bytes,
                pause_ms: None,
                operation_id: None,
                created_at: Utc::now(),
            }
        });
        // Held until the checkpoint is recorded: its bytes are the org's from then on.
        let ask = Ask::Snapshot {
            mib: imported.file_bytes.div_ceil(1 << 20),
        };
        let stored = match checked {
            Ok(c) => match self.admit(&org, ask).await {
                Ok(_quota) => self
                    .store()
                    .insert_checkpoint(&c)
                    .await
                    .map(|()| c)
                    .map_err(Into::into),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        if stored.is_err() {
            let _ = self.node().delete_checkpoint(&id).await;
        }
        let c = stored?;
        info!(checkpoint_id = %c.id, file_bytes = c.file_bytes, "checkpoint imported");
        Ok(c)
    }
}

/// The archive's header, checked like the fields of a create request.
fn checked_header(raw: &[u8]) -> Result<CheckpointArchiveHeader, ServiceError> {
    let bad = |m: String| ServiceError::Invalid(InvalidInput::new("archive", m));
    let h: CheckpointArchiveHeader = serde_json::from_slice(raw)
        .map_err(|e| bad(format!("unreadable cove-checkpoint.json: {e}")))?;
    if h.format != CHECKPOINT_ARCHIVE_FORMAT || h.version != ARCHIVE_VERSION {
        return Err(bad(format!(
            "format {} version {} is not {CHECKPOINT_ARCHIVE_FORMAT} version {ARCHIVE_VERSION}",
            h.format, h.version
        )));
    }
    let c = &h.checkpoint;
    let r = c.resources;
    let resolved = resources::resolve(Some(&ResourcesRequest {
        vcpus: Some(r.vcpus),
        memory_mib: Some(r.memory_mib),
        pids_max: Some(r.pids_max),
        disk_mib: r.disk_mib,
    }))?;
    if resolved != r {
        return Err(bad("resources out of bounds".into()));
    }
    validate::env("env", &c.env)?;
    validate::path("cwd", c.cwd.as_bytes())?;
    if !c.cwd.starts_with('/') {
        return Err(InvalidInput::new("cwd", "must be an absolute path").into());
    }
    validate::user("user", &c.user)?;
    if c.template.is_empty() || c.template.len() > 128 || c.template.contains(['/', '\0']) {
        return Err(bad("template name is not a template name".into()));
    }
    Ok(h)
}
