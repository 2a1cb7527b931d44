//! Error bodies: the REST API's and envd's plain HTTP routes' `{"code", "message"}`, the
//! Connect protocol's, and the proxy's `502`s.

use serde::Serialize;

/// `Error` of the REST API and of envd's `/files`: the HTTP status and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorBody {
    /// The HTTP status, as a number.
    pub code: u16,
    /// What went wrong (the SDK shows it).
    pub message: String,
}

/// A Connect error, as a unary body or an end-of-stream frame's `error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectErrorBody<'a> {
    /// The Connect code (`not_found`, `deadline_exceeded`, ...).
    pub code: &'static str,
    /// What went wrong (the SDK shows it).
    pub message: &'a str,
}

/// A Connect stream's last frame: `{}`, or `{"error": ...}` when it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndOfStream<'a> {
    /// Why the stream failed; omitted when it ended well.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ConnectErrorBody<'a>>,
}

/// The E2B proxy's `502` for envd or port traffic it cannot deliver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyError<'a> {
    /// E2B sandbox id.
    pub sandbox_id: &'a str,
    /// What went wrong; the SDK matches its wording ("was not found", "port is not open").
    pub message: &'static str,
    /// The port nothing answers on; omitted when the sandbox itself is not there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Always 502.
    pub code: u16,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::assert_wire;

    #[test]
    fn error_bodies() {
        assert_wire(
            &ErrorBody {
                code: 404,
                message: "gone".into(),
            },
            r#"{"code":404,"message":"gone"}"#,
        );
        let e = ConnectErrorBody {
            code: "not_found",
            message: "gone",
        };
        assert_wire(&e, r#"{"code":"not_found","message":"gone"}"#);
        assert_wire(&EndOfStream { error: None }, "{}");
        assert_wire(
            &EndOfStream { error: Some(e) },
            r#"{"error":{"code":"not_found","message":"gone"}}"#,
        );
        let mut p = ProxyError {
            sandbox_id: "abc",
            message: "The sandbox was not found",
            port: None,
            code: 502,
        };
        assert_wire(
            &p,
            r#"{"sandboxId":"abc","message":"The sandbox was not found","code":502}"#,
        );
        p.port = Some(8080);
        assert_wire(
            &p,
            r#"{"sandboxId":"abc","message":"The sandbox was not found","port":8080,"code":502}"#,
        );
    }
}
