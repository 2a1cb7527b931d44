//! [`GuestClient`]: unary calls over the shared connection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cove_guest_protocol::{
    CommandInfo, FileInfo, GetXattrsRequest, GuestPath, PtySize, Request, Response,
    SetXattrsRequest, SpawnRequest, XattrValue, MAX_CHUNK_BYTES, MAX_XATTR_BYTES, MAX_XATTR_PATHS,
    MIN_PROTOCOL_VERSION, XATTRS_VERSION,
};
use cove_runtime::GuestConnector;

use super::connection::{kind, Conn};
use super::error::GuestError;

/// Default answer timeout of a unary call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of one connection attempt made on behalf of a call.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between attempts of [`GuestClient::connect`].
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// A client of one sandbox's guest agent. Cheap to clone; clones share one lazily (re)connected
/// connection for unary calls, while streams (attach, file reads and writes) open their own.
#[derive(Clone)]
pub struct GuestClient {
    inner: Arc<Shared>,
}

struct Shared {
    connector: Arc<dyn GuestConnector>,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
}

impl std::fmt::Debug for GuestClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestClient")
            .field("connector", &self.inner.connector)
            .finish()
    }
}

impl GuestClient {
    /// A client of the agent that `connector` reaches. No I/O happens here.
    pub fn new(connector: Arc<dyn GuestConnector>) -> Self {
        Self {
            inner: Arc::new(Shared {
                connector,
                conn: tokio::sync::Mutex::new(None),
            }),
        }
    }

    pub(super) fn connector(&self) -> &dyn GuestConnector {
        self.inner.connector.as_ref()
    }

