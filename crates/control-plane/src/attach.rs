//! The data plane as services: a command's output stream from an offset (following it or not),
//! stdin writes and close, and terminal sessions. The HTTP data plane (`cove-http`'s
//! `data_plane.rs` and `pty.rs`) and the E2B surface only frame what these return.

use bytes::Bytes;
use cove_api_types::Command;
use futures::stream::BoxStream;
use futures::StreamExt;

use crate::error::from_node;
use crate::{ControlPlane, ServiceError};

/// Which output stream bytes came from (a terminal's output comes as [`OutputSource::Stdout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputSource {
    /// Standard output (or the terminal).
    Stdout,
    /// Standard error.
    Stderr,
}

/// One event of a command's output as the services give it.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputEvent {
    /// Bytes at `offset` of the command's combined output.
    Output {
        /// Offset of the first byte in the combined output.
        offset: u64,
        /// Source stream.
        source: OutputSource,
        /// The bytes.
        data: Bytes,
    },
    /// Bytes `[offset, offset + len)` were dropped (the middle of a long output).
    Gap {
        /// Offset of the first dropped byte.
        offset: u64,
        /// Number of dropped bytes.
        len: u64,
    },
    /// The command ended and every byte was sent: its final state.
    Exited(Box<Command>),
    /// Without `follow`: everything kept so far was sent while the command still runs.
    End,
}

/// A command's output events; an error item ends the stream (the node or the guest broke off).
pub type OutputStream = BoxStream<'static, Result<OutputEvent, ServiceError>>;

impl ControlPlane {
    /// Streams the output of command `cid` of a running sandbox from byte `offset`. With
    /// `follow` the stream ends with [`OutputEvent::Exited`]; without, with `Exited` or
    /// [`OutputEvent::End`] once the output kept so far was sent. Errors: the sandbox is not
    /// running, or the command is unknown.
    pub async fn attach_output(
        &self,
        sandbox_id: &str,
        cid: &str,
        offset: u64,
        follow: bool,
    ) -> Result<OutputStream, ServiceError> {
        self.running_sandbox(sandbox_id).await?;
        self.output_stream(sandbox_id, cid, offset, follow).await
    }

    async fn output_stream(
        &self,
        sandbox_id: &str,
        cid: &str,
        offset: u64,
        follow: bool,
    ) -> Result<OutputStream, ServiceError> {
        let events = self
            .node()
            .attach(sandbox_id, cid, offset, follow)
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        let sid = sandbox_id.to_string();
        let cp = self.clone();
        Ok(events
            .then(move |ev| {
                let (cp, sid) = (cp.clone(), sid.clone());
                async move {
                    use cove_node_api::AttachEvent as A;
                    match ev {
                        Ok(A::Output {
                            offset,
                            stream,
                            data,
                        }) => {
                            let (source, name) = match stream {
                                cove_node_api::OutputStream::Stdout => {
                                    (OutputSource::Stdout, "stdout")
                                }
                                cove_node_api::OutputStream::Stderr => {
                                    (OutputSource::Stderr, "stderr")
                                }
                            };
                            crate::metrics::data_plane_bytes(name, data.len());
                            Ok(OutputEvent::Output {
                                offset,
                                source,
                                data,
                            })
                        }
                        Ok(A::Gap { offset, len }) => Ok(OutputEvent::Gap { offset, len }),
                        Ok(A::Exited(info)) => Ok(OutputEvent::Exited(Box::new(
                            crate::commands::to_api(&sid, info),
                        ))),
                        Ok(A::End) => Ok(OutputEvent::End),
                        Err(e @ cove_node_api::NodeError::AgentUnavailable(_)) => {
                            Err(cp.agent_gone(&sid, e).await)
                        }
                        Err(e) => Err(from_node(e, &sid)),
                    }
                }
            })
            .boxed())
    }

    /// The error that ends an output stream whose guest agent connection broke: when the agent
    /// is found dead or hung, `guest_restarted` with the reason (the command ended with it; the
    /// repair controller restarts the sandbox on its files), else the node's error as it is.
    async fn agent_gone(&self, sandbox_id: &str, e: cove_node_api::NodeError) -> ServiceError {
        const CHECK: std::time::Duration = std::time::Duration::from_secs(2);
        match self.node().check_agent(sandbox_id, CHECK).await {
            Ok(health @ cove_node_api::AgentHealth::Dead { .. }) => {
                let reason = health.reason().unwrap_or_default();
                ServiceError::GuestRestarted(format!(
                    "the sandbox's guest agent failed ({reason}): this command ended with it; \
                     the node repairs the sandbox and keeps its files"
                ))
            }
            _ => from_node(e, sandbox_id),
        }
    }

    /// Writes `data` to the stdin of command `cid` of a running sandbox.
    pub async fn write_stdin(
        &self,
        sandbox_id: &str,
        cid: &str,
        data: Bytes,
    ) -> Result<(), ServiceError> {
        self.running_sandbox(sandbox_id).await?;
        crate::metrics::data_plane_bytes("stdin", data.len());
        self.node()
            .stdin_write(sandbox_id, cid, data)
            .await
            .map_err(|e| from_node(e, sandbox_id))
    }

    /// Closes the stdin of command `cid` of a running sandbox (the command reads EOF).
    pub async fn close_stdin(&self, sandbox_id: &str, cid: &str) -> Result<(), ServiceError> {
        self.running_sandbox(sandbox_id).await?;
        self.node()
            .stdin_close(sandbox_id, cid)
            .await
            .map_err(|e| from_node(e, sandbox_id))
    }

    /// Opens a terminal session on command `cid`: its output from `offset`, followed.
    /// `failed_precondition` when the command does not run on a pty.
    pub async fn open_pty(
        &self,
        sandbox_id: &str,
        cid: &str,
        offset: u64,
    ) -> Result<OutputStream, ServiceError> {
        self.running_sandbox(sandbox_id).await?;
        let info = self
            .node()
            .command(sandbox_id, cid)
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        if !info.pty {
            return Err(ServiceError::FailedPrecondition(format!(
                "command {cid} does not run on a terminal (start it with pty: true)"
            )));
        }
        self.output_stream(sandbox_id, cid, offset, true).await
    }

    /// Keystrokes for the terminal of command `cid` of an open session ([`Self::open_pty`]):
    /// written without re-reading the sandbox for every frame.
    pub async fn pty_input(
        &self,
        sandbox_id: &str,
        cid: &str,
        data: Bytes,
    ) -> Result<(), ServiceError> {
        self.touch(sandbox_id);
        crate::metrics::data_plane_bytes("stdin", data.len());
        self.node()
            .stdin_write(sandbox_id, cid, data)
            .await
            .map_err(|e| from_node(e, sandbox_id))
    }
}
