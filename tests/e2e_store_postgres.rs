//! `cove server --store postgres://...` end to end: the server of this binary keeps its state in
//! a PostgreSQL schema of its own (in the database at `COVE_TEST_POSTGRES_URL`, which
//! scripts/test.sh points at a throwaway cluster) and runs real runc sandboxes: a release
//! build, an idempotent create, a command, pause/resume with their events, cursor paging and
//! delete, each checked through the API and in the PostgreSQL tables themselves.

use std::process::Command as Process;
use std::sync::OnceLock;
use std::time::Duration;

use cove_api_types::{CreateSandboxRequest, OperationState, SandboxState};
use cove_client::{Client, ListSandboxes};
use cove_e2e::{client_of, delete, ensure_template, server_with, sh, Server};

const URL_VAR: &str = "COVE_TEST_POSTGRES_URL";

/// The PostgreSQL URL; `None` (skip, with the reason printed) outside CI, a failure in CI.
fn postgres_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").unwrap_or_default();
            assert!(
                ci.is_empty() || ci == "false" || ci == "0",
                "{URL_VAR} is unset under CI (scripts/test.sh starts a cluster and sets it)"
            );
            eprintln!("skipping: {URL_VAR} is unset");
            None
        }
    }
}

/// The schema this binary's server uses, created on first use.
fn schema() -> &'static str {
    static SCHEMA: OnceLock<String> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let name = format!(
            "cove_e2e_{}_{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        psql(&format!("CREATE SCHEMA {name}"));
        name
    })
}

/// Runs one SQL statement with `psql` against the suite's database; returns its rows as text.
fn psql(sql: &str) -> String {
    let url = std::env::var(URL_VAR).expect("postgres url");
    let out = Process::new("psql")
        .args([url.as_str(), "-v", "ON_ERROR_STOP=1", "-tAc", sql])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn on_postgres(cfg: &mut cove_server::Config) {
    let url = std::env::var(URL_VAR).expect("postgres url");
    let sep = if url.contains('?') { '&' } else { '?' };
    cfg.store = Some(format!("{url}{sep}options[search_path]={}", schema()));
}

fn srv() -> &'static Server {
    server_with(on_postgres)
}

async fn succeeded(c: &Client, op: &str) {
    let op = c
        .wait_operation(op, Duration::from_secs(120))
        .await
        .expect("operation ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_postgres_runs_the_sandbox_lifecycle() {
    if postgres_url().is_none() {
        return;
    }
    let c = client_of(srv());
    let s = schema();
    ensure_template(&c, "tiny").await;
    assert_eq!(
        psql(&format!(
            "SELECT state FROM {s}.releases WHERE template = 'tiny' ORDER BY number DESC LIMIT 1"
        )),
        "ready"
    );

    // An idempotent create: the same key and body answer the same operation.
    let req = CreateSandboxRequest {
        template: Some("tiny".into()),
        ..Default::default()
    };
    let first = c
        .create_sandbox(&req, Some("pg-e2e"))
        .await
        .expect("create");
    let again = c
        .create_sandbox(&req, Some("pg-e2e"))
        .await
        .expect("replay");
    assert_eq!(again.operation.id, first.operation.id);
    succeeded(&c, &first.operation.id).await;
    let id = first.sandbox.id.clone();
    assert_eq!(
        psql(&format!(
            "SELECT state FROM {s}.sandboxes WHERE id = '{id}'"
        )),
        "running"
    );

    let out = sh(&c, &id, "echo hello from postgres").await;
    assert_eq!(out.stdout_text(), "hello from postgres\n");

    succeeded(&c, &c.pause_sandbox(&id).await.expect("pause").id).await;
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Paused
    );
    succeeded(&c, &c.resume_sandbox(&id).await.expect("resume").id).await;
    let kinds = psql(&format!(
        "SELECT string_agg(type, ',' ORDER BY seq) FROM {s}.events WHERE sandbox_id = '{id}'"
    ));
    assert_eq!(
        kinds,
        "sandbox.created,sandbox.running,sandbox.paused,sandbox.resumed"
    );
    let seqs = psql(&format!(
        "SELECT count(*) = max(seq) - min(seq) + 1 FROM {s}.events"
    ));
    assert_eq!(seqs, "t", "event seqs have no gaps");

    // A second sandbox, then page through both with a cursor.
    let second = c.create_sandbox(&req, None).await.expect("create");
    succeeded(&c, &second.operation.id).await;
    let page1 = c
        .list_sandboxes(&ListSandboxes {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .expect("page 1");
    let page2 = c
        .list_sandboxes(&ListSandboxes {
            limit: Some(1),
            cursor: page1.next_cursor.clone(),
            ..Default::default()
        })
        .await
        .expect("page 2");
    let mut listed: Vec<String> = page1
        .sandboxes
        .iter()
        .chain(&page2.sandboxes)
        .map(|s| s.id.clone())
        .collect();
    listed.sort();
    let mut want = vec![id.clone(), second.sandbox.id.clone()];
    want.sort();
    assert_eq!(listed, want);

    delete(&c, &id).await;
    delete(&c, &second.sandbox.id).await;
    assert_eq!(
        psql(&format!(
            "SELECT state FROM {s}.sandboxes WHERE id = '{id}'"
        )),
        "deleted"
    );
}
