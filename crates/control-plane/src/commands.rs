//! Commands: start, inspect, signal, kill, and their attachment tokens.

use chrono::{DateTime, Duration as ChronoDuration, TimeZone, Utc};
use cove_api_types::{
    Attachment, Command, CommandList, CommandState, CreateCommandRequest, CreateCommandResponse,
};
use cove_domain::{ids, signals, validate, InvalidInput};
use cove_node_api::{CommandInfo, Program, SpawnRequest};
use cove_store::{CommandRecord, StoreError};
use tracing::{info, Instrument};

use crate::auth::{hash_token, new_token};
use crate::error::from_node;
use crate::{ControlPlane, ServiceError};

/// Largest accepted shell string or argv total, in bytes (1 MiB). Longer ones are `413`.
pub const MAX_COMMAND_BYTES: usize = 1 << 20;

/// Longest kill grace period (60 s); the default is [`DEFAULT_KILL_GRACE_MS`].
pub const MAX_KILL_GRACE_MS: u64 = 60_000;

/// Default time between SIGTERM and SIGKILL when killing a command (2 s).
pub const DEFAULT_KILL_GRACE_MS: u64 = 2_000;

/// Terminal width of a pty command that gives none.
pub const DEFAULT_PTY_COLS: u16 = 80;
/// Terminal height of a pty command that gives none.
pub const DEFAULT_PTY_ROWS: u16 = 24;

