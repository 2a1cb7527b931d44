//! The audit log: every state-changing request (any method but `GET`, `HEAD` and `OPTIONS`) of
//! an authenticated caller, on the management API and the E2B API, is recorded with its org,
//! actor (`admin` or the key id), action (method and route), the resource id the route names,
//! the status and outcome, and the request id. Reads are not recorded. Records are kept for
//! [`crate::Retention::audit`] (90 days by default). `GET /v1/audit` pages through them:
//! the admin sees every org's, a key its own org's.

use chrono::Utc;
use cove_api_types::{AuditEntry, AuditPage, ErrorCode};
use tracing::warn;

use super::scope::{self, Caller};
use crate::{ControlPlane, ServiceError};

/// Largest page of `GET /v1/audit`.
pub const MAX_AUDIT_PAGE: u32 = 500;

/// What one request did, as the audit layer saw it.
#[derive(Debug, Clone)]
pub struct AuditRecord {
    /// Who.
    pub caller: Caller,
    /// Method and route, e.g. `POST /v1/sandboxes/{id}/pause`.
    pub action: String,
    /// The resource the route names.
    pub resource: Option<String>,
    /// The HTTP status answered.
    pub status: u16,
    /// `ok`, or the error code when the body said one.
    pub outcome: String,
    /// The request id.
    pub request_id: Option<String>,
}

/// Whether requests with the HTTP `method` (`POST`, ...) are recorded (every method that may
/// change something).
pub fn audited(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD" | "OPTIONS")
}

/// The outcome word of an answer: `ok` below 400, else its error code (the one an error
/// response carries in its extensions), or `error`.
pub fn outcome(status: u16, code: Option<ErrorCode>) -> String {
    if status < 400 {
        return "ok".into();
    }
    code.map_or_else(|| "error".into(), |c| c.as_str().to_string())
}

impl ControlPlane {
    /// Appends a record; a store failure is logged, never turned into the request's answer.
    pub async fn record_audit(&self, r: AuditRecord) {
        let entry = AuditEntry {
            seq: 0,
            time: Utc::now(),
            org: r.caller.org.clone(),
            actor: r.caller.actor_name().to_string(),
            action: r.action,
            resource: r.resource,
            status: r.status,
            outcome: r.outcome,
            request_id: r.request_id,
        };
        if let Err(e) = self.store().append_audit(&entry).await {
            warn!(error = %e, action = %entry.action, "cannot record an audit entry");
        }
    }

    /// `GET /v1/audit`: records after `after`, oldest first, at most `limit` (default and
    /// most [`MAX_AUDIT_PAGE`]). The admin sees every org's (or `org`'s when given); a key
    /// its own org's only.
    pub async fn list_audit(
        &self,
        after: u64,
        limit: Option<u32>,
        org: Option<String>,
    ) -> Result<AuditPage, ServiceError> {
        let limit = limit.unwrap_or(MAX_AUDIT_PAGE).clamp(1, MAX_AUDIT_PAGE);
        let c = scope::require()?;
        let org = if c.has_admin_rights() {
            org
        } else {
            Some(c.org)
        };
        // Sequence numbers are signed 64-bit in the store: a cursor past them all lists nothing.
        let after = after.min(i64::MAX as u64);
        let entries = self
            .store()
            .audit_after(org.as_deref(), after, limit)
            .await?;
        let next_after = (entries.len() == limit as usize)
            .then(|| entries.last().map(|e| e.seq))
            .flatten();
        Ok(AuditPage {
            entries,
            next_after,
        })
    }
}
