//! Sandbox logs: `GET /sandboxes/{id}/logs` (v1: `start` in ms, `limit`) and
//! `GET /v2/sandboxes/{id}/logs` (`cursor` in ms, `limit`, `direction`, `level`, `search`).
//!
//! E2B's logs are what its in-sandbox daemon records about the sandbox. Cove keeps no daemon
//! log; what it keeps about a sandbox, and what these answer with, is:
//!
//! - one `info` entry when the sandbox was created (`event: sandbox.created`, its template);
//! - per command the sandbox still keeps (running, or ended and not yet reaped): an `info`
//!   entry when it started (`event: process.start`, `pid`, `cmd`, `user`, `cwd`, `commandID`)
//!   and, once it ended, one with its status in envd's words (`exit status 2`,
//!   `signal: killed`; `event: process.end`, `exitCode` or `signal`), `info` for exit 0 and
//!   `warn` otherwise.
//!
//! A paused (suspended) sandbox has no commands on a node: only its creation entry. Command
//! output is not included (read it through the process API).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, TimeZone, Utc};
use cove_api_types::{Command, CommandState, Sandbox};
use serde::Deserialize;
use serde_json::Value;

use super::{e2b_sandbox, rfc3339};
use crate::error::RestError;
use crate::model::logs::{LogEntry, LogLine, LogsV1, LogsV2};
use crate::E2b;

/// Most entries one call answers (E2B's default and bound).
pub const MAX_LOG_ENTRIES: usize = 1000;

/// A log level, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }

    fn parse(s: &str) -> Result<Level, RestError> {
        match s {
            "debug" => Ok(Level::Debug),
            "info" => Ok(Level::Info),
            "warn" => Ok(Level::Warn),
            "error" => Ok(Level::Error),
            other => Err(RestError::new(
                StatusCode::BAD_REQUEST,
                format!("level must be debug, info, warn or error, not {other:?}"),
            )),
        }
    }
}

/// One entry.
#[derive(Debug, Clone)]
struct Entry {
    at: DateTime<Utc>,
    level: Level,
    message: String,
    fields: serde_json::Map<String, Value>,
}

impl Entry {
    fn wire(&self) -> LogEntry {
        LogEntry {
            timestamp: rfc3339(self.at),
            message: self.message.clone(),
            level: self.level.as_str(),
            fields: self.fields.clone(),
        }
    }
}

fn fields(pairs: &[(&str, String)]) -> serde_json::Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.clone())))
        .collect()
}

/// The entries of a command: its start, and its end once it ended.
fn command_entries(c: &Command) -> Vec<Entry> {
    let cmd = c.argv.join(" ");
    let mut out = vec![Entry {
        at: c.started_at,
        level: Level::Info,
        message: format!("process started: {cmd}"),
        fields: fields(&[
            ("event", "process.start".into()),
            ("commandID", c.id.clone()),
            ("pid", c.pid.to_string()),
            ("cmd", cmd.clone()),
            ("user", c.user.clone()),
            ("cwd", c.cwd.clone()),
        ]),
    }];
    if c.state == CommandState::Exited {
        let end = crate::envd::process::end_event(c);
        let mut f = vec![
            ("event", "process.end".to_string()),
            ("commandID", c.id.clone()),
            ("pid", c.pid.to_string()),
        ];
        match (&c.exit_code, &c.signal) {
            (Some(code), _) => f.push(("exitCode", code.to_string())),
            (None, Some(sig)) => f.push(("signal", sig.clone())),
            (None, None) => {}
        }
        out.push(Entry {
            at: c.ended_at.unwrap_or(c.started_at),
            level: if c.exit_code == Some(0) {
                Level::Info
            } else {
                Level::Warn
            },
            message: format!("process ended: {}", end.status),
            fields: fields(&f),
        });
    }
    out
}

/// Every entry Cove has for `s`, oldest first.
async fn entries(e2b: &E2b, s: &Sandbox) -> Vec<Entry> {
    let mut out = vec![Entry {
        at: s.created_at,
        level: Level::Info,
        message: format!("sandbox created from template {}", s.template),
        fields: fields(&[
            ("event", "sandbox.created".into()),
            ("template", s.template.clone()),
        ]),
    }];
    // Only a running sandbox has its commands on a node.
    if let Ok(list) = e2b.cp.list_commands(&s.id, None).await {
        out.extend(list.commands.iter().flat_map(command_entries));
    }
    out.sort_by_key(|e| e.at);
    out
}

fn millis(ms: i64) -> Result<DateTime<Utc>, RestError> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| RestError::new(StatusCode::BAD_REQUEST, "a time must be Unix milliseconds"))
}

