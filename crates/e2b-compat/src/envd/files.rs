//! envd's `/files`: download (`GET`) and upload (`POST`, multipart or octet-stream, gzip, with
//! `X-Metadata-<key>` headers kept as the file's `user.e2b.<key>` extended attributes),
//! authorised by `X-Access-Token` or by a signature in the query:
//!
//! `signature = "v1_" + base64_nopad(sha256("{path}:{op}:{user}:{token}[:{expiration}]"))`,
//! `op` = `read` or `write`, `path` and `user` as written in the query.

use std::collections::{BTreeMap, HashSet};
use std::io::Read;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use base64::Engine;
use cove_api_types::{FileType, SandboxState};
use cove_control_plane::{ReadOptions, SandboxPath, ServiceError, WriteOptions};
use futures::StreamExt;
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::constant_time_eq;
use super::filesystem::METADATA_NAMESPACE;
use super::paths::{base_name, resolve};
use crate::dispatch::Target;
use crate::error::EnvdHttpError;
use crate::model::envd::WrittenEntry;
use crate::E2b;

/// Largest gzip upload held in memory to decode it (256 MiB compressed and decoded each);
/// other uploads stream through.
pub const MAX_BUFFERED_UPLOAD: usize = 256 << 20;

/// The byte stream Cove's file service writes from.
type ByteStream = futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>;

/// The query of a `/files` request, decoded, with the raw `path`/`username` the signature
/// covers.
#[derive(Debug, Default, Clone)]
pub struct FilesQuery {
    /// `path`, decoded.
    pub path: Option<String>,
    /// `username`, decoded.
    pub username: Option<String>,
    /// `signature`.
    pub signature: Option<String>,
    /// `signature_expiration` (unix seconds).
    pub expiration: Option<String>,
}

/// Parses a query string (`%XX` and `+` decoded).
pub fn parse_query(q: Option<&str>) -> FilesQuery {
    let mut out = FilesQuery::default();
    for kv in q.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let v = v.replace('+', " ");
        let v = percent_encoding::percent_decode_str(&v)
            .decode_utf8_lossy()
            .into_owned();
        match k {
            "path" => out.path = Some(v),
            "username" => out.username = Some(v),
            "signature" => out.signature = Some(v),
            "signature_expiration" => out.expiration = Some(v),
            _ => {}
        }
    }
    out
}

/// The signature of a `/files` operation (`read` or `write`).
pub fn signature(
    path: &str,
    op: &str,
    user: &str,
    token: &str,
    expiration: Option<&str>,
) -> String {
    let raw = match expiration {
        Some(e) => format!("{path}:{op}:{user}:{token}:{e}"),
        None => format!("{path}:{op}:{user}:{token}"),
    };
    let digest = Sha256::digest(raw.as_bytes());
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    )
}

fn op_of(method: &Method) -> &'static str {
    if method == Method::GET {
        "read"
    } else {
        "write"
    }
}

fn unauthorized(m: &str) -> EnvdHttpError {
    EnvdHttpError::new(StatusCode::UNAUTHORIZED, m)
}

/// Checks a signature against one sandbox's token: `Ok` when valid, else the envd 401.
fn check_signature(q: &FilesQuery, op: &str, token: &str) -> Result<(), EnvdHttpError> {
    let Some(sig) = q.signature.as_deref() else {
        return Err(unauthorized("missing signature query parameter"));
    };
    let want = signature(
        q.path.as_deref().unwrap_or(""),
        op,
        q.username.as_deref().unwrap_or(""),
        token,
        q.expiration.as_deref(),
    );
    if !constant_time_eq(sig.as_bytes(), want.as_bytes()) {
        return Err(unauthorized("invalid signature"));
    }
    if let Some(exp) = q.expiration.as_deref() {
        let exp: i64 = exp
            .parse()
            .map_err(|_| unauthorized("invalid signature expiration"))?;
        if exp < chrono::Utc::now().timestamp() {
            return Err(unauthorized("signature is already expired"));
        }
    }
    Ok(())
}

/// The sandbox (E2B id) whose token makes a header-less signed URL valid.
pub async fn signed_sandbox(
    e2b: &E2b,
    method: &Method,
    query: Option<&str>,
) -> Result<String, EnvdHttpError> {
    let q = parse_query(query);
    let op = op_of(method);
    let live = e2b
        .sandboxes_in(Some(SandboxState::Running))
        .await
        .map_err(|_| {
            EnvdHttpError::new(StatusCode::INTERNAL_SERVER_ERROR, "cannot list sandboxes")
        })?;
    let mut last = unauthorized("invalid signature");
    for s in live {
        match check_signature(&q, op, &e2b.access_token(&s.id)) {
            Ok(()) => return Ok(crate::e2b_id(&s.id).to_string()),
            Err(e) if e.message == "signature is already expired" => last = e,
            Err(_) => {}
        }
    }
    Err(last)
}

