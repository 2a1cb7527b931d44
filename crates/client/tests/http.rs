//! HTTP-level tests of the client against a tiny axum server on 127.0.0.1:0.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use cove_client::types::{
    Attachment, CreateSandboxRequest, ErrorCode, OperationLogEvent, OperationState,
};
use cove_client::{AttachEvent, Client, ClientError, DownloadOptions, UploadOptions};
use futures::StreamExt;
use serde_json::{json, Value};

/// What the fake server saw.
#[derive(Default)]
struct Seen {
    requests: Vec<String>,
    headers: Vec<HeaderMap>,
    bodies: Vec<Bytes>,
    polls: u32,
}

type Shared = Arc<Mutex<Seen>>;

async fn serve(router: Router<Shared>) -> (String, Shared) {
    let seen = Shared::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router.with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn sse(body: String) -> Response {
    ([("content-type", "text/event-stream")], body).into_response()
}

fn operation(state: &str) -> Value {
    json!({
        "id": "op-1", "kind": "create_sandbox", "state": state, "sandbox_id": "sb-1",
        "template": null, "release": null, "progress": null, "error": null,
        "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:00Z",
        "deadline": "2025-01-01T00:30:00Z"
    })
}

fn sandbox() -> Value {
    json!({
        "id": "sb-1", "template": "base", "release": 1, "state": "creating",
        "state_reason": null, "runtime": "runc",
        "resources": {"vcpus": 1, "memory_mib": 512, "pids_max": 1024},
        "env": {}, "metadata": {}, "cwd": "/home/user", "user": "user",
        "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:00Z"
    })
}

fn command(exit_code: i32) -> Value {
    json!({
        "id": "cmd-1", "sandbox_id": "sb-1", "argv": ["sh"], "user": "user", "cwd": "/",
        "pid": 9, "state": "exited", "exit_code": exit_code, "signal": null,
        "timed_out": false, "truncated": false, "output_bytes": 5, "stdin_open": false,
        "started_at": "2025-01-01T00:00:00Z", "ended_at": "2025-01-01T00:00:01Z"
    })
}

fn attachment(base: &str) -> Attachment {
    Attachment {
        url: format!("{base}/v1/attach/cmd-1"),
        token: "att-token".into(),
        expires_at: "2030-01-01T00:00:00Z".parse().unwrap(),
    }
}

#[tokio::test]
async fn error_bodies_become_api_errors() {
    let router = Router::new().route(
        "/v1/sandboxes/{id}",
        get(|Path(id): Path<String>| async move {
            let body = json!({"code": "sandbox_not_found", "message": format!("no sandbox {id}"),
                "request_id": "req-1"});
            (StatusCode::NOT_FOUND, Json(body))
        }),
    );
    let (base, _) = serve(router).await;
    let client = Client::new(&base, "tok").unwrap();
    let err = client.get_sandbox("sb-x").await.unwrap_err();
    let body = err.api_body().expect("api error");
    assert_eq!(body.code, ErrorCode::SandboxNotFound);
    assert_eq!(err.status(), Some(404));
    assert_eq!(
        err.to_string(),
        "sandbox_not_found: no sandbox sb-x (request req-1)"
    );

    // A route the fake server lacks answers 404 with an empty body: not an API error.
    let err = client.templates().await.unwrap_err();
    assert!(
        matches!(err, ClientError::Status { status: 404, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn transport_errors_are_not_api_errors() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = Client::new(&format!("http://{addr}"), "tok").unwrap();
    let err = client.health().await.unwrap_err();
    assert!(matches!(err, ClientError::Transport(_)), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn create_sends_token_body_and_idempotency_key() {
    let router = Router::new().route(
        "/v1/sandboxes",
        post(
            |State(seen): State<Shared>, headers: HeaderMap, body: Bytes| async move {
                let mut seen = seen.lock().unwrap();
                seen.headers.push(headers);
                seen.bodies.push(body);
                (
                    StatusCode::ACCEPTED,
                    Json(json!({"sandbox": sandbox(), "operation": operation("pending")})),
                )
            },
        ),
    );
    let (base, seen) = serve(router).await;
    let client = Client::new(&base, "tok").unwrap();
    let request = CreateSandboxRequest {
        template: Some("base".into()),
        ..Default::default()
    };
    let created = client
        .create_sandbox(&request, Some("key-1"))
        .await
        .unwrap();
    assert_eq!(created.sandbox.id, "sb-1");
    assert_eq!(created.operation.state, OperationState::Pending);

    let seen = seen.lock().unwrap();
    assert_eq!(seen.headers[0]["authorization"], "Bearer tok");
    assert_eq!(seen.headers[0]["idempotency-key"], "key-1");
    let body: Value = serde_json::from_slice(&seen.bodies[0]).unwrap();
    assert_eq!(body["template"], "base");
}

#[tokio::test]
async fn wait_operation_long_polls_until_final() {
    let router = Router::new().route(
        "/v1/operations/{id}",
        get(
            |State(seen): State<Shared>, Query(q): Query<HashMap<String, String>>| async move {
                let state = {
                    let mut seen = seen.lock().unwrap();
                    seen.requests
                        .push(q.get("wait").cloned().unwrap_or_default());
                    seen.polls += 1;
                    if seen.polls < 3 {
                        "running"
                    } else {
                        "failed"
                    }
                };
                // Answer slowly enough that the client does not throttle itself.
                tokio::time::sleep(Duration::from_millis(200)).await;
                Json(operation(state))
            },
        ),
    );
    let (base, seen) = serve(router).await;
    let client = Client::new(&base, "tok").unwrap();
    let op = client
        .wait_operation("op-1", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(op.state, OperationState::Failed);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.polls, 3);
    assert!(
        seen.requests.iter().all(|w| w == "30s"),
        "{:?}",
        seen.requests
    );
}

#[tokio::test]
async fn wait_operation_times_out() {
    let router = Router::new().route(
        "/v1/operations/{id}",
        get(|| async { Json(operation("running")) }),
    );
    let (base, _) = serve(router).await;
    let client = Client::new(&base, "tok").unwrap();
    let err = client
        .wait_operation("op-1", Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::WaitTimeout { .. }), "{err:?}");
}

/// The first connection drops after 3 bytes; the second resends from offset 1 (overlap) and
/// ends with the exit event: the caller sees every byte exactly once.
#[tokio::test]
async fn attach_decodes_and_resumes_after_a_drop() {
    let router = Router::new().route(
        "/v1/attach/{cid}",
        get(
            |State(seen): State<Shared>,
             headers: HeaderMap,
             Query(q): Query<HashMap<String, String>>| async move {
                let mut seen = seen.lock().unwrap();
                seen.headers.push(headers);
                let offset = q.get("offset").cloned().unwrap_or_default();
                seen.requests.push(offset.clone());
                let exit = command(3);
                match offset.as_str() {
                    "0" => sse(
                        "event: stdout\nid: 3\ndata: {\"offset\":0,\"len\":3,\"data\":\"aGVs\"}\n\n"
                            .into(),
                    ),
                    _ => sse(format!(
                        ": keep-alive\n\n\
                         event: stdout\nid: 5\ndata: {{\"offset\":1,\"len\":4,\"data\":\"ZWxsbw==\"}}\n\n\
                         event: stderr\nid: 8\ndata: {{\"offset\":5,\"len\":3,\"data\":\"ZXJy\"}}\n\n\
                         event: exit\ndata: {exit}\n\n"
                    )),
                }
            },
        ),
    );
    let (base, seen) = serve(router).await;
    let client = Client::new(&base, "mgmt").unwrap();
    let events: Vec<_> = client.attach(&attachment(&base), 0).collect().await;
    let events: Vec<AttachEvent> = events.into_iter().map(|e| e.unwrap()).collect();
    assert_eq!(
        events[..3],
        [
            AttachEvent::Stdout {
                offset: 0,
                data: Bytes::from_static(b"hel")
            },
            AttachEvent::Stdout {
                offset: 3,
                data: Bytes::from_static(b"lo")
            },
            AttachEvent::Stderr {
                offset: 5,
                data: Bytes::from_static(b"err")
            },
        ]
    );
    let AttachEvent::Exit(cmd) = &events[3] else {
        panic!("expected exit")
    };
    assert_eq!(cmd.exit_code, Some(3));
    assert_eq!(events.len(), 4);

    let seen = seen.lock().unwrap();
    assert_eq!(seen.requests, ["0", "3"]);
    assert_eq!(seen.headers[0]["authorization"], "Bearer att-token");
}

#[tokio::test]
async fn attach_gives_up_on_api_errors() {
    let router = Router::new().route(
        "/v1/attach/{cid}",
        get(|State(seen): State<Shared>| async move {
            seen.lock().unwrap().polls += 1;
            let body = json!({"code": "unauthorized", "message": "token revoked",
                "request_id": "req-2"});
            (StatusCode::UNAUTHORIZED, Json(body))
        }),
    );
    let (base, seen) = serve(router).await;
    let client = Client::new(&base, "mgmt").unwrap();
    let events: Vec<_> = client.attach(&attachment(&base), 0).collect().await;
    assert_eq!(events.len(), 1);
    let err = events.into_iter().next().unwrap().unwrap_err();
    assert_eq!(err.api_body().unwrap().code, ErrorCode::Unauthorized);
    assert_eq!(seen.lock().unwrap().polls, 1);
}

#[tokio::test]
async fn stdin_write_and_close_go_to_the_data_plane() {
    async fn record(
        State(seen): State<Shared>,
        Path((cid, leaf)): Path<(String, String)>,
        headers: HeaderMap,
        body: Bytes,
    ) -> StatusCode {
        let mut seen = seen.lock().unwrap();
        seen.requests.push(format!("{cid}/{leaf}"));
        seen.headers.push(headers);
        seen.bodies.push(body);
        StatusCode::NO_CONTENT
    }
    let router = Router::new().route("/v1/attach/{cid}/{leaf}", post(record));
    let (base, seen) = serve(router).await;
    let client = Client::new(&base, "mgmt").unwrap();
    let att = attachment(&base);
    client
        .stdin_write(&att, Bytes::from_static(b"input"))
        .await
        .unwrap();
    client.stdin_close(&att).await.unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.requests, ["cmd-1/stdin", "cmd-1/stdin:close"]);
    assert_eq!(seen.bodies[0], "input");
    assert_eq!(seen.headers[1]["authorization"], "Bearer att-token");
}

#[tokio::test]
async fn files_upload_and_download_stream() {
    let router =
        Router::new().route(
            "/v1/sandboxes/{id}/files",
            put(
                |State(seen): State<Shared>,
                 Query(q): Query<HashMap<String, String>>,
                 body: Bytes| async move {
                    let mut seen = seen.lock().unwrap();
                    seen.requests.push(format!("{}:{}", q["path"], q["mode"]));
                    let size = body.len();
                    seen.bodies.push(body);
                    Json(
                        json!({"name": "f", "path": q["path"], "type": "file", "size": size,
                    "mode": 420, "owner": "user", "group": "user",
                    "mtime": "2025-01-01T00:00:00Z", "symlink_target": null}),
                    )
                },
            )
            .get(|Query(q): Query<HashMap<String, String>>| async move {
                let chunks =
                    (0..4).map(move |i| Ok::<_, std::io::Error>(Bytes::from(vec![b'a' + i; 1000])));
                let _ = q;
                Body::from_stream(futures::stream::iter(chunks))
            }),
        );
    let (base, seen) = serve(router).await;
    let client = Client::new(&base, "tok").unwrap();

    let chunks = futures::stream::iter(
        (0..3).map(|_| Ok::<_, std::io::Error>(Bytes::from_static(b"chunk"))),
    );
    let options = UploadOptions {
        user: None,
        mode: Some(0o644),
    };
    let info = client
        .upload(
            "sb-1",
            "/tmp/f",
            cove_client::Body::wrap_stream(chunks),
            &options,
        )
        .await
        .unwrap();
    assert_eq!(info.size, 15);
    assert_eq!(seen.lock().unwrap().requests, ["/tmp/f:420"]);

    let stream = client
        .download("sb-1", "/tmp/f", &DownloadOptions::default())
        .await
        .unwrap();
    let chunks: Vec<Bytes> = stream.map(|c| c.unwrap()).collect().await;
    let all: Vec<u8> = chunks.concat();
    assert_eq!(all.len(), 4000);
    assert_eq!(all[3999], b'd');
}

#[tokio::test]
async fn operation_logs_end_with_done() {
    let router = Router::new().route(
        "/v1/operations/{id}/logs",
        get(|| async {
            let done = json!({"type": "done", "operation": operation("succeeded")});
            sse(format!(
                "event: log\ndata: {{\"type\":\"log\",\"seq\":1,\"line\":\"step 1\"}}\n\n\
                 event: progress\ndata: {{\"type\":\"progress\",\"percent\":50,\"phase\":\"pack\"}}\n\n\
                 event: done\ndata: {done}\n\n"
            ))
        }),
    );
    let (base, _) = serve(router).await;
    let client = Client::new(&base, "tok").unwrap();
    let events: Vec<_> = client
        .operation_logs("op-1", None)
        .map(|e| e.unwrap())
        .collect()
        .await;
    assert_eq!(events.len(), 3);
    assert_eq!(
        events[0],
        OperationLogEvent::Log {
            seq: 1,
            line: "step 1".into()
        }
    );
    assert!(matches!(
        events[1],
        OperationLogEvent::Progress { percent: 50, .. }
    ));
    let OperationLogEvent::Done { operation } = &events[2] else {
        panic!("expected done")
    };
    assert_eq!(operation.state, OperationState::Succeeded);
}
