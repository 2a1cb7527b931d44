//! The envd messages in protobuf's JSON mapping (lowerCamelCase names, snake_case accepted on
//! input; `bytes` as standard base64; `int64` emitted as strings; enums by name, numbers
//! accepted; default values omitted). Only the fields Cove reads or writes are modelled;
//! unknown request fields are ignored, as protojson parsers do with `ignore_unknown_fields`.

use std::collections::BTreeMap;

use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `bytes` fields: base64 on the wire (standard with padding out; standard or URL-safe, with
/// or without padding, in).
pub mod b64 {
    use super::*;

    /// Serialises bytes as standard base64.
    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    /// Parses standard or URL-safe base64, padded or not.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        decode(&s).map_err(serde::de::Error::custom)
    }

    /// Decodes any of the accepted base64 forms.
    pub fn decode(s: &str) -> Result<Vec<u8>, String> {
        use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        let t = s.trim_end_matches('=');
        STANDARD_NO_PAD
            .decode(t)
            .or_else(|_| URL_SAFE_NO_PAD.decode(t))
            .map_err(|e| format!("invalid base64: {e}"))
    }
}

/// Serialises an `int64` as a JSON string.
pub fn int64_str<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.to_string())
}

// ---- process ----

/// `ProcessConfig`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProcessConfig {
    /// Program.
    pub cmd: String,
    /// Arguments.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment of this process only.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    /// Working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `PTY.Size`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct PtySize {
    /// Columns.
    pub cols: u32,
    /// Rows.
    pub rows: u32,
}

/// `PTY`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Pty {
    /// Terminal size.
    pub size: PtySize,
}

/// `StartRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct StartRequest {
    /// What to run.
    pub process: ProcessConfig,
    /// A terminal, if any.
    pub pty: Option<Pty>,
    /// Tag (selects the process in later calls).
    pub tag: Option<String>,
    /// Keep a stdin pipe (absent = true).
    pub stdin: Option<bool>,
}

/// `ProcessSelector`: a pid or a tag.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ProcessSelector {
    /// Pid in the sandbox.
    pub pid: Option<u32>,
    /// Tag given at start.
    pub tag: Option<String>,
}

/// A request naming one process (`ConnectRequest`, `CloseStdinRequest`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SelectRequest {
    /// The process.
    pub process: ProcessSelector,
}

/// `ProcessInput`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ProcessInput {
    /// Bytes for the stdin pipe.
    #[serde(deserialize_with = "opt_b64")]
    pub stdin: Option<Vec<u8>>,
    /// Bytes for the terminal.
    #[serde(deserialize_with = "opt_b64")]
    pub pty: Option<Vec<u8>>,
}

fn opt_b64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    s.map(|s| b64::decode(&s).map_err(serde::de::Error::custom))
        .transpose()
}

/// `SendInputRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SendInputRequest {
    /// The process.
    pub process: ProcessSelector,
    /// The input.
    pub input: ProcessInput,
}

/// `StreamInputRequest`: one of its events.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct StreamInputRequest {
    /// First message: the process.
    pub start: Option<SelectRequest>,
    /// Input data.
    pub data: Option<StreamInputData>,
    /// Keepalive (ignored).
    pub keepalive: Option<serde_json::Value>,
}

/// `StreamInputRequest.DataEvent`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct StreamInputData {
    /// The input.
    pub input: ProcessInput,
}

/// `SendSignalRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SendSignalRequest {
    /// The process.
    pub process: ProcessSelector,
    /// `SIGNAL_SIGKILL`/`SIGNAL_SIGTERM` or 9/15.
    pub signal: serde_json::Value,
}

/// `UpdateRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct UpdateRequest {
    /// The process.
    pub process: ProcessSelector,
    /// New terminal size.
    pub pty: Option<Pty>,
}

/// `ProcessInfo`.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessInfo {
    /// How it was started.
    pub config: ProcessConfig,
    /// Its pid.
    pub pid: u32,
    /// Its tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// `ListResponse`.
#[derive(Debug, Clone, Serialize)]
pub struct ListResponse {
    /// Live processes.
    pub processes: Vec<ProcessInfo>,
}

/// `ProcessEvent.EndEvent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndEvent {
    /// Exit code (-1 after a signal).
    #[serde(skip_serializing_if = "is_zero")]
    pub exit_code: i32,
    /// Whether it exited (not killed by a signal).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub exited: bool,
    /// Go's `ProcessState.String()`: `exit status N`, `signal: killed`.
    pub status: String,
    /// Same text when the process failed; absent after a clean exit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

