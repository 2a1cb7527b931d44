//! `GET /v2/sandboxes` and `GET /sandboxes`: filters (metadata, state, template, start time),
//! order, and `X-Next-Token` paging.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use chrono::{DateTime, Utc};
use cove_api_types::Sandbox;

use super::{e2b_state, E2B_MARKER_KEY, MAX_LIST_LIMIT};
use crate::error::RestError;
use crate::model::sandboxes::SandboxDetail;
use crate::E2b;

/// The filters of a listing.
#[derive(Debug, Default)]
pub(crate) struct ListFilter {
    metadata: Vec<(String, String)>,
    states: Option<Vec<String>>,
    template: Option<String>,
    started_after: Option<DateTime<Utc>>,
    ascending: bool,
    limit: Option<usize>,
    next_token: Option<String>,
}

fn unescape(s: &str) -> String {
    percent_encoding::percent_decode_str(&s.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// Parses the listing query. `metadata` is `k=v&k2=v2` with each key and value escaped, and the
/// whole escaped again (after the transport's own decoding), as the SDK builds it.
pub(crate) fn parse_list_query(q: Option<&str>) -> Result<ListFilter, RestError> {
    let mut f = ListFilter::default();
    for kv in q.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let v = unescape(v);
        match k {
            "metadata" => {
                for pair in unescape(&v).split('&').filter(|s| !s.is_empty()) {
                    let (mk, mv) = pair.split_once('=').unwrap_or((pair, ""));
                    f.metadata.push((unescape(mk), unescape(mv)));
                }
            }
            "state" => {
                f.states = Some(v.split(',').map(|s| s.trim().to_string()).collect());
            }
            "template" => f.template = Some(v),
            "order" => f.ascending = v.eq_ignore_ascii_case("asc"),
            "startedAfter" => {
                let t = DateTime::parse_from_rfc3339(&v).map_err(|_| {
                    RestError::new(StatusCode::BAD_REQUEST, "startedAfter must be RFC 3339")
                })?;
                f.started_after = Some(t.with_timezone(&Utc));
            }
            "limit" => {
                let n: usize = v.parse().map_err(|_| {
                    RestError::new(StatusCode::BAD_REQUEST, "limit must be a number")
                })?;
                if n == 0 || n > MAX_LIST_LIMIT {
                    return Err(RestError::new(
                        StatusCode::BAD_REQUEST,
                        format!("limit must be between 1 and {MAX_LIST_LIMIT}"),
                    ));
                }
                f.limit = Some(n);
            }
            "nextToken" => f.next_token = Some(v).filter(|t| !t.is_empty()),
            _ => {}
        }
    }
    Ok(f)
}

fn page_token(s: &Sandbox) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!(
        "{}__{}",
        s.created_at.timestamp_micros(),
        s.id
    ))
}

fn decode_token(t: &str) -> Result<(i64, String), RestError> {
    let bad = || {
        RestError::new(
            StatusCode::BAD_REQUEST,
            "nextToken is not a token from a listing",
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(t)
        .map_err(|_| bad())?;
    let raw = String::from_utf8(raw).map_err(|_| bad())?;
    let (micros, id) = raw.split_once("__").ok_or_else(bad)?;
    Ok((micros.parse().map_err(|_| bad())?, id.to_string()))
}

/// Every sandbox E2B can see, filtered and ordered.
async fn listed(e2b: &E2b, f: &ListFilter) -> Result<Vec<Sandbox>, RestError> {
    let all = e2b.sandboxes_in(None).await?;
    let mut out: Vec<Sandbox> = all
        .into_iter()
        .filter(|s| match e2b_state(s.state) {
            None => false,
            Some(st) => f
                .states
                .as_ref()
                .is_none_or(|ss| ss.iter().any(|x| x == st)),
        })
        .filter(|s| f.template.as_ref().is_none_or(|t| &s.template == t))
        .filter(|s| f.started_after.is_none_or(|t| s.created_at >= t))
        .filter(|s| {
            f.metadata
                .iter()
                .all(|(k, v)| !k.starts_with(E2B_MARKER_KEY) && s.metadata.get(k) == Some(v))
        })
        .collect();
    out.sort_by(|a, b| {
        let by_time = if f.ascending {
            a.created_at.cmp(&b.created_at)
        } else {
            b.created_at.cmp(&a.created_at)
        };
        by_time.then_with(|| a.id.cmp(&b.id))
    });
    Ok(out)
}

/// `GET /v2/sandboxes`: one page; `X-Next-Token` only when more follow.
pub(super) async fn list_v2(State(e2b): State<E2b>, req: Request) -> Result<Response, RestError> {
    let f = parse_list_query(req.uri().query())?;
    let all = listed(&e2b, &f).await?;
    let start = match &f.next_token {
        None => 0,
        Some(t) => {
            let (micros, id) = decode_token(t)?;
            all.iter()
                .position(|s| s.created_at.timestamp_micros() == micros && s.id == id)
                .map_or(all.len(), |i| i + 1)
        }
    };
    let limit = f.limit.unwrap_or(MAX_LIST_LIMIT);
    let page: Vec<&Sandbox> = all.iter().skip(start).take(limit).collect();
    let more = start + page.len() < all.len();
    let body: Vec<SandboxDetail> = page.iter().map(|s| e2b.detail_json(s)).collect();
    let mut resp = axum::Json(body).into_response();
    if more {
        if let Some(last) = page.last() {
            if let Ok(v) = HeaderValue::from_str(&page_token(last)) {
                resp.headers_mut().insert("x-next-token", v);
            }
        }
    }
    Ok(resp)
}

/// `GET /sandboxes` (v1): every sandbox, with the same filters.
pub(super) async fn list_v1(State(e2b): State<E2b>, req: Request) -> Result<Response, RestError> {
    let f = parse_list_query(req.uri().query())?;
    let all = listed(&e2b, &f).await?;
    let body: Vec<SandboxDetail> = all.iter().map(|s| e2b.detail_json(s)).collect();
    Ok(axum::Json(body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_filter_is_decoded_like_upstream() {
        // As captured from the SDK (after the transport's own decoding happens here too).
        let q = "metadata=sandbox_test_id%3Dtest_ab%252520c%252526%25253D%26k2%3Dv%252F2\
                 &state=running%2Cpaused&order=asc&limit=1";
        let f = parse_list_query(Some(q)).expect("parses");
        assert_eq!(
            f.metadata,
            vec![
                ("sandbox_test_id".to_string(), "test_ab c&=".to_string()),
                ("k2".to_string(), "v/2".to_string()),
            ]
        );
        assert_eq!(
            f.states,
            Some(vec!["running".to_string(), "paused".to_string()])
        );
        assert!(f.ascending);
        assert_eq!(f.limit, Some(1));
    }
}