/// Authorises a `/files` request that came with sandbox headers: a matching access token, or
/// a valid signature when no token header is present.
fn authorize(
    e2b: &E2b,
    t: &Target,
    headers: &HeaderMap,
    method: &Method,
    q: &FilesQuery,
) -> Result<(), EnvdHttpError> {
    if t.signed {
        return Ok(());
    }
    let token = e2b.access_token(&t.cove_id);
    match headers.get("x-access-token").and_then(|v| v.to_str().ok()) {
        Some(given) if constant_time_eq(given.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(unauthorized(
            "access token present in header but does not match",
        )),
        None => check_signature(q, op_of(method), &token),
    }
}

fn user_of(t: &Target, q: &FilesQuery) -> String {
    q.username
        .clone()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| t.default_user.clone())
}

fn http_error(e: ServiceError, path: &str) -> EnvdHttpError {
    match e {
        ServiceError::FileNotFound(_) => EnvdHttpError::new(
            StatusCode::NOT_FOUND,
            format!("path '{path}' does not exist"),
        ),
        ServiceError::Invalid(i) if i.field == "user" => EnvdHttpError::new(
            StatusCode::UNAUTHORIZED,
            format!("invalid user: {}", i.message),
        ),
        ServiceError::Invalid(i) => EnvdHttpError::new(StatusCode::BAD_REQUEST, i.message),
        ServiceError::NoSpace(m) => EnvdHttpError::new(StatusCode::INSUFFICIENT_STORAGE, m),
        ServiceError::TooLarge(m) => EnvdHttpError::new(StatusCode::PAYLOAD_TOO_LARGE, m),
        ServiceError::PermissionDenied(m) => EnvdHttpError::new(StatusCode::FORBIDDEN, m),
        ServiceError::NotImplemented(m) => EnvdHttpError::new(StatusCode::NOT_IMPLEMENTED, m),
        ServiceError::FailedPrecondition(m) => EnvdHttpError::new(StatusCode::CONFLICT, m),
        other => {
            let status = if matches!(other, ServiceError::Internal(_)) {
                tracing::error!(error = %other, "envd file request failed");
                StatusCode::INTERNAL_SERVER_ERROR
            } else {
                StatusCode::BAD_GATEWAY
            };
            EnvdHttpError::new(status, other.public_message())
        }
    }
}

/// `GET /files?path=`: the file's bytes.
pub async fn download(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let run = async {
        let q = parse_query(uri.query());
        authorize(&e2b, &t, &headers, &Method::GET, &q)?;
        let user = user_of(&t, &q);
        let path = resolve(q.path.as_deref().unwrap_or(""), &user)
            .map_err(|e| EnvdHttpError::new(StatusCode::BAD_REQUEST, e.message))?;
        let stat = e2b
            .cp
            .stat_file(
                &t.cove_id,
                SandboxPath(path.clone().into_bytes()),
                Some(user.clone()),
            )
            .await
            .map_err(|e| http_error(e, &path))?;
        if stat.file_type == FileType::Dir {
            return Err(EnvdHttpError::new(
                StatusCode::BAD_REQUEST,
                format!("path '{path}' is a directory"),
            ));
        }
        let (_, bytes) = e2b
            .cp
            .read_file(
                &t.cove_id,
                SandboxPath(path.clone().into_bytes()),
                Some(user),
                ReadOptions::default(),
            )
            .await
            .map_err(|e| http_error(e, &path))?;
        let mut resp = (StatusCode::OK, Body::from_stream(bytes)).into_response();
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(content_type(&path)),
        );
        let disposition = format!("inline; filename=\"{}\"", base_name(&path).replace('"', ""));
        if let Ok(v) = HeaderValue::from_str(&disposition) {
            h.insert(header::CONTENT_DISPOSITION, v);
        }
        Ok::<_, EnvdHttpError>(resp)
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("txt") => "text/plain; charset=utf-8",
        Some("json") => "application/json",
        Some("html") | Some("htm") => "text/html; charset=utf-8",
        Some("csv") => "text/csv; charset=utf-8",
        Some("png") => "image/png",
        Some("jpg") | Some("jpeg") => "image/jpeg",
        Some("pdf") => "application/pdf",
        _ => "application/octet-stream",
    }
}

