//! The data plane: a command's output as a resumable stream of events, and its stdin.
//!
//! Requests here go to the attachment's own URL with the attachment token, not to the
//! management API.

use base64::Engine as _;
use bytes::Bytes;
use cove_api_types::{Attachment, Command, GapEvent, OutputEvent};
use futures::Stream;
use reqwest::{Method, RequestBuilder, Url};

use crate::sse::{self, Resumable, Resume};
use crate::{parse_http_url, Client, ClientError, Result};

/// One event of a command's output stream.
#[derive(Debug, Clone, PartialEq)]
pub enum AttachEvent {
    /// Bytes the command wrote to stdout.
    Stdout {
        /// Offset of the first byte in the command's combined output.
        offset: u64,
        /// The bytes.
        data: Bytes,
    },
    /// Bytes the command wrote to stderr.
    Stderr {
        /// Offset of the first byte in the command's combined output.
        offset: u64,
        /// The bytes.
        data: Bytes,
    },
    /// Bytes `[offset, offset + len)` of the command's output were dropped (the middle of an
    /// output longer than the server's cap); the stream continues at `offset + len`.
    Gap {
        /// Offset of the first dropped byte.
        offset: u64,
        /// Number of dropped bytes.
        len: u64,
    },
    /// The command ended; the last event of the stream.
    Exit(Command),
}

impl Client {
    /// `GET {attachment.url}?offset=N`: the command's output from byte `offset` of its combined
    /// output, then its exit. The stream ends after [`AttachEvent::Exit`].
    ///
    /// When the connection drops before the exit event, the stream reconnects from the offset
    /// after the last byte it yielded, so no byte is lost or repeated; after a few failed
    /// reconnections in a row, or on an API error (a revoked token is `unauthorized`), it
    /// yields the error and ends.
    pub fn attach(
        &self,
        attachment: &Attachment,
        offset: u64,
    ) -> impl Stream<Item = Result<AttachEvent>> + Send + 'static {
        AttachState::stream(
            self.http.clone(),
            attachment.url.clone(),
            attachment.token.clone(),
            offset,
        )
    }

    /// `GET {attachment.url}?offset=N` with `Accept: application/octet-stream`: the command's
    /// stdout as raw bytes from stdout byte `offset` (the number of stdout bytes the caller
    /// already has), without SSE framing or base64. stderr is not in it.
    ///
    /// The stream ends cleanly once the command exited and every stdout byte was sent; its exit
    /// status is then read with [`Client::get_command`]. It does not reconnect by itself: after
    /// an error item, call again with the count of bytes received so far. Errors: the server's
    /// API errors before the first byte (`failed_precondition` while another binary stream of
    /// the command is open, `unauthorized` for a revoked token), and a transport error when the
    /// body breaks off.
    pub async fn attach_binary(
        &self,
        attachment: &Attachment,
        offset: u64,
    ) -> Result<impl Stream<Item = Result<Bytes>> + Send + 'static> {
        use futures::TryStreamExt as _;
        let mut url = parse_http_url(&attachment.url)?;
        url.query_pairs_mut()
            .append_pair("offset", &offset.to_string());
        let request = self
            .http
            .get(url)
            .bearer_auth(&attachment.token)
            .header(reqwest::header::ACCEPT, "application/octet-stream");
        let response = crate::send(request).await?;
        Ok(response.bytes_stream().map_err(ClientError::Transport))
    }

    /// `POST {attachment.url}/stdin`: writes `data` to the command's stdin (the command must
    /// have been started with `stdin: true`).
    pub async fn stdin_write(&self, attachment: &Attachment, data: impl Into<Bytes>) -> Result<()> {
        let request = self.data_plane(attachment, "stdin")?.body(data.into());
        crate::send(request).await.map(drop)
    }

    /// `POST {attachment.url}/stdin:close`: closes the command's stdin (it reads EOF).
    pub async fn stdin_close(&self, attachment: &Attachment) -> Result<()> {
        let request = self.data_plane(attachment, "stdin:close")?;
        crate::send(request).await.map(drop)
    }

    /// A `POST` to `{attachment.url}/{leaf}` with the attachment token.
    fn data_plane(&self, attachment: &Attachment, leaf: &str) -> Result<RequestBuilder> {
        let url = child_url(&attachment.url, leaf)?;
        Ok(self
            .http
            .request(Method::POST, url)
            .bearer_auth(&attachment.token))
    }
}