/// How long a retry waits for the first attempt's process to be known to the node (its row is
/// written just before the spawn), polled every 20 ms.
const REPLAY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl ControlPlane {
    /// Starts a command in a running sandbox and issues its first attachment token.
    pub async fn create_command(
        &self,
        sandbox_id: &str,
        req: CreateCommandRequest,
    ) -> Result<CreateCommandResponse, ServiceError> {
        self.create_command_idempotent(sandbox_id, req, None).await
    }

    /// [`Self::create_command`] with an `Idempotency-Key`: the same key with the same body in
    /// the same sandbox returns the command the first request started (never a second
    /// process) with a fresh attachment token (the previous one stops working); another body
    /// is `409 idempotency_mismatch`; after the sandbox's processes restarted (a wake without
    /// memory) it is `409 guest_restarted`, since whether the first attempt ran cannot be
    /// established. A key lives as long as the command's row: until the command is forgotten
    /// or the sandbox is deleted.
    ///
    /// The create runs to completion even when the caller goes away mid-request (a client
    /// that disconnects drops the HTTP handler), so a retry finds the command with its process,
    /// never a row without one.
    pub async fn create_command_idempotent(
        &self,
        sandbox_id: &str,
        req: CreateCommandRequest,
        idempotency_key: Option<String>,
    ) -> Result<CreateCommandResponse, ServiceError> {
        let this = self.clone();
        let sandbox_id = sandbox_id.to_string();
        let work = async move { this.start_command(&sandbox_id, req, idempotency_key).await };
        tokio::spawn(crate::orgs::scope::carried(work).instrument(tracing::Span::current()))
            .await
            .map_err(|e| ServiceError::Internal(format!("command create task: {e}")))?
    }

    async fn start_command(
        &self,
        sandbox_id: &str,
        req: CreateCommandRequest,
        idempotency_key: Option<String>,
    ) -> Result<CreateCommandResponse, ServiceError> {
        let sandbox = self.running_sandbox(sandbox_id).await?;
        let request_hash = idempotency_key.as_ref().map(|_| command_request_hash(&req));
        if let Some(key) = &idempotency_key {
            if let Some(found) = self
                .store()
                .command_by_idempotency_key(&sandbox.id, key)
                .await?
            {
                return self.replay_command(found, request_hash.as_deref()).await;
            }
        }
        let program = match (req.argv, req.shell) {
            (Some(argv), None) => {
                if argv.is_empty() || argv[0].is_empty() {
                    return Err(InvalidInput::new("argv", "must name a program").into());
                }
                if argv.iter().any(|a| a.contains('\0')) {
                    return Err(InvalidInput::new("argv", "must not contain NUL").into());
                }
                if argv.iter().map(|a| a.len() + 1).sum::<usize>() > MAX_COMMAND_BYTES {
                    return Err(ServiceError::TooLarge("argv is larger than 1 MiB".into()));
                }
                Program::Argv(argv)
            }
            (None, Some(shell)) => {
                if shell.contains('\0') {
                    return Err(InvalidInput::new("shell", "must not contain NUL").into());
                }
                if shell.len() > MAX_COMMAND_BYTES {
                    return Err(ServiceError::TooLarge("shell is larger than 1 MiB".into()));
                }
                Program::Shell(shell)
            }
            _ => {
                return Err(InvalidInput::new("argv", "give exactly one of argv and shell").into())
            }
        };
        let pty = match (req.pty, req.cols, req.rows) {
            (true, cols, rows) => {
                let size = cove_node_api::PtySize {
                    cols: cols.unwrap_or(DEFAULT_PTY_COLS),
                    rows: rows.unwrap_or(DEFAULT_PTY_ROWS),
                };
                if size.cols == 0 || size.rows == 0 {
                    return Err(
                        InvalidInput::new("cols", "cols and rows must be at least 1").into(),
                    );
                }
                Some(size)
            }
            (false, None, None) => None,
            (false, _, _) => {
                return Err(InvalidInput::new("cols", "cols and rows need pty: true").into())
            }
        };
        validate::env("env", &req.env)?;
        let timeout_ms = match req.timeout_s {
            None => None,
            Some(t) if !t.is_finite() || t < 0.0 => {
                return Err(InvalidInput::new("timeout_s", "must be a number >= 0").into())
            }
            Some(0.0) => None,
            Some(t) => Some((t * 1000.0).ceil() as u64),
        };
        let cwd = req.cwd.unwrap_or_else(|| sandbox.cwd.clone());
        validate::path("cwd", cwd.as_bytes())?;
        let user = req.user.unwrap_or_else(|| sandbox.user.clone());
        validate::user("user", &user)?;
        let mut env = sandbox.env.clone();
        env.extend(req.env);

        let command_id = ids::new_command_id();
        let token = new_token();
        let expires_at = self.attachment_expiry();
        let record = CommandRecord {
            id: command_id.clone(),
            sandbox_id: sandbox.id.clone(),
            attachment_token_hash: hash_token(&token),
            attachment_expires_at: expires_at,
            idempotency_key: idempotency_key.clone(),
            request_hash: request_hash.clone(),
            guest_restarted: false,
        };
        match self.store().insert_command(&record).await {
            Ok(()) => {}
            // A concurrent request with the same key won the insert: this one is its retry.
            Err(StoreError::Conflict(_)) if idempotency_key.is_some() => {
                let key = idempotency_key.as_deref().unwrap_or_default();
                let found = self
                    .store()
                    .command_by_idempotency_key(&sandbox.id, key)
                    .await?
                    .ok_or_else(|| {
                        ServiceError::Internal(format!("command key {key:?} conflicts but is gone"))
                    })?;
                return self.replay_command(found, request_hash.as_deref()).await;
            }
            Err(e) => return Err(e.into()),
        }
        crate::metrics::command_created();
        let spawn = SpawnRequest {
            command_id: command_id.clone(),
            program,
            env,
            cwd: Some(cove_node_api::SandboxPath(cwd.into_bytes())),
            user: Some(user),
            stdin: req.stdin || pty.is_some(),
            timeout_ms,
            pty,
        };
        let info = match self.node().spawn(&sandbox.id, spawn).await {
            Ok(info) => info,
            Err(e) => {
                self.store().delete_command(&command_id).await?;
                return Err(from_node(e, &sandbox.id));
            }
        };
        info!(sandbox_id = %sandbox.id, command_id = %command_id, pid = info.pid, "command started");
        Ok(CreateCommandResponse {
            command: to_api(&sandbox.id, info),
            attachment: self.attachment(&command_id, token, expires_at),
        })
    }

    /// Answers a retried create with the command the first attempt started and a new token.
    async fn replay_command(
        &self,
        found: CommandRecord,
        request_hash: Option<&str>,
    ) -> Result<CreateCommandResponse, ServiceError> {
        if found.request_hash.as_deref() != request_hash {
            return Err(ServiceError::IdempotencyMismatch);
        }
        if found.guest_restarted {
            return Err(ServiceError::GuestRestarted(format!(
                "command {} was created with this Idempotency-Key before the sandbox's processes \
                 restarted; whether it ran cannot be established",
                found.id
            )));
        }
        let sid = &found.sandbox_id;
        let until = tokio::time::Instant::now() + REPLAY_WAIT;
        let info = loop {
            match self.node().command(sid, &found.id).await {
                Ok(info) => break info,
                // The first attempt is still starting, or its start failed and removes the row.
                Err(cove_node_api::NodeError::CommandNotFound(_))
                    if tokio::time::Instant::now() < until =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    if self.store().get_command(&found.id).await.is_err() {
                        return Err(ServiceError::Unavailable(
                            "the first attempt with this Idempotency-Key failed to start; retry"
                                .into(),
                        ));
                    }
                }
                Err(e) => return Err(from_node(e, sid)),
            }
        };
        let token = new_token();
        let expires_at = self.attachment_expiry();
        self.store()
            .set_attachment(&found.id, &hash_token(&token), expires_at)
            .await?;
        info!(sandbox_id = %sid, command_id = %found.id, "command create replayed");
        Ok(CreateCommandResponse {
            command: to_api(sid, info),
            attachment: self.attachment(&found.id, token, expires_at),
        })
    }

    fn attachment_expiry(&self) -> DateTime<Utc> {
        Utc::now()
            + ChronoDuration::from_std(self.inner.cfg.attachment_ttl)
                .unwrap_or(ChronoDuration::hours(1))
    }

    fn attachment(&self, command_id: &str, token: String, expires_at: DateTime<Utc>) -> Attachment {
        Attachment {
            url: format!(
                "{}/v1/attach/{command_id}",
                self.inner.cfg.data_plane_url.trim_end_matches('/')
            ),
            token,
            expires_at,
        }
    }

    pub(crate) async fn command_record(
        &self,
        sandbox_id: &str,
        cid: &str,
    ) -> Result<CommandRecord, ServiceError> {
        let found = self.store().get_command(cid).await;
        let ended = match &found {
            Ok(r) if r.sandbox_id == sandbox_id && !r.guest_restarted => {
                return found.map_err(Into::into)
            }
            // A guest-restarted row is only a marker for its idempotency key.
            Ok(r) => r.sandbox_id == sandbox_id,
            Err(StoreError::NotFound) => false,
            Err(_) => return found.map_err(Into::into),
        };
        // The sandbox's processes restarted in a repair: say so rather than "not found" (a
        // command whose row was already removed by the restart cannot be told from a mistyped
        // id, so both get the repair's reason).
        if let Some(why) = self.inner.repairs.restarted(sandbox_id) {
            if ended || found.is_err() {
                return Err(ServiceError::GuestRestarted(format!(
                    "command {cid} is not running in sandbox {sandbox_id}: its guest agent \
                     failed ({why}) and the node restarted the sandbox's processes on its files; \
                     commands that ran then ended"
                )));
            }
        }
        Err(ServiceError::CommandNotFound(cid.to_string()))
    }

    /// A command's state; with `wait`, returns once it exits or `wait` (≤ 60 s) elapses.
    pub async fn get_command(
        &self,
        sandbox_id: &str,
        cid: &str,
        wait: Option<std::time::Duration>,
    ) -> Result<Command, ServiceError> {
        self.running_sandbox(sandbox_id).await?;
        self.command_record(sandbox_id, cid).await?;
        let info = self.node().command(sandbox_id, cid).await;
        let mut info = info.map_err(|e| from_node(e, sandbox_id))?;
        if let Some(wait) = wait {
            let until = tokio::time::Instant::now() + wait.min(crate::operations::MAX_WAIT);
            let mut step = std::time::Duration::from_millis(5);
            while info.state == CommandState::Running && tokio::time::Instant::now() < until {
                tokio::time::sleep(step).await;
                step = (step * 2).min(std::time::Duration::from_millis(200));
                info = self
                    .node()
                    .command(sandbox_id, cid)
                    .await
                    .map_err(|e| from_node(e, sandbox_id))?;
            }
        }
        Ok(to_api(sandbox_id, info))
    }

    /// Every command the sandbox keeps (running, and ended until deleted), oldest first; only
    /// those in `state` when given.
    pub async fn list_commands(
        &self,
        sandbox_id: &str,
        state: Option<CommandState>,
    ) -> Result<CommandList, ServiceError> {
        self.running_sandbox(sandbox_id).await?;
        let infos = self
            .node()
            .commands(sandbox_id)
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        Ok(CommandList {
            commands: infos
                .into_iter()
                .map(|i| to_api(sandbox_id, i))
                .filter(|c| state.is_none_or(|s| c.state == s))
                .collect(),
        })
    }

    /// Forgets an ended command: its kept output is deleted and its id is unknown afterwards.
    /// `409 failed_precondition` while it runs.
    pub async fn forget_command(&self, sandbox_id: &str, cid: &str) -> Result<(), ServiceError> {
        self.running_sandbox(sandbox_id).await?;
        self.command_record(sandbox_id, cid).await?;
        self.node()
            .forget(sandbox_id, cid)
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        self.store().delete_command(cid).await?;
        info!(sandbox_id, command_id = cid, "command forgotten");
        Ok(())
    }

    /// Resizes the terminal of a pty command.
    pub async fn resize_command(
        &self,
        sandbox_id: &str,
        cid: &str,
        cols: u16,
        rows: u16,
    ) -> Result<(), ServiceError> {
        if cols == 0 || rows == 0 {
            return Err(InvalidInput::new("cols", "cols and rows must be at least 1").into());
        }
        self.running_sandbox(sandbox_id).await?;
        self.node()
            .resize(sandbox_id, cid, cove_node_api::PtySize { cols, rows })
            .await
            .map_err(|e| from_node(e, sandbox_id))
    }

    /// Delivers a signal as-is to the command's process group.
    pub async fn signal_command(
        &self,
        sandbox_id: &str,
        cid: &str,
        signal: &str,
    ) -> Result<Command, ServiceError> {
        let sig = signals::parse(signal)
            .ok_or_else(|| InvalidInput::new("signal", format!("unknown signal {signal:?}")))?;
        self.running_sandbox(sandbox_id).await?;
        self.command_record(sandbox_id, cid).await?;
        self.node()
            .signal(sandbox_id, cid, sig)
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        self.get_command(sandbox_id, cid, None).await
    }

    /// Kills the command's process tree (SIGTERM, grace, SIGKILL); returns once it is gone.
    pub async fn kill_command(
        &self,
        sandbox_id: &str,
        cid: &str,
        grace_ms: Option<u64>,
    ) -> Result<Command, ServiceError> {
        let grace = grace_ms.unwrap_or(DEFAULT_KILL_GRACE_MS);
        if grace > MAX_KILL_GRACE_MS {
            return Err(InvalidInput::new("grace_ms", "must be at most 60000").into());
        }
        self.running_sandbox(sandbox_id).await?;
        self.command_record(sandbox_id, cid).await?;
        let info = self
            .node()
            .kill(sandbox_id, cid, grace)
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        Ok(to_api(sandbox_id, info))
    }

    /// Issues a new attachment token for a command; the previous one stops working.
    pub async fn new_attachment(
        &self,
        sandbox_id: &str,
        cid: &str,
    ) -> Result<Attachment, ServiceError> {
        self.get_sandbox(sandbox_id).await?;
        self.command_record(sandbox_id, cid).await?;
        let token = new_token();
        let expires_at = self.attachment_expiry();
        self.store()
            .set_attachment(cid, &hash_token(&token), expires_at)
            .await?;
        Ok(self.attachment(cid, token, expires_at))
    }

    /// Checks a data-plane token for command `cid`; returns the command's sandbox id.
    pub async fn authorize_attachment(
        &self,
        cid: &str,
        token: &str,
    ) -> Result<String, ServiceError> {
        let denied = || ServiceError::Unauthorized("invalid or expired attachment token".into());
        let record = match self.store().get_command(cid).await {
            Ok(r) => r,
            Err(StoreError::NotFound) => return Err(denied()),
            Err(e) => return Err(e.into()),
        };
        let ok = constant_time_eq(
            record.attachment_token_hash.as_bytes(),
            hash_token(token).as_bytes(),
        );
        if !ok || record.guest_restarted || record.attachment_expires_at < Utc::now() {
            return Err(denied());
        }
        Ok(record.sandbox_id)
    }
}

/// SHA-256 (hex) of a command create's body as parsed (defaults filled in, `env` sorted), so
/// a retry that spells the same request differently still matches.
fn command_request_hash(req: &CreateCommandRequest) -> String {
    use sha2::{Digest, Sha256};
    let body = serde_json::to_vec(req).unwrap_or_default();
    format!("{:x}", Sha256::digest(&body))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

fn ms_to_time(ms: u64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms as i64)
        .single()
        .unwrap_or_default()
}

/// Converts the guest's view of a command to the API's.
pub(crate) fn to_api(sandbox_id: &str, i: CommandInfo) -> Command {
    Command {
        id: i.command_id,
        sandbox_id: sandbox_id.to_string(),
        argv: i.argv,
        user: i.user,
        cwd: i.cwd,
        pid: i.pid,
        state: i.state,
        exit_code: i.exit_code,
        signal: i.signal.map(signals::name),
        timed_out: i.timed_out,
        truncated: i.truncated,
        output_bytes: i.output_bytes,
        stdin_open: i.stdin_open,
        started_at: ms_to_time(i.started_at_ms),
        ended_at: i.ended_at_ms.map(ms_to_time),
        oom_killed: i.oom_killed,
        pty: i.pty,
    }
}