/// `POST /files`: writes one file (octet-stream, `?path=` required) or several (multipart,
/// one part named `file` each, its filename the path; with one part `?path=` wins). Answers
/// `[{"path","name","type":"file"}]`.
pub async fn upload(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let run = async {
        let q = parse_query(req.uri().query());
        authorize(&e2b, &t, &headers, &Method::POST, &q)?;
        let metadata = upload_metadata(&headers)?;
        let user = user_of(&t, &q);
        if !metadata.is_empty() {
            // Fail before writing anything when the sandbox cannot keep metadata at all.
            e2b.cp
                .file_xattrs(
                    &t.cove_id,
                    vec!["/".to_string()],
                    Some(user.clone()),
                    METADATA_NAMESPACE,
                )
                .await
                .map_err(|e| http_error(e, "/"))?;
        }
        let ctype = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let gzip = headers
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let mut resolve_once = |p: &str| -> Result<String, EnvdHttpError> {
            let abs = resolve(p, &user)
                .map_err(|e| EnvdHttpError::new(StatusCode::BAD_REQUEST, e.message))?;
            if !seen.insert(abs.clone()) {
                return Err(EnvdHttpError::new(
                    StatusCode::BAD_REQUEST,
                    format!("path '{abs}' is given more than once"),
                ));
            }
            Ok(abs)
        };
        if ctype.starts_with("multipart/form-data") {
            if gzip {
                return Err(EnvdHttpError::new(
                    StatusCode::BAD_REQUEST,
                    "gzip is supported for octet-stream uploads only",
                ));
            }
            let mut mp = Multipart::from_request(req, &())
                .await
                .map_err(|e| EnvdHttpError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
            let mut first = true;
            while let Some(mut field) = mp
                .next_field()
                .await
                .map_err(|e| EnvdHttpError::new(StatusCode::BAD_REQUEST, e.body_text()))?
            {
                if field.name() != Some("file") {
                    continue;
                }
                // With one file `?path=` names it; several files carry their paths as names.
                let p = match (&q.path, first) {
                    (Some(p), true) => p.clone(),
                    _ => field.file_name().map(str::to_string).ok_or_else(|| {
                        EnvdHttpError::new(StatusCode::BAD_REQUEST, "a file part has no filename")
                    })?,
                };
                first = false;
                let abs = resolve_once(&p)?;
                let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
                let pump = async {
                    loop {
                        let item = match field.chunk().await {
                            Ok(Some(chunk)) => Ok(chunk),
                            Ok(None) => break,
                            Err(e) => Err(std::io::Error::other(e.body_text())),
                        };
                        let failed = item.is_err();
                        if tx.send(item).await.is_err() || failed {
                            break;
                        }
                    }
                    drop(tx);
                };
                let body = futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|b| (b, rx))
                })
                .boxed();
                let (written, ()) = tokio::join!(write_one(&e2b, &t, &user, &abs, body), pump);
                written?;
                set_metadata(&e2b, &t, &user, &abs, &metadata).await?;
                out.push(written_entry(&abs, &metadata));
            }
        } else if ctype.is_empty() || ctype.starts_with("application/octet-stream") {
            let Some(p) = q.path.clone() else {
                return Err(EnvdHttpError::new(
                    StatusCode::BAD_REQUEST,
                    "path query parameter is required for an octet-stream upload",
                ));
            };
            let abs = resolve_once(&p)?;
            let body = req.into_body();
            let stream = if gzip {
                let raw = http_body_util::Limited::new(body, MAX_BUFFERED_UPLOAD)
                    .collect()
                    .await
                    .map_err(|_| {
                        EnvdHttpError::new(StatusCode::PAYLOAD_TOO_LARGE, "upload is too large")
                    })?
                    .to_bytes();
                let plain = gunzip(&raw)?;
                futures::stream::once(async move { Ok::<_, std::io::Error>(plain) }).boxed()
            } else {
                body.into_data_stream()
                    .map(|r| r.map_err(std::io::Error::other))
                    .boxed()
            };
            write_one(&e2b, &t, &user, &abs, stream).await?;
            set_metadata(&e2b, &t, &user, &abs, &metadata).await?;
            out.push(written_entry(&abs, &metadata));
        } else {
            return Err(EnvdHttpError::new(
                StatusCode::BAD_REQUEST,
                format!("unsupported content type {ctype}"),
            ));
        }
        Ok::<_, EnvdHttpError>(axum::Json(out).into_response())
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// Writes one file through Cove's file service.
async fn write_one(
    e2b: &E2b,
    t: &Target,
    user: &str,
    abs: &str,
    body: ByteStream,
) -> Result<(), EnvdHttpError> {
    e2b.cp
        .write_file(
            &t.cove_id,
            SandboxPath(abs.as_bytes().to_vec()),
            Some(user.to_string()),
            WriteOptions::default(),
            None,
            body,
        )
        .await
        .map_err(|e| http_error(e, abs))?;
    Ok(())
}