/// `{base}/{leaf}`, keeping the base's path.
fn child_url(base: &str, leaf: &str) -> Result<Url> {
    let mut url = parse_http_url(base)?;
    url.path_segments_mut()
        .map_err(|()| ClientError::InvalidUrl {
            url: base.to_owned(),
        })?
        .pop_if_empty()
        .push(leaf);
    Ok(url)
}

/// The output stream's protocol: resumes at a byte offset, ends after the exit event.
enum Attach {}

/// Progress of an [`Client::attach`] stream.
type AttachState = Resumable<Attach>;

impl Resume for Attach {
    type Position = u64;
    type Item = AttachEvent;
    const PARAM: &'static str = "offset";
    const WHAT: &'static str = "attachment";
    const ENDED: &'static str = "ended before the exit event";

    fn decode(state: &mut AttachState, event: &sse::Event) -> Result<Option<AttachEvent>> {
        let decoded = decode_event(&state.url, &event.event, &event.data)?;
        Ok(decoded.and_then(|decoded| state.resume_point(decoded)))
    }
}

impl AttachState {
    /// Advances the resume offset past an output event, trimming bytes already yielded (a
    /// server may resend from an earlier point); `None` when nothing new is left.
    fn resume_point(&mut self, event: AttachEvent) -> Option<AttachEvent> {
        let (offset, data, stdout) = match event {
            AttachEvent::Exit(command) => {
                self.done = true;
                return Some(AttachEvent::Exit(command));
            }
            AttachEvent::Gap { offset, len } => {
                let end = offset.saturating_add(len);
                if end <= self.offset {
                    return None;
                }
                let start = offset.max(self.offset);
                self.offset = end;
                return Some(AttachEvent::Gap {
                    offset: start,
                    len: end - start,
                });
            }
            AttachEvent::Stdout { offset, data } => (offset, data, true),
            AttachEvent::Stderr { offset, data } => (offset, data, false),
        };
        let end = offset + data.len() as u64;
        if end <= self.offset {
            return None;
        }
        let (offset, data) = if offset < self.offset {
            let skip = usize::try_from(self.offset - offset).unwrap_or(usize::MAX);
            (self.offset, data.slice(skip..))
        } else {
            (offset, data)
        };
        self.offset = end;
        Some(if stdout {
            AttachEvent::Stdout { offset, data }
        } else {
            AttachEvent::Stderr { offset, data }
        })
    }
}

