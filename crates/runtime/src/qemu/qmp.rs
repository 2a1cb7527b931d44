//! A QMP (QEMU Machine Protocol) client: one connection per use, commands answered in order.
//!
//! QMP is line-delimited JSON on the VM's `qmp.sock`: a greeting, `qmp_capabilities`, then
//! `{"execute": ...}` → `{"return": ...}` or `{"error": {...}}`, with `{"event": ...}` lines
//! interleaved (collected, not awaited).

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// Longest wait for one QMP answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest QMP line accepted (QEMU's own answers are small).
const MAX_LINE: usize = 1 << 20;

/// Errors of a QMP exchange.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    /// The socket failed or closed.
    #[error("qmp: {0}")]
    Io(#[from] std::io::Error),
    /// QEMU answered with an error.
    #[error("qmp {command}: {class}: {desc}")]
    Command {
        /// The command.
        command: String,
        /// QMP error class.
        class: String,
        /// QEMU's description.
        desc: String,
    },
    /// Not QMP.
    #[error("qmp: unexpected answer: {0}")]
    Protocol(String),
    /// No answer in time.
    #[error("qmp: no answer within {0:?}")]
    Timeout(Duration),
}

/// One QMP connection, past the capabilities handshake.
pub struct Qmp {
    rd: BufReader<OwnedReadHalf>,
    wr: OwnedWriteHalf,
    /// Events seen so far (`event` names).
    pub events: Vec<String>,
}

impl Qmp {
    /// Connects to `socket` and negotiates capabilities.
    pub async fn connect(socket: &Path) -> Result<Qmp, QmpError> {
        let stream = tokio::time::timeout(ANSWER_TIMEOUT, UnixStream::connect(socket))
            .await
            .map_err(|_| QmpError::Timeout(ANSWER_TIMEOUT))??;
        let (rd, wr) = stream.into_split();
        let mut qmp = Qmp {
            rd: BufReader::new(rd),
            wr,
            events: Vec::new(),
        };
        let greeting = qmp.read_line().await?;
        if greeting.get("QMP").is_none() {
            return Err(QmpError::Protocol(greeting.to_string()));
        }
        qmp.execute("qmp_capabilities", Value::Null).await?;
        Ok(qmp)
    }

    /// Runs `command` with `arguments` (`Value::Null` for none) and returns its `return` value.
    pub async fn execute(&mut self, command: &str, arguments: Value) -> Result<Value, QmpError> {
        let msg = if arguments.is_null() {
            json!({ "execute": command })
        } else {
            json!({ "execute": command, "arguments": arguments })
        };
        let mut line = msg.to_string();
        line.push('\n');
        self.wr.write_all(line.as_bytes()).await?;
        loop {
            let v = self.read_line().await?;
            if let Some(ev) = v.get("event").and_then(Value::as_str) {
                self.events.push(ev.to_string());
                continue;
            }
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                return Err(QmpError::Command {
                    command: command.to_string(),
                    class: s("class"),
                    desc: s("desc"),
                });
            }
            return Err(QmpError::Protocol(v.to_string()));
        }
    }

    /// The VM's run state (`running`, `paused`, `inmigrate`, `postmigrate`, `shutdown`, ...).
    pub async fn status(&mut self) -> Result<String, QmpError> {
        let v = self.execute("query-status", Value::Null).await?;
        v.get("status")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| QmpError::Protocol(v.to_string()))
    }

    async fn read_line(&mut self) -> Result<Value, QmpError> {
        let mut line = String::new();
        let n = tokio::time::timeout(ANSWER_TIMEOUT, async {
            let mut limited = (&mut self.rd).take(MAX_LINE as u64);
            limited.read_line(&mut line).await
        })
        .await
        .map_err(|_| QmpError::Timeout(ANSWER_TIMEOUT))??;
        if n == 0 {
            return Err(QmpError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "QEMU closed the QMP socket",
            )));
        }
        serde_json::from_str(line.trim()).map_err(|e| QmpError::Protocol(format!("{e}: {line}")))
    }
}