fn written_entry(abs: &str, metadata: &BTreeMap<String, String>) -> WrittenEntry {
    WrittenEntry {
        path: abs.to_string(),
        name: base_name(abs).to_string(),
        file_type: "file",
        metadata: metadata.clone(),
    }
}

/// Prefix of the upload headers that carry file metadata.
const METADATA_HEADER: &str = "x-metadata-";

/// Longest metadata key, in bytes (the kernel's 255-byte attribute name less `user.e2b.`).
pub const MAX_METADATA_KEY: usize = 246;

/// Most bytes of one file's metadata: keys with the `user.e2b.` prefix counted per key, and
/// values (what fits a filesystem's per-inode attribute block).
pub const MAX_METADATA_BYTES: usize = 4096;

/// The metadata of an upload: every `X-Metadata-<key>: <value>` header, the key lowercased
/// (the first value when a header repeats). Keys and values are printable US-ASCII; a key is
/// at most [`MAX_METADATA_KEY`] bytes and the whole at most [`MAX_METADATA_BYTES`]; `400`
/// otherwise.
fn upload_metadata(headers: &HeaderMap) -> Result<BTreeMap<String, String>, EnvdHttpError> {
    let bad = |m: String| EnvdHttpError::new(StatusCode::BAD_REQUEST, m);
    let printable = |b: &[u8]| b.iter().all(|c| (0x20..=0x7e).contains(c));
    let mut out = BTreeMap::new();
    let mut total = 0usize;
    for name in headers.keys() {
        let Some(key) = name.as_str().strip_prefix(METADATA_HEADER) else {
            continue;
        };
        let Some(value) = headers.get(name) else {
            continue;
        };
        if key.is_empty() || key.len() > MAX_METADATA_KEY || !printable(key.as_bytes()) {
            return Err(bad(format!(
                "metadata key {key:?} must be 1 to {MAX_METADATA_KEY} bytes of printable US-ASCII"
            )));
        }
        if !printable(value.as_bytes()) {
            return Err(bad(format!(
                "metadata value of {key:?} must be printable US-ASCII"
            )));
        }
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        total += METADATA_NAMESPACE.len() + key.len() + value.len();
        out.insert(key.to_string(), value);
    }
    if total > MAX_METADATA_BYTES {
        return Err(bad(format!(
            "metadata of {total} bytes exceeds the limit of {MAX_METADATA_BYTES}"
        )));
    }
    Ok(out)
}

/// Sets an uploaded file's metadata (nothing to do without: the upload made a new file, which
/// has none). An error names the file as written without its metadata.
async fn set_metadata(
    e2b: &E2b,
    t: &Target,
    user: &str,
    abs: &str,
    metadata: &BTreeMap<String, String>,
) -> Result<(), EnvdHttpError> {
    if metadata.is_empty() {
        return Ok(());
    }
    let entries = metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    e2b.cp
        .set_file_xattrs(
            &t.cove_id,
            abs.to_string(),
            Some(user.to_string()),
            METADATA_NAMESPACE,
            entries,
        )
        .await
        .map_err(|e| {
            let mut err = http_error(e, abs);
            err.message = format!(
                "{abs} was written but its metadata was not set: {}",
                err.message
            );
            err
        })
}

fn gunzip(raw: &[u8]) -> Result<Bytes, EnvdHttpError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(raw)
        .take(MAX_BUFFERED_UPLOAD as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| {
            EnvdHttpError::new(StatusCode::BAD_REQUEST, format!("invalid gzip body: {e}"))
        })?;
    if out.len() > MAX_BUFFERED_UPLOAD {
        return Err(EnvdHttpError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "upload is too large",
        ));
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_match_the_sdk_algorithm() {
        // sha256("/a:read::tok") in standard base64 without padding.
        let raw = "/a:read::tok";
        let want = format!(
            "v1_{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(Sha256::digest(raw))
        );
        assert_eq!(signature("/a", "read", "", "tok", None), want);
        let q = parse_query(Some("path=%2Fa&signature=x"));
        assert_eq!(q.path.as_deref(), Some("/a"));
        assert_eq!(
            check_signature(&q, "read", "tok"),
            Err(unauthorized("invalid signature"))
        );
        let q = FilesQuery {
            path: Some("/a".into()),
            signature: Some(signature("/a", "read", "", "tok", Some("1"))),
            expiration: Some("1".into()),
            ..Default::default()
        };
        assert_eq!(
            check_signature(&q, "read", "tok"),
            Err(unauthorized("signature is already expired"))
        );
    }
}