// ---- filesystem ----

/// `EntryInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryInfo {
    /// Base name.
    pub name: String,
    /// `FILE_TYPE_FILE`, `FILE_TYPE_DIRECTORY` (the target's for a symlink), or
    /// `FILE_TYPE_UNSPECIFIED`.
    #[serde(rename = "type")]
    pub file_type: &'static str,
    /// Absolute path.
    pub path: String,
    /// Size in bytes (an `int64`, so a string).
    #[serde(serialize_with = "int64_str")]
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// `ls`-style permissions (`-rw-r--r--`).
    pub permissions: String,
    /// Owner name.
    pub owner: String,
    /// Group name.
    pub group: String,
    /// RFC 3339 modification time.
    pub modified_time: String,
    /// Resolved absolute target of a symlink.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    /// The entry itself is a symlink (envd 0.5's `is_symlink`; `type` is then its target's).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub is_symlink: bool,
    /// User-defined metadata: the file's `user.e2b.*` extended attributes, without the prefix.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// A request naming one path (`Stat`, `MakeDir`, `Remove`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PathRequest {
    /// The path.
    pub path: String,
}

/// `ListDirRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ListDirRequest {
    /// Directory.
    pub path: String,
    /// Levels (0 = 1).
    pub depth: u32,
}

/// `MoveRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct MoveRequest {
    /// From.
    pub source: String,
    /// To.
    pub destination: String,
}

/// `WatchDirRequest` and `CreateWatcherRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WatchRequest {
    /// Directory.
    pub path: String,
    /// Subdirectories too.
    pub recursive: bool,
    /// Add the entry to create/write/chmod events.
    #[serde(alias = "include_entry")]
    pub include_entry: bool,
    /// Allow network mounts (Cove has none to refuse).
    #[serde(alias = "allow_network_mounts")]
    pub allow_network_mounts: bool,
}

/// A request naming one watcher.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WatcherRequest {
    /// The watcher id.
    #[serde(alias = "watcher_id")]
    pub watcher_id: String,
}

/// `FilesystemEvent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FilesystemEvent {
    /// Path relative to the watched directory.
    pub name: String,
    /// `EVENT_TYPE_*`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The entry, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

// ---- answers and stream messages ----

/// An answer without fields (`{}`): `SendInput`, `SendSignal`, `Update`, `CloseStdin`,
/// `Remove`, `RemoveWatcher`, and a `StreamInput` stream's first frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Empty {}

/// A message of a process stream (`StartResponse`, `ConnectResponse`): `{"event": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessStreamMessage {
    /// The event.
    pub event: ProcessEvent,
}

/// `ProcessEvent`: one of start, data, end or keepalive, named by its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ProcessEvent {
    /// The process runs: `{"start": {"pid": N}}`.
    Start {
        /// Its pid.
        pid: u32,
    },
    /// Output: `{"data": {"stdout" | "stderr" | "pty": base64}}`.
    Data(ProcessData),
    /// It ended: `{"end": EndEvent}`.
    End(EndEvent),
    /// Nothing happened for a keepalive interval: `{"keepalive": {}}`.
    Keepalive {},
}

/// `ProcessEvent.DataEvent`: a chunk of output, keyed by the stream it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ProcessData {
    /// Standard output, base64.
    Stdout(String),
    /// Standard error, base64.
    Stderr(String),
    /// The terminal of a pty process, base64.
    Pty(String),
}

/// A message of a `WatchDir` stream (`WatchDirResponse`), named by its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum WatchDirMessage {
    /// The directory is watched: `{"start": {}}`.
    Start {},
    /// Nothing happened for a keepalive interval: `{"keepalive": {}}`.
    Keepalive {},
    /// A change: `{"filesystem": FilesystemEvent}`.
    Filesystem(Box<FilesystemEvent>),
}

/// `CreateWatcherResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateWatcherResponse {
    /// The new watcher's id.
    pub watcher_id: String,
}

/// `GetWatcherEventsResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WatcherEvents {
    /// The events since the last call, oldest first.
    pub events: Vec<FilesystemEvent>,
}

/// `StatResponse`, `MakeDirResponse`, `MoveResponse`: one entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntryResponse {
    /// The entry.
    pub entry: EntryInfo,
}

/// `ListDirResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListDirResponse {
    /// The entries.
    pub entries: Vec<EntryInfo>,
}

