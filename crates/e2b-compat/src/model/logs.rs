//! Sandbox logs.

use serde::Serialize;
use serde_json::{Map, Value};

/// `SandboxLogEntry`: one structured entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogEntry {
    /// When it happened, RFC 3339.
    pub timestamp: String,
    /// What happened.
    pub message: String,
    /// `debug`, `info`, `warn` or `error`.
    pub level: &'static str,
    /// Details as string fields (`event`, `cmd`, ...).
    pub fields: Map<String, Value>,
}

/// `SandboxLog`: one entry as a plain line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    /// When it happened, RFC 3339.
    pub timestamp: String,
    /// The entry's message.
    pub line: String,
}

/// `SandboxLogs`: the answer of `GET /sandboxes/{id}/logs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogsV1 {
    /// The entries as lines.
    pub logs: Vec<LogLine>,
    /// The same entries, structured.
    pub log_entries: Vec<LogEntry>,
}

/// `SandboxLogsV2Response`: the answer of `GET /v2/sandboxes/{id}/logs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogsV2 {
    /// The entries, in the order asked for.
    pub logs: Vec<LogEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::assert_wire;

    #[test]
    fn both_log_answers() {
        let entry = LogEntry {
            timestamp: "t".into(),
            message: "m".into(),
            level: "info",
            fields: Map::from_iter([("event".to_string(), Value::from("process.start"))]),
        };
        let entry_json = r#"{"timestamp":"t","message":"m","level":"info",
            "fields":{"event":"process.start"}}"#;
        assert_wire(
            &LogsV1 {
                logs: vec![LogLine {
                    timestamp: "t".into(),
                    line: "m".into(),
                }],
                log_entries: vec![entry.clone()],
            },
            &format!(r#"{{"logs":[{{"timestamp":"t","line":"m"}}],"logEntries":[{entry_json}]}}"#),
        );
        assert_wire(
            &LogsV2 { logs: vec![entry] },
            &format!(r#"{{"logs":[{entry_json}]}}"#),
        );
    }
}
