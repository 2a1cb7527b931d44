//! Command creates retried with an `Idempotency-Key` against a real server and runc: a client
//! that drops the connection before reading the answer and retries gets the one command the
//! first request started (one process), with a new attachment token while the previous one
//! is refused; another body under the same key is `409 idempotency_mismatch`.

use std::io::Write as _;
use std::time::Duration;

use cove_e2e::{client, delete, sandbox, server, sh};
use serde_json::{json, Value};

const KEY: &str = "retry-e2e-1";

fn api() -> reqwest::Client {
    reqwest::Client::new()
}

async fn create(sb: &str, key: &str, body: &Value) -> (u16, Value) {
    let s = server();
    let resp = api()
        .post(format!("{}/v1/sandboxes/{sb}/commands", s.api_url))
        .bearer_auth(&s.token)
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("json body"))
}

async fn attach_status(att: &Value) -> u16 {
    api()
        .get(att["url"].as_str().expect("url"))
        .bearer_auth(att["token"].as_str().expect("token"))
        .send()
        .await
        .expect("attach")
        .status()
        .as_u16()
}

/// Sends the create on a raw connection and closes it without reading a byte of the answer.
fn send_and_drop(sb: &str, body: &Value) {
    let s = server();
    let addr = s.api_url.trim_start_matches("http://");
    let body = body.to_string();
    let mut conn = std::net::TcpStream::connect(addr).expect("connect to loopback");
    assert!(conn.peer_addr().expect("peer").ip().is_loopback());
    write!(
        conn,
        "POST /v1/sandboxes/{sb}/commands HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Idempotency-Key: {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        s.token,
        body.len()
    )
    .expect("write request");
    conn.shutdown(std::net::Shutdown::Both).expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_create_retried_by_key_runs_once() {
    let c = client();
    let sb = sandbox(&c, "tiny").await;
    let body = json!({"shell": "echo ran >> /home/user/runs; sleep 1; echo done"});
    send_and_drop(&sb, &body);

    // The retry answers with the first request's command, however far it had got.
    let (status, first) = create(&sb, KEY, &body).await;
    assert_eq!(status, 201, "{first}");
    let cid = first["command"]["id"].as_str().expect("id").to_string();
    let (status, again) = create(&sb, KEY, &body).await;
    assert_eq!(status, 201, "{again}");
    assert_eq!(again["command"]["id"], cid.as_str());
    assert_ne!(again["attachment"]["token"], first["attachment"]["token"]);
    assert_eq!(attach_status(&again["attachment"]).await, 200);
    assert_eq!(attach_status(&first["attachment"]).await, 401);

    let (status, other) = create(&sb, KEY, &json!({"shell": "echo another"})).await;
    assert_eq!(status, 409, "{other}");
    assert_eq!(other["code"], "idempotency_mismatch");
    assert!(other["request_id"].is_string());

    // One process: wait for the command to end, then count its runs.
    let done = c
        .get_command(&sb, &cid, Some(Duration::from_secs(20)))
        .await
        .expect("wait");
    assert_eq!(done.exit_code, Some(0));
    let runs = sh(&c, &sb, "cat /home/user/runs").await;
    assert_eq!(runs.stdout_text(), "ran\n");
    let listed = c.list_commands(&sb).await.expect("list");
    assert_eq!(listed.commands.len(), 2, "the retried command and `cat`");
    delete(&c, &sb).await;
}