fn limit_of(limit: Option<usize>) -> Result<usize, RestError> {
    match limit {
        None => Ok(MAX_LOG_ENTRIES),
        Some(n) if (1..=MAX_LOG_ENTRIES).contains(&n) => Ok(n),
        Some(_) => Err(RestError::new(
            StatusCode::BAD_REQUEST,
            format!("limit must be between 1 and {MAX_LOG_ENTRIES}"),
        )),
    }
}

/// The query of v1.
#[derive(Debug, Default, Deserialize)]
pub(super) struct V1Query {
    start: Option<i64>,
    limit: Option<usize>,
}

/// `GET /sandboxes/{id}/logs`: entries from `start` on, oldest first, as plain `logs` lines
/// and structured `logEntries`.
pub(super) async fn logs_v1(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    Query(q): Query<V1Query>,
) -> Result<Json<LogsV1>, RestError> {
    let s = e2b_sandbox(&e2b, &id).await?;
    let limit = limit_of(q.limit)?;
    let from = q.start.map(millis).transpose()?;
    let picked: Vec<Entry> = entries(&e2b, &s)
        .await
        .into_iter()
        .filter(|e| from.is_none_or(|t| e.at >= t))
        .take(limit)
        .collect();
    let logs = picked
        .iter()
        .map(|e| LogLine {
            timestamp: rfc3339(e.at),
            line: e.message.clone(),
        })
        .collect();
    let log_entries = picked.iter().map(Entry::wire).collect();
    Ok(Json(LogsV1 { logs, log_entries }))
}

/// The query of v2.
#[derive(Debug, Default, Deserialize)]
pub(super) struct V2Query {
    cursor: Option<i64>,
    limit: Option<usize>,
    direction: Option<String>,
    level: Option<String>,
    search: Option<String>,
}

/// `GET /v2/sandboxes/{id}/logs`: `forward` (default) from `cursor` on, oldest first;
/// `backward` up to `cursor`, newest first; only entries at `level` or above and whose
/// message contains `search`.
pub(super) async fn logs_v2(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    Query(q): Query<V2Query>,
) -> Result<Json<LogsV2>, RestError> {
    let s = e2b_sandbox(&e2b, &id).await?;
    let limit = limit_of(q.limit)?;
    let cursor = q.cursor.map(millis).transpose()?;
    let min = q.level.as_deref().map(Level::parse).transpose()?;
    let backward = match q.direction.as_deref() {
        None | Some("forward") => false,
        Some("backward") => true,
        Some(other) => {
            return Err(RestError::new(
                StatusCode::BAD_REQUEST,
                format!("direction must be forward or backward, not {other:?}"),
            ))
        }
    };
    let mut all = entries(&e2b, &s).await;
    if backward {
        all.reverse();
    }
    let logs: Vec<LogEntry> = all
        .iter()
        .filter(|e| match cursor {
            None => true,
            Some(t) if backward => e.at <= t,
            Some(t) => e.at >= t,
        })
        .filter(|e| min.is_none_or(|m| e.level >= m))
        .filter(|e| q.search.as_deref().is_none_or(|w| e.message.contains(w)))
        .take(limit)
        .map(Entry::wire)
        .collect();
    Ok(Json(LogsV2 { logs }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(exit_code: Option<i32>, signal: Option<&str>) -> Command {
        let t = Utc.timestamp_millis_opt(1_000).single().expect("time");
        Command {
            id: "cmd-abcdefgh01234567".into(),
            sandbox_id: "sb-abcdefgh01234567".into(),
            argv: vec![
                "/bin/bash".into(),
                "-l".into(),
                "-c".into(),
                "exit 2".into(),
            ],
            user: "user".into(),
            cwd: "/home/user".into(),
            pid: 42,
            state: CommandState::Exited,
            exit_code,
            signal: signal.map(str::to_string),
            timed_out: false,
            truncated: false,
            output_bytes: 0,
            stdin_open: false,
            started_at: t,
            ended_at: Some(t + chrono::Duration::seconds(1)),
            oom_killed: false,
            pty: false,
        }
    }

    #[test]
    fn commands_read_as_start_and_end_entries() {
        let e = command_entries(&cmd(Some(2), None));
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].message, "process started: /bin/bash -l -c exit 2");
        assert_eq!(e[1].message, "process ended: exit status 2");
        assert_eq!(e[1].level, Level::Warn);
        assert_eq!(e[1].fields["exitCode"], "2");
        let killed = command_entries(&cmd(None, Some("SIGKILL")));
        assert_eq!(killed[1].message, "process ended: signal: killed");
        assert!(Level::parse("fatal").is_err());
        assert!(Level::Warn > Level::Info);
    }
}
