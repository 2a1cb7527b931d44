//! Builds from a template file follow their egress policy: with the fake internet of this test
//! binary (namespaces it makes, `cove_network::lab`) as the gateway's upstream, a `RUN` that
//! fetches from an allowed host (`curl` in `base`, from the shared template cache) builds, and the same `RUN` with that host denied fails with
//! its stderr in the build log and leaves no release. Needs root.

use std::time::Duration;

use cove_api_types::{CreateSandboxRequest, EgressPolicy, OperationState};
use cove_client::Client;
use cove_e2e::{build_file as build, delete, ensure_template, sh};
use cove_network::lab::WEB_B;

/// The server of this binary: sandbox networks on, upstream the fake internet.
fn tweak(cfg: &mut cove_server::Config) {
    cove_e2e::lab::use_fake_internet(cfg);
}

fn c() -> Client {
    cove_e2e::client_of(cove_e2e::server_with(tweak))
}

/// A `RUN` that downloads from the lab's web server B by address (`curl` of `base`) and
/// prints what it got.
fn fetch_file() -> String {
    format!("FROM base\nRUN curl -fsS -m 8 -o /fetched.txt http://{WEB_B}/ && cat /fetched.txt\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_reaches_an_allowed_host_and_not_a_denied_one() {
    let c = c();
    ensure_template(&c, "base").await;
    let file = fetch_file();

    // Internet off, the host allowed: the download works and lands in the release.
    let allowed =
        EgressPolicy::parse(false, &[WEB_B.to_string()], &[] as &[String]).expect("policy");
    let (state, number, log) = build(&c, "fetch-allowed", &file, allowed).await;
    assert_eq!(state, OperationState::Succeeded, "{log:#?}");
    assert!(
        log.iter()
            .any(|l| *l == format!("network: internet off; allow {WEB_B}")),
        "{log:#?}"
    );
    assert!(
        log.iter().any(|l| l.starts_with("stdout: site=web-b")),
        "{log:#?}"
    );
    let resp = c
        .create_sandbox(
            &CreateSandboxRequest {
                template: Some("fetch-allowed".into()),
                release: Some(number),
                ..Default::default()
            },
            None,
        )
        .await
        .expect("create");
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(120))
        .await
        .expect("create ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
    let id = resp.sandbox.id;
    let out = sh(&c, &id, "cat /fetched.txt").await;
    assert!(out.stdout_text().starts_with("site=web-b"), "{out:?}");
    delete(&c, &id).await;

    // The internet on but the host denied: the RUN fails and its stderr is in the log.
    let denied = EgressPolicy::parse(true, &[] as &[String], &[WEB_B.to_string()]).expect("policy");
    let (state, _, log) = build(&c, "fetch-denied", &file, denied).await;
    assert_eq!(state, OperationState::Failed, "{log:#?}");
    assert!(
        log.iter()
            .any(|l| l.starts_with("stderr: ") && l.contains("curl")),
        "the RUN's stderr is in the log: {log:#?}"
    );
    assert!(
        log.iter().any(|l| l.contains("exited with code")),
        "{log:#?}"
    );
    // The release failed, and as the template's first build it leaves no template (no
    // sandbox can use it; the name is free again).
    let gone = c.template("fetch-denied").await.expect_err("no template");
    assert_eq!(
        gone.api_body().map(|b| b.code),
        Some(cove_api_types::ErrorCode::TemplateNotFound)
    );
}