/// Decodes one server-sent event of the output stream; events of other names (keep-alives)
/// are `None`.
pub(crate) fn decode_event(url: &str, name: &str, data: &str) -> Result<Option<AttachEvent>> {
    let decode_err = |source| ClientError::Decode {
        url: url.to_owned(),
        source,
    };
    match name {
        "stdout" | "stderr" => {
            let out: OutputEvent = serde_json::from_str(data).map_err(decode_err)?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(out.data.as_bytes())
                .map_err(|e| ClientError::Stream {
                    url: url.to_owned(),
                    reason: format!("output at offset {} is not base64: {e}", out.offset),
                })?;
            if bytes.len() as u64 != out.len {
                return Err(ClientError::Stream {
                    url: url.to_owned(),
                    reason: format!(
                        "output at offset {} has {} bytes, announced {}",
                        out.offset,
                        bytes.len(),
                        out.len
                    ),
                });
            }
            let (offset, data) = (out.offset, Bytes::from(bytes));
            Ok(Some(if name == "stdout" {
                AttachEvent::Stdout { offset, data }
            } else {
                AttachEvent::Stderr { offset, data }
            }))
        }
        "exit" => Ok(Some(AttachEvent::Exit(
            serde_json::from_str(data).map_err(decode_err)?,
        ))),
        "gap" => {
            let gap: GapEvent = serde_json::from_str(data).map_err(decode_err)?;
            Ok(Some(AttachEvent::Gap {
                offset: gap.offset,
                len: gap.len,
            }))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(offset: u64) -> AttachState {
        AttachState {
            http: reqwest::Client::new(),
            url: "http://h/v1/attach/cmd-1".into(),
            token: "t".into(),
            offset,
            events: None,
            failures: 0,
            done: false,
        }
    }

    #[test]
    fn output_events_decode_base64() {
        let data = r#"{"offset":5,"len":6,"data":"aGVsbG8K"}"#;
        let event = decode_event("u", "stdout", data).expect("decodes");
        assert_eq!(
            event,
            Some(AttachEvent::Stdout {
                offset: 5,
                data: Bytes::from_static(b"hello\n")
            })
        );
        let data = r#"{"offset":0,"len":3,"data":"/wAB"}"#;
        let event = decode_event("u", "stderr", data).expect("decodes");
        assert_eq!(
            event,
            Some(AttachEvent::Stderr {
                offset: 0,
                data: Bytes::from_static(&[0xff, 0, 1])
            })
        );
    }

    #[test]
    fn bad_output_events_are_errors() {
        let not_b64 = r#"{"offset":0,"len":3,"data":"***"}"#;
        assert!(matches!(
            decode_event("u", "stdout", not_b64),
            Err(ClientError::Stream { .. })
        ));
        let wrong_len = r#"{"offset":0,"len":4,"data":"aGk="}"#;
        assert!(matches!(
            decode_event("u", "stdout", wrong_len),
            Err(ClientError::Stream { .. })
        ));
        assert!(matches!(
            decode_event("u", "stdout", "{}"),
            Err(ClientError::Decode { .. })
        ));
    }

    #[test]
    fn exit_event_decodes_a_command_and_others_are_ignored() {
        let data = r#"{"id":"cmd-1","sandbox_id":"sb-1","argv":["true"],"user":"user",
            "cwd":"/","pid":7,"state":"exited","exit_code":0,"signal":null,"timed_out":false,
            "truncated":false,"output_bytes":0,"stdin_open":false,
            "started_at":"2025-01-01T00:00:00Z","ended_at":"2025-01-01T00:00:01Z"}"#;
        let Some(AttachEvent::Exit(command)) = decode_event("u", "exit", data).expect("decodes")
        else {
            panic!("expected exit");
        };
        assert_eq!(command.exit_code, Some(0));
        assert_eq!(decode_event("u", "message", "").expect("ignored"), None);
        assert_eq!(decode_event("u", "ping", "x").expect("ignored"), None);
    }

    #[test]
    fn resent_bytes_are_trimmed() {
        let mut st = state(4);
        let out = |offset, data: &'static [u8]| AttachEvent::Stdout {
            offset,
            data: Bytes::from_static(data),
        };
        assert_eq!(st.resume_point(out(0, b"abcd")), None);
        assert_eq!(st.resume_point(out(2, b"cdef")), Some(out(4, b"ef")));
        assert_eq!(st.offset, 6);
        assert_eq!(st.resume_point(out(6, b"g")), Some(out(6, b"g")));
        assert_eq!(st.offset, 7);
    }

    #[test]
    fn gaps_decode_and_move_the_resume_point() {
        let gap = decode_event("u", "gap", r#"{"offset":10,"len":90}"#).expect("decodes");
        assert_eq!(
            gap,
            Some(AttachEvent::Gap {
                offset: 10,
                len: 90
            })
        );
        let mut st = state(10);
        assert_eq!(
            st.resume_point(AttachEvent::Gap {
                offset: 10,
                len: 90
            }),
            Some(AttachEvent::Gap {
                offset: 10,
                len: 90
            })
        );
        assert_eq!(st.offset, 100);
        assert_eq!(
            st.resume_point(AttachEvent::Gap {
                offset: 10,
                len: 90
            }),
            None
        );
    }

    #[test]
    fn child_urls_keep_the_base_path() {
        let url = child_url("http://127.0.0.1:7701/v1/attach/cmd-1", "stdin:close").expect("url");
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:7701/v1/attach/cmd-1/stdin:close"
        );
        assert!(child_url("nope", "stdin").is_err());
    }
}