/// `EntryInfo` of a file written through `POST /files` (one per uploaded file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WrittenEntry {
    /// Absolute path.
    pub path: String,
    /// Base name.
    pub name: String,
    /// Always `file`.
    #[serde(rename = "type")]
    pub file_type: &'static str,
    /// The metadata given with it (`X-Metadata-*` headers); omitted when none was.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_as_the_sdk_sends_them() {
        let r: StartRequest = serde_json::from_str(
            r#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"},"cwd":"/tmp"},"stdin":false}"#,
        )
        .expect("start");
        assert_eq!(r.process.args, ["-l", "-c", "echo hi"]);
        assert_eq!(r.stdin, Some(false));
        let r: SendInputRequest =
            serde_json::from_str(r#"{"process":{"pid":42},"input":{"pty":"bHMK"}}"#).expect("in");
        assert_eq!(r.process.pid, Some(42));
        assert_eq!(r.input.pty.as_deref(), Some(&b"ls\n"[..]));
        let r: WatcherRequest = serde_json::from_str(r#"{"watcherId":"w1"}"#).expect("w");
        assert_eq!(r.watcher_id, "w1");
    }

    #[test]
    fn answers_use_the_json_mapping() {
        let end = EndEvent {
            exit_code: 0,
            exited: true,
            status: "exit status 0".into(),
            error: None,
        };
        assert_eq!(
            serde_json::to_string(&end).expect("json"),
            r#"{"exited":true,"status":"exit status 0"}"#
        );
        assert_eq!(b64::decode("YQ").ok(), Some(b"a".to_vec()));
    }

    #[test]
    fn stream_messages_are_keyed_by_their_kind() {
        let msg = |event| serde_json::to_string(&ProcessStreamMessage { event }).expect("json");
        assert_eq!(
            msg(ProcessEvent::Start { pid: 7 }),
            r#"{"event":{"start":{"pid":7}}}"#
        );
        assert_eq!(
            msg(ProcessEvent::Keepalive {}),
            r#"{"event":{"keepalive":{}}}"#
        );
        for (data, key) in [
            (ProcessData::Stdout("YQ==".into()), "stdout"),
            (ProcessData::Stderr("YQ==".into()), "stderr"),
            (ProcessData::Pty("YQ==".into()), "pty"),
        ] {
            assert_eq!(
                msg(ProcessEvent::Data(data)),
                format!(r#"{{"event":{{"data":{{"{key}":"YQ=="}}}}}}"#)
            );
        }
        let end = EndEvent {
            exit_code: 1,
            exited: true,
            status: "exit status 1".into(),
            error: Some("exit status 1".into()),
        };
        assert_eq!(
            msg(ProcessEvent::End(end)),
            r#"{"event":{"end":{"exitCode":1,"exited":true,"status":"exit status 1","error":"exit status 1"}}}"#
        );
        let json = |v: &WatchDirMessage| serde_json::to_string(v).expect("json");
        assert_eq!(json(&WatchDirMessage::Start {}), r#"{"start":{}}"#);
        assert_eq!(json(&WatchDirMessage::Keepalive {}), r#"{"keepalive":{}}"#);
        let fe = FilesystemEvent {
            name: "a".into(),
            kind: "EVENT_TYPE_CREATE",
            entry: None,
        };
        assert_eq!(
            json(&WatchDirMessage::Filesystem(Box::new(fe.clone()))),
            r#"{"filesystem":{"name":"a","type":"EVENT_TYPE_CREATE"}}"#
        );
        assert_eq!(serde_json::to_string(&Empty {}).expect("json"), "{}");
        assert_eq!(
            serde_json::to_string(&CreateWatcherResponse {
                watcher_id: "w".into()
            })
            .expect("json"),
            r#"{"watcherId":"w"}"#
        );
        assert_eq!(
            serde_json::to_string(&WatcherEvents { events: vec![fe] }).expect("json"),
            r#"{"events":[{"name":"a","type":"EVENT_TYPE_CREATE"}]}"#
        );
    }

    #[test]
    fn a_written_entry_leaves_out_empty_metadata() {
        let mut w = WrittenEntry {
            path: "/a/b".into(),
            name: "b".into(),
            file_type: "file",
            metadata: BTreeMap::new(),
        };
        crate::model::assert_wire(&w, r#"{"path":"/a/b","name":"b","type":"file"}"#);
        w.metadata.insert("k".into(), "v".into());
        crate::model::assert_wire(
            &w,
            r#"{"path":"/a/b","name":"b","type":"file","metadata":{"k":"v"}}"#,
        );
    }
}