    /// Retries connecting until the agent answers `Hello` or `timeout` passes (then
    /// `Unavailable` with the last failure). A version mismatch fails at once.
    pub async fn connect(&self, timeout: Duration) -> Result<(), GuestError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let err = match self
                .connection(left.clamp(Duration::from_millis(10), CONNECT_TIMEOUT))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e @ (GuestError::Guest { .. } | GuestError::Protocol(_))) => return Err(e),
                Err(e) => e,
            };
            if Instant::now() + RETRY_PAUSE >= deadline {
                return Err(GuestError::Unavailable(format!(
                    "guest agent not ready within {timeout:?}: {err}"
                )));
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// The shared connection, (re)connecting when there is none or it broke.
    async fn connection(&self, timeout: Duration) -> Result<Arc<Conn>, GuestError> {
        let mut slot = self.inner.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.is_broken() {
                return Ok(c.clone());
            }
        }
        *slot = None;
        let conn = Arc::new(Conn::connect(self.inner.connector.as_ref(), timeout).await?);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Sends `request` and maps its answer with `expect` (an unexpected kind breaks the
    /// connection). A guest error becomes [`GuestError::Guest`].
    async fn call<T>(
        &self,
        request: Request,
        timeout: Duration,
        expect: impl FnOnce(Response) -> Result<T, &'static str>,
    ) -> Result<T, GuestError> {
        self.call_since(MIN_PROTOCOL_VERSION, request, timeout, expect)
            .await
    }

    /// [`GuestClient::call`] for a request protocol version `since` added: an agent speaking
    /// an older version is [`GuestError::TooOld`] without sending anything.
    async fn call_since<T>(
        &self,
        since: u32,
        request: Request,
        timeout: Duration,
        expect: impl FnOnce(Response) -> Result<T, &'static str>,
    ) -> Result<T, GuestError> {
        let conn = self.connection(CONNECT_TIMEOUT).await?;
        if conn.version() < since {
            return Err(GuestError::TooOld(format!(
                "the sandbox's guest agent speaks protocol version {} and lacks this call \
                 (version {since}); restart the sandbox to give it the current agent",
                conn.version()
            )));
        }
        let mut call = conn.register()?;
        let response = tokio::time::timeout(timeout, async {
            conn.send(&call, request).await?;
            call.response().await
        })
        .await
        .map_err(|_| GuestError::Timeout)??;
        match response {
            Response::Error { code, message } => Err(GuestError::from_guest(code, message)),
            other => expect(other).map_err(|k| {
                let err = GuestError::Protocol(format!("unexpected response {k}"));
                conn.fail(err.clone());
                err
            }),
        }
    }

    /// Checks that the agent answers.
    pub async fn ping(&self) -> Result<(), GuestError> {
        self.call(Request::Ping, CALL_TIMEOUT, ok).await
    }

    /// Starts a command; returns its state just after the start. An agent of protocol version
    /// [`cove_guest_protocol::SPAWN_INFO_VERSION`] or later says it in its answer (one round trip); an older one
    /// answers with the pid alone, and the state is asked for after it.
    pub async fn spawn(&self, req: SpawnRequest) -> Result<CommandInfo, GuestError> {
        let id = req.command_id.clone();
        let answer = self
            .call(Request::Spawn(req), CALL_TIMEOUT, |r| match r {
                Response::SpawnedCommand(info) if info.command_id == id => Ok(Some(info)),
                Response::SpawnedCommand(_) => Err("SpawnedCommand of another command"),
                Response::Spawned { .. } => Ok(None),
                r => Err(kind(&r)),
            })
            .await?;
        match answer {
            Some(info) => Ok(info),
            None => self.get_command(&id).await,
        }
    }

    /// Writes to a command's stdin (in frames of at most [`MAX_CHUNK_BYTES`]). Waits while the
    /// process does not read; `FailedPrecondition` when it has no stdin, stdin is closed, or the
    /// process no longer reads it.
    pub async fn stdin_write(&self, command_id: &str, data: Bytes) -> Result<(), GuestError> {
        if data.is_empty() {
            // Still ask: the answer says whether stdin is writable.
            let request = Request::StdinWrite {
                command_id: command_id.to_string(),
                data: Vec::new(),
            };
            return self.call(request, CALL_TIMEOUT, ok).await;
        }
        for chunk in data.chunks(MAX_CHUNK_BYTES) {
            let request = Request::StdinWrite {
                command_id: command_id.to_string(),
                data: chunk.to_vec(),
            };
            self.call(request, CALL_TIMEOUT, ok).await?;
        }
        Ok(())
    }

    /// Closes a command's stdin.
    pub async fn stdin_close(&self, command_id: &str) -> Result<(), GuestError> {
        let request = Request::StdinClose {
            command_id: command_id.to_string(),
        };
        self.call(request, CALL_TIMEOUT, ok).await
    }

    /// Sends a signal (Linux number) as-is to the command's process group.
    pub async fn signal(&self, command_id: &str, signal: i32) -> Result<(), GuestError> {
        let request = Request::Signal {
            command_id: command_id.to_string(),
            signal,
        };
        self.call(request, CALL_TIMEOUT, ok).await
    }

    /// Kills the command's whole tree (SIGTERM, SIGKILL after `grace`); answers once nothing of
    /// it runs. Times out after `grace` + 30 s.
    pub async fn kill(&self, command_id: &str, grace: Duration) -> Result<CommandInfo, GuestError> {
        let request = Request::Kill {
            command_id: command_id.to_string(),
            grace_ms: grace.as_millis().min(u64::MAX as u128) as u64,
        };
        self.call(request, grace.saturating_add(CALL_TIMEOUT), command)
            .await
    }

    /// One command's state.
    pub async fn get_command(&self, command_id: &str) -> Result<CommandInfo, GuestError> {
        let request = Request::GetCommand {
            command_id: command_id.to_string(),
        };
        self.call(request, CALL_TIMEOUT, command).await
    }

    /// Every command the agent keeps.
    pub async fn list_commands(&self) -> Result<Vec<CommandInfo>, GuestError> {
        self.call(Request::ListCommands, CALL_TIMEOUT, |r| match r {
            Response::Commands(v) => Ok(v),
            r => Err(kind(&r)),
        })
        .await
    }

    /// Resizes the terminal of a command started with a pty.
    pub async fn resize(&self, command_id: &str, size: PtySize) -> Result<(), GuestError> {
        let request = Request::Resize {
            command_id: command_id.to_string(),
            size,
        };
        self.call(request, CALL_TIMEOUT, ok).await
    }

    /// Forgets a finished command and its kept output.
    pub async fn forget_command(&self, command_id: &str) -> Result<(), GuestError> {
        let request = Request::ForgetCommand {
            command_id: command_id.to_string(),
        };
        self.call(request, CALL_TIMEOUT, ok).await
    }

    /// `lstat` of a path.
    pub async fn stat(
        &self,
        path: GuestPath,
        user: Option<String>,
    ) -> Result<FileInfo, GuestError> {
        self.call(Request::Stat { path, user }, CALL_TIMEOUT, file_info)
            .await
    }

    /// Entries below a directory, `depth` levels deep (1 = its own entries).
    pub async fn list_dir(
        &self,
        path: GuestPath,
        user: Option<String>,
        depth: u32,
    ) -> Result<Vec<FileInfo>, GuestError> {
        self.call(
            Request::ListDir { path, user, depth },
            CALL_TIMEOUT,
            |r| match r {
                Response::Entries(v) => Ok(v),
                r => Err(kind(&r)),
            },
        )
        .await
    }

    /// `mkdir -p`, created directories owned by `user`.
    pub async fn make_dir(
        &self,
        path: GuestPath,
        user: Option<String>,
    ) -> Result<FileInfo, GuestError> {
        self.call(Request::MakeDir { path, user }, CALL_TIMEOUT, file_info)
            .await
    }

    /// Removes a file, a symlink (not its target) or a directory tree.
    pub async fn remove(&self, path: GuestPath, user: Option<String>) -> Result<(), GuestError> {
        self.call(Request::Remove { path, user }, CALL_TIMEOUT, ok)
            .await
    }

    /// Replaces the extended attributes under `namespace` of a path (protocol v2).
    pub async fn set_xattrs(&self, req: SetXattrsRequest) -> Result<(), GuestError> {
        self.call_since(XATTRS_VERSION, Request::SetXattrs(req), CALL_TIMEOUT, ok)
            .await
    }

    /// The extended attributes under `namespace` of each path, in order (protocol v2). Asks
    /// in batches of [`MAX_XATTR_PATHS`]; an answer of the wrong length or over the size
    /// bound breaks the connection.
    pub async fn get_xattrs(
        &self,
        paths: Vec<GuestPath>,
        user: Option<String>,
        namespace: String,
    ) -> Result<Vec<BTreeMap<String, XattrValue>>, GuestError> {
        let mut out = Vec::with_capacity(paths.len());
        for batch in paths.chunks(MAX_XATTR_PATHS) {
            let want = batch.len();
            let request = Request::GetXattrs(GetXattrsRequest {
                paths: batch.to_vec(),
                user: user.clone(),
                namespace: namespace.clone(),
            });
            let maps = self
                .call_since(XATTRS_VERSION, request, CALL_TIMEOUT, |r| match r {
                    Response::Xattrs(v)
                        if v.len() == want
                            && v.iter().all(|m| xattr_bytes(m) <= MAX_XATTR_BYTES) =>
                    {
                        Ok(v)
                    }
                    Response::Xattrs(_) => Err("Xattrs of the wrong shape"),
                    r => Err(kind(&r)),
                })
                .await?;
            out.extend(maps);
        }
        Ok(out)
    }

    /// Renames a path; returns the destination's metadata.
    pub async fn rename(
        &self,
        from: GuestPath,
        to: GuestPath,
        user: Option<String>,
    ) -> Result<FileInfo, GuestError> {
        self.call(Request::Rename { from, to, user }, CALL_TIMEOUT, file_info)
            .await
    }
}

/// Bytes of keys and values in one path's attribute map (the guest bounds it).
fn xattr_bytes(m: &BTreeMap<String, XattrValue>) -> usize {
    m.iter().map(|(k, v)| k.len() + v.0.len()).sum()
}

fn ok(r: Response) -> Result<(), &'static str> {
    match r {
        Response::Ok => Ok(()),
        r => Err(kind(&r)),
    }
}

fn command(r: Response) -> Result<CommandInfo, &'static str> {
    match r {
        Response::Command(c) => Ok(c),
        r => Err(kind(&r)),
    }
}

fn file_info(r: Response) -> Result<FileInfo, &'static str> {
    match r {
        Response::FileInfo(f) => Ok(f),
        r => Err(kind(&r)),
    }
}
