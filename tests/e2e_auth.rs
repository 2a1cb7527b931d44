//! Authentication of both listeners and the shape of error bodies.

use cove_api_types::{CreateCommandRequest, ErrorBody, ErrorCode};
use cove_e2e::{client, delete, sandbox, server};

async fn error_of(resp: reqwest::Response) -> (u16, ErrorBody) {
    let status = resp.status().as_u16();
    let rid = resp
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body: ErrorBody = resp.json().await.expect("JSON error body");
    assert!(!body.request_id.is_empty(), "error body has a request id");
    assert_eq!(
        rid.as_deref(),
        Some(body.request_id.as_str()),
        "header and body agree"
    );
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_api_needs_the_token() {
    let s = server();
    let http = reqwest::Client::new();
    let url = format!("{}/v1/sandboxes", s.api_url);

    let (status, body) = error_of(http.get(&url).send().await.expect("send")).await;
    assert_eq!((status, body.code), (401, ErrorCode::Unauthorized));

    let wrong = http
        .get(&url)
        .bearer_auth("cove_wrong")
        .send()
        .await
        .expect("send");
    let (status, body) = error_of(wrong).await;
    assert_eq!((status, body.code), (401, ErrorCode::Unauthorized));

    let ok = http
        .get(&url)
        .bearer_auth(&s.token)
        .send()
        .await
        .expect("send");
    assert_eq!(ok.status().as_u16(), 200);

    let health = http
        .get(format!("{}/healthz", s.api_url))
        .send()
        .await
        .expect("send");
    assert_eq!(health.status().as_u16(), 200);

    let token_file = s.data_dir.join("admin.token");
    let meta = std::fs::metadata(&token_file).expect("token file");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(
        std::fs::read_to_string(&token_file).expect("read").trim(),
        s.token
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachment_tokens_are_scoped_to_one_command() {
    let c = client();
    let s = server();
    let id = sandbox(&c, "tiny").await;
    let start = |shell: &str| CreateCommandRequest {
        shell: Some(shell.into()),
        ..Default::default()
    };
    let a = c
        .create_command(&id, &start("echo secret-a"))
        .await
        .expect("a");
    let b = c
        .create_command(&id, &start("echo secret-b"))
        .await
        .expect("b");
    let http = reqwest::Client::new();

    // B's URL with A's token: refused.
    let resp = http
        .get(&b.attachment.url)
        .bearer_auth(&a.attachment.token)
        .send()
        .await
        .expect("send");
    let (status, body) = error_of(resp).await;
    assert_eq!((status, body.code), (401, ErrorCode::Unauthorized));
    // No token: refused. The management token is not an attachment token either.
    let resp = http.get(&a.attachment.url).send().await.expect("send");
    assert_eq!(resp.status().as_u16(), 401);
    let resp = http
        .get(&a.attachment.url)
        .bearer_auth(&s.token)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 401);
    // Its own token works.
    let resp = http
        .get(&a.attachment.url)
        .bearer_auth(&a.attachment.token)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);
    drop(resp);

    // A new attachment revokes the old token.
    let renewed = c.new_attachment(&id, &a.command.id).await.expect("renew");
    let resp = http
        .get(&a.attachment.url)
        .bearer_auth(&a.attachment.token)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 401);
    let out = cove_e2e::collect(&c, &renewed, 0, std::time::Instant::now()).await;
    assert_eq!(out.stdout_text(), "secret-a\n");

    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c15_caller_errors_are_4xx_with_codes() {
    let c = client();
    let s = server();
    let id = sandbox(&c, "tiny").await;
    let http = reqwest::Client::new();
    let post = |path: String, body: &'static str| {
        http.post(format!("{}{path}", s.api_url))
            .bearer_auth(&s.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };

    let (st, b) = error_of(
        post("/v1/sandboxes".into(), "{not json")
            .await
            .expect("send"),
    )
    .await;
    assert_eq!((st, b.code), (400, ErrorCode::InvalidArgument));
    let (st, b) = error_of(
        post("/v1/sandboxes".into(), r#"{"timeout": -1}"#)
            .await
            .expect("send"),
    )
    .await;
    assert_eq!((st, b.code), (400, ErrorCode::InvalidArgument));
    assert!(b.message.contains("timeout"), "{}", b.message);
    let body = r#"{"template":"tiny","resources":{"vcpus":-1}}"#;
    let (st, b) = error_of(post("/v1/sandboxes".into(), body).await.expect("send")).await;
    assert_eq!((st, b.code), (400, ErrorCode::InvalidArgument));
    assert!(b.message.contains("resources.vcpus"), "{}", b.message);

    let cmds = format!("/v1/sandboxes/{id}/commands");
    let (st, b) = error_of(
        post(cmds.clone(), r#"{"shell":"true","timeout_s":-1}"#)
            .await
            .expect("send"),
    )
    .await;
    assert_eq!((st, b.code), (400, ErrorCode::InvalidArgument));
    let (st, _) = error_of(post(cmds.clone(), r#"{}"#).await.expect("send")).await;
    assert_eq!(st, 400);

    let missing = "/v1/sandboxes/sb-doesnotexist0000/commands".to_string();
    let (st, b) = error_of(post(missing, r#"{"shell":"true"}"#).await.expect("send")).await;
    assert_eq!((st, b.code), (404, ErrorCode::SandboxNotFound));
    let resp = http
        .get(format!("{}/v1/sandboxes/does-not-exist", s.api_url))
        .bearer_auth(&s.token)
        .send()
        .await
        .expect("send");
    let (st, b) = error_of(resp).await;
    assert_eq!((st, b.code), (404, ErrorCode::SandboxNotFound));

    // A 10 MiB command string: 413.
    let big = format!(r#"{{"shell":"echo {}"}}"#, "a".repeat(10 << 20));
    let resp = http
        .post(format!("{}{cmds}", s.api_url))
        .bearer_auth(&s.token)
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .expect("send");
    let (st, b) = error_of(resp).await;
    assert_eq!((st, b.code), (413, ErrorCode::PayloadTooLarge));

    delete(&c, &id).await;
}

/// C15, the remaining rows: unknown sandboxes on every surface, calls on a paused sandbox, and
/// oversized headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c15_unknown_paused_and_oversized_requests_are_4xx() {
    let c = client();
    let s = server();
    let http = reqwest::Client::new();
    let get = |path: String| {
        http.get(format!("{}{path}", s.api_url))
            .bearer_auth(&s.token)
            .send()
    };

    for path in [
        "/v1/sandboxes/does-not-exist".to_string(),
        "/v1/sandboxes/does-not-exist/files?path=/etc/hostname".to_string(),
        "/v1/sandboxes/does-not-exist/files:watch?path=/tmp".to_string(),
        "/v1/sandboxes/does-not-exist/commands".to_string(),
    ] {
        let (st, b) = error_of(get(path.clone()).await.expect("send")).await;
        assert_eq!((st, b.code), (404, ErrorCode::SandboxNotFound), "{path}");
    }

    // A paused sandbox: commands and files are 409 sandbox_not_running, never 404.
    let id = sandbox(&c, "tiny").await;
    let op = c.pause_sandbox(&id).await.expect("pause");
    c.wait_operation(&op.id, std::time::Duration::from_secs(60))
        .await
        .expect("paused");
    let resp = http
        .post(format!("{}/v1/sandboxes/{id}/commands", s.api_url))
        .bearer_auth(&s.token)
        .json(&serde_json::json!({"shell": "true"}))
        .send()
        .await
        .expect("send");
    let (st, b) = error_of(resp).await;
    assert_eq!((st, b.code), (409, ErrorCode::SandboxNotRunning));
    let (st, b) = error_of(
        get(format!("/v1/sandboxes/{id}/files?path=/etc/hostname"))
            .await
            .expect("send"),
    )
    .await;
    assert_eq!((st, b.code), (409, ErrorCode::SandboxNotRunning));
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        cove_api_types::SandboxState::Paused
    );

    // A 64 KiB header value: 431 with a JSON body; then the server still answers normally.
    let resp = http
        .get(format!("{}/v1/sandboxes", s.api_url))
        .bearer_auth(&s.token)
        .header("x-big", "a".repeat(64 * 1024))
        .send()
        .await
        .expect("send");
    let (st, b) = error_of(resp).await;
    assert_eq!((st, b.code), (431, ErrorCode::HeadersTooLarge));
    // 10 000 headers: hyper refuses them (431) before our code runs; no 5xx, no reset.
    let mut req = http
        .get(format!("{}/v1/sandboxes", s.api_url))
        .bearer_auth(&s.token);
    for i in 0..10_000 {
        req = req.header(format!("x-h{i}"), "v");
    }
    let status = req
        .send()
        .await
        .expect("an answer, not a reset")
        .status()
        .as_u16();
    assert!(status == 431 || status == 400, "status {status}");
    let ok = get("/v1/sandboxes".to_string()).await.expect("send");
    assert_eq!(ok.status().as_u16(), 200);

    let op = c.resume_sandbox(&id).await.expect("resume");
    c.wait_operation(&op.id, std::time::Duration::from_secs(60))
        .await
        .expect("resumed");
    delete(&c, &id).await;
}
