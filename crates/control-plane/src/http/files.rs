//! `/v1/sandboxes/{id}/files` handlers: streamed bodies in both directions.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::{StreamExt, TryStreamExt};

use super::extract::ApiQuery;
use crate::{ControlPlane, ReadFileQuery, ServiceError, WriteFileQuery};

pub(super) async fn write(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<WriteFileQuery>,
    body: Body,
) -> Result<impl IntoResponse, ServiceError> {
    let stream = body
        .into_data_stream()
        .map_err(std::io::Error::other)
        .boxed();
    Ok(Json(cp.write_file(&id, q, stream).await?))
}

pub(super) async fn read(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ReadFileQuery>,
) -> Result<Response, ServiceError> {
    let (offset, length) = (q.offset.unwrap_or(0), q.length);
    let (info, stream) = cp.read_file(&id, q).await?;
    let len = info
        .size
        .saturating_sub(offset)
        .min(length.unwrap_or(u64::MAX));
    let mut resp = Body::from_stream(stream).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    Ok(resp)
}
