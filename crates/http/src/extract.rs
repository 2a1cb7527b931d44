//! Extractors whose rejections are API errors (JSON body with a code), not axum's plain text.

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::Uri;
use cove_control_plane::ServiceError;
use cove_domain::InvalidInput;
use percent_encoding::percent_decode;
use serde::de::DeserializeOwned;

use crate::render::ApiError;

/// A JSON body; a malformed body is `invalid_argument` naming the field, an over-large one
/// `payload_too_large`. An empty body is read as `{}`.
pub(crate) struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_json_body(req).await?;
        let bytes = if bytes.iter().all(u8::is_ascii_whitespace) {
            &b"{}"[..]
        } else {
            &bytes[..]
        };
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        serde_path_to_error::deserialize(de)
            .map(ApiJson)
            .map_err(|e| {
                let field = e.path().to_string();
                let field = if field == "." {
                    "body".to_string()
                } else {
                    field
                };
                ApiError(ServiceError::Invalid(InvalidInput::new(
                    field,
                    e.into_inner().to_string(),
                )))
            })
    }
}

/// Largest JSON request body (2 MiB; a shell string is at most 1 MiB).
pub const MAX_JSON_BODY: usize = 2 << 20;

/// How much of an over-large body is still read (and dropped) before answering 413 (64 MiB).
/// Answering while the client still sends makes the kernel reset the connection, so the client
/// would see a broken pipe instead of the `payload_too_large` answer.
const MAX_DRAIN: usize = 64 << 20;

/// Reads a JSON body of at most [`MAX_JSON_BODY`] bytes; a larger one is drained (up to
/// [`MAX_DRAIN`]) and refused with `payload_too_large`.
async fn read_json_body(req: Request) -> Result<Vec<u8>, ServiceError> {
    use futures::StreamExt;
    let mut body = req.into_body().into_data_stream();
    let mut buf = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| {
            ServiceError::Invalid(InvalidInput::new(
                "body",
                format!("cannot read the body: {e}"),
            ))
        })?;
        seen += chunk.len();
        if seen > MAX_DRAIN {
            break;
        }
        if seen <= MAX_JSON_BODY {
            buf.extend_from_slice(&chunk);
        }
    }
    if seen > MAX_JSON_BODY {
        return Err(ServiceError::TooLarge(format!(
            "request body is larger than {MAX_JSON_BODY} bytes"
        )));
    }
    Ok(buf)
}

/// Query parameters; a bad one is `invalid_argument`.
pub(crate) struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        check_query_utf8(&parts.uri)?;
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(q) => Ok(ApiQuery(q.0)),
            Err(e) => Err(query_error(e).into()),
        }
    }
}

fn query_error(e: QueryRejection) -> ServiceError {
    ServiceError::Invalid(InvalidInput::new("query", e.body_text()))
}

/// The `Idempotency-Key` header: absent, or 1 to 256 ASCII bytes (else `invalid_argument`).
pub(crate) fn idempotency_key(
    headers: &axum::http::HeaderMap,
) -> Result<Option<String>, ServiceError> {
    match headers.get(cove_api_types::IDEMPOTENCY_KEY_HEADER) {
        None => Ok(None),
        Some(v) => {
            let k = v
                .to_str()
                .map_err(|_| InvalidInput::new("Idempotency-Key", "must be ASCII"))?;
            if k.is_empty() || k.len() > 256 {
                return Err(InvalidInput::new("Idempotency-Key", "must be 1 to 256 bytes").into());
            }
            Ok(Some(k.to_string()))
        }
    }
}

/// Refuses a query whose values do not percent-decode to UTF-8: the query extractor would
/// replace the bad bytes and so name another file. Byte names travel as `<key>_b64`.
pub(crate) fn check_query_utf8(uri: &Uri) -> Result<(), ServiceError> {
    let Some(query) = uri.query() else {
        return Ok(());
    };
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        // `+` (a space in forms) is ASCII, so decoding `%XX` alone decides UTF-8 validity.
        if percent_decode(value.as_bytes()).decode_utf8().is_err() {
            let key = percent_decode(key.as_bytes())
                .decode_utf8_lossy()
                .into_owned();
            return Err(InvalidInput::new(
                key.clone(),
                format!(
                    "is not UTF-8 once percent-decoded; send the bytes base64-encoded as {key}_b64"
                ),
            )
            .into());
        }
    }
    Ok(())
}

/// Parses a wait duration: `30s`, `500ms`, `2m`, or a number of seconds.
pub fn parse_wait(s: &str) -> Result<Duration, ServiceError> {
    let bad = || ServiceError::Invalid(InvalidInput::new("wait", "use e.g. 30s, 500ms or 2m"));
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(bad()),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs.min(3600.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_utf8_query_values_are_refused() {
        let ok: Uri = "/x?path=%2Ftmp%2F%C3%A9&depth=2".parse().expect("uri");
        assert!(check_query_utf8(&ok).is_ok());
        let bad: Uri = "/x?path=%2Ftmp%2F%FF".parse().expect("uri");
        let err = check_query_utf8(&bad).expect_err("refused");
        assert_eq!(err.code(), cove_api_types::ErrorCode::InvalidArgument);
        assert!(err.to_string().contains("path_b64"), "{err}");
    }

    #[test]
    fn waits() {
        assert_eq!(parse_wait("30s").ok(), Some(Duration::from_secs(30)));
        assert_eq!(parse_wait("500ms").ok(), Some(Duration::from_millis(500)));
        assert_eq!(parse_wait("2").ok(), Some(Duration::from_secs(2)));
        assert!(parse_wait("soon").is_err());
    }
}
